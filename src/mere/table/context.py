"""What an operation sees of a table: a frozen :class:`TableContext`, never the ``Table`` handle itself.

A context names the table (its catalog record, layout and location), holds its write settings, the
catalog as a :class:`MetadataStore` (the methods of :class:`~mere.catalog.sql.SqlCatalog` operations
use), the storage as :class:`DataFiles` (write, discard, key rows, partition checks), and the handle's
merged reads (:class:`TableHandle`). Operations (``mere.table.ops``) and the commit path take a context; the
``Table`` facade builds one per call (cheap: nothing is read).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from mere.arrays import note_written, release_freed_memory, release_freed_memory_of_pools
from mere.errors import InvalidInput, SchemaChanged, SchemaMismatch
from mere.io import Storage
from mere.metadata import (
    CommitRequest,
    CommitResult,
    ConcurrentChanges,
    ConsumerRecord,
    ExpireResult,
    FileEntry,
    Snapshot,
    TableRecord,
    VersionRangeChanges,
)
from mere.partitions import partition_json, partition_string, partition_value_strings
from mere.spec import DEFAULT_COMPRESSION, OP_DELETE, TableSpec
from mere.table.evolve import same_columns
from mere.table.file_keys import remember
from mere.table.scan import Scan, ScannedTable
from mere.write.cast import decoded
from mere.write.writer import (
    CHUNK_BYTES,
    PreparedFile,
    conform,
    decode_cdc,
    input_chunks,
    prepare,
    refuse_repeated_names,
    to_batches,
    write_prepared,
)


class MetadataStore(Protocol):
    """The catalog methods the table layer uses; :class:`~mere.catalog.sql.SqlCatalog` is one."""

    def load_table(self, namespace: str, name: str) -> TableRecord:
        """The table's catalog record."""

    def current_version(self, table_id: int) -> int:
        """The newest committed version."""

    def version_range(self, table_id: int) -> tuple[int, int]:
        """The newest and the oldest readable version."""

    def oldest_version(self, table_id: int) -> int:
        """The oldest readable version."""

    def version_as_of(self, table_id: int, micros: int) -> int:
        """The newest version committed at or before ``micros``."""

    def is_tagged(self, table_id: int, version: int) -> bool:
        """Whether a tag names the version."""

    def list_tags(self, table_id: int) -> dict[str, int]:
        """Tag name -> version."""

    def tag_version(self, table_id: int, name: str) -> int:
        """The version a tag names."""

    def create_tag(self, table_id: int, name: str, version: int | None, move: bool = False) -> int:
        """Name a version."""

    def drop_tag(self, table_id: int, name: str) -> int:
        """Remove a tag."""

    def spec_at(self, table_id: int, version: int) -> str | None:
        """The layout (JSON) as of a version, if known."""

    def specs_after(self, table_id: int, version: int) -> list[tuple[int, str]]:
        """Each layout a commit after ``version`` set, with its version."""

    def files_at(self, table_id: int, version: int, *, expired_ok: bool = False) -> list[FileEntry]:
        """The live files at a version."""

    def files_changed(self, table_id: int, after: int, upto: int) -> list[tuple[FileEntry, int | None]]:
        """Files added or removed by the commits ``after < v <= upto``."""

    def version_range_changes(self, table_id: int, after: int, upto: int | None) -> VersionRangeChanges:
        """The commits and files of a version range, with the readable range."""

    def all_file_paths(self, table_id: int) -> set[str]:
        """Every path any version references."""

    def referenced_paths(self, table_id: int, paths: Sequence[str], settled: bool = False) -> set[str]:
        """Those of ``paths`` some version references (``settled``: after a commit being landed ended)."""

    def history(self, table_id: int, after: int | None = None, upto: int | None = None) -> list[Snapshot]:
        """The snapshots, oldest first."""

    def snapshot(self, table_id: int, version: int) -> Snapshot:
        """One version's snapshot."""

    def find_idempotent(self, table_id: int, key: str) -> Snapshot | None:
        """The commit made with an idempotency key."""

    def expire(
        self, table_id: int, keep_from: int, *, unseen_before: int | None = None, reason: str = ""
    ) -> ExpireResult:
        """Give up the versions before ``keep_from`` that no consumer needs; the paths no longer
        referenced, and the consumers dropped for being unseen since ``unseen_before``."""

    def create_consumer(self, table_id: int, name: str, version: int | None) -> tuple[ConsumerRecord, bool]:
        """A consumer, registered at ``version`` if new; whether this call created it."""

    def consumer(self, table_id: int, name: str, *, touch: bool = False) -> ConsumerRecord:
        """A live consumer (``touch``: marked seen)."""

    def claim_consumer(self, table_id: int, name: str, end: int | None) -> tuple[int, int]:
        """The range a consumer reads next (a pending one again), recorded as pending."""

    def advance_consumer(
        self, table_id: int, name: str, version: int, *, seek: bool = False
    ) -> ConsumerRecord:
        """Move a consumer forward to ``version`` (``seek``: to it either way)."""

    def drop_consumer(self, table_id: int, name: str) -> ConsumerRecord:
        """Remove a consumer."""

    def list_consumers(self, table_id: int) -> list[ConsumerRecord]:
        """The consumers, dropped ones included."""

    def commit(
        self,
        table_id: int,
        *,
        base_version: int,
        operation: str,
        add: Sequence[FileEntry] = (),
        remove: Iterable[int] = (),
        summary: dict[str, Any] | None = None,
        validate: Callable[[ConcurrentChanges], None] | None = None,
        idempotency_key: str | None = None,
        spec: str | None = None,
        restores: int | None = None,
        written_since: int | None = None,
        written_since_exact: bool = False,
    ) -> CommitResult:
        """Add and remove files as one new version (see :meth:`SqlCatalog.commit`)."""

    def commit_tables(
        self,
        requests: Sequence[CommitRequest],
        names: Sequence[str],
        transaction_key: str | None = None,
        unchanged: Mapping[str, int] | None = None,
    ) -> list[CommitResult] | None:
        """Land several tables' commits in one transaction (see :meth:`SqlCatalog.commit_tables`)."""

    def fence_cleanup(self, table_id: int, cutoff_micros: int) -> None:
        """Tell commits that a cleanup may delete the table's files older than ``cutoff_micros``."""

    def cleanup_fence(self, table_id: int) -> int | None:
        """The newest cutoff a cleanup of the table fenced (microseconds), or None."""

    def find_transaction(self, key: str) -> dict[str, tuple[int, int | None]] | None:
        """The tables a catalog transaction with an idempotency key committed."""

    def transaction_committed_at(self, key: str) -> dt.datetime | None:
        """When the catalog transaction with an idempotency key committed."""

    def table_versions(self, as_of: int | None = None) -> list[tuple[TableRecord, int]]:
        """Every table with the version a read point sees, from one database read."""


class TableHandle(ScannedTable, Protocol):
    """What operations may ask of a table handle (``mere.Table`` is one): its context and merged reads.

    Operations take this narrow view, never the ``Table`` class, so that they depend on the context
    alone (and engines may hand them any handle)."""

    @property
    def name(self) -> str:
        """``namespace.name``."""

    @property
    def spec(self) -> TableSpec:
        """The layout writes conform to."""

    @property
    def storage(self) -> Storage:
        """The warehouse's storage, naming this table in read errors."""

    @property
    def version(self) -> int:
        """The newest committed version."""

    @property
    def context(self) -> TableContext:
        """The table as operations see it."""

    def files_at(self, version: int) -> list[FileEntry]:
        """The live files at a version."""

    def resolve_version(self, version: int | None = None, as_of: Any = None, tag: str | None = None) -> int:
        """The version a read sees (an ``as_of`` without a zone is read as UTC, not as local time)."""

    def spec_at(self, version: int) -> TableSpec:
        """The layout as of a version."""

    def scan(
        self, columns: Sequence[str] | str | None = None, filter: Any = None, version: int | None = None
    ) -> Scan:
        """A merged read."""

    def split_tables(
        self, version: int, splits: set[tuple[str, int]], columns: Sequence[str], filter: Any = None
    ) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of some splits."""

    def refresh(self) -> TableHandle:
        """Reload the layout and properties from the catalog."""


class CatalogHandle(Protocol):
    """The catalog a table handle belongs to (``mere.Catalog`` is one)."""

    @property
    def sql(self) -> MetadataStore:
        """The metadata catalog."""

    @property
    def storage(self) -> Storage:
        """The warehouse's storage."""

    @property
    def threads(self) -> int | None:
        """Merge workers of reads (None: the default)."""

    @property
    def catalog_url(self) -> str:
        """The metadata catalog's address."""

    def drop_if_unchanged(self, table: TableHandle, version: int) -> bool:
        """Undo a table a failed write created (the Spark integration calls it)."""


def is_handle(value: Any) -> bool:
    """Whether ``value`` is a table handle (by its class: no property is evaluated)."""
    kind = type(value)
    return all(
        hasattr(kind, name) for name in ("context", "refresh", "resolve_version", "scan", "split_tables")
    )


@dataclass(frozen=True)
class WriteSettings:
    """How data files are written (the ``write.*`` table properties)."""

    compression: str = DEFAULT_COMPRESSION
    compression_level: int | None = None
    row_group_rows: int | None = None
    chunk_bytes: int = CHUNK_BYTES
    write_id: str | None = None  # carried in the files' names (a staged write's id; see Table.abort_write)

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> WriteSettings:
        """The settings the properties name (defaults for those they do not)."""
        level = properties.get("write.compression-level")
        rg_rows = properties.get("write.row-group-rows")
        return cls(
            properties.get("write.compression", DEFAULT_COMPRESSION),
            int(level) if level else None,
            int(rg_rows) if rg_rows else None,
            int(properties.get("write.chunk-bytes", CHUNK_BYTES)),
        )


@dataclass(frozen=True)
class SchemaChange:
    """A column change committed with a write: the new layout and its steps (as summaries name them)."""

    spec: TableSpec
    steps: tuple[str, ...]


@dataclass(frozen=True)
class DataFiles:
    """The table's data files in storage: written (never visible until a commit lists them) and discarded."""

    storage: Storage
    location: str
    spec: TableSpec
    name: str
    settings: WriteSettings = field(default_factory=WriteSettings)
    # The first version whose columns differ from ``spec`` (None: none does); input refused against stale
    # columns is then reported as the stale handle it is.
    columns_changed: Callable[[], int | None] | None = field(default=None, repr=False)

    def write(self, prepared: Sequence[PreparedFile], first_order: int = 0) -> list[FileEntry]:
        """Write prepared (reduced, per-split) rows as files; their entries, ordered from ``first_order``."""
        s = self.settings
        entries = write_prepared(
            self.storage,
            self.location,
            self.spec,
            prepared,
            first_order=first_order,
            row_group_rows=s.row_group_rows,
            compression=s.compression,
            compression_level=s.compression_level,
            write_id=s.write_id,
        )
        # the commit's lookup of stored keys (and the next commits') need not read these back
        remember(self.storage, self.spec, entries, [p.rows for p in prepared])
        return entries

    def discard(self, entries: Iterable[FileEntry]) -> None:
        """Delete files no commit lists (best effort: what stays is garbage for ``cleanup``)."""
        self.storage.discard(e.path for e in entries)

    def write_data(
        self,
        data: Any,
        *,
        partial_ok: bool,
        check: Callable[[list[PreparedFile]], None] | None = None,
        partitions: set[str] | None = None,
    ) -> tuple[list[FileEntry], int, int]:
        """Write input rows chunk by chunk; ``check`` sees each chunk's prepared files before they are
        written. Returns the entries, the rows and the stale rows (tables with ``sequence_by``: rows a row
        of the same key with a higher sequence in the same chunk replaced); on failure the files written
        so far are deleted. ``partitions`` collects the partitions (JSON) the input rows name, also those
        no file is written in (table-wide keys: every row there moved to another partition in the batch)."""
        entries: list[FileEntry] = []
        rows = stale = 0
        try:
            for chunk in input_chunks(data, self.settings.chunk_bytes):
                try:
                    table, ops = conform(chunk, self.spec, partial_ok=partial_ok, identifier=self.name)
                except SchemaMismatch as e:
                    version = None if self.columns_changed is None else self.columns_changed()
                    if version is not None:
                        raise stale_columns(self.name, version, e) from e
                    raise
                del chunk
                rows += table.num_rows
                handled = table.nbytes
                if partitions is not None and table.num_rows:
                    partitions.update(partition_json(v) for v in partition_value_strings(self.spec, table)[1])
                prepared = prepare(self.spec, table, ops, identifier=self.name)
                del table
                if check is not None:
                    check(prepared)
                stale += sum(p.stale for p in prepared)
                entries += self.write(prepared, first_order=len(entries))
                del prepared
                # a big chunk's sort and encode freed much, kept per thread: hand it back (small writes
                # keep it for the next one; a scan hands back what the writer's threads keep)
                note_written(handled)
                release_freed_memory(handled)
                release_freed_memory_of_pools(handled)
        except BaseException:
            self.discard(entries)
            raise
        return entries, rows, stale

    def key_rows(self, data: Any, required: Sequence[str]) -> pa.Table:
        """Rows naming keys to delete, checked to carry the ``required`` columns."""
        if not self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has no primary key: delete with a filter")
        schema, batches = to_batches(data)
        table = pa.Table.from_batches(list(batches), schema=schema)
        refuse_repeated_names(table, self.name)
        missing = [c for c in required if c not in table.column_names]
        if missing:
            what = (
                "key/partition"
                if set(missing) <= set(self.spec.identity_columns)
                else "key/partition/sequence"
            )
            raise InvalidInput(f"{self.name}: rows to delete lack {what} column(s) {missing}")
        change = self.spec.cdc_column
        if change is not None and change in table.column_names and table.num_rows:
            # Rows carrying their own change codes: deleting rows that say insert or update would
            # reinterpret them (a change stream is applied by upsert, every operation as it says).
            if table.column(change).null_count:
                raise InvalidInput(f"{self.name}: change column {change!r} of the rows to delete holds nulls")
            codes = decoded(table.column(change))
            kept = decode_cdc(codes, change) != OP_DELETE
            if kept.any():
                said = pc.unique(codes.filter(pa.array(kept))).to_pylist()[:5]
                raise InvalidInput(
                    f"{self.name}: rows to delete carry change column {change!r} with {said}, not a delete; "
                    "apply a change stream with upsert(), or drop the column to delete these keys"
                )
        return table

    def wanted_partition(self, partition: Mapping[str, Any] | None) -> dict[str, str | None] | None:
        """A partition given as column -> value, as the partition JSON spells its values (checked)."""
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
        return {c: partition_string(self.spec, c, v) for c, v in partition.items()}

    def check_partition(
        self, wanted: Mapping[str, str | None] | None, partitions: Sequence[Mapping[str, str | None]]
    ) -> None:
        """Refuse rows outside the partition an overwrite replaces."""
        if wanted is None:
            return
        for p in partitions:
            if any(p.get(c) != v for c, v in wanted.items()):
                raise InvalidInput(
                    f"{self.name}: overwrite of partition {dict(wanted)} got rows of partition {dict(p)}"
                )


@dataclass(frozen=True)
class TableContext:
    """One table as an operation sees it: identity, layout, settings, catalog, storage and reads.

    ``spec`` is the layout writes conform to (a handle adding columns sees the new ones, and
    ``schema_change`` commits them with its writes). ``columns_seen``: commits up to this version kept the
    columns of ``spec`` (the handle checked them). ``after_commit`` is the handle's reaction to a commit
    of this process (reload, automatic maintenance); it never fails the commit.
    """

    record: TableRecord
    spec: TableSpec
    catalog: CatalogHandle
    storage: Storage
    handle: TableHandle
    settings: WriteSettings = field(default_factory=WriteSettings)
    columns_seen: int = 0
    schema_change: SchemaChange | None = None
    after_commit: Callable[[CommitResult, bool], None] | None = field(default=None, repr=False)

    @property
    def store(self) -> MetadataStore:
        """The metadata catalog (connected on first use: workers that only write files never connect)."""
        return self.catalog.sql

    @property
    def name(self) -> str:
        """``namespace.name``."""
        return self.record.identifier

    @property
    def table_id(self) -> int:
        """The catalog's id of the table."""
        return self.record.id

    @property
    def uuid(self) -> str:
        """The table's uuid (a table dropped and created again has another)."""
        return self.record.uuid

    @property
    def location(self) -> str:
        """The table's directory, relative to the warehouse."""
        return self.record.location

    @property
    def files(self) -> DataFiles:
        """The table's data files."""
        return DataFiles(
            self.storage, self.location, self.spec, self.name, self.settings, lambda: columns_changed(self)
        )


def stale_columns(
    name: str, version: int, cause: Exception | None = None, redo: str = "write"
) -> SchemaChanged:
    """The error of a handle whose columns another handle changed at ``version`` (``cause``: the refusal
    the stale columns led to)."""
    why = "" if cause is None else f" ({cause})"
    return SchemaChanged(
        f"{name}: the table's columns changed in version {version}, after this handle read them{why}; "
        f"refresh() the table and {redo} again"
    )


def columns_changed(ctx: TableContext) -> int | None:
    """The first version since the handle loaded its spec whose columns differ from the handle's; None if
    none does."""
    for version, text in ctx.store.specs_after(ctx.table_id, ctx.columns_seen):
        if not same_columns(TableSpec.from_json(text, ctx.name), ctx.spec):
            return version
    return None


def partition_values(partition: str) -> tuple[tuple[str, str | None], ...]:
    """A partition's values in a form that compares equal whatever the JSON's spelling."""
    return tuple(sorted(json.loads(partition).items()))


def partition_matches(partition: str, wanted: Mapping[str, str | None]) -> bool:
    """Whether a partition (JSON) holds the ``wanted`` values."""
    values = json.loads(partition)
    return all(values.get(c) == v for c, v in wanted.items())


def split_label(key: tuple[str, int]) -> str:
    """How commit summaries name a split (partition JSON, bucket)."""
    return f"{key[0]}#{key[1]}"


def file_splits(files: Iterable[FileEntry]) -> frozenset[str]:
    """The splits (as commit summaries name them) some files lie in."""
    return frozenset(split_label((f.partition, f.bucket)) for f in files)
