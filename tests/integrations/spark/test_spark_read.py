"""Python writes -> Spark reads: auto-discovery, types, splits, time travel, the filter option, SQL."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)
from sparkutil import read, rows

import mere
from mere.integrations.spark import MereDataSource, register

UTC = dt.UTC

ALL_TYPES = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("f64", pa.float64()),
        ("s", pa.large_string()),
        ("b", pa.binary()),
        ("flag", pa.bool_()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("ns", tz="Europe/Paris")),
        ("ntz", pa.timestamp("ms")),
        ("dec", pa.decimal128(12, 3)),
    ]
)


def _typed_rows(n: int) -> pa.Table:
    base = dt.datetime(2026, 11, 21, 12, 30, 15, 123456, tzinfo=UTC)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "i8": pa.array([i % 100 - 50 for i in range(n)], pa.int8()),
            "i16": pa.array([None if i % 7 == 0 else i * 3 for i in range(n)], pa.int16()),
            "f64": pa.array([i / 4 for i in range(n)]),
            "s": pa.array([f"name-{i}" if i % 5 else None for i in range(n)], pa.large_string()),
            "b": pa.array([bytes([i % 256, 7]) for i in range(n)]),
            "flag": pa.array([i % 2 == 0 for i in range(n)]),
            "d": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in range(n)]),
            "ts": pa.array(
                [base + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("ns", tz="Europe/Paris")
            ),
            "ntz": pa.array(
                [dt.datetime(2026, 1, 1) + dt.timedelta(milliseconds=i) for i in range(n)], pa.timestamp("ms")
            ),
            "dec": pa.array([Decimal(i) / 8 for i in range(n)], pa.decimal128(12, 3)),
        }
    )


def _py(value: Any) -> Any:
    """Spark returns tz-aware columns as naive datetimes in the session zone (UTC here)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def test_python_writes_spark_reads_every_type(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table("lake.types", ALL_TYPES, primary_key=["id"], buckets=3)
    t.upsert(_typed_rows(200))
    t.upsert(_typed_rows(50).set_column(1, "i8", pa.array([1] * 50, pa.int8())))  # newer versions of 50 keys
    t.delete("id in (3, 4)")

    df = read(spark, wh, "lake.types")  # no register call: found through pyspark_mere
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types == {
        "id": LongType(),
        "i8": ByteType(),
        "i16": ShortType(),
        "f64": DoubleType(),
        "s": StringType(),
        "b": BinaryType(),
        "flag": BooleanType(),
        "d": DateType(),
        "ts": TimestampType(),
        "ntz": TimestampNTZType(),
        "dec": DecimalType(12, 3),
    }
    assert not df.schema["id"].nullable and df.schema["s"].nullable
    got = rows(df)
    want = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert len(got) == 198
    assert [{k: _py(v) for k, v in r.items()} for r in got] == [
        {k: _py(v) for k, v in r.items()} for r in want
    ]
    assert len(t.scan().plan()) == 3 and df.rdd.getNumPartitions() == min(3, len(os.sched_getaffinity(0)))


def test_explicit_register_and_table_option(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table(
        "lake.small", pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key=["id"], buckets=2
    )
    t.upsert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    register(spark)
    spark.dataSource.register(MereDataSource)
    df = spark.read.format("mere").option("warehouse", wh).option("table", "lake.small").load()
    assert rows(df) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]


def test_splits_partitions_time_travel_and_filter_option(spark: SparkSession, wh: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
    t = mere.connect(wh).create_table(
        "sales.orders", schema, primary_key=["id"], partition_by=["day"], buckets=4
    )
    t.upsert(pa.table({"id": list(range(40)), "day": ["d1"] * 20 + ["d2"] * 20, "qty": [1] * 40}))
    v1 = t.version
    t.upsert(pa.table({"id": [5, 25], "day": ["d1", "d2"], "qty": [100, 100]}))
    before_delete = dt.datetime.now(UTC)
    t.delete("id = 6")

    df = read(spark, wh, "sales.orders", max_partition_bytes="4m")  # = the open cost: one split per task
    assert df.rdd.getNumPartitions() == len(t.scan().plan()) == 8  # 2 partitions x 4 buckets
    assert df.count() == 39
    # By default small splits share Spark partitions (each split counts 4 MiB of opening cost).
    grouped = read(spark, wh, "sales.orders", min_partitions=2)
    assert grouped.rdd.getNumPartitions() == 2 and grouped.count() == 39
    assert read(spark, wh, "sales.orders", open_cost_bytes="1k", min_partitions=1).rdd.getNumPartitions() == 1
    assert read(spark, wh, "sales.orders", version=v1).groupBy().sum("qty").collect()[0][0] == 40
    assert read(spark, wh, "sales.orders", versionAsOf=v1).count() == 40
    assert read(spark, wh, "sales.orders", as_of=before_delete.isoformat()).count() == 40

    # The filter option prunes inside mere: one key -> one bucket of one partition...
    one = read(spark, wh, "sales.orders", filter="id = 5 and day = 'd1'")
    assert one.rdd.getNumPartitions() == 1
    assert rows(one) == [{"id": 5, "day": "d1", "qty": 100}]
    # ...and a non-key filter runs after the merge: key 5's old version (qty 1) must not resurface.
    assert [r["id"] for r in rows(read(spark, wh, "sales.orders", filter="qty < 50 and id < 8"))] == [
        0,
        1,
        2,
        3,
        4,
        7,
    ]
    assert (
        read(spark, wh, "sales.orders", filter="day = 'd2'", max_partition_bytes="4m").rdd.getNumPartitions()
        == 4
    )

    # Projection: the columns option, or a user schema naming a subset.
    assert read(spark, wh, "sales.orders", columns="qty,id").columns == ["qty", "id"]
    sub = spark.read.format("mere").option("warehouse", wh).schema("id long, qty long").load("sales.orders")
    assert sub.where("id = 25").collect()[0].qty == 100


def test_spark_sql_temporary_view_and_empty_table(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    t = cat.create_table("sales.o", pa.schema([("id", pa.int64()), ("qty", pa.int64())]), primary_key=["id"])
    empty = read(spark, wh, "sales.o")
    assert empty.count() == 0 and empty.columns == ["id", "qty"]
    t.upsert(pa.table({"id": [1, 2, 3], "qty": [10, 20, 30]}))
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW mere_o USING mere OPTIONS (table 'sales.o', warehouse '{wh}')"
    )
    assert spark.sql("SELECT sum(qty) AS s FROM mere_o WHERE id >= 2").collect()[0].s == 50
    spark.catalog.dropTempView("mere_o")


def test_missing_options_are_clear_errors(spark: SparkSession, wh: str) -> None:
    with pytest.raises(Exception, match="warehouse"):
        spark.read.format("mere").load("sales.nothing").count()
    mere.connect(wh)
    with pytest.raises(Exception, match="does not exist"):
        read(spark, wh, "sales.nothing").count()


def test_unknown_options_and_wrong_warehouses_fail_without_creating_anything(
    spark: SparkSession, wh: str, tmp_path: Any
) -> None:
    t = mere.connect(wh).create_table(
        "sales.o", pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key=["id"]
    )
    t.upsert(pa.table({"id": [1], "v": ["a"]}))
    with pytest.raises(Exception, match=r"unknown option 'verison'.*did you mean 'version'"):
        read(spark, wh, "sales.o", verison=1).count()
    with pytest.raises(Exception, match="'startingversion' is for stream reads"):
        read(spark, wh, "sales.o", startingVersion=1).count()  # ignored, it would read the newest version
    with pytest.raises(Exception, match="option 'buckets' must be a positive integer"):
        spark.createDataFrame([(1, "x")], "id long, v string").write.format("mere").mode("append").option(
            "warehouse", wh
        ).option("primary_key", "id").option("buckets", "four").save("sales.p")
    nowhere = tmp_path / "typo" / "wh"
    with pytest.raises(Exception, match="does not exist"):
        read(spark, str(nowhere), "sales.o").count()
    assert not (tmp_path / "typo").exists()


def test_spark_reads_nested_columns(spark: SparkSession, wh: str) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int64())),
            ("pt", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
        ]
    )
    t = mere.connect(wh).create_table("geo.points", schema, primary_key=["id"], buckets=2)
    t.upsert(
        pa.table(
            {
                "id": [1, 2],
                "tags": [["a", "b"], None],
                "attrs": [[("k", 1)], []],
                "pt": [{"x": 1.0, "y": 2.0}, None],
            },
            schema=schema,
        )
    )
    t.upsert(pa.table({"id": [2], "tags": [["c"]]}))
    got = {r["id"]: r for r in (r.asDict(recursive=True) for r in read(spark, wh, "geo.points").collect())}
    assert got[1] == {"id": 1, "tags": ["a", "b"], "attrs": {"k": 1}, "pt": {"x": 1.0, "y": 2.0}}
    assert got[2] == {"id": 2, "tags": ["c"], "attrs": {}, "pt": None}


def test_time_travel_reads_each_version_in_its_own_columns(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table(
        "evo.t", pa.schema([("id", pa.int64()), ("a", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": [1, 2], "a": [1, 2]}))
    old = t.version
    t.tag("before", old)
    t.evolve().add_column("n", pa.string()).rename_column("a", "b").commit()
    t.upsert(pa.table({"id": [3], "b": [3], "n": ["x"]}))
    want = [{"id": 1, "a": 1}, {"id": 2, "a": 2}]
    assert rows(read(spark, wh, "evo.t", version=old)) == want
    assert rows(read(spark, wh, "evo.t", tag="before")) == want
    assert rows(read(spark, wh, "evo.t")) == [
        {"id": 1, "b": 1, "n": None},
        {"id": 2, "b": 2, "n": None},
        {"id": 3, "b": 3, "n": "x"},
    ]


def test_a_given_schema_must_describe_the_table(spark: SparkSession, wh: str) -> None:
    from pyspark.sql.types import StructField, StructType

    t = mere.connect(wh).create_table(
        "given.t", pa.schema([("id", pa.int64()), ("s", pa.string()), ("i", pa.int32())]), primary_key="id"
    )
    t.upsert(pa.table({"id": [1, 2], "s": ["a", None], "i": pa.array([1, 300], pa.int32())}))
    base = spark.read.format("mere").option("warehouse", wh)
    # A NULL-holding column declared NOT NULL: Spark would optimise IS NULL away and crash on the NULL.
    not_null = StructType([StructField("id", LongType()), StructField("s", StringType(), nullable=False)])
    with pytest.raises(Exception, match="may hold NULL in the table"):
        base.schema(not_null).load("given.t").collect()
    narrow = StructType([StructField("id", LongType()), StructField("i", ByteType())])
    with pytest.raises(Exception, match="cannot hold every value"):
        base.schema(narrow).load("given.t").collect()
    wider = StructType(
        [StructField("id", LongType()), StructField("i", LongType()), StructField("s", StringType())]
    )
    assert rows(base.schema(wider).load("given.t")) == [
        {"id": 1, "i": 1, "s": "a"},
        {"id": 2, "i": 300, "s": None},
    ]
    assert rows(base.schema("id long, i int").load("given.t")) == [{"id": 1, "i": 1}, {"id": 2, "i": 300}]


def test_spark_types_of_unsigned_nested_and_nanosecond_values(spark: SparkSession, wh: str) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("u", pa.uint64()),
            ("us", pa.list_(pa.uint32())),
            ("m", pa.struct([("small", pa.uint8())])),
            ("ns", pa.timestamp("ns", "UTC")),
        ]
    )
    t = mere.connect(wh).create_table("types.u", schema, primary_key="id")
    t.upsert(
        pa.table(
            {
                "id": [1, 2],
                "u": pa.array([2**63 - 1, 7], pa.uint64()),
                "us": [[2**32 - 1], None],
                "m": [{"small": 255}, None],
                "ns": pa.array([-1, -1500], pa.timestamp("ns", "UTC")),  # floors, not towards 1970
            },
            schema=schema,
        )
    )
    df = read(spark, wh, "types.u")
    got = rows(df.selectExpr("id", "u", "us", "m.small AS small", "unix_micros(ns) AS micros"))
    assert got == [
        {"id": 1, "u": 2**63 - 1, "us": [2**32 - 1], "small": 255, "micros": -1},
        {"id": 2, "u": 7, "us": None, "small": None, "micros": -2},
    ]
    t.upsert(pa.table({"id": [3], "u": pa.array([2**64 - 1], pa.uint64())}))
    with pytest.raises(Exception, match="column 'u': a value of uint64 does not fit"):
        read(spark, wh, "types.u").collect()
    wide = mere.connect(wh).create_table(
        "types.d", pa.schema([("id", pa.int64()), ("d", pa.decimal256(40, 2))])
    )
    with pytest.raises(Exception, match=r"column 'd'.*38 digits"):
        read(spark, wh, "types.d").collect()
    assert wide.version == 0
