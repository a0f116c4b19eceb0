"""The reader's newest-wins merge: which stored rows of a split survive when every column's merge operator
is ``last`` (the general merge of versions is :func:`mere.kernels.reduce_versions`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from mere.kernels import contiguous, group_starts, sort_indices
from mere.spec import OP_DELETE

# A run this many times larger than the newer rows of a window is marked by searching its sorted keys, not
# sorted again with them.
SEARCH_RATIO = 8


def newest_wins(
    keys: Sequence[np.ndarray | pa.Array | pa.ChunkedArray], ops: np.ndarray, first: int
) -> np.ndarray:
    """Which rows survive a newest-wins merge: rows are files' rows concatenated oldest file first (each
    file sorted by key), ``ops`` their operations, ``first`` the row count of the oldest file. A row wins
    when no later row has its key and it is not a delete marker."""
    n = len(ops)
    winner = np.empty(n, dtype=bool)
    base = keys[0] if len(keys) == 1 else None
    if (
        isinstance(base, np.ndarray)
        and np.issubdtype(base.dtype, np.integer)
        and first >= SEARCH_RATIO * (n - first)
        and n > first
        and bool((base[1:first] > base[: first - 1]).all())
    ):
        # One big sorted run of unique keys (a compacted split) and a few newer rows: the newer rows are
        # merged among themselves, and each of their keys strikes out the base row holding it.
        newer = base[first:]
        order = np.argsort(newer, kind="stable")
        ranked = newer[order]
        last = np.ones(len(ranked), dtype=bool)
        last[:-1] = ranked[1:] != ranked[:-1]
        winner[first:][order] = last & (ops[first:][order] != OP_DELETE)
        old = base[:first]
        at = np.searchsorted(old, ranked)  # ascending needles walk the base in order (cache-friendly)
        inside = at < first
        at = at[inside]
        winner[:first] = ops[:first] != OP_DELETE
        winner[at[old[at] == ranked[inside]]] = False
        return winner
    order = sort_indices(keys)
    sorted_keys = [
        k[order] if isinstance(k, np.ndarray) else contiguous(k).take(pa.array(order)) for k in keys
    ]
    starts = group_starts(sorted_keys, n)
    is_last = np.empty(n, dtype=bool)
    is_last[:-1] = starts[1:]
    is_last[-1:] = True
    winner[order] = is_last & (ops[order] != OP_DELETE)
    return winner
