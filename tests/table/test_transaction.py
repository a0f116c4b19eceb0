"""Transactions: several changes commit as one version or not at all, checked against a dict model."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mere
from mere import errors
from mere.spec import default_properties
from mere.table.context import TableContext
from mere.table.ops import write as write_ops
from mere.table.write_checks import WriteChecks

ORDERS = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
EVENTS = pa.schema([("day", pa.string()), ("msg", pa.string())])


def _orders(cat: mere.Catalog, name: str = "s.orders", **kwargs: Any) -> mere.Table:
    return cat.create_table(name, ORDERS, primary_key="id", buckets=2, **kwargs)


def _state(t: mere.Table) -> dict[int, tuple[str, int]]:
    return {r["id"]: (r["day"], r["qty"]) for r in t.to_arrow().to_pylist()}


def _files_on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def test_replacing_a_partition_is_one_version(cat: mere.Catalog) -> None:
    log = cat.create_table("s.events", EVENTS, partition_by="day")
    log.append(pa.table({"day": ["a", "a", "b"], "msg": ["x", "y", "z"]}))
    with log.transaction() as tx:
        tx.delete("day = 'a'")
        tx.append(pa.table({"day": ["a"], "msg": ["fresh"]}))
    assert log.version == 2
    assert sorted(r["msg"] for r in log.to_arrow().to_pylist()) == ["fresh", "z"]
    snap = log.current_snapshot()
    assert snap.operation == "transaction" and snap.summary["operations"] == ["delete", "append"]
    assert sorted(r["msg"] for r in log.scan(version=1).to_arrow().to_pylist()) == ["x", "y", "z"]


def test_changes_in_order_later_wins(cat: mere.Catalog) -> None:
    t = _orders(cat)
    t.upsert(pa.table({"id": [1, 2, 3], "day": ["a", "a", "b"], "qty": [1, 2, 3]}))
    with t.transaction() as tx:
        tx.delete("qty >= 2")  # reads the table: first
        tx.upsert(pa.table({"id": [2, 4], "day": ["a", "b"], "qty": [20, 40]}))
        tx.delete(pa.table({"id": [4], "day": ["b"]}))  # given keys: anywhere
        tx.upsert(pa.table({"id": [5], "day": ["c"], "qty": [5]}))
    assert t.version == 2
    assert _state(t) == {1: ("a", 1), 2: ("a", 20), 5: ("c", 5)}
    result = t.history()[-1]
    assert result.summary["operations"] == ["delete", "upsert", "delete", "upsert"]


def test_a_failing_block_commits_nothing_and_leaves_no_files(cat: mere.Catalog) -> None:
    t = _orders(cat)
    t.upsert(pa.table({"id": [1], "day": ["a"], "qty": [1]}))
    files = _files_on_disk(t)
    with pytest.raises(RuntimeError, match="boom"), t.transaction() as tx:
        tx.upsert(pa.table({"id": [2], "day": ["a"], "qty": [2]}))
        tx.delete(pa.table({"id": [1], "day": ["a"]}))
        raise RuntimeError("boom")
    assert t.version == 1 and _state(t) == {1: ("a", 1)}
    assert _files_on_disk(t) == files
    # A bad change inside the block: typed error, nothing committed, nothing left behind.
    with pytest.raises(errors.SchemaMismatch), t.transaction() as tx:
        tx.upsert(pa.table({"id": [3], "day": ["a"], "qty": [3]}))
        tx.upsert(pa.table({"id": [4], "day": ["a"], "qty": ["four"]}))
    assert t.version == 1 and _files_on_disk(t) == files


def test_misuse_is_a_typed_error(cat: mere.Catalog) -> None:
    t = _orders(cat)
    tx = t.transaction()
    tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [1]}))
    with pytest.raises(errors.InvalidInput, match="before the writes"):
        tx.delete("qty > 0")
    with pytest.raises(errors.InvalidInput, match="before the writes"):
        tx.overwrite(pa.table({"id": [9], "day": ["z"], "qty": [9]}))
    with pytest.raises(errors.InvalidInput, match="no primary key"):
        cat.create_table("s.log", EVENTS).transaction().upsert(pa.table({"day": ["a"], "msg": ["m"]}))
    with pytest.raises(errors.InvalidInput):
        tx.delete(None)
    assert tx.commit().version == 1
    with pytest.raises(errors.InvalidInput, match="committed"):
        tx.upsert(pa.table({"id": [2], "day": ["a"], "qty": [2]}))
    with pytest.raises(errors.InvalidInput, match="committed"):
        tx.commit()
    empty = t.transaction()
    assert empty.commit().files_added == 0  # an empty transaction is a version with no change
    aborted = t.transaction()
    aborted.upsert(pa.table({"id": [3], "day": ["a"], "qty": [3]}))
    aborted.abort()
    with pytest.raises(errors.InvalidInput, match="aborted"):
        aborted.commit()
    assert 3 not in _state(t)


def test_sums_of_one_transaction_are_checked_together(local_cat: mere.Catalog) -> None:
    t = _orders(local_cat, merge_operators={"qty": "sum"})
    t.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**62]}))
    with pytest.raises(errors.SumOverflow), t.transaction() as tx:
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**61]}))
        tx.upsert(
            pa.table({"id": [1], "day": ["a"], "qty": [2**61]})
        )  # each fits alone; together they overflow
    assert _state(t) == {1: ("a", 2**62)}
    with t.transaction() as tx:  # a delete earlier in the transaction starts the key afresh
        tx.delete(pa.table({"id": [1], "day": ["a"]}))
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**62]}))
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**61]}))
    assert _state(t) == {1: ("a", 2**62 + 2**61)}
    with t.transaction() as tx:  # a delete by predicate restarts the keys it deletes, for the checks too
        tx.delete("qty > 10")
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**62]}))
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**61]}))
    assert _state(t) == {1: ("a", 2**62 + 2**61)}
    with pytest.raises(errors.SumOverflow), t.transaction() as tx:
        tx.delete("qty < 0")  # deletes nothing: the key keeps its sum
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**62]}))
    with pytest.raises(errors.InvalidInput, match="separately"), t.transaction() as tx:
        tx.overwrite(pa.table({"id": [1], "day": ["a"], "qty": [1]}))
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [1]}))
    assert _state(t) == {1: ("a", 2**62 + 2**61)}


def test_properties_change_with_data_in_one_version(local_cat: mere.Catalog) -> None:
    t = _orders(local_cat)
    with t.transaction() as tx:
        tx.set_properties({"team": "sales"})
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [1]}))
    assert t.version == 1 and t.properties == default_properties(True) | {"team": "sales"}
    assert local_cat.table("s.orders").properties == default_properties(True) | {"team": "sales"}
    with pytest.raises(errors.InvalidInput), t.transaction() as tx:
        tx.upsert(pa.table({"id": [2], "day": ["a"], "qty": [2]}))
        tx.set_properties({"write.compression": "nope"})
    assert t.version == 1


def test_idempotent_transaction(local_cat: mere.Catalog) -> None:
    t = _orders(local_cat)
    for _ in range(2):
        with t.transaction(idempotency_key="batch-7") as tx:
            tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [1]}))
            tx.upsert(pa.table({"id": [2], "day": ["a"], "qty": [2]}))
    assert t.version == 1 and t.find_commit("batch-7").version == 1
    assert len(t.inspect.files()) == len(_files_on_disk(t))  # the repeat's files were removed


def test_a_predicate_delete_in_a_transaction_is_evaluated_again_after_a_race(
    cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _orders(cat)
    t.upsert(pa.table({"id": [1, 2], "day": ["a", "a"], "qty": [100, 100]}))
    other = mere.connect(cat.storage.uri, catalog=cat.sql.url).table("s.orders")
    original = write_ops.read_markers
    raced: list[Any] = []

    def racing(ctx: TableContext, keys: pa.Table, checks: WriteChecks) -> Any:
        if not raced:
            raced.append(other.upsert(pa.table({"id": [1], "day": ["a"], "qty": [3]})))
        return original(ctx, keys, checks)

    monkeypatch.setattr(write_ops, "read_markers", racing)
    with t.transaction() as tx:
        tx.delete("qty > 10")
        tx.upsert(pa.table({"id": [7], "day": ["b"], "qty": [7]}))
    monkeypatch.undo()
    assert raced and _state(t) == {1: ("a", 3), 7: ("b", 7)}
    assert t.version == 3


_names = itertools.count()
_op = st.one_of(
    st.tuples(
        st.just("upsert"),
        st.lists(
            st.tuples(st.integers(0, 6), st.sampled_from("ab"), st.integers(-5, 5)), min_size=1, max_size=4
        ),
    ),
    st.tuples(st.just("delete_keys"), st.lists(st.integers(0, 6), max_size=3)),
    st.tuples(st.just("delete_where"), st.integers(-5, 5)),
    st.tuples(st.just("overwrite_day"), st.sampled_from("ab")),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(transactions=st.lists(st.lists(_op, min_size=1, max_size=4), min_size=1, max_size=4))
# Automatic compaction folds the split after the second transaction: a version that changes no row.
@example(
    transactions=[
        [("upsert", [(0, "a", 0)])] * 4,
        [("delete_where", -1), *[("upsert", [(0, "a", 0)])] * 3],
    ]
)
def test_transactions_match_a_dict_model(local_cat: mere.Catalog, transactions: list[list[Any]]) -> None:
    """Keys are partitioned by id parity (so a key lives in one day); reads come first in each transaction."""
    t = local_cat.create_table(f"s.m{next(_names)}", ORDERS, primary_key="id", partition_by="day", buckets=2)
    model: dict[int, tuple[str, int]] = {}
    versions = 0
    for ops in transactions:
        trial = dict(model)
        wrote = False
        before = t.version
        with t.transaction() as tx:
            for kind, arg in ops:
                if kind == "upsert":
                    rows = [(k, "ab"[k % 2], q) for k, _, q in arg]
                    tx.upsert(
                        pa.table(
                            {
                                "id": [r[0] for r in rows],
                                "day": [r[1] for r in rows],
                                "qty": [r[2] for r in rows],
                            }
                        )
                    )
                    trial.update({k: (d, q) for k, d, q in rows})
                    wrote = True
                elif kind == "delete_keys":
                    tx.delete(pa.table({"id": pa.array(arg, pa.int64()), "day": ["ab"[k % 2] for k in arg]}))
                    for k in arg:
                        trial.pop(k, None)
                elif wrote:
                    with pytest.raises(errors.InvalidInput):
                        tx.delete(f"qty > {arg}") if kind == "delete_where" else tx.overwrite(
                            pa.table({"id": [0], "day": [arg], "qty": [0]}, schema=ORDERS), {"day": arg}
                        )
                elif kind == "delete_where":
                    tx.delete(f"qty > {arg}")
                    trial = {k: v for k, v in trial.items() if not v[1] > arg}
                else:
                    tx.overwrite(
                        pa.table(
                            {
                                "id": pa.array([], pa.int64()),
                                "day": pa.array([], pa.string()),
                                "qty": pa.array([], pa.int64()),
                            }
                        ),
                        {"day": arg},
                    )
                    trial = {k: v for k, v in trial.items() if v[0] != arg}
        # A transaction that changed rows made one version; one with nothing to write or remove made none.
        # Automatic compaction may follow it (versions that change no row).
        made = [h.operation for h in t.history() if h.version > before]
        own = [op for op in made if op != "compact"]
        assert made[len(own) :] == ["compact"] * (len(made) - len(own))
        assert len(own) == 1 if trial != model else len(own) in (0, 1)
        versions += t.version - before
        model = trial
        assert _state(t) == model
    assert t.version == versions
    referenced = {p for v in range(t.version + 1) for p in t.inspect.files(v).column("path").to_pylist()}
    assert _files_on_disk(t) <= referenced, "a transaction left files no version references"


def test_checks_follow_a_delete_evaluated_again_after_a_race(
    local_cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race makes key 1 no longer match the delete: the upsert then adds to its sum and must be refused."""
    t = _orders(local_cat, merge_operators={"qty": "sum"})
    t.upsert(pa.table({"id": [1], "day": ["a"], "qty": [100]}))
    other = local_cat.table("s.orders")
    original = write_ops.read_markers
    raced: list[Any] = []

    def racing(ctx: TableContext, keys: pa.Table, checks: WriteChecks) -> Any:
        if not raced:
            raced.append(other.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**62 - 100]})))
        return original(ctx, keys, checks)

    monkeypatch.setattr(write_ops, "read_markers", racing)
    with pytest.raises(errors.SumOverflow), t.transaction() as tx:
        tx.delete("qty > 10 and qty < 1000")
        tx.upsert(pa.table({"id": [1], "day": ["a"], "qty": [2**62]}))
    monkeypatch.undo()
    assert raced and _state(t) == {1: ("a", 2**62)}  # readable, unchanged by the refused transaction


def test_concurrent_property_and_column_changes_keep_each_others_properties(tmp_path: Path) -> None:
    """A spec change writes the properties at its base with its own updates applied: a handle whose view
    of the properties is stale must not write that view back over a concurrent commit's (lost update)."""
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("n.t", pa.schema([pa.field("k", pa.int64(), nullable=False)]), primary_key="k")
    stale, other = cat.table("n.t"), cat.table("n.t")
    tx = stale.transaction()
    tx.set_properties({"custom.y": "2", "write.row-group-rows": "1000"})
    other.set_properties({"custom.x": "1", "write.row-group-rows": "500"})
    assert tx.commit().version == 2  # lost the race to version 1, retried on top of it
    t.refresh()
    assert t.properties["custom.x"] == "1" and t.properties["custom.y"] == "2"
    assert t.properties["write.row-group-rows"] == "1000"  # the same key: the later commit's value
    # A column change from a handle that has not seen version 3's property keeps it too.
    evolving = cat.table("n.t")
    t.set_properties({"custom.z": "3", "custom.x": None})
    evolving.add_column("v", pa.int64())
    t.refresh()
    assert "v" in t.schema.names
    assert t.properties["custom.z"] == "3" and "custom.x" not in t.properties
    assert t.properties["custom.y"] == "2"
