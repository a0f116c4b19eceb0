"""mere: a compute-engine-neutral IO layer for lakehouse tables with merge on read."""

from mere import errors
from mere.errors import CommitConflict, MereError
from mere.expr import col
from mere.hashing import bucket_ids
from mere.metadata import CommitResult, Snapshot
from mere.statements import sql
from mere.table.catalog import Catalog, connect
from mere.table.catalog_transaction import CatalogSnapshot, CatalogTransaction, SnapshotTable
from mere.table.ops.change_log import Consumer, follow
from mere.table.ops.merge_into import Merge, MergeMetrics
from mere.table.scan import Scan
from mere.table.table import Table

__version__ = "0.1.0"

__all__ = [
    "Catalog",
    "CatalogSnapshot",
    "CatalogTransaction",
    "CommitConflict",
    "CommitResult",
    "Consumer",
    "MereError",
    "Merge",
    "MergeMetrics",
    "Scan",
    "Snapshot",
    "SnapshotTable",
    "Table",
    "__version__",
    "bucket_ids",
    "col",
    "connect",
    "errors",
    "follow",
    "sql",
]
