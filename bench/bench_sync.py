"""Peered masters (TxLog sync protocol) on loopback: commit latency and agreed throughput.

    .venv/bin/python -m bench.bench_sync [--writes 150] [--seconds 15]

Prints, measured in the same run:
- the loopback round trip of one small request to a master (``RTT``: the unit of the
  issue's target, "3 masters add at most two round trips over 1 master");
- the commit latency (p50/p99) of a small INSERT DATA, sequential, through master 1 of
  1 master (no peers: the single data-centre path), 2 and 3 peered masters, each with 2
  workers; and how many RTTs the peering adds at p50;
- the same latency while the other masters are busy with writers of their own (busy mode);
- sustained agreed transactions/s with 3 masters and 4 concurrent writers on each.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from bench._common import EX, pct, show, statistics, workdir
from bench.bench_master import Conn, insert
from txcluster import local

PATH = "/repositories/repo/statements"


def start(root: Path, masters: int) -> dict:
    return local.up(root, masters=masters, workers=2)


def stop(root: Path) -> None:
    local.down(root)


def rtt_ms(url: str, n: int = 300) -> float:
    c = Conn(url)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = c.request("GET", "/health")
        times.append(time.perf_counter() - t0)
        assert status == 200
    c.close()
    return statistics.median(times) * 1000


def latencies(url: str, n: int, tag: str) -> list[float]:
    c = Conn(url)
    for i in range(10):  # warm-up
        c.update(PATH, insert(hash((tag, "warm", i)) % 10**9, 2))
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        c.update(PATH, insert(hash((tag, i)) % 10**9, 2))
        times.append((time.perf_counter() - t0) * 1000)
    c.close()
    return times


def writers(urls: list[str], per_master: int, stop_at: list[float], done: list[int]) -> list:
    """Writer threads until time.monotonic() passes stop_at[0] (a list: it can be moved)."""
    def run(k: int, url: str) -> None:
        c = Conn(url)
        i = 0
        while time.monotonic() < stop_at[0]:
            c.update(PATH, f'INSERT DATA {{ <{EX}w{k}-{i}> <{EX}p> "x" }}')
            i += 1
            done[k] += 1
        c.close()

    threads = [threading.Thread(target=run, args=(k, url), daemon=True)
               for k, url in enumerate(u for u in urls for _ in range(per_master))]
    for t in threads:
        t.start()
    return threads


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=150)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    rows: list[tuple[str, str]] = []
    p50 = {}
    with workdir("sync") as root:
        rtt = None
        for n in (1, 2, 3):
            d = root / f"m{n}"
            info = start(d, n)
            try:
                urls = [m["url"] for m in info["masters"]]
                if rtt is None:
                    rtt = rtt_ms(urls[0])
                    rows.append(("loopback RTT (GET /health)", f"{rtt:.2f} ms"))
                t = latencies(urls[0], args.writes, f"seq{n}")
                p50[n] = statistics.median(t)
                rows.append((f"commit latency, {n} master{'s' if n > 1 else ''}",
                             f"p50 {p50[n]:.1f} ms  p99 {pct(t, 99):.1f} ms"))
                if n == 3:
                    # busy mode: the other masters have writers of their own
                    done = [0] * 4
                    stop_at = [time.monotonic() + 3600]
                    ths = writers(urls[1:], 2, stop_at, done)
                    time.sleep(1)
                    t = latencies(urls[0], args.writes, "busy")
                    stop_at[0] = 0
                    rows.append(("commit latency, 3 masters, others busy",
                                 f"p50 {statistics.median(t):.1f} ms  p99 {pct(t, 99):.1f} ms"))
                    for th in ths:
                        th.join()
            finally:
                stop(d)
        added = p50[3] - p50[1]
        rows.append(("3 masters over 1 (p50)",
                     f"+{added:.1f} ms = {added / rtt:.1f} RTT (target <= 2 RTT)"))
        d = root / "tput"
        info = start(d, 3)
        try:
            urls = [m["url"] for m in info["masters"]]
            done = [0] * (4 * len(urls))
            t0 = time.monotonic()
            ths = writers(urls, 4, [t0 + args.seconds], done)
            for th in ths:
                th.join()
            elapsed = time.monotonic() - t0
            rows.append(("agreed tx/s, 3 masters x 4 writers",
                         f"{sum(done) / elapsed:.0f} tx/s ({sum(done)} in {elapsed:.1f} s)"))
        finally:
            stop(d)
    show("TxLog sync protocol, peered masters on loopback (2 workers each)", rows)


if __name__ == "__main__":
    main()
