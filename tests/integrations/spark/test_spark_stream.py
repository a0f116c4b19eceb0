"""Structured Streaming into a mere table: one commit per micro-batch, a replayed batch is applied once."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.streaming import StreamingQuery

import mere

CHANGES = "id long, qty long, op string"


def _start(
    spark: SparkSession, source: Path, checkpoint: Path, wh: str, slow: bool = False
) -> StreamingQuery:
    changes = spark.readStream.schema(CHANGES).parquet(str(source))
    if slow:  # each row takes a while in a Python UDF: the run can be stopped while its batch is in flight

        def pause(qty: int) -> int:
            import time

            time.sleep(0.5)
            return qty

        changes = changes.withColumn("qty", udf(pause, "long", useArrow=False)(changes.qty))
    return (
        changes.writeStream.format("mere")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start("stream.stock")
    )


def _run(spark: SparkSession, source: Path, checkpoint: Path, wh: str) -> None:
    query = _start(spark, source, checkpoint, wh)
    # A run still going on when the next one starts on the same checkpoint is stopped by it mid-batch
    # (spark.sql.streaming.stopActiveRunOnRestart): wait for the end, however loaded the machine.
    if not query.awaitTermination(timeout=900):
        query.stop()
        pytest.fail("the streaming query did not finish within 900 s")
    assert query.exception() is None


def _unreferenced(t: mere.Table) -> set[str]:
    return set(p for p, _, _ in t.storage.list_files(t.location)) - set(
        t.catalog.sql.all_file_paths(t.record.id)
    )


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
    # Every run finished without a failure: nothing was aborted, and replayed batches' files were deleted.
    assert not _unreferenced(t)


def test_a_run_stopped_mid_batch_then_restarted_commits_each_batch_once(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    """A run stopped while its batch is in flight (Spark interrupts the tasks, or the commit it waits for,
    and may fail to abort): the restart commits each batch once, reads see exactly the model, and what the
    stopped run left is garbage that cleanup removes without changing a read."""
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
        pa.table({"id": [1, 2, 3, 4], "qty": [1, 2, 3, 4], "op": ["I"] * 4}), source / "b0.parquet"
    )
    stopped = _start(spark, source, checkpoint, wh, slow=True)
    deadline = time.monotonic() + 600
    while not stopped.status["isTriggerActive"] and stopped.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)  # inside the batch: the UDF sleeps 0.5 s a row
    stopped.stop()
    _run(spark, source, checkpoint, wh)
    want = {1: 1, 2: 2, 3: 3, 4: 4}
    assert {r["id"]: r["qty"] for r in t.scan().to_arrow().to_pylist()} == want  # applied once
    assert len(t.history()) == 2  # create + batch 0, whether the stopped run's commit landed or not
    orphans = _unreferenced(t)
    assert set(t.cleanup(older_than=dt.timedelta(0), dry_run=False)) >= orphans
    assert not _unreferenced(t)
    assert {r["id"]: r["qty"] for r in t.scan().to_arrow().to_pylist()} == want
