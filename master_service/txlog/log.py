"""The master's transaction log in SQLite (sqlite-utils), one file per master.

Theory of operation
-------------------
A peered master logs every transaction *pending* (its payload) before it is agreed and
executed; one data centre records a whole group after its probe executed it, in one SQLite
transaction (record_group; docs/design/write-path.md#group-commit-and-the-log). When the
probe has applied a transaction and the control queries pass, the master appends a *synchronised
queue* entry — sequence number, the changeset the probe computed, the repository fingerprint and
quad count after it, the probe's apply time — and marks the transaction committed; on failure it is
marked failed. Workers are kept in sync by replaying sync-queue changesets in seq order.

The log remembers the state after every retained seq, plus the *base*: the state just
before the oldest retained entry (0 / zero fingerprint / 0 quads for a new log, or a
worker's state adopted by ``reset_base``). "Does this worker's signature correspond to a
known state" (docs/design/smart-replication.md#known-states) is therefore a lookup:
``is_known_state``.

Invariants (checked at open and by the property tests):
- sync-queue seqs are consecutive: base.seq + 1 .. head.seq;
- head() is the last entry's state, or the base when the queue is empty;
- pruning (LogMaxSize / LogMaxDepth, docs/design/cluster-basics.md#the-logs-limits) drops a
  prefix of the queue and
  moves the base to the state after the last dropped entry. It may drop every entry,
  the newest included: the base then *is* the old head, so ``head()`` never changes by
  pruning and a worker at the head stays known. Only replay from older states is lost.

Durability: WAL journal with ``synchronous=FULL``, so a method that returned has its
SQLite transaction on disk — nothing is acknowledged to a client before it is durable.
Every multi-row change (group commit of pending transactions, a batch of sync entries,
a prune) is one SQLite transaction through ``Database.atomic()``, which sqlite-utils'
own writes nest into as savepoints (a plain ``with conn:`` would not: insert_all would
commit half-way).

Threads: every public method holds one re-entrant lock for its whole duration, so a TxLog
may be used from any thread (the master's single-thread txlog executor, the JMX bridge's
JVM threads reading attributes) and calls are serialised on its one connection. A
read-then-write sequence *across* calls (head(), then commit_applied(head.seq + 1)) is
still the caller's to serialise: the master does it from its one writer task. Calls
block on fsync; from asyncio run them in an executor.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sqlite_utils import Database

from rdfcore.fingerprint import from_hex, to_hex

SCHEMA_VERSION = 1
ZERO_FINGERPRINT = to_hex(0)
STATUSES = ("pending", "committed", "failed")
# Bytes the WAL is cut back to after a checkpoint (TxLog.open).
WAL_SIZE_LIMIT = 4 << 20


class TxLogError(Exception):
    """A request the log refuses (it changed nothing), or a log file that is inconsistent."""


def _fingerprint(text: str) -> str:
    from_hex(text)  # raises ValueError with the expected format
    return text.lower()


@dataclass(frozen=True)
class State:
    """A repository state the log knows: after ``seq`` the content hashes to ``fingerprint``."""

    seq: int
    fingerprint: str  # 32 lowercase hex digits
    quads: int

    def __post_init__(self) -> None:
        if self.seq < 0 or self.quads < 0:
            raise ValueError(f"seq and quads must be >= 0: {self}")
        object.__setattr__(self, "fingerprint", _fingerprint(self.fingerprint))


@dataclass(frozen=True)
class SyncEntry:
    """One synchronised-queue entry as applied in this data centre."""

    seq: int
    txid: str
    changeset: dict[str, Any]  # the changeset wire dict computed by the probe worker
    fingerprint: str  # repository fingerprint after this seq (32 hex digits)
    quads: int  # quad count after this seq
    apply_duration_s: float  # probe's measured apply time (smart replication estimate)

    def __post_init__(self) -> None:
        if self.seq < 1:
            raise ValueError(f"a sync queue seq starts at 1, got {self.seq}")
        if not self.txid:
            raise ValueError("a sync entry needs a transaction id")
        if self.quads < 0 or not self.apply_duration_s >= 0:
            raise ValueError(f"quads and apply_duration_s must be >= 0 (seq {self.seq})")
        object.__setattr__(self, "fingerprint", _fingerprint(self.fingerprint))

    @property
    def state(self) -> State:
        return State(self.seq, self.fingerprint, self.quads)


@dataclass(frozen=True)
class LoggedTransaction:
    txid: str
    timestamp: float
    origin: str  # node id of the master that accepted it
    operations: list[dict[str, Any]]
    status: str  # "pending" | "committed" | "failed"
    error: str | None
    seq: int | None  # its sync-queue seq once committed


@dataclass(frozen=True)
class WorkerRow:
    url: str
    added: float
    readable: bool
    last_status: str | None


@dataclass(frozen=True)
class Backup:
    name: str
    created: float
    seq: int
    fingerprint: str
    quads: int
    worker: str  # url of the worker that made it
    sha256: str
    bytes: int
    path: str


PendingTx = tuple[str, float, str, Sequence[dict[str, Any]]]  # txid, timestamp, origin, ops
# seq, txid, changeset wire dict, fingerprint hex, quads, apply_duration_s
SyncTuple = tuple[int, str, dict[str, Any], str, int, float]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(method: Callable[_P, _R]) -> Callable[_P, _R]:
    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with args[0]._lock:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return wrapper


class TxLog:
    """The transaction log of one master; calls are serialised by a lock (module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.RLock()
        self._history = False  # has_history(), read by _create_schema

    # ---- lifecycle ----

    @classmethod
    def open(cls, path: str | Path) -> TxLog:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Any thread may call (serialised by the lock), so sqlite3's same-thread check is off.
        db = Database(sqlite3.connect(str(path), check_same_thread=False))
        try:
            db.enable_wal()
            # Per connection: fsync the WAL at every commit (acknowledged = durable).
            db.execute("PRAGMA synchronous=FULL")
            # The WAL is reused from its start after each checkpoint, but never shrinks
            # by itself: one burst (a large transaction, a checkpoint held off by a long
            # read) would leave it at that size for good. Truncated back to the
            # autocheckpoint size (1000 pages) instead, so a master peering for months
            # keeps a txlog of its pruned size (issue 16's soak).
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            log = cls(db)
            log._create_schema()
            log._check_consistency()
        except BaseException:
            db.close()
            raise
        return log

    @_locked
    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TxLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Database]:
        """The connection under the lock, in one SQLite transaction: for the tables other
        modules keep in this file (``sync/sqlite_storage.py``: the sync protocol's queues)."""
        with self._lock, self._db.atomic():
            yield self._db

    def _create_schema(self) -> None:
        db = self._db
        with db.atomic():
            db["transactions"].create(
                {"txid": str, "timestamp": float, "origin": str, "operations": str,
                 "status": str, "error": str, "seq": int},
                pk="txid", not_null=["timestamp", "origin", "operations", "status"],
                if_not_exists=True)
            db["transactions"].create_index(["status"], if_not_exists=True)
            db["transactions"].create_index(["seq"], if_not_exists=True)
            db["sync_queue"].create(
                {"seq": int, "txid": str, "changeset": str, "fingerprint": str,
                 "quads": int, "apply_duration_s": float, "created": float},
                pk="seq", not_null=["txid", "changeset", "fingerprint", "quads",
                                    "apply_duration_s", "created"],
                if_not_exists=True)
            db["sync_queue"].create_index(["created"], if_not_exists=True)
            db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
            db["workers"].create(
                {"url": str, "added": float, "readable": int, "last_status": str},
                pk="url", if_not_exists=True)
            db["backups"].create(
                {"name": str, "created": float, "seq": int, "fingerprint": str,
                 "quads": int, "worker": str, "sha256": str, "bytes": int, "path": str},
                pk="name", if_not_exists=True)
            version = self._meta("schema_version")
            if version is None:
                self._set_meta(schema_version=SCHEMA_VERSION, base_seq=0,
                               base_fingerprint=ZERO_FINGERPRINT, base_quads=0, history=0)
            elif int(version) != SCHEMA_VERSION:
                raise TxLogError(f"transaction log schema {version}, expected {SCHEMA_VERSION}")
            elif self._meta("history") is None:  # a log written before the flag existed
                base = self.base()
                moved = (base.seq, base.fingerprint) != (0, ZERO_FINGERPRINT)
                self._set_meta(history=int(bool(db["sync_queue"].count or moved)))
            self._history = self._meta("history") == "1"

    def _check_consistency(self) -> None:
        base = self.base()
        row = self._first("select count(*) as n, min(seq) as lo, max(seq) as hi from sync_queue")
        if row["n"] and (row["lo"] != base.seq + 1 or row["hi"] - row["lo"] + 1 != row["n"]):
            raise TxLogError(
                f"sync queue is not consecutive after base {base.seq}: "
                f"{row['n']} entries from {row['lo']} to {row['hi']}")

    def _first(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        rows = list(self._db.query(sql, list(params)))
        return rows[0] if rows else {}

    # ---- meta ----

    def _meta(self, key: str) -> str | None:
        return self._first("select value from meta where key = ?", [key]).get("value")

    def _set_meta(self, **values: object) -> None:
        self._db["meta"].upsert_all(
            [{"key": k, "value": str(v)} for k, v in values.items()], pk="key")

    def _set_base(self, state: State) -> None:
        self._set_meta(base_seq=state.seq, base_fingerprint=state.fingerprint,
                       base_quads=state.quads)
        if (state.seq, state.fingerprint) != (0, ZERO_FINGERPRINT):
            self._mark_history()

    def _mark_history(self) -> None:
        if not self._history:
            self._set_meta(history=1)
            self._history = True

    @_locked
    def has_history(self) -> bool:
        """Has this log ever committed a transaction or adopted a state? A log rolled back
        to the empty state (a split recovery to agreed position 0) is at seq 0 with the
        empty fingerprint like a new one, but its workers' data is not to be adopted."""
        return self._history

    # ---- transactions ----

    @_locked
    def log_pending(self, txs: Iterable[PendingTx]) -> None:
        """Log transactions before they are executed: one SQLite transaction (group commit).

        A txid already in the log refuses the whole group.
        """
        rows = [(txid, float(timestamp), origin, json.dumps(list(operations)))
                for txid, timestamp, origin, operations in txs]
        if not rows:
            return
        txids = [r[0] for r in rows]
        if len(set(txids)) != len(txids):
            raise TxLogError("the same transaction id twice in one group")
        with self._db.atomic():
            known = self._txids_where("1", txids)
            if known:
                raise TxLogError(f"transactions already logged: {', '.join(sorted(known))}")
            # one prepared statement (insert_all looks the schema up on every call)
            self._db.conn.executemany(
                "insert into transactions (txid, timestamp, origin, operations, status) "
                "values (?, ?, ?, ?, 'pending')", rows)

    def _txids_where(self, condition: str, txids: Sequence[str]) -> set[str]:
        """Which of ``txids`` are logged and match ``condition`` (SQL over transactions)."""
        found: set[str] = set()
        for i in range(0, len(txids), 500):  # stay under SQLite's host-parameter limit
            chunk = list(txids[i:i + 500])
            found |= {r["txid"] for r in self._db.query(
                f"select txid from transactions where {condition} "
                f"and txid in ({','.join('?' * len(chunk))})", chunk)}
        return found

    @_locked
    def mark_failed(self, txid: str, error: str) -> None:
        """A pending transaction failed (probe error or control query): never in the queue."""
        with self._db.atomic():
            tx = self.transaction(txid)
            if tx is None or tx.status != "pending":
                raise TxLogError(f"transaction {txid} is not pending "
                                 f"({tx.status if tx else 'not logged'})")
            self._db["transactions"].update(txid, {"status": "failed", "error": error})

    @_locked
    def transaction(self, txid: str) -> LoggedTransaction | None:
        row = self._first("select * from transactions where txid = ?", [txid])
        return _transaction(row) if row else None

    @_locked
    def pending(self) -> list[LoggedTransaction]:
        """Logged, neither committed nor failed, in log order.

        After a master crash these were never acknowledged to their clients.
        """
        return [_transaction(r) for r in self._db.query(
            "select * from transactions where status = 'pending' order by rowid")]

    # ---- synchronised queue ----

    @_locked
    def commit_applied(self, entries: Sequence[SyncEntry | SyncTuple],
                       now: float | None = None) -> None:
        """Append sync-queue entries and mark their transactions committed, atomically.

        Seqs must follow the head consecutively, and each txid must be pending in the log;
        otherwise TxLogError and nothing is written. Entries may be SyncEntry or plain
        tuples in its field order. ``now`` stamps ``created`` (LogMaxDepth counts from it);
        default: the wall clock.
        """
        batch = [e if isinstance(e, SyncEntry) else SyncEntry(*e) for e in entries]
        if not batch:
            return
        created = time.time() if now is None else now
        with self._db.atomic():
            head = self.head()
            seqs = [e.seq for e in batch]
            if seqs != list(range(head.seq + 1, head.seq + 1 + len(batch))):
                raise TxLogError(
                    f"sync entries must be consecutive after head {head.seq}: got {seqs}")
            txids = [e.txid for e in batch]
            pending = self._txids_where("status = 'pending'", txids)
            not_pending = [t for t in txids if t not in pending]
            if not_pending or len(set(txids)) != len(txids):
                raise TxLogError(
                    f"transactions not pending in the log: {', '.join(not_pending or txids)}")
            self._db.conn.executemany(  # one prepared statement, as in log_pending
                "insert into sync_queue (seq, txid, changeset, fingerprint, quads, "
                "apply_duration_s, created) values (?, ?, ?, ?, ?, ?, ?)",
                [(e.seq, e.txid, json.dumps(e.changeset), e.fingerprint, e.quads,
                  float(e.apply_duration_s), created) for e in batch])
            self._db.conn.executemany(
                "update transactions set status = 'committed', seq = ? where txid = ?",
                [(e.seq, e.txid) for e in batch])
            self._mark_history()

    @_locked
    def record_group(self, txs: Sequence[PendingTx], entries: Sequence[SyncEntry | SyncTuple],
                     failures: Sequence[tuple[str, str]], now: float | None = None) -> None:
        """A whole group commit in ONE SQLite transaction (one fsync): the transactions,
        the failed ones marked, the executed ones appended to the synchronised queue.

        The write path of one data centre logs a group after its probe executed it, so a
        client's latency pays one durable commit, not two; nothing is acknowledged before
        this returns. All-or-nothing like its parts (savepoints nest in the outer one)."""
        with self._db.atomic():
            self.log_pending(txs)
            for txid, error in failures:
                self.mark_failed(txid, error)
            self.commit_applied(entries, now)

    @_locked
    def base(self) -> State:
        return State(int(self._meta("base_seq") or 0),
                     self._meta("base_fingerprint") or ZERO_FINGERPRINT,
                     int(self._meta("base_quads") or 0))

    @_locked
    def head(self) -> State:
        row = self._first(
            "select seq, fingerprint, quads from sync_queue order by seq desc limit 1")
        return State(**row) if row else self.base()

    @_locked
    def state_at(self, seq: int) -> State | None:
        """The state after ``seq`` if the log still knows it (the base or a retained entry)."""
        base = self.base()
        if seq == base.seq:
            return base
        row = self._first("select seq, fingerprint, quads from sync_queue where seq = ?", [seq])
        return State(**row) if row else None

    @_locked
    def is_known_state(self, seq: int, fingerprint: str) -> bool:
        """Does a worker's signature correspond to a state of the log
        (docs/design/smart-replication.md#known-states)?"""
        state = self.state_at(seq)
        return state is not None and state.fingerprint == fingerprint.lower()

    @_locked
    def entries(self, after_seq: int, limit: int = 1000) -> list[SyncEntry]:
        """Entries after ``after_seq`` in seq order, at most ``limit`` (replay to a worker).

        A state before the base cannot be replayed from: TxLogError.
        """
        base = self.base()
        if after_seq < base.seq:
            raise TxLogError(f"seq {after_seq} is before the log base {base.seq} (pruned)")
        return [_entry(r) for r in self._db.query(
            "select * from sync_queue where seq > ? order by seq limit ?", [after_seq, limit])]

    @_locked
    def apply_durations(self, after_seq: int, to_seq: int) -> float:
        """Sum of the probe's apply times of entries after_seq < seq <= to_seq.

        The incremental-update estimate of smart replication; the range must be retained.
        """
        base, head = self.base(), self.head()
        if not base.seq <= after_seq <= to_seq <= head.seq:
            raise TxLogError(f"seqs ({after_seq}, {to_seq}] are not within the log "
                             f"({base.seq}, {head.seq}]")
        row = self._first(
            "select coalesce(sum(apply_duration_s), 0.0) as total from sync_queue "
            "where seq > ? and seq <= ?", [after_seq, to_seq])
        return float(row["total"])

    @_locked
    def reset_base(self, seq: int, fingerprint: str, quads: int) -> None:
        """Adopt a worker's state as the base of an empty log.

        Used when a master starts with workers that already hold data; refused once the
        synchronised queue holds entries.
        """
        state = State(seq, fingerprint, quads)
        with self._db.atomic():
            if self._db["sync_queue"].count or self._history:
                raise TxLogError("reset_base needs a log that never committed a transaction "
                                 "nor adopted a state")
            self._set_base(state)

    @_locked
    def rebase(self, state: State) -> None:
        """Seeding (master_service/sync/seeding.py): the workers got a peer's image, so
        the log forgets its whole queue and starts over at the image's state; pending
        transactions (payloads not executed yet) stay pending."""
        with self._db.atomic():
            self._db.execute("delete from transactions where status != 'pending'")
            self._db.execute("delete from sync_queue")
            self._set_base(state)
            self._mark_history()

    @_locked
    def prune(self, max_size: int, max_depth_hours: float, now: float) -> int:
        """Apply LogMaxSize and LogMaxDepth; returns the number of sync entries dropped.

        Drops the oldest entries beyond ``max_size`` and those created more than
        ``max_depth_hours`` before ``now`` (with everything older: a prefix), with their
        transaction rows; the base moves to the state after the last dropped entry, so
        ``head()`` is unchanged. Failed transactions older than the depth are dropped too.
        On a peered master the payloads of agreed transactions that the agreed queue still
        holds are kept (peers may fetch them; sync/sqlite_storage.py forgets them with the entry).
        """
        if max_size < 0 or max_depth_hours < 0:
            raise ValueError("prune limits must be >= 0")
        cutoff = now - max_depth_hours * 3600.0
        with self._db.atomic():
            head = self.head()
            base = self.base()
            last = max(base.seq, head.seq - max_size)
            row = self._first("select max(seq) as seq from sync_queue where created < ?",
                              [cutoff])
            if row["seq"] is not None:
                last = max(last, row["seq"])
            # A peered master: the payloads of agreed transactions stay until the agreed
            # queue forgets them (sync/sqlite_storage.py): peers may still fetch them. Pruning used
            # to take them, and a restarted master then asked its peers for them for ever.
            keep = (" and txid not in (select txid from sync_agreed)"
                    if "sync_agreed" in self._db.table_names() else "")
            self._db["transactions"].delete_where(
                "status = 'failed' and timestamp < ?" + keep, [cutoff])
            if last == base.seq:
                return 0
            new_base = self.state_at(last)
            assert new_base is not None  # base.seq < last <= head.seq: retained
            self._db["transactions"].delete_where("seq <= ?" + keep, [last])
            self._db["sync_queue"].delete_where("seq <= ?", [last])
            self._set_base(new_base)
            return last - base.seq

    # ---- workers ----

    @_locked
    def add_worker(self, url: str, readable: bool, now: float | None = None) -> None:
        """Register a worker (or change whether it serves reads, keeping when it was added)."""
        with self._db.atomic():
            if self._first("select url from workers where url = ?", [url]):
                self._db["workers"].update(url, {"readable": int(readable)})
            else:
                self._db["workers"].insert(
                    {"url": url, "added": time.time() if now is None else now,
                     "readable": int(readable), "last_status": None})

    @_locked
    def remove_worker(self, url: str) -> bool:
        """Forget a worker; False if it was not registered."""
        with self._db.atomic():
            cursor = self._db.execute("delete from workers where url = ?", [url])
            return cursor.rowcount > 0

    @_locked
    def set_worker_status(self, url: str, status: str) -> None:
        with self._db.atomic():
            cursor = self._db.execute(
                "update workers set last_status = ? where url = ?", [status, url])
            if cursor.rowcount == 0:
                raise TxLogError(f"worker {url} is not registered")

    @_locked
    def workers(self) -> list[WorkerRow]:
        return [WorkerRow(r["url"], r["added"], bool(r["readable"]), r["last_status"])
                for r in self._db.query("select * from workers order by added, url")]

    # ---- backups ----

    @_locked
    def record_backup(self, backup: Backup | Mapping[str, Any]) -> None:
        """Record a backup image; reusing a name replaces it
        (docs/design/cluster-basics.md#backup-and-restore: "default" recovers workers).

        ``backup`` is a Backup or a mapping with its field names.
        """
        if not isinstance(backup, Backup):
            backup = Backup(**backup)
        _fingerprint(backup.fingerprint)
        with self._db.atomic():
            self._db["backups"].upsert(
                {"name": backup.name, "created": backup.created, "seq": backup.seq,
                 "fingerprint": backup.fingerprint.lower(), "quads": backup.quads,
                 "worker": backup.worker, "sha256": backup.sha256, "bytes": backup.bytes,
                 "path": backup.path},
                pk="name")

    @_locked
    def backup(self, name: str) -> Backup | None:
        row = self._first("select * from backups where name = ?", [name])
        return Backup(**row) if row else None

    @_locked
    def backups(self) -> list[Backup]:
        return [Backup(**r) for r in self._db.query("select * from backups order by created")]


def _transaction(row: dict[str, Any]) -> LoggedTransaction:
    return LoggedTransaction(
        txid=row["txid"], timestamp=row["timestamp"], origin=row["origin"],
        operations=json.loads(row["operations"]), status=row["status"],
        error=row["error"], seq=row["seq"])


def _entry(row: dict[str, Any]) -> SyncEntry:
    return SyncEntry(seq=row["seq"], txid=row["txid"], changeset=json.loads(row["changeset"]),
                     fingerprint=row["fingerprint"], quads=row["quads"],
                     apply_duration_s=row["apply_duration_s"])
