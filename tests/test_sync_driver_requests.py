"""A peer's status request is taken whole or not at all (driver.receive_status): the tail
segments it carries (wire.TAILS_FIELD) and a mode change it shows are taken only once
every part passed the core's checks (SyncNode.check). A refused part used to leave the
parts before it taken, with the sender told 400 for all of it.

The driver here has no servers: the request is handed to it as peer.py would, and what
it took is read from the core and from the Readies it queued for its applier."""

from __future__ import annotations

import asyncio

import pytest

from master_service.cluster.pool import LogThread
from master_service.sync.driver import SyncDriver, now_ms
from master_service.sync.messages import (
    InvalidMessage,
    Mode,
    Status,
    TailSegment,
    TxMeta,
    chain_hash,
)
from master_service.sync.protocol import SyncNode
from master_service.sync.ready import Timing, UnknownPeer
from master_service.sync.wire import status_to_json, tail_to_json

TIMING = Timing()


def driver_with_core(db: LogThread) -> SyncDriver:
    cluster = type("Cluster", (), {"read_only": False, "db": db})()
    driver = SyncDriver(node_id="m1", mode=Mode.READ_WRITE,
                        peers={"m2": "http://127.0.0.1:9", "m3": "http://127.0.0.1:9"},
                        secret=b"s" * 32, agreement=None, cluster=cluster, scheduler=None,
                        timing=TIMING)
    driver.node = SyncNode("m1", now=now_ms(), peers=["m2", "m3"], timing=TIMING)
    return driver


def request(counter: int, mode: Mode = Mode.READ_WRITE, second_ts: int | None = None) -> dict:
    """m2's status at the start of the queue, with two tail segments: its transactions A
    and B (B at ``second_ts``)."""
    now = now_ms()
    a = TailSegment("m2", 0, None, (TxMeta("A", now, "m2", 10, "sha:A"),), "")
    b = TailSegment("m2", 1, "A", (TxMeta("B", second_ts or now, "m2", 10, "sha:B"),),
                    chain_hash("", "A"))
    return {"status": status_to_json(Status("m2", mode, None, 0, counter, (), "")),
            "tails": [tail_to_json(a), tail_to_json(b)]}


def taken(driver: SyncDriver) -> tuple:
    """What the core holds and what the driver queued to persist and act on."""
    node = driver.node
    return (node.seq, node.peers.get("m2"), len(driver._queue),
            node.persistent_state().incoming)


def run(body: dict) -> tuple[tuple, tuple, Exception | None]:
    async def scenario() -> tuple[tuple, tuple, Exception | None]:
        db = LogThread()
        try:
            driver = driver_with_core(db)
            before = taken(driver)
            try:
                driver.receive_status(body)
            except (InvalidMessage, UnknownPeer) as exc:
                return before, taken(driver), exc
            return before, taken(driver), None
        finally:
            db.shutdown()

    return asyncio.run(scenario())


def test_a_request_that_passes_is_taken_tails_first():
    before, after, refused = run(request(now_ms()))
    assert refused is None
    assert after != before and after[2] == 3  # a Ready per tail segment, then the status's


@pytest.mark.parametrize("case", ["status ahead", "second tail ahead",
                                  "mode change, status ahead"])
def test_a_request_with_a_refused_part_takes_none_of_it(case):
    far = now_ms() + 10 * TIMING.max_drift
    body = {"status ahead": lambda: request(far),
            "second tail ahead": lambda: request(now_ms(), second_ts=far),
            "mode change, status ahead": lambda: request(far, mode=Mode.READ_ONLY)}[case]()
    before, after, refused = run(body)
    assert isinstance(refused, InvalidMessage)
    assert "ahead of this master's clock" in str(refused)
    assert after == before  # not the tail, not the mode: nothing queued, nothing in the core


def test_the_core_check_changes_nothing_and_matches_receive():
    node = SyncNode("m1", now=1_000, peers=["m2"], timing=TIMING)
    state = node.persistent_state()
    ahead = Status("m2", Mode.READ_WRITE, None, 0, 1_000 + TIMING.max_drift + 1, (), "")
    for message, error in [(ahead, InvalidMessage),
                           (Status("m9", Mode.READ_WRITE, None, 0, 1_000, (), ""), UnknownPeer),
                           (Status("m1", Mode.READ_WRITE, None, 0, 1_000, (), ""),
                            InvalidMessage)]:
        with pytest.raises(error):
            node.check(message, 1_000)
        with pytest.raises(error):
            node.receive(message, 1_000)
        assert node.persistent_state() == state
    node.check(Status("m2", Mode.READ_WRITE, None, 0, 1_000, (), ""), 1_000)  # passes


def test_a_relayed_status_that_is_refused_leaves_the_relayers_own_taken(caplog):
    """A status m2 relays for m3 is taken as if m3 had sent it: one ahead of our clock is
    ignored, with a warning, and m2's request is answered as taken (refusing it would
    refuse m2's own status for as long as m3's clock is skewed)."""
    far = now_ms() + 10 * TIMING.max_drift

    async def scenario() -> tuple[float | None, float | None, int]:
        db = LogThread()
        try:
            driver = driver_with_core(db)
            body = request(now_ms())
            body["relayed"] = [
                {"status": status_to_json(Status("m3", Mode.READ_WRITE, None, 0, far, (), ""))}]
            driver.receive_status(body)
            return (driver.peers["m2"].last_heard, driver.peers["m3"].last_heard,
                    len(driver._queue))
        finally:
            db.shutdown()

    m2_heard, m3_heard, queued = asyncio.run(scenario())
    assert m2_heard is not None and not m3_heard
    assert queued == 3  # two tail segments and m2's status; nothing of m3's
    assert "ignored a status relayed by m2" in caplog.text
    assert "ahead of this master's clock" in caplog.text
