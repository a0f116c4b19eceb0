"""Tables Spark feeds with tiny commits (a stream with a short trigger, many small batch writes) follow the
table's maintenance policy: new tables compact automatically, and retention applies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from sparkutil import write

import mere
from mere.spec import default_properties


def _runs_per_split(t: mere.Table) -> int:
    runs = {(f.partition, f.bucket, f.seq) for f in t.files_at(t.version)}
    return max(Counter((p, b) for p, b, _ in runs).values())


def test_a_stream_of_tiny_batches_keeps_a_new_table_compact(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    batches = 24
    for i in range(batches):
        pq.write_table(pa.table({"id": [i, i + 100], "qty": [i, -i]}), source / f"b{i:03d}.parquet")
    query = (
        spark.readStream.schema("id long, qty long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("primary_key", "id")  # the stream creates the table: with mere's defaults
        .option("buckets", "2")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start("stream.tiny")
    )
    query.awaitTermination(timeout=300)
    assert query.exception() is None
    t = mere.connect(wh).table("stream.tiny")
    assert default_properties(True).items() <= t.properties.items()
    ops = Counter(s.operation for s in t.history())
    assert ops["upsert"] == batches and ops["compact"] >= 1
    assert _runs_per_split(t) < 8
    assert {r["id"]: r["qty"] for r in t.to_arrow().to_pylist()} == {
        **{i: i for i in range(batches)},
        **{i + 100: -i for i in range(batches)},
    }


def test_small_batch_writes_follow_the_table_policy(spark: SparkSession, wh: str) -> None:
    for i in range(12):
        df = spark.createDataFrame([(i, "d1", i), (i + 50, "d2", i)], "id long, day string, qty long")
        write(df, wh, "batch.tiny", primary_key="id", partition_by="day", buckets="2")
    t = mere.connect(wh).table("batch.tiny")
    assert t.properties["compaction.auto"] == "inline" and _runs_per_split(t) < 8
    assert len(t.to_arrow()) == 24
    # Retention set through the table's properties runs after Spark's commits too.
    t.set_properties({"retention.max-age": "0", "retention.min-versions": "2"})
    write(spark.createDataFrame([(999, "d1", 1)], "id long, day string, qty long"), wh, "batch.tiny")
    readable = [s.version for s in t.history() if not s.expired]
    assert readable == [t.version - 1, t.version]
    assert len(t.to_arrow()) == 25
