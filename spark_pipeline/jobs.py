"""The two jobs: ``txcluster load`` and ``txcluster audit``, wired from extract, the pure
transforms and load. Configuration comes in as frozen dataclasses (the CLI builds them);
reports go out as dataclasses the CLI prints.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TextIO

import httpx
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from rdfcore.fingerprint import MOD, to_hex
from spark_pipeline import extract, hadoop_fs, load, locations, rdf, transform
from spark_pipeline.part_push import PartPush
from spark_pipeline.progress import CountsParam, Progress
from spark_pipeline.session import is_local
from txinfra.tls import client_verify, read_ca_file

# Parts of an initial load: each is parsed and bulk-loaded by the worker in one request.
PART_QUADS = 100_000
SHOWN = 10  # rejects / differences printed in the summary


class TaskFailed(Exception):
    """A Spark task failed; the message names its file and lines (transform.TaskFailure)."""


# Errors that are the user's or the cluster's, not the program's: the CLI prints them.
USER_ERRORS = (ValueError, extract.InputError, extract.ExportError, load.LoadError,
               TaskFailed)


@contextmanager
def tasks_named():
    """Spark's error for a failed task (a Py4J or Python exception with the executor's
    traceback) as the file and lines the task was at, when the task said so."""
    try:
        yield
    except Exception as exc:
        where = transform.task_failure(exc)
        if where is None:
            raise
        raise TaskFailed(f"a Spark task failed on {where}") from None


def local_work_dir(work_dir: str | None) -> None:
    """--work-dir is a local path (a shared mount on a cluster), never a URL: see
    ``shared_work_dir``."""
    if work_dir is not None and locations.scheme(work_dir) is not None:
        raise ValueError(f"--work-dir {work_dir}: give a local directory (on a cluster one "
                         "that every node mounts at the same path), not a URL: the driver "
                         "streams a worker's export into a file there")


# Quads per transaction of a load without --initial. Each transaction's add goes into
# every worker through pyoxigraph's bulk loader, whose new files RocksDB then compacts
# into the store: the fewer and larger the transactions, the less data is rewritten
# (1,000,000 quads on 2 cores, load phase: 52.5 s in transactions of 20,000, 44.8 s of
# 50,000, 42.0 s of 100,000; compaction ~13 -> ~4 CPU-s per non-probe worker; peak RSS
# of a worker ~400 MB at 100,000; docs/design/dependencies.md#pyoxigraph-the-workers-store).
BATCH_QUADS = 100_000


@dataclass(frozen=True)
class LoadConfig:
    master: str
    inputs: tuple[str, ...]
    repository: str | None = None
    graph: str | None = None
    initial: bool = False
    batch_quads: int = BATCH_QUADS
    rejects_dir: str | None = None  # default: ./txcluster-rejects-<time>, when there are any
    work_dir: str | None = None  # exports of the repository (shared with executors)
    auth: tuple[str, str] | None = None
    parallel: int = 4  # transactions in flight
    sync_timeout_s: float | None = None  # default: from the amount of data
    base_iri: str | None = None  # relative IRIs of documents resolve against it
    namespaces: bool = True  # the documents' prefixes into the repository's namespaces
    ca_file: str | None = None  # the CA bundle an https master and workers are checked with
    cadata: str | None = field(default=None, init=False, repr=False)  # its PEM text

    def __post_init__(self) -> None:
        local_work_dir(self.work_dir)
        if self.ca_file is not None:
            object.__setattr__(self, "cadata", read_ca_file(self.ca_file))  # frozen
        if self.batch_quads < 1:
            raise ValueError("--batch-quads must be at least 1")
        if self.base_iri is not None:
            try:
                rdf.Canonicaliser(self.base_iri)
            except ValueError as exc:
                raise ValueError(f"--base-iri '{self.base_iri}' is not an absolute IRI: "
                                 f"{exc}") from None
        if not self.inputs:
            raise ValueError("give at least one file or directory to load")
        if self.graph is not None:
            try:
                rdf.Canonicaliser(self.graph)
            except ValueError as exc:
                raise ValueError(f"--graph '{self.graph}' is not an absolute IRI: {exc}"
                                 ) from None


# ---- preparing a data set ----


@dataclass
class Prepared:
    records: DataFrame  # PARSED records (persisted): quads deduplicated, or PART records
    distinct: DataFrame | None  # quad, graph, h0..h3 (None with PART records)
    rejects: DataFrame  # file, line, text, message
    files: int
    lines: int
    statements: int
    line_rejects: int
    file_rejects: int
    quads: int
    fingerprint: int
    seconds: float
    # The documents' prefixes: one IRI each, and those declared with several (refused).
    prefixes: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def reject_count(self) -> int:
        return self.line_rejects + self.file_rejects

    def release(self) -> None:
        self.records.unpersist()


def sum_row(df: DataFrame) -> tuple[int, int]:
    row = transform.fingerprint_sums(df).collect()[0]
    return rdf.combine([row[f"s{i}"] for i in range(rdf.PIECES)]), row["quads"]


def parse_inputs(spark: SparkSession, files: list[rdf.InputFile],
                 config: transform.ParseConfig) -> DataFrame:
    """PARSED records of every input file (line formats split across tasks)."""
    local = [f for f in files if extract.reads_itself(f)]  # read by the tasks themselves
    parts = [transform.parse_local_lines(extract.local_line_splits(spark, local), config)
             ] if local else []
    if by_jvm := [f for f in files if f.line_based and f not in local]:  # text source
        parts.append(transform.parse_lines(extract.read_lines(spark, by_jvm), config))
    if docs := [f for f in files if not f.line_based]:
        parts.append(transform.parse_documents(extract.documents(spark, docs), config))
    return reduce(DataFrame.unionByName, parts)


def prepare(spark: SparkSession, files: list[rdf.InputFile], graph: str | None,
            progress: Progress, scope_blank_nodes: bool = True,
            push: PartPush | None = None, pushed: Callable[[], None] | None = None,
            base_iri: str | None = None) -> Prepared:
    """Parse, validate, canonicalise, deduplicate and fingerprint the inputs: one pass
    over them and one shuffle; the result stays persisted for the load.

    With ``push`` (an initial load) the tasks send the quads to the worker in parts as
    they parse them, NOT deduplicated, and keep PART records of their digests: the
    distinct count and fingerprint come from the digests alone
    (``transform.distinct_sums``; docs/design/pipeline-on-spark.md). ``pushed`` is called
    once every part is sent."""
    started = time.monotonic()
    counts = spark.sparkContext.accumulator({}, CountsParam())
    config = transform.ParseConfig(graph, scope_blank_nodes, counts=counts,
                                   base_iri=base_iri,
                                   part_quads=None if push is None else PART_QUADS,
                                   push=push)
    parsed = parse_inputs(spark, files, config)
    records = (parsed if push is not None else transform.deduplicated(parsed)).persist(
        StorageLevel.MEMORY_AND_DISK)
    documents = any(not f.line_based for f in files)
    with progress.watch_parse(counts, {f.path: f.size for f in files},
                              None if push is None else push.worker):
        # The parse runs here (and, with ``push``, sends every part), once: the records
        # stay persisted for what follows.
        kinds = {r["kind"]: r.asDict() for r in transform.summary(records).collect()}
        if push is not None:  # the distinct quads, in the place of the QUAD records
            if pushed is not None:
                pushed()
            distinct = transform.distinct_sums(records).collect()[0].asDict()
            kinds[rdf.QUAD] = {**distinct, "n": distinct["quads"]}
        declared = transform.prefixes(records).collect() if documents else []
    progress.done()

    def n(kind: int, column: str = "n") -> int:
        return kinds[kind][column] if kind in kinds else 0

    fingerprint = rdf.combine([kinds[rdf.QUAD][f"s{i}"] for i in range(rdf.PIECES)]) \
        if rdf.QUAD in kinds else 0
    return Prepared(records, None if push is not None else transform.quads(records),
                    transform.rejects(records),
                    len(files), n(rdf.SPLIT_LINES, "lines"), n(rdf.SPLIT_LINES, "statements"),
                    n(rdf.LINE_REJECT), n(rdf.FILE_REJECT), n(rdf.QUAD), fingerprint,
                    time.monotonic() - started, *one_iri_each(declared))


def one_iri_each(declared: list) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The rule for a prefix declared in several documents (rows prefix, namespace):
    with one IRI everywhere it is kept; with different IRIs it is refused — neither is
    declared, the load reports them — since no order of the files makes one of them
    the right one (Spark reads them in any order, and name order is an accident).
    The empty prefix (``@prefix : <...>``) is left out: RDF4J's namespaces API names a
    prefix in the path, which cannot be empty."""
    iris: dict[str, set[str]] = {}
    for row in declared:
        if row["prefix"]:
            iris.setdefault(row["prefix"], set()).add(row["namespace"])
    return ({p: next(iter(v)) for p, v in iris.items() if len(v) == 1},
            {p: sorted(v) for p, v in sorted(iris.items()) if len(v) > 1})


def _blobs(df: DataFrame, size: int) -> Iterator[tuple[bytes, int]]:
    """(N-Quads text, quads): ``df``'s quads by ``size``."""
    for row in transform.nquads_blobs(df, size).toLocalIterator(prefetchPartitions=True):
        yield row["data"], row["quads"]


# Where an output goes: a directory of the driver (Path) or a Hadoop URL (str).
Output = Path | str


def output_dir(given: str | None, default_prefix: str) -> Output:
    """Where an output directory goes. A local path (or a ``file:`` URL: the driver's
    filesystem) is checked here: it must not exist or be an empty directory; a URL of
    another scheme (``hdfs://``, ``s3a://``) is checked by ``output_ready`` once Spark
    runs (it needs Hadoop's FileSystem)."""
    if given is None:
        return Path(f"{default_prefix}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if not locations.is_local(given):
        return given
    path = Path(locations.name_of(given))
    path = path.expanduser().resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(f"{given} exists and is not an empty directory")
    return path


def output_ready(spark: SparkSession, output: Output) -> None:
    """A URL output's check (``output_dir``'s rule), before the job does anything."""
    if isinstance(output, Path):
        return
    fs = hadoop_fs.HadoopFS(spark)
    try:
        kind = fs.kind(output)
        if kind == "file" or (kind == "dir" and not fs.is_empty_dir(output)):
            raise ValueError(f"{output} exists and is not an empty directory")
    except hadoop_fs.StorageError as exc:
        raise ValueError(str(exc)) from None


def child(output: Output, name: str) -> Output:
    return output / name if isinstance(output, Path) else locations.child(output, name)


def make_dir(spark: SparkSession, output: Output) -> None:
    if isinstance(output, Path):
        output.mkdir(parents=True, exist_ok=True)
    else:
        hadoop_fs.HadoopFS(spark).mkdirs(output)


def open_text(spark: SparkSession, output: Output) -> TextIO:
    """A new text file: on the driver's filesystem, or through Hadoop's FileSystem API
    (``hadoop_fs``) for a URL."""
    if isinstance(output, Path):
        return open(output, "w", encoding="utf-8")
    return hadoop_fs.HadoopFS(spark).create_text(output)


# Outputs are written by the driver from rows Spark returns (toLocalIterator: one
# partition at a time), never by the executors: on a cluster their filesystem is not the
# driver's, and a URL's store (HDFS, S3) takes the driver's writes as well (one file, no
# commit protocol needed). The layout is Spark's (a directory of part files, JSON lines
# without nulls), wherever it goes.


def write_rows(df: DataFrame, output: Output, line: Callable[[dict], str], suffix: str
               ) -> None:
    spark = df.sparkSession
    make_dir(spark, output)
    with open_text(spark, child(output, f"part-00000{suffix}")) as fh:
        for row in df.toLocalIterator():
            fh.write(line(row.asDict()) + "\n")


def write_json(df: DataFrame, output: Output) -> None:
    write_rows(df, output, lambda r: json.dumps({k: v for k, v in r.items() if v is not None},
                                                ensure_ascii=False), ".json")


def write_text(df: DataFrame, output: Output) -> None:
    (column,) = df.columns
    write_rows(df, output, lambda r: r[column], ".txt")


def shared_work_dir(spark: SparkSession, work_dir: str | None) -> None:
    """A replica's export is written by the driver and read by the executors: on a
    cluster it must be on storage both see (the default is the driver's /tmp). It stays
    a local path, not a URL: the driver streams the worker's export (HTTP) into a file
    there and replaces it atomically when the worker's state did not move
    (``extract.export_worker``), which a local file does simply; a shared mount serves a
    cluster."""
    if work_dir is None and not is_local(spark.sparkContext.master):
        raise ValueError(
            f"on a Spark cluster ({spark.sparkContext.master}) the executors read the "
            "repository's export: give --work-dir on storage that the driver and every "
            "Spark node see, as the inputs")


# ---- txcluster load ----


@dataclass
class LoadReport:
    prepared: Prepared
    initial: bool
    present: int = 0  # distinct quads the repository held already
    added: int = 0  # quads sent to be added
    transactions: int = 0
    expected: int = 0  # the fingerprint the cluster must end at
    head: dict = field(default_factory=dict)
    workers: dict[str, dict] = field(default_factory=dict)
    rejects_dir: Output | None = None
    shown_rejects: list = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    # Namespaces: declared by this load; the repository's own, kept where a document
    # gave another IRI (prefix -> (kept, given)); None: not asked (--no-namespaces).
    declared: dict[str, str] | None = None
    kept: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def _namespace_lines(self) -> list[str]:
        p = self.prepared
        if self.declared is None:
            return [f"namespaces      not declared (--no-namespaces; {len(p.prefixes):,} "
                    "prefixes in the documents)"] if p.prefixes or p.conflicts else []
        out = [f"namespaces      {len(self.declared):,} declared"
               + (": " + ", ".join(sorted(self.declared)) if self.declared else "")]
        out += [f"  {prefix}: refused, declared with different IRIs: {', '.join(iris)}"
                for prefix, iris in p.conflicts.items()]
        out += [f"  {prefix}: the repository's {kept} kept (a document gives {given})"
                for prefix, (kept, given) in sorted(self.kept.items())]
        return out

    def progress_line(self) -> str:
        """The last state of the progress line: what was parsed, rejected, loaded, and
        what the verification found."""
        p = self.prepared
        at = sum(st.get("fingerprint") == to_hex(self.expected)
                 for st in self.workers.values())
        return (f"parsed {p.statements:,} quads, rejected {p.reject_count:,}, loaded "
                f"{self.added:,}, verification {'OK' if self.ok else 'FAILED'}: "
                f"{at}/{len(self.workers)} workers hold {to_hex(self.expected)}")

    def summary(self) -> str:
        p = self.prepared
        total = sum(self.seconds.values())
        lines = [
            f"files           {p.files:,}",
            f"lines           {p.lines:,}",
            f"rejects         {p.line_rejects:,} lines, {p.file_rejects:,} files"
            + (f" -> {self.rejects_dir}" if self.rejects_dir else ""),
        ]
        lines += [f"  {r['file']}:{r['line'] if r['line'] is not None else '?'}: "
                  f"{r['message']}\n    {r['text'][:200]}" for r in self.shown_rejects]
        lines += [
            f"statements      {p.statements:,}",
            f"distinct quads  {p.quads:,}",
            f"fingerprint     {to_hex(p.fingerprint)}",
        ]
        if self.initial:
            lines.append(f"loaded          {self.added:,} quads: initial bulk load")
        else:
            lines.append(f"loaded          {self.added:,} quads in {self.transactions:,} "
                         f"transactions ({self.present:,} were present already)")
        lines += self._namespace_lines()
        lines.append(f"rate            {p.quads / total if total else 0:,.0f} quads/s end to "
                     "end (" + ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
                     + ")")
        lines.append(f"cluster         head seq {self.head.get('seq')}, fingerprint "
                     f"{self.head.get('fingerprint')}, expected {to_hex(self.expected)}")
        for url, st in self.workers.items():
            lines.append(f"  {url}: " + (f"seq {st['seq']}, fingerprint {st['fingerprint']},"
                                         f" {st['quads']:,} quads" if "seq" in st
                                         else st.get("error", "?")))
        lines.append("OK: every worker holds the expected fingerprint" if self.ok
                     else "MISMATCH: " + "; ".join(self.problems))
        return "\n".join(lines)


def _sync_timeout(config: LoadConfig, quads: int) -> float:
    if config.sync_timeout_s is not None:
        return config.sync_timeout_s
    return max(120.0, quads / 5_000)


def run_load(session: Callable[[], SparkSession], config: LoadConfig, progress: Progress
             ) -> LoadReport:
    """The whole load; ``session`` is called (Spark started) once the cluster and a local
    --rejects have been checked, so an unfit cluster fails at once; the inputs are listed
    then (through Hadoop's FileSystem: Spark's JVM), before anything is loaded."""
    with tasks_named():
        return _run_load(session, config, progress)


def _run_load(session: Callable[[], SparkSession], config: LoadConfig, progress: Progress
              ) -> LoadReport:
    rejects_dir = output_dir(config.rejects_dir, "txcluster-rejects")
    with load.MasterAPI(config.master, config.auth, cadata=config.cadata) as master, \
            tempfile.TemporaryDirectory(prefix="txcluster-load-", dir=config.work_dir) as work:
        status = master.status()
        repository = master.repository(config.repository)
        target = load.initial_target(status) if config.initial else None
        spark = session()
        files = extract.list_inputs(spark, config.inputs)
        output_ready(spark, rejects_dir)
        _seq, head_fp, head_quads = load.head(status)
        if target is None and (head_quads, head_fp) != (0, 0):
            shared_work_dir(spark, config.work_dir)  # _missing exports the repository
        if spark.sparkContext.uiWebUrl:
            progress.note(f"Spark UI: {spark.sparkContext.uiWebUrl}")
        if target is not None:
            report = _load_initial(spark, files, config, master, target, progress)
        else:
            report = _load_transactions(spark, files, config, master, repository, status,
                                        Path(work), progress)
        prepared = report.prepared
        if prepared.reject_count:
            report.rejects_dir = rejects_dir
            ordered = prepared.rejects.orderBy("file", "line")
            write_json(ordered, rejects_dir)
            report.shown_rejects = [r.asDict() for r in ordered.take(SHOWN)]
        if config.namespaces:
            report.declared, report.kept = _declare_namespaces(master, repository, prepared)

        started = time.monotonic()
        status, synced = load.wait_in_sync(master, _sync_timeout(config, prepared.quads),
                                           lambda s: progress.line(_sync_line(s)))
        progress.done()
        report.seconds["sync"] = time.monotonic() - started
        report.head = status["head"]
        report.workers = load.worker_states(status, config.cadata)
        _check(report, synced)
        progress.line(report.progress_line(), force=True)
        progress.done()
        prepared.release()
        return report


def _declare_namespaces(master: load.MasterAPI, repository: str, prepared: Prepared
                        ) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """The documents' prefixes into the repository's namespaces, each as a transaction
    through the master. A prefix the repository declares already is left as it is (as
    RDF4J's own loader does: a load never redefines a prefix); it is reported when a
    document gives it another IRI. Returns (declared, kept)."""
    present = master.namespaces(repository) if prepared.prefixes else {}
    declared, kept = {}, {}
    for prefix, iri in sorted(prepared.prefixes.items()):
        if prefix not in present:
            master.set_namespace(repository, prefix, iri)
            declared[prefix] = iri
        elif present[prefix] != iri:
            kept[prefix] = (present[prefix], iri)
    return declared, kept


def _load_initial(spark: SparkSession, files: list[rdf.InputFile], config: LoadConfig,
                  master: load.MasterAPI, target: str, progress: Progress) -> LoadReport:
    """The tasks send the quads to ``target`` as they parse them; the commit carries the
    job's fingerprint, which the worker's staged content must have."""
    bulk = load.BulkLoad(master, target, config.auth)
    try:
        prepared = prepare(spark, files, config.graph, progress, push=bulk.push,
                           pushed=bulk.sent, base_iri=config.base_iri)
        started = time.monotonic()
        if prepared.quads:
            bulk.commit(prepared.fingerprint, prepared.quads)
        else:
            bulk.abort()
    except BaseException:
        bulk.abort()
        raise
    report = LoadReport(prepared, True, added=prepared.quads, expected=prepared.fingerprint)
    report.seconds = {"prepare and send": prepared.seconds,
                      "commit": time.monotonic() - started}
    return report


def _load_transactions(spark: SparkSession, files: list[rdf.InputFile], config: LoadConfig,
                       master: load.MasterAPI, repository: str, status: dict, work: Path,
                       progress: Progress) -> LoadReport:
    """The quads the repository lacks, in transactions of at most --batch-quads."""
    prepared = prepare(spark, files, config.graph, progress, base_iri=config.base_iri)
    report = LoadReport(prepared, False)
    report.seconds["prepare"] = prepared.seconds
    started = time.monotonic()
    missing, base_fp, added_fp, report.added = _missing(spark, status, prepared, work,
                                                        config.cadata)
    report.present = prepared.quads - report.added
    report.expected = (base_fp + added_fp) % MOD
    report.seconds["compare"] = time.monotonic() - started
    started = time.monotonic()
    if report.added:
        # About as many partitions as transactions (few quads in many partitions would
        # make many small ones), each holding whole subjects; a twentieth to spare, as
        # hashing fills them unevenly and one just past the batch would send its few
        # quads over as a transaction of their own.
        partitions = -(-report.added * 20 // (config.batch_quads * 19))
        batches = transform.by_subject(missing, partitions)
        _, report.transactions = load.send_transactions(
            master, repository, _blobs(batches, config.batch_quads),
            config.parallel, progress.counter("load", "quads", report.added, started))
    missing.unpersist()
    progress.done()
    report.seconds["load"] = time.monotonic() - started
    return report


def _sync_line(status: dict) -> str:
    at_head = sum(w["status"] == "ON" and w["seq"] == status["head"]["seq"]
                  for w in status["workers"])
    return (f"verification: {at_head}/{len(status['workers'])} workers at the head of the "
            "log")


def _missing(spark: SparkSession, status: dict, prepared: Prepared, work: Path,
             cadata: str | None = None) -> tuple[DataFrame, int, int, int]:
    """(the prepared quads the repository lacks, the repository's fingerprint they are
    added to, their fingerprint sum and count). An empty repository lacks everything;
    otherwise its content is read from an up-to-date worker and its fingerprint
    recomputed — the base of the check."""
    assert prepared.distinct is not None  # prepared without a stream: deduplicated
    _seq, fp, quads = load.head(status)
    if quads == 0 and fp == 0:
        return prepared.distinct, fp, prepared.fingerprint, prepared.quads
    worker = load.up_to_date_worker(status)
    target = work / "repository.nq"
    with httpx.Client(verify=client_verify(cadata)) as client:
        state = extract.export_worker(client, worker, target)
    existing = transform.quads(parse_inputs(
        spark, [extract.export_file(target)], transform.ParseConfig(scope_blank_nodes=False))
    ).persist(StorageLevel.MEMORY_AND_DISK)
    content_fp, _ = sum_row(existing)
    kept = int(state["fingerprint"], 16)
    if content_fp != kept:
        existing.unpersist()
        raise load.LoadError(
            f"the content of {worker} has fingerprint {to_hex(content_fp)} but the worker "
            f"keeps {state['fingerprint']}: its store changed behind its back (see "
            "txcluster audit); not loading")
    missing = transform.absent_from(prepared.distinct, existing).persist(
        StorageLevel.MEMORY_AND_DISK)
    added_fp, added = sum_row(missing)
    existing.unpersist()
    return missing, kept, added_fp, added


def _check(report: LoadReport, synced: bool) -> None:
    expected = to_hex(report.expected)
    if not synced:
        report.problems.append("the workers did not reach the head of the log in time")
    if report.head.get("fingerprint") != expected:
        report.problems.append(f"the log's head is at {report.head.get('fingerprint')}, "
                               f"expected {expected} (did another client write meanwhile?)")
    for url, st in report.workers.items():
        if st.get("fingerprint") != expected:
            report.problems.append(f"{url} is at {st.get('fingerprint', st.get('error'))}")
