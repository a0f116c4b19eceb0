"""Changing a table's ``sequence_by`` after creation, as a versioned change of its spec.

A new order must not reorder what the table holds: the change is refused unless every key has a single
stored version (every split is one sorted run: the table is empty, or was just compacted), since only
then no version can win under one order and lose under the other. Setting a sequence also needs the
columns to hold no NULL and the table no delete marker (markers written without a sequence could not be
ordered). The change reads the table, so a commit that changes rows meanwhile makes it check again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mere.errors import InvalidInput
from mere.metadata import CommitResult
from mere.spec import OP_COLUMN, OP_DELETE, checked_sequence_by
from mere.table.commit import Change, Commit
from mere.table.conflicts import RowsUnchanged
from mere.table.context import SchemaChange, TableContext, TableHandle, split_label
from mere.table.write_checks import WriteChecks

SUMMARY_KEY = "sequence_by"


def set_sequence_by(table: TableHandle, columns: Any) -> CommitResult | None:
    """See :meth:`mere.Table.set_sequence_by`."""
    ctx = table.context
    new = replace(ctx.spec, sequence_by=checked_sequence_by(ctx.spec, columns, ctx.name))
    if new.sequence_by == ctx.spec.sequence_by:
        return None
    step = f"sequence_by {list(new.sequence_by)}" if new.sequence_by else "sequence_by cleared"
    commit = Commit(replace(ctx, schema_change=SchemaChange(new, (step,))))
    commit.add_read(SequenceChange(new.sequence_by), "a change of sequence_by")
    return commit.run()


@dataclass(frozen=True)
class SequenceChange:
    """The check that a change to ``columns`` reorders nothing, as the recipe of the change's commit
    (evaluated again on the version a retry commits on)."""

    columns: tuple[str, ...]

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """Check the table at ``base``; the change writes no file."""
        single_versions(ctx, base, self.columns)
        return Change(
            "set-sequence-by",
            [],
            0,
            {SUMMARY_KEY: list(self.columns)},
            rule=RowsUnchanged(frozenset(), True, "change of sequence_by"),
        )


def single_versions(ctx: TableContext, base: int, columns: tuple[str, ...]) -> None:
    """Refuse (InvalidInput) unless the table at ``base`` holds one version per key, and, for a sequence
    to set, no delete marker and no NULL in ``columns``."""
    files = ctx.handle.files_at(base)
    if not files:
        return
    runs: dict[tuple[str, int], set[int]] = defaultdict(set)
    for f in files:
        runs[(f.partition, f.bucket)].add(f.seq or 0)
    crowded = sorted(split for split, seqs in runs.items() if len(seqs) > 1)
    if crowded:
        raise InvalidInput(
            f"{ctx.name}: sequence_by changes only where every key has one stored version, and split "
            f"{split_label(crowded[0])} (of {len(crowded)}) holds {len(runs[crowded[0]])} sorted runs, whose "
            "versions the new order could reorder: compact() the table, then change it"
        )
    if not columns:
        return  # one version per key: commit order reads them as the sequence did
    storage = ctx.storage
    for f in files:
        if f.content == "delete":
            deletes = True
        else:
            md = storage.metadata(f.path, f.size_bytes or None)
            ops = storage.read_row_groups(f.path, range(md.num_row_groups), [OP_COLUMN], f.size_bytes or None)
            deletes = bool((np.asarray(ops.column(OP_COLUMN).to_numpy()) == OP_DELETE).any())
        if deletes:
            raise InvalidInput(
                f"{ctx.name}: split {split_label((f.partition, f.bucket))} holds delete markers, which "
                "were written without a sequence: compact() the table (a full fold drops them), then set "
                "sequence_by"
            )
    for batch in ctx.handle.scan(columns=list(columns), version=base).to_batches():
        for c in columns:
            if batch.column(c).null_count:
                raise InvalidInput(
                    f"{ctx.name}: sequence column {c!r} is NULL in some stored rows; every version needs "
                    "its sequence: fill them in (Table.update), compact(), then set sequence_by"
                )
