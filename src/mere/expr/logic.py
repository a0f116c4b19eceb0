"""The boolean structure of expressions: their atoms, exact negation, conjuncts and the columns they read."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from mere.expr.nodes import (
    BALANCED_FROM,
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
    combined,
)


def map_atoms(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """``expr`` with every atom (each node but And, Or and Not) replaced by ``fn(atom)``."""
    if isinstance(expr, And):
        return And(map_atoms(expr.left, fn), map_atoms(expr.right, fn))
    if isinstance(expr, Or):
        return Or(map_atoms(expr.left, fn), map_atoms(expr.right, fn))
    if isinstance(expr, Not):
        return Not(map_atoms(expr.operand, fn))
    return fn(expr)


def columns(expr: Expr) -> frozenset[str] | None:
    """Columns referenced by ``expr``; None when an opaque ArrowPredicate (or unread text) is inside."""
    if isinstance(expr, And | Or):
        left, right = columns(expr.left), columns(expr.right)
        return None if left is None or right is None else left | right
    if isinstance(expr, Not):
        return columns(expr.operand)
    if isinstance(expr, Compare | In | IsNull):
        return frozenset({expr.column})
    if isinstance(expr, ArrowPredicate | FilterText):
        return None
    if isinstance(expr, Sql):
        return expr.names
    return frozenset()


def negate(expr: Expr) -> Expr:
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
        return Or(negate(expr.left), negate(expr.right))
    if isinstance(expr, Or):
        return And(negate(expr.left), negate(expr.right))
    return Not(expr)


def push_not(expr: Expr) -> Expr:
    """Move negations down to the atoms where that is exact."""
    if isinstance(expr, And):
        return And(push_not(expr.left), push_not(expr.right))
    if isinstance(expr, Or):
        return Or(push_not(expr.left), push_not(expr.right))
    if isinstance(expr, Not):
        inner = push_not(expr.operand)
        negated = negate(inner)
        return push_not(negated) if isinstance(inner, And | Or) else negated
    return expr


def conjuncts(expr: Expr) -> list[Expr]:
    """Split ``expr`` into parts whose AND is equivalent (``NOT (a OR b)`` splits too)."""
    out: list[Expr] = []
    stack = [expr]
    while stack:  # no recursion: a chain of ANDs built by hand can be thousands deep
        item = stack.pop()
        if isinstance(item, And):
            stack.extend([item.right, item.left])
        elif isinstance(item, Not) and isinstance(item.operand, Or | Not):
            stack.append(negate(item.operand))
        elif not isinstance(item, AlwaysTrue):
            out.append(item)
    return out


def balanced(expr: Expr) -> Expr:
    """``expr`` with each long chain of one of AND and OR rebuilt as a balanced tree (see
    :func:`combined`): a chain built by hand (``reduce(operator.or_, ...)``) is as deep as it is long."""
    if isinstance(expr, Not):
        inner = balanced(expr.operand)
        return expr if inner is expr.operand else Not(inner)
    if not isinstance(expr, And | Or):
        return expr
    kind = type(expr)
    terms: list[Expr] = []
    stack: list[Expr] = [expr]
    while stack:  # the chain's terms in order, without recursion
        item = stack.pop()
        if type(item) is kind:
            stack.extend([item.right, item.left])
        else:
            terms.append(item)
    if len(terms) <= BALANCED_FROM and not any(isinstance(t, And | Or | Not) for t in terms):
        return expr
    return combined([balanced(t) for t in terms], kind)


def conjunction(parts: Sequence[Expr]) -> Expr:
    """AND the parts together (see :func:`combined`); AlwaysTrue for none."""
    kept = [p for p in parts if not isinstance(p, AlwaysTrue)]
    if not kept:
        return AlwaysTrue()
    return combined(kept, And)


def split_by_columns(expr: Expr, allowed: Collection[str]) -> tuple[Expr, Expr]:
    """Split into (conjuncts using only ``allowed`` columns, the rest)."""
    inside: list[Expr] = []
    rest: list[Expr] = []
    allowed_set = frozenset(allowed)
    for part in conjuncts(expr):
        cols = columns(part)
        (inside if cols is not None and cols <= allowed_set else rest).append(part)
    return conjunction(inside), conjunction(rest)
