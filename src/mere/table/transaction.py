"""The one commit path: a transaction collects changes and commits them as one new version.

Every write goes through :class:`Transaction`: ``upsert``, ``append``, ``delete``, ``overwrite``,
``truncate``, ``set_properties``, staged (distributed) commits and compaction. A change writes its files
when it is added; nothing is visible until :meth:`Transaction.commit`. The commit then runs one catalog
transaction that checks what landed since the transaction read the table (the conflict rules below),
and on a lost race rebases and tries again under :data:`mere.retry.COMMIT_RETRIES`.

Conflict rules (what a concurrent commit may have done, and what this transaction then does):

- **Blind writes** (upserts, appends, deletes of given keys) never conflict: they rebase onto whatever
  landed, since merge on read orders them by commit. With the change log on (``changes.log``) they are
  not blind: they record the rows they replace, so a concurrent commit to their splits (files added or
  removed there) is a conflict, and the retry reads those rows again.
- **Writes with checks** (NOT NULL partial rows, integer sums) conflict when a concurrent commit changed
  the splits they checked; the checks run again on the new version.
- **Deletes by predicate** (and of keys whose partition is unknown) read the table: they conflict when a
  concurrent commit changed rows in the same splits, and are evaluated again on the new version.
- **MERGE and UPDATE** read rows the same way: they conflict when a concurrent commit changed rows in the
  splits they read (any split, for a MERGE with a NOT MATCHED BY SOURCE clause) and are evaluated again.
- **Overwrites** conflict when a concurrent commit wrote to the replaced partitions; they replace what is
  there at the new version.
- **Removed files** that a concurrent commit already removed (compaction racing an overwrite) always
  conflict; compaction then plans again.
- **Property changes** conflict with a concurrent property change and are applied again on its result.
- **Schema changes** (:meth:`Table.evolve <mere.Table.evolve>`): every commit fails with ``SchemaChanged``
  (not retried) when the table's columns changed after its handle read them, so nothing is ever written
  under a schema its writer did not see; :meth:`Table.refresh <mere.Table.refresh>` and write again.
- **Rollbacks** (:meth:`Table.rollback <mere.Table.rollback>`) replace the whole table state: they conflict
  with every concurrent commit, and are recomputed only when the commits that landed were compactions
  (which change no row); otherwise they raise ``CommitConflict`` rather than undo a write they never saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.errors import (
    CommitConflict,
    CommitFailed,
    CommitStateUnknown,
    InvalidInput,
    NoSuchVersion,
    SchemaChanged,
    names_its_table,
)
from mere.metadata import (
    BLIND_DELETE_MARKERS,
    DELETE_MARKERS,
    DELETED_ROWS,
    CommitResult,
    ConcurrentChanges,
    FileEntry,
)
from mere.read.evolution import whole_file_as_table
from mere.read.planner import split_filter
from mere.retry import COMMIT_RETRIES, RetryPolicy
from mere.spec import OP_DELETE, TableSpec, validate_properties
from mere.table.changes import LOG_SUMMARY_KEY, logs_changes, write_change_log
from mere.table.write_checks import WriteChecks, split_label
from mere.write.writer import PreparedFile, conform, prepare

if TYPE_CHECKING:
    from mere.table.table import Table

Validate = Callable[[ConcurrentChanges], None]


@dataclass
class Change:
    """One operation's share of a commit: the files it wrote and what it needs from the table."""

    operation: str
    files: list[FileEntry]
    rows: int
    extra: dict[str, Any] = field(default_factory=dict)  # summary entries (deleted_keys, overwrite, ...)
    replaces: Callable[[int], list[FileEntry]] | None = None  # files of a version this change removes
    partitions: Callable[[list[FileEntry]], list[str] | None] | None = None  # touched, given the removed
    validate: Validate | None = None
    redo: Callable[[int], Change] | None = None  # changes that read rows: evaluate again at a newer version
    remove_ids: tuple[int, ...] = ()  # catalog ids of files removed whatever the version (compaction inputs)
    # A rollback: ``files`` are files of this older version, added again. They belong to that version, so
    # a failed transaction never deletes them, and the commit checks the version was not expired meanwhile.
    restores: int | None = None


@names_its_table
class Transaction:
    """Changes to one table that commit together as one version, or not at all.

    Use it as a context manager: the changes commit when the block ends, and are discarded if it raises::

        with t.transaction() as tx:
            tx.delete("day = '2026-11-21'")
            tx.append(replacement)

    Operations see the table as of the transaction's start, not each other's writes; so changes that read
    rows (deletes by predicate, overwrites) must come before the writes of the same transaction.
    """

    def __init__(
        self, table: Table, idempotency_key: str | None = None, retries: RetryPolicy = COMMIT_RETRIES
    ) -> None:
        self.table = table
        self.idempotency_key = idempotency_key
        self.retries = retries
        self.read_version = table.version
        self.changes: list[Change] = []
        self.checks: WriteChecks | None = None
        self._properties: dict[str, str] | None = None
        # A column change: the new spec and its steps (a handle from Table.adding_columns carries one).
        self._schema: tuple[TableSpec, list[str]] | None = getattr(table, "_pending_columns", None)
        self._state = "open"  # open, committed, aborted

    # -- context manager ----------------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        if self._state != "open":
            return
        if kind is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        ops = [c.operation for c in self.changes] + self._spec_operations()
        return f"Transaction({self.table.name!r}, read_version={self.read_version}, {self._state}, changes={ops})"

    # -- operations ---------------------------------------------------------------------------------

    def upsert(self, data: Any) -> Transaction:
        """Insert or update rows by primary key (see :meth:`Table.upsert <mere.Table.upsert>`)."""
        t = self._open()
        if not t.spec.has_primary_key:
            raise InvalidInput(f"{t.name} has no primary key: use append()")
        checks = self._checks()
        files, rows = t._write_data(data, partial_ok=True, check=checks.observe)
        return self._add(Change("upsert", files, rows))

    def append(self, data: Any) -> Transaction:
        """Add rows to a table without primary key."""
        t = self._open()
        if t.spec.has_primary_key:
            raise InvalidInput(f"{t.name} has a primary key {list(t.spec.primary_key)}: use upsert()")
        files, rows = t._write_data(data, partial_ok=False)
        return self._add(Change("append", files, rows))

    def delete(self, where: Any) -> Transaction:
        """Delete rows matching a filter, or the keys in a table of keys (see :meth:`Table.delete`)."""
        t = self._open()
        if where is None:
            raise InvalidInput(
                f"{t.name}: delete(None) names no rows; to delete every row say delete('TRUE') or truncate()"
            )
        if isinstance(where, (pa.Table, pa.RecordBatch, dict)) or type(where).__module__.startswith("pandas"):
            keys = t._key_rows(where, t.spec.primary_key)
            cols = [c for c in t.spec.identity_columns if c in keys.column_names]
            if len(cols) == len(t.spec.identity_columns):
                return self._add(self._markers(keys.select(cols)))
            return self._add_read(lambda base: self._keys_where_they_live(keys, base))
        if t.spec.has_primary_key:
            # Read even where the filter names keys: the rows that exist are what a DELETE counts (as
            # DuckDB's count does), and markers are written for those only.
            split_filter(t.spec, where)  # a bad filter fails now
            return self._add_read(lambda base: self._matching_rows(where, base))
        split_filter(t.spec, where)  # a bad filter fails now
        return self._add_read(lambda base: self._rewrite(where, base))

    def update(self, set: Mapping[str, str], where: Any = None) -> Transaction:
        """Set columns of matching rows to SQL expressions (see :meth:`Table.update <mere.Table.update>`)."""
        from mere.table.merge import check_update, rewrite_update_change, update_change

        t = self._open()
        check_update(t, set)
        where = "TRUE" if where is None else where
        split_filter(t.spec, where)  # a bad filter fails now
        if t.spec.has_primary_key:
            return self._add_read(lambda base: update_change(t, set, where, base), "an update")
        return self._add_read(lambda base: rewrite_update_change(t, set, where, base), "an update")

    def overwrite(
        self, data: Any, partition: Mapping[str, Any] | None = None, *, dynamic: bool = False
    ) -> Transaction:
        """Replace the whole table, or the partitions matching ``partition``, with ``data``; with
        ``dynamic=True`` only the partitions ``data`` has rows in (see :meth:`Table.overwrite
        <mere.Table.overwrite>`)."""
        t = self._open()
        _check_dynamic(t.name, dynamic)
        wanted = t._wanted_partition(partition)
        self._reads_first("overwrite")
        files, rows = t._write_data(
            data,
            partial_ok=False,
            check=lambda prepared: t._check_partition(wanted, [p.partition for p in prepared]),
        )
        return self._add(self._overwriting("overwrite", files, rows, wanted, dynamic=dynamic))

    def truncate(self) -> Transaction:
        """Remove every row, writing nothing."""
        self._open()
        self._reads_first("truncate")
        return self._add(self._overwriting("truncate", [], 0, None))

    def set_properties(self, updates: Mapping[str, str | int | None]) -> Transaction:
        """Set (None: remove) table properties in this transaction; checked now."""
        t = self._open()
        if not isinstance(updates, Mapping) or not updates:
            raise InvalidInput(
                f"{t.name}: set_properties takes a non-empty dict of key -> value (None removes)"
            )
        merged: dict[str, Any] = dict(t.spec.properties if self._properties is None else self._properties)
        for key, value in updates.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        self._properties = validate_properties(merged)
        return self

    # -- commit -------------------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Commit every change as one new version; on any failure nothing is committed and the files go."""
        t = self._open()
        self._state = "committing"
        try:
            if self._needed_checks() is not None and any(c.replaces for c in self.changes):
                raise InvalidInput(
                    f"{t.name}: overwrites and copy-on-write deletes cannot share a transaction with "
                    "upserts that need checks (NOT NULL partial rows, integer sums): commit them separately"
                )
            if self.idempotency_key is not None:
                prior = t.find_commit(self.idempotency_key)
                if prior is not None:
                    self._discard()
                    self._state = "committed"
                    return prior
            result = self.retries.run(self._attempt, _lost_race)
        except SchemaChanged:
            self._discard()
            self._state = "aborted"
            raise
        except CommitConflict as e:
            self._discard()
            self._state = "aborted"
            raise CommitConflict(
                f"{t.name}: {self._operation()} lost {self.retries.attempts} races to "
                f"concurrent commits; try again ({e})"
            ) from e
        except CommitStateUnknown:
            self._state = "aborted"
            raise  # the files may be referenced now: keep them
        except BaseException:
            self._discard()
            self._state = "aborted"
            raise
        self._state = "committed"
        if result.no_change:
            return result
        if self._properties is not None or self._schema is not None:
            t.refresh()
        elif not result.already_committed:
            # Every commit up to this one kept the handle's columns (checked above and by the validator).
            t._columns_seen = max(t._columns_seen, result.version)
        t._after_commit(result)
        return result

    def abort(self) -> None:
        """Discard the transaction: delete the files its changes wrote."""
        if self._state == "open":
            self._discard()
            self._state = "aborted"

    def _attempt(self) -> CommitResult:
        t = self.table
        checks = self._needed_checks()
        reads = any(c.redo is not None for c in self.changes)
        if checks is not None and not reads:
            self.read_version = t.version  # the checks read the table: at its newest version
        base = self.read_version
        removed: list[FileEntry] = []
        partitions: set[str] | None = set()
        for c in self.changes:
            gone = c.replaces(base) if c.replaces is not None else []
            removed += gone
            touched = (
                c.partitions(gone) if c.partitions is not None else sorted({f.partition for f in c.files})
            )
            partitions = None if partitions is None or touched is None else partitions | set(touched)
        add = [
            replace(f, order=i, id=None, added_version=None) if f.seq is None else replace(f, id=None)
            for i, f in enumerate(f for c in self.changes for f in c.files)
        ]
        validators = [c.validate for c in self.changes if c.validate is not None]
        extra: dict[str, Any] = {}
        for c in self.changes:
            for k, v in c.extra.items():
                extra[k] = extra.get(k, 0) + v if isinstance(v, int) and not isinstance(v, bool) else v
        if checks is not None:
            validators.append(checks.verify(t, base))
            extra |= checks.summary()
        _columns_current(t, base)
        validators.append(_no_column_change(t.name))
        spec = None
        if self._properties is not None or self._schema is not None:
            new_spec = t.spec if self._schema is None else self._schema[0]
            if self._properties is not None:
                new_spec = replace(new_spec, properties=self._properties)
                extra["properties"] = self._properties
                validators.append(_no_property_change(t.name))
            if self._schema is not None:
                extra["schema"] = self._schema[1]
            spec = new_spec.to_json()
        # With ``changes.log`` on, the commit also records the rows it replaces (read at ``base``; a
        # concurrent change to those splits is a conflict, and the retry reads them again).
        logs: list[FileEntry] = []
        logged = logs_changes(
            t, add, bool(removed) or any(c.remove_ids or c.restores is not None for c in self.changes)
        )
        if logged:
            validators.append(t._rows_unchanged(add))
            extra[LOG_SUMMARY_KEY] = True
        summary = {
            "read_version": base,
            "added_files": len(add),
            "removed_files": len(removed) + sum(len(c.remove_ids) for c in self.changes),
            "rows": sum(c.rows for c in self.changes),
            "added_bytes": sum(f.size_bytes for f in add),
            "partitions": None if partitions is None else sorted(partitions),
            # Splits whose rows the commit changes: where it adds files and where it removes them.
            "splits": sorted({split_label((f.partition, f.bucket)) for f in [*add, *removed]}),
            **extra,
        }
        if len(self.changes) > 1 or (self.changes and spec is not None):
            summary["operations"] = [c.operation for c in self.changes] + self._spec_operations()
        if not (add or summary["removed_files"] or spec is not None or self._restores() is not None):
            # Nothing to write, remove or change: no version (one rule for every write path).
            return CommitResult.unchanged(t._sql.snapshot(t.record.id, base), self._operation())

        def validate(changes: ConcurrentChanges) -> None:
            for v in validators:
                v(changes)

        try:
            if logged:
                try:
                    logs = write_change_log(t, base, add)
                except NoSuchVersion as e:  # expired meanwhile: read the rows it replaces at a newer one
                    raise CommitConflict(f"{t.name}: version {base} expired before this write read it") from e
            remove = [f.id for f in removed if f.id is not None] + [
                i for c in self.changes for i in c.remove_ids
            ]
            return t._sql.commit(
                t.record.id,
                base_version=base,
                operation=self._operation(),
                add=add + [replace(f, order=len(add) + i) for i, f in enumerate(logs)],
                remove=remove,
                summary=summary,
                validate=validate,
                idempotency_key=self.idempotency_key,
                spec=spec,
                restores=self._restores(),
            )
        except CommitConflict:
            t._discard(logs)
            # Rebase onto the version that beat us: changes that read rows are evaluated again there.
            self.read_version = t.version
            if reads:
                self.changes = [self._redo(c) for c in self.changes]
            raise
        except CommitStateUnknown:
            raise  # the logs may be referenced now: keep them
        except BaseException:
            t._discard(logs)
            raise

    # -- helpers ------------------------------------------------------------------------------------

    def _open(self) -> Table:
        if self._state != "open":
            raise InvalidInput(f"{self.table.name}: this transaction is {self._state}; start a new one")
        return self.table

    def _needed_checks(self) -> WriteChecks | None:
        """The checks, when an upsert of this transaction needs them (deletes alone never do)."""
        if self.checks is None or not self.checks.needed:
            return None
        return self.checks if any(c.operation == "upsert" for c in self.changes) else None

    def _checks(self) -> WriteChecks:
        if self.checks is None:
            self.checks = WriteChecks(self.table.spec, self.table.name)
        return self.checks

    def _spec_operations(self) -> list[str]:
        return (["set-properties"] if self._properties is not None else []) + (
            ["evolve-schema"] if self._schema is not None else []
        )

    def _restores(self) -> int | None:
        return next((c.restores for c in self.changes if c.restores is not None), None)

    def _operation(self) -> str:
        # A write that adds columns (evolve=True, mergeSchema) is named by the write.
        ops = [c.operation for c in self.changes] + (
            ["set-properties"] if self._properties is not None else []
        )
        if not ops:
            return "evolve-schema" if self._schema is not None else "transaction"
        if ops and ops[0] == "rollback":
            return "rollback"  # with the properties of the version it restores
        return ops[0] if len(ops) == 1 else "transaction"

    def _add(self, change: Change) -> Transaction:
        self.changes.append(change)
        return self

    def _add_read(
        self, build: Callable[[int], Change], what: str = "a delete that reads the table"
    ) -> Transaction:
        self._reads_first(what)
        change = build(self.read_version)
        change.redo = build
        return self._add(change)

    def _reads_first(self, what: str) -> None:
        if any(c.operation in ("upsert", "append") for c in self.changes):
            raise InvalidInput(
                f"{self.table.name}: {what} must come before the writes of a transaction (it sees "
                "the table as of the transaction's start, not the transaction's own writes)"
            )

    def _redo(self, change: Change) -> Change:
        if change.redo is None:
            return change
        if self.checks is not None:
            self.checks.forget(change)
        if change.restores is None:
            self.table._discard(change.files)
        change.files = []
        fresh = change.redo(self.read_version)
        fresh.redo = change.redo
        return fresh

    def _discard(self, changes: Sequence[Change] | None = None) -> None:
        for c in self.changes if changes is None else changes:
            if c.restores is None:  # a rollback's files belong to the version it restores
                self.table._discard(c.files)

    def _markers(self, keys: pa.Table, observe: bool = True) -> Change:
        """Delete markers for these keys."""
        return marker_change(self.table, keys, self._checks() if observe else None)

    def _reading(self, files: list[FileEntry]) -> Validate:
        return self.table._rows_unchanged(files)

    def _keys_where_they_live(self, keys: pa.Table, base: int) -> Change:
        """Keys given without their partition: find where each lives at ``base``."""
        t = self.table
        pk = list(t.spec.primary_key)
        pk_spec = TableSpec(
            pa.schema([t.spec.schema.field(c) for c in pk]), t.spec.primary_key, (), t.spec.buckets
        )
        conformed, _ = conform(keys.select(pk), pk_spec, partial_ok=True, identifier=t.name)
        where: Any = None
        if len(pk) == 1 and conformed.num_rows <= 10_000:
            where = E.In(pk[0], tuple(pc.unique(conformed.column(pk[0])).to_pylist()))  # prunes buckets
        current = t.scan(columns=list(t.spec.identity_columns), filter=where, version=base).to_arrow()
        found = current.join(conformed.select(pk).group_by(pk).aggregate([]), keys=pk, join_type="left semi")
        return self._read_markers(found)

    def _matching_rows(self, where: Any, base: int) -> Change:
        keys = self.table.scan(
            columns=list(self.table.spec.identity_columns), filter=where, version=base
        ).to_arrow()
        return self._read_markers(keys)

    def _read_markers(self, keys: pa.Table) -> Change:
        # The keys were read at the transaction's version: the checks see their deletes before every write
        # of the transaction (reading changes come first, and deletes commute with one another).
        change = marker_change(self.table, keys, self._checks(), first=True, read=True)
        change.validate = self._reading(change.files)
        return change

    def _rewrite(self, where: Any, base: int) -> Change:
        """Tables without a key: rewrite the files holding matching rows (copy on write)."""

        def drop(data: pa.Table, hit: pa.Array) -> pa.Table:
            return data.filter(pc.invert(hit))

        return rewrite_files(self.table, where, base, drop, "delete", DELETED_ROWS)

    def _overwriting(
        self,
        operation: str,
        files: list[FileEntry],
        rows: int,
        wanted: dict[str, str | None] | None,
        *,
        dynamic: bool = False,
    ) -> Change:
        """An overwrite's change: it replaces the files of the whole table, of the partitions matching
        ``wanted``, or (``dynamic`` on a partitioned table) of exactly the partitions ``files`` hold."""
        t = self.table
        # Dynamic on a table without partition columns replaces the whole table, as in Spark and Delta.
        present = {_partition_values(f.partition) for f in files} if dynamic and t.spec.partition_by else None

        def hit(partition: str) -> bool:
            if present is not None and _partition_values(partition) not in present:
                return False
            return wanted is None or _partition_matches(partition, wanted)

        whole = wanted is None and present is None

        def replaces(base: int) -> list[FileEntry]:
            return [f for f in t.files_at(base) if hit(f.partition)]

        def touched(removed: list[FileEntry]) -> list[str] | None:
            return None if whole else sorted({f.partition for f in removed} | {f.partition for f in files})

        def validate(changes: ConcurrentChanges) -> None:
            # A concurrent write to the partitions being replaced: replace what is there now instead.
            other = changes.partitions_touched()
            if whole or other is None or any(hit(p) for p in other):
                raise CommitConflict(f"{t.name}: a concurrent commit wrote to the overwritten data")

        extra: dict[str, Any] = {}
        if operation == "overwrite":
            extra["overwrite"] = wanted
            if present is not None:
                extra["overwrite_mode"] = "dynamic"
        return Change(
            operation,
            files,
            rows,
            extra,
            replaces=replaces,
            partitions=touched,
            validate=validate,
        )


def rewrite_files(
    t: Table,
    where: Any,
    base: int,
    rewrite: Callable[[pa.Table, pa.Array], pa.Table],
    operation: str,
    count_key: str,
) -> Change:
    """Copy on write for tables without a key: each file at ``base`` holding rows that match ``where`` is
    replaced by ``rewrite(rows, matches)`` (no file if that is empty); files without a match stay."""
    parts = split_filter(t.spec, where)
    hit_expr = pc.coalesce(E.to_pyarrow(parts.bound, t.spec.schema), pa.scalar(False))
    add: list[FileEntry] = []
    gone: list[FileEntry] = []
    matched = 0
    try:
        for f in t.files_at(base):
            values = json.loads(f.partition)
            if t.spec.partition_by and E.evaluate_constant(parts.bound, _typed(t.spec, values)) is False:
                continue
            md = t.storage.metadata(f.path)
            data = whole_file_as_table(
                t.storage.read_row_groups(f.path, range(md.num_row_groups), None), t.spec, md
            )
            try:
                mask = _evaluate_mask(data, hit_expr)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InvalidInput(
                    f"{t.name}: evaluating the filter failed: {str(exc).splitlines()[0]}"
                ) from exc
            count = int(pc.sum(mask.cast(pa.int64())).as_py() or 0)
            if not count:
                continue
            new = rewrite(data, mask)
            matched += count
            gone.append(f)
            if new.num_rows:
                add += t._write_files([PreparedFile(values, f.bucket, new, "data")], first_order=len(add))
    except BaseException:
        t._discard(add)
        raise
    return Change(
        operation,
        add,
        matched,
        {count_key: matched},
        replaces=lambda _base: gone,
        partitions=lambda removed: sorted({f.partition for f in removed}),
    )


def _evaluate_mask(data: pa.Table, predicate: pc.Expression) -> pa.Array:
    from mere.lang.lower import evaluate

    return evaluate(data, {"hit": predicate}).column("hit").combine_chunks()


def deletion_summary(markers: int, existed: int | None) -> dict[str, int]:
    """A delete's summary entries: the markers written, and the rows that existed and were deleted where
    the delete read them (a blind delete of given keys does not know how many existed)."""
    if existed is None:
        return {DELETE_MARKERS: markers, BLIND_DELETE_MARKERS: markers}
    return {DELETE_MARKERS: markers, DELETED_ROWS: existed}


def marker_change(
    t: Table, keys: pa.Table, checks: WriteChecks | None = None, first: bool = False, read: bool = False
) -> Change:
    """Delete markers for these keys, written; ``checks`` take note of them (later upserts start afresh).
    ``read``: the keys are rows the delete read at its version (each one existed)."""
    keys, _ = conform(keys, _key_only_spec(t.spec), partial_ok=True, identifier=t.name)
    ops = np.full(keys.num_rows, OP_DELETE, dtype=np.int8)
    prepared = prepare(t.spec, keys, ops)
    files = t._write_files(prepared)
    rows = sum(f.row_count for f in files)
    change = Change("delete", files, rows, deletion_summary(rows, rows if read else None))
    if checks is not None:
        checks.observe(prepared, tag=change, first=first)
    return change


def _lost_race(error: BaseException) -> bool:
    return isinstance(error, (CommitConflict, CommitFailed)) and not isinstance(error, SchemaChanged)


def _columns_current(t: Table, base: int) -> None:
    """The handle's columns are the table's: no commit since the handle loaded its spec changed them.

    Versions up to ``t._columns_seen`` were checked already (a commit of this handle checked them), and
    those after ``base`` are the commit's validator's: a handle writing on top of its own last commit
    asks the catalog nothing more."""
    from mere.table.evolve import same_columns

    if base <= t._columns_seen:
        return
    for version, text in t._sql.specs_after(t.record.id, t._columns_seen):
        if not same_columns(TableSpec.from_json(text, t.name), t.spec):
            raise SchemaChanged(
                f"{t.name}: the table's columns changed in version {version}, after this handle read "
                "them; refresh() the table and write again"
            )


def _no_column_change(name: str) -> Validate:
    def validate(changes: ConcurrentChanges) -> None:
        for c in changes.commits:
            if "schema" in c.summary:
                raise SchemaChanged(
                    f"{name}: the table's columns changed concurrently in version {c.version}; "
                    "refresh() the table and write again"
                )

    return validate


def _no_property_change(name: str) -> Validate:
    def validate(changes: ConcurrentChanges) -> None:
        for c in changes.commits:
            if "properties" in c.summary:
                raise CommitConflict(f"{name}: properties changed concurrently in version {c.version}")

    return validate


def _key_only_spec(spec: TableSpec) -> TableSpec:
    fields = [spec.schema.field(c) for c in spec.schema.names if c in spec.identity_columns]
    return TableSpec(pa.schema(fields), spec.primary_key, spec.partition_by, spec.buckets, {}, None, {})


def _typed(spec: TableSpec, values: Mapping[str, str | None]) -> dict[str, Any]:
    from mere.partitions import typed_partition

    return typed_partition(spec, values)


def _partition_values(partition: str) -> tuple[tuple[str, str | None], ...]:
    """A partition's values in a form that compares equal whatever the JSON's spelling."""
    return tuple(sorted(json.loads(partition).items()))


def _check_dynamic(table: str, dynamic: Any) -> None:
    if not isinstance(dynamic, bool):
        raise InvalidInput(f"{table}: dynamic must be True or False, got {dynamic!r}")


def _partition_matches(partition: str, wanted: Mapping[str, str | None]) -> bool:
    values = json.loads(partition)
    return all(values.get(c) == v for c, v in wanted.items())
