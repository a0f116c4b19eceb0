"""PySpark Structured Streaming source: a mere table's change feed, one micro-batch per version range.

Reading::

    changes = (spark.readStream.format("mere")
               .option("warehouse", "/data/wh")               # and catalog / storage.<key>, as batch reads
               .option("readChangeFeed", "true")              # required: the output is the change feed
               .option("startingVersion", "5")                # optional: see below
               .option("maxVersionsPerTrigger", "10")         # optional
               .load("sales.orders"))

``readChangeFeed`` (Delta Lake's name) is required: Spark asks a Python data source for its schema in the
same way for batch and stream reads, so only an option can add the change columns. A stream read without
it fails with :class:`~mere.errors.InvalidInput` when the query starts; a batch read with it is refused.

Output: the table's columns (key and partition columns first; ``columns`` projects, ``filter`` selects
rows as :meth:`mere.Table.changes` does) followed by ``_change`` (``insert``, ``update_before``,
``update_after``, ``delete``), ``_version`` (long) and ``_commit_time`` (timestamp, UTC).

Offsets are table versions: ``{"version": N, "table": "<uuid>"}`` means every change committed up to and
including version ``N`` has been emitted; the micro-batch from offset ``s`` to ``e`` is the net change of
each key over the commits ``s < version <= e`` (``Table.changes(s, e)``). The table's uuid makes a
restart against a table that was dropped and created again fail instead of reading another table.

- Without ``startingVersion`` the first micro-batch is the merged snapshot at the table's newest version
  when the query starts, every row as ``_change = 'insert'`` with that version as ``_version`` (and its
  commit time); the stream then continues with the commits after it.
- ``startingVersion = N`` starts with the changes committed in version ``N`` and after (as Delta Lake's
  option: N is included), i.e. ``Table.changes(N - 1, ...)``; no snapshot. Version 0 is the table's
  creation, which holds no rows, so 0 and 1 read the same. ``N`` may be the newest version + 1 (nothing
  yet), and ``latest`` starts after the newest version. A start that has expired (or whose later commits
  have) raises :class:`~mere.errors.NoSuchVersion`, an unknown future one too.
- ``maxVersionsPerTrigger = K``: a micro-batch covers at most K versions (the snapshot batch counts as one,
  whatever the version). ``Trigger.AvailableNow`` honours it and stops at the version that was newest when
  the query started; ``Trigger.Once`` reads everything in one batch.
- A restart from the checkpoint continues at the checkpoint's offset; ``startingVersion`` applies only to a
  new checkpoint (as in Delta). A replayed micro-batch reads the same version range, so the same rows.
- ``consumer = NAME``: the stream holds a change-feed consumer of that name (see
  :meth:`mere.Table.consumer`), so that ``expire`` (manual or automatic) keeps every version the stream
  has yet to read. Spark's checkpoint stays the source of truth for the stream's offsets; the consumer
  follows it: a new query starts as it would without the option and registers the consumer at the
  version it starts from (the snapshot's version for a snapshot start), or moves an existing one back to
  it (to resume a consumer's position in a new query, pass ``startingVersion`` = position + 1); a
  restart makes sure it is at or before the checkpoint's offset; and each time Spark commits a
  micro-batch (the reader's ``commit(end)``, which Spark calls as it plans the next batch, so the
  consumer trails the last batch by one: it holds more, never less) the consumer is committed to the
  batch's end version. While no batch runs the query marks it seen every minute, so a live query is
  never dropped as unseen; a consumer that ``expire`` dropped (unseen past
  ``changes.consumer-expiration``) fails the query with :class:`~mere.errors.ConsumerDropped`.

Exactly-once into another mere table (the sink commits each micro-batch once, keyed by query and batch
id): give the target the change column ``_change`` (``cdc_column``), whose ``insert``/``update_after``
rows upsert, ``delete`` rows delete and ``update_before`` rows are ignored, and drop ``_version`` and
``_commit_time``::

    (changes.drop("_version", "_commit_time")
        .writeStream.format("mere").option("warehouse", "/data/wh")
        .option("primary_key", "order_id").option("partition_by", "day").option("cdc_column", "_change")
        .option("checkpointLocation", "/chk/orders-copy").start("sales.orders_copy"))

Planning: the snapshot batch is cut into Spark tasks like a batch read (storage-only scan tasks); a change
batch gives each task a group of the splits (range partition x bucket) that the range's commits wrote, and
each task computes those splits' change feed with mere's own :func:`~mere.table.changes.change_feed`,
opening the catalog itself (as the sink's tasks do). Each key lives in one split, so its rows stay in one
task, in order. Where keys can move between partitions (table-wide keys), a task gets every changed split
of its buckets (a key keeps its bucket when it moves), whose feed gives a moved key's delete in its old
partition before its row in the new one (see :meth:`mere.Table.changes`), which a sink applying rows in
order keeps.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from mere.errors import InvalidInput, NoSuchVersion
from mere.integrations.spark.options import (
    PartitionSizing,
    TableRef,
    bool_option,
    check_options,
    column_list_option,
    int_option,
    lower_options,
)
from mere.integrations.spark.types import arrow_target, conform_batch, spark_schema
from mere.table.changes import (
    CHANGE_COLUMN,
    COMMIT_TIME_COLUMN,
    INSERT,
    VERSION_COLUMN,
    change_feed,
    check_consumer_name,
)
from mere.table.scan import ScanTask, group_tasks, read_tasks
from mere.table.table import Table

__all__ = [
    "CHANGE_COLUMNS",
    "ChangePartition",
    "MereStreamReader",
    "SnapshotPartition",
    "StreamOptions",
    "stream_schema",
    "wants_change_feed",
]

CHANGE_COLUMNS = (CHANGE_COLUMN, VERSION_COLUMN, COMMIT_TIME_COLUMN)
SNAPSHOT = -1
"""The offset before a stream's first batch when it starts with the snapshot: nothing emitted yet."""

_BATCH_ONLY = ("version", "versionasof", "as_of", "timestampasof", "tag")
HEARTBEAT_SECONDS = 60.0
"""How often a query holding a consumer marks it seen while no micro-batch commits it."""


def wants_change_feed(options: Mapping[str, str]) -> bool:
    """Whether the options ask for the change feed (``readChangeFeed``), whose schema adds the change columns."""
    return bool_option("readChangeFeed", lower_options(options).get("readchangefeed"))


@dataclass(frozen=True)
class StreamOptions:
    """The stream options, parsed and checked (``InvalidInput`` for any bad one)."""

    starting_version: int | None  # None: start with the snapshot
    latest: bool  # startingVersion = latest: only the commits after the newest version
    max_versions: int | None
    columns: tuple[str, ...] | None
    filter: str | None
    consumer: str | None = None  # a change-feed consumer the stream holds (pins what it has yet to read)

    @staticmethod
    def parse(name: str, options: Mapping[str, str]) -> StreamOptions:
        check_options(options)
        opts = lower_options(options)
        if not wants_change_feed(options):
            raise InvalidInput(
                f"{name}: a mere stream reads the table's change feed; add .option('readChangeFeed', 'true') "
                "(its rows carry _change, _version and _commit_time)"
            )
        given = [k for k in _BATCH_ONLY if k in opts]
        if given:
            raise InvalidInput(
                f"{name}: option {given[0]!r} is for batch reads; a stream starts at 'startingVersion' "
                "(or with the snapshot at the newest version)"
            )
        raw = opts.get("startingversion", "").strip()
        starting: int | None = None
        latest = raw.lower() == "latest"
        if raw and not latest:
            try:
                starting = int(raw)
            except ValueError:
                starting = -1
            if starting < 0:
                raise InvalidInput(
                    f"{name}: option 'startingVersion' must be a version (a non-negative integer) or 'latest', "
                    f"got {raw!r}"
                )
        columns = column_list_option("columns", opts.get("columns"))
        consumer = opts.get("consumer")
        if consumer is not None:
            check_consumer_name(f"{name}: option 'consumer'", consumer.strip())
        return StreamOptions(
            starting,
            latest,
            int_option("maxVersionsPerTrigger", opts.get("maxversionspertrigger")),
            None if columns is None else tuple(columns),
            opts.get("filter") or None,
            None if consumer is None else consumer.strip(),
        )


def stream_schema(ref: TableRef, options: Mapping[str, str]) -> StructType:
    """The Spark schema of a change-feed read: the (projected) table columns and the change columns.

    Checks every option now, so that a bad one fails at ``load()``, before any query starts."""
    parsed = StreamOptions.parse(ref.name, options)
    table = ref.open()
    clash = [c for c in CHANGE_COLUMNS if c in table.schema.names]
    if clash:
        raise InvalidInput(
            f"{table.name} has column(s) {clash}, which the change feed adds to every row; "
            "rename them to read its change feed"
        )
    v = table.version
    columns = None if parsed.columns is None else list(parsed.columns)
    return spark_schema(table.changes(v, v, columns=columns, filter=parsed.filter).schema)


# ---------------------------------------------------------------------------------------------
# Partitions: picklable plans, read in Spark's tasks


class SnapshotPartition(InputPartition):
    """A share of the snapshot batch: scan tasks of one version (storage access only)."""

    def __init__(self, index: int, tasks: Sequence[ScanTask], version: int, committed_at: dt.datetime):
        super().__init__(index)
        self.tasks = tuple(tasks)
        self.version = version
        self.committed_at = committed_at


@dataclass(frozen=True)
class ChangeRange:
    """One change batch: the commits ``start < version <= end`` of a table (its uuid pins it)."""

    ref: TableRef
    table_uuid: str
    start: int
    end: int
    columns: tuple[str, ...] | None
    filter: str | None


class ChangePartition(InputPartition):
    """A share of a change batch: the change feed of some splits (partition JSON, bucket)."""

    def __init__(self, index: int, batch: ChangeRange, splits: Sequence[tuple[str, int]]) -> None:
        super().__init__(index)
        self.batch = batch
        self.splits = tuple(splits)


def _open(ref: TableRef, uuid: str) -> Table:
    table = ref.open()
    if table.record.uuid != uuid:
        raise InvalidInput(
            f"{ref.name} was dropped and created again since this stream's checkpoint was written; "
            "start the query with a new checkpoint location"
        )
    return table


def _constant(value: Any, kind: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, kind), n)


def _snapshot_batch(batch: pa.RecordBatch, version: int, committed_at: dt.datetime) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = [
        *batch.columns,
        _constant(INSERT, pa.string(), n),
        _constant(version, pa.int64(), n),
        _constant(committed_at, pa.timestamp("us", tz="UTC"), n),
    ]
    return pa.RecordBatch.from_arrays(arrays, names=[*batch.schema.names, *CHANGE_COLUMNS])


def _group_splits(
    sizes: Mapping[tuple[str, int], int], sizing: PartitionSizing, by_bucket: bool = False
) -> list[list[tuple[str, int]]]:
    """Splits packed into balanced groups by the bytes of their changed files, as many groups as a batch
    read would make of those bytes (at least ``min_partitions``, at most one per split). ``by_bucket``:
    the splits of one bucket stay in one group (a key that moves partition stays in its bucket)."""
    if not sizes:
        return []
    units: dict[Any, list[tuple[str, int]]] = {}
    for split in sizes:
        units.setdefault(split[1] if by_bucket else split, []).append(split)
    weight = {u: sum(sizes[s] + sizing.open_cost for s in splits) for u, splits in units.items()}
    total = sum(weight.values())
    count = min(len(units), max(sizing.min_partitions, -(-total // sizing.max_bytes)))
    groups: list[list[tuple[str, int]]] = [[] for _ in range(count)]
    loads = [0] * count
    for unit in sorted(units, key=lambda u: (-weight[u], u)):
        lightest = loads.index(min(loads))
        groups[lightest].extend(units[unit])
        loads[lightest] += weight[unit]
    return [sorted(g) for g in groups]


# ---------------------------------------------------------------------------------------------
# The reader


class MereStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A mere table's change feed as a Spark stream (see the module docstring for the semantics).

    Offsets, planning and limits run on the driver; ``read`` runs in Spark's tasks from the partition
    alone (nothing of the driver's state is needed there).
    """

    def __init__(self, ref: TableRef, options: Mapping[str, str], schema: StructType) -> None:
        self.ref = ref
        self.options = StreamOptions.parse(ref.name, options)
        names = schema.fieldNames()
        missing = [c for c in CHANGE_COLUMNS if c not in names]
        if missing:
            raise InvalidInput(f"{ref.name}: the stream's schema lacks the change column(s) {missing}")
        self.columns = [c for c in names if c not in CHANGE_COLUMNS]
        self.target = arrow_target(schema)
        self.sizing = PartitionSizing.from_options(lower_options(options))
        self._until: int | None = None  # Trigger.AvailableNow: the newest version when the query started
        self._pinned = False  # the consumer (option ``consumer``) is known to hold this query's start
        self._seen = 0.0  # time.monotonic() when the consumer was last marked seen

    # -- offsets ------------------------------------------------------------------------------------

    def _offset(self, table: Table, version: int) -> dict[str, Any]:
        return {"version": version, "table": table.record.uuid}

    def _parse(self, offset: Mapping[str, Any]) -> tuple[int, str]:
        """An offset's version and table uuid."""
        try:
            return int(offset["version"]), str(offset["table"])
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidInput(
                f"{self.ref.name}: the checkpoint holds offset {offset!r}, not a mere stream offset; "
                "start the query with a new checkpoint location"
            ) from e

    def _version(self, offset: Mapping[str, Any]) -> tuple[Table, int]:
        """The table (checked to be the one the offset was taken on) and the offset's version."""
        version, uuid = self._parse(offset)
        return _open(self.ref, uuid), version

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: before the snapshot, or just before ``startingVersion`` (with option
        ``consumer``, the consumer is registered there, or moved back to it)."""
        table = self.ref.open()
        start = self._start(table)
        if self.options.consumer is not None:  # Spark may ask twice: the same start either way
            self._pin(table, self.options.consumer, table.version if start == SNAPSHOT else start)
        return self._offset(table, start)

    def _start(self, table: Table) -> int:
        """The offset version a new query starts from, by ``startingVersion`` (checked: NoSuchVersion for a
        start that has expired or is beyond the next version)."""
        opts = self.options
        if opts.latest:
            return table.version
        if opts.starting_version is None:
            return SNAPSHOT
        newest = table.version
        if opts.starting_version > newest + 1:
            raise NoSuchVersion(
                f"{table.name}: startingVersion {opts.starting_version} is after the next version "
                f"{newest + 1} (the newest is {newest})"
            )
        start = max(opts.starting_version - 1, 0)  # version 0 is the creation: it holds no rows
        # Fails now (NoSuchVersion) when the start or a commit after it has expired; reads nothing yet.
        table.changes(start, newest, columns=self.columns, filter=opts.filter)
        return start

    def _pin(self, table: Table, name: str, version: int) -> None:
        """Make sure consumer ``name`` exists at or before ``version`` (registered there if new)."""
        consumer = table.consumer(name, start_version=version)
        if consumer.position > version:
            consumer.seek(version)
        self._pinned, self._seen = True, time.monotonic()

    def _hold(self, table: Table, begin: int) -> None:
        """With option ``consumer``: at a query's first planning (a restart from the checkpoint included),
        the consumer holds the checkpoint's offset ``begin``; later, it is marked seen every
        :data:`HEARTBEAT_SECONDS`."""
        name = self.options.consumer
        if name is None:
            return
        if not self._pinned:
            self._pin(table, name, table.version if begin == SNAPSHOT else begin)
        elif time.monotonic() - self._seen >= HEARTBEAT_SECONDS:
            table.consumer(name, create=False).heartbeat()
            self._seen = time.monotonic()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxVersionsPerTrigger`` travels through Spark as a file count: Spark's Python API knows only
        its built-in limits, and a version is to a mere stream what a file is to a file stream."""
        n = self.options.max_versions
        return ReadAllAvailable() if n is None else ReadMaxFiles(n)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: the newest version, at most ``maxVersionsPerTrigger`` past
        ``start`` (the snapshot batch is one batch whatever the version)."""
        table, begin = self._version(start)
        self._hold(table, begin)
        newest = table.version
        if self._until is not None:
            newest = min(newest, self._until)
        end = newest
        if begin != SNAPSHOT and isinstance(limit, ReadMaxFiles):
            end = min(newest, begin + limit.max_files)
        return self._offset(table, max(begin, end))

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read up to the version that is newest now, then stop."""
        self._until = self.ref.open().version

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The newest version, for the query's progress reports."""
        table = self.ref.open()
        return self._offset(table, table.version)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the micro-batch ending at ``end``: with option ``consumer``, the consumer is
        committed to its version (registered there if it went missing), so ``expire`` may give up the
        versions before it. Without, nothing to release: versions stay readable until ``Table.expire``."""
        name = self.options.consumer
        if name is None:
            return
        version, uuid = self._parse(end)
        if version == SNAPSHOT:
            return
        table = _open(self.ref, uuid)
        table.consumer(name, start_version=version).commit(version)
        self._seen = time.monotonic()

    # -- planning -----------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks of one micro-batch: the snapshot at ``end``'s version, or the change feed between the
        two versions cut by split."""
        begin, _ = self._parse(start)
        finish, _ = self._parse(end)
        if finish <= begin:
            return []
        table, _ = self._version(end)
        if begin == SNAPSHOT:
            scan = table.scan(columns=self.columns, filter=self.options.filter, version=finish)
            committed_at = table.snapshot(version=finish).committed_at
            groups = group_tasks(
                scan.tasks(), self.sizing.max_bytes, self.sizing.open_cost, self.sizing.min_partitions
            )
            return [SnapshotPartition(i, g, finish, committed_at) for i, g in enumerate(groups)]
        # Validates the range first (NoSuchVersion once expired), as Table.changes does, reading no rows.
        table.changes(begin, finish, columns=self.columns, filter=self.options.filter)
        sizes: dict[tuple[str, int], int] = {}
        for entry, _ in table.catalog.sql.files_changed(table.record.id, begin, finish):
            split = (entry.partition, entry.bucket)
            sizes[split] = sizes.get(split, 0) + entry.size_bytes
        batch = ChangeRange(
            self.ref, table.record.uuid, begin, finish, tuple(self.columns), self.options.filter
        )
        shares = _group_splits(sizes, self.sizing, by_bucket=table.spec.cross_partition)
        return [ChangePartition(i, batch, g) for i, g in enumerate(shares)]

    # -- reading (in Spark's tasks) -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one partition as Arrow batches of exactly the declared schema."""
        if isinstance(partition, SnapshotPartition):
            for batch in read_tasks(partition.tasks):
                if batch.num_rows:
                    yield conform_batch(
                        _snapshot_batch(batch, partition.version, partition.committed_at), self.target
                    )
            return
        if not isinstance(partition, ChangePartition):
            return
        r = partition.batch
        table = _open(r.ref, r.table_uuid)
        columns = None if r.columns is None else list(r.columns)
        feed = change_feed(table, r.start, r.end, columns, r.filter, splits=partition.splits)
        for batch in feed:
            if batch.num_rows:
                yield conform_batch(batch, self.target)
