"""Core benchmark: workloads W1 and W2 of the core issue, ratios measured in one run.

W1: base of 1,000,000 rows (id int64 key + 3 int64, 3 float64, 2 short strings), 4 buckets, then 10
upserts of 100,000 rows (half update existing keys, half insert new ones). Reported (medians):
  - base write, one upsert, and raw ``pyarrow.parquet.write_table`` of the same rows (zstd and default)
  - full merged read to Arrow vs raw ``pyarrow.parquet.read_table`` of exactly the same files (no merge)
  - key lookup (``id == k``): bytes fetched vs a full scan's bytes
  - iterating a 1-bucket 5,000,000-row table without collecting: peak RSS growth vs its Arrow size
W2 = W1 x 10 (10M base, 10 upserts of 1M): merged read vs raw scan.

Usage: python bench/bench_core.py [--scale 1] [--w2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import mere

STRINGS = pa.array([f"s{i:03d}" for i in range(500)])


def make_rows(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    n = len(ids)
    cols: dict[str, Any] = {"id": pa.array(ids, pa.int64())}
    for i in range(3):
        cols[f"i{i}"] = rng.integers(0, 1 << 40, n)
    for i in range(3):
        cols[f"f{i}"] = rng.random(n)
    for i in range(2):
        cols[f"s{i}"] = STRINGS.take(pa.array(rng.integers(0, len(STRINGS), n)))
    return pa.table(cols)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeat))


def interleaved_medians(fns: list[Callable[[], Any]], repeat: int) -> list[float]:
    """Medians of ``repeat`` runs of each function, run in turn (a, b, a, b, ...): a ratio of two of them
    is not skewed by the machine's load drifting between two blocks of runs."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, acc in zip(fns, times):
            acc.append(timed(fn))
    return [statistics.median(acc) for acc in times]


def build(
    cat: mere.Catalog,
    name: str,
    base: int,
    upserts: int,
    upsert_rows: int,
    buckets: int,
    rng: np.random.Generator,
) -> tuple[mere.Table, float, list[float], list[pa.Table]]:
    schema = make_rows(rng, np.arange(1)).schema
    t = cat.create_table(name, schema, primary_key=["id"], buckets=buckets)
    base_rows = make_rows(rng, rng.permutation(base).astype(np.int64))
    base_s = timed(lambda: t.upsert(base_rows))
    upsert_s = []
    batches = []
    next_id = base
    for _ in range(upserts):
        old = rng.choice(next_id, size=upsert_rows // 2, replace=False)
        new = np.arange(next_id, next_id + upsert_rows - len(old))
        next_id += len(new)
        batch = make_rows(rng, rng.permutation(np.concatenate([old, new])).astype(np.int64))
        batches.append(batch)
        upsert_s.append(timed(lambda b=batch: t.upsert(b)))
    return t, base_s, upsert_s, [base_rows, *batches]


def raw_write_times(tables: list[pa.Table], tmp: str, compression: str) -> list[float]:
    out = []
    for i, tbl in enumerate(tables):
        path = os.path.join(tmp, f"raw-{compression}-{i}.parquet")
        out.append(timed(lambda p=path, x=tbl: pq.write_table(x, p, compression=compression)))
    return out


def workload(label: str, scale: int, repeat: int, tmp: str) -> dict[str, Any]:
    rng = np.random.default_rng(42)
    cat = mere.connect(os.path.join(tmp, label))
    t, base_s, upsert_s, written = build(
        cat, f"bench.{label}", 1_000_000 * scale, 10, 100_000 * scale, 4, rng
    )
    paths = [t.storage.full_path(p) for p in t.files().column("path").to_pylist()]
    scan = t.scan()
    expected_rows = scan.count()

    # Interleaved, so that machine noise and allocator state hit both sides alike.
    merged_runs, raw_runs = [], []
    for _ in range(repeat):
        raw_runs.append(timed(lambda: pq.read_table(paths)))
        merged_runs.append(timed(lambda: scan.to_arrow()))
    merged_s = statistics.median(merged_runs)
    raw_read_s = statistics.median(raw_runs)
    raw_zstd = raw_write_times(written[1:], tmp, "zstd")
    raw_snappy = raw_write_times(written[1:], tmp, "snappy")
    raw_base = raw_write_times(written[:1], tmp, "zstd")[0]

    t.storage.stats.reset()
    t.storage._footers.clear()
    full = scan.to_arrow()
    full_bytes = t.storage.stats.bytes_read
    key = int(full.column("id")[len(full) // 3].as_py())
    t.storage.stats.reset()
    t.storage._footers.clear()
    hit = t.scan(filter=f"id = {key}").to_arrow()
    lookup_bytes = t.storage.stats.bytes_read
    lookup_s = median_time(lambda: t.scan(filter=f"id = {key}").to_arrow(), repeat)
    assert hit.num_rows == 1 and full.num_rows == expected_rows

    res = {
        "rows_after_merge": expected_rows,
        "files": len(paths),
        "base_write_s": base_s,
        "raw_base_write_zstd_s": raw_base,
        "upsert_median_s": statistics.median(upsert_s),
        "raw_write_zstd_median_s": statistics.median(raw_zstd),
        "raw_write_snappy_median_s": statistics.median(raw_snappy),
        "merged_read_median_s": merged_s,
        "raw_read_median_s": raw_read_s,
        "key_lookup_median_s": lookup_s,
        "key_lookup_bytes": lookup_bytes,
        "full_scan_bytes": full_bytes,
    }
    res["ratio_merged_vs_raw_read"] = merged_s / raw_read_s
    res["ratio_upsert_vs_raw_write_zstd"] = res["upsert_median_s"] / res["raw_write_zstd_median_s"]
    res["ratio_upsert_vs_raw_write_snappy"] = res["upsert_median_s"] / res["raw_write_snappy_median_s"]
    res["ratio_base_write_vs_raw_zstd"] = base_s / raw_base
    res["lookup_bytes_fraction"] = lookup_bytes / full_bytes
    return res


# A fresh process iterates the table; a thread samples RSS every 2 ms (ru_maxrss would be inherited
# from the parent across fork/exec on Linux, so it is not used).
RSS_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
from rss import PeakRss
import mere
t = mere.connect(sys.argv[1]).table("bench.one")
rows = 0
with PeakRss() as rss:
    for b in t.scan().to_batches():
        rows += b.num_rows
print(rows, rss.before, rss.peak)
"""


def rss_check(tmp: str) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    wh = os.path.join(tmp, "one")
    cat = mere.connect(wh)
    rows = make_rows(rng, rng.permutation(5_000_000).astype(np.int64))
    t = cat.create_table("bench.one", rows.schema, primary_key=["id"], buckets=1)
    t.upsert(rows)
    upd = make_rows(rng, rng.choice(5_000_000, 500_000, replace=False).astype(np.int64))
    t.upsert(upd)
    arrow_bytes = rows.nbytes
    del rows, upd
    out = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, wh, os.path.dirname(os.path.abspath(__file__))],
        capture_output=True,
        text=True,
        check=True,
    )
    n, before, peak = (int(x) for x in out.stdout.split())
    return {
        "rows": n,
        "arrow_bytes": arrow_bytes,
        "rss_before": before,
        "rss_peak": peak,
        "rss_growth": peak - before,
        "growth_fraction_of_arrow": (peak - before) / arrow_bytes,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--w2", action="store_true", help="also run W2 (10x)")
    ap.add_argument("--skip-rss", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-bench-")
    results: dict[str, Any] = {}
    try:
        results["W1"] = workload("w1", 1, args.repeat, tmp)
        print("W1", json.dumps(results["W1"], indent=1), flush=True)
        if not args.skip_rss:
            results["RSS"] = rss_check(tmp)
            print("RSS", json.dumps(results["RSS"], indent=1), flush=True)
        if args.w2:
            results["W2"] = workload("w2", 10, max(5, args.repeat // 2), tmp)
            print("W2", json.dumps(results["W2"], indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/bench_core.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
