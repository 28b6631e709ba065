"""Master benchmarks (issue: single-DC master). Real processes on loopback; ratios are
measured in the same run.

1. point-query throughput through the master / direct to the same single worker
   (target >= 0.9);
2. commit latency of a 10-triple INSERT DATA, 1 master + 3 workers (target p50 <= 10 ms,
   p99 <= 50 ms);
3. 16 concurrent writers: committed transactions/s (target >= 1,000);
4. catch-up replay rate (quads/s) vs raw ``Store.extend`` (target >= 0.8).

Run: .venv/bin/python -m bench.bench_master
"""

from __future__ import annotations

import argparse
import http.client
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pyoxigraph as ox

from bench._common import EX, Timer, pct, quads, rate, show, workdir
from txcluster import local


def start_cluster(root: Path, n_workers: int, **extra: str):
    secret = local.new_secret(root)
    workers = [local.worker_node(root / f"w{i}", secret, **{"verify-on-start": "false"})
               for i in range(n_workers)]
    for w in workers:
        w.start(wait=False)
    for w in workers:
        w.wait_ready()
    master = local.master_node(root / "m", secret, "m1", [w.url for w in workers],
                               **{"health-interval-s": "0.5", **extra})
    master.start()
    local._wait_writable([master.url])
    return master, workers


def stop(nodes) -> None:
    for n in nodes:
        n.stop()


def insert(i: int, n: int = 10) -> str:
    return "INSERT DATA { " + " ".join(
        f"<{EX}s{i}> <{EX}p{j}> \"v{i}-{j}\" ." for j in range(n)) + " }"


class Conn:
    """A lean keep-alive HTTP client for load generation (stdlib http.client): the load
    generator shares the 2 cores with the cluster, so its own CPU per request matters
    (~0.25 ms here, against ~2 ms for an httpx.Client)."""

    def __init__(self, base: str) -> None:
        u = urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        return r.status, r.read()

    def update(self, path: str, text: str) -> None:
        status, body = self.request("POST", path, text.encode(),
                                    {"content-type": "application/sparql-update"})
        if status != 204:
            raise RuntimeError(f"write failed: {status} {body[:300]!r}")

    def close(self) -> None:
        self.conn.close()


def bench_point_query(root: Path, n_queries: int, clients: int) -> dict:
    master, workers = start_cluster(root / "pq", 1)
    try:
        repo = f"{master.url}/repositories/repo"
        data = "\n".join(str(q) + " ." for q in quads(0, 40_000))
        httpx.post(f"{repo}/statements", content=data,
                   headers={"content-type": "application/n-quads"}, timeout=120
                   ).raise_for_status()
        qs = [f"SELECT ?p ?o WHERE {{ <{EX}s{(i * 7919) % 5000}> ?p ?o }}"
              for i in range(n_queries)]

        def run(base: str) -> float:
            def worker(chunk: list[str]) -> None:
                c = Conn(base)
                path = urlsplit(base).path
                for q in chunk:
                    status, body = c.request("GET", f"{path}?query={quote(q)}", headers={
                        "accept": "application/sparql-results+json"})
                    assert status == 200, body
                c.close()
            threads = [threading.Thread(target=worker, args=(qs[i::clients],))
                       for i in range(clients)]
            with Timer() as t:
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
            return rate(n_queries, t.seconds)

        direct = run(f"{workers[0].url}/repositories/repo")
        via = run(repo)
        direct2 = run(f"{workers[0].url}/repositories/repo")
        return {"direct": (direct + direct2) / 2, "master": via}
    finally:
        stop([master, *workers])


def bench_latency(root: Path, n: int) -> list[float]:
    master, workers = start_cluster(root / "lat", 3)
    try:
        path = "/repositories/repo/statements"
        times = []
        c = Conn(master.url)
        for i in range(20):  # warm-up
            c.update(path, insert(10_000_000 + i))
        for i in range(n):
            t0 = time.perf_counter()
            c.update(path, insert(i))
            times.append(time.perf_counter() - t0)
        c.close()
        return times
    finally:
        stop([master, *workers])


def bench_concurrent(root: Path, writers: int, seconds: float) -> tuple[int, float]:
    master, workers = start_cluster(root / "conc", 3)
    try:
        path = "/repositories/repo/statements"
        done = [0] * writers
        stop_at = time.monotonic() + seconds

        def writer(k: int) -> None:
            c = Conn(master.url)
            i = 0
            while time.monotonic() < stop_at:
                c.update(path, insert(k * 1_000_000 + i, 2))
                i += 1
                done[k] += 1
            c.close()

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
        with Timer() as t:
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        groups = httpx.get(f"{master.url}/admin/status").json()["counters"]["write_groups"]
        return sum(done), t.seconds, sum(done) / max(groups, 1)
    finally:
        stop([master, *workers])


def bench_replay(root: Path, n_quads: int, batch: int) -> tuple[float, float]:
    batches = [quads(i, batch) for i in range(0, n_quads, batch)]
    store = ox.Store(str(root / "raw"))
    with Timer() as raw:
        for b in batches:
            store.extend(b)
    del store
    # A short health interval: the measured time should be the replay, not the wait
    # until the master notices the worker is back.
    master, workers = start_cluster(root / "rep", 2, **{"protect-single-worker": "false",
                                                       "health-interval-s": "0.1"})
    try:
        workers[1].stop()
        url = f"{master.url}/repositories/repo/statements"
        with httpx.Client(timeout=120) as c:
            for b in batches:
                data = "".join(f"{q} .\n" for q in b)
                r = c.post(url, content=data, headers={"content-type": "application/n-quads"})
                r.raise_for_status()
            head = c.get(f"{master.url}/admin/status").json()["head"]["seq"]
            workers[1].start()
            t0 = time.perf_counter()
            deadline = t0 + 600
            while time.perf_counter() < deadline:
                st = c.get(f"{master.url}/admin/status").json()
                w = next(x for x in st["workers"] if x["url"] == workers[1].url)
                if w["status"] == "ON" and w["seq"] == head:
                    break
                time.sleep(0.02)
            replay = time.perf_counter() - t0
            assert "Replicating" not in master.log_tail(100_000), "expected a replay"
        return rate(n_quads, raw.seconds), rate(n_quads, replay)
    finally:
        stop([master, *workers])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--latency-writes", type=int, default=300)
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--replay-quads", type=int, default=300_000)
    ap.add_argument("--replay-only", action="store_true",
                    help="only the catch-up replay figure (4.)")
    args = ap.parse_args()
    with workdir("master") as root:
        if not args.replay_only:
            others(root, args)
        raw, replay = bench_replay(root, args.replay_quads, 10_000)
        show(f"catch-up replay of {args.replay_quads:,} quads in 10k-quad transactions", [
            ("raw Store.extend in-process", f"{raw:,.0f} quads/s"),
            ("replay to a returning worker", f"{replay:,.0f} quads/s"),
            ("ratio (target >= 0.8)", f"{replay / raw:.2f}"),
        ])


def others(root: Path, args: argparse.Namespace) -> None:
    """Figures 1-3 of the module docstring."""
    q = bench_point_query(root, args.queries, args.clients)
    show(f"point SELECT, {args.queries} queries, {args.clients} clients, 1 worker", [
        ("direct to the worker", f"{q['direct']:,.0f} queries/s"),
        ("through the master", f"{q['master']:,.0f} queries/s"),
        ("ratio (target >= 0.9)", f"{q['master'] / q['direct']:.2f}"),
    ])
    lat = bench_latency(root, args.latency_writes)
    show(f"commit latency, 10-triple INSERT DATA, 1 master + 3 workers, "
         f"{args.latency_writes} sequential writes", [
        ("p50 (target <= 10 ms)", f"{pct(lat, 50) * 1000:.1f} ms"),
        ("p99 (target <= 50 ms)", f"{pct(lat, 99) * 1000:.1f} ms"),
        ("max", f"{max(lat) * 1000:.1f} ms"),
    ])
    n, secs, group = bench_concurrent(root, args.writers, args.seconds)
    show(f"{args.writers} concurrent writers, {args.seconds:g} s, 1 master + 3 workers", [
        ("committed transactions", f"{n:,}"),
        ("average group commit size", f"{group:.1f}"),
        ("transactions/s (target >= 1,000)", f"{n / secs:,.0f}"),
    ])


if __name__ == "__main__":
    main()
