"""Fault kinds: each is a function of the round (its cluster, its seeded random source,
its event history) that breaks something and heals it before returning.

The registry is what the seed chooses from. A kind names what it needs of the topology:
today every kind needs only one data centre ("single-dc"); the peering kinds (partitions
between data centres made with network namespaces, kill -9 of a peer master) will
register with ``needs="peering"`` and be chosen only for multi-master rounds.
"""

from __future__ import annotations

import os
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


@dataclass(frozen=True)
class FaultKind:
    name: str
    inject: Callable[[Round], None]
    needs: str = "single-dc"  # "single-dc" | "peering"
    doc: str = ""


FAULTS: dict[str, FaultKind] = {}


def fault(name: str, needs: str = "single-dc") -> Callable:
    def register(fn: Callable[[Round], None]) -> Callable[[Round], None]:
        FAULTS[name] = FaultKind(name, fn, needs, (fn.__doc__ or "").strip())
        return fn
    return register


def available(topology: str = "single-dc") -> list[str]:
    """Fault kinds a round of this topology may draw, in a stable order (seeds replay)."""
    return sorted(k.name for k in FAULTS.values()
                  if k.needs == "single-dc" or topology == k.needs)


def _pause(r: Round, low: float = 0.1, high: float = 1.5) -> None:
    time.sleep(r.rng.uniform(low, high))


def _restart_master(r: Round) -> None:
    _pause(r)
    r.cluster.master.start()
    r.event("restart", "master")


@fault("kill-worker")
def kill_worker(r: Round) -> None:
    """kill -9 of one worker, restarted after a random delay (writes go on meanwhile)."""
    w = r.rng.choice(r.cluster.workers)
    w.kill9()
    r.event("kill -9", f"worker {w.url}")
    _pause(r, 0.2, 2.0)
    w.start()
    r.event("restart", f"worker {w.url}")


@fault("pause-worker")
def pause_worker(r: Round) -> None:
    """SIGSTOP of one worker for a random 0.5-4 s, then SIGCONT: a worker that is cut off
    (it neither answers nor closes connections, as behind a partition) and comes back
    with requests still in flight. Stands in for isolating one worker until network
    namespaces isolate nodes."""
    w = r.rng.choice(r.cluster.workers)
    assert w.pid is not None
    os.kill(w.pid, signal.SIGSTOP)
    r.event("SIGSTOP", f"worker {w.url}")
    try:
        _pause(r, 0.5, 4.0)
    finally:
        os.kill(w.pid, signal.SIGCONT)
    r.event("SIGCONT", f"worker {w.url}")


@fault("kill-master")
def kill_master(r: Round) -> None:
    """kill -9 of the master under load, restarted after a random delay."""
    r.cluster.master.kill9()
    r.event("kill -9", "master")
    _restart_master(r)


@fault("kill-master-during-replication")
def kill_master_during_replication(r: Round) -> None:
    """A worker is killed and its store changed behind the master's back (a rogue quad:
    a state the log never had), so the master must replicate a full image to it
    ("Replicating (out of sync)"); the master is killed once that replication is seen
    under way. The rogue quad must be gone after healing (the checker counts quads)."""
    c = r.cluster
    w = r.rng.choice(c.workers)
    w.kill9()
    store = ox.Store(str(Path(w.properties["data-dir"]) / "current" / "store"))
    store.add(ox.Quad(ox.NamedNode("urn:chaos:rogue"), ox.NamedNode("urn:chaos:rogue-p"),
                      ox.Literal(str(r.seed))))
    store.flush()
    del store  # releases the RocksDB lock before the worker reopens the store
    r.event("kill -9 + rogue", f"worker {w.url}")
    w.start()
    r.event("restart", f"worker {w.url} (unknown state)")
    deadline = time.monotonic() + 10
    seen = None
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline and seen is None:
            try:
                st = client.get(f"{c.master.url}/admin/status").json()
                seen = next((x["status"] for x in st["workers"]
                             if x["status"].startswith("REPLICATION")), None)
            except (httpx.HTTPError, ValueError):
                pass
    c.master.kill9()
    r.event("kill -9", f"master ({'during ' + seen if seen else 'replication not seen'})")
    r.note("replication caught" if seen else "replication missed")
    _restart_master(r)


@fault("kill-master-during-backup")
def kill_master_during_backup(r: Round) -> None:
    """kill -9 of the master a random instant after it was asked for a backup."""
    c = r.cluster
    name = f"chaos{r.rng.randrange(10**6)}"
    outcome: list[str] = []

    def backup() -> None:
        try:
            resp = httpx.post(f"{c.master.url}/admin/backup", json={"name": name}, timeout=30)
            outcome.append(str(resp.status_code))
        except httpx.HTTPError as exc:
            outcome.append(type(exc).__name__)

    t = threading.Thread(target=backup, daemon=True)
    t.start()
    r.event("backup", name)
    time.sleep(r.rng.uniform(0.0, 0.15))
    c.master.kill9()
    t.join(30)
    r.event("kill -9", f"master (backup answered: {outcome[0] if outcome else 'nothing'})")
    _restart_master(r)
