"""MERGE INTO from a Spark DataFrame: the same outcome as the local Table.merge, one Spark job, one commit."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

import mere
from mere.errors import CommitConflict, FilterError, InvalidInput, MergeConflict
from mere.integrations.spark import SparkMerge, merge
from mere.table.merge import Merge, MergeMetrics

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())])
ROOT = Path(__file__).resolve().parents[3]


def _orders(wh: str, name: str = "sales.orders") -> mere.Table:
    t = mere.connect(wh).create_table(name, SCHEMA, primary_key=["id"], partition_by=["day"], buckets=8)
    ids = list(range(0, 600))
    t.upsert(
        pa.table(
            {
                "id": ids,
                "day": [f"d{i % 3}" for i in ids],
                "qty": [i * 10 for i in ids],
                "note": [None if i % 7 == 0 else f"n{i}" for i in ids],
            },
            schema=SCHEMA,
        )
    )
    t.upsert(
        pa.table({"id": [5, 6], "day": ["d2", "d0"], "qty": [-5, -6], "note": ["x", "y"]}, schema=SCHEMA)
    )
    return t


def _changes() -> pa.Table:
    """Matched rows (some deleted, some updated, some left alone) and new keys, over every bucket."""
    ids = [*range(0, 600, 3), *range(1000, 1080)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [f"d{i % 3}" for i in ids],
            "qty": pa.array([i % 17 for i in ids], pa.int64()),
            "op": ["D" if i % 9 == 0 else "U" if i % 2 == 0 else "K" for i in ids],
        }
    )


def _clauses(m: Any) -> Any:
    return (
        m.when_matched_delete(condition="s.op = 'D'")
        .when_matched_update(
            set={"qty": "t.qty + s.qty", "note": "coalesce(t.note, 'was null')"}, condition="s.op = 'U'"
        )
        .when_matched_do_nothing()
        .when_not_matched_insert(
            values={"id": "s.id", "day": "s.day", "qty": "s.qty * 2"}, condition="s.id % 4 = 0"
        )
        # Whole source rows, but op: *_all() would refuse the source's op column (not a table column).
        .when_not_matched_insert(
            values={"id": "s.id", "day": "s.day", "qty": "s.qty"}, condition="s.op = 'U'"
        )
    )


def _rows(t: mere.Table, key: tuple[str, ...] = ("id",)) -> list[dict[str, Any]]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: tuple(r[k] for k in key))


def _counts(m: MergeMetrics) -> tuple[int, int, int, int]:
    return m.inserted, m.updated, m.deleted, m.unchanged


def _df(spark: SparkSession, data: pa.Table, partitions: int = 3) -> DataFrame:
    return spark.createDataFrame(data.to_pandas()).repartition(partitions)


def test_spark_merge_equals_local_merge_in_one_commit(spark: SparkSession, wh: str) -> None:
    local, distributed = _orders(wh, "sales.local"), _orders(wh, "sales.orders")
    assert _rows(local) == _rows(distributed)
    changes = _changes()
    expected = _clauses(local.merge(changes)).execute()

    version, history = distributed.version, len(distributed.history())
    job = _clauses(merge(spark, _df(spark, changes), "sales.orders", warehouse=wh, partitions=4))
    plan = str(job.explain())
    assert "pmod(hash(s.id), 8) (the table's bucket of the key, 8 buckets) into 4 tasks" in plan
    assert "WHEN MATCHED AND s.op = 'D' THEN DELETE" in plan
    got = job.execute()

    assert _rows(distributed) == _rows(local)
    assert _counts(got) == _counts(expected)
    assert got.inserted and got.updated and got.deleted and got.unchanged
    assert got.version == version + 1 == distributed.version  # exactly one new version
    assert len(distributed.history()) == history + 1
    assert distributed.history()[-1].operation == "merge"
    assert got.files > 4  # several tasks each staged files
    assert (
        distributed.cleanup(older_than=dt.timedelta(0), dry_run=False) == []
    )  # every file written is referenced
    with pytest.raises(InvalidInput, match="executed"):
        job.execute()


def test_spark_merge_with_a_composite_key_named_differently_in_the_source(
    spark: SparkSession, wh: str
) -> None:
    schema = pa.schema([("region", pa.string()), ("id", pa.int64()), ("v", pa.float64())])
    cat = mere.connect(wh)
    tables = [
        cat.create_table(n, schema, primary_key=["region", "id"], buckets=5) for n in ("a.local", "a.spark")
    ]
    base = pa.table(
        {
            "region": [r for r in "xyz" for _ in range(50)],
            "id": list(range(50)) * 3,
            "v": [float(i) for i in range(150)],
        },
        schema=schema,
    )
    for t in tables:
        t.upsert(base)
    # The source's key columns have other names and a narrower type (int32): the ON condition pairs them.
    src = pa.table(
        {
            "r": [r for r in "xyw" for _ in range(30)],
            "k": pa.array(list(range(35, 65)) * 3, pa.int32()),
            "v": [float(-i) for i in range(90)],
        }
    )
    on = "t.region = s.r AND t.id = s.k"

    def clauses(m: Any) -> Any:
        return m.when_matched_update(set={"v": "s.v + t.v"}).when_not_matched_insert(
            values={"region": "s.r", "id": "s.k", "v": "s.v"}
        )

    expected = clauses(tables[0].merge(src, on=on)).execute()
    job = clauses(merge(spark, _df(spark, src), "a.spark", on=on, warehouse=wh, partitions=3))
    assert "pmod(hash(s.r, try_cast(s.k AS bigint)), 5)" in str(job.explain())
    got = job.execute()
    assert _rows(tables[1], ("region", "id")) == _rows(tables[0], ("region", "id"))
    assert _counts(got) == _counts(expected) == (60, 30, 0, 0)


def test_a_merge_conflict_in_one_task_changes_nothing(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    before, version, files = _rows(t), t.version, sorted(t.files().column("path").to_pylist())
    changes = _changes()
    dup = pa.table(
        {"id": pa.array([3], pa.int64()), "day": ["d0"], "qty": pa.array([1], pa.int64()), "op": ["U"]}
    )
    # Key 3 twice: its target row would be updated twice. Without op: update_all() takes table columns only.
    source = pa.concat_tables([changes, dup]).drop_columns(["op"])
    with pytest.raises(MergeConflict, match="more than once"):
        merge(
            spark, _df(spark, source), "sales.orders", warehouse=wh, partitions=4
        ).when_matched_update_all().execute()
    assert t.version == version and _rows(t) == before
    assert sorted(t.files().column("path").to_pylist()) == files
    # The tasks that succeeded wrote files; the driver deleted them: nothing is left unreferenced.
    assert t.cleanup(older_than=dt.timedelta(0), dry_run=False) == []


def test_bad_clauses_fail_on_the_driver_before_any_spark_job(spark: SparkSession, wh: str) -> None:
    _orders(wh)
    df = _df(spark, _changes())
    with pytest.raises(InvalidInput, match=r"WHEN NOT MATCHED BY SOURCE.*local Table\.merge"):
        merge(spark, df, "sales.orders", warehouse=wh).when_not_matched_by_source_delete()
    with pytest.raises(InvalidInput, match="WHEN NOT MATCHED BY SOURCE"):
        merge(spark, df, "sales.orders", warehouse=wh).when_not_matched_by_source_update(set={"qty": "0"})

    spark.sparkContext.setJobGroup("merge-check", "merge-check")
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup("merge-check"))
    with pytest.raises(FilterError, match="unknown source column 'nope'"):
        merge(spark, df, "sales.orders", warehouse=wh).when_matched_update(set={"qty": "s.nope"}).execute()
    with pytest.raises(InvalidInput, match=r"by name.*\['op'\]"):
        merge(spark, df, "sales.orders", warehouse=wh).when_not_matched_insert_all().execute()
    with pytest.raises(InvalidInput, match="at least one WHEN clause"):
        merge(spark, df, "sales.orders", warehouse=wh).execute()
    with pytest.raises(InvalidInput, match="must equate every key column"):
        merge(spark, df, "sales.orders", on="t.day = s.day", warehouse=wh).when_matched_delete().execute()
    jobs = [j for j in tracker.getJobIdsForGroup("merge-check") if j not in before]
    spark.sparkContext.setJobGroup("", "")
    assert jobs == []


def test_a_concurrent_commit_runs_the_merge_again_at_the_new_version(
    spark: SparkSession, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, distributed = _orders(wh, "sales.local"), _orders(wh, "sales.orders")
    racer = pa.table(
        {"id": [3, 2000], "day": ["d0", "d2"], "qty": [333, 1], "note": ["racer", "r"]}, schema=SCHEMA
    )
    stage = SparkMerge._stage
    calls: list[int] = []

    def stage_then_race(self: SparkMerge, *args: Any) -> Any:
        staged = stage(self, *args)
        calls.append(len(staged))
        if len(calls) == 1:  # another writer commits a key this MERGE read, after the tasks read it
            distributed.upsert(racer)
        return staged

    monkeypatch.setattr(SparkMerge, "_stage", stage_then_race)
    changes = _changes()
    got = _clauses(merge(spark, _df(spark, changes), "sales.orders", warehouse=wh, partitions=2)).execute()
    assert len(calls) == 2  # the first attempt lost the race and was run again
    local.upsert(racer)
    expected = _clauses(local.merge(changes)).execute()
    assert _rows(distributed) == _rows(local)
    assert _counts(got) == _counts(expected)
    assert (
        distributed.cleanup(older_than=dt.timedelta(0), dry_run=False) == []
    )  # the first attempt's files were deleted

    monkeypatch.setattr(SparkMerge, "_stage", _always_racing(stage, distributed, racer))
    with pytest.raises(CommitConflict):
        _clauses(merge(spark, _df(spark, changes), "sales.orders", warehouse=wh, attempts=2)).execute()


def _always_racing(stage: Callable[..., Any], t: mere.Table, racer: pa.Table) -> Callable[..., Any]:
    def run(self: SparkMerge, *args: Any) -> Any:
        staged = stage(self, *args)
        t.upsert(racer)
        return staged

    return run


def test_readme_merge_example_runs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("### MERGE from PySpark", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md[MERGE from PySpark]", "exec"), namespace)
    orders = namespace["orders"]
    assert isinstance(orders, mere.Table)
    assert _rows(orders) == [
        {"id": 2, "qty": 27, "note": "b"},
        {"id": 3, "qty": 30, "note": "c"},
        {"id": 4, "qty": 40, "note": "new"},
    ]


def test_the_spark_builder_has_the_local_clause_methods() -> None:
    # One set of WHEN clause methods (mere.table.merge.MergeBuilder): the Spark builder cannot drift from Merge.
    names = [n for n in dir(Merge) if n.startswith("when_")]
    assert len(names) == 9
    for name in names:
        assert callable(getattr(Merge, name)) and getattr(SparkMerge, name) is getattr(Merge, name)
