"""The server side of a hand-written HTTP/1.1 exchange on a loopback socket, for the tests that
stream exact bytes at exact times to the load client."""

from __future__ import annotations

import re
import socket

STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """data as one HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def read_request(c: socket.socket) -> bytes:
    """One request from the client, head and Content-Length body; the body."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += c.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(rest) < n:
        rest += c.recv(65536)
    return rest
