"""Compaction with Spark: one task per split folds its files, the driver commits once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mere.errors import InvalidInput
from mere.integrations.spark.options import TableRef, location_options
from mere.integrations.spark.session import check_workers
from mere.metadata import CommitResult, FileEntry
from mere.table.compaction import CompactionTask


def compact(
    spark: Any,
    table: str,
    *,
    warehouse: str | None = None,
    catalog: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    min_files: int = 2,
    partition: Mapping[str, Any] | None = None,
) -> CommitResult | None:
    """Compact a table with Spark: one task per split folds its files, the driver commits once.

    The same as :meth:`mere.Table.compact` for tables too big for one machine. A commit that loses a race
    against an overwrite or another compaction plans again; a failed job commits nothing, and files of killed
    tasks are removed by :meth:`mere.Table.cleanup`.

    Args:
        spark: The SparkSession.
        table: The table's name, ``namespace.table``.
        warehouse: The warehouse URI (default: the environment variable ``MERE_WAREHOUSE``).
        catalog: The catalog URL (default: ``MERE_CATALOG``, else the SQLite catalog inside the warehouse).
        storage_options: Options of the storage (such as S3 endpoint and credentials).
        min_files: Fold splits with at least this many sorted runs (files; those one compaction wrote count
            once), or any delete markers.
        partition: ``{column: value}``: fold only splits of that partition.

    Returns:
        The compaction's commit; None when no split has ``min_files`` sorted runs.

    Raises:
        InvalidInput: No warehouse, a catalog without a warehouse URI the workers can open, a ``min_files``
            that is not a positive integer, or a ``partition`` that does not name the table's partitions.
        NoSuchTable: There is no such table.
        NotInstalled: Spark's Python workers cannot import mere.
        CommitConflict: Concurrent overwrites or compactions replaced its inputs in every retry.
    """
    ref = TableRef.from_options(location_options(table, warehouse, catalog, storage_options))
    target = ref.open()
    if not target.storage.portable:
        raise InvalidInput(f"{table}: Spark compaction needs a warehouse URI its workers can open")
    check_workers(spark)

    def run(tasks: Sequence[CompactionTask]) -> list[list[FileEntry]]:
        rdd = spark.sparkContext.parallelize(list(tasks), max(1, len(tasks)))
        results: list[list[FileEntry]] = rdd.map(CompactionTask.run).collect()
        return results

    return target.compact(min_files, partition, run=run)
