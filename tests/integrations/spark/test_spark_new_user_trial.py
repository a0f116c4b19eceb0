"""Adversarial probes of the Spark data source as a CDC pipeline user sees it (trial 46).

Late, duplicated and out-of-order change events written through ``df.write.format("mere")`` and Spark SQL,
read back through Spark (``count()``, ``where``), mere's own scan and an independent oracle (a dict model
and DuckDB over the model's rows). Refusals must be typed and change nothing. Real local PySpark, one
session for the module.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")

import duckdb
from pyspark.sql import DataFrame, SparkSession

import mere
from mere.integrations.spark import sql

EVENTS = "id long, day string, v long, lsn long, op string"


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


def write(df: DataFrame, wh: str, name: str, mode: str = "append", **options: Any) -> None:
    w = df.write.format("mere").mode(mode).option("warehouse", wh)
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save(name)


def read(spark: SparkSession, wh: str, name: str, **options: Any) -> DataFrame:
    r = spark.read.format("mere").option("warehouse", wh)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load(name)


def mere_rows(wh: str, name: str, **scan: Any) -> list[tuple[Any, ...]]:
    t = mere.connect(wh).table(name)
    return sorted(tuple(r.values()) for r in t.scan(**scan).to_arrow().to_pylist())


def state(wh: str, name: str) -> tuple[int, list[tuple[Any, ...]], list[str]]:
    """What a refused write must leave as it was: the version, the rows and the data files."""
    files = sorted(str(p.relative_to(wh)) for p in Path(wh).rglob("*.parquet"))
    return mere.connect(wh).table(name).version, mere_rows(wh, name), files


def model(events: list[tuple[Any, ...]]) -> dict[int, tuple[str, int]]:
    """The oracle: per key, the event of highest lsn (ties: the later event); deletes leave no row."""
    best: dict[int, tuple[Any, ...]] = {}
    for e in events:
        if e[0] not in best or e[3] >= best[e[0]][3]:
            best[e[0]] = e
    return {k: (e[1], e[2]) for k, e in best.items() if e[4] != "D"}


CDC_EVENTS = [
    (1, "d1", 10, 1, "I"),
    (1, "d2", 20, 3, "U"),  # moves key 1 to d2
    (1, "d1", 15, 2, "U"),  # late, older, in the old partition: must not resurface
    (2, "d1", None, 5, "D"),  # a delete of a key never written ...
    (2, "d1", 7, 4, "I"),  # ... whose older insert arrives after it: stays deleted
    (3, "d2", 1, 1, "I"),
    (3, "d2", 1, 1, "I"),  # duplicate delivery
    (3, "d2", 2, 2, "U"),
    (4, "d1", 4, 1, "I"),
    (4, "d1", None, 2, "D"),
    (4, "d2", 44, 3, "I"),  # re-created in another partition after its delete
    (5, "d1", 5, 9, "I"),
    (5, "d2", None, 8, "D"),  # a stale delete carrying another partition value
]


def test_shuffled_replayed_cdc_batches_agree_with_the_oracle_everywhere(spark: SparkSession, wh: str) -> None:
    expected = model(CDC_EVENTS)
    events = CDC_EVENTS[:]
    random.Random(46).shuffle(events)
    layout = {
        "primary_key": "id",
        "partition_by": "day",
        "cdc_column": "op",
        "sequence_by": "lsn",
        "buckets": 2,
    }
    for i in range(0, len(events), 3):
        batch = spark.createDataFrame(events[i : i + 3], EVENTS).repartition(2)
        write(batch, wh, "cdc.ev", **(layout if i == 0 else {}))
    write(spark.createDataFrame(events, EVENTS).repartition(3), wh, "cdc.ev")  # a whole replay
    want = sorted((k, d, v) for k, (d, v) in expected.items())
    assert mere_rows(wh, "cdc.ev", columns=["id", "day", "v"]) == want
    df = read(spark, wh, "cdc.ev")
    assert df.count() == len(want)
    assert sorted(tuple(r) for r in df.select("id", "day", "v").collect()) == want
    con = duckdb.connect()
    oracle = pa.table({"id": [r[0] for r in want], "day": [r[1] for r in want], "v": [r[2] for r in want]})
    con.register("oracle", oracle)
    for cond in ["v = 15", "v = 10", "v = 7", "v IS NULL", "day = 'd1'", "v >= 20", "day = 'd2' AND v < 10"]:
        truth = sorted(r[0] for r in con.sql(f"SELECT id FROM oracle WHERE {cond}").fetchall())
        assert sorted(r.id for r in read(spark, wh, "cdc.ev").where(cond).collect()) == truth, cond
        assert read(spark, wh, "cdc.ev").where(cond).count() == len(truth), cond
        assert sorted(r.id for r in read(spark, wh, "cdc.ev", filter=cond).collect()) == truth, cond
        assert [r[0] for r in mere_rows(wh, "cdc.ev", columns=["id"], filter=cond)] == truth, cond
    # After compaction, late events below each key's winner (deletes included) still change nothing.
    mere.connect(wh).table("cdc.ev").compact()
    late = [(2, "d2", 99, 3, "U"), (4, "d1", 0, 2, "U"), (1, "d1", 0, 2, "U"), (5, "d2", 0, 8, "U")]
    write(spark.createDataFrame(late, EVENTS), wh, "cdc.ev")
    assert mere_rows(wh, "cdc.ev", columns=["id", "day", "v"]) == want
    assert read(spark, wh, "cdc.ev").count() == len(want)


def test_changes_of_one_key_apply_in_order_across_task_flushes(spark: SparkSession, wh: str) -> None:
    """Without sequence_by, rows of one Spark partition apply in order, even when a task flushes per row."""
    events = [(1, 1, "I"), (1, 2, "U"), (1, None, "D"), (1, 4, "I"), (2, 1, "I"), (2, None, "D")]
    events += [(3, 3, "I"), (3, 33, "U"), (3, None, "D")]
    for flush in (1, 2, 100):
        name = f"flush.t{flush}"
        df = spark.createDataFrame(events, "id long, v long, op string").coalesce(1)
        write(df, wh, name, primary_key="id", cdc_column="op", buckets=2, flush_rows=flush)
        assert mere_rows(wh, name) == [(1, 4)], flush
        assert read(spark, wh, name).count() == 1, flush
        summed = f"flush.s{flush}"
        write(df, wh, summed, primary_key="id", cdc_column="op", buckets=2, flush_rows=flush,
              merge_operators='{"v": "sum"}')  # fmt: skip
        assert mere_rows(wh, summed) == [(1, 4)], flush  # the deletes reset the sums, in order


def test_save_modes_and_options_mere_cannot_honour_change_nothing(spark: SparkSession, wh: str) -> None:
    seed = spark.createDataFrame([(1, "d1", 1, 1, "I"), (2, "d2", 2, 1, "I")], EVENTS)
    write(seed, wh, "opt.t", primary_key="id", partition_by="day", cdc_column="op", buckets=2)
    before = state(wh, "opt.t")
    row = spark.createDataFrame([(3, "d1", 3, 1, "I")], EVENTS)
    for mode in ("ignore", "errorifexists"):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            write(row, wh, "opt.t", mode)
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            write(row, wh, "opt.missing", mode, primary_key="id")
    refused: list[tuple[str, dict[str, str], str]] = [
        ("append", {"buckets": "x"}, "InvalidInput"),
        ("append", {"buckets": "3"}, "TableExists"),  # another layout
        ("append", {"operation": "upsertt"}, "InvalidInput"),
        ("append", {"flush_rows": "0"}, "InvalidInput"),
        ("append", {"partition": '{"day": "d1"}'}, "InvalidInput"),
        ("overwrite", {"partitionOverwriteMode": "sideways"}, "InvalidInput"),
        ("overwrite", {"partition": "not json"}, "InvalidInput"),
        ("overwrite", {"partition": '{"nope": "x"}'}, "InvalidInput"),
        ("overwrite", {"partition": '{"day": "d2"}'}, "InvalidInput"),  # the row is in d1
        ("overwrite", {"operation": "delete"}, "InvalidInput"),
    ]
    for mode, options, error in refused:
        with pytest.raises(Exception, match=error):
            write(row, wh, "opt.t", mode, **options)
        assert state(wh, "opt.t") == before, (mode, options)
    bad_rows: list[tuple[list[tuple[Any, ...]], str, str]] = [
        ([(4, "d1", "x", 1, "I")], "id long, day string, v string, lsn long, op string", "SchemaMismatch"),
        ([(4, "d1", 1.5, 1, "I")], "id long, day string, v double, lsn long, op string", "SchemaMismatch"),
        ([(None, "d1", 1, 1, "I")], EVENTS, "mere.errors"),
        ([(4, "d1", 4, 1, "X")], EVENTS, "unknown operations"),
        ([(4, "d1", 4, 1, None)], EVENTS, "holds nulls"),
        ([(4, "d1", 4, 1, "I", 9)], EVENTS + ", extra long", "SchemaMismatch"),
        ([(4, "d1", 4, 1, "I")], "ID long, day string, v long, lsn long, op string", "SchemaMismatch"),
    ]
    for data, schema, error in bad_rows:
        with pytest.raises(Exception, match=error):
            write(spark.createDataFrame(data, schema), wh, "opt.t")
        assert state(wh, "opt.t") == before, schema
    assert read(spark, wh, "opt.t").count() == 2


def test_spark_sql_inserts_of_late_events_follow_the_sequence(spark: SparkSession, wh: str) -> None:
    spark.sql(
        f"CREATE TABLE trial46_ev (id BIGINT, day STRING, v BIGINT, lsn BIGINT) USING mere OPTIONS "
        f"(warehouse '{wh}', table 'sq.ev', primary_key 'id', sequence_by 'lsn') PARTITIONED BY (day) "
        "TBLPROPERTIES ('buckets' = '2')"
    )
    try:
        spark.sql("INSERT INTO trial46_ev VALUES (1, 'd1', 10, 5), (1, 'd2', 5, 3), (2, 'd1', 1, 1)")
        spark.sql(
            "INSERT INTO trial46_ev VALUES (1, 'd2', 99, 4), (2, 'd2', 2, 2)"
        )  # late for 1, newer for 2
        spark.sql("INSERT INTO trial46_ev (v, id, lsn, day) VALUES (7, 3, 1, 'd1')")  # a column list
        want = [(1, "d1", 10, 5), (2, "d2", 2, 2), (3, "d1", 7, 1)]
        assert mere_rows(wh, "sq.ev") == want
        assert spark.sql("SELECT count(*) AS n FROM trial46_ev").collect()[0].n == 3
        assert spark.sql("SELECT id FROM trial46_ev WHERE v = 99 OR v = 5 OR v = 1").collect() == []
        assert sorted(r.id for r in spark.sql("SELECT id FROM trial46_ev WHERE day = 'd1'").collect()) == [
            1,
            3,
        ]
        version = mere.connect(wh).table("sq.ev").version
        with pytest.raises(Exception, match="InvalidInput"):
            spark.sql("INSERT INTO trial46_ev VALUES (4, 'd1', 1, NULL)")
        with pytest.raises(Exception, match="unknown option"):
            spark.sql("INSERT INTO trial46_ev WITH ('operaton' = 'delete') VALUES (1, 'd1', 10, 6)")
        assert mere.connect(wh).table("sq.ev").version == version
        assert mere_rows(wh, "sq.ev") == want
    finally:
        spark.sql("DROP TABLE IF EXISTS trial46_ev")


# --- Found by the trial, fixed: Spark SQL's `*` by name, yes/no write options read whether used or not. ---


def test_spark_sql_merge_star_takes_the_source_columns_by_name(spark: SparkSession, wh: str) -> None:
    """Spark SQL resolves ``INSERT *`` / ``UPDATE SET *`` by name: a source of the same columns in another
    order (and of the same types) must not land in the wrong columns."""
    t = mere.connect(wh).create_table(
        "m.t",
        pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64())]),
        primary_key="id",
        buckets=2,
    )
    t.upsert(pa.table({"id": [1], "a": [10], "b": [100]}))
    spark.createDataFrame([(1, 111, 11, "x"), (2, 200, 20, "y")], "id long, b long, A long, extra string")\
        .createOrReplaceTempView("trial46_src")  # fmt: skip
    try:
        text = (
            "MERGE INTO m.t t USING trial46_src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        metrics = sql(spark, text, warehouse=wh).collect()[0]
        assert (metrics.updated, metrics.inserted) == (1, 1)
        # Each table column from the source column of its name, without case; `extra` is not read.
        assert mere_rows(wh, "m.t") == [(1, 11, 111), (2, 20, 200)]
    finally:
        spark.catalog.dropTempView("trial46_src")


def test_spark_sql_merge_star_refuses_a_source_lacking_a_column(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table(
        "m.u", pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": [1], "a": [10], "b": [100]}))
    before = state(wh, "m.u")
    spark.createDataFrame([(1, 5), (2, 6)], "id long, a long").createOrReplaceTempView("trial46_narrow")
    try:
        for clause in ("WHEN MATCHED THEN UPDATE SET *", "WHEN NOT MATCHED THEN INSERT *"):
            text = f"MERGE INTO m.u t USING trial46_narrow s ON t.id = s.id {clause}"
            with pytest.raises(mere.errors.FilterError, match=r"lacks \['b'\]"):
                sql(spark, text, warehouse=wh)
        assert state(wh, "m.u") == before
    finally:
        spark.catalog.dropTempView("trial46_narrow")


@pytest.mark.parametrize("option", ["mergeSchema", "create"])
def test_an_invalid_boolean_write_option_is_refused(spark: SparkSession, wh: str, option: str) -> None:
    """A yes/no option holding anything else is refused before anything is written, whether or not this
    write would have used it (no new column for mergeSchema; an existing table for create)."""
    write(spark.createDataFrame([(1, 1)], "id long, v long"), wh, "b.t", primary_key="id")
    before = state(wh, "b.t")
    with pytest.raises(Exception, match="InvalidInput"):
        write(spark.createDataFrame([(2, 2)], "id long, v long"), wh, "b.t", **{option: "maybe"})
    assert state(wh, "b.t") == before
    write(spark.createDataFrame([(2, 2)], "id long, v long"), wh, "b.t", **{option: "false"})
    assert mere_rows(wh, "b.t") == [(1, 1), (2, 2)]


def test_a_delete_of_rows_whose_change_column_says_insert_is_refused(spark: SparkSession, wh: str) -> None:
    """``operation=delete`` of rows carrying the table's change column with an insert would delete what the
    rows say to insert: refused, nothing written; rows that say delete (or carry no code) are deleted."""
    write(spark.createDataFrame([(1, 1, "I"), (2, 2, "I")], "id long, v long, op string"), wh, "c.t",
          primary_key="id", cdc_column="op")  # fmt: skip
    before = state(wh, "c.t")
    with pytest.raises(Exception, match="not a delete"):
        write(spark.createDataFrame([(1, "I")], "id long, op string"), wh, "c.t", operation="delete")
    assert state(wh, "c.t") == before
    write(spark.createDataFrame([(1, "D")], "id long, op string"), wh, "c.t", operation="delete")
    write(spark.createDataFrame([(2,)], "id long"), wh, "c.t", operation="delete")
    assert mere_rows(wh, "c.t") == []
