"""The master's check of an update is the worker's parse (rdfcore/update_syntax.py).

What a master refuses before logging (rdf4j_protocol.writes.check_update) is exactly what a
worker's parse (worker_service.update_parsing.parse_update) refuses, for the W3C SPARQL 1.1
update syntax suites (good and bad requests, and each cut short), the changeset tests'
malformed requests and the fuzz suite's shapes: nothing the master accepts fails the
worker's parse, nothing the worker would run is refused by the master. And the master's
answer is one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rdf4j_protocol.parameters import ProtocolError
from rdf4j_protocol.writes import check_update, statements_write
from rdfcore.update_syntax import one_line
from tests.rdf_samples import MALFORMED_UPDATES
from worker_service.transaction import OperationRefused, UpdateSyntaxError
from worker_service.update_parsing import parse_update

BASE = "http://example.org/base/"
SUITE = Path(sys.prefix) / "w3c-sparql11"
REQUESTS = sorted(SUITE.rglob("*.ru")) if SUITE.is_dir() else []
MORE = [
    'INSERT DATA { <urn:a> <urn:b> "x"',
    "PREFIX ex: <http://example.org/> # only a prologue",
    "# only a comment",
    "",
    "   ",
    "LOAD <http://127.0.0.1:1/x.ttl>",
    "INSERT DATA { <urn:a> <urn:b> 1 } ; LOAD <urn:x> ; garbage",
    "PREFIX ex: <http://example.org/>  CLEARDEFAULT",
    "CREATE SILENT GRAPH <http://ex.org/\\u00e9#g>",
    "INSERT { ?s <urn:p> ?o } WHERE { SERVICE <http://127.0.0.1:9/s> { ?s ?p ?o } }",
    "INSERT DATA { <urn:a> <urn:b> 'service' } oops",
    "DELETE DATA { _:b <urn:p> 1 }",
    "WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
]


def texts() -> list[str]:
    out = list(MALFORMED_UPDATES) + MORE
    for path in REQUESTS:
        text = path.read_text(encoding="utf-8")
        out += [text, text[:len(text) // 3], text[:2 * len(text) // 3]]
    return out


def worker_verdict(text: str, using: tuple = ()) -> str:
    try:
        parse_update(text, BASE, using)
    except UpdateSyntaxError:
        return "malformed"
    except OperationRefused as exc:
        return f"refused {exc.status}"
    return "accepted"


def master_verdict(text: str, using: tuple = ()) -> str:
    if not text.strip():
        return "malformed"  # "missing SPARQL update" (update_operation), never sent on
    try:
        check_update(text, BASE, using)
    except ProtocolError as exc:
        if exc.reason == "malformed_query":
            assert "\n" not in exc.message and exc.message.startswith("MALFORMED QUERY: ")
            return "malformed"
        return f"refused {exc.status}"
    return "accepted"


@pytest.mark.parametrize("using", [(), ((False, "<urn:g>"),)])
def test_the_master_refuses_exactly_what_the_worker_refuses(using):
    assert len(REQUESTS) > 100 or not SUITE.is_dir()
    disagree = {}
    for text in texts():
        worker = "malformed" if not text.strip() else worker_verdict(text, using)
        if (master := master_verdict(text, using)) != worker:
            disagree[text[:200]] = (master, worker)
    assert disagree == {}
    assert {worker_verdict(t) for t in texts() if t.strip()} >= {
        "accepted", "malformed", "refused 400", "refused 501"}


def test_the_issues_update_is_one_line_with_where_and_what():
    with pytest.raises(ProtocolError) as refused:
        statements_write("POST", (), b'INSERT DATA { <urn:a> <urn:b> "x"',
                         "application/sparql-update")
    assert (refused.value.status, refused.value.message) == (
        400, "MALFORMED QUERY: error at 1:34: unexpected end of input")


@pytest.mark.parametrize(("text", "message", "expected"), [
    ("INSERT DATA {\n <urn:a> <urn:b> 1 .\n <urn:a> <urn:b> }",
     'error at 3:18: expected one of "$", "\'",\n| \'\\u{00F8}\'..=\'\\u{02FF}\'',
     "error at 3:18: unexpected '}'"),
    ("DELETE DATA { _:b <urn:p> 1 }",
     "error at 1:30: expected one of Variables and blank nodes are not allowed in "
     "DELETE DATA, [_]",
     "error at 1:30: unexpected end of input (Variables and blank nodes are not allowed in "
     "DELETE DATA)"),
    ("INSERT DATA { ex:a <urn:b> 1 }", "error at 1:15: expected GRAPH",
     "error at 1:15: unexpected 'ex:a'"),
    ("x", "no position\nsecond line", "no position"),
    ("x", "y" * 1000, "y" * 297 + "..."),
])
def test_one_line(text, message, expected):
    assert one_line(message, text) == expected
