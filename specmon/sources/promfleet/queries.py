"""The PromQL of a fleet (FleetQueries: one live poll, or one history step's range queries, for a
selector and a scrape interval), and one evaluation's results read back into each worker's figures
(read_results, WorkerFigures)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from specmon.sources.promfleet.parse import Labels, Point, promql_duration

SGLANG = "sglang[:_]"  # both exposition forms of SGLang's names
# Copies of one quantity written by other TP/PP/EP ranks: rank 0, or series without the label.
# Per-priority copies of the queue gauges carry priority="<n>"; the total has none.
RANK0 = 'tp_rank=~"0|",pp_rank=~"0|",moe_ep_rank=~"0|",attn_tp_rank=~"0|",priority=""'
GROUP = "job, instance, worker"
RANK_GROUP = "job, instance, worker, dp_rank, engine_type"
GAUGES = ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "max_total_num_tokens", "token_usage",
          "spec_accept_length", "spec_accept_rate", "gen_throughput", "num_requests_total")
RATE_FIGURES = ("gen_tok_s", "cache_hit_rate", "ttft_mean_s", "queue_time_mean_s", "itl_mean_s")
LATENCY_FIGURES = {"ttft_p50_s": ("time_to_first_token_seconds", 0.5),
                   "ttft_p90_s": ("time_to_first_token_seconds", 0.9),
                   "ttft_p99_s": ("time_to_first_token_seconds", 0.99),
                   "queue_time_p50_s": ("queue_time_seconds", 0.5)}
DISCOVER_LOOKBACK_S = 300  # workers seen this recently whose target Prometheus still has

Key = tuple[str, str, str]  # job, instance, worker label ("" when absent)


def selector_matchers(selector: Optional[str]) -> str:
    """The label matchers inside `{...}` ("" for none), checked enough to say what is wrong before
    Prometheus is asked (which checks the rest: it answers bad_data)."""
    s = (selector or "").strip()
    expected = f'expected label matchers in braces like {{job="sglang"}}, got {selector!r}'
    if not s:
        return ""
    if not (s.startswith("{") and s.endswith("}")) or not s.isprintable():
        raise ValueError(expected)
    inner = s[1:-1].strip()
    quote: Optional[str] = None
    escaped = False
    for c in inner:
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "{}":
            raise ValueError(expected)
    if quote:
        raise ValueError(f"{selector!r}: a quoted value is not closed")
    return inner.rstrip(",").strip()


def _escape_regex(text: str) -> str:
    """A literal for a PromQL regex inside a double-quoted string."""
    literal = re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)
    return literal.replace("\\", "\\\\").replace('"', '\\"')


# --------------------------------------------------------------------------------------------
# The queries


@dataclass(frozen=True)
class FleetQueries:
    """The PromQL of one poll, for a selector (its matchers) and the targets' scrape interval."""

    matchers: str = ""
    scrape_s: float = 1.0
    step_s: Optional[float] = None  # a history's step (None: a live poll)

    @property
    def averaged(self) -> bool:
        """A history step that spans several scrapes: each step stands for its whole interval
        (gauges averaged over it, counters' and histograms' increase over it), so no scrape between
        two steps goes unread and a running count is paired with the throughput of the same
        seconds."""
        return self.step_s is not None and self.step_s >= 2 * self.scrape_s

    @property
    def rate_window(self) -> str:
        live = max(5.0, 4 * self.scrape_s)
        return promql_duration(max(live, self.step_s) if self.averaged else live)  # type: ignore[type-var]

    @property
    def latency_window(self) -> str:
        if self.averaged:
            # the step's own requests: the live 10-scrape window would smear one step's queueing
            # over the next ones (and their running counts)
            return promql_duration(max(5.0, 4 * self.scrape_s, self.step_s))  # type: ignore[type-var]
        return promql_duration(max(30.0, 10 * self.scrape_s))

    def _series(self) -> str:
        if not self.averaged:
            return f"max by ({RANK_GROUP}, __name__) ({self.sel(GAUGES)})"
        # avg_over_time drops the metric name: each gauge is averaged on its own and named again
        # (the `specmon` label keeps `or` from matching one gauge's series against another's)
        w = promql_duration(self.step_s)  # type: ignore[arg-type]
        return " or ".join(
            f'label_replace(label_replace(max by ({RANK_GROUP}) (avg_over_time({self.sel(g)}[{w}])), '
            f'"__name__", "{g}", "", ""), "specmon", "{g}", "", "")' for g in GAUGES)

    def sel(self, names: str | Sequence[str], extra: str = "", ranks: bool = True) -> str:
        alts = names if isinstance(names, str) else "|".join(names)
        parts = [f'__name__=~"{SGLANG}({alts})"']
        parts += [p for p in (self.matchers, RANK0 if ranks else "", extra) if p]
        return "{" + ",".join(parts) + "}"

    def _rate(self, name: str, window: str, extra: str = "") -> str:
        return f"sum by ({GROUP}) (rate({self.sel(name, extra)}[{window}]))"

    def discover(self, lookback_s: float = DISCOVER_LOOKBACK_S) -> str:
        return (f"group by ({GROUP}) (last_over_time({self.sel('num_running_reqs', ranks=False)}"
                f"[{promql_duration(lookback_s)}]))")

    def up(self, jobs: Iterable[str]) -> Optional[str]:
        jobs = sorted(set(jobs))
        if not jobs:
            return None
        return f'max by (job, instance) (up{{job=~"{"|".join(_escape_regex(j) for j in jobs)}"}})'

    def poll(self, jobs: Iterable[str], split: bool = False) -> dict[str, str]:
        """The queries of one evaluation by name. split: each rate and latency figure a query of
        its own ("rates:<tag>", "latency:<tag>"), so that Prometheus evaluates them side by side
        (it runs one query on one core; a history's four percentiles were most of its time);
        a live poll asks them together, in fewer requests a tick."""
        rw, pw = self.rate_window, self.latency_window
        decode = self._rate("realtime_tokens_total", rw, 'mode="decode"')
        prefill = self._rate("realtime_tokens_total", pw, 'mode=~"prefill_cache|prefill_compute"')
        hit = self._rate("realtime_tokens_total", pw, 'mode="prefill_cache"')
        rates = {
            "gen_tok_s": f"{decode} or {self._rate('generation_tokens_total', rw)}",
            "cache_hit_rate": (f"({hit} or 0 * {prefill}) / {prefill} or "
                               f"{self._rate('cached_tokens_total', pw)} / {self._rate('prompt_tokens_total', pw)}"),
            "ttft_mean_s": (f"{self._rate('time_to_first_token_seconds_sum', pw)} / "
                            f"{self._rate('time_to_first_token_seconds_count', pw)}"),
            "queue_time_mean_s": (f"{self._rate('queue_time_seconds_sum', pw)} / "
                                  f"{self._rate('queue_time_seconds_count', pw)}"),
            "itl_mean_s": (f"{self._rate('inter_token_latency_seconds_sum', pw)} / "
                           f"{self._rate('inter_token_latency_seconds_count', pw)}"),
        }
        latency = {
            tag: f"histogram_quantile({q}, sum by (le, {GROUP}) (rate({self.sel(h + '_bucket')}[{pw}])))"
            for tag, (h, q) in LATENCY_FIGURES.items()
        }
        q = {
            "series": self._series(),
            "age": f"max by ({GROUP}) (timestamp({self.sel('num_running_reqs')}))",
        }
        for group, exprs in (("rates", rates), ("latency", latency)):
            if split:
                q.update({f"{group}:{tag}": _tagged({tag: e}) for tag, e in exprs.items()})
            else:
                q[group] = _tagged(exprs)
        up = self.up(jobs)
        if up is not None:
            q["up"] = up
        return q


def _tagged(exprs: dict[str, str]) -> str:
    return " or ".join(f'label_replace(({e}), "specmon", "{tag}", "", "")' for tag, e in exprs.items())


# --------------------------------------------------------------------------------------------
# One evaluation's results -> the fleet's reading


def bare(name: str) -> str:
    for p in ("sglang:", "sglang_"):
        if name.startswith(p):
            return name[len(p):]
    return name


def key_of(labels: Labels) -> Key:
    return labels.get("job", ""), labels.get("instance", ""), labels.get("worker", "")


@dataclass
class WorkerFigures:
    """What one evaluation of the queries says about one worker."""

    ranks: dict[Optional[str], dict[str, Optional[float]]] = field(default_factory=dict)  # dp_rank -> gauges
    engine_type: Optional[str] = None
    age_s: Optional[float] = None  # the newest sample's age at evaluation time
    figures: dict[str, Optional[float]] = field(default_factory=dict)  # rates and latencies by tag

    @property
    def has_series(self) -> bool:
        return bool(self.ranks) or self.age_s is not None


def read_results(results: dict[str, list[Point]]) -> tuple[dict[Key, WorkerFigures], dict[tuple[str, str], float]]:
    """Each worker's figures, and `up` by (job, instance), from one evaluation of the queries."""
    workers: dict[Key, WorkerFigures] = {}

    def fig(labels: Labels) -> Optional[WorkerFigures]:
        k = key_of(labels)
        if not k[1]:
            return None  # no instance label: not a scraped target's series
        return workers.setdefault(k, WorkerFigures())

    for labels, _, v in results.get("series", ()):
        w = fig(labels)
        if w is None:
            continue
        name = bare(labels.get("__name__", ""))
        if name not in GAUGES:
            continue
        rank = w.ranks.setdefault(labels.get("dp_rank"), {})
        if rank.get(name) is None:
            rank[name] = v
        if labels.get("engine_type"):
            w.engine_type = labels["engine_type"]
    for labels, ts, v in results.get("age", ()):
        w = fig(labels)
        if w is not None and v is not None:
            age = max(0.0, ts - v)
            w.age_s = age if w.age_s is None else min(w.age_s, age)
    for q, points in results.items():
        if q.partition(":")[0] not in ("rates", "latency"):  # one query a group, or a figure (split)
            continue
        for labels, _, v in points:
            tag = labels.get("specmon")
            if tag in RATE_FIGURES or tag in LATENCY_FIGURES:
                w = fig(labels)
                if w is not None and w.figures.get(tag) is None:
                    w.figures[tag] = v
    up: dict[tuple[str, str], float] = {}
    for labels, _, v in results.get("up", ()):
        if "instance" in labels and v is not None:
            up[(labels.get("job", ""), labels["instance"])] = v
    return workers, up
