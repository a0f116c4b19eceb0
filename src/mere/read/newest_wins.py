"""The reader's newest-wins merge: which stored rows of a split survive when every column's merge operator
is ``last`` (the general merge of versions is :func:`mere.kernels.reduce_versions`).

Without ``sequence_by`` the newest file holding a key wins. With it, the version with the highest
sequence wins, and files (commit order), then rows, decide only between equal sequences
(:func:`mere.kernels.last_by_sequence`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from mere.kernels import contiguous, group_starts, last_by_sequence, sort_indices
from mere.spec import OP_DELETE, OP_PUT

# A run this many times larger than the newer rows of a window is marked by searching its sorted keys, not
# sorted again with them.
SEARCH_RATIO = 8

Column: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray


def newest_wins(
    keys: Sequence[Column], ops: np.ndarray, first: int, sequence: Sequence[Column] = ()
) -> np.ndarray:
    """Which rows survive a newest-wins merge: rows are files' rows concatenated oldest file first (each
    file sorted by key), ``ops`` their operations, ``first`` the row count of the oldest file. A row wins
    when no later row has its key and it is not a delete marker; with ``sequence`` (the sequence columns
    of the rows, no NULLs), when no row of its key has a higher sequence, nor an equal one later."""
    n = len(ops)
    winner = np.empty(n, dtype=bool)
    base = keys[0] if len(keys) == 1 else None
    by_search = not sequence or (len(sequence) == 1 and isinstance(sequence[0], np.ndarray))
    if (
        by_search
        and isinstance(base, np.ndarray)
        and np.issubdtype(base.dtype, np.integer)
        and first >= SEARCH_RATIO * (n - first)
        and n > first
        and bool((base[1:first] > base[: first - 1]).all())
    ):
        # One big sorted run of unique keys (a compacted split) and a few newer rows: the newer rows are
        # merged among themselves, and each of their keys strikes out the base row holding it (with a
        # sequence: the lower of the two versions).
        newer = base[first:]
        order = np.argsort(newer, kind="stable")
        ranked = newer[order]
        last = np.ones(len(ranked), dtype=bool)
        last[:-1] = ranked[1:] != ranked[:-1]
        seq = None
        if sequence:
            seq = sequence[0]
            assert isinstance(seq, np.ndarray)
            starts = np.ones(len(ranked), dtype=bool)
            starts[1:] = last[:-1]
            last = np.zeros(len(ranked), dtype=bool)
            last[last_by_sequence(starts, [seq[first:][order]])] = True
        winner[first:][order] = last & (ops[first:][order] != OP_DELETE)
        old = base[:first]
        at = np.searchsorted(old, ranked)  # ascending needles walk the base in order (cache-friendly)
        inside = at < first
        at, hit = at[inside], np.flatnonzero(inside)
        found = old[at] == ranked[inside]
        at, hit = at[found], hit[found]
        winner[:first] = ops[:first] != OP_DELETE
        if seq is None:
            winner[at] = False
        else:
            # Each key's newer winner against its base row: the base row stays when its sequence is
            # higher (an equal one loses to the newer file).
            mine = last[hit]
            at, hit = at[mine], hit[mine]
            older_wins = seq[:first][at] > seq[first:][order[hit]]
            winner[at[~older_wins]] = False
            winner[first + order[hit[older_wins]]] = False
        return winner
    order = sort_indices(keys)
    sorted_keys = [
        k[order] if isinstance(k, np.ndarray) else contiguous(k).take(pa.array(order)) for k in keys
    ]
    starts = group_starts(sorted_keys, n)
    is_last = np.zeros(n, dtype=bool)
    if sequence:
        taken = pa.array(order)
        in_order = [s[order] if isinstance(s, np.ndarray) else contiguous(s).take(taken) for s in sequence]
        is_last[last_by_sequence(starts, in_order)] = True
    else:
        is_last[:-1] = starts[1:]
        is_last[-1:] = True
    winner[order] = is_last & (ops[order] != OP_DELETE)
    return winner


def first_wins(keys: Sequence[Column], ops: np.ndarray, sequence: Sequence[Column] = ()) -> np.ndarray:
    """Which rows survive a ``first_row`` merge (the mirror of :func:`newest_wins`; rows as there): each
    key's first version wins, in commit then row order, or (with ``sequence``) its version of lowest
    sequence (commit order, then row order, on ties). A PUT (a row an UPDATE or MERGE replaced) forgets the
    versions before it, so the last PUT of a key wins where it has one, and a delete marker (compaction keeps one where a PUT
    reset a key of a table with ``sequence_by``) hands the key to the version after it."""
    n = len(ops)
    winner = np.zeros(n, dtype=bool)
    if n == 0:
        return winner
    order = sort_indices([*keys, *sequence])
    sorted_keys = [
        k[order] if isinstance(k, np.ndarray) else contiguous(k).take(pa.array(order)) for k in keys
    ]
    starts = group_starts(sorted_keys, n)
    pos = np.arange(n, dtype=np.int64)
    sorted_ops = ops[order]
    reset = np.where(starts | (sorted_ops == OP_PUT), pos, -1)
    # A delete marker (a compaction's record of a reset) hands the key to the version after it.
    reset[sorted_ops == OP_DELETE] = pos[sorted_ops == OP_DELETE] + 1
    start_pos = np.flatnonzero(starts)
    first = np.maximum.reduceat(reset, start_pos)
    ends = np.append(start_pos[1:], n)
    first = first[first < ends]
    winner[order[first]] = True
    return winner
