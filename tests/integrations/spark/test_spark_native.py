"""``read_table``: splits with nothing to merge go to Spark's own Parquet reader, the rest through mere.

The route is only worth having if it is exactly right, so the model test of tests/test_model.py (upserts,
partial upserts, CDC deletes, deletes by predicate, overwrites and compactions on a last-wins table, a
table with merge operators and a table without key) is replayed here with Spark reads through the route
at random points and at the end, each compared with the dict model.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test
from pyspark.sql import DataFrame, SparkSession
from sparkutil import read

import mere
from mere.integrations.spark import compact, read_table, spark_filter
from test_model import LakeMachine, _plain_key, rows_of
from test_types import ALL_TYPES, values_of


def plan_of(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def routes(df: DataFrame) -> tuple[bool, bool]:
    """(reads files natively, reads through mere)."""
    plan = plan_of(df)
    return "FileScan parquet" in plan, "BatchScan mere" in plan


def arrow_rows(df: DataFrame, key: str = "id") -> list[dict[str, Any]]:
    return sorted(df.toArrow().to_pylist(), key=lambda r: r[key])


def _orders(wh: str, buckets: int = 4, properties: dict[str, str] | None = None) -> mere.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("day", pa.string()),
            ("qty", pa.int64()),
            ("note", pa.string()),
        ]
    )
    t = mere.connect(wh).create_table(
        "sales.orders",
        schema,
        primary_key=["id"],
        partition_by=["day"],
        buckets=buckets,
        properties=properties,
    )
    n = 2000
    for batch in range(3):
        t.upsert(
            pa.table(
                {
                    "id": list(range(batch * 500, batch * 500 + n)),
                    "day": [f"2026-11-{10 + i % 3}" for i in range(batch * 500, batch * 500 + n)],
                    "qty": [batch] * n,
                    "note": [f"n{batch}-{i}" for i in range(n)],
                },
                schema=schema,
            )
        )
    return t


def test_compacted_table_is_read_natively_and_later_writes_merge(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    df = read_table(spark, "sales.orders", warehouse=wh)
    assert routes(df) == (False, True)  # three files per split: everything merges in mere
    assert arrow_rows(df) == arrow_rows(read(spark, wh, "sales.orders"))

    compact(spark, "sales.orders", warehouse=wh)
    df = read_table(spark, "sales.orders", warehouse=wh)
    assert routes(df) == (True, False)
    want = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert arrow_rows(df) == want and df.count() == len(want) == 3000

    # A delete, a partial upsert and a new key after compaction: those splits merge again, in mere.
    t.delete("id = 7")
    t.upsert(pa.table({"id": [8], "day": ["2026-11-12"], "qty": [99]}))  # partial: note keeps its value
    assert t.scan(filter="id = 8").to_arrow().column("note").to_pylist() == ["n0-8"]
    t.upsert(pa.table({"id": [10_001], "day": ["2026-11-10"], "qty": [1], "note": ["new"]}))
    df = read_table(spark, "sales.orders", warehouse=wh)
    assert routes(df) == (True, True)
    want = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    got = arrow_rows(df)
    assert got == want and 7 not in {r["id"] for r in got}
    assert next(r for r in got if r["id"] == 8) == {"id": 8, "day": "2026-11-12", "qty": 99, "note": "n0-8"}

    # One snapshot: the route pins the version, later commits do not leak into this DataFrame.
    t.upsert(pa.table({"id": [20_000], "day": ["2026-11-12"], "qty": [1], "note": ["later"]}))
    assert df.count() == len(want)

    # A filter through both routes, projection and time travel.
    # (key 10001 landed in a split of day 10 beyond its compacted keys: still clean, no key in two files)
    for text, expected in (
        ("id >= 900 and id < 1500 and day = '2026-11-10' and qty >= 1", (True, False)),
        ("id in (1, 9, 10001) or note = 'x'", (True, True)),
    ):
        filtered = read_table(spark, "sales.orders", warehouse=wh, filter=text)
        assert routes(filtered) == expected, text
        want_filtered = sorted(t.scan(filter=text).to_arrow().to_pylist(), key=lambda r: r["id"])
        assert arrow_rows(filtered) == want_filtered and want_filtered
    v = t.version
    t.delete("id < 100")
    old = read_table(spark, "sales.orders", warehouse=wh, version=v, columns=["qty", "id"])
    assert old.columns == ["qty", "id"] and old.count() == len(want) + 1
    assert arrow_rows(read_table(spark, "sales.orders", warehouse=wh, native=False)) == sorted(
        t.scan().to_arrow().to_pylist(), key=lambda r: r["id"]
    )


def test_filters_without_exact_spark_form_go_through_mere(spark: SparkSession, wh: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.float64())])
    t = mere.connect(wh).create_table("a.f", schema, primary_key=["id"], buckets=2)
    t.upsert(pa.table({"id": [1, 2, 3, 4], "x": [math.nan, -0.0, 1.5, None]}, schema=schema))
    t.compact(min_files=1)
    for text, native in (("x > 1", False), ("x = 0", False), ("x is null or id = 1", True)):
        df = read_table(spark, "a.f", warehouse=wh, filter=text)
        assert routes(df) == (native, not native), text
        want = sorted(t.scan(filter=text).to_arrow().to_pylist(), key=lambda r: r["id"])
        assert repr(arrow_rows(df)) == repr(want), text  # repr: NaN equals NaN, -0.0 differs from 0.0
    assert spark_filter(mere.expr.to_expr("x > 1"), schema) is None


SPARK_TYPES = {  # every type of tests/test_types.py that Spark has a type for
    name: ALL_TYPES[name]
    for name in [
        "i8",
        "f32",
        "f64",
        "bool",
        "str",
        "lstr",
        "bin",
        "d32",
        "ts",
        "ts_tz",
        "dec",
        "list",
        "large_list",
        "struct",
        "map",
        "list_struct",
        "struct_list",
    ]
}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_native_route_returns_what_mere_returns_for_every_type(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    wh = str(tmp_path_factory.mktemp("types"))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), *SPARK_TYPES.items()])
    n = data.draw(st.integers(min_value=1, max_value=12))
    columns: dict[str, list[Any]] = {"id": list(range(n))}
    for name, kind in SPARK_TYPES.items():
        columns[name] = data.draw(st.lists(values_of(kind), min_size=n, max_size=n))
    t = mere.connect(wh).create_table("a.types", schema, primary_key=["id"], buckets=2)
    t.upsert(pa.table(columns, schema=schema))
    df = read_table(spark, "a.types", warehouse=wh)
    assert routes(df) == (True, False)
    assert repr(arrow_rows(df)) == repr(arrow_rows(read(spark, wh, "a.types")))


def test_types_spark_reads_differently_turn_the_route_off(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    for name, kind in (("u64", pa.uint64()), ("ns", pa.timestamp("ns")), ("u8", pa.uint8())):
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", kind)])
        t = cat.create_table(f"a.{name}", schema, primary_key=["id"], buckets=1)
        value = dt.datetime(2026, 1, 1) if name == "ns" else 200
        t.upsert(pa.table({"id": [1], "v": [value]}, schema=schema))
        df = read_table(spark, f"a.{name}", warehouse=wh)
        assert routes(df) == (False, True), name
        assert df.count() == 1


def test_table_without_key_is_read_natively(spark: SparkSession, wh: str) -> None:
    schema = pa.schema([("day", pa.string()), ("amount", pa.decimal128(10, 2))])
    t = mere.connect(wh).create_table("a.log", schema, partition_by=["day"])
    t.append(
        pa.table(
            {"day": ["a", "b", None], "amount": [Decimal("1.10"), None, Decimal("-0.01")]}, schema=schema
        )
    )
    t.append(pa.table({"day": ["a"], "amount": [Decimal("2.00")]}, schema=schema))
    df = read_table(spark, "a.log", warehouse=wh)
    assert routes(df) == (True, False)
    key = lambda r: (r["day"] is None, r["day"] or "", r["amount"] is None, r["amount"] or 0)  # noqa: E731
    assert sorted(df.toArrow().to_pylist(), key=key) == sorted(t.scan().to_arrow().to_pylist(), key=key)


def test_big_split_is_read_by_several_tasks(spark: SparkSession, wh: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    t = mere.connect(wh).create_table(
        "a.big", schema, primary_key=["id"], buckets=1, properties={"write.row-group-rows": "1000"}
    )
    for k in range(4):
        ids = list(range(k * 3000, k * 3000 + 20_000, 2))
        t.upsert(pa.table({"id": ids, "v": [f"{k}-{i}" for i in ids]}, schema=schema))
    t.delete("id < 50")
    df = read(spark, wh, "a.big", max_partition_bytes="4k")  # the split holds ~46 KB
    assert len(t.scan().plan()) == 1 and df.rdd.getNumPartitions() > 4
    got = arrow_rows(df)
    assert got == sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert len({r["id"] for r in got}) == len(got)


class SparkLakeMachine(LakeMachine):
    """The model test, read through ``read_table`` (native where it can be) at random points."""

    spark: SparkSession
    seen: set[tuple[bool, bool]] = set()  # routes the reads took, over all examples

    def check_spark(self) -> None:
        for t, m in self._pk_tables():
            df = read_table(self.spark, t.name, warehouse=self.dir)
            assert rows_of(df.toArrow()) == m.table(), (t.name, plan_of(df))
            self.seen.add(routes(df))
        df = read_table(self.spark, self.t_plain.name, warehouse=self.dir)
        assert sorted(df.toArrow().to_pylist(), key=_plain_key) == sorted(self.m_plain, key=_plain_key)

    @rule()
    def spark_read(self) -> None:
        self.check_spark()

    @rule()
    def compact_everything(self) -> None:
        for t, _ in self._pk_tables():
            t.compact(min_files=1)
        self._snapshot()

    def teardown(self) -> None:
        try:
            self.check_spark()
            # Every example ends compacted, so the native route is read whatever steps were drawn (it
            # depended on a compaction being drawn right before a read: a fresh CI run once drew none).
            self.compact_everything()
            self.check_spark()
        finally:
            super().teardown()


def test_model_through_the_native_route(spark: SparkSession) -> None:
    SparkLakeMachine.spark = spark
    run_state_machine_as_test(
        SparkLakeMachine,
        settings=settings(
            max_examples=6, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    assert any(native for native, _ in SparkLakeMachine.seen)  # the native route did run


def test_compaction_into_several_files_per_split_is_still_native(
    spark: SparkSession, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mere.table import compaction

    monkeypatch.setattr(compaction, "CHUNK_ROWS", 200)  # a ~500-row split compacts into 3 files...
    t = _orders(wh, buckets=2, properties={"write.row-group-rows": "50", "read.window-bytes": "2000"})
    t.compact(min_files=1)  # small row groups and windows: the merged split arrives in many batches
    assert all(len(s.files) > 1 for s in t.scan().plan())
    df = read_table(spark, "sales.orders", warehouse=wh)
    assert routes(df) == (True, False)
    assert arrow_rows(df) == sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize(
    "options",
    [
        {"max_partition_bytes": "0"},
        {"max_partition_bytes": "12q"},
        {"max_partition_bytes": "-5m"},
        {"open_cost_bytes": "lots"},
        {"min_partitions": "0"},
        {"min_partitions": "two"},
        {"merged_only": "maybe"},
    ],
)
def test_bad_sizing_options_are_refused(options: dict[str, str]) -> None:
    from mere.integrations.spark import PartitionSizing
    from mere.integrations.spark.options import bool_option

    with pytest.raises(mere.errors.InvalidInput):
        PartitionSizing.from_options(options)
        bool_option("merged_only", options.get("merged_only"))


def test_sizes_read_like_spark_settings() -> None:
    from mere.integrations.spark import PartitionSizing

    sizing = PartitionSizing.from_options(
        {"max_partition_bytes": "128MB", "open_cost_bytes": "0", "min_partitions": "3"}
    )
    assert sizing == PartitionSizing(128 << 20, 0, 3)
    assert PartitionSizing.from_options({"max_partition_bytes": "134217728b"}).max_bytes == 128 << 20


def test_read_table_bad_arguments_create_nothing(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    version = t.version
    for call in (
        lambda: read_table(spark, "sales.nope", warehouse=wh),
        lambda: read_table(spark, "sales.orders", warehouse=wh, columns=["nope"]),
        lambda: read_table(spark, "sales.orders", warehouse=wh, filter="nope = 1"),
        lambda: read_table(spark, "sales.orders", warehouse=wh, version=10_000),
        lambda: read_table(spark, "sales.orders", warehouse=wh, options={"verison": "1"}),
    ):
        with pytest.raises(mere.errors.MereError):
            call()
    assert t.refresh().version == version and mere.connect(wh).tables() == ["sales.orders"]


def test_read_table_at_a_catalog_snapshot_sees_one_transaction_boundary(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    for name in ("sales.orders", "sales.lines"):
        cat.create_table(name, schema, primary_key="id", buckets=2)
    with cat.transaction() as tx:
        for name in ("sales.orders", "sales.lines"):
            tx.table(name).upsert(pa.table({"id": [1, 2], "v": [1, 2]}, schema=schema))
    snap = cat.snapshot()
    with cat.transaction() as tx:
        for name in ("sales.orders", "sales.lines"):
            tx.table(name).upsert(pa.table({"id": [3], "v": [3]}, schema=schema))
    for name in ("sales.orders", "sales.lines"):
        pinned = read_table(spark, name, warehouse=wh, snapshot=snap)
        assert [r["id"] for r in arrow_rows(pinned)] == [1, 2]
        assert read_table(spark, name, warehouse=wh).count() == 3
    with pytest.raises(mere.errors.InvalidInput, match="not both"):
        read_table(spark, "sales.orders", warehouse=wh, snapshot=snap, version=1)
