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
columns are kept per file (:mod:`mere.table.file_keys`; a file this process wrote is kept from the rows
it wrote): a process writing batch after batch reads each file at most once. Table-wide keys on one
integer column keep, per bucket, each (key, partition)'s current version over every file (an index a
commit folds its newly stored files into and searches), so a commit's lookup costs its own keys and the
files added since the last one, not the bucket's files one by one. Stale counts of a
partition-scoped table skip the read where file statistics show every incoming sequence at or above
every stored one (a stream in order), look up only the incoming rows at or below the highest stored
sequence, and, for one integer key and sequence, search each stored file's sorted keys in NumPy.
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

from mere.arrays import first_row
from mere.errors import InvalidInput
from mere.io.footer import primitive_leaf
from mere.kernels import group_starts, last_by_sequence, sort_indices
from mere.metadata import FileEntry
from mere.partitions import typed_partition
from mere.read.reader import io_pool
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec
from mere.table import file_keys
from mere.table.context import TableContext
from mere.table.file_keys import all_kept, file_versions, lookup_columns, sequence_bounds

_PART, _RANK, _NEW, _PARTIAL = "__mere_part__", "__mere_rank__", "__mere_new__", "__mere_partial__"
_BUCKET = "__mere_bucket__"
_INCOMING = 1 << 20  # ranks of incoming files start here: (_INCOMING + file number) << 32 | row


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
    counted: frozenset[str] | None = None,
) -> Resolution:
    """Look up the stored versions at ``base`` of the keys in ``incoming`` (the commit's blind files, in
    commit order) and return the markers table-wide keys need and the stale count. ``removed``: ids of
    stored files the commit removes (the partitions an overwrite replaces): their versions are gone.
    ``counted``: paths of the incoming files whose stale rows count (None: all; a delete of given keys
    takes part in the lookup but reports none).

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
        if settled:
            fast = _stale_by_search(ctx, stored_files, incoming, high, counted)
            if fast is not None:
                return Resolution(None, fast)
    names = sorted({f.partition for f in [*incoming, *stored_files]})
    codes = {p: i for i, p in enumerate(names)}  # partitions as small integers
    new = _versions(ctx, incoming, codes, incoming_rank=True)
    if high is not None:  # only rows at or below the highest stored sequence can be stale
        new = new.filter(pc.less_equal(new.column(spec.sequence_by[0]), pa.scalar(high[0])))
    if new.num_rows == 0:
        return Resolution(None, 0)
    stored = _indexed_versions(ctx, stored_files, codes, new) if cross_partition and KEY_INDEX else None
    if stored is None:
        stored = _versions(ctx, stored_files, codes, incoming_rank=False, wanted=new)
    versions = pa.concat_tables([stored, new]) if stored.num_rows else new
    return _decide(spec, versions, cross_partition, names, incoming, counted)


def _stale_by_search(
    ctx: TableContext,
    stored: Sequence[FileEntry],
    incoming: Sequence[FileEntry],
    high: tuple[Any] | None,
    counted: frozenset[str] | None,
) -> int | None:
    """The stale count of a partition-scoped write of one file per split, in NumPy alone where the key
    is one integer column and the sequence one integer column (None otherwise): a row is stale when its
    sequence is below one stored for its key in its split (any version, deletes too). ``high``: the
    highest stored sequence (only rows at or below it can be stale)."""
    spec = ctx.spec
    pk, seq = spec.primary_key, spec.sequence_by
    if len(pk) != 1 or len(seq) != 1 or not pa.types.is_integer(spec.schema.field(seq[0]).type):
        return None
    if not pa.types.is_integer(spec.schema.field(pk[0]).type) or spec.evolved:
        return None
    by_split: dict[tuple[str, int], list[FileEntry]] = {(f.partition, f.bucket): [] for f in incoming}
    for f in stored:
        if (f.partition, f.bucket) in by_split:
            by_split[(f.partition, f.bucket)].append(f)

    def one(f: FileEntry) -> int | None:
        if counted is not None and f.path not in counted:
            return 0
        rows, keys = file_versions(ctx.storage, spec, f, lookup_columns(spec))
        if not rows.num_rows:
            return 0
        if keys is None:
            return None
        sequence = rows.column(seq[0]).to_numpy()
        at = np.arange(len(keys))
        if high is not None:
            maybe = sequence <= high[0]
            keys, sequence, at = keys[maybe], sequence[maybe], at[maybe]
        if not len(keys):
            return 0
        late = _late(ctx, f.partition, f.bucket, by_split[(f.partition, f.bucket)], keys, sequence)
        return None if late is None else int(np.count_nonzero(late)) + _tied_to(f, at[late])

    columns = lookup_columns(spec)
    if all_kept(ctx.storage, spec, [*incoming, *(g for fs in by_split.values() for g in fs)], columns):
        counts = [one(f) for f in incoming]  # NumPy on kept arrays: a thread each would only wait
    else:
        counts = list(io_pool().map(one, incoming))
    return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


def _tied_to(f: FileEntry, rows: np.ndarray) -> int:
    """How many more rows of their write the (distinct) ``rows`` of the incoming file ``f`` stand for
    (rows their winner beat at an equal sequence, see :attr:`FileEntry.ties`): stale with them."""
    if not f.ties or not len(rows):
        return 0
    pairs = np.frombuffer(f.ties, dtype="<i8").reshape(-1, 2)
    return int(pairs[np.isin(pairs[:, 0], rows), 1].sum())


# Per split, the highest sequence stored for each key (any version, deletes too), kept for the files it
# was built from; the next commit to the split adds only the files added since (a stream's commit adds
# one). Keys that fill their range densely enough (ids, as most sources hand out) index an array by key
# offset: adding a file and looking keys up cost the rows involved, not the split's size. Other keys
# keep a sorted array of all but the split's newest files, searched along with each newer file; once
# more than FOLD files are newer they are folded in at once (one pass per FOLD commits, not per commit).
FOLD = 4
DENSITY = 8  # a dense index spans at most this many slots per stored row (plus DENSE_SLACK) ...
# ... and at most INDEX_BYTES // 32 slots
DENSE_SLACK = 1 << 16
INDEX_BYTES = 256 << 20


@dataclass
class _SplitIndex:
    files: frozenset[str]
    dense: bool  # highest[key - low] (absent keys: the sequence type's lowest value) or sorted keys
    low: int
    keys: np.ndarray | None
    highest: np.ndarray | None
    rows: int
    lock: threading.Lock

    @property
    def nbytes(self) -> int:
        return (0 if self.keys is None else self.keys.nbytes) + (
            0 if self.highest is None else self.highest.nbytes
        )


_index: OrderedDict[tuple[str, str, int], _SplitIndex] = OrderedDict()
_index_lock = threading.Lock()


def _late(
    ctx: TableContext,
    partition: str,
    bucket: int,
    files: Sequence[FileEntry],
    keys: np.ndarray,
    sequence: np.ndarray,
) -> np.ndarray | None:
    """Which of the (sorted, unique) ``keys`` have a version with a higher sequence than theirs in the
    split's ``files`` (None: a file's keys are not one strictly increasing integer column)."""
    storage = ctx.storage
    paths = {storage.full_path(g.path): g for g in files}
    name = (storage.full_path(ctx.location), partition, bucket)
    with _index_lock:
        ix = _index.get(name)
        if ix is None:
            ix = _index[name] = _SplitIndex(frozenset(), True, 0, None, None, 0, threading.Lock())
        _index.move_to_end(name)
    with ix.lock:  # one commit at a time updates and searches a split's index
        if not ix.files <= paths.keys():  # files it holds were removed (compaction, overwrite): anew
            ix.files, ix.dense, ix.low, ix.keys, ix.highest, ix.rows = frozenset(), True, 0, None, None, 0
        newer = [g for p, g in paths.items() if p not in ix.files]
        late = _late_dense(ctx, ix, paths, newer, keys, sequence) if ix.dense else None
        if late is None:  # the index is sorted (or just turned so: it holds no file)
            newer = [g for p, g in paths.items() if p not in ix.files]
            late = _late_sorted(ctx, ix, paths, newer, keys, sequence)
    _account(_index)
    return late


def _account(indexes: OrderedDict[Any, Any]) -> None:
    """Keep the memory of ``indexes`` under INDEX_BYTES (least recently used dropped first)."""
    with _index_lock:
        total = sum(ix.nbytes for ix in indexes.values())
        while total > INDEX_BYTES and len(indexes) > 1:
            _, old = indexes.popitem(last=False)
            total -= old.nbytes


def _late_dense(
    ctx: TableContext,
    ix: _SplitIndex,
    paths: dict[str, FileEntry],
    newer: list[FileEntry],
    keys: np.ndarray,
    sequence: np.ndarray,
) -> np.ndarray | None:
    """The dense index brought up to ``paths`` and searched; None where the keys are not dense (the
    index then turns sorted)."""
    spec = ctx.spec
    column = spec.sequence_by[0]
    versions = [file_versions(ctx.storage, spec, g, lookup_columns(spec)) for g in newer]
    versions = [(r, k) for r, k in versions if r.num_rows]
    if any(k is None for _, k in versions) or keys.dtype.kind != "i":  # keys are signed: a guard
        _turn_sorted(ix)
        return None
    bounds = [(int(k[0]), int(k[-1])) for _, k in versions if k is not None]
    if ix.highest is not None:
        bounds.append((ix.low, ix.low + len(ix.highest) - 1))
    rows = ix.rows + sum(r.num_rows for r, _ in versions)
    if bounds:
        low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
        span = high - low + 1
        if span > min(DENSITY * rows + DENSE_SLACK, INDEX_BYTES // 32):
            _turn_sorted(ix)
            return None
        kind = spec.schema.field(column).type.to_pandas_dtype()
        if ix.highest is None or low < ix.low or high >= ix.low + len(ix.highest):
            # grown with room on the side it grows (a stream's new ids extend it commit by commit)
            room = span // 2
            low2 = max(low - room, -(1 << 63)) if ix.highest is not None and low < ix.low else low
            top = high + room if ix.highest is None or high >= ix.low + len(ix.highest) else high
            wide = np.full(top - low2 + 1, np.iinfo(kind).min, dtype=kind)
            if ix.highest is not None:
                wide[ix.low - low2 : ix.low - low2 + len(ix.highest)] = ix.highest
            ix.low, ix.highest = low2, wide
        assert ix.highest is not None
        for r, k in versions:
            assert k is not None
            at = k.astype(np.int64, copy=False) - ix.low
            best = np.take(ix.highest, at)
            np.maximum(best, r.column(column).to_numpy(), out=best)
            np.put(ix.highest, at, best)
    ix.files, ix.rows = frozenset(paths), rows
    late = np.zeros(len(keys), dtype=bool)
    if ix.highest is None:
        return late
    at = keys.astype(np.int64, copy=False) - ix.low
    # keys are sorted: those inside the index's range are one slice
    first, end = np.searchsorted(at, [0, len(ix.highest)])
    inside = slice(int(first), int(end))
    np.less(sequence[inside], np.take(ix.highest, at[inside]), out=late[inside])
    return late


def _turn_sorted(ix: _SplitIndex) -> None:
    ix.files, ix.dense, ix.low, ix.keys, ix.highest, ix.rows = frozenset(), False, 0, None, None, 0


def _late_sorted(
    ctx: TableContext,
    ix: _SplitIndex,
    paths: dict[str, FileEntry],
    newer: list[FileEntry],
    keys: np.ndarray,
    sequence: np.ndarray,
) -> np.ndarray | None:
    """The sorted index searched, and each file newer than it (folded in once there are too many)."""
    spec, storage = ctx.spec, ctx.storage
    column = spec.sequence_by[0]
    columns = lookup_columns(spec)
    if len(newer) > FOLD:
        versions = [file_versions(storage, spec, g, columns) for g in newer]
        if any(k is None and r.num_rows for r, k in versions):
            return None
        parts = [(k, r.column(column).to_numpy()) for r, k in versions if k is not None]
        ix.keys, ix.highest = _folded(ix.keys, ix.highest, parts)
        ix.files, newer = frozenset(paths), []
    late = np.zeros(len(keys), dtype=bool)
    if ix.keys is not None and ix.highest is not None:
        _mark_late(late, keys, sequence, slice(None), ix.keys, ix.highest)
    for g in newer:
        bounds = sequence_bounds(storage, g, column)
        at: Any = slice(None)
        if bounds is not None:  # only rows below the file's highest sequence can lose to it
            at = np.flatnonzero(sequence < bounds[1])
            if not len(at):
                continue
        rows, stored_keys = file_versions(storage, spec, g, columns)
        if not rows.num_rows:
            continue
        if stored_keys is None:
            return None
        _mark_late(late, keys, sequence, at, stored_keys, rows.column(column).to_numpy())
    return late


def _mark_late(
    late: np.ndarray, keys: np.ndarray, sequence: np.ndarray, at: Any, stored: np.ndarray, highest: np.ndarray
) -> None:
    """Mark the rows ``at`` whose key ``stored`` (sorted, unique) holds with a higher sequence."""
    if not len(stored):
        return
    probe = keys[at]
    pos = np.minimum(np.searchsorted(stored, probe), len(stored) - 1)
    late[at] |= (stored[pos] == probe) & (sequence[at] < highest[pos])


def _folded(
    keys: np.ndarray | None, highest: np.ndarray | None, parts: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``keys`` with their highest sequence, with more files' (sorted, unique) keys and
    sequences merged in: new arrays (the cached ones are shared with other threads)."""
    if keys is not None and highest is not None:
        parts = [(keys, highest), *parts]
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if len(parts) == 1:
        return parts[0][0].copy(), parts[0][1].copy()
    all_keys = np.concatenate([k for k, _ in parts])
    all_seq = np.concatenate([q for _, q in parts])
    order = np.argsort(all_keys, kind="stable")  # sorted runs: a merge
    all_keys, all_seq = all_keys[order], all_seq[order]
    starts = np.flatnonzero(np.r_[True, all_keys[1:] != all_keys[:-1]])
    return all_keys[starts], np.maximum.reduceat(all_seq, starts)


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


# -- table-wide keys: an index per bucket ------------------------------------------------------------

# Per bucket of a table with table-wide keys on one integer key column: each (key, partition)'s current
# version over the bucket's files in every partition (what merge on read keeps there), kept for the files
# it was built from. A commit folds in the files added since (a stream's commit adds one per split) and
# searches its keys there, instead of reading every stored file of its buckets. The index holds the rows
# the lookup of every file would give, reduced per (key, partition) by the rule :func:`_decide` applies
# first: the decision is the same. Rebuilt where a file it holds is gone (compaction, overwrite, an older
# base) or a new file is not newer than the ones it holds.
KEY_INDEX = True  # False: every lookup reads the stored files (tests compare the two)
_FILE, _ROW, _PARTNO = "__mere_file__", "__mere_row__", "__mere_partno__"


@dataclass
class _KeyIndex:
    files: frozenset[str]
    names: list[str]  # file number -> full path
    parts: list[str]  # partition number -> partition
    rows: pa.Table | None  # key, sequence, op, _FILE, _ROW, _PARTNO; sorted by key, then partition
    keys: np.ndarray | None
    lock: threading.Lock

    @property
    def nbytes(self) -> int:
        return 0 if self.rows is None else self.rows.nbytes

    def reset(self) -> None:
        self.files, self.names, self.parts, self.rows, self.keys = frozenset(), [], [], None, None


_key_index: OrderedDict[tuple[str, int], _KeyIndex] = OrderedDict()


def forget() -> None:
    """Drop both kinds of index and the kept files' columns (what a new process knows: nothing)."""
    with _index_lock:
        _index.clear()
        _key_index.clear()
    file_keys.forget()


def _indexed_versions(
    ctx: TableContext, stored: Sequence[FileEntry], codes: dict[str, int], wanted: pa.Table
) -> pa.Table | None:
    """What :func:`_versions` gives for the ``wanted`` keys from the ``stored`` files, reduced to each
    (key, partition)'s current version, from the buckets' indexes (None: the key is not one integer
    column, or a file's keys are not strictly increasing; the caller reads the files)."""
    spec, storage = ctx.spec, ctx.storage
    pk = spec.primary_key
    if len(pk) != 1 or spec.evolved or not pa.types.is_integer(spec.schema.field(pk[0]).type):
        return None
    ordered = sorted(stored, key=lambda f: (f.seq or 0, f.id or 0))  # the ranks _versions gives
    rank = {storage.full_path(f.path): i for i, f in enumerate(ordered)}
    bucket = wanted.column(_BUCKET).to_numpy()
    schema = _schema(spec)
    out = []
    for b in np.unique(bucket).tolist():
        probe = np.unique(wanted.column(pk[0]).filter(pa.array(bucket == b)).to_numpy())
        files = [f for f in ordered if f.bucket == b]
        found = _search_bucket(ctx, int(b), files, rank, probe, codes)
        if found is None:
            return None
        if found.num_rows:
            out.append(found)
    _account(_key_index)
    return pa.concat_tables([_aligned(t, schema) for t in out]) if out else schema.empty_table()


def _search_bucket(
    ctx: TableContext,
    bucket: int,
    files: list[FileEntry],
    rank: dict[str, int],
    probe: np.ndarray,
    codes: dict[str, int],
) -> pa.Table | None:
    """The bucket's index brought up to ``files`` (in rank order) and searched for the sorted unique
    ``probe`` keys."""
    storage = ctx.storage
    name = (storage.full_path(ctx.location), bucket)
    with _index_lock:
        ix = _key_index.get(name)
        if ix is None:
            ix = _key_index[name] = _KeyIndex(frozenset(), [], [], None, None, threading.Lock())
        _key_index.move_to_end(name)
    with ix.lock:  # one commit at a time updates and searches a bucket's index
        paths = [storage.full_path(f.path) for f in files]
        newer = [f for f, p in zip(files, paths) if p not in ix.files]
        if ix.files and (
            not ix.files <= set(paths)
            or (
                newer and min(rank[storage.full_path(f.path)] for f in newer) < max(rank[p] for p in ix.files)
            )
        ):
            ix.reset()
            newer = files
        if sum(f.row_count or 0 for f in files) > INDEX_BYTES // 32:
            ix.reset()  # too big to hold: read as before
            return None
        if newer and not _fold(ctx, ix, newer):
            ix.reset()
            return None
        ix.files = frozenset(paths)
        if ix.rows is None or ix.keys is None or not len(probe):
            return _schema(ctx.spec).empty_table()
        first = np.searchsorted(ix.keys, probe, side="left")
        count = np.searchsorted(ix.keys, probe, side="right") - first
        total = int(count.sum())
        ends = np.cumsum(count)
        at = np.repeat(first - (ends - count), count) + np.arange(total)
        rows = ix.rows.take(pa.array(at))
        part_code = np.asarray([codes[p] for p in ix.parts], dtype=np.int32)
        file_rank = np.asarray([rank[p] for p in ix.names], dtype=np.int64)
    spec = ctx.spec
    n = rows.num_rows
    file_no = rows.column(_FILE).to_numpy()
    return pa.table(
        {
            **{c: rows.column(c) for c in [*spec.primary_key, *spec.sequence_by, OP_COLUMN]},
            _PARTIAL: pa.repeat(pa.scalar(False), n),
            _PART: pa.array(part_code[rows.column(_PARTNO).to_numpy()], pa.int32()),
            _RANK: pa.array(file_rank[file_no] * (1 << 32) + rows.column(_ROW).to_numpy(), pa.int64()),
            _NEW: pa.repeat(pa.scalar(False), n),
            _BUCKET: pa.repeat(pa.scalar(bucket, pa.int32()), n),
        }
    )


def _fold(ctx: TableContext, ix: _KeyIndex, newer: Sequence[FileEntry]) -> bool:
    """Fold ``newer`` files (each newer than every file the index holds, in rank order) into the index:
    False where a file's keys are not one strictly increasing integer column."""
    spec, storage = ctx.spec, ctx.storage
    columns = lookup_columns(spec)
    schema = pa.schema(
        [
            *(spec.schema.field(c).with_nullable(True) for c in columns if c != OP_COLUMN),
            pa.field(OP_COLUMN, pa.int8()),
            pa.field(_FILE, pa.int32()),
            pa.field(_ROW, pa.int64()),
            pa.field(_PARTNO, pa.int32()),
        ]
    )
    parts = [] if ix.rows is None else [ix.rows]
    for f in newer:
        rows, keys = file_versions(storage, spec, f, columns)
        if not rows.num_rows:
            continue
        if keys is None:
            return False
        if f.partition not in ix.parts:
            ix.parts.append(f.partition)
        n = rows.num_rows
        ix.names.append(storage.full_path(f.path))
        piece = (
            rows.select(columns)
            .append_column(_FILE, pa.repeat(pa.scalar(len(ix.names) - 1, pa.int32()), n))
            .append_column(_ROW, pa.array(np.arange(n, dtype=np.int64)))
            .append_column(_PARTNO, pa.repeat(pa.scalar(ix.parts.index(f.partition), pa.int32()), n))
        )
        parts.append(_aligned(piece, schema))  # (files read back and kept ones differ in nullability)
    if len(parts) == (0 if ix.rows is None else 1):
        return True
    both = pa.concat_tables(parts)
    keys = np.concatenate([p.column(spec.primary_key[0]).to_numpy() for p in parts])
    part = np.concatenate([p.column(_PARTNO).to_numpy() for p in parts])
    low, high = int(keys.min()), int(keys.max())
    if high - low < (1 << 47) and len(ix.parts) < (1 << 16):  # one int64 per (key, partition)
        packed = ((keys.astype(np.int64) - low) << 16) | part  # (keys are signed: no uint64 keys)
        order = np.argsort(packed, kind="stable")  # sorted runs, older first within a (key, partition)
    else:
        order = np.lexsort((part, keys))  # stable, as well
    keys, part = keys[order], part[order]
    starts = np.empty(len(keys), dtype=bool)
    starts[0] = True
    starts[1:] = (keys[1:] != keys[:-1]) | (part[1:] != part[:-1])
    if spec.sequence_by:
        sequence = both.select(spec.sequence_by).take(pa.array(order))
        current = last_by_sequence(starts, [sequence.column(s) for s in spec.sequence_by])
    else:
        current = np.r_[np.flatnonzero(starts)[1:] - 1, len(keys) - 1]
    ix.rows = both.take(pa.array(order[current])).combine_chunks()
    ix.keys = keys[current]
    return True


# -- reading versions -------------------------------------------------------------------------------------


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
    offset = _INCOMING if incoming_rank else 0
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
        rows, keys = file_versions(storage, spec, f, columns)
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


def _bounds(ctx: TableContext, files: Sequence[FileEntry], column: str) -> tuple[Any, Any] | None:
    """The smallest and largest value of ``column`` in ``files`` by their statistics (None: unknown)."""
    lo: Any = None
    hi: Any = None
    for f in files:
        known = sequence_bounds(ctx.storage, f, column)
        if known is None:
            return None
        lo = known[0] if lo is None else min(lo, known[0])
        hi = known[1] if hi is None else max(hi, known[1])
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


def _decide(
    spec: TableSpec,
    versions: pa.Table,
    cross_partition: bool,
    partitions: list[str],
    incoming_files: Sequence[FileEntry],
    counted: frozenset[str] | None,
) -> Resolution:
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
        # On equal sequences a stored delete loses to everything else, then the later commit wins: the
        # markers a lookup writes carry their winner's sequence, and must not win over it at the next
        # lookup; a delete this commit brings wins over a stored row, as it does in the row's partition.
        ops_now = current.column(OP_COLUMN).to_numpy(zero_copy_only=False)
        incoming = current.column(_NEW).to_numpy(zero_copy_only=False)
        tiebreak = [np.asarray((ops_now != OP_DELETE) | incoming, np.int8)] if seq else []
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
            lost = _seq_less([mine_rows.column(s) for s in seq], [wins.column(s) for s in seq])
            rank = mine_rows.column(_RANK).to_numpy()
            if counted is not None:
                paths = np.array([f.path in counted for f in incoming_files])
                lost &= paths[(rank >> 32) - _INCOMING]
            stale = int(np.count_nonzero(lost))
            if any(f.ties for f in incoming_files):
                rank = rank[lost]
                file_no, row = (rank >> 32) - _INCOMING, rank & 0xFFFFFFFF
                stale += sum(
                    _tied_to(incoming_files[i], row[file_no == i]) for i in np.unique(file_no).tolist()
                )
    return Resolution(markers, stale)


def _refuse_partial_moves(spec: TableSpec, c: pa.Table, win_at: np.ndarray, elsewhere: np.ndarray) -> None:
    """A partial row cannot move its key: its other columns live in the old partition's row."""
    partial = c.column(_PARTIAL).to_numpy(zero_copy_only=False)
    mine = partial[win_at] & elsewhere  # a key whose partial winner is live in another partition too
    if mine.any():
        i = int(win_at[np.flatnonzero(mine)[0]])
        key = first_row(c.select(spec.primary_key).slice(i, 1))
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
