"""What a chaos round runs on: its topology.

* ``single-dc``: 1 master and 3 workers on loopback (tests/clusters.LocalCluster).
* ``multi-dc``: the spec's UK/US case in a network lab (tests/dclab.py on tests/netlab.py,
  root only): masters uk1 (2 workers) and uk2 (1 worker) in data centre uk, us1
  (2 workers) in us, each master a sync peer of the others, split-recovery Smart,
  max-peer-lag-s 2. Each master and its workers live in a network namespace of their
  own, so partitions, lost links and lossy or slow links are made by the kernel.

Both offer the same to the runner and the faults: ``sites`` (each master with its
workers), ``repo_urls`` (one client endpoint per master), ``start``, ``heal`` (nothing
left broken), ``converge`` (wait until the cluster agrees again), ``check`` (the
invariants), ``failure_details`` (what the masters said when a round failed), ``stop``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests import netlab
from tests.chaos.checker import Verdict, check, check_peered
from tests.chaos.workload import History
from tests.clusters import LocalCluster
from tests.dclab import LAYOUT, MAX_PEER_LAG_S, Site, UkUs
from tests.procs import make_secret


class SingleDC:
    name = "single-dc"
    threads_per_master = 3

    def __init__(self, directory: Path, master_props: dict[str, str]) -> None:
        self.cluster = LocalCluster(directory, make_secret(directory / "secrets"), 3,
                                    **master_props)
        self.sites = [Site("master", self.cluster.master, self.cluster.workers)]
        self._status: dict | None = None

    @property
    def repo_urls(self) -> list[str]:
        return [self.cluster.repo_url]

    def start(self) -> str:
        self.cluster.start()
        return f"master {self.cluster.master.url}, 3 workers"

    def heal(self) -> None:
        """Every fault heals itself: nothing is left to undo."""

    def converge(self, since: float, timeout: float) -> str:
        """Until the master reports every worker in sync (AssertionError otherwise)."""
        self._status = self.cluster.wait_in_sync(timeout=timeout)
        return f"head seq {self._status['head']['seq']}"

    def check(self, history: History) -> Verdict:
        assert self._status is not None, "check() after converge()"
        return check(self._status, self.cluster.workers, self.cluster.repository_id, history)

    def failure_details(self) -> list[str]:
        return []

    def stop(self) -> None:
        self.cluster.stop_all()


@dataclass
class Watch:
    """What the masters' /admin/sync said while a network fault lasted."""

    states: dict[str, list[str]] = field(default_factory=dict)  # master -> state changes
    suspected: dict[str, set[str]] = field(default_factory=dict)  # master -> peers
    unanswered: int = 0

    def summary(self) -> str:
        parts = [f"{n} {'>'.join(s)}" for n, s in sorted(self.states.items())]
        if self.suspected:
            parts.append("split suspected " + ", ".join(
                f"by {n} of {'/'.join(sorted(p))}" for n, p in sorted(self.suspected.items())))
        if self.unanswered:
            parts.append(f"{self.unanswered} status requests unanswered")
        return "; ".join(parts)


class MultiDC:
    name = "multi-dc"
    threads_per_master = 2
    max_peer_lag_s = MAX_PEER_LAG_S

    def __init__(self, directory: Path, master_props: dict[str, str]) -> None:
        self.directory = directory
        self.lab = netlab.NetLab(list(LAYOUT))
        self.cluster = UkUs(self.lab, props=master_props)
        self.sites: list[Site] = []

    @property
    def repo_urls(self) -> list[str]:
        return [f"{s.url}/repositories/repo" for s in self.sites]

    def dcs(self) -> dict[str, list[str]]:
        return self.cluster.dcs()

    def start(self) -> str:
        self.lab.start()
        self.cluster.start(self.directory)
        self.sites = list(self.cluster.sites.values())
        return (f"lab {self.lab.run_id} on {self.lab.subnet}: "
                + ", ".join(f"{s.name} ({self.cluster.layout[s.name][0]}, "
                            f"{len(s.workers)} workers)" for s in self.sites))

    def heal(self) -> None:
        self.lab.heal()

    def converge(self, since: float, timeout: float) -> str:
        """Until every master is connected at one agreed position with everything executed,
        and every worker of every data centre has one fingerprint."""
        _, seen = self.cluster.wait_recovered(since, timeout)
        return f"states on the way {seen}"

    def check(self, history: History) -> Verdict:
        names = [s.name for s in self.sites]
        return check_peered({n: self.cluster.status(n) for n in names},
                            {s.name: s.workers for s in self.sites}, "repo", history,
                            {n: self.cluster.agreed(n) for n in names})

    def failure_details(self) -> list[str]:
        """Each master's peering state (what an operator would look at first)."""
        out = []
        for s in self.sites:
            try:
                st = self.cluster.sync(s.name)
            except httpx.HTTPError as exc:
                out.append(f"{s.name}: /admin/sync failed: {exc!r}")
                continue
            kinds = sorted({(d["peer"], d["kind"]) for d in st["divergences"]})
            out.append(f"{s.name}: state={st['state']} seq={st['seq']} "
                       f"executed={st['executed_seq']} incoming={st['incoming']} "
                       f"split_suspected={st['split_suspected']} "
                       f"split_point={st['split_point']} "
                       f"recovery_problem={st['recovery_problem']} failed={st['failed']} "
                       f"divergences={kinds}")
        return out

    def stop(self) -> None:
        try:
            self.cluster.stop()  # by PID, before the lab goes
        finally:
            self.lab.close()

    # ---- for the network faults ----

    def watch(self, seconds: float, every: float = 0.25) -> Watch:
        """Poll every master's /admin/sync for ``seconds``."""
        w = Watch({s.name: [] for s in self.sites})
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for s in self.sites:
                try:
                    st = self.cluster.sync(s.name, timeout=1)
                except httpx.HTTPError:
                    w.unanswered += 1
                    continue
                if not w.states[s.name] or w.states[s.name][-1] != st["state"]:
                    w.states[s.name].append(st["state"])
                if st["split_suspected"]:
                    w.suspected.setdefault(s.name, set()).update(st["split_suspected"])
            time.sleep(min(every, max(0.0, end - time.monotonic())))
        return w

    def wait_connected(self, timeout: float) -> bool:
        """Until every master is connected with no split suspected; False after
        ``timeout``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if all(st["state"] == "connected" and not st["split_suspected"]
                       for st in (self.cluster.sync(s.name, timeout=1) for s in self.sites)):
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return False


TOPOLOGIES = {"single-dc": SingleDC, "multi-dc": MultiDC}


def unavailable(topology: str) -> str | None:
    """Why rounds of this topology cannot run here, or None."""
    return netlab.unavailable() if topology == "multi-dc" else None
