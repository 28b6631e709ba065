"""Where peered writes spend their CPU: per sync round or per transaction (issue 18).

3 peered masters with one worker each (`txcluster up --masters 3 --workers 1`, as
bench_anchor's peering rows), INSERT DATA from wrk with its connections split over the
three masters, at several connection counts. For each: agreed transactions per second,
wrk's p50, the sync rounds each master ran per transaction (`txcluster_sync_rounds_total`
from /metrics) and the CPU per transaction of the masters and of the workers (/proc).
Then a least-squares line through them, CPU = per transaction + per round x rounds per
transaction: what a round costs a master (statuses sent and received, persists, an
execute call) against what a transaction costs it wherever it is batched.

Run: .venv/bin/python -m bench.bench_peer_rounds [--seconds 8] [--connections 3,6,12,16,32]
"""

from __future__ import annotations

import argparse
import re

import httpx

from bench import bench_anchor as ba
from bench._common import workdir

ROUNDS = re.compile(r"^txcluster_sync_rounds_total (\S+)$", re.M)


def rounds(urls: list[str], headers: dict[str, str]) -> float:
    """Sync rounds run so far by the masters together."""
    total = 0.0
    for url in urls:
        found = ROUNDS.search(httpx.get(f"{url}/metrics", headers=headers, timeout=10).text)
        if found is None:
            raise ba.BenchError(f"{url}/metrics has no txcluster_sync_rounds_total")
        total += float(found.group(1))
    return total


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--warmup", type=float, default=1)
    parser.add_argument("--connections", default="3,6,12,16,32",
                        help="comma-separated totals, split over the 3 masters")
    args = parser.parse_args()
    totals = [int(c) for c in args.connections.split(",")]
    wrk = ba.Wrk(args.seconds, 0, 2)  # no warm-up per run: the rounds counted are its own
    rows = []
    with workdir("peer-rounds") as root, ba.cluster(root, 3, 1) as info:
        auth = ba.auth_headers(info)
        ba.check_peering(info, auth)
        headers = ba.header_dict(auth)
        urls = [m["url"] for m in info["masters"]]
        pids = {f"m{i}": m["pid"] for i, m in enumerate(info["masters"])}
        pids.update({f"w{i}": w["pid"] for i, w in enumerate(info["workers"])})
        target = (f"/repositories/{info['repository']}/statements",)
        update = ["Content-Type: application/sparql-update", *auth]
        if args.warmup > 0:  # once, for the cluster
            ba.Wrk(args.warmup, 0, 2).parallel("warm-up", "write",
                                               [(u, target, update, 2) for u in urls])
        for total in totals:
            split = [max(1, total // 3 + (1 if i < total % 3 else 0)) for i in range(3)]
            before = rounds(urls, headers)
            result = wrk.parallel(f"{total} connections", "write",
                                  [(u, target, update, c) for u, c in zip(urls, split,
                                                                          strict=True)],
                                  cpu_of=pids)
            after = rounds(urls, headers)
            per_tx = (after - before) / 3 / max(result.ok, 1)
            master = sum(v for k, v in result.cpu_us.items() if k[0] == "m") / 3
            worker = sum(v for k, v in result.cpu_us.items() if k[0] == "w") / 3
            rows.append((total, result, per_tx, master, worker))
    print("\n3 peered masters, one worker each: INSERT DATA, connections split over them")
    print("  connections |    tx/s |   p50 ms | rounds/tx, each master | master us/tx | "
          "worker us/tx")
    for total, result, per_tx, master, worker in rows:
        print(f"  {total:11d} | {result.rate:7,.0f} | {result.p50_ms:8.1f} | {per_tx:22.3f} | "
              f"{master:12,.0f} | {worker:12,.0f}")
    if len(rows) >= 2:
        m0, m1 = line([(r[2], r[3]) for r in rows])
        w0, w1 = line([(r[2], r[4]) for r in rows])
        print(f"least squares: a master spends {m1:,.0f} us per round and {m0:,.0f} us per "
              f"transaction; a worker {w1:,.0f} us per round and {w0:,.0f} us per transaction")
    print(f"{args.seconds:g} s per run, after one warm-up of {args.warmup:g} s; "
          "command: python -m bench.bench_peer_rounds")


if __name__ == "__main__":
    main()
