"""The sync protocol's durable state in memory: ``CoreStorage`` (storage.py) as the
simulator's nodes keep it across their crashes (tests/sync_sim.py), with the same
meaning as ``SqliteStorage`` (sqlite_storage.py) row for row — what a write leaves and
what ``load`` gives back — minus what only makes SQLite cheaper (the counter is kept
exactly, not as a high-water mark ahead of it).

Beside ``CoreStorage``: the position this data centre executed (``mark_executed``, as
``SqliteStorage.record_executed`` records it), the ids a seeding asks about
(``known_ids``) and a seeding itself (``seeded``), as ``SqliteStorage`` has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from master_service.sync.compaction import leaves_incoming
from master_service.sync.messages import SeedPoint, TxMeta
from master_service.sync.ready import Compaction, Incoming, PersistentState
from master_service.sync.storage import StorageError
from master_service.sync.wire import canonical_payload

__all__ = ["MemoryStorage"]


class MemoryStorage:
    """One node's durable sync state (module docstring). Read its attributes, never
    write them: every change goes through ``persist``, ``mark_executed`` or ``seeded``."""

    def __init__(self) -> None:
        self.counter = 0
        self.agreed: list[TxMeta] = []  # the synchronised entries after the floor
        self.incoming: dict[str, Incoming] = {}
        self.payloads: dict[str, Any] = {}  # txid -> operations
        self.split_point: int | None = None
        # Compaction: the entries up to ``floor`` are forgotten (with their payloads)
        self.floor = 0
        self.floor_txid: str | None = None
        self.floor_chain = ""
        self.floor_newest = 0
        self.forgotten: dict[int, str] = {}  # position -> id of a forgotten entry kept
        self.executed = 0  # this data centre executed the agreed queue up to here

    @property
    def seq(self) -> int:
        return self.floor + len(self.agreed)

    # ---- CoreStorage ----

    def load(self) -> tuple[PersistentState, list[str]]:
        incoming = tuple(sorted(self.incoming.values(), key=lambda i: i.tx.key))
        newest = max([t.timestamp for t in self.agreed] + [i.tx.timestamp for i in incoming],
                     default=0)
        state = PersistentState(tuple(self.agreed), incoming, max(self.counter, newest),
                                self.split_point, self.floor, self.floor_txid,
                                self.floor_chain, self.floor_newest)
        return state, [t.txid for t in self.agreed if t.txid not in self.payloads]

    def writes(self, *, counter: int | None, incoming: Sequence[Incoming],
               synchronised: Sequence[TxMeta], payloads: Sequence[Any] = (),
               truncate_after: int | None = None,
               split_point: tuple[int | None] | None = None,
               compacted: Compaction | None = None) -> bool:
        return bool((counter is not None and counter > self.counter) or incoming
                    or synchronised or payloads or truncate_after is not None
                    or split_point is not None or compacted is not None)

    def persist(self, *, counter: int | None, incoming: Sequence[Incoming],
                synchronised: Sequence[TxMeta],
                payloads: Sequence[tuple[TxMeta, Any]] = (),
                truncate_after: int | None = None,
                split_point: tuple[int | None] | None = None,
                compacted: Compaction | None = None) -> None:
        """As ``SqliteStorage.persist``; checked first, so that a refused write leaves
        everything as it was (one transaction)."""
        ids = {t.txid for t in self.agreed}
        if truncate_after is not None:
            if not self.floor <= truncate_after <= self.seq:
                raise StorageError(f"cannot truncate after {truncate_after}: the agreed "
                                   f"queue holds {self.floor + 1}..{self.seq}")
            ids -= {t.txid for t in self.agreed[truncate_after - self.floor:]}
        for tx in synchronised:
            if tx.txid in ids:
                raise StorageError(f"{tx.txid} is agreed twice")
            ids.add(tx.txid)
        if truncate_after is not None:
            del self.agreed[truncate_after - self.floor:]
            # the data centre owes a rollback to there: what it executed after is undone
            self.executed = min(self.executed, truncate_after)
        if split_point is not None:
            self.split_point = split_point[0]
        for tx, operations in payloads:
            self.payloads.setdefault(tx.txid, operations)  # the first copy stands
        if counter is not None and counter > self.counter:
            self.counter = counter
        for item in incoming:
            self.incoming[item.tx.txid] = item
        for tx in synchronised:
            self.agreed.append(tx)
            self.incoming.pop(tx.txid, None)
        if compacted is not None:
            self._compact(compacted)

    def payload(self, txid: str) -> bytes | None:
        ops = self.payloads.get(txid)
        return None if ops is None else canonical_payload(ops)

    def _compact(self, c: Compaction) -> None:
        """As ``SqliteStorage._compact``: the entries up to the floor leave, with their
        payloads; the ids of those after ``c.ids_after`` stay."""
        if c.floor <= self.floor:
            return
        k = c.floor - self.floor
        if k > len(self.agreed) or self.agreed[k - 1].txid != c.txid or c.floor > self.executed:
            raise StorageError(f"cannot forget up to agreed position {c.floor}: it is not "
                               f"{c.txid} executed here")
        for i, tx in enumerate(self.agreed[:k]):
            self.payloads.pop(tx.txid, None)
            if self.floor + i + 1 > c.ids_after:
                self.forgotten[self.floor + i + 1] = tx.txid
        self.forgotten = {p: t for p, t in self.forgotten.items() if p > c.ids_after}
        del self.agreed[:k]
        self.floor, self.floor_txid, self.floor_chain = c.floor, c.txid, c.chain
        self.floor_newest = c.newest

    # ---- execution and seeding ----

    def mark_executed(self, pos: int) -> None:
        """This data centre executed the agreed queue up to ``pos`` (durably)."""
        if not self.executed <= pos <= self.seq:
            raise StorageError(f"executed up to {pos}: not between {self.executed} and "
                               f"{self.seq}")
        self.executed = pos

    def known_ids(self, pos: int) -> tuple[int, list[str]]:
        """As ``SqliteStorage.known_ids``: (known_after, the ids agreed in (known_after,
        pos]) from the ids kept and the queue."""
        known_after = min(self.forgotten) - 1 if self.forgotten else self.floor
        ids = [t for p, t in sorted(self.forgotten.items()) if p <= pos]
        ids += [t.txid for t in self.agreed[:max(0, pos - self.floor)]]
        if len(ids) != pos - known_after:
            raise StorageError(f"the ids kept of agreed positions {known_after + 1}..{pos} "
                               f"are not contiguous ({len(ids)} of them)")
        return known_after, ids

    def seeded(self, point: SeedPoint) -> None:
        """As ``SqliteStorage.seeded``: this data centre now holds a peer's image of
        agreed position ``point.pos``; the incoming transactions it holds leave
        (``leaves_incoming``), the agreed queue is forgotten up to it and the entries
        after it leave too, any split is over."""
        agreed = set(point.ids)
        for txid, item in list(self.incoming.items()):
            if leaves_incoming(txid, item.tx.timestamp, point_txid=point.txid,
                               point_newest=point.newest, agreed=agreed,
                               known_after=point.known_after, position=self.seq):
                del self.incoming[txid]
                self.payloads.pop(txid, None)
        self.forgotten = {} if point.known_after is None else {
            point.known_after + i + 1: t for i, t in enumerate(point.ids)}
        for tx in self.agreed[:max(0, point.pos - self.floor)]:
            self.payloads.pop(tx.txid, None)
        self.agreed = []
        self.split_point = None
        self.floor, self.floor_txid, self.floor_chain = point.pos, point.txid, point.chain
        if point.pos:  # position 0: no floor (the newest forgotten stays as it was)
            self.floor_newest = point.newest
        self.counter = max(self.counter, point.newest)
        self.executed = point.pos
