"""Catalog transactions: changes to several tables that commit together, one new version per table, or
none at all; and catalog snapshots: one read point for every table.

A :class:`CatalogTransaction` holds one :class:`~mere.table.transaction.Transaction` per table (its
share). Each share builds its table's :class:`~mere.table.commit.Commit` as a single-table transaction
does; at the end every commit is prepared at its base version (:meth:`Commit.prepare
<mere.table.commit.Commit.prepare>`) and the catalog lands them in one database transaction
(:meth:`SqlCatalog.commit_tables <mere.catalog.sql.SqlCatalog.commit_tables>`), each checked by its own
table's conflict rules. A lost race on any table rebases every table and tries again under the retry
policy: all tables are checked again. A single-table transaction is the same machinery with one table
landed by :meth:`SqlCatalog.commit <mere.catalog.sql.SqlCatalog.commit>`.

The commits of one catalog transaction share one commit time, never older than any of the tables'
newest commits: a read point by time (:meth:`Catalog.snapshot <mere.Catalog.snapshot>` with ``as_of``)
sees all of a transaction's versions or none of them.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pyarrow as pa

from mere.errors import (
    CommitConflict,
    CommitStateUnknown,
    InvalidInput,
    NoSuchTable,
    SchemaChanged,
)
from mere.metadata import (
    CommitRequest,
    CommitResult,
    ConsumerRecord,
    FileEntry,
    NewTable,
    Snapshot,
    TableRecord,
)
from mere.retry import COMMIT_RETRIES, RetryPolicy
from mere.spec import TableSpec
from mere.table.commit import Commit, PreparedCommit, check_idempotency_key, discard, discard_unreferenced
from mere.table.conflicts import lost_race
from mere.table.context import CatalogHandle, MetadataStore, is_handle
from mere.table.scan import Scan
from mere.table.table import Table
from mere.table.transaction import Transaction

_OPEN = threading.local()  # the catalogs with a catalog transaction's ``with`` block open, per thread


class TableOpener(CatalogHandle, Protocol):
    """What a catalog transaction asks of its catalog (``mere.Catalog`` is one)."""

    def table(self, name: str) -> Table:
        """Open a table."""

    def table_name(self, name: str) -> str:
        """``namespace.table`` of a table name (checked)."""

    @property
    def new_table(self) -> Callable[..., tuple[NewTable, TableSpec]]:
        """Checks a table to create (name, schema and options), creating nothing."""


@dataclass
class _Share:
    """One table of a catalog transaction: its transaction, and the table it creates (if it does)."""

    tx: Transaction
    create: NewTable | None = None


class CatalogTransaction:
    """Changes to several tables of a catalog that commit together: one new version per changed table,
    or nothing at all (on an error, a lost race that retries cannot win, or a killed process).

    ::

        with cat.transaction(idempotency_key="batch-42") as tx:
            tx.table("sales.orders").upsert(orders)
            tx.table("sales.lines").delete("order_id = 7").upsert(lines)

    :meth:`table` gives the table's share: a :class:`~mere.table.transaction.Transaction` (upsert, append,
    delete, update, overwrite, truncate, set_properties, merge, evolve) that commits with this one. Each
    share reads its table as of its first use; the conflict rules are each table's own
    (docs/concepts.md). Use it as a context manager (it commits when the block ends, and is discarded if
    the block raises), or call :meth:`commit` / :meth:`abort`.

    With an ``idempotency_key`` the transaction commits at most once: when a catalog transaction with that
    key has landed, its shares do nothing and :meth:`commit` returns that transaction's results
    (``already_committed=True``) for every table; opening a table it did not commit raises
    :class:`~mere.errors.InvalidInput`.
    """

    def __init__(
        self,
        catalog: TableOpener,
        idempotency_key: str | None = None,
        retries: RetryPolicy = COMMIT_RETRIES,
    ) -> None:
        check_idempotency_key("catalog transaction", idempotency_key)
        self.catalog = catalog
        self.idempotency_key = idempotency_key
        self.retries = retries
        self.state = "open"  # open, committing, committed, aborted
        self._shares: dict[str, _Share] = {}
        self.results: dict[str, CommitResult] = {}
        self._prior = None if idempotency_key is None else catalog.sql.find_transaction(idempotency_key)
        self._entered = False

    def __repr__(self) -> str:
        return f"CatalogTransaction({sorted(self._shares)}, {self.state})"

    def __enter__(self) -> CatalogTransaction:
        # A ``with`` block of a catalog transaction inside another's, on one catalog and thread, would
        # commit apart from it: refused (every table's change belongs in the outer one).
        active: set[str] = _OPEN.__dict__.setdefault("catalogs", set())
        if self.catalog.catalog_url in active:
            self.abort()
            raise InvalidInput(
                "a catalog transaction is open on this catalog in this block already: transactions do not "
                "nest; make every table's change in the outer one"
            )
        active.add(self.catalog.catalog_url)
        self._entered = True
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        if self._entered:
            _OPEN.__dict__.setdefault("catalogs", set()).discard(self.catalog.catalog_url)
            self._entered = False
        if self.state != "open":
            return
        if kind is None:
            self.commit()
        else:
            self.abort()

    @property
    def already_committed(self) -> bool:
        """Whether the idempotency key names a catalog transaction that landed (this one replays it)."""
        return self._prior is not None

    @property
    def tables(self) -> list[str]:
        """The tables opened in this transaction, sorted."""
        return sorted(self._shares)

    def _require_open(self) -> None:
        if self.state != "open":
            raise InvalidInput(f"this catalog transaction is {self.state}; start a new one")

    def table(self, table: str | Table) -> Transaction:
        """The share of a table in this transaction (the same one every time for one table).

        Args:
            table: ``namespace.table`` (or a bare name in the ``default`` namespace), or a table handle
                (its columns and properties are those the share writes with).

        Returns:
            The table's transaction: its changes commit with this catalog transaction.

        Raises:
            InvalidInput: The transaction committed or aborted; a bad name; a handle other than the one the
                table was opened with; or, replaying an idempotency key, a table that transaction did
                not commit.
            NoSuchTable: There is no such table (or a handle whose table was dropped).
        """
        self._require_open()
        if isinstance(table, Table):
            name = table.name
        elif isinstance(table, str):
            name = self.catalog.table_name(table)
        else:
            raise InvalidInput(f"table() takes a table name or handle, got {type(table).__name__}")
        share = self._shares.get(name)
        if share is not None:
            if isinstance(table, Table) and table is not share.tx.table:
                raise InvalidInput(
                    f"{name} is in this catalog transaction already, through another handle: use "
                    "tx.table(name) for every change of one table"
                )
            return share.tx
        if self._prior is not None:
            return self._replay(name)
        handle = table if isinstance(table, Table) else self.catalog.table(name)
        tx = Transaction(handle, retries=self.retries, owner="its catalog transaction")
        self._shares[name] = _Share(tx)
        return tx

    def create_table(self, name: str, schema: pa.Schema, **options: Any) -> Transaction:
        """Create a table in this transaction: it appears, with the changes made to it here, when the
        transaction commits (and never if it does not).

        Args:
            name: ``namespace.table``, or a bare name in the ``default`` namespace.
            schema: The table's Arrow schema.
            **options: What :meth:`Catalog.create_table <mere.Catalog.create_table>` takes besides
                ``exist_ok`` (``primary_key``, ``partition_by``, ``buckets``, ``properties``, ...).

        Returns:
            The new table's share. Its changes see an empty table; after the commit, open the table with
            ``cat.table(name)``.

        Raises:
            InvalidInput: The transaction committed or aborted, the table is in it already, or an invalid
                name, schema, key, partitioning or property.
            TableExists: The table exists (now, or when the transaction commits: then nothing commits).
        """
        self._require_open()
        if "exist_ok" in options:
            raise InvalidInput("create_table() in a catalog transaction creates a new table: no exist_ok")
        takes = [
            p for p in inspect.signature(self.catalog.new_table).parameters if p not in ("name", "schema")
        ]
        unknown = sorted(set(options) - set(takes))
        if unknown:
            raise InvalidInput(f"create_table() takes no option(s) {unknown}; it takes {takes}")
        qualified = self.catalog.table_name(name)
        if qualified in self._shares:
            raise InvalidInput(f"{qualified} is in this catalog transaction already")
        if self._prior is not None:
            return self._replay(qualified)
        new, _ = self.catalog.new_table(qualified, schema=schema, **options)
        record = TableRecord(
            -1 - len(self._shares), new.namespace, new.name, new.uuid, new.location, new.spec, 0
        )
        handle = Table(_NewTableCatalog(self.catalog, record), record)
        tx = Transaction(handle, retries=self.retries, owner="its catalog transaction")
        self._shares[qualified] = _Share(tx, new)
        return tx

    def _replay(self, name: str) -> Transaction:
        assert self._prior is not None
        if name not in self._prior:
            raise InvalidInput(
                f"idempotency key {self.idempotency_key!r} committed tables {sorted(self._prior)}, not {name}: "
                "a key names one transaction's work"
            )
        table_id, version = self._prior[name]
        handle = self.catalog.table(name)
        tx = Transaction(handle, owner="its catalog transaction", replay=self._replayed(table_id, version))
        self._shares[name] = _Share(tx)
        return tx

    def _replayed(self, table_id: int, version: int | None) -> CommitResult:
        store = self.catalog.sql
        try:
            if version is None:  # left unchanged: the table as it is now (the version it read may be expired)
                snap = store.snapshot(table_id, store.current_version(table_id))
                return replace(CommitResult.unchanged(snap, "transaction"), already_committed=True)
            return CommitResult.of(store.snapshot(table_id, version), already_committed=True)
        except NoSuchTable:
            # The table it committed on was dropped since (a table of the same name may stand there now):
            # its commit's record went with it, so only the version and the transaction's time are known.
            at = store.transaction_committed_at(self.idempotency_key)  # type: ignore[arg-type]
            assert at is not None  # the key is recorded: that is why this is a replay
            return CommitResult.dropped_since(version, at)

    # -- commit -------------------------------------------------------------------------------------

    def commit(self) -> dict[str, CommitResult]:
        """Commit every table's changes in one catalog transaction: one new version per changed table, or
        nothing.

        A lost race on any table rebases every table (changes that read rows are evaluated again) and
        tries again, checking every table's conflict rules again (see :data:`mere.retry.COMMIT_RETRIES`).

        Returns:
            Each opened table's commit, by name (``no_change`` for a table with nothing to commit;
            ``already_committed`` for every table when the idempotency key had committed).

        Raises:
            InvalidInput: The transaction committed or aborted already; a table's changes mix overwrites
                with upserts that need checks; or an idempotency key that committed another set of tables.
            CommitConflict: Concurrent commits won every retry, or a table's columns changed after its
                handle read them (:class:`~mere.errors.SchemaChanged`); nothing committed.
            TableExists: A table the transaction creates was created meanwhile; nothing committed.
            CommitFailed: The catalog connection failed before the transaction landed; nothing changed.
            CommitStateUnknown: The connection failed while committing: the transaction may have landed
                (whole); the files are kept. Run it again with the same idempotency key to know.
        """
        self._require_open()
        self.state = "committing"
        commits = [(name, self._shares[name]) for name in sorted(self._shares)]
        if self._prior is not None:
            return self._replay_all(commits)
        try:
            for _, share in commits:
                share.tx.pending_commit.check_mix()
                share.tx.pending_commit.check_staged()
                share.tx.pending_commit.state = "committing"
            landed = self.retries.run(lambda: self._attempt(commits), lost_race)
            if landed is None:  # a transaction with this key landed while this one was made
                self._prior = self.catalog.sql.find_transaction(self.idempotency_key)  # type: ignore[arg-type]
                for _, share in commits:
                    # (staged files it shares with the one that landed are the tables' now)
                    pending = share.tx.pending_commit
                    discard_unreferenced(pending.ctx, pending.written_files())
                    pending.resolved = []
                return self._replay_all(commits)
        except SchemaChanged:
            self._discard_all(commits)
            raise
        except CommitConflict as e:
            self._discard_all(commits)
            raise CommitConflict(
                f"catalog transaction on {[n for n, _ in commits]} lost {self.retries.attempts} races to "
                f"concurrent commits; try again ({e})"
            ) from e
        except CommitStateUnknown:
            self._abandon(commits)
            raise  # the files may be referenced now: keep them
        except BaseException as e:
            for _, share in commits:  # (each keeps what a version may hold: see Commit.give_up)
                share.tx.pending_commit.give_up(e, new_table=share.create is not None)
            self._abandon(commits)
            raise
        self.state = "committed"
        for name, share in commits:
            commit, result = share.tx.pending_commit, landed[name]
            if share.create is None:
                commit.finished(result)
            else:
                commit.state = "committed"  # the share's handle names a table that did not exist yet
        self.results = landed
        return landed

    def _attempt(self, commits: Sequence[tuple[str, _Share]]) -> dict[str, CommitResult] | None:
        """Prepare every table's commit at its base and land them together (None: the key landed first)."""
        out: dict[str, CommitResult] = {}
        prepared: list[tuple[str, Commit, PreparedCommit]] = []
        try:
            for name, share in commits:
                commit = share.tx.pending_commit
                p = commit.prepare()
                if isinstance(p, PreparedCommit):
                    if share.create is not None:
                        p.request.create = share.create
                    prepared.append((name, commit, p))
                elif share.create is not None:  # a new table is made even without rows
                    prepared.append((name, commit, self._creation(commit, share.create)))
                else:
                    out[name] = p
        except BaseException as e:
            for _, commit, p in prepared:
                commit.failed(p, e)
            raise
        if not prepared:
            return out
        for _, commit, _ in prepared:
            commit.catalog_asked = True
        try:
            unchanged = {n: share.tx.pending_commit.ctx.table_id for n, share in commits if n in out}
            landed = self.catalog.sql.commit_tables(
                [p.request for _, _, p in prepared],
                [n for n, _, _ in prepared],
                self.idempotency_key,
                unchanged,
            )
        except BaseException as e:
            for _, commit, p in prepared:
                commit.failed(p, e)
            raise
        if landed is None:
            for _, commit, p in prepared:
                commit.ctx.files.discard(p.logs)
            return None
        for (name, commit, p), result in zip(prepared, landed, strict=True):
            out[name] = commit.landed(p, result)
        return out

    @staticmethod
    def _creation(commit: Commit, new: NewTable) -> PreparedCommit:
        """A new table's commit when its share changed nothing: the table alone (its version 1 is empty)."""
        request = CommitRequest(commit.ctx.table_id, 0, "create", summary={"read_version": 0}, create=new)
        return PreparedCommit(request, [])

    def _replay_all(self, commits: Sequence[tuple[str, _Share]]) -> dict[str, CommitResult]:
        """End as a replay of the transaction the key names: every table's first result, nothing written."""
        assert self._prior is not None
        opened = {n for n, _ in commits}
        if opened and opened != set(self._prior):
            self._discard_all(commits)
            raise InvalidInput(
                f"idempotency key {self.idempotency_key!r} committed tables {sorted(self._prior)}; this "
                f"transaction changes {sorted(opened)}: a key names one transaction's work (nothing committed)"
            )
        out = {}
        for name, (table_id, version) in sorted(self._prior.items()):
            share = self._shares.get(name)
            out[name] = self._replayed(table_id, version)
            if share is not None:
                share.tx.pending_commit.state = "committed"
        self.state = "committed"
        self.results = out
        return out

    def _discard_all(self, commits: Sequence[tuple[str, _Share]]) -> None:
        for _, share in commits:
            discard(share.tx.pending_commit.ctx, share.tx.pending_commit.changes)
            share.tx.pending_commit.drop_resolved()
        self._abandon(commits)

    def _abandon(self, commits: Sequence[tuple[str, _Share]]) -> None:
        for _, share in commits:
            share.tx.pending_commit.state = "aborted"
        self.state = "aborted"

    def abort(self) -> None:
        """Discard the transaction: delete the files every share wrote. Raises nothing; a transaction
        that committed or aborted already is left as it is."""
        if self.state != "open":
            return
        for share in self._shares.values():
            share.tx.pending_commit.abort()
        self.state = "aborted"


class _NewTableStore:
    """The catalog as a table created by a catalog transaction sees it before the commit: empty, at
    version 0, with its own layout; every other question goes to the catalog."""

    def __init__(self, store: MetadataStore, record: TableRecord) -> None:
        self._store = store
        self._record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _created(self) -> Snapshot:
        return Snapshot.from_stored(0, 0, "create", {"added_files": 0, "removed_files": 0})

    def current_version(self, table_id: int) -> int:
        return 0 if table_id == self._record.id else self._store.current_version(table_id)

    def version_range(self, table_id: int) -> tuple[int, int]:
        return (0, 0) if table_id == self._record.id else self._store.version_range(table_id)

    def files_at(self, table_id: int, version: int, *, expired_ok: bool = False) -> list[FileEntry]:
        if table_id == self._record.id:
            return []
        return self._store.files_at(table_id, version, expired_ok=expired_ok)

    def specs_after(self, table_id: int, version: int) -> list[tuple[int, str]]:
        return [] if table_id == self._record.id else self._store.specs_after(table_id, version)

    def spec_at(self, table_id: int, version: int) -> str | None:
        return self._record.spec if table_id == self._record.id else self._store.spec_at(table_id, version)

    def snapshot(self, table_id: int, version: int) -> Snapshot:
        return self._created() if table_id == self._record.id else self._store.snapshot(table_id, version)

    def find_idempotent(self, table_id: int, key: str) -> Snapshot | None:
        return None if table_id == self._record.id else self._store.find_idempotent(table_id, key)

    def files_changed(self, table_id: int, after: int, upto: int) -> list[tuple[FileEntry, int | None]]:
        return [] if table_id == self._record.id else self._store.files_changed(table_id, after, upto)

    def list_consumers(self, table_id: int) -> list[ConsumerRecord]:
        return [] if table_id == self._record.id else self._store.list_consumers(table_id)


class _NewTableCatalog:
    """The catalog of a table a catalog transaction creates (see :class:`_NewTableStore`)."""

    def __init__(self, catalog: CatalogHandle, record: TableRecord) -> None:
        self._catalog = catalog
        self.sql: Any = _NewTableStore(catalog.sql, record)
        self.storage = catalog.storage
        self.threads = catalog.threads
        self.catalog_url = catalog.catalog_url

    def drop_if_unchanged(self, table: Any, version: int) -> bool:
        raise InvalidInput(f"{table.name} is being created by a catalog transaction")


# -- catalog snapshots ----------------------------------------------------------------------------------


class SnapshotTable:
    """A table as a :class:`CatalogSnapshot` pins it: reads see its pinned version."""

    def __init__(self, table: Table, version: int) -> None:
        self.table = table
        self.version = version

    def __repr__(self) -> str:
        return f"SnapshotTable({self.table.name!r}, version={self.version})"

    @property
    def name(self) -> str:
        """``namespace.name``."""
        return self.table.name

    @property
    def spec(self) -> TableSpec:
        """The layout at the pinned version."""
        return self.table.spec_at(self.version)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema at the pinned version."""
        return self.spec.schema

    def scan(self, columns: Sequence[str] | str | None = None, filter: Any = None, **options: Any) -> Scan:
        """Plan a merged read of the pinned version (see :meth:`Table.scan <mere.Table.scan>`).

        Args:
            columns: The columns to read; None for every column.
            filter: A filter (string, :mod:`mere.expr` expression or pyarrow Expression).
            **options: Read tuning (``threads``, ``window_bytes``, ``queue_batches``).

        Returns:
            The planned scan.

        Raises:
            InvalidInput: A ``version``, ``as_of`` or ``tag`` (the snapshot pins the version), or a bad
                option.
            NoSuchVersion: The pinned version expired since the snapshot was taken.
        """
        for pinned in ("version", "as_of", "tag"):
            if pinned in options:
                raise InvalidInput(f"{self.name}: a catalog snapshot pins the version; no {pinned}=")
        return self.table.scan(columns, filter, version=self.version, **options)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        """Read the pinned version into one Arrow table: ``scan(**kwargs).to_arrow()``.

        Args:
            **kwargs: What :meth:`scan` takes.

        Returns:
            The merged rows.
        """
        return self.scan(**kwargs).to_arrow()


class CatalogSnapshot:
    """One read point for every table of a catalog: :meth:`Catalog.snapshot <mere.Catalog.snapshot>`.

    Each table's version was read in one database read, so a catalog transaction is seen whole or not
    at all. ``snap.table(name).scan()`` reads the pinned version; ``snap.version(name)`` is the number the
    engine adapters take (``snapshot=`` does the same).
    """

    def __init__(self, catalog: TableOpener, pinned: Sequence[tuple[TableRecord, int]], as_of: Any) -> None:
        self.catalog = catalog
        self._pinned = {r.identifier: (r, v) for r, v in pinned}
        self.as_of = as_of

    def __repr__(self) -> str:
        return f"CatalogSnapshot({self.versions})"

    @property
    def versions(self) -> dict[str, int]:
        """Each table's pinned version, by name."""
        return {name: v for name, (_, v) in self._pinned.items()}

    def tables(self) -> list[str]:
        """The tables the snapshot pins (those that existed at its read point), sorted."""
        return sorted(self._pinned)

    def __iter__(self) -> Iterator[str]:
        return iter(self.tables())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._pinned

    def _entry(self, name: str) -> tuple[TableRecord, int]:
        if not isinstance(name, str):
            raise InvalidInput(f"a table name is a string, got {name!r}")
        qualified = self.catalog.table_name(name)
        found = self._pinned.get(qualified)
        if found is None:
            when = "now" if self.as_of is None else f"at {self.as_of!r}"
            raise NoSuchTable(f"table {qualified} did not exist {when} (the snapshot's read point)")
        return found

    def version(self, name: str) -> int:
        """The version of a table the snapshot pins.

        Args:
            name: ``namespace.table`` (or a bare name in the ``default`` namespace).

        Returns:
            The version.

        Raises:
            NoSuchTable: The table did not exist at the read point.
        """
        return self._entry(name)[1]

    def table(self, name: str) -> SnapshotTable:
        """A table at its pinned version.

        Args:
            name: ``namespace.table`` (or a bare name in the ``default`` namespace).

        Returns:
            The table, pinned: its reads see the snapshot's version.

        Raises:
            NoSuchTable: The table did not exist at the read point.
        """
        record, version = self._entry(name)
        return SnapshotTable(Table(self.catalog, record), version)


def pinned_version(
    snapshot: CatalogSnapshot | None,
    table: Any,
    version: int | None,
    as_of: Any = None,
    tag: str | None = None,
) -> int | None:
    """The version an adapter reads: ``version`` without a ``snapshot``, else the snapshot's version of
    ``table`` (then ``version``, ``as_of`` and ``tag`` must be None).

    Args:
        snapshot: The catalog snapshot, or None.
        table: The table handle (its ``name`` is looked up).
        version: The adapter's ``version`` argument.
        as_of: The adapter's ``as_of`` argument.
        tag: The adapter's ``tag`` argument.

    Returns:
        The version to pass on to :meth:`Table.scan <mere.Table.scan>`.

    Raises:
        InvalidInput: A snapshot that is not a :class:`CatalogSnapshot`, or given with another read point,
            or with a ``table`` that is not a table handle.
        NoSuchTable: The table did not exist at the snapshot's read point.
    """
    if snapshot is None:
        return version
    if not is_handle(table):
        raise InvalidInput(f"snapshot= reads a mere Table's version, got {type(table).__name__}")
    if not isinstance(snapshot, CatalogSnapshot):
        raise InvalidInput(
            f"snapshot= takes a catalog snapshot (cat.snapshot()), got {type(snapshot).__name__}"
        )
    given = [k for k, v in (("version", version), ("as_of", as_of), ("tag", tag)) if v is not None]
    if given:
        raise InvalidInput(f"{table.name}: give snapshot= or {', '.join(given)}, not both")
    return snapshot.version(table.name)


__all__ = ["CatalogSnapshot", "CatalogTransaction", "SnapshotTable", "pinned_version"]
