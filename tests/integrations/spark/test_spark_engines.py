"""Merge engines through the Structured Streaming sink: a ``first_row`` table fed a shuffled, replayed
stream keeps each key's event of lowest sequence."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from sparkutil import write

import mere


def _run(spark: SparkSession, source: Path, checkpoint: Path, wh: str) -> None:
    query = (
        spark.readStream.schema("id long, v string, lsn long, op string")
        .parquet(str(source))
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start("stream.firsts")
    )
    query.awaitTermination(timeout=120)
    assert query.exception() is None


def test_first_row_through_the_streaming_sink(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = mere.connect(wh).create_table(
        "stream.firsts",
        pa.schema([("id", pa.int64()), ("v", pa.string()), ("lsn", pa.int64())]),
        primary_key="id",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        merge_operators="first_row",
    )
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    batch = {
        "id": [1, 2, 2, 3],
        "v": ["a5", "b7", "b3", "c1"],
        "lsn": [5, 7, 3, 1],
        "op": ["c", "c", "c", "c"],
    }
    pq.write_table(pa.table(batch), source / "b0.parquet")
    _run(spark, source, checkpoint, wh)
    later = {
        "id": [1, 2, 3],
        "v": ["a2", "b9", "c1"],
        "lsn": [2, 9, 1],
        "op": ["u", "u", "u"],
    }  # c1: a replay
    pq.write_table(pa.table(later), source / "b1.parquet")
    _run(spark, source, checkpoint, wh)
    want = {1: ("a2", 2), 2: ("b3", 3), 3: ("c1", 1)}
    assert {r["id"]: (r["v"], r["lsn"]) for r in t.to_arrow().to_pylist()} == want
    t.compact()
    assert {r["id"]: (r["v"], r["lsn"]) for r in t.to_arrow().to_pylist()} == want


def test_the_batch_sink_creates_a_first_row_table_and_checks_the_engine(spark: SparkSession, wh: str) -> None:
    events = spark.createDataFrame(
        [(1, "a5", 5), (1, "a2", 2), (2, "b7", 7), (2, "b9", 9)], "id long, v string, lsn long"
    ).repartition(2)
    write(events, wh, "batch.firsts", primary_key="id", sequence_by="lsn", merge_operators="first_row")
    t = mere.connect(wh).table("batch.firsts")
    assert t.spec.merge_engine == "first_row"
    assert {r["id"]: r["v"] for r in t.to_arrow().to_pylist()} == {1: "a2", 2: "b7"}
    # The engine given as a JSON string matches the table; later rows of a key are ignored (stale).
    late = spark.createDataFrame([(1, "a1", 1), (2, "b8", 8)], "id long, v string, lsn long")
    write(late, wh, "batch.firsts", merge_operators='"first_row"')
    assert {r["id"]: r["v"] for r in t.to_arrow().to_pylist()} == {1: "a1", 2: "b7"}
    # Per-column operators do not describe a first_row table: refused, nothing written.
    version = t.version
    with pytest.raises(Exception, match="different spec"):
        write(late, wh, "batch.firsts", merge_operators='{"v": "last"}')
    assert t.refresh().version == version
    with pytest.raises(Exception, match="merge engine"):
        write(late, wh, "batch.other", primary_key="id", merge_operators="last_row")
    assert not mere.connect(wh).exists("batch.other")
