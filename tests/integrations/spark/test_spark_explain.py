"""``explain(df)``: what mere prunes in a DataFrame's mere reads, where Spark's EXPLAIN shows nothing of it.

PySpark 4.3's ``PythonScan`` describes every Python source's scan as ``(Python)`` (its ``description()`` is a
constant, ``getMetaData()`` only ``PushedFilters`` and ``ReadSchema``), so the report comes from the plan's
relations. The refusal of Spark filter pushdown (``pushdown``) stands on this Spark: the reproducer is
``test_spark_reuse.py::test_spark_reuses_pushed_filters``, which fails the day Spark scopes a planned read
to one scan (then :data:`~mere.integrations.spark.SCAN_SCOPED_READS` is to be lifted for that version).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read

import mere
from mere import errors
from mere.integrations.spark import SCAN_SCOPED_READS, SPARK_VERSION, explain, read_table


def _orders(wh: str) -> mere.Table:
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
    t = mere.connect(wh).create_table(
        "sales.orders", schema, primary_key=["id"], partition_by=["day"], buckets=4
    )
    t.upsert(pa.table({"id": list(range(80)), "day": ["d1"] * 40 + ["d2"] * 40, "qty": list(range(80))}))
    t.upsert(pa.table({"id": [4, 60], "day": ["d1", "d2"], "qty": [400, 600]}))
    return t


def test_explain_shows_pruning_and_what_a_filter_option_would_prune(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    files = t.files().num_rows
    df = read(spark, wh, "sales.orders").where("day = 'd1' AND id = 4")
    report = explain(df)
    (scan,) = report.scans
    assert scan.table == "sales.orders" and scan.pruning.version == t.version
    assert scan.options_filter is None
    assert (scan.pruning.partitions, scan.pruning.buckets, scan.pruning.files) == (
        (2, 2),
        (4, 4),
        (files, files),
    )
    assert scan.spark_filter is not None and "id = 4" in scan.spark_filter
    assert scan.could_prune is not None and scan.suggested_filter is not None
    assert scan.could_prune.partitions == (1, 2) and scan.could_prune.buckets == (1, 4)
    assert scan.could_prune.files[0] < files
    text = str(report)
    assert "== mere ==" in text and "BatchScan mere" in text and ".option('filter'" in text

    # The suggestion, taken: the same rows, and the report shows the pruning now done by mere.
    pruned = read(spark, wh, "sales.orders", filter=scan.suggested_filter)
    assert [tuple(r) for r in pruned.collect()] == [tuple(r) for r in df.collect()] == [(4, "d1", 400)]
    (taken,) = explain(pruned).scans
    assert (taken.pruning.partitions, taken.pruning.buckets) == ((1, 2), (1, 4))
    assert taken.pruning.files == scan.could_prune.files
    assert taken.spark_filter is None and taken.could_prune is None

    # A Spark filter on a value column prunes nothing in mere either way: no suggestion.
    (value,) = explain(read(spark, wh, "sales.orders").where("qty > 3")).scans
    assert value.spark_filter is not None and value.could_prune is None


def test_explain_of_read_table_and_time_travel(spark: SparkSession, wh: str) -> None:
    t = _orders(wh)
    (scan,) = explain(read_table(spark, "sales.orders", warehouse=wh, filter="day = 'd2'")).scans
    assert scan.merged_only and scan.options_filter == "day = 'd2'"
    assert scan.pruning.partitions == (1, 2)
    (old,) = explain(read(spark, wh, "sales.orders", versionAsOf=1)).scans
    assert old.pruning.version == 1 and old.pruning.files[1] == len(t.files(version=1))
    assert explain(spark.range(3)).scans == ()
    with pytest.raises(errors.InvalidInput, match="DataFrame"):
        explain(t.scan())


def test_pushdown_stays_refused_on_this_spark() -> None:
    """Spark 4.3 (the pinned version) still reuses a planned read across queries: the refusal stands."""
    assert SPARK_VERSION < (5, 0)
    assert not SCAN_SCOPED_READS


ROOT = Path(__file__).resolve().parents[3]


def test_engines_doc_spark_example_runs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = (ROOT / "docs" / "engines.md").read_text().split("## PySpark", 1)[1]
    code = re.findall(r"```py\n(.*?)```", section, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    try:
        exec(compile(code, "docs/engines.md[PySpark]", "exec"), namespace)
    finally:
        spark.catalog.dropTempView("fresh")
    assert (namespace["before"], namespace["after"]) == (100, 150)
    metrics = namespace["metrics"]
    assert (metrics.updated, metrics.inserted) == (5, 5)  # type: ignore[attr-defined]
    (scan,) = explain(namespace["df"]).scans
    assert scan.could_prune is not None and scan.could_prune.partitions == (1, 2)
