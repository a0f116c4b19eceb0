"""Tiny commits: what a table fed by a streaming job with a short trigger looks like after N commits.

Workload: a keyed table (4 buckets by default), then ``--commits`` upserts of ``--rows`` rows each (half
updates of keys written before, half new keys; neutral data: integers, floats, repetitive and
high-cardinality strings), optionally on top of a ``--base`` of rows written in one commit. Each maintenance
policy runs on its own fresh table, one after another:

  - ``off``: no automatic maintenance (``compaction.auto=off``)
  - ``default``: whatever a new table gets by default (no properties given)
  - ``inline`` / ``background``: ``compaction.auto`` in that mode (``compaction.min-files`` 8)
  - any ``name=key:value,key:value`` spec for other properties, e.g. ``tiered=compaction.auto:inline,
    compaction.size-amplification-percent:200``

Reported per policy, one run: the write time of every commit (p50 / p99 / max, overall and per stretch
between checkpoints), and at each checkpoint (``--checkpoints``) the median of ``--repeat`` ``count()``
calls and point reads (``id = k`` of an existing key), the live files, the bytes under the table's
folder, and the versions readable and in the history. Background maintenance is read as a user sees it:
right after the checkpoint's commit.

Usage: python bench/bench_tiny_commits.py [--commits 2000] [--rows 20] [--buckets 4] [--base 0]
       [--checkpoints 100,2000] [--policies off,default,inline,background] [--repeat 5] [--json]
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

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_scale import SCHEMA, make_rows

POLICIES: dict[str, dict[str, str] | None] = {
    "off": {"compaction.auto": "off"},
    "default": None,
    "inline": {"compaction.auto": "inline"},
    "background": {"compaction.auto": "background"},
}


def policy(spec: str) -> tuple[str, dict[str, str] | None]:
    if spec in POLICIES:
        return spec, POLICIES[spec]
    name, _, props = spec.partition("=")
    return name, dict(p.split(":", 1) for p in props.split(",") if p)


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def median_of(repeat: int, fn: Any) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def percentiles(seconds: list[float]) -> dict[str, float]:
    a = np.array(seconds)
    return {
        "p50_ms": round(float(np.percentile(a, 50)) * 1e3, 2),
        "p99_ms": round(float(np.percentile(a, 99)) * 1e3, 2),
        "max_ms": round(float(a.max()) * 1e3, 2),
    }


def run(name: str, props: dict[str, str] | None, args: argparse.Namespace) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix=f"mere-tiny-{name}-")
    try:
        rng = np.random.default_rng(args.seed)
        t = mere.connect(root).create_table(
            "bench.t", SCHEMA, primary_key="id", buckets=args.buckets, properties=props
        )
        written = np.empty(0, dtype=np.int64)
        if args.base:
            written = np.arange(args.base, dtype=np.int64) * 2
            t.upsert(make_rows(rng, written))
        checkpoints = sorted(args.checkpoints)
        times: list[float] = []
        cpu_times: list[float] = []  # process CPU of each commit: what other processes' load inflates least
        maintained: list[bool] = []
        points: list[dict[str, Any]] = []
        next_key = int(written.max()) + 1 if len(written) else 0
        for i in range(1, args.commits + 1):
            half = args.rows // 2
            old = rng.choice(written, min(half, len(written)), replace=False) if len(written) else written
            new = np.arange(next_key, next_key + args.rows - len(old), dtype=np.int64)
            next_key += len(new)
            keys = np.unique(np.concatenate([old, new]))
            rows = make_rows(rng, keys)
            started, cpu = time.perf_counter(), time.process_time()
            result = t.upsert(rows)
            times.append(time.perf_counter() - started)
            cpu_times.append(time.process_time() - cpu)
            # Did this call also compact (inline)? Versions after the upsert's own, none of them another's.
            maintained.append(t.version > result.version if name != "background" else False)
            written = np.concatenate([written, new])
            if i in checkpoints:
                probe = int(rng.choice(written))
                files = t.files()
                snapshots = t.inspect.snapshots()
                expired = (
                    snapshots.column("expired").to_pylist() if "expired" in snapshots.column_names else []
                )
                stretch = times[(points[-1]["commit"] if points else 0) :]
                points.append(
                    {
                        "commit": i,
                        "count_s": round(median_of(args.repeat, lambda: t.scan().count()), 4),
                        "point_read_s": round(
                            median_of(args.repeat, lambda p=probe: t.scan(filter=f"id = {p}").to_arrow()), 4
                        ),
                        "live_files": files.num_rows,
                        "disk_mb": round(folder_bytes(os.path.join(root, t.location)) / 2**20, 2),
                        "live_mb": round(sum(files.column("size_bytes").to_pylist()) / 2**20, 2),
                        "versions": t.version + 1,
                        "readable_versions": len(expired) - sum(expired) if expired else None,
                        "writes_since_last": percentiles(stretch),
                    }
                )
                assert t.scan().count() == len(written), "the bench's own check: every key once"
        plain = [w for w, m in zip(times, maintained) if not m]
        return {
            "policy": name,
            "properties": dict(t.refresh().properties),
            "writes": percentiles(times),
            "writes_cpu": percentiles(cpu_times),
            "writes_without_compaction": percentiles(plain) if plain else None,
            "commits_that_compacted": sum(maintained),
            "checkpoints": points,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--base", type=int, default=0, help="rows written in one commit first")
    parser.add_argument("--checkpoints", default="100,2000")
    parser.add_argument("--policies", default="off,default,inline,background")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.checkpoints = [int(c) for c in args.checkpoints.split(",")]
    # Policies are separated by commas, or by semicolons when a property spec holds commas.
    specs = args.policies.split(";" if ";" in args.policies else ",")
    results = [run(*policy(p), args) for p in specs if p.strip()]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.commits} commits of {args.rows} rows, {args.buckets} buckets, base {args.base} rows")
    for r in results:
        w, c = r["writes"], r["writes_cpu"]
        print(f"\n{r['policy']}: writes p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms, max {w['max_ms']} ms")
        print(
            f"  CPU per write p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms; {r['commits_that_compacted']} writes also compacted"
        )
        if r["writes_without_compaction"] is not None:
            q = r["writes_without_compaction"]
            print(f"  writes that did not compact: p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms")
        print(f"  properties {r['properties']}")
        for p in r["checkpoints"]:
            s = p["writes_since_last"]
            print(
                f"  commit {p['commit']:>5}: count {p['count_s'] * 1e3:8.1f} ms  point read "
                f"{p['point_read_s'] * 1e3:7.1f} ms  live files {p['live_files']:>5}  disk {p['disk_mb']:7.2f} MB "
                f"(live {p['live_mb']:.2f})  versions {p['versions']} (readable {p['readable_versions']})  "
                f"writes p50/p99 {s['p50_ms']}/{s['p99_ms']} ms"
            )


if __name__ == "__main__":
    main()
