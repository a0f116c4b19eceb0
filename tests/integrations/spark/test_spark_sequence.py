"""Tables with ``sequence_by`` through Spark: batch reads (the data source and ``read_table``'s native route),
the change-feed stream source, and the sink (creating a sequenced table, and writing late, duplicated and
shuffled events), each checked against a plain dict model applied in sequence order."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from sparkutil import read

import mere
from mere.integrations.spark import read_table

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("note", pa.string()), ("lsn", pa.int64())])
COLUMNS = ["id", "qty", "note", "lsn"]
Model = dict[int, dict[str, Any]]


def _events(rows: list[tuple[int, int, str, int, str]]) -> pa.Table:
    """(id, qty, note, lsn, op) rows as a CDC batch."""
    cols = list(zip(*rows))
    return pa.table(
        {"id": cols[0], "qty": cols[1], "note": cols[2], "lsn": cols[3], "op": cols[4]},
        schema=SCHEMA.append(pa.field("op", pa.string())),
    )


def _apply(model: Model, seen: dict[int, int], events: pa.Table) -> None:
    """The dict model: per key the event with the highest lsn wins (a delete leaves a tombstone)."""
    for r in events.to_pylist():
        if r["lsn"] <= seen.get(r["id"], -1):
            continue
        seen[r["id"]] = r["lsn"]
        if r["op"] == "d":
            model.pop(r["id"], None)
        else:
            model[r["id"]] = {c: r[c] for c in COLUMNS}


def _model_rows(model: Model) -> list[dict[str, Any]]:
    return [model[k] for k in sorted(model)]


def _rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({c: r[c] for c in COLUMNS} for r in rows), key=lambda r: r["id"])


def _spark_rows(df: DataFrame) -> list[dict[str, Any]]:
    return _rows(df.toArrow().to_pylist())


def _sequenced(wh: str, name: str = "seq.events") -> mere.Table:
    return mere.connect(wh).create_table(
        name,
        SCHEMA,
        primary_key="id",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        properties={"compaction.auto": "off"},  # one version per step: the stream reads one per batch
    )


def _late_history(t: mere.Table) -> tuple[Model, list[int]]:
    """Commits with late events (older than the stored version), a delete, a late re-insert under the
    tombstone and a compaction; returns the model and the versions committed."""
    model: Model = {}
    seen: dict[int, int] = {}
    steps = [
        _events([(i, i, f"n{i}", 10, "c") for i in range(10)]),
        _events([(1, 100, "up", 20, "u"), (2, -1, "late", 5, "u"), (3, 0, "", 30, "d")]),
        # late re-insert of 3 (under its delete), late delete of 4, two versions of 5 out of order
        _events(
            [(3, 33, "back", 25, "c"), (4, 0, "", 1, "d"), (5, 55, "new", 40, "u"), (5, 54, "old", 35, "u")]
        ),
        None,  # compaction: 3's tombstone must survive it
        _events([(3, 34, "again", 26, "c"), (6, 0, "", 50, "d"), (11, 11, "n11", 11, "c")]),
    ]
    versions = []
    for events in steps:
        if events is None:
            t.compact()
        else:
            t.upsert(events)
            _apply(model, seen, events)
        versions.append(t.refresh().version)
    assert versions == sorted(set(versions)), versions  # every step committed a version
    return model, versions


def test_batch_reads_of_a_sequenced_table_equal_the_model(spark: SparkSession, wh: str) -> None:
    t = _sequenced(wh)
    model, _ = _late_history(t)
    want = _model_rows(model)
    assert _rows(t.to_arrow().to_pylist()) == want
    assert _spark_rows(read(spark, wh, "seq.events")) == want
    assert _spark_rows(read_table(spark, "seq.events", warehouse=wh)) == want
    # After a full compaction every split is one file: read_table's native route reads the files as
    # they are, so the tombstones they keep (3, 6) must send those splits through mere's merge.
    t.compact()
    assert _spark_rows(read_table(spark, "seq.events", warehouse=wh)) == want
    assert _spark_rows(read_table(spark, "seq.events", warehouse=wh, filter="id >= 3")) == [
        r for r in want if r["id"] >= 3
    ]


def test_the_change_stream_of_a_sequenced_table_copies_it(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    t = _sequenced(wh)
    model, versions = _late_history(t)

    out: list[tuple[int, list[dict[str, Any]]]] = []

    def each(batch: DataFrame, batch_id: int) -> None:
        out.append((batch_id, batch.toArrow().to_pylist()))

    stream = (
        spark.readStream.format("mere")
        .option("warehouse", wh)
        .option("readChangeFeed", "true")
        .option("startingVersion", "1")
        .option("maxVersionsPerTrigger", "1")
        .load("seq.events")
    )
    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "feed"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=120)
    assert query.exception() is None
    batches = [rows for _, rows in sorted(out, key=lambda b: b[0])]
    # One batch per version, each the Python change feed of that version; late events changed nothing.
    assert len(batches) == len(versions)
    prev = 0
    for v, rows in zip(versions, batches):
        feed = t.changes(prev, v).read_all().to_pylist()
        key = lambda r: (r["id"], r["_change"])  # noqa: E731
        assert sorted(rows, key=key) == sorted(feed, key=key), v
        prev = v
    assert {(r["id"], r["_change"]) for r in batches[2]} == {(5, "update_before"), (5, "update_after")}
    assert batches[3] == []  # the compaction
    assert {(r["id"], r["_change"]) for r in batches[4]} == {(6, "delete"), (11, "insert")}

    # mere -> Spark -> mere: the sink creates a sequenced copy from the feed and it equals the source.
    copy = (
        stream.drop("_version", "_commit_time")
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("primary_key", "id")
        .option("cdc_column", "_change")
        .option("sequence_by", "lsn")
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(availableNow=True)
        .start("seq.copy")
    )
    copy.awaitTermination(timeout=120)
    assert copy.exception() is None
    target = mere.connect(wh).table("seq.copy")
    assert target.sequence_by == ("lsn",)
    assert _rows(target.to_arrow().to_pylist()) == _model_rows(model)


def test_the_sink_applies_shuffled_duplicated_late_events_by_sequence(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    rng = random.Random(5)
    history: list[tuple[int, int, str, int, str]] = []
    lsn = 0
    for _ in range(400):
        lsn += rng.randint(1, 3)
        key = rng.randrange(40)
        op = rng.choices("cud", weights=(3, 5, 2))[0]
        history.append((key, rng.randint(-5, 5), f"v{lsn}", lsn, op))
    delivered = history + rng.choices(history, k=80)  # duplicates
    rng.shuffle(delivered)
    model: Model = {}
    _apply(model, {}, _events(sorted(history, key=lambda r: r[3])))

    # Batch writes of the shuffled events in three commits (replaying the second), many partitions each.
    thirds = [delivered[i::3] for i in range(3)]
    for part in [*thirds, thirds[1]]:
        df = spark.createDataFrame(_events(part).to_pandas()).repartition(4)
        (
            df.write.format("mere")
            .mode("append")
            .option("warehouse", wh)
            .option("primary_key", "id")
            .option("cdc_column", "op")
            .option("sequence_by", "lsn")
            .option("buckets", "3")
            .save("seq.sink")
        )
    t = mere.connect(wh).table("seq.sink")
    assert t.sequence_by == ("lsn",)
    assert _rows(t.to_arrow().to_pylist()) == _model_rows(model)
    assert _spark_rows(read(spark, wh, "seq.sink")) == _model_rows(model)

    # The layout options of an existing table must describe it: a different sequence is refused.
    with pytest.raises(Exception, match="sequence_by"):
        (
            spark.createDataFrame(_events(history[:3]).to_pandas())
            .write.format("mere")
            .mode("append")
            .option("warehouse", wh)
            .option("sequence_by", "qty")
            .save("seq.sink")
        )
    assert _rows(t.refresh().to_arrow().to_pylist()) == _model_rows(model)
