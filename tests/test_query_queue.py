"""Queries beyond a worker's query processes wait in its bounded queue
(worker_service/query_slots.py) and are refused only when it is full or their wait
expired; a master sends a refused read to another worker (master_service/cluster/reads.py).
Real workers and a master on loopback."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.clusters import LocalCluster
from tests.querylab import (
    COUNT_JOIN,
    CROSS_JOIN,
    EX,
    JSON,
    assert_cpu_freed,
    assert_timed_out,
    children_of,
    data_update,
    in_background,
    load,
    query_url,
    wait_until,
)
from txinfra.query_limits import TIMED_OUT_HEADER, busy_message

pytestmark = pytest.mark.processes

# An engine-bound query that ends: 600 x 600 join rows, counted (~0.2 s alone).
HEAVY = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?a <{EX}p0> ?c . ?d <{EX}p1> ?f }}"
HEAVY_ROWS = "360000"
CSV = {"accept": "text/csv"}


def heavy(url: str) -> httpx.Response:
    return httpx.get(url, params={"query": HEAVY}, headers=CSV, timeout=120)


SCHED_BATCH = 3  # /proc/PID/stat's policy field


def _children(pid: int) -> list[tuple[int, int]]:
    """Live child processes of ``pid``, whatever their name, in one pass over /proc (a
    query process renames itself between evaluating and idle): (niceness, scheduling
    policy) of each."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split() if text else []
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            found.append((int(fields[16]), int(fields[38])))
    return found


class MostProcesses:
    """The most query processes (evaluating or kept) a worker had at once, sampled from
    /proc while the block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.most, self._stop = pid, 0, threading.Event()
        self.classes: set[tuple[int, int]] = set()  # (niceness, policy) seen

    def _sample(self) -> None:
        while not self._stop.is_set():
            children = _children(self.pid)
            self.most = max(self.most, len(children))
            self.classes.update(children)
            time.sleep(0.01)

    def __enter__(self) -> MostProcesses:
        self._thread = in_background(self._sample)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_sixteen_heavy_queries_at_once_are_all_answered_in_turn(worker_factory, secret):
    node = worker_factory("queued", **{"max-concurrent-queries": "2",
                                       "query-queue-depth": "16",
                                       "verify-on-start": "false"})
    load(node, secret[1])
    with MostProcesses(node.pid) as seen, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: heavy(query_url(node)), range(16)))
    assert [(r.status_code, r.text.split()[-1]) for r in answers] == \
        [(200, HEAVY_ROWS)] * 16, [r.text for r in answers if r.status_code != 200]
    assert 1 <= seen.most <= 2  # never more query processes than the limit
    # At the worker's priority, in the batch class (worker_service/query_child.py); a
    # child sampled in the instant between its fork and its first request may still be
    # in the worker's class.
    assert (0, SCHED_BATCH) in seen.classes and all(nice == 0 for nice, _ in seen.classes)


def test_a_full_queue_or_an_expired_wait_is_busy_and_a_deadline_in_it_a_timeout(
        worker_factory, secret):
    node = worker_factory("full", **{"max-concurrent-queries": "1",
                                     "query-queue-depth": "1",
                                     "query-queue-wait-s": "1",
                                     "verify-on-start": "false"})
    load(node, secret[1])
    answers: dict[str, httpx.Response] = {}
    took: dict[str, float] = {}

    def ask(name: str, query: str, timeout: str) -> None:
        started = time.monotonic()
        answers[name] = httpx.get(query_url(node), params={"query": query, "timeout": timeout},
                                  headers=JSON, timeout=30)
        took[name] = time.monotonic() - started

    running = in_background(lambda: ask("running", CROSS_JOIN, "6"))
    wait_until(lambda: children_of(node.pid), "the first query running", 5)
    waiting = in_background(lambda: ask("waiting", COUNT_JOIN, "10"))
    time.sleep(0.3)  # the second is in the queue: it is full
    ask("refused", COUNT_JOIN, "10")
    assert answers["refused"].status_code == 503
    assert answers["refused"].text == busy_message(1, 1) == (
        "this worker is already evaluating its maximum of 1 queries at once "
        "(max-concurrent-queries=1) and 1 more wait in its queue (query-queue-depth=1): "
        "retry later")
    assert TIMED_OUT_HEADER not in answers["refused"].headers  # a master tries another
    assert took["refused"] < 0.9  # at once, not after a wait
    waiting.join(30)
    assert answers["waiting"].status_code == 503
    assert answers["waiting"].text == busy_message(1, 1, 1.0)
    assert "waited 1 s in its queue without getting a turn" in answers["waiting"].text
    assert TIMED_OUT_HEADER not in answers["waiting"].headers
    assert 1.0 <= took["waiting"] < 2.0
    # A query whose own timeout comes before its turn: answered as timed out, at it.
    ask("deadline", COUNT_JOIN, "0.5")
    assert_timed_out(answers["deadline"], 0.5)
    assert answers["deadline"].headers[TIMED_OUT_HEADER] == "0.5"
    assert 0.5 <= took["deadline"] < 1.3
    # The running query is still stopped at its deadline, and then nothing runs.
    running.join(30)
    assert_timed_out(answers["running"], 6)
    assert 6.0 <= took["running"] < 7.5
    assert_cpu_freed(node.pid)


def test_a_master_sends_a_refused_read_to_another_worker(tmp_path, secret):
    """worker1 refuses every query process while it is busy (no queue); worker2 queues.
    Through the master, every heavy query is answered: those worker1 refused by worker2."""
    cluster = LocalCluster(tmp_path / "retry", secret, 2)
    refusing, queueing = cluster.workers
    refusing.properties.update({"max-concurrent-queries": "1", "query-queue-depth": "0"})
    queueing.properties.update({"max-concurrent-queries": "2", "query-queue-depth": "16"})
    try:
        cluster.start()
        assert cluster.update(data_update()).status_code == 204
        cluster.wait_in_sync()
        busy: list[httpx.Response] = []
        occupied = in_background(lambda: busy.append(httpx.get(
            query_url(refusing), params={"query": CROSS_JOIN, "timeout": "15"},
            headers=JSON, timeout=30)))
        wait_until(lambda: children_of(refusing.pid), "worker1 busy", 5)
        direct = heavy(query_url(refusing))
        assert direct.status_code == 503 and direct.text == busy_message(1, 0)
        # One after the other: the router alternates, so worker1 is asked too.
        for _ in range(4):
            r = heavy(cluster.repo_url)
            assert (r.status_code, r.text.split()[-1]) == (200, HEAVY_ROWS), r.text
        # Sixteen at once: worker1 refuses its share, worker2 answers every one in turn.
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: heavy(cluster.repo_url), range(16)))
        assert [(r.status_code, r.text.split()[-1]) for r in answers] == \
            [(200, HEAVY_ROWS)] * 16, [r.text for r in answers if r.status_code != 200]
        log = cluster.master.log_tail(200_000)
        assert f"read on {refusing.url} answered 503: retrying elsewhere" in log
        assert f"read on {queueing.url} answered 503" not in log
        occupied.join(30)
        assert_timed_out(busy[0], 15)
    finally:
        cluster.stop_all()
