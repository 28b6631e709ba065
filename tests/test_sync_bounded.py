"""Bounded agreed state (issue 16, item 1): peering that runs for months.

The agreed queue of a peered master forgets what every data centre executed, or what is
past the LogMaxSize / LogMaxDepth horizon (protocol.py, "Compaction"), in memory and in
SQLite; a restarted master resumes from its floor; a peer behind everybody's floor is
reported as needing seeding, and not waited for. Real processes: the soak benchmark
(bench/bench_peering_soak.py) and test_peered_masters_keep_a_bounded_agreed_queue below.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from master_service.sync import (
    Activity,
    InvalidMessage,
    Mode,
    PersistentState,
    Ready,
    Retention,
    SplitRecovery,
    Status,
    SyncNode,
    Timing,
    TxMeta,
    chain_hash,
)
from master_service.sync.sqlite_storage import SqliteStorage
from master_service.sync.wire import (
    canonical_payload,
    payload_digest,
    status_from_json,
    status_to_json,
)
from master_service.txlog import TxLog
from tests.sync_sim import SimConfig, Simulation

TIMING = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=500, max_tail=4)
FAST = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- a tiny lossless network


class Net:
    """Delivers every post, tail and payload fetch at once, in order (no faults): the
    simulator (tests/sync_sim.py) does the faulty version."""

    def __init__(self, nodes: dict[str, SyncNode], now: int = 1_000) -> None:
        self.nodes = nodes
        self.now = now
        self.down: set[str] = set()
        self.cut: set[tuple[str, str]] = set()  # (sender, receiver) pairs that lose messages
        self.queue: list[tuple[str, Ready]] = []
        self.payloads: dict[str, set[str]] = {n: set() for n in nodes}
        self.reports: list[tuple[str, object]] = []
        self.compacted: dict[str, int] = {}

    def take(self, name: str, ready: Ready) -> Ready:
        self.queue.append((name, ready))
        return ready

    def pump(self, limit: int = 10_000) -> None:
        while self.queue and limit:
            limit -= 1
            name, ready = self.queue.pop(0)
            self.reports.extend((name, i) for i in ready.inconsistencies)
            if ready.compacted is not None:
                self.compacted[name] = ready.compacted.floor
            for p in ready.posts:
                if self.reaches(name, p.to):
                    self.take(p.to, self.nodes[p.to].receive(p.status, self.now))
            for t in ready.tails:
                if self.reaches(name, t.to):
                    self.take(t.to, self.nodes[t.to].receive(t.segment, self.now))
            for a in ready.acquire:
                src = next((s for s in a.sources if self.reaches(s, name)
                            and a.tx.txid in self.payloads[s]), None)
                if src is not None and name not in self.down:
                    self.payloads[name].add(a.tx.txid)
                    self.take(name, self.nodes[name].acquired(a.tx.txid, self.now))

    def reaches(self, src: str, dst: str) -> bool:
        return src not in self.down and dst not in self.down and (src, dst) not in self.cut

    def partition(self, *sides: tuple[str, ...]) -> None:
        self.cut = {(a, b) for x in sides for y in sides if x is not y for a in x for b in y}

    def submit(self, name: str, txid: str) -> None:
        self.payloads[name].add(txid)
        self.take(name, self.nodes[name].submit(txid, size=1, digest="d", now=self.now))

    def rounds(self, n: int = 3, step: int = 1_000) -> None:
        for _ in range(n):
            self.now += step
            for name, node in self.nodes.items():
                if name not in self.down:
                    self.take(name, node.tick(self.now))
            self.pump()

    def execute(self, *names: str, pos: int | None = None) -> None:
        """Each node named, in turn, reports it executed up to ``pos`` (default: all it
        agreed), and what that sends is delivered."""
        for name in names:
            node = self.nodes[name]
            self.take(name, node.executed(node.seq if pos is None else pos, self.now))
            self.pump()


def cluster(names=("n1", "n2", "n3"), **kwargs) -> dict[str, SyncNode]:
    return {n: SyncNode(n, now=1_000, peers=[p for p in names if p != n], timing=TIMING,
                        retention=Retention(), **kwargs) for n in names}


# ---------------------------------------------------------------- messages


def test_a_status_carries_executed_and_floor_and_they_are_checked():
    st = Status("n1", Mode.READ_WRITE, "A", 3, 9, (), "c", None, "", 2, 1)
    assert status_from_json(status_to_json(st)) == st
    old = status_to_json(Status("n1", Mode.READ_WRITE, "A", 3, 9, (), "c"))
    assert "executed" not in old and status_from_json(old).floor == 0  # older senders
    for executed, floor in ((4, 0), (1, 2), (-1, 0), (True, 0)):
        with pytest.raises(InvalidMessage):
            Status("n1", Mode.READ_WRITE, "A", 3, 9, (), "c", None, "", executed, floor)


def test_a_status_carries_what_its_sender_heard_and_it_is_checked():
    st = Status("n1", Mode.READ_WRITE, "A", 3, 9, (), "c", heard=(("n2", 7), ("n3", 8)))
    body = status_to_json(st)
    assert body["heard"] == {"n2": 7, "n3": 8} and status_from_json(body) == st
    assert "heard" not in status_to_json(replace(st, heard=()))  # nothing heard yet
    for heard in ((("n3", 8), ("n2", 7)), (("n2", 7), ("n2", 8)), (("n2", -1),),
                  (("", 7),), (("n2", "7"),), ("n2",)):
        with pytest.raises(InvalidMessage):
            replace(st, heard=heard)
    with pytest.raises(InvalidMessage, match="'heard' must be a JSON object"):
        status_from_json({**body, "heard": [["n2", 7]]})
    with pytest.raises(InvalidMessage, match="heard counter of n2"):
        status_from_json({**body, "heard": {"n2": 2**62}})


# ---------------------------------------------------------------- the core


def test_what_every_node_executed_is_forgotten_and_a_restart_resumes_from_the_floor():
    nodes = cluster()
    net = Net(nodes)
    net.rounds(1)
    for i in range(6):
        net.submit(f"n{1 + i % 3}", f"T{i}")
    net.rounds(3)
    assert {n.seq for n in nodes.values()} == {6}
    net.execute("n1", "n2")
    net.rounds(2)
    assert all(n.floor == 0 for n in nodes.values()), "n3 has executed nothing yet"
    net.execute("n3", pos=4)
    net.rounds(2)
    assert {n.floor for n in nodes.values()} == {4}
    assert [len(n.synchronised) for n in nodes.values()] == [2, 2, 2]
    net.execute("n3")
    net.rounds(2)
    assert {n.floor for n in nodes.values()} == {6}
    assert all(n.synchronised == () and n.merge_base == "T5" for n in nodes.values())
    # a restart from the persisted state (nothing held but the floor) rejoins
    state = nodes["n2"].persistent_state()
    assert (state.floor, state.floor_txid, state.synchronised) == (6, "T5", ())
    nodes["n2"] = SyncNode.restore("n2", state, now=net.now, peers=["n1", "n3"],
                                   timing=TIMING, executed=6)
    net.rounds(1)
    net.submit("n2", "U1")
    net.submit("n3", "U2")
    net.rounds(3)
    assert {n.seq for n in nodes.values()} == {8}
    assert all(n.synchronised[-1].txid == "U2" for n in nodes.values())
    net.rounds(2)
    assert all(n.activity is Activity.IDLE for n in nodes.values())  # idle rounds resume


def test_a_node_restarted_before_its_peers_posted_forgets_nothing_on_their_account():
    nodes = cluster(("n1", "n2"))
    net = Net(nodes)
    net.rounds(1)
    net.submit("n1", "A")
    net.rounds(3)
    net.execute("n1")
    state = nodes["n1"].persistent_state()
    node = SyncNode.restore("n1", state, now=net.now, peers=["n2"], timing=TIMING,
                            executed=1)
    assert node.tick(net.now).compacted is None  # n2's executed position is not known


def _n3_gone() -> tuple[dict[str, SyncNode], Net]:
    """Three nodes with LogMaxSize 2 and a max peer lag of 2 s, after a first round; n3
    is then down."""
    timing = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=500, max_tail=4,
                    max_peer_lag=2_000)
    names = ("n1", "n2", "n3")
    nodes = {n: SyncNode(n, now=1_000, peers=[p for p in names if p != n], timing=timing,
                         retention=Retention(max_entries=2)) for n in names}
    net = Net(nodes)
    net.rounds(1)
    net.down.add("n3")
    return nodes, net


def test_a_peer_behind_the_horizon_is_reported_needs_seeding_and_is_not_waited_for():
    nodes, net = _n3_gone()
    net.submit("n1", "A")
    net.rounds(5)  # n1 and n2 go on without n3 after max-peer-lag
    for i in range(5):
        net.submit("n2", f"B{i}")
        net.rounds(2)
    assert nodes["n1"].seq == nodes["n2"].seq == 6
    net.execute("n1", "n2")
    assert nodes["n1"].floor == nodes["n2"].floor == 4  # LogMaxSize 2: n3 did not execute
    net.down.discard("n3")
    net.rounds(2)
    kinds = {(name, i.peer, i.kind) for name, i in net.reports}
    assert ("n1", "n3", "beyond-horizon") in kinds and ("n2", "n3", "beyond-horizon") in kinds
    assert nodes["n1"].beyond_horizon == {"n3"}
    assert nodes["n3"].needs_seeding and nodes["n3"].seq == 0
    net.submit("n3", "C")  # n3's clients still write; it is not agreed before seeding
    net.submit("n1", "D")
    net.rounds(3)
    assert nodes["n1"].seq == nodes["n2"].seq == 7  # not waiting for n3
    assert "C" not in {t.txid for t in nodes["n1"].synchronised}


def test_a_node_that_takes_entries_agreed_without_a_silent_peer_goes_on_without_it():
    """n3 is gone for good. n2 has writes, stalls and goes on without n3 after max peer
    lag; n1 has none of its own at that moment, so never stalls: it takes n2's entries
    (agreed without n3; split recovery NONE takes them all) while it still waits for n3.
    Silent for max peer lag from n1 too, n3 is excluded by n1 as well, so n1's horizon
    passes n3's position (a real cluster's wiped data centre held a floor at 0 for good:
    tests/test_seeding.py)."""
    nodes, net = _n3_gone()
    net.cut.add(("n2", "n1"))  # n1 hears of A only once n2 has agreed it
    net.submit("n2", "A")
    net.rounds(4)  # n2 stalls and goes on without n3
    assert nodes["n2"].split_suspected == {"n3"} and nodes["n1"].seq == 0
    net.cut.clear()
    net.rounds(1)  # n1 takes A: progress, no stall; n3 silent for 4 s
    assert nodes["n1"].seq == 1 and nodes["n1"].split_suspected == {"n3"}
    for i in range(20):  # each write agreed within 200 ms: n1 never stalls for 2 s
        net.submit("n1" if i % 2 else "n2", f"B{i}")
        net.rounds(2, step=100)
    net.execute("n1", "n2")
    net.rounds(2, step=100)
    assert nodes["n1"].seq == nodes["n2"].seq == 21
    assert nodes["n1"].floor == nodes["n2"].floor == 19  # LogMaxSize 2, past n3's 0


def _agreed(names):
    txs = tuple(TxMeta(t, i + 1, "n1", 10, f"sha:{t}") for i, t in enumerate(names))
    chains, chain = [], ""
    for t in txs:
        chain = chain_hash(chain, t.txid)
        chains.append(chain)
    return txs, chains


def test_the_horizon_never_passes_a_peer_still_waited_for():
    """LogMaxSize 2 at position 6 would forget up to 4; n3, waited for, is at 3 (it may be
    adding with our earlier statuses right now): we forget up to 3 only, and it is not
    beyond our horizon (simulator seed 3375373473)."""
    txs, chains = _agreed("ABCDEF")
    node = SyncNode.restore("n1", PersistentState(txs, (), 6), now=1_000, peers=["n2", "n3"],
                            timing=TIMING, retention=Retention(max_entries=2), executed=6)
    node.receive(Status("n3", Mode.READ_WRITE, "C", 3, 1_000, (), chains[2], None, "", 3),
                 now=1_001)
    node.receive(Status("n2", Mode.READ_WRITE, "F", 6, 1_000, (), chains[5], None, "", 6),
                 now=1_002)
    node.tick(1_003)
    assert node.floor == 3 and node.beyond_horizon == frozenset()


def _seeded_at_4(counter: int) -> tuple[SyncNode, list[str]]:
    """n1 (peers n2 and n3) restored from a seeding at 4 of the agreed A..F, executed up
    to 6, with ``counter`` persisted; and the hash chains of A..F."""
    txs, chains = _agreed("ABCDEF")
    seeded = PersistentState(txs[4:], (), counter, floor=4, floor_txid="D",
                             floor_chain=chains[3])
    return SyncNode.restore("n1", seeded, now=1_000, peers=["n2", "n3"], timing=TIMING,
                            retention=Retention(), executed=6), chains


def test_a_peer_behind_our_floor_that_another_can_serve_is_still_waited_for():
    """Seeded at 4, we see n3 at 3: behind our floor, but n2 still holds what follows 3,
    so n3 catches up through n2's tail segments. Not waiting for it, we would ADD
    without its counter while it adds with n2 (simulator seed 3375373473)."""
    node, chains = _seeded_at_4(counter=6)
    node.tick(1_000)
    n3 = Status("n3", Mode.READ_WRITE, "C", 3, 1_000, (), chains[2], None, "", 3,
                heard=(("n1", 1_000),))  # it heard our status (carrying our floor)
    ready = node.receive(n3, now=1_001)  # n2 not heard from yet: n3 is beyond, as before
    assert [i.kind for i in ready.inconsistencies] == ["beyond-horizon"]
    assert node.beyond_horizon == {"n3"}
    n2 = Status("n2", Mode.READ_WRITE, "F", 6, 1_005, (), chains[5], None, "", 6, 2)
    node.receive(n2, now=1_005)
    node.receive(replace(n3, counter=1_006), now=1_006)  # n2 can serve it: waited for again
    assert node.beyond_horizon == frozenset()
    g = node.submit("G", size=1, digest="sha:G", now=1_010).incoming[0].tx
    n2 = replace(n2, counter=1_020, queue=(g,))
    node.receive(n2, now=1_020, pushed=["G"])
    for t in range(1_040, 1_400, 50):
        node.receive(replace(n2, counter=t), now=t)
        assert not node.tick(t).synchronised and node.seq == 6  # not without n3


def test_a_split_peer_does_not_serve_a_peer_behind_our_floor():
    """As above, but n2 is split at 5: it gives what follows its split point to its own
    side only, and n3 (not split) would not take it; n3 can't catch up through n2, so it
    is beyond our horizon (the simulator: seed 2370230567, nobody converged)."""
    node, chains = _seeded_at_4(counter=6)
    node.tick(1_000)
    n2 = Status("n2", Mode.READ_WRITE, "F", 6, 1_005, (), chains[5], 5, chains[4], 6, 2)
    node.receive(n2, now=1_005)
    n3 = Status("n3", Mode.READ_WRITE, "C", 3, 1_006, (), chains[2], None, "", 3,
                heard=(("n1", 1_000),))
    ready = node.receive(n3, now=1_006)
    assert [i.kind for i in ready.inconsistencies] == ["beyond-horizon"]
    assert node.beyond_horizon == {"n3"}
    node.receive(replace(n2, counter=1_007, split_point=None, split_chain=""), now=1_007)
    node.receive(replace(n3, counter=1_008), now=1_008)  # n2 can serve it now
    assert node.beyond_horizon == frozenset()


def test_a_status_behind_our_floor_counts_once_its_sender_heard_our_floor():
    """Seeded at 4, we get statuses of n3 at 3 that acknowledge none of ours since (none,
    or one from before the seeding: the persisted counter 900): each may have been
    posted before n3 caught up (the simulator: seed 391061907), so n3 is waited for and
    G is not agreed without it. Once n3 posts at 3 having heard our status, it is
    behind our horizon (n2 forgot up to 6: nobody serves it) and we go on without it."""
    node, chains = _seeded_at_4(counter=900)
    ours = node.tick(1_000).posts[0].status
    assert ours.counter == 1_000 and ours.floor == 4
    n3 = Status("n3", Mode.READ_WRITE, "C", 3, 950, (), chains[2], None, "", 3)
    for counter, heard in ((950, ()), (960, (("n1", 900),)), (970, (("n2", 1_000),))):
        ready = node.receive(replace(n3, counter=counter, heard=heard), now=1_001)
        assert not ready.inconsistencies and node.beyond_horizon == frozenset()
    g = node.submit("G", size=1, digest="sha:G", now=1_010).incoming[0].tx
    n2 = Status("n2", Mode.READ_WRITE, "F", 6, 1_020, (g,), chains[5], None, "", 6, 6)
    node.receive(n2, now=1_020, pushed=["G"])
    for t in range(1_040, 1_400, 50):
        node.receive(replace(n2, counter=t), now=t)
        assert not node.tick(t).synchronised and node.seq == 6  # not without n3
    ready = node.receive(replace(n3, counter=1_400, heard=(("n1", ours.counter),)), now=1_400)
    assert [i.kind for i in ready.inconsistencies] == ["beyond-horizon"]
    assert node.beyond_horizon == {"n3"}
    agreed = []
    for t in range(1_410, 1_600, 50):
        agreed += node.receive(replace(n2, counter=t), now=t).synchronised
        agreed += node.tick(t).synchronised
    assert [tx.txid for tx in agreed] == ["G"] and node.seq == 7


def test_a_donor_keeps_what_follows_a_seed_point_until_the_seeded_node_posts():
    """Seeding (master_service/sync/seeding.py): n3 is seeded from n1's image of position
    4 while n1 and n2 go on and forget what both executed. n1 keeps what follows 4 for
    n3 (n2 does not: it was not asked), so once n3 is restored from the seed point and
    added, it catches up from n1 by replay; then every node forgets up to the end."""
    nodes = cluster(names=("n1", "n2"))
    net = Net(nodes)
    net.rounds(1)
    for i in range(4):
        net.submit("n1", f"T{i}")
    net.rounds(3)
    net.execute("n1", "n2")
    net.rounds(2)
    assert {n.floor for n in nodes.values()} == {4}
    txid, chain, newest = nodes["n1"].seed_point(4)
    assert txid == "T3" and nodes["n1"].seed_point(3) is None  # before the floor
    net.take("n1", nodes["n1"].hold_for_seeding("n3", 4, until=net.now + 60_000,
                                                now=net.now))
    for i in range(4, 8):
        net.submit("n2", f"T{i}")
    net.rounds(3)
    net.execute("n1", "n2")
    net.rounds(2)
    assert (nodes["n1"].floor, nodes["n2"].floor) == (4, 8)
    state = PersistentState(counter=newest, floor=4, floor_txid=txid, floor_chain=chain,
                            floor_newest=newest)
    nodes["n3"] = SyncNode.restore("n3", state, now=net.now, peers=["n1", "n2"],
                                   timing=TIMING, retention=Retention(), executed=4)
    net.payloads["n3"] = set()
    for name in ("n1", "n2"):
        net.take(name, nodes[name].add_peer("n3", now=net.now))
    net.rounds(4)
    assert nodes["n3"].seq == 8 and not nodes["n3"].needs_seeding
    assert [t.txid for t in nodes["n3"].synchronised] == [f"T{i}" for i in range(4, 8)]
    net.execute("n3")
    net.rounds(3)
    assert {n.floor for n in nodes.values()} == {8}


def test_a_seed_hold_expires():
    nodes = cluster(names=("n1", "n2"))
    net = Net(nodes)
    net.rounds(1)
    net.take("n1", nodes["n1"].hold_for_seeding("n3", 0, until=net.now + 5_000, now=net.now))
    for i in range(3):
        net.submit("n1", f"T{i}")
    net.rounds(3)
    net.execute("n1", "n2")
    net.rounds(1)
    assert nodes["n1"].floor == 0 and nodes["n2"].floor == 3
    net.rounds(6)  # past the lease: nobody is coming
    assert nodes["n1"].floor == 3


def test_a_late_status_from_before_the_floor_is_not_a_peer_behind_the_horizon():
    nodes = cluster(("n1", "n2"))
    net = Net(nodes)
    net.rounds(1)
    old = Status("n2", Mode.READ_WRITE, None, 0, net.now, ())  # posted before A existed
    net.submit("n1", "A")
    net.rounds(3)
    net.execute("n1", "n2")
    net.rounds(2)
    assert nodes["n1"].floor == 1
    ready = nodes["n1"].receive(old, net.now)  # seq 0 with an older counter: delayed
    assert not ready.inconsistencies and nodes["n1"].beyond_horizon == frozenset()


@pytest.mark.parametrize("ahead", ["us1", "uk1"])
def test_without_split_recovery_the_side_that_forgot_its_split_still_reports_it(ahead):
    """SplitRecovery None: every side of a split reports the divergence after the heal.
    The side behind takes the other side's status as ahead of it (unverified), whose
    executed position passes its whole queue, so it forgets every entry; the diverged
    tail it then gets ends exactly at its floor and must still be compared there
    (tests/test_partitions.py::TestNoRecovery failed 2 runs in 3 without it)."""
    timing = Timing(round_timeout=100, idle_interval=1_000, acquire_retry=500, max_tail=4,
                    max_peer_lag=2_000)
    uk, us = ("uk1", "uk2"), ("us1",)
    names = uk + us
    nodes = {n: SyncNode(n, now=1_000, peers=[p for p in names if p != n], timing=timing,
                         retention=Retention(), split_recovery=SplitRecovery.NONE)
             for n in names}
    net = Net(nodes)
    net.rounds(1)
    net.submit("uk1", "A")
    net.rounds(3)
    net.partition(uk, us)
    behind = "uk1" if ahead == "us1" else "us1"
    for i in range(6):  # both sides go on after max-peer-lag; `ahead` writes twice as much
        net.submit(behind, f"B{i}")
        net.submit(ahead, f"C{i}")
        net.submit(ahead, f"D{i}")
        net.rounds(2)
    net.execute(*names)
    assert nodes["uk1"].seq == nodes["uk2"].seq != nodes["us1"].seq
    net.partition()
    net.rounds(4)
    net.execute(*names)
    net.rounds(4)
    behind_side = uk if behind == "uk1" else us
    assert all(nodes[n].floor == nodes[n].seq for n in behind_side), "it forgot everything"
    reported = {(name, i.peer) for name, i in net.reports
                if i.kind in ("diverged", "tail-diverged")}
    for n in names:
        other = us if n in uk else uk
        assert {(n, p) for p in other} <= reported, f"{n} did not report: {reported}"


def test_execution_reports_after_a_truncation_are_capped_until_the_rollback():
    node = SyncNode("n1", now=1_000, peers=["n2"], timing=TIMING)
    node._executed, node._executed_cap = 0, 3  # as _truncate leaves it
    node.executed(9, 2_000)
    assert node._executed == 3
    node.rolled_back(2, 2_001)
    node.executed(5, 2_002)
    assert node._executed == 5


# ---------------------------------------------------------------- the simulator


@settings(FAST, max_examples=150)
@given(seed=st.integers(0, 2**32 - 1), rate=st.floats(0.0, 1.0))
def test_simulated_masters_forget_what_all_executed_and_restarts_rejoin(seed, rate):
    """Every run models execution and compaction (payloads leave with the entries);
    crashes restart nodes from their floor. Checked after every step by the simulator:
    nothing is forgotten that a node still needs (no node is ever stranded without a
    horizon), the usual invariants, convergence; then, 3 s after converging, that every
    node forgot everything (all executed it everywhere)."""
    sim = Simulation(SimConfig.derive(seed, 3, rate, crashes=random.Random(seed).randint(0, 4),
                                      settle=3_000))
    result = sim.run()
    if result.converged_at is not None:
        sim.check_bounded()  # all executed everywhere: all forgotten everywhere


@settings(FAST, max_examples=150)
@given(seed=st.integers(0, 2**32 - 1), rate=st.floats(0.0, 1.0),
       lag=st.sampled_from([None, 400]), size=st.sampled_from([2, 3, 8]))
def test_simulated_laggers_behind_a_small_horizon_are_seeded_and_converge(
        seed, rate, lag, size):
    """LogMaxSize 2-8 with crashes: laggers fall behind every peer's floor, report that
    they need seeding, are seeded from a peer's image (the simulator's model of it) and
    go on peering from its position; with max-peer-lag a split may diverge (None)."""
    sim = Simulation(SimConfig.derive(seed, 3, rate, retention=Retention(max_entries=size),
                                      max_peer_lag=lag, crashes=3))
    sim.run()


# ---------------------------------------------------------------- SQLite


def _agreed_and_executed(ag: SqliteStorage, log: TxLog, n: int) -> list[TxMeta]:
    ops = [[{"type": "update", "update": f"INSERT DATA {{ <urn:a> <urn:p> {i} }}"}]
           for i in range(n)]
    metas = [TxMeta(f"t{i}", 1_000 + i, "m2", len(canonical_payload(o)),
                    payload_digest(canonical_payload(o))) for i, o in enumerate(ops)]
    ag.persist(counter=2_000, incoming=[], synchronised=metas,
               payloads=list(zip(metas, ops, strict=True)))
    fps = [f"{i + 1:032x}" for i in range(n)]
    ag.record_executed([(i + 1, m.txid, fps[i], i + 1) for i, m in enumerate(metas)],
                       [(i + 1, m.txid, {}, fps[i], i + 1, 0.0)
                        for i, m in enumerate(metas)], [], 1_000.0)
    return metas


def test_pruning_the_log_keeps_the_payloads_the_agreed_queue_holds(tmp_path):
    """The issue's check: 5 agreed and executed, prune(2), then load() listed 3 missing
    payloads and the restarted master asked its peers for them for ever."""
    with TxLog.open(tmp_path / "txlog.db") as log:
        ag = SqliteStorage(log)
        ag.enable()
        _agreed_and_executed(ag, log, 5)
        assert log.prune(2, 168, 1_000.0) == 3
        state, missing = ag.load()
        assert missing == [] and len(state.synchronised) == 5


def test_a_compaction_leaves_sqlite_and_a_reload_resumes_from_the_floor(tmp_path):
    from master_service.sync import Compaction, chain_hash
    with TxLog.open(tmp_path / "txlog.db") as log:
        ag = SqliteStorage(log)
        ag.enable()
        metas = _agreed_and_executed(ag, log, 5)
        chain = ""
        for m in metas[:3]:
            chain = chain_hash(chain, m.txid)
        ag.persist(counter=None, incoming=[], synchronised=[],
                   compacted=Compaction(3, "t2", chain, 1_002))
        state, missing = ag.load()
        assert (state.floor, state.floor_txid, state.floor_chain, state.floor_newest) == \
            (3, "t2", chain, 1_002)
        assert [t.txid for t in state.synchronised] == ["t3", "t4"] and missing == []
        assert ag.agreed_count() == 2
        assert ag.payload("t1") is None and ag.payload("t3") is not None
        assert ag.state_at(3) == (3, f"{3:032x}") and ag.state_at(2) is None
        assert ag.executed() == (5, f"{5:032x}")
        ag.persist(counter=None, incoming=[], synchronised=[],
                   compacted=Compaction(5, "t4", chain_hash(chain_hash(chain, "t3"), "t4"),
                                        1_004))
        assert ag.executed() == (5, f"{5:032x}")  # from the floor, every row gone
        assert ag.agreed_count() == 0
        node = SyncNode.restore("m1", ag.load()[0], now=5_000, peers=["m2"], executed=5)
        assert (node.seq, node.merge_base, node.floor) == (5, "t4", 5)
        more = TxMeta("t5", 1_005, "m2", 3, "d")
        ag.persist(counter=None, incoming=[], synchronised=[more], payloads=[(more, [])])
        assert [a.pos for a in ag.to_execute(5, 10)] == [6]  # after the floor


def test_a_seed_point_names_the_ids_it_holds_and_a_late_write_survives_the_seeding(
        tmp_path):
    """The donor keeps the ids of what it forgot after Compaction.ids_after and a seed
    point carries them; the seeded log drops exactly those of its incoming queue and
    keeps a write that sorts before the point but was never agreed (a write of a master
    beyond the horizon: the timestamp rule alone dropped it, acknowledged and lost — the
    simulator found it). It keeps the ids too: a lagger behind it may seed from it."""
    from master_service.sync import Compaction, Incoming, SeedPoint, chain_hash
    from master_service.txlog.log import State

    with TxLog.open(tmp_path / "donor.db") as dlog, TxLog.open(tmp_path / "rec.db") as rlog:
        donor = SqliteStorage(dlog)
        donor.enable()
        metas = _agreed_and_executed(donor, dlog, 5)  # t0..t4, timestamps 1000..1004
        chains = [""]
        for m in metas:
            chains.append(chain_hash(chains[-1], m.txid))
        donor.persist(counter=None, incoming=[], synchronised=[],
                      compacted=Compaction(3, "t2", chains[3], 1_002, ids_after=1))
        assert donor.known_ids(5) == (1, ["t1", "t2", "t3", "t4"])
        assert donor.payload("t1") is None  # the payloads went; the ids stay

        rec = SqliteStorage(rlog)
        rec.enable()
        rec.persist(counter=2_000, incoming=[], synchronised=[metas[0]])  # at position 1
        late = TxMeta("late", 1_001, "m1", 3, "d")  # sorts before t4, never agreed
        after = TxMeta("t9", 1_009, "m1", 3, "d")
        rec.persist(counter=None, synchronised=[], incoming=[
            Incoming(metas[1], True), Incoming(late, True), Incoming(after, True)])
        known_after, ids = donor.known_ids(5)
        point = SeedPoint("seed-m1", 5, "t4", chains[5], 1_004, 5, f"{5:032x}", 5, None,
                          None, tuple(ids), known_after)
        rec.seeded(point, State(5, f"{5:032x}", 5))
        state, _ = rec.load()
        assert sorted(i.tx.txid for i in state.incoming) == ["late", "t9"]
        assert (state.floor, rec.known_ids(5)) == (5, (1, ["t1", "t2", "t3", "t4"]))

        # A later compaction of the donor, with no peer lagging behind 4: ids up to 4 go.
        donor.persist(counter=None, incoming=[], synchronised=[],
                      compacted=Compaction(5, "t4", chains[5], 1_004, ids_after=4))
        assert donor.known_ids(5) == (4, ["t4"])


def test_a_seed_point_travels_with_its_ids_and_a_wrong_count_is_refused():
    from master_service.sync import InvalidMessage, SeedPoint, chain_hash
    from master_service.sync.wire import seed_from_json, seed_to_json

    chain = chain_hash(chain_hash("", "t1"), "t2")
    point = SeedPoint("seed-m1", 2, "t2", chain, 1_002, 2, f"{2:032x}", 2, None, None,
                      ("t1", "t2"), 0)
    assert seed_from_json(seed_to_json(point)) == point
    old = {k: v for k, v in seed_to_json(point).items() if k not in ("ids", "known_after")}
    assert seed_from_json(old).known_after is None  # a donor of an earlier release
    with pytest.raises(InvalidMessage, match="must name the 2 entries in"):
        seed_from_json({**seed_to_json(point), "ids": ["t2"]})


def test_from_a_donor_that_names_no_ids_the_timestamp_rule_decides():
    """A donor of an earlier release sends no ids: what sorts at or before the point
    leaves (exact while the agreed queue is sorted by timestamp); a donor that forgot
    ids the recipient may lack (known_after past its position) is treated the same."""
    from master_service.sync.compaction import leaves_incoming

    def leaves(txid, ts, known_after, agreed=()):
        return leaves_incoming(txid, ts, point_txid="t4", point_newest=1_004,
                               agreed=set(agreed), known_after=known_after, position=1)

    assert leaves("late", 1_001, None) and not leaves("t9", 1_009, None)
    assert leaves("late", 1_001, 3) and not leaves("late", 1_001, 1)
    assert leaves("t9", 1_009, 1, agreed=["t9"])  # agreed out of order: in the image


# ---------------------------------------------------------------- real processes


@pytest.mark.processes
def test_peered_masters_keep_a_bounded_agreed_queue_and_a_master_killed_after_pruning_rejoins(
        tmp_path):
    """Three data centres; LogMaxSize written over Jolokia on every master; hundreds of
    writes: each master's agreed queue stays bounded in memory (GET /admin/sync/agreed,
    agreed_held) and in SQLite (sync_agreed), its data-centre log is pruned; then a master
    killed after pruning comes back, writes are agreed on every master, it goes idle."""
    import sqlite3
    import time

    import httpx

    from tests.clusters import DataCentres, Writers, insert

    name = "ReplicationCluster:name=ClusterInfo"
    dcs = DataCentres(tmp_path, n=3, workers=1)
    try:
        dcs.start()
        m2 = dcs.dcs[1]
        for dc in dcs.dcs:
            mbean = f"{name}/{dc.master.properties['node-id']}"
            r = httpx.post(f"{dc.master.url}/jolokia", json={
                "type": "write", "mbean": mbean, "attribute": "LogMaxSize", "value": 100},
                timeout=10)
            assert r.json()["status"] == 200, r.text
        targets = [(f"w{i}", dc) for i, dc in enumerate(dcs.dcs) for _ in range(2)]
        targets = [(f"{n}{k}", dc) for k, (n, dc) in enumerate(targets)]
        with Writers(targets, per_thread=60) as writers:
            pass
        assert not writers.failed, writers.failed[:3]
        dcs.wait_converged(timeout=120)
        for dc in dcs.dcs:
            st = dcs.sync(dc)
            assert st["seq"] >= 360 and st["floor"] >= st["seq"] - 100, st
            assert st["agreed_held"] <= 100 + 64, st
            assert len(httpx.get(f"{dc.master.url}/admin/sync/agreed",
                                 params={"limit": 10_000}).json()) == st["agreed_held"]
        # every entry every DC executed leaves SQLite too, payload included
        db = sqlite3.connect(f"file:{m2.master.properties['data-dir']}/txlog.db?mode=ro",
                             uri=True)
        held = db.execute("select count(*) from sync_agreed").fetchone()[0]
        payloads = db.execute("select count(*) from transactions").fetchone()[0]
        db.close()
        assert held <= 164 and payloads <= 164 + 100, (held, payloads)
        m2.master.kill9()  # after its agreed queue forgot most of what it agreed
        m2.master.start(wait=True)
        for dc in dcs.dcs:
            assert insert(dc, f"urn:txc:after-{dc.master.properties['node-id']}"
                          ).status_code == 204
        dcs.wait_converged(timeout=120)
        subjects = dcs.subjects_on_every_worker()
        for url, got in subjects.items():
            assert writers.acked <= got and "urn:txc:after-m2" in got, url
        assert len(set(dcs.fingerprints().values())) == 1
        deadline = time.monotonic() + 30
        while not all(dcs.sync(dc)["activity"] == "idle" for dc in dcs.dcs):
            assert time.monotonic() < deadline, [dcs.sync(dc) for dc in dcs.dcs]
            time.sleep(0.2)
        st = dcs.sync(m2)
        assert st["state"] == "connected" and not st["needs_seeding"], st
    finally:
        dcs.stop_all()
