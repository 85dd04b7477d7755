"""Judging a level: each request's refusals, lost connections and 401/403 denials accounted as it
ends (_account, _deny), the level's failures explained with the server named first
(_explain_failures), a warm prefix cache found (_warm_cache), knees called (_call_knees, and the
SLO search's next level), and a ramp that never succeeded said so."""

from __future__ import annotations

import collections
from typing import Optional

from specmon.analysis.knee import knee_level, knees_summary, label_knee, plateau_knee, queueing_knee
from specmon.analysis.search import level_meets, search_step
from specmon.load import RequestOutcome
from specmon.model import ArmSpec, KneeCalled, LevelResult
from specmon.session.folder import public_url
from specmon.session.ramp.outcomes import (
    _DENIALS, BACKOFF_FIRST_S, BACKOFF_MAX_S, RETRY_AFTER_CAP_S, _lost_connection, _refused, _status_text,
)
from specmon.session.ramp.state import _LevelState
from specmon.session.source import Emit, RampHost
from specmon.sources.derive import histogram_delta
from specmon.sources.prom import Histogram, MetricsSnapshot

BACKOFF_MOSTLY = 0.5  # a level whose streams waited this share of it or more is invalid
# A first level whose prefix-cache hit rate reaches WARM_CACHE_HIT, and WARM_CACHE_MARGIN above
# what the workload shares by design, measured a cache an earlier run filled (see _warm_cache).
WARM_CACHE_HIT = 0.5
WARM_CACHE_MARGIN = 0.3


def _window_histogram(old: Optional[MetricsSnapshot], new: Optional[MetricsSnapshot], name: str) -> Optional[Histogram]:
    """A server histogram's increase between two scrapes: the observations of one level's window.
    None when either scrape is missing or the server restarted between them."""
    if old is None or new is None or new is old:
        return None
    h_new = new.histogram(name)
    if h_new is None:
        return None
    h_old = old.histogram(name)
    return h_new if h_old is None else histogram_delta(h_new, h_old)


class Judge:
    """Mixed into RampDriver (driver.py): reads its plan, arms, results and trace; writes its
    knees, denied, gone and the search's next level."""

    def _never_succeeded(self) -> Optional[str]:
        """Why the ramp measured nothing, when requests were sent and not one succeeded on any
        arm (a server that fails every request): one text naming each arm's answers; None when
        one succeeded, or none was sent (a ramp stopped before its first request ended)."""
        rows = [r for rs in self.results.values() for r in rs]
        if not rows or any(r.ok for r in rows) or not any(r.failed for r in rows):
            return None
        parts = []
        for arm, rs in self.results.items():
            failed = sum(r.failed for r in rs)
            why = next((r.invalid_reason for r in reversed(rs) if r.invalid_reason), None)
            parts.append(f"{arm}: {failed} requests failed" + (f" ({why})" if why else ""))
        return "no request of the ramp succeeded: " + "; ".join(parts)

    def _warm_cache(self, r: LevelResult) -> Optional[str]:
        """The warning for a first level whose prompts the server had cached already: its hit rate
        far above what this workload shares by design (a second ramp with the same seed on one
        server measures a warm prefix cache: low TTFT, little prefill). None when it looks cold."""
        plan = self.plan
        if r.cache_hit_rate is None or plan.turns > 1 or plan.flush_cache or self.trace is not None:
            return None  # multi-turn resends its history: hits are the workload's own
        shared = (plan.shared_prefix_len or 0) / plan.input_len if plan.input_len else 0.0
        if r.cache_hit_rate < max(WARM_CACHE_HIT, shared + WARM_CACHE_MARGIN):
            return None
        return (f"{r.arm}: {r.cache_hit_rate:.0%} of level 1's prompt tokens came from the server's prefix cache "
                f"(this workload shares {shared:.0%} by design): the server has these prompts from an earlier run "
                f"(same --seed?), so TTFT and prefill read low; run again with --flush-cache (POST /flush_cache "
                f"before each level) or another --seed")

    def _explain_failures(self, spec: ArmSpec, r: LevelResult, level: _LevelState, wall_s: float) -> None:
        """Put what the server did first in the level's reason, and take out what would blame the
        client for it: a client that waits because the server said 503, or holds nothing in
        flight because nothing answers, is not the bottleneck. Also updates `gone`."""
        name, url = spec.name, public_url(spec.url)
        blames_client = ("client held only", "server reported")
        reasons = [x for x in (r.invalid_reason or "").split("; ") if x]
        first: list[str] = []
        if name in self.denied:
            first.append(self.denied[name] if level.streams[name] else f"not sent: {self.denied[name]}")
            reasons = [x for x in reasons if x != "no request succeeded" and not x.startswith(blames_client)]
        lost = level.stream_lost[name]
        if lost and all(why is not None for why in lost.values()):
            whys = collections.Counter(why for why in lost.values())
            self.gone[name] = f"server at {url} stopped answering: {whys.most_common(1)[0][0]}"
            first.append(self.gone[name])
        elif any(why is None for why in lost.values()):
            self.gone.pop(name, None)  # it answered on this level after all
        if level.no_answer[name] and name not in self.gone:
            n = sum(level.no_answer[name].values())
            why = level.no_answer[name].most_common(1)[0][0]
            first.append(f"server at {url} did not answer {n} of {r.ok + r.failed} requests ({why})")
        if first and name not in self.denied:
            reasons = [x for x in reasons if not x.startswith(blames_client)]
        refused = level.refused[name]
        span = level.streams[name] * wall_s
        share = level.backoff_s[name] / span if span > 0 else 0.0
        if refused:
            answers = ", ".join(f"{n} answered {_status_text(code)}" for code, n in sorted(refused.items()))
            said = f"streams spent {share:.0%} of the level backing off ({answers})"
            if share >= BACKOFF_MOSTLY:
                first.append(said)
                reasons = [x for x in reasons if not x.startswith(blames_client)]
            elif any(x.startswith(blames_client) for x in reasons):
                first.append(said)  # it held fewer in flight because the server asked it to wait
                reasons = [x for x in reasons if not x.startswith(blames_client)]
        if first:
            r.valid = False
            r.invalid_reason = "; ".join(first + reasons)

    def _call_knees(self, arm: str, r: LevelResult, emit: Emit, live: RampHost, final: bool = False) -> None:
        levels = self.results[arm]
        for k in (plateau_knee(levels), queueing_knee(levels, final=final)):
            if k.confirmed_at == r.level and (arm, k.definition) not in self._called:
                self._called.add((arm, k.definition))
                r.knee_confirmed = ";".join(x for x in (r.knee_confirmed, k.definition) if x)
                at = knee_level(levels, k)
                if at is not None:  # the ramp's own rows (its final table); consumers label theirs
                    labelled = label_knee(levels, arm, at, k.definition)
                    levels[levels.index(next(x for x in levels if x.level == at))] = labelled
                emit(KneeCalled(arm=arm, definition=k.definition, concurrency=k.concurrency, detail=k.detail,
                                resolved=k.values.get("resolved"), knee_level=at, confirmed_level=r.level))
        self.knees[arm] = knees_summary(levels, live.predicted(arm),
                                        slo_ttft_s=self.plan.slo_ttft_s, slo_tpot_s=self.plan.slo_tpot_s,
                                        min_attainment=self.plan.attainment, final=final)
        plan = self.plan
        if plan.search:  # the policy names the next level from every level this arm ran
            tried = [(x.offered, level_meets(x, plan.attainment)) for x in levels]
            self._search_next, self.knees[arm].search = search_step(
                tried, start=plan.search_start, max_level=plan.search_max, rates=plan.open_loop,
                target=plan.attainment)

    def _account(self, level: _LevelState, arm: str, k: int, o: RequestOutcome, url: str,
                 open_loop: bool = False) -> bool:
        """After one request (on the load loop): the connection losses, refusals and denials it
        tells of, then the hand-over of its row. False when it was a 401/403 (the arm is denied)."""
        if o.status != "cancelled":
            level.stream_lost[arm][k] = _lost_connection(o)
        denial = _DENIALS.get(o.http_status) if o.status != "ok" else None
        if denial is not None:
            self._deny(level, arm, denial)
            self._finished(level, arm, o)
            return False
        retries = "arrivals go on as scheduled" if open_loop else "its streams back off and retry"
        if o.no_answer is not None:
            level.no_answer[arm][o.no_answer] += 1
            if sum(level.no_answer[arm].values()) == 1:
                level.notices.append(f"{arm}: server at {url} gave no answer ({o.no_answer}); {retries}")
        if _refused(o):
            level.refused[arm][o.http_status] += 1
            if sum(level.refused[arm].values()) == 1:
                how = (f"Retry-After {o.retry_after_s:g} s (waits capped at {RETRY_AFTER_CAP_S:g} s)"
                       if o.retry_after_s is not None else
                       f"{BACKOFF_FIRST_S * 1000:g} ms doubling to {BACKOFF_MAX_S:g} s")
                then = ("an open-loop level keeps its schedule (the refused requests count as failed)" if open_loop
                        else f"each stream backs off ({how}) until it answers")
                level.notices.append(f"{arm}: server answered {_status_text(o.http_status)}; {then}")
        self._finished(level, arm, o)  # after the notices: one wake-up hands over both
        return True

    def _deny(self, level: _LevelState, arm: str, denial: str) -> None:
        """The first 401/403: the arm gets no more requests, for the rest of the ramp."""
        if arm in self.denied:
            return
        spec = next(a for a in self.arms if a.name == arm)
        hint = (f"check --api-key-env (the key in ${spec.api_key_env} was refused)" if spec.api_key_env
                else "it wants an API key: pass --api-key-env VAR")
        self.denied[arm] = f"server at {public_url(spec.url)} answered {denial}: {hint}"
        level.notices.append(f"{arm}: {self.denied[arm]}; no more requests go to it")
