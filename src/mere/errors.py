"""Typed errors. Every error mere raises derives from :class:`MereError`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar


class MereError(Exception):
    """Root of every error raised by mere."""

    retryable: bool = False


class CatalogError(MereError):
    """The catalog could not do what was asked."""


class NoSuchNamespace(CatalogError, KeyError):
    """The namespace does not exist."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else ""


class NoSuchTable(CatalogError, KeyError):
    """The table does not exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TableExists(CatalogError):
    """A table of that name already exists."""


class NoSuchVersion(CatalogError, LookupError):
    """The requested version or timestamp is not in the table's history."""


class NoSuchTag(CatalogError, KeyError):
    """The table has no tag of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TagExists(CatalogError):
    """The table already has a tag of that name (``replace=True`` moves it)."""


class NoSuchConsumer(CatalogError, KeyError):
    """The table has no change-feed consumer of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConsumerDropped(CatalogError):
    """The change-feed consumer was dropped by ``expire``: it was not seen (no read, no commit) for longer
    than the table's ``changes.consumer-expiration`` while it held back versions expire gave up. The
    message says when and why; the versions after its position may be gone. Rebuild what it fed, then
    :meth:`Table.drop_consumer <mere.Table.drop_consumer>` and register it again."""


class CommitConflict(MereError):
    """A concurrent commit made this one invalid. Retrying the operation may succeed."""

    retryable = True


class SchemaChanged(CommitConflict):
    """The table's columns changed after this handle read them: :meth:`Table.refresh
    <mere.Table.refresh>` and write again (a write is never rebased onto a schema it did not see)."""


class CommitFailed(CatalogError):
    """A commit that did not land (the catalog connection failed before it committed): nothing changed,
    and writing again is safe."""


class OutlivedCleanup(CommitFailed):
    """A cleanup whose ``older_than`` is shorter than this write took ran while the write was made, so
    the files it wrote may be gone: it was not committed (nothing changed). Write again, and give cleanup
    an ``older_than`` longer than the longest write takes."""


class CommitStateUnknown(MereError):
    """The catalog connection failed while committing; the commit may or may not have landed."""


class InvalidInput(MereError, ValueError):
    """Input data or arguments are not acceptable (the table is unchanged)."""


class SchemaMismatch(InvalidInput):
    """Input columns or types do not match the table schema."""


class NullKey(InvalidInput):
    """A primary-key column holds nulls."""


class FilterError(InvalidInput):
    """A filter could not be parsed or bound to the table schema."""


class MergeConflict(InvalidInput):
    """A MERGE would change one target row twice, or insert a key twice or one the table holds."""


class UnsupportedType(InvalidInput, TypeError):
    """A type that mere cannot hash, key or store."""


class SumOverflow(MereError, ArithmeticError):
    """A ``sum`` merge operator left its column's integer range."""


class StorageError(MereError, OSError):
    """The storage layer failed (after retries)."""


class NotInstalled(MereError, ImportError):
    """An optional dependency is missing; the message says what to pip install."""


_T = TypeVar("_T", bound=type)


def names_its_table(cls: _T) -> _T:
    """Class decorator: a :class:`MereError` leaving a public method of ``cls`` names the table (the
    instance's ``name``, or its ``table.name``), at the start of its message unless the message names it
    already. The error keeps its type, attributes and traceback."""
    for attr, value in list(vars(cls).items()):
        if attr.startswith("_") or not inspect.isfunction(value) or inspect.isgeneratorfunction(value):
            continue
        setattr(cls, attr, _naming(value))
    return cls


def _naming(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def named(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MereError as e:
            name = _table_name(self)
            message = str(e)
            if name and name not in message:
                e.args = (f"{name}: {message}",)
            raise

    return named


def _table_name(owner: Any) -> str | None:
    try:
        name = getattr(owner, "name", None)
        if not isinstance(name, str):
            name = getattr(getattr(owner, "table", None), "name", None)
    except Exception:  # a handle too broken to say its name: leave the message as it is
        return None
    return name if isinstance(name, str) else None
