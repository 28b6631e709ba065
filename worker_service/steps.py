"""Steps: units of execution whose exact changeset is computed against the current state
(pure logic over a pyoxigraph Store, which a step only reads).

A SPARQL 1.1 Update operation is one step (ADD/MOVE/COPY included); the RDF4J operations
are one step each (operations.py). Steps are built by update_parsing.py and
wire_parsing.py and run in order by the repository, each seeing the effects of the
previous ones (transaction.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyoxigraph as ox

from rdfcore import sparql_text as st
from rdfcore.canonical import GraphName
from rdfcore.changeset import Changeset
from worker_service import determinism
from worker_service.transaction import BlankNodeMinter, UpdateExecutionError

_DEFAULT = ox.DefaultGraph()


class Step(ABC):
    """One unit of execution: its changeset is computed against the current state."""

    @abstractmethod
    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        """The exact changeset of this step against ``store`` (which it only reads)."""


def relabel(term: Any, mapping: dict[str, ox.BlankNode], minter: BlankNodeMinter) -> Any:
    """Blank nodes scoped to one document/operation -> fresh minted nodes (one per label)."""
    kind = type(term)
    if kind is ox.BlankNode:
        node = mapping.get(term.value)
        if node is None:
            node = mapping[term.value] = minter.fresh()
        return node
    if kind is ox.Triple:
        return ox.Triple(relabel(term.subject, mapping, minter), term.predicate,
                         relabel(term.object, mapping, minter))
    return term


def exact_changeset(store: ox.Store, removed: Iterable[ox.Quad] = (), added: Iterable[ox.Quad] = (),
               dropped: Iterable[ox.NamedNode] = ()) -> Changeset:
    """A changeset whose named graphs that get their first quads are in created_graphs.

    Adding the quads would create such a graph anyway, but the inverse changeset — the
    repository's rollback of a failed transaction — must drop it again: pyoxigraph's
    atomic update leaves no empty graph behind when a later operation fails."""
    added = frozenset(added)
    graphs = {q.graph_name for q in added}
    created = frozenset(g for g in graphs
                        if type(g) is ox.NamedNode and not store.contains_named_graph(g))
    return Changeset(removed=frozenset(removed), added=added, created_graphs=created,
                     dropped_graphs=frozenset(dropped))


def has_blank(q: ox.Quad) -> bool:
    return "_:" in str(q)  # rare enough to check textually (labels, triple terms, graph)


@dataclass(frozen=True)
class InsertDataStep(Step):
    """INSERT DATA: ``quads`` canonical; their blank nodes are fresh per operation
    (SPARQL 1.1 Update 3.1.1), minted at execution."""

    quads: tuple[ox.Quad, ...]

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        mapping: dict[str, ox.BlankNode] = {}
        out: set[ox.Quad] = set()
        for q in self.quads:
            if has_blank(q):
                q = ox.Quad(relabel(q.subject, mapping, minter), q.predicate,
                            relabel(q.object, mapping, minter),
                            relabel(q.graph_name, mapping, minter))
            if q not in store:
                out.add(q)
        return exact_changeset(store, added=out)


@dataclass(frozen=True)
class DeleteDataStep(Step):
    """DELETE DATA: removes the listed quads that exist (absent ones are ignored)."""

    quads: tuple[ox.Quad, ...]

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        return Changeset(removed=frozenset(q for q in self.quads if q in store))


# ---- templates ----

Template = tuple[tuple[Any, Any, Any, Any], ...]


class Var(NamedTuple):
    name: str


class Fresh(NamedTuple):
    label: str


class TripleSlot(NamedTuple):
    subject: Any
    predicate: Any
    object: Any


INVALID = object()  # a template term that can never be instantiated (literal subject)
_UNBOUND = object()  # a variable the WHERE never binds


def _resolve_slot(slot: Any, index: Mapping[str, int]) -> Any:
    """A template slot with variables replaced by their position in the solutions."""
    kind = type(slot)
    if kind is Var:
        return index.get(slot.name, _UNBOUND)
    if kind is TripleSlot:
        parts = tuple(_resolve_slot(s, index) for s in slot)
        return _UNBOUND if _UNBOUND in parts else TripleSlot(*parts)
    return slot


def _plan(template: Template, index: Mapping[str, int]) -> tuple[list, list]:
    """Split a template for one evaluation: quads of constants and variables only (the
    fast loop) and quads with template blank nodes or triple terms (the general one).
    A quad with a variable the WHERE cannot bind is never instantiated: dropped."""
    simple, general = [], []
    for tq in template:
        resolved = tuple(_resolve_slot(s, index) for s in tq)
        if _UNBOUND in resolved:
            continue
        if any(type(s) in (Fresh, TripleSlot) for s in resolved):
            general.append(resolved)
        else:
            simple.append(resolved)
    return simple, general


def _instantiate(slot: Any, values: tuple, fresh: dict[str, ox.BlankNode],
                 minter: BlankNodeMinter) -> Any:
    kind = type(slot)
    if kind is int:
        return values[slot]
    if kind is Fresh:
        node = fresh.get(slot.label)
        if node is None:
            node = fresh[slot.label] = minter.fresh()
        return node
    if kind is TripleSlot:
        s = _instantiate(slot.subject, values, fresh, minter)
        p = _instantiate(slot.predicate, values, fresh, minter)
        o = _instantiate(slot.object, values, fresh, minter)
        if s is None or p is None or o is None:
            return None
        try:
            return ox.Triple(s, p, o)
        except TypeError:
            return None
    return slot


def _fill(plan: tuple[list, list], values: tuple, minter: BlankNodeMinter,
          out: set[ox.Quad]) -> None:
    """Instantiate every template quad for one solution (SPARQL 1.1 Update 3.1.3): a quad
    with an unbound variable or a term invalid in its position (literal subject, blank
    node or literal predicate, literal graph name: the Quad constructor refuses them) is
    skipped. Template blank nodes are fresh for each solution. Solution values are
    already canonical (they come from the store or from pyoxigraph's evaluator)."""
    simple, general = plan
    add = out.add
    quad = ox.Quad
    for s, p, o, g in simple:
        s = values[s] if type(s) is int else s
        p = values[p] if type(p) is int else p
        o = values[o] if type(o) is int else o
        g = values[g] if type(g) is int else g
        if s is None or p is None or o is None or g is None:
            continue
        try:
            add(quad(s, p, o, g))
        except TypeError:
            pass
    if general:
        fresh: dict[str, ox.BlankNode] = {}
        for tq in general:
            terms = [_instantiate(slot, values, fresh, minter) for slot in tq]
            if None in terms:
                continue
            try:
                add(quad(*terms))
            except TypeError:
                pass


@dataclass(frozen=True)
class ModifyStep(Step):
    """DELETE/INSERT ... WHERE and DELETE WHERE (SPARQL 1.1 Update 3.1.3).

    ``query`` is the WHERE pattern as a SELECT * with the USING clauses as FROM/FROM NAMED;
    ``default_graph`` is WITH's graph when there is no USING (the WHERE's default graph,
    all named graphs visible). Templates are tuples of (s, p, o, g) slots: constant terms,
    ``Var``, ``Fresh`` (template blank node) or ``TripleSlot``."""

    query: str
    base_iri: str | None
    default_graph: ox.NamedNode | None
    delete: Template
    insert: Template
    # NOW(), RAND(), UUID(), STRUUID(), BNODE() in ``query`` (determinism.find_calls, at
    # parse time): empty for almost every update, which then runs as it is.
    calls: tuple[determinism.Call, ...] = ()

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        deleted: set[ox.Quad] = set()
        inserted: set[ox.Quad] = set()
        query, options = self.query, {}
        if self.calls:
            # Their values come from the transaction (txid, timestamp), so every data
            # centre executing it computes the same changeset (determinism.py).
            query = determinism.rewrite(query, self.calls, minter.timestamp_ms or 0)
            functions = determinism.custom_functions(self.calls, minter)
            if functions:
                options["custom_functions"] = functions
        if self.default_graph is not None:
            options["default_graph"] = self.default_graph
        failure = None
        result = None
        try:
            # The WHERE part is evaluated exactly once, here, on the probe worker.
            result = store.query(query, base_iri=self.base_iri, **options)
            index = {v.value: i for i, v in enumerate(result.variables)}  # type: ignore[union-attr]
            delete, insert = _plan(self.delete, index), _plan(self.insert, index)
            has_delete, has_insert = any(delete), any(insert)
            for solution in result:  # type: ignore[union-attr]
                values = tuple(solution)
                if has_delete:
                    _fill(delete, values, minter, deleted)
                if has_insert:
                    _fill(insert, values, minter, inserted)
        except (RuntimeError, OSError) as exc:  # evaluation errors (e.g. a failing SERVICE)
            failure = f"WHERE evaluation failed: {exc}"
        finally:
            # The result iterator is "unsendable" (worker_service/api/queries.py): dropped
            # here, in the thread that made it, not later with a frame that an
            # exception's traceback keeps alive.
            result = None
        if failure is not None:
            raise UpdateExecutionError(failure)
        # The result is (S - D) + I: pyoxigraph removes all of D before inserting I.
        removed = [q for q in deleted if q not in inserted and q in store]
        added = [q for q in inserted if q not in store]
        return exact_changeset(store, removed, added)


# ---- graph management (SPARQL 1.1 Update 3.2, as pyoxigraph evaluates it) ----


def _graph_quads(store: ox.Store, graph: GraphName | None) -> Iterator[ox.Quad]:
    return store.quads_for_pattern(None, None, None, graph)  # type: ignore[no-any-return]


def named_graph_names(store: ox.Store) -> list[ox.NamedNode]:
    # Changeset.dropped_graphs carries IRIs only (wire form); a blank node graph name can
    # only come from an RDF add, and keeps its (empty) entry.
    return [g for g in store.named_graphs() if type(g) is ox.NamedNode]


@dataclass(frozen=True)
class ClearStep(Step):
    """CLEAR (``drop`` False: graphs stay, emptied) and DROP (graphs go too).

    GRAPH g of a missing graph fails unless SILENT ("The graph <g> does not exist", as
    pyoxigraph); DEFAULT empties the default graph (DROP DEFAULT too); NAMED/ALL act on
    every named graph / every graph."""

    drop: bool
    target: str  # GRAPH, DEFAULT, NAMED, ALL
    graph: ox.NamedNode | None
    silent: bool

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        if self.target == "GRAPH":
            assert self.graph is not None
            if not store.contains_named_graph(self.graph):
                if self.silent:
                    return Changeset()
                raise UpdateExecutionError(f"The graph {self.graph} does not exist")
            removed = frozenset(_graph_quads(store, self.graph))
            dropped = frozenset({self.graph}) if self.drop else frozenset()
            return Changeset(removed=removed, dropped_graphs=dropped)
        if self.target == "DEFAULT":
            return Changeset(removed=frozenset(_graph_quads(store, _DEFAULT)))
        if self.target == "NAMED":
            removed = frozenset(q for q in _graph_quads(store, None)
                                if type(q.graph_name) is not ox.DefaultGraph)
        else:  # ALL
            removed = frozenset(_graph_quads(store, None))
        dropped = frozenset(named_graph_names(store)) if self.drop else frozenset()
        return Changeset(removed=removed, dropped_graphs=dropped)


@dataclass(frozen=True)
class CreateStep(Step):
    """CREATE GRAPH: fails on an existing graph unless SILENT."""

    graph: ox.NamedNode
    silent: bool

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        if store.contains_named_graph(self.graph):
            if self.silent:
                return Changeset()
            raise UpdateExecutionError(f"The graph {self.graph} already exists")
        return Changeset(created_graphs=frozenset({self.graph}))


@dataclass(frozen=True)
class TransferStep(Step):
    """ADD / COPY / MOVE, with pyoxigraph's rewriting (SPARQL 1.1 Update 3.2.4-3.2.6):

    * same source and destination: nothing (even for a missing graph);
    * ADD:  INSERT { GRAPH to { ?s ?p ?o } } WHERE { GRAPH from { ?s ?p ?o } }
            (a missing source adds nothing, no error);
    * COPY: DROP SILENT to; ADD — an existing destination that ends up empty is dropped;
    * MOVE: DROP SILENT to; ADD; DROP [SILENT] from — a missing source fails unless
            SILENT (and then the destination is still dropped).
    """

    kind: str  # ADD, MOVE, COPY
    source: ox.NamedNode | ox.DefaultGraph
    destination: ox.NamedNode | ox.DefaultGraph
    silent: bool

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        src, dst = self.source, self.destination
        if src == dst:
            return Changeset()
        src_named = type(src) is ox.NamedNode
        if (self.kind == st.MOVE and src_named and not self.silent
                and not store.contains_named_graph(src)):
            raise UpdateExecutionError(f"The graph {src} does not exist")
        src_quads = list(_graph_quads(store, src))
        copies = {ox.Quad(q.subject, q.predicate, q.object, dst) for q in src_quads}
        removed: set[ox.Quad] = set()
        dropped: set[ox.NamedNode] = set()
        if self.kind == st.ADD:
            added = {q for q in copies if q not in store}
        else:
            before = set(_graph_quads(store, dst))
            removed |= before - copies
            added = copies - before
            if (type(dst) is ox.NamedNode and not copies
                    and store.contains_named_graph(dst)):
                dropped.add(dst)
        if self.kind == st.MOVE:
            removed.update(src_quads)
            if src_named and store.contains_named_graph(src):
                dropped.add(src)  # type: ignore[arg-type]
        return exact_changeset(store, removed, added, dropped)

