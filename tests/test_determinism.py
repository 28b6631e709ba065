"""Deterministic execution given the transaction (worker_service/determinism.py, issue 16
item 5): every data centre executes an agreed transaction itself, so NOW(), RAND(), UUID(),
STRUUID(), BNODE() and fresh blank nodes must draw from the transaction (txid, agreed
timestamp) and nothing else. The multi-data-centre case is in tests/test_sync_peering.py."""

from __future__ import annotations

import re

import pyoxigraph as ox
import pytest

from rdfcore.changeset import Changeset
from tests.procs import signed_client
from worker_service import determinism
from worker_service.determinism import find_calls, now_literal, rewrite
from worker_service.operations import Operation
from worker_service.transaction import BlankNodeMinter
from worker_service.update_parsing import parse_update
from worker_service.wire_parsing import parse_operations

EX = "http://example.org/"
P = f"PREFIX ex: <{EX}>\n"
TS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z
UUID4 = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
XSD = "http://www.w3.org/2001/XMLSchema#"


# ---- finding and rewriting the calls: the tokenizer decides, not a text search ----


def test_calls_inside_strings_iris_comments_and_names_are_not_calls() -> None:
    text = ('SELECT * WHERE { ?now ex:rand "NOW()" . ?s ?p \'RAND()\' , """UUID()""" , '
            "'''BNODE()''' . <http://ex.org/now()> ex:now ?rand # STRUUID() NOW()\n"
            '  FILTER(?uuid != ex:bnode) BIND("struuid()" AS ?bnode) }')
    assert find_calls(text) == ()
    assert rewrite(text, find_calls(text), TS) == text


@pytest.mark.parametrize("call,name", [
    ("NOW()", "NOW"), ("now ()", "NOW"), ("Now\n  (\t)", "NOW"), ("NOW # c\n ( )", "NOW"),
    ("RAND()", "RAND"), ("rand ( )", "RAND"), ("UUID()", "UUID"), ("uuid()", "UUID"),
    ("STRUUID()", "STRUUID"), ("StrUuid ()", "STRUUID"), ("BNODE()", "BNODE"),
    ("bnode ()", "BNODE"),
])
def test_every_function_is_found_in_any_case_and_spacing(call: str, name: str) -> None:
    text = f'SELECT * WHERE {{ BIND({call} AS ?x) FILTER(?y != """{call}""") }}'
    [found] = find_calls(text)
    assert (found.name, found.has_args) == (name, False)
    assert text[found.start:found.end] == call
    rewritten = rewrite(text, (found,), TS)
    assert f'"""{call}"""' in rewritten  # the string is untouched
    assert rewritten.count(call) == 1


def test_rewritten_text_is_valid_sparql_in_every_expression_position() -> None:
    text = ("SELECT ?g (SAMPLE(RAND()) AS ?r) WHERE { ?s ?p ?o BIND(now() AS ?n) "
            "FILTER NOW() FILTER(UUID() != STRUUID()) BIND(BNODE(STR(?s)) AS ?b) "
            "BIND(BNODE( 'x' ) AS ?c) } GROUP BY (NOW() AS ?g) HAVING NOW() "
            "ORDER BY RAND() NOW()")
    calls = find_calls(text)
    assert [c.name for c in calls] == ["RAND", "NOW", "NOW", "UUID", "STRUUID", "BNODE",
                                       "BNODE", "NOW", "NOW", "RAND", "NOW"]
    assert [c.has_args for c in calls if c.name == "BNODE"] == [True, True]
    rewritten = rewrite(text, calls, TS)
    assert not re.search(r"(?i)\b(now|rand|uuid|struuid|bnode)\s*\(", rewritten), rewritten
    functions = determinism.custom_functions(calls, BlankNodeMinter("t", TS))
    ox.Store().query(rewritten, custom_functions=functions)  # parses and evaluates


def test_now_literal_is_the_timestamp_in_utc_with_milliseconds() -> None:
    assert now_literal(TS) == ox.Literal("2023-11-14T22:13:20.123Z",
                                         datatype=ox.NamedNode(XSD + "dateTime"))
    assert now_literal(5).value == "1970-01-01T00:00:00.005Z"


def test_an_update_without_such_calls_runs_without_custom_functions() -> None:
    # The common case costs what it did: no calls found, no custom_functions passed.
    for text in (P + "INSERT { ?s ex:known ex:random } WHERE { ?s ex:p ?o }",
                 P + "DELETE { ?s ?p ?o } WHERE { ?s ?p ?o FILTER(?o > 3) }"):
        [step] = parse_update(text).steps()
        assert step.calls == ()  # type: ignore[attr-defined]
    now_only = find_calls("SELECT * WHERE { BIND(NOW() AS ?n) }")
    assert determinism.custom_functions(now_only, BlankNodeMinter("t", TS)) is None


# ---- values: from the transaction, with SPARQL 1.1's semantics ----

UPDATE = P + """
INSERT { ?x ex:now ?n ; ex:rand ?r ; ex:uuid ?u ; ex:struuid ?s ; ex:bnode ?b ;
            ex:k1 ?k1 ; ex:k2 ?k2 ; ex:other ?k3 ; ex:bad ?bad ; ex:t [ ex:of ?x ] }
WHERE { VALUES ?x { ex:a ex:b ex:c }
        BIND(NOW() AS ?n) BIND(RAND() AS ?r) BIND(UUID() AS ?u) BIND(STRUUID() AS ?s)
        BIND(BNODE() AS ?b) BIND(BNODE("k") AS ?k1) BIND(bnode ("k") AS ?k2)
        BIND(BNODE("other") AS ?k3) BIND(BNODE(1) AS ?bad) } ;
INSERT { ex:second ex:now ?n ; ex:k ?k } WHERE { BIND(NOW() AS ?n) BIND(BNODE("k") AS ?k) }
"""


def execute(operations: list[Operation], minter: BlankNodeMinter) -> Changeset:
    store, total = ox.Store(), Changeset()
    for op in operations:
        for step in op.steps():
            cs = step.changeset(store, minter, {})
            store.bulk_extend(cs.added)
            total = total.then(cs)
    return total


def values(cs: Changeset, predicate: str) -> dict[str, ox.Term]:
    return {str(q.subject): q.object for q in cs.added if q.predicate.value == EX + predicate}


def test_values_follow_sparql_semantics_and_come_from_the_transaction() -> None:
    cs = execute([parse_update(UPDATE)], BlankNodeMinter("tx-1", TS))
    rows = [f"<{EX}{x}>" for x in "abc"]
    # NOW(): the transaction's timestamp, one value for every solution and operation
    assert set(values(cs, "now").values()) == {now_literal(TS)}
    assert values(cs, "now").keys() == {*rows, f"<{EX}second>"}
    # RAND(): xsd:double in [0, 1), one draw per solution
    rands = values(cs, "rand")
    assert len(set(rands.values())) == 3
    assert all(r.datatype.value == XSD + "double" and 0 <= float(r.value) < 1
               for r in rands.values())
    # UUID(): urn:uuid: IRIs, STRUUID(): plain strings, version 4, fresh per solution
    uuids, struuids = values(cs, "uuid"), values(cs, "struuid")
    assert all(type(u) is ox.NamedNode and re.fullmatch("urn:uuid:" + UUID4, u.value)
               for u in uuids.values()) and len(set(uuids.values())) == 3
    assert all(type(s) is ox.Literal and s.datatype.value == XSD + "string"
               and re.fullmatch(UUID4, s.value) for s in struuids.values())
    assert len(set(struuids.values())) == 3
    # BNODE(): fresh per solution; BNODE(str): the same node for the same string within
    # a solution, another one in each other solution and operation (SPARQL 1.1 17.4.2.2)
    bnodes = values(cs, "bnode")
    assert len(set(bnodes.values())) == 3
    k1, k2, other = values(cs, "k1"), values(cs, "k2"), values(cs, "other")
    assert k1 == k2 and len(set(k1.values())) == 3
    assert all(other[row] != k1[row] for row in rows)
    assert values(cs, "k")[f"<{EX}second>"] not in set(k1.values())
    assert values(cs, "bad") == {}  # BNODE(1): an error, so unbound, as in pyoxigraph
    # Template blank nodes: fresh per solution
    assert len(set(values(cs, "t").values())) == 3
    # Every label minted for this transaction, none of pyoxigraph's random form
    prefix = "t" + BlankNodeMinter("tx-1").fresh().value[1:33]
    blanks = {t.value for q in cs.added for t in (q.subject, q.object)
              if type(t) is ox.BlankNode}
    assert blanks and all(b.startswith(prefix) for b in blanks), blanks
    # The same transaction gives the same changeset, byte for byte
    again = execute([parse_update(UPDATE)], BlankNodeMinter("tx-1", TS))
    assert again.to_wire() == cs.to_wire()
    # Another txid: other values, same NOW(); another timestamp: another NOW() only
    other_tx = execute([parse_update(UPDATE)], BlankNodeMinter("tx-2", TS))
    assert set(values(other_tx, "now").values()) == {now_literal(TS)}
    for p in ("rand", "uuid", "struuid", "bnode", "k1", "t"):
        assert not set(values(other_tx, p).values()) & set(values(cs, p).values()), p
    later = execute([parse_update(UPDATE)], BlankNodeMinter("tx-1", TS + 1))
    assert set(values(later, "now").values()) == {now_literal(TS + 1)}
    assert values(later, "rand") == rands


def test_document_and_insert_data_blank_nodes_are_minted_from_the_txid() -> None:
    ops = parse_operations([
        {"type": "update", "update": P + "INSERT DATA { _:a ex:p _:b . _:b ex:q [ ex:r 1 ] }"},
        {"type": "add", "format": "text/turtle",
         "data": f"@prefix ex: <{EX}> . _:x ex:p [ ex:q _:x ] ."}])
    first = execute(ops, BlankNodeMinter("tx-9", TS))
    assert first.to_wire() == execute(ops, BlankNodeMinter("tx-9", TS + 5)).to_wire()
    assert first.to_wire() != execute(ops, BlankNodeMinter("tx-8", TS)).to_wire()


# ---- two real worker processes: the same transaction, the same changeset ----

WIRE_OPS = [
    {"type": "update", "update": UPDATE},
    {"type": "update", "update": P + "INSERT DATA { _:d ex:p _:e . _:e ex:q [ ex:r 2 ] }"},
    {"type": "update", "update": P + "INSERT { ?b ex:copy [ ex:at ?n ] } "
                                     "WHERE { ?x ex:bnode ?b BIND(now() AS ?n) }"},
    {"type": "add", "format": "text/turtle",
     "data": f"@prefix ex: <{EX}> . _:x ex:p [ ex:q _:x ] ."},
]


def test_two_workers_executing_the_same_transaction_compute_identical_changesets(
        worker_factory, secret):
    """As two data centres' probes do with one agreed transaction: empty workers, same
    txid and timestamp -> byte-identical changesets and fingerprints; another txid ->
    other values."""
    one, two = worker_factory("dc1-probe"), worker_factory("dc2-probe")

    def run(worker, txid: str, timestamp: int | None) -> dict:
        tx = {"txid": txid, "operations": WIRE_OPS}
        if timestamp is not None:
            tx["timestamp"] = timestamp
        with signed_client(worker, secret[1]) as c:
            state = c.get("/cluster/state").json()
            r = c.post("/cluster/execute", json={"start_seq": state["seq"] + 1,
                                                 "transactions": [tx]})
        assert r.status_code == 200, r.text
        [result] = r.json()["results"]
        assert result["ok"], result
        return result

    a, b = run(one, "agreed-1", TS), run(two, "agreed-1", TS)
    assert a["changeset"] == b["changeset"]
    assert (a["fingerprint"], a["quads"]) == (b["fingerprint"], b["quads"])
    added = a["changeset"]["added"]
    text = added if isinstance(added, str) else "\n".join(map(str, added))
    assert '"2023-11-14T22:13:20.123Z"' in text
    # The next agreed transaction, same on both again; a different txid elsewhere differs
    c, d = run(one, "agreed-2", TS + 1000), run(two, "agreed-2", TS + 1000)
    assert (c["changeset"], c["fingerprint"]) == (d["changeset"], d["fingerprint"])
    three = worker_factory("dc3-probe")
    e = run(three, "agreed-1-elsewhere", TS)
    assert e["fingerprint"] != a["fingerprint"] and e["quads"] == a["quads"]
    # An older master sends no timestamp: the worker's clock, the rest still from the txid
    f = run(worker_factory("old-master"), "agreed-1", None)
    assert f["quads"] == a["quads"] and f["fingerprint"] != a["fingerprint"]
    with signed_client(one, secret[1]) as client:
        r = client.post("/cluster/execute", json={"start_seq": 3, "transactions": [
            {"txid": "x", "operations": [], "timestamp": "yesterday"}]})
    assert r.status_code == 400 and "'timestamp' must be integer milliseconds" in r.text
