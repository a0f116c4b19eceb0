"""A real PostgreSQL change stream through Spark Structured Streaming into ``sequence_by`` tables, with the
streaming process killed (SIGKILL) twice and restarted from its checkpoint.

PostgreSQL (``tests/cdc_source.py``, logical decoding) is the source and the oracle. Random transactions
run on two tables (inserts, multi-row statements, upserts, updates of values, of keys and of the
partition-like column, no-op updates, deletes, re-inserts of deleted keys, rolled-back work, interleaved
transactions); their decoded changes, each stamped with its LSN-derived sequence (``lsn``), are delivered at
least once (``deliver``: shuffled across batches, duplicated, whole batches replayed) and landed as Parquet
files, one folder per table. A separate Python process runs one Spark streaming query per table: it reads
its folder (``maxFilesPerTrigger``), shuffles every micro-batch across partitions (``repartition``) and
writes ``format("mere")`` with ``cdc_column`` into a table with ``sequence_by="lsn"`` (the mere catalog on
the same PostgreSQL server, automatic compaction on). The files land in two waves, and the whole process
tree (driver, JVM, Python workers) is SIGKILLed twice mid-stream (see ``KILLS``): the moment a micro-batch
has committed to mere (Spark may not have recorded it: the restart replays it, and for the orders table
the test makes sure it does by removing Spark's commit marker), and while a micro-batch's tasks run. Each
restart resumes from the same checkpoint; the last run drains the folders, reads the tables back through
``spark.read.format("mere")`` and exits.

At the end every mere table equals PostgreSQL's ``SELECT *`` (types and values, ``lsn`` aside) through the
Python read, the Spark read and the change feed (``Table.changes``) applied to the table as it was at the
first kill. Applying the landed events in arrival order instead (what a table without ``sequence_by``
keeps) gets them wrong: the stream really is scrambled.

Size (seed 11): 90 transactions, 577 change events, landed in 12 Parquet files per table (9 delivery
batches, 3 of them delivered twice more, 20% duplicated events), 2 kills, and the restarts replay the
micro-batches the kills interrupted.

Key changes land as a delete of the old key and an insert of the new one at the update's ``lsn``
(``to_arrow_events(split_key_changes=True)``). The mere tables are not partitioned: keys are unique per
partition, so a partition-column update would leave the row in its old partition too. With table-wide keys
``layout`` returns ``{"partition_by": [spec.partition], "key_scope": "table"}`` (one line).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere
from cdc_source import (
    DEFAULT_TABLES,
    LOGICAL_SETTINGS,
    ChangeSource,
    Event,
    Key,
    Row,
    TableSpec,
    apply_in_order,
    arrow_schema,
    deliver,
    diff_models,
    to_arrow_events,
)
from services import PostgresServer

pytestmark = pytest.mark.postgres

SEED = 11
TRANSACTIONS = 90
BATCHES = 9  # delivery batches (one Parquet file each) per table, plus the replayed ones
DUPLICATES = 0.2  # share of events delivered twice
REPLAY_BATCHES = 3  # whole batches delivered again
FIRST_WAVE = 9  # files landed before the first run; the rest land after the first kill
# Spark's file source logs (sources/0/N) at most this many new files per micro-batch. Its offsets are its own
# log's ids, not micro-batch ids: a kill after it logged a batch's files but before Spark wrote the offset
# log leaves a logged entry that no micro-batch planned, and the restart's next micro-batch reads that entry
# and the next one (6 files). So the number of micro-batches for the 12 files is not fixed (3 or more).
FILES_PER_TRIGGER = 3
PARTITIONS = 2  # each micro-batch is shuffled (round robin) across this many write tasks
# The kills, watching the orders query: the moment its micro-batch 1 has committed to mere (Spark may not
# have recorded it; if it has, its commit marker is removed, and so is the next batch's offset entry if
# Spark planned it, so the restart replays the batch either way), then as soon as Spark has planned the
# micro-batch that reads the last landed file (its tasks are running: the kill leaves their staged files
# behind and nothing committed). That micro-batch is number 3, or 2 when the file source's offsets ran
# ahead of Spark's batch ids (see FILES_PER_TRIGGER).
KILLS = ("committed", "mid-batch")
WATCHED = "orders"
RUN_TIMEOUT_S = 420  # per run of the stream: a stall detector (below pytest's 900 s, so its message shows)
TABLES = {s.name: s for s in DEFAULT_TABLES}


def layout(spec: TableSpec) -> dict[str, Any]:
    """The mere table's partitioning (none until table-wide keys let a key move between partitions)."""
    return {}


def table_name(spec: TableSpec) -> str:
    return f"cdc.{spec.name}"


# -- the streaming job (runs in its own process: `python this_file.py CONFIG_JSON`) -------------------


def stream_job(config: dict[str, Any]) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    from mere.integrations.spark import local_session

    spark = local_session("mere-cdc-stream")
    queries = []
    for name in config["tables"]:
        spec = TABLES[name]
        query = (
            spark.readStream.schema(from_arrow_schema(arrow_schema(spec)))
            .option("maxFilesPerTrigger", FILES_PER_TRIGGER)
            .parquet(str(Path(config["landing"]) / name))
            .repartition(PARTITIONS)
            .writeStream.format("mere")
            .option("warehouse", config["warehouse"])
            .option("catalog", config["catalog"])
            .option("cdc_column", "op")
            .option("checkpointLocation", str(Path(config["checkpoints"]) / name))
            .trigger(availableNow=True)
            .start(table_name(spec))
        )
        queries.append(query)
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    if config.get("read_into"):  # the tables read back through Spark, for the test to compare
        for name in config["tables"]:
            df = spark.read.format("mere").option("warehouse", config["warehouse"])
            df = df.option("catalog", config["catalog"]).load(table_name(TABLES[name]))
            pq.write_table(df.toArrow(), Path(config["read_into"]) / f"{name}.parquet")
    spark.stop()
    if config.get("linger"):
        # A run that the harness kills waits for its kill: under heavy load the harness may look only
        # after the stream has read every file, and an exit would then end the run before its kill point.
        time.sleep(RUN_TIMEOUT_S)


# -- the harness ----------------------------------------------------------------------------------


class StreamProcess:
    """The streaming job in a child process; ``kill`` SIGKILLs it and every process under it."""

    def __init__(self, config: dict[str, Any], log: Path) -> None:
        paths = [str(Path(mere.__file__).parents[1]), str(Path(__file__).parents[2])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, json.dumps(config)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def tree(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        return []

    def kill(self) -> None:
        victims = self.tree()
        for p in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=30)
        self.proc.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the stream did not finish in {timeout}s:\n{self.tail()}") from None

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def query_id(checkpoint: Path) -> str | None:
    """The streaming query's id, which Spark keeps in the checkpoint (mere's batch keys carry it)."""
    try:
        return str(json.loads((checkpoint / "metadata").read_text())["id"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


def mere_batches(t: mere.Table, checkpoint: Path) -> int:
    """How many micro-batches of the query have committed to mere (they commit in batch order)."""
    qid = query_id(checkpoint)
    n = 0
    while qid is not None and t.find_commit(f"spark-stream:{qid}:{n}") is not None:
        n += 1
    return n


def spark_batches(checkpoint: Path, log: str = "commits") -> int:
    """How many micro-batches Spark recorded as committed (``offsets``: as planned) in the checkpoint."""
    done = [int(p.name) for p in (checkpoint / log).glob("*") if p.name.isdigit()]
    return max(done) + 1 if done else 0


def planned_through(checkpoint: Path) -> list[str]:
    """The files of every micro-batch Spark has planned (the offset log's latest entry holds the file source's
    log offset; the micro-batches read the file source's log entries up to it)."""
    planned = spark_batches(checkpoint, "offsets")
    if not planned:
        return []
    try:
        last = json.loads((checkpoint / "offsets" / str(planned - 1)).read_text().splitlines()[-1])
    except (FileNotFoundError, json.JSONDecodeError, IndexError):
        return []  # being written
    logged = planned_files(checkpoint)
    return [f for n, files in logged.items() if n.isdigit() and int(n) <= last["logOffset"] for f in files]


def planned_files(checkpoint: Path) -> dict[str, list[str]]:
    """Each micro-batch's files as Spark's file source logged them (for a failure's message)."""
    out = {}
    for path in sorted((checkpoint / "sources" / "0").glob("[0-9]*")):
        lines = path.read_text(errors="replace").splitlines()[1:]
        out[path.name] = [json.loads(x).get("path", x).rsplit("/", 1)[-1] for x in lines if x.startswith("{")]
    return out


def land(batches: list[list[Event]], landing: Path, first: int) -> int:
    """Each delivery batch as one Parquet file per table (files named and timed in arrival order)."""
    rows = 0
    for i, batch in enumerate(batches, start=first):
        for spec in DEFAULT_TABLES:
            events = to_arrow_events(batch, spec, split_key_changes=True)
            folder = landing / spec.name
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"part-{i:04d}.parquet"
            pq.write_table(events, path)
            os.utime(path, ns=(time.time_ns(), 1_700_000_000_000_000_000 + i * 1_000_000_000))
            rows += events.num_rows
    return rows


def model_of(rows: list[Row], spec: TableSpec) -> dict[Key, Row]:
    model = {spec.key_of(r): {n: r[n] for n in spec.names} for r in rows}
    assert len(model) == len(rows), "a key appears twice"
    return model


def apply_feed(before: pa.Table, feed: pa.Table, spec: TableSpec) -> dict[Key, Row]:
    """``Table.changes`` applied to the rows of an earlier version (the feed holds each key's net change)."""
    model = model_of(before.to_pylist(), spec)
    rows = feed.to_pylist()
    for r in rows:
        if r["_change"] in ("delete", "update_before"):
            assert model.pop(spec.key_of(r), None) is not None, r
    for r in rows:
        if r["_change"] in ("insert", "update_after"):
            model[spec.key_of(r)] = {n: r[n] for n in spec.names}
    return model


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


def test_postgres_changes_through_a_killed_spark_stream_land_as_postgres_holds_them(
    server: PostgresServer, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    with ChangeSource(server=server) as src:
        log = src.run_workload(rng, transactions=TRANSACTIONS, toast=0.02)
        events = src.changes()
        oracle = {name: src.expected_model(name) for name in src.tables}
    for kind in ("reinsert", "update-key", "update-partition", "delete", "multi-row", "upsert"):
        assert log.statements[kind] > 0, (kind, log.statements)
    batches = deliver(events, rng, batches=BATCHES, duplicates=DUPLICATES, replay_batches=REPLAY_BATCHES)

    # Applied in arrival order (what a table without sequence_by keeps), the stream gets tables wrong.
    arrival = [e for batch in batches for e in batch]
    assert any(
        diff_models(apply_in_order([e for e in arrival if e.table == name]), oracle[name]) for name in TABLES
    )

    wh, landing, checkpoints = tmp_path / "wh", tmp_path / "landing", tmp_path / "checkpoints"
    catalog = server.create_database(f"mere_sparkcdc_{os.getpid()}")
    cat = mere.connect(str(wh), catalog=catalog)
    tables = {
        spec.name: cat.create_table(
            table_name(spec),
            arrow_schema(spec),
            primary_key=list(spec.key),
            cdc_column="op",
            sequence_by="lsn",
            buckets=3,
            properties={"compaction.min-files": "4"},  # automatic compactions run inside the stream
            **layout(spec),
        )
        for spec in DEFAULT_TABLES
    }
    config = {
        "tables": list(TABLES),
        "landing": str(landing),
        "checkpoints": str(checkpoints),
        "warehouse": str(wh),
        "catalog": catalog,
    }
    landed = land(batches[:FIRST_WAVE], landing, 0)
    feed_start: dict[str, int] = {}
    replayed = {name: 0 for name in TABLES}
    watched = checkpoints / WATCHED
    last_file = f"part-{len(batches) - 1:04d}.parquet"
    for run, kill in enumerate(KILLS):
        job = StreamProcess({**config, "linger": True}, tmp_path / "stream.log")
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not (
                mere_batches(tables[WATCHED], watched) >= 2
                if kill == "committed"
                else last_file in planned_through(watched)
            ):
                assert job.proc.poll() is None, f"the stream failed before the kill:\n{job.tail()}"
                assert time.monotonic() < deadline, (
                    f"no progress in {RUN_TIMEOUT_S}s: {planned_files(watched)}\n{job.tail()}"
                )
                time.sleep(0.02)
        finally:
            job.kill()
        for name, t in tables.items():
            checkpoint = checkpoints / name
            in_mere, in_spark = mere_batches(t.refresh(), checkpoint), spark_batches(checkpoint)
            assert in_spark <= in_mere  # Spark records a batch only once its commit returned
            if name == WATCHED and kill == "committed" and in_mere and in_spark == in_mere:
                # As if the kill had come between mere's commit and Spark's: the restart replays the batch.
                # If Spark planned the next batch, its offset entry goes too (the file source's log keeps
                # that batch's files: as after a kill between the two logs' writes), else Spark would
                # resume at that batch and skip the replay.
                for spark_log, n in (("commits", in_mere - 1), ("offsets", in_mere)):
                    for marker in (str(n), f".{n}.crc"):
                        (checkpoint / spark_log / marker).unlink(missing_ok=True)
                in_spark -= 1
            if name == WATCHED and kill == "mid-batch":
                # Spark plans micro-batch N once N - 1 has committed
                assert in_mere >= spark_batches(checkpoint, "offsets") - 1
            replayed[name] += in_mere - in_spark
            feed_start.setdefault(name, t.version)
        if run == 0:
            landed += land(batches[FIRST_WAVE:], landing, FIRST_WAVE)
    read_into = tmp_path / "read"
    read_into.mkdir()
    job = StreamProcess({**config, "read_into": str(read_into)}, tmp_path / "stream.log")
    assert job.wait(RUN_TIMEOUT_S) == 0, job.tail()

    files = len(batches)
    for spec in DEFAULT_TABLES:
        t = tables[spec.name].refresh()
        checkpoint = checkpoints / spec.name
        expected = oracle[spec.name]
        assert diff_models(model_of(t.to_arrow().to_pylist(), spec), expected) == [], spec.name
        # every file was read: micro-batches cover them all, each committed once to mere and to Spark
        landed_files = [f"part-{i:04d}.parquet" for i in range(files)]
        assert sorted(planned_through(checkpoint)) == landed_files, (spec.name, planned_files(checkpoint))
        committed = spark_batches(checkpoint)
        assert mere_batches(t, checkpoint) == committed == spark_batches(checkpoint, "offsets") > 1, (
            spec.name,
            planned_files(checkpoint),
            job.tail(),
        )
        through_spark = pq.read_table(read_into / f"{spec.name}.parquet")
        assert diff_models(model_of(through_spark.to_pylist(), spec), expected) == [], spec.name
        start = feed_start[spec.name]
        feed = t.changes(start_version=start).read_all()
        assert feed.num_rows > 0
        replayed_feed = apply_feed(t.to_arrow(version=start), feed, spec)
        assert diff_models(replayed_feed, expected) == [], spec.name
    assert replayed[WATCHED] >= 1
    print(
        f"\nsize: {TRANSACTIONS} transactions ({len(log.committed)} committed), {len(events)} events, "
        f"{landed} landed rows in {files} files per table ({REPLAY_BATCHES} replayed files, "
        f"{DUPLICATES:.0%} duplicates), {len(KILLS)} kills, micro-batches replayed on restart: {replayed}"
    )


if __name__ == "__main__":
    stream_job(json.loads(sys.argv[1]))
