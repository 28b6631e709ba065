"""A real cluster end to end: a master and workers started by their CLI (txcluster.local),
real HTTP on loopback, kill -9 by PID; clients used as users use them.

Every test polls with deadlines (the master's health interval is 0.2 s here) and every
process a test starts is stopped by its fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest

from master_service.txlog.log import TxLog
from tests.clusters import LocalCluster
from tests.procs import signed_client
from txinfra.properties import read_properties

UPDATE = {"content-type": "application/sparql-update"}
STREAM_P = "urn:stream:p"


# ---- helpers ----


class WriteStream:
    """Threads writing ``INSERT DATA { <urn:stream:n> <urn:stream:p> n }`` through the
    master, one n per request; every answer is recorded (204 = acknowledged)."""

    def __init__(self, cluster: LocalCluster, threads: int = 2) -> None:
        self.url = f"{cluster.repo_url}/statements"
        self.threads = threads
        self.acked: list[int] = []
        self.failed: list[tuple[int, str]] = []
        self.attempted: list[int] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(t,), daemon=True)
                         for t in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self, first: int) -> None:
        with httpx.Client(timeout=30) as client:
            n = first
            while not self._stop.is_set():
                with self._lock:
                    self.attempted.append(n)
                body = f"INSERT DATA {{ <urn:stream:{n}> <{STREAM_P}> {n} }}"
                try:
                    r = client.post(self.url, content=body, headers=UPDATE)
                    outcome = None if r.status_code == 204 else f"{r.status_code} {r.text}"
                except httpx.HTTPError as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if outcome is None:
                        self.acked.append(n)
                    else:
                        self.failed.append((n, outcome))
                if outcome is not None:
                    time.sleep(0.05)  # e.g. the master is down: don't spin
                n += self.threads

    def wait_acked(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, \
                f"only {len(self.acked)} of {count} writes acknowledged; failures: " \
                f"{self.failed[-5:]}"
            time.sleep(0.02)

    def more(self, count: int, timeout: float = 60) -> None:
        """Wait for ``count`` more acknowledged writes than now."""
        self.wait_acked(len(self.acked) + count, timeout)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


class ReadStream:
    """A thread querying through the master; every answer other than 200 is recorded."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.url = cluster.repo_url
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        query = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{STREAM_P}> ?o }}"
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                try:
                    r = client.get(self.url, params={"query": query},
                                   headers={"accept": "text/csv"})
                    if r.status_code == 200:
                        self.ok += 1
                    else:
                        self.failed.append(f"{r.status_code} {r.text}")
                except httpx.HTTPError as exc:
                    self.failed.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


@pytest.fixture
def read_stream():
    streams: list[ReadStream] = []

    def start(cluster: LocalCluster) -> ReadStream:
        streams.append(ReadStream(cluster))
        return streams[-1]

    yield start
    for s in streams:
        s.stop()


@pytest.fixture
def write_stream():
    streams: list[WriteStream] = []

    def start(cluster: LocalCluster, threads: int = 2) -> WriteStream:
        streams.append(WriteStream(cluster, threads))
        return streams[-1]

    yield start
    for s in streams:
        s.stop()


def stream_values(cluster: LocalCluster, base: str | None = None, **headers: str) -> set[int]:
    rows = cluster.select(f"SELECT ?n WHERE {{ ?s <{STREAM_P}> ?n }}", base, **headers)
    return {int(r["n"]) for r in rows}


def assert_converged(cluster: LocalCluster) -> dict:
    """Every worker ON at the head, and every worker's own fingerprint (its /health) equal
    to the master's head."""
    status = cluster.wait_in_sync()
    head = status["head"]
    states = cluster.worker_states()
    assert {url: (st["seq"], st["fingerprint"]) for url, st in states.items()} == \
        {w.url: (head["seq"], head["fingerprint"]) for w in cluster.workers}, (head, states)
    return status


def master_log(cluster: LocalCluster) -> str:
    return cluster.master.log_path.read_text(errors="replace")


def node_of(cluster: LocalCluster, url: str):
    [node] = [w for w in cluster.workers if w.url == url]
    return node


def is_off(cluster: LocalCluster, node):
    return lambda s: cluster.worker_status(s, node)["status"] == "OFF"


# ---- 1. kill -9 a worker during a write stream ----


def test_probe_worker_killed_during_a_write_stream_is_caught_up_by_replay(
        cluster_factory, write_stream, read_stream):
    c = cluster_factory(3)
    stream = write_stream(c)
    # Reads meanwhile: one that meets the dead worker is re-sent to another
    # (docs/design/rdf4j-protocol.md#consistency-levels, read routing); no client sees the failure.
    reads = read_stream(c)
    stream.wait_acked(30)
    # The probe executes every write first: losing it mid-group is the hard case.
    victim = node_of(c, c.status()["probe"])
    victim.kill9()
    c.wait_for(is_off(c, victim), "the killed worker OFF")
    stream.more(30)  # two workers left: writes go on
    assert c.status()["writable"]
    victim.start()
    c.wait_for(lambda s: c.worker_status(s, victim)["status"] == "ON", "the worker back ON")
    stream.more(30)
    stream.stop()
    reads.stop()
    assert stream.failed == []
    assert reads.failed == [] and reads.ok > 10, (reads.ok, reads.failed[:5])
    status = assert_converged(c)
    assert status["head"]["seq"] >= len(stream.acked)
    acked = set(stream.acked)
    for w in c.workers:
        assert stream_values(c, w.url) == acked, w.url
    # It restarted at a state the log knows (kill -9 left it consistent): replayed, not
    # replicated.
    log = master_log(c)
    assert f"worker {victim.url} is in sync" in log
    assert "Replicating" not in log
    # The documented messages are not drowned by one line per health check.
    assert "HTTP Request:" not in log


# ---- 2. a wiped worker is replicated ----


def test_wiped_worker_is_replicated_as_empty(cluster_factory):
    # Smart-replication parameters under which a full copy beats replaying (a fast
    # network, no minimum time): an empty worker is then replicated, "Replicating (empty)".
    c = cluster_factory(3, **{"net-speed-bits-per-sec": str(10**12),
                              "full-replication-time-factor": "0.001",
                              "min-time-to-consider-full-replication-s": "0"})
    for i in range(5):
        body = "".join(f"<urn:wipe:{i}-{j}> <urn:p> {j} .\n" for j in range(50))
        r = httpx.post(f"{c.repo_url}/statements", content=body,
                       headers={"content-type": "text/turtle"}, timeout=30)
        assert r.status_code == 204, r.text
    head = assert_converged(c)["head"]
    assert head["quads"] == 250
    victim = c.workers[2]
    victim.stop()
    shutil.rmtree(victim.properties["data-dir"])
    victim.start()
    assert victim.log_path.exists()
    status = assert_converged(c)
    assert status["head"] == head
    log = master_log(c)
    assert f"Replicating (empty): worker {victim.url}" in log, log[-3000:]
    assert f"replication of {victim.url} done" in log
    assert f"installed image at seq {head['seq']}" in victim.log_tail()
    assert len(c.select("SELECT * WHERE { ?s <urn:p> ?o }", victim.url)) == 250


# ---- 3. a worker changed behind the master's back ----


def test_worker_corrupted_behind_the_masters_back_is_replicated(cluster_factory):
    c = cluster_factory(3)
    r = c.update("INSERT DATA { <urn:c:a> <urn:c:p> 1 . <urn:c:b> <urn:c:p> 2 }")
    assert r.status_code == 204, r.text
    head = assert_converged(c)["head"]
    victim = c.workers[0]
    victim.stop()
    store = ox.Store(str(Path(victim.properties["data-dir"]) / "current" / "store"))
    store.add(ox.Quad(ox.NamedNode("urn:c:rogue"), ox.NamedNode("urn:c:p"), ox.Literal("x")))
    store.flush()
    del store
    victim.start()
    status = assert_converged(c)
    assert status["head"] == head
    assert f"Replicating (out of sync): worker {victim.url}" in master_log(c)
    for w in c.workers:
        assert c.select("SELECT * WHERE { <urn:c:rogue> ?p ?o }", w.url) == [], w.url
        assert len(c.select("SELECT * WHERE { ?s <urn:c:p> ?o }", w.url)) == 2, w.url


# ---- 5. two workers: read-only while one is down; three workers: still writable ----


@pytest.mark.parametrize("workers", [2, 3])
def test_writable_with_one_worker_down(cluster_factory, workers):
    c = cluster_factory(workers)
    assert c.update("INSERT DATA { <urn:w:a> <urn:w:p> 1 }").status_code == 204
    assert_converged(c)
    victim = c.workers[-1]
    victim.kill9()
    status = c.wait_for(is_off(c, victim), "the killed worker OFF")
    r = c.update("INSERT DATA { <urn:w:b> <urn:w:p> 2 }")
    if workers == 2:
        # A single copy is not risked (protect-single-worker): read-only, and says why.
        assert r.status_code == 503, r.text
        assert "not writable" in r.text and "protect-single-worker" in r.text, r.text
        status = c.status()
        assert status["writable"] is False
        assert "protect-single-worker" in status["not_writable_because"]
        assert c.select("SELECT ?o WHERE { ?s <urn:w:p> ?o }") == [{"o": "1"}]  # reads go on
    else:
        assert r.status_code == 204, r.text
        assert c.status()["writable"] is True
    victim.start()
    assert_converged(c)
    r = c.update("INSERT DATA { <urn:w:c> <urn:w:p> 3 }")
    assert r.status_code == 204, r.text
    assert_converged(c)
    want = {"1", "3"} if workers == 2 else {"1", "2", "3"}
    for w in c.workers:
        assert {row["o"] for row in c.select("SELECT ?o WHERE { ?s <urn:w:p> ?o }", w.url)} \
            == want


# ---- 6. kill -9 the master mid-stream ----


def test_master_killed_mid_stream_loses_no_acknowledged_write(cluster_factory, write_stream):
    c = cluster_factory(3)
    stream = write_stream(c, threads=3)
    stream.wait_acked(40)
    c.master.kill9()
    time.sleep(0.3)  # the stream sees the master gone
    c.master.start()
    stream.more(40)
    stream.stop()
    acked = set(stream.acked)
    assert any("ConnectError" in f or "RemoteProtocolError" in f or "ReadError" in f
               for _, f in stream.failed), "the kill did not interrupt the stream"
    assert_converged(c)
    through_master = stream_values(c)
    assert acked <= through_master, sorted(acked - through_master)
    assert through_master <= set(stream.attempted)
    for w in c.workers:
        on_worker = stream_values(c, w.url)
        assert on_worker == through_master, w.url
    # A restarted master answers consistent reads at once.
    assert stream_values(c, **{"X-GraphDB-Local-Consistency": "updating"}) == through_master


# ---- a replaced master (new, empty transaction log) adopts the workers' data ----


def test_new_master_log_adopts_data_of_workers_that_come_back_late(cluster_factory):
    """The master is replaced (its log lost) while the workers holding the data are down
    and only an empty worker is up. When they come back, the new log adopts their state
    and the empty worker is replicated from them, never the other way round."""
    c = cluster_factory(3)
    for i in range(5):
        assert c.update(f"INSERT DATA {{ <urn:n:{i}> <urn:n:p> {i} }}").status_code == 204
    head = assert_converged(c)["head"]
    w1, w2, w3 = c.workers
    c.master.stop()
    shutil.rmtree(c.master.properties["data-dir"])
    w1.stop()
    w2.stop()
    w3.stop()
    shutil.rmtree(w3.properties["data-dir"])
    w3.start()
    c.master.start()
    status = c.wait_for(lambda s: c.worker_status(s, w3)["status"] == "ON", "the empty one ON")
    assert status["writable"] is False  # one worker of three: no client write meanwhile
    w1.start()
    w2.start()
    status = assert_converged(c)
    assert (status["head"]["fingerprint"], status["head"]["quads"]) == \
        (head["fingerprint"], head["quads"])
    for w in c.workers:
        assert len(c.select("SELECT * WHERE { ?s <urn:n:p> ?o }", w.url)) == 5, w.url
    assert f"Replicating (empty): worker {w3.url}" in master_log(c)


# ---- the master killed after its probe committed a group, before it recorded it ----


def probe_executes(cluster: LocalCluster, worker, start_seq: int, txid: str,
                   operations: list[dict]) -> dict:
    """The signed /cluster/execute call the master makes to its probe (Cluster.
    _execute_on_probe), sent while the master is down: the crash window made exact."""
    with signed_client(worker, cluster.secret) as client:
        r = client.post("/cluster/execute", json={
            "start_seq": start_seq, "transactions": [{"txid": txid, "operations": operations}],
            "control_queries": []})
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert result["ok"], result
    return result


def logged(cluster: LocalCluster, txid: str) -> dict | None:
    """A transaction's row in the master's log (read-only: the master may be running)."""
    path = Path(cluster.master.properties["data-dir"]) / "txlog.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("select status, seq from transactions where txid = ?",
                         [txid]).fetchone()
    return dict(row) if row else None


def test_a_transaction_pending_in_the_log_that_the_probe_committed_is_rolled_forward(
        cluster_factory):
    """The master dies after its probe committed a transaction the log holds pending, before
    the log recorded it. On restart the log records it from the probe's executed journal
    (instead of failing it and replicating the probe's newer state away); the other worker
    receives its changeset, and writes go on.

    (This master's own write path logs a group after the probe answered, in one SQLite
    transaction, so the pending row is written here into the stopped master's log.)"""
    c = cluster_factory(2)
    assert c.update("INSERT DATA { <urn:rf:1> <urn:rf:p> 1 }").status_code == 204
    head = assert_converged(c)["head"]
    c.master.kill9()
    ops = [{"type": "update", "update": "INSERT DATA { <urn:rf:2> <urn:rf:p> 2 }"}]
    with TxLog.open(Path(c.master.properties["data-dir"]) / "txlog.db") as txlog:
        txlog.log_pending([("rf-2", time.time(), "master1", ops)])
    probe, other = c.workers
    executed = probe_executes(c, probe, head["seq"] + 1, "rf-2", ops)
    c.master.start()
    status = assert_converged(c)
    assert (status["head"]["seq"], status["head"]["fingerprint"]) == \
        (head["seq"] + 1, executed["fingerprint"])
    assert logged(c, "rf-2") == {"status": "committed", "seq": head["seq"] + 1}
    assert {r["o"] for r in c.select("SELECT ?o WHERE { ?s <urn:rf:p> ?o }", other.url)} \
        == {"1", "2"}
    log = master_log(c)
    assert f"worker {probe.url} had executed 1 transactions the log had not recorded " \
        f"(master crash): recorded them" in log, log[-3000:]
    assert "Replicating" not in log and "marked failed" not in log
    assert c.update("INSERT DATA { <urn:rf:3> <urn:rf:p> 3 }").status_code == 204
    assert_converged(c)
    for w in c.workers:
        assert len(c.select("SELECT ?o WHERE { ?s <urn:rf:p> ?o }", w.url)) == 3, w.url


def test_a_worker_ahead_with_a_transaction_the_log_does_not_know_is_replicated(
        cluster_factory):
    """Not rolled forward: what a worker executed beyond the log's head is recorded only
    when it is what the log expected next. Here the log knows nothing of it (as after a
    crash of this master's write path, which logs a group only once the probe answered):
    the worker is out of sync and replicated, as before."""
    c = cluster_factory(2)
    assert c.update("INSERT DATA { <urn:rn:1> <urn:rn:p> 1 }").status_code == 204
    head = assert_converged(c)["head"]
    c.master.kill9()
    stray = c.workers[0]
    probe_executes(c, stray, head["seq"] + 1, "unknown-to-the-log",
                   [{"type": "update", "update": "INSERT DATA { <urn:rn:x> <urn:rn:p> 9 }"}])
    c.master.start()
    status = assert_converged(c)
    assert status["head"] == head
    assert logged(c, "unknown-to-the-log") is None
    log = master_log(c)
    assert f"worker {stray.url} is ahead of the log (seq {head['seq'] + 1}, log at " \
        f"{head['seq']}) and is not rolled forward: transaction unknown-to-the-log" in log
    assert f"Replicating (out of sync): worker {stray.url}" in log
    for w in c.workers:
        assert c.select("SELECT ?o WHERE { ?s <urn:rn:p> ?o }", w.url) == [{"o": "1"}]


# ---- a large write: slower than request-timeout-s is busy, not gone ----


def test_write_slower_than_the_request_timeout_is_not_a_worker_failure(cluster_factory):
    """Loading a big file takes the probe (and then each worker) longer than one ordinary
    request may take. The workers are busy, not gone: the write succeeds once, no worker
    leaves rotation, nothing is replicated."""
    timeout = 0.2
    c = cluster_factory(3, **{"request-timeout-s": str(timeout)})
    n = 40_000
    body = "".join(f"<urn:big:{i}> <urn:big:p> {i} .\n" for i in range(n))
    r = httpx.post(f"{c.repo_url}/statements", content=body,
                   headers={"content-type": "text/turtle"}, timeout=120)
    assert r.status_code == 204, r.text
    status = assert_converged(c)
    assert (status["head"]["seq"], status["head"]["quads"]) == (1, n)
    # It really was slower than the timeout on the workers (else this test proves nothing).
    assert max(w["average_task_time_s"] for w in status["workers"]) > timeout, status
    log = master_log(c)
    assert " -> OFF" not in log and " -> OUT_OF_SYNC" not in log and "Replicating" not in log
    assert status["counters"]["failed_writes"] == 0


# ---- 9. adding and removing a worker at runtime; backup and restore ----


def test_add_and_remove_a_worker_at_runtime(cluster_factory):
    c = cluster_factory(3)
    for i in range(3):
        assert c.update(f"INSERT DATA {{ <urn:a:{i}> <urn:a:p> {i} }}").status_code == 204
    head = assert_converged(c)["head"]
    # A bad URL: refused with the reason, nothing persisted, nothing added.
    props_before = c.master.config.read_bytes()
    r = httpx.post(f"{c.master.url}/admin/workers", json={"url": "not a url"}, timeout=30)
    assert r.status_code == 400 and "not a url" in r.text, r.text
    assert c.master.config.read_bytes() == props_before
    assert len(c.status()["workers"]) == 3
    new = c.new_worker("worker4")
    new.start()
    r = httpx.post(f"{c.master.url}/admin/workers", json={"url": new.url}, timeout=30)
    assert r.status_code == 200, r.text
    c.workers.append(new)
    status = assert_converged(c)
    assert status["head"] == head
    assert len(status["workers"]) == 4
    workers = {k: v for k, v in read_properties(c.master.config).items()
               if k.startswith("worker.")}
    assert workers == {f"worker.{i + 1}.url": w.url for i, w in enumerate(c.workers)}
    assert len(c.select("SELECT * WHERE { ?s <urn:a:p> ?o }", new.url)) == 3
    # It takes the writes that follow.
    assert c.update("INSERT DATA { <urn:a:9> <urn:a:p> 9 }").status_code == 204
    assert_converged(c)
    # Adding it twice is refused.
    r = httpx.post(f"{c.master.url}/admin/workers", json={"url": new.url}, timeout=30)
    assert r.status_code == 409, r.text

    r = httpx.delete(f"{c.master.url}/admin/workers", params={"url": new.url}, timeout=30)
    assert r.status_code == 200, r.text
    c.workers.remove(new)
    assert new.url not in [w["url"] for w in c.status()["workers"]]
    workers = {k: v for k, v in read_properties(c.master.config).items()
               if k.startswith("worker.")}
    assert workers == {f"worker.{i + 1}.url": w.url for i, w in enumerate(c.workers)}
    r = httpx.delete(f"{c.master.url}/admin/workers", params={"url": new.url}, timeout=30)
    assert r.status_code == 404, r.text
    # Writes no longer reach it.
    before = httpx.get(f"{new.url}/health", timeout=10).json()
    assert c.update("INSERT DATA { <urn:a:10> <urn:a:p> 10 }").status_code == 204
    assert_converged(c)
    assert httpx.get(f"{new.url}/health", timeout=10).json()["seq"] == before["seq"]
    # The change survives a restart of the master: cluster.properties has three workers.
    c.master.stop()
    c.master.start()
    assert len(assert_converged(c)["workers"]) == 3


def test_backup_then_restore(cluster_factory):
    c = cluster_factory(3)
    assert c.update("INSERT DATA { <urn:b:1> <urn:b:p> 1 }").status_code == 204
    assert_converged(c)
    r = httpx.post(f"{c.master.url}/admin/backup", json={"name": "nightly"}, timeout=60)
    assert r.status_code == 200, r.text
    backup = r.json()
    head = c.status()["head"]
    assert (backup["seq"], backup["fingerprint"]) == (head["seq"], head["fingerprint"])
    assert backup["name"] == "nightly" and backup["worker"] in [w.url for w in c.workers]
    listed = httpx.get(f"{c.master.url}/admin/backups", timeout=10).json()
    assert [b["name"] for b in listed] == ["nightly"]
    # Later writes, then restore: every worker installs the image and replays after it.
    assert c.update("INSERT DATA { <urn:b:2> <urn:b:p> 2 }").status_code == 204
    head = assert_converged(c)["head"]
    r = httpx.post(f"{c.master.url}/admin/restore", json={"name": "nightly"}, timeout=120)
    assert r.status_code == 200, r.text
    assert set(r.json()["workers"].values()) == {"restored"}
    status = assert_converged(c)
    assert status["head"] == head
    for w in c.workers:
        assert f"installed image at seq {backup['seq']}" in w.log_tail(), w.url
        assert {row["o"] for row in c.select("SELECT ?o { ?s <urn:b:p> ?o }", w.url)} \
            == {"1", "2"}
    r = httpx.post(f"{c.master.url}/admin/restore", json={"name": "nope"}, timeout=30)
    assert r.status_code == 404 and "no backup named 'nope'" in r.text, r.text
    r = httpx.post(f"{c.master.url}/admin/backup", json={"name": "../x"}, timeout=30)
    assert r.status_code == 422, r.text
    assert_converged(c)


def test_replication_compression_off_gives_plain_images_and_can_be_turned_on(
        cluster_factory):
    # replication.compression (docs/design/smart-replication.md#full-replication): the
    # master's switch, passed on to the worker that writes the image.
    c = cluster_factory(2, **{"replication.compression": "false"})
    assert c.update("INSERT DATA { <urn:z:1> <urn:z:p> 1 }").status_code == 204
    assert_converged(c)

    def backup(name: str) -> Path:
        r = httpx.post(f"{c.master.url}/admin/backup", json={"name": name}, timeout=60)
        assert r.status_code == 200, r.text
        worker = next(w for w in c.workers if w.url == r.json()["worker"])
        return worker.directory / "data" / "backups" / name / "image.tar.sz"

    assert tarfile.is_tarfile(backup("plain"))
    r = httpx.post(f"{c.master.url}/admin/restore", json={"name": "plain"}, timeout=120)
    assert r.status_code == 200 and set(r.json()["workers"].values()) == {"restored"}, r.text
    assert_converged(c)
    r = httpx.put(f"{c.master.url}/admin/parameters", json={"replication_compression": "x"},
                  timeout=10)
    assert r.status_code == 422, r.text
    r = httpx.put(f"{c.master.url}/admin/parameters", json={"replication_compression": True},
                  timeout=10)
    assert r.status_code == 200, r.text
    assert read_properties(c.master.config)["replication.compression"] == "true"
    framed = backup("framed")
    assert not tarfile.is_tarfile(framed)
    assert framed.read_bytes().startswith(b"\xff\x06\x00\x00sNaPpY")


# ---- a cluster shared by the tests that leave it as they found it (4, 7, 8, 10) ----

FORBIDDEN = "urn:forbidden"


@pytest.fixture(scope="module")
def shared(module_cluster_factory, tmp_path_factory) -> LocalCluster:
    controls = tmp_path_factory.mktemp("controls") / "control-queries.rq"
    controls.write_text(f"ASK {{ FILTER NOT EXISTS {{ ?s <{FORBIDDEN}> ?o }} }}\n")
    return module_cluster_factory(3, name="shared", **{"control-queries": str(controls)})


# ---- 4. non-deterministic updates ----


def test_non_deterministic_updates_leave_every_worker_identical(shared):
    c = shared
    updates = [
        """PREFIX ex: <http://example.org/nd/>
        INSERT { ex:a ex:now ?now ; ex:rand ?rand ; ex:uuid ?uuid ; ex:struuid ?struuid ;
                      ex:bnode ?b .
                 ?b ex:label "made by BNODE()" .
                 _:t ex:template ?rand .
                 [] ex:anon _:t }
        WHERE { BIND(NOW() AS ?now) BIND(RAND() AS ?rand) BIND(UUID() AS ?uuid)
                BIND(STRUUID() AS ?struuid) BIND(BNODE() AS ?b) }""",
        # the same again: new values, new blank nodes
        """PREFIX ex: <http://example.org/nd/>
        INSERT { ex:b ex:rand ?r . _:x ex:template ?r } WHERE { BIND(RAND() AS ?r) }""",
        """PREFIX ex: <http://example.org/nd/>
        DELETE { ex:a ex:now ?old } INSERT { ex:a ex:now ?new ; ex:seen ?n }
        WHERE { ex:a ex:now ?old BIND(NOW() AS ?new) BIND(STRUUID() AS ?n) }""",
        "INSERT DATA { _:d <http://example.org/nd/data> 1 . _:d <http://example.org/nd/d> 2 }",
    ]
    for text in updates:
        r = c.update(text)
        assert r.status_code == 204, r.text
    # several at once: one group on the probe
    answers: list[int] = []

    def one(i: int) -> None:
        r = c.update(f"INSERT {{ _:g <http://example.org/nd/group> ?r ; "
                     f"<http://example.org/nd/i> {i} }} WHERE {{ BIND(RAND() AS ?r) }}")
        answers.append(r.status_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [204] * 8
    status = assert_converged(c)
    assert len(set(c.fingerprints().values())) == 1
    q = """PREFIX ex: <http://example.org/nd/>
    SELECT ?rand ?uuid ?struuid ?now WHERE { ex:a ex:rand ?rand ; ex:uuid ?uuid ;
        ex:struuid ?struuid ; ex:now ?now }"""
    results = [c.select(q, w.url) for w in c.workers]
    assert len(results[0]) == 1 and all(r == results[0] for r in results), results
    labels = "SELECT (COUNT(*) AS ?n) WHERE { ?b <http://example.org/nd/label> ?l }"
    assert all(c.select(labels, w.url) == [{"n": "1"}] for w in c.workers)
    size = int(httpx.get(f"{c.repo_url}/size", timeout=10).text)
    assert size == status["head"]["quads"]


# ---- 7. clients used as users use them ----


def test_rdflib_sparql_update_store_through_the_master(shared):
    from rdflib import Graph, Literal, URIRef
    from rdflib.plugins.stores.sparqlstore import SPARQLUpdateStore

    c = shared
    # No header: a read sees every write the master acknowledged before it (the default
    # consistency=read-your-writes). Before it, add-then-contains was stale 18 times in 30.
    store = SPARQLUpdateStore(query_endpoint=c.repo_url,
                              update_endpoint=f"{c.repo_url}/statements")
    g = Graph(store, identifier=URIRef("urn:rdflib:graph"))
    s, p = URIRef("urn:rdflib:s"), URIRef("urn:rdflib:p")
    for i in range(30):
        g.add((s, URIRef("urn:rdflib:n"), Literal(i)))
        assert (s, URIRef("urn:rdflib:n"), Literal(i)) in g, f"stale read after add {i}"
    g.remove((s, URIRef("urn:rdflib:n"), None))
    g.add((s, p, Literal("one")))
    g.add((s, p, Literal(2)))
    # rdflib puts the data of an update on a named-graph Graph into that graph itself
    g.update('INSERT DATA { <urn:rdflib:s> <urn:rdflib:p> "three" }')
    values = {str(o) for o in g.objects(s, p)}
    assert values == {"one", "2", "three"}
    assert len(g) == 3
    g.remove((s, p, Literal("one")))
    rows = list(g.query("SELECT ?o WHERE { <urn:rdflib:s> <urn:rdflib:p> ?o }"))
    assert {str(r[0]) for r in rows} == {"2", "three"}
    assert_converged(c)
    for w in c.workers:  # went through the write path to every worker
        got = c.select("SELECT ?o WHERE { GRAPH <urn:rdflib:graph> { ?s ?p ?o } }", w.url)
        assert {r["o"] for r in got} == {"2", "three"}
    g.update("CLEAR GRAPH <urn:rdflib:graph>")
    store.close()
    assert_converged(c)


def test_sparqlwrapper_through_the_master(shared):
    from SPARQLWrapper import JSON, POST, SPARQLWrapper

    c = shared
    sw = SPARQLWrapper(c.repo_url, updateEndpoint=f"{c.repo_url}/statements")
    sw.setMethod(POST)
    sw.setQuery('INSERT DATA { <urn:sw:s> <urn:sw:p> "via SPARQLWrapper" }')
    result = sw.query()
    assert result.response.status in (200, 204)
    sw = SPARQLWrapper(c.repo_url)
    # Reads are eventually consistent: read-your-writes at once is asked for.
    sw.addCustomHttpHeader("X-GraphDB-Local-Consistency", "updating")
    sw.setReturnFormat(JSON)
    sw.setQuery("SELECT ?o WHERE { <urn:sw:s> <urn:sw:p> ?o }")
    rows = sw.queryAndConvert()["results"]["bindings"]
    assert [r["o"]["value"] for r in rows] == ["via SPARQLWrapper"]
    sw.setQuery("ASK { <urn:sw:s> ?p ?o }")
    assert sw.queryAndConvert()["boolean"] is True
    assert_converged(c)


def test_rdf4j_transaction_protocol_through_the_master(shared):
    c = shared
    with httpx.Client(timeout=30) as http:
        r = http.post(f"{c.repo_url}/transactions")
        assert r.status_code == 201, r.text
        tx = r.headers["location"]
        seq_before = c.status()["head"]["seq"]
        r = http.put(tx, params={"action": "ADD"}, content=b"<urn:tx:s> <urn:tx:p> 1 .",
                     headers={"content-type": "text/turtle"})
        assert r.status_code == 200, r.text
        r = http.put(tx, params={"action": "UPDATE",
                                 "update": "INSERT DATA { <urn:tx:s> <urn:tx:p> 2 }"})
        assert r.status_code == 200, r.text
        # nothing is visible, nothing logged, before COMMIT
        assert c.select("SELECT * WHERE { <urn:tx:s> ?p ?o }") == []
        assert c.status()["head"]["seq"] == seq_before
        r = http.put(tx, params={"action": "COMMIT"})
        assert r.status_code == 200, r.text
        assert c.status()["head"]["seq"] == seq_before + 1  # one transaction
        got = c.select("SELECT ?o WHERE { <urn:tx:s> ?p ?o }",
                       **{"X-GraphDB-Local-Consistency": "updating"})
        assert {r["o"] for r in got} == {"1", "2"}
        r = http.put(tx, params={"action": "COMMIT"})
        assert r.status_code in (404, 409), r.text  # it is closed
        # a rolled back transaction changes nothing
        tx = http.post(f"{c.repo_url}/transactions").headers["location"]
        r = http.put(tx, params={"action": "ADD"}, content=b"<urn:tx:gone> <urn:tx:p> 1 .",
                     headers={"content-type": "text/turtle"})
        assert r.status_code == 200, r.text
        assert http.delete(tx).status_code == 204
    assert c.select("SELECT * WHERE { <urn:tx:gone> ?p ?o }",
                    **{"X-GraphDB-Local-Consistency": "updating"}) == []
    assert c.status()["head"]["seq"] == seq_before + 1
    assert_converged(c)


def test_reads_inside_a_transaction_through_the_master(shared):
    """RDF4J and graphdb.js call size() and query inside transactions: the master answers
    them over the committed state plus the transaction's pending operations (a worker's
    private view), and with nothing pending as plain reads; none of it leaks outside."""
    c = shared
    size_url = f"{c.repo_url}/size"
    with httpx.Client(timeout=30) as http:
        committed = int(http.get(size_url).text)
        tx = http.post(f"{c.repo_url}/transactions").headers["location"]
        assert http.put(tx, params={"action": "SIZE"}).text == str(committed)
        assert http.put(tx, params={"action": "PING"}).text.isdigit()
        r = http.put(tx, params={"action": "ADD"},
                     content=b"<urn:txr:s> <urn:txr:p> 1 . <urn:txr:s> <urn:txr:p> 2 .",
                     headers={"content-type": "text/turtle"})
        assert r.status_code == 200, r.text
        r = http.put(tx, params={"action": "UPDATE",
                                 "update": "DELETE DATA { <urn:txr:s> <urn:txr:p> 1 }"})
        assert r.status_code == 200, r.text
        for _ in range(3):  # each read may go to another worker: each builds its view
            assert http.put(tx, params={"action": "SIZE"}).text == str(committed + 1)
        got = http.put(tx, params={"action": "GET", "subj": "<urn:txr:s>"},
                       headers={"accept": "application/n-triples"})
        assert got.status_code == 200 and got.text.strip() == \
            '<urn:txr:s> <urn:txr:p> "2"^^<http://www.w3.org/2001/XMLSchema#integer> .'
        q = http.put(tx, params={"action": "QUERY"},
                     content=b"SELECT ?o WHERE { <urn:txr:s> ?p ?o }",
                     headers={"content-type": "application/sparql-query",
                              "accept": "application/sparql-results+json"})
        assert [b["o"]["value"] for b in q.json()["results"]["bindings"]] == ["2"]
        assert int(http.get(size_url).text) == committed  # outside: nothing yet
        assert c.select("SELECT * WHERE { <urn:txr:s> ?p ?o }") == []
        assert http.put(tx, params={"action": "COMMIT"}).status_code == 200
        assert int(http.get(size_url).text) == committed + 1
    # the workers' private views went with the transaction
    views = [Path(w.properties["data-dir"]) / "tmp" / "tx-views" for w in c.workers]
    assert [list(v.glob("*")) for v in views if v.exists()] == [[] for v in views
                                                                if v.exists()]
    assert_converged(c)


def test_protocol_details_through_the_master(shared):
    """What clients nobody here wrote send: a graph named by the master's own URL read back
    through it; graphdb.js's query in the URL and the form body; the protocol's
    using-graph-uri / using-named-graph-uri; and bad requests, each a clear 4xx that
    changes nothing."""
    c = shared
    with httpx.Client(timeout=30) as http:
        # Graph Store indirect identification: the graph IRI is the master's URL.
        graph_url = f"{c.repo_url}/rdf-graphs/pd-graph"
        r = http.put(graph_url, content=b'<urn:pd:s> <urn:pd:p> "named" .',
                     headers={"content-type": "text/turtle"})
        assert r.status_code == 204, r.text
        got = http.get(graph_url, headers={"accept": "application/n-triples"})
        assert got.status_code == 200, got.text
        assert got.text.strip() == '<urn:pd:s> <urn:pd:p> "named" .'
        assert c.select(f"SELECT ?o WHERE {{ GRAPH <{graph_url}> {{ ?s ?p ?o }} }}") == \
            [{"o": "named"}]
        # graphdb.js: query= in the URL and in the body, the same text
        q = "SELECT ?o WHERE { GRAPH ?g { <urn:pd:s> ?p ?o } }"
        r = http.post(c.repo_url, params={"query": q}, data={"query": q},
                      headers={"accept": "application/sparql-results+json"})
        assert r.status_code == 200, r.text
        assert [b["o"]["value"] for b in r.json()["results"]["bindings"]] == ["named"]
        r = http.post(c.repo_url, params={"query": q}, data={"query": "ASK {}"})
        assert r.status_code == 400 and "at most once" in r.text
        # SPARQL 1.1 Protocol: the update's dataset from the request
        r = http.post(f"{c.repo_url}/statements", data={
            "update": "INSERT { <urn:pd:copy> <urn:pd:p> ?o } WHERE { ?s <urn:pd:p> ?o }",
            "using-graph-uri": graph_url})
        assert r.status_code == 204, r.text
        r = http.post(f"{c.repo_url}/statements", data={
            "update": "INSERT { <urn:pd:named> <urn:pd:p> ?g } "
                      "WHERE { GRAPH ?g { ?s <urn:pd:p> ?o } }",
            "using-named-graph-uri": graph_url})
        assert r.status_code == 204, r.text
        assert {row["o"] for row in c.select(
            "SELECT ?o WHERE { ?s <urn:pd:p> ?o }")} == {"named", graph_url}
        size = http.get(f"{c.repo_url}/size").text
        bad = [
            # USING and using-graph-uri together: the protocol says error
            http.post(f"{c.repo_url}/statements", data={
                "update": "INSERT { <urn:pd:x> <urn:pd:p> 1 } USING <urn:g> WHERE {}",
                "using-graph-uri": graph_url}),
            http.post(f"{c.repo_url}/statements", content=b"<urn:pd:x> <urn:pd:p> 1 .",
                      headers={"content-type": ""}),
            http.get(f"{c.repo_url}/namespaces/%00"),
            http.put(f"{c.repo_url}/namespaces/a%0Ab", content=b"http://x/"),
        ]
        assert [r.status_code for r in bad] == [400, 415, 400, 400], [r.text for r in bad]
        assert "USING" in bad[0].text and "no Content-Type" in bad[1].text
        assert "control character" in bad[2].text and "control character" in bad[3].text
        assert http.get(f"{c.repo_url}/size").text == size
        http.post(f"{c.repo_url}/statements", data={
            "update": f"DROP GRAPH <{graph_url}>; DELETE WHERE {{ ?s <urn:pd:p> ?o }}"})
    assert_converged(c)


def test_abandoned_transactions_are_forgotten_by_the_master(cluster_factory):
    c = cluster_factory(1, **{"transaction-idle-timeout-s": "1"})
    with httpx.Client(timeout=30) as http:
        tx = http.post(f"{c.repo_url}/transactions").headers["location"]
        assert http.put(tx, params={"action": "PING"}).text == "1000"
        http.put(tx, params={"action": "ADD"}, content=b"<urn:ab:s> <urn:ab:p> 1 .",
                 headers={"content-type": "text/turtle"})
        time.sleep(1.5)
        r = http.put(tx, params={"action": "COMMIT"})
        assert r.status_code == 404 and "unknown transaction" in r.text, r.text
    assert c.select("SELECT * WHERE { <urn:ab:s> ?p ?o }") == []


def test_reads_never_go_to_a_worker_behind_the_acknowledged_head(cluster_factory):
    """Read-your-writes by default: a worker that stopped applying forwards (SIGSTOP, so
    the master still counts it in sync until its health check times out) is never sent a
    read that must see a write it has not applied; with consistency=eventual it is."""
    c = cluster_factory(3, **{"request-timeout-s": "20", "health-interval-s": "5"})
    probe = c.status()["probe"] or c.workers[0].url
    behind = next(w for w in c.workers if w.url != probe)
    behind_proc = behind.pid
    os.kill(behind_proc, signal.SIGSTOP)
    try:
        for i in range(5):
            assert c.update(f"INSERT DATA {{ <urn:ryw:s> <urn:ryw:p> {i} }}").status_code == 204
            for _ in range(6):  # more reads than workers: the router would cycle through all
                started = time.monotonic()
                got = c.select("SELECT (MAX(?o) AS ?m) WHERE { <urn:ryw:s> <urn:ryw:p> ?o }")
                assert got == [{"m": str(i)}], (i, got)
                assert time.monotonic() - started < 3, "a read waited on the stopped worker"
    finally:
        os.kill(behind_proc, signal.SIGCONT)
    c.wait_in_sync()


def test_local_consistency_updating_reads_its_own_write(shared):
    c = shared
    header = {"X-GraphDB-Local-Consistency": "updating"}
    for i in range(20):
        r = c.update(f"INSERT DATA {{ <urn:lc:s> <urn:lc:p> {i} }}")
        assert r.status_code == 204, r.text
        got = c.select("SELECT (MAX(?o) AS ?m) WHERE { <urn:lc:s> <urn:lc:p> ?o }", **header)
        assert got == [{"m": str(i)}], (i, got)
    assert_converged(c)


# ---- 8. bad inputs change nothing ----


def test_bad_inputs_get_a_clear_error_and_change_nothing(shared):
    c = shared
    before = assert_converged(c)
    fingerprints = c.fingerprints()
    statements = f"{c.repo_url}/statements"
    cases = [
        # refused by the master before it is logged: where it went wrong, on one line
        ("malformed update", dict(content=b"INSERT DATA { <urn:bad:a> <urn:bad:b> }",
                                  headers=UPDATE), 400, "MALFORMED QUERY: error at 1:"),
        ("malformed Turtle", dict(content=b"<urn:bad:a> <urn:bad:b> .",
                                  headers={"content-type": "text/turtle"}), 400,
         "MALFORMED DATA"),
        ("LOAD", dict(content=b"LOAD <http://example.org/data.ttl>", headers=UPDATE), 400,
         "LOAD is not supported in a cluster"),
        ("LOAD after a good operation",
         dict(content=b"INSERT DATA { <urn:bad:ok> <urn:bad:p> 1 } ; LOAD <http://e.org/x>",
              headers=UPDATE), 400, "LOAD is not supported in a cluster"),
        ("control query", dict(content=f"INSERT DATA {{ <urn:bad:a> <{FORBIDDEN}> 1 }}"
                               .encode(), headers=UPDATE), 409,
         f"control query failed (returned false): ASK {{ FILTER NOT EXISTS {{ ?s <{FORBIDDEN}>"),
        ("control query after a good operation",
         dict(content=f"INSERT DATA {{ <urn:bad:ok> <urn:bad:p> 1 }} ; "
                      f"INSERT DATA {{ <urn:bad:a> <{FORBIDDEN}> 2 }}".encode(),
              headers=UPDATE), 409, "control query failed"),
    ]
    for what, kwargs, status, text in cases:
        r = httpx.post(statements, timeout=30, **kwargs)
        assert (r.status_code, text in r.text) == (status, True), (what, r.status_code, r.text)
    r = httpx.post(f"{c.master.url}/repositories/nope/statements", timeout=30,
                   content=b"INSERT DATA { <urn:bad:a> <urn:bad:b> 1 }", headers=UPDATE)
    assert r.status_code == 404 and "unknown repository 'nope'" in r.text, r.text
    r = httpx.get(f"{c.master.url}/repositories/nope", params={"query": "ASK {}"}, timeout=30)
    assert r.status_code == 404 and "unknown repository 'nope'" in r.text, r.text
    # Nothing changed anywhere, and no worker left rotation over a client's mistake.
    after = assert_converged(c)
    assert after["head"] == before["head"]
    assert c.fingerprints() == fingerprints
    for w in c.workers:
        assert c.select(f"SELECT * WHERE {{ {{ ?s <{FORBIDDEN}> ?o }} UNION "
                        "{ <urn:bad:ok> ?p ?o } }", w.url) == []
    # the two control queries failed on the probe; the malformed update and the LOADs
    # never reached it (refused requests, rdf4j_protocol/writes.py check_update)
    assert after["counters"]["failed_writes"] >= before["counters"]["failed_writes"] + 2
    # and the cluster still takes a good write
    assert c.update("INSERT DATA { <urn:bad:fine> <urn:bad:p> 1 }").status_code == 204
    assert_converged(c)


# ---- 10. txcluster status ----


def test_status_command_prints_every_worker(shared):
    c = shared
    cli = [sys.executable, "-m", "txcluster.cli", "status", "--master", c.master.url]
    table = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("master master1: available, writable"), table.stdout
    for w in c.workers:
        [row] = [line for line in lines if line.startswith(w.url)]
        assert row.split()[1] == "ON", row
    as_json = subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert sorted(w["url"] for w in data["workers"]) == sorted(w.url for w in c.workers)
    assert data["node_id"] == "master1" and data["writable"] is True
    # a master that is not there: a clear error, exit code 2
    gone = subprocess.run([sys.executable, "-m", "txcluster.cli", "status", "--master",
                           "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and "cannot reach" in gone.stderr, gone.stderr
