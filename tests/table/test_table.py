"""Behaviour of one table, run against both catalog backends (SQLite and PostgreSQL) via the ``cat`` fixture.

Covers table creation and its argument checks, every write (upsert, append, delete, overwrite, CDC,
partial columns, merge operators), the all-or-nothing rule for bad input, reads (projection, filters,
every output format, explain, time travel, history), merge-on-read correctness around filters, the
on-disk layout (sorted LZ4 Parquet with statistics, Spark buckets, Hive directories, immutable files)
and a bucket larger than the read window.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors
from mere.table.ops import write as write_ops

D1, D2, D3 = "2026-11-21", "2026-11-22", "2026-11-23"

ORDERS = pa.schema(
    [
        ("order_id", pa.int64()),
        ("day", pa.string()),
        ("amount", pa.int64()),
        ("qty", pa.int64()),
        ("units", pa.int32()),
        ("note", pa.string()),
        ("op", pa.string()),
    ]
)
STORED = ORDERS.remove(ORDERS.get_field_index("op"))
TYPES = {f.name: f.type for f in ORDERS}

EVENTS = pa.schema([("ts", pa.int64()), ("day", pa.string()), ("amount", pa.int64()), ("note", pa.string())])

HYPOTHESIS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- helpers ---------------------------------------------------------------------------------------------


def make_orders(cat: mere.Catalog, name: str = "sales.orders", **overrides: Any) -> mere.Table:
    kwargs: dict[str, Any] = dict(
        primary_key=["order_id"],
        partition_by=["day"],
        buckets=8,
        merge_operators={"qty": "sum"},
        cdc_column="op",
    )
    kwargs.update(overrides)
    return cat.create_table(name, ORDERS, **kwargs)


def batch(**columns: list[Any]) -> pa.Table:
    """An input table with the orders column types."""
    return pa.table({name: pa.array(values, type=TYPES.get(name)) for name, values in columns.items()})


def order_rows(
    ids: list[int], day: str = D1, amount: int | None = 10, qty: int | None = 1, note: str | None = None
) -> pa.Table:
    n = len(ids)
    return batch(
        order_id=ids, day=[day] * n, amount=[amount] * n, qty=[qty] * n, units=[1] * n, note=[note] * n
    )


def sort_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((v is None, v) for v in row.values())


def read(t: mere.Table | mere.Scan, **kwargs: Any) -> list[dict[str, Any]]:
    table = t.scan(**kwargs).to_arrow() if isinstance(t, mere.Table) else t.to_arrow()
    return sorted(table.to_pylist(), key=sort_key)


def by_key(t: mere.Table, **kwargs: Any) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(r["day"], r["order_id"]): r for r in read(t, **kwargs)}


def snapshot(t: mere.Table) -> dict[str, Any]:
    """Everything a failed write must leave untouched."""
    return {
        "version": t.version,
        "history": [(c.version, c.operation, c.summary) for c in t.history()],
        "files": sorted(t.files().column("path").to_pylist()),
        "disk": sorted((p, s) for p, s, _ in t.storage.list_files(t.location)),
        "rows": read(t),
    }


def seeded_orders(cat: mere.Catalog) -> mere.Table:
    t = make_orders(cat)
    t.upsert(
        batch(
            order_id=[1, 2, 3],
            day=[D1, D1, D2],
            amount=[100, 20, 30],
            qty=[1, 2, 3],
            units=[1, 1, 1],
            note=["a", "b", "c"],
        )
    )
    t.upsert(
        batch(order_id=[2, 4], day=[D1, D2], amount=[25, 40], qty=[5, 4], units=[2, 2], note=["b2", "d"])
    )
    return t


def local_path(t: mere.Table, rel: str) -> str:
    return t.storage.full_path(rel)


class StreamOnly:
    """Exposes nothing but the Arrow PyCapsule stream protocol."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)


# -- create / load / drop --------------------------------------------------------------------------------


def test_create_table_with_full_spec_and_load_it(cat: mere.Catalog) -> None:
    t = make_orders(cat, merge_operators={"qty": "sum", "note": "concat: | "})
    assert t.name == "sales.orders"
    assert t.version == 0
    assert t.primary_key == ("order_id",)
    assert t.spec.partition_by == ("day",)
    assert t.spec.buckets == 8
    assert t.spec.cdc_column == "op"
    # The change column belongs to incoming batches, not to the stored rows; keys are not nullable.
    assert t.schema.names == STORED.names
    assert not t.schema.field("order_id").nullable
    assert [(c.version, c.operation) for c in t.history()] == [(0, "create")]
    assert t.to_arrow().num_rows == 0
    assert t.to_arrow().schema.names == STORED.names

    again = cat.table("sales.orders")
    assert again.spec == t.spec
    assert again.location == t.location
    assert cat.load_table("sales.orders").spec == t.spec
    assert again.spec.operator("qty").name == "sum"
    assert again.spec.operator("note") == mere.spec.MergeOperator("concat", " | ")
    assert again.spec.operator("amount").name == "last"
    assert cat.tables() == ["sales.orders"]
    assert cat.tables("sales") == ["sales.orders"]
    assert "sales" in cat.namespaces()


def test_create_existing_table(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    with pytest.raises(errors.TableExists):
        make_orders(cat)
    with pytest.raises(errors.TableExists):  # a different spec does not matter: the name is taken
        cat.create_table("sales.orders", EVENTS)
    with pytest.raises(errors.TableExists, match="schema"):
        cat.create_table("sales.orders", EVENTS, exist_ok=True)
    # exist_ok returns the table only if it is the one asked for; otherwise it names the differences.
    for spec, says in [
        (dict(schema=ORDERS.append(pa.field("extra", pa.int8()))), "schema"),
        (dict(schema=ORDERS, buckets=4), "buckets 8 vs 4"),
        (dict(schema=ORDERS, primary_key=["order_id", "day"]), "primary_key"),
        (dict(schema=ORDERS, merge_operators={}), "merge_operators"),
        (dict(schema=ORDERS, partition_by=None), "partition_by"),
        (dict(schema=ORDERS, cdc_column=None), "cdc_column"),
        (dict(schema=ORDERS, properties={"write.compression": "snappy"}), "properties"),
    ]:
        kwargs: dict[str, Any] = (
            dict(
                primary_key=["order_id"],
                partition_by=["day"],
                buckets=8,
                merge_operators={"qty": "sum"},
                cdc_column="op",
            )
            | spec
        )
        with pytest.raises(errors.TableExists, match=says):
            cat.create_table("sales.orders", exist_ok=True, **kwargs)
    again = make_orders(cat, exist_ok=True)
    assert again.location == t.location
    assert again.spec == t.spec  # exist_ok returns the existing table, it does not replace it
    assert read(again) == read(t)
    assert t.version == 2
    assert cat.tables() == ["sales.orders"]


def test_missing_table_errors(cat: mere.Catalog) -> None:
    make_orders(cat)
    with pytest.raises(errors.NoSuchTable) as info:
        cat.table("sales.missing")
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, mere.MereError)
    assert "sales.missing" in str(info.value)
    with pytest.raises(KeyError):
        cat.table("sales.missing")
    with pytest.raises(errors.NoSuchTable):
        cat.drop_table("sales.missing")
    assert not cat.exists("sales.missing")
    assert cat.exists("sales.orders")


def test_missing_table_in_missing_namespace_is_no_such_table(cat: mere.Catalog) -> None:
    """A table that does not exist is missing whether or not its namespace exists."""
    with pytest.raises(KeyError):
        cat.table("ghost.orders")
    with pytest.raises(errors.NoSuchTable):
        cat.drop_table("ghost.orders")
    assert cat.exists("ghost.orders") is False
    with pytest.raises(errors.NoSuchTable):
        cat.table("ghost.orders")


def misbehaviour(case: str, call: Callable[[], Any], error: type[Exception]) -> str | None:
    """What is wrong with how ``call`` failed (None: it raised ``error``, a MereError)."""
    try:
        call()
    except error as e:
        return None if isinstance(e, mere.MereError) else f"{case}: {type(e).__name__} is not a MereError"
    except Exception as e:
        return f"{case}: expected {error.__name__}, got {type(e).__name__}: {e}"
    return f"{case}: expected {error.__name__}, nothing raised"


def expect_errors(cases: list[tuple[str, Callable[[], Any], type[Exception]]]) -> None:
    """Run every case; each must raise its typed error. Reports all misbehaving cases at once."""
    failures = [f for case, call, error in cases if (f := misbehaviour(case, call, error))]
    assert not failures, "\n".join(failures)


CREATE_CASES: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("unknown-operator", dict(merge_operators={"qty": "avg"}), errors.InvalidInput),
    ("unknown-operator-dict", dict(merge_operators={"qty": {"op": "median"}}), errors.InvalidInput),
    ("operator-not-a-name", dict(merge_operators={"qty": 3}), errors.InvalidInput),
    ("operator-unknown-column", dict(merge_operators={"colour": "sum"}), errors.SchemaMismatch),
    ("sum-on-string", dict(merge_operators={"note": "sum"}), errors.InvalidInput),
    ("concat-on-int", dict(merge_operators={"amount": "concat"}), errors.InvalidInput),
    ("operator-on-key", dict(merge_operators={"order_id": "sum"}), errors.InvalidInput),
    ("operator-on-partition", dict(merge_operators={"day": "last_non_null"}), errors.InvalidInput),
    ("key-not-in-schema", dict(primary_key=["customer"]), errors.SchemaMismatch),
    ("duplicate-key", dict(primary_key=["order_id", "order_id"]), errors.InvalidInput),
    ("partition-not-in-schema", dict(partition_by=["region"]), errors.SchemaMismatch),
    ("zero-buckets", dict(buckets=0), errors.InvalidInput),
    ("negative-buckets", dict(buckets=-3), errors.InvalidInput),
    ("fractional-buckets", dict(buckets=2.5), errors.InvalidInput),
    ("bool-buckets", dict(buckets=True), errors.InvalidInput),
    ("cdc-column-is-the-key", dict(cdc_column="order_id"), errors.InvalidInput),
    ("cdc-column-is-the-partition", dict(cdc_column="day"), errors.InvalidInput),
]


def test_create_table_rejects_bad_arguments(cat: mere.Catalog) -> None:
    expect_errors([(case, lambda kw=kw: make_orders(cat, **kw), error) for case, kw, error in CREATE_CASES])
    assert all(issubclass(error, errors.InvalidInput) for _, _, error in CREATE_CASES)
    # Key types mere cannot hash like Spark, and partition types it cannot render, are UnsupportedType.
    cases: list[tuple[str, Callable[[], Any], type[Exception]]] = []
    for key_type in (pa.float64(), pa.float32(), pa.uint32(), pa.list_(pa.int64()), pa.decimal128(30, 2)):
        schema = pa.schema([("k", key_type), ("v", pa.int64())])
        cases.append(
            (
                f"key-{key_type}",
                lambda schema=schema: cat.create_table("t.bad", schema, primary_key=["k"]),
                errors.UnsupportedType,
            )
        )
    score = pa.schema([("k", pa.int64()), ("score", pa.float64())])
    cases.append(
        (
            "float-partition",
            lambda: cat.create_table("t.bad", score, primary_key=["k"], partition_by=["score"]),
            errors.UnsupportedType,
        )
    )
    # Key-only options on a table without key.
    cases += [
        ("buckets-without-key", lambda: cat.create_table("t.events", EVENTS, buckets=4), errors.InvalidInput),
        (
            "operators-without-key",
            lambda: cat.create_table("t.events", EVENTS, merge_operators={"amount": "sum"}),
            errors.InvalidInput,
        ),
        (
            "cdc-without-key",
            lambda: cat.create_table("t.events", EVENTS, cdc_column="note"),
            errors.InvalidInput,
        ),
    ]
    # Invalid names.
    for name in ["", "   ", "sales/orders", "_hidden", "sales._hidden", "sales.", 42]:
        cases.append(
            (
                f"name-{name!r}",
                lambda name=name: cat.create_table(name, ORDERS, primary_key=["order_id"]),
                errors.InvalidInput,
            )
        )
    expect_errors(cases)
    assert issubclass(errors.UnsupportedType, TypeError)
    assert cat.tables() == []
    with pytest.raises(KeyError):
        cat.table("sales.orders")


def test_cdc_column_outside_the_schema(cat: mere.Catalog) -> None:
    """The change column need not be declared in the schema: it is only looked for in incoming batches."""
    t = cat.create_table("t.cdc", STORED, primary_key=["order_id"], cdc_column="change")
    assert t.schema.names == STORED.names
    t.upsert(batch(order_id=[1, 2], day=[D1, D1], amount=[1, 2]))
    t.upsert(pa.table({"order_id": [1, 2], "day": [D1, D1], "amount": [10, 20], "change": ["U", "D"]}))
    assert [(r["order_id"], r["amount"]) for r in read(t)] == [(1, 10)]


def test_drop_table(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    old_location = t.location
    other = cat.create_table("sales.events", EVENTS)
    other.append(pa.table({"ts": [1], "day": [D1], "amount": [1], "note": ["x"]}))
    cat.drop_table("sales.orders")
    assert cat.tables() == ["sales.events"]
    assert not cat.exists("sales.orders")
    with pytest.raises(errors.NoSuchTable):
        cat.table("sales.orders")
    with pytest.raises(errors.NoSuchTable):
        cat.drop_table("sales.orders")
    # Re-creating the name gives a new, empty table in a new location.
    fresh = make_orders(cat)
    assert fresh.location != old_location
    assert fresh.version == 0
    assert read(fresh) == []
    assert [c.operation for c in fresh.history()] == ["create"]
    assert read(other) == [{"ts": 1, "day": D1, "amount": 1, "note": "x"}]


def test_drop_table_purge_deletes_files(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    kept = cat.create_table("sales.kept", EVENTS)
    kept.append(pa.table({"ts": [1], "day": [D1], "amount": [1], "note": ["x"]}))
    paths = t.files().column("path").to_pylist()
    assert paths and all(os.path.exists(local_path(t, p)) for p in paths)
    cat.drop_table("sales.orders", purge=True)
    assert not any(os.path.exists(local_path(t, p)) for p in paths)
    assert t.storage.list_files(t.location) == []
    assert kept.to_arrow().num_rows == 1


def test_stale_handle_after_drop_and_recreate(cat: mere.Catalog) -> None:
    """A Table object of a dropped table must not read or write the table later created under its name."""
    stale = make_orders(cat)
    stale.upsert(order_rows([1, 2]))
    cat.drop_table("sales.orders")
    fresh = make_orders(cat)
    fresh.upsert(order_rows([7], amount=70))
    with pytest.raises(errors.NoSuchTable):
        stale.upsert(order_rows([99], amount=99))
    with pytest.raises(errors.NoSuchTable):
        stale.to_arrow()
    assert [(r["order_id"], r["amount"]) for r in read(fresh)] == [(7, 70)]
    assert fresh.version == 1


# -- writes ----------------------------------------------------------------------------------------------


def _inputs() -> dict[str, Callable[[], Any]]:
    base = batch(order_id=[1, 2], day=[D1, D2], amount=[10, None], qty=[1, 2], units=[3, 4], note=["a", None])
    return {
        "table": lambda: base,
        "record-batch": lambda: base.combine_chunks().to_batches()[0],
        "reader": lambda: pa.RecordBatchReader.from_batches(base.schema, base.to_batches(max_chunksize=1)),
        "pandas": lambda: pd.DataFrame(
            {
                "order_id": [1, 2],
                "day": [D1, D2],
                "amount": [10, None],
                "qty": [1, 2],
                "units": [3, 4],
                "note": ["a", None],
            }
        ),
        "dict": lambda: {
            "order_id": [1, 2],
            "day": [D1, D2],
            "amount": [10, None],
            "qty": [1, 2],
            "units": [3, 4],
            "note": ["a", None],
        },
        "arrow-c-stream": lambda: StreamOnly(base),
    }


def test_upsert_accepts_every_input_kind(cat: mere.Catalog) -> None:
    for kind, make in _inputs().items():
        t = make_orders(cat, name=f"sales.{kind.replace('-', '_')}")
        commit = t.upsert(make())
        assert commit.version == 1, kind
        assert commit.operation == "upsert"
        assert t.version == 1
        assert read(t) == [
            {"order_id": 1, "day": D1, "amount": 10, "qty": 1, "units": 3, "note": "a"},
            {"order_id": 2, "day": D2, "amount": None, "qty": 2, "units": 4, "note": None},
        ], kind
        assert t.to_arrow().schema == t.schema
        # Upserting the same rows again doubles the summed column only.
        t.upsert(make())
        assert [(r["amount"], r["qty"]) for r in read(t)] == [(10, 2), (None, 4)], kind


def test_upsert_from_another_tables_scan(cat: mere.Catalog) -> None:
    src = seeded_orders(cat)
    dst = make_orders(cat, name="sales.copy")
    dst.upsert(src.scan())
    assert read(dst) == read(src)


def test_upsert_casts_safely(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(
        pa.table(
            {
                "order_id": pa.array([1], pa.int32()),
                "day": pa.array([D1], pa.large_string()),
                "amount": pa.array([5], pa.int8()),
                "units": pa.array([7], pa.int64()),
                "note": pa.array(["x"]).dictionary_encode(),
            }
        )
    )
    assert read(t) == [{"order_id": 1, "day": D1, "amount": 5, "qty": None, "units": 7, "note": "x"}]


def test_append_to_table_without_key(cat: mere.Catalog) -> None:
    t = cat.create_table("logs.events", EVENTS, partition_by=["day"])
    rows = pa.table({"ts": [1, 2, 2], "day": [D1, D1, D2], "amount": [5, 6, 6], "note": ["a", None, "c"]})
    t.append(rows)
    t.append(rows.to_batches()[0])
    t.append(pd.DataFrame({"ts": [9], "day": [D3], "amount": [1], "note": ["z"]}))
    t.append(pa.table({"ts": [10], "day": [D3]}))  # missing nullable columns are null
    out = read(t)
    assert len(out) == 8
    assert sum(1 for r in out if r == {"ts": 2, "day": D1, "amount": 6, "note": None}) == 2
    assert {"ts": 10, "day": D3, "amount": None, "note": None} in out
    assert [c.operation for c in t.history()] == ["create", "append", "append", "append", "append"]
    assert (
        read(t, filter="day = '2026-11-21' and amount >= 6")
        == [{"ts": 2, "day": D1, "amount": 6, "note": None}] * 2
    )


def test_append_and_upsert_go_to_the_right_kind_of_table(cat: mere.Catalog) -> None:
    pk = seeded_orders(cat)
    log = cat.create_table("logs.events", EVENTS)
    log.append(pa.table({"ts": [1], "day": [D1], "amount": [5], "note": ["a"]}))
    before_pk, before_log = snapshot(pk), snapshot(log)
    with pytest.raises(errors.InvalidInput):
        pk.append(order_rows([9]))
    with pytest.raises(errors.InvalidInput):
        log.upsert(pa.table({"ts": [2], "day": [D1], "amount": [5], "note": ["a"]}))
    with pytest.raises(errors.InvalidInput):
        log.delete(pa.table({"ts": [1]}))  # no key to delete by
    assert snapshot(pk) == before_pk
    assert snapshot(log) == before_log


def test_delete_forms(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(batch(order_id=list(range(1, 11)), day=[D1] * 5 + [D2] * 5, amount=list(range(10, 110, 10))))
    assert len(read(t)) == 10

    t.delete("amount > 90 and day = '2026-11-22'")  # removes 10
    assert 10 not in {r["order_id"] for r in read(t)}
    t.delete(mere.col("order_id") == 9)
    t.delete((mere.col("amount") <= 20) & (mere.col("day") == D1))  # removes 1 and 2
    t.delete(pc.field("amount") == 30)  # removes 3
    t.delete(pa.table({"order_id": [4], "day": [D1]}))  # full identity
    t.delete(pd.DataFrame({"order_id": [5], "day": [D1], "amount": [123]}))  # other columns are ignored
    t.delete({"order_id": [6, 12345], "day": [D2, D2]})  # unknown keys are fine
    t.delete(pa.table({"order_id": pa.array([7], pa.int32()), "day": [D2]}).to_batches()[0])
    assert [r["order_id"] for r in read(t)] == [8]
    assert [c.operation for c in t.history()][-8:] == ["delete"] * 8
    assert t.version == 9


def test_delete_by_keys_without_partition_columns(cat: mere.Catalog) -> None:
    """A table of bare keys deletes each key in whatever partition it lives."""
    t = make_orders(cat)
    t.upsert(batch(order_id=[1, 1, 2, 3, 4], day=[D1, D2, D2, D3, D1], amount=[1, 2, 3, 4, 5]))
    t.delete(pa.table({"order_id": pa.array([1], pa.int32())}))
    assert set(by_key(t)) == {(D2, 2), (D3, 3), (D1, 4)}
    t.delete(pd.DataFrame({"order_id": [2, 99]}))
    t.delete({"order_id": [3]})
    assert set(by_key(t)) == {(D1, 4)}
    assert [c.operation for c in t.history()] == ["create", "upsert", "delete", "delete", "delete"]


def test_a_delete_of_rows_whose_change_codes_are_not_deletes_is_refused(cat: mere.Catalog) -> None:
    """Rows to delete that carry the table's change column must all say delete: a row saying insert or
    update (or an update-before image) is refused, nothing written, rather than deleted against its code."""
    t = cat.create_table(
        "cdc.keys", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id", cdc_column="op"
    )
    t.upsert(pa.table({"id": [1, 2, 3], "v": [1, 2, 3]}))
    version = t.version
    for codes in (["I"], ["D", "u"], ["-U"], ["+I", "-D"]):
        with pytest.raises(errors.InvalidInput, match="not a delete"):
            t.delete(pa.table({"id": list(range(1, len(codes) + 1)), "op": codes}))
    with pytest.raises(errors.InvalidInput, match="holds nulls"):
        t.delete(pa.table({"id": [1], "op": pa.array([None], pa.string())}))
    with pytest.raises(errors.InvalidInput, match="unknown operations"):
        t.delete(pa.table({"id": [1], "op": ["X"]}))
    with pytest.raises(errors.InvalidInput, match="not a delete"), t.transaction() as tx:
        tx.delete(pa.table({"id": [1], "op": ["c"]}))
    assert t.version == version
    t.delete(pa.table({"id": [1, 2], "op": ["D", "-d"]}))
    t.delete(pa.table({"id": [3], "v": [9]}))  # no change column: the keys are deleted, other columns unread
    assert t.scan().count() == 0


def test_delete_on_table_without_key(cat: mere.Catalog) -> None:
    t = cat.create_table("logs.events", EVENTS, partition_by=["day"])
    t.append(
        pa.table(
            {
                "ts": list(range(6)),
                "day": [D1, D1, D1, D2, D2, D3],
                "amount": [1, 2, 3, 4, None, 6],
                "note": list("abcdef"),
            }
        )
    )
    t.delete("amount >= 3 and day <> '2026-11-23'")
    assert [r["ts"] for r in read(t)] == [0, 1, 4, 5]
    t.delete(mere.col("amount").is_null())
    assert [r["ts"] for r in read(t)] == [0, 1, 5]
    t.delete(pc.field("note") == "a")
    assert [r["ts"] for r in read(t)] == [1, 5]
    assert read(t, version=1) == read(t, version=1)  # old versions stay readable
    assert len(read(t, version=1)) == 6


def test_overwrite_whole_table_and_one_partition(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    t.overwrite(batch(order_id=[2, 5], day=[D1, D1], amount=[7, 8], qty=[1, 1]), partition={"day": D1})
    got = by_key(t)
    assert set(got) == {(D1, 2), (D1, 5), (D2, 3), (D2, 4)}
    # Overwritten rows start from scratch: the sum does not include the replaced versions.
    assert got[(D1, 2)]["qty"] == 1
    assert got[(D1, 2)]["note"] is None
    assert got[(D2, 3)]["qty"] == 3
    t.overwrite(batch(order_id=[9], day=[D2], amount=[1], qty=[4]), partition={"day": D2})
    assert set(by_key(t)) == {(D1, 2), (D1, 5), (D2, 9)}
    t.overwrite(batch(order_id=[1], day=[D3], amount=[1], qty=[2]))
    assert set(by_key(t)) == {(D3, 1)}
    assert by_key(t)[(D3, 1)]["qty"] == 2
    # An empty overwrite of a partition empties it.
    t.upsert(order_rows([3], day=D1))
    t.overwrite(order_rows([], day=D3), partition={"day": D3})
    assert set(by_key(t)) == {(D1, 3)}
    assert [c.operation for c in t.history()][3:] == [
        "overwrite",
        "overwrite",
        "overwrite",
        "upsert",
        "overwrite",
    ]
    assert set(by_key(t, version=2)) == {(D1, 1), (D1, 2), (D2, 3), (D2, 4)}


def test_overwrite_partition_of_an_integer_partition_column(cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("year", pa.int32()), ("v", pa.string())])
    t = cat.create_table("t.years", schema, primary_key=["k"], partition_by=["year"], buckets=2)
    t.upsert(
        pa.table({"k": [1, 2, 3], "year": pa.array([2025, 2026, 2026], pa.int32()), "v": ["a", "b", "c"]})
    )
    t.overwrite(
        pa.table({"k": [4], "year": pa.array([2026], pa.int32()), "v": ["d"]}), partition={"year": 2026}
    )
    assert sorted((r["k"], r["year"]) for r in t.to_arrow().to_pylist()) == [(1, 2025), (4, 2026)]
    t.overwrite(
        pa.table({"k": [5], "year": pa.array([2025], pa.int32()), "v": ["e"]}), partition={"year": "2025"}
    )
    assert sorted((r["k"], r["year"]) for r in t.to_arrow().to_pylist()) == [(4, 2026), (5, 2025)]


def test_cdc_batch_applies_changes_in_order(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(batch(order_id=[3, 4, 5], day=[D1] * 3, amount=[30, 40, 50], qty=[10, 10, 10]))
    t.upsert(
        batch(
            order_id=[1, 1, 2, 2, 3, 4, 4, 1, 6, 5, 5],
            day=[D1] * 11,
            amount=[10, 20, 5, None, 31, None, 41, 21, None, 51, 52],
            qty=[1, 2, 1, None, 3, None, 2, 5, None, 1, 1],
            op=["I", "U", "I", "D", "U", "D", "I", "-U", "d", "update_before", "+U"],
        )
    )
    got = by_key(t)
    assert set(got) == {(D1, 1), (D1, 3), (D1, 4), (D1, 5)}
    assert got[(D1, 1)]["amount"] == 20 and got[(D1, 1)]["qty"] == 3  # I then U (the -U image is ignored)
    assert got[(D1, 3)]["amount"] == 31 and got[(D1, 3)]["qty"] == 13  # U merges with the stored state
    assert got[(D1, 4)]["amount"] == 41 and got[(D1, 4)]["qty"] == 2  # D then I: the sum starts again
    assert got[(D1, 5)]["amount"] == 52 and got[(D1, 5)]["qty"] == 11
    # Deleted keys never appear, whatever the filter or projection.
    assert (D1, 2) not in by_key(t, filter="order_id in (2, 6)")
    assert read(t, columns=["order_id"], filter="amount is null") == []
    assert read(t, filter="order_id = 2") == []
    # Later batches may re-insert deleted keys, and lower-case and Debezium spellings work.
    t.upsert(batch(order_id=[2, 1], day=[D1, D1], amount=[7, None], qty=[7, None], op=["c", "delete"]))
    assert {k: (r["amount"], r["qty"]) for k, r in by_key(t).items()} == {
        (D1, 2): (7, 7),
        (D1, 3): (31, 13),
        (D1, 4): (41, 2),
        (D1, 5): (52, 11),
    }


def test_partial_column_upsert_updates_only_given_columns(cat: mere.Catalog) -> None:
    t = make_orders(cat, merge_operators={"qty": "sum", "note": "last_non_null"})
    t.upsert(
        batch(order_id=[1, 2], day=[D1, D1], amount=[100, 200], qty=[1, 2], units=[5, 6], note=["a", "b"])
    )
    t.upsert(batch(order_id=[1], day=[D1], amount=[None]))
    t.upsert(batch(order_id=[2, 3], day=[D1, D1], units=[60, 7]))
    t.upsert(batch(order_id=[2], day=[D1], qty=[10], note=[None]))
    got = by_key(t)
    assert got[(D1, 1)] == {"order_id": 1, "day": D1, "amount": None, "qty": 1, "units": 5, "note": "a"}
    assert got[(D1, 2)] == {"order_id": 2, "day": D1, "amount": 200, "qty": 12, "units": 60, "note": "b"}
    assert got[(D1, 3)] == {"order_id": 3, "day": D1, "amount": None, "qty": None, "units": 7, "note": None}
    # Projections and filters over columns some versions lack see the merged value.
    assert read(t, columns=["order_id", "amount"], filter="amount > 150") == [{"order_id": 2, "amount": 200}]
    assert read(t, columns=["units"], filter="order_id = 2") == [{"units": 60}]


def test_partial_upsert_cannot_create_nulls_in_a_not_null_column(cat: mere.Catalog) -> None:
    """An explicit null in a NOT NULL column is rejected; leaving the column out of a new row must not sneak one in."""
    schema = pa.schema(
        [
            pa.field("k", pa.int64()),
            pa.field("amount", pa.int64(), nullable=False),
            pa.field("note", pa.string()),
        ]
    )
    t = cat.create_table("t.strict", schema, primary_key=["k"], buckets=2)
    t.upsert(pa.table({"k": [1], "amount": [5], "note": ["a"]}))
    with pytest.raises(errors.SchemaMismatch):
        t.upsert(pa.table({"k": [2], "amount": pa.array([None], pa.int64()), "note": ["b"]}))
    t.upsert(pa.table({"k": [1], "note": ["a2"]}))  # an existing row keeps its amount
    assert t.to_arrow().to_pylist() == [{"k": 1, "amount": 5, "note": "a2"}]
    with contextlib.suppress(mere.MereError):
        t.upsert(pa.table({"k": [2], "note": ["b"]}))  # a new row without its NOT NULL column
    out = t.to_arrow()
    assert out.column("amount").null_count == 0, out.to_pylist()


def test_partial_column_upsert_with_last_operators_only(cat: mere.Catalog) -> None:
    t = make_orders(cat, merge_operators={})
    t.upsert(batch(order_id=[1, 2], day=[D1, D1], amount=[100, 200], qty=[1, 2], note=["a", "b"]))
    t.upsert(batch(order_id=[1], day=[D1], note=["a2"]))
    assert read(t, columns=["order_id", "amount", "note"]) == [
        {"order_id": 1, "amount": 100, "note": "a2"},
        {"order_id": 2, "amount": 200, "note": "b"},
    ]
    assert read(t, columns=["order_id", "note"]) == [
        {"order_id": 1, "note": "a2"},
        {"order_id": 2, "note": "b"},
    ]
    assert read(t, columns=["order_id"], filter="amount >= 100 and note = 'a2'") == [{"order_id": 1}]


@pytest.mark.parametrize(
    "concat", ["concat: | ", {"op": "concat", "separator": " | "}], ids=["string", "dict"]
)
def test_merge_operators(cat: mere.Catalog, concat: Any) -> None:
    schema = pa.schema(
        [
            ("k", pa.int64()),
            ("last", pa.int64()),
            ("lnn", pa.string()),
            ("total", pa.float64()),
            ("log", pa.string()),
        ]
    )
    t = cat.create_table(
        "t.ops",
        schema,
        primary_key="k",
        buckets=4,
        merge_operators={"lnn": "last_non_null", "total": "sum", "log": concat},
    )

    def up(k: int, last: int | None, lnn: str | None, total: float | None, log: str | None) -> None:
        t.upsert(
            pa.table(
                {
                    "k": [k],
                    "last": pa.array([last], pa.int64()),
                    "lnn": pa.array([lnn], pa.string()),
                    "total": pa.array([total], pa.float64()),
                    "log": pa.array([log], pa.string()),
                }
            )
        )

    up(1, 5, "a", 1.5, "x")
    up(1, None, None, None, None)
    up(1, 7, None, 2.0, "y")
    up(2, None, None, None, None)
    up(2, 3, "b", None, "")
    rows = {r["k"]: r for r in t.to_arrow().to_pylist()}
    assert rows[1] == {"k": 1, "last": 7, "lnn": "a", "total": 3.5, "log": "x | y"}
    assert rows[2] == {"k": 2, "last": 3, "lnn": "b", "total": None, "log": ""}
    up(1, None, None, None, None)
    assert {r["k"]: r for r in t.to_arrow().to_pylist()}[1] == {
        "k": 1,
        "last": None,
        "lnn": "a",
        "total": 3.5,
        "log": "x | y",
    }  # last keeps nulls too
    # Filters see merged values.
    assert [r["k"] for r in t.scan(filter="total > 3 and log = 'x | y'").to_arrow().to_pylist()] == [1]
    assert t.scan(filter="total = 1.5").to_arrow().num_rows == 0


def test_sum_overflow_is_never_silent(cat: mere.Catalog) -> None:
    """A sum that does not fit the column type must fail with a typed error, never wrap around or crash."""
    failures = []
    for typ in (pa.int32(), pa.int64()):
        top = 2**31 - 1 if typ == pa.int32() else 2**62
        for same_batch in (False, True):
            case = f"{typ}-{'one-batch' if same_batch else 'two-commits'}"
            schema = pa.schema([("k", pa.int64()), ("q", typ)])
            t = cat.create_table(
                f"t.sums_{typ}_{same_batch}", schema, primary_key=["k"], merge_operators={"q": "sum"}
            )
            t.upsert(pa.table({"k": [2], "q": pa.array([1], typ)}))
            try:
                if same_batch:
                    t.upsert(pa.table({"k": [1, 1], "q": pa.array([top, top], typ)}))
                else:
                    t.upsert(pa.table({"k": [1], "q": pa.array([top], typ)}))
                    t.upsert(pa.table({"k": [1], "q": pa.array([top], typ)}))
                values = {r["k"]: r["q"] for r in t.to_arrow().to_pylist()}
            except mere.MereError:
                continue
            except Exception as e:
                failures.append(f"{case}: untyped {type(e).__name__}: {e}")
                continue
            if values != {1: 2 * top, 2: 1}:
                failures.append(f"{case}: silently read {values}")
    assert not failures, "\n".join(failures)


def test_concat_separator_spellings_agree(cat: mere.Catalog) -> None:
    """'concat:<sep>' and {'op': 'concat', 'separator': <sep>} mean the same, the empty separator included."""
    for sep in ["|", " | ", ", ", ""]:
        a = make_orders(
            cat, name=f"t.a{len(sep)}{sep.strip() == ''}", merge_operators={"note": f"concat:{sep}"}
        )
        b = make_orders(
            cat,
            name=f"t.b{len(sep)}{sep.strip() == ''}",
            merge_operators={"note": {"op": "concat", "separator": sep}},
        )
        assert a.spec.operator("note") == b.spec.operator("note") == mere.spec.MergeOperator("concat", sep)
    default = make_orders(cat, name="t.default", merge_operators={"note": "concat"})
    assert default.spec.operator("note").separator == ","


def test_duplicate_keys_in_one_batch_apply_in_order(cat: mere.Catalog) -> None:
    t = make_orders(cat, merge_operators={"qty": "sum", "note": "concat:|"})
    t.upsert(batch(order_id=[1, 2], day=[D1, D1], amount=[1, 1], qty=[100, 100], note=["s", "s"]))
    t.upsert(
        batch(
            order_id=[1, 1, 2, 1, 3, 3],
            day=[D1] * 6,
            amount=[5, 6, 9, None, 1, 2],
            qty=[1, 2, 3, None, 4, 5],
            note=["a", None, "c", "d", "e", "f"],
        )
    )
    got = by_key(t)
    assert got[(D1, 1)]["amount"] is None  # last row wins, even a null
    assert got[(D1, 1)]["qty"] == 103
    assert got[(D1, 1)]["note"] == "s|a|d"
    assert got[(D1, 2)]["amount"] == 9 and got[(D1, 2)]["qty"] == 103 and got[(D1, 2)]["note"] == "s|c"
    assert got[(D1, 3)]["amount"] == 2 and got[(D1, 3)]["qty"] == 9 and got[(D1, 3)]["note"] == "e|f"
    # The same key in two partitions is two rows.
    t.upsert(batch(order_id=[1, 1], day=[D1, D2], amount=[50, 60]))
    got = by_key(t)
    assert got[(D1, 1)]["amount"] == 50 and got[(D2, 1)]["amount"] == 60


# -- bad input changes nothing ---------------------------------------------------------------------------


def _bad_reader() -> pa.RecordBatchReader:
    good = batch(order_id=[100, 101], day=[D1, D2], amount=[1, 2])
    bad = batch(order_id=[102, None], day=[D1, D3], amount=[3, 4])
    return pa.RecordBatchReader.from_batches(good.schema, good.to_batches() + bad.to_batches())


BAD_WRITES: list[tuple[str, Callable[[mere.Table], Any], type[Exception]]] = [
    ("missing-key", lambda t: t.upsert(batch(day=[D1], amount=[1])), errors.SchemaMismatch),
    ("missing-partition-column", lambda t: t.upsert(batch(order_id=[9], amount=[1])), errors.SchemaMismatch),
    ("null-key", lambda t: t.upsert(batch(order_id=[9, None], day=[D1, D1], amount=[1, 2])), errors.NullKey),
    (
        "string-into-int64",
        lambda t: t.upsert(pa.table({"order_id": [9], "day": [D1], "amount": ["abc"]})),
        errors.SchemaMismatch,
    ),
    (
        "string-into-key",
        lambda t: t.upsert(pa.table({"order_id": ["9x"], "day": [D1]})),
        errors.SchemaMismatch,
    ),
    (
        "int64-overflow-into-int32",
        lambda t: t.upsert(pa.table({"order_id": [9], "day": [D1], "units": [2**40]})),
        errors.SchemaMismatch,
    ),
    (
        "fraction-into-int64",
        lambda t: t.upsert(pa.table({"order_id": [9], "day": [D1], "amount": [1.5]})),
        errors.SchemaMismatch,
    ),
    (
        "unknown-column",
        lambda t: t.upsert(pa.table({"order_id": [9], "day": [D1], "colour": ["red"]})),
        errors.SchemaMismatch,
    ),
    (
        "duplicate-column",
        lambda t: t.upsert(
            pa.table([pa.array([9]), pa.array([D1]), pa.array([D1])], names=["order_id", "day", "day"])
        ),
        errors.SchemaMismatch,
    ),
    ("bad-second-batch", lambda t: t.upsert(_bad_reader()), errors.NullKey),
    (
        "unknown-cdc-op",
        lambda t: t.upsert(batch(order_id=[9, 10], day=[D1, D1], op=["I", "X"])),
        errors.InvalidInput,
    ),
    (
        "null-cdc-op",
        lambda t: t.upsert(batch(order_id=[9, 10], day=[D1, D1], op=["I", None])),
        errors.InvalidInput,
    ),
    ("ragged-dict", lambda t: t.upsert({"order_id": [9, 10], "day": [D1]}), errors.InvalidInput),
    (
        "mixed-type-pandas-column",
        lambda t: t.upsert(pd.DataFrame({"order_id": [9, "ten"], "day": [D1, D1]})),
        errors.InvalidInput,
    ),
    ("not-data", lambda t: t.upsert(42), errors.InvalidInput),
    ("list-of-dicts", lambda t: t.upsert([{"order_id": 9, "day": D1}]), errors.InvalidInput),
    ("append-on-pk-table", lambda t: t.append(order_rows([9])), errors.InvalidInput),
    (
        "overwrite-rows-of-another-partition",
        lambda t: t.overwrite(order_rows([9], day=D2), partition={"day": D1}),
        errors.InvalidInput,
    ),
    (
        "overwrite-some-rows-of-another-partition",
        lambda t: t.overwrite(batch(order_id=[9, 10], day=[D1, D2]), partition={"day": D1}),
        errors.InvalidInput,
    ),
    (
        "overwrite-non-partition-column",
        lambda t: t.overwrite(order_rows([9]), partition={"amount": 1}),
        errors.InvalidInput,
    ),
    ("overwrite-missing-key", lambda t: t.overwrite(batch(day=[D1], amount=[1])), errors.SchemaMismatch),
    ("overwrite-null-key", lambda t: t.overwrite(batch(order_id=[None], day=[D1])), errors.NullKey),
    ("delete-bad-syntax", lambda t: t.delete("amount >"), errors.FilterError),
    ("delete-bad-syntax-2", lambda t: t.delete("amount > 1 and and day = 'x'"), errors.FilterError),
    ("delete-unknown-column", lambda t: t.delete("colour = 'red'"), errors.FilterError),
    ("delete-expr-unknown-column", lambda t: t.delete(mere.col("colour") == "red"), errors.FilterError),
    ("delete-pyarrow-unknown-column", lambda t: t.delete(pc.field("colour") == "red"), errors.FilterError),
    ("delete-literal-wrong-type", lambda t: t.delete("amount = 'abc'"), errors.FilterError),
    ("delete-non-boolean", lambda t: t.delete("order_id = 1 or note"), errors.FilterError),
    ("delete-keys-without-key", lambda t: t.delete(pa.table({"day": [D1]})), errors.InvalidInput),
    (
        "delete-null-key",
        lambda t: t.delete(pa.table({"order_id": pa.array([1, None], pa.int64()), "day": [D1, D1]})),
        errors.NullKey,
    ),
    (
        "delete-key-wrong-type",
        lambda t: t.delete(pa.table({"order_id": ["one"], "day": [D1]})),
        errors.SchemaMismatch,
    ),
    ("delete-not-a-filter", lambda t: t.delete(42), errors.FilterError),
]


def assert_rejected_without_change(
    t: mere.Table, cases: list[tuple[str, Callable[[mere.Table], Any], type[Exception]]]
) -> None:
    """Every case must raise its typed error and leave version, history, files and rows as they were."""
    failures = []
    for case, write, error in cases:
        before = snapshot(t)
        if (failure := misbehaviour(case, functools.partial(write, t), error)) is not None:
            failures.append(failure)
        after = snapshot(t)
        if after != before:
            failures.append(f"{case}: changed {[k for k in before if before[k] != after[k]]}")
    assert not failures, "\n".join(failures)


def test_bad_input_is_rejected_and_changes_nothing(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    assert_rejected_without_change(t, BAD_WRITES)
    # The table still takes good writes afterwards.
    version = t.version
    t.upsert(order_rows([50]))
    assert t.version == version + 1


def test_bad_writes_to_table_without_key_change_nothing(cat: mere.Catalog) -> None:
    t = cat.create_table("logs.events", EVENTS, partition_by=["day"])
    t.append(pa.table({"ts": [1, 2], "day": [D1, D2], "amount": [1, 2], "note": ["a", "b"]}))
    assert_rejected_without_change(
        t,
        [
            (
                "upsert-without-key",
                lambda t: t.upsert(pa.table({"ts": [3], "day": [D1]})),
                errors.InvalidInput,
            ),
            (
                "unknown-column",
                lambda t: t.append(pa.table({"ts": [3], "day": [D1], "colour": ["red"]})),
                errors.SchemaMismatch,
            ),
            (
                "string-into-int64",
                lambda t: t.append(pa.table({"ts": ["x"], "day": [D1]})),
                errors.SchemaMismatch,
            ),
            ("delete-keys", lambda t: t.delete(pa.table({"ts": [1]})), errors.InvalidInput),
            ("delete-bad-syntax", lambda t: t.delete("ts >"), errors.FilterError),
            ("delete-unknown-column", lambda t: t.delete("colour = 1"), errors.FilterError),
            (
                "overwrite-other-partition",
                lambda t: t.overwrite(pa.table({"ts": [3], "day": [D2]}), partition={"day": D1}),
                errors.InvalidInput,
            ),
            (
                "delete-pyarrow-unknown-column",
                lambda t: t.delete(pc.field("colour") == 1),
                errors.FilterError,
            ),
        ],
    )


def test_bad_reads_raise_typed_errors(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    with pytest.raises(errors.SchemaMismatch):
        t.scan(columns=["order_id", "colour"])
    with pytest.raises(errors.FilterError):
        t.scan(filter="colour > 1")
    with pytest.raises(errors.FilterError):
        t.scan(filter="amount > > 1")
    with pytest.raises(errors.FilterError):
        t.scan(filter="day = 5 and")
    with pytest.raises(errors.NoSuchVersion):
        t.scan(version=3)
    with pytest.raises(errors.NoSuchVersion):
        t.scan(version=-1)
    with pytest.raises(errors.NoSuchVersion):
        t.scan(as_of=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    with pytest.raises(errors.InvalidInput):
        t.scan(version=1, as_of=dt.datetime.now(dt.UTC))
    with pytest.raises(errors.InvalidInput):
        t.scan(as_of=object())
    with pytest.raises(mere.MereError):  # an opaque pyarrow filter on an unknown column
        t.scan(filter=pc.field("colour") > 1).to_arrow()


# -- reads -----------------------------------------------------------------------------------------------


def test_scan_projection_filter_and_output_formats(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(
        batch(
            order_id=list(range(20)),
            day=[D1, D2] * 10,
            amount=[i * 2 for i in range(20)],
            qty=[1] * 20,
            units=[1] * 20,
            note=[f"n{i}" for i in range(20)],
        )
    )
    expected = sorted((i, i * 2) for i in range(20) if i * 2 > 10 and i % 2 == 0)
    scan = t.scan(columns=["order_id", "amount"], filter="amount > 10 and day = '2026-11-21'")
    assert scan.schema == pa.schema([t.schema.field("order_id"), t.schema.field("amount")])

    as_arrow = scan.to_arrow()
    assert as_arrow.schema == scan.schema
    assert sorted(zip(*as_arrow.to_pydict().values())) == expected

    batches = list(scan.to_batches())
    assert all(isinstance(b, pa.RecordBatch) and b.schema == scan.schema for b in batches)
    assert sorted((r["order_id"], r["amount"]) for b in batches for r in b.to_pylist()) == expected

    reader = scan.to_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == scan.schema
    assert sorted(zip(*reader.read_all().to_pydict().values())) == expected

    frame = scan.to_pandas()
    assert list(frame.columns) == ["order_id", "amount"]
    assert sorted(zip(frame["order_id"], frame["amount"])) == expected

    first = pa.table(scan)
    second = pa.table(scan)  # each export is a fresh read
    assert first.equals(second)
    assert sorted(zip(*first.to_pydict().values())) == expected
    assert pa.RecordBatchReader.from_stream(scan).read_all().num_rows == len(expected)
    assert scan.count() == len(expected)

    # The same filter as an expression and as a pyarrow expression.
    for f in (
        (mere.col("amount") > 10) & (mere.col("day") == D1),
        (pc.field("amount") > 10) & (pc.field("day") == D1),
    ):
        assert (
            sorted(zip(*t.scan(columns=["order_id", "amount"], filter=f).to_arrow().to_pydict().values()))
            == expected
        )
    # Chained builders.
    chained = t.scan(columns=["order_id", "amount"]).where("amount > 10").where(mere.col("day") == D1)
    assert sorted(zip(*chained.to_arrow().to_pydict().values())) == expected
    assert t.scan().select("note").to_arrow().column_names == ["note"]
    # Filter columns need not be projected; projection order is kept.
    assert t.scan(columns=["note", "order_id"], filter="order_id = 3").to_arrow().to_pylist() == [
        {"note": "n3", "order_id": 3}
    ]
    assert t.scan(columns="amount", filter="order_id in (1, 2)").to_arrow().column_names == ["amount"]


def test_empty_projection_keeps_the_row_count(cat: mere.Catalog) -> None:
    """Engines computing count(*) ask for no columns at all; the rows must still be there."""
    t = seeded_orders(cat)
    log = cat.create_table("logs.events", EVENTS)
    log.append(pa.table({"ts": [1, 2, 3], "day": [D1, D1, D2], "amount": [1, 2, 3], "note": ["a", "b", "c"]}))
    assert t.scan(columns=[]).to_arrow().num_rows == 4
    assert t.scan(columns=[]).count() == 4
    assert t.scan(columns=[], filter="amount > 26").count() == 3  # 100, 30, 40 (25 is the newest for key 2)
    assert pa.table(t.scan(columns=[])).num_rows == 4
    assert log.scan(columns=[]).count() == 3


def test_splits_can_be_planned_serialised_and_read_separately(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    t.upsert(order_rows(list(range(10, 30)), day=D3))
    scan = t.scan(columns=["order_id", "qty"], filter="qty >= 1")
    splits = scan.plan()
    assert len(splits) == scan.explain().splits
    assert len(splits) > 1
    parts = [b for s in splits for b in scan.read_split(mere.read.planner.Split.from_json(s.to_json()))]
    assert sorted(pa.Table.from_batches(parts).to_pylist(), key=sort_key) == read(scan)
    assert sum(s.row_count for s in splits) >= len(read(scan))


def test_delete_by_filter_does_not_delete_a_row_updated_concurrently(
    cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A predicate delete that raced with an update must not delete a row that no longer matches.

    Serially, ``upsert(k=1, amount=3)`` and ``delete("amount > 10")`` leave key 1 with amount 3 in either
    order. Here the upsert commits (through a second connection) after the delete read the table and
    before it committed.
    """
    t = make_orders(cat)
    t.upsert(order_rows([1, 2], amount=100))
    other = mere.connect(cat.storage.uri, catalog=cat.sql.url)
    original = write_ops.read_markers

    raced = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not raced:  # the concurrent update lands once, between the delete's read and its commit
            raced.append(other.table("sales.orders").upsert(order_rows([1], amount=3)))
        return original(*args, **kwargs)

    monkeypatch.setattr(write_ops, "read_markers", racing)
    t.delete("amount > 10")
    monkeypatch.undo()
    assert raced
    assert [(r["order_id"], r["amount"]) for r in read(t)] == [(1, 3)]


def test_scan_is_a_snapshot_of_its_version(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    scan = t.scan()
    before = read(scan)
    t.upsert(order_rows([77]))
    t.delete("order_id = 1")
    assert read(scan) == before
    assert pa.table(scan).num_rows == len(before)
    assert len(read(t)) == len(before)  # one added, one deleted


def test_explain_pruning(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    ids = list(range(200))
    days = [D1, D2, D3]
    t.upsert(batch(order_id=ids, day=[days[i % 3] for i in ids], amount=ids))
    t.upsert(batch(order_id=ids[:50], day=[days[i % 3] for i in ids[:50]], amount=ids[:50]))
    assert len(set(t.files().column("bucket").to_pylist())) == 8

    ex = t.scan(filter="order_id = 5").explain()
    assert ex.buckets_total == 8
    assert ex.buckets_kept == 1
    assert ex.key_lookup == [(5,)]
    assert ex.post_merge_filter.upper() == "TRUE"
    assert "order_id" in ex.pre_merge_filter
    assert ex.version == 2
    assert ex.bytes_kept < ex.bytes_total
    assert ex.files_kept <= ex.files_total
    assert str(ex).startswith("scan at version 2")
    assert read(t, filter="order_id = 5") == [
        {"order_id": 5, "day": D3, "amount": 5, "qty": None, "units": None, "note": None}
    ]

    ex = t.scan(filter=f"day = '{D2}'").explain()
    assert ex.partitions_total == 3
    assert ex.partitions_kept == 1
    assert ex.buckets_kept == 8
    assert ex.post_merge_filter.upper() == "TRUE"

    ex = t.scan(filter=f"order_id in (5, 6) and day = '{D3}'").explain()
    assert ex.partitions_kept == 1
    assert ex.buckets_kept == len(set(mere.bucket_ids(pa.array([5, 6]), 8).tolist()))

    ex = t.scan(filter=f"amount > 10 and day = '{D1}'").explain()
    assert "amount" in ex.post_merge_filter
    assert "amount" not in ex.pre_merge_filter
    assert "day" in ex.pre_merge_filter
    assert ex.partitions_kept == 1

    ex = t.scan(filter="amount > 10").explain()
    assert "amount" in ex.post_merge_filter
    assert ex.pre_merge_filter.upper() == "TRUE"
    assert ex.partitions_kept == 3 and ex.buckets_kept == 8 and ex.files_kept == ex.files_total

    ex = t.scan(filter=pc.field("order_id") == 5).explain()
    assert ex.notes  # opaque filters are reported, prune nothing and run after the merge
    assert ex.buckets_kept == 8

    ex = t.scan(filter=f"day >= '{D2}'").explain()
    assert ex.partitions_kept == 2

    ex = t.scan(filter="order_id = 100000").explain()  # an absent key: nothing to read
    assert ex.bytes_kept == 0
    nothing = t.scan(columns=["order_id", "note"], filter="order_id = 100000")
    assert nothing.to_arrow().num_rows == 0
    assert nothing.to_arrow().schema == nothing.schema
    assert list(nothing.to_pandas().columns) == ["order_id", "note"]
    assert nothing.to_reader().read_all().num_rows == 0
    assert pa.table(nothing).schema == nothing.schema


def test_time_travel_and_history(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(order_rows([1, 2], amount=10))
    t.upsert(order_rows([2], amount=20, qty=5))
    t.delete("order_id = 1")
    t.overwrite(order_rows([3], day=D2, amount=30), partition={"day": D2})
    t.upsert(order_rows([1], amount=99))

    history = t.history()
    assert [c.version for c in history] == list(range(6))
    assert [c.operation for c in history] == ["create", "upsert", "upsert", "delete", "overwrite", "upsert"]
    assert all(a.committed_at <= b.committed_at for a, b in itertools.pairwise(history))
    assert t.version == 5
    assert history[1].summary["rows"] == 2

    def state(**kwargs: Any) -> dict[int, tuple[Any, Any]]:
        return {r["order_id"]: (r["amount"], r["qty"]) for r in read(t, **kwargs)}

    expected = {
        0: {},
        1: {1: (10, 1), 2: (10, 1)},
        2: {1: (10, 1), 2: (20, 6)},
        3: {2: (20, 6)},
        4: {2: (20, 6), 3: (30, 1)},
        5: {1: (99, 1), 2: (20, 6), 3: (30, 1)},
    }
    for v, rows in expected.items():
        assert state(version=v) == rows
        when = history[v].committed_at
        assert when.tzinfo is not None and history[v].parent == (v - 1 if v else None)
        assert t.scan(as_of=when).version == v
        assert state(as_of=when) == rows
        assert t.scan(as_of=when.isoformat()).version == v
        assert t.scan(as_of=history[v].committed_micros / 1_000_000 + 1e-7).version == v  # epoch seconds
    assert state(version=None) == expected[5]
    assert t.scan(as_of=dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).version == 5
    assert state(version=2, filter="amount >= 20") == {2: (20, 6)}
    assert t.files(version=0).num_rows == 0
    assert t.files(version=1).num_rows >= 1


def test_explain_does_not_change_results_for_tiny_row_groups(cat: mere.Catalog) -> None:
    t = make_orders(cat, properties={"write.row-group-rows": "4"})
    ids = list(range(60))
    t.upsert(batch(order_id=ids, day=[D1] * 60, amount=ids))
    t.upsert(batch(order_id=ids[::3], day=[D1] * 20, amount=[-1] * 20))
    ex = t.scan(filter="order_id >= 40 and order_id < 44").explain()
    assert ex.row_groups_kept < ex.row_groups_total
    got = read(t, filter="order_id >= 40 and order_id < 44")
    assert [(r["order_id"], r["amount"]) for r in got] == [(40, 40), (41, 41), (42, -1), (43, 43)]


# -- merge on read around filters ------------------------------------------------------------------------


def test_non_key_filter_does_not_resurrect_old_versions(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(order_rows([1, 2], amount=100, qty=5))
    t.upsert(order_rows([1], amount=5, qty=10))
    assert read(t, filter="amount > 10", columns=["order_id"]) == [{"order_id": 2}]
    assert read(t, filter="amount = 100", columns=["order_id"]) == [{"order_id": 2}]
    assert read(t, filter=mere.col("amount") > 10, columns=["order_id"]) == [{"order_id": 2}]
    assert read(t, filter=pc.field("amount") > 10, columns=["order_id"]) == [{"order_id": 2}]
    assert read(t, filter="order_id = 1 and amount > 10") == []
    # Merged (summed) values, not any single version, are what the filter sees.
    assert read(t, filter="qty = 5", columns=["order_id"]) == [{"order_id": 2}]
    assert read(t, filter="qty = 15", columns=["order_id"]) == [{"order_id": 1}]
    assert read(t, filter="qty = 10") == []
    # A delete filtered on a non-key column acts on merged values as well.
    t.delete("amount > 10")
    assert [r["order_id"] for r in read(t)] == [1]
    t.upsert(order_rows([1], amount=None))
    assert read(t, filter="amount <= 5") == []
    assert [r["order_id"] for r in read(t, filter="amount is null")] == [1]


def test_delete_then_reinsert(cat: mere.Catalog) -> None:
    t = make_orders(cat, merge_operators={"qty": "sum", "note": "concat:,"})
    t.upsert(order_rows([1, 2], amount=10, qty=4, note="a"))
    t.upsert(order_rows([1], amount=11, qty=4, note="b"))
    t.delete("order_id = 1")
    assert [r["order_id"] for r in read(t)] == [2]
    t.upsert(batch(order_id=[1], day=[D1], amount=[12]))
    got = by_key(t)[(D1, 1)]
    # Nothing survives the delete: the sum and the concatenation start again, other columns are null.
    assert (got["amount"], got["qty"], got["note"], got["units"]) == (12, None, None, None)
    t.upsert(order_rows([1], amount=13, qty=1, note="c"))
    got = by_key(t)[(D1, 1)]
    assert (got["amount"], got["qty"], got["note"]) == (13, 1, "c")
    assert read(t, filter="qty > 4") == []
    assert [r["order_id"] for r in read(t, version=2)] == [1, 2]
    assert by_key(t, version=2)[(D1, 1)]["qty"] == 8


def test_delete_in_one_partition_keeps_the_same_key_in_another(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(batch(order_id=[1, 1, 1, 2], day=[D1, D2, D3, D1], amount=[10, 20, 30, 40]))
    t.delete(f"order_id = 1 and day = '{D1}'")
    assert set(by_key(t)) == {(D2, 1), (D3, 1), (D1, 2)}
    t.delete(pa.table({"order_id": [1], "day": [D2]}))
    assert set(by_key(t)) == {(D3, 1), (D1, 2)}
    t.upsert(batch(order_id=[1], day=[D1], amount=[11]))
    assert by_key(t)[(D1, 1)]["amount"] == 11
    assert by_key(t)[(D3, 1)]["amount"] == 30
    t.delete(mere.col("order_id") == 1)  # no partition given: every partition
    assert set(by_key(t)) == {(D1, 2)}


def test_blind_delete_when_partition_is_part_of_the_key(cat: mere.Catalog) -> None:
    t = cat.create_table(
        "sales.byday", STORED, primary_key=["day", "order_id"], partition_by=["day"], buckets=4
    )
    t.upsert(batch(order_id=[1, 1, 2], day=[D1, D2, D1], amount=[1, 2, 3]))
    t.delete(f"order_id = 1 and day = '{D1}'")
    assert sorted((r["day"], r["order_id"]) for r in read(t)) == [(D1, 2), (D2, 1)]
    t.delete("order_id = 1")
    assert sorted((r["day"], r["order_id"]) for r in read(t)) == [(D1, 2)]
    t.delete(f"order_id in (2, 3) and day = '{D1}' and order_id > 2")
    assert sorted((r["day"], r["order_id"]) for r in read(t)) == [(D1, 2)]
    t.delete(mere.col("order_id").isin([2, 9]) & (mere.col("day") == D1))
    assert read(t) == []


def test_string_and_composite_keys(cat: mere.Catalog) -> None:
    schema = pa.schema([("tenant", pa.string()), ("id", pa.int32()), ("d", pa.date32()), ("v", pa.int64())])
    t = cat.create_table("t.multi", schema, primary_key=["tenant", "id"], partition_by=["d"], buckets=5)
    d1, d2 = dt.date(2026, 11, 21), dt.date(2026, 11, 22)
    t.upsert(
        pa.table(
            {
                "tenant": ["a", "a", "b", "é", ""],
                "id": pa.array([1, 2, 1, 1, 0], pa.int32()),
                "d": [d1, d1, d2, d1, d2],
                "v": [1, 2, 3, 4, 5],
            }
        )
    )
    t.upsert(
        pa.table({"tenant": ["a", "b"], "id": pa.array([2, 1], pa.int32()), "d": [d1, d2], "v": [20, 30]})
    )
    got = {(r["tenant"], r["id"]): r["v"] for r in t.to_arrow().to_pylist()}
    assert got == {("a", 1): 1, ("a", 2): 20, ("b", 1): 30, ("é", 1): 4, ("", 0): 5}
    assert [r["v"] for r in t.scan(filter="tenant = 'a' and id = 2").to_arrow().to_pylist()] == [20]
    assert t.scan(filter="tenant = 'a' and id = 2").explain().buckets_kept == 1
    assert sorted(r["v"] for r in t.scan(filter=f"d = '{d2.isoformat()}'").to_arrow().to_pylist()) == [5, 30]
    t.delete(pa.table({"tenant": ["é"], "id": [1], "d": [d1]}))
    assert ("é", 1) not in {(r["tenant"], r["id"]) for r in t.to_arrow().to_pylist()}
    check_layout(t)


def test_null_partition_values(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    t.upsert(batch(order_id=[1, 2], day=[None, D1], amount=[1, 2]))
    t.upsert(batch(order_id=[1], day=[None], amount=[10]))
    assert by_key(t)[(None, 1)]["amount"] == 10
    assert [r["order_id"] for r in read(t, filter="day is null")] == [1]
    assert [r["order_id"] for r in read(t, filter=f"day = '{D1}'")] == [2]
    t.delete("day is null")
    assert set(by_key(t)) == {(D1, 2)}


# -- layout ----------------------------------------------------------------------------------------------


def check_layout(t: mere.Table) -> None:
    """Every live file: sorted by the key, LZ4 (the default codec) where it shrinks values, statistics, right bucket, Hive partition
    directories."""
    files = t.files().to_pylist()
    assert files
    key = list(t.primary_key)
    for f in files:
        path = local_path(t, f["path"])
        assert f["path"].startswith(t.location + "/")
        pf = pq.ParquetFile(path)
        md = pf.metadata
        assert md.num_rows == f["row_count"]
        assert os.path.getsize(path) == f["size_bytes"]
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            for j in range(rg.num_columns):
                chunk = rg.column(j)
                # LZ4 (LZ4_RAW in Parquet), but bit-packed deltas and values LZ4 does not shrink
                # (mere.io.parquet.value_layout)
                assert chunk.compression in ("LZ4", "UNCOMPRESSED"), (f["path"], chunk.path_in_schema)
                if chunk.compression == "UNCOMPRESSED":
                    kind = md.schema.column(j).physical_type
                    assert "DELTA_BINARY_PACKED" in chunk.encodings or kind in (
                        "FLOAT",
                        "DOUBLE",
                        "BYTE_ARRAY",
                        "INT32",
                        "INT64",
                    ), chunk
                assert chunk.is_stats_set, (f["path"], chunk.path_in_schema)
                assert chunk.statistics.has_null_count
            if key:
                assert [md.schema.column(s.column_index).name for s in rg.sorting_columns] == key
        data = pf.read()
        if key:
            # Sorted by the key, one row per key.
            order = pc.sort_indices(data.select(key), sort_keys=[(k, "ascending") for k in key])
            assert order.to_pylist() == list(range(data.num_rows))
            assert data.select(key).group_by(key).aggregate([]).num_rows == data.num_rows
            # Every row hashes to the file's bucket.
            buckets = mere.bucket_ids(data.select(key), t.spec.buckets)
            assert set(np.asarray(buckets).tolist()) == {f["bucket"]}
            assert f"/bucket-{f['bucket']:05d}/" in f["path"]
        # Hive-style partition directories, in partition_by order, matching the rows.
        partition = json.loads(f["partition"])
        rel = f["path"][len(t.location) + 1 :].split("/")
        dirs = rel[: len(t.spec.partition_by)]
        assert [d.split("=", 1)[0] for d in dirs] == list(t.spec.partition_by)
        for d, c in zip(dirs, t.spec.partition_by):
            value = unquote(d.split("=", 1)[1])
            assert value == (partition[c] if partition[c] is not None else value)
            column = pc.unique(data.column(c).cast(pa.string())).to_pylist()
            assert column == [partition[c]]


def test_layout_of_data_and_delete_files(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    rng = np.random.default_rng(7)
    ids = rng.permutation(500).tolist()
    t.upsert(batch(order_id=ids, day=[(D1, D2, D3)[i % 3] for i in ids], amount=ids, qty=[1] * 500))
    t.upsert(batch(order_id=ids[:100], day=[(D1, D2, D3)[i % 3] for i in ids[:100]], note=["x"] * 100))
    t.delete("order_id < 30")
    t.delete(pa.table({"order_id": [100, 101], "day": [(D1, D2, D3)[100 % 3], (D1, D2, D3)[101 % 3]]}))
    contents = set(t.files().column("content").to_pylist())
    assert contents == {"data", "delete"}
    check_layout(t)
    assert {f.split("/")[2] for f in t.files().column("path").to_pylist()} == {
        f"day={d}" for d in (D1, D2, D3)
    }


def test_partition_values_are_escaped_in_paths(cat: mere.Catalog) -> None:
    t = make_orders(cat)
    odd = ["a/b", "x=y", "50%", "sp ace", "ünï"]
    t.upsert(batch(order_id=list(range(len(odd))), day=odd, amount=[1] * len(odd)))
    check_layout(t)
    for f in t.files().to_pylist():
        rel = f["path"][len(t.location) + 1 :]
        assert rel.count("/") == 2  # day=.../bucket-.../file
    assert {r["day"] for r in read(t)} == set(odd)
    assert [r["order_id"] for r in read(t, filter="day = 'a/b'")] == [0]


def test_files_are_never_modified(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)

    def stat_all() -> dict[str, tuple[int, int, str]]:
        out = {}
        for rel, _, _ in t.storage.list_files(t.location):
            path = local_path(t, rel)
            st_ = os.stat(path)
            with open(path, "rb") as fh:
                out[rel] = (st_.st_size, st_.st_mtime_ns, hashlib.sha256(fh.read()).hexdigest())
        return out

    before = stat_all()
    assert before
    old_read = read(t, version=2)
    t.upsert(order_rows([1, 2, 5]))
    t.delete("order_id = 3")
    t.delete("amount > 50")
    t.overwrite(order_rows([9], day=D2), partition={"day": D2})
    t.upsert(batch(order_id=[1], day=[D1], note=["partial"]))
    t.overwrite(order_rows([11]))
    after = stat_all()
    for rel, meta in before.items():
        assert after.get(rel) == meta, rel
    assert len(after) > len(before)
    assert read(t, version=2) == old_read


def test_cleanup_removes_only_unreferenced_files(cat: mere.Catalog) -> None:
    t = seeded_orders(cat)
    t.overwrite(order_rows([7], day=D2), partition={"day": D2})  # replaced files stay for time travel
    orphan_rel = f"{t.location}/day={D1}/bucket-00000/part-w1-0123456789abcdef0123456789abcdef.parquet"
    pq.write_table(pa.table({"x": [1]}), local_path(t, orphan_rel))
    versions = {v: read(t, version=v) for v in range(t.version + 1)}
    removed = t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert removed == [orphan_rel]
    assert not os.path.exists(local_path(t, orphan_rel))
    assert {v: read(t, version=v) for v in range(t.version + 1)} == versions


def test_filters_on_table_without_key_prune_row_groups_correctly(cat: mere.Catalog) -> None:
    t = cat.create_table(
        "logs.events", EVENTS, partition_by=["day"], properties={"write.row-group-rows": "3"}
    )
    amounts = [None if i % 7 == 0 else (i * 5) % 23 for i in range(40)]
    data = {
        "ts": list(range(40)),
        "day": [(D1, D2)[i % 2] for i in range(40)],
        "amount": amounts,
        "note": [None if i % 5 == 0 else f"n{i % 4}" for i in range(40)],
    }
    t.append(pa.table(data, schema=EVENTS))
    t.append(pa.table(data, schema=EVENTS).slice(10, 5))
    model = pa.table(data, schema=EVENTS).to_pylist() + pa.table(data, schema=EVENTS).slice(10, 5).to_pylist()
    queries: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
        ("amount > 15", lambda r: r["amount"] is not None and r["amount"] > 15),
        ("amount between 3 and 6", lambda r: r["amount"] is not None and 3 <= r["amount"] <= 6),
        ("amount is null or note = 'n1'", lambda r: r["amount"] is None or r["note"] == "n1"),
        (f"day = '{D2}' and ts >= 30", lambda r: r["day"] == D2 and r["ts"] >= 30),
        ("not (amount < 20)", lambda r: r["amount"] is not None and not r["amount"] < 20),
        (
            "note in ('n0', 'n3') and amount <> 5",
            lambda r: r["note"] in ("n0", "n3") and r["amount"] not in (None, 5),
        ),
    ]
    for text, pred in queries:
        assert read(t, filter=text) == sorted((r for r in model if pred(r)), key=sort_key), text
    assert t.scan(filter="ts = 12").explain().row_groups_kept < t.scan().explain().row_groups_total


def test_table_without_key_layout(cat: mere.Catalog) -> None:
    t = cat.create_table("logs.events", EVENTS, partition_by=["day"])
    t.append(pa.table({"ts": [3, 1, 2], "day": [D1, D2, D1], "amount": [1, 2, 3], "note": ["a", "b", "c"]}))
    check_layout(t)
    assert set(t.files().column("bucket").to_pylist()) == {0}


# -- large: buckets bigger than the read window ----------------------------------------------------------


def test_bucket_larger_than_read_window(cat: mere.Catalog) -> None:
    t = cat.create_table(
        "big.orders",
        ORDERS,
        primary_key=["order_id"],
        buckets=2,
        cdc_column="op",
        merge_operators={"qty": "sum"},
        properties={"read.window-bytes": "65536", "write.row-group-rows": "1000"},
    )
    rng = np.random.default_rng(2026)
    n_keys = 60_000
    amount = np.full(n_keys, -1, dtype=np.int64)
    qty = np.zeros(n_keys, dtype=np.int64)
    alive = np.zeros(n_keys, dtype=bool)
    has_qty = np.zeros(n_keys, dtype=bool)
    written = 0
    for step, size in enumerate((40_000, 30_000, 20_000, 15_000)):
        ids = rng.choice(n_keys, size=size, replace=False)
        amounts = rng.integers(0, 1000, size=size)
        qtys = rng.integers(0, 10, size=size)
        t.upsert(
            pa.table(
                {
                    "order_id": pa.array(ids, pa.int64()),
                    "day": pa.array([D1] * size),
                    "amount": pa.array(amounts),
                    "qty": pa.array(qtys),
                }
            )
        )
        amount[ids] = amounts
        qty[ids] = np.where(alive[ids], qty[ids], 0) + qtys
        has_qty[ids] = True
        alive[ids] = True
        written += size
        if step == 1:
            gone = rng.choice(n_keys, size=5_000, replace=False)
            t.delete(pa.table({"order_id": pa.array(gone, pa.int64())}))
            alive[gone] = False
            qty[gone] = 0
            has_qty[gone] = False
    assert written >= 100_000

    ex = t.scan().explain()
    assert ex.row_groups_total > 50
    live = np.flatnonzero(alive)
    batches = list(t.scan().to_batches())
    assert len(batches) > 2
    got = pa.Table.from_batches(batches).sort_by("order_id")
    assert got.column("order_id").to_numpy().tolist() == live.tolist()
    assert np.array_equal(got.column("amount").to_numpy(), amount[live])
    assert np.array_equal(got.column("qty").to_numpy(), qty[live])
    assert got.column("note").null_count == got.num_rows

    filtered = t.scan(columns=["order_id"], filter="amount >= 990").to_arrow().sort_by("order_id")
    assert filtered.column("order_id").to_numpy().tolist() == live[amount[live] >= 990].tolist()
    keys = live[:: max(1, len(live) // 100)][:100].tolist()
    points = (
        t.scan(columns=["order_id", "qty"], filter=mere.col("order_id").isin(keys))
        .to_arrow()
        .sort_by("order_id")
    )
    assert points.column("qty").to_numpy().tolist() == qty[keys].tolist()
    assert t.scan(filter="order_id = 0").count() == int(alive[0])


# -- properties ------------------------------------------------------------------------------------------

KEY_VALUES = st.one_of(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=40, unique=True).map(
        lambda v: pa.array(v, pa.int64())
    ),
    st.lists(st.text(max_size=12), min_size=1, max_size=40, unique=True).map(
        lambda v: pa.array(v, pa.string())
    ),
    st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), min_size=1, max_size=40, unique=True).map(
        lambda v: pa.array(v, pa.int32())
    ),
)


@HYPOTHESIS
@given(keys=KEY_VALUES, buckets=st.integers(min_value=1, max_value=13))
def test_property_rows_land_in_their_spark_bucket(cat: mere.Catalog, keys: pa.Array, buckets: int) -> None:
    schema = pa.schema([("k", keys.type), ("v", pa.int64())])
    t = cat.create_table(f"prop.b{uuid.uuid4().hex[:12]}", schema, primary_key=["k"], buckets=buckets)
    t.upsert(pa.table({"k": keys, "v": pa.array(range(len(keys)), pa.int64())}))
    expected = np.asarray(mere.bucket_ids(pa.table({"k": keys}), buckets))
    assert ((expected >= 0) & (expected < buckets)).all()
    placed: dict[Any, int] = {}
    for f in t.files().to_pylist():
        for k in pq.read_table(local_path(t, f["path"]), columns=["k"]).column("k").to_pylist():
            placed[k] = f["bucket"]
    assert placed == dict(zip(keys.to_pylist(), expected.tolist()))
    # And a point read of any key finds it through bucket pruning.
    probe = keys[0].as_py()
    scan = t.scan(filter=mere.col("k") == probe)
    assert scan.explain().buckets_kept == 1
    assert scan.to_arrow().column("v").to_pylist() == [0]


# Filters: (text, python predicate over a merged row with SQL three-valued logic).
def _cmp(column: str, op: str, value: int) -> tuple[str, Callable[[dict[str, Any]], bool | None]]:
    fns = {
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b,
        "=": lambda a, b: a == b,
        "<>": lambda a, b: a != b,
    }

    def pred(r: dict[str, Any]) -> bool | None:
        return None if r[column] is None else fns[op](r[column], value)

    return f"{column} {op} {value}", pred


ATOMS = st.one_of(
    st.builds(
        _cmp,
        st.sampled_from(["amount", "qty"]),
        st.sampled_from([">", ">=", "<", "=", "<>"]),
        st.integers(min_value=-3, max_value=12),
    ),
    st.builds(
        _cmp, st.just("order_id"), st.sampled_from(["=", "<", ">="]), st.integers(min_value=0, max_value=7)
    ),
    st.sampled_from(
        [
            ("amount is null", lambda r: r["amount"] is None),
            ("amount is not null", lambda r: r["amount"] is not None),
            (f"day = '{D1}'", lambda r: r["day"] == D1),
            ("order_id in (1, 3, 5)", lambda r: r["order_id"] in (1, 3, 5)),
        ]
    ),
)


def _and(a: Any, b: Any) -> tuple[str, Callable[[dict[str, Any]], bool | None]]:
    def pred(r: dict[str, Any]) -> bool | None:
        x, y = a[1](r), b[1](r)
        if x is False or y is False:
            return False
        return None if x is None or y is None else True

    return f"({a[0]}) and ({b[0]})", pred


def _or(a: Any, b: Any) -> tuple[str, Callable[[dict[str, Any]], bool | None]]:
    def pred(r: dict[str, Any]) -> bool | None:
        x, y = a[1](r), b[1](r)
        if x is True or y is True:
            return True
        return None if x is None or y is None else False

    return f"({a[0]}) or ({b[0]})", pred


def _not(a: Any) -> tuple[str, Callable[[dict[str, Any]], bool | None]]:
    def pred(r: dict[str, Any]) -> bool | None:
        x = a[1](r)
        return None if x is None else not x

    return f"not ({a[0]})", pred


FILTERS = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.builds(_and, inner, inner), st.builds(_or, inner, inner), st.builds(_not, inner)
    ),
    max_leaves=4,
)

ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "order_id": st.integers(min_value=0, max_value=7),
            "day": st.sampled_from([D1, D2]),
            "amount": st.one_of(st.none(), st.integers(min_value=-2, max_value=12)),
            "qty": st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
        }
    ),
    min_size=1,
    max_size=12,
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), ROWS),
        st.tuples(
            st.just("delete-keys"),
            st.lists(st.tuples(st.integers(0, 7), st.sampled_from([D1, D2])), min_size=1, max_size=4),
        ),
        st.tuples(st.just("delete-filter"), FILTERS),
    ),
    min_size=1,
    max_size=5,
)


def _model_upsert(model: dict[tuple[str, int], dict[str, Any]], row: dict[str, Any]) -> None:
    key = (row["day"], row["order_id"])
    old = model.get(key)
    qty = row["qty"]
    if old is not None and old["qty"] is not None:
        qty = old["qty"] + (row["qty"] or 0)
    model[key] = {"order_id": row["order_id"], "day": row["day"], "amount": row["amount"], "qty": qty}


@HYPOTHESIS
@given(steps=STEPS, query=FILTERS)
def test_property_filters_after_merge_match_a_model(cat: mere.Catalog, steps: list[Any], query: Any) -> None:
    schema = pa.schema(
        [("order_id", pa.int64()), ("day", pa.string()), ("amount", pa.int64()), ("qty", pa.int64())]
    )
    t = cat.create_table(
        f"prop.f{uuid.uuid4().hex[:12]}",
        schema,
        primary_key=["order_id"],
        partition_by=["day"],
        buckets=3,
        merge_operators={"qty": "sum"},
    )
    model: dict[tuple[str, int], dict[str, Any]] = {}
    for kind, arg in steps:
        if kind == "upsert":
            t.upsert(pa.Table.from_pylist(arg, schema=schema))
            for row in arg:
                _model_upsert(model, row)
        elif kind == "delete-keys":
            t.delete(pa.table({"order_id": [k for k, _ in arg], "day": [d for _, d in arg]}))
            for k, d in arg:
                model.pop((d, k), None)
        else:
            t.delete(arg[0])
            for key in [k for k, r in model.items() if arg[1](r) is True]:
                del model[key]
    text, pred = query
    expected = sorted(
        (r["day"], r["order_id"], r["amount"], r["qty"]) for r in model.values() if pred(r) is True
    )
    got = sorted(
        (r["day"], r["order_id"], r["amount"], r["qty"]) for r in t.scan(filter=text).to_arrow().to_pylist()
    )
    assert got == expected, text
    ids = sorted(r["order_id"] for r in t.scan(columns=["order_id"], filter=text).to_arrow().to_pylist())
    assert ids == sorted(e[1] for e in expected)
    assert sorted((r["day"], r["order_id"]) for r in t.to_arrow().to_pylist()) == sorted(model)


# Tiny row groups and read windows, string keys, CDC, partial columns and every merge operator at once.
WIN_SCHEMA = pa.schema(
    [("k", pa.string()), ("a", pa.int64()), ("b", pa.string()), ("c", pa.int64()), ("s", pa.string())]
)
WIN_OPS = {"b": "last_non_null", "c": "sum", "s": "concat:|"}
WIN_VALUE_COLUMNS = ["a", "b", "c", "s"]
WIN_KEYS = st.text(alphabet="abcé", min_size=0, max_size=3)
WIN_BATCHES = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WIN_VALUE_COLUMNS), unique=True),
        st.lists(
            st.tuples(
                WIN_KEYS,
                st.sampled_from(["I", "U", "D"]),
                st.one_of(st.none(), st.integers(-3, 3)),
                st.one_of(st.none(), st.sampled_from("xyz")),
            ),
            min_size=1,
            max_size=25,
        ),
    ),
    min_size=1,
    max_size=4,
)


def _win_apply(
    model: dict[str, dict[str, Any]], columns: list[str], key: str, op: str, num: int | None, text: str | None
) -> None:
    if op == "D":
        model.pop(key, None)
        return
    values = {"a": num, "b": text, "c": num, "s": text}
    row = model.setdefault(key, {"k": key, "a": None, "b": None, "c": None, "s": None})
    for c in columns:
        new, old = values[c], row[c]
        if c == "a":
            row[c] = new
        elif new is None:
            continue
        elif c == "b" or old is None:
            row[c] = new
        elif c == "c":
            row[c] = old + new
        else:
            row[c] = f"{old}|{new}"


@HYPOTHESIS
@given(batches=WIN_BATCHES, threshold=st.integers(-4, 4))
def test_property_windowed_merge_matches_a_model(
    cat: mere.Catalog, batches: list[Any], threshold: int
) -> None:
    t = cat.create_table(
        f"prop.w{uuid.uuid4().hex[:12]}",
        WIN_SCHEMA,
        primary_key=["k"],
        buckets=2,
        merge_operators=WIN_OPS,
        cdc_column="op",
        properties={"read.window-bytes": "64", "write.row-group-rows": "3"},
    )
    model: dict[str, dict[str, Any]] = {}
    history: list[dict[str, dict[str, Any]]] = [{}]
    for columns, rows in batches:
        data = {"k": pa.array([r[0] for r in rows], pa.string()), "op": pa.array([r[1] for r in rows])}
        for c in columns:
            source = 2 if c in ("a", "c") else 3
            data[c] = pa.array([r[source] for r in rows], WIN_SCHEMA.field(c).type)
        t.upsert(pa.table(data))
        for key, op, num, text in rows:
            _win_apply(model, columns, key, op, num, text)
        history.append({k: dict(v) for k, v in model.items()})

    def rows_of(scan: mere.Scan) -> list[dict[str, Any]]:
        return sorted(scan.to_arrow().to_pylist(), key=lambda r: r["k"])

    assert rows_of(t.scan()) == sorted(model.values(), key=lambda r: r["k"])
    # Windows merged concurrently come out in the order one worker gives them.
    assert t.scan(threads=5).to_arrow().equals(t.scan(threads=1).to_arrow())
    expected = sorted((r["k"], r["c"]) for r in model.values() if r["c"] is not None and r["c"] > threshold)
    got = rows_of(t.scan(columns=["k", "c"], filter=f"c > {threshold}"))
    assert [(r["k"], r["c"]) for r in got] == expected
    for version, state in enumerate(history):
        assert rows_of(t.scan(version=version)) == sorted(state.values(), key=lambda r: r["k"])
    if model:
        key = sorted(model)[len(model) // 2]
        assert rows_of(t.scan(filter=mere.col("k") == key)) == [model[key]]


@pytest.mark.parametrize("key_index", ["on", "off"])
def test_key_index_property_decides_the_index_and_lookups_stay_right(tmp_path: Any, key_index: str) -> None:
    """``write.key-index=off`` writes no Bloom filters and no page index (smaller, cheaper files); point
    lookups still find the right rows, by statistics alone."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    t = mere.connect(str(tmp_path)).create_table(
        "a.t", schema, primary_key="k", buckets=2, properties={"write.key-index": key_index}
    )
    t.upsert(pa.table({"k": pa.array(range(5000), pa.int64()), "v": [str(i) for i in range(5000)]}))
    t.upsert(pa.table({"k": pa.array([7, 4999], pa.int64()), "v": ["seven", "last"]}))
    t.compact(min_files=1)
    t.upsert(pa.table({"k": pa.array([8], pa.int64()), "v": ["eight"]}))
    for path in t.files().column("path").to_pylist():
        md = pq.read_metadata(os.path.join(t.storage.root, path))
        chunk = md.row_group(0).column(0)
        assert chunk.has_offset_index == (key_index == "on"), path
        assert (chunk.to_dict().get("bloom_filter_length") or 0) > 0 if key_index == "on" else True
    got = t.to_arrow(filter="k IN (7, 8, 4999, 123456)").sort_by("k").to_pylist()
    assert got == [{"k": 7, "v": "seven"}, {"k": 8, "v": "eight"}, {"k": 4999, "v": "last"}]
    with pytest.raises(errors.InvalidInput, match=r"write\.key-index"):
        t.set_properties({"write.key-index": "maybe"})


def test_partition_values_longer_than_a_folder_name(local_cat: mere.Catalog) -> None:
    # File systems refuse names over 255 bytes: long values get a cut folder name with a digest, and the
    # catalog keeps the values (two values sharing the cut prefix stay apart).
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("p", pa.string()), ("v", pa.int64())])
    t = local_cat.create_table("n.long", schema, primary_key="id", partition_by="p", buckets=2)
    values = ["x" * 300, "x" * 299 + "y", "é" * 200, "short"]
    t.upsert(pa.table({"id": [1, 2, 3, 4], "p": values, "v": [1, 2, 3, 4]}))
    t.upsert(pa.table({"id": [2], "p": [values[1]], "v": [20]}))
    assert t.scan(filter=f"p = '{values[1]}'").to_arrow().column("v").to_pylist() == [20]
    t.compact(min_files=1)
    got = sorted((r["id"], r["p"], r["v"]) for r in t.to_arrow().to_pylist())
    assert got == [(1, values[0], 1), (2, values[1], 20), (3, values[2], 3), (4, values[3], 4)]
    assert all(
        len(part.encode()) <= 255 for f in t.files().column("path").to_pylist() for part in f.split("/")
    )
