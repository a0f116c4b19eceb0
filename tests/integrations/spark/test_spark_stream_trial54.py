"""Trial 54 (streaming): CDC events landed as JSON files, one file per micro-batch, stream through mere's
sink into a partitioned, ``sequence_by``, table-wide-key table. The files arrive shuffled, with replays and
late events; the query is stopped mid-way and restarted, a lost checkpoint commit replays a batch, and a
separate handle compacts between runs. Oracle: a dict, "the highest sequence wins; a delete at a higher
sequence removes the key wherever it lives"."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from sparkutil import read

import mere
from mere import errors

NAME = "trial.orders"
EVENTS = "id long, region string, qty long, note string, lsn long, op string"
COLUMNS = ["id", "region", "qty", "note", "lsn"]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("qty", pa.int64()),
        ("note", pa.string()),
        ("lsn", pa.int64()),
    ]
)
REGIONS = ["east", "west", "north"]
Event = dict[str, Any]


def _history(rng: random.Random, keys: int = 16, n: int = 120) -> list[Event]:
    """A change history: inserts, updates (a third of them move the key to another region), deletes
    (carrying any region: a CDC delete removes its key wherever it lives) and re-inserts."""
    live: dict[int, str] = {}
    out: list[Event] = []
    lsn = 0
    for _ in range(n):
        lsn += rng.randint(1, 3)
        k = rng.randrange(keys)
        if k in live:
            op = rng.choices(["u", "d"], weights=(3, 1))[0]
        else:
            op = rng.choices(["c", "d"], weights=(6, 1))[0]  # a delete of a key that lives nowhere
        region = live.get(k, rng.choice(REGIONS))
        if op == "d" or rng.random() < 0.35:
            region = rng.choice(REGIONS)
        if op == "d" and rng.random() < 0.3:
            region = None  # a delete without its before-image's partition value
        e = {
            "id": k,
            "region": region,
            "qty": rng.randint(-50, 50),
            "note": f"{op}{lsn}",
            "lsn": lsn,
            "op": op,
        }
        out.append(e)
        if op == "d":
            live.pop(k, None)
        else:
            live[k] = region
    return out


def _model(events: list[Event]) -> dict[int, dict[str, Any]]:
    """Per key the event with the highest lsn (lsns are unique in the history); a delete removes it."""
    best: dict[int, Event] = {}
    for e in events:
        if e["id"] not in best or e["lsn"] > best[e["id"]]["lsn"]:
            best[e["id"]] = e
    return {k: {c: e[c] for c in COLUMNS} for k, e in best.items() if e["op"] != "d"}


def _files(rng: random.Random, history: list[Event], count: int) -> list[list[Event]]:
    """Shuffle the history into ``count`` files, then replay ~20% of the events in a later file (some of
    them replayed twice), so events come late (an older lsn after a newer one) and more than once."""
    shuffled = history[:]
    rng.shuffle(shuffled)
    files: list[list[Event]] = [shuffled[i::count] for i in range(count)]
    for i in range(count - 1):
        for e in rng.sample(files[i], k=max(1, len(files[i]) // 5)):
            files[rng.randrange(i + 1, count)].append(dict(e))
    for f in files:
        rng.shuffle(f)
    return files


class Landing:
    """A folder Spark reads JSON lines from; each file lands atomically, with an increasing mtime."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "landing"
        self.tmp = root / "landing-tmp"
        self.dir.mkdir()
        self.tmp.mkdir()
        self.n = 0
        self.delivered: list[Event] = []

    def land(self, events: list[Event]) -> None:
        name = f"part-{self.n:04d}.json"
        staged = self.tmp / name
        staged.write_text("".join(json.dumps(e) + "\n" for e in events))
        stamp = 1_800_000_000 + self.n * 10
        os.utime(staged, (stamp, stamp))
        staged.rename(self.dir / name)
        self.n += 1
        self.delivered.extend(events)


def _start(spark: SparkSession, landing: Path, checkpoint: Path, wh: str, **trigger: Any) -> StreamingQuery:
    return (
        spark.readStream.schema(EVENTS)
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .repartition(3)  # a micro-batch's rows, one key's versions among them, over several tasks
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start(NAME)
    )


def _drain(spark: SparkSession, landing: Path, checkpoint: Path, wh: str) -> None:
    q = _start(spark, landing, checkpoint, wh)
    if not q.awaitTermination(timeout=300):
        q.stop()
        pytest.fail("the streaming query did not drain within 300 s")
    assert q.exception() is None


def _last_commit(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def _mere_rows(t: mere.Table, **kw: Any) -> list[dict[str, Any]]:
    return sorted(
        ({c: r[c] for c in COLUMNS} for r in t.refresh().to_arrow(**kw).to_pylist()), key=lambda r: r["id"]
    )


def _check_mere(t: mere.Table, delivered: list[Event]) -> list[dict[str, Any]]:
    model = _model(delivered)
    want = [model[k] for k in sorted(model)]
    got = _mere_rows(t)
    assert [r["id"] for r in got] == sorted({r["id"] for r in got})  # no key twice
    assert got == want
    for region in REGIONS:  # a key that moved away never shows in its old partition
        assert _mere_rows(t, filter=f"region = '{region}'") == [r for r in want if r["region"] == region]
    return want


def _check(spark: SparkSession, wh: str, t: mere.Table, delivered: list[Event]) -> None:
    want = _check_mere(t, delivered)
    df = read(spark, wh, NAME)
    assert df.count() == len(want)
    spark_rows = sorted(({c: r[c] for c in COLUMNS} for r in df.toArrow().to_pylist()), key=lambda r: r["id"])
    assert spark_rows == want
    # Filters on a non-key column and on the partition column never show an older version of a key.
    assert _mere_rows(t, filter="qty > 0") == [r for r in want if r["qty"] > 0]
    region = REGIONS[0]
    via_option = read(spark, wh, NAME, filter=f"region = '{region}' AND qty <= 10")
    assert sorted((r.id, r.lsn) for r in via_option.collect()) == [
        (r["id"], r["lsn"]) for r in want if r["region"] == region and r["qty"] <= 10
    ]
    spark_where = df.where("qty < 0 AND note IS NOT NULL").select("id", "lsn", "qty")
    assert sorted((r.id, r.lsn) for r in spark_where.collect()) == [
        (r["id"], r["lsn"]) for r in want if r["qty"] < 0
    ]


def test_a_shuffled_replayed_cdc_landing_streams_into_table_wide_keys_by_sequence(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    rng = random.Random(54)
    history = _history(rng)
    files = _files(rng, history, 8)
    # Every move, delete, re-insert, replay and late event the story needs is in what lands.
    assert any(e["op"] == "d" for e in history)
    region_of: dict[int, str] = {}
    moves = 0
    for e in history:
        if e["op"] != "d":
            moves += e["id"] in region_of and region_of[e["id"]] != e["region"]
            region_of[e["id"]] = e["region"]
        else:
            region_of.pop(e["id"], None)
    assert moves >= 5
    flat = [e for f in files for e in f]
    assert len(flat) > len(history)  # replays
    assert any(b["id"] == a["id"] and b["lsn"] < a["lsn"] for i, a in enumerate(flat) for b in flat[i + 1 :])
    cat = mere.connect(wh)
    t = cat.create_table(
        NAME,
        SCHEMA,
        primary_key="id",
        partition_by="region",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        key_scope="table",
    )
    landing = Landing(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    base = len(t.history())

    # Run 1: a continuous query, stopped mid-way after at least one of three micro-batches committed.
    for f in files[:3]:
        landing.land(f)
    q = _start(spark, landing.dir, checkpoint, wh, processingTime="0 seconds")
    deadline = time.monotonic() + 120
    while not (checkpoint / "commits" / "0").exists() and time.monotonic() < deadline:
        assert q.exception() is None
        time.sleep(0.1)
    q.stop()
    assert q.exception() is None
    # Restart from the checkpoint: the rest of what landed is applied, once.
    _drain(spark, landing.dir, checkpoint, wh)
    assert _last_commit(checkpoint) == 2
    _check_mere(t, landing.delivered)

    # A separate handle compacts between micro-batches (tombstones must hold off the late events).
    other = mere.connect(wh).table(NAME)
    other.compact()
    for f in files[3:6]:
        landing.land(f)
    _drain(spark, landing.dir, checkpoint, wh)
    assert _last_commit(checkpoint) == 5
    _check_mere(t, landing.delivered)

    # A crash before Spark wrote the checkpoint's commit of the last batch: it is replayed, not re-applied.
    last = _last_commit(checkpoint)
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    other.refresh().compact()  # and the batch's commit is no longer the newest version when it replays
    versions = len(t.refresh().history())
    _drain(spark, landing.dir, checkpoint, wh)
    assert (checkpoint / "commits" / str(last)).exists()
    assert len(t.refresh().history()) == versions  # the replayed micro-batch committed nothing new
    _check(spark, wh, t, landing.delivered)

    mere.connect(wh).table(NAME).compact()
    for f in files[6:]:
        landing.land(f)
    # and one more file replaying the whole first file, very late
    landing.land(files[0])
    # This time a separate handle compacts while the micro-batches commit (a conflict retries, loses nothing).
    done = threading.Event()
    failures: list[BaseException] = []

    def compact_loop() -> None:
        handle = mere.connect(wh).table(NAME)
        for _ in range(4):
            if done.wait(0.5):
                return
            try:
                handle.refresh().compact()
            except errors.MereError as e:  # a lost race is refused in mere's words, never half-applied
                failures.append(e)

    compactor = threading.Thread(target=compact_loop)
    compactor.start()
    try:
        _drain(spark, landing.dir, checkpoint, wh)
    finally:
        done.set()
        compactor.join()
    assert _last_commit(checkpoint) == len(files)
    _check(spark, wh, t, landing.delivered)
    mere.connect(wh).table(NAME).compact()
    _check_mere(t, landing.delivered)
    # Exactly one commit per micro-batch, keyed by the query id and the batch id (the replay added none);
    # every other commit is a compaction.
    snaps = t.refresh().history()[base:]
    keys = [sn.idempotency_key for sn in snaps if sn.idempotency_key is not None]
    assert sorted(int(k.rsplit(":", 1)[1]) for k in keys) == list(range(len(files) + 1)), keys
    assert len({k.rsplit(":", 1)[0] for k in keys}) == 1  # one query id, kept in the checkpoint
    assert {sn.operation for sn in snaps if sn.idempotency_key is None} <= {"compact"}, snaps
    assert not failures or all(isinstance(f, errors.CommitConflict) for f in failures), failures


def test_sink_refusals_happen_before_anything_is_written(
    spark: SparkSession, wh: str, tmp_path: Path
) -> None:
    landing = Landing(tmp_path)
    landing.land([{"id": 1, "region": "east", "qty": 1, "note": "c1", "lsn": 1, "op": "c"}])
    cat = mere.connect(wh)

    def start(checkpoint: str, mode: str = "append", **options: str) -> StreamingQuery:
        w = (
            spark.readStream.schema(EVENTS)
            .json(str(landing.dir))
            .writeStream.format("mere")
            .outputMode(mode)
            .option("warehouse", wh)
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(availableNow=True)
        )
        for k, v in options.items():
            w = w.option(k, v)
        return w.start(NAME)

    def run(q: StreamingQuery) -> None:
        q.awaitTermination(timeout=120)
        exc = q.exception()
        q.stop()
        if exc is not None:
            raise RuntimeError(str(exc))

    # A misspelled option with the options that would create the table: nothing is created.
    with pytest.raises(Exception, match="sequense_by"):
        run(start("c1", primary_key="id", cdc_column="op", sequense_by="lsn", partition_by="region"))
    assert not cat.exists(NAME)
    t = cat.create_table(
        NAME,
        SCHEMA,
        primary_key="id",
        partition_by="region",
        cdc_column="op",
        sequence_by="lsn",
        key_scope="table",
    )
    v0 = t.version
    # Layout options that do not describe the table: refused, the table unchanged.
    with pytest.raises(Exception, match=r"sequence_by|different spec"):
        run(start("c3", sequence_by="qty"))
    assert t.refresh().version == v0
    # Update mode into a key table is fine, but a delete operation in update mode is refused before start.
    with pytest.raises(errors.InvalidInput, match="operation 'delete'"):
        start("c4", mode="update", operation="delete")
    assert not (tmp_path / "c4").exists()
    assert t.refresh().version == v0
    # A NULL sequence in a micro-batch: the batch is refused whole (InvalidInput names lsn), nothing committed.
    landing.land([{"id": 2, "region": "west", "qty": 2, "note": "c2", "lsn": None, "op": "c"}])
    with pytest.raises(Exception, match="lsn"):
        run(start("c5"))
    assert t.refresh().version == v0
    assert t.to_arrow().num_rows == 0
