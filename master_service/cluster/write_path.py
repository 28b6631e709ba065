"""The write path: execute a group of transactions, in the order given, on the probe.

    probe executes the group (exact changesets + control queries)
    -> the ordering records the outcome in the log (durable) -> the head moves
    -> forward changesets to every other in-sync worker (per-worker ordered queues)

(in strict consistency mode ``execute`` returns only once the forwards are applied too).
``execute`` is the one way a group runs on the workers. The order comes from the write
path's *ordering*, chosen once at start (master_service/app.py): group commit of this
master's clients (local_ordering.py), or an order agreed elsewhere. The ordering takes
the client writes, says what the log expects to be executed next (roll-forward,
recovery.py) and records outcomes; the cluster itself does not know how the order was
reached.

A worker that fails a forward or reports another fingerprint than the probe's leaves
rotation and the recovery loop brings it back by replay or full replication
(docs/design/smart-replication.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from master_service.cluster import rollforward
from master_service.cluster.pool import REPLAY_BATCH, Worker, WorkerPool
from master_service.cluster.statuses import IN_SYNC, WorkerStatus
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.errors import NotWritable

# Transactions executed on the probe in one request, at most.
MAX_GROUP = 256
# While clients are writing, a forwarder waits before sending so that the groups
# committed meanwhile go to the worker in one request: forwarding is not on the
# acknowledgement path (eventual consistency), and each request costs the master and the
# worker CPU that the next group commit needs. FORWARD_COALESCE_S while reads are running
# on this master (read-your-writes sends a read only to a worker at the head: the sooner
# the others are there, the more of them share the reads); FORWARD_COALESCE_QUIET_S while
# none is, when nobody is waiting for them: fewer, larger applies, less CPU per write in
# the master and every worker (bench/README.md, "2026-12-03 (2)").
FORWARD_COALESCE_S = 0.003
FORWARD_COALESCE_QUIET_S = 0.02


class WriteNotRecorded(Exception):
    """A group executed on the probe was not recorded because the group before it was
    not: its clients are told the write failed (nothing of it is acknowledged)."""


def _done(outcome: Outcome) -> Awaitable[Outcome]:
    fut: asyncio.Future = asyncio.get_running_loop().create_future()
    fut.set_result(outcome)
    return fut


class Transaction(Protocol):
    txid: str
    operations: list[dict]
    # Milliseconds since the epoch: the agreed timestamp of a peered master's transaction,
    # the submission time of a single master's. The probe evaluates NOW() as it and draws
    # RAND/UUID/blank nodes from the txid, so executing it again anywhere gives the same
    # changeset (worker_service/determinism.py, docs/design/write-path.md).
    timestamp: int


@dataclass
class Outcome:
    """What a group's execution did, for the ordering to record and answer.

    ``results``: the probe's result for each transaction of ``group``, in order;
    ``entries``: the changesets the log records, (seq, txid, changeset, fingerprint,
    quads, apply_duration_s); ``failures``: (txid, error) of the refused ones;
    ``fingerprint`` / ``quads``: the log head before the group."""

    group: Sequence[Any]
    results: list[dict]
    entries: list[tuple]
    failures: list[tuple[str, str]]
    fingerprint: str
    quads: int


class Ordering(Protocol):
    """Where the order of the write path comes from (module docstring)."""

    @property
    def pending(self) -> int:
        """Client writes taken and not yet executed."""

    async def start(self) -> None:
        """Called once the cluster's state is read and rolled forward."""

    async def stop(self) -> None: ...

    async def submit(self, operations: list[dict]) -> dict:
        """A client write: executed in this ordering's turn; its answer or an error."""

    def expected_next(self, limit: int) -> list[rollforward.Expected] | None:
        """(log thread) What is to be executed next, in order; None when nothing may be
        rolled forward now."""

    def record_rolled_forward(self, plan: rollforward.Plan, now: float) -> None:
        """(log thread) Record what a roll-forward found executed."""

    def rolled_forward(self, plan: rollforward.Plan) -> None:
        """A roll-forward recorded ``plan`` while the write path runs."""


class WritePath:
    """The probe, the execution of groups and the forwarders (module docstring)."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.ordering: Ordering | None = None
        self._orderings: list[Ordering] = []
        self._started = False
        # One group at a time on the probe; a roll-forward, a rollback or a restore takes
        # it too and settles (quiet()), so that the log head does not move under them.
        self.lock = asyncio.Lock()
        # Pipelined group commit: the record of the last group executed (each waits for
        # the one before), the state the probe reached by it, and that probe.
        self._tail: asyncio.Future | None = None
        self._before_tail: asyncio.Future | None = None
        self._ahead: tuple[int, str, int] | None = None
        self._ahead_probe: Worker | None = None

    # ---- the ordering ----

    async def order_by(self, ordering: Ordering) -> None:
        """From now on client writes go to ``ordering``. An ordering replaced keeps
        executing what it took already, until the cluster stops."""
        self.ordering = ordering
        self._orderings.append(ordering)
        if self._started:
            await ordering.start()

    async def start(self) -> None:
        self._started = True
        assert self.ordering is not None
        await self.ordering.start()

    async def stop(self) -> None:
        for ordering in self._orderings:
            await ordering.stop()
        forwarders = [w.forwarder for w in self.pool.workers.values() if w.forwarder]
        for task in forwarders:
            task.cancel()
        for task in forwarders:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    @property
    def pending(self) -> int:
        return sum(o.pending for o in self._orderings)

    async def write(self, operations: list[dict]) -> dict:
        """A client write: refused at once when the cluster is not writable, else
        executed in the ordering's turn; returns the transaction's seq/fingerprint."""
        reason = self.pool.writable_reason()
        if reason:
            raise NotWritable(f"cluster is not writable: {reason}")
        assert self.ordering is not None
        self.pool.counters.running_writes += 1
        try:
            return await self.ordering.submit(operations)
        finally:
            self.pool.counters.running_writes -= 1

    # ---- execution ----

    async def execute(self, group: Sequence[Transaction],
                      record: Callable[[Outcome, float], None], *,
                      admit: Callable[[], str | None],
                      due: Callable[[Sequence], Awaitable[Sequence]] | None = None,
                      executed: Callable[[Outcome], None] | None = None) -> Outcome:
        """Execute ``group`` in its order on the probe and make the outcome durable with
        ``record(outcome, now)`` (log thread), before the head moves and the changesets
        are forwarded.

        ``admit()``: why the cluster cannot execute now, or None; NotWritable when it
        cannot or no worker can be the probe (nothing was executed). ``due(group)``:
        asked once no other group, roll-forward or rollback can run and every group
        executed before is recorded, the part of the group still to execute (an empty
        outcome when none is). ``executed(outcome)``: called as soon as the probe has
        executed the group, before its record is durable, for an ordering whose
        transactions were durable and agreed before they executed (a peered master
        answers its clients then: sync/ordering.py); reads under read-your-writes wait
        for the record meanwhile (``pool.acknowledged_seq``). Not in strict consistency
        mode, whose answers wait for the forwards."""
        recorded = await self.execute_pipelined(group, record, admit=admit, due=due,
                                                executed=executed)
        return await recorded

    async def execute_pipelined(self, group: Sequence[Transaction],
                                record: Callable[[Outcome, float], None], *,
                                admit: Callable[[], str | None],
                                due: Callable[[Sequence], Awaitable[Sequence]] | None = None,
                                executed: Callable[[Outcome], None] | None = None
                                ) -> Awaitable[Outcome]:
        """``execute`` in two steps: returns once the probe has executed the group, with
        what to await for its outcome once recorded. The next group may execute on the
        probe while this one is being recorded (pipelined group commit, module
        docstring); groups are recorded in the order they executed."""
        pool = self.pool
        async with self.lock:
            if due is not None or not self._may_overlap():
                # A peered ordering's ``due`` reads the log: everything executed before
                # must be in it. A new probe must be at the log's head.
                await self.settle()
            if due is not None:
                group = await due(group)
            if not group:
                return _done(Outcome(group, [], [], [], pool.head_fingerprint,
                                     pool.head_quads))
            if self._before_tail is not None:
                # At most one group's record waits behind another's.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._before_tail)
            txs = [{"txid": t.txid, "operations": t.operations, "timestamp": t.timestamp}
                   for t in group]
            probe, response, started, (_, fingerprint, quads) = \
                await self._execute_on_probe(txs, admit)
            pool.count_task(probe, time.monotonic() - started, len(group))
            pool.counters.write_groups += 1
            entries, failures = [], []
            for t, res in zip(group, response["results"], strict=True):
                if res["ok"]:
                    entries.append((res["seq"], t.txid, res["changeset"], res["fingerprint"],
                                    res["quads"], res["duration_s"]))
                else:
                    failures.append((t.txid, res["error"]))
            outcome = Outcome(group, response["results"], entries, failures, fingerprint,
                              quads)
            if entries:
                last = entries[-1]
                self._ahead = (last[0], last[3], last[4])
            self._ahead_probe = probe
            tail = asyncio.ensure_future(self._record(self._tail, record, outcome, probe))
            # Its failure reaches its own clients through _answer (and the next group);
            # retrieved here too, so that one nobody awaits any more is not reported lost.
            tail.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._before_tail, self._tail = self._tail, tail
            if executed is not None and not pool.strict:
                if entries:
                    pool.acknowledged_seq = max(pool.acknowledged_seq, entries[-1][0])
                executed(outcome)
        return self._answer(tail, outcome)

    async def _answer(self, tail: asyncio.Future, outcome: Outcome) -> Outcome:
        # Shielded: a caller that goes away does not stop the record, which the groups
        # after it wait for.
        await asyncio.shield(tail)
        if self.pool.strict and outcome.entries:
            await self.wait_forwarded(outcome.entries[-1][0])
        return outcome

    async def _record(self, previous: asyncio.Future | None,
                      record: Callable[[Outcome, float], None], outcome: Outcome,
                      probe: Worker) -> None:
        """Record ``outcome`` durably once the group before it is (one commit; nothing is
        answered before it), then move the head and queue the forwards."""
        pool = self.pool
        try:
            if previous is not None:
                try:
                    await asyncio.shield(previous)
                except Exception as exc:
                    raise WriteNotRecorded(f"the group executed before it was not recorded "
                                           f"({exc})") from None
            await pool.db(record, outcome, time.time())
        except BaseException as exc:
            if outcome.entries and probe.status in IN_SYNC:
                # The probe executed transactions the log does not hold: it is ahead of
                # the log, and recovered like any worker out of sync.
                pool.disable(probe, WorkerStatus.OUT_OF_SYNC,
                             f"executed transactions the log did not record: {exc}")
            raise
        self.committed(probe, outcome.entries)

    def _may_overlap(self) -> bool:
        """Whether the next group may execute on the probe while the last one is still
        being recorded: only on the same probe, still in sync (it holds that group; any
        other worker is at the log's head at best)."""
        tail, probe = self._tail, self._ahead_probe
        return tail is not None and not tail.done() and probe is not None and \
            probe.url == self.pool.probe and probe.status in IN_SYNC

    @property
    def recording(self) -> bool:
        """A group executed on the probe is not recorded yet."""
        return self._tail is not None and not self._tail.done()

    async def settle(self) -> None:
        """(Under ``lock``.) Wait until every executed group is recorded (or failed to
        be): the log's head is then the probe's state, or the probe is out of sync."""
        tail = self._tail
        if tail is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(tail)  # its own group got its failure
        self._tail = self._before_tail = None
        self._ahead, self._ahead_probe = None, None

    @contextlib.asynccontextmanager
    async def quiet(self) -> AsyncIterator[None]:
        """No group executes and every executed group is recorded: the head stays put (a
        roll-forward, a rollback, a restore)."""
        async with self.lock:
            await self.settle()
            yield

    def _choose_probe(self) -> Worker | None:
        pool = self.pool
        cur = pool.workers.get(pool.probe) if pool.probe else None
        if cur and cur.status in IN_SYNC and not cur.queue and cur.readable:
            return cur
        # A drained worker (set_readable) is the probe only when no other one can be.
        for w in sorted(pool.in_sync(), key=lambda w: not w.readable):
            if not w.queue and w.seq == pool.head_seq:
                pool.probe = w.url
                return w
        return None

    async def _execute_on_probe(self, txs: list[dict], reason_now: Callable[[], str | None]
                                ) -> tuple[Worker, dict, float, tuple[int, str, int]]:
        """Execute a group on the probe: (probe, its response, start time, the (seq,
        fingerprint, quads) it started from: the log's head, or the state the probe
        reached by groups not recorded yet); NotWritable when ``reason_now`` says the
        cluster can't execute or no worker can be the probe."""
        pool = self.pool
        while True:
            reason = reason_now()
            probe = None if reason else self._choose_probe()
            if probe is None and reason is None and await self._wait_for_probe(reason_now):
                # The probe was lost while every other in-sync worker still had forwards
                # in flight (none at the head yet): the cluster is writable, so wait for
                # one to catch up rather than refuse the group
                # (docs/design/cluster-basics.md#two-workers-three-workers: with three workers the
                # loss of any one leaves the cluster writable).
                continue
            if probe is None:
                msg = reason or "no in-sync worker can act as probe"
                raise NotWritable(f"cluster is not writable: {msg}")
            if self._ahead is not None and probe is not self._ahead_probe:
                await self.settle()
                continue  # chosen again against the recorded head
            started = time.monotonic()
            base = self._ahead or (pool.head_seq, pool.head_fingerprint, pool.head_quads)
            try:
                response = await pool.while_alive(probe, probe.client.execute(
                    base[0] + 1, txs, pool.control_queries))
            except (WorkerUnavailable, WorkerRefused) as exc:
                # The probe may or may not have executed the group; either way its state
                # is now unknown to the log, so it is recovered like any other worker.
                pool.disable(probe, WorkerStatus.OFF if isinstance(exc, WorkerUnavailable)
                             else WorkerStatus.OUT_OF_SYNC, f"probe failed: {exc}")
                await self.settle()  # the next probe starts from the recorded head
                continue
            return probe, response, started, base

    def committed(self, probe: Worker, entries: list[tuple]) -> None:
        """The log holds ``entries`` durably: move the head, queue the forwards.

        Synchronous from here to the forwarding: recovery sees either the old head (and
        replays) or the new one with the entries queued."""
        if not entries:
            return
        pool = self.pool
        last = entries[-1]
        pool.set_head(last[0], last[3], last[4])
        probe.seq, probe.fingerprint, probe.quads = last[0], last[3], last[4]
        pool.positions_advanced()
        wires = [{"seq": e[0], "txid": e[1], "changeset": e[2],
                  "expected_fingerprint": e[3]} for e in entries]
        for w in pool.in_sync():
            if w is not probe:
                w.queue.extend(wires)
                if w.status == WorkerStatus.ON:
                    w.status = WorkerStatus.WAITING_WRITE
                w.wake.set()

    async def _wait_for_probe(self, reason_now: Callable[[], str | None]) -> bool:
        """Wait (at most request_timeout) until an in-sync worker has applied its queued
        forwards and can be the probe, or the cluster stops being writable; False when
        neither happened in time."""
        pool = self.pool
        deadline = time.monotonic() + pool.request_timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.002)
            if reason_now() is not None or any(
                    not w.queue and w.seq == pool.head_seq for w in pool.in_sync()):
                return True
        return False

    async def wait_forwarded(self, seq: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(w.seq >= seq for w in self.pool.in_sync()):
                return
            await asyncio.sleep(0.001)

    # ---- forwarding ----

    def start_forwarder(self, w: Worker) -> None:
        w.forwarder = asyncio.create_task(self._forwarder(w), name=f"forward {w.url}")

    async def _forwarder(self, w: Worker) -> None:
        """Sends queued changesets to one worker, in order, coalescing groups."""
        pool = self.pool
        while True:
            await w.wake.wait()
            w.wake.clear()
            if pool.counters.running_writes and not pool.strict:
                await asyncio.sleep(FORWARD_COALESCE_S if pool.counters.running_reads
                                    else FORWARD_COALESCE_QUIET_S)
            while w.queue and w.status in IN_SYNC:
                batch = w.queue[:REPLAY_BATCH]
                if w.status in (WorkerStatus.ON, WorkerStatus.WAITING_WRITE):
                    w.status = WorkerStatus.WRITING
                started = time.monotonic()
                try:
                    result = await pool.while_alive(w, w.client.apply(batch))
                except WorkerUnavailable as exc:
                    pool.disable(w, WorkerStatus.OFF, f"forward failed: {exc}")
                    break
                except WorkerRefused as exc:
                    # It could not take the probe's changeset: it reported (or would
                    # reach) a fingerprint other than the probe's.
                    status = WorkerStatus.OUT_OF_SYNC_FORCED if exc.status == 409 \
                        else WorkerStatus.OUT_OF_SYNC
                    pool.counters.fingerprint_mismatches += exc.status == 409
                    pool.disable(w, status, f"forward refused: {exc}")
                    break
                pool.count_task(w, time.monotonic() - started, len(batch))
                del w.queue[:len(batch)]
                w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], \
                    result["quads"]
                pool.positions_advanced()
                if w.status == WorkerStatus.WRITING:
                    w.status = pool.settled(w)
