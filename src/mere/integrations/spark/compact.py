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

    The same as :meth:`mere.Table.compact` for tables too big for one machine. Returns None when no split
    has ``min_files`` sorted runs (files; those one compaction wrote count once). A commit that loses a
    race against an overwrite or another compaction plans again; a failed job commits nothing, and files
    of killed tasks are removed by :meth:`mere.Table.cleanup`.
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
