"""The worker process: configuration -> repository -> HTTP API (txinfra/http_server.py)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from rdf4j_protocol.routes import HotPaths, HotRoutes
from rdf4j_protocol.transactions import TRANSACTION_IDLE_S
from txinfra import http_server, tls
from txinfra.auth import NodeAuthorities, Verifier, load_secret
from worker_service.api.control import control_router, state_json
from worker_service.api.epoch import EpochFence, epoch_router
from worker_service.api.rdf4j import WorkerBackend, rdf4j_router
from worker_service.config import WorkerConfig
from worker_service.promise import DEFAULT_GRANT_LEASE_MS, Promise
from worker_service.query_isolation import QueryLimits
from worker_service.repository import Repository

log = logging.getLogger("txcluster.worker")


def create_app(repo: Repository, secret: bytes, node: NodeAuthorities,
               title: str = "txcluster worker",
               client_tls: ssl.SSLContext | None = None,
               transaction_idle_s: float = TRANSACTION_IDLE_S,
               limits: QueryLimits | None = None,
               grant_lease_ms: int = DEFAULT_GRANT_LEASE_MS) -> FastAPI:
    """``node``: the Host headers this worker answers signed requests for; ``limits``:
    query timeout and concurrent query processes (query_isolation.py); ``grant_lease_ms``:
    epochs.ask_grant's lease (promise.py)."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        rdf4j_backend.close()

    app = FastAPI(title=title, description="txcluster worker: one repository, RDF4J REST API "
                  "for reads, cluster-control API for its master.", lifespan=lifespan,
                  telemetry=http_server.FASTAPI_TELEMETRY)
    verifier = Verifier(secret, node)
    app.state.repository = repo
    # The write epoch this worker promised, read before anything is served (promise.py).
    promise = Promise(repo.data_dir, grant_lease_ms)

    def provider() -> Repository:
        return repo

    @app.get("/health", tags=["health"])
    def health() -> dict:
        """Liveness and a summary of the worker's state (no credential needed)."""
        return state_json(repo)

    # Point queries and writes, and its master's execute and apply calls, past the
    # framework's routing (routes.HotPaths), declared hot where they are mounted.
    hot = HotRoutes()
    app.include_router(control_router(provider, verifier, secret, client_tls, hot),
                       tags=["cluster-control"])
    rdf4j_backend = WorkerBackend(provider, verifier, transaction_idle_s, limits)
    app.include_router(rdf4j_router(rdf4j_backend, hot), tags=["rdf4j"])
    app.include_router(epoch_router(promise, verifier), tags=["cluster-control"])
    app.add_middleware(HotPaths, routes=hot)
    # Outermost, so that the hot routes pass the fence too (api/epoch.py).
    app.add_middleware(EpochFence, promise=promise, verifier=verifier)
    return app


def serve(config: WorkerConfig) -> None:
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    secret = load_secret(config.cluster_secret_file)
    repo = Repository(config.repository_id, config.data_dir, sync_writes=config.sync_writes,
                      verify_on_start=config.verify_on_start)
    st = repo.state()
    log.info("repository '%s' at seq %d, %d quads, listening on %s:%d",
             repo.id, st.seq, st.quads, config.host, config.port)
    node = NodeAuthorities(config.host, config.port, config.advertised_hosts)
    log.info("signed requests are taken for %s", node.describe())
    app = create_app(repo, secret, node, title=f"txcluster worker {config.repository_id}",
                     client_tls=tls.client_context(config.tls_ca_file),
                     transaction_idle_s=config.transaction_idle_timeout_s,
                     limits=config.limits(),
                     grant_lease_ms=config.epoch_grant_lease_ms)
    try:
        http_server.run(app, host=config.host, port=config.port,
                        **tls.server_options(config.tls_cert_file, config.tls_key_file))
    finally:
        repo.close()
