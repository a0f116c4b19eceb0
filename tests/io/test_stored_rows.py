"""Splits whose stored rows already are their merged rows (what engines may read with their own Parquet
reader, e.g. Spark in ``read_table``): whenever ``stored_rows_are_merged`` says so, the files read as
they are must equal mere's merged read of the split, after any sequence of the model test's operations.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

import mere
from mere.read.reader import stored_rows_are_merged
from mere.spec import OP_COLUMN
from mere.table import compaction
from test_model import LakeMachine


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


def stored_and_merged(t: mere.Table) -> tuple[int, int]:
    """Check every clean split of ``t``; return (clean splits, splits)."""
    scan = t.scan()
    splits = scan.plan()
    clean = 0
    for split in splits:
        if not stored_rows_are_merged(t.storage, t.spec, split):
            continue
        clean += 1
        raw = pa.concat_tables(
            [
                pq.read_table(t.storage.full_path(f.path), columns=t.schema.names).cast(t.schema)
                for f in split.files
            ]
        )
        merged = pa.Table.from_batches(list(scan.read_split(split)), schema=t.schema)
        assert _rows(raw) == _rows(merged), (t.name, split)
    return clean, len(splits)


class StoredRowsMachine(LakeMachine):
    seen_clean = 0

    @rule()
    def compact_everything(self) -> None:
        for t, _ in self._pk_tables():
            t.compact(min_files=1)
        self._snapshot()

    @invariant()
    def clean_splits_read_as_stored(self) -> None:
        for t in (self.t_last, self.t_ops, self.t_plain):
            clean, _ = stored_and_merged(t)
            type(self).seen_clean += clean
            # count() takes clean splits' row counts from the catalog and reads the others.
            assert t.scan().count() == t.scan().to_arrow().num_rows


def test_clean_splits_equal_their_merged_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compaction, "CHUNK_ROWS", 4)  # compactions write several files per split
    run_state_machine_as_test(
        StoredRowsMachine,
        settings=settings(
            max_examples=20, stateful_step_count=15, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    assert StoredRowsMachine.seen_clean > 0


def test_overlapping_files_of_one_write_are_not_clean(tmp_path: Any) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key=["k"], buckets=1)
    t.upsert(pa.table({"k": [1, 2, 3], "v": [1, 1, 1]}, schema=schema))
    (split,) = t.scan().plan()
    assert stored_rows_are_merged(t.storage, t.spec, split)
    t.upsert(pa.table({"k": [2], "v": [2]}, schema=schema))  # key 2 in two files
    (split,) = t.scan().plan()
    assert not stored_rows_are_merged(t.storage, t.spec, split)
    t.upsert(pa.table({"k": [10], "v": [2]}, schema=schema))
    t.compact(min_files=1)
    t.upsert(pa.table({"k": [20], "v": [2]}, schema=schema))  # disjoint from the compacted file
    (split,) = t.scan().plan()
    assert len(split.files) == 2 and stored_rows_are_merged(t.storage, t.spec, split)
    t.delete("k = 20")  # a delete marker: merge needed again
    (split,) = t.scan().plan()
    assert not stored_rows_are_merged(t.storage, t.spec, split)
    assert OP_COLUMN not in t.scan().schema.names


def test_count_of_a_compacted_table_reads_no_data(tmp_path: Any) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key=["k"], buckets=2)
    t.upsert(pa.table({"k": list(range(100)), "v": [1] * 100}, schema=schema))
    t.upsert(pa.table({"k": list(range(50, 150)), "v": [2] * 100}, schema=schema))
    t.delete("k < 10")
    before = t.storage.stats.row_groups_read
    assert t.scan().count() == 140
    assert t.storage.stats.row_groups_read > before  # overlapping files and deletes: merged
    t.compact(min_files=1)
    before = t.storage.stats.row_groups_read
    assert t.scan().count() == 140 == len(t.to_arrow())
    assert t.scan(filter="v = 2").count() == 100
    assert t.scan(filter="k >= 140").count() == 10
    t.storage.stats.row_groups_read = before
    assert t.scan().count() == 140
    assert t.storage.stats.row_groups_read == before  # footers only
