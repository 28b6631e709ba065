"""The execution room takes agreed transactions from memory when the driver handed it
their payloads (Execution.hold, when persisted) and their positions (Execution.agreed,
when the ADD is persisted), and from the agreement log otherwise: what it takes from
memory must be exactly what ``SqliteStorage.to_execute`` would have read — the same
positions, transactions, operations and timestamps, and never past a gap."""

from __future__ import annotations

import pytest

from master_service.sync import execution
from master_service.sync.execution import Execution
from master_service.sync.messages import TxMeta
from master_service.sync.storage import Agreed


def room() -> Execution:
    return Execution(node_id="m1", agreement=None, ordering=None,  # type: ignore[arg-type]
                     cluster=type("C", (), {"db": None})(), may_execute=lambda: True,
                     backs_up=lambda: False, on_executed=lambda pos: None,
                     on_answers=lambda answers: None, on_rolled_back=lambda pos: None)


def tx(n: int, size: int = 10) -> TxMeta:
    return TxMeta(f"t{n}", 1_000 + n, "m2", size, f"sha:{n}")


def ops(n: int) -> list[dict]:
    return [{"op": "update", "sparql": f"INSERT DATA {{ <urn:s{n}> <urn:p> {n} }}"}]


def test_offered_transactions_are_taken_in_agreed_order_at_the_cores_positions():
    r = room()
    r.hold([(tx(n), ops(n)) for n in (1, 2, 3)])
    r.agreed(3, [tx(1), tx(2), tx(3)])  # positions 1..3
    assert r._take_offered(2) == [Agreed(1, "t1", ops(1), 1_001), Agreed(2, "t2", ops(2), 1_002)]
    r.executed_pos = 2
    assert r._take_offered(10) == [Agreed(3, "t3", ops(3), 1_003)]
    r.executed_pos = 3
    assert r._take_offered(10) == []


def test_a_payload_not_held_is_a_gap_that_the_log_fills():
    """t5 agreed without its payload here (a lagger's tail segment, fetched later): the
    run stops before it; past it (executed from the log), the next offers are taken."""
    r = room()
    r.executed_pos = 3
    r.hold([(tx(4), ops(4)), (tx(6), ops(6))])
    r.agreed(6, [tx(4), tx(5), tx(6)])  # positions 4, 5, 6
    assert [a.pos for a in r._take_offered(10)] == [4]
    r.executed_pos = 4
    assert r._take_offered(10) == []  # 5: from the log
    r.executed_pos = 5
    assert r._take_offered(10) == [Agreed(6, "t6", ops(6), 1_006)]


def test_offers_at_or_before_the_executed_position_are_dropped():
    """Positions executed meanwhile by other means (a roll-forward, a rollback that
    reloaded the executed position) are never offered again."""
    r = room()
    r.hold([(tx(n), ops(n)) for n in (1, 2, 3, 4)])
    r.agreed(2, [tx(1), tx(2)])
    r.executed_pos = 2
    r.agreed(4, [tx(3), tx(4)])
    assert [a.pos for a in r._take_offered(10)] == [3, 4]
    assert not r._offered and r._held_bytes == 0


def test_a_truncation_forgets_what_was_offered():
    r = room()
    r.hold([(tx(n), ops(n)) for n in (1, 2)])
    r.agreed(2, [tx(1), tx(2)])
    r.forget_offered()  # start_rollback does this first
    assert r._take_offered(10) == []
    # re-agreed after the truncation at other positions: offered there
    r.hold([(tx(2), ops(2))])
    r.agreed(1, [tx(2)])
    assert r._take_offered(10) == [Agreed(1, "t2", ops(2), 1_002)]


def test_held_payloads_are_bounded_by_count_and_bytes(monkeypatch):
    monkeypatch.setattr(execution, "HELD", 3)
    monkeypatch.setattr(execution, "HELD_BYTES", 35)
    r = room()
    r.hold([(tx(n), ops(n)) for n in (1, 2, 3, 4)])  # 4 > 3: t1 goes
    assert list(r._held) == ["t2", "t3", "t4"] and r._held_bytes == 30
    r.hold([(tx(5, size=20), ops(5))])  # 4 > 3: t2 goes; then 40 bytes > 35: t3 goes
    assert list(r._held) == ["t4", "t5"] and r._held_bytes == 30
    r.agreed(2, [tx(4), tx(5)])  # offered: their bytes still count
    assert not r._held and r._held_bytes == 30
    assert [a.pos for a in r._take_offered(5)] == [1, 2] and r._held_bytes == 0


def test_offers_count_within_the_same_bounds(monkeypatch):
    """A master that executes nothing (read-only) keeps being offered what is agreed: held
    and offered together stay within HELD entries and HELD_BYTES, held payloads going
    first (the offers are what executes next)."""
    monkeypatch.setattr(execution, "HELD", 4)
    monkeypatch.setattr(execution, "HELD_BYTES", 45)
    r = room()
    for n in range(1, 4):
        r.hold([(tx(n), ops(n))])
        r.agreed(n, [tx(n)])
    assert len(r._offered) == 3 and r._held_bytes == 30
    r.hold([(tx(4), ops(4)), (tx(5), ops(5))])  # 5 entries > 4: t4 goes
    assert list(r._held) == ["t5"] and len(r._offered) == 3 and r._held_bytes == 40
    r.hold([(tx(6, size=20), ops(6))])  # 5 > 4: t5 goes; then 50 bytes > 45: t6 goes
    assert not r._held and len(r._offered) == 3 and r._held_bytes == 30
    assert [a.pos for a in r._take_offered(5)] == [1, 2, 3] and r._held_bytes == 0


@pytest.mark.parametrize("held_twice", [False, True])
def test_a_payload_held_twice_counts_once(held_twice):
    """Fetched and pushed both (the applier holds each persisted batch's payloads)."""
    r = room()
    r.hold([(tx(1), ops(1))])
    if held_twice:
        r.hold([(tx(1), ops(1))])
    assert r._held_bytes == 10
    r.agreed(1, [tx(1)])
    assert [a.pos for a in r._take_offered(5)] == [1] and r._held_bytes == 0
