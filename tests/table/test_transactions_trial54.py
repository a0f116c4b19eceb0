"""Trial 54: catalog transactions and snapshots under concurrency and faults, on SQLite and PostgreSQL.

* Ledger: writer processes run catalog transactions over three tables, each with an idempotency key: a
  payment updates the payer's row of ``acct`` (read-modify-write UPDATE), MERGEs the amount into the payee's
  row of ``recv`` (insert or add) and upserts a record into ``rec``; a refund deletes the record by
  predicate and reverses both. A reader process takes ``cat.snapshot()`` and checks in every snapshot that
  sum(acct) + sum(recv) is constant and sum(recv) == sum(rec.v) (a half-visible transaction breaks it).
  Afterwards the tables equal a model built from what each writer saw commit, and replaying every key from
  another process changes nothing.
* SIGKILL: a child runs the same keyed transactions and is killed at a random moment; the parent reruns
  every transaction the child started, with the same keys: the result equals the model of each applied
  exactly once; the same with transactions that each create a table. Processes racing the same keys
  commit each once; a key reused on another set of tables is refused.
* Aborts: a transaction that creates a table and writes it and another table, then fails, leaves no table,
  no new files, and no key.
* Column change in one table and writes to another in one transaction; reads of a table while a
  transaction on it is open see only committed state.
* A pinned snapshot read while another process writes, compacts and expires: exact rows or NoSuchVersion /
  StorageError, never other rows.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.errors import CommitConflict, CommitFailed, MereError, NoSuchTable, NoSuchVersion, StorageError

pytestmark = pytest.mark.timeout(300)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
ACCT, RECV, REC = "t54.acct", "t54.recv", "t54.rec"
ACCOUNTS = 4
START = 1000
TOTAL = ACCOUNTS * START
OFF = {"compaction.auto": "off"}


def _content(t: Any) -> dict[int, int]:
    data = t.to_arrow()
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _ints(ids: list[int], vs: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.int64())})


def _setup_ledger(cat: mere.Catalog) -> None:
    for name in (ACCT, RECV, REC):
        cat.create_table(name, SCHEMA, primary_key="id", buckets=2, properties=OFF)
    cat.table(ACCT).upsert(_ints(list(range(ACCOUNTS)), [START] * ACCOUNTS))


def _payment(rid: int) -> tuple[int, int, int]:
    """The payer, payee and amount of record ``rid`` (a pure function: any process can rerun it)."""
    rng = random.Random(rid)
    return rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS), rng.randrange(1, 40)


def _run_tx(cat: mere.Catalog, kind: str, rid: int, key: str) -> dict[str, Any]:
    payer, payee, amount = _payment(rid)
    with cat.transaction(idempotency_key=key) as tx:
        if kind == "pay":
            tx.table(ACCT).update({"v": f"v - {amount}"}, where=f"id = {payer}")
            tx.table(RECV).merge(_ints([payee], [amount])).when_matched_update(
                {"v": "t.v + s.v"}
            ).when_not_matched_insert({"id": "s.id", "v": "s.v"}).execute()
            tx.table(REC).upsert(_ints([rid], [amount]))
        else:
            tx.table(REC).delete(f"id = {rid}")
            tx.table(ACCT).update({"v": f"v + {amount}"}, where=f"id = {payer}")
            tx.table(RECV).merge(_ints([payee], [amount])).when_matched_update({"v": "t.v - s.v"}).execute()
    return tx.results


def _plan(seed: int, count: int) -> list[tuple[str, int, str]]:
    """A writer's transactions: payments with fresh record ids, and refunds of its own earlier ones."""
    rng = random.Random(seed)
    plan: list[tuple[str, int, str]] = []
    open_ids: list[int] = []
    for i in range(count):
        if open_ids and rng.random() < 0.3:
            rid = open_ids.pop(rng.randrange(len(open_ids)))
            plan.append(("refund", rid, f"w{seed}-{i}"))
        else:
            rid = seed * 10_000 + i
            open_ids.append(rid)
            plan.append(("pay", rid, f"w{seed}-{i}"))
    return plan


def _model(applied: list[tuple[str, int]]) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    acct = {i: START for i in range(ACCOUNTS)}
    recv: dict[int, int] = {}
    rec: dict[int, int] = {}
    for kind, rid in applied:
        payer, payee, amount = _payment(rid)
        if kind == "pay":
            acct[payer] -= amount
            recv[payee] = recv.get(payee, 0) + amount
            rec[rid] = amount
        elif rid in rec:  # a refund is only planned for a payment that landed (see the writers)
            del rec[rid]
            acct[payer] += amount
            recv[payee] -= amount
    return acct, recv, rec


def _check_snapshot(snap: Any) -> str | None:
    acct, recv, rec = (_content(snap.table(n)) for n in (ACCT, RECV, REC))
    if sum(acct.values()) + sum(recv.values()) != TOTAL:
        return f"total {sum(acct.values()) + sum(recv.values())} at {snap.versions}"
    if sum(recv.values()) != sum(rec.values()):
        return f"recv {sum(recv.values())} != rec {sum(rec.values())} at {snap.versions}"
    if any(_payment(rid)[2] != v for rid, v in rec.items()):
        return f"a record with a wrong amount at {snap.versions}"
    return None


def _ledger_writer(warehouse: str, url: str, seed: int, count: int, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    applied: list[tuple[str, int, str]] = []
    landed: set[int] = set()
    errors: list[str] = []
    for kind, rid, key in _plan(seed, count):
        if kind == "refund" and rid not in landed:
            continue  # its payment lost its race: nothing to refund
        try:
            results = _run_tx(cat, kind, rid, key)
        except CommitConflict:
            continue
        except MereError as e:  # typed, but not expected here
            errors.append(f"{type(e).__name__}: {e}")
            continue
        if any(r.already_committed for r in results.values()):
            errors.append(f"{key} replayed on its first run")
        applied.append((kind, rid, key))
        (landed.add if kind == "pay" else landed.discard)(rid)
    out.put(("writer", applied, errors))


def _ledger_reader(warehouse: str, url: str, stop: Any, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    reads = 0
    bad: list[str] = []
    while not stop.is_set() or reads == 0:
        try:
            problem = _check_snapshot(cat.snapshot())
            if problem is None and reads % 3 == 0:  # a time just passed cuts at a transaction boundary too
                when = dt.datetime.now(dt.UTC) - dt.timedelta(milliseconds=random.randrange(50))
                problem = _check_snapshot(cat.snapshot(as_of=when))
        except Exception as e:  # every error is a finding here: nothing expires
            problem = f"{type(e).__name__}: {e}"
        if problem:
            bad.append(problem)
        reads += 1
    out.put(("reader", reads, bad))


def test_keyed_three_table_ledger_across_processes_keeps_its_invariants(
    cat: mere.Catalog, catalog_url: str
) -> None:
    _setup_ledger(cat)
    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    seeds = [1, 2]
    procs = [
        ctx.Process(target=_ledger_writer, args=(cat.storage.uri, catalog_url, s, 6, out)) for s in seeds
    ]
    procs.append(ctx.Process(target=_ledger_reader, args=(cat.storage.uri, catalog_url, stop, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=200) for _ in seeds]
    stop.set()
    results.append(out.get(timeout=60))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    applied = [a for r in results if r[0] == "writer" for a in r[1]]
    errors = [e for r in results if r[0] == "writer" for e in r[2]]
    reads, bad = next((r[1], r[2]) for r in results if r[0] == "reader")
    assert errors == []
    assert bad == []
    assert reads > 0 and applied
    # Writers' transactions touch disjoint records, so the final state is the model of what landed, in any
    # order (sums commute).
    acct, recv, rec = _model([(k, rid) for k, rid, _ in applied])
    got = [_content(cat.table(n)) for n in (ACCT, RECV, REC)]
    assert got == [acct, recv, rec]
    # Every commit time cuts all three tables at a transaction boundary.
    for snapshot in cat.table(REC).history()[1:]:
        assert _check_snapshot(cat.snapshot(as_of=snapshot.committed_at)) is None, snapshot.version
    versions = cat.snapshot().versions
    # Every landed transaction made one version of each table it changed; none landed half.
    assert versions[REC] == len(applied)
    # Replaying every key (landed ones) from this process: already committed, nothing changes.
    for kind, rid, key in applied:
        res = _run_tx(cat, kind, rid, key)
        assert all(r.already_committed for r in res.values()), key
    assert cat.snapshot().versions == versions
    assert [_content(cat.table(n)) for n in (ACCT, RECV, REC)] == got


# -- SIGKILL and keyed reruns -----------------------------------------------------------------------


def _killed_ledger_child(warehouse: str, url: str, seed: int, progress: str) -> None:
    cat = mere.connect(warehouse, catalog=url)
    for i, (kind, rid, key) in enumerate(_plan(seed, 10_000)):
        with open(progress, "a") as f:
            f.write(f"{i}\n")
            f.flush()
            os.fsync(f.fileno())
        _run_tx(cat, kind, rid, key)


def test_sigkill_then_rerun_with_the_same_keys_applies_each_transaction_once(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path
) -> None:
    _setup_ledger(cat)
    seed = random.randrange(1, 1000)
    progress = tmp_path / "progress.txt"
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_killed_ledger_child, args=(cat.storage.uri, catalog_url, seed, str(progress)))
    child.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (progress.exists() and progress.read_text().strip()):
        time.sleep(0.02)  # the child started its first transaction
    time.sleep(random.uniform(0.0, 1.5))
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    # Every table is at a transaction boundary right after the kill.
    assert _check_snapshot(cat.snapshot()) is None
    started = int(progress.read_text().split()[-1]) + 1 if progress.exists() else 0
    plan = _plan(seed, started)
    before = cat.snapshot().versions
    replays = 0
    for kind, rid, key in plan:  # the rerun of the job: every transaction it started, same keys
        res = _run_tx(cat, kind, rid, key)
        flags = {r.already_committed for r in res.values()}
        assert len(flags) == 1, (key, res)  # a transaction is replayed whole or not at all
        replays += flags.pop()
    # At most the one in flight at the kill was not landed.
    assert started >= 1, seed
    assert replays in (len(plan), len(plan) - 1), (seed, started, replays)
    assert cat.snapshot().versions[REC] == before[REC] + len(plan) - replays
    acct, recv, rec = _model([(k, rid) for k, rid, _ in plan])
    assert [_content(cat.table(n)) for n in (ACCT, RECV, REC)] == [acct, recv, rec], seed
    assert cat.snapshot().versions[REC] == len(plan)
    # cleanup takes only the dead writer's files, and every table stays readable and equal to the model.
    for n in (ACCT, RECV, REC):
        cat.table(n).cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert [_content(cat.table(n)) for n in (ACCT, RECV, REC)] == [acct, recv, rec], seed


def _same_keys_runner(warehouse: str, url: str, seed: int, out: Any) -> None:
    from mere.errors import InvalidInput

    cat = mere.connect(warehouse, catalog=url)
    plan = [p for p in _plan(5, 8) if p[0] == "pay"]
    random.Random(seed).shuffle(plan)
    firsts, errors = [], []
    for kind, rid, key in plan:
        try:
            res = _run_tx(cat, kind, rid, key)
        except (CommitConflict, InvalidInput) as e:  # conflicts: retries spent; never expected: a replay
            errors.append(f"{type(e).__name__}: {e}")
            continue
        flags = {r.already_committed for r in res.values()}
        if len(flags) != 1:
            errors.append(f"{key} replayed on some tables only: {res}")
        elif not flags.pop():
            firsts.append(key)
    out.put((firsts, errors))


def test_processes_racing_the_same_keys_commit_each_once(cat: mere.Catalog, catalog_url: str) -> None:
    _setup_ledger(cat)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_same_keys_runner, args=(cat.storage.uri, catalog_url, s, out)) for s in range(2)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=200) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [e for r in results for e in r[1]] == []
    plan = [p for p in _plan(5, 8) if p[0] == "pay"]
    firsts = sorted(k for r in results for k in r[0])
    assert firsts == sorted(k for _, _, k in plan)  # every key committed by exactly one process
    acct, recv, rec = _model([(k, rid) for k, rid, _ in plan])
    assert [_content(cat.table(n)) for n in (ACCT, RECV, REC)] == [acct, recv, rec]
    assert cat.snapshot().versions[REC] == len(plan)


def test_a_key_reused_on_another_set_of_tables_is_refused_and_commits_nothing(cat: mere.Catalog) -> None:
    from mere.errors import InvalidInput

    _setup_ledger(cat)
    first = _run_tx(cat, "pay", 77, "shared-key")
    state = [_content(cat.table(n)) for n in (ACCT, RECV, REC)]
    versions = cat.snapshot().versions
    with pytest.raises(InvalidInput), cat.transaction(idempotency_key="shared-key") as tx:
        tx.table(ACCT).update({"v": "v - 1"}, where="id = 1")
        tx.table(REC).upsert(_ints([78], [1]))
    with pytest.raises(InvalidInput), cat.transaction(idempotency_key="shared-key") as tx:
        tx.table(ACCT).update({"v": "v - 1"}, where="id = 1")  # a subset of the set is another set too
    assert cat.snapshot().versions == versions
    assert [_content(cat.table(n)) for n in (ACCT, RECV, REC)] == state
    # The key is recorded on each table's version it made: a single-table write with it is a replay.
    again = cat.table(RECV).upsert(_ints([3], [333]), idempotency_key="shared-key")
    assert again.already_committed and again.version == first[RECV].version
    assert cat.snapshot().versions == versions
    # The full rerun still replays.
    res = _run_tx(cat, "pay", 77, "shared-key")
    assert {n: (r.already_committed, r.version) for n, r in res.items()} == {
        n: (True, r.version) for n, r in first.items()
    }
    assert [_content(cat.table(n)) for n in (ACCT, RECV, REC)] == state


def _create_tx(cat: mere.Catalog, i: int) -> dict[str, Any]:
    with cat.transaction(idempotency_key=f"create-{i}") as tx:
        tx.create_table(f"t54.n{i}", SCHEMA, primary_key="id").upsert(_ints([i], [i]))
        tx.table(REC).upsert(_ints([i], [i]))
    return tx.results


def _killed_creator(warehouse: str, url: str, progress: str) -> None:
    cat = mere.connect(warehouse, catalog=url)
    for i in range(10_000):
        with open(progress, "a") as f:
            f.write(f"{i}\n")
            f.flush()
            os.fsync(f.fileno())
        _create_tx(cat, i)


def test_sigkill_in_keyed_transactions_that_create_tables_then_rerun(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path
) -> None:
    cat.create_table(REC, SCHEMA, primary_key="id", buckets=2, properties=OFF)
    progress = tmp_path / "progress.txt"
    child = mp.get_context("spawn").Process(
        target=_killed_creator, args=(cat.storage.uri, catalog_url, str(progress))
    )
    child.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (progress.exists() and progress.read_text().strip()):
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 1.5))
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    started = int(progress.read_text().split()[-1]) + 1
    landed = sorted(n for n in cat.tables() if n.startswith("t54.n"))
    # A created table appears with its transaction's other table, never alone.
    assert len(landed) == cat.table(REC).version == len(_content(cat.table(REC)))
    assert len(landed) in (started, started - 1)
    for i in range(started):  # the job's rerun
        res = _create_tx(cat, i)
        assert res[REC].already_committed == res[f"t54.n{i}"].already_committed == (i < len(landed))
    assert sorted(n for n in cat.tables() if n.startswith("t54.n")) == sorted(
        f"t54.n{i}" for i in range(started)
    )
    for i in range(started):
        t = cat.table(f"t54.n{i}")
        assert (t.version, _content(t)) == (1, {i: i})
    assert _content(cat.table(REC)) == {i: i for i in range(started)}
    assert cat.table(REC).version == started


# -- aborts -----------------------------------------------------------------------------------------


class Boom(Exception):
    pass


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix == ".parquet"}


@pytest.mark.parametrize("how", ["raise", "bad_rows", "abort"])
def test_an_aborted_transaction_that_created_a_table_leaves_nothing(
    cat: mere.Catalog, tmp_path: Path, how: str
) -> None:
    _setup_ledger(cat)
    root = Path(cat.storage.uri.removeprefix("file://"))
    files_before = _files(root)
    versions = cat.snapshot().versions
    tables = cat.tables()

    def body(tx: Any) -> None:
        tx.table(ACCT).update({"v": "v + 1"}, where="id = 0")
        new = tx.create_table("t54.fresh", SCHEMA, primary_key="id")
        new.upsert(_ints([1, 2], [3, 4]))
        tx.table(REC).upsert(_ints([5], [6]))
        if how == "raise":
            raise Boom
        if how == "bad_rows":
            new.upsert(pa.table({"id": pa.array([None], pa.int64()), "v": pa.array([1], pa.int64())}))

    if how == "abort":
        tx = cat.transaction(idempotency_key="k-abort")
        body(tx)
        tx.abort()
    else:
        with (
            pytest.raises(Boom if how == "raise" else MereError),
            cat.transaction(idempotency_key="k-abort") as tx,
        ):
            body(tx)
    assert cat.tables() == tables
    with pytest.raises(NoSuchTable):
        cat.table("t54.fresh")
    assert cat.snapshot().versions == versions
    assert _files(root) == files_before  # every file the transaction wrote was deleted
    assert _content(cat.table(ACCT))[0] == START
    # The key was not recorded: the same key commits now, with the new table.
    with cat.transaction(idempotency_key="k-abort") as tx2:
        tx2.create_table("t54.fresh", SCHEMA, primary_key="id").upsert(_ints([1], [1]))
        tx2.table(REC).upsert(_ints([5], [6]))
    assert not any(r.already_committed for r in tx2.results.values())
    assert _content(cat.table("t54.fresh")) == {1: 1}
    assert _content(cat.table(REC)) == {5: 6}


# -- a column change and a write to another table; reads during an open transaction ----------------


def test_column_change_and_write_to_another_table_land_together(cat: mere.Catalog) -> None:
    _setup_ledger(cat)
    before = cat.snapshot()
    tx = cat.transaction(idempotency_key="evolve-1")
    with tx.table(RECV).evolve() as e:
        e.add_column("note", pa.string())
    tx.table(RECV).upsert(
        pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([9], pa.int64()), "note": ["x"]})
    )
    tx.table(ACCT).update({"v": "v - 9"}, where="id = 2")
    # Reads while the transaction is open see the committed state only, schema included.
    assert cat.table(RECV).schema.names == ["id", "v"]
    assert _content(cat.table(ACCT))[2] == START
    assert cat.snapshot().versions == before.versions
    tx.commit()
    after = cat.snapshot()
    assert after.version(RECV) == before.version(RECV) + 1 and after.version(ACCT) == before.version(ACCT) + 1
    assert after.table(RECV).to_arrow().to_pylist() == [{"id": 1, "v": 9, "note": "x"}]
    assert _content(after.table(ACCT))[2] == START - 9
    # The old snapshot still reads the old schema and rows.
    assert before.table(RECV).to_arrow().num_rows == 0
    assert before.table(RECV).to_arrow().schema.names == ["id", "v"]
    assert _content(before.table(ACCT))[2] == START
    # A replay with the key changes nothing, even with another column change in it.
    with cat.transaction(idempotency_key="evolve-1") as again:
        with again.table(RECV).evolve() as e:
            e.add_column("other", pa.int64())
        again.table(ACCT).update({"v": "v - 9"}, where="id = 2")
    assert all(r.already_committed for r in again.results.values())
    assert cat.table(RECV).schema.names == ["id", "v", "note"]
    assert _content(cat.table(ACCT))[2] == START - 9


# -- pinned snapshots while another process compacts and expires -----------------------------------


def _maintainer(warehouse: str, url: str, seconds: float, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    rng = random.Random(7)
    deadline = time.monotonic() + seconds
    rounds = 0
    errors: list[str] = []
    while time.monotonic() < deadline:
        try:
            with cat.transaction() as tx:
                for n in (ACCT, RECV):
                    tx.table(n).upsert(_ints([rng.randrange(1, 20)], [rng.randrange(1000)]))
            for n in (ACCT, RECV):
                t = cat.table(n)
                t.compact(min_files=2)
                t.expire(older_than=dt.timedelta(0), dry_run=False)
                t.cleanup(older_than=dt.timedelta(0), dry_run=False)
            rounds += 1
        except CommitConflict:
            pass
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
    out.put((rounds, errors))


def test_pinned_snapshot_reads_exactly_or_refuses_while_another_process_expires(
    cat: mere.Catalog, catalog_url: str
) -> None:
    for n in (ACCT, RECV):
        t = cat.create_table(n, SCHEMA, primary_key="id", buckets=2, properties=OFF)
        for i in range(4):
            t.upsert(_ints([i, i + 10], [i, -i]))
    snap = cat.snapshot()
    expected = {n: _content(snap.table(n)) for n in (ACCT, RECV)}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_maintainer, args=(cat.storage.uri, catalog_url, 3.5, out))
    p.start()
    outcomes: dict[str, int] = {"exact": 0, "refused": 0, "landed": 0, "failed": 0}
    wrong: list[Any] = []
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        # A catalog transaction that reads (UPDATE) and stays open while the other process expires: it lands
        # whole, or fails typed and lands nothing.
        try:
            with cat.transaction() as tx:
                for n in (ACCT, RECV):
                    tx.table(n).update({"v": "v + 1"}, where="id = 0")
                time.sleep(0.05)
            outcomes["landed"] += 1
        except (
            NoSuchVersion,
            StorageError,
            CommitConflict,
            CommitFailed,
        ):  # OutlivedCleanup: cleanup's age 0
            outcomes["failed"] += 1
        for n in (ACCT, RECV):
            try:
                got = _content(snap.table(n))
            except (NoSuchVersion, StorageError):
                outcomes["refused"] += 1
                continue
            if got == expected[n]:
                outcomes["exact"] += 1
            else:
                wrong.append((n, got))
    rounds, errors = out.get(timeout=60)
    p.join(timeout=60)
    assert p.exitcode == 0
    assert errors == []
    assert wrong == []
    assert rounds > 0
    # Once every old version is gone the pinned snapshot refuses; the current state is still readable.
    final = cat.snapshot()
    assert [_content(final.table(n))[0] for n in (ACCT, RECV)] == [outcomes["landed"]] * 2
    assert outcomes["exact"] > 0
