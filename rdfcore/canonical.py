"""Canonical terms: RDF terms and quads exactly as the store gives them back.

pyoxigraph's store rewrites typed literals into their canonical lexical form
("01"^^xsd:integer is stored as "1";
docs/design/dependencies.md#pyoxigraph-the-workers-store). A changeset, a fingerprint and a bulk
load must see a quad as the store holds it, or the incremental fingerprint would differ
from a full recomputation; every node kind and the Spark pipeline canonicalise through
this one module.
"""

from __future__ import annotations

import functools
from typing import Any, TypeAlias

import pyoxigraph as ox

GraphName: TypeAlias = ox.NamedNode | ox.BlankNode | ox.DefaultGraph
Term: TypeAlias = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
_XSD_STRING = ox.NamedNode(XSD_STRING)
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
