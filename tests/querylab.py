"""What the query timeout and query-queue tests share: the data set, the runaway and
heavy queries, and helpers that watch a worker's query processes and CPU (real processes:
tests/test_query_timeout.py, tests/test_query_queue.py)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.procs import signed_client
from txinfra.query_limits import TOO_LONG

EX = "http://example.org/qt/"
N_TRIPLES = 3000
CROSS_JOIN = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
COUNT_JOIN = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
ORDERED_JOIN = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i } ORDER BY ?c ?f ?i"
POINT = f"SELECT ?p ?o WHERE {{ <{EX}s7> ?p ?o }}"
JSON = {"accept": "application/sparql-results+json"}


def data_update(n: int = N_TRIPLES) -> str:
    triples = " ".join(f'<{EX}s{i}> <{EX}p{i % 5}> "{i}" .' for i in range(n))
    return f"INSERT DATA {{ {triples} }}"


def marked(query: str) -> str:
    """The query with a unique comment first: the worker logs a stopped query's first
    characters, so a log shows which worker saw it."""
    return f"# {uuid.uuid4().hex}\n{query}"


# ---- what a process is doing, from /proc ----


def children_of(pid: int, idle: bool = False) -> list[int]:
    """Live (not zombie) child processes of ``pid``: a worker's query processes, those
    evaluating a query (named txc-query); ``idle``: those kept for the next query
    (txc-query-idle: they use no CPU, query_process.QueryProcesses) instead."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z" and \
                (name == "txc-query-idle") == idle:
            found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and of its reaped children (utime, stime, cutime, cstime)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def wait_until(condition, what: str, timeout: float) -> float:
    """Seconds until ``condition()`` held; AssertionError after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not {what} after {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - started


def assert_cpu_freed(pid: int) -> None:
    """No query process left, and the worker's CPU time (its children's included) stops
    growing: nothing evaluates the query any more."""
    assert children_of(pid) == []
    before = cpu_seconds(pid)
    time.sleep(1.0)
    assert cpu_seconds(pid) - before < 0.3, "the worker still burns CPU"
    assert children_of(pid) == []


def in_background(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def give_up_after(url: str, params: dict, seconds: float) -> None:
    """A client that sends a query and goes away (closes its connection) after
    ``seconds`` without an answer."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(url, params=params, headers=JSON, timeout=httpx.Timeout(5, read=seconds))


def assert_timed_out(resp: httpx.Response, seconds: float) -> None:
    """RDF4J's answer to a query past its maximum execution time."""
    assert resp.status_code == 503, resp.text
    assert resp.text == f"{TOO_LONG}: it was stopped at its timeout of {seconds:g} s"


# ---- one worker, directly ----


def load(node, secret: bytes) -> None:
    """N_TRIPLES triples, written as its master would (signed)."""
    with signed_client(node, secret) as c:
        r = c.post("/repositories/repo/statements", content=data_update(),
                   headers={"content-type": "application/sparql-update"})
        assert r.status_code == 204, r.text


def query_url(node) -> str:
    return f"{node.url}/repositories/repo"
