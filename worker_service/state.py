"""A worker's state: (last applied transaction id, sequence number, fingerprint).

The master's log records the fingerprint after every sequence number, so "does this
worker correspond to a known state" is a lookup (docs/design/write-path.md#the-fingerprint).

The live state is saved after every transaction group, so its write must be cheap: a
rename costs ~0.35 ms on this machine's ext4 (more under load: a quarter of a probe's
time in a profile), a positioned write ~1 us. So the state lives in ``state.slots``: two
fixed-size slots written alternately, each record carrying a generation number and a
checksum. A write torn by kill -9 leaves the other slot intact, and ``load`` takes the
valid record with the highest generation. ``state.json`` (written atomically) is the
portable form that images carry; ``load`` falls back to it where no slot file exists.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import xxhash

from rdfcore import fingerprint

STATE_FILE = "state.json"
SLOTS_FILE = "state.slots"
SLOT_SIZE = 1 << 20
_MAGIC = b"TXS1"
_HEADER = struct.Struct("<4sQIQ")  # magic, generation, payload length, xxh64(gen+payload)


@dataclass(frozen=True)
class WorkerState:
    seq: int = 0
    txid: str | None = None
    fingerprint: int = fingerprint.ZERO
    quads: int = 0
    namespaces: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        # Written after every group (``save``): built directly, dataclasses.asdict
        # deep-copies field by field.
        return {"seq": self.seq, "txid": self.txid,
                "fingerprint": fingerprint.to_hex(self.fingerprint), "quads": self.quads,
                "namespaces": dict(self.namespaces)}

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


class _Slots:
    """The open slot file of one directory and the generation last written to it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fd = os.open(directory / SLOTS_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        found = _read_slots(self.fd)
        self.generation = found[0] if found else 0

    def write(self, payload: bytes, sync: bool) -> None:
        if len(payload) + _HEADER.size > SLOT_SIZE:
            raise ValueError(f"worker state of {len(payload)} bytes exceeds its slot "
                             f"({SLOT_SIZE} bytes): too many namespaces")
        gen = self.generation + 1
        digest = xxhash.xxh64_intdigest(gen.to_bytes(8, "little") + payload)
        record = _HEADER.pack(_MAGIC, gen, len(payload), digest) + payload
        os.pwrite(self.fd, record, (gen % 2) * SLOT_SIZE)
        if sync:
            os.fsync(self.fd)
        self.generation = gen


def _read_slots(fd: int) -> tuple[int, bytes] | None:
    """(generation, payload) of the newest valid slot, or None."""
    best: tuple[int, bytes] | None = None
    for slot in (0, 1):
        head = os.pread(fd, _HEADER.size, slot * SLOT_SIZE)
        if len(head) < _HEADER.size:
            continue
        magic, gen, length, digest = _HEADER.unpack(head)
        if magic != _MAGIC or length > SLOT_SIZE - _HEADER.size:
            continue
        payload = os.pread(fd, length, slot * SLOT_SIZE + _HEADER.size)
        if len(payload) != length or \
                xxhash.xxh64_intdigest(gen.to_bytes(8, "little") + payload) != digest:
            continue  # torn by a crash mid-write: the other slot holds the state before
        if best is None or gen > best[0]:
            best = (gen, payload)
    return best


_open_slots: dict[Path, _Slots] = {}
_slots_lock = threading.Lock()


def save(directory: Path, state: WorkerState, sync: bool = False) -> None:
    """Save the live state of the repository in ``directory`` (see module docstring)."""
    with _slots_lock:
        # Looked up by the path as given first: resolving it (an lstat per component)
        # cost as much as the write.
        slots = _open_slots.get(directory)
        if slots is None:
            key = Path(directory).resolve()
            slots = _open_slots.get(key)
            if slots is None:
                slots = _open_slots[key] = _Slots(key)
            _open_slots[directory] = slots
        slots.write(json.dumps(state.to_json()).encode(), sync)


def forget(directory: Path) -> None:
    """``directory`` is being removed: close its slot file. Kept open, a generation made
    again under the same name (after a refused install) had its states written into the
    removed file, and a restart found the state it was installed with."""
    key = Path(directory).resolve()
    with _slots_lock:
        # Under the path it was saved by and its resolved form: one _Slots, opened at the
        # resolved path.
        for path in [p for p, slots in _open_slots.items() if slots.directory == key]:
            slots = _open_slots.pop(path)
            if slots.fd >= 0:
                os.close(slots.fd)
                slots.fd = -1


def export_json(directory: Path, state: WorkerState) -> None:
    """``state.json``: the portable form an image carries."""
    write_atomically(directory / STATE_FILE, json.dumps(state.to_json()).encode())


def load(directory: Path) -> WorkerState:
    slots_path = directory / SLOTS_FILE
    if slots_path.exists():
        fd = os.open(slots_path, os.O_RDONLY)
        try:
            found = _read_slots(fd)
        finally:
            os.close(fd)
        if found is not None:
            return WorkerState.from_json(json.loads(found[1]))
    path = directory / STATE_FILE
    if not path.exists():
        return WorkerState()
    return WorkerState.from_json(json.loads(path.read_text()))
