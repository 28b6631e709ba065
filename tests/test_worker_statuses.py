"""The statuses a master gives an in-sync worker as writes are forwarded to it
(docs/design/cluster-basics.md#worker-statuses): ON, WAITING_WRITE while a write is
queued for it, WRITING while it applies one. The write path's forwarder against a worker
client that answers when the test says so; no servers. Last, a health check whose answer
is overtaken by a forward, against real worker processes."""

from __future__ import annotations

import asyncio
import time

from master_service.cluster import replication
from master_service.cluster.core import Cluster
from master_service.cluster.pool import Worker, WorkerPool
from master_service.cluster.statuses import IN_SYNC, READABLE, WorkerStatus
from master_service.cluster.write_path import WritePath
from master_service.txlog.log import TxLog
from tests.procs import run_on_cluster


class HeldClient:
    """A worker client whose ``apply`` is answered by ``release()``."""

    def __init__(self) -> None:
        self.batches: list[list[dict]] = []
        self.gate = asyncio.Event()

    async def apply(self, batch: list[dict]) -> dict:
        self.batches.append(batch)
        await self.gate.wait()
        self.gate.clear()
        last = batch[-1]
        return {"seq": last["seq"], "fingerprint": last["expected_fingerprint"], "quads": 1}


def entry(seq: int) -> tuple:
    return (seq, f"t{seq}", {"add": []}, f"{seq:032x}", 1, 0.0)


async def until(condition, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_a_worker_with_a_write_queued_for_it_is_waiting_write():
    async def scenario() -> None:
        pool = WorkerPool(node_id="m1", txlog=None, secret=b"s" * 32,
                          params=replication.Parameters(), control_queries=[])
        writes = WritePath(pool)
        probe, client = Worker("http://probe", None), HeldClient()  # type: ignore[arg-type]
        w = Worker("http://w2", client)  # type: ignore[arg-type]
        for worker in (probe, w):
            worker.status, worker.seq = WorkerStatus.ON, 0
            pool.workers[worker.url] = worker
        try:
            writes.committed(probe, [entry(1)])
            # queued, not sent yet (no forwarder runs): waiting for its write
            assert w.status is WorkerStatus.WAITING_WRITE and w.status in READABLE
            assert probe.status is WorkerStatus.ON
            writes.start_forwarder(w)
            await until(lambda: client.batches)
            assert w.status is WorkerStatus.WRITING
            writes.committed(probe, [entry(2)])  # queued while the first is applied
            assert w.status is WorkerStatus.WRITING
            client.gate.set()
            # the first applied, the second sent at once
            await until(lambda: len(client.batches) == 2)
            assert w.seq == 1 and w.status is WorkerStatus.WRITING
            client.gate.set()
            await until(lambda: w.seq == 2)
            assert w.status is WorkerStatus.ON and not w.queue
        finally:
            w.forwarder.cancel()

    asyncio.run(scenario())


def test_a_forward_that_ends_with_writes_queued_leaves_it_waiting_write():
    w = Worker("http://w2", None, status=WorkerStatus.WRITING)  # type: ignore[arg-type]
    assert WorkerPool.settled(w) is WorkerStatus.ON
    w.queue.append({"seq": 3})
    assert WorkerPool.settled(w) is WorkerStatus.WAITING_WRITE


def test_a_health_answer_overtaken_by_a_forward_is_not_a_worker_going_back_in_time(
        worker_factory, secret, tmp_path):
    """The health check asks a worker its state; before that answer is read, a forward
    to the same worker is applied and answered (two connections: their answers arrive in
    any order under load). The answer then names an older position than the one the
    master now knows. The worker did not go back in time: it stays in rotation, and with
    two workers and protect-single-worker the cluster stays writable. (Before, it was
    taken out as "went back in time" and writes were refused until it was replayed.)"""
    workers = [worker_factory(f"w{i}") for i in (1, 2)]

    async def until(condition, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "condition not reached"
            await asyncio.sleep(0.01)

    async def scenario(cluster: Cluster, txlog: TxLog) -> None:
        insert = [{"type": "update",
                   "update": "INSERT DATA { <urn:late:s> <urn:late:p> 1 }"}]
        await cluster.write(insert)
        await until(lambda: cluster.probe is not None)
        [other] = [w for w in cluster.workers.values() if w.url != cluster.probe]
        await until(lambda: other.seq == cluster.head_seq and not other.queue)
        real_state = other.client.state

        async def overtaken_state(timeout: float = 5.0) -> dict:
            answer = await real_state(timeout)
            # The answer is on its way; meanwhile a write is forwarded to
            # this worker and its answer read first.
            await cluster.write([{"type": "update",
                                  "update": "INSERT DATA { <urn:late:s> <urn:late:p> 2 }"}])
            await until(lambda: other.seq == cluster.head_seq and not other.queue)
            return answer

        other.client.state = overtaken_state
        before = other.seq
        await cluster.poll(other)
        assert other.seq == before + 1
        assert other.status in IN_SYNC, (other.status, other.last_error)
        assert cluster.writable_reason() is None
        del other.client.state
        await cluster.poll(other)  # a fresh answer agrees with the log
        assert other.status in IN_SYNC and other.seq == cluster.head_seq

    run_on_cluster(tmp_path, secret, workers, scenario)


def test_a_worker_serving_several_images_is_replication_server_until_the_last_ends():
    """Two replications (or a backup and a replication) served by one worker at once: it
    stays REPLICATION_SERVER, and in sync, until the last of them ends, whichever order
    they end in; then it is settled again (WAITING_WRITE with a write queued for it)."""
    pool = WorkerPool(node_id="m1", txlog=None, secret=b"s" * 32,
                      params=replication.Parameters(), control_queries=[])
    w = Worker("http://w1", None)  # type: ignore[arg-type]
    w.status = WorkerStatus.ON
    first, second = pool.serving(w), pool.serving(w)
    first.__enter__()
    second.__enter__()
    assert w.status is WorkerStatus.REPLICATION_SERVER and w.status in IN_SYNC
    first.__exit__(None, None, None)  # the first to start ends first
    assert w.status is WorkerStatus.REPLICATION_SERVER
    w.queue.append({"seq": 1})
    second.__exit__(None, None, None)
    assert w.status is WorkerStatus.WAITING_WRITE and w.serving == 0
    try:
        with pool.serving(w):
            raise RuntimeError("the pull failed")
    except RuntimeError:
        pass
    assert w.status is WorkerStatus.WAITING_WRITE and w.serving == 0
