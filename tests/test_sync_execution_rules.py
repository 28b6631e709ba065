"""A peered master's write path around the sync core, without servers: what it counts
(PendingWrites) and whether it executes agreed transactions (its modes,
docs/design/sync-protocol.md#master-modes)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from master_service.cluster.pool import Counters, LogThread
from master_service.sync.driver import SyncDriver
from master_service.sync.messages import Mode, applies_agreed, mode_of
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.ready import Timing
from master_service.sync.status import seeding_before_peering

# ---- PendingWrites: client writes submitted here and not answered yet ----


def test_pending_counts_client_writes_not_yet_answered():
    async def scenario() -> None:
        cluster = SimpleNamespace(counters=Counters())
        ordering = AgreedOrdering(cluster, agreement=None)  # type: ignore[arg-type]
        answers: dict[str, asyncio.Future] = {}

        async def agree_and_execute(operations: list[dict]) -> dict:
            answers[operations[0]["id"]] = asyncio.get_running_loop().create_future()
            return await answers[operations[0]["id"]]

        ordering.submit_to = agree_and_execute
        assert ordering.pending == 0
        writes = [asyncio.create_task(ordering.submit([{"id": str(n)}])) for n in range(3)]
        await asyncio.sleep(0)
        assert ordering.pending == 3
        answers["0"].set_result({"seq": 1})
        answers["1"].set_exception(RuntimeError("refused"))
        await asyncio.sleep(0)
        assert ordering.pending == 1  # answered, with a result or an error: no longer pending
        answers["2"].set_result({"seq": 2})
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert ordering.pending == 0
        assert results[0] == {"seq": 1} and isinstance(results[1], RuntimeError)
        assert (cluster.counters.completed_writes, cluster.counters.failed_writes) == (2, 1)

    asyncio.run(scenario())


# ---- which modes apply agreed transactions to the workers ----


@pytest.mark.parametrize(("read_only", "mode", "protocol", "applies"), [
    (False, "NORMAL", Mode.READ_WRITE, True),
    (True, "NORMAL", Mode.READ_ONLY, False),
    (False, "MUTE", Mode.MUTED, True),
    # muted in the agreement (nobody waits for it), read-only in execution: applies none
    (True, "MUTE", Mode.MUTED, False),
])
def test_a_read_only_master_applies_nothing_muted_or_not(read_only, mode, protocol, applies):
    assert mode_of(read_only, mode) is protocol
    assert applies_agreed(read_only, protocol) is applies


def test_the_drivers_execution_follows_read_only_also_when_muted():
    async def scenario() -> None:
        db = LogThread()
        cluster = SimpleNamespace(read_only=True, db=db)
        driver = SyncDriver(node_id="m1", mode=mode_of(True, "MUTE"), peers={},
                            secret=b"s" * 32, agreement=None, cluster=cluster, scheduler=None,
                            timing=Timing())
        try:
            may_execute = driver.execution._may_execute
            assert driver.mode is Mode.MUTED and may_execute() is False
            cluster.read_only = False  # the control plane sets it, then tells the driver
            await driver.set_mode(mode_of(False, "MUTE"))  # same protocol mode: no restart
            assert may_execute() is True and driver.execution._wake.is_set()
        finally:
            db.shutdown()

    asyncio.run(scenario())


# ---- the status of a master seeding before it peers ----


def test_a_master_seeding_before_it_peers_reports_like_a_peered_one_with_nothing_agreed():
    """GET /admin/sync while a new data centre seeds itself before it has peers: the keys
    a tool polls for convergence are there (a chaos round's wait once failed on a missing
    'seq'), with the values of a peering status that has agreed nothing yet."""
    async def scenario() -> dict:
        db = LogThread()
        cluster = SimpleNamespace(read_only=False, db=db)
        driver = SyncDriver(node_id="m1", mode=mode_of(False, "NORMAL"), peers={},
                            secret=b"s" * 32, agreement=None, cluster=cluster, scheduler=None,
                            timing=Timing(), data_centre="dc1")
        try:
            return driver.status()
        finally:
            db.shutdown()

    peered = asyncio.run(scenario())
    seeding = seeding_before_peering("m1", "dc1")
    assert seeding["state"] == "seeding"
    # what tests/dclab.py's convergence wait and the status page read
    assert {"seq", "executed_seq", "incoming", "split_suspected", "peers",
            "divergences"} <= set(seeding)
    assert set(seeding) <= set(peered), set(seeding) - set(peered)
    assert {k: v for k, v in seeding.items() if k != "state"} == \
        {k: peered[k] for k in seeding if k != "state"}
