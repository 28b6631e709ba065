"""Read-your-writes cost (issue: drop-in for RDF4J and GraphDB clients).

Point-read throughput through a master (1 master + 3 workers, real processes on loopback)
while 4 writers write, with ``consistency=read-your-writes`` (the default: a read goes to a
worker that has applied the master's head at the read's arrival) against
``consistency=eventual`` (any in-sync worker) in the same run; target ratio >= 0.9. Each
setting runs twice, interleaved (E R E R), so that drift of the machine hits both.

Also printed: how many of the writers' own read-backs (write, then read it at once through
the same master, no header) missed the write they had just been acknowledged: the
staleness read-your-writes removes (it must be 0 there).

Run: .venv/bin/python -m bench.bench_read_your_writes [--seconds 8] [--readers 8]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx

from bench._common import EX, quads, show, workdir
from bench.bench_master import Conn, insert, start_cluster, stop

WRITERS = 4


def run_setting(root: Path, consistency: str, seconds: float, readers: int) -> dict:
    master, workers = start_cluster(root / consistency, 3, consistency=consistency)
    try:
        repo = "/repositories/repo"
        data = "\n".join(str(q) + " ." for q in quads(0, 40_000))
        httpx.post(f"{master.url}{repo}/statements", content=data,
                   headers={"content-type": "application/n-quads"}, timeout=120
                   ).raise_for_status()
        stop_at = time.monotonic() + seconds
        reads = [0] * readers
        writes = [0] * WRITERS
        stale = [0] * WRITERS

        def reader(k: int) -> None:
            c = Conn(master.url)
            i = k
            while time.monotonic() < stop_at:
                q = f"SELECT ?p ?o WHERE {{ <{EX}s{(i * 7919) % 5000}> ?p ?o }}"
                status, body = c.request("GET", f"{repo}?query={quote(q)}", headers={
                    "accept": "application/sparql-results+json"})
                assert status == 200, body[:300]
                reads[k] += 1
                i += readers
            c.close()

        def writer(k: int) -> None:
            c = Conn(master.url)
            i = 0
            while time.monotonic() < stop_at:
                subject = k * 1_000_000 + i
                c.update(f"{repo}/statements", insert(subject, 2))
                writes[k] += 1
                q = f"ASK {{ <{EX}s{subject}> ?p ?o }}"
                status, body = c.request("GET", f"{repo}?query={quote(q)}", headers={
                    "accept": "application/sparql-results+json"})
                assert status == 200, body[:300]
                stale[k] += b"true" not in body
                i += 1
            c.close()

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(readers)] + \
            [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
        started = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.monotonic() - started
        return {"reads_s": sum(reads) / elapsed, "writes_s": sum(writes) / elapsed,
                "stale": sum(stale), "readbacks": sum(writes)}
    finally:
        stop([master, *workers])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--readers", type=int, default=8)
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"eventual": [], "read-your-writes": []}
    with workdir("ryw") as root:
        for round_ in range(2):
            for consistency in results:
                r = run_setting(root / f"r{round_}", consistency, args.seconds, args.readers)
                results[consistency].append(r)
                show(f"{consistency} (round {round_ + 1})", [
                    ("point reads/s", f"{r['reads_s']:,.0f}"),
                    ("writes/s", f"{r['writes_s']:,.0f}"),
                    ("stale read-backs", f"{r['stale']} of {r['readbacks']}")])

    def mean(consistency: str, key: str) -> float:
        rs = results[consistency]
        return sum(r[key] for r in rs) / len(rs)

    ryw, eventual = mean("read-your-writes", "reads_s"), mean("eventual", "reads_s")
    stale = {c: sum(r["stale"] for r in rs) for c, rs in results.items()}
    show("read-your-writes vs eventual, 4 writers writing", [
        ("point reads/s ratio", f"{ryw / eventual:.2f} (target >= 0.90; {ryw:,.0f} vs "
                                f"{eventual:,.0f})"),
        ("stale read-backs", f"read-your-writes {stale['read-your-writes']}, "
                             f"eventual {stale['eventual']}")])

if __name__ == "__main__":
    main()
