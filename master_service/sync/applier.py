"""The applier: what a driver does with the core's Readies before it acts on any of them
(the Ready contract, ready.py) — persist them, in order, in as few atomic writes as their
order allows, through a ``CoreStorage`` (storage.py).

No IO of its own: the master's driver (driver.py) runs each write in the log's thread
over ``SqliteStorage``, the simulator (tests/sync_sim.py) runs the same applier over
``MemoryStorage`` — so what the simulator checks is what the master persists.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from master_service.sync.messages import TxMeta
from master_service.sync.ready import Compaction, Incoming, Ready
from master_service.sync.storage import CoreStorage

__all__ = ["Applier", "Batch", "group_commits"]

# Readies in the order the core gave them, each with the payloads stored with it
Batch = Sequence[tuple[Ready, Sequence[tuple[TxMeta, Any]]]]


class Applier:
    """Persists batches of Readies through one storage (module docstring)."""

    def __init__(self, storage: CoreStorage) -> None:
        self.storage = storage

    def commits(self, batch: Batch) -> Iterator[dict[str, Any]]:
        """The atomic writes ``batch`` needs, in order; each is the arguments of
        ``CoreStorage.persist``. Readies with nothing the storage would write give none
        (most statuses a peer answers with only move the counter below its persisted
        mark): the driver acts on them without the log thread's round trip. Lazy: a
        write is asked about once the one before it was made."""
        for merged in group_commits(batch):
            if self.storage.writes(**merged):
                yield merged

    def write(self, commit: dict[str, Any]) -> None:
        self.storage.persist(**commit)

    def apply(self, batch: Batch) -> None:
        """Persist ``batch`` (where the caller may block on the storage)."""
        for commit in self.commits(batch):
            self.write(commit)


def group_commits(batch: Batch) -> list[dict[str, Any]]:
    """Queued Readies (each with the payloads stored with it) merged, in order, into as
    few durable transactions as their order allows — one, unless a split recovery
    truncated the agreed queue (the truncation must come after the appends of the
    Readies before it and before those of its own). Each is the arguments of
    ``CoreStorage.persist``; Readies with nothing to persist give none."""
    starts = [i for i, (ready, _) in enumerate(batch) if ready.truncated is not None and i]
    bounds = list(zip([0, *starts], [*starts, len(batch)], strict=True))
    merged = (_merged(batch[a:b]) for a, b in bounds)
    return [m for m in merged if m is not None]


def _merged(batch: Batch) -> dict[str, Any] | None:
    truncated = batch[0][0].truncated if batch else None
    split_point: tuple[int | None] | None = None
    compacted: Compaction | None = None
    counter = None
    incoming: dict[str, Incoming] = {}
    synchronised: list[TxMeta] = []
    payloads: list = []
    for ready, pays in batch:
        if ready.counter is not None:
            counter = max(counter or 0, ready.counter)
        for item in ready.incoming:
            incoming.pop(item.tx.txid, None)
            # A transaction merged from a peer but not acquired is not persisted (one
            # fsync less on the commit path): no status of ours lists it until its
            # payload is stored, which persists it; after a crash the peers' next
            # statuses bring it back. The safety argument only needs what we posted.
            if item.acquired:
                incoming[item.tx.txid] = item
        for tx in ready.synchronised:
            incoming.pop(tx.txid, None)  # agreed in this batch: never incoming on disk
        synchronised.extend(ready.synchronised)
        payloads.extend(pays)
        if ready.split_point_changed:
            split_point = (ready.split_point,)
        if ready.compacted is not None:
            compacted = ready.compacted  # floors only rise: the last one covers all
    if (counter is None and not incoming and not synchronised and not payloads
            and truncated is None and split_point is None and compacted is None):
        return None
    return {"counter": counter, "incoming": list(incoming.values()),
            "synchronised": synchronised, "payloads": payloads, "split_point": split_point,
            "truncate_after": None if truncated is None else truncated.after_seq,
            "compacted": compacted}
