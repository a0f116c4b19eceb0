"""Merge-on-read of one split, streamed in key-range windows with bounded memory."""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mere import expr as E
from mere.arrays import bool_array, is_binary_like, sorted_unique
from mere.concurrency import default_threads, run_on_daemon_thread, shared_pool
from mere.errors import FilterError
from mere.io import Storage
from mere.io.footer import primitive_leaf
from mere.kernels import (
    group_starts,
    key_columns,
    operation_codes,
    reduce_versions,
    sequence_columns,
    sort_indices,
)
from mere.read import counting, lookup, order_free, selective
from mere.read.evolution import (
    FileColumns,
    file_columns,
    in_table_types,
    stored_as_table,
    to_table_columns,
)
from mere.read.newest_wins import first_wins, newest_wins
from mere.read.options import ReadOptions
from mere.read.planner import Explain, FileTask, Split, row_group_stats
from mere.spec import OP_COLUMN, OP_DELETE, TOMBSTONE_TIME_COLUMN, TableSpec

RELEASE_EVERY_WINDOWS = 2
LOOKUP_MAX_KEYS = 256
DICTIONARY_MIN_ROWS = 1 << 15  # splits whose files are all smaller read dictionary-encoded strings plain
BATCH_ROWS = 128 * 1024

IO_THREADS = 64  # threads mostly wait on the network; pyarrow's own IO pool does the transfers
FILES_AHEAD = 8  # files of a table without primary key read ahead of the one being returned
SPLITS_AHEAD = 4  # splits whose footers are fetched ahead of the splits being merged


def io_pool() -> ThreadPoolExecutor:
    """Threads for file IO (fork-aware, started on demand); separate from split workers so nested waits
    cannot deadlock: IO tasks never wait on other IO tasks."""
    return shared_pool("io", IO_THREADS)


@dataclass
class _RowGroup:
    index: int
    bytes: int
    min0: Any
    max0: Any


class _FileCursor:
    """Reads one file's selected row groups in key order, keeping only rows not yet handed out."""

    def __init__(
        self,
        storage: Storage,
        spec: TableSpec,
        task: FileTask,
        needed: Sequence[str],
        opts: ReadOptions,
        explain: Explain | None,
        ruled_out: Collection[int] = (),
    ) -> None:
        self.storage, self.spec, self.task, self.opts = storage, spec, task, opts
        footer = storage.footer(task.path, task.size_bytes or None)
        md, leaves, cache = footer.metadata, footer.leaves, footer.extra
        row_counts = cache.get("row_counts")
        if row_counts is None:
            row_counts = cache["row_counts"] = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        self.row_counts: list[int] = row_counts
        # Tables whose columns changed map each file's columns by field id; full files written before a
        # column was added read its default.
        self.mapping: FileColumns | None = None
        self.fill: list[str] = []
        if spec.evolved:
            mapping = self.mapping = file_columns(spec, md)
            leaves = {mapping.to_table[n]: v for n, v in leaves.items() if n in mapping.to_table}
            if task.content != "delete":
                self.fill = mapping.defaulted(spec, needed, whole_rows=task.columns is None)
            if task.columns is not None:  # a partial file holds its columns and the defaults it predates
                cols = tuple(mapping.to_table[c] for c in task.columns if c in mapping.to_table)
                self.task = task = replace(task, columns=cols + tuple(self.fill))
        key0 = spec.primary_key[0] if spec.primary_key else None
        stats_cols = sorted(E.columns(opts.pre) or set())
        if key0 is not None and key0 not in stats_cols:
            stats_cols.append(key0)
        # What a read of these columns derives from the footer, kept with it: a scan of many small files
        # would otherwise walk every footer again on every scan. Not for evolved tables (their columns map
        # through the spec).
        types = [str(spec.schema.field(c).type) for c in stats_cols if c in spec.schema.names]
        layout_key = f"layout:{tuple(needed)}:{opts.dictionary}:{stats_cols}:{types}"
        layout = None if spec.evolved else cache.get(layout_key)
        if layout is None:
            names = frozenset(leaves) | frozenset(self.fill)
            columns = tuple(c for c in needed if c in names)
            dictionary = tuple(c for c in opts.dictionary if c in leaves and _dictionary_pages(md, leaves, c))
            read_leaves = [i for c in columns if c in leaves for i in leaves[c]]
            read_bytes = footer.group_bytes(read_leaves)
            layout = (
                names,
                columns,
                dictionary,
                _cached_stats(cache, md, spec.schema, stats_cols, leaves),
                read_bytes[0].tolist(),
                read_bytes[1].tolist(),
            )
            if not spec.evolved:
                cache[layout_key] = layout
        names, columns, dictionary, all_stats, uncompressed, stored = layout
        self.names: frozenset[str] = names
        self.columns, self.dictionary = list(columns), list(dictionary)
        self.groups: list[_RowGroup] = []
        for i in range(md.num_row_groups):
            stats = all_stats[i]
            if explain is not None:
                explain.row_groups_total += 1
            if not isinstance(opts.pre, E.AlwaysTrue) and not E.might_match(opts.pre, stats):
                continue
            if i in ruled_out:  # by the key index: no key looked for is in this row group
                continue
            k = stats.get(key0) if key0 else None
            self.groups.append(_RowGroup(i, int(uncompressed[i]), k.min if k else None, k.max if k else None))
            if explain is not None:  # the stored bytes of the kept row groups' columns that are read
                explain.bytes_kept += int(stored[i])
        if explain is not None:
            explain.row_groups_kept += len(self.groups)
            if self.groups:
                explain.files_kept += 1
        self.next = 0
        self.buffer: pa.Table | None = None

    @property
    def estimated_bytes(self) -> int:
        return sum(g.bytes for g in self.groups)

    def load(self, groups: Sequence[int], columns: Sequence[str], dictionary: Sequence[str] = ()) -> pa.Table:
        """Row groups of the file, as the table's columns."""
        size = self.task.size_bytes or None
        threaded = self.opts.threads != 1
        m = self.mapping
        if m is None:
            # Rows keep pyarrow's field-id metadata: _finish builds the output from the table's fields.
            rows = self.storage.read_row_groups(
                self.task.path, groups, columns, size, dictionary, use_threads=threaded
            )
            return in_table_types(rows, self.spec)
        table = self.storage.read_row_groups(
            self.task.path,
            groups,
            m.file_names(columns),
            size,
            m.file_names(dictionary),
            use_threads=threaded,
        )
        return to_table_columns(table, m, self.spec, [c for c in self.fill if c in columns])

    def _read(self, groups: list[_RowGroup]) -> pa.Table | None:
        if not groups:
            return None
        idx = [g.index for g in groups]
        return filter_rows(self.load(idx, self.columns, self.dictionary), self.opts.pre)

    def take_until(self, hi: Any) -> pa.Table | None:
        """Rows whose first key column is below ``hi`` (all remaining rows when ``hi`` is None)."""
        start = self.next
        if hi is None:
            self.next = len(self.groups)
        else:
            while self.next < len(self.groups) and (
                self.groups[self.next].min0 is None or self.groups[self.next].min0 < hi
            ):
                self.next += 1
        fresh = self._read(self.groups[start : self.next])
        parts = [t for t in (self.buffer, fresh) if t is not None and t.num_rows]
        if not parts:
            self.buffer = None
            return None
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        if hi is None:
            self.buffer = None
            return table
        k0 = table.column(self.spec.primary_key[0])
        below = pc.less(k0, pa.scalar(hi, type=k0.type))
        count = int(pc.sum(below).as_py() or 0)  # rows are sorted by key: a prefix
        self.buffer = table.slice(count) if count < table.num_rows else None
        return table.slice(0, count) if count else None


def _cached_stats(
    cache: dict[str, Any],
    md: pq.FileMetaData,
    schema: pa.Schema,
    columns: Sequence[str],
    leaves: Mapping[str, Sequence[int]],
) -> list[dict[str, E.ColumnStats]]:
    """``row_group_stats`` of every row group, each column's parsed once per file and kept with its footer
    (a scan of many small files would otherwise parse them again on every scan)."""
    out: list[dict[str, E.ColumnStats]] = [{} for _ in range(md.num_row_groups)]
    for c in columns:
        index = primitive_leaf(md, leaves, c)
        if index is None or c not in schema.names:
            continue
        key = f"stats:{index}:{schema.field(c).type}"
        per_group = cache.get(key)
        if per_group is None:
            per_group = cache[key] = [
                row_group_stats(md, i, schema, [c], leaves).get(c) for i in range(md.num_row_groups)
            ]
        for i, st in enumerate(per_group):
            if st is not None:
                out[i][c] = st
    return out


def _dictionary_pages(md: pq.FileMetaData, leaves: dict[str, list[int]], column: str) -> bool:
    """Whether a column's values are dictionary-encoded in this file (first row group), so reading them as
    dictionary costs no hashing."""
    index = primitive_leaf(md, leaves, column)
    if md.num_row_groups == 0 or index is None:
        return False
    return bool(md.row_group(0).column(index).has_dictionary_page)


def plain_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Dictionary-read columns cast back to their table type (pyarrow may also hand a large_string back)."""
    for i, f in enumerate(table.schema):
        if f.name in schema.names and (
            pa.types.is_dictionary(f.type) or (is_binary_like(f.type) and f.type != schema.field(f.name).type)
        ):
            table = table.set_column(
                i,
                pa.field(f.name, schema.field(f.name).type, f.nullable),
                table.column(i).cast(schema.field(f.name).type),
            )
    return table


def _nullable(table: pa.Table) -> pa.Table:
    if all(f.nullable for f in table.schema):
        return table
    return pa.Table.from_arrays(
        table.columns, schema=pa.schema([f.with_nullable(True) for f in table.schema])
    )


def filter_rows(table: pa.Table, predicate: E.Expr) -> pa.Table:
    """Rows for which ``predicate`` is TRUE.

    Conjuncts ``int_column IN (many values)`` are answered by a binary search in the values sorted once
    per scan: Arrow's is_in would build a hash table of every value again for each file read.
    """
    if isinstance(predicate, E.AlwaysTrue) or table.num_rows == 0:
        return table
    rest = []
    for part in E.conjuncts(predicate):
        sorted_values = _sorted_in_values(part, table)
        if sorted_values is None:
            rest.append(part)
            continue
        column = table.column(part.column)  # type: ignore[attr-defined]
        whole = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        # NULLs filled first: with them NumPy would get floats, and large integers would round.
        keys = (whole.fill_null(0) if whole.null_count else whole).to_numpy(zero_copy_only=False)
        pos = np.minimum(np.searchsorted(sorted_values, keys), len(sorted_values) - 1)
        hit = sorted_values[pos] == keys
        if column.null_count:
            hit &= column.is_valid().to_numpy(zero_copy_only=False)
        table = table.filter(bool_array(hit))
        if table.num_rows == 0:
            return table
    if not rest:
        return table
    try:
        return table.filter(E.to_pyarrow(E.conjunction(rest), table.schema))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        # e.g. integer overflow in the arithmetic of a filter: the user's expression, not mere, failed
        raise FilterError(f"evaluating the filter {E.render(predicate, 10)} failed: {exc}") from exc


SORTED_IN_MIN_VALUES = selective.SORTED_IN_MIN_VALUES  # below this Arrow's hash lookup is as cheap


def _sorted_in_values(part: E.Expr, table: pa.Table) -> np.ndarray | None:
    """The values of a plain ``int_column IN (...)`` conjunct, sorted as the column's NumPy type (cached on
    the node), or None when the conjunct is anything else."""
    if not isinstance(part, E.In) or part.negated or len(part.values) < SORTED_IN_MIN_VALUES:
        return None
    if part.column not in table.column_names:
        return None
    return sorted_in_values(part, table.schema.field(part.column).type)


_sorted_lock = threading.Lock()


def sorted_in_values(part: E.In, column_type: pa.DataType) -> np.ndarray | None:
    """See :func:`_sorted_in_values`; planning calls this first so that reader threads find it cached."""
    if not pa.types.is_integer(column_type):
        return None
    dtype = np.dtype(column_type.to_pandas_dtype())
    with _sorted_lock:
        cache = part.__dict__.setdefault("_sorted_by_dtype", {})
        if dtype not in cache:
            values = None
            if all(type(v) is int for v in part.values):  # else NULLs or unbound literals: Arrow decides
                try:
                    values = sorted_unique(np.array(part.values, dtype=dtype))
                except OverflowError:  # values the column cannot hold match nothing
                    info = np.iinfo(dtype)
                    lo, hi = int(info.min), int(info.max)
                    ints = cast("tuple[int, ...]", part.values)
                    values = sorted_unique(np.array([v for v in ints if lo <= v <= hi], dtype=dtype))
                if len(values) == 0:
                    values = None
            cache[dtype] = values
        return cast("np.ndarray | None", cache[dtype])


def warm_filter_caches(predicate: E.Expr, schema: pa.Schema) -> None:
    """Build the sorted IN values of a filter once, before reader threads need them."""
    for part in E.conjuncts(predicate):
        if (
            isinstance(part, E.In)
            and not part.negated
            and len(part.values) >= SORTED_IN_MIN_VALUES
            and part.column in schema.names
        ):
            sorted_in_values(part, schema.field(part.column).type)


def _windows(cursors: Sequence[_FileCursor], budget: int, whole: int = 0) -> list[Any]:
    """Upper bounds of key-range windows (exclusive) so that each window reads about ``budget`` bytes.

    A split of at most ``whole`` bytes is merged in one window: fewer, larger reads and sorts.
    """
    total = sum(c.estimated_bytes for c in cursors)
    if total <= max(budget, whole):
        return [None]
    groups = [g for c in cursors for g in c.groups]
    if any(g.min0 is None for g in groups):
        return [None]  # no statistics: one window
    groups.sort(key=lambda g: g.min0)
    bounds: list[Any] = []
    acc = 0
    for g in groups:
        if acc + g.bytes > budget and acc > 0 and (not bounds or g.min0 > bounds[-1]):
            bounds.append(g.min0)
            acc = 0
        acc += g.bytes
    bounds.append(None)
    return bounds


class _Deferred:
    """A read done when its result is asked for (single-threaded reads)."""

    def __init__(self, fn: Callable[[Any], pa.Table | None], arg: Any) -> None:
        self.fn, self.arg = fn, arg

    def result(self) -> pa.Table | None:
        return self.fn(self.arg)


class SplitReader:
    """Streams the merged rows of one split."""

    def __init__(
        self,
        storage: Storage,
        spec: TableSpec,
        split: Split,
        opts: ReadOptions,
        explain: Explain | None = None,
        merge_pool: Executor | None = None,
        windows_ahead: int = 1,
    ) -> None:
        self.storage, self.spec, self.split, self.opts = storage, spec, split, opts
        # Workers that merge this split's key windows concurrently (None: merged by the caller's thread).
        self.merge_pool, self.windows_ahead = merge_pool, windows_ahead
        self.output_schema = pa.schema([spec.schema.field(c) for c in opts.columns])
        needed = list(opts.columns)
        extra = list(spec.identity_columns)
        if spec.has_primary_key:
            extra += spec.sequence_by  # they order a key's versions
        for e in (opts.pre, opts.post):
            used = E.columns(e)  # None: an opaque pyarrow expression may read any column
            extra.extend(spec.schema.names if used is None else sorted(used))
        if spec.has_primary_key:
            grouped = spec.grouped  # a group's columns (read or filtered on) are ordered by its sequence
            extra += [grouped[c] for c in (*needed, *extra) if c in grouped]
            # A last_non_null column alone in its group decides whether a version carries the group.
            carriers = _group_carriers(spec)
            extra += [
                cs[0]
                for g, cs in spec.sequence_groups.items()
                if g in (*needed, *extra) and cs[0] in carriers
            ]
        for c in extra:
            if c not in needed:
                needed.append(c)
        self.needed = needed
        if spec.has_primary_key:
            needed = [*needed, OP_COLUMN]
            if opts.tombstones:
                needed.append(TOMBSTONE_TIME_COLUMN)
            if max((t.row_count for t in split.files), default=0) >= DICTIONARY_MIN_ROWS and spec.newest_wins(
                [c for c in needed if c in spec.schema.names and c not in spec.identity_columns]
            ):
                # Newest-wins merges drop whole rows: keep repetitive strings as dictionary indices until then.
                # Not in splits of small files only: there a file's dictionary costs about what the rows do.
                opts = replace(
                    opts,
                    dictionary=tuple(
                        c
                        for c in self.needed
                        if c not in spec.identity_columns
                        and c not in spec.sequence_by  # compared across files: plain values
                        and is_binary_like(spec.schema.field(c).type)
                    ),
                )
                self.opts = opts
        tasks = split.files
        if spec.sequence_by and not opts.tombstones and len({t.seq for t in tasks}) == 1:
            # One sorted run (a compaction's output): its tombstones hide nothing in it (a key has one
            # outcome there) and there is no other run to hide versions of: they are not read.
            tasks = tuple(t for t in tasks if t.content != "delete")
        # All footers of the split at once (one round trip on an object store), then cursors from the cache.
        storage.prefetch_metadata([(t.path, t.size_bytes or None) for t in tasks], io_pool())
        ruled_out = lookup.bloom_pruned(storage, spec, split, opts, io_pool() if storage.is_remote else None)
        self.cursors = [
            _FileCursor(storage, spec, t, needed, opts, explain, ruled_out.get(t.path, ())) for t in tasks
        ]
        self.cursors = [c for c in self.cursors if c.groups]

    def look_up_keys(self) -> None:
        """Read the keys of ``opts.keys`` by lookup (the pages that may hold them, key columns first)
        instead of by row groups: the caller decided so from the cursors (``lookup.few_pages``)."""
        self.opts = replace(self.opts, lookup=True)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Merged batches, window by window, in key order.

        The files of a window are fetched concurrently, and the next window is fetched while this one is
        merged. With a merge pool, up to ``windows_ahead`` windows are merged concurrently by its workers
        and handed out in order. Every window but the one the consumer waits for holds the storage's
        read-ahead budget (``read_ahead_bytes``); without budget, windows are read one after another.
        """
        if not self.cursors:
            return
        if not self.spec.has_primary_key:
            yield from self._batches_unmerged()
            return
        if not self.output_schema.names and self._counts_by_keys():
            # No column asked for (a count by an engine): only how many rows, which the keys tell.
            rows = self.count()
            if rows:
                yield from pa.table({"n": pa.nulls(rows)}).select([]).to_batches(max_chunksize=BATCH_ROWS)
            return
        if self.opts.lookup:  # a few keys: only their rows, from the files and pages that may hold them
            found = lookup.read(
                self.storage,
                self.spec,
                self.split,
                self.cursors,
                self.needed,
                self.opts,
                filter_rows,
                io_pool() if self.storage.is_remote else None,  # a few local pages: no hand-offs
            )
            merged, filtered = self._merge(found)
            if merged is not None and merged.num_rows:
                yield from self._finish(merged, filtered)
            return
        if self.selective():
            survivors = selective.read(
                self.storage,
                self.spec,
                self.cursors,
                self.opts,
                self.output_schema.names,
                filter_rows,
                None if self.opts.threads == 1 and not self.storage.is_remote else io_pool(),
            )
            if survivors is not None:  # else the split is too big, or the filter failed on a stored row
                if survivors:
                    yield from self._finish(self._stack(survivors), True)
                return
        pool = io_pool()
        budget = self.storage.read_ahead
        bounds = _windows(self.cursors, self.opts.window_bytes, self.opts.whole_split_bytes)
        estimate = min(self.opts.window_bytes, sum(c.estimated_bytes for c in self.cursors))
        workers = self.merge_pool if len(bounds) > 1 else None
        ahead = max(1, self.windows_ahead) if workers is not None else 1

        # Windows past their read, in order: [merged batches or their future, budget held].
        merging: deque[list[Any]] = deque()
        reading: tuple[Sequence[Future[pa.Table | None] | _Deferred], int] | None = None
        next_window = 0
        serial = self.opts.threads == 1 and not self.storage.is_remote

        def start_read() -> None:
            nonlocal reading, next_window
            if reading is not None or next_window >= len(bounds):
                return
            if not merging:
                cost = 0  # the window the consumer waits for is never budgeted
            elif len(merging) <= ahead and budget.try_acquire(estimate):
                cost = estimate
            else:
                return
            hi = bounds[next_window]
            if serial:  # read when merged, on this thread
                reading = ([_Deferred(c.take_until, hi) for c in self.cursors], cost)
            else:
                reading = ([pool.submit(c.take_until, hi) for c in self.cursors], cost)
            next_window += 1

        def merge(parts: list[tuple[FileTask, pa.Table]]) -> list[pa.RecordBatch]:
            merged, filtered = self._merge(parts)
            return [] if merged is None or not merged.num_rows else list(self._finish(merged, filtered))

        def hand_to_merge() -> None:
            nonlocal reading
            assert reading is not None
            futures, cost = reading
            reading = None
            entry: list[Any] = [None, cost]
            merging.append(entry)  # budget is released when the entry leaves, whatever happens
            parts = [(c.task, f.result()) for c, f in zip(self.cursors, futures)]
            start_read()  # the next window is fetched while this one is merged
            kept = [(t, p) for t, p in parts if p is not None and p.num_rows]
            entry[0] = workers.submit(merge, kept) if workers is not None else merge(kept)

        consumed = 0
        try:
            start_read()
            while reading is not None or merging:
                if reading is not None and len(merging) < ahead:
                    hand_to_merge()
                    continue
                result, cost = merging[0]
                out = result.result() if isinstance(result, Future) else result
                merging.popleft()
                budget.release(cost)
                yield from out
                del out, result
                consumed += 1
                if self.opts.release_memory and len(bounds) > 1 and consumed % RELEASE_EVERY_WINDOWS == 0:
                    # Windowed splits are big: hand freed window memory back so RSS tracks live data.
                    pa.default_memory_pool().release_unused()
                start_read()
        finally:
            for entry in merging:
                if isinstance(entry[0], Future):
                    entry[0].cancel()
                budget.release(entry[1])
            if reading is not None:
                budget.release(reading[1])

    def count(self) -> int:
        """The split's merged rows, counted: by the key and operation columns alone (and the sequence
        columns) where the scan has no filter on other columns and the table no engine folding versions
        (:func:`counting.live_keys`, :func:`counting.live_by_sequence`), else by reading the merged rows."""
        if self._counts_by_keys():
            for c in self.cursors:  # only delete markers are counted by operation
                if c.task.content != "delete" and not may_hold_deletes(self.storage, c.task):
                    c.columns = [name for name in c.columns if name != OP_COLUMN]
            live = partial(
                counting.live_by_sequence if self.spec.sequence_by else counting.live_keys, self.spec
            )
            if self.opts.threads == 1:
                return sum(live(parts) for parts in self.windows())
            # A split counted by several threads: windows are counted while the next ones are read, at
            # most one per thread waiting (memory stays bounded by the windows in flight).
            workers = self.opts.threads or default_threads()
            total = 0
            pending: deque[Future[int]] = deque()
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mere-count") as pool:
                for parts in self.windows():
                    pending.append(pool.submit(live, parts))
                    while len(pending) > workers:
                        total += pending.popleft().result()
                return total + sum(f.result() for f in pending)
        return sum(b.num_rows for b in self.batches())

    def _counts_by_keys(self) -> bool:
        spec = self.spec
        return bool(
            spec.has_primary_key
            and (spec.all_last if spec.sequence_by else spec.merge_engine in ("", None, "first_row"))
            and isinstance(self.opts.post, E.AlwaysTrue)
            and not self.opts.lookup
        )

    def selective(self) -> bool:
        """Whether this split's filter is evaluated on every stored version before the merge (see
        :mod:`mere.read.selective`; the route may still hand the split back to the plain merge)."""
        return selective.eligible(self.spec, self.split, self.opts, self.needed)

    def selective_planned(self) -> bool:
        """:meth:`selective`, and not handed back before reading (what ``explain()`` says; footers only)."""
        return self.selective() and not selective.declined(self.storage, self.spec, self.cursors, self.opts)

    def _stack(self, tables: list[pa.Table]) -> pa.Table:
        """Files' rows as one table of the table's plain types."""
        names = [c for c in (*self.needed, OP_COLUMN) if c in tables[0].column_names]
        alike = [_nullable(plain_columns(t, self.spec.schema)).select(names) for t in tables]
        return alike[0] if len(alike) == 1 else pa.concat_tables(alike, promote_options="permissive")

    def windows(self) -> Iterator[list[tuple[FileTask, pa.Table]]]:
        """The split's stored rows, unmerged, window by window in key order: per window, each file's rows
        of that key range (every version of a key lies in one window), files oldest first. Compaction of
        a table with ``sequence_by`` folds them itself, keeping tombstones."""
        if not self.cursors:
            return
        pool = io_pool()
        for hi in _windows(self.cursors, self.opts.window_bytes, self.opts.whole_split_bytes):
            tables = list(pool.map(lambda c, bound=hi: c.take_until(bound), self.cursors))
            parts = [(c.task, t) for c, t in zip(self.cursors, tables) if t is not None and t.num_rows]
            if parts:
                yield parts

    def _batches_unmerged(self) -> Iterator[pa.RecordBatch]:
        """Tables without primary key: files in order, the next ones read ahead within the budget."""
        pool = io_pool()
        budget = self.storage.read_ahead
        ahead: deque[tuple[Future[pa.Table | None], int]] = deque()
        nxt = 0
        try:
            while nxt < len(self.cursors) or ahead:
                if not ahead:
                    ahead.append((pool.submit(self.cursors[nxt].take_until, None), 0))
                    nxt += 1
                while nxt < len(self.cursors) and len(ahead) < FILES_AHEAD:
                    est = self.cursors[nxt].estimated_bytes
                    if not budget.try_acquire(est):
                        break
                    ahead.append((pool.submit(self.cursors[nxt].take_until, None), est))
                    nxt += 1
                future, est = ahead[0]
                try:
                    table = future.result()
                    if table is not None and table.num_rows:
                        yield from self._finish(table)
                    del table
                finally:
                    ahead.popleft()
                    budget.release(est)
        finally:
            while ahead:
                budget.release(ahead.popleft()[1])

    def _finish(self, table: pa.Table, filtered: bool = False) -> Iterator[pa.RecordBatch]:
        """Output batches of merged rows (``filtered``: the merge applied the scan's filter already)."""
        table = plain_columns(table, self.spec.schema)
        if not filtered:
            table = filter_rows(table, self.opts.post)
        if table.num_rows == 0:
            return
        out = table.select([])  # keeps the row count, even with no output columns
        for f in self.output_schema:
            if f.name in table.column_names:
                c = table.column(f.name)
                out = out.append_column(f, c if c.type == f.type else c.cast(f.type))
            else:
                out = out.append_column(f, pa.chunked_array([pa.nulls(table.num_rows, f.type)]))
        if self.output_schema.metadata and out.num_columns:
            out = out.replace_schema_metadata(self.output_schema.metadata)
        yield from out.to_batches(max_chunksize=BATCH_ROWS)

    def _merge(self, parts: list[tuple[FileTask, pa.Table]]) -> tuple[pa.Table | None, bool]:
        """Merged rows, and whether the scan's filter was applied to them already."""
        if not parts:
            return None, False
        spec = self.spec
        value_cols = [c for c in self.needed if c not in spec.identity_columns]
        whole = all(
            t.content == "delete" or t.columns is None or set(value_cols) <= set(t.columns) for t, _ in parts
        )
        if whole and spec.newest_wins(value_cols):
            return self._merge_last(parts)
        if whole and spec.merge_engine == "first_row":
            return self._merge_last(parts, first=True)
        if whole and order_free.applies(spec, value_cols):
            tables = [plain_columns(p, spec.schema) for _, p in parts]
            ops = np.concatenate([operation_codes(p) for p in tables])
            return order_free.fold(tables, ops, sequence_columns(tables, spec), spec, self.needed), False
        return self._merge_general(parts, value_cols), False

    def _merge_last(
        self, parts: list[tuple[FileTask, pa.Table]], first: bool = False
    ) -> tuple[pa.Table, bool]:
        """Newest version wins (``first``: the first version wins, for ``first_row`` tables): mark each
        file's surviving rows, then filter files in place. A surviving row is its key's merged row, so the
        scan's filter is evaluated on the files' rows and folded into the same filter: rows it drops are
        never copied (see :meth:`_filter_masks`)."""
        ops = [operation_codes(p) for _, p in parts]
        if len(parts) == 1:
            t, p = parts[0]
            (keep,), filtered = self._filter_masks([p], [ops[0] != OP_DELETE])
            return _kept(p, keep), filtered
        keys = key_columns([p for _, p in parts], self.spec)
        sequence = sequence_columns([p for _, p in parts], self.spec)
        if first:
            winner = first_wins(keys, np.concatenate(ops), sequence)
        else:
            base = parts[0][1].num_rows if parts[0][0].content != "delete" else 0
            winner = newest_wins(keys, np.concatenate(ops), base, sequence)
        out = []
        masks = []
        offset = 0
        for t, p in parts:
            m = winner[offset : offset + p.num_rows]
            offset += p.num_rows
            if t.content == "delete" or not m.any():
                continue
            out.append(p)
            masks.append(m)
        if not out:
            empty = pa.table({c: pa.array([], type=self.spec.schema.field(c).type) for c in self.needed})
            return empty, False
        cols = [c for c in self.needed if c in out[0].column_names]
        out = [o.select(cols) for o in out]
        masks, filtered = self._filter_masks(out, masks)
        if any(not o.schema.equals(out[0].schema) for o in out[1:]):
            # Files differ in which columns are dictionaries, or in nullability (compacted files were
            # written with the table's NOT NULL flags, delta files without them): filtered first, so that
            # dropped rows are never decoded from dictionaries.
            out = [_nullable(plain_columns(_kept(o, m), self.spec.schema)) for o, m in zip(out, masks)]
            return (pa.concat_tables(out) if len(out) > 1 else out[0]), filtered
        # One filter over every file's rows (Arrow walks the chunks): not one call per file.
        kept = np.concatenate(masks) if len(masks) > 1 else masks[0]
        return _kept(pa.concat_tables(out) if len(out) > 1 else out[0], kept), filtered

    def _filter_masks(self, out: list[pa.Table], masks: list[np.ndarray]) -> tuple[list[np.ndarray], bool]:
        """The masks of the files' surviving rows narrowed to the rows the scan's filter keeps, and
        whether it did. The filter is evaluated on its own columns only, over the files' rows, when they
        are few enough beside the survivors (a selective filter then spares copying the rows it drops);
        a filter that fails on some row (e.g. an overflow) is left to run on the merged rows, where a
        replaced row cannot make it fail."""
        post = self.opts.post
        if isinstance(post, E.AlwaysTrue):
            return masks, False
        used = E.columns(post)
        if not used or any(c not in o.column_names for o in out for c in used):
            return masks, False
        total = sum(len(m) for m in masks)
        survivors = sum(int(np.count_nonzero(m)) for m in masks)
        if not survivors or total > 4 * survivors:  # evaluating on the stored rows would cost too much
            return masks, False
        names = sorted(used)
        narrow = [_nullable(plain_columns(o.select(names), self.spec.schema)) for o in out]
        rows = pa.concat_tables(narrow) if len(narrow) > 1 else narrow[0]
        number = "\x00row"
        rows = rows.append_column(number, pa.array(np.arange(total, dtype=np.int64)))
        try:
            hit = np.asarray(filter_rows(rows, post).column(number).to_numpy())
        except (FilterError, pa.ArrowException):  # any failure: the merged rows decide
            return masks, False
        keep = np.zeros(total, dtype=bool)
        keep[hit] = True
        offsets = np.cumsum([0] + [len(m) for m in masks])
        return [m & keep[a:b] for m, a, b in zip(masks, offsets[:-1], offsets[1:])], True

    def _merge_general(self, parts: list[tuple[FileTask, pa.Table]], value_cols: list[str]) -> pa.Table:
        """Per-column merge operators and files with column subsets."""
        spec = self.spec
        schema = pa.schema([spec.schema.field(c) for c in self.needed])
        parts = [(t, plain_columns(p, spec.schema)) for t, p in parts]
        aligned = []
        present: dict[str, list[np.ndarray]] = {c: [] for c in value_cols}
        for _, p in parts:
            cols = []
            for f in schema:
                has = f.name in p.column_names
                cols.append(p.column(f.name) if has else pa.nulls(p.num_rows, f.type))
                if f.name in present:
                    present[f.name].append(np.full(p.num_rows, has))
            aligned.append(pa.Table.from_arrays(cols, schema=schema))
        versions = pa.concat_tables(aligned)
        ops = np.concatenate([operation_codes(p) for _, p in parts])
        # A key's versions in sequence order where the table has one (stable: commit order, then row
        # order, among equal sequences), else in commit order.
        by = [versions.column(c) for c in (*spec.primary_key, *spec.sequence_by)]
        if spec.sequence_groups:  # a delete removes the versions of its sequence committed after it too
            by.append(pa.array(ops == OP_DELETE))
        order = sort_indices(by)
        versions = versions.take(pa.array(order))
        ops = ops[order]
        pres = {c: np.concatenate(v)[order] for c, v in present.items()}
        starts = group_starts([versions.column(c) for c in spec.primary_key], versions.num_rows)
        options = spec.reduce_options
        options["groups"] = {g: cs for g, cs in spec.sequence_groups.items() if g in versions.column_names}
        merged, out_op = reduce_versions(
            versions, ops, starts, spec.identity_columns, spec.operators, pres, **options, arrival=order
        )
        keep = out_op != OP_DELETE
        return merged if keep.all() else merged.filter(bool_array(keep))


def gather_batches(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Batches gathered into tables of at least ``rows`` rows (the last may hold fewer). This generator
    keeps no reference to a table it gave (the caller may free it before taking the next one)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield _drained(pending)
            count = 0
    if pending:
        yield _drained(pending)


def _drained(batches: list[pa.RecordBatch]) -> pa.Table:
    """The batches as one table, the list emptied (what it held is the table's alone)."""
    table = pa.Table.from_batches(batches)
    batches.clear()
    return table


_Item = TypeVar("_Item")  # what stream_splits opens a reader for: a Split, or a task holding one


def stored_rows_are_merged(storage: Storage, spec: TableSpec, split: Split) -> bool:
    """Whether the split's stored rows, as they are, are its merged rows: nothing to merge or drop.

    True for a table without key whose files all hold every column. For a keyed split: every file is a
    data file holding every column with, by its footer statistics, no delete rows, and no key is in two
    files (the files' ranges of the first key column are disjoint): a compacted split, or one written by
    a single upsert. Each key then has one stored version, which folds into an empty state unchanged
    under every merge operator (with sequence groups: when every row carries every group, no NULL group
    sequence). Engines may read such files with their own Parquet reader (ignoring the
    ``_mere_op`` column). Only footers are fetched here (cached).
    """
    files = split.files
    if not files or any(f.content != "data" or f.columns is not None for f in files):
        return False
    if spec.evolved and not all(
        stored_as_table(spec, storage.metadata(f.path, f.size_bytes or None)) for f in files
    ):
        return False  # an engine's own reader would see old names, narrower types or missing columns
    if not spec.has_primary_key:
        return True
    key0 = spec.primary_key[0]
    ranges: list[tuple[Any, Any]] = []  # (smallest, largest) first key column of each file
    for f in files:
        md = storage.metadata(f.path, f.size_bytes or None)
        leaves = storage.column_leaves(f.path, f.size_bytes or None)
        if OP_COLUMN not in leaves or md.num_row_groups == 0:
            return False
        # Files are sorted by key: the first row group holds the smallest key, the last the largest.
        first = row_group_stats(md, 0, spec.schema, [key0], leaves).get(key0)
        last = row_group_stats(md, md.num_row_groups - 1, spec.schema, [key0], leaves).get(key0)
        if first is None or last is None or first.min is None or last.max is None:
            return False
        ranges.append((first.min, last.max))
    ranges.sort(key=lambda r: r[0])
    if not all(prev[1] < nxt[0] for prev, nxt in itertools.pairwise(ranges)):
        return False  # overlapping files (the common case of a split to merge): no row group walked
    if any(may_hold_deletes(storage, f) for f in files):
        return False
    return not spec.sequence_groups or all(_carries_every_group(storage, spec, f) for f in files)


def _group_carriers(spec: TableSpec) -> list[str]:
    """The columns whose NULL makes a row not carry its sequence group: each group's sequence column, and
    a ``last_non_null`` column alone in its group. A version that does not carry a group is no merged row:
    its merge leaves that group NULL."""
    alone = [cs[0] for cs in spec.sequence_groups.values() if len(cs) == 1]
    return [*spec.sequence_groups, *(c for c in alone if spec.operator(c).name == "last_non_null")]


def _carries_every_group(storage: Storage, spec: TableSpec, task: FileTask) -> bool:
    """Whether every row of the file carries every sequence group, by its footer statistics."""
    md = storage.metadata(task.path, task.size_bytes or None)
    leaves = storage.column_leaves(task.path, task.size_bytes or None)
    carriers = _group_carriers(spec)
    for i in range(md.num_row_groups):
        stats = row_group_stats(md, i, spec.schema, carriers, leaves)
        for column in carriers:
            st = stats.get(column)
            if st is None or st.null_count is None or st.null_count > 0:
                return False
    return True


def may_hold_deletes(storage: Storage, task: FileTask) -> bool:
    """Whether a file may hold delete markers: true unless its footer's statistics of the operation
    column rule them out in every row group (cached with the footer)."""
    footer = storage.footer(task.path, task.size_bytes or None)
    known = footer.extra.get("may_hold_deletes")
    if known is None:
        md, leaves = footer.metadata, footer.leaves
        known = False  # a file without the column reads every row as a merge
        if OP_COLUMN in leaves:
            op_leaf = leaves[OP_COLUMN][0]
            for i in range(md.num_row_groups):
                st = md.row_group(i).column(op_leaf).statistics
                if st is None or not st.has_min_max or st.min <= OP_DELETE <= st.max:
                    known = True
                    break
        footer.extra["may_hold_deletes"] = known
    return bool(known)


# Filters keeping at least this share of the rows go column by column (see _kept).
FEW_DROPPED = 0.95


def _kept(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """The rows of ``table`` where ``mask`` is true. Where few rows go, column by column and without
    validity bitmaps of columns that hold no NULL: Arrow then copies runs of kept values (about 3x faster
    for numbers than with a bitmap to filter alongside), while a table's filter gathers every value by
    index (pyarrow 26). Where many rows go, gathering is the faster."""
    kept = int(np.count_nonzero(mask))
    if kept == len(mask):
        return table
    selection = bool_array(mask)
    if not table.num_columns or kept < FEW_DROPPED * len(mask):
        return table.filter(selection)
    return pa.Table.from_arrays(
        [pc.filter(_without_validity(c), selection) for c in table.columns], schema=table.schema
    )


def _without_validity(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column with the validity bitmaps of NULL-free chunks of flat types left out (zero copy)."""
    kind = column.type
    flat = pa.types.is_primitive(kind) or is_binary_like(kind) or pa.types.is_decimal(kind)
    if not flat or column.null_count == column.length():
        return column
    chunks = []
    for chunk in column.chunks:
        buffers = chunk.buffers()
        if chunk.null_count == 0 and buffers[0] is not None:
            chunk = pa.Array.from_buffers(
                kind, len(chunk), [None, *buffers[1:]], null_count=0, offset=chunk.offset
            )
        chunks.append(chunk)
    return pa.chunked_array(chunks, type=kind)


def stream_splits(
    make_reader: Callable[[_Item], SplitReader],
    splits: Sequence[_Item],
    parallel: int,
    queue_size: int = 4,
    splits_ahead: int = SPLITS_AHEAD,
    open_ahead: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield batches split by split, in order, while up to ``parallel`` splits are merged ahead.

    Memory is bounded: each split being merged holds its current window (plus read-ahead within the
    storage's budget) and at most ``queue_size`` finished batches; a split whose queue is full waits for
    the consumer. Readers of the next ``splits_ahead`` splits are opened early (their footers fetched, a
    round trip each on an object store) so a worker that finishes a split starts the next one at once.
    ``open_ahead=False`` (local files) has each worker open its split itself: opening is Python work that,
    on another thread, would only contend for the GIL with the workers (5-10% of a scan of small splits).
    """
    if not splits:
        return
    done = object()
    stop = threading.Event()
    queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=queue_size) for _ in splits]
    opener = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mere-open")
    opened: dict[int, Future[SplitReader]] = {}  # splits (or scan tasks) whose readers are open
    open_lock = threading.Lock()
    next_open = [0]

    def open_up_to(i: int) -> None:
        with open_lock:
            while next_open[0] < min(i, len(splits)) and not stop.is_set():
                opened[next_open[0]] = opener.submit(make_reader, splits[next_open[0]])
                next_open[0] += 1

    def reader(i: int) -> SplitReader:
        if not open_ahead:
            return make_reader(splits[i])
        open_up_to(i + 1 + max(0, parallel - 1) + max(0, splits_ahead))
        with open_lock:
            future = opened.pop(i)
        return future.result()

    def put(q: queue.Queue[Any], item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work(i: int) -> None:
        q = queues[i]
        try:
            for batch in reader(i).batches():
                if not put(q, batch):
                    return
            put(q, done)
        except BaseException as e:
            put(q, e)

    # Daemon threads, not an executor's: a reader abandoned half-read (still referenced when the program
    # ends) must not keep the interpreter waiting on workers blocked on a full queue. Reused ones: the
    # memory Arrow's allocator kept for a thread of the last scan serves this one (peak RSS).
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(splits)):
        todo.put(i)

    def worker() -> None:
        # What this thread's windows freed stays cached for it: the next scan's windows reuse it (handing
        # it back here would cost each scan its page faults again, for no lower peak).
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            work(i)

    workers: list[threading.Event] = []
    try:
        workers.extend(
            run_on_daemon_thread(worker, "mere-split") for _ in range(max(1, min(parallel, len(splits))))
        )
        for i in range(len(splits)):
            q = queues[i]
            while True:
                item = q.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
    finally:
        stop.set()
        for w in workers:
            w.wait()
        opener.shutdown(wait=True, cancel_futures=True)
