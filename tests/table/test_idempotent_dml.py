"""Idempotent DML: DELETE, UPDATE, OVERWRITE, TRUNCATE, MERGE (local and staged shares) and transactions
with an ``idempotency_key`` commit at most once.

* Every DML run twice with one key: one version, the same result (``already_committed`` on the replay),
  and the replay changes nothing, even after another write that a second run would act on (the replay
  would delete, increment or replace rows) and writes no file.
* Different keys: two versions. The same key with other content: the first commit's result (the key
  names the work, as for upserts). A MERGE whose key names a commit that was not a MERGE: InvalidInput.
* Bad keys: InvalidInput, nothing committed, no file left (Hypothesis draws them).
* Races: a commit with the key that lands after a call looked the key up (inside the catalog transaction)
  makes the call return that commit and delete its own files; handles racing with one key commit once.
* A failed DML or one that changes nothing records no key.
* A commit whose outcome was unknown (CommitStateUnknown) retried with its key and the same staged
  messages: the landed commit comes back and keeps its files.
* Differential: random keyed DML against a twin table that applies each step only when its key is new
  (or absent): same rows after every step, and every replay returns the first result.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors
from mere.metadata import CommitResult
from mere.table.context import DataFiles
from mere.table.merge import MergeMetrics

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
OFF = {"compaction.auto": "off", "retention.max-age": "off"}  # no maintenance versions in the counts


def make(cat: mere.Catalog, name: str = "d.orders") -> mere.Table:
    t = cat.create_table(name, SCHEMA, primary_key=["id"], partition_by=["day"], buckets=2, properties=OFF)
    t.upsert(pa.table({"id": [1, 2, 3, 4], "day": ["a", "a", "b", "b"], "qty": [10, 20, 30, 40]}, SCHEMA))
    return t


def rows(t: mere.Table) -> list[dict[str, Any]]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])


def on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def orphans(t: mere.Table) -> set[str]:
    """Files under the table that no version lists (what a lost race or a replay must not leave)."""
    return on_disk(t) - t.catalog.sql.all_file_paths(t.record.id)


def reconnect(t: mere.Table) -> mere.Table:
    return mere.connect(t.catalog.storage.uri, catalog=t.catalog.sql.url).table(t.name)


def interleave(t: mere.Table) -> None:
    """A write between a call and its replay that a second run would act on (delete, increment, replace)."""
    t.upsert(pa.table({"id": [5], "day": ["b"], "qty": [50]}, SCHEMA))


def _merge(t: mere.Table, key: str | None) -> MergeMetrics:
    source = pa.table({"id": [1, 5], "day": ["a", "b"], "qty": [1, 5]}, SCHEMA)
    return (
        t.merge(source)
        .when_matched_update(set={"qty": "t.qty + s.qty"})
        .when_not_matched_insert_all()
        .execute(idempotency_key=key)
    )


def _shares(t: mere.Table) -> list[Any]:
    source = pa.table({"id": [2, 6], "day": ["a", "b"], "qty": [2, 6]}, SCHEMA)
    m = t.merge(source).when_matched_update(set={"qty": "t.qty * s.qty"}).when_not_matched_insert_all()
    return [m.stage(t.version)]


# (name, call(table, key)): each one a second run would tell apart from a replay after interleave().
DML: list[tuple[str, Callable[[mere.Table, Any], Any]]] = [
    ("delete_filter", lambda t, k: t.delete("qty >= 30", idempotency_key=k)),
    ("delete_keys", lambda t, k: t.delete(pa.table({"id": [3, 5], "day": ["b", "b"]}), idempotency_key=k)),
    ("update", lambda t, k: t.update({"qty": "qty + 1"}, "day = 'b'", idempotency_key=k)),
    (
        "overwrite",
        lambda t, k: t.overwrite(pa.table({"id": [9], "day": ["b"], "qty": [9]}), idempotency_key=k),
    ),
    (
        "overwrite_partition",
        lambda t, k: t.overwrite(
            pa.table({"id": [8], "day": ["b"], "qty": [8]}), partition={"day": "b"}, idempotency_key=k
        ),
    ),
    (
        "overwrite_dynamic",
        lambda t, k: t.overwrite(
            pa.table({"id": [7], "day": ["b"], "qty": [7]}), dynamic=True, idempotency_key=k
        ),
    ),
    ("truncate", lambda t, k: t.truncate(idempotency_key=k)),
    ("merge", _merge),
    ("commit_merge", lambda t, k: t.commit_merge(_shares(t), idempotency_key=k)),
    ("commit_shares", lambda t, k: t.commit(_shares(t), idempotency_key=k)),
    ("transaction", lambda t, k: _commit_transaction(t, k)),
]
NAMES = [name for name, _ in DML]


def _commit_transaction(t: mere.Table, key: Any) -> CommitResult:
    tx = t.transaction(key)
    tx.delete("qty >= 30")
    # Rows the delete left: an update of a row it deleted is refused (it would bring the row back).
    tx.update({"qty": "qty + 100"}, "day = 'a' AND qty < 30")
    return tx.commit()


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a replay read or wrote")


def same(first: Any, again: Any) -> bool:
    """The replay's result is the first one's, but for ``already_committed`` (and a MERGE's seconds).
    A write whose key a MERGE committed with returns that MERGE's commit."""
    if isinstance(first, MergeMetrics) and isinstance(again, CommitResult):
        return again.operation == "merge" and again.version == first.version
    if isinstance(first, MergeMetrics):
        return dataclasses.replace(again, seconds=first.seconds, already_committed=False) == first
    return dataclasses.replace(again, already_committed=False) == first


@pytest.mark.parametrize("name", NAMES)
def test_a_replay_returns_the_first_result_and_changes_nothing(
    local_cat: mere.Catalog, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    call = dict(DML)[name]
    t = make(local_cat)
    start = t.version
    first = call(t, "job-1")
    assert not first.already_committed and first.version == start + 1 == t.version
    interleave(t)
    before = (t.version, rows(t), on_disk(t))
    with monkeypatch.context() as m:
        if not name.startswith("commit_"):  # (those stage their shares before the call, as a driver does)
            # A replay tells early: it reads no row and writes no file.
            for cls, method in ((DataFiles, "write"), (DataFiles, "write_data"), (mere.Table, "scan")):
                m.setattr(cls, method, _refuse)
            m.setattr(mere.Table, "split_tables", _refuse)
        again = call(t, "job-1")
    assert again.already_committed and same(first, again), (first, again)
    assert (t.version, rows(t), on_disk(t)) == before  # not applied again, no file written or left
    # Another handle (another process) replays it the same way.
    other = reconnect(t)
    assert same(first, call(other, "job-1"))
    assert (t.version, rows(t), on_disk(t)) == before
    assert t.find_commit("job-1") is not None and t.find_commit("job-1").version == first.version


@pytest.mark.parametrize("name", NAMES)
def test_different_keys_make_two_versions(local_cat: mere.Catalog, name: str) -> None:
    call = dict(DML)[name]
    t = make(local_cat)
    first = call(t, "job-1")
    interleave(t)
    before = rows(t)
    second = call(t, "job-2")
    assert not second.already_committed and second.version == first.version + 2 == t.version
    assert rows(t) != before  # a second run does act on the interleaved write
    assert not orphans(t)


@pytest.mark.parametrize("name", NAMES)
def test_without_a_key_every_run_applies(local_cat: mere.Catalog, name: str) -> None:
    call = dict(DML)[name]
    t = make(local_cat)
    call(t, None)
    interleave(t)
    before = rows(t)
    assert not call(t, None).already_committed
    assert rows(t) != before


ODD_KEYS = st.one_of(
    st.just(""),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.binary(max_size=8),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@pytest.mark.parametrize("name", NAMES)
def test_bad_keys_are_invalid_input_and_commit_nothing(tmp_path: Path, name: str) -> None:
    call = dict(DML)[name]
    t = make(mere.connect(str(tmp_path / "wh")))
    before = (t.version, rows(t), on_disk(t))

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(key=ODD_KEYS)
    def check(key: Any) -> None:
        with pytest.raises(errors.InvalidInput, match="idempotency_key must be a non-empty string"):
            call(t, key)
        assert (t.version, rows(t), on_disk(t)) == before  # staged shares' files deleted too

    check()


@pytest.mark.parametrize("name", NAMES)
def test_the_same_key_with_other_content_returns_the_first_commit(local_cat: mere.Catalog, name: str) -> None:
    call = dict(DML)[name]
    t = make(local_cat)
    first = call(t, "job-1")
    before = (t.version, rows(t), on_disk(t))
    # The key alone names the work (the rule of upserts): an upsert, a delete of everything, a MERGE
    # that would delete every matched row, all with the key, are replays of the first commit.
    assert t.delete("TRUE", idempotency_key="job-1").version == first.version
    assert (
        t.upsert(pa.table({"id": [1], "day": ["a"], "qty": [0]}), idempotency_key="job-1").version
        == first.version
    )
    assert t.update({"qty": "0"}, idempotency_key="job-1").already_committed
    assert t.overwrite(
        pa.table({"id": [0], "day": ["a"], "qty": [0]}), idempotency_key="job-1"
    ).already_committed
    assert t.truncate(idempotency_key="job-1").already_committed
    with t.transaction("job-1") as tx:
        tx.delete("TRUE")
    assert (t.version, rows(t), on_disk(t)) == before
    if isinstance(first, MergeMetrics) or first.operation == "merge":
        m = (
            t.merge(pa.table({"id": [1, 2], "day": ["a", "a"]}))
            .when_matched_delete()
            .execute(idempotency_key="job-1")
        )
        assert m.already_committed and m.version == first.version
        assert (t.version, rows(t), on_disk(t)) == before


def test_a_merge_whose_key_names_another_kind_of_commit_is_refused(local_cat: mere.Catalog) -> None:
    t = make(local_cat)
    done = t.update({"qty": "qty + 1"}, idempotency_key="k")
    before = (t.version, rows(t), on_disk(t))
    m = t.merge(pa.table({"id": [1], "day": ["a"], "qty": [5]}, SCHEMA)).when_matched_update_all()
    with pytest.raises(
        errors.InvalidInput, match=f"names version {done.version}, a 'update' commit, not a MERGE"
    ):
        m.execute(idempotency_key="k")
    with pytest.raises(errors.InvalidInput, match="not a MERGE"):
        t.commit_merge(_shares(t), idempotency_key="k")
    assert (t.version, rows(t), on_disk(t)) == before
    assert m.execute(idempotency_key="k2").version == t.version  # the refused MERGE may run with its own key


def test_merge_metrics_of_a_replay_are_the_first_ones_from_the_summary(local_cat: mere.Catalog) -> None:
    t = make(local_cat)
    source = pa.table({"id": [1, 2, 3, 11], "day": ["a", "a", "b", "b"], "qty": [1, 0, 3, 11]}, SCHEMA)

    def run(key: str) -> MergeMetrics:
        return (
            t.merge(source)
            .when_matched_delete(condition="s.qty = 0")
            .when_matched_update(set={"qty": "t.qty + s.qty"}, condition="s.qty = 1")
            .when_matched_do_nothing()
            .when_not_matched_insert_all()
            .execute(idempotency_key=key)
        )

    first = run("m")
    assert (first.inserted, first.updated, first.deleted, first.unchanged) == (1, 1, 1, 1)
    assert first.rows_read == 3 and first.splits_read >= 1 and first.files >= 1
    again = run("m")
    assert same(first, again) and again.already_committed
    found = t.find_commit("m")
    assert found is not None and same(first, MergeMetrics.of_commit(t.name, found, first.seconds))
    assert found.rows_deleted == 1 and found.summary["unchanged"] == 1


def test_a_failed_dml_does_not_consume_its_key(local_cat: mere.Catalog) -> None:
    t = make(local_cat)
    version = t.version
    twice = pa.table({"id": [1, 1], "day": ["a", "a"], "qty": [1, 2]}, SCHEMA)
    with pytest.raises(errors.MergeConflict):
        t.merge(twice).when_matched_update_all().execute(idempotency_key="k")
    with pytest.raises(errors.FilterError):
        t.update({"qty": "nope + 1"}, idempotency_key="k")
    with pytest.raises(errors.InvalidInput):
        t.delete(None, idempotency_key="k")
    assert t.version == version and t.find_commit("k") is None and not orphans(t)
    assert _merge(t, "k").version == version + 1


def test_a_dml_that_changes_nothing_records_no_key(local_cat: mere.Catalog) -> None:
    """No version, so no key: a later run with the key is the first to commit (nothing was applied)."""
    t = make(local_cat)
    version = t.version
    assert t.delete("qty > 1000", idempotency_key="k").no_change
    assert t.update({"qty": "0"}, "qty > 1000", idempotency_key="k").no_change
    nothing = (
        t.merge(pa.table({"id": [1], "day": ["a"], "qty": [1]}, SCHEMA))
        .when_matched_do_nothing()
        .execute(idempotency_key="k")
    )
    assert nothing.version is None and not nothing.already_committed
    assert t.version == version and t.find_commit("k") is None
    assert t.delete("qty > 35", idempotency_key="k").version == version + 1
    assert t.delete("qty > 35", idempotency_key="k").already_committed


def test_a_replayed_transaction_reads_and_writes_nothing(
    local_cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make(local_cat)
    first = _commit_transaction(t, "tx")
    interleave(t)
    before = (t.version, rows(t), on_disk(t))
    from mere.table.ops import update as update_op
    from mere.table.ops import write as write_ops

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay ran an operation")

    monkeypatch.setattr(write_ops, "delete", refuse)
    monkeypatch.setattr(write_ops, "upsert", refuse)
    monkeypatch.setattr(update_op, "update", refuse)
    tx = t.transaction("tx")
    assert tx.already_committed() is not None
    tx.delete("qty >= 30")
    tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [0]}, SCHEMA))
    tx.update({"qty": "qty + 100"})
    assert same(first, tx.commit()) and (t.version, rows(t), on_disk(t)) == before
    with t.transaction("tx") as again:  # as a context manager too
        again.delete("qty >= 30")
    assert (t.version, rows(t), on_disk(t)) == before
    with pytest.raises(errors.InvalidInput, match="committed"):
        tx.delete("TRUE")  # a replayed transaction is over, as a committed one is


@pytest.mark.parametrize("name", NAMES)
def test_a_key_committed_by_another_handle_inside_the_commit_wins(cat: mere.Catalog, name: str) -> None:
    """The other handle commits with the key after this call looked it up, just before its catalog
    transaction: the catalog finds the key, this call returns that commit and deletes its own files."""
    call = dict(DML)[name]
    t = make(cat)
    other = reconnect(t)
    store = t.catalog.sql
    original = store.commit
    raced: list[Any] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(call(other, "job-1"))
        return original(*args, **kwargs)

    store.commit = racing  # type: ignore[method-assign]
    try:
        mine = call(t, "job-1")
    finally:
        del store.commit
    assert raced and not raced[0].already_committed
    assert mine.already_committed and same(raced[0], mine)
    assert t.version == raced[0].version == 2  # one commit with the key
    assert not orphans(t)  # this call's staged files are gone, none of them is referenced


@pytest.mark.parametrize("name", ["merge", "update", "commit_merge", "delete_filter"])
def test_handles_racing_with_one_key_commit_once(cat: mere.Catalog, name: str) -> None:
    call = dict(DML)[name]
    t = make(cat)
    handles = [reconnect(t) for _ in range(4)]
    barrier = threading.Barrier(len(handles))
    results: list[Any] = [None] * len(handles)

    def work(i: int) -> None:
        barrier.wait()
        try:
            results[i] = call(handles[i], "race")
        except BaseException as e:
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(handles))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(isinstance(r, BaseException) for r in results), results
    assert sum(not r.already_committed for r in results) == 1  # exactly one handle committed
    assert len({r.version for r in results}) == 1 and t.version == 2
    winner = next(r for r in results if not r.already_committed)
    assert all(same(winner, r) for r in results)
    assert not orphans(t)


# -- differential: keyed DML against a twin that applies each first key once ----------------------------

OPS = st.sampled_from(["delete", "update", "merge", "upsert", "overwrite"])
STEPS = st.lists(
    st.tuples(OPS, st.one_of(st.none(), st.sampled_from(["k1", "k2", "k3"])), st.integers(0, 5)),
    min_size=1,
    max_size=6,
)


def _apply(t: mere.Table, op: str, n: int, key: str | None) -> Any:
    if op == "delete":
        return t.delete(f"id % 3 = {n % 3}", idempotency_key=key)
    if op == "update":
        return t.update({"qty": f"qty + {n + 1}"}, f"id > {n}", idempotency_key=key)
    if op == "upsert":
        return t.upsert(
            pa.table({"id": [n, n + 1], "day": ["a", "b"], "qty": [n, n]}, SCHEMA), idempotency_key=key
        )
    if op == "overwrite":
        data = pa.table({"id": [n + 10], "day": ["a"], "qty": [n]}, SCHEMA)
        return t.overwrite(data, partition={"day": "a"}, idempotency_key=key)
    source = pa.table({"id": [n, n + 2], "day": ["a", "b"], "qty": [1, 2]}, SCHEMA)
    return (
        t.merge(source)
        .when_matched_update(set={"qty": "t.qty * 2 + s.qty"})
        .when_not_matched_insert_all()
        .execute(idempotency_key=key)
    )


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=STEPS)
def test_property_keyed_dml_applies_each_key_once(steps: list[tuple[str, str | None, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        cat = mere.connect(d)
        keyed, twin = make(cat, "d.keyed"), make(cat, "d.twin")
        first: dict[str, Any] = {}
        for op, key, n in steps:
            try:
                result = _apply(keyed, op, n, key)
            except errors.MereError as e:
                if key in first:  # a MERGE whose key names another kind of commit: refused, no change
                    assert op == "merge" and not isinstance(first[key], MergeMetrics)
                    assert isinstance(e, errors.InvalidInput) and "not a MERGE" in str(e)
                    assert rows(keyed) == rows(twin)
                    continue
                # Otherwise the twin fails alike, and a failure records no key.
                with pytest.raises(type(e)):
                    _apply(twin, op, n, None)
                continue
            if key is not None and key in first:
                assert result.already_committed and same(first[key], result)
            else:
                assert not result.already_committed
                _apply(twin, op, n, None)
                if key is not None and result.version is not None and not getattr(result, "no_change", False):
                    first[key] = result  # a commit records its key; a no-op records none
            assert rows(keyed) == rows(twin), (op, key, n)
        assert not orphans(keyed)


@pytest.mark.parametrize("kind", ["write", "merge_shares", "commit_merge"])
def test_a_commit_whose_outcome_was_unknown_is_retried_with_its_key(
    local_cat: mere.Catalog, kind: str
) -> None:
    """The catalog connection dies after the commit landed: CommitStateUnknown keeps the files, and the
    driver commits the same messages again with the key. The landed commit comes back and its files, which
    are the retry's files too, stay (deleting them as a replay's would break the table)."""
    t = make(local_cat)
    if kind == "write":
        staged = [t.stage(pa.table({"id": [1, 7], "day": ["a", "b"], "qty": [0, 7]}, SCHEMA))]
    else:
        staged = _shares(t)
    store = t.catalog.sql
    original = store.commit

    def lost(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise errors.CommitStateUnknown("the connection died during COMMIT")

    def commit() -> Any:
        if kind == "commit_merge":
            return t.commit_merge(staged, idempotency_key="job")
        return t.commit(staged, idempotency_key="job")

    store.commit = lost  # type: ignore[method-assign]
    try:
        with pytest.raises(errors.CommitStateUnknown):
            commit()
    finally:
        del store.commit
    assert t.version == 2
    landed = rows(t)  # the files are there: the table reads
    again = commit()
    assert again.already_committed and again.version == 2 == t.version
    assert rows(t) == landed and not orphans(t)
    assert {f.path for s in staged for f in s.files} <= on_disk(t)
    t.scan().to_arrow()
