"""Every conflict rule of the commit path, as data (the table in docs/concepts.md, "Transactions, commits
and conflicts", documents them; keep the two in sync).

A commit reads the table at some version and lands on the newest one. What landed in between is a
:class:`~mere.metadata.ConcurrentChanges`; each change of the commit names the rule it follows, and the
catalog runs the rules (:func:`validator`) inside its commit transaction:

- **Blind writes** (upserts, appends, deletes of given keys): no rule. They rebase onto whatever landed,
  since merge on read orders them by commit.
- :class:`RowsUnchanged`: writes that read rows (deletes by predicate, MERGE, UPDATE, and every write
  that logs its changes with ``changes.log``) conflict when a concurrent commit changed rows in the splits
  they read, or (deletes, MERGE, UPDATE) in any split their filter can reach, one empty or absent when
  they read included (any split, for a MERGE with a NOT MATCHED BY SOURCE clause); compactions change no
  row.
- :class:`ChecksHold`: upserts with checks (NOT NULL partial rows, integer sums) conflict when a
  concurrent commit changed the splits they checked (for sums: added more than the headroom left).
- :class:`BucketsUnchanged`: blind writes to a table with table-wide keys (``key_scope="table"``) read
  where their keys live in their buckets, in every partition: they conflict when a concurrent commit
  changed rows in one of those buckets (of any partition), and are retried (the lookup runs again).
- :class:`PartitionsUnchanged`: overwrites and truncates conflict when a concurrent commit wrote to the
  partitions they replace.
- **Removed files** that a concurrent commit already removed (compaction racing an overwrite, copy-on-write
  deletes and updates racing anything that removed their files) always conflict: the catalog refuses them.
- :class:`PropertiesUnchanged`: a property change conflicts with a concurrent property change.
- :class:`ColumnsUnchanged` and :func:`columns_current`: every commit fails with ``SchemaChanged`` (not
  retried) when the table's columns changed after its handle read them, so nothing is ever written under
  a schema its writer did not see.
- :class:`NothingLanded` and :func:`not_overtaken`: a rollback replaces the whole table state: it
  conflicts with every concurrent commit, and is recomputed only when the commits that landed were
  compactions; otherwise it raises ``CommitConflict`` rather than undo a write it never saw.

A lost race (:func:`lost_race`) is retried under :data:`mere.retry.COMMIT_RETRIES`: changes that read
rows are evaluated again at the new version first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mere.errors import CommitConflict, CommitFailed, OutlivedCleanup, SchemaChanged
from mere.metadata import ConcurrentChanges, Snapshot
from mere.read.planner import ReadScope
from mere.table.context import (
    TableContext,
    columns_changed,
    partition_matches,
    partition_values,
    stale_columns,
)


class Rule(Protocol):
    """A conflict rule: raises when the concurrent changes break it."""

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""


@dataclass(frozen=True)
class RowsUnchanged:
    """No concurrent commit changed rows in the splits read (any split, when ``full``), nor in a split of
    ``scope``; ``reader`` names the change in the error (``write``, ``MERGE``).

    ``scope`` matters to writes that read a filter's rows (UPDATE, MERGE, deletes by predicate or by
    looked-up keys): the rows a concurrent commit adds in a split that was empty (or absent) when the
    write read it match the filter as much as those of the splits read, and the write must see them.
    """

    splits: frozenset[str]
    full: bool = False
    reader: str = "write"
    scope: ReadScope | None = None

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        for c in changes.commits:
            if c.operation == "compact":
                continue  # compaction changes no row
            touched = c.internal.get("splits")
            if (
                self.full
                or c.internal.get("partitions") is None
                or touched is None
                or self.splits & set(touched)
                or (self.scope is not None and any(self.scope.covers(label) for label in touched))
            ):
                raise CommitConflict(f"{table}: rows this {self.reader} read changed in version {c.version}")


@dataclass(frozen=True)
class ChecksHold:
    """An upsert's checks stay true: no concurrent commit changed the ``touched`` splits where the checks
    read rows (``reads_rows``: keys that must exist), nor added more to a sum column than its headroom."""

    touched: frozenset[str]
    reads_rows: bool
    headroom: Mapping[str, int] = field(default_factory=dict)

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        used: dict[str, int] = defaultdict(int)
        for c in changes.commits:
            if c.operation == "compact":
                continue  # compaction changes no row
            splits = c.internal.get("splits")
            if c.internal.get("partitions") is None or splits is None:
                raise CommitConflict(f"{table}: version {c.version} rewrote data this write checked")
            if not self.touched & set(splits):
                continue
            if self.reads_rows:
                raise CommitConflict(f"{table}: keys this write updates changed in version {c.version}")
            if c.operation == "delete":
                continue  # deletes only lower sums
            added = c.internal.get("sum_max")
            if added is None:
                raise CommitConflict(f"{table}: version {c.version} changed sums this write checked")
            for col in self.headroom:
                used[col] += int(added.get(col, 0))
                if used[col] > self.headroom[col]:
                    raise CommitConflict(f"{table}: concurrent sums of {col!r} leave too little room")


@dataclass(frozen=True)
class BucketsUnchanged:
    """No concurrent commit changed rows in these buckets of any partition (table-wide keys: a key's
    bucket depends on the key alone, so a concurrent write of one of the keys lands in one of them)."""

    buckets: frozenset[int]

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        for c in changes.commits:
            if c.operation == "compact":
                continue  # compaction changes no row
            touched = c.internal.get("splits")
            if c.internal.get("partitions") is None or touched is None:
                raise CommitConflict(f"{table}: version {c.version} rewrote keys this write looked up")
            if any(int(label.rsplit("#", 1)[1]) in self.buckets for label in touched):
                raise CommitConflict(
                    f"{table}: keys this write looked up in other partitions changed in version {c.version}"
                )


@dataclass(frozen=True)
class PartitionSet:
    """Partitions an overwrite replaces: every one (neither given), those matching ``wanted`` (column ->
    value as the partition JSON spells it), and/or (dynamic overwrite) exactly those in ``present``."""

    wanted: Mapping[str, str | None] | None = None
    present: frozenset[tuple[tuple[str, str | None], ...]] | None = None

    @property
    def whole(self) -> bool:
        """Whether this is the whole table."""
        return self.wanted is None and self.present is None

    def hit(self, partition: str) -> bool:
        """Whether a partition (JSON) is one of them."""
        if self.present is not None and partition_values(partition) not in self.present:
            return False
        return self.wanted is None or partition_matches(partition, self.wanted)


@dataclass(frozen=True)
class PartitionsUnchanged:
    """No concurrent commit wrote to the replaced partitions (an overwrite then replaces what is there)."""

    target: PartitionSet

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        other = changes.partitions_touched()
        if self.target.whole or other is None or any(self.target.hit(p) for p in other):
            raise CommitConflict(f"{table}: a concurrent commit wrote to the overwritten data")


@dataclass(frozen=True)
class NothingLanded:
    """No commit at all landed meanwhile (a rollback replaces the whole table state)."""

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        if changes.commits:
            raise CommitConflict(f"{table}: version {changes.commits[0].version} landed during the rollback")


@dataclass(frozen=True)
class ColumnsUnchanged:
    """No concurrent commit changed the table's columns (``SchemaChanged``: not retried)."""

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        for c in changes.commits:
            if "schema" in c.summary:
                raise SchemaChanged(
                    f"{table}: the table's columns changed concurrently in version {c.version}; "
                    "refresh() the table and write again"
                )


@dataclass(frozen=True)
class PropertiesUnchanged:
    """No concurrent commit changed the table's properties."""

    def check(self, table: str, changes: ConcurrentChanges) -> None:
        """Raise (CommitConflict, SchemaChanged) when ``changes`` break the rule."""
        for c in changes.commits:
            if "properties" in c.summary:
                raise CommitConflict(f"{table}: properties changed concurrently in version {c.version}")


class Overtaken(CommitConflict):
    """A rollback found a commit (not a compaction) that landed after it read the table."""


def validator(table: str, rules: Iterable[Rule]) -> Callable[[ConcurrentChanges], None]:
    """The catalog's commit check: every rule, in order."""
    checks = list(rules)

    def validate(changes: ConcurrentChanges) -> None:
        for rule in checks:
            rule.check(table, changes)

    return validate


def columns_current(ctx: TableContext, base: int) -> None:
    """The handle's columns are the table's: no commit since the handle loaded its spec changed them.

    Versions up to ``ctx.columns_seen`` were checked already (a commit of this handle checked them), and
    those after ``base`` are :class:`ColumnsUnchanged`'s: a handle writing on top of its own last commit
    asks the catalog nothing more."""
    if base <= ctx.columns_seen:
        return
    version = columns_changed(ctx)
    if version is not None:
        raise stale_columns(ctx.name, version)


def not_overtaken(table: str, landed: Iterable[Snapshot], target: int) -> None:
    """A rollback to ``target`` refuses (:class:`Overtaken`) when a commit other than a compaction landed
    after it read the table: it would undo a write it never saw."""
    for snap in landed:
        if snap.operation != "compact":
            raise Overtaken(
                f"{table}: version {snap.version} ({snap.operation}) landed while rolling back to "
                f"version {target}; nothing was changed: look at it, then roll back again if it "
                "should be undone too"
            )


def lost_race(error: BaseException) -> bool:
    """Whether a failed commit attempt lost a race (and may be tried again)."""
    return isinstance(error, (CommitConflict, CommitFailed)) and not isinstance(
        error, (SchemaChanged, Overtaken, OutlivedCleanup)
    )
