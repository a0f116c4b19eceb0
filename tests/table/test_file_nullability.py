"""Files mark the columns that hold no NULL in them required (``mere.io.parquet.required_where_no_nulls``):
tables whose files differ in nullability read, merge, filter, compact, time-travel and evolve as one
table of the table's own schema, against a dict model, and other engines read the files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.io import parquet as P

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("n", pa.int64()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("p", pa.struct([("a", pa.int32())])),
    ]
)

_value = {
    "n": st.integers(-(2**40), 2**40),
    "x": st.floats(allow_nan=False, width=64),
    "s": st.sampled_from(["a", "b", "é", "", "long text " * 3]),
    "tags": st.lists(st.sampled_from(["t", "u"]), max_size=2),
    "p": st.fixed_dictionaries({"a": st.integers(-5, 5)}),
}


@st.composite
def batches(draw: Any) -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["upsert", "upsert", "delete", "compact"]))
        keys = draw(st.lists(st.integers(0, 30), min_size=1, max_size=12, unique=True))
        # Per batch, each column holds NULLs or none: files of one table differ in nullability.
        nullable = {c: draw(st.booleans()) for c in _value}
        rows = []
        for k in keys:
            row: dict[str, Any] = {"k": k}
            for c, values in _value.items():
                row[c] = None if nullable[c] and draw(st.booleans()) else draw(values)
            rows.append(row)
        out.append((kind, rows))
    return out


def _check_files(t: mere.Table) -> None:
    """Each live data file: a column is required exactly where it holds no NULL."""
    for f in t.files().to_pylist():
        path = t.storage.full_path(f["path"])
        schema = pq.read_schema(path)
        data = pq.read_table(path)
        for name in ("n", "x", "s", "tags", "p"):
            if name in schema.names:
                assert schema.field(name).nullable == (data.column(name).null_count > 0), (f["path"], name)


@settings(deadline=None)
@given(steps=batches(), buckets=st.sampled_from([1, 2]))
def test_files_of_differing_nullability_read_as_one_table(
    tmp_path_factory: Any, steps: Any, buckets: int
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("w")))
    t = cat.create_table("t", SCHEMA, primary_key="k", buckets=buckets, properties={"compaction.auto": "off"})
    model: dict[int, dict[str, Any]] = {}
    versions = []
    for kind, rows in steps:
        if kind == "upsert":
            t.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
            model.update({r["k"]: r for r in rows})
        elif kind == "delete":
            t.delete(pa.table({"k": [r["k"] for r in rows]}))
            for r in rows:
                model.pop(r["k"], None)
        else:
            t.compact()
        versions.append((t.version, {k: dict(v) for k, v in model.items()}))
        _check_files(t)
        got = t.to_arrow()
        assert got.schema.equals(t.schema, check_metadata=False)  # the table's nullability, not a file's
        assert {r["k"]: r for r in got.to_pylist()} == model
        # A non-key filter (the selective route) and a key filter.
        want = {k: r for k, r in model.items() if r["n"] is not None and r["n"] > 0}
        assert {r["k"]: r for r in t.scan(filter="n > 0").to_arrow().to_pylist()} == want
        want = {k: r for k, r in model.items() if r["s"] is None}
        assert {r["k"]: r for r in t.scan(filter="s IS NULL").to_arrow().to_pylist()} == want
        assert t.scan().count() == len(model)
    for version, expected in versions:
        assert {r["k"]: r for r in t.to_arrow(version=version).to_pylist()} == expected


def test_other_readers_read_files_of_differing_nullability(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("t", SCHEMA, primary_key="k", properties={"compaction.auto": "off"})
    full = {"n": 1, "x": 1.5, "s": "a", "tags": ["t"], "p": {"a": 1}}
    t.upsert(pa.Table.from_pylist([{"k": 1, **full}, {"k": 2, **full}], schema=SCHEMA))
    t.upsert(pa.Table.from_pylist([{"k": 3, **dict.fromkeys(full)}], schema=SCHEMA))
    paths = [t.storage.full_path(f["path"]) for f in t.files().to_pylist()]
    assert {pq.read_schema(p).field("n").nullable for p in paths} == {False, True}
    got = duckdb.sql(f"select k, n, s from read_parquet({paths!r}) order by k").fetchall()
    assert got == [(1, 1, "a"), (2, 1, "a"), (3, None, None)]
    t.add_column("later", pa.int32())  # a column the files predate
    t.upsert(pa.Table.from_pylist([{"k": 4, **full, "later": 7}], schema=t.schema))
    rows = {r["k"]: r for r in t.to_arrow().to_pylist()}
    assert rows[4]["later"] == 7 and rows[1]["later"] is None and rows[3]["n"] is None
    assert t.to_arrow().schema.field("n").nullable


@pytest.mark.parametrize("required", [True, False])
def test_the_switch_keeps_the_tables_nullability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    monkeypatch.setattr(P, "REQUIRED_WHERE_NO_NULLS", required)
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("t", SCHEMA, primary_key="k")
    t.upsert(
        pa.Table.from_pylist([{"k": 1, "n": 2, "x": 1.0, "s": "a", "tags": [], "p": {"a": 1}}], schema=SCHEMA)
    )
    (f,) = t.files().to_pylist()
    schema = pq.read_schema(t.storage.full_path(f["path"]))
    assert schema.field("n").nullable is not required
    assert not schema.field("k").nullable  # the key is NOT NULL either way


def test_storage_reads_columns_made_required_back_nullable(tmp_path: Path) -> None:
    """Every reader of mere sees columns as written: a file's columns made required for holding no NULL
    come back nullable, from whole row groups and from the page-level point reads, so that rows of files
    of both kinds concatenate (a change log's images once failed on it)."""
    cat = mere.connect(str(tmp_path))
    t = cat.create_table(
        "t", SCHEMA, primary_key="k", properties={"compaction.auto": "off", "changes.log": "on"}
    )
    full = {"n": 1, "x": 1.5, "s": "a", "tags": ["t"], "p": {"a": 1}}
    t.upsert(pa.Table.from_pylist([{"k": i, **full} for i in range(3)], schema=SCHEMA))
    t.upsert(pa.Table.from_pylist([{"k": 1, **dict.fromkeys(full)}], schema=SCHEMA))
    with t.transaction() as tx:  # a logged commit reads both files' rows of key 1 for its images
        tx.upsert(pa.Table.from_pylist([{"k": 1, **full, "n": 5}], schema=SCHEMA))
        tx.delete(pa.table({"k": [2]}))
    for f in t.files().to_pylist():
        md = t.storage.metadata(f["path"])
        rows = t.storage.read_row_groups(f["path"], range(md.num_row_groups), None)
        on_disk = pq.read_schema(t.storage.full_path(f["path"]))
        for name in ("n", "x", "s"):
            if name in rows.column_names:
                assert rows.schema.field(name).nullable, (f["path"], name)
                assert on_disk.field(name).nullable == (rows.column(name).null_count > 0)
    assert {r["k"]: r["n"] for r in t.to_arrow().to_pylist()} == {0: 1, 1: 5}
    assert {r["k"]: r["n"] for r in t.scan(filter="k = 1").to_arrow().to_pylist()} == {1: 5}


def test_a_stale_list_of_required_columns_is_not_written_again(tmp_path: Path) -> None:
    """Rows read from a file carry its footer's ``mere.required``; written again where those columns now
    hold NULLs, the new file must not list them."""
    from mere.io.storage import Storage

    storage = Storage(str(tmp_path))
    rows = pa.table({"a": pa.array([1, 2], pa.int64()), "b": pa.array([1.0, 2.0])})
    P.write_parquet(storage, "one.parquet", rows, row_group_rows=1024)
    back = pq.read_table(tmp_path / "one.parquet")
    assert back.schema.metadata and b"mere.required" in back.schema.metadata
    schema = pa.schema([("a", pa.int64()), ("b", pa.float64())], metadata=back.schema.metadata)
    with_nulls = pa.Table.from_arrays([pa.array([None, 2], pa.int64()), pa.array([None, 2.0])], schema=schema)
    P.write_parquet(storage, "two.parquet", with_nulls, row_group_rows=1024)
    md = pq.read_metadata(tmp_path / "two.parquet")
    assert b"mere.required" not in (md.metadata or {})
    assert storage.read_row_groups("two.parquet", [0], None).column("a").to_pylist() == [None, 2]
