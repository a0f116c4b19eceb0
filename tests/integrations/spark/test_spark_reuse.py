"""Reused DataFrames and temp views with different filters: Spark <= 4.3 reuses one query's pushed filters.

``test_spark_reuses_pushed_filters`` reproduces the Spark behaviour with a tiny data source that prunes on
pushed filters. mere's default reader takes no filters from Spark (see :mod:`mere.integrations.spark`), so
the same sequence of queries over a mere table is exact, with filter pushdown on or off.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    GreaterThan,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    Not,
    StringStartsWith,
)
from pyspark.sql.types import StructType
from sparkutil import read

import mere
from mere.integrations.spark import SCAN_SCOPED_READS, MerePushdownReader, TableRef, spark_schema

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"

# Spark workers cannot import this test module: ship the tiny data source below by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _PruningReader(DataSourceReader):
    def __init__(self) -> None:
        self.keys: list[int] = []

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("id",):
                self.keys.append(f.value)
            else:
                yield f

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        for i in range(10):
            if not self.keys or i in self.keys:
                yield (i,)


class _PruningSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mere_test_pruning"

    def schema(self) -> str:
        return "id long"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _PruningReader()


@pytest.fixture
def pushdown_on(spark: SparkSession) -> Iterator[None]:
    spark.conf.set(PUSHDOWN, "true")
    try:
        yield
    finally:
        spark.conf.unset(PUSHDOWN)


def test_spark_reuses_pushed_filters(spark: SparkSession, pushdown_on: None) -> None:
    spark.dataSource.register(_PruningSource)
    df = spark.read.format("mere_test_pruning").load()
    assert df.filter("id = 3").count() == 1
    unfiltered = df.count()  # plans no pushdown: Spark <= 4.3 runs the reader planned for "id = 3"
    assert unfiltered == (10 if SCAN_SCOPED_READS else 1)


def _orders(wh: str) -> mere.Table:
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
    t = mere.connect(wh).create_table(
        "sales.orders", schema, primary_key=["id"], partition_by=["day"], buckets=4
    )
    t.upsert(pa.table({"id": list(range(100)), "day": ["d1"] * 50 + ["d2"] * 50, "qty": list(range(100))}))
    t.upsert(pa.table({"id": [1, 60], "day": ["d1", "d2"], "qty": [1000, 1000]}))  # newer versions
    t.delete("id = 2")
    return t


QUERIES = [  # (Spark filter or None, the same filter for mere or None)
    ("id = 1", "id = 1"),
    (None, None),
    ("day = 'd2'", "day = 'd2'"),
    (None, None),
    ("id IN (1, 2, 60)", "id in (1, 2, 60)"),
    ("qty > 500", "qty > 500"),
    ("id < 10 AND qty < 500", "id < 10 and qty < 500"),
    (None, None),
]


@pytest.mark.parametrize("pushdown", [True, False], ids=["pushdown-conf-on", "pushdown-conf-off"])
def test_reused_dataframe_and_view_stay_exact(spark: SparkSession, wh: str, pushdown: bool) -> None:
    t = _orders(wh)
    expected = {q: sorted(t.scan(filter=m).to_arrow().column("id").to_pylist()) for q, m in QUERIES}
    spark.conf.set(PUSHDOWN, str(pushdown).lower())
    try:
        df = read(spark, wh, "sales.orders")
        view = f"orders_{int(pushdown)}"
        df.createOrReplaceTempView(view)
        for q, _ in QUERIES:
            via_df = df if q is None else df.filter(q)
            got = sorted(r.id for r in via_df.select("id").collect())
            assert got == expected[q], f"DataFrame query {q!r}"
            sql = f"SELECT id FROM {view}" + ("" if q is None else f" WHERE {q}")
            assert sorted(r.id for r in spark.sql(sql).collect()) == expected[q], f"view query {q!r}"
        spark.catalog.dropTempView(view)
    finally:
        spark.conf.unset(PUSHDOWN)


def test_pushdown_option_refused_where_spark_reuses_filters(spark: SparkSession, wh: str) -> None:
    _orders(wh)
    if SCAN_SCOPED_READS:
        pytest.skip("this Spark scopes planned reads to one scan")
    with pytest.raises(Exception, match="refused"):
        read(spark, wh, "sales.orders", pushdown="true").count()


def test_pushdown_reader_takes_key_and_partition_filters_only(wh: str) -> None:
    """The pushFilters logic (used where Spark scopes reads to a scan), driven directly without Spark."""
    t = _orders(wh)
    ref = TableRef("sales.orders", wh)
    schema = spark_schema(t.schema)
    reader = MerePushdownReader(ref, {}, schema)
    assert len(reader.tasks) == 8  # splits; small ones share a Spark partition
    key_eq, key_in, part = EqualTo(("id",), 60), In(("id",), (1, 2, 60)), Not(EqualTo(("day",), "d1"))
    value, like, notnull = GreaterThan(("qty",), 5), StringStartsWith(("day",), "d"), IsNotNull(("id",))
    rest = list(reader.pushFilters([key_eq, value, key_in, like, part, notnull, LessThan(("id",), 99)]))
    assert rest == [value, like]  # non-key filters stay with Spark, after the merge
    assert len(reader.tasks) == 1  # key 60 -> one bucket of partition d2
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    got = pa.Table.from_batches(batches)
    assert got.to_pylist() == [{"id": 60, "day": "d2", "qty": 1000}]
    assert got.schema.field("id").type == pa.int64() and not got.schema.field("id").nullable

    reader = MerePushdownReader(ref, {}, schema)
    assert list(reader.pushFilters([value])) == [value]
    full = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])
    assert full.num_rows == 99 and pc.sum(full["qty"]).as_py() == t.scan().to_arrow()["qty"].to_numpy().sum()
