"""The report as format-neutral sections and tables; markdown.py and html.py only render them.

An unknown value is an empty cell, never 0. Units are in the headers so cells stay plain numbers:
seconds for TTFT and queue time, milliseconds for TPOT and ITL, percent for KV usage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from specmon.analysis.knee import slo_condition, slo_sentence
from specmon.analysis.search import search_words
from specmon.model import KneesSummary, LevelResult, SloSummary
from specmon.report.compare import ArmGroup, Spread, drafter_comparisons, groups
from specmon.report.data import ReportArm, ReportSession
from specmon.report.frontier import cost_per_million, default_targets, matched
from specmon.report.knees import arm_knees, within_noise


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    title: Optional[str] = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)  # paragraphs / bullet lines before the tables
    tables: list[Table] = field(default_factory=list)


@dataclass
class Report:
    title: str
    sections: list[Section]


def num(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "" if v is None else fmt.format(v)


def ms(v: Optional[float]) -> str:
    return "" if v is None else f"{v * 1000:.2f}"


def pct(v: Optional[float]) -> str:
    return "" if v is None else f"{v * 100:.1f}"


def spread_cell(s: Optional[Spread], fmt: str = "{:.1f}") -> str:
    if s is None:
        return ""
    if s.n == 1:
        return fmt.format(s.mean)
    return f"{fmt.format(s.mean)} ({fmt.format(s.lo)}–{fmt.format(s.hi)})"


# --------------------------------------------------------------------------------------------


def build_report(sessions: Sequence[ReportSession], arms: Sequence[ReportArm], at: Optional[Sequence[float]],
                 price: Optional[float]) -> Report:
    sections = [session_section(s, [a for a in arms if a.session == s.name], len(sessions) > 1) for s in sessions]
    sections.append(levels_section(arms))
    sections.append(knees_section(arms))
    gs = groups(arms)
    if any(len(g.runs) > 1 for g in gs):
        sections.append(repeats_section(gs))
    sections.append(matched_section(arms, at, price))
    drafters = drafter_section(gs)
    if drafters is not None:
        sections.append(drafters)
    title = "specmon report: " + ", ".join(s.name for s in sessions)
    return Report(title, sections)


def session_section(s: ReportSession, arms: Sequence[ReportArm], many: bool) -> Section:
    meta = s.meta
    host = meta.host
    plan = meta.ramp_plan or {}
    lines = [
        f"folder: {s.path}",
        f"date: {meta.start_time or ''} to {meta.end_time or ''}",
        f"host: {host.get('hostname') or ''} ({host.get('platform') or ''})",
        f"specmon version: {meta.specmon_version or ''}; mode: {meta.mode or ''}; "
        f"exit: {meta.exit_reason or ''}",
    ]
    if plan:
        dur = plan.get("level_duration_s")
        lines.append(
            "ramp: levels " + ",".join(str(c) for c in plan.get("levels") or []) +
            f"; input {plan.get('input_len')} / output {plan.get('output_len')} tokens" +
            (f"; {dur:g} s per level" if isinstance(dur, (int, float)) else "") +
            (f"; {plan.get('requests_per_level')} requests per level" if plan.get("requests_per_level") else "") +
            (f"; dataset {plan.get('dataset')}" if plan.get("dataset") else "") +
            ("; servers restarted between levels" if plan.get("restart_between_levels") else ""))
    headers = ["arm", "model", "quantization", "spec algorithm", "steps", "topk", "draft tokens", "draft model",
               "KV dtype", "KV pool tok", "mem fraction", "request cap", "TP", "GPUs", "sim speed"]
    rows = []
    for a in arms:
        sa = a.server_args
        rows.append([a.key, _s(sa.get("model")), _s(sa.get("quantization")),
                     _s(sa.get("speculative_algorithm")) if sa else "",
                     _s(sa.get("speculative_num_steps")), _s(sa.get("speculative_eagle_topk")),
                     _s(sa.get("speculative_num_draft_tokens")), _s(sa.get("speculative_draft_model_path")),
                     _s(sa.get("kv_cache_dtype")), _s(sa.get("kv_capacity_tokens")),
                     _s(sa.get("mem_fraction_static")), _s(sa.get("max_running_requests")), _s(sa.get("tp_size")),
                     f"{a.gpus}" + ("" if a.gpus_source == "layout gpus" else f" ({a.gpus_source})"),
                     "" if not a.time_scale or a.time_scale == 1 else f"{a.time_scale:g}x"])
    notes = []
    if any(a.server_args and a.server_args.get("speculative_algorithm") is None for a in arms):
        notes.append("an empty spec algorithm on a known server means no speculation")
    return Section(f"Session {s.name}", lines, [Table(headers, rows, "Arms", notes)])


def _s(v) -> str:
    return "" if v is None else str(v)


LEVEL_HEADERS = ["C", "achieved C", "out tok/s", "per-user tok/s", "TTFT p50 s", "TTFT p90 s", "TTFT p99 s",
                 "cache hit %", "TPOT p50 ms", "ITL p50 ms", "ITL p99 ms", "accept len", "queue p50 s", "KV max %",
                 "GPU power W", "ok", "failed", "valid", "knee"]
# Open-loop levels: the rate offered and the completions per second it got, before everything else
# (their C column is the in-flight cap, empty without one).
RATE_HEADERS = ["rate req/s", "done req/s"]


def level_row(lv: LevelResult, power_w: Optional[float], rates: bool = False) -> list[str]:
    offered = str(lv.offered_concurrency) if not rates else (str(lv.offered_concurrency) if lv.offered_concurrency else "")
    head = [num(lv.offered_rate, "{:g}"), num(lv.achieved_rate, "{:.2f}")] if rates else []
    return head + [offered, num(lv.achieved_concurrency), num(lv.output_tok_s),
                   num(lv.per_user_tok_s), num(lv.ttft_p50_s, "{:.3f}"), num(lv.ttft_p90_s, "{:.3f}"),
                   num(lv.ttft_p99_s, "{:.3f}"), pct(lv.cache_hit_rate), ms(lv.tpot_p50_s), ms(lv.itl_p50_s),
                   ms(lv.itl_p99_s), num(lv.accept_length, "{:.2f}"), num(lv.queue_time_p50_s, "{:.3f}"),
                   pct(lv.kv_usage_max), num(power_w, "{:.0f}"), str(lv.ok), str(lv.failed),
                   "yes" if lv.valid else "no", lv.knee or ""]


def levels_section(arms: Sequence[ReportArm]) -> Section:
    tables = []
    lines = ["achieved C = what the server ran (mean running requests); per-user tok/s = out tok/s / achieved C; "
             "invalid = the client, not the server, limited the level; cache hit % = prefix-cache hits / prompt "
             "tokens over the level (the TTFT beside it is what the hits bought)"]
    for a in arms:
        rates = any(lv.offered_rate is not None for lv in a.levels)
        rows = [level_row(lv, a.power_at(lv), rates) for lv in a.levels]
        notes = [f"{lv.label} over-saturated, cut short: {lv.note or lv.invalid_reason or 'backlog grew'}"
                 for lv in a.levels if lv.knee == "over_saturation"]
        notes += [f"{lv.label} invalid: {lv.invalid_reason or 'no reason recorded'}"
                  for lv in a.levels if not lv.valid and lv.knee != "over_saturation"]
        notes += [f"{lv.label}: {lv.ttft_note}" for lv in a.levels if lv.ttft_note]
        if a.power_simulated:
            notes.append("GPU power W: simulated (the simulator's figure for the card it simulates, not a reading)")
        server = [lv.label for lv in a.levels if lv.accept_length_source == "server"]
        if server:
            notes.append(f"accept len at {', '.join(server)} from the server's gauge (its last decode window, "
                         "not the level's requests)")
        headers = (RATE_HEADERS + ["C cap"] + LEVEL_HEADERS[1:]) if rates else LEVEL_HEADERS
        tables.append(Table(headers, rows, a.key, notes))
    if any(lv.offered_rate is not None for a in arms for lv in a.levels):
        lines.append("rate levels (open loop): rate = requests per second offered (seeded arrivals), done = "
                     "completions per second in the window; a level whose backlog grew is over_saturation, cut "
                     "short and never read as a steady state")
    return Section("Per-level results", lines, tables)


def knees_section(arms: Sequence[ReportArm]) -> Section:
    knees = [(a, arm_knees(a)) for a in arms]
    with_slo = any(k.slo is not None for _, k in knees)
    headers = ["arm", "plateau (D1)", "queueing (D2)", "c_90", "power knee (X/TTFT p50)"]
    if with_slo:
        headers += ["SLO knee (C_SLO)", "goodput knee"]
    headers += ["predicted (KV/cap)", "invalid levels"]
    rows, lines = [], []
    for a, k in knees:
        power = "" if k.power.concurrency is None else (
            f"{k.power.concurrency}" + (" (confirmed)" if k.power.confirmed else " (not confirmed)"))
        plateau = _knee_cell(k.plateau, k.plateau_confirmed_at_level,
                             "within the noise" if within_noise(k) else None)
        row = [a.key, plateau, _knee_cell(k.queueing, k.queueing_confirmed_at_level), _s(k.c_90), power]
        if with_slo:
            row += _slo_cells(k)
        predicted = k.predicted.concurrency if k.predicted is not None else None
        rows.append(row + [num(predicted, "{:g}"), ",".join(str(c) for c in k.invalid_levels)])
        lines.append(f"{a.key}: {k.plateau_detail}; {k.queueing_detail}" +
                     (f"; predicted: {k.predicted.detail}" if k.predicted is not None and k.predicted.detail else ""))
        rates = any(lv.offered_rate is not None for lv in a.levels)
        if k.slo is not None:
            lines.append(f"{a.key}: {_slo_sentence(k.slo, rates)}")
        search = a.search
        if search is not None:
            lines.append(f"{a.key}: {search_words(search)}")
    notes = ["plateau and queueing are confirmed on two consecutive valid levels (D1/D2, docs/field-notes.md); "
             "c_90 = lowest C reaching 90% of the best throughput; power knee = argmax of throughput / TTFT p50, "
             "confirmed when it falls at the next two levels"]
    if any(within_noise(k) for _, k in knees):
        notes.append("within the noise: the plateau's one-sided 95% bounds of eta do not settle it "
                     "(longer levels or wider steps would)")
    if with_slo:
        target = next((k.slo.min_attainment for _, k in knees if k.slo is not None), 0.9)
        notes.append(f"C_SLO = the largest C whose SLO attainment has a Wilson lower 95% bound >= {target:.0%}; "
                     "goodput knee = argmax of out tok/s x attainment, confirmed when it falls at the next two levels")
    return Section("Knees", lines, [Table(headers, rows, None, notes)])


def _slo_cells(k: KneesSummary) -> list[str]:
    if k.slo is None:
        return ["", ""]
    if not k.slo.levels:
        return ["no level judged", ""]
    goodput = "" if k.slo.c_goodput is None else (
        f"{k.slo.c_goodput}" + (" (confirmed)" if k.slo.goodput_confirmed else " (not confirmed)"))
    return ["none met" if k.slo.c_slo is None else f"{k.slo.c_slo}", goodput]


def _slo_sentence(slo: SloSummary, rates: bool = False) -> str:
    """'SLO (TTFT<=2 s, TPOT<=30 ms) met up to C=10, goodput peak C=14 (6,200 good tok/s)'."""
    words = slo_condition(slo.slo_ttft_s, slo.slo_tpot_s)
    if not slo.levels:
        return f"SLO ({words}) not judged at any valid level"
    return slo_sentence(words, slo.c_slo, slo.c_goodput, slo.goodput_confirmed, slo.goodput_tok_s,
                        min_attainment=slo.min_attainment, rates=rates)


def _knee_cell(c, confirmed_at, note: Optional[str] = None) -> str:
    if c is None:
        return ""
    words = [w for w in (None if confirmed_at is None else f"confirmed at level {confirmed_at + 1}", note) if w]
    return f"{c}" + (f" ({', '.join(words)})" if words else "")


def repeats_section(gs: Sequence[ArmGroup]) -> Section:
    headers = ["C", "runs", "out tok/s", "per-user tok/s", "TTFT p50 s", "accept len"]
    tables = []
    for g in gs:
        rows = []
        for c in g.concurrencies():
            x = g.at(c, lambda lv: lv.output_tok_s)
            rows.append([str(c), str(x.n if x else 0), spread_cell(x),
                         spread_cell(g.at(c, lambda lv: lv.per_user_tok_s)),
                         spread_cell(g.at(c, lambda lv: lv.ttft_p50_s), "{:.3f}"),
                         spread_cell(g.at(c, lambda lv: lv.accept_length), "{:.2f}")])
        tables.append(Table(headers, rows, f"{g.name} ({len(g.runs)} runs: {', '.join(r.session for r in g.runs)})"))
    return Section("Repeat runs: mean (min–max) per level", [
        "same-named arms across sessions are repeat runs; two configurations differ beyond noise at a level "
        "only when their min–max ranges do not overlap"], tables)


def matched_section(arms: Sequence[ReportArm], at: Optional[Sequence[float]], price: Optional[float]) -> Section:
    chosen = list(at) if at else default_targets(arms)
    lines = ["throughput interpolated linearly between measured levels on each arm's per-user tok/s vs "
             "output tok/s frontier; empty where the arm never ran at that speed (never extrapolated)"]
    if not at:
        lines.append("--at not given: targets spread over the measured range: " + ",".join(f"{t:g}" for t in chosen))
    headers = ["per-user tok/s", "arm", "out tok/s", "tok/s/GPU", "GPUs", "C reached", "achieved C",
               "$ / M tok", "GPU power W", "tok/s per MW", "note"]
    rows = []
    for t in chosen:
        for a in arms:
            p = matched(a, t)
            if p is None:
                rows.append([f"{t:g}", a.key, "", "", str(a.gpus), "", "", "", "", "", "out of measured range"])
                continue
            rows.append([f"{t:g}", a.key, num(p.output_tok_s), num(p.tok_s_per_gpu), str(p.gpus),
                         num(p.offered_concurrency), num(p.achieved_concurrency),
                         num(cost_per_million(price, p.output_tok_s, p.gpus), "{:.3f}"), num(p.power_w, "{:.0f}"),
                         num(p.tok_s_per_mw, "{:,.0f}"), "from a level flagged invalid" if p.from_invalid else ""])
    notes = []
    if price is not None:
        notes.append(f"$ / M tok = {price:g} $/GPU-hour x GPUs / (tok/s x 3600) x 1e6")
    else:
        notes.append("$ / M tok: give --price-per-gpu-hour")
    notes.append("tok/s per MW needs gpu_power_w in samples.csv (NVML on the serving host)")
    sim = [a.key for a in arms if a.power_simulated]
    if sim:
        notes.append(f"GPU power W and tok/s per MW of {', '.join(sim)}: simulated (the simulator's card, not a reading)")
    return Section("Matched interactivity (same per-user tok/s)", lines, [Table(headers, rows, None, notes)])


def drafter_section(gs: Sequence[ArmGroup]) -> Optional[Section]:
    comps = drafter_comparisons(gs)
    if not comps:
        return None
    tables = []
    for comp in comps:
        rows = [[str(r.concurrency), spread_cell(r.base), spread_cell(r.other), f"{r.ratio:.3f}",
                 spread_cell(r.accept, "{:.2f}"), r.verdict] for r in comp.rows]
        tables.append(Table(["C", f"{comp.base} tok/s", f"{comp.other} tok/s", "ratio", f"{comp.other} accept len",
                             "verdict"], rows,
                            f"{comp.other} vs {comp.base} (baseline: {comp.base_reason})"))
    return Section("Is the drafter paying for itself?", [
        "arms with the same model, weights, KV dtype, memory settings and TP, differing only in speculative "
        "settings; ratio = throughput / baseline throughput at the same offered C"], tables)
