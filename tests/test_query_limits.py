"""txinfra/query_limits.py and worker_service/query_isolation.py: the effective timeout of
a query, and which queries may run in a worker's own threads (pure; the processes are
tested in test_query_timeout.py)."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from master_service.api.client import _names_timeout
from rdf4j_protocol.parameters import ProtocolError, parse_params
from txinfra.query_limits import (
    DEFAULT_QUERY_TIMEOUT_S,
    TOO_LONG,
    busy_message,
    effective_timeout,
    parse_query_timeout,
    parse_timeout,
    timed_out_message,
)
from worker_service.query_isolation import (
    QueryLimits,
    default_max_concurrent_queries,
    runs_in_process,
)
from worker_service.query_slots import DEFAULT_QUEUE_DEPTH, DEFAULT_QUEUE_WAIT_S

# ---- the timeout rule: min(client timeout if given, query-timeout-s) ----


def test_effective_timeout_is_the_smallest_asked_and_never_above_the_server_max():
    assert effective_timeout(300.0) == 300.0
    assert effective_timeout(300.0, None) == 300.0
    assert effective_timeout(300.0, 1.0) == 1.0
    assert effective_timeout(300.0, 1000.0) == 300.0  # a client cannot lengthen it
    assert effective_timeout(300.0, 5.0, 2.0) == 2.0  # the master's, passed on
    assert effective_timeout(1.0, 5.0, None) == 1.0
    assert effective_timeout(300.0, math.inf) == 300.0


def test_timeout_parameter_parsing():
    # RDF4J: absent or 0 is "no limit asked" (the server's maximum still applies).
    assert parse_timeout(None, "timeout") is None
    assert parse_timeout("", "timeout") is None
    assert parse_timeout("0", "timeout") is None
    assert parse_timeout("1.5", "timeout") == 1.5
    with pytest.raises(ValueError, match="timeout must not be negative, got '-1'"):
        parse_timeout("-1", "timeout")
    with pytest.raises(ValueError, match="must not be negative, got 'nan'"):
        parse_timeout("nan", "timeout")
    with pytest.raises(ValueError, match="must be a number of seconds, got 'soon'"):
        parse_timeout("soon", "timeout")


def test_query_timeout_property_must_be_a_positive_finite_number():
    assert parse_query_timeout("1") == 1.0
    assert parse_query_timeout("0.5") == 0.5
    for bad in ("0", "-3", "inf", "nan"):
        with pytest.raises(ValueError, match="> 0"):
            parse_query_timeout(bad)
    with pytest.raises(ValueError, match="expected a number of seconds"):
        parse_query_timeout("forever")


def test_limits_and_messages():
    assert QueryLimits().query_timeout_s == DEFAULT_QUERY_TIMEOUT_S
    with pytest.raises(ValueError):
        QueryLimits(query_timeout_s=0)
    with pytest.raises(ValueError):
        QueryLimits(max_concurrent_queries=0)
    assert default_max_concurrent_queries(2) == 4
    assert default_max_concurrent_queries(None) == 2
    # RDF4J's server message for a QueryInterruptedException, which its clients show.
    assert timed_out_message(1.0).startswith(TOO_LONG)
    assert timed_out_message(1.0) == ("Query evaluation took too long: it was stopped at its "
                                      "timeout of 1 s")
    assert "max-concurrent-queries=3" in busy_message(3)


# ---- the classifier: only a single triple pattern runs in the worker's threads ----

CHEAP = [
    "SELECT ?p ?o WHERE { <http://e/s1> ?p ?o }",
    "SELECT * { <http://e/s1> ?p ?o . }",
    "select ?o where { <http://e/s1> <http://e/p> ?o } limit 10",
    "SELECT ?s WHERE { ?s a <http://e/C> } LIMIT 5 OFFSET 20",
    "SELECT ?s WHERE { ?s <http://e/p> ?o } OFFSET 10000 LIMIT 5",
    "PREFIX ex: <http://e/> SELECT ?s WHERE { ?s ex:name \"Alice\"@en }",
    "PREFIX ex: <http://e/>\nPREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
    "SELECT ?s WHERE { ?s ex:age \"42\"^^xsd:integer }",
    "BASE <http://e/> SELECT ?p WHERE { <s1> ?p 42 }",
    "SELECT ?s ?p WHERE { ?s ?p true }",
    "ASK { <http://e/s1> ?p ?o }",
    "ASK WHERE { ?s <http://e/p> -1.5e3 }",
    "# a comment\nSELECT ?o WHERE { <http://e/s1> ?p ?o } # another",
    "SELECT ?o WHERE { _:b <http://e/p> ?o }",
]

EXPENSIVE = [
    # joins, cross joins
    "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f }",
    "SELECT * WHERE { <http://e/s1> ?p ?o . ?o ?q ?r }",
    "SELECT * WHERE { <http://e/s1> ?p ?o ; ?q ?r }",
    "SELECT * WHERE { <http://e/s1> ?p ?o , ?r }",
    # nothing bound: a scan; a repeated variable: a scan that may write nothing
    "SELECT * WHERE { ?s ?p ?o }",
    "SELECT * WHERE { ?s <http://e/p> ?s }",
    "SELECT * WHERE { _:x <http://e/p> _:x }",
    # modifiers that read everything before the first result
    "SELECT DISTINCT ?p WHERE { ?s ?p <http://e/o> }",
    "SELECT REDUCED ?p WHERE { ?s ?p <http://e/o> }",
    "SELECT ?s WHERE { ?s <http://e/p> ?o } ORDER BY ?o",
    "SELECT (COUNT(*) AS ?n) WHERE { ?s <http://e/p> ?o }",
    "SELECT ?s WHERE { ?s <http://e/p> ?o } GROUP BY ?s",
    "SELECT ?s WHERE { ?s <http://e/p> ?o } OFFSET 10001",
    "SELECT ?s WHERE { ?s <http://e/p> ?o } LIMIT 5 LIMIT 6",
    # anything else in the pattern
    "SELECT ?s WHERE { ?s <http://e/p> ?o FILTER(?o > 3) }",
    "SELECT ?s WHERE { ?s <http://e/p> ?o OPTIONAL { ?o ?q ?r } }",
    "SELECT ?s WHERE { { ?s <http://e/p> ?o } UNION { ?s <http://e/q> ?o } }",
    "SELECT ?s WHERE { GRAPH ?g { ?s <http://e/p> ?o } }",
    "SELECT ?s WHERE { ?s <http://e/p> ?o BIND(1 AS ?x) }",
    "SELECT ?s WHERE { VALUES ?s { <http://e/a> } ?s <http://e/p> ?o }",
    "SELECT ?s WHERE { ?s <http://e/p> ?o } VALUES ?o { 1 }",
    "SELECT ?s WHERE { SERVICE <http://x/> { ?s <http://e/p> ?o } }",
    "SELECT ?s WHERE { { SELECT ?s WHERE { ?s ?p ?o } } }",
    "PREFIX ex: <http://e/> SELECT ?s WHERE { ?s ex:p/ex:q ?o }",
    "PREFIX ex: <http://e/> SELECT ?s WHERE { ?s ex:p* ?o }",
    "SELECT ?s WHERE { ?s ^<http://e/p> ?o }",
    "SELECT ?s WHERE { ?s <http://e/p> [ <http://e/q> 1 ] }",
    "SELECT ?s WHERE { ?s <http://e/p> ( 1 2 ) }",
    "SELECT (?s AS ?x) WHERE { ?s <http://e/p> ?o }",
    "SELECT ?s FROM <http://e/g> WHERE { ?s <http://e/p> ?o }",
    # other forms
    "CONSTRUCT WHERE { <http://e/s1> ?p ?o }",
    "DESCRIBE <http://e/s1>",
    "ASK { ?s <http://e/p> ?o } LIMIT 1",
    # not even SPARQL: pyoxigraph reports it, from a query process
    "SELECT ?s WHERE { ?s <http://e/p> ",
    "",
    "INSERT DATA { <http://e/a> <http://e/b> <http://e/c> }",
]


@pytest.mark.parametrize("query", CHEAP)
def test_single_patterns_run_in_process(query):
    assert runs_in_process(query)


@pytest.mark.parametrize("query", EXPENSIVE)
def test_everything_else_runs_in_a_query_process(query):
    assert not runs_in_process(query)


def test_bindings_and_dataset():
    # A binding ($s) makes the variable a bound term; a repeated one is still a filter.
    assert not runs_in_process("SELECT * WHERE { ?s ?p ?o }")
    assert runs_in_process("SELECT * WHERE { ?s ?p ?o }", bound={"s"})
    assert runs_in_process("SELECT * WHERE { ?s <http://e/p> ?s }", bound={"s"})
    # One default graph is one index range; several are a merge.
    assert runs_in_process("SELECT ?o WHERE { <http://e/s> ?p ?o }", default_graphs=1)
    assert not runs_in_process("SELECT ?o WHERE { <http://e/s> ?p ?o }", default_graphs=2)
    assert not runs_in_process("SELECT ?o WHERE { <http://e/s> ?p ?o }", default_graphs=0)


def test_strings_and_iris_cannot_hide_structure():
    # Braces, dots and keywords inside literals and IRIs are not structure.
    assert runs_in_process('SELECT ?s WHERE { ?s <http://e/p> "x } . ?a ?b ?c {" }')
    assert runs_in_process("SELECT ?s WHERE { ?s <http://e/p#ORDER> 'FILTER(' }")
    assert runs_in_process('SELECT ?s WHERE { ?s <http://e/p> """multi\nline . }""" }')


# ---- the properties: query-timeout-s on both node kinds, max-concurrent-queries and
# its queue ----


def _write(path, values: dict[str, str]):
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
    return path


MASTER = {"node-id": "m1", "master-url": "http://m1.example:8080", "repository-id": "repo",
          "listen-address": "127.0.0.1:8080", "data-dir": "/tmp/m1",
          "cluster-secret-file": "/tmp/m1.secret"}
WORKER = {"repository-id": "repo", "data-dir": "/tmp/w1", "listen-address": "127.0.0.1:8081",
          "cluster-secret-file": "/tmp/w1.secret"}


def test_query_timeout_properties(tmp_path):
    from master_service.config import MasterConfig, check_config
    from txinfra.properties import ConfigError
    from worker_service.config import WorkerConfig

    master = MasterConfig.load(_write(tmp_path / "m.properties", MASTER))
    assert master.query_timeout_s == DEFAULT_QUERY_TIMEOUT_S
    master = MasterConfig.load(_write(tmp_path / "m.properties",
                                      {**MASTER, "query-timeout-s": "2.5"}))
    assert master.query_timeout_s == 2.5
    problems = check_config(_write(tmp_path / "m.properties",
                                   {**MASTER, "query-timeout-s": "0"}))
    assert problems == ["invalid value for 'query-timeout-s': must be a number of seconds "
                        "> 0, got 0"]

    worker = WorkerConfig.load(_write(tmp_path / "w.properties", WORKER))
    assert worker.limits() == QueryLimits(DEFAULT_QUERY_TIMEOUT_S,
                                          default_max_concurrent_queries(os.cpu_count()))
    worker = WorkerConfig.load(_write(tmp_path / "w.properties", {
        **WORKER, "query-timeout-s": "1", "max-concurrent-queries": "3"}))
    assert worker.limits() == QueryLimits(1.0, 3)
    # The queue of queries beyond the limit (worker_service/query_slots.py).
    assert (worker.limits().queue_depth, worker.limits().queue_wait_s) == (
        DEFAULT_QUEUE_DEPTH, DEFAULT_QUEUE_WAIT_S)
    worker = WorkerConfig.load(_write(tmp_path / "w.properties", {
        **WORKER, "query-queue-depth": "0", "query-queue-wait-s": "2.5"}))
    assert (worker.limits().queue_depth, worker.limits().queue_wait_s) == (0, 2.5)
    for key, value in (("query-timeout-s", "-1"), ("max-concurrent-queries", "0"),
                       ("query-queue-depth", "-1"), ("query-queue-wait-s", "-1"),
                       ("query-queue-wait-s", "soon")):
        with pytest.raises(ConfigError, match=f"invalid value for '{key}'"):
            WorkerConfig.load(_write(tmp_path / "w.properties", {**WORKER, key: value}))


@pytest.mark.parametrize("query", CHEAP + EXPENSIVE + [
    "SELECT ?p?o{<http://e/s>?p?o}", "select * where{ ex:s ex:p ex:o.}", "ASK{?s a ex:C}",
    "SELECT * WHERE { <http://e/s> ?p 1. }", "SELECT * WHERE { ?s ?p \"a\\\"b\" } LIMIT 1",
    "SELECT ?x WHERE { ex:a.b ?p ?x }", "SELECT * WHERE { ?s ex:p ?o } LIMIT 10OFFSET 5",
    "SELECT * WHERE { ?s ex:p ?o } OFFSET 1 OFFSET 2", "SELECT * WHERE { ?s ?p ?o } LIMIT 3",
])
def test_the_fast_path_decides_as_the_tokenizer_does(query):
    """The regular expression for the usual shapes is a shortcut, never another rule."""
    from worker_service import query_isolation

    m = query_isolation._FAST.fullmatch(query)
    if m is not None:
        assert query_isolation._fast_path(m, ()) == query_isolation._by_tokens(query, ())
    assert runs_in_process(query) == query_isolation._by_tokens(query, ())


# ---- the master's check for a ``timeout`` parameter (master_service/api/client.py) ----

_NAMES = ["query", "timeout", "Timeout", "%74imeout", "time%6Fut", "timeout%20", "+timeout",
          "time+out", "timeout%", "%C3%A9", "%FF", "\xe9", "", "infer", "timeou"]


@given(st.lists(st.tuples(st.sampled_from(_NAMES), st.sampled_from(["", "=", "=1", "=a=b"])),
                max_size=5))
def test_names_timeout_agrees_with_the_full_parse(pairs):
    """Only the names are decoded, and the answer is the full parse's wherever that parses
    the string (where it refuses it, no timeout is asked whatever this says: a yes runs
    the full parse, which refuses it)."""
    text = "&".join(name + value for name, value in pairs)
    try:
        full = any(k == "timeout" for k, _ in parse_params(text.encode("latin-1")))
    except ProtocolError:
        full = None
    fast = _names_timeout(text.encode("latin-1"))
    assert full is None or fast == full, (text, fast, full)


def test_names_timeout_examples():
    assert _names_timeout(b"query=ASK%7B%7D&timeout=3")
    assert _names_timeout(b"time%6Fut=3&query=x")
    assert not _names_timeout(b"query=SELECT+%3Ftimeout+WHERE+%7B%7D")  # a value, not a name
    assert not _names_timeout(b"query=x&timeouts=1") and not _names_timeout(b"")
