"""Transactions: changes to one table that commit together as one version, or not at all.

Every write goes through the one commit path (:mod:`mere.table.commit`): ``upsert``, ``append``,
``delete``, ``update``, ``overwrite``, ``truncate``, ``set_properties``, staged (distributed) commits,
MERGE and compaction. A change writes its files when it is added; nothing is visible until the commit,
which checks what landed since the transaction read the table (the rules of :mod:`mere.table.conflicts`)
and on a lost race rebases and tries again under :data:`mere.retry.COMMIT_RETRIES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mere.errors import names_its_table
from mere.metadata import CommitResult
from mere.retry import COMMIT_RETRIES, RetryPolicy
from mere.table.commit import Change, Commit, committed_with
from mere.table.context import TableHandle
from mere.table.ops import update as update_op
from mere.table.ops import write
from mere.table.write_checks import WriteChecks


@names_its_table
class Transaction:
    """Changes to one table that commit together as one version, or not at all.

    Use it as a context manager: the changes commit when the block ends, and are discarded if it raises::

        with t.transaction() as tx:
            tx.delete("day = '2026-11-21'")
            tx.append(replacement)

    Operations see the table as of the transaction's start, not each other's writes; so changes that read
    rows (deletes by predicate, overwrites) must come before the writes of the same transaction.

    With an ``idempotency_key`` the transaction commits at most once: when a commit with that key has
    landed already (a retry of the same work), its operations do nothing (no file is written, no row
    read) and :meth:`commit` returns that commit's result (``already_committed=True``). The key alone
    names the work: a transaction with a known key and other changes is also a replay. The key is looked
    up once, at the first operation (or at :meth:`already_committed`); a commit with the key that lands
    after that is still caught when this one commits, whose files are then deleted.
    """

    def __init__(
        self, table: TableHandle, idempotency_key: str | None = None, retries: RetryPolicy = COMMIT_RETRIES
    ) -> None:
        self.table = table
        self._commit = Commit(table.context, idempotency_key=idempotency_key, retries=retries)
        self._prior: CommitResult | None = None
        self._looked_up = idempotency_key is None  # whether the key's commit was looked for

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
        if self._commit.state != "open":
            return
        if kind is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        c = self._commit
        return f"Transaction({self.table.name!r}, read_version={c.read_version}, {c.state}, changes={c.operations()})"

    # -- operations ---------------------------------------------------------------------------------

    def upsert(self, data: Any) -> Transaction:
        """Insert or update rows by primary key (see :meth:`Table.upsert <mere.Table.upsert>`)."""
        if (commit := self._open()) is not None:
            write.upsert(commit, data)
        return self

    def append(self, data: Any) -> Transaction:
        """Add rows to a table without primary key."""
        if (commit := self._open()) is not None:
            write.append(commit, data)
        return self

    def delete(self, where: Any) -> Transaction:
        """Delete rows matching a filter, or the keys in a table of keys (see :meth:`Table.delete`)."""
        if (commit := self._open()) is not None:
            write.delete(commit, where)
        return self

    def update(self, set: Mapping[str, str], where: Any = None) -> Transaction:
        """Set columns of matching rows to SQL expressions (see :meth:`Table.update <mere.Table.update>`)."""
        if (commit := self._open()) is not None:
            update_op.update(commit, set, where)
        return self

    def overwrite(
        self, data: Any, partition: Mapping[str, Any] | None = None, *, dynamic: bool = False
    ) -> Transaction:
        """Replace the whole table, or the partitions matching ``partition``, with ``data``; with
        ``dynamic=True`` only the partitions ``data`` has rows in (see :meth:`Table.overwrite
        <mere.Table.overwrite>`)."""
        if (commit := self._open()) is not None:
            write.overwrite(commit, data, partition, dynamic=dynamic)
        return self

    def truncate(self) -> Transaction:
        """Remove every row, writing nothing."""
        if (commit := self._open()) is not None:
            write.truncate(commit)
        return self

    def set_properties(self, updates: Mapping[str, str | int | None]) -> Transaction:
        """Set (None: remove) table properties in this transaction; checked now."""
        if (commit := self._open()) is not None:
            commit.set_properties(updates)
        return self

    # -- commit -------------------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Commit every change as one new version; on any failure nothing is committed and the files go.

        Returns:
            The new version's result; with an idempotency key that a commit has landed with, that commit's
            (``already_committed=True``), nothing written.
        """
        if self._prior is not None and self._commit.state == "open":
            return self._commit.replayed(self._prior)
        return self._commit.run()

    def abort(self) -> None:
        """Discard the transaction: delete the files its changes wrote."""
        self._commit.abort()

    def _open(self) -> Commit | None:
        """The commit to add a change to; None when the key's commit landed already (a replay)."""
        self._commit.require_open()
        return None if self.already_committed() is not None else self._commit
