"""Shared helpers for tests that run real processes (see txcluster.local)."""

from __future__ import annotations

from pathlib import Path

import httpx

from txcluster.auth import HmacAuth, load_secret
from txcluster.local import NodeProcess, free_port, new_secret, worker_node

__all__ = ["NodeProcess", "agreed_queue", "free_port", "make_secret", "signed_client",
           "worker_node"]


def make_secret(directory: Path) -> tuple[Path, bytes]:
    path = new_secret(directory)
    return path, load_secret(path)


def signed_client(node: NodeProcess, secret: bytes) -> httpx.Client:
    return httpx.Client(base_url=node.url, auth=HmacAuth(secret), timeout=120)


def agreed_queue(master_url: str) -> list[str]:
    """A peered master's agreed queue (transaction ids in order), read page by page from
    GET /admin/sync/agreed."""
    out: list[str] = []
    while True:
        r = httpx.get(f"{master_url}/admin/sync/agreed",
                      params={"after": len(out), "limit": 5000}, timeout=10)
        r.raise_for_status()
        page = [e["txid"] for e in r.json()]
        if not page:
            return out
        out += page
