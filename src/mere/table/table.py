"""A table: writes (upsert, append, delete, overwrite), scans, time travel and history."""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import os
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mere.durations import parse_duration
from mere.errors import (
    CommitConflict,
    CommitFailed,
    InvalidInput,
    MereError,
    NoSuchTable,
    NoSuchTag,
    NoSuchVersion,
    SchemaChanged,
    StorageError,
    TagExists,
    names_its_table,
)
from mere.io import Storage
from mere.io.options import redact_url
from mere.metadata import CommitResult, ConcurrentChanges, FileEntry, Snapshot, TableRecord
from mere.options import as_of_micros as _to_micros  # microseconds of an as_of (naive: UTC)
from mere.partitions import partition_json
from mere.partitions import partition_string as _partition_string
from mere.read.options import DEFAULT_WHOLE_SPLIT_BYTES, DEFAULT_WINDOW_BYTES
from mere.read.planner import Explain
from mere.retry import COMMIT_RETRIES, RetryPolicy
from mere.spec import DEFAULT_COMPRESSION, OP_COLUMN, TableSpec
from mere.table.compaction import CompactionPlan, CompactionTask, can_fold_partially, runs_to_fold
from mere.table.evolve import SchemaUpdate, same_columns
from mere.table.merge import Merge, MergeMetrics, StagedMerge, commit_staged_merges
from mere.table.scan import Scan, ScanTask, normalise_columns
from mere.table.transaction import Change, Transaction, deletion_summary, marker_change
from mere.table.write_checks import WriteChecks, split_label
from mere.write.writer import (
    CHUNK_BYTES,
    PreparedFile,
    conform,
    converted_input,
    input_chunks,
    prepare,
    to_batches,
    write_prepared,
)

if TYPE_CHECKING:
    from mere.catalog.sql import SqlCatalog
    from mere.table.catalog import Catalog

log = logging.getLogger(__name__)

ONE_ATTEMPT = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
_BACKGROUND_COMPACTIONS: dict[str, threading.Lock] = {}  # per table: one background compaction at a time
# A forked child has none of the parent's threads: a lock one of them held would stay held for good.
os.register_at_fork(after_in_child=_BACKGROUND_COMPACTIONS.clear)
AUTO_COMPACT_MIN_FILES = 8  # compaction.min-files default: a split is folded when it holds this many runs
SCAN_OPTIONS = ("threads", "parallel", "window_bytes", "queue_batches")
STAGE_OPERATIONS = ("upsert", "append", "delete", "overwrite")


@dataclass
class StagedWrite:
    """Files written but not yet committed; picklable, so workers can stage and a driver can commit.

    Nothing staged is visible until :meth:`Table.commit`; :meth:`Table.abort` deletes the files.
    """

    table: str
    operation: str
    files: list[FileEntry] = field(default_factory=list)
    rows: int = 0


@names_its_table
class Table:
    """A table in a catalog. Cheap to create; every read asks the catalog for the version to read."""

    def __init__(self, catalog: Catalog, record: TableRecord) -> None:
        self.catalog = catalog
        self._load(record)

    def _load(self, record: TableRecord) -> None:
        self.record = record
        # The catalog's storage, naming this table in every read failure of one of its files.
        self.storage: Storage = self.catalog.storage.for_table(record.identifier)
        self._columns_seen = record.version  # commits up to here kept the columns of self.spec
        self._pending_columns: tuple[TableSpec, list[str]] | None = None  # see adding_columns()
        self.spec = TableSpec.from_json(record.spec, record.identifier)
        self.location = record.location
        props = self.spec.properties
        self.compression = props.get("write.compression", DEFAULT_COMPRESSION)
        level = props.get("write.compression-level")
        self.compression_level = int(level) if level else None
        rg_rows = props.get("write.row-group-rows")
        self.row_group_rows = int(rg_rows) if rg_rows else None
        self.window_bytes = int(props.get("read.window-bytes", DEFAULT_WINDOW_BYTES))
        default_whole = 0 if "read.window-bytes" in props else DEFAULT_WHOLE_SPLIT_BYTES
        self.whole_split_bytes = int(props.get("read.whole-split-bytes", default_whole))
        self.chunk_bytes = int(props.get("write.chunk-bytes", CHUNK_BYTES))
        self._retention_next_check = 0.0  # time.time() before which no version can be due to expire
        self._retention_next_version = 0  # ... and the version before which too few versions exist

    def refresh(self) -> Table:
        """Reload the table's layout and properties from the catalog (another handle may have changed them)."""
        record = self._sql.load_table(self.record.namespace, self.record.name)
        if record.uuid != self.record.uuid:
            raise NoSuchTable(f"{self.name} was dropped and created again; open it anew with catalog.table()")
        self._load(record)
        return self

    @property
    def _sql(self) -> SqlCatalog:
        return self.catalog.sql

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
        try:
            return self._sql.current_version(self.record.id)
        except NoSuchTable:
            raise NoSuchTable(
                f"table {self.name} no longer exists (dropped since this handle was loaded)"
            ) from None

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
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidInput(f"{self.name}: a version is an integer, got {version!r}")
        if not 0 <= version < 2**63:  # beyond any catalog's integers
            raise NoSuchVersion(f"{self.name}: no version {version}")
        try:
            return self._sql.files_at(self.record.id, version)
        except NoSuchVersion as e:
            raise NoSuchVersion(f"{self.name}: {e}") from None
        except NoSuchTable:
            raise NoSuchTable(
                f"table {self.name} no longer exists (dropped since this handle was loaded)"
            ) from None

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
        given = [k for k, v in (("version", version), ("as_of", as_of), ("tag", tag)) if v is not None]
        if len(given) > 1:
            raise InvalidInput(f"{self.name}: give one of version, as_of and tag, not {' and '.join(given)}")
        if tag is not None:
            return self._tag_version(tag)
        if version is None and as_of is None:
            return self.version
        current, oldest = self._sql.version_range(self.record.id)
        if version is not None:
            return self._version_within(version, current, oldest)
        try:
            v = self._sql.version_as_of(self.record.id, _to_micros(as_of))
        except NoSuchVersion as e:
            raise NoSuchVersion(f"{self.name}: {e}") from None
        if v < oldest and not self._sql.is_tagged(self.record.id, v):
            raise NoSuchVersion(
                f"{self.name}: version {v} (as of {as_of}) has expired; the oldest is {oldest}"
            )
        return v

    def _version_within(self, version: int | None, current: int, oldest: int) -> int:
        """``version`` (None: ``current``) checked against the table's readable versions."""
        if version is None:
            return current
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidInput(f"{self.name}: version must be an integer, got {version!r}")
        if 0 <= version < oldest and not self._sql.is_tagged(self.record.id, version):
            tagged = sorted({v for v in self.tags().values() if v < oldest})
            also = f" and the tagged {', '.join(map(str, tagged))}" if tagged else ""
            raise NoSuchVersion(
                f"{self.name}: version {version} has expired; the readable versions are "
                f"{oldest}..{current}{also}"
            )
        if version < 0 or version > current:
            raise NoSuchVersion(f"{self.name} has versions {oldest}..{current}; got {version}")
        return version

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
        scan._parts()  # validate the filter now (the scan keeps what it parsed)
        return scan

    def spec_at(self, version: int) -> TableSpec:
        """The table's layout (columns, key, properties) as of ``version``; the current one when the
        catalog cannot tell."""
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= self.version:
            raise NoSuchVersion(f"{self.name}: no version {version!r} (the newest is {self.version})")
        text = self._sql.spec_at(self.record.id, version)
        if text is None:
            return self.spec
        at = TableSpec.from_json(text, self.name)
        return self.spec if same_columns(at, self.spec) else at

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
        start_version: int,
        end_version: int | None = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
    ) -> pa.RecordBatchReader:
        """The net change of every key between ``start_version`` and ``end_version`` (default: newest):
        the rows of the commits after ``start_version`` up to ``end_version``, with ``_change`` (``insert``,
        ``update_before``, ``update_after``, ``delete``), ``_version`` and ``_commit_time`` columns, streamed
        split by split. Applied to the snapshot at ``start_version`` it gives the one at ``end_version``.
        ``filter`` keeps the feed rows it holds for (on before and after images alike). Keyed tables only;
        a version before the retained history raises :class:`~mere.errors.NoSuchVersion`. Versions are numbers
        here; for a point in time, :meth:`resolve_version` ``(as_of=...)`` gives one (a time without a zone
        is read as UTC, not as local time)."""
        from mere.table.changes import change_feed

        return change_feed(self, start_version, end_version, columns, filter)

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
        """Tabular metadata as Arrow tables: ``t.inspect.files()``, ``t.inspect.snapshots()``."""
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
        _check_tag(self.name, name)
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
        self._require_live()
        return self._sql.list_tags(self.record.id)

    def _require_live(self) -> None:
        """NoSuchTable when this handle's table was dropped (or dropped and created again) since it was loaded:
        maintenance must not take the catalog's silence about an unknown table for "nothing referenced"."""
        try:
            record = self._sql.load_table(self.record.namespace, self.record.name)
        except NoSuchTable:
            record = None
        if record is None or record.uuid != self.record.uuid:
            raise NoSuchTable(f"table {self.name} no longer exists (dropped since this handle was loaded)")

    def untag(self, name: str) -> None:
        """Remove a tag (NoSuchTag if there is none). Data is unchanged; the version it named stays readable
        until an :meth:`expire` gives it up like any other version."""
        _check_tag(self.name, name)
        try:
            self._sql.drop_tag(self.record.id, name)
        except NoSuchTag:
            raise NoSuchTag(f"{self.name} has no tag {name!r}; it has {sorted(self.tags())}") from None

    def _tag_version(self, name: Any) -> int:
        _check_tag(self.name, name)
        try:
            return self._sql.tag_version(self.record.id, name)
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
        target = self.resolve_version(version, None, tag)
        expected = self.version  # a commit other than a compaction after this one: refuse, do not undo it

        def attempt() -> CommitResult:
            base = self.version
            for v in range(expected + 1, base + 1):
                landed = self._sql.snapshot(self.record.id, v)
                if landed.operation != "compact":
                    raise _Overtaken(
                        f"{self.name}: version {v} ({landed.operation}) landed while rolling back to "
                        f"version {target}; nothing was changed: look at it, then roll back again if it "
                        "should be undone too"
                    )
            return self._rollback_commit(target, base)

        try:
            return COMMIT_RETRIES.run(
                attempt,
                lambda e: (
                    isinstance(e, (CommitConflict, CommitFailed))
                    and not isinstance(e, (_Overtaken, SchemaChanged))
                ),
            )
        except _Overtaken as e:
            raise CommitConflict(str(e)) from None

    def _rollback_commit(self, target: int, base: int) -> CommitResult:
        """One attempt: swap the live files at ``base`` for those of ``target``, committing only onto ``base``."""
        wanted = self.files_at(target)
        live = self.files_at(base)
        live_ids = {f.id for f in live}
        wanted_ids = {f.id for f in wanted}
        # Files of the target that are still live stay as they are; the others come back as new rows with
        # their own sequence numbers, so they merge in the order they had.
        add = [replace(f, order=i) for i, f in enumerate(f for f in wanted if f.id not in live_ids)]
        remove = [f for f in live if f.id not in wanted_ids]
        present = {path for path, _size, _mtime in self.storage.list_files(self.location)} if add else set()
        missing = [f.path for f in add if f.path not in present]
        if missing:
            raise NoSuchVersion(
                f"{self.name}: files of version {target} are gone from storage ({missing[:3]}...): "
                "cannot roll back to it"
            )

        def overtaken(changes: ConcurrentChanges) -> None:
            if changes.commits:
                raise CommitConflict(
                    f"{self.name}: version {changes.commits[0].version} landed during the rollback"
                )

        tx = Transaction(self, retries=ONE_ATTEMPT)
        tx.read_version = base
        tx._add(
            Change(
                "rollback",
                add,
                0,
                {"rollback_to": target},
                replaces=lambda _base: remove,
                partitions=lambda _removed: None,  # the whole table
                validate=overtaken,
                restores=target,
            )
        )
        spec = self._sql.spec_at(self.record.id, target)
        if spec is not None:
            then = TableSpec.from_json(spec, self.name)
            if dict(then.properties) != dict(self.spec.properties):
                tx._properties = dict(then.properties)
            if not same_columns(then, self.spec):
                # The version's columns come back too; ids already given stay given.
                restored = replace(
                    then,
                    properties=self.spec.properties,
                    last_field_id=max(then.last_field_id, self.spec.last_field_id),
                    legacy_field_ids=then.legacy_field_ids
                    if then.legacy_field_ids is not None
                    else self.spec.legacy_field_ids,
                )
                tx._schema = (restored, [f"columns of version {target}"])
        return tx.commit()

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
        if update.table.record.uuid != self.record.uuid:
            raise InvalidInput(f"{self.name}: that schema update belongs to {update.table.name}")
        evolved = copy.copy(self)
        evolved.spec = update.spec
        evolved._pending_columns = (update.spec, list(update.steps))
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

    def commit_merge(self, staged: Sequence[StagedMerge]) -> MergeMetrics:
        """Commit the staged shares of one distributed MERGE as one version (see :meth:`Merge.stage`).

        Raises :class:`~mere.errors.CommitConflict` (having deleted the files) when a concurrent commit
        changed rows the MERGE read; the caller then runs it again.
        """
        try:
            return commit_staged_merges(self, staged)
        except BaseException:
            self.abort_merge(staged)
            raise

    def abort_merge(self, staged: Sequence[StagedMerge | None]) -> None:
        """Delete the files of staged MERGE shares that will not be committed."""
        for s in staged if isinstance(staged, Sequence) else []:
            if isinstance(s, StagedMerge):
                self._discard(s.files)

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

    def _rows_unchanged(self, entries: Sequence[FileEntry]) -> Callable[[ConcurrentChanges], None]:
        """A commit check for writes that depend on rows read: no concurrent change to the same buckets."""
        mine = {split_label((e.partition, e.bucket)) for e in entries}

        def validate(changes: ConcurrentChanges) -> None:
            for c in changes.commits:
                if c.operation == "compact":
                    continue  # compaction changes no row
                splits = c.internal.get("splits")
                if c.internal.get("partitions") is None or splits is None or mine & set(splits):
                    raise CommitConflict(f"{self.name}: rows this write read changed in version {c.version}")

        return validate

    def _write_data(
        self, data: Any, *, partial_ok: bool, check: Callable[[list[PreparedFile]], None] | None = None
    ) -> tuple[list[FileEntry], int]:
        entries: list[FileEntry] = []
        rows = 0
        try:
            for chunk in input_chunks(data, self.chunk_bytes):
                table, ops = conform(chunk, self.spec, partial_ok=partial_ok, identifier=self.name)
                del chunk
                rows += table.num_rows
                prepared = prepare(self.spec, table, ops, identifier=self.name)
                del table
                if check is not None:
                    check(prepared)
                entries += self._write_files(prepared, first_order=len(entries))
                del prepared
        except BaseException:
            self._discard(entries)
            raise
        return entries, rows

    def stage(self, data: Any, operation: str = "upsert") -> StagedWrite:
        """Write files for ``operation`` without committing them (the worker half of a distributed write).

        ``delete`` takes rows holding the key (and partition) columns of the rows to delete.
        """
        if operation not in STAGE_OPERATIONS:
            raise InvalidInput(f"cannot stage {operation!r}; choose one of {', '.join(STAGE_OPERATIONS)}")
        if operation == "upsert" and not self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has no primary key: stage 'append'")
        if operation == "append" and self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has a primary key: stage 'upsert'")
        if operation == "delete":
            keys = self._key_rows(data, self.spec.identity_columns)
            entries = marker_change(self, keys.select(list(self.spec.identity_columns))).files
            return StagedWrite(self.name, operation, entries, sum(e.row_count for e in entries))
        checks = WriteChecks(self.spec, self.name) if operation == "upsert" else None
        entries, rows = self._write_data(
            data, partial_ok=operation == "upsert", check=checks.observe if checks else None
        )
        return StagedWrite(self.name, operation, entries, rows)

    def find_commit(self, idempotency_key: str) -> CommitResult | None:
        """The commit made with this idempotency key, if any."""
        if idempotency_key is None:  # None means "no key" to a write; here it would match unkeyed commits
            raise InvalidInput(f"{self.name}: find_commit needs an idempotency key, got None")
        _check_key(self.name, idempotency_key)
        prior = self._sql.find_idempotent(self.record.id, idempotency_key)
        return None if prior is None else CommitResult.of(prior, already_committed=True)

    def commit(
        self,
        staged: Sequence[StagedWrite],
        *,
        operation: str | None = None,
        partition: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dynamic: bool = False,
    ) -> CommitResult:
        """Commit staged writes of one operation as one new version (the driver half).

        Files of different stages are ordered as given: for equal keys a later stage wins. An
        ``overwrite`` replaces the whole table, the partitions matching ``partition``, or with
        ``dynamic=True`` the partitions the staged files hold (see :meth:`overwrite`).
        """
        _check_key(self.name, idempotency_key)
        if not isinstance(dynamic, bool):
            raise InvalidInput(f"{self.name}: dynamic must be True or False, got {dynamic!r}")
        if (
            isinstance(staged, StagedWrite)
            or not isinstance(staged, Sequence)
            or not all(isinstance(s, StagedWrite) for s in staged)
        ):
            raise InvalidInput(
                f"{self.name}: commit() takes a list of StagedWrite from stage(), got {staged!r}"
            )
        if operation is not None and operation not in STAGE_OPERATIONS:
            raise InvalidInput(
                f"{self.name}: cannot commit {operation!r}; choose one of {', '.join(STAGE_OPERATIONS)}"
            )
        ops = {s.operation for s in staged}
        if len(ops) > 1:
            raise InvalidInput(f"{self.name}: cannot commit different operations {sorted(ops)} together")
        if any(s.table != self.name for s in staged):
            raise InvalidInput(f"{self.name}: staged writes belong to another table")
        if operation is not None and ops and ops != {operation}:
            raise InvalidInput(f"{self.name}: staged {sorted(ops)} cannot commit as {operation!r}")
        operation = operation or (ops.pop() if ops else ("upsert" if self.spec.has_primary_key else "append"))
        if (partition is not None or dynamic) and operation != "overwrite":
            raise InvalidInput(f"{self.name}: partition= and dynamic= apply to overwrite only")
        entries = [
            replace(f, order=i, id=None, seq=None, added_version=None)
            for i, f in enumerate(f for s in staged for f in s.files)
        ]
        rows = sum(s.rows for s in staged)
        tx = self.transaction(idempotency_key)
        try:
            if idempotency_key is not None and (prior := self.find_commit(idempotency_key)) is not None:
                self._discard(entries)
                return prior
            # Staged files may be old (a long job): one that a cleanup took would make the table unreadable.
            gone = self.storage.missing([e.path for e in entries])
            if gone:
                raise CommitFailed(
                    f"{self.name}: {len(gone)} staged file(s) no longer exist (e.g. {gone[0]}): a cleanup "
                    "with a shorter older_than than this write took may have deleted them; write them again"
                )
            if operation == "overwrite":
                wanted = self._wanted_partition(partition)
                self._check_partition(wanted, [json.loads(e.partition) for e in entries])
                tx._add(tx._overwriting("overwrite", entries, rows, wanted, dynamic=dynamic))
            elif operation == "delete":
                tx._add(Change("delete", entries, rows, deletion_summary(rows, None)))
            else:
                if operation == "upsert" and self.spec.has_primary_key:
                    tx._checks().observe_files(self, entries)
                tx._add(Change(operation, entries, rows))
        except BaseException:
            self._discard(entries)
            raise
        return tx.commit()

    def abort(self, staged: Sequence[StagedWrite | None]) -> None:
        """Delete the files of staged writes that will not be committed."""
        if isinstance(staged, StagedWrite) or not isinstance(staged, Sequence):
            raise InvalidInput(f"{self.name}: abort() takes a list of StagedWrite (None for failed tasks)")
        for s in staged:
            if isinstance(s, StagedWrite):
                self._discard(s.files)
            elif s is not None:
                raise InvalidInput(f"{self.name}: abort() takes StagedWrite or None items, got {s!r}")

    def _write_files(self, prepared: Sequence[PreparedFile], first_order: int = 0) -> list[FileEntry]:
        return write_prepared(
            self.storage,
            self.location,
            self.spec,
            prepared,
            first_order=first_order,
            row_group_rows=self.row_group_rows,
            compression=self.compression,
            compression_level=self.compression_level,
        )

    def _discard(self, entries: Sequence[FileEntry]) -> None:
        self.storage.discard(e.path for e in entries)

    def _key_rows(self, data: Any, required: Sequence[str]) -> pa.Table:
        """Rows naming keys to delete, checked to carry the ``required`` columns."""
        if not self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has no primary key: delete with a filter")
        schema, batches = to_batches(data)
        table = pa.Table.from_batches(list(batches), schema=schema)
        missing = [c for c in required if c not in table.column_names]
        if missing:
            raise InvalidInput(f"{self.name}: rows to delete lack key/partition column(s) {missing}")
        return table

    def _wanted_partition(self, partition: Mapping[str, Any] | None) -> dict[str, str | None] | None:
        if partition is None:
            return None
        if not isinstance(partition, Mapping) or not partition:
            raise InvalidInput(
                f"{self.name}: partition must be a dict of partition column -> value such as "
                f"{{{self.spec.partition_by[0] if self.spec.partition_by else 'day'!r}: ...}}, "
                f"got {partition!r}"
            )
        unknown = [c for c in partition if c not in self.spec.partition_by]
        if unknown:
            raise InvalidInput(
                f"{self.name}: {unknown} are not partition columns {list(self.spec.partition_by)}"
            )
        return {c: _partition_string(self.spec, c, v) for c, v in partition.items()}

    def _check_partition(
        self, wanted: Mapping[str, str | None] | None, partitions: Sequence[Mapping[str, str | None]]
    ) -> None:
        if wanted is None:
            return
        for p in partitions:
            if any(p.get(c) != v for c, v in wanted.items()):
                raise InvalidInput(
                    f"{self.name}: overwrite of partition {dict(wanted)} got rows of partition {dict(p)}"
                )

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
        if run is not None and not callable(run):
            raise InvalidInput(f"{self.name}: run must be a function of the compaction tasks, got {run!r}")
        _check_flag(self.name, "tiered", tiered)

        def attempt() -> CommitResult | None:
            plan = self.plan_compaction(min_files, partition, splits, tiered=tiered)
            if not plan.remove:
                return None
            return self.commit_compaction(plan, (run or self._run_compaction)(plan.tasks))

        # An overwrite or another compaction replaced some inputs: plan again, under the one retry policy.
        try:
            return COMMIT_RETRIES.run(
                attempt, lambda e: isinstance(e, CommitConflict) and not isinstance(e, SchemaChanged)
            )
        except SchemaChanged:
            raise
        except CommitConflict as e:
            raise CommitConflict(
                f"{self.name}: compaction lost {COMMIT_RETRIES.attempts} races; try again"
            ) from e

    def _after_commit(self, result: CommitResult) -> None:
        """Automatic maintenance after a commit of this process: compaction (``compaction.auto``) and
        expiry of old versions (``retention.max-age``), inline or, with ``compaction.auto=background``, on
        a background thread. It never fails (nor undoes) the write that triggered it."""
        mode = self.compaction_policy[0]
        compacts = mode != "off" and result.operation != "compact" and self.spec.has_primary_key
        expires = self.retention_policy[0] is not None
        if not (compacts or expires):
            return

        def maintain() -> None:
            if compacts:
                self._compact_if_due(result.version)
            if expires:
                self._auto_expire(result.version)

        if mode == "background":
            busy = _BACKGROUND_COMPACTIONS.setdefault(self.record.uuid, threading.Lock())
            if not busy.acquire(blocking=False):
                return  # one is running for this table: it or the next commit's catches up

            def run() -> None:
                try:
                    maintain()
                finally:
                    busy.release()

            name = f"mere-auto-compact-{self.name}"
            threading.Thread(target=run, name=name, daemon=True).start()
        else:
            maintain()

    @property
    def retention_policy(self) -> tuple[dt.timedelta | None, int]:
        """``(retention.max-age, retention.min-versions)`` of this table: the age past which versions
        expire automatically (None: they never do) and how many of the newest versions are kept whatever
        their age (default 1)."""
        props = self.spec.properties
        age = props.get("retention.max-age", "off")
        return (None if age.lower() == "off" else parse_duration(age)), int(
            props.get("retention.min-versions", 1)
        )

    def auto_expire(self) -> list[str]:
        """Expire by the table's retention policy (``retention.max-age`` / ``retention.min-versions``):
        versions committed more than max-age ago give up their time travel and the files only they used
        (as :meth:`expire` with ``dry_run=False``), keeping the version current at the cutoff, the newest
        min-versions versions and every tagged one. It runs after this process's commits, once the
        second-oldest readable version is older than max-age by a tenth of max-age (so not after every
        commit). Returns the deleted paths; empty when nothing is due or expiry failed (logged as a
        warning: nothing changed, a later commit tries again)."""
        return self._auto_expire(None)

    def _auto_expire(self, committed: int | None) -> list[str]:
        """:meth:`auto_expire`; ``committed``: the version this handle just committed (None: unknown)."""
        age, keep_newest = self.retention_policy
        if age is None or time.time() < self._retention_next_check:
            return []
        if committed is not None and committed < self._retention_next_version:
            return []  # too few versions yet to give one up
        try:
            current, oldest = self._sql.version_range(self.record.id)
            if current - oldest + 1 <= keep_newest:
                self._retention_next_version = oldest + keep_newest
                return []
            second = self._sql.snapshot(self.record.id, oldest + 1).committed_at
            due_at = (second + age + age / 10).timestamp()
            if time.time() < due_at:
                self._retention_next_check = due_at
                return []
            cutoff = dt.datetime.now(dt.UTC) - age
            keep = min(self._sql.version_as_of(self.record.id, _to_micros(cutoff)), current - keep_newest + 1)
            return self._expire_keeping(keep, dry_run=False) if keep > oldest else []
        except Exception as e:  # a policy run must never fail the write that triggered it
            logging.getLogger("mere").warning(
                "%s: automatic expiry failed (%s); nothing changed", self.name, e
            )
            return []

    @property
    def compaction_policy(self) -> tuple[str, int]:
        """``(compaction.auto, compaction.min-files)`` of this table, defaults filled in."""
        props = self.spec.properties
        mode = props.get("compaction.auto", "off").lower()
        return mode, int(props.get("compaction.min-files", AUTO_COMPACT_MIN_FILES))

    @property
    def compaction_size_amplification(self) -> int | None:
        """``compaction.size-amplification-percent`` of this table; None (the default): no size rule.

        Off by default: where commits rewrite the same keys, the largest run stops growing and the rule
        would fold a split every second commit."""
        value = self.spec.properties.get("compaction.size-amplification-percent")
        return None if value is None else int(value)

    def compaction_due(self, version: int | None = None) -> list[tuple[str, int]]:
        """The splits, as (partition JSON, bucket) pairs, that the table's compaction policy folds at
        ``version`` (default: the newest); empty when none is due.

        A split is due when it holds ``compaction.min-files`` sorted runs or more (default 8), or, where
        ``compaction.size-amplification-percent`` is set, when its runs besides the largest hold that
        percentage of the largest's bytes or more. A run is a file, or all the files one compaction wrote.
        The policy folds a due split's newest runs (see :func:`~mere.table.compaction.runs_to_fold`);
        delete markers go when a fold reaches the split's oldest run."""
        return sorted(self._runs_due(version))

    def _runs_due(
        self, version: int | None, files: Sequence[FileEntry] | None = None
    ) -> dict[tuple[str, int], int]:
        """Per due split, how many of its newest runs the policy folds (``files``: those at ``version``).

        Once a split is due, splits a commit or two from due are folded in the same compaction: one commit
        for all instead of one for each, as splits that commits fill evenly fall due together."""
        if not self.spec.has_primary_key:
            return {}  # tables without a key have nothing to fold
        if files is None:
            files = self.files_at(self.resolve_version(version))
        min_files, percent = self.compaction_policy[1], self.compaction_size_amplification
        sizes: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
        rows: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
        for f in files:
            split = (f.partition, f.bucket)
            sizes[split][f.seq or 0] += f.size_bytes  # a catalog seq is never NULL
            rows[split][f.seq or 0] += f.row_count

        def picks(trigger: int, splits: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
            out = {}
            for split in splits:
                by_seq = sizes[split]
                newest = sorted(by_seq, reverse=True)
                fold = runs_to_fold(
                    [by_seq[q] for q in newest], [rows[split][q] for q in newest], trigger, percent
                )
                if fold:
                    out[split] = fold
            return out

        due = picks(min_files, sizes)
        if due and min_files > 2:
            early = max(2, min_files - max(1, min_files // 4))
            due |= picks(early, [s for s in sizes if s not in due])
        return due

    def auto_compact(self, version: int | None = None) -> CommitResult | None:
        """Compact by the table's policy: fold the splits :meth:`compaction_due` names at ``version``
        (default: the newest). Returns None when no split needs it or when compaction failed (logged as a
        warning: the data is unchanged and a later write or call tries again)."""
        self._require_live()
        if version is not None:
            self.resolve_version(version)  # a bad or unknown version raises, before anything runs
        return self._compact_if_due(version)

    def _compact_if_due(self, version: int | None) -> CommitResult | None:
        """:meth:`auto_compact` without its checks of the arguments: after a commit of this handle, whose
        version exists (one catalog listing when nothing is due)."""
        try:
            files = None if version is None else self.files_at(version)
            due = sorted(self._runs_due(version, files))
            return self.compact(splits=due, tiered=True) if due else None
        except Exception as e:  # a policy run must never fail the write that triggered it
            logging.getLogger("mere").warning(
                "%s: automatic compaction failed (%s); data unchanged", self.name, e
            )
            return None

    def _run_compaction(self, tasks: Sequence[CompactionTask]) -> list[list[FileEntry]]:
        results: list[list[FileEntry]] = []
        try:
            results.extend(task.run(self.storage) for task in tasks)  # keeps the finished ones on error
        except BaseException:
            self.abort_compaction(results)
            raise
        return results

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
        _check_count(self.name, "min_files", min_files)
        _check_flag(self.name, "tiered", tiered)
        wanted = self._wanted_partition(partition)
        only = self._wanted_splits(splits)
        base = self.version
        if not self.spec.has_primary_key:
            return CompactionPlan(self.name, self.record.uuid, base, (), (), ())
        files = self.files_at(base)
        picks = self._runs_due(base, files) if tiered else {}
        planned, opts = self.scan(version=base)._plan(Explain(base))
        ids = {f.path: f.id for f in files}
        storage_options = tuple(sorted(self.storage.storage_options.items()))
        tasks: list[CompactionTask] = []
        remove: list[int] = []
        partitions: set[str] = set()
        for split in planned:
            values = dict(split.partition)
            if wanted is not None and any(values.get(c) != v for c, v in wanted.items()):
                continue
            if only is not None and (partition_json(values), split.bucket) not in only:
                continue
            seqs = sorted({f.seq for f in split.files}, reverse=True)  # a compaction's files share one
            partial = False
            if tiered:
                fold = picks.get((partition_json(values), split.bucket), 0)
                if not fold:
                    continue
                if fold < len(seqs):
                    newest = [f for f in split.files if f.seq >= seqs[fold - 1]]
                    if can_fold_partially(newest, self.spec):
                        split, partial = replace(split, files=tuple(newest)), True
            elif len(seqs) < min_files and not any(f.content == "delete" for f in split.files):
                continue
            read = ScanTask(self.storage.uri, storage_options, self.record.spec, split, opts, table=self.name)
            tasks.append(
                CompactionTask(
                    read,
                    self.location,
                    max(f.seq for f in split.files),
                    self.row_group_rows,
                    self.compression,
                    self.compression_level,
                    partial,
                )
            )
            remove += [i for f in split.files if (i := ids.get(f.path)) is not None]
            partitions.add(partition_json(values))
        return CompactionPlan(
            self.name, self.record.uuid, base, tuple(tasks), tuple(remove), tuple(sorted(partitions))
        )

    def _wanted_splits(self, splits: Collection[tuple[str, int]] | None) -> set[tuple[str, int]] | None:
        if splits is None:
            return None
        bad = InvalidInput(
            f"{self.name}: splits must be (partition JSON, bucket) pairs, as compaction_due returns them; "
            f"got {splits!r}"
        )
        if isinstance(splits, (str, bytes)) or not isinstance(splits, Collection):
            raise bad
        out = set()
        for split in splits:
            if not (
                isinstance(split, (tuple, list))
                and len(split) == 2
                and isinstance(split[0], str)
                and isinstance(split[1], int)
                and not isinstance(split[1], bool)
            ):
                raise bad
            try:
                values = json.loads(split[0])
            except ValueError:
                raise bad from None
            if (
                not isinstance(values, dict)
                or set(values) != set(self.spec.partition_by)
                or not all(v is None or isinstance(v, str) for v in values.values())
                or not 0 <= split[1] < self.spec.buckets
            ):
                raise InvalidInput(
                    f"{self.name}: {split!r} is no split of this table (partition JSON of "
                    f"{list(self.spec.partition_by)} and a bucket below {self.spec.buckets})"
                )
            out.add((partition_json(values), split[1]))  # the catalog's spelling of the JSON
        return out

    def commit_compaction(self, plan: CompactionPlan, results: Sequence[Sequence[FileEntry]]) -> CommitResult:
        """Swap the files the tasks wrote in for their inputs, as one new version.

        Raises CommitConflict (and deletes the new files) when an input was replaced since the plan.
        """
        if plan.table_uuid != self.record.uuid:
            self.abort_compaction(results)
            raise InvalidInput(f"{self.name}: this compaction was planned for another table")
        if len(results) != len(plan.tasks):
            self.abort_compaction(results)
            raise InvalidInput(f"{self.name}: {len(results)} results for {len(plan.tasks)} compaction tasks")
        if not all(
            isinstance(files, Sequence) and all(isinstance(f, FileEntry) for f in files) for files in results
        ):
            written = [files for files in results if isinstance(files, Sequence)]
            self.abort_compaction([[f for f in files if isinstance(f, FileEntry)] for files in written])
            raise InvalidInput(
                f"{self.name}: compaction results must be the lists of files CompactionTask.run returns"
            )
        add = [
            replace(f, order=i, id=None, added_version=None)
            for i, f in enumerate(f for files in results for f in files)
        ]
        if any(f.seq is None for f in add):
            self._discard(add)
            raise InvalidInput(f"{self.name}: compaction results must come from CompactionTask.run")
        tx = Transaction(self, retries=ONE_ATTEMPT)
        tx.read_version = plan.base_version
        tx._add(
            Change(
                "compact",
                add,
                sum(f.row_count for f in add),
                remove_ids=tuple(plan.remove),
                partitions=lambda _removed: list(plan.partitions),
            )
        )
        return tx.commit()

    def abort_compaction(self, results: Sequence[Sequence[FileEntry]]) -> None:
        """Delete files written by compaction tasks that will not be committed."""
        self._discard([f for files in results for f in files])

    def expire(self, older_than: dt.timedelta = dt.timedelta(days=7), *, dry_run: bool = True) -> list[str]:
        """List, or with ``dry_run=False`` delete, what versions older than ``older_than`` alone need.

        By default nothing changes: the call returns the paths an expiry would delete (the CLI's
        ``mere expire`` without ``--apply`` does the same). With ``dry_run=False`` the versions committed
        before the cutoff stop being readable (time travel to them, ``changes()`` from them and rollbacks
        to them raise :class:`~mere.errors.NoSuchVersion`) and the data files and change logs that only
        those versions used are deleted from storage, for good. Never deleted: the files of the version
        current at the cutoff (it stays readable), of every newer version, and of versions a tag holds.
        Returns the deleted paths (with ``dry_run``, the paths that would be deleted).
        """
        _check_age(self.name, older_than)
        _check_flag(self.name, "dry_run", dry_run)
        self._require_live()
        try:
            cutoff = dt.datetime.now(dt.UTC) - older_than
        except OverflowError:  # before year 1: no version is that old
            return []
        try:
            keep = self._sql.version_as_of(self.record.id, _to_micros(cutoff))
        except NoSuchVersion:
            return []
        return self._expire_keeping(keep, dry_run)

    def _expire_keeping(self, keep: int, dry_run: bool) -> list[str]:
        """Expire the versions before ``keep`` (see :meth:`expire`)."""
        self._require_files_here(keep)
        if dry_run:
            return self._expirable(keep)
        paths = self._sql.expire(self.record.id, keep)
        for p in paths:  # unreferenced now: a failure here leaves garbage for cleanup(), never a broken table
            try:
                self.storage.delete(p)
            except Exception:
                log.warning("could not delete expired file %s", p)
        return paths

    def _require_files_here(self, keep: int) -> None:
        """Raise if the storage lacks a file the newest version reads, or (where it reads none) one that
        expiring versions before ``keep`` would delete: then it is not this table's warehouse (e.g. a
        mistyped one beside the right catalog), or files were lost, and expiring would mark versions gone
        while deleting nothing."""
        live = self.files_at(self.version)
        going = [] if live else self._expirable(keep)  # (walks the history: only where needed)
        probe = live[0].path if live else (going[0] if going else None)
        if probe is not None and self.storage.missing([probe]):
            raise StorageError(
                f"{self.name}: {redact_url(self.storage.file_uri(probe))}, a file the catalog lists, does not "
                f"exist: is {redact_url(self.storage.uri)} the warehouse of this catalog (or was the file "
                "lost)? Nothing was changed"
            )

    def _expirable(self, keep_from: int) -> list[str]:
        """The paths ``expire`` would delete keeping versions from ``keep_from`` on, computed from what the
        catalog lists (nothing changes): the rows removed by a version up to the kept one that no tagged
        version needs, less the paths a remaining row (a rollback may re-add a file) still uses."""
        history = self.history()
        oldest = self._sql.oldest_version(self.record.id)
        keep = max(min(keep_from, history[-1].version), oldest)
        kept = self.files_at(keep)
        needed = {f.id for f in kept}
        still = {f.path for f in kept}
        for v in set(self.tags().values()):
            tagged = self.files_at(v)
            needed.update(f.id for f in tagged)
            still.update(f.path for f in tagged)
        gone: set[str] = set()
        for snap in history:
            if 0 < snap.version <= keep and snap.summary.get("removed_files", 1):
                # every row removed by this version was live at the one before (what an earlier expire
                # left of it: rows a tag kept)
                before = self._sql.files_at(self.record.id, snap.version - 1, expired_ok=True)
                gone.update(f.path for f in before if f.id not in needed)
            elif snap.version > keep and snap.operation == "rollback":
                still.update(f.path for f in self.files_at(snap.version))
        # Change logs are live at no version: each goes with its commit (the kept version's log stays).
        gone.update(
            f.path
            for f, _ in self._sql.files_changed(self.record.id, oldest - 1, keep)
            if f.content == "log" and (f.added_version or 0) < keep
        )
        return sorted(gone - still)

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
        _check_age(self.name, older_than)
        _check_flag(self.name, "dry_run", dry_run)
        self._require_live()
        referenced = self._sql.all_file_paths(self.record.id)
        cutoff = time.time() - older_than.total_seconds()
        listed = self.storage.list_files(self.location)
        # Again after reading what is referenced: a table dropped meanwhile references nothing any more.
        self._require_live()
        removed = []
        for path, _size, mtime in listed:
            if path not in referenced and mtime < cutoff:
                if not dry_run:
                    self.storage.delete(path)
                removed.append(path)
        if dry_run:
            return removed
        return removed + self.storage.abort_stale_uploads(self.location, cutoff)


class Inspect:
    """A table's metadata as Arrow tables, one convention for every kind (as pyiceberg's ``inspect``)."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def files(self, version: int | None = None) -> pa.Table:
        """The live files at a version (default: the newest)."""
        rows = self._table.files_at(self._table.resolve_version(version))
        return pa.table(
            {
                "path": [f.path for f in rows],
                "partition": [f.partition for f in rows],
                "bucket": pa.array([f.bucket for f in rows], pa.int32()),
                "seq": pa.array([f.seq for f in rows], pa.int64()),
                "content": [f.content for f in rows],
                "row_count": pa.array([f.row_count for f in rows], pa.int64()),
                "size_bytes": pa.array([f.size_bytes for f in rows], pa.int64()),
                "added_version": pa.array([f.added_version for f in rows], pa.int64()),
            }
        )

    def snapshots(self) -> pa.Table:
        """Every version: number, parent, commit time, operation, expired, and the summary as JSON."""
        history = self._table.history()
        return pa.table(
            {
                "version": pa.array([h.version for h in history], pa.int64()),
                "parent": pa.array([h.parent for h in history], pa.int64()),
                "committed_at": pa.array([h.committed_at for h in history], pa.timestamp("us", tz="UTC")),
                "operation": [h.operation for h in history],
                "expired": pa.array([h.expired for h in history], pa.bool_()),
                "summary": [json.dumps(dict(h.summary), sort_keys=True) for h in history],
            }
        )


def _check_count(table: str, name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{table}: {name} must be a positive integer, got {value!r}")


def _check_age(table: str, value: Any) -> None:
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise InvalidInput(
            f"{table}: older_than must be a non-negative datetime.timedelta "
            f"(e.g. timedelta(days=7)), got {value!r}"
        )


def _check_flag(table: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidInput(f"{table}: {name} must be True or False, got {value!r}")


_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")


class _Overtaken(CommitConflict):
    """A rollback found a commit (not a compaction) that landed after it read the table."""


def _check_tag(table: str, name: Any) -> str:
    if not isinstance(name, str) or not _TAG.fullmatch(name):
        raise InvalidInput(
            f"{table}: a tag name is 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit; got {name!r}"
        )
    return name


def _check_key(table: str, key: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidInput(f"{table}: idempotency_key must be a non-empty string, got {key!r}")


__all__ = ["Table", "partition_json"]
