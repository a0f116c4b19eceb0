"""Table-wide keys through Spark: batch and streaming CDC writes that move keys between partitions leave
one row per key (the files of several tasks are looked up when the driver commits them)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from sparkutil import write

import mere

CHANGES = "id long, status string, v long, lsn long, op string"
SCHEMA = pa.schema(
    [("id", pa.int64()), ("status", pa.string()), ("v", pa.int64()), ("lsn", pa.int64()), ("op", pa.string())]
)


def _rows(t: mere.Table) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for r in t.scan().to_arrow().to_pylist():
        assert r["id"] not in out, f"key {r['id']} in two partitions"
        out[r["id"]] = (r["status"], r["v"])
    return out


def test_cdc_writes_moving_keys_leave_one_row_per_key(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = mere.connect(wh).create_table(
        "shop.orders",
        SCHEMA,
        primary_key="id",
        partition_by="status",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
    )
    assert t.key_scope == "table"
    base = spark.range(0, 40, numPartitions=2).selectExpr(
        "id", "'open' AS status", "id AS v", "CAST(1 AS long) AS lsn", "'c' AS op"
    )
    write(base, wh, "shop.orders")
    # Batch: two tasks; every key moves to shipped (lsn 2), even keys then to done (lsn 3) in the other
    # task, keys 30.. get a late event back to open (lsn 0: stale), keys below 5 are deleted (lsn 4) with a
    # partition they do not live in.
    events = (
        [(i, "shipped", 100 + i, 2, "u") for i in range(40)]
        + [(i, "done", 200 + i, 3, "u") for i in range(0, 40, 2)]
        + [(i, "open", -1, 0, "u") for i in range(30, 40)]
        + [(i, "open", None, 4, "d") for i in range(5)]
    )
    df = spark.createDataFrame(events, CHANGES).repartition(2)
    write(df, wh, "shop.orders")
    model = {i: ("done", 200 + i) if i % 2 == 0 else ("shipped", 100 + i) for i in range(5, 40)}
    assert _rows(t) == model
    assert t.history()[-1].summary.get("moved_keys", 0) > 0

    # Streaming: each micro-batch is one commit that moves keys again.
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    pq.write_table(
        pa.table(
            {
                "id": [5, 6, 7, 7],
                "status": ["open", "open", "shipped", "done"],
                "v": [1, 2, 3, 4],
                "lsn": [10, 10, 11, 12],
                "op": ["u", "u", "u", "u"],
            }
        ),
        source / "b0.parquet",
    )
    query = (
        spark.readStream.schema(CHANGES)
        .parquet(str(source))
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start("shop.orders")
    )
    query.awaitTermination(timeout=120)
    assert query.exception() is None
    model.update({5: ("open", 1), 6: ("open", 2), 7: ("done", 4)})
    assert _rows(t) == model


def test_a_dynamic_overwrite_moves_keys_out_of_other_partitions(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table(
        "shop.snap",
        SCHEMA.remove(SCHEMA.get_field_index("op")),
        primary_key="id",
        partition_by="status",
        buckets=2,
    )
    assert t.key_scope == "table"
    t.upsert(
        pa.table(
            {
                "id": [1, 2, 3, 4],
                "status": ["open", "open", "done", "done"],
                "v": [1, 2, 3, 4],
                "lsn": [0] * 4,
            }
        )
    )
    # Dynamic: 'shipped' and 'done' are replaced (3 and 4 go); keys 1 and 2 move out of 'open'.
    df = spark.createDataFrame(
        [(1, "shipped", 10, 0), (5, "done", 50, 0), (2, "done", 20, 0)],
        "id long, status string, v long, lsn long",
    ).coalesce(1)
    write(df, wh, "shop.snap", mode="overwrite", partitionOverwriteMode="dynamic")
    assert _rows(t) == {1: ("shipped", 10), 2: ("done", 20), 5: ("done", 50)}
    assert t.history()[-1].summary.get("moved_keys", 0) == 2
