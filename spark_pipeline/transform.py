"""Pure transforms of the pipeline: DataFrame in, DataFrame out, configuration passed in.

Nothing here lists files or talks to the cluster (``extract`` and ``load`` do: an
initial load's tasks send their parts through ``part_push``, given in the config); the
per-record RDF work is ``rdf``'s, run in ``mapInArrow`` (2-4x faster than RDD pickling,
docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline). The tasks read
local files by path themselves: documents (``rdf.open_input``) and the splits of plain
line files (``line_splits``, as Spark's text source would split them).

The parsed records of every input share one schema, ``PARSED``; ``kind`` says what a
record is (``rdf.QUAD``, ``LINE_REJECT``, ``SPLIT_LINES``, ``FILE_REJECT``):

    kind  file  split  idx                 quad                 graph  message  h0..h3
    QUAD  -     -      -                   canonical line       graph  -        pieces
    LINE  path  split  index in the split  the line as written  -      parser   -
    SPLIT path  split  lines of the split  -                    -      -        -
    FILE  path  0      line - 1 (or -1)    the error's line     -      parser   -
    PREFIX path 0      -1                  the prefix           -      its IRI  -
    PART  -     -      -                   -                    -      -        -

(SPLIT records also count the split's statements, in ``statements``.) A PART record
(``ParseConfig.part_quads``: an initial load) stands for up to that many quads of one
task, not deduplicated, which the task itself sent to the worker as N-Quads text
(canonical lines, what a worker's bulk load takes; ``ParseConfig.push``): their number
in ``statements`` and their 16-byte digests (the fingerprint's hashes, big-endian, one
after the other) in ``digests``. A Spark split of
a line-format file starts anywhere in the file, so a line's number is its index in the
split plus the lines of the splits before it (``rejects``).

The job needs one pass over the input: ``deduplicated`` removes duplicate quads in one
shuffle and keeps every other record, and everything else — counts, fingerprint,
rejects, the quads to send — is read from that (persisted) result. An initial load
shuffles no quad: its parts go to the worker from the tasks as they are parsed (the
worker's store is a set), and the count and fingerprint of the distinct quads come
from their digests alone (``distinct_sums``: a shuffle of 16 bytes a quad, in a row
per bucket and part, instead of its text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash
from pyspark import TaskContext
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_pipeline import line_splits, rdf
from spark_pipeline.locations import name_of_uri

PARSED = ("kind int, file string, split long, idx long, statements long, quad string, "
          "graph string, message string, h0 long, h1 long, h2 long, h3 long, "
          "digests binary")
PIECE_COLUMNS = [f"h{i}" for i in range(rdf.PIECES)]
_ARROW = pa.schema([
    ("kind", pa.int32()), ("file", pa.string()), ("split", pa.int64()), ("idx", pa.int64()),
    ("statements", pa.int64()), ("quad", pa.string()), ("graph", pa.string()),
    ("message", pa.string()),
    *[(c, pa.int64()) for c in PIECE_COLUMNS],
    ("digests", pa.binary()),
])


@dataclass(frozen=True)
class ParseConfig:
    """How input records become quads."""

    graph: str | None = None  # every quad goes to this graph (--graph)
    scope_blank_nodes: bool = True  # per-file labels (off for exports of a store)
    with_graphs: bool = False  # fill the graph column (per-graph fingerprints)
    # A Spark accumulator (progress.CountsParam) told {"lines": n, path: bytes} as
    # splits and documents are read: the progress line only, never a result.
    counts: Any = None
    base_iri: str | None = None  # relative IRIs of documents resolve against it
    part_quads: int | None = None  # quads as PART records of this many (initial load)
    # What sends each part to the initial load's worker from the task that makes it
    # (part_push.PartPush: ``send(number, data)``), or None.
    push: Any = None


# A task that fails (a file gone since it was listed, a bug) raises TaskFailure: its
# message, which Spark carries to the driver inside its own error, names the file and the
# lines the task was at; ``task_failure`` finds it there again.
FAILURE_MARK = "txcluster task failure: "
_FAILURE = re.compile(re.escape(FAILURE_MARK) + r"(.*)")


class TaskFailure(RuntimeError):
    def __init__(self, file: str, lines: str, cause: BaseException) -> None:
        text = " ".join(str(cause).split()) or "-"
        super().__init__(f"{FAILURE_MARK}{file}, {lines}: {type(cause).__name__}: {text}")


# A line-format file that Spark's text source (the JVM) fails to read — a truncated
# gzip — fails its task before our Python sees the error: Spark's error names the file,
# its "Caused by" the reason; the lines are not known.
_READ_FAILURE = re.compile(r"\[FAILED_READ_FILE[.\w]*\] Encountered error while reading file "
                           r"(\S+?)\.?\s")
_CAUSE = re.compile(r"Caused by: (\S+?): (.*)")


def task_failure(exc: BaseException) -> str | None:
    """The file and lines of the task whose failure ``exc`` (a Spark error on the
    driver) reports, or None when it is not one we know."""
    text = str(exc)
    if found := _FAILURE.search(text):
        return found.group(1).strip()
    if found := _READ_FAILURE.search(text):
        cause = _CAUSE.search(text, found.end())
        reason = f"{cause.group(1)}: {cause.group(2).strip()}" if cause else "see Spark's log"
        return f"{name_of_uri(found.group(1))}, while Spark's text source read it: {reason}"
    return None


def _line_range(first: int, count: int, split: int = 0) -> str:
    # A split after the first starts at a byte offset whose line number the task does
    # not know (rejects learn it from the other splits, at the end).
    where = f"before line {first}" if count <= 0 else f"lines {first}-{first + count - 1}"
    return where if split == 0 else f"{where} of the split at byte {split}"


# ---- parsed records as Arrow batches ----


def _quad_batch(parsed: rdf.Parsed) -> pa.RecordBatch:
    # No file or split: a quad is the same quad whichever file gave it (deduplicated).
    n = len(parsed.quads)
    raw = b"".join(h.to_bytes(16, "little") for h in parsed.hashes())
    cols = np.frombuffer(raw, dtype="<u4").reshape(n, rdf.PIECES).astype(np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array(np.full(n, rdf.QUAD, dtype=np.int32)), pa.nulls(n, pa.string()),
        pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()),
        pa.nulls(n, pa.int64()), pa.array(parsed.quads, pa.string()),
        pa.array(parsed.graphs, pa.string()) if parsed.graphs else pa.nulls(n, pa.string()),
        pa.nulls(n, pa.string()),
        *[pa.array(cols[:, i]) for i in range(rdf.PIECES)],
        pa.nulls(n, pa.binary()),
    ], schema=_ARROW)


# A task's parts are numbered from its partition's number shifted by this many bits (up
# to ~10**11 quads a task at 100,000 a part).
PART_BITS = 20


class _QuadsOut:
    """Where a task's quads go: QUAD records, batch by batch; or, with
    ``ParseConfig.part_quads``, parts of that many quads (the last one of the task
    shorter), which ``flush`` ends: each sent by ``ParseConfig.push`` (an initial load's
    worker) as the task makes it, and a PART record of its count and digests."""

    def __init__(self, config: ParseConfig) -> None:
        self.part_quads, self.push, self.counts = config.part_quads, config.push, config.counts
        self.lines: list[str] = []
        self.parts = 0  # sent by this task
        # A part's number: the task's partition, then the part's place in it. The same
        # partition parsed again (a task run again) makes the same parts, which the
        # worker takes once (worker_service/bulk_load.py).
        self.first = 0
        if self.push is not None:
            context = TaskContext.get()
            self.first = (context.partitionId() if context else 0) << PART_BITS

    def add(self, parsed: rdf.Parsed) -> Iterator[pa.RecordBatch]:
        if self.part_quads is None:
            yield _quad_batch(parsed)
            return
        lines, start = parsed.quads, 0
        while start < len(lines):
            room = self.part_quads - len(self.lines)
            self.lines += lines[start:start + room]
            start += room
            if len(self.lines) >= self.part_quads:
                yield self._part()

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.lines:
            yield self._part()

    def _part(self) -> pa.RecordBatch:
        lines, self.lines = self.lines, []
        # The lines that may hold a blank node go last: the worker bulk-loads the text
        # before the first "_:" as it is and parses only the rest into quads
        # (worker_service/bulk_load.py, _canonical_text). A store is a set: the order of
        # a part's lines means nothing else.
        plain = [line for line in lines if "_:" not in line]
        if len(plain) < len(lines):
            plain += [line for line in lines if "_:" in line]
        data = ("\n".join(plain) + "\n").encode()
        each = data.split(b"\n")
        each.pop()  # after the last newline
        digests = b"".join(map(xxhash.xxh3_128_digest, each))  # rdfcore's line_hash
        if self.push is not None:
            self.push.send(self.first + self.parts, data)
            if self.counts is not None:
                self.counts.add({"loaded": len(lines)})
        self.parts += 1
        return _records([{"kind": rdf.PART, "statements": len(lines), "digests": digests}])


def _records(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=_ARROW)


def _parse_line_batches(config: ParseConfig, local: bool = False):
    """Spark's text source's batches of lines (or, ``local``, batches of splits of local
    files that the task reads itself: ``parse_local_lines``) -> PARSED records."""
    canon = rdf.Canonicaliser(config.graph, config.with_graphs)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        state = _SplitState()
        out = _QuadsOut(config)
        runs = _local_runs(batches) if local else _text_source_runs(batches)
        try:
            yield from _parse_splits(runs, config, canon, state, out)
            yield from out.flush()
        except Exception as exc:
            if state.current is None or isinstance(exc, TaskFailure):  # named already
                raise
            path, split = state.current
            raise TaskFailure(path, _line_range(state.seen + 1, state.reading, split),
                              exc) from exc

    return run


@dataclass
class _SplitState:
    """Where a line task is: the (file, split) being read, its lines and statements so
    far, the size of the split, the lines being parsed now (named when the task fails)."""

    current: tuple[str, int] | None = None
    seen: int = 0
    statements: int = 0
    rejected: int = 0
    split_bytes: int = 0
    reading: int = 0


# Lines parsed together (and bisected when one is bad): Spark's Arrow batches of lines
# hold as many (spark.sql.execution.arrow.maxRecordsPerBatch, session.py).
LINES_PER_CHUNK = 10_000

# Consecutive lines of one split: (uri, split start, split bytes, lines).
Run = tuple[str, int, int, list[bytes]]


def _text_source_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[Run]:
    """Runs of Spark's text source's batches (columns value, uri, split, split_bytes)."""
    for batch in batches:
        values = batch.column("value").to_pylist()
        uris = batch.column("uri").to_pylist()
        splits = batch.column("split").to_pylist()
        sizes = batch.column("split_bytes").to_pylist()
        start = 0
        while start < len(values):
            key = (uris[start], splits[start])
            end = start
            while end < len(values) and (uris[end], splits[end]) == key:
                end += 1
            yield (uris[start], splits[start], sizes[start],
                   [v if v is not None else b"" for v in values[start:end]])
            start = end


def _local_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[Run]:
    """Runs of the splits of local files in ``batches`` (columns uri, path, start,
    length), each read here as Spark's text source would read it (line_splits)."""
    for batch in batches:
        for row in batch.to_pylist():
            try:
                lines = line_splits.read_split(row["path"], row["start"], row["length"])
            except OSError as exc:  # gone or unreadable since it was listed
                raise TaskFailure(row["path"], _line_range(1, 0, row["start"]), exc) from exc
            for i in range(0, len(lines), LINES_PER_CHUNK):
                yield row["uri"], row["start"], row["length"], lines[i:i + LINES_PER_CHUNK]


def _parse_splits(runs: Iterator[Run], config: ParseConfig,
                  canon: rdf.Canonicaliser, st: _SplitState, out: _QuadsOut
                  ) -> Iterator[pa.RecordBatch]:
    formats: dict[str, tuple[str, object, str | None]] = {}

    def finish() -> pa.RecordBatch:
        assert st.current is not None
        if config.counts is not None:
            config.counts.add({"lines": st.seen, "quads": st.statements,
                               "rejects": st.rejected, st.current[0]: st.split_bytes})
        return _records([{"kind": rdf.SPLIT_LINES, "file": st.current[0],
                          "split": st.current[1], "idx": st.seen,
                          "statements": st.statements}])

    for uri, split, size, lines in runs:
        if uri not in formats:
            path = name_of_uri(uri)
            ext, _ = rdf.detect(path) or ("nq", None)
            scope = rdf.scope_of(path) if config.scope_blank_nodes else None
            formats[uri] = (path, rdf.LINE_FORMATS[ext], scope)
        path, fmt, scope = formats[uri]
        if st.current != (path, split):
            if st.current is not None:
                yield finish()
            st.current, st.seen, st.statements, st.rejected = (path, split), 0, 0, 0
            st.split_bytes = size
        st.reading = len(lines)
        parsed = rdf.parse_lines(lines, fmt, scope, canon)
        st.statements += len(parsed.quads)
        st.rejected += len(parsed.rejects)
        if parsed.quads:
            yield from out.add(parsed)
        if parsed.rejects:
            yield _records([{"kind": rdf.LINE_REJECT, "file": path, "split": split,
                             "idx": st.seen + i, "quad": text, "message": message}
                            for i, text, message in parsed.rejects])
        st.seen += len(lines)
        st.reading = 0
    if st.current is not None:
        yield finish()


def _parse_document_batches(config: ParseConfig):
    canon = rdf.Canonicaliser(config.graph, config.with_graphs)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = _QuadsOut(config)
        for batch in batches:
            for row in batch.to_pylist():
                reader = rdf.CountingReader()
                try:
                    yield from _parse_document(row, config, canon, reader, out)
                except Exception as exc:
                    # The parser reads ahead (1 MB buffers): "lines read" is an upper
                    # bound of where it was.
                    raise TaskFailure(row["path"], _line_range(1, reader.lines) +
                                      " (read so far)", exc) from exc
        yield from out.flush()

    return run


def _parse_document(row: dict, config: ParseConfig, canon: rdf.Canonicaliser,
                    reader: rdf.CountingReader, out: _QuadsOut) -> Iterator[pa.RecordBatch]:
    file = rdf.InputFile(row["path"], row["format"], row["compression"], 0)
    lines = statements = rejected = 0
    for parsed in rdf.parse_document(file, canon, base_iri=config.base_iri, reader=reader,
                                     data=row.get("content")):
        lines += parsed.lines
        statements += len(parsed.quads)
        rejected += len(parsed.rejects)
        if parsed.quads:
            yield from out.add(parsed)
        for idx, text, message in parsed.rejects:
            yield _records([{"kind": rdf.FILE_REJECT, "file": file.path, "split": 0,
                             "idx": idx, "quad": text, "message": message}])
        if parsed.prefixes:
            yield _records([{"kind": rdf.PREFIX, "file": file.path, "split": 0, "idx": -1,
                             "quad": prefix, "message": iri}
                            for prefix, iri in sorted(parsed.prefixes.items())])
    if config.counts is not None:
        config.counts.add({"lines": lines, "quads": statements, "rejects": rejected,
                           file.path: row["size"]})
    yield _records([{"kind": rdf.SPLIT_LINES, "file": file.path, "split": 0,
                     "idx": lines, "statements": statements}])


def parse_lines(lines: DataFrame, config: ParseConfig) -> DataFrame:
    """Lines of line-format files (columns ``value`` binary, ``uri``, ``split``,
    ``split_bytes``, in file order within each split) -> PARSED records."""
    return lines.select("value", "uri", "split", "split_bytes").mapInArrow(
        _parse_line_batches(config), PARSED)


def parse_local_lines(splits: DataFrame, config: ParseConfig) -> DataFrame:
    """Splits of local line-format files (columns ``uri``, ``path``, ``start``,
    ``length``: extract.local_line_splits), read by the tasks themselves -> PARSED
    records, the same as ``parse_lines`` gives for Spark's text source."""
    return splits.select("uri", "path", "start", "length").mapInArrow(
        _parse_line_batches(config, local=True), PARSED)


def parse_documents(documents: DataFrame, config: ParseConfig) -> DataFrame:
    """Documents (columns ``path``, ``format``, ``compression``, ``size``, ``content``:
    the bytes Spark read from a URL, null for a local file read by path) -> PARSED records
    (a rejected document gives no quads)."""
    return documents.select("path", "format", "compression", "size", "content").mapInArrow(
        _parse_document_batches(config), PARSED)


# ---- what the parsed records say ----


def deduplicated(parsed: DataFrame) -> DataFrame:
    """PARSED records with duplicate quads removed (one shuffle; canonical lines: one
    line per quad); every other record is kept."""
    # A quad record has no file, split or idx: its key is its canonical line. Every
    # other record is one of a kind at its (file, split, idx).
    return parsed.dropDuplicates(["kind", "file", "split", "idx", "quad"])


def quads(records: DataFrame) -> DataFrame:
    """The quads of PARSED records (columns quad, graph, h0..h3)."""
    return records.filter(F.col("kind") == rdf.QUAD).select("quad", "graph", *PIECE_COLUMNS)


def distinct_sums(records: DataFrame) -> DataFrame:
    """``fingerprint_sums`` of the distinct quads of the PART records, from their digests
    alone. Each task spreads its digests into 256 buckets by their first byte (a row per
    bucket and part), one shuffle brings each bucket's rows to one task, and that task
    deduplicates them a bucket at a time with numpy. Spark's own ``dropDuplicates`` of a
    row per digest (two hash aggregations over every digest) was ~22% of the JVM's CPU in
    an initial load (JFR, bench/README "The Spark pipeline")."""

    sums = [f"s{i}" for i in range(rdf.PIECES)]  # a task's sum of each piece

    def spread(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            buckets: list[int] = []
            blobs: list[bytes] = []
            for digests in batch.column("digests").to_pylist():
                d = np.frombuffer(digests, dtype="V16")
                first = np.frombuffer(digests, dtype=np.uint8)[::16]
                order = np.argsort(first, kind="stable")
                d, first = d[order], first[order]
                starts = np.flatnonzero(np.diff(first)) + 1
                for lo, hi in zip([0, *starts], [*starts, len(d)], strict=True):
                    buckets.append(int(first[lo]))
                    blobs.append(d[lo:hi].tobytes())
            yield pa.RecordBatch.from_arrays(
                [pa.array(buckets, pa.int32()), pa.array(blobs, pa.binary())],
                names=["bucket", "digests"])

    def unique_sums(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        totals = [0] * (1 + rdf.PIECES)  # distinct digests, then the sum of each piece
        current: int | None = None
        held: list[bytes] = []

        def settle() -> None:
            if held:
                unique = np.unique(np.frombuffer(b"".join(held), dtype="V16"))
                # Big-endian digests: piece 3 (the most significant) comes first.
                cols = unique.view(">u4").reshape(-1, rdf.PIECES)
                totals[0] += len(unique)
                for i in range(rdf.PIECES):
                    totals[1 + i] += int(cols[:, rdf.PIECES - 1 - i].sum(dtype=np.uint64))
            held.clear()

        for batch in batches:  # sorted by bucket: one bucket in memory at a time
            for bucket, blob in zip(batch.column("bucket").to_pylist(),
                                    batch.column("digests").to_pylist(), strict=True):
                if bucket != current:
                    settle()
                    current = bucket
                held.append(blob)
        settle()
        # A task's sums fit a long: each piece is < 2**32, a task holds < 2**31 digests.
        yield pa.RecordBatch.from_arrays([pa.array([t], pa.int64()) for t in totals],
                                         names=["quads", *sums])

    spread_out = records.filter(F.col("kind") == rdf.PART).select("digests").mapInArrow(
        spread, "bucket int, digests binary")
    per_task = (spread_out.repartition("bucket").sortWithinPartitions("bucket")
                .mapInArrow(unique_sums, ", ".join(f"{n} long" for n in ["quads", *sums])))
    return per_task.agg(F.coalesce(F.sum("quads"), F.lit(0)).alias("quads"),
                        *[F.coalesce(F.sum(F.col(n).cast("decimal(20,0)")), F.lit(0)).alias(n)
                          for n in sums])


def rejects(records: DataFrame) -> DataFrame:
    """Rejected lines and files with their 1-based line number (null when the parser gave
    none): columns file, line, text, message."""
    stats = (records.filter(F.col("kind") == rdf.SPLIT_LINES)
             .groupBy("file", "split").agg(F.sum("idx").alias("lines")))
    before = Window.partitionBy("file").orderBy("split").rowsBetween(
        Window.unboundedPreceding, -1)
    offsets = stats.select("file", "split",
                           F.coalesce(F.sum("lines").over(before), F.lit(0)).alias("offset"))
    bad = records.filter(F.col("kind").isin(rdf.LINE_REJECT, rdf.FILE_REJECT))
    return (bad.join(offsets, ["file", "split"], "left")
            .select("file",
                    F.when(F.col("idx") >= 0,
                           F.coalesce(F.col("offset"), F.lit(0)) + F.col("idx") + 1)
                    .alias("line"),
                    F.col("quad").alias("text"), "message"))


def prefixes(records: DataFrame) -> DataFrame:
    """The prefixes the documents declare: columns prefix, namespace, file."""
    return (records.filter(F.col("kind") == rdf.PREFIX)
            .select(F.col("quad").alias("prefix"), F.col("message").alias("namespace"),
                    "file"))


def summary(records: DataFrame) -> DataFrame:
    """One row per kind: records (n), lines and statements (of SPLIT records) and the
    fingerprint sums (of QUAD records, see ``fingerprint_sums``)."""
    return records.groupBy("kind").agg(
        F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("idx"), F.lit(0)).alias("lines"),
        F.coalesce(F.sum("statements"), F.lit(0)).alias("statements"), *_piece_sums())


def _piece_sums() -> list:
    return [F.sum(F.col(c).cast("decimal(10,0)")).alias(f"s{i}")
            for i, c in enumerate(PIECE_COLUMNS)]


def fingerprint_sums(quads: DataFrame, *by: str) -> DataFrame:
    """Quad count and per-piece sums (``rdf.combine`` makes the fingerprint of a row).

    Spark 4 runs with ANSI mode on, where a SUM of longs that overflows fails
    (docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline):
    each 32-bit piece is summed as DECIMAL(20,0), exact for up to ~2e10 quads (more
    raises, never wraps). Grouped by ``by`` (e.g. graph), else one row."""
    aggs = [F.count(F.lit(1)).alias("quads"), *_piece_sums()]
    return quads.groupBy(*by).agg(*aggs) if by else quads.agg(*aggs)


def absent_from(quads: DataFrame, existing: DataFrame) -> DataFrame:
    """The quads not already in ``existing`` (a store's export): what a load really adds."""
    return quads.join(existing.select("quad"), "quad", "left_anti")


def differences(a: DataFrame, b: DataFrame) -> DataFrame:
    """Quads of two replicas that are in one only: columns quad, graph, side ('a'|'b')."""
    left = a.select("quad", "graph").withColumn("a", F.lit(True))
    right = b.select("quad", F.col("graph").alias("graph_b")).withColumn("b", F.lit(True))
    joined = left.join(right, "quad", "full_outer")
    return (joined.filter(F.col("a").isNull() | F.col("b").isNull())
            .select("quad", F.coalesce("graph", "graph_b").alias("graph"),
                    F.when(F.col("a").isNull(), F.lit("b")).otherwise(F.lit("a"))
                    .alias("side")))


def by_subject(quads: DataFrame, partitions: int) -> DataFrame:
    """The quads in ``partitions`` partitions, every quad of a subject in the same one.

    What a load by transactions sends (``nquads_blobs`` of it): a subject's quads then
    come in one transaction, not scattered over all of them by the deduplicating
    shuffle, so the probe looks a new subject up once instead of each of its quads
    (worker_service/operations.py, ``not_in_store``: once a subject is held, every quad
    of it is looked up on its own). One more shuffle on Spark's side; on 1,000,000
    quads in transactions of 100,000 the probe's CPU went from 31-33 to 24-27 s. The
    subject is the line's first term (an IRI or a blank node label: no space in
    either)."""
    return quads.repartition(partitions, F.substring_index("quad", " ", 1))


def nquads_blobs(quads: DataFrame, max_quads: int) -> DataFrame:
    """The quads as N-Quads documents of at most ``max_quads`` lines (columns data
    binary, quads long): what is sent to the cluster, built in the tasks."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pending: list[str] = []

        def blob() -> pa.RecordBatch:
            data = ("\n".join(pending) + "\n").encode()
            return pa.RecordBatch.from_pydict(
                {"data": pa.array([data], pa.binary()),
                 "quads": pa.array([len(pending)], pa.int64())})

        for batch in batches:
            for line in batch.column("quad").to_pylist():
                pending.append(line)
                if len(pending) >= max_quads:
                    yield blob()
                    pending = []
        if pending:
            yield blob()

    return quads.select("quad").mapInArrow(run, "data binary, quads long")
