"""Where a merged read's time goes, on one thread: decode, the newest-wins marking, the copy of survivors.

The read-scaling floors compare mere's merged read with pyarrow's raw read of the same files. This script
splits mere's read into its stages, so that what a floor asks of each stage can be checked against what
pyarrow itself costs. Workload: ``bench_scale.py``'s W1 (1M base rows + 10 upserts of 100k, half
updates) in 4, 16 and 64 buckets, and the same rows compacted (one file per bucket). One thread
(``pyarrow.set_cpu_count(1)``, ``scan(threads=1)``), medians of ``--repeat``; the whole reads each timed
alone, the two merge stages in turn:

  - raw: ``pyarrow.parquet.read_table`` of exactly the table's live files, no merge, on pyarrow's CPU pool of
    one thread (the floors' yardstick, as in ``bench_scale.py``)
  - decode: mere's reads of the same files (every split's files, the columns a full read needs), no merge
  - mark: which stored rows survive (newest wins), on the decoded rows
  - select: the copy of the surviving rows (Arrow's filter), on the decoded rows, every split's copy kept
    until the last is made (as a scan keeps its output): the copies land in memory not in the CPU's caches
  - copy: the least any copy of those rows costs: their decoded buffers, whole, copied by NumPy into
    Arrow-allocated memory, kept the same way (a lower bound of select)
  - deltas: the decode of every file but the oldest of each split (part of decode)
  - scan: the whole merged read, ``scan(threads=1).to_arrow()``

``--workload maintenance`` reads ``bench_maintenance.py``'s table instead (W1 base + 100 upserts of 10k,
automatic compaction inline, default policy) against the same rows freshly compacted, and prints the least a
merged read that copies the survivors can cost beside the compacted read: the compacted scan plus the
deltas' decode plus the copy.

It uses the reader's internals (``SplitReader``): a diagnostic, not an API.

Usage: python bench/bench_read_anatomy.py [--buckets 4,16,64] [--repeat 5] [--workload scale|maintenance]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import mere
from mere.read import reader
from mere.read.newest_wins import newest_wins
from mere.read.planner import Explain

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import interleaved_medians, median_time
from bench_scale import build, live_files


def _value_buffers(chunk: pa.Array) -> list[pa.Buffer]:
    """The buffers a copy of the array's rows writes (a dictionary column: its indices)."""
    if pa.types.is_dictionary(chunk.type):
        chunk = chunk.indices
    return [b for b in chunk.buffers() if b is not None]


def stages(t: mere.Table, repeat: int) -> dict[str, Any]:
    scan = t.scan(threads=1)
    splits, opts = scan._plan(Explain(scan.version))
    opts = replace(opts, threads=1, release_memory=False)
    files = live_files(t)

    def open_readers() -> list[reader.SplitReader]:
        return [reader.SplitReader(t.storage, t.spec, s, opts) for s in splits]

    def decoded_splits() -> Iterator[list[pa.Table]]:
        for r in open_readers():
            yield [c.take_until(None) for c in r.cursors]

    def decode() -> None:  # split by split, as a scan holds them
        for _ in decoded_splits():
            pass

    # Whole reads first, one after another as in bench_scale.py (interleaving them disturbed the raw read,
    # by the memory each leaves behind); then the merge stages on rows decoded once.
    whole = median_time(lambda: scan.to_arrow(), repeat)
    raw = median_time(lambda: pq.read_table(files, use_threads=True), repeat)  # the one CPU thread
    decoded = median_time(decode, repeat)

    def decode_deltas() -> None:
        for r in open_readers():
            for c in r.cursors[1:]:
                c.take_until(None)

    deltas = median_time(decode_deltas, repeat)
    inputs = []  # per split: key arrays, operations, rows of the oldest file, and the rows themselves
    for tables in decoded_splits():
        keys = [np.concatenate([c.to_numpy() for p in tables for c in p.column("id").chunks])]
        ops = np.concatenate([reader._ops(p) for p in tables])
        inputs.append((keys, ops, tables[0].num_rows, pa.concat_tables(tables)))

    def marked(keys: list[np.ndarray], ops: np.ndarray, first: int) -> np.ndarray:
        if first == len(ops):  # one file: its rows are merged already, but for delete markers
            return np.asarray(ops != reader.OP_DELETE)
        return newest_wins(keys, ops, first)

    survivors = [marked(k, o, first) for k, o, first, _ in inputs]

    def mark() -> None:
        for keys, ops, first, _ in inputs:
            marked(keys, ops, first)

    def select() -> None:
        out = [reader._kept(rows, kept) for (_, _, _, rows), kept in zip(inputs, survivors)]
        del out

    buffers = [
        np.frombuffer(b, dtype=np.uint8)
        for _, _, _, rows in inputs
        for column in rows.columns
        for chunk in column.chunks
        for b in _value_buffers(chunk)
    ]

    def copy() -> None:
        out = []
        for b in buffers:
            dest = pa.allocate_buffer(len(b))
            np.copyto(np.frombuffer(dest, dtype=np.uint8), b)
            out.append(dest)
        del out

    marking, selecting, copying = interleaved_medians([mark, select, copy], repeat)
    timings = [raw, decoded, deltas, marking, selecting, copying, whole]
    stored = sum(len(o) for _, o, _, _ in inputs)
    kept = sum(int(np.count_nonzero(s)) for s in survivors)
    out: dict[str, Any] = {"files": len(files), "stored_rows": stored, "live_rows": kept}
    for name, seconds in zip(("raw", "decode", "deltas", "mark", "select", "copy", "scan"), timings):
        out[f"{name}_s"] = round(seconds, 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--buckets", default="4,16,64")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workload", choices=("scale", "maintenance"), default="scale")
    args = parser.parse_args()
    pa.set_cpu_count(1)
    tmp = tempfile.mkdtemp(prefix="mere-anatomy-")
    rows: list[dict[str, Any]] = []
    try:
        if args.workload == "maintenance":
            rows = maintenance_rows(tmp, args.repeat)
        else:
            for buckets in [int(b) for b in args.buckets.split(",")]:
                t, _ = build(os.path.join(tmp, f"b{buckets}"), 1.0, buckets)
                t.scan(threads=1).to_arrow()  # warm the page cache and footers
                for layout in ("merge-on-read", "compacted"):
                    if layout == "compacted":
                        t.compact(min_files=1)
                        t = t.refresh()
                        t.scan(threads=1).to_arrow()
                    rows.append(layout_row(buckets, layout, t, args.repeat))
                shutil.rmtree(os.path.join(tmp, f"b{buckets}"), ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "\n| buckets | layout | files | raw | decode | deltas | mark | select | copy | scan | scan / raw | "
        "(decode + mark + select) / raw |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        floor = (r["decode_s"] + r["mark_s"] + r["select_s"]) / r["raw_s"]
        print(
            f"| {r['buckets']} | {r['layout']} | {r['files']} | {r['raw_s']:.3f} | {r['decode_s']:.3f} | "
            f"{r['deltas_s']:.3f} | {r['mark_s']:.3f} | {r['select_s']:.3f} | {r['copy_s']:.3f} | "
            f"{r['scan_s']:.3f} | {r['scan_s'] / r['raw_s']:.2f}x | {floor:.2f}x |"
        )
    merged = {r["buckets"]: r for r in rows if r["layout"] == "merge-on-read"}
    if 4 in merged and 64 in merged:
        print(
            f"\n64 vs 4 buckets: raw {merged[64]['raw_s'] / merged[4]['raw_s']:.2f}x, "
            f"decode {merged[64]['decode_s'] / merged[4]['decode_s']:.2f}x, "
            f"scan {merged[64]['scan_s'] / merged[4]['scan_s']:.2f}x"
        )
    by_layout = {r["layout"]: r for r in rows}
    if "auto-compacted" in by_layout:
        auto, fresh = by_layout["auto-compacted"], by_layout["compacted"]
        least = fresh["scan_s"] + auto["deltas_s"] + auto["copy_s"]
        print(
            f"\nauto-compacted vs compacted: scan {auto['scan_s'] / fresh['scan_s']:.2f}x; the least a merge "
            f"that copies the survivors costs: (compacted scan + deltas + copy) / compacted scan = "
            f"{least / fresh['scan_s']:.2f}x, with Arrow's filter as the copy "
            f"{(fresh['scan_s'] + auto['deltas_s'] + auto['select_s']) / fresh['scan_s']:.2f}x"
        )


def layout_row(buckets: int, layout: str, t: mere.Table, repeat: int) -> dict[str, Any]:
    row = {"buckets": buckets, "layout": layout, **stages(t, repeat)}
    print(json.dumps(row), flush=True)
    return row


def maintenance_rows(tmp: str, repeat: int) -> list[dict[str, Any]]:
    """``bench_maintenance.py``'s automatically compacted table, then the same rows compacted."""
    from bench_maintenance import build as build_maintained

    t = build_maintained(os.path.join(tmp, "auto"), {"compaction.auto": "inline"}, 100, 10_000)
    t.scan(threads=1).to_arrow()
    rows = [layout_row(t.spec.buckets, "auto-compacted", t, repeat)]
    t.compact(min_files=1)
    t = t.refresh()
    t.scan(threads=1).to_arrow()
    rows.append(layout_row(t.spec.buckets, "compacted", t, repeat))
    return rows


if __name__ == "__main__":
    main()
