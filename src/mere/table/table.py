"""A table: the facade over the table layer's operations (writes, scans, time travel, maintenance).

``Table`` holds a handle's state (its catalog record, layout and settings) and hands each operation a
:class:`~mere.table.context.TableContext`; the operations themselves live in :mod:`mere.table.ops` and
commit through :mod:`mere.table.commit`.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from mere.errors import (
    InvalidInput,
    MereError,
    NoSuchTable,
    NoSuchTag,
    NoSuchVersion,
    TagExists,
    names_its_table,
)
from mere.io import Storage
from mere.metadata import CommitResult, FileEntry, Snapshot, TableRecord
from mere.partitions import partition_json
from mere.read.options import DEFAULT_WHOLE_SPLIT_BYTES, DEFAULT_WINDOW_BYTES
from mere.spec import OP_COLUMN, TableSpec
from mere.table import versions
from mere.table.commit import StagedChange
from mere.table.compaction import CompactionPlan, CompactionTask
from mere.table.context import CatalogHandle, MetadataStore, SchemaChange, TableContext, WriteSettings
from mere.table.inspect import Inspect
from mere.table.ops import compaction, consumers, maintenance, merge_into, rollback
from mere.table.ops import write as write_ops
from mere.table.ops.change_log import Consumer, change_feed, consumer_feed, follow
from mere.table.ops.evolve import SchemaUpdate
from mere.table.ops.merge_into import Merge, MergeMetrics
from mere.table.scan import Scan, normalise_columns
from mere.table.transaction import Transaction
from mere.write.writer import converted_input

SCAN_OPTIONS = ("threads", "parallel", "window_bytes", "queue_batches")
STAGE_OPERATIONS = write_ops.STAGE_OPERATIONS
AUTO_COMPACT_MIN_FILES = compaction.AUTO_COMPACT_MIN_FILES

StagedWrite = StagedChange  # the name engines use for a staged write (the one commit message type)
StagedMerge = StagedChange  # ... and for a share of a distributed MERGE


@names_its_table
class Table:
    """A table in a catalog. Cheap to create; every read asks the catalog for the version to read."""

    def __init__(self, catalog: CatalogHandle, record: TableRecord) -> None:
        self.catalog = catalog
        self._load(record)

    def _load(self, record: TableRecord) -> None:
        self.record = record
        # The catalog's storage, naming this table in every read failure of one of its files.
        self.storage: Storage = self.catalog.storage.for_table(record.identifier)
        self._columns_seen = record.version  # commits up to here kept the columns of self.spec
        self._pending_columns: SchemaChange | None = None  # see adding_columns()
        self.spec = TableSpec.from_json(record.spec, record.identifier)
        self.location = record.location
        props = self.spec.properties
        self.settings = WriteSettings.of(props)
        self.compression = self.settings.compression
        self.compression_level = self.settings.compression_level
        self.row_group_rows = self.settings.row_group_rows
        self.chunk_bytes = self.settings.chunk_bytes
        self.window_bytes = int(props.get("read.window-bytes", DEFAULT_WINDOW_BYTES))
        default_whole = 0 if "read.window-bytes" in props else DEFAULT_WHOLE_SPLIT_BYTES
        self.whole_split_bytes = int(props.get("read.whole-split-bytes", default_whole))
        self._retention = maintenance.RetentionState()

    def refresh(self) -> Table:
        """Reload the table's layout and properties from the catalog (another handle may have changed them)."""
        record = self._sql.load_table(self.record.namespace, self.record.name)
        if record.uuid != self.record.uuid:
            raise NoSuchTable(f"{self.name} was dropped and created again; open it anew with catalog.table()")
        self._load(record)
        return self

    @property
    def _sql(self) -> MetadataStore:
        return self.catalog.sql

    @property
    def context(self) -> TableContext:
        """The table as operations see it (identity, layout, settings, catalog, storage); nothing is read."""
        return TableContext(
            self.record,
            self.spec,
            self.catalog,
            self.storage,
            self,
            self.settings,
            self._columns_seen,
            self._pending_columns,
            self._committed,
        )

    def _committed(self, result: CommitResult, spec_changed: bool) -> None:
        """A commit of this handle landed: reload a changed layout, then automatic maintenance."""
        if spec_changed:
            self.refresh()
        elif not result.already_committed:
            # Every commit up to this one kept the handle's columns (checked by the commit).
            self._columns_seen = max(self._columns_seen, result.version)
        maintenance.after_commit(self, self._retention, result)

    @property
    def name(self) -> str:
        """``namespace.name``."""
        return self.record.identifier

    @property
    def schema(self) -> pa.Schema:
        """The table's Arrow schema."""
        return self.spec.schema

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The primary key columns (empty for tables without key)."""
        return self.spec.primary_key

    @property
    def version(self) -> int:
        """The newest committed version."""
        return versions.current(self.context)

    @property
    def properties(self) -> dict[str, str]:
        """The table's properties (see ``mere.spec.PROPERTIES`` for those mere reads)."""
        return dict(self.spec.properties)

    def __repr__(self) -> str:
        try:
            version: Any = self.version
        except MereError:
            version = "?"  # a repr must not fail when the catalog cannot be reached
        parts = [repr(self.name), f"version={version}"]
        if self.spec.primary_key:
            parts.append(f"primary_key={list(self.spec.primary_key)}")
        if self.spec.partition_by:
            parts.append(f"partition_by={list(self.spec.partition_by)}")
        parts.append(f"buckets={self.spec.buckets}")
        return f"Table({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A table travels as its catalog's address and its record: the receiver reconnects.
        return (Table, (self.catalog, self.record))

    # -- reads -----------------------------------------------------------------------------------

    def files_at(self, version: int) -> list[FileEntry]:
        """The catalog's entries of the live files at a version (NoSuchVersion once it has expired, or
        before it exists)."""
        return versions.files_at(self.context, version)

    def split_tables(
        self, version: int, splits: set[tuple[str, int]], columns: Sequence[str], filter: Any = None
    ) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of some splits, keyed by (partition JSON, bucket); reads only those splits. Rows of
        older versions come in the current columns (the change feed compares versions column by column)."""
        self.resolve_version(version)
        return Scan(self, version, tuple(columns), filter, spec=self.spec).split_tables(splits)

    def resolve_version(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> int:
        """The version a read of ``version``, ``as_of`` or ``tag`` sees (default: the newest).

        ``as_of`` (a datetime, an ISO 8601 string or epoch seconds) names the newest version committed at or
        before it. A time without a zone (a naive datetime such as ``datetime.now()``, or ISO text without
        an offset) is read as UTC, not as local time: pass ``datetime.now(timezone.utc)`` or an offset.

        NoSuchVersion if there is none (or it expired), NoSuchTag for an unknown tag.
        """
        return versions.resolve(self.context, version, as_of, tag)

    def scan(
        self,
        columns: Sequence[str] | str | None = None,
        filter: Any = None,
        version: int | None = None,
        as_of: Any = None,
        tag: str | None = None,
        **options: Any,
    ) -> Scan:
        """Plan a merged read. ``filter`` is a string, a :mod:`mere.expr` expression or a pyarrow Expression.

        ``version``, ``as_of`` or ``tag`` (one at most) pick an older version to read (see
        :meth:`resolve_version`). An ``as_of`` without a zone (a naive datetime such as ``datetime.now()``,
        or ISO text without an offset) is read as UTC, not as local time.
        """
        unknown = sorted(set(options) - set(SCAN_OPTIONS))
        if unknown:
            raise InvalidInput(
                f"{self.name}: unknown scan option(s) {unknown}; scan() takes columns, filter, "
                f"version, as_of, tag and {', '.join(SCAN_OPTIONS)}"
            )
        options = {k: v for k, v in options.items() if v is not None}  # None: the default
        for key, value in options.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInput(
                    f"{self.name}: scan option {key} must be a positive integer, got {value!r}"
                )
        if "parallel" in options:  # the option's earlier name
            options.setdefault("threads", options.pop("parallel"))
        v = self.resolve_version(version, as_of, tag)
        # An older version is read with its own columns (time travel across schema changes).
        older = (version, as_of, tag) != (None, None, None) and v != self.version
        spec = self.spec_at(v) if older else self.spec
        scan = Scan(self, v, normalise_columns(columns), filter, **options, spec=spec)
        scan.output_columns  # noqa: B018 - validate column names now, not at first read
        scan.filter_parts()  # validate the filter now (the scan keeps what it parsed)
        return scan

    def spec_at(self, version: int) -> TableSpec:
        """The table's layout (columns, key, properties) as of ``version``; the current one when the
        catalog cannot tell."""
        return versions.spec_at(self.context, version)

    # -- schema evolution ---------------------------------------------------------------------------

    def evolve(self) -> SchemaUpdate:
        """Start a schema change: add, widen, rename and drop columns, committed together as one version.

        ``with t.evolve() as e: e.add_column("note", pa.string()).rename_column("qty", "quantity")``.
        Data files are never rewritten; older versions keep their own schema for time travel. Key and
        partition columns cannot be dropped, renamed or retyped.
        """
        return SchemaUpdate(self)

    def add_column(self, name: str, type: pa.DataType | str, default: Any = None) -> CommitResult | None:
        """Add a nullable column as a new version; rows written before it read ``default`` (None: null)."""
        return self.evolve().add_column(name, type, default).commit()

    def widen(self, column: str, type: pa.DataType | str) -> CommitResult | None:
        """Widen a column's type (int8 -> ... -> int64, float32 -> float64, decimal precision up,
        string -> large_string, binary -> large_binary) as a new version; None if it has that type."""
        return self.evolve().widen(column, type).commit()

    def rename_column(self, column: str, new_name: str) -> CommitResult | None:
        """Rename a column as a new version."""
        return self.evolve().rename_column(column, new_name).commit()

    def drop_column(self, column: str) -> CommitResult | None:
        """Drop a column as a new version (its values stay readable in older versions)."""
        return self.evolve().drop_column(column).commit()

    def changes(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        *,
        consumer: str | None = None,
    ) -> pa.RecordBatchReader:
        """The net change of every key between ``start_version`` and ``end_version`` (default: newest):
        the rows of the commits after ``start_version`` up to ``end_version``, with ``_change`` (``insert``,
        ``update_before``, ``update_after``, ``delete``), ``_version`` and ``_commit_time`` columns, streamed
        split by split. Applied to the snapshot at ``start_version`` it gives the one at ``end_version``.
        ``filter`` keeps the feed rows it holds for (on before and after images alike). Keyed tables only;
        a version before the retained history raises :class:`~mere.errors.NoSuchVersion`. Versions are numbers
        here; for a point in time, :meth:`resolve_version` ``(as_of=...)`` gives one (a time without a zone
        is read as UTC, not as local time).

        ``consumer`` (instead of ``start_version``): the changes after that consumer's position (see
        :meth:`consumer`), marking it seen; nothing moves it. Pass the ``end_version`` you will commit
        (``end = t.version``), or use ``t.consumer(name).changes()``, which returns it.

        Args:
            start_version: the version after which changes are read.
            end_version: the last version read (default: the newest).
            columns: the columns to read (key and partition columns always come first).
            filter: keeps the feed rows it holds for.
            consumer: a registered consumer whose position is the start.

        Returns:
            The feed, as a ``pyarrow.RecordBatchReader``.

        Raises:
            InvalidInput: bad versions, columns or filter; both or neither of start_version and consumer.
            NoSuchVersion: a version that has expired or does not exist.
            NoSuchConsumer, ConsumerDropped: an unknown consumer, or one that expire dropped.
        """
        if consumer is not None:
            if start_version is not None:
                raise InvalidInput(
                    f"{self.name}: give start_version or consumer, not both (a consumer starts after its "
                    "position)"
                )
            return consumer_feed(self, consumer, end_version, columns, filter)[1]
        return change_feed(self, start_version, end_version, columns, filter)  # type: ignore[arg-type]

    def follow(
        self,
        from_version: int | None = None,
        *,
        consumer: str | None = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        poll_seconds: float = 1.0,
        max_poll_seconds: float = 30.0,
        auto_commit: bool = True,
    ) -> Iterator[tuple[int, pa.Table]]:
        """``mere.follow(self, ...)``: yield ``(version, changes)`` as commits land after ``from_version``,
        or after ``consumer``'s position, committing each version the caller has taken (at-least-once;
        see :func:`mere.follow`).

        Args:
            from_version: the version after which to start (not with ``consumer``).
            consumer: a registered consumer whose position to start after, and to commit.
            columns: the columns to read.
            filter: keeps the feed rows it holds for.
            poll_seconds: the first wait while nothing lands.
            max_poll_seconds: the longest wait.
            auto_commit: with ``consumer``, commit each version the caller has taken.

        Returns:
            An iterator of ``(version, changes)``; arguments are checked at its first ``next()``.
        """
        return follow(
            self,
            from_version,
            columns=columns,
            filter=filter,
            poll_seconds=poll_seconds,
            max_poll_seconds=max_poll_seconds,
            consumer=consumer,
            auto_commit=auto_commit,
        )

    # -- change-feed consumers ---------------------------------------------------------------------

    def consumer(self, name: str, *, start_version: int | None = None, create: bool = True) -> Consumer:
        """A named change-feed consumer of this table, registered now if it does not exist.

        A consumer's position (the last version it has processed) lives in the catalog: its feed
        (:meth:`Consumer.changes <mere.table.ops.change_log.Consumer.changes>`, ``changes(consumer=)``,
        ``follow(consumer=)``) starts after it, only :meth:`Consumer.commit
        <mere.table.ops.change_log.Consumer.commit>` moves it (at-least-once), and :meth:`expire`
        (manual or automatic) keeps every version from it on. A consumer unseen for longer than
        ``changes.consumer-expiration`` (default 7 days) that holds back versions expire would give up is
        dropped by it, with a warning; its next use raises :class:`~mere.errors.ConsumerDropped`.

        Names are 1 to 128 ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit.

        Args:
            name: the consumer's name.
            start_version: where a new consumer starts (its position: its feed begins after it); default
                the newest version. Ignored for an existing consumer (as Kafka's ``auto.offset.reset``);
                :meth:`Consumer.seek <mere.table.ops.change_log.Consumer.seek>` moves one.
            create: register it if it does not exist (else :class:`~mere.errors.NoSuchConsumer`).

        Returns:
            The consumer's handle (opening it marks it seen).

        Raises:
            InvalidInput: a bad name or version.
            NoSuchVersion: ``start_version`` has expired or does not exist.
            NoSuchConsumer: none of that name and ``create`` is False.
            ConsumerDropped: expire dropped it (:meth:`drop_consumer` it to register it again).
        """
        if not isinstance(create, bool):
            raise InvalidInput(f"{self.name}: create must be True or False, got {create!r}")
        ctx = self.context
        if create:
            consumers.register(ctx, name, start_version)
        else:
            if start_version is not None:
                raise InvalidInput(f"{self.name}: start_version applies to a consumer being created")
            consumers.get(ctx, name, touch=True)
        return Consumer(self, name)

    def drop_consumer(self, name: str) -> None:
        """Remove a consumer (also one expire dropped): the versions it held go at the next
        :meth:`expire`, and the name may be registered again.

        Raises:
            InvalidInput: a bad name.
            NoSuchConsumer: there is none of that name.
        """
        consumers.drop(self.context, name)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        """``scan(**kwargs).to_arrow()``: ``columns``, ``filter``, ``version``, ``as_of`` (a time without a
        zone is read as UTC, not as local time) or ``tag``, as :meth:`scan` takes them."""
        return self.scan(**kwargs).to_arrow()

    def current_snapshot(self) -> Snapshot:
        """The newest version as a :class:`~mere.metadata.Snapshot`."""
        return self._sql.snapshot(self.record.id, self.version)

    def snapshot(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> Snapshot:
        """The snapshot of a version, of a tag's version, or of the newest version committed at or before
        ``as_of`` (a datetime, ISO 8601 string or epoch seconds; one without a zone is read as UTC, not as
        local time)."""
        return self._sql.snapshot(self.record.id, self.resolve_version(version, as_of, tag))

    @property
    def inspect(self) -> Inspect:
        """Tabular metadata as Arrow tables: ``t.inspect.files()``, ``t.inspect.snapshots()``,
        ``t.inspect.consumers()``."""
        return Inspect(self)

    def history(self) -> list[Snapshot]:
        """Every version as a :class:`~mere.metadata.Snapshot`, oldest first (expired ones marked)."""
        return self._sql.history(self.record.id)

    def files(self, version: int | None = None) -> pa.Table:
        """The live files at a version, as an Arrow table (the same as ``t.inspect.files()``)."""
        return self.inspect.files(version)

    # -- tags and rollback -----------------------------------------------------------------------

    def tag(self, name: str, version: int | None = None, *, replace: bool = False) -> int:
        """Name a version (default: the current one) so that reads can ask for it by name and
        :meth:`expire` keeps it. Returns the version tagged.

        Tag names are 1 to 128 ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or
        digit. An existing name raises :class:`~mere.errors.TagExists` unless ``replace`` moves it. Only a
        readable version (not expired, or already tagged) can be tagged.
        """
        versions.check_tag(self.name, name)
        if not isinstance(replace, bool):
            raise InvalidInput(f"{self.name}: replace must be True or False, got {replace!r}")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise InvalidInput(f"{self.name}: version must be an integer, got {version!r}")
        try:
            return self._sql.create_tag(self.record.id, name, version, move=replace)
        except (NoSuchVersion, TagExists) as e:
            raise type(e)(f"{self.name}: {e}") from None

    def tags(self) -> dict[str, int]:
        """The table's tags: name -> version, sorted by name."""
        return versions.tags(self.context)

    def untag(self, name: str) -> None:
        """Remove a tag (NoSuchTag if there is none). Data is unchanged; the version it named stays readable
        until an :meth:`expire` gives it up like any other version."""
        versions.check_tag(self.name, name)
        try:
            self._sql.drop_tag(self.record.id, name)
        except NoSuchTag:
            raise NoSuchTag(f"{self.name} has no tag {name!r}; it has {sorted(self.tags())}") from None

    def rollback(self, version: int | None = None, *, tag: str | None = None) -> CommitResult:
        """Make an older version (or a tag's version) current again, as a new commit of operation
        ``rollback``: its live files are those of that version. History is kept; nothing is rewritten.

        The version must still be readable (not expired, or tagged): otherwise
        :class:`~mere.errors.NoSuchVersion` (:class:`~mere.errors.NoSuchTag` for an unknown tag) and the
        table is unchanged. The properties of that version come back with its files when the catalog knows
        them (always for tables created by this mere; older tables keep their current properties).

        A rollback replaces the whole table state, so it conflicts with every commit that lands while it
        runs: it raises :class:`~mere.errors.CommitConflict` (nothing changed) rather than undo a write it
        never saw; only concurrent compactions, which change no row, are rolled back over on a retry.
        """
        if version is None and tag is None:
            raise InvalidInput(f"{self.name}: rollback() needs a version or a tag")
        return rollback.rollback(self, self.resolve_version(version, None, tag))

    # -- writes ----------------------------------------------------------------------------------

    def transaction(self, idempotency_key: str | None = None) -> Transaction:
        """Changes that commit together as one version: ``with t.transaction() as tx: ...``.

        See :class:`~mere.table.transaction.Transaction`; every single write below is a transaction of one
        change.
        """
        _check_key(self.name, idempotency_key)
        return Transaction(self, idempotency_key)

    def upsert(self, data: Any, *, idempotency_key: str | None = None, evolve: bool = False) -> CommitResult:
        """Insert or update rows by primary key; CDC rows are applied in order. Missing columns stay as they were.

        A row lacking a NOT NULL column may only update an existing key; an upsert that would push an
        integer ``sum`` column out of its type's range raises :class:`~mere.errors.SumOverflow`, naming the
        key. Either way nothing is committed. Columns the table lacks raise
        :class:`~mere.errors.SchemaMismatch`, unless ``evolve=True`` adds them (nullable, in the same commit).
        """
        if not self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has no primary key: use append()")
        return self._write_evolving(data, idempotency_key, evolve, lambda tx, d: tx.upsert(d))

    def append(self, data: Any, *, idempotency_key: str | None = None, evolve: bool = False) -> CommitResult:
        """Add rows to a table without primary key; ``evolve=True`` adds columns the table lacks."""
        if self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has a primary key {list(self.spec.primary_key)}: use upsert()")
        return self._write_evolving(data, idempotency_key, evolve, lambda tx, d: tx.append(d))

    def _write_evolving(
        self,
        data: Any,
        idempotency_key: str | None,
        evolve: bool,
        write: Callable[[Transaction, Any], Any],
    ) -> CommitResult:
        """A write that, with ``evolve``, first adds the input's new columns: both in one commit."""
        if not isinstance(evolve, bool):
            raise InvalidInput(f"{self.name}: evolve must be True or False, got {evolve!r}")
        if not evolve:
            return self._write_once(idempotency_key, lambda tx: write(tx, data))
        schema, batches, streaming = converted_input(data)
        data = (
            pa.RecordBatchReader.from_batches(schema, batches)
            if streaming
            else pa.Table.from_batches(list(batches), schema)
        )
        known = {*self.spec.schema.names, OP_COLUMN, self.spec.cdc_column}
        new = [f for f in schema if f.name not in known]
        if not new:
            return self._write_once(idempotency_key, lambda tx: write(tx, data))
        update = self.evolve()
        for f in new:
            update.add_column(f.name, f.type)
        evolved = self.adding_columns(update)
        try:
            return evolved._write_once(idempotency_key, lambda tx: write(tx, data))
        finally:
            self.refresh()

    def adding_columns(self, update: SchemaUpdate) -> Table:
        """A handle that writes (and stages) as if ``update`` had committed, and whose every commit also
        commits it: the columns and the rows land together, so a failed write adds no column. Engines use
        it to write new columns from many tasks (``mergeSchema``); this handle is :meth:`refresh` ed after."""
        if update.table.context.uuid != self.record.uuid:
            raise InvalidInput(f"{self.name}: that schema update belongs to {update.table.name}")
        evolved = copy.copy(self)
        evolved.spec = update.spec
        evolved._pending_columns = SchemaChange(update.spec, tuple(update.steps))
        return evolved

    def delete(self, where: Any) -> CommitResult:
        """Delete rows matching a filter (string, expression, pyarrow Expression), or the keys in a table of keys.

        ``delete("TRUE")`` deletes every row (as delete markers); :meth:`truncate` empties the table at once.
        A filter reads the rows it deletes (markers are written for those), so the result's ``rows_deleted``
        counts rows that existed, as SQL's DELETE count. A table of keys with their partition values is
        deleted blind (a marker per key, nothing read): its ``rows_deleted`` is None, ``delete_markers`` the
        keys marked.
        """
        return self._write_once(None, lambda tx: tx.delete(where))

    def update(self, set: Mapping[str, str], where: Any = None) -> CommitResult:
        """Set columns of the rows matching ``where`` (every row when None) to SQL expressions of the row.

        ``t.update(set={"status": "'shipped'", "qty": "qty + 1"}, where="day = '2026-11-21'")``. Keyed
        tables write the changed rows as whole new rows (a merge operator's column takes the value set, it
        is not folded into the old one); tables without a key rewrite the files holding matching rows.
        Key and partition columns cannot be set.
        """
        return self._write_once(None, lambda tx: tx.update(set, where))

    def merge(
        self, source: Any, on: str | None = None, source_alias: str = "s", target_alias: str = "t"
    ) -> Merge:
        """Start a MERGE INTO this table from ``source`` (Arrow, pandas, Polars or an Arrow stream).

        ``on`` defaults to equality of every primary-key column; add WHEN clauses, then ``execute()``::

            (t.merge(changes)
              .when_matched_update(set={"qty": "t.qty + s.qty"}, condition="s.ts > t.ts")
              .when_matched_delete(condition="s.op = 'D'")
              .when_not_matched_insert_all()
              .execute())

        See :class:`~mere.table.merge.Merge`.
        """
        return Merge(self, source, on, source_alias, target_alias)

    def truncate(self) -> CommitResult:
        """Remove every row as one new version, without writing anything (earlier versions stay readable)."""
        return self._write_once(None, lambda tx: tx.truncate())

    def overwrite(
        self, data: Any, partition: Mapping[str, Any] | None = None, *, dynamic: bool = False
    ) -> CommitResult:
        """Replace the whole table, or the partitions matching ``partition``, with ``data``.

        ``dynamic=True`` replaces only the partitions ``data`` has rows in (Spark's dynamic partition
        overwrite): other partitions keep their rows, and empty ``data`` changes nothing. With
        ``partition`` too, ``data``'s rows must lie in it. A table without partition columns is replaced
        whole either way.
        """
        return self._write_once(None, lambda tx: tx.overwrite(data, partition, dynamic=dynamic))

    def set_properties(self, updates: Mapping[str, str | int | None]) -> CommitResult:
        """Set (or, with None, remove) table properties, as a new version; checked before anything commits.

        Unknown or invalid keys raise :class:`~mere.errors.InvalidInput`. Data is unchanged; this handle
        sees the change at once, others after :meth:`refresh`.
        """
        return self._write_once(None, lambda tx: tx.set_properties(updates))

    def _write_once(self, idempotency_key: str | None, change: Callable[[Transaction], Any]) -> CommitResult:
        """One change as its own transaction (a known idempotency key returns its commit, writing nothing)."""
        tx = self.transaction(idempotency_key)
        if idempotency_key is not None:
            prior = self.find_commit(idempotency_key)
            if prior is not None:
                return prior
        try:
            change(tx)
        except BaseException:
            tx.abort()
            raise
        return tx.commit()

    # -- staged (distributed) commits: one message type, one commit and one abort ------------------

    def stage(self, data: Any, operation: str = "upsert") -> StagedChange:
        """Write files for ``operation`` without committing them (the worker half of a distributed write).

        ``delete`` takes rows holding the key (and partition) columns of the rows to delete.
        """
        return write_ops.stage(self.context, data, operation)

    def find_commit(self, idempotency_key: str) -> CommitResult | None:
        """The commit made with this idempotency key, if any."""
        if idempotency_key is None:  # None means "no key" to a write; here it would match unkeyed commits
            raise InvalidInput(f"{self.name}: find_commit needs an idempotency key, got None")
        _check_key(self.name, idempotency_key)
        prior = self._sql.find_idempotent(self.record.id, idempotency_key)
        return None if prior is None else CommitResult.of(prior, already_committed=True)

    def commit(
        self,
        staged: Sequence[StagedChange],
        *,
        operation: str | None = None,
        partition: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dynamic: bool = False,
    ) -> CommitResult:
        """Commit staged changes of one operation as one new version (the driver half).

        ``staged`` are the :class:`~mere.table.commit.StagedChange` messages of one operation: staged
        writes (:meth:`stage`), the shares of a distributed MERGE (:meth:`Merge.stage
        <mere.table.ops.merge_into.Merge.stage>`) or a compaction's results. Files of different stages
        are ordered as given: for equal keys a later stage wins. An ``overwrite`` replaces the whole
        table, the partitions matching ``partition``, or with ``dynamic=True`` the partitions the staged
        files hold (see :meth:`overwrite`). MERGE shares and compaction results commit only onto the
        version they read (:class:`~mere.errors.CommitConflict` otherwise, their files deleted).
        """
        _check_key(self.name, idempotency_key)
        if not isinstance(dynamic, bool):
            raise InvalidInput(f"{self.name}: dynamic must be True or False, got {dynamic!r}")
        if (
            isinstance(staged, StagedChange)
            or not isinstance(staged, Sequence)
            or not all(isinstance(s, StagedChange) for s in staged)
        ):
            raise InvalidInput(
                f"{self.name}: commit() takes a list of StagedWrite from stage(), got {staged!r}"
            )
        kinds = {s.operation for s in staged}
        read = kinds & {"merge", "compact"}
        if read and (
            operation is not None or partition is not None or dynamic or idempotency_key is not None
        ):
            self.abort(staged)
            raise InvalidInput(
                f"{self.name}: operation=, partition=, dynamic= and idempotency_key= apply to writes"
            )
        if kinds == {"merge"}:
            try:
                return merge_into.commit_shares(self.context, staged)[0]
            except BaseException:
                self.abort(staged)
                raise
        if kinds == {"compact"} and len(staged) == 1:
            return compaction.commit_message(self.context, staged[0])
        if read:
            self.abort(staged)
            raise InvalidInput(
                f"{self.name}: commit() takes the messages of one operation (one compaction's), got {sorted(kinds)}"
            )
        return write_ops.commit_staged(self.context, staged, operation, partition, idempotency_key, dynamic)

    def abort(self, staged: Sequence[StagedChange | None]) -> None:
        """Delete the files of staged changes (writes, MERGE shares, compaction results) that will not be
        committed."""
        if isinstance(staged, StagedChange) or not isinstance(staged, Sequence):
            raise InvalidInput(f"{self.name}: abort() takes a list of StagedWrite (None for failed tasks)")
        for s in staged:
            if isinstance(s, StagedChange):
                self.context.files.discard(s.files)
            elif s is not None:
                raise InvalidInput(f"{self.name}: abort() takes StagedWrite or None items, got {s!r}")

    def commit_merge(self, staged: Sequence[StagedChange]) -> MergeMetrics:
        """Commit the staged shares of one distributed MERGE as one version (see :meth:`Merge.stage`).

        Raises :class:`~mere.errors.CommitConflict` (having deleted the files) when a concurrent commit
        changed rows the MERGE read; the caller then runs it again.
        """
        try:
            return merge_into.commit_shares(self.context, staged)[1]
        except BaseException:
            self.abort_merge(staged)
            raise

    def abort_merge(self, staged: Sequence[StagedChange | None]) -> None:
        """Delete the files of staged MERGE shares that will not be committed."""
        for s in staged if isinstance(staged, Sequence) else []:
            if isinstance(s, StagedChange):
                self.context.files.discard(s.files)

    # -- maintenance -----------------------------------------------------------------------------

    def compact(
        self,
        min_files: int = 2,
        partition: Mapping[str, Any] | None = None,
        run: Callable[[Sequence[CompactionTask]], list[list[FileEntry]]] | None = None,
        splits: Collection[tuple[str, int]] | None = None,
        *,
        tiered: bool = False,
    ) -> CommitResult | None:
        """Fold each bucket's files into merged files; readers then merge less. Returns None if nothing to do.

        Splits with at least ``min_files`` sorted runs (or any delete markers) are folded, optionally only
        in one partition or only the ``splits`` given as (partition JSON, bucket) pairs (as
        :meth:`compaction_due` returns them). A run is a file, or all the files one compaction wrote (its
        output, cut into files of ``CHUNK_ROWS`` rows, is folded already). The new files keep the sequence
        of the newest file they replace, so writes that commit
        meanwhile still merge on top of them. Old files stay for time travel until :meth:`expire`.
        ``run`` executes the tasks and returns each one's files, in task order (default: here, one after
        another); an engine passes its own to spread them (see ``mere.integrations.spark.compact``). The
        steps are also public: :meth:`plan_compaction`, :meth:`CompactionTask.run
        <mere.table.compaction.CompactionTask.run>` and :meth:`commit_compaction`. ``tiered=True`` folds
        only the newest runs of each split that the automatic policy picks (see :meth:`compaction_due`).
        """
        return compaction.compact(self, min_files, partition, run, splits, tiered)

    def plan_compaction(
        self,
        min_files: int = 2,
        partition: Mapping[str, Any] | None = None,
        splits: Collection[tuple[str, int]] | None = None,
        *,
        tiered: bool = False,
    ) -> CompactionPlan:
        """The splits :meth:`compact` would fold now, as picklable tasks for workers to run.

        ``tiered``: each split's newest runs that the automatic policy picks (a split it finds nothing
        due in is left alone), instead of every run of the split."""
        return compaction.plan(self, min_files, partition, splits, tiered=tiered)

    def commit_compaction(self, plan: CompactionPlan, results: Sequence[Sequence[FileEntry]]) -> CommitResult:
        """Swap the files the tasks wrote in for their inputs, as one new version.

        Raises CommitConflict (and deletes the new files) when an input was replaced since the plan.
        """
        return compaction.commit_results(self.context, plan, results)

    def abort_compaction(self, results: Sequence[Sequence[FileEntry]]) -> None:
        """Delete files written by compaction tasks that will not be committed."""
        compaction.discard_results(self.context, results)

    @property
    def compaction_policy(self) -> tuple[str, int]:
        """``(compaction.auto, compaction.min-files)`` of this table, defaults filled in."""
        return compaction.policy(self.spec)

    @property
    def compaction_size_amplification(self) -> int | None:
        """``compaction.size-amplification-percent`` of this table; None (the default): no size rule.

        Off by default: where commits rewrite the same keys, the largest run stops growing and the rule
        would fold a split every second commit."""
        return compaction.size_amplification(self.spec)

    def compaction_due(self, version: int | None = None) -> list[tuple[str, int]]:
        """The splits, as (partition JSON, bucket) pairs, that the table's compaction policy folds at
        ``version`` (default: the newest); empty when none is due.

        A split is due when it holds ``compaction.min-files`` sorted runs or more (default 8), or, where
        ``compaction.size-amplification-percent`` is set, when its runs besides the largest hold that
        percentage of the largest's bytes or more. A run is a file, or all the files one compaction wrote.
        The policy folds a due split's newest runs (see :func:`~mere.table.compaction.runs_to_fold`);
        delete markers go when a fold reaches the split's oldest run."""
        return sorted(compaction.runs_due(self, version))

    def auto_compact(self, version: int | None = None) -> CommitResult | None:
        """Compact by the table's policy: fold the splits :meth:`compaction_due` names at ``version``
        (default: the newest). Returns None when no split needs it or when compaction failed (logged as a
        warning: the data is unchanged and a later write or call tries again)."""
        return maintenance.auto_compact(self, version)

    @property
    def retention_policy(self) -> tuple[dt.timedelta | None, int]:
        """``(retention.max-age, retention.min-versions)`` of this table: the age past which versions
        expire automatically (None: they never do) and how many of the newest versions are kept whatever
        their age (default 1)."""
        return maintenance.retention_policy(self.spec)

    def auto_expire(self) -> list[str]:
        """Expire by the table's retention policy (``retention.max-age`` / ``retention.min-versions``):
        versions committed more than max-age ago give up their time travel and the files only they used
        (as :meth:`expire` with ``dry_run=False``), keeping the version current at the cutoff, the newest
        min-versions versions and every tagged one. It runs after this process's commits, once the
        second-oldest readable version is older than max-age by a tenth of max-age (so not after every
        commit). Returns the deleted paths; empty when nothing is due or expiry failed (logged as a
        warning: nothing changed, a later commit tries again)."""
        return maintenance.auto_expire(self.context, self._retention, None)

    def expire(self, older_than: dt.timedelta = dt.timedelta(days=7), *, dry_run: bool = True) -> list[str]:
        """List, or with ``dry_run=False`` delete, what versions older than ``older_than`` alone need.

        By default nothing changes: the call returns the paths an expiry would delete (the CLI's
        ``mere expire`` without ``--apply`` does the same). With ``dry_run=False`` the versions committed
        before the cutoff stop being readable (time travel to them, ``changes()`` from them and rollbacks
        to them raise :class:`~mere.errors.NoSuchVersion`) and the data files and change logs that only
        those versions used are deleted from storage, for good. Never deleted: the files of the version
        current at the cutoff (it stays readable), of every newer version, of versions a tag holds, and of
        the versions a change-feed consumer still needs (from the lowest position of the live consumers
        on; see :meth:`consumer`). A consumer unseen for longer than ``changes.consumer-expiration`` that
        holds back versions the cutoff gives up is dropped instead, with a logged warning (recorded in
        ``inspect.consumers()``; its next use raises :class:`~mere.errors.ConsumerDropped`); a dry run
        drops none, and lists what would go once they are.
        Returns the deleted paths (with ``dry_run``, the paths that would be deleted).
        """
        return maintenance.expire(self.context, older_than, dry_run)

    def cleanup(self, older_than: dt.timedelta = dt.timedelta(hours=1), *, dry_run: bool = True) -> list[str]:
        """List, or with ``dry_run=False`` delete, files under the table's location that no version
        references (left by failed or killed writes), and on object stores abort the multipart uploads
        such writes left pending.

        By default nothing is deleted: the call returns the files that would go (the CLI's ``mere cleanup``
        without ``--apply`` does the same; pending multipart uploads are then neither listed nor
        aborted). Only files and uploads older than ``older_than`` go, so writes still in flight keep
        theirs; no file any version (expired ones included) references is ever touched. Returns the
        removed paths.

        So it does not repair a damaged or missing data file (reads that need one raise
        :class:`~mere.errors.StorageError` naming it and the table). Recover by putting the same bytes back
        at that path (nothing is lost); without them the file's rows are lost: write them again with
        :meth:`overwrite` of the file's partition (it does not read the file), or :meth:`rollback` to the
        version before the file's ``added_version`` (``inspect.files()``), which also gives up every later
        commit. docs/concepts.md, "Damaged or missing data files", has the details.
        """
        return maintenance.cleanup(self.context, older_than, dry_run)

    def partition_values(self, partition: Mapping[str, Any] | None) -> dict[str, str | None] | None:
        """A partition given as ``{column: value}`` as the table stores it (each value as text, None for
        NULL); None for None. Engines check an overwrite's ``partition=`` with it before a task runs.

        Raises:
            InvalidInput: a column that is not a partition column, or a value its column cannot hold.
        """
        return self.context.files.wanted_partition(partition)


def _check_key(table: str, key: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidInput(f"{table}: idempotency_key must be a non-empty string, got {key!r}")


__all__ = ["CompactionPlan", "CompactionTask", "StagedWrite", "Table", "partition_json"]
