"""RDF4J's binary formats on the wire: content negotiation, request bodies, RDF4J's
removal wildcards, and a real cluster driven as RDF4J's HTTPRepository drives a server.

Protocol layer (rdf4j_protocol, no IO): the Accept headers RDF4J sends choose Binary RDF
and the binary results table, and nothing else changes for other clients; a Binary RDF
body becomes an N-Quads add operation (blank node labels kept, as for an N-Quads body)
for POST/PUT /statements and transaction ADD; a transaction DELETE body (Binary RDF or
text) follows RDF4J's Transaction.WildcardRDFRemover: sesame:wildcard matches anything,
no context is every graph, rdf4j:nil / sesame:nil is the default graph.

End to end (tests/java/Rdf4jHttpClient.java: the JDK's HttpClient with its defaults and
RDF4J's Rio, speaking as HTTPRepository does, against a master and two workers): add
statements as Binary RDF, read them back as Binary RDF, SELECT and CONSTRUCT answered in
RDF4J's binary formats, the contexts and namespaces listings, PUT /statements replacing a
context, and a transaction (BEGIN; ADD; DELETE with wildcards and nil contexts; ADD;
COMMIT) whose result is checked with SPARQL.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest

from rdf4j_protocol import binary_rdf, binary_results, negotiation, results, transactions, writes
from rdf4j_protocol.parameters import ProtocolError
from tests.rdf4j_java import JAVA_DIR, compile_java
from tests.rdf_samples import rich_quads

EX = "http://example.org/"
N, B, L = ox.NamedNode, ox.BlankNode, ox.Literal
WILDCARD = N("http://www.openrdf.org/schema/sesame#wildcard")
RDF4J_NIL = N("http://rdf4j.org/schema/rdf4j#nil")
SESAME_NIL = N("http://www.openrdf.org/schema/sesame#nil")
BRDF = "application/x-binary-rdf"
BRTR = "application/x-binary-rdf-results-table"

# The Accept headers RDF4J 3.7's HTTPRepository sends (Rio's registries, binary preferred),
# as tests/java/Rdf4jHttpClient.java builds them.
RDF4J_RDF_ACCEPT = (
    "application/n-triples;q=0.2, text/plain;q=0.2, text/turtle;q=0.3, "
    "application/x-turtle;q=0.3, application/trig;q=0.8, application/x-trig;q=0.8, "
    "application/x-trigstar;q=0.8, application/n-quads;q=0.7, text/x-nquads;q=0.7, "
    "text/nquads;q=0.7, application/x-binary-rdf, text/x-turtlestar;q=0.3, "
    "application/x-turtlestar;q=0.3")
RDF4J_TUPLE_ACCEPT = (
    "application/x-sparqlstar-results+json;q=0.8, application/sparql-results+json;q=0.8, "
    "application/json;q=0.8, application/sparql-results+xml;q=0.8, application/xml;q=0.8, "
    "application/x-sparqlstar-results+xml;q=0.8, application/x-binary-rdf-results-table")


def ex(local: str) -> ox.NamedNode:
    return N(EX + local)


def stored_quads() -> list[ox.Quad]:
    """tests/rdf_samples.py's rich data without its non-canonical numbers (the store
    keeps "01"^^xsd:integer as "1", whatever the format it came in)."""
    return [q for q in rich_quads() if not (
        isinstance(q.object, ox.Literal) and q.object.datatype.value.endswith(("integer",
                                                                              "double")))]


def raises(status: int, fragment: str):
    class Check:
        def __enter__(self):
            return self

        def __exit__(self, kind, exc, tb):
            assert kind is ProtocolError, f"expected ProtocolError {status}, got {exc!r}"
            assert exc.status == status, exc
            assert fragment in exc.message, exc.message
            return True

    return Check()


# ---- content negotiation ----


def test_rdf4j_accept_headers_choose_the_binary_formats():
    tuple_neg = negotiation.negotiate_tuple_format(RDF4J_TUPLE_ACCEPT)
    assert (tuple_neg.media_type, tuple_neg.format) == (BRTR, negotiation.BINARY_RESULTS)
    assert tuple_neg.binary and tuple_neg.content_type == BRTR
    for dataset in (True, False):
        neg = negotiation.negotiate_rdf_format(RDF4J_RDF_ACCEPT, dataset=dataset)
        assert (neg.media_type, neg.format) == (BRDF, negotiation.BINARY_RDF)
        assert neg.binary and neg.supports_datasets and neg.content_type == BRDF
    assert negotiation.negotiate_rdf_format(BRDF).format == negotiation.BINARY_RDF
    assert negotiation.negotiate_tuple_format(BRTR).format == negotiation.BINARY_RESULTS


def test_other_clients_negotiate_as_before():
    QR, RF = ox.QueryResultsFormat, ox.RdfFormat
    assert negotiation.negotiate_tuple_format(None).format == QR.JSON
    assert negotiation.negotiate_tuple_format("*/*").format == QR.JSON
    assert negotiation.negotiate_tuple_format("application/*").format == QR.JSON
    assert negotiation.negotiate_rdf_format("*/*").format == RF.TURTLE
    assert negotiation.negotiate_rdf_format("*/*", dataset=True).format == RF.N_QUADS
    assert negotiation.negotiate_rdf_format("application/*", dataset=True).format == RF.N_QUADS
    neg = negotiation.negotiate_rdf_format("text/turtle")
    assert not neg.binary and not neg.supports_datasets
    # RDF4J has no binary boolean format: an ASK asked for the binary table gets another
    # format the client listed, or 406 if it listed none.
    assert negotiation.negotiate_boolean_format(RDF4J_TUPLE_ACCEPT).format == QR.JSON
    with raises(406, "unsupported query result format"):
        negotiation.negotiate_boolean_format(BRTR)


def test_listings_are_written_as_binary_tables():
    rows = results.namespace_rows({"ex": EX, "é": EX + "é/"})
    data = results.serialize_table(("prefix", "namespace"), rows, negotiation.BINARY_RESULTS)
    result = binary_results.read_results(data)
    assert result.variables == ["prefix", "namespace"]
    assert result.rows == [tuple(r) for r in rows]


# ---- Binary RDF request bodies ----

BODY_QUADS = [
    ox.Quad(ex("s"), ex("p"), L("tab\there, 😀", language="en"), ex("g")),
    ox.Quad(B("genid-1"), ex("p"), B("genid-2")),
    ox.Quad(B("genid-2"), ex("p"), B("genid-1"), B("graphnode")),
    ox.Quad(ex("s"), ex("n"), L("01", datatype=N("http://www.w3.org/2001/XMLSchema#integer"))),
]


def parsed(op: dict) -> list[ox.Quad]:
    assert op["type"] == "add" and op["format"] == "application/n-quads"
    return list(ox.parse(op["data"], format=ox.RdfFormat.N_QUADS))


def test_binary_rdf_body_becomes_an_nquads_add_with_its_labels():
    body = binary_rdf.write_rdf(BODY_QUADS, {"ex": EX})
    [op] = writes.statements_write("POST", (("preserveNodeId", "true"),), body, BRDF)
    assert parsed(op) == BODY_QUADS  # blank node labels kept: one node per label
    assert op["contexts"] is None and op["preserve_node_ids"] is True
    nquads = ox.serialize(BODY_QUADS, format=ox.RdfFormat.N_QUADS)
    [same] = writes.statements_write("POST", (("preserveNodeId", "true"),), nquads,
                                    "application/n-quads")
    assert op == same  # exactly what the same statements as N-Quads give

    [clear, add] = writes.statements_write("PUT", (("context", f"<{EX}g>"),), body,
                                          f"{BRDF}; charset=ignored")
    assert clear == writes.clear_operation([ex("g")])
    assert parsed(add) == BODY_QUADS and add["contexts"] == [f"<{EX}g>"]

    step = transactions.parse_transaction_step((("action", "ADD"),), body, BRDF)
    assert step.action == "ADD" and parsed(step.operations[0]) == BODY_QUADS

    [gsp] = writes.graph_store_write("POST", ex("g2"), (), body, BRDF)
    assert parsed(gsp) == BODY_QUADS and gsp["contexts"] == [f"<{EX}g2>"]


def test_malformed_binary_rdf_body_is_a_400_saying_why():
    good = binary_rdf.write_rdf(BODY_QUADS)
    with raises(400, "MALFORMED DATA: truncated Binary RDF document"):
        writes.statements_write("POST", (), good[:-3], BRDF)
    with raises(400, "MALFORMED DATA: not a Binary RDF document"):
        transactions.parse_transaction_step((("action", "DELETE"),), b"<a> <b> <c> .", BRDF)
    with raises(400, "unsupported Binary RDF format version 7"):
        transactions.parse_transaction_step((("action", "ADD"),), b"BRDF\0\0\0\x07\x7f", BRDF)


def removals(quads: list[ox.Quad], params=(), fmt: str = BRDF) -> list[tuple]:
    if fmt == BRDF:
        body = binary_rdf.write_rdf(quads)
    else:
        body = ox.serialize(quads, format=ox.RdfFormat.N_QUADS)
    step = transactions.parse_transaction_step((("action", "DELETE"), *params), body, fmt)
    assert step.action == "DELETE"
    return [(op["subject"], op["predicate"], op["object"], op["contexts"])
            for op in step.operations]


@pytest.mark.parametrize("fmt", [BRDF, "application/n-quads"])
def test_transaction_delete_body_has_rdf4j_wildcard_semantics(fmt):
    s, p, o, g = f"<{EX}s>", f"<{EX}p>", '"o"', f"<{EX}g>"
    assert removals([
        ox.Quad(ex("s"), WILDCARD, WILDCARD),            # remove(s, null, null): every graph
        ox.Quad(WILDCARD, ex("p"), WILDCARD, RDF4J_NIL),  # remove(null, p, null, (Resource) null)
        ox.Quad(WILDCARD, WILDCARD, L("o"), SESAME_NIL),  # the Sesame name of the default graph
        ox.Quad(ex("s"), ex("p"), WILDCARD, ex("g")),     # remove(s, p, null, g)
        ox.Quad(WILDCARD, WILDCARD, WILDCARD, ex("g")),   # clear(g)
        ox.Quad(WILDCARD, WILDCARD, WILDCARD),            # clear()
        ox.Quad(ex("s"), ex("p"), L("o"), ex("g")),       # an exact statement
    ], fmt=fmt) == [
        (s, None, None, None),
        (None, p, None, ["null"]),
        (None, None, o, ["null"]),
        (s, p, None, [g]),
        (None, None, None, [g]),
        (None, None, None, None),
        (s, p, o, [g]),
    ]
    # The request's context parameters replace the statements' own contexts.
    assert removals([ox.Quad(ex("s"), WILDCARD, WILDCARD, RDF4J_NIL)],
                    (("context", f"<{EX}h>"),), fmt) == [(s, None, None, [f"<{EX}h>"])]


# ---- end to end: a cluster driven as RDF4J's HTTPRepository drives it ----


class Rdf4jClient:
    """tests/java/Rdf4jHttpClient.java, one JVM per call."""

    def __init__(self, classpath: str, repo_url: str, workdir: Path) -> None:
        self.classpath, self.repo_url, self.workdir = classpath, repo_url, workdir
        self.files = 0

    def file(self, text: str) -> str:
        self.files += 1
        path = self.workdir / f"input{self.files}.txt"
        path.write_text(text, encoding="utf-8")
        return str(path)

    def run(self, command: str, *args: str, ok: bool = True) -> str:
        r = subprocess.run(["java", "-cp", self.classpath, "Rdf4jHttpClient", command,
                            self.repo_url, *args], capture_output=True, timeout=180)
        out = r.stdout.decode("utf-8")
        if ok:
            assert r.returncode == 0, f"{command} failed ({r.returncode}):\n{out}" \
                                      f"{r.stderr.decode()}"
        return out

    def statements_of(self, out: str) -> tuple[str, set[ox.Quad]]:
        first, _, rest = out.partition("\n")
        assert first.startswith("# content-type: "), out[:200]
        return (first.removeprefix("# content-type: "),
                set(ox.parse(rest, format=ox.RdfFormat.N_QUADS)))

    def tuples_of(self, out: str) -> tuple[str, list[str], list[tuple]]:
        first, _, rest = out.partition("\n")
        result = ox.parse_query_results(rest.encode(), format=ox.QueryResultsFormat.JSON)
        return (first.removeprefix("# content-type: "), [v.value for v in result.variables],
                [tuple(s) for s in result])


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(workers=2)


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory) -> str:
    """Compiled first: without a JDK or Rio the tests skip before a cluster starts."""
    return compile_java(JAVA_DIR / "Rdf4jHttpClient.java", tmp_path_factory.mktemp("java-http"))


@pytest.fixture(scope="module")
def client(java_classpath, cluster, tmp_path_factory) -> Rdf4jClient:
    return Rdf4jClient(java_classpath, cluster.repo_url, tmp_path_factory.mktemp("java-files"))


@pytest.fixture
def empty(cluster):
    """The repository empty before and after the test."""
    def clear():
        r = httpx.delete(f"{cluster.repo_url}/statements", timeout=30)
        assert r.status_code == 204, r.text
    clear()
    yield cluster
    clear()


def stored(cluster) -> set[ox.Quad]:
    """Everything in the repository, read as N-Quads from Python."""
    r = httpx.get(f"{cluster.repo_url}/statements", headers={"accept": "application/n-quads"},
                  timeout=30)
    assert r.status_code == 200, r.text
    return set(ox.parse(r.content, format=ox.RdfFormat.N_QUADS))


ALL = "SELECT ?s ?p ?o ?g WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }"


def local_select(quads, query: str) -> list[tuple]:
    store = ox.Store()
    store.extend(quads)
    return [tuple(s) for s in store.query(query)]


def sort_rows(rows) -> list[tuple]:
    return sorted(rows, key=lambda r: [str(t) for t in r])


def test_add_and_read_back_as_binary_rdf(client, empty):
    quads = stored_quads()
    out = client.run("add", client.file(ox.serialize(quads, format=ox.RdfFormat.N_QUADS)
                                        .decode()))
    assert out.splitlines() == ["ADD 204"]
    # preserveNodeId=true (as HTTPRepository sends it): blank node labels as written
    assert stored(empty) == set(quads)

    content_type, back = client.statements_of(client.run("statements"))
    assert content_type == BRDF
    assert back == set(quads)
    # a pattern read, still binary
    content_type, some = client.statements_of(
        client.run("statements", f"subj=<{EX}s2>", f"context=<{EX}graph/1>"))
    assert content_type == BRDF
    assert some == {q for q in quads if q.subject == ex("s2") and q.graph_name == ex("graph/1")}

    # Python reading the binary answer with the codec agrees, namespaces included.
    httpx.put(f"{empty.repo_url}/namespaces/ex", content=EX.encode(), timeout=30)
    r = httpx.get(f"{empty.repo_url}/statements", headers={"accept": BRDF}, timeout=30)
    assert r.headers["content-type"] == BRDF
    doc = binary_rdf.read_rdf(r.content)
    assert set(doc.quads) == set(quads)
    assert doc.namespaces.get("ex") == EX
    httpx.delete(f"{empty.repo_url}/namespaces/ex", timeout=30)


def test_select_construct_and_listings_in_binary_formats(client, empty):
    quads = stored_quads()
    r = httpx.post(f"{empty.repo_url}/statements",
                   content=ox.serialize(quads, format=ox.RdfFormat.N_QUADS),
                   headers={"content-type": "application/n-quads"}, timeout=30)
    assert r.status_code == 204, r.text
    content_type, variables, rows = client.tuples_of(client.run("select", ALL))
    assert content_type == BRTR
    assert variables == ["s", "p", "o", "g"]
    # ?g is unbound for the default graph's statements; labels of stored blank nodes
    # are the store's own, so compare with a store loaded the same way
    expected = local_select(quads, ALL)
    assert any(row[3] is None for row in rows)
    assert len(rows) == len(expected)
    assert sort_rows(r for r in rows if not any(isinstance(t, ox.BlankNode) for t in r)) == \
        sort_rows(r for r in expected if not any(isinstance(t, ox.BlankNode) for t in r))

    construct = f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ GRAPH <{EX}graph/1> {{ ?s ?p ?o }} }}"
    content_type, triples = client.statements_of(client.run("construct", construct))
    assert content_type == BRDF
    assert {q for q in triples if not isinstance(q.subject, ox.BlankNode)} == {
        ox.Quad(q.subject, q.predicate, q.object) for q in quads
        if q.graph_name == ex("graph/1") and not isinstance(q.subject, ox.BlankNode)}

    content_type, variables, rows = client.tuples_of(client.run("tuple", "contexts"))
    assert content_type == BRTR and variables == ["contextID"]
    named = {q.graph_name for q in quads if not isinstance(q.graph_name, ox.DefaultGraph)}
    assert len(rows) == len(named)
    assert {r[0] for r in rows if isinstance(r[0], ox.NamedNode)} == \
        {g for g in named if isinstance(g, ox.NamedNode)}

    content_type, variables, _ = client.tuples_of(client.run("tuple", "namespaces"))
    assert content_type == BRTR and variables == ["prefix", "namespace"]


def test_put_statements_replaces_a_context(client, empty):
    before = [ox.Quad(ex("a"), ex("p"), L("old"), ex("g")),
              ox.Quad(ex("a"), ex("p"), L("kept"), ex("other")),
              ox.Quad(ex("a"), ex("p"), L("kept too"))]
    r = httpx.post(f"{empty.repo_url}/statements",
                   content=ox.serialize(before, format=ox.RdfFormat.N_QUADS),
                   headers={"content-type": "application/n-quads"}, timeout=30)
    assert r.status_code == 204, r.text
    new = [ox.Triple(ex("a"), ex("p"), L("new 😀\n"))]
    out = client.run("replace", client.file(ox.serialize(new, format=ox.RdfFormat.N_TRIPLES)
                                            .decode()), f"<{EX}g>")
    assert out.splitlines() == ["REPLACE 204"]
    assert stored(empty) == {before[1], before[2], ox.Quad(ex("a"), ex("p"), L("new 😀\n"),
                                                           ex("g"))}


def test_transaction_with_binary_add_and_wildcard_delete(client, empty):
    g1, g2, g3 = ex("g1"), ex("g2"), ex("g3")
    initial = [
        ox.Quad(ex("a"), ex("p"), L("1")),
        ox.Quad(ex("a"), ex("q"), L("2")),
        ox.Quad(ex("a"), ex("p"), L("3"), g1),
        ox.Quad(ex("b"), ex("p"), L("4"), g1),
        ox.Quad(ex("b"), ex("p"), L("5"), g2),
        ox.Quad(ex("b"), ex("q"), L("5b"), g2),
        ox.Quad(ex("c"), ex("r"), L("6")),
        ox.Quad(ex("c"), ex("r"), L("7"), g2),
        ox.Quad(ex("d"), ex("p"), ex("e"), g3),
        ox.Quad(ex("d"), ex("q"), L("8"), g3),
    ]
    r = httpx.post(f"{empty.repo_url}/statements",
                   content=ox.serialize(initial, format=ox.RdfFormat.N_QUADS),
                   headers={"content-type": "application/n-quads"}, timeout=30)
    assert r.status_code == 204, r.text
    script = "\n".join([
        f'add\t<{EX}new> <{EX}p> "added in a transaction, é😀" <{EX}g1> .',
        f"add\t_:n1 <{EX}knows> _:n2 .",
        f"add\t_:n2 <{EX}knows> _:n1 .",
        f"remove\t<{EX}a>\t*\t*\tnull",      # ex:a in the default graph only
        f"remove\t*\t<{EX}p>\t*\t<{EX}g2>",  # ex:p statements of g2 only
        f"remove\t<{EX}c>\t<{EX}r>\t*",      # no context: every graph
        f"remove\t*\t*\t*\t<{EX}g3>",        # clear g3
        f'add\t<{EX}after> <{EX}p> "added after the removals" .',
        "commit",
    ]) + "\n"
    out = client.run("transaction", client.file(script))
    assert out.splitlines() == ["BEGIN 201", "ADD 200", "DELETE 200", "ADD 200", "COMMIT 200"]

    expected = {
        ox.Quad(ex("a"), ex("p"), L("3"), g1),
        ox.Quad(ex("b"), ex("p"), L("4"), g1),
        ox.Quad(ex("b"), ex("q"), L("5b"), g2),
        ox.Quad(ex("new"), ex("p"), L("added in a transaction, é😀"), g1),
        ox.Quad(B("n1"), ex("knows"), B("n2")),  # preserveNodeId=true: labels as sent
        ox.Quad(B("n2"), ex("knows"), B("n1")),
        ox.Quad(ex("after"), ex("p"), L("added after the removals")),
    }
    assert stored(empty) == expected
    # ... and as SPARQL sees it, through the master (JSON) and as RDF4J reads it (binary)
    rows = empty.select(ALL)
    assert len(rows) == len(expected)
    assert {(r["s"], r["o"], r.get("g")) for r in rows if r["s"].startswith(EX)} == {
        (q.subject.value, q.object.value,
         None if isinstance(q.graph_name, ox.DefaultGraph) else q.graph_name.value)
        for q in expected if isinstance(q.subject, ox.NamedNode)}
    content_type, _, binary_rows = client.tuples_of(client.run("select", ALL))
    assert content_type == BRTR
    assert sort_rows(binary_rows) == sort_rows(local_select(expected, ALL))
    # every worker holds the same content
    empty.wait_in_sync()
    assert len(set(empty.fingerprints().values())) == 1


def test_rollback_and_errors_reach_the_rdf4j_client(client, empty):
    script = f'add\t<{EX}x> <{EX}p> "never committed" .\nrollback\n'
    out = client.run("transaction", client.file(script))
    assert out.splitlines() == ["BEGIN 201", "ROLLBACK 200"]
    assert stored(empty) == set()
    # A malformed Binary RDF body: 400 with the reason, as text RDF4J shows its user.
    r = httpx.post(f"{empty.repo_url}/statements", content=b"BRDF\x00\x00\x00\x01\x01\x01",
                   headers={"content-type": BRDF}, timeout=30)
    assert r.status_code == 400
    assert "MALFORMED DATA: truncated Binary RDF document" in r.text
    r = httpx.get(empty.repo_url, params={"query": "ASK {}"},
                  headers={"accept": BRTR}, timeout=30)
    assert r.status_code == 406 and "unsupported query result format" in r.text
    r = httpx.get(empty.repo_url, params={"query": "SELECT * {}"},
                  headers={"accept": BRTR}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == BRTR
    assert binary_results.read_results(r.content) == binary_results.BinaryResults([], [()])


def test_binary_query_results_keep_the_query_timeout():
    """The worker writes binary SELECT/CONSTRUCT results with the codec, not pyoxigraph's
    serializer: the query timeout still stops a long evaluation (503 in _run_query)."""
    from worker_service.api.queries import QueryTimeout, _binary_graph, _binary_solutions

    store = ox.Store()
    store.extend(ox.Quad(ex(f"s{i}"), ex("p"), L(str(i))) for i in range(2000))
    select, construct = "SELECT ?s ?o WHERE { ?s ?p ?o }", "CONSTRUCT WHERE { ?s ?p ?o }"
    with pytest.raises(QueryTimeout):
        _binary_solutions(store.query(select), 1e-9)
    with pytest.raises(QueryTimeout):
        _binary_graph(store.query(construct), 1e-9)
    result = binary_results.read_results(_binary_solutions(store.query(select), None))
    assert result.variables == ["s", "o"] and len(result.rows) == 2000
    assert len(binary_rdf.read_rdf(_binary_graph(store.query(construct), 60.0)).quads) == 2000
