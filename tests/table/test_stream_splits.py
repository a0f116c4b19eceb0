"""The split scheduler: batches come out split by split in order, whoever opens the readers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mere.concurrency import spare_threads
from mere.read.reader import stream_splits


class _Split:
    """A split of ``rows`` batches of one row each; opening or reading may fail or dawdle."""

    def __init__(self, index: int, rows: int, fail_open: bool = False, fail_read: bool = False) -> None:
        self.index, self.rows, self.fail_open, self.fail_read = index, rows, fail_open, fail_read

    def batches(self) -> Iterator[pa.RecordBatch]:
        for r in range(self.rows):
            if self.fail_read and r == self.rows // 2:
                raise ValueError(f"read {self.index}")
            if (self.index + r) % 3 == 0:
                time.sleep(0.001)  # later splits often finish first
            yield pa.record_batch({"split": [self.index], "row": [r]})


def _open(split: _Split) -> _Split:
    if split.fail_open:
        raise KeyError(f"open {split.index}")
    return split


def _rows(batches: Iterator[pa.RecordBatch]) -> list[tuple[int, int]]:
    return [(b.column(0)[0].as_py(), b.column(1)[0].as_py()) for b in batches]


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5), min_size=1, max_size=8),
    parallel=st.integers(1, 4),
    queue_size=st.integers(0, 3),
    open_ahead=st.booleans(),
)
def test_batches_come_out_in_split_order(
    sizes: list[int], parallel: int, queue_size: int, open_ahead: bool
) -> None:
    splits = [_Split(i, n) for i, n in enumerate(sizes)]
    got = _rows(stream_splits(_open, splits, parallel, queue_size=queue_size, open_ahead=open_ahead))
    assert got == [(i, r) for i, n in enumerate(sizes) for r in range(n)]


@pytest.mark.parametrize("open_ahead", [True, False])
@pytest.mark.parametrize("where", ["open", "read"])
def test_a_failing_split_raises_after_the_splits_before_it(open_ahead: bool, where: str) -> None:
    splits = [
        _Split(i, 3, fail_open=(where == "open" and i == 2), fail_read=(where == "read" and i == 2))
        for i in range(5)
    ]
    out: list[tuple[int, int]] = []
    error = KeyError if where == "open" else ValueError
    with pytest.raises(error, match=f"{where} 2"):
        out.extend(_rows_lazily(stream_splits(_open, splits, 3, open_ahead=open_ahead)))
    expected = [(i, r) for i in range(2) for r in range(3)]
    if where == "read":
        expected += [(2, 0)]  # the rows before the failure
    assert out == expected


def _rows_lazily(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, int]]:
    for b in batches:
        yield b.column(0)[0].as_py(), b.column(1)[0].as_py()


@pytest.mark.parametrize("open_ahead", [True, False])
def test_an_abandoned_stream_stops_its_workers(open_ahead: bool) -> None:
    def busy() -> int:  # threads at work (a worker that ended its task waits, idle, for the next scan)
        return threading.active_count() - spare_threads()

    before = busy()
    splits = [_Split(i, 50) for i in range(20)]
    stream = stream_splits(_open, splits, 4, queue_size=1, open_ahead=open_ahead)
    assert next(stream).num_rows == 1
    assert busy() > before
    stream.close()  # workers blocked on full queues must notice and end their task
    deadline = time.monotonic() + 10
    while busy() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert busy() <= before
