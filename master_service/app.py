"""The master process: cluster.properties -> transaction log -> cluster -> HTTP APIs.

APScheduler (3.x, asyncio) drives the periodic work: worker health polls (which start
recovery) and log pruning by LogMaxSize / LogMaxDepth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
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
from master_service.sync.driver import SyncDriver
from master_service.sync.messages import mode_of
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.protocol import SplitRecovery, Timing
from master_service.sync.seeding import SeedImages, Seeding, SeedingFailed
from master_service.sync.status import seeding_before_peering
from master_service.txlog.agreement import AgreementLog
from master_service.txlog.log import TxLog
from rdf4j_protocol.routes import HotPaths, HotRoutes
from rdf4j_protocol.transactions import TransactionRegistry
from txcluster import http_server, tls
from txcluster.auth import NodeAuthorities, Verifier, load_secret, url_authority
from txcluster.properties import ConfigError

log = logging.getLogger("txcluster.master")

# After a failed seeding, a data centre that still needs seeding tries again this late.
SEED_RETRY_S = 30.0


class MasterService:
    """Holds the running master's parts; the config is reloaded after each persisted change."""

    def __init__(self, config: MasterConfig) -> None:
        self.config = config
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
        self.agreement: AgreementLog | None = None
        self.sync: SyncDriver | None = None  # once this master peers (sync/driver.py)
        self.cluster: Cluster | None = None
        # The write path of a peered master (sync/ordering.py); None: the cluster's own
        # group commit (cluster/local_ordering.py).
        self.ordering: AgreedOrdering | None = None
        self.log_thread: LogThread | None = None  # every call to the txlog's SQLite
        # Seeding (sync/seeding.py): the donor's images for peers, and this data centre's
        # own seeding from a peer.
        self.seed_images: SeedImages | None = None
        self.seeding: Seeding | None = None
        self._seed_task: asyncio.Task | None = None
        self._peering_lock = asyncio.Lock()
        self.scheduler: AsyncIOScheduler | None = None
        # The open RDF4J transactions of the client API (their pending operations).
        self.transactions = TransactionRegistry(config.transaction_idle_timeout_s)
        # The MBean's one Python object: Jolokia serves it always, the JVM bridge when
        # jmx.port is set (master_service/jmx).
        self.cluster_info = ClusterInfo(self)
        self.jmx: JmxBridge | None = None
        # The peering driver reports its rounds to it (metrics.sync_round).
        self.metrics = MasterMetrics(
            lambda: self.peer_verifier.remembered + self.cluster_verifier.remembered)
        # Every runtime change (admin API, JMX, Jolokia) is validated, persisted and
        # applied there (master_service/control.py).
        self.control = Control(self)

    def sync_status(self) -> dict | None:
        status = self._sync_status()
        progress = self.seeding.progress if self.seeding is not None else None
        if progress is not None:
            if status is None:  # seeding before peering: nothing agreed yet
                status = seeding_before_peering(self.config.node_id,
                                                self.config.data_centre)
            elif self.seeding is not None and self.seeding.running:
                status["state"] = "seeding"
            status["seeding"] = dict(progress)
        return status

    def _sync_status(self) -> dict | None:
        """The peering state for status pages and JMX, None when this master has no peers.

        Keys: node_id, mode ("read-write" | "read-only" | "muted"), state ("connected" |
        "waiting" | "split" | "recovering"), seq (agreed position), executed_seq,
        merge_base, counter, activity ("busy" | "idle"), incoming (count), peers: a list of
        {id, url, mode, reachable, last_heard_s, seq, fingerprint_match}, divergences: a
        list of {peer, kind, detail, time}; also data_centre, missing_peers,
        split_suspected, executed_fingerprint, failed."""
        return self.sync.status() if self.sync is not None else None

    async def _start_sync(self) -> None:
        """Peer: from here on every write goes through the TxLog sync protocol. The
        data centre's current state is agreed position 0 (the peering base)."""
        c = self.config
        assert self.agreement is not None and self.cluster is not None
        await self.cluster.db(self.agreement.enable)
        if self.ordering is None:  # the first peer, added at runtime
            self.ordering = AgreedOrdering(self.cluster, self.agreement)
            await self.cluster.order_by(self.ordering)
        self.sync = SyncDriver(
            node_id=c.node_id, mode=mode_of(c.read_only, c.mode), peers=dict(c.peers),
            secret=self.peer_secret, agreement=self.agreement, cluster=self.cluster,
            scheduler=self.scheduler, request_timeout=c.request_timeout_s,
            data_centre=c.data_centre, on_round=self.metrics.sync_round,
            on_needs_seeding=self._needs_seeding,
            split_recovery=SplitRecovery(c.split_recovery), tls=self.client_tls,
            ordering=self.ordering,
            timing=Timing(round_timeout=c.sync_round_timeout_ms,
                          idle_interval=c.sync_idle_interval_ms,
                          max_peer_lag=None if c.max_peer_lag_s is None
                          else int(c.max_peer_lag_s * 1000)))
        await self.sync.start()
        if self.seed_images is not None and (held := await self.seed_images.reinstate()):
            log.info("sync: holding the agreed entries seedings of %s still need",
                     ", ".join(held))
        self.ordering.submit_to = self.sync.submit

    async def start_peering(self) -> None:
        """Peer from now on, with the configured peers or none yet (a seed request to a
        master that never peered: api/seeding.py)."""
        async with self._peering_lock:  # two seed requests at once: one driver
            if self.sync is None and self.cluster is not None and not self._seeding_now:
                await self._start_sync()

    @property
    def _seeding_now(self) -> bool:
        """A seeding of this data centre is under way (its task has not ended)."""
        return self._seed_task is not None and not self._seed_task.done()

    def _needs_seeding(self) -> None:
        """The driver found that no peer can bring this data centre up to date by replay
        any more: seed it from the peer that executed the most (once at a time; after a
        failure, again SEED_RETRY_S later)."""
        if self.sync is None or self._seeding_now:
            return
        progress = self.seeding.progress if self.seeding is not None else None
        if progress and progress["phase"] == "failed" and \
                time.time() - progress["finished"] < SEED_RETRY_S:
            return  # the next needs_seeding after a failure waits a while
        donor = self.sync.node.seed_donor()
        url = dict(self.config.peers).get(donor) if donor else None
        if url is not None:
            log.warning("this data centre needs seeding: seeding it from %s", donor)
            self._seed_task = asyncio.create_task(self._seed(donor, url), name="seeding")

    async def seed_from(self, peer: str) -> dict:
        """Seed this data centre from peer ``peer`` (admin API; sync-seed-from at the
        first start): in the background, progress in sync_status()["seeding"]. KeyError:
        not a peer; SeedingFailed: one is running already."""
        url = dict(self.config.peers).get(peer)
        if url is None:
            raise KeyError(f"'{peer}' is not a sync peer of {self.config.node_id}")
        assert self.seeding is not None
        if self.seeding.running or self._seeding_now:
            raise SeedingFailed("a seeding is already running")
        self._seed_task = asyncio.create_task(self._seed(peer, url), name="seeding")
        await asyncio.sleep(0)  # running from here on
        return dict(self.seeding.progress or {})

    async def _seed(self, peer: str, url: str, retry_s: float = 0.0) -> None:
        """Peering stops (writes are refused: "peering is starting"), the data centre is
        seeded, peering starts again from the seeded floor. ``retry_s``: ask again after
        that long until it works (the first start of a joining data centre); 0: once."""
        assert self.seeding is not None and self.agreement is not None
        if self.sync is not None:
            if self.ordering is not None:
                self.ordering.submit_to = None
            await self.sync.stop()
            self.sync = None
        while True:
            try:
                await self.seeding.run(peer, url)
                failed = False
                break
            except SeedingFailed:
                failed = True
                if not retry_s:
                    break
                await asyncio.sleep(retry_s)
        # A data centre that never peered does not start at its own state: it has none
        # that its peers agreed on (docs/design/sync-protocol.md#seeding-a-data-centre).
        if self.agreement.enabled:
            await self._start_sync()
            if failed:  # still needing seeding then: ask again later (_needs_seeding)
                asyncio.get_running_loop().call_later(SEED_RETRY_S + 1, self._retry_seeding)
        if not failed:
            self.seeding.done()

    def _retry_seeding(self) -> None:
        if self.sync is not None and self.sync.health.needs_seeding:
            self._needs_seeding()

    async def start(self) -> None:
        c = self.config
        c.data_dir.mkdir(parents=True, exist_ok=True)
        self.txlog = TxLog.open(c.data_dir / "txlog.db")
        self.agreement = AgreementLog(self.txlog)
        peered = self.agreement.enabled or bool(c.peers)
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
        if peered:
            # The write path is chosen here, once: agreement among the peers. A master
            # that gets its first peer at runtime switches in _start_sync.
            self.ordering = AgreedOrdering(self.cluster, self.agreement)
            await self.cluster.order_by(self.ordering)
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
        self.seed_images = SeedImages(self.cluster, self.agreement, lambda: self.sync,
                                      lambda: self.cluster.params.compression)
        self.seeding = Seeding(
            cluster=self.cluster, agreement=self.agreement, secret=self.peer_secret,
            node_id=c.node_id, master_url=c.master_url, data_dir=c.data_dir,
            request_timeout=c.request_timeout_s, tls=self.client_tls)
        if peered and c.sync_seed_from and not self.agreement.enabled:
            url = dict(c.peers)[c.sync_seed_from]
            self._seed_task = asyncio.create_task(
                self._seed(c.sync_seed_from, url, retry_s=5.0), name="seeding")
        elif peered:
            await self._start_sync()
        if c.jmx_port is not None:
            self.jmx = JmxBridge(self.cluster_info, c, asyncio.get_running_loop())
            self.jmx.start()
        log.info("master %s for repository '%s' at head seq %d with %d workers",
                 c.node_id, c.repository_id, self.cluster.head_seq, len(self.cluster.workers))
        if peered:
            log.info("signed peer requests are taken for %s", self.peer_authorities.describe())

    async def stop(self) -> None:
        if self._seed_task is not None:
            self._seed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._seed_task
        if self.seeding is not None:
            await self.seeding.close()
        if self.sync:
            await self.sync.stop()
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
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    c = service.config
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
    app.include_router(peer_router(lambda: service.sync, service.peer_verifier, hot))
    app.include_router(seeding_router(
        lambda: service.seed_images if service.sync is not None else None,
        lambda: service.seeding, service.peer_verifier, service.cluster_verifier,
        service.start_peering))
    app.include_router(sync_admin_router(service, guard))
    app.include_router(jolokia_router(lambda: service.cluster_info, guard))
    app.include_router(metrics_router(cluster, auth, service.metrics, service.sync_status))
    app.include_router(status_page_router(cluster, auth, service.sync_status,
                                          lambda: service.config))
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
    http_server.run(app, host=config.host, port=config.port,
                    **tls.server_options(config.tls_cert_file, config.tls_key_file))
