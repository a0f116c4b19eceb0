"""Compaction run by Spark: one task per split, one commit, nothing committed when a task fails."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read, rows, write

import mere
from maintenance import MANUAL
from mere.integrations.spark import compact

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])


def _orders(spark: SparkSession, wh: str) -> mere.Table:
    t = mere.connect(wh).create_table(
        "sales.orders", SCHEMA, primary_key=["id"], partition_by=["day"], buckets=3, properties=MANUAL
    )  # compacted here by Spark, not by the writes
    for i in range(3):
        df = spark.range(i * 500, i * 500 + 1000, numPartitions=2).selectExpr(
            "id", "concat('d', id % 2) AS day", f"id * 10 + {i} AS qty"
        )
        write(df, wh, "sales.orders")
    write(
        spark.range(0, 100).selectExpr("id", "concat('d', id % 2) AS day"),
        wh,
        "sales.orders",
        operation="delete",
    )
    return t


def _py(t: mere.Table) -> list[dict[str, object]]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type,return-value]


def test_spark_compaction_folds_every_split_in_one_commit(spark: SparkSession, wh: str) -> None:
    t = _orders(spark, wh)
    before, version = _py(t), t.version
    assert len(before) == 2000 - 100
    record = compact(spark, "sales.orders", warehouse=wh)
    assert record is not None and record.operation == "compact" and t.version == version + 1
    assert _py(t) == before
    assert rows(read(spark, wh, "sales.orders")) == before
    files = t.files()
    splits = list(zip(files.column("partition").to_pylist(), files.column("bucket").to_pylist(), strict=True))
    assert len(splits) == len(set(splits)) == 6  # one file per (day x bucket)
    assert compact(spark, "sales.orders", warehouse=wh) is None  # nothing left to fold
    assert t.scan(version=version).to_arrow().num_rows == len(before)  # time travel reads the inputs


def test_spark_compaction_of_one_partition(spark: SparkSession, wh: str) -> None:
    t = _orders(spark, wh)
    before = _py(t)
    assert compact(spark, "sales.orders", warehouse=wh, partition={"day": "d0"}) is not None
    days = [p for p in t.files().column("partition").to_pylist()]
    assert sum('"d0"' in p for p in days) == 3 and sum('"d1"' in p for p in days) > 3
    assert _py(t) == before


def test_a_failed_spark_compaction_commits_nothing(spark: SparkSession, wh: str, tmp_path: object) -> None:
    t = _orders(spark, wh)
    before, version = _py(t), t.version
    # Hide one input file: the task of its split fails, the others succeed and leave their files behind.
    victim = t.files().column("path").to_pylist()[0]
    full = t.storage.full_path(victim)
    aside = os.path.join(str(tmp_path), "aside.parquet")
    shutil.move(full, aside)
    try:
        with pytest.raises(Exception, match="StorageError"):
            compact(spark, "sales.orders", warehouse=wh)
    finally:
        shutil.move(aside, full)
    assert t.version == version and _py(t) == before
    orphans = t.cleanup(
        older_than=dt.timedelta(0), dry_run=False
    )  # files of the tasks that succeeded: never referenced
    assert orphans and not set(orphans) & set(t.files().column("path").to_pylist())
    assert compact(spark, "sales.orders", warehouse=wh) is not None and _py(t) == before
