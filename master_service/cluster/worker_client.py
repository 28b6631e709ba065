"""The master's HTTP client for one worker (cluster-control API, signed requests)."""

from __future__ import annotations

from typing import Any

import httpx

from txcluster.auth import HmacAuth

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
    def __init__(self, url: str, secret: bytes, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.AsyncClient(
            base_url=self.url, auth=HmacAuth(secret), timeout=timeout,
            limits=httpx.Limits(max_keepalive_connections=32, max_connections=64),
        )
        # Reads are not signed: a worker's RDF4J read API is open to anyone.
        self.reads = httpx.AsyncClient(
            base_url=self.url, timeout=timeout,
            limits=httpx.Limits(max_keepalive_connections=64, max_connections=128),
        )

    async def close(self) -> None:
        await self.http.aclose()
        await self.reads.aclose()

    async def _call(self, method: str, path: str, json: Any = None,
                    timeout: float | None = None) -> Any:
        try:
            kwargs: dict[str, Any] = {"json": json}
            if timeout is not None:
                kwargs["timeout"] = timeout
            resp = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise WorkerUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None
        if resp.status_code >= 400:
            try:
                message = resp.json().get("detail", resp.text)
            except ValueError:
                message = resp.text
            raise WorkerRefused(resp.status_code, str(message))
        return resp.json()

    async def state(self, timeout: float = 5.0) -> dict:
        return await self._call("GET", "/cluster/state", timeout=timeout)

    async def execute(self, start_seq: int, transactions: list[dict],
                      control_queries: list[str]) -> dict:
        return await self._call("POST", "/cluster/execute", {
            "start_seq": start_seq, "transactions": transactions,
            "control_queries": control_queries,
        }, timeout=WORK_CALL_TIMEOUT_S)

    async def apply(self, entries: list[dict]) -> dict:
        return await self._call("POST", "/cluster/apply", {"entries": entries},
                                timeout=WORK_CALL_TIMEOUT_S)

    async def pull_image(self, source: str) -> dict:
        return await self._call("POST", "/cluster/image/pull", {"source": source},
                                timeout=3600)

    async def backup(self, name: str) -> dict:
        return await self._call("POST", f"/cluster/backups/{name}", timeout=3600)

    async def restore(self, name: str | None = None, source: str | None = None) -> dict:
        body = {"source": source} if source else {"name": name}
        return await self._call("POST", "/cluster/restore", body, timeout=3600)
