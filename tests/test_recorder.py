"""The recorder: headers from the contract, empty cells for unknowns, rows flushed as written,
marker rows, session.json rewritten atomically, no credentials."""

from __future__ import annotations

import csv
import json

from specmon.model import LEVEL_COLUMNS, REQUEST_COLUMNS, SAMPLE_COLUMNS, LevelResult, RequestRecord, Sample
from specmon.session.recorder import Recorder


def read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_headers_rows_flushed_and_unknowns_empty(tmp_path):
    rec = Recorder(tmp_path / "s")
    assert read(tmp_path / "s" / "samples.csv") == [SAMPLE_COLUMNS]
    assert read(tmp_path / "s" / "requests.csv") == [REQUEST_COLUMNS]
    assert read(tmp_path / "s" / "levels.csv") == [LEVEL_COLUMNS]
    rec.write_sample(Sample(ts=1000.123456, arm="a", up=True, running_reqs=3, kv_usage=0.25, gen_tok_s=None,
                            server_restarted=False))
    # Flushed: another reader sees the row while the recorder is still open.
    rows = read(tmp_path / "s" / "samples.csv")
    row = dict(zip(rows[0], rows[1]))
    assert row["ts"] == "1000.123" and row["up"] == "1" and row["running_reqs"] == "3"
    assert row["kv_usage"] == "0.25" and row["gen_tok_s"] == "" and row["accept_length"] == ""
    assert row["server_restarted"] == "0" and row["marker"] == ""
    rec.write_request(RequestRecord(arm="a", level=0, offered_concurrency=4, request_id="r1", t_scheduled=1.0,
                                    t_start=1.5, ttft_s=0.2))
    rec.write_level(LevelResult(arm="a", level=0, offered_concurrency=4, ok=10, knee="plateau"))
    req = dict(zip(REQUEST_COLUMNS, read(tmp_path / "s" / "requests.csv")[1]))
    assert req["ttft_s"] == "0.2" and req["e2e_s"] == "" and req["status"] == "ok"
    lvl = dict(zip(LEVEL_COLUMNS, read(tmp_path / "s" / "levels.csv")[1]))
    assert lvl["knee"] == "plateau" and lvl["output_tok_s"] == "" and lvl["ok"] == "10"
    rec.close("done")
    rec.close("again")  # idempotent
    assert json.loads((tmp_path / "s" / "session.json").read_text())["exit_reason"] == "done"


def test_marker_and_session_json(tmp_path):
    rec = Recorder(tmp_path)
    rec.write_marker("changed flag", ts=5.0)
    rows = read(tmp_path / "samples.csv")
    m = dict(zip(rows[0], rows[1]))
    assert m["arm"] == "" and m["marker"] == "changed flag" and m["ts"] == "5.000"
    rec.update_session(arms=[{"name": "a", "url": "http://user:pw@127.0.0.1:3000", "api_key": "sk-x"}],
                       ramp_plan={"levels": [1, 2]})
    doc = json.loads((tmp_path / "session.json").read_text())
    assert doc["arms"] == [{"name": "a", "url": "http://127.0.0.1:3000"}]
    assert doc["markers"] == [{"ts": 5.0, "label": "changed flag"}]
    assert doc["specmon_version"] and doc["host"]["hostname"] and doc["start_time"]
    assert not list(tmp_path.glob("*.tmp"))
    text = "".join(p.read_text() for p in tmp_path.iterdir())
    assert "sk-x" not in text and "pw@" not in text
