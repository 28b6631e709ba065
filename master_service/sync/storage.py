"""What the sync protocol keeps durably, as narrow interfaces (``typing.Protocol``).

The core (``SyncNode``) persists nothing itself: each of its steps gives a ``Ready``
whose durable part the applier (applier.py) writes through ``CoreStorage`` in one atomic
write, before anything of it is acted on (the Ready contract, ready.py); a restart
resumes from ``CoreStorage.load``. Two implementations: ``SqliteStorage``
(sqlite_storage.py, the master's transaction log file) and ``MemoryStorage``
(memory_storage.py, the simulator's nodes). The rooms around the core that only the
real master has — executing agreed transactions in this data centre (execution.py,
ordering.py) and seeding it from a peer's image (seeding.py) — need a little more of
the SQLite storage, grouped here as ``ExecutionStorage`` and ``SeedingStorage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from master_service.sync.messages import SeedPoint, TxMeta
from master_service.sync.ready import Compaction, Incoming, PersistentState
from master_service.txlog.log import State

__all__ = ["Agreed", "CoreStorage", "ExecutionStorage", "SeedingStorage", "StorageError"]


class StorageError(Exception):
    """The storage refuses a write that contradicts what it holds (nothing was written)."""


@dataclass(frozen=True)
class Agreed:
    """An agreed transaction waiting to be executed in this data centre."""

    pos: int
    txid: str
    operations: list[dict[str, Any]]
    timestamp: int  # the agreed one (ms, TxMeta.timestamp): NOW() in every data centre


class CoreStorage(Protocol):
    """What the core needs persisted: the state to start from, one Ready (or several
    merged, applier.py) written atomically, and the payloads it holds."""

    def load(self) -> tuple[PersistentState, list[str]]:
        """The persisted protocol state, and the agreed transactions whose payload we lack."""

    def writes(self, *, counter: int | None, incoming: Sequence[Incoming],
               synchronised: Sequence[TxMeta], payloads: Sequence[Any] = (),
               truncate_after: int | None = None,
               split_point: tuple[int | None] | None = None,
               compacted: Compaction | None = None) -> bool:
        """Would ``persist`` with these arguments write anything? (Pure.)"""

    def persist(self, *, counter: int | None, incoming: Sequence[Incoming],
                synchronised: Sequence[TxMeta],
                payloads: Sequence[tuple[TxMeta, Sequence[dict[str, Any]]]] = (),
                truncate_after: int | None = None,
                split_point: tuple[int | None] | None = None,
                compacted: Compaction | None = None) -> None:
        """In one atomic write: the payloads, the counter, first a truncation (agreed
        entries after ``truncate_after`` leave; they are pending again and the data
        centre owes a rollback there), incoming upserts, synchronised appends (which
        leave the incoming queue), the split point (a 1-tuple: None is recovered), last
        the compaction (the agreed entries up to its floor leave, with their payloads)."""

    def payload(self, txid: str) -> bytes | None:
        """The canonical payload of a transaction we hold (for a peer acquiring it)."""


class ExecutionStorage(Protocol):
    """What executing agreed transactions in this data centre reads and records
    (execution.py, ordering.py): which to execute next, the state after each, and a
    split recovery's backup and owed rollback."""

    def executed(self) -> tuple[int, str]: ...
    def to_execute(self, after_pos: int, limit: int) -> list[Agreed]: ...
    def record_executed(self, done: Sequence[tuple[int, str, str, int]],
                        entries: Sequence[tuple], failures: Sequence[tuple[str, str]],
                        now: float) -> None: ...
    def state_at(self, pos: int) -> tuple[int, str] | None: ...
    def rollback_owed(self) -> int | None: ...
    def forget_executed_after(self, seq: int) -> None: ...
    def rolled_back(self, pos: int, seq: int) -> None: ...
    def record_split_backup(self, name: str, pos: int) -> None: ...
    def split_backup(self) -> tuple[str, int] | None: ...


class SeedingStorage(Protocol):
    """What seeding a data centre from a peer's image, or serving one, reads and records
    (seeding.py)."""

    def position_of(self, seq: int, fingerprint: str) -> int | None: ...
    def known_ids(self, pos: int) -> tuple[int, list[str]]: ...
    def seeded(self, point: SeedPoint, state: State) -> None: ...
    def hold_seed(self, requester: str, pos: int, until: int) -> None: ...
    def seed_holds(self, now: int) -> list[tuple[str, int, int]]: ...
