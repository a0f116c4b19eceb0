"""A handle loaded before another writer changed the columns: its reads see each version's own columns (the
newest too), its change feeds speak the table's current columns, and its writes are refused with
SchemaChanged before they read or write anything."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import errors

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])


def _stale(tmp_path: Path) -> tuple[mere.Table, mere.Table]:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("s.t", SCHEMA, primary_key="k", buckets=2)
    t.upsert(pa.table({"k": [1], "v": [1]}))
    stale = cat.table("s.t")
    t.add_column("n", pa.int64(), default=7)
    t.upsert(pa.table({"k": [2], "v": [2], "n": [5]}))
    return stale, t


def test_a_stale_handle_reads_and_follows_a_column_another_writer_added(tmp_path: Path) -> None:
    stale, t = _stale(tmp_path)
    expected = [{"k": 1, "v": 1, "n": 7}, {"k": 2, "v": 2, "n": 5}]
    assert stale.to_arrow().sort_by("k").to_pylist() == expected
    assert stale.scan(filter="n = 5").to_arrow().to_pylist() == [expected[1]]
    feed = stale.changes(0).read_all().sort_by("k").select(["k", "v", "n", "_change"]).to_pylist()
    assert feed == [{**row, "_change": "insert"} for row in expected]
    assert stale.schema == SCHEMA  # the handle itself keeps what it loaded ...
    with pytest.raises(errors.SchemaChanged):  # ... and its writes are refused, as before
        stale.update(set={"v": "v + 1"}, where="k = 1")
    with pytest.raises(errors.SchemaChanged):
        stale.delete("v = 1")
    assert t.refresh().to_arrow().sort_by("k").to_pylist() == expected
    assert stale.refresh().schema == t.schema


def test_a_stale_handle_reads_older_versions_with_their_own_columns(tmp_path: Path) -> None:
    stale, t = _stale(tmp_path)
    assert stale.to_arrow(version=1).to_pylist() == [{"k": 1, "v": 1}]
    assert stale.to_arrow(version=t.version).num_columns == 3
