"""count() against the full read of the same table, each in a fresh process (the count floor of the
read issue: ``count()`` of W2 at most 0.1x its full read).

The table is bench_scale's workload at ``--scale`` (10: W2, 10M base rows and 10 upserts of 1M, half
updates), in 4 buckets unless told otherwise. Each run starts a new Python process that opens the table and
times one ``scan().count()`` or one ``scan().to_arrow()``, alternating, so both pay what a dashboard's
first query pays: footers, first allocations (the pages the decoded keys land on are zeroed by the kernel
on first touch), cold thread pools. Prints the medians of wall time and of the process's CPU time (user +
system) during the call, and their ratios.

Usage: python bench/bench_count.py [--scale 10] [--buckets 4] [--runs 7] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_scale import build

ONE_RUN = """
import resource, sys, time
import mere
t = mere.connect(sys.argv[1]).table("bench.t")
before = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
rows = t.scan().count() if sys.argv[2] == "count" else t.scan().to_arrow().num_rows
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
print(wall, cpu, rows)
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=10.0)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--root", default=None, help="build the table here and keep it (reused if there)")
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="mere-count-")
    done = os.path.join(root, "built")
    if not os.path.exists(done):
        build(root, args.scale, args.buckets)
        open(done, "w").close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    runs: dict[str, list[tuple[float, float]]] = {"count": [], "full": []}
    rows = {}
    for _ in range(args.runs):
        for kind in runs:
            out = subprocess.run(
                [sys.executable, "-c", ONE_RUN, root, kind],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            ).stdout.split()
            runs[kind].append((float(out[0]), float(out[1])))
            rows[kind] = int(out[2])
    if rows["count"] != rows["full"]:
        raise SystemExit(f"count() gave {rows['count']} rows, the full read {rows['full']}")
    wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    print(
        f"W1x{args.scale:g}, {args.buckets} buckets, {rows['count']:,} rows, {args.runs} fresh processes each"
    )
    print(f"  count(): {wall['count']:.3f} s wall, {cpu['count']:.3f} s CPU")
    print(f"  full read: {wall['full']:.3f} s wall, {cpu['full']:.3f} s CPU")
    print(
        f"  ratio: {wall['count'] / wall['full']:.3f}x wall, {cpu['count'] / cpu['full']:.3f}x CPU (floor 0.1x)"
    )
    print(f"  count walls: {sorted(round(w, 3) for w, _ in runs['count'])}")
    print(f"mere {getattr(mere, '__version__', '?')}, root {root}")


if __name__ == "__main__":
    main()
