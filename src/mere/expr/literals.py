"""Literal values: their SQL spelling, their binding to a column's type, and how they compare.

A literal is a plain Python value (see :mod:`mere.expr`). :func:`bind_scalar` casts one to a column's Arrow
type; a number an integer or decimal column cannot hold becomes a :class:`Gap` between the two column values
around it, which keeps comparisons with it exact. :func:`compare_values` compares two Python values (for
pruning) and :func:`compare_floats` builds the Arrow comparison of two float operands as SQL compares
them: NaN equals NaN and is above every other value, ``-0.0`` equals ``0.0``. Filter atoms and the SQL
front end (:mod:`mere.lang`) both lower float comparisons with it.
"""

from __future__ import annotations

import datetime as _dt
import math
import operator
import re
import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import FilterError
from mere.lang.parse import is_plain_identifier

OPERATORS: Mapping[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
"""The comparison operators' Python functions (they build ``pyarrow.compute`` expressions too)."""

FLOAT_TEXT = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)
"""Text that names a float: a number, NaN or an infinity (any case)."""
FLOAT_WORD = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
"""Text that names NaN or an infinity: a float literal, also on a float column compared with a string."""


# ---------------------------------------------------------------------------------------------
# Spelling


def format_ident(name: str) -> str:
    """A column name as SQL: bare where it reads back as the same identifier, else double-quoted."""
    if is_plain_identifier(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def format_literal(value: object) -> str:
    """A literal as SQL text that reads back to an equal value of the same kind."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "DOUBLE 'NaN'"
        if math.isinf(value):
            return "DOUBLE 'Infinity'" if value > 0 else "DOUBLE '-Infinity'"
        text = repr(value)
        return text if "e" in text else text + "e0"  # an exponent keeps it a float when parsed back
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text if "." in text else text + ".0"  # a decimal point keeps it a Decimal when parsed back
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    if isinstance(value, _dt.datetime):
        # TIMESTAMP holds microseconds (later digits are dropped when read, as in DuckDB)
        kind = "TIMESTAMP_NS" if getattr(value, "nanosecond", 0) else "TIMESTAMP"
        return kind + " '" + value.isoformat(sep=" ") + "'"
    if isinstance(value, _dt.date):
        return "DATE '" + value.isoformat() + "'"
    return "'" + str(value).replace("'", "''") + "'"


# ---------------------------------------------------------------------------------------------
# Binding to a column's type


@dataclass(frozen=True)
class Gap:
    """A numeric literal an integer or decimal column cannot hold, between two values it can.

    ``below``/``above`` are the nearest column values on either side; None where the literal
    lies beyond the type's range on that side (NaN and +inf lie above every value).
    """

    below: object
    above: object


@dataclass(frozen=True)
class Span:
    """A float (double) literal on an integer or decimal column that several column values equal: those
    from ``low`` to ``high`` all convert to that double, as SQL compares them (``int64 = 1.8e19``)."""

    low: object
    high: object


def _int_range(typ: pa.DataType) -> tuple[int, int]:
    bits = typ.bit_width
    if pa.types.is_signed_integer(typ):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _decimal_max(typ: pa.DataType) -> Decimal:
    return Decimal((0, (9,) * typ.precision, -typ.scale))


def _bind_exact(value: int | float | Decimal, typ: pa.DataType) -> object:
    """A number on an integer or decimal column: the column value it equals, or a Gap (a float literal:
    the column values that convert to it, a Gap or a Span)."""
    integer = pa.types.is_integer(typ)
    low, high = _int_range(typ) if integer else (-_decimal_max(typ), _decimal_max(typ))
    if isinstance(value, float):
        if math.isnan(value) or value == math.inf:  # NaN sorts above every number
            return Gap(high, None)
        if value == -math.inf:
            return Gap(None, low)
        return _double_on_exact(value, typ, low, high)
    if value < low:
        return Gap(None, low)
    if value > high:
        return Gap(high, None)
    if integer:
        if isinstance(value, int):
            return value
        floor = math.floor(value)
        return floor if floor == value else Gap(floor, floor + 1)
    quantum = Decimal(1).scaleb(-typ.scale)
    with localcontext() as ctx:
        ctx.prec = typ.precision + 2  # every in-range multiple of quantum fits: arithmetic stays exact
        step = Decimal(value).quantize(quantum, rounding=ROUND_FLOOR)
        return step if step == value else Gap(step, step + quantum)


def _rounds_to(value: float) -> tuple[Fraction, Fraction, bool]:
    """The exact numbers that round to the finite double ``value`` (round half to even): the interval's
    ends, and whether the ends themselves do (they are ties, which go to the even neighbour)."""
    below, above = math.nextafter(value, -math.inf), math.nextafter(value, math.inf)
    exact = Fraction(value)
    low = (Fraction(below) + exact) / 2 if math.isfinite(below) else exact - Fraction(math.ulp(value)) / 2
    high = (exact + Fraction(above)) / 2 if math.isfinite(above) else exact + Fraction(math.ulp(value)) / 2
    even = struct.unpack("<q", struct.pack("<d", value))[0] & 1 == 0
    return low, high, even


def _double_on_exact(value: float, typ: pa.DataType, low: int | Decimal, high: int | Decimal) -> object:
    """A finite double on an integer or decimal column, compared as SQL compares them (the column value
    converted to a double): the one column value that converts to it, a Gap where none does, or a Span
    where several do (64-bit integers and wide decimals beyond 2**53)."""
    quantum = Fraction(1) if pa.types.is_integer(typ) else Fraction(10) ** -typ.scale  # scales may be < 0
    start, end, ends_included = _rounds_to(value)
    first, last = math.ceil(start / quantum), math.floor(end / quantum)  # in quanta
    if not ends_included:
        first += first * quantum == start
        last -= last * quantum == end
    lowest, highest = math.ceil(Fraction(low) / quantum), math.floor(Fraction(high) / quantum)

    def column_value(steps: int) -> object:
        if pa.types.is_integer(typ):
            return steps
        sign, digits, _ = Decimal(steps).as_tuple()
        return Decimal((sign, digits, -typ.scale))  # exact: no context rounding

    if first > highest:
        return Gap(column_value(highest), None)
    if last < lowest:
        return Gap(None, column_value(lowest))
    first, last = max(first, lowest), min(last, highest)
    if first > last:
        return Gap(column_value(last), column_value(first))
    if first == last:
        return column_value(first)
    return Span(column_value(first), column_value(last))


def _double_on_narrow(value: float, typ: pa.DataType) -> object:
    """A double on a float32 or float16 column, compared as SQL compares them (the column value widened
    to a double, which is exact): the column value that equals it, else a Gap between its neighbours."""
    np_type = np.float32 if typ.bit_width == 32 else np.float16
    with np.errstate(over="ignore"):  # beyond the type's range: its infinity (the largest value's neighbour)
        narrow = np_type(value)
        if math.isnan(value) or float(narrow) == value:
            return float(narrow)
        other = np.nextafter(narrow, np_type(math.inf if value > float(narrow) else -math.inf))
    below, above = sorted((float(narrow), float(other)))
    return Gap(below, above)


def bind_float(value: int | float | Decimal, typ: pa.DataType) -> float:
    """The nearest value of the float column type to ``value`` (round half to even)."""
    if isinstance(value, float):
        wide = value
    else:
        try:
            wide = float(value)  # correctly rounded for int and Decimal
        except OverflowError:
            wide = math.inf if value > 0 else -math.inf
    if typ.bit_width == 64 or not math.isfinite(wide):
        return wide
    np_type = np.float32 if typ.bit_width == 32 else np.float16
    with np.errstate(over="ignore"):
        narrow = np_type(wide)
    if isinstance(value, float) or wide == value or not np.isfinite(narrow):
        return float(narrow)
    # Rounding twice (exact -> float64 -> narrow) errs only when the float64 lies exactly halfway
    # between two narrow values; the exact value then decides.
    other = np.nextafter(narrow, np_type(math.inf if wide > float(narrow) else -math.inf))
    if Fraction(float(narrow)) + Fraction(float(other)) != 2 * Fraction(wide):
        return float(narrow)
    lower, upper = sorted((float(narrow), float(other)))
    return lower if value < wide else upper


def _zone_offset(tz: str, wall: _dt.datetime) -> _dt.timedelta:
    """UTC offset of time zone ``tz`` at wall-clock time ``wall``; zero when unknown."""
    try:
        return ZoneInfo(tz).utcoffset(wall) or _dt.timedelta(0)
    except (KeyError, ValueError):  # not a zone name: maybe a fixed offset such as +01:00
        pass
    try:
        return _dt.datetime.strptime(tz, "%z").utcoffset() or _dt.timedelta(0)
    except ValueError:
        return _dt.timedelta(0)


def _ts_hint(value: _dt.datetime | str, column: str, typ: pa.DataType) -> str | None:
    """How to fix a timestamp literal whose time-zone awareness differs from its column's, else None."""
    try:
        stamp = value if isinstance(value, _dt.datetime) else _dt.datetime.fromisoformat(value)
    except ValueError:
        return None  # Arrow's own parser reports it
    if (typ.tz is None) == (stamp.tzinfo is None):
        return None
    prefix = "TIMESTAMP " if isinstance(value, _dt.datetime) else ""
    if typ.tz is None:
        plain = stamp.replace(tzinfo=None).isoformat(sep=" ")
        return f"write {prefix}'{plain}' (without an offset): column {column!r} has no time zone"
    offset = _zone_offset(typ.tz, stamp)
    aware = stamp.replace(tzinfo=_dt.timezone(offset)).isoformat(sep=" ")
    return f"write {prefix}'{aware}' (with an offset): column {column!r} has time zone {typ.tz}"


def _bound_timestamp(typ: pa.TimestampType) -> pa.DataType:
    """The type of a bound timestamp literal: microseconds (Python datetimes), and an instant of a
    zoned column in UTC: datetimes sharing a zone compare by wall time, so two instants of the hour a
    clock repeats (daylight saving ends) would compare equal. Arrow compares instants across zones.
    """
    return pa.timestamp("us", None if typ.tz is None else "UTC")


def nanosecond_type(values: Iterable[object], zone: str | None = None) -> pa.DataType | None:
    """The Arrow type of timestamp literals: ``timestamp('ns')`` when one has a sub-microsecond part (a
    pandas Timestamp; Arrow would infer microseconds and drop the nanoseconds); with ``zone``, instants
    labelled with that zone. None: Arrow infers the type."""
    aware = nanos = False
    for v in values:
        if isinstance(v, _dt.datetime):
            nanos = nanos or bool(getattr(v, "nanosecond", 0))
            aware = aware or v.tzinfo is not None
    if not nanos and not (aware and zone):
        return None
    return pa.timestamp("ns" if nanos else "us", (zone or "UTC") if aware else None)


def _py_scalar(value: object) -> pa.Scalar:
    """``pa.scalar(value)``, keeping a timestamp's nanoseconds."""
    return pa.scalar(value, nanosecond_type([value]))


# A time's fraction with a digit other than 0 past the sixth: Python's time.fromisoformat drops it.
_SUB_MICROSECOND = re.compile(r"\.\d{6}\d*[1-9]")


def bind_scalar(value: object, column: str, typ: pa.DataType) -> object:
    """Cast one literal to ``typ`` (``column`` names it in errors); None stays None.

    Returns the value as a Python value of ``typ``, or a :class:`Gap` for a number an integer or decimal
    column cannot hold and for a timestamp finer than the column's unit. On a float column a number becomes
    the nearest value of the type, and the strings ``'NaN'``, ``'Infinity'``, ``'-Infinity'`` (any case)
    name those values.

    Raises:
        FilterError: the literal is of the wrong kind for the column (a string for a number, ...) or out of
            the type's range.
    """
    if value is None:
        return None
    if pa.types.is_dictionary(typ):
        typ = typ.value_type

    def fail(reason: str) -> FilterError:
        return FilterError(f"cannot compare column {column!r} of type {typ} with {value!r}: {reason}")

    if pa.types.is_boolean(typ) != isinstance(value, bool):
        raise fail("booleans compare only with booleans")
    if pa.types.is_floating(typ):
        if isinstance(value, str) and FLOAT_WORD.fullmatch(value):
            return bind_float(float(value), typ)
        if not isinstance(value, int | float | Decimal):
            raise fail("not a number (the strings 'NaN', 'Infinity' and '-Infinity' name floats)")
        if isinstance(value, float) and typ.bit_width != 64:
            return _double_on_narrow(value, typ)
        return bind_float(value, typ)
    if pa.types.is_integer(typ) or pa.types.is_decimal(typ):
        if not isinstance(value, int | float | Decimal):
            raise fail("not a number")
        return _bind_exact(value, typ)
    if typ in (pa.string(), pa.large_string(), pa.string_view()) and not isinstance(value, str):
        raise fail("not a string")
    if pa.types.is_temporal(typ) and isinstance(value, int | float | Decimal | bytes):
        raise fail("not a date/time value")
    binary = typ in (pa.binary(), pa.large_binary(), pa.binary_view()) or pa.types.is_fixed_size_binary(typ)
    if binary and isinstance(value, str):
        value = value.encode()
    if pa.types.is_time(typ) and isinstance(value, str):
        if _SUB_MICROSECOND.search(value):
            raise fail("finer than a microsecond (Python's time, which a literal becomes, would cut it)")
        try:
            value = _dt.time.fromisoformat(value)
        except ValueError as exc:
            raise fail(str(exc)) from None
    if pa.types.is_timestamp(typ) and isinstance(value, _dt.datetime | str):
        try:
            hint = _ts_hint(value, column, typ)
        except (OverflowError, ValueError):
            raise fail("out of range") from None
        if hint is not None:
            kind = "naive" if typ.tz is not None else "time-zone aware"
            raise fail(f"a {kind} timestamp; {hint}")
    if pa.types.is_date(typ) and isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            raise fail("a time-zone aware timestamp does not compare with a date column")
        if _time_of_day(value):  # between two days: compared exactly, as SQL compares it
            return _between(value.date(), _dt.timedelta(days=1), column, typ)
        value = value.date()
    try:
        scalar = _py_scalar(value).cast(typ, safe=True)
        if pa.types.is_timestamp(typ):
            if typ.unit == "ns" and scalar.is_valid and scalar.cast(pa.int64()).as_py() % 1000:
                # a pandas Timestamp (Python datetimes stop at microseconds); a zoned one in UTC
                return scalar.cast(pa.timestamp("ns", None if typ.tz is None else "UTC")).as_py()
            scalar = scalar.cast(_bound_timestamp(typ), safe=True)
        return scalar.as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError) as exc:
        try:
            gap = _finer_than(value, column, typ)
        except (OverflowError, ValueError):  # e.g. beyond pandas' calendar
            raise fail("out of range") from None
        if gap is not None:
            return gap
        raise fail(str(exc).splitlines()[0]) from None
    except OverflowError:
        raise fail("out of range") from None


def _time_of_day(stamp: _dt.datetime) -> bool:
    """Whether a timestamp is past midnight (a pandas Timestamp's nanoseconds count)."""
    return stamp.time() != _dt.time() or bool(getattr(stamp, "nanosecond", 0))


def _finer_than(value: object, column: str, typ: pa.DataType) -> Gap | None:
    """A timestamp literal finer than its column's unit (``12:00:00.5`` on a seconds column, a time of day
    on a date column) as the gap between the two column values around it; None for any other literal. (A
    string is read as the column's type, and one that does not fit it stays an error: DuckDB would round.)"""
    stamp = value
    if not isinstance(stamp, _dt.datetime):
        return None
    if pa.types.is_date(typ):
        if stamp.tzinfo is not None or not _time_of_day(stamp):
            return None
        return _between(stamp.date(), _dt.timedelta(days=1), column, typ)
    if not pa.types.is_timestamp(typ) or typ.unit == "ns":
        return None
    if stamp.tzinfo is not None:  # steps are counted in UTC, as Arrow counts them (not in wall time)
        stamp = stamp.astimezone(_dt.UTC)
    if getattr(stamp, "nanosecond", 0):  # a pandas Timestamp: its nanoseconds first
        stamp_ns: Any = stamp
        stamp = stamp_ns.replace(nanosecond=0)
        if typ.unit == "us":
            return _between(stamp, _dt.timedelta(microseconds=1), column, typ)
    elif typ.unit == "us":
        return None
    step = _dt.timedelta(seconds=1) if typ.unit == "s" else _dt.timedelta(milliseconds=1)
    floor = stamp.replace(microsecond=0 if typ.unit == "s" else stamp.microsecond // 1000 * 1000)
    return None if floor == value else _between(floor, step, column, typ)


def _between(floor: _dt.date, step: _dt.timedelta, column: str, typ: pa.DataType) -> Gap:
    """The gap between column values ``floor`` and ``floor + step`` (None beyond the calendar)."""
    try:
        above: object = bind_scalar(floor + step, column, typ)
    except (OverflowError, ValueError, FilterError):  # ValueError: pandas' OutOfBoundsDatetime
        above = None
    return Gap(bind_scalar(floor, column, typ), above)


def bind_values(values: Sequence[object], column: str, typ: pa.DataType) -> list[object]:
    """:func:`bind_scalar` of each value; common homogeneous lists take one vectorised cast."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    types = set(map(type, values))
    present: Sequence[object] = values
    if type(None) in types:
        types.discard(type(None))
        present = [v for v in values if v is not None]
    bound = _bind_bulk(present, types, typ)
    if bound is None:  # no fast path, or a value needs the careful path (or its error message)
        return [bind_scalar(v, column, typ) for v in values]
    return bound + [None] * (len(values) - len(present))


def _bind_bulk(values: Sequence[object], types: set[type], typ: pa.DataType) -> list[object] | None:
    """Bound values when every value takes the vectorised path, else None."""
    if not values:
        return []
    try:
        if pa.types.is_integer(typ) and types == {int}:
            low, high = _int_range(typ)
            ints = cast("Sequence[int]", values)
            return list(values) if low <= min(ints) and max(ints) <= high else None
        if pa.types.is_floating(typ) and types <= {int, float, Decimal}:
            if typ.bit_width != 64 and types != {float}:
                return None  # a narrow float type needs bind_float's care against double rounding
            wide = np.asarray(values, dtype=np.float64)
            if typ.bit_width != 64:
                with np.errstate(over="ignore", invalid="ignore"):
                    narrow = wide.astype(np.float32 if typ.bit_width == 32 else np.float16)
                if not ((narrow == wide) | np.isnan(wide)).all():
                    return None  # a double the type cannot hold is a Gap (bind_scalar)
            return cast(list[object], wide.tolist())
        if pa.types.is_decimal(typ) and types <= {int, Decimal}:
            return cast(list[object], pa.array(values, type=typ).to_pylist())  # raises if one does not fit
        if typ in (pa.string(), pa.large_string(), pa.string_view()) and types == {str}:
            return list(values)
        if (typ in (pa.binary(), pa.large_binary(), pa.binary_view())) and types == {bytes}:
            return list(values)
        if pa.types.is_boolean(typ) and types == {bool}:
            return list(values)
        if (pa.types.is_date(typ) and types <= {str, _dt.date}) or (
            pa.types.is_timestamp(typ) and types == {str}
        ):
            array = pa.array(values).cast(typ, safe=True)
            if pa.types.is_timestamp(typ):
                array = array.cast(_bound_timestamp(typ), safe=True)
            return cast(list[object], array.to_pylist())
    except (
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        pa.ArrowTypeError,
        TypeError,
        ValueError,
        OverflowError,
    ):
        return None
    return None


# ---------------------------------------------------------------------------------------------
# Comparison

_T = TypeVar("_T")  # an operand of compare_floats: an Arrow expression, or one with its type
_MAX_EXACT_FLOAT_INT = 2**53  # ints beyond this may round when Arrow compares them with floats


def type_kind(t: type) -> str:
    """The kind of values of Python type ``t`` (``"int"``, ``"float"``, ``"datetime"``, ``"str"``...)."""
    if issubclass(t, bool):
        return "bool"
    if issubclass(t, int):
        return "int"
    if issubclass(t, float):
        return "float"
    if issubclass(t, _dt.datetime):
        return "datetime"
    if issubclass(t, bytes | bytearray):
        return "bytes"
    return t.__name__  # Decimal, str, date, time, timedelta, ...


def value_kind(value: object) -> str:
    """The kind of ``value``; zoned datetimes are ``"datetime-tz"`` (they do not compare with naive ones)."""
    kind = type_kind(type(value))
    if kind == "datetime" and cast(_dt.datetime, value).tzinfo is not None:
        return "datetime-tz"
    return kind


def value_kinds(values: Collection[object]) -> frozenset[str]:
    """The kinds of ``values``; per value only where the type does not decide (datetimes)."""
    kinds = {type_kind(t) for t in set(map(type, values))}
    if "datetime" in kinds:
        kinds.discard("datetime")
        kinds.update(value_kind(v) for v in values if isinstance(v, _dt.datetime))
    return frozenset(kinds)


def comparable(a: object, b: object) -> bool:
    """Whether SQL compares ``a`` with ``b``: same kind, or numbers (int with float or Decimal)."""
    ka, kb = value_kind(a), value_kind(b)
    return ka == kb or {ka, kb} in ({"int", "float"}, {"int", "Decimal"})


def is_nan(value: object) -> bool:
    """Whether ``value`` is a float NaN."""
    return isinstance(value, float) and math.isnan(value)


_NAN_KEY = ("NaN",)  # stands for every NaN in hash lookups (NaN != NaN as a Python float)


def canonical(value: object) -> object:
    """``value`` as a hash key: every NaN is the same key."""
    return _NAN_KEY if is_nan(value) else value


def compare_values(op: str, a: object, b: object) -> bool | None:
    """``a op b`` for non-null values (NaN equal to NaN and above all); None when not comparable."""
    if not comparable(a, b):
        return None
    if isinstance(a, float) or isinstance(b, float):
        a_nan, b_nan = is_nan(a), is_nan(b)
        if a_nan or b_nan:
            return bool(OPERATORS[op](a_nan, b_nan))
        if any(isinstance(v, int) and abs(v) > _MAX_EXACT_FLOAT_INT for v in (a, b)):
            return None  # Arrow would compare it rounded to a float
    try:
        return bool(OPERATORS[op](a, b))
    except TypeError:
        return None


def compare_floats(op: str, left: _T, right: _T, call: Callable[[str, list[_T]], _T]) -> _T:
    """``left op right`` on float operands as SQL compares them, built from Arrow kernels.

    NaN equals NaN and is above every other value, ``+Infinity`` included; ``-0.0`` equals ``0.0``; NULL
    gives NULL. (Arrow's own comparisons follow IEEE: NaN equals nothing and is neither above nor below.)
    The one float comparison of filters and SQL expressions: :func:`compare_float_literal` is this with a
    literal right operand worked out, and the SQL front end calls this with its typed operands.

    Args:
        op: ``==``, ``!=``, ``<``, ``<=``, ``>`` or ``>=``.
        left: a float operand.
        right: a float operand.
        call: ``call(kernel, operands)`` applies an Arrow compute kernel (``is_nan``, ``equal``, ``less``,
            ``and_kleene``, ``or_kleene``, ``invert``) to operands; the results are operands again.
    """
    if op in (">", ">="):
        return compare_floats("<" if op == ">" else "<=", right, left, call)
    nan_left, nan_right = call("is_nan", [left]), call("is_nan", [right])
    equal = call("or_kleene", [call("equal", [left, right]), call("and_kleene", [nan_left, nan_right])])
    if op == "==":
        return equal
    if op == "!=":
        return call("invert", [equal])
    less = call(
        "or_kleene",
        [call("less", [left, right]), call("and_kleene", [call("invert", [nan_left]), nan_right])],
    )
    return less if op == "<" else call("or_kleene", [less, equal])


def compare_float_literal(op: str, left: pc.Expression, value: float) -> pc.Expression:
    """:func:`compare_floats` of a float expression with a float literal, what the literal decides worked out.

    The result is one plain Arrow comparison wherever NaN allows (an expression Arrow can simplify with
    statistics): ``is_nan(value)`` is known, and IEEE already makes a NaN row unequal to ``value`` (not
    below it) and ``-0.0`` equal to ``0.0``.
    """
    nan = pc.is_nan(left)  # NULL for NULL, so every combination below stays NULL for NULL
    if math.isnan(value):
        by_op = {"==": nan, ">=": nan, "!=": ~nan, "<": ~nan, "<=": nan | ~nan, ">": nan & ~nan}
        return by_op[op]
    result = cast(pc.Expression, OPERATORS[op](left, pc.scalar(value)))
    return result | nan if op in (">", ">=") else result


def computed_type(typ: pa.DataType) -> pa.DataType:
    """The type Arrow computes a column of type ``typ`` as: a half float as a float (Arrow's kernels take
    no half floats), any other type as itself. SQL expressions and simple filters both lower columns so."""
    return pa.float32() if pa.types.is_float16(typ) else typ


def computed_field(column: str, typ: pa.DataType) -> pc.Expression:
    """Column ``column`` of type ``typ`` as Arrow computes on it (see :func:`computed_type`)."""
    kind = computed_type(typ)
    return pc.field(column) if kind == typ else pc.field(column).cast(kind)
