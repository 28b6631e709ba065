"""A worker's state: (last applied transaction id, sequence number, fingerprint).

The master's log records the fingerprint after every sequence number, so "does this
worker correspond to a known state" is a lookup (ARCHITECTURE.md). The state is kept in
``state.json`` beside the store and replaced atomically (write, rename).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from worker_service import fingerprint

STATE_FILE = "state.json"


@dataclass(frozen=True)
class WorkerState:
    seq: int = 0
    txid: str | None = None
    fingerprint: int = fingerprint.ZERO
    quads: int = 0
    namespaces: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        data = asdict(self)
        data["fingerprint"] = fingerprint.to_hex(self.fingerprint)
        return data

    @classmethod
    def from_json(cls, data: dict) -> WorkerState:
        return cls(
            seq=int(data["seq"]),
            txid=data.get("txid"),
            fingerprint=fingerprint.from_hex(data["fingerprint"]),
            quads=int(data["quads"]),
            namespaces=dict(data.get("namespaces") or {}),
        )

    def evolve(self, **changes) -> WorkerState:
        return replace(self, **changes)


def write_atomically(path: Path, data: bytes, sync: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if sync:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save(directory: Path, state: WorkerState, sync: bool = False) -> None:
    write_atomically(directory / STATE_FILE, json.dumps(state.to_json()).encode(), sync)


def load(directory: Path) -> WorkerState:
    path = directory / STATE_FILE
    if not path.exists():
        return WorkerState()
    return WorkerState.from_json(json.loads(path.read_text()))
