"""RampDriver: a closed-loop concurrency ramp (or open-loop rate levels, or an SLO search)
against every arm at once.

For each level C (plan.levels): every arm gets exactly C streams, each sending its next request
as soon as the previous one ends (closed loop), for plan.level_duration_s or until
plan.requests_per_level requests were sent per arm. The first plan.settle_s of a level are left
out of its statistics (the previous population drains, the batch fills). When the level stops
issuing, the requests in flight finish (drain) so slow requests are not cut out of the
percentiles; then the level's LevelResult per arm is computed (analysis.levels), knees are
checked (analysis.knee), and everything leaves as events (RampStarted, LevelStarted,
LevelProgress, RequestFinished per request, KneeCalled, LevelFinished, RampFinished): the ramp
writes nothing itself. Then `host.between_levels(i, restart)` runs (launch mode restarts
servers there), then an optional POST /flush_cache (--flush-cache: before the first level too).
A first level whose prompts the server had cached already (a second ramp with the same seed)
is said in a mark and its note, with --flush-cache offered (_warm_cache). The ramp sees the session only through
source.RampHost.

Durations in the plan (level duration, settle) are in the arms' time: simulated seconds for a
sped-up simulator (ArmInfo.time_scale = X), so the wall time of a level is duration / X.
Client durations are recorded x the arm's scale; for a simulator that cannot keep up with its
--speed on a busy CPU, the scale used is the pace it really kept (server_pace, measured from its
own meta_info stamps; recorded per level in session.json load_client[].server_pace).

All HTTP runs on LoadLoop (its own thread and event loop); this coroutine, on the session's
loop, only starts levels, emits events and polls progress once a second. Each finished request
is handed over to the session's loop as it finishes (loop.call_soon_threadsafe, one wake-up for
however many finished since the last), so its requests.csv row is written within milliseconds:
a kill -9 loses at most the requests in flight (benchmarks/kill9_rows.py counts them).

A server that refuses the load is not hammered (see Backoff): after any 4xx/5xx answer (a 429 or
503, but also the 404s of a path it does not serve or the 500s of a broken server), or no answer
at all (refused, reset), each stream waits before its next request, honouring Retry-After (capped)
or backing off exponentially with jitter (50 ms doubling to 1 s); a success resets it. The failed requests are
recorded as failed (requests.csv keeps their HTTP status), the time spent waiting is counted per
arm (session.json load_client[].backoff), and a level that spent most of it waiting says so in
its invalid_reason. A 401/403 is not retried at all: the arm's level stops at the first one, one
Marker says why, and that arm gets no more requests for the rest of the ramp (`denied`; the
command exits 2). A server that stopped answering is named in the level's reason ("server at URL
stopped answering: connection refused"), never the client; an arm whose server is gone when the
ramp ends is in `gone` (the command exits 3).

Multi-turn conversations (plan.turns > 1): each stream runs one conversation at a time (load/
workload.py Conversation: each turn resends the history, the server's reply included), waits
plan.think_time_s between two turns (the time it thinks is handed to the level's statistics,
which count only the streams not thinking), and starts the next conversation when one ends.

Open-loop levels (plan.rates): level i offers rates[i] requests per second per arm, at seeded
arrival times (load/workload.py arrival_times; recorded per request as t_scheduled), each sent
when it is due whatever is in flight, at most plan.max_concurrency at once (the rest wait for a
slot, still counted in the backlog). Once the window has run half its length, the backlog
(arrived and not finished) over the second half of what ran so far is checked every poll
(analysis/levels.py backlog_trend); when it grows, the arm is over-saturated: its level is cut
short there (requests in flight and waiting cancelled), marked knee = over_saturation with the
trend in its note, and never taken for a steady state (not valid). A level that ran its course
is checked once more over its window's second half.

A trace (plan.trace, load/trace.py) is one open-loop level whose arrivals are the trace's (divided
by plan.trace_speed, in the arm's seconds) and whose requests have the trace's lengths; it runs to
its last arrival and is never cut short for over-saturation (its backlog is what the trace did).

SLO search (plan.search, one arm): the levels are chosen as the ramp goes by
analysis/search.py's policy (double, then bisect on the Wilson lower bound of SLO attainment);
the search's state travels in the arm's KneesSummary.search.

The package, one idea a module: driver.py (RampDriver: controls, the run loop, one level run and
judged into events, time scales), closed.py (the closed-loop level), open_loop.py (the open-loop
level, its backlog watch and over-saturation), judge.py (a level's accounting, failures explained,
knees called), sending.py (what both runners share on the load loop), state.py (_LevelState),
outcomes.py (Backoff and what a request's end says) and pace.py (server_pace, request_pace).
"""

from specmon.session.ramp.driver import INFO_WAIT_S, PACE_FROM_STREAMS, RampDriver
from specmon.session.ramp.judge import BACKOFF_MOSTLY, WARM_CACHE_HIT, WARM_CACHE_MARGIN
from specmon.session.ramp.outcomes import (
    BACKOFF_FIRST_S, BACKOFF_MAX_S, RETRY_AFTER_CAP_S, Backoff, compact,
)
from specmon.session.ramp.pace import PACE_TOLERANCE, STALL_PACE_SHARE, request_pace, server_pace

__all__ = [
    "BACKOFF_FIRST_S", "BACKOFF_MAX_S", "BACKOFF_MOSTLY", "INFO_WAIT_S", "PACE_FROM_STREAMS", "PACE_TOLERANCE",
    "RETRY_AFTER_CAP_S", "STALL_PACE_SHARE", "WARM_CACHE_HIT", "WARM_CACHE_MARGIN", "Backoff", "RampDriver",
    "compact", "request_pace", "server_pace",
]
