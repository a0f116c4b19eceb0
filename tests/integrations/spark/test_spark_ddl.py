"""Spark catalog tables of the mere format: CREATE TABLE ... USING mere, INSERT, CTAS, saveAsTable, DROP,
DESCRIBE, views that follow writes; each against the Python read of the same table and a dict model."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import mere
from mere.errors import InvalidInput, TableExists
from mere.integrations.spark import describe

COLS = "id BIGINT, day STRING, v BIGINT"


def python_rows(wh: str, name: str) -> list[dict[str, Any]]:
    return sorted(mere.connect(wh).table(name).scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def spark_rows(spark: SparkSession, query: str) -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in spark.sql(query).collect()), key=lambda r: r["id"])


def model_rows(model: dict[int, tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"id": k, "day": d, "v": v} for k, (d, v) in sorted(model.items())]


def values(rows: dict[int, tuple[str, int]]) -> str:
    return ", ".join(f"({k}, '{d}', {v})" for k, (d, v) in sorted(rows.items()))


def state(spark: SparkSession, wh: str) -> tuple[Any, ...]:
    """What a refused statement must leave as it was: Spark's tables, mere's tables and versions, files."""
    spark_tables = sorted(t.name for t in spark.catalog.listTables())
    cat = mere.connect(wh)
    tables = sorted((n, cat.table(n).version) for n in cat.tables())
    files = sorted(
        str(p.relative_to(wh)) for p in Path(wh).rglob("*") if p.is_file() and "catalog" not in p.name
    )
    managed = spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:")
    spark_dirs = sorted(os.listdir(managed)) if os.path.isdir(managed) else []
    return spark_tables, tables, files, spark_dirs


def test_create_insert_overwrite_select_like_a_spark_table(spark: SparkSession, wh: str, clean: None) -> None:
    mere.connect(wh)  # the warehouse exists before the first state()
    spark.sql(
        f"CREATE TABLE orders ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'sales.orders', "
        "primary_key 'id') PARTITIONED BY (day) TBLPROPERTIES ('buckets' = '4')"
    )
    spec = mere.connect(wh).table("sales.orders").spec
    assert (spec.primary_key, spec.partition_by, spec.buckets) == (("id",), ("day",), 4)
    rng = random.Random(33)
    model: dict[
        int, tuple[str, int]
    ] = {}  # a key's day is fixed (partition columns are part of a row's identity)
    for step in range(7):
        batch = {k: (f"d{k % 3}", rng.randrange(100)) for k in (rng.randrange(12) for _ in range(5))}
        if step == 3:  # INSERT OVERWRITE, static: the whole table
            spark.sql(f"INSERT OVERWRITE orders VALUES {values(batch)}")
            model = dict(batch)
        elif step == 4:  # dynamic: only the partitions the rows are in (as mere's option; see the next test)
            spark.sql(
                f"INSERT OVERWRITE orders WITH ('partitionOverwriteMode' = 'dynamic') VALUES {values(batch)}"
            )
            days = {d for d, _ in batch.values()}
            model = {k: r for k, r in model.items() if r[0] not in days} | batch
        elif step == 5:  # one named partition, as mere's option (Spark's PARTITION clause cannot reach it)
            batch = {k: r for k, r in batch.items() if r[0] == "d2"} or {2: ("d2", 0)}
            spark.sql(
                "INSERT OVERWRITE orders WITH ('partition' = '{\"day\": \"d2\"}') "
                f"SELECT * FROM VALUES {values(batch)} AS s(id, day, v)"
            )
            model = {k: r for k, r in model.items() if r[0] != "d2"} | batch
        else:
            spark.sql(f"INSERT INTO orders VALUES {values(batch)}")
            model.update(batch)
        assert (
            spark_rows(spark, "SELECT * FROM orders") == model_rows(model) == python_rows(wh, "sales.orders")
        ), step


def test_what_spark_refuses_before_mere_runs(spark: SparkSession, wh: str, clean: None) -> None:
    """Spark's own refusals (no code of mere runs): the session's dynamic overwrite mode and a PARTITION
    clause; the README names the mere way (the WITH options above)."""
    spark.sql(
        f"CREATE TABLE o ({COLS}) USING mere OPTIONS (warehouse '{wh}', primary_key 'id', partition_by 'day')"
    )
    spark.sql("INSERT INTO o VALUES (1, 'd1', 1)")
    before = state(spark, wh)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        with pytest.raises(Exception, match="does not support dynamic overwrite"):
            spark.sql("INSERT OVERWRITE o VALUES (2, 'd1', 2)")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    with pytest.raises(Exception, match="NON_PARTITION_COLUMN"):
        spark.sql("INSERT OVERWRITE o PARTITION (day = 'd1') VALUES (2, 2)")
    assert state(spark, wh) == before
    assert spark_rows(spark, "SELECT * FROM o") == [{"id": 1, "day": "d1", "v": 1}]


def test_column_less_create_binds_an_existing_table_and_checks_its_spec(
    spark: SparkSession, wh: str, clean: None
) -> None:
    import pyarrow as pa

    cat = mere.connect(wh)
    t = cat.create_table(
        "ns.t", pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": [1, 2], "day": ["d1", "d2"], "v": [10, 20]}))
    before = state(spark, wh)
    with pytest.raises(Exception, match="different spec"):
        spark.sql(f"CREATE TABLE t USING mere OPTIONS (warehouse '{wh}', table 'ns.t', primary_key 'day')")
    assert state(spark, wh) == before
    spark.sql(f"CREATE TABLE t USING mere OPTIONS (warehouse '{wh}', table 'ns.t', primary_key 'id')")
    assert spark_rows(spark, "SELECT * FROM t") == python_rows(wh, "ns.t")
    spark.sql("INSERT INTO t VALUES (2, 'd2', 21), (3, 'd3', 30)")
    expected = model_rows({1: ("d1", 10), 2: ("d2", 21), 3: ("d3", 30)})
    assert spark_rows(spark, "SELECT * FROM t") == expected == python_rows(wh, "ns.t")
    described = {r["col_name"]: r["comment"] for r in spark.sql("DESCRIBE TABLE EXTENDED t").collect()}
    assert described["id"] == f"mere primary key ({t.spec.buckets} buckets)"
    info = {r["key"]: r["value"] for r in describe(spark, "t").collect()}
    assert (
        info["primary_key"] == "id" and info["table"] == "ns.t" and info["mere.version"] == mere.__version__
    )
    assert info["table_version"] == str(cat.table("ns.t").version)


def test_ctas_and_save_as_table(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE c USING mere OPTIONS (warehouse '{wh}', primary_key 'id') "
        "AS SELECT id, CAST(id % 2 AS STRING) AS day, id * 10 AS v FROM range(5)"
    )
    model = {i: (str(i % 2), i * 10) for i in range(5)}
    assert spark_rows(spark, "SELECT * FROM c") == model_rows(model) == python_rows(wh, "default.c")
    df = spark.sql("SELECT id, 'x' AS day, id AS v FROM range(3, 7)")
    df.write.format("mere").option("warehouse", wh).option("primary_key", "id").saveAsTable("s")
    assert python_rows(wh, "default.s") == spark_rows(spark, "SELECT * FROM s")
    df.write.format("mere").mode("append").saveAsTable("c")  # upsert into the bound table
    model.update({i: ("x", i) for i in range(3, 7)})
    assert spark_rows(spark, "SELECT * FROM c") == model_rows(model) == python_rows(wh, "default.c")
    df.write.format("mere").mode("overwrite").saveAsTable("c")
    model = {i: ("x", i) for i in range(3, 7)}
    assert spark_rows(spark, "SELECT * FROM c") == model_rows(model) == python_rows(wh, "default.c")
    before = state(spark, wh)
    with pytest.raises(TableExists, match="already exists: write with mode"):
        df.write.format("mere").saveAsTable("c")
    assert state(spark, wh) == before
    # DataFrameWriterV2 passes no name and maybe the source's column metadata: refused, nothing written.
    with pytest.raises(Exception, match="names no table"):
        spark.table("s").writeTo("c").append()
    assert state(spark, wh) == before


def test_insert_select_from_another_mere_table_writes_the_target(
    spark: SparkSession, wh: str, clean: None
) -> None:
    """Same columns: Spark hands the writer the source's column metadata; the hook names the target."""
    spark.sql(f"CREATE TABLE a ({COLS}) USING mere OPTIONS (warehouse '{wh}', primary_key 'id')")
    spark.sql(f"CREATE TABLE b ({COLS}) USING mere OPTIONS (warehouse '{wh}', primary_key 'id')")
    spark.sql("INSERT INTO a VALUES (1, 'a', 1), (2, 'a', 2)")
    spark.sql("INSERT INTO b SELECT * FROM a WHERE id = 2")
    spark.sql("INSERT OVERWRITE TABLE default.b SELECT id, day, v * 10 AS v FROM a")
    assert (
        python_rows(wh, "default.a")
        == model_rows({1: ("a", 1), 2: ("a", 2)})
        == spark_rows(spark, "SELECT * FROM a")
    )
    assert (
        python_rows(wh, "default.b")
        == model_rows({1: ("a", 10), 2: ("a", 20)})
        == spark_rows(spark, "SELECT * FROM b")
    )


def test_drop_table_keeps_the_mere_table(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(
        f"CREATE TABLE d ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.d', primary_key 'id')"
    )
    spark.sql("INSERT INTO d VALUES (1, 'a', 1)")
    spark.sql("DROP TABLE d")
    assert not spark.catalog.tableExists("d")
    assert python_rows(wh, "ns.d") == [{"id": 1, "day": "a", "v": 1}]
    spark.sql(f"CREATE TABLE d USING mere OPTIONS (warehouse '{wh}', table 'ns.d')")  # bind it again
    assert spark_rows(spark, "SELECT * FROM d") == [{"id": 1, "day": "a", "v": 1}]


def test_a_view_defined_over_the_table_follows_writes(spark: SparkSession, wh: str, clean: None) -> None:
    spark.sql(f"CREATE TABLE f ({COLS}) USING mere OPTIONS (warehouse '{wh}', primary_key 'id')")
    spark.sql("CREATE TEMPORARY VIEW fv AS SELECT * FROM f WHERE v > 0")
    assert spark.sql("SELECT count(*) AS n FROM fv").first()["n"] == 0
    spark.sql("INSERT INTO f VALUES (1, 'a', 1), (2, 'a', 0)")
    assert spark.sql("SELECT count(*) AS n FROM fv").first()["n"] == 1
    spark.sql("INSERT INTO f VALUES (2, 'a', 5)")
    assert spark.sql("SELECT count(*) AS n FROM fv").first()["n"] == 2
    assert spark.sql("SELECT count(*) AS n FROM f").first()["n"] == len(python_rows(wh, "default.f"))


@pytest.mark.parametrize(
    ("statement", "error", "sentence"),
    [
        (
            f"CREATE TABLE r ({COLS}) USING mere OPTIONS (warehouse '{{wh}}') LOCATION '/tmp/x'",
            InvalidInput,
            "takes no LOCATION",
        ),
        (
            f"CREATE TABLE r ({COLS}) USING mere OPTIONS (warehouse '{{wh}}', primry_key 'id')",
            InvalidInput,
            "unknown option or property 'primry_key'",
        ),
        (
            "CREATE TABLE r USING mere OPTIONS (warehouse '{wh}', table 'ns.none')",
            Exception,
            "does not exist",
        ),
        ("CREATE TABLE r USING mere OPTIONS (warehouse '{wh}')", Exception, r"needs OPTIONS \(table"),
        (
            f"CREATE TABLE r ({COLS}) USING mere OPTIONS (warehouse '{{wh}}') CLUSTERED BY (id) INTO 4 BUCKETS",
            InvalidInput,
            "buckets hash the primary key",
        ),
        (
            f"CREATE OR REPLACE TABLE r ({COLS}) USING mere OPTIONS (warehouse '{{wh}}')",
            InvalidInput,
            "drop the table's history",
        ),
        (
            "CREATE TABLE r USING mere OPTIONS (warehouse '{wh}', table 'ns.have') AS SELECT 1L AS id",
            TableExists,
            "bind it with CREATE TABLE",
        ),
        ("CREATE TABLE r USING mere OPTIONS (warehouse '{wh}') AS SELECT 1L AS id, nope", Exception, "nope"),
    ],
)
def test_refused_statements_change_nothing(
    spark: SparkSession, wh: str, clean: None, statement: str, error: type[Exception], sentence: str
) -> None:
    import pyarrow as pa

    mere.connect(wh).create_table("ns.have", pa.schema([("id", pa.int64())]))
    before = state(spark, wh)
    with pytest.raises(error, match=sentence):
        spark.sql(statement.format(wh=wh))
    assert state(spark, wh) == before


def test_a_spark_table_that_names_no_mere_table_is_refused_before_writing(
    spark: SparkSession, wh: str, clean: None
) -> None:
    # Made around the hook (as a Spark Connect or unregistered session would): Spark calls nothing of mere.
    spark.sql(f"CREATE TABLE src ({COLS}) USING mere OPTIONS (warehouse '{wh}', primary_key 'id')")
    spark.sql("INSERT INTO src VALUES (1, 'a', 1)")
    unbound = "CREATE TABLE plain (id BIGINT, day STRING, v BIGINT) USING mere"
    from pyspark.sql.session import SparkSession as S

    S.sql.__wrapped__(spark, unbound)  # type: ignore[attr-defined]
    before = state(spark, wh)
    fix = "names no mere table.*without mere's hook.*DROP TABLE it.*CREATE TABLE t USING mere OPTIONS"
    with pytest.raises(Exception, match=fix):
        spark.sql("SELECT * FROM plain").collect()
    for statement in (
        "INSERT INTO plain VALUES (2, 'b', 2)",
        "INSERT INTO plain SELECT id, day, v + 1 FROM src",
    ):
        with pytest.raises(Exception, match=fix):
            spark.sql(statement)
    assert state(spark, wh) == before
    assert python_rows(wh, "default.src") == [{"id": 1, "day": "a", "v": 1}]


def test_the_readme_example_runs(spark: SparkSession, wh: str, clean: None) -> None:
    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = next(
        b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "CREATE TABLE orders (" in b
    )
    rows = "VALUES (1L, 'd1', 200.0), (2L, 'd2', 5.0) AS s(order_id, day, amount)"
    spark.sql(f"CREATE TEMPORARY VIEW staged AS SELECT * FROM {rows}")
    spark.sql("CREATE TEMPORARY VIEW staged_d1 AS SELECT * FROM staged WHERE day = 'd1'")
    df = spark.sql("SELECT 3L AS order_id, 'd3' AS day, 300.0 AS amount")
    exec(
        compile(block.replace("/data/wh", wh), "README.md", "exec"), {"spark": spark, "df": df, "mere": mere}
    )
    assert not spark.catalog.tableExists("orders")
    assert python_rows_by(wh, "sales.orders", "order_id") == [
        {"order_id": 1, "day": "d1", "amount": 200.0},
        {"order_id": 2, "day": "d2", "amount": 5.0},
        {"order_id": 3, "day": "d3", "amount": 300.0},
    ]
    assert spark_rows(spark, "SELECT day AS id, total FROM daily") == [
        {"id": "d1", "total": 200.0},
        {"id": "d2", "total": 5.0},
    ]


def python_rows_by(wh: str, name: str, key: str) -> list[dict[str, Any]]:
    return sorted(mere.connect(wh).table(name).scan().to_arrow().to_pylist(), key=lambda r: r[key])


@pytest.mark.parametrize(
    ("statement", "query"),
    [
        ("CREATE TABLE t USING mere AS SELECT 1", "SELECT 1"),
        (
            "create table `as` using mere options ('a' = 'as') comment 'x as y' as\n select a as b from c;",
            "select a as b from c",
        ),
        (
            "CREATE TABLE t USING mere -- as a comment\nTBLPROPERTIES ('k' = 'v') /* as */ AS (SELECT 2)",
            "(SELECT 2)",
        ),
        (
            "CREATE TABLE t USING mere OPTIONS (w 'it''s as') AS WITH q AS (SELECT 1) SELECT * FROM q",
            "WITH q AS (SELECT 1) SELECT * FROM q",
        ),
    ],
)
def test_the_query_of_create_table_as_select(statement: str, query: str) -> None:
    from mere.integrations.spark.ddl import _query_text

    assert _query_text(statement) == query


class _FakeSpark:
    """spark.table(name).schema for name_insert_target: 't' is bound, 'p' is a plain table."""

    def table(self, name: str) -> Any:
        from pyspark.sql.types import LongType, StructField, StructType

        from mere.integrations.spark import BINDING_KEY

        bound = name.replace("`", "").split(".")[-1].strip() == "t"
        meta = {BINDING_KEY: '{"table": "ns.t", "warehouse": "w"}'} if bound else {}
        return type("T", (), {"schema": StructType([StructField("id", LongType(), True, meta)])})()


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("INSERT INTO t VALUES (1)", "INSERT INTO t WITH ('table' = 'ns.t', 'warehouse' = 'w') VALUES (1)"),
        (
            "insert overwrite table default.`t` with ('partition' = '{}') select 1",
            "insert overwrite table default.`t` with ('table' = 'ns.t', 'warehouse' = 'w', 'partition' = '{}') select 1",
        ),
        ("INSERT INTO p VALUES (1)", "INSERT INTO p VALUES (1)"),
        ("SELECT 1", "SELECT 1"),
        # The statement names the table itself: given once (it was given twice, and Spark refused it).
        (
            "INSERT INTO t WITH ('table' = 'ns.t') VALUES (1)",
            "INSERT INTO t WITH ('table' = 'ns.t', 'warehouse' = 'w') VALUES (1)",
        ),
        (
            'INSERT INTO t WITH (TABLE \'ns.t\', "Warehouse" = "w/", flush_rows = 10, x.y) SELECT 1',
            "INSERT INTO t WITH ('table' = 'ns.t', 'warehouse' = 'w', flush_rows = 10, x.y) SELECT 1",
        ),
        (
            "INSERT INTO t WITH () VALUES (1)",
            "INSERT INTO t WITH ('table' = 'ns.t', 'warehouse' = 'w') VALUES (1)",
        ),
        # A list this reader cannot follow is Spark's to read: not named, so the write is refused.
        ("INSERT INTO t WITH (a = (1)) VALUES (1)", "INSERT INTO t WITH (a = (1)) VALUES (1)"),
    ],
)
def test_the_hook_names_the_table_an_insert_writes(statement: str, named: str) -> None:
    from mere.integrations.spark.ddl import name_insert_target

    assert name_insert_target(_FakeSpark(), statement) == named


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO t WITH ('table' = 'ns.other') VALUES (1)",
        "INSERT INTO t WITH ('warehouse' = 'elsewhere') VALUES (1)",
        "INSERT OVERWRITE t WITH ('TABLE' = 'ns.t', 'catalog' = 'sqlite:///x') VALUES (1)",
    ],
)
def test_an_insert_whose_options_name_another_table_is_refused(statement: str) -> None:
    from mere.integrations.spark.ddl import name_insert_target

    with pytest.raises(InvalidInput, match="name another"):
        name_insert_target(_FakeSpark(), statement)


def test_insert_naming_its_own_table_in_options(spark: SparkSession, wh: str, clean: None) -> None:
    """Issue 33: the user's INSERT also names the table in its WITH options: it is given once."""
    spark.sql(
        f"CREATE TABLE o ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.o', primary_key 'id')"
    )
    spark.sql(f"INSERT INTO o WITH ('table' = 'ns.o', 'warehouse' = '{wh}/') VALUES (1, 'a', 1), (2, 'a', 2)")
    spark.sql(
        "INSERT OVERWRITE o WITH ('TABLE' = 'ns.o', 'partitionOverwriteMode' = 'static') VALUES (3, 'b', 3)"
    )
    assert python_rows(wh, "ns.o") == model_rows({3: ("b", 3)}) == spark_rows(spark, "SELECT * FROM o")
    import pyarrow as pa

    mere.connect(wh).create_table("ns.other", pa.schema([("id", pa.int64())]))
    before = state(spark, wh)
    with pytest.raises(InvalidInput, match="name another"):
        spark.sql("INSERT INTO o WITH ('table' = 'ns.other') VALUES (4, 'b', 4)")
    assert state(spark, wh) == before


def test_save_as_table_overwrite_refuses_another_layout(spark: SparkSession, wh: str, clean: None) -> None:
    """Spark's overwrite drops and recreates the table; mere keeps it, so it runs only when the write asks
    for the table as it is, and anything else is refused before a row is written."""
    df = spark.sql("SELECT id, CAST(id % 2 AS STRING) AS day, id AS v FROM range(4)")
    df.write.format("mere").option("warehouse", wh).option("primary_key", "id").option(
        "partition_by", "day"
    ).saveAsTable("w")
    model = {i: (str(i % 2), i) for i in range(4)}
    before = state(spark, wh)
    new = spark.sql("SELECT id, 'z' AS day, id * 7 AS v FROM range(10, 12)")
    refused = [
        (new.select("id", "v"), {}, "columns id bigint, v bigint are not the table's"),
        (new.select("v", "id", "day"), {}, "not the table's"),
        (new.selectExpr("id", "day", "CAST(v AS INT) AS v"), {}, "v int"),
        (new.withColumn("extra", new.v), {"mergeSchema": "true"}, "extra"),
        (new, {"primary_key": "v"}, "primary_key"),
        (new, {"partition_by": "id"}, "partition_by"),
        (new, {"buckets": "7"}, "buckets"),
        (new, {"merge_operators": '{"v": "sum"}'}, "merge_operators"),
        (new, {"overwriteSchema": "true"}, "overwriteSchema"),
    ]
    for frame, options, words in refused:
        with pytest.raises(InvalidInput, match=f"drop and recreate.*{words}"):
            frame.write.format("mere").options(**options).mode("overwrite").saveAsTable("w")
        assert state(spark, wh) == before, options
        assert python_rows(wh, "default.w") == model_rows(model) == spark_rows(spark, "SELECT * FROM w")
    with pytest.raises(InvalidInput, match=r"drop and recreate.*partition_by"):
        new.write.format("mere").mode("overwrite").partitionBy("v").saveAsTable("w")
    assert state(spark, wh) == before
    # The table as it is, its layout restated or left out: the rows are replaced, the layout kept.
    new.write.format("mere").options(primary_key="id", partition_by="day").mode("overwrite").saveAsTable("w")
    model = {i: ("z", i * 7) for i in range(10, 12)}
    assert python_rows(wh, "default.w") == model_rows(model) == spark_rows(spark, "SELECT * FROM w")
    df.write.format("mere").mode("overwrite").partitionBy("day").saveAsTable("w")
    model = {i: (str(i % 2), i) for i in range(4)}
    assert python_rows(wh, "default.w") == model_rows(model) == spark_rows(spark, "SELECT * FROM w")
    spec = mere.connect(wh).table("default.w").spec
    assert (spec.primary_key, spec.partition_by) == (("id",), ("day",))


def test_create_with_columns_runs_no_python(spark: SparkSession, clean: None) -> None:
    """Why a CREATE TABLE with columns made around the hook cannot be refused at creation: Spark calls no
    Python of the source (a probe whose schema() raises is never asked). The day this fails, mere's
    schema() can refuse it before Spark makes its entry."""
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.session import SparkSession as S

    class Probe(DataSource):
        @classmethod
        def name(cls) -> str:
            return "mere_probe"

        def schema(self) -> str:
            raise ValueError("the probe was asked for its schema")

    spark.dataSource.register(Probe)
    S.sql.__wrapped__(spark, "CREATE TABLE probed (id BIGINT) USING mere_probe OPTIONS (a '1')")  # type: ignore[attr-defined]
    assert spark.catalog.tableExists("probed")
    with pytest.raises(Exception, match="asked for its schema"):
        S.sql.__wrapped__(spark, "CREATE TABLE probed2 USING mere_probe")  # type: ignore[attr-defined]


def test_create_table_takes_a_merge_engine_by_name(spark: SparkSession, wh: str, clean: None) -> None:
    # As the sink takes it: a bare engine name (or a JSON string), not only a JSON object of operators.
    spark.sql(
        f"CREATE TABLE firsts ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.firsts', "
        "primary_key 'id', merge_operators 'first_row')"
    )
    spec = mere.connect(wh).table("ns.firsts").spec
    assert spec.merge_engine == "first_row"
    spark.sql("INSERT INTO firsts VALUES (1, 'd1', 10), (2, 'd2', 20)")
    spark.sql("INSERT INTO firsts VALUES (2, 'd2', 21), (3, 'd3', 30)")  # key 2's first version stays
    expected = model_rows({1: ("d1", 10), 2: ("d2", 20), 3: ("d3", 30)})
    assert spark_rows(spark, "SELECT * FROM firsts") == expected == python_rows(wh, "ns.firsts")
    assert {r["key"]: r["value"] for r in describe(spark, "firsts").collect()}[
        "merge_operators"
    ] == "first_row"
    # Bound again by name, the engine restated as a JSON string: the same layout.
    spark.sql("DROP TABLE firsts")
    spark.sql(
        f"CREATE TABLE firsts USING mere OPTIONS (warehouse '{wh}', table 'ns.firsts', primary_key 'id', "
        """merge_operators '"first_row"')"""
    )
    assert spark_rows(spark, "SELECT * FROM firsts") == expected
    # An engine mere does not have: refused, nothing created.
    before = state(spark, wh)
    with pytest.raises(InvalidInput, match="last_row"):
        spark.sql(
            f"CREATE TABLE lasts ({COLS}) USING mere OPTIONS (warehouse '{wh}', table 'ns.lasts', "
            "primary_key 'id', merge_operators 'last_row')"
        )
    assert state(spark, wh) == before
