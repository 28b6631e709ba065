"""What tests send a worker's cluster-control API: changesets, apply bodies, and a
worker's state as it compares across a restart."""

from __future__ import annotations

import pyoxigraph as ox

from rdfcore import fingerprint
from rdfcore.changeset import Changeset

EX = "http://example.org/"


def batch(start: int, n: int, graph: str | None = None) -> Changeset:
    g = ox.NamedNode(EX + graph) if graph else ox.DefaultGraph()
    return Changeset(added=frozenset(
        ox.Quad(ox.NamedNode(f"{EX}s{i}"), ox.NamedNode(EX + "p"), ox.Literal(f"v{i}"), g)
        for i in range(start, start + n)
    ))


def settled(state: dict) -> dict:
    """A worker's state without its size on disk, which RocksDB moves by itself (a
    memtable flush after a read, its info log) while nothing changes."""
    return {k: v for k, v in state.items() if k != "size_bytes"}


def apply_body(seq: int, cs: Changeset, expected: int | None = None) -> dict:
    entry = {"seq": seq, "txid": f"t{seq}", "changeset": cs.to_wire()}
    if expected is not None:
        entry["expected_fingerprint"] = fingerprint.to_hex(expected)
    return {"entries": [entry]}
