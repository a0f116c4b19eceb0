"""Maintenance benchmark: automatic compaction, compaction throughput and the change feed.

Workload: the neutral W1 data of ``bench_scale.py`` (1M base rows, 4 buckets), then 100 upserts of 10k rows
(half updates of existing keys, half new keys). Reported, one run, medians of ``--repeat`` reads:

  - merged read with automatic compaction on (``compaction.auto=inline``, default ``min-files`` 8) vs the
    read of the same rows freshly compacted (the two timed in turn, ``--repeat`` each, after a warm-up
    read); without automatic compaction (reference): files and read time
  - compaction throughput (rows/s) of the uncompacted table vs a raw ``pq.read_table`` + ``pq.write_table``
    of the same files
  - the change feed between two adjacent versions vs a merged read of the splits that commit touched
  - the feed of a commit touching 1% of the keys vs a full merged read
  - both feeds without and with the change log (``changes.log=on``), and the upserts' times in each mode

Usage: python bench/bench_maintenance.py [--upserts 100] [--batch 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np
import pyarrow.parquet as pq

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import interleaved_medians, median_time, timed
from bench_scale import SCHEMA, make_rows


def build(root: str, props: dict[str, str], upserts: int, batch: int, seed: int = 11) -> mere.Table:
    rng = np.random.default_rng(seed)
    base = 1_000_000
    key_space = 4 * (base + upserts * batch)
    ids = np.sort(rng.choice(key_space, base, replace=False))
    t = mere.connect(root).create_table("bench.t", SCHEMA, primary_key="id", buckets=4, properties=props)
    t.upsert(make_rows(rng, ids))
    for _ in range(upserts):
        keys = np.unique(
            np.concatenate([rng.choice(ids, batch // 2), rng.integers(0, key_space, batch // 2)])
        )
        t.upsert(make_rows(rng, keys))
    return t.refresh()


def files(t: mere.Table) -> list[str]:
    return [os.path.join(t.storage.root, p) for p in t.files().column("path").to_pylist()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upserts", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    tmp = tempfile.mkdtemp(prefix="mere-maint-")
    try:
        auto = build(os.path.join(tmp, "auto"), {"compaction.auto": "inline"}, args.upserts, args.batch)
        plain = build(os.path.join(tmp, "plain"), {}, args.upserts, args.batch)
        rows = len(plain.to_arrow())
        assert len(auto.to_arrow()) == rows
        out["auto_files"], out["plain_files"] = len(auto.files()), len(plain.files())
        out["plain_read_s"] = median_time(lambda: plain.to_arrow(), args.repeat)

        # Compaction throughput, against reading and writing the same files raw.
        paths = files(plain)
        raw_dir = os.path.join(tmp, "raw")
        os.makedirs(raw_dir)

        def raw_copy() -> None:
            for i, p in enumerate(paths):
                pq.write_table(pq.read_table(p), os.path.join(raw_dir, f"{i}.parquet"), compression="zstd")

        out["raw_read_write_s"] = timed(raw_copy)
        stored = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
        out["compact_s"] = timed(lambda: plain.compact(min_files=1))
        out["compact_rows_per_s"] = round(stored / out["compact_s"])
        out["raw_rows_per_s"] = round(stored / out["raw_read_write_s"])
        plain.to_arrow()
        out["auto_read_s"], out["compacted_read_s"] = interleaved_medians(
            [lambda: auto.to_arrow(), lambda: plain.to_arrow()], args.repeat
        )
        out["auto_vs_compacted"] = round(out["auto_read_s"] / out["compacted_read_s"], 2)

        # The change feed, without and with the change log (changes.log=on: writes record the rows they
        # replace, so a feed reads those instead of merging the older version).
        rng = np.random.default_rng(5)
        live = plain.to_arrow(columns=["id"]).column("id").to_numpy()
        out["full_read_s"] = median_time(lambda: plain.to_arrow(), args.repeat)
        for mode in ("off", "on"):
            plain.set_properties({"changes.log": mode})
            tag = "" if mode == "off" else "_logged"
            # One more upsert (10k keys, every bucket) vs a merged read of the splits it touched.
            before = plain.version
            data = make_rows(rng, np.unique(rng.choice(live, args.batch)))
            out[f"upsert{tag}_s"] = timed(lambda d=data: plain.upsert(d))
            touched = {
                (f.partition, f.bucket)
                for f in plain.files_at(plain.version)
                if f.added_version == plain.version
            }
            after = plain.version
            out[f"feed_adjacent{tag}_s"] = median_time(
                lambda b=before, e=after: plain.changes(b, e).read_all(), args.repeat
            )
            out[f"touched_splits_read{tag}_s"] = median_time(
                lambda s=touched: plain.split_tables(plain.version, s, SCHEMA.names), args.repeat
            )
            out[f"feed_vs_touched_read{tag}"] = round(
                out[f"feed_adjacent{tag}_s"] / out[f"touched_splits_read{tag}_s"], 2
            )
            # A commit touching 1% of the keys, against a full merged read.
            before = plain.version
            data = make_rows(rng, np.unique(rng.choice(live, len(live) // 100)))
            out[f"upsert_1pct{tag}_s"] = timed(lambda d=data: plain.upsert(d))
            after = plain.version  # a feed's caller knows both versions (e.g. a stream's offsets)
            out[f"feed_1pct{tag}_s"] = median_time(
                lambda b=before, e=after: plain.changes(b, e).read_all(), args.repeat
            )
            out[f"feed_1pct_vs_full_read{tag}"] = round(out[f"feed_1pct{tag}_s"] / out["full_read_s"], 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}, indent=1))
    print(
        f"\nauto-compacted read {out['auto_read_s']:.3f} s vs freshly compacted {out['compacted_read_s']:.3f} s: "
        f"{out['auto_vs_compacted']:.2f}x (floor 1.15x); without auto compaction {out['plain_files']} files, "
        f"{out['plain_read_s']:.3f} s (auto: {out['auto_files']} files)\n"
        f"compaction {out['compact_rows_per_s']:,} rows/s vs raw read+write {out['raw_rows_per_s']:,} rows/s\n"
    )
    for tag, what in (("", "without the change log"), ("_logged", "with changes.log=on")):
        print(
            f"{what}: feed of one commit {out[f'feed_adjacent{tag}_s']:.3f} s vs merged read of its "
            f"splits {out[f'touched_splits_read{tag}_s']:.3f} s: {out[f'feed_vs_touched_read{tag}']:.2f}x "
            f"(floor 1.5x); feed of a 1% commit {out[f'feed_1pct{tag}_s']:.3f} s vs full read "
            f"{out['full_read_s']:.3f} s: {out[f'feed_1pct_vs_full_read{tag}']:.2f}x (floor 0.10x); "
            f"upserts of 10k / 1% keys {out[f'upsert{tag}_s']:.3f} / {out[f'upsert_1pct{tag}_s']:.3f} s"
        )


if __name__ == "__main__":
    main()
