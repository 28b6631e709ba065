"""The master's HTTP client for one worker: signed cluster-control calls and reads.

Signed calls go through txinfra.signed_session (txinfra.http_pool: every write costs
the master one call to the probe and one to each other worker, and every read one call to
a worker; the master's CPU is what bounds group-commit throughput and the read-proxy
ratio, see that module for the measurement). Reads share its connections, unsigned.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import ssl
from typing import Any

import aiohttp
import orjson
from yarl import URL

from txinfra import jsonbody
from txinfra.http_pool import origin_of
from txinfra.signed_session import SignedSession

# Ceiling of a call that does a transaction's work (execute, apply): a large load
# legitimately takes longer than request-timeout-s, so that timeout does not apply to it;
# the caller watches the worker's liveness meanwhile (Cluster._while_alive).
WORK_CALL_TIMEOUT_S = 3600.0


class WorkerUnavailable(Exception):
    """The worker could not be reached or timed out."""


class WorkerRefused(Exception):
    """The worker answered with an error (status and its message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class WorkerClient:
    def __init__(self, url: str, secret: bytes, timeout: float = 30.0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.url = url.rstrip("/")
        # A read goes out as the client's target after this worker's path, byte for byte
        # (http_pool.exchange_at: no URL object per read).
        parsed = URL(self.url, encoded=True)
        self._origin, self._base_path = origin_of(parsed), parsed.raw_path.rstrip("/")
        self.timeout = timeout
        # tls verifies an https worker (tls-ca-file); None: the system's CAs. Never off.
        self._http = SignedSession(secret, tls=tls, timeout=timeout, limit=128,
                                   ttl_dns_cache=300, auto_decompress=False)

    async def close(self) -> None:
        await self._http.close()

    async def _call(self, method: str, path: str, payload: Any = None,
                    timeout: float | None = None, nquads: bytes | None = None) -> Any:
        body = nquads if nquads is not None else \
            b"" if payload is None else jsonbody.dumps(payload)
        content_type = "application/json" if payload is not None else \
            "application/n-quads" if nquads is not None else None
        try:
            status, content = await self._http.request(method, self.url + path, body,
                                                       content_type, timeout or self.timeout)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise WorkerUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None
        if status >= 400:
            try:
                message = jsonlib.loads(content).get("detail", content.decode(errors="replace"))
            except (ValueError, AttributeError):
                message = content.decode(errors="replace")
            raise WorkerRefused(status, str(message))
        try:
            return orjson.loads(content)  # our worker's answer: plain JSON (jsonbody.dumps)
        except ValueError:
            raise WorkerUnavailable(f"{self.url}: answered with something that is not JSON"
                                    ) from None

    async def read(self, method: str, target: str, body: bytes, headers: dict[str, str],
                   timeout: float | None = None) -> tuple[int, dict[str, str], bytes]:
        """A client's read, forwarded unsigned (a worker's read API is open to anyone).
        ``timeout``: instead of request-timeout-s (a query's own timeout and a margin)."""
        try:
            # The client's path and query string go on byte for byte.
            return await self._http.pool.exchange_at(
                method, self._origin, self._base_path + target,
                [*headers.items()] if "accept" in headers else [*headers.items(),
                                                                  ("accept", "*/*")],
                body, timeout)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise WorkerUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None

    async def transaction_read(self, payload: dict) -> tuple[int, dict[str, str], bytes]:
        """A read inside one of the master's open RDF4J transactions, with its pending
        operations (worker_service/tx_view.py): the worker's answer as for ``read``."""
        try:
            return await self._http.exchange(
                "POST", self.url + "/cluster/transaction-read",
                jsonlib.dumps(payload).encode(), "application/json", WORK_CALL_TIMEOUT_S)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise WorkerUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None

    async def state(self, timeout: float = 5.0) -> dict:
        return await self._call("GET", "/cluster/state", timeout=timeout)

    async def execute(self, start_seq: int, transactions: list[dict],
                      control_queries: list[str]) -> dict:
        return await self._call("POST", "/cluster/execute", {
            "start_seq": start_seq, "transactions": transactions,
            "control_queries": control_queries,
        }, timeout=WORK_CALL_TIMEOUT_S)

    async def journal(self, after: int, limit: int) -> dict:
        """What the worker executed as probe after seq ``after`` (worker_service/journal.py,
        Executed); WorkerRefused 410 when it no longer holds it."""
        return await self._call("GET", f"/cluster/journal?after={after}&limit={limit}",
                                timeout=WORK_CALL_TIMEOUT_S)

    async def apply(self, entries: list[dict]) -> dict:
        return await self._call("POST", "/cluster/apply", {"entries": entries},
                                timeout=WORK_CALL_TIMEOUT_S)

    async def pull_image(self, source: str) -> dict:
        return await self._call("POST", "/cluster/image/pull", {"source": source},
                                timeout=3600)

    async def backup(self, name: str, compress: bool = True, stream: bool = False) -> dict:
        """A named image; ``stream``: answered once its checkpoint is made, its sha256
        and bytes null until it is written (``backup_checksum``)."""
        query = "&".join(q for q, on in (("compression=false", not compress),
                                         ("stream=true", stream)) if on)
        return await self._call("POST", f"/cluster/backups/{name}" + (f"?{query}" if query
                                                                       else ""), timeout=3600)

    async def backup_checksum(self, name: str) -> tuple[str, int]:
        """(SHA-256, bytes) of a named image, once it is written (the worker waits)."""
        try:
            status, headers, body = await self._http.exchange(
                "GET", f"{self.url}/cluster/backups/{name}/sha256", timeout=3600)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise WorkerUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None
        if status != 200:
            raise WorkerRefused(status, body.decode(errors="replace")[:300])
        return body.decode().strip(), int(headers.get("x-image-bytes", "0"))

    def backup_stream(self, name: str, start: int = 0
                      ) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """A named image as it arrives, from byte ``start`` on (a peer seeding from this
        data centre resumes a cut download: master_service/sync/seeding.py)."""
        headers = {"range": f"bytes={start}-"} if start else {}
        return self._http.stream(f"{self.url}/cluster/backups/{name}", headers, self.timeout)

    async def restore(self, name: str | None = None, source: str | None = None) -> dict:
        body = {"source": source} if source else {"name": name}
        return await self._call("POST", "/cluster/restore", body, timeout=3600)

    # Initial bulk load (worker_service/bulk_load.py): parts, then commit or abort.

    async def bulk_load_part(self, load_id: str, part: int, data: bytes) -> dict:
        return await self._call("PUT", f"/cluster/bulk-load/{load_id}/parts/{part}",
                                nquads=data, timeout=WORK_CALL_TIMEOUT_S)

    async def bulk_load_sent(self, load_id: str) -> dict:
        return await self._call("POST", f"/cluster/bulk-load/{load_id}/sent",
                                timeout=WORK_CALL_TIMEOUT_S)

    async def bulk_load_commit(self, load_id: str, fingerprint: str, quads: int) -> dict:
        return await self._call("POST", f"/cluster/bulk-load/{load_id}",
                                {"fingerprint": fingerprint, "quads": quads},
                                timeout=WORK_CALL_TIMEOUT_S)

    async def bulk_load_abort(self, load_id: str) -> dict:
        return await self._call("DELETE", f"/cluster/bulk-load/{load_id}")
