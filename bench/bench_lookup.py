"""Key lookup benchmark: what key indexes (Bloom filters + page index) save a point lookup, and cost.

Workload W1 (``bench_scale.py``'s neutral data: id int64 key, 3 int64, 3 float64, a low- and a
high-cardinality string): 1,000,000 base rows, then 10 upserts of 100,000 (half updates), with the default
bucket count (8): 11 files per split. It is written twice, with the key index (mere today) and without it
(``keyindex.WRITE_INDEX = False``: files as mere wrote them before), and both are read by this build.
Reported, one run:

  - full-scan bytes; single-key lookup bytes (cold caches: footers included) of a key only in the base
    file, a key updated since (two versions) and an absent key, and their ratio to the full scan
    (floor: <= 0.3%)
  - lookup latency, median over ``--lookups`` random live keys (footers cached after the first): with
    the index vs files without it
  - a MERGE of 100 source keys (half new): bytes read and time, with vs without the index
  - write cost: upsert median with vs without the index; full merged read time with vs without (pages
    of 4,096 rows decode a little slower than one page per row group)

Usage: python bench/bench_lookup.py [--lookups 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import mere
from mere.io import keyindex

sys.path.insert(0, os.path.dirname(__file__))
from bench_scale import SCHEMA, make_rows

FLOOR = 0.003


def build(root: str, indexed: bool, seed: int = 7) -> tuple[mere.Table, list[float], np.ndarray]:
    """W1 as bench_scale builds it, default buckets; (table, upsert times, base ids)."""
    keyindex.WRITE_INDEX = indexed
    try:
        rng = np.random.default_rng(seed)
        base, batch = 1_000_000, 100_000
        key_space = 4 * (base + 10 * batch)
        ids = np.sort(rng.choice(key_space, base, replace=False))
        t = mere.connect(root).create_table("bench.t", SCHEMA, primary_key="id")
        t.upsert(make_rows(rng, ids))
        times = []
        for _ in range(10):
            keys = np.unique(
                np.concatenate([rng.choice(ids, batch // 2), rng.integers(0, key_space, batch // 2)])
            )
            rows = make_rows(rng, keys)
            t0 = time.perf_counter()
            t.upsert(rows)
            times.append(time.perf_counter() - t0)
        return t.refresh(), times, ids
    finally:
        keyindex.WRITE_INDEX = True


def cold_bytes(t: mere.Table, filter_: Any) -> tuple[int, int]:
    """(bytes read, rows) of one scan with empty caches."""
    t.storage.clear_cache()
    t.storage.stats.reset()
    rows = t.scan(filter=filter_).to_arrow().num_rows
    return t.storage.stats.bytes_read, rows


def versions(t: mere.Table) -> dict[int, int]:
    """How many files hold each key (for picking keys with one and with several versions)."""
    paths = [t.storage.full_path(p) for p in t.files().column("path").to_pylist()]
    ids = np.concatenate([pq.read_table(p, columns=["id"]).column("id").to_numpy() for p in paths])
    keys, counts = np.unique(ids, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def lookup_latency(t: mere.Table, keys: list[int]) -> float:
    for k in keys[:5]:
        t.scan(filter=f"id = {k}").to_arrow()
    times = []
    for k in keys:
        t0 = time.perf_counter()
        t.scan(filter=f"id = {k}").to_arrow()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def merge_cost(t: mere.Table, source: pa.Table) -> tuple[int, float]:
    t.storage.clear_cache()
    t.storage.stats.reset()
    t0 = time.perf_counter()
    t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
    return t.storage.stats.bytes_read, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    tmp = tempfile.mkdtemp(prefix="mere-lookup-")
    try:
        with_index, up_with, base_ids = build(os.path.join(tmp, "with"), True)
        without, up_without, _ = build(os.path.join(tmp, "without"), False)
        out["files_per_split"] = len(with_index.files()) // with_index.spec.buckets
        out["upsert_median_s"] = statistics.median(up_with)
        out["upsert_median_no_index_s"] = statistics.median(up_without)
        out["stored_bytes"] = sum(f.size_bytes for f in with_index.files_at(with_index.version))
        out["stored_bytes_no_index"] = sum(f.size_bytes for f in without.files_at(without.version))

        full, rows = cold_bytes(with_index, None)
        full_plain, rows_plain = cold_bytes(without, None)
        assert rows == rows_plain
        out["full_scan_bytes"], out["full_scan_bytes_no_index"] = full, full_plain
        seen = versions(with_index)
        single = next(k for k in base_ids[len(base_ids) // 3 :].tolist() if seen.get(k) == 1)
        double = next(k for k in base_ids[len(base_ids) // 3 :].tolist() if seen.get(k) == 2)
        absent = next(k for k in range(1, 10**6, 7919) if k not in seen)
        for name, key, want in (("single", single, 1), ("updated", double, 1), ("absent", absent, 0)):
            got, n = cold_bytes(with_index, f"id = {key}")
            plain, m = cold_bytes(without, f"id = {key}")
            assert n == m == want, (name, n, m)
            out[f"lookup_{name}_bytes"], out[f"lookup_{name}_bytes_no_index"] = got, plain
            out[f"lookup_{name}_ratio"] = got / full
            out[f"lookup_{name}_ratio_no_index"] = plain / full_plain

        live = with_index.scan(columns=["id"]).to_arrow().column("id").to_numpy()
        rng = np.random.default_rng(1)
        keys = rng.choice(live, args.lookups, replace=False).tolist()
        out["lookup_median_s"] = lookup_latency(with_index, keys)
        out["lookup_median_no_index_s"] = lookup_latency(without, keys)

        source_ids = np.concatenate(
            [rng.choice(live, 50, replace=False), rng.integers(5 * 10**6, 6 * 10**6, 50)]
        )
        source = make_rows(rng, np.unique(source_ids))
        out["merge100_bytes"], out["merge100_s"] = merge_cost(with_index, source)
        out["merge100_bytes_no_index"], out["merge100_no_index_s"] = merge_cost(without, source)
        assert with_index.scan().count() == without.scan().count()

        reads: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(args.repeat):  # interleaved: machine noise hits both alike
            for name, t in (("with", with_index), ("without", without)):
                t0 = time.perf_counter()
                t.to_arrow()
                reads[name].append(time.perf_counter() - t0)
        out["full_read_median_s"] = statistics.median(reads["with"])
        out["full_read_median_no_index_s"] = statistics.median(reads["without"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in out.items()}, indent=1))
    ok = all(out[f"lookup_{n}_ratio"] <= FLOOR for n in ("single", "updated", "absent"))
    print(
        f"\nW1, {out['files_per_split']} files per split: full scan {out['full_scan_bytes']:,} bytes; single-key "
        f"lookup {out['lookup_single_bytes']:,} bytes = {100 * out['lookup_single_ratio']:.3f}% "
        f"(updated key {100 * out['lookup_updated_ratio']:.3f}%, absent key {100 * out['lookup_absent_ratio']:.3f}%; "
        f"floor {100 * FLOOR:.1f}%: {'met' if ok else 'NOT MET'}); without the index "
        f"{100 * out['lookup_single_ratio_no_index']:.3f}% / {100 * out['lookup_updated_ratio_no_index']:.3f}% / "
        f"{100 * out['lookup_absent_ratio_no_index']:.3f}%\n"
        f"lookup median {1000 * out['lookup_median_s']:.2f} ms vs {1000 * out['lookup_median_no_index_s']:.2f} ms "
        f"without the index\n"
        f"MERGE of 100 keys: {out['merge100_bytes']:,} bytes, {1000 * out['merge100_s']:.0f} ms vs "
        f"{out['merge100_bytes_no_index']:,} bytes, {1000 * out['merge100_no_index_s']:.0f} ms without\n"
        f"write cost: upsert median {1000 * out['upsert_median_s']:.0f} ms vs {1000 * out['upsert_median_no_index_s']:.0f} ms "
        f"without; stored {out['stored_bytes'] / out['stored_bytes_no_index']:.3f}x; full read "
        f"{out['full_read_median_s']:.3f} s vs {out['full_read_median_no_index_s']:.3f} s"
    )


if __name__ == "__main__":
    main()
