"""Changesets forwarded by the master (``POST /cluster/apply``, catch-up replay): the
entries of one apply request and how a group of them goes into the store.

A group is written once: the composition of exact changesets is exact
(rdfcore/changeset.py), and the worker's journal holds each one for a redo after a crash.
An addition kept as the text it came in (``added_text``: an expected fingerprint checked
the text) is loaded as text when the whole group is such (``changeset.load_added``: never
built into a changeset of Python quads); in a mixed group it is parsed and composed with
the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyoxigraph as ox

from rdfcore.changeset import Changeset, apply_to, load_added
from worker_service.state import WorkerState


@dataclass(frozen=True)
class ApplyEntry:
    seq: int
    txid: str
    changeset: Changeset
    expected_fingerprint: int | None = None
    wire: dict | None = None  # the changeset as received (journaled as it is)
    # An addition kept as the text it came in (changeset.added_text; ``changeset`` then
    # holds only its namespaces) and how many quads it adds: loaded without building a
    # changeset of it. Only with an expected fingerprint, which checks the text.
    added_text: str | None = None
    added_quads: int = 0


@dataclass(frozen=True)
class Group:
    """The entries of one apply, ready to write: ``as_text`` when every one is an
    addition kept as text, else every entry parsed and ``total`` their composition."""

    entries: Sequence[ApplyEntry]
    as_text: bool
    total: Changeset

    @classmethod
    def of(cls, entries: Sequence[ApplyEntry]) -> Group:
        as_text = all(e.added_text is not None for e in entries)
        if not as_text:
            entries = [replace(e, changeset=Changeset.from_wire(e.wire), added_text=None)
                       if e.added_text is not None and e.wire is not None else e
                       for e in entries]
        total = entries[0].changeset
        for e in entries[1:]:
            total = total.then(e.changeset)
        return cls(entries, as_text, total)

    def write(self, store: ox.Store) -> None:
        if self.as_text:
            # One load, so one store transaction (one write to RocksDB's log) for the
            # group, not one per entry. The same quads: every entry only adds, and exact
            # changesets in order never add a quad an earlier one added.
            text = "".join(e.added_text if e.added_text.endswith("\n")  # type: ignore[union-attr]
                           else e.added_text + "\n" for e in self.entries)
            load_added(store, text, sum(e.added_quads for e in self.entries))
        else:
            apply_to(store, self.total)


def inexact(store: ox.Store, total: Changeset, before: WorkerState,
            after: WorkerState) -> str | None:
    """Why the composed changeset ``total`` of a group is not exact against ``store`` (in
    state ``before``) or does not lead to ``after`` (the state summed entry by entry);
    None when it is. Costs one lookup per quad (~80k/s), so only for unverified groups."""
    moved = (total.moved_fingerprint(before.fingerprint),
             before.quads + len(total.added) - len(total.removed))
    if moved != (after.fingerprint, after.quads):
        return "its changesets are not exact against each other"
    if (q := next((q for q in total.removed if q not in store), None)) is not None:
        return f"it removes {q}, which this worker does not hold"
    if (q := next((q for q in total.added if q in store), None)) is not None:
        return f"it adds {q}, which this worker already holds"
    for g in total.dropped_graphs:
        kept = next((q for q in store.quads_for_pattern(None, None, None, g)
                     if q not in total.removed), None)
        if kept is not None:
            return f"it drops graph {g} without removing its quad {kept}"
    return None
