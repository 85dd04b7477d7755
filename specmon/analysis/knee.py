"""Where a ramp stops paying: the knee definitions, computed on finished levels of one arm.

All functions are pure: they take LevelResults (levels already flagged invalid are left out:
a level where the client was the bottleneck says nothing about the server) and return calls.
A knee is *confirmed* only when its condition holds at two consecutive valid levels; it is
called on the second of them (the confirming level, levels.csv `knee_confirmed`), and the knee's
own level gets the label (levels.csv `knee`).

D1 throughput plateau:
    eta_k = ((X_k - X_{k-1}) / (c_k - c_{k-1})) / (X_1 / c_1)
    = output tok/s added per added stream, relative to what one stream got at the first level.
    k* = first k with eta_k < 0.15 and eta_{k+1} < 0.15 (the point estimates, two consecutive
    levels: the knee rule); the knee is c_{k*-1}, the last level that still paid.
    How sure that is: X_k carries sampling noise (LevelResult.output_tok_s_se, batch means of
    5 s batches, analysis/levels.py), and with steps of 2 streams a 2 % wobble of X is a swing
    of +-0.3 in eta. upper95(eta_k) = eta_k + t x SE(eta_k), a one-sided 95 % bound; SE(eta_k)
    by the delta method over X_k, X_{k-1} and X_1 (independent levels; X_1 enters twice when
    k-1 is the first level), t = Student's one-sided 95 % quantile with the smallest
    (batches - 1) among those levels (1.645 past 30). The knee is *resolved* when the bounds at
    k* and k*+1 are below theta too (values["resolved"]); otherwise the detail says the plateau
    is within the noise. Judging by the bounds alone was tried: on the demo ramp (steps of 2
    streams, ~60 s levels) the bound half-width is +55-74 % of a stream, so no knee was ever
    confirmed, while the point estimates landed at 18/16/18 (FP8) and 24/24/24 (NVFP4) over
    three runs, where the field data has ~18 and 22-25. A knee that is never called helps no
    one; one that is called with its uncertainty beside it does.
    A level with no SE (fewer than 2 batches, or a session recorded before SEs were) has no
    bound (values["point_estimate_at"] lists those levels' C); when no knee is confirmed while
    the median bound half-width is >= theta the detail says that the ramp cannot resolve theta
    (levels too short or steps too small for the noise).
    Also c_90 = lowest c whose X >= 90 % of the best X seen so far (robust to uneven steps;
    a point estimate, reported beside the knee, never labels a row).
D2 queueing onset:
    a level queues when queued > 5 % of C in >= 80 % of its samples (queued_share >= 0.8), or
    when the server runs at its request cap / with a full KV pool for >= 80 % of them
    (capped_share >= 0.8), or when most of the level's TTFT is server queue time (the queue
    time histogram over the level: queue share of TTFT > 50 %, the queueing-TTFT rule below).
    The last condition is there because the gauges are snapshots: near the knee a closed loop
    with equal output lengths finishes requests in bursts, so the waiting list empties and
    refills between scrapes (seen in the demo: FP8 at C=20 held 17 running and showed > 1 queued
    in only 33 % of samples, while 82 % of its TTFT was queue). The histogram sees every request.
    The knee is the first c_k that queues, confirmed when c_{k+1} queues too. When the ramp has
    ended (final=True) and only its last valid level queues, that level is the knee, called on
    itself (values["at_ramp_end"]): queueing is evidence enough, and a ramp that stops at the
    knee must not report none. The plateau needs two levels past its knee; a ramp whose last
    step fell under theta says "the ramp ended at the knee: add a level" (KneesSummary.ramp_end).
Headline (KneesSummary.headline): the knee an operator acts on, the queueing knee (past it
    requests wait in the server's queue), else the plateau (past it streams add no throughput).
Queueing TTFT: share = mean server queue time / mean TTFT of the level; above 50 % the TTFT is
    mostly waiting, and the note reads "TTFT 4.0 s: 3.2 s queue, 0.8 s prefill" (prefill here is
    everything that is not queue: TTFT - queue).
Predicted knee from KV capacity (before any load): analysis/predict.py (what SGLang admits at
    once, with its new_token_ratio reserve, and the request cap); the summary carries the one the
    live session called.
D3 power knee (no SLOs needed): Kleinrock power P_k = X_k / TTFT_p50_k; knee_power = argmax_k P_k
    over valid levels, confirmed when P falls at the two levels after it (report and live use
    this one function).
D3 goodput / SLO knee (only with SLOs; LevelResult.slo_* from analysis/levels.py): attainment
    a_k = slo_met / slo_n; C_SLO = the largest c_k with Wilson lower95(a_k) >= 0.9 (DistServe's
    90 %, one-sided 95 % bound, so 9 of 10 met is not enough); c_goodput = argmax_k X_k x a_k
    (good output tok/s), confirmed like the power knee. Secondary flag: TTFT dispersion,
    levels with TTFT p99 / p50 > 3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Sequence

from specmon.analysis.stats import t_upper_95, wilson_lower
from specmon.model import (
    HeadlineKnee, KneesSummary, LevelResult, PowerKneeSummary, PredictedKnee, Sample, SloSummary, offered_key, offered_label,
)

PLATEAU_THETA = 0.15
QUEUED_SHARE_MIN = 0.8
QUEUE_TTFT_SHARE = 0.5
SLO_ATTAINMENT = 0.9
TTFT_DISPERSION = 3.0


@dataclass
class KneeResult:
    definition: str  # "plateau" | "queueing"
    concurrency: Optional[float]  # the knee (a level's offered concurrency)
    confirmed_at: Optional[int]  # level index (LevelResult.level) that confirmed it; None = not confirmed
    detail: str
    values: dict = field(default_factory=dict)


def knee_level(levels: Sequence[LevelResult], k: "KneeResult") -> Optional[int]:
    """The index (LevelResult.level) of the level a confirmed knee is at: the last level before the
    confirming one whose offered concurrency is the knee's."""
    if k.concurrency is None or k.confirmed_at is None:
        return None
    if k.values.get("at_ramp_end"):  # called on its own level, the ramp's last
        return k.confirmed_at
    at = [x.level for x in levels if x.offered == k.concurrency and x.level < k.confirmed_at]
    return at[-1] if at else None


def label_knee(rows: Sequence[LevelResult], arm: str, level: int, definition: str) -> Optional[LevelResult]:
    """Put a knee's definition on its own level's row (a copy: rows already handed on stay as
    they were); returns the labelled row, None when the row is not among `rows`."""
    for i, r in enumerate(rows):
        if r.arm == arm and r.level == level:
            names = [n for n in (r.knee or "").split(";") if n]
            if definition not in names:
                names.append(definition)
            return dataclasses.replace(r, knee=";".join(names))
    return None


def _valid(levels: Sequence[LevelResult]) -> list[LevelResult]:
    return [lv for lv in levels if lv.valid and lv.output_tok_s is not None]


def marginal_efficiency(levels: Sequence[LevelResult]) -> list[Optional[float]]:
    """eta for each valid level (None for the first, which is the reference)."""
    return [e for e, _ in marginal_efficiency_bounds(levels)]


def marginal_efficiency_bounds(levels: Sequence[LevelResult]) -> list[tuple[Optional[float], Optional[float]]]:
    """(eta, upper95(eta)) for each valid level; upper is None where a level involved has no SE."""
    lv = _valid(levels)
    if not lv or not lv[0].output_tok_s:
        return [(None, None)] * len(lv)
    x0, c0 = lv[0].output_tok_s, lv[0].offered
    out: list[tuple[Optional[float], Optional[float]]] = [(None, None)]
    for k in range(1, len(lv)):
        prev, cur = lv[k - 1], lv[k]
        dc = cur.offered - prev.offered
        if dc <= 0:
            out.append((None, None))
            continue
        eta = ((cur.output_tok_s - prev.output_tok_s) / dc) / (x0 / c0)
        # d eta / d X_i for the levels it depends on (X_0 twice when k - 1 == 0)
        grad = {k: c0 / (dc * x0), k - 1: -c0 / (dc * x0)}
        grad[0] = grad.get(0, 0.0) - eta / x0
        ses = [lv[i].output_tok_s_se for i in grad]
        if any(se is None for se in ses):
            out.append((eta, None))
            continue
        var = sum((g * lv[i].output_tok_s_se) ** 2 for i, g in grad.items())
        dfs = [lv[i].output_tok_s_batches - 1 for i in grad if lv[i].output_tok_s_batches]
        t = t_upper_95(min(dfs) if len(dfs) == len(grad) else None)
        out.append((eta, eta + t * var ** 0.5))
    return out


def plateau_knee(levels: Sequence[LevelResult], theta: float = PLATEAU_THETA) -> KneeResult:
    lv = _valid(levels)
    bounds = marginal_efficiency_bounds(lv)
    point_at = [x.offered for x, (e, u) in zip(lv, bounds) if e is not None and u is None]
    values = {"eta": {offered_key(x.offered): _r(e) for x, (e, _) in zip(lv, bounds)},
              "eta_upper95": {offered_key(x.offered): _r(u) for x, (_, u) in zip(lv, bounds)},
              "theta": theta, "c_90": c_90(lv), "point_estimate_at": point_at}

    for k in range(1, len(lv) - 1):
        (a, ua), (b, ub) = bounds[k], bounds[k + 1]
        if a is not None and b is not None and a < theta and b < theta:
            knee = lv[k - 1]
            se = f" +- {knee.output_tok_s_se:.0f}" if knee.output_tok_s_se is not None else ""
            detail = (f"throughput plateau at {knee.label}: {knee.output_tok_s:.0f}{se} tok/s; "
                      f"each stream added past it gave {_eta_words(bounds[k])} then {_eta_words(bounds[k + 1])} "
                      f"of a first-level stream (threshold {theta:.0%})")
            if ua is None or ub is None:
                values["resolved"] = None
                detail += "; point estimates (no throughput SE recorded)"
            else:
                values["resolved"] = ua < theta and ub < theta
                if not values["resolved"]:
                    detail += "; within the noise at 95% (longer levels or wider steps would settle it)"
            return KneeResult("plateau", knee.offered, lv[k + 1].level, detail, values)
    widths = sorted(u - e for e, u in bounds if e is not None and u is not None)
    half = widths[len(widths) // 2] if widths else None
    values["eta_halfwidth_median"] = _r(half)
    detail = "no plateau yet"
    if half is not None and half >= theta:
        detail += (f" (each step's eta is known only to +{half:.0%} at 95%, wider than the {theta:.0%} "
                   f"threshold: longer levels or wider steps would resolve it)")
    return KneeResult("plateau", None, None, detail, values)


def _eta_words(b: tuple[Optional[float], Optional[float]]) -> str:
    e, u = b
    return f"{e:.0%}" if u is None else f"{e:.0%} (<= {u:.0%} at 95%)"


def _r(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 4)


def queues(level: LevelResult, share_min: float = QUEUED_SHARE_MIN) -> bool:
    ttft_share = queue_share(level)
    return ((level.queued_share is not None and level.queued_share >= share_min)
            or (level.capped_share is not None and level.capped_share >= share_min)
            or (ttft_share is not None and ttft_share > QUEUE_TTFT_SHARE))


def _queue_why(x: LevelResult, share_min: float) -> list[str]:
    why = []
    if x.queued_share is not None and x.queued_share >= share_min:
        why.append(f"queued > 5% of C in {x.queued_share:.0%} of samples (mean {x.queued_mean:.1f} queued)")
    if x.capped_share is not None and x.capped_share >= share_min:
        why.append(f"running at the cap or KV pool full in {x.capped_share:.0%} of samples")
    share = queue_share(x)
    if share is not None and share > QUEUE_TTFT_SHARE:
        why.append(f"{share:.0%} of its TTFT was server queue time")
    return why


def queueing_knee(levels: Sequence[LevelResult], share_min: float = QUEUED_SHARE_MIN,
                  final: bool = False) -> KneeResult:
    """D2 over the valid levels; final=True: the ramp has ended, so a queueing last level is the
    knee even with no level after it to confirm it."""
    lv = [x for x in levels if x.valid]
    flags = [queues(x, share_min) for x in lv]
    values = {"queueing_levels": [x.offered for x, f in zip(lv, flags) if f]}
    for k in range(len(lv) - 1):
        if flags[k] and flags[k + 1]:
            x = lv[k]
            detail = f"queueing from {x.label}: " + "; ".join(_queue_why(x, share_min))
            note = queueing_ttft(lv[k + 1])
            if note:
                detail += f"; at {lv[k + 1].label} {note[1]}"
            return KneeResult("queueing", x.offered, lv[k + 1].level, detail, values)
    if final and lv and flags[-1] and lv[-1] is levels[-1]:
        x = lv[-1]
        before = lv[-2] if len(lv) > 1 else None
        detail = f"queueing from {x.label}, the ramp's last level: " + "; ".join(_queue_why(x, share_min))
        if before is not None and before.ttft_p50_s and x.ttft_p50_s:
            def ms(v: float) -> str:
                return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"

            detail += f"; TTFT p50 {ms(before.ttft_p50_s)} at {before.label} -> {ms(x.ttft_p50_s)}"
        detail += " (no higher level to confirm it: add a level to see past it)"
        values["at_ramp_end"] = True
        return KneeResult("queueing", x.offered, x.level, detail, values)
    return KneeResult("queueing", None, None, "no queueing yet", values)


def ramp_end_note(levels: Sequence[LevelResult], theta: float = PLATEAU_THETA,
                  share_min: float = QUEUED_SHARE_MIN) -> str:
    """What a finished ramp says about a knee at its very end that it could not confirm: its last
    level queued but was not valid (its figures cannot call a knee), or its last step added under
    theta of a stream (the plateau needs one more level). "" when neither."""
    if not levels:
        return ""
    last = levels[-1]
    if not last.valid and queues(last, share_min):
        return f"the ramp ended at the knee: add a level ({last.label} queued but is not valid)"
    lv = _valid(levels)
    if lv and lv[-1] is last and len(lv) >= 2:
        e = marginal_efficiency(lv)[-1]
        if e is not None and e < theta and plateau_knee(levels, theta).concurrency is None:
            return (f"the ramp ended at the knee: add a level (the step to {last.label} added {e:.0%} "
                    f"of a stream, under {theta:.0%}; a plateau needs a second such step)")
    return ""


def queueing_ttft(level: LevelResult, threshold: float = QUEUE_TTFT_SHARE) -> Optional[tuple[float, str]]:
    """(queue share of TTFT, note) when queue time is more than `threshold` of the mean TTFT."""
    share = queue_share(level)
    if share is None or share <= threshold:
        return None
    # Deep in overload the histogram's mean queue time (requests that left the queue in the
    # window) can exceed the mean TTFT (requests that finished in it): the note then says all of
    # the TTFT was queue rather than "43.7 s queue" out of a 43.5 s TTFT.
    t, q = level.ttft_mean_s, min(level.queue_time_mean_s, level.ttft_mean_s)
    return share, f"TTFT {_secs(t)}: {_secs(q)} queue, {_secs(t - q)} prefill"


def queue_share(x: LevelResult | Sample) -> Optional[float]:
    """Mean server queue time / mean TTFT (of a level, or of a scrape window), at most 1; None
    when either is unknown. Above QUEUE_TTFT_SHARE the TTFT is mostly waiting."""
    t, q = x.ttft_mean_s, x.queue_time_mean_s
    if t is None or q is None or t <= 0:
        return None
    return min(q / t, 1.0)


def _secs(v: float) -> str:
    return f"{v:.1f} s" if v >= 0.1 else f"{v * 1000:.0f} ms"


def c_90(levels: Sequence[LevelResult]) -> Optional[int]:
    """Lowest offered C whose throughput reached 90 % of the best seen so far (valid levels)."""
    lv = _valid(levels)
    if not lv:
        return None
    best = max(x.output_tok_s for x in lv)
    for x in lv:
        if x.output_tok_s >= 0.9 * best:
            return x.offered
    return None


@dataclass
class PowerKnee:
    concurrency: Optional[int]
    power: Optional[float]  # tok/s per second of TTFT at the knee
    confirmed: bool


def _peak(pts: Sequence[tuple[int, float]]) -> tuple[int, float, bool]:
    """(c, value) at the maximum of (c, value) points, and whether it is confirmed: the value
    falls at the two points after it (the power and goodput knees share this rule)."""
    k = max(range(len(pts)), key=lambda i: pts[i][1])
    after = [v for _, v in pts[k + 1:k + 3]]
    return pts[k][0], pts[k][1], len(after) == 2 and after[0] < pts[k][1] and after[1] < after[0]


def power_knee(levels: Sequence[LevelResult]) -> PowerKnee:
    """Kleinrock power X_k / TTFT_p50_k: argmax over valid levels, confirmed when it falls at the
    two levels after the maximum."""
    pts = [(lv.offered, lv.output_tok_s / lv.ttft_p50_s) for lv in levels
           if lv.valid and lv.output_tok_s is not None and lv.ttft_p50_s]
    if not pts:
        return PowerKnee(None, None, False)
    return PowerKnee(*_peak(pts))


@dataclass
class SloKnee:
    c_slo: Optional[int]  # largest C with Wilson lower95(attainment) >= 0.9; None: no level passed
    c_goodput: Optional[int]  # argmax of output tok/s x attainment
    goodput_tok_s: Optional[float]
    goodput_confirmed: bool  # goodput fell at the two levels after its maximum
    levels: dict  # str(C) -> {n, met, attainment, lower95, goodput_tok_s}


def slo_knee(levels: Sequence[LevelResult], min_attainment: float = SLO_ATTAINMENT) -> Optional[SloKnee]:
    """The SLO and goodput knees over valid levels that were judged against SLOs; None when none was."""
    lv = [x for x in levels if x.valid and x.slo_n]
    if not lv:
        return None
    per: dict = {}
    pts = []
    c_slo = None
    for x in lv:
        a = x.slo_met / x.slo_n
        lo = wilson_lower(x.slo_met, x.slo_n)
        g = x.output_tok_s * a if x.output_tok_s is not None else None
        per[offered_key(x.offered)] = {"n": x.slo_n, "met": x.slo_met, "attainment": round(a, 4),
                                           "lower95": None if lo is None else round(lo, 4),
                                           "goodput_tok_s": None if g is None else round(g, 2)}
        if lo is not None and lo >= min_attainment:
            c_slo = x.offered if c_slo is None else max(c_slo, x.offered)
        if g is not None:
            pts.append((x.offered, g))
    if not pts:
        return SloKnee(c_slo, None, None, False, per)
    return SloKnee(c_slo, *_peak(pts), per)


def slo_condition(slo_ttft_s: Optional[float], slo_tpot_s: Optional[float]) -> str:
    """The SLOs in words, for every front end: 'TTFT<=2 s, TPOT<=30 ms' (a None one is left out)."""
    parts = [f"{name}<={_limit(v)}" for name, v in (("TTFT", slo_ttft_s), ("TPOT", slo_tpot_s)) if v is not None]
    return ", ".join(parts) or "no SLO"


def slo_sentence(condition: str, c_slo: Optional[float], c_goodput: Optional[float], goodput_confirmed: bool,
                 goodput_tok_s: Optional[float] = None, min_attainment: float = SLO_ATTAINMENT,
                 rates: bool = False) -> str:
    """The SLO and goodput knees in words, for the headless summary and the report:
    'SLO (TTFT<=2 s) met up to C=10, goodput peak C=14 (6,200 good tok/s) (not confirmed)'
    (rate levels: 'met up to r=4/s')."""
    def at(x: float) -> str:
        return offered_label(None, x) if rates else offered_label(x)

    words = f"SLO ({condition}) " + (
        f"met up to {at(c_slo)}" if c_slo is not None
        else f"not met at any level (lower 95% bound of attainment < {min_attainment:.0%})")
    if c_goodput is not None:
        words += f", goodput peak {at(c_goodput)}"
        if goodput_tok_s is not None:
            words += f" ({goodput_tok_s:,.0f} good tok/s)"
        if not goodput_confirmed:
            words += " (not confirmed)"
    return words


def _limit(v: float) -> str:
    return f"{v:g} s" if v >= 1 else f"{v * 1000:g} ms"


def ttft_dispersion_levels(levels: Sequence[LevelResult], ratio: float = TTFT_DISPERSION) -> list[int]:
    """Valid levels whose TTFT p99 / p50 > ratio (the operators' 'p99 diverges from p50')."""
    return [x.offered for x in levels
            if x.valid and x.ttft_p50_s and x.ttft_p99_s is not None and x.ttft_p99_s / x.ttft_p50_s > ratio]


def headline_knee(p: KneeResult, q: KneeResult, rates: bool = False) -> Optional[HeadlineKnee]:
    """The one knee to act on: the queueing knee (requests wait past it), else the plateau."""
    def at(x: float) -> str:
        return offered_label(None, x) if rates else offered_label(x)

    if q.concurrency is not None:
        end = bool(q.values.get("at_ramp_end"))
        words = f"queueing knee {at(q.concurrency)}" + (" (the ramp's last level: add a level to confirm)"
                                                         if end else "")
        return HeadlineKnee("queueing", q.concurrency, not end, words)
    if p.concurrency is not None:
        noise = " (within the noise)" if p.values.get("resolved") is False else ""
        return HeadlineKnee("plateau", p.concurrency, True, f"throughput plateau {at(p.concurrency)}{noise}")
    return None


def knees_summary(levels: Sequence[LevelResult], predicted: Optional[PredictedKnee] = None,
                  slo_ttft_s: Optional[float] = None, slo_tpot_s: Optional[float] = None,
                  min_attainment: float = SLO_ATTAINMENT, final: bool = False) -> KneesSummary:
    """Every definition's value for one arm over its finished levels (session.json knees={arm: ...}).
    `predicted` is the arm's predicted knee as the live session called it (analysis/predict.py).
    final=True: the ramp has ended (the report, a finished ramp's last level): a knee on its last
    level is called (queueing_knee) or said to need one more level (ramp_end_note)."""
    p, q = plateau_knee(levels), queueing_knee(levels, final=final)
    pw = power_knee(levels)
    out = KneesSummary(
        plateau=p.concurrency, plateau_confirmed_at_level=p.confirmed_at, plateau_detail=p.detail,
        plateau_resolved=p.values.get("resolved"),
        queueing=q.concurrency, queueing_confirmed_at_level=q.confirmed_at, queueing_detail=q.detail,
        c_90=p.values.get("c_90"), eta=p.values.get("eta"), eta_upper95=p.values.get("eta_upper95"),
        plateau_theta=p.values.get("theta"), plateau_point_estimate_at=p.values.get("point_estimate_at"),
        eta_halfwidth_median=p.values.get("eta_halfwidth_median"),
        output_tok_s_se={offered_key(x.offered): _r(x.output_tok_s_se) for x in levels if x.valid},
        queueing_levels=q.values.get("queueing_levels"),
        queue_share_of_ttft={offered_key(x.offered): _r3(queue_share(x)) for x in levels if x.valid},
        power=PowerKneeSummary(concurrency=pw.concurrency, power_tok_s_per_s_ttft=_r(pw.power), confirmed=pw.confirmed),
        ttft_dispersion_levels=ttft_dispersion_levels(levels),
        predicted=predicted,
        invalid_levels=[x.offered for x in levels if not x.valid],
    )
    out.headline = headline_knee(p, q, rates=any(x.offered_rate is not None for x in levels))
    if out.headline is not None and not out.headline.confirmed:
        out.ramp_end = "the ramp ended at the knee: add a level to confirm it"
    elif final and out.headline is None:
        out.ramp_end = ramp_end_note(levels)
    if slo_ttft_s is not None or slo_tpot_s is not None:
        sk = slo_knee(levels, min_attainment)
        out.slo = SloSummary(slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, min_attainment=min_attainment,
                             c_slo=sk.c_slo if sk else None, c_goodput=sk.c_goodput if sk else None,
                             goodput_tok_s=_r(sk.goodput_tok_s) if sk else None,
                             goodput_confirmed=sk.goodput_confirmed if sk else False,
                             levels=sk.levels if sk else {})
    return out


def _r3(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 3)
