"""Pipeline benchmarks (issue: data pipeline). Real Spark (local[2]), real processes on
loopback; ratios are measured in the same run.

1. raw baseline: ``Store.bulk_extend(parse(file))`` into one on-disk store — the fastest
   single-process way to get the file into one store;
2. the Spark job alone (parse, validate, canonicalise, dedupe, fingerprint): lines/s;
3. ``txcluster load --initial`` into a fresh 3-worker cluster, end to end (job, bulk
   load of one worker, replication of the two others, every worker checked): quads/s,
   and its ratio to (1) (target >= 0.5);
4. ``txcluster load`` without --initial (transactions through the master) into another
   fresh 3-worker cluster: quads/s.

``--repeat N`` runs (3) and (4) N times, each round after a raw load of its own (and one
more raw load after the last): each load is compared with the faster raw load around it,
and the median ratio is printed with every round's.

The SparkSession is started once, before the timings (its start is printed apart: a
command line run pays it once per run). Run: .venv/bin/python -m bench.bench_pipeline
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
from pathlib import Path

import pyoxigraph as ox

from bench._common import Timer, rate, show, tree_cpu_seconds, workdir
from bench.bench_master import start_cluster, stop
from spark_pipeline import extract, jobs, session
from spark_pipeline.progress import Progress

XSD = "http://www.w3.org/2001/XMLSchema#"


def generate(path: Path, n: int, seed: int = 1) -> None:
    """n distinct quads: IRIs, typed literals (some not canonical), language-tagged and
    plain strings, blank nodes, a third in named graphs."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            s = f"<http://example.org/s/{i // 10}>"
            p = f"<http://example.org/p/{i % 17}>"
            r = i % 5
            if r == 0:
                o = f'"{i}"^^<{XSD}integer>' if i % 2 else f'"0{i}"^^<{XSD}integer>'
            elif r == 1:
                o = f'"label {i} with some text"@en'
            elif r == 2:
                o = f"<http://example.org/o/{rng.randrange(10**9)}>"
            elif r == 3:
                o = f'"plain string {i}"'
            else:
                o = f"_:b{i}"
            g = f" <http://example.org/g/{i % 7}>" if i % 3 == 0 else ""
            f.write(f"{s} {p} {o}{g} .\n")


def raw_bulk_extend(root: Path, data: Path, name: str = "raw-store") -> float:
    store = ox.Store(str(root / name))
    with Timer() as t:
        store.bulk_extend(ox.parse(path=str(data), format=ox.RdfFormat.N_QUADS))
        store.flush()
    del store
    shutil.rmtree(root / name)  # ~170 MB a time at 1,000,000 quads, measured repeatedly
    return t.seconds


def spark_job(spark, data: Path) -> tuple[float, jobs.Prepared]:
    files = extract.list_inputs(spark, [data])
    with Timer() as t:
        prepared = jobs.prepare(spark, files, None, Progress(enabled=False))
    prepared.release()
    return t.seconds, prepared


def cluster_load(root: Path, spark, data: Path, initial: bool,
                 batch_quads: int = jobs.BATCH_QUADS) -> tuple[float, jobs.LoadReport]:
    master, workers = start_cluster(root, 3)
    try:
        config = jobs.LoadConfig(master.url, (str(data),), initial=initial,
                                 batch_quads=batch_quads, work_dir=str(root))
        with Timer() as t:
            report = jobs.run_load(lambda: spark, config, Progress(enabled=False))
        if not report.ok:
            raise RuntimeError(report.summary())
        return t.seconds, report
    finally:
        stop([master, *workers])
        shutil.rmtree(root, ignore_errors=True)  # three copies of the data (--repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quads", type=int, default=1_000_000)
    ap.add_argument("--batch-quads", type=int, default=jobs.BATCH_QUADS,
                    help="quads per transaction of the load without --initial (default: "
                    "txcluster load's)")
    ap.add_argument("--skip-transactions", action="store_true",
                    help="leave out the (slow) load without --initial")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of loads, each after a raw load of its own; the ratios "
                    "printed are the medians (default 1)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    with workdir("pipeline") as root:
        data = root / "data.nq"
        generate(data, args.quads)
        n = args.quads
        rows = [("data", f"{n:,} quads, {data.stat().st_size / 1e6:.0f} MB N-Quads")]

        # The raw baseline moved by up to 50% within one run on this machine (its speed
        # drifts): it is measured before every round of loads and once after the last,
        # and each load is compared with the faster of the two raw loads around it.
        raws: list[float] = []

        def raw_load(label: str) -> None:
            cpu = tree_cpu_seconds()
            seconds = raw_bulk_extend(root, data, f"raw-store-{len(raws)}")
            cpu = tree_cpu_seconds() - cpu
            raws.append(rate(n, seconds))
            rows.append((label, f"{raws[-1]:,.0f} quads/s ({seconds:.1f}s; {cpu:.1f} CPU-s)"))

        raw_load("raw Store.bulk_extend(parse)")
        with Timer() as t:
            spark = session.spark_session("local[2]", app_name="txcluster-bench", ui=False)
        rows.append(("SparkSession start (local[2])", f"{t.seconds:.1f}s"))
        loads: dict[str, list[tuple[int, float]]] = {"initial": [], "tx": []}
        try:
            warm = root / "warm.nq"
            generate(warm, 1000, seed=2)
            spark_job(spark, warm)  # JVM and Python workers warm, as in any long job
            job_s, prepared = spark_job(spark, data)
            rows.append(("Spark job alone (local[2])",
                         f"{rate(prepared.lines, job_s):,.0f} lines/s ({job_s:.1f}s, "
                         f"{prepared.quads:,} distinct quads)"))
            for round_ in range(1, args.repeat + 1):
                tag = f", round {round_}" if args.repeat > 1 else ""
                if round_ > 1:
                    raw_load(f"raw again, before round {round_}")
                cpu = tree_cpu_seconds()
                init_s, report = cluster_load(root / f"initial-{round_}", spark, data,
                                              initial=True)
                cpu = tree_cpu_seconds() - cpu
                loads["initial"].append((len(raws) - 1, rate(n, init_s)))
                rows.append((f"load --initial, 3 workers{tag}",
                             f"{rate(n, init_s):,.0f} quads/s ({init_s:.1f}s: "
                             + ", ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items())
                             + f"; {cpu:.1f} CPU-s, every process)"))
                if not args.skip_transactions:
                    tx_s, report = cluster_load(root / f"tx-{round_}", spark, data,
                                                initial=False, batch_quads=args.batch_quads)
                    loads["tx"].append((len(raws) - 1, rate(n, tx_s)))
                    rows.append((f"load (transactions of {args.batch_quads:,}), 3 workers"
                                 f"{tag}",
                                 f"{rate(n, tx_s):,.0f} quads/s ({tx_s:.1f}s, "
                                 f"{report.transactions} transactions: " + ", ".join(
                                     f"{k} {v:.1f}s" for k, v in report.seconds.items())
                                 + ")"))
        finally:
            spark.stop()
        raw_load("raw again, after the loads")
        targets = {"initial": "--initial / raw (target >= 0.5)",
                   "tx": "transactions / raw (target >= 0.2)"}
        for kind, measured in loads.items():
            if not measured:
                continue
            ratios = [value / max(raws[before], raws[before + 1])
                      for before, value in measured]
            text = f"{statistics.median(ratios):.2f}"
            if len(ratios) > 1:
                text += (" (median of " + ", ".join(f"{r:.2f}" for r in ratios) + ")")
            rows.append((targets[kind], text))
        show("txcluster load (issue: data pipeline)", rows)


if __name__ == "__main__":
    main()
