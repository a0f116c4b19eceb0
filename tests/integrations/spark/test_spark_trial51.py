"""Adversarial probes of mere tables driven from PySpark (trial 51).

The angles earlier trials left: row-level statements (``mere.integrations.spark.sql``) on tables whose
merge rules are not plain ``last`` (``sum`` operators, ``last_non_null``, ``first_row``, ``sequence_by``),
MERGE with several clauses of each kind and three-valued conditions, subqueries mere cannot run, the
spellings of DataFrame write options (Spark's options are case-insensitive) and the session's
``partitionOverwriteMode``. The oracle: DuckDB running the same statements on the same rows, and
``mere.connect(...)`` reading the table directly. A refused statement must leave the table as it was.
One Spark session (the conftest fixture); every Spark test does several checks.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")

import duckdb
import pyarrow as pa
from pyspark.sql import SparkSession

import mere
from mere.errors import MereError
from mere.integrations.spark import sql


def mere_rows(wh: str, name: str, version: int | None = None) -> list[tuple[Any, ...]]:
    t = mere.connect(wh).table(name)
    return sorted((tuple(r.values()) for r in t.scan(version=version).to_arrow().to_pylist()), key=repr)


def snapshot(wh: str, name: str) -> tuple[int, list[tuple[Any, ...]]]:
    return mere.connect(wh).table(name).version, mere_rows(wh, name)


def duck_after(setup: list[str], statement: str, table: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(":memory:")
    for s in setup:
        con.execute(s)
    con.execute(statement)
    return sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)


# --- Row-level statements on tables with merge rules other than "last". ---


def test_row_level_statements_on_operator_tables_agree_with_duckdb(spark: SparkSession, wh: str) -> None:
    """``sum``, ``last_non_null`` and ``first_row`` tables: an UPDATE / MERGE sets the value it names (the
    docs: "SET qty = 5 on a sum column leaves 5"), a DELETE removes the row, as DuckDB does."""
    cat = mere.connect(wh)
    cat.create_table(
        "ops.s",
        pa.schema([("id", pa.int64()), ("q", pa.int64())]),
        primary_key="id",
        merge_operators={"q": "sum"},
    )
    s = cat.table("ops.s")
    s.upsert(pa.table({"id": [1, 2, 3], "q": [10, 20, 30]}))
    s.upsert(pa.table({"id": [1], "q": [5]}))  # folds to 15
    assert mere_rows(wh, "ops.s") == [(1, 15), (2, 20), (3, 30)]
    setup = [
        "CREATE TABLE s (id BIGINT PRIMARY KEY, q BIGINT)",
        "INSERT INTO s VALUES (1, 15), (2, 20), (3, 30)",
        "CREATE TABLE src AS SELECT * FROM (VALUES (2, 7), (4, 9)) v(id, q)",
    ]
    spark.createDataFrame([(2, 7), (4, 9)], "id long, q long").createOrReplaceTempView("src")
    for text in [
        "UPDATE {t} SET q = 100 WHERE id = 1",
        "MERGE INTO {t} t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET q = t.q + s.q "
        "WHEN NOT MATCHED THEN INSERT *",
        "DELETE FROM {t} WHERE id = 3",
    ]:
        sql(spark, text.format(t="ops.s"), warehouse=wh).collect()
        con_text = text.format(t="s")
        want = duck_after(setup, con_text, "s")
        setup.append(con_text)
        assert mere_rows(wh, "ops.s") == want, text
    # A deleted key of a sum table starts again from nothing.
    s.refresh().upsert(pa.table({"id": [3], "q": [1]}))
    assert mere_rows(wh, "ops.s") == [(1, 100), (2, 27), (3, 1), (4, 9)]

    cat.create_table(
        "ops.l",
        pa.schema([("id", pa.int64()), ("v", pa.int64()), ("w", pa.int64())]),
        primary_key="id",
        merge_operators={"v": "last_non_null"},
    )
    cat.table("ops.l").upsert(pa.table({"id": [1, 2], "v": [1, 2], "w": [1, 2]}))
    sql(spark, "UPDATE ops.l SET v = NULL WHERE id = 1", warehouse=wh).collect()
    assert mere_rows(wh, "ops.l") == [(1, None, 1), (2, 2, 2)]

    cat.create_table(
        "ops.f",
        pa.schema([("id", pa.int64()), ("v", pa.int64())]),
        primary_key="id",
        merge_operators="first_row",
    )
    cat.table("ops.f").upsert(pa.table({"id": [1, 2], "v": [1, 2]}))
    sql(spark, "UPDATE ops.f SET v = 100 WHERE id = 1", warehouse=wh).collect()
    assert mere_rows(wh, "ops.f") == [(1, 100), (2, 2)]
    # A DELETE cannot be kept on a first_row table: refused, typed, nothing changed.
    before = snapshot(wh, "ops.f")
    with pytest.raises(MereError, match="first_row"):
        sql(spark, "DELETE FROM ops.f WHERE id = 2", warehouse=wh).collect()
    assert snapshot(wh, "ops.f") == before


def _sequenced(wh: str) -> mere.Table:
    t = mere.connect(wh).create_table(
        "seq.t",
        pa.schema([("id", pa.int64()), ("lsn", pa.int64()), ("v", pa.string())]),
        primary_key="id",
        sequence_by="lsn",
    )
    t.upsert(pa.table({"id": [1, 2, 3], "lsn": [10, 10, 10], "v": ["a", "b", "c"]}))
    return t


def test_row_level_statements_keeping_the_sequence_agree_with_duckdb(spark: SparkSession, wh: str) -> None:
    """On a ``sequence_by`` table an UPDATE that leaves the sequence as it is wins the tie by commit order,
    and a DELETE holds against a late event below it (the concepts doc's rules)."""
    _sequenced(wh)
    sql(spark, "UPDATE seq.t SET v = 'y' WHERE id = 2", warehouse=wh).collect()
    sql(spark, "DELETE FROM seq.t WHERE id = 3", warehouse=wh).collect()
    assert mere_rows(wh, "seq.t") == [(1, 10, "a"), (2, 10, "y")]
    mere.connect(wh).table("seq.t").upsert(pa.table({"id": [3], "lsn": [5], "v": ["late"]}))
    assert mere_rows(wh, "seq.t") == [(1, 10, "a"), (2, 10, "y")]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE seq.t SET lsn = 1, v = 'z' WHERE id = 1",
        "MERGE INTO seq.t t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *",
    ],
)
def test_an_update_lowering_the_sequence_loses_and_is_counted_stale(
    spark: SparkSession, wh: str, statement: str
) -> None:
    # sequence_by orders every write, SQL's too (found: the row stayed while the metrics said only
    # updated=1). The metrics now say the row lost: stale=1.
    _sequenced(wh)
    spark.createDataFrame([(1, 1, "z")], "id long, lsn long, v string").createOrReplaceTempView("src")
    before = mere_rows(wh, "seq.t")
    (metrics,) = sql(spark, statement, warehouse=wh).collect()
    assert (metrics.updated, metrics.stale) == (1, 1)
    assert mere_rows(wh, "seq.t") == before == [(1, 10, "a"), (2, 10, "b"), (3, 10, "c")]


# --- MERGE / UPDATE / DELETE with several clauses, NULLs and subqueries: DuckDB is the oracle. ---

M_SETUP = [
    "CREATE TABLE m (id BIGINT PRIMARY KEY, p VARCHAR, v BIGINT)",
    "INSERT INTO m VALUES (1, 'a', 1), (2, 'a', NULL), (3, 'b', 3), (4, NULL, 4), (5, 'b', 5)",
    "CREATE TABLE src AS SELECT * FROM (VALUES (1, 'a', 10), (2, 'b', NULL), (3, 'b', -3), (6, 'c', 6), "
    "(7, NULL, NULL)) s(id, p, v)",
]
M_STATEMENTS = [
    # First clause whose condition holds acts; NULL conditions do not hold.
    "MERGE INTO {m} t USING src s ON t.id = s.id "
    "WHEN MATCHED AND s.v > t.v THEN UPDATE SET v = s.v * 100 "
    "WHEN MATCHED AND s.v IS NULL THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET v = -1 "
    "WHEN NOT MATCHED AND s.v IS NULL THEN INSERT VALUES (s.id, 'z', 0) "
    "WHEN NOT MATCHED THEN INSERT *",
    # UPDATE SET * moves row 2 to partition b; NOT MATCHED BY TARGET is NOT MATCHED.
    "MERGE INTO {m} t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
    "WHEN NOT MATCHED BY TARGET THEN INSERT *",
    "UPDATE {m} SET v = v + 1 WHERE v IS NOT NULL AND NOT (v > 3)",
    "UPDATE {m} SET p = CASE WHEN p IS NULL THEN 'n' ELSE p || p END, v = -v WHERE id >= 3",
    "DELETE FROM {m} WHERE p <> 'a'",
    "DELETE FROM {m}",
]
M_REFUSED = [
    "UPDATE {m} SET v = (SELECT max(v) FROM src) WHERE id = 1",
    "UPDATE {m} SET v = 5 WHERE id IN (SELECT id FROM src)",
    "DELETE FROM {m} WHERE id IN (SELECT id FROM src WHERE v > 0)",
    "DELETE FROM {m} WHERE EXISTS (SELECT 1 FROM src WHERE src.id = {m}.id)",
    "MERGE INTO {m} t USING src s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE",
]


def test_merge_clauses_updates_and_deletes_agree_with_duckdb(spark: SparkSession, wh: str) -> None:
    cat = mere.connect(wh)
    t = cat.create_table(
        "rl.m",
        pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())]),
        primary_key="id",
        partition_by="p",
        buckets=2,
    )
    t.upsert(pa.table({"id": [1, 2, 3, 4, 5], "p": ["a", "a", "b", None, "b"], "v": [1, None, 3, 4, 5]}))
    base = t.refresh().version
    spark.createDataFrame(
        [(1, "a", 10), (2, "b", None), (3, "b", -3), (6, "c", 6), (7, None, None)],
        "id long, p string, v long",
    ).createOrReplaceTempView("src")
    for text in M_STATEMENTS:
        want = duck_after(M_SETUP, text.format(m="m"), "m")
        sql(spark, text.format(m="rl.m"), warehouse=wh).collect()
        assert mere_rows(wh, "rl.m") == want, text
        cat.table("rl.m").rollback(base)
    before = snapshot(wh, "rl.m")
    for text in M_REFUSED:
        with pytest.raises(MereError):
            sql(spark, text.format(m="rl.m"), warehouse=wh).collect()
        assert snapshot(wh, "rl.m") == before, text
    # Source rows that would change one target row twice: refused, nothing written.
    spark.createDataFrame([(1, "a", 1), (1, "a", 2)], "id long, p string, v long").createOrReplaceTempView(
        "dup"
    )
    with pytest.raises(MereError):
        sql(
            spark,
            "MERGE INTO rl.m t USING dup s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v",
            warehouse=wh,
        ).collect()
    assert snapshot(wh, "rl.m") == before


# --- Reads: the filter option against DuckDB's WHERE (NULLs, NOT, IN lists, partition columns). ---

FILTERS = [
    "v <> 3",
    "NOT (v > 3)",
    "p = 'a' OR v IS NULL",
    "p IS NULL",
    "p <> 'a'",
    "v IN (1, 3, NULL)",
    "v NOT IN (1, NULL)",
    "s LIKE 'x%'",
    "coalesce(v, 0) = 0",
    "s = 'x''y'",
    "NOT (p = 'a') AND id % 2 = 0",
    "s || p = 'xa'",
]


def test_filter_option_reads_agree_with_duckdb(spark: SparkSession, wh: str) -> None:
    data = {
        "id": list(range(1, 13)),
        "p": ["a", "b", None] * 4,
        "v": [1, None, 3, 4, 5, None, 7, 8, -1, 0, None, 12],
        "s": ["x", None, "y", "x'y", "", None, "z", "x", "y", "q", None, "x"],
    }
    t = mere.connect(wh).create_table(
        "rd.r",
        pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64()), ("s", pa.string())]),
        primary_key="id",
        partition_by="p",
        buckets=3,
    )
    t.upsert(pa.table(data))
    t.upsert(pa.table({k: v[:4] for k, v in data.items()}))  # a second file to merge
    con = duckdb.connect(":memory:")
    r = pa.table(data)
    con.register("r", r)
    for f in FILTERS:
        want = sorted(con.execute(f"SELECT * FROM r WHERE {f}").fetchall(), key=repr)
        df = spark.read.format("mere").option("warehouse", wh).option("filter", f).load("rd.r")
        assert sorted((tuple(x) for x in df.collect()), key=repr) == want, f


# --- DataFrame writes: option spellings and the session's partitionOverwriteMode. ---


def test_write_option_spellings_and_session_overwrite_mode(spark: SparkSession, wh: str) -> None:
    """Spark's options are case-insensitive (keys, and the values of partitionOverwriteMode); the session's
    mode is the default and an explicit option wins over it. Delta's replaceWhere / overwriteSchema are
    refused, not ignored."""
    cat = mere.connect(wh)
    cat.create_table(
        "wr.w",
        pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())]),
        primary_key="id",
        partition_by="p",
        buckets=2,
    )
    start = {"id": [1, 2, 3, 4], "p": ["a", "b", "c", None], "v": [1, 2, 3, 4]}
    df = spark.createDataFrame([(10, "a", 10), (11, None, 11)], "id long, p string, v long")
    dynamic = [(2, "b", 2), (3, "c", 3), (10, "a", 10), (11, None, 11)]
    static = [(10, "a", 10), (11, None, 11)]

    def overwrite(**options: str) -> list[tuple[Any, ...]]:
        cat.table("wr.w").overwrite(pa.table(start))
        w = df.write.format("mere").mode("overwrite").option("warehouse", wh)
        for k, v in options.items():
            w = w.option(k, v)
        w.save("wr.w")
        return sorted(mere_rows(wh, "wr.w"))

    try:
        assert overwrite(partitionOverwriteMode="dynamic") == dynamic
        assert overwrite(partitionoverwritemode="dynamic") == dynamic
        assert overwrite(PARTITIONOVERWRITEMODE="DYNAMIC") == dynamic
        assert overwrite(partitionOverwriteMode="static") == static
        assert overwrite() == static
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", "DYNAMIC")
        assert overwrite() == dynamic
        assert overwrite(partitionOverwriteMode="static") == static
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    cat.table("wr.w").overwrite(pa.table(start))
    before = snapshot(wh, "wr.w")
    for opts in ({"replaceWhere": "p = 'a'"}, {"overwriteSchema": "true"}, {"partition": '{"p": null}'}):
        with pytest.raises(Exception, match=r"mere\.errors"):
            w = df.write.format("mere").mode("overwrite").option("warehouse", wh)
            for k, v in opts.items():
                w = w.option(k, v)
            w.save("wr.w")
        assert snapshot(wh, "wr.w") == before, opts


# --- Spark catalog tables: spellings of INSERT the hook must name, and what Spark or mere refuses. ---


def _catalog_pair(spark: SparkSession, wh: str) -> None:
    for n in ("a", "b"):
        spark.sql(
            f"CREATE TABLE t51{n} (id BIGINT, p STRING, v BIGINT) USING mere "
            f"OPTIONS (warehouse '{wh}', table 'cat51.{n}', primary_key 'id') PARTITIONED BY (p) "
            "TBLPROPERTIES ('buckets' = '2')"
        )
    spark.sql("INSERT INTO t51a VALUES (1, 'a', 1)")
    spark.sql("INSERT INTO t51b VALUES (2, 'b', 2)")


def test_insert_spellings_and_refusals_on_catalog_tables(spark: SparkSession, wh: str, clean: None) -> None:
    _catalog_pair(spark, wh)
    spark.createDataFrame([(9, "s", 9), (10, None, 10)], "id long, p string, v long").createOrReplaceTempView(
        "src"
    )

    def both() -> tuple[Any, ...]:
        return snapshot(wh, "cat51.a"), snapshot(wh, "cat51.b")

    model = {"a": {1: (1, "a", 1)}, "b": {2: (2, "b", 2)}}
    honoured: list[tuple[str, str, list[tuple[Any, ...]]]] = [
        ("INSERT INTO spark_catalog.default.t51a VALUES (4, 'd', 4)", "a", [(4, "d", 4)]),
        ("INSERT INTO `T51A` VALUES (5, 'e', 5)", "a", [(5, "e", 5)]),
        ("  -- a comment\n insert  into\n t51a values (6, 'f', 6);", "a", [(6, "f", 6)]),
        ("INSERT INTO t51a TABLE src", "a", [(9, "s", 9), (10, None, 10)]),
        ("INSERT INTO default.t51a (v, id, p) VALUES (8, 8, 'h')", "a", [(8, "h", 8)]),
        ("INSERT INTO t51a BY NAME SELECT 7 AS id, 9 AS v, 'c' AS p", "a", [(7, "c", 9)]),
        ("INSERT INTO t51a WITH ('warehouse' = '{wh}/') VALUES (14, 'k', 14)", "a", [(14, "k", 14)]),
    ]
    for text, target, new in honoured:
        spark.sql(text.format(wh=wh))
        model[target].update({r[0]: r for r in new})
        assert mere_rows(wh, f"cat51.{target}") == sorted(model[target].values(), key=repr), text
    spark.sql("INSERT INTO t51b SELECT * FROM t51a")  # names t51b, not the source's metadata
    model["b"].update(model["a"])
    assert mere_rows(wh, "cat51.b") == sorted(model["b"].values(), key=repr)
    assert mere_rows(wh, "cat51.a") == sorted(model["a"].values(), key=repr)

    before = both()
    spark.sql("EXPLAIN INSERT INTO t51a VALUES (99, 'x', 99)").collect()
    spark.sql(
        "INSERT OVERWRITE t51a WITH ('partitionOverwriteMode' = 'dynamic') SELECT * FROM src WHERE false"
    )
    assert both() == before
    refused = [
        # Spark's own: a Python source has no row-level operations, truncation, time travel or partitions.
        "TRUNCATE TABLE t51a",
        "DELETE FROM t51a",
        "DELETE FROM t51a WHERE id = 1",
        "UPDATE t51a SET v = 1",
        "MERGE INTO t51a t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *",
        "SELECT * FROM t51a VERSION AS OF 1",
        "INSERT INTO t51a REPLACE WHERE p = 'a' SELECT * FROM src",
        "INSERT INTO t51a PARTITION (p = 'a') SELECT 8, 8",
        "INSERT OVERWRITE t51a PARTITION (p = 'a') SELECT 8, 8",
        # mere's: forms the hook cannot name, which would otherwise write where the source's metadata says.
        "FROM t51b INSERT INTO t51a SELECT *",
        "FROM src INSERT INTO t51a SELECT * WHERE id = 9 INSERT INTO t51b SELECT * WHERE id = 10",
        "INSERT INTO t51a WITH ('table' = 'cat51.b') VALUES (11, 'k', 11)",
        "INSERT INTO t51a WITH ('TABLE' = 'cat51.b') VALUES (12, 'k', 12)",
        "INSERT INTO t51a WITH ('Warehouse' = '/nonexistent/elsewhere') VALUES (13, 'k', 13)",
        "ALTER TABLE t51a DROP COLUMN v",
        "ALTER TABLE t51a RENAME COLUMN v TO w",
    ]
    for text in refused:
        with pytest.raises(Exception):  # noqa: B017
            spark.sql(text).collect()
        assert both() == before, text
    for text, args in [
        ("INSERT INTO t51a VALUES (:id, 'g', 7)", {"id": 7}),
        ("INSERT OVERWRITE t51a SELECT * FROM t51b WHERE id > :x", {"x": 0}),
    ]:
        with pytest.raises(Exception, match="names no table"):
            spark.sql(text, args=args).collect()
        assert both() == before, text
    assert mere.connect(wh).tables() == ["cat51.a", "cat51.b"]


def test_an_insert_after_a_with_clause_lands_in_its_table(spark: SparkSession, wh: str, clean: None) -> None:
    # found: refused with the advice for a table that names no mere table (DROP TABLE it)
    _catalog_pair(spark, wh)
    spark.sql("WITH s AS (SELECT 3L AS id, 'c' AS p, 3L AS v) INSERT INTO t51a SELECT * FROM s")
    assert mere_rows(wh, "cat51.a") == [(1, "a", 1), (3, "c", 3)]
    spark.sql(
        "WITH a (id, p, v) AS (SELECT 4L, 'd', 4L), `b c` AS (SELECT * FROM a WHERE p != ')') "
        "INSERT OVERWRITE t51a SELECT * FROM `b c`"
    )
    assert mere_rows(wh, "cat51.a") == [(4, "d", 4)]
    b = mere_rows(wh, "cat51.b")
    spark.sql("WITH s AS (SELECT * FROM t51b) INSERT INTO t51a SELECT * FROM s")  # rows of another table
    assert mere_rows(wh, "cat51.a") == sorted([(4, "d", 4), *b], key=repr) and mere_rows(wh, "cat51.b") == b


def test_time_travel_at_each_commit_instant(spark: SparkSession, wh: str, clean: None) -> None:
    """``TIMESTAMP AS OF`` a commit's own instant reads that commit (as Delta: the version committed at or
    before the time), through sql() and the timestampAsOf read option."""
    _catalog_pair(spark, wh)
    spark.sql("INSERT INTO t51a VALUES (2, 'b', 2)")
    spark.sql("INSERT OVERWRITE t51a SELECT 3L, 'c', 3L")
    t = mere.connect(wh).table("cat51.a")
    for snap in t.history()[1:]:
        want = mere_rows(wh, "cat51.a", snap.version)
        when = snap.committed_at.isoformat()
        got = sql(spark, f"SELECT * FROM t51a TIMESTAMP AS OF '{when}'").collect()
        assert sorted((tuple(r) for r in got), key=repr) == want, (snap.version, when)
        read = spark.read.format("mere").option("warehouse", wh).option("timestampAsOf", when).load("cat51.a")
        assert sorted((tuple(r) for r in read.collect()), key=repr) == want, (snap.version, when)


def test_null_keys_and_sequences_are_refused_on_a_sequenced_catalog_table(
    spark: SparkSession, wh: str, clean: None
) -> None:
    spark.sql(
        f"CREATE TABLE q51 (id BIGINT, lsn BIGINT, v STRING) USING mere OPTIONS (warehouse '{wh}', "
        "table 'cat51.q', primary_key 'id') TBLPROPERTIES ('sequence_by' = 'lsn')"
    )
    spark.sql("INSERT INTO q51 VALUES (1, 10, 'a'), (2, 10, 'b')")
    before = snapshot(wh, "cat51.q")
    for text in ["INSERT INTO q51 VALUES (3, NULL, 'c')", "INSERT INTO q51 VALUES (NULL, 5, 'c')"]:
        with pytest.raises(Exception):  # noqa: B017
            spark.sql(text)
        assert snapshot(wh, "cat51.q") == before, text
    for text in [
        "MERGE INTO q51 t USING (SELECT CAST(NULL AS BIGINT) AS id, 11L AS lsn, 'n' AS v) s ON t.id = s.id "
        "WHEN NOT MATCHED THEN INSERT *",
        "MERGE INTO q51 t USING (SELECT 1L AS id, CAST(NULL AS BIGINT) AS lsn, 'n' AS v) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET *",
        "UPDATE q51 SET lsn = NULL WHERE id = 1",
    ]:
        with pytest.raises(MereError):
            sql(spark, text).collect()
        assert snapshot(wh, "cat51.q") == before, text
    sql(spark, "UPDATE q51 SET lsn = lsn + 1, v = 'up' WHERE id = 1").collect()
    spark.sql("INSERT INTO q51 VALUES (2, 9, 'late')")  # below the stored sequence: stale
    assert mere_rows(wh, "cat51.q") == [(1, 11, "up"), (2, 10, "b")]
    assert sorted(tuple(r) for r in spark.sql("SELECT * FROM q51").collect()) == [(1, 11, "up"), (2, 10, "b")]
