"""Table-wide keys (``key_scope="table"``) against partition-scoped keys at W1. One run, ratios.

W1 (bench_core's rows plus a partition column ``part`` of 8 values): a base of 1,000,000 rows, then 10
upserts of 100,000 rows (half update existing keys, half insert new ones), 8 buckets, automatic
compaction off. 1% of each upsert's rows move their key to another partition. Two tables get the same
batches: one with table-wide keys (each upsert looks up its keys' buckets in every partition and writes
delete markers where a key moved from), one partition-scoped (blind upserts: a moved key stays in its old
partition too).

Reported (medians, the two tables' runs interleaved so that machine noise hits both alike): upsert
(the 10 W1 upserts, and the same batches again after the reads) and full merged read (``to_arrow``),
table-wide vs partition-scoped, and the keys moved.

Usage: python bench/bench_key_scope.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import interleaved_medians, make_rows, timed

BASE, UPSERTS, UPSERT_ROWS, BUCKETS, PARTS, MOVE = 1_000_000, 10, 100_000, 8, 8, 0.01
OFF = {"compaction.auto": "off"}


def with_part(rows: pa.Table, part: np.ndarray) -> pa.Table:
    return rows.append_column("part", pa.array([f"p{i}" for i in range(PARTS)]).take(pa.array(part)))


def w1_batches(rng: np.random.Generator) -> list[pa.Table]:
    """The base (key k in partition k % 8) and upserts where 1% of the rows move their key."""
    ids = rng.permutation(BASE).astype(np.int64)
    where = np.zeros(BASE + UPSERTS * UPSERT_ROWS, dtype=np.int64)
    where[:BASE] = np.arange(BASE) % PARTS
    out = [with_part(make_rows(rng, ids), where[ids])]
    next_id = BASE
    for _ in range(UPSERTS):
        old = rng.choice(next_id, size=UPSERT_ROWS // 2, replace=False)
        new = np.arange(next_id, next_id + UPSERT_ROWS - len(old))
        where[new] = new % PARTS
        next_id += len(new)
        ids = rng.permutation(np.concatenate([old, new])).astype(np.int64)
        moving = rng.random(len(ids)) < MOVE
        where[ids[moving]] = (where[ids[moving]] + rng.integers(1, PARTS, int(moving.sum()))) % PARTS
        out.append(with_part(make_rows(rng, ids), where[ids]))
    return out


def w1(tmp: str, repeat: int) -> dict[str, Any]:
    cat = mere.connect(os.path.join(tmp, "w1"))
    batches = w1_batches(np.random.default_rng(42))
    schema = batches[0].schema
    tables = {
        scope: cat.create_table(
            f"b.{scope}",
            schema,
            primary_key="id",
            partition_by="part",
            buckets=BUCKETS,
            properties=OFF,
            key_scope=scope,
        )
        for scope in ("table", "partition")
    }
    for t in tables.values():
        t.upsert(batches[0])
    times: dict[str, list[float]] = {scope: [] for scope in tables}
    moved = 0
    for i, batch in enumerate(batches[1:]):
        for scope in list(tables)[:: 1 if i % 2 else -1]:
            times[scope].append(timed(lambda t=tables[scope], b=batch: t.upsert(b)))
        moved += tables["table"].history()[-1].summary.get("moved_keys", 0)
    scans = {scope: t.scan() for scope, t in tables.items()}
    reads = dict(zip(scans, interleaved_medians([s.to_arrow for s in scans.values()], repeat)))
    counts = {scope: s.count() for scope, s in scans.items()}
    files = {scope: t.files().num_rows for scope, t in tables.items()}
    for i, batch in enumerate(batches[1:] * max(0, repeat // 2)):
        for scope in list(tables)[:: 1 if i % 2 else -1]:
            times[scope].append(timed(lambda t=tables[scope], b=batch: t.upsert(b)))
    up = {scope: statistics.median(acc) for scope, acc in times.items()}
    return {
        "moved_share": MOVE,
        "keys_moved_by_table_wide_upserts": moved,
        "rows_table_wide": counts["table"],
        "rows_partition_scoped": counts["partition"],  # moved keys stay in their old partitions too
        "files_table_wide": files["table"],
        "files_partition_scoped": files["partition"],
        "upsert_median_s_table_wide": up["table"],
        "upsert_median_s_partition_scoped": up["partition"],
        "ratio_upsert_table_vs_partition": up["table"] / up["partition"],
        "merged_read_median_s_table_wide": reads["table"],
        "merged_read_median_s_partition_scoped": reads["partition"],
        "ratio_read_table_vs_partition": reads["table"] / reads["partition"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-bench-keyscope-")
    try:
        results = {"W1": w1(tmp, args.repeat)}
        print("W1", json.dumps(results["W1"], indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/bench_key_scope.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
