"""Adversarial probes of Spark's own write and DDL idioms on mere tables (trial 49).

Each idiom a new Spark user reaches for either does what Spark's semantics say (the table's rows afterwards
equal a dict model of the same operation) or is refused before anything is written (the mere table's
version and rows, and Spark's catalog, as they were). Idioms already pinned elsewhere (save modes of
``df.write.save``, ``partitionOverwriteMode``, ``.partitionBy``, CTAS / ``saveAsTable`` basics) are left out.
Real local PySpark; one session for all tests (the conftest fixture).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import lit

import mere
from mere.errors import MereError

COLS = "id BIGINT, day STRING, v BIGINT"
MERE_ERROR = r"mere\.errors|InvalidInput|SchemaMismatch|TableExists|NoSuchTable"


@contextlib.contextmanager
def refused_typed() -> Iterator[None]:
    """A typed mere error: raised on the driver as itself, or through Spark naming its class."""
    try:
        yield
    except MereError:
        return
    except Exception as e:  # a Spark error wrapping the task's or the data source's error
        assert re.search(MERE_ERROR, str(e)), f"not a typed mere error: {type(e).__name__}: {e}"
        return
    pytest.fail("nothing was refused")


def mere_rows(wh: str, name: str) -> list[tuple[Any, ...]]:
    t = mere.connect(wh).table(name)
    return sorted((tuple(r.values()) for r in t.to_arrow().to_pylist()), key=repr)


def state(spark: SparkSession, wh: str, name: str) -> tuple[Any, ...]:
    """What a refused call must leave as it was: the version, the rows, Spark's and mere's table lists."""
    cat = mere.connect(wh)
    spark_tables = sorted(t.name for t in spark.catalog.listTables())
    return cat.table(name).version, mere_rows(wh, name), spark_tables, sorted(cat.tables())


def save(df: DataFrame, wh: str, name: str, mode: str = "append", **options: Any) -> None:
    w = df.write.format("mere").mode(mode).option("warehouse", wh)
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save(name)


def model_rows(model: dict[int, tuple[Any, Any]]) -> list[tuple[Any, ...]]:
    return sorted(((k, *dv) for k, dv in model.items()), key=repr)


# --- SQL INSERT forms: Spark resolves columns (by position, by name, column lists), mere applies the rows. ---


def test_insert_forms_resolve_columns_as_spark_does(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE trial49_i ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.i', "
        "primary_key 'id', partition_by 'day', buckets '2')"
    )
    model: dict[int, tuple[Any, Any]] = {}
    steps: list[tuple[str, dict[int, tuple[Any, Any]] | None]] = [
        ("INSERT INTO trial49_i VALUES (1, 'd1', 1), (2, 'd2', 2), (3, 'd1', 3)", None),
        # By position: the aliases are ignored, the first column is the key.
        ("INSERT INTO trial49_i SELECT 50L AS v, 'd2' AS day, 5L AS id", {50: ("d2", 5)}),
        # By name: the aliases decide.
        ("INSERT INTO trial49_i BY NAME SELECT 60L AS v, 'd2' AS day, 6L AS id", {6: ("d2", 60)}),
        # A column list in another case and order.
        ("INSERT INTO trial49_i (V, ID, DAY) VALUES (70, 7, 'd1')", {7: ("d1", 70)}),
        # Columns left out of the list are NULL (Spark's default), not kept from the old row.
        ("INSERT INTO trial49_i (id, day) VALUES (1, 'd1')", {1: ("d1", None)}),
        ("INSERT INTO trial49_i (id, v) VALUES (8, 80)", {8: (None, 80)}),
        ("INSERT INTO TABLE spark_catalog.default.TRIAL49_I VALUES (9, 'd3', 9)", {9: ("d3", 9)}),
        ("insert into `trial49_i` values (2, 'd2', 22)", {2: ("d2", 22)}),
    ]
    for statement, change in steps:
        spark.sql(statement)
        if change is None:
            model.update({1: ("d1", 1), 2: ("d2", 2), 3: ("d1", 3)})
        else:
            model.update(change)
        assert mere_rows(wh, "ns.i") == model_rows(model), statement
    got = sorted((tuple(r) for r in spark.sql("SELECT * FROM trial49_i").collect()), key=repr)
    assert got == model_rows(model)
    # Two rows of one key in one statement: one row stays, and it is one of them.
    spark.sql("INSERT INTO trial49_i VALUES (10, 'd1', 1), (10, 'd2', 2)")
    tens = [r for r in mere_rows(wh, "ns.i") if r[0] == 10]
    assert len(tens) == 1 and tens[0] in [(10, "d1", 1), (10, "d2", 2)]
    # INSERT OVERWRITE with a column list (the rest NULL) and BY NAME replaces the whole table.
    spark.sql("INSERT OVERWRITE trial49_i (id, v) SELECT 4L, 4L")
    assert mere_rows(wh, "ns.i") == [(4, None, 4)]
    spark.sql("INSERT OVERWRITE trial49_i BY NAME SELECT 'b' AS day, 5L AS v, 5L AS id")
    assert mere_rows(wh, "ns.i") == [(5, "b", 5)]


def test_ctas_if_not_exists_writes_nothing_into_an_existing_table(
    spark: SparkSession, wh: str, clean: None
) -> None:
    spark.sql(
        f"CREATE TABLE trial49_e ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.e', "
        "primary_key 'id', partition_by 'day')"
    )
    spark.sql("INSERT INTO trial49_e VALUES (1, 'a', 1), (2, 'b', 2)")
    before = state(spark, wh, "ns.e")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS trial49_e USING mere OPTIONS (warehouse '{wh}', table 'ns.e', "
        "primary_key 'id') AS SELECT 9L AS id, 'z' AS day, 9L AS v"
    )
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS trial49_e ({COLS}) USING mere OPTIONS (warehouse '{wh}', "
        "table 'ns.e', primary_key 'id', buckets '3')"
    )
    assert state(spark, wh, "ns.e") == before
    # CTAS with PARTITIONED BY and TBLPROPERTIES: the layout asked for.
    spark.sql(
        f"CREATE TABLE trial49_ct USING mere OPTIONS (warehouse '{wh}', table 'ns.ct', primary_key 'id') "
        "PARTITIONED BY (day) TBLPROPERTIES ('buckets' = '3') "
        "AS SELECT id, CAST(id % 2 AS STRING) AS day FROM range(4)"
    )
    t = mere.connect(wh).table("ns.ct")
    assert (t.spec.partition_by, t.spec.buckets) == (("day",), 3)
    assert mere_rows(wh, "ns.ct") == [(0, "0"), (1, "1"), (2, "0"), (3, "1")]


def test_idioms_refused_before_anything_is_written(spark: SparkSession, wh: str, clean: None) -> None:
    """Row-level SQL, time travel in SQL, REPLACE WHERE, DataFrameWriterV2, insertInto and INSERT forms the
    hook cannot name a table for (FROM-first; a WITH clause before INSERT is named now): each is refused and
    changes nothing."""
    spark.sql(
        f"CREATE TABLE trial49_r ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.r', "
        "primary_key 'id', partition_by 'day', buckets '2')"
    )
    spark.sql("INSERT INTO trial49_r VALUES (1, 'd1', 1), (2, 'd2', 2)")
    before = state(spark, wh, "ns.r")
    statements = [
        "TRUNCATE TABLE trial49_r",
        "DELETE FROM trial49_r",
        "DELETE FROM trial49_r WHERE id = 1",
        "UPDATE trial49_r SET v = 9 WHERE id = 1",
        "SELECT * FROM trial49_r VERSION AS OF 1",
        "INSERT INTO trial49_r REPLACE WHERE day = 'd1' SELECT 3L AS id, 'd1' AS day, 3L AS v",
        "INSERT OVERWRITE trial49_r PARTITION (day) SELECT 9L, 9L, 'd2'",
        "INSERT INTO trial49_r VALUES (NULL, 'd1', 1)",
        "FROM (SELECT 12L AS id, 'c' AS day, 12L AS v) s INSERT INTO trial49_r SELECT *",
        "FROM (SELECT 13L AS id, 'c' AS day, 13L AS v) s "
        "INSERT INTO trial49_r SELECT * INSERT INTO trial49_r SELECT id + 1, day, v",
    ]
    for statement in statements:
        with pytest.raises(Exception):  # noqa: B017 - Spark's own refusals or a wrapped mere one
            spark.sql(statement).collect()
        assert state(spark, wh, "ns.r") == before, statement
    with refused_typed():
        spark.sql("INSERT INTO trial49_r VALUES (:k, 'c', :k)", args={"k": 16})
    assert state(spark, wh, "ns.r") == before
    with pytest.raises(Exception, match="TIME_TRAVEL"):
        spark.read.option("versionAsOf", "1").table("trial49_r").collect()
    df = spark.createDataFrame([(5, "d1", 50)], "v long, day string, id long")
    calls = [
        lambda: df.write.insertInto("trial49_r"),
        lambda: df.write.insertInto("trial49_r", overwrite=True),
        lambda: df.writeTo("trial49_r").append(),
        lambda: df.writeTo("trial49_r").overwrite(lit(True)),
        lambda: df.writeTo("trial49_r").overwritePartitions(),
        lambda: df.writeTo("trial49_r").create(),
        lambda: df.writeTo("trial49_r").createOrReplace(),
        lambda: df.write.format("mere").mode("overwrite").option("replaceWhere", "day = 'd1'")
        .saveAsTable("trial49_r"),
    ]  # fmt: skip
    for i, call in enumerate(calls):
        with pytest.raises(Exception):  # noqa: B017
            call()
        assert state(spark, wh, "ns.r") == before, i
    assert sorted(tuple(r) for r in spark.sql("SELECT * FROM trial49_r").collect()) == before[1]
    # An INSERT after a comment is named as any other (it was refused: the hook saw no INSERT).
    spark.sql("/* a comment */ INSERT INTO trial49_r VALUES (11, 'c', 11)")
    assert (11, "c", 11) in {tuple(r) for r in spark.sql("SELECT * FROM trial49_r").collect()}


# --- DataFrame writes: types, missing columns, duplicates, nullability against a model. ---

SCHEMA = pa.schema(
    [("id", pa.int64()), ("day", pa.string()), ("v", pa.int64()), ("i", pa.int32()), ("f", pa.float64())]
)
SEED = {1: ("a", 1, 1, 1.0), 2: ("b", 2, 2, 2.0), 3: ("a", 3, 3, 3.0)}


def _seeded(wh: str, name: str) -> mere.Table:
    t = mere.connect(wh).create_table(name, SCHEMA, primary_key="id", partition_by="day", buckets=2)
    cols = list(zip(*SEED.values(), strict=True))
    t.upsert(
        pa.table(
            {"id": list(SEED), **dict(zip(SCHEMA.names[1:], map(list, cols), strict=True))}, schema=SCHEMA
        )
    )
    return t


def test_dataframe_writes_widen_losslessly_and_refuse_loss(spark: SparkSession, wh: str) -> None:
    _seeded(wh, "w.t")
    model = {k: (k, *v) for k, v in SEED.items()}
    accepted = [
        (spark.createDataFrame([(4, "a", 4)], "id int, day string, v int"), {4: (4, "a", 4, None, None)}),
        (spark.createDataFrame([(6, "a", 7)], "id long, day string, i long"), {6: (6, "a", None, 7, None)}),
        (
            spark.createDataFrame([(7, "a", 1.5)], "id long, day string, f float"),
            {7: (7, "a", None, None, 1.5)},
        ),
        (
            spark.sql("SELECT 9L AS id, 'a' AS day, CAST(1.25 AS DECIMAL(10,2)) AS f"),
            {9: (9, "a", None, None, 1.25)},
        ),
        (spark.sql("SELECT 12L AS id, 'a' AS day, CAST(5 AS TINYINT) AS i"), {12: (12, "a", None, 5, None)}),
        # A partial row of an existing key: the columns it lacks keep their values (a mere upsert).
        (spark.createDataFrame([(2, "b", 20)], "id long, day string, v long"), {2: (2, "b", 20, 2, 2.0)}),
    ]
    for df, change in accepted:
        save(df, wh, "w.t")
        model.update(change)
        assert mere_rows(wh, "w.t") == sorted(model.values(), key=repr), df.schema.simpleString()
    refused = [
        spark.createDataFrame([(5, "a", 2**40)], "id long, day string, i long"),  # overflows int32
        spark.createDataFrame([(8, "a", 1.5)], "id long, day string, v double"),  # a fraction into int64
        spark.createDataFrame([(10, "a", "12")], "id long, day string, v string"),  # text is not parsed
        spark.createDataFrame([(1, "b", 10)], "id long, day string, v long"),  # a partial row moving its key
    ]
    for df in refused:
        version = mere.connect(wh).table("w.t").version
        with refused_typed():
            save(df, wh, "w.t")
        assert mere.connect(wh).table("w.t").version == version
        assert mere_rows(wh, "w.t") == sorted(model.values(), key=repr), df.schema.simpleString()


def test_overwrites_of_partial_empty_and_duplicated_dataframes(spark: SparkSession, wh: str) -> None:
    _seeded(wh, "w.o")
    save(spark.createDataFrame([(1, "a")], "id long, day string"), wh, "w.o", "overwrite")
    assert mere_rows(wh, "w.o") == [(1, "a", None, None, None)]  # an overwritten row keeps nothing
    _seeded(wh, "w.d")
    save(spark.createDataFrame([(1, "a")], "id long, day string"), wh, "w.d", "overwrite",
         partitionOverwriteMode="dynamic")  # fmt: skip
    assert mere_rows(wh, "w.d") == [(1, "a", None, None, None), (2, "b", 2, 2, 2.0)]
    t = _seeded(wh, "w.e")
    save(spark.createDataFrame([], "id long, day string, v long, i int, f double"), wh, "w.e", "overwrite")
    assert mere_rows(wh, "w.e") == [] and t.version == 2
    # The same keys in every Spark partition: one row per key, holding one of the values written.
    _seeded(wh, "w.dup")
    rows = [(k, "a", p) for p in range(4) for k in (1, 20)]
    save(spark.createDataFrame(rows, "id long, day string, v long").repartition(4), wh, "w.dup")
    got = mere_rows(wh, "w.dup")
    assert [r[0] for r in got] == [1, 2, 20, 3]
    assert all(r[2] in range(4) for r in got if r[0] in (1, 20))
    _seeded(wh, "w.dupo")
    rows = [(k, "b", p) for p in range(4) for k in (1, 20)]
    save(spark.createDataFrame(rows, "id long, day string, v long").repartition(4), wh, "w.dupo", "overwrite")
    got = mere_rows(wh, "w.dupo")
    assert [r[0] for r in got] == [1, 20] and all(r[2] in range(4) for r in got)


def test_nulls_in_non_nullable_columns_are_refused(spark: SparkSession, wh: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64(), False)])
    t = mere.connect(wh).create_table("w.nn", schema, primary_key="id")
    t.upsert(pa.table({"id": [1], "v": [1]}, schema=schema))
    for df in (
        spark.createDataFrame([(2, None)], "id long, v long"),
        spark.createDataFrame([(3,)], "id long"),  # a new key lacking the column
    ):
        with pytest.raises(Exception, match="SchemaMismatch"):
            save(df, wh, "w.nn")
        assert (t.version, mere_rows(wh, "w.nn")) == (1, [(1, 1)])


def test_save_as_table_modes_on_an_existing_table(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE trial49_st ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.st', "
        "primary_key 'id')"
    )
    spark.sql("INSERT INTO trial49_st VALUES (1, 'a', 1)")
    before = state(spark, wh, "ns.st")
    df = spark.createDataFrame([(2, "b", 2)], "id long, day string, v long")
    df.write.format("mere").mode("ignore").saveAsTable("trial49_st")  # Spark: an existing table, no-op
    assert state(spark, wh, "ns.st") == before
    with pytest.raises(MereError, match="already exists"):
        df.write.format("mere").mode("error").saveAsTable("trial49_st")
    assert state(spark, wh, "ns.st") == before
    # Append resolves by name (unlike insertInto), as Spark's saveAsTable does.
    spark.createDataFrame([(3, "c", 30)], "v long, day string, id long").write.format("mere").mode(
        "append"
    ).saveAsTable("trial49_st")
    assert mere_rows(wh, "ns.st") == [(1, "a", 1), (30, "c", 3)]


# --- Found by the trial: Spark idioms silently reinterpreted, or refused with a raw error. ---


def test_bucket_by_of_a_new_save_as_table_is_honoured_or_refused(
    spark: SparkSession, wh: str, clean: None
) -> None:
    df = spark.createDataFrame([(1, "a", 1)], "id long, day string, v long")
    try:
        df.write.format("mere").option("warehouse", wh).option("primary_key", "id").bucketBy(
            4, "id"
        ).saveAsTable("trial49_bk")
    except MereError:
        assert mere.connect(wh).tables() == [] and not spark.catalog.tableExists("trial49_bk")
        return
    assert mere.connect(wh).table("default.trial49_bk").spec.buckets == 4


def test_bucket_by_unlike_the_tables_is_refused(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE trial49_bb ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.bb', "
        "primary_key 'id', buckets '2')"
    )
    spark.sql("INSERT INTO trial49_bb VALUES (1, 'a', 1)")
    before = state(spark, wh, "ns.bb")
    df = spark.createDataFrame([(2, "a", 2)], "id long, day string, v long")
    with refused_typed():
        df.write.format("mere").mode("append").bucketBy(7, "id").saveAsTable("trial49_bb")
    assert state(spark, wh, "ns.bb") == before


def test_a_column_default_is_honoured_or_refused(spark: SparkSession, wh: str, clean: None) -> None:
    try:
        spark.sql(
            f"CREATE TABLE trial49_df (id BIGINT, v BIGINT DEFAULT 42) USING mere OPTIONS (warehouse '{wh}', "
            "table 'ns.df', primary_key 'id')"
        )
    except MereError:
        assert mere.connect(wh).tables() == [] and not spark.catalog.tableExists("trial49_df")
        return
    spark.sql("INSERT INTO trial49_df (id) VALUES (1)")
    assert mere_rows(wh, "ns.df") == [(1, 42)]


def test_not_null_of_a_column_list_is_kept(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE trial49_nn (id BIGINT NOT NULL, v BIGINT NOT NULL, d STRING) USING mere OPTIONS "
        f"(warehouse '{wh}', table 'ns.nn', primary_key 'id')"
    )
    before = state(spark, wh, "ns.nn")
    with pytest.raises(Exception):  # noqa: B017 - Spark's NOT_NULL_ASSERT_VIOLATION or mere's SchemaMismatch
        spark.sql("INSERT INTO trial49_nn VALUES (1, NULL, 'x')")
    assert state(spark, wh, "ns.nn") == before


def test_a_transform_partitioning_is_refused_with_a_typed_error(
    spark: SparkSession, wh: str, clean: None
) -> None:
    with pytest.raises(MereError, match="partitioning"):
        spark.sql(
            f"CREATE TABLE trial49_tr (id BIGINT, ts TIMESTAMP) USING mere OPTIONS (warehouse '{wh}', "
            "table 'ns.tr', primary_key 'id') PARTITIONED BY (days(ts))"
        )
    assert mere.connect(wh).tables() == [] and not spark.catalog.tableExists("trial49_tr")


def test_alter_table_add_columns_keeps_the_table_usable(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE trial49_al ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.al', primary_key 'id')"
    )
    spark.sql("INSERT INTO trial49_al VALUES (1, 'a', 1)")
    try:
        spark.sql("ALTER TABLE trial49_al ADD COLUMNS (w BIGINT)")
    except Exception:
        assert [tuple(r) for r in spark.sql("SELECT * FROM trial49_al").collect()] == [(1, "a", 1)]
        return
    assert [tuple(r) for r in spark.sql("SELECT * FROM trial49_al").collect()] == [(1, "a", 1, None)]


# --- More: Spark types written and read back, CTAS rows, layout names, read options. ---


def test_spark_types_round_trip_through_a_created_table(spark: SparkSession, wh: str) -> None:
    df = spark.sql(
        "SELECT 1L AS id, TIMESTAMP'2026-01-02 03:04:05.123456' AS ts, "
        "TIMESTAMP_NTZ'2026-01-02 03:04:05.123456' AS ntz, DATE'2026-03-04' AS d, "
        "CAST('12345678901234567890.1234567890' AS DECIMAL(38,10)) AS dec, X'00FF' AS bin, true AS b, "
        "CAST(1.5 AS FLOAT) AS fl, CAST(7 AS SHORT) AS sh, array(1, NULL, 3) AS arr, map('a', 1, 'b', NULL) AS m, "
        "named_struct('x', 1, 'y', 'z') AS st, INTERVAL '3 04:05:06.5' DAY TO SECOND AS ivl"
    )
    save(df, wh, "ty.t", primary_key="id")
    back = spark.read.format("mere").option("warehouse", wh).load("ty.t")
    assert back.schema.simpleString() == df.schema.simpleString()
    assert back.collect() == df.collect()
    # Keys that differ only in case are two keys; a timestamp key reads back as written.
    save(spark.sql("SELECT 'a' AS k, 1L AS v UNION ALL SELECT 'A', 2L"), wh, "ty.s", primary_key="k")
    assert mere_rows(wh, "ty.s") == [("A", 2), ("a", 1)]


def test_ctas_rows_and_layout_names_as_mere_reads_them(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE trial49_cd USING mere OPTIONS (warehouse '{wh}', table 'ns.cd', primary_key 'id') "
        "AS SELECT id % 3 AS id, id AS v FROM range(9)"
    )
    got = mere_rows(wh, "ns.cd")
    assert [r[0] for r in got] == [0, 1, 2] and all(r[1] % 3 == r[0] for r in got)  # one row per key
    before = sorted(mere.connect(wh).tables()), sorted(t.name for t in spark.catalog.listTables())
    refused = [
        # a NULL key in the AS SELECT rows: the new entry and the new mere table are undone
        f"CREATE TABLE trial49_cn USING mere OPTIONS (warehouse '{wh}', table 'ns.cn', primary_key 'id') "
        "AS SELECT IF(id = 2, NULL, id) AS id, id AS v FROM range(4)",
        f"CREATE TABLE trial49_cp USING mere OPTIONS (warehouse '{wh}', table 'ns.cp', primary_key 'id') "
        "PARTITIONED BY (nope) AS SELECT id FROM range(2)",
    ]
    for statement in refused:
        with pytest.raises(Exception) as refusal:
            spark.sql(statement)
        assert isinstance(refusal.value, MereError) or "mere.errors.NullKey" in str(refusal.value)
        assert (
            sorted(mere.connect(wh).tables()),
            sorted(t.name for t in spark.catalog.listTables()),
        ) == before
    # Layout options name columns exactly (mere is case-sensitive): another case is refused, nothing made.
    df = spark.createDataFrame([(1, "a", 1)], "id long, day string, v long")
    with pytest.raises(Exception, match="SchemaMismatch"):
        save(df, wh, "ns.k", primary_key="ID")
    with pytest.raises(Exception, match="SchemaMismatch"):
        df.write.format("mere").mode("append").option("warehouse", wh).option(
            "primary_key", "id"
        ).partitionBy("DAY").save("ns.p")
    assert sorted(mere.connect(wh).tables()) == before[0]


def test_read_options_time_travel_and_refusals(spark: SparkSession, wh: str) -> None:
    t = mere.connect(wh).create_table(
        "rd.t", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": [1], "v": [1]}))
    t.upsert(pa.table({"id": [2], "v": [2]}))

    def rd(**options: Any) -> list[tuple[Any, ...]]:
        r = spark.read.format("mere").option("warehouse", wh)
        for k, v in options.items():
            r = r.option(k, str(v))
        return sorted(tuple(x) for x in r.load("rd.t").collect())

    assert rd(versionAsOf=0) == []
    assert rd(versionAsOf=1) == [(1, 1)]
    assert rd(timestampAsOf="2999-01-01") == [(1, 1), (2, 2)]
    assert rd(columns="v", filter="id = 2") == [(2,)]
    for options, error in [
        ({"versionAsOf": 99}, "NoSuchVersion"),
        ({"versionAsOf": -1}, "NoSuchVersion"),
        ({"versionAsOf": "1.5"}, "InvalidInput"),
        ({"timestampAsOf": "2000-01-01"}, "NoSuchVersion"),
        ({"versionAsOf": 1, "timestampAsOf": "2999-01-01"}, "InvalidInput"),
        ({"columns": "ID"}, "SchemaMismatch"),
        ({"filter": "v >>> 1"}, "FilterError"),
    ]:
        with pytest.raises(Exception, match=error):
            rd(**options)


@pytest.mark.parametrize(
    "options",
    [{"version": 2, "versionAsOf": 1}, {"as_of": "2999-01-01", "timestampAsOf": "2000-01-01"}],
    ids=["version", "as_of"],
)
def test_conflicting_spellings_of_a_read_point_are_refused(
    spark: SparkSession, wh: str, options: dict[str, Any]
) -> None:
    t = mere.connect(wh).create_table("rp.t", pa.schema([("id", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1]}))
    t.upsert(pa.table({"id": [2]}))
    r = spark.read.format("mere").option("warehouse", wh)
    for k, v in options.items():
        r = r.option(k, str(v))
    with pytest.raises(Exception, match="InvalidInput"):
        r.load("rp.t").collect()


def test_a_path_and_a_table_option_naming_different_tables_are_refused(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    for name, v in (("a.t", 1), ("a.u", 100)):
        cat.create_table(name, schema, primary_key="id").upsert(
            pa.table({"id": [1], "v": [v]}, schema=schema)
        )
    before = [(cat.table(n).version, mere_rows(wh, n)) for n in ("a.t", "a.u")]
    df = spark.createDataFrame([(3, 3)], "id long, v long")
    with pytest.raises(Exception, match="InvalidInput"):
        df.write.format("mere").mode("append").option("warehouse", wh).option("table", "a.u").save("a.t")
    assert [(cat.table(n).version, mere_rows(wh, n)) for n in ("a.t", "a.u")] == before
    with pytest.raises(Exception, match="InvalidInput"):
        spark.read.format("mere").option("warehouse", wh).option("table", "a.u").load("a.t").collect()


@pytest.mark.parametrize("column", ["s VARCHAR(3)", "s CHAR(3)"])
def test_a_char_or_varchar_column_is_taken_or_refused_with_a_typed_error(
    spark: SparkSession, wh: str, clean: None, column: str
) -> None:
    try:
        spark.sql(
            f"CREATE TABLE trial49_vc (id BIGINT, {column}) USING mere OPTIONS (warehouse '{wh}', "
            "table 'ns.vc', primary_key 'id')"
        )
    except MereError:
        assert mere.connect(wh).tables() == [] and not spark.catalog.tableExists("trial49_vc")
        return
    spark.sql("INSERT INTO trial49_vc VALUES (1, 'ab')")
    assert [tuple(r) for r in spark.sql("SELECT id, rtrim(s) FROM trial49_vc").collect()] == [(1, "ab")]


# --- The `partition` option of a static overwrite: values of every partition column type. ---

PSCHEMA = pa.schema(
    [("id", pa.int64()), ("p", pa.int32()), ("d", pa.date32()), ("s", pa.string()), ("v", pa.int64())]
)
PSPARK = "id long, p int, d date, s string, v long"
PSEED = [
    (1, 1, dt.date(2026, 1, 1), "a", 1),
    (2, 1, dt.date(2026, 1, 1), "a", 2),
    (3, 2, dt.date(2026, 1, 2), "b", 3),
    (4, None, None, None, 4),
]


def _partitioned(wh: str, name: str) -> mere.Table:
    t = mere.connect(wh).create_table(
        name, PSCHEMA, primary_key="id", partition_by=["p", "d", "s"], buckets=2
    )
    t.upsert(pa.Table.from_pylist([dict(zip(PSCHEMA.names, r, strict=True)) for r in PSEED], schema=PSCHEMA))
    return t


def test_overwrite_of_one_partition_by_its_values(spark: SparkSession, wh: str) -> None:
    cases: list[tuple[str, list[tuple[Any, ...]], set[int]]] = [
        ('{"p": 1, "d": "2026-01-01", "s": "a"}', [(9, 1, dt.date(2026, 1, 1), "a", 9)], {1, 2}),
        ('{"p": 1}', [], {1, 2}),  # no rows: the partition is emptied, as Spark's static overwrite does
        ('{"p": null}', [(9, None, None, None, 9)], {4}),
        ('{"d": "2026-01-02"}', [(9, 2, dt.date(2026, 1, 2), "b", 9)], {3}),
    ]
    for i, (partition, new, replaced) in enumerate(cases):
        t = _partitioned(wh, f"po.t{i}")
        save(spark.createDataFrame(new, PSPARK), wh, t.name, "overwrite", partition=partition)
        want = sorted([r for r in PSEED if r[0] not in replaced] + new, key=repr)
        assert mere_rows(wh, t.name) == want, partition
        assert t.version == 2
    t = _partitioned(wh, "po.bad")
    before = (t.version, mere_rows(wh, t.name))
    row = spark.createDataFrame([(9, 2, dt.date(2026, 1, 2), "b", 9)], PSPARK)
    for partition in ('{"d": "2026-1-2"}', "{}", '{"P": 2}', "[2]", '{"p": 1}'):
        with pytest.raises(Exception, match="InvalidInput"):
            save(row, wh, t.name, "overwrite", partition=partition)
        assert (t.version, mere_rows(wh, t.name)) == before, partition


@pytest.mark.parametrize(
    "partition",
    ['{"p": true}', '{"p": 1, "p": 2}'],
    ids=["bool_for_int", "duplicate_name"],
)
def test_a_partition_value_of_another_type_or_named_twice_is_refused(
    spark: SparkSession, wh: str, partition: str
) -> None:
    t = _partitioned(wh, "pb.t")
    before = (t.version, mere_rows(wh, t.name))
    p = 2 if "2" in partition else 1
    row = spark.createDataFrame([(9, p, dt.date(2026, 1, 1), "a", 9)], PSPARK)
    with pytest.raises(Exception, match="InvalidInput"):
        save(row, wh, t.name, "overwrite", partition=partition)
    assert (t.version, mere_rows(wh, t.name)) == before


def test_statements_reading_the_table_they_write(spark: SparkSession, wh: str, clean: None) -> None:
    """INSERT / INSERT OVERWRITE whose SELECT reads the same table: the rows of the version read, applied once."""
    spark.sql(
        f"CREATE TABLE trial49_self ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.self', "
        "primary_key 'id', partition_by 'day', buckets '2')"
    )
    spark.sql("INSERT INTO trial49_self SELECT id, CAST(id % 3 AS STRING), id FROM range(20)")
    model = {i: (str(i % 3), i) for i in range(20)}
    spark.sql("INSERT INTO trial49_self SELECT id + 100, day, v FROM trial49_self WHERE id < 5")
    model.update({k + 100: model[k] for k in range(5)})
    assert mere_rows(wh, "ns.self") == model_rows(model)
    spark.sql("INSERT INTO trial49_self SELECT id, day, v * 10 FROM trial49_self")
    model = {k: (d, v * 10) for k, (d, v) in model.items()}
    assert mere_rows(wh, "ns.self") == model_rows(model)
    spark.sql("INSERT OVERWRITE trial49_self SELECT * FROM trial49_self WHERE id % 2 = 0")
    model = {k: dv for k, dv in model.items() if k % 2 == 0}
    assert mere_rows(wh, "ns.self") == model_rows(model)
    spark.sql(
        "INSERT OVERWRITE trial49_self WITH ('partitionOverwriteMode' = 'dynamic') "
        "SELECT id, day, v + 1 FROM trial49_self WHERE day = '1'"
    )
    model = {k: (d, v + 1 if d == "1" else v) for k, (d, v) in model.items()}
    assert mere_rows(wh, "ns.self") == model_rows(model)
    df = spark.read.format("mere").option("warehouse", wh).load("ns.self").where("v > 50")
    save(df, wh, "ns.self", "overwrite")
    model = {k: dv for k, dv in model.items() if dv[1] > 50}
    assert mere_rows(wh, "ns.self") == model_rows(model)


def test_save_as_table_refuses_partition_by_disagreeing_with_the_option(
    spark: SparkSession, wh: str, clean: None
) -> None:
    df = spark.createDataFrame([(1, "a", 1)], "id long, day string, v long")
    w = df.write.format("mere").mode("append").option("warehouse", wh).option("primary_key", "id")
    with pytest.raises(Exception, match="disagree"):
        w.option("partition_by", "day").partitionBy("v").save("pd.t")  # save() refuses it
    with pytest.raises(Exception, match="disagree"):
        w.option("partition_by", "day").partitionBy("v").saveAsTable("trial49_pd")
    assert mere.connect(wh).tables() == [] and not spark.catalog.tableExists("trial49_pd")
