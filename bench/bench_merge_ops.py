"""Merge engines at W1: merged read with the order-free operators (``max``/``min``) and ``first_row``
against the all-``last`` table. One run, ratios.

W1 (bench_core's builder, plus an ``lsn`` int64 column growing with each commit): a base of 1,000,000
rows, then 10 upserts of 100,000 rows (half update existing keys, half insert new ones), 4 buckets,
automatic compaction off (a read merges 11 files per split). Tables get the same batches:

  - ``last``: every column ``last`` (the reader's newest-wins path);
  - ``max/min``: ``i0`` max, ``i1`` min, ``f0`` max, ``s0`` min (the reader's general fold);
  - ``first_row``: the first version wins (its own fast path);
  - the same ``last`` and ``max/min`` tables with ``sequence_by="lsn"``.

Reported: the median of ``--repeat`` full merged reads (``to_arrow``) of each, runs interleaved, and each
one's ratio to ``last`` (of the same ordering).

Usage: python bench/bench_merge_ops.py [--repeat 3]
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

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import interleaved_medians
from bench_sequence import BUCKETS, w1_batches

OFF = {"compaction.auto": "off"}
MAX_MIN = {"i0": "max", "i1": "min", "f0": "max", "s0": "min"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-bench-ops-")
    try:
        cat = mere.connect(os.path.join(tmp, "w"))
        batches = w1_batches(np.random.default_rng(42), 0.0)
        schema = batches[0].schema
        kinds: dict[str, dict[str, Any]] = {
            "last": {},
            "max/min": {"merge_operators": MAX_MIN},
            "first_row": {"merge_operators": "first_row"},
            "last+seq": {"sequence_by": "lsn"},
            "max/min+seq": {"merge_operators": MAX_MIN, "sequence_by": "lsn"},
        }
        tables = {}
        for i, (name, kwargs) in enumerate(kinds.items()):
            t = cat.create_table(
                f"b.t{i}", schema, primary_key="id", buckets=BUCKETS, properties=OFF, **kwargs
            )
            for batch in batches:
                t.upsert(batch)
            tables[name] = t
        scans = {name: t.scan() for name, t in tables.items()}
        medians = interleaved_medians([s.to_arrow for s in scans.values()], args.repeat)
        read = dict(zip(scans, medians))
        results = {
            "rows": {name: s.count() for name, s in scans.items()},
            "files_per_table": tables["last"].files().num_rows,
            "merged_read_median_s": read,
            "ratio_vs_last": {
                name: read[name] / read["last+seq" if name.endswith("+seq") else "last"] for name in read
            },
        }
        print(json.dumps(results, indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/bench_merge_ops.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
