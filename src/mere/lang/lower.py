"""Syntax trees to mere's expressions: prunable filter atoms, and typed Arrow compute expressions.

A filter's comparisons of a column with literals (``=``, ``<``, IN, BETWEEN, IS NULL) become the
:mod:`mere.expr` atoms that prune partitions, buckets and row groups. Everything else (arithmetic,
functions, CASE, comparisons of two expressions) becomes an :class:`~mere.expr.Sql` atom, lowered with
the table schema to a ``pyarrow.compute.Expression`` that Arrow evaluates on whole batches.

The language follows DuckDB's SQL: ``/`` divides as DOUBLE, ``//`` and ``%`` on integers truncate and give
NULL for a zero divisor (DuckDB's ``error_on_division_by_zero = false``), integer arithmetic raises on overflow, ``||`` and ``concat`` join text, comparisons treat NaN
as equal to itself and above every other float (as the prunable atoms do), and a string literal compared
with a date or timestamp is read as that type (with a number it is an error, as in the prunable atoms).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from functools import partial
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mere.arrays import decimal_rescale_steps
from mere.errors import FilterError
from mere.expr.literals import (
    FLOAT_TEXT,
    FLOAT_WORD,
    Gap,
    bind_float,
    bind_scalar,
    compare_floats,
    computed_field,
    computed_type,
    format_literal,
)
from mere.expr.nodes import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    CompareOp,
    Expr,
    In,
    IsNull,
    Not,
    Or,
    Sql,
    combined,
    flip,
)
from mere.lang.parse import LIST_PREFIX, MereDialect, Parsed, parse_expression
from mere.spec import is_bytes_type, is_number, is_text

_REASSOCIATED = frozenset({"add", "add_checked", "multiply", "multiply_checked"})
# Kernels besides the *_checked ones that may fail on a value (decimal precision).
_MAY_FAIL = frozenset({"round", "floor", "ceil", "trunc"})

NO_LITERAL = object()
_COMPARE_OPS: dict[type[exp.Expression], CompareOp] = {
    exp.EQ: "==",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}


_HAS_REMAINDER = "remainder" in pc.list_functions()  # not in older pyarrow


def sql_text(node: exp.Expression) -> str:
    """``node`` as SQL text in mere's dialect."""
    return node.sql(dialect=MereDialect)


# ---------------------------------------------------------------------------------------------
# Literals


def number(text: str) -> int | float | Decimal:
    """SQL numeric literal: exponent -> float, decimal point -> exact Decimal, else int."""
    try:
        if "e" in text or "E" in text:
            value = float(text)
            if math.isinf(value):
                raise FilterError(f"invalid number {text!r} (out of range for a DOUBLE)")
            return value
        if "." in text:
            return Decimal(text)
        return int(text)
    except (ValueError, ArithmeticError):  # e.g. 1e, 12e8.0, .0.5 (Decimal's InvalidOperation)
        raise FilterError(f"invalid number {text!r}") from None


def _nanosecond_literal(raw: str) -> _dt.datetime:
    """``TIMESTAMP_NS '...'``: a pandas Timestamp, which holds nanoseconds (a Python datetime stops at
    microseconds); without pandas, only a literal without digits past microseconds."""
    try:
        import pandas as pd
    except ImportError:
        stamp = _dt.datetime.fromisoformat(raw)
        if pa.scalar(raw).cast(pa.timestamp("ns")).value % 1000:
            raise ValueError("digits past microseconds need pandas installed") from None
        return stamp
    try:
        return cast(_dt.datetime, pd.Timestamp(raw))
    except (TypeError, OverflowError) as exc:
        raise ValueError(str(exc)) from None


def _typed_literal(kind: Any, raw: str) -> object:
    T = exp.DataType.Type
    try:
        if kind == T.DATE:
            return _dt.date.fromisoformat(raw)
        if kind in (T.TIMESTAMP, T.TIMESTAMPNTZ, T.TIMESTAMPTZ, T.DATETIME):
            return _dt.datetime.fromisoformat(raw)  # microseconds: later digits dropped, as DuckDB does
        if kind == T.TIMESTAMP_NS:
            return _nanosecond_literal(raw)
        if kind in (T.DOUBLE, T.FLOAT):
            if not FLOAT_TEXT.fullmatch(raw.strip()):
                raise ValueError("expected a number, NaN, Infinity or -Infinity")
            value = float(raw)
            if math.isinf(value) and not FLOAT_WORD.fullmatch(raw.strip()):
                raise ValueError("out of range for a DOUBLE")
            return value
    except ValueError as exc:
        raise FilterError(f"invalid {kind.value} literal {raw!r} ({exc})") from None
    return NO_LITERAL


def _decimal_digits(name: str, left: pa.DataType, right: pa.DataType) -> int:
    """The digits Arrow gives the decimal result of ``name`` (0 unless a decimal128 operand meets a decimal
    or an integer)."""
    if not any(pa.types.is_decimal128(t) for t in (left, right)):
        return 0
    shapes = []
    for t in (left, right):
        if pa.types.is_decimal(t):
            shapes.append((t.precision, t.scale))
        elif pa.types.is_integer(t):
            shapes.append((20 if pa.types.is_unsigned_integer(t) else 19, 0))  # as Arrow casts them
        else:
            return 0  # a float: the decimal becomes a float
    (p1, s1), (p2, s2) = shapes
    if name.startswith("multiply"):
        return int(p1 + p2 + 1)
    if name.startswith(("add", "subtract")):
        return int(max(s1, s2) + max(p1 - s1, p2 - s2) + 1)
    if name.startswith("divide"):
        return int(p1 - s1 + s2 + max(4, s1 + p2 - s2 + 1))
    if name in _COMPARISONS:  # both sides as one type
        return int(max(s1, s2) + max(p1 - s1, p2 - s2))
    return 0


_COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})


def literal_value(node: exp.Expression) -> object:
    """The Python value of a literal node, or NO_LITERAL."""
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else number(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value = number(node.this.this)
        return value.copy_negate() if isinstance(value, Decimal) else -value  # exact: no context rounding
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.HexString):
        try:
            return bytes.fromhex(node.this)
        except ValueError as exc:
            raise FilterError(f"invalid X literal {node.this!r} ({exc})") from None
    if (
        isinstance(node, exp.Cast)
        and not isinstance(node, exp.TryCast)
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
    ):
        return _typed_literal(node.to.this, node.this.this)
    return NO_LITERAL


def column_name(node: exp.Column) -> str:
    """A column's name; dotted names (``a.b``) are one name, as the filter language has always read them."""
    return ".".join(part.name for part in node.parts)


# ---------------------------------------------------------------------------------------------
# Filters


def parse_filter(text: str) -> Expr:
    """Filter text to an :class:`~mere.expr.Expr`: prunable atoms where possible, Sql atoms elsewhere."""
    parsed = parse_expression(text)
    return _filter(parsed.tree, parsed)


def _in_values(node: exp.In, parsed: Parsed) -> list[object] | None:
    field = node.args.get("field")
    if field is not None:
        if isinstance(field, exp.Placeholder) and str(field.name).startswith(LIST_PREFIX):
            return parsed.lists[field.name]
        return None
    if node.args.get("query") is not None:
        raise FilterError("IN (SELECT ...) is not supported: mere is not a SQL engine")
    values = []
    for item in node.expressions:
        v = literal_value(item)
        if v is NO_LITERAL:
            return None
        values.append(v)
    return values


def _with_lists(text: str, parsed: Parsed) -> str:
    """SQL text with the bulk lists' placeholders (``$mere_list_0``) written out again as literal lists.

    Text, not syntax trees: a million-value list costs one join, and parsing the text again lifts it out
    again in one pass."""
    if not parsed.lists:
        return text

    def values(m: re.Match[str]) -> str:
        return "(" + ", ".join(map(format_literal, parsed.lists[m.group(1)])) + ")"

    return re.sub(rf"\$({LIST_PREFIX}\d+)", values, text)


def _filter(node: exp.Expression, parsed: Parsed) -> Expr:
    if isinstance(node, exp.Paren):
        return _filter(node.this, parsed)
    if isinstance(node, exp.And | exp.Or):
        # A chain of hundreds of ANDs or ORs parses as a tree that deep: its terms are collected without
        # recursion, and a long chain is combined as a balanced tree, which no step below finds too deep.
        kind = type(node)
        terms: list[exp.Expression] = []
        stack: list[exp.Expression] = [node]
        while stack:  # a parenthesised group stays one term: the tree keeps the grouping written
            item = stack.pop()
            if type(item) is kind:
                stack.extend([item.expression, item.this])  # popped left first: the terms keep their order
            else:
                terms.append(item)
        return combined([_filter(t, parsed) for t in terms], And if kind is exp.And else Or)
    if isinstance(node, exp.Not):
        inner = node.this
        if (
            isinstance(inner, exp.Is)
            and isinstance(inner.expression, exp.Null)
            and isinstance(inner.this, exp.Column)
        ):
            return IsNull(column_name(inner.this), negated=True)
        if isinstance(inner, exp.In) and isinstance(inner.this, exp.Column):
            values = _in_values(inner, parsed)
            if values is not None:
                return In(column_name(inner.this), tuple(values), negated=True)
        return Not(_filter(inner, parsed))
    if isinstance(node, exp.Boolean):
        return AlwaysTrue() if node.this else AlwaysFalse()
    op = _COMPARE_OPS.get(type(node))
    if op is not None:
        left, right = node.this, node.expression
        lv, rv = literal_value(left), literal_value(right)
        if (
            (lv is None and rv is not NO_LITERAL)
            or (rv is None and lv is not NO_LITERAL)
            or (
                (lv is None or rv is None) and (isinstance(left, exp.Column) or isinstance(right, exp.Column))
            )
        ):
            raise FilterError(
                f"comparison with NULL is never true; use IS NULL or IS NOT NULL (filter: {parsed.text!r})"
            )
        if isinstance(left, exp.Column) and rv is not NO_LITERAL:
            return Compare(op, column_name(left), rv)
        if isinstance(right, exp.Column) and lv is not NO_LITERAL:
            return Compare(flip(op), column_name(right), lv)
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column):
        values = _in_values(node, parsed)
        if values is not None:
            return In(column_name(node.this), tuple(values))
    if isinstance(node, exp.Between) and isinstance(node.this, exp.Column):
        low, high = literal_value(node.args["low"]), literal_value(node.args["high"])
        if low is not NO_LITERAL and high is not NO_LITERAL and low is not None and high is not None:
            name = column_name(node.this)
            return And(Compare(">=", name, low), Compare("<=", name, high))
    if (
        isinstance(node, exp.Is)
        and isinstance(node.expression, exp.Null)
        and isinstance(node.this, exp.Column)
    ):
        return IsNull(column_name(node.this))
    if isinstance(node, exp.Is) and not isinstance(node.expression, exp.Null | exp.Boolean):
        raise FilterError(f"expected NULL after IS [NOT] (filter: {parsed.text!r})")
    return Sql(_with_lists(sql_text(node), parsed))


# ---------------------------------------------------------------------------------------------
# Typed lowering to pyarrow compute expressions


def _integer_scalar(value: int) -> pa.Scalar:
    """An integer literal's Arrow scalar, typed as DuckDB types it: int64, uint64 beyond (DuckDB's
    UBIGINT, for unsigned columns), an exact decimal of its digits beyond both (as DuckDB's HUGEINT, it
    keeps its value; of its digits, so that arithmetic with it fits Arrow's 38; decimal256 up to 76
    digits, where DuckDB has a double), a double beyond 76 digits."""
    if -(2**63) <= value < 2**63:
        return pa.scalar(value, pa.int64())
    if 0 <= value < 2**64:
        return pa.scalar(value, pa.uint64())
    digits = len(str(abs(value)))
    if digits <= 38:
        return pa.scalar(Decimal(value), pa.decimal128(digits, 0))
    if digits <= 76:  # exact still: compared with a decimal256 expression, a double would round
        return pa.scalar(Decimal(value), pa.decimal256(digits, 0))
    return pa.scalar(float(value), pa.float64())


_UNITS = ("ns", "us", "ms", "s")  # finest first


@dataclass(frozen=True)
class Typed:
    """A lowered expression and the Arrow type of its values."""

    expr: pc.Expression
    type: pa.DataType
    value: object = NO_LITERAL  # the literal's value, for literals

    @property
    def is_literal(self) -> bool:
        """Whether this is a literal (its value known at planning time)."""
        return self.value is not NO_LITERAL


Resolver = Callable[[exp.Column], tuple[str, pa.DataType]]


def schema_resolver(schema: pa.Schema) -> Resolver:
    """Columns by name in one schema (filters, UPDATE)."""

    def resolve(node: exp.Column) -> tuple[str, pa.DataType]:
        name = column_name(node)
        if name not in schema.names:
            raise FilterError(
                f"unknown column {name!r}; available columns: {', '.join(schema.names) or '(none)'}"
            )
        return name, schema.field(name).type

    return resolve


def _null(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, t)


def _call(name: str, *args: pc.Expression, options: pc.FunctionOptions | None = None) -> pc.Expression:
    """The expression ``name(args)`` (pyarrow has no public constructor for a named function's call)."""
    return pc.Expression._call(name, list(args), options)


def _compare_units(op: str, left: Typed, right: Typed) -> Typed:
    """``left op right`` for timestamps of two units, exactly: the finer side is split into whole units of
    the coarser one (floored) and a remainder, so no value is cast into a range that may not hold it (a
    microsecond beyond the years 1677-2262 has no nanosecond value). NULL on either side gives NULL."""

    if _UNITS.index(left.type.unit) > _UNITS.index(right.type.unit):  # left is the coarser side
        op, left, right = str(flip(cast(CompareOp, op))), right, left
    factor = pc.scalar(1000 ** (_UNITS.index(right.type.unit) - _UNITS.index(left.type.unit)))
    # Each side in its own type first: a file may hold another unit (Parquet keeps seconds as milliseconds).
    fine = left.expr.cast(left.type).cast(pa.int64())
    coarse = right.expr.cast(right.type).cast(pa.int64())
    whole = _call("divide", fine, factor)  # integer division: toward zero
    rest = _call("subtract", fine, _call("multiply", whole, factor))
    below = _call("less", rest, pc.scalar(0))
    whole = _call("if_else", below, _call("subtract", whole, pc.scalar(1)), whole)
    rest = _call("if_else", below, _call("add", rest, factor), rest)
    same = _call("and", _call("equal", whole, coarse), _call("equal", rest, pc.scalar(0)))
    out = {
        "<": _call("less", whole, coarse),
        ">=": _call("greater_equal", whole, coarse),
        "==": same,
        "!=": _call("invert", same),
        "<=": _call("or_kleene", _call("less", whole, coarse), same),
        ">": _call(
            "or_kleene",
            _call("greater", whole, coarse),
            _call("and", _call("equal", whole, coarse), _call("greater", rest, pc.scalar(0))),
        ),
    }[op]
    return Typed(out, pa.bool_())


_DAY_UNITS = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000}
_CYCLE_DAYS = 146_097  # the Gregorian calendar repeats every 400 years, 146,097 days


def _near_1970(value: Typed) -> tuple[Typed, pc.Expression] | None:
    """A date or timestamp moved by whole 400-year cycles to where pyarrow's calendar kernels are exact, and
    the cycles. The calendar repeats every 400 years (146,097 days, a whole number of weeks), so every part
    but the year is the same there; beyond it the kernels go wrong (the year is kept in 16 bits and wraps
    beyond 32767; hours of seconds and milliseconds overflow, and their months and days follow). None for
    nanoseconds (years 1677-2262: the kernels are exact)."""
    t = value.type
    if pa.types.is_date32(t):
        width, per_day = pa.int32(), 1
    elif pa.types.is_date64(t):
        width, per_day = pa.int64(), _DAY_UNITS["ms"]
    elif pa.types.is_timestamp(t) and t.unit in _DAY_UNITS:
        width, per_day = pa.int64(), _DAY_UNITS[t.unit]
    else:
        return None
    if getattr(t, "tz", None) in _UTC_NAMES:  # no offset: its wall clock is its instant, read as naive
        t = pa.timestamp(t.unit)
    # In its own type first: a file may hold another (Parquet keeps date64 as days, seconds as milliseconds).
    raw = value.expr.cast(value.type).cast(width)
    cycle = pc.scalar(pa.scalar(_CYCLE_DAYS * per_day, width))  # in the raw width: no widening pass
    cycles = _call("divide", raw, cycle)  # toward zero: what is left lies within one cycle of 1970
    if getattr(t, "tz", None) is not None:
        cycles = _far_cycles(cycles)
    return Typed(_call("subtract", raw, _call("multiply", cycles, cycle)).cast(t), t), cycles


def _civil_year(value: Typed) -> Typed | None:
    """``year()`` of a date or a timestamp, right over the whole of its type's range: the year of the value
    moved near 1970 (:func:`_near_1970`) and the cycles' years added back. None where the kernel is right as
    it is (nanoseconds)."""
    moved = _near_1970(value)
    if moved is None:
        return None
    near, cycles = moved
    years = _call("multiply", cycles.cast(pa.int64()), pc.scalar(400))
    return Typed(_call("add", _call("year", near.expr), years), pa.int64())


def _exact_everywhere(t: pa.DataType) -> bool:
    """Whether pyarrow's kernels for the parts below the year (month to second, quarter, weekday) are
    exact over the whole of ``t``: naive microseconds and nanoseconds (measured; seconds and milliseconds
    overflow far out, a zoned value's offset at int64's ends, and a date at 2**31 - 1 days)."""
    return bool(pa.types.is_timestamp(t) and t.unit in ("us", "ns") and t.tz is None)


_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "+00:00", "Z"})
_KEPT_CYCLES = 75  # 30,000 years: beyond every zone's transitions, inside the kernel's range


def _far_cycles(cycles: pc.Expression) -> pc.Expression:
    """The cycles to move a zoned timestamp by: its wall clock depends on the zone's offset at that
    instant, so only values beyond the kernel's range move, and to 30,000-30,400 years from 1970 on their
    own side, where the offset is what it was (the zone's first one in the far past, its last one in the
    far future); the others stay where they are."""
    kept = pc.scalar(pa.scalar(_KEPT_CYCLES, pa.int64()))
    negative_kept = pc.scalar(pa.scalar(-_KEPT_CYCLES, pa.int64()))
    # cycles - clip(cycles, -kept, kept): 0 within, the cycles beyond +-kept outside
    clipped = _call("max_element_wise", _call("min_element_wise", cycles, kept), negative_kept)
    return _call("subtract", cycles, clipped)


def _zoned_micros(value: Typed) -> Typed:
    """A zoned nanosecond timestamp as microseconds, floored (every wall-clock part from the microsecond up
    stays the same), where its wall clock fits: Arrow reads the wall clock as the instant plus the zone's
    offset, which for nanoseconds within an offset of int64's ends overflowed and wrapped (Berlin's
    2262-04-11 23:47 UTC read as 1677-09-21)."""
    t = value.type
    raw = value.expr.cast(t).cast(pa.int64())  # in its own type first, as _civil_year
    thousand = pc.scalar(1000)
    toward_zero = _call("divide", raw, thousand)
    below = _call("less", _call("subtract", raw, _call("multiply", toward_zero, thousand)), pc.scalar(0))
    micros = pa.timestamp("us", tz=t.tz)
    return Typed(_call("subtract", toward_zero, below.cast(pa.int64())).cast(micros), micros)


def _is_zoned_nanos(t: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(t) and t.unit == "ns" and t.tz is not None)


def _typed_null(t: pa.DataType) -> pc.Expression:
    """A NULL of type ``t`` (``if_else`` of a constant and an untyped NULL narrows the constant's type:
    ``if_else(c, 100, NULL)`` is an int8, and ``* 2`` of it overflows)."""
    return pc.scalar(_null(t))


def _int_fits(value: int, t: pa.DataType) -> bool:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return bool(0 <= value < 2**bits)
    return bool(-(2 ** (bits - 1)) <= value < 2 ** (bits - 1))


def _is_float(t: pa.DataType) -> bool:
    return bool(pa.types.is_floating(t))


_CAST_TYPES: dict[Any, pa.DataType] = {
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.UTINYINT: pa.uint8(),
    exp.DataType.Type.USMALLINT: pa.uint16(),
    exp.DataType.Type.UINT: pa.uint32(),
    exp.DataType.Type.UBIGINT: pa.uint64(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.CHAR: pa.string(),
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.DATE: pa.date32(),
    exp.DataType.Type.TIMESTAMP: pa.timestamp("us"),
    exp.DataType.Type.TIMESTAMPNTZ: pa.timestamp("us"),
    exp.DataType.Type.DATETIME: pa.timestamp("us"),
    exp.DataType.Type.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMP_NS: pa.timestamp("ns"),
    exp.DataType.Type.BLOB: pa.binary(),
    exp.DataType.Type.VARBINARY: pa.binary(),
    exp.DataType.Type.BINARY: pa.binary(),
}


def arrow_type(node: exp.DataType) -> pa.DataType:
    """The Arrow type a SQL type name stands for."""
    kind = node.this
    if kind == exp.DataType.Type.DECIMAL:
        params = [
            int(str(p.this.this if isinstance(p.this, exp.Literal) else p.this)) for p in node.expressions
        ]
        precision, scale = [*params, 18, 3][:2] if params else (18, 3)
        if len(params) == 1:
            scale = 0
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    found = _CAST_TYPES.get(kind)
    if found is None:
        raise FilterError(f"CAST to {node.sql(dialect=MereDialect)} is not supported")
    return found


def _on_decimal_grid(call: Callable[..., Any], number: Callable[[float], Any], value: Any, scale: int) -> Any:
    """A double rounded to ``scale`` digits as DuckDB's cast to a decimal rounds it: times 10^scale (in
    double), to a whole number with halves away from zero, divided back, so that Arrow's exact cast of the
    result lands on that grid point (exact below 2**50). Larger products have no fraction left: the value
    stays as it is. ``call(name, *args, options=)`` builds expressions, or computes on scalars, alike.
    (Arrow's round to ``scale`` digits misses the grid beyond about 11 digits, and its ties of negative
    values are inexact: -0.49999999999999994 rounded to -1, so the magnitude is rounded.)"""
    tens = number(10.0**scale)
    scaled = call("multiply", value, tens)
    size = call("round", call("abs", scaled), options=pc.RoundOptions(0, "half_towards_infinity"))
    whole = call("multiply", call("sign", scaled), size)
    return call("if_else", call("less", size, number(2.0**50)), call("divide", whole, tens), value)


def _computed(name: str, *args: Any, options: pc.FunctionOptions | None = None) -> Any:
    """``name(args)`` computed now (on scalars: a literal's value)."""
    return pc.call_function(name, list(args), options)


def _decimal_as_float(value: pc.Expression, t: pa.DataType, to: pa.DataType) -> pc.Expression:
    """A decimal column as a float, rounded as SQL engines round it: its unscaled integer as a double
    over 10^scale (DuckDB's cast), the nearest double where the integer has at most 53 bits. Arrow's
    cast multiplies by an inexact 10^-scale instead: 0.3 became 0.30000000000000004."""
    doubles = pc.CastOptions(pa.float64())
    if 0 <= t.scale <= t.precision <= 18:  # the unscaled integer fits an int64
        shift = pc.scalar(pa.scalar(Decimal(10**t.scale), pa.decimal128(t.scale + 1, 0)))
        unscaled = pc.Expression._call("multiply", [value, shift])
        integer = pc.Expression._call("cast", [unscaled], pc.CastOptions(pa.int64()))
        # beyond 53 bits the nearest double (Arrow's checked cast would refuse it)
        quotient = pc.Expression._call(
            "cast", [integer], pc.CastOptions(pa.float64(), allow_float_truncate=True)
        )
        out = pc.Expression._call("divide", [quotient, pc.scalar(float(10**t.scale))])
    else:  # wider: Arrow parses the decimal's text to the nearest double
        text = pc.Expression._call("cast", [value], pc.CastOptions(pa.string()))
        out = pc.Expression._call("cast", [text], doubles)
    return out if to == pa.float64() else pc.Expression._call("cast", [out], pc.CastOptions(to))


class Lowering:
    """Lowers syntax trees to typed ``pyarrow.compute`` expressions, columns found by ``resolve``."""

    def __init__(self, resolve: Resolver, text: str = "", lists: Mapping[str, list[object]] | None = None):
        self.resolve = resolve
        self.text = text
        self.lists = dict(lists or {})
        self.columns: set[str] = set()
        # The rows a CASE / IF / COALESCE branch being lowered is computed for (None: every row). Arrow
        # computes every branch for every row: the inputs of steps that can fail (checked arithmetic, casts,
        # rounding) read NULL on the other rows, so a branch a row does not take cannot fail it.
        self.guard: Typed | None = None
        self.in_condition = False  # lowering a condition: computed for every row, nested branches too

    # -- helpers ------------------------------------------------------------------------------

    def fail(self, message: str) -> FilterError:
        """A FilterError naming the expression text."""
        return FilterError(f"{message} (in {self.text!r})" if self.text else message)

    def guarded(self, rows: Typed | None, build: Callable[[], Typed]) -> Typed:
        """``build()`` lowered for ``rows`` only (a non-NULL boolean; None: as the enclosing branch)."""
        if self.in_condition:
            return build()
        outer = self.guard
        if rows is not None:
            self.guard = (
                rows
                if outer is None
                else Typed(pc.Expression._call("and", [outer.expr, rows.expr]), pa.bool_())
            )
        try:
            return build()
        finally:
            self.guard = outer

    def everywhere(self, build: Callable[[], Typed]) -> Typed:
        """``build()`` lowered for every row: conditions are (guarding them by other guarded conditions would
        grow the expression exponentially with the branches)."""
        outer, was = self.guard, self.in_condition
        self.guard, self.in_condition = None, True
        try:
            return build()
        finally:
            self.guard, self.in_condition = outer, was

    def _only_guarded_rows(self, value: Typed) -> Typed:
        """``value`` where the current guard holds, NULL elsewhere (a failing step's input)."""
        if self.guard is None or value.is_literal:
            return value
        return Typed(
            pc.Expression._call("if_else", [self.guard.expr, value.expr, _typed_null(value.type)]), value.type
        )

    def call(self, name: str, args: Sequence[Typed], options: pc.FunctionOptions | None = None) -> Typed:
        """``name(args)``, with its result type found by running the kernel on empty inputs."""
        try:
            probe = pc.call_function(name, [pa.nulls(0, a.type) for a in args], options)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            types = ", ".join(str(a.type) for a in args)
            raise self.fail(f"{name} cannot take ({types}): {exc}") from None
        if self.guard is not None and (name.endswith("_checked") or name in _MAY_FAIL):
            if args and all(a.is_literal for a in args):  # constants alone: computed per row all the same
                first = pc.Expression._call(
                    "if_else", [self.guard.expr, args[0].expr, _typed_null(args[0].type)]
                )
                args = [Typed(first, args[0].type), *args[1:]]
            else:
                args = [self._only_guarded_rows(a) for a in args]
        expr = pc.Expression._call(name, [a.expr for a in args], options)
        if name in _REASSOCIATED:
            # Arrow flattens and reorders chains of these calls when it binds an expression; a one-argument
            # coalesce keeps SQL's evaluation order (floats overflow and round, integers overflow, by order).
            expr = pc.Expression._call("coalesce", [expr])
        return Typed(expr, probe.type)

    def cast(self, value: Typed, to: pa.DataType, safe: bool = True) -> Typed:
        """``value`` as type ``to`` (SQL's CAST); literals are converted now, columns by Arrow's cast."""
        if value.type == to:
            return value
        if value.is_literal and self.guard is not None:
            try:
                return self._cast_constant(value, to)
            except FilterError:  # a branch some rows take: the cast fails on those rows only, when run
                return self._cast_when_run(value, to)
        if value.is_literal:
            return self._cast_constant(value, to)
        value = self._only_guarded_rows(value)  # a cast may fail on a value
        if _is_zoned_nanos(value.type) and pa.types.is_date(to):
            value = _zoned_micros(value)  # the day of its wall clock
        if _is_zoned_nanos(value.type) and is_text(to):
            return self._zoned_nanos_text(value, to)
        wide = pa.decimal128(38, 0)
        if pa.types.is_integer(value.type) and pa.types.is_decimal(to) and to != wide:
            # Arrow wants room for every value of the integer type; SQL checks the values themselves.
            value = self.cast(value, wide)
        try:
            pc.cast(pa.nulls(0, value.type), to)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise self.fail(f"cannot cast {value.type} to {to}: {exc}") from None
        if pa.types.is_decimal(value.type) and _is_float(to):
            return Typed(_decimal_as_float(value.expr, value.type, to), to)
        if pa.types.is_decimal(value.type) and pa.types.is_decimal(to) and to.scale < value.type.scale:
            # fewer digits: rounded, halves away from zero, as DuckDB's cast (Arrow's refuses the loss)
            value = self.decimal_rounded(self.roomy(value), to.scale, "half_away", keep_scale=False)
        if _is_float(value.type) and pa.types.is_decimal(to) and to.scale >= 0:
            # halves away from zero too, as DuckDB's cast (Arrow's rounds a float's halves to even); a
            # float32 is scaled in double, as DuckDB scales it
            double = self.cast(value, pa.float64())
            value = Typed(_on_decimal_grid(_call, pc.scalar, double.expr, to.scale), pa.float64())
        # A cast to a float rounds (CAST(u AS DOUBLE) of 2**64 - 1 is 1.8446744073709552e19).
        options = pc.CastOptions(
            to, allow_int_overflow=not safe, allow_float_truncate=not safe or _is_float(to)
        )
        cast_value = Typed(pc.Expression._call("cast", [value.expr], options), to)
        if safe and _is_float(value.type) and _is_float(to) and to.bit_width < value.type.bit_width:
            return self._refuse_overflow(value, cast_value)
        if pa.types.is_time(value.type) and is_text(to):
            # As DuckDB spells times: the fraction without trailing zeros (12:00:00.5, 12:00:00)
            digits = pc.ReplaceSubstringOptions(r"(\.[0-9]*?)0+$", r"\1")
            dot = pc.ReplaceSubstringOptions(r"\.$", "")
            cast_value = self.call("replace_substring_regex", [cast_value], digits)
            cast_value = self.call("replace_substring_regex", [cast_value], dot)
        if _is_float(value.type) and is_text(to):
            # As DuckDB spells floats: a whole number keeps its ".0" (1.0, -0.0), an exponent two digits.
            whole = pc.ReplaceSubstringOptions(r"^(-?[0-9]+)$", r"\1.0")
            short = pc.ReplaceSubstringOptions(r"e([+-])([0-9])$", r"e\10\2")
            cast_value = self.call("replace_substring_regex", [cast_value], whole)
            cast_value = self.call("replace_substring_regex", [cast_value], short)
        return cast_value

    def _zoned_nanos_text(self, value: Typed, to: pa.DataType) -> Typed:
        """A zoned nanosecond timestamp spelt as Arrow spells it, its wall clock read at microseconds (see
        :func:`_zoned_micros`) and its last three digits put back: ``2262-04-12 00:47:16.854775807+0100``."""
        micros = self.cast(_zoned_micros(value), pa.string())
        raw = value.expr.cast(value.type).cast(pa.int64())
        thousand = pc.scalar(1000)
        below = _call("subtract", raw, _call("multiply", _call("divide", raw, thousand), thousand))
        # Floored: a negative remainder is 1000 more (the microseconds were floored alike).
        nanos = _call("if_else", _call("less", below, pc.scalar(0)), _call("add", below, thousand), below)
        digits = _call("utf8_lpad", nanos.cast(pa.string()), options=pc.PadOptions(3, "0"))
        # Years 1677-2262 have four digits: 26 characters run to the microsecond, the offset follows.
        head = _call("utf8_slice_codeunits", micros.expr, options=pc.SliceOptions(0, 26))
        tail = _call("utf8_slice_codeunits", micros.expr, options=pc.SliceOptions(26))
        text = Typed(_call("binary_join_element_wise", head, digits, tail, pc.scalar("")), pa.string())
        return self.cast(text, to)

    def _refuse_overflow(self, value: Typed, narrowed: Typed) -> Typed:
        """``narrowed`` (a float cast to a narrower float), failing where a finite value became infinite,
        as SQL's cast does. Arrow has no function that raises, so the rows that overflow parse a text
        that says so as a number."""
        wide, to = value.type, narrowed.type
        finite = self.call("is_finite", [value])
        overflow = self.call("and", [finite, self.call("is_inf", [narrowed])])
        overflow = self.call("coalesce", [overflow, self.literal(False)])
        message = Typed(pc.scalar(f"{wide} value out of range for {to}"), pa.string())
        failing = self.call("if_else", [overflow, message, Typed(pc.scalar(_null(pa.string())), pa.string())])
        parsed = Typed(pc.Expression._call("cast", [failing.expr], pc.CastOptions(to)), to)
        return self.call("if_else", [overflow, parsed, narrowed])

    def literal(self, value: object) -> Typed:
        """A Python value as a typed Arrow literal (integers as int64, uint64 beyond)."""
        if value is None:
            return Typed(pc.scalar(_null(pa.null())), pa.null(), None)
        try:
            if type(value) is int:
                scalar = _integer_scalar(value)
            elif isinstance(value, _dt.datetime):
                unit = "ns" if getattr(value, "nanosecond", 0) else "us"  # a pandas Timestamp's nanoseconds
                scalar = pa.scalar(value, pa.timestamp(unit, tz="UTC" if value.tzinfo else None))
            else:
                scalar = pa.scalar(value)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError) as exc:
            raise self.fail(f"literal {value!r} does not fit an Arrow type: {exc}") from None
        return Typed(pc.scalar(scalar), scalar.type, value)

    def literal_as(self, value: Typed, to: pa.DataType) -> Typed:
        """A literal read as type ``to`` (a string as a date, a number as the column's type)."""
        if value.value is None:
            return Typed(pc.scalar(_null(to)), to, None)
        try:
            if isinstance(value.value, str) and not is_text(to):
                bound = bind_scalar(value.value, "literal", to)
                if isinstance(bound, Gap):
                    raise FilterError(f"{value.value!r} is not a {to} value")
                scalar = pa.scalar(bound, to)
            elif type(value.value) is int and pa.types.is_decimal(to):
                scalar = pa.scalar(Decimal(value.value)).cast(to)  # checks the value, not int64's range
            elif isinstance(value.value, Decimal) and _is_float(to):
                scalar = pa.scalar(float(value.value), pa.float64()).cast(to)  # the nearest double
            elif type(value.value) is int and _is_float(to):
                scalar = pa.scalar(bind_float(value.value, to), to)  # the nearest value, as SQL rounds
            else:
                scalar = pa.scalar(value.value, value.type).cast(to)
        except FilterError as exc:
            reason = str(exc).rsplit(": ", 1)[-1]
            raise self.fail(f"literal {value.value!r} is not a {to} value ({reason})") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
            raise self.fail(f"literal {value.value!r} is not a {to} value: {exc}") from None
        return Typed(pc.scalar(scalar), to, scalar.as_py())

    def _cast_when_run(self, value: Typed, to: pa.DataType) -> Typed:
        """A constant that does not convert to ``to``, cast on the rows of the current guard when the
        statement runs (there it fails, as SQL's cast; a branch no row takes is no error)."""
        assert self.guard is not None
        guarded = pc.Expression._call("if_else", [self.guard.expr, value.expr, _typed_null(value.type)])
        return Typed(pc.Expression._call("cast", [guarded], pc.CastOptions(to)), to)

    def _cast_constant(self, value: Typed, to: pa.DataType) -> Typed:
        """A literal as type ``to``, converted now (text parsed as the type)."""
        if isinstance(value.value, str) and not is_text(to):
            try:  # CAST('12.34' AS DECIMAL(9, 2)): text is parsed as the type
                scalar = pa.scalar(value.value, pa.string()).cast(to)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise self.fail(f"cannot cast {value.value!r} to {to}: {exc}") from None
            return Typed(pc.scalar(scalar), to, scalar.as_py())
        return self.cast_literal(value, to)

    def cast_literal(self, value: Typed, to: pa.DataType) -> Typed:
        """A literal CAST (or stored) as type ``to``: as :meth:`literal_as`, and a finite number beyond a
        float type's range is an error, as SQL's cast (a comparison with it stays exact instead)."""
        number = value.value
        if isinstance(number, Decimal) and number.is_finite() and pa.types.is_decimal(to):
            # fewer digits: rounded, halves away from zero, as DuckDB's cast (comparisons stay exact)
            exponent = Decimal(1).scaleb(-to.scale)
            if number.as_tuple().exponent < exponent.as_tuple().exponent:  # type: ignore[operator]
                with localcontext(prec=100):
                    value = self.literal(number.quantize(exponent, rounding=ROUND_HALF_UP))
        if isinstance(number, float) and math.isfinite(number) and pa.types.is_decimal(to) and to.scale >= 0:
            # rounded by the kernels a column's cast runs (see :meth:`cast`): halves away from zero
            double = partial(pa.scalar, type=pa.float64())
            grid = _on_decimal_grid(_computed, double, double(number), to.scale)
            value = Typed(pc.scalar(grid), pa.float64(), grid.as_py())
        out = self.literal_as(value, to)
        finite = isinstance(number, int | float | Decimal) and not isinstance(number, bool)
        if finite and _is_float(to) and math.isinf(out.value) and not math.isinf(float(number)):  # type: ignore[arg-type]
            raise self.fail(f"literal {number!r} is out of range for {to}")
        return out

    def unify(
        self, values: Sequence[Typed], what: str, guards: Sequence[Typed | None] | None = None
    ) -> list[Typed]:
        """Values cast to one common type (NULL literals and string literals take the others' type);
        ``guards``: the rows each value is computed for (see :meth:`guarded`)."""
        typed = [
            v
            for v in values
            if not pa.types.is_null(v.type) and not (v.is_literal and isinstance(v.value, str))
        ]
        if not typed:
            typed = [v for v in values if not pa.types.is_null(v.type)] or list(values)
        # Integer literals take the other values' integer type where they fit it (COALESCE(127, u64) is a
        # uint64), as in DuckDB: otherwise a common type with int64 would refuse large uint64 values.
        columns = [v for v in typed if not v.is_literal]
        if columns and len({v.type for v in columns}) == 1 and pa.types.is_integer(columns[0].type):
            kind = columns[0].type
            if all(not v.is_literal or (type(v.value) is int and _int_fits(v.value, kind)) for v in typed):
                typed = columns
        types = {v.type for v in typed}
        signs = {pa.types.is_unsigned_integer(t) for t in types if pa.types.is_integer(t)}
        if len(types) == 1:
            target = types.pop()
        elif (
            all(pa.types.is_integer(t) for t in types)
            and len(signs) == 2
            and any(t.bit_width == 64 for t in types)
        ):
            target = pa.decimal128(20, 0)  # signed and unsigned 64-bit values: no integer type holds both
        else:
            try:
                target = pc.coalesce(*[pa.nulls(0, t) for t in {v.type for v in typed}]).type
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                names = ", ".join(sorted(str(t) for t in types))
                raise self.fail(f"{what} mixes types with no common type ({names}): {exc}") from None
        if pa.types.is_null(target):
            return list(values)
        rows = guards if guards is not None else [None] * len(values)
        return [self.guarded(g, lambda v=v: self.cast(v, target)) for v, g in zip(values, rows)]  # type: ignore[misc]

    def boolean(self, value: Typed, what: str) -> Typed:
        """``value`` checked to be a truth value (NULL literals become boolean NULL)."""
        if pa.types.is_null(value.type):
            return self.cast(value, pa.bool_())
        if not pa.types.is_boolean(value.type):
            raise self.fail(f"{what} must be a boolean expression, got {value.type}")
        return value

    # -- entry point ----------------------------------------------------------------------------

    def lower(self, node: exp.Expression) -> Typed:
        """Lower one syntax tree node (and its children)."""
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is not None:
            return cast(Typed, method(node))
        value = literal_value(node)
        if value is not NO_LITERAL:
            return self.literal(value)
        return self._function(node)

    # -- nodes ----------------------------------------------------------------------------------

    def _Paren(self, node: exp.Paren) -> Typed:
        return self.lower(node.this)

    def _Column(self, node: exp.Column) -> Typed:
        name, typ = self.resolve(node)
        self.columns.add(name)
        return Typed(computed_field(name, typ), computed_type(typ))  # half floats as floats

    def _Cast(self, node: exp.Cast) -> Typed:
        value = literal_value(node)
        if value is not NO_LITERAL:
            constant = self.literal(value)
            try:
                return self.cast_literal(constant, arrow_type(node.to))
            except FilterError:
                if self.guard is None:
                    raise
                return self._cast_when_run(constant, arrow_type(node.to))
        return self.cast(self.to_integer(self.lower(node.this), arrow_type(node.to)), arrow_type(node.to))

    def to_integer(self, value: Typed, to: pa.DataType) -> Typed:
        """Before a cast to an integer type: round as DuckDB does (DOUBLE halves to even, DECIMAL halves
        away from zero); Arrow would refuse or truncate."""
        if not pa.types.is_integer(to):
            return value
        if _is_float(value.type):
            return self.call("round", [value], pc.RoundOptions(0, "half_to_even"))
        if pa.types.is_decimal(value.type):
            return self.decimal_rounded(self.roomy(value), 0, "half_away", keep_scale=False)
        return value

    def decimal_rounded(self, value: Typed, digits: int, mode: str, keep_scale: bool = True) -> Typed:
        """Decimal ``value`` rounded to ``digits`` fractional digits (``mode``: ``"half_away"``, ``"floor"``,
        ``"ceil"`` or ``"trunc"``), as its own type, or with scale ``digits`` when not ``keep_scale``.

        Exact decimal steps: truncating casts through :func:`mere.arrays.decimal_rescale_steps` (Arrow's
        own rescaling by 10 or more digits is wrong for some large decimals), then one unit more or less
        where the dropped digits ask for it. The caller leaves room for a carry (see :meth:`roomy`)."""
        t = value.type
        if digits >= t.scale:
            return value
        if digits < 0 or t.precision >= 76:  # no decimal type to truncate into or add in: Arrow's kernel
            kernel = "round" if mode == "half_away" else mode
            options = pc.RoundOptions(digits, "half_towards_infinity") if mode == "half_away" else None
            return self.call(kernel, [value], options)
        room = pa.decimal128 if t.precision < 38 else pa.decimal256

        def decimal(number: Decimal, scale: int) -> pc.Expression:
            return pc.scalar(pa.scalar(number, room(scale + 1, scale)))

        same = room(t.precision, t.scale)
        x = value.expr.cast(same)
        kept = x
        for scale in decimal_rescale_steps(t.scale, digits):
            options = pc.CastOptions(room(t.precision, scale), allow_decimal_truncate=True)
            kept = pc.Expression._call("cast", [kept], options)
        back = kept.cast(same)  # scaled up: exact
        out = t if keep_scale else room(t.precision, digits)
        if mode == "trunc":
            return Typed(kept.cast(out), out)
        unit = decimal(Decimal(1).scaleb(-digits), digits)
        if mode == "floor":
            moved, step = _call("less", x, back), _call("subtract", kept, unit)
        elif mode == "ceil":
            moved, step = _call("greater", x, back), _call("add", kept, unit)
        else:
            half = decimal(Decimal(5).scaleb(-digits - 1), t.scale)
            moved = _call("greater_equal", _call("abs", _call("subtract", x, back)), half)
            negative = _call("less", x, decimal(Decimal(0), digits))
            step = _call("if_else", negative, _call("subtract", kept, unit), _call("add", kept, unit))
        carried = room(t.precision + 1, digits)
        result = _call("if_else", moved, step.cast(carried), kept.cast(carried))
        return Typed(result.cast(out), out)

    def roomy(self, value: Typed) -> Typed:
        """A decimal with room for one more integer digit: rounding may carry one (DECIMAL(9, 2)
        9999999.99 rounds to 10000000)."""
        t = value.type
        if not pa.types.is_decimal(t):
            return value
        if pa.types.is_decimal128(t) and t.precision < 38:
            return self.cast(value, pa.decimal128(t.precision + 1, t.scale))
        if t.precision < 76:
            return self.cast(value, pa.decimal256(t.precision + 1, t.scale))
        return value

    def _TryCast(self, node: exp.TryCast) -> Typed:
        raise self.fail("TRY_CAST is not supported; use CAST")

    def _Neg(self, node: exp.Neg) -> Typed:
        value = literal_value(node)
        if value is not NO_LITERAL:
            return self.literal(value)
        value = self.lower(node.this)
        if pa.types.is_unsigned_integer(value.type):  # SQL's minus of an unsigned value is signed
            wider = {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}.get(
                value.type.bit_width, pa.decimal128(20, 0)
            )
            value = self.cast(value, wider)
        return self.call("negate_checked", [value])

    def _arith(self, name: str, node: exp.Binary) -> Typed:
        left, right = self.lower(node.this), self.lower(node.expression)
        left, right = self._numeric_pair(left, right, name)
        return self.exact(name, left, right)

    def exact(self, name: str, left: Typed, right: Typed) -> Typed:
        """``name(left, right)``; where Arrow's decimal128 result (or common type) would need more than 38
        digits (``DECIMAL(38, 10) * 10``), computed exactly as decimal256 instead of refused."""
        if _decimal_digits(name, left.type, right.type) > 38:
            left, right = self._as_decimal256(left), self._as_decimal256(right)
        return self.call(name, [left, right])

    def _as_decimal256(self, value: Typed) -> Typed:
        t = value.type
        if pa.types.is_decimal128(t):
            return self.cast(value, pa.decimal256(t.precision, t.scale))
        if pa.types.is_integer(t):
            return self.cast(value, pa.decimal256(20, 0))  # holds every int64 and uint64
        return value

    def _numeric_pair(self, left: Typed, right: Typed, what: str) -> tuple[Typed, Typed]:
        if isinstance(left.value, str) and is_number(right.type):
            left = self.literal_as(left, right.type)
        if isinstance(right.value, str) and is_number(left.type):
            right = self.literal_as(right, left.type)
        if pa.types.is_null(left.type):
            left = self.cast(left, right.type if not pa.types.is_null(right.type) else pa.int64())
        if pa.types.is_null(right.type):
            right = self.cast(right, left.type)
        left, right = self._integers(left, right)
        # An integer against a float: the integer becomes that float (rounded, as SQL casts it); Arrow's
        # implicit cast would refuse integers the float cannot hold exactly.
        if pa.types.is_integer(left.type) and _is_float(right.type):
            left = self.cast(left, right.type)
        elif pa.types.is_integer(right.type) and _is_float(left.type):
            right = self.cast(right, left.type)
        # A decimal against a float: the decimal becomes a double as CAST makes it (the nearest one);
        # Arrow's implicit cast is off in the last place (1.2345 + 0e0 was 1.2345000000000002).
        if pa.types.is_decimal(left.type) and _is_float(right.type):
            left = self.cast(left, pa.float64())
        elif pa.types.is_decimal(right.type) and _is_float(left.type):
            right = self.cast(right, pa.float64())
        return left, right

    def _integers(self, left: Typed, right: Typed) -> tuple[Typed, Typed]:
        """Integer operands of different types: an integer literal takes the other side's type when it fits
        (``u + 1`` stays uint64, ``i32 + 1`` int32, as in DuckDB); signed against unsigned values that no
        integer type holds both of are compared and computed as exact decimals."""
        # An integer literal next to a decimal is a decimal of its own digits (1 is DECIMAL(1, 0)), not an
        # int64 that Arrow would widen to DECIMAL(19, 0) and overflow the precision with.
        if type(left.value) is int and pa.types.is_decimal(right.type):
            left = self.literal(Decimal(left.value))
        if type(right.value) is int and pa.types.is_decimal(left.type):
            right = self.literal(Decimal(right.value))
        lt, rt = left.type, right.type
        if not (pa.types.is_integer(lt) and pa.types.is_integer(rt)) or lt == rt:
            return left, right
        for a, b in ((left, right), (right, left)):
            if type(a.value) is int and not b.is_literal and _int_fits(a.value, b.type):
                cast_a = self.literal_as(a, b.type)
                return (cast_a, b) if a is left else (b, cast_a)
        if pa.types.is_unsigned_integer(lt) != pa.types.is_unsigned_integer(rt) and 64 in (
            lt.bit_width,
            rt.bit_width,
        ):
            exact = pa.decimal128(20, 0)  # holds every int64 and uint64
            return self.cast(left, exact), self.cast(right, exact)
        return left, right

    def _Add(self, node: exp.Add) -> Typed:
        return self._arith("add_checked", node)

    def _Sub(self, node: exp.Sub) -> Typed:
        return self._arith("subtract_checked", node)

    def _Mul(self, node: exp.Mul) -> Typed:
        return self._arith("multiply_checked", node)

    def _Div(self, node: exp.Div) -> Typed:
        left, right = self._numeric_pair(self.lower(node.this), self.lower(node.expression), "/")
        return self.call("divide", [self.cast(left, pa.float64()), self.cast(right, pa.float64())])

    def _nonzero(self, value: Typed) -> Typed:
        """``value``, NULL where it is zero (an integer division by zero is NULL)."""
        zero = self.call("equal", [value, self.literal_as(self.literal(0), value.type)])
        return self.call("if_else", [zero, Typed(pc.scalar(_null(value.type)), value.type), value])

    def _IntDiv(self, node: exp.IntDiv) -> Typed:
        left, right = self._numeric_pair(self.lower(node.this), self.lower(node.expression), "//")
        if pa.types.is_integer(left.type) and pa.types.is_integer(right.type):
            return self.call("divide_checked", [left, self._nonzero(right)])  # truncates
        # NULL for a zero divisor whatever the type (DuckDB's without its error), not an infinity
        divisor = self._nonzero(self.cast(right, pa.float64()))
        return self.call("divide", [self.cast(left, pa.float64()), divisor])

    def _Mod(self, node: exp.Mod) -> Typed:
        left, right = self._numeric_pair(self.lower(node.this), self.lower(node.expression), "%")
        if pa.types.is_integer(left.type) and pa.types.is_integer(right.type):
            right = self._nonzero(right)
            quotient = self.call("divide_checked", [left, right])
            return self.call("subtract_checked", [left, self.call("multiply_checked", [quotient, right])])
        decimals = pa.types.is_decimal(left.type) or pa.types.is_decimal(right.type)
        if decimals and not (_is_float(left.type) or _is_float(right.type)):
            right = self._nonzero(right)
            # x - trunc(x / y) * y with the quotient as a whole decimal keeps the precision small
            exact = self.roomy(self.exact("divide_checked", left, right))
            digits = max(1, exact.type.precision - exact.type.scale)
            quotient = self.decimal_rounded(exact, 0, "trunc", keep_scale=False)
            quotient = self.cast(
                quotient, pa.decimal128(digits, 0) if digits <= 38 else pa.decimal256(digits, 0)
            )
            return self.exact("subtract_checked", left, self.exact("multiply_checked", quotient, right))
        a, b = self.cast(left, pa.float64()), self.cast(right, pa.float64())
        if _HAS_REMAINDER:  # C's fmod: exact where a - trunc(a / b) * b rounds (1e308 % -3 is 2.0)
            return self.call("remainder", [a, b])
        quotient = self.call("trunc", [self.call("divide", [a, b])])
        rest = self.call("subtract", [a, self.call("multiply", [quotient, b])])
        # fmod's zero has the dividend's sign (-3 % -1 is -0.0); a * 0.0 is that zero
        zero = self.call("equal", [rest, self.literal(0.0)])
        return self.call("if_else", [zero, self.call("multiply", [a, self.literal(0.0)]), rest])

    def _text(self, value: Typed) -> Typed:
        if is_text(value.type):
            return value
        if value.is_literal and value.value is None:
            return self.literal_as(value, pa.string())
        if value.is_literal:
            return self.literal(str(value.value))
        return self.cast(value, pa.string())

    def _alike(
        self, parts: list[Typed], small: pa.DataType, large: pa.DataType
    ) -> tuple[list[Typed], pa.DataType]:
        """Parts as one type (Arrow joins only alike strings or bytes): ``large`` where one part has it."""
        kind = large if any(p.type == large for p in parts) else small
        return [self.cast(p, kind) for p in parts], kind

    def _DPipe(self, node: exp.DPipe) -> Typed:
        raw = [self.lower(node.this), self.lower(node.expression)]
        values = [p for p in raw if not (p.is_literal and p.value is None)]
        if values and all(is_bytes_type(p.type) for p in values):  # BLOB || BLOB joins the bytes
            parts, kind = self._alike(values, pa.binary(), pa.large_binary())
            if len(values) < len(raw):
                return Typed(pc.scalar(_null(kind)), kind, None)  # x || NULL is NULL
            return self.call("binary_join_element_wise", [*parts, self.cast(self.literal(b""), kind)])
        parts = [self._text(p) for p in raw]
        parts, kind = self._alike(parts, pa.string(), pa.large_string())
        if any(p.is_literal and p.value is None for p in parts):
            return Typed(pc.scalar(_null(kind)), kind, None)  # x || NULL is NULL
        return self.call("binary_join_element_wise", [*parts, self.cast(self.literal(""), kind)])

    def _Concat(self, node: exp.Concat) -> Typed:
        parts = [self._text(self.lower(a)) for a in node.expressions]
        parts = [p for p in parts if not (p.is_literal and p.value is None)]  # concat() skips NULLs
        if not parts:
            return self.literal("")
        parts, kind = self._alike(parts, pa.string(), pa.large_string())
        empty = self.cast(self.literal(""), kind)
        # NULL parts count as '' (Arrow's own "skip" mode drops rows whose parts are all NULL)
        filled = [self.call("coalesce", [p, empty]) for p in parts]
        if len(filled) == 1:
            return filled[0]
        return self.call("binary_join_element_wise", [*filled, empty])

    def _And(self, node: exp.And) -> Typed:
        return self.call(
            "and_kleene",
            [self.boolean(self.lower(node.this), "AND"), self.boolean(self.lower(node.expression), "AND")],
        )

    def _Or(self, node: exp.Or) -> Typed:
        return self.call(
            "or_kleene",
            [self.boolean(self.lower(node.this), "OR"), self.boolean(self.lower(node.expression), "OR")],
        )

    def _Not(self, node: exp.Not) -> Typed:
        return self.call("invert", [self.boolean(self.lower(node.this), "NOT")])

    def _Boolean(self, node: exp.Boolean) -> Typed:
        return self.literal(bool(node.this))

    # comparisons

    def compare(self, op: str, left: Typed, right: Typed) -> Typed:
        """``left op right`` with SQL's rules: literal coercion, NaN-aware floats, NULL is NULL."""
        if left.value is None or right.value is None:
            return Typed(pc.scalar(_null(pa.bool_())), pa.bool_(), None)
        if isinstance(left.value, str) and not is_text(right.type):
            left = self.literal_as(left, right.type)
        elif isinstance(right.value, str) and not is_text(left.type):
            right = self.literal_as(right, left.type)
        # A double literal stays a double: a float32 or integer side is widened to it, as SQL compares.
        if pa.types.is_null(left.type) != pa.types.is_null(right.type):  # e.g. COALESCE(NULL, NULL) = x
            left, right = (
                (self.cast(left, right.type), right)
                if pa.types.is_null(left.type)
                else (left, self.cast(right, left.type))
            )
        if _is_float(left.type) or _is_float(right.type):
            return self._float_compare(op, left, right)
        left, right = self._integers(left, right)
        lt, rt = left.type, right.type
        if (
            pa.types.is_timestamp(lt)
            and pa.types.is_timestamp(rt)
            and lt.unit != rt.unit
            and bool(lt.tz) == bool(rt.tz)
        ):
            return _compare_units(op, left, right)
        if pa.types.is_timestamp(lt) and pa.types.is_timestamp(rt) and lt != rt and lt.tz and rt.tz:
            # Instants of other zones and units: Arrow has no kernel for both at once; the finer unit in
            # UTC holds both (a zone is a label on the same instant).
            fine = pa.timestamp(min((lt.unit, rt.unit), key=_UNITS.index), "UTC")
            left, right = self.cast(left, fine), self.cast(right, fine)
        names = {
            "==": "equal",
            "!=": "not_equal",
            "<": "less",
            "<=": "less_equal",
            ">": "greater",
            ">=": "greater_equal",
        }
        return self.exact(names[op], left, right)

    def _float_compare(self, op: str, left: Typed, right: Typed) -> Typed:
        """Comparison where NaN equals NaN and is above every other value (SQL, not IEEE); a side that is
        not a float is cast to the other side's float type."""
        a = (
            left
            if _is_float(left.type)
            else self.cast(left, right.type if _is_float(right.type) else pa.float64())
        )
        b = right if _is_float(right.type) else self.cast(right, a.type)
        return compare_floats(op, a, b, self.call)

    def _comparison(self, node: exp.Binary) -> Typed:
        op = _COMPARE_OPS[cast(type[exp.Expression], type(node))]
        return self.compare(op, self.lower(node.this), self.lower(node.expression))

    _EQ = _NEQ = _LT = _LTE = _GT = _GTE = _comparison

    def _NullSafeEQ(self, node: exp.NullSafeEQ) -> Typed:
        return self._distinct(node, negate=False)

    def _NullSafeNEQ(self, node: exp.NullSafeNEQ) -> Typed:
        return self._distinct(node, negate=True)

    def _distinct(self, node: exp.Binary, negate: bool) -> Typed:
        left, right = self.lower(node.this), self.lower(node.expression)
        both_null = self.call("and_kleene", [self.call("is_null", [left]), self.call("is_null", [right])])
        equal = self.call("coalesce", [self.compare("==", left, right), self.literal(False)])
        same = self.call("or_kleene", [both_null, equal])
        return self.call("invert", [same]) if negate else same

    def _Between(self, node: exp.Between) -> Typed:
        value = self.lower(node.this)
        low, high = self.lower(node.args["low"]), self.lower(node.args["high"])
        return self.call("and_kleene", [self.compare(">=", value, low), self.compare("<=", value, high)])

    def _In(self, node: exp.In) -> Typed:
        value = self.lower(node.this)
        field = node.args.get("field")
        if node.args.get("query") is not None:
            raise self.fail("IN (SELECT ...) is not supported: mere is not a SQL engine")
        if isinstance(field, exp.Placeholder) and str(field.name) in self.lists:
            bulk = self.lists[field.name]
            if not _is_float(value.type) and not pa.types.is_null(value.type):
                return self._in_values(value, [v for v in bulk if v is not None], None in bulk)
            items = [self.literal(v) for v in bulk]
        elif field is not None:
            raise self.fail(f"IN {field.sql(dialect=MereDialect)} is not supported")
        else:
            items = [self.lower(v) for v in node.expressions]
        if not items:
            return self.literal(False)
        if len(items) > 16 and all(i.is_literal for i in items) and not _is_float(value.type):
            return self._in_set(value, items)
        result: Typed | None = None
        for item in items:
            test = self.compare("==", value, item)
            result = test if result is None else self.call("or_kleene", [result, test])
        assert result is not None
        return result

    def _in_set(self, value: Typed, items: list[Typed]) -> Typed:
        """``value IN (many literals)`` as one hash lookup (SQL's NULL rules kept)."""
        present = [self.literal_as(i, value.type).value for i in items if i.value is not None]
        return self._in_values(value, present, any(i.value is None for i in items))

    def _in_values(self, value: Typed, present: list[object], has_null: bool) -> Typed:
        try:
            values = pa.array(present).cast(value.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
            raise self.fail(f"the IN list's values are not {value.type} values: {exc}") from None
        found = Typed(
            pc.Expression._call("is_in", [value.expr], pc.SetLookupOptions(values, skip_nulls=True)),
            pa.bool_(),
        )
        null = Typed(pc.scalar(_null(pa.bool_())), pa.bool_(), None)
        found = self.call("if_else", [self.call("is_null", [value]), null, found])
        if has_null:  # x IN (..., NULL) is NULL, not FALSE, when x matches nothing
            found = self.call("or_kleene", [found, null])
        return found

    def _Is(self, node: exp.Is) -> Typed:
        value = self.lower(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return self.call("is_null", [value])
        if isinstance(target, exp.Boolean):
            test = self.call("equal", [self.boolean(value, "IS TRUE/FALSE"), self.literal(bool(target.this))])
            return self.call("coalesce", [test, self.literal(False)])
        raise self.fail("expected NULL, TRUE or FALSE after IS [NOT]")

    def _like(self, node: exp.Binary, ignore_case: bool) -> Typed:
        value = self._text(self.lower(node.this))
        pattern = literal_value(node.expression)
        if not isinstance(pattern, str):
            raise self.fail("LIKE takes a string literal pattern")
        if ignore_case:  # DuckDB's ILIKE compares lower() of both sides (RE2's case folding is wider)
            value = self.call("utf8_lower", [value])
            pattern = pc.utf8_lower(pa.scalar(pattern, pa.string())).as_py()
        # DuckDB's LIKE has no escape character; Arrow's treats a backslash as one.
        options = pc.MatchSubstringOptions(pattern.replace("\\", "\\\\"))
        result = self.call("match_like", [value], options)
        return self.call("invert", [result]) if node.args.get("negate") else result

    def _Like(self, node: exp.Like) -> Typed:
        return self._like(node, False)

    def _ILike(self, node: exp.ILike) -> Typed:
        return self._like(node, True)

    def _Escape(self, node: exp.Escape) -> Typed:
        raise self.fail("LIKE ... ESCAPE is not supported")

    # conditional

    def _Case(self, node: exp.Case) -> Typed:
        # A branch's value is computed for the rows its condition holds on (see Lowering.guard), the ELSE
        # for the rows no condition holds on; the conditions for every row. (Not also "no earlier condition
        # holds": every guarded step would repeat every earlier condition, quadratic in branches.)
        operand = self.everywhere(lambda: self.lower(node.this)) if node.this is not None else None
        conditions: list[Typed] = []
        values: list[Typed] = []
        guards: list[Typed | None] = []
        left: Typed | None = None  # rows no condition so far took
        for branch in node.args.get("ifs") or []:
            test = self.everywhere(lambda b=branch: self.lower(b.this))  # type: ignore[misc]
            if operand is not None:
                test = self.compare("==", operand, test)
            condition = self.boolean(test, "a CASE WHEN condition")
            conditions.append(condition)
            taken = self._true(condition)
            guards.append(taken)
            values.append(self.guarded(taken, lambda b=branch: self.lower(b.args["true"])))  # type: ignore[misc]
            skipped = self.call("invert", [taken])
            left = skipped if left is None else self.call("and", [left, skipped])
        default = node.args.get("default")
        guards.append(left)
        values.append(
            self.guarded(left, lambda: self.lower(default)) if default is not None else self.literal(None)
        )
        values = self.unify(values, "CASE", guards)
        if all(pa.types.is_null(v.type) for v in values):
            return self.literal(None)  # every branch is NULL
        struct = Typed(
            pc.Expression._call(
                "make_struct",
                [c.expr for c in conditions],
                pc.MakeStructOptions([f"c{i}" for i in range(len(conditions))]),
            ),
            pa.struct([pa.field(f"c{i}", pa.bool_()) for i in range(len(conditions))]),
        )
        return Typed(
            pc.Expression._call("case_when", [struct.expr, *[v.expr for v in values]]), values[0].type
        )

    def _true(self, test: Typed) -> Typed:
        """Where a condition is TRUE (NULL is not)."""
        return self.call("coalesce", [test, self.literal(False)])

    def _If(self, node: exp.If) -> Typed:
        test = self._true(self.boolean(self.everywhere(lambda: self.lower(node.this)), "IF"))
        otherwise = self.call("invert", [test])
        false = node.args.get("false")
        a = self.guarded(test, lambda: self.lower(node.args["true"]))
        b = self.guarded(otherwise, lambda: self.lower(false)) if false is not None else self.literal(None)
        a, b = self.unify([a, b], "IF", [test, otherwise])
        return self.call("if_else", [test, a, b])

    def _Coalesce(self, node: exp.Coalesce) -> Typed:
        values = self.unify([self.lower(node.this), *[self.lower(e) for e in node.expressions]], "COALESCE")
        return self.call("coalesce", values)

    def _Nullif(self, node: exp.Nullif) -> Typed:
        value, other = self.unify([self.lower(node.this), self.lower(node.expression)], "NULLIF")
        same = self.call("coalesce", [self.compare("==", value, other), self.literal(False)])
        return self.call("if_else", [same, Typed(pc.scalar(_null(value.type)), value.type), value])

    def _Greatest(self, node: exp.Greatest) -> Typed:
        return self._extreme("max_element_wise", node)

    def _Least(self, node: exp.Least) -> Typed:
        return self._extreme("min_element_wise", node)

    def _extreme(self, name: str, node: exp.Func) -> Typed:
        """GREATEST / LEAST, NULLs skipped; NaN is above every float, as in comparisons."""
        values = self.unify(
            [self.lower(node.this), *map(self.lower, node.expressions)], name.split("_")[0].upper()
        )
        kind = values[0].type
        if pa.types.is_boolean(kind):  # Arrow orders no booleans element-wise: FALSE < TRUE as 0 < 1
            return self.cast(self.call(name, [self.cast(v, pa.int8()) for v in values]), kind)
        if pa.types.is_timestamp(kind) and kind.tz is not None:  # the instants, as their stored integers
            stored = pc.CastOptions(pa.int64())
            ints = [Typed(pc.Expression._call("cast", [v.expr], stored), pa.int64()) for v in values]
            found = self.call(name, ints)
            return Typed(pc.Expression._call("cast", [found.expr], pc.CastOptions(kind)), kind)
        if not _is_float(kind):
            return self.call(name, values)
        nan = Typed(pc.scalar(pa.scalar(math.nan, values[0].type)), values[0].type, math.nan)
        null = Typed(pc.scalar(_null(values[0].type)), values[0].type)
        nans = [self.call("is_nan", [v]) for v in values]
        any_nan = nans[0]
        for n in nans[1:]:
            any_nan = self.call("or_kleene", [any_nan, n])
        any_nan = self.call("coalesce", [any_nan, self.literal(False)])
        if name == "max_element_wise":
            return self.call("if_else", [any_nan, nan, self.call(name, values)])
        plain = [
            self.call("if_else", [self.call("coalesce", [n, self.literal(False)]), null, v])
            for v, n in zip(values, nans)
        ]
        least = self.call(name, plain)
        all_nan = self.call("and_kleene", [self.call("is_null", [least]), any_nan])
        return self.call("if_else", [all_nan, nan, least])

    # functions

    def _unary(self, name: str, node: exp.Func, options: pc.FunctionOptions | None = None) -> Typed:
        return self.call(name, [self.lower(node.this)], options)

    def _Lower(self, node: exp.Lower) -> Typed:
        return self.call("utf8_lower", [self._text(self.lower(node.this))])

    def _Upper(self, node: exp.Upper) -> Typed:
        return self.call("utf8_upper", [self._text(self.lower(node.this))])

    def _Length(self, node: exp.Length) -> Typed:
        return self.cast(self.call("utf8_length", [self._text(self.lower(node.this))]), pa.int64())

    def _Reverse(self, node: exp.Reverse) -> Typed:
        return self.call("utf8_reverse", [self._text(self.lower(node.this))])

    def _Trim(self, node: exp.Trim) -> Typed:
        value = self._text(self.lower(node.this))
        chars = node.expression
        position = str(node.args.get("position") or "BOTH").upper()
        name = {"LEADING": "utf8_ltrim", "TRAILING": "utf8_rtrim"}.get(position, "utf8_trim")
        if chars is None:  # spaces only, as DuckDB and Spark trim (not tabs or newlines)
            return self.call(name, [value], pc.TrimOptions(" "))
        text = literal_value(chars)
        if not isinstance(text, str):
            raise self.fail("TRIM takes a string literal of characters")
        return self.call(name, [value], pc.TrimOptions(text))

    def _Substring(self, node: exp.Substring) -> Typed:
        value = self._text(self.lower(node.this))
        start_node = node.args.get("start")
        start = literal_value(start_node) if start_node is not None else 1
        length = literal_value(node.args["length"]) if node.args.get("length") is not None else None
        if not isinstance(start, int) or not (length is None or isinstance(length, int)):
            raise self.fail("SUBSTRING takes integer literal start and length")
        # 1-based; position 0 lies before the first character; a negative start counts from the end.
        if start > 0:
            begin, stop = start - 1, None if length is None else start - 1 + max(length, 0)
        elif start == 0:
            begin, stop = 0, None if length is None else max(length - 1, 0)
        else:
            begin = start
            stop = None if length is None or start + length >= 0 else start + max(length, 0)
        return self.call("utf8_slice_codeunits", [value], pc.SliceOptions(begin, stop))

    def _Left(self, node: exp.Left) -> Typed:
        n = literal_value(node.expression)
        if not isinstance(n, int) or n < 0:
            raise self.fail("LEFT takes a non-negative integer literal")
        return self.call("utf8_slice_codeunits", [self._text(self.lower(node.this))], pc.SliceOptions(0, n))

    def _StartsWith(self, node: exp.StartsWith) -> Typed:
        return self._match("starts_with", node)

    def _EndsWith(self, node: exp.EndsWith) -> Typed:
        return self._match("ends_with", node)

    def _Contains(self, node: exp.Contains) -> Typed:
        return self._match("match_substring", node)

    def _match(self, name: str, node: exp.Func) -> Typed:
        pattern = literal_value(node.expression)
        if not isinstance(pattern, str):
            raise self.fail(f"{node.key.upper()} takes a string literal")
        return self.call(name, [self._text(self.lower(node.this))], pc.MatchSubstringOptions(pattern))

    def _Replace(self, node: exp.Replace) -> Typed:
        replacement = node.args.get("replacement")
        old = literal_value(node.expression)
        new = literal_value(replacement) if replacement is not None else NO_LITERAL
        if not isinstance(old, str) or not isinstance(new, str):
            raise self.fail("REPLACE takes string literals")
        if not old:
            return self._text(self.lower(node.this))  # nothing to replace (Arrow would loop forever)
        return self.call(
            "replace_substring", [self._text(self.lower(node.this))], pc.ReplaceSubstringOptions(old, new)
        )

    def _Abs(self, node: exp.Abs) -> Typed:
        return self._unary("abs_checked", node)

    def _Sign(self, node: exp.Sign) -> Typed:
        value = self.lower(node.this)
        sign = self.call("sign", [value])
        if _is_float(value.type):  # DuckDB: a TINYINT, 0 for NaN
            zero = Typed(pc.scalar(pa.scalar(0.0, sign.type)), sign.type, 0.0)
            sign = self.call("if_else", [self.call("is_nan", [value]), zero, sign])
        return self.cast(sign, pa.int8())

    def _Sqrt(self, node: exp.Sqrt) -> Typed:
        return self.call("sqrt", [self.cast(self.lower(node.this), pa.float64())])

    def _Ln(self, node: exp.Ln) -> Typed:
        return self.call("ln", [self.cast(self.lower(node.this), pa.float64())])

    def _Exp(self, node: exp.Exp) -> Typed:
        return self.call("exp", [self.cast(self.lower(node.this), pa.float64())])

    def _Pow(self, node: exp.Pow) -> Typed:
        return self.call(
            "power",
            [
                self.cast(self.lower(node.this), pa.float64()),
                self.cast(self.lower(node.expression), pa.float64()),
            ],
        )

    def _Floor(self, node: exp.Floor) -> Typed:
        return self._integral("floor", self.lower(node.this))

    def _Ceil(self, node: exp.Ceil) -> Typed:
        return self._integral("ceil", self.lower(node.this))

    def _integral(self, name: str, value: Typed) -> Typed:
        if pa.types.is_integer(value.type):
            return self.cast(value, pa.float64())  # DuckDB's floor/ceil of an integer is a DOUBLE
        if pa.types.is_decimal(value.type):
            return self.decimal_rounded(self.roomy(value), 0, name)
        return self.call(name, [self.roomy(value)])

    def _Round(self, node: exp.Round) -> Typed:
        value = self.lower(node.this)
        digits = literal_value(node.args["decimals"]) if node.args.get("decimals") is not None else 0
        if not isinstance(digits, int):
            raise self.fail("ROUND takes an integer literal of digits")
        if pa.types.is_integer(value.type) and digits >= 0:
            return value
        options = pc.RoundOptions(digits, "half_towards_infinity")
        if _is_float(value.type) and digits > 0:
            # Arrow overflows scaling a huge float by 10**digits; floats beyond 2**52 are whole numbers anyway
            big = self.call("greater", [self.call("abs", [value]), self.literal(2.0**52)])
            big = self.call("coalesce", [big, self.literal(False)])
            zero = Typed(pc.scalar(pa.scalar(0.0, value.type)), value.type, 0.0)
            rounded = self.call("round", [self.call("if_else", [big, zero, value])], options)
            return self.call("if_else", [big, value, rounded])
        if _is_float(value.type) and digits < 0:
            # Arrow returns some subnormals unrounded (ROUND(-5e-324, -1) gave -5e-324); whatever is
            # below half a unit rounds to a zero of its sign, as DuckDB's does
            small = self.call("less", [self.call("abs", [value]), self.literal(0.5 * 10.0**-digits)])
            small = self.call("coalesce", [small, self.literal(False)])
            signed_zero = self.call("multiply", [value, self.literal(0.0)])
            return self.call("if_else", [small, signed_zero, self.call("round", [value], options)])
        if pa.types.is_decimal(value.type):
            return self.decimal_rounded(self.roomy(value), digits, "half_away")
        return self.call("round", [self.roomy(value)], options)

    def _part(self, name: str, node: exp.Func) -> Typed:
        value = self.lower(node.this)
        if isinstance(value.value, str):
            value = self.literal_as(value, pa.timestamp("us"))
        if pa.types.is_date(value.type) and name in ("hour", "minute", "second"):
            value = self.cast(value, pa.timestamp("s"))  # a date's time of day is midnight
        return self._calendar_part(name, value)

    def _calendar_part(self, name: str, value: Typed, options: pc.FunctionOptions | None = None) -> Typed:
        """A part of a date or timestamp's (wall clock) calendar, right over the whole of its type."""
        if _is_zoned_nanos(value.type):
            return self.call(name, [_zoned_micros(value)], options)  # years 1677-2262: every kernel is exact
        if name == "year":
            whole_range = _civil_year(value)
            if whole_range is not None:
                return whole_range
        elif not _exact_everywhere(value.type):
            moved = _near_1970(value)
            if moved is not None:
                return self.call(name, [moved[0]], options)
        return self.call(name, [value], options)

    def _Year(self, node: exp.Year) -> Typed:
        return self._part("year", node)

    def _Month(self, node: exp.Month) -> Typed:
        return self._part("month", node)

    def _Day(self, node: exp.Day) -> Typed:
        return self._part("day", node)

    def _Hour(self, node: exp.Hour) -> Typed:
        return self._part("hour", node)

    def _Minute(self, node: exp.Minute) -> Typed:
        return self._part("minute", node)

    def _Second(self, node: exp.Second) -> Typed:
        return self._part("second", node)

    def _Quarter(self, node: exp.Quarter) -> Typed:
        return self._part("quarter", node)

    def _DayOfWeek(self, node: exp.DayOfWeek) -> Typed:
        options = pc.DayOfWeekOptions(count_from_zero=True, week_start=7)
        return self._calendar_part("day_of_week", self.lower(node.this), options)

    def _Placeholder(self, node: exp.Placeholder) -> Typed:
        raise self.fail(f"parameter {node.sql(dialect=MereDialect)} is not supported here")

    def _Star(self, node: exp.Star) -> Typed:
        raise self.fail("* is not an expression here")

    def _Subquery(self, node: exp.Subquery) -> Typed:
        raise self.fail("subqueries are not supported: mere is not a SQL engine")

    def _Select(self, node: exp.Select) -> Typed:
        return self._Subquery(cast(exp.Subquery, node))

    def _function(self, node: exp.Expression) -> Typed:
        name = node.name if isinstance(node, exp.Anonymous) else node.key
        shown = node.sql(dialect=MereDialect)
        if isinstance(node, exp.Func | exp.Anonymous):
            raise self.fail(
                f"function {name.upper()}() is not supported ({shown}); supported: arithmetic, comparisons, "
                "IN, BETWEEN, LIKE/ILIKE, IS [NOT] NULL, CASE, IF, COALESCE, NULLIF, GREATEST, LEAST, CAST, "
                "LOWER, UPPER, LENGTH, TRIM, SUBSTRING, LEFT, REPLACE, CONCAT, STARTS_WITH, ENDS_WITH, "
                "CONTAINS, ABS, SIGN, ROUND, FLOOR, CEIL, SQRT, LN, EXP, POWER, YEAR, QUARTER, MONTH, DAY, "
                "HOUR, MINUTE, SECOND, DAYOFWEEK"
            )
        raise self.fail(f"{type(node).__name__} ({shown}) is not supported")


def lower_predicate(text: str, schema: pa.Schema) -> tuple[pc.Expression, frozenset[str]]:
    """A predicate's Arrow expression on ``schema`` and the columns it reads."""
    parsed = parse_expression(text)
    lowering = Lowering(schema_resolver(schema), text, parsed.lists)
    typed = lowering.lower(parsed.tree)
    typed = lowering.boolean(typed, "a filter")
    return typed.expr, frozenset(lowering.columns)


def evaluate(table: pa.Table, expressions: Mapping[str, pc.Expression]) -> pa.Table:
    """Evaluate named expressions on every row of ``table`` (Arrow's Acero engine, in row order)."""
    from pyarrow import acero

    if not expressions:
        return pa.table({"_": pa.nulls(table.num_rows)}).drop_columns(["_"])
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration(
                "project", acero.ProjectNodeOptions(list(expressions.values()), list(expressions))
            ),
        ]
    )
    return plan.to_table(use_threads=False)
