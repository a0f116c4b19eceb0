"""A table as a transaction's changes see it after the transaction's own column change."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from mere.spec import TableSpec
from mere.table.context import TableContext, TableHandle
from mere.table.scan import Scan

__all__ = ["WithPendingColumns"]


class WithPendingColumns:
    """A table handle whose columns are a transaction's pending column change.

    Changes added after ``evolve()`` in a transaction read and write through it: a read of any version comes
    in the new columns (field ids map renamed, widened and dropped columns; an added column reads its
    default, as rows written before it will once the transaction lands), and conditions name the new
    columns. Everything else is the handle's.
    """

    def __init__(self, handle: TableHandle, spec: TableSpec, context: Callable[[], TableContext]) -> None:
        self._handle = handle
        self._spec = spec
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    @property
    def spec(self) -> TableSpec:
        """The layout with the pending column change."""
        return self._spec

    @property
    def schema(self) -> pa.Schema:
        """The pending columns as an Arrow schema."""
        return self._spec.schema

    @property
    def context(self) -> TableContext:
        """The transaction's context (its layout is the pending one)."""
        return self._context()

    def scan(
        self,
        columns: Sequence[str] | str | None = None,
        filter: Any = None,
        version: int | None = None,
        as_of: Any = None,
        tag: str | None = None,
        **options: Any,
    ) -> Scan:
        """A read in the pending columns (see :meth:`mere.Table.scan`)."""
        v = self._handle.resolve_version(version, as_of, tag)
        return Scan.checked(self._handle, v, columns, filter, self._spec, **options)
