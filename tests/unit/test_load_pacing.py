"""The load loop's pacer (LoadLoop.pace): a pause after each pass that read a socket, so one
pass serves many streams, while every chunk keeps the time it arrived (the kernel's stamp).

A real loopback server streams to N connections at once, a few events each at known times; the
client reads through the C reader (or, with SPECMON_NATIVE=0, the Python one: the last test
runs the paced tests again that way) on a LoadLoop paced with a pause far longer than the real
one, so a stamp taken at the read would be late by tens of milliseconds."""

import asyncio
import json
import socket
import sys
import threading
import time

import pytest

from helpers.loopback_http import STREAM_HEAD, chunk, read_request
from specmon.load import loop as load_loop
from specmon.load import native
from specmon.load.client import GenerateClient, RequestOutcome
from specmon.load.loop import LoadLoop
from specmon.load.pacing import Pacer
from specmon.load.workload import Workload

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel stamps: Linux")
needs_c = pytest.mark.skipif(native.fastread is None, reason="the C reader is not built here")

STREAMS = 16
GAP_S = 0.15  # between one stream's events: longer than the test's pause, as a decode step is
PAUSE_S = 0.05


def _event(n: int, final: bool = False) -> bytes:
    meta = {"id": "feedc0de", "completion_tokens": n, "prompt_tokens": 8,
            "finish_reason": {"type": "length"} if final else None}
    return b"data: " + json.dumps({"text": "x" * n, "meta_info": meta}, separators=(",", ":")).encode() + b"\n\n"


def _serve(srv: socket.socket, sent: list) -> None:
    """Every connection's request first, then the same event to each in turn, GAP_S apart; the
    perf stamps before and after each write, per event (on loopback the bytes arrive within it)."""
    conns = []
    for _ in range(STREAMS):
        c, _ = srv.accept()
        read_request(c)
        conns.append(c)
    for c in conns:
        c.sendall(STREAM_HEAD + chunk(_event(1)))
    for k in range(2, 6):
        time.sleep(GAP_S)
        stamps = []
        for c in conns:
            before = time.perf_counter()
            c.sendall(chunk(_event(k, final=k == 5)))
            stamps.append((before, time.perf_counter()))
        sent.append(stamps)
    for c in conns:
        c.sendall(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    time.sleep(0.5)
    for c in conns:
        c.close()


def _round_began(stamps: list) -> float:
    """When the server began a round of writes. (A round is the bound, not one write: a stream's
    outcome and the server's connection of the same index need not be the same stream, accept
    order is not the client's order.)"""
    return min(before for before, _ in stamps)


def _round_ended(stamps: list) -> float:
    """When the server's last write of a round returned."""
    return max(after for _, after in stamps)


def _paced_streams(name: str) -> tuple[LoadLoop, list, list]:
    """STREAMS requests against _serve on a paced LoadLoop (stopped): the loop, the outcomes and
    the server's write stamps."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(STREAMS)
    sent: list = []
    server = threading.Thread(target=_serve, args=(srv, sent), daemon=True)
    server.start()
    load = LoadLoop(name=name)
    try:
        load.pace(True)

        async def run() -> list:
            client = GenerateClient(f"http://127.0.0.1:{srv.getsockname()[1]}", max_concurrency=STREAMS)
            assert client.kernel_stamps
            outs = [RequestOutcome(request_id=f"r{k}", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
                    for k in range(STREAMS)]
            prompt = Workload(input_len=8).prompt(0)
            await asyncio.gather(*(client.generate(prompt, 5, o) for o in outs))
            await client.aclose()
            return outs

        outs = load.call(run(), timeout=30)
        assert load.pacing
    finally:
        load.stop()
        srv.close()
    server.join(5)
    return load, outs, sent


def test_a_paced_loop_reads_many_streams_a_pass_and_keeps_the_arrival_times(monkeypatch):
    monkeypatch.setattr(load_loop, "PACE_PAUSE_S", PAUSE_S)
    load, outs, sent = _paced_streams("test-pacing")
    assert all(o.status == "ok" for o in outs), [o.error for o in outs]
    # the four timed events of each stream, each stamped when it arrived, not when it was read
    late, early = [], []
    for s, o in enumerate(outs):
        assert [n for _, n in o.token_events] == [1, 1, 1, 1, 1]
        for k in range(4):
            late.append(o.token_events[k + 1][0] - _round_ended(sent[k]))
            early.append(o.token_events[k + 1][0] - _round_began(sent[k]))
    late.sort()
    # a stamp lies between its round's first write and its last (a read paced 50 ms late keeps
    # the arrival time)
    assert min(early) > -0.001 and late[len(late) // 2] < 0.005 and late[-1] < 0.02, (early, late)
    # one pause a pass: the 64 timed events came in far fewer passes than reads
    assert 4 <= load.pauses <= 24, load.pauses


def test_the_pause_is_a_share_of_the_chunk_gaps(monkeypatch):
    """Streams whose chunks come GAP_S apart: after the first gaps the pause is half their 1st
    percentile (here allowed up to 0.1 s), and still every chunk is read alone, at its arrival."""
    monkeypatch.setattr(load_loop, "PACE_PAUSE_MAX_S", 0.1)
    load, outs, sent = _paced_streams("test-pacing-gap")
    assert all(o.status == "ok" for o in outs), [o.error for o in outs]
    # the server wrote a round to all streams within a few ms, GAP_S after the last round
    # (the estimate may step down 10 % for a round the scheduler delayed, never far)
    assert load.chunk_gap_s is not None and 0.06 <= load.chunk_gap_s <= GAP_S + 0.05, load.chunk_gap_s
    assert load.pause_s == load_loop.pace_pause(load.chunk_gap_s)  # the pacer's rule is pace_pause's
    assert load.pause_s == pytest.approx(load.chunk_gap_s / 2)
    for s, o in enumerate(outs):
        assert [n for _, n in o.token_events] == [1, 1, 1, 1, 1]  # no two chunks in one read
        late = [o.token_events[k + 1][0] - _round_ended(sent[k]) for k in range(4)]
        early = [o.token_events[k + 1][0] - _round_began(sent[k]) for k in range(4)]
        assert max(late) < 0.02 and min(early) > -0.001, (early, late)


def test_pause_bounds():
    assert load_loop.pace_pause(None) == load_loop.PACE_PAUSE_S  # no gap seen yet
    assert load_loop.pace_pause(0.0) == load_loop.PACE_PAUSE_S
    assert load_loop.pace_pause(0.004) == pytest.approx(0.002)
    assert load_loop.pace_pause(1.0) == load_loop.PACE_PAUSE_MAX_S


def test_pacing_off_pauses_nothing():
    load = LoadLoop(name="test-pacing-off")
    try:
        load.pace(True)
        load.pace(False)
        time.sleep(0.1)
        assert not load.pacing and load.pauses == 0
    finally:
        load.stop()


def test_the_pacer_pauses_its_shortest_before_any_gap():
    # One pacer for either reader: its pause, rule and figures are Python's (pacing.py).
    loop = asyncio.new_event_loop()
    pacer = Pacer(loop, 0.002, 0.004, 0.5)
    try:
        pacer.start()  # this thread's readers have seen no gap
        assert (pacer.pauses, pacer.pause_s, pacer.chunk_gap_s) == (0, 0.0, None)
        t = time.perf_counter()
        pacer._pause()
        assert time.perf_counter() - t >= 0.002
        assert (pacer.pauses, pacer.pause_s, pacer.chunk_gap_s) == (1, 0.002, None)
        with pytest.raises(ValueError):
            Pacer(loop, 0.0, 0.004, 0.5)
    finally:
        pacer.stop()
        loop.close()


@needs_c
def test_the_c_reader_asks_for_a_pause_only_with_a_loop_and_a_callable():
    fr = native.fastread
    for args in ((None, lambda: None), (asyncio, None), (asyncio, 3)):
        with pytest.raises(TypeError):
            fr.set_pacer(*args)
    fr.set_pacer(None, None)
    fr.pause_done()


def test_the_load_threads_cpu_is_read_at_once_from_another_thread():
    # A level's client CPU is load.cpu_s at its end minus at its start: read from the thread's
    # own clock, not the lag ticker's last reading (none here: the probe is not started).
    lp = LoadLoop()
    try:
        before = lp.cpu_s

        async def busy() -> None:
            t = time.thread_time()
            while time.thread_time() - t < 0.05:
                pass

        lp.call(busy(), timeout=10)
        assert lp.cpu_s - before >= 0.045
    finally:
        lp.stop()
