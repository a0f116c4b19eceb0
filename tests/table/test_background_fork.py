"""Automatic maintenance in background mode keeps one thread per table through a module-level
lock. A process forked while such a thread held the lock inherits it held, with no thread to release it."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.table.ops import maintenance

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
_ORIGINAL = maintenance.compact_if_due


def _child(root: str) -> None:
    maintenance.compact_if_due = _ORIGINAL
    t = mere.connect(root).table("t.bg")
    for i in range(12):
        t.upsert(pa.table({"k": [i], "v": [i]}, schema=SCHEMA))
    for _ in range(100):  # the background threads' commits
        if any(s.operation == "compact" for s in t.history()[2:]):
            raise SystemExit(0)
        threading.Event().wait(0.1)
    raise SystemExit(3)  # twelve commits, min-files 2, and no compaction ran


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_background_maintenance_runs_in_a_process_forked_while_a_compaction_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.bg",
        SCHEMA,
        primary_key="k",
        buckets=1,
        properties={"compaction.auto": "background", "compaction.min-files": "2", "retention.max-age": "off"},
    )
    started, release = threading.Event(), threading.Event()

    def slow(table: maintenance.Maintained, version: int | None) -> object:
        started.set()
        release.wait(60)
        return _ORIGINAL(table, version)

    monkeypatch.setattr(maintenance, "compact_if_due", slow)
    t.upsert(pa.table({"k": [100], "v": [0]}, schema=SCHEMA))  # its maintenance thread now holds the lock
    assert started.wait(30)
    try:
        child = multiprocessing.get_context("fork").Process(target=_child, args=(str(tmp_path),))
        child.start()
        child.join(120)
    finally:
        release.set()
    assert child.exitcode == 0, "the forked process never compacted: the table's background lock stayed held"
