"""Merged reads of tables whose value columns merge ``last``, ``max``, ``min``, ``bool_and`` or ``bool_or``.

The general fold (:func:`mere.kernels.reduce_versions`) sorts every column of every version by key. Here
only the key (and sequence) columns are sorted: each key's surviving row position decides its ``last``
columns and identity, taken once per key, and each order-free column takes only its live, non-NULL
versions (most keys have one) for a per-key extreme. Same answers as the general fold (deletes and PUTs
reset a key's state as there), for whole files (every version carries every column read).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.kernels import group_extremes, group_starts, numpy_sortable_array, sort_indices
from mere.spec import OP_DELETE, OP_MERGE, OP_PUT, TableSpec

# Order-free operators and the extreme each keeps (booleans: True > False).
EXTREMES = {"max": "max", "bool_or": "max", "min": "min", "bool_and": "min"}


def applies(spec: TableSpec, value_columns: Sequence[str]) -> bool:
    """Whether a merge of these value columns can take this path: no merge engine nor sequence group,
    every operator ``last`` or order-free, and at least one order-free (all ``last`` is newest-wins)."""
    if spec.merge_engine or spec.sequence_groups:
        return False
    names = [spec.operator(c).name for c in value_columns]
    return any(n in EXTREMES for n in names) and all(n == "last" or n in EXTREMES for n in names)


def _column(tables: Sequence[pa.Table], name: str, kind: pa.DataType) -> pa.ChunkedArray:
    """A column of the concatenated rows (NULL in files without it: delete markers)."""
    chunks: list[pa.Array] = []
    for t in tables:
        if name not in t.column_names:
            chunks.append(pa.nulls(t.num_rows, kind))
            continue
        chunks.extend(a if a.type == kind else a.cast(kind) for a in t.column(name).chunks)
    return pa.chunked_array(chunks, type=kind)


def fold(
    tables: Sequence[pa.Table],
    ops: np.ndarray,
    sequence: Sequence[np.ndarray | pa.ChunkedArray],
    spec: TableSpec,
    needed: Sequence[str],
) -> pa.Table:
    """The merged rows of a split's versions: ``tables`` (whole files, oldest first, dictionary columns
    decoded), their operations and sequence columns concatenated in that order; ``needed``: the output
    columns. Rows come out in key order, deleted keys left out."""
    n = len(ops)
    schema = pa.schema([spec.schema.field(c) for c in needed])
    if n == 0:
        return schema.empty_table()
    keys: list[np.ndarray | pa.ChunkedArray] = []
    for c in spec.primary_key:
        column = _column(tables, c, spec.schema.field(c).type)
        as_np = [numpy_sortable_array(a) for a in column.chunks]
        keys.append(np.concatenate(as_np) if all(a is not None for a in as_np) else column)  # type: ignore[arg-type]
    order = sort_indices([*keys, *sequence])  # stable: commit order, then row order, on ties
    take = pa.array(order)
    starts = group_starts([k[order] if isinstance(k, np.ndarray) else k.take(take) for k in keys], n)
    op = ops[order]
    if spec.reduce_options["puts_reset"] is False:
        op = np.where(op == OP_PUT, OP_MERGE, op)
    # As reduce_versions: a key's live versions are those at or after its last DELETE (exclusive) or PUT.
    pos = np.arange(n, dtype=np.int64)
    start_pos = np.flatnonzero(starts)
    group = np.cumsum(starts) - 1
    reset = np.full(n, -1, dtype=np.int64)
    reset[start_pos] = start_pos
    is_put, is_del = op == OP_PUT, op == OP_DELETE
    reset[is_put] = pos[is_put]
    reset[is_del] = pos[is_del] + 1
    live = pos >= np.maximum.reduceat(reset, start_pos)[group]
    end_pos = np.append(start_pos[1:], n) - 1
    kept = op[end_pos] != OP_DELETE  # a key not deleted at the end: its last version is live
    winners = pa.array(order[end_pos[kept]])
    survivors = np.flatnonzero(kept)
    columns: list[pa.Array] = []
    for f in schema:
        values = _column(tables, f.name, f.type)
        how = None if f.name in spec.identity_columns else EXTREMES.get(spec.operator(f.name).name)
        if how is None:  # identity and `last` columns: the key's last version
            columns.append(values.take(winners).combine_chunks())
            continue
        valid = live.copy()
        if values.null_count:
            nulls = np.concatenate(
                [np.asarray(a.is_null().to_numpy(zero_copy_only=False)) for a in values.chunks]
            )
            valid &= ~nulls[order]
        columns.append(_extremes(values, valid, order, start_pos, group, how).take(pa.array(survivors)))
    return pa.Table.from_arrays(columns, schema=schema)


def _extremes(
    values: pa.ChunkedArray,
    valid: np.ndarray,
    order: np.ndarray,
    start_pos: np.ndarray,
    group: np.ndarray,
    how: str,
) -> pa.Array:
    """Per key (groups of the rows in ``order``, starting at ``start_pos``), the ``how`` of its ``valid``
    values, NULL for keys without one. A key with one valid version (most) takes it; only the versions of
    keys with several are gathered and reduced (NumPy where the type sorts so, else Arrow)."""
    n = len(valid)
    pos = np.arange(n, dtype=np.int64)
    count = np.add.reduceat(valid.astype(np.int64), start_pos)
    best = np.maximum.reduceat(np.where(valid, pos, -1), start_pos)  # sorted position, -1: none
    several = count > 1
    rows = np.flatnonzero(valid & several[group]) if several.any() else np.zeros(0, dtype=np.int64)
    replacement = None
    if len(rows):
        taken = values.take(pa.array(order[rows])).combine_chunks()
        sub_starts = np.flatnonzero(np.append(True, group[rows][1:] != group[rows][:-1]))
        picked = numpy_sortable_array(
            taken.cast(taken.type.value_type) if pa.types.is_dictionary(taken.type) else taken
        )
        if picked is not None:
            floating = picked.dtype.kind == "f"
            reduce = (
                (np.fmax if how == "max" else np.fmin)
                if floating
                else (np.maximum if how == "max" else np.minimum)
            )
            extreme = reduce.reduceat(picked, sub_starts)
            at = np.cumsum(np.append(True, group[rows][1:] != group[rows][:-1])) - 1
            hit = picked == extreme[at]
            if floating:
                hit |= np.isnan(picked) & np.isnan(extreme[at])
            best[several] = np.maximum.reduceat(np.where(hit, rows, -1), sub_starts)
        else:  # Arrow aggregates the keys of several versions; the others take their one value
            sub_group = np.cumsum(np.append(True, group[rows][1:] != group[rows][:-1])) - 1
            replacement = group_extremes(
                taken, np.ones(len(rows), dtype=bool), sub_group, len(sub_starts), how
            )
    missing = best < 0
    idx = pa.array(order[np.where(missing, 0, best)], mask=missing if missing.any() else None)
    out = values.take(idx).combine_chunks()
    if pa.types.is_dictionary(out.type):
        out = out.cast(out.type.value_type)
    if replacement is not None:
        out = pc.replace_with_mask(out, pa.array(several), replacement.cast(out.type))
    return out
