"""``txcluster audit``: two replicas compared exactly — per-graph fingerprints and the
quads that differ — from their exports, parsed and joined in Spark (the helpers it
shares with the load are ``jobs``').
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rdfcore.fingerprint import to_hex
from spark_pipeline import extract, jobs, rdf, transform
from spark_pipeline.progress import Progress
from txinfra.tls import client_verify, read_ca_file


@dataclass(frozen=True)
class AuditConfig:
    workers: tuple[str, ...]
    out_dir: str | None = None  # default: ./txcluster-audit-<time>, when they differ
    work_dir: str | None = None
    ca_file: str | None = None  # the CA bundle https workers are checked with
    cadata: str | None = field(default=None, init=False, repr=False)  # its PEM text

    def __post_init__(self) -> None:
        jobs.local_work_dir(self.work_dir)
        if self.ca_file is not None:
            object.__setattr__(self, "cadata", read_ca_file(self.ca_file))
        urls = [w.rstrip("/") for w in self.workers]
        if len(urls) != 2 or urls[0] == urls[1]:
            raise ValueError("give two different workers: --worker URL --worker URL")


@dataclass
class Replica:
    url: str
    state: dict  # the worker's own state during the export
    quads: int = 0
    fingerprint: int = 0  # recomputed from the exported content


@dataclass
class AuditReport:
    replicas: list[Replica]
    only: dict[str, int]  # side -> differing quads
    graphs: list[dict]  # graphs whose content differs: graph, quads/fingerprint per side
    shown: list[dict]
    out_dir: jobs.Output | None
    seconds: float

    @property
    def identical(self) -> bool:
        return not any(self.only.values())

    @property
    def ok(self) -> bool:
        return self.identical and all(
            to_hex(r.fingerprint) == r.state["fingerprint"] for r in self.replicas)

    def summary(self) -> str:
        out = []
        for side, r in zip("ab", self.replicas, strict=True):
            kept = r.state["fingerprint"]
            note = "" if to_hex(r.fingerprint) == kept else \
                f"  (the worker keeps {kept}: its store changed behind its back)"
            out.append(f"{side}: {r.url}  seq {r.state['seq']}, {r.quads:,} quads, "
                       f"fingerprint {to_hex(r.fingerprint)}{note}")
        if self.identical:
            out.append("identical: the two replicas hold the same quads")
        else:
            out.append(f"DIFFERENT: {self.only.get('a', 0):,} quads only in a, "
                       f"{self.only.get('b', 0):,} only in b" +
                       (f" -> {self.out_dir}" if self.out_dir else ""))
            for g in self.graphs:
                out.append(f"  graph {g['graph'] or '(default)'}: a {g['quads_a'] or 0:,} "
                           f"quads {g['fp_a']}, b {g['quads_b'] or 0:,} quads {g['fp_b']}")
            out += [f"  only in {d['side']}: {d['quad']}" for d in self.shown]
        out.append(f"audit took {self.seconds:.1f}s")
        return "\n".join(out)


def _graph_fingerprints(df: DataFrame, side: str) -> DataFrame:
    sums = transform.fingerprint_sums(df, "graph")
    return sums.select("graph", F.col("quads").alias(f"quads_{side}"),
                       *[F.col(f"s{i}").alias(f"s{i}_{side}") for i in range(rdf.PIECES)])


def run_audit(session: Callable[[], SparkSession], config: AuditConfig, progress: Progress
              ) -> AuditReport:
    """Export both replicas, then compare them in Spark (``session`` starts it)."""
    with jobs.tasks_named():
        return _run_audit(session, config, progress)


def _run_audit(session: Callable[[], SparkSession], config: AuditConfig, progress: Progress
               ) -> AuditReport:
    started = time.monotonic()
    out_dir = jobs.output_dir(config.out_dir, "txcluster-audit")
    urls = [w.rstrip("/") for w in config.workers]
    with tempfile.TemporaryDirectory(prefix="txcluster-audit-", dir=config.work_dir) as work, \
            httpx.Client(verify=client_verify(config.cadata)) as client:
        replicas, frames = [], []
        for side, url in zip("ab", urls, strict=True):
            progress.line(f"exporting {url} ...", force=True)
            path = Path(work) / f"{side}.nq"
            state = extract.export_worker(client, url, path)
            replicas.append(Replica(url, state))
        spark = session()
        jobs.shared_work_dir(spark, config.work_dir)
        jobs.output_ready(spark, out_dir)
        for side in "ab":
            path = Path(work) / f"{side}.nq"
            df = transform.quads(jobs.parse_inputs(
                spark, [extract.export_file(path)],
                transform.ParseConfig(scope_blank_nodes=False, with_graphs=True))).persist()
            frames.append(df)
        progress.line("comparing ...", force=True)
        for r, df in zip(replicas, frames, strict=True):
            r.fingerprint, r.quads = jobs.sum_row(df)
        a, b = frames
        diff = transform.differences(a, b).persist()
        only = {r["side"]: r["count"] for r in diff.groupBy("side").count().collect()}
        graphs: list[dict] = []
        shown: list[dict] = []
        written = None
        if any(only.values()):
            per_graph = _graph_fingerprints(a, "a").join(_graph_fingerprints(b, "b"), "graph",
                                                         "full_outer")
            for row in per_graph.collect():
                fa = rdf.combine([row[f"s{i}_a"] for i in range(rdf.PIECES)])
                fb = rdf.combine([row[f"s{i}_b"] for i in range(rdf.PIECES)])
                if (fa, row["quads_a"]) != (fb, row["quads_b"]):
                    graphs.append({"graph": row["graph"], "quads_a": row["quads_a"],
                                   "quads_b": row["quads_b"], "fp_a": to_hex(fa),
                                   "fp_b": to_hex(fb)})
            graphs.sort(key=lambda g: g["graph"])
            shown = [r.asDict() for r in diff.orderBy("side", "quad").take(jobs.SHOWN)]
            written = out_dir
            jobs.make_dir(spark, out_dir)
            for side in "ab":
                only_side = diff.filter(F.col("side") == side).select("quad")
                jobs.write_text(only_side.orderBy("quad"),
                                jobs.child(out_dir, f"only-in-{side}"))
            summary = json.dumps({
                "a": urls[0], "b": urls[1], "only_in_a": only.get("a", 0),
                "only_in_b": only.get("b", 0), "graphs": graphs,
                "replicas": [{"url": r.url, "state": r.state, "quads": r.quads,
                              "fingerprint": to_hex(r.fingerprint)} for r in replicas],
            }, indent=2)
            with jobs.open_text(spark, jobs.child(out_dir, "summary.json")) as fh:
                fh.write(summary)
        progress.done()
        for df in (*frames, diff):
            df.unpersist()
    return AuditReport(replicas, only, graphs, shown, written, time.monotonic() - started)

