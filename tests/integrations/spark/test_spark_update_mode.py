"""Structured Streaming in update mode into a key table: an upsert per micro-batch, exactly once.

A real streaming aggregation (``groupBy().count()``) in update mode, restarted from its checkpoint, checked
against a dict model, the Python read and Spark's read; a batch Spark replays is committed once; update
mode into a table without key, or into a missing table without ``primary_key``, is refused before the query
starts, with nothing created.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from sparkutil import read

import mere
from mere import errors

EVENTS = "user string, n long"


def _start(spark: SparkSession, source: Path, checkpoint: Path, wh: str, **options: str):  # type: ignore[no-untyped-def]
    writer = (
        spark.readStream.schema(EVENTS)
        .parquet(str(source))
        .groupBy("user")
        .count()
        .writeStream.format("mere")
        .outputMode("update")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.start("stream.counts")


def _run(spark: SparkSession, source: Path, checkpoint: Path, wh: str, **options: str) -> None:
    query = _start(spark, source, checkpoint, wh, **options)
    query.awaitTermination(timeout=300)
    assert query.exception() is None


def _drop(source: Path, name: str, users: list[str]) -> None:
    pq.write_table(pa.table({"user": users, "n": list(range(len(users)))}), source / f"{name}.parquet")


def _counts(t: mere.Table) -> dict[str, int]:
    return {r["user"]: r["count"] for r in t.scan().to_arrow().to_pylist()}


def test_update_mode_aggregation_upserts_once_per_batch(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    model: Counter[str] = Counter()
    first = ["a", "b", "b", "c", "a", "a"]
    _drop(source, "b0", first)
    model.update(first)
    _run(spark, source, checkpoint, wh, primary_key="user", buckets="2")  # creates the key table
    t = mere.connect(wh).table("stream.counts")
    assert t.spec.primary_key == ("user",)
    assert _counts(t) == dict(model)

    # A restart from the checkpoint: only changed groups come in the batch, and they replace their rows.
    second = ["b", "d", "d"]
    _drop(source, "b1", second)
    model.update(second)
    _run(spark, source, checkpoint, wh)
    t = mere.connect(wh).table("stream.counts")
    assert _counts(t) == dict(model)
    assert [s.operation for s in t.history()] == ["create", "upsert", "upsert"]
    assert t.history()[-1].summary["rows"] == 2  # the batch held b and d only
    spark_rows = {r.user: r["count"] for r in read(spark, wh, "stream.counts").collect()}
    assert spark_rows == dict(model)

    # Lose Spark's record that the last batch was committed: the restart replays it under the same batch
    # id, and the mere commit under that batch's key is found: no new version, the same rows.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    versions = len(t.history())
    _run(spark, source, checkpoint, wh)
    assert (checkpoint / "commits" / str(last)).exists()  # Spark ran and committed the batch again
    t = mere.connect(wh).table("stream.counts")
    assert len(t.history()) == versions
    assert _counts(t) == dict(model)
    assert not {p for p, _, _ in t.storage.list_files(t.location)} - set(
        t.catalog.sql.all_file_paths(t.record.id)
    )


def test_update_mode_refusals_change_nothing(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    _drop(source, "b0", ["a"])
    cat = mere.connect(wh)
    # A missing table and no primary key to create it with: refused, nothing created.
    with pytest.raises(errors.InvalidInput, match="primary_key"):
        _start(spark, source, tmp_path / "c1", wh)
    assert not cat.exists("stream.counts")
    # A table without key: update mode would need to replace rows by key.
    keyless = cat.create_table("stream.counts", pa.schema([("user", pa.string()), ("count", pa.int64())]))
    with pytest.raises(errors.InvalidInput, match=r"has no primary key.*outputMode\('append'\)"):
        _start(spark, source, tmp_path / "c2", wh)
    assert cat.table("stream.counts").version == keyless.version
    assert not (tmp_path / "c2").exists()  # the query never started
    # Layout options must describe an existing table, as for batch writes.
    cat.drop_table("stream.counts")
    cat.create_table(
        "stream.counts", pa.schema([("user", pa.string()), ("count", pa.int64())]), primary_key=["user"]
    )
    with pytest.raises(errors.TableExists, match="different spec"):
        _start(spark, source, tmp_path / "c3", wh, primary_key="count")
    with pytest.raises(errors.InvalidInput, match="operation 'delete'"):
        _start(spark, source, tmp_path / "c4", wh, operation="delete")


def test_complete_mode_replaces_the_table(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    """Complete mode (unchanged): each batch's whole result replaces the table, one version per batch."""
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    _drop(source, "b0", ["a", "b", "a"])
    mere.connect(wh).create_table(
        "stream.counts", pa.schema([("user", pa.string()), ("count", pa.int64())]), primary_key=["user"]
    )
    query = (
        spark.readStream.schema(EVENTS)
        .parquet(str(source))
        .groupBy("user")
        .count()
        .writeStream.format("mere")
        .outputMode("complete")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start("stream.counts")
    )
    query.awaitTermination(timeout=300)
    assert query.exception() is None
    t = mere.connect(wh).table("stream.counts")
    assert _counts(t) == {"a": 2, "b": 1}
    assert t.history()[-1].operation == "overwrite"
