"""Headless: a fleet that is down, or has no worker, says so on its tick line (the line was
blank: a down fleet has no sample rows to print)."""

from __future__ import annotations

from specmon.headless import tick_line
from specmon.model import FleetStatus, Sample, SamplesTick


def test_a_down_fleet_with_no_workers_is_named_with_its_reason():
    down = FleetStatus(name="gw", kind="gateway", url="http://127.0.0.1:9", up=False,
                       reason="connection refused at http://127.0.0.1:9")
    line = tick_line(SamplesTick(samples=[], gpus=None, fleets=[down], ts=1000.0), 999.0)
    assert "gateway gw: DOWN (connection refused at http://127.0.0.1:9)" in line


def test_an_up_fleet_with_no_workers_and_a_tick_with_nothing_say_so():
    empty = FleetStatus(name="prom", kind="prometheus", url="http://127.0.0.1:9090", up=True)
    assert "prometheus prom: no workers" in tick_line(SamplesTick(samples=[], gpus=None, fleets=[empty], ts=1.0), 0.0)
    assert tick_line(SamplesTick(samples=[], gpus=None, fleets=[], ts=1.0), 0.0).endswith("no server to show")


def test_an_up_fleet_with_workers_adds_nothing_to_their_cells():
    up = FleetStatus(name="gw", kind="gateway", url="http://127.0.0.1:9", up=True, workers=[])
    s = Sample(ts=1.0, arm="w0", up=True, running_reqs=2, queued_reqs=0)
    line = tick_line(SamplesTick(samples=[s], gpus=None, fleets=[up], ts=1.0), 0.0)
    assert "w0: run 2 q 0" in line and "gateway" not in line
