"""Compaction planned on one side, run by workers, committed once: the steps engines use to distribute it."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere import errors
from mere.metadata import FileEntry
from mere.table import compaction

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def rows(t: mere.Table) -> list[dict[str, object]]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type,return-value]


def on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def build(cat: mere.Catalog, name: str = "c.t") -> mere.Table:
    t = cat.create_table(name, SCHEMA, primary_key=["id"], buckets=3)
    for i in range(4):
        ids = list(range(i * 50, i * 50 + 100))  # half of each batch updates the previous one
        t.upsert(pa.table({"id": ids, "v": [i] * 100, "s": [f"{i}-{k}" for k in ids]}))
    t.delete("id < 10")
    return t


def run_elsewhere(plan: compaction.CompactionPlan) -> list[list[FileEntry]]:
    """What a worker does: receive pickled tasks, open storage from the task alone, return the files."""
    tasks = pickle.loads(pickle.dumps(plan.tasks))
    return [task.run() for task in tasks]


def test_distributed_steps_fold_every_split_and_keep_rows(cat: mere.Catalog) -> None:
    t = build(cat)
    before, version = rows(t), t.version
    plan = pickle.loads(pickle.dumps(t.plan_compaction()))
    assert plan.base_version == version and len(plan.tasks) == 3
    assert len(plan.remove) == len(t.files())
    results = run_elsewhere(plan)
    assert t.version == version  # nothing is visible before the commit
    record = t.commit_compaction(plan, results)
    assert record.operation == "compact" and t.version == version + 1
    assert rows(t) == before
    files = t.files()
    assert sorted(files.column("bucket").to_pylist()) == [0, 1, 2]  # one file per bucket
    assert t.scan(version=version).to_arrow().num_rows == len(before)  # time travel still reads the inputs
    assert t.plan_compaction().tasks == ()  # nothing left to fold
    assert t.compact() is None


def test_writes_between_plan_and_commit_still_win(cat: mere.Catalog) -> None:
    t = build(cat)
    plan = t.plan_compaction()
    results = run_elsewhere(plan)
    t.upsert(pa.table({"id": [20, 500], "v": [99, 99], "s": ["new", "new"]}))
    t.delete("id = 30")
    t.commit_compaction(plan, results)  # compacted files keep their inputs' sequence: older than both writes
    got = {r["id"]: r for r in rows(t)}
    assert got[20]["v"] == 99 and got[500]["v"] == 99 and 30 not in got
    assert got[40]["v"] == 0 and got[199]["v"] == 3


def test_commit_conflicts_when_inputs_were_replaced_and_leaves_nothing_behind(cat: mere.Catalog) -> None:
    t = build(cat)
    plan = t.plan_compaction()
    results = run_elsewhere(plan)
    new_files = {f.path for r in results for f in r}
    assert new_files <= on_disk(t)
    t.overwrite(pa.table({"id": [1], "v": [1], "s": ["x"]}))
    version = t.version
    with pytest.raises(errors.CommitConflict):
        t.commit_compaction(plan, results)
    assert t.version == version and rows(t) == [{"id": 1, "v": 1, "s": "x"}]
    assert not new_files & on_disk(t)
    assert t.compact() is None  # a fresh plan sees one file per bucket at most


def test_bad_commits_are_refused_and_delete_the_task_files(cat: mere.Catalog) -> None:
    t = build(cat)
    other = build(cat, "c.other")
    plan = t.plan_compaction()
    version, before = t.version, rows(t)

    def check_refused(results: Sequence[Sequence[FileEntry]], call: object) -> None:
        paths = {f.path for r in results for f in r}
        with pytest.raises(errors.InvalidInput):
            call()  # type: ignore[operator]
        assert t.version == version and rows(t) == before
        assert not paths & on_disk(t)

    results = run_elsewhere(plan)
    check_refused(results, lambda: other.commit_compaction(plan, results))
    results = run_elsewhere(plan)
    check_refused(results[:-1], lambda: t.commit_compaction(plan, results[:-1]))  # deletes what it was given
    t.abort_compaction(results[-1:])
    with pytest.raises(errors.InvalidInput):
        t.plan_compaction(min_files=0)
    with pytest.raises(errors.InvalidInput):
        t.plan_compaction(partition={"nope": 1})
    results = run_elsewhere(plan)
    junk: list[Any] = [[1, *results[0]], *results[1:]]  # an engine hook returned something else
    check_refused(results, lambda: t.commit_compaction(plan, junk))
    with pytest.raises(errors.InvalidInput):
        t.compact(run=lambda tasks: [["x.parquet"]] * len(tasks))
    results = run_elsewhere(plan)
    t.abort_compaction(results)
    assert not {f.path for r in results for f in r} & on_disk(t)
    assert t.compact() is not None and rows(t) == before  # the plan is still good after refusals


def test_a_failing_task_deletes_what_it_wrote(
    local_cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = build(local_cat)
    plan = t.plan_compaction()
    monkeypatch.setattr(compaction, "CHUNK_ROWS", 10)  # several output files per split
    real = compaction.write_prepared
    calls = {"n": 0}

    def flaky(*args: object, **kwargs: object) -> list[FileEntry]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compaction, "write_prepared", flaky)
    before_files = on_disk(t)
    with pytest.raises(OSError):
        plan.tasks[0].run()
    assert on_disk(t) == before_files
    version, before = t.version, rows(t)
    calls["n"] = -(10**9)  # no more failures
    assert t.compact() is not None and t.version == version + 1 and rows(t) == before
    files = t.files()
    assert files.num_rows > 3  # several files per bucket, each sorted by key
    for path in files.column("path").to_pylist():
        ids = t.storage.read_row_groups(path, [0], ["id"]).column("id").to_pylist()
        assert ids == sorted(ids)


def test_tables_without_key_and_partition_scoped_plans(cat: mere.Catalog) -> None:
    log = cat.create_table("c.log", SCHEMA)
    log.append(pa.table({"id": [1], "v": [1], "s": ["a"]}))
    log.append(pa.table({"id": [1], "v": [2], "s": ["b"]}))
    assert log.plan_compaction().tasks == () and log.compact() is None

    t = cat.create_table(
        "c.p",
        pa.schema([("day", pa.string()), *SCHEMA]),
        primary_key=["id"],
        partition_by=["day"],
        buckets=2,
        key_scope="partition",
    )
    for day in ("a", "b"):
        for i in range(3):
            t.upsert(pa.table({"day": [day] * 4, "id": [1, 2, 3, 4], "v": [i] * 4, "s": ["x"] * 4}))
    plan = t.plan_compaction(partition={"day": "a"})
    assert plan.tasks and all(dict(task.read.split.partition) == {"day": "a"} for task in plan.tasks)
    assert all(task.inputs == 3 for task in plan.tasks)
    before = sorted(t.to_arrow().to_pylist(), key=lambda r: (r["day"], r["id"]))
    t.commit_compaction(plan, run_elsewhere(plan))
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: (r["day"], r["id"])) == before
    per_day = t.files().column("partition").to_pylist()
    assert sum('"a"' in p for p in per_day) == 2 and sum('"b"' in p for p in per_day) == 6
    assert os.path.isdir(t.storage.full_path(t.location))
