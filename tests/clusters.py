"""Real clusters on loopback, shared by the tests that run them (each node a process
started as users start it, txcluster.local): ``LocalCluster`` (one master and its workers)
and ``DataCentres`` (one such cluster per data centre, every master a sync peer of every
other), with client writers. Every process made here is stopped by its ``stop_all``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.procs import agreed_queue, free_port, make_secret, worker_node
from txcluster.local import master_node


class LocalCluster:
    """A master and its workers on loopback, started as users start them (txcluster.local).

    Helpers poll with deadlines; every process made here is stopped by ``stop_all``.
    """

    def __init__(self, root, secret: tuple, workers: int, repository_id: str = "repo",
                 master_port: int | None = None, node_id: str = "master1",
                 **master_extra: str) -> None:
        self.root = root
        self.secret_file, self.secret = secret
        self.repository_id = repository_id
        self.nodes: list = []  # every process this cluster made, for teardown
        self.workers = [self.new_worker(f"worker{i + 1}") for i in range(workers)]
        props = {"health-interval-s": "0.2", "request-timeout-s": "10", **master_extra}
        self.master = master_node(root / "master", self.secret_file, node_id,
                                  [w.url for w in self.workers], repository_id,
                                  port=master_port, **props)
        self.nodes.append(self.master)

    def start(self) -> LocalCluster:
        for w in self.workers:
            w.start(wait=False)
        for w in self.workers:
            w.wait_ready()
        self.master.start()
        self.wait_in_sync()
        return self

    # ---- processes ----

    def new_worker(self, name: str):
        node = worker_node(self.root / name, self.secret_file, self.repository_id)
        self.nodes.append(node)
        return node

    def stop_all(self) -> None:
        for node in reversed(self.nodes):  # the master first
            node.stop()

    # ---- client calls through the master ----

    @property
    def repo_url(self) -> str:
        return f"{self.master.url}/repositories/{self.repository_id}"

    def update(self, text: str, timeout: float = 30, **headers: str) -> httpx.Response:
        return httpx.post(f"{self.repo_url}/statements", content=text.encode(),
                          headers={"content-type": "application/sparql-update", **headers},
                          timeout=timeout)

    def select(self, query: str, base: str | None = None, **headers: str) -> list[dict]:
        """Rows of a SELECT (through the master unless ``base`` is a worker URL), each
        {variable: value as text}."""
        url = f"{base or self.master.url}/repositories/{self.repository_id}"
        r = httpx.get(url, params={"query": query}, timeout=30,
                      headers={"accept": "application/sparql-results+json", **headers})
        assert r.status_code == 200, f"{url}: {r.status_code} {r.text}"
        return [{k: v["value"] for k, v in b.items()} for b in r.json()["results"]["bindings"]]

    # ---- status ----

    def status(self) -> dict:
        r = httpx.get(f"{self.master.url}/admin/status", timeout=10)
        r.raise_for_status()
        return r.json()

    def worker_status(self, status: dict, node) -> dict:
        [w] = [w for w in status["workers"] if w["url"] == node.url]
        return w

    def wait_for(self, condition, what: str, timeout: float = 60.0) -> dict:
        """Poll /admin/status until ``condition(status)`` holds; returns that status."""
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while True:
            try:
                last = self.status()
                if condition(last):
                    return last
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not {what} after {timeout}s; last status:\n"
                    f"{json.dumps(last, indent=1)}\nmaster log:\n{self.master.log_tail()}")
            time.sleep(0.05)

    @staticmethod
    def in_sync(status: dict) -> bool:
        head = status["head"]
        return status["writable"] and all(
            w["status"] == "ON" and w["seq"] == head["seq"]
            and w["fingerprint"] == head["fingerprint"] and w["pending_forwards"] == 0
            for w in status["workers"])

    def wait_in_sync(self, timeout: float = 60.0) -> dict:
        """Every worker ON at the head of the log, and the cluster writable."""
        return self.wait_for(self.in_sync, "in sync", timeout)

    def worker_states(self) -> dict[str, dict]:
        """Each worker's own state ({seq, fingerprint, quads, ...}) from its /health."""
        return {w.url: httpx.get(f"{w.url}/health", timeout=10).json() for w in self.workers}

    def fingerprints(self) -> dict[str, str]:
        return {url: st["fingerprint"] for url, st in self.worker_states().items()}


P = "urn:txc:p"


class DataCentres:
    """N data centres on loopback: master m<i> with its workers in dc<i>, every master a
    sync peer of every other. Every process made here is stopped by ``stop_all``."""

    def __init__(self, root: Path, n: int = 3, workers: int = 2,
                 extra: dict[int, dict[str, str]] | None = None, peered: bool = True) -> None:
        self.secret = make_secret(root / "secrets")
        ports = [free_port() for _ in range(n)]
        self.dcs: list[LocalCluster] = []
        for i in range(n):
            props = {"data-centre": f"dc{i + 1}", "sync-idle-interval-ms": "300",
                     **(extra or {}).get(i, {})}
            if peered:
                others = [k for k in range(n) if k != i]
                for j, k in enumerate(others, 1):
                    props[f"peer.{j}.id"] = f"m{k + 1}"
                    props[f"peer.{j}.url"] = f"http://127.0.0.1:{ports[k]}"
            self.dcs.append(LocalCluster(root / f"dc{i + 1}", self.secret, workers,
                                         master_port=ports[i], node_id=f"m{i + 1}", **props))

    def start(self) -> DataCentres:
        for dc in self.dcs:
            for w in dc.workers:
                w.start(wait=False)
        for dc in self.dcs:
            for w in dc.workers:
                w.wait_ready()
            dc.master.start()
        for dc in self.dcs:
            # not dc.wait_in_sync(): a read-only or muted master is never writable
            dc.wait_for(workers_in_sync, "workers in sync")
        return self

    def stop_all(self) -> None:
        for dc in self.dcs:
            dc.stop_all()

    @classmethod
    @contextmanager
    def running(cls, root: Path, **options: Any) -> Iterator[DataCentres]:
        """Started, and every process stopped at the end, whatever happened."""
        dcs = cls(root, **options)
        try:
            yield dcs.start()
        finally:
            dcs.stop_all()

    # ---- observations ----

    @staticmethod
    def sync(dc: LocalCluster) -> dict:
        r = httpx.get(f"{dc.master.url}/admin/sync", timeout=10)
        r.raise_for_status()
        return r.json()

    @staticmethod
    def agreed(dc: LocalCluster) -> list[str]:
        return agreed_queue(dc.master.url)

    def wait_converged(self, timeout: float = 90.0, masters: list[int] | None = None) -> None:
        """Every master at the same agreed position with nothing incoming, everything
        executed, and all its workers in sync."""
        dcs = [self.dcs[i] for i in masters] if masters is not None else self.dcs
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                syncs = [self.sync(dc) for dc in dcs]
                last = [{k: s[k] for k in ("node_id", "state", "seq", "executed_seq",
                                           "incoming", "split_suspected")} for s in syncs]
                if (len({s["seq"] for s in syncs}) == 1
                        and all(s["incoming"] == 0 and s["executed_seq"] == s["seq"]
                                for s in syncs)
                        and all(workers_in_sync(dc.status()) for dc in dcs)):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        logs = "\n".join(f"--- {dc.master.url}\n{dc.master.log_tail(3000)}" for dc in dcs)
        raise AssertionError(f"not converged after {timeout}s: {last}\n{logs}")

    def subjects_on_every_worker(self) -> dict[str, set[str]]:
        query = f"SELECT ?s WHERE {{ ?s <{P}> ?o }}"
        return {w.url: {row["s"] for row in dc.select(query, base=w.url)}
                for dc in self.dcs for w in dc.workers}

    def fingerprints(self) -> dict[str, str]:
        return {url: fp for dc in self.dcs for url, fp in dc.fingerprints().items()}


def workers_in_sync(status: dict) -> bool:
    head = status["head"]
    return all(w["status"] == "ON" and w["seq"] == head["seq"]
               and w["fingerprint"] == head["fingerprint"] and w["pending_forwards"] == 0
               for w in status["workers"])


def insert(dc: LocalCluster, subject: str, timeout: float = 30) -> httpx.Response:
    return dc.update(f'INSERT DATA {{ <{subject}> <{P}> "x" }}', timeout=timeout)


class Writers:
    """Client threads inserting unique statements through given masters; every
    acknowledgement (204) is recorded. A refused or unanswered write is not."""

    def __init__(self, targets: list[tuple[str, LocalCluster]], per_thread: int | None = None,
                 timeout: float = 30) -> None:
        self.per_thread = per_thread
        self._acked: set[str] = set()
        self.failed: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(name, dc, per_thread, timeout),
                                         daemon=True) for name, dc in targets]

    def _run(self, name: str, dc: LocalCluster, per_thread: int | None, timeout: float) -> None:
        i = 0
        while not self._stop.is_set() and (per_thread is None or i < per_thread):
            subject = f"urn:txc:{name}-{i}"
            i += 1
            try:
                r = insert(dc, subject, timeout)
                ok, why = r.status_code == 204, f"{r.status_code} {r.text[:120]}"
            except httpx.HTTPError as exc:
                ok, why = False, f"{type(exc).__name__}"
            with self._lock:
                if ok:
                    self._acked.add(subject)
                else:
                    self.failed.append((subject, why))
            if not ok:
                time.sleep(0.05)  # outside the lock: the others go on recording

    @property
    def acked(self) -> set[str]:
        """The acknowledged statements so far: a copy, taken under the lock, so that a
        test may read it while the writers still add to it (iterating the live set then
        failed with "Set changed size during iteration")."""
        with self._lock:
            return set(self._acked)

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.per_thread is None:  # endless writers stop at the end of the block;
            self._stop.set()  # counted ones finish their writes
        for t in self.threads:
            t.join(120)
