"""Helpers shared by the Spark tests."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession


def read(spark: SparkSession, wh: str, name: str, **options: Any) -> DataFrame:
    r = spark.read.format("mere").option("warehouse", wh)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load(name)


def write(df: DataFrame, wh: str, name: str, mode: str = "append", **options: Any) -> None:
    w = df.write.format("mere").mode(mode).option("warehouse", wh)
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save(name)


def rows(df: DataFrame, key: str = "id") -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: r[key])
