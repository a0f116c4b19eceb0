"""Adversarial probes of Spark SQL statements on mere catalog tables (trial 50).

A Spark user's session: ``CREATE TABLE ... USING mere`` with a composite key, ``PARTITIONED BY`` and
``TBLPROPERTIES``; ``INSERT INTO`` / ``INSERT OVERWRITE`` (static, dynamic, one partition) through
``spark.sql``; ``MERGE INTO`` / ``UPDATE`` / ``DELETE`` / ``VERSION AS OF`` / ``TIMESTAMP AS OF`` /
``DESCRIBE HISTORY`` through ``mere.integrations.spark.sql`` by the Spark name. Every statement runs on
DuckDB too (the oracle) and the tables must agree after each. DDL clauses mere cannot keep must be refused
before anything is made, never dropped silently. One Spark session (the conftest fixture).
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")

import duckdb
from pyspark.sql import SparkSession

import mere
from mere.errors import MereError
from mere.integrations.spark import describe, sql

NAME = "t50_st"
MERE_NAME = "ns50.st"
COLS = "a BIGINT, b STRING, p STRING, v BIGINT"
SPARK_SCHEMA = "a long, b string, p string, v long"
PARTS = ["p1", "p2", "p3", None]


def mere_rows(wh: str, name: str, version: int | None = None) -> list[tuple[Any, ...]]:
    t = mere.connect(wh).table(name)
    return sorted((tuple(r.values()) for r in t.scan(version=version).to_arrow().to_pylist()), key=repr)


def spark_rows(spark: SparkSession, query: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in spark.sql(query).collect()), key=repr)


def duck_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return sorted(con.execute(f"SELECT a, b, p, v FROM {NAME}").fetchall(), key=repr)


def state(spark: SparkSession, wh: str) -> tuple[Any, ...]:
    """What a refused statement must leave as it was: Spark's tables, mere's tables, versions and rows."""
    cat = mere.connect(wh)
    tables = sorted((n, cat.table(n).version, mere_rows(wh, n)) for n in cat.tables())
    return sorted(t.name for t in spark.catalog.listTables()), tables


def lit(x: Any) -> str:
    return "NULL" if x is None else (f"'{x}'" if isinstance(x, str) else str(x))


def values(rows: list[tuple[Any, ...]]) -> str:
    return ", ".join("(" + ", ".join(lit(x) for x in r) + ")" for r in rows)


def unique_rows(
    rng: random.Random, n: int, part: str | None = "any", v_null: bool = True
) -> list[tuple[Any, ...]]:
    rows: dict[tuple[int, str], tuple[Any, ...]] = {}
    for _ in range(n):
        a, b = rng.randrange(1, 9), rng.choice("xy")
        p = rng.choice(PARTS) if part == "any" else part
        v = None if v_null and rng.random() < 0.1 else rng.randrange(-5, 20)
        rows[(a, b)] = (a, b, p, v)
    return list(rows.values())


MERGES = [
    f"MERGE INTO {NAME} t USING src s ON t.a = s.a AND t.b = s.b "
    "WHEN MATCHED AND s.v < 0 THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET v = t.v + s.v "
    "WHEN NOT MATCHED AND s.v >= 0 THEN INSERT (a, b, p, v) VALUES (s.a, s.b, s.p, s.v)",
    # A partition column set by the MERGE: the row moves to its new partition (table-wide keys).
    f"MERGE INTO {NAME} AS t USING src AS s ON t.b = s.b AND s.a = t.a "
    "WHEN MATCHED AND t.p IS DISTINCT FROM s.p THEN UPDATE SET p = s.p, v = s.v * 10 "
    "WHEN NOT MATCHED THEN INSERT *",
    # An ON with a condition besides the key: a pair failing it is not matched (and not inserted here).
    f"MERGE INTO {NAME} t USING src s ON t.a = s.a AND t.b = s.b AND s.v > 2 "
    "WHEN MATCHED THEN UPDATE SET v = s.v - t.v "
    "WHEN NOT MATCHED AND s.v > 2 AND s.p IS NOT NULL THEN INSERT (a, b, v, p) VALUES (s.a, s.b, s.v, s.p)",
    # USING (a, b) pairs the key columns, a bare a names the pair; INSERT BY NAME.
    f"MERGE INTO {NAME} t USING src s USING (a, b) WHEN MATCHED AND t.v IS NULL THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET v = s.v + a WHEN NOT MATCHED THEN INSERT BY NAME",
]
UPDATES = [
    f"UPDATE {NAME} SET v = v * 2 + 1 WHERE p = 'p1' AND v > 3",
    f"UPDATE {NAME} SET v = CASE WHEN v IS NULL THEN 0 ELSE v - 1 END WHERE a % 2 = 0",
    f"UPDATE {NAME} SET p = 'p3' WHERE b = 'y' AND p IS NULL",
]
DELETES = [
    f"DELETE FROM {NAME} WHERE v % 3 = 0",
    f"DELETE FROM {NAME} WHERE p IS NULL OR (b = 'x' AND a > 6)",
]
KINDS = [
    "insert",
    "merge",
    "update",
    "dynamic",
    "delete",
    "merge",
    "partition",
    "insert",
    "update",
    "static",
    "merge",
    "merge",
    "delete",
]


def test_a_spark_sql_session_leaves_the_rows_duckdb_leaves(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE {NAME} ({COLS}) USING mere OPTIONS (warehouse '{wh}', table '{MERE_NAME}', "
        "primary_key 'a,b') PARTITIONED BY (p) TBLPROPERTIES ('buckets' = '3')"
    )
    spec = mere.connect(wh).table(MERE_NAME).spec
    assert (spec.primary_key, spec.partition_by, spec.buckets) == (("a", "b"), ("p",), 3)
    described = [tuple(r)[:3] for r in spark.sql(f"DESCRIBE TABLE {NAME}").collect()][:4]
    assert described == [
        ("a", "bigint", "mere primary key (3 buckets)"),
        ("b", "string", "mere primary key (3 buckets)"),
        ("p", "string", "mere partition column"),
        ("v", "bigint", None),
    ]
    con = duckdb.connect(":memory:")
    con.execute(f"CREATE TABLE {NAME} (a BIGINT, b VARCHAR, p VARCHAR, v BIGINT, PRIMARY KEY (a, b))")
    states = {mere.connect(wh).table(MERE_NAME).version: []}
    rng = random.Random(50)
    counters = {"merge": 0, "update": 0, "delete": 0}
    for step, kind in enumerate(KINDS):
        metrics = None
        if kind == "insert":
            rows = unique_rows(rng, 6)
            spark.sql(f"INSERT INTO {NAME} VALUES {values(rows)}")
            con.execute(f"INSERT OR REPLACE INTO {NAME} VALUES {values(rows)}")
            text = "INSERT"
        elif kind == "static":
            rows = unique_rows(rng, 7)
            spark.sql(f"INSERT OVERWRITE {NAME} VALUES {values(rows)}")
            con.execute(f"DELETE FROM {NAME}")
            con.execute(f"INSERT INTO {NAME} VALUES {values(rows)}")
            text = "INSERT OVERWRITE"
        elif kind == "dynamic":
            rows = unique_rows(rng, 4)
            spark.sql(
                f"INSERT OVERWRITE {NAME} WITH ('partitionOverwriteMode' = 'dynamic') "
                f"SELECT * FROM VALUES {values(rows)} AS s(a, b, p, v)"
            )
            for part in {r[2] for r in rows}:
                con.execute(f"DELETE FROM {NAME} WHERE p IS NOT DISTINCT FROM {lit(part)}")
            con.execute(f"INSERT OR REPLACE INTO {NAME} VALUES {values(rows)}")
            text = "INSERT OVERWRITE dynamic"
        elif kind == "partition":
            rows = unique_rows(rng, 3, part="p2")
            spark.sql(
                f"INSERT OVERWRITE {NAME} WITH ('partition' = '{{\"p\": \"p2\"}}') VALUES {values(rows)}"
            )
            con.execute(f"DELETE FROM {NAME} WHERE p = 'p2'")
            con.execute(f"INSERT OR REPLACE INTO {NAME} VALUES {values(rows)}")
            text = "INSERT OVERWRITE partition"
        else:
            pool = {"merge": MERGES, "update": UPDATES, "delete": DELETES}[kind]
            text = pool[counters[kind] % len(pool)]
            counters[kind] += 1
            if kind == "merge":
                src = unique_rows(rng, 6, v_null=False)
                spark.createDataFrame(src, SPARK_SCHEMA).createOrReplaceTempView("src")
                con.execute("CREATE OR REPLACE TABLE src (a BIGINT, b VARCHAR, p VARCHAR, v BIGINT)")
                con.execute(f"INSERT INTO src VALUES {values(src)}")
            changed = con.execute(text).fetchall()[0][0]
            (metrics,) = sql(spark, text).collect()
            assert metrics.inserted + metrics.updated + metrics.deleted == changed, (step, text)
        t = mere.connect(wh).table(MERE_NAME)
        want = duck_rows(con)
        assert mere_rows(wh, MERE_NAME) == want, (step, text)
        assert spark_rows(spark, f"SELECT a, b, p, v FROM {NAME}") == want, (step, text)
        if metrics is not None:  # a statement that changes no row commits nothing
            assert metrics.version == (t.version if metrics.version is not None else None), (step, text)
        states[t.version] = want

    # Time travel by Spark's name: every version by number, through sql() and the read option.
    t = mere.connect(wh).table(MERE_NAME)
    for version, want in sorted(states.items()):
        assert mere_rows(wh, MERE_NAME, version) == want, version
        if version % 3 == 1:  # a sample through Spark (each read costs seconds)
            got = sql(spark, f"SELECT a, b, p, v FROM {NAME} VERSION AS OF {version}").collect()
            assert sorted((tuple(r) for r in got), key=repr) == want, version
        if version % 5 == 2:
            read = spark.read.format("mere").option("warehouse", wh).option("versionAsOf", str(version))
            assert sorted((tuple(r) for r in read.load(MERE_NAME).collect()), key=repr) == want, version
    # By time: halfway between two commits reads the earlier one.
    history = t.history()
    for earlier, later in itertools.pairwise(history[3:5]):
        when = earlier.committed_at + (later.committed_at - earlier.committed_at) / 2
        text = when.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")
        got = sql(spark, f"SELECT * FROM {NAME} TIMESTAMP AS OF '{text}'").collect()
        assert sorted((tuple(r) for r in got), key=repr) == states[earlier.version], text
    hist = sql(spark, f"DESCRIBE HISTORY {NAME}").collect()
    assert [(r.version, r.operation) for r in hist] == [(s.version, s.operation) for s in reversed(history)]
    info = {r.key: r.value for r in describe(spark, NAME).collect()}
    assert (info["primary_key"], info["partition_by"], info["buckets"]) == ("a,b", "p", "3")
    assert info["table_version"] == str(t.version)


# --- Statements that must be refused mid-session, changing nothing. ---


def _refused_statements() -> list[tuple[str, str]]:
    run_spark = "spark"
    run_mere = "mere"
    return [
        # The ON of a MERGE must pair every key column.
        (
            f"MERGE INTO {NAME} t USING src s ON t.a = s.a WHEN MATCHED THEN UPDATE SET v = s.v",
            run_mere,
        ),
        (f"UPDATE {NAME} SET b = 'z' WHERE a = 1", run_mere),
        (
            f"MERGE INTO {NAME} t USING src s ON t.a = s.a AND t.b = s.b WHEN MATCHED THEN UPDATE SET a = 9",
            run_mere,
        ),
        (
            f"MERGE INTO {NAME} t USING src s ON t.a = s.a AND t.b = s.b "
            "WHEN NOT MATCHED BY SOURCE THEN DELETE",
            run_mere,
        ),
        (f"DELETE FROM {NAME} WHERE nope = 1", run_mere),
        (f"SELECT * FROM {NAME} VERSION AS OF 99", run_mere),
        (f"SELECT * FROM {NAME} TIMESTAMP AS OF '2001-01-01 00:00:00'", run_mere),
        # A row outside the one partition named.
        (
            f"INSERT OVERWRITE {NAME} WITH ('partition' = '{{\"p\": \"p1\"}}') VALUES (1, 'x', 'p2', 1)",
            run_spark,
        ),
        (
            f"INSERT OVERWRITE {NAME} WITH ('partition' = '{{\"q\": \"p1\"}}') VALUES (1, 'x', 'p1', 1)",
            run_spark,
        ),
        (
            f"INSERT OVERWRITE {NAME} WITH ('partitionOverwriteMode' = 'sometimes') VALUES (1, 'x', 'p1', 1)",
            run_spark,
        ),
        # Overwrite options on an INSERT INTO, and a layout option unlike the table's.
        (
            f"INSERT INTO {NAME} WITH ('partitionOverwriteMode' = 'dynamic') VALUES (1, 'x', 'p1', 1)",
            run_spark,
        ),
        (f"INSERT INTO {NAME} WITH ('partition' = '{{\"p\": \"p1\"}}') VALUES (1, 'x', 'p1', 1)", run_spark),
        (f"INSERT INTO {NAME} WITH ('primary_key' = 'a') VALUES (1, 'x', 'p1', 1)", run_spark),
        (f"INSERT INTO {NAME} WITH ('buckets' = '4') VALUES (1, 'x', 'p1', 1)", run_spark),
        # Spark's own refusals: partition management, CREATE TABLE LIKE.
        (f"SHOW PARTITIONS {NAME}", run_spark),
        (f"CREATE TABLE t50_like LIKE {NAME}", run_spark),
        (f"CREATE TABLE t50_like LIKE {NAME} USING mere", run_spark),
    ]


def test_statements_mere_cannot_honour_change_nothing(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE {NAME} ({COLS}) USING mere OPTIONS (warehouse '{wh}', table '{MERE_NAME}', "
        "primary_key 'a,b') PARTITIONED BY (p) TBLPROPERTIES ('buckets' = '2')"
    )
    spark.sql(f"INSERT INTO {NAME} VALUES (1, 'x', 'p1', 1), (2, 'y', 'p2', 2), (3, 'x', NULL, 3)")
    spark.createDataFrame([(1, "x", "p1", 5)], SPARK_SCHEMA).createOrReplaceTempView("src")
    before = state(spark, wh)
    for text, runner in _refused_statements():
        with pytest.raises(Exception) as refusal:
            if runner == "mere":
                sql(spark, text).collect()
            else:
                spark.sql(text).collect()
        if runner == "mere":
            assert isinstance(refusal.value, MereError), (text, refusal.value)
        assert state(spark, wh) == before, text
    assert spark_rows(spark, f"SELECT * FROM {NAME}") == before[1][0][2]


# --- DDL: what a CREATE TABLE says is kept, or the CREATE is refused. ---


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} TBLPROPERTIES ('primary_key' = 'v')",
            "twice",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} TBLPROPERTIES ('buckets' = '0')",
            "buckets",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere OPTIONS (warehouse '{wh}') "
            "TBLPROPERTIES ('buckets' = '4')",
            "primary-key",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} "
            "TBLPROPERTIES ('merge_operators' = '{{\"id\": \"sum\"}}')",
            "key",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v STRING) USING mere {o} "
            "TBLPROPERTIES ('merge_operators' = '{{\"v\": \"sum\"}}')",
            "numeric",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} TBLPROPERTIES ('merge_operators' = '{{v: sum')",
            "merge_operators",
        ),
        ("CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} PARTITIONED BY (nope)", "nope"),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} PARTITIONED BY (v) "
            "TBLPROPERTIES ('partition_by' = 'id')",
            "disagree",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere OPTIONS (warehouse '{wh}', primary_key 'k')",
            "'k'",
        ),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {o} TBLPROPERTIES ('sequence_by' = 'id')",
            "sequence",
        ),
        # Binding an existing mere table with another column list (types, order) or another layout.
        ("CREATE TABLE t50_c (id BIGINT, v INT) USING mere {bind}", "columns"),
        ("CREATE TABLE t50_c (v BIGINT, id BIGINT) USING mere {bind}", "columns"),
        ("CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {bind} PARTITIONED BY (v)", "partition"),
        (
            "CREATE TABLE t50_c (id BIGINT, v BIGINT) USING mere {bind} TBLPROPERTIES ('buckets' = '3')",
            "buckets",
        ),
    ],
)
def test_create_table_layouts_mere_cannot_make_are_refused(
    spark: SparkSession, wh: str, clean: None, statement: str, error: str
) -> None:
    import pyarrow as pa

    mere.connect(wh).create_table(
        "ns50.have", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id"
    )
    before = state(spark, wh)
    o = f"OPTIONS (warehouse '{wh}', primary_key 'id')"
    bind = f"OPTIONS (warehouse '{wh}', primary_key 'id', table 'ns50.have')"
    text = statement.format(o=o, wh=wh, bind=bind)
    with pytest.raises(MereError, match=error):
        spark.sql(text)
    assert state(spark, wh) == before


def _created(spark: SparkSession, wh: str, name: str) -> bool:
    return spark.catalog.tableExists(name) or f"default.{name}" in mere.connect(wh).tables()


CLAUSES = {
    "primary_key_constraint": "CREATE TABLE t50_k (id BIGINT, v BIGINT, PRIMARY KEY (id)) USING mere {o}",
    "inline_primary_key": "CREATE TABLE t50_k (id BIGINT PRIMARY KEY, v BIGINT) USING mere {o}",
    "check_constraint": "CREATE TABLE t50_k (id BIGINT, v BIGINT, CONSTRAINT pos CHECK (v > 0)) USING mere {o}",
    "generated_column": "CREATE TABLE t50_k (id BIGINT, v BIGINT, w BIGINT GENERATED ALWAYS AS (v * 2)) "
    "USING mere {o}",
    "identity_column": "CREATE TABLE t50_k (id BIGINT GENERATED ALWAYS AS IDENTITY, v BIGINT) USING mere {o}",
    "column_comment": "CREATE TABLE t50_k (id BIGINT, v BIGINT COMMENT 'the value') USING mere {o}",
}


def _honoured(spark: SparkSession, wh: str, clause: str) -> None:
    """The clause did what Spark says it does, on the table the CREATE made."""
    t = mere.connect(wh).table("default.t50_k")
    if clause in ("primary_key_constraint", "inline_primary_key"):
        assert t.spec.primary_key == ("id",), f"{clause} dropped: the table has key {t.spec.primary_key}"
    elif clause == "check_constraint":
        spark.sql("INSERT INTO t50_k VALUES (1, 1)")
        with pytest.raises(Exception):  # noqa: B017
            spark.sql("INSERT INTO t50_k VALUES (2, -5)")
        assert mere_rows(wh, "default.t50_k") == [(1, 1)]
    elif clause == "generated_column":
        spark.sql("INSERT INTO t50_k (id, v) VALUES (1, 5)")
        assert mere_rows(wh, "default.t50_k") == [(1, 5, 10)]
    elif clause == "identity_column":
        spark.sql("INSERT INTO t50_k (v) VALUES (5)")
        assert all(r[0] is not None for r in mere_rows(wh, "default.t50_k"))
    else:
        comments = {r[0]: r[2] for r in spark.sql("DESCRIBE TABLE t50_k").collect()}
        assert comments.get("v") == "the value", comments


@pytest.mark.parametrize(
    "clause",
    list(CLAUSES),
)
def test_a_create_table_clause_is_kept_or_refused(
    spark: SparkSession, wh: str, clean: None, clause: str
) -> None:
    mere.connect(wh)
    before = state(spark, wh)
    o = f"OPTIONS (warehouse '{wh}', primary_key 'id')"
    if clause in ("primary_key_constraint", "inline_primary_key"):
        o = f"OPTIONS (warehouse '{wh}')"
    if clause == "identity_column":
        o = f"OPTIONS (warehouse '{wh}', primary_key 'v')"
    try:
        spark.sql(CLAUSES[clause].format(o=o))
    except MereError:
        assert state(spark, wh) == before
        return
    _honoured(spark, wh, clause)


# --- ALTER TABLE: what Spark's entry can change without losing its mere table. ---


def test_rename_and_table_properties_keep_the_binding(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE t50_a ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns50.a', primary_key 'a,b') "
        "PARTITIONED BY (p)"
    )
    spark.sql("INSERT INTO t50_a VALUES (1, 'x', 'p1', 1)")
    spark.sql("ALTER TABLE t50_a RENAME TO t50_b")
    for properties in [
        "'table' = 'ns50.other'",
        "'buckets' = '8'",
        "'primary_key' = 'v'",
        "'write.compression' = 'zstd'",
    ]:
        # Spark's entry alone would change (found accepted and ignored in trial 51): refused, nothing changed
        with pytest.raises(Exception, match="would change only Spark's entry"):
            spark.sql(f"ALTER TABLE t50_b SET TBLPROPERTIES ({properties}, 'note' = 'n')")
    with pytest.raises(Exception, match="would change only Spark's entry"):
        spark.sql("ALTER TABLE t50_b UNSET TBLPROPERTIES ('buckets')")
    spark.sql("ALTER TABLE t50_b SET TBLPROPERTIES ('note' = 'the user''s own')")  # Spark's entry keeps it
    spark.sql("INSERT INTO t50_b VALUES (2, 'y', 'p2', 2)")
    sql(spark, "UPDATE t50_b SET v = v + 10 WHERE a = 1")
    want = [(1, "x", "p1", 11), (2, "y", "p2", 2)]
    assert mere_rows(wh, "ns50.a") == want
    assert spark_rows(spark, "SELECT * FROM t50_b") == want
    assert mere.connect(wh).tables() == ["ns50.a"]
    t = mere.connect(wh).table("ns50.a")
    assert (t.spec.primary_key, t.spec.buckets) == (("a", "b"), 8)  # mere's default
    info = {r.key: r.value for r in describe(spark, "t50_b").collect()}
    assert (info["table"], info["primary_key"]) == ("ns50.a", "a,b")


@pytest.mark.parametrize(
    "how",
    [
        "args",
        "comment",
        "plain",
    ],
)
def test_alter_table_add_columns_is_refused_however_written(
    spark: SparkSession, wh: str, clean: None, how: str
) -> None:
    spark.sql(
        f"CREATE TABLE t50_al ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns50.al', primary_key 'a,b')"
    )
    spark.sql("INSERT INTO t50_al VALUES (1, 'x', 'p1', 1)")
    before = state(spark, wh)
    try:
        if how == "args":
            spark.sql("ALTER TABLE t50_al ADD COLUMNS (w BIGINT COMMENT :c)", args={"c": "x"})
        elif how == "comment":
            spark.sql("/* add one */ ALTER TABLE t50_al ADD COLUMNS (w BIGINT)")
        else:
            spark.sql("ALTER TABLE t50_al ADD COLUMNS (w BIGINT)")
    except Exception:
        pass
    assert state(spark, wh) == before
    assert spark_rows(spark, "SELECT * FROM t50_al") == [(1, "x", "p1", 1)]
    assert spark.table("t50_al").columns == ["a", "b", "p", "v"]


def test_a_create_table_after_a_comment_makes_the_mere_table(
    spark: SparkSession, wh: str, clean: None
) -> None:
    mere.connect(wh)
    before = state(spark, wh)
    try:
        spark.sql(
            f"/* the orders */ CREATE TABLE t50_cm (id BIGINT, v BIGINT) USING mere "
            f"OPTIONS (warehouse '{wh}', primary_key 'id')"
        )
    except MereError:
        assert state(spark, wh) == before
        return
    spark.sql("INSERT INTO t50_cm VALUES (1, 1)")
    spark.sql("INSERT INTO t50_cm VALUES (1, 2)")
    assert mere_rows(wh, "default.t50_cm") == [(1, 2)]


# --- Table kinds: sequence_by, merge operators and CDC tables through INSERT statements. ---


def test_inserts_follow_the_tables_merge_rules(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE t50_sq (id BIGINT, ts BIGINT, v STRING) USING mere OPTIONS (warehouse '{wh}', "
        "primary_key 'id', sequence_by 'ts')"
    )
    model: dict[int, tuple[int, str]] = {}
    rng = random.Random(7)
    for _ in range(4):
        rows = [(rng.randrange(4), rng.randrange(10), f"s{rng.randrange(99)}") for _ in range(5)]
        spark.sql(f"INSERT INTO t50_sq VALUES {values(rows)}")
        for k, ts, v in rows:  # highest sequence wins; ties: the later row
            if k not in model or ts >= model[k][0]:
                model[k] = (ts, v)
        assert mere_rows(wh, "default.t50_sq") == sorted(((k, *tv) for k, tv in model.items()), key=repr)
    # merge operators: sum folds every INSERTed row, and INSERT OVERWRITE starts again from its rows.
    spark.sql(
        f"CREATE TABLE t50_sum (id BIGINT, g STRING, n BIGINT) USING mere OPTIONS (warehouse '{wh}', "
        "primary_key 'id') TBLPROPERTIES ('merge_operators' = '{\"n\": \"sum\"}')"
    )
    sums: dict[int, list[Any]] = {}
    for _ in range(3):
        rows = [(rng.randrange(3), rng.choice("gh"), rng.randrange(-3, 9)) for _ in range(4)]
        spark.sql(f"INSERT INTO t50_sum VALUES {values(rows)}")
        for k, g, n in rows:
            sums[k] = [g, (sums[k][1] if k in sums else 0) + n]
    assert mere_rows(wh, "default.t50_sum") == sorted(((k, g, n) for k, (g, n) in sums.items()), key=repr)
    spark.sql("INSERT OVERWRITE t50_sum VALUES (5, 'g', 1), (5, 'g', 2)")
    assert mere_rows(wh, "default.t50_sum") == [(5, "g", 3)]
    # A CDC table: Spark's entry has no change column, so an INSERT carrying one is refused by Spark.
    spark.sql(
        f"CREATE TABLE t50_cdc (id BIGINT, v STRING, op STRING) USING mere OPTIONS (warehouse '{wh}', "
        "primary_key 'id', cdc_column 'op')"
    )
    before = state(spark, wh)
    with pytest.raises(Exception):  # noqa: B017
        spark.sql("INSERT INTO t50_cdc VALUES (1, 'a', 'I')")
    assert state(spark, wh) == before


def test_ctas_with_layout_and_time_travel_of_its_first_version(
    spark: SparkSession, wh: str, clean: None
) -> None:
    spark.sql(
        f"CREATE TABLE t50_ct USING mere OPTIONS (warehouse '{wh}', table 'ns50.ct', primary_key 'a,b') "
        "PARTITIONED BY (p) TBLPROPERTIES ('buckets' = '2', 'merge_operators' = '{\"v\": \"max\"}') "
        "AS SELECT id % 4 AS a, IF(id % 2 = 0, 'x', 'y') AS b, CONCAT('p', CAST(id % 3 AS STRING)) AS p, "
        "id AS v FROM range(12) WHERE id % 4 <> id % 2 OR id < 6"
    )
    con = duckdb.connect(":memory:")
    src = "SELECT id % 4 AS a, IF(id % 2 = 0, 'x', 'y') AS b, CONCAT('p', CAST(id % 3 AS VARCHAR)) AS p, id AS v "
    src += "FROM range(12) t(id) WHERE id % 4 <> id % 2 OR id < 6"
    # A merge operator other than last makes keys partition-scoped (docs/concepts.md, Table-wide keys): max
    # per key and partition.
    want: dict[tuple[int, str, str], int] = {}
    for a, b, p, v in con.execute(src).fetchall():
        want[(a, b, p)] = max(want.get((a, b, p), v), v)
    t = mere.connect(wh).table("ns50.ct")
    assert (t.spec.primary_key, t.spec.partition_by, t.spec.buckets) == (("a", "b"), ("p",), 2)
    assert t.spec.key_scope == "partition"
    got = mere_rows(wh, "ns50.ct")
    assert got == sorted(((*k, v) for k, v in want.items()), key=repr)
    first = t.version
    spark.sql("INSERT INTO t50_ct VALUES (0, 'x', 'p0', 100)")
    old = sql(spark, f"SELECT * FROM t50_ct VERSION AS OF {first}").collect()
    assert sorted((tuple(r) for r in old), key=repr) == got
    assert [r[3] for r in mere_rows(wh, "ns50.ct") if r[:3] == (0, "x", "p0")] == [100]


def test_a_view_over_a_table_and_drop_keep_mere_data(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE t50_d ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns50.d', primary_key 'a,b')"
    )
    spark.sql("INSERT INTO t50_d VALUES (1, 'x', 'p1', 1), (2, 'x', 'p1', 2)")
    spark.sql("CREATE TEMPORARY VIEW t50_dv AS SELECT a, v FROM t50_d WHERE v > 1")
    sql(spark, "UPDATE t50_d SET v = v + 5 WHERE a = 1")
    assert spark_rows(spark, "SELECT * FROM t50_dv") == [(1, 6), (2, 2)]
    version = mere.connect(wh).table("ns50.d").version
    spark.sql("DROP TABLE t50_d")
    assert mere.connect(wh).table("ns50.d").version == version
    with pytest.raises(Exception):  # noqa: B017 - Spark's: the view's table is gone
        spark.sql("SELECT * FROM t50_dv").collect()
    spark.sql(f"CREATE TABLE t50_d USING mere OPTIONS (warehouse '{wh}', table 'ns50.d')")
    assert spark_rows(spark, "SELECT * FROM t50_d") == [(1, "x", "p1", 6), (2, "x", "p1", 2)]


# --- Time travel through sql(): query shapes, and read points that are no version. ---


@pytest.fixture
def three_versions(spark: SparkSession, wh: str, clean: None) -> dict[int, list[tuple[Any, ...]]]:
    spark.sql(
        f"CREATE TABLE t50_tt (a BIGINT, v BIGINT) USING mere OPTIONS (warehouse '{wh}', primary_key 'a')"
    )
    spark.sql("INSERT INTO t50_tt VALUES (1, 10), (2, 20)")
    spark.sql("INSERT INTO t50_tt VALUES (1, 11), (3, 30)")
    spark.sql("INSERT INTO t50_tt VALUES (2, 22)")
    return {1: [(1, 10), (2, 20)], 2: [(1, 11), (2, 20), (3, 30)], 3: [(1, 11), (2, 22), (3, 30)]}


def test_time_travel_query_shapes(spark: SparkSession, wh: str, three_versions: dict[int, Any]) -> None:
    s = three_versions

    def q(text: str) -> list[tuple[Any, ...]]:
        return sorted((tuple(r) for r in sql(spark, text).collect()), key=repr)

    def joined(x: list[tuple[Any, ...]], y: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        right = dict(y)
        return sorted((a, v, right[a]) for a, v in x if a in right)

    # Two versions of one table in one query, each read at its own version.
    assert q(
        "SELECT x.a, x.v, y.v FROM t50_tt VERSION AS OF 1 x JOIN t50_tt VERSION AS OF 2 y ON x.a = y.a"
    ) == (joined(s[1], s[2]))
    assert q("SELECT x.a, x.v, y.v FROM t50_tt VERSION AS OF 1 x JOIN t50_tt y ON x.a = y.a") == joined(
        s[1], s[3]
    )
    assert q(
        "SELECT a, v FROM t50_tt VERSION AS OF 1 UNION ALL SELECT a, v FROM t50_tt VERSION AS OF 3"
    ) == sorted(s[1] + s[3])
    assert q("SELECT * FROM (SELECT * FROM t50_tt VERSION AS OF 2) z WHERE v > 10") == [
        (1, 11),
        (2, 20),
        (3, 30),
    ]
    assert q("select * from t50_tt version as of 1") == s[1]
    # Text that only looks like time travel, and a CTE that shadows the table's name.
    assert q("SELECT 'FROM t50_tt VERSION AS OF 1' AS s, count(*) FROM t50_tt VERSION AS OF 2") == [
        ("FROM t50_tt VERSION AS OF 1", 3)
    ]
    assert q("WITH t50_tt AS (SELECT 99L AS a, 99L AS v) SELECT * FROM t50_tt") == [(99, 99)]
    assert q("SELECT * FROM t50_tt TIMESTAMP AS OF '2999-01-01T00:00:00+02:00'") == s[3]
    history = [r.version for r in sql(spark, "DESCRIBE HISTORY t50_tt LIMIT 2").collect()]
    assert history == [3, 2]
    before = state(spark, wh)
    for text in [
        "SELECT * FROM t50_tt VERSION AS OF 1.5",
        "SELECT * FROM t50_tt VERSION AS OF +1",
        "SELECT * FROM t50_tt VERSION AS OF 4",
        "SELECT * FROM t50_tt TIMESTAMP AS OF 'garbage'",
        "SELECT * FROM t50_tt TIMESTAMP AS OF '2026-13-45'",
        "SELECT * FROM t50_tt TIMESTAMP AS OF current_timestamp()",
        "SELECT * FROM t50_tt VERSION AS OF 1 VERSION AS OF 2",
        "DESCRIBE HISTORY t50_tt WHERE version = 1",
    ]:
        with pytest.raises(MereError):
            sql(spark, text).collect()
    assert state(spark, wh) == before


def test_a_quoted_version_is_read_or_refused_typed(
    spark: SparkSession, wh: str, three_versions: dict[int, Any]
) -> None:
    try:
        got = sql(spark, "SELECT * FROM t50_tt VERSION AS OF '1'").collect()
    except MereError:
        return
    assert sorted(tuple(r) for r in got) == three_versions[1]


@pytest.mark.parametrize("limit", ["x", "-1"])
def test_describe_history_with_a_limit_that_is_no_count_is_refused(
    spark: SparkSession, wh: str, three_versions: dict[int, Any], limit: str
) -> None:
    with pytest.raises(MereError):
        rows = sql(spark, f"DESCRIBE HISTORY t50_tt LIMIT {limit}").collect()
        print(f"LIMIT {limit} gave versions {[r.version for r in rows]}")
