"""Local ordering: this master's clients, group-committed into its transaction log.

    probe executes the group (exact changesets + control queries) -> ONE durable
    commit: the transactions, the failed ones, the synchronised-queue entries
    (TxLog.record_group) -> acknowledge clients -> forward (write_path.py)

A crash between the probe and the commit loses only unacknowledged transactions: the
probe, ahead of the log, is replicated back
(docs/design/write-path.md#roll-forward-after-a-master-crash).

One task takes the client writes in arrival order, at most MAX_GROUP at a time: the
writes that arrive while a group executes form the next group (group commit), so each
durable commit serves many clients. Pending transactions found at start (a log written
otherwise) are rolled forward when the probe executed them (rollforward.py), or marked
failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from master_service.cluster import rollforward
from master_service.cluster.pool import WorkerPool
from master_service.cluster.write_path import MAX_GROUP, Outcome, WritePath
from master_service.errors import NotWritable, WriteFailed
from master_service.txlog.txids import new_txid

log = logging.getLogger("txcluster.master")


@dataclass
class _Pending:
    txid: str
    operations: list[dict]
    future: asyncio.Future
    timestamp: int  # ms since the epoch, at submission: NOW() of this transaction


class LocalOrdering:
    """Client writes of this master in arrival order (module docstring)."""

    def __init__(self, pool: WorkerPool, writes: WritePath) -> None:
        self.pool, self.writes = pool, writes
        self._pending: list[_Pending] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._answering: set[asyncio.Task] = set()  # groups waiting for their record

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        failed = await self.pool.db(self._fail_unacknowledged)
        if failed:
            log.warning("%d transactions logged before a restart were never acknowledged: "
                        "marked failed", failed)
        self._task = asyncio.create_task(self._writer(), name="writer")

    def _fail_unacknowledged(self) -> int:
        pending = self.pool.txlog.pending()
        for tx in pending:
            self.pool.txlog.mark_failed(tx.txid, "master restarted before acknowledging")
        return len(pending)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._answering:
            # Groups the probe executed: answered once recorded, as they would have been.
            await asyncio.wait(list(self._answering), timeout=10)
        for p in self._pending:
            if not p.future.done():
                p.future.set_exception(NotWritable("master is shutting down"))

    async def submit(self, operations: list[dict]) -> dict:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(new_txid(), operations, fut,
                                      int(time.time() * 1000)))
        self._wake.set()
        return await fut

    # ---- roll-forward: pending transactions in log order ----

    def expected_next(self, limit: int) -> list[rollforward.Expected]:
        return [rollforward.Expected(t.txid) for t in self.pool.txlog.pending()[:limit]]

    def record_rolled_forward(self, plan: rollforward.Plan, now: float) -> None:
        self.pool.txlog.record_group([], plan.entries, plan.failures)

    def rolled_forward(self, plan: rollforward.Plan) -> None:
        """Nothing to answer: the clients of those transactions were gone with the
        master that logged them."""

    # ---- group commit ----

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                group = self._pending[:MAX_GROUP]
                del self._pending[:MAX_GROUP]
                try:
                    recorded = await self.writes.execute_pipelined(
                        group, self._record, admit=self.pool.writable_reason)
                except asyncio.CancelledError:
                    raise
                except NotWritable as exc:
                    self._failed(group, exc)
                    continue
                except Exception as exc:
                    log.exception("write group failed")
                    self._failed(group, WriteFailed(503, f"write failed: {exc}"))
                    continue
                # The next group goes to the probe while this one is recorded
                # (write_path.py); its clients are answered once it is durable.
                answer = asyncio.create_task(self._answer(group, recorded))
                self._answering.add(answer)
                answer.add_done_callback(self._answering.discard)

    def _failed(self, group: Sequence[_Pending], exc: Exception) -> None:
        for p in group:
            if not p.future.done():
                p.future.set_exception(exc)
        self.pool.counters.failed_writes += len(group)

    def _record(self, outcome: Outcome, now: float) -> None:
        """(log thread) The group's transactions, their changesets and refusals, in one
        durable commit."""
        self.pool.txlog.record_group(
            [(p.txid, p.timestamp / 1000.0, self.pool.node_id, p.operations)
             for p in outcome.group],
            outcome.entries, outcome.failures)

    async def _answer(self, group: Sequence[_Pending], recorded: Awaitable[Outcome]) -> None:
        counters = self.pool.counters
        try:
            outcome = await recorded
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("write group not recorded: %s", exc)
            self._failed(group, WriteFailed(503, f"write failed: {exc}"))
            return
        for p, res in zip(group, outcome.results, strict=True):
            if res["ok"]:
                p.future.set_result({"txid": p.txid, "seq": res["seq"],
                                     "fingerprint": res["fingerprint"]})
                counters.completed_writes += 1
            else:
                p.future.set_exception(WriteFailed(res["status"], res["error"]))
                counters.failed_writes += 1
