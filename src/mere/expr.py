"""Filter expressions: parsing, binding, lowering to pyarrow and pruning analysis.

A filter reaches mere as SQL-like text, as an :class:`Expr` tree or as an opaque
``pyarrow.compute.Expression``; :func:`to_expr` turns all three into an ``Expr``.

Semantics follow SQL three-valued logic. A comparison with a NULL column value is
NULL; ``NOT NULL`` is NULL; ``x IN (1, NULL)`` is TRUE when ``x = 1`` and NULL
otherwise; a row is kept only when the filter is TRUE. An empty ``IN ()`` list is
FALSE for every row, NULL included.

Numbers follow SQL. Text with a decimal point and no exponent (``1.5``, ``.5``,
``-0.25``) is an exact decimal literal (``decimal.Decimal``, every digit kept); text with
an exponent (``1e5``, ``2.5E-3``) is an approximate literal (``float``); other numbers
are integers. On an integer or decimal column a literal keeps its exact value: one the
column type cannot hold is not an error but makes the comparison what it exactly is
(``i = 1.5`` is FALSE, ``i < 1.5`` is ``i <= 1``, ``int8_col < 1000`` is TRUE; NULL rows
stay NULL). A float literal there stands for its shortest decimal spelling (``0.1``).
On a float column a literal becomes the nearest value of the column's float type.

Floats follow Spark SQL, PostgreSQL and DuckDB, not IEEE: ``-0.0`` equals ``0.0`` and NaN
equals NaN and is greater than every other value, ``+Infinity`` included (so ``f > 1`` is
TRUE for NaN and ``f < 1`` FALSE). On a float column the strings ``'NaN'``,
``'Infinity'``, ``'-Infinity'``, ``'inf'`` and ``'-inf'`` (any case) name those values, and
``DOUBLE 'NaN'`` is a float literal anywhere. Bind a filter (:func:`bind`) before lowering
or analysing it: the float rules apply where the literal is a float, which binding ensures
for float columns.

Literal values are always plain Python values (``int``, ``float``, ``Decimal``,
``str``, ``bytes``, ``bool``, ``datetime.date``, ``datetime.datetime``, ``datetime.time``,
``datetime.timedelta``). :func:`bind` casts them to the column's Arrow type and stores
the result again as a Python value of that type (``pa.Scalar.as_py()``); timestamps are
kept at microsecond precision as ``datetime.datetime`` (tz-aware for tz columns).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import functools
import itertools
import math
import operator
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import FilterError

CompareOp = Literal["==", "!=", "<", "<=", ">", ">="]
_OP_ALIASES = {"=": "==", "<>": "!="}
_PY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
_OPS = frozenset(_PY_OPS)
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# Literal types In.__post_init__ can accept without looking at each value (long IN lists).
_PLAIN_TYPES = frozenset(
    {int, float, str, bytes, bool, Decimal, type(None), _dt.date, _dt.datetime, _dt.time, _dt.timedelta}
)


# ---------------------------------------------------------------------------------------------
# Expression nodes


@dataclass(frozen=True, repr=False)
class Expr:
    """Base class of filter expressions: immutable, combinable with ``&``, ``|`` and ``~``."""

    def __and__(self, other: object) -> Expr:
        if isinstance(other, Expr | pc.Expression | str):  # a string is a filter in mere's SQL
            return And(self, to_expr(other))
        return NotImplemented

    def __or__(self, other: object) -> Expr:
        if isinstance(other, Expr | pc.Expression | str):
            return Or(self, to_expr(other))
        return NotImplemented

    def __rand__(self, other: object) -> Expr:
        if isinstance(other, str):
            return And(to_expr(other), self)
        return NotImplemented

    def __ror__(self, other: object) -> Expr:
        if isinstance(other, str):
            return Or(to_expr(other), self)
        return NotImplemented

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise FilterError("an Expr has no truth value; combine filters with &, | and ~, not and/or/not")

    def __str__(self) -> str:
        return _render(self, 0, None)

    def __repr__(self) -> str:
        return _render(self, 0, None)


def _check_column(column: object) -> None:
    if isinstance(column, Col):
        raise FilterError("comparing a column with another column is not supported")
    if not isinstance(column, str) or not column:
        raise FilterError(f"a column name must be a non-empty string, got {column!r}")


def _literal(value: object, what: str) -> object:
    """Validate a literal; pa.Scalar and numpy values become plain Python values."""
    if isinstance(value, np.number | np.bool_):
        value = value.item()
    if type(value).__name__ == "NaTType" or (
        isinstance(value, np.datetime64 | np.timedelta64) and np.isnat(value)
    ):
        value = None  # pandas' and NumPy's missing time: an SQL NULL
    elif isinstance(value, np.datetime64):
        unit = np.datetime_data(value.dtype)[0]
        if unit in ("Y", "M", "W", "D", "h", "m", "s", "ms", "us"):
            value = value.item()  # a date or datetime (NumPy has no zone)
        elif unit != "ns":
            raise FilterError(f"{what}: {value!r} is finer than nanoseconds")
    if isinstance(value, pa.Scalar | np.generic):
        try:
            value = (value if isinstance(value, pa.Scalar) else pa.scalar(value)).as_py()
        except (OverflowError, ValueError) as exc:  # e.g. a date past year 9999: no Python value
            # (not formatted: printing such a scalar fails the same way)
            raise FilterError(f"{what}: a {type(value).__name__} with no Python value ({exc})") from None
    if isinstance(value, Col):
        raise FilterError(f"comparing a column with another column ({value.name!r}) is not supported")
    if isinstance(value, Expr | pc.Expression):
        raise FilterError(f"{what} must be a literal, got the expression {value}")
    if isinstance(value, list | tuple | set | frozenset | dict):
        raise FilterError(f"{what} must be a single value, got {value!r}")
    if isinstance(value, Decimal) and not value.is_finite():
        raise FilterError(f"{what} must be a finite Decimal, got {value!r}; NaN and infinities are floats")
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)  # one type per kind keeps hash lookups of candidate values exact
    return value


@dataclass(frozen=True, repr=False)
class Compare(Expr):
    """``column op value``; the literal is never NULL (use :class:`IsNull`)."""

    op: CompareOp
    column: str
    value: object

    def __post_init__(self) -> None:
        op = _OP_ALIASES.get(self.op, self.op)
        if op not in _OPS:
            raise FilterError(f"unknown comparison operator {self.op!r}")
        _check_column(self.column)
        value = _literal(self.value, "value")
        if value is None:
            raise FilterError(
                f"comparison of {self.column!r} with NULL is never true; use IS NULL / IS NOT NULL"
            )
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", value)


@dataclass(frozen=True, repr=False)
class In(Expr):
    """``column [NOT] IN (values...)``; ``None`` in values is an SQL NULL."""

    column: str
    values: tuple[object, ...]
    negated: bool = False

    def __post_init__(self) -> None:
        _check_column(self.column)
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Iterable):
            raise FilterError(f"IN needs a list of values, got {self.values!r}")
        values = tuple(self.values)
        types = set(map(type, values))
        plain = types <= _PLAIN_TYPES and (
            Decimal not in types or all(v.is_finite() for v in values if type(v) is Decimal)
        )
        if not plain:
            values = tuple(_literal(v, "IN value") for v in values)
        object.__setattr__(self, "values", values)

    def __getstate__(self) -> dict[str, object]:
        # The lookup index and the Arrow lowering built on demand are caches, not worth pickling.
        return {k: v for k, v in self.__dict__.items() if k not in ("_index", "_arrow", "_sorted_by_dtype")}


@dataclass(frozen=True, repr=False)
class IsNull(Expr):
    """``column IS [NOT] NULL``."""

    column: str
    negated: bool = False

    def __post_init__(self) -> None:
        _check_column(self.column)


@dataclass(frozen=True, repr=False)
class And(Expr):
    """Kleene conjunction."""

    left: Expr
    right: Expr


@dataclass(frozen=True, repr=False)
class Or(Expr):
    """Kleene disjunction."""

    left: Expr
    right: Expr


@dataclass(frozen=True, repr=False)
class Not(Expr):
    """Kleene negation (NOT NULL is NULL)."""

    operand: Expr


@dataclass(frozen=True, repr=False)
class AlwaysTrue(Expr):
    """Accepts every row."""


@dataclass(frozen=True, repr=False)
class AlwaysFalse(Expr):
    """Accepts no row."""


@dataclass(frozen=True, repr=False, eq=False)
class ArrowPredicate(Expr):
    """An opaque ``pyarrow.compute.Expression``; its columns are unknown to mere."""

    expression: pc.Expression

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrowPredicate) and bool(self.expression.equals(other.expression))

    def __hash__(self) -> int:
        return hash(str(self.expression))


@dataclass(frozen=True, repr=False, eq=False)
class Sql(Expr):
    """A predicate of the full SQL expression language: arithmetic, functions, two columns compared...

    It prunes nothing; :func:`bind` lowers it with the table schema to an Arrow expression (``arrow``) and
    notes the columns it reads (``names``), so that one on key columns only can still run before the merge.
    """

    text: str
    arrow: pc.Expression | None = None
    names: frozenset[str] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sql) and other.text == self.text and other.names == self.names

    def __hash__(self) -> int:
        return hash(self.text)


@dataclass(frozen=True, eq=False)
class Col:
    """A column reference used to build expressions: ``col("x") >= 3``."""

    name: str

    def __post_init__(self) -> None:
        _check_column(self.name)

    def _cmp(self, op: CompareOp, value: object) -> Compare:
        if value is None:
            raise FilterError(f"comparison of {self.name!r} with None is never true; use .is_null()")
        return Compare(op, self.name, value)

    def __eq__(self, value: object) -> Compare:  # type: ignore[override]
        return self._cmp("==", value)

    def __ne__(self, value: object) -> Compare:  # type: ignore[override]
        return self._cmp("!=", value)

    def __lt__(self, value: object) -> Compare:
        return self._cmp("<", value)

    def __le__(self, value: object) -> Compare:
        return self._cmp("<=", value)

    def __gt__(self, value: object) -> Compare:
        return self._cmp(">", value)

    def __ge__(self, value: object) -> Compare:
        return self._cmp(">=", value)

    def __hash__(self) -> int:
        return hash(("Col", self.name))

    def __bool__(self) -> bool:
        raise FilterError("a column reference has no truth value")

    def isin(self, values: Iterable[object]) -> In:
        """``name IN (values)``."""
        return In(self.name, values)  # type: ignore[arg-type]  # In checks and converts to a tuple

    def not_in(self, values: Iterable[object]) -> In:
        """``name NOT IN (values)``."""
        return In(self.name, values, negated=True)  # type: ignore[arg-type]

    def is_null(self) -> IsNull:
        """``name IS NULL``."""
        return IsNull(self.name)

    def is_not_null(self) -> IsNull:
        """``name IS NOT NULL``."""
        return IsNull(self.name, negated=True)

    def between(self, low: object, high: object) -> Expr:
        """``low <= name AND name <= high``."""
        return And(self._cmp(">=", low), self._cmp("<=", high))


def col(name: str) -> Col:
    """Reference a column by name."""
    return Col(name)


# ---------------------------------------------------------------------------------------------
# Rendering


def _fmt_ident(name: str) -> str:
    from mere.lang.parse import is_plain_identifier

    if is_plain_identifier(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _fmt_literal(value: object) -> str:
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


def _precedence(e: Expr) -> int:
    return 1 if isinstance(e, Or) else 2 if isinstance(e, And) else 3 if isinstance(e, Not) else 4


def _render(e: Expr, min_prec: int, max_values: int | None) -> str:
    if isinstance(e, Or):
        text = f"{_render(e.left, 1, max_values)} OR {_render(e.right, 2, max_values)}"
    elif isinstance(e, And):
        text = f"{_render(e.left, 2, max_values)} AND {_render(e.right, 3, max_values)}"
    elif isinstance(e, Not):
        # NOT x IN (...) reads back as x NOT IN (...): parentheses keep NOT outside
        wrap = isinstance(e.operand, In | IsNull) and not e.operand.negated
        inner = _render(e.operand, 5 if wrap else 3, max_values)
        text = f"NOT {inner}"
    elif isinstance(e, Compare):
        op = "=" if e.op == "==" else e.op
        text = f"{_fmt_ident(e.column)} {op} {_fmt_literal(e.value)}"
    elif isinstance(e, In):
        shown = e.values if max_values is None else e.values[:max_values]
        parts = list(map(_fmt_literal, shown))
        if len(shown) < len(e.values):
            parts.append(f"... and {len(e.values) - len(shown)} more")
        text = f"{_fmt_ident(e.column)} {'NOT IN' if e.negated else 'IN'} ({', '.join(parts)})"
    elif isinstance(e, IsNull):
        text = f"{_fmt_ident(e.column)} IS {'NOT NULL' if e.negated else 'NULL'}"
    elif isinstance(e, AlwaysTrue):
        text = "TRUE"
    elif isinstance(e, AlwaysFalse):
        text = "FALSE"
    elif isinstance(e, ArrowPredicate):
        text = f"<arrow {e.expression}>"
    elif isinstance(e, Sql):
        text = e.text
    else:
        text = f"<{type(e).__name__}>"
    return f"({text})" if _precedence(e) < min_prec else text


def render(expr: Expr, max_values: int | None = None) -> str:
    """``str(expr)`` for people: IN lists longer than ``max_values`` are cut short.

    ``id IN (1, 2, 3, ... and 997 more)``; with ``max_values=None`` this is ``str(expr)``, the
    full text that :func:`parse` reads back to an equal expression.
    """
    if max_values is not None and max_values < 0:
        raise FilterError(f"max_values must be None or >= 0, got {max_values}")
    return _render(expr, 0, max_values)


# ---------------------------------------------------------------------------------------------
# Parsing

_FLOAT_TEXT = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)
_FLOAT_WORD = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


def parse(text: str) -> Expr:
    """Parse SQL filter text (see module docs) into an :class:`Expr`."""
    from mere.lang.lower import parse_filter

    return parse_filter(text)


def to_expr(value: str | Expr | pc.Expression | None) -> Expr:
    """Normalise a user filter: text is parsed, Arrow expressions are wrapped, None accepts all."""
    if value is None:
        return AlwaysTrue()
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return parse(value)
    if isinstance(value, pc.Expression):
        return ArrowPredicate(value)
    raise FilterError(
        f"a filter must be a str, Expr or pyarrow.compute.Expression, got {type(value).__name__}"
    )


# ---------------------------------------------------------------------------------------------
# Traversal helpers


def _map_atoms(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    if isinstance(expr, And):
        return And(_map_atoms(expr.left, fn), _map_atoms(expr.right, fn))
    if isinstance(expr, Or):
        return Or(_map_atoms(expr.left, fn), _map_atoms(expr.right, fn))
    if isinstance(expr, Not):
        return Not(_map_atoms(expr.operand, fn))
    return fn(expr)


def columns(expr: Expr) -> frozenset[str] | None:
    """Columns referenced by ``expr``; None when an opaque ArrowPredicate is inside."""
    if isinstance(expr, And | Or):
        left, right = columns(expr.left), columns(expr.right)
        return None if left is None or right is None else left | right
    if isinstance(expr, Not):
        return columns(expr.operand)
    if isinstance(expr, Compare | In | IsNull):
        return frozenset({expr.column})
    if isinstance(expr, ArrowPredicate):
        return None
    if isinstance(expr, Sql):
        return expr.names
    return frozenset()


def _negate(expr: Expr) -> Expr:
    """An expression exactly equivalent (in 3-valued logic, NaN included) to ``NOT expr``."""
    if isinstance(expr, Not):
        return expr.operand
    if isinstance(expr, Compare) and expr.op in ("==", "!="):
        return Compare("!=" if expr.op == "==" else "==", expr.column, expr.value)
    if isinstance(expr, In):
        return In(expr.column, expr.values, not expr.negated)
    if isinstance(expr, IsNull):
        return IsNull(expr.column, not expr.negated)
    if isinstance(expr, AlwaysTrue):
        return AlwaysFalse()
    if isinstance(expr, AlwaysFalse):
        return AlwaysTrue()
    if isinstance(expr, And):
        return Or(_negate(expr.left), _negate(expr.right))
    if isinstance(expr, Or):
        return And(_negate(expr.left), _negate(expr.right))
    return Not(expr)


def _push_not(expr: Expr) -> Expr:
    """Move negations down to the atoms where that is exact."""
    if isinstance(expr, And):
        return And(_push_not(expr.left), _push_not(expr.right))
    if isinstance(expr, Or):
        return Or(_push_not(expr.left), _push_not(expr.right))
    if isinstance(expr, Not):
        inner = _push_not(expr.operand)
        negated = _negate(inner)
        return _push_not(negated) if isinstance(inner, And | Or) else negated
    return expr


def conjuncts(expr: Expr) -> list[Expr]:
    """Split ``expr`` into parts whose AND is equivalent (``NOT (a OR b)`` splits too)."""
    if isinstance(expr, And):
        return conjuncts(expr.left) + conjuncts(expr.right)
    if isinstance(expr, Not) and isinstance(expr.operand, Or | Not):
        return conjuncts(_negate(expr.operand))
    if isinstance(expr, AlwaysTrue):
        return []
    return [expr]


def conjunction(parts: Sequence[Expr]) -> Expr:
    """AND the parts together (left-deep); AlwaysTrue for none."""
    kept = [p for p in parts if not isinstance(p, AlwaysTrue)]
    if not kept:
        return AlwaysTrue()
    result = kept[0]
    for part in kept[1:]:
        result = And(result, part)
    return result


def split_by_columns(expr: Expr, allowed: Collection[str]) -> tuple[Expr, Expr]:
    """Split into (conjuncts using only ``allowed`` columns, the rest)."""
    inside: list[Expr] = []
    rest: list[Expr] = []
    allowed_set = frozenset(allowed)
    for part in conjuncts(expr):
        cols = columns(part)
        (inside if cols is not None and cols <= allowed_set else rest).append(part)
    return conjunction(inside), conjunction(rest)


# ---------------------------------------------------------------------------------------------
# Binding


@dataclass(frozen=True)
class _Gap:
    """A numeric literal an integer or decimal column cannot hold, between two values it can.

    ``below``/``above`` are the nearest column values on either side; None where the literal
    lies beyond the type's range on that side (NaN and +inf lie above every value).
    """

    below: object
    above: object


def _never(column: str) -> Expr:
    """FALSE for every non-null value, NULL for NULL: ``x = v`` where v cannot be a value of x."""
    return And(In(column, (None,)), IsNull(column))


def _always(column: str) -> Expr:
    """TRUE for every non-null value, NULL for NULL: ``x != v`` where v cannot be a value of x."""
    return Or(IsNull(column, negated=True), In(column, (None,)))


def _compare_gap(op: CompareOp, column: str, gap: _Gap) -> Expr:
    """``column op literal`` for a literal the column cannot hold, as an exactly equivalent atom."""
    if op == "==":
        return _never(column)
    if op == "!=":
        return _always(column)
    if op in ("<", "<="):
        return _never(column) if gap.below is None else Compare("<=", column, gap.below)
    return _never(column) if gap.above is None else Compare(">=", column, gap.above)


def _int_range(typ: pa.DataType) -> tuple[int, int]:
    bits = typ.bit_width
    if pa.types.is_signed_integer(typ):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _decimal_max(typ: pa.DataType) -> Decimal:
    return Decimal((0, (9,) * typ.precision, -typ.scale))


def _bind_exact(value: int | float | Decimal, typ: pa.DataType) -> object:
    """A number on an integer or decimal column: the column value it equals, or a _Gap."""
    integer = pa.types.is_integer(typ)
    low, high = _int_range(typ) if integer else (-_decimal_max(typ), _decimal_max(typ))
    if isinstance(value, float):
        if math.isnan(value) or value == math.inf:  # NaN sorts above every number
            return _Gap(high, None)
        if value == -math.inf:
            return _Gap(None, low)
        value = Decimal(repr(value))  # a float literal stands for its shortest decimal spelling
    if value < low:
        return _Gap(None, low)
    if value > high:
        return _Gap(high, None)
    if integer:
        if isinstance(value, int):
            return value
        floor = math.floor(value)
        return floor if floor == value else _Gap(floor, floor + 1)
    quantum = Decimal(1).scaleb(-typ.scale)
    with localcontext() as ctx:
        ctx.prec = typ.precision + 2  # every in-range multiple of quantum fits: arithmetic stays exact
        step = Decimal(value).quantize(quantum, rounding=ROUND_FLOOR)
        return step if step == value else _Gap(step, step + quantum)


def _bind_float(value: int | float | Decimal, typ: pa.DataType) -> float:
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


def _bind_scalar(value: object, column: str, typ: pa.DataType) -> object:
    """Cast one literal to ``typ``; numbers an integer/decimal column cannot hold become a _Gap."""
    if value is None:
        return None
    if pa.types.is_dictionary(typ):
        typ = typ.value_type

    def fail(reason: str) -> FilterError:
        return FilterError(f"cannot compare column {column!r} of type {typ} with {value!r}: {reason}")

    if pa.types.is_boolean(typ) != isinstance(value, bool):
        raise fail("booleans compare only with booleans")
    if pa.types.is_floating(typ):
        if isinstance(value, str) and _FLOAT_WORD.fullmatch(value):
            return _bind_float(float(value), typ)
        if not isinstance(value, int | float | Decimal):
            raise fail("not a number (the strings 'NaN', 'Infinity' and '-Infinity' name floats)")
        return _bind_float(value, typ)
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


def _finer_than(value: object, column: str, typ: pa.DataType) -> _Gap | None:
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


def _between(floor: _dt.date, step: _dt.timedelta, column: str, typ: pa.DataType) -> _Gap:
    """The gap between column values ``floor`` and ``floor + step`` (None beyond the calendar)."""
    try:
        above: object = _bind_scalar(floor + step, column, typ)
    except (OverflowError, ValueError, FilterError):  # ValueError: pandas' OutOfBoundsDatetime
        above = None
    return _Gap(_bind_scalar(floor, column, typ), above)


def _bind_many(values: Sequence[object], column: str, typ: pa.DataType) -> list[object]:
    """_bind_scalar of each value; common homogeneous lists take one vectorised cast."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    types = set(map(type, values))
    present: Sequence[object] = values
    if type(None) in types:
        types.discard(type(None))
        present = [v for v in values if v is not None]
    bound = _bind_bulk(present, types, typ)
    if bound is None:  # no fast path, or a value needs the careful path (or its error message)
        return [_bind_scalar(v, column, typ) for v in values]
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
                return None  # a narrow float type needs _bind_float's care against double rounding
            wide = np.asarray(values, dtype=np.float64)
            if typ.bit_width != 64:
                with np.errstate(over="ignore"):
                    wide = wide.astype(np.float32 if typ.bit_width == 32 else np.float16)
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


def bind(expr: Expr, schema: pa.Schema) -> Expr:
    """Check columns against ``schema`` and cast every literal to its column's type.

    Numbers keep their exact value on integer and decimal columns: a comparison with one the
    column type cannot hold becomes the exactly equivalent comparison (``i < 1.5`` becomes
    ``i <= 1``, ``i = 1.5`` becomes FALSE for non-null ``i`` and NULL for NULL, written
    ``(i IN (NULL) AND i IS NULL)``), and IN lists lose the values no row can equal. On float
    columns numbers become the nearest value of the column's float type. A literal of the
    wrong kind (a string for a number, ...) raises :class:`FilterError`.
    """
    names = schema.names

    def field_type(name: str) -> pa.DataType:
        if name not in names:
            available = ", ".join(names) or "(none)"
            raise FilterError(f"unknown column {name!r} in filter; available columns: {available}")
        return schema.field(name).type

    def bind_atom(e: Expr) -> Expr:
        if isinstance(e, Compare):
            value = _bind_scalar(e.value, e.column, field_type(e.column))
            return (
                _compare_gap(e.op, e.column, value)
                if isinstance(value, _Gap)
                else Compare(e.op, e.column, value)
            )
        if isinstance(e, In):
            bound = _bind_many(e.values, e.column, field_type(e.column))
            if not any(isinstance(v, _Gap) for v in bound):
                return In(e.column, tuple(bound), e.negated)
            kept = tuple(v for v in bound if not isinstance(v, _Gap))  # values no row can equal
            if any(v is not None for v in kept):
                return In(e.column, kept, e.negated)
            if kept:  # only NULL left: NULL for every row, negated or not
                return In(e.column, (None,), e.negated)
            return _always(e.column) if e.negated else _never(e.column)
        if isinstance(e, IsNull):
            field_type(e.column)
        if isinstance(e, Sql):
            from mere.lang.lower import lower_predicate

            arrow, names = lower_predicate(e.text, schema)
            return Sql(e.text, arrow, names)
        return e

    return _map_atoms(expr, bind_atom)


# ---------------------------------------------------------------------------------------------
# Lowering to pyarrow


@functools.cache
def _null_bool() -> pa.Scalar:
    # Made on first use: pa.scalar at import would make pyarrow import pandas (a second of start-up).
    return pa.scalar(None, pa.bool_())


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _nanosecond_type(values: Iterable[object], zone: str | None = None) -> pa.DataType | None:
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
    return pa.scalar(value, _nanosecond_type([value]))


def _arrow_scalar(value: object, zone: str | None = None) -> pc.Expression:
    try:
        if type(value) is int:
            # uint64 compares with every integer column (Arrow casts it to a signed column's type),
            # int64 would make Arrow cast a uint64 column to int64 and fail on large values.
            return pc.scalar(pa.scalar(value, pa.uint64() if value >= 0 else pa.int64()))
        return pc.scalar(pa.scalar(value, _nanosecond_type([value], zone)))
    except _CONVERSION_ERRORS as exc:
        raise FilterError(f"literal {value!r} cannot be converted to Arrow: {exc}") from None


def _value_set(values: Sequence[object], zone: str | None = None) -> pa.Array:
    if set(map(type, values)) == {int}:
        ints = cast("Sequence[int]", values)
        return pa.array(values, pa.uint64() if min(ints) >= 0 else pa.int64())
    return pa.array(values, _nanosecond_type(values, zone))


def to_pyarrow(expr: Expr, schema: pa.Schema | None = None) -> pc.Expression:
    """Lower to a ``pyarrow.compute.Expression`` with SQL null semantics.

    Float literals get SQL float semantics (NaN equal to NaN and above every other value,
    -0.0 equal to 0.0); bind the expression first so that float columns have float literals.
    ``schema``, the rows' schema, labels timestamp literals with their column's zone: bound literals are
    UTC instants, and Arrow compares instants of different zones only in some units.
    """
    zones: dict[str, str] = {}
    if schema is not None:
        zones = {
            f.name: f.type.tz
            for f in schema
            if pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz != "UTC"
        }
    return _lower(expr, zones)


def _lower(expr: Expr, zones: Mapping[str, str]) -> pc.Expression:
    if isinstance(expr, And):
        return _lower(expr.left, zones) & _lower(expr.right, zones)
    if isinstance(expr, Or):
        return _lower(expr.left, zones) | _lower(expr.right, zones)
    if isinstance(expr, Not):
        return ~_lower(expr.operand, zones)
    if isinstance(expr, AlwaysTrue | AlwaysFalse):
        return pc.scalar(isinstance(expr, AlwaysTrue))
    if isinstance(expr, ArrowPredicate):
        return expr.expression
    if isinstance(expr, Sql):
        if expr.arrow is None:
            raise FilterError(f"bind {expr.text!r} to a schema before lowering it")
        return expr.arrow
    if isinstance(expr, IsNull):
        field = pc.field(expr.column)
        return field.is_valid() if expr.negated else field.is_null()
    zone = zones.get(expr.column) if isinstance(expr, Compare | In) else None
    if isinstance(expr, Compare):
        if isinstance(expr.value, float):
            return _float_compare(expr.op, pc.field(expr.column), expr.value)
        value = _arrow_scalar(expr.value, zone)
        return cast(pc.Expression, _PY_OPS[expr.op](pc.field(expr.column), value))
    if isinstance(expr, In):
        # Long lists: the value set is built once (per zone), not once per file read.
        cache = expr.__dict__.setdefault("_arrow", {})
        lowered = cache.get(zone)
        if lowered is None:
            result = _in_to_pyarrow(expr, zone)
            lowered = cache[zone] = ~result if expr.negated else result
        return cast(pc.Expression, lowered)
    raise FilterError(f"cannot lower {type(expr).__name__} to pyarrow")


def _float_compare(op: str, field: pc.Expression, value: float) -> pc.Expression:
    """``field op value`` where NaN equals NaN and sorts above everything (Arrow's IEEE order does not)."""
    nan = pc.is_nan(field)  # NULL for NULL, so every combination below stays NULL for NULL
    if math.isnan(value):
        by_op = {"==": nan, ">=": nan, "!=": ~nan, "<": ~nan, "<=": nan | ~nan, ">": nan & ~nan}
        return by_op[op]
    # IEEE already makes NaN unequal to value, not below it, and -0.0 equal to 0.0.
    result = cast(pc.Expression, _PY_OPS[op](field, pc.scalar(value)))
    return result | nan if op in (">", ">=") else result


def _in_to_pyarrow(expr: In, zone: str | None = None) -> pc.Expression:
    index = _in_index(expr)
    if not expr.values:
        return pc.scalar(False)
    if not index.present:
        return pc.scalar(_null_bool())
    field = pc.field(expr.column)
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


# ---------------------------------------------------------------------------------------------
# Value comparison shared by the pruning functions

_MAX_EXACT_FLOAT_INT = 2**53  # ints beyond this may round when Arrow compares them with floats


def _type_kind(t: type) -> str:
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


def _kind(value: object) -> str:
    kind = _type_kind(type(value))
    if kind == "datetime" and cast(_dt.datetime, value).tzinfo is not None:
        return "datetime-tz"
    return kind


def _kinds(values: Collection[object]) -> frozenset[str]:
    """The kinds of ``values``; per value only where the type does not decide (datetimes)."""
    kinds = {_type_kind(t) for t in set(map(type, values))}
    if "datetime" in kinds:
        kinds.discard("datetime")
        kinds.update(_kind(v) for v in values if isinstance(v, _dt.datetime))
    return frozenset(kinds)


def _comparable(a: object, b: object) -> bool:
    return _comparable_kinds(_kind(a), _kind(b))


def _comparable_kinds(ka: str, kb: str) -> bool:
    return ka == kb or {ka, kb} in ({"int", "float"}, {"int", "Decimal"})


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _compare(op: str, a: object, b: object) -> bool | None:
    """``a op b`` for non-null values (NaN equal to NaN and above all); None when not comparable."""
    if not _comparable(a, b):
        return None
    if isinstance(a, float) or isinstance(b, float):
        a_nan, b_nan = _is_nan(a), _is_nan(b)
        if a_nan or b_nan:
            return bool(_PY_OPS[op](a_nan, b_nan))
        if any(isinstance(v, int) and abs(v) > _MAX_EXACT_FLOAT_INT for v in (a, b)):
            return None  # Arrow would compare it rounded to a float
    try:
        return bool(_PY_OPS[op](a, b))
    except TypeError:
        return None


def _in_match(value: object, candidates: Iterable[object]) -> bool | None:
    """Whether ``value`` equals one of the non-null candidates; None if unknown (one value at a time)."""
    unknown = False
    for c in candidates:
        same = _compare("==", value, c)
        if same:
            return True
        unknown = unknown or same is None
    return None if unknown else False


_NAN_KEY = ("NaN",)  # stands for every NaN in hash lookups (NaN != NaN as a Python float)


def _canon(value: object) -> object:
    return _NAN_KEY if _is_nan(value) else value


class _InIndex:
    """Lookup structures for the values of one In node, built once per node on demand."""

    def __init__(self, values: tuple[object, ...]) -> None:
        self.has_null = None in values
        self.present = tuple(v for v in values if v is not None) if self.has_null else values
        self.types = set(map(type, self.present))
        self.has_float = any(issubclass(t, float) for t in self.types)
        self.has_nan = self.has_float and any(_is_nan(v) for v in self.present)

    @functools.cached_property
    def kinds(self) -> frozenset[str]:
        return _kinds(self.present)

    @functools.cached_property
    def lookup(self) -> frozenset[object] | None:
        """Canonical values for hash lookups; None when a value is unhashable."""
        try:
            if self.has_nan:
                return frozenset(map(_canon, self.present))
            return frozenset(self.present)
        except TypeError:
            return None

    @functools.cached_property
    def ordered(self) -> list[Any] | None:
        """The non-NaN values in ascending order; None unless they are all of one kind."""
        if len(self.kinds) != 1:
            return None
        numbers: Sequence[Any] = [v for v in self.present if not _is_nan(v)] if self.has_nan else self.present
        try:
            return sorted(numbers)
        except TypeError:
            return None

    def contains(self, value: object) -> bool | None:
        """Whether non-null ``value`` equals a candidate (NaN equals NaN); None if unknown."""
        lookup = self.lookup
        if lookup is not None and self.kinds == {_kind(value)}:
            return _canon(value) in lookup
        return _in_match(value, self.present)

    def any_between(self, lo: object, hi: object) -> bool:
        """Whether some non-NaN candidate may lie in ``[lo, hi]`` (True when that is unclear)."""
        ordered = self.ordered
        if ordered is not None and self.kinds == {_kind(lo)} == {_kind(hi)}:
            try:
                i = bisect.bisect_left(ordered, cast(Any, lo))
                return i < len(ordered) and _compare("<=", ordered[i], hi) is not False
            except TypeError:
                pass
        return any(
            _compare("<=", lo, v) is not False and _compare("<=", v, hi) is not False
            for v in self.present
            if not _is_nan(v)
        )


def _in_index(expr: In) -> _InIndex:
    index = expr.__dict__.get("_index")
    if index is None:
        index = _InIndex(expr.values)
        object.__setattr__(expr, "_index", index)  # frozen node: a cache, not part of its value
    return cast(_InIndex, index)


# ---------------------------------------------------------------------------------------------
# Key points (hash-bucket pruning)

_PinSet = dict[object, object]  # (kind, value with NaN canonical) -> value: hashing keeps it linear
_Pins = dict[str, _PinSet] | None  # None: the expression is never true


def _pin_set(values: Collection[object]) -> _PinSet:
    kind_of = {t: _type_kind(t) for t in set(map(type, values))}
    canonical = map(_canon, values) if "float" in kind_of.values() else values
    return dict(zip(zip(map(kind_of.__getitem__, map(type, values)), canonical), values))


def _intersect(a: _PinSet, b: _PinSet) -> _PinSet:
    if len(_kinds(a.values()) | _kinds(b.values())) > 1:
        return {**a, **b}  # mixed literal kinds (unbound filter): stay conservative
    return {key: value for key, value in a.items() if key in b}


def _pins(expr: Expr) -> _Pins:
    """Per column, a finite superset of the values a row accepted by ``expr`` can have."""
    if isinstance(expr, AlwaysFalse):
        return None
    if isinstance(expr, Compare) and expr.op == "==":
        return {expr.column: _pin_set((expr.value,))}
    if isinstance(expr, In) and not expr.negated:
        return {expr.column: _pin_set(_in_index(expr).present)}
    if isinstance(expr, And):
        left, right = _pins(expr.left), _pins(expr.right)
        if left is None or right is None:
            return None
        merged = dict(left)
        for name, vals in right.items():
            merged[name] = _intersect(merged[name], vals) if name in merged else vals
        return merged
    if isinstance(expr, Or):
        left, right = _pins(expr.left), _pins(expr.right)
        if left is None or right is None:
            return right if left is None else left
        return {name: {**vals, **right[name]} for name, vals in left.items() if name in right}
    return {}


def key_points(
    expr: Expr, key_columns: Sequence[str], limit: int = 1_000_000
) -> list[tuple[object, ...]] | None:
    """Candidate key tuples if ``expr`` pins every key column to finitely many values, else None.

    Every row the filter accepts has its key in the result. Bind ``expr`` first so that the
    values have the key columns' types. When the number of candidate tuples (the product of
    the candidates per key column) exceeds ``limit`` the result is None, as if unpinned; the
    default admits an IN list of a million keys. Linear in the number of IN values.
    """
    pins = _pins(_push_not(expr))
    if pins is None:
        return []
    if any(name not in pins for name in key_columns):
        return None
    candidates = [list(pins[name].values()) for name in key_columns]
    if math.prod(len(c) for c in candidates) > limit:
        return None
    return list(itertools.product(*candidates))


# ---------------------------------------------------------------------------------------------
# Min/max statistics (row-group pruning)


@dataclass(frozen=True)
class ColumnStats:
    """Statistics of one column in a chunk of rows; None means unknown.

    ``min``/``max`` must bound every non-null, non-NaN value (they need not be exact); NaN
    values of float columns need not be reflected in them, and a zero bound may have either
    sign (as in Parquet). ``num_values`` counts rows, nulls included (a Parquet row group's
    ``num_rows``, not ``Statistics.num_values``).
    """

    min: object = None
    max: object = None
    null_count: int | None = None
    num_values: int | None = None


def _may(op: str, a: object, b: object) -> bool:
    return _compare(op, a, b) is not False


# NaN literal: only NaN rows (which min/max never show) equal it; every other value is below it.
_NAN_OUTCOMES = {
    "==": (True, True), ">=": (True, True), "!=": (True, True), "<": (True, True),
    "<=": (True, False), ">": (False, True),
}  # fmt: skip


def _range_outcomes(op: str, st: ColumnStats, value: object) -> tuple[bool, bool]:
    """(can be TRUE, can be FALSE) over the non-null values of a column for ``column op value``."""
    if _is_nan(value):
        return _NAN_OUTCOMES[op]
    lo, hi = st.min, st.max
    if lo is None or hi is None or _is_nan(lo) or _is_nan(hi):
        return True, True
    if not (_comparable(lo, value) and _comparable(hi, value)):
        return True, True
    nan_rows = any(isinstance(v, float) for v in (lo, hi, value))  # unseen NaNs sort above everything
    inside = _may("<=", lo, value) and _may("<=", value, hi)
    single = _compare("==", lo, hi) is True and _compare("==", lo, value) is True
    outcomes = {
        "==": (inside, nan_rows or not single),
        "!=": (nan_rows or not single, inside),
        "<": (_may("<", lo, value), nan_rows or _may(">=", hi, value)),
        "<=": (_may("<=", lo, value), nan_rows or _may(">", hi, value)),
        ">": (nan_rows or _may(">", hi, value), _may("<=", lo, value)),
        ">=": (nan_rows or _may(">=", hi, value), _may("<", lo, value)),
    }
    return outcomes[op]


def _in_outcomes(expr: In, st: ColumnStats, any_rows: bool, any_value: bool) -> tuple[bool, bool]:
    """(can be TRUE, can be FALSE) of ``column IN (...)``; O(log n) per call after a one-off sort."""
    index = _in_index(expr)
    if not expr.values:
        return False, any_rows
    if not index.present or not any_value:
        return False, False
    lo, hi = st.min, st.max
    if lo is None or hi is None or _is_nan(lo) or _is_nan(hi):
        return True, not index.has_null
    nan_rows = index.has_float or isinstance(lo, float) or isinstance(hi, float)
    can_true = index.has_nan or index.any_between(lo, hi)
    single = _compare("==", lo, hi) is True and index.contains(lo) is True
    return can_true, not index.has_null and (nan_rows or not single)


def _outcomes(expr: Expr, stats: Mapping[str, ColumnStats]) -> tuple[bool, bool]:
    """(some row may make ``expr`` TRUE, some row may make it FALSE)."""
    if isinstance(expr, AlwaysTrue):
        return True, False
    if isinstance(expr, AlwaysFalse):
        return False, True
    if isinstance(expr, And):
        (lt, lf), (rt, rf) = _outcomes(expr.left, stats), _outcomes(expr.right, stats)
        return lt and rt, lf or rf
    if isinstance(expr, Or):
        (lt, lf), (rt, rf) = _outcomes(expr.left, stats), _outcomes(expr.right, stats)
        return lt or rt, lf and rf
    if isinstance(expr, Not):
        t, f = _outcomes(expr.operand, stats)
        return f, t
    if not isinstance(expr, Compare | In | IsNull) or expr.column not in stats:
        return True, True
    st = stats[expr.column]
    any_rows = st.num_values is None or st.num_values > 0
    any_null = any_rows and (st.null_count is None or st.null_count > 0)
    all_null = st.null_count is not None and st.num_values is not None and st.null_count >= st.num_values
    any_value = any_rows and not all_null
    if isinstance(expr, IsNull):
        return (any_value, any_null) if expr.negated else (any_null, any_value)
    if isinstance(expr, Compare):
        if not any_value:
            return False, False
        return _range_outcomes(expr.op, st, expr.value)
    result = _in_outcomes(expr, st, any_rows, any_value)
    return (result[1], result[0]) if expr.negated else result


def might_match(expr: Expr, stats: Mapping[str, ColumnStats]) -> bool:
    """False only if no row described by ``stats`` can satisfy ``expr``."""
    return _outcomes(expr, stats)[0]


# ---------------------------------------------------------------------------------------------
# Constant evaluation (partition pruning)

_Truth = frozenset[bool | None]
_ANY: _Truth = frozenset({True, False, None})


def _and3(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or3(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _possible(expr: Expr, values: Mapping[str, object]) -> _Truth:
    """The set of 3-valued results ``expr`` can take given the known column values."""
    if isinstance(expr, AlwaysTrue | AlwaysFalse):
        return frozenset({isinstance(expr, AlwaysTrue)})
    if isinstance(expr, And | Or):
        fn = _and3 if isinstance(expr, And) else _or3
        left, right = _possible(expr.left, values), _possible(expr.right, values)
        return frozenset(fn(a, b) for a in left for b in right)
    if isinstance(expr, Not):
        return frozenset(None if v is None else not v for v in _possible(expr.operand, values))
    if not isinstance(expr, Compare | In | IsNull):
        return _ANY
    if expr.column not in values:
        return frozenset({True, False}) if isinstance(expr, IsNull) else _ANY
    value = values[expr.column]
    if isinstance(expr, IsNull):
        return frozenset({(value is None) != expr.negated})
    if isinstance(expr, Compare):
        if value is None:
            return frozenset({None})
        result = _compare(expr.op, value, expr.value)
        return _ANY if result is None else frozenset({result})
    if not expr.values:
        result3: bool | None = False
    elif value is None:
        result3 = None
    else:
        index = _in_index(expr)
        found = index.contains(value) if index.present else False
        if found is None:
            return _ANY
        result3 = True if found else (None if index.has_null else False)
    if expr.negated:
        result3 = None if result3 is None else not result3
    return frozenset({result3})


def evaluate_constant(expr: Expr, values: Mapping[str, object]) -> bool | None:
    """Evaluate with constant column values (None is NULL).

    True: every such row is kept; False: every such row is dropped (a NULL result counts as
    dropped); None: it depends on other columns. Values should have the columns' types;
    values not comparable with a literal count as unknown.
    """
    outcomes = _possible(expr, values)
    if outcomes == {True}:
        return True
    if True not in outcomes:
        return False
    return None
