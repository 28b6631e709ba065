"""Provably cheap queries on the event loop (worker_service/api/queries.py, run_inline): the
same answer as in the thread pool, never a wait for the repository's lock, and given up
(nothing answered) once their budget has passed. A real store on disk."""

from __future__ import annotations

import threading
import time

import pyoxigraph as ox
import pytest

from rdf4j_protocol.reads import parse_query_request
from rdfcore.changeset import Changeset
from worker_service.api import queries
from worker_service.api.queries import _run_query, run_inline
from worker_service.repository import Repository

EX = "http://example.org/"
JSON = "application/sparql-results+json"


def quad(i: int) -> ox.Quad:
    return ox.Quad(ox.NamedNode(f"{EX}s{i}"), ox.NamedNode(f"{EX}p"), ox.Literal(f"v{i}"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = Repository("r", tmp_path_factory.mktemp("inline") / "data")
    r.apply(1, "t1", Changeset(added=frozenset(quad(i) for i in range(50_000))))
    yield r
    r.close()


def request(query: str):
    return parse_query_request("GET", (("query", query),))


def test_a_point_query_on_the_loop_answers_as_the_thread_pool(repo):
    q = request(f"SELECT ?o WHERE {{ <{EX}s7> <{EX}p> ?o }}")
    inline = run_inline(repo, q, JSON, 30.0)
    pooled = _run_query(repo, q, JSON, 30.0)
    assert inline is not None
    assert inline[0] == pooled.body and b'"v7"' in inline[0]
    assert inline[1] == pooled.media_type


def test_a_syntax_error_is_the_same_400(repo):
    from rdf4j_protocol.parameters import ProtocolError

    with pytest.raises(ProtocolError) as exc:
        run_inline(repo, request("SELECT ?o WHERE { <x"), JSON, 30.0)
    assert exc.value.status == 400


def test_a_writer_holding_or_waiting_for_the_lock_sends_it_to_the_pool_at_once(repo):
    q = request(f"ASK {{ <{EX}s1> <{EX}p> ?o }}")
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with repo._lock.write():
            held.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        assert run_inline(repo, q, JSON, 30.0) is None
        assert time.monotonic() - started < 0.5  # it did not wait for the writer
    finally:
        release.set()
        t.join(10)
    assert run_inline(repo, q, JSON, 30.0) is not None  # the lock is free again


def test_a_big_result_is_given_up_at_the_budget_and_answered_by_the_pool(repo, monkeypatch):
    monkeypatch.setattr(queries, "INLINE_BUDGET_S", 0.0005)
    q = request("SELECT * WHERE { ?s ?p ?o }")  # one index range, but 50,000 rows
    started = time.monotonic()
    assert run_inline(repo, q, JSON, 30.0) is None
    assert time.monotonic() - started < 0.5
    body = _run_query(repo, q, JSON, 30.0).body
    assert body.count(b'"value":"v') == 50_000
