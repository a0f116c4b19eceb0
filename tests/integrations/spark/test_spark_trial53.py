"""Trial 53: a new Spark user's session on one partitioned, keyed catalog table (table-wide keys): every
write idiom (SQL INSERT / INSERT OVERWRITE static, dynamic and by partition, DataFrameWriter append /
overwrite, saveAsTable, MERGE / UPDATE / DELETE through ``mere.integrations.spark.sql``) in a seeded
random order, many of them moving keys between partitions. Oracle: a plain dict model of the rows,
checked after every statement (row contents), and at the end for every version read back by time travel,
for partition / key filters, projections and ``count()``."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from sparkutil import read, write

import mere
from mere.errors import MereError
from mere.integrations.spark import sql

REFUSED = (PySparkException, MereError)

NAME = "t53_ev"
MERE_NAME = "t53.ev"
COLS = "id BIGINT, day STRING, qty BIGINT, note STRING"
SPARK_SCHEMA = "id long, day string, qty long, note string"
DAYS = ["d1", "d2", "d3"]

Row = tuple[str, Any, Any]  # day, qty, note
Model = dict[int, Row]


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    return f"'{v}'" if isinstance(v, str) else str(v)


def _spark_rows(spark: SparkSession, query: str) -> Model:
    out: Model = {}
    for r in spark.sql(query).collect():
        assert r["id"] not in out, f"key {r['id']} twice in {query}"
        out[r["id"]] = (r["day"], r["qty"], r["note"])
    return out


def _df_rows(df: Any) -> Model:
    out: Model = {}
    for r in df.collect():
        assert r["id"] not in out, f"key {r['id']} twice"
        out[r["id"]] = (r["day"], r["qty"], r["note"])
    return out


def _gen_rows(rng: random.Random, n: int, days: list[str] | None = None) -> list[tuple[int, str, Any, Any]]:
    ids = rng.sample(range(30), n)
    return [
        (
            i,
            rng.choice(days or DAYS),
            None if rng.random() < 0.15 else rng.randrange(40),
            None if rng.random() < 0.2 else f"n{rng.randrange(5)}",
        )
        for i in ids
    ]


def _upsert(model: Model, rows: list[tuple[int, str, Any, Any]]) -> None:
    for i, d, q, n in rows:
        model[i] = (d, q, n)  # table-wide keys: the key moves to its new partition


def _replace_partitions(model: Model, days: set[str], rows: list[tuple[int, str, Any, Any]]) -> None:
    for k in [k for k, v in model.items() if v[0] in days]:
        del model[k]
    _upsert(model, rows)


def _step(spark: SparkSession, wh: str, rng: random.Random, model: Model, kind: str) -> str:
    """Runs one idiom and applies it to the model; returns a description."""
    if kind == "insert_values":
        rows = _gen_rows(rng, rng.randint(1, 5))
        values = ", ".join(f"({i}, '{d}', {_lit(q)}, {_lit(n)})" for i, d, q, n in rows)
        spark.sql(f"INSERT INTO {NAME} VALUES {values}")
        _upsert(model, rows)
        return f"INSERT {rows}"
    if kind in ("overwrite_dynamic_sql", "overwrite_dynamic_df"):
        rows = _gen_rows(rng, rng.randint(1, 5), days=rng.sample(DAYS, rng.randint(1, 2)))
        df = spark.createDataFrame(rows, SPARK_SCHEMA)
        if kind == "overwrite_dynamic_sql":
            df.createOrReplaceTempView("t53_staged")
            spark.sql(
                f"INSERT OVERWRITE {NAME} WITH ('partitionOverwriteMode' = 'dynamic') SELECT * FROM t53_staged"
            )
        else:
            write(df, wh, MERE_NAME, mode="overwrite", partitionOverwriteMode="dynamic")
        _replace_partitions(model, {r[1] for r in rows}, rows)
        return f"{kind} {rows}"
    if kind == "overwrite_partition":
        day = rng.choice(DAYS)
        rows = _gen_rows(rng, rng.randint(0, 4), days=[day])
        spark.createDataFrame(rows, SPARK_SCHEMA).createOrReplaceTempView("t53_staged")
        part = json.dumps({"day": day})
        spark.sql(f"INSERT OVERWRITE {NAME} WITH ('partition' = '{part}') SELECT * FROM t53_staged")
        _replace_partitions(model, {day}, rows)
        return f"overwrite {day} {rows}"
    if kind == "overwrite_static":
        rows = _gen_rows(rng, rng.randint(3, 8))
        spark.createDataFrame(rows, SPARK_SCHEMA).createOrReplaceTempView("t53_staged")
        spark.sql(f"INSERT OVERWRITE {NAME} SELECT * FROM t53_staged")
        model.clear()
        _upsert(model, rows)
        return f"overwrite all {rows}"
    if kind == "save_as_table":
        rows = _gen_rows(rng, rng.randint(1, 5))
        spark.createDataFrame(rows, SPARK_SCHEMA).write.format("mere").mode("append").saveAsTable(NAME)
        _upsert(model, rows)
        return f"saveAsTable {rows}"
    if kind == "merge":
        ids = rng.sample(range(30), rng.randint(2, 7))
        src = [
            (i, rng.choice(DAYS), None if rng.random() < 0.15 else rng.randrange(40), rng.choice("UUD"))
            for i in ids
        ]
        df = spark.createDataFrame(src, "id long, day string, qty long, op string")
        sql(
            spark,
            f"MERGE INTO {NAME} t USING s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 'D' THEN DELETE "
            "WHEN MATCHED AND s.qty > t.qty THEN UPDATE SET day = s.day, qty = s.qty "
            "WHEN MATCHED THEN UPDATE SET qty = t.qty + 1, note = 'bumped' "
            "WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT (id, day, qty, note) VALUES (s.id, s.day, s.qty, 'm')",
            warehouse=wh,
            s=df,
        ).collect()
        for i, d, q, op in src:
            if i in model:
                od, oq, on = model[i]
                if op == "D":
                    del model[i]
                elif q is not None and oq is not None and q > oq:
                    model[i] = (d, q, on)
                else:
                    model[i] = (od, None if oq is None else oq + 1, "bumped")
            elif op != "D":
                model[i] = (d, q, "m")
        return f"MERGE {src}"
    if kind == "update":
        to, m = rng.choice(DAYS), rng.randint(2, 4)
        sql(
            spark, f"UPDATE {NAME} SET day = '{to}', qty = qty * 2 WHERE qty % {m} = 0", warehouse=wh
        ).collect()
        for k, (_d, q, n) in list(model.items()):
            if q is not None and q % m == 0:
                model[k] = (to, q * 2, n)
        return f"UPDATE -> {to} where qty % {m} = 0"
    if kind == "delete":
        day, lim = rng.choice(DAYS), rng.randrange(40)
        sql(
            spark, f"DELETE FROM {NAME} WHERE day = '{day}' AND (qty < {lim} OR note IS NULL)", warehouse=wh
        ).collect()
        for k, (d, q, n) in list(model.items()):
            if d == day and ((q is not None and q < lim) or n is None):
                del model[k]
        return f"DELETE {day} qty < {lim} or note null"
    raise AssertionError(kind)


KINDS = [
    "insert_values",
    "overwrite_dynamic_sql",
    "overwrite_dynamic_df",
    "overwrite_partition",
    "save_as_table",
    "merge",
    "update",
    "delete",
]
SEED = 53


def test_a_random_session_of_partition_moving_writes_matches_a_dict_model(
    spark: SparkSession, wh: str, clean: None
) -> None:
    spark.sql(
        f"CREATE TABLE {NAME} ({COLS}) USING mere OPTIONS (warehouse '{wh}', table '{MERE_NAME}', "
        "primary_key 'id') PARTITIONED BY (day) TBLPROPERTIES ('buckets' = '3')"
    )
    t = mere.connect(wh).table(MERE_NAME)
    assert (
        tuple(t.primary_key) == ("id",) and tuple(t.spec.partition_by) == ("day",) and t.key_scope == "table"
    )
    rng = random.Random(SEED)
    model: Model = {}
    snapshots: dict[int, Model] = {t.version: {}}
    done: list[str] = []
    _step(spark, wh, rng, model, "overwrite_static")
    snapshots[t.version] = dict(model)
    kinds = list(KINDS)
    rng.shuffle(kinds)
    for kind in kinds:
        done.append(_step(spark, wh, rng, model, kind))
        # mere's own read after each statement (Spark reads every version below, by time travel).
        arrow = t.to_arrow().to_pylist()
        assert len(arrow) == len(model), done  # no key twice, in two partitions
        assert {r["id"]: (r["day"], r["qty"], r["note"]) for r in arrow} == model, done
        snapshots[t.version] = dict(model)

    # Reads with a partition filter, a key filter, a projection and count() of the final version.
    for day in DAYS:
        want = {k: v for k, v in model.items() if v[0] == day}
        assert _df_rows(read(spark, wh, MERE_NAME, filter=f"day = '{day}'")) == want
    assert _spark_rows(spark, f"SELECT * FROM {NAME} WHERE day = '{day}'") == want
    assert read(spark, wh, MERE_NAME).where(f"day = '{day}'").count() == len(want)
    some = [*sorted(model)[:3], 99]
    in_list = ", ".join(map(str, some))
    assert _df_rows(read(spark, wh, MERE_NAME, filter=f"id IN ({in_list})")) == {
        k: model[k] for k in some if k in model
    }
    proj = read(spark, wh, MERE_NAME, columns="qty,id").where("qty IS NOT NULL").collect()
    assert sorted((r["id"], r["qty"]) for r in proj) == sorted(
        (k, v[1]) for k, v in model.items() if v[1] is not None
    )
    assert spark.sql(f"SELECT count(*) AS n FROM {NAME}").collect()[0].n == len(model)
    assert spark.sql(f"SELECT count(*) AS n FROM {NAME} WHERE note IS NULL").collect()[0].n == sum(
        v[2] is None for v in model.values()
    )

    # Time travel: every version, by the read option (versionAsOf with a partition filter on every other).
    for n, (version, want) in enumerate(snapshots.items()):
        if n % 2:
            assert _df_rows(read(spark, wh, MERE_NAME, versionAsOf=version, filter="day = 'd2'")) == {
                k: v for k, v in want.items() if v[0] == "d2"
            }, version
        else:
            assert _df_rows(read(spark, wh, MERE_NAME, version=version)) == want, version
    v = max(snapshots) - 2
    got = sql(spark, f"SELECT id, day, qty, note FROM {MERE_NAME} VERSION AS OF {v}", warehouse=wh)
    assert _df_rows(got) == snapshots[v]


def _state(t: mere.Table) -> tuple[int, list[dict[str, Any]]]:
    return t.version, sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])


def test_save_modes_and_refused_idioms_leave_the_table_unchanged(
    spark: SparkSession, wh: str, clean: None
) -> None:
    t = mere.connect(wh).create_table(
        MERE_NAME,
        pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())]),
        primary_key="id",
        partition_by="day",
        buckets=2,
    )
    t.upsert(
        pa.table({"id": [1, 2, 3], "day": ["d1", "d2", "d1"], "qty": [1, 2, 3], "note": ["a", "b", "c"]})
    )
    spark.sql(f"CREATE TABLE {NAME} USING mere OPTIONS (warehouse '{wh}', table '{MERE_NAME}')")
    before = _state(t)
    df = spark.createDataFrame([(1, "d2", 100, "x"), (9, "d3", 9, "y")], SPARK_SCHEMA)

    # "ignore" on an existing table writes nothing (Spark refuses the mode for a path save), by path and by
    # saveAsTable.
    with pytest.raises(REFUSED, match="Append"):
        df.write.format("mere").mode("ignore").option("warehouse", wh).save(MERE_NAME)
    assert _state(t) == before
    df.write.format("mere").mode("ignore").saveAsTable(NAME)
    assert _state(t) == before
    # "error" / "errorifexists" on an existing table: refused, nothing written, by path and saveAsTable.
    for mode in ("error", "errorifexists"):
        with pytest.raises(REFUSED) as e:
            df.write.format("mere").mode(mode).option("warehouse", wh).save(MERE_NAME)
        assert _state(t) == before, mode
        assert "exist" in str(e.value).lower(), e.value
        with pytest.raises(REFUSED) as e:
            df.write.format("mere").mode(mode).saveAsTable(NAME)
        assert _state(t) == before, mode
        assert "exist" in str(e.value).lower(), e.value

    # Overwrite by partition where the DataFrame holds a row of another partition: refused, unchanged.
    df.createOrReplaceTempView("t53_staged")
    with pytest.raises(REFUSED) as e:
        spark.sql(
            f"""INSERT OVERWRITE {NAME} WITH ('partition' = '{{"day": "d2"}}') SELECT * FROM t53_staged"""
        )
    assert _state(t) == before
    assert "d3" in str(e.value) or "partition" in str(e.value).lower(), e.value
    with pytest.raises(REFUSED):
        write(df, wh, MERE_NAME, mode="overwrite", partition='{"day": "d2"}')
    assert _state(t) == before

    # Spark's own row-level statements and partition specs: refused before mere runs, unchanged.
    for text in (
        f"UPDATE {NAME} SET qty = 0 WHERE id = 1",
        f"DELETE FROM {NAME} WHERE id = 1",
        f"MERGE INTO {NAME} t USING t53_staged s ON t.id = s.id WHEN MATCHED THEN DELETE",
        f"INSERT INTO {NAME} PARTITION (day = 'd1') SELECT id, qty, note FROM t53_staged",
        f"INSERT OVERWRITE {NAME} PARTITION (day = 'd1') SELECT id, qty, note FROM t53_staged",
        f"INSERT INTO {NAME} REPLACE WHERE day = 'd1' SELECT * FROM t53_staged",
    ):
        with pytest.raises(REFUSED):
            spark.sql(text).collect()
        assert _state(t) == before, text
    # The session's dynamic overwrite mode on a catalog INSERT OVERWRITE: Spark refuses it, unchanged.
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    with pytest.raises(REFUSED):
        spark.sql(f"INSERT OVERWRITE {NAME} SELECT * FROM t53_staged")
    assert _state(t) == before
    # ... while the same mode through the DataFrameWriter is honoured: d2 and d3 replaced, key 1 moves.
    write(df, wh, MERE_NAME, mode="overwrite")
    spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert sorted((r["id"], r["day"], r["qty"]) for r in t.to_arrow().to_pylist()) == [
        (1, "d2", 100),
        (3, "d1", 3),
        (9, "d3", 9),
    ]


def test_null_partition_moves_failed_merges_and_empty_overwrites(
    spark: SparkSession, wh: str, clean: None
) -> None:
    spark.sql(
        f"CREATE TABLE {NAME} ({COLS}) USING mere OPTIONS (warehouse '{wh}', table '{MERE_NAME}', "
        "primary_key 'id') PARTITIONED BY (day) TBLPROPERTIES ('buckets' = '2')"
    )
    t = mere.connect(wh).table(MERE_NAME)
    spark.sql(
        f"INSERT INTO {NAME} VALUES (1, 'd1', 1, 'a'), (2, 'd2', 2, 'b'), (3, 'd1', 3, NULL), (4, 'd2', 4, 'd')"
    )
    model: Model = {1: ("d1", 1, "a"), 2: ("d2", 2, "b"), 3: ("d1", 3, None), 4: ("d2", 4, "d")}

    # UPDATE / MERGE moving keys into the NULL partition; reads of it by every route.
    sql(spark, f"UPDATE {NAME} SET day = NULL WHERE id = 1", warehouse=wh).collect()
    model[1] = (None, 1, "a")
    s = spark.createDataFrame([(2, None, 22, "m"), (5, None, 5, "n")], SPARK_SCHEMA)
    sql(
        spark,
        f"MERGE INTO {NAME} t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET day = s.day, qty = s.qty "
        "WHEN NOT MATCHED THEN INSERT *",
        warehouse=wh,
        s=s,
    ).collect()
    model[2] = (None, 22, "b")
    model[5] = (None, 5, "n")
    assert _spark_rows(spark, f"SELECT * FROM {NAME}") == model
    nulls = {k: v for k, v in model.items() if v[0] is None}
    assert _spark_rows(spark, f"SELECT * FROM {NAME} WHERE day IS NULL") == nulls
    assert _df_rows(read(spark, wh, MERE_NAME, filter="day IS NULL")) == nulls
    assert spark.sql(f"SELECT count(*) AS n FROM {NAME} WHERE day IS NULL").collect()[0].n == 3
    moved = t.version

    # An empty dynamic overwrite changes nothing (README); an empty static overwrite of d2 empties d2.
    spark.createDataFrame([], SPARK_SCHEMA).createOrReplaceTempView("t53_empty")
    spark.sql(f"INSERT OVERWRITE {NAME} WITH ('partitionOverwriteMode' = 'dynamic') SELECT * FROM t53_empty")
    assert _spark_rows(spark, f"SELECT * FROM {NAME}") == model
    spark.sql(f"""INSERT OVERWRITE {NAME} WITH ('partition' = '{{"day": "d2"}}') SELECT * FROM t53_empty""")
    del model[4]
    assert _spark_rows(spark, f"SELECT * FROM {NAME}") == model

    # Overwrite of the NULL partition by its value, with a key (3) that moves in from d1.
    spark.createDataFrame([(3, None, 33, "z")], SPARK_SCHEMA).createOrReplaceTempView("t53_staged")
    spark.sql(f"""INSERT OVERWRITE {NAME} WITH ('partition' = '{{"day": null}}') SELECT * FROM t53_staged""")
    model = {k: v for k, v in model.items() if v[0] is not None}
    model[3] = (None, 33, "z")
    assert _spark_rows(spark, f"SELECT * FROM {NAME}") == model == {3: (None, 33, "z")}

    # A DELETE without WHERE empties the table; time travel still reads the moved state.
    sql(spark, f"DELETE FROM {NAME}", warehouse=wh).collect()
    assert spark.sql(f"SELECT count(*) AS n FROM {NAME}").collect()[0].n == 0
    assert _df_rows(read(spark, wh, MERE_NAME, version=moved, filter="day IS NULL")) == nulls


_ON_DAY = (
    f"MERGE INTO {MERE_NAME} t USING s ON t.id = s.id AND t.day = s.day "
    "WHEN MATCHED THEN UPDATE SET qty = s.qty WHEN NOT MATCHED THEN INSERT *"
)
_ON_EXTRA = (
    f"MERGE INTO {MERE_NAME} t USING s ON t.id = s.id AND t.qty > 100 "
    "WHEN MATCHED THEN UPDATE SET qty = s.qty WHEN NOT MATCHED THEN INSERT *"
)
_COMPUTED = (
    f"MERGE INTO {MERE_NAME} t USING s ON t.id = s.id "
    "WHEN NOT MATCHED THEN INSERT (id, day, qty, note) VALUES (s.id + 97, s.day, s.qty, s.note)"
)


@pytest.mark.parametrize(
    ("runner", "text"),
    [("spark", _ON_DAY), ("local", _ON_DAY), ("local", _ON_EXTRA), ("local", _COMPUTED)],
    ids=["spark-on-day", "local-on-day", "local-on-extra", "local-computed-key"],
)
def test_a_merge_inserting_a_key_held_in_another_partition_is_a_conflict(
    spark: SparkSession, wh: str, runner: str, text: str
) -> None:
    """docs/sql.md: inserting a key the table holds raises MergeConflict and nothing is written (DuckDB: a
    primary key violation). It does on an unpartitioned table; on a partitioned one (table-wide keys) the
    check misses a key whose row lives in another partition than the inserted row. ``ON t.id = s.id AND
    t.day = s.day`` (pairing by partition too, a common Delta idiom for pruning) then leaves key 2 twice,
    in d1 and d2, and every read (Spark, ``to_arrow``, ``count()``) returns both."""
    t = mere.connect(wh).create_table(
        MERE_NAME,
        pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())]),
        primary_key="id",
        partition_by="day",
        buckets=2,
    )
    t.upsert(
        pa.table({"id": [1, 2, 102], "day": ["d1", "d2", "d2"], "qty": [1, 2, 3], "note": ["a", "b", "c"]})
    )
    before = _state(t)
    # Key 2 is held in d2; the computed case's source key 5 matches nothing and inserts key 102 (held in d2).
    rows = [(5, "d1", 20, "x")] if text == _COMPUTED else [(2, "d1", 20, "x")]
    with pytest.raises(REFUSED, match="already holds"):
        if runner == "spark":
            sql(spark, text, warehouse=wh, s=spark.createDataFrame(rows, SPARK_SCHEMA)).collect()
        else:
            mere.sql(
                text,
                catalog=mere.connect(wh),
                s=pa.table(dict(zip(["id", "day", "qty", "note"], zip(*rows)))),
            )
    assert _state(t) == before
