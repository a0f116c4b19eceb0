"""Writes: upsert, append, delete, overwrite and truncate as changes of a :class:`~mere.table.commit.Commit`,
and the staged (distributed) form of each: :func:`stage` on workers, :func:`commit_staged` on the driver.

Upserts, appends and deletes of given keys are blind: they rebase onto whatever landed. A delete by
predicate (or of keys whose partition is unknown) reads the table: its change keeps the delete as a
recipe (:class:`DeleteWhere`, :class:`DeleteKeys`, :class:`RewriteWhere`) that the commit evaluates again
after a lost race. An overwrite removes the files of the partitions it replaces, as data
(:class:`~mere.table.commit.ReplacePartitions`), resolved at the version it commits on.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import sorted_unique
from mere.errors import InvalidInput
from mere.hashing import bucket_ids
from mere.lang.lower import evaluate
from mere.metadata import DELETED_ROWS, STALE_ROWS, CommitResult, FileEntry, now_micros
from mere.read.evolution import whole_file_as_table
from mere.read.planner import ReadScope, split_filter, typed_partition
from mere.spec import OP_DELETE, TableSpec
from mere.table.commit import (
    Change,
    Commit,
    RemoveFiles,
    ReplacePartitions,
    StagedChange,
    committed_with,
    deletion_summary,
    discard_unreferenced,
    renumber,
)
from mere.table.conflicts import PartitionSet, PartitionsUnchanged, RowsUnchanged
from mere.table.context import TableContext, file_splits, partition_values
from mere.table.images import values_in
from mere.table.revalidate import ReadRows
from mere.table.versions import require_live
from mere.table.write_checks import WriteChecks
from mere.write.writer import (
    PreparedFile,
    conform,
    delete_refusal,
    marker_columns,
    marker_spec,
    prepare,
    sequence_after,
)

STAGE_OPERATIONS = ("upsert", "append", "delete", "overwrite")


# -- changes of a commit ----------------------------------------------------------------------------------


def upsert(commit: Commit, data: Any) -> None:
    """Insert or update rows by primary key (see :meth:`mere.Table.upsert`)."""
    ctx = commit.ctx
    if not ctx.spec.has_primary_key:
        raise InvalidInput(f"{ctx.name} has no primary key: use append()")
    files, rows, stale = ctx.files.write_data(data, partial_ok=True, check=commit.checks.observe)
    commit.add(Change("upsert", files, rows, stale_summary(ctx.spec, stale)))


def append(commit: Commit, data: Any) -> None:
    """Add rows to a table without primary key."""
    ctx = commit.ctx
    if ctx.spec.has_primary_key:
        raise InvalidInput(f"{ctx.name} has a primary key {list(ctx.spec.primary_key)}: use upsert()")
    files, rows, _ = ctx.files.write_data(data, partial_ok=False)
    commit.add(Change("append", files, rows))


def delete(commit: Commit, where: Any) -> None:
    """Delete rows matching a filter, or the keys in a table of keys (see :meth:`mere.Table.delete`)."""
    ctx = commit.ctx
    if where is None:
        raise InvalidInput(
            f"{ctx.name}: delete(None) names no rows; to delete every row say delete('TRUE') or truncate()"
        )
    if ctx.spec.delete_refusal:  # refused whatever the table holds (a key stored nowhere too)
        raise InvalidInput(delete_refusal(ctx.spec, ctx.name, "delete"))
    if (
        isinstance(where, (pa.Table, pa.RecordBatch, pa.RecordBatchReader, dict))
        or type(where).__module__.startswith("pandas")
        or hasattr(where, "__arrow_c_stream__")  # Polars, DuckDB relations, ...: rows as writes take them
        or hasattr(where, "__arrow_c_array__")
    ):
        keys = ctx.files.key_rows(where, ctx.spec.primary_key)
        spec = ctx.spec
        absent = [c for c in spec.partition_by if c not in keys.column_names]
        if (
            absent
            and spec.cross_partition
            and spec.sequence_by
            and all(c in keys.column_names for c in spec.sequence_by)
            and all(spec.schema.field(c).nullable for c in absent)
        ):
            # Keys with their sequence, without their partition: deleted wherever they live, as a CDC
            # delete with NULL partition values is, so a key that lives nowhere yet still gets a marker
            # (in the NULL partition) that a late event with a lower sequence loses to.
            for c in absent:
                keys = keys.append_column(
                    spec.schema.field(c), pa.nulls(keys.num_rows, spec.schema.field(c).type)
                )
        cols = [c for c in marker_columns(ctx.spec) if c in keys.column_names]
        if len(cols) == len(marker_columns(ctx.spec)):
            commit.add(marker_change(ctx, keys.select(cols), commit.checks))
            return
        # Keys without their partition, or (sequence_by) without their sequence: the delete reads where
        # each key lives and the sequence of its version, which its marker carries.
        commit.add_read(DeleteKeys(keys))
        return
    split_filter(ctx.spec, where)  # a bad filter fails now
    if ctx.spec.has_primary_key:
        # Read even where the filter names keys: the rows that exist are what a DELETE counts (as
        # DuckDB's count does), and markers are written for those only.
        commit.add_read(DeleteWhere(where))
    else:
        commit.add_read(RewriteWhere(where))


def overwrite(
    commit: Commit, data: Any, partition: Mapping[str, Any] | None = None, *, dynamic: bool = False
) -> None:
    """Replace the whole table, or the partitions matching ``partition``, with ``data``; with
    ``dynamic=True`` only the partitions ``data`` has rows in (see :meth:`mere.Table.overwrite`)."""
    ctx = commit.ctx
    check_dynamic(ctx.name, dynamic)
    wanted = ctx.files.wanted_partition(partition)
    commit.reads_first("overwrite")
    named: set[str] = set()
    files, rows, stale = ctx.files.write_data(
        data,
        partial_ok=False,
        check=lambda prepared: ctx.files.check_partition(wanted, [p.partition for p in prepared]),
        partitions=named,
    )
    try:
        ctx.files.check_partition(wanted, [json.loads(p) for p in sorted(named)])
    except BaseException:
        ctx.files.discard(files)
        raise
    change = overwriting(ctx, "overwrite", files, rows, wanted, dynamic=dynamic, named=named)
    change.summary |= stale_summary(ctx.spec, stale)
    commit.add(change)


def truncate(commit: Commit) -> None:
    """Remove every row, writing nothing."""
    commit.reads_first("truncate")
    commit.add(overwriting(commit.ctx, "truncate", [], 0, None))


def overwriting(
    ctx: TableContext,
    operation: str,
    files: list[FileEntry],
    rows: int,
    wanted: dict[str, str | None] | None,
    *,
    dynamic: bool = False,
    named: Iterable[str] = (),
) -> Change:
    """An overwrite's change: it replaces the files of the whole table, of the partitions matching
    ``wanted``, or (``dynamic`` on a partitioned table) of exactly the partitions ``files`` hold and
    the input rows ``named`` (JSON; with table-wide keys a partition may get no file, its rows having
    moved elsewhere in the batch)."""
    # Dynamic on a table without partition columns replaces the whole table, as in Spark and Delta.
    present = (
        frozenset(partition_values(p) for p in [*(f.partition for f in files), *named])
        if dynamic and ctx.spec.partition_by
        else None
    )
    target = PartitionSet(wanted, present)
    summary: dict[str, Any] = {}
    if operation == "overwrite":
        summary["overwrite"] = wanted
        if present is not None:
            summary["overwrite_mode"] = "dynamic"
    return Change(operation, files, rows, summary, ReplacePartitions(target), PartitionsUnchanged(target))


def stale_summary(spec: TableSpec, stale: int) -> dict[str, int]:
    """A write's summary entry counting the rows a row of the same key with a higher sequence replaced
    within the write, or (``first_row``) that an earlier row of the same key made the write ignore
    (tables with ``sequence_by`` or ``first_row`` only); the commit adds those that lose to a stored
    version (:mod:`mere.table.stored_keys`)."""
    return {STALE_ROWS: stale} if spec.sequence_by or spec.merge_engine == "first_row" else {}


def check_dynamic(table: str, dynamic: Any) -> None:
    """``dynamic`` is a bool."""
    if not isinstance(dynamic, bool):
        raise InvalidInput(f"{table}: dynamic must be True or False, got {dynamic!r}")


# -- deletes ----------------------------------------------------------------------------------------------


def marker_change(
    ctx: TableContext,
    keys: pa.Table,
    checks: WriteChecks | None = None,
    first: bool = False,
    read: bool = False,
) -> Change:
    """Delete markers for these keys, written; ``checks`` take note of them (later upserts start afresh).
    ``read``: the keys are rows the delete read at its version (each one existed)."""
    keys, _ = conform(keys, marker_spec(ctx.spec), partial_ok=True, identifier=ctx.name)
    ops = np.full(keys.num_rows, OP_DELETE, dtype=np.int8)
    prepared = prepare(ctx.spec, keys, ops)
    files = ctx.files.write(prepared)
    rows = sum(f.row_count for f in files)
    change = Change("delete", files, rows, deletion_summary(rows, rows if read else None))
    if checks is not None:
        checks.observe(prepared, tag=change, first=first)
    return change


def read_markers(ctx: TableContext, keys: pa.Table, checks: WriteChecks) -> Change:
    """Markers for rows a delete read at its version: they conflict with concurrent changes there."""
    # The keys were read at the transaction's version: the checks see their deletes before every write
    # of the transaction (reading changes come first, and deletes commute with one another). With
    # sequence_by a marker takes the sequence just above the version read: it deletes that version and
    # every replay of it, and an event of higher sequence brings the key back.
    change = marker_change(ctx, sequence_after(keys, ctx.spec), checks, first=True, read=True)
    change.rule = RowsUnchanged(file_splits(change.files))
    return change


def scoped(change: Change, scope: ReadScope, keys: pa.Table, where: Any = None) -> Change:
    """``change`` (whose rule is a :class:`RowsUnchanged`) also conflicting in the splits of ``scope``; it
    read ``keys`` (primary-key columns) by ``where`` (None: given keys)."""
    rule = change.rule
    assert isinstance(rule, RowsUnchanged)
    change.rule = replace(rule, scope=scope if rule.scope is None else rule.scope.union(scope))
    change.read_rows = ReadRows(keys, where, scope)
    return change


@dataclass(frozen=True)
class DeleteWhere:
    """A delete by predicate on a keyed table: markers for the rows matching ``where``."""

    where: Any

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """Markers for the rows matching at ``base``."""
        # With sequence_by, the sequences of the versions deleted (their markers go just above).
        scan = ctx.handle.scan(columns=marker_columns(ctx.spec), filter=self.where, version=base)
        keys = scan.to_arrow()
        pk = list(ctx.spec.primary_key)
        return scoped(read_markers(ctx, keys, checks), scan.read_scope(), keys.select(pk), self.where)


@dataclass(frozen=True)
class DeleteKeys:
    """Keys given without their partition: markers where each lives."""

    keys: pa.Table

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """Markers for the keys found at ``base`` (with the sequences of the versions found there)."""
        spec = ctx.spec
        pk = list(spec.primary_key)
        # The key, and with sequence_by the partition values given too (keys given whole but for their
        # sequence: only the version in that partition is deleted; table-wide keys: wherever it lives).
        given = [c for c in spec.partition_by if c not in pk and c in self.keys.column_names]
        parts = given if spec.sequence_by and not spec.cross_partition else []
        on = [*parts, *pk]
        on_spec = TableSpec(
            pa.schema([spec.schema.field(c) for c in on]), spec.primary_key, tuple(parts), spec.buckets
        )
        conformed, _ = conform(self.keys.select(on), on_spec, partial_ok=True, identifier=ctx.name)
        where: Any = None
        if len(pk) == 1 and conformed.num_rows <= 10_000:
            where = values_in(pk[0], conformed.column(pk[0]))  # prunes buckets
        current = ctx.handle.scan(columns=marker_columns(spec), filter=where, version=base).to_arrow()
        found = current.join(conformed.select(on).group_by(on).aggregate([]), keys=on, join_type="left semi")
        # A key found nowhere at ``base`` may be written concurrently: its bucket stays in scope.
        buckets = sorted_unique(bucket_ids(conformed.select(pk), spec.buckets)) if conformed.num_rows else ()
        scope = ReadScope(frozenset(int(b) for b in buckets))
        seq = list(spec.sequence_by)
        if seq and set(seq) <= set(self.keys.column_names):
            # Keys given with their sequence (not their partition): each marker carries the sequence given,
            # so a version stored with a higher one stays, as with the partition given (or a CDC delete).
            given = self._given_sequences(ctx, on, seq)
            markers = found.drop_columns(seq).join(given, keys=on, join_type="inner")
            change = marker_change(ctx, markers.select(found.column_names), checks, first=True, read=True)
            change.rule = RowsUnchanged(file_splits(change.files))
            return scoped(change, scope, conformed.select(pk))
        return scoped(read_markers(ctx, found, checks), scope, conformed.select(pk))

    def _given_sequences(self, ctx: TableContext, on: list[str], seq: list[str]) -> pa.Table:
        """The given keys with their sequences (checked as a marker's: typed, not NULL); a key given twice
        takes its highest."""
        spec = ctx.spec
        given_spec = TableSpec(
            pa.schema([spec.schema.field(c) for c in [*on, *seq]]),
            spec.primary_key,
            tuple(c for c in on if c not in spec.primary_key),
            spec.buckets,
            sequence_by=spec.sequence_by,
        )
        given, _ = conform(self.keys.select([*on, *seq]), given_spec, partial_ok=False, identifier=ctx.name)
        for c in seq:
            if given.column(c).null_count:
                raise InvalidInput(
                    f"{ctx.name}: delete: sequence column {c!r} is NULL for a key given with it"
                )
        order = given.sort_by([*((c, "ascending") for c in on), *((c, "descending") for c in seq)])
        firsts = order.group_by(on, use_threads=False).aggregate([(c, "first") for c in seq])
        return firsts.select([*on, *(f"{c}_first" for c in seq)]).rename_columns([*on, *seq])


@dataclass(frozen=True)
class RewriteWhere:
    """A delete on a table without key: the files holding matching rows are rewritten (copy on write)."""

    where: Any

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """The rewrite at ``base``."""

        def drop(data: pa.Table, hit: pa.Array) -> pa.Table:
            return data.filter(pc.invert(hit))

        return rewrite_files(ctx, self.where, base, drop, "delete", DELETED_ROWS)


def rewrite_files(
    ctx: TableContext,
    where: Any,
    base: int,
    rewrite: Callable[[pa.Table, pa.Array], pa.Table],
    operation: str,
    count_key: str,
) -> Change:
    """Copy on write for tables without a key: each file at ``base`` holding rows that match ``where`` is
    replaced by ``rewrite(rows, matches)`` (no file if that is empty); files without a match stay."""
    spec, storage = ctx.spec, ctx.storage
    parts = split_filter(spec, where)
    hit_expr = pc.coalesce(E.to_pyarrow(parts.bound, spec.schema), pa.scalar(False))
    add: list[FileEntry] = []
    gone: list[FileEntry] = []
    matched = 0
    try:
        for f in ctx.handle.files_at(base):
            values = json.loads(f.partition)
            if spec.partition_by and E.evaluate_constant(parts.bound, typed_partition(spec, values)) is False:
                continue
            md = storage.metadata(f.path)
            data = whole_file_as_table(
                storage.read_row_groups(f.path, range(md.num_row_groups), None), spec, md
            )
            try:
                mask = evaluate(data, {"hit": hit_expr}).column("hit").combine_chunks()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InvalidInput(
                    f"{ctx.name}: evaluating the filter failed: {str(exc).splitlines()[0]}"
                ) from exc
            count = int(pc.sum(mask.cast(pa.int64())).as_py() or 0)
            if not count:
                continue
            new = rewrite(data, mask)
            matched += count
            gone.append(f)
            if new.num_rows:
                add += ctx.files.write([PreparedFile(values, f.bucket, new, "data")], first_order=len(add))
    except BaseException:
        ctx.files.discard(add)
        raise
    return Change(operation, add, matched, {count_key: matched}, RemoveFiles(tuple(gone)))


# -- staged (distributed) writes ------------------------------------------------------------------------


WRITE_ID = re.compile(r"[A-Za-z0-9_]{1,64}")


def check_write_id(table: str, write_id: Any) -> str:
    """A staged write's id: 1 to 64 letters, digits or ``_`` (a file name carries it between dashes)."""
    if not isinstance(write_id, str) or not WRITE_ID.fullmatch(write_id):
        raise InvalidInput(
            f"{table}: write_id must be 1 to 64 ASCII letters, digits or '_' (such as uuid.uuid4().hex), "
            f"got {write_id!r}"
        )
    return write_id


def stage(
    ctx: TableContext, data: Any, operation: str = "upsert", write_id: str | None = None
) -> StagedChange:
    """Write files for ``operation`` without committing them (the worker half of a distributed write)."""
    started = now_micros()
    if write_id is not None:
        check_write_id(ctx.name, write_id)
        ctx = replace(ctx, settings=replace(ctx.settings, write_id=write_id))
    if operation not in STAGE_OPERATIONS:
        raise InvalidInput(f"cannot stage {operation!r}; choose one of {', '.join(STAGE_OPERATIONS)}")
    if operation == "upsert" and not ctx.spec.has_primary_key:
        raise InvalidInput(f"{ctx.name} has no primary key: stage 'append'")
    if operation == "append" and ctx.spec.has_primary_key:
        raise InvalidInput(f"{ctx.name} has a primary key: stage 'upsert'")
    if operation == "delete":
        # Blind (a worker reads nothing): with sequence_by the rows carry each delete's sequence.
        keys = ctx.files.key_rows(data, marker_columns(ctx.spec))
        entries = marker_change(ctx, keys.select(marker_columns(ctx.spec))).files
        rows = sum(e.row_count for e in entries)
        return StagedChange(ctx.name, operation, entries, rows, written_since=started)
    checks = WriteChecks(ctx.spec, ctx.name) if operation == "upsert" else None
    named: set[str] | None = set() if operation == "overwrite" else None
    entries, rows, stale = ctx.files.write_data(
        data, partial_ok=operation == "upsert", check=checks.observe if checks else None, partitions=named
    )
    return StagedChange(
        ctx.name,
        operation,
        entries,
        rows,
        counts=stale_summary(ctx.spec, stale),
        partitions=tuple(sorted(named or ())),
        written_since=started,
    )


def abort_write(ctx: TableContext, write_id: str) -> list[str]:
    """See :meth:`mere.Table.abort_write`."""
    check_write_id(ctx.name, write_id)
    require_live(ctx)
    named = ctx.storage.named_for(write_id)
    listed = [
        p
        for p, _size, _mtime in ctx.storage.list_files(ctx.location)
        if named.fullmatch(posixpath.basename(p))
    ]
    if not listed:
        return []
    referenced = ctx.store.all_file_paths(ctx.table_id)  # read after the listing: a commit before it counts
    require_live(ctx)  # a table dropped meanwhile references nothing any more
    ours = [p for p in listed if p not in referenced]
    for path in ours:
        ctx.storage.delete(path)
    return ours


def commit_staged(
    ctx: TableContext,
    staged: Sequence[StagedChange],
    operation: str | None,
    partition: Mapping[str, Any] | None,
    idempotency_key: str | None,
    dynamic: bool,
) -> CommitResult:
    """Commit staged writes of one operation as one new version (see :meth:`mere.Table.commit`)."""
    operation = staged_operation(ctx, staged, operation, partition, dynamic)
    entries = renumber(f for s in staged for f in s.files)
    commit = Commit(ctx, idempotency_key=idempotency_key)
    try:
        if idempotency_key is not None:
            prior = committed_with(ctx, idempotency_key)
            if prior is not None:  # the files of a retried commit of these same messages stay
                discard_unreferenced(ctx, entries)
                return prior
        add_staged(commit, staged, operation, partition, dynamic, entries)
    except BaseException:
        discard_unreferenced(ctx, entries)  # a commit of these same files may have landed (a retry)
        raise
    return commit.run()


def add_staged(
    commit: Commit,
    staged: Sequence[StagedChange],
    operation: str,
    partition: Mapping[str, Any] | None,
    dynamic: bool,
    entries: list[FileEntry],
) -> None:
    """Add staged writes of one (checked) operation to a commit: ``entries`` are their files, renumbered."""
    ctx = commit.ctx
    rows = sum(s.rows for s in staged)
    commit.files_from(staged)  # (checked to exist when the commit lands: a cleanup may take old ones)
    stale = stale_summary(ctx.spec, sum(int(s.counts.get(STALE_ROWS, 0)) for s in staged))
    if operation == "overwrite":
        wanted = ctx.files.wanted_partition(partition)
        named = {p for s in staged for p in s.partitions}
        ctx.files.check_partition(
            wanted, [json.loads(p) for p in sorted({*(e.partition for e in entries), *named})]
        )
        change = overwriting(ctx, "overwrite", entries, rows, wanted, dynamic=dynamic, named=named)
        change.summary |= stale
        commit.add(change)
    elif operation == "delete":
        if ctx.spec.has_primary_key:  # (a late delete under sequences is checked)
            commit.checks.observe_files(ctx.handle, entries)
        commit.add(Change("delete", entries, rows, deletion_summary(rows, None)))
    else:
        if operation == "upsert" and ctx.spec.has_primary_key:
            commit.checks.observe_files(ctx.handle, entries)
        commit.add(Change(operation, entries, rows, stale if operation == "upsert" else {}))


def staged_operation(
    ctx: TableContext,
    staged: Sequence[StagedChange],
    operation: str | None,
    partition: Mapping[str, Any] | None,
    dynamic: bool,
) -> str:
    """The operation staged writes commit as, checked against what they were staged for."""
    if operation is not None and operation not in STAGE_OPERATIONS:
        raise InvalidInput(
            f"{ctx.name}: cannot commit {operation!r}; choose one of {', '.join(STAGE_OPERATIONS)}"
        )
    ops = {s.operation for s in staged}
    if len(ops) > 1:
        raise InvalidInput(f"{ctx.name}: cannot commit different operations {sorted(ops)} together")
    if any(s.table != ctx.name for s in staged):
        raise InvalidInput(f"{ctx.name}: staged writes belong to another table")
    if operation is not None and ops and ops != {operation}:
        raise InvalidInput(f"{ctx.name}: staged {sorted(ops)} cannot commit as {operation!r}")
    operation = operation or (ops.pop() if ops else ("upsert" if ctx.spec.has_primary_key else "append"))
    if (partition is not None or dynamic) and operation != "overwrite":
        raise InvalidInput(f"{ctx.name}: partition= and dynamic= apply to overwrite only")
    return operation
