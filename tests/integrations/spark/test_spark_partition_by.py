"""``DataFrameWriter.partitionBy`` on a mere write (issue 30, item 8).

Spark checks ``.partitionBy`` against the partitioning a data source's table declares, in the JVM, before
the data source's code runs; a Python data source declares none, so every such write failed with Spark's
"requirement failed: The provided partitioning or clustering columns do not match the existing table's".
The hook that ``register`` and ``local_session`` install hands the columns to mere instead: they partition a
table the write creates, must match an existing table's partitioning (refused in mere's words, nothing
written), and every other format behaves exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.readwriter import DataFrameWriter

import mere
from mere.integrations.spark import install_partition_hook, register


@pytest.fixture
def df(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [(1, "d1", 10), (2, "d2", 20), (3, "d1", 30)], "id long, day string, qty long"
    )


def _rows(wh: str, name: str) -> list[tuple[int, str, int]]:
    return sorted((r["id"], r["day"], r["qty"]) for r in mere.connect(wh).table(name).to_arrow().to_pylist())


def test_partition_by_creates_the_table_partitioned(df: DataFrame, wh: str) -> None:
    df.write.format("mere").mode("append").option("warehouse", wh).option("primary_key", "id").partitionBy(
        "day"
    ).save("p.after")
    df.write.partitionBy(["day"]).format("mere").mode("append").option("warehouse", wh).option(
        "primary_key", "id"
    ).save("p.before")  # .partitionBy before .format, as a list
    df.write.save("p.args", format="mere", mode="append", partitionBy="day", warehouse=wh, primary_key="id")
    df.write.format("mere").mode("append").option("warehouse", wh).partitionBy("day").save("p.keyless")
    cat = mere.connect(wh)
    for name in ("p.after", "p.before", "p.args"):
        t = cat.table(name)
        assert t.spec.partition_by == ("day",) and t.spec.primary_key == ("id",)
        assert _rows(wh, name) == [(1, "d1", 10), (2, "d2", 20), (3, "d1", 30)]
        assert set(t.inspect.files()["partition"].to_pylist()) == {'{"day":"d1"}', '{"day":"d2"}'}
    assert cat.table("p.keyless").spec.partition_by == ("day",) and not cat.table("p.keyless").primary_key


def test_partition_by_must_match_an_existing_table(spark: SparkSession, df: DataFrame, wh: str) -> None:
    cat = mere.connect(wh)
    df.write.format("mere").mode("append").option("warehouse", wh).option("primary_key", "id").partitionBy(
        "day"
    ).save("p.t")
    more = spark.createDataFrame([(4, "d3", 40)], "id long, day string, qty long")
    more.write.format("mere").mode("append").option("warehouse", wh).partitionBy("day").save("p.t")  # same
    assert _rows(wh, "p.t")[-1] == (4, "d3", 40)
    version = cat.table("p.t").version
    with pytest.raises(
        Exception, match=r"p\.t already exists and is partitioned by day: \.partitionBy\(qty\)"
    ):
        more.write.format("mere").mode("append").option("warehouse", wh).partitionBy("qty").save("p.t")
    with pytest.raises(Exception, match=r"disagree"):
        more.write.format("mere").mode("append").option("warehouse", wh).option(
            "partition_by", "day"
        ).partitionBy("qty").save("p.t")
    cat.create_table("p.flat", cat.table("p.t").schema, primary_key="id")
    with pytest.raises(Exception, match=r"p\.flat already exists and is not partitioned"):
        more.write.format("mere").mode("overwrite").option("warehouse", wh).partitionBy("day").save("p.flat")
    assert cat.table("p.t").version == version and cat.table("p.flat").version == 0


def test_other_formats_partition_as_before(df: DataFrame, tmp_path: Path) -> None:
    df.write.partitionBy("day").parquet(str(tmp_path / "a"))
    df.write.format("parquet").partitionBy("day").save(str(tmp_path / "b"))
    df.write.partitionBy("day").save(str(tmp_path / "c"))  # the default source (parquet)
    df.write.save(str(tmp_path / "d"), format="json", partitionBy=["day"])
    df.write.format("mere").format("csv").partitionBy("day").save(str(tmp_path / "e"))  # the last format wins
    for d in "abcde":
        assert sorted(p for p in os.listdir(tmp_path / d) if p.startswith("day=")) == ["day=d1", "day=d2"], d


def test_the_hook_installs_once(spark: SparkSession) -> None:
    install_partition_hook()
    register(spark, check=False)
    for name in ("format", "partitionBy", "save"):
        method = getattr(DataFrameWriter, name)
        assert getattr(method, "_mere_partition_hook", False)
        assert not getattr(method.__wrapped__, "_mere_partition_hook", False)  # one layer, not two


@pytest.fixture
def unhooked() -> Iterator[None]:
    saved = {n: getattr(DataFrameWriter, n) for n in ("format", "partitionBy", "save")}
    for n, m in saved.items():
        setattr(DataFrameWriter, n, m.__wrapped__)
    try:
        yield
    finally:
        for n, m in saved.items():
            setattr(DataFrameWriter, n, m)


def test_without_the_hook_spark_refuses_and_nothing_is_written(
    df: DataFrame, wh: str, unhooked: None
) -> None:
    """As the README says: without register() (or local_session()), Spark refuses .partitionBy with its own
    message before mere runs; .option("partition_by", ...) works either way."""
    with pytest.raises(Exception, match="partitioning or clustering columns do not match"):
        df.write.format("mere").mode("append").option("warehouse", wh).option(
            "primary_key", "id"
        ).partitionBy("day").save("p.t")
    assert not mere.connect(wh).exists("p.t")
    df.write.format("mere").mode("append").option("warehouse", wh).option("primary_key", "id").option(
        "partition_by", "day"
    ).save("p.t")
    assert mere.connect(wh).table("p.t").spec.partition_by == ("day",)
