"""Adversarial probes of Delta / Iceberg idioms a Spark user types against mere tables (trial 54).

Each idiom either leaves the rows an independent oracle (DuckDB, or a dict model of Spark's semantics)
says, or is refused before anything is written (the mere table's version and rows as they were). Idioms
pinned by earlier trials (INSERT column lists, DataFrameWriterV2 on an existing table, time-travel query
shapes, ALTER TABLE column changes, MERGE clause order) are left out. One Spark session (the conftest's).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")

from pyspark.sql import SparkSession

import mere
from mere.errors import FilterError, MereError, MergeConflict, NoSuchVersion
from mere.integrations.spark import sql

CONF = "spark.sql.sources.partitionOverwriteMode"
COLS = "id BIGINT, day STRING, v BIGINT"
SEED = [(1, "d1", 1), (2, "d2", 2), (3, "d1", 3)]


def mere_rows(wh: str, name: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in mere.connect(wh).table(name).to_arrow().to_pylist()), key=repr)


def snapshot(wh: str, name: str) -> tuple[int, list[tuple[Any, ...]]]:
    return mere.connect(wh).table(name).version, mere_rows(wh, name)


def spark_rows(spark: SparkSession, query: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in spark.sql(query).collect()), key=repr)


def values(rows: list[tuple[Any, ...]]) -> str:
    return ", ".join(f"({i}, '{d}', {v})" for i, d, v in rows)


def catalog_table(spark: SparkSession, wh: str, name: str, rows: list[tuple[Any, ...]] = SEED) -> None:
    spark.sql(
        f"CREATE TABLE {name} ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.{name}', "
        "primary_key 'id', partition_by 'day', buckets '2')"
    )
    spark.sql(f"INSERT INTO {name} VALUES {values(rows)}")


@contextlib.contextmanager
def session_mode(spark: SparkSession, mode: str | None) -> Iterator[None]:
    if mode is None:
        spark.conf.unset(CONF)
    else:
        spark.conf.set(CONF, mode)
    try:
        yield
    finally:
        spark.conf.unset(CONF)


def overwritten(
    before: list[tuple[Any, ...]], new: list[tuple[Any, ...]], dynamic: bool
) -> list[tuple[Any, ...]]:
    """Spark's overwrite semantics on a table partitioned by day (ids are unique across the rows here)."""
    if not dynamic:
        return sorted(new, key=repr)
    days = {d for _, d, _ in new}
    return sorted([r for r in before if r[1] not in days] + new, key=repr)


# --- CACHE TABLE: a cached catalog table must not hide writes made through the session. ---


def test_a_cached_table_sees_spark_sql_inserts(spark: SparkSession, wh: str, clean: None) -> None:
    catalog_table(spark, wh, "t54_c")
    spark.sql("CACHE TABLE t54_c")
    try:
        assert spark_rows(spark, "SELECT * FROM t54_c") == sorted(SEED)
        spark.sql("INSERT INTO t54_c VALUES (4, 'd2', 4), (1, 'd1', 10)")
        want = sorted([(1, "d1", 10), (2, "d2", 2), (3, "d1", 3), (4, "d2", 4)])
        assert mere_rows(wh, "ns.t54_c") == want
        assert spark_rows(spark, "SELECT * FROM t54_c") == want
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS t54_c")


def test_a_cached_table_sees_row_level_statements_run_by_sql(
    spark: SparkSession, wh: str, clean: None
) -> None:
    catalog_table(spark, wh, "t54_cu")
    spark.sql("CACHE TABLE t54_cu")
    try:
        assert spark_rows(spark, "SELECT * FROM t54_cu") == sorted(SEED)
        sql(spark, "UPDATE t54_cu SET v = v + 100 WHERE id = 1").collect()
        want = sorted([(1, "d1", 101), *SEED[1:]])
        assert mere_rows(wh, "ns.t54_cu") == want
        assert spark_rows(spark, "SELECT * FROM t54_cu") == want  # found: still SEED
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS t54_cu")


def test_a_cached_table_sees_a_save_as_table_append(spark: SparkSession, wh: str, clean: None) -> None:
    catalog_table(spark, wh, "t54_cs")
    spark.sql("CACHE TABLE t54_cs")
    try:
        assert spark_rows(spark, "SELECT * FROM t54_cs") == sorted(SEED)
        df = spark.createDataFrame([(5, "d1", 5)], "id long, day string, v long")
        df.write.format("mere").mode("append").saveAsTable("t54_cs")
        want = sorted([*SEED, (5, "d1", 5)])
        assert mere_rows(wh, "ns.t54_cs") == want
        assert spark_rows(spark, "SELECT * FROM t54_cs") == want  # found: still SEED
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS t54_cs")


# --- INSERT OVERWRITE / saveAsTable overwrite under both session modes, against Spark's semantics. ---


def test_overwrite_statements_under_both_session_modes(spark: SparkSession, wh: str, clean: None) -> None:
    catalog_table(spark, wh, "t54_o")
    new = [(10, "d1", 10)]
    cases = [
        # (session mode, statement, dynamic?); None for dynamic means: refused, nothing written.
        ("static", "INSERT OVERWRITE t54_o VALUES {v}", False),
        ("static", "INSERT OVERWRITE t54_o WITH ('partitionOverwriteMode' = 'dynamic') VALUES {v}", True),
        (
            None,
            "INSERT OVERWRITE t54_o WITH ('partitionOverwriteMode' = 'DYNAMIC') SELECT * FROM VALUES {v}",
            True,
        ),
        ("dynamic", "INSERT OVERWRITE t54_o VALUES {v}", None),
        ("dynamic", "INSERT OVERWRITE t54_o WITH ('partitionOverwriteMode' = 'static') VALUES {v}", None),
        ("static", "INSERT OVERWRITE t54_o PARTITION (day = 'd1') SELECT 10L, 10L", None),
    ]
    for mode, text, dynamic in cases:
        before = snapshot(wh, "ns.t54_o")
        with session_mode(spark, mode):
            if dynamic is None:
                with pytest.raises(Exception):  # noqa: B017 - Spark's own refusal
                    spark.sql(text.format(v=values(new))).collect()
                assert snapshot(wh, "ns.t54_o") == before, (mode, text)
            else:
                spark.sql(text.format(v=values(new))).collect()
                assert mere_rows(wh, "ns.t54_o") == overwritten(before[1], new, dynamic), (mode, text)
                spark.sql("INSERT OVERWRITE t54_o VALUES " + values(SEED))
    # saveAsTable(mode="overwrite") of the table as it is: the session's mode decides, as the docs say.
    for mode, dynamic in [("dynamic", True), ("static", False)]:
        spark.sql("INSERT OVERWRITE t54_o VALUES " + values(SEED))
        before = mere_rows(wh, "ns.t54_o")
        with session_mode(spark, mode):
            df = spark.createDataFrame([(20, "d2", 20)], "id long, day string, v long")
            df.write.format("mere").mode("overwrite").saveAsTable("t54_o")
        assert mere_rows(wh, "ns.t54_o") == overwritten(before, [(20, "d2", 20)], dynamic), mode
        assert spark_rows(spark, "SELECT * FROM t54_o") == mere_rows(wh, "ns.t54_o")


# --- DataFrameWriterV2 creating a new table, and DDL a Delta user reaches for. ---


def test_dataframe_writer_v2_creating_a_table_is_refused_leaving_nothing(
    spark: SparkSession, wh: str, clean: None
) -> None:
    df = spark.createDataFrame([(1, "a", 1)], "id long, day string, v long")
    calls = {
        "create": lambda: (
            df.writeTo("t54_w1")
            .using("mere")
            .tableProperty("warehouse", wh)
            .tableProperty("primary_key", "id")
            .create()
        ),
        "createOrReplace": lambda: (
            df.writeTo("t54_w2").using("mere").option("warehouse", wh).createOrReplace()
        ),
        "partitionedBy": lambda: (
            df.writeTo("t54_w3")
            .using("mere")
            .tableProperty("warehouse", wh)
            .tableProperty("primary_key", "id")
            .partitionedBy(df.day)
            .create()
        ),
    }
    for name, call in calls.items():
        with pytest.raises(Exception, match="names no mere table"):
            call()
        assert not spark.catalog.tableExists(f"t54_w{list(calls).index(name) + 1}"), name
    assert mere.connect(wh).tables() == []


def test_delta_ddl_and_utility_statements_are_refused_or_harmless(
    spark: SparkSession, wh: str, clean: None
) -> None:
    catalog_table(spark, wh, "t54_d")
    before = snapshot(wh, "ns.t54_d")
    for text in ["DESCRIBE DETAIL t54_d", "TRUNCATE TABLE t54_d", "DESCRIBE HISTORY t54_d"]:
        with pytest.raises(Exception):  # noqa: B017 - Spark's own refusal (a Delta-only statement)
            spark.sql(text).collect()
        assert snapshot(wh, "ns.t54_d") == before, text
    for text in ["DESCRIBE DETAIL t54_d", "TRUNCATE TABLE t54_d", "OPTIMIZE t54_d", "VACUUM t54_d"]:
        with pytest.raises(MereError):
            sql(spark, text).collect()
        assert snapshot(wh, "ns.t54_d") == before, text
    with pytest.raises(NoSuchVersion):
        sql(spark, "SELECT * FROM t54_d TIMESTAMP AS OF '2000-01-01 00:00:00'").collect()
    # A property of the user's own changes Spark's entry only; the table and its rows are as they were.
    spark.sql("ALTER TABLE t54_d SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    assert snapshot(wh, "ns.t54_d") == before
    spark.sql("INSERT INTO t54_d VALUES (1, 'd1', 100)")  # still an upsert, not an append-only table
    assert mere_rows(wh, "ns.t54_d") == sorted([(1, "d1", 100), *SEED[1:]])
    history = sql(spark, "DESCRIBE HISTORY t54_d").collect()
    assert [r.version for r in history] == list(range(before[0] + 1, -1, -1))


# --- MERGE whose source holds a key twice: as DuckDB, or refused with nothing written. ---

DUP_MERGES = [
    # A new key inserted twice.
    "MERGE INTO {t} t USING src s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, day, v) VALUES (s.id, s.day, s.v)",
    # Two source rows pair with target 1, but only one passes the only clause's condition.
    "MERGE INTO {t} t USING src s ON t.id = s.id WHEN MATCHED AND s.v > 0 THEN UPDATE SET v = s.v",
    # Both act on target 1 through different clauses.
    "MERGE INTO {t} t USING src s ON t.id = s.id WHEN MATCHED AND s.v < 0 THEN DELETE "
    "WHEN MATCHED AND s.v > 0 THEN UPDATE SET v = s.v",
    # Neither acts (no clause holds): nothing changes.
    "MERGE INTO {t} t USING src s ON t.id = s.id WHEN MATCHED AND s.v > 1000 THEN DELETE",
]
DUP_SOURCES = {
    0: [(7, "d1", 1), (7, "d2", 2), (8, "d1", 8)],
    1: [(1, "d1", 10), (1, "d1", -1), (2, "d2", 20)],
    2: [(1, "d1", 10), (1, "d1", -1)],
    3: [(1, "d1", 10), (1, "d1", -1)],
}


def duck_merge(statement: str, src: list[tuple[Any, ...]]) -> list[tuple[Any, ...]] | None:
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE m (id BIGINT PRIMARY KEY, day VARCHAR, v BIGINT)")
    con.execute("INSERT INTO m VALUES " + values(SEED))
    con.execute("CREATE TABLE src (id BIGINT, day VARCHAR, v BIGINT)")
    con.execute("INSERT INTO src VALUES " + values(src))
    try:
        con.execute(statement.format(t="m"))
    except duckdb.Error:
        return None
    return sorted(con.execute("SELECT * FROM m").fetchall(), key=repr)


def test_merges_of_sources_with_duplicate_keys_agree_with_duckdb(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    t = cat.create_table(
        "ns.dup",
        pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.int64())]),
        primary_key="id",
        partition_by="day",
        buckets=2,
    )
    t.upsert(pa.table({"id": [r[0] for r in SEED], "day": [r[1] for r in SEED], "v": [r[2] for r in SEED]}))
    base = t.refresh().version
    for i, text in enumerate(DUP_MERGES):
        want = duck_merge(text, DUP_SOURCES[i])
        spark.createDataFrame(DUP_SOURCES[i], "id long, day string, v long").createOrReplaceTempView("src")
        before = snapshot(wh, "ns.dup")
        if want is None:
            with pytest.raises(MergeConflict):
                sql(spark, text.format(t="ns.dup"), warehouse=wh).collect()
            assert snapshot(wh, "ns.dup") == before, text
        else:
            sql(spark, text.format(t="ns.dup"), warehouse=wh).collect()
            assert mere_rows(wh, "ns.dup") == want, text
        cat.table("ns.dup").rollback(base)


# --- Reads filtered on NULL, NaN, infinities and zoned timestamps: the filter option against DuckDB. ---

T0 = dt.datetime(2026, 3, 29, 0, 30, tzinfo=dt.UTC)  # the night Europe's clocks go forward
F_ROWS = [
    (1, 1.0, T0),
    (2, float("nan"), T0 + dt.timedelta(hours=1)),
    (3, None, T0 + dt.timedelta(hours=2)),
    (4, -0.0, T0 + dt.timedelta(hours=3)),
    (5, float("inf"), T0 + dt.timedelta(hours=4)),
    (6, 2.5, None),
    (7, float("-inf"), T0 - dt.timedelta(days=200)),
]
FILTERS = [
    "f > 2",
    "NOT (f < 2)",
    "f = 0",
    "f IS NOT DISTINCT FROM NULL",
    "f IN (1, DOUBLE 'NaN')",
    "f BETWEEN -1 AND 3",
    "ts < TIMESTAMP '2026-03-29 03:30:00+02'",
    "ts >= TIMESTAMP '2026-03-29 01:30:00+01' AND ts < TIMESTAMP '2026-03-29 05:00:00+00'",
    "ts IS NULL OR f > 2",
    "hour(ts) = 2",
]


def test_filters_on_nan_null_and_zoned_timestamps_agree_with_duckdb(spark: SparkSession, wh: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))])
    t = mere.connect(wh).create_table("ns.f", schema, primary_key="id", buckets=2)
    cols = list(zip(*F_ROWS, strict=True))
    data = pa.table({n: list(c) for n, c in zip(schema.names, cols, strict=True)}, schema=schema)
    t.upsert(data)
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.register("f_rows", data)

    def reader() -> Any:  # a fresh one each time: DataFrameReader.option mutates the reader
        return spark.read.format("mere").option("warehouse", wh)

    for text in FILTERS:
        # DuckDB's TIMESTAMP literal drops a written offset; its TIMESTAMPTZ reads the instant, as mere does.
        duck = text.replace("TIMESTAMP '", "TIMESTAMPTZ '")
        want = sorted(r[0] for r in con.execute(f"SELECT id FROM f_rows WHERE {duck}").fetchall())
        got = sorted(r.id for r in reader().option("filter", text).load("ns.f").collect())
        assert got == want, text
    # A naive literal against a zoned column is refused (typed), not read in some zone.
    with pytest.raises(FilterError):
        t.scan(filter="ts >= TIMESTAMP '2026-03-29 01:30:00'").to_arrow()
    with pytest.raises(Exception, match="naive timestamp"):
        reader().option("filter", "ts >= TIMESTAMP '2026-03-29 01:30:00'").load("ns.f").collect()
    # The instants do not move with Spark's session zone; Spark's own filter then reads its literal there.
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
        df = reader().load("ns.f")
        micros = {r.id: r.u for r in df.selectExpr("id", "unix_micros(ts) AS u").collect()}
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        assert micros == {
            i: None if ts is None else (ts - epoch) // dt.timedelta(microseconds=1) for i, _, ts in F_ROWS
        }
        # 2026-03-28 19:30 in Los Angeles (PDT, -07) is 02:30 UTC.
        la = sorted(r.id for r in df.where("ts < TIMESTAMP '2026-03-28 19:30:00'").collect())
        assert la == [1, 2, 7]
        assert sorted(r.id for r in df.where("f > 2").collect()) == [2, 5, 6]  # Spark: NaN above all too
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
