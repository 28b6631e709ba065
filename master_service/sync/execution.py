"""The execution room of a peered master: agreed transactions run here, in agreed order.

The *executor* takes the agreed, not yet executed transactions from the agreement log (at
most MAX_GROUP at a time) and has them executed through the agreed ordering
(ordering.py: the cluster's one ``execute`` — probe, control queries, changesets logged,
forwarded); it reports each executed position and the clients' answers back to the
driver. A transaction the probe refuses is refused identically in every data centre
(same data, same order) and moves no fingerprint. A read-only master does not execute
them (docs/design/sync-protocol.md#master-modes).

Split recovery (docs/design/sync-protocol.md#split-recovery): when the driver
reports a split point, Simple and Smart take a backup of the state at it (the executor
runs exactly up to it first, and nothing after it before the backup is taken); when the
agreed queue after a position is truncated, the room returns this data centre to the
state at that position — restoring every worker from the split backup when something
after it was executed here — and reports the position it is back at.

The room knows nothing of the protocol core: the driver hands it values (a split point,
a rollback to start) and takes its reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from master_service.cluster.core import MAX_GROUP, Cluster
from master_service.cluster.statuses import WorkerStatus
from master_service.errors import NotWritable
from master_service.sync.messages import TxMeta
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.storage import Agreed, ExecutionStorage

log = logging.getLogger("txcluster.sync")

# Fingerprints after recent positions kept to compare with the peers' (the driver).
RECENT = 4096
# Durable payloads held in memory until their transaction is agreed (``hold``), and
# agreed transactions offered with them (``agreed``): at most this many, and this many
# payload bytes, together; past that the executor reads them from the log, as anything
# else (a read-only master, which executes nothing, stays within them too).
HELD, HELD_BYTES = 4096, 64 << 20
# A rollback whose restore could not reach a worker (or the backup's holder) tries again
# after this many seconds, doubling up to the second figure.
UNREACHABLE_WAIT, UNREACHABLE_WAIT_MAX = 0.5, 10.0


class Execution:
    """Executor, split backup and rollback (module docstring).

    ``may_execute()``: False while this master is read-only; ``backs_up()``: the split
    recovery strategy takes a split backup. Reports: ``on_executed(pos)`` after each
    executed group, ``on_answers({txid: answer})`` for its clients, ``on_rolled_back(pos)``
    once the data centre is back at agreed position ``pos``."""

    def __init__(self, *, node_id: str, agreement: ExecutionStorage, ordering: AgreedOrdering,
                 cluster: Cluster, may_execute: Callable[[], bool],
                 backs_up: Callable[[], bool], on_executed: Callable[[int], None],
                 on_answers: Callable[[dict[str, Any]], None],
                 on_rolled_back: Callable[[int], None],
                 agreed_up_to: Callable[[], int] | None = None) -> None:
        self.node_id = node_id
        self.agreement = agreement
        self.ordering = ordering
        self.cluster = cluster
        self.db = cluster.db
        self._may_execute = may_execute
        self._backs_up = backs_up
        self._on_executed = on_executed
        self._on_answers = on_answers
        self._on_rolled_back = on_rolled_back
        # The core's agreed length: what is persisted is never past it, so when we have
        # executed up to it there is nothing to ask the log for (a wake comes with every
        # status and payload; each ask waits for the log's thread behind the persists).
        self._agreed_up_to = agreed_up_to
        self.executed_pos = 0
        self.executed_fp = "0" * 32
        self.recent: OrderedDict[int, str] = OrderedDict()  # pos -> fingerprint (cache)
        self.split_point: int | None = None  # our last known good agreed position
        self.split_backup_name: str | None = None  # the backup of that state
        self.recovery_problem: str | None = None
        self.rollback: asyncio.Task | None = None
        self._backup_for: int | None = None  # execution holds after it until backed up
        self._backup_recorded_at: int | None = None  # agreed position of split_backup_name
        self._wake = asyncio.Event()
        # Payloads the driver persisted (hold), until their transaction is agreed; then
        # offered at its agreed position (agreed). The executor takes offered ones instead
        # of reading them from the log (to_execute): that saves each executed group a
        # round trip through the log thread, behind the persists queued there.
        self._held: OrderedDict[str, tuple[int, list]] = OrderedDict()  # txid -> size, ops
        self._offered: OrderedDict[int, tuple[int, Agreed]] = OrderedDict()  # pos -> size, tx
        self._held_bytes = 0  # of both
        self._not_executing: str | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False

    async def load(self) -> None:
        """What is persisted: the executed position and the split backup."""
        self.executed_pos, self.executed_fp = await self.db(self.agreement.executed)
        backup = await self.db(self.agreement.split_backup)
        if backup:
            self.split_backup_name, self._backup_recorded_at = backup

    async def start(self, split_point: int | None) -> None:
        self.split_point_moved(split_point)
        if await self.db(self.agreement.rollback_owed) is not None:
            self.start_rollback()  # a crash came between a truncation and its rollback
        self._tasks.append(asyncio.create_task(self._executor(), name="sync executor"))

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def wake(self) -> None:
        """Agreed transactions may be ready to execute."""
        self._wake.set()

    # ---- the executor ----

    async def _executor(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while not self._stopping:
                if not self._may_execute():
                    break  # a read-only master executes nothing (master modes)
                if self.rollback is not None:
                    break  # split recovery: nothing runs before the data centre is back
                limit = MAX_GROUP
                if self._backup_for is not None:
                    # Simple/Smart: nothing after the split point runs before the backup
                    # of the last known good state is taken
                    # (docs/design/sync-protocol.md#split-recovery, "At split detection").
                    limit = min(limit, self._backup_for - self.executed_pos)
                    if limit <= 0:
                        break
                if (self._agreed_up_to is not None
                        and self._agreed_up_to() <= self.executed_pos):
                    break
                batch = self._take_offered(limit) or await self.db(
                    self.agreement.to_execute, self.executed_pos, limit)
                if not batch:
                    break
                try:
                    answers = await self.ordering.execute(batch, self._on_answers)
                except NotWritable as exc:
                    if str(exc) != self._not_executing:
                        self._not_executing = str(exc)
                        log.warning("sync: agreed transactions wait: %s", exc)
                    await asyncio.sleep(0.2)
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("sync: executing agreed transactions failed; retrying")
                    await asyncio.sleep(1.0)
                    continue
                self._not_executing = None
                fp = self.executed_fp
                for a in batch:  # a refused transaction leaves the fingerprint as it was
                    answer = answers.get(a.txid)
                    if isinstance(answer, dict):
                        fp = answer["fingerprint"]
                    self.recent[a.pos] = fp
                self.executed_pos, self.executed_fp = batch[-1].pos, fp
                if self.rollback is None and not self._stopping:
                    # posted to the peers: what everybody executed is forgotten
                    self._on_executed(self.executed_pos)
                while len(self.recent) > RECENT:
                    self.recent.popitem(last=False)
                self._on_answers(answers)

    def hold(self, payloads: Sequence[tuple[TxMeta, list]]) -> None:
        """Payloads durable in the agreement log, with their operations. Past HELD
        entries or HELD_BYTES held and offered together, the oldest held go: one never
        agreed here, or agreed before it arrived (offers only come from what was held
        within them, so they stay within them too)."""
        held = self._held
        for tx, operations in payloads:
            if tx.txid not in held:
                held[tx.txid] = (tx.size, operations)
                self._held_bytes += tx.size
        while held and (len(held) + len(self._offered) > HELD
                        or self._held_bytes > HELD_BYTES):
            self._held_bytes -= held.popitem(last=False)[1][0]

    def agreed(self, seq: int, synchronised: Sequence[TxMeta]) -> None:
        """Transactions durable in the agreed queue, which ends with them at position
        ``seq`` (Ready.seq): those whose payload is held are offered to the executor."""
        first = seq - len(synchronised) + 1
        for k, tx in enumerate(synchronised):
            held = self._held.pop(tx.txid, None)
            if held is None:
                continue
            if first + k > self.executed_pos:  # its bytes now count as offered
                self._offered[first + k] = (held[0], Agreed(first + k, tx.txid, held[1],
                                                            tx.timestamp))
            else:
                self._held_bytes -= held[0]
        self.wake()

    def forget_offered(self) -> None:
        """The positions offered no longer hold (a truncation, a core rebuilt): what is
        agreed there is read from the log."""
        self._held_bytes -= sum(size for size, _ in self._offered.values())
        self._offered.clear()

    def _take_offered(self, limit: int) -> list[Agreed]:
        """The run of offered transactions right after the executed position (at most
        ``limit``), taken out; offers at or before that position are dropped."""
        offered, done = self._offered, self.executed_pos
        while offered:
            first = next(iter(offered))
            if first > done:
                break
            self._held_bytes -= offered.pop(first)[0]
        out: list[Agreed] = []
        while len(out) < limit and (o := offered.pop(done + len(out) + 1, None)) is not None:
            self._held_bytes -= o[0]
            out.append(o[1])
        return out

    # ---- split recovery ----

    def split_point_moved(self, point: int | None) -> None:
        self.split_point = point
        if point is None:
            self._backup_for = None
            self._wake.set()
            return
        log.warning("sync: split detected; last known good state: agreed position %d", point)
        if not self._backs_up():
            return
        backup = self.split_backup_name and self._backup_recorded_at == point
        if not backup:
            self._backup_for = point
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.create_task(self._split_backup(point),
                                                   name="split backup"))

    async def _split_backup(self, point: int) -> None:
        """Simple/Smart: a backup from an up-to-date worker at split detection, of the
        state after the split point (the executor runs exactly up to it first)."""
        name = f"split-{self.node_id}"
        while not self._stopping and self.split_point == point:
            if self.executed_pos < point:
                self._wake.set()
                await asyncio.sleep(0.05)
                continue
            try:
                record = await self.cluster.backup(name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("sync: split backup not taken yet: %s", exc)
                await asyncio.sleep(1.0)
                continue
            await self.db(self.agreement.record_split_backup, name, point)
            self.split_backup_name, self._backup_recorded_at = name, point
            log.warning("sync: split backup '%s' taken at agreed position %d (seq %d)", name,
                        point, record["seq"])
            break
        if self._backup_for == point:
            self._backup_for = None
        self._wake.set()

    def start_rollback(self) -> None:
        self.forget_offered()
        if self.rollback is None or self.rollback.done():
            self.rollback = asyncio.create_task(self._roll_back(), name="split rollback")

    async def _roll_back(self) -> None:
        """Return this data centre to the state at the truncation point: restore every
        worker from the split backup when something after it was executed here."""
        db, cluster = self.db, self.cluster
        restores, wait = 0, UNREACHABLE_WAIT
        try:
            while True:
                owed = await db(self.agreement.rollback_owed)
                if owed is None:
                    break
                target = await db(self.agreement.state_at, owed)
                head = (cluster.head_seq, cluster.head_fingerprint)
                away = [] if target is None else [
                    w.url for w in cluster.workers.values()
                    if w.status is not WorkerStatus.OFF and w.seq >= 0
                    and (w.seq, w.fingerprint) != target]
                if target is None or (target == head and not away):
                    # Nothing after that position was executed here (or the log and
                    # every reachable worker are back there): nothing to undo.
                    await db(self.agreement.rolled_back, owed, cluster.head_seq)
                    continue
                backup = await db(self.agreement.split_backup)
                record = await db(cluster.txlog.backup, backup[0]) if backup else None
                restores += 1
                if restores > 3:
                    self.recovery_problem = (
                        f"workers {', '.join(away)} are still not at agreed position {owed} "
                        f"after 3 restores from '{backup[0] if backup else None}'; restore "
                        "them by hand and restart")
                    log.critical("sync: %s", self.recovery_problem)
                    return
                if record is None or (record.seq, record.fingerprint) != target:
                    self.recovery_problem = (
                        f"cannot return to agreed position {owed}: no backup of that state "
                        f"(split backup: {backup}); restore the workers by hand and restart")
                    log.critical("sync: %s", self.recovery_problem)
                    return  # execution stays held: better stopped than wrong
                log.warning("sync: restoring every worker from '%s' (agreed position %d)%s",
                            record.name, owed, f"; still away from it: {', '.join(away)}"
                            if target == head else "")
                # The owed rollback stays recorded until a later turn of this loop finds
                # the log and every reachable worker at the target (a crash in between
                # restores again).
                result = await cluster.rollback(record.name,
                                                self.agreement.forget_executed_after)
                # images.restore: each worker's "restored" or "failed: <why>"
                failed = {url: res for url, res in result["workers"].items()
                          if res != "restored"}
                if failed:
                    # A worker, or the one holding the backup, could not be reached (one
                    # killed while the data centres were apart comes back seconds later):
                    # not a restore that left a worker elsewhere, so it does not count
                    # against the three; tried again, waiting longer each time.
                    restores -= 1
                    self.recovery_problem = (
                        f"returning to agreed position {owed} from '{record.name}': "
                        + "; ".join(f"{u} {r}" for u, r in sorted(failed.items()))
                        + f"; trying again in {wait:g} s")
                    log.warning("sync: %s", self.recovery_problem)
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, UNREACHABLE_WAIT_MAX)
            self.executed_pos, self.executed_fp = await db(self.agreement.executed)
            self.recent.clear()
            self.recovery_problem = None
            self._on_rolled_back(self.executed_pos)
            log.warning("sync: this data centre is back at agreed position %d; executing the "
                        "re-agreed transactions", self.executed_pos)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.recovery_problem = f"rollback failed: {exc}"
            log.exception("sync: rollback failed")
            return
        self.rollback = None
        self._wake.set()
