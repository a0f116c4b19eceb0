"""Spark reads, MERGE and read_table meet a damaged data file as mere's StorageError naming the file and
the table (issue 30, item 6)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read

import mere
from mere.errors import StorageError
from mere.integrations.spark import merge, read_table

NAME = "shop.stock"
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])


def _damaged(wh: str, how: str) -> str:
    t = mere.connect(wh).create_table(
        NAME, SCHEMA, primary_key="id", partition_by="day", buckets=2, properties={"compaction.auto": "off"}
    )
    t.upsert(pa.table({"id": range(100), "day": ["d1"] * 100, "qty": [1] * 100}, schema=SCHEMA))
    t.upsert(pa.table({"id": range(50, 150), "day": ["d1"] * 100, "qty": [2] * 100}, schema=SCHEMA))
    victim = os.path.join(t.storage.root, t.inspect.files().column("path")[0].as_py())
    if how == "missing":
        os.remove(victim)
    else:
        Path(victim).write_bytes(Path(victim).read_bytes()[:20])
    return victim


@pytest.mark.parametrize("how", ["truncated", "missing"])
def test_a_spark_read_task_names_the_damaged_file_and_table(spark: SparkSession, wh: str, how: str) -> None:
    victim = _damaged(wh, how)
    with pytest.raises(Exception) as caught:  # Spark hands a task's error over as its PythonException
        read(spark, wh, NAME).collect()
    text = str(caught.value)
    assert "StorageError" in text and victim in text and f"a data file of table {NAME}" in text, text[-2000:]


def test_read_table_and_spark_merge_raise_storage_error(spark: SparkSession, wh: str) -> None:
    victim = _damaged(wh, "truncated")
    with pytest.raises(StorageError, match=f"a data file of table {NAME}") as caught:
        read_table(spark, NAME, warehouse=wh).collect()
    assert victim in str(caught.value)
    before = mere.connect(wh).table(NAME).version
    # keys in both buckets: a MERGE task reads only the target rows of its own keys
    source = spark.createDataFrame([(i, "d1", 9) for i in range(20)], "id long, day string, qty long")
    with pytest.raises(StorageError, match=f"a data file of table {NAME}"):
        merge(
            spark, source, NAME, warehouse=wh
        ).when_matched_update_all().when_not_matched_insert_all().execute()
    assert mere.connect(wh).table(NAME).version == before
