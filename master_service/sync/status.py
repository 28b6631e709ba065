"""What the admin status shows of a master's sync side (GET /sync/status, the status
page): the core's views, the transport's reachability, the execution's positions."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from master_service.sync.messages import Mode
from master_service.sync.ready import Activity, Ready

__all__ = ["Health", "PeerInfo", "driver_status"]

log = logging.getLogger("txcluster.sync")


@dataclass
class PeerInfo:
    """What the status page shows of a peer."""

    last_heard: float | None = None  # wall clock, seconds
    seq: int | None = None  # agreed position it posted
    executed: int | None = None  # its last executed position


class Health:
    """What the Readies say of the peering's health, kept for the status and logged:
    excluded peers (a suspected split), divergences, peers beyond our horizon, and
    whether this data centre needs seeding."""

    def __init__(self) -> None:
        self.divergences: list[dict[str, Any]] = []
        self.split_suspected: frozenset[str] = frozenset()
        # peers behind our floor (they need seeding), and whether we need it ourselves
        self.beyond_horizon: frozenset[str] = frozenset()
        self.needs_seeding = False

    def note(self, ready: Ready) -> None:
        if ready.split_suspected is not None:
            self.split_suspected = ready.split_suspected
            if ready.split_suspected:
                log.warning("sync: going on without %s (not heard for max-peer-lag)",
                            ", ".join(sorted(ready.split_suspected)))
            else:
                log.warning("sync: every peer is back")
        for inc in ready.inconsistencies:
            if inc.kind == "beyond-horizon":
                log.error("sync: peer %s needs seeding: %s", inc.peer, inc.detail)
            elif inc.kind == "lost-at-origin":
                log.warning("sync: a transaction of %s was lost there: %s", inc.peer,
                            inc.detail)
            else:
                self.diverged(inc.peer, inc.kind, inc.detail)
        for peer, pos in ready.fingerprint_agrees:
            log.warning("sync: peer %s agrees with our fingerprint again at position %d",
                        peer, pos)
        if ready.beyond_horizon is not None:
            self.beyond_horizon = ready.beyond_horizon
        if ready.needs_seeding is not None:
            self.needs_seeding = ready.needs_seeding
            if ready.needs_seeding:
                log.critical("sync: this data centre needs seeding: it lags behind the "
                             "floor of every peer (they forgot the agreed transactions it "
                             "still needs, past LogMaxSize / LogMaxDepth); replay can no "
                             "longer bring it up to date")
            else:
                log.warning("sync: a peer can serve this data centre again")

    def diverged(self, peer: str, kind: str, detail: str) -> None:
        log.error("sync: divergence with %s (%s): %s", peer, kind, detail)
        self.divergences.append({"peer": peer, "kind": kind, "detail": detail,
                                 "time": time.time()})
        del self.divergences[:-50]


def driver_status(driver: Any) -> dict[str, Any]:
    """The admin status of a master's sync side (``SyncDriver.status``)."""
    node = driver.node
    now = time.time()
    stale = 3 * max(driver.timing.idle_interval, driver.timing.round_timeout) / 1000
    modes = node.peers if node else {}
    matches = node.fingerprint_matches if node else {}
    waited = [p for p, m in modes.items() if m is not Mode.MUTED]
    missing = [p for p in waited if driver.peers[p].last_heard is None
               or now - driver.peers[p].last_heard > stale]
    if driver.rolling_back:
        state = "recovering"
    elif driver.health.split_suspected or driver.split_point is not None:
        state = "split"
    elif missing:
        state = "waiting"
    else:
        state = "connected"
    return {
        "node_id": driver.node_id, "data_centre": driver.data_centre,
        "mode": driver.mode.value, "state": state, "missing_peers": sorted(missing),
        "seq": node.seq if node else 0, "executed_seq": driver.executed_pos,
        # agreed entries up to "floor" are forgotten; "agreed_held" are kept
        "floor": node.floor if node else 0,
        "agreed_held": len(node.synchronised) if node else 0,
        "needs_seeding": driver.health.needs_seeding,
        "beyond_horizon": sorted(driver.health.beyond_horizon),
        "executed_fingerprint": driver.executed_fp,
        "merge_base": node.merge_base if node else None,
        "counter": node.counter if node else 0,
        "activity": node.activity.value if node else Activity.BUSY.value,
        "incoming": len(node.incoming) if node else 0,
        "split_suspected": sorted(driver.health.split_suspected),
        "split_recovery": driver.split_recovery.value,
        "split_point": driver.split_point,
        "split_backup": driver.split_backup_name,
        "recovery_problem": driver.recovery_problem,
        "failed": driver.failed,
        "peers": [
            {"id": p, "url": driver.transport.urls.get(p),
             "mode": modes.get(p, Mode.READ_WRITE).value,
             "reachable": driver.transport.reachable.get(p),
             "last_heard_s": round(now - i.last_heard, 3) if i.last_heard else None,
             "seq": i.seq, "executed_seq": i.executed,
             "fingerprint_match": matches.get(p)}
            for p, i in sorted(driver.peers.items())],
        "divergences": list(driver.health.divergences[-20:]),
    }


def seeding_before_peering(node_id: str, data_centre: str | None) -> dict[str, Any]:
    """The admin status of a master seeding its data centre before it peers (nothing
    agreed yet): the keys every peering status has that a reader polls (positions,
    counts, peers, the states of a split), at their values before anything is agreed,
    so that a tool waiting for convergence reads this one like any other."""
    return {
        "node_id": node_id, "data_centre": data_centre, "state": "seeding",
        "missing_peers": [], "seq": 0, "executed_seq": 0, "floor": 0, "agreed_held": 0,
        "beyond_horizon": [], "merge_base": None, "counter": 0, "incoming": 0,
        "split_suspected": [], "split_point": None, "recovery_problem": None,
        "failed": None, "peers": [], "divergences": [],
    }
