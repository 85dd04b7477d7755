"""A lean HTTP/1.1 GET for the collectors' scrapes of plain-http servers.

Why not httpx for these: a 1 Hz scrape of a 40 KiB /metrics through httpx's client, httpcore's
pool and anyio costs ~0.6 ms of CPU in request machinery alone (its async-library check even
searches the import path on every request), more than reading the body. Here one GET is one
write on a kept-alive connection and a few bytes.find() calls on what comes back.

What it does, and no more: GET with the headers given, Host and `Accept-Encoding: identity`
for a server on this host (a gzip body costs more to inflate than it saves on loopback) or
`gzip` for one across a network (Prometheus range answers: 9.8 MiB instead of 48.2 for two
days of 50 workers); the answer framed by
Content-Length, chunked transfer coding or the end of the connection; a body that still comes
gzip- or deflate-encoded is inflated, capped after inflating. Each wait for the server (connect,
each read) has `timeout_s`. A connection is kept for the next GET when the answer was complete
and the server did not ask to close; a kept connection the server closed meanwhile is replaced
once, silently (a GET is safe to send again).

Errors are typed so the collector can word them: Refused, Unresolved, ConnectFailed, ReadTimeout,
TransportError (reset, closed mid-answer, not HTTP), Undecodable, TooLarge. TLS, proxies and
URLs with user:password stay with httpx (sources/get.py chooses).
"""

from __future__ import annotations

import asyncio
import socket
import zlib
from typing import Optional

HEAD_MAX_BYTES = 64 * 2**10
KEEP_IDLE = 4  # connections kept per client by default (the gateway asks several paths at once)


def is_refused(e: BaseException) -> bool:
    """Whether an error from a connect means nothing listens there. httpx words it "All
    connection attempts failed" and keeps ConnectionRefusedError among its causes, or inside an
    exception group when it tried several addresses; this client raises Refused."""
    cur: Optional[BaseException] = e
    for _ in range(8):
        if cur is None:
            return False
        if isinstance(cur, (ConnectionRefusedError, Refused)) or "refused" in str(cur).lower():
            return True
        inner = getattr(cur, "exceptions", None)  # an exception group from the connect
        if isinstance(inner, (list, tuple)) and inner and is_refused(inner[0]):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class HttpError(Exception):
    """Base of what a GET raises (cancellation aside)."""


class Refused(HttpError):
    pass


class Unresolved(HttpError):
    pass


class ConnectFailed(HttpError):
    pass


class ReadTimeout(HttpError):
    pass


class TransportError(HttpError):
    pass


class Undecodable(HttpError):
    pass


class TooLarge(HttpError):
    pass


class _Conn(asyncio.Protocol):
    """One connection: what arrived, and a future to wake the reader when more does."""

    def __init__(self) -> None:
        self.transport: Optional[asyncio.Transport] = None
        self.buf = bytearray()
        self.closed = False  # the server ended it (FIN or reset) or we did
        self.lost: Optional[BaseException] = None
        self._waiter: Optional[asyncio.Future] = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._wake()

    def eof_received(self):
        self.closed = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.lost = exc
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def more(self, timeout_s: float) -> None:
        """Wait until more bytes arrive or the connection ends; ReadTimeout after timeout_s."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        w = self._waiter = loop.create_future()
        timer = loop.call_later(timeout_s, _expire, w, timeout_s)
        try:
            await w
        finally:
            timer.cancel()
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(w: asyncio.Future, timeout_s: float) -> None:
    if not w.done():
        w.set_exception(ReadTimeout(f"no bytes within {timeout_s:g} s"))


class LeanClient:
    """GETs to one http://host:port, over at most keep_idle kept-alive connections."""

    def __init__(self, host: str, port: int, timeout_s: float, keep_idle: int = KEEP_IDLE,
                 accept_encoding: str = "identity"):
        self.host, self.port, self.timeout_s, self.keep_idle = host, port, timeout_s, keep_idle
        host_header = f"[{host}]" if ":" in host else host
        if port != 80:
            host_header += f":{port}"
        self._head_fixed = (f"Host: {host_header}\r\nAccept: */*\r\nAccept-Encoding: {accept_encoding}\r\n"
                            "User-Agent: specmon\r\n").encode("ascii")
        self._idle: list[_Conn] = []
        self.connects = 0  # connections opened (what keep-alive saves)

    def peer_closed(self) -> bool:
        """Whether a kept connection has been closed by the server since its last answer."""
        return any(c.closed for c in self._idle)

    async def aclose(self) -> None:
        for c in self._idle:
            c.close()
        self._idle.clear()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        self.connects += 1
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(_Conn, self.host, self.port), self.timeout_s)
        except asyncio.TimeoutError:
            raise ReadTimeout(f"no connection within {self.timeout_s:g} s") from None
        except ConnectionRefusedError as e:
            raise Refused(str(e)) from None
        except socket.gaierror as e:
            raise Unresolved(str(e)) from None
        except OSError as e:
            # several addresses tried (localhost: ::1 then 127.0.0.1): refused by each of them
            if "refused" in str(e).lower():
                raise Refused(str(e)) from None
            raise ConnectFailed(str(e) or type(e).__name__) from None
        return conn

    async def get(self, target: str, headers: dict[str, str], max_bytes: int,
                  read_body=lambda status: status == 200) -> tuple[int, bytes]:
        """GET target (the path and query): (status, body). The body is read only when
        read_body(status) says so (else b""); TooLarge past max_bytes, counted after any
        Content-Encoding is undone."""
        request = bytearray(b"GET " + target.encode("ascii") + b" HTTP/1.1\r\n" + self._head_fixed)
        for k, v in headers.items():
            request += f"{k}: {v}\r\n".encode("ascii")
        request += b"\r\n"
        request = bytes(request)
        while self._idle:
            conn = self._idle.pop()
            if conn.closed or conn.buf:  # closed by the server while idle, or bytes nobody asked for
                conn.close()
                continue
            try:
                return await self._exchange(conn, request, max_bytes, read_body, reused=True)
            except _Stale:
                continue  # the server had closed it: once more on a new connection
        return await self._exchange(await self._connect(), request, max_bytes, read_body, reused=False)

    async def _exchange(self, conn: _Conn, request: bytes, max_bytes: int, read_body, reused: bool):
        done = False
        try:
            conn.transport.write(request)
            status, body, keep = await self._answer(conn, max_bytes, read_body, reused)
            done = True
        finally:
            if not done:
                conn.close()  # an answer cut short (error, deadline) leaves the connection unusable
        if keep and not conn.closed and not conn.buf and len(self._idle) < self.keep_idle:
            self._idle.append(conn)
        else:
            conn.close()
        return status, body

    async def _answer(self, conn: _Conn, max_bytes: int, read_body, reused: bool) -> tuple[int, bytes, bool]:
        t = self.timeout_s
        while True:  # 1xx answers are skipped
            end = conn.buf.find(b"\r\n\r\n")
            while end < 0:
                if len(conn.buf) > HEAD_MAX_BYTES:
                    raise TransportError(f"answer head over {HEAD_MAX_BYTES // 1024} KiB")
                if conn.closed:
                    if reused and not conn.buf:
                        raise _Stale()
                    raise _ended(conn, "the server closed the connection without a complete answer")
                await conn.more(t)
                end = conn.buf.find(b"\r\n\r\n")
            head = bytes(conn.buf[:end])
            del conn.buf[:end + 4]
            version, status, fields = _parse_head(head)
            if not 100 <= status < 200 or status == 101:
                break
        connection = fields.get("connection", "").lower()
        keep = version == "1.1" and "close" not in connection
        te = fields.get("transfer-encoding", "").lower()
        length: Optional[int] = None
        if te:
            if te.replace(" ", "").split(",")[-1] != "chunked":
                raise TransportError(f"transfer-encoding {te[:40]!r} is not one this client reads")
        elif "content-length" in fields:
            try:
                length = int(fields["content-length"])
            except ValueError:
                raise TransportError(f"bad content-length {fields['content-length'][:40]!r}") from None
            if length < 0:
                raise TransportError(f"bad content-length {length}")
        if not read_body(status):
            return status, b"", False  # not read: the connection goes
        if status == 204 or status == 304:
            return status, b"", keep
        out = _Body(fields.get("content-encoding", ""), max_bytes)
        if te:
            await self._chunked(conn, out)
        elif length is not None:
            if out.identity and length > max_bytes:
                raise TooLarge()
            while len(conn.buf) < length:
                if conn.closed:
                    raise _ended(conn, f"the server closed the connection {length - len(conn.buf):,} bytes "
                                       "before the end of the body")
                if out.identity and len(conn.buf) > max_bytes:
                    raise TooLarge()
                await conn.more(t)
            out.add(conn.buf[:length])
            del conn.buf[:length]
        else:  # no framing: the body ends with the connection
            keep = False
            while not conn.closed:
                if len(conn.buf) >= 65536:
                    out.add(conn.buf)
                    conn.buf.clear()
                await conn.more(t)
            if conn.lost is not None:
                raise _ended(conn, "the connection broke before the end of the body")
            out.add(conn.buf)
            conn.buf.clear()
        return status, out.finish(), keep

    async def _chunked(self, conn: _Conn, out: "_Body") -> None:
        t = self.timeout_s
        buf = conn.buf
        while True:
            eol = buf.find(b"\r\n")
            while eol < 0:
                if len(buf) > 4096:
                    raise TransportError("a chunk size line over 4 KiB")
                if conn.closed:
                    raise _ended(conn, "the server closed the connection inside a chunked body")
                await conn.more(t)
                eol = buf.find(b"\r\n")
            size_text = bytes(buf[:eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise TransportError(f"bad chunk size {size_text[:20]!r}") from None
            if size < 0:
                raise TransportError(f"bad chunk size {size_text[:20]!r}")
            if size == 0:
                # trailers (none expected), then the empty line
                del buf[:eol + 2]
                while True:
                    eol = buf.find(b"\r\n")
                    while eol < 0:
                        if conn.closed or len(buf) > HEAD_MAX_BYTES:
                            raise _ended(conn, "the chunked body ended without its last line")
                        await conn.more(t)
                        eol = buf.find(b"\r\n")
                    line_empty = eol == 0
                    del buf[:eol + 2]
                    if line_empty:
                        return
            if out.identity and out.size + size > out.max_bytes:
                raise TooLarge()
            need = eol + 2 + size + 2
            while len(buf) < need:
                if conn.closed:
                    raise _ended(conn, "the server closed the connection inside a chunked body")
                await conn.more(t)
            if buf[need - 2:need] != b"\r\n":
                raise TransportError("a chunk not ended by CRLF")
            out.add(buf[eol + 2:need - 2])
            del buf[:need]


class _Stale(Exception):
    """A kept connection the server had closed before our request: try a new one."""


def _ended(conn: _Conn, words: str) -> TransportError:
    if conn.lost is not None and str(conn.lost):
        words += f" ({type(conn.lost).__name__}: {conn.lost})"
    return TransportError(words)


def _parse_head(head: bytes) -> tuple[str, int, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise TransportError("an answer head that is not text") from None
    lines = text.split("\r\n")
    first = lines[0].split(" ", 2)
    if len(first) < 2 or not first[0].startswith("HTTP/1.") or len(first[0]) != 8 \
            or not first[1].isdigit() or len(first[1]) != 3:
        raise TransportError(f"not an HTTP/1 answer: {lines[0][:60]!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise TransportError(f"a bad header line: {line[:60]!r}")
        name = name.lower()
        value = value.strip()
        # a repeated field is its values joined by commas (content-length must then agree)
        if name in fields:
            if name == "content-length" and fields[name] != value:
                raise TransportError("two different content-length headers")
            if name != "content-length":
                fields[name] += ", " + value
        else:
            fields[name] = value
    return first[0][5:], int(first[1]), fields


class _Body:
    """The body as it arrives, inflated when the server encoded it anyway, capped at max_bytes."""

    def __init__(self, encoding: str, max_bytes: int):
        self.max_bytes = max_bytes
        enc = [e.strip().lower() for e in encoding.split(",") if e.strip()]
        enc = [e for e in enc if e != "identity"]
        self._inflaters = []
        for e in enc:
            if e in ("gzip", "x-gzip"):
                self._inflaters.append(zlib.decompressobj(16 + zlib.MAX_WBITS))
            elif e == "deflate":
                self._inflaters.append(_Deflate())
            # any other coding is passed through as it came (as httpx does for one it lacks)
        self._inflaters.reverse()  # the last coding applied is undone first
        self.identity = not self._inflaters
        self._parts: list[bytes] = []
        self.size = 0

    def add(self, data) -> None:
        data = bytes(data)
        try:
            for z in self._inflaters:
                # at most one byte past the cap per call: a small body that inflates to gigabytes
                # stops here, its input left unread
                data = z.decompress(data, self.max_bytes + 1)
                if z.unconsumed_tail:
                    raise TooLarge()
        except zlib.error as e:
            raise Undecodable(str(e)) from None
        self.size += len(data)
        if self.size > self.max_bytes:
            raise TooLarge()
        self._parts.append(data)

    def finish(self) -> bytes:
        try:
            for z in self._inflaters:
                tail = z.flush()
                if tail:
                    self.size += len(tail)
                    if self.size > self.max_bytes:
                        raise TooLarge()
                    self._parts.append(tail)
        except zlib.error as e:
            raise Undecodable(str(e)) from None
        return self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)


class _Deflate:
    """Content-Encoding: deflate is zlib-wrapped by the standard, raw deflate by some servers:
    whichever the first bytes say."""

    def __init__(self) -> None:
        self._z = None
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, most: int) -> bytes:
        if self._z is None:
            self._z = zlib.decompressobj()
            try:
                out = self._z.decompress(data, most)
            except zlib.error:
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._z.decompress(data, most)
        else:
            out = self._z.decompress(data, most)
        self.unconsumed_tail = self._z.unconsumed_tail
        return out

    def flush(self) -> bytes:
        return self._z.flush() if self._z is not None else b""
