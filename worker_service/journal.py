"""The worker's journal: what makes apply + record crash-safe (ARCHITECTURE.md).

pyoxigraph cannot remove and add quads in one atomic write while keeping blank node
labels (FACTS.md), so a changeset is applied as several store writes. Before the first of
them, the journal records the transaction (a header line) and each step's changeset (one
JSON line each, written before that step touches the store). Exact changesets are
idempotent and invertible, so after kill -9 at any instant the repository can finish
(``redo``: apply, already durable in the master's log) or take back (``undo``: an
execute whose control queries had not passed yet) what the journal describes.

A journal whose header seq equals the state's seq was committed: the state file is
written before the journal is removed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from worker_service.changeset import Changeset

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

    def begin(self, header: dict) -> None:
        self._fh = open(self.path, "wb")  # noqa: SIM115 - kept open across steps
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
        self._write_line(json.dumps(record).encode())

    def _write_line(self, line: bytes) -> None:
        assert self._fh is not None
        self._fh.write(line + b"\n")
        self._fh.flush()  # reaches the kernel: survives kill -9 of this process
        if self._sync:
            os.fsync(self._fh.fileno())

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.path.unlink(missing_ok=True)

    def pending(self) -> Pending | None:
        """What a previous process left, or None. A torn last line was never applied
        (a step touches the store only after its line is written) and is ignored."""
        if not self.path.exists():
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
