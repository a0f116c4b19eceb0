"""Spark's static and dynamic partition overwrite (the session conf and the per-write option) against a
dict model of the rows each mode must leave."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from sparkutil import write

import mere

CONF = "spark.sql.sources.partitionOverwriteMode"
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
SPARK_SCHEMA = "id long, day string, qty long"
DAYS = ["d1", "d2", "d3", None]
_names = itertools.count()


@contextlib.contextmanager
def session_mode(spark: SparkSession, mode: str | None) -> Iterator[None]:
    before = spark.conf.get(CONF, None)
    if mode is None:
        spark.conf.unset(CONF)
    else:
        spark.conf.set(CONF, mode)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, before)


def _table(wh: str, partitioned: bool = True) -> mere.Table:
    t = mere.connect(wh).create_table(
        f"p.t{next(_names)}",
        SCHEMA,
        primary_key=["id"],
        partition_by="day" if partitioned else None,
        buckets=2,
    )
    t.upsert(pa.table({"id": [1, 2, 3, 4], "day": DAYS, "qty": [1, 2, 3, 4]}, schema=SCHEMA))
    return t


def _rows(t: mere.Table) -> set[tuple[Any, ...]]:
    return {(r["id"], r["day"], r["qty"]) for r in t.to_arrow().to_pylist()}


def _expected(
    before: set[tuple[Any, ...]], new: list[tuple[Any, ...]], dynamic: bool
) -> set[tuple[Any, ...]]:
    if not dynamic:
        return set(new)
    replaced = {day for _, day, _ in new}
    return {r for r in before if r[1] not in replaced} | set(new)


@pytest.mark.parametrize(
    ("conf", "option", "dynamic"),
    [
        (None, None, False),  # Spark's default is static
        ("static", None, False),
        ("dynamic", None, True),
        ("DYNAMIC", None, True),  # Spark takes the conf in any case
        (None, "dynamic", True),
        ("static", "dynamic", True),  # the write's option beats the session's conf, as in Spark
        ("dynamic", "static", False),
    ],
)
def test_overwrite_mode_from_conf_and_option(
    spark: SparkSession, wh: str, conf: str | None, option: str | None, dynamic: bool
) -> None:
    t = _table(wh)
    before = _rows(t)
    new = [(10, "d1", 10), (11, None, 11)]
    options = {} if option is None else {"partitionOverwriteMode": option}
    with session_mode(spark, conf):
        write(spark.createDataFrame(new, SPARK_SCHEMA), wh, t.name, mode="overwrite", **options)
    assert _rows(t) == _expected(before, new, dynamic)
    assert t.version == 2 and t.history()[-1].operation == "overwrite"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    new=st.lists(st.tuples(st.integers(5, 30), st.sampled_from(DAYS), st.integers(-9, 9)), max_size=6),
    dynamic=st.booleans(),
    partitions=st.integers(1, 3),
)
def test_overwrite_modes_match_the_model(
    spark: SparkSession, wh: str, new: list[tuple[Any, ...]], dynamic: bool, partitions: int
) -> None:
    """Any rows (NULL partitions, several rows of a day, none at all), split over several Spark tasks."""
    new = list({r[0]: r for r in new}.values())  # one row per key
    t = _table(wh)
    before, version = _rows(t), t.version
    df = spark.createDataFrame(new, SPARK_SCHEMA).repartition(partitions)
    with session_mode(spark, "dynamic" if dynamic else None):
        write(df, wh, t.name, mode="overwrite")
    assert _rows(t) == _expected(before, new, dynamic)
    # A dynamic overwrite of no rows replaces no partition: no version at all.
    assert t.version == (version if dynamic and not new else version + 1)


def test_dynamic_overwrite_within_a_static_partition(spark: SparkSession, wh: str) -> None:
    """``partition`` names the part every row must lie in; dynamic mode replaces only the days written."""
    schema = pa.schema(
        [("id", pa.int64()), ("region", pa.string()), ("day", pa.string()), ("qty", pa.int64())]
    )
    t = mere.connect(wh).create_table(
        "p.regions", schema, primary_key=["id"], partition_by=["region", "day"], buckets=2
    )
    t.upsert(
        pa.table(
            {
                "id": [1, 2, 3, 4],
                "region": ["eu", "eu", "us", "eu"],
                "day": ["d1", "d2", "d1", None],
                "qty": [1] * 4,
            }
        )
    )
    df = spark.createDataFrame([(9, "eu", "d1", 9)], "id long, region string, day string, qty long")
    write(
        df, wh, "p.regions", mode="overwrite", partition='{"region": "eu"}', partitionOverwriteMode="dynamic"
    )
    got = {(r["id"], r["region"], r["day"]) for r in t.to_arrow().to_pylist()}
    assert got == {(2, "eu", "d2"), (3, "us", "d1"), (4, "eu", None), (9, "eu", "d1")}
    with pytest.raises(Exception, match="overwrite of partition"):  # a row outside the static part
        write(
            spark.createDataFrame([(8, "us", "d1", 8)], "id long, region string, day string, qty long"),
            wh,
            "p.regions",
            mode="overwrite",
            partition='{"region": "eu"}',
            partitionOverwriteMode="dynamic",
        )
    assert {(r["id"], r["region"], r["day"]) for r in t.to_arrow().to_pylist()} == got


def test_dynamic_overwrite_of_a_table_without_partitions_replaces_it(spark: SparkSession, wh: str) -> None:
    t = _table(wh, partitioned=False)
    with session_mode(spark, "dynamic"):
        write(spark.createDataFrame([(10, "d1", 10)], SPARK_SCHEMA), wh, t.name, mode="overwrite")
    assert _rows(t) == {(10, "d1", 10)}


@pytest.mark.parametrize(
    ("mode", "options", "message"),
    [
        ("overwrite", {"partitionOverwriteMode": "sometimes"}, "must be static or dynamic"),
        ("append", {"partitionOverwriteMode": "dynamic"}, "applies to batch writes with mode"),
        ("overwrite", {"partition": '{"nope": "d1"}'}, "are not partition columns"),
        ("overwrite", {"partition": '{"day": [1]}'}, "day"),
    ],
)
def test_overwrite_modes_mere_cannot_honour_are_refused_before_writing(
    spark: SparkSession, wh: str, mode: str, options: dict[str, str], message: str
) -> None:
    t = _table(wh)
    before, version = _rows(t), t.version
    on_disk = {p for p, _, _ in t.storage.list_files(t.location)}
    with pytest.raises(Exception, match=message):
        write(spark.createDataFrame([(10, "d1", 10)], SPARK_SCHEMA), wh, t.name, mode=mode, **options)
    assert (_rows(t), t.version) == (before, version)
    assert not t.cleanup(older_than=dt.timedelta(0))  # lists files no version references: none was staged
    assert {p for p, _, _ in t.storage.list_files(t.location)} == on_disk


def test_a_write_refused_at_planning_leaves_no_table_it_would_have_made(spark: SparkSession, wh: str) -> None:
    """The table a write creates is made when Spark plans the write; a refusal after that drops it again."""
    df = spark.createDataFrame([(10, "d1", 10)], SPARK_SCHEMA)
    for options in (
        {"partition": '{"nope": "d1"}'},
        {"partition": '{"day": "d2"}', "partition_by": "day"},  # a row outside the partition named
    ):
        name = f"p.new{next(_names)}"
        with pytest.raises(Exception, match="partition"):
            write(df, wh, name, mode="overwrite", primary_key="id", buckets="2", **options)
        assert name not in mere.connect(wh).tables(), options
