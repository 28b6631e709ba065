"""The master process: cluster.properties -> transaction log -> cluster -> HTTP APIs.

APScheduler (3.x, asyncio) drives the periodic work: worker health polls (which start
recovery) and log pruning by LogMaxSize / LogMaxDepth.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import uvicorn
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from fastapi import FastAPI

from master_service.api.admin import admin_router, status_of
from master_service.api.client import ClientAuth, client_router
from master_service.cluster import replication
from master_service.cluster.core import Cluster
from master_service.config import MasterConfig, update_properties
from master_service.txlog.log import TxLog
from txcluster.auth import load_secret

log = logging.getLogger("txcluster.master")


class MasterService:
    """Holds the running master's parts; the config is reloaded after each persisted change."""

    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        self.secret = load_secret(config.cluster_secret_file)
        self.txlog: TxLog | None = None
        self.cluster: Cluster | None = None
        self.scheduler: AsyncIOScheduler | None = None

    def persist(self, changes: dict[str, str | None]) -> None:
        if changes:
            self.config = update_properties(self.config.path, changes)

    async def start(self) -> None:
        c = self.config
        c.data_dir.mkdir(parents=True, exist_ok=True)
        self.txlog = TxLog.open(c.data_dir / "txlog.db")
        self.cluster = Cluster(
            node_id=c.node_id, txlog=self.txlog, secret=self.secret,
            worker_urls=list(c.workers),
            params=replication.Parameters(
                c.net_speed_bits_per_sec, c.full_replication_time_factor,
                c.min_time_to_consider_full_replication_s),
            control_queries=list(c.control_queries),
            protect_single_worker=c.protect_single_worker, read_only=c.read_only,
            mode=c.mode, strict=c.consistency == "strict",
            request_timeout=c.request_timeout_s,
            log_limits=(c.log_max_size, float(c.log_max_depth_hours)),
        )
        await self.cluster.start()
        self.scheduler = AsyncIOScheduler()
        self.scheduler.add_job(self.cluster.poll_all, "interval", seconds=c.health_interval_s,
                               id="health", max_instances=1, coalesce=True)
        self.scheduler.add_job(self.cluster.prune, "interval", seconds=60, id="prune",
                               max_instances=1, coalesce=True)
        self.scheduler.start()
        log.info("master %s for repository '%s' at head seq %d with %d workers",
                 c.node_id, c.repository_id, self.cluster.head_seq, len(self.cluster.workers))

    async def stop(self) -> None:
        if self.scheduler:
            self.scheduler.shutdown(wait=False)
        if self.cluster:
            await self.cluster.stop()
        if self.txlog:
            self.txlog.close()


def create_app(service: MasterService) -> FastAPI:
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
                  "and the admin API.")
    auth = ClientAuth(c.client_users)

    def cluster() -> Cluster:
        assert service.cluster is not None
        return service.cluster

    @app.get("/health", tags=["health"])
    async def health() -> dict:
        """Liveness and a short status (no credential needed)."""
        s = status_of(cluster())
        return {k: s[k] for k in ("node_id", "status", "writable", "head")}

    app.include_router(admin_router(cluster, auth, service.persist, lambda: service.config))
    app.include_router(client_router(cluster, c.repository_id, auth), tags=["rdf4j"])
    return app


def serve(config: MasterConfig) -> None:
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # httpx logs every request at INFO: one line per worker per health check (several a
    # second) would drown the cluster's own messages (smart-replication.txt's
    # "Replicating (...)"). Its warnings and errors still show.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    service = MasterService(config)
    uvicorn.run(create_app(service), host=config.host, port=config.port, log_level="warning",
                access_log=False)
