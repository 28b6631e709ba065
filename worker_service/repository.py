"""One repository in an embedded pyoxigraph store on disk, changed only by changesets.

Layout of the data directory::

    data-dir/current -> gen-000003      symlink, swapped atomically when an image arrives
    data-dir/gen-000003/store/          pyoxigraph (RocksDB)
    data-dir/gen-000003/state.json      seq, txid, fingerprint, quad count, namespaces
    data-dir/gen-000003/journal.jsonl   the group being applied (empty between groups)
    data-dir/gen-000003/executed*.jsonl the last transactions executed as probe (journal.py)
    data-dir/backups/<name>/            named images (image.tar.sz + manifest.json)
    data-dir/tmp/                       images in transit

Invariants (issue "worker node"): the store, its sequence number and its fingerprint
agree after kill -9 at any instant (journal.py); a reader never sees a half-applied
changeset (rwlock.py); the fingerprint is kept incrementally and a full recomputation
agrees with it (fingerprint.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyoxigraph as ox

from rdfcore import fingerprint
from rdfcore.changeset import Changeset, apply_to
from txinfra import heap
from worker_service import forwarded, image, journal, state
from worker_service.forwarded import ApplyEntry
from worker_service.rwlock import RWLock
from worker_service.state import WorkerState
from worker_service.transaction import BlankNodeMinter

log = logging.getLogger("txcluster.worker")


class WorkerError(Exception):
    """A request the worker refuses; ``status`` is the HTTP status to answer with."""

    status = 400


class SequenceError(WorkerError):
    status = 409


class FingerprintMismatch(WorkerError):
    status = 409


class NotExact(WorkerError):
    """A changeset that does not describe a real change of this worker's store (adds a
    quad it holds, removes one it lacks, drops a graph without its quads): applying it
    would make the kept fingerprint and quad count lie about the store."""

    status = 409


class ControlQueryFailed(WorkerError):
    status = 409


class Busy(WorkerError):
    status = 503


@dataclass(frozen=True)
class ExecuteResult:
    changeset: Changeset
    state: WorkerState
    duration_s: float
    wire: dict | None = None  # changeset.to_wire(), when it was computed already


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass  # RocksDB compaction removed it meanwhile
    return total


class Repository:
    def __init__(self, repository_id: str, data_dir: Path, *, sync_writes: bool = False,
                 verify_on_start: bool = True) -> None:
        self.id = repository_id
        self.data_dir = Path(data_dir)
        self._sync = sync_writes
        self._lock = RWLock()
        # Only one image/backup/restore at a time; they run beside normal writes.
        self._maintenance = threading.Lock()
        self.activity = "ON"  # worker-side view: ON, OUT_OF_SYNC, REPLICATION_SERVER/CLIENT
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "tmp").mkdir(exist_ok=True)
        self._open_current()
        self._recover()
        self._cleanup_generations()
        if verify_on_start:
            self.verify(repair_state=True)

    # ---- opening, recovery ----

    @property
    def _current(self) -> Path:
        return self.data_dir / "current"

    def _open_current(self) -> None:
        if not self._current.exists():
            gen = self.data_dir / "gen-000001"
            (gen / "store").mkdir(parents=True, exist_ok=True)
            state.save(gen, WorkerState())
            self._point_current_to(gen)
        self._gen = self._current.resolve()
        self.store = ox.Store(str(self._gen / "store"))
        self._state = state.load(self._gen)
        self._journal = journal.Journal(self._gen, self._sync)
        self.executed = journal.Executed(self._gen)

    def _point_current_to(self, gen: Path) -> None:
        link = self.data_dir / "current.new"
        link.unlink(missing_ok=True)
        link.symlink_to(gen.name)
        os.replace(link, self._current)  # atomic: either the old or the new generation

    def _recover(self) -> None:
        """Finish or take back what an interrupted write left (see journal.py).

        The state file is saved before the journal is removed, so a journal whose
        transactions the state already includes was committed and is only removed."""
        pending = self._journal.pending()
        if pending is None:
            return
        header = pending.header
        if not header:
            log.info("empty journal removed")
        elif header["mode"] == journal.UNDO:
            if self._state.seq >= header["seq"]:
                log.info("journal of committed execute from seq %s removed", header["seq"])
            else:
                log.warning("undoing interrupted execute from seq %s (%d steps)",
                            header["seq"], len(pending.steps))
                for cs in reversed(pending.steps):
                    apply_to(self.store, cs.inverse())
        else:
            after = WorkerState.from_json(header["after"])
            if self._state.seq >= after.seq:
                log.info("journal of committed apply up to seq %s removed", after.seq)
            elif not pending.sealed:
                log.warning("apply up to seq %s was interrupted while being journaled: it "
                            "never reached the store", after.seq)
            else:
                log.warning("redoing interrupted apply up to seq %s", after.seq)
                # Each changeset sets quads present or absent: replaying the whole
                # sequence in order from any partial state gives the final state.
                for cs in pending.steps:
                    apply_to(self.store, cs)
                self._state = after
                state.save(self._gen, self._state, self._sync)
        self._journal.discard()

    def _cleanup_generations(self) -> None:
        for path in self.data_dir.glob("gen-*"):
            if path.resolve() != self._gen:
                shutil.rmtree(path, ignore_errors=True)
        for path in (self.data_dir / "tmp").iterdir():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """Flush and release the store (pyoxigraph has no close(): dropping the last
        reference closes RocksDB and frees its LOCK for the next opener)."""
        with self._lock.write():
            if self.store is not None:
                self.store.flush()
                self.store = None  # type: ignore[assignment]
            self.executed.close()
            heap.collect()

    # ---- reading ----

    @contextmanager
    def reading(self) -> Iterator[ox.Store]:
        """Hold while *starting* a query; its results come from a consistent snapshot."""
        with self._lock.read():
            yield self.store

    @contextmanager
    def reading_now(self) -> Iterator[ox.Store | None]:
        """``reading()`` if the lock is free now, else None at once (no wait)."""
        with self._lock.read_now() as taken:
            yield self.store if taken else None

    @property
    def namespaces(self) -> dict[str, str]:
        return dict(self._state.namespaces)

    def state(self) -> WorkerState:
        return self._state

    def size_on_disk(self) -> int:
        return _dir_size(self._gen / "store")

    def verify(self, repair_state: bool = False) -> dict:
        """Full streamed recomputation of the fingerprint against the kept one.

        With ``repair_state`` a mismatch (a store changed behind the worker's back) makes
        the worker report the real fingerprint, so its master sees an unknown state and
        replicates it ("Replicating (out of sync)").
        """
        with self._lock.read():
            kept = self._state
            store = self.store
            # dump() reads a snapshot; the lock only has to cover its start, but
            # holding it keeps ``kept`` and the content paired.
            actual, count = fingerprint.recompute(store)
        matches = actual == kept.fingerprint and count == kept.quads
        if not matches:
            log.error("fingerprint mismatch: kept %s (%d quads), store %s (%d quads)",
                      fingerprint.to_hex(kept.fingerprint), kept.quads,
                      fingerprint.to_hex(actual), count)
            if repair_state:
                with self._lock.write():
                    self._state = self._state.evolve(fingerprint=actual, quads=count)
                    state.save(self._gen, self._state, self._sync)
                    self.activity = "OUT_OF_SYNC"
        return {"matches": matches, "fingerprint": fingerprint.to_hex(actual), "quads": count,
                "kept_fingerprint": fingerprint.to_hex(kept.fingerprint),
                "kept_quads": kept.quads}

    # ---- writing ----

    def _check_next(self, seq: int) -> None:
        if seq != self._state.seq + 1:
            raise SequenceError(
                f"sequence number {seq} does not follow this worker's {self._state.seq}"
            )

    def execute(self, seq: int | None, txid: str, operations: Sequence,
                control_queries: Sequence[str] = (), timestamp_ms: int | None = None
                ) -> ExecuteResult:
        """Probe execution of one transaction; raises its error (see execute_batch)."""
        with self._lock.write():
            first = self._state.seq + 1 if seq is None else seq
            [outcome] = self._execute_locked(first, [(txid, operations, timestamp_ms)],
                                             control_queries)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def execute_batch(self, start_seq: int, transactions: Sequence[tuple],
                      control_queries: Sequence[str] = (), wait: bool = True
                      ) -> list[ExecuteResult | Exception] | None:
        """Probe execution of a group of transactions (the master's group commit).

        Each transaction is executed on its own: its exact changeset is computed and applied
        step by step, then the control queries (ASK, all must be true) run; on any failure
        that transaction alone is taken back and its error returned in its place. The
        successful ones get consecutive sequence numbers from ``start_seq``. One journal
        and one state write cover the whole group. A transaction given as an exception
        instead of its operations (refused by the caller before anything ran, e.g. a
        syntax error) is that refusal, in its place. A transaction is (txid, operations[,
        timestamp_ms]); its fresh values come from it alone, never from seq (determinism.py).
        Every outcome is kept in the executed journal once the group is committed.
        ``wait`` False: None at once, nothing executed, unless the write lock is free now
        (the event loop never waits for a lock)."""
        with self._lock.write() if wait else self._lock.write_now() as taken:
            if taken is False:
                return None
            return self._execute_locked(start_seq, transactions, control_queries)

    def _execute_locked(self, start_seq: int, transactions: Sequence[tuple],
                        control_queries: Sequence[str]) -> list[ExecuteResult | Exception]:
        self._check_next(start_seq)
        current = self._state
        outcomes: list[ExecuteResult | Exception] = []
        executed: list[dict] = []  # for the executed journal, in execution order
        self._journal.begin({"seq": start_seq, "txid": transactions[0][0] if transactions
                             else None, "mode": journal.UNDO})
        try:
            for txid, operations, *when in transactions:
                if isinstance(operations, Exception):
                    outcomes.append(operations)
                    executed.append(_refusal(txid, current.seq, operations))
                    continue
                started = time.perf_counter()
                seq = current.seq + 1
                minter = BlankNodeMinter(txid, when[0] if when else None)
                namespaces = dict(current.namespaces)
                steps: list[Changeset] = []
                total = Changeset()
                # The wire form of a one-step transaction (most are) is its step's:
                # written once for the journal, the answer and the fingerprint.
                total_wire: dict | None = None
                try:
                    for op in operations:
                        for step in op.steps():
                            cs = step.changeset(self.store, minter, namespaces)
                            if cs.empty:
                                continue
                            wire = cs.to_wire()
                            self._journal.append(cs, wire)
                            steps.append(cs)
                            apply_to(self.store, cs)
                            cs.apply_namespaces(namespaces)
                            total, total_wire = (cs, wire) if total.empty else \
                                (total.then(cs), None)
                    self._run_control_queries(control_queries)
                except Exception as exc:
                    # Take this transaction back; journaled inverses are idempotent, so a
                    # crash later in the group undoes everything in reverse safely.
                    for cs in reversed(steps):
                        apply_to(self.store, cs.inverse())
                    outcomes.append(_detached(exc))
                    executed.append(_refusal(txid, current.seq, exc))
                    continue
                wire = total_wire or total.to_wire()
                current = current.evolve(
                    seq=seq, txid=txid,
                    fingerprint=total.moved_fingerprint(current.fingerprint, wire),
                    quads=current.quads + len(total.added) - len(total.removed),
                    namespaces=namespaces,
                )
                duration = time.perf_counter() - started
                outcomes.append(ExecuteResult(total, current, duration, wire))
                executed.append({"seq": seq, "txid": txid, "changeset": wire,
                                 "fingerprint": fingerprint.to_hex(current.fingerprint),
                                 "quads": current.quads, "duration_s": duration})
        except BaseException:
            # Not a transaction's own error (e.g. the store failed): take the group back.
            pending = self._journal.pending()
            for cs in reversed(pending.steps if pending else []):
                apply_to(self.store, cs.inverse())
            self._journal.discard()
            raise
        if current is not self._state:
            state.save(self._gen, current, self._sync)
            self._state = current
        self._journal.committed()
        # After the state is saved: every line is of a committed state (journal.py).
        try:
            self.executed.record(executed)
        except OSError as exc:  # committed all the same; only a roll-forward needs it
            log.warning("executed journal not written (%s): a master that crashes now "
                        "recovers this worker without rolling forward", exc)
        return outcomes

    def _run_control_queries(self, queries: Sequence[str]) -> None:
        for text in queries:
            try:
                result = self.store.query(text)
            except SyntaxError as exc:
                raise ControlQueryFailed(f"control query is not valid SPARQL: {exc}") from None
            answer = bool(result) if isinstance(result, ox.QueryBoolean) else None
            del result  # dropped by its own thread, not with a raised exception's frame
            if answer is None:
                raise ControlQueryFailed(f"control query must be an ASK query: {text}")
            if not answer:
                raise ControlQueryFailed(f"control query failed (returned false): {text}")

    def execute_local(self, operations: Sequence) -> ExecuteResult:
        """A write sent to this worker's RDF4J API with the cluster credential."""
        from worker_service.wire_parsing import parse_operations

        ops = parse_operations(list(operations)) if operations and isinstance(
            operations[0], dict) else list(operations)
        return self.execute(None, str(uuid.uuid4()), ops)

    def apply(self, seq: int, txid: str, changeset: Changeset,
              expected_fingerprint: int | None = None, wire: dict | None = None) -> ExecuteResult:
        [result] = self.apply_batch([ApplyEntry(seq, txid, changeset, expected_fingerprint, wire)])
        return result

    def apply_batch(self, entries: Sequence[ApplyEntry], raw: bytes | None = None,
                    wait: bool = True) -> list[ExecuteResult] | None:
        """Apply changesets computed by the probe worker, in order, as one journaled write.

        Refused as a whole, changing nothing, when the sequence numbers do not follow ours
        or when a result would not be the expected fingerprint (this worker was not in the
        state the changeset was computed against). ``raw`` is the request as received
        ({"entries": [...]}), journaled without re-serialising the changesets. ``wait``
        False: None at once, nothing applied, unless the write lock is free now."""
        with self._lock.write() if wait else self._lock.write_now() as taken:
            if taken is False:
                return None
            return self._apply_locked(entries, raw)

    @property
    def write_count(self) -> int:
        """How many times a writer has taken the lock: the same number means the same
        store (read under ``reading()``, no writer can be changing it meanwhile)."""
        return self._lock.writes

    @property
    def syncs_writes(self) -> bool:
        """Whether the journal and state file are fsynced (``sync-writes``)."""
        return self._sync

    def _apply_locked(self, entries: Sequence[ApplyEntry], raw: bytes | None
                      ) -> list[ExecuteResult]:
        started = time.perf_counter()
        current = self._state
        afters: list[WorkerState] = []
        for e in entries:
            if e.seq != current.seq + 1:
                raise SequenceError(
                    f"sequence number {e.seq} does not follow this worker's {current.seq}"
                )
            # From the text as received when there is one: the probe wrote it one
            # quad per line (changeset.nquads); any other text hashes to another
            # fingerprint than the probe's, and the batch is refused.
            after_fp = e.changeset.moved_fingerprint(current.fingerprint, e.wire)
            if e.expected_fingerprint is not None and after_fp != e.expected_fingerprint:
                if e.added_text is not None and e.wire is not None:
                    # Text loaded unparsed: say so when it is not even N-Quads.
                    try:
                        Changeset.from_wire(e.wire)
                    except ValueError as exc:
                        raise WorkerError(f"seq {e.seq}: {exc}") from None
                raise FingerprintMismatch(
                    f"applying seq {e.seq} would give fingerprint "
                    f"{fingerprint.to_hex(after_fp)}, expected "
                    f"{fingerprint.to_hex(e.expected_fingerprint)}: this worker is not in"
                    f" the state the changeset was computed against"
                )
            namespaces = dict(current.namespaces)
            e.changeset.apply_namespaces(namespaces)
            current = current.evolve(
                seq=e.seq, txid=e.txid, fingerprint=after_fp,
                quads=current.quads + len(e.changeset.added) + e.added_quads
                - len(e.changeset.removed),
                namespaces=namespaces,
            )
            afters.append(current)
        if not entries:
            return []
        group = forwarded.Group.of(entries)
        if any(e.expected_fingerprint is None for e in entries):
            # An expected fingerprint proves this worker is in the state the probe
            # computed the changeset against (so it is exact here too); without one,
            # exactness is checked against the store. (A signed apply adding a quad
            # already held would otherwise make the kept state lie.)
            problem = forwarded.inexact(self.store, group.total, self._state, current)
            if problem is not None:
                raise NotExact(f"changesets refused, not exact against this worker's "
                               f"store: {problem}")
        self._journal.begin({"seq": current.seq, "txid": current.txid,
                             "mode": journal.REDO, "after": current.to_json()})
        if raw is not None:
            self._journal.append_entries(raw)
        else:
            for e in group.entries:
                self._journal.append(e.changeset, e.wire)
        self._journal.seal()
        group.write(self.store)
        state.save(self._gen, current, self._sync)
        self._state = current
        self._journal.committed()
        duration = (time.perf_counter() - started) / len(entries)
        return [ExecuteResult(e.changeset, a, duration) for e, a in zip(group.entries, afters,
                                                                         strict=True)]

    # ---- images, backups ----

    def create_image(self, target: Path, compress: bool = True,
                     started: Callable[[dict], None] | None = None,
                     progress: Callable[[int], None] | None = None) -> dict:
        """Write an image of the current state to ``target``; return its manifest.

        The write lock is held only while pyoxigraph makes its checkpoint (hard links,
        milliseconds —
        docs/design/dependencies.md#pyoxigraph-the-workers-store), so the image pairs the store
        with its exact state. ``started`` is told that state as soon as the checkpoint is
        made, ``progress`` the bytes written so far (a backup read while it is written,
        worker_service/backups.py)."""
        with self._maintenance:
            self.activity, previous = "REPLICATION_SERVER", self.activity
            work = self.data_dir / "tmp" / f"checkpoint-{uuid.uuid4().hex}"
            try:
                work.mkdir()
                with self._lock.write():
                    self.store.backup(str(work / "store"))
                    snap = self._state
                    state.export_json(work, snap)
                if started is not None:
                    started({"repository": self.id, **snap.to_json()})
                digest, size = image.write_image(
                    {"store": work / "store", state.STATE_FILE: work / state.STATE_FILE}, target,
                    compress, progress)
            finally:
                shutil.rmtree(work, ignore_errors=True)
                self.activity = previous
        return {"repository": self.id, "sha256": digest, "bytes": size, **snap.to_json()}

    def install_image(self, path: Path, sha256: str) -> WorkerState:
        """Verify and unpack an image file, then swap it in with its state, atomically."""
        return self.install_image_stream(image.file_chunks(path), sha256)

    def install_image_stream(self, chunks: Iterable[bytes],
                             sha256: str | Callable[[], str]) -> WorkerState:
        """Unpack an image as its bytes arrive (``image.extract_image``: into a new
        generation nothing uses yet), then, once its checksum holds, swap it in with its
        state, atomically. Writes go on meanwhile on the current generation."""

        def unpack(gen: Path) -> WorkerState:
            image.extract_image(chunks, sha256, gen)
            if not (gen / "store").is_dir() or not (gen / state.STATE_FILE).is_file():
                raise image.ImageError("image lacks store/ or state.json")
            return state.load(gen)

        new_state = self._install_generation(unpack)
        log.info("installed image at seq %d, fingerprint %s", new_state.seq,
                 fingerprint.to_hex(new_state.fingerprint))
        return new_state

    def install_store(self, store_dir: Path, new_state: WorkerState) -> WorkerState:
        """Swap in a store built beside this one (a bulk load, worker_service.bulk_load)
        with its state, atomically, only while this repository is empty (seq 0, no
        quads): ValueError otherwise, changing nothing. ``store_dir`` is moved."""

        def move(gen: Path) -> WorkerState:
            gen.mkdir()
            os.replace(store_dir, gen / "store")
            state.save(gen, new_state, self._sync)
            return new_state

        self._install_generation(move, only_if_empty=True)
        log.info("installed a bulk load of %d quads, fingerprint %s", new_state.quads,
                 fingerprint.to_hex(new_state.fingerprint))
        return new_state

    def _install_generation(self, fill: Callable[[Path], WorkerState],
                            only_if_empty: bool = False) -> WorkerState:
        """``fill`` writes a new generation directory (store/ + its state); it replaces
        the current one at once, under the write lock (queries see the old or the new)."""
        with self._maintenance:
            self.activity, previous = "REPLICATION_CLIENT", self.activity
            number = int(self._gen.name.split("-")[1]) + 1
            gen = self.data_dir / f"gen-{number:06d}"
            shutil.rmtree(gen, ignore_errors=True)
            try:
                new_state = fill(gen)
                new_store = ox.Store(str(gen / "store"))
            except BaseException:
                self._drop_generation(gen, previous)
                raise
            with self._lock.write():
                refused = only_if_empty and (self._state.seq or self._state.quads)
                if not refused:
                    old = self._gen
                    self._point_current_to(gen)
                    self.store, self._gen, self._state = new_store, gen, new_state
                    self._journal.close()
                    self._journal = journal.Journal(gen, self._sync)
                    self.executed.close()
                    self.executed = journal.Executed(gen)
                    self.activity = "ON"
            if refused:
                del new_store  # releases its RocksDB files before they are removed
                self._drop_generation(gen, previous)
                raise ValueError(f"repository '{self.id}' is no longer empty (seq "
                                 f"{self._state.seq}, {self._state.quads} quads)")
            # Queries still reading the old store keep their open files (POSIX unlink).
            state.forget(old)
            shutil.rmtree(old, ignore_errors=True)
        return new_state

    def _drop_generation(self, gen: Path, activity: str) -> None:
        heap.collect()
        state.forget(gen)
        shutil.rmtree(gen, ignore_errors=True)
        self.activity = activity


def _detached(exc: Exception) -> Exception:
    """``exc`` without traceback and context, kept as an outcome: with them it holds the
    failed transaction's frames, one of which holds it (the outcomes list), a cycle the
    collector frees on any thread, with any pyoxigraph result iterator a frame held (it
    must be dropped by its own thread: "unsendable", worker_service/api/queries.py)."""
    exc.__traceback__ = exc.__context__ = exc.__cause__ = None
    return exc


def _refusal(txid: str, at_seq: int, exc: Exception) -> dict:
    return {"txid": txid, "after": at_seq, "status": getattr(exc, "status", 400),
            "error": str(exc)}
