"""rdf4j_protocol: the RDF4J REST / SPARQL 1.1 protocol layer, without HTTP or store."""

from __future__ import annotations

import csv
import io
import json

import pyoxigraph as ox
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdf4j_protocol import negotiation, parameters, reads, results, transactions, writes
from rdf4j_protocol.parameters import ProtocolError

N = ox.NamedNode
QR = ox.QueryResultsFormat
RF = ox.RdfFormat


def raises(status: int, fragment: str):
    """pytest.raises for a ProtocolError with this status and message fragment."""

    class _Check:
        def __enter__(self):
            self._ctx = pytest.raises(ProtocolError)
            self._info = self._ctx.__enter__()
            return self._info

        def __exit__(self, *exc):
            result = self._ctx.__exit__(*exc)
            err = self._info.value
            assert err.status == status, err
            assert fragment in err.message, err.message
            return result

    return _Check()


# ---- parameters ----


def test_params_merge_query_string_and_form_body():
    params = parameters.parse_params(b"a=1&%24x=%3Chttp%3A%2F%2Fe%3E", b"query=ASK%20%7B%7D&a=2",
                                "application/x-www-form-urlencoded; charset=UTF-8")
    assert params == (("a", "1"), ("$x", "<http://e>"), ("query", "ASK {}"), ("a", "2"))
    # A body of another type is not a form.
    assert parameters.parse_params("a=1", b"query=x", "text/turtle") == (("a", "1"),)


# Query strings and form bodies as clients write them: escapes valid or not, "+", "&",
# "=", backslashes (the fast decoder doubles them), text past ASCII, bytes not UTF-8.
_FORM_TEXT = st.lists(st.sampled_from([*"%+&=\\xX09aAfFgG \u00e9\u4e2d", "%41", "%C3%A9",
                                      "%e9", "%5C", "%25", "%2"]),
                      max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(_FORM_TEXT)
def test_form_pairs_are_what_urllib_parse_qsl_gives(text):
    """parameters.form_pairs decodes escapes with a C codec; it must give exactly what
    urllib.parse.parse_qsl gives (keep_blank_values, errors="strict"), errors included."""
    from urllib.parse import parse_qsl

    try:
        expected = parse_qsl(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            parameters.form_pairs(text)
        return
    assert parameters.form_pairs(text) == expected


def test_update_dataset_from_the_protocol():
    [op] = writes.statements_write("POST", (
        ("update", "INSERT { <urn:a> <urn:b> ?o } WHERE { ?s ?p ?o }"),
        ("using-graph-uri", "http://g1"), ("using-named-graph-uri", "http://g2"),
        ("using-graph-uri", "http://g3")))
    assert op["using"] == [[False, "<http://g1>"], [False, "<http://g3>"],
                           [True, "<http://g2>"]]


def test_single_param_refuses_repetition_and_booleans_are_checked():
    with raises(400, "parameter 'query' must be given at most once"):
        parameters.single_param((("query", "a"), ("query", "b")), "query")
    # graphdb.js sends the query in the URL and in the form body: the same value is one.
    assert parameters.single_param((("query", "a"), ("query", "a")), "query") == "a"
    assert parameters.bool_param((("infer", "FALSE"),), "infer", True) is False
    with raises(400, "parameter 'infer' must be true or false, got 'maybe'"):
        parameters.bool_param((("infer", "maybe"),), "infer", True)


# ---- N-Triples encoded values ----


@pytest.mark.parametrize(("text", "expected"), [
    ("<http://e/s>", N("http://e/s")),
    ("_:b1", ox.BlankNode("b1")),
    ('"x"', ox.Literal("x")),
    ('"chat"@FR', ox.Literal("chat", language="fr")),
    ('"1"^^<http://www.w3.org/2001/XMLSchema#integer>',
     ox.Literal("1", datatype=N("http://www.w3.org/2001/XMLSchema#integer"))),
    ('"caf\\u00E9 \\"q\\""', ox.Literal('café "q"')),
])
def test_decode_value(text, expected):
    assert parameters.decode_value(text, "obj") == expected


@pytest.mark.parametrize("text", ["http://e/s", "<relative>", "", '"open', "foo",
                                  '"a" . <urn:a> <urn:b> "c"', "<http://a>\n<http://b>"])
def test_decode_value_refuses_what_is_not_one_encoded_value(text):
    with raises(400, "parameter 'subj' is not"):
        parameters.decode_value(text, "subj")


def test_positions_are_checked():
    with raises(400, "parameter 'subj' must be an IRI or a blank node"):
        parameters.decode_resource('"lit"', "subj")
    with raises(400, "parameter 'pred' must be an IRI"):
        parameters.decode_iri("_:b", "pred")
    assert parameters.decode_context("null") == ox.DefaultGraph()
    assert parameters.decode_context("<http://g>") == N("http://g")
    with raises(400, "parameter 'context' must be an IRI or a blank node"):
        parameters.decode_context('"g"')


def test_encode_round_trip_is_canonical():
    for text in ["<http://e/s>", "_:b", '"x"@en', '"x\\ny"',
                 '"1"^^<http://www.w3.org/2001/XMLSchema#integer>']:
        assert parameters.encode_value(parameters.decode_value(text)) == text
    assert parameters.encode_value(ox.DefaultGraph()) == "null"
    assert parameters.encode_value(None) is None
    # The explicit xsd:string datatype is the plain literal.
    assert parameters.encode_value(parameters.decode_value(
        '"x"^^<http://www.w3.org/2001/XMLSchema#string>')) == '"x"'


# ---- content negotiation ----


@pytest.mark.parametrize(("accept", "media", "fmt"), [
    (None, "application/sparql-results+json", QR.JSON),
    ("*/*", "application/sparql-results+json", QR.JSON),
    ("application/sparql-results+xml", "application/sparql-results+xml", QR.XML),
    ("application/json", "application/json", QR.JSON),
    ("text/csv", "text/csv", QR.CSV),
    ("text/tab-separated-values", "text/tab-separated-values", QR.TSV),
    ("text/csv;q=0.5, application/sparql-results+xml;q=0.9", "application/sparql-results+xml",
     QR.XML),
    # RDF4J's HTTPRepository asks for its binary table first
    ("application/x-binary-rdf-results-table, application/sparql-results+xml;q=0.8, */*;q=0.1",
     "application/x-binary-rdf-results-table", negotiation.BINARY_RESULTS),
    ("text/*", "text/csv", QR.CSV),
    # SPARQLWrapper's JSON Accept
    ("application/sparql-results+json,application/json,text/javascript,application/javascript",
     "application/sparql-results+json", QR.JSON),
    # equal q: the client's order decides
    ("text/tab-separated-values, text/csv", "text/tab-separated-values", QR.TSV),
])
def test_tuple_negotiation(accept, media, fmt):
    neg = negotiation.negotiate_tuple_format(accept)
    assert (neg.media_type, neg.format) == (media, fmt)


def test_negotiation_refuses_unsupported_formats():
    with raises(406, "unsupported query result format 'foo/bar'"):
        negotiation.negotiate_tuple_format("foo/bar")
    with raises(406, "unsupported query result format"):
        negotiation.negotiate_tuple_format("application/sparql-results+json;q=0")
    with raises(406, "unsupported RDF format 'application/sparql-results+json'"):
        negotiation.negotiate_rdf_format("application/sparql-results+json")


@pytest.mark.parametrize(("accept", "fmt"), [
    ("text/turtle", RF.TURTLE), ("application/x-turtle", RF.TURTLE),
    ("application/n-triples", RF.N_TRIPLES), ("text/plain", RF.N_TRIPLES),
    ("application/n-quads", RF.N_QUADS), ("application/trig", RF.TRIG),
    ("application/rdf+xml", RF.RDF_XML), ("application/ld+json", RF.JSON_LD),
    ("text/n3", RF.N3),
    # rdflib's SPARQLStore (xml mode) sends both kinds in one Accept
    ("application/sparql-results+xml, application/rdf+xml", RF.RDF_XML),
])
def test_rdf_negotiation(accept, fmt):
    neg = negotiation.negotiate_rdf_format(accept)
    assert neg.format == fmt
    assert neg.media_type == accept.split(", ")[-1]


def test_rdf_defaults_keep_graph_names_for_statements():
    assert negotiation.negotiate_rdf_format(None).format == RF.TURTLE
    assert negotiation.negotiate_rdf_format("*/*", dataset=True).format == RF.N_QUADS
    assert negotiation.negotiate_rdf_format(None, dataset=True).supports_datasets
    assert negotiation.negotiate_rdf_format("text/turtle", dataset=True).format == RF.TURTLE


def test_boolean_negotiation_has_text_boolean():
    neg = negotiation.negotiate_boolean_format("text/boolean")
    assert results.serialize_boolean(True, neg) == b"true"
    for accept in ("application/sparql-results+json", "application/sparql-results+xml"):
        neg = negotiation.negotiate_boolean_format(accept)
        for value in (True, False):
            parsed = ox.parse_query_results(results.serialize_boolean(value, neg),
                                            format=neg.format)
            assert bool(parsed) is value


def test_content_type_of_text_formats_has_charset():
    assert negotiation.negotiate_tuple_format("text/csv").content_type == "text/csv; charset=utf-8"
    assert negotiation.negotiate_rdf_format("application/ld+json").content_type == \
        "application/ld+json"


def test_body_format():
    assert negotiation.rdf_format_of_body("application/x-turtle; charset=utf-8") == RF.TURTLE
    assert negotiation.rdf_format_of_body("text/plain") == RF.N_TRIPLES
    with raises(415, "unsupported RDF format 'application/x-rdftransaction'"):
        negotiation.rdf_format_of_body("application/x-rdftransaction")
    with raises(415, "no Content-Type"):
        negotiation.rdf_format_of_body(None)


# ---- queries ----


def test_query_by_get_with_dataset_bindings_and_timeout():
    params = (("query", "SELECT ?o WHERE { ?s ?p ?o }"), ("queryLn", "SPARQL"),
              ("infer", "false"), ("default-graph-uri", "http://g1"),
              ("default-graph-uri", "null"), ("named-graph-uri", "http://g2"),
              ("timeout", "2.5"), ("$s", "<http://e/s>"), ("$unused", '"x"'),
              ("format", "json"), ("output", "json"))  # SPARQLWrapper's extras: ignored
    q = reads.parse_query_request("GET", params)
    assert q.infer is False
    assert q.timeout_s == 2.5
    kwargs = q.query_kwargs()
    assert kwargs["default_graph"] == [N("http://g1"), ox.DefaultGraph()]
    assert kwargs["named_graphs"] == [N("http://g2")]
    # $unused does not occur in the query: dropped, as RDF4J ignores it
    assert kwargs["substitutions"] == {ox.Variable("s"): N("http://e/s")}


def test_query_dataset_defaults():
    q = reads.parse_query_request("GET", (("query", "ASK {}"),))
    assert q.query_kwargs() == {}
    # only named graphs: the default graph is empty (SPARQL 1.1 Protocol)
    q = reads.parse_query_request("GET", (("query", "ASK {}"), ("named-graph-uri", "http://g")))
    assert q.query_kwargs() == {"default_graph": [], "named_graphs": [N("http://g")]}
    q = reads.parse_query_request("GET", (("query", "ASK {}"), ("timeout", "0")))
    assert q.timeout_s is None  # RDF4J: 0 means no limit


def test_query_by_post():
    body = "SELECT * WHERE { ?s ?p \"café\" }".encode()
    q = reads.parse_query_request("POST", (("default-graph-uri", "http://g"),), body,
                                  "application/sparql-query; charset=utf-8")
    assert q.query == body.decode()
    assert q.query_kwargs()["default_graph"] == [N("http://g")]
    form = parameters.parse_params(b"", b"query=ASK+%7B%7D", "application/x-www-form-urlencoded")
    assert reads.parse_query_request("POST", form, b"query=ASK+%7B%7D",
                                     "application/x-www-form-urlencoded").query == "ASK {}"


@pytest.mark.parametrize(("method", "params", "body", "ctype", "status", "fragment"), [
    ("GET", (), b"", None, 400, "missing parameter 'query'"),
    ("GET", (("update", "INSERT DATA {}"),), b"", None, 400, "send SPARQL updates to"),
    ("GET", (("query", "ASK {}"), ("queryLn", "serql")), b"", None, 400,
     "UNSUPPORTED QUERY LANGUAGE: 'serql'"),
    ("GET", (("query", "ASK {}"), ("default-graph-uri", "not an iri")), b"", None, 400,
     "parameter 'default-graph-uri' is not an absolute IRI"),
    ("GET", (("query", "ASK {}"), ("timeout", "soon")), b"", None, 400,
     "parameter 'timeout' must be a number of seconds"),
    ("GET", (("query", "ASK {}"), ("timeout", "-1")), b"", None, 400, "must not be negative"),
    ("GET", (("query", "ASK { ?x ?p ?o }"), ("$x", "x")), b"", None, 400,
     "parameter '$x' is not an N-Triples encoded value"),
    ("GET", (("query", "ASK {}"), ("$1 2", "<http://x>")), b"", None, 400,
     "does not name a SPARQL variable"),
    ("POST", (), b"ASK {}", "text/turtle", 415, "unsupported Content-Type 'text/turtle'"),
    ("POST", (("query", "ASK { ?s ?p ?o }"),), b"ASK {}", "application/sparql-query", 400,
     "must not also have a different 'query' parameter"),
    ("POST", (), b"\xff\xfe", "application/sparql-query", 400, "not valid utf-8"),
])
def test_query_request_errors(method, params, body, ctype, status, fragment):
    with raises(status, fragment):
        reads.parse_query_request(method, params, body, ctype)


@pytest.mark.parametrize(("text", "keyword"), [
    ("SELECT * {}", "SELECT"),
    ("# comment {\nPREFIX ex: <http://e/#x> BASE <http://b/>\n ask {}", "ASK"),
    ("PREFIX : <http://e/>\nINSERT DATA { :a :b :c }", "INSERT"),
    ("prefix ex:<http://e/> delete where { ?s ?p ?o }", "DELETE"),
    ("WITH <http://g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }", "WITH"),
    ("{", None),
])
def test_sparql_keyword(text, keyword):
    assert reads.sparql_keyword(text) == keyword


# ---- statement patterns ----


def test_statement_pattern():
    p = reads.parse_statement_pattern((("subj", "<http://s>"), ("obj", '"o"@en'),
                                       ("context", "null"), ("context", "<http://g>"),
                                       ("context", "null")))
    assert p.subject == N("http://s")
    assert p.predicate is None
    assert p.object == ox.Literal("o", language="en")
    assert p.graph_names() == [ox.DefaultGraph(), N("http://g")]
    assert reads.parse_statement_pattern(()).graph_names() == [None]


def test_statement_pattern_errors():
    with raises(400, "parameter 'subj' is not an N-Triples encoded value: 'http://s'"):
        reads.parse_statement_pattern((("subj", "http://s"),))
    with raises(400, "parameter 'pred' must be an IRI"):
        reads.parse_statement_pattern((("pred", '"p"'),))


# ---- writes -> operations ----

TTL = "@prefix ex: <http://e/> . ex:s ex:p ex:o ."


def test_post_update_by_form_and_by_body():
    assert writes.statements_write("POST", (("update", "CLEAR ALL"), ("baseURI", "http://b/"))) \
        == [{"type": "update", "update": "CLEAR ALL", "base_iri": "http://b/"}]
    assert writes.statements_write("POST", (), b"CLEAR DEFAULT",
                                  "application/sparql-update") == \
        [{"type": "update", "update": "CLEAR DEFAULT", "base_iri": None}]


def test_post_rdf_body_with_contexts():
    ops = writes.statements_write("POST", (("context", "<http://g>"), ("context", "null")),
                                 TTL.encode(), "application/x-turtle")
    assert ops == [{"type": "add", "data": TTL, "format": "text/turtle",
                    "contexts": ["<http://g>", "null"], "base_iri": None}]
    json.dumps(ops)  # the wire form is JSON


def test_put_replaces_and_delete_removes_by_pattern():
    ops = writes.statements_write("PUT", (("context", "<http://g>"),), TTL.encode(),
                                 "text/turtle")
    assert ops[0] == {"type": "remove", "subject": None, "predicate": None, "object": None,
                      "contexts": ["<http://g>"]}
    assert ops[1]["type"] == "add" and ops[1]["contexts"] == ["<http://g>"]
    # PUT without context replaces everything
    assert writes.statements_write("PUT", (), TTL.encode(), "text/turtle")[0]["contexts"] is None
    ops = writes.statements_write("DELETE", (("subj", "<http://s>"), ("obj", '"1"'),
                                            ("context", "null")))
    assert ops == [{"type": "remove", "subject": "<http://s>", "predicate": None,
                    "object": '"1"', "contexts": ["null"]}]
    assert writes.statements_write("DELETE", ()) == [writes.clear_operation()]


@pytest.mark.parametrize(("method", "params", "body", "ctype", "status", "fragment"), [
    ("POST", (), b"<http://a> <http://b> .", "application/n-triples", 400, "MALFORMED DATA"),
    ("POST", (), TTL.encode(), "application/x-rdftransaction", 415, "unsupported RDF format"),
    ("POST", (), b"x=1", "application/x-www-form-urlencoded", 400, "needs an 'update'"),
    ("POST", (("update", "SELECT * {}"),), b"", None, 400, "is not an update"),
    ("POST", (("update", "CLEAR ALL"), ("insert-graph-uri", "http://g")), b"", None, 400,
     "'insert-graph-uri' is not supported"),
    ("POST", (("update", "CLEAR ALL"), ("using-graph-uri", "not an iri")), b"", None, 400,
     "using graph is not an absolute IRI"),
    ("POST", (("update", " "),), b"", None, 400, "missing SPARQL update"),
    ("POST", (("context", "<http://g"),), TTL.encode(), "text/turtle", 400,
     "parameter 'context' is not an N-Triples encoded value"),
    ("POST", (("baseURI", "rel"),), TTL.encode(), "text/turtle", 400,
     "base IRI is not an absolute IRI"),
    ("DELETE", (("subj", '"lit"'),), b"", None, 400, "must be an IRI or a blank node"),
    ("PATCH", (), b"", None, 405, "not allowed"),
])
def test_statement_write_errors(method, params, body, ctype, status, fragment):
    with raises(status, fragment):
        writes.statements_write(method, params, body, ctype)


def test_namespaces():
    assert writes.namespace_write("PUT", "ex", b" http://e/\n") == \
        [{"type": "namespace", "prefix": "ex", "namespace": "http://e/"}]
    assert writes.namespace_write("DELETE", "ex") == \
        [{"type": "namespace", "prefix": "ex", "namespace": None}]
    assert writes.clear_namespaces_operation() == {"type": "clear_namespaces"}
    with raises(400, "'1x' is not a valid namespace prefix"):
        writes.namespace_write("PUT", "1x", b"http://e/")
    with raises(400, "namespace is not an absolute IRI"):
        writes.namespace_write("PUT", "ex", b"e/")
    with raises(400, "missing namespace IRI"):
        writes.namespace_write("PUT", "ex", b"")


def test_graph_store():
    assert writes.graph_store_target((("graph", "http://g"),)) == N("http://g")
    assert writes.graph_store_target((("default", ""),)) == ox.DefaultGraph()
    assert writes.graph_store_target((("graph", "default"),)) == ox.DefaultGraph()
    with raises(400, "missing parameter 'graph'"):
        writes.graph_store_target(())
    with raises(400, "not both"):
        writes.graph_store_target((("graph", "http://g"), ("default", "")))
    put = writes.graph_store_write("PUT", N("http://g"), (), TTL.encode(), "text/turtle")
    assert [op["type"] for op in put] == ["remove", "add"]
    assert all(op["contexts"] == ["<http://g>"] for op in put)
    post = writes.graph_store_write("POST", ox.DefaultGraph(), (), TTL.encode(), "text/turtle")
    assert post[0]["contexts"] == ["null"]
    assert writes.graph_store_write("DELETE", N("http://g"), ()) == \
        [writes.clear_operation([N("http://g")])]


# ---- transactions ----


def test_transaction_accumulates_and_commits():
    tx = transactions.PendingTransaction("t1")
    add = transactions.parse_transaction_step((("action", "ADD"), ("context", "<http://g>")),
                                       TTL.encode(), "text/turtle")
    update = transactions.parse_transaction_step((("action", "UPDATE"), ("update", "CLEAR ALL")))
    delete = transactions.parse_transaction_step((("action", "DELETE"), ("subj", "<http://s>")))
    assert tx.record(add) is None
    assert tx.record(update) is None
    assert tx.record(transactions.parse_transaction_step((("action", "PING"),))) is None
    assert tx.record(delete) is None
    ops = tx.record(transactions.parse_transaction_step((("action", "commit"),)))
    assert [op["type"] for op in ops] == ["add", "update", "remove"]
    assert ops[2]["subject"] == "<http://s>"
    with raises(409, "already closed"):
        tx.record(add)


def test_transaction_delete_with_body_removes_each_statement():
    body = b"<http://s> <http://p> _:b <http://g> .\n<http://s> <http://p> \"x\" .\n"
    step = transactions.parse_transaction_step((("action", "DELETE"),), body, "application/n-quads")
    assert list(step.operations) == [
        {"type": "remove", "subject": "<http://s>", "predicate": "<http://p>",
         "object": "_:b", "contexts": ["<http://g>"]},
        {"type": "remove", "subject": "<http://s>", "predicate": "<http://p>",
         "object": '"x"', "contexts": None},
    ]


def test_transaction_rollback_and_errors():
    tx = transactions.PendingTransaction("t2")
    tx.record(transactions.parse_transaction_step((("action", "UPDATE"),), b"CLEAR ALL",
                                           "application/sparql-update"))
    tx.record(transactions.TransactionStep("ROLLBACK"))
    assert tx.closed and tx.operations == []
    with raises(400, "missing parameter 'action'"):
        transactions.parse_transaction_step(())
    with raises(400, "unknown transaction action 'EXPLODE'"):
        transactions.parse_transaction_step((("action", "explode"),))
    with raises(400, "needs an 'update' parameter"):
        transactions.parse_transaction_step((("action", "UPDATE"),))
    # Reads are answered by the HTTP shell over the pending operations: nothing recorded.
    reading = transactions.PendingTransaction("t3", [{"type": "clear_namespaces"}])
    assert reading.record(transactions.TransactionStep("QUERY")) is None
    assert reading.operations == [{"type": "clear_namespaces"}] and not reading.closed
    assert transactions.transaction_location("http://h/repositories/r/transactions/", "abc") == \
        "http://h/repositories/r/transactions/abc"


# ---- results tables ----

ROWS = [
    (N("http://e/a"), ox.Literal("plain"), ox.Literal("x,\"y\"\nz", language="en")),
    (ox.BlankNode("b0"), None, ox.Literal("1", datatype=N(results.XSD_BOOLEAN))),
]


@pytest.mark.parametrize("fmt", [QR.JSON, QR.XML, QR.TSV])
def test_serialize_table_parses_back(fmt):
    data = results.serialize_table(("a", "b", "c"), ROWS, fmt)
    parsed = ox.parse_query_results(data, format=fmt)
    assert [v.value for v in parsed.variables] == ["a", "b", "c"]
    assert [tuple(s[v] for v in ("a", "b", "c")) for s in parsed] == [tuple(r) for r in ROWS]


def test_serialize_table_csv_keeps_lexical_forms():
    # pyoxigraph refuses to parse CSV results (lossy): read them with the csv module.
    data = results.serialize_table(("a", "b", "c"), ROWS, QR.CSV).decode()
    assert list(csv.reader(io.StringIO(data, newline=""))) == [
        ["a", "b", "c"], ["http://e/a", "plain", "x,\"y\"\nz"], ["_:b0", "", "1"]]


def test_repository_list_rows():
    rows = results.repository_list_rows("http://h/repositories/", [("r", "T", True, False)])
    parsed = list(ox.parse_query_results(
        results.serialize_table(results.REPOSITORY_LIST_VARIABLES, rows, QR.JSON), format=QR.JSON))
    assert parsed[0]["uri"] == N("http://h/repositories/r")
    assert parsed[0]["id"].value == "r"
    assert parsed[0]["readable"].value == "true"
    assert parsed[0]["writable"].value == "false"


# ---- open transactions (both endpoints share the registry) ----


def _step(query: str, body: bytes = b"", ctype: str | None = None) -> transactions.TransactionStep:
    return transactions.parse_transaction_step(parameters.parse_params(query.encode()), body, ctype)


def test_transaction_registry_runs_steps_until_commit_then_forgets():
    reg = transactions.TransactionRegistry()
    txid = reg.begin()
    tx = reg.get(txid)
    assert reg.record(tx, _step("action=UPDATE&update=INSERT DATA { <urn:a> <urn:b> 1 }")) \
        is None
    ops = reg.record(reg.get(txid), _step("action=COMMIT"))
    assert ops == [{"type": "update", "update": "INSERT DATA { <urn:a> <urn:b> 1 }",
                   "base_iri": None}]
    with pytest.raises(ProtocolError) as e:
        reg.get(txid)
    assert e.value.status == 404 and txid in str(e.value)
    assert len(reg) == 0


def test_transaction_registry_rollback_and_idle_transactions_are_forgotten():
    now = [0.0]
    reg = transactions.TransactionRegistry(idle_s=60, clock=lambda: now[0])
    rolled, idle, busy = reg.begin(), reg.begin(), reg.begin()
    assert reg.get(rolled, rollback=True).closed
    with pytest.raises(ProtocolError):
        reg.get(rolled)
    now[0] = 50
    reg.record(reg.get(busy), _step("action=PING"))  # touched: kept
    now[0] = 100  # idle untouched for 100 s, busy for 50 s
    with pytest.raises(ProtocolError) as e:
        reg.get(idle)
    assert e.value.status == 404
    assert not reg.get(busy).closed
    assert len(reg) == 1
