"""Binding an expression to a schema: columns checked, literals cast to their columns' types."""

from __future__ import annotations

import pyarrow as pa

from mere.errors import FilterError
from mere.expr.literals import Gap, Span, bind_scalar, bind_values
from mere.expr.logic import map_atoms
from mere.expr.nodes import And, Compare, CompareOp, Expr, FilterText, In, IsNull, Or, Sql
from mere.expr.parse import parse
from mere.lang.lower import lower_predicate


def _never(column: str) -> Expr:
    """FALSE for every non-null value, NULL for NULL: ``x = v`` where v cannot be a value of x."""
    return And(In(column, (None,)), IsNull(column))


def _always(column: str) -> Expr:
    """TRUE for every non-null value, NULL for NULL: ``x != v`` where v cannot be a value of x."""
    return Or(IsNull(column, negated=True), In(column, (None,)))


def _compare_gap(op: CompareOp, column: str, gap: Gap) -> Expr:
    """``column op literal`` for a literal the column cannot hold, as an exactly equivalent atom."""
    if op == "==":
        return _never(column)
    if op == "!=":
        return _always(column)
    if op in ("<", "<="):
        return _never(column) if gap.below is None else Compare("<=", column, gap.below)
    return _never(column) if gap.above is None else Compare(">=", column, gap.above)


def _compare_span(op: CompareOp, column: str, span: Span) -> Expr:
    """``column op literal`` for a literal that every column value from ``span.low`` to ``span.high``
    equals, as an exactly equivalent atom."""
    if op == "==":
        return And(Compare(">=", column, span.low), Compare("<=", column, span.high))
    if op == "!=":
        return Or(Compare("<", column, span.low), Compare(">", column, span.high))
    return Compare(op, column, span.low if op in ("<", ">=") else span.high)


def _in_spans(column: str, values: tuple[object, ...], negated: bool) -> Expr:
    """``column [NOT] IN values`` where some values are Spans: the plain values' IN, then each Span's
    range (OR; AND of the outsides when negated), which keeps SQL's NULL rules."""
    plain = tuple(v for v in values if not isinstance(v, Span))
    terms: list[Expr] = [In(column, plain, negated)] if plain else []
    terms.extend(_compare_span("!=" if negated else "==", column, v) for v in values if isinstance(v, Span))
    combined = terms[0]
    for term in terms[1:]:
        combined = And(combined, term) if negated else Or(combined, term)
    return combined


def bind(expr: Expr, schema: pa.Schema) -> Expr:
    """Check columns against ``schema`` and cast every literal to its column's type.

    Numbers keep their exact value on integer and decimal columns: a comparison with one the
    column type cannot hold becomes the exactly equivalent comparison (``i < 1.5`` becomes
    ``i <= 1``, ``i = 1.5`` becomes FALSE for non-null ``i`` and NULL for NULL, written
    ``(i IN (NULL) AND i IS NULL)``), and IN lists lose the values no row can equal. A float (double)
    literal compares as SQL compares a column with a double: the column value converted to a double
    (``i64 = 1.8446744073709552e19`` holds for every value that converts to it). On float columns
    integer and decimal literals become the nearest value of the column's float type; a double a
    float32 column cannot hold is such a gap (``f32 = 1e-1`` is FALSE). A literal of the
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
            value = bind_scalar(e.value, e.column, field_type(e.column))
            if isinstance(value, Gap):
                return _compare_gap(e.op, e.column, value)
            if isinstance(value, Span):
                return _compare_span(e.op, e.column, value)
            return Compare(e.op, e.column, value)
        if isinstance(e, In):
            bound = bind_values(e.values, e.column, field_type(e.column))
            if not any(isinstance(v, Gap | Span) for v in bound):
                return In(e.column, tuple(bound), e.negated)
            kept = tuple(v for v in bound if not isinstance(v, Gap))  # values no row can equal
            if any(isinstance(v, Span) for v in kept):
                return _in_spans(e.column, kept, e.negated)
            if any(v is not None for v in kept):
                return In(e.column, kept, e.negated)
            if kept:  # only NULL left: NULL for every row, negated or not
                return In(e.column, (None,), e.negated)
            return _always(e.column) if e.negated else _never(e.column)
        if isinstance(e, IsNull):
            field_type(e.column)
        if isinstance(e, Sql):
            arrow, names = lower_predicate(e.text, schema)
            return Sql(e.text, arrow, names)
        if isinstance(e, FilterText):
            return bind(parse(e.text), schema)
        return e

    return map_atoms(expr, bind_atom)
