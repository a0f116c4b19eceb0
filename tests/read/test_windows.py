"""Key-range windows of one split merged concurrently (``SplitReader.batches`` with a merge pool) must give
exactly the rows that one thread merging the split in one window gives (compared sorted by key: a
newest-wins window hands out each file's survivors in turn, so only the windows come in key order).

Random tables with many small files (tiny row groups, automatic compaction off, blind delete markers),
under every merge kind: newest wins, ``sequence_by``, per-column operators (``sum``, ``last_non_null``,
``concat``), the order-free ``max``/``min`` and ``first_row``. The windows are either those the reader
chooses from row-group statistics for a random window size, or random key bounds forced on it: bounds
on stored keys, between them, beyond them, windows that hold no row. Filters, projections and
``count()`` go through the same windows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.read import reader
from mere.table import scan as scan_module

pytestmark = pytest.mark.usefixtures("strings_read_as_dictionaries")

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("a", pa.int64()),
        pa.field("b", pa.string()),
        pa.field("c", pa.string()),
    ]
)
KINDS: dict[str, dict[str, Any]] = {
    "last": {},
    "sequence": {"sequence_by": "seq"},
    "operators": {"merge_operators": {"a": "sum", "b": "last_non_null", "c": "concat:|"}},
    "order_free": {"merge_operators": {"a": "max", "b": "min"}},
    "first_row": {"merge_operators": "first_row"},
}
KEYS = st.integers(0, 40)
ROWS = st.lists(
    st.tuples(
        KEYS,
        st.integers(0, 4),
        st.one_of(st.none(), st.integers(-5, 5)),
        st.one_of(st.none(), st.sampled_from(["x", "y", "zz", "é"])),
    ),
    min_size=1,
    max_size=30,
)
BATCHES = st.lists(st.tuples(ROWS, st.lists(KEYS, max_size=6)), min_size=2, max_size=9)
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _table(root: str, kind: str, row_group_rows: int, batches: list[Any]) -> mere.Table:
    cat = mere.connect(root)
    t = cat.create_table(
        f"w.t{uuid.uuid4().hex[:10]}",
        SCHEMA,
        primary_key="k",
        buckets=1,  # one split: only windows can spread its merge
        properties={"write.row-group-rows": str(row_group_rows), "compaction.auto": "off"},
        **KINDS[kind],
    )
    for rows, deleted in batches:
        t.upsert(
            pa.table(
                {
                    "k": pa.array([r[0] for r in rows], pa.int64()),
                    "seq": pa.array([r[1] for r in rows], pa.int64()),
                    "a": pa.array([r[2] for r in rows], pa.int64()),
                    "b": pa.array([r[3] for r in rows], pa.string()),
                    "c": pa.array([r[3] for r in rows], pa.string()),
                }
            )
        )
        if deleted and kind != "first_row":  # first_row tables refuse deletes
            keys = {"k": pa.array(deleted, pa.int64())}
            if kind == "sequence":
                keys["seq"] = pa.array([2] * len(deleted), pa.int64())
            t.delete(pa.table(keys))
    return t


def _reads(t: mere.Table, threshold: int, **scan: Any) -> list[pa.Table]:
    """A full read, a projection, a filter on a merged column and one on the key."""
    return [
        _by_key(t.scan(**scan).to_arrow()),
        _by_key(t.scan(columns=["b", "k"], **scan).to_arrow()),
        _by_key(t.scan(filter=f"a > {threshold}", **scan).to_arrow()),
        _by_key(t.scan(filter=f"k >= {threshold * 4} and a IS NOT NULL", **scan).to_arrow()),
    ]


def _by_key(table: pa.Table) -> pa.Table:
    return table.sort_by("k")


def _serial(t: mere.Table, threshold: int) -> list[pa.Table]:
    """One thread, one window per split."""
    return _reads(t, threshold, threads=1, window_bytes=1 << 40)


@SETTINGS
@given(
    kind=st.sampled_from(sorted(KINDS)),
    row_group_rows=st.integers(1, 5),
    batches=BATCHES,
    window_bytes=st.integers(1, 600),
    threads=st.integers(2, 5),
    threshold=st.integers(-3, 6),
)
def test_windows_from_statistics_merge_as_one_thread(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    row_group_rows: int,
    batches: list[Any],
    window_bytes: int,
    threads: int,
    threshold: int,
) -> None:
    t = _table(str(tmp_path_factory.mktemp("w")), kind, row_group_rows, batches)
    expected = _serial(t, threshold)
    got = _reads(t, threshold, threads=threads, window_bytes=window_bytes)
    for e, g in zip(expected, got):
        assert g.equals(e), (g.to_pylist(), e.to_pylist())
    assert t.scan(threads=threads, window_bytes=window_bytes).count() == expected[0].num_rows
    with pytest.MonkeyPatch.context() as patch:  # count()'s own windows, when none is asked for
        patch.setattr(scan_module, "COUNT_WINDOW_BYTES", window_bytes)
        assert t.scan(threads=threads).count() == expected[0].num_rows


@SETTINGS
@given(
    kind=st.sampled_from(sorted(KINDS)),
    row_group_rows=st.integers(1, 5),
    batches=BATCHES,
    bounds=st.lists(st.integers(-3, 45), max_size=12),
    threads=st.integers(1, 4),
    threshold=st.integers(-3, 6),
)
def test_any_key_bounds_merge_as_one_window(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    row_group_rows: int,
    batches: list[Any],
    bounds: list[int],
    threads: int,
    threshold: int,
) -> None:
    t = _table(str(tmp_path_factory.mktemp("w")), kind, row_group_rows, batches)
    expected = _serial(t, threshold)
    cuts = [*sorted(set(bounds)), None]  # key values: on stored keys, between and beyond them
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "_windows", lambda *_args, **_kw: list(cuts))
        got = _reads(t, threshold, threads=threads, window_bytes=1)
        counted = t.scan(threads=threads).count()
    for e, g in zip(expected, got):
        assert g.equals(e), (cuts, g.to_pylist(), e.to_pylist())
    assert counted == expected[0].num_rows


def test_a_windowed_read_cuts_the_split_and_merges_windows_on_the_pool(tmp_path: Any) -> None:
    """The property above must not pass by reading one window: a small window size gives many."""
    batches = [([(k, 0, k, "x") for k in range(0, 40, step)], []) for step in (1, 2, 3, 5)]
    t = _table(str(tmp_path), "last", 2, batches)
    split_reader = reader.SplitReader
    seen: list[int] = []

    class Counting(split_reader):  # type: ignore[misc, valid-type]
        def batches(self) -> Any:
            cursors = self.cursors
            seen.append(len(reader._windows(cursors, self.opts.window_bytes, self.opts.whole_split_bytes)))
            return super().batches()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("mere.table.scan.SplitReader", Counting)
        got = t.scan(threads=3, window_bytes=200).to_arrow()
    assert sorted(got.column("k").to_pylist()) == list(range(40))
    assert seen and seen[0] >= 4


def test_gather_batches_keeps_no_table_it_gave() -> None:
    pool = pa.default_memory_pool()

    def made() -> Iterator[pa.RecordBatch]:
        for i in range(4):
            yield pa.record_batch({"x": pa.array(list(range(i * 100_000, (i + 1) * 100_000)), pa.int64())})

    gathered = reader.gather_batches(made(), 10**9)  # one table, given when the batches run out
    before = pool.bytes_allocated()
    table = next(gathered)
    assert table.num_rows == 400_000
    del table
    # the caller's reference was the last one (compaction frees the unsorted rows before encoding)
    assert pool.bytes_allocated() <= before + (1 << 20)
