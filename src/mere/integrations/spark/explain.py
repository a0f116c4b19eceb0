"""What mere prunes in a Spark DataFrame's reads, shown next to Spark's own plan.

PySpark 4.3 gives a Python data source no way to describe its scan: the JVM's ``PythonScan.description()``
is the constant ``(Python)`` and its ``getMetaData()`` holds only ``PushedFilters`` and ``ReadSchema``, so
``EXPLAIN`` shows ``BatchScan mere`` and nothing of mere's pruning. :func:`explain` reads the DataFrame's
optimized plan instead, plans each mere read it finds again on the driver (catalog only, no data file
read) and reports the partitions, buckets and files it keeps, and, for a Spark ``Filter`` standing over a
mere read, what the same key and partition conditions would prune as mere's ``filter`` option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mere import expr as E
from mere.errors import MereError
from mere.integrations.spark.options import (
    FORMAT_NAME,
    TableRef,
    column_list_option,
    lower_options,
    read_point,
)
from mere.read.planner import Explain


@dataclass(frozen=True)
class Pruning:
    """What one plan of a mere read keeps: partitions, buckets and files, kept of total."""

    version: int
    partitions: tuple[int, int]
    buckets: tuple[int, int]
    files: tuple[int, int]
    filter: str  # the key/partition part of the filter that pruned ("true": none)

    def __str__(self) -> str:
        return (
            f"partitions {self.partitions[0]}/{self.partitions[1]}, buckets {self.buckets[0]}/{self.buckets[1]}, "
            f"files {self.files[0]}/{self.files[1]}"
        )


@dataclass(frozen=True)
class MereScan:
    """One mere read in a Spark plan: the table, its options' filter, and what mere prunes.

    ``spark_filter`` is the condition of a Spark ``Filter`` over the read (run by Spark after the merge;
    mere prunes nothing from it), and ``could_prune`` what its key and partition conditions would keep as
    mere's ``filter`` option (``suggested_filter``); None when they prune nothing more.
    """

    table: str
    options_filter: str | None
    pruning: Pruning
    merged_only: bool
    spark_filter: str | None = None
    suggested_filter: str | None = None
    could_prune: Pruning | None = None

    def __str__(self) -> str:
        lines = [
            f"mere scan {self.table} at version {self.pruning.version}: {self.pruning}"
            + (f" (filter option: {self.options_filter})" if self.options_filter else " (no filter option)")
        ]
        if self.merged_only:
            lines.append("  read_table: splits with nothing to merge go to Spark's Parquet reader (FileScan)")
        if self.spark_filter:
            lines.append(f"  Spark Filter over it, run after the merge: {self.spark_filter}")
        if self.could_prune is not None and self.suggested_filter:
            lines.append(
                f"  .option('filter', {self.suggested_filter!r}) (or read_table(filter=...)) would keep "
                f"{self.could_prune}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class SparkExplain:
    """Spark's physical plan of a DataFrame and the mere reads in it (see :func:`explain`)."""

    scans: tuple[MereScan, ...]
    spark_plan: str = field(repr=False)

    def __str__(self) -> str:
        body = [str(s) for s in self.scans] or ["no mere scan in this plan"]
        return "\n".join(["== mere ==", *body, "", "== Spark ==", self.spark_plan.rstrip()])


# Spark's SQL text of a literal carries a type suffix (4L, 2S, 1Y, 1.5D, 2.0BD) that mere's filter
# language does not read.
_SUFFIX = re.compile(r"(?<![\w.'])(\d+(?:\.\d+)?)(?:BD|L|S|Y|D)\b")


def _filter_text(spark_sql: str) -> str:
    return _SUFFIX.sub(r"\1", spark_sql)


def _children(node: Any) -> list[Any]:
    kids = node.children()
    return [kids.apply(i) for i in range(kids.size())]


def _plan(table: Any, opts: dict[str, str], filter_text: str | None) -> Pruning:
    version, as_of, tag = read_point(opts)
    scan = table.scan(
        columns=column_list_option("columns", opts.get("columns")),
        filter=filter_text,
        version=version,
        as_of=as_of,
        tag=tag,
    )
    ex = Explain(scan.version)
    splits, _ = scan.planned(ex)  # the catalog's file list only: no footer is read
    return Pruning(
        ex.version,
        (ex.partitions_kept, ex.partitions_total),
        (ex.buckets_kept, ex.buckets_total),
        (sum(len(s.files) for s in splits), ex.files_total),
        E.render(scan.filter_parts().pre),
    )


def _scan(relation: Any, spark_filter: str | None) -> MereScan | None:
    opts = lower_options(dict(relation.options().asCaseSensitiveMap()))
    table = TableRef.from_options(opts).open()
    given = opts.get("filter") or None
    pruning = _plan(table, opts, given)
    scan = MereScan(table.name, given, pruning, opts.get("merged_only", "").lower() == "true", spark_filter)
    if spark_filter is None:
        return scan
    text = _filter_text(spark_filter)
    combined = text if given is None else f"({given}) AND ({text})"
    try:
        could = _plan(table, opts, combined)
    except MereError:
        return scan  # Spark's condition is not mere's filter language: nothing to suggest
    if could.files[0] >= pruning.files[0] and could.buckets[0] >= pruning.buckets[0]:
        return scan
    return MereScan(scan.table, given, pruning, scan.merged_only, spark_filter, could.filter, could)


def explain(df: Any) -> SparkExplain:
    """What mere prunes in each mere read of ``df``, with Spark's physical plan.

    ::

        print(explain(spark.read.format("mere").option("warehouse", wh).load("sales.orders")
                      .where("day = '2026-11-21' AND order_id = 4")))
        # == mere ==
        # mere scan sales.orders at version 7: partitions 2/2, buckets 4/4, files 9/9 (no filter option)
        #   Spark Filter over it, run after the merge: ((day = '2026-11-21') AND (order_id = 4L))
        #   .option('filter', "day = '2026-11-21' and order_id = 4") (or read_table(filter=...)) would keep
        #   partitions 1/2, buckets 1/4, files 1/9

    Args:
        df: A Spark DataFrame (classic PySpark: the plan is read through the JVM).

    Returns:
        The mere reads found (the ``mere`` data source, including :func:`read_table`'s merged part) and
        Spark's formatted physical plan. Each read is planned again on the driver at the version its
        options name (the newest when none): catalog only, no data file read.

    Raises:
        InvalidInput: ``df`` is not a classic PySpark DataFrame.
        NoSuchTable: A table of the plan was dropped since.
    """
    from pyspark.sql import DataFrame

    from mere.errors import InvalidInput

    if not isinstance(df, DataFrame) or not hasattr(df, "_jdf"):
        raise InvalidInput(f"explain() takes a classic PySpark DataFrame, got {type(df).__name__}")
    execution = df._jdf.queryExecution()
    scans: list[MereScan] = []

    def walk(node: Any, condition: str | None) -> None:
        name = node.nodeName()
        if name == "Filter":
            condition = str(node.condition().sql())
        elif name not in ("Project", "DataSourceV2ScanRelation", "DataSourceV2Relation"):
            condition = None  # a Filter counts only when it stands right over the read
        if name in ("DataSourceV2ScanRelation", "DataSourceV2Relation"):
            relation = node.relation() if name == "DataSourceV2ScanRelation" else node
            if str(relation.table().name()) == FORMAT_NAME:
                found = _scan(relation, condition)
                if found is not None:
                    scans.append(found)
            return
        for child in _children(node):
            walk(child, condition)

    walk(execution.optimizedPlan(), None)
    return SparkExplain(tuple(scans), _physical(df))


def _physical(df: Any) -> str:
    """Spark's ``EXPLAIN FORMATTED`` text of the DataFrame."""
    return str(df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted"))
