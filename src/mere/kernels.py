"""Vectorised kernels over key columns, shared by the write path, the read path and table operations.

- sort orders and groups of equal keys (:func:`sort_indices`, :func:`group_starts`), with key columns as
  NumPy values where they sort as Arrow sorts them (:func:`numpy_sortable`, :func:`integer_keys`);
- key tuples matched against others (:class:`KeySet`, :func:`key_positions`);
- the merge of a key's versions (:func:`reduce_versions`): input is a table of versions sorted by key,
  oldest first within a key. Each version carries an operation: MERGE combines with the key's state
  through the merge operators, DELETE clears it, PUT clears it and then merges. The same reduction serves
  the writer (duplicate keys inside a batch), the reader (versions from several files) and compaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.arrays import sorted_unique
from mere.errors import SumOverflow
from mere.spec import OP_COLUMN, OP_DELETE, OP_MERGE, OP_PUT, MergeOperator, TableSpec


def operation_codes(table: pa.Table) -> np.ndarray:
    """Each stored version's operation (``OP_*``, int8) from the operation column; a table read without
    that column (its files hold no delete marker) holds merges."""
    if OP_COLUMN not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int8)
    chunks = [plain_values(c) for c in table.column(OP_COLUMN).chunks]
    if len(chunks) == 1:
        return chunks[0].astype(np.int8, copy=False)
    return np.concatenate(chunks).astype(np.int8, copy=False) if chunks else np.zeros(0, dtype=np.int8)


def plain_values(arr: pa.Array) -> np.ndarray:
    """An array's values as NumPy's: numbers without NULL zero-copy from their data buffer, booleans without
    NULL unpacked from their bits, anything else through ``to_numpy``. Arrow's own ``to_numpy`` first
    imports pandas (a few hundred milliseconds of a fresh process that never uses it: a count, a CLI
    call, a Spark worker's first task)."""
    kind = arr.type
    if not arr.null_count and pa.types.is_boolean(kind):
        if not len(arr):  # an empty array may come without a data buffer
            return np.zeros(0, dtype=np.bool_)
        first, skip = divmod(arr.offset, 8)
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[first : first + (skip + len(arr) + 7) // 8]
        return np.unpackbits(bits, bitorder="little")[skip : skip + len(arr)].view(np.bool_)
    if arr.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return np.asarray(arr.to_numpy(zero_copy_only=False))
    dtype = np.dtype(kind.to_pandas_dtype())  # NumPy's type of the same width (pandas not needed)
    if not len(arr):  # an empty array may come without a data buffer
        return np.empty(0, dtype=dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def arrow_numbers(values: np.ndarray) -> pa.Array:
    """A 1-D NumPy array of numbers as an Arrow array without NULLs, zero-copy where it is contiguous
    (``pa.array`` of a NumPy array imports pandas first: see :func:`plain_values`)."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind not in "iuf" or values.ndim != 1:
        return pa.array(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def numpy_sortable_array(arr: pa.Array) -> np.ndarray | None:
    """An array's values as NumPy values that sort as Arrow sorts them (numbers, dates, timestamps,
    booleans), or None; NULLs are not looked at (callers check them)."""
    t = arr.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return plain_values(arr)
    if pa.types.is_date32(t):
        return plain_values(arr.view(pa.int32()))
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        return plain_values(arr.view(pa.int64()))
    if pa.types.is_boolean(t):
        return plain_values(arr).astype(np.int8)
    return None


def pooled_concatenate(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The arrays end to end, as a writable array in Arrow's memory pool rather than NumPy's: a big
    NumPy allocation is fresh memory each time (faulted in page by page, or stalled compacting huge
    pages), while the pool hands back what the previous window freed."""
    dtype = arrays[0].dtype
    n = sum(len(a) for a in arrays)
    out = np.frombuffer(pa.allocate_buffer(max(n, 1) * dtype.itemsize), dtype=dtype)[:n]
    np.concatenate(arrays, out=out)
    return out


def numpy_sortable(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A column's values as NumPy values that sort as Arrow sorts them (numbers, dates, timestamps,
    booleans without NULLs), or None."""
    return None if column.null_count else numpy_sortable_array(contiguous(column))


def integer_keys(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A key column as int64 NumPy values when its type is integer-like (integers, dates, timestamps) and
    it holds no null: equal keys give equal values, so keys can be matched by a sorted search."""
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind)):
        return None
    if column.null_count:
        return None
    values = numpy_sortable_array(contiguous(column))
    return None if values is None else values.astype(np.int64, copy=False)


class KeySet:
    """Key tuples to test rows against: a semi-join on the key columns alone (Arrow's joins cannot carry
    nested columns), built once and probed many times. One integer-like key: a sorted search in NumPy;
    others: a join of the key columns and row numbers."""

    def __init__(self, wanted: pa.Table, keys: Sequence[str]) -> None:
        self.keys = list(keys)
        self.wanted = wanted.select(self.keys)
        found = integer_keys(self.wanted.column(0)) if len(self.keys) == 1 else None
        self.sorted = None if found is None else sorted_unique(found)
        self._unique: pa.Table | None = None

    @property
    def unique(self) -> pa.Table:
        """The distinct key tuples, as a table of the key columns."""
        if self._unique is None:
            self._unique = self.wanted.group_by(self.keys, use_threads=False).aggregate([])
        return self._unique

    def contains(self, rows: pa.Table) -> np.ndarray:
        """Which of ``rows`` hold a key of the set (a NULL key matches nothing)."""
        if self.sorted is not None:
            mine = integer_keys(rows.column(self.keys[0]))
            if mine is not None:
                if not len(self.sorted):
                    return np.zeros(len(mine), dtype=bool)
                if len(self.sorted) < len(mine) and len(mine) > 1 and (mine[1:] > mine[:-1]).all():
                    # Rows in key order (a merged split): look the fewer keys up among the rows.
                    at = np.searchsorted(mine, self.sorted)
                    inside = at < len(mine)
                    at = at[inside]
                    out = np.zeros(len(mine), dtype=bool)
                    out[at[mine[at] == self.sorted[inside]]] = True
                    return out
                at = np.minimum(np.searchsorted(self.sorted, mine), len(self.sorted) - 1)
                return np.asarray(self.sorted[at] == mine)
        row = "\x00row"
        numbered = rows.select(self.keys).append_column(
            row, pa.array(np.arange(rows.num_rows, dtype=np.int64))
        )
        hit = numbered.join(self.unique, self.keys, join_type="left semi", use_threads=False)
        out = np.zeros(rows.num_rows, dtype=bool)
        out[np.asarray(hit.column(row).to_numpy())] = True
        return out


def key_positions(
    left: pa.Table, right: pa.Table, keys: Sequence[str], right_unique: bool = False
) -> np.ndarray | None:
    """For each row of ``left``, the row of ``right`` with the same key, or -1. None when ``right``'s keys
    are not unique (not checked when the caller knows they are). One integer-like key: a sorted search in
    NumPy; others: a join of the key columns and row numbers."""
    if len(keys) == 1:
        mine, theirs = (integer_keys(t.column(keys[0])) for t in (left, right))
        if mine is not None and theirs is not None:
            out = np.full(len(mine), -1, dtype=np.int64)
            order = np.argsort(theirs, kind="stable")
            ranked = theirs[order]
            if not right_unique and len(ranked) > 1 and (ranked[1:] == ranked[:-1]).any():
                return None
            if len(ranked) and len(mine):
                at = np.minimum(np.searchsorted(ranked, mine), len(ranked) - 1)
                hit = ranked[at] == mine
                out[hit] = order[at[hit]]
            return out
    left_row, right_row = "\x00left", "\x00right"
    names = list(keys)
    other = right.select(names).append_column(right_row, pa.array(np.arange(right.num_rows, dtype=np.int64)))
    if not right_unique and other.group_by(names, use_threads=False).aggregate([]).num_rows < right.num_rows:
        return None
    numbered = left.select(names).append_column(left_row, pa.array(np.arange(left.num_rows, dtype=np.int64)))
    hit = numbered.join(other, names, join_type="inner", use_threads=False)
    out = np.full(left.num_rows, -1, dtype=np.int64)
    out[np.asarray(hit.column(left_row).to_numpy())] = np.asarray(hit.column(right_row).to_numpy())
    return out


def contiguous(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array (chunks combined only when there are several)."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def sort_indices(columns: Sequence[pa.Array | pa.ChunkedArray | np.ndarray]) -> np.ndarray:
    """Stable ascending sort order over several columns (first column most significant)."""
    arrays = [c if isinstance(c, np.ndarray) else contiguous(c) for c in columns]
    as_numpy = [a if isinstance(a, np.ndarray) else numpy_sortable_array(a) for a in arrays]
    numeric = [a for a in as_numpy if a is not None]
    if len(numeric) == len(as_numpy):
        if len(numeric) == 1:
            return np.argsort(numeric[0], kind="stable")
        return np.lexsort(numeric[::-1])
    table = pa.table(
        {f"c{i}": (arrow_numbers(a) if isinstance(a, np.ndarray) else a) for i, a in enumerate(arrays)}
    )
    order = pc.sort_indices(table, sort_keys=[(f"c{i}", "ascending") for i in range(len(arrays))])
    return plain_values(order)


def group_starts(columns: Sequence[pa.Array | pa.ChunkedArray | np.ndarray], n: int) -> np.ndarray:
    """For rows already sorted by these columns: True where a new group of equal values begins."""
    starts = np.zeros(n, dtype=bool)
    if n == 0:
        return starts
    starts[0] = True
    for c in columns:
        if isinstance(c, np.ndarray):
            starts[1:] |= c[1:] != c[:-1]
            continue
        arr = contiguous(c)
        as_np = numpy_sortable_array(arr)
        if as_np is not None:
            starts[1:] |= as_np[1:] != as_np[:-1]
        else:
            ne = pc.not_equal(arr.slice(1), arr.slice(0, n - 1))
            starts[1:] |= plain_values(ne)
    return starts


def last_by_sequence(
    starts: np.ndarray, sequence: Sequence[pa.Array | pa.ChunkedArray | np.ndarray]
) -> np.ndarray:
    """The winner of each key: rows are sorted by key, older versions first within a key (a stable sort
    of rows concatenated oldest first), ``starts`` marks where each key begins, and ``sequence`` holds the
    sequence columns in that row order (no NULLs). Returns, per key, the position of its row with the
    highest sequence tuple (compared column by column), the last of them on ties: commit order, then row
    order, decides between equal sequences.

    Versions mostly arrive in sequence order: where a key's sequences never decrease from one version to
    the next, its last row wins, and only the keys holding a decrease are settled (one integer-like
    sequence column: a group maximum, then the last row reaching it; others: a stable sort of the group
    number and the sequence columns)."""
    n = len(starts)
    if n == 0:
        return np.flatnonzero(starts)
    ends = np.empty(n, dtype=bool)
    ends[:-1] = starts[1:]
    ends[-1] = True
    columns: list[np.ndarray | pa.Array] = []
    for c in sequence:
        values = c if isinstance(c, np.ndarray) else numpy_sortable(c)
        columns.append(contiguous(c) if values is None else values)
    down = np.flatnonzero(_decreases(columns, n) & ~starts[1:]) + 1  # rows below the one before
    winners = np.flatnonzero(ends)  # each key's last row
    if not len(down):
        return winners
    # The keys holding a decrease (a key's rows end at its winner's place), and their rows.
    owner = np.searchsorted(winners, down)  # ascending, as ``down`` is
    bad = owner[np.append(True, owner[1:] != owner[:-1])]
    last = winners[bad]
    first = np.where(bad > 0, winners[np.maximum(bad - 1, 0)] + 1, 0)
    sizes = last - first + 1
    rows = np.repeat(first - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()), dtype=np.int64)
    sub_starts = np.zeros(len(rows), dtype=bool)
    sub_starts[np.cumsum(sizes) - sizes] = True
    taken = pa.array(rows)
    picked = [c[rows] if isinstance(c, np.ndarray) else c.take(taken) for c in columns]
    winners[bad] = rows[_settled(sub_starts, picked)]
    return winners


def _decreases(columns: Sequence[np.ndarray | pa.Array], n: int) -> np.ndarray:
    """For rows ``1..n-1``: whether the row's sequence tuple is below the previous row's."""
    below = np.zeros(n - 1, dtype=bool)
    equal = np.ones(n - 1, dtype=bool)
    for c in columns:
        if isinstance(c, np.ndarray):
            before, after = c[:-1], c[1:]
            less, same = after < before, after == before
        else:
            before, after = c.slice(0, n - 1), c.slice(1)
            less = np.asarray(pc.less(after, before).to_numpy(zero_copy_only=False))
            same = np.asarray(pc.equal(after, before).to_numpy(zero_copy_only=False))
        below |= equal & less
        equal &= same
    return below


def _settled(starts: np.ndarray, columns: Sequence[np.ndarray | pa.Array]) -> np.ndarray:
    """:func:`last_by_sequence` of rows that are all to be settled by their sequence."""
    n = len(starts)
    start_pos = np.flatnonzero(starts)
    pos = np.arange(n, dtype=np.int64)
    group = np.cumsum(starts) - 1
    if len(columns) == 1 and isinstance(columns[0], np.ndarray):
        values = columns[0]
        best = np.maximum.reduceat(values, start_pos)
        reached = values == best[group]
        return np.asarray(np.maximum.reduceat(np.where(reached, pos, -1), start_pos))
    # The groups keep their places and sizes under a stable sort led by the group number: each group's
    # last row in that order is its winner.
    order = sort_indices([group, *columns])
    end_pos = np.append(start_pos[1:], n) - 1
    return np.asarray(order[end_pos])


def superseded(
    starts: np.ndarray, winners: np.ndarray, sequence: Sequence[pa.Array | pa.ChunkedArray | np.ndarray]
) -> np.ndarray:
    """Rows (sorted and grouped as for :func:`last_by_sequence`) whose sequence is lower than their key's
    winner's: versions a higher sequence replaced (equal sequences, replays of one event, are not)."""
    n = len(starts)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    group = np.cumsum(starts) - 1
    at = winners[group]
    for column in sequence:
        if isinstance(column, np.ndarray):
            out |= column != column[at]
            continue
        values = numpy_sortable(column)
        if values is not None:
            out |= values != values[at]
        else:
            whole = contiguous(column)
            out |= np.asarray(pc.not_equal(whole, whole.take(pa.array(at))).to_numpy(zero_copy_only=False))
    return out


def _pick(values: pa.Array, best: np.ndarray) -> pa.Array:
    """Take values[best], null where best < 0."""
    missing = best < 0
    idx = pa.array(np.where(missing, 0, best), mask=missing if missing.any() else None)
    return values.take(idx)


def _null_mask(values: pa.Array) -> np.ndarray:
    if values.null_count == 0:
        return np.zeros(len(values), dtype=bool)
    return np.asarray(values.is_null().to_numpy(zero_copy_only=False))


def _sum(
    values: pa.Array,
    valid: np.ndarray,
    start_pos: np.ndarray,
    name: str,
    versions: pa.Table,
    key_columns: Sequence[str],
) -> pa.Array:
    """Per-group sums of the valid values; integer sums that leave their type raise, naming the key."""
    counts = np.add.reduceat(valid.astype(np.int64), start_pos)
    raw = values.fill_null(0).to_numpy(zero_copy_only=False)
    # A missing value adds the identity: -0.0 for floats (0.0 would turn a sum of -0.0 into 0.0).
    picked = np.where(valid, raw, -0.0 if pa.types.is_floating(values.type) else 0)
    with np.errstate(
        over="ignore", invalid="ignore"
    ):  # floats: inf and NaN as IEEE says; int wrap is detected
        if not pa.types.is_integer(values.type):
            return pa.array(np.add.reduceat(picked, start_pos), type=values.type, mask=counts == 0)
        unsigned = pa.types.is_unsigned_integer(values.type)
        sums = np.add.reduceat(picked.astype(np.uint64 if unsigned else np.int64), start_pos)
        approx = np.add.reduceat(picked.astype(np.float64), start_pos)
    info = np.iinfo(values.type.to_pandas_dtype())
    # 64-bit sums wrap silently; a wrapped sum is ~2**64 away from the float estimate.
    bad = (np.abs(approx - sums.astype(np.float64)) > 2.0**62) | (sums > info.max)
    if not unsigned:
        bad |= sums < info.min
    if bad.any():
        row = int(start_pos[int(np.argmax(bad))])
        key = {c: versions.column(c)[row].as_py() for c in key_columns if c in versions.column_names}
        raise SumOverflow(f"merge operator 'sum' on column {name!r} overflows {values.type} for key {key}")
    return pa.array(sums, type=values.type, mask=counts == 0)


def group_extremes(values: pa.Array, valid: np.ndarray, group: np.ndarray, groups: int, how: str) -> pa.Array:
    """Per group (``group``: each value's group number, non-decreasing), the ``how`` (``min`` or ``max``)
    of its ``valid`` values (none NULL); NULL for groups without one."""
    return _aggregate(values, valid, group, groups, how)


def _aggregate(values: pa.Array, valid: np.ndarray, group: np.ndarray, groups: int, how: str) -> pa.Array:
    """Per group, the ``how`` (min or max) of the valid values; NULL for groups without one. Types that
    sort as NumPy values pick each group's position holding its extreme (floats: NaN only where every
    value is NaN, as Arrow's aggregates); others aggregate in Arrow the groups of several valid values."""
    rows = np.flatnonzero(valid)
    if not len(rows):
        return pa.nulls(groups, values.type)
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    owners = group[rows]
    best = np.full(groups, -1, dtype=np.int64)
    several = owners[1:] == owners[:-1]
    if not several.any():  # one valid version per group (most keys): no aggregate
        best[owners] = rows
        return _pick(values, best)
    taken = values.take(pa.array(rows))  # valid: no NULL, so NumPy keeps the exact type
    picked = numpy_sortable_array(taken)
    if picked is not None:
        starts = np.flatnonzero(np.append(True, ~several))
        floating = picked.dtype.kind == "f"
        reduce: Any
        if floating:
            reduce = np.fmax if how == "max" else np.fmin  # NaN loses to any number
        else:
            reduce = np.maximum if how == "max" else np.minimum
        extreme = reduce.reduceat(picked, starts)
        at = np.cumsum(np.append(True, ~several)) - 1
        hit = picked == extreme[at]
        if floating:
            hit |= np.isnan(picked) & np.isnan(extreme[at])
        best[owners[starts]] = np.maximum.reduceat(np.where(hit, rows, -1), starts)
        return _pick(values, best)
    # Groups of one valid value take it; only the others go through Arrow's hash aggregate.
    first = np.append(True, ~several)
    last = np.append(~several, True)
    alone = first & last
    best[owners[alone]] = rows[alone]
    many = ~alone
    table = pa.table({"g": pa.array(owners[many]), "v": taken.filter(pa.array(many))})
    result = table.group_by("g", use_threads=False).aggregate([("v", how)])
    found = np.asarray(result.column("g").to_numpy())
    # Positions into [values' rows..., aggregated values...]: one take over both.
    best[found] = len(values) + np.arange(len(found))
    both = pa.concat_arrays([values, contiguous(result.column(f"v_{how}")).cast(values.type)])
    return _pick(both, best)


def _best_by(
    valid: np.ndarray, group: np.ndarray, groups: int, sequence: pa.Array, arrival: np.ndarray | None
) -> np.ndarray:
    """Per group (``group``: each row's group number, non-decreasing), the position of its valid row with
    the highest ``sequence`` (on ties the latest in ``arrival``, or without it the last in row order), or
    -1."""
    rows = np.flatnonzero(valid)
    best = np.full(groups, -1, dtype=np.int64)
    if not len(rows):
        return best
    owner = group[rows]
    # (int64: sort orders may come as uint64, which -1 below would not fit)
    later = np.arange(len(rows)) if arrival is None else arrival[rows].astype(np.int64, copy=False)
    values = numpy_sortable_array(contiguous(sequence).take(pa.array(rows)))
    if values is not None and values.dtype.kind in "iub":  # no NaN: maxima by segment, no sort
        begins = np.concatenate([[True], owner[1:] != owner[:-1]])
        first, segment = np.flatnonzero(begins), np.cumsum(begins) - 1
        top = values == np.maximum.reduceat(values, first)[segment]
        latest = np.maximum.reduceat(np.where(top, later, -1), first)
        won = np.flatnonzero(top & (later == latest[segment]))  # one a segment: ``later`` is unique
        best[owner[first]] = rows[won]
        return best
    order = sort_indices([owner, sequence.take(pa.array(rows)), later])
    ranked = owner[order]
    last = np.ones(len(ranked), dtype=bool)
    last[:-1] = ranked[1:] != ranked[:-1]
    best[ranked[last]] = rows[order[last]]
    return best


def _deletes_last_among_equal(
    versions: pa.Table,
    op: np.ndarray,
    starts: np.ndarray,
    present: Mapping[str, np.ndarray] | None,
    sequence: str,
) -> tuple[pa.Table, np.ndarray, Mapping[str, np.ndarray] | None, np.ndarray | None]:
    """Versions (in sequence order) with each key's deletes after its other versions of equal sequence,
    and the positions they came from (None when none moved):
    under sequence groups a delete at sequence d removes every version up to d, whatever the commit
    order (a row at d committed after the delete would otherwise live while the delete clears the
    groups it carries at d, leaving NULLs even in NOT NULL columns)."""
    is_del = op == OP_DELETE
    if not is_del.any() or is_del.all():
        return versions, op, present, None
    seq = versions.column(sequence)
    changed = np.ones(len(op), dtype=bool)
    changed[1:] = ~np.asarray(pc.fill_null(pc.equal(seq[1:], seq[:-1]), False).to_numpy(zero_copy_only=False))
    runs = np.cumsum(changed | starts)
    order = np.lexsort((is_del, runs))  # stable: the order within deletes and within the others is kept
    if (order == np.arange(len(order))).all():
        return versions, op, present, None
    moved = pa.array(order)
    kept = None if present is None else {c: v[order] for c, v in present.items()}
    return versions.take(moved), op[order], kept, order


def reduce_versions(
    versions: pa.Table,
    op: np.ndarray,
    starts: np.ndarray,
    key_columns: Sequence[str],
    operators: Mapping[str, MergeOperator],
    present: Mapping[str, np.ndarray] | None = None,
    groups: Mapping[str, Sequence[str]] | None = None,
    sequence: str | None = None,
    puts_reset: bool = True,
    arrival: np.ndarray | None = None,
) -> tuple[pa.Table, np.ndarray]:
    """Combine each group of versions into one row.

    Returns the combined rows (key columns and every other column of ``versions``) and their
    operation: DELETE when the key ends deleted, PUT when an earlier state was cleared, else MERGE.
    ``present[c]`` marks the versions that carry column ``c`` at all (files written by partial upserts
    lack some columns); absent means every version carries it. ``groups`` (sequence groups: group
    sequence column -> its columns, of a table ordered by the ``sequence`` column): a group's columns and
    sequence come from the version carrying the group (its sequence column present and not NULL; for a
    ``last_non_null`` column alone in its group, its value not NULL too) with the highest group sequence
    (on ties the later to arrive: ``arrival`` holds each version's place in commit, then row, order; it
    must be given where the versions are in sequence order and groups can tie), among those whose group
    sequence is above the key's last delete (group sequences share the domain of ``sequence``), NULL if
    none (a fold keeps this exact: its row stands at its newest version's place in arrival order).
    Versions are then in sequence order and delete rows may carry groups (a tombstone keeps the groups
    its deleted key still holds).
    ``puts_reset`` False (tables with ``sequence_by`` other than ``first_row``): a PUT is one more
    version, not a reset (under sequences it may be older than versions committed before it).
    """
    if not puts_reset:
        op = np.where(op == OP_PUT, OP_MERGE, op).astype(np.int8)
    n = versions.num_rows
    start_pos = np.flatnonzero(starts)
    if n == 0:
        return versions, np.zeros(0, dtype=np.int8)
    if groups and sequence is not None:
        versions, op, present, moved = _deletes_last_among_equal(versions, op, starts, present, sequence)
        if moved is not None and arrival is not None:
            arrival = arrival[moved]
    end_pos = np.append(start_pos[1:], n) - 1
    pos = np.arange(n, dtype=np.int64)
    reset = np.full(n, -1, dtype=np.int64)
    reset[starts] = pos[starts]
    is_put = op == OP_PUT
    is_del = op == OP_DELETE
    reset[is_put] = pos[is_put]
    reset[is_del] = pos[is_del] + 1
    group = np.cumsum(starts) - 1
    live = pos >= np.maximum.reduceat(reset, start_pos)[group]  # at or after the key's last DELETE/PUT
    has_reset = np.maximum.reduceat((op != OP_MERGE).astype(np.int8), start_pos) > 0
    last_op = op[end_pos]
    out_op = np.where(last_op == OP_DELETE, OP_DELETE, np.where(has_reset, OP_PUT, OP_MERGE)).astype(np.int8)
    keys = len(start_pos)

    def carried(name: str) -> np.ndarray:
        valid: np.ndarray = live.copy()
        if present is not None and name in present:
            valid &= present[name]
        return valid

    grouped: dict[str, pa.Array] = {}
    above: pa.Array | None = None  # per version, its key's last delete's sequence
    if groups and sequence is not None:
        last_delete = np.maximum.reduceat(np.where(is_del, pos, -1), start_pos)
        deleted = (last_delete >= 0)[group]
        above = contiguous(versions.column(sequence)).take(pa.array(np.maximum(last_delete, 0)[group]))
    for seq, members in (groups or {}).items():
        seq_values = contiguous(versions.column(seq))
        valid = (
            present[seq].copy() if present is not None and seq in present else np.ones(n, bool)
        ) & ~_null_mask(seq_values)
        if above is None:
            valid &= live
        else:
            newer = pc.greater(seq_values, above.cast(seq_values.type)).fill_null(False)
            valid &= ~deleted | np.asarray(newer.to_numpy(zero_copy_only=False))
        if len(members) == 1 and operators.get(members[0], MergeOperator()).name == "last_non_null":
            name = members[0]
            valid &= ~_null_mask(contiguous(versions.column(name)))
            if present is not None and name in present:
                valid &= present[name]
        best = _best_by(valid, group, keys, seq_values, arrival)
        for name in (seq, *members):
            if name in versions.column_names:
                grouped[name] = _pick(contiguous(versions.column(name)), best)

    columns: dict[str, pa.Array] = {}
    for name in versions.column_names:
        values = contiguous(versions.column(name))
        if name in key_columns:
            columns[name] = values.take(pa.array(start_pos))
            continue
        if name in grouped:
            columns[name] = grouped[name]
            continue
        valid = carried(name)
        operator = operators.get(name, MergeOperator())
        if operator.name == "last":
            columns[name] = _pick(values, np.maximum.reduceat(np.where(valid, pos, -1), start_pos))
            continue
        if operator.name == "first":  # first_row: the first live version, NULLs included
            first = np.minimum.reduceat(np.where(valid, pos, n), start_pos)
            columns[name] = _pick(values, np.where(first < n, first, -1))
            continue
        valid &= ~_null_mask(values)
        if operator.name == "last_non_null":
            columns[name] = _pick(values, np.maximum.reduceat(np.where(valid, pos, -1), start_pos))
        elif operator.name in ("max", "bool_or"):
            columns[name] = _aggregate(values, valid, group, keys, "max")
        elif operator.name in ("min", "bool_and"):
            columns[name] = _aggregate(values, valid, group, keys, "min")
        elif operator.name == "sum":
            columns[name] = _sum(values, valid, start_pos, name, versions, key_columns)
        elif operator.name == "concat":
            if pa.types.is_dictionary(values.type):
                values = values.cast(values.type.value_type)
            picked = values.filter(pa.array(valid))
            counts = np.add.reduceat(valid.astype(np.int64), start_pos)
            offsets = np.concatenate([[0], np.cumsum(counts)])
            lists = (pa.LargeListArray if len(picked) > np.iinfo(np.int32).max else pa.ListArray).from_arrays(
                pa.array(offsets, pa.int64() if len(picked) > np.iinfo(np.int32).max else pa.int32()), picked
            )
            joined = pc.binary_join(lists, pa.scalar(operator.separator, values.type))
            columns[name] = pc.if_else(pa.array(counts == 0), pa.nulls(len(joined), joined.type), joined)
        else:  # pragma: no cover - guarded by TableSpec
            raise AssertionError(operator.name)
    out = pa.table(
        [
            columns[f.name].cast(f.type) if columns[f.name].type != f.type else columns[f.name]
            for f in versions.schema
        ],
        schema=versions.schema,
    )
    return out, out_op


def fold_sequenced(
    versions: pa.Table,
    op: np.ndarray,
    starts: np.ndarray,
    key_columns: Sequence[str],
    operators: Mapping[str, MergeOperator],
    present: Mapping[str, np.ndarray] | None = None,
    groups: Mapping[str, Sequence[str]] | None = None,
    sequence: str | None = None,
    puts_reset: bool = False,
    arrival: np.ndarray | None = None,
) -> tuple[np.ndarray, pa.Table, pa.Table, np.ndarray]:
    """Fold the versions of a table with ``sequence_by`` whose merge is not newest-wins, keeping what a
    version arriving later (with any sequence) still needs: ``versions`` are sorted by key, then by
    (sequence, commit order, row order); ``sequence`` is the ``sequence_by`` column where the table has
    sequence groups (see :func:`reduce_versions` for them and ``puts_reset``).

    Returns ``(at, tombstones, rows, dead)``: the positions of the versions that reset each key last (a
    delete, or with ``puts_reset`` a PUT: every version of lower sequence is gone), and those keys'
    tombstones (rows of every column: the reset's key and sequence; a deleted key's groups still above
    its delete; NULL elsewhere), to be kept as delete markers; the merged rows of the keys with live
    versions (stored as MERGE rows: a later version of sequence between the tombstone and them still
    combines with them); and which versions the fold dropped as dead (below their key's last reset).
    """
    n = versions.num_rows
    if n == 0:
        return np.zeros(0, np.int64), versions, versions, np.zeros(0, bool)
    moved = None
    if groups and sequence is not None:
        versions, op, present, moved = _deletes_last_among_equal(versions, op, starts, present, sequence)
        if moved is not None and arrival is not None:
            arrival = arrival[moved]
    start_pos = np.flatnonzero(starts)
    pos = np.arange(n, dtype=np.int64)
    resets = np.where((op != OP_MERGE) if puts_reset else (op == OP_DELETE), pos, -1)
    last_reset = np.maximum.reduceat(resets, start_pos)
    group = np.cumsum(starts) - 1
    dead = pos < last_reset[group]
    rows, out_op = reduce_versions(
        versions, op, starts, key_columns, operators, present, groups, sequence, puts_reset, arrival
    )
    alive = out_op != OP_DELETE
    reset = last_reset >= 0
    at = last_reset[reset]
    # Tombstones: the reset's identity and sequence columns, and, for keys it leaves deleted, the groups
    # still above it (a later version of the key takes them back).
    grouped = {c for seq, cs in (groups or {}).items() for c in (seq, *cs)}
    kept = versions.take(pa.array(at))
    folded = rows.filter(pa.array(reset))
    gone = ~alive[reset]
    columns = []
    for f in versions.schema:
        if f.name in grouped:
            mine = folded.column(f.name)
            columns.append(pc.if_else(pa.array(gone), mine, pa.nulls(len(at), f.type)))
        else:
            columns.append(kept.column(f.name))
    tombstones = pa.Table.from_arrays(columns, schema=versions.schema)
    if moved is not None:  # positions in the caller's order
        at = moved[at]
        dead = dead[np.argsort(moved)]
    return at, tombstones, rows if alive.all() else rows.filter(pa.array(alive)), dead


def key_columns(tables: Sequence[pa.Table], spec: TableSpec) -> list[np.ndarray | pa.ChunkedArray]:
    """The key columns of rows concatenated from ``tables`` (NumPy values where they sort so)."""
    out: list[np.ndarray | pa.ChunkedArray] = []
    for c in spec.primary_key:
        chunks = [p.column(c) for p in tables]
        arrays = [a for ch in chunks for a in ch.chunks]
        as_np = [numpy_sortable_array(a) for a in arrays]
        if all(a is not None for a in as_np):
            out.append(np.concatenate(as_np))  # type: ignore[arg-type]
        else:
            out.append(pa.chunked_array(arrays, type=chunks[0].type))
    return out


def sequence_columns(tables: Sequence[pa.Table], spec: TableSpec) -> list[np.ndarray | pa.ChunkedArray]:
    """The sequence columns of rows concatenated from ``tables`` (NumPy values where they sort so)."""
    out: list[np.ndarray | pa.ChunkedArray] = []
    for c in spec.sequence_by:
        chunks = [p.column(c) for p in tables]
        kind = spec.schema.field(c).type
        arrays = [a if a.type == kind else a.cast(kind) for ch in chunks for a in ch.chunks]
        as_np = [numpy_sortable_array(a) for a in arrays]
        if all(a is not None for a in as_np):
            out.append(np.concatenate(as_np))  # type: ignore[arg-type]
        else:
            out.append(pa.chunked_array(arrays, type=kind))
    return out
