"""Decimals meeting doubles, against DuckDB: arithmetic of a decimal and a double, CAST of a double to a
decimal, and ``//`` by zero of non-integers (found by a review of stop 66: mere's arithmetic took Arrow's
implicit decimal-to-double cast, off in the last place; CAST(double AS DECIMAL) rounded halves to even;
``x // 0`` of a double was an infinity where the docs and DuckDB say NULL)."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("n", pa.decimal128(18, 4)),
        ("x", pa.float64()),
        ("r", pa.float64()),
        ("m", pa.decimal128(18, 2)),
        ("z", pa.decimal128(10, 0)),
    ]
)

# Decimals of four digits after the point, and doubles that are often halves at two or no digits.
decimals = st.integers(-(10**12), 10**12).map(lambda u: Decimal(u).scaleb(-4))
doubles = st.one_of(
    st.integers(-(10**6), 10**6).map(lambda u: u / 8),  # halves and quarters of cents, exactly
    st.integers(-(10**6), 10**6).map(lambda u: u / 1000),
    st.floats(-1e9, 1e9, allow_nan=False),
)


def _table(tmp_path: Path, rows: list[tuple[Decimal, float]]) -> tuple[mere.Catalog, pa.Table]:
    data = pa.table(
        {
            "id": list(range(len(rows))),
            "n": [n for n, _ in rows],
            "x": [x for _, x in rows],
            "r": [None] * len(rows),
            "m": [None] * len(rows),
            "z": [None] * len(rows),
        },
        schema=SCHEMA,
    )
    cat = mere.connect(str(tmp_path))
    cat.create_table("d.t", SCHEMA, primary_key="id").upsert(data)
    return cat, data


def _duck(data: pa.Table, select: str) -> list[object]:
    con = duckdb.connect()
    con.execute("SET error_on_division_by_zero = false")  # the NULL mere's docs promise for //
    con.register("t", data)
    return [row[0] for row in con.execute(f"SELECT {select} FROM t ORDER BY id").fetchall()]


def _same(got: list[object], want: list[object]) -> bool:
    return all(
        (g is None and w is None)
        or (isinstance(g, float) and isinstance(w, float) and math.isnan(g) and math.isnan(w))
        or g == w
        for g, w in zip(got, want, strict=True)
    )


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(decimals, doubles), min_size=1, max_size=12), data=st.data())
def test_decimal_and_double_compute_as_duckdb(tmp_path_factory: pytest.TempPathFactory, rows, data) -> None:
    expression = data.draw(
        st.sampled_from(["n + x", "x - n", "n * x", "n + 0e0", "x + n * 1e0", "(n + 0.005) * 1e0", "n / x"])
    )
    cat, table = _table(tmp_path_factory.mktemp("d"), rows)
    mere.sql(f"UPDATE d.t SET r = {expression}", catalog=cat)
    got = cat.table("d.t").to_arrow().sort_by("id")["r"].to_pylist()
    want = _duck(table, expression)
    assert _same(got, want), (expression, got, want)
    # the same value as a filter's operand: a row is kept exactly where DuckDB computes the value stored
    kept = cat.table("d.t").scan(filter=f"{expression} = r").to_arrow()["id"].to_pylist()
    assert sorted(kept) == [i for i, w in enumerate(want) if w is not None and not math.isnan(w)]


@settings(max_examples=40, deadline=None)
@given(values=st.lists(doubles, min_size=1, max_size=12), data=st.data())
def test_cast_of_a_double_to_a_decimal_rounds_as_duckdb(
    tmp_path_factory: pytest.TempPathFactory, values: list[float], data
) -> None:
    scale = data.draw(st.sampled_from([0, 1, 2, 3]))
    cat, table = _table(tmp_path_factory.mktemp("c"), [(Decimal(0), v) for v in values])
    cast = f"CAST(x AS DECIMAL(18, {scale}))"
    mere.sql(f"UPDATE d.t SET m = {cast}, z = CAST(x AS DECIMAL(10, 0))", catalog=cat)
    stored = cat.table("d.t").to_arrow().sort_by("id")
    want_m = _duck(table, f"CAST({cast} AS DECIMAL(18, 2))")
    assert stored["m"].to_pylist() == want_m
    assert stored["z"].to_pylist() == _duck(table, "CAST(x AS DECIMAL(10, 0))")
    # a literal casts as a column does
    for i, v in enumerate(values):
        literal = (
            f"CAST({v!r}e0 AS DECIMAL(18, {scale}))"
            if "e" not in repr(v)
            else f"CAST({v!r} AS DECIMAL(18, {scale}))"
        )
        kept = cat.table("d.t").scan(filter=f"id = {i} and {literal} = {cast}").count()
        assert kept == 1, (v, literal)


@pytest.mark.parametrize("divisor", ["0", "0e0", "-0e0", "CAST(0 AS DECIMAL(4, 1))"])
def test_floor_division_of_non_integers_by_zero_is_null(tmp_path: Path, divisor: str) -> None:
    cat, table = _table(tmp_path, [(Decimal("1.5"), 1.5), (Decimal("-1.5"), -1.5), (Decimal(0), 0.0)])
    for dividend in ("x", "n"):
        assert _duck(table, f"{dividend} // {divisor}") == [None] * 3  # DuckDB's value without its error
        mere.sql(f"UPDATE d.t SET r = {dividend} // {divisor}, m = n // {divisor}", catalog=cat)
        stored = cat.table("d.t").to_arrow()
        assert stored["r"].to_pylist() == [None] * 3 and stored["m"].to_pylist() == [None] * 3
        assert cat.table("d.t").scan(filter=f"{dividend} // {divisor} IS NULL").count() == 3
