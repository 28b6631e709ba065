"""The pipeline on real Spark (one local[2] session for the whole run) and against real
clusters (processes on loopback, started and stopped by the fixtures).

* one prepared data set holds every hard case — reject attribution across Spark splits,
  duplicates, blank node scoping, documents — and the tests read its real outputs;
* the pure transforms on small inline DataFrames (assertDataFrameEqual);
* ``txcluster load`` into a running 3-worker cluster, ``--initial`` then incremental
  then again, checked against each worker's own full recomputation;
* ``txcluster audit`` finds exactly the quads changed behind the master's back.
"""

from __future__ import annotations

import gzip
import http.server
import json
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest
from click.testing import CliRunner

pytest.importorskip("pyspark")

from pyspark.testing import assertDataFrameEqual

from master_service.api.admin import BULK_PARTS_AT_ONCE
from rdfcore import fingerprint
from spark_pipeline import audit, extract, jobs, load, part_push, rdf, transform
from spark_pipeline.part_push import PartPush, PartRefused
from spark_pipeline.progress import Progress
from tests.procs import make_secret, signed_client
from tests.rdf_samples import HARD
from tests.tlslab import TlsCluster, make_ca_and_cert
from txcluster.cli import main
from txcluster.local import master_node

XSD = "http://www.w3.org/2001/XMLSchema#"
QUIET = Progress(enabled=False)


# ``spark``: one local[2] session for the whole run (tests/conftest.py).


# ---- one data set with every hard case ----

BLOCKS = 20  # the hard lines, repeated: the file spans several Spark splits
SPLIT_BYTES = 2048


def write(path: Path, text: str | bytes, gz: bool = False) -> Path:
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("dataset")
    hard = b"\n".join(line for _ in range(BLOCKS) for line, _ in HARD) + b"\n"
    write(d / "hard.nt", hard)
    # Blank nodes: _:b1 in two files is two nodes; within a file one node, even across
    # splits (the first and the last line of a multi-split file).
    filler = "".join(f"<http://e/f{i}> <http://e/p> \"filler {i}\" .\n" for i in range(150))
    write(d / "a.nt", f'_:b1 <http://e/name> "first of a" .\n{filler}'
                      f'_:b1 <http://e/name> "last of a" .\n')
    write(d / "b.nq.gz", '_:b1 <http://e/name> "b" <http://e/g> .\n', gz=True)
    # Duplicates, within and across files, some only after canonicalisation.
    # (A space and glob characters in a name: Spark sees paths as URIs and patterns.)
    write(d / "dup [1]*.nq", '<http://e/a> <http://e/p> "one" .\n'
                        '<http://e/a> <http://e/p> "one" .\n'
                        f'<http://e/n> <http://e/v> "01"^^<{XSD}integer> .\n'
                        f'<http://e/n> <http://e/v> "1"^^<{XSD}integer> .\n')
    write(d / "doc.ttl", "@prefix : <http://e/> .\n:doc :has [ :q 1 ] .\n")
    write(d / "bad.ttl", "@prefix : <http://e/> .\n:ok :p :o .\n:broken :p .\n")
    write(d / "notes.txt", "not RDF: ignored when walking a directory")
    files = extract.list_inputs(spark, [d])
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
    try:
        prepared = jobs.prepare(spark, files, None, QUIET)
        rejects = prepared.rejects.cache()
        rejects.count()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    return d, files, prepared, rejects


def test_inputs_are_walked_by_extension(dataset):
    _, files, _, _ = dataset
    assert sorted(Path(f.path).name for f in files) == [
        "a.nt", "b.nq.gz", "bad.ttl", "doc.ttl", "dup [1]*.nq", "hard.nt"]
    assert {Path(f.path).name: (f.format, f.compression) for f in files}["b.nq.gz"] == \
        ("nq", "gz")


def test_rejects_are_exactly_the_bad_lines_with_their_numbers(spark, dataset):
    d, _, prepared, rejects = dataset
    hard = str(d / "hard.nt")
    expected = [(hard, b * len(HARD) + i + 1, line.decode("utf-8", "backslashreplace"))
                for b in range(BLOCKS) for i, (line, good) in enumerate(HARD) if not good]
    expected.append((str(d / "bad.ttl"), 3, ":broken :p ."))
    assertDataFrameEqual(rejects.select("file", "line", "text"),
                         spark.createDataFrame(expected, "file string, line long, "
                                                         "text string"))
    assert prepared.line_rejects == BLOCKS * 6 and prepared.file_rejects == 1
    messages = {r.line % len(HARD): r.message for r in rejects.collect()
                if r.file == hard}
    assert "dot" in messages[2] and "end of file" in messages[4]
    assert "UTF-8" in messages[8] and "subject" in messages[9]


def test_line_counts_span_the_splits(spark, dataset):
    _, _, prepared, _ = dataset
    hard_lines = BLOCKS * len(HARD)
    assert prepared.lines == hard_lines + 152 + 1 + 4 + 2 + 3
    # The hard file really was read in several splits (else this proves nothing): by the
    # parse tasks themselves (a plain local file), as Spark's text source splits it.
    hard = [f for f in dataset[1] if f.path.endswith("hard.nt")]
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
    try:
        assert extract.reads_itself(hard[0])
        splits = extract.local_line_splits(spark, hard).collect()
        assert len(splits) > 2
        assert {(r["start"], r["length"]) for r in splits} == {
            (r["split"], r["split_bytes"]) for r in
            extract.read_lines(spark, hard).select("split", "split_bytes").distinct().collect()}
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def test_duplicates_are_removed_after_canonicalisation(spark, dataset):
    _, _, prepared, _ = dataset
    quads = prepared.distinct.filter(~prepared.distinct.quad.contains("_:")) \
        .filter(~prepared.distinct.quad.contains("filler"))
    expected = [
        '<http://e/a> <http://e/p> "one" .',
        '<http://e/a> <http://e/p> "last" .',
        "<http://e/a> <http://e/p> <http://e/after-missing-dot> .",
        "<http://e/a> <http://e/p> <http://e/after-unterminated> .",
        f'<http://e/n> <http://e/v> "1"^^<{XSD}integer> .',
    ]
    assertDataFrameEqual(quads.select("quad"),
                         spark.createDataFrame([(q,) for q in expected], "quad string"))
    # bad.ttl is rejected whole: its good first statement is not loaded either.
    assert prepared.distinct.filter(prepared.distinct.quad.contains("http://e/ok")).count() \
        == 0
    assert prepared.quads == len(expected) + 150 + 2 + 1 + 2


def test_blank_nodes_are_scoped_per_file(dataset):
    d, _, prepared, _ = dataset
    rows = prepared.distinct.filter(prepared.distinct.quad.contains("_:")).collect()
    by_object = {re.search(r'"([^"]+)"', r.quad).group(1): r.quad.split(" ")[0] for r in rows
                 if "name" in r.quad}
    # _:b1 of a.nt is one node from its first line to its last (another split) ...
    assert by_object["first of a"] == by_object["last of a"]
    # ... and another node than _:b1 of b.nq; the document's anonymous node is a third.
    assert by_object["b"] != by_object["first of a"]
    assert by_object["first of a"] == f"_:{rdf.scope_of(str(d / 'a.nt'))}b1"
    doc = [r.quad for r in rows if "http://e/q" in r.quad]
    assert doc == [f'_:{rdf.scope_of(str(d / "doc.ttl"))}1 <http://e/q> "1"^^<{XSD}integer> .']


def test_fingerprint_of_the_job_equals_the_store_and_a_full_recomputation(dataset, tmp_path):
    _, _, prepared, _ = dataset
    lines = [r.quad for r in prepared.distinct.select("quad").collect()]
    store = ox.Store(str(tmp_path / "store"))
    store.bulk_extend(ox.parse("\n".join(lines), format=ox.RdfFormat.N_QUADS))
    store.flush()
    recomputed, count = fingerprint.recompute(store)
    assert count == prepared.quads == len(store)
    assert recomputed == prepared.fingerprint
    assert fingerprint.sum_hashes(store) == prepared.fingerprint


def _file_push(folder: Path):
    """A ``part_push.PartPush`` stand-in that the tasks (other processes) use alike: each
    part into ``folder/<number>``; a number written twice must bring the same bytes (the
    worker's rule)."""

    class FilePush:
        def __init__(self) -> None:
            self.worker = "files"

        def send(self, number: int, data: bytes) -> None:
            path = folder / str(number)
            assert not path.exists() or path.read_bytes() == data
            path.write_bytes(data)

    folder.mkdir()
    return FilePush()


def _pushed_parts(folder: Path) -> dict[int, bytes]:
    return {int(p.name): p.read_bytes() for p in folder.iterdir()}


def test_an_initial_loads_tasks_send_parts_of_every_quad_and_count_the_distinct_ones(
        spark, dataset, tmp_path, monkeypatch):
    """An initial load: the parse tasks send their quads in parts as they make them (no
    shuffle of the text, duplicates included, each part at most PART_QUADS, whole lines)
    and keep PART records of their digests, the fingerprint's hashes of their lines; the
    count and the fingerprint of the distinct quads, the rejects and the line counts
    equal those of the deduplicating job. ``pushed`` is called once, after every part."""
    _, files, prepared, rejects = dataset
    monkeypatch.setattr(jobs, "PART_QUADS", 40)
    push = _file_push(tmp_path / "parts")
    pushed: list[int] = []

    spark.conf.set("spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
    try:
        streamed = jobs.prepare(spark, files, None, QUIET, push=push, pushed=lambda: pushed.append(
            len(_pushed_parts(tmp_path / "parts"))))
        got_rejects = streamed.rejects.collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    sent = _pushed_parts(tmp_path / "parts")
    assert streamed.distinct is None and pushed == [len(sent)] and len(sent) > 3
    parts = [data.decode().splitlines() for data in sent.values()]
    assert all(0 < len(lines) <= 40 and data.endswith(b" .\n")
               for lines, data in zip(parts, sent.values(), strict=True))
    # In each part the lines that may hold a blank node come last (the worker bulk-loads
    # the text before the first "_:" as it is).
    marks = [["_:" in line for line in lines] for lines in parts]
    assert all(m == sorted(m) for m in marks) and any(len(set(m)) == 2 for m in marks)
    lines = [line for part in parts for line in part]
    records = streamed.records.filter(f"kind = {rdf.PART}").collect()
    assert sorted(r.statements for r in records) == sorted(len(p) for p in parts)
    assert sorted(d for r in records for d in (r.digests[i:i + 16]
                                               for i in range(0, len(r.digests), 16))) \
        == sorted(fingerprint.line_hash(line.encode()).to_bytes(16, "big") for line in lines)
    distinct = {r.quad for r in prepared.distinct.select("quad").collect()}
    assert set(lines) == distinct and len(lines) > len(distinct)  # duplicates were sent
    assert (streamed.quads, streamed.fingerprint) == (prepared.quads, prepared.fingerprint)
    assert fingerprint.sum_line_hashes("\n".join(distinct)) == streamed.fingerprint
    assert (streamed.lines, streamed.statements, streamed.line_rejects,
            streamed.file_rejects) == (prepared.lines, prepared.statements,
                                       prepared.line_rejects, prepared.file_rejects)
    assert sorted(got_rejects) == sorted(rejects.collect())
    streamed.release()


def test_a_task_parsed_again_sends_the_same_parts_under_the_same_numbers(
        spark, tmp_path, monkeypatch):
    """What lets the worker take a part sent again once: the same inputs parsed again (a
    task run again on a lost executor) give the same parts under the same numbers; the
    parts of different tasks never share a number (a gzip file is one task of many
    parts)."""
    monkeypatch.setattr(jobs, "PART_QUADS", 50)
    text = "".join(f'<http://e/s{i}> <http://e/p> "{i}" .\n' for i in range(700))
    inputs = [write(tmp_path / "big.nt.gz", text, gz=True),
              write(tmp_path / "plain.nt", text.replace("/s", "/t"))]
    files = extract.list_inputs(spark, inputs)
    runs = []
    for run in ("one", "two"):
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
        try:
            prepared = jobs.prepare(spark, files, None, QUIET,
                                    push=_file_push(tmp_path / run))
        finally:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
        assert prepared.quads == 1400
        prepared.release()
        runs.append(_pushed_parts(tmp_path / run))
    assert runs[0] == runs[1]
    lines = [line for data in runs[0].values() for line in data.decode().splitlines()]
    assert sorted(lines) == sorted(text.splitlines() + text.replace("/s", "/t").splitlines())
    tasks = {n >> transform.PART_BITS for n in runs[0]}
    assert len(tasks) > 2  # the gzip file's one task and the plain file's splits


def test_spark_runs_with_ansi_mode(spark):
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"


def test_the_local_jvm_runs_with_our_options_and_the_users_after_them(spark):
    """The running JVM's own arguments: the C2 thresholds of local mode, then the
    options the caller gave as spark.driver.extraJavaOptions (here the test session's
    C1-only flag), which HotSpot lets win as the later ones."""
    from spark_pipeline import session

    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                .getInputArguments())
    ours = session.LOCAL_JVM_OPTIONS.split()
    assert ours == [a for a in args if a in ours]
    assert "-XX:Tier4InvocationThreshold=50000" in ours
    assert args.index(ours[-1]) < args.index("-XX:TieredStopAtLevel=1")


# ---- the transforms on inline data ----


def _quads(spark, lines: list[str], graph: str = "") -> object:
    rows = []
    for line in lines:
        h = fingerprint.line_hash(line.encode())
        rows.append((line, graph, *rdf.pieces(h)))
    return spark.createDataFrame(rows, "quad string, graph string, h0 long, h1 long, "
                                       "h2 long, h3 long")


def test_differences_and_absent_from(spark):
    a = _quads(spark, ["<x:1> <x:p> <x:o> .", "<x:2> <x:p> <x:o> ."])
    b = _quads(spark, ["<x:2> <x:p> <x:o> .", "<x:3> <x:p> <x:o> <x:g> ."], "<x:g>")
    assertDataFrameEqual(transform.differences(a, b), spark.createDataFrame(
        [("<x:1> <x:p> <x:o> .", "", "a"), ("<x:3> <x:p> <x:o> <x:g> .", "<x:g>", "b")],
        "quad string, graph string, side string"))
    assertDataFrameEqual(transform.absent_from(b, a).select("quad"),
                         spark.createDataFrame([("<x:3> <x:p> <x:o> <x:g> .",)],
                                               "quad string"))


def test_fingerprint_sums_per_graph_never_wrap(spark):
    top = "<x:s> <x:p> <x:o> ."
    rows = [(f"<x:{i}> <x:p> <x:o> .", "g1" if i % 2 else "g2", *(2**32 - 1,) * 4)
            for i in range(1000)]
    df = spark.createDataFrame(rows, "quad string, graph string, h0 long, h1 long, h2 long, "
                                     "h3 long")
    sums = {r.graph: r for r in transform.fingerprint_sums(df, "graph").collect()}
    assert sums["g1"].quads == 500
    assert rdf.combine([sums["g1"][f"s{i}"] for i in range(4)]) == \
        500 * (2**128 - 1) % fingerprint.MOD
    [one] = transform.fingerprint_sums(_quads(spark, [top])).collect()
    assert rdf.combine([one[f"s{i}"] for i in range(4)]) == fingerprint.line_hash(top.encode())


def test_nquads_blobs_hold_at_most_the_batch(spark):
    df = _quads(spark, [f"<x:{i}> <x:p> <x:o> ." for i in range(25)]).coalesce(1)
    blobs = transform.nquads_blobs(df, 10).collect()
    assert [b.quads for b in blobs] == [10, 10, 5]
    text = b"".join(b.data for b in blobs).decode()
    assert sorted(text.splitlines()) == sorted(f"<x:{i}> <x:p> <x:o> ." for i in range(25))


def test_by_subject_puts_every_quad_of_a_subject_in_one_partition(spark):
    lines = [f"<x:s{i % 40}> <x:p{i}> <x:o> ." for i in range(400)] + \
        [f'_:b{i % 7} <x:q> "{i}" <x:g> .' for i in range(70)]
    # Scattered first: every subject spread over the 8 partitions.
    df = transform.by_subject(_quads(spark, lines).repartition(8, "quad"), 5)
    parts = df.rdd.glom().map(lambda rows: [r.quad for r in rows]).collect()
    assert len(parts) == 5
    assert sorted(q for p in parts for q in p) == sorted(lines)
    where: dict[str, set[int]] = {}
    for i, part in enumerate(parts):
        for q in part:
            where.setdefault(q.split(" ", 1)[0], set()).add(i)
    assert len(where) == 47
    assert all(len(w) == 1 for w in where.values())


# ---- a real cluster ----


def _data(d: Path, name: str, start: int, count: int, bnode_hub: str) -> Path:
    """count quads: plain, typed (non-canonical), language-tagged, named-graph ones, and
    one blank node (``bnode_hub``) linked from every line (it spans every batch)."""
    lines = []
    for i in range(start, start + count):
        kind = i % 4
        if kind == 0:
            lines.append(f"<http://e/s{i}> <http://e/v> \"0{i}\"^^<{XSD}integer> .")
        elif kind == 1:
            lines.append(f'<http://e/s{i}> <http://e/label> "Label {i}"@EN .')
        elif kind == 2:
            lines.append(f"<http://e/s{i}> <http://e/in> <http://e/o{i}> <http://e/g{i % 3}> .")
        else:
            lines.append(f"{bnode_hub} <http://e/link> <http://e/s{i}> .")
    return write(d / name, "\n".join(lines) + "\n")


def _verify(cluster, secret: bytes) -> dict[str, dict]:
    """Each worker's full recomputation of its content (/cluster/verify)."""
    out = {}
    for node in cluster.workers:
        with signed_client(node, secret) as c:
            r = c.post("/cluster/verify")
            assert r.status_code == 200, r.text
            out[node.url] = r.json()
    return out


def _hub_subjects(cluster) -> int:
    rows = cluster.select("SELECT (COUNT(DISTINCT ?s) AS ?n) WHERE { ?s <http://e/link> ?o }")
    return int(rows[0]["n"])


def test_load_initial_then_incremental_then_again(spark, cluster_factory, tmp_path, monkeypatch,
                                                  secret):
    c = cluster_factory(3)
    first = tmp_path / "first"
    first.mkdir()
    _data(first, "one.nq", 0, 1200, "_:hub")
    _data(first, "two.nq", 1000, 400, "_:hub")  # 200 quads shared with one.nq
    write(first / "bad.nt", "<http://e/x> <http://e/p> .\n")
    write(first / "ns.ttl", "@prefix ns: <http://ns/> .\n")  # a prefix, no statement
    monkeypatch.setattr(jobs, "PART_QUADS", 500)  # several parts into the worker

    # --initial: one worker bulk-loads, the others are replicated from it.
    report = jobs.run_load(lambda: spark, jobs.LoadConfig(
        c.master.url, (str(first),), initial=True, rejects_dir=str(tmp_path / "rejects")),
        QUIET)
    assert report.ok, report.summary()
    assert (report.prepared.lines, report.prepared.reject_count) == (1602, 1)
    # The prefix is declared once the master has adopted the worker's state.
    assert _namespaces(c) == {"ns": "http://ns/"} and report.declared == {"ns": "http://ns/"}
    # 1200 + 400 lines, 200 in both files: the 150 without a blank node are one quad
    # each, the 50 linking "_:hub" are not (each file has its own _:hub).
    assert report.prepared.quads == report.added == 1450
    job_fp = fingerprint.to_hex(report.prepared.fingerprint)
    checks = _verify(c, c.secret)
    assert {url: (v["matches"], v["fingerprint"], v["quads"]) for url, v in checks.items()} \
        == {w.url: (True, job_fp, 1450) for w in c.workers}
    log = c.master.log_path.read_text()
    assert "initial bulk load" in log
    assert sum(f"Replicating (empty): worker {w.url}" in log for w in c.workers) == 2
    # Both at once, from the one worker that loaded (they share its image): none waits
    # for a source ("cannot replicate ...: no worker can serve a replication").
    assert "cannot replicate" not in log, log[-3000:]
    assert _hub_subjects(c) == 2  # _:hub of one.nq and _:hub of two.nq
    [rejected] = [json.loads(line) for p in (tmp_path / "rejects").glob("part-*.json")
                  for line in p.read_text().splitlines()]
    assert rejected == {"file": str(first / "bad.nt"), "line": 1,
                        "text": "<http://e/x> <http://e/p> .",
                        "message": rejected["message"]}

    # Without --initial, through the CLI: transactions of at most --batch-quads; the
    # fingerprint moves by exactly the quads that were not there yet.
    second = tmp_path / "second"
    second.mkdir()
    _data(second, "three.nq", 1200, 600, "_:hub")  # 200 shared with two.nq, new hub
    before = c.status()["head"]
    result = CliRunner().invoke(main, ["load", "--master", c.master.url, "--batch-quads",
                                       "100", str(second)])
    assert result.exit_code == 0, result.output
    assert "OK: every worker holds the expected fingerprint" in result.output
    # Lines 1200..1799: 150 quads of two.nq are there already; the 150 linking this
    # file's own _:hub are new like the other 300.
    loaded = re.search(r"loaded +(\d+) quads in (\d+) transactions \((\d+) were present",
                       result.output)
    assert loaded, result.output
    added, transactions, present = map(int, loaded.groups())
    assert (added, present) == (450, 150) and transactions >= 5  # <= 100 quads each
    head = c.wait_in_sync()["head"]
    assert (head["seq"], head["quads"]) == (before["seq"] + transactions, 1900)
    checks = _verify(c, c.secret)
    assert {(v["matches"], v["fingerprint"], v["quads"]) for v in checks.values()} == \
        {(True, head["fingerprint"], 1900)}
    assert _hub_subjects(c) == 3  # one node per file, across every batch

    # Again: nothing is added, nothing moves.
    again = jobs.run_load(lambda: spark, jobs.LoadConfig(c.master.url, (str(second),),
                                                         batch_quads=100), QUIET)
    assert again.ok, again.summary()
    assert (again.added, again.transactions) == (0, 0)
    assert c.status()["head"] == head

    # --initial into a cluster holding data is refused before Spark is even asked for.
    def no_spark():
        raise AssertionError("Spark started for a load that must be refused")

    with pytest.raises(load.LoadError, match="--initial needs an empty cluster"):
        jobs.run_load(no_spark, jobs.LoadConfig(c.master.url, (str(first),), initial=True),
                      QUIET)
    # ... and by the master itself.
    r = httpx.put(f"{c.master.url}/admin/bulk-load/x1/parts/0",
                  params={"worker": c.workers[0].url}, content=b"")
    assert r.status_code == 409 and "not new" in r.json()["detail"]
    # "Every part is sent" for a load the worker does not stage: its 404, forwarded.
    r = httpx.post(f"{c.master.url}/admin/bulk-load/x1/sent",
                   params={"worker": c.workers[0].url})
    assert r.status_code == 404 and "no bulk load 'x1'" in r.json()["detail"], r.text


def test_after_an_initial_load_the_other_workers_are_replicated_at_once(
        spark, cluster_factory, tmp_path):
    """The log adopts the loaded worker's state and the two others are replicated from it
    at once, not at the master's next health check: with one check a minute, the
    loader's wait for them ends within seconds (it took up to health-interval-s more)."""
    c = cluster_factory(3, **{"health-interval-s": "60"})
    data = tmp_path / "in"
    data.mkdir()
    _data(data, "one.nq", 0, 400, "_:hub")
    report = jobs.run_load(lambda: spark, jobs.LoadConfig(
        c.master.url, (str(data),), initial=True, rejects_dir=str(tmp_path / "rejects")),
        QUIET)
    assert report.ok, report.summary()
    assert report.seconds["sync"] < 30, report.seconds
    job_fp = fingerprint.to_hex(report.prepared.fingerprint)
    checks = _verify(c, c.secret)
    assert {url: (v["matches"], v["fingerprint"], v["quads"]) for url, v in checks.items()} \
        == {w.url: (True, job_fp, report.added) for w in c.workers}
    log = c.master.log_path.read_text()
    assert sum(f"Replicating (empty): worker {w.url}" in log for w in c.workers) == 2


def test_a_master_killed_while_the_parts_are_sent_and_started_again_loses_nothing(
        spark, cluster_factory, tmp_path, monkeypatch):
    """SIGKILL of the master while the tasks send an initial load's parts, and the master
    started again on its port: the parts it could not take are sent again
    (part_push.RETRY_DELAYS_S), the worker's staging outlives the master (a part it
    holds already is taken once), and the commit through the new master process
    completes the load: every worker holds exactly the data."""
    c = cluster_factory(3)
    data = tmp_path / "in"
    data.mkdir()
    _data(data, "one.nq", 0, 20_000, "_:hub")
    monkeypatch.setattr(jobs, "PART_QUADS", 200)  # ~100 parts: the kill lands among them
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["report"] = jobs.run_load(lambda: spark, jobs.LoadConfig(
                c.master.url, (str(data),), initial=True,
                rejects_dir=str(tmp_path / "rejects")), QUIET)
        except BaseException as exc:  # the test thread reports it
            outcome["error"] = exc

    loader = threading.Thread(target=run)
    loader.start()
    try:
        deadline = time.monotonic() + 120
        staging: list[Path] = []
        while not staging and loader.is_alive() and time.monotonic() < deadline:
            staging = [p for w in c.workers for p in w.directory.glob("**/tmp/bulk-*")]
            time.sleep(0.01)
        assert staging, f"no part was staged: {outcome}"
        first_pid = c.master.pid
        c.master.kill9()
        # The staging is still there: no commit can have come (only the master takes it).
        assert staging[0].exists()
        time.sleep(0.5)  # the tasks' sends fail meanwhile: connection refused
        first_life = c.master.log_path.stat().st_size
        c.master.start()
        assert c.master.pid != first_pid
    finally:
        loader.join(300)
    assert not loader.is_alive()
    assert "error" not in outcome, outcome
    report = outcome["report"]
    assert report.ok, report.summary()
    assert report.added == 20_000
    job_fp = fingerprint.to_hex(report.prepared.fingerprint)
    assert {url: (v["matches"], v["fingerprint"], v["quads"])
            for url, v in _verify(c, c.secret).items()} \
        == {w.url: (True, job_fp, 20_000) for w in c.workers}
    # The commit went through the master's second life (it logs the adoption).
    second_life = c.master.log_path.read_bytes()[first_life:].decode(errors="replace")
    load_id = staging[0].name.removeprefix("bulk-")
    assert f"initial bulk load '{load_id}'" in second_life, second_life[-3000:]
    assert not [p for w in c.workers for p in w.directory.glob("**/tmp/bulk-*")]


def test_an_https_cluster_is_loaded_and_audited_with_its_ca_file(spark, tmp_path):
    """Every node serves HTTPS with a certificate of a private CA (tests/test_tls.py).
    Without --ca-file the load stops before anything is sent, naming the certificate; with
    it the driver checks the master and workers against that CA, and so do the Spark tasks
    that send an initial load's parts (the CA's text travels with them: an executor needs
    no file of its own), and the audit checks the two workers it exports."""
    certs = make_ca_and_cert(tmp_path / "tls")
    c = TlsCluster(tmp_path / "c", make_secret(tmp_path / "secrets"), 2, certs)
    try:
        c.start()
        data = tmp_path / "in"
        data.mkdir()
        _data(data, "one.nq", 0, 400, "_:hub")
        with pytest.raises(load.LoadError, match="CERTIFICATE_VERIFY_FAILED"):
            jobs.run_load(lambda: spark, jobs.LoadConfig(c.master.url, (str(data),),
                                                         initial=True), QUIET)
        assert {st["quads"] for st in c.worker_states().values()} == {0}

        report = jobs.run_load(lambda: spark, jobs.LoadConfig(
            c.master.url, (str(data),), initial=True, ca_file=str(certs["ca"])), QUIET)
        assert report.ok, report.summary()
        job_fp = fingerprint.to_hex(report.prepared.fingerprint)
        assert {url: (st["fingerprint"], st["quads"]) for url, st in c.worker_states().items()} \
            == {w.url: (job_fp, 400) for w in c.workers}

        a, b = (w.url for w in c.workers)
        with pytest.raises(extract.ExportError, match="CERTIFICATE_VERIFY_FAILED"):
            audit.run_audit(lambda: spark, audit.AuditConfig((a, b), str(tmp_path / "o1")),
                            QUIET)
        checked = audit.run_audit(lambda: spark, audit.AuditConfig(
            (a, b), str(tmp_path / "o2"), ca_file=str(certs["ca"])), QUIET)
        assert checked.ok and checked.identical, checked.summary()
    finally:
        c.stop_all()


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot be read"),
    ("not a certificate\n", "holds no usable PEM CA certificate"),
    ("", "is empty"),
])
def test_a_ca_file_that_is_no_ca_bundle_is_named_before_spark_starts(tmp_path, content,
                                                                     message):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    for command in (["load", "--master", "https://127.0.0.1:9", str(tmp_path)],
                    ["audit", "--worker", "https://127.0.0.1:9", "--worker",
                     "https://127.0.0.1:10"]):
        result = CliRunner().invoke(main, [*command, "--ca-file", str(ca)])
        assert result.exit_code == 2, result.output  # as any bad option
        assert f"--ca-file {ca}: {message}" in result.output, result.output


def test_audit_finds_exactly_the_quads_changed_behind_the_masters_back(
        spark, cluster_factory, tmp_path):
    c = cluster_factory(2)
    # Loaded into the empty cluster without --initial: one transaction.
    data = write(tmp_path / "data.nq", "".join(
        f'<http://e/{s}> <http://e/p> "{n}"^^<{XSD}integer>{g} .\n'
        for s, n, g in [("a", 1, ""), ("b", 2, ""), ("c", 3, " <http://e/g>")]))
    loaded = jobs.run_load(lambda: spark, jobs.LoadConfig(c.master.url, (str(data),)), QUIET)
    assert loaded.ok and (loaded.added, loaded.transactions) == (3, 1), loaded.summary()
    assert c.wait_in_sync()["head"]["seq"] == 1
    a, b = c.workers

    result = CliRunner().invoke(main, ["audit", "--worker", a.url, "--worker", b.url,
                                       "--out", str(tmp_path / "same")])
    assert result.exit_code == 0, result.output
    assert "identical" in result.output

    # Change b's store directly, and keep b from noticing (no verification at start).
    b.stop()
    store = ox.Store(str(Path(b.properties["data-dir"]) / "current" / "store"))
    removed = ox.Quad(ox.NamedNode("http://e/a"), ox.NamedNode("http://e/p"),
                      ox.Literal("1", datatype=ox.NamedNode(XSD + "integer")))
    added = [ox.Quad(ox.NamedNode("http://e/rogue"), ox.NamedNode("http://e/p"),
                     ox.Literal("x"), ox.NamedNode("http://e/g")),
             ox.Quad(ox.BlankNode("r1"), ox.NamedNode("http://e/p"), ox.Literal("y"))]
    assert removed in store
    store.remove(removed)
    store.extend(added)
    store.flush()
    del store
    b.properties["verify-on-start"] = "false"
    b.write_config()
    b.start()
    c.wait_in_sync()  # the master sees nothing wrong

    out = tmp_path / "diff"
    report = audit.run_audit(lambda: spark, audit.AuditConfig((a.url, b.url), str(out)),
                             QUIET)
    assert not report.ok and not report.identical
    assert report.only == {"a": 1, "b": 2}

    def lines(side: str) -> list[str]:
        return sorted(line for p in (out / f"only-in-{side}").glob("part-*")
                      for line in p.read_text().splitlines())

    assert lines("a") == [f"{removed} ."]
    assert lines("b") == sorted(f"{q} ." for q in added)
    assert {g["graph"] for g in report.graphs} == {"", "<http://e/g>"}
    kept = [r.state["fingerprint"] == fingerprint.to_hex(r.fingerprint)
            for r in report.replicas]
    assert kept == [True, False]  # b's kept fingerprint is not its content's
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["a"], summary["b"], summary["only_in_a"], summary["only_in_b"]) == \
        (a.url, b.url, 1, 2)


# ---- the progress line ----


class _FakeAccumulator:
    def __init__(self, value: dict) -> None:
        self.value = value


def test_progress_line_shows_files_lines_quads_rejects_rate_and_eta():
    import io

    out = io.StringIO()
    progress = Progress(out, enabled=True)
    acc = _FakeAccumulator({"lines": 1500, "quads": 1400, "rejects": 3, "loaded": 1000,
                            "/a.nt": 100, "/b.nt": 50})
    with progress.watch_parse(acc, {"/a.nt": 100, "/b.nt": 200}):
        pass
    line = out.getvalue().split("\r")[-1]
    assert "files 1/2" in line and "lines 1,500" in line and "lines/s" in line
    assert "parsed 1,400 quads  rejected 3" in line and "ETA" in line
    assert "loaded" not in line  # a load in transactions sends nothing while it parses
    # An initial load's tasks send their parts as they parse: what reached the worker.
    with progress.watch_parse(acc, {"/a.nt": 100, "/b.nt": 200}, into="http://w1"):
        pass
    progress.done()
    line = out.getvalue().split("\r")[-1]
    assert line.rstrip().endswith("loaded 1,000 quads into http://w1")
    progress.counter("load", "quads", 200, 0.0)(200)
    assert "200/200 quads" in out.getvalue()
    quiet = io.StringIO()
    Progress(quiet, enabled=False).line("nothing")
    assert quiet.getvalue() == ""


# ---- the loader's gaps (issue 20, items 4 and 5) ----

GOOD_TTL = ("@prefix ex: <http://e/> .\nPREFIX g: <http://g/>\n"
            "ex:a ex:p g:x .\nex:b ex:p \"b\" .\n")
OTHER_TTL = ("@prefix ex: <http://other/> .\n@prefix o: <http://o/> .\n"
             "@prefix : <http://default/> .\nex:c ex:p o:d .\n")  # ':' is not declared
REL_TTL = "@prefix r: <http://r/> .\n<s1> r:p <o1> .\n<s2> r:p \"x\" .\n"
REL_NT = ('<http://e/n1> <http://e/p> "n" .\n<s> <http://e/p> "x" .\n'
          '<http://e/n2> <http://e/p> "m" .\n')
BASE = "http://base/dir/"


def _store_of(files: list[tuple[str, ox.RdfFormat]], base: str | None = None) -> set[str]:
    """The canonical lines of files as an in-memory store holds them (not the job's
    path: pyoxigraph's own parser and store)."""
    store = ox.Store()
    for text, fmt in files:
        store.extend(ox.parse(text.encode(), format=fmt, base_iri=base))
    return {f"{q} ." for q in store}


def _namespaces(c) -> dict[str, str]:
    r = httpx.get(f"{c.repo_url}/namespaces",
                  headers={"accept": "application/sparql-results+json"}, timeout=30)
    assert r.status_code == 200, r.text
    return {b["prefix"]["value"]: b["namespace"]["value"] for b in r.json()["results"]["bindings"]}


def _content(c) -> set[str]:
    r = httpx.get(f"{c.workers[0].url}/repositories/{c.repository_id}/statements",
                  headers={"accept": "application/n-quads"}, timeout=30)
    return {line for line in r.text.splitlines() if line}


def _progress_lines(out) -> list[str]:
    return [part.strip() for chunk in out.getvalue().split("\r") for part in chunk.split("\n")
            if part.strip()]


def test_base_iri_namespaces_union_and_progress(spark, cluster_factory, tmp_path, monkeypatch):
    import io

    c = cluster_factory(2)
    a = tmp_path / "a"
    a.mkdir()
    write(a / "good.ttl", GOOD_TTL)
    write(a / "other.ttl", OTHER_TTL)  # ex: with another IRI than good.ttl's
    write(a / "rel.ttl", REL_TTL)
    write(a / "rel.nt", REL_NT)

    # Without --base-iri: the relative IRIs are rejects, with their lines.
    out = io.StringIO()
    report = jobs.run_load(lambda: spark, jobs.LoadConfig(
        c.master.url, (str(a),), rejects_dir=str(tmp_path / "rejects-a")), Progress(out, True))
    assert report.ok, report.summary()
    rejects = sorted((Path(r["file"]).name, r["line"], r["message"])
                     for r in report.shown_rejects)
    assert [(f, n) for f, n, _ in rejects] == [("rel.nt", 2), ("rel.ttl", 2)]
    assert "N-Triples and N-Quads allow only absolute IRIs" in rejects[0][2]
    assert "give --base-iri" in rejects[1][2]
    # good.ttl 2 + other.ttl 1 + rel.nt 2; rel.ttl is rejected whole.
    first = _store_of([(GOOD_TTL, ox.RdfFormat.TURTLE), (OTHER_TTL, ox.RdfFormat.TURTLE),
                       (REL_NT.replace('<s> <http://e/p> "x" .\n', ""),
                        ox.RdfFormat.N_TRIPLES)])
    assert _content(c) == first and len(first) == 5
    # ex: is declared with two IRIs: refused and reported; rel.ttl's r: is not carried.
    assert _namespaces(c) == {"g": "http://g/", "o": "http://o/"}
    assert report.prepared.conflicts == {"ex": ["http://e/", "http://other/"]}
    assert "ex: refused, declared with different IRIs" in report.summary()
    head = c.wait_in_sync()["head"]
    lines = _progress_lines(out)
    assert lines[-1] == (f"parsed 5 quads, rejected 2, loaded 5, verification OK: 2/2 "
                         f"workers hold {head['fingerprint']}")
    # The parse line, from the executors' accumulator, and the verification's.
    assert any("lines 14  parsed 5 quads  rejected 2" in line for line in lines), lines
    assert any(line == "verification: 2/2 workers at the head of the log" for line in lines)

    # With --base-iri, into the repository that holds data: exactly the union. The
    # repository's export is streamed by the worker into a file of the work directory,
    # which Spark reads (never a body held whole by the job).
    b = tmp_path / "b"
    b.mkdir()
    write(b / "rel.ttl", REL_TTL)
    write(b / "rel.nt", REL_NT)  # line 2 stays a reject: N-Triples has no base
    write(b / "g2.ttl", "@prefix g: <http://g2/> .\n<http://e/z> <http://e/p> g:z .\n")
    exports: list[tuple[Path, int]] = []
    export_worker = extract.export_worker

    def watched(client, worker, target, attempts=3):
        state = export_worker(client, worker, target, attempts)
        exports.append((target, target.stat().st_size))
        return state

    monkeypatch.setattr(extract, "export_worker", watched)
    work = tmp_path / "work"
    work.mkdir()
    out = io.StringIO()
    report = jobs.run_load(lambda: spark, jobs.LoadConfig(
        c.master.url, (str(b),), base_iri=BASE, work_dir=str(work),
        rejects_dir=str(tmp_path / "rejects-b")), Progress(out, True))
    assert report.ok, report.summary()
    assert [(Path(r["file"]).name, r["line"]) for r in report.shown_rejects] == [("rel.nt", 2)]
    [(exported, size)] = exports
    assert exported.parent.parent == work and size > 0
    second = _store_of([(REL_TTL, ox.RdfFormat.TURTLE)], BASE)
    assert second == {f'<{BASE}s1> <http://r/p> <{BASE}o1> .',
                      f'<{BASE}s2> <http://r/p> "x" .'}
    z = "<http://e/z> <http://e/p> <http://g2/z> ."
    assert _content(c) == first | second | {z}
    assert (report.added, report.present) == (3, 2)
    # r: is new; the repository's g: is kept, though g2.ttl gives another IRI.
    assert _namespaces(c) == {"g": "http://g/", "o": "http://o/", "r": "http://r/"}
    assert report.kept == {"g": ("http://g/", "http://g2/")}
    head = c.wait_in_sync()["head"]
    assert _progress_lines(out)[-1] == (f"parsed 5 quads, rejected 1, loaded 3, "
                                        f"verification OK: 2/2 workers hold "
                                        f"{head['fingerprint']}")

    # --no-namespaces: the data, not the prefixes.
    d = tmp_path / "d"
    d.mkdir()
    write(d / "h.ttl", "@prefix h: <http://h/> .\nh:a h:p h:b .\n")
    result = CliRunner().invoke(main, ["load", "--master", c.master.url, "--no-namespaces",
                                       "--work-dir", str(work), str(d)])
    assert result.exit_code == 0, result.output
    assert "not declared (--no-namespaces; 1 prefixes in the documents)" in result.output
    assert "<http://h/a> <http://h/p> <http://h/b> ." in _content(c)
    assert "h" not in _namespaces(c)

    # A bad --base-iri is refused before anything is read.
    result = CliRunner().invoke(main, ["load", "--master", c.master.url, "--base-iri",
                                       "relative/", str(d)])
    assert result.exit_code != 0 and "--base-iri 'relative/' is not an absolute IRI" in \
        result.output


def test_a_failed_task_names_its_file_and_lines(spark, cluster_factory, tmp_path,
                                                monkeypatch):
    c = cluster_factory(1)
    d = tmp_path / "in"
    d.mkdir()
    write(d / "keep.nt", "<http://e/a> <http://e/p> <http://e/b> .\n")
    gone = write(d / "gone.ttl", GOOD_TTL)
    list_inputs = extract.list_inputs

    def removed_after_listing(session, paths):
        # The file is listed (it exists when the job starts), then goes away before the
        # task that parses it runs: an error of the file system, not of its data.
        files = list_inputs(session, paths)
        gone.unlink()
        return files

    monkeypatch.setattr(extract, "list_inputs", removed_after_listing)
    with pytest.raises(jobs.TaskFailed) as failed:
        jobs.run_load(lambda: spark, jobs.LoadConfig(c.master.url, (str(d),)), QUIET)
    monkeypatch.undo()
    message = str(failed.value)
    assert message.startswith(f"a Spark task failed on {gone}, before line 1 (read so far): "
                              "FileNotFoundError"), message
    assert "\n" not in message and len(message) < 400  # no executor traceback
    assert isinstance(failed.value, jobs.USER_ERRORS)  # the CLI prints it, exit 1
    assert c.status()["head"]["seq"] == 0  # nothing was sent

    # A truncated gzip fails in Spark's own reader (the JVM), before any Python sees
    # it: the file is named from Spark's error, with its cause.
    data = "".join(f'<http://e/s{i}> <http://e/p> "{i}" .\n' for i in range(20_000)).encode()
    packed = gzip.compress(data)
    cut = write(d / "cut.nt.gz", packed[:len(packed) // 2])
    with pytest.raises(jobs.TaskFailed) as failed:
        jobs.run_load(lambda: spark, jobs.LoadConfig(c.master.url, (str(cut),)), QUIET)
    assert str(failed.value) == (f"a Spark task failed on {cut}, while Spark's text source "
                                 "read it: java.io.EOFException: Unexpected end of input "
                                 "stream")

    # A plain local line file is read by its task (extract.local_line_splits): gone after
    # the listing, it is named, even after another file of the same task was parsed.
    gone_nt = write(d / "z-gone.nt", "<http://e/a> <http://e/p> <http://e/c> .\n")

    def nt_removed_after_listing(session, paths):
        files = list_inputs(session, [d / "keep.nt", gone_nt])
        gone_nt.unlink()
        return files

    monkeypatch.setattr(extract, "list_inputs", nt_removed_after_listing)
    packed = {"spark.sql.files.openCostInBytes": "0",  # both files in one task
              "spark.sql.files.minPartitionNum": "1"}
    before = {k: spark.conf.get(k, None) for k in packed}
    for k, v in packed.items():
        spark.conf.set(k, v)
    try:
        with pytest.raises(jobs.TaskFailed) as failed:
            jobs.run_load(lambda: spark, jobs.LoadConfig(c.master.url, (str(d),)), QUIET)
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    monkeypatch.undo()
    assert str(failed.value).startswith(f"a Spark task failed on {gone_nt}, before line 1: "
                                        "FileNotFoundError"), str(failed.value)


def _answer_json(handler: http.server.BaseHTTPRequestHandler, status: int,
                 body: dict) -> None:
    """A stand-in server's JSON answer."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@pytest.mark.processes
def test_the_master_forwards_at_most_two_parts_at_once(tmp_path, secret):
    """Each Spark task sends its own parts through the master: it reads and forwards
    BULK_PARTS_AT_ONCE of them at a time, the others wait unread. Its worker here is a
    stand-in HTTP server that holds each part it is sent until told to answer (the
    master sees only its HTTP: a configured worker URL is all a part needs)."""
    inside, peak, bodies = [0], [0], []
    lock, release = threading.Lock(), threading.Event()

    class HoldingWorker(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
                bodies.append(body)
            release.wait(20)
            with lock:
                inside[0] -= 1
            _answer_json(self, 200, {"load": "L1", "parts": 1, "quads": 1})

        def do_GET(self):  # the master's health checks: no worker state here
            self.send_error(503)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HoldingWorker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    worker = f"http://127.0.0.1:{server.server_address[1]}"
    master = master_node(tmp_path / "master", secret[0], "master1", [worker],
                         **{"health-interval-s": "60"})
    answers: list[int] = []

    def send(n: int) -> None:
        try:
            PartPush(master.url, None, "L1", worker).send(n, f"<http://e/s{n}> <http://e/p> "
                                                             f"<http://e/o> .\n".encode())
            answers.append(200)
        except PartRefused as exc:
            answers.append(str(exc))

    senders = [threading.Thread(target=send, args=(n,)) for n in range(5)]
    try:
        master.start()
        for t in senders:
            t.start()
        deadline = time.monotonic() + 20
        while inside[0] < BULK_PARTS_AT_ONCE and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # time for a third to come through, if it could
        held = inside[0]
    finally:
        release.set()
        for t in senders:
            t.join(30)
        master.stop()
        server.shutdown()
        server.server_close()
    assert held == BULK_PARTS_AT_ONCE == 2
    assert answers == [200] * 5 and peak[0] == 2 and len(bodies) == 5


def test_a_part_is_sent_again_while_the_master_answers_that_it_is_unavailable(
        monkeypatch):
    """502/503/504 (the master, or the worker behind it, unavailable for now) and no
    connection at all are sent again after RETRY_DELAYS_S; the part then taken ends
    the send. A stand-in master answers 503 to each part's first PUT, and to part 9's
    every time."""
    monkeypatch.setattr(part_push, "RETRY_DELAYS_S", (0.01, 0.01))
    seen: list[tuple[str, bytes]] = []

    class FlakyMaster(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, body))
            again = sum(1 for path, _ in seen if path == self.path) > 1
            ok = again and "/parts/9?" not in self.path
            _answer_json(self, *((200, {"parts": 1}) if ok else (503, {"detail": "restarting"})))

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyMaster)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    master = f"http://127.0.0.1:{server.server_address[1]}"
    push = PartPush(master, ("loader", "pw"), "L1", "http://w1")
    try:
        push.send(3, b"<http://e/a> <http://e/p> <http://e/o> .\n")
        assert [body for _, body in seen] == [b"<http://e/a> <http://e/p> <http://e/o> .\n"] * 2
        with pytest.raises(PartRefused, match=r"/parts/9 on .* answered 503: restarting "
                           r"\(3 attempts\)$"):
            push.send(9, b"<http://e/b> <http://e/p> <http://e/o> .\n")
        assert sum(1 for path, _ in seen if "/parts/9?" in path) == 3
    finally:
        server.shutdown()
        server.server_close()


def test_a_part_the_master_refuses_or_cannot_take_fails_with_why(cluster_factory,
                                                                 monkeypatch):
    """What an executor's part push says when the master refuses a part or is not there
    (the task fails with it; Spark carries it to the driver)."""
    monkeypatch.setattr(part_push, "RETRY_DELAYS_S", (0.01, 0.01))
    c = cluster_factory(1)
    good = b"<http://e/a> <http://e/p> <http://e/o> .\n"
    push = PartPush(c.master.url, None, "L1", "http://127.0.0.1:9")  # not its worker
    with pytest.raises(PartRefused, match=r"/parts/0 on .* answered 4\d\d: "):
        push.send(0, good)
    worker = c.workers[0].url
    push = PartPush(c.master.url, None, "L1", worker)
    push.send(1 << transform.PART_BITS, good)
    push.send(1 << transform.PART_BITS, good)  # a task run again: taken once
    with pytest.raises(PartRefused, match=r"answered 409: .*staged already, with other "
                       r"quads$"):  # a refusal is final: sent once
        push.send(1 << transform.PART_BITS, good.replace(b"/o>", b"/other>"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(PartRefused, match=re.escape(f"cannot send part 7 to the master {gone}:")
                       + r".*\(3 attempts\)$"):
        PartPush(gone, None, "L1", worker).send(7, good)
    load.MasterAPI(c.master.url).bulk_abort("L1", worker)
    assert httpx.get(f"{worker}/health").json()["quads"] == 0
