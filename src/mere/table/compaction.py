"""Compaction in three steps, so that an engine can run the middle one on many machines.

1. :meth:`Table.plan_compaction` (driver): pick the splits to fold at one table version.
2. :meth:`CompactionTask.run` (any worker with storage access, no catalog): merge one split's files and
   write the result as key-sorted files; nothing is visible yet.
3. :meth:`Table.commit_compaction` (driver): swap all tasks' files in for their inputs in one commit.

The new files keep the sequence number of the newest file they replace, so writes that commit between
steps 1 and 3 still merge on top of them. A commit whose inputs were meanwhile replaced (an overwrite or
another compaction) raises :class:`~mere.errors.CommitConflict` and deletes the new files: plan again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mere.io import Storage
from mere.metadata import FileEntry
from mere.read.merge import sort_indices
from mere.read.reader import SplitReader, gather_batches
from mere.spec import OP_COLUMN, OP_PUT, TableSpec
from mere.table.scan import ScanTask, storage_for
from mere.write.writer import PreparedFile, write_prepared

CHUNK_ROWS = 1 << 20  # rows sorted and written per output file


@dataclass(frozen=True)
class CompactionTask:
    """One split to fold; self-contained and picklable like :class:`~mere.table.scan.ScanTask`."""

    read: ScanTask  # the split's merged rows at the planned version, every column
    location: str  # the table's directory, relative to the warehouse
    seq: int  # the newest input file's sequence number: the new files keep it
    row_group_rows: int | None
    compression: str
    compression_level: int | None

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
        try:
            batches = SplitReader(storage, spec, split, self.read.options).batches()
            for table in gather_batches(batches, CHUNK_ROWS):
                # Merged output is sorted per window only; every file must be sorted by key.
                table = table.take(pa.array(sort_indices([table.column(c) for c in spec.primary_key])))
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


@dataclass(frozen=True)
class CompactionPlan:
    """What one compaction folds, planned at ``base_version``; picklable."""

    table: str
    table_uuid: str
    base_version: int
    tasks: tuple[CompactionTask, ...]
    remove: tuple[int, ...]  # catalog ids of every input file
    partitions: tuple[str, ...]  # partitions the commit touches (also those folded to nothing)
