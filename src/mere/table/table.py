"""A table: the facade over the table layer's operations (writes, scans, time travel, maintenance).

``Table`` holds a handle's state (its catalog record, layout and settings) and hands each operation a
:class:`~mere.table.context.TableContext`; the operations themselves live in :mod:`mere.table.ops` and
commit through :mod:`mere.table.commit`.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from mere.errors import (
    CatalogError,
    CommitStateUnknown,
    InvalidInput,
    MereError,
    NoSuchTable,
    NoSuchTag,
    NoSuchVersion,
    SchemaMismatch,
    StorageError,
    TagExists,
    names_its_table,
)
from mere.io import Storage
from mere.metadata import CommitResult, FileEntry, Snapshot, TableRecord
from mere.partitions import partition_json
from mere.read.options import DEFAULT_WHOLE_SPLIT_BYTES, DEFAULT_WINDOW_BYTES
from mere.spec import OP_COLUMN, TableSpec
from mere.table import versions
from mere.table.commit import StagedChange, check_idempotency_key
from mere.table.compaction import CompactionPlan, CompactionTask
from mere.table.conflicts import columns_changed
from mere.table.context import (
    CatalogHandle,
    MetadataStore,
    SchemaChange,
    TableContext,
    WriteSettings,
    stale_columns,
)
from mere.table.evolve import same_columns
from mere.table.inspect import Inspect
from mere.table.ops import compaction, consumers, maintenance, merge_into, rollback
from mere.table.ops import sequence as sequence_ops
from mere.table.ops import write as write_ops
from mere.table.ops.change_log import Consumer, change_feed, consumer_feed, follow
from mere.table.ops.evolve import SchemaUpdate
from mere.table.ops.merge_into import Merge, MergeMetrics
from mere.table.scan import Scan
from mere.table.transaction import Transaction
from mere.write.writer import converted_input

SCAN_OPTIONS = ("threads", "parallel", "window_bytes", "queue_batches")
STAGE_OPERATIONS = write_ops.STAGE_OPERATIONS
AUTO_COMPACT_MIN_FILES = compaction.AUTO_COMPACT_MIN_FILES

StagedWrite = StagedChange  # the name engines use for a staged write (the one commit message type)
StagedMerge = StagedChange  # ... and for a share of a distributed MERGE


# A statement whose read version an expire took while it read runs again on a newer one, this many times.
EXPIRED_READ_ATTEMPTS = 3


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
        self._properties_seen = record.version  # ... and its properties
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
        """A commit of this handle landed: reload a changed layout, then automatic maintenance.

        The commit has landed whatever follows: a catalog that fails the reload is logged, not raised (a
        write that landed must not read as refused); the handle then refuses writes a stale layout would
        get wrong."""
        try:
            if spec_changed:
                self.refresh()
            elif not result.already_committed:
                # Every commit up to this one kept the handle's columns (checked by the commit).
                self._columns_seen = max(self._columns_seen, result.version)
                if result.version > self._properties_seen + 1 and self._properties_changed(result.version):
                    # Another handle changed properties meanwhile (e.g. turned automatic compaction on): the
                    # policy below follows the table's, not the ones this handle was loaded with. The
                    # columns are the same, so nothing else of the handle changes.
                    self.refresh()
                self._properties_seen = max(self._properties_seen, result.version)
        except CatalogError as e:
            logging.getLogger("mere").warning(
                "%s: version %d landed; reloading the table after it failed (%s)",
                self.name,
                result.version,
                e,
            )
            return
        maintenance.after_commit(self, self._retention, result)

    def _properties_changed(self, version: int) -> bool:
        """Whether a commit after the handle's properties, up to ``version``, changed them (one query).

        Only a change that kept the handle's columns counts: a handle whose columns are stale is refused
        its writes (:class:`~mere.errors.SchemaChanged`) until it refreshes.
        """
        changed = [
            (v, text)
            for v, text in self._sql.specs_after(self.record.id, self._properties_seen)
            if v <= version
        ]
        if not changed:
            return False
        newest = TableSpec.from_json(changed[-1][1], self.name)
        return same_columns(newest, self.spec) and newest.properties != self.spec.properties

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
    def sequence_by(self) -> tuple[str, ...]:
        """The columns that order the versions of a key; empty when the newest commit wins.

        The highest sequence wins; commit order, then row order, between equal ones. See
        :meth:`set_sequence_by`."""
        return self.spec.sequence_by

    @property
    def key_scope(self) -> str:
        """What a primary key identifies: ``"table"`` or ``"partition"``.

        ``"table"``: one row per key in the whole table (a row whose partition values change moves its
        key); ``"partition"``: one row per key and partition. See docs/concepts.md, "Table-wide keys"."""
        return self.spec.key_scope

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
        if self.spec.sequence_by:
            parts.append(f"sequence_by={list(self.spec.sequence_by)}")
        if self.spec.cross_partition:
            parts.append("key_scope='table'")
        parts.append(f"buckets={self.spec.buckets}")
        return f"Table({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A table travels as its catalog's address and its record: the receiver reconnects.
        return (Table, (self.catalog, self.record))

    # -- reads -----------------------------------------------------------------------------------

    def files_at(self, version: int) -> list[FileEntry]:
        """The catalog's entries of the live files at a version.

        Raises :class:`~mere.errors.NoSuchVersion` once the version has expired, or before it exists.
        """
        return versions.files_at(self.context, version)

    def split_tables(
        self, version: int, splits: set[tuple[str, int]], columns: Sequence[str], filter: Any = None
    ) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of some splits, keyed by (partition JSON, bucket); reads only those splits.

        Rows of older versions come in the current columns (the change feed compares versions column by
        column).
        """
        self.resolve_version(version)
        return Scan(self, version, tuple(columns), filter, spec=self.spec).split_tables(splits)

    def resolve_version(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> int:
        """The version a read of ``version``, ``as_of`` or ``tag`` sees (default: the newest).

        ``as_of`` (a datetime, an ISO 8601 string or epoch seconds) names the newest version committed at or
        before it. A time without a zone (a naive datetime such as ``datetime.now()``, or ISO text without an
        offset) is read as UTC, not as local time: pass ``datetime.now(timezone.utc)`` or an offset.

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
        """Plan a merged read of the table (of its newest version unless one is named).

        Nothing is read yet: the column names and the filter are checked now, and the :class:`Scan`'s output
        methods (``to_arrow``, ``to_batches``, ...) each start a fresh read of the version pinned here.

        Args:
            columns: The columns to read (a name or a list of names); None for every column.
            filter: A filter: a string such as ``"day = '2026-11-21' and id in (1, 2)"``, a :mod:`mere.expr`
                expression or a pyarrow Expression. Evaluated with merge-on-read semantics.
            version: The version to read (see :meth:`resolve_version`).
            as_of: A point in time: the newest version committed at or before it is read (a datetime, an ISO
                8601 string or epoch seconds). A time without a zone (a naive datetime such as
                ``datetime.now()``, or ISO text without an offset) is read as UTC, not as local time.
            tag: A tag whose version is read. At most one of ``version``, ``as_of`` and ``tag``.
            **options: Read tuning, positive integers (None: the default): ``threads`` (merge workers),
                ``window_bytes``, ``queue_batches`` (``parallel`` is the old name of ``threads``).

        Returns:
            The planned scan.

        Raises:
            InvalidInput: An unknown option, an option that is not a positive integer, or more than one of
                ``version``, ``as_of`` and ``tag``.
            SchemaMismatch: A column the table does not have.
            FilterError: A filter that does not parse or does not fit the table's columns.
            NoSuchVersion: The version (or time) is not in the retained history.
            NoSuchTag: An unknown tag.
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
        return Scan.checked(self, v, columns, filter, self._read_spec(v), **options)

    def _read_spec(self, version: int) -> TableSpec:
        """The columns ``version`` is read with: its own, also where this handle loaded others.

        Time travel across column changes, and a column change that landed after this handle was loaded."""
        if version < self.record.version:
            return self.spec_at(version)
        if version <= self._columns_seen:
            return self.spec
        changed = [
            v
            for v, text in self._sql.specs_after(self.record.id, self._columns_seen)
            if v <= version and not same_columns(TableSpec.from_json(text, self.name), self.spec)
        ]
        if changed:
            return self.spec_at(version)
        self._columns_seen = version  # (what a commit of this handle would have checked too)
        return self.spec

    def spec_at(self, version: int) -> TableSpec:
        """The table's layout (columns, key, properties) as of ``version``.

        The current one when the catalog cannot tell.
        """
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
        """Widen a column's type as a new version; None if it has that type.

        Widenings: int8 -> ... -> int64, float32 -> float64, decimal precision up, string -> large_string,
        binary -> large_binary.
        """
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
        """The net change of every key between ``start_version`` and ``end_version``, streamed split by split.

        The feed holds the rows of the commits after ``start_version`` up to ``end_version``, with ``_change`` (``insert``,
        ``update_before``, ``update_after``, ``delete``), ``_version`` and ``_commit_time`` columns, streamed
        split by split. Applied to the snapshot at ``start_version`` it gives the one at ``end_version``.
        With table-wide keys (a key moves between partitions) the splits of a bucket come together, deletes
        first: a moved key's delete in its old partition comes before its row in the new one, so rows
        applied in order (e.g. upserted as a CDC batch into a copy keyed by the key) keep it.
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
        """Yield ``(version, changes)`` as commits land: ``mere.follow(self, ...)``.

        It starts after ``from_version``, or after ``consumer``'s position, committing each version the caller has taken (at-least-once;
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
        """Remove a consumer (also one expire dropped).

        The versions it held go at the next :meth:`expire`, and the name may be registered again.

        Args:
            name: the consumer's name.

        Raises:
            InvalidInput: a bad name.
            NoSuchConsumer: there is none of that name.
        """
        consumers.drop(self.context, name)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        """Read the table into one Arrow table: ``scan(**kwargs).to_arrow()``.

        Args:
            **kwargs: What :meth:`scan` takes: ``columns``, ``filter``, ``version``, ``as_of`` (a time without
                a zone is read as UTC, not as local time), ``tag`` and the read options.

        Returns:
            The merged rows.

        Raises:
            InvalidInput: An unknown or invalid argument (as :meth:`scan` raises it).
            SchemaMismatch: A column the table does not have.
            FilterError: A filter that does not parse or does not fit the table's columns.
            NoSuchVersion: The version is not in the retained history (or expired while it was read).
            StorageError: A data file could not be read (the message names it and the table).
        """
        return self.scan(**kwargs).to_arrow()

    def current_snapshot(self) -> Snapshot:
        """The newest version as a :class:`~mere.metadata.Snapshot`."""
        return self._sql.snapshot(self.record.id, self.version)

    def snapshot(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> Snapshot:
        """The snapshot of a version, of a tag's version, or of the newest version at or before ``as_of``.

        ``as_of`` is a datetime, ISO 8601 string or epoch seconds; one without a zone is read as UTC, not as
        local time.
        """
        return self._sql.snapshot(self.record.id, self.resolve_version(version, as_of, tag))

    @property
    def inspect(self) -> Inspect:
        """Tabular metadata as Arrow tables.

        ``t.inspect.files()``, ``t.inspect.snapshots()``, ``t.inspect.consumers()``."""
        return Inspect(self)

    def history(self) -> list[Snapshot]:
        """Every version as a :class:`~mere.metadata.Snapshot`, oldest first (expired ones marked).

        Returns:
            The snapshots, oldest first.

        Raises:
            CatalogError: The catalog could not be read.
        """
        return self._sql.history(self.record.id)

    def files(self, version: int | None = None) -> pa.Table:
        """The live files at a version, as an Arrow table (the same as ``t.inspect.files()``)."""
        return self.inspect.files(version)

    # -- tags and rollback -----------------------------------------------------------------------

    def tag(self, name: str, version: int | None = None, *, replace: bool = False) -> int:
        """Name a version (default: the current one): reads can ask for it by name, :meth:`expire` keeps it.

        Returns the version tagged. Tag names are 1 to 128 ASCII letters, digits, ``.``, ``_`` and ``-``,
        starting with a letter or digit. An existing name raises :class:`~mere.errors.TagExists` unless
        ``replace`` moves it. Only a readable version (not expired, or already tagged) can be tagged.
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
        """Remove a tag (NoSuchTag if there is none).

        Data is unchanged. The version it named stays readable until an :meth:`expire` gives it up like any
        other version; one older than the oldest readable version, which only its tags kept, is given up with
        its last tag (its files go at the next expire). Moving a tag (``tag(name, v, replace=True)``) gives
        up the version it left the same way.
        """
        versions.check_tag(self.name, name)
        try:
            self._sql.drop_tag(self.record.id, name)
        except NoSuchTag:
            raise NoSuchTag(f"{self.name} has no tag {name!r}; it has {sorted(self.tags())}") from None

    def rollback(
        self, version: int | None = None, *, tag: str | None = None, expected_version: int | None = None
    ) -> CommitResult:
        """Make an older version (or a tag's version) current again, as a new commit (``rollback``).

        The new version's live files are those of that version. History is kept; nothing is rewritten. The
        properties of that version come back with its files when the catalog knows them (always for tables
        created by this mere; older tables keep their current properties).

        Args:
            version: The version to make current again.
            tag: A tag whose version to make current again (instead of ``version``).
            expected_version: The newest version the caller has looked at: a commit other than a
                compaction after it is never undone (``CommitConflict``). Without it, the rollback undoes
                every commit up to the version current when it starts, including one that landed a moment
                after the caller looked.

        Returns:
            The rollback's commit.

        Raises:
            InvalidInput: Neither ``version`` nor ``tag`` given (or both); an ``expected_version`` that is
                not a version of the table.
            NoSuchVersion: The version is not readable (expired and not tagged); the table is unchanged.
            NoSuchTag: An unknown tag.
            CommitConflict: A commit other than a compaction landed while the rollback ran: a rollback
                replaces the whole table state, so it never undoes a write it did not see (nothing changed).
                Concurrent compactions, which change no row, are rolled back over on a retry.
        """
        if version is None and tag is None:
            raise InvalidInput(f"{self.name}: rollback() needs a version or a tag")
        return rollback.rollback(self, self.resolve_version(version, None, tag), expected_version)

    # -- writes ----------------------------------------------------------------------------------

    def transaction(self, idempotency_key: str | None = None) -> Transaction:
        """Start changes that commit together as one version: ``with t.transaction() as tx: ...``.

        See :class:`~mere.table.transaction.Transaction`; every single write of the table is a transaction of
        one change.

        Args:
            idempotency_key: A key that makes the commit happen once: a commit with a key that already
                committed writes nothing and returns the earlier commit.

        Returns:
            The open transaction.

        Raises:
            InvalidInput: An ``idempotency_key`` that is not a non-empty string.
        """
        check_idempotency_key(self.name, idempotency_key)
        return Transaction(self, idempotency_key)

    def upsert(self, data: Any, *, idempotency_key: str | None = None, evolve: bool = False) -> CommitResult:
        """Insert or update rows by primary key; missing columns stay as they were.

        CDC rows are applied in order. A row lacking a NOT NULL column may only update an existing key; an
        upsert that would push an integer ``sum`` column out of its type's range raises
        :class:`~mere.errors.SumOverflow`, naming the key. Either way nothing is committed.

        On a table with :attr:`sequence_by` the version of each key with the highest sequence wins, in the
        batch and against what is stored (equal sequences: the later row, the later commit); every row
        must carry the sequence columns without NULL (deletes too) and every column but for rows that only
        delete. The result's ``stale_rows`` counts the rows a higher sequence in the same batch replaced.

        Args:
            data: The rows: a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame or an object
                with ``__arrow_c_stream__``. With the table's change column, rows are inserts, updates or
                deletes.
            idempotency_key: A key that makes the write happen once: if a commit with it exists, nothing is
                written and that commit is returned.
            evolve: Add the columns the table lacks (nullable, in the same commit) instead of refusing them.

        Returns:
            The commit (``already_committed`` for a known ``idempotency_key``).

        Raises:
            InvalidInput: A table without primary key (use :meth:`append`), data that cannot be converted to
                Arrow, a change column with unknown operations or nulls, an invalid ``idempotency_key``, or
                (``sequence_by``) a NULL sequence.
            SchemaMismatch: Columns the table lacks (without ``evolve``), input without the key or partition
                columns, new keys lacking NOT NULL columns, or (``sequence_by``) missing sequence columns or a
                partial row.
            NullKey: A primary-key column holds nulls.
            SumOverflow: A ``sum`` column would leave its integer type's range.
            CommitConflict: Concurrent commits won every retry, or the table's columns changed after this
                handle read them (:class:`~mere.errors.SchemaChanged`: ``refresh()`` and write again); nothing
                committed.
            CommitStateUnknown: The catalog connection failed while committing; the commit may have landed.
            StorageError: Writing the files failed (nothing committed).
        """
        if not self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has no primary key: use append()")
        return self._write_evolving(data, idempotency_key, evolve, lambda tx, d: tx.upsert(d))

    def append(self, data: Any, *, idempotency_key: str | None = None, evolve: bool = False) -> CommitResult:
        """Add rows to a table without primary key.

        Args:
            data: The rows: a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame or an object
                with ``__arrow_c_stream__``.
            idempotency_key: A key that makes the write happen once: if a commit with it exists, nothing is
                written and that commit is returned.
            evolve: Add the columns the table lacks (nullable, in the same commit) instead of refusing them.

        Returns:
            The commit (``already_committed`` for a known ``idempotency_key``).

        Raises:
            InvalidInput: A table with a primary key (use :meth:`upsert`), data that cannot be converted to
                Arrow, or an invalid ``idempotency_key``.
            SchemaMismatch: Columns the table lacks (without ``evolve``), or NOT NULL columns missing or null.
            CommitConflict: Concurrent commits won every retry, or the table's columns changed after this
                handle read them (:class:`~mere.errors.SchemaChanged`: ``refresh()`` and write again); nothing
                committed.
            CommitStateUnknown: The catalog connection failed while committing; the commit may have landed.
            StorageError: Writing the files failed (nothing committed).
        """
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
        """A handle that writes (and stages) as if ``update`` had committed, and whose commits also commit it.

        The columns and the rows land together, so a failed write adds no column. Engines use it to write new
        columns from many tasks (``mergeSchema``); this handle is :meth:`refresh` ed after.
        """
        if update.table.context.uuid != self.record.uuid:
            raise InvalidInput(f"{self.name}: that schema update belongs to {update.table.name}")
        evolved = copy.copy(self)
        evolved.spec = update.spec
        evolved._pending_columns = SchemaChange(update.spec, tuple(update.steps))
        return evolved

    def delete(self, where: Any, *, idempotency_key: str | None = None) -> CommitResult:
        """Delete rows matching a filter, or the keys in a table of keys.

        ``delete("TRUE")`` deletes every row (as delete markers); :meth:`truncate` empties the table at once.
        A filter reads the rows it deletes (markers are written for those), so the result's ``rows_deleted``
        counts rows that existed, as SQL's DELETE count. A table of keys with their partition values is
        deleted blind (a marker per key, nothing read): its ``rows_deleted`` is None, ``delete_markers`` the
        keys marked.

        On a table with :attr:`sequence_by`, keys given with their sequence columns are deleted blind at
        those sequences; a filter, or keys without them, reads the versions it deletes and marks each
        just above its sequence: that version and its replays stay deleted, a newer event brings the key
        back (docs/concepts.md, "Sequence ordering").

        Args:
            where: the filter, or a table of keys (with their partition and, on sequenced tables, sequence
                columns).
            idempotency_key: commit at most once: when a commit with this key has landed (a retry of the
                same delete), nothing is read or written and that commit's result is returned
                (``already_committed=True``), whatever ``where`` is now. A delete that matches nothing
                makes no version and records no key.

        Returns:
            The commit's result (``no_change=True`` when nothing matched).

        Raises:
            InvalidInput: a bad filter or key, or key rows lacking key columns or holding NULL sequences
                (nothing committed).
            FilterError: a filter that does not parse or fit the schema.
            CommitConflict: lost every retry to concurrent commits (nothing committed).
        """
        return self._write_once(idempotency_key, lambda tx: tx.delete(where))

    def update(
        self, set: Mapping[str, str], where: Any = None, *, idempotency_key: str | None = None
    ) -> CommitResult:
        """Set columns of the rows matching ``where`` (every row when None) to SQL expressions of the row.

        ``t.update(set={"status": "'shipped'", "qty": "qty + 1"}, where="day = '2026-11-21'")``. Keyed
        tables write the changed rows as whole new rows (a merge operator's column takes the value set, it
        is not folded into the old one); tables without a key rewrite the files holding matching rows.
        Key columns cannot be set; a partition column can where keys are table-wide (the row moves to its
        new partition), not under ``key_scope="partition"``. On a table with :attr:`sequence_by`, a row set
        below the sequence it had loses to its version, as any write does: it is not written, and the
        result's ``stale_rows`` counts it.

        Args:
            set: column -> SQL expression text of the row.
            where: the rows to change (None: every row).
            idempotency_key: commit at most once: when a commit with this key has landed (a retry of the
                same UPDATE, such as ``qty = qty + 1`` that must not add twice), nothing is read or
                written and that commit's result is returned (``already_committed=True``). An UPDATE that
                matches no row makes no version and records no key.

        Returns:
            The commit's result (``no_change=True`` when no row matched).

        Raises:
            InvalidInput: a bad column, expression, filter or key (nothing committed).
            CommitConflict: lost every retry to concurrent commits (nothing committed).
        """
        return self._write_once(idempotency_key, lambda tx: tx.update(set, where))

    def merge(
        self, source: Any, on: str | None = None, source_alias: str = "s", target_alias: str = "t"
    ) -> Merge:
        """Start a MERGE INTO this table from ``source``: add WHEN clauses, then ``execute()``.

        ::

            (t.merge(changes)
              .when_matched_update(set={"qty": "t.qty + s.qty"}, condition="s.ts > t.ts")
              .when_matched_delete(condition="s.op = 'D'")
              .when_not_matched_insert_all()
              .execute())

        ``execute(idempotency_key=...)`` commits the MERGE at most once: a retry with the key returns the
        first commit's :class:`~mere.table.merge.MergeMetrics` without reading or writing anything. See
        :class:`~mere.table.merge.Merge`.


        Args:
            source: The source rows: Arrow, pandas, Polars or an Arrow stream (read into memory now).
            on: The ON condition, SQL text over the aliases; default: equality of every primary-key column.
            source_alias: The source's name in conditions and values.
            target_alias: The table's name in conditions and values.

        Returns:
            The MERGE being built.

        Raises:
            InvalidInput: A table without primary key, empty or equal aliases, or a source that is not Arrow
                data, a pandas or Polars frame or an Arrow stream.
            FilterError: An ON condition that does not parse.
        """
        return Merge(self, source, on, source_alias, target_alias)

    def truncate(self, *, idempotency_key: str | None = None) -> CommitResult:
        """Remove every row as one new version, without writing anything (earlier versions stay readable).

        Args:
            idempotency_key: commit at most once: a known key returns its commit, changing nothing.

        Returns:
            The commit's result (``no_change=True`` for a table that is empty already).

        Raises:
            InvalidInput: a bad key (nothing committed).
        """
        return self._write_once(idempotency_key, lambda tx: tx.truncate())

    def overwrite(
        self,
        data: Any,
        partition: Mapping[str, Any] | None = None,
        *,
        dynamic: bool = False,
        idempotency_key: str | None = None,
    ) -> CommitResult:
        """Replace the whole table, or the partitions matching ``partition``, with ``data``.

        ``dynamic=True`` replaces only the partitions ``data`` has rows in (Spark's dynamic partition
        overwrite): other partitions keep their rows, and empty ``data`` changes nothing. With
        ``partition`` too, ``data``'s rows must lie in it. A table without partition columns is replaced
        whole either way.

        Args:
            data: the new rows (Arrow, pandas, Polars or an Arrow stream).
            partition: ``{column: value}`` of the partitions to replace (None: the whole table).
            dynamic: replace only the partitions ``data`` has rows in.
            idempotency_key: commit at most once: when a commit with this key has landed (a retry),
                ``data`` is not read and that commit's result is returned (``already_committed=True``).

        Returns:
            The commit's result.

        Raises:
            InvalidInput: bad data, partition or key (nothing committed).
            CommitConflict: lost every retry to concurrent commits (nothing committed).
        """
        return self._write_once(idempotency_key, lambda tx: tx.overwrite(data, partition, dynamic=dynamic))

    def set_properties(self, updates: Mapping[str, str | int | None]) -> CommitResult:
        """Set (or, with None, remove) table properties, as a new version; checked before anything commits.

        Unknown or invalid keys raise :class:`~mere.errors.InvalidInput`. Data is unchanged; this handle
        sees the change at once, others after :meth:`refresh`.
        """
        return self._write_once(None, lambda tx: tx.set_properties(updates))

    def set_sequence_by(self, columns: Sequence[str] | str | None) -> CommitResult | None:
        """Order the versions of each key by ``columns`` from now on, as a new version.

        The commit's operation is ``set-sequence-by``; None or ``[]`` goes back to commit order.

        With a sequence, the version of a key with the highest sequence wins, whatever the order of
        commits and of rows in a batch; equal sequences fall back to commit order, then row order.
        Tuples of several columns compare column by column. Every write must then carry the sequence
        columns without NULL (deletes too) and upserts whole rows; a delete without a sequence (by
        filter, or of keys without the sequence columns) reads the version it deletes and takes its
        sequence. docs/concepts.md, "Sequence ordering", has the details.

        Args:
            columns: a value column, or a list of them, of integer, decimal, timestamp, date or string
                type; None or an empty list for commit order.

        Returns:
            The commit, or None when the table is ordered so already.

        Raises:
            InvalidInput: a key or partition column, a table without primary key, merge operators other
                than ``last`` (``sum`` and ``concat`` would count a replayed event twice), or a table
                holding more than one version of some key (a change of order could reorder them:
                :meth:`compact` first), delete markers written without a sequence, or NULL sequences.
            SchemaMismatch: a column the table lacks.
            UnsupportedType: a column of another type (floats, booleans, binaries, nested types).
            SchemaChanged: the table's columns or order changed since this handle read them.
        """
        return sequence_ops.set_sequence_by(self, columns)

    def _write_once(self, idempotency_key: str | None, change: Callable[[Transaction], Any]) -> CommitResult:
        """One change as its own transaction (a known idempotency key returns its commit, writing nothing)."""
        for attempt in range(EXPIRED_READ_ATTEMPTS):
            tx = self.transaction(idempotency_key)
            prior = tx.already_committed()  # looks the key up (once) before the change reads or writes
            if prior is not None:
                return prior
            try:
                change(tx)
            except (StorageError, NoSuchVersion):
                tx.abort()
                # An expire that ran meanwhile took the version the change read: read a newer one.
                if attempt + 1 == EXPIRED_READ_ATTEMPTS or not self._expired(tx.pending_commit.read_version):
                    raise
                continue
            except SchemaMismatch as e:
                tx.abort()
                # Input checked against columns another handle changed since this one loaded them (a column
                # it added is "unknown" here): that is the stale handle, not the input.
                version = columns_changed(self.context)
                if version is not None:
                    raise stale_columns(self.name, version, e) from e
                raise
            except BaseException:
                tx.abort()
                raise
            return tx.commit()
        raise AssertionError("unreachable")  # pragma: no cover

    def _expired(self, version: int) -> bool:
        try:
            self.resolve_version(version)
        except NoSuchVersion:
            return True
        return False

    # -- staged (distributed) commits: one message type, one commit and one abort ------------------

    def stage(self, data: Any, operation: str = "upsert", *, write_id: str | None = None) -> StagedChange:
        """Write files for ``operation`` without committing them (the worker half of a distributed write).

        ``delete`` takes rows holding the key (and partition) columns of the rows to delete.

        Args:
            data: The rows (anything :meth:`upsert` takes).
            operation: ``upsert``, ``append``, ``overwrite`` or ``delete``.
            write_id: An id the staged files' names carry (1 to 64 letters, digits or ``_``). Give every
                task of one distributed write the same one: if the write fails, :meth:`abort_write` finds
                the files of tasks that were killed before they could report what they staged.

        Raises:
            InvalidInput: An unknown ``operation``, one that does not fit the table, or a malformed
                ``write_id``.
        """
        return write_ops.stage(self.context, data, operation, write_id)

    def abort_write(self, write_id: str) -> list[str]:
        """Delete every file staged with ``write_id`` (see :meth:`stage`) that no version references.

        The driver of a failed distributed write calls it once no commit of the write's files can still
        land: it removes what its tasks staged, including the files of tasks killed before they reported
        them, which :meth:`abort` cannot name. A commit (or transaction) holding some of them checks that
        they exist just before it lands and is refused (``CommitFailed``); one landing at the same moment
        as this call is not fenced, hence the rule. Files of other writes, and files any version references
        (expired ones included), are never touched. It lists the table's files, so it costs what a
        :meth:`cleanup` listing costs; pending multipart uploads of killed tasks are left to
        :meth:`cleanup`.

        Args:
            write_id: The id given to :meth:`stage`.

        Returns:
            The deleted paths (relative to the warehouse).

        Raises:
            InvalidInput: A malformed ``write_id``.
            NoSuchTable: The table was dropped (or dropped and created again) since this handle was loaded.
            StorageError: Listing or deleting files failed.
            CatalogError: The catalog could not be read.
        """
        return write_ops.abort_write(self.context, write_id)

    def find_commit(self, idempotency_key: str) -> CommitResult | None:
        """The commit made with this idempotency key, if any."""
        if idempotency_key is None:  # None means "no key" to a write; here it would match unkeyed commits
            raise InvalidInput(f"{self.name}: find_commit needs an idempotency key, got None")
        check_idempotency_key(self.name, idempotency_key)
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
        """Commit staged changes of one operation as one new version (the driver half of a distributed write).

        Files of different stages are ordered as given: for equal keys a later stage wins. MERGE shares and
        compaction results commit only onto the version they read.

        Args:
            staged: The :class:`~mere.table.commit.StagedChange` messages of one operation: staged writes
                (:meth:`stage`), the shares of a distributed MERGE (:meth:`Merge.stage
                <mere.table.ops.merge_into.Merge.stage>`) or a compaction's results.
            operation: The operation the staged writes commit as (default: the one they were staged for).
            partition: For an ``overwrite``: replace only the partitions matching ``{column: value}``
                (default: the whole table; see :meth:`overwrite`).
            idempotency_key: A key that makes the commit happen once: it applies to writes and to MERGE
                shares (not to compaction results); when a commit with the key has landed, the staged files
                are deleted and that commit's result returned.
            dynamic: For an ``overwrite``: replace the partitions the staged files hold.

        Returns:
            The commit.

        Raises:
            InvalidInput: ``staged`` is not a list of staged changes, holds different operations or another
                table's writes, or ``operation``, ``partition``, ``dynamic`` or ``idempotency_key`` do not
                apply (they apply to writes); MERGE shares and compaction results refused so are deleted.
            CommitConflict: A MERGE share or compaction result whose read version a concurrent commit
                invalidated (its files deleted), or concurrent commits won every retry.
            CommitFailed: Staged files no longer exist (a cleanup took them), or the catalog connection
                failed before the commit landed; nothing changed.
            CommitStateUnknown: The catalog connection failed while committing; the commit may have landed.
        """
        try:
            check_idempotency_key(self.name, idempotency_key)
        except InvalidInput:
            self.abort_merge(staged)  # deletes the files of any staged change in it, whatever the list
            raise
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
        if read and (operation is not None or partition is not None or dynamic):
            self.abort(staged)
            raise InvalidInput(f"{self.name}: operation=, partition= and dynamic= apply to writes")
        if "compact" in kinds and idempotency_key is not None:
            self.abort(staged)
            raise InvalidInput(f"{self.name}: idempotency_key= applies to writes and MERGE shares")
        if kinds == {"merge"}:
            try:
                return merge_into.commit_shares(self.context, staged, idempotency_key)[0]
            except CommitStateUnknown:
                raise  # the files may be referenced now: keep them (a retry with the key tells)
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
        """Delete the files of staged changes that will not be committed.

        Staged writes, MERGE shares and compaction results alike.

        Args:
            staged: The staged changes; None items (tasks that failed before staging) are skipped.

        Raises:
            InvalidInput: ``staged`` is not a list of staged changes and None (files that cannot be deleted
                are left for :meth:`cleanup`, logged).
        """
        if isinstance(staged, StagedChange) or not isinstance(staged, Sequence):
            raise InvalidInput(f"{self.name}: abort() takes a list of StagedWrite (None for failed tasks)")
        for s in staged:
            if isinstance(s, StagedChange):
                self.context.files.discard(s.files)
            elif s is not None:
                raise InvalidInput(f"{self.name}: abort() takes StagedWrite or None items, got {s!r}")

    def commit_merge(
        self, staged: Sequence[StagedChange], *, idempotency_key: str | None = None
    ) -> MergeMetrics:
        """Commit the staged shares of one distributed MERGE as one version (see :meth:`Merge.stage`).

        Args:
            staged: every share of the MERGE (all evaluated at one version).
            idempotency_key: commit at most once: when a commit with this key has landed (a retried
                job), the shares' files are deleted and the first commit's metrics are returned
                (``already_committed=True``). A driver that checks :meth:`find_commit` first stages nothing.

        Returns:
            What the MERGE did, and the version it committed.

        Raises:
            CommitConflict: a concurrent commit changed rows the MERGE read (the files are deleted); the
                caller then runs it again.
            CommitStateUnknown: the catalog could not tell whether the commit landed; the files are kept.
                Commit the same shares again with the same key: a landed commit is returned (its files
                kept), otherwise they commit now.
            InvalidInput: shares of another table or of different versions, a bad key, or a key that names
                a commit that was not a MERGE (the files are deleted, nothing committed).
        """
        try:
            check_idempotency_key(self.name, idempotency_key)
            return merge_into.commit_shares(self.context, staged, idempotency_key)[1]
        except CommitStateUnknown:
            raise  # the files may be referenced now: keep them (a retry with the key tells)
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
        """Fold each bucket's files into merged files; readers then merge less.

        A run is a file, or all the files one compaction wrote (its output, cut into files of ``CHUNK_ROWS``
        rows, is folded already). The new files keep the sequence of the newest file they replace, so writes
        that commit meanwhile still merge on top of them. Old files stay for time travel until :meth:`expire`.
        The steps are also public: :meth:`plan_compaction`, :meth:`CompactionTask.run
        <mere.table.compaction.CompactionTask.run>` and :meth:`commit_compaction`.

        Args:
            min_files: Fold splits with at least this many sorted runs (or any delete markers).
            partition: ``{column: value}``: fold only splits of that partition.
            run: Executes the tasks and returns each one's files, in task order (default: here, one after
                another); an engine passes its own to spread them (see ``mere.integrations.spark.compact``).
            splits: Fold only these splits, as (partition JSON, bucket) pairs (as :meth:`compaction_due`
                returns them).
            tiered: Fold only the newest runs of each split that the automatic policy picks (see
                :meth:`compaction_due`).

        Returns:
            The compaction's commit; None if there was nothing to do.

        Raises:
            InvalidInput: A ``min_files`` that is not a positive integer, ``run`` that is not a function,
                ``tiered`` that is not a bool, or a ``partition`` or ``splits`` that do not name the table's
                partitions.
            CommitConflict: Concurrent overwrites or compactions replaced its inputs in every retry (the new
                files are deleted).
            StorageError: Reading or writing the files failed.
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

        Args:
            min_files: Fold splits with at least this many sorted runs (or any delete markers).
            partition: ``{column: value}``: only splits of that partition.
            splits: Only these splits, as (partition JSON, bucket) pairs.
            tiered: Plan each split's newest runs that the automatic policy picks (a split it finds nothing
                due in is left alone), instead of every run of the split.

        Returns:
            The plan: its tasks, and the version it read.

        Raises:
            InvalidInput: A ``min_files`` that is not a positive integer, ``tiered`` that is not a bool, or a
                ``partition`` or ``splits`` that do not name the table's partitions.
            CatalogError: The catalog could not be read.
        """
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
        """The splits, as (partition JSON, bucket) pairs, that the compaction policy folds at ``version``.

        ``version`` defaults to the newest; the list is empty when none is due. A split is due when it holds
        ``compaction.min-files`` sorted runs or more (default 8), or, where
        ``compaction.size-amplification-percent`` is set, when its runs besides the largest hold that
        percentage of the largest's bytes or more. A run is a file, or all the files one compaction wrote. The
        policy folds a due split's newest runs (see :func:`~mere.table.compaction.runs_to_fold`); delete
        markers go when a fold reaches the split's oldest run.
        """
        return sorted(compaction.runs_due(self, version))

    def auto_compact(self, version: int | None = None) -> CommitResult | None:
        """Compact by the table's policy: fold the splits :meth:`compaction_due` names at ``version``.

        Never raises for a failed compaction: it is logged as a warning, the data is unchanged and a later
        write or call tries again.

        Args:
            version: The version whose splits to check (default: the newest).

        Returns:
            The compaction's commit; None when no split needs it or when compaction failed.

        Raises:
            InvalidInput: A ``version`` that is not an integer.
            NoSuchVersion: A ``version`` that is not in the retained history.
            NoSuchTable: The table was dropped (or dropped and created again) since this handle was loaded.
        """
        return maintenance.auto_compact(self, version)

    @property
    def retention_policy(self) -> tuple[dt.timedelta | None, int]:
        """``(retention.max-age, retention.min-versions)`` of this table.

        The age past which versions expire automatically (None: they never do) and how many of the newest
        versions are kept whatever their age (default 1).
        """
        return maintenance.retention_policy(self.spec)

    def auto_expire(self) -> list[str]:
        """Expire by the table's retention policy (``retention.max-age`` / ``retention.min-versions``).

        Versions committed more than max-age ago give up their time travel and the files only they used (as
        :meth:`expire` with ``dry_run=False``), keeping the version current at the cutoff, the newest
        min-versions versions and every tagged one. It runs after this process's commits, once the
        second-oldest readable version is older than max-age by a tenth of max-age (so not after every
        commit). Returns the deleted paths; empty when nothing is due or expiry failed (logged as a warning:
        nothing changed, a later commit tries again).
        """
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

        Args:
            older_than: The age of the cutoff: versions committed before ``now - older_than`` expire.
            dry_run: Only list the paths (the default); ``dry_run=False`` expires and deletes.

        Returns:
            The deleted paths (with ``dry_run``, the paths that would be deleted).

        Raises:
            InvalidInput: An ``older_than`` that is not a non-negative timedelta, or a ``dry_run`` that is not
                a bool.
            NoSuchTable: The table was dropped (or dropped and created again) since this handle was loaded.
            StorageError: Listing or deleting files failed.
            CatalogError: The catalog could not be read or written.
        """
        return maintenance.expire(self.context, older_than, dry_run)

    def cleanup(self, older_than: dt.timedelta = dt.timedelta(hours=1), *, dry_run: bool = True) -> list[str]:
        """List, or with ``dry_run=False`` delete, files under the table's location no version references.

        Such files are left by failed or killed writes; on object stores the multipart uploads such writes
        left pending are aborted too. Files (and uploads) whose names are not the names mere gives its data
        files (``part-``, ``del-`` or ``log-``, a write id or none, 32 hex digits, ``.parquet``) are never
        touched. By default nothing is deleted: the call returns the files that would go (the CLI's ``mere
        cleanup`` without ``--apply`` does the same; pending multipart uploads are then neither listed nor
        aborted). Only files and uploads older than ``older_than`` go, so writes still in flight keep theirs;
        no file any version (expired ones included) references is ever touched.

        So it does not repair a damaged or missing data file (reads that need one raise
        :class:`~mere.errors.StorageError` naming it and the table). Recover by putting the same bytes back at
        that path (nothing is lost); without them the file's rows are lost: write them again with
        :meth:`overwrite` of the file's partition (it does not read the file), or :meth:`rollback` to the
        version before the file's ``added_version`` (``inspect.files()``), which also gives up every later
        commit. docs/concepts.md, "Damaged or missing data files", has the details.

        Args:
            older_than: Only files (and uploads) older than this go.
            dry_run: Only list the files (the default); ``dry_run=False`` deletes them.

        Returns:
            The removed paths (with ``dry_run``, the paths that would be removed).

        Raises:
            InvalidInput: An ``older_than`` that is not a non-negative timedelta, or a ``dry_run`` that is not
                a bool.
            NoSuchTable: The table was dropped (or dropped and created again) since this handle was loaded.
            StorageError: Listing or deleting files failed.
            CatalogError: The catalog could not be read.
        """
        return maintenance.cleanup(self.context, older_than, dry_run)

    def partition_values(self, partition: Mapping[str, Any] | None) -> dict[str, str | None] | None:
        """A partition given as ``{column: value}`` as the table stores it (values as text, None for NULL).

        None for None. Engines check an overwrite's ``partition=`` with it before a task runs.

        Raises:
            InvalidInput: A column that is not a partition column, or a value its column cannot hold.
        """
        return self.context.files.wanted_partition(partition)


__all__ = [
    "CompactionPlan",
    "CompactionTask",
    "StagedWrite",
    "Table",
    "check_idempotency_key",
    "partition_json",
]
