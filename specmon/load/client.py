"""Streaming client for SGLang's native /generate, timed at the socket.

Per request it keeps the perf_counter stamps of: sent, first byte (response headers), every
event that added tokens (with how many: the delta of meta_info.completion_tokens, so a 4-token
speculative chunk counts 4), and end.

The stream runs on a plain asyncio Protocol (see _Stream for why not httpx): the request is
stamped and written in one call, its head the bytes h11 would write; every response is framed by
httptools (llhttp, the parser of Node.js and uvicorn: C, called once a read), which hands each
chunk's data to the SSE reading here. What a byte's stamp means
depends on the transport: on Linux over plain TCP (_KernelStamped) it is the time the kernel
received it (SO_TIMESTAMPNS), whenever the client got round to reading it; over TLS, or
elsewhere, it is the moment the event loop handed it to data_received. Each event is scanned for
`"completion_tokens":N` with a byte search, and only the final event (the one holding
e2e_latency / spec_verify_ct / queue_time) is decoded as JSON. SGLang sends cumulative text in
every event, so json.loads on each would cost O(n^2) in the output length.
benchmarks/ramp_fidelity.py measures what is left: the client against the simulator's own
socket stamps. Where setup.py built it, the usual read (whole chunks of whole one-line events,
the rid among them) runs in C (_fastread.c): the same reading of the same bytes, with the
state both share kept on the _Exchange (in C fields of its base class there); every other read
comes to _Stream.received as before.

Durations here are wall seconds; RequestOutcome.record() multiplies them by the arm's
time_scale (simulated seconds per wall second) when it builds the RequestRecord.
Errors (HTTP status, connection, timeout, mid-stream error events) are recorded on the
outcome, never raised: one failed request must not stop a ramp. What the ramp needs to react to
a failure is kept apart from the error text: the HTTP status (`http_status`), a 429/503's
Retry-After in seconds (`retry_after_s`), and, when the server gave no answer at all (refused,
reset, closed before a status line, connect timeout), why in a few words (`no_answer`).
"""

from __future__ import annotations

import asyncio
import errno
import json
import operator
import os
import re
import socket
import ssl
import struct
import sys
import time
from array import array
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence
from urllib.parse import urlsplit

import h11
import httptools

from specmon import clock
from specmon.analysis.stats import percentile_of_numbers, spread_gaps
from specmon.load import native, pacing
from specmon.sources.spec_counts import hist_text, spec_counts
from specmon.load.workload import Prompt
from specmon.model import RequestRecord

if TYPE_CHECKING:
    import httpx  # imported where used (flush_cache): ~60 ms of every ramp's start-up

# The same reads in C (specmon/load/_fastread.c, where it is built): the usual read, whole chunks
# of whole events, without a Python frame; anything else it hands to _Stream.received as
# _readable would.
_fastread = native.fastread
# The load loop's pacer (pacing.py) hears of each read from the C reader where it is built; where
# not, from this module's reads (Pacer.read): one pacer, so one plan offers the same load either way.
_PY_PACED = _fastread is None
_active_pacer = pacing.active

_STALE_ERRORS = ("ReadError", "RemoteProtocolError", "ConnectError")  # what _Exchange / _attempt write
_CT_KEY = b'"completion_tokens":'
_PT_KEY = b'"prompt_tokens":'
_ID_KEY = b'"id":'


_DIGITS = re.compile(rb" *([0-9]+)")
_match_digits = _DIGITS.match
_perf = time.perf_counter
_sub = operator.sub
_SPACE = b" \t\n\r\x0b\x0c"  # what bytes.lstrip() strips


def _int_after(buf: bytes, key: bytes) -> Optional[int]:
    # rfind plus one compiled match: the byte-by-byte scan this was cost ~1 us a chunk.
    i = buf.rfind(key)
    if i < 0:
        return None
    m = _DIGITS.match(buf, i + len(key))
    return int(m.group(1)) if m else None


def _str_after(buf: bytes, key: bytes) -> Optional[str]:
    """The JSON string value after the last `key` in buf (no escapes: SGLang's rids are hex)."""
    i = buf.rfind(key)
    if i < 0:
        return None
    j = buf.find(b'"', i + len(key))
    k = buf.find(b'"', j + 1) if j >= 0 else -1
    if j < 0 or k < 0 or buf[i + len(key):j].strip():
        return None
    v = buf[j + 1:k]
    return v.decode("ascii", "replace") if v and b"\\" not in v else None


def trusted_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """meta_info without the fields the server did not really measure.

    SGLang 0.5.10 sends the scheduler's time stamps through the detokenizer, and the second hop
    drops them (its time-stats object pickles to {} there): the final meta_info then has no
    forward_entry_time and says queue_time 0.0, prefill_*_latency null, even for a request that
    waited seconds in the queue (seen on a real server: 0.0 for every request at 6 running + 6
    queued, while sglang:queue_time_seconds averaged ~10 s). A 0.0 that is not a measurement must
    not reach the CSVs: without forward_entry_time the queue time is dropped (unknown), and the
    level falls back to the server's queue_time_seconds histogram."""
    if "queue_time" in meta and "forward_entry_time" not in meta:
        meta = {k: v for k, v in meta.items() if k not in ("queue_time", "prefill_waiting_latency",
                                                           "prefill_launch_latency")}
    return meta


class TokenStamps(SequenceABC):
    """A request's token events, (perf stamp, tokens added) pairs, kept as two arrays.

    The stream appends to the arrays themselves (_Exchange holds their bound append methods; the
    C reader stages its events and extends the arrays with them when the exchange ends or hands
    a read to Python): a chunk then allocates no tuple and leaves nothing for the garbage
    collector to track, and a
    pair costs 12 bytes where a list of tuples held about 90 (a level at C=1,000 keeps every
    request it sent, each with a stamp per chunk, until its statistics are computed). Read as
    a sequence of (stamp, tokens) tuples."""

    __slots__ = ("_t", "_n")

    def __init__(self, events: Sequence[tuple[float, int]] = ()):
        self._t = array("d", [t for t, _ in events])
        self._n = array("i", [n for _, n in events])

    def append(self, event: tuple[float, int]) -> None:
        t, n = event
        self._t.append(t)
        self._n.append(n)

    def clear(self) -> None:
        del self._t[:]
        del self._n[:]

    def __len__(self) -> int:
        return len(self._t)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(zip(self._t[i], self._n[i]))
        return self._t[i], self._n[i]

    def __iter__(self) -> Iterator[tuple[float, int]]:
        return zip(self._t, self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenStamps):
            return self._t == other._t and self._n == other._n
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


@dataclass
class RequestOutcome:
    """Raw timing of one request (perf_counter stamps) plus what the server said at the end."""

    request_id: str  # specmon's own id for the request
    t_scheduled_wall: float
    t_scheduled: float  # perf_counter
    t_sent: Optional[float] = None
    t_sent_wall: Optional[float] = None
    # perf_counter after the request's bytes were handed to the kernel; read after write()
    # returned, so on a busy host it can fall after t_first_byte (the kernel's arrival stamp)
    t_written: Optional[float] = None
    t_first_byte: Optional[float] = None
    t_end: Optional[float] = None
    # (perf stamp, tokens added) for every event that added tokens, in order
    token_events: Sequence[tuple[float, int]] = field(default_factory=TokenStamps)
    completion_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    final_meta: Optional[dict[str, Any]] = None
    events: int = 0  # the response's events ([DONE] aside), counted by its _Exchange
    status: str = "ok"
    error: Optional[str] = None
    http_status: Optional[int] = None  # the response's status code; None when none came
    retry_after_s: Optional[float] = None  # a 429/503's Retry-After, in seconds from its arrival
    # No answer at all (not even a status line): "connection refused", "connection reset", ...
    no_answer: Optional[str] = None
    cut_mid_response: bool = False  # the connection closed after the status line, before the end
    # Multi-turn conversations: the turn this request is (1 = the first; None: single-turn), and,
    # when keep_output, the answer's output_ids and text from its final event (the next turn
    # resends them; the ramp drops them once it has).
    turn: Optional[int] = None
    keep_output: bool = False
    output_ids: Optional[list[int]] = None
    output_text: Optional[str] = None
    # The server's id for it (SGLang's meta_info.id): read from the first event that carries
    # one, so a request cut mid-stream still has it; the final meta_info's id when it comes.
    rid: Optional[str] = None
    # itls() of the token events it was computed for (their count): record() and the level's
    # summary both ask, and at 1,000 streams x 256 tokens each pass is ~1 ms a request.
    _itls: Optional[tuple[int, list[float]]] = field(default=None, repr=False, compare=False)

    # -- derived, in wall seconds -------------------------------------------------------------
    def wall(self, perf_stamp: float) -> float:
        return self.t_sent_wall + (perf_stamp - self.t_sent)

    @property
    def ttft(self) -> Optional[float]:
        if not self.token_events or self.t_sent is None:
            return None
        return self.token_events[0][0] - self.t_sent

    @property
    def e2e(self) -> Optional[float]:
        if self.t_end is None or self.t_sent is None or self.status != "ok":
            return None
        return self.t_end - self.t_sent

    def server_times(self) -> Optional[tuple[float, float]]:
        """(TTFT, e2e) from the server's own stamps in the final meta_info (--enable-metrics):
        response_sent_to_client_ts (the first response) and request_finished_ts, each minus
        request_received_ts. None when the server did not send all three."""
        m = self.final_meta or {}
        rx, first, fin = (m.get(k) for k in ("request_received_ts", "response_sent_to_client_ts",
                                             "request_finished_ts"))
        if self.status != "ok" or not all(isinstance(v, (int, float)) for v in (rx, first, fin)):
            return None
        if not rx <= first <= fin:
            return None
        return first - rx, fin - rx

    def timed(self, scale: float) -> tuple[Optional[float], Optional[float], str]:
        """TTFT and e2e in the arm's seconds, and which clock measured them ("client"/"server").

        A real server (scale 1) is always timed by this client. A simulator run `scale` times
        faster than the clock is timed by its own stamps when it sends them: there, every wall
        millisecond this client, its event loop or the HTTP stacks spend would count `scale`
        times (at x20, 100 ms of loop lag on a busy 2-core box reads as 2 s of TTFT), which
        measures the laptop, not the simulated GPU. The simulator's stamps are its ground truth."""
        if scale != 1.0:
            st = self.server_times()
            if st is not None:
                return st[0], st[1], "server"
        ttft, e2e = self.ttft, self.e2e
        return (None if ttft is None else ttft * scale), (None if e2e is None else e2e * scale), "client"

    def itls(self) -> list[float]:
        """Per-token gaps (see spread_gaps); the same list on each call for the same events, so
        a caller reads it and never changes it."""
        ev = self.token_events
        n = len(ev)
        cached = self._itls
        if cached is not None and cached[0] == n:
            return cached[1]
        if isinstance(ev, TokenStamps) and _fastread is not None:
            out = _fastread.itls(ev._t, ev._n)  # spread_gaps in C, over the arrays: the same floats
        elif isinstance(ev, TokenStamps):
            out = spread_gaps(zip(map(_sub, ev._t[1:], ev._t), ev._n[1:]))
        else:
            out = spread_gaps([(b[0] - a[0], b[1]) for a, b in zip(ev, ev[1:])] if n > 1 else [])
        self._itls = (n, out)
        return out

    def window_tokens(self, w0: float, w1: float, scale: float, span: float, width: float, sums: Any) -> int:
        """The tokens of this request's events whose wall time is in [w0, w1), returned; each
        also added to its batch of `sums` (a sequence of floats, of len(sums) batches of `width`
        arm seconds from w0, over `span` arm seconds; analysis.levels' throughput batches)."""
        ev = self.token_events
        if self.t_sent is None or self.t_sent_wall is None:
            return 0
        if isinstance(ev, TokenStamps) and _fastread is not None:
            return _fastread.window_tokens(ev._t, ev._n, self.t_sent, self.t_sent_wall, w0, w1, scale, span,
                                           width, sums)
        sent, sent_wall, last, toks = self.t_sent, self.t_sent_wall, len(sums) - 1, 0
        for stamp, n in ev:
            t = sent_wall + (stamp - sent)  # self.wall(stamp), without a call per token event
            if w0 <= t < w1:
                toks += n
                x = (t - w0) * scale
                if 0.0 <= x < span:
                    sums[min(int(x / width), last)] += n
        return toks

    def record(self, arm: str, level: int, offered: int, scale: float, in_window: bool) -> RequestRecord:
        """The requests.csv row: client durations x scale (simulated seconds when sped up)."""

        def s(v: Optional[float]) -> Optional[float]:
            return None if v is None else v * scale

        meta = self.final_meta or {}
        out = self.completion_tokens
        ttft, e2e, timing = self.timed(scale)
        itl = self.itls()
        tpot = None
        if ttft is not None and e2e is not None and out is not None and out > 1:
            tpot = (e2e - ttft) / (out - 1)
        verify = meta.get("spec_verify_ct")
        accept = out / verify if (out and isinstance(verify, (int, float)) and verify > 0) else None
        qt = meta.get("queue_time")
        cached = meta.get("cached_tokens")
        sc = spec_counts(meta)
        return RequestRecord(
            arm=arm, level=level, offered_concurrency=offered, request_id=self.request_id,
            t_scheduled=self.t_scheduled_wall,
            t_start=self.t_sent_wall if self.t_sent_wall is not None else self.t_scheduled_wall,
            t_end=self.wall(self.t_end) if self.t_end is not None and self.t_sent is not None else None,
            ttft_s=ttft, e2e_s=e2e, timing=timing, prompt_tokens=self.prompt_tokens, output_tokens=out,
            itl_mean_s=s(sum(itl) / len(itl)) if itl else None,
            itl_p99_s=s(percentile_of_numbers(itl, 99)), tpot_s=tpot,
            spec_verify_ct=verify if isinstance(verify, int) else None, accept_length=accept,
            first_byte_s=s(None if self.t_first_byte is None else self.t_first_byte - self.t_sent),
            # Server-side durations are already in the server's (simulated) seconds: not rescaled.
            queue_time_s=float(qt) if isinstance(qt, (int, float)) else None,
            chunks=self.events, in_window=in_window, status=self.status, error=self.error,
            cached_tokens=cached if isinstance(cached, int) and not isinstance(cached, bool) else None,
            turn=self.turn, rid=self.rid,
            spec_accepted_drafts=sc.accepted, spec_proposed_drafts=sc.proposed,
            spec_accept_hist=hist_text({k: n for k, n in enumerate(sc.hist or ()) if n}),
        )


def request_body(prompt: Prompt, max_new_tokens: int) -> bytes:
    """The /generate request's JSON: the prompt, greedy sampling of exactly max_new_tokens, streamed."""
    payload = prompt.payload()
    ids = payload.get("input_ids")
    if _fastread is not None and ids is not None and len(payload) == 1:
        head = _fastread.json_ids(ids)  # the same bytes json writes, ~20x faster
        if head is not None:
            return b'{"input_ids":' + head + _body_tail(max_new_tokens)
    return json.dumps({**payload, **_sampling(max_new_tokens)}, separators=_COMPACT).encode()


def _sampling(max_new_tokens: int) -> dict[str, Any]:
    return {"sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0.0},
            "stream": True}


@lru_cache(maxsize=16)
def _body_tail(max_new_tokens: int) -> bytes:
    """What follows the input_ids in request_body's JSON: the same for every request of a level
    (json.dumps of it was ~30 us of each request's start)."""
    return b"," + json.dumps(_sampling(max_new_tokens), separators=_COMPACT)[1:].encode()


_COMPACT = (",", ":")


def request_head_prefix(target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A POST's head up to its Content-Length value, as h11 writes it. h11 checks the target
    and the headers here, once: ValueError for what it would refuse on every request."""
    try:
        h11.Request(method=b"POST", target=target, headers=[*headers, (b"Content-Length", b"0")])
    except h11.LocalProtocolError:  # its text would quote the header, which may hold an API key
        raise ValueError("the request's path or a header (the API key?) holds a character HTTP cannot carry") \
            from None
    lines = [b"POST " + target + b" HTTP/1.1", *(k + b": " + v for k, v in headers), b"Content-Length: "]
    return b"\r\n".join(lines)


class _PyStreamBase:
    """_Stream's base without the C module: `exchange` is a plain attribute. (Not `object`
    itself: `class _Stream(object, asyncio.Protocol)` has no consistent MRO, and the client
    would not import at all where the C module is not built.)"""


# Where it is built, _Stream's `exchange` is a C field of this base, read there without a lookup.
_StreamBase: type = _fastread.StreamBase if _fastread is not None else _PyStreamBase


class _Stream(_StreamBase, asyncio.Protocol):  # type: ignore[misc,valid-type]
    """One keep-alive HTTP/1.1 connection carrying one streamed /generate at a time.

    Why not httpx for the stream: a request passes through httpx, httpcore and anyio, each with
    awaits that put it back at the end of the event loop's ready queue. At C=150 on a 2-core box
    that took 16 ms (p50) from "send" to the request's last byte on the socket, and every chunk
    took the same detour before it was stamped: TTFT read 12 % long against the simulator's
    wire stamps. Here the request is written to the socket in the same call that stamps it, and
    each chunk is stamped in data_received, the first Python code that sees the bytes. Each
    response is framed by its exchange's httptools parser: chunked, sized or close-delimited
    bodies, errors, a server that closes."""

    def __init__(self) -> None:
        self.transport: Optional[asyncio.Transport] = None
        # A response begun and not yet read to its end: the connection cannot carry another.
        self.mid_response = False
        self.lost = False
        self.lost_why: Optional[Exception] = None  # what connection_lost was told, if anything
        self.exchange: Optional[_Exchange] = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is None:  # bytes nobody asked for: the connection is in an unknown state
            self.close()
            return
        ex.feed(_perf(), data)

    def received(self, stamp: float, data: bytes) -> None:
        """data_received with the bytes' own stamp (_KernelStamped: when the kernel got them)."""
        ex = self.exchange
        if ex is None:
            self.close()
            return
        ex.feed(stamp, data)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost, self.lost_why = True, exc
        if self.exchange is not None:
            self.exchange.cut(exc)

    def reusable(self) -> bool:
        return not (self.lost or self.mid_response or self.transport is None or self.transport.is_closing())

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


# Linux: SO_TIMESTAMPNS (asm-generic/socket.h; the socket module does not name it) makes recvmsg
# hand over, with the bytes, the time the kernel received the last of them (CLOCK_REALTIME).
_SO_TIMESTAMPNS = 35
_unpack_ts = struct.Struct("qq").unpack_from
_wall = time.time


def _perf_and_wall() -> tuple[float, float]:
    """perf_counter and time.time at one instant, as _fastread.c's mono_real: the wall clock
    read between two perf_counter reads, again (at most twice more) while they are over 50 us
    apart, so a preemption between two plain reads cannot move a kernel stamp by the stall."""
    p0 = _perf()
    for _ in range(3):
        w = _wall()
        p1 = _perf()
        if p1 - p0 <= 50e-6:
            break
        p0 = p1
    return (p0 + p1) / 2, w


# Under malloc's mmap threshold (128 KiB): recvmsg allocates this much for every read before
# it shrinks the result, and 256 KiB cost ~17 us a read in mmap and page faults (64 KiB: ~1 us).
# A larger body is read on the next readiness, as a split chunk is.
_READ_SIZE = 64 * 1024
# SPECMON_KERNEL_STAMPS=0 turns them off (stamps at the read, uvloop's transport): to compare.
KERNEL_STAMPS = sys.platform.startswith("linux") and os.environ.get("SPECMON_KERNEL_STAMPS", "1") != "0"


class _KernelStamped:
    """The transport of a plain-TCP _Stream that stamps each read with the kernel's receive time.

    With uvloop's transport a chunk is stamped when the client's Python code gets to it: when
    all C streams' chunks of one decode step land together, the last waits while the others are
    parsed (at C=150 about 4 ms at the p99 on a 2-core box), and any wait for the CPU or the GIL
    is added as well. Here the socket is read with recvmsg and SO_TIMESTAMPNS: each read comes
    with the time its last bytes reached this host's TCP stack, mapped onto perf_counter (the
    clock of every other stamp) by the wall-clock difference at the read. A stamp is then when
    the bytes arrived, whatever the client was doing; it is never later than the read itself.
    One read per readable socket and loop pass, as uvloop does (a stream's chunks are a decode
    step apart, so a read holds one chunk unless the client fell that far behind, and then the
    chunks of that read share its stamp, as they did before)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: "_Stream",
                 poller: Any = None):
        self._loop, self._sock, self._p = loop, sock, protocol
        self._fd = sock.fileno()
        self._closing = False
        self._out = bytearray()
        self._recvmsg = sock.recvmsg
        # Where it is built, the C reader reads the socket, without a Python frame per read: one
        # of `poller`'s (a _fastread.Poller of this loop: a pass reads every ready socket in one
        # callback), or without one, called by the loop itself.
        self.native = _fastread.Reader(self._fd, self, protocol, poller) if _fastread is not None else None
        self._polled = poller is not None  # GenerateClient._poller: a poller only where the C reader is
        if not self._polled:
            loop.add_reader(self._fd, self.native.readable if self.native is not None else self._readable)

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if self._out:
            self._out += data
            return
        try:
            n = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._lost(e)
            return
        if n < len(data):  # the socket's buffer is full: the rest when it is writable
            self._out += data[n:]
            self._loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            n = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        del self._out[:n]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        try:
            data, anc, _, _ = self._recvmsg(_READ_SIZE, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        if not data:
            self._lost(None)
            return
        now, real = _perf_and_wall()
        stamp = now
        if anc:  # one control message: the timestamp
            _, kind, raw = anc[0]
            if kind == _SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = _unpack_ts(raw)
                ago = real - (sec + nsec * 1e-9)
                if ago > 0:
                    stamp = now - ago
        self._p.received(stamp, data)

    def _lost(self, exc: Optional[Exception]) -> None:
        if self._closing:
            return
        self.close()
        self._p.connection_lost(exc)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self.native is not None:
            self.native.close()  # out of its poller, if it has one
        if not self._polled:
            self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
            self._out.clear()
        self._sock.close()


class _PyExchangeBase:
    """_Exchange's base where the C reader is not built: every read is this module's."""

    def _flush_stamps(self) -> None:
        pass  # nothing is staged


# Where it is built, the fields the C reader shares with _Exchange are C fields of this base
# (o, _arr_t, _arr_n, _last_buf, _last_lo, _last_hi, last_tokens, events, t_activity, _last_t,
# between_chunks, want_rid): the same attributes to this code, read and written there
# without a lookup. The C reader stages the token events it reads in the base and appends them
# to the outcome's arrays at _flush_stamps(): before this code takes a read, and when the
# exchange ends (_attempt). Until then an outcome's token_events may lack the newest ones.
_ExchangeBase: type = _fastread.ExchangeBase if _fastread is not None else _PyExchangeBase


class _Exchange(_ExchangeBase):  # type: ignore[misc,valid-type]
    """One request/response on a _Stream: parses the SSE body as it arrives, stamps each event."""

    def __init__(self, conn: _Stream, outcome: RequestOutcome, done: "asyncio.Future[None]"):
        self.conn, self.o, self.done = conn, outcome, done
        self.status: Optional[int] = None
        self.buf = b""
        self.last_tokens = 0
        self._last_t = 0.0  # the newest token event's stamp (the C reader measures chunk gaps from it)
        self.events = 0  # the events read ([DONE] aside): the outcome's count once the exchange ends
        # the last event's data as buffer[start:end], sliced once, when the response ends (three
        # attributes, not a tuple: a tuple a chunk would be one more object for the collector)
        self._last_buf, self._last_lo, self._last_hi = b"", 0, 0
        ev = outcome.token_events
        if not isinstance(ev, TokenStamps):
            ev = outcome.token_events = TokenStamps(ev)
        self._add_t, self._add_n = ev._t.append, ev._n.append
        self._arr_t, self._arr_n = ev._t, ev._n
        self.error_body = b""
        self.saw_done = False
        self.t_activity = time.perf_counter()
        # The response's framing: httptools calls back (on_headers_complete, on_body, ...) from
        # feed_data, with the stamp of the read being fed (`_now`). `keep_alive`: the server keeps
        # the connection; `chunked`: the body came in chunks; `_chunk_end`: the parser's last
        # step ended one, so the next read starts at a chunk's size line (the C reader's cue);
        # `_complete`: the response was read to its end; `_extra`: bytes came after it.
        self._parser = httptools.HttpResponseParser(self)
        self._now = 0.0
        self._headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = self.chunked = self._chunk_end = self._complete = self._extra = False
        self._to_close = False  # the body runs to the connection's close (on_headers_complete)
        # Whether the next read may go to the C reader (_fastread.c): the body is between whole
        # chunks and events. Set after every read this class takes, with whether the rid is still
        # to be read (each reader takes it from the first event that holds one, as _body does).
        self.between_chunks = False
        self.want_rid = outcome.rid is None

    @property
    def last_event(self) -> bytes:
        buf = self._last_buf
        if buf is None:  # the C reader read it last, and kept it in its own buffer
            return self._kept_event()
        return buf[self._last_lo:self._last_hi]

    def feed(self, now: float, data: bytes) -> None:
        pacer = _active_pacer() if _PY_PACED else None
        if pacer is not None:  # no C reader: this read paces the loop as the C one would
            n, last_t = len(self._arr_t), self._last_t
            self._feed(now, data)
            pacer.read(now, last_t, len(self._arr_t) - n)
        else:
            self._feed(now, data)
        self.between_chunks = self._chunk_end and self.chunked and self.status == 200 and not (self._complete or self.buf)
        self.want_rid = self.o.rid is None

    def _feed(self, now: float, data: bytes) -> None:
        self.t_activity = self._now = now
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            if not self._complete:
                self.conn.close()
                self._fail("error", f"RemoteProtocolError: {_parser_words(e)}")
                return
            self._extra = True  # bytes after the response nobody asked for (on_message_begin)
        if self._complete and not self.done.done():
            self._end()

    # ---- httptools' callbacks: only those the reading needs are defined (each costs a call)
    def on_message_begin(self) -> None:
        if self._complete:  # a second response: stop reading here (feed_data raises)
            raise _Unasked()
        self.conn.mid_response = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        p, o = self._parser, self.o
        self.status = o.http_status = p.get_status_code()
        o.t_first_byte = self._now
        if self.status in (429, 503):
            o.retry_after_s = retry_after(self._headers)
        self.keep_alive = p.should_keep_alive()
        # no length and not chunked: the body runs to the close (llhttp has no call for its end)
        te = [v.lower() for k, v in self._headers if k == b"transfer-encoding"]
        self._to_close = not (any(k == b"content-length" for k, _ in self._headers)
                              or (te and te[-1].rsplit(b",", 1)[-1].strip() == b"chunked"))
        # SGLang's head (`Transfer-Encoding: chunked`, nothing else): the body starts at a chunk's
        # size line, so the first chunk's read may already go to the C reader
        self.chunked = self._chunk_end = te == [b"chunked"]

    def on_chunk_header(self) -> None:
        self.chunked = True  # as llhttp reads Transfer-Encoding, not as the header's words look

    def on_body(self, body: bytes) -> None:
        self._chunk_end = False
        if self.status == 200:
            self._body(self._now, body, 0, len(body))
        elif len(self.error_body) < 400:
            self.error_body += body

    def on_chunk_complete(self) -> None:
        self._chunk_end = True

    def on_message_complete(self) -> None:
        if self.o.t_end is None:
            self.o.t_end = self._now
        self._complete = True

    def _end(self) -> None:
        """The response was read to its end: the connection goes back to the pool unless the
        server said it closes, or sent bytes nobody asked for."""
        if self.keep_alive and not self._extra:
            self.conn.mid_response = False
        else:
            self.conn.close()
        self._finish()

    def _body(self, now: float, raw: bytes, lo: int, hi: int) -> None:
        """The SSE events in raw[lo:hi] (after what an earlier read left unfinished), read in
        place: offsets into the buffer, no slice of an event's data but the rid's, once."""
        o = self.o
        if self.buf:
            raw = self.buf + raw[lo:hi]
            lo, hi = 0, len(raw)
        pos = lo
        while True:
            # An event ends at a blank line. Its first newline is found with a one-byte search
            # (memchr; a two-byte find cost ~9 % of the load thread at 1,000 streams): in a
            # one-line `data: {json}` event it is the end already.
            cut = raw.find(b"\n", pos, hi)
            if cut < 0:
                break
            if cut + 1 >= hi or raw[cut + 1] != 10:
                cut = raw.find(b"\n\n", cut, hi)  # a multi-line event, or its end not in yet
                if cut < 0:
                    break
            start, pos = pos, cut + 2
            if not raw.startswith(b"data:", start, cut):
                continue
            d = start + 5
            if raw[d] == 32:  # the usual one space after the colon
                d += 1
            while d < cut and raw[d] in _SPACE:
                d += 1
            if raw.startswith(b"[DONE]", d, cut):
                self.saw_done = True
                o.t_end = now
                continue  # read on to the end of the body so the connection can be reused
            self.events += 1
            if raw.startswith(b'{"error"', d, cut):
                o.status = "error"
                o.error = _error_message(raw[d:cut])
                continue
            if o.rid is None:
                # One byte search per request: a /generate chunk's only "id" key is meta_info's
                # (a quote inside the text is escaped, so the text cannot fake it).
                o.rid = _str_after(raw[d:cut], _ID_KEY)
            i = raw.rfind(_CT_KEY, d, cut)
            if i >= 0:
                m = _match_digits(raw, i + 20, cut)  # 20: len(_CT_KEY)
                if m is not None:
                    ct = int(m.group(1))
                    if ct > self.last_tokens:
                        self._add_t(now)
                        self._add_n(ct - self.last_tokens)
                        self.last_tokens = ct
                        self._last_t = now
            self._last_buf, self._last_lo, self._last_hi = raw, d, cut
        self.buf = raw[pos:hi] if pos < hi else b""

    def cut(self, exc: Optional[Exception]) -> None:
        """The connection closed before the response was complete (or, for a body that runs to
        the close, at its end)."""
        if exc is None and self._to_close and not self._complete:
            if self.o.t_end is None:
                self.o.t_end = self._now
            self._complete = True
            self.conn.close()
            self._finish()
            return
        if self.status is None:
            if self.o.status == "ok":
                self.o.no_answer = ("connection reset" if isinstance(exc, ConnectionResetError)
                                    else "connection closed before any answer")
            self._fail("error", "RemoteProtocolError: server disconnected without sending a response")
        else:
            why = f": {exc}" if exc else ""
            if self.o.status == "ok":
                self.o.cut_mid_response = True
            self._fail("error", f"ReadError: connection closed mid-response{why}"[:200])

    def _fail(self, status: str, error: str) -> None:
        if self.done.done():
            return
        if self.o.status == "ok":
            self.o.status, self.o.error = status, error
        self.o.events = self.events
        self.conn.close()
        self.done.set_result(None)

    def _finish(self) -> None:
        if self.done.done():
            return
        o = self.o
        if self.status != 200:
            text = self.error_body[:200].decode("utf-8", "replace")
            o.status, o.error = "error", f"HTTP {self.status}: {text.strip()}"
        elif not self.saw_done and o.status == "ok":
            # SGLang ends every stream with [DONE]; a body that stops short is a cut
            # response (a server that died mid-stream), not a finished request.
            o.status, o.error = "error", "stream ended without [DONE]"
        o.events = self.events
        self.done.set_result(None)


def _connected(done: asyncio.Future) -> None:
    if not done.done():
        done.set_result(None)


async def _connect_socket(loop: asyncio.AbstractEventLoop, sock: socket.socket, addr: tuple) -> None:
    """loop.sock_connect for a resolved address: the non-blocking connect, then one wait for the
    socket to be writable if it is still in progress. uvloop's sock_connect resolves the address
    again (an IDNA encode of the host) and checks the socket's family through the enum, about
    20 of its ~50 us a connect here: 1,000 connections a level at 1,000 streams."""
    err = sock.connect_ex(addr)
    if err in (errno.EINPROGRESS, errno.EAGAIN):
        fd = sock.fileno()
        done = loop.create_future()
        loop.add_writer(fd, _connected, done)
        try:
            await done
        finally:
            loop.remove_writer(fd)
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))  # ConnectionRefusedError for ECONNREFUSED, and so on


class GenerateClient:
    """One arm's streaming connections. Sized to the highest level so no hidden cap sits below it."""

    def __init__(self, base_url: str, *, max_concurrency: int, timeout_s: float = 600.0,
                 api_key_env: Optional[str] = None, connect_timeout_s: float = 10.0,
                 kernel_stamps: Optional[bool] = None):
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"  # never logged or recorded
        self.url = base_url.rstrip("/")
        u = urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{base_url}: expected an http:// or https:// URL")
        self._host, self._tls = u.hostname, u.scheme == "https"
        # Chunks stamped with the kernel's receive time (_KernelStamped): plain TCP on Linux;
        # TLS and other systems are stamped when the client reads them.
        self.kernel_stamps = (KERNEL_STAMPS if kernel_stamps is None else kernel_stamps) and not self._tls
        self._addrs: Optional[list[tuple[int, Any]]] = None
        self._resolving: Optional[asyncio.Future] = None  # the one lookup of the host's addresses
        self._port = u.port or (443 if self._tls else 80)
        self._target = (u.path.rstrip("/") + "/generate").encode()
        host_header = u.netloc.rsplit("@", 1)[-1]
        self._request_headers = [(b"Host", host_header.encode()), (b"Accept", b"text/event-stream"),
                                 *((k.encode(), v.encode()) for k, v in headers.items())]
        self._head_prefix = request_head_prefix(self._target, self._request_headers)
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.connections_opened = 0
        # the requests in flight, for the timeout sweep (_sweep), every _sweep_every seconds,
        # each with its stamp when it went in flight (the sweep's bound: no activity before it)
        self._active: dict[_Exchange, float] = {}
        self._sweeper: Optional[asyncio.TimerHandle] = None
        self._sweep_every = min(1.0, timeout_s / 4)
        # One connection per concurrent stream, kept on a free list (keep-alive reuses each
        # socket). A pool limit below the level would silently cap concurrency.
        self._free: list[_Stream] = []
        self._all: set[_Stream] = set()
        # The C readers' poller of each loop this client's streams run on (in practice the load
        # loop's alone); a poller the loop watches only while a stream is open.
        self._pollers: dict[asyncio.AbstractEventLoop, Any] = {}
        # Building an SSL context costs ~0.1 s of CPU: one, shared by every stream.
        self._ssl = ssl.create_default_context() if self._tls else None
        self._headers = headers
        self._client: Optional["httpx.AsyncClient"] = None  # for the odd non-streaming call (flush_cache)

    def request_bytes(self, payload: bytes) -> bytes:
        """A /generate request as h11 would write it (tests/unit/test_load_client.py holds them equal)."""
        return b"%s%d\r\n\r\n%s" % (self._head_prefix, len(payload), payload)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for c in list(self._all):
            c.close()
        self._all.clear()
        self._free.clear()
        self._pollers = {loop: p for loop, p in self._pollers.items() if p.readers}
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def flush_cache(self, timeout_s: float = 30.0) -> Optional[str]:
        """POST /flush_cache?timeout=S (waits for the server to go idle). None on success, else why."""
        import httpx

        if self._client is None:
            # trust_env=False: straight to the server as the streams go, never through HTTP_PROXY
            # from the environment (a proxy cannot reach a loopback server, and the bearer key
            # must never reach a proxy).
            self._client = httpx.AsyncClient(base_url=self.url, headers=self._headers, verify=self._ssl or False,
                                             timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                                             trust_env=False)
        try:
            r = await self._client.post("/flush_cache", params={"timeout": timeout_s}, timeout=timeout_s + 10)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}"
        return None if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:120]}"

    async def _connect(self) -> _Stream:
        return await asyncio.wait_for(self._open(), self.connect_timeout_s)

    async def _open(self) -> _Stream:
        """A new connection, without a timeout of its own (_connect's, or prepare's for them all)."""
        loop = asyncio.get_running_loop()
        if self.kernel_stamps:
            conn = await self._connect_stamped(loop)
        else:
            _, conn = await loop.create_connection(_Stream, self._host, self._port, ssl=self._ssl,
                                                   server_hostname=self._host if self._ssl else None)
        self.connections_opened += 1
        self._all.add(conn)
        return conn

    async def _connect_stamped(self, loop: asyncio.AbstractEventLoop) -> _Stream:
        """A plain-TCP connection read through _KernelStamped: each address of the host in
        turn, as create_connection tries them."""
        if self._addrs is None:
            # One lookup for every connection: prepare opens C of them at once, and each asking
            # the resolver itself was C lookups in the loop's thread pool.
            res = self._resolving
            if res is None or res.get_loop() is not loop or (res.done() and (res.cancelled() or res.exception())):
                res = self._resolving = asyncio.ensure_future(
                    loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM))
            infos = await asyncio.shield(res)
            self._addrs = [(fam, addr) for fam, _, _, _, addr in infos]
        err: Optional[OSError] = None
        for fam, addr in self._addrs:
            sock = socket.socket(fam, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                await _connect_socket(loop, sock, addr)
            except OSError as e:
                sock.close()
                err = e
                continue
            except BaseException:
                sock.close()
                raise
            conn = _Stream()
            conn.connection_made(_KernelStamped(loop, sock, conn, self._poller(loop)))
            return conn
        raise err or OSError(f"no address for {self._host}")

    def _poller(self, loop: asyncio.AbstractEventLoop) -> Any:
        if _fastread is None:
            return None
        p = self._pollers.get(loop)
        if p is None:
            p = self._pollers[loop] = _fastread.Poller(loop)
        return p

    async def generate(self, prompt: Prompt, max_new_tokens: int, outcome: RequestOutcome) -> RequestOutcome:
        payload = request_body(prompt, max_new_tokens)
        while self._free and not self._free[-1].reusable():
            self._drop(self._free.pop())
        reused = bool(self._free)
        outcome = await self._attempt(self._free.pop() if reused else None, payload, outcome)
        if reused and outcome.status == "error" and outcome.t_first_byte is None and outcome.error \
                and outcome.error.startswith(_STALE_ERRORS):
            # A kept-alive socket the server closed while it sat idle (uvicorn drops them after
            # 5 s; a sped-up sim's pause or drain is longer): nothing reached the server, so
            # send again on a fresh connection instead of recording a failure that was ours.
            outcome.status, outcome.error, outcome.t_end, outcome.no_answer = "ok", None, None, None
            outcome.token_events.clear()
            outcome.events = 0
            outcome.rid = None
            outcome = await self._attempt(None, payload, outcome)
        return outcome

    async def prepare(self, n: int) -> int:
        """Open connections until n are idle and ready (kept alive, for the requests to come);
        the number ready. A connect that fails is not an error here: the request that would
        have used it connects itself and records what happens."""
        while self._free and not self._free[-1].reusable():
            self._drop(self._free.pop())
        want = min(n, self.max_concurrency) - len(self._free)
        if want > 0:
            # A task a connection and one timeout for them all (wait_for's per connect was a
            # second task each).
            tasks = [asyncio.ensure_future(self._open()) for _ in range(want)]
            _, pending = await asyncio.wait(tasks, timeout=self.connect_timeout_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
            # (one that finished as it was cancelled: its connection counts too)
            self._free.extend(t.result() for t in tasks if not t.cancelled() and t.exception() is None)
        return len(self._free)

    def _drop(self, conn: _Stream) -> None:
        conn.close()
        self._all.discard(conn)

    async def drop_idle(self) -> None:
        """Close the kept-alive connections nobody is using (between levels they may go stale)."""
        idle, self._free = self._free, []
        for c in idle:
            self._drop(c)

    async def _attempt(self, conn: Optional[_Stream], payload: bytes, outcome: RequestOutcome) -> RequestOutcome:
        loop = asyncio.get_running_loop()
        fresh = conn is None
        if fresh:
            outcome.t_sent = time.perf_counter()
            outcome.t_sent_wall = clock.wall_of(outcome.t_sent)
            try:
                conn = await self._connect()
            except asyncio.TimeoutError:
                outcome.status, outcome.error = "timeout", "ConnectTimeout"
                outcome.no_answer = f"no connection within {self.connect_timeout_s:g} s"
            except OSError as e:
                outcome.status, outcome.error = "error", f"ConnectError: {e}"[:200]
                outcome.no_answer = _connect_failure(e)
            if conn is None:
                outcome.t_end = time.perf_counter()
                return outcome
        done: asyncio.Future[None] = loop.create_future()
        ex = _Exchange(conn, outcome, done)
        conn.exchange = ex
        wire = self.request_bytes(payload)
        if not fresh:
            # Stamp, then write: transport.write hands the bytes to the kernel in this same call.
            # (A new connection was stamped before its connect: the user waits for that too.)
            outcome.t_sent = time.perf_counter()
            outcome.t_sent_wall = clock.wall_of(outcome.t_sent)
        ex.t_activity = outcome.t_sent
        conn.transport.write(wire)
        outcome.t_written = time.perf_counter()  # the request is in the kernel: what sending cost us
        if conn.lost:
            # Lost before this exchange was its own: a new connection's reader can see the server
            # close it (a server that died as it accepted) before this task resumes from the
            # connect, and then the write goes nowhere and no answer will ever come.
            ex.cut(conn.lost_why)
        self._active[ex] = ex.t_activity
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._sweep_every, self._sweep)
        try:
            await done
        except asyncio.CancelledError:
            conn.close()  # the server sees the disconnect and aborts the request
            self._all.discard(conn)
            outcome.events = ex.events  # as _finish and _fail set it when the exchange ends
            raise
        finally:
            ex._flush_stamps()  # the token events the C reader staged: the outcome whole from here
            self._active.pop(ex, None)
            conn.exchange = None
        if outcome.t_end is None:
            outcome.t_end = time.perf_counter()
        if conn.reusable():
            self._free.append(conn)
        else:
            self._drop(conn)
        self._read_final(ex)
        return outcome

    def _sweep(self) -> None:
        """The read-inactivity timeout of every request in flight, checked in one pass: a timer
        per request (and its re-arming) cost ~10 us of the load thread each, 150 ms at 1,000
        streams; this is one timer for the client, late by at most its period."""
        self._sweeper = None
        now = time.perf_counter()
        # None can have been idle that long while the oldest went in flight less than that ago
        # (a request's activity is never before its start): a min() over the stamps in C, not
        # a pass in Python over 1,000 streams a second for a timeout of 600 s
        first = min(self._active.values(), default=now)
        late = [ex for ex in self._active if now - ex.t_activity >= self.timeout_s] if now - first >= self.timeout_s else ()
        for ex in late:
            if ex.done.done():
                continue
            if ex.status is None and ex.o.status == "ok":
                ex.o.no_answer = f"no answer within {self.timeout_s:g} s"
            ex._fail("timeout", "ReadTimeout")
        if self._active:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep)

    @staticmethod
    def _read_final(ex: _Exchange) -> None:
        outcome, last_event = ex.o, ex.last_event
        if last_event:
            try:
                final = _final_event(last_event, outcome.keep_output)
                meta = final.get("meta_info") or {}
                if outcome.keep_output:
                    ids, text = final.get("output_ids"), final.get("text")
                    outcome.output_ids = ids if isinstance(ids, list) and all(isinstance(t, int) for t in ids) else None
                    outcome.output_text = text if isinstance(text, str) else None
                outcome.final_meta = trusted_meta(meta)
                if isinstance(meta.get("id"), str):
                    outcome.rid = meta["id"]
                if isinstance(meta.get("completion_tokens"), int):
                    outcome.completion_tokens = meta["completion_tokens"]
                if isinstance(meta.get("prompt_tokens"), int):
                    outcome.prompt_tokens = meta["prompt_tokens"]
                fr = meta.get("finish_reason")
                if isinstance(fr, dict) and fr.get("type") == "abort" and outcome.status == "ok":
                    outcome.status, outcome.error = "error", f"aborted: {fr.get('message')}"
            except (json.JSONDecodeError, AttributeError):
                outcome.prompt_tokens = _int_after(last_event, _PT_KEY)
                outcome.completion_tokens = ex.last_tokens or None
        if outcome.status == "ok" and not outcome.token_events:
            outcome.status, outcome.error = "error", "stream ended without a token"


_META_KEY = b'"meta_info":'
_decode_at = json.JSONDecoder().raw_decode


def _final_event(data: bytes, whole: bool) -> dict[str, Any]:
    """The final event's JSON, or (unless `whole`) just its meta_info when that is the event's
    last key, as SGLang writes it: the text and output_ids before it are most of the event
    (~60 us a request to decode at 256 tokens) and are read only for multi-turn. A key inside
    the text cannot fake it: a quote there is escaped."""
    if not whole:
        i = data.rfind(_META_KEY)
        if i >= 0:
            tail = data[i + len(_META_KEY):].decode("utf-8")
            start = len(tail) - len(tail.lstrip())
            try:
                meta, end = _decode_at(tail, start)
            except json.JSONDecodeError:
                meta, end = None, 0
            if isinstance(meta, dict) and tail[end:].strip() == "}":
                return {"meta_info": meta}
    return json.loads(data)


class _Unasked(Exception):
    """Bytes of a response after the one asked for: the connection's state is unknown."""


def _parser_words(e: Exception) -> str:
    """httptools' error as the reason says it: llhttp's own words ("Invalid header value char")."""
    return str(e).strip() or type(e).__name__


RETRY_AFTER_MAX_S = 3600.0  # a value beyond this is treated as nonsense, not as an order to wait


def retry_after(headers) -> Optional[float]:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP-date), None when absent
    or unreadable. Header names come lower-cased (on_header). Only read on a 429/503."""
    for name, value in headers:
        if name != b"retry-after":
            continue
        text = value.decode("latin-1").strip()
        try:
            s = float(text)
        except ValueError:
            import email.utils  # here: an HTTP-date Retry-After is rare, the import ~3 ms of every start

            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError):
                return None
            if when is None or when.tzinfo is None:
                return None
            s = when.timestamp() - time.time()
        if s != s:  # NaN
            return None
        return min(max(s, 0.0), RETRY_AFTER_MAX_S)
    return None


def _connect_failure(e: OSError) -> str:
    """A failed connect in a few words, for the level's reason ("connection refused")."""
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, ConnectionResetError):
        return "connection reset"
    return (e.strerror or str(e) or type(e).__name__).lower()[:80]


def _error_message(data: bytes) -> str:
    try:
        err = json.loads(data).get("error")
        msg = err.get("message") if isinstance(err, dict) else str(err)
    except (json.JSONDecodeError, AttributeError):
        msg = data[:200].decode("utf-8", "replace")
    return f"server error: {msg}"[:200]
