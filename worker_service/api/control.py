"""Cluster-control API of a worker: only its master (cluster credential) may call it.

    GET  /cluster/state              seq, txid, fingerprint, quads, size on disk, status
    GET  /cluster/journal?after=&limit=  the transactions executed here as probe after a seq
                                     (a master's roll-forward after its crash)
    POST /cluster/execute            probe: exact changeset + control queries
    POST /cluster/apply              apply a changeset with the expected fingerprint
    POST /cluster/verify             full recomputation of the fingerprint
    GET  /cluster/image              stream a storage image while it is written, shared by
                                     the requests that come meanwhile (tar + snappy
                                     framing; a plain tar with ?compression=false)
    GET  /cluster/image/{id}/sha256  its SHA-256, once written
    POST /cluster/image/pull         fetch an image from another worker and swap it in
    GET  /cluster/backups            list named images
    POST /cluster/backups/{name}     write a named image (?compression=false: a plain tar)
    GET  /cluster/backups/{name}     stream a named image
    POST /cluster/restore            {"name": ...} or {"source": url}: install an image
    PUT  /cluster/bulk-load/{id}/parts/{n}, POST|DELETE /cluster/bulk-load/{id}
                                     initial bulk load of an empty worker (bulk_load.py)

Every call that changes the worker passes the write-epoch fence first, and POST
/cluster/epoch grants an epoch (api/epoch.py, docs/design/failover.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import (
    FileResponse,
    PlainTextResponse,
    StreamingResponse,
)
from starlette.concurrency import run_in_threadpool

from rdf4j_protocol.routes import HotRoutes, answered
from rdfcore import fingerprint
from rdfcore.changeset import Changeset, added_text
from txinfra import growing_file, jsonbody
from txinfra.auth import Verifier
from txinfra.http_auth import require_credential
from txinfra.properties import is_backup_name
from txinfra.signed_session import SignedSession
from worker_service import backups, image
from worker_service.bulk_load import PARTS_AT_ONCE, BulkLoader
from worker_service.forwarded import ApplyEntry
from worker_service.image import ImageError
from worker_service.journal import NotHeld
from worker_service.repository import Repository, WorkerError
from worker_service.shared_images import SharedImage, SharedImages

log = logging.getLogger("txcluster.worker")

IMAGE_HEADERS = ("sha256", "seq", "fingerprint", "quads")

# The largest body of POST /cluster/apply or /cluster/execute that is written on the event
# loop (``apply``, ``execute``): ~200 lines of N-Quads, well under a millisecond of work,
# about what a group of 16 ten-triple writes sends.
INLINE_WRITE_BYTES = 32 * 1024


def state_json(repo: Repository) -> dict:
    st = repo.state()
    return {
        "repository": repo.id,
        "seq": st.seq,
        "txid": st.txid,
        "fingerprint": fingerprint.to_hex(st.fingerprint),
        "quads": st.quads,
        "size_bytes": repo.size_on_disk(),
        "status": repo.activity,
    }


async def json_body(request: Request) -> dict:
    try:
        data = jsonbody.parse(await request.body() or b"{}")  # deep nesting: not a 500
    except ValueError as exc:
        raise HTTPException(400, f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HTTPException(400, "request body must be a JSON object")
    return data


def _field(data: dict, name: str, kind: type, optional: bool = False):
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise HTTPException(400, f"field '{name}' must be a {kind.__name__}")
    return value


def _apply_entries(items: list) -> list[ApplyEntry]:
    """The entries of POST /cluster/apply; HTTPException 400 saying which is wrong. An
    addition that comes with its expected fingerprint is kept as its text
    (changeset.added_text): the worker loads it without building a changeset of it, the
    fingerprint of its lines having shown it is the probe's text."""
    entries = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise HTTPException(400, f"entry {i} must be a JSON object")
        expected = _field(item, "expected_fingerprint", str, optional=True)
        wire = _field(item, "changeset", dict)
        try:
            seq, txid = _field(item, "seq", int), _field(item, "txid", str)
            fp = fingerprint.from_hex(expected) if expected is not None else None
            text = added_text(wire) if fp is not None else None
            if text is None:
                entries.append(ApplyEntry(seq, txid, Changeset.from_wire(wire), fp, wire))
                continue
            # Its other parts (namespaces) checked as any changeset's.
            rest = Changeset.from_wire({**wire, "added": ""})
            entries.append(ApplyEntry(seq, txid, rest, fp, wire, text,
                                      sum(1 for line in text.split("\n") if line)))
        except ValueError as exc:
            raise HTTPException(400, f"entry {i}: {exc}") from None
    return entries


def _query_int(request: Request, name: str, default: int | None, low: int,
               high: int | None) -> int:
    """An integer query parameter, read after the credential was checked (FastAPI's
    Query() would validate before the handler, answering strangers with 422s)."""
    text = request.query_params.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int(text) if text is not None and text.isdecimal() else None
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        value = None
    if value is None or value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise HTTPException(400, f"query parameter '{name}' must be an integer {bounds}")
    return value


def _state_summary(st) -> dict:
    return {"seq": st.seq, "fingerprint": fingerprint.to_hex(st.fingerprint), "quads": st.quads}


def _backup_name(name: str) -> str:
    if not is_backup_name(name):
        raise HTTPException(400, f"'{name}' is not a valid backup name")
    return name


_RANGE = re.compile(r"bytes=(\d{1,15})-")


def _range_start(request: Request) -> int:
    text = request.headers.get("range")
    if text is None:
        return 0
    m = _RANGE.fullmatch(text.strip())
    if m is None:
        raise HTTPException(416, f"only 'Range: bytes=N-' is served here, got '{text}'")
    return int(m.group(1))


def _follow(w: backups.Writing, start: int) -> AsyncIterator[bytes]:
    """The image ``w`` from byte ``start`` as it is written, to its end (its path moves
    into data-dir/backups/ when done: looked up again until open)."""
    return growing_file.follow(growing_file.opener(lambda: w.path), lambda: w.written,
                               w.done.is_set, lambda: w.error, start)


def _compression(request: Request) -> bool:
    """Whether an image this request asks for is snappy-framed: yes unless its master
    switched replication compression off (?compression=false)."""
    text = request.query_params.get("compression", "true")
    if text not in ("true", "false"):
        raise HTTPException(400, f"query parameter 'compression' must be true or false, "
                                 f"got '{text}'")
    return text == "true"


def _image_response(path: Path, manifest: dict) -> FileResponse:
    headers = {f"X-Image-{k.capitalize()}": str(manifest[k]) for k in IMAGE_HEADERS}
    return FileResponse(path, media_type="application/x-snappy-framed", headers=headers)


def _written_image_headers(w: backups.Writing, sha256_location: str) -> dict[str, str]:
    """The headers of an image streamed while it is written: its state, and where to ask
    for its SHA-256 (relative to the image's URL) once the body has ended."""
    headers = {f"X-Image-{k.capitalize()}": str((w.state or {})[k])
               for k in IMAGE_HEADERS if k != "sha256"}
    headers["X-Image-Sha256-Location"] = sha256_location
    return headers


def control_router(repo_provider: Callable[[], Repository], verifier: Verifier,
                   secret: bytes, client_tls: ssl.SSLContext | None = None,
                   hot: HotRoutes | None = None) -> APIRouter:
    """``client_tls`` verifies an https image source (tls-ca-file); None: system CAs;
    ``hot``: where apply and execute are declared hot (routes.HotPaths)."""
    router = APIRouter(prefix="/cluster")

    async def guard(request: Request) -> Repository:
        await require_credential(request, verifier, "cluster-control call refused")
        return repo_provider()

    def fail(exc: Exception) -> HTTPException:
        status = getattr(exc, "status", 400)
        return HTTPException(status, str(exc))

    @router.get("/state")
    async def get_state(request: Request):
        repo = await guard(request)
        return await run_in_threadpool(state_json, repo)

    @router.post("/execute")
    async def execute(request: Request):
        """Probe execution of a group of transactions: {"start_seq": n, "transactions":
        [{"txid", "operations", "timestamp"}], "control_queries": [ASK...]}. Each
        transaction succeeds (with its seq, exact changeset and fingerprint after) or fails
        alone. ``timestamp`` (optional, integer milliseconds since the epoch): the
        transaction's agreed timestamp, NOW()'s value; without it (an older master) this
        worker's clock is used (worker_service/determinism.py)."""
        repo = await guard(request)
        from worker_service.operations import bounded_by_text
        from worker_service.transaction import TransactionError
        from worker_service.wire_parsing import parse_operations

        data = await json_body(request)
        start_seq = _field(data, "start_seq", int)
        controls = data.get("control_queries") or []
        if not isinstance(controls, list) or not all(isinstance(q, str) for q in controls):
            raise HTTPException(400, "field 'control_queries' must be a list of strings")
        txs = _field(data, "transactions", list)
        parsed: list = []
        for i, tx in enumerate(txs):
            if not isinstance(tx, dict) or not isinstance(tx.get("txid"), str) \
                    or not tx["txid"]:  # its blank nodes are minted from it
                raise HTTPException(400, f"transaction {i} needs a non-empty string 'txid'")
            when = tx.get("timestamp")
            if when is not None and (type(when) is not int or not 0 <= when < 2**62):
                raise HTTPException(400, f"transaction {i}: 'timestamp' must be integer "
                                         f"milliseconds since the epoch, got {when!r}")
            try:
                parsed.append((tx["txid"], parse_operations(tx.get("operations")), when))
            except TransactionError as exc:
                # Refused before anything runs, the others go on; passed in its place so
                # that the executed journal keeps the refusal in order.
                parsed.append((tx["txid"], exc, when))
        # On the event loop when the group is small, only data and the write lock free
        # now (as ``apply`` below); control queries and every other operation may take
        # long whatever their size, so they go to the thread pool.
        inline = (len(await request.body()) <= INLINE_WRITE_BYTES and not repo.syncs_writes
                  and not controls and all(isinstance(ops, Exception) or bounded_by_text(ops)
                                           for _, ops, _ in parsed))
        try:
            outcomes = repo.execute_batch(start_seq, parsed, controls, wait=False) \
                if inline else None
            if outcomes is None:
                outcomes = await run_in_threadpool(repo.execute_batch, start_seq, parsed,
                                                   controls)
        except WorkerError as exc:
            raise fail(exc) from None
        results: list[dict] = []
        for tx, outcome in zip(txs, outcomes, strict=True):
            if isinstance(outcome, Exception):
                results.append({"txid": tx["txid"], "ok": False,
                                "status": getattr(outcome, "status", 400),
                                "error": str(outcome)})
            else:
                results.append({"txid": tx["txid"], "ok": True,
                                "changeset": outcome.wire or outcome.changeset.to_wire(),
                                **_state_summary(outcome.state),
                                "duration_s": outcome.duration_s})
        return jsonbody.JSONAnswer({"results": results,
                                    "state": _state_summary(repo.state())})

    @router.get("/journal")
    async def get_journal(request: Request):
        """The transactions this worker executed as probe after seq ``after`` (at most
        ``limit``, default 1000): {"seq", "fingerprint", "quads" (its state now),
        "entries": [{"seq", "txid", "changeset", "fingerprint", "quads", "duration_s"}],
        "refused": [{"txid", "after", "status", "error"}]}; the changesets in the form
        /cluster/apply takes. 410 when the journal does not hold one of those entries any
        more (rotated, a new image since, or they were applied here, not executed)."""
        repo = await guard(request)
        after = _query_int(request, "after", None, 0, None)
        limit = _query_int(request, "limit", 1000, 1, 10_000)

        def read() -> dict:
            with repo.reading():  # the state and the records of the same moment
                st = repo.state()
                entries, refused = repo.executed.after(after, limit, st.seq)
            return {**_state_summary(st), "entries": entries, "refused": refused}

        try:
            return await run_in_threadpool(read)
        except NotHeld as exc:
            raise HTTPException(410, str(exc)) from None

    @router.post("/apply")
    async def apply(request: Request):
        """Apply changesets in order: {"entries": [{"seq", "txid", "changeset",
        "expected_fingerprint"}]}; refused as a whole (409) when they don't fit."""
        repo = await guard(request)
        data = await json_body(request)
        body = await request.body()
        items = _field(data, "entries", list)
        # A small group is applied on the event loop, if the write lock is free now: the
        # two hops to the thread pool and back cost the worker more than applying it
        # (bench/README.md, "A forwarded group without thread hops"). A large one goes to
        # the pool: parsing a large changeset held the loop for ~0.2 s per 100,000 quads.
        # So does every write with sync-writes on (its fsyncs).
        inline = len(body) <= INLINE_WRITE_BYTES and not repo.syncs_writes
        try:
            entries = (_apply_entries(items) if inline
                       else await run_in_threadpool(_apply_entries, items))
            results = repo.apply_batch(entries, body, wait=False) if inline else None
            if results is None:
                results = await run_in_threadpool(repo.apply_batch, entries, body)
        except WorkerError as exc:
            raise fail(exc) from None
        return {"applied": len(results), **_state_summary(repo.state()),
                "duration_s": sum(r.duration_s for r in results)}

    # A worker's most frequent requests under writes (one per group): past FastAPI's
    # router, as a master's peer messages are (routes.HotPaths).
    if hot is not None:
        hot.add("/cluster/apply", answered(apply), ("POST",))
        hot.add("/cluster/execute", answered(execute), ("POST",))

    @router.post("/verify")
    async def verify(request: Request):
        repo = await guard(request)
        return await run_in_threadpool(repo.verify)

    # The images of GET /image, one for every receiver that asks while it is written.
    images = SharedImages(repo_provider)

    @router.get("/image")
    async def get_image(request: Request):
        """A storage image of the current state, streamed while it is written; a request
        that comes meanwhile gets the same image (shared_images.py). Its SHA-256 is at
        ``X-Image-Sha256-Location`` once the body has ended."""
        await guard(request)
        compress = _compression(request)
        try:
            shared = await run_in_threadpool(images.join, compress)
        except WorkerError as exc:
            raise fail(exc) from None
        headers = _written_image_headers(shared.writing, f"image/{shared.id}/sha256")
        return StreamingResponse(read_shared(shared), headers=headers,
                                 media_type="application/x-snappy-framed")

    async def read_shared(shared: SharedImage) -> AsyncIterator[bytes]:
        # Left in a finally, not a background task: that one is skipped when the image's
        # writing fails mid-stream, and the file would stay behind.
        try:
            async for chunk in _follow(shared.writing, 0):
                yield chunk
        finally:
            images.leave(shared)

    @router.get("/image/{image_id}/sha256")
    async def image_sha256(image_id: str, request: Request):
        """The SHA-256 of an image of GET /image, once written (waits for it): text,
        with its length in ``X-Image-Bytes``."""
        await guard(request)
        found = await run_in_threadpool(images.checksum, image_id)
        if found is None:
            raise HTTPException(404, f"no storage image '{image_id}' here (or not any "
                                     "more)")
        sha, size, error = found
        if error is not None or sha is None:
            raise HTTPException(500, f"storage image '{image_id}' failed: {error}")
        return PlainTextResponse(sha, headers={"X-Image-Bytes": str(size)})

    async def pull(repo: Repository, source: str) -> dict:
        """Fetch an image and unpack it *as it arrives* (Repository.install_image_stream),
        swapped in once its SHA-256 holds. The source announces the SHA-256 up front
        (``X-Image-Sha256``) or, when it streams an image still being written (a seed
        image: master_service/sync/seeding.py), where to ask for it once the body ended
        (``X-Image-Sha256-Location``, relative to the source)."""
        if not re.fullmatch(r"https?://\S+", source):
            raise HTTPException(400, f"'{source}' is not an http(s) URL")
        feed = image.Feed()
        began = time.monotonic()
        sha: concurrent.futures.Future[str] = concurrent.futures.Future()
        install = asyncio.ensure_future(
            run_in_threadpool(repo.install_image_stream, feed, sha.result))
        # aiohttp reads the body for a sixth of httpx's CPU (160 MB: 0.08 against 0.55
        # CPU-s; bench/README.md, "a storage image's copies"), as the master's and the
        # seeding's image reads do (txinfra/signed_session.py).
        http = SignedSession(secret, timeout=3600, tls=client_tls)
        try:
            async with http.stream(source, {}, read_timeout=60) as resp:
                if resp.status != 200:
                    body = (await resp.read()).decode(errors="replace")[:500]
                    raise HTTPException(502, f"image source answered {resp.status}: {body}")
                announced = resp.headers.get("x-image-sha256")
                later = resp.headers.get("x-image-sha256-location")
                if not announced and not later:
                    raise HTTPException(502, "image source sent no X-Image-Sha256 header")
                async for chunk in resp.content.iter_chunked(1 << 20):
                    if install.done():
                        break  # it failed: its error is the answer (below)
                    await feed.put(chunk, install)
            await feed.end(install)
            if not announced and not install.done():
                where = urljoin(source, later)
                if urlsplit(where)[:2] != urlsplit(source)[:2]:
                    # Signed with the cluster credential: only to the source itself.
                    raise HTTPException(502, f"image source named another origin for "
                                             f"its SHA-256: '{later}'")
                try:
                    status, answer = await http.request("GET", where, timeout=3600)
                except OSError as exc:  # the pool's own connection errors (not aiohttp's)
                    raise HTTPException(502, f"cannot fetch the SHA-256 of the image of "
                                             f"{source}: {exc}") from None
                text = answer.decode(errors="replace")
                if status != 200:
                    raise HTTPException(502, f"image source answered {status} "
                                             f"for the image's SHA-256: {text[:300]}")
                announced = text.strip()
            sha.set_result(announced or "")
            new_state = await install
            log.info("pulled and installed the image of %s in %.2f s", source,
                     time.monotonic() - began)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise HTTPException(502, f"cannot fetch image from {source}: "
                                     f"{str(exc) or type(exc).__name__}") from None
        except ImageError as exc:
            raise HTTPException(422, str(exc)) from None
        finally:
            if not install.done():
                feed.fail(ConnectionError("the transfer was cut"))
                if not sha.done():
                    sha.set_exception(ImageError("the image's transfer was cut"))
                with contextlib.suppress(Exception):
                    await install
            await http.close()
        return _state_summary(new_state)

    @router.post("/image/pull")
    async def image_pull(request: Request):
        repo = await guard(request)
        data = await json_body(request)
        return await pull(repo, _field(data, "source", str))

    @router.get("/backups")
    async def list_backups(request: Request):
        repo = await guard(request)
        out = []
        if backups.backups_dir(repo).is_dir():
            for manifest in sorted(backups.backups_dir(repo).glob("*/manifest.json")):
                out.append(json.loads(manifest.read_text()))
        return out

    # Named images being written (?stream=true), by name: the newest of each name.
    writing: dict[str, backups.Writing] = {}

    @router.post("/backups/{name}")
    async def make_backup(name: str, request: Request):
        """Write a named image; with ?stream=true, answer its state as soon as its
        checkpoint is made (sha256 and bytes null): it can be read while it is written
        (GET /cluster/backups/<name>), its SHA-256 follows (.../sha256)."""
        repo = await guard(request)
        name, compress = _backup_name(name), _compression(request)
        if request.query_params.get("stream", "false") != "true":
            return await run_in_threadpool(backups.backup, repo, name, compress)
        try:
            w = await run_in_threadpool(backups.start, repo, name, compress)
        except WorkerError as exc:
            raise fail(exc) from None
        writing[name] = w
        return {**(w.state or {}), "name": name, "sha256": None, "bytes": None}

    @router.get("/backups/{name}")
    async def get_backup(name: str, request: Request):
        """A named image; one still being written is streamed as it grows, from byte N
        with ``Range: bytes=N-`` (answered 200 with ``X-Image-Offset: N``: its length is
        not known yet, so there is no Content-Range to give)."""
        repo = await guard(request)
        name = _backup_name(name)
        w = writing.get(name)
        if w is not None and not w.done.is_set():
            start = _range_start(request)
            headers = _written_image_headers(w, f"{name}/sha256")
            headers["X-Image-Offset"] = str(start)
            return StreamingResponse(_follow(w, start), headers=headers,
                                     media_type="application/x-snappy-framed")
        folder = backups.backups_dir(repo) / name
        if not (folder / "manifest.json").is_file():
            raise HTTPException(404, f"no backup named '{name}'")
        manifest = json.loads((folder / "manifest.json").read_text())
        return _image_response(folder / "image.tar.sz", manifest)

    @router.get("/backups/{name}/sha256")
    async def backup_sha256(name: str, request: Request):
        """The SHA-256 of a named image, once it is written (waits for it): text, with
        its length in ``X-Image-Bytes``."""
        repo = await guard(request)
        name = _backup_name(name)
        w = writing.get(name)
        if w is not None:
            await run_in_threadpool(w.done.wait, 3600)
            if w.error is not None or w.sha256 is None:
                raise HTTPException(500, f"backup '{name}' failed: {w.error}")
            sha, size = w.sha256, w.bytes
        else:
            path = backups.backups_dir(repo) / name / "manifest.json"
            if not path.is_file():
                raise HTTPException(404, f"no backup named '{name}'")
            manifest = json.loads(path.read_text())
            sha, size = manifest["sha256"], manifest["bytes"]
        return PlainTextResponse(sha, headers={"X-Image-Bytes": str(size)})

    @router.post("/restore")
    async def restore(request: Request):
        repo = await guard(request)
        data = await json_body(request)
        if "source" in data:
            return await pull(repo, _field(data, "source", str))
        name = _backup_name(_field(data, "name", str))
        folder = backups.backups_dir(repo) / name
        if not (folder / "manifest.json").is_file():
            raise HTTPException(404, f"no backup named '{name}'")
        manifest = json.loads((folder / "manifest.json").read_text())
        try:
            new_state = await run_in_threadpool(
                repo.install_image, folder / "image.tar.sz", manifest["sha256"])
        except ImageError as exc:
            raise HTTPException(422, str(exc)) from None
        return _state_summary(new_state)

    # ---- initial bulk load (txcluster load --initial; the master forwards the calls) ----

    bulk = BulkLoader()
    parts_at_once = asyncio.Semaphore(PARTS_AT_ONCE)

    @router.put("/bulk-load/{load_id}/parts/{part}")
    async def bulk_load_part(load_id: str, part: int, request: Request):
        """Stage one part (N-Quads body) of a bulk load: any number; a number sent again
        is taken once if its quads are the same, and refused otherwise."""
        repo = await guard(request)
        async with parts_at_once:
            body = await request.body()
            try:
                return await run_in_threadpool(bulk.add_part, repo, load_id, part, body)
            except WorkerError as exc:
                raise fail(exc) from None

    @router.post("/bulk-load/{load_id}/sent")
    async def bulk_load_sent(load_id: str, request: Request):
        """Every part is sent: the waiting ones start loading."""
        await guard(request)
        try:
            return await run_in_threadpool(bulk.sent, load_id)
        except WorkerError as exc:
            raise fail(exc) from None

    @router.post("/bulk-load/{load_id}")
    async def bulk_load_commit(load_id: str, request: Request):
        """{"fingerprint", "quads"}: install the staged data if it is exactly that."""
        repo = await guard(request)
        data = await json_body(request)
        try:
            expected = fingerprint.from_hex(_field(data, "fingerprint", str))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        try:
            new_state = await run_in_threadpool(bulk.commit, repo, load_id, expected,
                                                _field(data, "quads", int))
        except WorkerError as exc:
            raise fail(exc) from None
        return _state_summary(new_state)

    @router.delete("/bulk-load/{load_id}")
    async def bulk_load_abort(load_id: str, request: Request):
        await guard(request)
        try:
            await run_in_threadpool(bulk.abort, load_id)
        except WorkerError as exc:
            raise fail(exc) from None
        return {"aborted": load_id}

    return router
