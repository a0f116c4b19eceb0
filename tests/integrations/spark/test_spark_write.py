"""Spark writes -> Python and Spark read: upsert, delete, overwrite, CDC, create, atomicity, idempotency."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read, rows, write

import mere

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())])


def _orders(wh: str, **kwargs: object) -> mere.Table:
    return mere.connect(wh).create_table(
        "sales.orders", SCHEMA, primary_key=["id"], partition_by=["day"], buckets=4, **kwargs
    )  # type: ignore[arg-type]


def _py(t: mere.Table) -> dict[int, tuple[str, int, str | None]]:
    return {r["id"]: (r["day"], r["qty"], r["note"]) for r in t.scan().to_arrow().to_pylist()}


def _unreferenced(t: mere.Table) -> set[str]:
    referenced = t.catalog.sql.all_file_paths(t.record.id)
    return {p for p, _, _ in t.storage.list_files(t.location)} - set(referenced)


def test_upsert_delete_overwrite_round_trip(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    base = spark.range(0, 3000, numPartitions=2).selectExpr(
        "id", "concat('d', id % 2) AS day", "id AS qty", "cast(NULL AS string) AS note"
    )
    write(base, wh, "sales.orders")
    assert t.version == 1 and [c.operation for c in t.history()][-1] == "upsert"  # one commit for both tasks
    model = {i: (f"d{i % 2}", i, None) for i in range(3000)}
    assert _py(t) == model

    upd = spark.range(0, 100).selectExpr("id", "concat('d', id % 2) AS day", "-1 AS qty", "'upd' AS note")
    write(upd, wh, "sales.orders")
    model.update({i: (f"d{i % 2}", -1, "upd") for i in range(100)})
    partial = spark.range(100, 110).selectExpr("id", "concat('d', id % 2) AS day", "'only-note' AS note")
    write(partial, wh, "sales.orders")  # a partial upsert: qty keeps its value
    model.update({i: (f"d{i % 2}", i, "only-note") for i in range(100, 110)})
    assert _py(t) == model

    write(
        spark.range(0, 10).selectExpr("id", "concat('d', id % 2) AS day"),
        wh,
        "sales.orders",
        operation="delete",
    )
    for i in range(10):
        del model[i]
    assert _py(t) == model

    d1 = spark.range(5000, 5003).selectExpr("id", "'d1' AS day", "7 AS qty", "'new' AS note")
    write(d1, wh, "sales.orders", mode="overwrite", partition='{"day": "d1"}')
    model = {k: v for k, v in model.items() if v[0] != "d1"} | {
        i: ("d1", 7, "new") for i in range(5000, 5003)
    }
    assert _py(t) == model
    # Spark reads back what Spark wrote.
    assert {r["id"]: (r["day"], r["qty"], r["note"]) for r in rows(read(spark, wh, "sales.orders"))} == model

    write(d1, wh, "sales.orders", mode="overwrite")
    assert _py(t) == {i: ("d1", 7, "new") for i in range(5000, 5003)}
    write(
        spark.range(0).selectExpr("id", "'d1' AS day", "1 AS qty", "'x' AS note"),
        wh,
        "sales.orders",
        mode="overwrite",
    )  # an empty overwrite empties the table
    assert _py(t) == {}
    assert not _unreferenced(t)


def test_cdc_dataframe_create_on_write_and_sum_operator(spark: SparkSession, wh: str) -> None:
    changes = spark.createDataFrame(
        [
            (1, "a", 5, "I"),
            (2, "b", 1, "I"),
            (1, "a", 3, "U"),
            (3, "c", 9, "I"),
            (2, "b", 0, "D"),
            (3, "c", 1, "U"),
        ],
        "id long, name string, qty long, op string",
    ).coalesce(1)  # one partition: the rows apply in order
    write(
        changes,
        wh,
        "shop.stock",
        primary_key="id",
        cdc_column="op",
        buckets=2,
        merge_operators='{"qty": "sum"}',
    )
    t = mere.connect(wh).table("shop.stock")
    assert t.spec.primary_key == ("id",) and t.spec.cdc_column == "op" and "op" not in t.schema.names
    got = {r["id"]: (r["name"], r["qty"]) for r in t.scan().to_arrow().to_pylist()}
    assert got == {1: ("a", 8), 3: ("c", 10)}  # sums across changes; key 2 deleted
    assert rows(read(spark, wh, "shop.stock")) == [
        {"id": 1, "name": "a", "qty": 8},
        {"id": 3, "name": "c", "qty": 10},
    ]

    again = spark.createDataFrame([(1, "a", 2, "U")], "id long, name string, qty long, op string")
    write(again, wh, "shop.stock", idempotency_key="load-7")
    write(again, wh, "shop.stock", idempotency_key="load-7")  # a rerun of the same load is not applied twice
    assert t.scan(filter="id = 1").to_arrow()["qty"].to_pylist() == [10]


def test_append_to_table_without_key(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table(
        "logs.events", pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("msg", pa.string())])
    )
    df = spark.range(5).selectExpr(
        "timestamp'2026-11-21 10:00:00' + make_interval(0,0,0,0,0,0,id) AS ts", "concat('m', id) AS msg"
    )
    write(df, wh, "logs.events")
    write(df, wh, "logs.events")
    got = t.scan().to_arrow()
    assert got.num_rows == 10
    assert min(got["ts"].to_pylist()) == dt.datetime(2026, 11, 21, 10, tzinfo=dt.UTC)


def test_failed_task_leaves_table_unchanged(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    t.upsert(pa.table({"id": [1, 2], "day": ["d0", "d1"], "qty": [1, 2], "note": ["a", "b"]}))
    version, before = t.version, _py(t)
    # 40k rows in 2 tasks; the second task fails after files for its first rows were written.
    bad = spark.range(0, 40_000, numPartitions=2).selectExpr(
        "id",
        "concat('d', id % 2) AS day",
        "CASE WHEN id = 39000 THEN cast(raise_error('boom') AS long) ELSE id END AS qty",
        "'x' AS note",
    )
    with pytest.raises(Exception, match="boom"):
        write(bad, wh, "sales.orders", flush_rows=5000)
    assert t.version == version and _py(t) == before
    assert read(spark, wh, "sales.orders").count() == 2
    # The failing task was stopped after it had staged files, and never reported them: the driver's
    # abort() found them by the write's id (they were orphans for cleanup() before).
    assert not _unreferenced(t)
    assert _py(t) == before


def test_failed_commit_aborts(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    t.upsert(pa.table({"id": [1], "day": ["d0"], "qty": [1], "note": ["a"]}))
    version = t.version
    wrong = spark.range(0, 100, numPartitions=2).selectExpr("id", "'d1' AS day", "id AS qty", "'x' AS note")
    with pytest.raises(Exception, match="overwrite of partition"):
        write(
            wrong, wh, "sales.orders", mode="overwrite", partition='{"day": "d0"}'
        )  # rows of another partition
    assert t.version == version and _py(t) == {1: ("d0", 1, "a")}
    assert not _unreferenced(t)  # abort() deleted every staged file
    with pytest.raises(Exception, match="operation"):
        write(wrong, wh, "sales.orders", operation="merge")
    with pytest.raises(Exception, match="does not apply"):
        write(wrong, wh, "sales.orders", operation="append")
    with pytest.raises(Exception, match="lacks"):
        write(spark.range(3).selectExpr("id", "'x' AS other"), wh, "sales.orders")


def test_a_write_to_a_missing_table_creates_it_only_when_asked(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    _orders(wh)
    df = spark.createDataFrame([(1, "d1", 2, "x")], "id long, day string, qty long, note string")
    with pytest.raises(Exception, match=r"sales\.ordrs does not exist.*primary_key"):
        write(df, wh, "sales.ordrs")  # a typo: no silent new table without key
    assert cat.tables() == ["sales.orders"]
    with pytest.raises(Exception, match=r"unknown option 'primary_keys'.*did you mean 'primary_key'"):
        write(df, wh, "sales.new", primary_keys="id")
    write(df, wh, "logs.raw", create="true")  # explicitly: a table without key
    assert cat.table("logs.raw").spec.primary_key == ()
    write(df, wh, "sales.new", primary_key="id", partition_by="day", buckets=2)
    assert cat.table("sales.new").spec.partition_by == ("day",)
    with pytest.raises(Exception, match="different spec"):
        write(df, wh, "sales.new", primary_key="id", buckets=4)  # creation options must match the table
    assert sorted(cat.tables()) == ["logs.raw", "sales.new", "sales.orders"]


def test_a_failed_write_drops_the_table_it_created(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    bad = spark.createDataFrame([(1, "a"), (None, "b")], "id long, v string")
    with pytest.raises(Exception, match="NullKey"):
        write(bad, wh, "made.t", primary_key="id")
    assert "made.t" not in cat.tables()
    assert not any(p.startswith("made") for p, _, _ in cat.storage.list_files(""))  # nor its folder
    good = spark.createDataFrame([(1, "a")], "id long, v string").selectExpr("id", "v", "'lit' AS c")
    write(good, wh, "made.t", primary_key="id")  # a literal column is NOT NULL in Spark's plan ...
    t = cat.table("made.t")
    assert [f.nullable for f in t.schema] == [False, True, True]  # ... but the table takes NULLs
    t.upsert(pa.table({"id": [2], "v": [None], "c": [None]}))
    with pytest.raises(Exception, match="NullKey"):
        write(bad, wh, "made.t")  # the table existed: a failed write leaves it as it was
    assert cat.table("made.t").version == t.version
