"""Client CPU per node-to-node call: what one call from a master to a worker costs the
master's event loop (issue 18: that loop's CPU bounds the read-proxy ratio and agreed
throughput), for txinfra.http_pool against aiohttp (what the master used before) and
httpx's AsyncClient (what the CLI and tests use).

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_node_calls [--calls 3000] [--rounds 3]

One real worker process on loopback holds 8,000 triples; each client sends the same
point SELECT (a GET, as the master forwards a client's read) one call at a time, and the
figure is this process's CPU time (``time.process_time``: the worker is another process)
over the calls. Rounds alternate the clients, so machine noise falls on all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote

import aiohttp
import httpx
from yarl import URL

from bench._common import EX, quads, show, statistics, workdir
from rdfcore.changeset import Changeset
from txcluster.local import new_secret, worker_node
from txinfra.auth import HmacAuth, load_secret
from txinfra.http_pool import ConnectionPool

HEADERS = {"accept": "application/sparql-results+json"}


async def cpu_per_call(call: Callable[[], Awaitable[bytes]], calls: int) -> float:
    """Microseconds of this process's CPU per call, after a warm-up."""
    for _ in range(50):
        await call()
    start = time.process_time()
    for _ in range(calls):
        await call()
    return (time.process_time() - start) / calls * 1e6


async def one_round(url: str, calls: int) -> dict[str, float]:
    target = f"{url}/repositories/repo?query=" + quote(f"SELECT ?p ?o WHERE {{ <{EX}s7> ?p ?o }}")
    out: dict[str, float] = {}

    pool = ConnectionPool(timeout=30)

    async def by_pool() -> bytes:
        status, _, body = await pool.exchange("GET", URL(target, encoded=True),
                                              [*HEADERS.items()])
        assert status == 200, body
        return body

    out["txinfra.http_pool"] = await cpu_per_call(by_pool, calls)
    await pool.close()

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async def by_aiohttp() -> bytes:
            async with session.get(URL(target, encoded=True), headers=HEADERS) as resp:
                assert resp.status == 200
                return await resp.read()

        out["aiohttp"] = await cpu_per_call(by_aiohttp, calls)

    async with httpx.AsyncClient() as client:
        async def by_httpx() -> bytes:
            r = await client.get(target, headers=HEADERS)
            assert r.status_code == 200
            return r.content

        out["httpx.AsyncClient"] = await cpu_per_call(by_httpx, calls)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="calls per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with workdir("node-calls") as root:
        secret_file = new_secret(root / "s")
        node = worker_node(root / "w", secret_file, **{"verify-on-start": "false"}).start()
        try:
            cs = Changeset(added=frozenset(quads(0, 8_000)))
            with httpx.Client(base_url=node.url, auth=HmacAuth(load_secret(secret_file)),
                              timeout=300) as c:
                c.post("/cluster/apply", json={"entries": [{
                    "seq": 1, "txid": "load", "changeset": cs.to_wire()}]}).raise_for_status()
            rounds = [asyncio.run(one_round(node.url, args.calls)) for _ in range(args.rounds)]
        finally:
            node.stop()
    pool = statistics.median(r["txinfra.http_pool"] for r in rounds)
    rows = []
    for name in rounds[0]:
        each = [r[name] for r in rounds]
        median = statistics.median(each)
        listed = ", ".join(f"{v:.0f}" for v in each)
        rows.append((name, f"{median:6.0f} us CPU per call (rounds: {listed}), "
                           f"{median / pool:.2f}x the pool"))
    show(f"Client CPU per GET of a point SELECT, one call at a time ({args.calls} calls x "
         f"{args.rounds} rounds)", rows)


if __name__ == "__main__":
    main()
