"""Lowering to ``pyarrow.compute`` expressions, with SQL's NULL and float semantics."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import FilterError
from mere.expr.evaluate import in_index
from mere.expr.literals import (
    OPERATORS,
    compare_float_literal,
    computed_field,
    computed_type,
    nanosecond_type,
)
from mere.expr.nodes import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    ArrowPredicate,
    Compare,
    Expr,
    FilterText,
    In,
    IsNull,
    Not,
    Or,
    Sql,
)


@functools.cache
def _null_bool() -> pa.Scalar:
    # Made on first use: pa.scalar at import would make pyarrow import pandas (a second of start-up).
    return pa.scalar(None, pa.bool_())


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _arrow_scalar(value: object, zone: str | None = None) -> pc.Expression:
    try:
        if type(value) is int:
            # uint64 compares with every integer column (Arrow casts it to a signed column's type),
            # int64 would make Arrow cast a uint64 column to int64 and fail on large values.
            return pc.scalar(pa.scalar(value, pa.uint64() if value >= 0 else pa.int64()))
        return pc.scalar(pa.scalar(value, nanosecond_type([value], zone)))
    except _CONVERSION_ERRORS as exc:
        raise FilterError(f"literal {value!r} cannot be converted to Arrow: {exc}") from None


def _value_set(values: Sequence[object], zone: str | None = None) -> pa.Array:
    if set(map(type, values)) == {int}:
        ints = cast("Sequence[int]", values)
        return pa.array(values, pa.uint64() if min(ints) >= 0 else pa.int64())
    return pa.array(values, nanosecond_type(values, zone))


def to_pyarrow(expr: Expr, schema: pa.Schema | None = None) -> pc.Expression:
    """Lower to a ``pyarrow.compute.Expression`` with SQL null semantics.

    Float literals get SQL float semantics (NaN equal to NaN and above every other value,
    -0.0 equal to 0.0); bind the expression first so that float columns have float literals.
    ``schema``, the rows' schema, labels timestamp literals with their column's zone: bound literals are
    UTC instants, and Arrow compares instants of different zones only in some units.
    """
    zones: dict[str, str] = {}
    halves: frozenset[str] = frozenset()
    if schema is not None:
        zones = {
            f.name: f.type.tz
            for f in schema
            if pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz != "UTC"
        }
        halves = frozenset(f.name for f in schema if computed_type(f.type) != f.type)
    return _lower(expr, zones, halves)


def _field(column: str, halves: frozenset[str]) -> pc.Expression:
    """A column; one of ``halves`` (half floats) as Arrow computes on it."""
    return computed_field(column, pa.float16()) if column in halves else pc.field(column)


def _lower(expr: Expr, zones: Mapping[str, str], halves: frozenset[str] = frozenset()) -> pc.Expression:
    if isinstance(expr, And):
        return _lower(expr.left, zones, halves) & _lower(expr.right, zones, halves)
    if isinstance(expr, Or):
        return _lower(expr.left, zones, halves) | _lower(expr.right, zones, halves)
    if isinstance(expr, Not):
        return ~_lower(expr.operand, zones, halves)
    if isinstance(expr, AlwaysTrue | AlwaysFalse):
        return pc.scalar(isinstance(expr, AlwaysTrue))
    if isinstance(expr, ArrowPredicate):
        return expr.expression
    if isinstance(expr, Sql):
        if expr.arrow is None:
            raise FilterError(f"bind {expr.text!r} to a schema before lowering it")
        return expr.arrow
    if isinstance(expr, FilterText):
        raise FilterError(f"read {expr.text!r} with mere.expr.to_expr or bind before lowering it")
    if isinstance(expr, IsNull):
        field = pc.field(expr.column)
        return field.is_valid() if expr.negated else field.is_null()
    zone = zones.get(expr.column) if isinstance(expr, Compare | In) else None
    if isinstance(expr, Compare):
        if isinstance(expr.value, float):
            return compare_float_literal(expr.op, _field(expr.column, halves), expr.value)
        value = _arrow_scalar(expr.value, zone)
        return cast(pc.Expression, OPERATORS[expr.op](_field(expr.column, halves), value))
    if isinstance(expr, In):
        # Long lists: the value set is built once (per zone), not once per file read.
        cache = expr.__dict__.setdefault("_arrow", {})
        half = expr.column in halves
        lowered = cache.get((zone, half))
        if lowered is None:
            result = _in_to_pyarrow(expr, zone, half)
            lowered = cache[(zone, half)] = ~result if expr.negated else result
        return cast(pc.Expression, lowered)
    raise FilterError(f"cannot lower {type(expr).__name__} to pyarrow")


def _in_to_pyarrow(expr: In, zone: str | None = None, half: bool = False) -> pc.Expression:
    index = in_index(expr)
    if not expr.values:
        return pc.scalar(False)
    if not index.present:
        return pc.scalar(_null_bool())
    field = _field(expr.column, frozenset([expr.column]) if half else frozenset())
    try:
        if index.types == {float}:
            # Arrow's is_in hashes float bits: -0.0 misses 0.0 and NaNs differ by sign and payload.
            # Adding 0.0 turns -0.0 into 0.0 on both sides; NaN is matched by is_nan instead.
            numbers = np.asarray(index.present, dtype=np.float64) + 0.0
            is_nan = np.isnan(numbers)
            found = pc.scalar(False)
            if not is_nan.all():
                normalised = pc.add(field, pc.scalar(0.0))
                found = pc.is_in(normalised, value_set=pa.array(numbers[~is_nan]), skip_nulls=True)
            if is_nan.any():
                found = found | pc.is_nan(field)
        else:
            found = pc.is_in(field, value_set=_value_set(index.present, zone), skip_nulls=True)
    except _CONVERSION_ERRORS as exc:
        raise FilterError(f"IN list for {expr.column!r} cannot be converted to Arrow: {exc}") from None
    if index.has_null:  # TRUE when found, NULL otherwise
        return pc.if_else(found, True, _null_bool())
    return pc.if_else(field.is_null(), _null_bool(), found)
