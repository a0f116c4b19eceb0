"""The metadata model: what a catalog stores about tables, their files and their versions.

Plain dataclasses, free of SQL, so that workers that only read or stage files (Spark, Dask or Ray
tasks) never import the catalog's database layer. The catalog (``mere.catalog``) persists these; the
table layer builds on them; users meet :class:`Snapshot` and :class:`CommitResult`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SEQ_SHIFT = 24  # file sequence = (commit version << SEQ_SHIFT) | order of the file within its commit

# Summary keys the commit protocol keeps for conflict detection; not part of the public summary.
INTERNAL_SUMMARY_KEYS = frozenset({"partitions", "splits", "sum_max", "change_log", "change_log_rows"})


def now_micros() -> int:
    """Microseconds since the epoch, now."""
    return time.time_ns() // 1000


def micros_to_datetime(micros: int) -> dt.datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def datetime_to_micros(when: dt.datetime) -> int:
    """An aware datetime as microseconds since the epoch."""
    return (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class TableRecord:
    """A catalog's row for a table: identity, location and the layout (``spec``, as JSON) at load time."""

    id: int
    namespace: str
    name: str
    uuid: str
    location: str
    spec: str
    version: int

    @property
    def identifier(self) -> str:
        """``namespace.name``."""
        return f"{self.namespace}.{self.name}"


@dataclass
class FileEntry:
    """A data file as the catalog knows it. ``id``/``seq``/``added_version`` are set once committed."""

    path: str
    partition: str  # canonical JSON object of partition values as strings
    bucket: int
    row_count: int
    size_bytes: int
    content: str = "data"  # "data", "delete" (delete markers only) or "log" (what a commit did to its keys)
    columns: list[str] | None = None  # present columns when the file holds a subset (partial upsert)
    order: int = 0  # order among the files of one commit
    seq: int | None = None  # explicit sequence (compaction keeps its inputs' newest sequence)
    id: int | None = None
    added_version: int | None = None
    # Rows of a just written file that stand for more rows of their write (little-endian int64 pairs:
    # row, how many more): the commit counts those rows too when they turn out stale. Not kept by catalogs.
    ties: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class VersionRangeChanges:
    """What a catalog holds about the commits ``after < version <= upto`` of a table, read at once: the
    table's newest and oldest readable versions, those commits (oldest first) and the files they added or
    removed, each with the version that removed it (None: live at ``upto``)."""

    current: int
    oldest: int
    commits: list[Snapshot]
    files: list[tuple[FileEntry, int | None]]


@dataclass(frozen=True)
class Snapshot:
    """One version of a table: when and how it was committed, and a summary of what changed.

    ``summary`` holds counts (``rows``, ``added_files``, ``removed_files``, ``added_bytes``,
    ``deleted_rows`` and ``delete_markers`` (older commits: ``deleted_keys``), ``read_version``: the
    version the writer read). ``expired`` marks versions given up by :meth:`Table.expire
    <mere.Table.expire>`: no longer readable. ``idempotency_key`` is the key the write was committed with
    (None for writes without one): it tells which of a pipeline's batches made a version.
    """

    version: int
    committed_at: dt.datetime
    operation: str
    summary: Mapping[str, Any]
    parent: int | None = None
    expired: bool = False
    internal: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    idempotency_key: str | None = None

    @staticmethod
    def from_stored(
        version: int,
        committed_micros: int,
        operation: str,
        summary: Mapping[str, Any],
        expired: bool = False,
        idempotency_key: str | None = None,
    ) -> Snapshot:
        """A snapshot from what a catalog stores (the summary as written by the commit)."""
        public = {k: v for k, v in summary.items() if k not in INTERNAL_SUMMARY_KEYS}
        internal = {k: v for k, v in summary.items() if k in INTERNAL_SUMMARY_KEYS}
        return Snapshot(
            version,
            micros_to_datetime(committed_micros),
            operation,
            public,
            version - 1 if version > 0 else None,
            expired,
            internal,
            idempotency_key,
        )

    @property
    def committed_micros(self) -> int:
        """The commit time as microseconds since the epoch (UTC)."""
        return datetime_to_micros(self.committed_at)

    @property
    def partitions(self) -> list[str] | None:
        """Partitions this version wrote (canonical JSON), or None when it may have touched any."""
        parts = self.internal.get("partitions")
        return None if parts is None else list(parts)

    def __repr__(self) -> str:
        s = self.summary
        parts = [
            f"version={self.version}",
            f"operation={self.operation!r}",
            f"committed_at='{self.committed_at.isoformat(timespec='milliseconds')}'",
        ]
        if "rows" in s:
            parts.append(f"rows={s['rows']}")
        if "added_files" in s:
            parts.append(f"files=+{s['added_files']}/-{s.get('removed_files', 0)}")
        if self.internal.get("partitions") is not None:
            parts.append(f"partitions={len(self.internal['partitions'])}")
        if self.expired:
            parts.append("expired=True")
        return f"Snapshot({', '.join(parts)})"


@dataclass(frozen=True)
class ConsumerRecord:
    """A change-feed consumer as the catalog stores it: a name of a table with the last version it has
    processed (``position``: its feed starts after it, and ``expire`` keeps every version from it on).

    ``pending`` is the end of the range of changes last handed to it and not committed yet (None: none):
    its next read hands out that same range again, so a batch it applied in part is read whole before
    anything after it. ``last_seen`` is the last time it read or committed. ``dropped_at`` and
    ``dropped_reason`` are set when ``expire`` dropped it for being unseen too long (its next use raises
    :class:`~mere.errors.ConsumerDropped`); None for a live consumer.
    """

    name: str
    position: int
    created_at: dt.datetime
    last_seen: dt.datetime
    pending: int | None = None
    dropped_at: dt.datetime | None = None
    dropped_reason: str | None = None

    @property
    def dropped(self) -> bool:
        """Whether ``expire`` dropped it."""
        return self.dropped_at is not None


@dataclass(frozen=True)
class ExpireResult:
    """What a catalog's ``expire`` did: the paths no row references any more (the caller deletes them),
    the oldest readable version after it, and the consumers it dropped for being unseen too long."""

    paths: list[str]
    oldest: int
    dropped: list[ConsumerRecord] = field(default_factory=list)


# Summary entries of deletes: the rows that existed and were deleted (where the write read them), the
# delete markers written, and the markers of blind deletes (given keys, never read: how many of them
# existed is unknown). Commits before these entries recorded their markers as ``deleted_keys``.
DELETED_ROWS = "deleted_rows"
STALE_ROWS = "stale_rows"  # rows of a write to a table with sequence_by that a higher sequence replaced
# Delete markers a commit wrote in other partitions than its rows' (tables with table-wide keys): keys
# that moved out of a partition, or incoming rows that lost to their key's version in another partition.
MOVED_KEYS = "moved_keys"
DELETE_MARKERS = "delete_markers"
BLIND_DELETE_MARKERS = "blind_delete_markers"


def _deleted_rows(operation: str, s: Mapping[str, Any]) -> int | None:
    if DELETE_MARKERS in s:
        return None if s.get(BLIND_DELETE_MARKERS) else int(s.get(DELETED_ROWS, 0) or 0)
    # Commits written before the entries above.
    if operation == "merge":
        return int(s.get("deleted", 0) or 0)
    return int(s.get("deleted_keys", s.get(DELETED_ROWS, 0)) or 0)


@dataclass(frozen=True)
class CommitResult:
    """What a write committed: the new version and what changed in it.

    ``rows_deleted`` counts rows that existed and were deleted (a DELETE's or a MERGE's count, as DuckDB
    reports it): a delete of keys that no row holds deletes none. It is None for a blind delete of given
    keys (:meth:`Table.delete <mere.Table.delete>` of a table of keys, a staged delete), which writes a
    marker per key without reading which keys exist. ``delete_markers`` is the number of delete markers
    written. ``stale_rows`` (tables with ``sequence_by`` or ``first_row``; None for others and for
    writes that do not count them: deletes, MERGE, UPDATE) counts the rows of the write ignored as stale:
    those that a row of the same key with a higher sequence replaced, in the same write or already stored
    (in the key's partition, or anywhere for table-wide keys) at the version the write committed on
    (``first_row``: those that an earlier row of the same key, or one of lower sequence, in the same write
    made the write ignore). ``moved_keys``
    (tables with ``key_scope="table"``) counts the delete markers the commit wrote in other partitions
    than its rows': keys that moved out of a partition, and rows that lost to their key's version in
    another one. ``already_committed`` is True when an idempotency key named a commit that
    had landed before: the result then describes that earlier commit and nothing new was written.
    ``no_change`` is True when
    the write had nothing to commit (no rows to write, none to remove, no property or schema change): no
    version was made, ``version`` is the version the write read, and every count is 0.
    """

    version: int
    operation: str
    committed_at: dt.datetime
    rows_written: int
    rows_deleted: int | None
    files_added: int
    files_removed: int
    bytes_added: int
    already_committed: bool = False
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)
    delete_markers: int = 0
    no_change: bool = False
    stale_rows: int | None = None
    moved_keys: int = 0

    @staticmethod
    def unchanged(snapshot: Snapshot, operation: str) -> CommitResult:
        """The result of a write of ``operation`` that committed nothing on top of ``snapshot``."""
        return CommitResult(
            version=snapshot.version,
            operation=operation,
            committed_at=snapshot.committed_at,
            rows_written=0,
            rows_deleted=0,
            files_added=0,
            files_removed=0,
            bytes_added=0,
            snapshot=snapshot,
            no_change=True,
        )

    @staticmethod
    def dropped_since(version: int | None, committed_at: dt.datetime) -> CommitResult:
        """A replayed catalog transaction's result for a table dropped since it committed there: its commit's
        record went with the table, so the result has its ``version`` (None: it changed nothing there, given
        as 0) and the transaction's time only; counts are 0 and ``snapshot`` is None."""
        return CommitResult(
            version=version or 0,
            operation="transaction",
            committed_at=committed_at,
            rows_written=0,
            rows_deleted=0,
            files_added=0,
            files_removed=0,
            bytes_added=0,
            already_committed=True,
            no_change=version is None,
        )

    @staticmethod
    def of(snapshot: Snapshot, already_committed: bool = False) -> CommitResult:
        """The result of the commit that made ``snapshot``."""
        s = snapshot.summary
        written = 0 if snapshot.operation in ("delete", "truncate", "compact") else int(s.get("rows", 0) or 0)
        return CommitResult(
            version=snapshot.version,
            operation=snapshot.operation,
            committed_at=snapshot.committed_at,
            rows_written=written,
            rows_deleted=_deleted_rows(snapshot.operation, s),
            files_added=int(s.get("added_files", 0)),
            files_removed=int(s.get("removed_files", 0)),
            bytes_added=int(s.get("added_bytes", 0)),
            already_committed=already_committed,
            snapshot=snapshot,
            delete_markers=int(s.get(DELETE_MARKERS, s.get("deleted_keys", 0)) or 0),
            stale_rows=None if STALE_ROWS not in s else int(s[STALE_ROWS]),
            moved_keys=int(s.get(MOVED_KEYS, 0) or 0),
        )

    @property
    def summary(self) -> Mapping[str, Any]:
        """The committed version's summary (see :class:`Snapshot`)."""
        return {} if self.snapshot is None else self.snapshot.summary

    def __repr__(self) -> str:
        parts = [
            f"version={self.version}",
            f"operation={self.operation!r}",
            f"committed_at='{self.committed_at.isoformat(timespec='milliseconds')}'",
        ]
        if self.rows_written:
            parts.append(f"rows_written={self.rows_written}")
        if self.rows_deleted:
            parts.append(f"rows_deleted={self.rows_deleted}")
        if self.delete_markers and self.rows_deleted != self.delete_markers:
            parts.append(f"delete_markers={self.delete_markers}")
        parts.append(f"files=+{self.files_added}/-{self.files_removed}")
        if self.snapshot is not None and self.snapshot.partitions is not None and not self.no_change:
            parts.append(f"partitions={len(self.snapshot.partitions)}")
        if self.already_committed:
            parts.append("already_committed=True")
        if self.no_change:
            parts.append("no_change=True")
        return f"CommitResult({', '.join(parts)})"


@dataclass
class ConcurrentChanges:
    """What landed between a writer's read version and the version it commits on top of."""

    commits: list[Snapshot] = field(default_factory=list)
    removed_file_ids: set[int] = field(default_factory=set)

    def partitions_touched(self) -> set[str] | None:
        """Partitions written by the concurrent commits; None means the whole table."""
        out: set[str] = set()
        for c in self.commits:
            parts = c.partitions
            if parts is None:
                return None
            out.update(parts)
        return out


@dataclass(frozen=True)
class NewTable:
    """A table a catalog transaction creates in the same database transaction as its first commit."""

    namespace: str
    name: str
    location: str
    spec: str
    uuid: str


# How far a writer's clock may be from the store's before a cleanup fence can be misjudged: a commit
# whose clock-based start comes within this of a fence gives its files' own store times instead.
CLOCK_MARGIN_MICROS = 15 * 60 * 1_000_000


@dataclass
class CommitRequest:
    """One table's commit, prepared at ``base_version`` and ready to land: what
    :meth:`SqlCatalog.commit <mere.catalog.sql.SqlCatalog.commit>` takes for one table, and
    :meth:`SqlCatalog.commit_tables <mere.catalog.sql.SqlCatalog.commit_tables>` for several at once.

    ``validate`` sees what landed on the table since ``base_version`` and raises
    :class:`~mere.errors.CommitConflict` when the commit cannot be rebased onto it. ``create``: the table
    does not exist yet and is created (version 0) in the same database transaction (``table_id`` is then
    a placeholder, and ``base_version`` 0).
    """

    table_id: int
    base_version: int
    operation: str
    add: Sequence[FileEntry] = ()
    remove: Iterable[int] = ()
    summary: dict[str, Any] | None = None
    validate: Callable[[ConcurrentChanges], None] | None = None
    idempotency_key: str | None = None
    spec: str | None = None
    restores: int | None = None
    create: NewTable | None = None
    # Microseconds since the epoch when the commit's oldest new file began to be written: a cleanup that
    # may delete files older than a later time (see ``SqlCatalog.fence_cleanup``) refuses the commit.
    # By the writer's clock (trusted within ``CLOCK_MARGIN_MICROS``), or, ``written_since_exact``, the
    # oldest file's time as the store gives it, the time cleanup compares with its cutoff.
    written_since: int | None = None
    written_since_exact: bool = False
