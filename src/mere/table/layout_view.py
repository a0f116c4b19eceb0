"""A table handle read with another layout than the one it loaded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from mere.spec import TableSpec
from mere.table.context import TableContext, TableHandle
from mere.table.scan import Scan

__all__ = ["WithLayout"]


class WithLayout:
    """A table handle whose layout (``spec``) is another than the one it loaded.

    - A transaction's changes after its own ``evolve()`` read and write through one holding the pending
      columns: a read of any version comes in the new columns (field ids map renamed, widened and dropped
      columns; an added column reads its default, as rows written before it will once the transaction
      lands), and conditions name the new columns.
    - A change feed over versions written before a ``set_sequence_by`` merges through one holding the order
      they were written in.

    Everything else is the handle's.
    """

    def __init__(self, handle: TableHandle, spec: TableSpec, context: Callable[[], TableContext]) -> None:
        self._handle = handle
        self._spec = spec
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    @property
    def spec(self) -> TableSpec:
        """The layout it reads with."""
        return self._spec

    @property
    def schema(self) -> pa.Schema:
        """The layout's columns as an Arrow schema."""
        return self._spec.schema

    @property
    def context(self) -> TableContext:
        """The context of the operation using it (with this layout)."""
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
        """A read with this layout (see :meth:`mere.Table.scan`)."""
        v = self._handle.resolve_version(version, as_of, tag)
        return Scan.checked(self._handle, v, columns, filter, self._spec, **options)
