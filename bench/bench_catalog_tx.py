"""Catalog transactions: a 2-table catalog transaction against two single-table commits, and the latency
of a single-table commit (to compare with another checkout of mere).

Two keyed tables (4 buckets, ``compaction.auto=off``, ``retention.max-age=off`` so that no maintenance
runs in the measured calls). Each measure is the median (and p90) of ``--n`` runs, interleaved so that a
drift of the machine hits every measure alike:

  - ``single``: one ``upsert`` of ``--rows`` rows to one table (write + commit), as before this feature;
  - ``two_single``: an upsert to table A, then one to table B (two versions, two catalog transactions);
  - ``catalog_tx``: the same two upserts in one ``cat.transaction()`` (one database transaction);
  - ``commit_only`` variants: the files are staged first (``Table.stage``), and only the commit is
    timed: ``Table.commit`` twice against one catalog transaction with ``add_staged`` on both tables.

Usage: python bench/bench_catalog_tx.py [--n 200] [--rows 10] [--catalog sqlite|URL] [--single-only] [--json]
``--single-only`` measures only ``single`` (public API of any mere checkout: run it with another
``PYTHONPATH=<checkout>/src`` to compare the single-table commit path).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

import mere

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("s", pa.string())])
PROPS = {"compaction.auto": "off", "retention.max-age": "off"}


def batch(rng: np.random.Generator, rows: int) -> pa.Table:
    ids = rng.integers(0, 1_000_000, rows)
    return pa.table({"id": ids, "v": ids * 3, "s": pa.array([f"row-{i}" for i in ids])})


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"median_ms": statistics.median(ms), "p90_ms": ms[int(len(ms) * 0.9)], "n": len(ms)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--catalog", default="sqlite")
    ap.add_argument("--single-only", action="store_true")
    ap.add_argument(
        "--staged", action="store_true", help="single: commit pre-staged files (commit path only)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        url = None if args.catalog == "sqlite" else args.catalog
        cat = mere.connect(f"{d}/wh", catalog=url)
        a = cat.create_table("bench.a", SCHEMA, primary_key="id", buckets=4, properties=PROPS)
        b = cat.create_table("bench.b", SCHEMA, primary_key="id", buckets=4, properties=PROPS)
        for t in (a, b):  # warm up: connections, statement caches
            for _ in range(5):
                t.upsert(batch(rng, args.rows))

        staged: dict[str, Any] = {}

        def single() -> None:
            if args.staged:
                a.commit(staged["single"])
            else:
                a.upsert(batch(rng, args.rows))

        def stage_single() -> None:
            staged["single"] = [a.stage(batch(rng, args.rows))] if args.staged else []

        def two_single() -> None:
            a.upsert(batch(rng, args.rows))
            b.upsert(batch(rng, args.rows))

        def catalog_tx() -> None:
            with cat.transaction() as tx:
                tx.table("bench.a").upsert(batch(rng, args.rows))
                tx.table("bench.b").upsert(batch(rng, args.rows))

        def stage() -> None:
            staged["a"] = [a.stage(batch(rng, args.rows))]
            staged["b"] = [b.stage(batch(rng, args.rows))]

        def commit_two_single() -> None:
            a.commit(staged["a"])
            b.commit(staged["b"])

        def commit_catalog_tx() -> None:
            with cat.transaction() as tx:
                tx.table("bench.a").add_staged(staged["a"])
                tx.table("bench.b").add_staged(staged["b"])

        measures: dict[str, tuple[Callable[[], None] | None, Callable[[], None]]] = {
            "single": (stage_single, single)
        }
        if not args.single_only:
            measures |= {
                "two_single": (None, two_single),
                "catalog_tx": (None, catalog_tx),
                "commit_only_two_single": (stage, commit_two_single),
                "commit_only_catalog_tx": (stage, commit_catalog_tx),
            }
        samples: dict[str, list[float]] = {k: [] for k in measures}
        cpu: dict[str, list[float]] = {k: [] for k in measures}
        for _ in range(args.n):
            for name, (setup, run) in measures.items():
                if setup is not None:
                    setup()
                c0, t0 = time.process_time(), time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        # Wall time (SQLite's fsync and a busy machine included) and this process's CPU time (steadier).
        out: dict[str, Any] = {
            k: summary(v) | {"cpu_median_ms": summary(cpu[k])["median_ms"]} for k, v in samples.items()
        }
        if not args.single_only:
            out["ratio_catalog_tx_vs_two_single"] = (
                out["catalog_tx"]["median_ms"] / out["two_single"]["median_ms"]
            )
            out["ratio_commit_only"] = (
                out["commit_only_catalog_tx"]["median_ms"] / out["commit_only_two_single"]["median_ms"]
            )
        out["catalog"] = cat.sql.dialect
        out["rows"] = args.rows
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:32s} {v}")


if __name__ == "__main__":
    main()
