"""Key lookups: read only the files, row groups and pages of a split that may hold the keys asked for.

A scan whose filter pins the whole primary key (``id = 5``, ``id IN (...)``, ``(a = 1 AND b = 2) OR
...``), and a MERGE probing its source keys, know the keys they want. For them:

1. Bloom filters on the key columns rule out row groups, and so files, that cannot hold any of the
   keys (:func:`bloom_pruned`; the reader applies it with the statistics, so ``explain()`` shows it).
2. Lookups (at most a few hundred keys, or a small MERGE source) then read the key columns first, only
   of the pages whose min/max may hold a key, which gives the exact rows of the keys (:func:`read`).
3. A version that settles its key (a delete, a PUT, or a whole row when every column read merges
   newest-wins) makes the key's older versions irrelevant: those are not read at all. (Not in tables
   with ``sequence_by``, where an older file may hold the winner: every version of the keys is read.)
4. The other columns are read only of the pages holding the rows left.

A MERGE source of more keys is looked up the same way where its keys fall in a narrow key range: when
the pages whose min/max may hold one are a small share of the row groups that may (:func:`few_pages`).

Nothing is ever skipped that could hold a key: Bloom filters have no false negatives, and files
written before mere indexed keys (or anything this code does not understand) are read as they always
were, by whole row groups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import bool_array
from mere.hashing import bucket_ids
from mere.io import keyindex
from mere.io.footer import primitive_leaf
from mere.io.storage import Storage
from mere.kernels import group_starts, sort_indices
from mere.read.evolution import (
    FileColumns,
    file_columns,
    in_table_types,
    to_table_columns,
    without_field_ids,
)
from mere.read.options import ReadOptions
from mere.read.planner import FileTask, Split
from mere.spec import OP_COLUMN, OP_DELETE, OP_MERGE, OP_PUT, TableSpec

__all__ = ["FileSource", "FirstKeys", "bloom_pruned", "few_pages", "probe_keys", "read"]

BLOOM_MAX_KEYS_PER_GROUP = 64  # more candidate keys in a row group: it almost surely holds one
# A read of many keys looks them up (key columns of their pages first) when the pages that may hold one
# are at most this share of the rows of the row groups that may: keys in a narrow key range.
FEW_PAGES_SHARE = 0.75
FIRST_KEYS_SAMPLE = 4096  # keys whose spread over row groups tells whether to look at their pages
_RG, _ROW = "__mere_rg__", "__mere_row__"
_T = TypeVar("_T")
_R = TypeVar("_R")

_points_lock = threading.Lock()


class FileSource(Protocol):
    """What the lookup needs of a reader's file cursor: the file, its candidate row groups, the table
    columns it gives, how its own columns map to them (tables whose columns changed), and a read of some
    of its row groups as table columns (``load``)."""

    @property
    def spec(self) -> TableSpec: ...
    @property
    def task(self) -> FileTask: ...
    @property
    def groups(self) -> Sequence[Any]: ...  # candidate row groups (``.index``)
    @property
    def columns(self) -> Sequence[str]: ...
    @property
    def row_counts(self) -> Sequence[int]: ...
    @property
    def mapping(self) -> FileColumns | None: ...
    @property
    def fill(self) -> Sequence[str]: ...

    def load(
        self, groups: Sequence[int], columns: Sequence[str], dictionary: Sequence[str] = ()
    ) -> pa.Table: ...


def _points(spec: TableSpec, pre: E.Expr) -> pa.Table | None:
    """The key tuples a filter pins (cached on the filter: a scan plans many splits)."""
    layout = tuple((k, str(spec.schema.field(k).type)) for k in spec.primary_key)
    with _points_lock:
        cache = pre.__dict__.setdefault("_mere_key_points", {})
        if layout not in cache:
            keys: pa.Table | None = None
            points = E.key_points(pre, spec.primary_key)
            if points is not None:
                columns: list[Sequence[Any]] = (
                    list(zip(*points)) if points else [[] for _ in spec.primary_key]
                )
                try:
                    keys = pa.table(
                        {
                            k: pa.array(list(c), type=spec.schema.field(k).type)
                            for k, c in zip(spec.primary_key, columns)
                        }
                    )
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    keys = None  # a value the key column cannot hold: look nothing up by index
            cache[layout] = keys
        return cast("pa.Table | None", cache[layout])


def probe_keys(spec: TableSpec, opts: ReadOptions, bucket: int) -> pa.Table | None:
    """The key tuples (primary key columns) a read looks for in one bucket, or None when it looks for
    no particular keys: MERGE's source keys (``opts.keys``), else those the pre-merge filter pins."""
    if not spec.primary_key:
        return None
    keys = opts.keys if opts.keys is not None else _points(spec, opts.pre)
    if keys is None or keys.num_rows == 0 or spec.buckets <= 1:
        return keys
    ids = bucket_ids([keys.column(k) for k in spec.primary_key], spec.buckets)
    return keys.filter(pa.array(np.asarray(ids) == bucket))


def _map(pool: Executor | None, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    if pool is None or len(items) <= 1:
        return [fn(x) for x in items]
    return list(pool.map(fn, items))


class _Encoder:
    """Probe values per key column, encoded once per distinct way files store that column."""

    def __init__(self, keys: pa.Table) -> None:
        self.keys = keys
        self._done: dict[tuple[str, str, str, int], keyindex.ProbeValues | None] = {}
        self._lock = threading.Lock()

    def values(self, column: str, schema: Any, leaf: int) -> keyindex.ProbeValues | None:
        stored = schema.column(leaf)
        how = (column, stored.physical_type, str(stored.logical_type), int(stored.length or 0))
        with self._lock:
            if how not in self._done:
                array = self.keys.column(column).combine_chunks()
                self._done[how] = keyindex.probe_values(array, stored)
            return self._done[how]


def bloom_pruned(
    storage: Storage, spec: TableSpec, split: Split, opts: ReadOptions, pool: Executor | None
) -> dict[str, set[int]]:
    """Per file of the split, the row groups its Bloom filters rule out for every key the read looks
    for (only for reads that look for particular keys; files without filters rule nothing out)."""
    keys = probe_keys(spec, opts, split.bucket)
    if keys is None or keys.num_rows == 0:
        return {}
    encoder = _Encoder(keys)
    # On object stores a lookup's next request (page indexes) rides along with the filters' blocks.
    ahead = None
    if opts.lookup and storage.is_remote:
        used = E.columns(opts.post)
        ahead = {
            *opts.columns,
            *spec.identity_columns,
            OP_COLUMN,
            *(spec.schema.names if used is None else used),
        }

    def one(task: FileTask) -> set[int]:
        size = task.size_bytes or None
        md = storage.metadata(task.path, size)
        leaves = storage.column_leaves(task.path, size)
        prefetch = None
        if ahead is not None:
            file_leaves = [i for c, v in leaves.items() if c in ahead or c == OP_COLUMN for i in v]
            key0 = primitive_leaf(md, leaves, spec.primary_key[0])
            prefetch = None if key0 is None else (file_leaves, key0)
        if spec.evolved:  # the file's columns by their table names
            mapping = file_columns(spec, md)
            leaves = {mapping.to_table[n]: v for n, v in leaves.items() if n in mapping.to_table}
            prefetch = None  # (renamed columns: no guessing which leaves the read wants)
        columns = []  # (leaf, probe values) of the key columns the file has filters for
        for k in spec.primary_key:
            leaf = primitive_leaf(md, leaves, k)
            if (
                leaf is None
                or md.num_row_groups == 0
                or md.row_group(0).column(leaf).bloom_filter_offset is None
            ):
                continue
            values = encoder.values(k, md.schema, leaf)
            if values is not None:
                columns.append((leaf, values))
        if not columns:
            return set()
        index = keyindex.file_index(storage, task.path, size)
        leaf0, values0 = columns[0]
        probes: dict[int, list[tuple[int, np.ndarray]]] = {}
        for rg in range(md.num_row_groups):
            bounds = index.stats_range(rg, leaf0)
            near = None if bounds is None else values0.within(*bounds)  # keys its min/max admit
            count = len(values0.hashes) if near is None else len(near)
            if count == 0 or count > BLOOM_MAX_KEYS_PER_GROUP:
                continue  # statistics rule the row group out already, or its filter would cost too much
            probes[rg] = [(leaf, v.hashes if near is None else v.hashes[near]) for leaf, v in columns]
        if not probes:
            return set()
        return keyindex.bloom_excluded(storage, task.path, size, probes, prefetch)

    return {t.path: out for t, out in zip(split.files, _map(pool, one, split.files)) if out}


def read(
    storage: Storage,
    spec: TableSpec,
    split: Split,
    files: Sequence[FileSource],
    needed: Sequence[str],
    opts: ReadOptions,
    filter_: Callable[[pa.Table, E.Expr], pa.Table],
    pool: Executor | None,
) -> list[tuple[FileTask, pa.Table]]:
    """The versions of the looked-up keys that the merge needs, per file (in the split's order).

    ``files`` are the split's file cursors (with their candidate row groups), ``needed`` the columns
    the merge reads. Each table holds a file's ``columns`` for its rows that pass the pre-merge filter
    (and, for a MERGE, hold a source key), leaving out older versions settled by newer ones.
    """
    keys = probe_keys(spec, opts, split.bucket)
    identity = [*spec.identity_columns, OP_COLUMN]
    pk = list(spec.primary_key)
    key0 = pk[0]
    encoder = _Encoder(keys) if keys is not None and keys.num_rows else None
    # A filter on key columns only holds for a row exactly when it holds for its key: then the keys that
    # pass it, joined with the files' keys, stand for it (a hash lookup rather than a filter per file).
    used = E.columns(opts.pre)
    by_keys = None
    if keys is not None and used is not None and used <= set(pk):
        by_keys = filter_(keys, opts.pre)

    def key_rows(f: FileSource) -> pa.Table | None:
        """Identity columns and operation of the rows passing the filter, with their positions."""
        groups = [g.index for g in f.groups]
        cols = [c for c in identity if c in f.columns]
        candidates = _candidate_rows(storage, f, groups, _probe(storage, f, key0, encoder), f.columns)
        wanted = {rg: candidates.get(rg) for rg in groups}
        wanted = {rg: rows for rg, rows in wanted.items() if rows is None or len(rows)}
        if not wanted:
            return None
        table = _read(storage, f, wanted, cols)
        joined = None if by_keys is None else _semi_join(table, by_keys, pk)
        if joined is not None:
            table = joined
        else:
            table = filter_(table, opts.pre)
            if opts.keys is not None and keys is not None and table.num_rows:
                # A MERGE joins its source with the merged rows again: unjoined rows only cost time.
                joined = _semi_join(table, keys, pk)
                table = table if joined is None else joined
        return table if table.num_rows else None

    found = _map(pool, key_rows, files)
    keep = _unsettled(spec, [f.task for f in files], found, needed)

    def rows_of(i: int) -> pa.Table | None:
        f, hits = files[i], found[i]
        if hits is None or not keep[i].any():
            return None
        hits = hits.filter(bool_array(keep[i]))
        hits = hits.take(pa.array(np.lexsort([_np(hits, _ROW), _np(hits, _RG)])))
        rest = [c for c in f.columns if c not in hits.column_names]
        if rest:
            values = _values(storage, f, hits, rest)
            for c in rest:
                hits = hits.append_column(values.schema.field(c), values.column(c))
        return hits.select([c for c in f.columns if c in hits.column_names])

    tables = _map(pool, rows_of, list(range(len(files))))
    return [(f.task, t) for f, t in zip(files, tables) if t is not None and t.num_rows]


class FirstKeys:
    """The first key column of the keys a read looks for, as each way files store it, sorted when first
    needed and shared by the reads of every split (see :func:`few_pages`); a sample of at most
    ``FIRST_KEYS_SAMPLE`` of them answers the first, rough question."""

    def __init__(self, spec: TableSpec, keys: pa.Table) -> None:
        self.key0 = spec.primary_key[0]
        column = keys.select([self.key0])
        self.encoder = _Encoder(column)
        step = -(-column.num_rows // FIRST_KEYS_SAMPLE)
        self.sample = (
            self.encoder if step <= 1 else _Encoder(column.take(np.arange(0, column.num_rows, step)))
        )


def few_pages(
    storage: Storage, files: Sequence[FileSource], keys: FirstKeys, pool: Executor | None = None
) -> bool:
    """Whether the pages that may hold one of ``keys`` (their first key column's min/max admits one)
    are at most ``FEW_PAGES_SHARE`` of the rows of the files' candidate row groups: keys in a narrow key
    range, which :func:`read` gets from those pages rather than from whole row groups. Row groups
    without a page index count whole.

    Row group statistics answer first, without the page index: keys spread over most of the key range
    of their row groups leave few pages out. Otherwise each file's page index is fetched (what
    :func:`read` reads first anyway). Only sorted values are compared: nothing is hashed, and a wrong
    guess costs bytes or time, never rows."""
    rows = [sum(int(f.row_counts[g.index]) for g in f.groups) for f in files]
    total = sum(rows)
    if total == 0:
        return False
    spread = 0.0  # rows of row groups whose key range the keys span, in part: that part of them
    for f, n in zip(files, rows):
        sample = _probe(storage, f, keys.key0, keys.sample)
        if sample is None:
            spread += n
            continue
        index, leaf, values = sample
        for g in f.groups:
            span = _key_span(index, leaf, values, g.index)
            spread += f.row_counts[g.index] * (1.0 if span is None else span)
    if spread > FEW_PAGES_SHARE * total:
        return False

    def one(i: int) -> int:
        f = files[i]
        probe = _probe(storage, f, keys.key0, keys.encoder)
        if probe is None:
            return rows[i]
        groups = [g.index for g in f.groups]
        # (with the offset indexes a lookup reads next: one request for both)
        candidates = _candidate_rows(storage, f, groups, probe, f.columns)
        return sum(len(candidates[rg]) if rg in candidates else int(f.row_counts[rg]) for rg in groups)

    return sum(_map(pool, one, list(range(len(files))))) <= FEW_PAGES_SHARE * total


def _key_span(index: keyindex.FileIndex, leaf: int, probe: keyindex.ProbeValues, rg: int) -> float | None:
    """The share of a row group's key range (its statistics' min to max) that the probe values within it
    span: 0 when none is in it, None when it cannot tell. Strings and binaries are measured by the 8
    bytes after the prefix their min and max share (every value between them has that prefix)."""
    bounds = index.stats_range(rg, leaf)
    if bounds is None:
        return None
    low, high = bounds
    order = probe.order
    start = int(np.searchsorted(order, low, side="left"))
    end = int(np.searchsorted(order, high, side="right"))
    if end <= start:
        return 0.0
    first, last = order[start], order[end - 1]
    if isinstance(low, bytes) and isinstance(high, bytes):
        a, b = np.frombuffer(low, np.uint8), np.frombuffer(high, np.uint8)
        differ = np.flatnonzero(a[: len(b)] != b[: len(a)])
        shared = int(differ[0]) if len(differ) else min(len(a), len(b))

        def number(value: bytes) -> int:
            return int.from_bytes(value[shared : shared + 8].ljust(8, b"\0"), "big")

        low, high, first, last = number(low), number(high), number(first), number(last)
    if not all(isinstance(v, (int, np.integer)) for v in (low, high, first, last)):
        return None
    return None if high <= low else (int(last) - int(first)) / (int(high) - int(low))


def _probe(
    storage: Storage, f: FileSource, key0: str, encoder: _Encoder | None
) -> tuple[keyindex.FileIndex, int, keyindex.ProbeValues] | None:
    """The file's key index, the leaf of the first key column and the probe values as the file stores
    them; None when the file has no page index or the values cannot be compared with its statistics."""
    task = f.task
    size = task.size_bytes or None
    index = keyindex.file_index(storage, task.path, size)
    if not index.has_page_index or encoder is None:
        return None
    md = index.md
    leaves = storage.column_leaves(task.path, size)
    file0 = key0 if f.mapping is None else f.mapping.from_table.get(key0)
    leaf0 = None if file0 is None else primitive_leaf(md, leaves, file0)
    probe = None if leaf0 is None else encoder.values(key0, md.schema, leaf0)
    return None if probe is None or leaf0 is None else (index, leaf0, probe)


def _candidate_rows(
    storage: Storage,
    f: FileSource,
    groups: Sequence[int],
    probe: tuple[keyindex.FileIndex, int, keyindex.ProbeValues] | None,
    columns: Sequence[str],
) -> dict[int, np.ndarray]:
    """Per row group of ``groups``, the rows of the file's pages whose first key column's min/max may
    hold a probe value (row groups left out: all rows may). The same request fetches the offset indexes
    of ``columns``, which a lookup reads next."""
    if probe is None:
        return {}
    _, leaf0, values = probe
    task = f.task
    size = task.size_bytes or None
    leaves = storage.column_leaves(task.path, size)
    others = [i for c in _file_names(f, columns) for i in leaves.get(c, ())]
    return keyindex.candidate_rows(storage, task.path, size, groups, leaf0, values, others)


def _np(table: pa.Table, column: str) -> np.ndarray:
    return np.asarray(table.column(column).to_numpy())


def _with_positions(table: pa.Table, groups: np.ndarray, rows: np.ndarray) -> pa.Table:
    return table.append_column(_RG, pa.array(groups, pa.int64())).append_column(
        _ROW, pa.array(rows, pa.int64())
    )


def _file_names(f: FileSource, columns: Sequence[str]) -> list[str]:
    return list(columns) if f.mapping is None else f.mapping.file_names(columns)


def _read(
    storage: Storage, f: FileSource, wanted: Mapping[int, np.ndarray | None], columns: Sequence[str]
) -> pa.Table:
    """Rows of some row groups (``wanted[rg]``: sorted positions, None for all) as table columns, in row
    group order, with their row group and position: from the pages holding them where that is cheaper,
    the rest read whole (one request each way)."""
    size = f.task.size_bytes or None
    leaves = storage.column_leaves(f.task.path, size)
    stored = [c for c in columns if c not in f.fill]
    partial = {rg: rows for rg, rows in wanted.items() if rows is not None and len(rows) < f.row_counts[rg]}
    paged = (
        keyindex.read_rows(storage, f.task.path, size, partial, _file_names(f, stored), leaves)
        if partial
        else {}
    )
    whole = [rg for rg in sorted(wanted) if rg not in paged]
    loaded = f.load(whole, columns) if whole else None
    parts = []
    offset = 0
    for rg in sorted(wanted):
        rows = wanted[rg]
        if rg in paged:
            part = paged[rg]
            part = (
                in_table_types(without_field_ids(part), f.spec)
                if f.mapping is None
                else to_table_columns(part, f.mapping, f.spec, [c for c in f.fill if c in columns])
            )
        else:
            assert loaded is not None
            n = f.row_counts[rg]
            part = loaded.slice(offset, n)
            offset += n
            if rows is not None and len(rows) < n:
                part = part.take(pa.array(rows, pa.int64()))
        positions = np.arange(f.row_counts[rg], dtype=np.int64) if rows is None else rows
        parts.append(
            _with_positions(part.select(list(columns)), np.full(len(positions), rg, np.int64), positions)
        )
    return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]


def _values(storage: Storage, f: FileSource, hits: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``columns`` of the rows in ``hits`` (sorted by row group and row), in that order."""
    groups, rows = _np(hits, _RG), _np(hits, _ROW)
    bounds = np.flatnonzero(np.diff(groups)) + 1
    wanted = {
        int(groups[a]): rows[a:b]
        for a, b in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(groups)].tolist())
    }
    return _read(storage, f, wanted, columns)


def _semi_join(table: pa.Table, keys: pa.Table, columns: list[str]) -> pa.Table | None:
    """Rows of ``table`` whose key is one of ``keys`` (order kept); None when the file's key columns
    cannot be compared as the keys' types (a file may hold a narrower type, or a finer time unit)."""
    try:
        mine = {c: table.column(c).cast(keys.schema.field(c).type) for c in columns}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if len(columns) == 1:
        c = columns[0]
        return table.filter(pc.is_in(mine[c], value_set=keys.column(c).combine_chunks()))
    probe = pa.table({**mine, "__mere_pos__": pa.array(np.arange(table.num_rows), pa.int64())})
    found = probe.join(keys.select(columns), keys=columns, join_type="left semi", use_threads=False)
    return table.take(pa.array(np.sort(_np(found, "__mere_pos__")), pa.int64()))


def _unsettled(
    spec: TableSpec, tasks: Sequence[FileTask], found: Sequence[pa.Table | None], needed: Collection[str]
) -> list[np.ndarray]:
    """Per file, which of its found rows the merge needs: a key's versions from the newest back to the
    first one that settles it. A version settles its key when it deletes it or puts a new row (older
    versions are then ignored by every merge operator), or when it merges a whole row and every column
    the read needs merges newest-wins (``last``)."""
    sizes = [0 if t is None else t.num_rows for t in found]
    keep = [np.ones(n, dtype=bool) for n in sizes]
    present = [i for i, t in enumerate(found) if t is not None and t.num_rows]
    if len(present) <= 1 or spec.sequence_by:
        # With sequence_by an older file may hold a key's winner (a higher sequence): every version of
        # the looked-up keys goes to the merge, which orders them by sequence.
        return keep
    values = [c for c in needed if c not in spec.identity_columns and c != OP_COLUMN]
    last_only = all(spec.operator(c).name == "last" for c in values)
    tables = [found[i] for i in present]
    cols = list(spec.primary_key)  # a split is one partition: the key tells versions apart
    combined = pa.concat_tables(
        [t.select(cols) for t in tables if t is not None], promote_options="permissive"
    )
    file_no = np.repeat(np.asarray(present, dtype=np.int64), [sizes[i] for i in present])
    ops = np.concatenate(
        [
            _np(t, OP_COLUMN).astype(np.int8)
            if OP_COLUMN in t.column_names
            else np.zeros(t.num_rows, np.int8)
            for t in tables
            if t is not None
        ]
    )
    whole = np.array(
        [
            t.content == "delete" or (last_only and (t.columns is None or set(values) <= set(t.columns)))
            for t in tasks
        ],
        dtype=bool,
    )
    settles = (ops == OP_DELETE) | (ops == OP_PUT) | ((ops == OP_MERGE) & whole[file_no])
    # Newest first within each key (files are in sequence order, newest last).
    order = sort_indices([combined.column(c) for c in cols] + [-file_no])
    sorted_keys = [combined.column(c).take(pa.array(order)) for c in cols]
    starts = group_starts(sorted_keys, len(order))
    s = settles[order].astype(np.int64)
    before = np.cumsum(s) - s  # settling versions newer than this one, over all keys so far
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    needed_sorted = (before - before[first][group]) == 0
    flags = np.empty(len(order), dtype=bool)
    flags[order] = needed_sorted
    offset = 0
    for i in present:
        keep[i] = flags[offset : offset + sizes[i]]
        offset += sizes[i]
    return keep
