"""Crash safety: a writer process SIGKILLed mid-write or mid-commit leaves the table as it was.

A ``spawn`` child opens its own catalog and starts an upsert with a deterministic kill point installed:

* ``after_file``: ``Storage.write`` (every data file's bytes pass through it) is wrapped so that the
  child kills itself right after the Nth data file is complete (the other writer threads are still busy
  with theirs);
* ``inside_file``: ``ParquetWriter.write_table`` is wrapped so that the child kills itself after writing
  the row groups of the Nth file but before its footer: a torn, unreadable Parquet file stays behind;
* ``mid_commit``: a SQLAlchemy ``commit`` event, which fires inside the catalog transaction just before
  the DBAPI ``COMMIT``, checks (on that transaction's own connection) that the file rows are inserted and
  the version bumped, then kills the child while it holds the catalog lock (SQLite write lock,
  PostgreSQL row lock) with the transaction open;
* ``mid_commit_waiter``: the same, but the child parks in the open transaction until the parent has a
  second writer queued behind its lock, and the parent then kills it: the queued writer must go ahead.

Afterwards the parent checks that version, history and data are unchanged, that a new upsert works (and
does not hang on the dead writer's lock), and that ``cleanup`` removes exactly the dead writer's orphaned
files and nothing that any version references.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere
from backends import BACKENDS

TABLE = "crash.t"
KILL_AFTER_FILES = 3  # after_file: die once this many files are complete
KILL_IN_FILE = 2  # inside_file: die inside this file, after its row groups, before its footer
CHILD_ROWS = 200_000
BUCKETS = 8
UNBLOCK_LIMIT_S = 30.0  # a writer queued behind the dead one must get through well within this

pytestmark = pytest.mark.timeout(300)
# Both catalog backends; the PostgreSQL runs carry the ``postgres`` marker (they need the session server).


# -- the child (module level so that ``spawn`` can import it) ------------------------------------------


def _probe(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and make it durable before the child may die."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # SIGKILL is asynchronous: never return into the write


def _child_data() -> pa.Table:
    # New keys and updates of the parent's keys: if any of it leaked, the data would visibly change.
    ids = np.arange(CHILD_ROWS, dtype=np.int64) + 500
    return pa.table({"id": ids, "value": ids * 7 + 1, "note": pa.array(["child"] * len(ids))})


def _crash_child(mode: str, warehouse: str, catalog_url: str, probe: str) -> None:
    from mere.io.storage import Storage

    cat = mere.connect(warehouse, catalog=catalog_url)
    table = cat.table(TABLE)
    start_version = table.version
    lock = threading.Lock()
    counts = {"files": 0, "row_groups_written": 0}

    if mode in ("after_file", "inside_file"):
        original_write = Storage.write

        def write(self: Storage, rel: str, *args: Any, **kwargs: Any) -> Any:
            _probe(probe, {"event": "start", "path": rel})
            written = original_write(self, rel, *args, **kwargs)
            with lock:
                counts["files"] += 1
                _probe(probe, {"event": "done", "path": rel, "n": counts["files"]})
                if mode == "after_file" and counts["files"] == KILL_AFTER_FILES:
                    _die()
            return written

        Storage.write = write  # type: ignore[method-assign]

    if mode == "inside_file":
        original_write_table = pq.ParquetWriter.write_table

        def write_table(self: pq.ParquetWriter, *args: Any, **kwargs: Any) -> None:
            original_write_table(self, *args, **kwargs)
            with lock:
                counts["row_groups_written"] += 1
                if counts["row_groups_written"] == KILL_IN_FILE:
                    _probe(probe, {"event": "torn"})
                    _die()  # the writer's footer is never written

        pq.ParquetWriter.write_table = write_table  # type: ignore[method-assign]

    if mode in ("mid_commit", "mid_commit_waiter"):
        from sqlalchemy import event

        table_id = int(table.record.id)

        def before_commit(conn: Any) -> None:
            # Inside the catalog transaction, on its own connection: is our commit fully staged?
            cur = conn.connection.dbapi_connection.cursor()
            try:
                cur.execute(f"SELECT version FROM mere_tables WHERE id = {table_id}")
                version = int(cur.fetchone()[0])
                cur.execute(
                    f"SELECT path FROM mere_files WHERE table_id = {table_id} AND added_version = {version}"
                )
                paths = sorted(r[0] for r in cur.fetchall())
            finally:
                cur.close()
            if version != start_version + 1 or not paths:
                return  # not the upsert's commit transaction
            _probe(probe, {"event": "in_commit", "version": version, "paths": paths})
            if mode == "mid_commit":
                _die()
            time.sleep(120)  # mid_commit_waiter: hold the lock until the parent kills us

        event.listen(cat.sql.engine, "commit", before_commit)

    _probe(probe, {"event": "armed", "version": start_version})
    table.upsert(_child_data())
    _probe(probe, {"event": "survived"})  # the kill point was never reached: the parent fails the test


# -- the parent --------------------------------------------------------------------------------------------


def _read_probe(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for(path: Path, event: str, proc: Any, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for r in _read_probe(path) if r["event"] == event]
        if found:
            return found[0]
        assert proc.is_alive(), f"child exited ({proc.exitcode}) before {event!r}: {_read_probe(path)}"
        time.sleep(0.05)
    raise AssertionError(f"child did not reach {event!r} in {timeout}s: {_read_probe(path)}")


def _sorted(t: pa.Table) -> list[dict[str, Any]]:
    return t.sort_by("id").to_pylist()


def _snapshot(table: mere.Table) -> dict[str, Any]:
    return {
        "version": table.version,
        "history": [(h.version, h.committed_at, h.operation, h.summary) for h in table.history()],
        "versions": [_sorted(table.scan(version=v).to_arrow()) for v in range(table.version + 1)],
    }


def _files_on_disk(table: mere.Table) -> set[str]:
    return {path for path, _, _ in table.storage.list_files(table.location)}


def _referenced(table: mere.Table) -> set[str]:
    return table.catalog.sql.all_file_paths(table.record.id)


@BACKENDS
@pytest.mark.parametrize("mode", ["after_file", "inside_file", "mid_commit", "mid_commit_waiter"])
def test_killed_writer_leaves_table_intact(
    mode: str, cat: mere.Catalog, catalog_url: str, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "warehouse")
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("value", pa.int64()), ("note", pa.string())]
    )
    table = cat.create_table(
        TABLE, schema, primary_key=["id"], buckets=BUCKETS, properties={"write.row-group-rows": "4096"}
    )
    ids = np.arange(1000, dtype=np.int64)
    table.upsert(pa.table({"id": ids, "value": ids, "note": ["first"] * len(ids)}))
    table.upsert(pa.table({"id": ids[::2], "value": -ids[::2], "note": ["second"] * len(ids[::2])}))
    table.delete("id < 10")
    before = _snapshot(table)
    assert before["version"] == 3
    disk_before = _files_on_disk(table)
    referenced_before = _referenced(table)
    assert referenced_before == disk_before

    probe = tmp_path / "probe.jsonl"
    ctx = mp.get_context("spawn")
    proc = ctx.Process(
        target=_crash_child, args=(mode, warehouse, catalog_url, str(probe)), name=f"crash-{mode}"
    )
    proc.start()
    waiter: threading.Thread | None = None
    waiter_out: dict[str, Any] = {}
    try:
        if mode == "mid_commit_waiter":
            staged = _wait_for(probe, "in_commit", proc)

            def queued_upsert() -> None:
                try:
                    t = mere.connect(warehouse, catalog=catalog_url).table(TABLE)
                    waiter_out["record"] = t.upsert(
                        pa.table({"id": [1, 2000], "value": [11, 22], "note": ["waiter", "waiter"]})
                    )
                except BaseException as e:  # reported below
                    waiter_out["error"] = e
                finally:
                    waiter_out["done_at"] = time.monotonic()

            waiter = threading.Thread(target=queued_upsert, name="queued-upsert", daemon=True)
            waiter.start()
            time.sleep(1.5)
            assert proc.is_alive()
            assert waiter.is_alive(), f"the second writer got past a held catalog lock: {waiter_out}"
            killed_at = time.monotonic()
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=180)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
    events = _read_probe(probe)
    assert not any(r["event"] == "survived" for r in events), f"the kill point was never reached: {events}"
    assert proc.exitcode == -signal.SIGKILL, f"child exit code {proc.exitcode}, probe {events}"

    if waiter is not None:
        waiter.join(timeout=UNBLOCK_LIMIT_S + 60)
        assert not waiter.is_alive(), "the writer queued behind the killed one hangs"
        assert "error" not in waiter_out, f"the queued writer failed: {waiter_out.get('error')!r}"
        assert waiter_out["done_at"] - killed_at < UNBLOCK_LIMIT_S
        assert waiter_out["record"].version == before["version"] + 1

    # What the killed writer left behind: files nobody references.
    disk_after_crash = _files_on_disk(table)
    orphans = disk_after_crash - _referenced(table)
    assert orphans, f"the killed write left no file behind: {events}"
    assert disk_before <= disk_after_crash
    if mode == "after_file":
        done = {r["path"] for r in events if r["event"] == "done"}
        assert len(done) == KILL_AFTER_FILES
        assert done <= orphans
        for path in done:  # complete files, simply never committed
            assert pq.read_metadata(table.storage.full_path(path)).num_rows > 0
    elif mode == "inside_file":
        started = {r["path"] for r in events if r["event"] == "start"}
        assert any(r["event"] == "torn" for r in events)
        assert orphans <= started
        torn = []
        for path in orphans:
            try:
                pq.read_metadata(table.storage.full_path(path))
            except (OSError, pa.ArrowInvalid):
                torn.append(path)
        assert torn, "expected at least one torn (footer-less) Parquet file"
    else:
        staged = next(r for r in events if r["event"] == "in_commit")
        assert staged["version"] == before["version"] + 1
        assert set(staged["paths"]) == orphans  # exactly the files of the transaction that never committed
        assert len(staged["paths"]) == BUCKETS

    # The table is exactly as before the crash, seen from this catalog and from a freshly opened one.
    fresh = mere.connect(warehouse, catalog=catalog_url).table(TABLE)
    extra = 1 if waiter is not None else 0
    for t in (table, fresh):
        assert t.version == before["version"] + extra
        history = [(h.version, h.committed_at, h.operation, h.summary) for h in t.history()]
        assert history[: len(before["history"])] == before["history"]
        assert len(history) == len(before["history"]) + extra
        for v, rows in enumerate(before["versions"]):
            assert _sorted(t.scan(version=v).to_arrow()) == rows

    expected = {r["id"]: r for r in before["versions"][-1]}
    if waiter is not None:
        expected.update(
            {1: {"id": 1, "value": 11, "note": "waiter"}, 2000: {"id": 2000, "value": 22, "note": "waiter"}}
        )
    assert _sorted(fresh.scan().to_arrow()) == [expected[k] for k in sorted(expected)]

    # A new writer gets through: the dead writer's lock is gone (SQLite) / its transaction rolled back (PG).
    started = time.monotonic()
    rec = fresh.upsert(pa.table({"id": [3, 5000], "value": [33, 55], "note": ["after", "after"]}))
    assert time.monotonic() - started < UNBLOCK_LIMIT_S
    assert rec.version == before["version"] + extra + 1
    expected.update(
        {3: {"id": 3, "value": 33, "note": "after"}, 5000: {"id": 5000, "value": 55, "note": "after"}}
    )
    after = _snapshot(table)
    assert after["versions"][-1] == [expected[k] for k in sorted(expected)]
    assert after["history"][: len(before["history"])] == before["history"]

    # cleanup removes exactly the orphans, and nothing any version references.
    referenced = _referenced(table)
    assert not orphans & referenced
    for path in orphans:
        assert os.path.exists(table.storage.full_path(path))
    removed = table.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert set(removed) == orphans
    for path in orphans:
        assert not os.path.exists(table.storage.full_path(path))
    assert _files_on_disk(table) == referenced
    assert _snapshot(table) == after
    assert table.cleanup(older_than=dt.timedelta(0), dry_run=False) == []
