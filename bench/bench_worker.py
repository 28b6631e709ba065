"""Worker benchmarks (issue: worker node). Prints ratios measured in the same run.

1. apply throughput of 10k-quad changesets through the worker HTTP API
   vs raw ``Store.extend`` in-process (target >= 0.7);
2. point SELECT throughput over HTTP vs in-process pyoxigraph (reported);
3. image transfer MB/s between two worker processes vs a plain copy of the same folder.

Run: .venv/bin/python -m bench.bench_worker [--changesets N] [--queries N]
"""

from __future__ import annotations

import argparse
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pyoxigraph as ox

from bench._common import EX, Timer, quads, rate, show, workdir
from rdfcore import fingerprint
from rdfcore.changeset import Changeset
from txcluster.local import new_secret, worker_node
from txinfra.auth import HmacAuth, load_secret

BATCH = 10_000


def bench_apply(root: Path, n_changesets: int) -> tuple[float, float]:
    batches = [quads(i * BATCH, BATCH) for i in range(n_changesets)]
    # baseline: raw Store.extend on disk, in-process, same batches
    store = ox.Store(str(root / "raw"))
    with Timer() as raw:
        for b in batches:
            store.extend(b)
    del store

    secret_file = new_secret(root / "s")
    secret = load_secret(secret_file)
    node = worker_node(root / "w", secret_file, **{"verify-on-start": "false"}).start()
    try:
        fp = 0
        bodies = []
        for i, b in enumerate(batches):
            cs = Changeset(added=frozenset(b))
            fp = cs.moved_fingerprint(fp)
            bodies.append(json.dumps({"entries": [{
                "seq": i + 1, "txid": f"t{i}", "changeset": cs.to_wire(),
                "expected_fingerprint": fingerprint.to_hex(fp)}]}).encode())
        with httpx.Client(base_url=node.url, auth=HmacAuth(secret), timeout=300) as c, \
                Timer() as http:
            for body in bodies:
                r = c.post("/cluster/apply", content=body,
                           headers={"content-type": "application/json"})
                r.raise_for_status()
    finally:
        node.stop()
    return rate(n_changesets * BATCH, raw.seconds), rate(n_changesets * BATCH, http.seconds)


def bench_point_select(root: Path, n_queries: int) -> dict[str, float]:
    n_subjects = 20_000
    data = quads(0, n_subjects * 8)
    store = ox.Store(str(root / "q-raw"))
    store.extend(data)
    subjects = [f"{EX}s{(i * 7919) % n_subjects}" for i in range(n_queries)]
    queries = [f"SELECT ?p ?o WHERE {{ <{s}> ?p ?o }}" for s in subjects]
    with Timer() as inproc:
        for q in queries:
            store.query(q).serialize(format=ox.QueryResultsFormat.JSON)
    del store

    secret_file = new_secret(root / "s")
    secret = load_secret(secret_file)
    node = worker_node(root / "qw", secret_file, **{"verify-on-start": "false"}).start()
    try:
        cs = Changeset(added=frozenset(data))
        with httpx.Client(base_url=node.url, auth=HmacAuth(secret), timeout=300) as c:
            c.post("/cluster/apply", json={"entries": [{"seq": 1, "txid": "load",
                                                         "changeset": cs.to_wire()}]}
                   ).raise_for_status()
        headers = {"accept": "application/sparql-results+json"}
        with httpx.Client(base_url=node.url, timeout=60) as c, Timer() as one:
            for q in queries:
                r = c.get("/repositories/repo", params={"query": q}, headers=headers)
                assert r.status_code == 200, r.text

        def run(chunk: list[str]) -> None:
            with httpx.Client(base_url=node.url, timeout=60) as c:
                for q in chunk:
                    assert c.get("/repositories/repo", params={"query": q},
                                 headers=headers).status_code == 200

        clients = 8
        chunks = [queries[i::clients] for i in range(clients)]
        with ThreadPoolExecutor(clients) as pool, Timer() as many:
            list(pool.map(run, chunks))
    finally:
        node.stop()
    return {
        "inproc": rate(n_queries, inproc.seconds),
        "http1": rate(n_queries, one.seconds),
        "http8": rate(n_queries, many.seconds),
    }


def bench_image(root: Path, n_quads: int) -> dict[str, float]:
    secret_file = new_secret(root / "s")
    secret = load_secret(secret_file)
    src = worker_node(root / "src", secret_file, **{"verify-on-start": "false"}).start()
    dst = worker_node(root / "dst", secret_file, **{"verify-on-start": "false"}).start()
    try:
        with httpx.Client(auth=HmacAuth(secret), timeout=600) as c:
            step = 100_000
            fp = 0
            for i in range(0, n_quads, step):
                cs = Changeset(added=frozenset(quads(i, step, graph="g" if i % 2 else None)))
                fp = cs.moved_fingerprint(fp)
                c.post(f"{src.url}/cluster/apply", json={"entries": [{
                    "seq": i // step + 1, "txid": f"t{i}", "changeset": cs.to_wire()}]}
                       ).raise_for_status()
            store_dir = (src.directory / "data" / "current" / "store").resolve()
            size = sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file())
            with Timer() as copy:
                shutil.copytree(store_dir, root / "plain-copy")
            with Timer() as transfer:
                r = c.post(f"{dst.url}/cluster/image/pull",
                           json={"source": f"{src.url}/cluster/image"})
                r.raise_for_status()
            got = r.json()
            want = c.get(f"{src.url}/cluster/state").json()
            assert got["fingerprint"] == want["fingerprint"] == fingerprint.to_hex(fp)
    finally:
        src.stop()
        dst.stop()
    mb = size / 1e6
    return {"mb": mb, "copy": mb / copy.seconds, "image": mb / transfer.seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changesets", type=int, default=20)
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--image-quads", type=int, default=1_000_000)
    args = ap.parse_args()
    with workdir("worker") as root:
        raw, http = bench_apply(root, args.changesets)
        show(f"apply: {args.changesets} changesets of {BATCH} quads", [
            ("raw Store.extend in-process", f"{raw:,.0f} quads/s"),
            ("worker HTTP /cluster/apply", f"{http:,.0f} quads/s"),
            ("ratio (target >= 0.7)", f"{http / raw:.2f}"),
        ])
        q = bench_point_select(root, args.queries)
        show(f"point SELECT by subject, {args.queries} queries, SPARQL JSON", [
            ("in-process pyoxigraph", f"{q['inproc']:,.0f} queries/s"),
            ("HTTP, 1 client", f"{q['http1']:,.0f} queries/s"),
            ("HTTP, 8 clients", f"{q['http8']:,.0f} queries/s"),
            ("ratio HTTP(1) / in-process", f"{q['http1'] / q['inproc']:.2f}"),
            ("ratio HTTP(8) / in-process", f"{q['http8'] / q['inproc']:.2f}"),
        ])
        im = bench_image(root, args.image_quads)
        show(f"image transfer, store of {args.image_quads:,} quads ({im['mb']:.0f} MB on disk)", [
            ("plain copy of the folder", f"{im['copy']:,.0f} MB/s"),
            ("image worker -> worker (checkpoint, tar, snappy, HTTP, verify, untar)",
             f"{im['image']:,.0f} MB/s"),
            ("ratio image / plain copy", f"{im['image'] / im['copy']:.2f}"),
        ])


if __name__ == "__main__":
    main()
