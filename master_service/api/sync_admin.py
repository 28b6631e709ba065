"""Admin API of the peering (TxLog sync protocol): status, the agreed queue, sync peers.

    GET    /admin/sync                      the peering state (Peering.status)
    GET    /admin/sync/agreed?after=&limit= agreed transactions (position, id, origin, ...)
                                            held: those after the floor (GET /admin/sync)
    POST   /admin/sync/peers                addSyncPeer {id, url}: persisted, at once
    DELETE /admin/sync/peers/{id}           removeSyncPeer
    POST   /admin/sync/seed                 {peer}: seed this data centre from that peer's
                                            worker image (progress: GET /admin/sync)

Same guard as the rest of the admin API (client-auth-file: read role to look, write role
to change). Peers are added and removed by the control plane (master_service/control.py):
a bad id or URL, our own id, a known peer: 400; an unknown peer: 404; each naming it,
and nothing changes.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from master_service.api.guard import AdminGuard, refusal_as_http
from master_service.control import Control


class PeerIn(BaseModel):
    id: str = Field(description="the peer master's node-id")
    url: str = Field(description="the peer master's master-url")


class SeedIn(BaseModel):
    peer: str = Field(description="the node-id of the peer whose worker image seeds this "
                      "data centre")


NOT_PEERED = "this master has no sync peers (peer.<n>.id)"


def sync_admin_router(control: Control, guard: AdminGuard) -> APIRouter:
    """Routes over the control plane (peers added, removed, seeding) and its peering
    (the state shown)."""
    peering = control.peering
    router = APIRouter(prefix="/admin/sync", tags=["admin", "peering"])

    @router.get("", summary="Peering state: agreed position, peers, divergences")
    async def status(request: Request) -> dict:
        guard.require(request, write=False)
        st = peering.status()
        if st is None:
            raise HTTPException(404, NOT_PEERED)
        return st

    @router.get("/agreed", summary="Agreed transactions in order (the synchronised queue)")
    async def agreed(request: Request, after: int = Query(0, ge=0),
                     limit: int = Query(1000, ge=1, le=10_000)) -> list[dict]:
        guard.require(request, write=False)
        if peering.driver is None:
            raise HTTPException(404, NOT_PEERED)
        node = peering.driver.node
        # Entries up to the floor are forgotten (protocol.py, "Compaction"): the list
        # starts after max(after, floor); positions stay absolute.
        start = max(after, node.floor)
        held = node.synchronised
        return [{"position": start + i + 1, "txid": tx.txid, "timestamp": tx.timestamp,
                 "origin": tx.origin, "size": tx.size, "digest": tx.digest}
                for i, tx in enumerate(held[start - node.floor:start - node.floor + limit])]

    @router.post("/peers", summary="addSyncPeer: peer with another master (persisted)")
    async def add_peer(body: PeerIn, request: Request) -> dict:
        guard.require(request, write=True)
        with refusal_as_http(Conflict=400):  # a known peer is a bad request here
            await control.add_peer(body.id, body.url)
        return peering.status()

    @router.delete("/peers/{peer_id}", summary="removeSyncPeer: stop peering with a master")
    async def remove_peer(peer_id: str, request: Request) -> dict:
        guard.require(request, write=True)
        with refusal_as_http():
            await control.remove_peer(peer_id)
        return peering.status() or {}

    @router.post("/seed", status_code=202,
                 summary="Seed this data centre from a peer's worker image")
    async def seed(body: SeedIn, request: Request) -> dict:
        guard.require(request, write=True)
        with refusal_as_http():
            progress = await control.seed(body.peer)
        return {"seeding": progress}

    return router
