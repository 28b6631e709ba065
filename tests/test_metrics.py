"""`GET /metrics` of a real master (master_service/api/metrics.py), parsed with
prometheus-client's own parser, and the read credential on the operator pages."""

from __future__ import annotations

import time

import httpx
import pytest

from master_service.api.metrics import request_kind
from tests.clusters import LocalCluster
from tests.scrape import scrape, value


def test_counters_latencies_workers_and_a_replication(cluster_factory):
    # Smart replication tuned so that adding an empty worker is a full replication:
    # a network this fast makes copying the store cheaper than replaying anything.
    cluster = cluster_factory(workers=2, **{
        "net-speed-bits-per-sec": str(10**13), "min-time-to-consider-full-replication-s": "0"})
    base = cluster.master.url
    before = scrape(base)
    assert value(before, "txcluster_workers", status="ON") == 2
    assert value(before, "txcluster_status") == 0 and value(before, "txcluster_writable") == 1

    for i in range(3):
        r = cluster.update(f"INSERT DATA {{ <urn:m{i}> <urn:p> {i} }}")
        assert r.status_code == 204, r.text
    rows = cluster.select("SELECT * WHERE { ?s <urn:p> ?o }", **{
        "x-graphdb-local-consistency": "updating"})
    assert len(rows) == 3
    refused = cluster.update("DELETE WHERE { ?s ?p ?o } ; LOAD <http://example.org/x>")
    assert 400 <= refused.status_code < 500

    after = scrape(base)
    head = cluster.status()["head"]["seq"]
    assert value(after, "txcluster_writes_completed_total") == 3
    assert value(after, "txcluster_reads_completed_total") >= 1
    assert value(after, "txcluster_txlog_head_seq") == head == 3
    assert value(after, "txcluster_txlog_entries") == 3
    assert value(after, "txcluster_quads") == 3
    # Latency histograms: every request counted in its kind, +Inf bucket == count.
    writes = value(after, "txcluster_request_duration_seconds_count", kind="write")
    assert writes == 4  # three writes and the refused one
    assert value(after, "txcluster_request_duration_seconds_bucket", kind="write",
                 le="+Inf") == writes
    assert value(after, "txcluster_request_duration_seconds_count", kind="read") >= 1
    assert value(after, "txcluster_request_duration_seconds_sum", kind="write") > 0
    assert value(after, "txcluster_fingerprint_mismatches_total") == 0
    assert value(after, "txcluster_replications_total") == 0
    for w in cluster.workers:
        assert value(after, "txcluster_worker_lag", worker=w.url) == 0

    # A new, empty worker is replicated from one holding the data.
    extra = cluster.new_worker("worker3").start()
    r = httpx.post(f"{base}/admin/workers", json={"url": extra.url}, timeout=30)
    assert r.status_code == 200, r.text
    cluster.workers.append(extra)
    cluster.wait_in_sync()
    replicated = scrape(base)
    assert value(replicated, "txcluster_replications_total") == 1
    assert value(replicated, "txcluster_replication_bytes_total") > 0
    assert value(replicated, "txcluster_workers", status="ON") == 3

    # A worker that dies is counted OFF and the cluster needs attention.
    extra.kill9()
    cluster.wait_for(lambda s: cluster.worker_status(s, extra)["status"] == "OFF",
                     "worker OFF")
    down = scrape(base)
    assert value(down, "txcluster_workers", status="OFF") == 1
    assert value(down, "txcluster_status") == 1
    assert ("txcluster_sync_state", (("state", "connected"),)) not in down  # not peered


@pytest.mark.processes
def test_operator_pages_take_the_read_credential(tmp_path, secret):
    """With client-auth-file, /metrics, /status and /status/data answer 401 (asking for
    basic auth) without a user, 401 with a wrong password, 200 for a reader."""
    users = tmp_path / "users"
    users.write_text("reader:r-pass:read\nwriter:w:pass:write\n")
    cluster = LocalCluster(tmp_path / "auth", secret, 1, **{"client-auth-file": str(users)})
    try:
        for w in cluster.workers:
            w.start()
        cluster.master.start()  # waits for /health, which needs no credential
        base = cluster.master.url
        for path in ("/metrics", "/status", "/status/data", "/status/assets/status.js"):
            r = httpx.get(f"{base}{path}", timeout=10)
            assert r.status_code == 401, (path, r.status_code)
            assert r.headers["www-authenticate"] == 'Basic realm="txcluster"'
            assert httpx.get(f"{base}{path}", auth=("reader", "wrong"),
                             timeout=10).status_code == 401
            assert httpx.get(f"{base}{path}", auth=("reader", "r-pass"),
                             timeout=10).status_code == 200, path
            assert httpx.get(f"{base}{path}", auth=("writer", "w:pass"),
                             timeout=10).status_code == 200, path
        assert httpx.get(f"{base}/health", timeout=10).status_code == 200
    finally:
        cluster.stop_all()


@pytest.mark.parametrize("method, path, kind", [
    ("GET", "/repositories/repo", "read"),
    ("POST", "/repositories/repo", "read"),  # a query by POST
    ("GET", "/repositories/repo/statements", "read"),
    ("GET", "/repositories/repo/size", "read"),
    ("POST", "/repositories/repo/statements", "write"),
    ("DELETE", "/repositories/repo/statements", "write"),
    ("PUT", "/repositories/repo/rdf-graphs/service", "write"),
    ("POST", "/repositories/repo/transactions", "write"),
    ("GET", "/admin/status", "admin"),
    ("GET", "/metrics", None),
    ("GET", "/status/data", None),
    ("GET", "/health", None),
])
def test_request_kinds(method, path, kind):
    assert request_kind(method, path) == kind


@pytest.mark.processes
def test_peering_metrics(request):
    """Two peered masters: the sync series appear, and a peer's death shows."""
    uk, us = request.getfixturevalue("two_data_centres")
    deadline = time.monotonic() + 60
    while True:
        samples = scrape(uk.master.url)
        if value(samples, "txcluster_sync_state", state="connected") == 1 and \
                value(samples, "txcluster_peer_reachable", peer="master-us") == 1:
            break
        assert time.monotonic() < deadline, "not connected"
        time.sleep(0.2)
    assert value(samples, "txcluster_sync_state", state="split") == 0
    assert uk.update("INSERT DATA { <urn:peered> <urn:p> 1 }").status_code == 204
    samples = scrape(uk.master.url)
    assert value(samples, "txcluster_sync_seq") >= 1
    assert value(samples, "txcluster_sync_incoming") >= 0
    # us signs every peer call it makes to uk: uk remembers their nonces against replays.
    assert value(samples, "txcluster_credential_nonces") > 0
    us.master.kill9()
    deadline = time.monotonic() + 60
    while value(scrape(uk.master.url), "txcluster_peer_reachable", peer="master-us") != 0:
        assert time.monotonic() < deadline, "peer still reachable"
        time.sleep(0.2)
