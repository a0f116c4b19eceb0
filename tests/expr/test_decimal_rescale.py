"""Decimal rounding and rescaling in SQL (ROUND, FLOOR, CEIL, CAST to fewer digits or to an integer,
storing into a column of fewer digits) are exact for every value, checked against Python's decimal module.

Arrow's own rescaling by 10 or more digits returns wrong values for some large decimals (a DECIMAL(38, 14)
18446744072436898870 cast to DECIMAL(38, 0) gave 18446744066392269771, pyarrow 26); the values drawn here
cluster around the powers of two where it fails."""

from __future__ import annotations

import decimal
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.arrays import EXACT_RESCALE_DIGITS, decimal_rescale_steps
from mere.errors import SchemaMismatch

CONTEXT = decimal.Context(prec=100)


def _unscaled(digits: int, scale: int, kept: list[int]) -> st.SearchStrategy[int]:
    """Unscaled values of at most ``digits`` digits; many have a part above each of the ``kept`` scales
    near a power of two (where Arrow's rescaling failed), with any dropped digits."""

    def near(n: int, below: bool, offset: int, keep: int, dropped: int) -> int:
        above = 2**n - offset if below else 2**n + offset
        return max(0, above) * 10 ** (scale - keep) + dropped % 10 ** (scale - keep)

    top = 10**digits - 1
    near_power = st.builds(
        near,
        st.integers(1, min(int(digits * 3.32), 250)),
        st.booleans(),
        st.integers(0, 2**34),
        st.sampled_from(kept),
        st.integers(0, 10**scale),
    ).map(lambda v: min(v, top))
    signed = st.one_of(near_power, st.integers(0, top), st.sampled_from([0, 1, 5, top]))
    return st.builds(lambda v, negative: -v if negative else v, signed, st.booleans())


@st.composite
def _columns(draw: st.DrawFn) -> tuple[pa.DataType, int, list[Decimal | None]]:
    wide = draw(st.booleans())
    precision = draw(st.integers(39, 60)) if wide else 38
    scale = draw(st.integers(1, 24))
    digits = draw(st.integers(0, scale - 1))
    typ = (pa.decimal256 if wide else pa.decimal128)(precision, scale)
    # One integer digit of room: rounding may carry into it.
    values = draw(st.lists(_unscaled(precision - 1, scale, [digits, 0]), min_size=1, max_size=8))
    rows: list[Decimal | None] = [Decimal(v).scaleb(-scale, CONTEXT) for v in values]
    return typ, digits, [*rows, None]


def _table(tmp_path: Path, typ: pa.DataType, values: list[Decimal | None], out: pa.DataType) -> mere.Table:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("d", typ), ("out", out)])
    cat = mere.connect(str(tmp_path / f"w{len(list(tmp_path.iterdir()))}"))
    t = cat.create_table("t.d", schema, primary_key="k")
    t.upsert(pa.table({"k": range(len(values)), "d": values, "out": [None] * len(values)}, schema=schema))
    return t


def _stored(t: mere.Table, sql: str) -> list[Any]:
    t.update({"out": sql})
    return t.scan().to_arrow().sort_by("k")["out"].to_pylist()


def _rounded(v: Decimal | None, digits: int, mode: str) -> Decimal | None:
    if v is None:
        return None
    return v.quantize(Decimal(1).scaleb(-digits), rounding=mode, context=CONTEXT)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=_columns())
def test_round_floor_ceil_and_casts_are_exact(
    tmp_path: Path, column: tuple[pa.DataType, int, list[Decimal | None]]
) -> None:
    typ, digits, values = column
    same = _table(tmp_path, typ, values, typ)
    half_up = decimal.ROUND_HALF_UP  # halves away from zero, as DuckDB rounds decimals
    assert _stored(same, f"ROUND(d, {digits})") == [_rounded(v, digits, half_up) for v in values]
    assert _stored(same, "FLOOR(d)") == [_rounded(v, 0, decimal.ROUND_FLOOR) for v in values]
    assert _stored(same, "CEIL(d)") == [_rounded(v, 0, decimal.ROUND_CEILING) for v in values]
    fewer = (pa.decimal256 if typ.precision > 38 else pa.decimal128)(typ.precision, digits)
    narrow = _table(tmp_path, typ, values, fewer)
    expected = [_rounded(v, digits, half_up) for v in values]
    assert _stored(narrow, f"CAST(d AS DECIMAL({typ.precision}, {digits}))") == expected
    assert _stored(narrow, "d") == expected  # stored into a column of fewer digits: rounded the same way
    whole = _table(tmp_path, typ, values, pa.int64())
    fits = [v is None or -(2**63) <= _rounded(v, 0, half_up) < 2**63 for v in values]  # type: ignore[operator]
    kept = [v if ok else None for v, ok in zip(values, fits)]
    whole.update(
        {"d": "NULL"}, where=f"k IN ({', '.join(str(k) for k, ok in enumerate(fits) if not ok)}, -1)"
    )
    got = _stored(whole, "CAST(d AS BIGINT)")
    assert got == [None if v is None else int(_rounded(v, 0, half_up)) for v in kept]  # type: ignore[arg-type]


# (scale, unscaled value) that Arrow 26 rescaled to 0 digits wrongly, found by searching near powers of two
ARROW_FAILURES = [
    (14, 1844674407243689887025000000000000),
    (14, 1844674407310215008676000998868001),
    (14, 7378697629400033467797857598695650),
    (15, 18446744072815791677121602216688994),
    (15, 590295810356467205652712494997491089),
    (17, 1844674407285617801748865866799053710),
]


@pytest.mark.parametrize(("scale", "unscaled"), ARROW_FAILURES)
def test_values_arrow_rescales_wrongly(tmp_path: Path, scale: int, unscaled: int) -> None:
    value = Decimal(unscaled).scaleb(-scale, CONTEXT)
    values: list[Decimal | None] = [value, -value]
    t = _table(tmp_path, pa.decimal128(38, scale), values, pa.decimal128(38, scale))
    for sql, mode in [("ROUND(d, 0)", decimal.ROUND_HALF_UP), ("FLOOR(d)", decimal.ROUND_FLOOR)]:
        assert _stored(t, sql) == [_rounded(v, 0, mode) for v in values], sql
    assert _stored(t, "CEIL(d)") == [_rounded(v, 0, decimal.ROUND_CEILING) for v in values]
    for divisor in (1, 7):  # the remainder has the dividend's sign
        assert _stored(t, f"d % {divisor}") == [v % divisor for v in values]  # type: ignore[operator]
    narrow = _table(tmp_path, pa.decimal128(38, scale), values, pa.decimal128(38, 0))
    expected = [_rounded(v, 0, decimal.ROUND_HALF_UP) for v in values]
    assert _stored(narrow, "CAST(d AS DECIMAL(38, 0))") == expected
    assert _stored(narrow, "d") == expected


def test_arrow_still_rescales_this_value_wrong() -> None:
    # Why mere rescales in steps of at most 9 digits: when Arrow gets this right, the steps can go.
    value = pa.array([Decimal("18446744072436898870")], pa.decimal128(38, 14))
    assert pc.cast(value, pa.decimal128(38, 0), safe=False)[0].as_py() != Decimal("18446744072436898870")


@pytest.mark.parametrize(("scale", "unscaled"), ARROW_FAILURES)
def test_a_batch_with_more_fractional_digits_is_stored_exactly_or_refused(
    tmp_path: Path, scale: int, unscaled: int
) -> None:
    whole = Decimal(unscaled // 10**scale)
    batch_type = pa.decimal128(38, scale)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("d", pa.decimal128(38, 0))])
    t = mere.connect(str(tmp_path)).create_table("t.d", schema, primary_key="k")
    t.upsert(pa.table({"k": [1, 2], "d": pa.array([whole, -whole], batch_type)}))  # no digit lost: stored
    assert sorted(t.scan().to_arrow()["d"].to_pylist()) == [-whole, whole]
    lossy = pa.table({"k": [3], "d": pa.array([Decimal(unscaled).scaleb(-scale, CONTEXT)], batch_type)})
    if unscaled % 10**scale:
        with pytest.raises(SchemaMismatch):
            t.upsert(lossy)
        assert t.scan().count() == 2


@given(st.integers(0, 80), st.integers(0, 80))
def test_rescale_steps_end_at_the_target_and_each_drops_at_most_the_exact_digits(
    scale: int, target: int
) -> None:
    steps = decimal_rescale_steps(scale, target)
    if scale <= target:
        assert steps == []
        return
    assert steps[-1] == target
    previous = scale
    for step in steps:
        assert 0 < previous - step <= EXACT_RESCALE_DIGITS
        previous = step
