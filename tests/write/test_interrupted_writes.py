"""An interrupted write leaves no file behind: Ray cancels a task by raising ``KeyboardInterrupt`` in it,
often while its files are being written by mere's writer threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mere.concurrency import wait_all


class _InterruptedOnce(Future[int]):
    """A future whose first wait is interrupted (as a signal would interrupt the waiting thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def result(self, timeout: float | None = None) -> int:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return super().result(timeout)


def test_wait_all_waits_for_running_futures_after_an_interrupt() -> None:
    started, release = threading.Event(), threading.Event()
    interrupted = _InterruptedOnce()
    never_ran: Future[int] = Future()

    def finish_later() -> None:
        interrupted.set_running_or_notify_cancel()  # a running future cannot be cancelled
        started.set()
        release.wait(5)
        interrupted.set_result(7)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(finish_later)
        started.wait(5)
        threading.Timer(0.2, release.set).start()
        results, errors = wait_all([interrupted, never_ran])
    assert results == [7, None]  # the running one was waited for: its result is there to undo
    assert never_ran.cancelled()  # the one not started never runs
    assert len(errors) == 1 and isinstance(errors[0], KeyboardInterrupt)


def test_wait_all_keeps_each_future_s_own_error() -> None:
    ok: Future[int] = Future()
    ok.set_result(1)
    bad: Future[int] = Future()
    bad.set_exception(ValueError("boom"))
    results, errors = wait_all([bad, ok])
    assert results == [None, 1]
    assert [type(e) for e in errors] == [ValueError]


CHILD = textwrap.dedent(
    """
    import _thread, sys, threading, time
    from pathlib import Path
    import pyarrow as pa
    import mere
    from mere.io.storage import Storage

    warehouse = sys.argv[1]
    t = mere.connect(warehouse).create_table(
        "db.t", pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())]),
        primary_key="id", buckets=16)
    t.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    root = Path(t.storage.full_path(t.location))
    before = sorted(str(p) for p in root.rglob("*.parquet"))
    real = Storage.write

    def slow(self, rel, encode):
        time.sleep(0.4)  # every bucket's file is still being written when the interrupt arrives
        return real(self, rel, encode)

    Storage.write = slow
    threading.Timer(0.2, _thread.interrupt_main).start()
    try:
        t.upsert(pa.table({"id": pa.array(range(1000), pa.int64()), "v": [str(i) for i in range(1000)]}))
        print("NOT INTERRUPTED")
    except KeyboardInterrupt:
        print("INTERRUPTED")
    time.sleep(1.0)  # any writer thread still going would have written its file by now
    after = sorted(str(p) for p in root.rglob("*.parquet"))
    print("LEFT", [p for p in after if p not in before])
    print("VERSION", t.version, t.to_arrow().num_rows)
    """
)


def test_an_interrupted_upsert_leaves_no_file_behind(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "wh")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "INTERRUPTED" in lines, out.stdout
    assert "LEFT []" in lines, out.stdout
    assert "VERSION 1 2" in lines, out.stdout  # (the first upsert made version 1)


def test_a_settled_lookup_of_referenced_files_answers_as_a_plain_one(cat: Any) -> None:
    """The lookup an interrupted commit makes first waits for a commit the server may still be landing
    (PostgreSQL: the table's row lock); then it answers as the plain lookup does."""
    import pyarrow as pa

    t = cat.create_table(
        "db.settled", pa.schema([pa.field("id", pa.int64(), nullable=False)]), primary_key="id", buckets=2
    )
    t.upsert(pa.table({"id": pa.array(range(10), pa.int64())}))
    live = [f for f in t.files().column("path").to_pylist()]
    paths = [*live, "db/nowhere/part-0.parquet"]
    plain = cat.sql.referenced_paths(t.record.id, paths)
    assert plain == set(live)
    assert cat.sql.referenced_paths(t.record.id, paths, settled=True) == plain
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))  # the lock was released: writes go on
