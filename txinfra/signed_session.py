"""The one place where a node signs its HTTP requests to another node.

The master's calls to its workers (master_service/cluster/worker_client.py) and its sync
driver's calls to peer masters (master_service/sync/driver.py) go through a
``SignedSession``: the request is signed (txinfra.auth: method, Host, path and query,
time, nonce, body) and sent with exactly the Host header and the path that were signed,
and an https server is verified with the node's TLS context (tls-ca-file, else the
system's CAs; never off). A server whose certificate that context does not trust is
``UntrustedCertificate``, whose message says so plainly, and is logged as an error once
(until it is trusted again): callers that log only when a server goes down would
otherwise show a connection failure, not a trust problem, if it was down before.

Calls answered whole go through txinfra.http_pool (keep-alive connections on httptools'
parser): every write costs the master one call to the probe and one to each other worker,
and every sync round one call per peer, and client CPU per call is about half aiohttp's
and a thirteenth of httpx's AsyncClient's (that module; bench/bench_node_calls.py).
A worker image read as it arrives (``stream``) keeps aiohttp, also when a worker pulls one
from another (worker_service/api/control.py). (The CLI and tests keep httpx and
txinfra.auth.HmacAuth.)
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from yarl import URL

from txinfra.auth import host_header, sign_for, signed_target
from txinfra.http_pool import ConnectionPool

log = logging.getLogger("txinfra.tls")


class UntrustedCertificate(aiohttp.ClientConnectionError):
    """The https server presented a certificate this node's TLS context does not trust
    (another CA, a name or address it was not issued for, expired)."""


class SignedSession:
    """Signed calls to other nodes: ``request`` / ``exchange`` on a ConnectionPool,
    ``stream`` on an aiohttp session; both made on first use, inside the running event
    loop (both bind to it); ``pool`` is also there for unsigned calls on the same
    connections (a client's read that the master forwards to a worker)."""

    def __init__(self, secret: bytes, *, timeout: float, tls: ssl.SSLContext | None = None,
                 limit: int = 100, ttl_dns_cache: int | None = 10,
                 auto_decompress: bool = True) -> None:
        self._secret = secret
        # None: the system's CAs (aiohttp's default). Verification is never turned off.
        self._tls: ssl.SSLContext | bool = tls if tls is not None else True
        self._timeout = timeout
        self._limit = limit
        self._ttl_dns_cache = ttl_dns_cache
        self._auto_decompress = auto_decompress
        self._session: aiohttp.ClientSession | None = None
        self._pool: ConnectionPool | None = None
        self._untrusted: set[str] = set()  # origins whose refusal is logged

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit,
                                               ttl_dns_cache=self._ttl_dns_cache,
                                               ssl=self._tls),
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                auto_decompress=self._auto_decompress)
        return self._session

    @property
    def pool(self) -> ConnectionPool:
        """Calls answered whole (``exchange``, ``request``), and unsigned ones on the same
        connections (a client's read the master forwards to a worker)."""
        if self._pool is None:
            self._pool = ConnectionPool(tls=self._tls if self._tls is not True else None,
                                        limit=self._limit, timeout=self._timeout)
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, url: str, body: bytes = b"",
                      content_type: str | None = None,
                      timeout: float | None = None) -> tuple[int, bytes]:
        """Send one signed request; (status, body). Raises aiohttp.ClientError (of which
        UntrustedCertificate), TimeoutError or OSError when there is no answer."""
        status, _headers, content = await self.exchange(method, url, body, content_type,
                                                        timeout)
        return status, content

    async def exchange(self, method: str, url: str, body: bytes = b"",
                       content_type: str | None = None, timeout: float | None = None
                       ) -> tuple[int, dict[str, str], bytes]:
        """As ``request``, with the answer's headers (lower-case names)."""
        target, host, signature = self._sign(method, url, body)
        headers = [("host", host), ("accept", "*/*"), ("authorization", signature)]
        if content_type is not None:
            headers.append(("content-type", content_type))
        try:
            answer = await self.pool.exchange(method, target, headers, body, timeout)
        except ssl.SSLCertVerificationError as exc:
            raise self._untrusted_origin(f"{target.scheme}://{host}",
                                         exc.verify_message or str(exc)) from None
        self._untrusted.discard(f"{target.scheme}://{host}")
        return answer

    def stream(self, url: str, headers: Mapping[str, str], read_timeout: float
               ) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """A signed GET whose answer the caller reads as it arrives (a worker image):
        no total timeout, ``read_timeout`` between two reads."""
        return self._signed("GET", url, b"", None, headers, {"timeout": aiohttp.ClientTimeout(
            total=None, sock_connect=read_timeout, sock_read=read_timeout)})

    @contextlib.asynccontextmanager
    async def _signed(self, method: str, url: str, body: bytes, content_type: str | None,
                      extra: Mapping[str, str], options: dict[str, Any]
                      ) -> AsyncIterator[aiohttp.ClientResponse]:
        target, host, signature = self._sign(method, url, body)
        headers = {**extra, "authorization": signature, "host": host}
        if content_type is not None:
            headers["content-type"] = content_type
        try:
            async with self.session.request(method, target, data=body or None,
                                            headers=headers, **options) as resp:
                self._untrusted.discard(f"{target.scheme}://{host}")
                yield resp
        except aiohttp.ClientConnectorCertificateError as exc:
            reason = getattr(exc.certificate_error, "verify_message", None) or \
                str(exc.certificate_error)
            raise self._untrusted_origin(f"{target.scheme}://{host}", reason) from None

    def _sign(self, method: str, url: str, body: bytes) -> tuple[URL, str, str]:
        """The URL as sent, its Host header and the request's Authorization header."""
        # yarl quotes what needs it and keeps existing %-escapes; the receiver checks the
        # path as it decodes it, so that is what is signed (txinfra.auth.signed_target).
        target = URL(url)
        host = host_header(url)
        return target, host, sign_for(self._secret, method, host,
                                      signed_target(target.raw_path, target.raw_query_string),
                                      body)

    def _untrusted_origin(self, origin: str, reason: str) -> UntrustedCertificate:
        refused = UntrustedCertificate(
            f"{origin} presented a certificate this node does not trust ({reason}; "
            f"trusted: tls-ca-file, else the system's CAs)")
        if origin not in self._untrusted:
            self._untrusted.add(origin)
            log.error("TLS: %s; nothing is sent to it until it presents one that is",
                      refused)
        return refused
