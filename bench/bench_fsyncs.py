"""Durable writes per client write, on every process of a cluster (issue 18: "no per-hop
fsync that is not needed for safety; write down why each remaining one is").

Each layout is started by the real CLI (`txcluster up`); `strace -f -c` counts the
fsync-family system calls of each master and worker process while a client sends
INSERT DATA writes to the first master: first one at a time (the commit path of one
transaction), then from several threads at once (what group commit and merged Readies
share). It prints the calls per acknowledged write for each process (the times it
prints are taken under strace: not a latency measure). Why each one is there is written
down in docs/design/sync-protocol.md, "Durable writes on the commit path".

Run: .venv/bin/python -m bench.bench_fsyncs [--writes 200] [--clients 8]
Needs strace (Debian's strace: `make deps-debian`) and ptrace rights (root here).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench._common import workdir
from bench.bench_anchor import EX, BenchError, auth_headers, check_peering, cluster, header_dict

SYSCALLS = "fsync,fdatasync,sync_file_range,syncfs,sync"
# strace -c's table: "% time seconds usecs/call calls [errors] syscall"
_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", re.M)
LAYOUTS = ((1, 3, "1 master + 3 workers"), (3, 1, "3 peered masters + 1 worker each"))


def traced(procs: list[tuple[str, int]], out: Path, work) -> tuple[float, dict[str, dict]]:
    """Run ``work()`` with strace -c on each (name, pid); its seconds and, per process,
    the calls of each traced system call."""
    tracers = []
    for name, pid in procs:
        path = out / f"strace-{pid}.txt"
        tracers.append((name, path, subprocess.Popen(
            ["strace", "-f", "-c", "-e", f"trace={SYSCALLS}", "-p", str(pid), "-o", str(path)],
            stderr=subprocess.PIPE, text=True)))
    try:
        time.sleep(1.0)  # attached to every thread
        # strace -c writes nothing for a process that made none of the calls, so an
        # empty count is only "none" if its strace is still attached.
        for name, _, tracer in tracers:
            if tracer.poll() is not None:
                raise BenchError(f"strace could not attach to {name}: "
                                 f"{tracer.communicate()[1].strip()}")
        started = time.perf_counter()
        work()
        took = time.perf_counter() - started
        time.sleep(1.0)  # what follows the last answer (a peer's record) is counted too
    finally:
        for _, _, tracer in tracers:
            if tracer.poll() is None:
                tracer.send_signal(signal.SIGINT)
            tracer.communicate(timeout=30)
    return took, {name: {call: int(n) for n, call in _ROW.findall(path.read_text())
                         if call != "total"} for name, path, _ in tracers}


def writer(url: str, headers: dict[str, str], tag: str, n: int) -> None:
    with httpx.Client(timeout=60, headers=headers) as c:
        for i in range(n):
            r = c.post(url, content=f"INSERT DATA {{ <{EX}{tag}-{i}> <{EX}p> {i} }}",
                       headers={"content-type": "application/sparql-update"})
            if r.status_code != 204:
                raise BenchError(f"write {tag}-{i}: {r.status_code} {r.text[:200]}")


def layout(root: Path, masters: int, workers: int, title: str, writes: int,
           clients: int) -> None:
    with cluster(root, masters, workers) as info:
        auth = auth_headers(info)
        check_peering(info, auth)
        headers = header_dict(auth)
        url = f"{info['masters'][0]['url']}/repositories/{info['repository']}/statements"
        procs = [(f"master {m['id']}", m["pid"]) for m in info["masters"]]
        procs += [(f"worker {w['url'].rsplit(':', 1)[-1]}", w["pid"]) for w in info["workers"]]
        writer(url, headers, "warm", 20)
        one_by_one = traced(procs, root, lambda: writer(url, headers, "seq", writes))

        def together() -> None:
            with ThreadPoolExecutor(clients) as pool:
                for done in [pool.submit(writer, url, headers, f"c{k}", writes // clients)
                             for k in range(clients)]:
                    done.result()  # a refused write fails the run, as one at a time does
        at_once = traced(procs, root, together)
        done = {"one at a time": writes, f"{clients} clients": writes // clients * clients}
        print(f"\n== {title}: INSERT DATA to {info['masters'][0]['id']}")
        for (label, n), (took, counts) in zip(done.items(), (one_by_one, at_once),
                                              strict=True):
            print(f"  {label}: {n} writes, {took / n * 1000:.1f} ms each "
                  f"({n / took:.0f} writes/s)")
            for name, calls in counts.items():
                per = ", ".join(f"{c} {k / n:.2f}" for c, k in sorted(calls.items()))
                print(f"    {name:14s} {per or 'none'} per write")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=200, help="writes per phase")
    ap.add_argument("--clients", type=int, default=8, help="writers of the second phase")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("bench_fsyncs needs strace (make deps-debian installs it)")
    with workdir("fsyncs") as root:
        for masters, workers, title in LAYOUTS:
            layout(root, masters, workers, title, args.writes, args.clients)


if __name__ == "__main__":
    main()
