"""Inputs and outputs where clusters keep them (issue 20 item 3): URLs listed and read
through Hadoop's FileSystem API on Spark's JVM (spark_pipeline/hadoop_fs.py), never the
driver's Python; docs/design/pipeline-on-spark.md#inputs-and-outputs-as-urls.

A scheme the driver's Python cannot see: ``viewfs://`` (Hadoop's own ViewFileSystem,
in every Spark) with a mount table that maps ``/data`` and ``/out`` to local temporary
directories. ``pathlib`` and ``open()`` know nothing of it — a listing or a read that
went through them fails — while Hadoop resolves it to the files underneath, on the
driver and in the executors alike. (A made-up scheme mapped to a local class by
``fs.<scheme>.impl`` does not work without Java code: RawLocalFileSystem reports its
URI as ``file:///`` and Hadoop then refuses the other scheme's paths, "Wrong FS".)
"""

from __future__ import annotations

import gzip
import json
import re
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("pyspark")

from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_pipeline import audit, extract, hadoop_fs, jobs, locations
from spark_pipeline.progress import Progress
from txcluster.cli import main

QUIET = Progress(enabled=False)
GOOD = ('_:b1 <http://e/p> "one" .\n<http://e/a> <http://e/p> "two" .\n'
        '<http://e/a> <http://e/p> .\n<http://e/a> <http://e/q> _:b1 .\n')


def _dataset(d: Path) -> Path:
    """Line files and documents, compressed or not, good and bad, names with a space and
    glob characters (Spark's readers take patterns), and a file that is not RDF."""
    (d / "sub").mkdir(parents=True)
    (d / "lines a%41.nt").write_text(GOOD)  # line 3 is a reject
    (d / "sub" / "b.nq.gz").write_bytes(gzip.compress(
        b'<http://e/b> <http://e/p> "b" <http://e/g> .\n'))
    (d / "doc [1]*.ttl").write_text("@prefix : <http://e/> .\n:doc :has [ :q 1 ] .\n")
    (d / "sub" / "c.ttl.gz").write_bytes(gzip.compress(
        b"@prefix : <http://e/> .\n:c :p :d .\n"))
    (d / "bad.ttl").write_text("@prefix : <http://e/> .\n:ok :p :o .\n:broken :p .\n")
    (d / "notes.txt").write_text("not RDF")
    return d


@pytest.fixture
def viewfs(spark, tmp_path):
    """(``viewfs://<unique>``, its local root): ``/data`` and ``/out`` mounted on local
    directories. The name is new for each test: Hadoop caches a FileSystem per scheme and
    authority, with the mount table it was made with."""
    name = f"txtest{uuid.uuid4().hex[:12]}"
    root = tmp_path / "mounted"
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for link in ("data", "out"):
        (root / link).mkdir(parents=True)
        conf.set(f"fs.viewfs.mounttable.{name}.link./{link}", f"file://{root / link}")
    return f"viewfs://{name}", root


def _names(files) -> list[tuple[str, str, str | None, int]]:
    return [(f.path.rsplit("/", 1)[1], f.format, f.compression, f.size) for f in files]


def _unscoped(df) -> set[str]:
    # Blank node labels carry their file's scope, derived from its name (rdf.scope_of).
    return {re.sub(r"_:f[0-9a-f]+x", "_:", r.quad) for r in df.select("quad").collect()}


def _rejects(prepared) -> list[tuple[str, int | None, str]]:
    return sorted((r.file.rsplit("/", 1)[1], r.line, r.text)
                  for r in prepared.rejects.collect())


# ---- the rules of names (pure) ----


def test_locations_say_what_a_name_means(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    assert locations.hadoop_location("~/data") == "file:/home/u/data"
    assert locations.hadoop_location("hdfs://nn:8020/data") == "hdfs://nn:8020/data"
    assert locations.scheme("S3A://bucket/x") == "s3a"
    assert locations.scheme("a:b.nt") is None and locations.scheme("/x/y") is None
    assert locations.is_local("file:///x") and not locations.is_local("hdfs:///x")
    # A file's name: the local path on file:, else the Hadoop path string (not encoded);
    # Spark's readers report percent-encoded URIs, which give the same names back.
    assert locations.name_of("file:/tmp/a b%20.nt") == "/tmp/a b%20.nt"
    assert locations.name_of("file:///tmp/a b.nt") == "/tmp/a b.nt"
    assert locations.name_of("hdfs://nn:8020/a b.nt") == "hdfs://nn:8020/a b.nt"
    assert locations.name_of_uri("file:/tmp/a%20b%2520.nt") == "/tmp/a b%20.nt"
    assert locations.name_of_uri("file:///tmp/a%20b.nt") == "/tmp/a b.nt"
    assert locations.name_of_uri("hdfs://nn:8020/a%20b.nt") == "hdfs://nn:8020/a b.nt"
    assert locations.reader_path("/tmp/a b.nt") == "file:/tmp/a b.nt"
    assert locations.reader_path("hdfs://nn:8020/a b.nt") == "hdfs://nn:8020/a b.nt"
    assert locations.file_uri("/tmp/a b") == "file:///tmp/a b"


def test_a_missing_filesystem_names_what_to_add():
    s3a = locations.missing_filesystem("s3a://bucket/x", "3.5.0")
    assert "org.apache.hadoop:hadoop-aws:3.5.0" in s3a and "s3a://bucket/x" in s3a
    assert "hadoop-azure" in locations.missing_filesystem("abfss://c@a/x", "3.5.0")
    assert "use 's3a://' URLs" in locations.missing_filesystem("s3://bucket/x", "3.5.0")
    assert "'nosuch'" in locations.missing_filesystem("nosuch://x/y", "3.5.0")
    assert locations.is_missing_filesystem(
        "java.lang.RuntimeException: java.lang.ClassNotFoundException: Class "
        "org.apache.hadoop.fs.s3a.S3AFileSystem not found")
    assert locations.is_missing_filesystem(
        'org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "x"')
    assert not locations.is_missing_filesystem("java.io.FileNotFoundException: /x")


# ---- inputs ----


def test_a_file_url_is_walked_and_loaded_exactly_like_the_plain_path(spark, tmp_path):
    d = _dataset(tmp_path / "in")
    plain = extract.list_inputs(spark, [str(d)])
    url = extract.list_inputs(spark, [locations.file_uri(str(d))])
    assert url == plain  # the same names: local paths, as before URLs were accepted
    assert [f.path for f in plain] == sorted(f.path for f in plain)
    assert [(f.path, f.format, f.compression, f.size) for f in plain] == [
        (str(p), p.name.split(".")[1], "gz" if p.suffix == ".gz" else None, p.stat().st_size)
        for p in (d / "bad.ttl", d / "doc [1]*.ttl", d / "lines a%41.nt", d / "sub" / "b.nq.gz",
                  d / "sub" / "c.ttl.gz")]
    a = jobs.prepare(spark, plain, None, QUIET)
    b = jobs.prepare(spark, url, None, QUIET)
    try:
        assertDataFrameEqual(b.distinct, a.distinct)
        assertDataFrameEqual(b.rejects, a.rejects)
        assert (b.quads, b.fingerprint, b.line_rejects, b.file_rejects) == \
            (a.quads, a.fingerprint, 1, 1) and a.quads == 7
    finally:
        a.release()
        b.release()


def test_a_scheme_the_drivers_python_cannot_see_is_listed_and_read_through_hadoop(
        spark, tmp_path, viewfs):
    base, root = viewfs
    _dataset(root / "data")
    url = f"{base}/data"
    assert not Path(url).exists()  # what the old pathlib walk would have seen
    files = extract.list_inputs(spark, [url])
    assert all(f.path.startswith(f"{base}/data/") for f in files)
    plain = extract.list_inputs(spark, [str(root / "data")])
    assert [f.path for f in files] == [f.path.replace(str(root), base) for f in plain]
    assert [f[1:] for f in _names(files)] == [f[1:] for f in _names(plain)]
    # Documents are read by Spark's binaryFile source (the executors' Hadoop), not
    # opened by path in the Python tasks.
    docs = extract.documents(spark, [f for f in files if not f.line_based])
    assert docs.filter(F.col("content").isNull()).count() == 0 and docs.count() == 3
    via_hadoop = jobs.prepare(spark, files, None, QUIET)
    local = jobs.prepare(spark, plain, None, QUIET)
    try:
        assert _unscoped(via_hadoop.distinct) == _unscoped(local.distinct)
        assert (via_hadoop.quads, via_hadoop.lines) == (local.quads, local.lines) == (7, 12)
        assert [r[1:] for r in _rejects(via_hadoop)] == [r[1:] for r in _rejects(local)]
        assert {r.file for r in via_hadoop.rejects.collect()} == {
            f"{base}/data/bad.ttl", f"{base}/data/lines a%41.nt"}
    finally:
        via_hadoop.release()
        local.release()
    # One file named explicitly, by URL.
    [one] = extract.list_inputs(spark, [f"{base}/data/sub/c.ttl.gz"])
    assert (one.path, one.format, one.compression) == (f"{base}/data/sub/c.ttl.gz", "ttl",
                                                       "gz")


def test_inputs_that_cannot_be_listed_are_named(spark, tmp_path, viewfs):
    base, _ = viewfs
    with pytest.raises(extract.InputError, match="hadoop-aws") as err:
        extract.list_inputs(spark, ["s3a://bucket/x"])
    version = spark.sparkContext._jvm.org.apache.hadoop.util.VersionInfo.getVersion()
    assert f"spark.jars.packages=org.apache.hadoop:hadoop-aws:{version}" in str(err.value)
    assert str(err.value).startswith("s3a://bucket/x: ")
    with pytest.raises(extract.InputError, match="no Hadoop FileSystem for the scheme "
                                                 "'nosuch'"):
        extract.list_inputs(spark, ["nosuch://x/y"])
    missing = locations.file_uri(str(tmp_path / "nothing"))
    with pytest.raises(extract.InputError, match=f"^{re.escape(missing)}: no such file"):
        extract.list_inputs(spark, [missing])
    with pytest.raises(extract.InputError, match="no such file"):
        extract.list_inputs(spark, [f"{base}/data/nothing.nt"])
    with pytest.raises(extract.InputError, match="no RDF files found"):
        extract.list_inputs(spark, [f"{base}/data"])


def test_the_work_dir_stays_local():
    with pytest.raises(ValueError, match="--work-dir hdfs://nn/w: give a local directory"):
        jobs.LoadConfig("http://m", ("/in",), work_dir="hdfs://nn/w")
    with pytest.raises(ValueError, match="not a URL"):
        audit.AuditConfig(("http://a", "http://b"), work_dir="s3a://b/w")
    with pytest.raises(ValueError, match="not a URL"):
        jobs.LoadConfig("http://m", ("/in",), work_dir="file:///w")
    assert jobs.LoadConfig("http://m", ("/in",), work_dir="/w").work_dir == "/w"


# ---- outputs ----


def test_outputs_go_to_urls_through_hadoop(spark, tmp_path, viewfs):
    base, root = viewfs
    rows = spark.createDataFrame([("f", 1, "t", None), ("g", None, "ü", "m")],
                                 "file string, line long, text string, message string")
    expected = ['{"file": "f", "line": 1, "text": "t"}',
                '{"file": "g", "text": "ü", "message": "m"}']
    # file:// is the driver's filesystem: the same directory as the plain path.
    local = tmp_path / "rejects"
    target = jobs.output_dir(locations.file_uri(str(local)), "x")
    assert target == local
    jobs.write_json(rows, target)
    assert (local / "part-00000.json").read_text(encoding="utf-8").splitlines() == expected
    # Another scheme: written through Hadoop's FileSystem API.
    url = f"{base}/out/rejects"
    assert jobs.output_dir(url, "x") == url
    jobs.output_ready(spark, url)
    jobs.write_json(rows, url)
    written = root / "out" / "rejects" / "part-00000.json"
    assert written.read_text(encoding="utf-8").splitlines() == expected
    with pytest.raises(ValueError, match="exists and is not an empty directory"):
        jobs.output_ready(spark, url)
    with pytest.raises(ValueError, match="exists and is not an empty directory"):
        jobs.output_ready(spark, f"{url}/part-00000.json")
    # The audit's layout: a directory of part files and summary.json.
    out = jobs.child(f"{base}/out", "audit")
    jobs.make_dir(spark, out)
    jobs.write_text(rows.select("text"), jobs.child(out, "only-in-a"))
    with jobs.open_text(spark, jobs.child(out, "summary.json")) as fh:
        fh.write(json.dumps({"only_in_a": 2}))
    assert (root / "out" / "audit" / "only-in-a" / "part-00000.txt").read_text(
        encoding="utf-8") == "t\nü\n"
    assert json.loads((root / "out" / "audit" / "summary.json").read_text()) == \
        {"only_in_a": 2}
    with pytest.raises(ValueError, match="hadoop-aws"):
        jobs.output_ready(spark, "s3a://bucket/out")
    with pytest.raises(hadoop_fs.StorageError, match=r"out/audit/summary\.json"):
        hadoop_fs.HadoopFS(spark).write_text(jobs.child(out, "summary.json"), "again")


# ---- the load, end to end ----


def test_load_from_and_rejects_to_urls_and_nothing_from_a_missing_filesystem(
        spark, cluster_factory, tmp_path, viewfs):
    base, root = viewfs
    c = cluster_factory(1)
    _dataset(root / "data")
    result = CliRunner().invoke(main, ["load", "--master", c.master.url, "--rejects",
                                       "s3a://bucket/rejects", f"{base}/data"])
    assert result.exit_code == 2 and "add hadoop-aws" in result.output, result.output
    result = CliRunner().invoke(main, ["load", "--master", c.master.url, "s3a://bucket/in",
                                       f"{base}/data"])
    assert result.exit_code == 2 and "s3a://bucket/in: " in result.output, result.output
    status = c.status()
    assert (status["head"]["seq"], c.worker_states()[c.workers[0].url]["quads"]) == (0, 0)

    result = CliRunner().invoke(main, ["load", "--master", c.master.url, "--rejects",
                                       f"{base}/out/rejects", f"{base}/data"])
    assert result.exit_code == 0, result.output
    assert f"-> {base}/out/rejects" in result.output
    rejected = [json.loads(line) for line in
                (root / "out" / "rejects" / "part-00000.json").read_text().splitlines()]
    assert sorted((r["file"], r["line"]) for r in rejected) == [
        (f"{base}/data/bad.ttl", 3), (f"{base}/data/lines a%41.nt", 3)]
    assert c.worker_states()[c.workers[0].url]["quads"] == 7
