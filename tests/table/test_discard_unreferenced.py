"""Refused or replayed commits of staged files never delete files a landed version references (a driver
retrying the commit of the same messages), on every path that gives staged files up."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import errors

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])


def _landed(tmp_path: Path) -> tuple[mere.Table, list[mere.table.commit.StagedChange], pa.Table]:
    t = mere.connect(str(tmp_path)).create_table("s.t", SCHEMA, primary_key="k", buckets=2)
    staged = [t.stage(pa.table({"k": [1, 2, 3], "v": [1, 2, 3]}))]
    t.commit(staged, idempotency_key="job-1")
    return t, staged, t.to_arrow().sort_by("k")


def test_a_refused_add_staged_keeps_files_a_landed_commit_holds(tmp_path: Path) -> None:
    t, staged, rows = _landed(tmp_path)
    with pytest.raises(errors.InvalidInput), t.transaction() as tx:
        tx.add_staged(staged, dynamic="yes")  # type: ignore[arg-type]
    assert t.to_arrow().sort_by("k").equals(rows)
    assert t.cleanup(older_than=dt.timedelta(0)) == []


def test_a_refused_or_replayed_commit_keeps_files_a_landed_commit_holds(tmp_path: Path) -> None:
    t, staged, rows = _landed(tmp_path)
    with pytest.raises(errors.InvalidInput):
        t.commit(staged, operation="append")  # refused: append does not apply to a keyed table
    assert t.commit(staged, idempotency_key="job-1").already_committed
    with t.transaction(idempotency_key="job-1") as tx:
        tx.add_staged(staged)
    assert tx.already_committed() is not None
    assert t.to_arrow().sort_by("k").equals(rows)
