"""SGLang's per-request export files (--export-metrics-to-file): the real 0.5.23 server's lines
(tests/data/request-metrics/, recorded from it with curl) read as typed records, the reader
following rotation and a partial last line while a writer appends in another thread, window
aggregates, and the attach flag's bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specmon.analysis.request_windows import RequestWindowFeed, window_stats
from specmon.errors import UsageError
from specmon.model import ObservedRequestsRead, ObservedWindow
from specmon.session import codec
from specmon.sources.request_metrics import ExportFileTail, RequestMetricsSource, sources_from_args

DATA = Path(__file__).resolve().parents[1] / "data" / "request-metrics"
PLAIN = DATA / "sglang-request-metrics-20261205_11.log"
NGRAM = DATA / "ngram" / "sglang-request-metrics-20261205_11.log"


def _objs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _copy(src: Path, tmp_path: Path) -> Path:
    d = tmp_path / "export"
    d.mkdir(exist_ok=True)
    shutil.copy(src, d / src.name)
    return d


def test_real_server_lines_become_typed_records(tmp_path):
    d = _copy(PLAIN, tmp_path)
    read = RequestMetricsSource("a", d, from_start=True).poll(now=100.0)
    objs = _objs(PLAIN)
    assert isinstance(read, ObservedRequestsRead) and read.bad_lines == 0
    assert [r.rid for r in read.records] == [o["id"] for o in objs]
    for r, o in zip(read.records, objs):
        assert (r.ttft_s, r.queue_s, r.e2e_s) == (o["first_token_latency"], o["queue_time"], o["e2e_latency"])
        assert (r.prompt_tokens, r.output_tokens, r.cached_tokens) == (o["prompt_tokens"], o["completion_tokens"],
                                                                        o["cached_tokens"])
        assert r.finish_reason == o["finish_reason"]["type"] and r.ts_read == 100.0 and r.file == PLAIN.name
        assert r.received_ts == o["request_received_ts"] and r.finished_ts == o["request_finished_ts"]
        assert r.spec_verify_ct is None  # no speculative decoding on this server


def test_speculative_counts_from_an_ngram_server(tmp_path):
    read = RequestMetricsSource("a", _copy(NGRAM, tmp_path), from_start=True).poll(now=1.0)
    objs = _objs(NGRAM)
    assert [(r.spec_verify_ct, r.spec_accepted_drafts, r.spec_proposed_drafts, r.spec_accept_length)
            for r in read.records] == [(o["spec_verify_ct"], o["spec_num_correct_drafts"],
                                        o["spec_num_proposed_drafts"], o["spec_accept_length"]) for o in objs]
    w = window_stats("a", 0.0, 1.0, read.records)
    assert w.count == len(objs)
    assert w.accept_length == pytest.approx(sum(o["completion_tokens"] for o in objs) / sum(o["spec_verify_ct"] for o in objs))
    assert w.accept_rate == pytest.approx(sum(o["spec_num_correct_drafts"] for o in objs)
                                          / sum(o["spec_num_proposed_drafts"] for o in objs))
    assert w.mean_prompt_tokens == pytest.approx(sum(o["prompt_tokens"] for o in objs) / len(objs))
    ttfts = sorted(o["first_token_latency"] for o in objs)
    assert ttfts[0] <= w.ttft_p50_s <= w.ttft_p90_s <= ttfts[-1]


def test_existing_lines_are_skipped_unless_asked(tmp_path):
    d = _copy(PLAIN, tmp_path)
    assert RequestMetricsSource("a", d).poll() is None
    src = RequestMetricsSource("a", d)
    line = PLAIN.read_text().splitlines()[0]
    with open(d / PLAIN.name, "a") as f:
        f.write(line + "\n")
    assert len(src.poll().records) == 1


def test_partial_last_line_waits_for_its_newline(tmp_path):
    d = tmp_path / "export"
    d.mkdir()
    f = d / "sglang-request-metrics-20261205_11.log"
    line = PLAIN.read_text().splitlines()[1].encode()
    src = RequestMetricsSource("a", d)
    with open(f, "ab") as out:
        out.write(line[:100])
        out.flush()
        assert src.poll() is None  # half a line: not read, not counted bad
        out.write(line[100:] + b"\n" + line[:10])
        out.flush()
        got = src.poll()
        assert len(got.records) == 1 and got.bad_lines == 0
        out.write(b"garbage\n")
        out.flush()
        got = src.poll()  # the 10 bytes + "garbage": one line that is not JSON
        assert got.records == [] and got.bad_lines == 1


def test_reader_follows_rotation_while_a_writer_appends(tmp_path):
    """A writer thread appends lines in pieces (a line's halves in two writes) to one hour's file,
    then moves on to the next hour's, as SGLang rotates; the reader polls meanwhile. Every line
    is read exactly once, whole."""
    d = tmp_path / "export"
    d.mkdir()
    template = _objs(PLAIN)[1]
    n_per_file, files = 150, ["sglang-request-metrics-20261205_11.log", "sglang-request-metrics-20261205_12.log",
                              "sglang-request-metrics-20261205_13.log"]
    src = RequestMetricsSource("a", d)
    done = threading.Event()

    def writer() -> None:
        k = 0
        for name in files:
            with open(d / name, "ab", buffering=0) as out:
                for _ in range(n_per_file):
                    line = json.dumps(dict(template, id=f"r{k}", completion_tokens=k)).encode() + b"\n"
                    out.write(line[:37])
                    time.sleep(0.0005)
                    out.write(line[37:])
                    k += 1
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    got = []
    polls = 0
    while not done.is_set() or polls == 0:
        read = src.poll()
        polls += 1
        if read is not None:
            assert read.bad_lines == 0
            got.extend(read.records)
        time.sleep(0.002)
    t.join()
    read = src.poll()
    if read is not None:
        got.extend(read.records)
    assert [r.rid for r in got] == [f"r{k}" for k in range(n_per_file * len(files))]
    assert [r.output_tokens for r in got] == list(range(n_per_file * len(files)))
    assert {r.file for r in got} == set(files)
    assert polls > 3  # it was read while written, not once at the end


def test_a_replaced_file_is_read_from_its_start(tmp_path):
    d = _copy(PLAIN, tmp_path)
    src = RequestMetricsSource("a", d)
    path = d / PLAIN.name
    one = PLAIN.read_text().splitlines()[0] + "\n"
    path.unlink()
    path.write_text(one)  # smaller than the offset reached: a new file of the same name
    assert len(src.poll().records) == 1


def test_the_reader_never_writes_or_locks(tmp_path):
    d = _copy(PLAIN, tmp_path)
    os.chmod(d / PLAIN.name, 0o444)
    os.chmod(d, 0o555)  # a folder it may not write to: reading must still work
    try:
        tail = ExportFileTail(d, from_start=True)
        assert len(tail.read()) == len(_objs(PLAIN))
        assert sorted(os.listdir(d)) == [PLAIN.name]
    finally:
        os.chmod(d, 0o755)


def test_windows_close_on_time_and_round_trip_the_event_log(tmp_path):
    d = _copy(PLAIN, tmp_path)
    feed = RequestWindowFeed(RequestMetricsSource("a", d), window_s=10.0)
    assert feed.poll(now=0.0) == []
    with open(d / PLAIN.name, "a") as f:
        f.write(PLAIN.read_text())
    evs = feed.poll(now=3.0)
    assert [type(e) for e in evs] == [ObservedRequestsRead]
    evs = feed.poll(now=10.5)
    assert [type(e) for e in evs] == [ObservedWindow]
    w = evs[0]
    assert (w.t0, w.t1, w.count) == (0.0, 10.5, len(_objs(PLAIN)))
    assert codec.decode_event(codec.encode_event(w)) == w
    assert feed.poll(now=21.0)[0].count == 0  # an idle window says so
    assert feed.close(now=22.0) == []


def test_bad_flag_values_are_one_line(tmp_path):
    d = tmp_path / "export"
    d.mkdir()
    with pytest.raises(UsageError, match="not a folder"):
        sources_from_args([str(tmp_path / "nope")], ["a"])
    with pytest.raises(UsageError, match="say whose folder it is: NAME=DIR"):
        sources_from_args([str(d)], ["a", "b"])
    with pytest.raises(UsageError, match="no server is named 'c'"):
        sources_from_args([f"c={d}"], ["a", "b"])
    assert [s.arm for s in sources_from_args([f"b={d}"], ["a", "b"])] == ["b"]
    with pytest.raises(UsageError, match="needs the URL of the server that writes it"):
        sources_from_args([str(d)], [])
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", "http://127.0.0.1:9", "--headless",
                        "--duration", "1", "--request-metrics-dir", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"specmon: error: --request-metrics-dir {tmp_path / 'nope'}: not a folder")


def test_session_folder_records_and_reads_back_observed_requests(tmp_path):
    from specmon.model import SessionEnded, SessionStarted
    from specmon.session.folder import EVENTS_FILE, SessionWriter, read_observed_requests

    read = RequestMetricsSource("a", _copy(NGRAM, tmp_path), from_start=True).poll(now=1796470000.123456)
    out = tmp_path / "session"
    w = SessionWriter(out)
    w(SessionStarted(mode="attach", arms=[], interval_s=1.0, isl=1, osl=1))
    assert not (out / "observed_requests.csv").exists()  # only a session that reads export files has it
    w(read)
    w(window_stats("a", 0.0, 1.0, read.records))
    w(SessionEnded(reason="done"))
    w.close()
    back = read_observed_requests(out)
    assert len(back) == len(read.records)
    for b, r in zip(back, read.records):  # stamps to the microsecond, latencies to 6 digits, counts exact
        for name, v in vars(r).items():
            got = getattr(b, name)
            if name.endswith("_ts") or name == "ts_read":
                assert got == pytest.approx(v, abs=2e-6), name
            elif isinstance(v, float):
                assert got == pytest.approx(v, rel=1e-5), name
            else:
                assert got == v, name
    events = (out / EVENTS_FILE).read_text()
    assert "ObservedWindow" in events and "ObservedRequestsRead" not in events  # the CSV is their record


def test_occupancy_from_the_servers_own_stamps_matches_a_step_count():
    """The time-weighted running and queued counts of a window, against counting the requests in
    each state at every millisecond of it."""
    import random

    from specmon.analysis.request_windows import occupancy
    from specmon.model import ObservedRequest

    rng = random.Random(5)
    recs = []
    for k in range(60):
        rx = rng.uniform(0, 20)
        q = rng.choice([0.0, rng.uniform(0, 2)])
        recs.append(ObservedRequest(arm="a", ts_read=0.0, received_ts=rx, queue_s=q,
                                    finished_ts=rx + q + rng.uniform(0.1, 4), output_tokens=k))
    t0, t1 = 5.0, 15.0
    occ = occupancy(recs, t0, t1)
    steps = [t0 + (i + 0.5) / 1000 for i in range(int((t1 - t0) * 1000))]
    running = sum(sum(1 for r in recs if r.received_ts + r.queue_s <= t < r.finished_ts) for t in steps) / len(steps)
    queued = sum(sum(1 for r in recs if r.received_ts <= t < r.received_ts + r.queue_s) for t in steps) / len(steps)
    assert occ.running == pytest.approx(running, abs=0.01) and occ.queued == pytest.approx(queued, abs=0.01)
    ended = [r for r in recs if t0 <= r.finished_ts < t1]
    assert occ.finished == len(ended) and occ.output_tok_s == pytest.approx(sum(r.output_tokens for r in ended) / 10)
    assert occupancy([ObservedRequest(arm="a", ts_read=0.0)], 0, 1) is None and occupancy(recs, 3, 3) is None
