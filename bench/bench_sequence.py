"""Sequence ordering (``sequence_by``): what it costs at W1 scale, and what tombstones cost. One run, ratios.

W1 (bench_core's builder, plus an ``lsn`` int64 column): a base of 1,000,000 rows, then 10 upserts of
100,000 rows (half update existing keys, half insert new ones), 4 buckets, automatic compaction off (so a
read merges 11 files per split). Two tables get the same batches: one with ``sequence_by="lsn"``, one
without (the newest commit wins). Each upsert's ``lsn`` grows with the commit, except for a share of late
rows (``--late``, default 10%) whose ``lsn`` is older than the key's stored one: the sequenced table
ignores those, the other takes them.

Reported (medians, the two tables' runs interleaved so that machine noise hits both alike):
  - upsert (the 10 W1 upserts, timed as they are written, and the same batches again after the reads)
    with vs without ``sequence_by`` (goal <= 1.15x);
  - full merged read (``to_arrow``) with vs without (goal <= 1.15x);
  - tombstones: 10% of the keys deleted (CDC deletes with their ``lsn``), then a full ``compact()``: the
    files, stored rows and bytes it keeps, and the merged read time (right after, and once a newer run
    of 1% of the keys landed, when the tombstones are merged with it), against the same table whose
    tombstones expired at that fold (``sequence.tombstone-retention=0``) and a table without sequences
    (whose full folds drop delete markers).

Usage: python bench/bench_sequence.py [--repeat 5] [--late 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa

import mere

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import interleaved_medians, make_rows, timed

BASE, UPSERTS, UPSERT_ROWS, BUCKETS = 1_000_000, 10, 100_000, 4
OFF = {"compaction.auto": "off"}


def with_lsn(rows: pa.Table, lsn: np.ndarray) -> pa.Table:
    return rows.append_column("lsn", pa.array(lsn, pa.int64()))


def w1_batches(rng: np.random.Generator, late: float) -> list[pa.Table]:
    """The W1 base and upserts with an ``lsn``: commit i writes lsn around i * 10M; late rows go back."""
    base = make_rows(rng, rng.permutation(BASE).astype(np.int64))
    out = [with_lsn(base, np.arange(BASE, dtype=np.int64))]
    next_id = BASE
    for i in range(1, UPSERTS + 1):
        old = rng.choice(next_id, size=UPSERT_ROWS // 2, replace=False)
        new = np.arange(next_id, next_id + UPSERT_ROWS - len(old))
        next_id += len(new)
        ids = rng.permutation(np.concatenate([old, new])).astype(np.int64)
        lsn = i * 10_000_000 + np.arange(len(ids), dtype=np.int64)
        stale = rng.random(len(ids)) < late
        lsn[stale] = rng.integers(0, BASE, int(stale.sum()))  # older than anything after the base
        out.append(with_lsn(make_rows(rng, ids), lsn))
    return out


def sizes(t: mere.Table) -> dict[str, int]:
    files = t.files()
    return {
        "files": files.num_rows,
        "stored_rows": int(sum(files.column("row_count").to_pylist())),
        "stored_bytes": int(sum(files.column("size_bytes").to_pylist())),
    }


def w1(tmp: str, repeat: int, late: float) -> dict[str, Any]:
    cat = mere.connect(os.path.join(tmp, "w1"))
    batches = w1_batches(np.random.default_rng(42), late)
    schema = batches[0].schema
    plain = cat.create_table("b.plain", schema, primary_key="id", buckets=BUCKETS, properties=OFF)
    seq = cat.create_table(
        "b.seq", schema, primary_key="id", buckets=BUCKETS, properties=OFF, sequence_by="lsn"
    )
    plain.upsert(batches[0])
    seq.upsert(batches[0])
    plain_s, seq_s, stale = [], [], 0
    for i, batch in enumerate(batches[1:]):
        # alternate which table writes first, so that neither always meets a warmer cache
        pair = [(plain, plain_s), (seq, seq_s)][:: 1 if i % 2 else -1]
        for table, acc in pair:
            acc.append(timed(lambda t=table, b=batch: t.upsert(b)))
        stale += seq.history()[-1].summary.get("stale_rows", 0)
    plain_scan, seq_scan = plain.scan(), seq.scan()
    read_plain, read_seq = interleaved_medians([plain_scan.to_arrow, seq_scan.to_arrow], repeat)
    rows_plain, rows_seq = plain_scan.count(), seq_scan.count()
    files = plain.files().num_rows
    # More upsert samples (a 100k-row upsert takes ~0.06 s: one sample each is noise): the same batches
    # again, after the reads, in turn.
    for i, batch in enumerate(batches[1:] * max(0, repeat // 2)):
        pair = [(plain, plain_s), (seq, seq_s)][:: 1 if i % 2 else -1]
        for table, acc in pair:
            acc.append(timed(lambda t=table, b=batch: t.upsert(b)))
    up_plain, up_seq = statistics.median(plain_s), statistics.median(seq_s)
    return {
        "late_share": late,
        "rows_plain": rows_plain,
        "rows_sequenced": rows_seq,
        "stale_rows_counted_in_batches": stale,  # 0: W1 batches hold each key once
        "files_per_table": files,
        "upsert_median_s_plain": up_plain,
        "upsert_median_s_sequenced": up_seq,
        "ratio_upsert_sequenced_vs_plain": up_seq / up_plain,
        "merged_read_median_s_plain": read_plain,
        "merged_read_median_s_sequenced": read_seq,
        "ratio_read_sequenced_vs_plain": read_seq / read_plain,
    }


def tombstones(tmp: str, repeat: int) -> dict[str, Any]:
    """10% of a W1 base deleted, then compacted: tombstones kept, expired, and no sequence at all."""
    cat = mere.connect(os.path.join(tmp, "tomb"))
    rng = np.random.default_rng(7)
    base = with_lsn(make_rows(rng, rng.permutation(BASE).astype(np.int64)), np.arange(BASE, dtype=np.int64))
    gone = rng.choice(BASE, BASE // 10, replace=False).astype(np.int64)
    deletes = pa.table(
        {"id": gone, "lsn": pa.array(2 * BASE + np.arange(len(gone)), pa.int64()), "op": ["d"] * len(gone)}
    )
    schema = base.schema.append(pa.field("op", pa.string()))
    tables = {}
    for name, props, sequence in (
        ("kept", OFF, "lsn"),
        ("expired", {**OFF, "sequence.tombstone-retention": "0"}, "lsn"),
        ("plain", OFF, None),
    ):
        t = cat.create_table(
            f"b.{name}",
            schema,
            primary_key="id",
            buckets=BUCKETS,
            cdc_column="op",
            properties=props,
            sequence_by=sequence,
        )
        t.upsert(base)
        t.upsert(deletes)
        tables[name] = t
    out: dict[str, Any] = {"deleted_keys": len(gone)}
    before = {name: t.scan() for name, t in tables.items()}
    unfolded = interleaved_medians([s.to_arrow for s in before.values()], repeat)
    for name, t in tables.items():
        out[f"compact_s_{name}"] = timed(t.compact)
    scans = {name: t.scan() for name, t in tables.items()}
    reads = interleaved_medians([s.to_arrow for s in scans.values()], repeat)
    for (name, t), read, read_before in zip(tables.items(), reads, unfolded):
        assert scans[name].count() == BASE - len(gone)
        out[name] = {**sizes(t), "merged_read_median_s": read, "read_before_compaction_s": read_before}
    # A newer run (1% of the keys upserted again): a split's tombstones are then merged with it.
    again = base.take(pa.array(rng.choice(BASE, BASE // 100, replace=False)))
    again = again.set_column(
        again.schema.get_field_index("lsn"), "lsn", pa.array(3 * BASE + np.arange(again.num_rows))
    )
    for t in tables.values():
        t.upsert(again)
    after = interleaved_medians([t.scan().to_arrow for t in tables.values()], repeat)
    for name, read in zip(tables, after):
        out[name]["read_with_a_newer_run_s"] = read
    out["ratio_read_kept_vs_expired"] = (
        out["kept"]["merged_read_median_s"] / out["expired"]["merged_read_median_s"]
    )
    out["ratio_bytes_kept_vs_expired"] = out["kept"]["stored_bytes"] / out["expired"]["stored_bytes"]
    out["ratio_read_kept_vs_plain"] = (
        out["kept"]["merged_read_median_s"] / out["plain"]["merged_read_median_s"]
    )
    out["ratio_read_with_a_newer_run_kept_vs_expired"] = (
        out["kept"]["read_with_a_newer_run_s"] / out["expired"]["read_with_a_newer_run_s"]
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--late", type=float, default=0.1, help="share of each upsert's rows that arrive late")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-bench-seq-")
    results: dict[str, Any] = {}
    try:
        results["W1"] = w1(tmp, args.repeat, args.late)
        print("W1", json.dumps(results["W1"], indent=1), flush=True)
        results["tombstones"] = tombstones(tmp, args.repeat)
        print("tombstones", json.dumps(results["tombstones"], indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/bench_sequence.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
