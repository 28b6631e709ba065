"""A peered commit's latency as one client sees it, back to back and with a pause between
writes (issue 18: commit p50, 3 peered masters / 1 master).

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_peer_commit [--writes 300] [--pause-ms 10]

One sequential client (httpx, one kept-alive connection) posts INSERT DATA of one triple to
the first master of `txcluster up --masters 1 --workers 3` and of `txcluster up --masters 3
--workers 1` (the layouts of bench_anchor's commit row), first back to back, then with a
pause after each answer. Prints each one's p50 and p90 and the ratio peered / single, and
the CPU every process of the layout spent per commit meanwhile (user and system, /proc):
on two cores a sequential commit is bounded by the CPU all processes spend on it, not only
by hops and fsyncs (bench/README.md, "2026-12-04").

Why both: a peered master answers once the probe executed the agreed group, and records
the execution after (docs/design/sync-protocol.md, "Durable writes on the commit path",
item 4). A client that writes again at once meets that record as a wait for its next
submission, on the same log thread; one that pauses does not. wrk (bench_anchor) measures
only the first.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import httpx

from bench import bench_anchor as ba
from bench._common import pct, workdir


def latencies(url: str, headers: dict[str, str], n: int, pause_s: float) -> list[float]:
    """Milliseconds of ``n`` sequential writes (each answered 204, else BenchError)."""
    out = []
    with httpx.Client(timeout=60) as client:
        for k in range(n):
            body = f'INSERT DATA {{ <urn:bench:c-{uuid.uuid4()}> <urn:bench:p> "v{k}" }}'
            started = time.perf_counter()
            r = client.post(url, content=body, headers=headers)
            out.append((time.perf_counter() - started) * 1000)
            if r.status_code != 204:
                raise ba.BenchError(f"write answered {r.status_code}: {r.text[:300]}")
            if pause_s:
                time.sleep(pause_s)
    return out


def cpu_per_commit(pids: dict[str, int], before: dict[str, tuple[float, float]],
                   n: int) -> dict[str, tuple[float, float]]:
    """Microseconds of user and system CPU per commit of each process since ``before``."""
    out = {}
    for name, pid in pids.items():
        user, system = ba.user_system(pid)
        out[name] = (1e6 * (user - before[name][0]) / n, 1e6 * (system - before[name][1]) / n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=300, help="writes per measurement")
    parser.add_argument("--pause-ms", type=float, default=10.0,
                        help="the pause after each answer of the second measurement")
    args = parser.parse_args()
    rows: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    with workdir("peer-commit") as root:
        for name, masters, workers in (("1 master + 3 workers", 1, 3),
                                       ("3 peered masters", 3, 1)):
            print(f"== txcluster up --masters {masters} --workers {workers}")
            with ba.cluster(root, masters, workers) as info:
                auth = ba.auth_headers(info)
                ba.check_peering(info, auth)
                url = (f"{info['masters'][0]['url']}/repositories/{info['repository']}"
                       "/statements")
                headers = {"Content-Type": "application/sparql-update",
                           **ba.header_dict(auth)}
                latencies(url, headers, 50, 0)  # warm-up
                for label, pause in (("back to back", 0.0), (f"pause {args.pause_ms:g} ms",
                                                              args.pause_ms / 1000)):
                    pids = ba.layout_pids(info)
                    before = {k: ba.user_system(pid) for k, pid in pids.items()}
                    rows[(name, label)] = latencies(url, headers, args.writes, pause)
                    cpu[(name, label)] = cpu_per_commit(pids, before, args.writes)
    print(f"\ncommit latency of one sequential client, {args.writes} writes each (ms)")
    print(f"  {'layout':<22} | {'writes':<14} | {'p50':>6} | {'p90':>6}")
    for (name, label), values in rows.items():
        print(f"  {name:<22} | {label:<14} | {statistics.median(values):6.2f} | "
              f"{pct(values, 90):6.2f}")
    for label in dict.fromkeys(label for _, label in rows):
        single = statistics.median(rows[("1 master + 3 workers", label)])
        peered = statistics.median(rows[("3 peered masters", label)])
        print(f"  p50 peered / single, {label}: {peered / single:.2f}x (target <= 2.0x)")
    print("\nCPU per commit meanwhile, us (user + system; the client's own not counted)")
    for (name, label), per in cpu.items():
        total = sum(u + s for u, s in per.values())
        parts = ", ".join(f"{k} {u:.0f}+{s:.0f}" for k, (u, s) in per.items())
        print(f"  {name:<22} | {label:<14} | all {total:6.0f} | {parts}")
    print("command: python -m bench.bench_peer_commit")


if __name__ == "__main__":
    main()
