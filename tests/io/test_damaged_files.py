"""A damaged data file fails every read path with one StorageError naming the file and the table (issue 30,
item 6), and the documented recovery works.

A data file may be truncated (a copy cut short), empty, replaced by something that is not Parquet, or gone.
Reads used to raise pyarrow's ``ArrowInvalid: Parquet magic bytes not found`` naming no file. Every path
that reads data files is driven here: scans, counts, key lookups (key index), the change feed, compaction,
MERGE, UPDATE, DELETE, a write whose checks read the table, and scan tasks shipped to engine workers; with
a fresh handle (the footer is read from the damaged file) and a warm one (the footer was cached before the
damage, so the row-group and range reads meet it).
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import StorageError
from mere.table.table import Table

NAME = "shop.stock"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("day", pa.string()),
        ("qty", pa.int64()),
        ("total", pa.int64()),
        ("note", pa.string()),
    ]
)


def _rows(ids: range, day: str, qty: int) -> pa.Table:
    n = len(ids)
    return pa.table(
        {"id": ids, "day": [day] * n, "qty": [qty] * n, "total": [1] * n, "note": [f"n{i}" for i in ids]},
        schema=SCHEMA,
    )


def make_table(wh: Path) -> tuple[Table, str]:
    """A keyed table, partitioned, with several files per split; returns it and the path of a data file
    of partition d1 that holds keys 0-199 (the one tests damage)."""
    t = mere.connect(wh).create_table(
        NAME,
        SCHEMA,
        primary_key="id",
        partition_by="day",
        buckets=1,
        merge_operators={"total": "sum"},
        properties={"compaction.auto": "off"},  # the files stay as written, whatever the default
    )
    t.upsert(_rows(range(0, 200), "d1", 1))
    victim = t.inspect.files().column("path")[0].as_py()
    t.upsert(_rows(range(100, 300), "d1", 2))
    t.upsert(_rows(range(1000, 1100), "d2", 3))
    return t, victim


def damage(path: str, how: str, offset: int = 0) -> None:
    data = Path(path).read_bytes()
    if how == "truncated":
        Path(path).write_bytes(data[: offset % len(data)])
    elif how == "empty":
        Path(path).write_bytes(b"")
    elif how == "garbage":
        Path(path).write_bytes(b"not a parquet file\n" * 40)
    elif how == "csv":
        Path(path).write_bytes(b"id,day\n1,d1\n")
    elif how == "missing":
        os.remove(path)
    else:  # pragma: no cover
        raise AssertionError(how)


def _merge(t: Table) -> Any:
    src = _rows(range(150, 160), "d1", 9)
    return t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()


def _task(t: Table) -> Any:
    # What engines (Spark, Dask, Ray, DuckDB, Polars) ship to their workers: a pickled scan task.
    task = next(task for task in t.scan().tasks() if dict(task.split.partition) == {"day": "d1"})
    return list(pickle.loads(pickle.dumps(task)).read())


READS: dict[str, Callable[[Table], Any]] = {
    "to_arrow": lambda t: t.to_arrow(),
    "batches": lambda t: list(t.scan(columns=["id", "note"]).to_batches()),
    "count": lambda t: t.scan().count(),
    "explain": lambda t: t.scan().explain(),
    "lookup": lambda t: t.scan(filter="id = 42").to_arrow(),
    "lookup_in": lambda t: t.scan(filter="id IN (3, 42, 199)", columns=["id", "note"]).to_arrow(),
    "changes": lambda t: t.changes(0).read_all(),
    "task": _task,
    "split_tables": lambda t: t.scan().split_tables({('{"day":"d1"}', 0)}),
}
FOOTER_ONLY = {"explain", "upsert_sum"}  # paths that read footers only (a warm handle has them already)
WRITES: dict[str, Callable[[Table], Any]] = {
    "compact": lambda t: t.compact(),
    "merge": _merge,
    "update": lambda t: t.update(set={"note": "'x'"}, where="qty >= 1"),
    "delete": lambda t: t.delete("note = 'n7'"),
    "upsert_sum": lambda t: t.upsert(_rows(range(5, 6), "d1", 4)),
}


def _state(t: Table) -> tuple[int, list[str]]:
    return t.version, sorted(
        str(p.relative_to(t.storage.root)) for p in Path(t.storage.root).rglob("*.parquet")
    )


def _check(error: BaseException, t: Table, victim: str) -> None:
    text = str(error)
    assert os.path.join(t.storage.root, victim) in text or victim in text, text
    assert f"table {NAME}" in text, text


HOW = ["truncated", "empty", "garbage", "csv", "missing"]
# A warm handle read every footer before the damage: paths that read only footers then have nothing left to
# fail on, and a file replaced in place under a cached footer is not a case files meet (they are immutable).
CASES = [
    (path, warm, how)
    for path in [*READS, *WRITES]
    for warm in (False, True)
    for how in HOW
    if not (warm and (path in FOOTER_ONLY or how in ("garbage", "csv")))
]


@pytest.mark.parametrize(("path", "warm", "how"), CASES)
def test_every_read_path_names_the_damaged_file_and_table(
    tmp_path: Path, path: str, warm: bool, how: str
) -> None:
    t, victim = make_table(tmp_path / "wh")
    if warm:
        t.to_arrow()  # caches every footer in this handle's storage
        t.scan(filter="id = 42").to_arrow()
    else:
        t = mere.connect(tmp_path / "wh").table(NAME)
    full = os.path.join(t.storage.root, victim)
    damage(full, how, offset=16 if warm else len(Path(full).read_bytes()) // 2)
    before = _state(t)
    op = READS.get(path) or WRITES[path]
    with pytest.raises(StorageError) as caught:
        op(t)
    _check(caught.value, t, victim)
    assert _state(t) == before  # nothing committed, nothing left behind


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 1 << 20), path=st.sampled_from(["to_arrow", "lookup", "changes", "compact"]))
def test_a_file_cut_anywhere_is_a_storage_error(
    tmp_path_factory: pytest.TempPathFactory, cut: int, path: str
) -> None:
    wh = tmp_path_factory.mktemp("wh")
    t, victim = make_table(wh)
    full = os.path.join(t.storage.root, victim)
    damage(full, "truncated", cut)
    op = READS.get(path) or WRITES[path]
    before = _state(t)
    with pytest.raises(StorageError) as caught:
        op(mere.connect(wh).table(NAME))
    _check(caught.value, t, victim)
    assert _state(t) == before


@pytest.mark.parametrize("how", ["truncated", "missing"])
def test_an_arrow_stream_consumer_gets_the_same_message(tmp_path: Path, how: str) -> None:
    """Through the Arrow C stream (``pa.table(scan)``, DuckDB, Polars) the error crosses C: pyarrow hands
    it on as an OSError (StorageError's base) with mere's message."""
    t, victim = make_table(tmp_path / "wh")
    damage(os.path.join(t.storage.root, victim), how, 16)
    with pytest.raises(OSError) as caught:
        pa.table(mere.connect(tmp_path / "wh").table(NAME).scan())
    assert "StorageError" in str(caught.value) or f"table {NAME}" in str(caught.value)
    _check(caught.value, t, victim)


def test_reads_the_damaged_file_is_not_part_of_still_work(tmp_path: Path) -> None:
    t, victim = make_table(tmp_path / "wh")
    damage(os.path.join(t.storage.root, victim), "truncated", 100)
    t = mere.connect(tmp_path / "wh").table(NAME)
    assert t.scan(filter="day = 'd2'").count() == 100
    assert t.to_arrow(version=0).num_rows == 0


def test_recovery_as_documented(tmp_path: Path) -> None:
    """docs/concepts.md "Damaged or missing data files": put the file back (nothing lost); else replace the
    partition from the source, or roll back to before the file (its commit and later ones are lost)."""
    wh = tmp_path / "wh"
    t, victim = make_table(wh)
    full = os.path.join(t.storage.root, victim)
    good = Path(full).read_bytes()
    expected = t.to_arrow().sort_by("id")
    damage(full, "truncated", 10)
    t = mere.connect(wh).table(NAME)
    with pytest.raises(StorageError):
        t.to_arrow()
    files = t.inspect.files()
    added = files.filter(pa.compute.equal(files["path"], victim))["added_version"][0].as_py()
    assert added == 1
    assert t.cleanup(older_than=dt.timedelta(0)) == []  # cleanup never takes a live file

    Path(full).write_bytes(good)  # 1. the file back from a backup: nothing is lost
    assert mere.connect(wh).table(NAME).to_arrow().sort_by("id").equals(expected)

    damage(full, "missing")
    t = mere.connect(wh).table(NAME)
    t.overwrite(_rows(range(0, 300), "d1", 7), partition={"day": "d1"})  # 2. the partition again
    got = t.to_arrow().sort_by("id")
    assert got.num_rows == 400 and set(got.filter(pa.compute.equal(got["day"], "d1"))["qty"].to_pylist()) == {
        7
    }

    t.rollback(added - 1)  # 3. back to before the file: version 1's rows are gone, and what came after
    assert t.to_arrow().num_rows == 0


def test_the_error_is_typed_for_the_storage_layer_too(tmp_path: Path) -> None:
    """Storage itself (any caller) names the file; a handle for a table names the table as well."""
    t, victim = make_table(tmp_path / "wh")
    full = os.path.join(t.storage.root, victim)
    damage(full, "garbage")
    base = mere.connect(tmp_path / "wh").storage
    with pytest.raises(StorageError, match="Parquet magic bytes") as caught:
        base.metadata(victim)
    assert full in str(caught.value) and "table" not in str(caught.value)
    named = base.for_table(NAME)
    assert named.stats is base.stats
    with pytest.raises(StorageError, match=f"a data file of table {NAME}"):
        named.read_row_groups(victim, [0], None)
    assert pickle.loads(pickle.dumps(named)).table == NAME
