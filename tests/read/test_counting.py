"""``counting.live_keys`` against a dict model: keys whose newest version is not a delete marker, for
windows of files oldest first, each sorted by key. The oldest commit may be several files (a compaction
cuts its sorted output by size) handed over in any order, with key ranges apart or not; newer files
update, insert and delete; windows without any delete marker take the sort of keys alone."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mere.kernels import pooled_concatenate
from mere.read.counting import live_keys
from mere.read.planner import FileTask
from mere.spec import OP_COLUMN, OP_DELETE, OP_MERGE, OP_PUT, TableSpec

SPEC = TableSpec.create(
    pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())]),
    "k",
    None,
    1,
    None,
    None,
    None,
)


def _part(seq: int, rows: list[tuple[int, int]], content: str = "data") -> tuple[FileTask, pa.Table]:
    rows = sorted(rows, key=lambda r: r[0])
    table = pa.table(
        {
            "k": pa.array([k for k, _ in rows], pa.int64()),
            OP_COLUMN: pa.array([op for _, op in rows], pa.int8()),
        }
    )
    return FileTask(f"f{seq}-{len(rows)}", seq, content, len(rows), 0), table


OPS = st.sampled_from([OP_MERGE, OP_PUT, OP_DELETE])


@settings(max_examples=150, deadline=None)
@given(
    base=st.lists(st.integers(0, 60), unique=True, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    base_deletes=st.booleans(),
    shared=st.booleans(),
    newer=st.lists(st.lists(st.tuples(st.integers(-5, 70), OPS), max_size=20), max_size=4),
    order=st.randoms(use_true_random=False),
    without_ops=st.lists(st.booleans(), max_size=10),
)
def test_live_keys_match_a_model(
    base: list[int],
    cuts: list[int],
    base_deletes: bool,
    shared: bool,
    newer: list[list[tuple[int, int]]],
    order: Any,
    without_ops: list[bool],
) -> None:
    base = sorted(base)
    bounds = [0, *sorted({min(c, len(base)) for c in cuts}), len(base)]
    # The oldest commit: files of one sequence, apart by key range (or, ``shared``, one key in two).
    first: list[list[tuple[int, int]]] = []
    for lo, hi in itertools.pairwise(bounds):
        chunk = base[lo:hi]
        ops = [OP_DELETE if base_deletes and k % 7 == 0 else OP_MERGE for k in chunk]
        first.append(list(zip(chunk, ops)))
    if shared and len(first) > 1 and first[0] and first[1]:
        first[1].append((first[0][-1][0], OP_DELETE))  # same commit, later file: the key is deleted
    parts = [_part(1, rows) for rows in first if rows]
    order.shuffle(parts)
    model: dict[int, int] = {}
    for _, table in parts:  # the files' order is the commit's row order
        model.update(zip(table.column("k").to_pylist(), table.column(OP_COLUMN).to_pylist()))
    for seq, rows in enumerate(newer, start=2):
        dedup = dict(rows)  # one version of a key per file
        parts.append(_part(seq, list(dedup.items())))
        model.update(dedup)
    expected = sum(1 for op in model.values() if op != OP_DELETE)
    parts = [p for p in parts if p[1].num_rows]
    assert live_keys(SPEC, parts) == expected
    # The reader leaves out the operation column of files whose footers rule out delete markers.
    slim = [
        (task, table.drop_columns([OP_COLUMN]))
        if drop and OP_DELETE not in table.column(OP_COLUMN).to_pylist()
        else (task, table)
        for (task, table), drop in zip(parts, [*without_ops, *[False] * len(parts)])
    ]
    assert live_keys(SPEC, slim) == expected


def test_a_window_without_deletes_counts_distinct_keys() -> None:
    parts = [_part(1, [(k, OP_MERGE) for k in range(0, 100, 2)]), _part(2, [(k, OP_PUT) for k in range(50)])]
    assert live_keys(SPEC, parts) == len(set(range(0, 100, 2)) | set(range(50)))
    assert live_keys(SPEC, [*parts, _part(3, [(1, OP_DELETE), (500, OP_DELETE)])]) == 74


def test_count_reads_operations_only_of_files_that_may_hold_deletes(tmp_path: Any, monkeypatch: Any) -> None:
    import mere
    from mere.io.storage import Storage

    t = mere.connect(str(tmp_path)).create_table(
        "db.t", pa.schema([("k", pa.int64()), ("v", pa.int64())]), primary_key=["k"]
    )
    t.upsert(pa.table({"k": range(0, 100), "v": range(100)}))
    t.upsert(pa.table({"k": range(50, 150), "v": range(100)}))
    t.delete("k >= 140 or k < 5")
    t.upsert(pa.table({"k": [1, 2, 200], "v": [0, 0, 0]}))
    expected = len((set(range(150)) - set(range(140, 150)) - set(range(5))) | {1, 2, 200})
    assert t.scan().to_arrow().num_rows == expected
    read: list[tuple[str, bool]] = []
    real = Storage.read_row_groups

    def spy(self: Storage, rel: str, groups: Any, columns: Any, *args: Any, **kwargs: Any) -> pa.Table:
        read.append((rel, OP_COLUMN in (columns or ())))
        return real(self, rel, groups, columns, *args, **kwargs)

    monkeypatch.setattr(Storage, "read_row_groups", spy)
    assert t.scan().count() == expected
    with_ops = {rel for rel, ops in read if ops}
    assert with_ops and len(with_ops) < len({rel for rel, _ in read})
    assert all("/del-" in rel or "/part-" in rel for rel in with_ops)
    assert any("/del-" in rel for rel in with_ops)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["int8", "int32", "int64", "float64"]),
    lengths=st.lists(st.integers(0, 50), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_pooled_concatenate_is_a_writable_copy(dtype: str, lengths: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-100, 100, n).astype(dtype) for n in lengths]
    kept = [a.copy() for a in arrays]
    out = pooled_concatenate(arrays)
    assert out.dtype == np.dtype(dtype)
    assert out.tolist() == np.concatenate(kept).tolist()
    out.sort(kind="stable")  # in place: the inputs stay as they were
    assert out.tolist() == sorted(np.concatenate(kept).tolist())
    assert all(a.tolist() == b.tolist() for a, b in zip(arrays, kept))
