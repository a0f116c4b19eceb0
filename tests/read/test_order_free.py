"""The order-free read path (:mod:`mere.read.order_free`): for tables whose value columns merge ``last``,
``max``, ``min``, ``bool_and`` or ``bool_or``, its merged rows equal the general fold's
(:func:`mere.kernels.reduce_versions`, what the reader used before) for any versions: several files,
delete marker files, PUTs and DELETEs resetting a key, NULLs, string and integer keys, with and without a
sequence. Then, through a table: the path is taken, and it agrees with a dict model of the operators."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.kernels import group_starts, reduce_versions, sort_indices
from mere.read import order_free
from mere.spec import OP_COLUMN, OP_DELETE, OP_MERGE, OP_PUT, TableSpec

OPERATORS = {"hi": "max", "lo": "min", "any_": "bool_or", "all_": "bool_and"}


def spec_of(string_keys: bool, sequenced: bool) -> TableSpec:
    schema = pa.schema(
        [
            pa.field("k", pa.string() if string_keys else pa.int64(), nullable=False),
            pa.field("note", pa.string()),
            pa.field("hi", pa.int64()),
            pa.field("lo", pa.string()),
            pa.field("any_", pa.bool_()),
            pa.field("all_", pa.bool_()),
            pa.field("lsn", pa.int64()),
        ]
    )
    return TableSpec.create(
        schema, "k", None, 1, OPERATORS, None, None, sequence_by="lsn" if sequenced else None
    )


ROW = st.tuples(
    st.integers(0, 5),
    st.sampled_from([OP_MERGE, OP_MERGE, OP_PUT, OP_DELETE]),
    st.one_of(st.none(), st.integers(-5, 5)),
    st.one_of(st.none(), st.sampled_from(["a", "b", "zz", ""])),
    st.one_of(st.none(), st.booleans()),
    st.integers(0, 9),
)


def part_of(spec: TableSpec, rows: list[tuple[Any, ...]], markers: bool) -> pa.Table:
    key = spec.schema.field("k").type
    keys = pa.array([k if pa.types.is_integer(key) else f"k{k}" for k, *_ in rows], key)
    lsn = pa.array([r[5] for r in rows], pa.int64())
    ops = pa.array([OP_DELETE if markers else r[1] for r in rows], pa.int8())
    if markers:  # a delete marker file holds the identity and sequence columns only
        return pa.table({"k": keys, "lsn": lsn, OP_COLUMN: ops})
    return pa.table(
        {
            "k": keys,
            "note": pa.array([f"n{r[2]}" if r[2] is not None else None for r in rows], pa.string()),
            "hi": pa.array([r[2] for r in rows], pa.int64()),
            "lo": pa.array([r[3] for r in rows], pa.string()),
            "any_": pa.array([r[4] for r in rows], pa.bool_()),
            "all_": pa.array([None if r[4] is None else not r[4] for r in rows], pa.bool_()),
            "lsn": lsn,
            OP_COLUMN: ops,
        }
    )


def general(spec: TableSpec, parts: list[pa.Table], needed: list[str]) -> pa.Table:
    """The general fold, as the reader runs it for files of any columns."""
    schema = pa.schema([spec.schema.field(c) for c in needed])
    aligned, present = [], {c: [] for c in needed if c not in spec.identity_columns}
    for p in parts:
        cols = []
        for f in schema:
            has = f.name in p.column_names
            cols.append(p.column(f.name) if has else pa.nulls(p.num_rows, f.type))
            if f.name in present:
                present[f.name].append(np.full(p.num_rows, has))
        aligned.append(pa.Table.from_arrays(cols, schema=schema))
    versions = pa.concat_tables(aligned)
    ops = np.concatenate([p.column(OP_COLUMN).to_numpy().astype(np.int8) for p in parts])
    order = sort_indices([versions.column(c) for c in (*spec.primary_key, *spec.sequence_by)])
    versions = versions.take(pa.array(order))
    pres = {c: np.concatenate(v)[order] for c, v in present.items()}
    starts = group_starts([versions.column(c) for c in spec.primary_key], versions.num_rows)
    merged, out_op = reduce_versions(
        versions, ops[order], starts, spec.identity_columns, spec.operators, pres, **spec.reduce_options
    )
    return merged.filter(pa.array(out_op != OP_DELETE))


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(st.tuples(st.lists(ROW, min_size=1, max_size=8), st.booleans()), min_size=1, max_size=5),
    string_keys=st.booleans(),
    sequenced=st.booleans(),
    needed=st.sampled_from(
        [
            ["k", "note", "hi", "lo", "any_", "all_", "lsn"],
            ["k", "hi"],
            ["lo", "k", "lsn"],
            ["k", "note", "all_"],
        ]
    ),
)
def test_the_order_free_fold_equals_the_general_fold(
    parts: list[tuple[list[tuple[Any, ...]], bool]], string_keys: bool, sequenced: bool, needed: list[str]
) -> None:
    spec = spec_of(string_keys, sequenced)
    if sequenced and "lsn" not in needed:
        needed = [*needed, "lsn"]  # the reader reads the sequence: it orders a key's versions
    tables = [part_of(spec, rows, markers) for rows, markers in parts]
    value_columns = [c for c in needed if c not in spec.identity_columns]
    if not order_free.applies(spec, value_columns):
        assert all(spec.operator(c).name == "last" for c in value_columns)
        return
    ops = np.concatenate([t.column(OP_COLUMN).to_numpy().astype(np.int8) for t in tables])
    sequence = [np.concatenate([t.column("lsn").to_numpy() for t in tables])] if sequenced else []
    got = order_free.fold(tables, ops, sequence, spec, needed)
    want = general(spec, tables, needed)
    assert got.schema.names == needed
    assert got.to_pylist() == want.select(needed).to_pylist()


def test_applies_to_order_free_and_last_columns_only() -> None:
    spec = spec_of(False, False)
    assert order_free.applies(spec, ["note", "hi"])
    assert not order_free.applies(spec, ["note", "lsn"])  # all last: the newest-wins path
    summed = TableSpec.create(spec.schema, "k", None, 1, {"hi": "sum", "lo": "min"})
    assert not order_free.applies(summed, ["hi", "lo"])


@settings(max_examples=20, deadline=None)
@given(
    commits=st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.integers(-9, 9), st.booleans()), min_size=1, max_size=10),
        min_size=1,
        max_size=5,
    ),
    compact_after=st.sets(st.integers(0, 4)),
)
def test_a_max_min_table_reads_like_a_dict_model(
    tmp_path_factory: pytest.TempPathFactory,
    commits: list[list[tuple[int, int, bool]]],
    compact_after: set[int],
) -> None:
    calls: list[int] = []
    original = order_free.fold

    def counting(*args: Any, **kwargs: Any) -> pa.Table:
        calls.append(1)
        return original(*args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(order_free, "fold", counting)
    try:
        check_against_the_model(tmp_path_factory, commits, compact_after)
    finally:
        patch.undo()
    if len(commits) > 1 and not compact_after:
        assert calls  # several files per split were merged by this path


def check_against_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    commits: list[list[tuple[int, int, bool]]],
    compact_after: set[int],
) -> None:
    schema = pa.schema(
        [
            ("k", pa.int64()),
            ("top", pa.int64()),
            ("bottom", pa.int64()),
            ("v", pa.int64()),
            ("op", pa.string()),
        ]
    )
    t = mere.connect(str(tmp_path_factory.mktemp("of"))).create_table(
        "o.t",
        schema,
        primary_key="k",
        buckets=2,
        cdc_column="op",
        merge_operators={"top": "max", "bottom": "min"},
        properties={"compaction.auto": "off"},
    )
    model: dict[int, tuple[int, int, int]] = {}
    for i, batch in enumerate(commits):
        for k, v, delete in batch:
            if delete:
                model.pop(k, None)
            else:
                top, bottom, _ = model.get(k, (v, v, v))
                model[k] = (max(top, v), min(bottom, v), v)
        t.upsert(
            pa.table(
                {
                    "k": [k for k, _, _ in batch],
                    "top": [v for _, v, _ in batch],
                    "bottom": [v for _, v, _ in batch],
                    "v": [v for _, v, _ in batch],
                    "op": ["d" if d else "u" for *_, d in batch],
                },
                schema,
            )
        )
        if i in compact_after:
            t.compact()
        got = {r["k"]: (r["top"], r["bottom"], r["v"]) for r in t.to_arrow().to_pylist()}
        assert got == model
