"""``Table.inspect``: a table's metadata as Arrow tables."""

from __future__ import annotations

import json

import pyarrow as pa

from mere.table.context import TableHandle


class Inspect:
    """A table's metadata as Arrow tables, one convention for every kind (as pyiceberg's ``inspect``)."""

    def __init__(self, table: TableHandle) -> None:
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
        ctx = self._table.context
        history = ctx.store.history(ctx.table_id)
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
