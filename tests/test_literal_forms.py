"""The literal forms table of docs/design/rdf4j-protocol.md ("Where we differ") holds.

Each row is written to a pyoxigraph store on disk, once with ``INSERT DATA`` and once with
``add``, and read back: the table is what users are told the cluster does to their
literals, so it is checked against the engine the workers run, row by row.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyoxigraph as ox
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "design" / "rdf4j-protocol.md"
XSD = "http://www.w3.org/2001/XMLSchema#"
ROW = re.compile(r"^\s*\| `(?P<written>[^`]+)` \| `(?P<read>[^`]+)` \|\s*$")


def table() -> list[tuple[str, str]]:
    text = DOC.read_text()
    start = text.index("<!-- literal-forms:")
    end = text.index("<!-- /literal-forms -->")
    return [(m["written"], m["read"]) for line in text[start:end].splitlines()
            if (m := ROW.match(line))]


def to_ntriples(term: str) -> str:
    return re.sub(r"\^\^xsd:(\w+)$", lambda m: f"^^<{XSD}{m[1]}>", term)


def parsed(term: str) -> ox.Literal:
    """The literal as a parser reads it from N-Triples, before any store sees it."""
    [triple] = ox.parse(f"<urn:s> <urn:p> {to_ntriples(term)} .", format=ox.RdfFormat.N_TRIPLES)
    return triple.object


def test_the_table_is_there_and_names_the_changes_users_meet():
    rows = dict(table())
    assert len(rows) >= 20
    assert rows['"42"^^xsd:int'] == '"42"^^xsd:integer'  # what RDF4J's createLiteral(42) writes


@pytest.mark.parametrize(("written", "read_back"), table(), ids=lambda v: v)
def test_the_engine_reads_each_literal_back_as_the_table_says(tmp_path, written, read_back):
    store = ox.Store(str(tmp_path / "store"))
    subject, predicate = ox.NamedNode("urn:s"), ox.NamedNode("urn:p")
    store.update(f"INSERT DATA {{ <urn:s> <urn:p> {to_ntriples(written)} }}")
    by_update = [q.object for q in store.quads_for_pattern(subject, predicate, None)]
    store.clear()
    store.add(ox.Quad(subject, predicate, parsed(written)))
    by_add = [q.object for q in store.quads_for_pattern(subject, predicate, None)]
    expected = parsed(read_back)
    # Compared as terms: the lexical form, the datatype and the language tag all count.
    assert [(t.value, t.datatype, t.language) for t in by_update] == \
        [(expected.value, expected.datatype, expected.language)]
    assert [(t.value, t.datatype, t.language) for t in by_add] == \
        [(expected.value, expected.datatype, expected.language)]
