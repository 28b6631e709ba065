"""The TxLog sync protocol core: unit tests and scenarios that read as stories.

Scenarios live in ``tests/testdata/sync/*.txt`` (raft datadriven style): a command, a
``----`` line, the expected output verbatim, a blank line. Rewrite the expectations after
a deliberate change with ``SYNC_REWRITE=1 .venv/bin/pytest tests/test_sync_protocol.py``
and review the diff. Commands:

    cluster n1 n2 n3 [n3=read-only|muted] [synced=U1..U10] [time=T] [max-peer-lag=L]
            [split-recovery=none|simple|smart]
    time T                  set the clock (all nodes share it)
    submit NODE TXID...     client transactions at NODE
    round NODE...           tick each node at its round deadline (the clock moves there)
    tick NODE...            tick each node at the current time
    deliver [SRC->DST [KIND]]  deliver the messages queued now (* matches any node;
                            KIND: status, tail or payload); what they cause is queued
    drop [SRC->DST [KIND]]  lose the queued messages
    stabilize               deliver until nothing is queued
    crash NODE / restart NODE
    wipe NODE               a crashed node restarts with nothing persisted
    partition A,B C,D       messages and payloads between the groups are lost (also those
                            queued now) until heal
    heal
    print-queues

Payload fetches are messages too ("payload X"): the driver asks the first source that
holds the payload, which answers at once.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from master_service.sync import (
    Activity,
    ExecutedAt,
    HybridLogicalClock,
    Incoming,
    InvalidMessage,
    Mode,
    PersistentState,
    Ready,
    Refused,
    Relayed,
    SplitRecovery,
    Status,
    SyncNode,
    TailSegment,
    Timing,
    Truncation,
    TxMeta,
    UnknownPeer,
    chain_hash,
)
from master_service.sync.wire import status_from_json, status_tails, status_to_json, tail_to_json

TESTDATA = Path(__file__).parent / "testdata" / "sync"
TIMING = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=500, max_tail=4)


def tx(txid: str, ts: int, origin: str = "n1") -> TxMeta:
    return TxMeta(txid, ts, origin, 10, f"sha:{txid}")


# ---------------------------------------------------------------- the hybrid logical clock


@given(st.lists(st.tuples(st.sampled_from(["observe", "tick", "next"]),
                          st.integers(0, 10**6)), max_size=60))
def test_hlc_never_goes_back_and_new_timestamps_exceed_everything_seen(steps):
    clock = HybridLogicalClock()
    seen = 0
    for op, value in steps:
        before = clock.counter
        if op == "observe":
            clock.observe(value)
            seen = max(seen, value)
        elif op == "tick":
            assert clock.tick(value) >= value
        else:
            ts = clock.next_timestamp(value)
            assert ts > before and ts > seen and ts >= value
            seen = ts
        assert clock.counter >= before
        assert clock.counter >= seen


def test_hlc_follows_the_physical_clock_when_it_is_ahead():
    clock = HybridLogicalClock(5)
    assert clock.next_timestamp(100) == 100
    assert clock.next_timestamp(100) == 101  # same millisecond: logical part
    assert clock.next_timestamp(50) == 102  # clock went back: the counter does not
    with pytest.raises(ValueError):
        HybridLogicalClock(-1)


def test_a_local_timestamp_is_above_every_timestamp_the_node_has_seen():
    node = SyncNode("n1", now=1_000, peers=["n2"], timing=TIMING)
    node.receive(Status("n2", Mode.READ_WRITE, None, 0, 5_000, (tx("X", 4_000, "n2"),)),
                 now=1_001)
    ready = node.submit("A", size=1, digest="d", now=1_002)
    assert ready.incoming[0].tx.timestamp == 5_001
    assert ready.counter == 5_001  # persisted before anything carrying it is sent


# ---------------------------------------------------------------- message validation


@pytest.mark.parametrize("make, message", [
    (lambda: TxMeta("", 1, "n1", 1, "d"), "transaction id"),
    (lambda: TxMeta("A", -1, "n1", 1, "d"), "timestamp"),
    (lambda: TxMeta("A", 1, "", 1, "d"), "origin"),
    (lambda: TxMeta("A", 1, "n1", -5, "d"), "size"),
    (lambda: TxMeta("A", True, "n1", 1, "d"), "timestamp"),
    (lambda: Status("", Mode.READ_WRITE, None, 0, 1, ()), "sender"),
    (lambda: Status("n1", Mode.READ_WRITE, None, 3, 1, ()), "merge base of None"),
    (lambda: Status("n1", Mode.READ_WRITE, "U1", 0, 1, ()), "seq 0"),
    (lambda: Status("n1", Mode.READ_WRITE, None, 0, 9, (tx("B", 2), tx("A", 1))),
     "not sorted"),
    (lambda: Status("n1", Mode.READ_WRITE, None, 0, 9, (tx("A", 1), tx("A", 1))), "twice"),
    (lambda: Status("n1", Mode.READ_WRITE, None, 0, 9, (tx("A", 1), tx("A", 2))), "twice"),
    (lambda: Status("n1", Mode.READ_WRITE, None, 0, 1, (tx("A", 2),)), "moved past"),
    (lambda: Status("n1", "read-write", None, 0, 1, ()), "mode"),
    (lambda: TailSegment("n1", 0, None, ()), "at least one"),
    (lambda: TailSegment("n1", 1, None, (tx("A", 1),)), "after is None"),
    (lambda: TailSegment("n1", 1, "A", (tx("A", 1),), "c"), "twice"),
    (lambda: TailSegment("n1", 1, "A", (tx("B", 1),)), "chain"),
    (lambda: TailSegment("n1", 0, None, (tx("A", 1),), "", -1), "split_point"),
    (lambda: TailSegment("n1", 0, None, (tx("A", 1),), "", True), "split_point"),
    (lambda: TailSegment("n1", 0, None, (tx("A", 1),), "", 0, ["n2"]), "excluded"),
    (lambda: TailSegment("n1", 0, None, (tx("A", 1),), "", 0, ("",)), "excluded"),
    (lambda: Status("n1", Mode.READ_WRITE, "U1", 1, 1, ()), "chain"),
    (lambda: Status("n1", Mode.READ_WRITE, None, 0, 1, (), "abc"), "chain"),
])
def test_invalid_messages_are_refused_at_construction(make, message):
    with pytest.raises(InvalidMessage, match=message):
        make()


def test_ties_in_timestamp_sort_by_transaction_id():
    Status("n1", Mode.READ_WRITE, None, 0, 5, (tx("A", 5), tx("B", 5)))
    with pytest.raises(InvalidMessage):
        Status("n1", Mode.READ_WRITE, None, 0, 5, (tx("B", 5), tx("A", 5)))


def test_persistent_state_is_validated():
    with pytest.raises(ValueError, match="both synchronised and incoming"):
        PersistentState((tx("A", 1),), (Incoming(tx("A", 1), True),), 5)
    with pytest.raises(ValueError, match="not sorted"):
        PersistentState((), (Incoming(tx("B", 2), True), Incoming(tx("A", 1), True)), 5)
    with pytest.raises(ValueError, match="counter"):
        PersistentState((tx("A", 7),), (), 5)


# ---------------------------------------------------------------- inputs that are refused


def test_read_only_and_muted_masters_refuse_client_transactions():
    for mode in (Mode.READ_ONLY, Mode.MUTED):
        node = SyncNode("n1", now=0, peers=["n2"], mode=mode)
        with pytest.raises(Refused, match=mode.value):
            node.submit("A", size=1, digest="d", now=1)
        assert node.incoming == ()


def test_bad_inputs_change_nothing():
    node = SyncNode("n1", now=0, peers=["n2"], timing=TIMING)
    node.submit("A", size=1, digest="d", now=1)
    before = node.persistent_state()
    with pytest.raises(Refused, match="already known"):
        node.submit("A", size=1, digest="d", now=2)
    with pytest.raises(UnknownPeer):
        node.receive(Status("n9", Mode.READ_WRITE, None, 0, 1, ()), now=3)
    with pytest.raises(InvalidMessage, match="ourselves"):
        node.receive(Status("n1", Mode.READ_WRITE, None, 0, 1, ()), now=3)
    with pytest.raises(InvalidMessage):
        node.submit("B", size=-1, digest="d", now=4)
    with pytest.raises(ValueError):
        node.tick(-1)
    with pytest.raises(ValueError):
        node.add_peer("n1", now=5)
    with pytest.raises(ValueError):
        node.remove_peer("n7", now=5)
    assert node.persistent_state() == before


def test_timing_is_validated():
    with pytest.raises(ValueError):
        Timing(round_timeout=0)
    with pytest.raises(ValueError):
        Timing(max_peer_lag=0)


def test_a_single_master_synchronises_alone_and_goes_idle():
    node = SyncNode("n1", now=0, timing=TIMING)
    ready = node.tick(0)
    assert ready.activity is Activity.IDLE and ready.next_round_at == 1_000
    ready = node.submit("A", size=1, digest="d", now=10)
    assert [t.txid for t in ready.synchronised] == ["A"] and ready.acknowledge == ("A",)
    assert node.incoming == () and node.merge_base == "A" and node.seq == 1


def _take(node: SyncNode, status: Status, now: int) -> Ready:
    """``status`` received with the payloads it lists pushed and stored at once."""
    ready = node.receive(status, now, pushed=[t.txid for t in status.queue])
    for t in status.queue:
        if node.wants_payload(t.txid):
            ready = node.acquired(t.txid, now)
    return ready


def _to(ready: Ready, peer: str) -> Status:
    return [p.status for p in ready.posts if p.to == peer][-1]


def test_a_lagger_that_adds_right_after_its_tail_segment_posts_its_new_base():
    """n2 misses n3's status for A, so n1 and n3 ADD A and n2 does not. n1's next
    transaction B reaches n2 as a status ahead of it; n1's tail segment brings n2 to A,
    and n2 ADDs B in the same step from the statuses of n1 and n3 at A. n2 never posted
    at A, so n1 and n3 can ADD B only from a status of n2 that says where it is now:
    going idle, n2 posts to them (it used not to, and they waited for their round
    timeout: 300 ms commits, one in ~700 sequential ones)."""
    n1, n2, n3 = (SyncNode(n, now=0, peers=[p for p in ("n1", "n2", "n3") if p != n],
                           timing=TIMING) for n in ("n1", "n2", "n3"))
    for node in (n1, n2, n3):
        node.tick(0)
    a1 = n1.submit("A", size=1, digest="d", now=10)
    a3 = _take(n3, _to(a1, "n3"), 11)
    a2 = _take(n2, _to(a1, "n2"), 11)
    _take(n1, _to(a3, "n1"), 12)
    _take(n1, _to(a2, "n1"), 12)
    _take(n3, _to(a2, "n3"), 12)
    assert n1.seq == n3.seq == 1 and n2.seq == 0  # n3's status for A never reached n2
    b1 = n1.submit("B", size=1, digest="d", now=20)
    b3 = _take(n3, _to(b1, "n3"), 21)
    b2 = _take(n2, _to(b1, "n2"), 21)  # ahead of n2: it tells n1 where it is
    _take(n2, _to(b3, "n2"), 22)
    tail = _take(n1, _to(b2, "n1"), 22).tails[0].segment
    _take(n1, _to(b3, "n1"), 22)
    assert n1.seq == 1  # n2's status at A is missing
    caught_up = n2.receive(tail, 23)
    assert n2.seq == 2 and [t.txid for t in caught_up.synchronised] == ["A", "B"]
    assert sorted(p.to for p in caught_up.posts) == ["n1", "n3"]
    # n1 and n3 learn B from it a round trip later, long before a round timeout
    for node, name in ((n1, "n1"), (n3, "n3")):
        ready = _take(node, _to(caught_up, name), 24)
        back = n2.receive(_to(ready, "n2"), 25)
        node.receive(back.tails[0].segment, 26)
        assert node.seq == 2 and node.merge_base == "B"


def test_a_status_with_a_pushed_payload_is_answered_once_the_payload_is_stored():
    """The status of an idle peer that receives a transaction with its payload pushed
    waits for ``acquired`` (which follows at once): posted before, it could not list
    the transaction (only acquired ones are) and its origin could not ADD from it."""
    origin = SyncNode("n1", now=0, peers=["n2"], timing=TIMING)
    peer = SyncNode("n2", now=0, peers=["n1"], timing=TIMING)
    origin.tick(0)
    peer.tick(0)
    status = _to(origin.submit("A", size=1, digest="d", now=10), "n2")
    received = peer.receive(status, 11, pushed=["A"])
    assert received.posts == () and received.activity is Activity.BUSY
    stored = peer.acquired("A", 11)
    assert [[t.txid for t in p.status.queue] for p in stored.posts] == [["A"]]
    # without a push the peer posts at once (the payload is fetched; ADD waits for it)
    other = SyncNode("n2", now=0, peers=["n1"], timing=TIMING)
    other.tick(0)
    assert [p.status.queue for p in other.receive(status, 11).posts] == [()]


def test_queues_that_diverged_and_end_on_the_same_id_are_reported():
    """After a split both sides may hold the same transactions in another order: the
    merge base and its position agree, the hash chain of the queue does not."""
    mine = (tx("A", 1), tx("B", 2), tx("C", 3))
    node = SyncNode.restore("n1", PersistentState(mine, (), 3), now=10, peers=["n2"],
                            timing=TIMING)
    chain = ""
    for txid in ("B", "A", "C"):
        chain = chain_hash(chain, txid)
    ready = node.receive(Status("n2", Mode.READ_WRITE, "C", 3, 20, (), chain), now=11)
    assert [i.kind for i in ready.inconsistencies] == ["diverged"]
    assert node.seq == 3
    # the peer gets our entries up to its position, which it cannot append: it reports the
    # divergence too, even under None (nothing is repaired)
    assert [(t.to, [e.txid for e in t.segment.entries]) for t in ready.tails] == [
        ("n2", ["A", "B", "C"])]
    peer = SyncNode.restore("n2", PersistentState((tx("B", 2), tx("A", 1), tx("C", 3)), (), 3),
                            now=10, peers=["n1"], timing=TIMING)
    got = peer.receive(ready.tails[0].segment, now=12)
    assert [i.kind for i in got.inconsistencies] == ["tail-diverged"] and peer.seq == 3


def test_restore_resumes_from_what_was_persisted():
    node = SyncNode("n1", now=0, peers=["n2"], timing=TIMING)
    node.submit("A", size=1, digest="d", now=10)
    state = node.persistent_state()
    again = SyncNode.restore("n1", state, now=5, peers=["n2"], timing=TIMING)
    assert again.incoming == state.incoming and again.counter == state.counter
    ready = again.submit("B", size=1, digest="d", now=5)  # the clock went back
    assert ready.incoming[0].tx.timestamp > state.counter


# ---------------------------------------------------------------- split recovery


def test_split_recovery_values_are_parsed_case_insensitively():
    assert [m.value for m in SplitRecovery] == ["None", "Simple", "Smart"]
    assert SplitRecovery.parse("smart") is SplitRecovery.SMART
    assert SplitRecovery.parse(" SIMPLE ") is SplitRecovery.SIMPLE
    assert SplitRecovery.parse("none") is SplitRecovery.NONE
    with pytest.raises(ValueError, match="None, Simple, Smart"):
        SplitRecovery.parse("majority")
    with pytest.raises(ValueError):
        SyncNode("n1", now=0, split_recovery="Smart")


def test_split_point_is_persisted_and_validated():
    mine = (tx("A", 1), tx("B", 2))
    with pytest.raises(ValueError, match="split_point"):
        PersistentState(mine, (), 2, 3)
    with pytest.raises(ValueError, match="split_point"):
        PersistentState(mine, (), 2, -1)
    node = SyncNode.restore("n1", PersistentState(mine, (), 2, 1), now=10, peers=["n2"])
    assert node.split_point == 1 and node.persistent_state().split_point == 1


def _split_node(strategy, missing=()):
    """n1 restored while split: A agreed before the split, B and C after it."""
    mine = (tx("A", 1), tx("B", 2), tx("C", 3, "n3"))
    return SyncNode.restore("n1", PersistentState(mine, (), 3, 1), now=10,
                            peers=["n2", "n3"], timing=TIMING, split_recovery=strategy,
                            missing_payloads=missing)


def test_a_truncation_puts_the_entries_after_the_split_point_back_into_incoming():
    node = _split_node(SplitRecovery.SIMPLE, missing=["C"])
    chain = chain_hash(chain_hash("", "A"), "X")
    ready = node.receive(Status("n2", Mode.READ_WRITE, "X", 2, 20, (), chain), now=11)
    assert ready.truncated == Truncation(1, (tx("B", 2), tx("C", 3, "n3")))
    assert ready.incoming == (Incoming(tx("B", 2), True), Incoming(tx("C", 3, "n3"), False))
    assert [a.tx.txid for a in ready.acquire] == ["C"]  # we never had its payload
    assert ready.split_point is None and ready.split_point_changed and ready.must_persist
    assert node.seq == 1 and node.missing_payloads == frozenset()
    assert node.split_suspected == frozenset() and not ready.tails
    assert [p.status.seq for p in ready.posts] == [1, 1]  # posted at once, at the split point


def _smart_node_split_from_n3():
    """n1 (Smart) agreed A with everybody, then n3 went silent: after max peer lag n1
    goes on with n2 alone (split point 1) and agrees B."""
    timing = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=500, max_tail=4,
                    max_peer_lag=500)
    node = SyncNode.restore("n1", PersistentState((tx("A", 1),), (), 1), now=0,
                            peers=["n2", "n3"], timing=timing,
                            split_recovery=SplitRecovery.SMART)
    node.tick(0)
    b = node.submit("B", size=1, digest="d", now=10).incoming[0].tx
    for t in range(100, 800, 100):
        node.receive(Status("n2", Mode.READ_WRITE, "A", 1, t, (b,), chain_hash("", "A")),
                     now=t)
        node.tick(t)
    assert node.split_suspected == frozenset({"n3"}) and node.split_point == 1
    assert [t.txid for t in node.synchronised] == ["A", "B"]
    return node


def test_smart_keeps_with_the_majority_and_tails_go_past_the_split_point_to_its_side():
    node = _smart_node_split_from_n3()
    # n3 is back, diverged, split since position 1 (its X is post-split): 2 of 3 is a
    # majority, so n1 keeps B; n3 stays excluded
    chain = chain_hash(chain_hash("", "A"), "X")
    ready = node.receive(Status("n3", Mode.READ_WRITE, "X", 2, 900, (), chain, 1,
                                chain_hash("", "A")), now=900)
    assert ready.truncated is None and node.seq == 2 and node.split_point == 1
    assert node.split_suspected == frozenset({"n3"})
    assert [i.kind for i in ready.inconsistencies] == ["diverged"]
    # a lagger of our side gets the post-split entries too, with our view of the split
    ready = node.receive(Status("n2", Mode.READ_WRITE, None, 0, 900, ()), now=901)
    assert [(t.to, [e.txid for e in t.segment.entries]) for t in ready.tails] == [
        ("n2", ["A", "B"])]
    assert ready.tails[0].segment.split_point == 1
    assert ready.tails[0].segment.excluded == ("n3",)
    # n3 truncated and posts its split point: consistent, waited for again, split over
    ready = node.receive(Status("n3", Mode.READ_WRITE, "A", 1, 901, (), chain_hash("", "A")),
                         now=902)
    assert node.split_suspected == frozenset() and node.split_point is None
    assert ready.split_point_changed
    assert [[e.txid for e in t.segment.entries] for t in ready.tails] == [["B"]]


def test_smart_keeps_no_post_split_entry_that_contradicts_a_good_prefix():
    # n3 comes back diverged and NOT split: X at position 2 is in its good prefix (it
    # agreed X with a node that no longer excluded it). B contradicts it: the majority
    # vote does not matter, n1 goes back to its split point (simulator seed 2201640281).
    node = _smart_node_split_from_n3()
    chain = chain_hash(chain_hash("", "A"), "X")
    ready = node.receive(Status("n3", Mode.READ_WRITE, "X", 2, 900, (), chain), now=900)
    assert ready.truncated is not None and ready.truncated.after_seq == 1
    assert [t.txid for t in ready.truncated.entries] == ["B"]
    assert node.seq == 1 and node.split_point is None
    # and a status that shows the split point says whose entries are post-split
    assert ready.posts[0].status.split_point is None


def test_a_node_behind_a_peers_floor_truncates_and_waits_for_it_to_be_seeded():
    """n3 forgot past n1's position (n1 is beyond its horizon): n3 no longer waits for n1
    and goes on without a split point, so n1 must not go on without n3 — it could agree
    B where n3 forgot something else, and neither could take it back (simulator seed
    677540770). n1 truncates its post-split B, never excludes n3 again and needs
    seeding."""
    node = _smart_node_split_from_n3()
    chain = ""
    for t in ("A", "X", "Y", "Z", "W"):
        chain = chain_hash(chain, t)
    ahead = Status("n3", Mode.READ_WRITE, "W", 5, 900, (), chain, executed=5, floor=4)
    ready = node.receive(ahead, now=900)
    assert ready.truncated is not None and [t.txid for t in ready.truncated.entries] == ["B"]
    assert node.seq == 1 and node.split_point is None
    assert node.split_suspected == frozenset()
    a = chain_hash("", "A")
    for t in range(1_000, 3_000, 100):  # n2 posts at our base; n3 never does
        node.receive(Status("n2", Mode.READ_WRITE, "A", 1, t, (), a, executed=1), now=t)
        ready = node.tick(t)
        assert not ready.synchronised and node.seq == 1
    assert node.split_suspected == frozenset() and node.split_point is None
    assert node.needs_seeding and node.seed_donor() == "n3"


def test_a_split_node_posts_its_good_prefix():
    node = _smart_node_split_from_n3()
    ready = node.tick(2_000)
    st = ready.posts[0].status
    assert (st.seq, st.split_point, st.split_chain) == (2, 1, chain_hash("", "A"))
    assert status_from_json(status_to_json(st)) == st


def test_tail_segments_in_a_status_body_are_its_senders_only():
    """transport.py sends the tail segments queued before a status in its request
    (wire.TAILS_FIELD); the receiver takes them first, or refuses the whole request."""
    seg = TailSegment("n2", 0, None, (tx("A", 1, "n2"),), "")
    body = {"status": {}, "tails": [tail_to_json(seg)]}
    assert status_tails(body, "n2") == [seg] and status_tails({"status": {}}, "n2") == []
    with pytest.raises(InvalidMessage, match="another node's tail segment"):
        status_tails(body, "n3")
    with pytest.raises(InvalidMessage, match="'tails' must be a JSON array"):
        status_tails({"tails": {"sender": "n2"}}, "n2")
    with pytest.raises(InvalidMessage, match="lacks the field 'entries'"):
        status_tails({"tails": [{"sender": "n2", "after_seq": 0, "after": None}]}, "n2")


def test_a_split_node_that_takes_post_split_entries_joins_the_senders_side():
    # n1 is split from n3 since position 1 and at [A, B]; n2 sends C after B, with its
    # own split: split point 0, n3 excluded. n1 appends C (past its own split point) and
    # takes n2's excluded peers; it keeps its split point 1: its statuses said A was good,
    # and peers may have forgotten A on that account (seed 119 of the simulator: a node
    # that took a lower split point truncated what its peers had forgotten, and was
    # stranded behind their floors).
    node = _smart_node_split_from_n3()
    chain = chain_hash(chain_hash("", "A"), "B")
    ready = node.receive(TailSegment("n2", 2, "B", (tx("C", 3, "n2"),), chain, 0,
                                     ("n1", "n3")), now=801)
    assert [t.txid for t in ready.synchronised] == ["C"]
    assert node.split_point == 1 and not ready.split_point_changed
    assert node.split_suspected == frozenset({"n3"})  # ourselves left out


def test_a_node_that_is_not_split_takes_nothing_past_the_senders_split_point():
    node = SyncNode("n2", now=0, peers=["n1", "n3"], timing=TIMING,
                    split_recovery=SplitRecovery.SIMPLE)
    ready = node.receive(TailSegment("n1", 0, None, (tx("A", 1), tx("B", 2)), "", 1,
                                     ("n3",)), now=1)
    assert [t.txid for t in ready.synchronised] == ["A"]  # up to n1's split point
    assert node.split_point is None and node.split_suspected == frozenset()


def test_a_node_restored_while_split_truncates_at_its_first_rejoin():
    """The excluded set is not persisted: after a restart a split node cannot vote, so
    under Smart too it goes back to its split point on the first status it receives."""
    node = _split_node(SplitRecovery.SMART)
    ready = node.receive(Status("n2", Mode.READ_WRITE, "A", 1, 20, (), chain_hash("", "A")),
                         now=11)
    assert ready.truncated == Truncation(1, (tx("B", 2), tx("C", 3, "n3")))


def test_smart_loses_the_vote_alone():
    node = _smart_node_split_from_n3()
    chain = chain_hash(chain_hash("", "A"), "X")
    ready = node.receive(Status("n2", Mode.READ_WRITE, "X", 2, 900, (), chain), now=900)
    assert ready.truncated == Truncation(1, (node.incoming[0].tx,))  # n2 diverged too
    assert node.seq == 1 and node.split_point is None and node.split_suspected == frozenset()


@pytest.mark.parametrize("strategy", list(SplitRecovery))
def test_every_strategy_waits_max_peer_lag_for_a_missing_peer(strategy):
    """SplitRecovery None goes on without a missing peer no sooner than Simple and Smart:
    a deliberate difference (docs/design/sync-protocol.md#where-we-differ). Under None
    what is not delayed is execution after the split is detected: no split backup is
    waited for (the driver's Execution backs up only under Simple and Smart)."""
    timing = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=500, max_tail=4,
                    max_peer_lag=500)
    node = SyncNode.restore("n1", PersistentState((tx("A", 1),), (), 1), now=0,
                            peers=["n2", "n3"], timing=timing, split_recovery=strategy)
    node.tick(0)
    b = node.submit("B", size=1, digest="d", now=10).incoming[0].tx
    agreed_at = None
    for t in range(100, 1_000, 100):
        node.receive(Status("n2", Mode.READ_WRITE, "A", 1, t, (b,), chain_hash("", "A")),
                     now=t)
        node.tick(t)
        if agreed_at is None and node.seq == 2:
            agreed_at = t
    assert node.split_suspected == frozenset({"n3"}) and node.split_point == 1
    assert agreed_at == 600  # n3 unheard of for max_peer_lag (500) since the start


def test_without_split_recovery_nothing_is_truncated():
    node = _split_node(SplitRecovery.NONE)
    chain = chain_hash(chain_hash("", "A"), "X")
    for peer, now in (("n2", 11), ("n3", 12)):
        ready = node.receive(Status(peer, Mode.READ_WRITE, "X", 2, 20, (), chain), now=now)
        assert ready.truncated is None and [i.kind for i in ready.inconsistencies] == [
            "diverged"]
    assert node.seq == 3 and node.split_point == 1


# ---------------------------------------------------------------- scenarios


class Scenario:
    def __init__(self) -> None:
        self.time = 0
        self.nodes: dict[str, SyncNode | None] = {}
        self.config: dict[str, dict] = {}
        self.durable: dict[str, PersistentState] = {}
        self.payloads: dict[str, set[str]] = {}
        self.queue: list[tuple[str, str, object]] = []  # (src, dst, message or txid)
        self.cut: set[tuple[str, str]] = set()  # (src, dst) pairs that lose messages

    # -- commands --

    def cmd_cluster(self, args: list[str]) -> list[str]:
        names = [a for a in args if "=" not in a]
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        self.time = int(opts.get("time", 1_000))
        lag = opts.get("max-peer-lag")
        timing = Timing(round_timeout=TIMING.round_timeout, idle_interval=TIMING.idle_interval,
                        acquire_retry=TIMING.acquire_retry, max_tail=TIMING.max_tail,
                        max_peer_lag=int(lag) if lag else None)
        modes = {n: Mode(opts.get(n, "read-write")) for n in names}
        recovery = SplitRecovery.parse(opts.get("split-recovery", "none"))
        synced: tuple[TxMeta, ...] = ()
        if "synced" in opts:
            first, last = opts["synced"].split("..")
            prefix = first.rstrip("0123456789")
            lo, hi = int(first[len(prefix):]), int(last[len(prefix):])
            synced = tuple(TxMeta(f"{prefix}{i}", i, names[0], 10, f"sha:{prefix}{i}")
                           for i in range(lo, hi + 1))
        for n in names:
            self.config[n] = dict(peers={p: modes[p] for p in names if p != n},
                                  mode=modes[n], timing=timing, split_recovery=recovery)
            self.durable[n] = PersistentState(synced, (), synced[-1].timestamp if synced else 0)
            self.payloads[n] = {t.txid for t in synced}
            self.nodes[n] = SyncNode.restore(n, self.durable[n], now=self.time,
                                             **self.config[n])
        return []

    def cmd_time(self, args: list[str]) -> list[str]:
        self.time = int(args[0])
        return []

    def cmd_submit(self, args: list[str]) -> list[str]:
        name, out = args[0], []
        for txid in args[1:]:
            try:
                ready = self.node(name).submit(txid, size=10, digest=f"sha:{txid}",
                                               now=self.time)
            except Refused as e:
                out.append(f"{name}: refused {txid}: {e}")
                continue
            self.payloads[name].add(txid)
            out += self.handle(name, ready)
        return out

    def cmd_round(self, args: list[str]) -> list[str]:
        out = []
        for name in args:
            self.time = max(self.time, self.node(name).next_round_at)
            out += self.handle(name, self.node(name).tick(self.time))
        return out

    def cmd_tick(self, args: list[str]) -> list[str]:
        out = []
        for name in args:
            out += self.handle(name, self.node(name).tick(self.time))
        return out

    def _matching(self, args: list[str]) -> list[tuple[str, str, object]]:
        src, dst = (args[0].split("->") if args else ("*", "*"))
        kinds = {"status": Status, "tail": TailSegment, "payload": str}
        kind = kinds[args[1]] if len(args) > 1 else object
        return [m for m in self.queue if src in ("*", m[0]) and dst in ("*", m[1])
                and isinstance(m[2], kind)]

    def cmd_deliver(self, args: list[str]) -> list[str]:
        out = []
        for item in self._matching(args):
            self.queue.remove(item)
            src, dst, msg = item
            node = self.nodes[dst]
            if isinstance(msg, str):
                head = f"{src}->{dst} payload {msg}"
            elif isinstance(msg, Status):
                head = f"{src}->{dst} status"
            else:
                head = f"{src}->{dst} tail"
            if node is None:
                out.append(f"{head}: {dst} is down")
                continue
            if isinstance(msg, str):
                self.payloads[dst].add(msg)
                lines = self.handle(dst, node.acquired(msg, self.time))
            else:
                lines = self.handle(dst, node.receive(msg, self.time))
            if lines or not isinstance(msg, str):  # a payload that changes nothing is quiet
                out.append(head + ("" if lines else ": nothing to do"))
                out += ["  " + line for line in lines]
        return out

    def cmd_drop(self, args: list[str]) -> list[str]:
        dropped = self._matching(args)
        for item in dropped:
            self.queue.remove(item)
        return [f"dropped {len(dropped)}"]

    def cmd_stabilize(self, args: list[str]) -> list[str]:
        out = []
        for _ in range(50):
            if not self.queue:
                return out
            out += self.cmd_deliver([])
        raise AssertionError("not stable after 50 passes")

    def cmd_crash(self, args: list[str]) -> list[str]:
        self.nodes[args[0]] = None
        self.queue = [m for m in self.queue if m[0] != args[0]]  # its sends die with it
        return []

    def cmd_restart(self, args: list[str]) -> list[str]:
        name = args[0]
        self.nodes[name] = SyncNode.restore(name, self.durable[name], now=self.time,
                                            **self.config[name])
        return [f"{name}: restored seq={self.nodes[name].seq} "
                f"incoming={self.ids(self.durable[name].incoming)}"]

    def cmd_wipe(self, args: list[str]) -> list[str]:
        """A crashed node comes back with nothing: no log, no payloads (a wiped data
        centre, before it is seeded or replayed)."""
        name = args[0]
        self.durable[name] = PersistentState((), (), 0)
        self.payloads[name] = set()
        return self.cmd_restart([name])

    def cmd_partition(self, args: list[str]) -> list[str]:
        groups = [g.split(",") for g in args]
        for a in groups:
            for b in groups:
                if a is not b:
                    self.cut |= {(x, y) for x in a for y in b}
        before = len(self.queue)
        self.queue = [m for m in self.queue if (m[0], m[1]) not in self.cut]
        return [f"dropped {before - len(self.queue)}"] if before > len(self.queue) else []

    def cmd_heal(self, args: list[str]) -> list[str]:
        self.cut.clear()
        return []

    def cmd_print_queues(self, args: list[str]) -> list[str]:
        out = []
        for name, node in self.nodes.items():
            if node is None:
                out.append(f"{name}: down")
                continue
            synced = " ".join(t.txid for t in node.synchronised) or "-"
            incoming = " ".join(f"{i.tx.txid}@{i.tx.timestamp}{'' if i.acquired else '?'}"
                                for i in node.incoming) or "-"
            split = (" split-suspected=" + ",".join(sorted(node.split_suspected))
                     if node.split_suspected else "")
            if node.split_point is not None:
                split += f" split-point={node.split_point}"
            out.append(f"{name} {node.mode.value} {node.activity.value}{split}: "
                       f"synced [{synced}] incoming [{incoming}]")
        return out

    # -- plumbing --

    def node(self, name: str) -> SyncNode:
        node = self.nodes[name]
        assert node is not None, f"{name} is down"
        return node

    @staticmethod
    def ids(items) -> str:
        return " ".join(getattr(i, "tx", i).txid for i in items) or "-"

    def handle(self, name: str, ready: Ready) -> list[str]:
        """The driver: persist, then act; render what happened."""
        node = self.node(name)
        self.durable[name] = node.persistent_state()  # the harness persists everything
        out = []
        if ready.truncated is not None:
            out.append(f"{name}: truncate after {ready.truncated.after_seq}: "
                       f"{self.ids(ready.truncated.entries)}")
        if ready.acknowledge:
            out.append(f"{name}: acknowledge {' '.join(ready.acknowledge)}")
        if ready.synchronised:
            out.append(f"{name}: synchronised {self.ids(ready.synchronised)}")
        groups: dict[int, tuple[Status, list[str]]] = {}
        for post in ready.posts:
            groups.setdefault(id(post.status), (post.status, []))[1].append(post.to)
            if (name, post.to) not in self.cut:
                self.queue.append((name, post.to, post.status))
        for status, to in groups.values():
            queue = " ".join(f"{t.txid}@{t.timestamp}" for t in status.queue)
            out.append(f"{name}: post to {','.join(to)}: base={status.merge_base}/{status.seq} "
                       f"counter={status.counter} [{queue}]")
        for tail in ready.tails:
            seg = tail.segment
            split = ("" if seg.split_point is None else f" (split point {seg.split_point}, "
                     f"excluded {','.join(seg.excluded) or 'none'})")
            out.append(f"{name}: tail to {tail.to} after {seg.after}/{seg.after_seq}: "
                       f"{self.ids(seg.entries)}{split}")
            if (name, tail.to) not in self.cut:
                self.queue.append((name, tail.to, seg))
        for acq in ready.acquire:
            holders = [s for s in acq.sources if acq.tx.txid in self.payloads.get(s, ())
                       and (s, name) not in self.cut]
            out.append(f"{name}: acquire {acq.tx.txid} from {','.join(acq.sources)}")
            if holders and (holders[0], name, acq.tx.txid) not in self.queue:
                self.queue.append((holders[0], name, acq.tx.txid))
        if ready.activity is not None:
            out.append(f"{name}: now {ready.activity.value}")
        if ready.split_suspected is not None:
            out.append(f"{name}: split suspected: "
                       f"{','.join(sorted(ready.split_suspected)) or 'none'}")
        if ready.split_point_changed:
            point = "none" if ready.split_point is None else ready.split_point
            out.append(f"{name}: split point {point}")
        for inc in ready.inconsistencies:
            out.append(f"{name}: inconsistency with {inc.peer} ({inc.kind}): {inc.detail}")
        return out

    def run(self, line: str) -> list[str]:
        command, *args = line.split()
        return getattr(self, "cmd_" + command.replace("-", "_"))(args)


def _scenario_files() -> list[Path]:
    return sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_scenario(path: Path):
    rewrite = bool(os.environ.get("SYNC_REWRITE"))
    lines = path.read_text().splitlines()
    scenario, out, i, mismatches = Scenario(), [], 0, []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            out.append(line)
            i += 1
            continue
        assert i + 1 < len(lines) and lines[i + 1] == "----", f"{path.name}:{i + 1}: no ----"
        expected = []
        j = i + 2
        while j < len(lines) and lines[j] != "":
            expected.append(lines[j])
            j += 1
        actual = scenario.run(line)
        if actual != expected:
            mismatches.append(f"{path.name}:{i + 1}: {line}\n--- expected\n"
                              + "\n".join(expected) + "\n--- actual\n" + "\n".join(actual))
        out += [line, "----", *actual, ""]
        i = j + 1 if j < len(lines) else j
    if rewrite:
        path.write_text(re.sub(r"\n{3,}", "\n\n", "\n".join(out).rstrip("\n") + "\n"))
    elif mismatches:
        pytest.fail("\n\n".join(mismatches))


def test_tail_segments_carry_the_senders_split_on_the_wire():
    from master_service.sync.wire import tail_from_json, tail_to_json

    seg = TailSegment("n1", 0, None, (tx("A", 1), tx("B", 2)), "", 1, ("n3",))
    assert tail_from_json(tail_to_json(seg)) == seg
    plain = TailSegment("n1", 0, None, (tx("A", 1),))
    assert "split_point" not in tail_to_json(plain)  # an old receiver sees what it knows
    assert tail_from_json(tail_to_json(plain)) == plain  # and an old sender parses
    with pytest.raises(InvalidMessage, match="excluded"):
        tail_from_json({**tail_to_json(seg), "excluded": "n3"})
    with pytest.raises(InvalidMessage, match="split_point"):
        tail_from_json({**tail_to_json(seg), "split_point": "1"})


def test_payload_views_answer_for_one_transaction():
    node = SyncNode("n1", now=0, peers=["n2"], timing=TIMING)
    node.submit("A", size=1, digest="d", now=1)
    node.receive(Status("n2", Mode.READ_WRITE, None, 0, 5, (tx("B", 5, "n2"),)), now=2)
    assert node.holds_payload("A") and not node.wants_payload("A")
    assert node.wants_payload("B") and not node.holds_payload("B")
    assert not node.wants_payload("C") and not node.holds_payload("C")
    assert node.transaction("B") == tx("B", 5, "n2") and node.transaction("C") is None
    node.acquired("B", now=3)
    assert node.holds_payload("B") and not node.wants_payload("B")


# ---------------------------------------------------------------- what the driver carries

CARRY = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=5_000, max_tail=4,
               fetch_hedge=500)


def test_a_payload_ask_is_hedged_and_a_failed_one_passes_to_the_next_source():
    node = SyncNode("n1", now=0, peers=["n2", "n3"],
                    timing=replace(CARRY, acquire_retry=300))
    r = node.receive(Status("n2", Mode.READ_WRITE, None, 0, 5, (tx("B", 5, "n2"),)), now=10)
    assert [(f.tx.txid, f.source) for f in r.fetches] == [("B", "n2")]
    assert r.next_fetch_at is None  # nobody else to ask
    r = node.receive(Status("n3", Mode.READ_WRITE, None, 0, 6, (tx("B", 5, "n2"),)), now=20)
    assert r.fetches == () and r.next_fetch_at is None
    # the retried Acquire names n3 too: asked if n2 has not answered 500 after its ask
    r = node.tick(310)
    assert [a.sources for a in r.acquire] == [("n2", "n3")]
    assert r.fetches == () and r.next_fetch_at == 510
    assert node.tick(400).fetches == ()
    assert [f.source for f in node.tick(510).fetches] == ["n3"]
    assert node.fetch_failed("B", "n3", now=520).fetches == ()  # n2 may still answer
    r = node.fetch_failed("B", "n2", now=530)  # every source failed: the plan ends ...
    assert r.fetches == () and r.next_fetch_at is None
    r = node.tick(700)  # ... and the acquire retry asks again, from the first source
    assert [f.source for f in r.fetches] == ["n2"]
    r = node.fetch_failed("B", "n2", now=710)  # a failure asks the next one at once
    assert [f.source for f in r.fetches] == ["n3"]
    r = node.acquired("B", now=720)
    assert r.fetches == () and r.next_fetch_at is None and not node.wants_payload("B")


def test_a_payload_pushed_with_its_status_is_not_asked_for():
    node = SyncNode("n1", now=0, peers=["n2"], timing=CARRY)
    r = node.receive(Status("n2", Mode.READ_WRITE, None, 0, 5, (tx("B", 5, "n2"),)), now=10,
                     pushed=["B"])
    assert [a.tx.txid for a in r.acquire] == ["B"] and r.fetches == ()


def test_a_peers_fingerprint_is_compared_and_a_divergence_reported_once():
    node = SyncNode("n1", now=0, peers=["n2"], timing=CARRY)
    st = Status("n2", Mode.READ_WRITE, None, 0, 1, ())
    r = node.receive(st, now=1, executed=ExecutedAt(0, "AA", "aa"))
    assert r.inconsistencies == () and node.fingerprint_matches == {"n2": True}
    r = node.receive(st, now=2, executed=ExecutedAt(0, "bb", "aa"))
    assert [(i.peer, i.kind) for i in r.inconsistencies] == [("n2", "fingerprint")]
    assert "fingerprint is bb, ours is aa" in r.inconsistencies[0].detail
    assert node.receive(st, now=3, executed=ExecutedAt(0, "bb", "aa")).inconsistencies == ()
    r = node.receive(st, now=4, executed=ExecutedAt(7, "cc", None))  # not executed here
    assert r.inconsistencies == () and node.fingerprint_matches == {"n2": False}
    r = node.receive(st, now=5, executed=ExecutedAt(0, "aa", "aa"))
    assert r.fingerprint_agrees == (("n2", 0),) and node.fingerprint_matches == {"n2": True}


def test_own_payloads_are_pushed_once_and_silent_peers_get_relayed_statuses():
    node = SyncNode("n1", now=0, peers=["n2", "n3"], timing=CARRY)
    r = node.submit("A", size=100, digest="d", now=1)
    assert {p.to: p.push for p in r.posts} == {"n2": ("A",), "n3": ("A",)}
    assert {p.silent for p in r.posts} == {("n2", "n3")}  # heard from nobody yet
    st3 = Status("n3", Mode.READ_WRITE, None, 0, 5, (tx("C", 5, "n3"),))
    node.receive(st3, now=10, silent=[])
    node.acquired("C", now=11)
    node.receive(Status("n2", Mode.READ_WRITE, None, 0, 6, ()), now=12, silent=["n3"])
    posts = {p.to: p for p in node.tick(200).posts}
    assert posts["n2"].push == () and posts["n3"].push == ()  # pushed once
    assert posts["n2"].relayed == (Relayed(st3, ("C",)),) and posts["n3"].relayed == ()
    assert posts["n2"].silent == ()
    # a relayed status is taken only with the mode its sender posts itself
    muted = Status("n3", Mode.MUTED, None, 0, 7, ())
    assert node.receive(muted, now=13, relayed_by="n2").inconsistencies == ()
    assert node.peers["n3"] is Mode.READ_WRITE
