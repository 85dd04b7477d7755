"""The session folder's writer: headers from the contract, empty cells for unknowns, rows flushed
as written, marker rows, session.json rewritten atomically, no credentials, no torn rows."""

from __future__ import annotations

import csv
import json

import pytest

from specmon.errors import UsageError
from specmon.model import (
    LEVEL_COLUMNS, REQUEST_COLUMNS, SAMPLE_COLUMNS, ArmSpec, KneeCalled, LevelFinished, LevelResult, Marker, RampPlan, RampStarted,
    RequestFinished, RequestRecord, Sample, SamplesTick, SessionEnded, SessionStarted,
)
from specmon.session import codec
from specmon.session.folder import EVENTS_FILE, SessionWriter, check_writable, read_meta
from specmon.session.replay import read_event_log


def read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_headers_rows_flushed_and_unknowns_empty(tmp_path):
    w = SessionWriter(tmp_path / "s")
    assert read(tmp_path / "s" / "samples.csv") == [SAMPLE_COLUMNS]
    assert read(tmp_path / "s" / "requests.csv") == [REQUEST_COLUMNS]
    assert read(tmp_path / "s" / "levels.csv") == [LEVEL_COLUMNS]
    w(SamplesTick(samples=[Sample(ts=1000.123456, arm="a", up=True, running_reqs=3, kv_usage=0.25, gen_tok_s=None,
                                  server_restarted=False)], ts=1000.123456))
    # Flushed: another reader sees the row while the writer is still open.
    rows = read(tmp_path / "s" / "samples.csv")
    row = dict(zip(rows[0], rows[1]))
    assert row["ts"] == "1000.123" and row["up"] == "1" and row["running_reqs"] == "3"
    assert row["kv_usage"] == "0.25" and row["gen_tok_s"] == "" and row["accept_length"] == ""
    assert row["server_restarted"] == "0" and row["marker"] == ""
    w(RequestFinished(record=RequestRecord(arm="a", level=0, offered_concurrency=4, request_id="r1", t_scheduled=1.0,
                                           t_start=1.5, ttft_s=0.2)))
    w(LevelFinished(level=0, results=[LevelResult(arm="a", level=0, offered_concurrency=4, ok=10, knee="plateau")]))
    req = dict(zip(REQUEST_COLUMNS, read(tmp_path / "s" / "requests.csv")[1]))
    assert req["ttft_s"] == "0.2" and req["e2e_s"] == "" and req["status"] == "ok"
    lvl = dict(zip(LEVEL_COLUMNS, read(tmp_path / "s" / "levels.csv")[1]))
    assert lvl["knee"] == "plateau" and lvl["output_tok_s"] == "" and lvl["ok"] == "10"
    w(SessionEnded(reason="done"))
    w(SessionEnded(reason="again"))  # the folder is closed: ignored
    assert json.loads((tmp_path / "s" / "session.json").read_text())["exit_reason"] == "done"
    # The requests are in requests.csv only; every other event is in the log, in order.
    kinds = [type(e).__name__ for e in read_event_log(tmp_path / "s" / EVENTS_FILE)]
    assert kinds == ["SamplesTick", "LevelFinished", "SessionEnded"]


def test_marker_and_session_json(tmp_path):
    w = SessionWriter(tmp_path)
    w(Marker(label="changed flag", ts=5.0))
    rows = read(tmp_path / "samples.csv")
    m = dict(zip(rows[0], rows[1]))
    assert m["arm"] == "" and m["marker"] == "changed flag" and m["ts"] == "5.000"
    w(SessionStarted(mode="ramp", arms=[ArmSpec(name="a", url="http://user:pw@127.0.0.1:3000", api_key_env="KEY")]))
    w(RampStarted(plan=RampPlan(levels=[1, 2]), time_scale={"a": 1.0}, workload={}))
    doc = json.loads((tmp_path / "session.json").read_text())
    assert [(a["name"], a["url"], a["api_key_env"]) for a in doc["arms"]] == [("a", "http://127.0.0.1:3000", "KEY")]
    assert doc["ramp_plan"]["levels"] == [1, 2]
    assert doc["markers"] == [{"ts": 5.0, "label": "changed flag"}]
    assert doc["specmon_version"] and doc["host"]["hostname"] and doc["start_time"]
    assert not list(tmp_path.glob("*.tmp"))
    text = "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
    assert "pw@" not in text
    meta = read_meta(tmp_path)
    assert meta.arm("a").url == "http://127.0.0.1:3000" and meta.ramp_plan["levels"] == [1, 2]


def test_a_mark_after_the_end_is_kept(tmp_path):
    w = SessionWriter(tmp_path)
    w(SessionEnded(reason="done"))
    w(Marker(label="late", ts=9.0))
    assert read_meta(tmp_path).markers == [{"ts": 9.0, "label": "late"}]
    assert [e.label for e in read_event_log(tmp_path / EVENTS_FILE) if isinstance(e, Marker)] == ["late"]


def test_events_round_trip_exactly():
    e = SamplesTick(samples=[Sample(ts=1.0000001, arm="a", up=True, kv_usage=1 / 3, running_reqs=7)], ts=1.0000001)
    back = codec.decode_event(codec.encode_event(e))
    assert back == e and type(back.samples[0]) is Sample
    plan = RampStarted(plan=RampPlan(levels=[2, 4], slo_ttft_s=2.0), time_scale={"a": 2.5}, workload={"x": 1})
    assert codec.decode_event(codec.encode_event(plan)) == plan


def test_a_torn_last_line_is_dropped_and_a_bad_one_named(tmp_path):
    w = SessionWriter(tmp_path)
    w(Marker(label="one", ts=1.0))
    w.close()
    log = tmp_path / EVENTS_FILE
    with open(log, "a") as f:
        f.write('{"type": "Marker", "label": "tw')  # killed mid-write
    assert [e.label for e in read_event_log(log)] == ["one"]
    log.write_text('{"type": "Nope"}\n' + log.read_text())
    with pytest.raises(UsageError, match=r"events.jsonl:1: expected a specmon event"):
        read_event_log(log)


def test_an_unwritable_folder_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match=r"--out .*file/s: cannot write there"):
        check_writable(blocker / "s")


def test_a_knee_is_labelled_on_its_own_level_when_confirmed_later(tmp_path):
    w = SessionWriter(tmp_path)
    for i, c in enumerate((10, 18, 22, 26)):
        w(LevelFinished(level=i, results=[LevelResult(arm="a", level=i, offered_concurrency=c),
                                          LevelResult(arm="b", level=i, offered_concurrency=c)]))
        if i == 3:  # a plateau at C=18, confirmed at C=26
            w(KneeCalled(arm="a", definition="plateau", concurrency=18, detail="", knee_level=1, confirmed_level=3))
            w(KneeCalled(arm="a", definition="queueing", concurrency=18, detail="", knee_level=1, confirmed_level=3))
    rows = [dict(zip(LEVEL_COLUMNS, r)) for r in read(tmp_path / "levels.csv")[1:]]
    assert [(r["arm"], r["offered_concurrency"], r["knee"]) for r in rows if r["knee"]] == [("a", "18", "plateau;queueing")]
    assert len(rows) == 8 and not list(tmp_path.glob("*.tmp"))
    w(LevelFinished(level=4, results=[LevelResult(arm="a", level=4, offered_concurrency=30)]))  # appends still work
    assert len(read(tmp_path / "levels.csv")) == 10
