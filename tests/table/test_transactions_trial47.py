"""Trial 47: multi-table transactions and many writers on a shared catalog, as a team would use them.

Real processes (``spawn``) write to the same tables through SQLite and PostgreSQL catalogs: catalog
transactions that read-modify-write a counter in one table and delete and upsert in another, under
idempotency keys retried after a writer is SIGKILLed; compaction and cleanup race them; readers pin
catalog snapshots while writers and ``expire`` continue. End states are compared with a dict model of
what committed (``find_transaction`` of every key). Deterministic tests pin what the process runs found
(strict xfails) and what the docs promise about dropped tables, pinned reads, rollbacks and keys.
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
from mere.errors import CommitConflict, InvalidInput, MereError, NoSuchTable, NoSuchVersion

pytestmark = pytest.mark.timeout(600)
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
ORDERS, LINES = "shop.orders", "shop.lines"
STILL = {"compaction.auto": "off", "retention.max-age": "off"}  # nothing runs unless a test calls it


def rows(ids: list[int], vals: list[int] | None = None) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(ids if vals is None else vals, pa.int64())}
    )


def content(t: Any) -> dict[int, int]:
    data = t.to_arrow()
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


# -- the team's job: one catalog transaction per batch -----------------------------------------------

WRITERS = 2  # writer processes that finish their batches
BATCHES = 5  # batches per writer
CRASHER = WRITERS  # the writer id of the process that is SIGKILLed mid-run


def _base(w: int) -> int:
    return 1000 * (w + 1)


def _batch(cat: mere.Catalog, w: int, i: int) -> dict[str, Any]:
    """Batch ``i`` of writer ``w``: count it in orders' row 0 (read-modify-write), add its order, and
    replace the writer's one line (delete by predicate, then upsert)."""
    with cat.transaction(idempotency_key=f"w{w}-{i}") as tx:
        orders = tx.table(ORDERS)
        orders.update({"v": "v + 1"}, where="id = 0")
        orders.upsert(rows([_base(w) + i], [i]))
        lines = tx.table(LINES)
        lines.delete(f"id >= {_base(w)} AND id < {_base(w + 1)}")
        lines.upsert(rows([_base(w) + i], [i]))
    return tx.results


def _writer(warehouse: str, url: str, w: int, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    log = []
    for i in range(BATCHES):
        for _ in range(20):  # what a job does on an error that committed nothing: run it again, same key
            try:
                _batch(cat, w, i)
                log.append((i, "ok"))
                break
            except MereError as e:
                log.append((i, type(e).__name__))
    out.put(("writer", w, log))


def _crasher(warehouse: str, url: str, progress: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    for i in range(BATCHES):
        progress.put(i)
        for _ in range(20):
            try:
                _batch(cat, CRASHER, i)
                break
            except MereError:
                pass  # as a writer does: the same batch again, until the kill


def _maintenance(warehouse: str, url: str, seconds: float, expire: bool, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    deadline = time.monotonic() + seconds
    done, errors = 0, []
    while time.monotonic() < deadline:
        for name in (ORDERS, LINES):
            t = cat.table(name)
            ops = [lambda t=t: t.compact(), lambda t=t: t.cleanup(dt.timedelta(seconds=3), dry_run=False)]
            if expire:
                ops.append(lambda t=t: t.expire(older_than=dt.timedelta(0), dry_run=False))
            for op in ops:
                try:
                    op()
                    done += 1
                except CommitConflict:
                    pass  # a compaction that lost to a writer: nothing changed
                except MereError as e:
                    errors.append((name, type(e).__name__, str(e)[:200]))
        time.sleep(0.05)
    out.put(("maintenance", done, errors))


def _snapshot_faults(orders: dict[int, int], lines: dict[int, int]) -> list[Any]:
    """What is wrong with one read point: the counter must equal the orders added, and each writer's one
    line must be its newest order."""
    orders = dict(orders)
    counter = orders.pop(0, None)
    faults: list[Any] = []
    if counter != len(orders):
        faults.append(("counter", counter, len(orders)))
    for w in range(CRASHER + 1):
        mine = sorted(k - _base(w) for k in orders if _base(w) <= k < _base(w + 1))
        line = {k - _base(w): v for k, v in lines.items() if _base(w) <= k < _base(w + 1)}
        if line != ({mine[-1]: mine[-1]} if mine else {}):
            faults.append(("line", w, mine, line))
    return faults


def _reader(warehouse: str, url: str, seconds: float, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    deadline = time.monotonic() + seconds
    reads = gone = 0
    faults: list[Any] = []
    while time.monotonic() < deadline:
        snap = cat.snapshot()
        try:
            orders, lines = content(snap.table(ORDERS)), content(snap.table(LINES))
        except NoSuchVersion:
            gone += 1  # expire gave the pinned version up: refused whole, as documented
            continue
        except MereError as e:
            faults.append((snap.versions, type(e).__name__, str(e)[:300]))
            continue
        reads += 1
        faults.extend((snap.versions, f) for f in _snapshot_faults(orders, lines))
    out.put(("reader", reads, gone, faults))


def _team(cat: mere.Catalog, catalog_url: str, *, expire: bool) -> None:
    for name in (ORDERS, LINES):
        cat.create_table(name, SCHEMA, primary_key="id", buckets=2, properties={"compaction.min-files": "3"})
    cat.table(ORDERS).upsert(rows([0], [0]))
    warehouse = cat.storage.uri
    ctx = mp.get_context("spawn")
    out, progress = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(warehouse, catalog_url, w, out)) for w in range(WRITERS)]
    procs.append(ctx.Process(target=_maintenance, args=(warehouse, catalog_url, 8.0, expire, out)))
    procs.append(ctx.Process(target=_reader, args=(warehouse, catalog_url, 8.0, out)))
    crasher = ctx.Process(target=_crasher, args=(warehouse, catalog_url, progress))
    for p in [*procs, crasher]:
        p.start()
    progress.get(timeout=120)
    progress.get(timeout=120)  # its second batch has begun: kill it somewhere in there
    time.sleep(random.uniform(0.0, 0.4))
    os.kill(crasher.pid, signal.SIGKILL)  # type: ignore[arg-type]
    crasher.join(timeout=60)
    reports = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # The killed job runs again from its first batch with the same keys: each batch lands once.
    for i in range(BATCHES):
        _batch(cat, CRASHER, i)
    landed = {
        (w, i)
        for w in range(CRASHER + 1)
        for i in range(BATCHES)
        if cat.sql.find_transaction(f"w{w}-{i}") is not None
    }
    assert len(landed) == (CRASHER + 1) * BATCHES
    orders, lines = cat.table(ORDERS), cat.table(LINES)
    model = {0: len(landed)} | {_base(w) + i: i for w, i in landed}
    assert content(orders) == model
    assert content(lines) == {_base(w) + BATCHES - 1: BATCHES - 1 for w in range(CRASHER + 1)}
    faults = [f for r in reports if r[0] == "reader" for f in r[3]]
    assert faults == []
    maintenance = [r for r in reports if r[0] == "maintenance"]
    assert maintenance[0][2] == []
    # Cleanup takes what the killed writer left, never a file a version references.
    for name in (ORDERS, LINES):
        cat.table(name).cleanup(dt.timedelta(0), dry_run=False)
    assert content(cat.table(ORDERS)) == model


@BACKENDS
def test_team_of_writers_with_a_killed_job_compaction_and_cleanup_matches_the_model(
    cat: mere.Catalog, catalog_url: str
) -> None:
    """Held: every batch lands exactly once (the counter counts each key once), snapshots are whole."""
    _team(cat, catalog_url, expire=False)


def _killed_after_landing(warehouse: str, url: str) -> None:
    cat = mere.connect(warehouse, catalog=url)
    sql = cat.sql
    real = sql.commit_tables

    def land_then_die(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)  # the database COMMIT went through; the process dies before it can say so
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    sql.commit_tables = land_then_die  # type: ignore[method-assign]
    _batch(cat, 0, 0)


@BACKENDS
def test_a_job_killed_after_its_commit_landed_replays_with_its_key(
    cat: mere.Catalog, catalog_url: str
) -> None:
    """Held: the rerun after a kill -9 between the database COMMIT and the return finds the key."""
    for name in (ORDERS, LINES):
        cat.create_table(name, SCHEMA, primary_key="id", buckets=2, properties=STILL)
    cat.table(ORDERS).upsert(rows([0], [0]))
    child = mp.get_context("spawn").Process(target=_killed_after_landing, args=(cat.storage.uri, catalog_url))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    again = _batch(cat, 0, 0)
    assert all(r.already_committed for r in again.values())
    assert {n: r.version for n, r in again.items()} == {ORDERS: 2, LINES: 1}
    assert content(cat.table(ORDERS)) == {0: 1, _base(0): 0}
    assert content(cat.table(LINES)) == {_base(0): 0}
    assert cat.table(ORDERS).cleanup(dt.timedelta(0)) == []  # the landed files are referenced


# -- found: read-modify-write lost when compaction and expire land between read and commit ---------


def _counter_race(cat: mere.Catalog, between: str) -> dict[int, int]:
    t = cat.create_table("c.counter", SCHEMA, primary_key="id", properties=STILL)
    t.upsert(rows([0], [0]))
    tx = cat.table("c.counter").transaction()
    tx.update({"v": "v + 1"}, where="id = 0")  # reads 0 at version 1
    other = cat.table("c.counter")
    other.update({"v": "v + 1"}, where="id = 0")  # lands 1 at version 2
    if "compact" in between:
        other.compact()
    if "expire" in between:
        other.expire(older_than=dt.timedelta(0), dry_run=False)
    tx.commit()  # lost the race: must read again (or refuse), never write 0 + 1
    return content(cat.table("c.counter"))


@pytest.mark.parametrize("between", ["nothing", "compact", "expire"])
def test_a_read_modify_write_that_lost_a_race_counts_the_winner(cat: mere.Catalog, between: str) -> None:
    assert _counter_race(cat, between) == {0: 2}


def test_a_read_modify_write_is_not_lost_to_a_compacted_and_expired_winner(cat: mere.Catalog) -> None:
    assert _counter_race(cat, "compact+expire") == {0: 2}


def test_a_catalog_transactions_delete_that_found_nothing_takes_effect_at_its_read(
    cat: mere.Catalog,
) -> None:
    """docs/concepts.md, "Changes that find nothing": the delete matched no row when it read, so its share
    lands nothing and checks nothing; a matching row that landed (compacted, its version expired) stays."""
    a = cat.create_table("s.a", SCHEMA, primary_key="id", properties=STILL)
    b = cat.create_table("s.b", SCHEMA, primary_key="id", properties=STILL)
    a.upsert(rows([0], [0]))
    tx = cat.transaction()
    tx.table("s.a").delete("v >= 10")  # matches nothing when it reads
    tx.table("s.b").upsert(rows([2]))
    a.upsert(rows([5], [20]))  # a row it matches lands first
    a.compact()
    a.expire(older_than=dt.timedelta(0), dry_run=False)
    results = tx.commit()
    assert results["s.a"].no_change and content(a) == {0: 0, 5: 20} and content(b) == {2: 2}


# -- found: a replay of a transaction whose share changed nothing is refused -------------------------


def _job(cat: mere.Catalog, key: str) -> dict[str, Any]:
    """One batch of a job: an order, and a cancellation that may match nothing."""
    with cat.transaction(idempotency_key=key) as tx:
        tx.table(ORDERS).upsert(rows([7]))
        tx.table(LINES).delete("id = 99")
    return tx.results


def test_a_replayed_transaction_returns_its_first_result_when_a_share_changed_nothing(
    cat: mere.Catalog,
) -> None:
    """Held where every share changed something (the team test above); this pins the first half."""
    for name in (ORDERS, LINES):
        cat.create_table(name, SCHEMA, primary_key="id", properties=STILL)
    first = _job(cat, "batch-1")
    assert first[ORDERS].version == 1 and first[LINES].no_change


def test_a_rerun_of_a_job_whose_delete_matched_nothing_is_a_replay(cat: mere.Catalog) -> None:
    for name in (ORDERS, LINES):
        cat.create_table(name, SCHEMA, primary_key="id", properties=STILL)
    first = _job(cat, "batch-1")
    again = _job(cat, "batch-1")  # the job ran again after a crash whose commit landed
    assert all(r.already_committed for r in again.values())
    assert again[ORDERS].version == first[ORDERS].version


# -- doc claim: catalog transaction keys are apart from single-table keys ---------------------------


def test_doc_a_single_table_write_with_a_catalog_transactions_key_is_its_replay(cat: mere.Catalog) -> None:
    """docs/concepts.md, "Idempotency key": the key is recorded on each table's version it made."""
    a, _ = (cat.create_table(n, SCHEMA, primary_key="id", properties=STILL) for n in (ORDERS, LINES))
    with cat.transaction(idempotency_key="nightly") as tx:
        tx.table(ORDERS).upsert(rows([1]))
        tx.table(LINES).upsert(rows([1]))
    r = a.upsert(rows([2]), idempotency_key="nightly")  # another job that happens to use the same name
    assert r.already_committed and content(a) == {1: 1}


def test_single_table_key_first_then_catalog_key_are_apart(cat: mere.Catalog) -> None:
    """Held: the other direction is apart (a catalog transaction with a key a one-table write used)."""
    a, b = (cat.create_table(n, SCHEMA, primary_key="id", properties=STILL) for n in (ORDERS, LINES))
    a.upsert(rows([1]), idempotency_key="nightly")
    with cat.transaction(idempotency_key="nightly") as tx:
        tx.table(ORDERS).upsert(rows([2]))
        tx.table(LINES).upsert(rows([2]))
    assert not any(r.already_committed for r in tx.results.values())
    assert content(a) == {1: 1, 2: 2} and content(b) == {2: 2}


# -- held: dropped and recreated tables, pinned reads, rollbacks and tags ----------------------------


def test_a_handle_of_a_dropped_and_recreated_table_never_writes_into_the_new_one(cat: mere.Catalog) -> None:
    a, b = (cat.create_table(n, SCHEMA, primary_key="id", properties=STILL) for n in (ORDERS, LINES))
    b.upsert(rows([1]))
    tx = cat.transaction()  # a catalog transaction holds a share of the old table
    tx.table(ORDERS).upsert(rows([5]))
    tx.table(LINES).upsert(rows([5]))
    cat.drop_table(LINES)
    new = cat.create_table(LINES, SCHEMA, primary_key="id", properties=STILL)
    with pytest.raises(NoSuchTable):
        tx.commit()
    for op in (lambda: b.upsert(rows([9])), lambda: b.delete("id = 1"), lambda: b.to_arrow(), b.compact):
        with pytest.raises(NoSuchTable):
            op()
    with pytest.raises(NoSuchTable), cat.transaction() as tx2:
        tx2.table(b)
    assert a.version == 0 and new.version == 0 and content(new) == {}
    assert cat.table(LINES).version == 0


def test_a_pinned_snapshot_reads_exactly_or_refuses_once_expire_gives_it_up(cat: mere.Catalog) -> None:
    t = cat.create_table(ORDERS, SCHEMA, primary_key="id", properties=STILL)
    t.upsert(rows([1, 2]))
    snap = cat.snapshot()
    t.upsert(rows([2, 3], [20, 30]))
    t.delete("id = 1")
    assert content(snap.table(ORDERS)) == {1: 1, 2: 2}
    t.compact()
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    with pytest.raises(NoSuchVersion):
        snap.table(ORDERS).to_arrow()
    assert content(t) == {2: 20, 3: 30}


def test_a_rollback_racing_a_write_refuses_and_a_tag_survives(cat: mere.Catalog) -> None:
    t = cat.create_table(ORDERS, SCHEMA, primary_key="id", properties=STILL)
    t.upsert(rows([1]))
    t.tag("good")
    t.upsert(rows([1], [-1]))
    other = mere.connect(cat.storage.uri, catalog=cat.catalog_url).table(ORDERS)
    store = t.context.store
    real = store.commit
    calls: list[int] = []

    def commit(*args: Any, **kwargs: Any) -> Any:
        if not calls:  # another team member's write lands between the rollback's read and its commit
            calls.append(1)
            other.upsert(rows([2]))
        return real(*args, **kwargs)

    store.commit = commit  # type: ignore[method-assign]
    try:
        with pytest.raises(CommitConflict):
            t.rollback(tag="good")
    finally:
        store.commit = real  # type: ignore[method-assign]
    assert calls and content(t) == {1: -1, 2: 2} and t.version == 3
    assert t.rollback(tag="good").operation == "rollback"
    assert content(t) == {1: 1} and t.tags() == {"good": 1}


def test_one_key_racing_from_two_connections_commits_once(cat: mere.Catalog) -> None:
    for name in (ORDERS, LINES):
        cat.create_table(name, SCHEMA, primary_key="id", properties=STILL)
    twin = mere.connect(cat.storage.uri, catalog=cat.catalog_url)
    first, second = cat.transaction(idempotency_key="k"), twin.transaction(idempotency_key="k")
    for tx, n in ((first, 1), (second, 2)):
        tx.table(ORDERS).update({"v": "v + 1"}, where="id = 0")
        tx.table(ORDERS).upsert(rows([n]))
        tx.table(LINES).upsert(rows([n]))
    r1, r2 = first.commit(), second.commit()
    assert all(r.already_committed for r in r2.values())
    assert {n: r.version for n, r in r1.items()} == {n: r.version for n, r in r2.items()}
    assert content(cat.table(ORDERS)) == {1: 1} and content(cat.table(LINES)) == {1: 1}
    assert cat.table(ORDERS).cleanup(dt.timedelta(0)) == []


def test_a_transaction_after_commit_or_abort_is_refused(cat: mere.Catalog) -> None:
    cat.create_table(ORDERS, SCHEMA, primary_key="id", properties=STILL)
    with cat.transaction() as tx:
        tx.table(ORDERS).upsert(rows([1]))
    with pytest.raises(InvalidInput):
        tx.table(ORDERS).upsert(rows([2]))
    assert content(cat.table(ORDERS)) == {1: 1}
