"""The stored versions of a commit's keys: one lookup for table-wide keys and for stale counts.

A commit of blind writes (upserts, CDC batches, deletes of given keys: on every path, Python, staged
files of Spark, Dask and Ray) brings versions of some keys. Two questions need the versions the table
already holds of those keys, at the version the commit lands on:

- **Table-wide keys** (``key_scope="table"`` with a partition column outside the key): a key lives in one
  partition. Each key's winner over the whole table (highest sequence, then commit order, then row order;
  without ``sequence_by`` the newest) keeps its partition; every other partition where the key is live
  after the commit gets a delete marker (carrying the winner's sequence). An incoming row that moves a
  key thus removes it from its old partition, and one older than the stored version elsewhere loses
  (a marker beside it in its own partition).
- **Stale rows** (``sequence_by``): incoming rows whose sequence is lower than the stored winner's of
  their key (in the whole table, or in their partition) are ignored by merge on read; they are counted.

The bucket of a key depends on the key alone, so only the commit's buckets are read, in every partition
(one partition, for partition-scoped stale counts), and of their files only the key, sequence and
operation columns of the row groups whose key range may hold an incoming key. Stale counts of a
partition-scoped table skip the read where file statistics show every incoming sequence at or above every
stored one (a stream in order).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import InvalidInput
from mere.io.footer import primitive_leaf
from mere.kernels import group_starts, last_by_sequence, sort_indices
from mere.metadata import FileEntry
from mere.partitions import typed_partition
from mere.read.evolution import file_columns, to_table_columns
from mere.read.reader import io_pool
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec
from mere.table.context import TableContext

_PART, _RANK, _NEW, _PARTIAL = "__mere_part__", "__mere_rank__", "__mere_new__", "__mere_partial__"


@dataclass
class Resolution:
    """What the lookup found: delete markers to write (rows of the marker columns, with their partition
    values) and the incoming rows that lose to a stored version with a higher sequence."""

    markers: pa.Table | None
    stale: int


def resolve(
    ctx: TableContext, base: int, incoming: Sequence[FileEntry], cross_partition: bool
) -> Resolution:
    """Look up the stored versions at ``base`` of the keys in ``incoming`` (the commit's blind files, in
    commit order) and return the markers table-wide keys need and the stale count.

    Raises:
        InvalidInput: a partial row (one lacking columns) that would move its key to another partition.
    """
    spec = ctx.spec
    if not incoming:
        return Resolution(None, 0)
    touched = {(f.partition, f.bucket) for f in incoming}
    buckets = {b for _, b in touched}
    stored_files = [
        f
        for f in ctx.handle.files_at(base)
        if f.content in ("data", "delete")
        and f.bucket in buckets
        and (cross_partition or (f.partition, f.bucket) in touched)
    ]
    if not cross_partition and len(incoming) == len(touched) and _in_order(ctx, stored_files, incoming):
        return Resolution(None, 0)  # one file per split: rows within it were settled when it was written
    new = _versions(ctx, incoming, incoming_rank=True)
    if new.num_rows == 0:
        return Resolution(None, 0)
    stored = _versions(ctx, stored_files, incoming_rank=False, wanted=new)
    versions = pa.concat_tables([stored, new]) if stored.num_rows else new
    return _decide(spec, versions, cross_partition, {f.partition for f in [*incoming, *stored_files]})


# -- reading versions -------------------------------------------------------------------------------------


def _versions(
    ctx: TableContext, files: Sequence[FileEntry], *, incoming_rank: bool, wanted: pa.Table | None = None
) -> pa.Table:
    """Key, sequence and operation columns of ``files``, with each row's partition, rank (files in
    commit order: stored ones by their sequence number, then the incoming ones in their commit order)
    and whether it is incoming. ``wanted``: only rows of its keys (row groups pruned by key range)."""
    spec, storage = ctx.spec, ctx.storage
    pk = list(spec.primary_key)
    columns = [*pk, *spec.sequence_by, OP_COLUMN]
    ordered = list(files) if incoming_rank else sorted(files, key=lambda f: (f.seq or 0, f.id or 0))
    storage.prefetch_metadata([(f.path, f.size_bytes or None) for f in ordered], io_pool())
    span = _key_span(wanted, pk[0]) if wanted is not None and len(pk) == 1 else None
    offset = 1 << 40 if incoming_rank else 0
    probe = None
    if wanted is not None:  # the incoming keys, once
        probe = (
            pc.unique(wanted.column(pk[0]).combine_chunks())
            if len(pk) == 1
            else wanted.select(pk).group_by(pk).aggregate([])
        )

    def one(i: int) -> pa.Table | None:
        f = ordered[i]
        md = storage.metadata(f.path, f.size_bytes or None)
        groups = list(range(md.num_row_groups))
        if span is not None:
            groups = _groups_in_span(storage, f, md, pk[0], groups, span)
        if not groups:
            return None
        mapping = file_columns(spec, md) if spec.evolved else None
        names = columns if mapping is None else mapping.file_names(columns)
        rows = storage.read_row_groups(f.path, groups, names, f.size_bytes or None)
        if mapping is not None:
            rows = to_table_columns(rows, mapping, spec)
        rows = rows.select(columns)
        if probe is not None:
            rows = _only_keys(rows, probe, pk)
        n = rows.num_rows
        partial = incoming_rank and f.columns is not None and f.content != "delete"
        rows = rows.append_column(_PARTIAL, pa.repeat(pa.scalar(partial), n))
        rank = (offset + i) * (1 << 22) + np.arange(n, dtype=np.int64)  # files before rows within them
        return (
            rows.append_column(_PART, pa.repeat(pa.scalar(f.partition), n))
            .append_column(_RANK, pa.array(rank, pa.int64()))
            .append_column(_NEW, pa.repeat(pa.scalar(incoming_rank), n))
        )

    parts = [t for t in io_pool().map(one, range(len(ordered))) if t is not None and t.num_rows]
    schema = _schema(spec)
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([_aligned(p, schema) for p in parts])


def _schema(spec: TableSpec) -> pa.Schema:
    fields = [spec.schema.field(c).with_nullable(True) for c in [*spec.primary_key, *spec.sequence_by]]
    return pa.schema(
        [
            *fields,
            pa.field(OP_COLUMN, pa.int8()),
            pa.field(_PARTIAL, pa.bool_()),
            pa.field(_PART, pa.string()),
            pa.field(_RANK, pa.int64()),
            pa.field(_NEW, pa.bool_()),
        ]
    )


def _aligned(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays(
        [rows.column(f.name).cast(f.type) for f in schema], schema=schema
    )


def _key_span(wanted: pa.Table, column: str) -> tuple[Any, Any] | None:
    """The smallest and largest incoming key, where statistics can compare them (integers, strings)."""
    kind = wanted.schema.field(column).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    lo, hi = pc.min_max(wanted.column(column)).values()
    return None if not lo.is_valid else (lo.as_py(), hi.as_py())


def _groups_in_span(
    storage: Any, f: FileEntry, md: Any, column: str, groups: list[int], span: tuple[Any, Any]
) -> list[int]:
    """The row groups whose key statistics overlap ``span`` (all, where a group has none)."""
    leaf = primitive_leaf(md, storage.column_leaves(f.path, f.size_bytes or None), column)
    if leaf is None:
        return groups
    out = []
    for g in groups:
        st = md.row_group(g).column(leaf).statistics
        if st is None or not st.has_min_max:
            out.append(g)
            continue
        try:
            if st.max < span[0] or st.min > span[1]:
                continue
        except TypeError:  # statistics of another kind than the keys: read the group
            pass
        out.append(g)
    return out


def _only_keys(rows: pa.Table, probe: Any, pk: list[str]) -> pa.Table:
    """The rows holding one of the keys (``probe``: an array of keys, or a table of multi-column keys)."""
    if len(pk) == 1:
        return rows.filter(pc.is_in(rows.column(pk[0]), value_set=probe))
    keys = probe
    marked = rows.append_column("__mere_pos__", pa.array(np.arange(rows.num_rows)))
    hit = marked.join(keys, keys=pk, join_type="left semi").column("__mere_pos__").to_numpy()
    return rows.take(pa.array(np.sort(hit)))


def _in_order(ctx: TableContext, stored: Sequence[FileEntry], incoming: Sequence[FileEntry]) -> bool:
    """Whether statistics show every incoming sequence at or above every stored one in the touched splits
    (one integer or string sequence column): no incoming row can be stale, and nothing needs reading."""
    spec = ctx.spec
    if not spec.sequence_by:
        return True  # nothing is stale without a sequence
    if len(spec.sequence_by) != 1 or spec.evolved:
        return False
    column = spec.sequence_by[0]
    kind = spec.schema.field(column).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
        return False
    low = _bounds(ctx, incoming, column)
    high = _bounds(ctx, stored, column) if stored else None
    if low is None or (stored and high is None):
        return False
    try:
        return high is None or bool(high[1] <= low[0])
    except TypeError:
        return False


def _bounds(ctx: TableContext, files: Sequence[FileEntry], column: str) -> tuple[Any, Any] | None:
    """The smallest and largest value of ``column`` in ``files`` by their statistics (None: unknown)."""
    storage = ctx.storage
    lo: Any = None
    hi: Any = None
    for f in files:
        md = storage.metadata(f.path, f.size_bytes or None)
        leaf = primitive_leaf(md, storage.column_leaves(f.path, f.size_bytes or None), column)
        if leaf is None:
            return None
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(leaf).statistics
            if st is None or not st.has_min_max:
                return None
            lo = st.min if lo is None else min(lo, st.min)
            hi = st.max if hi is None else max(hi, st.max)
    return None if lo is None else (lo, hi)


# -- deciding ---------------------------------------------------------------------------------------------


def _seq_less(a: list[pa.Array], b: list[pa.Array]) -> np.ndarray:
    """Row by row, whether sequence tuple ``a`` is lower than ``b`` (compared column by column)."""
    less = pa.array(np.zeros(len(a[0]), dtype=bool))
    equal = pa.array(np.ones(len(a[0]), dtype=bool))
    for x, y in zip(a, b):
        less = pc.or_(less, pc.and_(equal, pc.less(x, y)))
        equal = pc.and_(equal, pc.equal(x, y))
    return np.asarray(less.to_numpy(zero_copy_only=False), dtype=bool)


def _decide(spec: TableSpec, versions: pa.Table, cross_partition: bool, partitions: set[str]) -> Resolution:
    pk = list(spec.primary_key)
    seq = list(spec.sequence_by)
    codes = sorted(partitions)
    part = pc.index_in(versions.column(_PART), value_set=pa.array(codes, pa.string())).to_numpy(
        zero_copy_only=False
    )
    versions = versions.append_column("__mere_pcode__", pa.array(part.astype(np.int32)))
    # Each (key, partition)'s current version: what merge on read keeps there after the commit.
    order = sort_indices([*(versions.column(c) for c in pk), versions.column("__mere_pcode__"), versions.column(_RANK)])
    v = versions.take(pa.array(order))
    starts = group_starts([*(v.column(c) for c in pk), v.column("__mere_pcode__")], v.num_rows)
    if seq:
        cur = last_by_sequence(starts, [v.column(c) for c in seq])
    else:
        ends = np.r_[np.flatnonzero(starts)[1:] - 1, v.num_rows - 1]
        cur = ends
    current = v.take(pa.array(cur))
    group_of_row = np.cumsum(starts) - 1  # each version's (key, partition) group
    # Each key's winner over the partitions (table-wide keys): highest sequence, then the newest.
    if cross_partition:
        by_key = sort_indices([*(current.column(c) for c in pk), *(current.column(c) for c in seq), current.column(_RANK)])
        c = current.take(pa.array(by_key))
        kstarts = group_starts([c.column(x) for x in pk], c.num_rows)
        kends = np.r_[np.flatnonzero(kstarts)[1:] - 1, c.num_rows - 1]
        kgroup = np.cumsum(kstarts) - 1
        win_at = kends[kgroup]  # each current version's key winner, in c's order
        win_part = c.column("__mere_pcode__").to_numpy(zero_copy_only=False)[win_at]
        mine = c.column("__mere_pcode__").to_numpy(zero_copy_only=False)
        ops = c.column(OP_COLUMN).to_numpy(zero_copy_only=False)
        losing = (mine != win_part) & (ops != OP_DELETE)
        _refuse_partial_moves(spec, c, win_at, losing)
        markers = None
        if losing.any():
            rows = c.filter(pa.array(losing))
            if seq:
                winners = c.take(pa.array(win_at[losing]))
                for s in seq:  # the marker carries the winner's sequence
                    rows = rows.set_column(rows.schema.get_field_index(s), s, winners.column(s))
            markers = _with_partitions(spec, rows)
        # The winner of each version's key, for stale counts: in current's order.
        back = np.empty(len(by_key), dtype=np.int64)
        back[by_key] = np.arange(len(by_key))
        winner_of_current = by_key[win_at[back]]
    else:
        markers = None
        winner_of_current = np.arange(current.num_rows)
    stale = 0
    if seq:
        new = v.column(_NEW).to_numpy(zero_copy_only=False)
        if new.any():
            at = np.flatnonzero(new)
            wins = current.take(pa.array(winner_of_current[group_of_row[at]]))
            mine_rows = v.take(pa.array(at))
            stale = int(np.count_nonzero(_seq_less([mine_rows.column(s) for s in seq], [wins.column(s) for s in seq])))
    return Resolution(markers, stale)


def _refuse_partial_moves(spec: TableSpec, c: pa.Table, win_at: np.ndarray, elsewhere: np.ndarray) -> None:
    """A partial row cannot move its key: its other columns live in the old partition's row."""
    partial = c.column(_PARTIAL).to_numpy(zero_copy_only=False)
    mine = partial[win_at] & elsewhere  # a key whose partial winner is live in another partition too
    if mine.any():
        i = int(win_at[np.flatnonzero(mine)[0]])
        key = {k: c.column(k)[i].as_py() for k in spec.primary_key}
        raise InvalidInput(
            f"a partial row (lacking columns) would move key {key} to another partition of a table with "
            "key_scope='table'; write whole rows where a key changes partition"
        )


def _with_partitions(spec: TableSpec, rows: pa.Table) -> pa.Table:
    """Marker rows: the key (and sequence) with the typed values of the partition each lies in (one
    conversion per partition, not per row)."""
    out = []
    parts = rows.column(_PART).combine_chunks()
    for text in pc.unique(parts).to_pylist():
        mine = rows.filter(pc.equal(parts, pa.scalar(text)))
        values = typed_partition(spec, json.loads(text))
        piece = mine.select([*spec.primary_key, *spec.sequence_by])
        for c in spec.partition_by:
            if c not in spec.primary_key:
                kind = spec.schema.field(c).type
                piece = piece.append_column(c, pa.repeat(pa.scalar(values.get(c), kind), piece.num_rows))
        out.append(piece)
    return pa.concat_tables(out)
