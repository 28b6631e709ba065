"""The worker's journal: what makes apply + record crash-safe
(docs/design/write-path.md#crash-safety-on-the-worker).

pyoxigraph cannot remove and add quads in one atomic write while keeping blank node
labels (docs/design/dependencies.md#pyoxigraph-the-workers-store), so a changeset is applied as
several store writes. Before the first of them, the journal records the transaction (a header line)
and each step's changeset (one JSON line each, written before that step touches the store). Exact
changesets are idempotent and invertible, so after kill -9 at any instant the repository can finish
(``redo``: apply, already durable in the master's log) or take back (``undo``: an
execute whose control queries had not passed yet) what the journal describes.

A journal whose header seq equals the state's seq was committed: the state file is
written before the journal is removed.

``Executed`` is another journal, kept *after* the commit: the outcome of each transaction
this worker executed as probe (seq, txid, exact changeset, fingerprint and quads after
it; or the refusal). A master killed between the probe's commit and its own record of
it finds this worker one group ahead of its log; it reads these records
(GET /cluster/journal) and rolls forward, recording them, instead of replicating over
the only copy of those transactions (master_service/cluster/rollforward.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rdfcore.changeset import Changeset
from txinfra import jsonbody

JOURNAL_FILE = "journal.jsonl"
REDO = "redo"
UNDO = "undo"


@dataclass
class Pending:
    header: dict
    steps: list[Changeset]
    sealed: bool = False  # every step was journaled before the store was touched


class Journal:
    def __init__(self, directory: Path, sync: bool = False) -> None:
        self.path = directory / JOURNAL_FILE
        self._sync = sync
        self._fh = None
        self._empty = False  # _fh is open on an empty journal

    def begin(self, header: dict) -> None:
        if not self._empty:  # as left by ``committed``, else started afresh
            self.close()
            self._fh = open(self.path, "wb")  # noqa: SIM115 - kept open across groups
        self._empty = False
        self._write(header)

    def append(self, changeset: Changeset, wire: dict | None = None) -> None:
        self._write({"step": wire if wire is not None else changeset.to_wire()})

    def append_entries(self, body: bytes) -> None:
        """Journal an apply request as received ({"entries": [{"changeset": ...}]}): the
        bytes are already JSON, so they are written as they are, not re-serialised."""
        if b"\n" in body:
            body = json.dumps(json.loads(body)).encode()
        self._write_line(body)

    def seal(self) -> None:
        """Mark the journal complete. A redo journal is written whole before the first
        store write; without the seal (kill -9 while writing it) nothing was applied."""
        self._write({"sealed": True})

    def _write(self, record: dict) -> None:
        # orjson: a line per probe group and step was ~7% of a probe's CPU by json.dumps
        self._write_line(jsonbody.dumps(record))

    def _write_line(self, line: bytes) -> None:
        assert self._fh is not None
        self._fh.write(line + b"\n")
        self._fh.flush()  # reaches the kernel: survives kill -9 of this process
        if self._sync:
            os.fsync(self._fh.fileno())

    def committed(self) -> None:
        """The group is committed (the state saved): the journal is emptied, and kept
        open for the next group. Truncating costs one system call where creating and
        removing the file cost an open, a close and an unlink per group (SQLite's
        journal_mode=TRUNCATE, for the same reason); an empty journal is no journal."""
        if self._fh is None:
            self.discard()
            return
        self._fh.seek(0)
        self._fh.truncate()
        self._empty = True

    def discard(self) -> None:
        """Close and remove the journal (recovery, a failed group, a new generation)."""
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        self._empty = False
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def pending(self) -> Pending | None:
        """What a previous process left, or None. A torn last line was never applied
        (a step touches the store only after its line is written) and is ignored; an
        empty journal is that of a committed group (``committed``)."""
        try:
            if self.path.stat().st_size == 0:
                return None
        except FileNotFoundError:
            return None
        records = []
        for line in self.path.read_bytes().split(b"\n"):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                break
        if not records or "seq" not in records[0]:
            return Pending(header={}, steps=[])
        steps: list[Changeset] = []
        sealed = False
        for r in records[1:]:
            sealed = sealed or bool(r.get("sealed"))
            if "step" in r:
                steps.append(Changeset.from_wire(r["step"]))
            for entry in r.get("entries", ()):
                steps.append(Changeset.from_wire(entry["changeset"]))
        return Pending(header=records[0], steps=steps, sealed=sealed)


EXECUTED_FILE = "executed.jsonl"
EXECUTED_OLD_FILE = "executed.1.jsonl"


class NotHeld(LookupError):
    """The executed journal no longer (or never) held a transaction that was asked for."""


class Executed:
    """The outcomes of the last transactions executed here as probe, oldest first.

    One JSON line per transaction: ``{"seq", "txid", "changeset", "fingerprint",
    "quads", "duration_s"}`` for one that committed, ``{"txid", "after", "status",
    "error"}`` for one refused while the state was at seq ``after``. Lines are appended
    after the state file is saved, so every line is of a committed state; a crash between
    the two leaves a gap, and a request over the gap is ``NotHeld`` (the master then
    recovers the worker as before). Not fsynced: a lost line has the same effect.

    Bounded by rotation: when the file reaches ``rotate_records`` lines or
    ``rotate_bytes`` it becomes ``executed.1.jsonl`` (replacing the previous one), so the
    last ``rotate_records`` transactions are always held unless they are that large.
    The files live in the store's generation directory: a new image starts a new history,
    whose seqs only grow (seqs never go back within one generation)."""

    def __init__(self, directory: Path, rotate_records: int = 1024,
                 rotate_bytes: int = 32 << 20) -> None:
        self.path = directory / EXECUTED_FILE
        self.old_path = directory / EXECUTED_OLD_FILE
        self._rotate_records = rotate_records
        self._rotate_bytes = rotate_bytes
        data = self.path.read_bytes() if self.path.exists() else b""
        if data and not data.endswith(b"\n"):
            # A line torn by kill -9: cut it, or the next append would garble its line.
            data = data[:data.rfind(b"\n") + 1]
            with open(self.path, "r+b") as fh:
                fh.truncate(len(data))
        self._records = data.count(b"\n")
        self._bytes = len(data)
        self._fh = None  # kept open: an open per group cost as much as the write

    def record(self, records: list[dict]) -> None:
        if not records:
            return
        data = b"".join(jsonbody.dumps(r) + b"\n" for r in records)
        if self._fh is None:
            self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open across groups
        self._fh.write(data)
        self._fh.flush()  # reaches the kernel: survives kill -9 of this process
        self._records += len(records)
        self._bytes += len(data)
        if self._records >= self._rotate_records or self._bytes >= self._rotate_bytes:
            self.close()
            os.replace(self.path, self.old_path)
            self._records = self._bytes = 0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def records(self) -> list[dict]:
        out: list[dict] = []
        for path in (self.old_path, self.path):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            for line in data.split(b"\n"):
                try:
                    record = json.loads(line) if line else None
                except ValueError:
                    record = None  # torn by a crash: its transaction is not held
                if isinstance(record, dict):
                    out.append(record)
        return out

    def after(self, seq: int, limit: int, current_seq: int) -> tuple[list[dict], list[dict]]:
        """(entries, refusals) after ``seq``: every committed entry from ``seq + 1`` to
        ``min(current_seq, seq + limit)`` in seq order, and the refusals made while the
        state was at a seq of ``seq`` .. the last entry returned, in execution order.
        NotHeld when an entry of that range is not held."""
        records = self.records()
        by_seq = {r["seq"]: r for r in records if isinstance(r.get("seq"), int)}
        upto = min(current_seq, seq + limit)
        missing = next((s for s in range(seq + 1, upto + 1) if s not in by_seq), None)
        if missing is not None:
            held = f"it holds seqs {min(by_seq)}..{max(by_seq)}" if by_seq else "it is empty"
            raise NotHeld(f"the journal of executed transactions does not hold seq "
                          f"{missing} ({held})")
        upto = max(upto, seq)
        entries = [by_seq[s] for s in range(seq + 1, upto + 1)]
        refused = [r for r in records
                   if isinstance(r.get("after"), int) and seq <= r["after"] <= upto]
        return entries, refused
