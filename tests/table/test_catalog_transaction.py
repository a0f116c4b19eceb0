"""Catalog transactions (several tables, one commit each, all or none) and catalog snapshots (one read
point for every table), on SQLite and PostgreSQL (``cat`` runs on both)."""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import CatalogError, CommitConflict, InvalidInput, MereError, NoSuchTable, TableExists

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
A, B, C = "sales.orders", "sales.lines", "sales.notes"


def rows(ids: list[int], vals: list[int] | None = None) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(vals if vals is not None else ids, pa.int64())}
    )


def content(t: Any) -> dict[int, int]:
    data = t.to_arrow()
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def make(cat: mere.Catalog, *names: str) -> list[mere.Table]:
    return [cat.create_table(n, SCHEMA, primary_key="id", buckets=2) for n in names]


def test_changes_to_two_tables_land_together_as_one_version_each(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    with cat.transaction() as tx:
        tx.table(A).upsert(rows([1, 2]))
        tx.table(B).upsert(rows([10]))
        tx.table(B).upsert(rows([11]))
    assert a.version == b.version == 1
    assert tx.results[A].version == 1 and tx.results[B].version == 1
    # One commit time for the whole transaction.
    assert tx.results[A].committed_at == tx.results[B].committed_at
    assert content(a) == {1: 1, 2: 2} and content(b) == {10: 10, 11: 11}
    assert b.history()[-1].summary["rows"] == 2


def test_an_error_in_the_block_commits_nothing_and_deletes_the_files(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    with pytest.raises(RuntimeError), cat.transaction() as tx:
        tx.table(A).upsert(rows([1]))
        tx.table(B).upsert(rows([2]))
        raise RuntimeError("boom")
    assert tx.state == "aborted"
    assert a.version == b.version == 0
    assert a.cleanup(older_than=dt.timedelta(0)) == [] and b.cleanup(older_than=dt.timedelta(0)) == []


def test_a_failure_while_landing_the_second_table_rolls_back_the_first(
    cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make(cat, A, B)
    sql = cat.sql
    real = sql._land
    calls = []

    def land(conn: Any, request: Any, *args: Any) -> Any:
        calls.append(request.table_id)
        if len(calls) == 2:
            raise CatalogError("injected: the database failed between the tables")
        return real(conn, request, *args)

    monkeypatch.setattr(sql, "_land", land)
    with pytest.raises(CatalogError, match="injected"), cat.transaction() as tx:
        tx.table(A).upsert(rows([1]))
        tx.table(B).upsert(rows([2]))
    monkeypatch.undo()
    assert len(calls) == 2
    assert a.version == b.version == 0 and content(a) == {} and content(b) == {}
    assert a.cleanup(older_than=dt.timedelta(0)) == [] and b.cleanup(older_than=dt.timedelta(0)) == []


def test_every_operation_kind_in_one_transaction(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    a.upsert(rows([1, 2, 3]))
    b.upsert(rows([1, 2, 3]))
    with cat.transaction() as tx:
        oa = tx.table(A)
        oa.delete("id = 1").update({"v": "v * 10"}, where="id = 2").upsert(rows([4]))
        ob = tx.table(B)
        ob.merge(rows([3, 5], [30, 50])).when_matched_update_all().when_not_matched_insert_all().execute()
        ob.set_properties({"compaction.auto": "off"})
        tx.create_table(C, SCHEMA, primary_key="id").upsert(rows([7]))
    assert content(a) == {2: 20, 3: 3, 4: 4}
    assert content(b) == {1: 1, 2: 2, 3: 30, 5: 50}
    assert b.refresh().properties["compaction.auto"] == "off"
    assert content(cat.table(C)) == {7: 7}
    assert (a.version, b.version, cat.table(C).version) == (2, 2, 1)
    with cat.transaction() as tx:
        tx.table(A).overwrite(rows([9]))
        tx.table(B).truncate()
        with tx.table(C).evolve() as e:
            e.add_column("note", pa.string())
        tx.table(C).upsert(pa.table({"id": [8], "v": [8], "note": ["x"]}))
    assert content(a) == {9: 9} and content(b) == {}
    c = cat.table(C)
    assert c.schema.names == ["id", "v", "note"]
    assert c.to_arrow().sort_by("id").column("note").to_pylist() == [None, "x"]


def test_created_table_appears_only_with_the_commit(cat: mere.Catalog) -> None:
    (a,) = make(cat, A)
    with pytest.raises(RuntimeError), cat.transaction() as tx:
        tx.create_table(C, SCHEMA, primary_key="id").upsert(rows([1]))
        tx.table(A).upsert(rows([1]))
        assert not cat.exists(C)
        raise RuntimeError
    assert not cat.exists(C) and a.version == 0
    with cat.transaction() as tx:
        tx.create_table(C, SCHEMA, primary_key="id")  # no rows: the table alone
    assert cat.exists(C) and content(cat.table(C)) == {}
    with pytest.raises(TableExists), cat.transaction() as tx:
        tx.create_table(C, SCHEMA, primary_key="id")


def test_a_table_created_meanwhile_fails_the_whole_transaction(cat: mere.Catalog) -> None:
    (a,) = make(cat, A)
    tx = cat.transaction()
    tx.table(A).upsert(rows([1]))
    tx.create_table(C, SCHEMA, primary_key="id").upsert(rows([1]))
    cat.create_table(C, SCHEMA, primary_key="id")  # another writer wins the name
    with pytest.raises(TableExists):
        tx.commit()
    assert a.version == 0 and cat.table(C).version == 0


def test_idempotency_key_replays_every_table_and_writes_nothing(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    with cat.transaction(idempotency_key="batch-1") as tx:
        tx.table(A).upsert(rows([1]))
        tx.table(B).upsert(rows([2]))
    first = tx.results
    # Each table's version records the transaction's key.
    assert [s.idempotency_key for s in a.history() if s.version == 1] == ["batch-1"]
    assert [s.idempotency_key for s in b.history() if s.version == 1] == ["batch-1"]
    assert first[A].snapshot.idempotency_key == "batch-1"
    # A one-table commit under the same key finds that version (its key named one change already).
    assert a.upsert(rows([9]), idempotency_key="batch-1").already_committed
    with cat.transaction(idempotency_key="batch-1") as again:
        assert again.already_committed
        again.table(A).upsert(rows([100]))  # does nothing: the key's work landed
        again.table(B).upsert(rows([200]))
    assert {n: r.version for n, r in again.results.items()} == {n: r.version for n, r in first.items()}
    assert all(r.already_committed for r in again.results.values())
    assert a.version == b.version == 1 and content(a) == {1: 1}
    assert a.cleanup(older_than=dt.timedelta(0)) == []
    # The key names that set of tables: another set is refused, nothing committed.
    with (
        pytest.raises(InvalidInput, match="committed tables"),
        cat.transaction(idempotency_key="batch-1") as bad,
    ):
        bad.table(A)
        bad.table(C)
    with (
        pytest.raises(InvalidInput, match="committed tables"),
        cat.transaction(idempotency_key="batch-1") as bad,
    ):
        bad.table(A).upsert(rows([5]))
    assert a.version == b.version == 1


def test_the_same_key_racing_commits_once(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    first = cat.transaction(idempotency_key="k")
    second = cat.transaction(idempotency_key="k")  # both looked the key up before either landed
    for tx, n in ((first, 1), (second, 2)):
        tx.table(A).upsert(rows([n]))
        tx.table(B).upsert(rows([n]))
    r1 = first.commit()
    r2 = second.commit()
    assert all(r.already_committed for r in r2.values())
    assert {n: r.version for n, r in r1.items()} == {n: r.version for n, r in r2.items()}
    assert content(a) == {1: 1} and a.version == 1
    assert a.cleanup(older_than=dt.timedelta(0)) == [] and b.cleanup(older_than=dt.timedelta(0)) == []


def test_bad_input_is_typed_and_commits_nothing(cat: mere.Catalog, tmp_path: Path) -> None:
    a, b = make(cat, A, B)
    with pytest.raises(NoSuchTable), cat.transaction() as tx:
        tx.table(A).upsert(rows([1]))
        tx.table("sales.nope")
    with pytest.raises(InvalidInput):
        cat.transaction(idempotency_key="")
    with pytest.raises(InvalidInput), cat.transaction() as tx:
        tx.table("bad name!")
    # A table twice through different handles.
    other = cat.table(A)
    with pytest.raises(InvalidInput, match="another handle"), cat.transaction() as tx:
        tx.table(a).upsert(rows([1]))
        tx.table(other)
    # A share does not commit or abort alone; nesting is refused.
    with cat.transaction() as tx:
        share = tx.table(A).upsert(rows([1]))
        with pytest.raises(InvalidInput, match="catalog transaction"):
            share.commit()
    assert a.version == 1  # the catalog transaction did commit
    with pytest.raises(InvalidInput, match="committed"):
        share.upsert(rows([2]))  # use after commit
    with pytest.raises(InvalidInput, match="committed"):
        tx.table(B)
    with pytest.raises(InvalidInput, match="committed"):
        tx.commit()
    with pytest.raises(InvalidInput):
        tx.create_table(C, SCHEMA, primary_key="id")
    # A failing operation mid-transaction: nothing of the others lands.
    with pytest.raises(MereError), cat.transaction() as tx:
        tx.table(A).upsert(rows([5]))
        tx.table(B).upsert(pa.table({"id": [1], "nope": [1]}))
    assert (a.version, b.version) == (1, 0)
    with pytest.raises(InvalidInput):
        cat.snapshot(as_of="not a time")
    with pytest.raises(InvalidInput, match="no exist_ok"), cat.transaction() as tx:
        tx.create_table(C, SCHEMA, primary_key="id", exist_ok=True)
    assert not cat.exists(C)


def test_nested_transactions_are_refused_and_commit_nothing(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    with pytest.raises(InvalidInput, match="do not nest"), cat.transaction() as outer:
        outer.table(A).upsert(rows([1]))
        with cat.transaction() as inner:
            inner.table(B).upsert(rows([1]))
    assert outer.state == "aborted" and a.version == b.version == 0
    assert a.cleanup(older_than=dt.timedelta(0)) == [] and b.cleanup(older_than=dt.timedelta(0)) == []
    with cat.transaction() as again:  # the guard was released
        again.table(A).upsert(rows([1]))
    assert a.version == 1


def test_a_lost_race_rebases_every_table_and_rechecks_their_rules(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    a.upsert(rows([1, 2], [10, 20]))
    b.upsert(rows([1], [0]))
    tx = cat.transaction()
    # Read-modify-write on both tables (UPDATE reads rows: its recipe is evaluated again on a new base).
    tx.table(A).update({"v": "v - 5"}, where="id = 1")
    tx.table(B).update({"v": "v + 5"}, where="id = 1")
    a.update({"v": "v + 100"}, where="id = 1")  # a concurrent commit on A only
    tx.commit()
    assert content(a) == {1: 105, 2: 20} and content(b) == {1: 5}
    assert a.version == 3 and b.version == 2


def test_conflict_on_one_table_fails_all_when_retries_are_spent(cat: mere.Catalog) -> None:
    from mere.retry import RetryPolicy

    a, b = make(cat, A, B)
    a.upsert(rows([1]))
    tx = cat.transaction()
    tx.retries = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
    tx.table(A).update({"v": "v + 1"}, where="id = 1")
    tx.table(B).upsert(rows([1]))
    a.update({"v": "v + 100"}, where="id = 1")
    with pytest.raises(CommitConflict, match="catalog transaction"):
        tx.commit()
    assert b.version == 0 and content(a) == {1: 101}
    assert b.cleanup(older_than=dt.timedelta(0)) == []


def test_single_table_transaction_takes_merge_and_column_changes(cat: mere.Catalog) -> None:
    (a,) = make(cat, A)
    with a.transaction() as tx:
        tx.upsert(rows([1]))
        with pytest.raises(InvalidInput, match="first"):
            tx.evolve().add_column("x", pa.string()).commit()
    assert a.version == 1 and a.schema.names == ["id", "v"]
    with pytest.raises(InvalidInput, match="before the writes"), a.transaction() as tx:
        tx.upsert(rows([2]))
        tx.merge(rows([1], [7])).when_matched_update(set={"v": "s.v"}).execute()
    assert a.version == 1
    with a.transaction() as tx:
        with tx.evolve() as e:
            e.add_column("x", pa.string())
        m = tx.merge(rows([1], [7])).when_matched_update(set={"v": "s.v"}).execute()
        assert (m.updated, m.version) == (1, None)
        tx.upsert(pa.table({"id": [2], "v": [2], "x": ["y"]}))
    assert a.version == 2 and a.schema.names == ["id", "v", "x"]
    assert sorted(a.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 7, "x": None},
        {"id": 2, "v": 2, "x": "y"},
    ]


def test_snapshot_pins_every_table(cat: mere.Catalog) -> None:
    make(cat, A, B)
    with cat.transaction() as tx:
        tx.table(A).upsert(rows([1]))
        tx.table(B).upsert(rows([1]))
    snap = cat.snapshot()
    assert snap.versions == {A: 1, B: 1}
    with cat.transaction() as tx:
        tx.table(A).upsert(rows([2]))
        tx.table(B).upsert(rows([2]))
    assert content(snap.table(A)) == {1: 1} and content(snap.table(B)) == {1: 1}
    assert snap.table(A).scan(columns=["id"]).to_arrow().num_rows == 1
    with pytest.raises(InvalidInput):
        snap.table(A).scan(version=2)
    with pytest.raises(NoSuchTable):
        snap.table(C)
    assert A in snap and snap.tables() == [B, A]


def test_snapshot_as_of_keeps_a_transaction_together(cat: mere.Catalog) -> None:
    a, _ = make(cat, A, B)
    a.upsert(rows([1]))
    time.sleep(0.01)
    with cat.transaction() as tx:
        tx.table(A).upsert(rows([2]))
        tx.table(B).upsert(rows([2]))
    at = tx.results[A].committed_at
    before = cat.snapshot(as_of=at - dt.timedelta(microseconds=1))
    after = cat.snapshot(as_of=at)
    assert before.versions == {A: 1, B: 0} and after.versions == {A: 2, B: 1}
    assert content(before.table(B)) == {} and content(after.table(B)) == {2: 2}
    early = cat.snapshot(as_of=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert early.tables() == []


def test_commit_times_never_go_back_on_a_table(cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    import mere.catalog.sql as sqlmod

    a, _ = make(cat, A, B)
    with cat.transaction() as tx:
        tx.table(A).upsert(rows([1]))
        tx.table(B).upsert(rows([1]))
    landed = tx.results[A].committed_at
    monkeypatch.setattr(sqlmod, "now_micros", lambda: 1_000_000)  # a writer whose clock is far behind
    r = a.upsert(rows([2]))
    monkeypatch.undo()
    assert r.committed_at > landed
    # An as_of read at the transaction's time still sees both of its versions and not the later one.
    assert cat.snapshot(as_of=landed).versions == {A: 1, B: 1}


def test_adapters_take_a_snapshot(cat: mere.Catalog) -> None:
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table

    a, _ = make(cat, A, B)
    a.upsert(rows([1]))
    snap = cat.snapshot()
    a.upsert(rows([2]))
    con = duckdb.connect()
    register(con, "orders", a, snapshot=snap)
    assert con.execute("select count(*) from orders").fetchone() == (1,)
    assert scan_table(a, snapshot=snap).collect().height == 1
    assert isinstance(pl, object)
    with pytest.raises(InvalidInput, match="not both"):
        scan_table(a, snapshot=snap, version=1)


# -- the property: random multi-table transactions against a dict model ------------------------------

TABLES = [A, B, C]
keys = st.lists(st.integers(0, 12), min_size=1, max_size=6, unique=True)
op = st.one_of(
    st.tuples(st.just("upsert"), keys, st.integers(-50, 50)),
    st.tuples(st.just("delete_keys"), keys, st.just(0)),
    st.tuples(st.just("delete_where"), st.integers(0, 12), st.just(0)),
    st.tuples(st.just("overwrite"), keys, st.integers(-50, 50)),
    st.tuples(st.just("truncate"), st.just([]), st.just(0)),
)
READS = ("delete_where", "overwrite", "truncate")
transaction = st.tuples(
    st.dictionaries(st.sampled_from(TABLES), st.lists(op, min_size=1, max_size=3), min_size=1, max_size=3),
    st.sampled_from(["ok", "ok", "raise_in_block", "bad_op", "fail_landing"]),
)


def apply_model(model: dict[int, int], kind: str, ks: list[int], val: int) -> None:
    if kind == "upsert":
        model.update(dict.fromkeys(ks, val))
    elif kind == "delete_keys":
        for k in ks:
            model.pop(k, None)
    elif kind == "delete_where":
        for k in [k for k in model if k < ks]:  # type: ignore[operator]
            del model[k]
    elif kind == "overwrite":
        model.clear()
        model.update(dict.fromkeys(ks, val))
    elif kind == "truncate":
        model.clear()


def apply_share(share: Any, kind: str, ks: Any, val: int) -> None:
    if kind == "upsert":
        share.upsert(rows(ks, [val] * len(ks)))
    elif kind == "delete_keys":
        share.delete(pa.table({"id": pa.array(ks, pa.int64())}))
    elif kind == "delete_where":
        share.delete(f"id < {ks}")
    elif kind == "overwrite":
        share.overwrite(rows(ks, [val] * len(ks)))
    else:
        share.truncate()


def ordered(ops: list[tuple[str, Any, int]]) -> list[tuple[str, Any, int]]:
    """Reads see the table as of the start: one read at most, before the writes."""
    reads = [o for o in ops if o[0] in READS]
    return reads[:1] + [o for o in ops if o[0] not in READS]


@settings(max_examples=25, deadline=None)
@given(st.lists(transaction, min_size=1, max_size=5))
@example(  # eight upserts to one split: automatic compaction follows the third transaction
    [({"sales.orders": [("upsert", [0], 0)] * k}, "ok") for k in (2, 3, 3)]
)
def test_random_multi_table_transactions_match_a_dict_model(txs: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        cat = mere.connect(d)
        for n in TABLES:
            cat.create_table(n, SCHEMA, primary_key="id", buckets=2)
        model: dict[str, dict[int, int]] = {n: {} for n in TABLES}
        versions = dict.fromkeys(TABLES, 0)
        for changes, fate in txs:
            expected = {n: dict(m) for n, m in model.items()}
            sql = cat.sql
            real = sql._land
            if fate == "fail_landing":
                seen: list[int] = []

                def land(
                    conn: Any,
                    request: Any,
                    *args: Any,
                    seen: list[int] = seen,
                    n: int = len(changes),
                    real: Any = real,
                ) -> Any:
                    seen.append(1)
                    if len(seen) == n or len(seen) == 2:
                        raise RuntimeError("injected landing failure")
                    return real(conn, request, *args)

                sql._land = land  # type: ignore[method-assign]
            try:
                with cat.transaction() as tx:
                    for name, ops in changes.items():
                        share = tx.table(name)
                        for kind, ks, val in ordered(ops):
                            apply_share(share, kind, ks, val)
                            apply_model(expected[name], kind, ks, val)
                        if fate == "bad_op":
                            share.upsert(pa.table({"id": [1], "nope": [1]}))
                    if fate == "raise_in_block":
                        raise RuntimeError("user error")
                failed = False
            except (RuntimeError, MereError):
                failed = True
            finally:
                sql.__dict__.pop("_land", None)
            assert failed == (fate != "ok") or (fate == "fail_landing" and not failed)
            if not failed:
                for name, r in tx.results.items():
                    if not r.no_change:
                        versions[name] += 1
                        assert r.version == versions[name]
                model = expected
            for name in TABLES:  # automatic compaction may follow a transaction: versions that change no row
                t = cat.table(name)
                while versions[name] < t.version:
                    versions[name] += 1
                    assert t.snapshot(versions[name]).operation == "compact", (name, versions[name])
            snap = cat.snapshot()
            assert snap.versions == versions  # every table at the same transaction boundary
            for name in TABLES:
                assert content(snap.table(name)) == model[name], name
        for name in TABLES:
            assert cat.table(name).cleanup(older_than=dt.timedelta(0)) == []


def test_a_driver_commits_staged_writes_of_several_tables_in_one_transaction(cat: mere.Catalog) -> None:
    a, b = make(cat, A, B)
    # Workers stage (here: in this process; Spark tasks return the same picklable messages).
    staged_a = [a.stage(rows([1, 2])), a.stage(rows([3]))]
    staged_b = [b.stage(pa.table({"id": pa.array([9], pa.int64())}), "delete"), b.stage(rows([4]))]
    b.upsert(rows([9]))
    with cat.transaction(idempotency_key="job-1") as tx:
        tx.table(A).add_staged(staged_a)
        tx.table(B).add_staged(staged_b[:1]).add_staged(staged_b[1:])
    assert content(a) == {1: 1, 2: 2, 3: 3} and content(b) == {4: 4}
    assert (a.version, b.version) == (1, 2)
    # A retried driver: the key's commit is returned, the first commit's files stay, new ones go.
    again = [a.stage(rows([5]))]
    with cat.transaction(idempotency_key="job-1") as tx:
        tx.table(A).add_staged(again)
        tx.table(B).add_staged(staged_b[1:])
    assert all(r.already_committed for r in tx.results.values())
    assert content(a) == {1: 1, 2: 2, 3: 3} and content(b) == {4: 4}
    assert a.cleanup(older_than=dt.timedelta(0)) == [] and b.cleanup(older_than=dt.timedelta(0)) == []
    bad = [a.stage(rows([6]))]
    with pytest.raises(InvalidInput, match="another table"), cat.transaction() as tx:
        tx.table(B).add_staged(bad)
    with pytest.raises(InvalidInput), cat.transaction() as tx:
        tx.table(A).add_staged(bad[0])  # type: ignore[arg-type]
    share = a.merge(rows([1], [9])).when_matched_update_all().stage(a.version)
    with pytest.raises(InvalidInput, match="not \\['merge'\\]"), cat.transaction() as tx:
        tx.table(A).add_staged([share])
    assert a.version == 1 and a.cleanup(older_than=dt.timedelta(0)) == []
