"""One real streamed /generate answer captured from the simulator, and a way to hand such bytes
to the load client's connection in pieces, as the event loop would."""

from __future__ import annotations

import asyncio
import time

from specmon.load.client import RequestOutcome
from specmon.load.workload import Workload


def captured_stream(sim, n_tokens):
    """The raw bytes of one real streamed /generate answer from the sim (head + chunked body)."""
    import json
    import socket

    body = json.dumps({"input_ids": Workload(input_len=64, seed=5).prompt(0).input_ids, "stream": True,
                       "sampling_params": {"max_new_tokens": n_tokens, "ignore_eos": True}}).encode()
    with socket.create_connection(("127.0.0.1", sim.port)) as s:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        raw = b""
        while not raw.endswith(b"0\r\n\r\n"):
            got = s.recv(65536)
            assert got, "the sim closed before the end of the stream"
            raw += got
    return raw


def feed_stream(raw, cuts):
    """Hand `raw` to a client connection in pieces split at `cuts`, as the event loop would."""
    from specmon.load.client import _Exchange, _Stream

    class _Transport:  # the socket end: nothing is written back in these tests
        closed = False

        def is_closing(self):
            return self.closed

        def close(self):
            self.closed = True

    loop = asyncio.new_event_loop()
    try:
        conn = _Stream()
        conn.connection_made(_Transport())
        o = RequestOutcome(request_id="r", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
        o.t_sent, o.t_sent_wall = time.perf_counter(), time.time()
        done = loop.create_future()
        conn.exchange = _Exchange(conn, o, done)
        for a, b in zip([0, *cuts], [*cuts, len(raw)]):
            conn.data_received(raw[a:b])
        if not done.done():
            conn.connection_lost(None)
        return o, conn
    finally:
        loop.close()
