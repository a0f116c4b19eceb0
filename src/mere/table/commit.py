"""The one commit path: changes as plain data, one commit message for every distributed path, one
renumbering of files, and the retry loop.

Every write is a :class:`Change`: the files it wrote, and, as data, what it removes (:class:`Removal`:
nothing, the files of some partitions, given files, or given catalog ids) and which conflict rule of
:mod:`mere.table.conflicts` it follows. A change that read rows (a delete by predicate, MERGE, UPDATE)
also keeps its :class:`Recipe`: the operation's own description, which the committing side evaluates again
at a newer version when a race was lost. Nothing in a change closes over the table.

A :class:`Commit` collects changes (and property or column changes) for one new version; :meth:`Commit.run`
checks and commits them in one catalog transaction under :data:`mere.retry.COMMIT_RETRIES`. Work done
elsewhere (engine tasks) travels as :class:`StagedChange`, the one picklable commit message: staged
writes, the shares of a distributed MERGE and compaction results alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.errors import (
    CatalogError,
    CommitConflict,
    CommitFailed,
    CommitStateUnknown,
    InvalidInput,
    MereError,
    NoSuchVersion,
    OutlivedCleanup,
    SchemaChanged,
    StorageError,
)
from mere.metadata import (
    BLIND_DELETE_MARKERS,
    CLOCK_MARGIN_MICROS,
    DELETE_MARKERS,
    DELETED_ROWS,
    MOVED_KEYS,
    STALE_ROWS,
    CommitRequest,
    CommitResult,
    FileEntry,
    now_micros,
)
from mere.read.reader import filter_rows
from mere.retry import COMMIT_RETRIES, RetryPolicy
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec, storable_text, validate_properties
from mere.table.conflicts import (
    BucketsUnchanged,
    ColumnsUnchanged,
    PartitionSet,
    PropertiesUnchanged,
    RowsUnchanged,
    Rule,
    columns_current,
    lost_race,
    validator,
)
from mere.table.context import SchemaChange, TableContext, file_splits, split_label
from mere.table.images import LOG_SUMMARY_KEY, logs_changes, write_change_log
from mere.table.layout_view import WithLayout
from mere.table.revalidate import ReadRows, still_holds
from mere.table.stored_keys import resolve
from mere.table.versions import current
from mere.table.versions import resolve as resolve_version
from mere.table.write_checks import WriteChecks
from mere.write.writer import conform, marker_spec, prepare

log = logging.getLogger("mere.table.table")

ONE_ATTEMPT = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)


@dataclass
class PreparedCommit:
    """One table's commit prepared at its base version (:meth:`Commit.prepare`): the catalog request,
    and the change logs written for it (deleted if it does not land)."""

    request: CommitRequest
    logs: list[FileEntry]

    def arguments(self) -> dict[str, Any]:
        """The request as :meth:`MetadataStore.commit <mere.table.context.MetadataStore.commit>`'s
        keyword arguments."""
        r = self.request
        return {
            "base_version": r.base_version,
            "operation": r.operation,
            "add": r.add,
            "remove": r.remove,
            "summary": r.summary,
            "validate": r.validate,
            "idempotency_key": r.idempotency_key,
            "spec": r.spec,
            "restores": r.restores,
            "written_since": r.written_since,
            "written_since_exact": r.written_since_exact,
        }


# -- what a change removes, as data -------------------------------------------------------------------


class Removal(Protocol):
    """What a change removes from the version it commits on, and the partitions it then touches."""

    def files(self, ctx: TableContext, base: int) -> list[FileEntry]:
        """The live files at ``base`` it removes."""

    def ids(self) -> tuple[int, ...]:
        """Catalog ids it removes whatever the version (counted apart from :meth:`files`)."""

    def touched(self, removed: Sequence[FileEntry], added: Sequence[FileEntry]) -> list[str] | None:
        """The partitions the change touches (None: the whole table)."""


@dataclass(frozen=True)
class Keep:
    """Removes nothing: the change touches the partitions of the files it adds."""

    def files(self, ctx: TableContext, base: int) -> list[FileEntry]:
        """None."""
        return []

    def ids(self) -> tuple[int, ...]:
        """None."""
        return ()

    def touched(self, removed: Sequence[FileEntry], added: Sequence[FileEntry]) -> list[str] | None:
        """The partitions of the added files."""
        return sorted({f.partition for f in added})


KEEP = Keep()


@dataclass(frozen=True)
class ReplacePartitions:
    """An overwrite's removal: every live file of the target partitions at the version it commits on."""

    target: PartitionSet

    def files(self, ctx: TableContext, base: int) -> list[FileEntry]:
        """The live files of the target partitions at ``base``."""
        return [f for f in ctx.handle.files_at(base) if self.target.hit(f.partition)]

    def ids(self) -> tuple[int, ...]:
        """None."""
        return ()

    def touched(self, removed: Sequence[FileEntry], added: Sequence[FileEntry]) -> list[str] | None:
        """The whole table, or the partitions removed from and added to."""
        return None if self.target.whole else sorted({f.partition for f in [*removed, *added]})


@dataclass(frozen=True)
class RemoveFiles:
    """Given files (rewritten by copy on write, or replaced by a rollback's: ``whole_table``)."""

    removed: tuple[FileEntry, ...]
    whole_table: bool = False

    def files(self, ctx: TableContext, base: int) -> list[FileEntry]:
        """The given files."""
        return list(self.removed)

    def ids(self) -> tuple[int, ...]:
        """None."""
        return ()

    def touched(self, removed: Sequence[FileEntry], added: Sequence[FileEntry]) -> list[str] | None:
        """The partitions of the removed files (None for a rollback: the whole table)."""
        return None if self.whole_table else sorted({f.partition for f in removed})


@dataclass(frozen=True)
class RemoveIds:
    """Catalog ids removed whatever the version (compaction inputs), in the given partitions."""

    file_ids: tuple[int, ...]
    partitions: tuple[str, ...]

    def files(self, ctx: TableContext, base: int) -> list[FileEntry]:
        """None (the ids are removed as they are)."""
        return []

    def ids(self) -> tuple[int, ...]:
        """The ids."""
        return self.file_ids

    def touched(self, removed: Sequence[FileEntry], added: Sequence[FileEntry]) -> list[str] | None:
        """The given partitions (also those folded to nothing)."""
        return list(self.partitions)


# -- changes -------------------------------------------------------------------------------------------


class Recipe(Protocol):
    """A change that read rows, as the operation's own description: :meth:`change` evaluates it at a
    version (again, after a lost race). ``checks`` take note of the rows it deletes."""

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """The change at version ``base`` (its files written)."""


@dataclass
class Change:
    """One operation's share of a commit, as data: the files it wrote, what it removes and which conflict
    rule it follows beyond blind rebasing (none: it rebases onto whatever landed)."""

    operation: str
    files: list[FileEntry]
    rows: int
    summary: dict[str, Any] = field(default_factory=dict)  # summary entries (deleted_keys, overwrite, ...)
    removes: Removal = KEEP
    rule: Rule | None = None
    recipe: Recipe | None = None  # changes that read rows: evaluated again at a newer version
    read_rows: ReadRows | None = None  # what a reading change read: may spare the evaluation again
    # A rollback: ``files`` are files of this older version, added again. They belong to that version, so
    # a failed commit never deletes them, and the commit checks the version was not expired meanwhile.
    restores: int | None = None


@dataclass
class StagedChange:
    """Files written for one change but not committed: the one commit message of every distributed path.

    Picklable, so that workers stage and a driver commits: staged writes (``upsert``, ``append``,
    ``delete``, ``overwrite``: :meth:`mere.Table.stage`), the shares of a distributed MERGE (``merge``:
    evaluated at ``read_version``, checked by ``rule``) and compaction results (``compact``: removing the
    inputs). Nothing staged is visible until :meth:`mere.Table.commit`; :meth:`mere.Table.abort` deletes the
    files.
    """

    table: str
    operation: str
    files: list[FileEntry] = field(default_factory=list)
    rows: int = 0
    read_version: int | None = None  # the version it read: it commits onto that version or conflicts
    rule: Rule | None = None
    removes: Removal = KEEP
    counts: Mapping[str, int] = field(default_factory=dict)  # what the operation did (a MERGE's counts)
    table_uuid: str | None = None
    written_since: int | None = None  # when its files began to be written (microseconds; see Commit)
    # An overwrite's partitions (JSON) its input rows name: a dynamic overwrite replaces them, also one
    # no file was written in (table-wide keys: each of its rows moved to another partition in the batch).
    partitions: tuple[str, ...] = ()


def renumber(files: Iterable[FileEntry], *, keep_seq: bool = False) -> list[FileEntry]:
    """Files of one commit in the order given, as new catalog rows: ``order`` numbers them (for equal keys
    a later file wins), catalog ids and versions are cleared, and so are sequence numbers unless
    ``keep_seq`` (compaction output and a rollback's files keep theirs; staged files get the commit's)."""
    return [
        replace(f, order=i, id=None, added_version=None, seq=f.seq if keep_seq else None)
        for i, f in enumerate(files)
    ]


def applied(properties: Mapping[str, str], updates: Mapping[str, Any]) -> dict[str, Any]:
    """``properties`` with ``updates`` applied (a None value removes the key)."""
    out: dict[str, Any] = dict(properties)
    for key, value in updates.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def deletion_summary(markers: int, existed: int | None) -> dict[str, int]:
    """A delete's summary entries: the markers written, and the rows that existed and were deleted where
    the delete read them (a blind delete of given keys does not know how many existed)."""
    if existed is None:
        return {DELETE_MARKERS: markers, BLIND_DELETE_MARKERS: markers}
    return {DELETE_MARKERS: markers, DELETED_ROWS: existed}


IDEMPOTENCY_KEY_CHARS = 255  # the catalog's column (PostgreSQL refuses longer values)


def check_idempotency_key(table: str, key: Any) -> None:
    """Check an ``idempotency_key`` argument: None (no key) or a non-empty string.

    Args:
        table: the table's name, for the message.
        key: the argument as given.

    Raises:
        InvalidInput: anything else (nothing has been read or written yet).
    """
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidInput(f"{table}: idempotency_key must be a non-empty string, got {key!r}")
    if key is not None and not storable_text(key):
        raise InvalidInput(
            f"{table}: idempotency_key must be text without NUL that UTF-8 can encode (no lone surrogate), "
            f"got {key!r}"
        )
    if key is not None and len(key) > IDEMPOTENCY_KEY_CHARS:
        raise InvalidInput(
            f"{table}: idempotency_key is {len(key)} characters, over {IDEMPOTENCY_KEY_CHARS} (the catalog's "
            "column); hash a longer name"
        )


def _sees_earlier(ctx: TableContext, earlier: Sequence[Change], change: Change, recipe: Recipe) -> bool:
    """Whether a change evaluated at the commit's start could differ had it seen the earlier changes:
    it writes a row of a key they wrote or deleted (a lost update, a deleted row back), deletes a key
    they wrote a row of (a delete's given keys), has a source key they wrote or deleted (a MERGE: matched
    at the start, maybe not after), or its filter matches a row they wrote. A delete of a key they deleted
    changes nothing; rows they removed with whole files are gone whatever it does. Without a primary key, any earlier change (two
    rewrites of one file would both land)."""
    spec, storage = ctx.spec, ctx.storage
    pk = list(spec.primary_key)
    earlier_files = [f for c in earlier for f in c.files]
    if not pk:
        return bool(earlier_files) or any(c.removes is not KEEP for c in earlier)
    if any(c.restores is not None for c in earlier):
        return True
    if not earlier_files:
        return False

    def read(files: Sequence[FileEntry], names: Sequence[str]) -> tuple[pa.Table, pa.Table]:
        """The rows of ``files`` (``names`` and the operation), split into puts and delete markers."""
        parts = []
        for f in files:
            md = storage.metadata(f.path, f.size_bytes or None)
            have = md.schema.to_arrow_schema().names
            picked = [n for n in (*names, OP_COLUMN) if n in have]
            rows = storage.read_row_groups(f.path, range(md.num_row_groups), picked, f.size_bytes or None)
            if OP_COLUMN not in rows.column_names:
                rows = rows.append_column(
                    OP_COLUMN,
                    pa.array(np.full(rows.num_rows, OP_DELETE if f.content == "delete" else 0, np.int8)),
                )
            types = [spec.schema.field(n).type if n != OP_COLUMN else pa.int8() for n in rows.column_names]
            parts.append(rows.cast(pa.schema(list(zip(rows.column_names, types, strict=True)))))
        if not parts:
            return pa.table({}), pa.table({})
        rows = pa.concat_tables(parts, promote_options="permissive")
        deleting = pc.equal(rows.column(OP_COLUMN), OP_DELETE)
        return rows.filter(pc.invert(deleting)), rows.filter(deleting)

    def meets(keys: pa.Table | None, others: pa.Table) -> bool:
        if (
            keys is None
            or keys.num_rows == 0
            or others.num_rows == 0
            or not set(pk) <= set(keys.column_names)
        ):
            return False
        keys = keys.select(pk).cast(others.select(pk).schema)
        found = others.select(pk).join(keys.group_by(pk).aggregate([]), keys=pk, join_type="left semi")
        return bool(found.num_rows > 0)

    where = getattr(recipe, "where", None)
    wanted = list(spec.schema.names) if where is not None else pk
    puts, marks = read(earlier_files, wanted)
    touched = pa.concat_tables([puts.select(pk), marks.select(pk)])
    new_puts, new_marks = read(change.files, pk)
    if meets(new_puts, touched) or meets(new_marks, puts):
        return True
    merge = getattr(recipe, "merge", None)
    if merge is not None and any(c.kind == "not_matched_by_source" for c in merge.clauses):
        return True  # it reaches rows beyond its source's keys
    # A MERGE's source key the earlier changes wrote or deleted: matched at the start, maybe not after.
    if meets(getattr(recipe, "source_keys", None), touched) or meets(getattr(recipe, "keys", None), puts):
        return True
    if where is None or puts.num_rows == 0:
        return False
    rows = puts.drop_columns([OP_COLUMN])
    return bool(filter_rows(rows, E.bind(E.to_expr(where), spec.schema)).num_rows > 0)


def committed_with(ctx: TableContext, key: str) -> CommitResult | None:
    """The commit made with idempotency ``key`` (``already_committed=True``), or None if there is none."""
    prior = ctx.store.find_idempotent(ctx.table_id, key)
    return None if prior is None else CommitResult.of(prior, already_committed=True)


def discard_unreferenced(ctx: TableContext, files: Iterable[FileEntry], settled: bool = False) -> None:
    """Delete those of ``files`` no version of the table references (any version, expired or restored by a
    rollback). When the catalog cannot tell, none goes: ``cleanup`` takes them once no version does.

    Every path that gives up a write's files after a replay or an error uses it: the same staged files may
    be in a commit that landed (a driver retrying the commit of the same messages after an unknown outcome,
    a commit whose connection died as it landed). ``settled``: the commit may still be landing (see
    ``SqlCatalog.referenced_paths``)."""
    files = list(files)
    if not files:
        return
    try:
        referenced = ctx.store.referenced_paths(ctx.table_id, [f.path for f in files], settled)
    except CatalogError as e:
        log.warning(
            "%s: %d file(s) kept for cleanup (the catalog could not tell if a version uses them: %s)",
            ctx.name,
            len(files),
            e,
        )
        return
    ctx.files.discard([f for f in files if f.path not in referenced])


def discard(ctx: TableContext, changes: Iterable[Change]) -> None:
    """Delete the files of changes that will not commit (a rollback's belong to its version: kept)."""
    for c in changes:
        if c.restores is None:
            ctx.files.discard(c.files)


# -- the commit --------------------------------------------------------------------------------------


class Commit:
    """Changes to one table that commit together as one version, or not at all (see
    :class:`~mere.table.transaction.Transaction`, its user-facing form).

    Changes see the table as of ``read_version`` (default: the newest at the start). ``run`` commits
    them with the retry loop: a lost race rebases onto the version that won, evaluating the changes that
    read rows again there; ``retries`` bounds the attempts.
    """

    def __init__(
        self,
        ctx: TableContext,
        *,
        idempotency_key: str | None = None,
        retries: RetryPolicy = COMMIT_RETRIES,
        read_version: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.idempotency_key = idempotency_key
        self.retries = retries
        self.read_version = current(ctx) if read_version is None else read_version
        # Before any of its files is written (a cleanup fenced later than this refuses the commit).
        self.written_since = now_micros()
        self.staged_paths: list[str] = []  # files staged elsewhere: checked to exist just before landing
        self.changes: list[Change] = []
        self.checks = WriteChecks(ctx.spec, ctx.name)
        self.properties: dict[str, str] | None = None  # the new properties, computed on the base of each try
        self.property_updates: dict[str, Any] | None = None  # what set_properties asked: key -> value or None
        # A column change: the new spec and its steps (a handle adding columns carries one).
        self.schema: SchemaChange | None = ctx.schema_change
        self.state = "open"  # open, committing, committed, aborted
        # Markers the lookup of stored keys wrote for the current try (table-wide keys), and its counts.
        self.resolved: list[FileEntry] = []
        # The catalog was asked to land a try: from then on a failure may follow a commit that landed.
        self.catalog_asked = False

    # -- collecting ---------------------------------------------------------------------------------

    def require_open(self) -> None:
        """Refuse changes to a commit that ran."""
        if self.state != "open":
            raise InvalidInput(f"{self.ctx.name}: this transaction is {self.state}; start a new one")

    def add(self, change: Change) -> None:
        """Add a change (its files written)."""
        self.changes.append(change)

    def files_from(self, staged: Iterable[StagedChange]) -> None:
        """The commit takes files staged elsewhere: it is as old as the oldest of them (for cleanup fences)."""
        staged = list(staged)
        times = [s.written_since for s in staged if s.written_since is not None]
        self.written_since = min([self.written_since, *times])
        self.staged_paths += [f.path for s in staged for f in s.files]

    def check_staged(self) -> None:
        """Refuse to land staged files that no longer exist (checked just before the commit: a transaction
        may hold them a while); the table would be unreadable without them."""
        gone = self.ctx.storage.missing(self.staged_paths) if self.staged_paths else []
        if gone:
            raise CommitFailed(
                f"{self.ctx.name}: {len(gone)} staged file(s) no longer exist (e.g. {gone[0]}): an "
                "abort_write of their write, or a cleanup with a shorter older_than than this write took, "
                "deleted them; write them again"
            )

    def add_read(self, recipe: Recipe, what: str = "a delete that reads the table") -> None:
        """Add a change that reads rows: evaluated now at the read version, and again after a lost race.

        It sees the table as of the start, not the commit's earlier changes: where those touched a key it
        reads or writes (or wrote a row its filter matches), it is refused (an update after a delete of
        its row would bring the row back; two updates of a row would count once)."""
        self.reads_first(what)
        columns_current(self.ctx, self.read_version)  # rows read in other columns than it writes: refused
        earlier = list(self.changes)
        change = recipe.change(self.ctx, self.read_version, self.checks)
        deletes_only = what.startswith("a delete") and all(c.operation == "delete" for c in earlier)
        if earlier and not (deletes_only and self.ctx.spec.has_primary_key):
            try:
                seen = _sees_earlier(self.ctx, earlier, change, recipe)
            except BaseException:
                discard(self.ctx, [change])
                raise
            if seen:
                discard(self.ctx, [change])
                raise InvalidInput(
                    f"{self.ctx.name}: {what} reads rows this transaction's earlier "
                    f"{', '.join(sorted({c.operation for c in earlier}))} changed (it sees the table as of the "
                    "transaction's start, not its own changes): commit them separately, or do it first"
                )
        change.recipe = recipe
        self.add(change)

    def reads_first(self, what: str) -> None:
        """Changes that read rows see the table as of the start: they must come before the writes."""
        if any(c.operation in ("upsert", "append") for c in self.changes):
            raise InvalidInput(
                f"{self.ctx.name}: {what} must come before the writes of a transaction (it sees "
                "the table as of the transaction's start, not the transaction's own writes)"
            )

    def set_properties(self, updates: Mapping[str, str | int | None]) -> None:
        """Set (None: remove) table properties in this commit; checked now."""
        if not isinstance(updates, Mapping) or not updates:
            raise InvalidInput(
                f"{self.ctx.name}: set_properties takes a non-empty dict of key -> value (None removes)"
            )
        asked = {**(self.property_updates or {}), **updates}
        self.properties = validate_properties(applied(self.ctx.spec.properties, asked))  # checked now
        self.property_updates = asked

    def change_columns(self, change: SchemaChange) -> None:
        """Commit a column change too; the changes added after it are written with the new columns."""
        self.require_open()
        if self.changes or self.schema is not None:
            raise InvalidInput(
                f"{self.ctx.name}: a column change must come first in a transaction, and only once"
            )
        # The changes after it read and write the new columns (through a handle that reads in them).
        view = WithLayout(self.ctx.handle, change.spec, lambda: self.ctx)
        self.ctx = replace(self.ctx, spec=change.spec, schema_change=change, handle=view)
        self.schema = change
        self.checks = WriteChecks(change.spec, self.ctx.name)

    def restore_properties(
        self, properties: Mapping[str, str], current: Mapping[str, str] | None = None
    ) -> None:
        """Make the table's properties exactly ``properties`` in this commit (a rollback's); ``current``:
        the table's properties now (default: the handle's, which another handle may have changed)."""
        current_keys = self.ctx.spec.properties if current is None else current
        self.property_updates = {
            **dict.fromkeys(k for k in current_keys if k not in properties),
            **properties,
        }
        self.properties = dict(properties)

    def operations(self) -> list[str]:
        """The operations of the changes, then of the property and column changes."""
        return [c.operation for c in self.changes] + self._spec_operations()

    # -- running ------------------------------------------------------------------------------------

    def run(self) -> CommitResult:
        """Commit every change as one new version; on any failure nothing is committed and the files go."""
        self.require_open()
        ctx = self.ctx
        self.state = "committing"
        try:
            self.check_mix()
            self.check_staged()
            if self.idempotency_key is not None:
                prior = committed_with(ctx, self.idempotency_key)
                if prior is not None:
                    return self.replayed(prior)
            result = self.retries.run(self._attempt, lost_race)
            if result.already_committed:  # a commit with this key landed while this one was made
                return self.replayed(result)
        except SchemaChanged:
            discard(ctx, self.changes)
            self.drop_resolved()
            self.state = "aborted"
            raise
        except CommitConflict as e:
            discard(ctx, self.changes)
            self.drop_resolved()
            self.state = "aborted"
            raise CommitConflict(
                f"{ctx.name}: {self.operation()} lost {self.retries.attempts} races to "
                f"concurrent commits; try again ({e})"
            ) from e
        except CommitStateUnknown:
            self.state = "aborted"
            raise  # the files may be referenced now: keep them
        except BaseException as e:
            self.give_up(e)
            raise
        self.finished(result)
        return result

    def give_up(self, error: BaseException, new_table: bool = False) -> None:
        """The commit failed with ``error``: delete its files, unless a version may hold them.

        Before the catalog was asked to land it, every file goes. After, only those no version references:
        an error can follow a commit that landed (an interrupt, such as the ``KeyboardInterrupt`` Ray
        cancels tasks with, just after the catalog's COMMIT), and after an interrupt the lookup first waits
        for a commit the catalog may still be landing. A table the commit creates (``new_table``) has no
        id to look under: its files stay, as do files the catalog cannot tell about
        (:meth:`mere.Table.cleanup` takes what no version references).
        """
        self.state = "aborted"
        if not self.catalog_asked:
            discard(self.ctx, self.changes)
            self.drop_resolved()
        elif not new_table:
            interrupted = not isinstance(error, Exception)
            discard_unreferenced(
                self.ctx,
                self.written_files(),
                settled=interrupted,
            )
            self.resolved = []

    def written_files(self) -> list[FileEntry]:
        """The files this commit wrote (a rollback's belong to its version), markers of stored keys included."""
        return [*(f for c in self.changes if c.restores is None for f in c.files), *self.resolved]

    def check_mix(self) -> None:
        """Refuse overwrites and copy-on-write deletes beside upserts that need checks."""
        if self._needed_checks() is not None and any(
            isinstance(c.removes, (ReplacePartitions, RemoveFiles)) for c in self.changes
        ):
            raise InvalidInput(
                f"{self.ctx.name}: overwrites and copy-on-write deletes cannot share a transaction with "
                "upserts that need checks (NOT NULL partial rows, integer sums): commit them separately"
            )

    def finished(self, result: CommitResult) -> None:
        """The commit landed as ``result``: tell the handle (reload, automatic maintenance)."""
        self.state = "committed"
        if not result.no_change and self.ctx.after_commit is not None:
            self.ctx.after_commit(result, self.properties is not None or self.schema is not None)

    def replayed(self, prior: CommitResult) -> CommitResult:
        """End the commit as a replay of ``prior``, the commit its idempotency key names: the files its
        changes wrote are deleted (but any a version references: see :func:`discard_unreferenced`) and
        ``prior`` is returned."""
        discard_unreferenced(self.ctx, self.written_files())
        self.state = "committed"
        return prior

    def abort(self) -> None:
        """Discard the commit: delete the files its changes wrote."""
        if self.state == "open":
            discard(self.ctx, self.changes)
            self.drop_resolved()
            self.state = "aborted"

    def operation(self) -> str:
        """The commit's operation: its one change's (a write that adds columns is named by the write)."""
        ops = [c.operation for c in self.changes] + (
            ["set-properties"] if self.properties is not None else []
        )
        if not ops:
            return "evolve-schema" if self.schema is not None else "transaction"
        if ops[0] == "rollback":
            return "rollback"  # with the properties of the version it restores
        return ops[0] if len(ops) == 1 else "transaction"

    def _spec_operations(self) -> list[str]:
        return (["set-properties"] if self.properties is not None else []) + (
            ["evolve-schema"] if self.schema is not None else []
        )

    def _needed_checks(self) -> WriteChecks | None:
        """The checks, when an upsert of this commit needs them, or its deletes (deletes alone need them
        only under sequences, where one may be late: see :meth:`WriteChecks.late_deletes_matter`)."""
        if not self.checks.needed:
            return None
        if self.checks.late_deletes_matter:
            return self.checks
        return self.checks if any(c.operation == "upsert" for c in self.changes) else None

    def drop_resolved(self) -> None:
        """Delete the markers the lookup of stored keys wrote for the last try (table-wide keys)."""
        self.ctx.files.discard(self.resolved)
        self.resolved = []

    def _blind(self) -> list[Change]:
        """Changes whose rows were written blind (upserts, CDC batches, deletes of given keys; with
        table-wide keys also overwrites: their keys may live in partitions they do not replace)."""
        kinds = ("upsert", "delete", "overwrite") if self.ctx.spec.cross_partition else ("upsert", "delete")
        return [
            c
            for c in self.changes
            if c.operation in kinds and c.recipe is None and c.restores is None and c.files
        ]

    def _resolve(
        self, base: int, removed: Sequence[FileEntry] = ()
    ) -> tuple[list[FileEntry], dict[str, Any], Rule | None]:
        """Look up the stored versions of the blind changes' keys at ``base`` (see
        :mod:`mere.table.stored_keys`): table-wide keys get their markers in other partitions (written
        here, with the rule that keeps them right), tables with ``sequence_by`` their stale count.
        ``removed``: the stored files this commit removes (an overwrite's partitions), not looked at."""
        ctx = self.ctx
        spec = ctx.spec
        blind = self._blind()
        if not blind or not (spec.cross_partition or spec.sequence_by):
            return [], {}, None
        upserts = [f for c in blind if c.operation in ("upsert", "overwrite") for f in c.files]
        if not spec.cross_partition and not upserts:
            return [], {}, None  # stale counts are the upserts'
        incoming = [f for c in blind for f in c.files]
        gone = frozenset(f.id for f in removed if f.id is not None)
        counted = frozenset(f.path for f in upserts)  # (a delete of given keys reports no stale rows)
        found = resolve(ctx, base, incoming, spec.cross_partition, gone, counted)
        summary: dict[str, Any] = {}
        if spec.sequence_by and upserts:
            summary[STALE_ROWS] = found.stale
        files: list[FileEntry] = []
        if found.markers is not None and found.markers.num_rows:
            keys, _ = conform(found.markers, marker_spec(spec), partial_ok=True, identifier=ctx.name)
            ops = np.full(keys.num_rows, OP_DELETE, dtype=np.int8)
            files = ctx.files.write(prepare(spec, keys, ops, identifier=ctx.name, moves=False))
            summary[MOVED_KEYS] = sum(f.row_count for f in files)
        rule = BucketsUnchanged(frozenset(f.bucket for f in incoming)) if spec.cross_partition else None
        return files, summary, rule

    def _holds(self, read: ReadRows, base: int) -> bool:
        try:
            return still_holds(self.ctx, base, self.read_version, read)
        except MereError:
            return False  # e.g. a winner's file is gone already: evaluating again tells

    def _restores(self) -> int | None:
        return next((c.restores for c in self.changes if c.restores is not None), None)

    def _attempt(self) -> CommitResult:
        base = self.read_version
        try:
            prepared = self.prepare()
        except StorageError as e:
            # Its checks and lookups read the table at ``base``: an expire that ran meanwhile deleted files
            # of that version. As a lost race: try again on a newer one.
            try:
                resolve_version(self.ctx, base)
            except NoSuchVersion:
                self.rebase()
                raise CommitConflict(
                    f"{self.ctx.name}: version {base} expired while this write read it"
                ) from e
            raise
        if isinstance(prepared, CommitResult):
            return prepared
        self.catalog_asked = True
        try:
            result = self.ctx.store.commit(self.ctx.table_id, **prepared.arguments())
        except BaseException as e:
            self.failed(prepared, e)
            raise
        return self.landed(prepared, result)

    def prepare(self) -> PreparedCommit | CommitResult:
        """The commit at its base version, ready to land (its change logs written), or the result of a
        commit that has nothing to land (no version). A conflict found here has rebased the commit."""
        ctx = self.ctx
        checks = self._needed_checks()
        reads = any(c.recipe is not None for c in self.changes)
        if (checks is not None or (ctx.spec.cross_partition and self._blind())) and not reads:
            self.read_version = current(ctx)  # the checks read the table: at its newest version
        base = self.read_version
        self.drop_resolved()
        removed: list[FileEntry] = []
        removed_ids: list[int] = []
        partitions: set[str] | None = set()
        for c in self.changes:
            gone = c.removes.files(ctx, base)
            removed += gone
            removed_ids += c.removes.ids()
            touched = c.removes.touched(gone, c.files)
            partitions = None if partitions is None or touched is None else partitions | set(touched)
        self.resolved, resolved_summary, resolved_rule = self._resolve(base, removed)
        if partitions is not None and self.resolved:
            partitions |= {f.partition for f in self.resolved}
        # Markers in other partitions come last: in their splits they are the commit's newest rows.
        add = renumber([*(f for c in self.changes for f in c.files), *self.resolved], keep_seq=True)
        rules: list[Rule] = [c.rule for c in self.changes if c.rule is not None]
        if resolved_rule is not None:
            rules.append(resolved_rule)
        extra: dict[str, Any] = {}
        for c in self.changes:
            for k, v in c.summary.items():
                extra[k] = extra.get(k, 0) + v if isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in resolved_summary.items():  # stored rows a write's rows lost to, and markers elsewhere
            extra[k] = extra.get(k, 0) + v
        if checks is not None:
            rules.append(checks.verify(ctx.handle, base))
            extra |= checks.summary()
        columns_current(ctx, base)
        rules.append(ColumnsUnchanged())
        spec = None
        if self.properties is not None or self.schema is not None:
            new_spec = ctx.spec if self.schema is None else self.schema.spec
            # The spec written carries the properties at the base with this commit's updates applied: a
            # concurrent commit may have set others since the handle read them, and writing the handle's
            # view back would lose them (one that lands before this commit is a conflict: retried here).
            stored = ctx.store.spec_at(ctx.table_id, base)
            at_base = ctx.spec if stored is None else TableSpec.from_json(stored, ctx.name)
            properties = validate_properties(applied(at_base.properties, self.property_updates or {}))
            new_spec = replace(new_spec, properties=properties)
            rules.append(PropertiesUnchanged())
            if self.property_updates is not None:
                self.properties = properties
                extra["properties"] = properties
            if self.schema is not None:
                extra["schema"] = list(self.schema.steps)
            spec = new_spec.to_json()
        # With ``changes.log`` on, the commit also records the rows it replaces (read at ``base``; a
        # concurrent change to those splits is a conflict, and the retry reads them again).
        logged = logs_changes(
            ctx.spec, add, bool(removed) or bool(removed_ids) or self._restores() is not None
        )
        if logged:
            rules.append(RowsUnchanged(file_splits(add)))
            extra[LOG_SUMMARY_KEY] = True
        summary = {
            "read_version": base,
            "added_files": len(add),
            "removed_files": len(removed) + len(removed_ids),
            "rows": sum(c.rows for c in self.changes),
            "added_bytes": sum(f.size_bytes for f in add),
            "partitions": None if partitions is None else sorted(partitions),
            # Splits whose rows the commit changes: where it adds files and where it removes them.
            "splits": sorted({split_label((f.partition, f.bucket)) for f in [*add, *removed]}),
            **extra,
        }
        if len(self.changes) > 1 or (self.changes and spec is not None):
            summary["operations"] = self.operations()
        if not (add or summary["removed_files"] or spec is not None or self._restores() is not None):
            # Nothing to write, remove or change: no version (one rule for every write path).
            return CommitResult.unchanged(ctx.store.snapshot(ctx.table_id, base), self.operation())
        logs: list[FileEntry] = []
        if logged:
            try:
                logs = write_change_log(ctx, base, add)
            except NoSuchVersion as e:  # expired meanwhile: read the rows it replaces at a newer one
                self.rebase()
                raise CommitConflict(f"{ctx.name}: version {base} expired before this write read it") from e
        # The files this commit wrote (a rollback's are an older version's, which no cleanup takes).
        fresh = {f.path for c in self.changes if c.restores is None for f in c.files}
        fresh |= {f.path for f in [*self.resolved, *logs]}
        written_since, exact = self.written_since_for([f.path for f in add if f.path in fresh])
        request = CommitRequest(
            ctx.table_id,
            base_version=base,
            operation=self.operation(),
            add=add + [replace(f, order=len(add) + i) for i, f in enumerate(logs)],
            remove=[f.id for f in removed if f.id is not None] + removed_ids,
            summary=summary,
            validate=validator(ctx.name, rules),
            idempotency_key=self.idempotency_key,
            spec=spec,
            restores=self._restores(),
            written_since=written_since,
            written_since_exact=exact,
        )
        return PreparedCommit(request, logs)

    def written_since_for(self, paths: Sequence[str]) -> tuple[int | None, bool]:
        """When the commit's files (``paths``) began to be written, for the catalog's cleanup fence: this
        process's clock, or, where a fence lies within ``CLOCK_MARGIN_MICROS`` of it (clocks may differ
        that much), the oldest file's time as the store gives it (the time the cleanup compared), and
        True; None where it wrote no file. A file already gone refuses the commit."""
        if not paths:
            return None, False
        ctx = self.ctx
        try:
            fence: int | None = ctx.store.cleanup_fence(ctx.table_id)
        except CatalogError:
            # Unknown (the catalog failed, perhaps while an earlier try of this commit landed: what
            # lands it tells): the files' own times, compared exactly, are right whatever the fence.
            fence = self.written_since
        if fence is None or fence <= self.written_since - CLOCK_MARGIN_MICROS:
            return self.written_since, False
        times = ctx.storage.written_micros(paths)
        gone = [p for p, t in zip(paths, times, strict=True) if t is None]
        if gone:
            raise OutlivedCleanup(
                f"{ctx.name}: a cleanup deleted {len(gone)} of the files this write made (such as {gone[0]}) "
                "before it committed: nothing was committed; write again, and give cleanup an older_than "
                "longer than the longest write takes"
            )
        return min(t for t in times if t is not None), True

    def landed(self, prepared: PreparedCommit, result: CommitResult) -> CommitResult:
        """The catalog landed ``prepared`` (or named the commit its idempotency key made first)."""
        if result.already_committed:  # the key's commit landed first: this commit's logs are not needed
            discard_unreferenced(self.ctx, [*prepared.logs, *self.resolved])
            self.resolved = []
        return result

    def failed(self, prepared: PreparedCommit, error: BaseException) -> None:
        """``prepared`` did not land: its logs go (unless the outcome is unknown); a lost race rebases."""
        if isinstance(error, CommitStateUnknown) or not isinstance(error, Exception):
            return  # the logs may be referenced now (an interrupt may come as the catalog lands): keep them
        self.ctx.files.discard(prepared.logs)
        if isinstance(error, CommitConflict):
            self.rebase()

    def rebase(self) -> None:
        """Rebase onto the version that beat us: changes that read rows are evaluated again there, unless
        the commits that beat us changed none of their rows (:mod:`mere.table.revalidate`)."""
        base = self.read_version
        self.read_version = current(self.ctx)
        if any(c.recipe is not None for c in self.changes):
            self.changes = [self._redo(c, base) for c in self.changes]

    def _redo(self, change: Change, base: int | None) -> Change:
        if change.recipe is None:
            return change
        if change.read_rows is not None and base is not None and self._holds(change.read_rows, base):
            return change
        self.checks.forget(change)
        discard(self.ctx, [change])
        change.files = []
        columns_current(self.ctx, self.read_version)
        fresh = change.recipe.change(self.ctx, self.read_version, self.checks)
        fresh.recipe = change.recipe
        return fresh
