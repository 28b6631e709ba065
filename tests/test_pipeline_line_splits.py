"""spark_pipeline.line_splits against Spark's own text reader (Hadoop's LineRecordReader),
split by split: the same lines, in the same splits, for files with every kind of line
end, byte order marks, empty lines and no last line end, cut at every size."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_pipeline.line_splits import split_lines

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def spark_splits(spark, path, split_bytes: int) -> dict[tuple[int, int], list[bytes]]:
    """{(start, length): its lines in file order}, as Spark's text source reads them."""
    from pyspark.sql import functions as F

    # Splits of exactly split_bytes (Spark makes them smaller for a small input, to give
    # every core a task, unless told one partition will do).
    conf = {"spark.sql.files.maxPartitionBytes": str(split_bytes),
            "spark.sql.files.openCostInBytes": "1", "spark.sql.files.minPartitionNum": "1"}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        rows = (spark.read.text(f"file:{path}")
                .select(F.col("value").cast("binary").alias("value"),
                        F.col("_metadata.file_block_start").alias("start"),
                        F.col("_metadata.file_block_length").alias("length"),
                        F.monotonically_increasing_id().alias("order"))
                .collect())
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    out: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
    for r in rows:
        out.setdefault((r["start"], r["length"]), []).append((r["order"], bytes(r["value"])))
    return {k: [v for _, v in sorted(lines)] for k, lines in out.items()}


def ours(data: bytes, splits) -> dict[tuple[int, int], list[bytes]]:
    return {(s, n): split_lines(io.BytesIO(data), s, n) for s, n in splits}


LINE = st.binary(max_size=6).map(lambda b: b.replace(b"\r", b"x").replace(b"\n", b"y"))
END = st.sampled_from([b"\n", b"\r\n", b"\r", b"\n\n", b"\r\r\n"])


@st.composite
def text_files(draw) -> bytes:
    lines = draw(st.lists(st.tuples(LINE, END), max_size=25))
    data = b"".join(line + end for line, end in lines)
    if draw(st.booleans()):
        data += draw(LINE)  # no line end after the last line
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data


@settings(max_examples=30, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=text_files(), split_bytes=st.integers(1, 12))
def test_the_lines_of_each_split_are_sparks(spark, tmp_path, data, split_bytes):
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    theirs = spark_splits(spark, path, split_bytes)
    # Spark leaves out splits that give no line; ours must give none for them.
    starts = range(0, len(data), split_bytes) if data else []
    mine = ours(data, [(s, min(split_bytes, len(data) - s)) for s in starts])
    assert {k: v for k, v in mine.items() if v} == theirs
    # Whatever the splits, the file's lines are the same.
    assert [line for k in sorted(mine) for line in mine[k]] == \
        [line for k in sorted(theirs) for line in theirs[k]]


@pytest.mark.parametrize("data", [
    b"", b"\n", b"a", b"a\n", b"a\r\n", b"a\r", b"\r\n\r\n", b"\xef\xbb\xbf",
    b"\xef\xbb\xbfa\r\nb", b"aaa\nbbb\nccc\n", b"x\r\ny\rz\n\n"])
@pytest.mark.parametrize("split_bytes", [1, 2, 3, 4, 7, 64])
def test_edge_files_split_as_spark_splits_them(spark, tmp_path, data, split_bytes):
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    theirs = spark_splits(spark, path, split_bytes)
    mine = ours(data, [(s, min(split_bytes, len(data) - s))
                       for s in range(0, len(data), split_bytes)])
    assert {k: v for k, v in mine.items() if v} == theirs


def test_a_large_split_reads_past_its_end_for_its_last_line():
    line = b"<http://e/s> <http://e/p> \"" + b"x" * 200_000 + b"\" .\n"
    data = line * 3
    first = split_lines(io.BytesIO(data), 0, 10)
    rest = split_lines(io.BytesIO(data), 10, len(data) - 10)
    assert first == [line[:-1]] and rest == [line[:-1]] * 2
