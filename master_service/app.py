"""The master process: cluster.properties -> transaction log -> cluster -> HTTP APIs.

APScheduler (3.x, asyncio) drives the periodic work: worker health polls (which start
recovery) and log pruning by LogMaxSize / LogMaxDepth.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from fastapi import FastAPI

from master_service.api.admin import admin_router, status_of
from master_service.api.client import ClientAuth, client_router
from master_service.api.guard import AdminGuard
from master_service.api.metrics import LatencyMiddleware, MasterMetrics, metrics_router
from master_service.api.peer import peer_router
from master_service.api.seeding import seeding_router
from master_service.api.status_page import status_page_router
from master_service.api.sync_admin import sync_admin_router
from master_service.cluster import replication
from master_service.cluster.core import Cluster
from master_service.cluster.pool import LogThread
from master_service.config import MasterConfig
from master_service.control import Control
from master_service.jmx.bridge import JmxBridge, preflight
from master_service.jmx.clusterinfo import ClusterInfo
from master_service.jmx.jolokia import jolokia_router
from master_service.sync.peering import Peering
from master_service.sync.sqlite_storage import SqliteStorage
from master_service.txlog.log import TxLog
from rdf4j_protocol.routes import HotPaths, HotRoutes
from rdf4j_protocol.transactions import TransactionRegistry
from txinfra import http_server, tls
from txinfra.auth import NodeAuthorities, Verifier, load_secret, url_authority
from txinfra.properties import ConfigError

log = logging.getLogger("txcluster.master")


class MasterService:
    """The running master's parts, built and wired here; what changes at runtime is the
    control plane's (control.py), and peering is the peering object's (sync/peering.py)."""

    def __init__(self, config: MasterConfig) -> None:
        self.secret = load_secret(config.cluster_secret_file)
        self.peer_secret = load_secret(config.peer_secret_file) if config.peer_secret_file \
            else self.secret
        # Peers sign for the Host they send to: master-url, or another advertised name.
        self.peer_authorities = NodeAuthorities(
            config.host, config.port, (url_authority(config.master_url),
                                       *config.advertised_hosts))
        self.peer_verifier = Verifier(self.peer_secret, self.peer_authorities)
        # A worker of this data centre pulling a seed image from it (api/seeding.py).
        self.cluster_verifier = Verifier(self.secret, self.peer_authorities)
        # One TLS context for every server this master calls: workers and peers.
        self.client_tls = tls.client_context(config.tls_ca_file)
        self.txlog: TxLog | None = None
        self.agreement: SqliteStorage | None = None
        self.cluster: Cluster | None = None
        self.log_thread: LogThread | None = None  # every call to the txlog's SQLite
        self.scheduler: AsyncIOScheduler | None = None
        # The open RDF4J transactions of the client API (their pending operations).
        self.transactions = TransactionRegistry(config.transaction_idle_timeout_s)
        # The peering driver reports its rounds to it (metrics.sync_round).
        self.metrics = MasterMetrics(
            lambda: self.peer_verifier.remembered + self.cluster_verifier.remembered)
        # The sync driver, the agreed ordering and seeding; it reads the configuration
        # the control plane holds.
        self.peering = Peering(config=lambda: control.config, secret=self.peer_secret,
                               tls=self.client_tls, on_round=self.metrics.sync_round)
        # Every runtime change (admin API, JMX, Jolokia) is validated, persisted and
        # applied there; it owns the configuration from here on.
        # Why the application's startup failed, for serve() to report last.
        self.start_error: Exception | None = None
        control = self.control = Control(config, lambda: self.cluster, self.peering)
        # The MBean's one Python object: Jolokia serves it always, the JVM bridge when
        # jmx.port is set (master_service/jmx).
        self.cluster_info = ClusterInfo(self.control)
        self.jmx: JmxBridge | None = None

    async def start(self) -> None:
        c = self.control.config
        c.data_dir.mkdir(parents=True, exist_ok=True)
        self.txlog = TxLog.open(c.data_dir / "txlog.db")
        self.agreement = SqliteStorage(self.txlog)
        self.log_thread = LogThread()
        self.cluster = Cluster(
            node_id=c.node_id, txlog=self.txlog, secret=self.secret,
            worker_urls=list(c.workers),
            params=replication.Parameters(
                c.net_speed_bits_per_sec, c.full_replication_time_factor,
                c.min_time_to_consider_full_replication_s, c.replication_compression),
            control_queries=list(c.control_queries),
            protect_single_worker=c.protect_single_worker, read_only=c.read_only,
            mode=c.mode, consistency=c.consistency,
            request_timeout=c.request_timeout_s,
            log_limits=(c.log_max_size, float(c.log_max_depth_hours)),
            tls=self.client_tls, db=self.log_thread,
        )
        # The write path is chosen here, once, before the cluster starts: agreement among
        # the peers when this master peers (a master that gets its first peer at runtime
        # switches then).
        await self.peering.open(self.cluster, self.agreement)
        await self.cluster.start()
        self.scheduler = AsyncIOScheduler()
        self.scheduler.add_job(self.cluster.poll_all, "interval", seconds=c.health_interval_s,
                               id="health", max_instances=1, coalesce=True)
        # Abandoned RDF4J transactions go even when no new request comes
        # (rdf4j_protocol/transactions.py).
        self.scheduler.add_job(self.transactions.sweep, "interval", seconds=30,
                               id="transactions", max_instances=1, coalesce=True)
        self.scheduler.add_job(self.cluster.prune, "interval", seconds=60, id="prune",
                               max_instances=1, coalesce=True)
        self.scheduler.start()
        await self.peering.start(self.scheduler)
        if c.jmx_port is not None:
            self.jmx = JmxBridge(self.cluster_info, c, asyncio.get_running_loop())
            self.jmx.start()
        log.info("master %s for repository '%s' at head seq %d with %d workers",
                 c.node_id, c.repository_id, self.cluster.head_seq, len(self.cluster.workers))
        if self.peering.peered:
            log.info("signed peer requests are taken for %s", self.peer_authorities.describe())

    async def stop(self) -> None:
        await self.peering.stop()
        if self.jmx:
            self.jmx.stop()
        if self.scheduler:
            self.scheduler.shutdown(wait=False)
        if self.cluster:
            await self.cluster.stop()
        if self.log_thread:
            self.log_thread.shutdown()
        if self.txlog:
            self.txlog.close()


def create_app(service: MasterService) -> LatencyMiddleware:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            await service.start()
        except Exception as exc:
            # granian reports a failed startup as its own FatalError, after a traceback
            # that buries the reason: serve() raises this instead (ConfigError: exit 2).
            service.start_error = exc
            raise
        try:
            yield
        finally:
            await service.stop()

    c = service.control.config
    app = FastAPI(title=f"txcluster master {c.node_id}", lifespan=lifespan,
                  description="txcluster master: RDF4J REST facade over a cluster of workers, "
                  "and the admin API.", telemetry=http_server.FASTAPI_TELEMETRY)
    auth = ClientAuth(c.client_users)
    guard = AdminGuard(auth)  # every admin route: /admin, /admin/sync, /jolokia

    def cluster() -> Cluster:
        assert service.cluster is not None
        return service.cluster

    @app.get("/health", tags=["health"])
    async def health() -> dict:
        """Liveness and a short status (no credential needed)."""
        s = status_of(cluster())
        return {k: s[k] for k in ("node_id", "status", "writable", "head")}

    app.include_router(admin_router(service.control, guard))
    # Queries, updates and peer messages past the framework's routing (routes.HotPaths),
    # declared hot where they are mounted.
    hot = HotRoutes()
    app.include_router(client_router(cluster, c.repository_id, auth, service.transactions,
                                     c.query_timeout_s, hot), tags=["rdf4j"])
    peering = service.peering
    app.include_router(peer_router(lambda: peering.driver, service.peer_verifier, hot))
    app.include_router(seeding_router(peering, service.peer_verifier,
                                      service.cluster_verifier))
    app.include_router(sync_admin_router(service.control, guard))
    app.include_router(jolokia_router(lambda: service.cluster_info, guard))
    app.include_router(metrics_router(cluster, auth, service.metrics, peering.status))
    app.include_router(status_page_router(cluster, auth, peering.status,
                                          lambda: service.control.config))
    # The node's ASGI app: every request timed (LatencyMiddleware), the hot routes taken
    # by HotPaths before the framework's own middleware, the others to the framework.
    return LatencyMiddleware(HotPaths(app, routes=hot),
                             histogram=service.metrics.request_seconds)


def serve(config: MasterConfig) -> None:
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # httpx logs every request at INFO: one line per worker per health check (several a
    # second) would drown the cluster's own messages (the documented
    # "Replicating (...)" messages, docs/design/smart-replication.md#the-log-messages). Its
    # warnings and errors still show.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The JVM's JMX agent kills the process on a bad setting
    # (docs/design/dependencies.md#jpype1-the-jmx-bridge): refuse to start with the reason instead
    # (txcluster master exits 2).
    if problems := preflight(config):
        raise ConfigError(f"{config.path}: JMX cannot start: " + "; ".join(problems))
    service = MasterService(config)
    app = create_app(service)
    try:
        http_server.run(app, host=config.host, port=config.port,
                        **tls.server_options(config.tls_cert_file, config.tls_key_file))
    except http_server.ServerFailed:
        if service.start_error is not None:
            raise service.start_error from None
        raise
