"""Query timeouts that hold, and runaway queries contained (txinfra/query_limits.py,
worker_service/query_isolation.py, worker_service/query_process.py, the master's
forward_read), with real processes on loopback.

The runaway: a 4-way cross join over a few thousand triples (3,000^4 solutions), which
pyoxigraph alone would evaluate for hours and which, before query processes, kept every
worker's CPU busy for minutes after its client had gone while writes waited.
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from tests.procs import lone_worker, signed_client
from tests.querylab import (
    COUNT_JOIN,
    CROSS_JOIN,
    EX,
    JSON,
    N_TRIPLES,
    ORDERED_JOIN,
    POINT,
    assert_cpu_freed,
    assert_timed_out,
    children_of,
    data_update,
    give_up_after,
    in_background,
    load,
    marked,
    query_url,
    wait_until,
)
from txinfra.query_limits import TIMED_OUT_HEADER

pytestmark = pytest.mark.processes

@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """A worker holding N_TRIPLES triples (default limits); stopped by PID at the end."""
    root = tmp_path_factory.mktemp("query-timeout-worker")
    with lone_worker(root, **{"verify-on-start": "false"}) as (node, secret):
        load(node, secret)
        yield node



@pytest.mark.parametrize("query", [CROSS_JOIN, COUNT_JOIN, ORDERED_JOIN],
                         ids=["4-way cross join", "COUNT over a cross join",
                              "ORDER BY over a cross join"])
def test_a_runaway_query_stops_at_its_timeout_and_frees_the_cpu(worker, query):
    started = time.monotonic()
    resp = httpx.get(query_url(worker), params={"query": query, "timeout": "1"},
                     headers=JSON, timeout=30)
    took = time.monotonic() - started
    assert_timed_out(resp, 1)
    assert resp.headers[TIMED_OUT_HEADER] == "1"
    assert 1.0 <= took < 2.0, f"answered after {took:.2f} s"
    assert_cpu_freed(worker.pid)


def test_point_queries_are_answered_correctly(worker):
    resp = httpx.get(query_url(worker), params={"query": POINT, "timeout": "1"},
                     headers=JSON, timeout=30)
    assert resp.status_code == 200, resp.text
    rows = [(b["p"]["value"], b["o"]["value"]) for b in resp.json()["results"]["bindings"]]
    assert rows == [(f"{EX}p2", "7")]
    # A query process answers the same as the thread pool would.
    resp = httpx.get(query_url(worker), params={
        "query": f'SELECT ?s WHERE {{ ?s <{EX}p2> "7" . ?s ?p ?o }}'}, headers=JSON, timeout=30)
    assert resp.status_code == 200, resp.text
    assert [b["s"]["value"] for b in resp.json()["results"]["bindings"]] == [f"{EX}s7"]
    count = httpx.get(query_url(worker), params={"query": "SELECT (COUNT(*) AS ?n) WHERE "
                                                          "{ ?s ?p ?o }"},
                      headers={"accept": "text/csv"}, timeout=30)
    assert count.text.split() == ["n", str(N_TRIPLES)]
    ask = httpx.get(query_url(worker), params={"query": f"ASK {{ <{EX}s7> ?p ?o }}"},
                    headers={"accept": "text/boolean"}, timeout=30)
    assert ask.text == "true"
    # Errors found in a query process are answered as the thread pool answers them.
    bad = httpx.get(query_url(worker), params={"query": "SELECT * WHERE { ?s ?p ?o . ?x"},
                    timeout=30)
    assert bad.status_code == 400 and bad.text.startswith("MALFORMED QUERY:")


@pytest.mark.parametrize("value, message", [
    ("-1", "parameter 'timeout' must not be negative, got '-1'"),
    ("soon", "parameter 'timeout' must be a number of seconds, got 'soon'"),
    ("nan", "parameter 'timeout' must not be negative, got 'nan'"),
])
def test_bad_timeout_values_are_400(worker, value, message):
    resp = httpx.get(query_url(worker), params={"query": CROSS_JOIN, "timeout": value},
                     timeout=30)
    assert resp.status_code == 400
    assert resp.text == message
    # The timeout a master passes on is checked the same way.
    resp = httpx.get(query_url(worker), params={"query": CROSS_JOIN},
                     headers={"x-txcluster-query-timeout": value}, timeout=30)
    assert resp.status_code == 400
    assert resp.text == message.replace("parameter 'timeout'",
                                        "header x-txcluster-query-timeout")
    assert children_of(worker.pid) == []


def test_a_client_that_goes_away_ends_its_query_process(worker):
    give_up_after(query_url(worker), {"query": marked(CROSS_JOIN)}, 0.8)
    gone = wait_until(lambda: not children_of(worker.pid), "query process gone", 5)
    assert gone < 2.0
    assert_cpu_freed(worker.pid)
    assert "client gone after" in worker.log_tail()


def test_server_default_timeout_applies_without_a_client_timeout(worker_factory, secret):
    node = worker_factory("short", **{"query-timeout-s": "1"})
    load(node, secret[1])
    started = time.monotonic()
    resp = httpx.get(query_url(node), params={"query": CROSS_JOIN}, headers=JSON, timeout=30)
    assert_timed_out(resp, 1)
    assert time.monotonic() - started < 2.0
    # A client cannot ask for more than the server's maximum.
    resp = httpx.get(query_url(node), params={"query": COUNT_JOIN, "timeout": "60"},
                     headers=JSON, timeout=30)
    assert_timed_out(resp, 1)
    assert_cpu_freed(node.pid)


def test_a_full_worker_refuses_more_query_processes(worker_factory, secret):
    # Without a queue (query-queue-depth=0): the query beyond the limit is refused at once
    # (with one: tests/test_query_queue.py).
    node = worker_factory("one-at-a-time", **{"max-concurrent-queries": "1",
                                              "query-queue-depth": "0"})
    load(node, secret[1])
    answers: list[httpx.Response] = []
    first = in_background(lambda: answers.append(httpx.get(
        query_url(node), params={"query": CROSS_JOIN, "timeout": "4"}, headers=JSON,
        timeout=30)))
    wait_until(lambda: children_of(node.pid), "the first query running", 5)
    resp = httpx.get(query_url(node), params={"query": COUNT_JOIN}, headers=JSON, timeout=30)
    assert resp.status_code == 503
    assert resp.text == ("this worker is already evaluating its maximum of 1 queries at "
                         "once (max-concurrent-queries=1): retry later")
    assert TIMED_OUT_HEADER not in resp.headers  # a master tries another worker
    # A single triple pattern needs no query process: still answered.
    point = httpx.get(query_url(node), params={"query": POINT}, headers=JSON, timeout=30)
    assert point.status_code == 200
    first.join(30)
    assert_timed_out(answers[0], 4)
    assert_cpu_freed(node.pid)


# ---- through a master ----


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """Three workers holding N_TRIPLES triples; queries through the master are capped at
    10 s (so that what ends a query before that is the test's subject)."""
    c = module_cluster_factory(workers=3, name="query-timeout", **{"query-timeout-s": "10"})
    r = c.update(data_update())
    assert r.status_code == 204, r.text
    c.wait_in_sync()
    return c


def query_processes(cluster) -> dict[str, list[int]]:
    return {w.url: children_of(w.pid) for w in cluster.workers}


def test_through_a_master_a_timed_out_query_is_answered_once_and_not_resent(cluster):
    query = marked(CROSS_JOIN)
    marker = query.split("\n")[0]
    started = time.monotonic()
    resp = httpx.get(cluster.repo_url, params={"query": query, "timeout": "1"}, headers=JSON,
                     timeout=30)
    took = time.monotonic() - started
    assert_timed_out(resp, 1)
    assert took < 2.0, f"answered after {took:.2f} s"
    # Exactly one worker evaluated it: the others never saw the query.
    saw = [w.url for w in cluster.workers if marker in w.log_tail(100_000)]
    assert len(saw) == 1, saw
    assert all(not pids for pids in query_processes(cluster).values())


def test_through_a_master_bad_timeouts_and_point_queries(cluster):
    resp = httpx.get(cluster.repo_url, params={"query": CROSS_JOIN, "timeout": "-1"},
                     timeout=30)
    assert resp.status_code == 400
    assert resp.text == "parameter 'timeout' must not be negative, got '-1'"
    resp = httpx.post(cluster.repo_url, data={"query": CROSS_JOIN, "timeout": "x"},
                      timeout=30)
    assert resp.status_code == 400
    assert "parameter 'timeout' must be a number of seconds" in resp.text
    for i in (0, 7, 2999):
        rows = cluster.select(f"SELECT ?p ?o WHERE {{ <{EX}s{i}> ?p ?o }}")
        assert rows == [{"p": f"{EX}p{i % 5}", "o": str(i)}]
    # POST form, timeout in the body: the master passes it on.
    started = time.monotonic()
    resp = httpx.post(cluster.repo_url, data={"query": COUNT_JOIN, "timeout": "1"},
                      headers=JSON, timeout=30)
    assert_timed_out(resp, 1)
    assert time.monotonic() - started < 2.0


def test_through_a_master_a_client_that_goes_away_ends_the_query(cluster):
    query = marked(COUNT_JOIN)
    give_up_after(cluster.repo_url, {"query": query}, 1.0)
    gone = wait_until(lambda: not any(query_processes(cluster).values()),
                      "every query process gone", 9)
    assert gone < 2.0, f"query process still there {gone:.2f} s after the client left"
    for w in cluster.workers:
        assert_cpu_freed(w.pid)
    # The master abandoned it (closed its connection), which the worker noticed.
    marker = query.split("\n")[0]
    noticed = [w.url for w in cluster.workers
               if any("client gone after" in line and marker in line
                      for line in w.log_tail(100_000).splitlines())]
    assert len(noticed) == 1, noticed


def test_a_write_during_a_runaway_query_is_acknowledged_at_once(cluster):
    # The usual latency of a write through the master, for comparison.
    usual = []
    for i in range(3):
        started = time.monotonic()
        assert cluster.update(f'INSERT DATA {{ <{EX}before{i}> <{EX}p> "{i}" }}'
                              ).status_code == 204
        usual.append(time.monotonic() - started)
    runaway = in_background(lambda: give_up_after(
        cluster.repo_url, {"query": marked(CROSS_JOIN)}, 4.0))
    wait_until(lambda: any(query_processes(cluster).values()), "the runaway running", 5)
    time.sleep(1.0)
    started = time.monotonic()
    resp = cluster.update(f'INSERT DATA {{ <{EX}during> <{EX}p> "1" }}')
    took = time.monotonic() - started
    assert resp.status_code == 204, resp.text
    assert took < max(0.5, 5 * max(usual)), f"write took {took:.2f} s (usual {usual})"
    assert cluster.select(f"SELECT ?o WHERE {{ <{EX}during> ?p ?o }}") == [{"o": "1"}]
    runaway.join(30)
    wait_until(lambda: not any(query_processes(cluster).values()), "the runaway gone", 5)


# ---- the process machinery alone (worker_service/query_process.py) ----


def test_a_query_process_stuck_at_its_fork_is_forked_again():
    """A child that sleeps without CPU or output (as one blocked on a lock inherited at
    the fork does) is killed after STUCK_AFTER_S and the query forked again."""
    import asyncio

    from worker_service import query_process

    attempts: list[int] = []

    def evaluate(request: bytes, out: query_process.FrameWriter) -> None:
        if not attempts:  # the first child (forked before any was counted): blocked
            time.sleep(600)
        out.header("text/plain")
        out.write(b"answer to " + request)

    def fork() -> tuple[int, int, int, int]:
        r, w = os.pipe()
        requests_r, requests_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            query_process.child_main(parent, w, requests_r, evaluate)
        os.close(w)
        os.close(requests_r)
        attempts.append(pid)
        return pid, r, requests_w, 0

    async def run() -> query_process.Answer:
        try:
            return await processes.evaluate(b"q", fork, lambda: 1, timeout_s=10)
        finally:
            processes.kill_all()

    processes = query_process.QueryProcesses(limit=1)
    started = time.monotonic()
    answer = asyncio.run(run())
    took = time.monotonic() - started
    assert (answer.content_type, answer.body) == ("text/plain", b"answer to q")
    assert len(attempts) == 2 and processes.stuck == 1
    assert query_process.STUCK_AFTER_S <= took < query_process.STUCK_AFTER_S + 1.5
    assert not set(attempts) & set(children_of(os.getpid()))  # both reaped
    assert processes.running == 0 and not processes.children


# ---- query processes kept between writes ----


def test_a_query_process_answers_again_until_a_write_then_never_from_the_old_state(
        worker_factory, secret):
    """A query process that answered is kept (txc-query-idle) and answers the next
    queries, different ones too, from the same process; once a write has been
    acknowledged, no query is answered from the state before it: the kept process is
    retired and a new one forked. Without queries, a kept process is retired after
    IDLE_S."""
    from worker_service import query_process

    node = worker_factory("kept", **{"verify-on-start": "false"})
    load(node, secret[1])
    count = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o . ?s ?q ?r }"  # not provably cheap

    def ask(query: str) -> str:
        resp = httpx.get(query_url(node), params={"query": query},
                         headers={"accept": "text/csv"}, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.text.split()[1]

    assert ask(count) == str(N_TRIPLES)
    [kept] = children_of(node.pid, idle=True)
    assert children_of(node.pid) == []  # nothing evaluating
    assert ask(f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}p1> ?o . ?s ?q ?r }}") == \
        str(N_TRIPLES // 5)
    assert ask(count) == str(N_TRIPLES)
    # A query longer than a pipe holds (its text is sent while the process reads it).
    long = "# " + "x" * 300_000 + "\n" + count
    resp = httpx.post(query_url(node), content=long, timeout=30, headers={
        "content-type": "application/sparql-query", "accept": "text/csv"})
    assert resp.status_code == 200 and resp.text.split()[1] == str(N_TRIPLES), resp.text
    assert children_of(node.pid, idle=True) == [kept]  # the same process, four times
    with signed_client(node, secret[1]) as c:  # a write, as a master forwards it
        r = c.post("/repositories/repo/statements",
                   content=f"INSERT DATA {{ <{EX}new> <{EX}p0> 'n' }}",
                   headers={"content-type": "application/sparql-update"})
        assert r.status_code == 204, r.text
    assert ask(count) == str(N_TRIPLES + 1)  # not the kept process's older state
    wait_until(lambda: kept not in children_of(node.pid) + children_of(node.pid, idle=True),
               "the stale process gone", 5)  # killed when found stale
    [fresh] = children_of(node.pid, idle=True)
    assert fresh != kept
    wait_until(lambda: not children_of(node.pid, idle=True), "the kept process retired",
               query_process.IDLE_S + 2)
