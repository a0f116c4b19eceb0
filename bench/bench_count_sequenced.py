"""count() of a table with ``sequence_by`` (a CDC table) against its full read: a 1M-row base and five
200k-row upserts (some late, below the base's sequence), 2 buckets, dense integer ids, a float and a
high-cardinality string column. Prints medians of ``--runs`` runs in one process.

    PYTHONPATH=src python bench/bench_count_sequenced.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import mere


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--buckets", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(1)

    def batch(n: int, hi: int, lsn: int) -> pa.Table:
        keys = rng.choice(np.arange(hi), n, replace=False)
        text = pa.array([f"s{x}" for x in rng.integers(0, 10**9, n)])
        return pa.table({"k": keys, "v": rng.random(n), "s": text, "lsn": np.full(n, lsn)})

    t = mere.connect(tempfile.mkdtemp()).create_table(
        "db.cdc", batch(1, 1, 0).schema, primary_key="k", sequence_by="lsn", buckets=args.buckets
    )
    t.upsert(batch(1_000_000, 1_000_000, 10))
    for i in range(5):
        t.upsert(batch(200_000, 1_200_000, 5 + 3 * i))

    def timed(fn: object) -> float:
        out = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fn()  # type: ignore[operator]
            out.append(time.perf_counter() - start)
        return statistics.median(out)

    count = timed(lambda: t.scan().count())
    full = timed(lambda: t.to_arrow())
    print(f"rows {t.scan().count()}: count {count:.3f} s, full read {full:.3f} s, ratio {count / full:.3f}x")


if __name__ == "__main__":
    main()
