"""Compaction in three steps, so that an engine can run the middle one on many machines.

1. :meth:`Table.plan_compaction` (driver): pick the splits to fold at one table version.
2. :meth:`CompactionTask.run` (any worker with storage access, no catalog): merge one split's files and
   write the result as key-sorted files; nothing is visible yet.
3. :meth:`Table.commit_compaction` (driver): swap all tasks' files in for their inputs in one commit
   (or :meth:`Table.commit` of :meth:`CompactionPlan.staged`, the commit message every engine path uses).

The new files keep the sequence number of the newest file they replace, so writes that commit between
steps 1 and 3 still merge on top of them. A commit whose inputs were meanwhile replaced (an overwrite or
another compaction) raises :class:`~mere.errors.CommitConflict` and deletes the new files: plan again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from mere.arrays import bool_array
from mere.io import Storage
from mere.kernels import fold_sequenced, group_starts, last_by_sequence, reduce_versions, sort_indices
from mere.metadata import SEQ_SHIFT, FileEntry, now_micros
from mere.read.evolution import whole_file_as_table
from mere.read.planner import FileTask
from mere.read.reader import SplitReader, gather_batches, plain_columns
from mere.spec import OP_COLUMN, OP_DELETE, OP_MERGE, OP_PUT, TOMBSTONE_TIME_COLUMN, TableSpec
from mere.table.commit import RemoveIds, StagedChange, renumber
from mere.table.scan import ScanTask, storage_for
from mere.write.writer import PreparedFile, tombstone_columns, write_prepared

CHUNK_ROWS = 1 << 20  # rows sorted and written per output file
# Automatic compaction folds the newest runs together while the next older run is at most this much
# larger than them (percent), so runs grow geometrically and each row is rewritten O(log n) times.
TIERED_SIZE_RATIO = 100
# A fold of the newest runs holds them in memory at once; bigger ones fold the whole split (streamed).
PARTIAL_FOLD_MAX_BYTES = 256 << 20


def runs_to_fold(
    sizes: Sequence[int], rows: Sequence[int], min_files: int, amplification_percent: int | None = None
) -> int:
    """How many of a split's newest runs an automatic (tiered) compaction folds into one: 0 for none,
    ``len(sizes)`` for all of them (a full fold). ``sizes`` are the runs' bytes and ``rows`` their row
    counts, newest first.

    Due at ``min_files`` runs (or, with ``amplification_percent``, when the runs besides the largest hold
    that share of its bytes: then all of them). It folds at least the newest ``n - min_files // 2 + 1``
    (a fold leaves half the trigger's runs, so the next is a few commits away), then every older run
    holding not many more rows than those picked (:data:`TIERED_SIZE_RATIO`; rows, not bytes: a tiny
    file is mostly its footer). A table fed by tiny commits thus rewrites small runs often and its big
    runs rarely, where folding whole splits would rewrite the table every ``min_files`` commits.
    """
    n = len(sizes)
    if n < 2:
        return 0
    largest = max(sizes)
    if amplification_percent is not None and (sum(sizes) - largest) * 100 >= amplification_percent * largest:
        return n
    if n < min_files:
        return 0
    k = max(2, n - min_files // 2 + 1)
    picked = sum(rows[:k])
    while k < n and rows[k] * 100 <= picked * (100 + TIERED_SIZE_RATIO):
        picked += rows[k]
        k += 1
    return k


def can_fold_partially(files: Sequence[FileTask], spec: TableSpec) -> bool:
    """Whether these newest runs of a split can fold into one run that older runs still merge under:
    every file holds whole rows (or is a file of delete markers), they fit in memory together, and no
    column sums (a sum of the newest runs alone may leave its type where the whole sum does not, and
    floating-point addition in another order gives another value: such splits fold whole, in version
    order, as the reader merges them)."""
    if any(op.name == "sum" for op in spec.merge_operators.values()):
        return False
    return all(f.content == "delete" or f.columns is None for f in files) and (
        sum(f.size_bytes for f in files) <= PARTIAL_FOLD_MAX_BYTES
    )


@dataclass(frozen=True)
class CompactionTask:
    """One split to fold; self-contained and picklable like :class:`~mere.table.scan.ScanTask`."""

    read: ScanTask  # the split's merged rows at the planned version, every column
    location: str  # the table's directory, relative to the warehouse
    seq: int  # the newest input file's sequence number: the new files keep it
    row_group_rows: int | None
    compression: str
    compression_level: int | None
    # The split's newest runs only (see runs_to_fold): the result keeps each key's operation (a delete, a
    # state cleared, or a change to merge into the older runs), where a full fold writes merged rows.
    partial: bool = False
    # Tables with ``sequence_by``: a full fold drops the tombstones deleted before this time (UTC
    # microseconds; None: keeps them all), and a delete marker read from a file without
    # ``_mere_deleted_at`` was deleted when the file's commit landed (version -> commit time).
    tombstones_before: int | None = None
    commit_micros: tuple[tuple[int, int], ...] = ()

    @property
    def bucket(self) -> int:
        """The bucket of the split this task folds."""
        return self.read.split.bucket

    @property
    def inputs(self) -> int:
        """How many files this task folds."""
        return len(self.read.split.files)

    def run(self, storage: Storage | None = None) -> list[FileEntry]:
        """Write the merged split; return the new files (uncommitted). On failure nothing is left behind
        except what a killed process could not delete, which :meth:`Table.cleanup` removes later."""
        if storage is None:
            storage = storage_for(self.read.warehouse, self.read.storage_options, self.read.table)
        spec = TableSpec.from_json(self.read.spec_json)
        split = self.read.split
        values = dict(split.partition)
        written: list[FileEntry] = []
        if spec.sequence_by:
            return self._fold_sequenced(storage, spec, values)
        if self.partial:
            return self._fold_newest(storage, spec, values)
        try:
            batches = SplitReader(storage, spec, split, self.read.options).batches()
            for table in gather_batches(batches, CHUNK_ROWS):
                # Merged output is sorted per window only; every file must be sorted by key.
                table = table.take(pa.array(sort_indices([table.column(c) for c in spec.primary_key])))
                # (the unsorted rows are freed here: gather_batches keeps none of them)
                rows = table.append_column(
                    pa.field(OP_COLUMN, pa.int8(), nullable=False),
                    pa.array(np.full(table.num_rows, OP_PUT, np.int8)),
                )
                for entry in write_prepared(
                    storage,
                    self.location,
                    spec,
                    [PreparedFile(values, split.bucket, rows, "data")],
                    first_order=len(written),
                    row_group_rows=self.row_group_rows,
                    compression=self.compression,
                    compression_level=self.compression_level,
                ):
                    entry.seq = self.seq
                    written.append(entry)
        except BaseException:
            storage.discard(e.path for e in written)
            raise
        return written

    def _fold_sequenced(
        self, storage: Storage, spec: TableSpec, partition: dict[str, str | None]
    ) -> list[FileEntry]:
        """Fold the files of a table with ``sequence_by``, window by window (bounded memory): each key's
        version of highest sequence, deletes included. A delete stays as a tombstone (key, sequence and
        the time it was deleted), so that an event arriving late with a lower sequence cannot bring the key
        back; a full fold drops the tombstones older than ``tombstones_before``. Where every operator is
        ``last`` and rows are whole, the winning version alone is the key's outcome, for the older runs
        a partial fold leaves too; other tables fold by operator (:func:`fold_by_operators`)."""
        split = self.read.split
        reader = SplitReader(storage, spec, split, replace(self.read.options, tombstones=True))
        times = dict(self.commit_micros)
        cutoff = None if self.partial else self.tombstones_before
        written: list[FileEntry] = []
        pending: list[pa.Table] = []
        count = 0

        def flush() -> None:
            nonlocal pending, count
            if not pending:
                return
            rows = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            pending, count = [], 0
            # Live rows and tombstones go to files of their own (one run): the live rows' file holds no
            # delete, so a read passes it on without a copy, and the few tombstones merge beside it. The
            # tombstones' file comes first: where a key keeps both (operators that fold), its tombstone
            # is older than its row on equal sequences.
            dead = np.asarray(rows.column(OP_COLUMN).to_numpy(), dtype=np.int8) == OP_DELETE
            files = []
            if dead.any():
                tombstones = rows.filter(bool_array(dead)) if not dead.all() else rows
                stored = [*tombstone_columns(spec), OP_COLUMN, TOMBSTONE_TIME_COLUMN]
                files.append(PreparedFile(partition, split.bucket, tombstones.select(stored), "delete"))
            if not dead.all():
                live = rows if not dead.any() else rows.filter(bool_array(~dead))
                files.append(
                    PreparedFile(partition, split.bucket, live.drop_columns([TOMBSTONE_TIME_COLUMN]), "data")
                )
            for entry in write_prepared(
                storage,
                self.location,
                spec,
                files,
                first_order=len(written),
                row_group_rows=self.row_group_rows,
                compression=self.compression,
                compression_level=self.compression_level,
            ):
                entry.seq = self.seq
                written.append(entry)

        try:
            for parts in reader.windows():
                fold = fold_by_sequence if spec.all_last else fold_by_operators
                folded = fold(spec, parts, times, cutoff)
                if folded.num_rows:
                    pending.append(folded)
                    count += folded.num_rows
                if count >= CHUNK_ROWS:
                    flush()
            flush()
        except BaseException:
            storage.discard(e.path for e in written)
            raise
        return written

    def _fold_newest(
        self, storage: Storage, spec: TableSpec, partition: dict[str, str | None]
    ) -> list[FileEntry]:
        """Fold the task's files (a split's newest runs) into one run: every key's versions reduced as a
        write reduces a batch's, keeping the resulting operation, so that deletes still hide older rows
        and merge operators still combine with them."""
        schema = pa.schema([f.with_nullable(True) for f in spec.schema])
        parts: list[pa.Table] = []
        ops: list[np.ndarray] = []
        for f in self.read.split.files:  # oldest first: a stable sort keeps each key's versions in order
            md = storage.metadata(f.path, f.size_bytes or None)
            raw = storage.read_row_groups(f.path, range(md.num_row_groups), None, f.size_bytes or None)
            ops.append(np.asarray(raw.column(OP_COLUMN).to_numpy(), dtype=np.int8))
            rows = whole_file_as_table(raw.drop_columns([OP_COLUMN]), spec, md)
            parts.append(
                pa.table(
                    [
                        rows.column(c).cast(schema.field(c).type)
                        if c in rows.column_names
                        else pa.nulls(rows.num_rows, schema.field(c).type)  # a file of delete markers
                        for c in schema.names
                    ],
                    schema=schema,
                )
            )
        versions = pa.concat_tables(parts).combine_chunks()
        op = np.concatenate(ops) if ops else np.zeros(0, np.int8)
        order = sort_indices([versions.column(c) for c in spec.primary_key])
        versions = versions.take(pa.array(order))
        op = op[order]
        starts = group_starts([versions.column(c) for c in spec.primary_key], versions.num_rows)
        rows, op = reduce_versions(
            versions, op, starts, spec.identity_columns, spec.operators, None, **spec.reduce_options
        )
        rows = rows.append_column(pa.field(OP_COLUMN, pa.int8(), nullable=False), pa.array(op, pa.int8()))
        content = "data"
        if rows.num_rows and bool((op == OP_DELETE).all()):
            content, rows = "delete", rows.select([*spec.identity_columns, OP_COLUMN])
        if rows.num_rows == 0:
            return []
        written = write_prepared(
            storage,
            self.location,
            spec,
            [PreparedFile(partition, self.read.split.bucket, rows, content)],
            row_group_rows=self.row_group_rows,
            compression=self.compression,
            compression_level=self.compression_level,
        )
        for entry in written:
            entry.seq = self.seq
        return written


def fold_by_sequence(
    spec: TableSpec,
    parts: Sequence[tuple[FileTask, pa.Table]],
    commit_micros: Mapping[int, int],
    tombstones_before: int | None,
) -> pa.Table:
    """One window of a split of a table with ``sequence_by`` folded: per key its version of highest
    sequence (commit order, then row order, on ties), as rows of every column (identity columns NOT NULL)
    with ``_mere_op`` (PUT for rows, DELETE for tombstones) and ``_mere_deleted_at`` (the time of a
    tombstone's delete: its file's column where it has one, else its file's commit time). Tombstones
    deleted before ``tombstones_before`` (None: none) are left out. ``parts`` are the files' rows of the
    window, files oldest first."""
    fields = [f if f.name in spec.identity_columns else f.with_nullable(True) for f in spec.schema]
    stamp = pa.timestamp("us", tz="UTC")
    aligned, ops, deleted = [], [], []
    for task, rows in parts:
        rows = plain_columns(rows, spec.schema)
        aligned.append(
            pa.Table.from_arrays(
                [
                    (
                        rows.column(f.name)
                        if f.name in rows.column_names
                        else pa.nulls(rows.num_rows, f.type)
                    ).cast(f.type)
                    for f in fields
                ],
                schema=pa.schema(fields),
            )
        )
        op = np.asarray(rows.column(OP_COLUMN).to_numpy(), dtype=np.int8)
        ops.append(op)
        # A file's own commit time stands for its delete markers' (compaction output stores theirs).
        committed = commit_micros.get(task.seq >> SEQ_SHIFT, 2**62)  # unknown: never expires
        when = np.full(rows.num_rows, committed, dtype=np.int64)
        if TOMBSTONE_TIME_COLUMN in rows.column_names:
            stored = rows.column(TOMBSTONE_TIME_COLUMN).cast(stamp).cast(pa.int64())
            when = np.where(
                stored.is_valid().to_numpy(zero_copy_only=False),
                stored.fill_null(0).to_numpy(zero_copy_only=False),
                when,
            )
        deleted.append(np.where(op == OP_DELETE, when, -1))
    versions = pa.concat_tables(aligned).combine_chunks()
    op = np.concatenate(ops)
    when = np.concatenate(deleted)
    keys = [versions.column(c) for c in spec.primary_key]
    order = sort_indices(keys)
    taken = pa.array(order)
    starts = group_starts([k.take(taken) for k in keys], versions.num_rows)
    winners = order[last_by_sequence(starts, [versions.column(c).take(taken) for c in spec.sequence_by])]
    op, when = op[winners], when[winners]
    keep = np.ones(len(winners), dtype=bool)
    if tombstones_before is not None:
        keep = (op != OP_DELETE) | (when >= tombstones_before)
    winners, op, when = winners[keep], op[keep], when[keep]
    rows = versions.take(pa.array(winners))
    tombstone = op == OP_DELETE
    rows = rows.append_column(
        pa.field(OP_COLUMN, pa.int8(), nullable=False),
        pa.array(np.where(tombstone, OP_DELETE, OP_PUT).astype(np.int8)),
    )
    return rows.append_column(
        pa.field(TOMBSTONE_TIME_COLUMN, stamp),
        pa.array(np.where(tombstone, when, 0), pa.int64(), mask=~tombstone).cast(stamp),
    )


def fold_by_operators(
    spec: TableSpec,
    parts: Sequence[tuple[FileTask, pa.Table]],
    commit_micros: Mapping[int, int],
    tombstones_before: int | None,
) -> pa.Table:
    """One window of a split of a table with ``sequence_by`` whose versions fold by operator, engine or
    sequence group (:func:`mere.kernels.fold_sequenced`): per key, a tombstone at the sequence of its
    last reset (a delete, or a PUT), unless deleted before ``tombstones_before``, and its merged row of
    the versions after it, stored as a MERGE (a late version of sequence above the tombstone still
    combines with it). Same columns as :func:`fold_by_sequence`."""
    fields = [f if f.name in spec.identity_columns else f.with_nullable(True) for f in spec.schema]
    stamp = pa.timestamp("us", tz="UTC")
    aligned, ops, times = [], [], []
    present: dict[str, list[np.ndarray]] = {f.name: [] for f in fields}
    for task, rows in parts:
        rows = plain_columns(rows, spec.schema)
        columns = []
        for f in fields:
            has = f.name in rows.column_names
            columns.append((rows.column(f.name) if has else pa.nulls(rows.num_rows, f.type)).cast(f.type))
            present[f.name].append(np.full(rows.num_rows, has))
        aligned.append(pa.Table.from_arrays(columns, schema=pa.schema(fields)))
        ops.append(np.asarray(rows.column(OP_COLUMN).to_numpy(), dtype=np.int8))
        committed = commit_micros.get(task.seq >> SEQ_SHIFT, 2**62)  # unknown: never expires
        when = np.full(rows.num_rows, committed, dtype=np.int64)
        if TOMBSTONE_TIME_COLUMN in rows.column_names:
            stored = rows.column(TOMBSTONE_TIME_COLUMN).cast(stamp).cast(pa.int64())
            when = np.where(
                stored.is_valid().to_numpy(zero_copy_only=False),
                stored.fill_null(0).to_numpy(zero_copy_only=False),
                when,
            )
        times.append(when)
    versions = pa.concat_tables(aligned).combine_chunks()
    order = sort_indices([versions.column(c) for c in (*spec.primary_key, *spec.sequence_by)])
    versions = versions.take(pa.array(order))
    op, when = np.concatenate(ops)[order], np.concatenate(times)[order]
    mask = {c: np.concatenate(v)[order] for c, v in present.items()}
    starts = group_starts([versions.column(c) for c in spec.primary_key], versions.num_rows)
    at, dead, merged, _ = fold_sequenced(
        versions,
        op,
        starts,
        spec.identity_columns,
        spec.operators,
        mask,
        **spec.reduce_options,
        arrival=order,
    )
    if tombstones_before is not None:
        recent = when[at] >= tombstones_before
        at, dead = at[recent], dead.filter(pa.array(recent))
    out = pa.concat_tables([dead, merged])
    kinds = np.concatenate(
        [np.full(len(at), OP_DELETE, np.int8), np.full(merged.num_rows, OP_MERGE, np.int8)]
    )
    deleted = np.concatenate([when[at], np.zeros(merged.num_rows, np.int64)])
    out = out.append_column(pa.field(OP_COLUMN, pa.int8(), nullable=False), pa.array(kinds))
    return out.append_column(
        pa.field(TOMBSTONE_TIME_COLUMN, stamp),
        pa.array(deleted, pa.int64(), mask=kinds != OP_DELETE).cast(stamp),
    )


@dataclass(frozen=True)
class CompactionPlan:
    """What one compaction folds, planned at ``base_version``; picklable."""

    table: str
    table_uuid: str
    base_version: int
    tasks: tuple[CompactionTask, ...]
    remove: tuple[int, ...]  # catalog ids of every input file
    partitions: tuple[str, ...]  # partitions the commit touches (also those folded to nothing)
    planned_micros: int = field(default_factory=now_micros)  # before any output is written

    def staged(self, results: Sequence[Sequence[FileEntry]]) -> StagedChange:
        """The tasks' results (each task's files, in task order) as the commit message that swaps them in
        for the inputs, onto the planned version: what :meth:`mere.Table.commit` takes."""
        add = renumber((f for files in results for f in files), keep_seq=True)
        return StagedChange(
            self.table,
            "compact",
            add,
            sum(f.row_count for f in add),
            read_version=self.base_version,
            removes=RemoveIds(tuple(self.remove), tuple(self.partitions)),
            table_uuid=self.table_uuid,
            written_since=self.planned_micros,
        )
