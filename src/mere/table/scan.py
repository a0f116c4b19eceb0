"""Immutable scan builder: columns, filter, version; streams merged Arrow batches."""

from __future__ import annotations

import functools
import heapq
import math
import numbers
import threading
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import DECODED_PER_STORED, is_nat, release_after_writes
from mere.concurrency import default_threads
from mere.errors import InvalidInput, NoSuchVersion, SchemaMismatch, StorageError, names_its_table
from mere.io import Storage
from mere.metadata import FileEntry, Snapshot
from mere.optional import require
from mere.partitions import partition_json
from mere.read.options import ReadOptions
from mere.read.planner import (
    Explain,
    FilterParts,
    ReadScope,
    Split,
    plan_splits,
    read_scope,
    row_group_stats,
    split_filter,
)
from mere.read.reader import (
    LOOKUP_MAX_KEYS,
    SplitReader,
    stored_rows_are_merged,
    stream_splits,
    warm_filter_caches,
)
from mere.spec import TableSpec, is_zone_name

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl


EXPLAIN_VALUES = 10  # IN-list values explain() shows before "... and N more"
TASK_BYTES = 128 << 20  # default most bytes per engine task (Spark's spark.sql.files.maxPartitionBytes)
OPEN_COST_BYTES = 4 << 20  # what starting one more split costs, in bytes (Spark's openCostInBytes)
# Windows of to_arrow(): larger than a stream's (fewer merges), yet small enough that the windows being merged
# stay small beside the output kept (W1, 4 buckets: 16 MiB windows peak about 50 MiB below 32 MiB or whole splits,
# at the same CPU time).
COLLECT_WINDOW_BYTES = 16 << 20
# Windows of to_arrow() where several workers merge one split's windows (fewer splits than workers): each
# window's files go through the IO pool and the window to a merge worker, a cost per window that larger ones
# spread (1 bucket of W1x5 on 2 threads, three alternations: 1.74/1.65/1.71x faster than 1 thread
# -> 1.89/1.76/1.77x, for 60-90 MiB more peak RSS beside its 523 MiB of output).
SHARED_COLLECT_WINDOW_BYTES = 32 << 20
COUNT_WINDOW_BYTES = 2 << 20  # stored key (and operation) bytes a count() reads per window


class ScannedTable(Protocol):
    """What a scan reads through: a table handle (``mere.Table`` is one)."""

    @property
    def name(self) -> str:
        """``namespace.name``."""

    @property
    def spec(self) -> TableSpec:
        """The current layout."""

    @property
    def storage(self) -> Storage:
        """The warehouse's storage."""

    @property
    def version(self) -> int:
        """The newest committed version."""

    @property
    def catalog(self) -> Any:
        """The catalog (its ``threads`` default the merge workers)."""

    @property
    def window_bytes(self) -> int:
        """``read.window-bytes``."""

    @property
    def whole_split_bytes(self) -> int:
        """``read.whole-split-bytes``."""

    def files_at(self, version: int) -> list[FileEntry]:
        """The live files at a version."""

    def snapshot(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> Snapshot:
        """A version's snapshot (an ``as_of`` without a zone is read as UTC, not as local time)."""

    def resolve_version(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> int:
        """The version a read sees (an ``as_of`` without a zone is read as UTC, not as local time)."""


_storages: dict[tuple[str, tuple[tuple[str, str], ...]], Storage] = {}
_storages_lock = threading.Lock()


def storage_for(uri: str, options: tuple[tuple[str, str], ...], table: str = "") -> Storage:
    """One Storage (and footer cache) per warehouse in a worker process.

    With ``table``, a handle on it that names that table in read errors.
    """
    with _storages_lock:
        storage = _storages.get((uri, options))
        if storage is None:
            storage = _storages[(uri, options)] = Storage(uri, dict(options))
    return storage.for_table(table) if table else storage


@dataclass(frozen=True)
class ScanTask:
    """One split of a planned scan, self-contained and picklable.

    A worker reads it with storage access only, no catalog connection. Engines (Spark, Dask, Ray) ship these
    to their tasks.
    """

    warehouse: str
    storage_options: tuple[tuple[str, str], ...] = field(repr=False)  # may hold secrets
    spec_json: str = field(repr=False)
    split: Split
    options: ReadOptions
    size_hint: int | None = None  # bytes of a key-range window's row groups (see divide)
    table: str = ""  # the table's name, for errors

    @property
    def size_bytes(self) -> int:
        """Bytes this task reads, about (for sizing engine tasks)."""
        return self.split.size_bytes if self.size_hint is None else self.size_hint

    @property
    def spec(self) -> TableSpec:
        """The table layout the task was planned with (parsed once per process)."""
        return _spec(self.spec_json)

    def reader(self) -> SplitReader:
        """A reader of this task's merged rows (opens the files' footers)."""
        return SplitReader(
            storage_for(self.warehouse, self.storage_options, self.table), self.spec, self.split, self.options
        )

    def read(self) -> Iterator[pa.RecordBatch]:
        """The split's merged rows, streamed."""
        yield from self.reader().batches()

    def divide(self, max_bytes: int) -> list[ScanTask]:
        """This task as key-range windows of about ``max_bytes`` each, for several workers to merge apart.

        Every version of a key shares its first key column, so a window ``lo <= key0 < hi`` merges on its
        own. Windows are cut at row-group boundaries from the files' footer statistics (fetched here);
        a split that fits, a first key column other than integers, strings and dates or files without
        statistics give back ``[self]``.
        """
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise InvalidInput(f"divide takes a positive number of bytes, got {max_bytes!r}")
        spec = self.spec
        if not spec.primary_key or self.size_bytes <= max_bytes or len(self.split.files) == 0:
            return [self]
        key = spec.primary_key[0]
        kind = spec.schema.field(key).type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_date(kind)
        ):
            return [self]
        storage = storage_for(self.warehouse, self.storage_options, self.table)
        starts: list[tuple[Any, float]] = []  # (smallest key, bytes) of every row group
        for f in self.split.files:
            md = storage.metadata(f.path, f.size_bytes or None)
            leaves = storage.column_leaves(f.path, f.size_bytes or None)
            for i in range(md.num_row_groups):
                st = row_group_stats(md, i, spec.schema, [key], leaves).get(key)
                if st is None or st.min is None:
                    return [self]
                starts.append((st.min, f.size_bytes * md.row_group(i).num_rows / max(1, md.num_rows)))
        starts.sort(key=lambda s: s[0])
        bounds: list[Any] = []
        sizes = [0.0]
        for low, size in starts:
            if sizes[-1] >= max_bytes and (not bounds or low > bounds[-1]) and low > starts[0][0]:
                bounds.append(low)
                sizes.append(0.0)
            sizes[-1] += size
        if not bounds:
            return [self]
        edges = [None, *bounds, None]
        pieces = []
        for lo, hi, size in zip(edges, edges[1:], sizes):
            window: E.Expr = self.options.pre
            if lo is not None:
                window = window & E.Compare(">=", key, lo)
            if hi is not None:
                window = window & E.Compare("<", key, hi)
            pre = E.bind(window, spec.schema)
            pieces.append(replace(self, options=replace(self.options, pre=pre), size_hint=int(size)))
        return pieces


def read_tasks(tasks: Sequence[ScanTask], parallel: int = 2, queue_size: int = 2) -> Iterator[pa.RecordBatch]:
    """Merged batches of several scan tasks (one engine task's share), task by task in order.

    Up to ``parallel`` tasks are merged ahead so that reading overlaps with the engine consuming batches.
    """
    if len(tasks) == 1:
        yield from tasks[0].read()
        return
    yield from stream_splits(ScanTask.reader, tasks, parallel, queue_size=queue_size)


@functools.lru_cache(maxsize=64)
def _spec(spec_json: str) -> TableSpec:
    return TableSpec.from_json(spec_json)


def group_tasks(
    tasks: Sequence[ScanTask],
    max_bytes: int = TASK_BYTES,
    open_cost: int = OPEN_COST_BYTES,
    min_groups: int = 1,
) -> list[list[ScanTask]]:
    """Pack scan tasks into balanced engine tasks of at most about ``max_bytes`` each.

    Each task counts its bytes plus ``open_cost`` (what starting one more split costs). The tasks become
    ``max(min_groups, ceil(total / max_bytes))`` groups, so a table big enough keeps every core busy;
    tasks bigger than a group's share are first divided into key-range windows
    (:meth:`ScanTask.divide`), then each, largest first, joins the lightest group. Equal groups matter:
    Spark waits for its slowest task.
    """
    if max_bytes < 1 or open_cost < 0 or min_groups < 1:
        raise InvalidInput(
            f"group_tasks: max_bytes and min_groups must be positive and open_cost >= 0, "
            f"got {max_bytes}, {open_cost}, {min_groups}"
        )
    if not tasks:
        return []
    total = sum(t.size_bytes + open_cost for t in tasks)
    count = max(min_groups, -(-total // max_bytes))
    share = max(1, -(-total // count))
    pieces = [p for t in tasks for p in t.divide(share)]
    pieces.sort(key=lambda t: t.size_bytes, reverse=True)
    count = min(count, len(pieces))
    groups: list[list[ScanTask]] = [[] for _ in range(count)]
    lightest = [(0, i) for i in range(count)]  # a heap of (bytes, group)
    for t in pieces:
        held, k = heapq.heappop(lightest)
        groups[k].append(t)
        heapq.heappush(lightest, (held + t.size_bytes + open_cost, k))
    return groups


@names_its_table
@dataclass(frozen=True)
class Scan:
    """A planned read of one table version. Each output method starts a fresh, lazy read."""

    table: ScannedTable
    version: int
    columns: tuple[str, ...] | None = None
    filter: Any = None
    threads: int | None = None  # merge workers; None: the catalog's, else $MERE_THREADS, else one per core
    window_bytes: int | None = None
    queue_batches: int = 2  # merged batches held per split ahead of the consumer
    spec: TableSpec = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.spec is None:  # the layout at planning time: a later refresh() of the table does not move it
            object.__setattr__(self, "spec", self.table.spec)

    @classmethod
    def checked(
        cls,
        table: ScannedTable,
        version: int,
        columns: Sequence[str] | str | None,
        filter: Any,
        spec: TableSpec,
        **options: Any,
    ) -> Scan:
        """A scan of ``version`` read with ``spec``'s columns, its column names and filter checked now.

        Not at the first read; the scan keeps the filter it parsed."""
        scan = cls(table, version, normalise_columns(columns), filter, **options, spec=spec)
        scan.output_columns  # noqa: B018
        scan.filter_parts()
        return scan

    def snapshot(self) -> Snapshot:
        """The snapshot (version) this scan reads."""
        return self.table.snapshot(version=self.version)

    def select(self, *columns: str) -> Scan:
        """The same scan with another projection (checked now).

        Args:
            *columns: The columns to read, in order.

        Returns:
            A new scan; this one is unchanged.

        Raises:
            InvalidInput: A column named twice.
            SchemaMismatch: A column the table does not have.
        """
        scan = replace(self, columns=normalise_columns(columns))
        scan.output_columns  # noqa: B018 - unknown names fail here, not at the first read
        return scan

    def where(self, filter: Any) -> Scan:
        """The same scan with ``filter`` ANDed to its filter (checked now).

        Args:
            filter: A filter: a string, a :mod:`mere.expr` expression or a pyarrow Expression.

        Returns:
            A new scan; this one is unchanged.

        Raises:
            FilterError: A filter that does not parse or does not fit the table's columns.
        """
        combined = E.to_expr(filter) if self.filter is None else E.to_expr(self.filter) & E.to_expr(filter)
        split_filter(self.spec, combined)
        return replace(self, filter=combined)

    @property
    def output_columns(self) -> list[str]:
        """The columns this scan returns, in order (checked against the schema)."""
        spec = self.spec
        if self.columns is None:
            return list(spec.schema.names)
        unknown = [c for c in self.columns if c not in spec.schema.names]
        if unknown:
            hint = ""
            if len(self.columns) == 1 and "," in self.columns[0]:
                hint = f"; to select several columns pass a list: columns={[c.strip() for c in self.columns[0].split(',')]}"
            raise SchemaMismatch(
                f"{self.table.name}: unknown column(s) {unknown}; the table has {spec.schema.names}{hint}"
            )
        return list(self.columns)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the scan's output."""
        spec = self.spec
        return pa.schema([spec.schema.field(c) for c in self.output_columns])

    def _parts(self) -> FilterParts:
        parts = self.__dict__.get("_filter_parts")
        if parts is None:  # parsed and bound once per scan (long IN lists cost real time)
            parts = split_filter(self.spec, self.filter)
            object.__setattr__(self, "_filter_parts", parts)
        return cast(FilterParts, parts)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_filter_parts"}

    def _plan(self, explain: Explain) -> tuple[list[Split], ReadOptions]:
        parts = self._parts()
        files = self.table.files_at(self.version)
        splits = plan_splits(self.spec, files, parts, explain)
        explain.pre_merge_filter = E.render(parts.pre, max_values=EXPLAIN_VALUES)
        explain.post_merge_filter = E.render(parts.post, max_values=EXPLAIN_VALUES)
        return splits, self._options(parts)

    def _options(self, parts: FilterParts) -> ReadOptions:
        lookup = parts.key_points is not None and len(parts.key_points) <= LOOKUP_MAX_KEYS
        # An explicit window size is a memory limit: then every split bigger than it is windowed.
        whole = 0 if self.window_bytes else self.table.whole_split_bytes
        opts = ReadOptions(
            self.output_columns,
            parts.pre,
            parts.post,
            lookup,
            self.window_bytes or self.table.window_bytes,
            whole,
        )
        warm_filter_caches(parts.pre, self.spec.schema)
        warm_filter_caches(parts.post, self.spec.schema)
        return opts

    def planned(self, explain: Explain | None = None) -> tuple[list[Split], ReadOptions]:
        """The splits of this scan and the options to read them with (``explain`` records the pruning)."""
        return self._plan(Explain(self.version) if explain is None else explain)

    def filter_parts(self) -> FilterParts:
        """The scan's filter, parsed, bound and split (checked: a bad filter raises here)."""
        return self._parts()

    def plan(self) -> list[Split]:
        """Splits (one per partition x bucket) that together hold every row of this scan.

        Returns:
            The splits, pruned by the filter.

        Raises:
            NoSuchVersion: The scan's version expired.
            CatalogError: The catalog could not be read.
        """
        return self._plan(Explain(self.version))[0]

    def read_scope(self) -> ReadScope:
        """Where rows of this scan's filter can be, whether files hold them or not.

        What a write that read them must not see a concurrent commit change: a split the filter can reach
        may be empty or absent at this version.

        Returns:
            The buckets and partitions in scope.

        Raises:
            NoSuchVersion: The scan's version expired.
            CatalogError: The catalog could not be read.
        """
        return read_scope(self.spec, self.table.files_at(self.version), self._parts())

    def explain(self) -> Explain:
        """Pruning funnel without reading any data page: footers only.

        Returns:
            What the scan prunes and reads, split by split.

        Raises:
            NoSuchVersion: The scan's version expired.
            StorageError: A file's footer could not be read.
        """
        ex = Explain(self.version)
        splits, opts = self._plan(ex)
        selective = sum(
            SplitReader(self.table.storage, self.spec, s, opts, ex).selective_planned() for s in splits
        )
        if selective:
            ex.notes.append(
                f"selective read of {selective}/{len(splits)} split(s): the filter runs on every stored "
                "version first (key, operation and filter columns), only its candidates' keys are looked up "
                "among newer versions, other columns are read for the surviving rows only (a split of one file only "
                "where statistics rule most of it out)"
            )
        if isinstance(opts.pre, E.AlwaysTrue) and isinstance(opts.post, E.AlwaysTrue):
            clean = [stored_rows_are_merged(self.table.storage, self.spec, s) for s in splits]
            if clean and all(clean):
                ex.notes.append(
                    "count(), and min()/max() of integer, date and timestamp (not nanosecond) columns: "
                    "answered from metadata (catalog row counts, footer statistics; every split is clean)"
                )
            else:
                if not self.spec.sequence_by:
                    how = "by their key and operation columns"
                elif self.spec.all_last:
                    how = "by their key, sequence and operation columns (each key's winner)"
                else:  # an engine or operators fold a key's versions: counted on the merged rows
                    how = "by merging the columns their merge needs"
                ex.notes.append(
                    f"count(): {sum(clean)}/{len(splits)} split(s) from catalog row counts, the others {how}"
                )
        if isinstance(E.to_expr(self.filter), E.ArrowPredicate):
            ex.notes.append(
                "a pyarrow expression filter is opaque: it runs after the merge and prunes nothing"
            )
        return ex

    def tasks(self) -> list[ScanTask]:
        """One self-contained, picklable task per split (see :class:`ScanTask`).

        Returns:
            The tasks, for engine workers to read with storage access only.

        Raises:
            InvalidInput: The catalog was opened with ``filesystem=`` (workers need a warehouse URI).
            NoSuchVersion: The scan's version expired.
        """
        splits, opts = self._plan(Explain(self.version))
        storage = self.table.storage
        if not storage.portable:
            raise InvalidInput("scan tasks need a warehouse URI; this catalog was opened with filesystem=")
        options = tuple(sorted(storage.storage_options.items()))
        spec_json = self.spec.to_json()
        return [ScanTask(storage.uri, options, spec_json, s, opts, table=self.table.name) for s in splits]

    def split_tables(self, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of the splits named by (partition JSON, bucket), read concurrently; others are not read."""
        _check_split_names(self.table.name, wanted)
        splits, opts = self._plan(Explain(self.version))
        chosen = [s for s in splits if (partition_json(dict(s.partition)), s.bucket) in wanted]
        return self.merge_splits(chosen, opts)

    def merge_splits(
        self, splits: Sequence[Split], opts: ReadOptions | None = None
    ) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of the given splits under this scan's columns and filter, read concurrently.

        The splits may hold any files (e.g. only those some commits added). Keyed by (partition JSON, bucket).
        """
        if (
            isinstance(splits, str | bytes)
            or not isinstance(splits, Sequence)
            or not all(isinstance(s, Split) for s in splits)
        ):
            raise InvalidInput(
                f"{self.table.name}: merge_splits takes a list of Split (from plan()), got {splits!r}"
            )
        opts = self._options(self._parts()) if opts is None else opts
        storage, spec, schema = self.table.storage, self.spec, self.schema

        def read(split: Split) -> pa.Table:
            batches = SplitReader(storage, spec, split, opts).batches()
            return pa.Table.from_batches(list(batches), schema=schema)

        with ThreadPoolExecutor(max_workers=self.worker_count(), thread_name_prefix="mere-splits") as pool:
            tables = list(pool.map(read, splits))
        return {(partition_json(dict(s.partition)), s.bucket): t for s, t in zip(splits, tables)}

    def read_split(self, split: Split) -> Iterator[pa.RecordBatch]:
        """Merged batches of one split (for engines that distribute splits)."""
        if not isinstance(split, Split):
            raise InvalidInput(f"{self.table.name}: read_split takes a Split (from plan()), got {split!r}")
        _, opts = self._plan(Explain(self.version))
        yield from SplitReader(self.table.storage, self.spec, split, opts).batches()

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Merged record batches, streamed with bounded memory (splits read concurrently).

        The read is planned now and runs as the batches are taken.

        Returns:
            An iterator of the merged batches.

        Raises:
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        return self._stream(release_memory=True)

    def worker_count(self) -> int:
        """Merge workers of this scan.

        ``threads=``, else the catalog's ``threads``, else ``$MERE_THREADS``, else one per core this process
        may use.
        """
        return self.threads or self.table.catalog.threads or default_threads()

    def _stream(self, release_memory: bool, collect: bool = False) -> Iterator[pa.RecordBatch]:
        """Merged batches.

        ``collect``: the caller keeps every batch (``to_arrow``), so splits need not wait for the one being
        collected, and big splits merge in larger windows (fewer reads and sorts) unless a window size was
        set.
        """
        splits, opts = self._plan(Explain(self.version))
        # What the writer's threads keep cached from the writes before serves no read: hand it back before
        # a big one (only big writes hand it back themselves: the next write would fault it in again).
        release_after_writes(DECODED_PER_STORED * sum(s.size_bytes for s in splits))
        opts = replace(opts, release_memory=release_memory)
        threads = self.worker_count()
        few = len(splits) < threads
        if few:
            # Fewer splits than workers: cut even small splits into key windows, merged concurrently.
            opts = replace(opts, whole_split_bytes=0)
        if collect and not self._windows_sized_by("read.window-bytes"):
            window = COLLECT_WINDOW_BYTES
            if few:  # still four windows or more per worker (decoded bytes: about 3x the stored ones)
                per_window = 3 * sum(s.size_bytes for s in splits) // (4 * threads)
                window = min(SHARED_COLLECT_WINDOW_BYTES, per_window)
            opts = replace(opts, window_bytes=max(opts.window_bytes, window))
            if not self._windows_sized_by("read.whole-split-bytes"):  # a bigger split is windowed too
                opts = replace(opts, whole_split_bytes=min(opts.whole_split_bytes, opts.window_bytes))
        return self._stream_splits(splits, opts, threads, 0 if collect else None)

    def _windows_sized_by(self, *properties: str) -> bool:
        """Whether the user sized this read's key windows (the scan's ``window_bytes`` or a property)."""
        return self.window_bytes is not None or any(p in self.spec.properties for p in properties)

    def _stream_splits(
        self, splits: list[Split], opts: ReadOptions, threads: int, queue_size: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Merged batches of ``splits``, naming an expiry that happened while they were read.

        ``queue_size``: finished batches a split holds ahead of the consumer (default ``queue_batches``; 0
        means no limit, for reads that keep every batch anyway).
        """
        try:
            yield from self._merged_batches(splits, opts, threads, queue_size)
        except StorageError as e:
            self._raise_if_expired(e)
            raise

    def _raise_if_expired(self, failure: StorageError) -> None:
        """An expire that ran after planning may have deleted the version's files: say so."""
        try:
            self.table.resolve_version(self.version)
        except NoSuchVersion:
            raise NoSuchVersion(
                f"{self.table.name}: version {self.version} expired while it was being read"
            ) from failure

    def _merged_batches(
        self, splits: list[Split], opts: ReadOptions, threads: int, queue_size: int | None
    ) -> Iterator[pa.RecordBatch]:
        storage, spec = self.table.storage, self.spec
        queue_size = self.queue_batches if queue_size is None else queue_size
        opts = replace(opts, threads=threads)
        if len(splits) >= threads:
            # One split per worker keeps every core busy: each worker reads its split's files itself (on
            # local storage), without a hand-off per file or window.
            solo = replace(opts, threads=1)
            yield from stream_splits(
                lambda s: SplitReader(storage, spec, s, solo),
                splits,
                threads,
                queue_size=queue_size,
                open_ahead=storage.is_remote,
            )
            return
        # Fewer splits than workers: one pool merges the key windows of every split concurrently.
        merge_pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mere-merge")
        ahead = -(-threads // max(1, len(splits)))
        if queue_size == 0:
            # A read that keeps every batch: one more window queued, so that a worker done before the one
            # merging the oldest window starts the next instead of waiting for it.
            ahead += 1
        try:
            yield from stream_splits(
                lambda s: SplitReader(storage, spec, s, opts, merge_pool=merge_pool, windows_ahead=ahead),
                splits,
                threads,
                queue_size=queue_size,
                open_ahead=storage.is_remote,
            )
        finally:
            merge_pool.shutdown(wait=True, cancel_futures=True)

    def to_reader(self) -> pa.RecordBatchReader:
        """The merged rows as a ``pyarrow.RecordBatchReader`` (streamed).

        Returns:
            A reader of the merged batches (the read runs as they are taken).

        Raises:
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        """The merged rows as one Arrow table.

        Returns:
            Every merged row of the scan.

        Raises:
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        # Everything is kept anyway: returning freed window memory to the OS would only cost time.
        # Splits after the one being collected must not wait for it either: their batches are kept anyway.
        return pa.Table.from_batches(
            list(self._stream(release_memory=False, collect=True)), schema=self.schema
        )

    def to_pandas(self, **kwargs: Any) -> pd.DataFrame:
        """The merged rows as a pandas DataFrame.

        By default columns become NumPy ones, and an integer column that holds a NULL becomes float64 (NULLs
        as NaN), which cannot hold every 64-bit integer: a ``uint64`` of ``2**63 + 5`` comes back as
        ``9.223372036854776e+18``, an ``int64`` beyond 2**53 loses digits too. Pass
        ``types_mapper=pd.ArrowDtype`` to keep every value and type exactly (nullable integers, decimals,
        nanosecond timestamps)::

            frame = table.scan().to_pandas(types_mapper=pd.ArrowDtype)

        Args:
            **kwargs: Passed to ``pyarrow.Table.to_pandas``.

        Returns:
            The DataFrame.

        Raises:
            InvalidInput: ``pyarrow.Table.to_pandas`` refused the rows or ``kwargs``.
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        table = self.to_arrow()
        try:
            return table.to_pandas(**kwargs)
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise InvalidInput(f"{self.table.name}: to_pandas{tuple(kwargs)}: {e}") from e

    def count(self) -> int:
        """Rows of this scan.

        Without a filter, a split whose stored rows are its merged rows (one compacted file, or one write's
        files with disjoint keys and no deletes: see :func:`~mere.read.reader.stored_rows_are_merged`) is
        counted from the catalog's row counts and its footers; other splits read only the key and operation
        columns (and those the filter needs).

        Returns:
            The number of merged rows.

        Raises:
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        keyed = replace(self, columns=())
        splits, opts = keyed._plan(Explain(self.version))
        try:
            return self._count_splits(splits, replace(opts, release_memory=True), keyed.worker_count())
        except StorageError as e:
            self._raise_if_expired(e)
            raise

    def _count_splits(self, splits: list[Split], opts: ReadOptions, threads: int) -> int:
        storage, spec = self.table.storage, self.spec
        total = 0
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mere-count") as pool:
            if isinstance(opts.pre, E.AlwaysTrue) and isinstance(opts.post, E.AlwaysTrue):
                # Footers fetched by every thread (the splits left to read need them next anyway).
                clean = list(pool.map(lambda s: stored_rows_are_merged(storage, spec, s), splits))
                total = sum(s.row_count for s, c in zip(splits, clean) if c)
                splits = [s for s, c in zip(splits, clean) if not c]
            if not splits:
                return total
            if len(splits) < threads and not self._windows_sized_by(
                "read.window-bytes", "read.whole-split-bytes"
            ):
                # Keys alone, fewer splits than threads: smaller windows give every thread work on one
                # split, reading one window while counting another (one bucket of W1x5: 0.075 -> 0.045 s).
                # With a split per thread, whole splits count faster (four buckets of W2: 0.069 -> 0.061 s).
                opts = replace(opts, window_bytes=COUNT_WINDOW_BYTES, whole_split_bytes=COUNT_WINDOW_BYTES)
            solo = replace(opts, threads=1) if len(splits) >= threads else opts
            return total + sum(pool.map(lambda s: SplitReader(storage, spec, s, solo).count(), splits))

    def min(self, column: str) -> Any:
        """The smallest non-NULL value of ``column`` among this scan's rows (None when there is none).

        Answered from the files' footer statistics, reading no data page, where they are exact: no filter,
        every split's stored rows are its merged rows (see :meth:`count`), and an integer, date or
        timestamp (not nanosecond) column; otherwise the column alone is read and folded as
        ``pyarrow.compute.min_max`` does. :meth:`explain` says which.

        Args:
            column: A column of the table.

        Returns:
            The value, as a Python object.

        Raises:
            SchemaMismatch: A column the table does not have.
            InvalidInput: A column whose values have no order (lists, structs, maps), or an extreme that
                Python cannot hold (a date or timestamp beyond its datetime, an ns timestamp or duration of
                -2**63).
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        return self._extreme(column, "min")

    def max(self, column: str) -> Any:
        """The largest non-NULL value of ``column`` among this scan's rows (None when there is none).

        Answered from footer statistics where they are exact, as :meth:`min` is. A float column holding
        NaN gives NaN: NaN sorts above every number, as filters order it (``f > 1e308`` keeps NaN).

        Args:
            column: A column of the table.

        Returns:
            The value, as a Python object.

        Raises:
            SchemaMismatch: A column the table does not have.
            InvalidInput: A column whose values have no order (lists, structs, maps), or an extreme that
                Python cannot hold (a date or timestamp beyond its datetime, an ns timestamp or duration of
                -2**63).
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        return self._extreme(column, "max")

    def _extreme(self, column: str, which: str) -> Any:
        try:
            value = self._extreme_value(column, which)
        except OverflowError as e:  # a legal Arrow value beyond Python's datetime range
            raise InvalidInput(
                f"{self.table.name}: {which}() of column {column!r}: the value is beyond what Python's "
                f"datetime holds ({e}); read it as Arrow: scan(columns=[{column!r}]).to_arrow()"
            ) from None
        if is_nat(value):
            raise InvalidInput(
                f"{self.table.name}: {which}() of column {column!r}: the value (-2**63 ns) reads as pandas' "
                f"NaT in Python; read it as Arrow: scan(columns=[{column!r}]).to_arrow()"
            )
        return value

    def _extreme_value(self, column: str, which: str) -> Any:
        scan = self.select(column)  # checks the name
        kind = self.spec.schema.field(column).type
        if pa.types.is_nested(kind) or pa.types.is_null(kind):
            if pa.types.is_null(kind):
                return None
            raise InvalidInput(
                f"{self.table.name}: {which}() of column {column!r} ({kind}): its values have no order"
            )
        found, value = scan._extreme_from_statistics(column, which)
        if found:
            return value
        # Kinds pyarrow does not fold are folded as the same values in a wider or plainer type.
        folded = (
            pa.float32() if pa.types.is_float16(kind) else pa.int64() if pa.types.is_duration(kind) else kind
        )
        best: Any = None
        floating = pa.types.is_floating(folded)
        saw_nan = False
        for batch in scan.to_batches():
            try:
                values = batch.column(0).cast(folded)
                pair = pc.min_max(values)
            except pa.ArrowNotImplementedError as e:
                raise InvalidInput(f"{self.table.name}: {which}() of column {column!r} ({kind}): {e}") from e
            if floating and not saw_nan:
                saw_nan = bool(pc.any(pc.is_nan(values)).as_py())
            v = pair[which]
            if not v.is_valid:
                continue
            best = v if best is None else pc.min_max(pa.array([best, v], type=folded))[which]
        if saw_nan and which == "max":
            return math.nan  # NaN sorts above every number, as filters (and DuckDB, Spark) order it
        if best is None:
            return None
        return pa.scalar(best.as_py(), type=kind).as_py() if pa.types.is_duration(kind) else best.as_py()

    def _extreme_from_statistics(self, column: str, which: str) -> tuple[bool, Any]:
        """(True, the value) where the footers' statistics give it exactly, else (False, None)."""
        kind = self.spec.schema.field(column).type
        exact_kind = (
            pa.types.is_integer(kind)
            or pa.types.is_date(kind)
            or (pa.types.is_timestamp(kind) and kind.unit != "ns")
        )
        parts = self._parts()
        if not exact_kind or not (
            isinstance(parts.pre, E.AlwaysTrue) and isinstance(parts.post, E.AlwaysTrue)
        ):
            return False, None
        splits, _ = self._plan(Explain(self.version))
        storage, spec = self.table.storage, self.spec
        if not all(stored_rows_are_merged(storage, spec, s) for s in splits):
            return False, None
        values: list[Any] = []
        for split in splits:
            for f in split.files:
                md = storage.metadata(f.path, f.size_bytes or None)
                leaves = storage.column_leaves(f.path, f.size_bytes or None)
                for i in range(md.num_row_groups):
                    st = row_group_stats(md, i, spec.schema, [column], leaves).get(column)
                    if st is None or st.null_count is None:
                        return False, None
                    if st.null_count == st.num_values:
                        continue  # NULLs only
                    bound = st.min if which == "min" else st.max
                    if bound is None:
                        return False, None
                    values.append(bound)
        if not values:
            return True, None
        best = min(values) if which == "min" else max(values)
        return True, pa.scalar(best, type=kind).as_py()

    def __len__(self) -> int:
        """``len(scan)`` counts the rows (a read; see :meth:`count`)."""
        return self.count()

    def __bool__(self) -> bool:
        return True  # a scan object is always truthy: testing it must not read the table

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Iterating a scan streams its merged record batches."""
        return self.to_batches()

    def to_polars(self) -> pl.DataFrame:
        """The merged rows as a Polars DataFrame (eager).

        See ``mere.integrations.polars.scan_table`` for a lazy one. 256-bit decimals of up to 38 digits come
        as Polars decimals.

        Returns:
            The DataFrame.

        Raises:
            NotInstalled: Polars is not installed.
            InvalidInput: A decimal column of more than 38 digits (leave it out with ``columns``).
            NoSuchVersion: The scan's version expired (before or while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        polars = require("polars", "polars", "to_polars()")
        target = decimal128_schema(self.schema, self.table.name, "Polars")
        return cast("pl.DataFrame", polars.from_arrow(cast_to(self.to_arrow(), target), rechunk=False))

    def __arrow_c_schema__(self) -> object:
        """The output schema as an Arrow C schema capsule (without reading)."""
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """A fresh, lazy read as an Arrow C stream (every call reads again).

        A ``requested_schema`` is honoured: its fields, by name, become the projection (only those columns
        are read) and their types a cast of the output.
        """
        if requested_schema is None:
            return self.to_reader().__arrow_c_stream__()
        try:
            wanted = pa.Schema._import_from_c_capsule(requested_schema)
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise InvalidInput(
                f"{self.table.name}: requested_schema is not an Arrow schema capsule: {e}"
            ) from e
        missing = [n for n in wanted.names if n not in self.output_columns]
        if missing or len(set(wanted.names)) != len(wanted.names):
            raise SchemaMismatch(
                f"{self.table.name}: requested schema asks for {wanted.names}; this scan returns "
                f"{self.output_columns} (unknown or repeated: {missing or wanted.names})"
            )
        projected = self.select(*wanted.names)
        if projected.schema.equals(wanted):
            return projected.to_reader().__arrow_c_stream__()
        try:
            projected.schema.empty_table().cast(wanted)  # the types, checked now; values as they stream
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise SchemaMismatch(f"{self.table.name}: cannot return the requested schema: {e}") from e
        return pa.RecordBatchReader.from_batches(
            wanted, self._cast_batches(projected, wanted)
        ).__arrow_c_stream__()

    def _cast_batches(self, scan: Scan, wanted: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The scan's batches cast to ``wanted``; a value the cast cannot keep is a SchemaMismatch."""
        for batch in scan.to_batches():
            try:
                yield batch.cast(wanted)
            except (TypeError, ValueError, pa.ArrowException) as e:
                raise SchemaMismatch(
                    f"{self.table.name}: a value does not fit the requested schema: {str(e).splitlines()[0]}"
                ) from e

    def __repr__(self) -> str:
        cols = "*" if self.columns is None else ", ".join(self.columns)
        shown = E.render(E.to_expr(self.filter), max_values=EXPLAIN_VALUES)
        return f"Scan({self.table.name} @ v{self.version}, columns=[{cols}], filter={shown})"


def normalise_columns(columns: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """A projection argument: None (every column), one column name, or a sequence of names."""
    if columns is None:
        return None
    if isinstance(columns, str):
        return (columns,)
    if isinstance(columns, Sequence | set | frozenset) and all(isinstance(c, str) for c in columns):
        repeated = sorted(c for c, n in Counter(columns).items() if n > 1)
        if repeated:  # an output table cannot hold two columns of one name
            raise InvalidInput(f"columns must name each column once; repeated: {repeated}")
        return tuple(columns)
    raise InvalidInput(f"columns must be a list of column names, got {columns!r}")


def _check_split_names(table: str, wanted: Any) -> None:
    """Splits named as (partition JSON, bucket) pairs, as ``compaction_due`` and the change feed name them."""
    ok = isinstance(wanted, Collection) and not isinstance(wanted, str | bytes)
    if ok:
        ok = all(
            isinstance(w, tuple)
            and len(w) == 2
            and isinstance(w[0], str)
            and isinstance(w[1], numbers.Integral)
            for w in wanted
        )
    if not ok:
        raise InvalidInput(f"{table}: splits are (partition JSON, bucket) pairs, got {wanted!r}")


T_Rows = TypeVar("T_Rows", pa.Table, pa.RecordBatch)


def decimal128_schema(schema: pa.Schema, table: str, engine: str) -> pa.Schema:
    """``schema`` as engines without 256-bit decimals (Polars, DuckDB) hold it.

    DuckDB, without 16-bit floats, gets 32-bit ones (the same values). 256-bit decimals of at most 38 digits
    become 128-bit ones, the same values (Polars panics on 256-bit ones, DuckDB refuses them). Wider ones, and
    for Polars timestamps in a zone that is a fixed offset (Polars panics on ``+05:30``), raise
    :class:`~mere.errors.InvalidInput`, naming the columns to leave out. Cast to it unchecked (``safe=False``): every value fits, while a checked cast trips on what pyarrow
    leaves under the NULL slots of fixed-size lists.
    """
    wide: list[str] = []
    offsets: list[str] = []

    def held(kind: pa.DataType, name: str) -> pa.DataType:
        polars_zone = (
            kind.tz.upper() == "UTC" or is_zone_name(kind.tz)
            if pa.types.is_timestamp(kind) and kind.tz
            else True
        )
        if engine == "Polars" and not polars_zone:
            offsets.append(f"{name} ({kind})")
        if pa.types.is_float16(kind) and engine == "DuckDB":
            return pa.float32()  # DuckDB has no 16-bit floats; every one is a 32-bit float exactly
        if pa.types.is_decimal256(kind):
            if kind.precision > 38:
                wide.append(f"{name} ({kind})")
                return kind
            return pa.decimal128(kind.precision, kind.scale)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            item = kind.value_field
            inner = item.with_type(held(item.type, name))
            if pa.types.is_list(kind):
                return pa.list_(inner)
            if pa.types.is_large_list(kind):
                return pa.large_list(inner)
            return pa.list_(inner, kind.list_size)
        if pa.types.is_map(kind):
            return pa.map_(
                kind.key_field.with_type(held(kind.key_type, name)),
                kind.item_field.with_type(held(kind.item_type, name)),
                kind.keys_sorted,
            )
        if pa.types.is_struct(kind):
            return pa.struct([f.with_type(held(f.type, name)) for f in kind])
        return kind

    out = pa.schema([f.with_type(held(f.type, f.name)) for f in schema], metadata=schema.metadata)
    if wide:
        raise InvalidInput(
            f"{table}: {engine} holds decimals of at most 38 digits; leave out column(s) {', '.join(wide)} "
            "(columns=[...]) or read them with another engine"
        )
    if offsets:
        raise InvalidInput(
            f"{table}: {engine} takes time zones by their exact names only (such as 'Asia/Kolkata'), not fixed "
            "offsets or other spellings; "
            f"leave out column(s) {', '.join(offsets)} (columns=[...]) or read them with another engine"
        )
    return out


def cast_to(rows: T_Rows, target: pa.Schema) -> T_Rows:
    """``rows`` (a table or batch of some of ``target``'s columns, by name) in ``target``'s types, unchecked.

    See :func:`decimal128_schema`; ``rows`` themselves where the types agree.
    """
    fields = [target.field(name) for name in rows.schema.names]
    if all(f.type == have.type for f, have in zip(fields, rows.schema)):
        return rows
    return rows.cast(pa.schema(fields), safe=False)
