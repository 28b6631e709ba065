"""The driver's applier skips the log thread for a Ready with nothing durable in it
(SqliteStorage.writes): most statuses a peer answers with only move the counter below the
persisted mark, and each such Ready used to take a round trip through the log thread
that the next one (on the commit path, the ADD) queued behind.

Skipping is only right if ``persist`` would have written nothing: the first test holds
``writes`` to what ``persist`` does to the SQLite file, seen from another connection
(``PRAGMA data_version`` moves when another connection commits)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from master_service.cluster.pool import LogThread
from master_service.sync.driver import SyncDriver, now_ms
from master_service.sync.messages import Mode, Status, TxMeta
from master_service.sync.protocol import SyncNode
from master_service.sync.ready import Incoming, Timing
from master_service.sync.sqlite_storage import COUNTER_LEASE, SqliteStorage
from master_service.sync.wire import status_to_json
from master_service.txlog import TxLog

TX = TxMeta("t1", 1_000, "m2", 2, "sha:x")


CASES = {
    "nothing": {},
    "counter below the mark": {"counter": 500},
    "counter at the mark": {"counter": 1_000 + COUNTER_LEASE},
    "counter past the mark": {"counter": 1_001 + COUNTER_LEASE},
    "an incoming entry": {"incoming": [Incoming(TX, True)]},
    "an agreed entry": {"synchronised": [TX]},
    "a payload": {"payloads": [(TX, [{"op": "update", "sparql": "INSERT DATA {}"}])]},
    "a split point": {"split_point": (None,)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_writes_says_exactly_whether_persist_commits(tmp_path, case):
    path = str(tmp_path / "txlog.db")
    with TxLog.open(path) as log:
        ag = SqliteStorage(log)
        ag.enable()
        ag.persist(counter=1_000, incoming=[], synchronised=[])  # the mark: 1,000 + lease
        args = {"counter": None, "incoming": [], "synchronised": [], **CASES[case]}
        expected = ag.writes(**args)
        # a second connection's data_version moves when this one commits
        with sqlite3.connect(path) as other:
            before = other.execute("pragma data_version").fetchone()[0]
            ag.persist(**args)
            after = other.execute("pragma data_version").fetchone()[0]
        assert expected == (after != before), (case, expected)
    assert expected == (case not in ("nothing", "counter below the mark",
                                     "counter at the mark"))


class _CountingLog(LogThread):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def __call__(self, fn, *args):
        self.calls += 1
        return await super().__call__(fn, *args)


def test_a_status_that_moves_nothing_durable_is_acted_on_without_the_log_thread(tmp_path):
    """A peer's status with an empty queue and a counter below our persisted mark: its
    Ready is acted on without a log-thread call; a status whose counter passes the mark
    still goes through it, and the mark is on disk after."""

    async def scenario() -> tuple[int, int, int]:
        db = _CountingLog()
        log = TxLog.open(tmp_path / "txlog.db")
        try:
            ag = SqliteStorage(log)
            ag.enable()
            now = now_ms()
            ag.persist(counter=now, incoming=[], synchronised=[])
            cluster = type("Cluster", (), {"read_only": False, "db": db})()
            driver = SyncDriver(node_id="m1", mode=Mode.READ_WRITE,
                                peers={"m2": "http://127.0.0.1:9"}, secret=b"s" * 32,
                                agreement=ag, cluster=cluster, scheduler=None,
                                timing=Timing())
            driver.node = SyncNode("m1", now=now, peers=["m2"], timing=Timing())

            def status(counter: int) -> dict:
                return {"status": status_to_json(
                    Status("m2", Mode.READ_WRITE, None, 0, counter, (), ""))}

            driver.receive_status(status(now + 1))
            batch, driver._queue = driver._queue, []
            assert any(r.counter is not None for r, _ in batch)  # a counter to persist...
            await driver._persist(batch)
            quiet = db.calls  # ...below the mark: no call
            driver.receive_status(status(now + 2 * COUNTER_LEASE))
            batch, driver._queue = driver._queue, []
            await driver._persist(batch)
            return quiet, db.calls, ag._counter_mark
        finally:
            db.shutdown()
            log.close()

    quiet, calls, mark = asyncio.run(scenario())
    assert quiet == 0
    assert calls == 1
    assert mark > now_ms() + COUNTER_LEASE  # past the first mark: it was written
