"""Server URLs as the user writes them (command line or a layout's `attach:`): checked once,
normalised to the base URL, and asked whether they are this machine.

Pure text work: nothing here resolves a name or opens a connection.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

EXAMPLE = "http://127.0.0.1:30000"
_BAD_CHARS = re.compile(r"[\s\x00-\x1f\x7f]")


def normalize_url(url: str) -> str:
    """`http://host:port[/]` -> `http://host:port`; ValueError saying what was expected otherwise."""
    if not isinstance(url, str):
        raise ValueError(f"expected a URL like {EXAMPLE}, got {url!r}")
    text = url.strip()
    if not text or _BAD_CHARS.search(text):
        raise ValueError(f"expected a URL like {EXAMPLE}, got {url!r}")
    if not text.isascii():  # a request line and Host header are ASCII: the name in its xn-- form
        raise ValueError(f"expected an ASCII URL (a non-ASCII host name in its xn-- form), got {url!r}")
    try:
        u = urlsplit(text)
        host, port = u.hostname, u.port  # .port raises ValueError for a port out of 0-65535
    except ValueError as e:  # e.g. "Invalid IPv6 URL" for http://[::1
        if "port" in str(e).lower():
            raise ValueError(f"expected a port from 1 to 65535 in {url!r}") from None
        raise ValueError(f"expected a URL like {EXAMPLE}, got {url!r} ({e})") from None
    if u.scheme not in ("http", "https") or not host:
        raise ValueError(f"expected a URL like {EXAMPLE}, got {url!r}")
    if port == 0 or u.netloc.endswith(":"):
        raise ValueError(f"expected a port from 1 to 65535 in {url!r}")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"expected the server's base URL (no path), got {url!r}")
    return f"{u.scheme}://{u.netloc}"


def is_loopback(url: str) -> bool:
    """True when the URL's host is this machine by address: 127.0.0.0/8, ::1 (also as
    ::ffff:127.x) or the name localhost. Any other name is not trusted to be local (never resolved)."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*(?::[^/\s@]*)?@")


def without_credentials(text: str) -> str:
    """Any `scheme://user:password@` in the text with the user:password taken out: what a URL may
    look like wherever it is shown or written."""
    if "@" not in text:  # nothing to take out (the pattern needs one): a scan in C, not the regex's
        return text
    return _CREDENTIALS.sub(r"\1", text)
