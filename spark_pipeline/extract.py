"""Extract: where the pipeline's data comes from (IO only).

* input files: walked on the driver, read by the executors — they must see the same
  paths (local mode; a shared filesystem on a Spark cluster). Line formats are read by
  Spark's text source, split by line across tasks (gzip files are not splittable: one
  task each; bzip2 and plain files are); other formats one file per task.
* a replica's content: N-Quads from a worker's RDF4J API (open to anyone), streamed to a
  file in the work directory, then read as line-format input.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import httpx
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_pipeline import rdf


class InputError(Exception):
    """Inputs that cannot be loaded (nothing to read, a path that does not exist)."""


def list_inputs(paths: Iterable[str | Path]) -> list[rdf.InputFile]:
    """Files to load: each path a file or a directory (walked, recursively, in name
    order); files of a known RDF extension only (``.nt .nq .ttl .trig .rdf .owl .xml
    .jsonld``, optionally ``.gz``/``.bz2``). A file named explicitly must be RDF."""
    out: dict[str, rdf.InputFile] = {}
    for given in paths:
        p = Path(given).expanduser()
        if not p.exists():
            raise InputError(f"{given}: no such file or directory")
        if p.is_dir():
            candidates = sorted(x for x in p.rglob("*") if x.is_file())
        else:
            if rdf.detect(p) is None:
                raise InputError(f"{given}: not a known RDF file extension (expected .nt, "
                                 ".nq, .ttl, .trig, .rdf, .owl, .xml or .jsonld, "
                                 "optionally .gz or .bz2)")
            candidates = [p]
        for c in candidates:
            found = rdf.detect(c)
            if found is None:
                continue
            path = str(c.resolve())
            out.setdefault(path, rdf.InputFile(path, found[0], found[1], c.stat().st_size))
    if not out:
        raise InputError("no RDF files found in " + ", ".join(str(p) for p in paths))
    return list(out.values())


_GLOB = re.compile(r"([\\*?\[\]{}])")


def _hadoop_path(path: str) -> str:
    # Spark expands glob characters in paths; a file name may hold them.
    return _GLOB.sub(r"\\\1", path)


def read_lines(spark: SparkSession, files: list[rdf.InputFile]) -> DataFrame:
    """Lines of line-format files: ``value`` (the raw bytes: invalid UTF-8 must not break
    the Arrow conversion, docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline),
    ``uri``, ``split`` (start offset of the Spark split the line was read in: lines of one split
    come in file order) and ``split_bytes``."""
    return (spark.read.text([_hadoop_path(f.path) for f in files])
            .select(F.col("value").cast("binary").alias("value"),
                    F.col("_metadata.file_path").alias("uri"),
                    F.col("_metadata.file_block_start").alias("split"),
                    F.col("_metadata.file_block_length").alias("split_bytes")))


def documents(spark: SparkSession, files: list[rdf.InputFile]) -> DataFrame:
    """One row per document (columns path, format, compression, size), one per
    partition."""
    rows = [(f.path, f.format, f.compression, f.size) for f in files]
    rdd = spark.sparkContext.parallelize(rows, numSlices=max(1, len(rows)))
    return spark.createDataFrame(rdd, "path string, format string, compression string, "
                                 "size long")


# ---- a replica's content ----


class ExportError(Exception):
    pass


def worker_state(client: httpx.Client, worker: str) -> dict:
    """A worker's own view of its state (/health: repository, seq, fingerprint, quads)."""
    try:
        r = client.get(f"{worker}/health", timeout=30)
    except httpx.HTTPError as exc:
        raise ExportError(f"cannot reach worker {worker}: {exc}") from None
    if r.status_code != 200:
        raise ExportError(f"worker {worker} answered {r.status_code}: {r.text[:300]}")
    return r.json()


def export_worker(client: httpx.Client, worker: str, target: Path, attempts: int = 3
                  ) -> dict:
    """Stream one worker's repository as N-Quads into ``target``; returns the worker's
    state, which did not change during the export (else it is retried)."""
    worker = worker.rstrip("/")
    for _ in range(attempts):
        before = worker_state(client, worker)
        url = f"{worker}/repositories/{before['repository']}/statements"
        tmp = target.with_name(target.name + ".part")
        try:
            with client.stream("GET", url, headers={"accept": "application/n-quads"},
                               timeout=None) as r:
                if r.status_code != 200:
                    raise ExportError(f"export from {worker} answered {r.status_code}: "
                                      f"{r.read()[:300]!r}")
                with open(tmp, "wb") as fh:
                    for chunk in r.iter_bytes(1 << 20):
                        fh.write(chunk)
        except httpx.HTTPError as exc:
            raise ExportError(f"export from {worker} failed: {exc}") from None
        after = worker_state(client, worker)
        if (after["seq"], after["fingerprint"]) == (before["seq"], before["fingerprint"]):
            os.replace(tmp, target)
            return after
    raise ExportError(f"worker {worker} kept changing during {attempts} exports")


def export_file(path: Path) -> rdf.InputFile:
    return rdf.InputFile(str(path.resolve()), "nq", None, path.stat().st_size)
