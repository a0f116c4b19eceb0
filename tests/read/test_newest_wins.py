"""Newest-wins merge marking: the sorted search used for a big run and a few newer rows agrees with a dict
model, and so does a read of a compacted table with small newer files (NOT NULL and dictionary columns in
the compacted file, nullable plain ones in the newer files). A scan's filter folded into the merge (it is
evaluated on the files' rows) gives the rows of filtering the merged rows, and never fails on a row that
a newer one replaced. The DuckDB differential test (``test_differential.py``) checks random filters on
merged tables besides."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.arrays import bool_array
from mere.read.newest_wins import SEARCH_RATIO, newest_wins
from mere.read.reader import _kept
from mere.spec import OP_DELETE, OP_PUT

# These tables are small: their splits would read dictionary pages plain; here they take the dictionary path.
pytestmark = pytest.mark.usefixtures("strings_read_as_dictionaries")


def model_winners(files: list[tuple[list[int], list[int]]]) -> np.ndarray:
    """Row by row: the newest row of each key wins unless it is a delete marker."""
    last: dict[int, int] = {}
    ops: list[int] = []
    row = 0
    for keys, file_ops in files:
        for k, op in zip(keys, file_ops):
            last[k] = row
            ops.append(op)
            row += 1
    wins = np.zeros(row, dtype=bool)
    for at in last.values():
        wins[at] = ops[at] != OP_DELETE
    return wins


@st.composite
def runs(draw: st.DrawFn) -> list[tuple[list[int], list[int]]]:
    """Files oldest first, each sorted by key with unique keys; often one big file and a few newer rows
    (the searched case), sometimes files of similar size (the sorted case)."""
    space = draw(st.integers(1, 400))
    big = draw(st.booleans())
    n_first = draw(st.integers(0, space)) if not big else space
    files = []
    for i in range(draw(st.integers(1, 5))):
        size = n_first if i == 0 else draw(st.integers(0, max(1, space // (SEARCH_RATIO * 4))))
        keys = sorted(draw(st.sets(st.integers(-space, space), min_size=min(size, 2 * space), max_size=size)))
        ops = [draw(st.sampled_from([OP_PUT, OP_PUT, OP_DELETE])) for _ in keys]
        files.append((keys, ops))
    return files


@given(runs(), st.sampled_from([np.int64, np.int32, np.uint16]))
@settings(max_examples=300, deadline=None)
def test_newest_wins_matches_a_dict_model(files: list[tuple[list[int], list[int]]], kind: type) -> None:
    if kind is np.uint16:
        files = [([k + 1000 for k in keys], ops) for keys, ops in files]
    keys = np.array([k for f in files for k in f[0]], dtype=kind)
    ops = np.array([op for f in files for op in f[1]], dtype=np.int8)
    got = newest_wins([keys], ops, len(files[0][0]))
    assert got.tolist() == model_winners(files).tolist()


def model_sequence_winners(files: list[tuple[list[int], list[int]]], seq: list[int]) -> np.ndarray:
    """Row by row (``seq[i]``: row i's sequence): the row of highest sequence of each key wins, the later
    one on ties, unless it is a delete marker."""
    best: dict[int, int] = {}
    ops = [op for _, file_ops in files for op in file_ops]
    row = 0
    for keys, _ in files:
        for k in keys:
            if k not in best or seq[row] >= seq[best[k]]:
                best[k] = row
            row += 1
    wins = np.zeros(row, dtype=bool)
    for at in best.values():
        wins[at] = ops[at] != OP_DELETE
    return wins


@given(runs(), st.data(), st.sampled_from(["int", "string", "int+string", "decimal"]))
@settings(max_examples=300, deadline=None)
def test_newest_wins_by_sequence_matches_a_dict_model(
    files: list[tuple[list[int], list[int]]], data: st.DataObject, shape: str
) -> None:
    """With sequences (mostly rising with the files, as streams arrive, some late, some equal), on the
    searched and the sorted paths, and for NumPy and Arrow sequence columns."""
    n = sum(len(f[0]) for f in files)
    rising = data.draw(st.booleans())
    seq = [i if rising and data.draw(st.integers(0, 9)) else data.draw(st.integers(0, 12)) for i in range(n)]
    keys = np.array([k for f in files for k in f[0]], dtype=np.int64)
    ops = np.array([op for f in files for op in f[1]], dtype=np.int8)
    columns: list[Any]
    if shape == "int":
        columns = [np.array(seq, dtype=np.int64)]
    elif shape == "string":
        columns = [pa.array([f"{v:04d}" for v in seq])]
    elif shape == "decimal":
        columns = [pa.array([decimal.Decimal(v) / 8 for v in seq], pa.decimal128(10, 3))]
    else:  # lexicographic pairs ordered as the integers
        columns = [np.array([v // 4 for v in seq], dtype=np.int32), pa.array([str(v % 4) for v in seq])]
    got = newest_wins([keys], ops, len(files[0][0]), columns)
    assert got.tolist() == model_sequence_winners(files, seq).tolist()


def test_an_unsorted_first_run_is_merged_by_sorting() -> None:
    # A first run that is not strictly increasing (a repeated key) must not take the search path.
    keys = np.array([1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 2], dtype=np.int64)
    ops = np.zeros(len(keys), dtype=np.int8)
    got = newest_wins([keys], ops, 10)
    assert got.tolist() == [True, False, False, True, True, True, True, True, True, True, True]


def test_compacted_table_with_small_newer_files_reads_like_a_model(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("low", pa.string(), nullable=False),
            pa.field("high", pa.string()),
            pa.field("x", pa.float64()),
        ]
    )
    t = local_cat.create_table("m.t", schema, primary_key="id", buckets=2)
    rng = np.random.default_rng(3)
    model: dict[int, tuple[str, str | None, float | None]] = {}

    def upsert(ids: np.ndarray) -> None:
        low = [f"c{v}" for v in rng.integers(0, 5, len(ids))]
        high = [None if v % 7 == 0 else f"u{v}" for v in rng.integers(0, 10**9, len(ids))]
        x = [-0.0 if v == 0 else float("nan") if v == 1 else float(v) for v in rng.integers(0, 50, len(ids))]
        t.upsert(pa.table({"id": ids, "low": low, "high": high, "x": x}, schema=schema))
        for row in zip(ids.tolist(), low, high, x):
            model[row[0]] = row[1:]

    upsert(np.arange(0, 40_000, 2))
    t.compact(min_files=1)
    for _ in range(3):
        upsert(np.unique(rng.integers(-100, 41_000, 600)))
    gone = np.unique(rng.choice(np.array(sorted(model)), 300))
    t.delete(pa.table({"id": gone}))
    for k in gone.tolist():
        model.pop(k)
    explain = t.scan().explain()
    assert explain.files_kept > 2  # newer files beside the compacted ones
    got = t.to_arrow()
    assert got.schema.field("low").type == pa.string()
    rows = {r["id"]: (r["low"], r["high"], r["x"]) for r in got.to_pylist()}
    assert rows.keys() == model.keys() and got.num_rows == len(model)
    for k, (low, high, x) in model.items():
        g = rows[k]
        assert g[0] == low and g[1] == high
        assert (np.isnan(x) and np.isnan(g[2])) or (g[2] == x and np.signbit(g[2]) == np.signbit(x))


def test_a_filter_that_fails_only_on_replaced_rows_reads(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("s", pa.string())])
    t = local_cat.create_table("m.f", schema, primary_key="id", buckets=1)
    big = [2**62 if i % 2 == 0 else 1 for i in range(100)]
    t.upsert(pa.table({"id": range(100), "x": big, "s": ["a"] * 100}, schema=schema))
    evens = list(range(0, 100, 2))
    t.upsert(pa.table({"id": evens, "x": [1] * 30 + [-1] * 20, "s": ["b"] * 50}, schema=schema))
    # x * 4 overflows on the replaced rows only: evaluated on the merged rows, it does not.
    got = t.scan(filter="x * 4 > 0").to_arrow()
    assert sorted(got.column("id").to_pylist()) == sorted(evens[:30] + list(range(1, 100, 2)))
    t.upsert(pa.table({"id": [5], "x": [2**62], "s": ["c"]}, schema=schema))
    with pytest.raises(mere.errors.FilterError):
        t.scan(filter="x * 4 > 0").to_arrow()  # a live row overflows: the user's filter fails


@pytest.mark.parametrize(
    "where", ["f > 0.5", "s = 'k3'", "f IS NULL", "f = 0.0", "s IN ('k1', 'k2') AND f < 0.9"]
)
def test_a_filter_folded_into_the_merge_keeps_what_filtering_merged_rows_keeps(
    local_cat: mere.Catalog, where: str
) -> None:
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64()), ("s", pa.string())])
    t = local_cat.create_table("m.g", schema, primary_key="id", buckets=2)
    rng = np.random.default_rng(9)
    model: dict[int, tuple[float | None, str]] = {}
    for step in range(6):
        ids = np.unique(rng.integers(0, 3000, 1500))
        f = [
            None if v < 0.05 else -0.0 if v < 0.1 else float("nan") if v < 0.15 else float(v)
            for v in rng.random(len(ids))
        ]
        s = [f"k{v}" for v in rng.integers(0, 8, len(ids))]
        t.upsert(pa.table({"id": ids, "f": f, "s": s}, schema=schema))
        model.update(zip(ids.tolist(), zip(f, s)))
        if step == 2:
            gone = ids[::3]
            t.delete(pa.table({"id": gone}))
            for k in gone.tolist():
                model.pop(k)
    con = duckdb.connect()
    rows = pa.table(
        {"id": list(model), "f": [v[0] for v in model.values()], "s": [v[1] for v in model.values()]},
        schema=schema,
    )
    con.register("rows", rows)
    expected = sorted(r[0] for r in con.execute(f"SELECT id FROM rows WHERE {where}").fetchall())
    assert sorted(t.scan(filter=where).to_arrow().column("id").to_pylist()) == expected


def _column_kinds() -> list[tuple[pa.DataType, Any]]:
    return [
        (pa.int64(), lambda i: i * 7 - 3),
        (pa.uint8(), lambda i: i % 256),
        (pa.float64(), lambda i: [-0.0, float("nan"), 1.5, float("inf")][i % 4]),
        (pa.bool_(), lambda i: i % 3 == 0),
        (pa.string(), lambda i: f"s{i}" * (i % 3)),
        (pa.large_binary(), lambda i: bytes([i % 256]) * (i % 4)),
        (pa.decimal128(12, 3), lambda i: decimal.Decimal(i) / 8),
        (
            pa.timestamp("us", tz="UTC"),
            lambda i: dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        ),
        (pa.date32(), lambda i: dt.date(2026, 1, 1) + dt.timedelta(days=i % 300)),
        (pa.struct([("a", pa.int32())]), lambda i: {"a": i}),
        (pa.list_(pa.int16()), lambda i: list(range(i % 3))),
        (pa.dictionary(pa.int32(), pa.string()), lambda i: f"d{i % 5}"),
    ]


@given(
    st.lists(st.integers(0, 2), min_size=1, max_size=4),
    st.integers(0, 1000),
    st.sampled_from(range(len(_column_kinds()))),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_keeping_most_rows_column_by_column_equals_arrow_s_filter(
    null_modes: list[int], seed: int, kind_at: int, sliced: bool
) -> None:
    # Chunks with no NULLs (bitmap present or not), some NULLs, or only NULLs; sliced chunks (offsets).
    kind, value = _column_kinds()[kind_at]
    rng = np.random.default_rng(seed)
    chunks = []
    for mode in null_modes:
        n = int(rng.integers(1, 60))
        values = [
            None if mode == 2 or (mode == 1 and rng.random() < 0.3) else value(int(i)) for i in range(n + 5)
        ]
        # A NULL past the slice's end: chunks without NULLs still carry a validity bitmap, as Parquet
        # reads of optional columns give them.
        arr = pa.array([*values, None], type=kind)
        assert mode != 0 or arr.slice(0, n).buffers()[0] is not None
        chunks.append(arr.slice(3, n) if sliced else arr.slice(0, n))
    column = pa.chunked_array(chunks, type=kind)
    table = pa.table({"c": column, "n": pa.array(np.arange(len(column)))})
    mask = rng.random(len(column)) < 0.97
    got = _kept(table, mask)
    expected = table.filter(pa.array(mask))
    assert got.schema == expected.schema
    assert got.to_pylist() == expected.to_pylist() or _same_with_nans(got, expected)


def _same_with_nans(a: pa.Table, b: pa.Table) -> bool:
    def norm(v: Any) -> Any:
        return "nan" if isinstance(v, float) and math.isnan(v) else v

    return [{k: norm(v) for k, v in r.items()} for r in a.to_pylist()] == [
        {k: norm(v) for k, v in r.items()} for r in b.to_pylist()
    ]


def test_these_tables_read_strings_as_dictionaries() -> None:
    from mere.read import reader

    assert reader.DICTIONARY_MIN_ROWS == 0  # the module's fixture is in force


@given(st.lists(st.booleans(), max_size=300))
@settings(max_examples=200, deadline=None)
def test_a_mask_packed_by_numpy_is_arrow_s_boolean_array(values: list[bool]) -> None:
    mask = np.array(values, dtype=bool)
    packed = bool_array(mask)
    assert packed.equals(pa.array(mask, type=pa.bool_()))
    assert packed.null_count == 0
    table = pa.table({"n": np.arange(len(mask))})
    assert table.filter(packed).column("n").to_pylist() == np.flatnonzero(mask).tolist()
