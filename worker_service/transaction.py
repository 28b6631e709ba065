"""Transaction operations and their exact changesets (pure logic over a pyoxigraph Store).

A worker executes a transaction step by step: each step's exact changeset is computed
against the store's current state (read-only), journaled, then applied with
``changeset.apply_to`` — so step k sees the effects of steps 1..k-1, as SPARQL 1.1 Update
requires of the operations of one request (ARCHITECTURE.md, "Transactions, changesets,
fingerprints"). Only the probe worker computes; the others apply the same changeset, so
NOW(), RAND(), UUID(), STRUUID(), BNODE() and template blank nodes leave every worker
identical: the WHERE part of an update is evaluated exactly once, here.

How an update is turned into structure without rdflib's ~7 ms parser:

* ``sparql_text`` splits the request into operations and finds their blocks (templates,
  WHERE, QuadData) and IRIs as text;
* LOAD is refused before anything is parsed (running it would fetch from the network);
* syntax is pyoxigraph's: the whole request is parsed once by ``Store.update`` on an empty
  in-memory store, with an operation that fails at execution (CLEAR of a missing graph)
  inserted after the prologue, so nothing of the request is ever executed (no SERVICE
  call); a syntax error is reported with pyoxigraph's message for the request as sent;
* terms are pyoxigraph's: a QuadData block, or a template whose variables were rewritten
  to reserved IRIs, is run as ``INSERT DATA`` into a scratch in-memory store — exactly the
  SPARQL grammar (no Turtle/SPARQL differences to patch), with IRIs resolved against the
  prologue and literals already in the store's canonical form (FACTS.md);
* the hot path, a request that is a single INSERT DATA or DELETE DATA, needs one
  pyoxigraph parse: the scratch run of the request itself is also its syntax check;
* the WHERE pattern is evaluated by pyoxigraph as ``<prologue> SELECT * <dataset> WHERE
  <group>`` and the templates are instantiated per solution in Python.

rdflib is not used at all outside tests. Measured (bench/bench_changeset.py, 2-core
machine under load from other test runs, medians): parse + changeset of a 10-triple
INSERT DATA 0.13 ms, of a one-solution DELETE/INSERT WHERE 0.18-0.21 ms, of a 2-triple
DELETE DATA 0.06 ms; rdflib's parse alone of that INSERT DATA 10-14 ms. Large requests
cost about what pyoxigraph's own update does for INSERT DATA (40k quads: 0.33 s vs
0.25 s) and ~3x for a 40k-solution DELETE/INSERT (1.5 s vs 0.5 s: one Python Quad per
template quad and solution).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

import pyoxigraph as ox

from worker_service import sparql_text as st
from worker_service.changeset import Changeset

GraphName: TypeAlias = ox.NamedNode | ox.BlankNode | ox.DefaultGraph
Term: TypeAlias = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
_XSD_STRING = ox.NamedNode(XSD_STRING)
_DEFAULT = ox.DefaultGraph()

# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class TransactionError(Exception):
    """A transaction that cannot run; ``status`` is the HTTP status to answer with."""

    status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class UpdateSyntaxError(TransactionError):
    """Malformed SPARQL, RDF or wire JSON; the message says what and where."""


class OperationRefused(TransactionError):
    """A well-formed operation the cluster does not run (LOAD)."""


class UpdateExecutionError(TransactionError):
    """An operation that fails against the current state (e.g. CREATE of an existing
    graph without SILENT); the whole transaction is taken back."""


class UnsupportedFormat(TransactionError):
    """An RDF format (media type) pyoxigraph cannot parse."""

    status = 415


# ---------------------------------------------------------------------------------------
# Fresh blank nodes
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlankNodeMinter:
    """Deterministic fresh blank nodes for one transaction.

    Labels are ``t{seq}x{h}n{k}`` with ``h`` the first 8 hex digits of blake2b(txid) and
    ``k`` a counter: valid N-Triples labels, distinct between transactions (seq and txid)
    and between calls, and never of the form pyoxigraph mints (32 hex digits)."""

    seq: int
    txid: str
    _prefix: str = field(init=False, repr=False, compare=False, default="")
    _counter: Iterator[int] = field(init=False, repr=False, compare=False,
                                    default_factory=itertools.count)

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise ValueError(f"seq must be a non-negative integer, got {self.seq!r}")
        if not isinstance(self.txid, str) or not self.txid:
            raise ValueError(f"txid must be a non-empty string, got {self.txid!r}")
        h = hashlib.blake2b(self.txid.encode(), digest_size=4).hexdigest()
        object.__setattr__(self, "_prefix", f"t{self.seq}x{h}n")

    def fresh(self) -> ox.BlankNode:
        return ox.BlankNode(f"{self._prefix}{next(self._counter)}")


# ---------------------------------------------------------------------------------------
# Canonical terms
# ---------------------------------------------------------------------------------------

_CANON = ox.NamedNode("urn:x-txcluster:canonical")


@functools.lru_cache(maxsize=65536)
def _canonical_literal(lit: ox.Literal) -> ox.Literal:
    # The store rewrites typed literals ("01"^^xsd:integer -> "1"); the cheapest exact
    # oracle is a one-quad round trip through an in-memory store (~3 us, then cached).
    scratch = ox.Store()
    scratch.add(ox.Quad(_CANON, _CANON, lit))
    return next(iter(scratch)).object  # type: ignore[no-any-return]


def canonical_term(term: Any) -> Any:
    """``term`` as the store would give it back. Language tags are already lowercased by
    pyoxigraph's Literal; plain strings and IRIs never change."""
    kind = type(term)
    if kind is ox.Literal:
        if term.language is None and term.datatype != _XSD_STRING:
            return _canonical_literal(term)
        return term
    if kind is ox.Triple:  # RDF 1.2 triple term: its literal object is canonicalised too
        return ox.Triple(canonical_term(term.subject), term.predicate,
                         canonical_term(term.object))
    return term


def canonical_quad(q: ox.Quad) -> tuple[ox.Quad, str]:
    """``q`` as the store holds it, and its canonical N-Quads line (``str(q) + " ."``,
    what the fingerprint hashes). Only typed literals other than xsd:string can change:
    testing the text first keeps pyoxigraph's attribute access, ~5x slower than the rest,
    off the common path (bulk loads: worker_service/bulk_load.py, spark_pipeline)."""
    line = f"{q} ."
    if '"^^<' in line:
        obj = q.object
        canon = canonical_term(obj)
        if canon != obj:
            q = ox.Quad(q.subject, q.predicate, canon, q.graph_name)
            line = f"{q} ."
    return q, line


# ---------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------


class Step(ABC):
    """One unit of execution: its changeset is computed against the current state."""

    @abstractmethod
    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        """The exact changeset of this step against ``store`` (which it only reads)."""


def _relabel(term: Any, mapping: dict[str, ox.BlankNode], minter: BlankNodeMinter) -> Any:
    """Blank nodes scoped to one document/operation -> fresh minted nodes (one per label)."""
    kind = type(term)
    if kind is ox.BlankNode:
        node = mapping.get(term.value)
        if node is None:
            node = mapping[term.value] = minter.fresh()
        return node
    if kind is ox.Triple:
        return ox.Triple(_relabel(term.subject, mapping, minter), term.predicate,
                         _relabel(term.object, mapping, minter))
    return term


def _changeset(store: ox.Store, removed: Iterable[ox.Quad] = (), added: Iterable[ox.Quad] = (),
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


def _has_blank(q: ox.Quad) -> bool:
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
            if _has_blank(q):
                q = ox.Quad(_relabel(q.subject, mapping, minter), q.predicate,
                            _relabel(q.object, mapping, minter),
                            _relabel(q.graph_name, mapping, minter))
            if q not in store:
                out.add(q)
        return _changeset(store, added=out)


@dataclass(frozen=True)
class DeleteDataStep(Step):
    """DELETE DATA: removes the listed quads that exist (absent ones are ignored)."""

    quads: tuple[ox.Quad, ...]

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        return Changeset(removed=frozenset(q for q in self.quads if q in store))


# ---- templates ----

Template = tuple[tuple[Any, Any, Any, Any], ...]


class _Var(NamedTuple):
    name: str


class _Fresh(NamedTuple):
    label: str


class _TripleSlot(NamedTuple):
    subject: Any
    predicate: Any
    object: Any


_INVALID = object()  # a template term that can never be instantiated (literal subject)
_UNBOUND = object()  # a variable the WHERE never binds


def _resolve_slot(slot: Any, index: Mapping[str, int]) -> Any:
    """A template slot with variables replaced by their position in the solutions."""
    kind = type(slot)
    if kind is _Var:
        return index.get(slot.name, _UNBOUND)
    if kind is _TripleSlot:
        parts = tuple(_resolve_slot(s, index) for s in slot)
        return _UNBOUND if _UNBOUND in parts else _TripleSlot(*parts)
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
        if any(type(s) in (_Fresh, _TripleSlot) for s in resolved):
            general.append(resolved)
        else:
            simple.append(resolved)
    return simple, general


def _instantiate(slot: Any, values: tuple, fresh: dict[str, ox.BlankNode],
                 minter: BlankNodeMinter) -> Any:
    kind = type(slot)
    if kind is int:
        return values[slot]
    if kind is _Fresh:
        node = fresh.get(slot.label)
        if node is None:
            node = fresh[slot.label] = minter.fresh()
        return node
    if kind is _TripleSlot:
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
    ``_Var``, ``_Fresh`` (template blank node) or ``_TripleSlot``."""

    query: str
    base_iri: str | None
    default_graph: ox.NamedNode | None
    delete: Template
    insert: Template

    def changeset(self, store: ox.Store, minter: BlankNodeMinter,
                  namespaces: Mapping[str, str]) -> Changeset:
        deleted: set[ox.Quad] = set()
        inserted: set[ox.Quad] = set()
        try:
            # The WHERE part is evaluated exactly once, here (NOW(), RAND(), BNODE()...).
            if self.default_graph is None:
                result = store.query(self.query, base_iri=self.base_iri)
            else:
                result = store.query(self.query, base_iri=self.base_iri,
                                     default_graph=self.default_graph)
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
            raise UpdateExecutionError(f"WHERE evaluation failed: {exc}") from None
        # The result is (S - D) + I: pyoxigraph removes all of D before inserting I.
        removed = [q for q in deleted if q not in inserted and q in store]
        added = [q for q in inserted if q not in store]
        return _changeset(store, removed, added)


# ---- graph management (SPARQL 1.1 Update 3.2, as pyoxigraph evaluates it) ----


def _graph_quads(store: ox.Store, graph: GraphName | None) -> Iterator[ox.Quad]:
    return store.quads_for_pattern(None, None, None, graph)  # type: ignore[no-any-return]


def _named_graph_names(store: ox.Store) -> list[ox.NamedNode]:
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
        dropped = frozenset(_named_graph_names(store)) if self.drop else frozenset()
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
        return _changeset(store, removed, added, dropped)


# ---------------------------------------------------------------------------------------
# Operations (the JSON wire form a master sends)
# ---------------------------------------------------------------------------------------


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
        for q in self.quads:
            s = q.subject if keep else _relabel(q.subject, mapping, minter)
            o = canonical_term(q.object if keep else _relabel(q.object, mapping, minter))
            graphs = self.contexts or (
                q.graph_name if keep else _relabel(q.graph_name, mapping, minter),)
            for g in graphs:
                out.add(ox.Quad(s, q.predicate, o, g))
        return _changeset(store, added=[q for q in out if q not in store])


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
                dropped = frozenset(_named_graph_names(store))
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


# ---------------------------------------------------------------------------------------
# Parsing SPARQL updates into steps
# ---------------------------------------------------------------------------------------

_PROBE_GRAPH = "urn:x-txcluster:syntax-probe"
_PROBE = f" CLEAR GRAPH <{_PROBE_GRAPH}> ; "
# The only operations that reach out of the process. A text that mentions neither word
# anywhere (even in a literal) can be run on an empty scratch store without risk, should
# this module ever disagree with pyoxigraph about where operations start.
_REMOTE = re.compile(r"[lLsS](?i:oad|ervice)")  # a leading class keeps the search fast

LOAD_REFUSED = (
    "LOAD is not supported in a cluster: every worker must end up with the same data, so a "
    "transaction has to carry it rather than fetch it from a URL; send the document as an "
    "RDF add instead (e.g. POST it to /repositories/{id}/statements)")


def _check_syntax(text: str, base_iri: str | None, split: st.SplitUpdate) -> None:
    """Parse the whole request with pyoxigraph without executing any of it.

    The probe operation inserted after the first prologue fails at execution (its graph
    does not exist), and operations execute in order after the whole request is parsed:
    a SyntaxError means the request is malformed, the probe's RuntimeError means it is
    well-formed. A valid request stays valid with the probe inserted (SPARQL allows
    ``Update1 ; Update1``), so an invalid probe text means an invalid request; its own
    parse then gives pyoxigraph's message with the user's positions. (Unless the text
    mentions LOAD or SERVICE: then the probe's position is mapped back instead.)"""
    at = split.prologue_end
    if at >= len(text):
        # Nothing but a prologue, white space and comments: a valid, empty update (or a
        # broken prologue), parsed as it is: it has no operation to execute. The probe
        # can't go after it, where a final comment without a line break would swallow it.
        # (Found by tests/fuzz: "# only a comment" was a 500 that took the probe worker
        # out of rotation.)
        try:
            ox.Store().update(text, base_iri=base_iri)
        except SyntaxError as exc:
            raise UpdateSyntaxError(f"invalid SPARQL update: {exc}") from None
        return
    probe = text[:at] + _PROBE + text[at:]
    try:
        ox.Store().update(probe, base_iri=base_iri)
    except SyntaxError as exc:
        message = str(exc)
        if not _REMOTE.search(text):
            try:
                ox.Store().update(text, base_iri=base_iri)
            except SyntaxError as original:
                message = str(original)
            except (RuntimeError, OSError, ValueError):
                pass
        else:
            message = _unshift_position(message, text, at)
        raise UpdateSyntaxError(f"invalid SPARQL update: {message}") from None
    except RuntimeError as exc:
        if _PROBE_GRAPH in str(exc):
            return
        raise
    raise AssertionError("the syntax probe operation did not fail")  # pragma: no cover


_POSITION = re.compile(r"^error at (\d+):(\d+)")


def _unshift_position(message: str, text: str, at: int) -> str:
    """Map "error at line:column" in the probe text back to ``text`` (the probe, without
    line breaks, was inserted at offset ``at``; pyoxigraph counts columns in characters)."""
    m = _POSITION.match(message)
    if m is None:
        return message
    line, col = int(m.group(1)), int(m.group(2))
    at_line = text.count("\n", 0, at) + 1
    at_col = at - (text.rfind("\n", 0, at) + 1) + 1
    if line == at_line and col > at_col:
        col = max(at_col, col - len(_PROBE))
    return f"error at {line}:{col}{message[m.end():]}"


def _structure_error(detail: str) -> OperationRefused:
    # pyoxigraph accepted the text but this tokenizer could not structure it: a
    # limitation of ours, not the client's error.
    return OperationRefused(
        f"txcluster cannot compute the changeset of this update: {detail}", status=501)


def _scratch_quads(prologue: str, block: str, base_iri: str | None) -> tuple[ox.Quad, ...]:
    """QuadData through pyoxigraph's own SPARQL parser: canonical terms, resolved IRIs,
    each blank node label one (random) node."""
    scratch = ox.Store()
    try:
        scratch.update(f"{prologue}\nINSERT DATA {block}", base_iri=base_iri)
    except SyntaxError as exc:
        raise _structure_error(f"{exc} in {block[:200]!r}") from None
    return tuple(scratch)


def _resolve_iris(prologue: str, base_iri: str | None, texts: list[str]) -> list[ox.NamedNode]:
    """IRI texts (IRIREF or prefixed names) resolved against the prologue and base."""
    return list(_resolve_iris_cached(prologue, base_iri, tuple(texts)))


@functools.lru_cache(maxsize=1024)
def _resolve_iris_cached(prologue: str, base_iri: str | None, texts: tuple[str, ...]
                         ) -> tuple[ox.NamedNode, ...]:
    names = " ".join(f"?i{k}" for k in range(len(texts)))
    query = f"{prologue}\nSELECT * WHERE {{ VALUES ({names}) {{ ({' '.join(texts)}) }} }}"
    try:
        [solution] = list(ox.Store().query(query, base_iri=base_iri))  # type: ignore[arg-type]
    except (SyntaxError, ValueError) as exc:
        raise _structure_error(f"cannot resolve {texts}: {exc}") from None
    return tuple(solution[f"i{k}"] for k in range(len(texts)))


_CACHED_TEMPLATE_CHARS = 4096


def _compile_template(prologue: str, block: str, base_iri: str | None,
                      default_graph: ox.NamedNode | ox.DefaultGraph) -> Template:
    """Template text -> slots. Pure, so small templates are cached: applications send the
    same update shapes over and over with other constants in their WHERE."""
    if len(block) + len(prologue) <= _CACHED_TEMPLATE_CHARS:
        return _compile_template_cached(prologue, block, base_iri, default_graph)
    return _TemplateCompiler(prologue, base_iri).compile(block, default_graph)


@functools.lru_cache(maxsize=1024)
def _compile_template_cached(prologue: str, block: str, base_iri: str | None,
                             default_graph: ox.NamedNode | ox.DefaultGraph) -> Template:
    return _TemplateCompiler(prologue, base_iri).compile(block, default_graph)


class _TemplateCompiler:
    """Turns template text into slots; variables travel as IRIs in a namespace that is
    random per compilation, so no IRI of the request can be taken for a variable."""

    def __init__(self, prologue: str, base_iri: str | None) -> None:
        self.prologue = prologue
        self.base_iri = base_iri
        self.ns = f"urn:x-txcluster-var:{secrets.token_hex(8)}:"
        self.invalid = self.ns + "-literal-subject"  # not a VARNAME: cannot collide

    def compile(self, block: str, default_graph: ox.NamedNode | ox.DefaultGraph) -> Template:
        text = st.rewrite_template(block, self.ns.__add__, self.invalid)
        out = []
        for q in _scratch_quads(self.prologue, text, self.base_iri):
            g = q.graph_name
            slots = (self.slot(q.subject), self.slot(q.predicate), self.slot(q.object),
                     default_graph if type(g) is ox.DefaultGraph else self.slot(g))
            if not any(s is _INVALID for s in slots):
                out.append(slots)
        return tuple(out)

    def slot(self, term: Any) -> Any:
        kind = type(term)
        if kind is ox.NamedNode:
            if term.value.startswith(self.ns):
                if term.value == self.invalid:
                    return _INVALID
                return _Var(term.value[len(self.ns):])
            return term
        if kind is ox.BlankNode:
            return _Fresh(term.value)
        if kind is ox.Triple:
            parts = (self.slot(term.subject), self.slot(term.predicate),
                     self.slot(term.object))
            if any(s is _INVALID for s in parts):
                return _INVALID
            if all(type(s) not in (_Var, _Fresh, _TripleSlot) for s in parts):
                return term
            return _TripleSlot(*parts)
        return term


def _dataset(using: tuple[tuple[bool, str], ...]) -> str:
    return "".join(f"FROM NAMED {iri} " if named else f"FROM {iri} " for named, iri in using)


def _sparql_step(op: st.ParsedOperation, base_iri: str | None) -> Step:
    prologue = op.prologue
    if op.kind == st.INSERT_DATA:
        assert op.data is not None
        return InsertDataStep(_scratch_quads(prologue, op.data, base_iri))
    if op.kind == st.DELETE_DATA:
        assert op.data is not None
        return DeleteDataStep(_scratch_quads(prologue, op.data, base_iri))
    if op.kind == st.DELETE_WHERE:
        # DELETE WHERE { QuadPattern }: the pattern is both the WHERE and the template
        # (its dataset only ever comes from the protocol's using-graph-uri).
        assert op.where is not None and op.delete is not None
        return ModifyStep(f"{prologue}\nSELECT * {_dataset(op.using)}WHERE {op.where}",
                          base_iri, None,
                          _compile_template(prologue, op.delete, base_iri, _DEFAULT), ())
    if op.kind == st.MODIFY:
        assert op.where is not None
        with_graph = _resolve_iris(prologue, base_iri, [op.with_iri])[0] \
            if op.with_iri is not None else None
        # USING/USING NAMED give the WHERE's dataset exactly as FROM/FROM NAMED would
        # (USING NAMED alone: empty default graph); WITH applies to the WHERE only
        # without USING, and to the templates always (SPARQL 1.1 Update 3.1.3).
        query = f"{prologue}\nSELECT * {_dataset(op.using)}WHERE {op.where}"
        template_graph = with_graph or _DEFAULT
        delete = _compile_template(prologue, op.delete, base_iri, template_graph) \
            if op.delete else ()
        insert = _compile_template(prologue, op.insert, base_iri, template_graph) \
            if op.insert else ()
        return ModifyStep(query, base_iri, None if op.using else with_graph, delete, insert)
    if op.kind in (st.CLEAR, st.DROP):
        assert op.target is not None
        graph = _resolve_iris(prologue, base_iri, [op.graph])[0] if op.graph else None
        return ClearStep(op.kind == st.DROP, op.target, graph, op.silent)
    if op.kind == st.CREATE:
        assert op.graph is not None
        return CreateStep(_resolve_iris(prologue, base_iri, [op.graph])[0], op.silent)
    if op.kind in (st.ADD, st.MOVE, st.COPY):
        texts = [t for t in (op.source, op.destination) if t is not None]
        resolved = iter(_resolve_iris(prologue, base_iri, texts) if texts else [])
        source = next(resolved) if op.source is not None else _DEFAULT
        destination = next(resolved) if op.destination is not None else _DEFAULT
        return TransferStep(op.kind, source, destination, op.silent)
    raise _structure_error(f"unexpected operation {op.kind}")


def _single_data_step(update: str, base_iri: str | None, raw: st.RawOperation) -> Step | None:
    """The hot path, a request that is one INSERT DATA or DELETE DATA: one pyoxigraph
    parse of the request itself (as INSERT DATA into a scratch store) both checks its
    syntax and gives its canonical quads. None: take the general path (which also gives
    the exact error message)."""
    if _REMOTE.search(update):
        return None
    head = raw.tokens[0]
    delete = head.text.upper() == "DELETE"
    # Same length, so positions stay those of the request.
    text = update[:head.start] + "INSERT" + update[head.end:] if delete else update
    scratch = ox.Store()
    try:
        scratch.update(text, base_iri=base_iri)
    except (SyntaxError, RuntimeError, OSError):
        return None
    quads = tuple(scratch)
    if delete:
        if any(_has_blank(q) for q in quads):
            return None  # DELETE DATA cannot contain blank nodes: a syntax error
        return DeleteDataStep(quads)
    return InsertDataStep(quads)


def parse_update(update: str, base_iri: str | None = None,
                 using: tuple[tuple[bool, str], ...] = ()) -> UpdateOperation:
    """A SPARQL 1.1 Update request as an operation; raises UpdateSyntaxError with
    pyoxigraph's message, OperationRefused for LOAD (checked first, before any parse).

    ``using``: the protocol's dataset (``using-graph-uri`` / ``using-named-graph-uri``,
    SPARQL 1.1 Protocol 2.2.3) as (named, ``<iri>``) pairs: the WHERE of every operation
    that has one is evaluated over it, as if each said USING / USING NAMED; an operation
    that states its own USING or WITH is then an error, as the protocol requires."""
    if not isinstance(update, str):
        raise UpdateSyntaxError("'update' must be a string")
    if base_iri is not None:
        _check_absolute_iri(base_iri, "base_iri")
    split = st.split_update(update)
    for raw in split.operations:
        if raw.head == st.LOAD:
            raise OperationRefused(LOAD_REFUSED)
    ops = split.operations
    # A single INSERT DATA / DELETE DATA has no WHERE: the protocol's dataset changes nothing.
    if (len(ops) == 1 and len(ops[0].tokens) == 3 and ops[0].head in ("INSERT", "DELETE")
            and st.keyword(ops[0].tokens[1]) == "DATA" and ops[0].tokens[2].kind == st.BLOCK):
        step = _single_data_step(update, base_iri, ops[0])
        if step is not None:
            return UpdateOperation(update, base_iri, (step,))
    _check_syntax(update, base_iri, split)
    steps = []
    for raw in split.operations:
        try:
            parsed = st.classify(update, raw)
        except st.SparqlTextError as exc:
            raise _structure_error(str(exc)) from None
        if using and parsed.kind in (st.MODIFY, st.DELETE_WHERE):
            if parsed.using or parsed.with_iri is not None:
                raise UpdateSyntaxError(
                    "an update sent with using-graph-uri or using-named-graph-uri must "
                    "not state USING, USING NAMED or WITH itself (SPARQL 1.1 Protocol)")
            parsed = dataclasses.replace(parsed, using=using)
        steps.append(_sparql_step(parsed, base_iri))
    return UpdateOperation(update, base_iri, tuple(steps))


# ---------------------------------------------------------------------------------------
# Parsing the other wire operations
# ---------------------------------------------------------------------------------------

# PN_PREFIX ::= PN_CHARS_BASE ((PN_CHARS|'.')* PN_CHARS)?  (SPARQL 1.1 grammar [168])
_PN_CHARS_BASE = ("A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff"
                  "\u200c\u200d\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf"
                  "\ufdf0-\ufffd\U00010000-\U000effff")
_PN_CHARS = _PN_CHARS_BASE + "_\\-0-9\u00b7\u0300-\u036f\u203f\u2040"
_PN_PREFIX = re.compile(f"(?:[{_PN_CHARS_BASE}](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?)?")


def _check_absolute_iri(value: Any, what: str) -> ox.NamedNode:
    if not isinstance(value, str):
        raise UpdateSyntaxError(f"{what} must be an absolute IRI string, got {value!r}")
    try:
        return ox.NamedNode(value)
    except ValueError as exc:
        raise UpdateSyntaxError(f"{what} is not an absolute IRI: '{value}' ({exc})") from None


def _parse_nt_term(value: Any, what: str) -> Any:
    """One RDF4J N-Triples encoded value (``<iri>``, ``_:b``, ``"lit"@en``, ...)."""
    if not isinstance(value, str):
        raise UpdateSyntaxError(f"{what} must be an N-Triples encoded string, got {value!r}")
    try:
        [triple] = list(ox.parse(f"<urn:x-txcluster:s> <urn:x-txcluster:p> {value} .",
                                 format=ox.RdfFormat.N_TRIPLES))
    except (SyntaxError, ValueError) as exc:
        raise UpdateSyntaxError(
            f"{what} is not one N-Triples encoded term: {value!r} ({exc})") from None
    return triple.object


def _parse_context(value: Any, what: str) -> GraphName:
    if value == "null":
        return _DEFAULT
    term = _parse_nt_term(value, what)
    if type(term) not in (ox.NamedNode, ox.BlankNode):
        raise UpdateSyntaxError(f"{what} must be <iri>, _:label or null, got {value!r}")
    return term  # type: ignore[no-any-return]


def _parse_contexts(value: Any) -> tuple[GraphName, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise UpdateSyntaxError(
            f"'contexts' must be null (every graph / as in the data) or a non-empty list, "
            f"got {value!r}")
    return tuple(dict.fromkeys(_parse_context(v, f"context {v!r}") for v in value))


def _fields(item: Mapping[str, Any], required: tuple[str, ...],
            optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in required if k not in item]
    if missing:
        raise UpdateSyntaxError(f"missing field(s) {', '.join(missing)}")
    unknown = sorted(set(item) - {"type", *required, *optional})
    if unknown:
        raise UpdateSyntaxError(f"unknown field(s) {', '.join(unknown)}")


def _parse_add(item: Mapping[str, Any]) -> AddOperation:
    _fields(item, ("data", "format"), ("contexts", "base_iri", "preserve_node_ids"))
    data, fmt_text = item["data"], item["format"]
    if not isinstance(data, str):
        raise UpdateSyntaxError("'data' must be a string")
    if not isinstance(fmt_text, str):
        raise UpdateSyntaxError("'format' must be a media type string")
    fmt = ox.RdfFormat.from_media_type(fmt_text)
    if fmt is None:
        raise UnsupportedFormat(f"unsupported RDF format '{fmt_text}'")
    base_iri = item.get("base_iri")
    if base_iri is not None:
        _check_absolute_iri(base_iri, "base_iri")
    contexts = _parse_contexts(item.get("contexts"))
    preserve = item.get("preserve_node_ids", False)
    if not isinstance(preserve, bool):
        raise UpdateSyntaxError("'preserve_node_ids' must be true or false")
    try:
        # Labels as written: scope markers, replaced by minted ones unless preserved.
        quads = tuple(ox.parse(data, format=fmt, base_iri=base_iri))
    except (SyntaxError, ValueError) as exc:
        raise UpdateSyntaxError(f"invalid {fmt.name} data: {exc}") from None
    return AddOperation(data, fmt.media_type, contexts, base_iri, quads, preserve)


def _parse_remove(item: Mapping[str, Any]) -> RemoveOperation:
    _fields(item, (), ("subject", "predicate", "object", "contexts"))
    s = p = o = None
    if item.get("subject") is not None:
        s = _parse_nt_term(item["subject"], "subject")
        if type(s) not in (ox.NamedNode, ox.BlankNode):
            raise UpdateSyntaxError(f"subject must be an IRI or a blank node: {item['subject']}")
    if item.get("predicate") is not None:
        p = _parse_nt_term(item["predicate"], "predicate")
        if type(p) is not ox.NamedNode:
            raise UpdateSyntaxError(f"predicate must be an IRI: {item['predicate']}")
    if item.get("object") is not None:
        o = canonical_term(_parse_nt_term(item["object"], "object"))
    return RemoveOperation(s, p, o, _parse_contexts(item.get("contexts")))


def _parse_namespace(item: Mapping[str, Any]) -> NamespaceOperation:
    _fields(item, ("prefix", "namespace"))
    prefix, namespace = item["prefix"], item["namespace"]
    if not isinstance(prefix, str) or not _PN_PREFIX.fullmatch(prefix):
        raise UpdateSyntaxError(f"'{prefix}' is not a valid namespace prefix (PN_PREFIX)")
    if namespace is not None:
        _check_absolute_iri(namespace, "namespace")
    return NamespaceOperation(prefix, namespace)


def _parse_using(wire: Any) -> tuple[tuple[bool, str], ...]:
    """An update's protocol dataset: ``[[named, "<iri>"], ...]`` (rdf4j.py writes it)."""
    if wire is None:
        return ()
    if not isinstance(wire, list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], bool)
            and isinstance(e[1], str) for e in wire):
        raise UpdateSyntaxError("'using' must be a list of [named, \"<iri>\"] pairs")
    for _named, iri in wire:
        if not (iri.startswith("<") and iri.endswith(">")):
            raise UpdateSyntaxError(f"'using' graph {iri!r} must be an IRI in <>")
        _check_absolute_iri(iri[1:-1], "using graph")
    return tuple((named, iri) for named, iri in wire)


def _parse_one(item: Any) -> Operation:
    if not isinstance(item, Mapping):
        raise UpdateSyntaxError(f"an operation must be a JSON object, got {type(item).__name__}")
    kind = item.get("type")
    if kind == "update":
        _fields(item, ("update",), ("base_iri", "using"))
        return parse_update(item["update"], item.get("base_iri"),
                            _parse_using(item.get("using")))
    if kind == "add":
        return _parse_add(item)
    if kind == "remove":
        return _parse_remove(item)
    if kind == "namespace":
        return _parse_namespace(item)
    if kind == "clear_namespaces":
        _fields(item, ())
        return ClearNamespacesOperation()
    raise UpdateSyntaxError(
        f"unknown operation type {kind!r} (expected update, add, remove, namespace or "
        "clear_namespaces)")


def parse_operations(wire: list) -> list[Operation]:
    """Validate and parse every operation of a transaction (SPARQL and RDF syntax
    included) before anything runs; errors name the operation (1-based)."""
    if not isinstance(wire, list):
        raise UpdateSyntaxError(
            f"a transaction's operations must be a JSON list, got {type(wire).__name__}")
    ops: list[Operation] = []
    for index, item in enumerate(wire, 1):
        try:
            ops.append(_parse_one(item))
        except TransactionError as exc:
            label = item.get("type") if isinstance(item, Mapping) else None
            where = f"operation {index}" + (f" ({label})" if isinstance(label, str) else "")
            raise type(exc)(f"{where}: {exc.message}", exc.status) from None
    return ops
