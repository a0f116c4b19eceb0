"""Trial 51: bad values for every argument of the public API, and badly shaped input data.

An independent adversarial check of the rule the README states: "Every error is a
``mere.errors.MereError``; bad input raises before anything is committed". It covers the public
methods that ``tests/test_api_errors.py`` does not throw odd values at (schema evolution, properties,
tags, rollback, snapshots, scan methods, change feeds and consumers, the MERGE builder, table and
catalog transactions, ...), and then the shapes of input data (Arrow types, encodings, chunked arrays,
batches, readers, pandas and Polars frames, duplicate and NULL keys) for every write, against a plain
dict model of the table.

A call given an odd value may succeed when the value happens to be valid; when it raises, the error must
be a ``MereError`` and the table exactly as before (same version, rows, schema, tags and properties).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mere
from mere import errors

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())])
FIRST = {"id": [1, 2], "day": ["d1", "d2"], "qty": [1, 2], "note": ["a", None]}
ROWS = {"id": [5], "day": ["d1"], "qty": [1]}

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2, 2**31, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["", " ", "id", "qty", "nope", "id,qty", "v1", "1; DROP", "∂", "\x00", "t.qty", "s.id"]),
    st.binary(max_size=4),
    st.lists(st.one_of(st.integers(-3, 3), st.sampled_from(["id", "qty", "nope", ""])), max_size=3),
    st.dictionaries(
        st.sampled_from(["id", "qty", "note", "nope", "", "write.compression", "s"]),
        st.one_of(st.none(), st.integers(-2, 2), st.sampled_from(["id", "1", "zstd", "qty + 1", ""])),
        max_size=2,
    ),
    st.sampled_from(
        [
            object(),
            np.int64(1),
            np.int32(-1),
            np.float64(1.0),
            np.bool_(True),
            np.str_("id"),
            pa.scalar(1),
            dt.timedelta(days=-1),
            dt.timedelta(0),
            dt.datetime(1900, 1, 1),
            dt.datetime(2999, 1, 1, tzinfo=dt.UTC),
            dt.date(2020, 1, 1),
            math.nan,
            pa.table({"x": [1]}),
            SCHEMA,
            pa.int64(),
            ("id",),
            {"id"},
            frozenset({"qty"}),
            range(3),
        ]
    ),
)


def _tx(t: mere.Table, act: Callable[[Any], Any], key: Any = None) -> None:
    with t.transaction(key) as tx:
        act(tx)


def _cat_tx(c: mere.Catalog, act: Callable[[Any], Any], key: Any = None) -> None:
    with c.transaction(idempotency_key=key) as tx:
        act(tx)


def _consumer(t: mere.Table, name: str) -> mere.Consumer:
    return t.consumer(name, start_version=1)


# (name, call with the odd value in one argument); calls get (catalog, table, value).
CALLS: list[tuple[str, Callable[[mere.Catalog, mere.Table, Any], Any]]] = [
    # schema evolution
    ("add_column.name", lambda c, t, v: t.add_column(v, pa.int64())),
    ("add_column.type", lambda c, t, v: t.add_column("z", v)),
    ("add_column.default", lambda c, t, v: t.add_column("z", pa.int64(), default=v)),
    ("add_column.default_string", lambda c, t, v: t.add_column("z", pa.string(), default=v)),
    ("drop_column.column", lambda c, t, v: t.drop_column(v)),
    ("rename_column.column", lambda c, t, v: t.rename_column(v, "z")),
    ("rename_column.new_name", lambda c, t, v: t.rename_column("note", v)),
    ("widen.column", lambda c, t, v: t.widen(v, pa.int64())),
    ("widen.type", lambda c, t, v: t.widen("qty", v)),
    ("evolve.add_column", lambda c, t, v: t.evolve().add_column(v, "int64").commit()),
    ("evolve.rename_column", lambda c, t, v: t.evolve().rename_column("note", v).commit()),
    ("evolve.widen", lambda c, t, v: t.evolve().widen("qty", v).commit()),
    ("set_sequence_by.columns", lambda c, t, v: t.set_sequence_by(v)),
    # properties
    ("set_properties.updates", lambda c, t, v: t.set_properties(v)),
    ("set_properties.compression", lambda c, t, v: t.set_properties({"write.compression": v})),
    ("set_properties.row_group_rows", lambda c, t, v: t.set_properties({"write.row-group-rows": v})),
    ("set_properties.max_age", lambda c, t, v: t.set_properties({"retention.max-age": v})),
    ("set_properties.changes_log", lambda c, t, v: t.set_properties({"changes.log": v})),
    # versions, tags, rollback, snapshots, history
    ("rollback.version", lambda c, t, v: t.rollback(v)),
    ("rollback.tag", lambda c, t, v: t.rollback(tag=v)),
    ("tag.name", lambda c, t, v: t.tag(v, 1)),
    ("tag.version", lambda c, t, v: t.tag("x", v)),
    ("tag.replace", lambda c, t, v: t.tag("v1", 2, replace=v)),
    ("untag.name", lambda c, t, v: t.untag(v)),
    ("snapshot.version", lambda c, t, v: t.snapshot(v)),
    ("snapshot.as_of", lambda c, t, v: t.snapshot(as_of=v)),
    ("snapshot.tag", lambda c, t, v: t.snapshot(tag=v)),
    ("resolve_version.version", lambda c, t, v: t.resolve_version(v)),
    ("spec_at.version", lambda c, t, v: t.spec_at(v)),
    ("files_at.version", lambda c, t, v: t.files_at(v)),
    ("inspect.files.version", lambda c, t, v: t.inspect.files(v)),
    # scans and their methods
    ("scan.tag", lambda c, t, v: t.scan(tag=v).to_arrow()),
    ("scan.threads", lambda c, t, v: t.scan(threads=v).to_arrow()),
    ("scan.min", lambda c, t, v: t.scan().min(v)),
    ("scan.max", lambda c, t, v: t.scan().max(v)),
    ("scan.count.filter", lambda c, t, v: t.scan(filter=v).count()),
    ("scan.count.version", lambda c, t, v: t.scan(version=v).count()),
    ("scan.explain.filter", lambda c, t, v: str(t.scan(filter=v).explain())),
    ("scan.explain.columns", lambda c, t, v: str(t.scan(columns=v).explain())),
    ("scan.plan.filter", lambda c, t, v: t.scan(filter=v).plan()),
    ("scan.tasks.columns", lambda c, t, v: t.scan(columns=v).tasks()),
    ("scan.batches.version", lambda c, t, v: list(t.scan(version=v).to_batches())),
    ("scan.reader.columns", lambda c, t, v: t.scan(columns=v).to_reader().read_all()),
    ("scan.polars.filter", lambda c, t, v: t.scan(filter=v).to_polars()),
    ("scan.pandas.columns", lambda c, t, v: t.scan(columns=v).to_pandas()),
    ("scan.select.count", lambda c, t, v: t.scan().select(v).count()),
    ("scan.where.min", lambda c, t, v: t.scan().where(v).min("qty")),
    ("to_arrow.filter", lambda c, t, v: t.to_arrow(filter=v)),
    ("to_arrow.option", lambda c, t, v: t.to_arrow(threads=v)),
    # change feeds and consumers
    ("changes.start_version", lambda c, t, v: t.changes(v).read_all()),
    ("changes.end_version", lambda c, t, v: t.changes(1, v).read_all()),
    ("changes.columns", lambda c, t, v: t.changes(1, columns=v).read_all()),
    ("changes.filter", lambda c, t, v: t.changes(1, filter=v).read_all()),
    ("changes.consumer", lambda c, t, v: t.changes(consumer=v).read_all()),
    ("consumer.name", lambda c, t, v: t.consumer(v)),
    ("consumer.start_version", lambda c, t, v: t.consumer("c1", start_version=v)),
    ("consumer.create", lambda c, t, v: t.consumer("c2", create=v)),
    ("consumer.commit", lambda c, t, v: _consumer(t, "c3").commit(v)),
    ("consumer.seek", lambda c, t, v: _consumer(t, "c4").seek(v)),
    ("consumer.changes.end_version", lambda c, t, v: _consumer(t, "c5").changes(v)[1].read_all()),
    ("consumer.changes.columns", lambda c, t, v: _consumer(t, "c6").changes(columns=v)[1].read_all()),
    ("drop_consumer.name", lambda c, t, v: t.drop_consumer(v)),
    ("follow.poll_seconds", lambda c, t, v: next(t.follow(1, poll_seconds=v, max_poll_seconds=0.01))),
    ("follow.columns", lambda c, t, v: next(t.follow(1, columns=v, poll_seconds=0.01))),
    # row-level writes
    ("update.set", lambda c, t, v: t.update(v)),
    ("update.set_value", lambda c, t, v: t.update({"qty": v})),
    ("update.set_column", lambda c, t, v: t.update({v: "1"})),
    ("update.where", lambda c, t, v: t.update({"note": "'u'"}, where=v)),
    ("overwrite.dynamic", lambda c, t, v: t.overwrite(ROWS, dynamic=v)),
    ("upsert.evolve", lambda c, t, v: t.upsert({"id": [7], "day": ["d1"], "zz": [1]}, evolve=v)),
    ("append.evolve", lambda c, t, v: t.append({"id": [7], "day": ["d1"], "zz": [1]}, evolve=v)),
    # the MERGE builder
    ("merge.source", lambda c, t, v: t.merge(v).when_matched_update_all().execute()),
    ("merge.on", lambda c, t, v: t.merge(ROWS, on=v).when_matched_update_all().execute()),
    ("merge.source_alias", lambda c, t, v: t.merge(ROWS, source_alias=v).when_matched_delete().execute()),
    ("merge.target_alias", lambda c, t, v: t.merge(ROWS, target_alias=v).when_matched_delete().execute()),
    ("merge.update.set", lambda c, t, v: t.merge(ROWS).when_matched_update(v).execute()),
    (
        "merge.update.condition",
        lambda c, t, v: t.merge(ROWS).when_matched_update({"qty": "s.qty"}, condition=v).execute(),
    ),
    ("merge.delete.condition", lambda c, t, v: t.merge(ROWS).when_matched_delete(v).execute()),
    ("merge.do_nothing.condition", lambda c, t, v: t.merge(ROWS).when_matched_do_nothing(v).execute()),
    ("merge.insert.values", lambda c, t, v: t.merge(ROWS).when_not_matched_insert(v).execute()),
    ("merge.insert_all.condition", lambda c, t, v: t.merge(ROWS).when_not_matched_insert_all(v).execute()),
    (
        "merge.by_source_delete.condition",
        lambda c, t, v: t.merge(ROWS).when_not_matched_by_source_delete(v).execute(),
    ),
    (
        "merge.by_source_update.set",
        lambda c, t, v: t.merge(ROWS).when_not_matched_by_source_update(v).execute(),
    ),
    ("merge.explain.source", lambda c, t, v: t.merge(v).when_matched_update_all().explain()),
    # table transactions
    ("transaction.key", lambda c, t, v: _tx(t, lambda tx: tx.upsert(ROWS), key=v)),
    ("transaction.upsert", lambda c, t, v: _tx(t, lambda tx: tx.upsert(v))),
    ("transaction.append", lambda c, t, v: _tx(t, lambda tx: tx.append(v))),
    ("transaction.delete", lambda c, t, v: _tx(t, lambda tx: tx.delete(v))),
    ("transaction.update", lambda c, t, v: _tx(t, lambda tx: tx.update(v))),
    ("transaction.overwrite.partition", lambda c, t, v: _tx(t, lambda tx: tx.overwrite(ROWS, partition=v))),
    ("transaction.set_properties", lambda c, t, v: _tx(t, lambda tx: tx.set_properties(v))),
    (
        "transaction.upsert_then_bad_delete",
        lambda c, t, v: _tx(t, lambda tx: (tx.upsert(ROWS), tx.delete(v))),
    ),
    # catalog-level
    (
        "catalog.transaction.key",
        lambda c, t, v: _cat_tx(c, lambda tx: tx.table("sales.orders").upsert(ROWS), v),
    ),
    ("catalog.transaction.table", lambda c, t, v: _cat_tx(c, lambda tx: tx.table(v).upsert(ROWS))),
    (
        "catalog.transaction.create_table.schema",
        lambda c, t, v: _cat_tx(
            c, lambda tx: (tx.table("sales.orders").upsert(ROWS), tx.create_table("x.n", v))
        ),
    ),
    (
        "catalog.transaction.create_table.name",
        lambda c, t, v: _cat_tx(
            c, lambda tx: (tx.table("sales.orders").upsert(ROWS), tx.create_table(v, SCHEMA))
        ),
    ),
    ("catalog.snapshot.as_of", lambda c, t, v: c.snapshot(v).table("sales.orders").scan().to_arrow()),
    ("catalog.snapshot.table", lambda c, t, v: c.snapshot().table(v).scan().count()),
    ("catalog.snapshot.version", lambda c, t, v: c.snapshot().version(v)),
    ("catalog.load_table", lambda c, t, v: c.load_table(v)),
    ("catalog.table_name", lambda c, t, v: c.table_name(v)),
    (
        "catalog.create_table.sequence_by",
        lambda c, t, v: c.create_table("x.s", SCHEMA, primary_key="id", sequence_by=v),
    ),
    (
        "catalog.create_table.key_scope",
        lambda c, t, v: c.create_table("x.k", SCHEMA, primary_key="id", partition_by="day", key_scope=v),
    ),
    (
        "connect.threads",
        lambda c, t, v: mere.connect(c.storage.uri, threads=v).table("sales.orders").to_arrow(),
    ),
    ("sql.text", lambda c, t, v: mere.sql(v, catalog=c)),
    ("sql.catalog", lambda c, t, v: mere.sql("DELETE FROM sales.orders WHERE id = 1", catalog=v)),
    # maintenance
    ("compact.splits", lambda c, t, v: t.compact(min_files=1, splits=v)),
    ("compact.tiered", lambda c, t, v: t.compact(min_files=1, tiered=v)),
    ("plan_compaction.min_files", lambda c, t, v: t.plan_compaction(v)),
    ("compaction_due.version", lambda c, t, v: t.compaction_due(v)),
    ("auto_compact.version", lambda c, t, v: t.auto_compact(v)),
    ("expire.dry_run", lambda c, t, v: t.expire(dt.timedelta(0), dry_run=v)),
    ("cleanup.dry_run", lambda c, t, v: t.cleanup(dt.timedelta(0), dry_run=v)),
    ("partition_values.partition", lambda c, t, v: t.partition_values(v)),
    ("find_commit.key", lambda c, t, v: t.find_commit(v)),
]


def _table(tmp: Path) -> tuple[mere.Catalog, mere.Table]:
    cat = mere.connect(str(tmp / "wh"))
    t = cat.create_table(
        "sales.orders",
        SCHEMA,
        primary_key="id",
        partition_by="day",
        buckets=2,
        merge_operators={"qty": "sum"},
        cdc_column="op",
        properties={"compaction.auto": "off"},
    )
    t.upsert(pa.table(FIRST))
    t.upsert(pa.table({"id": [3], "day": ["d1"], "qty": [3], "note": ["c"]}))
    t.tag("v1", 1)
    return cat, t


def state(t: mere.Table) -> tuple[Any, ...]:
    t = t.refresh()
    return (
        t.version,
        sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"]),
        t.schema,
        t.tags(),
        dict(t.properties),
        sorted(t.files().column("path").to_pylist()),
    )


VALUE_AS_KEY = {"update.set_column"}


def _check(cat: mere.Catalog, t: mere.Table, name: str, value: Any) -> None:
    call = dict(CALLS)[name]
    before = state(t)
    try:
        call(cat, t, value)
    except errors.MereError:
        assert state(t) == before, f"{name}({value!r}) raised but changed the table"
    except Exception as e:  # any other error is the failure this test looks for
        pytest.fail(f"{name}({value!r}) raised {type(e).__module__}.{type(e).__name__}: {e}")
    else:
        t.refresh().scan().to_arrow()  # whatever it accepted, the table stays readable


@pytest.mark.parametrize("name", [name for name, _ in CALLS])
def test_property_odd_values_raise_mere_errors_and_change_nothing(tmp_path: Path, name: str) -> None:
    cat, t = _table(tmp_path)

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(value=ODD)
    def check(value: Any) -> None:
        if name in VALUE_AS_KEY:
            assume(isinstance(value, Hashable))  # {value: ...} cannot be built in Python otherwise
        _check(cat, t, name, value)

    check()


# ---------------------------------------------------------------------------------------------------
# Input data of every shape, for every write, against a dict model.

BASE = pa.table({"id": [1, 6], "day": ["d1", "d3"], "qty": [7, 8], "note": ["x", "y"]})


def _col(i: int, name: str, arr: pa.Array) -> pa.Table:
    return BASE.set_column(i, name, arr)


# Shapes that carry exactly BASE's rows: every write must treat them as BASE.
SAME = {
    "int32_id": lambda: _col(0, "id", pa.array([1, 6], pa.int32())),
    "uint8_id": lambda: _col(0, "id", pa.array([1, 6], pa.uint8())),
    "exact_float_id": lambda: _col(0, "id", pa.array([1.0, 6.0])),
    "int8_qty": lambda: _col(2, "qty", pa.array([7, 8], pa.int8())),
    "dictionary_day": lambda: _col(1, "day", pa.array(["d1", "d3"]).dictionary_encode()),
    "dictionary_id": lambda: _col(0, "id", pa.array([1, 6]).dictionary_encode()),
    "large_string_note": lambda: _col(3, "note", pa.array(["x", "y"], pa.large_string())),
    "string_view_day": lambda: _col(1, "day", pa.array(["d1", "d3"], pa.string_view())),
    "run_end_qty": lambda: _col(2, "qty", pa.RunEndEncodedArray.from_arrays([1, 2], [7, 8])),
    "chunked": lambda: pa.Table.from_batches(BASE.to_batches(max_chunksize=1)),
    "columns_reordered": lambda: BASE.select(["note", "qty", "day", "id"]),
    "record_batch": lambda: BASE.to_batches()[0],
    "reader": lambda: pa.RecordBatchReader.from_batches(BASE.schema, BASE.to_batches(max_chunksize=1)),
    "pandas": lambda: BASE.to_pandas(),
    "pandas_nullable": lambda: BASE.to_pandas().astype({"id": "Int64", "qty": "Int32"}),
    "pandas_categorical": lambda: BASE.to_pandas().astype({"day": "category"}),
    "dict_of_lists": lambda: BASE.to_pydict(),
    "dict_of_numpy": lambda: {k: np.array(v) for k, v in BASE.to_pydict().items()},
}

# Shapes a write must refuse (with a MereError, changing nothing).
REFUSED = {
    "uint64_beyond_int64": lambda: _col(0, "id", pa.array([2**63, 6], pa.uint64())),
    "fractional_float_id": lambda: _col(0, "id", pa.array([1.5, 6.0])),
    "nan_qty": lambda: _col(2, "qty", pa.array([math.nan, 1.0])),
    "bool_qty": lambda: _col(2, "qty", pa.array([True, False])),
    "string_qty": lambda: _col(2, "qty", pa.array(["7", "8"])),
    "int_note": lambda: _col(3, "note", pa.array([1, 2])),
    "binary_note": lambda: _col(3, "note", pa.array([b"x", b"y"])),
    "list_qty": lambda: _col(2, "qty", pa.array([[7], [8]])),
    "timestamp_day": lambda: _col(1, "day", pa.array([dt.datetime(2020, 1, 1)] * 2)),
    "null_key": lambda: _col(0, "id", pa.array([1, None], pa.int64())),
    "pandas_nan_key": lambda: pd.DataFrame({"id": [1, np.nan], "day": ["d1", "d3"], "qty": [7, 8]}),
    "pandas_mixed_key": lambda: pd.DataFrame({"id": [1, "6"], "day": ["d1", "d3"], "qty": [7, 8]}),
    "pandas_key_in_index": lambda: BASE.to_pandas().set_index("id"),
    "missing_key": lambda: BASE.drop_columns(["id"]),
    "no_columns": lambda: pa.table({}),
    "case_renamed_key": lambda: BASE.rename_columns(["ID", "day", "qty", "note"]),
    "ragged_dict": lambda: {"id": [1, 6], "day": ["d1"], "qty": [7, 8]},
    "scalar_dict": lambda: {"id": 1, "day": "d1", "qty": 7},
    "list_of_dicts": lambda: [{"id": 1, "day": "d1", "qty": 7}],
    "numpy_2d": lambda: np.array([[1, 7]]),
    "bytes": lambda: b"\x00\x01",
    "int": lambda: 5,
    "schema": lambda: SCHEMA,
    "polars_lazy": lambda: pytest.importorskip("polars").from_arrow(BASE).lazy(),
}


def _keyed(tmp: Path) -> mere.Table:
    cat = mere.connect(str(tmp / "wh"))
    t = cat.create_table(
        "s.k", SCHEMA, primary_key="id", partition_by="day", buckets=2, properties={"compaction.auto": "off"}
    )
    t.upsert(pa.table(FIRST))
    return t


def _plain(tmp: Path) -> mere.Table:
    cat = mere.connect(str(tmp / "wh"))
    t = cat.create_table("s.p", SCHEMA, partition_by="day")
    t.append(pa.table(FIRST))
    return t


Row = tuple[Any, Any, Any, Any]


def _rows(t: mere.Table) -> list[Row]:
    return sorted(
        ((r["id"], r["day"], r["qty"], r["note"]) for r in t.scan().to_arrow().to_pylist()),
        key=lambda r: (r[0], str(r)),
    )


OLD: list[Row] = [(1, "d1", 1, "a"), (2, "d2", 2, None)]
NEW: list[Row] = [(1, "d1", 7, "x"), (6, "d3", 8, "y")]


def _merge(t: mere.Table, data: Any) -> Any:
    return t.merge(data).when_matched_update_all().when_not_matched_insert_all().execute()


def _tx_upsert(t: mere.Table, data: Any) -> None:
    with t.transaction() as tx:
        tx.upsert(data)


# op -> (table maker, the write, the expected rows after writing BASE)
WRITES: dict[str, tuple[Callable[[Path], mere.Table], Callable[[mere.Table, Any], Any], list[Row]]] = {
    "upsert": (_keyed, lambda t, d: t.upsert(d), sorted([OLD[1], *NEW])),
    "transaction_upsert": (_keyed, _tx_upsert, sorted([OLD[1], *NEW])),
    "merge": (_keyed, _merge, sorted([OLD[1], *NEW])),
    "delete_rows": (_keyed, lambda t, d: t.delete(d), [OLD[1]]),
    "overwrite": (_keyed, lambda t, d: t.overwrite(d), NEW),
    "overwrite_dynamic": (_keyed, lambda t, d: t.overwrite(d, dynamic=True), sorted([OLD[1], *NEW])),
    "append_plain": (_plain, lambda t, d: t.append(d), sorted([*OLD, *NEW], key=lambda r: (r[0], str(r)))),
    "overwrite_plain": (_plain, lambda t, d: t.overwrite(d), NEW),
}
# Which refusals do not apply to a write: delete reads only the key (and partition) columns of its rows.
NOT_REFUSED_BY = {
    "delete_rows": {"nan_qty", "bool_qty", "string_qty", "int_note", "binary_note", "list_qty"},
}
# Which shapes a keyed write refuses but a table without a key takes (there is no key to check).
KEYLESS_TAKES = {"null_key", "pandas_nan_key", "missing_key", "pandas_key_in_index", "case_renamed_key"}


@pytest.mark.parametrize("shape", sorted(SAME))
@pytest.mark.parametrize("op", sorted(WRITES))
def test_every_shape_of_the_same_rows_writes_the_same(tmp_path: Path, op: str, shape: str) -> None:
    make, write, expected = WRITES[op]
    t = make(tmp_path)
    version = t.version
    write(t, SAME[shape]())
    assert _rows(t) == expected
    assert t.version == version + 1


@pytest.mark.parametrize(
    ("op", "shape"),
    [
        (op, shape)
        for op in sorted(WRITES)
        for shape in sorted(REFUSED)
        if shape not in NOT_REFUSED_BY.get(op, set())
        and not (WRITES[op][0] is _plain and shape in KEYLESS_TAKES)  # the write takes the shape
    ],
)
def test_badly_shaped_data_is_refused_and_changes_nothing(tmp_path: Path, op: str, shape: str) -> None:
    make, write, _ = WRITES[op]
    t = make(tmp_path)
    before = (t.version, _rows(t), sorted(t.files().column("path").to_pylist()))
    with pytest.raises(errors.MereError):
        write(t, REFUSED[shape]())
    t = t.refresh()
    assert (t.version, _rows(t), sorted(t.files().column("path").to_pylist())) == before


def test_polars_frames_write_like_arrow(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    t = _keyed(tmp_path)
    t.upsert(pl.from_arrow(BASE))
    assert _rows(t) == sorted([OLD[1], *NEW])
    t.merge(pl.DataFrame({"id": [6]})).when_matched_delete().execute()
    assert _rows(t) == [(1, "d1", 7, "x"), OLD[1]]


def test_duplicate_keys_in_one_batch_apply_in_order_and_merge_refuses_them(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    dup = pa.table({"id": [2, 2, 9], "day": ["d2", "d2", "d9"], "qty": [5, 6, 1], "note": ["p", "q", None]})
    version = t.version
    with pytest.raises(errors.MergeConflict):
        _merge(t, dup)
    assert t.version == version and _rows(t) == OLD
    t.upsert(dup)  # rows of one batch apply in order: the last of a key wins
    assert _rows(t) == [OLD[0], (2, "d2", 6, "q"), (9, "d9", 1, None)]
    t.delete(dup)  # deleting a key twice in one batch deletes it once
    assert _rows(t) == [OLD[0]]


def test_a_cdc_column_of_odd_types_is_refused(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("s.c", SCHEMA, primary_key="id", cdc_column="op")
    t.upsert(pa.table(FIRST))
    before = (t.version, _rows(t))
    for op in (pa.array(["X", "I"]), pa.array([None, "I"], pa.string()), pa.array([1, 2])):
        with pytest.raises(errors.MereError):
            t.upsert(BASE.append_column("op", op))
        assert (t.version, _rows(t)) == before
    t.upsert(
        BASE.append_column("op", pa.array(["U", "d"]).dictionary_encode())
    )  # dictionary-encoded ops work
    assert _rows(t) == [(1, "d1", 7, "x"), OLD[1]]


def test_huge_python_ints_in_a_merge_source_are_refused(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    before = (t.version, _rows(t))
    with pytest.raises(errors.InvalidInput):
        _merge(t, {"id": [2**64], "day": ["d1"], "qty": [1]})
    assert (t.version, _rows(t)) == before


def test_create_table_refuses_odd_layouts_and_creates_nothing(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    i64 = pa.int64()
    two = pa.schema([("id", i64), ("v", i64)])
    cases: list[tuple[Any, dict[str, Any]]] = [
        (pa.schema([("id", i64), ("id", i64)]), {}),
        (pa.schema([]), {}),
        (pa.schema([("", i64)]), {}),
        (pa.schema([("id", pa.float64())]), {"primary_key": "id"}),
        (pa.schema([("id", pa.struct([("a", i64)]))]), {"primary_key": "id"}),
        (pa.schema([("id", i64), ("p", pa.float64())]), {"primary_key": "id", "partition_by": "p"}),
        (two, {"primary_key": ["id", "id"]}),
        (two, {"primary_key": "id,v"}),
        (two, {"primary_key": "id", "partition_by": ["v", "v"]}),
        (two, {"primary_key": "id", "cdc_column": ""}),
        (two, {"primary_key": "id", "merge_operators": {"id": "sum"}}),
        (two, {"primary_key": "id", "merge_operators": {"v": None}}),
        (two, {"primary_key": "id", "merge_operators": {"v": "avg"}}),
        (two, {"merge_operators": {"v": "sum"}}),
        (two, {"buckets": 4}),
        (two, {"primary_key": "id", "buckets": True}),
        (two, {"primary_key": "id", "buckets": 4.0}),
        (two, {"primary_key": "id", "buckets": np.int64(4)}),
        (two, {"primary_key": "id", "sequence_by": "id"}),
        (two, {"sequence_by": "v"}),
        (two, {"primary_key": "id", "key_scope": "TABLE"}),
        (two, {"key_scope": "table"}),
        (two, {"properties": {"write.row-group-rows": 0}}),
        (two, {"properties": {"compaction.auto": True}}),
        (two, {"properties": {"write.compression": None}}),
        (two, {"properties": {b"team": "a"}}),
        (two, {"properties": {"retention.max-age": "-1d"}}),
        (pa.table({"id": [1]}), {}),
    ]
    for schema, options in cases:
        with pytest.raises(errors.MereError):
            cat.create_table("n.t", schema, **options)
        assert not cat.exists("n.t"), (schema, options)
    for name in (b"a.b", "a/b.c", "..x", " a . b ", "a.b\x00", "a." + "b" * 5000, "", None, 5):
        with pytest.raises(errors.MereError):
            cat.create_table(name, two)  # type: ignore[arg-type]
    assert cat.tables() == []


def test_schema_evolution_refusals_change_nothing(tmp_path: Path) -> None:
    _, t = _table(tmp_path)
    refused: list[Callable[[], Any]] = [
        lambda: t.add_column("id", "int64"),
        lambda: t.add_column("ID", "int64"),
        lambda: t.add_column("z", "not a type"),
        lambda: t.add_column("z", pa.null()),
        lambda: t.add_column("z", pa.month_day_nano_interval()),
        lambda: t.add_column("z", "int64", default="x"),
        lambda: t.add_column("z", "int64", default=2**70),
        lambda: t.add_column("z", "int64", default=math.nan),
        lambda: t.add_column("z", "int64", default=True),
        lambda: t.add_column("z", "int8", default=1000),
        lambda: t.add_column("z", pa.timestamp("us", "UTC"), default=dt.datetime(2020, 1, 1)),
        lambda: t.add_column("z", pa.struct([("a", pa.int64())]), default={"b": 1}),
        lambda: t.add_column("_mere_op", "int64"),
        lambda: t.drop_column("id"),
        lambda: t.drop_column("day"),
        lambda: t.drop_column("nope"),
        lambda: t.rename_column("note", "qty"),
        lambda: t.rename_column("id", "id2"),
        lambda: t.rename_column("day", "d"),
        lambda: t.rename_column("note", ""),
        lambda: t.rename_column("note", "note"),
        lambda: t.widen("qty", "int32"),
        lambda: t.widen("qty", "double"),
        lambda: t.widen("qty", "string"),
        lambda: t.widen("id", "decimal128(38, 0)"),
        lambda: t.widen("day", "large_string"),
        lambda: t.evolve().add_column("z", "int64").drop_column("id").commit(),
        lambda: t.evolve().add_column("z", "int64").add_column("z", "int64").commit(),
        lambda: t.set_sequence_by("id"),
        lambda: t.set_sequence_by("qty"),  # a sum column cannot be ordered by a sequence
        lambda: t.set_sequence_by("nope"),
        lambda: t.set_properties({}),
        lambda: t.set_properties({"write.compression": "zstd", "write.compresion": "x"}),
        lambda: t.set_properties({"write.row-group-rows": 1.5}),
        lambda: t.set_properties([("write.compression", "zstd")]),  # type: ignore[arg-type]
    ]
    before = state(t)
    for call in refused:
        with pytest.raises(errors.MereError):
            call()
        assert state(t) == before


def test_scan_methods_refuse_unknown_columns(tmp_path: Path) -> None:
    _, t = _table(tmp_path)
    for call in (
        lambda: t.scan().min("nope"),
        lambda: t.scan().max(""),
        lambda: t.scan(columns=["nope"]).count(),
        lambda: t.scan().select("nope").to_arrow(),
        lambda: t.scan(filter="nope > 1").explain(),
        lambda: t.scan(filter="nope > 1").plan(),
        lambda: list(t.scan(filter="qty >").to_batches()),
        lambda: t.scan(version=99).count(),
        lambda: t.scan(tag="nope").count(),
        lambda: t.scan(version=1, tag="v1").count(),
    ):
        with pytest.raises(errors.MereError):
            call()
    assert t.scan().min("qty") == 1 and t.scan().max("qty") == 3 and t.scan().count() == 3


# ---------------------------------------------------------------------------------------------------
# Bugs found (strict xfails: each fails today for the reason given).


@pytest.mark.parametrize("groups", [["v"], "v", True, 1, [("s", ["v"])]])
def test_sequence_groups_that_are_no_mapping_are_refused(tmp_path: Path, groups: Any) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("id", pa.int64()), ("s", pa.int64()), ("v", pa.int64())])
    with pytest.raises(errors.MereError):
        cat.create_table("x.y", schema, primary_key="id", sequence_by="s", sequence_groups=groups)
    assert not cat.exists("x.y")


HUGE_INT_WRITES: dict[str, tuple[Callable[[Path], mere.Table], Callable[[mere.Table, Any], Any]]] = {
    "upsert": (_keyed, lambda t, d: t.upsert(d)),
    "delete": (_keyed, lambda t, d: t.delete(d)),
    "overwrite": (_keyed, lambda t, d: t.overwrite(d)),
    "overwrite_dynamic": (_keyed, lambda t, d: t.overwrite(d, dynamic=True)),
    "transaction_upsert": (_keyed, _tx_upsert),
    "append": (_plain, lambda t, d: t.append(d)),
}


@pytest.mark.parametrize("op", sorted(HUGE_INT_WRITES))
def test_huge_python_ints_in_a_dict_are_refused(tmp_path: Path, op: str) -> None:
    make, write = HUGE_INT_WRITES[op]
    t = make(tmp_path)
    before = (t.version, _rows(t))
    with pytest.raises(errors.MereError):
        write(t, {"id": [2**64], "day": ["d1"], "qty": [1]})
    assert (t.version, _rows(t)) == before


def test_delete_rows_with_a_repeated_column_name_is_refused(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    before = (t.version, _rows(t))
    with pytest.raises(errors.SchemaMismatch):
        t.delete(pa.Table.from_arrays([pa.array([1]), pa.array([1])], names=["id", "id"]))
    assert (t.version, _rows(t)) == before


def test_a_row_group_size_beyond_int64_is_refused_or_harmless_after_set_properties(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    try:
        t.set_properties({"write.row-group-rows": 2**63})
    except errors.MereError:
        return  # refused: the right answer
    t.upsert(pa.table({"id": [7], "day": ["d1"], "qty": [1], "note": ["n"]}))  # must not fail raw
    assert (7, "d1", 1, "n") in _rows(t)


def test_a_row_group_size_beyond_int64_is_refused_at_creation(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    try:
        t = cat.create_table("s.r", SCHEMA, primary_key="id", properties={"write.row-group-rows": 2**63})
    except errors.MereError:
        assert not cat.exists("s.r")
        return
    t.upsert(pa.table(FIRST))  # must not fail raw
    assert _rows(t) == OLD


def test_drop_if_unchanged_refuses_a_bool_version(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("s.d", SCHEMA, primary_key="id")
    t.upsert(pa.table(FIRST))
    assert t.version == 1
    try:
        with pytest.raises(errors.InvalidInput):
            cat.drop_if_unchanged(t, True)  # type: ignore[arg-type]
    finally:
        assert cat.exists("s.d")


def test_drop_if_unchanged_keeps_a_table_that_changed(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("s.d", SCHEMA, primary_key="id")
    t.upsert(pa.table(FIRST))
    assert cat.drop_if_unchanged(t, 0) is False and cat.exists("s.d")
    assert t.scan().count() == 2


@pytest.mark.parametrize("kind", ["polars", "reader"])
def test_delete_takes_streams_of_keys(tmp_path: Path, kind: str) -> None:
    t = _keyed(tmp_path)
    keys = pa.table({"id": [1]})
    if kind == "polars":
        data: Any = pytest.importorskip("polars").from_arrow(keys)
    else:
        data = pa.RecordBatchReader.from_batches(keys.schema, keys.to_batches())
    t.delete(data)
    assert _rows(t) == [OLD[1]]


@pytest.mark.parametrize("how", ["filter", "keys"])
def test_a_merge_after_a_delete_of_its_key_in_one_transaction_is_refused_or_inserts(
    tmp_path: Path, how: str
) -> None:
    t = _keyed(tmp_path)
    source = {"id": [1], "day": ["d1"], "qty": [5], "note": ["m"]}
    try:
        with t.transaction() as tx:
            tx.delete("id = 1" if how == "filter" else pa.table({"id": [1], "day": ["d1"]}))
            tx.merge(source).when_not_matched_insert_all().execute()
    except errors.InvalidInput:
        assert _rows(t) == OLD  # refused: nothing committed
        return
    assert _rows(t) == [(1, "d1", 5, "m"), OLD[1]]  # or the MERGE saw the delete and inserted the key


def test_a_merge_after_a_delete_that_updates_its_row_is_refused(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    version = t.version
    with pytest.raises(errors.InvalidInput), t.transaction() as tx:
        tx.delete("id = 1")
        tx.merge({"id": [1], "day": ["d1"], "qty": [5]}).when_matched_update_all().execute()
    assert t.version == version and _rows(t) == OLD


def test_a_non_mere_error_inside_a_transaction_commits_nothing(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    version = t.version
    with pytest.raises(RuntimeError, match="user"), t.transaction() as tx:
        tx.upsert({"id": [7], "day": ["d1"]})
        raise RuntimeError("user")
    assert t.version == version and _rows(t) == OLD


def test_sql_expressions_that_fail_on_a_row_refuse_the_whole_statement(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("i8", pa.int8())])
    t = cat.create_table("s.e", schema, primary_key="id", partition_by="day")
    t.upsert({"id": [1, 2], "day": ["d1", "d2"], "qty": [1, 2], "i8": pa.array([1, 2], pa.int8())})
    before = (t.version, t.scan().to_arrow().sort_by("id"))
    for call in (
        lambda: t.update({"i8": "i8 + 200"}),  # leaves int8
        lambda: t.update({"qty": "qty + 9223372036854775807"}),  # leaves int64
        lambda: t.update({"qty": "qty / 0"}),  # inf into an integer
        lambda: t.update({"qty": "CAST(day AS BIGINT)"}),
        lambda: t.delete("CAST(day AS BIGINT) = 1"),
        lambda: t.update({"qty": "1"}, where="qty"),  # not a boolean
        lambda: (
            t.merge({"id": [1], "day": ["d1"], "qty": [100]})
            .when_matched_update({"i8": "s.qty * 100"})
            .execute()
        ),
    ):
        with pytest.raises(errors.MereError):
            call()
        assert (t.version, t.scan().to_arrow().sort_by("id")) == before


def test_catalog_transaction_create_table_refuses_unknown_options(tmp_path: Path) -> None:
    cat, t = _table(tmp_path)
    version = t.version
    with pytest.raises(errors.InvalidInput), cat.transaction() as tx:
        tx.table("sales.orders").upsert(ROWS)
        tx.create_table("n.c", SCHEMA, primay_key="id")  # a typo of primary_key
    assert cat.tables() == ["sales.orders"] and t.refresh().version == version


def test_a_refused_catalog_transaction_creates_and_changes_nothing(tmp_path: Path) -> None:
    cat, t = _table(tmp_path)
    before = state(t)
    for body in (
        lambda tx: (
            tx.create_table("n.a", SCHEMA, primary_key="id"),
            tx.table("sales.orders").upsert({"id": [None], "day": ["d1"]}),
        ),
        lambda tx: (tx.create_table("n.b", SCHEMA, primary_key="id"), tx.create_table("n.b", SCHEMA)),
        lambda tx: (tx.table("sales.orders").upsert(ROWS), tx.table("n.missing")),
        lambda tx: (tx.table("sales.orders").upsert(ROWS), tx.table("sales.orders").delete("id = 5")),
        lambda tx: (
            tx.create_table("n.c", SCHEMA, primary_key="id").upsert({"id": [1], "day": ["x"], "qty": ["q"]}),
        ),
    ):
        with pytest.raises(errors.MereError), cat.transaction() as tx:
            body(tx)
        assert cat.tables() == ["sales.orders"] and state(t) == before
