"""TableDataset through a torch DataLoader: merged rows per second with num_workers=0 vs 2.

Table: 2,000,000 rows (id int64 key, 3 int64, 3 float64 columns), 4 buckets, a base write and 3 upserts
of 10% of the keys each (so every split merges 4 files). The dataset yields dicts of tensors of
``--batch-size`` rows (default 65,536); the DataLoader runs with ``batch_size=None``. Each setting: one
warm-up epoch, then the median of ``--repeat`` epochs (every batch touched: ``sum`` of one column).

With ``--step-ms`` the main process also busies itself for that long per batch (a stand-in for the
training step that DataLoader workers exist to overlap with reading); 0 measures bare loading.

Usage: python bench/bench_torch_loader.py [--rows 2000000] [--batch-size 65536] [--repeat 3] [--workers 2]
       [--step-ms 0,20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
from torch.utils.data import DataLoader

import mere
from mere.integrations.torch import TableDataset


def make_rows(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    cols: dict[str, Any] = {"id": pa.array(ids, pa.int64())}
    for i in range(3):
        cols[f"i{i}"] = rng.integers(0, 1 << 40, len(ids))
    for i in range(3):
        cols[f"f{i}"] = rng.random(len(ids))
    return pa.table(cols)


def build(warehouse: str, rows: int) -> mere.Table:
    rng = np.random.default_rng(0)
    table = mere.connect(warehouse).create_table(
        "bench.torch", make_rows(rng, np.arange(2)).schema, primary_key="id", buckets=4
    )
    table.upsert(make_rows(rng, np.arange(rows)))
    for _ in range(3):
        table.upsert(make_rows(rng, np.sort(rng.choice(rows, rows // 10, replace=False))))
    return table


def cpu_seconds() -> float:
    """CPU time of this process and its live children (persistent DataLoader workers), all threads."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def epoch(loader: DataLoader[Any], step_ms: float = 0.0) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, rows) of one pass; ``step_ms`` of busy work per batch stands for the
    training step the main process runs between batches (it holds a core, as a CPU-side step would)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    rows = 0
    for batch in loader:
        rows += len(batch["id"])
        batch["f0"].sum()
        end = time.perf_counter() + step_ms / 1000
        while time.perf_counter() < end:
            pass
    wall = time.perf_counter() - t0
    return wall, cpu_seconds() - c0, rows


def rate(ds: TableDataset, workers: int, repeat: int, step_ms: float = 0.0) -> tuple[float, float, int]:
    """(rows per second, CPU seconds per million rows, rows per epoch): medians after a warm-up."""
    loader = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    epoch(loader, step_ms)  # warm-up (and worker start)
    runs = [epoch(loader, step_ms) for _ in range(repeat)]
    rows = runs[0][2]
    return (
        rows / statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs) / rows * 1e6,
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch-size", type=int, default=65_536)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--step-ms", default="0,20", help="busy milliseconds per batch in the main process")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="mere-bench-torch-")
    try:
        t0 = time.perf_counter()
        table = build(os.path.join(root, "wh"), args.rows)
        print(
            f"built {args.rows:,} rows + 3 upserts of 10% in {time.perf_counter() - t0:.1f}s; cores {os.cpu_count()}"
        )
        ds = TableDataset(table, batch_size=args.batch_size)
        print(ds)
        for step in (float(x) for x in args.step_ms.split(",")):
            results = {}
            for workers in (0, args.workers):
                results[workers], cpu, rows = rate(ds, workers, args.repeat, step)
                print(
                    f"step {step:g} ms/batch, num_workers={workers}: {results[workers] / 1e6:.2f} M rows/s, "
                    f"{cpu:.2f} CPU-s per M rows ({rows:,} rows per epoch)"
                )
            print(
                f"step {step:g} ms: ratio {args.workers} workers / 0 workers: {results[args.workers] / results[0]:.2f}x"
            )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
