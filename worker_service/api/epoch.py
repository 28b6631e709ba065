"""The write epoch on a worker's HTTP API (docs/design/failover.md, worker_service/promise.py).

    POST /cluster/epoch   {"epoch": int, "candidate": str, "manual": bool}: a master asks
                          for a write epoch (AskGrant); the answer is the worker's
                          verdict {"granted", "kind", "promised", "holder"}, 200 either way

And the fence, ``EpochFence``: every request that changes this worker may carry
``X-Write-Epoch: <int>`` (absent: 0, what a single master that never asks for a grant
sends) and ``X-Write-Master: <id>`` (the master sending it, which becomes the holder of a
newer epoch). A change of an epoch older than the one promised is refused with 409,
changing nothing; one of a newer epoch raises the promise (on disk first). Checked in one
place, an ASGI middleware around the whole application: the hot routes (HotPaths) pass
there too, and a route added later is a change unless ``READS`` says otherwise.

The epoch is not part of what the cluster credential signs (txinfra/auth.py signs method,
Host, path and body), so it is acted on only for a request whose credential holds: a
request that is not signed goes to its route unchanged, which refuses it (403) as before.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from rdf4j_protocol.routes import REPOSITORY_PREFIX
from txinfra.auth import Verifier
from txinfra.http_auth import credential_problem, require_credential
from worker_service import epochs
from worker_service.api.control import json_body
from worker_service.promise import Promise, refusal

EPOCH_HEADER = b"x-write-epoch"
MASTER_HEADER = b"x-write-master"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The requests other than GET/HEAD/OPTIONS that change nothing: a recomputation of the
# fingerprint, a read inside one of the master's transactions, the grant itself (checked
# by its own rule).
READS = frozenset({("POST", "/cluster/verify"), ("POST", "/cluster/transaction-read"),
                   ("POST", "/cluster/epoch")})


def changes(method: str, path: str) -> bool:
    """Whether a request may change this worker (its store, its state, its images): any
    call of the cluster-control API or the RDF4J API but their reads. A repository's own
    URL takes queries (GET and POST); every step of an RDF4J transaction counts, as the
    transaction does."""
    if method in READ_METHODS or (method, path) in READS:
        return False
    if path.startswith(REPOSITORY_PREFIX):
        return method != "POST" or "/" in path[len(REPOSITORY_PREFIX):].rstrip("/")
    return path.startswith("/cluster/")


def write_epoch(headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None:
    """(epoch, master) of a request's raw headers; (0, "") without them; None when the
    epoch is not a non-negative integer."""
    epoch, master = 0, ""
    for name, value in headers:
        if name == EPOCH_HEADER:
            if not (value.isdigit() and len(value) <= 18):
                return None
            epoch = int(value)
        elif name == MASTER_HEADER:
            master = value.decode("latin-1").strip()
    return epoch, master


class EpochFence:
    """ASGI middleware: the fence over every change (module docstring)."""

    def __init__(self, app: Callable, promise: Promise, verifier: Verifier) -> None:
        self.app = app
        self.promise = promise
        self.verifier = verifier

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not changes(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        found = write_epoch(scope["headers"])
        if found is None:
            await JSONResponse({"detail": "X-Write-Epoch must be a non-negative integer"},
                               400)(scope, receive, send)
            return
        epoch, master = found
        promise = self.promise
        if epoch != promise.promised:  # rare: a new primary's first change, or a deposed one
            sent, body = receive, await _body(receive)
            receive = _replaying(body, sent)
            if await credential_problem(Request(scope, _replaying(body, sent)),
                                        self.verifier, remember=False) is not None:
                await self.app(scope, receive, send)  # its route refuses it (403)
                return
            refused = await promise.seen(epoch, master)
            if refused is not None:
                await _refused(scope, refusal(epoch, refused))(scope, receive, send)
                return
        promise.enter(epoch)
        try:
            await self.app(scope, receive, _heard(send, promise) if epoch else send)
        finally:
            promise.leave(epoch)


def _refused(scope: dict, message: str) -> Response:
    """409 as the route would answer: JSON on the cluster-control API, plain text (what
    RDF4J clients show) on the RDF4J API."""
    if scope["path"].startswith(REPOSITORY_PREFIX):
        return PlainTextResponse(message, 409)
    return JSONResponse({"detail": message}, 409)


def _heard(send: Callable, promise: Promise) -> Callable:
    """``send`` noting the holder as heard once its change is answered 2xx (a refused
    request, unsigned say, does not hold the lease)."""
    async def sending(message: dict) -> None:
        if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
            promise.heard()
        await send(message)
    return sending


async def _body(receive: Callable) -> bytes:
    """The request's body, read whole (the credential signs it)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Callable) -> Callable:
    """``receive`` giving ``body`` (already read) again, then what follows."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def epoch_router(promise: Promise, verifier: Verifier) -> APIRouter:
    router = APIRouter(prefix="/cluster")

    @router.post("/epoch")
    async def ask_grant(request: Request):
        """AskGrant: granted only for an epoch newer than every one granted or seen here
        and, unless ``manual`` (an operator's ReadOnly=false), while the holder of the
        current one has not changed this worker for ``epoch-grant-lease-ms``
        (epochs.ask_grant). A granted epoch is on disk before the answer."""
        await require_credential(request, verifier, "cluster-control call refused")
        data = await json_body(request)
        epoch, candidate, manual = data.get("epoch"), data.get("candidate"), \
            data.get("manual", False)
        if type(epoch) is not int or epoch < 1:
            raise HTTPException(400, "field 'epoch' must be an integer >= 1")
        if not isinstance(candidate, str) or not candidate.strip():
            raise HTTPException(400, "field 'candidate' must be a non-empty string "
                                     "(the master's id)")
        if not isinstance(manual, bool):
            raise HTTPException(400, "field 'manual' must be true or false")
        verdict = await promise.ask_grant(epoch, candidate, manual)
        return {"granted": verdict.kind == epochs.GRANTED, "kind": verdict.kind,
                "promised": verdict.promised, "holder": verdict.holder}

    return router
