"""What a filter lets mere skip: the keys it pins (hash buckets) and the row groups its statistics exclude.

Partitions are pruned by evaluating the filter with the partition's values
(:func:`~mere.expr.evaluate.evaluate_constant`). Every answer here is conservative: a bucket or row group
is skipped only when no row in it can satisfy the filter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from mere.expr.evaluate import in_index
from mere.expr.literals import canonical, comparable, compare_values, is_nan, type_kind, value_kinds
from mere.expr.logic import push_not
from mere.expr.nodes import AlwaysFalse, AlwaysTrue, And, Compare, Expr, In, IsNull, Not, Or

# ---------------------------------------------------------------------------------------------
# Key points (hash-bucket pruning)

_PinSet = dict[object, object]  # (kind, value with NaN canonical) -> value: hashing keeps it linear
_Pins = dict[str, _PinSet] | None  # None: the expression is never true


def _pin_set(values: Collection[object]) -> _PinSet:
    kind_of = {t: type_kind(t) for t in set(map(type, values))}
    keys = map(canonical, values) if "float" in kind_of.values() else values
    return dict(zip(zip(map(kind_of.__getitem__, map(type, values)), keys), values))


def _intersect(a: _PinSet, b: _PinSet) -> _PinSet:
    if len(value_kinds(a.values()) | value_kinds(b.values())) > 1:
        return {**a, **b}  # mixed literal kinds (unbound filter): stay conservative
    return {key: value for key, value in a.items() if key in b}


def _pins(expr: Expr) -> _Pins:
    """Per column, a finite superset of the values a row accepted by ``expr`` can have."""
    if isinstance(expr, AlwaysFalse):
        return None
    if isinstance(expr, Compare) and expr.op == "==":
        return {expr.column: _pin_set((expr.value,))}
    if isinstance(expr, In) and not expr.negated:
        return {expr.column: _pin_set(in_index(expr).present)}
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
    pins = _pins(push_not(expr))
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
    return compare_values(op, a, b) is not False


# NaN literal: only NaN rows (which min/max never show) equal it; every other value is below it.
_NAN_OUTCOMES = {
    "==": (True, True), ">=": (True, True), "!=": (True, True), "<": (True, True),
    "<=": (True, False), ">": (False, True),
}  # fmt: skip


def _range_outcomes(op: str, st: ColumnStats, value: object) -> tuple[bool, bool]:
    """(can be TRUE, can be FALSE) over the non-null values of a column for ``column op value``."""
    if is_nan(value):
        return _NAN_OUTCOMES[op]
    lo, hi = st.min, st.max
    if lo is None or hi is None or is_nan(lo) or is_nan(hi):
        return True, True
    if not (comparable(lo, value) and comparable(hi, value)):
        return True, True
    nan_rows = any(isinstance(v, float) for v in (lo, hi, value))  # unseen NaNs sort above everything
    inside = _may("<=", lo, value) and _may("<=", value, hi)
    single = compare_values("==", lo, hi) is True and compare_values("==", lo, value) is True
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
    index = in_index(expr)
    if not expr.values:
        return False, any_rows
    if not index.present or not any_value:
        return False, False
    lo, hi = st.min, st.max
    if lo is None or hi is None or is_nan(lo) or is_nan(hi):
        return True, not index.has_null
    nan_rows = index.has_float or isinstance(lo, float) or isinstance(hi, float)
    can_true = index.has_nan or index.any_between(lo, hi)
    single = compare_values("==", lo, hi) is True and index.contains(lo) is True
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
