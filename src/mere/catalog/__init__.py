"""Transactional metadata. Only this package issues SQL."""

from mere.catalog.sql import CommitRecord, ConcurrentChanges, FileEntry, SqlCatalog, TableRecord

__all__ = ["CommitRecord", "ConcurrentChanges", "FileEntry", "SqlCatalog", "TableRecord"]
