"""Generators of good and broken inputs: SPARQL text, RDF documents, RDF4J protocol
parameters, worker control bodies, configuration files.

Each is grammar-ish: it builds a syntactically plausible input from the grammar's pieces,
then (often) damages it — a character cut, inserted or swapped, a truncation — so that
the examples reach deep into the parsers and also cross their error paths. Subjects live
under ``urn:fuzz:`` and query patterns share variables, so that the data the fuzz adds
stays small and a generated query never asks for a huge cross product.
"""

from __future__ import annotations

import json
import re

import pyoxigraph as ox
from hypothesis import strategies as st

from rdf4j_protocol import negotiation

# ---- terms ----

_local = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=8)
_junk = st.text(max_size=12)  # any unicode, control characters and surrogates excluded
_awkward = st.sampled_from([
    "", " ", "\\", "\"", "'", "<", ">", "{", "}", ".", ";", ",", "#", "\n", "\t", "\\u0000",
    "\\U0010FFFF", "\\uD800", "\u0000", "\ufeff", "\u2028", "😀", "é", "%00", "%", "?", "^^",
    "@", "_:", "::", "<<", ">>", "()", "[]", "\"\"\"", "'''",
])

def _mostly(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """``good`` nine times in ten: a query holds several terms, and one bad term makes the
    whole text bad; the parsers' acceptance paths must be reached too."""
    return st.one_of(*[good] * 9, bad)


_good_iris = st.one_of(
    _local.map(lambda s: f"<urn:fuzz:{s}>"),
    st.sampled_from(["<http://example.org/a>", "<urn:fuzz:p>", "<urn:fuzz:q>", "ex:a", "ex:p",
                     "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", "<urn:fuzz:é>",
                     "<http://ex.org/\\u00e9>"]),
    _local.map(lambda s: f"ex:{s.strip('.')}x"))
iris = _mostly(_good_iris, st.one_of(
    st.sampled_from(["<>", "<#frag>", "<relative/path>", "<http://example.org/a b>", "a",
                     "ex:", ":x", "nope:x"]),
    _junk.map(lambda s: f"<{s}>")))
prefixed = _good_iris
literals = _mostly(st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=10).map(json.dumps),
    st.integers(-10**20, 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(['"x"@en', '"x"@en-GB', '"01"^^<http://www.w3.org/2001/XMLSchema#integer>',
                     '"abc"^^<http://www.w3.org/2001/XMLSchema#integer>', 'true', 'false',
                     '"""multi\nline"""', "'single'"])),
    st.sampled_from(['"x"@', '"1.50"^^xsd:decimal', '"unterminated', '"\\q"', '"\\u00"',
                     '"x"^^', "1e", "+-1", ".5", "1.", '"x"@-en', "NaN", "INF"]))
bnodes = st.one_of(_local.map(lambda s: f"_:{s.replace('.', '')}b"), st.just("[]"))
variables = _mostly(st.sampled_from(["?s", "?p", "?o", "?g", "$x", "?s1"]),
                    st.sampled_from(["?", "?1x", "?-"]))
subjects = st.one_of(iris, iris, iris, bnodes)
predicates = iris
objects = st.one_of(iris, literals, literals, bnodes)


def _triple(s, p, o) -> st.SearchStrategy[str]:
    return st.tuples(s, p, o).map(lambda t: f"{t[0]} {t[1]} {t[2]} .")


ground_triples = st.lists(_triple(subjects, predicates, objects), min_size=0, max_size=3) \
    .map(" ".join)
# Patterns share ?s so that two of them join instead of multiplying.
patterns = st.lists(_triple(st.one_of(st.just("?s"), iris), st.one_of(variables, predicates),
                            st.one_of(st.just("?o"), objects)),
                    min_size=1, max_size=2).map(" ".join)
prologues = st.lists(st.sampled_from([
    "PREFIX ex: <http://example.org/>", "PREFIX ex: <http://example.org/>", "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>",
    "PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>", "BASE <http://example.org/>",
    "PREFIX : <urn:fuzz:>", "PREFIX ex <http://example.org/>", "BASE <relative>",
    "PREFIX ex: <http://example.org/> PREFIX ex: <http://other.org/>",
]), max_size=3).map(" ".join)
graphs = st.one_of(iris, st.sampled_from(["DEFAULT", "NAMED", "ALL", "GRAPH", "<urn:fuzz:g>"]))


def _damaged(texts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The text as generated most of the time; otherwise cut, spliced or truncated."""

    @st.composite
    def damage(draw) -> str:
        text = draw(texts)
        how = draw(st.sampled_from(["keep", "keep", "keep", "cut", "insert", "truncate",
                                    "swap", "duplicate"]))
        if how == "keep" or not text:
            return text
        i = draw(st.integers(0, len(text)))
        if how == "cut":
            return text[:i] + text[i + draw(st.integers(1, 5)):]
        if how == "insert":
            return text[:i] + draw(st.one_of(_awkward, _junk)) + text[i:]
        if how == "truncate":
            return text[:i]
        if how == "duplicate":
            return text[:i] + text[i:i + 20] + text[i:]
        j = draw(st.integers(0, len(text)))
        a, b = sorted((i, j))
        return text[:a] + text[b:] + text[a:b]

    return damage()


# ---- SPARQL ----

_modifiers = st.sampled_from(["", "", " LIMIT 5", " OFFSET 1 LIMIT 3",
                              " ORDER BY ?s LIMIT 10", " ORDER BY DESC(?o)", " LIMIT -1",
                              " LIMIT x", " GROUP BY ?s", " HAVING (?s)",
                              " VALUES ?s { <urn:fuzz:a> }"])
_filters = st.sampled_from(["", "", "", " FILTER(?o > 1)", " FILTER(isIRI(?s))",
                            " FILTER(REGEX(?o, \"(\"))",
                            " FILTER(?undefined)", " BIND(NOW() AS ?t)", " OPTIONAL { ?s ?p2 ?o2 }",
                            " MINUS { ?s <urn:fuzz:p> ?o }", " FILTER(lang(?o) = \"en\")",
                            " SERVICE <http://127.0.0.1:1/sparql> { ?s ?p ?o }",
                            " FILTER(xsd:integer(?o) / 0)", " FILTER NOT EXISTS { ?s ?p ?o }"])


@st.composite
def _query(draw) -> str:
    prologue = "PREFIX ex: <http://example.org/> " + draw(prologues)
    where = f"{{ {draw(patterns)}{draw(_filters)} }}"
    form = draw(st.sampled_from(["SELECT", "SELECT DISTINCT", "ASK", "CONSTRUCT", "DESCRIBE",
                                 "SELECT (COUNT(*) AS ?n)", "SELECT REDUCED"]))
    if form == "ASK":
        body = f"ASK {where}"
    elif form == "CONSTRUCT":
        body = f"CONSTRUCT {{ ?s <urn:fuzz:p> ?o }} WHERE {where}"
    elif form == "DESCRIBE":
        body = f"DESCRIBE ?s WHERE {where}"
    elif "COUNT" in form:
        body = f"{form} WHERE {where}"
    else:
        body = f"{form} {draw(st.sampled_from(['*', '?s ?o', '?s', '(?s AS ?t)']))} " \
               f"WHERE {where}"
    dataset = draw(st.sampled_from(["", " FROM <urn:fuzz:g>", " FROM NAMED <urn:fuzz:g>"]))
    if dataset:
        head, _, rest = body.partition(" WHERE ") if " WHERE " in body else (body, "", "")
        body = f"{head}{dataset} WHERE {rest}" if rest else body
    return f"{prologue} {body}{draw(_modifiers) if form != 'ASK' else ''}".strip()


sparql_queries = _damaged(_query())


@st.composite
def _update_op(draw) -> str:
    kind = draw(st.sampled_from(["INSERT DATA", "DELETE DATA", "DELETE WHERE", "MODIFY",
                                 "GRAPH DATA", "CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY",
                                 "LOAD", "WITH"]))
    data = draw(ground_triples)
    if kind in ("INSERT DATA", "DELETE DATA"):
        return f"{kind} {{ {data} }}"
    if kind == "GRAPH DATA":
        return f"INSERT DATA {{ GRAPH {draw(iris)} {{ {data} }} }}"
    if kind == "DELETE WHERE":
        return f"DELETE WHERE {{ {draw(patterns)} }}"
    if kind == "MODIFY":
        template = draw(st.sampled_from(["?s <urn:fuzz:copy> ?o", "?s ?p [ ?p ?o ]",
                                         "?s <urn:fuzz:when> ?t", "_:b <urn:fuzz:p> ?o",
                                         "GRAPH <urn:fuzz:g> { ?s ?p ?o }"]))
        action = draw(st.sampled_from(["INSERT", "DELETE", "DELETE+INSERT"]))
        clause = " ".join(f"{a} {{ {template} }}" for a in action.split("+"))
        return f"{clause} WHERE {{ {draw(patterns)} BIND(NOW() AS ?t) }}"
    if kind in ("CLEAR", "DROP"):
        silent = draw(st.sampled_from(["", " SILENT"]))
        target = draw(st.sampled_from(["DEFAULT", "NAMED", "ALL", "GRAPH <urn:fuzz:g>",
                                       "GRAPH <urn:fuzz:absent>", "<urn:fuzz:g>"]))
        return f"{kind}{silent} {target}"
    if kind == "CREATE":
        return f"CREATE{draw(st.sampled_from(['', ' SILENT']))} GRAPH {draw(iris)}"
    if kind in ("ADD", "MOVE", "COPY"):
        return f"{kind} {draw(graphs)} TO {draw(graphs)}"
    if kind == "LOAD":
        return "LOAD <http://127.0.0.1:1/data.ttl>"  # refused by the cluster: never fetched
    return f"WITH {draw(iris)} DELETE {{ ?s ?p ?o }} WHERE {{ {draw(patterns)} }}"


sparql_updates = _damaged(st.builds(
    lambda prologue, ops: f"PREFIX ex: <http://example.org/> {prologue} {' ; '.join(ops)}",
    prologues, st.lists(_update_op(), min_size=1, max_size=3)))


# ---- RDF documents in every accepted format ----

_ox_terms_s = st.one_of(_local.map(lambda s: ox.NamedNode(f"urn:fuzz:{s}")),
                        _local.map(lambda s: ox.BlankNode("b" + re.sub(r"[^a-z0-9]", "", s))))
_ox_objects = st.one_of(
    _ox_terms_s,
    st.text(max_size=12).map(ox.Literal),
    st.integers(-1000, 1000).map(lambda i: ox.Literal(str(i), datatype=ox.NamedNode(
        "http://www.w3.org/2001/XMLSchema#integer"))),
    st.sampled_from(["en", "fr-BE", "x-y"]).map(lambda t: ox.Literal("l", language=t)),
)
_ox_graphs = st.one_of(st.just(ox.DefaultGraph()),
                       _local.map(lambda s: ox.NamedNode(f"urn:fuzz:g{s}")))
ox_quads = st.lists(st.builds(ox.Quad, _ox_terms_s,
                              _local.map(lambda s: ox.NamedNode(f"urn:fuzz:p{s}")),
                              _ox_objects, _ox_graphs), max_size=4)

_QUAD_FORMATS = {ox.RdfFormat.N_QUADS, ox.RdfFormat.TRIG}


def _serialize(quads: list[ox.Quad], fmt: ox.RdfFormat) -> bytes:
    if fmt not in _QUAD_FORMATS:  # a triple format: the graph names are dropped
        quads = [ox.Quad(q.subject, q.predicate, q.object) for q in quads]
    try:
        return ox.serialize(quads, format=fmt) or b""
    except (ValueError, OSError):
        return b""


@st.composite
def rdf_bodies(draw) -> tuple[str, bytes]:
    """(content type, body): a document in one of the accepted formats (negotiation.RDF_FORMATS),
    often damaged; sometimes a content type the endpoint does not accept, or with a
    charset parameter."""
    negotiated = draw(st.sampled_from(negotiation.RDF_FORMATS))
    ctype = negotiated.media_type
    body = _serialize(draw(ox_quads), negotiated.format)
    how = draw(st.sampled_from(["keep", "keep", "cut", "insert", "truncate", "bytes",
                                "ctype", "charset"]))
    if how in ("cut", "insert", "truncate") and body:
        i = draw(st.integers(0, len(body)))
        if how == "cut":
            body = body[:i] + body[i + draw(st.integers(1, 4)):]
        elif how == "insert":
            body = body[:i] + draw(st.one_of(_awkward, _junk)).encode("utf-8", "replace") + \
                body[i:]
        else:
            body = body[:i]
    elif how == "bytes":
        body = draw(st.binary(max_size=40)) + body
    elif how == "ctype":
        ctype = draw(st.sampled_from(["", "text/html", "application/json", "*/*", "text/",
                                      "text/turtle;;", "application/sparql-update",
                                      "application/x-www-form-urlencoded"]))
    elif how == "charset":
        ctype += draw(st.sampled_from(["; charset=utf-8", "; charset=latin-1",
                                       "; charset=nope", "; charset=utf-16"]))
    return ctype, body


# ---- RDF4J protocol parameters ----

_param_names = st.sampled_from([
    "query", "update", "queryLn", "infer", "timeout", "baseURI", "default-graph-uri",
    "named-graph-uri", "using-graph-uri", "using-named-graph-uri", "subj", "pred", "obj",
    "context", "preserveNodeId", "distinct", "limit", "offset", "$s", "graph", "default",
    "action", "unknown",
])
_param_values = st.one_of(
    st.sampled_from(["true", "false", "maybe", "", "-1", "0", "10", "1e9", "sparql",
                     "serql", "<urn:fuzz:a>", "<urn:fuzz:g>", "null", "_:b1", "\"x\"",
                     "\"x\"@en", "\"1\"^^<http://www.w3.org/2001/XMLSchema#integer>",
                     "urn:fuzz:a", "<bad iri>", "<", "ASK {}", "SELECT * { ?s ?p ?o } LIMIT 2",
                     "http://example.org/", "relative"]),
    sparql_queries, _junk)
rdf4j_params = st.lists(st.tuples(_param_names, _param_values), max_size=5)
accepts = st.sampled_from([
    None, "*/*", "application/sparql-results+json", "application/sparql-results+xml",
    "text/csv", "text/tab-separated-values", "text/boolean", "text/turtle",
    "application/n-quads", "application/ld+json", "application/rdf+xml", "text/html",
    "application/x-nonsense", "text/*;q=0.5, */*;q=0.1", ";;;", "q=2",
])


# ---- worker control bodies (/cluster/execute, /cluster/apply) ----

_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                          st.floats(allow_nan=False), st.text(max_size=8))
_json_any = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)


def _maybe(value: st.SearchStrategy) -> st.SearchStrategy:
    """The well-typed value seven times in eight, anything JSON otherwise (a body nests
    several of these; one wrong type refuses it all)."""
    return st.one_of(*[value] * 7, _json_any)


_nquads_text = st.one_of(
    ox_quads.map(lambda qs: "".join(f"{q} .\n" for q in qs)),
    _damaged(ox_quads.map(lambda qs: "".join(f"{q} .\n" for q in qs))),
)
_fingerprints = st.one_of(st.text("0123456789abcdef", min_size=32, max_size=32),
                          st.sampled_from(["", "xyz", "0" * 31, "0" * 33, "-1", "0x0"]),
                          st.just("0" * 32))

operations = st.lists(_maybe(st.one_of(
    st.fixed_dictionaries({"type": st.just("update"), "update": _maybe(sparql_updates)},
                          optional={"base_iri": _maybe(st.sampled_from(
                              ["http://example.org/", "relative", ""]))}),
    st.builds(lambda ct_body, ctx: {"type": "add", "data": ct_body[1].decode("utf-8", "replace"),
                                    "format": ct_body[0], **ctx},
              rdf_bodies(), st.sampled_from([{}, {"contexts": ["<urn:fuzz:g>"]},
                                             {"contexts": "x"}, {"contexts": [None]}])),
    st.fixed_dictionaries({"type": st.just("remove")},
                          optional={"subject": _maybe(st.sampled_from(["<urn:fuzz:a>", "x"])),
                                    "predicate": _json_any, "object": _json_any,
                                    "contexts": _json_any}),
    st.fixed_dictionaries({"type": st.just("namespace"), "prefix": _maybe(_local),
                           "namespace": _maybe(st.sampled_from(["http://example.org/",
                                                                "not an iri", None]))}),
    st.just({"type": "clear_namespaces"}),
    st.dictionaries(st.sampled_from(["type", "update", "data", "extra"]), _json_any,
                    max_size=3),
)), max_size=3)

execute_bodies = st.fixed_dictionaries(
    {"start_seq": _maybe(st.integers(-2, 5)),
     "transactions": _maybe(st.lists(st.fixed_dictionaries(
         {"txid": _maybe(_local), "operations": _maybe(operations)}), max_size=3))},
    optional={"control_queries": _maybe(st.lists(_maybe(sparql_queries), max_size=2))},
)

apply_bodies = st.fixed_dictionaries({"entries": _maybe(st.lists(_maybe(st.fixed_dictionaries(
    {"seq": _maybe(st.integers(-1, 5)), "txid": _maybe(_local),
     "changeset": _maybe(st.fixed_dictionaries({}, optional={
         "added": _maybe(_nquads_text), "removed": _maybe(_nquads_text),
         "namespaces": _maybe(st.dictionaries(_local, st.one_of(st.none(), st.just(
             "http://example.org/")), max_size=2)),
         "created_graphs": _maybe(st.lists(st.sampled_from(["urn:fuzz:g", "bad iri", ""]),
                                           max_size=2)),
         "dropped_graphs": _maybe(st.lists(st.sampled_from(["urn:fuzz:g", "<x>"]),
                                           max_size=2))}))},
    optional={"expected_fingerprint": _maybe(_fingerprints)})), max_size=3))})


def control_bodies(structured: st.SearchStrategy[dict]) -> st.SearchStrategy[bytes]:
    """JSON of a structured body most of the time; otherwise raw bytes, other JSON, or
    the JSON damaged."""
    as_json = structured.map(lambda d: json.dumps(d).encode())
    return st.one_of(as_json, as_json, as_json, st.binary(max_size=60),
                     _json_any.map(lambda v: json.dumps(v).encode()),
                     _damaged(structured.map(json.dumps)).map(
                         lambda s: s.encode("utf-8", "surrogatepass")))
