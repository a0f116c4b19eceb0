"""Spark writes with .option("mergeSchema", "true"): the DataFrame's new columns are added in the same
commit as its rows (a failed write adds none); without the option they stay a typed error."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read, rows, write

import mere

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int64())])


def test_merge_schema_adds_columns_with_the_rows(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table("sales.orders", SCHEMA, primary_key="id", buckets=4)
    write(spark.range(0, 100, numPartitions=2).selectExpr("id", "id AS qty"), wh, "sales.orders")
    wider = spark.range(50, 150, numPartitions=2).selectExpr(
        "id", "id * 2 AS qty", "concat('n', id) AS note", "array(id, id) AS pair"
    )
    with pytest.raises(Exception, match="mergeSchema"):
        write(wider, wh, "sales.orders")
    assert t.version == 1 and t.refresh().schema.names == ["id", "qty"]
    write(wider, wh, "sales.orders", mergeSchema="true")
    t.refresh()
    assert t.version == 2 and t.schema.names == ["id", "qty", "note", "pair"]
    assert t.history()[-1].operation == "upsert"  # one commit: the columns and the rows
    got = {r["id"]: r for r in t.to_arrow().to_pylist()}
    assert got[0] == {"id": 0, "qty": 0, "note": None, "pair": None}
    assert got[120] == {"id": 120, "qty": 240, "note": "n120", "pair": [120, 120]}
    assert len(got) == 150
    # Spark reads the new columns back; a later write without them leaves them as they were.
    back = {r["id"]: r["note"] for r in rows(read(spark, wh, "sales.orders"))}
    assert back[60] == "n60" and back[1] is None
    write(spark.range(60, 61).selectExpr("id", "0 AS qty"), wh, "sales.orders", mergeSchema="true")
    assert t.to_arrow(filter="id = 60").to_pylist() == [{"id": 60, "qty": 0, "note": "n60", "pair": [60, 60]}]


def test_a_failed_merge_schema_write_adds_no_column(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table("sales.orders", SCHEMA, primary_key="id", buckets=2)
    bad = spark.range(0, 10).selectExpr(
        "CASE WHEN id = 5 THEN NULL ELSE id END AS id", "id AS qty", "'x' AS extra"
    )
    with pytest.raises(Exception, match="null"):
        write(bad, wh, "sales.orders", mergeSchema="true")
    t.refresh()
    assert t.version == 0 and t.schema.names == ["id", "qty"]
    with pytest.raises(Exception, match="mergeSchema"):
        write(spark.range(1).selectExpr("id", "'x' AS extra"), wh, "sales.orders", mergeSchema="maybe")


def test_native_reads_of_an_evolved_table_go_through_mere_where_files_are_older(
    spark: SparkSession, wh: str
) -> None:
    from mere.integrations.spark import read_table

    t = mere.connect(wh).create_table(
        "sales.items",
        pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32())]),
        primary_key="id",
    )
    t.upsert(pa.table({"id": [1, 2], "qty": pa.array([5, 6], pa.int32())}))
    t.compact()
    with t.evolve() as e:
        e.rename_column("qty", "quantity").widen("quantity", pa.int64()).add_column(
            "note", pa.string(), default="-"
        )
    got = rows(read_table(spark, "sales.items", warehouse=wh, native=True))
    assert got == [{"id": 1, "quantity": 5, "note": "-"}, {"id": 2, "quantity": 6, "note": "-"}]
    t.compact()  # files under the current columns: the native route applies again, with the same rows
    assert rows(read_table(spark, "sales.items", warehouse=wh, native=True)) == got
