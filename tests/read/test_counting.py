"""``counting.live_keys`` against a dict model: keys whose newest version is not a delete marker, for
windows of files oldest first, each sorted by key. The oldest commit may be several files (a compaction
cuts its sorted output by size) handed over in any order, with key ranges apart or not; newer files
update, insert and delete; windows without any delete marker take the sort of keys alone."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mere.kernels import pooled_concatenate
from mere.read import counting
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


# Key types the byte map takes, each with values near a limit of its range (offsets must not overflow).
MAP_TYPES = {
    "int8": (pa.int8(), -128),
    "int16": (pa.int16(), 32_767 - 399),
    "uint8": (pa.uint8(), 0),
    "uint64": (pa.uint64(), 2**64 - 400),
    "int64 low": (pa.int64(), -(2**63)),
    "int64 high": (pa.int64(), 2**63 - 400),
    "date32": (pa.date32(), 0),
    "date64": (pa.date64(), 0),
    "uint32": (pa.uint32(), 2**32 - 400),
    "timestamp": (pa.timestamp("us", "UTC"), -(2**40)),
    "float64": (pa.float64(), 0),  # not integer-like: always sorted
}


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(sorted(MAP_TYPES)),
    files=st.lists(st.lists(st.tuples(st.integers(0, 399), OPS), max_size=40), min_size=1, max_size=5),
    repeat=st.booleans(),
    spread=st.sampled_from([1, 8, 50]),
    cuts=st.lists(st.integers(0, 40), max_size=3),
    without_ops=st.booleans(),
)
def test_live_keys_by_byte_map_equal_the_sorted_count_and_a_model(
    kind: str,
    files: list[list[tuple[int, int]]],
    repeat: bool,
    spread: int,
    cuts: list[int],
    without_ops: bool,
) -> None:
    """Windows of one key column counted by the byte map of the key range and by sorting (the map turned
    off) agree with the dict model, for every integer-like key type near its limits, files of several
    chunks, key ranges narrow and wide, and files that hold a key twice (the map declines them)."""
    arrow_type, low = MAP_TYPES[kind]
    width = 255 if kind in ("int8", "uint8") else 399
    parts: list[tuple[FileTask, pa.Table]] = []
    model: dict[int, int] = {}
    for seq, rows in enumerate(files, start=1):
        keyed = sorted(dict((min(k * spread, width), op) for k, op in rows).items())
        if repeat and keyed:  # the same key twice in one file, the later with another operation
            keyed.insert(1, (keyed[0][0], OP_DELETE if keyed[0][1] != OP_DELETE else OP_MERGE))
        if without_ops and all(op != OP_DELETE for _, op in keyed):
            ops = None
        else:
            ops = pa.array([op for _, op in keyed], pa.int8())
        values = [low + k for k, _ in keyed]
        if pa.types.is_date(arrow_type) or pa.types.is_timestamp(arrow_type):
            keys = pa.array(values, pa.int64()).cast(pa.int32() if kind == "date32" else pa.int64())
            keys = keys.view(arrow_type)
        else:
            keys = pa.array(values, arrow_type)
        bounds = [0, *sorted({min(c, len(values)) for c in cuts}), len(values)]
        column = pa.chunked_array([keys[a:b] for a, b in itertools.pairwise(bounds)], arrow_type)
        table = pa.table({"k": column} if ops is None else {"k": column, OP_COLUMN: ops})
        if table.num_rows:
            parts.append((FileTask(f"f{seq}", seq, "data", table.num_rows, 0), table))
        model.update(keyed)
    expected = sum(1 for op in model.values() if op != OP_DELETE)
    assert live_keys(SPEC, parts) == expected  # the count reads column "k" whatever its type
    each_ops = [p.column(OP_COLUMN).to_numpy() if OP_COLUMN in p.column_names else None for _, p in parts]
    rows = sum(p.num_rows for _, p in parts)
    mapped = counting._live_by_map("k", parts, each_ops)
    assert mapped is None or mapped == expected
    if model and kind != "float64" and not repeat and max(model) - min(model) < 8 * rows:
        assert mapped == expected  # narrow enough, one sorted run a file: the map counted it
    if parts and (kind == "float64" or (repeat and not cuts)):
        assert mapped is None  # not integer-like, or a chunk holding a key twice: sorted instead
    try:
        span, counting.MAP_SPAN_PER_ROW = counting.MAP_SPAN_PER_ROW, 0  # sorted only
        assert live_keys(SPEC, parts) == expected
    finally:
        counting.MAP_SPAN_PER_ROW = span


@pytest.mark.parametrize(
    ("arrow_type", "low"),
    [
        (pa.int8(), -128),
        (pa.uint8(), 0),
        (pa.int16(), -(2**15)),
        (pa.uint16(), 2**16 - 201),
        (pa.int32(), 2**31 - 201),
        (pa.int64(), -(2**63)),
        (pa.uint64(), 2**64 - 201),
    ],
)
def test_live_keys_by_byte_map_near_a_type_limit(arrow_type: pa.DataType, low: int) -> None:
    """200 keys from a limit of the type, then a file deleting every third: offsets past the narrow
    type's own range still land on their key's byte."""
    keys = [low + i for i in range(200)]
    gone = keys[::3]
    parts = [
        (FileTask("a", 1, "data", 200, 0), pa.table({"k": pa.array(keys, arrow_type)})),
        (
            FileTask("b", 2, "delete", len(gone), 0),
            pa.table(
                {
                    "k": pa.array(gone, arrow_type),
                    OP_COLUMN: pa.array([OP_DELETE] * len(gone), pa.int8()),
                }
            ),
        ),
    ]
    each_ops = [None, np.full(len(gone), OP_DELETE, np.int8)]
    assert counting._live_by_map("k", parts, each_ops) == 200 - len(gone)
    assert live_keys(SPEC, parts) == 200 - len(gone)


def test_live_keys_by_byte_map_on_reused_pool_memory() -> None:
    """The map is taken from Arrow's pool, which hands back freed memory as it was: bytes a previous
    allocation left set must not count as keys."""
    dirty = np.frombuffer(pa.allocate_buffer(1 << 20), dtype=np.uint8)
    dirty[:] = 0xFF
    del dirty
    keys = np.arange(0, 1 << 20, 4, dtype=np.int64)  # a range of 1 MiB, one key in four
    parts = [(FileTask("a", 1, "data", len(keys), 0), pa.table({"k": keys}))]
    assert counting._live_by_map("k", parts, [None]) == len(keys)
    assert live_keys(SPEC, parts) == len(keys)


@pytest.mark.parametrize("arrow_type", [pa.date32(), pa.timestamp("ms"), pa.timestamp("us", "UTC")])
def test_count_of_keys_beyond_python_datetimes_in_a_compaction_cut_into_files(
    tmp_path: Any, monkeypatch: Any, arrow_type: pa.DataType
) -> None:
    """A compaction's output cut into several files is ordered by its first keys before counting: dates
    and timestamps beyond year 9999 have no Python value and were compared as such (OverflowError)."""
    import mere
    from mere.table import compaction

    monkeypatch.setattr(compaction, "CHUNK_ROWS", 100)
    step = {"date32[day]": 1, "timestamp[ms]": 86_400_000}.get(str(arrow_type), 86_400_000_000)
    start = 3_000_000 * step  # about year 10183
    raw = pa.array([start + i * step for i in range(1000)], pa.int64())
    keys = (raw.cast(pa.int32()) if pa.types.is_date32(arrow_type) else raw).view(arrow_type)
    t = mere.connect(str(tmp_path)).create_table(
        "db.t", pa.schema([pa.field("k", arrow_type), pa.field("v", pa.int64())]), primary_key=["k"]
    )
    t.upsert(pa.table({"k": keys, "v": range(1000)}))
    t.upsert(pa.table({"k": keys[:1], "v": [9]}))
    t.compact()
    files = t.files_at(t.version)
    assert len(files) > len({(f.bucket, f.seq) for f in files})  # a bucket's output cut into files
    t.upsert(pa.table({"k": keys[5:6], "v": [9]}))
    t.delete(pa.table({"k": keys[7:9]}))
    assert t.scan().to_arrow().num_rows == 998
    assert t.scan(threads=1).count() == t.scan(threads=2).count() == 998


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
