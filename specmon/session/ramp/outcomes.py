"""How one request of a level ended, as the ramp reads it: the back-off a refused or unanswered
request earns its stream (Backoff), what an HTTP status or a lost connection says, a finished
request compacted, and an open-loop level's backlog read from its requests. Pure helpers."""

from __future__ import annotations

import random
from typing import Optional, Sequence

from specmon.load import RequestOutcome, TokenStamps

# A stream's wait after a 4xx/5xx or no answer (wall seconds): Retry-After when the server sends
# one, at most RETRY_AFTER_CAP_S; else BACKOFF_FIRST_S doubling to BACKOFF_MAX_S (README says
# 1 s), each wait drawn in [1/2, 1] of its step so C streams refused together do not come back
# together. At the cap a stream sends at most ~1.3 requests a second to a server that fails them all.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
RETRY_AFTER_CAP_S = 10.0
_DENIALS = {401: "401 Unauthorized", 403: "403 Forbidden"}
_STATUS_TEXT = {429: "429 Too Many Requests", 503: "503 Service Unavailable"}


class Backoff:
    """One stream's wait before its next request, from how its last request ended."""

    def __init__(self, rng: Optional[random.Random] = None):
        self.step = 0.0
        # random's shared generator unless given one: a Random() of its own per stream read
        # os.urandom to seed itself, ~15 us each, 1,000 at the start of a level at C=1,000
        self._rng = rng or random

    def after(self, o: RequestOutcome) -> float:
        """Seconds to wait now: 0 after a success (or a cancel); else the next back-off step."""
        refused = _refused(o)
        if not refused and o.no_answer is None:
            self.step = 0.0
            return 0.0
        self.step = min(BACKOFF_MAX_S, self.step * 2 or BACKOFF_FIRST_S)
        if refused and o.retry_after_s is not None:
            return min(o.retry_after_s, RETRY_AFTER_CAP_S)
        return self.step * self._rng.uniform(0.5, 1.0)


def _refused(o: RequestOutcome) -> bool:
    """The server answered this request with an HTTP error (4xx/5xx): the stream backs off."""
    return o.status not in ("ok", "cancelled") and o.http_status is not None and o.http_status >= 400


def _status_text(code: int) -> str:
    return _STATUS_TEXT.get(code, f"HTTP {code}")


def _lost_connection(o: RequestOutcome) -> Optional[str]:
    """Why the server dropped this request's connection (no answer, or cut mid-response); None
    when it answered (even with an error) or the request was cancelled."""
    if o.status == "cancelled":
        return None
    if o.no_answer is not None:
        return o.no_answer
    return "connection closed mid-response" if o.cut_mid_response else None


def compact(o: RequestOutcome) -> None:
    """What a finished request keeps while its level runs (its requests.csv row is written):
    the token events as load.client.TokenStamps (two arrays, as the stream wrote them from the
    start), no answer text or ids (a multi-turn stream has taken them). Called on the session's loop once the load loop is done with the request."""
    if not isinstance(o.token_events, TokenStamps):
        o.token_events = TokenStamps(o.token_events)
    o.output_ids = o.output_text = None


def _backlog_spans(outcomes: Sequence[RequestOutcome]) -> list[tuple[float, Optional[float]]]:
    """(arrival, end) wall stamps of an open-loop level's requests (end None: not finished);
    a request cancelled before it was sent left no backlog."""
    spans = []
    for o in list(outcomes):  # the load thread appends meanwhile: a copy
        if o.t_end is not None and o.t_sent is not None:
            spans.append((o.t_scheduled_wall, o.wall(o.t_end)))
        elif o.t_end is None and o.status != "cancelled":
            spans.append((o.t_scheduled_wall, None))
    return spans


def _in_flight(outcomes: Sequence[RequestOutcome]) -> int:
    return sum(1 for o in list(outcomes) if o.t_end is None and o.status != "cancelled")
