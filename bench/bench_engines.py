"""Engines benchmark: W1's full merged read into each engine vs ``scan.to_arrow()``, in one run.

W1 (core issue): base of 1,000,000 rows (id int64 key + 3 int64, 3 float64, 2 short strings), 4 buckets,
then 10 upserts of 100,000 rows (half updates). Each engine runs in a fresh process: first a warm-up
read, then ``--repeat`` timed reads (median) with the peak RSS growth of the process over them, then
``--repeat`` pairs of ``to_arrow()`` and the engine's read, alternated: the ratio is the median of the
engine's times over the median of ``to_arrow``'s from those pairs.

  arrow    scan.to_arrow()                                  (the reference of every ratio)
  pandas   scan.to_pandas(); pandas_arrow: scan.to_pandas(types_mapper=pd.ArrowDtype)
  polars   scan.to_polars(); and scan_table(t).collect()    (the IO-plugin LazyFrame)
  duckdb   register(con, "w1", t); SELECT * into Arrow
  dask     read_table(t).compute() on a LocalCluster of 2 worker processes (started before timing);
           dask_threads: 2 workers in this process; dask_parquet: dd.read_parquet of the table's stored
           files on the 2 worker processes (no merge: what moving the rows through Dask costs by itself)
  ray      read_table(t) materialised to Arrow on a local Ray of 2 CPUs (started before timing)
  torch    TableDataset (numeric columns) through a DataLoader, num_workers 0 and 2: rows/s

Usage: python bench/bench_engines.py [--repeat 3] [--engines arrow,pandas,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import mere

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_core import build  # noqa: E402

ENGINES = (
    "arrow",
    "pandas",
    "pandas_arrow",
    "polars",
    "polars_lazy",
    "duckdb",
    "dask",
    "dask_threads",
    "dask_parquet",
    "ray",
    "torch0",
    "torch2",
)

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, {here!r})
import mere
from rss import PeakRss

engine, warehouse, repeat = {engine!r}, {warehouse!r}, {repeat}
table = mere.connect(warehouse).table("bench.w1")
NUMERIC = ["id", "i0", "i1", "i2", "f0", "f1", "f2"]

if engine == "arrow":
    read = lambda: table.scan().to_arrow().num_rows
elif engine == "pandas":
    read = lambda: len(table.scan().to_pandas())
elif engine == "pandas_arrow":
    import pandas as pd
    read = lambda: len(table.scan().to_pandas(types_mapper=pd.ArrowDtype))
elif engine == "polars":
    read = lambda: table.scan().to_polars().height
elif engine == "polars_lazy":
    from mere.integrations.polars import scan_table
    read = lambda: scan_table(table).collect().height
elif engine == "duckdb":
    import duckdb
    from mere.integrations.duckdb import register
    con = duckdb.connect()
    def read():
        register(con, "w1", table)
        return con.sql("SELECT * FROM w1").to_arrow_table().num_rows
elif engine.startswith("dask"):
    import dask.dataframe as dd
    import distributed
    from mere.integrations.dask import read_table
    processes = engine != "dask_threads"
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None
    )
    client = distributed.Client(cluster)
    if engine == "dask_parquet":  # Dask's own reader on the same stored files: no merge (a reference)
        files = [table.storage.file_uri(p) for p in table.files()["path"].to_pylist()]
        read = lambda: len(dd.read_parquet(files).compute())
    else:
        read = lambda: len(read_table(table).compute())
elif engine == "ray":
    import ray
    from mere.integrations.ray import read_table
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    read = lambda: sum(t.num_rows for t in ray.get(read_table(table).to_arrow_refs()))
elif engine.startswith("torch"):
    import torch
    from mere.integrations.torch import TableDataset
    workers = int(engine[5:])
    def read():
        dataset = TableDataset(table, columns=NUMERIC, batch_size=65536)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        return sum(len(batch["id"]) for batch in loader)
rows = read()  # warm-up (imports, footers, worker start)
base = lambda: table.scan().to_arrow().num_rows
times = []
with PeakRss() as rss:
    for _ in range(repeat):
        t0 = time.perf_counter()
        assert read() == rows
        times.append(time.perf_counter() - t0)
# The ratio comes from pairs run alternately in this process (to_arrow, then the engine), so that the
# machine's load drifts alike for both.
pairs = []
for _ in range(repeat):
    t0 = time.perf_counter()
    base()
    t1 = time.perf_counter()
    read()
    pairs.append((t1 - t0, time.perf_counter() - t1))
arrow_s = statistics.median(p[0] for p in pairs)
paired_s = statistics.median(p[1] for p in pairs)
print(json.dumps({{"engine": engine, "rows": rows, "median_s": statistics.median(times), "times": times,
                  "rss_growth_mib": rss.growth / 2**20, "paired_ratio": paired_s / arrow_s,
                  "paired_arrow_s": arrow_s}}))
"""


def run_engine(engine: str, warehouse: str, repeat: int) -> dict[str, object]:
    code = CHILD.format(here=str(HERE), engine=engine, warehouse=warehouse, repeat=repeat)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"engine": engine, "error": out.stderr[-2000:]}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = os.path.join(tmp, "wh")
        cat = mere.connect(warehouse)
        build(cat, "bench.w1", 1_000_000, 10, 100_000, 4, np.random.default_rng(7))
        results = {}
        for engine in args.engines.split(","):
            results[engine] = run_engine(engine, warehouse, args.repeat)
            print(json.dumps(results[engine]), flush=True)
        print("\nengine        median s   paired ratio to to_arrow   rows/s      peak RSS growth MiB")
        for engine, r in results.items():
            if "error" in r:
                print(f"{engine:12s}  error: {str(r['error']).splitlines()[-1:]}")
                continue
            median = float(r["median_s"])  # type: ignore[arg-type]
            ratio = f"{float(r['paired_ratio']):.2f}x"  # type: ignore[arg-type]
            print(
                f"{engine:12s}  {median:8.3f}   {ratio:>24s}   {int(r['rows']) / median:10.0f}"  # type: ignore[call-overload]
                f"  {float(r['rss_growth_mib']):8.0f}"  # type: ignore[arg-type]
            )


if __name__ == "__main__":
    main()
