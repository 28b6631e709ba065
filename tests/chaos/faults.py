"""Fault kinds: each is a function of the round (its topology, its seeded random source,
its event history) that breaks something and heals it before returning.

The registry is what the seed chooses from. A kind names the topologies it works on
(``needs``): the process faults work on any ("single-dc": 1 master and 3 workers on
loopback; "multi-dc": three peered masters of two data centres in a network lab, see
tests/chaos/topology.py) and pick among the masters and workers of every data centre;
the network faults need the lab ("multi-dc"). A kind may also have a ``probe`` that says
why it cannot run on this machine (tc netem missing from the kernel): the round records
the skip and its reason instead of injecting it.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pyoxigraph as ox

if TYPE_CHECKING:
    from tests.chaos.runner import Round

TOPOLOGIES = ("single-dc", "multi-dc")


@dataclass(frozen=True)
class FaultKind:
    name: str
    inject: Callable[[Round], None]
    needs: tuple[str, ...] = TOPOLOGIES
    doc: str = ""
    probe: Callable[[Round], str | None] | None = None  # why not here, or None


FAULTS: dict[str, FaultKind] = {}


def fault(name: str, needs: tuple[str, ...] = TOPOLOGIES,
          probe: Callable[[Round], str | None] | None = None) -> Callable:
    def register(fn: Callable[[Round], None]) -> Callable[[Round], None]:
        FAULTS[name] = FaultKind(name, fn, needs, (fn.__doc__ or "").strip(), probe)
        return fn
    return register


def available(topology: str = "single-dc") -> list[str]:
    """Fault kinds a round of this topology may draw, in a stable order (seeds replay)."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
    return sorted(k.name for k in FAULTS.values() if topology in k.needs)


def _pause(r: Round, low: float = 0.1, high: float = 1.5) -> None:
    time.sleep(r.rng.uniform(low, high))


def _restart_master(r: Round, master) -> None:
    _pause(r)
    master.start()
    r.healed("restart", r.label(master))


# ---------------------------------------------------------------- processes (any topology)


@fault("kill-worker")
def kill_worker(r: Round) -> None:
    """kill -9 of one worker (of any data centre), restarted after a random delay
    (writes go on meanwhile)."""
    w = r.rng.choice(r.workers)
    w.kill9()
    r.event("kill -9", r.label(w))
    _pause(r, 0.2, 2.0)
    w.start()
    r.healed("restart", r.label(w))


@fault("pause-worker")
def pause_worker(r: Round) -> None:
    """SIGSTOP of one worker for a random 0.5-4 s, then SIGCONT: a worker that is cut off
    (it neither answers nor closes connections, as behind a partition) and comes back
    with requests still in flight."""
    w = r.rng.choice(r.workers)
    assert w.pid is not None
    os.kill(w.pid, signal.SIGSTOP)
    r.event("SIGSTOP", r.label(w))
    try:
        _pause(r, 0.5, 4.0)
    finally:
        os.kill(w.pid, signal.SIGCONT)
    r.healed("SIGCONT", r.label(w))


@fault("kill-master")
def kill_master(r: Round) -> None:
    """kill -9 of a master (of any data centre) under load, restarted after a random
    delay. A peered master down for longer than max-peer-lag is missing to its peers."""
    m = r.pick(r.masters)
    m.kill9()
    r.event("kill -9", r.label(m))
    _restart_master(r, m)


@fault("kill-master-during-replication")
def kill_master_during_replication(r: Round) -> None:
    """A worker is killed and its store changed behind the master's back (a rogue quad:
    a state the log never had), so its master must replicate a full image to it
    ("Replicating (out of sync)") from another of its workers; the master is killed once
    that replication is seen under way. The rogue quad must be gone after healing (the
    checker counts quads). Only workers with a sibling in their data centre are chosen."""
    w = r.rng.choice([w for s in r.sites if len(s.workers) > 1 for w in s.workers])
    master = r.site_of(w).master
    w.kill9()
    store = ox.Store(str(Path(w.properties["data-dir"]) / "current" / "store"))
    store.add(ox.Quad(ox.NamedNode("urn:chaos:rogue"), ox.NamedNode("urn:chaos:rogue-p"),
                      ox.Literal(str(r.seed))))
    store.flush()
    del store  # releases the RocksDB lock before the worker reopens the store
    r.event("kill -9 + rogue", r.label(w))
    w.start()
    r.event("restart", f"{r.label(w)} (unknown state)")
    deadline = time.monotonic() + 10
    seen = None
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline and seen is None:
            try:
                st = client.get(f"{master.url}/admin/status").json()
                seen = next((x["status"] for x in st["workers"]
                             if x["status"].startswith("REPLICATION")), None)
            except (httpx.HTTPError, ValueError):
                pass
    master.kill9()
    r.event("kill -9", f"{r.label(master)} "
                       f"({'during ' + seen if seen else 'replication not seen'})")
    r.note("replication caught" if seen else "replication missed")
    _restart_master(r, master)


@fault("kill-master-during-backup")
def kill_master_during_backup(r: Round) -> None:
    """kill -9 of a master a random instant after it was asked for a backup."""
    master = r.pick(r.masters)
    name = f"chaos{r.rng.randrange(10**6)}"
    outcome: list[str] = []

    def backup() -> None:
        try:
            resp = httpx.post(f"{master.url}/admin/backup", json={"name": name}, timeout=30)
            outcome.append(str(resp.status_code))
        except httpx.HTTPError as exc:
            outcome.append(type(exc).__name__)

    t = threading.Thread(target=backup, daemon=True)
    t.start()
    r.event("backup", f"{name} on {r.label(master)}")
    time.sleep(r.rng.uniform(0.0, 0.15))
    master.kill9()
    t.join(30)
    r.event("kill -9", f"{r.label(master)} "
                       f"(backup answered: {outcome[0] if outcome else 'nothing'})")
    _restart_master(r, master)


@fault("wipe-dc", needs=("multi-dc",))
def wipe_dc(r: Round) -> None:
    """One master and its workers (a txcluster data centre) killed -9 and their data
    wiped — transaction log, agreed queue, stores — while the others write; restarted
    empty after a random delay. Its peers forgot what every master executed (and the
    round's log-max-size horizon more): it needs seeding, seeds itself from the peer that
    executed the most (master_service/sync/seeding.py) and must converge with nothing
    acknowledged lost (what it acknowledged was agreed, so its peers hold it)."""
    site = r.pick(r.sites)
    nodes = [site.master, *site.workers]
    for node in nodes:
        node.kill9()
    for node in nodes:
        shutil.rmtree(Path(node.properties["data-dir"]), ignore_errors=True)
    r.event("kill -9 + wipe", f"{site.name}: master and {len(site.workers)} workers")
    _pause(r, 1.0, 4.0)  # the others go on writing meanwhile
    for w in site.workers:
        w.start(wait=False)
    for w in site.workers:
        w.wait_ready()
    site.master.start()
    r.healed("restart", f"{site.name} empty")


# ---------------------------------------------------------------- network (multi-dc lab)


def _dc_pairs(r: Round) -> tuple[str, list[tuple[str, str]]]:
    """One data centre against the others: its name and every (its master, other master)
    pair, i.e. every link between data centres when there are two."""
    dcs = r.topology.dcs()
    dc = r.pick(sorted(dcs))
    return dc, [(a, b) for a in dcs[dc] for other, names in sorted(dcs.items())
                if other != dc for b in names]


def _describe(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{a}<->{b}" for a, b in pairs)


@fault("partition-dc", needs=("multi-dc",))
def partition_dc(r: Round) -> None:
    """Every link between the data centres cut (uk <-> us, both nets, nftables) for
    1.5-4 x max-peer-lag, then healed: each side detects the split after max-peer-lag and
    writes alone; after the heal split recovery (Smart) must bring every master to one
    log and every worker to one state, with nothing acknowledged lost."""
    lab, lag = r.topology.lab, r.topology.max_peer_lag_s
    dc, pairs = _dc_pairs(r)
    duration = r.rng.uniform(1.5, 4.0) * lag
    since = r.history.now()
    for a, b in pairs:
        lab.cut(a, b)
    r.event("cut", f"data centre {dc} from the others ({_describe(pairs)}) "
                   f"for {duration:.1f}s")
    watch = r.topology.watch(duration)
    split_on = r.history.now() - duration + lag + 0.5  # both sides should write alone
    alone = r.acks_by_master(split_on)
    for a, b in pairs:
        lab.uncut(a, b)
    r.healed("uncut", f"{_describe(pairs)}; seen during the cut: {watch.summary()}; "
                      f"acks during the cut {r.acks_by_master(since)}, after max-peer-lag "
                      f"{alone}")
    # Availability is no invariant of the checker, but a side that stops is worth
    # counting (spec: after max-peer-lag both parts go on executing updates).
    for side, names in sorted(r.topology.dcs().items()):
        if not sum(alone[n] for n in names):
            r.note(f"partition-dc: DC {side} acknowledged nothing after max-peer-lag")


@fault("lose-link", needs=("multi-dc",))
def lose_link(r: Round) -> None:
    """One master loses its link to one peer (both nets cut) for 1.5-3 x max-peer-lag while
    every other link is up (the spec's net adapter failure "only one connection is
    lost"): a third master relays, so no master may suspect a split (a violation if one
    does). Waits (at most 30 s) for every master to be connected first, so that what a
    fault before left over is not counted against this one."""
    t = r.topology
    a, b = sorted(r.rng.sample(sorted(t.cluster.sites), 2))
    duration = r.rng.uniform(1.5, 3.0) * t.max_peer_lag_s
    ready = t.wait_connected(30)
    t.lab.cut(a, b)
    r.event("cut", f"{a}<->{b} for {duration:.1f}s"
                   + ("" if ready else " (masters not all connected before: not judged)"))
    watch = t.watch(duration)
    t.lab.uncut(a, b)
    r.healed("uncut", f"{a}<->{b}; seen during the cut: {watch.summary()}")
    if watch.suspected and ready:
        r.violation(f"one lost link {a}<->{b} was taken for a split: "
                    f"{sorted(watch.suspected.items())}")


@fault("lossy-link", needs=("multi-dc",))
def lossy_link(r: Round) -> None:
    """5-30 % of the packets between the data centres dropped at random (nftables
    numgen, each way) for 2-6 s, then healed."""
    lab = r.topology.lab
    _, pairs = _dc_pairs(r)
    percent = r.rng.randint(5, 30)
    duration = r.rng.uniform(2.0, 6.0)
    for a, b in pairs:
        lab.lossy(a, b, percent)
    r.event("lossy", f"{percent}% loss on {_describe(pairs)} for {duration:.1f}s")
    watch = r.topology.watch(duration)
    for a, b in pairs:
        lab.lossy(a, b, 0)
    r.healed("lossless", f"{_describe(pairs)}; seen: {watch.summary()}")


@fault("slow-link", needs=("multi-dc",),
       probe=lambda r: r.topology.lab.netem_unavailable())
def slow_link(r: Round) -> None:
    """tc netem between the data centres: 50-400 ms each way (10 % jitter) and 0-2 %
    loss for 2-8 s, then healed. Skipped (with the reason) where the kernel has no
    netem."""
    lab = r.topology.lab
    _, pairs = _dc_pairs(r)
    delay = r.rng.randint(50, 400)
    loss = r.rng.choice([0.0, 0.5, 2.0])
    duration = r.rng.uniform(2.0, 8.0)
    for a, b in pairs:
        lab.slow(a, b, delay, delay // 10, loss)
    r.event("slow", f"{delay}ms +-{delay // 10}ms, {loss:g}% loss on {_describe(pairs)} "
                    f"for {duration:.1f}s")
    watch = r.topology.watch(duration)
    lab.heal()
    r.healed("fast", f"{_describe(pairs)}; seen: {watch.summary()}")
