"""A fleet read from a Prometheus server: its workers are the SGLang servers whose series Prometheus
holds, and every figure of every worker comes from a handful of PromQL queries over the whole
fleet per poll (never one query per worker). Read-only: every request is a GET of Prometheus's
HTTP API (/api/v1/query, /api/v1/query_range, /api/v1/targets, /api/v1/status/config).

Names: a series is `sglang:<name>` or `sglang_<name>`, depending on how Prometheus negotiated the
scrape (SGLang's prometheus_client writes the underscore form to an OpenMetrics client); every
query matches both with `{__name__=~"sglang[:_]<name>"}`.

Workers: one per (job, instance[, worker]) label set of `num_running_reqs` (a `worker` label, where
a relabelling rule adds one, names the arm; else a short form of the instance). A `dp_rank` label
gives one RankReading per data-parallel rank. Copies of one quantity written by other TP/PP/EP
ranks are left out (`tp_rank=~"0|"`: rank 0, or no such label), as in sources/prom.py.

The queries (FleetQueries; `SEL` is the user's selector, `RW` the rate window of max(5 s, 4 scrape
intervals), `PW` the latency window of max(30 s, 10 scrape intervals)):
- series: `max by (job, instance, worker, dp_rank, engine_type, __name__)` of the gauges
  (running, queued, KV used/capacity/usage, acceptance length and rate, gen_throughput, requests)
- age: `max by (...) (timestamp(num_running_reqs))`: the newest sample behind each worker, whose
  age at the query's evaluation time is Sample.stale_s (Prometheus's clock on both sides)
- up: `up{job=~"<the fleet's jobs>"}`: a target Prometheus cannot scrape is a worker that is down
- rates: generation tok/s (decode tokens counter, else generation_tokens_total) over RW; prefix
  cache hit rate from the token counters, mean TTFT, queue time and ITL (rate of _sum / _count) over PW
- latency: `histogram_quantile(q, sum by (le, job, instance, worker) (rate(<h>_bucket[PW])))` for
  TTFT p50/p90/p99 and queue time p50
Several figures travel in one query as `label_replace(EXPR, "specmon", "<figure>", "", "") or ...`.
Slower cadence: /api/v1/targets (scrape interval, scrape URL, last error) and a discovery of the
workers seen in the last 5 minutes (a worker whose target is down has no series now, only `up`).

Values: NaN and +-Inf are unknown (None, an empty cell, never 0), so an idle worker has no TTFT
percentile rather than a made-up one; a missing histogram is None too. A worker whose newest
sample is older than STALE_AFTER scrape intervals is "stale": up=False, its last figures kept but
never presented as live. Rates are per wall second (Prometheus knows nothing of a simulator's
--speed).

Prometheus down, slow or answering errors: the fleet is down (FleetStatus up=False, the query and
the error), its workers are kept, and the next try waits a back-off that doubles up to a bound.
The parsing functions are pure (no I/O) and never raise anything but PromQueryError/ValueError
on what a server sends; PrometheusFleet and PrometheusHistory do the HTTP.

One module per idea: parse.py (what Prometheus's API sends, read into values; PromQueryError),
api.py (the HTTP: _Api, the queries of one evaluation asked at once), queries.py (the PromQL,
FleetQueries, and its results read back into each worker's figures), view.py (FleetView and
worker_sample: figures into arms, Samples and the FleetStatus), fleet.py (PrometheusFleet, the live
source), history.py (PrometheusHistory, a past window replayed).
"""

from specmon.sources.promfleet.api import prometheus_base
from specmon.sources.promfleet.fleet import PrometheusFleet, first_reading
from specmon.sources.promfleet.history import PrometheusHistory
from specmon.sources.promfleet.parse import (PromQueryError, api_data, parse_duration, parse_matrix, parse_time,
                                             parse_vector, prom_float)
from specmon.sources.promfleet.queries import (GAUGES, LATENCY_FIGURES, RATE_FIGURES, FleetQueries, read_results,
                                               selector_matchers)
from specmon.sources.promfleet.view import KNEE_NOTE, FleetView, short_name, worker_sample

__all__ = [
    "GAUGES", "KNEE_NOTE", "LATENCY_FIGURES", "RATE_FIGURES", "FleetQueries", "FleetView", "PromQueryError",
    "PrometheusFleet", "PrometheusHistory", "api_data", "first_reading", "parse_duration", "parse_matrix",
    "parse_time", "parse_vector", "prom_float", "prometheus_base", "read_results", "selector_matchers",
    "short_name", "worker_sample",
]
