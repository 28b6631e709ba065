"""Peered masters of two data centres in a network lab (tests/netlab.py): the spec's UK/US
use case as real processes, shared by the partition tests (tests/test_partitions.py) and
the multi-DC chaos rounds (tests/chaos).

Each master and its workers run in one host namespace of the lab and are reached at that
host's service IP; every master is a sync peer of the others. Default layout: data centre
"uk" with masters uk1 (2 workers) and uk2 (1 worker), data centre "us" with master us1
(2 workers); max-peer-lag-s 2, split-recovery Smart.

Needs root (the lab's namespaces); the caller starts the lab, and stops the processes
(``UkUs.stop``, by PID) before closing it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests import netlab
from tests.procs import NodeProcess, agreed_queue, free_port, make_secret, worker_node
from txcluster.local import master_node

MAX_PEER_LAG_S = 2.0
P = "urn:txc:p"
LAYOUT = {"uk1": ("uk", 2), "uk2": ("uk", 1), "us1": ("us", 2)}  # master: (DC, workers)


@dataclass
class Site:
    """One master (its host in the lab) and its workers."""

    name: str
    master: NodeProcess
    workers: list[NodeProcess]

    @property
    def url(self) -> str:
        return self.master.url


@dataclass
class UkUs:
    lab: netlab.NetLab
    sites: dict[str, Site] = field(default_factory=dict)
    layout: dict[str, tuple[str, int]] = field(default_factory=lambda: dict(LAYOUT))
    props: dict[str, str] = field(default_factory=dict)  # more (or other) master settings

    @property
    def processes(self) -> list[NodeProcess]:
        return [n for s in self.sites.values() for n in (s.master, *s.workers)]

    def dcs(self) -> dict[str, list[str]]:
        """Data centre -> its masters (host names), in layout order."""
        out: dict[str, list[str]] = {}
        for name, (dc, _) in self.layout.items():
            out.setdefault(dc, []).append(name)
        return out

    def start(self, root: Path) -> UkUs:
        secret = make_secret(root / "secrets")[0]
        ports = {name: free_port() for name in self.layout}
        for name, (dc, n) in self.layout.items():
            host, ns = self.lab.service_ip(name), self.lab.netns(name)
            workers = [worker_node(root / name / f"worker{i}", secret, host=host, netns=ns)
                       for i in range(1, n + 1)]
            props = {"data-centre": dc, "health-interval-s": "0.2", "request-timeout-s": "5",
                     "sync-idle-interval-ms": "300", "max-peer-lag-s": str(MAX_PEER_LAG_S),
                     "split-recovery": "Smart", **self.props}
            others = [o for o in self.layout if o != name]
            for k, other in enumerate(others, 1):
                props[f"peer.{k}.id"] = other
                props[f"peer.{k}.url"] = f"http://{self.lab.service_ip(other)}:{ports[other]}"
            master = master_node(root / name / "master", secret, name,
                                 [w.url for w in workers], port=ports[name], host=host,
                                 netns=ns, **props)
            self.sites[name] = Site(name, master, workers)
        for node in self.processes:
            if node.kind == "worker":
                node.start(wait=False)
        for node in self.processes:
            if node.kind == "worker":
                node.wait_ready()
        for site in self.sites.values():
            site.master.start(wait=False)
        for site in self.sites.values():
            site.master.wait_ready()
        self.wait_converged(timeout=60)
        return self

    def stop(self) -> None:
        for node in self.processes:  # masters first (by PID)
            node.stop()

    # ---- observations ----

    def sync(self, name: str, timeout: float = 5) -> dict:
        r = httpx.get(f"{self.sites[name].url}/admin/sync", timeout=timeout)
        r.raise_for_status()
        return r.json()

    def status(self, name: str) -> dict:
        r = httpx.get(f"{self.sites[name].url}/admin/status", timeout=5)
        r.raise_for_status()
        return r.json()

    def agreed(self, name: str) -> list[str]:
        return agreed_queue(self.sites[name].url)

    def fingerprints(self) -> dict[str, str]:
        """Each worker's fingerprint from its own /health, by '<master>/<worker dir>'."""
        return {f"{s.name}/{w.directory.name}":
                httpx.get(f"{w.url}/health", timeout=5).json()["fingerprint"]
                for s in self.sites.values() for w in s.workers}

    def subjects(self, predicate: str = P) -> dict[str, set[str]]:
        query = f"SELECT ?s WHERE {{ ?s <{predicate}> ?o }}"
        out = {}
        for s in self.sites.values():
            for w in s.workers:
                r = httpx.get(f"{w.url}/repositories/repo", params={"query": query},
                              headers={"accept": "application/sparql-results+json"},
                              timeout=30)
                r.raise_for_status()
                out[f"{s.name}/{w.directory.name}"] = {
                    b["s"]["value"] for b in r.json()["results"]["bindings"]}
        return out

    def converged(self, names: list[str] | None = None) -> tuple[bool, object]:
        """Every master (of ``names``) at the same agreed position, nothing incoming,
        everything executed, every worker ON at its master's head."""
        names = names or list(self.sites)
        try:
            syncs = {n: self.sync(n) for n in names}
            statuses = {n: self.status(n) for n in names}
        except httpx.HTTPError as exc:
            return False, repr(exc)
        summary = {n: {k: s[k] for k in ("state", "seq", "executed_seq", "incoming",
                                         "split_suspected")} for n, s in syncs.items()}
        ok = (len({s["seq"] for s in syncs.values()}) == 1
              and all(s["incoming"] == 0 and s["executed_seq"] == s["seq"]
                      for s in syncs.values())
              and all(workers_in_sync(st) for st in statuses.values()))
        return ok, summary

    def wait_converged(self, names: list[str] | None = None, timeout: float = 60) -> float:
        start = time.monotonic()
        last: object = None
        while time.monotonic() - start < timeout:
            ok, last = self.converged(names)
            if ok:
                return time.monotonic() - start
            time.sleep(0.1)
        raise AssertionError(f"not converged after {timeout}s: {last}\n{self.log_tails()}")

    def wait_recovered(self, since: float, timeout: float) -> tuple[float, dict[str, list[str]]]:
        """Seconds from ``since`` (a time.monotonic(), e.g. a heal) until every master is
        connected again, converged, and every worker's fingerprint is equal; and each
        master's state changes seen on the way. AssertionError after ``timeout``."""
        last: object = None
        seen: dict[str, list[str]] = {n: [] for n in self.sites}  # state changes, in order
        while time.monotonic() - since < timeout:
            ok, last = self.converged()
            if isinstance(last, dict):
                for n, st in last.items():
                    if not seen[n] or seen[n][-1] != st["state"]:
                        seen[n].append(st["state"])
            if ok:
                try:
                    fps = self.fingerprints()
                    states = {n: self.sync(n) for n in self.sites}
                except httpx.HTTPError as exc:
                    last = repr(exc)
                    time.sleep(0.2)
                    continue
                if len(set(fps.values())) == 1 and all(
                        s["state"] == "connected" and not s["split_suspected"]
                        for s in states.values()):
                    return time.monotonic() - since, seen
                last = {"fingerprints": fps,
                        "states": {n: s["state"] for n, s in states.items()}}
            time.sleep(0.2)
        raise AssertionError(f"no recovery {timeout}s after the heal: {last}; "
                             f"states on the way {seen}")

    def log_tails(self, chars: int = 2500) -> str:
        return "\n".join(f"--- {s.name} master log\n{s.master.log_tail(chars)}"
                         for s in self.sites.values())


def workers_in_sync(status: dict) -> bool:
    """Every worker of a master's /admin/status ON at its head, nothing pending."""
    head = status["head"]
    return all(w["status"] == "ON" and w["seq"] == head["seq"]
               and w["fingerprint"] == head["fingerprint"] and w["pending_forwards"] == 0
               for w in status["workers"])
