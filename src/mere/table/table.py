"""A table: writes (upsert, append, delete, overwrite), scans, time travel and history."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.errors import CommitConflict, CommitStateUnknown, InvalidInput, NoSuchVersion
from mere.io import Storage
from mere.metadata import CommitResult, ConcurrentChanges, FileEntry, Snapshot, TableRecord
from mere.read.planner import Explain, split_filter
from mere.read.reader import DEFAULT_WHOLE_SPLIT_BYTES, DEFAULT_WINDOW_BYTES
from mere.spec import OP_DELETE, TableSpec
from mere.table.compaction import CompactionPlan, CompactionTask
from mere.table.scan import Scan, ScanTask, normalise_columns
from mere.table.write_checks import WriteChecks
from mere.write.writer import (
    CHUNK_BYTES,
    PreparedFile,
    conform,
    input_chunks,
    partition_json,
    prepare,
    to_batches,
    write_prepared,
)

if TYPE_CHECKING:
    from mere.catalog.sql import SqlCatalog
    from mere.table.catalog import Catalog

log = logging.getLogger(__name__)

MAX_REBASE_ATTEMPTS = 20
SCAN_OPTIONS = ("parallel", "window_bytes", "queue_batches")
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


class Table:
    """A table in a catalog. Cheap to create; every read asks the catalog for the version to read."""

    def __init__(self, catalog: Catalog, record: TableRecord) -> None:
        self.catalog = catalog
        self.record = record
        self.spec = TableSpec.from_json(record.spec)
        self.storage: Storage = catalog.storage
        self.location = record.location
        self.compression = self.spec.properties.get("write.compression", "zstd")
        level = self.spec.properties.get("write.compression-level")
        self.compression_level = int(level) if level else None
        rg_rows = self.spec.properties.get("write.row-group-rows")
        self.row_group_rows = int(rg_rows) if rg_rows else None
        props = self.spec.properties
        self.window_bytes = int(props.get("read.window-bytes", DEFAULT_WINDOW_BYTES))
        default_whole = 0 if "read.window-bytes" in props else DEFAULT_WHOLE_SPLIT_BYTES
        self.whole_split_bytes = int(props.get("read.whole-split-bytes", default_whole))
        self.chunk_bytes = int(props.get("write.chunk-bytes", CHUNK_BYTES))

    @property
    def _sql(self) -> SqlCatalog:
        return self.catalog.sql

    @property
    def name(self) -> str:
        return self.record.identifier

    @property
    def schema(self) -> pa.Schema:
        return self.spec.schema

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.spec.primary_key

    @property
    def version(self) -> int:
        """The newest committed version."""
        return self._sql.current_version(self.record.id)

    def __repr__(self) -> str:
        return f"Table({self.name!r}, primary_key={list(self.spec.primary_key)}, buckets={self.spec.buckets})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A table travels as its catalog's address and its record: the receiver reconnects.
        return (Table, (self.catalog, self.record))

    # -- reads -----------------------------------------------------------------------------------

    def files_at(self, version: int) -> list[FileEntry]:
        """The catalog's entries of the live files at a version."""
        return self._sql.files_at(self.record.id, version)

    def split_tables(self, version: int, splits: set[tuple[str, int]], columns: Sequence[str]
                     ) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of some splits, keyed by (partition JSON, bucket); reads only those splits."""
        return self.scan(columns=list(columns), version=version).split_tables(splits)

    def resolve_version(self, version: int | None = None, as_of: Any = None) -> int:
        if version is not None and as_of is not None:
            raise InvalidInput("give version or as_of, not both")
        current = self.version
        if version is None and as_of is None:
            return current
        oldest = self._sql.oldest_version(self.record.id)
        if version is not None:
            if isinstance(version, bool) or not isinstance(version, int):
                raise InvalidInput(f"{self.name}: version must be an integer, got {version!r}")
            if 0 <= version < oldest:
                raise NoSuchVersion(f"{self.name}: version {version} has expired; the readable versions are "
                                    f"{oldest}..{current}")
            if version < 0 or version > current:
                raise NoSuchVersion(f"{self.name} has versions {oldest}..{current}; got {version}")
            return version
        try:
            v = self._sql.version_as_of(self.record.id, _to_micros(as_of))
        except NoSuchVersion as e:
            raise NoSuchVersion(f"{self.name}: {e}") from None
        if v < oldest:
            raise NoSuchVersion(f"{self.name}: version {v} (as of {as_of}) has expired; the oldest is {oldest}")
        return v

    def scan(self, columns: Sequence[str] | str | None = None, filter: Any = None, version: int | None = None,
             as_of: Any = None, **options: Any) -> Scan:
        """Plan a merged read. ``filter`` is a string, a :mod:`mere.expr` expression or a pyarrow Expression."""
        unknown = sorted(set(options) - set(SCAN_OPTIONS))
        if unknown:
            raise InvalidInput(f"{self.name}: unknown scan option(s) {unknown}; scan() takes columns, filter, "
                               f"version, as_of and {', '.join(SCAN_OPTIONS)}")
        options = {k: v for k, v in options.items() if v is not None}  # None: the default
        for key, value in options.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInput(f"{self.name}: scan option {key} must be a positive integer, got {value!r}")
        v = self.resolve_version(version, as_of)
        scan = Scan(self, v, normalise_columns(columns), filter, **options)
        scan.output_columns  # noqa: B018 - validate column names now, not at first read
        scan._parts()  # validate the filter now (the scan keeps what it parsed)
        return scan

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        return self.scan(**kwargs).to_arrow()

    def history(self) -> list[Snapshot]:
        """Every version as a :class:`~mere.metadata.Snapshot`, oldest first (expired ones marked)."""
        return self._sql.history(self.record.id)

    def files(self, version: int | None = None) -> pa.Table:
        """The live files at a version, as an Arrow table."""
        v = self.resolve_version(version)
        rows = self.files_at(v)
        return pa.table({
            "path": [f.path for f in rows], "partition": [f.partition for f in rows],
            "bucket": pa.array([f.bucket for f in rows], pa.int32()),
            "seq": pa.array([f.seq for f in rows], pa.int64()), "content": [f.content for f in rows],
            "row_count": pa.array([f.row_count for f in rows], pa.int64()),
            "size_bytes": pa.array([f.size_bytes for f in rows], pa.int64()),
            "added_version": pa.array([f.added_version for f in rows], pa.int64()),
        })

    # -- writes ----------------------------------------------------------------------------------

    def upsert(self, data: Any, *, idempotency_key: str | None = None) -> CommitResult:
        """Insert or update rows by primary key; CDC rows are applied in order. Missing columns stay as they were.

        A row lacking a NOT NULL column may only update an existing key; an upsert that would push an
        integer ``sum`` column out of its type's range raises :class:`~mere.errors.SumOverflow`, naming the
        key. Either way nothing is committed.
        """
        if not self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has no primary key: use append()")
        return self._blind_write("upsert", data, partial_ok=True, idempotency_key=idempotency_key)

    def _rows_unchanged(self, entries: Sequence[FileEntry]) -> Callable[[ConcurrentChanges], None]:
        """A commit check for writes that depend on rows read: no concurrent change to the same buckets."""
        mine = {_split_id(e.partition, e.bucket) for e in entries}

        def validate(changes: ConcurrentChanges) -> None:
            for c in changes.commits:
                if c.operation == "compact":
                    continue  # compaction changes no row
                splits = c.internal.get("splits")
                if c.internal.get("partitions") is None or splits is None or mine & set(splits):
                    raise CommitConflict(f"{self.name}: rows this write read changed in version {c.version}")

        return validate

    def append(self, data: Any, *, idempotency_key: str | None = None) -> CommitResult:
        """Add rows to a table without primary key."""
        if self.spec.has_primary_key:
            raise InvalidInput(f"{self.name} has a primary key {list(self.spec.primary_key)}: use upsert()")
        return self._blind_write("append", data, partial_ok=False, idempotency_key=idempotency_key)

    def _blind_write(self, operation: str, data: Any, *, partial_ok: bool,
                     idempotency_key: str | None) -> CommitResult:
        _check_key(self.name, idempotency_key)
        if idempotency_key is not None:
            prior = self.find_commit(idempotency_key)
            if prior is not None:
                return prior
        base = self.version
        checks = WriteChecks(self.spec, self.name) if operation == "upsert" else None
        entries, rows = self._write_data(data, partial_ok=partial_ok, check=checks.observe if checks else None)
        # Blind writes never conflict: they are rebased onto whatever landed meanwhile.
        return self._commit(operation, base, entries, [], rows, idempotency_key=idempotency_key, checks=checks)

    def _write_data(self, data: Any, *, partial_ok: bool,
                    check: Callable[[list[PreparedFile]], None] | None = None) -> tuple[list[FileEntry], int]:
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
            entries = self._marker_files(keys.select(list(self.spec.identity_columns)))
            return StagedWrite(self.name, operation, entries, sum(e.row_count for e in entries))
        checks = WriteChecks(self.spec, self.name) if operation == "upsert" else None
        entries, rows = self._write_data(data, partial_ok=operation == "upsert",
                                         check=checks.observe if checks else None)
        return StagedWrite(self.name, operation, entries, rows)

    def find_commit(self, idempotency_key: str) -> CommitResult | None:
        """The commit made with this idempotency key, if any."""
        _check_key(self.name, idempotency_key)
        prior = self._sql.find_idempotent(self.record.id, idempotency_key)
        return None if prior is None else CommitResult.of(prior, already_committed=True)

    def commit(self, staged: Sequence[StagedWrite], *, operation: str | None = None,
               partition: Mapping[str, Any] | None = None, idempotency_key: str | None = None) -> CommitResult:
        """Commit staged writes of one operation as one new version (the driver half).

        Files of different stages are ordered as given: for equal keys a later stage wins.
        """
        _check_key(self.name, idempotency_key)
        if isinstance(staged, StagedWrite) or not isinstance(staged, Sequence) or not all(
                isinstance(s, StagedWrite) for s in staged):
            raise InvalidInput(f"{self.name}: commit() takes a list of StagedWrite from stage(), got {staged!r}")
        if operation is not None and operation not in STAGE_OPERATIONS:
            raise InvalidInput(f"{self.name}: cannot commit {operation!r}; choose one of {', '.join(STAGE_OPERATIONS)}")
        ops = {s.operation for s in staged}
        if len(ops) > 1:
            raise InvalidInput(f"{self.name}: cannot commit different operations {sorted(ops)} together")
        if any(s.table != self.name for s in staged):
            raise InvalidInput(f"{self.name}: staged writes belong to another table")
        if operation is not None and ops and ops != {operation}:
            raise InvalidInput(f"{self.name}: staged {sorted(ops)} cannot commit as {operation!r}")
        operation = operation or (ops.pop() if ops else ("upsert" if self.spec.has_primary_key else "append"))
        entries: list[FileEntry] = []
        for s in staged:
            for f in s.files:
                entries.append(replace(f, order=len(entries), id=None, seq=None, added_version=None))
        rows = sum(s.rows for s in staged)
        if idempotency_key is not None:
            prior = self.find_commit(idempotency_key)
            if prior is not None:
                self._discard(entries)
                return prior
        if operation == "overwrite":
            wanted = self._wanted_partition(partition)
            self._check_partition(wanted, [json.loads(e.partition) for e in entries])
            return self._commit_overwrite(entries, rows, wanted, self.version, idempotency_key)
        if partition is not None:
            raise InvalidInput("partition= applies to overwrite only")
        extra = {"deleted_keys": rows} if operation == "delete" else None
        checks = None
        if operation == "upsert" and self.spec.has_primary_key:
            checks = WriteChecks(self.spec, self.name)
            try:
                checks.observe_files(self, entries)
            except BaseException:
                self._discard(entries)
                raise
        return self._commit(operation, self.version, entries, [], rows, idempotency_key=idempotency_key,
                            extra=extra, checks=checks)

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
        return write_prepared(self.storage, self.location, self.spec, prepared, first_order=first_order,
                              row_group_rows=self.row_group_rows, compression=self.compression,
                              compression_level=self.compression_level)

    def _discard(self, entries: Sequence[FileEntry]) -> None:
        self.storage.discard(e.path for e in entries)

    def _commit(self, operation: str, base: int, add: list[FileEntry], remove: list[int], rows: int,
                validate: Callable[[ConcurrentChanges], None] | None = None,
                partitions: list[str] | None = None, idempotency_key: str | None = None,
                extra: Mapping[str, Any] | None = None, checks: WriteChecks | None = None) -> CommitResult:
        if partitions is None and add:
            partitions = sorted({f.partition for f in add})
        summary = {
            "read_version": base, "added_files": len(add), "removed_files": len(remove), "rows": rows,
            "added_bytes": sum(f.size_bytes for f in add), "partitions": partitions,
            "splits": sorted({_split_id(f.partition, f.bucket) for f in add}),
            **(extra or {}),
        }
        try:
            if checks is None or not checks.needed:
                return self._sql.commit(self.record.id, base_version=base, operation=operation, add=add,
                                        remove=remove, summary=summary, validate=validate,
                                        idempotency_key=idempotency_key)
            summary |= checks.summary()
            for attempt in range(MAX_REBASE_ATTEMPTS):
                # The checks read the table at one version; a race on what they read re-checks on the next.
                base = self.version
                summary["read_version"] = base
                checked = checks.verify(self, base)
                try:
                    return self._sql.commit(self.record.id, base_version=base, operation=operation, add=add,
                                            remove=remove, summary=summary, validate=_both(validate, checked),
                                            idempotency_key=idempotency_key)
                except CommitConflict:
                    if attempt == MAX_REBASE_ATTEMPTS - 1:
                        raise
                    time.sleep(0.01 * (attempt + 1))
            raise AssertionError("unreachable")
        except CommitStateUnknown:
            raise  # the files may be referenced now: keep them
        except BaseException:
            self._discard(add)
            raise

    def delete(self, where: Any) -> CommitResult:
        """Delete rows matching a filter (string, expression, pyarrow Expression), or the keys in a table of keys.

        ``delete("TRUE")`` deletes every row (as delete markers); :meth:`truncate` empties the table at once.
        """
        if where is None:
            raise InvalidInput(f"{self.name}: delete(None) names no rows; to delete every row say delete('TRUE') "
                               "or truncate()")
        if isinstance(where, (pa.Table, pa.RecordBatch, dict)) or type(where).__module__.startswith("pandas"):
            return self._with_rebase(lambda: self._delete_keys(where))
        if self.spec.has_primary_key:
            return self._with_rebase(lambda: self._delete_markers(where))
        return self._with_rebase(lambda: self._delete_rewrite(where))

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

    def _delete_keys(self, keys: Any) -> CommitResult:
        table = self._key_rows(keys, self.spec.primary_key)
        cols = [c for c in self.spec.identity_columns if c in table.column_names]
        table = table.select(cols)
        if len(cols) == len(self.spec.identity_columns):
            return self._write_markers(self.version, table)
        # Partition unknown: find where each key lives now.
        base = self.version
        pk = list(self.spec.primary_key)
        pk_spec = TableSpec(pa.schema([self.spec.schema.field(c) for c in pk]), self.spec.primary_key,
                            (), self.spec.buckets)
        conformed, _ = conform(table.select(pk), pk_spec, partial_ok=True, identifier=self.name)
        where: Any = None
        if len(pk) == 1 and conformed.num_rows <= 10_000:
            where = E.In(pk[0], tuple(pc.unique(conformed.column(pk[0])).to_pylist()))  # prunes buckets
        current = self.scan(columns=list(self.spec.identity_columns), filter=where, version=base).to_arrow()
        found = current.join(conformed.select(pk).group_by(pk).aggregate([]), keys=pk, join_type="left semi")
        return self._write_markers(base, found, validate_reads=True)

    def _delete_markers(self, where: Any) -> CommitResult:
        base = self.version
        parts = split_filter(self.spec, where)
        blind = (isinstance(parts.post, E.AlwaysTrue) and parts.key_points is not None
                 and set(self.spec.partition_by) <= set(self.spec.primary_key))
        if blind:
            assert parts.key_points is not None
            cols: list[Any] = list(zip(*parts.key_points)) if parts.key_points else [[] for _ in self.spec.primary_key]
            keys = pa.table({k: pa.array(list(c), type=self.spec.schema.field(k).type)
                             for k, c in zip(self.spec.primary_key, cols)})
            keys = keys.filter(E.to_pyarrow(parts.pre)) if keys.num_rows else keys
            return self._write_markers(base, keys)
        # The predicate was evaluated on the base version: a concurrent change to the same buckets may
        # have changed which rows match, so such a race is retried on the new version.
        keys = self.scan(columns=list(self.spec.identity_columns), filter=where, version=base).to_arrow()
        return self._write_markers(base, keys, validate_reads=True)

    def _marker_files(self, keys: pa.Table) -> list[FileEntry]:
        keys, _ = conform(keys, _key_only_spec(self.spec), partial_ok=True, identifier=self.name)
        ops = np.full(keys.num_rows, OP_DELETE, dtype=np.int8)
        prepared = prepare(self.spec, keys, ops)
        return self._write_files(prepared)

    def _write_markers(self, base: int, keys: pa.Table, validate_reads: bool = False) -> CommitResult:
        entries = self._marker_files(keys)
        rows = sum(e.row_count for e in entries)
        return self._commit("delete", base, entries, [], rows, extra={"deleted_keys": rows},
                            validate=self._rows_unchanged(entries) if validate_reads else None)

    def _delete_rewrite(self, where: Any) -> CommitResult:
        """Tables without a key: rewrite the files holding matching rows (copy on write)."""
        base = self.version
        parts = split_filter(self.spec, where)
        predicate = E.to_pyarrow(parts.bound)
        keep_expr = ~pc.coalesce(predicate, pa.scalar(False))
        add: list[FileEntry] = []
        remove: list[int] = []
        deleted = 0
        try:
            for f in self.files_at(base):
                values = json.loads(f.partition)
                if self.spec.partition_by and E.evaluate_constant(
                        parts.bound, _typed(self.spec, values)) is False:
                    continue
                md = self.storage.metadata(f.path)
                data = self.storage.read_row_groups(f.path, range(md.num_row_groups), None)
                kept = data.filter(keep_expr)
                if kept.num_rows == data.num_rows:
                    continue
                deleted += data.num_rows - kept.num_rows
                assert f.id is not None
                remove.append(f.id)
                if kept.num_rows:
                    prepared = [PreparedFile(values, f.bucket, kept, "data")]
                    add += self._write_files(prepared, first_order=len(add))
        except BaseException:
            self._discard(add)
            raise
        return self._commit("delete", base, add, remove, deleted, partitions=sorted({
            f.partition for f in self.files_at(base) if f.id in set(remove)}), extra={"deleted_rows": deleted})

    def truncate(self) -> CommitResult:
        """Remove every row as one new version, without writing anything (earlier versions stay readable)."""
        return self._commit_overwrite([], 0, None, self.version, None, operation="truncate")

    def overwrite(self, data: Any, partition: Mapping[str, Any] | None = None) -> CommitResult:
        """Replace the whole table, or the partitions matching ``partition``, with ``data``."""
        wanted = self._wanted_partition(partition)
        base = self.version
        entries, rows = self._write_data(
            data, partial_ok=False, check=lambda prepared: self._check_partition(wanted, [p.partition for p in prepared]))
        return self._commit_overwrite(entries, rows, wanted, base, None)

    def _wanted_partition(self, partition: Mapping[str, Any] | None) -> dict[str, str | None] | None:
        if partition is None:
            return None
        if not isinstance(partition, Mapping) or not partition:
            raise InvalidInput(f"{self.name}: partition must be a dict of partition column -> value such as "
                               f"{{{self.spec.partition_by[0] if self.spec.partition_by else 'day'!r}: ...}}, "
                               f"got {partition!r}")
        unknown = [c for c in partition if c not in self.spec.partition_by]
        if unknown:
            raise InvalidInput(f"{self.name}: {unknown} are not partition columns {list(self.spec.partition_by)}")
        return {c: _partition_string(self.spec, c, v) for c, v in partition.items()}

    def _check_partition(self, wanted: Mapping[str, str | None] | None,
                         partitions: Sequence[Mapping[str, str | None]]) -> None:
        if wanted is None:
            return
        for p in partitions:
            if any(p.get(c) != v for c, v in wanted.items()):
                raise InvalidInput(f"{self.name}: overwrite of partition {dict(wanted)} got rows of partition {dict(p)}")

    def _commit_overwrite(self, entries: list[FileEntry], rows: int, wanted: dict[str, str | None] | None,
                          base: int, idempotency_key: str | None, operation: str = "overwrite") -> CommitResult:
        def matches(f: FileEntry) -> bool:
            return wanted is None or _partition_matches(f.partition, wanted)

        def validate(changes: ConcurrentChanges) -> None:
            # A concurrent write to the partitions being replaced: redo the file list on top of it.
            other = changes.partitions_touched()
            if wanted is None or other is None or any(_partition_matches(p, wanted) for p in other):
                raise CommitConflict(f"{self.name}: a concurrent commit wrote to the overwritten data")

        try:
            for _ in range(MAX_REBASE_ATTEMPTS):
                removed = [f for f in self.files_at(base) if matches(f)]
                touched = sorted({f.partition for f in removed} | {f.partition for f in entries})
                try:
                    return self._sql.commit(
                        self.record.id, base_version=base, operation=operation, add=entries,
                        remove=[f.id for f in removed if f.id is not None], validate=validate,
                        idempotency_key=idempotency_key,
                        summary={"read_version": base, "added_files": len(entries), "removed_files": len(removed),
                                 "rows": rows, "added_bytes": sum(f.size_bytes for f in entries),
                                 "partitions": None if wanted is None else touched, "overwrite": wanted})
                except CommitConflict:
                    base = self.version
            raise CommitConflict(f"{self.name}: overwrite lost {MAX_REBASE_ATTEMPTS} races; try again")
        except CommitStateUnknown:
            raise
        except BaseException:
            self._discard(entries)
            raise

    def _with_rebase(self, op: Callable[[], CommitResult]) -> CommitResult:
        for attempt in range(MAX_REBASE_ATTEMPTS):
            try:
                return op()
            except CommitConflict:
                if attempt == MAX_REBASE_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    # -- maintenance -----------------------------------------------------------------------------

    def compact(self, min_files: int = 2, partition: Mapping[str, Any] | None = None,
                run: Callable[[Sequence[CompactionTask]], list[list[FileEntry]]] | None = None) -> CommitResult | None:
        """Fold each bucket's files into merged files; readers then merge less. Returns None if nothing to do.

        Splits with at least ``min_files`` files (or any delete markers) are folded, optionally only in one
        partition. The new files keep the sequence of the newest file they replace, so writes that commit
        meanwhile still merge on top of them. Old files stay for time travel until :meth:`expire`.
        ``run`` executes the tasks and returns each one's files, in task order (default: here, one after
        another); an engine passes its own to spread them (see ``mere.integrations.spark.compact``). The
        steps are also public: :meth:`plan_compaction`, :meth:`CompactionTask.run
        <mere.table.compaction.CompactionTask.run>` and :meth:`commit_compaction`.
        """
        if run is not None and not callable(run):
            raise InvalidInput(f"{self.name}: run must be a function of the compaction tasks, got {run!r}")
        for _ in range(MAX_REBASE_ATTEMPTS):
            plan = self.plan_compaction(min_files, partition)
            if not plan.remove:
                return None
            results = (run or self._run_compaction)(plan.tasks)
            try:
                return self.commit_compaction(plan, results)
            except CommitConflict:
                continue  # an overwrite or another compaction replaced some inputs: plan again
        raise CommitConflict(f"{self.name}: compaction lost {MAX_REBASE_ATTEMPTS} races; try again")

    def _run_compaction(self, tasks: Sequence[CompactionTask]) -> list[list[FileEntry]]:
        results: list[list[FileEntry]] = []
        try:
            results.extend(task.run(self.storage) for task in tasks)  # keeps the finished ones on error
        except BaseException:
            self.abort_compaction(results)
            raise
        return results

    def plan_compaction(self, min_files: int = 2, partition: Mapping[str, Any] | None = None) -> CompactionPlan:
        """The splits :meth:`compact` would fold now, as picklable tasks for workers to run."""
        _check_count(self.name, "min_files", min_files)
        wanted = self._wanted_partition(partition)
        base = self.version
        if not self.spec.has_primary_key:
            return CompactionPlan(self.name, self.record.uuid, base, (), (), ())
        splits, opts = self.scan(version=base)._plan(Explain(base))
        ids = {f.path: f.id for f in self.files_at(base)}
        storage_options = tuple(sorted(self.storage.storage_options.items()))
        tasks: list[CompactionTask] = []
        remove: list[int] = []
        partitions: set[str] = set()
        for split in splits:
            values = dict(split.partition)
            if wanted is not None and any(values.get(c) != v for c, v in wanted.items()):
                continue
            if len(split.files) < min_files and not any(f.content == "delete" for f in split.files):
                continue
            read = ScanTask(self.storage.uri, storage_options, self.record.spec, split, opts)
            tasks.append(CompactionTask(read, self.location, max(f.seq for f in split.files), self.row_group_rows,
                                        self.compression, self.compression_level))
            remove += [i for f in split.files if (i := ids.get(f.path)) is not None]
            partitions.add(partition_json(values))
        return CompactionPlan(self.name, self.record.uuid, base, tuple(tasks), tuple(remove), tuple(sorted(partitions)))

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
        add = [replace(f, order=i, id=None, added_version=None)
               for i, f in enumerate(f for files in results for f in files)]
        if any(f.seq is None for f in add):
            self._discard(add)
            raise InvalidInput(f"{self.name}: compaction results must come from CompactionTask.run")
        return self._commit("compact", plan.base_version, add, list(plan.remove), sum(f.row_count for f in add),
                            partitions=list(plan.partitions))

    def abort_compaction(self, results: Sequence[Sequence[FileEntry]]) -> None:
        """Delete files written by compaction tasks that will not be committed."""
        self._discard([f for files in results for f in files])

    def expire(self, older_than: dt.timedelta = dt.timedelta(days=7)) -> list[str]:
        """Give up time travel to versions older than ``older_than`` and delete the files only they used.

        The version current at the cutoff stays readable. Returns the deleted paths.
        """
        _check_age(self.name, older_than)
        try:
            keep = self._sql.version_as_of(self.record.id, _to_micros(dt.datetime.now(dt.UTC) - older_than))
        except NoSuchVersion:
            return []
        paths = self._sql.expire(self.record.id, keep)
        for p in paths:  # unreferenced now: a failure here leaves garbage for cleanup(), never a broken table
            try:
                self.storage.delete(p)
            except Exception:
                log.warning("could not delete expired file %s", p)
        return paths

    def cleanup(self, older_than: dt.timedelta = dt.timedelta(hours=1)) -> list[str]:
        """Delete files under the table's location that no version references (failed or killed writes),
        and on object stores abort the multipart uploads such writes left pending.

        Only files and uploads older than ``older_than`` go, so writes still in flight keep theirs.
        Returns the removed paths.
        """
        _check_age(self.name, older_than)
        referenced = self._sql.all_file_paths(self.record.id)
        cutoff = time.time() - older_than.total_seconds()
        removed = []
        for path, _size, mtime in self.storage.list_files(self.location):
            if path not in referenced and mtime < cutoff:
                self.storage.delete(path)
                removed.append(path)
        return removed + self.storage.abort_stale_uploads(self.location, cutoff)


def _both(first: Callable[[ConcurrentChanges], None] | None,
          second: Callable[[ConcurrentChanges], None]) -> Callable[[ConcurrentChanges], None]:
    def validate(changes: ConcurrentChanges) -> None:
        if first is not None:
            first(changes)
        second(changes)

    return validate


def _split_id(partition: str, bucket: int) -> str:
    return f"{partition}#{bucket}"


def _key_only_spec(spec: TableSpec) -> TableSpec:
    fields = [spec.schema.field(c) for c in spec.schema.names if c in spec.identity_columns]
    return TableSpec(pa.schema(fields), spec.primary_key, spec.partition_by, spec.buckets, {}, None, {})


def _typed(spec: TableSpec, values: Mapping[str, str | None]) -> dict[str, Any]:
    from mere.read.planner import typed_partition

    return typed_partition(spec, values)


def _partition_string(spec: TableSpec, column: str, value: Any) -> str | None:
    if value is None:
        return None
    t = spec.schema.field(column).type
    try:
        scalar = pa.scalar(value) if not isinstance(value, str) else pa.scalar(value, pa.string())
        return str(scalar.cast(t).cast(pa.string()).as_py())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidInput(f"partition value {value!r} does not fit column {column!r} of type {t}") from e


def _partition_matches(partition: str, wanted: Mapping[str, str | None]) -> bool:
    values = json.loads(partition)
    return all(values.get(c) == v for c, v in wanted.items())


def _to_micros(value: Any) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        try:  # seconds since the epoch, within datetime's range
            return _to_micros(dt.datetime.fromtimestamp(value, dt.UTC))
        except (OverflowError, ValueError, OSError):
            pass
    if isinstance(value, str):
        try:
            return _to_micros(dt.datetime.fromisoformat(value))
        except ValueError:
            pass
    raise InvalidInput(f"as_of must be a datetime, an ISO 8601 string such as '2026-11-21T08:00:00+00:00' "
                       f"(naive means UTC) or epoch seconds, got {value!r}")


def _check_count(table: str, name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{table}: {name} must be a positive integer, got {value!r}")


def _check_age(table: str, value: Any) -> None:
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise InvalidInput(f"{table}: older_than must be a non-negative datetime.timedelta "
                           f"(e.g. timedelta(days=7)), got {value!r}")


def _check_key(table: str, key: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidInput(f"{table}: idempotency_key must be a non-empty string, got {key!r}")


__all__ = ["Table", "partition_json"]
