"""``mere.integrations.spark.sql``: MERGE / UPDATE / DELETE text through the distributed MERGE, checked
statement by statement against DuckDB running the same text on the same rows; time travel and history;
every refused statement changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read

import mere
from mere import errors
from mere.integrations.spark import HISTORY_SCHEMA, METRICS_SCHEMA, WAREHOUSE_CONF, sql

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
ROWS = {
    "id": list(range(1, 21)),
    "day": ["d1" if i % 2 else "d2" for i in range(1, 21)],
    "qty": [i % 7 for i in range(1, 21)],
}
CHANGES = [  # id, day, qty, op
    (2, "d2", 5, "U"),
    (3, "d1", 1, "D"),
    (4, "d2", 2, "U"),
    (21, "d1", 9, "I"),
    (22, "d2", 4, "I"),
    (23, "d1", 0, "D"),  # a delete of a key the table lacks: inserted by nothing
    (7, "d1", 3, "U"),
]

# Each statement runs on DuckDB and on mere (through Spark) in turn; the tables must agree after each.
STATEMENTS = [
    "MERGE INTO s.orders t USING changes s ON t.id = s.id "
    "WHEN MATCHED AND s.op = 'D' THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET qty = t.qty + s.qty "
    "WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT (id, day, qty) VALUES (s.id, s.day, s.qty)",
    "UPDATE s.orders SET qty = qty * 2 WHERE day = 'd1' AND qty > 3",
    "DELETE FROM s.orders WHERE qty % 3 = 0",
    "MERGE INTO s.orders USING (SELECT id, day, qty + 100 AS qty FROM changes WHERE op = 'U') AS u "
    "ON orders.id = u.id WHEN MATCHED THEN UPDATE SET qty = u.qty",
    "MERGE INTO s.orders t USING (SELECT id, day, qty FROM changes) AS s USING (id) "
    "WHEN MATCHED AND t.qty > 100 THEN UPDATE SET qty = s.qty - 1 WHEN NOT MATCHED THEN INSERT BY NAME",
    "UPDATE s.orders AS o SET qty = NULL WHERE o.id IN (5, 6)",
    # Names in any case, as Spark SQL (and DuckDB) read them
    "MERGE INTO s.orders T USING changes S ON T.ID = S.Id WHEN MATCHED AND S.OP = 'D' THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET QTY = T.qty + S.QTY",
    "UPDATE s.orders SET Qty = QTY + 1 WHERE DAY = 'd2' AND Orders.ID < 10",
    "DELETE FROM s.orders AS O WHERE O.Qty = 4",
    "DELETE FROM s.orders WHERE qty IS NULL OR id > 21;",
]


def _duck(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return sorted(con.execute("SELECT id, day, qty FROM s.orders").fetchall())


def _mere_rows(t: mere.Table, version: int | None = None) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["day"], r["qty"]) for r in t.scan(version=version).to_arrow().to_pylist())


@pytest.fixture
def orders(spark: SparkSession, wh: str) -> Iterator[mere.Table]:
    t = mere.connect(wh).create_table("s.orders", SCHEMA, primary_key=["id"], partition_by=["day"], buckets=4)
    t.upsert(pa.table(ROWS, schema=SCHEMA))
    spark.createDataFrame(CHANGES, "id long, day string, qty long, op string").createOrReplaceTempView(
        "changes"
    )
    yield t
    spark.catalog.dropTempView("changes")


def test_statements_leave_the_rows_duckdb_leaves(spark: SparkSession, wh: str, orders: mere.Table) -> None:
    con = duckdb.connect(":memory:")
    con.execute("CREATE SCHEMA s")
    con.execute("CREATE TABLE s.orders (id BIGINT PRIMARY KEY, day VARCHAR, qty BIGINT)")
    con.executemany("INSERT INTO s.orders VALUES (?, ?, ?)", list(zip(ROWS["id"], ROWS["day"], ROWS["qty"])))
    con.execute("CREATE TABLE changes (id BIGINT, day VARCHAR, qty BIGINT, op VARCHAR)")
    con.executemany("INSERT INTO changes VALUES (?, ?, ?, ?)", CHANGES)
    assert _mere_rows(orders) == _duck(con)
    states = {orders.version: _duck(con)}
    for text in STATEMENTS:
        changed = con.execute(text).fetchall()[0][0]
        out = sql(spark, text, warehouse=wh)
        assert out.columns == [c.split()[0] for c in METRICS_SCHEMA.split(", ")]
        (metrics,) = out.collect()
        orders = mere.connect(wh).table("s.orders")
        assert _mere_rows(orders) == _duck(con), text
        assert metrics.inserted + metrics.updated + metrics.deleted == changed, text
        assert metrics.version == orders.version
        states[orders.version] = _duck(con)
        # Spark's read of the table agrees with the Python read.
        spark_rows = sorted(
            tuple(r) for r in read(spark, wh, "s.orders").select("id", "day", "qty").collect()
        )
        assert spark_rows == _mere_rows(orders)

    # Time travel: each version, by number and by its commit time (UTC, the session's zone).
    for version, want in states.items():
        got = sql(spark, f"SELECT id, day, qty FROM s.orders VERSION AS OF {version}", warehouse=wh)
        assert sorted(tuple(r) for r in got.collect()) == want
        assert _mere_rows(orders, version) == want
    history = orders.history()
    middle = history[3]
    when = middle.committed_at.replace(tzinfo=None).isoformat(sep=" ")
    got = sql(
        spark, f"SELECT id, day, qty FROM s.orders TIMESTAMP AS OF '{when}' WHERE qty > 0", warehouse=wh
    )
    assert sorted(tuple(r) for r in got.collect()) == [r for r in states[middle.version] if r[2] and r[2] > 0]
    # A query joining a mere table (aliased) with a Spark view, and a CTE named like nothing in mere.
    joined = sql(
        spark,
        "WITH c AS (SELECT id FROM changes) SELECT o.id, o.qty FROM s.orders VERSION AS OF 1 AS o "
        "JOIN c ON o.id = c.id ORDER BY o.id",
        warehouse=wh,
    )
    want_join = sorted((r[0], r[2]) for r in states[1] if r[0] in {c[0] for c in CHANGES})
    assert [tuple(r) for r in joined.collect()] == want_join

    described = sql(spark, "DESCRIBE HISTORY s.orders", warehouse=wh)
    assert described.schema.simpleString().startswith("struct<version:bigint,timestamp:timestamp")
    assert "summary" in HISTORY_SCHEMA
    rows = described.collect()
    assert [r.version for r in rows] == [s.version for s in reversed(history)]
    assert [r.operation for r in rows] == [s.operation for s in reversed(history)]
    assert rows[0].summary["read_version"] == str(history[-1].summary["read_version"])
    assert [
        r.version for r in sql(spark, "describe history `s`.`orders` LIMIT 2", warehouse=wh).collect()
    ] == [
        history[-1].version,
        history[-2].version,
    ]


def _files(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


REFUSED = [
    (
        "MERGE INTO s.orders t USING changes s ON t.id = WHEN MATCHED THEN DELETE",
        errors.FilterError,
        "statement",
    ),
    (
        "MERGE INTO s.nothing t USING changes s ON t.id = s.id WHEN MATCHED THEN DELETE",
        errors.NoSuchTable,
        "s.nothing",
    ),
    (
        "MERGE INTO s.orders t USING nowhere s ON t.id = s.id WHEN MATCHED THEN DELETE",
        errors.InvalidInput,
        "nor a",
    ),
    (
        "MERGE INTO s.orders t USING changes s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE",
        errors.InvalidInput,
        "local Table.merge",
    ),
    (
        "MERGE INTO s.orders t USING (SELECT * FROM changes) ON t.id = id WHEN MATCHED THEN DELETE",
        errors.FilterError,
        "needs an alias",
    ),
    (
        "MERGE INTO s.orders t USING (SELEC id FROM changes) AS s ON t.id = s.id WHEN MATCHED THEN DELETE",
        errors.FilterError,
        "Spark cannot parse",
    ),
    (
        "MERGE INTO s.orders t USING changes s ON t.id = s.id WHEN MATCHED THEN UPDATE SET id = s.id + 1",
        errors.InvalidInput,
        "key",
    ),
    (
        "UPDATE s.orders SET qty = 1 FROM changes WHERE orders.id = changes.id",
        errors.FilterError,
        "MERGE INTO",
    ),
    ("DELETE FROM s.orders WHERE id = 1 RETURNING id", errors.FilterError, "RETURNING"),
    ("UPDATE s.orders SET qty = nope + 1", errors.FilterError, "nope"),
    ("CREATE TABLE x (a INT)", errors.InvalidInput, "spark.sql"),
    ("INSERT INTO s.orders VALUES (1, 'd1', 1)", errors.InvalidInput, "mode\\('append'\\)"),
    ("SELECT * FROM s.unknown VERSION AS OF 1", errors.NoSuchTable, "mere catalog"),
    ("SELECT * FROM s.orders VERSION AS OF 99", errors.NoSuchVersion, None),
    ("SELECT qty FROM s.orders WHERE qty >", errors.FilterError, "parse"),
    ("DESCRIBE HISTORY s.unknown", errors.NoSuchTable, None),
]


@pytest.mark.parametrize(("text", "error", "words"), REFUSED, ids=[r[0][:40] for r in REFUSED])
def test_refused_statements_change_nothing(
    spark: SparkSession, wh: str, orders: mere.Table, text: str, error: type[Exception], words: str | None
) -> None:
    before = (orders.version, _mere_rows(orders), _files(orders), mere.connect(wh).tables("s"))
    with pytest.raises(error, match=words):
        sql(spark, text, warehouse=wh)
    t = mere.connect(wh).table("s.orders")
    assert (t.version, _mere_rows(t), _files(t), mere.connect(wh).tables("s")) == before


def test_a_failing_task_commits_nothing(spark: SparkSession, wh: str, orders: mere.Table) -> None:
    """Two source rows for one key: the task's MergeConflict reaches the driver, no file is left behind."""
    before = (orders.version, _mere_rows(orders), _files(orders))
    twice = spark.createDataFrame([(2, "d2", 1), (2, "d2", 2)], "id long, day string, qty long")
    with pytest.raises(errors.MergeConflict):
        sql(
            spark,
            "MERGE INTO s.orders t USING twice s ON t.id = s.id WHEN MATCHED THEN UPDATE SET qty = s.qty",
            warehouse=wh,
            twice=twice,
        )
    t = mere.connect(wh).table("s.orders")
    assert (t.version, _mere_rows(t), _files(t)) == before


def test_sources_keyless_tables_and_session_default(
    spark: SparkSession, wh: str, orders: mere.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DataFrame given by name; a mere table of the catalog as the source.
    df = spark.createDataFrame([(1, "d1", 50)], "id long, day string, qty long")
    out = sql(
        spark,
        "MERGE INTO s.orders t USING fresh f ON t.id = f.id WHEN MATCHED THEN UPDATE SET qty = f.qty",
        warehouse=wh,
        fresh=df,
    ).collect()[0]
    assert (out.updated, out.inserted) == (1, 0)
    with pytest.raises(errors.InvalidInput, match="Spark DataFrame"):
        sql(
            spark,
            "MERGE INTO s.orders t USING f ON t.id = f.id WHEN MATCHED THEN DELETE",
            warehouse=wh,
            f=[1],
        )
    with pytest.raises(errors.InvalidInput, match="only MERGE takes sources"):
        sql(spark, "DELETE FROM s.orders WHERE id = 1", warehouse=wh, f=df)
    cat = mere.connect(wh)
    other = cat.create_table("s.other", SCHEMA, primary_key=["id"])
    other.upsert(pa.table({"id": [1, 99], "day": ["d1", "d9"], "qty": [7, 9]}, schema=SCHEMA))
    sql(
        spark,
        "MERGE INTO s.orders t USING s.other o ON t.id = o.id WHEN NOT MATCHED THEN INSERT *",
        warehouse=wh,
    )
    assert (99, "d9", 9) in _mere_rows(cat.table("s.orders"))

    # A table without key: UPDATE and DELETE name the local way, nothing changes.
    log = cat.create_table("s.log", SCHEMA)
    log.append(pa.table(ROWS, schema=SCHEMA))
    with pytest.raises(errors.InvalidInput, match=r"local mere\.sql"):
        sql(spark, "DELETE FROM s.log WHERE qty > 2", warehouse=wh)
    assert cat.table("s.log").version == log.version

    # The session's default warehouse.
    spark.conf.set(WAREHOUSE_CONF, wh)
    try:
        out = sql(spark, "DELETE FROM s.orders WHERE id = 99").collect()[0]
        assert out.deleted == 1
        assert sql(spark, "SELECT count(*) AS n FROM s.orders").collect()[0].n == len(
            _mere_rows(cat.table("s.orders"))
        )
    finally:
        spark.conf.unset(WAREHOUSE_CONF)
    monkeypatch.delenv("MERE_WAREHOUSE", raising=False)
    with pytest.raises(errors.InvalidInput, match=WAREHOUSE_CONF.replace(".", "\\.")):
        sql(spark, "DELETE FROM s.orders WHERE id = 1")


def test_idempotency_key_commits_once(spark: SparkSession, wh: str, orders: mere.Table) -> None:
    text = "UPDATE s.orders SET qty = qty + 1 WHERE id = 2"
    first = sql(spark, text, warehouse=wh, idempotency_key="job-7").collect()[0]
    again = sql(spark, text, warehouse=wh, idempotency_key="job-7").collect()[0]
    assert (first.updated, first.already_committed) == (1, False)
    assert (again.version, again.already_committed) == (first.version, True)
    assert dict((r[0], r[2]) for r in _mere_rows(mere.connect(wh).table("s.orders")))[2] == ROWS["qty"][1] + 1


ROOT = Path(__file__).resolve().parents[3]


def test_readme_sql_example_runs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = (ROOT / "README.md").read_text().split("### SQL text on Spark", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    try:
        exec(compile(code, "README.md[SQL text on Spark]", "exec"), namespace)
    finally:
        spark.conf.unset(WAREHOUSE_CONF)
        spark.catalog.dropTempView("changes")
    orders = namespace["orders"]
    assert isinstance(orders, mere.Table)
    assert orders.to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "day": "d1", "qty": 30},
        {"id": 2, "day": "d1", "qty": 40},
    ]


def _state(spark: SparkSession, wh: str) -> tuple[Any, ...]:
    cat = mere.connect(wh)
    tables = sorted((n, cat.table(n).version, _mere_rows(cat.table(n))) for n in cat.tables())
    files = sorted(str(p) for p in Path(wh).rglob("*.parquet"))
    return sorted(t.name for t in spark.catalog.listTables()), tables, files


def test_spark_catalog_names_resolve_to_the_bound_mere_table(
    spark: SparkSession, wh: str, clean: None
) -> None:
    """``CREATE TABLE orders USING mere`` then MERGE / UPDATE / DELETE / time travel / history by Spark's
    names for it (current database, db.table, spark_catalog.db.table), with no warehouse given to sql()."""
    spark.sql(
        "CREATE TABLE orders (id BIGINT, day STRING, qty BIGINT) USING mere "
        f"OPTIONS (warehouse '{wh}', table 'sales.orders', primary_key 'id')"
    )
    spark.sql("INSERT INTO orders VALUES " + ", ".join(f"({i}, 'd{i % 2}', {i})" for i in range(1, 9)))
    t = mere.connect(wh).table("sales.orders")
    model = {i: (f"d{i % 2}", i) for i in range(1, 9)}
    states = {t.version: dict(model)}

    def check(out: Any, kind: str) -> None:
        (m,) = out.collect()
        assert m.statement == kind
        table = mere.connect(wh).table("sales.orders")
        assert _mere_rows(table) == sorted((k, d, q) for k, (d, q) in model.items())
        assert sorted(tuple(r) for r in spark.sql("SELECT * FROM orders").collect()) == _mere_rows(table)
        states[table.version] = dict(model)

    changes = spark.createDataFrame([(2, "d0", 20), (9, "d1", 90)], "id long, day string, qty long")
    out = sql(
        spark,
        "MERGE INTO orders t USING ch s ON t.id = s.id WHEN MATCHED THEN UPDATE SET qty = s.qty "
        "WHEN NOT MATCHED THEN INSERT *",
        ch=changes,
    )
    model.update({2: ("d0", 20), 9: ("d1", 90)})
    check(out, "MERGE")
    out = sql(spark, "UPDATE default.orders SET qty = qty + 1 WHERE day = 'd1'")
    model.update({k: (d, q + 1) for k, (d, q) in model.items() if d == "d1"})
    check(out, "UPDATE")
    out = sql(spark, "DELETE FROM spark_catalog.default.orders WHERE qty > 50")
    model = {k: r for k, r in model.items() if r[1] <= 50}
    check(out, "DELETE")
    out = sql(spark, "DELETE FROM `default`.`orders` WHERE id = 1")
    model.pop(1)
    check(out, "DELETE")
    for version, want in states.items():
        got = sql(spark, f"SELECT id, day, qty FROM orders VERSION AS OF {version}").collect()
        assert sorted(tuple(r) for r in got) == sorted((k, d, q) for k, (d, q) in want.items())
    history = [r.version for r in sql(spark, "DESCRIBE HISTORY spark_catalog.default.orders").collect()]
    assert history == [s.version for s in reversed(mere.connect(wh).table("sales.orders").history())]


def test_names_that_are_no_mere_table_are_refused_before_anything_runs(
    spark: SparkSession, wh: str, tmp_path: Path, clean: None
) -> None:
    cat = mere.connect(wh)
    cat.create_table("default.mine", SCHEMA, primary_key=["id"]).upsert(pa.table(ROWS, schema=SCHEMA))
    spark.sql("CREATE TABLE pq (id BIGINT, day STRING, qty BIGINT) USING parquet")
    spark.sql("CREATE TEMPORARY VIEW tv AS SELECT 1L AS id, 'd1' AS day, 1L AS qty")
    from pyspark.sql.session import SparkSession as S

    # A Spark entry of the mere format made around the hook (as Spark Connect would): it names no table.
    S.sql.__wrapped__(spark, "CREATE TABLE loose (id BIGINT, day STRING, qty BIGINT) USING mere")  # type: ignore[attr-defined]
    # The Spark table default.mine is another warehouse's default.other: the name is ambiguous.
    other = str(tmp_path / "other")
    mere.connect(other).create_table("default.other", SCHEMA, primary_key=["id"])
    spark.sql(f"CREATE TABLE mine USING mere OPTIONS (warehouse '{other}', table 'default.other')")
    before = _state(spark, wh), _state(spark, other)
    refused = [
        ("DELETE FROM pq WHERE id = 1", "format parquet, not a mere table"),
        ("UPDATE tv SET qty = 2", "is a Spark view"),
        ("MERGE INTO tv t USING pq s ON t.id = s.id WHEN MATCHED THEN DELETE", "is a Spark view"),
        ("DELETE FROM loose WHERE id = 1", "names no mere table.*DROP TABLE"),
        ("DESCRIBE HISTORY pq", "Spark keeps no history"),
        ("DELETE FROM default.mine WHERE id = 1", "ambiguous"),
        ("SELECT * FROM default.mine", "ambiguous"),
    ]
    for text, words in refused:
        with pytest.raises(errors.InvalidInput, match=words):
            sql(spark, text, warehouse=wh)
        assert (_state(spark, wh), _state(spark, other)) == before, text
    with pytest.raises(errors.NoSuchTable):
        sql(spark, "DELETE FROM default.nothing WHERE id = 1", warehouse=wh)
    with pytest.raises(errors.NoSuchTable, match="USING mere"):
        sql(spark, "SELECT * FROM pq VERSION AS OF 1", warehouse=wh)
    assert (_state(spark, wh), _state(spark, other)) == before
