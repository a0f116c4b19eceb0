"""Whether a write that read rows still holds after it lost a race: the commits that beat it changed no
row it read and added none its filter matches.

A write that reads rows (UPDATE, MERGE, deletes by predicate or by looked-up keys) conflicts when a
concurrent commit changed a split its rows can be in (:class:`~mere.table.conflicts.RowsUnchanged`), and is
then evaluated again at the new version. Splits are coarse: on a busy table nearly every concurrent write
changes one, and each new evaluation reads and writes the write's rows again (the soak saw a MERGE take 14
such rounds). Before evaluating again, the commit reads the rows the winners added in the write's scope and
keeps its files when none of them has a key the write read and none matches its filter: evaluated at the
new version, the write would produce the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.kernels import KeySet
from mere.lang.lower import evaluate
from mere.metadata import FileEntry
from mere.read.evolution import read_stored_file
from mere.read.planner import ReadScope, split_filter
from mere.spec import OP_DELETE
from mere.table.context import TableContext, split_label

MAX_WINNER_BYTES = 64 << 20
"""Above this many bytes of winners' files to read, evaluating the write again is the cheaper check."""


@dataclass
class ReadRows:
    """What a reading change's outcome depends on: the ``keys`` it read or was given (a table of the
    primary-key columns), the ``filter`` that chose them (None: the keys alone), and its ``scope``."""

    keys: pa.Table
    filter: Any
    scope: ReadScope


def still_holds(ctx: TableContext, base: int, upto: int, read: ReadRows) -> bool:
    """Whether the commits after ``base`` up to ``upto`` leave ``read``'s outcome as it was at ``base``.

    False whenever it cannot be told cheaply and exactly (a rewrite, a schema change, a filter on columns
    whose merged value a single version does not give, too much to read): the write is then evaluated again.
    """
    spec = ctx.spec
    columns: frozenset[str] | None = frozenset()
    bound = None
    if read.filter is not None:
        bound = split_filter(spec, read.filter).bound
        columns = E.columns(bound)
        if columns is None:
            return False
        values = [c for c in columns if c not in spec.identity_columns]
        if values and not spec.newest_wins(values):
            return False  # the merged value is not one version's: it cannot be read off the winners' rows
    changes = ctx.store.version_range_changes(ctx.table_id, base, upto)
    if base < changes.oldest:
        return False  # versions since base expired: the catalog forgot files their winners added
    operation = {c.version: c.operation for c in changes.commits}
    for c in changes.commits:
        if c.operation == "compact":
            continue
        if c.internal.get("partitions") is None or "schema" in c.summary:
            return False
    added: list[FileEntry] = []
    for f, removed in changes.files:
        label = split_label((f.partition, f.bucket))
        if not read.scope.covers(label):
            continue
        if removed is not None and base < removed <= upto and operation.get(removed) != "compact":
            return False  # rows rewritten or dropped (an overwrite): not a question of keys
        added_by = operation.get(f.added_version if f.added_version is not None else -1)
        if added_by is not None and added_by != "compact" and f.content != "log":
            added.append(f)
    if sum(f.size_bytes for f in added) > MAX_WINNER_BYTES:
        return False
    if not added:
        return True
    keys = KeySet(read.keys, list(spec.primary_key)) if read.keys.num_rows else None
    hit_expr = None if bound is None else pc.coalesce(E.to_pyarrow(bound, spec.schema), pa.scalar(False))
    for rows, ops, present in _winner_rows(ctx, added):
        if keys is not None and np.asarray(keys.contains(rows)).any():
            return False
        if hit_expr is None:
            continue
        assert columns is not None
        if not columns <= present:
            return False  # a partial row: the filter's columns come from older versions
        live = rows if ops is None else rows.filter(pa.array(ops != OP_DELETE))
        if live.num_rows and pc.any(evaluate(live, {"hit": hit_expr}).column("hit")).as_py():
            return False
    return True


def _winner_rows(
    ctx: TableContext, files: Iterable[FileEntry]
) -> Iterable[tuple[pa.Table, np.ndarray | None, frozenset[str]]]:
    """Each file's rows as the table's columns, its row operations, and the columns it holds."""
    spec = ctx.spec
    for f in files:
        stored = read_stored_file(ctx.storage, f)
        present = frozenset(spec.schema.names if f.columns is None else f.columns)
        yield stored.as_table(spec), stored.ops, present
