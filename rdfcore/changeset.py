"""Exact changesets: what a transaction really changed in a repository.

A changeset is computed once, on the probe worker, against the state it is applied to;
every other worker applies the same changeset (not the update text), so updates that are
not deterministic (NOW(), RAND(), UUID(), BNODE(), template blank nodes) leave every worker
identical (docs/design/write-path.md#exact-changesets).

Exactness: ``removed`` holds only quads present before, ``added`` only quads absent
before, and the two are disjoint. That makes applying a changeset idempotent and
reversible (``inverse``), which the worker's journal relies on for crash recovery.
Quads are in the store's canonical form (docs/design/dependencies.md#pyoxigraph-the-workers-store:
the store rewrites literals), so the
incremental fingerprint equals a full recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyoxigraph as ox

from rdfcore import fingerprint


@dataclass(frozen=True)
class Changeset:
    removed: frozenset[ox.Quad] = frozenset()
    added: frozenset[ox.Quad] = frozenset()
    # Named graphs are state of their own in the store (CREATE/DROP of an empty graph).
    created_graphs: frozenset[ox.NamedNode] = frozenset()
    dropped_graphs: frozenset[ox.NamedNode] = frozenset()
    # Namespace declarations changed by the transaction: prefix -> IRI, or None if removed.
    namespaces: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.removed & self.added:
            raise ValueError("a changeset cannot both remove and add the same quad")

    @property
    def empty(self) -> bool:
        return not (
            self.removed or self.added or self.created_graphs or self.dropped_graphs
            or self.namespaces
        )

    def inverse(self, namespaces_before: Mapping[str, str | None] | None = None) -> Changeset:
        """The changeset that undoes this one (namespaces need their values before)."""
        before = namespaces_before or {}
        return Changeset(
            removed=self.added,
            added=self.removed,
            created_graphs=self.dropped_graphs,
            dropped_graphs=self.created_graphs,
            namespaces={p: before.get(p) for p in self.namespaces},
        )

    def then(self, later: Changeset) -> Changeset:
        """Composition: this changeset followed by ``later`` (both exact) as one."""
        removed, added = _compose(self.removed, self.added, later.removed, later.added)
        dropped, created = _compose(self.dropped_graphs, self.created_graphs,
                                    later.dropped_graphs, later.created_graphs)
        return Changeset(removed, added, created, dropped,
                         {**self.namespaces, **later.namespaces})

    def apply_namespaces(self, namespaces: dict[str, str]) -> None:
        """Its namespace part applied to ``namespaces`` (a None IRI removes the prefix)."""
        for prefix, iri in self.namespaces.items():
            if iri is None:
                namespaces.pop(prefix, None)
            else:
                namespaces[prefix] = iri

    def moved_fingerprint(self, before: int, wire: Mapping | None = None) -> int:
        """The fingerprint after this changeset; ``wire``, when given, is this changeset's
        ``to_wire()`` (or a text of it written the same way, one quad per line): its text is
        hashed line by line instead of writing every quad again."""
        if wire is None:
            return fingerprint.moved(before, self.added, self.removed)
        return fingerprint.moved_by_text(before, wire.get("added", ""),
                                         wire.get("removed", ""))

    # ---- wire form (JSON-able; quads as N-Quads text keeps blank node labels) ----

    def to_wire(self) -> dict:
        return {
            "removed": nquads(self.removed),
            "added": nquads(self.added),
            "created_graphs": sorted(g.value for g in self.created_graphs),
            "dropped_graphs": sorted(g.value for g in self.dropped_graphs),
            "namespaces": dict(self.namespaces),
        }

    @classmethod
    def from_wire(cls, data: Mapping) -> Changeset:
        """Parse a changeset sent by a master; raises ValueError saying what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("changeset must be a JSON object")
        try:
            removed = frozenset(parse_nquads(data.get("removed", "")))
            added = frozenset(parse_nquads(data.get("added", "")))
        except SyntaxError as exc:
            raise ValueError(f"changeset quads are not valid N-Quads: {exc}") from None
        ns = data.get("namespaces", {}) or {}
        if not isinstance(ns, Mapping) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in ns.items()
        ):
            raise ValueError("changeset namespaces must map prefixes to IRIs or null")
        try:
            created = frozenset(ox.NamedNode(g) for g in data.get("created_graphs", []))
            dropped = frozenset(ox.NamedNode(g) for g in data.get("dropped_graphs", []))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"changeset graph names must be IRIs: {exc}") from None
        return cls(removed, added, created, dropped, dict(ns))


def _compose(gone: frozenset, new: frozenset, later_gone: frozenset,
             later_new: frozenset) -> tuple[frozenset, frozenset]:
    """Two exact (taken away, brought) pairs of sets, one after the other, as one: what the
    later one takes away of what the first brought was never there, and what it brings
    back of what the first took away was never gone."""
    gone_now, new_now = set(gone), set(new)
    for x in later_gone:
        if x in new_now:
            new_now.discard(x)
        else:
            gone_now.add(x)
    for x in later_new:
        if x in gone_now:
            gone_now.discard(x)
        else:
            new_now.add(x)
    return frozenset(gone_now), frozenset(new_now)


def nquads(quads: Iterable[ox.Quad]) -> str:
    return "".join(f"{q} .\n" for q in quads)


def parse_nquads(text: str) -> list[ox.Quad]:
    if not isinstance(text, str):
        raise SyntaxError("expected N-Quads text")
    if not text:
        return []
    # Labels must survive (docs/design/dependencies.md#pyoxigraph-the-workers-store): parse keeps
    # them when not renaming.
    return list(ox.parse(text, format=ox.RdfFormat.N_QUADS))


# Additions of this many quads or more go through pyoxigraph's bulk loader: ~4x less
# time than ``extend`` (300,000 quads in changesets of 20,000 into an on-disk store: 1.6 s
# against 6.8 s), which made most of a worker's work in a load by transactions
# (``txcluster load``). Not below: each call writes its own files for RocksDB to compact,
# a cost that only pays off for large changesets.
BULK_ADD = 5_000


def added_text(wire: Mapping) -> str | None:
    """The N-Quads text of a changeset in wire form (``to_wire``) that only adds quads;
    None for any other changeset. Such text goes into a store without a changeset of
    Python quads being built from it (``load_added``). Namespace changes are the caller's
    (they are state, not quads)."""
    text = wire.get("added")
    if (not isinstance(text, str) or not text or wire.get("removed")
            or wire.get("created_graphs") or wire.get("dropped_graphs")):
        return None
    return text


def load_added(store: ox.Store, text: str, quads: int) -> None:
    """Add the ``quads`` quads of ``text`` (``added_text``) to ``store``. The caller has
    checked the text (its line hashes gave the expected fingerprint: it is the probe's own
    text, valid N-Quads of canonical quads, as pyoxigraph wrote them), so it is read
    ``lenient``: IRIs and literals are not validated a second time. The bulk loader from
    BULK_ADD quads on, a store transaction below, as ``apply_to``.

    Without blank nodes the store parses the text itself, in Rust with the GIL released:
    ~1.3-1.8 s of CPU against 2.2-2.7 s for parsing into Python quads and adding those
    (240,000 quads in changesets of 100,000; bench/README.md). pyoxigraph's loaders give
    blank nodes fresh labels, so a text with "_:" anywhere (also inside a literal: then
    merely not the fastest way) is parsed into quads streamed into the store, which keeps
    their labels: 1.0-1.2 against 1.4-1.5 CPU-s for 100,000 quads of the pipeline's
    benchmark (a fifth with a blank node) into an on-disk store, as the changeset of
    frozensets the worker built before."""
    if "_:" in text:
        add_quads(store, ox.parse(text, format=ox.RdfFormat.N_QUADS, lenient=True), quads)
    elif quads >= BULK_ADD:
        store.bulk_load(text, format=ox.RdfFormat.N_QUADS, lenient=True)
    else:
        store.load(text, format=ox.RdfFormat.N_QUADS, lenient=True)


def add_quads(store: ox.Store, quads: Iterable[ox.Quad], count: int) -> None:
    """Add ``count`` quads to ``store``: the bulk loader from BULK_ADD quads on (it keeps
    blank-node labels of quads given as objects), a store transaction below."""
    if count >= BULK_ADD:
        store.bulk_extend(quads)
    else:
        store.extend(quads)


def apply_to(store: ox.Store, changeset: Changeset) -> None:
    """Apply the quad and graph parts to ``store``. Idempotent for an exact changeset.

    Not atomic by itself (pyoxigraph has no remove+add transaction that keeps blank node
    labels; its bulk loader, used for large additions, keeps them but is not atomic
    either); the repository journals it and holds its write lock around it, so it is
    redone or undone whole after a crash (worker_service/journal.py).
    """
    for q in changeset.removed:
        store.remove(q)
    for g in changeset.dropped_graphs:
        if store.contains_named_graph(g):
            store.remove_graph(g)
    for g in changeset.created_graphs:
        store.add_graph(g)
    if changeset.added:
        add_quads(store, changeset.added, len(changeset.added))
