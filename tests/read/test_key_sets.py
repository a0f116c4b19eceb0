"""Key matching helpers (``mere.kernels.KeySet`` / ``key_positions``, ``mere.arrays.sorted_unique``)
against plain Python sets and dicts, over every key kind they take: signed and unsigned integers (values
past 2**63 included), dates, timestamps, strings, binaries, decimals, composite keys, NULLs, sorted and
unsorted rows."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from mere.arrays import sorted_unique, stable_argsort
from mere.kernels import KeySet, key_positions

KINDS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int64_small": (pa.int64(), st.integers(-3, 3)),
    "uint64": (pa.uint64(), st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1, 5])),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "date": (pa.date32(), st.dates(dt.date(1969, 12, 1), dt.date(1970, 2, 1))),
    "timestamp": (
        pa.timestamp("us", tz="UTC"),
        st.integers(-5, 5).map(lambda s: dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=s)),
    ),
    "string": (pa.string(), st.sampled_from(["", "a", "b", "é", "a\x00"])),
    "binary": (pa.binary(), st.sampled_from([b"", b"\x00", b"\xff", b"a"])),
    "decimal": (
        pa.decimal128(9, 2),
        st.sampled_from([Decimal("0.00"), Decimal("-1.50"), Decimal("9999999.99")]),
    ),
}


@st.composite
def key_tables(draw: st.DrawFn) -> tuple[list[str], pa.Schema, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=2))
    names = [f"k{i}" for i in range(len(kinds))]
    schema = pa.schema([pa.field(n, KINDS[k][0]) for n, k in zip(names, kinds)])
    value = st.tuples(
        *[st.one_of(st.none(), KINDS[k][1]) if draw(st.booleans()) else KINDS[k][1] for k in kinds]
    )
    rows = draw(st.lists(value, max_size=30))
    if draw(st.booleans()):  # a merged split: rows in key order, each key once
        rows = sorted(set(rows), key=lambda r: tuple((v is None, v) for v in r))
    wanted = draw(st.lists(st.one_of(st.sampled_from(rows), value) if rows else value, max_size=30))
    return names, schema, rows, wanted


def as_table(schema: pa.Schema, rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table(
        {f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)}, schema=schema
    )


@given(key_tables())
def test_key_set_contains_is_set_membership(case: Any) -> None:
    names, schema, rows, wanted = case
    got = KeySet(as_table(schema, wanted), names).contains(as_table(schema, rows))
    # SQL semantics: a NULL key matches nothing.
    present = {w for w in wanted if None not in w}
    assert got.tolist() == [None not in r and r in present for r in rows]


@given(key_tables())
def test_key_positions_find_the_row_of_each_key(case: Any) -> None:
    names, schema, rows, wanted = case
    right = list(dict.fromkeys(w for w in wanted if None not in w))  # unique keys
    at = key_positions(as_table(schema, rows), as_table(schema, right), names)
    assert at is not None
    where = {k: i for i, k in enumerate(right)}
    assert at.tolist() == [-1 if None in r else where.get(r, -1) for r in rows]
    # Duplicate keys on the right are reported (callers join then), never resolved silently.
    keyed = [w for w in wanted if None not in w]
    if len(keyed) > len(set(keyed)):
        assert key_positions(as_table(schema, rows), as_table(schema, keyed), names) is None


@given(
    st.one_of(
        st.lists(st.integers(-(2**63), 2**63 - 1)).map(lambda v: np.array(v, dtype=np.int64)),
        st.lists(st.integers(0, 2**64 - 1)).map(lambda v: np.array(v, dtype=np.uint64)),
        st.lists(st.sampled_from([0.0, -0.0, 1.5, math.nan, math.inf, -math.inf])).map(
            lambda v: np.array(v, dtype=np.float64)
        ),
    )
)
def test_sorted_unique_is_numpy_unique(values: np.ndarray) -> None:
    expected, inverse = np.unique(values, return_inverse=True)
    got, got_inverse = sorted_unique(values, return_inverse=True)
    assert np.array_equal(sorted_unique(values), expected, equal_nan=values.dtype.kind == "f")
    assert np.array_equal(got, expected, equal_nan=values.dtype.kind == "f")
    assert np.array_equal(got_inverse, inverse.ravel())


@given(
    st.one_of(
        st.lists(st.integers(-(2**63), 2**63 - 1)).map(lambda v: np.array(v, dtype=np.int64)),
        st.lists(st.integers(0, 2**64 - 1)).map(lambda v: np.array(v, dtype=np.uint64)),
        st.lists(st.integers(-(2**63), -(2**63) + 40)).map(lambda v: np.array(v, dtype=np.int64)),
        st.lists(st.sampled_from([-(2**63), -(2**62), -1, 0, 1, 2**62, 2**63 - 1])).map(
            lambda v: np.array(v, dtype=np.int64)
        ),
        st.lists(st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 1])).map(
            lambda v: np.array(v, dtype=np.uint64)
        ),
        st.lists(st.integers(2**64 - 50, 2**64 - 1)).map(lambda v: np.array(v, dtype=np.uint64)),
        st.lists(st.integers(-128, 127), max_size=300).map(lambda v: np.array(v, dtype=np.int8)),
        st.lists(st.integers(0, 5), max_size=300).map(lambda v: np.array(v, dtype=np.uint16)),
        st.lists(st.sampled_from([0.0, -0.0, 1.5, math.nan, -math.inf])).map(
            lambda v: np.array(v, dtype=np.float64)
        ),
    )
)
def test_stable_argsort_is_numpy_s_stable_argsort(values: np.ndarray) -> None:
    # Narrow ranges take the packed sort, wide ones NumPy's; duplicates must keep their order.
    assert stable_argsort(values).tolist() == np.argsort(values, kind="stable").tolist()
