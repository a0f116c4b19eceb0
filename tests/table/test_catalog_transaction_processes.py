"""Catalog transactions across processes, on SQLite and PostgreSQL.

* Transfers: writer processes move amounts between two tables with read-modify-write UPDATEs in one
  catalog transaction each, while reader processes take ``cat.snapshot()`` and check that the sum over
  both tables never changes (a half-visible transfer would break it).
* SIGKILL: a ``spawn`` child runs two-table catalog transactions and dies at a chosen point (between the
  tables' writes, inside the catalog's database transaction after the first table landed, just before
  the database COMMIT) or at a random moment of a loop of transactions: afterwards both tables are at the
  same transaction boundary, nothing of the killed transaction is visible, the next transaction goes
  ahead (no lock left behind), and ``cleanup`` finds the dead writer's files and nothing else.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import random
import signal
import time
from typing import Any

import pyarrow as pa
import pytest

import mere
from backends import BACKENDS

pytestmark = pytest.mark.timeout(600)
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
A, B = "bank.a", "bank.b"
ACCOUNTS = 6
START = 1000


def _content(t: Any) -> dict[int, int]:
    data = t.to_arrow()
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


# -- transfers ----------------------------------------------------------------------------------------


def _transfer_writer(warehouse: str, url: str, seed: int, count: int, out: Any) -> None:
    from mere.errors import CommitConflict

    cat = mere.connect(warehouse, catalog=url)
    rng = random.Random(seed)
    done = conflicts = 0
    for _ in range(count):
        src, dst, amount = rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS), rng.randrange(1, 50)
        first, second = (A, B) if rng.random() < 0.5 else (B, A)
        try:
            with cat.transaction() as tx:
                tx.table(first).update({"v": f"v - {amount}"}, where=f"id = {src}")
                tx.table(second).update({"v": f"v + {amount}"}, where=f"id = {dst}")
            done += 1
        except CommitConflict:
            conflicts += 1
    out.put(("writer", done, conflicts))


def _transfer_reader(warehouse: str, url: str, seconds: float, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    deadline = time.monotonic() + seconds
    reads = 0
    bad: list[Any] = []
    while time.monotonic() < deadline:
        snap = cat.snapshot()
        total = sum(_content(snap.table(A)).values()) + sum(_content(snap.table(B)).values())
        if total != 2 * ACCOUNTS * START or snap.version(A) != snap.version(B):
            bad.append((snap.versions, total))
        reads += 1
    out.put(("reader", reads, bad))


@BACKENDS
def test_transfers_between_tables_keep_the_sum_for_snapshot_readers(
    cat: mere.Catalog, catalog_url: str
) -> None:
    ids = list(range(ACCOUNTS))
    for name in (A, B):
        t = cat.create_table(name, SCHEMA, primary_key="id", buckets=2, properties={"compaction.auto": "off"})
        t.upsert(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([START] * ACCOUNTS, pa.int64())}))
    warehouse = cat.storage.uri
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    writers = [
        ctx.Process(target=_transfer_writer, args=(warehouse, catalog_url, s, 12, out)) for s in range(3)
    ]
    readers = [
        ctx.Process(target=_transfer_reader, args=(warehouse, catalog_url, 25.0, out)) for _ in range(1)
    ]
    for p in writers + readers:
        p.start()
    results = [out.get(timeout=300) for _ in writers + readers]
    for p in writers + readers:
        p.join(timeout=60)
        assert p.exitcode == 0
    done = sum(r[1] for r in results if r[0] == "writer")
    reads = sum(r[1] for r in results if r[0] == "reader")
    bad = [b for r in results if r[0] == "reader" for b in r[2]]
    assert bad == []
    assert reads > 0 and done > 0
    a, b = cat.table(A), cat.table(B)
    # Every landed transfer made one version of each table; none landed half.
    assert a.version == b.version == 1 + done
    assert sum(_content(a).values()) + sum(_content(b).values()) == 2 * ACCOUNTS * START


# -- SIGKILL ------------------------------------------------------------------------------------------


def _killed_child(mode: str, warehouse: str, url: str, seed: int) -> None:
    cat = mere.connect(warehouse, catalog=url)
    sql = cat.sql
    if mode == "in_landing":  # inside the database transaction, after the first table landed
        real = sql._land
        calls = []

        def land(conn: Any, request: Any, *args: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:
                _die()
            return real(conn, request, *args)

        sql._land = land  # type: ignore[method-assign]
    if mode == "before_db_commit":
        from sqlalchemy import event

        def before_commit(conn: Any) -> None:
            if conn.get_execution_options().get("mere_write"):
                _die()

        event.listen(sql.engine, "commit", before_commit)
    rng = random.Random(seed)
    i = 0
    while True:
        i += 1
        keys = pa.array([1000 + i, rng.randrange(10)], pa.int64())
        with cat.transaction() as tx:
            tx.table(A).upsert(pa.table({"id": keys, "v": pa.array([i, i], pa.int64())}))
            if mode == "between_tables":
                _die()
            tx.table(B).upsert(pa.table({"id": keys, "v": pa.array([i, i], pa.int64())}))
        if mode != "random":
            return


def _same_boundary(cat: mere.Catalog) -> tuple[int, dict[int, int]]:
    snap = cat.snapshot()
    a, b = _content(snap.table(A)), _content(snap.table(B))
    assert snap.version(A) == snap.version(B)
    assert a == b  # every transaction wrote the same rows to both tables
    return snap.version(A), a


@BACKENDS
@pytest.mark.parametrize("mode", ["between_tables", "in_landing", "before_db_commit", "random"])
def test_sigkill_leaves_every_table_at_one_boundary(cat: mere.Catalog, catalog_url: str, mode: str) -> None:
    for name in (A, B):
        t = cat.create_table(name, SCHEMA, primary_key="id", buckets=2, properties={"compaction.auto": "off"})
        t.upsert(pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([0] * 10, pa.int64())}))
    before = _same_boundary(cat)
    ctx = mp.get_context("spawn")
    seed = random.randrange(1 << 30)
    child = ctx.Process(target=_killed_child, args=(mode, cat.storage.uri, catalog_url, seed))
    child.start()
    if mode == "random":
        time.sleep(random.Random(seed).uniform(3.0, 6.0))  # the child's start and a few transactions
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL, f"seed {seed}"
    after = _same_boundary(cat)
    if mode != "random":
        assert after == before  # nothing of the killed transaction is visible
    else:
        assert after[0] >= before[0]
    orphans = {
        name: cat.table(name).cleanup(older_than=dt.timedelta(0)) for name in (A, B)
    }  # a dry run: listed only
    if mode in ("in_landing", "before_db_commit"):
        assert orphans[A] and orphans[B]  # both tables' files were written, none committed
    if mode == "between_tables":
        assert orphans[A] and not orphans[B]
    for name in (A, B):
        cat.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert _same_boundary(cat) == after  # cleanup took nothing a version references
    # The dead writer left no lock: the next transaction goes ahead.
    with cat.transaction() as tx:
        for name in (A, B):
            tx.table(name).upsert(
                pa.table({"id": pa.array([5], pa.int64()), "v": pa.array([-1], pa.int64())})
            )
    version, rows = _same_boundary(cat)
    assert version == after[0] + 1 and rows[5] == -1
