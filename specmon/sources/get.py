"""The one GET of the sources (a worker's collector, a gateway, Prometheus): the lean client
(sources/http.py) for a plain-http address, httpx for the rest (TLS, proxies, user:password, an
injected transport). Either way: (status, body) with the body read streaming up to a cap for the
statuses asked, and every failure one GetFailed, whose kind each source words as its own.

httpx (~0.16 s to import) is imported only when a URL needs it: a session of loopback servers
never pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection, Mapping, Optional
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:
    import httpx

from specmon.sources import http
from specmon.urls import is_loopback, without_credentials


class GetFailed(Exception):
    """A GET that gave no answer.

    kind: refused (nothing listens) | unresolved (the name has no address) | down (no connection,
    another reason) | timeout (no connection or no bytes within timeout_s) | too_large (a body past
    its cap) | undecodable (a Content-Encoding that does not decode) | error (the connection broke,
    or what came is not HTTP) | setup (no client: the environment's proxy or certificate settings
    cannot be used; words says so, whole).

    words: what the error said, never a password; for unresolved and down never empty. cause: the
    error's type name (httpx's ReadError, the lean client's TransportError). said: the words as a
    reason gives them after the URL: httpx's errors go by their type name (their message is often
    empty), the lean client's messages say what happened by themselves."""

    def __init__(self, kind: str, words: str, cause: str = "", said: Optional[str] = None):
        super().__init__(words)
        self.kind, self.words, self.cause = kind, words, cause
        self.said = words if said is None else said


def is_loopback_url(url: str) -> bool:
    """This machine by address: 127.0.0.0/8, ::1 (also as ::ffff:127.x), localhost and the names
    under .localhost (which resolve to loopback). Never resolved."""
    if is_loopback(url):
        return True
    try:
        host = (urlsplit(url.strip()).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    return host.endswith(".localhost")


def lean_target(url: str) -> Optional[tuple[str, int, str]]:
    """(host, port, path) when `url` can be asked through the lean client: plain http, no
    user:password, no query, and no proxy in the environment that httpx would send it through (a
    loopback server never is: see SourceGet). Else None: httpx does it, with everything it knows
    (TLS and SSL_CERT_FILE, proxies and NO_PROXY, credentials)."""
    try:
        u = urlsplit(url)
        port = u.port or 80
    except ValueError:
        return None
    if u.scheme != "http" or not u.hostname or u.username or u.password or u.query or u.fragment:
        return None
    if not is_loopback_url(url):
        import urllib.request  # here, not at the top: ~20 ms of imports a loopback session never needs

        proxies = urllib.request.getproxies()
        if proxies.get("http") or proxies.get("all"):
            return None
    return u.hostname, port, u.path.rstrip("/")


_SSL_CONTEXT: list = []


def shared_ssl_context():
    """One TLS context for every client, made on first use (SSL_CERT_FILE/SSL_CERT_DIR honoured as
    httpx honours them). httpx makes one per client otherwise, and loading the CA bundle holds the
    event loop ~0.15 s on a 2-core machine: 12 workers joining a fleet held one tick ~2 s."""
    if not _SSL_CONTEXT:
        import httpx

        _SSL_CONTEXT.append(httpx.create_ssl_context(trust_env=True))
    return _SSL_CONTEXT[0]


_LEAN_KINDS = ((http.Unresolved, "unresolved"), (http.ConnectFailed, "down"), (http.ReadTimeout, "timeout"),
               (http.Undecodable, "undecodable"))


def _read_all(status: int) -> bool:
    return True


class SourceGet:
    """The GETs of one source, whose address is `base`: a lean client per plain-http host and port
    (a gateway's metrics may be on another port), one httpx client for every other URL, made when
    first needed. A proxy from the environment is never used when `base` is loopback: it cannot
    reach this host's 127.0.0.1 and would be handed the bearer key."""

    def __init__(self, base: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None,
                 keep_idle: int = http.KEEP_IDLE):
        self.base, self.timeout_s, self.transport, self.keep_idle = base, timeout_s, transport, keep_idle
        self._client: Optional[httpx.AsyncClient] = None
        self._problem: Optional[str] = None  # why no httpx client could be made (asked once)
        self._lean: dict[tuple[str, int], http.LeanClient] = {}
        self._targets: dict[str, Optional[tuple[str, int, str]]] = {}  # url -> lean_target(url), asked once
        if self._target(base) is None:
            # Now rather than in the first GET: importing httpx and loading the CA bundle hold the
            # loop ~0.3 s, which would count against that GET's deadline.
            try:
                self._httpx()
            except GetFailed:
                pass  # said by every GET that needs it

    def _target(self, url: str) -> Optional[tuple[str, int, str]]:
        try:
            return self._targets[url]
        except KeyError:
            t = self._targets[url] = lean_target(url) if self.transport is None else None
            return t

    def is_lean(self, url: str) -> bool:
        """Whether GETs of url go through the lean client."""
        return self._target(url) is not None

    def peer_closed(self) -> bool:
        """Whether a server closed a connection kept for the next GET since its last answer (known
        for the lean client only)."""
        return any(c.peer_closed() for c in self._lean.values())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        for c in self._lean.values():
            await c.aclose()
        self._lean.clear()

    async def get(self, url: str, headers: Mapping[str, str], max_bytes: int, *,
                  params: Optional[Mapping[str, str]] = None,
                  body_for: Optional[Collection[int]] = (200,)) -> tuple[int, bytes]:
        """GET url (params, when given, as its query): (status, body). The body is read for the
        statuses in body_for (None: every status), else b"" and the connection is dropped; past
        max_bytes (counted after any Content-Encoding is undone) it is a GetFailed too_large."""
        target = self._target(url)
        if target is None:
            return await self._httpx_get(url, headers, max_bytes, params, body_for)
        host, port, path = target
        c = self._lean.get((host, port))
        if c is None:
            # gzip only across a network: on this host inflating costs more CPU than the bytes saved
            c = self._lean[(host, port)] = http.LeanClient(
                host, port, self.timeout_s, keep_idle=self.keep_idle,
                accept_encoding="identity" if is_loopback_url(url) else "gzip")
        path = path or "/"
        if params:
            path += "?" + urlencode(params)  # as httpx writes them
        try:
            return await c.get(path, headers, max_bytes,
                               read_body=_read_all if body_for is None else body_for.__contains__)
        except http.TooLarge:
            raise GetFailed("too_large", f"body over {max_bytes:,} bytes", "TooLarge") from None
        except http.Refused as e:
            raise GetFailed("refused", str(e), "Refused") from None
        except http.HttpError as e:
            kind = next((k for cls, k in _LEAN_KINDS if isinstance(e, cls)), "error")
            words = (str(e) or type(e).__name__) if kind in ("unresolved", "down") else str(e)
            raise GetFailed(kind, words, type(e).__name__) from None

    def _httpx(self) -> httpx.AsyncClient:
        if self._client is None:
            if self._problem is not None:
                raise GetFailed("setup", self._problem)
            import httpx

            try:
                # Off loopback httpx keeps its handling of the environment (proxies, NO_PROXY);
                # loopback keeps SSL_CERT_FILE/SSL_CERT_DIR through the shared SSL context.
                self._client = httpx.AsyncClient(timeout=self.timeout_s, transport=self.transport,
                                                 follow_redirects=False, verify=shared_ssl_context(),
                                                 trust_env=not is_loopback_url(self.base))
            except Exception as e:  # e.g. ALL_PROXY=socks5://... without socksio, or an unknown proxy scheme
                self._problem = ("cannot set up HTTP from the environment's proxy or certificate settings "
                                 f"({type(e).__name__}: {str(e)[:120]})")
                raise GetFailed("setup", self._problem) from None
        return self._client

    async def _httpx_get(self, url: str, headers: Mapping[str, str], max_bytes: int,
                         params: Optional[Mapping[str, str]], body_for: Optional[Collection[int]]) -> tuple[int, bytes]:
        client = self._httpx()
        import httpx

        try:
            async with client.stream("GET", url, headers=headers, params=params) as r:
                if body_for is not None and r.status_code not in body_for:
                    return r.status_code, b""
                body = bytearray()
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise GetFailed("too_large", f"body over {max_bytes:,} bytes", "TooLarge")
                return r.status_code, bytes(body)
        except httpx.ConnectError as e:
            cause = type(e).__name__
            words = without_credentials(str(e)) or cause
            if http.is_refused(e):
                raise GetFailed("refused", words, cause) from None
            if "name resolution" in words or "not known" in words or "No address associated" in words:
                raise GetFailed("unresolved", words, cause) from None
            raise GetFailed("down", words, cause) from None
        except httpx.TimeoutException as e:
            raise GetFailed("timeout", without_credentials(str(e)), type(e).__name__) from None
        except httpx.DecodingError as e:
            raise GetFailed("undecodable", without_credentials(str(e)), type(e).__name__) from None
        except httpx.HTTPError as e:
            cause, words = type(e).__name__, without_credentials(str(e))
            raise GetFailed("error", words, cause, f"{cause} {words}".strip()) from None
