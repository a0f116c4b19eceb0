"""Expression nodes: the filter atoms, their boolean combinations, ``col()`` and how they read as SQL.

Nodes are immutable values. Building one checks its column name and literal (:class:`Compare` refuses
NULL and column-to-column comparisons); binding to a schema (:func:`mere.expr.bind`) checks the rest.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import FilterError
from mere.expr.literals import OPERATORS, format_ident, format_literal

CompareOp = Literal["==", "!=", "<", "<=", ">", ">="]
_OP_ALIASES = {"=": "==", "<>": "!="}
_FLIP: dict[CompareOp, CompareOp] = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# Literal types In.__post_init__ can accept without looking at each value (long IN lists).
_PLAIN_TYPES = frozenset(
    {int, float, str, bytes, bool, Decimal, type(None), _dt.date, _dt.datetime, _dt.time, _dt.timedelta}
)


def flip(op: CompareOp) -> CompareOp:
    """The operator that compares the swapped operands: ``a < b`` is ``b > a``."""
    return _FLIP[op]


# ---------------------------------------------------------------------------------------------
# Nodes


@dataclass(frozen=True, repr=False)
class Expr:
    """Base class of filter expressions: immutable, combinable with ``&``, ``|`` and ``~``.

    The other operand may be an ``Expr``, a ``pyarrow.compute.Expression`` or filter text; text is kept
    as a :class:`FilterText` and read when a table takes the filter.
    """

    def __and__(self, other: object) -> Expr:
        operand = _operand(other)
        return NotImplemented if operand is None else And(self, operand)

    def __or__(self, other: object) -> Expr:
        operand = _operand(other)
        return NotImplemented if operand is None else Or(self, operand)

    def __rand__(self, other: object) -> Expr:
        if isinstance(other, str):
            return And(FilterText(other), self)
        return NotImplemented

    def __ror__(self, other: object) -> Expr:
        if isinstance(other, str):
            return Or(FilterText(other), self)
        return NotImplemented

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise FilterError("an Expr has no truth value; combine filters with &, | and ~, not and/or/not")

    def __str__(self) -> str:
        return _render(self, 0, None)

    def __repr__(self) -> str:
        return _render(self, 0, None)


def _operand(value: object) -> Expr | None:
    """``value`` as an operand of ``&`` / ``|``; None when it cannot be one."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):  # a filter in mere's SQL, parsed where a table takes the filter
        return FilterText(value)
    if isinstance(value, pc.Expression):
        return ArrowPredicate(value)
    return None


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
        if op not in OPERATORS:
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


@dataclass(frozen=True, repr=False)
class FilterText(Expr):
    """Filter text combined with an expression (``(col("a") > 1) & "b = 2"``), not yet parsed.

    A table reads it with the rest of the filter: :func:`~mere.expr.to_expr` and :func:`~mere.expr.bind`
    replace it with the parsed expression. Until then it prunes nothing and its columns are unknown.
    """

    text: str


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


def _precedence(e: Expr) -> int:
    if isinstance(e, FilterText):
        return 0  # any text: parenthesised wherever it is a part
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
        text = f"{format_ident(e.column)} {op} {format_literal(e.value)}"
    elif isinstance(e, In):
        shown = e.values if max_values is None else e.values[:max_values]
        parts = list(map(format_literal, shown))
        if len(shown) < len(e.values):
            parts.append(f"... and {len(e.values) - len(shown)} more")
        text = f"{format_ident(e.column)} {'NOT IN' if e.negated else 'IN'} ({', '.join(parts)})"
    elif isinstance(e, IsNull):
        text = f"{format_ident(e.column)} IS {'NOT NULL' if e.negated else 'NULL'}"
    elif isinstance(e, AlwaysTrue):
        text = "TRUE"
    elif isinstance(e, AlwaysFalse):
        text = "FALSE"
    elif isinstance(e, ArrowPredicate):
        text = f"<arrow {e.expression}>"
    elif isinstance(e, Sql | FilterText):
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


BALANCED_FROM = 64  # longer chains of AND or OR are built as balanced trees (no deep recursion)


def combined(parts: Sequence[Expr], combine: type[And] | type[Or]) -> Expr:
    """``parts`` (at least one) joined by ``combine``: left-deep, as a chain is written, up to
    ``BALANCED_FROM`` parts; beyond, a balanced tree, whose depth every recursive step below can take."""
    terms: list[Expr] = list(parts)
    if len(terms) <= BALANCED_FROM:
        result: Expr = terms[0]
        for part in terms[1:]:
            result = combine(result, part)
        return result
    while len(terms) > 1:
        pairs = [combine(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(pairs) * 2 :]
    return terms[0]
