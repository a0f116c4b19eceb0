"""Whole-database CDC through Spark: ``--events`` wal2json change events (default 1,000,000) for
``--tables`` tables (default 10) synced by ``sync_database``'s machinery on local[2]. One run.

The stream: per table, keys are created, updated and deleted (5% of the versions) in log order; every
event is a wal2json ``format-version`` 2 record (5 columns: bigint key, bigint, double, text,
numeric(12,2)). The events, in log order, are cut into ``--files`` JSON-lines files (default 20), read by
``readStream.text`` with ``maxFilesPerTrigger=1`` (one file per micro-batch) and applied by the sync's
``foreachBatch`` function: the JVM parses the envelopes, Python plans each table's change and commits
every table in one catalog transaction. Reported: events/s from ``start()`` to the query's end (the
session warmed by a small run first), and per micro-batch the time Spark takes to parse the envelopes and
hand them over as Arrow (``toArrow``), to plan (routing, typing) and to commit (write files + the catalog
transaction): p50 and max.

Checked inside the run: every table's row count equals the model's (keys alive at the end).

Usage: python bench/bench_sync.py [--events 1000000] [--tables 10] [--files 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

import mere


def make_files(folder: str, events: int, tables: int, files: int, seed: int = 34) -> dict[str, int]:
    """The events as JSON-lines files; returns each table's live key count at the end."""
    rng = np.random.default_rng(seed)
    table_of = rng.integers(0, tables, events)
    keys_per_table = max(events // tables // 4, 1)
    key = rng.integers(0, keys_per_table, events)
    alive: list[set[int]] = [set() for _ in range(tables)]
    qty = rng.integers(-(10**9), 10**9, events)
    price = rng.random(events) * 1000
    delete = rng.random(events) < 0.05
    lines = []
    for i in range(events):
        t, k = int(table_of[i]), int(key[i])
        lsn = 1000 + i
        head = f'{{"schema":"public","table":"t{t}","lsn":"0/{lsn:X}","pk":[{{"name":"id","type":"bigint"}}],'
        if k in alive[t] and delete[i]:
            alive[t].discard(k)
            lines.append(head + f'"action":"D","identity":[{{"name":"id","type":"bigint","value":{k}}}]}}')
            continue
        action = "U" if k in alive[t] else "I"
        alive[t].add(k)
        cols = (
            f'[{{"name":"id","type":"bigint","value":{k}}},{{"name":"qty","type":"bigint","value":{qty[i]}}},'
            f'{{"name":"price","type":"double precision","value":{float(price[i])!r}}},'
            f'{{"name":"note","type":"text","value":"n-{i % 997}"}},'
            f'{{"name":"amount","type":"numeric(12,2)","value":{int(qty[i]) % 10**8}.{i % 100:02d}}}]'
        )
        identity = f',"identity":[{{"name":"id","type":"bigint","value":{k}}}]' if action == "U" else ""
        lines.append(head + f'"action":"{action}","columns":{cols}{identity}}}')
    per_file = -(-events // files)
    for f in range(files):
        path = os.path.join(folder, f"part-{f:04d}.json")
        with open(path, "w") as out:
            out.write("\n".join(lines[f * per_file : (f + 1) * per_file]) + "\n")
        os.utime(path, ns=(time.time_ns(), 1_700_000_000_000_000_000 + f * 1_000_000_000))
    return {f"t{t}": len(alive[t]) for t in range(tables)}


def run(spark: Any, events: int, tables: int, files: int, work: str) -> dict[str, Any]:
    from mere.integrations.cdc_sync import SyncOptions, apply_plan, plan_batch
    from mere.integrations.spark import parse_events

    landing, wh, chk = (os.path.join(work, p) for p in ("landing", "wh", "chk"))
    os.makedirs(landing)
    expected = make_files(landing, events, tables, files)
    cat = mere.connect(wh)
    options = SyncOptions("bench", buckets=2)
    parses: list[float] = []
    plans: list[float] = []
    commits: list[float] = []

    def batch(df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        events = df.toArrow()
        t1 = time.perf_counter()
        plan = plan_batch(cat, events, options)
        t2 = time.perf_counter()
        apply_plan(cat, plan, options, f"bench:{batch_id}")
        parses.append(t1 - t0)
        plans.append(t2 - t1)
        commits.append(time.perf_counter() - t2)

    stream = spark.readStream.option("maxFilesPerTrigger", 1).text(landing)
    start = time.perf_counter()
    query = (
        parse_events(stream, "wal2json")
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    for name, n in expected.items():
        got = cat.table(f"bench.{name}").to_arrow(columns=["id"]).num_rows
        assert got == n, (name, got, n)
    return {
        "events": events,
        "tables": tables,
        "micro_batches": len(commits),
        "seconds": round(elapsed, 2),
        "events_per_s": round(events / elapsed),
        "spark_parse_p50_s": round(float(np.median(parses)), 3),
        "plan_p50_s": round(float(np.median(plans)), 3),
        "plan_max_s": round(max(plans), 3),
        "commit_p50_s": round(float(np.median(commits)), 3),
        "commit_max_s": round(max(commits), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from mere.integrations.spark import local_session

    spark = local_session("bench-sync")
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="bench-sync-")
    try:
        run(spark, 2000, args.tables, 2, os.path.join(work, "warm"))
        print(run(spark, args.events, args.tables, args.files, os.path.join(work, "run")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
