"""NumPy helpers shared by the read, write and io layers."""

from __future__ import annotations

from typing import Literal, overload

import numpy as np


@overload
def sorted_unique(values: np.ndarray, return_inverse: Literal[False] = False) -> np.ndarray: ...
@overload
def sorted_unique(values: np.ndarray, return_inverse: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...
def sorted_unique(
    values: np.ndarray, return_inverse: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``np.unique`` by sorting: NumPy 2.3+ finds unique values of many distinct integers by hashing,
    which took 0.9 s for 1M random int64 here against 0.05 s for a sort."""
    values = np.asarray(values).ravel()
    order = np.argsort(values, kind="stable") if return_inverse else None
    ranked = np.sort(values) if order is None else values[order]
    first = np.ones(len(ranked), dtype=bool)
    if len(ranked) > 1:
        first[1:] = ranked[1:] != ranked[:-1]
        if ranked.dtype.kind in "fc":  # NaNs sort last and count once, as in np.unique
            first[1:] &= ~(np.isnan(ranked[1:]) & np.isnan(ranked[:-1]))
    if order is None:
        return ranked[first]
    inverse = np.empty(len(ranked), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ranked[first], inverse
