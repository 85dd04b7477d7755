"""The query plan of `specmon replay --prometheus` over a long window: a step coarser than the
scrapes reads every scrape inside it (gauges averaged over the step, counters' and histograms'
increase over the step); a step at the scrape interval asks exactly what a live poll asks."""

from __future__ import annotations

from specmon.sources.promfleet import GAUGES, FleetQueries


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

