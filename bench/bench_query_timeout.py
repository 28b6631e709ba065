"""Query timeouts (txinfra/query_limits.py, worker_service/query_isolation.py,
worker_service/query_process.py).

Printed, from one run against real worker processes on loopback:

1. point SELECT throughput (by subject, 100,000 triples, many concurrent HTTP clients)
   against one worker with the timeout machinery on (as worker_service.app.serve runs it:
   classifier, timeouts, query processes) and against one with it off (every query in the
   worker's threads, stopped only while results stream: how queries ran before), both
   started by this module so that they differ in nothing else, in the same run,
   interleaved (off on off on ...) so that drift of the machine hits both; ratio on/off
   (target >= 0.9), and the worker's CPU per query in each (steadier than throughput
   when other work shares the machine);
2. runaway queries over those triples sent with timeout=1, a 4-way cross join and a COUNT
   over it: seconds until the answer (target: about 1, at most 2), the latency of a write
   (a changeset applied as the master applies it) sent 1 s after the query, against the
   same write on an idle worker, and the worker's CPU use in the second after the answer;
3. the COUNT against the worker with the machinery off, for comparison: the cross join
   writes results at once, so the old check at each write stopped it, but an aggregate
   writes nothing until it is done, and holds the read lock while it evaluates, so the
   write waits too (its client gives up after --runaway-wait seconds; that worker is then
   killed).

With ``--fork-stress N`` instead: N queries that need a query process (a COUNT of the
changing triples), one after the other, while a writer applies changesets that each
replace 1,000 triples with 2 KB literals by 1,000 others (RocksDB flushes and compacts all
along) and 8 clients send point queries; printed: how many query processes were found
stuck on a lock inherited at the fork and forked again (query_process.py), whether every
COUNT saw exactly one batch (the snapshot is consistent), and the latency of those queries.

Run: .venv/bin/python -m bench.bench_query_timeout [--seconds 3] [--rounds 4] [--clients 16]
     .venv/bin/python -m bench.bench_query_timeout --fork-stress 3000
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pyoxigraph as ox

from bench._common import EX, quads, show, workdir
from bench.bench_master import Conn
from rdfcore import fingerprint
from rdfcore.changeset import Changeset
from txcluster.local import NodeProcess, new_secret, worker_node
from txinfra.auth import HmacAuth, load_secret

N_TRIPLES = 100_000
N_SUBJECTS = N_TRIPLES // 8  # bench._common.quads: 8 predicates per subject
REPO = "/repositories/repo"
RUNAWAY = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
RUNAWAY_COUNT = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
JSON = {"accept": "application/sparql-results+json"}


# ---- both workers: one app, the machinery on (as configured) or off ----


def serve(config_path: str, machinery: str) -> None:
    """A worker as worker_service.app.serve runs it; ``machinery`` "off" runs it with
    QueryLimits(isolate=False). Both measured workers start here, so that they differ in
    nothing else."""
    from txinfra import http_server
    from txinfra.auth import NodeAuthorities
    from worker_service.app import create_app
    from worker_service.config import WorkerConfig
    from worker_service.repository import Repository

    config = WorkerConfig.load(config_path)
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = config.limits()
    if machinery == "off":
        limits = dataclasses.replace(limits, isolate=False)
    repo = Repository(config.repository_id, config.data_dir, verify_on_start=False)
    app = create_app(repo, load_secret(config.cluster_secret_file),
                     NodeAuthorities(config.host, config.port), limits=limits)
    try:
        http_server.run(app, host=config.host, port=config.port)
    finally:
        repo.close()


def start(node: NodeProcess, machinery: str) -> NodeProcess:
    node.write_config()
    with open(node.log_path, "ab") as log:
        node.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_query_timeout", "--serve", str(node.config),
             machinery], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    node.pid = node.proc.pid
    node.wait_ready()
    return node


# ---- measurements ----


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its reaped children (its query processes)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def load(node: NodeProcess, secret: bytes) -> int:
    """N_TRIPLES triples, applied as a master applies a changeset; the seq reached."""
    cs = Changeset(added=frozenset(quads(0, N_TRIPLES)))
    with httpx.Client(auth=HmacAuth(secret), timeout=300) as c:
        c.post(f"{node.url}/cluster/apply", json={"entries": [{
            "seq": 1, "txid": "load", "changeset": cs.to_wire(),
            "expected_fingerprint": fingerprint.to_hex(cs.moved_fingerprint(0))}]}
               ).raise_for_status()
    return 1


def point_reads(node: NodeProcess, seconds: float, clients: int) -> tuple[int, float, float]:
    """(queries answered, seconds, worker CPU seconds) for ``clients`` keep-alive clients
    asking point SELECTs by subject for ``seconds``."""
    counts = [0] * clients
    stop_at = time.monotonic() + seconds

    def client(k: int) -> None:
        c = Conn(node.url)
        i = k
        while time.monotonic() < stop_at:
            q = f"SELECT ?p ?o WHERE {{ <{EX}s{(i * 7919) % N_SUBJECTS}> ?p ?o }}"
            status, body = c.request("GET", f"{REPO}?query={quote(q)}", headers=JSON)
            assert status == 200 and b'"bindings":[{' in body, body[:300]
            counts[k] += 1
            i += clients
        c.close()

    cpu = cpu_seconds(node.pid)
    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.monotonic() - started, cpu_seconds(node.pid) - cpu


def write(node: NodeProcess, secret: bytes, seq: int, wait: float = 300) -> float | None:
    """Seconds to apply one small changeset (the master's /cluster/apply) at ``seq``;
    None when it was not done within ``wait``."""
    cs = Changeset(added=frozenset(quads(N_TRIPLES + seq * 10, 10)))
    started = time.monotonic()
    with httpx.Client(auth=HmacAuth(secret), timeout=wait) as c:
        try:
            c.post(f"{node.url}/cluster/apply", json={"entries": [{
                "seq": seq, "txid": f"w{seq}", "changeset": cs.to_wire()}]}
                   ).raise_for_status()
        except httpx.TimeoutException:
            return None
    return time.monotonic() - started


def runaway(node: NodeProcess, secret: bytes, seq: int, query: str, wait: float) -> dict:
    """``query`` with timeout=1, and a write 1 s after it (at ``seq``, then ``seq + 1``)."""
    answer: dict = {}

    def ask() -> None:
        started = time.monotonic()
        try:
            r = httpx.get(f"{node.url}{REPO}", params={"query": query, "timeout": "1"},
                          headers=JSON, timeout=wait)
            answer["status"], answer["text"] = r.status_code, r.text[:100]
        except httpx.TimeoutException:
            answer["status"] = None
        answer["seconds"] = time.monotonic() - started

    idle_write = write(node, secret, seq)
    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(1.0)
    during = write(node, secret, seq + 1, wait)
    thread.join()
    return {**answer, "idle_write": idle_write, "write": during, "wait": wait,
            "cpu": _cpu_growth(node)}


def runaway_rows(r: dict) -> list[tuple[str, str]]:
    answer = (f"{r['status']} after {r['seconds']:.2f} s: {r.get('text', '')}"
              if r["status"] else f"none after {r['seconds']:.2f} s (the client gave up)")
    return [("answer", answer),
            ("write 1 s after it", (f"{r['write'] * 1000:.1f} ms" if r["write"] is not None
                                    else f"not done within {r['wait']:g} s")
             + f" (idle: {r['idle_write'] * 1000:.1f} ms)"),
            ("worker CPU in the second after", f"{r['cpu']:.2f} s")]


def fork_stress(root: Path, secret_file: Path, n: int) -> None:
    secret = load_secret(secret_file)
    node = worker_node(root / "stress", secret_file, **{"verify-on-start": "false"}).start()
    stop = threading.Event()
    try:
        seq = load(node, secret)
        batch = 1000

        churn = ox.NamedNode(f"{EX}churn")

        def big(k: int) -> frozenset:
            return frozenset(ox.Quad(ox.NamedNode(f"{EX}c{k}_{i}"), churn,
                                     ox.Literal(f"{i} " + "x" * 2000)) for i in range(batch))

        def changesets() -> None:
            # Each changeset replaces batch k - 1 by batch k: the store stays small, every
            # changeset moves 4 MB through RocksDB (memtable flushes, compactions), and a
            # consistent snapshot holds exactly one batch.
            nonlocal seq
            k = 0
            with httpx.Client(auth=HmacAuth(secret), timeout=300) as c:
                while not stop.is_set():
                    cs = Changeset(added=big(k), removed=big(k - 1) if k else frozenset())
                    seq += 1
                    c.post(f"{node.url}/cluster/apply", json={"entries": [{
                        "seq": seq, "txid": f"s{seq}", "changeset": cs.to_wire()}]}
                           ).raise_for_status()
                    k += 1
                    time.sleep(0.1)

        def reads(j: int) -> None:
            c = Conn(node.url)
            i = j
            while not stop.is_set():
                q = f"SELECT ?p ?o WHERE {{ <{EX}s{(i * 7919) % N_SUBJECTS}> ?p ?o }}"
                status, _ = c.request("GET", f"{REPO}?query={quote(q)}", headers=JSON)
                assert status == 200
                i += 8
            c.close()

        threads = [threading.Thread(target=changesets)] + [
            threading.Thread(target=reads, args=(j,)) for j in range(8)]
        for t in threads:
            t.start()
        latencies, inconsistent = [], 0
        count = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{churn.value}> ?o }}"
        with httpx.Client(timeout=60) as c:
            for _ in range(n):
                started = time.monotonic()
                r = c.get(f"{node.url}{REPO}", params={"query": count},
                          headers={"accept": "text/csv"})
                latencies.append(time.monotonic() - started)
                assert r.status_code == 200, r.text
                if int(r.text.split()[1]) not in (0, batch):
                    inconsistent += 1
        stop.set()
        for t in threads:
            t.join()
        stuck = node.log_path.read_text().count("made no progress")
        latencies.sort()
        show(f"fork stress: {n} queries in query processes under writes (seq {seq}) and "
             f"8 point-query clients", [
                 ("query processes stuck at the fork, forked again", f"{stuck}"),
                 ("COUNTs that saw part of a changeset", f"{inconsistent}"),
                 ("latency p50 / p99 / max",
                  f"{latencies[len(latencies) // 2] * 1000:.0f} / "
                  f"{latencies[int(len(latencies) * .99)] * 1000:.0f} / "
                  f"{latencies[-1] * 1000:.0f} ms"),
             ])
    finally:
        stop.set()
        node.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput phase")
    ap.add_argument("--rounds", type=int, default=4, help="off/on phases of each")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--runaway-wait", type=float, default=10.0)
    ap.add_argument("--fork-stress", type=int, default=0, metavar="N")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    with workdir("query-timeout") as root:
        secret_file = new_secret(root / "s")
        secret = load_secret(secret_file)
        if args.fork_stress:
            fork_stress(root, secret_file, args.fork_stress)
            return
        props = {"verify-on-start": "false", "log-level": "WARNING"}
        on = start(worker_node(root / "on", secret_file, **props), "on")
        off = start(worker_node(root / "off", secret_file, **props), "off")
        try:
            for node in (on, off):
                load(node, secret)
            totals = {"on": [0, 0.0, 0.0], "off": [0, 0.0, 0.0]}
            point_reads(on, 1.0, args.clients)  # warm both
            point_reads(off, 1.0, args.clients)
            for _ in range(args.rounds):
                for name, node in (("off", off), ("on", on)):
                    n, secs, cpu = point_reads(node, args.seconds, args.clients)
                    totals[name] = [a + b for a, b in zip(totals[name], (n, secs, cpu),
                                                          strict=True)]
            rate = {k: n / s for k, (n, s, _) in totals.items()}
            cpu_ms = {k: 1000 * c / n for k, (n, _, c) in totals.items()}
            show(f"point SELECT by subject, {N_TRIPLES:,} triples, {args.clients} clients, "
                 f"{args.rounds} x {args.seconds:g} s each, interleaved", [
                     ("timeout machinery off", f"{rate['off']:,.0f} queries/s, "
                                               f"{cpu_ms['off']:.3f} ms worker CPU/query"),
                     ("timeout machinery on", f"{rate['on']:,.0f} queries/s, "
                                              f"{cpu_ms['on']:.3f} ms worker CPU/query"),
                     ("ratio on/off (target >= 0.9)", f"{rate['on'] / rate['off']:.2f}"),
                     ("worker CPU per query on/off", f"{cpu_ms['on'] / cpu_ms['off']:.2f}"),
                 ])
            show("runaway 4-way cross join, timeout=1, machinery on",
                 runaway_rows(runaway(on, secret, 2, RUNAWAY, args.runaway_wait)))
            show("runaway COUNT over that join, timeout=1, machinery on",
                 runaway_rows(runaway(on, secret, 4, RUNAWAY_COUNT, args.runaway_wait)))
            show("runaway COUNT over that join, timeout=1, machinery off (as before)",
                 runaway_rows(runaway(off, secret, 2, RUNAWAY_COUNT, args.runaway_wait)))
        finally:
            on.stop()
            if off.pid is not None and off.alive():
                off.proc.send_signal(signal.SIGKILL)  # its runaway thread never ends
                off.proc.wait(10)


def _cpu_growth(node: NodeProcess) -> float:
    before = cpu_seconds(node.pid)
    time.sleep(1.0)
    return cpu_seconds(node.pid) - before


if __name__ == "__main__":
    main()
