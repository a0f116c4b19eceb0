"""A scrambled CDC stream through Spark Structured Streaming into mere: events/s, with ``sequence_by`` and
without it (commit order, for reference). One run.

The stream: ``--events`` CDC events (default 1,000,000) over ``--keys`` keys (default 200,000): each key is
created, updated a few times, and deleted (5% of the versions; some keys come back after a delete); every
version carries ``lsn``, its position in the source's order. ``--duplicates`` of the events (default 10%) are
delivered twice, the whole list is shuffled and cut into ``--files`` Parquet files (default 20), and the
last ``--replays`` files (default 2) are copies of earlier ones (whole batches replayed). A streaming query
(``readStream.parquet`` with ``maxFilesPerTrigger``, ``trigger(availableNow=True)``) writes them with
``writeStream.format("mere").option("cdc_column", "op")`` into a fresh table, once with ``sequence_by="lsn"``
and once without; the time from ``start()`` to the query's end is the end-to-end time (the session is
already running and warmed by a small stream first).

Checked inside the run: the ``sequence_by`` table equals the events applied in ``lsn`` order to a plain model
(per key the highest ``lsn`` wins, and a winning delete leaves no row); for the table without it, the keys
it gets wrong are counted (the stream is scrambled, so commit order loses).

Usage: python bench/bench_spark_stream.py [--events 1000000] [--keys 200000] [--files 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import mere

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("qty", pa.int64()),
        ("price", pa.float64()),
        ("note", pa.string()),
        ("op", pa.string()),
        ("lsn", pa.int64()),
    ]
)
SPARK_SCHEMA = "id long, qty long, price double, note string, op string, lsn long"
NOTES = pa.array([f"note-{i:03d}" for i in range(256)])


def make_events(
    rng: np.random.Generator, events: int, keys: int, duplicates: float, deletes: float
) -> pa.Table:
    """The source's history: ``events / (1 + duplicates)`` distinct versions in ``lsn`` order, plus the
    duplicates, shuffled. A key's first version is a create, a share ``deletes`` of later ones deletes
    (a version after a delete re-creates the key)."""
    distinct = round(events / (1 + duplicates))
    ids = rng.integers(0, keys, distinct)
    ids[:keys] = rng.permutation(keys)  # every key has a version
    lsn = np.arange(distinct, dtype=np.int64) * 7 + 1_000_000
    # The first version of each key (in lsn order) is a create; the others are updates or deletes.
    order = np.argsort(ids, kind="stable")
    first = np.ones(distinct, dtype=bool)
    first[order[1:]] = ids[order[1:]] != ids[order[:-1]]
    is_delete = (~first) & (rng.random(distinct) < deletes)
    # After a delete the key's next version is a create again (a re-insert).
    prev_delete = np.zeros(distinct, dtype=bool)
    prev_delete[order[1:]] = is_delete[order[:-1]] & ~first[order[1:]]
    op = np.where(first | prev_delete, "c", np.where(is_delete, "d", "u"))
    table = pa.table(
        {
            "id": ids,
            "qty": rng.integers(0, 1 << 40, distinct),
            "price": rng.random(distinct),
            "note": NOTES.take(pa.array(rng.integers(0, len(NOTES), distinct))),
            "op": pa.array(op, pa.string()),
            "lsn": lsn,
        },
        schema=SCHEMA,
    )
    extra = rng.integers(0, distinct, events - distinct)
    delivered = np.concatenate([np.arange(distinct), extra])
    return table.take(pa.array(rng.permutation(delivered)))


def expected(events: pa.Table) -> pa.Table:
    """The events applied in ``lsn`` order: per key the version with the highest lsn, deleted keys dropped."""
    lsn = events.column("lsn").to_numpy()
    ids = events.column("id").to_numpy()
    order = np.lexsort((lsn, ids))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = ids[order][1:] != ids[order][:-1]
    winners = events.take(pa.array(order[last]))
    live = winners.filter(pc.not_equal(winners.column("op"), "d"))
    return live.drop_columns(["op"]).sort_by("id")


def land(events: pa.Table, folder: str, files: int, replays: int, rng: np.random.Generator) -> list[int]:
    """The shuffled events cut into files, the last ``replays`` of them copies of earlier ones."""
    os.makedirs(folder)
    fresh = files - replays
    bounds = np.linspace(0, events.num_rows, fresh + 1).astype(int)
    parts = [events.slice(bounds[i], bounds[i + 1] - bounds[i]) for i in range(fresh)]
    parts += [parts[int(i)] for i in rng.choice(fresh, replays, replace=False)]
    for i, part in enumerate(parts):
        path = os.path.join(folder, f"part-{i:04d}.parquet")
        pq.write_table(part, path)
        os.utime(path, ns=(time.time_ns(), 1_700_000_000_000_000_000 + i * 1_000_000_000))
    return [p.num_rows for p in parts]


def stream(spark: Any, folder: str, wh: str, name: str, checkpoint: str, per_trigger: int) -> float:
    """Run the stream to the end (availableNow); seconds from start() to the query's end."""
    t0 = time.perf_counter()
    query = (
        spark.readStream.schema(SPARK_SCHEMA)
        .option("maxFilesPerTrigger", per_trigger)
        .parquet(folder)
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("cdc_column", "op")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(name)
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return time.perf_counter() - t0


def create(cat: mere.Catalog, name: str, sequenced: bool, buckets: int) -> mere.Table:
    return cat.create_table(
        name,
        SCHEMA.remove(SCHEMA.get_field_index("op")),
        primary_key=["id"],
        buckets=buckets,
        cdc_column="op",
        sequence_by="lsn" if sequenced else None,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--duplicates", type=float, default=0.1)
    ap.add_argument("--deletes", type=float, default=0.05)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--replays", type=int, default=2)
    ap.add_argument("--per-trigger", type=int, default=4, help="maxFilesPerTrigger")
    ap.add_argument("--buckets", type=int, default=4)
    args = ap.parse_args()
    from mere.integrations.spark import local_session

    tmp = tempfile.mkdtemp(prefix="mere-bench-stream-")
    rng = np.random.default_rng(7)
    res: dict[str, Any] = {"args": vars(args)}
    try:
        events = make_events(rng, args.events, args.keys, args.duplicates, args.deletes)
        folder = os.path.join(tmp, "landing")
        sizes = land(events, folder, args.files, args.replays, rng)
        delivered = pa.concat_tables(
            [pq.read_table(os.path.join(folder, f)) for f in sorted(os.listdir(folder))]
        )
        assert delivered.num_rows == sum(sizes)
        want = expected(delivered)
        res["events_delivered"] = delivered.num_rows
        res["deletes"] = pc.sum(pc.equal(delivered.column("op"), "d")).as_py()
        res["live_keys"] = want.num_rows
        theirs = {r["id"]: r for r in want.to_pylist()}

        spark = local_session("mere-bench-stream", driver_memory="2g")
        wh = os.path.join(tmp, "wh")
        cat = mere.connect(wh)
        # Warm-up: the first Python data source query of a session pays for starting its workers.
        warm = os.path.join(tmp, "warm")
        land(events.slice(0, 1000), warm, 2, 0, rng)
        create(cat, "bench.warm", True, args.buckets)
        stream(spark, warm, wh, "bench.warm", os.path.join(tmp, "ck-warm"), 1)

        for label, sequenced in (("sequence_by", True), ("commit_order", False)):
            name = f"bench.{label}"
            t = create(cat, name, sequenced, args.buckets)
            seconds = stream(spark, folder, wh, name, os.path.join(tmp, f"ck-{label}"), args.per_trigger)
            got = t.refresh().to_arrow().select(want.column_names).sort_by("id")
            res[label] = {
                "seconds": round(seconds, 2),
                "events_per_s": round(delivered.num_rows / seconds),
                "commits": len([s for s in t.history() if s.operation != "create"]),
                "rows": got.num_rows,
            }
            mine = {r["id"]: r for r in got.to_pylist()}
            bad = [k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)]
            res[label]["keys_wrong"] = len(bad)
            if sequenced and bad:
                history = delivered.filter(pc.is_in(delivered.column("id"), pa.array(bad[:3])))
                raise AssertionError(
                    f"the sequence_by table differs from the events applied in lsn order: {len(bad)} keys, "
                    f"e.g. {[(k, mine.get(k), theirs.get(k)) for k in bad[:3]]}\n"
                    f"{history.sort_by([('id', 'ascending'), ('lsn', 'ascending')]).to_pylist()}"
                )
        res["ratio_sequence_by_vs_commit_order"] = round(
            res["sequence_by"]["seconds"] / res["commit_order"]["seconds"], 2
        )
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    sys.exit(main())
