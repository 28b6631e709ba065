"""`GET /metrics`: the master in Prometheus exposition format (prometheus-client).

Most numbers are read at scrape time from what the cluster already counts (the same
counters as `/admin/status` and the JMX attributes CompletedReads, FailedWrites, ...), so
the metrics can never disagree with the status; only what nothing else measures is
recorded here: request latencies (an ASGI middleware, by request kind) and the TxLog sync
rounds (``MasterMetrics.sync_round``, called by the peering driver).

Every master has its own registry (not prometheus-client's global one): several masters in
one process (tests) must not share series.

Access: the same read credential as the admin API when client-auth-file is set, because
the metrics name workers and peers (the topology); Prometheus sends it with
``basic_auth`` in its scrape config.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from starlette.responses import Response

from master_service.api.client import ClientAuth
from master_service.cluster.core import Cluster
from master_service.cluster.statuses import WorkerStatus

# Latency buckets from a point read on loopback (~1 ms) to a large update (minutes).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)
SYNC_STATES = ("connected", "waiting", "split", "recovering", "seeding")


def request_kind(method: str, path: str) -> str | None:
    """Which latency series a request belongs to, None for requests not measured.

    RDF4J protocol: a query is GET or POST on /repositories/{id}; other GETs under it are
    reads too (statements, size, contexts, namespaces); every other method under it
    changes data (statements, graph store, transactions)."""
    if path.startswith("/repositories/"):
        rest = path[len("/repositories/"):]
        if method in ("GET", "HEAD") or (method == "POST" and "/" not in rest.rstrip("/")):
            return "read"
        return "write"
    if path.startswith("/admin/"):
        return "admin"
    return None


class LatencyMiddleware:
    """Pure ASGI middleware (not BaseHTTPMiddleware, which costs every read a task and a
    memory stream) timing each measured request until its handler returned."""

    def __init__(self, app: Any, histogram: Histogram) -> None:
        self.app = app
        # One child per kind, looked up once: labels() takes a lock and builds a key on
        # every call, a cost each read paid.
        self.series = {kind: histogram.labels(kind) for kind in ("read", "write", "admin")}

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = request_kind(scope.get("method", ""), scope.get("path", "")) \
            if scope["type"] == "http" else None
        if kind is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.series[kind].observe(time.perf_counter() - started)


class MasterMetrics:
    """One master's registry: recorded series plus a collector that reads the cluster."""

    def __init__(self, nonces: Callable[[], int] = lambda: 0) -> None:
        # How many credential nonces this master remembers (txinfra/auth.py Verifier):
        # the replay cache is the largest memory a busy peered master holds for a while.
        self.nonces = nonces
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "txcluster_request_duration_seconds",
            "Time to answer a client request through this master, by kind "
            "(read, write, admin)", ["kind"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.sync_rounds = Counter(
            "txcluster_sync_rounds", "TxLog sync rounds run with the peers", registry=self.registry)
        self.sync_round_seconds = Histogram(
            "txcluster_sync_round_duration_seconds", "Duration of one TxLog sync round",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self._snapshot: dict[str, Any] | None = None
        self.registry.register(_ClusterCollector(self))

    def sync_round(self, seconds: float) -> None:
        """Hook for the peering driver: one sync round took ``seconds``."""
        self.sync_rounds.inc()
        self.sync_round_seconds.observe(seconds)

    async def render(self, cluster: Cluster, sync: dict | None) -> bytes:
        # The log's base lives in SQLite, read on the txlog thread; everything else is
        # in memory. The collector then reads this snapshot synchronously.
        base = await cluster.db(cluster.txlog.base)
        self._snapshot = {"cluster": cluster, "base_seq": base.seq, "sync": sync}
        try:
            return generate_latest(self.registry)
        finally:
            self._snapshot = None


class _ClusterCollector:
    def __init__(self, metrics: MasterMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list:
        return []  # values exist only during a scrape

    def collect(self):
        snap = self.metrics._snapshot
        if snap is None:
            return
        cluster: Cluster = snap["cluster"]
        c = cluster.counters

        # (family, name, help, value): the scalar metrics, with their JMX attribute
        counter, gauge = CounterMetricFamily, GaugeMetricFamily
        scalars = [
            (counter, "txcluster_reads_completed", "Reads answered (CompletedReads)",
             c.completed_reads),
            (counter, "txcluster_reads_failed", "Reads that failed (FailedReads)",
             c.failed_reads),
            (counter, "txcluster_writes_completed", "Writes acknowledged (CompletedWrites)",
             c.completed_writes),
            (counter, "txcluster_writes_failed", "Writes refused or failed (FailedWrites)",
             c.failed_writes),
            (counter, "txcluster_write_groups", "Group commits (writes per group = "
             "writes_completed / write_groups)", c.write_groups),
            (counter, "txcluster_read_seconds", "Total time spent answering reads "
             "(AverageReadTime = this / reads_completed)", c.read_time_s),
            (gauge, "txcluster_reads_running", "Reads in progress (RunningReads)",
             c.running_reads),
            (gauge, "txcluster_writes_running", "Writes in progress (RunningWrites)",
             c.running_writes),
            (gauge, "txcluster_writes_pending", "Writes waiting for the write path "
             "(PendingWrites)", cluster.pending_writes),
            (counter, "txcluster_replications", "Full replications (a storage image "
             "streamed worker to worker) completed", c.replications),
            (counter, "txcluster_replication_bytes", "Storage bytes of the source worker, "
             "summed over completed full replications", c.replication_bytes),
            (counter, "txcluster_fingerprint_mismatches", "Workers found with a "
             "fingerprint other than the log's or the probe's", c.fingerprint_mismatches),
            (gauge, "txcluster_txlog_head_seq", "Sequence number of the newest logged "
             "transaction", cluster.head_seq),
            (gauge, "txcluster_txlog_entries", "Transactions in the synchronised queue "
             "(pruned by LogMaxSize / LogMaxDepth)", cluster.head_seq - snap["base_seq"]),
            (gauge, "txcluster_quads", "Quads in the repository at the head of the log "
             "(NumberOfTriples)", cluster.head_quads),
            (gauge, "txcluster_status", "0 available, 1 needs attention / not writable, "
             "2 no workers (Status)", cluster.status_code()),
            (gauge, "txcluster_writable", "1 when this master takes writes (IsWritable)",
             1 if cluster.writable_reason() is None else 0),
            (gauge, "txcluster_credential_nonces", "Nonces of signed requests remembered "
             "against replays (each for the acceptance window of its timestamp)",
             self.metrics.nonces()),
        ]
        for family, name, doc, value in scalars:
            yield family(name, doc, value=value)

        refused = CounterMetricFamily(
            "txcluster_requests_refused", "Client requests refused by the RDF4J protocol "
            "before they reached the cluster, by reason (malformed_query, malformed_data, "
            "not_supported, ...): nothing logged, not counted as failed writes",
            labels=["reason"])
        for reason, count in sorted(c.refused_requests.items()):
            refused.add_metric([reason], count)
        yield refused

        counts = GaugeMetricFamily("txcluster_workers", "Workers by status",
                                   labels=["status"])
        for status in WorkerStatus:
            counts.add_metric([str(status)], sum(
                1 for w in cluster.workers.values() if w.status == status))
        yield counts
        per_worker = GaugeMetricFamily("txcluster_worker_seq", "Sequence number of each "
                                       "worker", labels=["worker"])
        lag = GaugeMetricFamily("txcluster_worker_lag", "Transactions a worker is behind "
                                "the head of the log", labels=["worker"])
        for w in cluster.workers.values():
            per_worker.add_metric([w.url], w.seq)
            lag.add_metric([w.url], max(cluster.head_seq - w.seq, 0) if w.seq >= 0 else
                           cluster.head_seq)
        yield per_worker
        yield lag

        sync = snap["sync"]
        if sync is not None:
            state = GaugeMetricFamily("txcluster_sync_state", "Peering state of this "
                                      "master (1 for the current one)", labels=["state"])
            for s in SYNC_STATES:
                state.add_metric([s], 1 if sync.get("state") == s else 0)
            yield state
            yield gauge("txcluster_sync_seq", "Agreed position in the synchronised queue",
                        sync.get("seq") or 0)
            yield gauge("txcluster_sync_executed_seq", "Last synchronised transaction "
                        "executed on this data centre's workers", sync.get("executed_seq") or 0)
            yield gauge("txcluster_sync_incoming", "Transactions in the incoming queue",
                        sync.get("incoming") or 0)
            reachable = GaugeMetricFamily("txcluster_peer_reachable", "1 when the peer "
                                          "master answered recently", labels=["peer"])
            for p in sync.get("peers", []):
                reachable.add_metric([p["id"]], 1 if p.get("reachable") else 0)
            yield reachable
            if (seeding := sync.get("seeding")) is not None:
                # Seeding from a peer's image (sync/seeding.py): bytes fetched of the total.
                yield gauge("txcluster_seed_bytes", "Bytes of the seed image downloaded",
                            seeding.get("bytes") or 0)
                yield gauge("txcluster_seed_bytes_total", "Size of the seed image",
                            seeding.get("total") or 0)
                yield gauge("txcluster_seed_position", "Agreed position the seed image "
                            "stands for", seeding.get("position") or 0)


def metrics_router(cluster_provider: Callable[[], Cluster], auth: ClientAuth,
                   metrics: MasterMetrics,
                   sync_status: Callable[[], dict | None]) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/metrics", summary="Prometheus metrics (read credential when client auth "
                "is on)", response_class=Response)
    async def get_metrics(request: Request) -> Response:
        if (denied := auth.problem(request, need_write=False)) is not None:
            return denied
        body = await metrics.render(cluster_provider(), sync_status())
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return router
