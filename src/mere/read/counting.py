"""Counting merged rows without merging them: a key is a merged row exactly when its newest version is
not a delete marker (under every merge operator without ``sequence_by``: a delete forgets the key's
earlier versions, any other version leaves a row), or, with ``sequence_by`` and newest-wins merging, when
its winner (highest sequence, then the newest) is not. Only key, sequence and operation columns are read,
and no row is copied."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from mere.kernels import (
    arrow_numbers,
    contiguous,
    group_starts,
    key_columns,
    numpy_sortable_array,
    operation_codes,
    pooled_concatenate,
    sequence_columns,
    sort_indices,
)
from mere.read.newest_wins import newest_wins
from mere.read.planner import FileTask
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec

__all__ = ["live_by_sequence", "live_keys"]

# A sorted run of unique keys at least this many times the newer rows: those are searched in it.
SEARCH_RATIO = 2
# Integer-like keys (integers, dates, timestamps) whose range spans fewer than this many values per stored
# row are marked in a byte map of the range instead of sorted: the map holds at most the bytes of the 64-bit
# keys whose sort it replaces.
MAP_SPAN_PER_ROW = 8
# ... and with a sequence, this many (the map then holds each key's highest sequence: 8 bytes a slot, at
# most 32 a stored row, less than the rows' own columns that a read of the window holds). Keys of a table
# of dense ids in N buckets span about N values a row.
SEQUENCE_MAP_SPAN_PER_ROW = 4

_Run = tuple[int, int, np.ndarray]  # a file's number, the first row of the chunk in it, its keys


def _oldest_run_first(
    spec: TableSpec, parts: Sequence[tuple[FileTask, pa.Table]]
) -> Sequence[tuple[FileTask, pa.Table]]:
    """The parts with the oldest commit's data files in the order of their first keys: a compaction cuts
    its sorted output into files by size, which then make one sorted run that newer rows are searched
    in. Only files whose key ranges are apart are reordered (their order then decides nothing)."""
    head = parts[0][0]
    if len(spec.primary_key) != 1 or head.content == "delete":
        return parts
    lead = 0
    while lead < len(parts) and parts[lead][0].seq == head.seq and parts[lead][0].content != "delete":
        lead += 1
    if lead < 2:
        return parts
    key = spec.primary_key[0]
    ordered = sorted(parts[:lead], key=lambda part: _key_at(part[1].column(key), 0))
    for (_, before), (_, after) in itertools.pairwise(ordered):
        if _key_at(before.column(key), -1) >= _key_at(after.column(key), 0):
            return parts  # the files share keys: their order decides which version is newer
    return [*ordered, *parts[lead:]]


def _key_at(column: pa.ChunkedArray, at: int) -> Any:
    """One key value of a sorted file, comparable with the others' (NumPy's where it orders the type as
    Arrow does: dates and timestamps beyond Python's datetime range have no Python value)."""
    one = column.slice(at % len(column), 1).combine_chunks()
    as_np = numpy_sortable_array(one)
    return as_np[0] if as_np is not None else one[0].as_py()


def live_keys(spec: TableSpec, parts: Sequence[tuple[FileTask, pa.Table]]) -> int:
    """How many keys of one key-range window (files' rows oldest file first, each file sorted by key)
    have a newest version that is not a delete marker. Tables without ``sequence_by`` only."""
    if not parts:
        return 0
    parts = _oldest_run_first(spec, parts)
    # Files whose footers rule out delete markers are read without their operation column.
    each_ops = [operation_codes(p) if OP_COLUMN in p.column_names else None for _, p in parts]
    deletes = any(o is not None and bool((o == OP_DELETE).any()) for o in each_ops)
    n = sum(p.num_rows for _, p in parts)
    if len(spec.primary_key) == 1:
        mapped = _live_by_map(spec.primary_key[0], parts, each_ops)
        if mapped is not None:
            return mapped
    keys: list[Any] = []
    for c in spec.primary_key:
        arrays = [a for _, p in parts for a in p.column(c).chunks]
        as_np = [numpy_sortable_array(a) for a in arrays]
        if all(a is not None for a in as_np) and not any(a.null_count for a in arrays):
            keys.append(pooled_concatenate(as_np))  # type: ignore[arg-type]  # (a copy, even of one array)
        else:
            keys.append(pa.chunked_array(arrays, type=parts[0][1].column(c).type))
    base = keys[0] if len(keys) == 1 and isinstance(keys[0], np.ndarray) else None
    if base is not None and not deletes:
        # No delete marker: every key is a row. Sorting the keys alone (a stable sort merges the files'
        # sorted runs) costs less than ordering the rows to find each key's newest operation, or
        # than searching the newer keys in a sorted run (a binary search per key).
        base.sort(kind="stable")  # in place: ``base`` is this call's own concatenation
        return int(np.count_nonzero(base[1:] != base[:-1])) + int(n > 0)
    filled = [np.zeros(p.num_rows, dtype=np.int8) if o is None else o for o, (_, p) in zip(each_ops, parts)]
    ops = filled[0] if len(filled) == 1 else np.concatenate(filled)
    first = 0  # rows of the oldest commit's data files (one sorted run where their key ranges are apart)
    for task, p in parts:
        if task.content == "delete" or task.seq != parts[0][0].seq:
            break
        first += p.num_rows
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
        k[order] if isinstance(k, np.ndarray) else contiguous(k).take(arrow_numbers(order)) for k in keys
    ]
    starts = group_starts(sorted_keys, n)
    is_last = np.empty(n, dtype=bool)
    is_last[:-1] = starts[1:]
    is_last[-1] = True
    return int(np.count_nonzero(is_last & (ops[order] != OP_DELETE)))


def _key_runs(key: str, tables: Sequence[pa.Table], span_per_row: int) -> tuple[list[_Run], int, int] | None:
    """The chunks of each file's key column as integer NumPy arrays, for a map of the window's key range:
    ``(file number, first row in the file, keys)``, the least key and the greatest. None where a value is not
    integer-like or NULL, the keys span ``span_per_row`` values a row or more, or a chunk is not strictly
    increasing (one assignment would then set a slot twice, in no defined order)."""
    runs: list[_Run] = []
    rows = 0
    for number, table in enumerate(tables):
        offset = 0
        for chunk in table.column(key).chunks:
            values = numpy_sortable_array(chunk) if not chunk.null_count else None
            if values is None or values.dtype.kind not in "iu":
                return None
            if len(values):
                if values.itemsize < 8:  # narrow types: the offsets from the least key may not fit them
                    values = values.astype(np.int64)
                runs.append((number, offset, values))
            offset += len(values)
        rows += offset
    if not runs:
        return runs, 0, -1
    lo, hi = min(int(v[0]) for _, _, v in runs), max(int(v[-1]) for _, _, v in runs)
    if hi - lo >= span_per_row * max(rows, 1):
        return None
    if any(len(v) > 1 and not bool((v[1:] > v[:-1]).all()) for _, _, v in runs):
        return None
    return runs, lo, hi


def _slots(values: np.ndarray, lo: int) -> np.ndarray:
    return np.asarray(values - values.dtype.type(lo))  # exact: every key lies in the map's range


def _live_by_map(
    key: str, parts: Sequence[tuple[FileTask, pa.Table]], each_ops: Sequence[np.ndarray | None]
) -> int | None:
    """Live keys of one integer-like key column, each file's rows marked in a byte map of the window's key
    range, oldest file first: a key's newest version sets its byte last (live, or not for a delete
    marker). Linear, where sorting the keys is not. None where :func:`_key_runs` finds no map (ranges
    wider than ``MAP_SPAN_PER_ROW`` values a row)."""
    found = _key_runs(key, [p for _, p in parts], MAP_SPAN_PER_ROW)
    if found is None:
        return None
    runs, lo, hi = found
    if not runs:
        return 0
    # In Arrow's pool: the previous window's map is handed back instead of fresh pages faulted in.
    live = np.frombuffer(pa.allocate_buffer(hi - lo + 1), dtype=np.bool_)
    live[:] = False
    for number, offset, values in runs:
        ops = each_ops[number]
        live[_slots(values, lo)] = True if ops is None else ops[offset : offset + len(values)] != OP_DELETE
    return int(np.count_nonzero(live))


def live_by_sequence(spec: TableSpec, parts: Sequence[tuple[FileTask, pa.Table]]) -> int:
    """How many keys of one key-range window (files' rows oldest file first, each file sorted by key) have
    a winner that is not a delete marker, on tables with ``sequence_by`` whose merge keeps each key's
    winner alone (every operator ``last``): the version of highest sequence, the newest of them on ties
    (what :func:`~mere.read.newest_wins.newest_wins` keeps)."""
    if not parts:
        return 0
    if len(parts) == 1:  # a file holds one version of a key
        return int(np.count_nonzero(operation_codes(parts[0][1]) != OP_DELETE))
    tables = [p for _, p in parts]
    sequence = sequence_columns(tables, spec)
    ops = [operation_codes(p) for p in tables]
    if len(spec.primary_key) == 1 and len(sequence) == 1 and isinstance(sequence[0], np.ndarray):
        mapped = _live_by_sequence_map(spec.primary_key[0], tables, ops, sequence[0])
        if mapped is not None:
            return mapped
    base = tables[0].num_rows if parts[0][0].content != "delete" else 0
    return int(np.count_nonzero(newest_wins(key_columns(tables, spec), np.concatenate(ops), base, sequence)))


def _live_by_sequence_map(
    key: str, tables: Sequence[pa.Table], ops: Sequence[np.ndarray], sequence: np.ndarray
) -> int | None:
    """:func:`live_by_sequence` for one integer-like key column and one integer-like sequence column, in
    two linear passes over a map of the window's key range: each key's highest sequence, then, file by
    file (oldest first), whether each row holding it is not a delete marker (a newer file's equal sequence
    sets it last). None where the sequence is not integer-like or :func:`_key_runs` finds no map (ranges
    wider than ``SEQUENCE_MAP_SPAN_PER_ROW`` values a row)."""
    if sequence.dtype.kind not in "iu":
        return None
    found = _key_runs(key, tables, SEQUENCE_MAP_SPAN_PER_ROW)
    if found is None:
        return None
    runs, lo, hi = found
    if not runs:
        return 0
    starts = np.cumsum([0, *(t.num_rows for t in tables)])
    highest = np.full(hi - lo + 1, np.iinfo(sequence.dtype).min, dtype=sequence.dtype)
    slots = []
    for number, offset, values in runs:
        at = _slots(values, lo)
        first = starts[number] + offset
        seq = sequence[first : first + len(values)]
        highest[at] = np.maximum(highest[at], seq)  # a chunk's keys are unique: no slot twice
        slots.append((at, seq, ops[number][offset : offset + len(values)]))
    live = np.zeros(hi - lo + 1, dtype=np.bool_)
    for at, seq, op in slots:
        wins = seq == highest[at]
        live[at[wins]] = op[wins] != OP_DELETE
    return int(np.count_nonzero(live))
