"""Shared helpers for tests that run real processes (see txcluster.local)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
import uvloop

from txcluster.local import NodeProcess, free_port, new_secret, worker_node
from txinfra import http_server
from txinfra.auth import HmacAuth, load_secret

__all__ = ["NodeProcess", "agreed_queue", "free_port", "lone_worker", "make_secret",
           "run_on_cluster", "same_agreed", "signed_client", "worker_node"]


def make_secret(directory: Path) -> tuple[Path, bytes]:
    path = new_secret(directory)
    return path, load_secret(path)


def signed_client(node: NodeProcess, secret: bytes) -> httpx.Client:
    return httpx.Client(base_url=node.url, auth=HmacAuth(secret), timeout=120)


@contextmanager
def lone_worker(root: Path, **properties: str) -> Iterator[tuple[NodeProcess, bytes]]:
    """A worker process with no master, under ``root`` with a fresh cluster secret (the
    node and the secret, to sign its control calls); stopped by PID on the way out."""
    secret_file, secret = make_secret(root / "secrets")
    node = worker_node(root / "w", secret_file, **properties).start()
    try:
        yield node, secret
    finally:
        node.stop()


def agreed_queue(master_url: str) -> list[str | None]:
    """A peered master's agreed queue (transaction ids in order), read page by page from
    GET /admin/sync/agreed. Positions the master forgot (every data centre executed them,
    or they passed LogMaxSize: master_service/sync/protocol.py, "Compaction") are None;
    compare queues of several masters with ``same_agreed``."""
    out: list[str | None] = []
    while True:
        r = httpx.get(f"{master_url}/admin/sync/agreed",
                      params={"after": len(out), "limit": 5000}, timeout=10)
        r.raise_for_status()
        page = r.json()
        if not page:
            # A master that forgot every entry it agreed still knows how many: its floor.
            floor = httpx.get(f"{master_url}/admin/sync", timeout=10).json().get("floor", 0)
            return out + [None] * (floor - len(out))
        out += [None] * (page[0]["position"] - 1 - len(out))
        out += [e["txid"] for e in page]


def same_agreed(*queues: list[str | None]) -> bool:
    """Agreed queues of several masters are the same: equally long and equal wherever
    both still hold the entry."""
    return len({len(q) for q in queues}) <= 1 and all(
        len({e for e in column if e is not None}) <= 1 for column in zip(*queues, strict=True))


@contextmanager
def uvicorn_in_thread(app, **options) -> Iterator[int]:
    """``app`` served by uvicorn on a free loopback port in a thread of this process
    (``options``: more uvicorn.Config arguments); yields the port, stops the server."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def node_server_in_thread(app, **options) -> Iterator[int]:
    """``app`` served by the server both node kinds run (txinfra/http_server.py) on a
    free loopback port in a thread of this process (``options``: http_server.server's);
    yields the port, stops the server (the app's lifespan shutdown included)."""
    port = free_port()
    server = http_server.server(app, host="127.0.0.1", port=port, **options)
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert thread.is_alive(), "the node server stopped while starting"
            assert time.monotonic() < deadline, "the node server did not start"
            time.sleep(0.02)
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(server.stop)
        thread.join(10)
        loop.close()


def run_on_cluster(tmp_path: Path, secret: tuple[Path, bytes], workers: list[NodeProcess],
                   scenario) -> None:
    """Run ``await scenario(cluster, txlog)`` on a master's cluster object (no HTTP API, no
    scheduler: the test calls poll itself) over a real SQLite log in ``tmp_path`` and the
    running ``workers``, once every worker is ON; the cluster is stopped after."""
    import asyncio

    from master_service.cluster import replication
    from master_service.cluster.core import Cluster
    from master_service.cluster.statuses import WorkerStatus
    from master_service.txlog.log import TxLog

    async def main() -> None:
        with TxLog.open(tmp_path / "txlog.db") as txlog:
            cluster = Cluster(node_id="m1", txlog=txlog, secret=secret[1],
                              worker_urls=[w.url for w in workers],
                              params=replication.Parameters(), control_queries=[])
            await cluster.start()
            try:
                deadline = time.monotonic() + 30
                while not all(w.status == WorkerStatus.ON for w in cluster.workers.values()):
                    assert time.monotonic() < deadline, "workers not ON in 30 s"
                    await asyncio.sleep(0.01)
                await scenario(cluster, txlog)
            finally:
                await cluster.stop()

    asyncio.run(main())
