"""The statuses a master gives an in-sync worker as writes are forwarded to it
(docs/design/cluster-basics.md#worker-statuses): ON, WAITING_WRITE while a write is
queued for it, WRITING while it applies one. The write path's forwarder against a worker
client that answers when the test says so; no servers."""

from __future__ import annotations

import asyncio

from master_service.cluster import replication
from master_service.cluster.pool import Worker, WorkerPool
from master_service.cluster.statuses import READABLE, WorkerStatus
from master_service.cluster.write_path import WritePath


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
