"""Images of the repository: backup, restore, rollback to a backup, initial bulk load.

A backup is written by an up-to-date worker and recorded in the log
(docs/design/cluster-basics.md#backup-and-restore). A restore puts every worker at a backup's
state; the workers then replay the log after it. A rollback first takes the log itself back to the
backup's state. An initial bulk load (txcluster load --initial) is staged on one worker and
becomes the base of a new log. While any of these changes a worker's state on purpose,
the health check leaves that worker alone (pool.restoring, pool.bulk_load_target).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from master_service.cluster.pool import WorkerPool
from master_service.cluster.recovery import Recovery
from master_service.cluster.statuses import WorkerStatus
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.cluster.write_path import WritePath
from master_service.errors import BulkLoadRefused, NoWorkerAvailable
from master_service.txlog.log import TxLogError


class Images:
    """Backup, restore, rollback and bulk load (module docstring)."""

    def __init__(self, pool: WorkerPool, writes: WritePath, recovery: Recovery) -> None:
        self.pool, self.writes, self.recovery = pool, writes, recovery

    # ---- initial bulk load (txcluster load --initial) ----

    def bulk_load_problem(self) -> str | None:
        """Why this cluster cannot take an initial bulk load now, or None."""
        pool = self.pool
        if not pool.log_is_new():
            return (f"the transaction log is not new (head at seq {pool.head_seq} with "
                    f"{pool.head_quads} quads): an initial bulk load needs a cluster that "
                    f"never committed a transaction; load without --initial")
        full = [w.url for w in pool.workers.values() if w.quads > 0]
        if full:
            return f"workers hold data already: {', '.join(full)}"
        return None

    async def commit_bulk_load(self, url: str, load_id: str, fingerprint: str,
                               quads: int) -> dict:
        """Commit a bulk load staged on worker ``url`` and make its state the base of
        the new log (``Recovery.adopt_existing_data``); the other workers are then
        replicated from it ("Replicating (empty)").

        Client writes are refused while it runs, and the worker installs the data only
        if it is still empty, so no transaction can come between the worker's new state
        and the log's adoption of it (worker_service/bulk_load.py)."""
        pool = self.pool
        w = pool.workers.get(url.rstrip("/"))
        if w is None:
            raise KeyError(f"unknown worker {url}")
        if problem := self.bulk_load_problem():
            raise BulkLoadRefused(problem)
        pool.bulk_load_target = w.url
        try:
            # Writes that passed the writable check before it changed finish first.
            deadline = time.monotonic() + pool.request_timeout
            while pool.counters.running_writes and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            problem = self.bulk_load_problem() or (
                "client writes are still running" if pool.counters.running_writes else None)
            if problem:
                raise BulkLoadRefused(problem)
            result = await pool.while_alive(
                w, w.client.bulk_load_commit(load_id, fingerprint, quads))
            w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], \
                result["quads"]
            await self.recovery.adopt_existing_data()
        finally:
            pool.bulk_load_target = None
        if (pool.head_seq, pool.head_fingerprint) != (w.seq, w.fingerprint):
            raise BulkLoadRefused(f"the log did not adopt the state of {w.url}")
        pool.note(f"initial bulk load '{load_id}': {w.quads} quads on {w.url} "
                  f"(fingerprint {w.fingerprint}) are the base of the log")
        return {"seq": pool.head_seq, "fingerprint": pool.head_fingerprint,
                "quads": pool.head_quads, "worker": w.url}

    # ---- backup / restore ----

    async def backup(self, name: str) -> dict:
        """An up-to-date worker writes a named image
        (docs/design/cluster-basics.md#backup-and-restore)."""
        pool = self.pool
        candidates = [w for w in pool.in_sync() if w.status == WorkerStatus.ON and not w.queue]
        if not candidates:
            raise NoWorkerAvailable("no up-to-date worker can make a backup")
        # Prefer a worker that is not the probe, so writes go on undisturbed.
        w = next((c for c in candidates if c.url != pool.probe), candidates[0])
        with pool.serving(w):
            manifest = await w.client.backup(name, pool.params.compression)
        record = {"name": name, "created": time.time(), "seq": manifest["seq"],
                  "fingerprint": manifest["fingerprint"], "quads": manifest["quads"],
                  "worker": w.url, "sha256": manifest["sha256"], "bytes": manifest["bytes"],
                  "path": f"{w.url}/cluster/backups/{name}"}
        await pool.db(pool.txlog.record_backup, record)
        pool.note(f"backup '{name}' written by {w.url} at seq {manifest['seq']}")
        return record

    async def rollback(self, name: str, forget_after: Callable[[int], None]) -> dict:
        """Return to the state of a backup, the log included: ``forget_after(seq)`` (log
        thread) drops the log's entries after the image's seq (the caller has their
        transactions executed again, in the order it decides); then every worker is
        restored from the image. No group executes meanwhile."""
        pool = self.pool
        record = await pool.db(pool.txlog.backup, name)
        if record is None:
            raise KeyError(f"no backup named '{name}'")
        async with self.writes.quiet():
            await pool.db(forget_after, record.seq)
            head = await pool.db(pool.txlog.head)
            if (head.seq, head.fingerprint) != (record.seq, record.fingerprint):
                raise TxLogError(f"the log at seq {head.seq} ({head.fingerprint}) is not the "
                                 f"state of backup '{name}' ({record.fingerprint})")
            pool.set_head(head.seq, head.fingerprint, head.quads)
            return await self.restore(name)

    async def restore(self, name: str) -> dict:
        """Every worker is restored from the image, then replays the log after it."""
        pool = self.pool
        record = await pool.db(pool.txlog.backup, name)
        if record is None:
            raise KeyError(f"no backup named '{name}'")
        holder = record.worker.rstrip("/")
        results = {}
        for w in list(pool.workers.values()):
            pool.disable(w, WorkerStatus.REPLICATION_CLIENT, f"restoring from image '{name}'")
        # Until its own restore answered, a worker's state is the old one: the health
        # check leaves it alone (recovering it meanwhile would race the restore).
        pool.restoring = set(pool.workers)
        try:
            for w in list(pool.workers.values()):
                try:
                    if w.url == holder:
                        res = await w.client.restore(name=name)
                    else:
                        res = await w.client.restore(source=f"{holder}/cluster/backups/{name}")
                    w.seq, w.fingerprint, w.quads = res["seq"], res["fingerprint"], res["quads"]
                    w.status = WorkerStatus.OUT_OF_SYNC
                    results[w.url] = "restored"
                except (WorkerUnavailable, WorkerRefused) as exc:
                    pool.disable(w, WorkerStatus.OFF, f"restore failed: {exc}")
                    results[w.url] = f"failed: {exc}"
                finally:
                    pool.restoring.discard(w.url)
        finally:
            pool.restoring = set()
        pool.note(f"restored workers from image '{name}' (seq {record.seq}); replaying")
        await self.recovery.poll_all()
        return {"backup": dataclasses.asdict(record), "workers": results}
