"""Transactional metadata. Only this package issues SQL.

SQLAlchemy is imported with :class:`SqlCatalog`, on first use: workers that only read or stage files
never load it. The metadata model lives in :mod:`mere.metadata`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mere.catalog.sql import SqlCatalog

__all__ = ["SqlCatalog"]


def __getattr__(name: str) -> Any:
    if name == "SqlCatalog":
        from mere.catalog.sql import SqlCatalog

        return SqlCatalog
    raise AttributeError(f"module 'mere.catalog' has no attribute {name!r}")
