"""Filters as users give them (text, expressions, Arrow expressions) read into expressions.

This is where a table takes a filter: text is parsed by the SQL front end (:mod:`mere.lang`), including
the text an expression was combined with (``(col("a") > 1) & "b = 2"``, a :class:`FilterText`).
"""

from __future__ import annotations

import pyarrow.compute as pc

from mere.errors import FilterError
from mere.expr.logic import balanced, map_atoms
from mere.expr.nodes import AlwaysTrue, And, ArrowPredicate, Expr, FilterText, Not, Or
from mere.lang.lower import parse_filter


def parse(text: str) -> Expr:
    """Parse SQL filter text (see :mod:`mere.expr`) into an :class:`Expr`."""
    return parse_filter(text)


def _has_text(expr: Expr) -> bool:
    if isinstance(expr, And | Or):
        return _has_text(expr.left) or _has_text(expr.right)
    if isinstance(expr, Not):
        return _has_text(expr.operand)
    return isinstance(expr, FilterText)


def read_text(expr: Expr) -> Expr:
    """``expr`` with its :class:`FilterText` parts parsed; ``expr`` itself when it has none."""
    if not _has_text(expr):
        return expr
    return map_atoms(expr, lambda e: parse(e.text) if isinstance(e, FilterText) else e)


def to_expr(value: str | Expr | pc.Expression | None) -> Expr:
    """Normalise a user filter: text is parsed, Arrow expressions are wrapped, None accepts all."""
    if value is None:
        return AlwaysTrue()
    try:
        if isinstance(value, Expr):
            return read_text(balanced(value))
        if isinstance(value, str):
            return parse(value)
    except RecursionError:  # parentheses or NOTs nested hundreds deep
        raise FilterError(
            "the filter nests too deep to read (hundreds of levels of parentheses or NOT)"
        ) from None
    if isinstance(value, pc.Expression):
        return ArrowPredicate(value)
    raise FilterError(
        f"a filter must be a str, Expr or pyarrow.compute.Expression, got {type(value).__name__}"
    )
