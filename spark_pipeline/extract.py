"""Extract: where the pipeline's data comes from (IO only).

* input files: listed by the driver through Hadoop's FileSystem API (``hadoop_fs``),
  read by the executors — local paths must be at the same paths on every node (local
  mode; a shared filesystem on a Spark cluster), URLs (``hdfs://``, ``s3a://``) are
  read through Hadoop there. Line formats are read by Spark's text source, split by line
  across tasks (gzip files are not splittable: one task each; bzip2 and plain files
  are), except plain local files, whose splits the tasks read by path
  (``local_line_splits``); other formats one file per task (``documents``).
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

from spark_pipeline import hadoop_fs, locations, rdf


class InputError(Exception):
    """Inputs that cannot be loaded (nothing to read, a path that does not exist)."""


# Splittable files are split at most this size (session.spark_session): an initial
# load's task sends its parts as it parses (part_push), so a task that runs again (a
# lost executor) sends at most this much again, and the progress line, which moves as
# tasks end, moves often enough.
SPLIT_BYTES = 16 * 2**20


def list_inputs(spark: SparkSession, paths: Iterable[str | Path]) -> list[rdf.InputFile]:
    """Files to load: each path a file or a directory (walked, recursively, in name
    order); files of a known RDF extension only (``.nt .nq .ttl .trig .rdf .owl .xml
    .jsonld``, optionally ``.gz``/``.bz2``). A file named explicitly must be RDF.

    A path may be a URL of any scheme with a Hadoop FileSystem in this Spark (``hdfs://``,
    ``s3a://``, ``file://``); a plain path is the driver's (``file:``). Either is listed
    through Hadoop's FileSystem API on the JVM, never the driver's Python (``hadoop_fs``;
    what a file is named: ``locations``)."""
    fs = hadoop_fs.HadoopFS(spark)
    out: dict[str, rdf.InputFile] = {}
    for given in map(str, paths):
        location = locations.hadoop_location(given)
        try:
            kind = fs.kind(location)
            if kind is None:
                raise InputError(f"{given}: no such file or directory")
            if kind == "dir":
                candidates = fs.files(location)
            else:
                if rdf.detect(location) is None:
                    raise InputError(f"{given}: not a known RDF file extension (expected "
                                     ".nt, .nq, .ttl, .trig, .rdf, .owl, .xml or .jsonld, "
                                     "optionally .gz or .bz2)")
                candidates = [fs.file(location)]
        except hadoop_fs.StorageError as exc:
            raise InputError(str(exc)) from None
        for c in candidates:
            name = locations.name_of(c.path)
            found = rdf.detect(name)
            if found is not None:
                out.setdefault(name, rdf.InputFile(name, found[0], found[1], c.size))
    if not out:
        raise InputError("no RDF files found in " + ", ".join(str(p) for p in paths))
    return list(out.values())


_GLOB = re.compile(r"([\\*?\[\]{}])")


def _hadoop_path(name: str) -> str:
    # Spark's readers take Hadoop path strings (locations.reader_path) and expand glob
    # characters in them; a file name may hold them.
    return _GLOB.sub(r"\\\1", locations.reader_path(name))


LOCAL_SPLITS = "uri string, path string, start long, length long"


def reads_itself(f: rdf.InputFile) -> bool:
    """A line file the parse tasks read by path (``local_line_splits``): local and not
    compressed. The others go through Spark's text source (Hadoop on the JVM side)."""
    return f.line_based and not f.compression and locations.scheme(f.path) is None


def local_line_splits(spark: SparkSession, files: list[rdf.InputFile]) -> DataFrame:
    """Splits of local, uncompressed line files (columns ``uri``, ``path``, ``start``,
    ``length``), which the parse tasks read themselves, as Spark's text source would
    (``line_splits``): the JVM no longer reads every line and hands it over, which was
    most of its work in an initial load (bench/README, "2026-12-02"). Split and packed
    into tasks by Spark's own rule for files (``FilePartition``, with this session's
    ``spark.sql.files.*`` settings): splits of ``min(maxPartitionBytes,
    max(openCostInBytes, bytes / minPartitionNum))``, and consecutive splits in one task
    while they fit in that size, each counted with the cost of opening it."""
    sc = spark.sparkContext
    as_bytes = sc._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes
    max_bytes = as_bytes(spark.conf.get("spark.sql.files.maxPartitionBytes", "128m"))
    open_cost = as_bytes(spark.conf.get("spark.sql.files.openCostInBytes", "4m"))
    tasks_wanted = int(spark.conf.get("spark.sql.files.minPartitionNum", None)
                       or sc.defaultParallelism)
    total = sum(f.size + open_cost for f in files)
    size = max(1, min(max_bytes, max(open_cost, total // max(tasks_wanted, 1))))
    tasks: list[list[tuple[str, str, int, int]]] = [[]]
    filled = 0
    for f in files:
        uri = Path(f.path).as_uri()
        for start in range(0, f.size, size):
            length = min(size, f.size - start)
            if tasks[-1] and filled + length > size:
                tasks.append([])
                filled = 0
            tasks[-1].append((uri, f.path, start, length))
            filled += length + open_cost
    tasks = [t for t in tasks if t] or [[]]
    # One element per slice: each task keeps its splits, in file order.
    rdd = sc.parallelize(tasks, numSlices=len(tasks)).flatMap(lambda splits: splits)
    return spark.createDataFrame(rdd, LOCAL_SPLITS)


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


DOCUMENTS = ("path string, format string, compression string, size long, "
             "content binary")


def documents(spark: SparkSession, files: list[rdf.InputFile]) -> DataFrame:
    """One row per document (columns path, format, compression, size, content). A local
    file (``file:``) has no content: its task opens it by path and streams it, one
    document per partition (the executors see the driver's paths: shared storage).
    Another scheme's file is read by Spark's ``binaryFile`` source, through Hadoop on the
    executors, whole into ``content`` (at most 2 GB a file: Spark's limit)."""
    local = [f for f in files if locations.is_local(f.path)]
    remote = [f for f in files if not locations.is_local(f.path)]
    parts = []
    if local:
        rows = [(f.path, f.format, f.compression, f.size, None) for f in local]
        rdd = spark.sparkContext.parallelize(rows, numSlices=len(rows))
        parts.append(spark.createDataFrame(rdd, DOCUMENTS))
    if remote:
        # binaryFile's ``path`` is the Hadoop path string: the file's name (locations),
        # the key back to its format.
        names = spark.createDataFrame(
            [(f.path, f.format, f.compression, f.size) for f in remote],
            "path string, format string, compression string, size long")
        content = (spark.read.format("binaryFile").load([_hadoop_path(f.path)
                                                         for f in remote])
                   .select("path", "content"))
        parts.append(content.join(F.broadcast(names), "path")
                     .select("path", "format", "compression", "size", "content"))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


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
