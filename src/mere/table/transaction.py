"""Transactions: changes to one table that commit together as one version, or not at all.

Every write goes through the one commit path (:mod:`mere.table.commit`): ``upsert``, ``append``,
``delete``, ``update``, ``overwrite``, ``truncate``, ``set_properties``, staged (distributed) commits,
MERGE and compaction. A change writes its files when it is added; nothing is visible until the commit,
which checks what landed since the transaction read the table (the rules of :mod:`mere.table.conflicts`)
and on a lost race rebases and tries again under :data:`mere.retry.COMMIT_RETRIES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mere.errors import InvalidInput, names_its_table
from mere.metadata import CommitResult
from mere.retry import COMMIT_RETRIES, RetryPolicy
from mere.table.commit import Change, Commit, StagedChange, committed_with, discard_unreferenced, renumber
from mere.table.context import TableHandle
from mere.table.ops import update as update_op
from mere.table.ops import write
from mere.table.ops.evolve import SchemaUpdate
from mere.table.ops.merge_into import Merge
from mere.table.write_checks import WriteChecks


@names_its_table
class Transaction:
    """Changes to one table that commit together as one version, or not at all.

    Use it as a context manager: the changes commit when the block ends, and are discarded if it raises::

        with t.transaction() as tx:
            tx.delete("day = '2026-11-21'")
            tx.append(replacement)

    Operations see the table as of the transaction's start, not each other's writes; so changes that read
    rows (deletes by predicate, updates, MERGE, overwrites) must come before the writes of the same
    transaction, and one that reads or writes rows an earlier change of the transaction touched (an update
    after a delete of its row, two updates of one row) is refused with ``InvalidInput``; deletes of a keyed
    table compose.

    With an ``idempotency_key`` the transaction commits at most once: when a commit with that key has
    landed already (a retry of the same work), its operations do nothing (no file is written, no row
    read) and :meth:`commit` returns that commit's result (``already_committed=True``). The key alone
    names the work: a transaction with a known key and other changes is also a replay. The key is looked
    up once, at the first operation (or at :meth:`already_committed`); a commit with the key that lands
    after that is still caught when this one commits, whose files are then deleted.
    """

    def __init__(
        self,
        table: TableHandle,
        idempotency_key: str | None = None,
        retries: RetryPolicy = COMMIT_RETRIES,
        *,
        owner: str | None = None,
        replay: CommitResult | None = None,
    ) -> None:
        self.table = table
        self._commit = Commit(table.context, idempotency_key=idempotency_key, retries=retries)
        self._prior: CommitResult | None = replay
        self._looked_up = idempotency_key is None  # whether the key's commit was looked for
        # A table's share of a catalog transaction (``owner`` describes it): it commits with the others.
        self._owner = owner

    def already_committed(self) -> CommitResult | None:
        """The commit this transaction's idempotency key names, if one has landed (looked up once).

        Returns:
            That commit's result (``already_committed=True``), or None: no key, or no commit with it when
            it was looked up. When it is not None, the operations do nothing and :meth:`commit` returns it.
        """
        key = self._commit.idempotency_key
        if not self._looked_up and key is not None:
            self._prior = committed_with(self.table.context, key)
            self._looked_up = True
        return self._prior

    @property
    def idempotency_key(self) -> str | None:
        """The key that makes the commit happen once (None: none)."""
        return self._commit.idempotency_key

    @property
    def retries(self) -> RetryPolicy:
        """The retry policy of the commit."""
        return self._commit.retries

    @retries.setter
    def retries(self, policy: RetryPolicy) -> None:
        self._commit.retries = policy

    @property
    def read_version(self) -> int:
        """The version the transaction reads (and rebases from)."""
        return self._commit.read_version

    @property
    def changes(self) -> list[Change]:
        """The changes added so far."""
        return self._commit.changes

    @property
    def checks(self) -> WriteChecks:
        """The upserts' checks (NOT NULL partial rows, integer sums)."""
        return self._commit.checks

    # -- context manager ----------------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        if self._commit.state != "open" or self._owner is not None:
            return  # a catalog transaction's share commits (or aborts) with the catalog transaction
        if kind is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        c = self._commit
        return f"Transaction({self.table.name!r}, read_version={c.read_version}, {c.state}, changes={c.operations()})"

    # -- operations ---------------------------------------------------------------------------------

    def upsert(self, data: Any) -> Transaction:
        """Insert or update rows by primary key (see :meth:`Table.upsert <mere.Table.upsert>`).

        The files are written now; nothing is visible until :meth:`commit`.

        Args:
            data: The rows: a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame or an object
                with ``__arrow_c_stream__``.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, the table has no primary key, or the
                data cannot be converted to Arrow.
            SchemaMismatch: Columns the table lacks, or input without the key or partition columns.
            NullKey: A primary-key column holds nulls.
            SumOverflow: A ``sum`` column would leave its integer type's range within ``data``.
            StorageError: Writing the files failed.
        """
        if (commit := self._open()) is not None:
            write.upsert(commit, data)
        return self

    def append(self, data: Any) -> Transaction:
        """Add rows to a table without primary key.

        Args:
            data: The rows (as :meth:`upsert` takes them).

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, the table has a primary key, or the
                data cannot be converted to Arrow.
            SchemaMismatch: Columns the table lacks, or NOT NULL columns missing or null.
            StorageError: Writing the files failed.
        """
        if (commit := self._open()) is not None:
            write.append(commit, data)
        return self

    def delete(self, where: Any) -> Transaction:
        """Delete rows matching a filter, or the keys in a table of keys.

        See :meth:`Table.delete <mere.Table.delete>`. A delete that reads rows (by filter, or keys without
        their partition values) sees the table as of the transaction's start, so it must come before the
        transaction's writes.

        Args:
            where: A filter (string, :mod:`mere.expr` expression or pyarrow Expression), or Arrow data holding
                the key (and partition) columns of the rows to delete.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, ``where`` is None, a table of keys on
                a table without primary key or without the key columns, or a delete that reads rows after a
                write of this transaction.
            FilterError: A filter that does not parse or does not fit the table's columns.
        """
        if (commit := self._open()) is not None:
            write.delete(commit, where)
        return self

    def update(self, set: Mapping[str, str], where: Any = None) -> Transaction:
        """Set columns of matching rows to SQL expressions (see :meth:`Table.update <mere.Table.update>`).

        Args:
            set: ``{column: SQL expression text}``; key columns cannot be set, nor partition columns under
                ``key_scope="partition"`` (with table-wide keys, setting one moves the row).
            where: A filter of the rows to change; None for every row.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, an empty or malformed ``set`` (or a
                key, partition or unknown column in it), or an update after a write of this transaction.
            FilterError: An expression or filter that does not parse, names unknown columns, or gives values
                its column cannot store.
        """
        if (commit := self._open()) is not None:
            update_op.update(commit, set, where)
        return self

    def overwrite(
        self, data: Any, partition: Mapping[str, Any] | None = None, *, dynamic: bool = False
    ) -> Transaction:
        """Replace the whole table, or the partitions matching ``partition``, with ``data``.

        See :meth:`Table.overwrite <mere.Table.overwrite>`. An overwrite must come before the transaction's
        writes.

        Args:
            data: The new rows (as :meth:`upsert` takes them).
            partition: ``{column: value}`` of partition columns: only the partitions matching it are replaced.
            dynamic: Replace only the partitions ``data`` has rows in.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, an invalid ``partition`` or
                ``dynamic``, rows outside ``partition``, or an overwrite after a write of this transaction.
            SchemaMismatch: Columns the table lacks, or key, partition or NOT NULL columns missing.
            NullKey: A primary-key column holds nulls.
            StorageError: Writing the files failed.
        """
        if (commit := self._open()) is not None:
            write.overwrite(commit, data, partition, dynamic=dynamic)
        return self

    def truncate(self) -> Transaction:
        """Remove every row, writing nothing.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, or a truncate after a write of this
                transaction.
        """
        if (commit := self._open()) is not None:
            write.truncate(commit)
        return self

    def set_properties(self, updates: Mapping[str, str | int | None]) -> Transaction:
        """Set (None: remove) table properties in this transaction; checked now.

        Args:
            updates: ``{key: value}``; None removes the key.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted, an empty ``updates``, or an unknown or
                invalid property.
        """
        if (commit := self._open()) is not None:
            commit.set_properties(updates)
        return self

    def add_staged(
        self,
        staged: Sequence[StagedChange],
        *,
        operation: str | None = None,
        partition: Mapping[str, Any] | None = None,
        dynamic: bool = False,
    ) -> Transaction:
        """Add staged writes of one operation to this transaction, as :meth:`Table.commit <mere.Table.commit>` commits them.

        The staged writes are files engine tasks wrote (:meth:`Table.stage <mere.Table.stage>`). The driver half of a distributed write inside a transaction: a Spark driver stages on its tasks and
        adds their messages to the shares of one catalog transaction. On any error the staged files are
        deleted; a replay of an idempotency key deletes those the first commit does not list.

        Args:
            staged: The staged writes (``upsert``, ``append``, ``delete`` or ``overwrite``) of one operation.
            operation: The operation they commit as (default: the one they were staged for).
            partition: For an ``overwrite``: replace only the partitions matching ``{column: value}``.
            dynamic: For an ``overwrite``: replace the partitions the staged files hold.

        Returns:
            This transaction.

        Raises:
            InvalidInput: The transaction already committed or aborted; ``staged`` is not a list of staged
                writes of one operation of this table; or ``operation``, ``partition`` or ``dynamic`` do not
                apply.
            CommitFailed: Staged files no longer exist (a cleanup took them).
        """
        entries: list[Any] = []
        try:
            if (
                isinstance(staged, StagedChange)
                or not isinstance(staged, Sequence)
                or not all(isinstance(s, StagedChange) for s in staged)
            ):
                raise InvalidInput(
                    f"{self.table.name}: add_staged() takes a list of StagedWrite from stage()"
                )
            kinds = sorted({s.operation for s in staged} - set(write.STAGE_OPERATIONS))
            if kinds:  # MERGE shares and compaction results commit only onto the version they read
                raise InvalidInput(
                    f"{self.table.name}: add_staged() takes staged writes, not {kinds}: commit those with "
                    "Table.commit"
                )
            entries = renumber(f for s in staged for f in s.files)
            write.check_dynamic(self.table.name, dynamic)
            commit = self._open()
            if commit is None:  # a replay: the first commit's files stay, the others go
                discard_unreferenced(self.table.context, entries)
                return self
            op = write.staged_operation(commit.ctx, staged, operation, partition, dynamic)
            write.add_staged(commit, staged, op, partition, dynamic, entries)
        except BaseException:
            items = [staged] if isinstance(staged, StagedChange) else staged
            if isinstance(items, Sequence):  # (a commit of these same files may have landed: a retry)
                discard_unreferenced(
                    self.table.context, [f for s in items if isinstance(s, StagedChange) for f in s.files]
                )
            raise
        return self

    def merge(
        self, source: Any, on: str | None = None, source_alias: str = "s", target_alias: str = "t"
    ) -> Merge:
        """Start a MERGE INTO the table that ``execute()`` adds to this transaction.

        See :meth:`Table.merge <mere.Table.merge>`.

        The MERGE reads the table as of the transaction's start, so it must come before the transaction's
        writes; ``execute()`` returns its counts with ``version`` None (the version comes with the commit).

        Args:
            source: The source rows (Arrow, pandas, Polars or an Arrow stream).
            on: The ON condition; default: equality of every primary-key column.
            source_alias: The source's name in conditions and values.
            target_alias: The table's name in conditions and values.

        Returns:
            The MERGE being built.

        Raises:
            InvalidInput: The transaction already committed or aborted, or the MERGE itself is invalid (as
                :meth:`Table.merge <mere.Table.merge>` raises it).
            FilterError: An ON condition that does not parse.
        """
        commit = self._open()
        into: Commit | CommitResult = commit if commit is not None else self.already_committed()  # type: ignore[assignment]
        # After the transaction's column change, the MERGE works in the new columns.
        table = commit.ctx.handle if commit is not None and commit.schema is not None else self.table
        return Merge(table, source, on, source_alias, target_alias, into=into)

    def evolve(self) -> SchemaUpdate:
        """Start a column change that commits with this transaction.

        See :meth:`Table.evolve <mere.Table.evolve>`: its ``commit()`` (or the end of its ``with`` block)
        adds it here.

        It must come before the transaction's other changes; the writes after it see the new columns.

        Returns:
            The schema update being built.

        Raises:
            InvalidInput: The transaction already committed or aborted.
        """
        commit = self._open()
        return SchemaUpdate(self.table, into=commit if commit is not None else self.already_committed())

    # -- commit -------------------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Commit every change as one new version; on any failure nothing is committed and the files go.

        A commit that lost a race to a concurrent one re-checks what landed and tries again (see
        :data:`mere.retry.COMMIT_RETRIES`).

        Returns:
            The commit (``already_committed`` when the idempotency key had committed: then nothing is
                written).

        Raises:
            InvalidInput: The transaction already committed or aborted, or it mixes overwrites or
                copy-on-write deletes with upserts that need checks.
            SchemaMismatch: Upserted rows that insert keys lack NOT NULL columns.
            SumOverflow: A ``sum`` column would leave its integer type's range on top of the stored sums.
            CommitConflict: Concurrent commits won every retry, or the table's columns changed after the
                handle read them (:class:`~mere.errors.SchemaChanged`).
            CommitFailed: The catalog connection failed before the commit landed; nothing changed.
            CommitStateUnknown: The catalog connection failed while committing; the commit may have landed
                (its files are kept).
        """
        if self._owner is not None:
            raise InvalidInput(f"{self.table.name}: this transaction commits with {self._owner}")
        if self._prior is not None and self._commit.state == "open":
            return self._commit.replayed(self._prior)
        return self._commit.run()

    def abort(self) -> None:
        """Discard the transaction: delete the files its changes wrote.

        Raises nothing: files that cannot be deleted are left for :meth:`Table.cleanup <mere.Table.cleanup>`
        (logged). A transaction that committed or aborted already is left as it is; a table's share of a
        catalog transaction aborts with it (:meth:`CatalogTransaction.abort
        <mere.table.catalog_transaction.CatalogTransaction.abort>`), never alone: here it is left as it is.
        """
        if self._owner is None:
            self._commit.abort()

    @property
    def pending_commit(self) -> Commit:
        """The commit being built (the catalog transaction that owns this one lands it)."""
        return self._commit

    def _open(self) -> Commit | None:
        """The commit to add a change to; None when the key's commit landed already (a replay)."""
        self._commit.require_open()
        return None if self.already_committed() is not None else self._commit
