"""Keep-alive HTTP/1.1 connections from one node to the others, on httptools' parser.

Every write costs a master one call to its probe worker and one to each other worker,
every forwarded read one call to a worker, every sync round one call per peer: the client
side of those calls is on the master's event loop, whose CPU bounds the read-proxy ratio
and agreed throughput (issue 18). Client CPU per GET of a worker's point query, one at a
time: this pool ~160 us, aiohttp ~300 us, httpx ~2.2 ms (bench/bench_node_calls.py).
The requests are ours, to our own nodes' servers (txinfra/http_server.py): a method, a
target, a few headers and a body, answered with a length or chunked; so no redirects,
cookies, proxies or decompression, and the answer's bytes are passed on as they came.

What it keeps of a full client: TLS (the node's context; the server's name checked), a
total timeout per call (waiting for a connection included), a bound on connections per
origin, and no call ever sent twice except a GET or HEAD, once, when a connection that
had served a call before was found closed before any byte of the answer came back
(aiohttp does the same). A call that is
cancelled or times out closes its connection, so the server sees its client leave
(a worker then stops the query: worker_service/query_process.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import Sequence

import httptools
from yarl import URL

# An idle connection is used again only this soon after its last answer: well inside
# the keep-alive of any server we meet (uvicorn's: 5 s), so the server does not close it
# as it is being reused.
IDLE_S = 2.0
# One attempt to open a TCP connection lasts this long; then a fresh one starts (each
# address in turn), within the call's timeout. The kernel resends a lost SYN 1, 3, 7,
# 15 s after the first: a call that began during a partition (or while a peer's accept
# queue overflowed) would otherwise reach the peer only that long after the path came
# back, and a master not heard from meanwhile reads as missing to its peers. A connect
# on a working path takes one round trip; TLS is not in the attempt (its handshake has
# the call's timeout).
CONNECT_ATTEMPT_S = 1.0

Answer = tuple[int, dict[str, str], bytes]
Origin = tuple[str, str, int]  # scheme, host, port: what a pool's connections are kept by

# Calls sent again on a fresh connection when a kept-alive one was found closed before
# any byte of the answer (as aiohttp does): reads; a signed GET's nonce was not used,
# since the server never read it.
IDEMPOTENT = frozenset({"GET", "HEAD"})


def origin_of(url: URL) -> Origin:
    return (url.scheme, url.raw_host or "", url.port or 80)


class ServerDisconnected(ConnectionError):
    """The server closed the connection before its answer was complete."""


class MalformedAnswer(ConnectionError):
    """The server's answer is not valid HTTP/1.1."""


class _Stale(ServerDisconnected):
    """A reused connection turned out closed before any byte of the answer."""


class _Connection(asyncio.Protocol):
    """One connection; one call at a time (the pool hands it to one caller)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.served = 0  # answers completed on it
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[Answer] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._got_bytes = False
        self._head_only = False
        self._sized = False  # content-length or chunked: an end the parser sees
        self._keep_alive = False  # the answer allows another call on the connection

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(MalformedAnswer(f"the server's answer is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._answer is None or self._answer.done():
            return
        if self._headers_done and not self._sized and not self._head_only:
            self._finish()  # an answer whose body ends with the connection (RFC 9112 6.3)
        elif not self._got_bytes and self.served:
            self._fail(_Stale("the server had closed the kept-alive connection"))
        else:
            self._fail(ServerDisconnected(
                f"the server closed the connection before its answer was complete"
                f"{f' ({exc})' if exc else ''}"))

    # httptools callbacks
    _headers_done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        self._headers[key] = value.decode("latin-1")
        if key == "content-length" or (key == "transfer-encoding" and b"chunked" in value):
            self._sized = True

    def on_headers_complete(self) -> None:
        self._headers_done = True
        if self._head_only:  # no body follows a HEAD's answer, whatever its length says
            self._finish()
            self.close()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        # Asked here: the parser has forgotten the answer's headers once it returns.
        self._keep_alive = self._parser.should_keep_alive()
        if self._answer is not None and not self._answer.done():
            self._finish()

    # the call
    def send(self, method: str, head: bytes, body: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._headers, self._body = {}, []
        self._got_bytes = self._headers_done = self._sized = self._keep_alive = False
        self._head_only = method == "HEAD"
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)  # not copied into one buffer with the head
        return self._answer

    def reusable(self) -> bool:
        return not self.closed and self._keep_alive

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _finish(self) -> None:
        assert self._answer is not None
        self.served += 1
        self._answer.set_result((self._parser.get_status_code(), self._headers,
                                 b"".join(self._body)))

    def _fail(self, exc: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        self.abort()


class ConnectionPool:
    """Connections per origin (scheme, host, port), at most ``limit`` of them in use at
    once per origin; made inside the running event loop on first use."""

    def __init__(self, *, tls: ssl.SSLContext | None = None, limit: int = 100,
                 timeout: float = 30.0, connect_attempt: float = CONNECT_ATTEMPT_S) -> None:
        # None: the system's CAs. Verification is never turned off.
        self._tls = tls
        self._limit = limit
        self.timeout = timeout
        self.connect_attempt = connect_attempt
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._slots: dict[tuple[str, str, int], asyncio.Semaphore] = {}
        self._in_use: set[_Connection] = set()

    async def exchange(self, method: str, url: URL, headers: Sequence[tuple[str, str]],
                       body: bytes = b"", timeout: float | None = None) -> Answer:
        """Send ``method`` to ``url`` (its target as yarl encodes it) with ``headers``
        (Host when they have none, and Content-Length, are added) and ``body``; (status,
        headers with lower-case names, body). TimeoutError after ``timeout`` (else the
        pool's), OSError (among them ssl.SSLCertVerificationError, ServerDisconnected,
        MalformedAnswer) when there is no answer."""
        return await self.exchange_at(method, origin_of(url), url.raw_path_qs, headers,
                                      body, timeout)

    async def exchange_at(self, method: str, origin: Origin, target: str,
                          headers: Sequence[tuple[str, str]], body: bytes = b"",
                          timeout: float | None = None) -> Answer:
        """``exchange`` with the origin (``origin_of``) and the request target (path and
        query string, sent as they are) given apart: a master's forwarded read builds no
        URL object (yarl's parse was ~7% of a master's CPU per point read, py-spy)."""
        scheme, host, port = origin
        lines = [f"{k}: {v}" for k, v in headers]
        if not any(k.lower() == "host" for k, _ in headers):
            lines.append(f"host: {_host_header(scheme, host, port)}")
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"content-length: {len(body)}")
        # The target as given (UTF-8 if it is not all ASCII); header values as they came
        # (ASGI servers decode them as Latin-1).
        head = (f"{method} {target} HTTP/1.1\r\n".encode() +
                ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        slots = self._slots.get(origin)
        if slots is None:
            slots = self._slots[origin] = asyncio.Semaphore(self._limit)
        async with asyncio.timeout(timeout or self.timeout), slots:
            for attempt in (1, 2):
                conn = await self._connection(origin)
                self._in_use.add(conn)
                try:
                    answer = await conn.send(method, head, body)
                except _Stale:
                    if method in IDEMPOTENT and attempt == 1:
                        continue
                    raise
                except BaseException:
                    conn.abort()  # cancelled, timed out: the server sees us leave
                    raise
                finally:
                    self._in_use.discard(conn)
                if conn.reusable():
                    conn.idle_since = time.monotonic()
                    self._idle.setdefault(origin, deque()).append(conn)
                else:
                    conn.close()
                return answer
        raise AssertionError("unreachable")

    async def _connection(self, origin: Origin) -> _Connection:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed
            if not conn.closed and now - conn.idle_since < IDLE_S:
                return conn
            conn.close()
        scheme, host, port = origin
        context: ssl.SSLContext | None = None
        if scheme == "https":
            context = self._tls or ssl.create_default_context()
        sock = await self._connect(host, port)
        try:
            _, conn = await asyncio.get_running_loop().create_connection(
                _Connection, sock=sock, ssl=context,
                server_hostname=host if context is not None else None)
        except BaseException:
            sock.close()
            raise
        return conn

    async def _connect(self, host: str, port: int) -> socket.socket:
        """A connected TCP socket to ``host``: its addresses are tried in turn, each
        attempt for ``connect_attempt`` seconds (CONNECT_ATTEMPT_S), again and again
        while one of them times out (the caller's timeout ends it); OSError when every
        address refuses or fails."""
        loop = asyncio.get_running_loop()
        addresses = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        while True:
            failed: OSError | None = None
            timed_out = False
            for family, kind, proto, _, address in addresses:
                sock = socket.socket(family, kind, proto)
                try:
                    sock.setblocking(False)
                    async with asyncio.timeout(self.connect_attempt):
                        await loop.sock_connect(sock, address)
                    return sock
                except TimeoutError:
                    sock.close()
                    timed_out = True
                except OSError as exc:
                    sock.close()
                    failed = exc
                except BaseException:
                    sock.close()
                    raise
            if not timed_out:
                raise failed or OSError(f"no address of {host} to connect to")

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        for conn in list(self._in_use):
            conn.abort()
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)  # let the transports close


def _host_header(scheme: str, host: str, port: int) -> str:
    name = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return name if port == default else f"{name}:{port}"
