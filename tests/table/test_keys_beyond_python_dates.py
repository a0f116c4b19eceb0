"""Keys that are legal Arrow dates and timestamps but have no Python value (before year 1, after year
9999; the ns timestamp -2**63, which pandas reads as NaT): writes that prune their reads by the keys' values (a delete of keys on a table with table-wide
keys, a MERGE whose INSERT computes the key) must read everything instead of failing with OverflowError."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.errors import MergeConflict

# (type, raw values: before year 1, a plain date, after year 9999)
KEYS = {
    "date32": (pa.date32(), [-800_000, 5, 3_000_000, 3_000_001]),
    # -2**63 ns is a value, which pandas reads as NaT (a NULL in an IN list would match nothing)
    "timestamp_ns": (pa.timestamp("ns"), [-(2**63), 5, 2**63 - 2, 2**63 - 1]),
    "timestamp_us": (pa.timestamp("us"), [-(2**62), 5, 2**62, 2**62 + 1]),
    "timestamp_ms_utc": (pa.timestamp("ms", "UTC"), [-(2**50), 5, 2**50, 2**50 + 1]),
}


def _keys(kind: str, raw: list[int]) -> pa.Array:
    arrow_type, _ = KEYS[kind]
    values = pa.array(raw, pa.int64())
    return (values.cast(pa.int32()) if arrow_type == pa.date32() else values).view(arrow_type)


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_delete_of_keys_on_table_wide_keys(tmp_path: Path, kind: str) -> None:
    arrow_type, raw = KEYS[kind]
    schema = pa.schema([pa.field("k", arrow_type), pa.field("p", pa.string()), pa.field("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table(
        "db.t", schema, primary_key="k", partition_by="p", key_scope="table", buckets=2
    )
    t.upsert(pa.table({"k": _keys(kind, raw), "p": ["a", "b", "a", "b"], "v": [0, 1, 2, 3]}, schema=schema))
    # A MERGE inserting a key held in another partition: a table-wide key clashes wherever it lives.
    held = _keys(kind, raw[:1])  # in partition "a"
    source = pa.table({"k2": _keys(kind, [raw[1] + 1]), "k3": held, "p": ["b"], "v": [9]})  # no match
    before = t.version
    with pytest.raises(MergeConflict):
        t.merge(source, on="t.k = s.k2").when_not_matched_insert(
            values={"k": "s.k3", "p": "s.p", "v": "s.v"}
        ).execute()
    assert t.version == before and t.scan().count() == 4
    before = t.version
    t.delete(pa.table({"k": _keys(kind, [raw[0], raw[2]])}))
    assert t.version == before + 1
    assert sorted(t.scan().to_arrow().column("v").to_pylist()) == [1, 3]
    assert t.scan().count() == 2


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_merge_inserting_computed_keys(tmp_path: Path, kind: str) -> None:
    arrow_type, raw = KEYS[kind]
    schema = pa.schema([pa.field("k", arrow_type), pa.field("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table("db.t", schema, primary_key="k")
    t.upsert(pa.table({"k": _keys(kind, raw[:1]), "v": [0]}, schema=schema))
    source = pa.table({"k2": _keys(kind, raw[:2]), "k3": _keys(kind, raw[2:]), "v": [5, 6]})
    metrics = (
        t.merge(source, on="t.k = s.k2")
        .when_matched_update(set={"v": "s.v"})
        .when_not_matched_insert(values={"k": "s.k3", "v": "s.v"})
        .execute()
    )
    assert (metrics.updated, metrics.inserted) == (1, 1)
    clash = pa.table({"k2": _keys(kind, raw[2:3]), "k3": _keys(kind, raw[:1]), "v": [7]})
    before = t.version
    with pytest.raises(MergeConflict):  # an INSERT of a key the table holds
        t.merge(clash, on="t.k = s.k2").when_not_matched_insert(values={"k": "s.k3", "v": "s.v"}).execute()
    assert t.version == before
    rows = t.scan().to_arrow().sort_by("v")
    assert rows.column("v").to_pylist() == [5, 6]
    assert rows.column("k").combine_chunks() == _keys(kind, [raw[0], raw[3]])
