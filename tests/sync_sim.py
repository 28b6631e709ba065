"""Seeded deterministic simulator of TxLog sync masters (TigerBeetle VOPR style).

Everything — node modes, clock skews, message delays, drop and duplicate rates, crashes,
partitions, client transactions — derives from one integer seed through
``random.Random(seed)``; simulated time is an integer (milliseconds). A run has a *fault
phase* (the network delays, reorders, drops and duplicates messages; nodes crash, also in
the middle of a step, and restart from what they persisted through the Ready contract;
partitions come and go), then a *liveness phase* (faults stop, everything heals, every
node is up) that must end, within a bound, with every transaction in every synchronised
queue and all queues identical.

Invariants checked after every event (``check_synchronised``, ``check_durable``,
``check_acked``):
 1. every synchronised queue is a prefix of one agreed sequence (so any two are identical
    or one is a prefix of the other) — even decisions lost in a crash before persisting;
 2. every transaction acknowledged to a client is in its origin's persisted incoming or
    synchronised queue (across crashes);
 3. no transaction is twice in a synchronised queue;
 4. the agreed sequence is a prefix of the sorted list of every transaction created so
    far — so timestamps never decrease along a synchronised queue and no transaction is
    ever created that sorts before a synchronised one;
 5. the persisted state equals the node's state after every Ready: the Ready contract
    carries every change, and the persisted counter never goes back. Persisted by the
    driver's own applier (master_service/sync/applier.py) over ``MemoryStorage``, with
    the payloads stored with their Readies: incoming entries once acquired (merged ones
    come back from the peers' statuses after a crash).
With ``max_peer_lag`` (nodes may go on without missing peers: the spec's split brain),
1 and 4 become: queues diverge only between a node and one it went on without, and every
divergence is reported as an inconsistency. With ``split_recovery`` NONE liveness is
required if nothing diverged; with SIMPLE or SMART it is required always: after healing
every synchronised queue is the same and holds every transaction that exists (so every
acknowledged one). A truncation (split recovery) re-bases invariant 1: the agreed
sequence becomes the longest persisted synchronised queue (what the others will follow).

Replay a seed:   .venv/bin/python -m tests.sync_sim --seed 123 [--nodes 5] [--fault-rate 0.7]
                 [--set max_peer_lag=800 --set long_partitions=2 --set split_recovery=Smart]
Soak many seeds: .venv/bin/python -m tests.sync_sim --soak 600   (seconds; every strategy)
"""

from __future__ import annotations

import argparse
import ast
import bisect
import heapq
import itertools
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from master_service.sync import (
    ExecutedAt,
    Fetch,
    Mode,
    Post,
    Ready,
    Refused,
    Retention,
    SeedPoint,
    SplitRecovery,
    Status,
    SyncNode,
    TailSegment,
    Timing,
    TxMeta,
    chain_hash,
)
from master_service.sync.applier import Applier
from master_service.sync.memory_storage import MemoryStorage

START = 10_000  # simulated time starts here so that negative clock skews stay >= 0


@dataclass(frozen=True)
class Carried:
    """A status as the transport sends it (``carry``): with the sender's executed
    position and fingerprint and the payloads it could read, at the time it is sent."""

    post: Post
    executed: int
    fingerprint: str
    payloads: frozenset[str]


class SimulationFailure(AssertionError):
    pass


@dataclass(frozen=True)
class SimConfig:
    seed: int
    nodes: int = 3
    fault_rate: float = 0.5
    modes: tuple[Mode, ...] = ()  # per node; default all read-write
    fault_time: int = 3_000  # length of the fault phase
    liveness_bound: int = 30_000  # the healed cluster must converge within this
    transactions: int = 12  # client transactions submitted during the fault phase
    max_delay: int = 40  # message delay is uniform in 1..max_delay
    fetch_delay: int = 40  # payload transfer time is uniform in 1..fetch_delay (bulky)
    drop: float = 0.0
    duplicate: float = 0.0
    crash_mid_step: float = 0.0  # crash while handling a Ready (before/after persisting)
    crashes: int = 0
    partitions: int = 0
    long_partitions: int = 0  # a random group cut off for 2-4 x max_peer_lag: real splits
    max_skew: int = 300
    max_peer_lag: int | None = None
    split_recovery: SplitRecovery = SplitRecovery.NONE
    timing: Timing = field(default_factory=lambda: Timing(
        round_timeout=150, idle_interval=1_000, acquire_retry=200, max_tail=8))
    # Each data centre executes its agreed queue (payloads needed) after 1..execute_delay;
    # read-only masters execute nothing
    # (docs/design/sync-protocol.md#master-modes). Executed entries are
    # forgotten once every node executed them, or past the horizon of ``retention``.
    execute_delay: int = 200
    retention: Retention = field(default_factory=Retention)
    settle: int = 0  # after converging, run this long more (then check_bounded)
    # The driver's rooms, modelled: what goes with a status is carried (payloads pushed
    # and statuses relayed as the core says, the sender's executed position and
    # fingerprint, compared by the receiver's core) and payloads are asked of the
    # sources the core names, when it says (``Ready.fetches``: hedged, failures reported
    # back) instead of one random source per Acquire. Off by default: every seed keeps
    # the fault schedule it had before.
    carry: bool = False
    request_timeout: int = 2_000  # an ask lost on the way fails after this
    # Execution draws a value the agreed transaction does not carry (the data centre's own
    # clock for NOW(), its own RAND(): the specification's known issue, as before issue 16
    # item 5): then the same agreed position has other fingerprints in other data centres.
    # Off: a data centre's result is a function of the agreed (txid, timestamp) alone, as
    # worker_service/determinism.py makes it.
    local_entropy: bool = False

    @classmethod
    def derive(cls, seed: int, nodes: int = 3, fault_rate: float = 0.5,
               **overrides) -> SimConfig:
        """Rates and counts from the seed, scaled by ``fault_rate`` in [0, 1]."""
        rng = random.Random(f"config:{seed}")
        f = min(max(fault_rate, 0.0), 1.0)
        modes = [Mode.READ_WRITE] * nodes
        if nodes >= 3 and rng.random() < 0.3:  # sometimes a read-only or muted master
            modes[rng.randrange(1, nodes)] = rng.choice([Mode.READ_ONLY, Mode.MUTED])
        values = dict(
            seed=seed, nodes=nodes, fault_rate=f, modes=tuple(modes),
            transactions=rng.choice([rng.randint(3, 16), rng.randint(20, 60)]),
            max_delay=(max_delay := rng.randint(2, 60)),
            fetch_delay=max_delay * rng.choice([1, 3, 10]),
            drop=f * rng.uniform(0.0, 0.35),
            duplicate=f * rng.uniform(0.0, 0.25),
            crash_mid_step=f * rng.uniform(0.0, 0.02),
            crashes=round(f * rng.randint(0, 4)),
            partitions=round(f * rng.randint(0, 3)),
            max_skew=rng.choice([0, 50, 300, 1_000]),
        )
        values.update(overrides)
        return cls(**values)

    def replay_command(self) -> str:
        """A command line that runs exactly this configuration again."""
        cmd = (f".venv/bin/python -m tests.sync_sim --seed {self.seed} --nodes {self.nodes} "
               f"--fault-rate {self.fault_rate!r}")
        derived = SimConfig.derive(self.seed, self.nodes, self.fault_rate)
        if self.modes != derived.modes:
            cmd += " --modes " + ",".join(m.value for m in self.modes)
        for name in ("fault_time", "liveness_bound", "transactions", "max_delay",
                     "fetch_delay", "drop", "duplicate", "crash_mid_step", "crashes",
                     "partitions", "long_partitions", "max_skew", "max_peer_lag",
                     "carry"):
            if getattr(self, name) != getattr(derived, name):
                cmd += f" --set {name}={getattr(self, name)!r}"
        if self.split_recovery is not derived.split_recovery:
            cmd += f" --set split_recovery={self.split_recovery.value}"
        if self.retention.max_entries is not None:
            cmd += f" --set retention={self.retention.max_entries}"
        return cmd


@dataclass
class SimNode:
    name: str
    mode: Mode
    # What survives a crash: the node's storage, written by the driver's applier.
    durable: MemoryStorage = field(default_factory=MemoryStorage)
    # The simulator's record of the agreed queue as persisted, forgotten entries included
    # (the storage forgets them): what the invariants compare; check_durable holds the
    # storage to it.
    synced: list[TxMeta] = field(default_factory=list)
    synced_ids: set[str] = field(default_factory=set)
    node: SyncNode | None = None
    incarnation: int = 0
    skew: int = 0
    next_tick: int | None = None
    split_seen: bool = False
    executing: bool = False  # an execute event is scheduled

    @property
    def up(self) -> bool:
        return self.node is not None


@dataclass
class SimResult:
    config: SimConfig
    events: int
    converged_at: int | None
    synchronised: int
    history: list[str]
    splits: dict[str, frozenset[str]]  # split_suspected of each node at the end
    split_seen: set[str]  # nodes that suspected a split at some point
    inconsistencies: list[str]
    divergences: list[str]
    truncations: list[str]


class Simulation:
    def __init__(self, config: SimConfig, keep_history: int = 400,
                 node_class: type[SyncNode] = SyncNode) -> None:
        """Without ``max_peer_lag`` every check is on. With it, nodes may go on without a
        missing peer — the spec's split brain, which may diverge until a recovery layer
        exists: invariants 1 and 4 are then replaced by "a divergence is always reported
        as an inconsistency", and liveness is required only if nothing diverged."""
        self.cfg = config
        self.node_class = node_class
        self.rng = random.Random(config.seed)
        names = [f"n{i + 1}" for i in range(config.nodes)]
        modes = config.modes or (Mode.READ_WRITE,) * config.nodes
        self.nodes = {n: SimNode(n, m) for n, m in zip(names, modes, strict=True)}
        self.now = START
        self._events: list = []
        self._seq = itertools.count()
        self.history: deque[tuple] = deque(maxlen=keep_history or None)
        self.event_count = 0
        self.faults_on = True
        self.blocked: set[tuple[str, str]] = set()
        # invariant bookkeeping
        self.agreed: list[TxMeta] = []  # the longest synchronised queue seen (invariant 1)
        self.created: list[tuple[int, str]] = []  # every existing transaction, sorted (4)
        self.metas: dict[str, TxMeta] = {}  # every transaction ever created, by id
        self.acked: dict[str, set[str]] = {n: set() for n in names}  # node -> txids (2)
        self.split_allowed = config.max_peer_lag is not None
        self.ever_excluded: set[tuple[str, str]] = set()  # (a, b): a went on without b
        self.agreed_by: list[str] = []  # the node whose ADD first put agreed[p] there
        self.divergences: list[str] = []
        self.truncations: list[str] = []
        self.recovering = config.split_recovery is not SplitRecovery.NONE
        self.inconsistencies: list[str] = []
        self.tx_ids = itertools.count(1)
        self.converged_at: int | None = None
        # execution timing from its own generator: the fault schedule of a seed stays the
        # one it had before execution was modelled
        self.exec_rng = random.Random(f"execute:{config.seed}")
        self.compactions = 0
        self.beyond: list[str] = []  # "a reports b beyond its horizon" / "a needs seeding"
        self.seedings: list[str] = []
        # With a retention horizon a node may fall behind the floor of every peer; it is
        # then seeded (``seed``) and the others went on without it meanwhile, so its
        # later transactions may be agreed after newer ones: invariant 4 (sorted order)
        # is off, as in a split.
        r = config.retention
        self.horizon = r.max_entries is not None or r.max_age is not None
        # ``carry``: asks under way (node, incarnation, txid, source), the statuses each
        # node heard straight from their senders, what each pushed to whom, and counts
        self.asking: set[tuple[str, int, str, str]] = set()
        self.heard_direct: dict[str, set[Status]] = {n: set() for n in names}
        self.pushed: set[tuple[str, int, str, str]] = set()
        self.carried: dict[str, int] = dict.fromkeys(
            ("pushed", "relayed", "asks", "hedged", "failed asks", "fingerprints"), 0)

    # ------------------------------------------------------------------ plumbing

    def log(self, fmt: str, *args: object) -> None:
        self.history.append((self.now, fmt, args))

    def format_history(self) -> list[str]:
        return [f"{t:>7} {fmt % args if args else fmt}" for t, fmt, args in self.history]

    def fail(self, what: str) -> None:
        lines = self.format_history()
        raise SimulationFailure(
            f"{what}\nseed={self.cfg.seed} config={self.cfg}\nreplay: "
            f"{self.cfg.replay_command()}\nlast {len(lines)} events:\n" + "\n".join(lines))

    def at(self, when: int, fn: Callable, *args: object) -> None:
        heapq.heappush(self._events, (when, next(self._seq), fn, args))

    def node_time(self, sn: SimNode) -> int:
        return self.now + sn.skew

    # ------------------------------------------------------------------ run

    def run(self) -> SimResult:
        cfg = self.cfg
        for sn in self.nodes.values():
            sn.skew = self.rng.randint(-cfg.max_skew, cfg.max_skew)
            self.start(sn)
        end_faults = START + cfg.fault_time
        for _ in range(cfg.transactions):
            self.at(self.rng.randrange(START, end_faults), self.client_submit)
        for _ in range(cfg.crashes):
            t = self.rng.randrange(START, end_faults)
            self.at(t, self.crash, self.rng.choice(list(self.nodes)), "scheduled")
        for _ in range(cfg.partitions):
            t = self.rng.randrange(START, end_faults)
            self.at(t, self.partition)
        lag = cfg.max_peer_lag or 1_000
        for _ in range(cfg.long_partitions):
            t = self.rng.randrange(START, end_faults)
            names = list(self.nodes)
            group = self.rng.sample(names, self.rng.randint(1, len(names) - 1))
            self.at(t, self.isolate, sorted(group), self.rng.randint(2 * lag, 4 * lag))
        self.at(end_faults, self.heal)
        deadline = end_faults + cfg.liveness_bound
        while self._events:
            when, _, fn, args = heapq.heappop(self._events)
            if when > deadline:
                break
            self.now = max(self.now, when)
            fn(*args)
            self.event_count += 1
            if not self.faults_on:
                if self.converged_at is not None:
                    if self.now >= self.converged_at + cfg.settle:
                        break
                    continue
                if self.converged():
                    self.converged_at = self.now
                    if not cfg.settle:
                        break
                    continue
                if self.divergences and self.inconsistencies and not self.recovering:
                    break  # a split brain, detected, and no recovery configured
        if self.divergences and not self.inconsistencies and not self.recovering:
            self.fail("queues diverged and no node reported it: " + self.divergences[0])
        if self.converged_at is None and (self.recovering or not self.divergences):
            self.fail(f"liveness: not converged {cfg.liveness_bound} ms after healing; "
                      + self.describe())
        return SimResult(cfg, self.event_count, self.converged_at, len(self.agreed),
                         self.format_history(),
                         {n: sn.node.split_suspected for n, sn in self.nodes.items() if sn.up},
                         {n for n, sn in self.nodes.items() if sn.split_seen},
                         self.inconsistencies, self.divergences, self.truncations)

    def describe(self) -> str:
        parts = []
        for sn in self.nodes.values():
            if not sn.up:
                parts.append(f"{sn.name}: down")
                continue
            node = sn.node
            queue = [i.tx.txid + ("" if i.acquired else "?") for i in node.incoming]
            parts.append(f"{sn.name}({node.mode.value}): seq={node.seq} incoming={queue} "
                         f"missing={sorted(node.missing_payloads)} "
                         f"excluded={sorted(node.split_suspected)} "
                         f"split_point={node.split_point} "
                         f"synced={[t.txid for t in node.synchronised]}")
        return f"{len(self.created)} transactions exist; " + "; ".join(parts)

    def check_bounded(self) -> None:
        """After settling: every node executed everything and forgot it (the agreed state
        a node holds is what some node has not executed yet: here nothing). Read-only
        masters execute nothing, so nothing is forgotten on their account."""
        if any(sn.mode is Mode.READ_ONLY for sn in self.nodes.values()):
            return
        for sn in self.nodes.values():
            node = sn.node
            if node.floor != node.seq or node.synchronised:
                self.fail(f"bounded state: {sn.name} still holds agreed entries "
                          f"{node.floor + 1}..{node.seq} (executed {sn.durable.executed}) "
                          f"{cfg_settle(self.cfg)} after converging; " + self.describe())

    def converged(self) -> bool:
        """Every node up, nothing incoming or missing, every synchronised queue the same
        and holding every transaction that exists."""
        want = len(self.created)
        first: tuple[TxMeta, ...] | None = None
        for sn in self.nodes.values():
            node = sn.node
            if node is None or node.seq != want or node.incoming or node.missing_payloads:
                return False
            full = self.full_queue(sn)
            if first is None:
                first = full
                if {t.key for t in first} != set(self.created):
                    return False
            elif full != first:
                return False
        return True

    def full_queue(self, sn: SimNode) -> tuple[TxMeta, ...]:
        """A node's whole synchronised queue: what it forgot (the simulator kept it in
        its durable record) and what it holds."""
        return tuple(sn.synced[:sn.node.floor]) + sn.node.synchronised

    # ------------------------------------------------------------------ nodes

    def start(self, sn: SimNode) -> None:
        cfg = self.cfg
        peers = {n: other.mode for n, other in self.nodes.items() if n != sn.name}
        timing = replace(cfg.timing, max_peer_lag=cfg.max_peer_lag)
        state, missing = sn.durable.load()
        sn.incarnation += 1
        sn.node = self.node_class.restore(sn.name, state, now=self.node_time(sn), peers=peers,
                                          mode=sn.mode, timing=timing, missing_payloads=missing,
                                          split_recovery=cfg.split_recovery,
                                          retention=cfg.retention,
                                          executed=sn.durable.executed)
        sn.next_tick = None
        sn.executing = False
        self.log("%s starts (incarnation %d, seq %d, floor %d, %d incoming, counter %d)",
                 sn.name, sn.incarnation, state.floor + len(state.synchronised), state.floor,
                 len(state.incoming), state.counter)
        self.schedule_tick(sn)
        self.schedule_execute(sn)

    def crash(self, name: str, why: str) -> None:
        sn = self.nodes[name]
        if not sn.up or not self.faults_on:
            return
        sn.node = None
        sn.next_tick = None
        self.log("%s crashes (%s)", name, why)
        self.at(self.now + self.rng.randint(50, 1_500), self.restart, name, sn.incarnation)

    def restart(self, name: str, incarnation: int) -> None:
        sn = self.nodes[name]
        if sn.up or sn.incarnation != incarnation:
            return
        if self.rng.random() < 0.5:  # after a reboot the clock may be behind, even far
            sn.skew = max(-START, sn.skew - self.rng.randint(0, 2 * self.cfg.max_skew))
        self.start(sn)
        if self.rng.random() < 0.5:  # a client whose request got no answer tries again
            self.at(self.now, self.client_submit, name)

    def schedule_execute(self, sn: SimNode) -> None:
        """The data centre executes what is agreed and acquired, some time later."""
        d = sn.durable
        if (sn.executing or sn.mode is Mode.READ_ONLY or d.executed >= d.seq
                or d.agreed[d.executed - d.floor].txid not in d.payloads):
            return
        sn.executing = True
        self.at(self.now + self.exec_rng.randint(1, self.cfg.execute_delay), self.execute,
                sn.name, sn.incarnation)

    def execute(self, name: str, incarnation: int) -> None:
        sn = self.nodes[name]
        if not sn.up or sn.incarnation != incarnation:
            return
        sn.executing = False
        d = sn.durable
        pos = d.executed
        while pos < d.seq and d.agreed[pos - d.floor].txid in d.payloads:
            pos += 1
        d.mark_executed(pos)  # durably, with the workers' state (the driver's SQLite)
        self.log("%s executed up to %d", name, d.executed)
        self.apply(sn, sn.node.executed(d.executed, self.node_time(sn)), "executed",
                   plain=True)

    def roll_back(self, name: str, incarnation: int) -> None:
        """After a truncation the data centre is back at its split point (the driver
        restores the workers from the split backup) and says so."""
        sn = self.nodes[name]
        if not sn.up or sn.incarnation != incarnation:
            return
        self.apply(sn, sn.node.rolled_back(sn.durable.executed, self.node_time(sn)),
                   "rolled back", plain=True)

    def seed(self, name: str, incarnation: int) -> None:
        """Seeding a data centre from a peer (a model of it): the node's workers get a
        peer's image, which stands for that peer's executed position P; the node restarts
        with the agreed queue forgotten up to P (its floor) and its own incoming queue
        (what it acknowledged and was not agreed by P), and goes on peering from there."""
        sn = self.nodes[name]
        if not sn.up or sn.incarnation != incarnation or not sn.node.needs_seeding:
            return
        d = sn.durable
        donors = [o for o in self.nodes.values() if o is not sn and o.up
                  and o.durable.executed >= d.seq and o.durable.executed > d.executed
                  and o.synced[:d.seq] == sn.synced
                  # a split donor gives no image past its split point (seed_point)
                  and o.node is not None and o.node.seed_point(o.durable.executed)]
        if not donors:  # no peer has executed past us yet: ask again later
            self.at(self.now + self.cfg.execute_delay, self.seed, name, incarnation)
            return
        donor = max(donors, key=lambda o: o.durable.executed)
        pos = donor.durable.executed
        image = list(donor.synced[:pos])
        chain = ""
        for tx in image:
            chain = chain_hash(chain, tx.txid)
        newest = max(t.timestamp for t in image)
        # The donor's core gives the real master's seed point (seeding.py): the same.
        point = donor.node.seed_point(pos)
        if point is not None and point != (image[-1].txid, chain, max(
                newest, donor.durable.floor_newest)):
            self.fail(f"{donor.name}'s seed point at {pos} is {point}, its queue says "
                      f"{(image[-1].txid, chain, newest)}")
        # The seed point carries the ids the donor still knows (its storage's
        # known_ids); the recipient's storage takes it with the real rule (seeded,
        # compaction.leaves_incoming), so a transaction it drops wrongly is lost here as
        # it would be there, and one it keeps wrongly is agreed twice.
        known_after, ids = donor.durable.known_ids(pos)
        d.seeded(SeedPoint("image", pos, image[-1].txid, chain,
                           max(newest, donor.durable.floor_newest), pos, "0" * 32, 0, None,
                           None, tuple(ids), known_after))
        sn.synced, sn.synced_ids = image, {t.txid for t in image}
        self.seedings.append(f"{name} from {donor.name} at {pos}")
        self.log("%s is seeded from %s's image at agreed position %d", name, donor.name, pos)
        sn.node = None
        self.start(sn)

    def schedule_tick(self, sn: SimNode) -> None:
        at = sn.node.next_round_at
        if self.cfg.carry and sn.node.next_fetch_at is not None:
            at = min(at, sn.node.next_fetch_at)  # a payload ask to hedge
        target = max(self.now, at - sn.skew)
        if sn.next_tick != target:
            sn.next_tick = target
            self.at(target, self.tick, sn.name, sn.incarnation, target)

    def tick(self, name: str, incarnation: int, target: int) -> None:
        sn = self.nodes[name]
        if not sn.up or sn.incarnation != incarnation or sn.next_tick != target:
            return
        sn.next_tick = None
        self.apply(sn, sn.node.tick(self.node_time(sn)), "tick")

    def client_submit(self, name: str | None = None) -> None:
        live = [sn for sn in self.nodes.values() if sn.up]
        if name is not None:
            live = [self.nodes[name]] if self.nodes[name].up else []
        if not live:
            return
        sn = self.rng.choice(live)
        txid = f"t{next(self.tx_ids)}"
        try:
            ready = sn.node.submit(txid, size=self.rng.randint(1, 10_000),
                                   digest=f"sha:{txid}", now=self.node_time(sn))
        except Refused as e:
            if sn.mode is Mode.READ_WRITE:
                self.fail(f"a read-write master refused {txid}: {e}")
            self.log("%s refuses %s (%s)", sn.name, txid, sn.mode.value)
            return
        if sn.mode is not Mode.READ_WRITE:
            self.fail(f"{sn.name} ({sn.mode.value}) accepted a client transaction")
        tx = next(i.tx for i in ready.incoming if i.tx.txid == txid) if ready.incoming \
            else next(t for t in ready.synchronised if t.txid == txid)
        self.log("client -> %s: %s @%d", sn.name, txid, tx.timestamp)
        self.created_add(tx)
        self.apply(sn, ready, f"submit {txid}", own=tx)

    # ------------------------------------------------------------------ Ready contract

    def apply(self, sn: SimNode, ready: Ready, what: str, own: TxMeta | None = None,
              via_tail: bool = False, plain: bool = False,
              payloads: tuple[tuple[TxMeta, list], ...] = ()) -> None:
        """Handle a Ready as the driver must: persist (with ``payloads``, and ``own``'s),
        then send / acknowledge / fetch. ``plain``: an execution report (no crash drawn
        from the fault generator, so that modelling execution leaves every seed's fault
        schedule as it was)."""
        node = sn.node
        crash_rate = 0.0 if plain else self.cfg.crash_mid_step
        if ready.split_suspected is not None:
            sn.split_seen = sn.split_seen or bool(ready.split_suspected)
            self.ever_excluded |= {(sn.name, p) for p in ready.split_suspected}
            self.log("%s split suspected: %s", sn.name, sorted(ready.split_suspected))
        fresh = 0
        if not self.split_allowed:  # then even a decision lost in a crash must agree
            fresh = self.check_synchronised(sn, ready, via_tail)
        if self.faults_on and crash_rate and self.rng.random() < crash_rate:
            if fresh:  # first decided here and lost before anyone could see it
                del self.agreed[-fresh:], self.agreed_by[-fresh:]
            if own is not None:
                self.created_remove(own)  # never persisted, never acknowledged: never was
            self.crash(sn.name, f"during {what}, before persisting")
            return
        d = sn.durable
        t = ready.truncated
        if t is not None:  # first, before this Ready's appends
            if not self.recovering:
                self.fail(f"{sn.name} truncated without a split recovery strategy")
            self.truncations.append(f"{sn.name} after {t.after_seq}: "
                                    f"{[x.txid for x in t.entries]}")
            self.log("%s truncates after seq %d: %s", sn.name, t.after_seq,
                     [x.txid for x in t.entries])
            if sn.synced[t.after_seq:] != list(t.entries):
                self.fail(f"{sn.name}: the truncation is not what it persisted after "
                          f"{t.after_seq}")
            sn.synced_ids.difference_update(x.txid for x in sn.synced[t.after_seq:])
            del sn.synced[t.after_seq:]
        if ready.counter is not None and ready.counter < d.counter:
            self.fail(f"{sn.name}: persisted counter goes back {d.counter} -> {ready.counter}")
        for tx in ready.synchronised:
            if tx.txid in sn.synced_ids:
                self.fail(f"{sn.name}: {tx.txid} twice in the synchronised queue")
            sn.synced.append(tx)
            sn.synced_ids.add(tx.txid)
        if ready.compacted is not None:
            self.check_compaction(sn, ready)
        # Persist as the driver does: the same applier, over memory instead of SQLite.
        Applier(d).apply([(ready, [*payloads, *([(own, [])] if own is not None else [])])])
        if t is not None:
            self.rebase_agreed(truncated={sn.name: sn.synced[:t.after_seq]})
            self.at(self.now + self.exec_rng.randint(1, self.cfg.execute_delay),
                    self.roll_back, sn.name, sn.incarnation)
        if ready.split_point_changed:
            self.log("%s split point: %s", sn.name, ready.split_point)
            if self.recovering:
                self.check_split_points()
        if self.split_allowed:  # a split may diverge: only what became durable counts
            self.check_synchronised(sn, ready, via_tail)
        if ready.compacted is not None:
            self.compactions += 1
            self.log("%s forgets up to %d", sn.name, ready.compacted.floor)
        if ready.beyond_horizon:
            self.beyond.append(f"{sn.name}: beyond its horizon: {sorted(ready.beyond_horizon)}")
            self.log("%s: peers beyond its horizon: %s", sn.name, sorted(ready.beyond_horizon))
        if ready.needs_seeding:
            self.beyond.append(f"{sn.name} needs seeding")
            self.log("%s needs seeding", sn.name)
            self.at(self.now + self.exec_rng.randint(1, self.cfg.execute_delay), self.seed,
                    sn.name, sn.incarnation)
        if (ready.beyond_horizon or ready.needs_seeding) and self.cfg.retention.max_entries is \
                None and self.cfg.retention.max_age is None:
            self.fail(f"{sn.name}: a node was stranded without a retention horizon: "
                      f"{self.beyond[-1]} (what every node executed was forgotten too early)")
        if via_tail and ready.synchronised and self.recovering:
            # entries past a split point reach a node of the sender's side only with the
            # sender's split: its good prefix must stay consistent with everybody's
            self.check_split_points()
        self.check_durable(sn, ready)
        for txid in ready.acknowledge:
            self.acked[sn.name].add(txid)
        self.check_acked(sn)
        for inc in ready.inconsistencies:
            self.inconsistencies.append(f"{sn.name}: {inc}")
            self.log("%s reports %s", sn.name, inc)
            if not self.split_allowed and not (self.horizon and inc.kind == "beyond-horizon"):
                self.fail(f"{sn.name} reports an inconsistency without a split: {inc}")
        if self.faults_on and crash_rate and self.rng.random() < crash_rate:
            self.crash(sn.name, f"during {what}, after persisting")
            return
        for post in ready.posts:
            self.send(sn.name, post.to, self.carry(sn, post) if self.cfg.carry else post.status)
        for tail in ready.tails:
            self.send(sn.name, tail.to, tail.segment)
        if self.cfg.carry:
            for ask in ready.fetches:
                self.ask(sn, ask)
        else:
            for acq in ready.acquire:
                self.fetch(sn, acq.tx, acq.sources)
        if sn.node is node:
            self.schedule_tick(sn)
            self.schedule_execute(sn)

    def check_compaction(self, sn: SimNode, ready: Ready) -> None:
        """The node forgets its entries up to ``c.floor`` (the applier drops them and
        their payloads). Checked before it persists: never past what this data centre
        executed, never past its split point under Simple/Smart (a truncation needs
        them), the chain is right, and (without a retention horizon) every node has
        executed them."""
        c, d = ready.compacted, sn.durable
        executed = d.executed if ready.truncated is None else min(
            d.executed, ready.truncated.after_seq)
        split_point = ready.split_point if ready.split_point_changed else d.split_point
        if c.floor > executed:
            self.fail(f"{sn.name} forgot up to {c.floor}, its data centre executed only "
                      f"{executed}")
        if self.recovering and split_point is not None and c.floor > split_point:
            self.fail(f"{sn.name} forgot up to {c.floor}, past its split point {split_point}")
        chain = ""
        for tx in sn.synced[:c.floor]:
            chain = chain_hash(chain, tx.txid)
        if c.chain != chain or c.txid != sn.synced[c.floor - 1].txid:
            self.fail(f"{sn.name}: compaction to {c.floor} names the wrong entry or chain")
        r = self.cfg.retention
        if r.max_entries is None and r.max_age is None:
            for other in self.nodes.values():
                if other is sn:
                    continue
                mine = sn.synced[:c.floor]
                if other.synced[:c.floor] == mine and other.durable.executed < c.floor and (
                        other.mode is not Mode.READ_ONLY):
                    self.fail(f"{sn.name} forgot up to {c.floor}, {other.name} executed only "
                              f"{other.durable.executed}")

    # ------------------------------------------------------------------ network

    def send(self, src: str, dst: str, msg: Status | TailSegment | Carried) -> None:
        cfg = self.cfg
        if self.faults_on and self.rng.random() < cfg.drop:
            return
        copies = 2 if self.faults_on and self.rng.random() < cfg.duplicate else 1
        for _ in range(copies):
            self.at(self.now + self.rng.randint(1, cfg.max_delay), self.deliver, src, dst, msg)

    def deliver(self, src: str, dst: str, msg: Status | TailSegment | Carried) -> None:
        sn = self.nodes[dst]
        if not sn.up or (src, dst) in self.blocked:
            return
        if isinstance(msg, Carried):
            self.deliver_carried(src, sn, msg)
            return
        if isinstance(msg, Status):
            self.log("%s -> %s status base=%s/%d counter=%d queue=%s", src, dst,
                     msg.merge_base, msg.seq, msg.counter, [t.txid for t in msg.queue])
        else:
            self.log("%s -> %s tail after %s/%d: %s", src, dst, msg.after, msg.after_seq,
                     [t.txid for t in msg.entries])
        self.apply(sn, sn.node.receive(msg, self.node_time(sn)), f"receive from {src}",
                   via_tail=isinstance(msg, TailSegment))

    def fetch(self, sn: SimNode, tx: TxMeta, sources: tuple[str, ...]) -> None:
        """The asynchronous payload interface: ask one source, it answers if it holds it."""
        if tx.txid in sn.durable.payloads:  # already stored (e.g. before a crash)
            self.at(self.now, self.payload_arrives, sn.name, tx.txid)
            return
        if not sources:
            return
        source = self.rng.choice(sources)
        if self.faults_on and self.rng.random() < self.cfg.drop:
            return
        delay = self.rng.randint(1, self.cfg.max_delay)
        self.at(self.now + delay, self.serve_fetch, source, sn.name, tx.txid)

    def serve_fetch(self, source: str, requester: str, txid: str) -> None:
        src = self.nodes[source]
        if not src.up or (requester, source) in self.blocked:
            return
        if txid not in src.durable.payloads:
            return
        if self.faults_on and self.rng.random() < self.cfg.drop:
            return
        delay = self.rng.randint(1, self.cfg.fetch_delay)
        self.at(self.now + delay, self.payload_arrives, requester, txid, source)

    def payload_arrives(self, name: str, txid: str, source: str | None = None) -> None:
        sn = self.nodes[name]
        if not sn.up or (source is not None and (source, name) in self.blocked):
            return
        # stored durably with the Ready of ``acquired``, as the driver stores it
        self.apply(sn, sn.node.acquired(txid, self.node_time(sn)), f"payload {txid}",
                   payloads=((self.metas[txid], []),))

    # ------------------------------------------------------ carried (the driver's rooms)

    def fingerprint(self, sn: SimNode, pos: int) -> str:
        """The data centre's fingerprint after executing the first ``pos`` agreed
        entries: a function of what it executed, in order, each execution's result a
        function of what the agreed transaction carries to the probe (txid, timestamp:
        worker_service/determinism.py) — plus the data centre's own entropy with
        ``local_entropy``."""
        fp = "0" * 32
        local = f"@{sn.name}" if self.cfg.local_entropy else ""
        for tx in sn.synced[:pos]:
            fp = chain_hash(fp, f"{tx.txid}@{tx.timestamp}{local}")
        return fp

    def carry(self, sn: SimNode, post: Post) -> Carried:
        """What the transport sends: checked against what the core may decide."""
        peers = set(self.nodes) - {sn.name}
        if not set(post.silent) <= peers:
            self.fail(f"{sn.name} names non-peers silent: {post.silent}")
        own = {tx.txid for tx in post.status.queue if tx.origin == sn.name}
        for txid in post.push:
            key = (sn.name, sn.incarnation, post.to, txid)
            if txid not in own or key in self.pushed:
                self.fail(f"{sn.name} pushes {txid} to {post.to}: not its own in the status, "
                          "or pushed there before")
            self.pushed.add(key)
        for r in post.relayed:
            if r.status.sender in (sn.name, post.to) or r.status not in self.heard_direct[
                    sn.name]:
                self.fail(f"{sn.name} relays to {post.to} a status of {r.status.sender} it "
                          "did not hear from it directly, or to its own sender")
        d = sn.durable
        named = set(post.push) | {t for r in post.relayed for t in r.payloads}
        return Carried(post, d.executed, self.fingerprint(sn, d.executed),
                       frozenset(named & d.payloads.keys()))

    def deliver_carried(self, src: str, sn: SimNode, msg: Carried) -> None:
        post, st, d = msg.post, msg.post.status, sn.durable
        self.log("%s -> %s status base=%s/%d counter=%d queue=%s push=%s relayed=%s", src,
                 sn.name, st.merge_base, st.seq, st.counter, [t.txid for t in st.queue],
                 list(post.push), [r.status.sender for r in post.relayed])
        ours = self.fingerprint(sn, msg.executed) if msg.executed <= d.executed else None
        self.carried["fingerprints"] += ours is not None
        pushed = [t for t in post.push if t in msg.payloads]
        node = sn.node
        self.apply(sn, node.receive(st, self.node_time(sn), silent=post.silent,
                                    executed=ExecutedAt(msg.executed, msg.fingerprint, ours),
                                    pushed=pushed), f"receive from {src}")
        if sn.node is node:
            self.heard_direct[sn.name].add(st)
            self.take_pushed(sn, pushed, src)
        for r in post.relayed:
            if sn.node is not node:
                return
            if node.peers.get(r.status.sender) is not r.status.mode:
                continue
            self.carried["relayed"] += 1
            pushed = [t for t in r.payloads if t in msg.payloads]
            self.apply(sn, node.receive(r.status, self.node_time(sn), relayed_by=src,
                                        pushed=pushed), f"relayed by {src}")
            if sn.node is node:
                self.take_pushed(sn, pushed, src)

    def take_pushed(self, sn: SimNode, txids: list[str], src: str) -> None:
        for txid in txids:
            if sn.up and sn.node.wants_payload(txid):
                self.carried["pushed"] += 1
                self.payload_arrives(sn.name, txid)

    def ask(self, sn: SimNode, ask: Fetch) -> None:
        """One ask for a payload, as the core decided: answered by the source if it holds
        it and the link works, failed when it does not, lost (failing after the
        request timeout) with the drop rate."""
        key = (sn.name, sn.incarnation, ask.tx.txid, ask.source)
        if ask.source == sn.name or ask.source not in self.nodes or key in self.asking:
            self.fail(f"{sn.name} asks {ask.source} for {ask.tx.txid}: not a peer, or "
                      "asked already")
        self.asking.add(key)
        self.carried["asks"] += 1
        if any(k[:3] == key[:3] and k != key for k in self.asking):
            self.carried["hedged"] += 1
        if ask.tx.txid in sn.durable.payloads:  # already stored (e.g. before a crash)
            self.at(self.now, self.answer, key, True)
            return
        if self.faults_on and self.rng.random() < self.cfg.drop:
            self.at(self.now + self.cfg.request_timeout, self.answer, key, False)
            return
        self.at(self.now + self.rng.randint(1, self.cfg.max_delay), self.serve_ask, key)

    def serve_ask(self, key: tuple[str, int, str, str]) -> None:
        name, _, txid, source = key
        src = self.nodes[source]
        if not src.up or (name, source) in self.blocked or (source, name) in self.blocked:
            self.at(self.now + self.cfg.request_timeout, self.answer, key, False)
        elif txid not in src.durable.payloads:
            self.at(self.now + self.rng.randint(1, self.cfg.max_delay), self.answer, key,
                    False)
        else:
            self.at(self.now + self.rng.randint(1, self.cfg.fetch_delay), self.answer, key,
                    True)

    def answer(self, key: tuple[str, int, str, str], ok: bool) -> None:
        self.asking.discard(key)
        name, incarnation, txid, source = key
        sn = self.nodes[name]
        if not sn.up or sn.incarnation != incarnation:
            return
        if ok:
            self.payload_arrives(name, txid)
        else:
            self.carried["failed asks"] += 1
            self.apply(sn, sn.node.fetch_failed(txid, source, self.node_time(sn)),
                       f"ask {txid} of {source} failed")

    def partition(self) -> None:
        if not self.faults_on:
            return
        names = list(self.nodes)
        kind = self.rng.choice(["split", "isolate", "link"])
        if kind == "split":
            self.rng.shuffle(names)
            cut = self.rng.randint(1, len(names) - 1)
            a, b = names[:cut], names[cut:]
            links = {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}
        elif kind == "isolate":
            x = self.rng.choice(names)
            links = {(x, y) for y in names if y != x} | {(y, x) for y in names if y != x}
        else:  # one lost connection (spec: "net adapter failure")
            x, y = self.rng.sample(names, 2)
            links = {(x, y), (y, x)}
        self.blocked |= links
        self.log("partition (%s): %s", kind, sorted(links))
        self.at(self.now + self.rng.randint(100, 1_500), self.unblock, frozenset(links))

    def isolate(self, group: list[str], duration: int) -> None:
        """Cut ``group`` from the other nodes now, for ``duration`` (scripted faults)."""
        if not self.faults_on:
            return
        rest = [n for n in self.nodes if n not in group]
        links = frozenset({(a, b) for a in group for b in rest} | {(b, a) for a in group
                                                                    for b in rest})
        self.blocked |= links
        self.log("partition (scripted): %s | %s", group, rest)
        self.at(self.now + duration, self.unblock, links)

    def unblock(self, links: frozenset) -> None:
        self.blocked -= links
        self.log("links heal: %s", sorted(links))

    def heal(self) -> None:
        self.faults_on = False
        self.blocked.clear()
        self.log("faults stop; network heals; every node restarts")
        for sn in self.nodes.values():
            if not sn.up:
                self.start(sn)

    # ------------------------------------------------------------------ invariants

    def created_add(self, tx: TxMeta) -> None:
        i = bisect.bisect_left(self.created, tx.key)
        if not self.split_allowed and not self.horizon and i < len(self.agreed):
            self.fail(f"invariant 4: new transaction {tx.txid}@{tx.timestamp} sorts before "
                      f"synchronised {self.agreed[i].txid}@{self.agreed[i].timestamp}")
        self.created.insert(i, tx.key)
        self.metas[tx.txid] = tx

    def created_remove(self, tx: TxMeta) -> None:
        i = bisect.bisect_left(self.created, tx.key)
        if i < len(self.agreed) and self.agreed[i].txid == tx.txid:
            self.fail(f"{tx.txid} was synchronised although never persisted")
        del self.created[i]

    def check_synchronised(self, sn: SimNode, ready: Ready, via_tail: bool) -> int:
        """Invariants 1, 3, 4 on every append.

        In a split, queues may diverge, but (protocol.py, "Where safety ends") only between
        two nodes of which one went on without the other: checked on the ADD that
        diverges first (a tail segment only copies a divergence made by an ADD)."""
        if not ready.synchronised:
            return 0
        node, fresh = sn.node, 0
        start = node.seq - len(ready.synchronised)
        if start > len(self.agreed):  # a truncation re-based the record below our queue
            full = self.full_queue(sn)
            for q in range(len(self.agreed), start):
                self.agreed.append(full[q])
                self.agreed_by.append(sn.name)
        for offset, tx in enumerate(ready.synchronised):
            p = start + offset
            if p < len(self.agreed):
                if self.agreed[p] != tx:
                    what = (f"invariant 1: {sn.name} synchronised {tx.txid} at seq {p + 1} "
                            f"where another queue has {self.agreed[p].txid}")
                    first = self.agreed_by[p]
                    # Whom it diverges from: the first adder, and (after a truncation
                    # re-based the record) every node whose durable queue has the entry
                    # there now — the first adder may itself have truncated it since.
                    holders = {first} | {n for n, o in self.nodes.items()
                                         if len(o.synced) > p
                                         and o.synced[p] == self.agreed[p]}
                    holders.discard(sn.name)
                    if not self.split_allowed or (not via_tail and not any(
                            (sn.name, h) in self.ever_excluded
                            or (h, sn.name) in self.ever_excluded for h in holders)):
                        self.fail(what + f" (added there first by {first})")
                    self.divergences.append(what)
                    self.log("%s", what)
            else:
                self.agreed.append(tx)
                self.agreed_by.append(sn.name)
                fresh += 1
                if not self.split_allowed and not self.horizon and (p >= len(self.created)
                                               or self.created[p] != tx.key):
                    self.fail(f"invariant 4: {tx.txid} at seq {p + 1} is not the next "
                              "transaction in (timestamp, id) order of all that exist")
            self.log("%s synchronises %s at seq %d", sn.name, tx.txid, p + 1)
        synced = node.synchronised
        if len({t.txid for t in synced}) != len(synced):
            self.fail(f"invariant 3: {sn.name} has a transaction twice")
        return fresh

    def good_prefixes(self, truncated: dict[str, list[TxMeta]] | None = None,
                      ) -> dict[str, list[TxMeta]]:
        """Each node's persisted synchronised queue up to its split point, if it has one
        (protocol.py, "Split recovery": its last known good state)."""
        out = {}
        for name, sn in self.nodes.items():
            point = sn.durable.split_point
            out[name] = sn.synced if point is None else sn.synced[:point]
        return out | (truncated or {})

    def check_split_points(self, truncated: dict[str, list[TxMeta]] | None = None) -> None:
        """The split point claim: the good prefixes of any two nodes are consistent (one
        is a prefix of the other)."""
        prefixes = self.good_prefixes(truncated)
        for name, good in prefixes.items():
            for other, theirs in prefixes.items():
                n = min(len(good), len(theirs))
                if other != name and good[:n] != theirs[:n]:
                    i = next(i for i in range(n) if good[i] != theirs[i])
                    self.fail(f"split point: {name}'s queue up to its split point "
                              f"{self.nodes[name].durable.split_point} has {good[i].txid} "
                              f"at seq {i + 1}, {other}'s has {theirs[i].txid}")

    def rebase_agreed(self, truncated: dict[str, list[TxMeta]]) -> None:
        """After a truncation the positions past it are no longer agreed by anyone who
        truncated: the agreed sequence becomes the longest good prefix (a node's
        persisted queue up to its split point, if any; ``truncated``: the queue a node
        truncated to, before the rest of its Ready), keeping who first added each entry
        that is still at its place."""
        self.check_split_points(truncated)
        prefixes = self.good_prefixes(truncated)
        name = max(prefixes, key=lambda n: len(prefixes[n]))
        holder = self.nodes[name]
        agreed = list(prefixes[name])
        by = [self.agreed_by[i] if i < len(self.agreed) and self.agreed[i] == tx
              else holder.name for i, tx in enumerate(agreed)]
        self.agreed, self.agreed_by = agreed, by

    def check_durable(self, sn: SimNode, ready: Ready) -> None:
        """Invariant 5: the persisted state is the node's state (the Ready is complete).

        The incoming queues are compared in full when the Ready persisted something and
        on every 8th step otherwise (a change the Ready forgot shows up there too)."""
        d, node = sn.durable, sn.node
        if d.counter != node.counter or d.seq != node.seq or (
                d.agreed and d.agreed[-1].txid != node.merge_base) or (
                d.split_point != node.split_point) or d.floor != node.floor:
            self.fail(f"invariant 5: {sn.name} persisted state differs from its state")
        if d.agreed != sn.synced[d.floor:]:
            self.fail(f"invariant 5: {sn.name} persisted agreed queue is not what its Readies "
                      "agreed")
        if ready.must_persist or self.event_count % 8 == 0:
            live = [i for i in node.incoming if i.acquired]
            if len(live) != len(d.incoming) or any(d.incoming.get(i.tx.txid) != i
                                                   for i in live):
                self.fail(f"invariant 5: {sn.name} persisted incoming queue differs: "
                          f"{sorted(d.incoming)} vs {[i.tx.txid for i in live]}")

    def check_acked(self, sn: SimNode) -> None:
        """Invariant 2: acknowledged means persisted in the incoming or synchronised queue."""
        d = sn.durable
        for txid in self.acked[sn.name]:
            if txid not in d.incoming and txid not in sn.synced_ids:
                self.fail(f"invariant 2: acknowledged {txid} is lost at {sn.name}")


def cfg_settle(cfg: SimConfig) -> str:
    return f"{cfg.settle} ms"


def run_simulation(config: SimConfig, **kwargs) -> SimResult:
    return Simulation(config, **kwargs).run()


def soak(seconds: float) -> int:
    """Random seeds, sizes, fault rates, max-peer-lags, split recoveries and LogMaxSizes
    for ``seconds``; a failure raises SimulationFailure with the command that replays it.
    Returns how many runs passed."""
    rng = random.Random()
    started, runs = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        seed, nodes, rate = rng.randrange(2**32), rng.choice([3, 3, 5]), rng.random()
        lag = rng.choice([None, None, None, 300, 1_000])
        extra = {}
        if lag is not None:
            extra = dict(split_recovery=rng.choice(list(SplitRecovery)),
                         long_partitions=rng.randint(0, 2), fault_time=6_000)
        if rng.random() < 0.25:  # a small LogMaxSize: laggers need seeding
            extra["retention"] = Retention(max_entries=rng.choice([2, 5, 20]))
        config = SimConfig.derive(seed, nodes, rate, max_peer_lag=lag, **extra)
        try:
            run_simulation(config)
        except SimulationFailure:
            raise
        except Exception as exc:  # a crash of the node under test: say how to replay
            raise SimulationFailure(f"{type(exc).__name__}: {exc}\nreplay: "
                                    f"{config.replay_command()}") from exc
        runs += 1
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--fault-rate", type=float, default=0.5)
    parser.add_argument("--soak", type=float, default=0.0,
                        help="run random seeds for this many seconds")
    parser.add_argument("--history", action="store_true", help="print the event history")
    parser.add_argument("--modes", help="comma-separated master modes, e.g. "
                        "read-write,read-only,muted")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a SimConfig field (Python literal)")
    args = parser.parse_args(argv)
    if args.soak:
        runs = soak(args.soak)
        print(f"{runs} runs, {args.soak:.0f} s, no failure")
        return 0
    overrides = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if name == "split_recovery":
            overrides[name] = SplitRecovery.parse(value.strip("'\""))
        elif name == "retention":  # LogMaxSize of every node
            overrides[name] = Retention(max_entries=int(value))
        else:
            overrides[name] = ast.literal_eval(value)
    if args.modes:
        overrides["modes"] = tuple(Mode(m) for m in args.modes.split(","))
    result = run_simulation(SimConfig.derive(args.seed, args.nodes, args.fault_rate,
                                             **overrides), keep_history=0)
    if args.history:
        print("\n".join(result.history))
    print(f"seed {args.seed}: {result.events} events, {result.synchronised} synchronised, "
          f"converged at {result.converged_at}, {len(result.truncations)} truncations, "
          f"{len(result.divergences)} divergences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
