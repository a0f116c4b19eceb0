"""Surface benchmark: costs users meet through the public API, on W1-shaped data.

- projection: ``scan(columns=["id"])`` on a key table and on a table without key: bytes fetched and time,
  against the full scan of the same table;
- key ``IN`` lists of 1k, 10k and 100k ids on W1 (1M base rows + 10 upserts of 100k, 4 buckets): time of
  ``scan(filter=...)`` (parse, bind, key points), of reading it, and of ``explain()``, against a full scan;
- streamed write: a 5M-row ``RecordBatchReader`` (100k-row batches, never materialised as one table) upserted
  into a fresh table, in a fresh process: peak RSS growth against the stream's Arrow size.

Usage: python bench/bench_surface.py [--repeat 3] [--skip-rss] [--in-sizes 1000,10000,100000]
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

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import build, make_rows


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median(fn: Callable[[], Any], repeat: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeat))


def fetched(t: mere.Table, fn: Callable[[], Any]) -> int:
    t.storage.stats.reset()
    t.storage.clear_cache()
    fn()
    return t.storage.stats.bytes_read


def projection(cat: mere.Catalog, t: mere.Table, repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    rows = make_rows(rng, np.arange(1_000_000, dtype=np.int64))
    keyless = cat.create_table("bench.events", rows.schema)
    keyless.append(rows)
    out: dict[str, Any] = {}
    for label, table in (("key_table", t), ("keyless_table", keyless)):
        full = table.scan()
        proj = table.scan(columns=["id"])
        out[label] = {
            "full_bytes": fetched(table, full.to_arrow),
            "projected_bytes": fetched(table, proj.to_arrow),
            "full_s": median(full.to_arrow, repeat),
            "projected_s": median(proj.to_arrow, repeat),
        }
        out[label]["bytes_fraction"] = out[label]["projected_bytes"] / out[label]["full_bytes"]
    return out


def in_lists(t: mere.Table, sizes: list[int], repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    ids = t.scan(columns=["id"]).to_arrow().column("id").to_numpy()
    full_s = median(lambda: t.scan().to_arrow(), repeat)
    out: dict[str, Any] = {"full_scan_s": full_s}
    for n in sizes:
        chosen = rng.choice(ids, size=n, replace=False)
        text = f"id IN ({', '.join(str(int(i)) for i in chosen)})"
        t0 = time.perf_counter()
        scan = t.scan(filter=text)  # parse, bind, key points: the filter is checked here
        plan_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = scan.to_arrow()  # splits and buckets pruned, files read and merged
        read_s = time.perf_counter() - t0
        explain_s = timed(lambda q=text: t.scan(filter=q).explain())
        assert got.num_rows == n, (got.num_rows, n)
        out[f"in_{n}"] = {
            "plan_s": plan_s,
            "read_s": read_s,
            "explain_s": explain_s,
            "read_vs_full_scan": read_s / full_s,
            "total_vs_full_scan": (plan_s + read_s) / full_s,
        }
        print(
            f"  IN of {n}: scan() {plan_s:.3f} s, read {read_s:.3f} s, explain {explain_s:.3f} s", flush=True
        )
    return out


STREAM_CHILD = r"""
import sys, time
import numpy as np, pyarrow as pa
sys.path.insert(0, sys.argv[2])
from bench_core import make_rows
from rss import PeakRss
import mere
rows, batch = 5_000_000, 100_000
cat = mere.connect(sys.argv[1])
rng = np.random.default_rng(5)
schema = make_rows(rng, np.arange(1)).schema
t = cat.create_table("bench.stream", schema, primary_key=["id"], buckets=4)
ids = rng.permutation(rows).astype(np.int64)
nbytes = [0]
def gen():
    for lo in range(0, rows, batch):
        b = make_rows(np.random.default_rng(lo), ids[lo:lo + batch]).to_batches()[0]
        nbytes[0] += b.nbytes
        yield b
t0 = time.perf_counter()
with PeakRss() as rss:
    t.upsert(pa.RecordBatchReader.from_batches(schema, gen()))
elapsed = time.perf_counter() - t0
assert t.scan(columns=["id"]).count() == rows
print(nbytes[0], rss.before, rss.peak, elapsed, len(t.files()))
"""


def stream_write(tmp: str) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            STREAM_CHILD,
            os.path.join(tmp, "stream"),
            os.path.dirname(os.path.abspath(__file__)),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    nbytes, before, peak, elapsed, files = out.stdout.split()
    growth = int(peak) - int(before)
    return {
        "arrow_bytes": int(nbytes),
        "rss_growth": growth,
        "growth_fraction_of_arrow": growth / int(nbytes),
        "seconds": float(elapsed),
        "files": int(files),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--in-sizes", default="1000,10000,100000")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-bench-surface-")
    results: dict[str, Any] = {}
    try:
        cat = mere.connect(os.path.join(tmp, "w1"))
        t, *_ = build(cat, "bench.w1", 1_000_000, 10, 100_000, 4, np.random.default_rng(42))
        results["projection"] = projection(cat, t, args.repeat)
        print("projection", json.dumps(results["projection"], indent=1), flush=True)
        results["in_lists"] = in_lists(t, [int(s) for s in args.in_sizes.split(",")], args.repeat)
        print("in_lists", json.dumps(results["in_lists"], indent=1), flush=True)
        if not args.skip_rss:
            results["stream_write"] = stream_write(tmp)
            print("stream_write", json.dumps(results["stream_write"], indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/bench_surface.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
