"""The load client's C reader (specmon/load/_fastread.c) against its Python reader.

Each stream is written to a real loopback socket one piece at a time, and each piece is taken
by one read (the test calls the reader the event loop would call, once the piece is all in the
socket): the same pieces through _KernelStamped._readable (Python) and through the C Reader must
leave the same request behind: status, error, rid, event count, tokens per event, the final
meta_info, the connection's reuse. The C reader takes only reads of whole chunks of whole
one-line events; every other shape must reach the Python path unchanged."""

import asyncio
import contextlib
import fcntl
import json
import os
import random
import socket
import struct
import sys
import termios
import time

import pytest
from hypothesis import given, settings, strategies as st

from specmon import clock
from specmon.load import client as cl
from specmon.load.client import GenerateClient, RequestOutcome, _Exchange, _KernelStamped, _Stream, request_body
from specmon.load.workload import Prompt, random_ids

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C reader is Linux's")

if os.environ.get("SPECMON_NATIVE", "1") == "0":
    pytest.skip("SPECMON_NATIVE=0: the C reader is off", allow_module_level=True)
# Built by `pip install -e .` (setup.py) wherever a C compiler is; .ci/run checks that it was.
from specmon.load import _fastread  # noqa: E402
from helpers.streams import captured_stream

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
RID = "5f0c1e2d3a4b59687a8b9c0d1e2f3a4b"


def _chunk(data: bytes, size_line: bytes = b"") -> bytes:
    return (size_line or b"%x" % len(data)) + b"\r\n" + data + b"\r\n"


def _event(ct, final: bool = False) -> bytes:
    """One /generate event as SGLang writes it (json's default spacing: `"completion_tokens": 5`)."""
    meta = {"id": RID, "finish_reason": {"type": "length", "length": ct} if final else None,
            "prompt_tokens": 16, "completion_tokens": ct, "cached_tokens": 0}
    if final:
        meta.update(e2e_latency=0.5, spec_verify_ct=max(1, ct // 3))
    text = json.dumps({"text": " tok" * ct, "output_ids": list(range(100, 100 + ct)), "meta_info": meta})
    return b"data: " + text.encode() + b"\n\n"


def _stream(counts, *, done: bool = True, per_chunk: int = 1) -> list[bytes]:
    """HTTP chunks of a /generate answer with these cumulative completion_tokens, the last final."""
    events = [_event(ct, final=k == len(counts) - 1) for k, ct in enumerate(counts)]
    if done:
        events.append(b"data: [DONE]\n\n")
    return [_chunk(b"".join(events[k:k + per_chunk])) for k in range(0, len(events), per_chunk)]


def _pair() -> tuple[socket.socket, socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.socket()
    cli.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS, as the client sets it
    cli.connect(srv.getsockname())
    peer, _ = srv.accept()
    srv.close()
    cli.setblocking(False)
    return cli, peer


def _wait_in(sock: socket.socket, n: int) -> None:
    """Until n bytes are waiting in sock (loopback delivers at once; this makes it certain)."""
    deadline = time.monotonic() + 5
    while True:
        have = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        if have >= n:
            return
        assert time.monotonic() < deadline, f"only {have} of {n} bytes arrived"
        time.sleep(0.0005)


def _read_through(pieces: list[bytes], reader: str, end: str = "", gap_s: float = 0.0) -> dict:
    """The request after `pieces` (the response's bytes) each came in one read; `end`: "close"
    or "reset" of the server's side after the last piece. reader: "python" (_readable), "c" (the
    C Reader the loop calls) or "poller" (the same Reader behind a Poller, as the client runs it)."""
    loop = asyncio.new_event_loop()  # never run: the test makes the reads the loop would
    cli, peer = _pair()
    try:
        conn = _Stream()
        poller = _fastread.Poller(loop) if reader == "poller" else None
        transport = _KernelStamped(loop, cli, conn, poller)
        conn.connection_made(transport)
        assert transport.native is not None
        native = reader != "python"
        read = poller.ready if poller else transport.native.readable if native else transport._readable
        o = RequestOutcome(request_id="r", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
        o.t_sent, o.t_sent_wall = time.perf_counter(), time.time()
        done = loop.create_future()
        ex = conn.exchange = _Exchange(conn, o, done)
        offset0 = clock.system_minus_monotonic()
        t0 = time.perf_counter()
        for k, piece in enumerate(pieces):
            if k and gap_s:
                time.sleep(gap_s)
            peer.sendall(piece)
            _wait_in(cli, len(piece))
            read()
        if end == "reset":
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if end:
            peer.close()
            time.sleep(0.01)
            read()
        t1 = time.perf_counter()
        ex._flush_stamps()  # as GenerateClient._attempt does when the exchange ends
        if done.done():
            GenerateClient._read_final(ex)
        stamps = [t for t, _ in o.token_events]
        # The kernel stamps on the system clock: a step of it between a piece's arrival and its
        # read moves that stamp by the step (this test's VM stepped 130 ms once, resumed from a
        # snapshot). Judged only where the clock held still meanwhile.
        if abs(clock.system_minus_monotonic() - offset0) < 50e-6:
            assert all(t0 - 0.01 <= t <= t1 for t in stamps) and stamps == sorted(stamps)
        return {"status": o.status, "error": o.error, "rid": o.rid, "events": ex.events,
                "tokens": [n for _, n in o.token_events], "completion_tokens": o.completion_tokens,
                "meta": o.final_meta, "saw_done": ex.saw_done, "ended": o.t_end is not None,
                "done": done.done(), "reusable": conn.reusable(), "last_event": ex.last_event,
                "fast_reads": transport.native.fast_reads if native else 0}
    finally:
        if not end:
            peer.close()
        cli.close()
        loop.close()


def _same(pieces: list[bytes], end: str = "") -> dict:
    py = _read_through(pieces, "python", end=end)
    c = _read_through(pieces, "c", end=end)
    polled = _read_through(pieces, "poller", end=end)
    fast = c.pop("fast_reads")
    assert polled.pop("fast_reads") == fast
    py.pop("fast_reads")
    assert c == py and polled == py
    return {**c, "fast_reads": fast}


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted(set(x for x in cuts if 0 < x < len(data)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def test_a_read_per_chunk_is_taken_in_c_and_reads_as_python_does():
    counts = list(range(1, 120, 3))
    got = _same([HEAD + _stream(counts)[0], *_stream(counts)[1:], b"0\r\n\r\n"])
    assert got["status"] == "ok" and got["rid"] == RID and got["saw_done"] and got["reusable"]
    assert got["tokens"] == [counts[0]] + [b - a for a, b in zip(counts, counts[1:])]
    assert got["completion_tokens"] == counts[-1] and got["meta"]["spec_verify_ct"] == counts[-1] // 3
    # all but the first event (its rid) and [DONE] went through C
    assert got["fast_reads"] == len(counts) - 1


def test_the_first_event_after_a_head_read_alone_is_taken_in_c_with_its_rid():
    """As a server writes it (the head, then each decode step's chunk): every event is read in C,
    the first one's rid included; only the head, [DONE] and the last chunk go to Python."""
    counts = list(range(1, 60, 3))
    got = _same([HEAD, *_stream(counts), b"0\r\n\r\n"])
    assert got["status"] == "ok" and got["rid"] == RID and got["fast_reads"] == len(counts)


@pytest.mark.parametrize("first, rid", [
    (b' "id": "%s"' % RID.encode(), RID),                 # the usual spacing
    (b'"id":"%s"' % RID.encode(), RID),                   # none
    (b'"id": \t "%s"' % RID.encode(), RID),              # whitespace before the value
    (b'"id": "ab\xc3\xa9cd"', "ab\ufffd\ufffdcd"),          # not ASCII: replaced, as Python decodes it
    (b'"id": "a\\"b"', "second"),                       # an escape: not read, the next event's
    (b'"id": ""', "second"),                             # empty: the next event's
    (b'"id": 7', "second"),                              # not a string: the next event's
    (b'"other": "x"', "second"),                         # no id at all: the next event's
])
def test_the_rid_is_read_in_c_as_python_reads_it(first, rid):
    one = b'data: {"text": "a", "meta_info": {' + first + b', "completion_tokens": 1}}\n\n'
    two = _event(2).replace(RID.encode(), b"second")
    got = _same([HEAD, _chunk(one), _chunk(two)])  # no end: the final meta_info's id would be the rid then
    assert got["rid"] == rid and got["fast_reads"] == 2 and got["tokens"] == [1, 1]


def test_reads_of_several_chunks_and_of_several_events_a_chunk():
    counts = list(range(2, 200, 2))
    chunks = _stream(counts, per_chunk=3)
    pieces = [HEAD + chunks[0]] + [b"".join(chunks[k:k + 4]) for k in range(1, len(chunks), 4)] + [b"0\r\n\r\n"]
    got = _same(pieces)
    assert got["status"] == "ok" and sum(got["tokens"]) == counts[-1] and got["events"] == len(counts)
    assert got["fast_reads"] >= len(pieces) - 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4000), max_size=12), st.integers(1, 3))
def test_a_stream_cut_anywhere_reads_the_same_in_c_and_in_python(cuts, per_chunk):
    raw = HEAD + b"".join(_stream(list(range(1, 60, 4)), per_chunk=per_chunk)) + b"0\r\n\r\n"
    got = _same(_cut(raw, cuts))
    assert got["status"] == "ok" and got["completion_tokens"] == 57


def test_other_legal_shapes_go_to_python_or_read_the_same():
    """Comments, multi-line events, no space after the colon, spaces before the count, a size
    line with an extension, in upper case or with leading zeros, an event split over two chunks:
    each read the same by both paths, whichever takes it."""
    first = _event(1)
    body = [
        _chunk(_event(3).replace(b"data: ", b"data:", 1)),
        _chunk(b": keep-alive\n\n" + _event(5)),
        _chunk(_event(7)[:-2] + b"\nid: 9\n\n"),
        _chunk(_event(9), size_line=b"%X" % len(_event(9))),
        _chunk(_event(11), size_line=b"00%x" % len(_event(11))),
        _chunk(_event(13), size_line=b"%x;name=value" % len(_event(13))),
        _chunk(_event(15).replace(b'"completion_tokens": ', b'"completion_tokens":   ')),
        _chunk(_event(17)[:40]), _chunk(_event(17)[40:]),
        _chunk(_event(17).replace(b'"completion_tokens": 17', b'"completion_tokens": "?"')),
        _chunk(b"data: \t " + _event(19)[6:]),
        _chunk(_event(21, final=True)),
        _chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n",
    ]
    got = _same([HEAD + _chunk(first), *body])
    assert got["status"] == "ok" and got["completion_tokens"] == 21 and got["reusable"]
    assert got["tokens"] == [1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    assert 0 < got["fast_reads"] < len(body)  # some went through C, the odd ones through Python


def test_an_error_event_and_a_bad_size_line_read_as_python_reads_them():
    err = _chunk(b'data: {"error": {"message": "out of memory", "code": 500}}\n\n')
    got = _same([HEAD + _chunk(_event(1)), _chunk(_event(2)), err, _chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"])
    assert got["status"] == "error" and "out of memory" in got["error"]
    got = _same([HEAD + _chunk(_event(1)), _chunk(_event(2)), b"zz\r\n" + _event(3)])
    assert got["status"] == "error" and "chunk size" in got["error"] and not got["reusable"]


def test_a_count_of_more_digits_than_c_reads_goes_to_python():
    many = _event(3).replace(b'"completion_tokens": 3', b'"completion_tokens": 0000000000000000000003')
    got = _same([HEAD + _chunk(_event(1)), _chunk(many), _chunk(_event(4, final=True)),
                 _chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"])
    assert got["tokens"] == [1, 2, 1] and got["fast_reads"] == 1  # only the final event went through C


@pytest.mark.parametrize("end", ["close", "reset"])
def test_a_server_gone_mid_stream_reads_the_same(end):
    got = _same([HEAD + _chunk(_event(1)), _chunk(_event(2)), _chunk(_event(4))], end=end)
    assert got["status"] == "error" and got["error"].startswith("ReadError") and got["tokens"] == [1, 1, 2]
    assert not got["reusable"] and got["fast_reads"] == 2


def test_the_c_reader_stamps_on_perf_counters_clock():
    a = time.perf_counter()
    b = _fastread.perf_now()
    c = time.perf_counter()
    assert a <= b <= c


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), max_size=300))
def test_json_ids_writes_what_json_writes(ids):
    assert _fastread.json_ids(ids) == json.dumps(ids, separators=(",", ":")).encode()


def test_json_ids_declines_what_is_not_a_list_of_ints():
    for bad in ([1, True], [1, 2.0], [2 ** 64], (1, 2), [1, "2"]):
        assert _fastread.json_ids(bad) is None


def test_the_request_body_is_the_same_with_and_without_c(monkeypatch):
    prompt = Prompt(input_ids=random_ids(3, 7, 1024))
    fast = request_body(prompt, 256)
    monkeypatch.setattr(cl, "_fastread", None)
    assert request_body(prompt, 256) == fast
    assert json.loads(fast) == {"input_ids": prompt.input_ids, "stream": True,
                                "sampling_params": {"max_new_tokens": 256, "ignore_eos": True, "temperature": 0.0}}
    assert request_body(Prompt(text="hi"), 4) == json.dumps(json.loads(request_body(Prompt(text="hi"), 4)),
                                                           separators=(",", ":")).encode()


def test_random_reads_of_a_real_simulator_stream():
    """A stream the simulator wrote (its own shapes and sizes), cut at random places."""
    from helpers.simproc import start_sim

    with start_sim("--profile", "fp8-mtp", speed=50) as sim:
        raw = captured_stream(sim, 64)
    head = raw.index(b"\r\n\r\n") + 4
    pieces = [raw[:head]]
    rest = raw[head:]
    while rest:  # one HTTP chunk a read, as the client reads a live stream
        eol = rest.index(b"\r\n")
        end = eol + 2 + int(rest[:eol], 16) + 2
        pieces.append(rest[:end])
        rest = rest[end:]
    got = _same(pieces)
    assert got["status"] == "ok" and sum(got["tokens"]) == 64 and got["fast_reads"] >= len(pieces) - 4
    rng = random.Random(1)
    for _ in range(30):
        _same(_cut(raw, [rng.randrange(len(raw)) for _ in range(rng.randrange(1, 20))]))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2 ** 64), st.integers(1, 3000), st.integers(2, 200_000))
def test_choices_picks_what_random_choices_picks_and_leaves_the_generator_where_it_would(seed, n, limit):
    pool = list(range(1, limit))
    a, b = random.Random(seed), random.Random(seed)
    assert _fastread.choices(a.getrandbits(64 * n).to_bytes(8 * n, "little"), pool) == b.choices(pool, k=n)
    assert a.getstate() == b.getstate()


def test_prompts_are_the_same_with_and_without_c(monkeypatch):
    from specmon.load import workload

    fast = [workload.random_ids(9, i, 1024) for i in range(5)]
    monkeypatch.setattr(workload, "_fastread", None)
    assert [workload.random_ids(9, i, 1024) for i in range(5)] == fast


def test_a_closed_reader_reads_nothing_even_when_its_number_is_another_sockets_now():
    loop = asyncio.new_event_loop()
    try:
        cli, peer = _pair()
        conn = _Stream()
        transport = _KernelStamped(loop, cli, conn)
        conn.connection_made(transport)
        fd = cli.fileno()
        transport.close()
        peer.close()
        other, other_peer = _pair()
        dup = other.fileno() != fd  # the closed socket's number is now a socket of someone else's
        if dup:
            os.dup2(other.fileno(), fd)
        try:
            other_peer.sendall(b"not yours")
            _wait_in(other, 9)
            transport.native.readable()
            assert other.recv(64) == b"not yours" and transport.native.reads == 0
        finally:
            if dup:
                os.close(fd)
            other.close()
            other_peer.close()
    finally:
        loop.close()


class _Recorder:
    """A Reader's protocol and transport both: what reached the Python path, and its loss."""

    exchange = None  # no request: every read goes to received()

    def __init__(self, on_read=None):
        self.got: list[bytes] = []
        self.lost: list = []
        self.on_read = on_read
        self.reader = None

    def received(self, stamp: float, data: bytes) -> None:
        self.got.append(data)
        if self.on_read is not None:
            self.on_read(self)

    def _lost(self, exc) -> None:
        self.lost.append(exc)
        if self.reader is not None:
            self.reader.close()  # as _KernelStamped._lost closes its reader


@contextlib.contextmanager
def _loop_and_pairs(n: int):
    """A loop never run (the tests make its readers' calls, or run it briefly) and n connected
    socket pairs (client, server side), all closed after."""
    loop = asyncio.new_event_loop()
    pairs = [_pair() for _ in range(n)]
    try:
        yield loop, pairs
    finally:
        for c, p in pairs:
            c.close()
            p.close()
        loop.close()


def test_a_poller_pass_reads_each_ready_socket_once_and_the_loop_watches_it_only_while_it_has_readers():
    with _loop_and_pairs(6) as (loop, pairs):
        poller = _fastread.Poller(loop)
        assert not poller.watched
        recs = [_Recorder() for _ in pairs]
        readers = [_fastread.Reader(c.fileno(), r, r, poller) for (c, _), r in zip(pairs, recs)]
        for rec, r in zip(recs, readers):
            rec.reader = r
        assert poller.readers == 6 and poller.watched
        for i in (0, 2, 5):
            pairs[i][1].sendall(b"x%d" % i)
            _wait_in(pairs[i][0], 2)
        loop.run_until_complete(asyncio.sleep(0.05))  # the loop calls ready() itself
        assert [r.got for r in recs] == [[b"x0"], [], [b"x2"], [], [], [b"x5"]]
        assert poller.passes == 1  # the three were ready together: one pass read them all
        pairs[3][1].close()  # the server's side goes: a read of nothing, the socket's loss
        loop.run_until_complete(asyncio.sleep(0.05))
        assert recs[3].lost == [None] and poller.passes == 2 and poller.readers == 5
        for r in readers:
            r.close()
        assert poller.readers == 0 and not poller.watched
        assert not loop.remove_reader(poller.fileno())  # the loop no longer watches it
        pairs[0][1].sendall(b"late")
        _wait_in(pairs[0][0], 4)
        poller.ready()
        assert recs[0].got == [b"x0"] and pairs[0][0].recv(16) == b"late"


def test_a_read_that_closes_and_drops_another_reader_mid_pass_leaves_that_socket_unread():
    with _loop_and_pairs(2) as (loop, pairs):
        poller = _fastread.Poller(loop)
        readers: dict[int, object] = {}

        def close_the_other(rec):
            other = 1 - recs.index(rec)
            r = readers.pop(other, None)
            if r is not None:
                r.close()  # out of the poller, and its last reference gone, within the pass

        recs = [_Recorder(close_the_other) for _ in pairs]
        for i, ((c, _), r) in enumerate(zip(pairs, recs)):
            readers[i] = _fastread.Reader(c.fileno(), r, r, poller)
        for c, p in pairs:
            p.sendall(b"both")
            _wait_in(c, 4)
        poller.ready()
        first = 0 if recs[0].got else 1
        assert recs[first].got == [b"both"] and recs[1 - first].got == []
        assert pairs[1 - first][0].recv(16) == b"both"  # still in the socket the other closed
        assert poller.readers == 1
        readers.pop(first).close()
        assert poller.readers == 0 and not poller.watched


def test_a_read_that_raises_ends_the_pass_and_the_rest_are_read_in_the_next():
    with _loop_and_pairs(3) as (loop, pairs):
        poller = _fastread.Poller(loop)

        def fail(rec):
            raise RuntimeError("a bug in a protocol")

        recs = [_Recorder(fail) for _ in pairs]
        readers = [_fastread.Reader(c.fileno(), r, r, poller) for (c, _), r in zip(pairs, recs)]
        for c, p in pairs:
            p.sendall(b"data")
            _wait_in(c, 4)
        for k in range(1, 4):
            with pytest.raises(RuntimeError):
                poller.ready()
            assert sum(len(r.got) for r in recs) == k  # one read a pass, none lost
        assert poller.ready() is None and [r.got for r in recs] == [[b"data"]] * 3
        for r in readers:
            r.close()


def test_a_read_that_fills_the_buffer_leaves_the_rest_to_the_next_pass_with_no_new_bytes():
    # The poller is edge-triggered: a socket is reported when bytes arrive. A read takes at most
    # 64 KiB, so one that fills it must put its socket back for the next pass itself, or the
    # rest would wait for bytes that may never come.
    with _loop_and_pairs(2) as (loop, pairs):
        poller = _fastread.Poller(loop)
        recs = [_Recorder() for _ in pairs]
        readers = [_fastread.Reader(c.fileno(), r, r, poller) for (c, _), r in zip(pairs, recs)]
        big = bytes(range(256)) * 400  # 102,400 bytes
        pairs[0][1].sendall(big)
        pairs[1][1].sendall(b"small")
        _wait_in(pairs[0][0], len(big))
        _wait_in(pairs[1][0], 5)
        poller.ready()
        assert [len(b) for b in recs[0].got] == [64 * 1024] and recs[1].got == [b"small"]
        poller.ready()  # nothing new arrived
        assert b"".join(recs[0].got) == big and recs[1].got == [b"small"] and poller.passes == 2
        assert poller.ready() is None and poller.passes == 2  # and nothing is reported again
        pairs[1][1].sendall(b"more")
        _wait_in(pairs[1][0], 4)
        poller.ready()
        assert recs[1].got == [b"small", b"more"] and len(recs[0].got) == 2
        for r in readers:
            r.close()


def test_a_reader_takes_a_poller_or_none_and_is_initialised_once():
    with _loop_and_pairs(1) as (loop, [(cli, _)]):
        rec = _Recorder()
        with pytest.raises(TypeError, match="poller"):
            _fastread.Reader(cli.fileno(), rec, rec, loop)
        poller = _fastread.Poller(loop)
        r = _fastread.Reader(cli.fileno(), rec, rec, poller)
        with pytest.raises(RuntimeError):
            r.__init__(cli.fileno(), rec, rec, poller)
        assert poller.readers == 1
        r.close()
        r.close()  # twice: once out of the poller
        assert poller.readers == 0


def test_the_c_reader_tracks_the_gaps_between_a_streams_chunks():
    """What the pacer sizes its pause by (load/loop.py pace_pause): the kernel stamps' distance
    between two reads of one stream that added tokens, tracked as an estimate of the gaps' 1st
    percentile since reset_chunk_gap(): the first gap itself, then 10 % down for each smaller
    gap (a read that brings two of a stream's events counts 0) and 0.1 % up for each larger."""
    _fastread.reset_chunk_gap()
    assert _fastread.chunk_gap() is None
    chunks = _stream([1, 2, 3, 4, 5])
    # the head and the first event (Python's reading: the rid comes in it), then a chunk a read
    got = _read_through([HEAD + chunks[0], *chunks[1:4]], "poller", gap_s=0.05)
    assert got["fast_reads"] == 3 and got["tokens"] == [1, 1, 1, 1]
    gap = _fastread.chunk_gap()
    # three gaps of a 50 ms sleep each (and the scheduler's jitter): the first, then +-
    assert gap is not None and 0.045 * 0.9 ** 2 <= gap < 0.5 * 1.001 ** 2, gap
    _fastread.reset_chunk_gap()
    assert _fastread.chunk_gap() is None
    # two of a stream's events in one read: the first gap, then 0 takes it 10 % down
    got = _read_through([HEAD + chunks[0], chunks[1] + chunks[2]], "poller", gap_s=0.05)
    assert got["fast_reads"] == 1 and got["tokens"] == [1, 1, 1]
    gap = _fastread.chunk_gap()
    assert 0.045 * 0.9 <= gap < 0.5 * 0.9, gap
    _fastread.reset_chunk_gap()


def test_itls_in_c_are_pythons(monkeypatch):
    """RequestOutcome.itls() through the C module and through Python: the same floats, for
    speculative chunks of several tokens, events that added none, one event, none."""
    from array import array

    rng = random.Random(7)
    cases = [[], [(1.0, 3)], [(1.0, 1), (1.25, 1)], [(0.5, 2), (0.5, 0), (0.75, 4), (1.0, -1), (1.5, 1)]]
    for _ in range(50):
        t, evs = rng.random(), []
        for _ in range(rng.randrange(2, 300)):
            t += rng.random() * 0.05
            evs.append((t, rng.choice([1, 1, 2, 3, 4, 0])))
        cases.append(evs)
    for evs in cases:
        def outcome():
            o = RequestOutcome(request_id="r", t_scheduled_wall=0.0, t_scheduled=0.0)
            for e in evs:
                o.token_events.append(e)
            return o
        fast = outcome().itls()
        monkeypatch.setattr(cl, "_fastread", None)
        slow = outcome().itls()
        monkeypatch.undo()
        assert fast == slow and len(fast) == sum(n for _, n in evs[1:] if n > 0)
    with pytest.raises(TypeError):
        _fastread.itls(array("f", [1.0]), array("i", [1]))
    with pytest.raises(ValueError):
        _fastread.itls(array("d", [1.0, 2.0]), array("i", [1]))
