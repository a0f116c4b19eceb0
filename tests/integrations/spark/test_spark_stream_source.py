"""Structured Streaming out of a mere table: its change feed, one version range per micro-batch.

The first tests drive the stream reader's methods directly (what Spark's driver and tasks call, without
the JVM); the others run real queries on the session's local Spark, down to a mere -> mere copy that must
equal its source after every micro-batch and across a restart from the checkpoint.
"""

from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles
from pyspark.sql.types import StructType
from sparkutil import read

import mere
from mere.errors import InvalidInput, NoSuchVersion
from mere.integrations.spark import TableRef
from mere.integrations.spark.datasource import MereDataSource
from mere.integrations.spark_streaming import MereStreamReader, stream_schema

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())])
CHANGE = ["_change", "_version", "_commit_time"]


def _table(wh: str, name: str = "src.orders", **kwargs: Any) -> mere.Table:
    kwargs.setdefault("merge_operators", {"qty": "sum"})  # the feed carries merged rows, sums included
    return mere.connect(wh).create_table(
        name, SCHEMA, primary_key="id", partition_by="day", buckets=4, **kwargs
    )


def _rows(n: int, start: int = 0, qty: int = 1) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "day": ["a" if i % 2 else "b" for i in ids],
            "qty": [qty] * n,
            "note": [f"n{i}" for i in ids],
        }
    )


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(str(row[k]) for k in sorted(row))


def _sorted(rows: list[dict[str, Any]], columns: list[str] | None = None) -> list[dict[str, Any]]:
    picked = [{c: r[c] for c in (columns or sorted(r))} for r in rows]
    return sorted(picked, key=_key)


def _feed(t: mere.Table, start: int, end: int) -> list[dict[str, Any]]:
    return _sorted(t.changes(start, end).read_all().to_pylist())


def _state(t: mere.Table, version: int | None = None) -> list[dict[str, Any]]:
    return _sorted(t.scan(version=version).to_arrow().to_pylist(), ["id", "day", "qty", "note"])


# ---------------------------------------------------------------------------------------------
# The reader's methods, as Spark's driver and tasks call them


def _reader(wh: str, name: str = "src.orders", **options: str) -> MereStreamReader:
    opts = {"warehouse": wh, "path": name, "readChangeFeed": "true", **options}
    ref = TableRef.from_options(opts)
    return MereStreamReader(ref, opts, stream_schema(ref, opts))


def _read(reader: MereStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[dict[str, Any]]:
    parts = reader.partitions(start, end)
    parts = pickle.loads(pickle.dumps(parts))  # what Spark ships to its tasks
    batches = [b for p in parts for b in reader.read(p)]
    for b in batches:
        assert b.schema.equals(reader.target)
    return _sorted(pa.Table.from_batches(batches, reader.target).to_pylist())


def test_offsets_snapshot_and_change_batches_match_the_change_feed(wh: str) -> None:
    t = _table(wh)
    t.upsert(_rows(40))  # v1
    reader = _reader(wh, min_partitions="3")
    start = reader.initialOffset()
    assert start == {"version": -1, "table": t.record.uuid}  # nothing read yet: the snapshot comes first
    first = reader.latestOffset(start, ReadMaxFiles(1))
    assert first["version"] == 1
    assert len(reader.partitions(start, first)) == 3  # the snapshot is cut into several tasks
    snapshot = _read(reader, start, first)
    committed = t.snapshot(version=1).committed_at
    assert snapshot == _sorted(
        [{**r, "_change": "insert", "_version": 1, "_commit_time": committed} for r in _state(t)]
    )

    t.upsert(_rows(5, start=38, qty=2))  # v2: two updates (sums) and three inserts
    t.upsert(pa.table({"id": [1], "day": ["a"], "note": ["partial"]}))  # v3: a partial upsert
    t.delete("id in (4, 7)")  # v4
    t.compact()  # v5: changes no row
    (
        t.merge(pa.table({"id": [5, 90], "day": ["a", "b"], "qty": [10, 90]}))  # v6
        .when_matched_update(set={"qty": "t.qty + s.qty"})
        .when_not_matched_insert_all()
        .execute()
    )
    offset = first
    ends = []
    while True:  # one version per batch: each batch is that version's change feed
        end = reader.latestOffset(offset, ReadMaxFiles(1))
        if end == offset:
            break
        assert end["version"] == offset["version"] + 1
        assert _read(reader, offset, end) == _feed(t, offset["version"], end["version"])
        ends.append(end["version"])
        offset = end
    assert ends == [2, 3, 4, 5, 6]
    assert _read(reader, {**first, "version": 4}, {**first, "version": 5}) == []  # the compaction
    # All at once: the net change of the whole range, split across tasks.
    everything = reader.latestOffset(first, ReadAllAvailable())
    assert everything["version"] == 6
    assert len(reader.partitions(first, everything)) > 1
    assert _read(reader, first, everything) == _feed(t, 1, 6)


def _moving(wh: str, name: str = "src.moving") -> mere.Table:
    """A table with table-wide keys (the default where the partition column is outside the key)."""
    t = mere.connect(wh).create_table(
        name, SCHEMA, primary_key="id", partition_by="day", buckets=3, properties={"compaction.auto": "off"}
    )
    assert t.key_scope == "table"
    return t


def _moves(t: mere.Table, seed: int, steps: int) -> None:
    """Upserts that move keys between four partitions (both ways), deletes and re-inserts."""
    import random

    rng = random.Random(seed)
    for _ in range(steps):
        ids = rng.sample(range(60), 25)
        if rng.random() < 0.2:
            t.delete(pa.table({"id": ids[:5]}))
            continue
        t.upsert(
            pa.table(
                {
                    "id": ids,
                    "day": [rng.choice("abcd") for _ in ids],
                    "qty": [rng.randrange(100) for _ in ids],
                    "note": [f"n{rng.randrange(9)}" for _ in ids],
                }
            )
        )


def test_a_moving_key_is_deleted_before_it_is_inserted_in_every_task(wh: str) -> None:
    t = _moving(wh)
    _moves(t, seed=1, steps=8)
    reader = _reader(wh, "src.moving", min_partitions="4")
    start = {"version": 1, "table": t.record.uuid}  # keys that exist at the start can move
    end = {"version": t.version, "table": t.record.uuid}
    parts = pickle.loads(pickle.dumps(reader.partitions(start, end)))
    assert len(parts) > 1
    # A key keeps its bucket when it moves: every split of a bucket is in one task.
    buckets = [{b for _, b in p.splits} for p in parts]
    assert all(not (x & y) for i, x in enumerate(buckets) for y in buckets[i + 1 :])
    moved = 0
    for p in parts:
        rows = [r for b in reader.read(p) for r in b.to_pylist()]
        last: dict[int, tuple[str, str]] = {}
        for r in rows:  # in each task, a key's delete comes before its row in another partition
            if r["id"] in last and last[r["id"]][1] != "delete" and r["_change"] == "delete":
                pytest.fail(f"delete of {r['id']} in {r['day']} after its row in {last[r['id']][0]}")
            moved += r["id"] in last and last[r["id"]][0] != r["day"]
            last[r["id"]] = (r["day"], r["_change"])
    assert moved > 0  # the range moved keys
    assert _read(reader, start, end) == _feed(t, 1, t.version)


def test_starting_version_is_inclusive_and_latest_starts_after_the_newest(wh: str) -> None:
    t = _table(wh)
    t.upsert(_rows(10))  # v1
    t.upsert(_rows(2, start=3, qty=5))  # v2
    t.delete("id = 9")  # v3
    reader = _reader(wh, startingVersion="2", maxVersionsPerTrigger="10")
    start = reader.initialOffset()
    assert start["version"] == 1  # the changes committed in version 2 and after
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["version"] == 3
    assert _read(reader, start, end) == _feed(t, 1, 3)
    assert _reader(wh, startingVersion="0").initialOffset()["version"] == 0  # creation: no rows
    assert _reader(wh, startingVersion="4").initialOffset()["version"] == 3  # the next commit
    assert _reader(wh, startingVersion="latest").initialOffset()["version"] == 3
    with pytest.raises(NoSuchVersion, match="after the next version 4"):
        _reader(wh, startingVersion="5").initialOffset()
    # Trigger.AvailableNow stops at the version that was newest when it started.
    reader.prepareForTriggerAvailableNow()
    t.upsert(_rows(1, start=50))
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_projection_and_filter_select_feed_rows(wh: str) -> None:
    t = _table(wh)
    t.upsert(_rows(6))  # v1
    t.upsert(_rows(4, start=3, qty=3))  # v2
    reader = _reader(wh, startingVersion="2", columns="qty", filter="day = 'a'")
    assert reader.columns == ["day", "id", "qty"]  # key and partition columns always come first
    start = reader.initialOffset()
    got = _read(reader, start, reader.latestOffset(start, ReadAllAvailable()))
    want = [r for r in _feed(t, 1, 2) if r["day"] == "a"]
    assert got == _sorted(want, ["day", "id", "qty", *CHANGE])
    snapshot = _reader(wh, columns="qty", filter="day = 'a'")
    start = snapshot.initialOffset()
    rows = _read(snapshot, start, snapshot.latestOffset(start, ReadAllAvailable()))
    assert _sorted(rows, ["day", "id", "qty"]) == _sorted(
        [r for r in _state(t) if r["day"] == "a"], ["day", "id", "qty"]
    )


def test_expired_start_raises_no_such_version(wh: str) -> None:
    t = _table(wh)
    for i in range(3):
        t.upsert(_rows(3, start=i))
    t.expire(older_than=dt.timedelta(0), dry_run=False)  # only version 3 stays readable
    with pytest.raises(NoSuchVersion, match="expired"):
        _reader(wh, startingVersion="2").initialOffset()
    reader = _reader(wh)  # the snapshot needs only the newest version
    start = reader.initialOffset()
    assert len(_read(reader, start, reader.latestOffset(start, ReadAllAvailable()))) == 5


def test_bad_options_raise_invalid_input_before_any_read(wh: str) -> None:
    _table(wh)
    mere.connect(wh).create_table("src.log", pa.schema([("x", pa.int64())]))
    bad = [
        ({"startingVersion": "two"}, "startingVersion"),
        ({"startingVersion": "-1"}, "startingVersion"),
        ({"maxVersionsPerTrigger": "0"}, "maxVersionsPerTrigger"),
        ({"readChangeFeed": "maybe"}, "readChangeFeed"),  # yes/no are booleans too (mere.options)
        ({"startingVerison": "1"}, "did you mean 'startingversion'"),
        ({"version": "1"}, "for batch reads"),
        ({"columns": "nope"}, "nope"),
    ]
    for options, message in bad:
        with pytest.raises(InvalidInput, match=message):
            _reader(wh, **options)
    with pytest.raises(InvalidInput, match="primary key"):
        _reader(wh, "src.log")
    opts = {"warehouse": wh, "path": "src.orders"}
    ref = TableRef.from_options(opts)
    schema = stream_schema(ref, {**opts, "readChangeFeed": "true"})
    with pytest.raises(InvalidInput, match=r"readChangeFeed', 'true'"):
        MereStreamReader(ref, opts, schema)


# ---------------------------------------------------------------------------------------------
# Real queries


def _stream(spark: SparkSession, wh: str, name: str = "src.orders", **options: Any) -> DataFrame:
    r = spark.readStream.format("mere").option("warehouse", wh).option("readChangeFeed", "true")
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load(name)


def _batches(df: DataFrame, checkpoint: Path) -> list[list[dict[str, Any]]]:
    """Every micro-batch of an availableNow run, in order."""
    out: list[tuple[int, list[dict[str, Any]]]] = []

    def each(batch: DataFrame, batch_id: int) -> None:
        out.append((batch_id, _sorted(batch.toArrow().to_pylist())))  # Arrow keeps timestamps in UTC

    query = (
        df.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=120)
    assert query.exception() is None
    return [rows for _, rows in sorted(out, key=lambda b: b[0])]


def test_stream_snapshot_then_one_version_per_batch(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = _table(wh)
    t.upsert(_rows(6))  # v1
    t.upsert(_rows(2, qty=4))  # v2
    df = _stream(spark, wh, maxVersionsPerTrigger=1)
    assert df.columns == ["day", "id", "qty", "note", *CHANGE]  # key and partition columns first
    assert _stream(spark, wh, columns="qty").columns == ["day", "id", "qty", *CHANGE]
    checkpoint = tmp_path / "chk"
    [snapshot] = _batches(df, checkpoint)
    assert [r["_change"] for r in snapshot] == ["insert"] * 6
    assert {r["_version"] for r in snapshot} == {2}  # the version the stream started at
    assert _sorted(snapshot, ["id", "day", "qty", "note"]) == _state(t)

    t.upsert(_rows(3, start=5, qty=1))  # v3: updates id 5 (sum), inserts 6 and 7
    t.delete("id = 0")  # v4
    t.compact()  # v5: no change
    batches = _batches(df, checkpoint)  # the same checkpoint: continues after version 2
    assert batches == [_feed(t, 2, 3), _feed(t, 3, 4), []]
    assert [r["_change"] for r in batches[1]] == ["delete"]


def test_stream_errors_reach_the_query(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = _table(wh)
    t.upsert(_rows(2))
    t.upsert(_rows(2))
    with pytest.raises(Exception, match="startingVersion"):  # at load(): no query starts
        _stream(spark, wh, startingVersion="soon")
    with pytest.raises(Exception, match="readChangeFeed"):
        read(spark, wh, "src.orders", readChangeFeed="true").collect()  # a batch read is refused
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    with pytest.raises(Exception, match="NoSuchVersion"):  # when the query starts, before any batch
        _batches(_stream(spark, wh, startingVersion=1), tmp_path / "expired")


# ---------------------------------------------------------------------------------------------
# mere -> Spark -> mere, exactly once


def _copy(spark: SparkSession, wh: str, checkpoint: Path, **source_options: Any) -> Any:
    return (
        _stream(spark, wh, **source_options)
        .drop("_version", "_commit_time")  # the target takes the table columns and its change column
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("primary_key", "id")
        .option("partition_by", "day")
        .option(
            "cdc_column", "_change"
        )  # insert/update_after upsert, delete deletes, update_before is ignored
        .option("checkpointLocation", str(checkpoint))
    )


def test_copy_equals_the_source_after_every_micro_batch(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = _table(wh)
    t.upsert(_rows(20))
    query = _copy(spark, wh, tmp_path / "chk").trigger(processingTime="100 milliseconds").start("dst.orders")
    try:
        query.processAllAvailable()  # the sink creates the target when the query starts
        target = mere.connect(wh).table("dst.orders")
        steps = [
            lambda: t.upsert(_rows(5, start=18, qty=2)),
            lambda: t.delete("id in (1, 2, 3)"),
            lambda: t.update(set={"note": "upper(note)"}, where="qty > 1"),
            lambda: t.compact(),
            lambda: t.set_properties({"team": "sales"}),  # no file changes: a batch without tasks
            lambda: t.rollback(2),
            lambda: t.upsert(pa.table({"id": [4, 2], "day": ["b", "b"], "qty": [7, 1]})),  # 2 comes back
        ]
        assert _state(target) == _state(t)
        for step in steps:
            step()
            query.processAllAvailable()
            assert _state(target) == _state(t)
        assert query.exception() is None
    finally:
        query.stop()


def test_a_copy_keeps_keys_that_move_partition_across_tasks(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    t = _moving(wh)
    _moves(t, seed=2, steps=2)
    query = (
        _stream(spark, wh, "src.moving", min_partitions="4", maxVersionsPerTrigger="2")
        .drop("_version", "_commit_time")
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("primary_key", "id")
        .option("partition_by", "day")
        .option("cdc_column", "_change")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="100 milliseconds")
        .start("dst.moving")
    )
    try:
        query.processAllAvailable()
        target = mere.connect(wh).table("dst.moving")
        assert _state(target) == _state(t)
        for seed in range(3, 6):
            _moves(t, seed=seed, steps=3)  # micro-batches of one and two versions
            query.processAllAvailable()
            assert _state(target.refresh()) == _state(t)
        assert query.exception() is None
    finally:
        query.stop()


def test_copy_restarts_from_the_checkpoint_exactly_once(spark: SparkSession, wh: str, tmp_path: Path) -> None:
    t = _table(wh)
    t.upsert(_rows(10))  # v1
    t.upsert(_rows(3, start=8, qty=5))  # v2
    t.delete("id = 0")  # v3
    checkpoint = tmp_path / "chk"

    def run() -> None:
        copy = _copy(spark, wh, checkpoint, startingVersion=1, maxVersionsPerTrigger=1)
        query = copy.trigger(availableNow=True).start("dst.orders")
        query.awaitTermination(timeout=120)
        assert query.exception() is None

    run()  # one micro-batch per version
    target = mere.connect(wh).table("dst.orders")
    # Each target commit is one micro-batch: equal to the source at that batch's version.
    assert [_state(target, v) for v in (1, 2, 3)] == [_state(t, v) for v in (1, 2, 3)]

    # A crash after the sink committed batch 2 but before Spark recorded it: Spark replays the batch
    # (same version range, same rows) and the sink sees it was committed already.
    for name in ("2", ".2.crc"):
        (checkpoint / "commits" / name).unlink()
    t.upsert(_rows(2, start=30))  # v4, written while the query is down
    t.delete("id in (8, 30)")  # v5
    run()
    assert (checkpoint / "commits" / "2").exists()
    assert target.version == 5  # no commit twice, none lost: one per source version
    assert [_state(target, v) for v in (3, 4, 5)] == [_state(t, v) for v in (3, 4, 5)]


# ---------------------------------------------------------------------------------------------
# Option consumer: the stream holds a change-feed consumer, so expire keeps what it has yet to read


def test_a_consumer_follows_the_offsets_spark_commits(wh: str) -> None:
    t = _table(wh, properties={"retention.max-age": "off"})
    t.upsert(_rows(4))  # v1
    reader = _reader(wh, consumer="spark-copy")
    start = reader.initialOffset()
    assert start["version"] == -1  # a new consumer: the snapshot first
    assert t.consumer("spark-copy", create=False).position == 1  # pins the version the snapshot reads
    first = reader.latestOffset(start, ReadAllAvailable())
    t.upsert(_rows(2, start=10))  # v2
    t.upsert(_rows(2, start=20))  # v3
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert not t.snapshot(version=1).expired  # the batch not committed yet stays readable
    assert len(_read(reader, start, first)) == 4
    reader.commit(first)
    assert t.consumer("spark-copy").position == 1
    second = reader.latestOffset(first, ReadMaxFiles(1))
    assert _read(reader, first, second) == _feed(t, 1, 2)
    reader.commit(second)
    assert t.consumer("spark-copy").position == 2
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert [s.version for s in t.history() if not s.expired] == [2, 3]

    # A new query (a new checkpoint) starts as without the option (Spark may ask twice: the same start).
    again = _reader(wh, consumer="spark-copy")
    assert again.initialOffset()["version"] == again.initialOffset()["version"] == -1
    assert t.consumer("spark-copy").position == 2  # an existing consumer before the start stays
    resumed = _reader(wh, consumer="spark-copy", startingVersion="3")  # position + 1: resume it
    begin = resumed.initialOffset()
    assert begin["version"] == 2
    end = resumed.latestOffset(begin, ReadAllAvailable())
    assert _read(resumed, begin, end) == _feed(t, 2, 3)
    resumed.commit(end)
    assert t.consumer("spark-copy").position == 3
    back = _reader(wh, consumer="spark-copy", startingVersion="3")  # moved back to where a query starts
    assert back.initialOffset()["version"] == 2 and t.consumer("spark-copy").position == 2
    # A restart from a checkpoint (no initialOffset) registers a missing consumer at its offset.
    t.drop_consumer("spark-copy")
    restarted = _reader(wh, consumer="spark-copy")
    restarted.latestOffset({"version": 2, "table": t.record.uuid}, ReadAllAvailable())
    assert t.consumer("spark-copy").position == 2
    for bad in ("bad name", ""):
        with pytest.raises(InvalidInput, match="consumer name"):
            _reader(wh, consumer=bad)
    batch_opts = {"warehouse": wh, "path": "src.orders", "consumer": "x"}
    with pytest.raises(InvalidInput, match="is for stream reads"):
        MereDataSource(batch_opts).reader(StructType([]))


def test_a_query_with_a_consumer_survives_expire_and_commits_its_batches(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    t = _table(wh, properties={"retention.max-age": "off"})
    t.upsert(_rows(10))  # v1
    checkpoint = tmp_path / "chk"

    def run() -> None:
        copy = _copy(spark, wh, checkpoint, consumer="copy", maxVersionsPerTrigger=1)
        query = copy.trigger(availableNow=True).start("dst.orders")
        query.awaitTermination(timeout=120)
        assert query.exception() is None

    run()
    assert t.consumer("copy").position == 1
    t.upsert(_rows(3, start=8, qty=5))  # v2
    t.delete("id = 0")  # v3
    t.expire(older_than=dt.timedelta(0), dry_run=False)  # before: NoSuchVersion at the restart
    run()  # from the checkpoint
    target = mere.connect(wh).table("dst.orders")
    assert _state(target) == _state(t)
    # Spark commits a batch's end to its source when it plans the next batch: the consumer trails the
    # last batch by one (it holds more, never less).
    assert t.consumer("copy").position == 2
    t.upsert(_rows(1, start=30))  # v4
    run()
    assert _state(target) == _state(t)
    assert t.consumer("copy").position == 3
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert [s.version for s in t.history() if not s.expired] == [3, 4]
