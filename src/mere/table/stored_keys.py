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
operation columns, of files whose key range may hold an incoming key. Files never change, so those
columns are kept per file (up to :data:`CACHE_BYTES`): a process writing batch after batch reads each
file once. Stale counts of a partition-scoped table skip the read where file statistics show every
incoming sequence at or above every stored one (a stream in order), look up only the incoming rows at or
below the highest stored sequence, and, for one integer key and sequence, search the sorted files' keys
in NumPy.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
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
_BUCKET = "__mere_bucket__"


@dataclass
class Resolution:
    """What the lookup found: delete markers to write (rows of the marker columns, with their partition
    values) and the incoming rows that lose to a stored version with a higher sequence."""

    markers: pa.Table | None
    stale: int


def resolve(
    ctx: TableContext,
    base: int,
    incoming: Sequence[FileEntry],
    cross_partition: bool,
    removed: frozenset[int] = frozenset(),
) -> Resolution:
    """Look up the stored versions at ``base`` of the keys in ``incoming`` (the commit's blind files, in
    commit order) and return the markers table-wide keys need and the stale count. ``removed``: ids of
    stored files the commit removes (the partitions an overwrite replaces): their versions are gone.

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
        and f.id not in removed
        and (cross_partition or (f.partition, f.bucket) in touched)
    ]
    # One file per split: its rows were settled against one another when it was written.
    settled = len(incoming) == len(touched)
    high = None
    if not cross_partition:
        if settled and _in_order(ctx, stored_files, incoming):
            return Resolution(None, 0)
        high = _stored_high(ctx, stored_files) if settled else None
    names = sorted({f.partition for f in [*incoming, *stored_files]})
    codes = {p: i for i, p in enumerate(names)}  # partitions as small integers
    new = _versions(ctx, incoming, codes, incoming_rank=True)
    if high is not None:  # only rows at or below the highest stored sequence can be stale
        new = new.filter(pc.less_equal(new.column(spec.sequence_by[0]), pa.scalar(high[0])))
    if new.num_rows == 0:
        return Resolution(None, 0)
    if not cross_partition and settled:
        fast = _stale_by_search(ctx, stored_files, new, names)
        if fast is not None:
            return Resolution(None, fast)
    stored = _versions(ctx, stored_files, codes, incoming_rank=False, wanted=new)
    versions = pa.concat_tables([stored, new]) if stored.num_rows else new
    return _decide(spec, versions, cross_partition, names)


def _stale_by_search(
    ctx: TableContext, stored: Sequence[FileEntry], new: pa.Table, partitions: list[str]
) -> int | None:
    """The stale count of a partition-scoped write of one file per split, in NumPy alone where the key
    is one integer column and the sequence one integer column (None otherwise): a row is stale when its
    sequence is below the highest one stored for its key in its split (any version, deletes too)."""
    spec = ctx.spec
    pk, seq = spec.primary_key, spec.sequence_by
    if len(pk) != 1 or len(seq) != 1 or not pa.types.is_integer(spec.schema.field(seq[0]).type):
        return None
    if not pa.types.is_integer(spec.schema.field(pk[0]).type):
        return None
    splits = new.column(_PART).to_numpy().astype(np.int64) * (1 << 32) + new.column(_BUCKET).to_numpy()
    wanted = np.unique(splits)
    by_split: dict[int, list[FileEntry]] = {int(s): [] for s in wanted}
    codes = {p: i for i, p in enumerate(partitions)}
    for f in stored:
        code = codes.get(f.partition)
        if code is not None and code * (1 << 32) + f.bucket in by_split:
            by_split[code * (1 << 32) + f.bucket].append(f)
    indexes = list(
        io_pool().map(lambda s: _split_index(ctx, partitions[s >> 32], s & 0xFFFFFFFF, by_split[s]), by_split)
    )
    if any(ix is None for ix in indexes):
        return None
    stale = 0
    keys_new = new.column(pk[0]).to_numpy()
    seq_new = new.column(seq[0]).to_numpy().astype(np.int64)
    for split, index in zip(by_split, indexes):
        assert index is not None
        keys, highest = index
        mine = np.flatnonzero(splits == split)
        if not len(keys) or not len(mine):
            continue
        order = np.argsort(keys_new[mine], kind="stable")  # sorted probes search faster
        probe = keys_new[mine][order]
        pos = np.minimum(np.searchsorted(keys, probe), len(keys) - 1)
        found = keys[pos] == probe
        stale += int(np.count_nonzero(found & (seq_new[mine][order] < highest[pos])))
    return stale


# Per split, its stored keys (sorted, unique) with the highest sequence stored for each (any version,
# deletes too), kept for the files it was built from: the next commit to the split merges only the files
# added since (a stream's commit adds one), instead of searching every file of the split again.
INDEX_BYTES = 256 << 20
_index: OrderedDict[tuple[str, str, int], tuple[frozenset[str], np.ndarray, np.ndarray]] = OrderedDict()
_index_bytes = 0


def _split_index(
    ctx: TableContext, partition: str, bucket: int, files: Sequence[FileEntry]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The keys of a split's ``files`` and each one's highest stored sequence (None: a file's keys are not
    one strictly increasing integer column)."""
    global _index_bytes
    spec, storage = ctx.spec, ctx.storage
    columns = [*spec.primary_key, *spec.sequence_by, OP_COLUMN]
    paths = {storage.full_path(f.path): f for f in files}
    name = (storage.full_path(ctx.location), partition, bucket)
    with _cache_lock:
        hit = _index.get(name) if not spec.evolved else None
    if hit is not None and hit[0] <= paths.keys():
        have, keys, highest = hit
        todo = [f for p, f in paths.items() if p not in have]
    else:
        keys, highest = np.empty(0, np.int64), np.empty(0, np.int64)
        todo = list(files)
    for f in todo:
        rows, file_keys = _file_versions(ctx, f, columns)
        if rows.num_rows == 0:
            continue
        if file_keys is None:
            return None
        keys, highest = _merged(keys, highest, file_keys, rows.column(spec.sequence_by[0]).to_numpy())
    if not spec.evolved and (todo or hit is None):
        with _cache_lock:
            old = _index.pop(name, None)
            if old is not None:
                _index_bytes -= old[1].nbytes + old[2].nbytes
            _index[name] = (frozenset(paths), keys, highest)
            _index_bytes += keys.nbytes + highest.nbytes
            while _index_bytes > INDEX_BYTES and _index:
                _, (_, k, h) = _index.popitem(last=False)
                _index_bytes -= k.nbytes + h.nbytes
    return keys, highest


def _merged(
    keys: np.ndarray, highest: np.ndarray, more: np.ndarray, sequence: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``keys`` with their highest sequence, and one file's (sorted, unique) keys merged in:
    a copy (the cached arrays are shared with other threads)."""
    sequence = sequence.astype(np.int64, copy=False)
    more = more.astype(keys.dtype, copy=False) if len(keys) else more
    if not len(keys):
        return more.copy(), sequence.copy()
    pos = np.searchsorted(keys, more)
    inside = pos < len(keys)
    hit = np.zeros(len(more), dtype=bool)
    hit[inside] = keys[pos[inside]] == more[inside]
    highest = highest.copy()
    highest[pos[hit]] = np.maximum(highest[pos[hit]], sequence[hit])
    miss = np.flatnonzero(~hit)
    if not len(miss):
        return keys, highest
    at = pos[miss] + np.arange(len(miss))  # where the new keys land in the merged arrays
    old = np.ones(len(keys) + len(miss), dtype=bool)
    old[at] = False
    out_keys = np.empty(len(old), dtype=keys.dtype)
    out_high = np.empty(len(old), dtype=np.int64)
    out_keys[at], out_high[at] = more[miss], sequence[miss]
    out_keys[old], out_high[old] = keys, highest
    return out_keys, out_high


def _stored_high(ctx: TableContext, stored: Sequence[FileEntry]) -> tuple[Any] | None:
    """The highest stored sequence by statistics (one integer or string sequence column), else None."""
    spec = ctx.spec
    if len(spec.sequence_by) != 1 or spec.evolved or not stored:
        return None
    kind = spec.schema.field(spec.sequence_by[0]).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
        return None
    bounds = _bounds(ctx, stored, spec.sequence_by[0])
    return None if bounds is None else (bounds[1],)


# -- reading versions -------------------------------------------------------------------------------------

# Files never change: the key, sequence and operation columns a lookup read of a file are kept (most
# recently used first, up to CACHE_BYTES), so a writer committing batch after batch reads each file once.
CACHE_BYTES = 256 << 20
_cache: OrderedDict[tuple[str, tuple[str, ...]], tuple[pa.Table, np.ndarray | None]] = OrderedDict()
_cache_bytes = 0
_cache_lock = threading.Lock()


def _file_versions(ctx: TableContext, f: FileEntry, columns: list[str]) -> tuple[pa.Table, np.ndarray | None]:
    """The key, sequence and operation columns of a whole file, and its keys as a sorted NumPy array
    where the key is one integer column in strictly increasing order (files are written sorted)."""
    global _cache_bytes
    spec, storage = ctx.spec, ctx.storage
    cached = not spec.evolved
    key = (storage.full_path(f.path), tuple(columns))
    if cached:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
                return hit
    md = storage.metadata(f.path, f.size_bytes or None)
    mapping = file_columns(spec, md) if spec.evolved else None
    names = columns if mapping is None else mapping.file_names(columns)
    rows = storage.read_row_groups(f.path, range(md.num_row_groups), names, f.size_bytes or None)
    if mapping is not None:
        rows = to_table_columns(rows, mapping, spec)
    rows = rows.select(columns).combine_chunks()
    keys = None
    pk = spec.primary_key
    if len(pk) == 1 and pa.types.is_integer(rows.schema.field(pk[0]).type) and rows.num_rows:
        values = rows.column(pk[0]).to_numpy()
        if len(values) < 2 or bool((values[1:] > values[:-1]).all()):
            keys = values
    out = (rows, keys)
    if cached:
        with _cache_lock:
            if key not in _cache:
                _cache[key] = out
                _cache_bytes += rows.nbytes
            while _cache_bytes > CACHE_BYTES and _cache:
                _, (old, _) = _cache.popitem(last=False)
                _cache_bytes -= old.nbytes
    return out


def _versions(
    ctx: TableContext,
    files: Sequence[FileEntry],
    codes: dict[str, int],
    *,
    incoming_rank: bool,
    wanted: pa.Table | None = None,
) -> pa.Table:
    """Key, sequence and operation columns of ``files``, with each row's partition, rank (files in
    commit order: stored ones by their sequence number, then the incoming ones in their commit order)
    and whether it is incoming. ``wanted``: only rows of its keys, looked up per bucket."""
    spec, storage = ctx.spec, ctx.storage
    pk = list(spec.primary_key)
    columns = [*pk, *spec.sequence_by, OP_COLUMN]
    ordered = list(files) if incoming_rank else sorted(files, key=lambda f: (f.seq or 0, f.id or 0))
    storage.prefetch_metadata([(f.path, f.size_bytes or None) for f in ordered], io_pool())
    offset = 1 << 20 if incoming_rank else 0
    probes: dict[int, Any] = {}
    if wanted is not None:  # the incoming keys of each bucket, once
        bucket = wanted.column(_BUCKET).to_numpy()
        for b in np.unique(bucket):
            mine = wanted.filter(pa.array(bucket == b))
            if len(pk) == 1:
                probe = pc.unique(mine.column(pk[0]).combine_chunks())
                as_np = probe.to_numpy() if pa.types.is_integer(probe.type) else None
                probes[int(b)] = (probe, None if as_np is None else np.sort(as_np), _key_span(mine, pk[0]))
            else:
                probes[int(b)] = (mine.select(pk).group_by(pk).aggregate([]), None, None)

    def one(i: int) -> pa.Table | None:
        f = ordered[i]
        if wanted is not None and f.bucket not in probes:
            return None
        if wanted is not None:
            span = probes[f.bucket][2]
            md = storage.metadata(f.path, f.size_bytes or None)
            if span is not None and not _groups_in_span(
                storage, f, md, pk[0], range(md.num_row_groups), span
            ):
                return None  # no row group's key range holds an incoming key: not read
        rows, keys = _file_versions(ctx, f, columns)
        at = np.arange(rows.num_rows, dtype=np.int64)
        if wanted is not None:
            probe, sorted_probe, _ = probes[f.bucket]
            if keys is not None and sorted_probe is not None:
                at = _hits(keys, sorted_probe)
                rows = rows.take(pa.array(at))
            else:
                rows, at = _only_keys(rows, probe, pk)
        n = rows.num_rows
        if not n:
            return None
        partial = incoming_rank and f.columns is not None and f.content != "delete"
        rank = (offset + i) * (1 << 32) + at  # files in commit order, then rows within them
        return (
            rows.append_column(_PARTIAL, pa.repeat(pa.scalar(partial), n))
            .append_column(_PART, pa.repeat(pa.scalar(codes[f.partition], pa.int32()), n))
            .append_column(_RANK, pa.array(rank, pa.int64()))
            .append_column(_NEW, pa.repeat(pa.scalar(incoming_rank), n))
            .append_column(_BUCKET, pa.repeat(pa.scalar(f.bucket, pa.int32()), n))
        )

    parts = [t for t in io_pool().map(one, range(len(ordered))) if t is not None]
    schema = _schema(spec)
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([_aligned(p, schema) for p in parts])


def _hits(keys: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """Positions in ``keys`` (sorted, unique) of the ``probe`` keys (sorted) it holds."""
    pos = np.searchsorted(keys, probe)
    inside = pos < len(keys)
    pos = pos[inside]
    return np.sort(pos[keys[pos] == probe[inside]])


def _schema(spec: TableSpec) -> pa.Schema:
    fields = [spec.schema.field(c).with_nullable(True) for c in [*spec.primary_key, *spec.sequence_by]]
    return pa.schema(
        [
            *fields,
            pa.field(OP_COLUMN, pa.int8()),
            pa.field(_PARTIAL, pa.bool_()),
            pa.field(_PART, pa.int32()),
            pa.field(_RANK, pa.int64()),
            pa.field(_NEW, pa.bool_()),
            pa.field(_BUCKET, pa.int32()),
        ]
    )


def _aligned(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([rows.column(f.name).cast(f.type) for f in schema], schema=schema)


def _key_span(wanted: pa.Table, column: str) -> tuple[Any, Any] | None:
    """The smallest and largest incoming key, where statistics can compare them (integers, strings)."""
    kind = wanted.schema.field(column).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    lo, hi = pc.min_max(wanted.column(column)).values()
    return None if not lo.is_valid else (lo.as_py(), hi.as_py())


def _groups_in_span(
    storage: Any, f: FileEntry, md: Any, column: str, groups: Sequence[int], span: tuple[Any, Any]
) -> list[int]:
    """The row groups whose key statistics overlap ``span`` (all, where a group has none)."""
    leaf = primitive_leaf(md, storage.column_leaves(f.path, f.size_bytes or None), column)
    if leaf is None:
        return list(groups)
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


def _only_keys(rows: pa.Table, probe: Any, pk: list[str]) -> tuple[pa.Table, np.ndarray]:
    """The rows holding one of the keys (``probe``: an array of keys, or a table of multi-column keys),
    and their positions."""
    if len(pk) == 1:
        mask = pc.is_in(rows.column(pk[0]), value_set=probe)
        at = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
    else:
        marked = rows.append_column("__mere_pos__", pa.array(np.arange(rows.num_rows)))
        at = np.sort(marked.join(probe, keys=pk, join_type="left semi").column("__mere_pos__").to_numpy())
    return rows.take(pa.array(at)), at.astype(np.int64)


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


_file_bounds: OrderedDict[tuple[str, str], tuple[Any, Any] | None] = OrderedDict()


def _bounds(ctx: TableContext, files: Sequence[FileEntry], column: str) -> tuple[Any, Any] | None:
    """The smallest and largest value of ``column`` in ``files`` by their statistics (None: unknown)."""
    lo: Any = None
    hi: Any = None
    for f in files:
        key = (ctx.storage.full_path(f.path), column)
        with _cache_lock:
            cached = key in _file_bounds
            known = _file_bounds.get(key)
        if not cached:
            known = _one_file_bounds(ctx, f, column)
            with _cache_lock:
                _file_bounds[key] = known
                while len(_file_bounds) > 100_000:
                    _file_bounds.popitem(last=False)
        if known is None:
            return None
        lo = known[0] if lo is None else min(lo, known[0])
        hi = known[1] if hi is None else max(hi, known[1])
    return None if lo is None else (lo, hi)


def _one_file_bounds(ctx: TableContext, f: FileEntry, column: str) -> tuple[Any, Any] | None:
    storage = ctx.storage
    lo: Any = None
    hi: Any = None
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


def _decide(spec: TableSpec, versions: pa.Table, cross_partition: bool, partitions: list[str]) -> Resolution:
    pk = list(spec.primary_key)
    seq = list(spec.sequence_by)
    # Each (key, partition)'s current version: what merge on read keeps there after the commit.
    order = sort_indices([*(versions.column(c) for c in pk), versions.column(_PART), versions.column(_RANK)])
    v = versions.take(pa.array(order))
    starts = group_starts([*(v.column(c) for c in pk), v.column(_PART)], v.num_rows)
    if seq:
        cur = last_by_sequence(starts, [v.column(c) for c in seq])
    else:
        ends = np.r_[np.flatnonzero(starts)[1:] - 1, v.num_rows - 1]
        cur = ends
    current = v.take(pa.array(cur))
    group_of_row = np.cumsum(starts) - 1  # each version's (key, partition) group
    # Each key's winner over the partitions (table-wide keys): highest sequence, then the newest.
    if cross_partition:
        # On equal sequences a live version wins over a delete: the markers this lookup writes carry
        # their winner's sequence, and must not win over it at the next lookup (a real delete and a
        # real row of one key never share a sequence: it names one event).
        live = np.asarray(current.column(OP_COLUMN).to_numpy(zero_copy_only=False) != OP_DELETE, np.int8)
        tiebreak = [live] if seq else []
        by_key = sort_indices(
            [
                *(current.column(c) for c in pk),
                *(current.column(c) for c in seq),
                *tiebreak,
                current.column(_RANK),
            ]
        )
        c = current.take(pa.array(by_key))
        kstarts = group_starts([c.column(x) for x in pk], c.num_rows)
        kends = np.r_[np.flatnonzero(kstarts)[1:] - 1, c.num_rows - 1]
        kgroup = np.cumsum(kstarts) - 1
        win_at = kends[kgroup]  # each current version's key winner, in c's order
        win_part = c.column(_PART).to_numpy(zero_copy_only=False)[win_at]
        mine = c.column(_PART).to_numpy(zero_copy_only=False)
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
            markers = _with_partitions(spec, rows, partitions)
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
            stale = int(
                np.count_nonzero(_seq_less([mine_rows.column(s) for s in seq], [wins.column(s) for s in seq]))
            )
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


def _with_partitions(spec: TableSpec, rows: pa.Table, partitions: list[str]) -> pa.Table:
    """Marker rows: the key (and sequence) with the typed values of the partition each lies in (one
    conversion per partition, not per row)."""
    out = []
    parts = rows.column(_PART).to_numpy()
    for code in np.unique(parts):
        mine = rows.filter(pa.array(parts == code))
        values = typed_partition(spec, json.loads(partitions[int(code)]))
        piece = mine.select([*spec.primary_key, *spec.sequence_by])
        for c in spec.partition_by:
            if c not in spec.primary_key:
                kind = spec.schema.field(c).type
                piece = piece.append_column(c, pa.repeat(pa.scalar(values.get(c), kind), piece.num_rows))
        out.append(piece)
    return pa.concat_tables(out)
