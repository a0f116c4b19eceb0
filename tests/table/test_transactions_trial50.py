"""Trial 50: atomicity and isolation of multi-table catalog transactions against a dict model.

Four tables (keyed ``last``, keyed ``sum``, keyed and partitioned, and keyless) take mixes of upsert,
delete, update, MERGE, schema evolution, properties, create-table and overwrite inside one catalog
transaction; tags, compaction, drops and single-table writes run beside it. After every failure (user
code, a refused write, bad input in the third of four operations, a conflict, a killed process) every
table must be exactly as before (rows, version, schema, properties, tags), readable, with no files
left behind; after a success every change is visible at once and time travel reads the versions before.
Real processes (``spawn``) race conflicting transactions and are SIGKILLed at random moments, on SQLite
and on a throwaway PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import random
import signal
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from backends import BACKENDS
from mere.errors import CommitConflict, InvalidInput, MereError, NoSuchTable

pytestmark = pytest.mark.timeout(600)

STILL = {"compaction.auto": "off", "retention.max-age": "off"}
KV = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
PART = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("p", pa.string())])
LOG = pa.schema([("id", pa.int64()), ("v", pa.int64())])
LAST, SUMS, PARTS, LOGS = "t50.last", "t50.sums", "t50.parts", "t50.logs"
NAMES = (LAST, SUMS, PARTS, LOGS)


def rows(ids: list[int], vals: list[int] | None = None) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(ids if vals is None else vals, pa.int64())}
    )


def prows(ids: list[int], vals: list[int], parts: list[str]) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(vals, pa.int64()), "p": pa.array(parts, pa.string())}
    )


def make_tables(cat: mere.Catalog, auto: bool = False) -> None:
    props = {} if auto else STILL
    cat.create_table(LAST, KV, primary_key="id", buckets=2, properties=props)
    cat.create_table(SUMS, KV, primary_key="id", buckets=2, merge_operators={"v": "sum"}, properties=props)
    cat.create_table(PARTS, PART, primary_key="id", partition_by=["p"], buckets=2, properties=props)
    cat.create_table(LOGS, LOG, properties=props)
    cat.table(LAST).upsert(rows([1, 2, 3], [10, 20, 30]))
    cat.table(SUMS).upsert(rows([1, 2], [5, 5]))
    cat.table(PARTS).upsert(prows([1, 2, 3], [1, 2, 3], ["a", "b", "a"]))
    cat.table(LOGS).append(rows([1, 1], [7, 8]))


def sorted_rows(data: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in data.to_pylist())


def state(cat: mere.Catalog) -> dict[str, Any]:
    """Everything visible of every table, read through fresh handles."""
    out: dict[str, Any] = {"tables": sorted(cat.tables("t50"))}
    for name in out["tables"]:
        t = cat.table(name)
        out[name] = (
            t.version,
            [str(f) for f in t.schema],
            {k: v for k, v in t.properties.items()},
            dict(t.tags()),
            sorted_rows(t.to_arrow()),
        )
    return out


def leftovers(cat: mere.Catalog) -> dict[str, list[str]]:
    return {n: cat.table(n).cleanup(older_than=dt.timedelta(0)) for n in cat.tables("t50")}


def assert_untouched(cat: mere.Catalog, before: dict[str, Any]) -> None:
    assert state(cat) == before
    assert leftovers(cat) == {n: [] for n in before["tables"]}


# -- a failure anywhere commits nothing --------------------------------------------------------------


def _op_upsert_last(tx: Any) -> None:
    tx.table(LAST).upsert(rows([4, 1], [40, 11]))


def _op_sum(tx: Any) -> None:
    tx.table(SUMS).upsert(rows([1, 9], [1, 1]))


def _op_merge_parts(tx: Any) -> None:
    (
        tx.table(PARTS)
        .merge(prows([1, 8], [100, 8], ["b", "c"]))
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _op_logs(tx: Any) -> None:
    tx.table(LOGS).append(rows([5], [5]))


def _op_delete_update(tx: Any) -> None:
    tx.table(LAST).delete("id = 2").update({"v": "v + 1"}, where="id = 3")


def _op_props(tx: Any) -> None:
    tx.table(SUMS).set_properties({"write.compression": "snappy"})


def _op_evolve(tx: Any) -> None:
    with tx.table(LOGS).evolve() as e:
        e.add_column("note", pa.string())


def _op_create(tx: Any) -> None:
    tx.create_table("t50.fresh", KV, primary_key="id").upsert(rows([1]))


# in an order a transaction takes: column changes and reads before the writes of one table
GOOD_OPS: list[Callable[[Any], None]] = [
    _op_delete_update,
    _op_evolve,
    _op_upsert_last,
    _op_sum,
    _op_merge_parts,
    _op_logs,
    _op_props,
    _op_create,
]


class Boom(Exception):
    pass


def _bad_user(tx: Any) -> None:
    raise Boom("user code")


def _bad_column(tx: Any) -> None:
    tx.table(LAST).upsert(pa.table({"id": [1], "nope": [1]}))


def _bad_type(tx: Any) -> None:
    tx.table(SUMS).upsert(pa.table({"id": [1], "v": ["x"]}))


def _bad_filter(tx: Any) -> None:
    tx.table(PARTS).delete("no_such_column = 1")


def _bad_delete_none(tx: Any) -> None:
    tx.table(LAST).delete(None)


def _bad_property(tx: Any) -> None:
    tx.table(SUMS).set_properties({"write.compression": "nonsense-codec"})


def _bad_update(tx: Any) -> None:
    tx.table(LAST).update({"id": "id + 1"}, where="id = 1")  # a key column


def _bad_null_key(tx: Any) -> None:
    tx.table(LAST).upsert(pa.table({"id": pa.array([None], pa.int64()), "v": [1]}))


def _bad_table(tx: Any) -> None:
    tx.table("t50.missing").upsert(rows([1]))


def _bad_create_existing(tx: Any) -> None:
    tx.create_table(LAST, KV, primary_key="id")


def _bad_merge(tx: Any) -> None:
    tx.table(PARTS).merge(prows([1], [1], ["a"])).when_matched_update(set={"v": "s.nope"}).execute()


def _bad_overflow(tx: Any) -> None:
    tx.table(SUMS).upsert(rows([1, 1], [2**63 - 1, 2**63 - 1]))  # overflows whatever came before


BAD_OPS: dict[str, tuple[Callable[[Any], None], type[BaseException]]] = {
    "user": (_bad_user, Boom),
    "column": (_bad_column, MereError),
    "type": (_bad_type, MereError),
    "filter": (_bad_filter, MereError),
    "delete_none": (_bad_delete_none, MereError),
    "property": (_bad_property, MereError),
    "update_key": (_bad_update, MereError),
    "null_key": (_bad_null_key, MereError),
    "missing_table": (_bad_table, NoSuchTable),
    "create_existing": (_bad_create_existing, MereError),
    "merge": (_bad_merge, MereError),
    "overflow": (_bad_overflow, MereError),
}


@settings(max_examples=12, deadline=None)
@given(
    ops=st.lists(st.sampled_from(range(len(GOOD_OPS))), min_size=3, max_size=3, unique=True),
    bad=st.sampled_from(sorted(BAD_OPS)),
    commit_style=st.sampled_from(["with", "commit"]),
)
def test_bad_third_of_four_operations_leaves_every_table_as_before(
    tmp_path_factory: pytest.TempPathFactory, ops: list[int], bad: str, commit_style: str
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("w")))
    make_tables(cat)
    cat.table(LAST).tag("start", 1)
    before = state(cat)
    fn, kind = BAD_OPS[bad]
    ops = sorted(ops)
    seq = [GOOD_OPS[ops[0]], GOOD_OPS[ops[1]], fn, GOOD_OPS[ops[2]]]
    if commit_style == "with":
        with pytest.raises(kind), cat.transaction() as tx:
            for op in seq:
                op(tx)
                assert state(cat) == before  # readers never see the open transaction
    else:
        tx = cat.transaction()
        with pytest.raises(kind):
            for op in seq:
                op(tx)
            tx.commit()
        # the failed operation does not commit the transaction; the caller may abort or commit what is left
        tx.abort()
    assert tx.state == "aborted"
    assert_untouched(cat, before)
    assert not cat.exists("t50.fresh")
    # the catalog is usable and each table writable afterwards, at once
    with cat.transaction() as again:
        again.table(LAST).upsert(rows([77], [77]))
        again.table(SUMS).upsert(rows([77], [77]))
        again.table(PARTS).upsert(prows([77], [77], ["z"]))
        again.table(LOGS).append(rows([77], [77]))
    for name in NAMES:
        assert cat.table(name).version == before[name][0] + 1


# -- success: every change at once; time travel keeps the before ------------------------------------


def model_after_good_mix() -> dict[str, list[tuple[Any, ...]]]:
    return {
        LAST: sorted([(1, 11), (3, 31), (4, 40)]),
        SUMS: sorted([(1, 6), (2, 5), (9, 1)]),
        PARTS: sorted([(1, 100, "b"), (2, 2, "b"), (3, 3, "a"), (8, 8, "c")]),
        LOGS: sorted([(1, 7, None), (1, 8, None), (5, 5, None)]),
    }


@BACKENDS
def test_a_mix_of_every_kind_lands_at_once_and_time_travel_keeps_the_before(cat: mere.Catalog) -> None:
    make_tables(cat)
    before = state(cat)
    snap = cat.snapshot()
    t_before = dt.datetime.now(dt.UTC)
    time.sleep(0.01)
    tx = cat.transaction()
    for op in GOOD_OPS:
        op(tx)
        assert state(cat) == before
        assert not cat.exists("t50.fresh")
    results = tx.commit()
    assert set(results) == set(NAMES) | {"t50.fresh"}
    assert len({r.committed_at for r in results.values()}) == 1
    got = {n: sorted_rows(cat.table(n).to_arrow()) for n in NAMES}
    assert got == model_after_good_mix()
    for n in NAMES:
        assert cat.table(n).version == before[n][0] + 1
        # time travel to the version before reads the old rows exactly
        assert sorted_rows(cat.table(n).scan(version=before[n][0]).to_arrow()) == before[n][4]
        assert sorted_rows(snap.table(n).to_arrow()) == before[n][4]
    assert cat.table(SUMS).properties["write.compression"] == "snappy"
    assert cat.table(LOGS).schema.names == ["id", "v", "note"]
    assert sorted_rows(cat.table("t50.fresh").to_arrow()) == [(1, 1)]
    old = cat.snapshot(as_of=t_before)
    for n in NAMES:
        assert old.version(n) == before[n][0]
        assert sorted_rows(old.table(n).to_arrow()) == before[n][4]
    with pytest.raises(NoSuchTable):
        old.table("t50.fresh")
    # nothing of the transaction is left as garbage
    assert leftovers(cat) == {n: [] for n in cat.tables("t50")}


# -- beside the transaction: drop, compaction, tags, concurrent writes -------------------------------


@BACKENDS
def test_a_table_dropped_while_the_transaction_is_open_fails_it_whole(cat: mere.Catalog) -> None:
    make_tables(cat)
    tx = cat.transaction()
    _op_upsert_last(tx)
    _op_sum(tx)
    _op_logs(tx)
    cat.drop_table(SUMS)
    before = state(cat)
    with pytest.raises(MereError):
        tx.commit()
    assert_untouched(cat, before)


@BACKENDS
def test_a_table_dropped_and_recreated_meanwhile_is_not_written(cat: mere.Catalog) -> None:
    make_tables(cat)
    tx = cat.transaction()
    _op_upsert_last(tx)
    _op_sum(tx)
    cat.drop_table(SUMS)
    cat.create_table(SUMS, KV, primary_key="id", properties=STILL)
    before = state(cat)
    with pytest.raises(MereError):
        tx.commit()
    assert_untouched(cat, before)


@BACKENDS
def test_compaction_beside_an_open_transaction_keeps_both(cat: mere.Catalog) -> None:
    make_tables(cat)
    for i in range(3):
        cat.table(LAST).upsert(rows([i + 10], [i]))
        cat.table(SUMS).upsert(rows([1], [1]))
    tx = cat.transaction()
    tx.table(LAST).update({"v": "v * 2"}, where="id >= 10")
    tx.table(SUMS).upsert(rows([1], [100]))
    tx.table(PARTS).delete("p = 'a'")
    cat.table(LAST).compact()
    cat.table(SUMS).compact()
    cat.table(PARTS).compact()
    tx.commit()
    assert dict(sorted_rows(cat.table(LAST).to_arrow())) == {1: 10, 2: 20, 3: 30, 10: 0, 11: 2, 12: 4}
    assert dict(sorted_rows(cat.table(SUMS).to_arrow())) == {1: 108, 2: 5}
    assert sorted_rows(cat.table(PARTS).to_arrow()) == [(2, 2, "b")]
    for n in (LAST, SUMS):
        cat.table(n).compact()
    assert dict(sorted_rows(cat.table(SUMS).to_arrow())) == {1: 108, 2: 5}


@BACKENDS
def test_tags_and_time_travel_survive_a_failed_transaction(cat: mere.Catalog) -> None:
    make_tables(cat)
    for n in NAMES:
        cat.table(n).tag("t0")
    tx = cat.transaction()
    _op_upsert_last(tx)
    _op_merge_parts(tx)
    _op_evolve(tx)
    cat.table(PARTS).tag("t1")  # beside it: a tag is not a version
    before = state(cat)
    with pytest.raises(Boom), tx:
        raise Boom
    assert_untouched(cat, before)
    for n in NAMES:
        t = cat.table(n)
        assert sorted_rows(t.scan(tag="t0").to_arrow()) == before[n][4]


@BACKENDS
def test_a_lost_race_with_retries_spent_commits_nothing_anywhere(cat: mere.Catalog) -> None:
    from mere.retry import RetryPolicy

    make_tables(cat)
    tx = cat.transaction()
    tx.retries = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
    _op_sum(tx)
    _op_logs(tx)
    _op_create(tx)
    tx.table(LAST).overwrite(rows([99]))
    cat.table(LAST).upsert(rows([5], [5]))  # an overwrite racing a write: refused without retries
    before = state(cat)
    with pytest.raises(CommitConflict):
        tx.commit()
    assert_untouched(cat, before)
    assert not cat.exists("t50.fresh")


# -- bad arguments: typed ----------------------------------------------------------------------------


@BACKENDS
def test_bad_arguments_are_typed_and_change_nothing(cat: mere.Catalog) -> None:
    make_tables(cat)
    before = state(cat)
    calls: list[Callable[[], Any]] = [
        lambda: cat.transaction(idempotency_key=123),  # type: ignore[arg-type]
        lambda: cat.transaction().table(None),  # type: ignore[arg-type]
        lambda: cat.transaction().table(123),  # type: ignore[arg-type]
        lambda: cat.transaction().table(""),
        lambda: cat.transaction().create_table("t50.x", "not a schema"),  # type: ignore[arg-type]
        lambda: cat.transaction().create_table("t50.x", KV, primary_key="nope"),
        lambda: cat.transaction().create_table(123, KV),  # type: ignore[arg-type]
        lambda: cat.snapshot(as_of=123456789012345678901234567890),
        lambda: cat.snapshot(as_of=object()),
        lambda: cat.snapshot().table(123),  # type: ignore[arg-type]
        lambda: cat.snapshot().table("t50.nope"),
        lambda: cat.snapshot().version("t50.nope"),
        lambda: cat.snapshot().table(LAST).scan(version=0),
        lambda: cat.transaction().table(LAST).update("v = 1"),  # type: ignore[arg-type]
        lambda: cat.transaction().table(LAST).set_properties(["a"]),  # type: ignore[arg-type]
        lambda: cat.transaction().table(LAST).upsert("not a table"),
        lambda: cat.transaction().table(LAST).delete(123),
        lambda: cat.transaction().table(LAST).merge(rows([1])).execute(),
    ]
    wrong = []
    for i, call in enumerate(calls):
        try:
            call()
        except MereError:
            pass
        except Exception as e:
            wrong.append(f"call {i}: raw {type(e).__name__}: {e}")
        else:
            wrong.append(f"call {i}: accepted")
    assert wrong == []
    assert_untouched(cat, before)


# -- SIGKILL at random moments: a deterministic job replayed by a model ------------------------------


def _job_tx(cat: mere.Catalog, i: int) -> None:
    """Transaction ``i`` of the job: every table changes, in a mix of kinds."""
    with cat.transaction() as tx:
        if i % 7 == 0:
            with tx.table(LOGS).evolve() as e:
                e.add_column(f"c{i}", pa.string())
        last = tx.table(LAST)
        if i % 3 == 0:
            last.delete(f"id = {i % 5}").upsert(rows([i % 7], [i]))
        else:
            last.merge(rows([i % 7], [i])).when_matched_update_all().when_not_matched_insert_all().execute()
        tx.table(SUMS).upsert(rows([i % 4], [1]))
        if i % 5 == 0:
            tx.table(SUMS).set_properties({"write.compression": "snappy" if i % 2 else "zstd"})
        tx.table(PARTS).upsert(prows([i % 6], [i], [f"p{i % 3}"]))
        tx.table(LOGS).append(rows([i], [i]))


def _job_model(n: int) -> dict[str, Any]:
    """The tables after ``make_tables`` and the job's transactions 1..n."""
    last = {1: 10, 2: 20, 3: 30}
    sums = {1: 5, 2: 5}
    parts = {1: (1, "a"), 2: (2, "b"), 3: (3, "a")}
    logs = [(1, 7), (1, 8)]
    comp = None
    for i in range(1, n + 1):
        if i % 3 == 0:
            last.pop(i % 5, None)
        last[i % 7] = i
        sums[i % 4] = sums.get(i % 4, 0) + 1
        if i % 5 == 0:
            comp = "snappy" if i % 2 else "zstd"
        parts[i % 6] = (i, f"p{i % 3}")
        logs.append((i, i))
    return {
        LAST: sorted(last.items()),
        SUMS: sorted(sums.items()),
        PARTS: sorted((k, v, p) for k, (v, p) in parts.items()),
        LOGS: sorted(logs),
        "compression": comp,
        "columns": ["id", "v"] + [f"c{i}" for i in range(1, n + 1) if i % 7 == 0],
    }


def _landed(logs: list[tuple[Any, ...]]) -> int:
    """The job's transactions landed: transaction ``i`` logs ``(i, i)``; the tables' own rows are ``(1, 7)``
    and ``(1, 8)`` (so an id alone does not tell transaction 1 from them)."""
    return max([r[0] for r in logs if r[0] == r[1]] or [0])


def _committed(cat: mere.Catalog) -> int:
    return _landed(sorted_rows(cat.table(LOGS).to_arrow().select(["id", "v"])))


def _job_child(warehouse: str, url: str, ready: str) -> None:
    cat = mere.connect(warehouse, catalog=url)
    i = _committed(cat)
    with open(ready, "w") as f:
        f.write("go")
    while True:
        i += 1
        _job_tx(cat, i)


def _check_job(cat: mere.Catalog, base: dict[str, int]) -> int:
    snap = cat.snapshot()
    logs = sorted_rows(snap.table(LOGS).to_arrow().select(["id", "v"]))
    n = _landed(logs)
    want = _job_model(n)
    assert logs == want[LOGS]
    assert sorted_rows(snap.table(LAST).to_arrow()) == want[LAST]
    assert sorted_rows(snap.table(SUMS).to_arrow()) == want[SUMS]
    assert sorted_rows(snap.table(PARTS).to_arrow()) == want[PARTS]
    assert cat.table(LOGS).schema.names == want["columns"]
    assert cat.table(SUMS).properties.get("write.compression") == (
        want["compression"] or cat.table(LAST).properties.get("write.compression")
    )
    for name in NAMES:  # one version per table per landed transaction: nothing landed half
        assert snap.version(name) == base[name] + n, (name, n)
    return n


@BACKENDS
def test_sigkill_at_random_moments_leaves_every_table_at_a_transaction_boundary(
    cat: mere.Catalog, catalog_url: str, tmp_path: Any
) -> None:
    make_tables(cat)
    base = {n: cat.table(n).version for n in NAMES}
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    ctx = mp.get_context("spawn")
    done = 0
    for round_ in range(3):
        ready = str(tmp_path / f"ready{round_}")
        child = ctx.Process(target=_job_child, args=(cat.storage.uri, catalog_url, ready))
        child.start()
        deadline = time.monotonic() + 120
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.2, 2.5))
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join(timeout=60)
        assert child.exitcode == -signal.SIGKILL, f"seed {seed}"
        n = _check_job(cat, base)
        assert n >= done, f"seed {seed}"
        done = n
        # compaction beside the job's history keeps the model
        cat.table(LAST).compact()
        cat.table(SUMS).compact()
        base[LAST] += 1 if cat.table(LAST).version > base[LAST] + n else 0
        base[SUMS] += 1 if cat.table(SUMS).version > base[SUMS] + n else 0
        assert _check_job(cat, base) == n
    # the dead writers' files are garbage only: cleanup takes them and nothing a version holds
    for name in NAMES:
        cat.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert _check_job(cat, base) == done
    _job_tx(cat, done + 1)  # no lock left behind: the next transaction lands
    assert _check_job(cat, base) == done + 1
    assert leftovers(cat) == {n: [] for n in NAMES}


# -- processes racing conflicting transactions; readers see whole transactions only ------------------


def _racer(warehouse: str, url: str, w: int, count: int, seed: int, out: Any) -> None:
    cat = mere.connect(warehouse, catalog=url)
    rng = random.Random(seed)
    done = conflicts = 0
    for i in range(count):
        order = [LAST, SUMS, PARTS]
        rng.shuffle(order)
        try:
            with cat.transaction() as tx:
                for name in order:
                    share = tx.table(name)
                    if name == LAST:
                        share.update({"v": "v + 1"}, where="id = 0")
                    elif name == SUMS:
                        share.upsert(rows([0], [1]))
                    else:
                        share.merge(prows([0], [1], ["a"])).when_matched_update(
                            set={"v": "t.v + 1"}
                        ).when_not_matched_insert_all().execute()
                tx.table(LOGS).append(rows([w], [i]))
                if rng.random() < 0.2:
                    tx.table(LAST).set_properties({"write.compression": rng.choice(["zstd", "snappy"])})
            done += 1
        except CommitConflict:
            conflicts += 1
    out.put((w, done, conflicts))


def _reader_checks(cat: mere.Catalog) -> list[Any]:
    snap = cat.snapshot()
    last = dict(sorted_rows(snap.table(LAST).to_arrow()))[0]
    sums = dict(sorted_rows(snap.table(SUMS).to_arrow()))[0]
    parts = {r[0]: r[1] for r in sorted_rows(snap.table(PARTS).to_arrow())}[0]
    logs = sum(1 for r in sorted_rows(snap.table(LOGS).to_arrow()) if r[0] >= 100)
    if not (last == sums == parts == logs):
        return [(snap.versions, last, sums, parts, logs)]
    return []


@BACKENDS
def test_processes_racing_conflicting_transactions_over_four_tables(
    cat: mere.Catalog, catalog_url: str
) -> None:
    cat.create_table(LAST, KV, primary_key="id", buckets=2, properties=STILL)
    cat.create_table(SUMS, KV, primary_key="id", buckets=2, merge_operators={"v": "sum"})
    cat.create_table(PARTS, PART, primary_key="id", partition_by=["p"], properties=STILL)
    cat.create_table(LOGS, LOG, properties=STILL)
    with cat.transaction() as tx:
        tx.table(LAST).upsert(rows([0], [0]))
        tx.table(SUMS).upsert(rows([0], [0]))
        tx.table(PARTS).upsert(prows([0], [0], ["a"]))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    seed = random.randrange(1 << 30)
    procs = [
        ctx.Process(target=_racer, args=(cat.storage.uri, catalog_url, 100 + w, 8, seed + w, out))
        for w in range(3)
    ]
    for p in procs:
        p.start()
    bad: list[Any] = []
    reads = 0
    while any(p.is_alive() for p in procs):
        bad += _reader_checks(cat)
        reads += 1
        cat.table(SUMS).compact() if reads % 5 == 0 else None  # compaction beside the writers
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert bad == [], f"seed {seed}"
    bad += _reader_checks(cat)
    assert bad == [], f"seed {seed}"
    done = sum(r[1] for r in results)
    assert done > 0
    logs = cat.table(LOGS).to_arrow()
    assert logs.num_rows == done
    assert dict(sorted_rows(cat.table(LAST).to_arrow()))[0] == done
    for w, d, _ in results:
        assert logs.column("id").to_pylist().count(w) == d
    assert leftovers(cat) == {n: [] for n in NAMES}


# -- SIGKILL at chosen points of a transaction that creates, evolves and sets properties -------------


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def _rich_tx(cat: mere.Catalog, mode: str) -> None:
    sql = cat.sql
    if mode.startswith("land"):
        real = sql._land
        calls: list[int] = []
        stop = int(mode[4:])

        def land(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == stop:
                _die()
            return real(*args, **kwargs)

        sql._land = land  # type: ignore[method-assign]
    if mode == "before_db_commit":
        from sqlalchemy import event

        def before_commit(conn: Any) -> None:
            if conn.get_execution_options().get("mere_write"):
                _die()

        event.listen(sql.engine, "commit", before_commit)
    with cat.transaction(idempotency_key="rich") as tx:
        for op in GOOD_OPS:
            op(tx)
        if mode == "in_block":
            _die()


def _rich_child(warehouse: str, url: str, mode: str) -> None:
    _rich_tx(mere.connect(warehouse, catalog=url), mode)


@BACKENDS
@pytest.mark.parametrize("mode", ["in_block", "land1", "land3", "land5", "before_db_commit"])
def test_sigkill_inside_a_transaction_that_creates_evolves_and_sets_properties(
    cat: mere.Catalog, catalog_url: str, mode: str
) -> None:
    make_tables(cat)
    before = state(cat)
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_rich_child, args=(cat.storage.uri, catalog_url, mode))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert state(cat) == before  # nothing of it: no rows, columns, properties, nor the new table
    assert not cat.exists("t50.fresh") and cat.sql.find_transaction("rich") is None
    for name in NAMES:
        cat.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert_untouched(cat, before)
    # the same job, rerun under its key, lands whole (no lock nor half-created table left behind)
    with cat.transaction(idempotency_key="rich") as tx:
        for op in GOOD_OPS:
            op(tx)
    assert {n: sorted_rows(cat.table(n).to_arrow()) for n in NAMES} == model_after_good_mix()
    assert sorted_rows(cat.table("t50.fresh").to_arrow()) == [(1, 1)]


# -- more deterministic edges -------------------------------------------------------------------------


@BACKENDS
@pytest.mark.parametrize("beside", ["add", "add_default", "rename", "drop"])
def test_a_column_change_beside_an_open_transaction_fails_it_whole(cat: mere.Catalog, beside: str) -> None:
    make_tables(cat)
    tx = cat.transaction()
    tx.table(LAST).upsert(rows([1, 9], [100, 900]))
    tx.table(SUMS).upsert(rows([1], [1]))
    _op_create(tx)
    t = cat.table(LAST)
    if beside == "add":
        t.add_column("x", pa.string())
    elif beside == "add_default":
        t.add_column("x", pa.int64(), default=5)
    elif beside == "rename":
        t.rename_column("v", "w")
    else:
        t.drop_column("v")
    before = state(cat)
    with pytest.raises(CommitConflict):
        tx.commit()
    assert tx.state == "aborted"
    assert_untouched(cat, before)
    assert not cat.exists("t50.fresh")


@BACKENDS
def test_keyboard_interrupt_and_a_failed_commit_commit_nothing(cat: mere.Catalog) -> None:
    make_tables(cat)
    before = state(cat)
    with pytest.raises(KeyboardInterrupt), cat.transaction() as tx:
        _op_upsert_last(tx)
        _op_create(tx)
        raise KeyboardInterrupt
    assert tx.state == "aborted"
    assert_untouched(cat, before)
    tx = cat.transaction(idempotency_key="once")
    _op_upsert_last(tx)
    _op_merge_parts(tx)
    tx.table(SUMS).upsert(rows([1], [2**63 - 1]))  # refused when it lands
    with pytest.raises(MereError):
        tx.commit()
    assert tx.state == "aborted"
    with pytest.raises(InvalidInput):
        tx.commit()
    assert_untouched(cat, before)
    # the key of a transaction that failed is free: a rerun commits
    with cat.transaction(idempotency_key="once") as again:
        assert not again.already_committed
        _op_upsert_last(again)
    assert cat.table(LAST).version == before[LAST][0] + 1


@BACKENDS
def test_a_failed_operation_leaves_no_trace_in_its_share(cat: mere.Catalog) -> None:
    """An operation that raises is not part of the transaction: committing the rest lands the rest."""
    make_tables(cat)
    tx = cat.transaction()
    _op_delete_update(tx)
    for bad in ("column", "type", "filter", "merge", "update_key", "null_key"):
        with pytest.raises(MereError):
            BAD_OPS[bad][0](tx)
    _op_upsert_last(tx)
    _op_sum(tx)
    _op_merge_parts(tx)
    tx.commit()
    want = model_after_good_mix()
    assert sorted_rows(cat.table(LAST).to_arrow()) == want[LAST]
    assert sorted_rows(cat.table(SUMS).to_arrow()) == want[SUMS]
    assert sorted_rows(cat.table(PARTS).to_arrow()) == want[PARTS]
    assert leftovers(cat) == {n: [] for n in NAMES}


# -- random sequences of transactions, some failing, against a dict model with history ---------------

IDS = st.integers(0, 7)
VALS = st.integers(-20, 20)

OP = st.one_of(
    st.tuples(st.just("last_upsert"), st.dictionaries(IDS, VALS, min_size=1, max_size=3)),
    st.tuples(st.just("last_delete"), VALS),
    st.tuples(st.just("last_update"), st.lists(IDS, min_size=1, max_size=3, unique=True), VALS),
    st.tuples(st.just("last_merge"), st.dictionaries(IDS, VALS, min_size=1, max_size=3)),
    st.tuples(st.just("sums_upsert"), st.dictionaries(IDS, VALS, min_size=1, max_size=3)),
    st.tuples(st.just("sums_blind_delete"), st.lists(IDS, min_size=1, max_size=2, unique=True)),
    st.tuples(
        st.just("parts_upsert"),
        st.dictionaries(IDS, st.tuples(VALS, st.sampled_from(["a", "b", "c"])), min_size=1, max_size=3),
    ),
    st.tuples(st.just("parts_delete"), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("logs_append"), st.lists(VALS, min_size=1, max_size=3)),
)
READS = {"last_delete", "last_update", "last_merge", "parts_delete"}
FAILS = st.sampled_from(["none", "none", "user", "column", "type", "filter", "overflow"])


def _apply(tx: Any, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "last_upsert":
        tx.table(LAST).upsert(rows(list(op[1]), list(op[1].values())))
    elif kind == "last_delete":
        tx.table(LAST).delete(f"v < {op[1]}")
    elif kind == "last_update":
        tx.table(LAST).update({"v": f"v + {op[2]}"}, where=f"id in ({', '.join(map(str, op[1]))})")
    elif kind == "last_merge":
        src = rows(list(op[1]), list(op[1].values()))
        tx.table(LAST).merge(src).when_matched_update(
            set={"v": "t.v + s.v"}
        ).when_not_matched_insert_all().execute()
    elif kind == "sums_upsert":
        tx.table(SUMS).upsert(rows(list(op[1]), list(op[1].values())))
    elif kind == "sums_blind_delete":
        tx.table(SUMS).delete(pa.table({"id": pa.array(op[1], pa.int64())}))
    elif kind == "parts_upsert":
        ids = list(op[1])
        tx.table(PARTS).upsert(prows(ids, [op[1][i][0] for i in ids], [op[1][i][1] for i in ids]))
    elif kind == "parts_delete":
        tx.table(PARTS).delete(f"p = '{op[1]}'")
    else:
        tx.table(LOGS).append(rows([len(op[1])] * len(op[1]), op[1]))


def _model_apply(m: dict[str, Any], op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "last_upsert":
        m[LAST].update(op[1])
    elif kind == "last_delete":
        m[LAST] = {k: v for k, v in m[LAST].items() if not v < op[1]}
    elif kind == "last_update":
        for k in op[1]:
            if k in m[LAST]:
                m[LAST][k] += op[2]
    elif kind == "last_merge":
        for k, v in op[1].items():
            m[LAST][k] = m[LAST][k] + v if k in m[LAST] else v
    elif kind == "sums_upsert":
        for k, v in op[1].items():
            m[SUMS][k] = m[SUMS].get(k, 0) + v
    elif kind == "sums_blind_delete":
        for k in op[1]:
            m[SUMS].pop(k, None)
    elif kind == "parts_upsert":
        m[PARTS].update(op[1])
    elif kind == "parts_delete":
        m[PARTS] = {k: vp for k, vp in m[PARTS].items() if vp[1] != op[1]}
    else:
        m[LOGS] = sorted(m[LOGS] + [(len(op[1]), v) for v in op[1]])


def _model_rows(m: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        LAST: sorted(m[LAST].items()),
        SUMS: sorted(m[SUMS].items()),
        PARTS: sorted((k, v, p) for k, (v, p) in m[PARTS].items()),
        LOGS: sorted(m[LOGS]),
    }


@settings(max_examples=10, deadline=None)
@given(
    txs=st.lists(
        st.tuples(st.lists(OP, min_size=1, max_size=5), FAILS, st.integers(0, 5)), min_size=1, max_size=5
    )
)
def test_random_transactions_with_failures_match_a_model_and_its_history(
    tmp_path_factory: pytest.TempPathFactory, txs: list[Any]
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("w")))
    make_tables(cat)
    m: dict[str, Any] = {
        LAST: {1: 10, 2: 20, 3: 30},
        SUMS: {1: 5, 2: 5},
        PARTS: {1: (1, "a"), 2: (2, "b"), 3: (3, "a")},
        LOGS: [(1, 7), (1, 8)],
    }
    history: dict[str, dict[int, list[tuple[Any, ...]]]] = {n: {} for n in NAMES}
    for n, r in _model_rows(m).items():
        history[n][cat.table(n).version] = r
    for ops, fail, at in txs:
        # reads before writes, and one read per table (reads all see the transaction's start: see the
        # xfails below for what two reads of one table do)
        seen: set[str] = set()
        kept = []
        for o in ops:
            table = o[0].split("_")[0]
            if o[0] in READS and table in seen:
                continue
            if o[0] in READS:
                seen.add(table)
            kept.append(o)
        ops = sorted(kept, key=lambda o: o[0] not in READS)
        seq: list[Any] = list(ops)
        if fail != "none":
            seq.insert(min(at, len(seq)), ("FAIL", fail))
        before = state(cat)
        try:
            with cat.transaction() as tx:
                for op in seq:
                    if op[0] == "FAIL":
                        BAD_OPS[op[1]][0](tx)
                    else:
                        _apply(tx, op)
        except (Boom, MereError):
            assert fail != "none"
            assert_untouched(cat, before)
            continue
        for op in ops:
            _model_apply(m, op)
        want = _model_rows(m)
        for n in NAMES:
            t = cat.table(n)
            assert sorted_rows(t.to_arrow()) == want[n], n
            history[n][t.version] = want[n]
    # time travel to every version the model saw
    for n in NAMES:
        t = cat.table(n)
        for version, want_rows in history[n].items():
            assert sorted_rows(t.scan(version=version).to_arrow()) == want_rows, (n, version)
    assert leftovers(cat) == {n: [] for n in NAMES}


# -- two reads of one table in one transaction ---------------------------------------------------------
# Each share's reads see the table as of the transaction's start and a read after an upsert/append is
# refused (InvalidInput) for that reason. A read after another read-and-write change (delete, update,
# MERGE) is neither refused nor shown that change: the later change's write lands over the earlier
# one. Either outcome below is correct: the refusal (nothing committed), or the sequential result.


def _sequential_or_refused(cat: mere.Catalog, body: Callable[[Any], Any], want: dict[int, int]) -> None:
    make_tables(cat)
    before = state(cat)
    try:
        with cat.transaction() as tx:
            body(tx.table(LAST))
            tx.table(SUMS).upsert(rows([1], [1]))
    except InvalidInput:
        assert_untouched(cat, before)
        return
    assert dict(sorted_rows(cat.table(LAST).to_arrow())) == want


def test_delete_then_update_of_the_same_row_does_not_resurrect_it(local_cat: mere.Catalog) -> None:
    _sequential_or_refused(
        local_cat,
        lambda s: s.delete("id = 2").update({"v": "v + 1"}, where="id = 2"),
        {1: 10, 3: 30},
    )


def test_two_updates_of_one_row_in_a_transaction_both_count(local_cat: mere.Catalog) -> None:
    _sequential_or_refused(
        local_cat,
        lambda s: s.update({"v": "v + 1"}, where="id = 2").update({"v": "v + 1"}, where="id = 2"),
        {1: 10, 2: 22, 3: 30},
    )


def test_update_then_delete_by_the_new_value(local_cat: mere.Catalog) -> None:
    _sequential_or_refused(
        local_cat,
        lambda s: s.update({"v": "v - 100"}, where="id = 2").delete("v < 0"),
        {1: 10, 3: 30},
    )


def test_delete_after_a_merge_insert_sees_it_or_is_refused(local_cat: mere.Catalog) -> None:
    _sequential_or_refused(
        local_cat,
        lambda s: (
            s.merge(rows([4], [-1])).when_not_matched_insert_all().execute(),
            s.delete("v < 0"),
        ),
        {1: 10, 2: 20, 3: 30},
    )


def test_an_upsert_then_a_read_is_refused_and_commits_nothing(local_cat: mere.Catalog) -> None:
    make_tables(local_cat)
    before = state(local_cat)
    with pytest.raises(InvalidInput, match="before the writes"), local_cat.transaction() as tx:
        tx.table(SUMS).upsert(rows([1], [1]))
        tx.table(LAST).upsert(rows([4], [1])).update({"v": "v + 100"}, where="id = 4")
    assert_untouched(local_cat, before)


@BACKENDS
def test_odd_read_points(cat: mere.Catalog) -> None:
    make_tables(cat)
    future = cat.snapshot(as_of=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    assert future.versions == cat.snapshot().versions
    past = cat.snapshot(as_of=dt.datetime(2000, 1, 1))
    assert past.versions == {}
    with pytest.raises(NoSuchTable):
        past.table(LAST)


@pytest.mark.parametrize(
    "catalog_url",
    [
        pytest.param("sqlite", id="sqlite"),
        pytest.param(
            "postgres",
            id="postgres",
            marks=pytest.mark.postgres,
        ),
    ],
    indirect=True,
)
def test_a_long_key_commits_or_is_refused_up_front(cat: mere.Catalog) -> None:
    make_tables(cat)
    before = state(cat)
    key = "k" * 5000
    try:
        tx = cat.transaction(idempotency_key=key)
    except InvalidInput:
        assert_untouched(cat, before)
        return
    _op_upsert_last(tx)
    _op_sum(tx)
    try:
        tx.commit()
    except MereError as e:
        assert_untouched(cat, before)  # at least nothing landed
        raise AssertionError(f"refused only at commit: {type(e).__name__}") from e
    with cat.transaction(idempotency_key=key) as again:
        assert again.already_committed
        _op_upsert_last(again)
        _op_sum(again)
    assert cat.table(LAST).version == before[LAST][0] + 1


@BACKENDS
def test_writes_compaction_and_expire_beside_an_open_transaction_rebase_its_reads(cat: mere.Catalog) -> None:
    make_tables(cat)
    tx = cat.transaction()
    tx.table(LAST).update({"v": "v + 1"}, where="id <= 3")
    tx.table(PARTS).delete("p = 'a'")
    tx.table(SUMS).upsert(rows([1], [1]))
    for i in range(3):
        cat.table(LAST).upsert(rows([1], [100 + i]))
        cat.table(PARTS).upsert(prows([5], [5], ["a"]))
    for n in (LAST, PARTS):
        cat.table(n).compact()
        assert cat.table(n).expire(older_than=dt.timedelta(0), dry_run=False)  # its read version's files go
    results = tx.commit()
    assert len({r.committed_at for r in results.values()}) == 1
    assert dict(sorted_rows(cat.table(LAST).to_arrow())) == {1: 103, 2: 21, 3: 31}
    assert sorted_rows(cat.table(PARTS).to_arrow()) == [(2, 2, "b")]
    assert dict(sorted_rows(cat.table(SUMS).to_arrow())) == {1: 6, 2: 5}
    assert leftovers(cat) == {n: [] for n in NAMES}


def test_two_deletes_of_a_table_without_key_are_sequential_or_refused(local_cat: mere.Catalog) -> None:
    """Deletes of a table without key rewrite whole files, each as of the transaction's start: two of them
    must not both land their rewrite of one file (rows the other deleted would come back)."""
    t = local_cat.create_table("t50.nokey", pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3], "v": [10, 20, 30]}))
    before = (t.version, sorted_rows(t.to_arrow()))
    try:
        with t.transaction() as tx:
            tx.delete("id = 1")
            tx.delete("id = 2")
    except InvalidInput:
        assert (t.refresh().version, sorted_rows(t.to_arrow())) == before
        return
    assert sorted_rows(t.refresh().to_arrow()) == [(3, 30)]
