"""Counting merged rows without merging them: a key is a merged row exactly when its newest version is
not a delete marker (under every merge operator without ``sequence_by``: a delete forgets the key's
earlier versions, any other version leaves a row). Only key and operation columns are read, and no row is
copied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from mere.kernels import contiguous, group_starts, numpy_sortable_array, sort_indices
from mere.read.planner import FileTask
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec

__all__ = ["live_keys"]

# A sorted run of unique keys at least this many times the newer rows: those are searched in it.
SEARCH_RATIO = 2


def _ops(table: pa.Table) -> np.ndarray:
    if OP_COLUMN not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int8)
    return np.asarray(table.column(OP_COLUMN).to_numpy()).astype(np.int8, copy=False)


def live_keys(spec: TableSpec, parts: Sequence[tuple[FileTask, pa.Table]]) -> int:
    """How many keys of one key-range window (files' rows oldest file first, each file sorted by key)
    have a newest version that is not a delete marker. Tables without ``sequence_by`` only."""
    if not parts:
        return 0
    ops = np.concatenate([_ops(p) for _, p in parts])
    keys: list[Any] = []
    for c in spec.primary_key:
        arrays = [a for _, p in parts for a in p.column(c).chunks]
        as_np = [numpy_sortable_array(a) for a in arrays]
        if all(a is not None for a in as_np) and not any(a.null_count for a in arrays):
            keys.append(np.concatenate(as_np))  # type: ignore[arg-type]
        else:
            keys.append(pa.chunked_array(arrays, type=parts[0][1].column(c).type))
    n = len(ops)
    first = parts[0][1].num_rows if parts[0][0].content != "delete" else 0
    base = keys[0] if len(keys) == 1 and isinstance(keys[0], np.ndarray) else None
    if (
        base is not None
        and n > first >= SEARCH_RATIO * (n - first)
        and bool((base[1:first] > base[: first - 1]).all())
    ):
        # One big sorted run of unique keys (a compacted split) and newer rows: the newer rows' keys
        # are ranked among themselves and searched in the run; only they can change its keys' outcome.
        newer = base[first:]
        order = np.argsort(newer, kind="stable")
        ranked = newer[order]
        last = np.ones(len(ranked), dtype=bool)
        last[:-1] = ranked[1:] != ranked[:-1]
        alive_newer = int(np.count_nonzero(last & (ops[first:][order] != OP_DELETE)))
        distinct = ranked[last]
        at = np.searchsorted(base[:first], distinct)
        inside = at < first
        at = at[inside]
        at = at[base[:first][at] == distinct[inside]]
        alive_base = ops[:first] != OP_DELETE
        return int(np.count_nonzero(alive_base)) - int(np.count_nonzero(alive_base[at])) + alive_newer
    order = sort_indices(keys)
    sorted_keys = [
        k[order] if isinstance(k, np.ndarray) else contiguous(k).take(pa.array(order)) for k in keys
    ]
    starts = group_starts(sorted_keys, n)
    is_last = np.empty(n, dtype=bool)
    is_last[:-1] = starts[1:]
    is_last[-1] = True
    return int(np.count_nonzero(is_last & (ops[order] != OP_DELETE)))
