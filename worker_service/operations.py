"""Operations: what a transaction is made of, each a list of steps (steps.py).

A SPARQL update (one step per operation of the request) or one of RDF4J's: add a
document, remove statements by pattern, declare or remove a namespace, clear the
namespaces. wire_parsing.py builds them from the JSON wire form a master sends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyoxigraph as ox

from rdfcore.canonical import GraphName, Term, canonical_term
from rdfcore.changeset import Changeset
from worker_service.steps import (
    DeleteDataStep,
    InsertDataStep,
    Step,
    exact_changeset,
    named_graph_names,
    relabel,
)
from worker_service.transaction import BlankNodeMinter


class Operation(ABC):
    @abstractmethod
    def steps(self) -> list[Step]:
        """The steps to run in order; each sees the effects of the previous ones."""


class _SingleStep(Operation, Step):
    def steps(self) -> list[Step]:
        return [self]


@dataclass(frozen=True)
class UpdateOperation(Operation):
    """A SPARQL 1.1 Update request: one step per operation (ADD/MOVE/COPY are one)."""

    update: str
    base_iri: str | None = None
    parsed: tuple[Step, ...] = field(default=(), repr=False, compare=False)

    def steps(self) -> list[Step]:
        return list(self.parsed)


@dataclass(frozen=True)
class AddOperation(_SingleStep):
    """RDF4J add: the statements of a document; with ``contexts``, each statement goes to
    each listed context instead of where the document puts it. Document blank nodes are
    scoped to the document: each distinct label becomes one minted node — unless
    ``preserve_node_ids`` (RDF4J's ``preserveNodeId=true``), which keeps the labels as
    written (``txcluster load`` scopes them per source file itself)."""

    data: str
    format: str
    contexts: tuple[GraphName, ...] | None = None
    base_iri: str | None = None
    quads: tuple[ox.Quad, ...] = field(default=(), repr=False, compare=False)
    preserve_node_ids: bool = False

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        mapping: dict[str, ox.BlankNode] = {}
        out: set[ox.Quad] = set()
        keep = self.preserve_node_ids
        if keep and self.contexts is None:
            # Labels and graphs as written (txcluster load's transactions): only an
            # object can change (a typed literal into its canonical form), so every
            # other quad is kept as it is — rebuilding each one cost 2-3x more on the
            # probe, the one worker every transaction waits for.
            for q in self.quads:
                o = q.object
                c = canonical_term(o)
                out.add(q if c is o or c == o else
                        ox.Quad(q.subject, q.predicate, c, q.graph_name))
            return exact_changeset(store, added=_absent(store, out))
        for q in self.quads:
            s = q.subject if keep else relabel(q.subject, mapping, minter)
            o = canonical_term(q.object if keep else relabel(q.object, mapping, minter))
            graphs = self.contexts or (
                q.graph_name if keep else relabel(q.graph_name, mapping, minter),)
            for g in graphs:
                out.add(ox.Quad(s, q.predicate, o, g))
        return exact_changeset(store, added=_absent(store, out))


def _absent(store: ox.Store, out: set[ox.Quad]) -> Iterable[ox.Quad]:
    """The quads of ``out`` that ``store`` does not hold; ``out`` itself when none is
    held (a load's usual case): a set becomes the changeset's frozenset with the hashes
    it keeps, where a list is hashed again — 46 of the 267 ms of 100,000 quads."""
    absent = not_in_store(store, out)
    return out if len(absent) == len(out) else absent


# A document is looked up subject by subject from this many quads on (not_in_store).
BY_SUBJECT_FROM = 64
# ... until this many subjects were looked up, more than half of them already held.
BY_SUBJECT_TRIAL = 64


def not_in_store(store: ox.Store, quads: Iterable[ox.Quad]) -> list[ox.Quad]:
    """The quads ``store`` does not hold (an add's exact changeset).

    One lookup per quad took over a third of the probe's time in a load by transactions
    (``txcluster load``), more once the bulk loader has written many files
    (rdfcore/changeset.py, BULK_ADD). A subject the store holds no quad of in any graph
    needs no lookup for its quads: one seek per subject instead (20,000 new quads of 10
    per subject: 4.4 -> 2.0 us a quad). Data whose subjects are mostly held already
    (1.5x slower that way) goes back to one lookup per quad after a trial."""
    quads = list(quads)
    if len(quads) < BY_SUBJECT_FROM:
        return [q for q in quads if q not in store]
    absent: list[ox.Quad] = []
    new_subject: dict = {}
    checked = held = 0
    for q in quads:
        subject = q.subject
        new = new_subject.get(subject)
        if new is None:
            if checked >= BY_SUBJECT_TRIAL and 2 * held > checked:
                new = False  # mostly held: look each quad up
            else:
                new = next(iter(store.quads_for_pattern(subject, None, None, None)),
                           None) is None
                new_subject[subject] = new
                checked += 1
                held += not new
        if new or q not in store:
            absent.append(q)
    return absent


@dataclass(frozen=True)
class RemoveOperation(_SingleStep):
    """RDF4J statement removal by pattern (None = wildcard) in ``contexts`` (None = every
    graph). With no subject, predicate or object it clears those contexts (everything
    when ``contexts`` is None) and, as RDF4J knows no empty contexts, also drops the
    cleared named graphs (an RDF4J client sees a context only while it has statements)."""

    subject: ox.NamedNode | ox.BlankNode | None = None
    predicate: ox.NamedNode | None = None
    object: Term | None = None
    contexts: tuple[GraphName, ...] | None = None

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        s, p, o = self.subject, self.predicate, self.object
        graphs: Iterable[GraphName | None] = (
            [None] if self.contexts is None else dict.fromkeys(self.contexts))
        removed: set[ox.Quad] = set()
        for g in graphs:
            removed.update(store.quads_for_pattern(s, p, o, g))
        dropped: frozenset[ox.NamedNode] = frozenset()
        if s is None and p is None and o is None:
            if self.contexts is None:
                dropped = frozenset(named_graph_names(store))
            else:
                dropped = frozenset(g for g in self.contexts if type(g) is ox.NamedNode
                                    and store.contains_named_graph(g))
        return Changeset(removed=frozenset(removed), dropped_graphs=dropped)


@dataclass(frozen=True)
class NamespaceOperation(_SingleStep):
    """Declare ``prefix`` (or remove it with ``namespace`` None); exact: no change, no
    entry."""

    prefix: str
    namespace: str | None

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        if self.namespace is None:
            return Changeset(namespaces={self.prefix: None}) if self.prefix in namespaces \
                else Changeset()
        if namespaces.get(self.prefix) == self.namespace:
            return Changeset()
        return Changeset(namespaces={self.prefix: self.namespace})


@dataclass(frozen=True)
class ClearNamespacesOperation(_SingleStep):
    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        return Changeset(namespaces={p: None for p in namespaces})


# Steps whose cost follows from their own text: the quads or the prefix they list, each
# looked up once. Any other (a pattern removal, DELETE/INSERT WHERE, CLEAR, ADD/COPY/MOVE)
# may touch any part of the store, however short it is.
_BOUNDED_BY_TEXT = (InsertDataStep, DeleteDataStep, AddOperation, NamespaceOperation,
                    ClearNamespacesOperation)


def bounded_by_text(operations: Iterable[Operation]) -> bool:
    """Whether running ``operations`` costs in proportion to their own size: only data
    (INSERT DATA, DELETE DATA, an added document) and namespaces."""
    return all(isinstance(step, _BOUNDED_BY_TEXT) for op in operations
               for step in op.steps())
