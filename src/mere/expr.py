"""Filter expressions: parsing, binding, lowering to pyarrow and pruning analysis.

A filter reaches mere as SQL-like text, as an :class:`Expr` tree or as an opaque
``pyarrow.compute.Expression``; :func:`to_expr` turns all three into an ``Expr``.

Semantics follow SQL three-valued logic. A comparison with a NULL column value is
NULL; ``NOT NULL`` is NULL; ``x IN (1, NULL)`` is TRUE when ``x = 1`` and NULL
otherwise; a row is kept only when the filter is TRUE. An empty ``IN ()`` list is
FALSE for every row, NULL included. Floats follow Arrow: NaN compares unequal to
everything (``NaN != 1`` is TRUE) but ``IN`` matches NaN with NaN.

Literal values are always plain Python values (``int``, ``float``, ``Decimal``,
``str``, ``bytes``, ``bool``, ``datetime.date``, ``datetime.datetime``, ``datetime.time``,
``datetime.timedelta``). :func:`bind` casts them to the column's Arrow type and stores
the result again as a Python value of that type (``pa.Scalar.as_py()``); timestamps are
kept at microsecond precision as ``datetime.datetime`` (tz-aware for tz columns).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import operator
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, cast

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
_KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "TRUE", "FALSE"})
_BARE_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


# ---------------------------------------------------------------------------------------------
# Expression nodes


@dataclass(frozen=True, repr=False)
class Expr:
    """Base class of filter expressions: immutable, combinable with ``&``, ``|`` and ``~``."""

    def __and__(self, other: object) -> Expr:
        if isinstance(other, Expr | pc.Expression):
            return And(self, to_expr(other))
        return NotImplemented

    def __or__(self, other: object) -> Expr:
        if isinstance(other, Expr | pc.Expression):
            return Or(self, to_expr(other))
        return NotImplemented

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise FilterError("an Expr has no truth value; combine filters with &, | and ~, not and/or/not")

    def __str__(self) -> str:
        return _render(self, 0)

    def __repr__(self) -> str:
        return _render(self, 0)


def _check_column(column: object) -> None:
    if isinstance(column, Col):
        raise FilterError("comparing a column with another column is not supported")
    if not isinstance(column, str) or not column:
        raise FilterError(f"a column name must be a non-empty string, got {column!r}")


def _literal(value: object, what: str) -> object:
    """Validate a literal; pa.Scalar and numpy values become plain Python values."""
    if isinstance(value, np.number | np.bool_):
        value = value.item()
    if isinstance(value, pa.Scalar | np.generic):
        value = (value if isinstance(value, pa.Scalar) else pa.scalar(value)).as_py()
    if isinstance(value, Col):
        raise FilterError(f"comparing a column with another column ({value.name!r}) is not supported")
    if isinstance(value, Expr | pc.Expression):
        raise FilterError(f"{what} must be a literal, got the expression {value}")
    if isinstance(value, list | tuple | set | frozenset | dict):
        raise FilterError(f"{what} must be a single value, got {value!r}")
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
        object.__setattr__(self, "values", tuple(_literal(v, "IN value") for v in self.values))


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
        return In(self.name, tuple(values))

    def not_in(self, values: Iterable[object]) -> In:
        """``name NOT IN (values)``."""
        return In(self.name, tuple(values), negated=True)

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
    if _BARE_IDENT.fullmatch(name) and name.upper() not in _KEYWORDS:
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
        return repr(value)  # non-finite floats have no literal syntax and do not round-trip
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    if isinstance(value, _dt.datetime):
        return "TIMESTAMP '" + value.isoformat(sep=" ") + "'"
    if isinstance(value, _dt.date):
        return "DATE '" + value.isoformat() + "'"
    return "'" + str(value).replace("'", "''") + "'"


def _precedence(e: Expr) -> int:
    return 1 if isinstance(e, Or) else 2 if isinstance(e, And) else 3 if isinstance(e, Not) else 4


def _render(e: Expr, min_prec: int) -> str:
    if isinstance(e, Or):
        text = f"{_render(e.left, 1)} OR {_render(e.right, 2)}"
    elif isinstance(e, And):
        text = f"{_render(e.left, 2)} AND {_render(e.right, 3)}"
    elif isinstance(e, Not):
        text = f"NOT {_render(e.operand, 3)}"
    elif isinstance(e, Compare):
        op = "=" if e.op == "==" else e.op
        text = f"{_fmt_ident(e.column)} {op} {_fmt_literal(e.value)}"
    elif isinstance(e, In):
        values = ", ".join(_fmt_literal(v) for v in e.values)
        text = f"{_fmt_ident(e.column)} {'NOT IN' if e.negated else 'IN'} ({values})"
    elif isinstance(e, IsNull):
        text = f"{_fmt_ident(e.column)} IS {'NOT NULL' if e.negated else 'NULL'}"
    elif isinstance(e, AlwaysTrue):
        text = "TRUE"
    elif isinstance(e, AlwaysFalse):
        text = "FALSE"
    elif isinstance(e, ArrowPredicate):
        text = f"<arrow {e.expression}>"
    else:
        text = f"<{type(e).__name__}>"
    return f"({text})" if _precedence(e) < min_prec else text


# ---------------------------------------------------------------------------------------------
# Parsing

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<num>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
    |(?P<op><=|>=|<>|!=|==|=|<|>)
    |(?P<punct>[(),])
    |(?P<str>'(?:[^']|'')*')
    |(?P<qident>"(?:[^"]|"")*"|`(?:[^`]|``)*`)""",
    re.VERBOSE,
)
_NO_LITERAL = object()


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, str, ident, qident, kw, op, punct, eof
    value: str
    pos: int


def _error(text: str, pos: int, message: str) -> FilterError:
    if pos >= len(text):
        return FilterError(f"{message} at end of filter (filter: {text!r})")
    excerpt = text[pos : pos + 20] + ("..." if pos + 20 < len(text) else "")
    return FilterError(f"{message} at position {pos} near {excerpt!r} (filter: {text!r})")


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            what = (
                "unterminated quoted text" if text[pos] in "'\"`" else f"unexpected character {text[pos]!r}"
            )
            raise _error(text, pos, what)
        kind, value = m.lastgroup or "", m.group()
        if kind in ("str", "qident"):
            value = value[1:-1].replace(value[0] * 2, value[0])
            if kind == "qident" and not value:
                raise _error(text, pos, "empty quoted identifier")
        if kind == "ident" and value.upper() in _KEYWORDS:
            kind, value = "kw", value.upper()
        if kind != "ws":
            tokens.append(_Tok(kind, value, pos))
        pos = m.end()
    tokens.append(_Tok("eof", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self, ahead: int = 0) -> _Tok:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def next(self) -> _Tok:
        tok = self.peek()
        self.i += 1
        return tok

    def fail(self, tok: _Tok, message: str) -> FilterError:
        return _error(self.text, tok.pos, message)

    def at(self, kind: str, value: str) -> bool:
        return self.peek().kind == kind and self.peek().value == value

    def accept(self, kind: str, value: str) -> bool:
        if self.at(kind, value):
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: str, what: str) -> None:
        tok = self.next()
        if tok.kind != kind or tok.value != value:
            raise self.fail(tok, f"expected {what}")

    def parse(self) -> Expr:
        if self.peek().kind == "eof":
            raise FilterError("empty filter")
        expr = self.or_expr()
        if self.peek().kind != "eof":
            raise self.fail(self.peek(), "unexpected text after the end of the expression")
        return expr

    def or_expr(self) -> Expr:
        expr = self.and_expr()
        while self.accept("kw", "OR"):
            expr = Or(expr, self.and_expr())
        return expr

    def and_expr(self) -> Expr:
        expr = self.not_expr()
        while self.accept("kw", "AND"):
            expr = And(expr, self.not_expr())
        return expr

    def not_expr(self) -> Expr:
        if self.accept("kw", "NOT"):
            return Not(self.not_expr())
        if self.accept("punct", "("):
            expr = self.or_expr()
            self.expect("punct", ")", "')'")
            return expr
        return self.predicate()

    def literal(self) -> object:
        """Parse a literal if one comes next, else return _NO_LITERAL without consuming."""
        tok = self.peek()
        if tok.kind == "num":
            self.i += 1
            is_float = any(c in tok.value for c in ".eE")
            return float(tok.value) if is_float else int(tok.value)
        if tok.kind == "str":
            self.i += 1
            return tok.value
        if tok.kind == "kw" and tok.value in ("TRUE", "FALSE", "NULL"):
            self.i += 1
            return {"TRUE": True, "FALSE": False, "NULL": None}[tok.value]
        prefix = tok.value.upper()
        if tok.kind == "ident" and prefix in ("DATE", "TIMESTAMP", "X") and self.peek(1).kind == "str":
            self.i += 2
            raw = self.peek(-1).value
            try:
                if prefix == "DATE":
                    return _dt.date.fromisoformat(raw)
                if prefix == "TIMESTAMP":
                    return _dt.datetime.fromisoformat(raw)
                return bytes.fromhex(raw)
            except ValueError as exc:
                raise self.fail(self.peek(-1), f"invalid {prefix} literal {raw!r} ({exc})") from None
        return _NO_LITERAL

    def column(self) -> str | None:
        tok = self.peek()
        if tok.kind in ("ident", "qident"):
            self.i += 1
            return tok.value
        return None

    def required_literal(self, what: str, allow_null: bool = False) -> object:
        tok = self.peek()
        value = self.literal()
        if value is _NO_LITERAL:
            if tok.kind in ("ident", "qident"):
                raise self.fail(
                    tok, "comparing a column with another column is not supported; expected a literal"
                )
            raise self.fail(tok, f"expected {what}")
        if value is None and not allow_null:
            raise self.fail(tok, "comparison with NULL is never true; use IS NULL or IS NOT NULL")
        return value

    def predicate(self) -> Expr:
        start = self.peek()
        value = self.literal()
        if value is not _NO_LITERAL:
            if self.peek().kind == "op":
                op = _OP_ALIASES.get(self.next().value, self.peek(-1).value)
                name = self.column()
                if name is None:
                    raise self.fail(
                        self.peek(), "a comparison needs a column on one side; expected a column name"
                    )
                if value is None:
                    raise self.fail(start, "comparison with NULL is never true; use IS NULL or IS NOT NULL")
                return Compare(cast(CompareOp, _FLIP[op]), name, value)
            if isinstance(value, bool):
                return AlwaysTrue() if value else AlwaysFalse()
            raise self.fail(self.peek(), "expected a comparison operator after the literal")
        name = self.column()
        if name is None:
            raise self.fail(start, "expected a column name, literal, NOT or '('")
        tok = self.next()
        if tok.kind == "op":
            op = _OP_ALIASES.get(tok.value, tok.value)
            return Compare(cast(CompareOp, op), name, self.required_literal("a literal value"))
        if tok.kind == "kw" and tok.value == "IS":
            negated = self.accept("kw", "NOT")
            self.expect("kw", "NULL", "NULL after IS [NOT]")
            return IsNull(name, negated)
        negated = tok.kind == "kw" and tok.value == "NOT"
        if negated:
            tok = self.next()
        if tok.kind == "kw" and tok.value == "IN":
            self.expect("punct", "(", "'(' after IN")
            values: list[object] = []
            while not self.at("punct", ")") and (not values or self.accept("punct", ",")):
                values.append(self.required_literal("a literal in the IN list", allow_null=True))
            self.expect("punct", ")", "',' or ')' in the IN list")
            return In(name, tuple(values), negated)
        if tok.kind == "kw" and tok.value == "BETWEEN":
            low = self.required_literal("a literal after BETWEEN")
            self.expect("kw", "AND", "AND in BETWEEN ... AND ...")
            high = self.required_literal("a literal after BETWEEN ... AND")
            between = And(Compare(">=", name, low), Compare("<=", name, high))
            return Not(between) if negated else between
        raise self.fail(tok, f"expected an operator, IN, BETWEEN or IS after column {name!r}")


def parse(text: str) -> Expr:
    """Parse SQL-like filter text (see module docs) into an :class:`Expr`."""
    if not isinstance(text, str):
        raise FilterError(f"filter text must be a str, got {type(text).__name__}")
    return _Parser(text).parse()


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


def _bind_value(value: object, column: str, typ: pa.DataType) -> object:
    if value is None:
        return None
    if pa.types.is_dictionary(typ):
        typ = typ.value_type

    def fail(reason: str) -> FilterError:
        return FilterError(f"cannot compare column {column!r} of type {typ} with {value!r}: {reason}")

    if pa.types.is_boolean(typ) != isinstance(value, bool):
        raise fail("booleans compare only with booleans")
    numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
    if numeric and not isinstance(value, int | float | Decimal):
        raise fail("not a number")
    if pa.types.is_decimal(typ) and isinstance(value, int | float):
        value = Decimal(repr(value))
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
    if (
        pa.types.is_timestamp(typ)
        and isinstance(value, _dt.datetime)
        and (typ.tz is None) != (value.tzinfo is None)
    ):
        raise fail("time-zone aware and naive timestamps cannot be compared")
    if pa.types.is_date(typ) and isinstance(value, _dt.datetime):
        if value.tzinfo is not None or value.time() != _dt.time():
            raise fail("a timestamp with a time of day does not fit a date column")
        value = value.date()
    try:
        scalar = pa.scalar(value).cast(typ, safe=True)
        if pa.types.is_timestamp(typ):
            scalar = scalar.cast(pa.timestamp("us", typ.tz), safe=True)
        result = scalar.as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise fail(str(exc).splitlines()[0]) from None
    except OverflowError:
        raise fail("out of range") from None
    if isinstance(value, Decimal) and result != value:
        raise fail("the value does not fit the decimal scale")
    return result


def bind(expr: Expr, schema: pa.Schema) -> Expr:
    """Check columns against ``schema`` and cast every literal to its column's type."""
    names = schema.names

    def field_type(name: str) -> pa.DataType:
        if name not in names:
            available = ", ".join(names) or "(none)"
            raise FilterError(f"unknown column {name!r} in filter; available columns: {available}")
        return schema.field(name).type

    def bind_atom(e: Expr) -> Expr:
        if isinstance(e, Compare):
            return Compare(e.op, e.column, _bind_value(e.value, e.column, field_type(e.column)))
        if isinstance(e, In):
            typ = field_type(e.column)
            return In(e.column, tuple(_bind_value(v, e.column, typ) for v in e.values), e.negated)
        if isinstance(e, IsNull):
            field_type(e.column)
        return e

    return _map_atoms(expr, bind_atom)


# ---------------------------------------------------------------------------------------------
# Lowering to pyarrow

_NULL_BOOL = pa.scalar(None, pa.bool_())


def _arrow_scalar(value: object) -> pc.Expression:
    try:
        return pc.scalar(pa.scalar(value))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise FilterError(f"literal {value!r} cannot be converted to Arrow: {exc}") from None


def to_pyarrow(expr: Expr) -> pc.Expression:
    """Lower to a ``pyarrow.compute.Expression`` with SQL null semantics."""
    if isinstance(expr, And):
        return to_pyarrow(expr.left) & to_pyarrow(expr.right)
    if isinstance(expr, Or):
        return to_pyarrow(expr.left) | to_pyarrow(expr.right)
    if isinstance(expr, Not):
        return ~to_pyarrow(expr.operand)
    if isinstance(expr, AlwaysTrue | AlwaysFalse):
        return pc.scalar(isinstance(expr, AlwaysTrue))
    if isinstance(expr, ArrowPredicate):
        return expr.expression
    if isinstance(expr, IsNull):
        field = pc.field(expr.column)
        return field.is_valid() if expr.negated else field.is_null()
    if isinstance(expr, Compare):
        return cast(pc.Expression, _PY_OPS[expr.op](pc.field(expr.column), _arrow_scalar(expr.value)))
    if isinstance(expr, In):
        result = _in_to_pyarrow(expr)
        return ~result if expr.negated else result
    raise FilterError(f"cannot lower {type(expr).__name__} to pyarrow")


def _in_to_pyarrow(expr: In) -> pc.Expression:
    values = [v for v in expr.values if v is not None]
    has_null = len(values) < len(expr.values)
    if not expr.values:
        return pc.scalar(False)
    if not values:
        return pc.scalar(_NULL_BOOL)
    try:
        value_set = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise FilterError(f"IN list for {expr.column!r} cannot be converted to Arrow: {exc}") from None
    field = pc.field(expr.column)
    found = pc.is_in(field, value_set=value_set, skip_nulls=True)
    if has_null:  # TRUE when found, NULL otherwise
        return pc.if_else(found, True, _NULL_BOOL)
    return pc.if_else(field.is_null(), _NULL_BOOL, found)


# ---------------------------------------------------------------------------------------------
# Value comparison shared by the pruning functions


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, _dt.datetime):
        return "datetime-tz" if value.tzinfo is not None else "datetime"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    return type(value).__name__  # Decimal, str, date, time, timedelta, ...


def _comparable(a: object, b: object) -> bool:
    ka, kb = _kind(a), _kind(b)
    return ka == kb or {ka, kb} in ({"int", "float"}, {"int", "Decimal"})


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _compare(op: str, a: object, b: object) -> bool | None:
    """``a op b`` for non-null values; None when the values are not comparable."""
    if not _comparable(a, b):
        return None
    try:
        return bool(_PY_OPS[op](a, b))
    except TypeError:
        return None


def _in_match(value: object, candidates: Iterable[object]) -> bool | None:
    """Whether ``value`` equals one of the non-null candidates (NaN matches NaN); None if unknown."""
    unknown = False
    for c in candidates:
        same = True if _is_nan(value) and _is_nan(c) else _compare("==", value, c)
        if same:
            return True
        unknown = unknown or same is None
    return None if unknown else False


# ---------------------------------------------------------------------------------------------
# Key points (hash-bucket pruning)

_Pins = dict[str, list[object]] | None  # None: the expression is never true


def _union(a: list[object], b: Iterable[object]) -> list[object]:
    out = list(a)
    for v in b:
        if not any(_kind(v) == _kind(w) and v == w for w in out):
            out.append(v)
    return out


def _intersect(a: list[object], b: list[object]) -> list[object]:
    if any(not _comparable(x, y) for x in a for y in b):
        return _union(a, b)  # mixed literal types (unbound filter): stay conservative
    return [x for x in a if any(_in_match(x, [y]) for y in b)]


def _pins(expr: Expr) -> _Pins:
    """Per column, a finite superset of the values a row accepted by ``expr`` can have."""
    if isinstance(expr, AlwaysFalse):
        return None
    if isinstance(expr, Compare) and expr.op == "==":
        return {expr.column: [expr.value]}
    if isinstance(expr, In) and not expr.negated:
        return {expr.column: _union([], (v for v in expr.values if v is not None))}
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
        return {name: _union(vals, right[name]) for name, vals in left.items() if name in right}
    return {}


def key_points(expr: Expr, key_columns: Sequence[str], limit: int = 10000) -> list[tuple[object, ...]] | None:
    """Candidate key tuples if ``expr`` pins every key column to finitely many values, else None.

    Every row the filter accepts has its key in the result. Bind ``expr`` first so that the
    values have the key columns' types.
    """
    pins = _pins(_push_not(expr))
    if pins is None:
        return []
    if any(name not in pins for name in key_columns):
        return None
    candidates = [pins[name] for name in key_columns]
    if math.prod(len(c) for c in candidates) > limit:
        return None
    return list(itertools.product(*candidates))


# ---------------------------------------------------------------------------------------------
# Min/max statistics (row-group pruning)


@dataclass(frozen=True)
class ColumnStats:
    """Statistics of one column in a chunk of rows; None means unknown.

    ``min``/``max`` must bound every non-null, non-NaN value (they need not be exact); NaN
    values of float columns need not be reflected in them. ``num_values`` counts rows, nulls
    included (a Parquet row group's ``num_rows``, not ``Statistics.num_values``).
    """

    min: object = None
    max: object = None
    null_count: int | None = None
    num_values: int | None = None


def _range_outcomes(op: str, st: ColumnStats, value: object) -> tuple[bool, bool]:
    """(can be TRUE, can be FALSE) over the non-null values of a column for ``column op value``."""
    lo, hi = st.min, st.max
    if lo is None or hi is None or _is_nan(lo) or _is_nan(hi):
        return True, True
    if not (_comparable(lo, value) and _comparable(hi, value)):
        return True, True
    floaty = any(isinstance(v, float) for v in (lo, hi, value))  # unseen NaNs compare FALSE
    inside = _compare("<=", lo, value) is not False and _compare("<=", value, hi) is not False
    single = _compare("==", lo, hi) is not False and _compare("==", lo, value) is not False
    first = {
        "==": (inside, floaty or not single),
        "!=": (floaty or not single, inside),
        "<": (_compare("<", lo, value) is not False, floaty or _compare(">=", hi, value) is not False),
        "<=": (_compare("<=", lo, value) is not False, floaty or _compare(">", hi, value) is not False),
        ">": (_compare(">", hi, value) is not False, floaty or _compare("<=", lo, value) is not False),
        ">=": (_compare(">=", hi, value) is not False, floaty or _compare("<", lo, value) is not False),
    }
    return first[op]


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
    values = [v for v in expr.values if v is not None]
    has_null = len(values) < len(expr.values)
    if not expr.values:
        result = (False, any_rows)
    elif not values or not any_value:
        result = (False, False)
    else:
        can_true = any(_is_nan(v) or _range_outcomes("==", st, v)[0] for v in values)
        can_false = not has_null and all(_range_outcomes("==", st, v)[1] for v in values)
        result = (can_true, can_false)
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
        candidates = [v for v in expr.values if v is not None]
        found = _in_match(value, candidates)
        if found is None:
            return _ANY
        result3 = True if found else (None if len(candidates) < len(expr.values) else False)
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
