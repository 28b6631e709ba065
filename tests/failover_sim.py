"""Seeded deterministic simulator of failover between masters that share workers
(TigerBeetle VOPR style; docs/design/failover.md).

The pure cores run unchanged: ``master_service.failover.FailoverNode`` for each master,
``worker_service.epochs`` for each worker's grant rule; this file is their network, their
disks and their operators. Everything — masters (2-3), workers (3-5), message delays,
drops and duplicates, partitions (a node cut off; the primary cut from its peers but not
from the workers; workers split between masters; single links), pauses of any length
(SIGSTOP; also in the middle of a step: decided, paused, sent when woken), crashes and
restarts with durable state kept, client transactions — derives from one integer seed
through ``random.Random(seed)``. Time is an integer, in milliseconds.

A run has a *fault phase*, then everything heals (partitions lifted, paused nodes woken,
crashed ones restarted) and a *liveness phase* without faults. Invariants checked after
every event that changed a durable state or acknowledged something:

I1 never two writers: no worker applies a change of epoch e after it granted or saw an
   epoch e' > e; no two masters are granted one epoch by a majority; at most one master
   becomes primary for an epoch.
I2 nothing acknowledged is lost: every transaction acknowledged to a client is, at its
   position, in the log of every master that could win the next epoch (whose log is at
   least as up to date as the histories of some majority of the workers, crashed ones
   included), and in the history of every worker whose last entry is at or beyond it.
I3 histories are prefix-consistent (log matching): any two histories — workers' and
   masters' logs — holding an entry of the same epoch at the same position are
   identical up to it, and epochs never decrease along a history.

At the end of the liveness phase (after a quiet spell without clients):
L1 within ``liveness_bound`` of the heal, transactions are acknowledged again, and
   exactly one master is primary and writable;
L2 every other master (the old primary included) is a secondary holding the primary's
   log, and every worker's history is the primary's log.

A broken rule must be caught: ``Config.check_epochs=False`` gives workers that do not
check epochs, and the checker then fails (tests/test_failover_sim.py).

Replay a seed:  .venv/bin/python -m tests.failover_sim --seed 123
Many seeds:     .venv/bin/python -m tests.failover_sim --seeds 0-500
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import sys
from collections import deque
from dataclasses import dataclass, field

from master_service.failover.messages import (
    AskGrant,
    Durable,
    Role,
    Timing,
    WorkerReply,
    WriteEntries,
)
from master_service.failover.node import FailoverNode, last_of
from worker_service import epochs


class Violation(AssertionError):
    """An invariant broke; the message names the seed that reproduces it."""


@dataclass
class Config:
    masters: int = 3
    workers: int = 3
    max_delay: int = 20  # ms, uniform from 1
    drop: float = 0.0
    duplicate: float = 0.0
    fault_ms: int = 20_000
    faults: int = 6  # random fault events in the fault phase
    client_every: tuple[int, int] = (50, 400)
    tick_ms: int = 100
    liveness_bound: int = 15_000
    quiet_ms: int = 3_000  # no clients at the end: the logs settle before L2
    check_epochs: bool = True  # False: the broken worker (the checker must catch it)
    timing: Timing = field(default_factory=Timing)

    @classmethod
    def from_seed(cls, rng: random.Random) -> Config:
        return cls(masters=rng.randint(2, 3), workers=rng.randint(3, 5),
                   max_delay=rng.choice((2, 10, 50, 200)),
                   drop=rng.choice((0.0, 0.02, 0.1)),
                   duplicate=rng.choice((0.0, 0.02, 0.1)),
                   faults=rng.randint(2, 10))


@dataclass
class Report:
    seed: int
    config: Config
    acked: int
    takeovers: int  # masters that became primary
    healed_at: int
    recovered_after: int | None  # ms from the heal to the first acknowledgement
    primary: str | None
    events: int


def chain_of(history: tuple[epochs.Entry, ...]) -> list[int]:
    chain, previous = [], 0
    for entry in history:
        previous = hash((previous, entry))
        chain.append(previous)
    return chain


class Sim:
    def __init__(self, seed: int, config: Config | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = config or Config.from_seed(self.rng)
        self.now = 0
        self.masters = tuple(f"m{i}" for i in range(self.cfg.masters))
        self.workers = tuple(f"w{i}" for i in range(self.cfg.workers))
        self.majority = len(self.workers) // 2 + 1
        self.queue: list[tuple[int, int, tuple]] = []
        self.counter = itertools.count()
        self.durable: dict[str, Durable] = {m: Durable() for m in self.masters}
        self.nodes: dict[str, FailoverNode] = {m: self._node(m) for m in self.masters}
        self.ledgers = {w: epochs.EpochLedger() for w in self.workers}
        self.state = dict.fromkeys(self.masters + self.workers, "up")
        self.inbox: dict[str, list[tuple[str, object]]] = {n: [] for n in self.state}
        self.hold: set[str] = set()  # pause these after their next step, its sends held
        self.held: dict[str, list] = {n: [] for n in self.state}
        self.cuts: dict[int, set[frozenset[str]]] = {}
        self.acked: dict[str, tuple[int, epochs.Entry]] = {}
        self.ack_times: list[tuple[int, str]] = []  # (when, by which master)
        self.primaries: dict[int, str] = {}
        self.grants: dict[int, dict[str, str]] = {}
        self.highest = dict.fromkeys(self.workers, 0)
        self.txids = itertools.count()
        self.trace: deque[str] = deque(maxlen=30)
        self.events = 0
        self._chains: dict[int, tuple[tuple, list[int]]] = {}
        self.dirty = False
        self.clients_until = 0
        self.healed_at = 0
        self.stale_applied = 0  # changes a worker applied from an epoch older than its own
        self.woken_writes = 0  # changes a paused master decided before and sent after
        for n in self.masters:
            self.at(self.rng.randint(1, self.cfg.tick_ms), "tick", n)

    # --- scheduling ------------------------------------------------------------------

    def at(self, time: int, *event) -> None:
        heapq.heappush(self.queue, (time, next(self.counter), event))

    def _node(self, m: str, now: int = 0) -> FailoverNode:
        return FailoverNode.restore(m, tuple(p for p in self.masters if p != m), self.workers,
                                    self.durable[m], now, rank=self.masters.index(m),
                                    timing=self.cfg.timing)

    def schedule_random_faults(self) -> None:
        rng, cfg = self.rng, self.cfg
        for _ in range(cfg.faults):
            t = rng.randint(1_000, cfg.fault_ms)
            kind = rng.choice(("crash", "pause", "pause", "isolate", "primary_from_peers",
                               "split_workers", "link"))
            length = rng.choice((300, 2_000, 5_000, 12_000))
            if kind in ("crash", "pause"):
                node = rng.choice(self.masters + self.workers + ("primary",) * 2)
                self.at(t, kind, node, rng.random() < 0.5)
                self.at(t + length, "restart" if kind == "crash" else "wake", node)
            else:
                self.at(t, "cut", kind, length, rng.random())

    def run(self, *, heal_at: int | None = None, random_faults: bool = True) -> Report:
        cfg = self.cfg
        self.healed_at = cfg.fault_ms if heal_at is None else heal_at
        if random_faults:
            self.schedule_random_faults()
        self.at(1, "promote", self.masters[0])  # the configured primary, as `txcluster up`
        end = self.healed_at + cfg.liveness_bound
        self.clients_until = end - cfg.quiet_ms
        self.at(self.rng.randint(*cfg.client_every), "client")
        self.at(self.healed_at, "heal")
        while self.queue and self.queue[0][0] <= end:
            time, _, event = heapq.heappop(self.queue)
            if time > self.healed_at and event[0] in ("crash", "pause", "cut"):
                continue  # the liveness phase has no faults
            self.now = time
            self.events += 1
            self._event(event)
            if self.dirty:
                self.dirty = False
                self.check()
        self.now = end
        return self.check_liveness()

    # --- events ----------------------------------------------------------------------

    def _event(self, event: tuple) -> None:
        kind = event[0]
        if kind == "tick":
            node = event[1]
            self.at(self.now + self.cfg.tick_ms, "tick", node)
            if self.state[node] == "up":
                self._master_step(node, lambda n: n.tick(self.now))
        elif kind == "deliver":
            self._deliver(*event[1:])
        elif kind == "client":
            self._client()
        elif kind == "promote":
            if self.state[event[1]] == "up":
                self.trace.append(f"{self.now} promote {event[1]}")
                self._master_step(event[1], lambda n: n.promote(self.now))
        elif kind in ("crash", "pause", "restart", "wake"):
            node = self.primary_now() if event[1] == "primary" else event[1]
            if node is not None:
                getattr(self, f"_{kind}")(node, *event[2:])
        elif kind == "cut":
            self._cut(*event[1:])
        elif kind == "uncut":
            self.cuts.pop(event[1], None)
            self.trace.append(f"{self.now} uncut {event[1]}")
        elif kind == "heal":
            self._heal()

    def primary_now(self) -> str | None:
        for m in self.masters:
            if self.state[m] != "down" and self.nodes[m].role is Role.PRIMARY:
                return m
        return None

    def _crash(self, node: str, *_) -> None:
        if self.state[node] == "down":
            return
        self.trace.append(f"{self.now} crash {node}")
        self.state[node] = "down"
        self.inbox[node].clear()
        self.held[node].clear()
        self.hold.discard(node)

    def _restart(self, node: str) -> None:
        if self.state[node] != "down":
            return
        self.trace.append(f"{self.now} restart {node}")
        self.state[node] = "up"
        if node in self.nodes:
            self.nodes[node] = self._node(node, self.now)
        else:
            self.ledgers[node] = self.ledgers[node].restarted(self.now)

    def _pause(self, node: str, mid_step: bool = False) -> None:
        if self.state[node] != "up":
            return
        self.trace.append(f"{self.now} pause {node}{' (mid-step)' if mid_step else ''}")
        if mid_step and node in self.nodes:
            self.hold.add(node)  # paused once it decided a change, before it sent it
        else:
            self.state[node] = "paused"

    def _wake(self, node: str) -> None:
        if self.state[node] != "paused":
            self.hold.discard(node)  # it decided no change while it was to be paused
            return
        self.trace.append(f"{self.now} wake {node}")
        self.state[node] = "up"
        for send in self.held[node]:
            if isinstance(send.message, WriteEntries) and send.message.entries:
                self.woken_writes += 1
            self._send(node, send.to, send.message)
        self.held[node].clear()
        waiting, self.inbox[node] = self.inbox[node], []
        for frm, message in waiting:
            self._deliver(frm, node, message)

    def _cut(self, kind: str, length: int, r: float) -> None:
        masters, workers = self.masters, self.workers
        primary = self.primary_now() or masters[0]
        if kind == "isolate":
            everyone = masters + workers
            node = everyone[int(r * len(everyone))]
            pairs = {frozenset((node, o)) for o in everyone if o != node}
        elif kind == "primary_from_peers":  # it still reaches every worker
            pairs = {frozenset((primary, m)) for m in masters if m != primary}
        elif kind == "split_workers":
            away = set(workers[: 1 + int(r * (len(workers) - 1))])
            pairs = {frozenset((primary, w)) for w in away}
            pairs |= {frozenset((m, w)) for m in masters if m != primary
                      for w in workers if w not in away}
        else:
            everyone = masters + workers
            a = everyone[int(r * len(everyone))]
            b = everyone[int(r * 7919) % len(everyone)]
            pairs = {frozenset((a, b))} if a != b else set()
        key = next(self.counter)
        self.cuts[key] = pairs
        self.at(self.now + length, "uncut", key)
        self.trace.append(f"{self.now} cut {kind} {sorted(map(sorted, pairs))}")

    def _heal(self) -> None:
        self.trace.append(f"{self.now} heal")
        self.cuts.clear()
        for node in self.state:
            self._restart(node)
            self._wake(node)

    def _client(self) -> None:
        if self.now < self.clients_until:
            self.at(self.now + self.rng.randint(*self.cfg.client_every), "client")
        up = [m for m in self.masters if self.state[m] == "up"]
        if not up:
            return
        writable = [m for m in up if self.nodes[m].writable(self.now)]
        target = writable[0] if writable and self.rng.random() < 0.8 else self.rng.choice(up)
        txid = f"t{next(self.txids)}"
        self._master_step(target, lambda n: n.submit(txid, self.now))

    # --- the network -----------------------------------------------------------------

    def _blocked(self, a: str, b: str) -> bool:
        pair = frozenset((a, b))
        return any(pair in pairs for pairs in self.cuts.values())

    def _send(self, frm: str, to: str, message: object) -> None:
        if self._blocked(frm, to) or self.rng.random() < self.cfg.drop:
            return
        copies = 2 if self.rng.random() < self.cfg.duplicate else 1
        for _ in range(copies):
            self.at(self.now + self.rng.randint(1, self.cfg.max_delay),
                    "deliver", frm, to, message)

    def _deliver(self, frm: str, to: str, message: object) -> None:
        if self._blocked(frm, to) or self.state[to] == "down":
            return
        if self.state[to] == "paused":
            self.inbox[to].append((frm, message))  # the socket's buffer
            return
        if to in self.nodes:
            self._master_step(to, lambda n: n.receive(message, self.now))
        else:
            self._worker_step(to, frm, message)

    # --- the nodes -------------------------------------------------------------------

    def _master_step(self, m: str, step) -> None:
        node = self.nodes[m]
        ready = step(node)
        if ready.persist is not None:
            self.durable[m] = ready.persist
            self.dirty = True
        if ready.role is not None:
            self.trace.append(f"{self.now} {ready.why}")
            if ready.role is Role.PRIMARY:
                self._became_primary(m, node.epoch)
        for txid in ready.acks:
            position = next(i for i, e in enumerate(node.log) if e[1] == txid)
            self.acked[txid] = (position, node.log[position])
            self.ack_times.append((self.now, m))
            self.dirty = True
        if m in self.hold and any(isinstance(s.message, WriteEntries) and s.message.entries
                                  for s in ready.sends):
            self.hold.discard(m)
            self.state[m] = "paused"
            self.held[m].extend(ready.sends)
            return
        for send in ready.sends:
            self._send(m, send.to, send.message)

    def _became_primary(self, m: str, epoch: int) -> None:
        other = self.primaries.setdefault(epoch, m)
        if other != m:
            self.fail(f"I1: {other} and {m} both became primary of epoch {epoch}")

    def _worker_step(self, w: str, frm: str, message: object) -> None:
        before = self.ledgers[w]
        seen = max(self.highest[w], before.promised)
        if isinstance(message, AskGrant):
            ledger, verdict = epochs.ask_grant(before, message.epoch, message.candidate,
                                               self.now, lease=self.cfg.timing.grant_lease,
                                               manual=message.manual)
            if verdict.kind == epochs.GRANTED and ledger.promised > before.promised:
                self._granted(w, message.epoch, message.candidate)
            epoch = message.epoch
        elif isinstance(message, WriteEntries):
            ledger, verdict = epochs.write(before, message.epoch, message.master,
                                           message.start, message.prev_epoch,
                                           message.entries, self.now,
                                           check_epochs=self.cfg.check_epochs)
            epoch = message.epoch
            if ledger.history != before.history:
                self.dirty = True
                if epoch < seen:
                    self.stale_applied += 1
                    self.fail(f"I1: {w} applied a change of epoch {epoch} from "
                              f"{message.master} after epoch {seen}")
        else:
            return
        self.highest[w] = max(seen, ledger.promised)
        if ledger.promised != before.promised:
            self.dirty = True
        self.ledgers[w] = ledger
        reply = WorkerReply(w, epoch, verdict.kind, verdict.promised, verdict.holder,
                            verdict.runs)
        self._send(w, frm, reply)

    def _granted(self, w: str, epoch: int, candidate: str) -> None:
        by_worker = self.grants.setdefault(epoch, {})
        by_worker[w] = candidate
        winners = {c for c in set(by_worker.values())
                   if sum(1 for v in by_worker.values() if v == c) >= self.majority}
        if len(winners) > 1:
            self.fail(f"I1: epoch {epoch} granted by a majority to {sorted(winners)}")

    # --- invariants ------------------------------------------------------------------

    def fail(self, what: str) -> None:
        trace = "\n  ".join(self.trace)
        raise Violation(f"seed {self.seed} at {self.now} ms: {what}\n"
                        f"replay: python -m tests.failover_sim --seed {self.seed}\n"
                        f"config: {self.cfg}\nlast events:\n  {trace}")

    def histories(self) -> dict[str, tuple[epochs.Entry, ...]]:
        out = {w: self.ledgers[w].history for w in self.workers}
        out.update({m: self.durable[m].log for m in self.masters})
        return out

    def _chain(self, history: tuple[epochs.Entry, ...]) -> list[int]:
        # Histories are immutable tuples and mostly unchanged between two checks.
        cached = self._chains.get(id(history))
        if cached is None or cached[0] is not history:
            cached = self._chains[id(history)] = (history, chain_of(history))
            if len(self._chains) > 64:
                self._chains.pop(next(iter(self._chains)))
        return cached[1]

    def check(self) -> None:
        histories = self.histories()
        # I3: log matching, and epochs never decrease along a history.
        seen: dict[tuple[int, int], tuple[int, str]] = {}
        for name, history in histories.items():
            for position, (link, entry) in enumerate(zip(self._chain(history), history,
                                                         strict=True)):
                if position and entry[0] < history[position - 1][0]:
                    self.fail(f"I3: epochs decrease in {name} at {position}")
                key = (position, entry[0])
                other = seen.setdefault(key, (link, name))
                if other[0] != link:
                    self.fail(f"I3: {name} and {other[1]} hold entries of epoch {entry[0]} "
                              f"at {position} with different histories up to it")
        # I2: what was acknowledged.
        lasts = {w: last_of(self.ledgers[w].history) for w in self.workers}
        for name, history in histories.items():
            mine = last_of(history)
            if name in self.ledgers:
                must = [(p, e) for p, e in self.acked.values() if mine >= (e[0], p + 1)]
            elif sum(1 for v in lasts.values() if v <= mine) >= self.majority:
                must = list(self.acked.values())  # a master that could win the next epoch
            else:
                continue
            for position, entry in must:
                if position >= len(history) or history[position] != entry:
                    self.fail(f"I2: acknowledged {entry} at {position} missing from "
                              f"{name} (last entry {mine})")

    def check_liveness(self) -> Report:
        now, t = self.now, self.cfg.timing
        after = [a - self.healed_at for a, _ in self.ack_times if a >= self.healed_at]
        if not after:
            self.fail(f"L1: nothing acknowledged within {self.cfg.liveness_bound} ms "
                      "of the heal")
        primaries = [m for m in self.masters if self.nodes[m].role is Role.PRIMARY]
        writable = [m for m in self.masters if self.nodes[m].writable(now)]
        if len(primaries) != 1 or writable != primaries:
            self.fail(f"L1: primaries {primaries}, writable {writable} at the end")
        primary = self.nodes[primaries[0]]
        for m in self.masters:
            node = self.nodes[m]
            if m != primary.id and (node.role is not Role.SECONDARY or node.log != primary.log
                                    or node.primary != primary.id):
                self.fail(f"L2: {m} is {node.role.value} following {node.primary} with "
                          f"{len(node.log)} entries; the primary {primary.id} has "
                          f"{len(primary.log)}")
        for w in self.workers:
            if self.ledgers[w].history != primary.log:
                self.fail(f"L2: {w} holds {len(self.ledgers[w].history)} entries, the "
                          f"primary {len(primary.log)} (lease {t.grant_lease} ms)")
        return Report(self.seed, self.cfg, len(self.acked), len(self.primaries),
                      self.healed_at, after[0], primary.id, self.events)


def run_seed(seed: int, **overrides) -> Report:
    sim = Sim(seed)
    for key, value in overrides.items():
        setattr(sim.cfg, key, value)
    return sim.run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int)
    group.add_argument("--seeds", help="a range, e.g. 0-500")
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        low, high = (int(x) for x in args.seeds.split("-"))
        seeds = list(range(low, high))
    worst = 0
    for seed in seeds:
        try:
            report = run_seed(seed)
        except Violation as broke:
            print(broke)
            return 1
        worst = max(worst, report.recovered_after or 0)
        if args.seed is not None:
            print(report)
    print(f"{len(seeds)} seeds passed; writes resumed at most {worst} ms after the heal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
