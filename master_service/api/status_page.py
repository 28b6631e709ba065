"""The status page every master serves: the cluster as a picture, refreshed live.

`GET /` redirects to `GET /status` (plain HTML + JS from master_service/static/, no build
step), which polls `GET /status/data` every second. Polling rather than server-sent
events: a never-ending response would hold up the master's graceful shutdown, and a
one-second poll is as live as an operator can read.

The data is the admin status (`status_of`), the peering state (`Peering.status()`, None when
the master has no peers), each peer master's own view (its workers: the page draws every
data centre) and the operations in progress, derived here from the worker
statuses: a full replication (REPLICATION_CLIENT, with an estimate of its progress from
the source's storage size and NetSpeedBitsPerSec — the smart-replication estimate), a
backup (REPLICATION_SERVER with no client), a restore, and a catch-up by replay (seq of
the worker against the head of the log: real progress).

Access: the page shows the topology, so it takes the same read credential as the admin
API when client-auth-file is set (the browser asks for it; basic auth).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from importlib import resources

import httpx
from fastapi import APIRouter, HTTPException, Request
from starlette.responses import RedirectResponse, Response

from master_service.api.admin import status_of
from master_service.api.client import ClientAuth
from master_service.cluster.core import Cluster
from master_service.cluster.statuses import WorkerStatus

ASSETS = {"status.js": "text/javascript", "status.css": "text/css"}
# A peer's own view (its workers) is asked of the peer at most this often, and given
# this long to answer: the page must stay live while a peer is slow or cut off.
PEER_VIEW_TTL_S = 1.0
PEER_VIEW_TIMEOUT_S = 1.5


class PeerViews:
    """The other data centres as their masters see them: each peer's `/status/data`
    (with ``local=1``, so that a peer does not in turn ask its peers)."""

    def __init__(self) -> None:
        self._cached: tuple[float, dict[str, dict]] | None = None

    async def get(self, sync: dict | None, authorization: str | None) -> dict[str, dict]:
        if not sync or not sync.get("peers"):
            return {}
        now = time.monotonic()
        if self._cached and now - self._cached[0] < PEER_VIEW_TTL_S:
            return self._cached[1]
        # The operator's credential goes to the configured peers only: with client auth
        # on, every data centre's masters take the same read users (docs/operations.md).
        headers = {"authorization": authorization} if authorization else {}

        async def one(http: httpx.AsyncClient, peer: dict) -> tuple[str, dict]:
            try:
                r = await http.get(f"{peer['url']}/status/data", params={"local": "1"},
                                         headers=headers)
            except httpx.HTTPError as exc:
                return peer["id"], {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            if r.status_code != 200:
                return peer["id"], {"ok": False, "error": f"answered {r.status_code}"}
            try:
                return peer["id"], {"ok": True, "data": r.json()}
            except ValueError:
                return peer["id"], {"ok": False, "error": "answered something not JSON"}

        # A client per refresh (not one kept open): nothing to close at shutdown, and a
        # refresh a second is no load worth a pool.
        async with httpx.AsyncClient(timeout=PEER_VIEW_TIMEOUT_S) as http:
            views = dict(await asyncio.gather(*(one(http, p) for p in sync["peers"])))
        self._cached = (time.monotonic(), views)
        return views


class OperationTracker:
    """Remembers when each operation was first seen, so the page can show how long it
    has run; an operation no longer seen is forgotten (a later one starts afresh)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.first_seen: dict[tuple[str, str], tuple[float, int]] = {}

    def operations(self, status: dict, net_speed_bits_per_sec: int) -> list[dict]:
        now = self.clock()
        head = status["head"]["seq"]
        workers = status["workers"]
        seen: dict[tuple[str, str], tuple[float, int]] = {}
        ops: list[dict] = []

        def since(kind: str, url: str, seq: int) -> tuple[float, int]:
            key = (kind, url)
            seen[key] = self.first_seen.get(key, (now, seq))
            return seen[key]

        servers = [w for w in workers if w["status"] == WorkerStatus.REPLICATION_SERVER]
        clients = [w for w in workers if w["status"] == WorkerStatus.REPLICATION_CLIENT]
        restoring = [w for w in clients if (w.get("last_error") or "").startswith(
            "restoring from image")]
        for w in clients:
            started, _ = since("replication", w["url"], w["seq"])
            if w in restoring:
                continue  # shown once below, as the restore
            source = servers[0] if servers else None
            size = source.get("size_bytes") if source else None
            estimate = size * 8 / net_speed_bits_per_sec if size else None
            elapsed = now - started
            ops.append({
                "kind": "replication", "worker": w["url"],
                "source": source["url"] if source else None,
                "elapsed_s": round(elapsed, 1),
                "estimated_s": round(estimate, 1) if estimate else None,
                # An estimate, never shown as done before the worker says so.
                "progress": min(elapsed / estimate, 0.99) if estimate else None,
                "text": f"full replication into {w['url']}"
                        + (f" from {source['url']}" if source else ""),
            })
        if restoring:
            started = min(since("restore", "*", 0)[0], now)
            ops.append({
                "kind": "restore", "worker": None, "source": None,
                "elapsed_s": round(now - started, 1), "estimated_s": None,
                "progress": 1 - len(restoring) / len(workers) if workers else None,
                "text": f"{restoring[0]['last_error']}: {len(workers) - len(restoring)} of "
                        f"{len(workers)} workers restored",
            })
        if servers and not clients:
            for w in servers:
                started, _ = since("backup", w["url"], w["seq"])
                ops.append({
                    "kind": "backup", "worker": w["url"], "source": None,
                    "elapsed_s": round(now - started, 1), "estimated_s": None,
                    "progress": None, "text": f"backup written by {w['url']}",
                })
        for w in workers:
            if w["status"] in (WorkerStatus.OUT_OF_SYNC, WorkerStatus.OUT_OF_SYNC_FORCED) \
                    and 0 <= w["seq"] < head:
                started, from_seq = since("catch-up", w["url"], w["seq"])
                span = head - from_seq
                ops.append({
                    "kind": "catch-up", "worker": w["url"], "source": None,
                    "elapsed_s": round(now - started, 1), "estimated_s": None,
                    "progress": (w["seq"] - from_seq) / span if span > 0 else None,
                    "text": f"{w['url']} catching up: seq {w['seq']} of {head}",
                })
        self.first_seen = seen
        return ops


def status_page_router(cluster_provider: Callable[[], Cluster], auth: ClientAuth,
                       sync_status: Callable[[], dict | None],
                       config_provider: Callable[[], object]) -> APIRouter:
    router = APIRouter(tags=["operations"])
    tracker = OperationTracker()
    peers = PeerViews()
    static = resources.files("master_service") / "static"

    def denied(request: Request) -> Response | None:
        # The auth answer as is: a 401 carries WWW-Authenticate, so a browser asks.
        return auth.problem(request, need_write=False)

    @router.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/status", status_code=307)

    @router.get("/status", summary="The status page (HTML)", response_class=Response)
    async def page(request: Request) -> Response:
        if (refusal := denied(request)) is not None:
            return refusal
        return Response((static / "status.html").read_bytes(), media_type="text/html",
                        headers={"cache-control": "no-cache"})

    @router.get("/status/assets/{name}", include_in_schema=False)
    async def asset(name: str, request: Request) -> Response:
        if (refusal := denied(request)) is not None:
            return refusal
        if name not in ASSETS:
            raise HTTPException(404, f"no asset named '{name}'")
        return Response((static / name).read_bytes(), media_type=ASSETS[name],
                        headers={"cache-control": "no-cache"})

    @router.get("/status/data", response_model=None,
                summary="What the status page shows: the admin status, the peering state "
                "and the operations in progress")
    async def data(request: Request, local: bool = False) -> Response | dict:
        """``local``: this master's view only (what a peer asks for)."""
        if (refusal := denied(request)) is not None:
            return refusal
        cluster = cluster_provider()
        status = status_of(cluster)
        config = config_provider()
        sync = sync_status()
        return {
            "time": time.time(),
            "repository_id": getattr(config, "repository_id", None),
            "master_url": getattr(config, "master_url", None),
            "status": status,
            "sync": sync,
            "operations": tracker.operations(
                status, cluster.params.net_speed_bits_per_sec),
            "peer_views": {} if local else await peers.get(
                sync, request.headers.get("authorization")),
        }

    return router
