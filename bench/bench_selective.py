"""Selective non-key reads and counts: the selective route against the plain one and a raw scan.

Workload: ``bench_scale.py``'s W1 rows (1M base + 10 upserts of 100k, half updates; int, float, a
repetitive and a high-cardinality string column) plus ``day``, a column that follows the key (as ids
that grow with time do), in 4 buckets. Filters on non-key columns:

  - ``random 1%``: ``f0 < 0.01`` (matches spread evenly over every row group)
  - ``clustered 0.3%``: ``day = 100`` (matches in a few row groups of each file)
  - ``one row``: ``high = '<a value of the last upsert>'``
  - ``count``: ``count()`` of the whole table, beside its full read

Each filtered read is timed three ways, interleaved, medians of ``--repeat``:

  - plain: merge every row, then filter (the route before the selective one; forced here)
  - selective: the scan as it reads now (``mere.read.selective``)
  - raw: ``pyarrow.dataset`` over exactly the table's live files with the same filter, no merge (what a
    reader that ignored versions would cost; its rows are wrong, it is a yardstick)

Usage: python bench/bench_selective.py [--repeat 5] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

import mere
from mere.read import selective

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import interleaved_medians
from bench_scale import SCHEMA, live_files, make_rows

KEY_SPACE_DAYS = 365


def build(root: str, buckets: int = 4, seed: int = 11) -> tuple[mere.Table, str]:
    """The table, and a value of ``high`` written by the last upsert."""
    rng = np.random.default_rng(seed)
    base, batch = 1_000_000, 100_000
    key_space = 4 * (base + 10 * batch)
    schema = SCHEMA.append(pa.field("day", pa.int32()))

    def rows(ids: np.ndarray) -> pa.Table:
        t = make_rows(rng, ids)
        return t.append_column(schema.field("day"), pa.array(ids * KEY_SPACE_DAYS // key_space, pa.int32()))

    ids = np.sort(rng.choice(key_space, base, replace=False))
    t = mere.connect(root).create_table("bench.t", schema, primary_key="id", buckets=buckets)
    t.upsert(rows(ids))
    last = None
    for _ in range(10):
        keys = np.unique(
            np.concatenate([rng.choice(ids, batch // 2), rng.integers(0, key_space, batch // 2)])
        )
        last = rows(keys)
        t.upsert(last)
    assert last is not None
    return t, str(last.column("high")[17])


def plain(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        saved = selective.MAX_NARROW_BYTES
        selective.MAX_NARROW_BYTES = -1
        try:
            return fn()
        finally:
            selective.MAX_NARROW_BYTES = saved

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-selective-")
    try:
        t, needle = build(os.path.join(tmp, "w1"))
        files = ds.dataset(live_files(t), format="parquet")
        th = args.threads
        cases = {
            "random 1%": ("f0 < 0.01", ds.field("f0") < 0.01),
            "clustered 0.3%": ("day = 100", ds.field("day") == 100),
            "one row": (f"high = '{needle}'", ds.field("high") == needle),
        }
        results: dict[str, Any] = {"threads": th, "files": len(live_files(t))}
        print(f"W1, 4 buckets, {results['files']} files, {th} threads, medians of {args.repeat}")
        print("| filter | rows | plain | selective | raw scan | selective/plain | selective/raw |")
        print("|---|---|---|---|---|---|---|")
        for name, (text, expr) in cases.items():
            scan = t.scan(filter=text, threads=th)
            got = scan.to_arrow()
            assert got.sort_by("id").equals(plain(scan.to_arrow)().sort_by("id"))
            p, s, r = interleaved_medians(
                [plain(scan.to_arrow), scan.to_arrow, lambda e=expr: files.to_table(filter=e)], args.repeat
            )
            results[name] = {"rows": got.num_rows, "plain_s": p, "selective_s": s, "raw_s": r}
            print(
                f"| {name} | {got.num_rows} | {p:.3f} s | {s:.3f} s | {r:.3f} s | {s / p:.2f} | {s / r:.2f} |"
            )
        scan = t.scan(threads=th)
        c, full = interleaved_medians([scan.count, scan.to_arrow], args.repeat)
        results["count"] = {"count_s": c, "full_s": full}
        print(f"count(): {c:.3f} s, full read {full:.3f} s: {c / full:.2f}x")
        t.compact()
        scan = t.scan(threads=th)
        c2, m2, full2 = interleaved_medians([scan.count, lambda: scan.max("i0"), scan.to_arrow], args.repeat)
        results["compacted"] = {"count_s": c2, "max_s": m2, "full_s": full2}
        print(f"compacted: count() {c2:.4f} s, max(i0) {m2:.4f} s, full read {full2:.3f} s")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
