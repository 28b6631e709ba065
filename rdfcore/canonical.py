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
import re
from collections.abc import Sequence
from typing import Any, TypeAlias

import pyoxigraph as ox

GraphName: TypeAlias = ox.NamedNode | ox.BlankNode | ox.DefaultGraph
Term: TypeAlias = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple

XSD = "http://www.w3.org/2001/XMLSchema#"
XSD_STRING = XSD + "string"
_XSD_STRING = ox.NamedNode(XSD_STRING)
_CANON = ox.NamedNode("urn:x-txcluster:canonical")


@functools.lru_cache(maxsize=65536)
def _canonical_literal(lit: ox.Literal) -> ox.Literal:
    # The store rewrites typed literals ("01"^^xsd:integer -> "1"); the cheapest exact
    # oracle is a one-quad round trip through an in-memory store (~3 us, then cached).
    scratch = ox.Store()
    scratch.add(ox.Quad(_CANON, _CANON, lit))
    return next(iter(scratch)).object  # type: ignore[no-any-return]


# Lexical forms the store keeps as they are, checked without the round trip: each costs
# ~14 us when it misses the cache, and most integers of a data set are distinct (a third
# of the probe's time in a load of such data). Integers of up to 18 digits fit the
# store's 64-bit integers, whose canonical form they are (others of that size are written
# as Python writes the integer); booleans are "true"/"false".
# (tests/test_changeset.py compares them with the round trip.)
_XSD_INTEGER = ox.NamedNode(XSD + "integer")
_XSD_BOOLEAN = ox.NamedNode(XSD + "boolean")
_CANONICAL_INTEGER_FORM = r"0|-?[1-9][0-9]{0,17}"
_CANONICAL_INTEGER = re.compile(_CANONICAL_INTEGER_FORM)
_INTEGER = re.compile(r"[+-]?[0-9]+")  # not int()'s syntax: no spaces, no underscores
_INTEGER_BOUND = 10**18
_CANONICAL_BOOLEANS = frozenset(("true", "false"))
# The same forms at the end of a canonical N-Quads line, where they are its object (the
# graph name after it is an IRI or a blank node, and a quote inside a literal is
# escaped): a line matched by this holds a typed literal the store keeps as written
# (worker_service/bulk_load.py checks a part's lines so, without the store).
_KEPT_OBJECT = (
    rb' "(?:(?:' + _CANONICAL_INTEGER_FORM.encode() + rb')"\^\^<'
    + re.escape((XSD + "integer").encode()) + rb'>|(?:'
    + b"|".join(sorted(b.encode() for b in _CANONICAL_BOOLEANS)) + rb')"\^\^<'
    + re.escape((XSD + "boolean").encode()) + rb'>)(?: <[^>\n]*>| _:[^ \n]+)? \.')
KEPT_OBJECT_AT_END = re.compile(_KEPT_OBJECT + rb'\Z')
# The same, at the end of any line of a text (each match holds one '"^^<').
KEPT_OBJECT_AT_LINE_END = re.compile(_KEPT_OBJECT + rb'(?=\n|\Z)')


def canonical_term(term: Any) -> Any:
    """``term`` as the store would give it back. Language tags are already lowercased by
    pyoxigraph's Literal; plain strings and IRIs never change."""
    kind = type(term)
    if kind is ox.Literal:
        if term.language is None:
            datatype = term.datatype
            if datatype == _XSD_STRING:
                return term
            if datatype == _XSD_INTEGER:
                value = term.value
                if _CANONICAL_INTEGER.fullmatch(value):
                    return term
                if _INTEGER.fullmatch(value) and -_INTEGER_BOUND < (n := int(value)) < \
                        _INTEGER_BOUND:
                    return ox.Literal(str(n), datatype=_XSD_INTEGER)  # "+05" -> "5"
            elif datatype == _XSD_BOOLEAN and term.value in _CANONICAL_BOOLEANS:
                return term
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


def canonical_lines(quads: Sequence[ox.Quad]) -> list[str]:
    """``canonical_quad``'s line of each quad, in order, for many quads at once.

    pyoxigraph's N-Quads serialiser writes each quad as ``str(quad) + " ."``, one line
    each, in one call: 28 against 41 ms per 100,000 quads formatted one by one
    (in-process, bench/README "Less Python per quad on both sides"). As in
    ``canonical_quad``, only lines with a typed literal can differ; where the object is
    not canonical its text is replaced where it stands, the last occurrence in the line
    (the graph name after it is an IRI or a blank node: no quote)."""
    text = ox.serialize(quads, format=ox.RdfFormat.N_QUADS).decode()
    lines = text.split("\n")
    lines.pop()  # after the last newline
    if '"^^<' not in text:
        return lines
    for i, line in enumerate(lines):
        if '"^^<' in line:
            obj = quads[i].object
            canon = canonical_term(obj)
            if canon is not obj and canon != obj:
                before, after = str(obj), str(canon)
                at = line.rfind(before)
                lines[i] = line[:at] + after + line[at + len(before):]
    return lines
