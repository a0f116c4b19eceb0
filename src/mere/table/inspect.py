"""``Table.inspect``: a table's metadata as Arrow tables."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

from mere.table.context import TableHandle
from mere.table.ops import consumers
from mere.table.versions import current


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

    def consumers(self) -> pa.Table:
        """The table's change-feed consumers, by name: ``name``, ``position`` (the last version it has
        processed), ``lag`` (versions committed after it), ``pending`` (the end of a range it read and has not
        committed, which its next read hands out again; null: none), ``created_at``, ``last_seen`` (its last read or
        commit), ``droppable_after`` (from when an expire that needs the versions it holds drops it: last
        seen plus ``changes.consumer-expiration``; null when that is off or it was dropped), and for one
        that expire dropped, ``dropped_at`` and ``dropped_reason`` (null for a live one).

        Returns:
            One row per consumer.
        """
        ctx = self._table.context
        rows = consumers.listed(ctx)
        newest = current(ctx)
        limit = consumers.expiration(ctx.spec)
        stamp = pa.timestamp("us", tz="UTC")
        return pa.table(
            {
                "name": pa.array([c.name for c in rows], pa.string()),
                "position": pa.array([c.position for c in rows], pa.int64()),
                "lag": pa.array([max(newest - c.position, 0) for c in rows], pa.int64()),
                "pending": pa.array([c.pending for c in rows], pa.int64()),
                "created_at": pa.array([c.created_at for c in rows], stamp),
                "last_seen": pa.array([c.last_seen for c in rows], stamp),
                "droppable_after": pa.array([_after(c.last_seen, limit, c.dropped) for c in rows], stamp),
                "dropped_at": pa.array([c.dropped_at for c in rows], stamp),
                "dropped_reason": pa.array([c.dropped_reason for c in rows], pa.string()),
            }
        )


def _after(seen: dt.datetime, limit: dt.timedelta | None, dropped: bool) -> dt.datetime | None:
    """``seen + limit``; None when there is no limit, the consumer was dropped, or it is beyond the calendar."""
    if limit is None or dropped:
        return None
    try:
        return seen + limit
    except OverflowError:
        return None
