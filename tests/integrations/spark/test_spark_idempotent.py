"""Idempotent Spark MERGE and exactly-once foreachBatch: a replayed micro-batch commits nothing new.

* ``SparkMerge.execute(idempotency_key=...)`` twice: one version, the first metrics back, and the replay
  runs no Spark job (it stages nothing); another driver committing the key while the job runs wins, and
  this job's files are deleted.
* ``batch_key`` reads the query id of a real streaming query inside ``foreachBatch`` (PySpark classic's
  ``sql.streaming.queryId`` local property); bad arguments are InvalidInput.
* A real streaming query (Parquet files in, ``foreachBatch`` MERGEs each micro-batch with ``t.qty +
  s.qty``): calling the batch function again with the same (query id, batch id) changes nothing; a batch
  that fails after its commit is run again by Spark when the query restarts from its checkpoint and is not
  applied twice, while the same query without the key applies it twice (the control).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

import mere
from mere.errors import InvalidInput
from mere.integrations.spark import SparkMerge, batch_key, merge, query_id
from mere.integrations.spark.sink import STREAM_QUERY_ID_PROPERTY
from mere.table.merge import MergeMetrics

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64())])
MOVES = "id long, qty long"
ROOT = Path(__file__).resolve().parents[3]
OFF = {"compaction.auto": "off", "retention.max-age": "off"}  # versions are commits of the test alone


def _stock(wh: str, name: str = "shop.stock") -> mere.Table:
    t = mere.connect(wh).create_table(name, SCHEMA, primary_key=["id"], buckets=4, properties=OFF)
    t.upsert(pa.table({"id": [1, 2, 3, 4], "qty": [10, 20, 30, 40]}, SCHEMA))
    return t


def _content(t: mere.Table) -> dict[int, int]:
    return {r["id"]: r["qty"] for r in t.to_arrow().to_pylist()}


def _orphans(t: mere.Table) -> set[str]:
    on_disk = {p for p, _, _ in t.storage.list_files(t.location)}
    return on_disk - t.catalog.sql.all_file_paths(t.record.id)


def _add(spark: SparkSession, df: DataFrame, wh: str, name: str, key: str | None) -> MergeMetrics:
    return (
        merge(spark, df, name, warehouse=wh)
        .when_matched_update(set={"qty": "t.qty + s.qty"})
        .when_not_matched_insert_all()
        .execute(idempotency_key=key)
    )


def _counting_stage(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the Spark jobs SparkMerge runs (each stages the MERGE's files)."""
    calls: list[int] = []
    original = SparkMerge._stage

    def counted(self: SparkMerge, *args: Any) -> Any:
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(SparkMerge, "_stage", counted)
    return calls


def test_a_spark_merge_with_a_key_commits_once(
    spark: SparkSession, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _stock(wh)
    jobs = _counting_stage(monkeypatch)
    df = spark.createDataFrame([(1, 1), (2, 2), (9, 90)], MOVES)
    first = _add(spark, df, wh, t.name, "load-1")
    assert not first.already_committed and first.version == 2 == t.version and len(jobs) == 1
    assert (first.inserted, first.updated) == (1, 2) and first.rows_read == 2
    again = _add(spark, df, wh, t.name, "load-1")
    assert again.already_committed and again.version == first.version and len(jobs) == 1  # no job ran
    assert again == dataclasses.replace(first, seconds=again.seconds, already_committed=True)
    other = _add(
        spark, spark.createDataFrame([(4, 4)], MOVES), wh, t.name, "load-1"
    )  # the key names the work
    assert other.already_committed and other.version == first.version
    assert _content(t) == {1: 11, 2: 22, 3: 30, 4: 40, 9: 90} and t.version == 2
    assert _add(spark, df, wh, t.name, "load-2").version == 3  # another key: applied again
    assert _content(t) == {1: 12, 2: 24, 3: 30, 4: 40, 9: 180}
    with pytest.raises(InvalidInput, match="idempotency_key must be a non-empty string"):
        _add(spark, df, wh, t.name, "")
    t.upsert(pa.table({"id": [5], "qty": [5]}, SCHEMA), idempotency_key="an-upsert")
    with pytest.raises(InvalidInput, match="not a MERGE"):
        _add(spark, df, wh, t.name, "an-upsert")
    assert t.version == 4 and len(jobs) == 2 and not _orphans(t)


def test_a_key_committed_by_another_driver_while_the_job_runs_wins(
    spark: SparkSession, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _stock(wh)
    other = mere.connect(wh).table(t.name)
    staged_paths: list[str] = []
    original = SparkMerge._stage
    winner: list[MergeMetrics] = []

    def racing(self: SparkMerge, *args: Any) -> Any:
        staged = original(self, *args)
        staged_paths.extend(f.path for s in staged for f in s.files)
        # Another driver replaying the same work commits the key first (its own MERGE, locally).
        winner.append(
            other.merge(pa.table({"id": [1], "qty": [100]}, SCHEMA))
            .when_matched_update(set={"qty": "t.qty + s.qty"})
            .execute(idempotency_key="load-1")
        )
        return staged

    monkeypatch.setattr(SparkMerge, "_stage", racing)
    mine = _add(spark, spark.createDataFrame([(1, 1), (7, 7)], MOVES), wh, t.name, "load-1")
    assert staged_paths and winner and not winner[0].already_committed
    assert mine.already_committed and mine.version == winner[0].version == t.version == 2
    assert (mine.updated, mine.inserted) == (1, 0)  # the winner's counts
    assert _content(t) == {1: 110, 2: 20, 3: 30, 4: 40}
    assert not _orphans(t) and not {p for p, _, _ in t.storage.list_files(t.location)} & set(staged_paths)


def test_batch_key_arguments(spark: SparkSession) -> None:
    assert batch_key("q-1", 7) == "spark-batch:q-1:7:write"
    assert batch_key("q-1", 0, what="merge") == "spark-batch:q-1:0:merge"
    for bad in (-1, 1.5, "3", None, True):
        with pytest.raises(InvalidInput, match="batch_id"):
            batch_key("q", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="what"):
        batch_key("q", 1, what="")
    with pytest.raises(InvalidInput, match="255"):
        batch_key("q" * 300, 1)
    with pytest.raises(InvalidInput, match="not a micro-batch of a running streaming query"):
        batch_key(spark.range(1), 1)  # a DataFrame outside foreachBatch
    for bad in (5, None, ""):
        with pytest.raises(InvalidInput):
            query_id(bad)


# -- foreachBatch on a real streaming query -------------------------------------------------------------


class Batches:
    """A foreachBatch function that MERGEs each micro-batch (``t.qty + s.qty``) into a mere table and
    records what it saw; ``crash_after_commit`` fails a batch's first run after its commit (a driver killed
    between the commit and Spark's record of the batch)."""

    def __init__(self, wh: str, name: str, keyed: bool, crash_after_commit: int | None = None) -> None:
        self.wh, self.name, self.keyed = wh, name, keyed
        self.crash_after_commit = crash_after_commit
        self.seen: list[tuple[str, int, str | None, MergeMetrics]] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        key = batch_key(df, batch_id, what="stock") if self.keyed else None
        metrics = _add(df.sparkSession, df, self.wh, self.name, key)
        self.seen.append((query_id(df), batch_id, key, metrics))
        if batch_id == self.crash_after_commit:
            self.crash_after_commit = None
            raise RuntimeError(f"killed after committing batch {batch_id}")


def _inbox(tmp_path: Path) -> Path:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for i, (ids, qty) in enumerate([([1, 10], [1, 100]), ([1, 2], [2, 2]), ([1, 11], [4, 110])]):
        path = inbox / f"{i}.parquet"
        pq.write_table(pa.table({"id": ids, "qty": qty}, SCHEMA), path)
        # Spark's file source takes files in modification-time order: files written within one clock tick
        # could swap micro-batches (batch 0's rows replayed instead of batch 1's).
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    return inbox


def _run(spark: SparkSession, inbox: Path, checkpoint: Path, fn: Callable[[DataFrame, int], None]) -> Any:
    query = (
        spark.readStream.schema(MOVES)
        .option("maxFilesPerTrigger", 1)  # one file per micro-batch
        .parquet(str(inbox))
        .writeStream.foreachBatch(fn)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=180)
    return query


ONCE = {1: 17, 2: 22, 3: 30, 4: 40, 10: 100, 11: 110}  # every batch applied once


def test_foreach_batch_replays_are_no_ops(
    spark: SparkSession, wh: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _stock(wh)
    inbox = _inbox(tmp_path)
    fn = Batches(wh, t.name, keyed=True)
    query = _run(spark, inbox, tmp_path / "checkpoint", fn)
    assert query.exception() is None
    assert [b for _, b, _, _ in fn.seen] == [0, 1, 2]
    assert {q for q, _, _, _ in fn.seen} == {query.id}  # the id kept in the checkpoint, not the run id
    assert [k for _, _, k, _ in fn.seen] == [f"spark-batch:{query.id}:{b}:stock" for b in range(3)]
    assert _content(t) == ONCE and t.version == 4  # one commit per micro-batch
    before = (t.version, _content(t), sorted(p for p, _, _ in t.storage.list_files(t.location)))

    # Spark runs a batch again with the same ids after a failure: the function again, on the same ids.
    jobs = _counting_stage(monkeypatch)
    first = fn.seen[0][3]
    spark.sparkContext.setLocalProperty(STREAM_QUERY_ID_PROPERTY, query.id)
    try:
        fn(spark.read.schema(MOVES).parquet(str(inbox / "0.parquet")), 0)
    finally:
        spark.sparkContext.setLocalProperty(STREAM_QUERY_ID_PROPERTY, None)  # type: ignore[arg-type]
    replay = fn.seen[-1][3]
    assert replay.already_committed and replay.version == first.version == 2 and not jobs
    assert (replay.inserted, replay.updated, replay.files) == (first.inserted, first.updated, first.files)
    assert (t.version, _content(t), sorted(p for p, _, _ in t.storage.list_files(t.location))) == before


def test_a_batch_killed_after_its_commit_is_applied_once_after_a_restart(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    keyed, plain = _stock(wh, "shop.keyed"), _stock(wh, "shop.plain")
    inbox = _inbox(tmp_path)
    outcomes = {}
    for t, use_key in ((keyed, True), (plain, False)):
        fn = Batches(wh, t.name, keyed=use_key, crash_after_commit=1)
        checkpoint = tmp_path / f"checkpoint-{use_key}"
        with pytest.raises(StreamingQueryException, match="killed after committing batch 1"):
            _run(spark, inbox, checkpoint, fn)
        assert not (checkpoint / "commits" / "1").exists()  # Spark has no record of batch 1
        restarted = _run(spark, inbox, checkpoint, fn)  # from the checkpoint: the same query id
        assert restarted.exception() is None
        assert [b for _, b, _, _ in fn.seen] == [0, 1, 1, 2]  # batch 1 ran twice
        assert len({q for q, _, _, _ in fn.seen}) == 1 == len({(q, b) for q, b, _, _ in fn.seen[1:3]})
        outcomes[use_key] = fn.seen
    keyed_runs = [m for _, b, _, m in outcomes[True] if b == 1]
    assert not keyed_runs[0].already_committed and keyed_runs[1].already_committed
    assert keyed_runs[1].version == keyed_runs[0].version
    assert _content(keyed) == ONCE and keyed.version == 4 and not _orphans(keyed)
    # The control: without the key Spark's replay applies batch 1 twice (id 1 gets +2 twice, id 2 +2 twice).
    assert _content(plain) == {**ONCE, 1: 19, 2: 24} and plain.version == 5


def test_readme_foreach_batch_example_runs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Exactly once from foreachBatch", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md[Exactly once from foreachBatch]", "exec"), namespace)
    stock = namespace["stock"]
    assert isinstance(stock, mere.Table)
    assert sorted(stock.to_arrow().to_pylist(), key=lambda r: r["sku"]) == [
        {"sku": 1, "qty": 3},
        {"sku": 2, "qty": 3},
    ]
    assert stock.version == 2  # one commit per micro-batch
