"""The query plan of `specmon replay --prometheus` over a long window: a step coarser than the
scrapes reads every scrape inside it (gauges averaged over the step, counters' and histograms'
increase over the step); a step at the scrape interval asks exactly what a live poll asks; each
rate and percentile goes as a query of its own, read as the grouped poll is."""

from __future__ import annotations

from specmon.sources.promfleet import GAUGES, LATENCY_FIGURES, RATE_FIGURES, FleetQueries, read_results


def test_a_step_of_several_scrapes_reads_every_scrape_in_it():
    q = FleetQueries('job="sglang"', 60.0, 300.0)
    assert q.averaged and q.rate_window == "300s" and q.latency_window == "300s"
    poll = q.poll({"sglang"})
    for g in GAUGES:  # each gauge averaged over the step and named again (avg_over_time drops names)
        assert f'"__name__", "{g}"' in poll["series"]
    assert poll["series"].count("avg_over_time(") == len(GAUGES) and poll["series"].count("[300s]") == len(GAUGES)
    assert "[300s]" in poll["rates"] and "[300s]" in poll["latency"]
    assert "[600s]" not in poll["latency"]  # not the live 10-scrape window


def test_a_step_at_the_scrape_interval_asks_what_a_live_poll_asks():
    for step in (None, 60.0, 90.0):
        assert FleetQueries('job="sglang"', 60.0, step).poll({"sglang"}) == FleetQueries('job="sglang"', 60.0).poll({"sglang"})
    assert not FleetQueries("", 1.0, 1.0).averaged and FleetQueries("", 1.0, 2.0).averaged



def test_a_history_asks_each_rate_and_percentile_on_its_own_and_reads_them_as_one_poll():
    # Prometheus evaluates one query on one core: a history's figures go as queries of their own
    # (evaluated side by side), with the same expressions and the same reading as the grouped poll.
    q = FleetQueries('job="sglang"', 60.0, 300.0)
    grouped, split = q.poll({"sglang"}), q.poll({"sglang"}, split=True)
    figures = [n for n in split if ":" in n]
    assert {n.partition(":")[0] for n in figures} == {"rates", "latency"}
    assert {n.partition(":")[2] for n in figures} == set(RATE_FIGURES) | set(LATENCY_FIGURES)
    for group in ("rates", "latency"):
        assert " or ".join(split[n] for n in figures if n.startswith(group + ":")) == grouped[group]
    assert {n: e for n, e in split.items() if ":" not in n} == {n: e for n, e in grouped.items()
                                                              if n not in ("rates", "latency")}

    def point(tag: str, worker: str, v: float):
        return {"job": "sglang", "instance": worker, "specmon": tag}, 1000.0, v

    tags = [(t, "rates") for t in RATE_FIGURES] + [(t, "latency") for t in LATENCY_FIGURES]
    values = {(t, w): float(i * 10 + j) for i, (t, _) in enumerate(tags) for j, w in enumerate(("a:1", "b:1"))}
    together = {g: [point(t, w, values[t, w]) for (t, gg) in tags if gg == g for w in ("a:1", "b:1")]
                for g in ("rates", "latency")}
    apart = {f"{g}:{t}": [point(t, w, values[t, w]) for w in ("a:1", "b:1")] for t, g in tags}
    workers, _ = read_results(together)
    assert workers == read_results(apart)[0]
    assert workers[("sglang", "a:1", "")].figures == {t: values[t, "a:1"] for t, _ in tags}
