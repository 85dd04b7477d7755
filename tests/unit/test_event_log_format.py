"""events.jsonl format 2: a tick is written as its changes from the tick before; a decoded
event equals the one written, and format-1 logs (every tick in full) still read the same."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specmon.errors import UsageError
from specmon.model import (
    FleetStatus, GpuReading, GpuSnapshot, Marker, RankReading, Sample, SamplesTick, SessionStarted, WorkerStatus,
)
from specmon.session import codec
from specmon.session.folder import EVENTS_FILE, SessionWriter
from specmon.session.replay import ReplaySource, read_event_log

DATA = Path(__file__).resolve().parents[1] / "data"


def _ticks(n: int, workers: int) -> list[SamplesTick]:
    out = []
    for t in range(n):
        ts = 1000.0 + t
        samples = []
        for w in range(workers):
            s = Sample(ts=ts, arm=f"w{w}", up=True, running_reqs=t % 3 if w == 0 else 0, kv_usage=0.0,
                       kv_capacity_tokens=350000, scrape_s=0.01 * (t % 5), worker=f"http://127.0.0.1:{2000 + w}")
            if w == 1 and t == 3:  # a worker goes down and comes back, fields appear and vanish
                s = Sample(ts=ts, arm="w1", up=False, state="refused", reason="connection refused")
            if w == 2:
                s.ranks = [RankReading(dp_rank=r, running_reqs=t + r) for r in range(2 if t < 4 else 3)]
            samples.append(s)
        if t == 5:
            samples.pop()  # a worker left
        if t == 6:
            samples = samples[3:] + samples[:1]  # one missing in the middle, the order changed
        gpus = GpuSnapshot(ts=ts + 0.003, available=True,
                           gpus=[GpuReading(index=0, name="sim", uuid=None, mem_used_bytes=1, mem_total_bytes=2, util_pct=0.0,
                                                temp_c=30.0, power_w=35.0 + (t == 2), source="simulated", arm="w0")])
        fleet = FleetStatus(name="gw", kind="gateway", url="http://127.0.0.1:1", up=True,
                            workers=[WorkerStatus(url=f"http://127.0.0.1:{2000 + w}", arm=f"w{w}") for w in range(workers)])
        out.append(SamplesTick(samples=samples, gpus=gpus if t != 4 else None, fleets=[fleet], ts=ts))
    return out


def test_ticks_written_as_changes_decode_to_the_same_events_and_are_smaller():
    events = [SessionStarted(mode="attach", arms=[], interval_s=1.0, ts=999.0), *_ticks(8, 6),
              Marker(label="m", ts=1010.0)]
    enc, dec = codec.EventLogEncoder(), codec.EventLogDecoder()
    text = "\n".join(enc.encode(e) for e in events)
    back = [e for line in text.splitlines() if (e := dec.decode(line)) is not None]
    assert back == events
    assert '"type":"EventLog","format":2' in text and text.count('"d":') == 7 and '"#":' in text
    full = sum(len(codec.encode_event(e)) for e in events)
    assert len(text) < full / 2


def test_a_change_line_with_no_full_tick_before_it_is_one_clear_error(tmp_path):
    enc = codec.EventLogEncoder()
    lines = [enc.encode(t) for t in _ticks(3, 2)]
    log = tmp_path / EVENTS_FILE
    log.write_text("\n".join(lines[0].splitlines()[:1] + lines[1:]) + "\n")  # the full tick lost
    with pytest.raises(UsageError, match=r"events.jsonl:2: expected a specmon event .*no full SamplesTick"):
        read_event_log(log)
    log.write_text('{"type":"EventLog","format":9}\n')
    with pytest.raises(UsageError, match=r"events.jsonl:1: .*format 9"):
        read_event_log(log)


def test_a_writer_records_format_2_and_replays_it_exactly(tmp_path):
    w = SessionWriter(tmp_path / "s")
    events = [SessionStarted(mode="attach", arms=[], interval_s=1.0, ts=999.0), *_ticks(6, 4)]
    for e in events:
        w(e)
    w.close()
    log = (tmp_path / "s" / EVENTS_FILE).read_text()
    assert log.count('"d":') == 5
    assert read_event_log(tmp_path / "s" / EVENTS_FILE) == events


@pytest.mark.parametrize("name", ["session_gateway_fleet"])
def test_a_format_1_log_replays_as_before_and_rewritten_as_format_2_gives_the_same_events(tmp_path, name):
    old = read_event_log(DATA / name / EVENTS_FILE)
    assert '"d":' not in (DATA / name / EVENTS_FILE).read_text()  # the fixture is format 1
    ticks = [e for e in old if isinstance(e, SamplesTick)]
    assert len(ticks) > 10 and all(t.samples for t in ticks)
    folder = tmp_path / name
    shutil.copytree(DATA / name, folder)
    enc = codec.EventLogEncoder()
    (folder / EVENTS_FILE).write_text("".join(enc.encode(e) + "\n" for e in old))
    assert ReplaySource(folder, speed=1e9).events == ReplaySource(DATA / name, speed=1e9).events == old


def test_a_worker_flipping_between_up_and_late_is_written_as_changes_from_its_own_kind_of_reading():
    def tick(t: int) -> SamplesTick:
        ts = 2000.0 + t
        late = t % 2 == 1
        samples = [Sample(ts=ts, arm="w0", up=True, running_reqs=3, kv_usage=0.25, kv_capacity_tokens=350000,
                          gen_tok_s=100.0, ttft_p50_s=0.5, scrape_s=0.01 * (t % 3))]
        if late:  # a scrape that did not answer in time: no figures, the reason
            samples = [Sample(ts=ts, arm="w0", up=True, state="stale", reason="no answer yet")]
        samples.append(Sample(ts=ts, arm="w1", up=True, running_reqs=0, scrape_s=0.02))
        return SamplesTick(samples=samples, ts=ts)

    events = [tick(t) for t in range(10)]
    enc, dec = codec.EventLogEncoder(), codec.EventLogDecoder()
    lines = [enc.encode(e) for e in events]
    back = [e for line in "\n".join(lines).splitlines() if (e := dec.decode(line)) is not None]
    assert back == events
    # from the fourth tick on, a flip back writes only what changed since the last reading of its kind
    assert all("kv_capacity_tokens" not in line and "no answer" not in line for line in lines[3:]), lines[3:]
