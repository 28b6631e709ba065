"""Pipelined group commit (docs/design/write-path.md#group-commit-and-the-log): the next
group executes on the probe while the one before it is being made durable in the log;
groups are recorded and answered in the order they executed, and nothing is acknowledged
before its own record and every record before it are durable.

Real worker processes and a real SQLite log. The log is held up by a call that keeps the
master's log thread busy (as a long prune or backup record would): the records queue
behind it. It fails the way it does when something else writes to its file: a second
SQLite connection holds an exclusive lock, and the master's commit gets "database is
locked"."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from dataclasses import dataclass

import pytest

from master_service.cluster.core import Cluster
from master_service.cluster.statuses import WorkerStatus
from master_service.errors import WriteFailed
from master_service.txlog.log import TxLog
from tests.procs import run_on_cluster, signed_client


def insert(n: int) -> list[dict]:
    return [{"type": "update", "update": f"INSERT DATA {{ <urn:pipe:s{n}> <urn:pipe:p> {n} }}"}]


async def until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        await asyncio.sleep(0.01)


async def until_async(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        await asyncio.sleep(0.01)


def lock_the_log(tmp_path) -> sqlite3.Connection:
    """Another connection takes the log's write lock: the master's commits fail."""
    other = sqlite3.connect(str(tmp_path / "txlog.db"), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


def hold_the_log_thread(cluster: Cluster) -> tuple[threading.Event, asyncio.Future]:
    """A call that occupies the master's log thread until the event is set: the records
    of groups wait behind it, in order."""
    gate = threading.Event()
    return gate, asyncio.ensure_future(cluster.db(gate.wait, 30))


async def probe_seq(cluster: Cluster) -> int:
    probe = cluster.workers[cluster.probe]
    return (await probe.client.state())["seq"]


def test_a_group_executes_on_the_probe_while_the_one_before_is_recorded(
        worker_factory, secret, tmp_path):
    worker = worker_factory("w1")

    async def scenario(cluster: Cluster, txlog: TxLog) -> None:
        await cluster.write(insert(0))  # a probe is chosen
        gate, held = hold_the_log_thread(cluster)
        try:
            first = asyncio.create_task(cluster.write(insert(1)))
            await until_async(lambda: _at(cluster, 2), "the probe executed the first write")
            second = asyncio.create_task(cluster.write(insert(2)))
            # The second group went to the probe although the first is not recorded.
            await until_async(lambda: _at(cluster, 3), "the probe executed the second write")
            await asyncio.sleep(0.2)
            assert not first.done() and not second.done()  # nothing answered before durable
            assert cluster.head_seq == 1
        finally:
            gate.set()
        await held
        a, b = await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert (a["seq"], b["seq"]) == (2, 3)
        state = await cluster.workers[worker.url].client.state()
        assert txlog.head().seq == 3 == cluster.head_seq == state["seq"]
        assert txlog.head().fingerprint == b["fingerprint"] == state["fingerprint"]
        assert [e.seq for e in txlog.entries(0, 10)] == [1, 2, 3]

    run_on_cluster(tmp_path, secret, [worker], scenario)


async def _at(cluster: Cluster, seq: int) -> bool:
    return await probe_seq(cluster) == seq


def test_groups_the_log_could_not_record_are_not_acknowledged_and_the_probe_is_recovered(
        worker_factory, secret, tmp_path):
    workers = [worker_factory("w1"), worker_factory("w2")]

    async def scenario(cluster: Cluster, txlog: TxLog) -> None:
        await cluster.write(insert(0))
        probe_url = cluster.probe
        gate, held = hold_the_log_thread(cluster)
        other = lock_the_log(tmp_path)
        try:
            first = asyncio.create_task(cluster.write(insert(1)))
            await until_async(lambda: _at(cluster, 2), "the probe executed the first write")
            second = asyncio.create_task(cluster.write(insert(2)))
            await until_async(lambda: _at(cluster, 3), "the probe executed the second write")
            gate.set()  # the first record runs, against a locked log
            await held
            results = await asyncio.wait_for(
                asyncio.gather(first, second, return_exceptions=True), 30)
        finally:
            gate.set()
            other.rollback()
            other.close()
        for r in results:
            assert isinstance(r, WriteFailed) and r.status == 503, r
        assert "database is locked" in str(results[0])
        assert "not recorded" in str(results[1])
        assert txlog.head().seq == 1 == cluster.head_seq
        # The probe executed what the log does not hold: out of rotation, then brought
        # back to the log's state by the recovery (replicated from the other worker).
        probe = cluster.workers[probe_url]
        assert any(f"{probe_url} -> OUT_OF_SYNC: executed transactions the log did not "
                   "record" in m for _, m in cluster.events)
        assert probe.status == WorkerStatus.OUT_OF_SYNC

        async def recovered() -> bool:
            await cluster.poll(probe)  # the health check (the master's scheduler's job)
            return probe.status == WorkerStatus.ON

        await until_async(recovered, "the probe recovered", 60)
        third = await cluster.write(insert(3))
        assert third["seq"] == 2
        for w in cluster.workers.values():
            await until(lambda w=w: w.seq == 2 and not w.queue, f"{w.url} at seq 2")
            state = await w.client.state()
            assert (state["seq"], state["fingerprint"]) == (2, third["fingerprint"])
        for node in workers:  # what was never acknowledged is nowhere
            with signed_client(node, secret[1]) as client:
                r = client.get("/repositories/repo", params={
                    "query": "SELECT ?s WHERE { ?s <urn:pipe:p> ?o } ORDER BY ?s"},
                    headers={"Accept": "application/sparql-results+json"})
                assert r.status_code == 200, r.text
                assert [b["s"]["value"] for b in r.json()["results"]["bindings"]] == \
                    ["urn:pipe:s0", "urn:pipe:s3"]

    run_on_cluster(tmp_path, secret, workers, scenario)


@pytest.mark.parametrize("n", [40])
def test_many_concurrent_writers_get_consecutive_seqs_recorded_in_order(
        worker_factory, secret, tmp_path, n):
    """With writers outpacing the log, groups overlap: every write is answered once, with
    one seq each, 1..n in the log in the order the probe executed them, and every worker
    ends at the log's head."""
    workers = [worker_factory("w1"), worker_factory("w2")]

    async def scenario(cluster: Cluster, txlog: TxLog) -> None:
        answers = await asyncio.wait_for(
            asyncio.gather(*(cluster.write(insert(i)) for i in range(n))), 60)
        assert sorted(a["seq"] for a in answers) == list(range(1, n + 1))
        entries = txlog.entries(0, n + 10)
        assert [e.seq for e in entries] == list(range(1, n + 1))
        by_seq = {a["seq"]: a for a in answers}
        assert [e.txid for e in entries] == [by_seq[s]["txid"] for s in range(1, n + 1)]
        assert [e.fingerprint for e in entries] == \
            [by_seq[s]["fingerprint"] for s in range(1, n + 1)]
        for w in cluster.workers.values():
            await until(lambda w=w: w.seq == n and not w.queue, f"{w.url} at the head")
            state = await w.client.state()
            assert (state["seq"], state["fingerprint"], state["quads"]) == \
                (n, by_seq[n]["fingerprint"], n)

    run_on_cluster(tmp_path, secret, workers, scenario)


@dataclass
class Agreed:
    """A transaction as a peered master's ordering hands it over: agreed and durable on
    every master before it executes (sync/ordering.py)."""

    txid: str
    operations: list[dict]
    timestamp: int


def record_in(txlog: TxLog):
    def record(outcome, now: float) -> None:
        txlog.record_group([(t.txid, now, "m1", t.operations) for t in outcome.group],
                           outcome.entries, outcome.failures)
    return record


def test_an_agreed_group_is_answered_once_executed_and_read_only_after_its_record(
        worker_factory, secret, tmp_path):
    """A peered master answers its clients as soon as the probe executed their agreed
    group (WritePath.execute's ``executed``), while the log's record is still held up;
    a read under read-your-writes arriving then waits for the record rather than go to
    a worker that does not hold the write (the other worker is still at seq 1)."""
    workers = [worker_factory("w1"), worker_factory("w2")]

    async def scenario(cluster: Cluster, txlog: TxLog) -> None:
        await cluster.write(insert(0))  # a probe is chosen; both workers at seq 1
        for w in cluster.workers.values():
            await until(lambda w=w: w.seq == 1 and not w.queue, f"{w.url} at seq 1")
        answered: asyncio.Future = asyncio.get_running_loop().create_future()
        gate, held = hold_the_log_thread(cluster)
        try:
            group = [Agreed("agreed-1", insert(1), int(time.time() * 1000))]
            executing = asyncio.create_task(cluster.execute(
                group, record_in(txlog), admit=cluster.writable_reason,
                executed=answered.set_result))
            outcome = await asyncio.wait_for(answered, 30)
            assert outcome.results[0]["ok"] and outcome.results[0]["seq"] == 2
            assert not executing.done() and cluster.head_seq == 1 == txlog.head().seq
            floor = cluster.read_floor()
            assert floor == 2
            assert cluster.choose_reader(set(), floor) is None
            reading = asyncio.create_task(cluster.reader_for(set(), floor))
            await asyncio.sleep(0.3)
            assert not reading.done()  # not sent to a worker at seq 1
        finally:
            gate.set()
        await held
        recorded = await asyncio.wait_for(executing, 30)
        assert recorded.results == outcome.results
        reader = await asyncio.wait_for(reading, 30)
        assert reader is not None and reader.seq == 2 == txlog.head().seq == cluster.head_seq
        # A rollback takes the head back: what was answered after it no longer holds
        # reads up (images.rollback sets the head so).
        cluster.set_head(1, txlog.entries(0, 1)[0].fingerprint, 1)
        assert cluster.read_floor() == 1

    run_on_cluster(tmp_path, secret, workers, scenario)


def test_strict_consistency_answers_an_agreed_group_only_after_its_forwards(
        worker_factory, secret, tmp_path):
    """Strict consistency answers once every in-sync worker applied the write: the early
    answer of an agreed group is not given (``executed`` is not called)."""
    workers = [worker_factory("w1"), worker_factory("w2")]

    async def scenario(cluster: Cluster, txlog: TxLog) -> None:
        await cluster.write(insert(0))
        cluster.strict = True
        called: list = []
        gate, held = hold_the_log_thread(cluster)
        try:
            executing = asyncio.create_task(cluster.execute(
                [Agreed("agreed-1", insert(1), int(time.time() * 1000))], record_in(txlog),
                admit=cluster.writable_reason, executed=called.append))
            await until_async(lambda: _at(cluster, 2), "the probe executed the group")
            await asyncio.sleep(0.2)
            assert called == [] and cluster.read_floor() == 1
        finally:
            gate.set()
        await held
        await asyncio.wait_for(executing, 30)
        assert called == [] and cluster.read_floor() == 2
        for w in cluster.workers.values():
            assert w.seq == 2

    run_on_cluster(tmp_path, secret, workers, scenario)
