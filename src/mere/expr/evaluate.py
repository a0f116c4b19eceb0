"""Evaluation in Python: IN lists' lookups, and filters evaluated with constant column values.

Values compare as in :func:`~mere.expr.literals.compare_values`; a comparison whose outcome Python cannot
know exactly (values of different kinds, an integer a float comparison would round) counts as unknown.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from mere.expr.literals import canonical, compare_values, is_nan, value_kind, value_kinds
from mere.expr.nodes import AlwaysFalse, AlwaysTrue, And, Compare, Expr, In, IsNull, Not, Or


def _in_match(value: object, candidates: Iterable[object]) -> bool | None:
    """Whether ``value`` equals one of the non-null candidates; None if unknown (one value at a time)."""
    unknown = False
    for c in candidates:
        same = compare_values("==", value, c)
        if same:
            return True
        unknown = unknown or same is None
    return None if unknown else False


class InIndex:
    """Lookup structures for the values of one In node, built once per node on demand (see :func:`in_index`)."""

    def __init__(self, values: tuple[object, ...]) -> None:
        self.has_null = None in values
        self.present = tuple(v for v in values if v is not None) if self.has_null else values
        self.types = set(map(type, self.present))
        self.has_float = any(issubclass(t, float) for t in self.types)
        self.has_nan = self.has_float and any(is_nan(v) for v in self.present)

    @functools.cached_property
    def kinds(self) -> frozenset[str]:
        """The kinds of the non-null values."""
        return value_kinds(self.present)

    @functools.cached_property
    def lookup(self) -> frozenset[object] | None:
        """Canonical values for hash lookups; None when a value is unhashable."""
        try:
            if self.has_nan:
                return frozenset(map(canonical, self.present))
            return frozenset(self.present)
        except TypeError:
            return None

    @functools.cached_property
    def ordered(self) -> list[Any] | None:
        """The non-NaN values in ascending order; None unless they are all of one kind."""
        if len(self.kinds) != 1:
            return None
        numbers: Sequence[Any] = [v for v in self.present if not is_nan(v)] if self.has_nan else self.present
        try:
            return sorted(numbers)
        except TypeError:
            return None

    def contains(self, value: object) -> bool | None:
        """Whether non-null ``value`` equals a candidate (NaN equals NaN); None if unknown."""
        lookup = self.lookup
        if lookup is not None and self.kinds == {value_kind(value)}:
            return canonical(value) in lookup
        return _in_match(value, self.present)

    def any_between(self, lo: object, hi: object) -> bool:
        """Whether some non-NaN candidate may lie in ``[lo, hi]`` (True when that is unclear)."""
        ordered = self.ordered
        if ordered is not None and self.kinds == {value_kind(lo)} == {value_kind(hi)}:
            try:
                i = bisect.bisect_left(ordered, cast(Any, lo))
                return i < len(ordered) and compare_values("<=", ordered[i], hi) is not False
            except TypeError:
                pass
        return any(
            compare_values("<=", lo, v) is not False and compare_values("<=", v, hi) is not False
            for v in self.present
            if not is_nan(v)
        )


def in_index(expr: In) -> InIndex:
    """The lookup structures of ``expr``'s values, cached on the node."""
    index = expr.__dict__.get("_index")
    if index is None:
        index = InIndex(expr.values)
        object.__setattr__(expr, "_index", index)  # frozen node: a cache, not part of its value
    return cast(InIndex, index)


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
        result = compare_values(expr.op, value, expr.value)
        return _ANY if result is None else frozenset({result})
    if not expr.values:
        result3: bool | None = False
    elif value is None:
        result3 = None
    else:
        index = in_index(expr)
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
