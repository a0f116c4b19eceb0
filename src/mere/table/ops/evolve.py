"""Schema changes as commits: :class:`SchemaUpdate` collects column changes (checked one by one against the
layout as changed so far, by :mod:`mere.table.evolve`) and commits them as one version."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa

from mere.errors import InvalidInput, SchemaMismatch
from mere.metadata import CommitResult
from mere.spec import TableSpec
from mere.table.commit import Commit
from mere.table.conflicts import columns_changed
from mere.table.context import SchemaChange, TableHandle, stale_columns
from mere.table.evolve import add_column, drop_column, rename_column, same_columns, widen


class SchemaUpdate:
    """Column changes that commit together as one version: ``t.evolve()``.

    Each call is checked at once against the schema as changed so far; :meth:`commit` (or leaving a
    ``with`` block without error) commits them::

        with t.evolve() as e:
            e.add_column("discount", pa.float64(), default=0.0)
            e.rename_column("qty", "quantity")
            e.widen("price", pa.float64())
    """

    def __init__(self, table: TableHandle, *, into: Commit | CommitResult | None = None) -> None:
        self.table = table
        # ``into``: a transaction's commit that commit() adds the change to (a commit result: the
        # transaction replays it, and commit() does nothing); None: commit() commits alone.
        self.into = into
        self.base = table.spec
        self.spec = table.spec
        self.steps: list[str] = []
        self._done = False

    def _step(self, change: Callable[[TableSpec], TableSpec], text: str) -> SchemaUpdate:
        if self._done:
            raise InvalidInput(f"{self.table.name}: this schema update was already committed")
        if not isinstance(self.into, CommitResult):  # a replay's change landed with its key's commit
            try:
                self.spec = change(self.spec)
            except SchemaMismatch as e:
                # Checked against columns another handle changed since this one loaded them: the handle
                # is stale, which a refresh mends (e.g. it does not know a column another handle added).
                version = columns_changed(self.table.context) if self.into is None else None
                if version is not None:
                    raise stale_columns(self.table.name, version, e, redo="change them") from e
                raise
        self.steps.append(text)
        return self

    def add_column(self, name: str, type: pa.DataType | str, default: Any = None) -> SchemaUpdate:
        """Append a nullable column; rows written before read ``default`` (None: null)."""
        return self._step(lambda s: add_column(s, name, type, default, table=self.table.name), f"add {name}")

    def widen(self, column: str, type: pa.DataType | str) -> SchemaUpdate:
        """Give ``column`` a wider type; stored values are cast when read."""
        return self._step(lambda s: widen(s, column, type, table=self.table.name), f"widen {column}")

    def rename_column(self, column: str, new_name: str) -> SchemaUpdate:
        """Rename a column; files keep their data, mapped by the column's id."""
        return self._step(
            lambda s: rename_column(s, column, new_name, table=self.table.name),
            f"rename {column} to {new_name}",
        )

    def drop_column(self, column: str) -> SchemaUpdate:
        """Remove a column from the table (old versions still read it: time travel keeps its schema)."""
        return self._step(lambda s: drop_column(s, column, table=self.table.name), f"drop {column}")

    def commit(self) -> CommitResult | None:
        """Commit the changes as one new version; None (and no commit) when they change nothing.

        In a transaction (``tx.evolve()``) the change is added to the transaction, which commits it: None.
        """
        if self._done:
            raise InvalidInput(f"{self.table.name}: this schema update was already committed")
        self._done = True
        t = self.table
        # Steps that cancel out (a rename and back) change nothing, though the first step remembered how
        # files without field ids name columns.
        if same_columns(replace(self.spec, legacy_field_ids=self.base.legacy_field_ids), self.base):
            return None
        change = SchemaChange(self.spec, tuple(self.steps))
        if isinstance(self.into, CommitResult):
            return None
        if self.into is not None:
            self.into.change_columns(change)
            return None
        ctx = replace(t.context, schema_change=change)
        return Commit(ctx).run()

    def __enter__(self) -> SchemaUpdate:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        if kind is None and not self._done:
            self.commit()
