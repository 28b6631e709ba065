"""The peer API: what masters of other data centres call (TxLog sync protocol).

    POST /peer/status                   a round's status (+ the sender's executed position,
                                        and tail segments of its own to take before it)
    POST /peer/tail                     a tail segment for a lagger
    GET  /peer/transactions/{txid}      a transaction's payload (?peer=<requesting node id>)

Every request must carry the peer credential (txinfra/auth.py: HMAC over the request
with a time window and a nonce, so a captured message can't be replayed) and come from a
configured peer (peer.<n>.id): anything else is refused with 403 and logged, and changes
nothing. A malformed message is a 400 naming the rule it breaks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

from master_service.errors import NotWritable
from master_service.sync.messages import InvalidMessage
from master_service.sync.ready import UnknownPeer
from master_service.sync.transport import TAKES_HEADER, TAKES_TAILS
from rdf4j_protocol.routes import HotRoutes, answered
from txinfra import jsonbody
from txinfra.auth import Verifier
from txinfra.http_auth import require_credential

log = logging.getLogger("txcluster.peer")


def peer_router(driver_provider: Callable[[], Any], verifier: Verifier,
                hot: HotRoutes | None = None) -> APIRouter:
    """``hot``: where statuses and tail segments are declared hot (routes.HotPaths)."""
    router = APIRouter(prefix="/peer", tags=["peer"])

    def driver(request: Request) -> Any:
        d = driver_provider()
        if d is None:
            raise HTTPException(404, "this master has no sync peers (peer.<n>.id)")
        return d

    def refuse(request: Request, exc: Exception) -> HTTPException:
        client = request.client.host if request.client else "?"
        log.warning("refused %s %s from %s: %s", request.method, request.url.path, client, exc)
        return HTTPException(403, str(exc))

    async def message(request: Request) -> Any:
        try:
            return jsonbody.parse(await request.body())
        except ValueError as exc:
            raise HTTPException(400, f"the body is not valid JSON: {exc}") from None

    async def deliver(request: Request, what: str, call: Callable[[Any, Any], None],
                      headers: dict[str, str] | None = None) -> Response:
        await require_credential(request, verifier, f"peer {what}")
        d = driver(request)
        body = await message(request)
        try:
            call(d, body)
        except UnknownPeer as exc:
            raise refuse(request, exc) from None
        except InvalidMessage as exc:
            raise HTTPException(400, f"invalid {what}: {exc}") from None
        except NotWritable as exc:
            raise HTTPException(503, str(exc)) from None
        return Response(status_code=204, headers=headers)

    @router.post("/status", status_code=204, summary="A peer's round status")
    async def status(request: Request) -> Response:
        # We take the sender's tail segments in a status's request (transport.py).
        return await deliver(request, "status", lambda d, b: d.receive_status(b),
                             {TAKES_HEADER: TAKES_TAILS})

    @router.post("/tail", status_code=204, summary="A tail segment for a lagging master")
    async def tail(request: Request) -> Response:
        return await deliver(request, "tail segment", lambda d, b: d.receive_tail(b))

    # Statuses and tail segments are a peered master's most frequent requests (about one
    # per agreed transaction under load): past FastAPI's router each cost ~40 us of CPU
    # instead of 95-135 in-process (bench/README, "Agreed writes under load").
    if hot is not None:
        hot.add("/peer/status", answered(status), ("POST",))
        hot.add("/peer/tail", answered(tail), ("POST",))

    @router.get("/transactions/{txid}", summary="A transaction's payload, for acquisition")
    async def transaction(txid: str, peer: str, request: Request) -> Response:
        await require_credential(request, verifier, "peer transaction fetch")
        d = driver(request)
        try:
            payload = await run_in_threadpool(d.payload, txid, peer)
        except UnknownPeer as exc:
            raise refuse(request, exc) from None
        if payload is None:
            raise HTTPException(404, f"transaction {txid} is not held by this master")
        return Response(payload, media_type="application/json")

    return router
