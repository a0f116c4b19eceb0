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

``--anatomy`` also splits the random 1% read into its stages, on one thread, in CPU seconds (a loaded
machine's wall times mislead): the narrow pass's decode and the rest of it (filter, statistics), the
marking of the newest versions, the wide pass's decode and the rest of it (picking the survivors), and
pyarrow's own decode of the same columns of every live file beside them.

Usage: python bench/bench_selective.py [--repeat 5] [--threads 2] [--json out.json] [--anatomy]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import mere
from mere.read import reader, selective

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


def anatomy(t: mere.Table, repeat: int) -> dict[str, float]:
    """CPU seconds per stage of the random 1% read on one thread (medians of ``repeat``), and pyarrow's
    decode of the same columns."""
    cpus = pa.cpu_count()
    pa.set_cpu_count(1)
    spent: collections.Counter[str] = collections.Counter()
    saved: list[tuple[Any, str, Any]] = []

    def timed(owner: Any, name: str, label: Callable[[tuple[Any, ...]], str]) -> None:
        fn = getattr(owner, name)
        saved.append((owner, name, fn))

        def run(*args: Any, **kwargs: Any) -> Any:
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label(args)] += time.process_time() - c0

        setattr(owner, name, run)

    key_columns = {"id", "_mere_op"}
    timed(reader._FileCursor, "load", lambda a: "decode narrow" if key_columns & set(a[2]) else "decode wide")
    timed(selective, "_narrow", lambda a: "narrow")
    timed(selective, "_wide", lambda a: "wide")
    timed(selective, "_newest_by_search", lambda a: "mark")
    timed(selective, "_marked", lambda a: "mark")
    stages: dict[str, list[float]] = collections.defaultdict(list)
    try:
        for _ in range(repeat + 1):
            spent.clear()
            c0 = time.process_time()
            t.scan(filter="f0 < 0.01", threads=1).to_arrow()
            total = time.process_time() - c0
            spent["narrow other"] = spent.pop("narrow") - spent["decode narrow"]
            spent["wide other"] = spent.pop("wide") - spent["decode wide"]
            spent["outside (plan, stack)"] = total - sum(spent.values())
            spent["total"] = total
            for k, v in spent.items():
                stages[k].append(v)
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
        pa.set_cpu_count(cpus)
    files = live_files(t)
    wide = [c for c in t.schema.names if c not in ("id", "f0")]
    for name, cols in (("pyarrow: id, op, f0", ["id", "_mere_op", "f0"]), ("pyarrow: the others", wide)):
        for _ in range(repeat):
            c0 = time.process_time()
            for f in files:
                pq.ParquetFile(f).read(columns=cols, use_threads=False)
            stages[name].append(time.process_time() - c0)
    out = {k: float(np.median(v[1:] if len(v) > repeat else v)) for k, v in stages.items()}
    print("random 1%, one thread, CPU seconds (medians):")
    for k, v in out.items():
        print(f"  {k:24s} {v:.4f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--anatomy", action="store_true")
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
        if args.anatomy:
            results["anatomy_cpu_s"] = anatomy(t, args.repeat)
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
