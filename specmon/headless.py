"""The headless front end: the same LiveSession as the TUI, printed as plain lines on stdout.

One compact line per tick (all arms), a line per server self-description, knee call, level
start, marker and session end, the per-level table when a level finishes, and when the ramp
ends one line per arm with every knee (plateau, queueing, the D3 power knee, and the SLO and
goodput knees when SLOs were given), from the knees the ramp sent with its last LevelFinished.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import Optional, TextIO

try:  # the session's loop in C where it is installed (as the load loop's: load/loop.py)
    import uvloop
except ImportError:  # Windows, or an install without it
    uvloop = None

from specmon import clock
from specmon.analysis.knee import slo_condition, slo_sentence
from specmon.analysis.search import search_words
from specmon.session.live import LiveSession
from specmon.session.source import SessionSource, fewer_young_collections
from specmon.urls import without_credentials
from specmon.model import (
    FleetLevels, FleetStatus,
    KneesSummary, offered_label,
    ArmInfoUpdated, ArmPhase, Event, KneeCalled, LevelFinished, LevelProgress, LevelStarted, Marker, RampFinished,
    ObservedKnee, ObservedKneesUpdated, ObservedWindow, RequestFinished, Sample, SamplesTick, SessionEnded,
)
from specmon.analysis.observed import knee_line as observed_knee_line


def _n(v: Optional[float], fmt: str = "{:.0f}", unknown: str = "-") -> str:
    return unknown if v is None else fmt.format(v)


def arm_cell(s: Sample) -> str:
    if not s.up:
        return f"{s.arm}: {s.state.upper()} ({s.reason or 'no reason given'})"
    parts = [f"{s.arm}: run {_n(s.running_reqs)} q {_n(s.queued_reqs)}",
             f"kv {_n(None if s.kv_usage is None else s.kv_usage * 100, '{:.1f}%')}",
             f"{_n(s.gen_tok_s)} tok/s"]
    if s.spec_enabled is not False:
        parts.append(f"acc {_n(s.accept_length, '{:.2f}')}")
    parts.append(f"ttft p50 {_n(s.ttft_p50_s, '{:.2f}s')} p90 {_n(s.ttft_p90_s, '{:.2f}s')}")
    if s.gpu_mem_used_bytes is not None and s.gpu_mem_total_bytes:
        sim = " (simulated)" if s.gpu_source == "simulated" else ""  # the simulator's card, not a reading
        parts.append(f"gpu{sim} {s.gpu_mem_used_bytes / 2**30:.1f}/{s.gpu_mem_total_bytes / 2**30:.0f} GiB")
    if s.gpu_power_w is not None:
        parts.append(f"{s.gpu_power_w:.0f} W")
    if s.state != "up":
        parts.append(f"[{s.state}: {s.reason}]")
    elif s.server_restarted:
        parts.append("[server restarted]")
    if s.source == "loads":
        parts.append("(/v1/loads)")
    return " ".join(parts)


def simulated_gpus_line(gpus: list) -> str:
    """Once: the simulated arms' cards and what holds their memory (weights, KV pool, graphs)."""
    parts = []
    for g in gpus:
        split = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in (("weights", g.weights_bytes), ("KV pool", g.kv_pool_bytes),
                                                             ("graphs", g.cuda_graph_bytes)) if v is not None)
        total = "" if g.mem_total_bytes is None else f" of {g.mem_total_bytes / 2**30:.1f} GiB"
        parts.append(f"{g.arm} GPU{g.index} {g.name or 'unknown card'}{total}" + (f" ({split} GiB)" if split else ""))
    return "simulated (the simulator's own figures, not this host's): " + "; ".join(parts)


def tick_line(tick: SamplesTick, t0: float) -> str:
    head = time.strftime("%H:%M:%S", time.localtime(tick.ts))
    level = next((s for s in tick.samples if s.offered_concurrency is not None), None)
    if level is not None:
        head += f" L{level.level + 1} C={level.offered_concurrency}"  # levels count from 1 where shown
    gpu = ""
    if tick.gpus is not None and not tick.gpus.available:
        gpu = ""  # said once at start, not on every line
    # A fleet that is down (or has no worker) has no sample rows: said here, or the line was blank.
    cells = [arm_cell(s) for s in tick.samples] + [fleet_cell(f) for f in tick.fleets or ()
                                                   if not f.up or not any(s.arm for s in tick.samples)]
    return head + "  " + ("  |  ".join(c for c in cells if c) or "no server to show") + gpu


def fleet_cell(f: FleetStatus) -> str:
    if not f.up:
        return f"{f.kind} {f.name}: DOWN ({f.reason or 'no reason given'})"
    return f"{f.kind} {f.name}: no workers" if not f.workers else ""


def info_line(e: ArmInfoUpdated) -> str:
    i = e.info
    spec = "no speculation"
    if i.speculative_algorithm:
        spec = (f"{i.speculative_algorithm} {i.speculative_num_steps}/{i.speculative_eagle_topk}/"
                f"{i.speculative_num_draft_tokens}")
    scale = f", sim speed x{i.time_scale:g}" if i.time_scale != 1.0 else ""
    pool = f"{i.kv_capacity_tokens:,}" if i.kv_capacity_tokens is not None else "?"
    return (f"{e.arm}: {i.model or '?'} (sglang {i.version or '?'}), {spec}, KV pool {pool} tok, "
            f"cap {i.max_running_requests if i.max_running_requests is not None else '?'} req, "
            f"kv {i.kv_cache_dtype or 'auto'}{scale}; live source {e.source or '?'}")


def level_table(e: LevelFinished) -> str:
    rates = any(r.offered_rate is not None for r in e.results)
    cols = [("arm", "{}"), ("rate" if rates else "C", "{}"), ("ok", "{}"), ("fail", "{}"), ("tok/s", "{:.0f}"),
            ("tok/s/user", "{:.1f}"), ("ttft p50", "{:.2f}"), ("ttft p90", "{:.2f}"), ("acc len", "{}"),
            ("kv max", "{:.0%}"), ("cache hit", "{:.1%}"), ("knee", "{}")]
    if rates:
        cols.insert(2, ("done/s", "{:.2f}"))
    rows = []
    for r in e.results:
        accept = None if r.accept_length is None else (
            f"{r.accept_length:.2f}" + ("*" if r.accept_length_source == "server" else ""))
        vals = [r.arm, f"{r.offered_rate:g}/s" if rates else r.offered_concurrency, r.ok, r.failed, r.output_tok_s,
                r.per_user_tok_s, r.ttft_p50_s, r.ttft_p90_s, accept, r.kv_usage_max, r.cache_hit_rate, r.knee]
        if rates:
            vals.insert(2, r.achieved_rate)
        rows.append(["-" if v is None else f.format(v) for v, (_, f) in zip(vals, cols)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, (h, _) in enumerate(cols)]
    out = [f"level {e.level + 1} finished", "  ".join(h.rjust(w) for (h, _), w in zip(cols, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    if any(r.accept_length_source == "server" for r in e.results):
        out.append("  * acceptance from the server's gauge (its last decode window), not this level's requests")
    out += [f"  {r.arm}: {r.label} over-saturated: {r.note}" for r in e.results if r.knee == "over_saturation"]
    return "\n".join(out)


def _c(v: Optional[float]) -> str:
    return "?" if v is None else f"{v:g}"


def noise_note(resolved: Optional[bool]) -> str:
    """' (within the noise)' for a plateau knee its 95% bounds do not settle; '' otherwise."""
    return " (within the noise)" if resolved is False else ""


def knees_line(arm: str, k: KneesSummary, rates: bool = False) -> str:
    """One arm's knees at the end of the ramp, the headline first (the knee to act on: queueing,
    else plateau), then every other figure: 'fp8-mtp: knee: queueing knee C=20 | also: plateau
    C=18 (within the noise); queueing C=20; power knee C=18 (confirmed); SLO (TTFT<=2 s) met up to
    C=10, goodput peak C=14'."""
    if k.headline is not None:  # its words say when it sits on the ramp's last level
        head = f"knee: {k.headline.words}"
    else:
        head = "knee: none called" + (f" ({k.ramp_end})" if k.ramp_end else "")
    parts = []

    def at(x: Optional[float]) -> str:
        return offered_label(None, x) if rates and x is not None else f"C={_c(x)}"

    if k.plateau is not None:
        parts.append(f"plateau {at(k.plateau)}{noise_note(k.plateau_resolved)}")
    if k.queueing is not None:
        parts.append(f"queueing {at(k.queueing)}")
    if k.power.concurrency is not None:
        parts.append(f"power knee {at(k.power.concurrency)} "
                     f"({'confirmed' if k.power.confirmed else 'not confirmed'})")
    else:
        parts.append("power knee: no valid level")
    if k.slo is not None:
        parts.append(slo_sentence(slo_condition(k.slo.slo_ttft_s, k.slo.slo_tpot_s), k.slo.c_slo,
                                  k.slo.c_goodput, k.slo.goodput_confirmed, min_attainment=k.slo.min_attainment,
                                  rates=rates))
    if k.search is not None:
        parts.append(search_words(k.search))
    return f"{arm}: {head} | also: " + "; ".join(parts)


# Events the printer writes no line for (render and fleet_lines say nothing of them).
_SILENT = frozenset({RequestFinished, LevelProgress})


class HeadlessPrinter:
    def __init__(self, out: TextIO = sys.stdout):
        self.out = out
        self.t0 = clock.wall()
        self._gpu_said = False
        self._sim_gpus_said = False
        self._knees: dict[str, KneesSummary] = {}  # arm -> the latest knees (LevelFinished.knees)
        self._fleets: dict[str, FleetLevels] = {}  # gateway arm -> its fleet's figures (LevelFinished.fleets)
        self._level_labels: dict[str, str] = {}  # level index -> "C=8"
        self._rates = False  # the ramp's levels offer request rates (open loop)
        self._observed: dict[str, ObservedKnee] = {}  # arm -> its newest observed knee

    def __call__(self, e: Event) -> None:
        if type(e) in _SILENT:  # a request finished, a level's progress: ~1,000 a level, no line
            return
        line = "\n".join(x for x in (self.render(e), self.fleet_lines(e)) if x)
        if line:
            print(without_credentials(line), file=self.out, flush=True)

    def render(self, e: Event) -> Optional[str]:
        if isinstance(e, SamplesTick):
            line = tick_line(e, self.t0)
            if not self._gpu_said and e.gpus is not None:
                self._gpu_said = True
                gpu = (f"{len(e.gpus.host_gpus)} GPU(s), driver {e.gpus.driver_version}" if e.gpus.available
                       else e.gpus.reason or "NVML unavailable")
                line = f"gpu: {gpu}\n{line}"
            sim = e.gpus.simulated_gpus if e.gpus is not None else []
            if sim and not self._sim_gpus_said:
                self._sim_gpus_said = True
                line = f"gpu: {simulated_gpus_line(sim)}\n{line}"
            return line
        if isinstance(e, ArmInfoUpdated):
            return info_line(e)
        if isinstance(e, KneeCalled):
            c = "?" if e.concurrency is None else f"{e.concurrency:g}"
            what = "requests per second" if self._rates else "concurrent requests"
            return f"knee [{e.definition}] {e.arm}: ~{c} {what}{noise_note(e.resolved)} ({e.detail})"
        if isinstance(e, LevelStarted):
            planned = f", {e.planned_s:g} s" if e.planned_s else ""
            total = e.levels_total or "?"
            if e.offered_rate is not None:
                self._rates = True
                cap = f", at most {e.offered_concurrency} in flight" if e.offered_concurrency else ""
                return f"level {e.level + 1}/{total}: rate {e.offered_rate:g} req/s{cap}{planned}"
            return f"level {e.level + 1}/{total}: concurrency {e.offered_concurrency}{planned}"
        if isinstance(e, LevelFinished):
            self._knees.update(e.knees)
            return level_table(e)
        if isinstance(e, RampFinished):
            lines = [f"ramp finished: {e.reason}"]
            if self._knees:
                lines.append("knees:")
                lines += ["  " + knees_line(arm, k, self._rates) for arm, k in self._knees.items()]
            return "\n".join(lines)
        if isinstance(e, ArmPhase):
            return f"{e.arm}: {e.phase}" + (f" ({e.detail})" if e.detail else "")
        if isinstance(e, Marker):
            return f"mark: {e.label}"
        if isinstance(e, ObservedKneesUpdated):
            # a line when an arm's knee (or its limit) changes; every arm's, with headroom, at the end
            said = [observed_knee_line(a, k) for a, k in e.knees.items() if _knee_moved(self._observed.get(a), k)]
            self._observed.update(e.knees)
            return "\n".join(said) or None
        if isinstance(e, SessionEnded):
            last = [observed_knee_line(a, k) for a, k in self._observed.items()]
            return "\n".join([*last, f"session ended: {e.reason}"])
        if isinstance(e, ObservedWindow):
            return observed_line(e)
        return None


    def fleet_lines(self, e: Event) -> Optional[str]:
        """A ramp through a gateway: after each level, how evenly the gateway spread it; at the
        end, which worker saturated first and the imbalance level by level."""
        if isinstance(e, LevelFinished) and e.fleets:
            self._fleets.update(e.fleets)
            lines = []
            for arm, f in e.fleets.items():
                row = next((r for r in e.results if r.arm == arm), None)
                if row is not None:
                    self._level_labels[str(e.level)] = row.label
                x, who = f.imbalance.get(str(e.level)), f.busiest.get(str(e.level))
                spread = (f"routing imbalance {x:.2f}x (busiest {who}; max/mean of the workers' running)"
                          if x is not None else "routing imbalance unknown (fewer than two workers running)")
                lines.append(f"fleet {arm}: {spread}; {f.detail}")
            return "\n".join(lines)
        if isinstance(e, RampFinished) and self._fleets:
            lines = ["fleets:"]
            for arm, f in self._fleets.items():
                by_level = ", ".join(f"{self._level_labels.get(k, 'L' + k)} {'-' if v is None else f'{v:.2f}x'}"
                                     for k, v in f.imbalance.items())
                lines.append(f"  {arm} ({f.fleet}, {len(f.workers)} workers): {f.detail}")
                lines.append(f"    routing imbalance by level: {by_level or 'none'}")
            return "\n".join(lines)
        return None


def _knee_moved(old: Optional[ObservedKnee], new: ObservedKnee) -> bool:
    return old is None or (old.concurrency, old.limit) != (new.concurrency, new.limit)


def observed_line(e: ObservedWindow) -> str:
    """One window of a server's own per-request export (attach --request-metrics-dir)."""
    def s(v: Optional[float]) -> str:
        return "-" if v is None else f"{v:.3g}s"

    def n(v: Optional[float]) -> str:
        return "-" if v is None else f"{v:.0f}"

    line = (f"observed {e.arm}: {e.count} requests in {e.t1 - e.t0:.0f} s, TTFT p50 {s(e.ttft_p50_s)} "
            f"p90 {s(e.ttft_p90_s)}, queue p50 {s(e.queue_p50_s)} p90 {s(e.queue_p90_s)}, "
            f"mean in/out {n(e.mean_prompt_tokens)}/{n(e.mean_output_tokens)} tok")
    if e.accept_length is not None:
        line += f", accept len {e.accept_length:.2f}"
    return line + (f" ({e.bad_lines} unreadable lines)" if e.bad_lines else "")


def run_headless(live: SessionSource, duration_s: Optional[float] = None, out: TextIO = sys.stdout) -> str:
    """Run `live` until `duration_s` passes, the ramp ends, or SIGINT/SIGTERM; returns the exit reason."""
    printer = HeadlessPrinter(out)

    async def main() -> str:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        def stop_because(why: str) -> None:
            if not stop.is_set():
                live.stop_cause = why
                stop.set()

        for sig, why in ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"), (signal.SIGHUP, "hangup")):
            try:
                loop.add_signal_handler(sig, stop_because, why)
            except (NotImplementedError, RuntimeError):
                pass
        if duration_s is not None:
            loop.call_later(duration_s, stop_because, "duration")
        return await live.run(printer, stop)

    with fewer_young_collections():  # a wave of requests' tasks and records: see there
        reason = uvloop.run(main()) if uvloop is not None else asyncio.run(main())
    if isinstance(live, LiveSession) and live.writer is not None:
        print(f"recorded in {live.out_dir}", file=out, flush=True)
    return reason
