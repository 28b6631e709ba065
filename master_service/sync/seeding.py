"""Seeding a data centre from a peer's worker image
(docs/design/sync-protocol.md#seeding-a-data-centre).

A master whose peers no longer hold what it needs (new, empty, wiped, or behind every
peer's floor: ``SyncNode.needs_seeding``) starts over from a peer's state instead of
replaying the agreed queue. Both sides are here; the HTTP routes are in
``master_service/api/seeding.py``.

*The donor* (``SeedImages``). ``POST /peer/seed``: one of its in-sync workers (not the
probe, when another can) writes a named image ``seed-<requester>``; the image pairs the
store with the worker's exact state, which is the state after some agreed position P of
the data centre's agreed queue (``SqliteStorage.position_of``: in a peered data centre
every transaction is an agreed one). With the core's seed point at P (the id of the entry
there, the hash chain up to it, the newest timestamp up to it) and the ids of the
entries agreed up to P that it still knows (``SqliteStorage.known_ids``) that makes the
``SeedPoint``. ``GET /peer/seed/<name>`` streams the image (a Range request resumes it).

*The recipient* (``Seeding``). With its sync driver stopped (writes are refused
meanwhile): asks the donor for a seed point; downloads the image into
``<data-dir>/seeding/`` — a cut download is resumed from the bytes it has, and the
SHA-256 (computed as the bytes arrive) is checked at the end; has every worker pull it
from this master at once (``GET /cluster/seed-image/<name>``, the cluster credential, as
a worker pulls from a worker) *while it downloads* — the master serves the file as it
grows (``Seeding.follow``), each worker checks the announced SHA-256 itself, and nothing
is adopted before the download is complete and checked too; if none could install it,
they try one at a time with the complete image — and checks that the workers now hold
the point's state; then, in one SQLite transaction, the agreed queue is forgotten up to P
as a compaction would (the floor) and the data centre's log starts over at the image's
state (``SqliteStorage.seeded``). A worker that could not install it is replicated from
one that did by the usual recovery, and peering resumes from P: peers send what was
agreed after it. Progress (phase, bytes, total) is on the
status page (``GET /admin/sync``: ``seeding``) and in ``/metrics``.

Transactions of the incoming queue that the donor agreed at or before the seed point are
in the image (their ids are in the point, and kept: ``sync_forgotten``), so they leave
the queue; the others are negotiated as before
(``SqliteStorage.seeded``, ``compaction.leaves_incoming``: by timestamp alone only where
the donor forgot the ids that would tell). A cut download resumes where it was cut,
within one seeding and across a restart of this master: the seed point is kept beside
the partial download (``<name>.part.point``), and a seeding from the same peer within
the donor's hold resumes that image instead of asking for a new one. If the donor no
longer has it (it restarted, or the hold ran out) the seeding fails, the partial
download is dropped and the next attempt asks again. Nothing is installed before the
image is whole and checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from master_service.cluster.pool import Worker
from master_service.cluster.statuses import WorkerStatus
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.sync import wire
from master_service.sync.messages import InvalidMessage, SeedPoint
from master_service.sync.storage import SeedingStorage
from master_service.txlog.log import State, TxLogError
from txinfra import growing_file
from txinfra.signed_session import SignedSession

log = logging.getLogger("txcluster.sync")

__all__ = ["SeedImages", "Seeding", "SeedingFailed", "image_name"]

CHUNK = 1 << 20
# Attempts of one download: each resumes where the last one was cut.
DOWNLOAD_ATTEMPTS = 8
# How long a donor keeps the agreed entries after a seed point for the data centre it
# seeded, until that one is its peer and posted (SyncNode.hold_for_seeding): time enough
# to download and install a large image and be added as a peer.
SEED_HOLD_MS = 3_600_000


class SeedingFailed(Exception):
    """Seeding could not be done; the message says why. Nothing was installed."""


def image_name(requester: str) -> str:
    """The donor's image for a requester: one per requester (a new seed replaces it)."""
    return "seed-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in requester)[:90]


class SeedImages:
    """The donor's side (module docstring)."""

    def __init__(self, cluster: Any, agreement: SeedingStorage,
                 driver: Callable[[], Any | None], compression: Callable[[], bool]) -> None:
        self.cluster, self.agreement = cluster, agreement
        self._driver = driver  # the running SyncDriver, None when this master does not peer
        self._compression = compression
        self._holders: dict[str, Any] = {}  # image name -> the worker holding it

    async def make(self, requester: str) -> SeedPoint:
        driver = self._driver()
        if driver is None:
            raise SeedingFailed("this master does not peer: it has no agreed state to seed "
                                "from")
        pool = self.cluster
        candidates = [w for w in pool.in_sync() if w.readable] or pool.in_sync()
        if not candidates:
            raise SeedingFailed("no worker of this data centre is in sync")
        # Not the probe when another can: writes go on undisturbed.
        w = next((c for c in candidates if c.url != pool.probe), candidates[0])
        name = image_name(requester)
        try:
            # Streamed: the worker answers once its checkpoint fixed the image's state,
            # and the requester's download follows the image as it is written.
            manifest = await w.client.backup(name, self._compression(), stream=True)
        except (WorkerUnavailable, WorkerRefused) as exc:
            raise SeedingFailed(f"worker {w.url} could not write an image: {exc}") from None
        seq, fp = manifest["seq"], manifest["fingerprint"]
        pos = await pool.db(self.agreement.position_of, seq, fp)
        point = None if pos is None else driver.node.seed_point(pos)
        split = driver.node.split_point
        if point is None and pos is not None and split is not None and pos > split:
            raise SeedingFailed(f"this data centre is split from some of its peers since "
                                f"agreed position {split} and may take back what it agreed "
                                f"after it (the image is at {pos}); ask again once the "
                                f"split has healed")
        if point is None:
            raise SeedingFailed(f"the image of {w.url} (seq {seq}) is at no agreed position "
                                f"this master still holds; ask again")
        txid, chain, newest = point
        try:
            known_after, ids = await pool.db(self.agreement.known_ids, pos)
        except TxLogError as exc:
            # A gap in the ids kept: a seed point without them could drop acknowledged
            # writes of the requester's incoming queue (compaction.py), so none is given.
            raise SeedingFailed(f"this master cannot name the transactions agreed up to "
                                f"position {pos}: {exc}") from None
        # The requester catches up from us once its peers add it: keep what follows,
        # across a restart of this master too (reinstate).
        until = int(time.time() * 1000) + SEED_HOLD_MS
        await pool.db(self.agreement.hold_seed, requester, pos, until)
        driver.hold_for_seeding(requester, pos, SEED_HOLD_MS)
        self._holders[name] = w
        log.info("sync: image '%s' of %s for %s stands for agreed position %d (%d quads)",
                 name, w.url, requester, pos, manifest["quads"])
        return SeedPoint(name, pos, txid, chain, newest, seq, fp, manifest["quads"],
                         manifest.get("sha256"), manifest.get("bytes"), tuple(ids),
                         known_after)

    async def reinstate(self) -> list[str]:
        """Hold again what the seedings still running want kept (a restart of this
        master, SyncDriver.start): the requesters held for."""
        driver = self._driver()
        if driver is None:
            return []
        now = int(time.time() * 1000)
        held = []
        for requester, pos, until in await self.cluster.db(self.agreement.seed_holds, now):
            try:
                driver.hold_for_seeding(requester, pos, until - now)
            except ValueError as exc:
                # The horizon (LogMaxSize / LogMaxDepth) forgot what followed the seed
                # point while we held it, as it may: the requester cannot catch up from
                # us and needs another seed. A master that refused to start on it could
                # never start again (multi-DC chaos, seed 4319: wipe-dc, then kill-master).
                log.warning("sync: the seed hold for %s at agreed position %d is not kept "
                            "(%s): it needs another seed", requester, pos, exc)
                continue
            held.append(requester)
        return held

    async def checksum(self, name: str) -> tuple[str, int]:
        """(SHA-256, bytes) of the image ``name`` once its worker wrote it."""
        w = self._holders.get(name)
        if w is None:
            raise KeyError(f"no seed image named '{name}' here (made by POST /peer/seed)")
        try:
            return await w.client.backup_checksum(name)
        except (WorkerUnavailable, WorkerRefused) as exc:
            raise SeedingFailed(f"worker {w.url} did not finish the image: {exc}") from None

    def open(self, name: str, start: int
             ) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """The image as the worker holding it streams it, from byte ``start``."""
        w = self._holders.get(name)
        if w is None:
            raise KeyError(f"no seed image named '{name}' here (made by POST /peer/seed)")
        return w.client.backup_stream(name, start)


class Seeding:
    """The recipient's side (module docstring). ``progress`` is what the status page,
    ``GET /admin/sync`` and /metrics show; None before the first seeding."""

    def __init__(self, *, cluster: Any, agreement: SeedingStorage, secret: bytes,
                 node_id: str, master_url: str, data_dir: Path, request_timeout: float,
                 tls: Any = None) -> None:
        self.cluster, self.agreement = cluster, agreement
        self.node_id, self.master_url = node_id, master_url.rstrip("/")
        self.dir = data_dir / "seeding"
        self.request_timeout = request_timeout
        self._http = SignedSession(secret, tls=tls, timeout=request_timeout)
        self.progress: dict[str, Any] | None = None
        self.running = False
        self._download_task: asyncio.Task[None] | None = None
        self._following: str | None = None  # the image being downloaded (follow)

    async def close(self) -> None:
        await self._http.close()

    def image_path(self, name: str) -> Path | None:
        """A downloaded, checked image (what a worker pulls; its SHA-256 is in
        ``<name>.image.sha256`` beside it), or None."""
        path = self.dir / f"{name}.image"
        return path if path.is_file() and path.with_suffix(".image.sha256").is_file() \
            else None

    def following(self, name: str) -> tuple[int | None, str | None] | None:
        """(bytes, SHA-256) of the image ``name`` while it downloads (None, None while
        the donor has not finished writing it), else None."""
        task, progress = self._download_task, self.progress
        if self._following != name or task is None or task.done() or progress is None:
            return None
        return progress["total"], progress["sha256"]

    async def checked_sha256(self, name: str) -> str:
        """The SHA-256 of the image ``name`` once its download is complete and checked
        (a worker that pulled it while it downloaded checks what it received against
        it); SeedingFailed if the download failed."""
        task = self._download_task
        if self._following != name or task is None or self.progress is None:
            raise SeedingFailed(f"no download of '{name}' here")
        with contextlib.suppress(BaseException):
            await asyncio.shield(task)
        if task.cancelled() or task.exception() is not None:
            raise SeedingFailed(f"the download of '{name}' failed")
        return self.progress["sha256"]

    def follow(self, name: str) -> AsyncIterator[bytes]:
        """The image ``name`` as its download writes it (the .part file, then the checked
        image it is renamed to), to its end; raises if the download fails first (the
        puller then holds a cut image and refuses it)."""
        task, progress = self._download_task, self.progress
        assert task is not None and progress is not None

        def failure() -> str | None:
            if task.done() and (task.cancelled() or task.exception() is not None):
                return f"the download of '{name}' failed"
            return None

        # What the download wrote and flushed (a resume never cuts below it); once it
        # finished, the whole checked image (the .part renamed).
        return growing_file.follow(
            growing_file.opener(lambda: self.dir / f"{name}.part",
                                lambda: self.dir / f"{name}.image"),
            lambda: progress["bytes"], task.done, failure)

    def _downloaded(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._phase("installing")  # the worker may still be receiving or unpacking

    def _phase(self, phase: str, **more: Any) -> None:
        assert self.progress is not None
        self.progress.update(phase=phase, **more)
        log.info("sync: seeding from %s: %s", self.progress["peer"], phase)

    def done(self) -> None:
        """The seeded data centre peers again (after a successful ``run``)."""
        self._phase("done", finished=time.time())

    async def run(self, peer: str, url: str) -> SeedPoint:
        """Seed this data centre from ``peer`` (module docstring). The caller stopped
        the sync driver and starts it again afterwards."""
        if self.running:
            raise SeedingFailed("a seeding is already running")
        self.running = True
        self.progress = {"peer": peer, "phase": "asking", "bytes": 0, "total": None,
                         "position": None, "started": time.time(), "finished": None,
                         "resumed": 0, "restarted_at": 0, "error": None}
        saved = self._saved_point(peer)
        try:
            if saved is not None:
                point, have = saved
                self.progress["restarted_at"] = have
                log.warning("sync: seeding from %s: resuming the download of image '%s' "
                            "(agreed position %d) at byte %d", peer, point.name, point.pos,
                            have)
            else:
                point = await self._ask(url.rstrip("/"))
            self.progress.update(position=point.pos, total=point.bytes, sha256=point.sha256)
            # The workers pull the image while it downloads (follow): their receiving
            # overlaps the download instead of following it. Each checks the announced
            # SHA-256 itself, and nothing is adopted before the download checked it too.
            self._following = point.name
            self._download_task = asyncio.create_task(
                self._download(url.rstrip("/"), point))
            self._download_task.add_done_callback(self._downloaded)
            try:
                await self._install(point, self._download_task)
            finally:
                if not self._download_task.done():
                    self._download_task.cancel()
                    with contextlib.suppress(BaseException):
                        await self._download_task
            # "done" is the caller's to say (done()), once peering runs from the seeded
            # floor: a status read in between would show the seeding over and the floor
            # still the old one.
            return point
        except SeedingFailed as exc:
            self.progress.update(phase="failed", error=str(exc), finished=time.time())
            log.error("sync: seeding from %s failed: %s", peer, exc)
            if saved is not None:  # the donor may no longer have that image: ask again
                self._forget_download(saved[0].name)
            raise
        except Exception as exc:  # a bug: reported as a failed seeding, not a dead task
            log.exception("sync: seeding from %s failed", peer)
            self.progress.update(phase="failed", error=f"{type(exc).__name__}: {exc}",
                                 finished=time.time())
            raise SeedingFailed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.running = False

    def _saved_point(self, peer: str) -> tuple[SeedPoint, int] | None:
        """The seed point of a partial download from ``peer`` that a restart interrupted,
        and the bytes held, when it can be resumed: the same peer, and asked within the
        donor's hold (SEED_HOLD_MS; past it the donor may have forgotten what follows the
        point). Anything else found is dropped."""
        name = image_name(self.node_id)
        tag, part = self.dir / f"{name}.part.point", self.dir / f"{name}.part"
        try:
            saved = json.loads(tag.read_text())
            point = wire.seed_from_json(saved["point"])
            have = part.stat().st_size
            fresh = time.time() - float(saved["asked"]) < SEED_HOLD_MS / 1000 - 60
            if saved["peer"] == peer and point.name == name and fresh and have > 0:
                return point, have
        except FileNotFoundError:
            if not tag.exists():
                return None
        except (ValueError, KeyError, TypeError, InvalidMessage) as exc:
            log.warning("sync: a partial seed download's point is unreadable (%s): "
                        "dropped", exc)
        self._forget_download(name)
        return None

    def _forget_download(self, name: str) -> None:
        for leftover in (f"{name}.part", f"{name}.part.point"):
            (self.dir / leftover).unlink(missing_ok=True)

    async def _ask(self, url: str) -> SeedPoint:
        body = json.dumps({"peer": self.node_id}).encode()
        try:
            status, content = await self._http.request(
                "POST", f"{url}/peer/seed", body, "application/json", timeout=3600)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise SeedingFailed(f"{url} did not answer: {type(exc).__name__}: {exc}") \
                from None
        if status != 200:
            raise SeedingFailed(f"{url} refused a seed ({status}): "
                                f"{content.decode(errors='replace')[:300]}")
        try:
            return wire.seed_from_json(json.loads(content))
        except (ValueError, InvalidMessage) as exc:
            raise SeedingFailed(f"{url} answered a malformed seed point: {exc}") from None

    async def _download(self, url: str, point: SeedPoint) -> None:
        """Into <dir>/<name>.part, resumed after a cut; <name>.image once checked."""
        self.dir.mkdir(parents=True, exist_ok=True)
        done = self.dir / f"{point.name}.image"
        part = self.dir / f"{point.name}.part"
        # Which image the .part belongs to: its seed point, from which peer, asked when
        # (a restarted master resumes it: _saved_point).
        tag = self.dir / f"{point.name}.part.point"
        try:
            same = json.loads(tag.read_text())["point"] == wire.seed_to_json(point)
        except (OSError, ValueError, KeyError, TypeError):
            same = False
        if not same:  # another image of the same name: start again
            part.unlink(missing_ok=True)
            tmp = tag.with_name(tag.name + ".tmp")
            tmp.write_text(json.dumps({"peer": self.progress["peer"], "asked": time.time(),
                                       "point": wire.seed_to_json(point)}))
            tmp.replace(tag)
        done.unlink(missing_ok=True)
        self._phase("downloading")
        last_error = ""
        # The SHA-256 is computed as the bytes arrive, not by reading the whole image
        # again at the end; a resumed download first hashes what it already has.
        hashed = _Hashed()
        # Unknown while the donor streams the image as it writes it: asked for once a
        # body ended (the worker's stream ends only when the image is whole).
        expected, total = point.sha256, point.bytes
        body_ended = False  # a whole body arrived: only the checksum is still to ask
        for attempt in range(DOWNLOAD_ATTEMPTS + 1):
            have = part.stat().st_size if part.exists() else 0
            self.progress["bytes"] = have
            if total is not None and have >= total:
                break
            if attempt == DOWNLOAD_ATTEMPTS:
                raise SeedingFailed(f"download of '{point.name}' kept failing: {last_error}")
            if have:
                self.progress["resumed"] += 1
                await asyncio.sleep(min(0.5 * 2 ** attempt, 10))
            try:
                if not body_ended or total is not None:
                    await self._fetch(url, point, part, have, hashed)
                    body_ended = True
                if total is None:
                    expected, total = await self._checksum(url, point)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                log.warning("sync: download of %s cut at %d of %s bytes (%s); resuming",
                            point.name, part.stat().st_size if part.exists() else 0,
                            total or "?", last_error)
        size = part.stat().st_size
        digest = hashed.digest.hexdigest() if hashed.length == size else \
            await asyncio.to_thread(_sha256, part)
        if digest != expected:
            part.unlink(missing_ok=True)
            raise SeedingFailed(f"the downloaded image's SHA-256 {digest} is not the "
                                f"announced {expected}")
        part.rename(done)
        (self.dir / f"{point.name}.image.sha256").write_text(digest)
        tag.unlink(missing_ok=True)

    async def _checksum(self, url: str, point: SeedPoint) -> tuple[str, int]:
        """(SHA-256, bytes) of a streamed image, from the donor once it wrote it."""
        status, content = await self._http.request(
            "GET", f"{url}/peer/seed/{point.name}/sha256?peer={self.node_id}", timeout=3600)
        try:
            answer = json.loads(content) if status == 200 else None
            sha, size = answer["sha256"], answer["bytes"]  # type: ignore[index]
            if not (isinstance(sha, str) and len(sha) == 64 and isinstance(size, int)):
                raise ValueError(answer)
        except (ValueError, KeyError, TypeError):
            raise SeedingFailed(f"{url} answered {status} for the image's SHA-256: "
                                f"{content.decode(errors='replace')[:300]}") from None
        assert self.progress is not None
        self.progress.update(total=size, sha256=sha)
        return sha, size

    async def _fetch(self, url: str, point: SeedPoint, part: Path, have: int,
                     hashed: _Hashed) -> None:
        """Append to ``part`` from byte ``have``; ``hashed`` follows what is written."""
        target = f"{url}/peer/seed/{point.name}?peer={self.node_id}"
        headers = {"range": f"bytes={have}-"} if have else {}
        async with self._http.stream(target, headers, self.request_timeout) as resp:
            if resp.status not in (200, 206):
                text = (await resp.read()).decode(errors="replace")[:300]
                raise SeedingFailed(f"{url} answered {resp.status} for the image: {text}")
            if have and resp.status == 200 and resp.headers.get("x-image-offset") != str(have):
                have = 0  # the range was not honoured: the whole image again
            if hashed.length != have:  # a resume after a cut (or a restart): hash what we have
                hashed.digest = await asyncio.to_thread(_sha256_prefix, part, have)
                hashed.length = have
            with open(part, "r+b" if have else "wb") as fh:
                fh.seek(have)
                fh.truncate()
                async for chunk in resp.content.iter_chunked(CHUNK):
                    fh.write(chunk)
                    fh.flush()  # a follower reads up to progress["bytes"] from the file
                    hashed.digest.update(chunk)
                    hashed.length += len(chunk)
                    self.progress["bytes"] = hashed.length

    async def _until_listening(self, timeout_s: float = 60.0) -> None:
        """Until this master answers at master_url, where its workers pull the image. A
        master restarted mid-download resumes at once, without asking the donor first,
        while its HTTP server may not listen yet: a worker's pull then failed with
        "connection refused" and that attempt of the seeding with it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status, _ = await self._http.request("GET", f"{self.master_url}/health",
                                                     timeout=5)
                if status == 200:
                    return
            except (TimeoutError, aiohttp.ClientError, OSError):
                pass
            if time.monotonic() > deadline:
                raise SeedingFailed(f"this master does not answer at its master-url "
                                    f"{self.master_url}, where its workers fetch the image")
            await asyncio.sleep(0.2)

    async def _install(self, point: SeedPoint, download: asyncio.Task[None]) -> None:
        pool = self.cluster
        source = f"{self.master_url}/cluster/seed-image/{point.name}"
        workers = list(pool.workers.values())
        # Until the log is rebased, a worker's new state is unknown to it: the health
        # check leaves them alone (as during a restore).
        pool.restoring = set(pool.workers)
        installed: list[Worker] = []
        try:
            for w in workers:
                pool.disable(w, WorkerStatus.REPLICATION_CLIENT, "seeding from a peer's image")
            await self._until_listening()
            # Every worker pulls the image while it downloads, all at once: over a link
            # between data centres the download is the slow part, and each worker's
            # receiving and unpacking keeps up with it, so the whole data centre holds
            # the image when the download ends (each worker replicated from the first
            # afterwards took as long again: the image packed anew, sent, unpacked).
            outcomes = await asyncio.gather(*(self._pull(w, source, point)
                                              for w in workers), return_exceptions=True)
            for outcome in outcomes:  # a bug, raised once no pull is left running
                if isinstance(outcome, BaseException):
                    raise outcome
            installed = [w for w, outcome in zip(workers, outcomes, strict=True)
                         if outcome is None]
            problems = [outcome for outcome in outcomes if isinstance(outcome, str)]
            if not installed:
                # None of them could install it while it downloaded: one at a time, the
                # complete, checked image (SeedingFailed here names the download's own
                # problem).
                await download
                for w in workers:
                    problem = await self._pull(w, source, point)
                    if problem is None:
                        installed = [w]
                        break
                    problems.append(problem)
            # Nothing is adopted before the download is complete and its SHA-256 checked
            # (SeedingFailed from here names the download's own problem).
            await download
            if not installed:
                raise SeedingFailed("no worker installed the image: " + "; ".join(problems))
            state = State(point.seq, point.fingerprint, point.quads)
            try:
                await pool.db(self.agreement.seeded, point, state)
            except TxLogError as exc:
                raise SeedingFailed(str(exc)) from None
            pool.set_head(point.seq, point.fingerprint, point.quads)
            for w in installed:
                w.seq, w.fingerprint, w.quads = point.seq, point.fingerprint, point.quads
                # At the head: in sync now, not after a poll. The poll of every worker
                # below runs in parallel, and a worker still to be replicated that was
                # polled first would find no source ("no worker can serve a
                # replication", an ERROR) and wait for the next health check.
                w.status = pool.settled(w)
        finally:
            for w in workers:
                if w.status == WorkerStatus.REPLICATION_CLIENT:
                    w.status = WorkerStatus.OUT_OF_SYNC  # recovered: replayed or replicated
            pool.restoring = set()
        pool.note(f"seeded from a peer's image at agreed position {point.pos} "
                  f"(seq {point.seq}, {point.quads} quads) on "
                  f"{', '.join(w.url for w in installed)}")
        self._phase("replicating")
        await pool.poll_all()
        for leftover in (f"{point.name}.image", f"{point.name}.image.sha256"):
            (self.dir / leftover).unlink(missing_ok=True)

    async def _pull(self, w: Worker, source: str, point: SeedPoint) -> str | None:
        """Worker ``w`` installs the image at ``source``: None once it holds the point's
        state, else what went wrong."""
        try:
            res = await w.client.pull_image(source)
        except (WorkerUnavailable, WorkerRefused) as exc:
            return f"{w.url}: {exc}"
        if (res["seq"], res["fingerprint"], res["quads"]) != \
                (point.seq, point.fingerprint, point.quads):
            return (f"{w.url} installed seq {res['seq']} ({res['fingerprint']}), not the "
                    f"image's seq {point.seq} ({point.fingerprint})")
        return None


@dataclass
class _Hashed:
    """A running SHA-256 of a download's first ``length`` bytes."""

    digest: Any = field(default_factory=hashlib.sha256)
    length: int = 0


def _sha256(path: Path) -> str:
    return _sha256_prefix(path, path.stat().st_size).hexdigest()


def _sha256_prefix(path: Path, size: int) -> Any:
    """A running SHA-256 of the first ``size`` bytes of ``path`` (more can follow)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while size > 0 and (block := fh.read(min(CHUNK, size))):
            h.update(block)
            size -= len(block)
    return h
