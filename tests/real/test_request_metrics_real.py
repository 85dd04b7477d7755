"""The real SGLang server's --export-metrics-to-file lines (real_sglang tier): a few requests of
known lengths, one of them made to queue behind a long one, read back by the reader while the
server runs; each request is there once with its lengths, its TTFT and queue time where the
release fills them (0.5.23; 0.5.10.post1 leaves queue_time at 0)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from helpers import realsglang as rs
from specmon.sources.request_metrics import RequestMetricsSource

pytestmark = pytest.mark.real_sglang


def _generate(url: str, n_in: int, n_out: int, rid: str) -> dict:
    body = json.dumps({"rid": rid, "input_ids": list(range(5, 5 + n_in)),
                       "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True}}).encode()
    req = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_real_server_export_files_are_read_as_they_grow(tmp_path):
    why = rs.missing()
    if why:
        pytest.skip(why)
    export = tmp_path / "export"
    with rs.start_real(tmp_path / "real.log", "--sleep-on-idle", "--export-metrics-to-file",
                       "--export-metrics-to-file-dir", str(export), "--max-running-requests", "1") as real:
        src = RequestMetricsSource("real", export)  # from now: the warm-up's line is skipped
        shapes = {"rm-a": (40, 24), "rm-b": (80, 8), "rm-c": (16, 4)}
        answers = {}
        # rm-b and rm-c arrive while rm-a runs: with one running request at most they wait
        threads = [threading.Thread(target=lambda k=k, s=s: answers.__setitem__(k, _generate(real.url, *s, k)))
                   for k, s in shapes.items()]
        for t in threads:
            t.start()
            time.sleep(0.05)
        got = []
        deadline = time.monotonic() + 120
        while len(got) < len(shapes) and time.monotonic() < deadline:
            read = src.poll()
            if read is not None:
                assert read.bad_lines == 0
                got.extend(read.records)
            time.sleep(0.1)
        for t in threads:
            t.join(60)
        version = json.loads(urllib.request.urlopen(real.url + "/get_server_info", timeout=10).read()).get("version")
    by_rid = {r.rid: r for r in got}
    assert sorted(by_rid) == sorted(shapes) and len(got) == len(shapes)
    for rid, (n_in, n_out) in shapes.items():
        r, meta = by_rid[rid], answers[rid]["meta_info"]
        assert (r.prompt_tokens, r.output_tokens) == (n_in, n_out)
        assert r.e2e_s == pytest.approx(meta["e2e_latency"]) and r.e2e_s > 0
        assert r.finished_ts >= r.received_ts
        if str(version).startswith("0.5.23"):
            assert r.ttft_s is not None and 0 < r.ttft_s <= r.e2e_s
            assert r.queue_s is not None and r.queue_s >= 0
    if str(version).startswith("0.5.23"):
        # one running request at most: a request received while another ran waited about as long
        # as that one still had to run (the server's own stamps say how long that was)
        first = min(by_rid.values(), key=lambda r: r.received_ts)
        for r in by_rid.values():
            if r is not first and r.received_ts < first.finished_ts - 0.05:
                assert r.queue_s >= 0.5 * (first.finished_ts - r.received_ts), (r, first)
