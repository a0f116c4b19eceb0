"""Expiring old versions deletes only files no kept version needs, on both catalog backends."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest

import mere
from mere import errors

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def files_on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def test_expire_keeps_recent_versions_and_deletes_unneeded_files(cat: mere.Catalog) -> None:
    t = cat.create_table("x.t", SCHEMA, primary_key=["id"], buckets=2)
    for i in range(4):
        t.upsert(pa.table({"id": [1, 2, 3], "v": [i, i, i]}))
    assert t.compact() is not None  # version 5 replaces the files of versions 1-4
    t.upsert(pa.table({"id": [4], "v": [9]}))
    expected = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    at_v2 = t.scan(version=2).to_arrow().num_rows
    before = files_on_disk(t)

    assert t.expire(older_than=dt.timedelta(days=1)) == []  # nothing is a day old
    assert t.scan(version=2).to_arrow().num_rows == at_v2

    deleted = t.expire(older_than=dt.timedelta(0))
    assert deleted and set(deleted) <= before
    assert not any(os.path.exists(t.storage.full_path(p)) for p in deleted)
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    with pytest.raises(errors.NoSuchVersion):
        t.scan(version=2)
    assert [c.version for c in t.history()] == list(range(7))  # history itself is kept
    t.upsert(pa.table({"id": [5], "v": [5]}))  # writes go on
    assert t.to_arrow().num_rows == 5
    assert t.expire(older_than=dt.timedelta(0)) == []  # idempotent: compaction inputs are gone already
