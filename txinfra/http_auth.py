"""FastAPI side of the cluster credential (see txinfra.auth for the scheme)."""

from __future__ import annotations

import logging

from fastapi import HTTPException, Request

from txinfra.auth import Verifier

log = logging.getLogger("txinfra.auth")


async def credential_problem(request: Request, verifier: Verifier,
                             remember: bool = True) -> str | None:
    """None if the request carries a valid cluster credential, else why not;
    ``remember=False``: its nonce is not remembered, so its route can check it again."""
    body = await request.body()  # cached by Starlette: handlers can read it again
    # What the sender signed (auth.signed_target): the path as decoded (ASGI's path, not
    # request.url's, which re-escapes '?', '#' and '\\' in it) and the query as sent.
    scope = request.scope
    query = scope.get("query_string", b"")
    target = scope["path"] + (f"?{query.decode()}" if query else "")
    # The Host header as received: the credential is bound to the node it was sent to.
    return verifier.check(request.headers.get("authorization"), request.method,
                          request.headers.get("host"), target, body, remember)


async def require_credential(request: Request, verifier: Verifier, what: str) -> None:
    """Raise 403 with a clear message unless the request is signed by the master."""
    problem = await credential_problem(request, verifier)
    if problem is not None:
        client = request.client.host if request.client else "?"
        log.warning("refused %s %s from %s: %s", request.method, request.url.path, client, problem)
        raise HTTPException(status_code=403, detail=f"{what}: {problem}")
