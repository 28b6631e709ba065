"""HTTP of seeding a data centre from a peer's worker image (master_service/sync/seeding.py).

    POST /peer/seed                     {"peer": <requester node id>}: a seed point (JSON)
    GET  /peer/seed/{name}?peer=        its image, streamed; ``Range: bytes=N-`` resumes
    GET  /cluster/seed-image/{name}     (the cluster credential) the downloaded image, for
                                        this data centre's worker that installs it

The peer routes take the peer credential, like every peer call, but not only from
configured peers: a data centre that is about to join is seeded before the others add it
as a peer (it must not take part in agreement before it holds their state), and the
credential is the cluster's membership. A master that never peered starts peering when
asked for a seed (alone until peers are added: its writes are agreed by itself), so that
its state is an agreed position. Refusals are 403 and logged; a donor that cannot
make a seed now answers 503 with the reason (the recipient asks again).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    StreamingResponse,
)

from master_service.sync import wire
from master_service.sync.peering import Peering
from master_service.sync.seeding import CHUNK, SeedImages, SeedingFailed
from txinfra import jsonbody
from txinfra.auth import Verifier
from txinfra.http_auth import require_credential

log = logging.getLogger("txcluster.peer")

_RANGE = re.compile(r"bytes=(\d{1,15})-")
_NODE_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
PASSED_ON = ("content-length", "content-range", "x-image-sha256", "x-image-seq",
             "x-image-fingerprint", "x-image-quads", "x-image-offset")


def seeding_router(peering: Peering, peer_verifier: Verifier,
                   cluster_verifier: Verifier) -> APIRouter:
    """The donor's routes over ``peering.images`` (while it peers), the recipient's over
    ``peering.seeding``."""
    router = APIRouter(tags=["peer"])

    def donor() -> SeedImages:
        d = peering.images if peering.driver is not None else None
        if d is None:
            raise HTTPException(404, "this master has no sync peers (peer.<n>.id)")
        return d

    @router.post("/peer/seed", summary="A seed point: a worker image of an agreed position")
    async def make_seed(request: Request) -> Response:
        await require_credential(request, peer_verifier, "peer seed request")
        try:
            body = jsonbody.parse(await request.body())
        except ValueError as exc:
            raise HTTPException(400, f"the body is not valid JSON: {exc}") from None
        requester = body.get("peer") if isinstance(body, dict) else None
        if not isinstance(requester, str) or not _NODE_ID.fullmatch(requester):
            raise HTTPException(400, "the body must be {\"peer\": <node id of the "
                                     "requesting master>}")
        s = peering.seeding
        if s is not None and s.running:
            raise HTTPException(503, "this data centre is being seeded itself")
        # A master that never peered starts peering (with no peer yet: its writes are
        # agreed alone) so that its state is an agreed position a joiner can start from.
        await peering.start_if_needed()
        try:
            point = await donor().make(requester)
        except SeedingFailed as exc:
            raise HTTPException(503, str(exc)) from None
        return JSONResponse(wire.seed_to_json(point))

    @router.get("/peer/seed/{name}", summary="A seed image, streamed (Range resumes it)")
    async def seed_image(name: str, request: Request, peer: str = "") -> Response:
        await require_credential(request, peer_verifier, "peer seed image fetch")
        start = 0
        if (text := request.headers.get("range")) is not None:
            m = _RANGE.fullmatch(text.strip())
            if m is None:
                raise HTTPException(416, f"only 'Range: bytes=N-' is served, got '{text}'")
            start = int(m.group(1))
        try:
            stream = donor().open(name, start)
        except KeyError as exc:
            raise HTTPException(404, str(exc.args[0])) from None
        stack = contextlib.AsyncExitStack()
        try:
            resp = await stack.enter_async_context(stream)
        except Exception as exc:
            raise HTTPException(503, f"the worker holding '{name}' did not answer: {exc}") \
                from None
        if resp.status not in (200, 206):
            text = (await resp.read()).decode(errors="replace")[:300]
            await stack.aclose()
            raise HTTPException(502 if resp.status != 416 else 416,
                                f"the worker holding '{name}' answered {resp.status}: {text}")

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_chunked(CHUNK):
                    yield chunk
            finally:
                await stack.aclose()

        headers = {k: resp.headers[k] for k in PASSED_ON if k in resp.headers}
        log.info("peer %s fetches seed image '%s' from byte %d", peer or "?", name, start)
        return StreamingResponse(body(), status_code=resp.status, headers=headers,
                                 media_type="application/octet-stream")

    @router.get("/peer/seed/{name}/sha256", summary="A seed image's SHA-256, once written")
    async def seed_checksum(name: str, request: Request) -> Response:
        """{"sha256", "bytes"} of an image streamed while it was written (its seed point
        announced neither): waits until the donor's worker finished it."""
        await require_credential(request, peer_verifier, "peer seed checksum")
        try:
            sha, size = await donor().checksum(name)
        except KeyError as exc:
            raise HTTPException(404, str(exc.args[0])) from None
        except SeedingFailed as exc:
            raise HTTPException(503, str(exc)) from None
        return JSONResponse({"sha256": sha, "bytes": size})

    @router.get("/cluster/seed-image/{name}", include_in_schema=False)
    async def local_image(name: str, request: Request) -> Any:
        """The downloaded image, for the worker that installs it (its pull is signed with
        the cluster credential, as between workers)."""
        await require_credential(request, cluster_verifier, "seed image pull")
        s = peering.seeding
        path = s.image_path(name) if s is not None and _NODE_ID.fullmatch(name) else None
        if path is None and s is not None and (live := s.following(name)) is not None:
            # Still downloading: served as it arrives (the worker checks the SHA-256).
            total, sha256 = live
            # A streamed donor's image has no SHA-256 yet: the worker asks for it once
            # the body ended (worker_service/api/control.py, pull).
            headers = {"X-Image-Sha256": sha256, "content-length": str(total)} \
                if sha256 is not None and total is not None \
                else {"X-Image-Sha256-Location": f"{name}/sha256"}
            return StreamingResponse(s.follow(name), media_type="application/octet-stream",
                                     headers=headers)
        if path is None:
            raise HTTPException(404, f"no downloaded seed image named '{name}'")
        sha = (path.parent / f"{name}.image.sha256")
        return FileResponse(path, media_type="application/octet-stream",
                            headers={"X-Image-Sha256": sha.read_text().strip()})

    @router.get("/cluster/seed-image/{name}/sha256", include_in_schema=False)
    async def local_image_checksum(name: str, request: Request) -> Any:
        """The SHA-256 of the image ``name`` once its download is complete and checked
        (text; the worker that pulled it while it downloaded compares)."""
        await require_credential(request, cluster_verifier, "seed image checksum")
        s = peering.seeding
        if s is not None and _NODE_ID.fullmatch(name) and \
                (path := s.image_path(name)) is not None:
            return PlainTextResponse((path.parent / f"{name}.image.sha256").read_text())
        if s is None:
            raise HTTPException(404, f"no seed image named '{name}'")
        try:
            return PlainTextResponse(await s.checked_sha256(name))
        except SeedingFailed as exc:
            raise HTTPException(502, str(exc)) from None

    return router
