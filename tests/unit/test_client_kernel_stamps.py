"""Chunks stamped with the kernel's receive time (load/client.py _KernelStamped): bytes that
arrived while the client's event loop was busy keep the time they arrived; with the plain
transport they are stamped when the loop got to them."""

import asyncio
import gc
import json
import socket
import sys
import threading
import time
import warnings

import pytest

from helpers.loopback_http import STREAM_HEAD, chunk, read_request
from specmon.load.client import GenerateClient, RequestOutcome, request_body
from specmon.load.workload import Workload

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")


def _event(n: int, final: bool = False) -> bytes:
    meta = {"id": "0123abcd", "completion_tokens": n, "prompt_tokens": 8,
            "finish_reason": {"type": "length"} if final else None}
    return b"data: " + json.dumps({"text": "x" * n, "output_ids": list(range(n)), "meta_info": meta}).encode() + b"\n\n"


def _serve(srv: socket.socket, sent: dict) -> None:
    """One streamed answer on 127.0.0.1: a first event, then 0.3 s later a second, stamped."""
    c, _ = srv.accept()
    with c:
        read_request(c)
        c.sendall(STREAM_HEAD + chunk(_event(1)))
        time.sleep(0.3)
        sent["t"] = time.perf_counter()
        # one write: a read of two writes would carry the second one's stamp
        c.sendall(chunk(_event(3, final=True)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        c.recv(1)  # until the client closes


def _second_stamp_late_by(kernel: bool) -> float:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    sent: dict = {}
    threading.Thread(target=_serve, args=(srv, sent), daemon=True).start()

    async def main() -> RequestOutcome:
        client = GenerateClient(f"http://127.0.0.1:{srv.getsockname()[1]}", max_concurrency=1, kernel_stamps=kernel)
        assert client.kernel_stamps is kernel
        o = RequestOutcome(request_id="r", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
        task = asyncio.ensure_future(client.generate(Workload(input_len=8).prompt(0), 3, o))
        while not o.token_events:
            await asyncio.sleep(0.005)
        time.sleep(0.8)  # the loop is busy while the second event arrives
        await task
        await client.aclose()
        return o

    try:
        o = asyncio.run(main())
    finally:
        srv.close()
    assert o.status == "ok", o.error
    assert [n for _, n in o.token_events] == [1, 2] and o.completion_tokens == 3
    return o.token_events[1][0] - sent["t"]


def test_a_chunk_read_late_keeps_the_time_it_arrived():
    late = _second_stamp_late_by(kernel=True)
    # the kernel's receive time: microseconds after the send on loopback (more where a busy host
    # leaves the receive to ksoftirqd), against ~0.5 s for a stamp taken at the read
    assert -0.005 < late < 0.1, late


def test_without_kernel_stamps_the_chunk_is_stamped_when_read():
    late = _second_stamp_late_by(kernel=False)
    assert late > 0.2, late  # read once the loop was free again, ~0.5 s after it arrived


def _serve_then_cut(srv: socket.socket, events: int) -> None:
    """A streamed answer of `events` one-token events, one write each, then the server goes."""
    c, _ = srv.accept()
    with c:
        read_request(c)
        c.sendall(STREAM_HEAD + chunk(_event(1)))
        for n in range(2, events + 1):
            time.sleep(0.02)  # each event its own read
            c.sendall(chunk(_event(n)))
        time.sleep(0.05)


def test_a_stream_cut_mid_way_keeps_every_token_event_read_before_the_cut():
    # The C reader stages the events it reads in the exchange and hands them to the outcome when
    # the exchange ends: a response that never ends (the server went) must still have them all.
    from specmon.load import native

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    threading.Thread(target=_serve_then_cut, args=(srv, 12), daemon=True).start()

    async def main():
        client = GenerateClient(f"http://127.0.0.1:{srv.getsockname()[1]}", max_concurrency=1, kernel_stamps=True)
        conn = await client._open()
        fast0 = conn.transport.native.fast_reads if native.fastread is not None else 0
        o = RequestOutcome(request_id="r", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
        await client._attempt(conn, request_body(Workload(input_len=8).prompt(0), 64), o)
        fast = (conn.transport.native.fast_reads if native.fastread is not None else 0) - fast0
        await client.aclose()
        return o, fast

    try:
        o, fast = asyncio.run(main())
    finally:
        srv.close()
    assert o.status == "error" and o.error.startswith("ReadError"), o.error
    assert [n for _, n in o.token_events] == [1] * 12  # the first event's token, then one each
    stamps = [t for t, _ in o.token_events]
    assert stamps == sorted(stamps)
    if native.fastread is not None:
        assert fast >= 8  # most of them were the C reader's (staged, then handed over)


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def _one_request(url: str, connect_timeout_s: float) -> tuple[RequestOutcome, float]:
    async def main() -> RequestOutcome:
        client = GenerateClient(url, max_concurrency=1, kernel_stamps=True, connect_timeout_s=connect_timeout_s)
        o = RequestOutcome(request_id="r", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
        await client.generate(Workload(input_len=8).prompt(0), 3, o)
        await client.aclose()
        return o

    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        o = asyncio.run(main())
        gc.collect()
    # a socket dropped without close() is closed by the collector, which says so
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    return o, time.monotonic() - t0


def test_a_connect_the_server_never_completes_times_out_and_closes_its_socket():
    # A listener whose accept queue is full drops the SYN: the connect stays in progress.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(srv.getsockname())
        fillers.append(f)
    time.sleep(0.1)
    before = _open_fds()
    try:
        o, took = _one_request(f"http://127.0.0.1:{srv.getsockname()[1]}", connect_timeout_s=0.3)
    finally:
        after = _open_fds()
        for f in fillers:
            f.close()
        srv.close()
    assert (o.status, o.error, o.no_answer) == ("timeout", "ConnectTimeout", "no connection within 0.3 s")
    assert took < 3.0
    assert after == before


def test_a_refused_connect_fails_at_once_as_connection_refused():
    held = socket.socket()  # holds a port nobody listens on: a SYN to it is answered by a reset
    held.bind(("127.0.0.1", 0))
    try:
        o, took = _one_request(f"http://127.0.0.1:{held.getsockname()[1]}", connect_timeout_s=5.0)
    finally:
        held.close()
    assert (o.status, o.no_answer) == ("error", "connection refused")
    assert o.error.startswith("ConnectError: [Errno 111]")
    assert took < 2.0
