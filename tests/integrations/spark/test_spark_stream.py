"""Structured Streaming into a mere table: one commit per micro-batch, a replayed batch is applied once."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import mere

CHANGES = "id long, qty long, op string"


def _run(spark: SparkSession, source: Path, checkpoint: Path, wh: str) -> None:
    query = (
        spark.readStream.schema(CHANGES)
        .parquet(str(source))
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start("stream.stock")
    )
    query.awaitTermination(timeout=120)
    assert query.exception() is None


def test_streaming_cdc_upserts_exactly_once_per_batch(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = mere.connect(wh).create_table(
        "stream.stock",
        pa.schema([("id", pa.int64()), ("qty", pa.int64())]),
        primary_key=["id"],
        buckets=2,
        merge_operators={"qty": "sum"},
        cdc_column="op",
    )
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    pq.write_table(
        pa.table({"id": [1, 2, 3, 4], "qty": [1, 1, 1, 1], "op": ["I"] * 4}), source / "b0.parquet"
    )
    _run(spark, source, checkpoint, wh)
    pq.write_table(
        pa.table({"id": [1, 2, 4], "qty": [10, 10, 0], "op": ["U", "U", "D"]}), source / "b1.parquet"
    )
    _run(spark, source, checkpoint, wh)
    want = {1: 11, 2: 11, 3: 1}
    assert {r["id"]: r["qty"] for r in t.scan().to_arrow().to_pylist()} == want
    assert len(t.history()) == 3  # create + one commit per micro-batch

    # Lose the record that batch 1 was committed: Spark replays batch 1 with the same id after a restart.
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    _run(spark, source, checkpoint, wh)
    assert (checkpoint / "commits" / "1").exists()  # batch 1 ran again and was committed by Spark again
    assert {r["id"]: r["qty"] for r in t.scan().to_arrow().to_pylist()} == want  # not 21: applied once
    assert len(t.history()) == 3
    assert not set(p for p, _, _ in t.storage.list_files(t.location)) - set(
        t.catalog.sql.all_file_paths(t.record.id)
    )
