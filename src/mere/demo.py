"""The main job on embedded defaults: ingest CDC batches of orders, read the merged table, check it.

Run with ``make demo`` (or ``python -m mere.demo [WAREHOUSE]``). Uses a local warehouse directory
with its SQLite catalog inside; no server needed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import mere

SCHEMA = pa.schema([
    ("order_id", pa.int64()),
    ("day", pa.string()),
    ("customer", pa.string()),
    ("qty", pa.int64()),
    ("amount", pa.float64()),
    ("status", pa.string()),
])


def cdc_batch(rng: np.random.Generator, start_id: int, n_new: int, live: np.ndarray, day: str) -> pa.Table:
    """New orders plus updates and deletes of existing ones, as one CDC batch."""
    n_upd = min(len(live), n_new // 2)
    n_del = min(len(live) - n_upd, n_new // 10)
    picked = rng.choice(live, size=n_upd + n_del, replace=False) if len(live) else np.array([], dtype=np.int64)
    ids = np.concatenate([np.arange(start_id, start_id + n_new), picked]).astype(np.int64)
    ops = ["I"] * n_new + ["U"] * n_upd + ["D"] * n_del
    n = len(ids)
    return pa.table({
        "order_id": ids,
        "day": pa.array([day] * n),
        "customer": pa.array(np.char.add("c", (ids % 997).astype(str))),
        "qty": rng.integers(1, 10, n),
        "amount": np.round(rng.random(n) * 100, 2),
        "status": pa.array(np.where(np.array(ops) == "U", "shipped", "new")),
        "op": pa.array(ops),
    })


def apply_model(model: dict[int, dict[str, Any]], batch: pa.Table) -> None:
    for row in batch.to_pylist():  # the reference model is allowed to be slow and obvious
        op = row.pop("op")
        if op == "D":
            model.pop(row["order_id"], None)
        else:
            model[row["order_id"]] = row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("warehouse", nargs="?", default="demo-warehouse")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args(argv)
    shutil.rmtree(args.warehouse, ignore_errors=True)
    rng = np.random.default_rng(7)
    cat = mere.connect(args.warehouse)
    # Partitioned by day, keyed by order id; the key is unique within a day's partition.
    orders = cat.create_table("sales.orders", SCHEMA, primary_key=["order_id"], partition_by=["day"], buckets=4,
                              cdc_column="op")
    model: dict[int, dict[str, Any]] = {}
    next_id = 0
    started = time.perf_counter()
    for i in range(args.batches):
        day = "2026-11-21"
        live = np.fromiter(model.keys(), dtype=np.int64, count=len(model))
        batch = cdc_batch(rng, next_id, args.rows, live, day)
        next_id += args.rows
        commit = orders.upsert(batch)
        apply_model(model, batch)
        print(f"batch {i + 1}: {batch.num_rows:>7} changes -> version {commit.version}")
    write_s = time.perf_counter() - started

    started = time.perf_counter()
    merged = orders.scan().to_arrow()
    read_s = time.perf_counter() - started
    expected = pa.Table.from_pylist(sorted(model.values(), key=lambda r: r["order_id"]), schema=orders.schema)
    got = merged.sort_by("order_id")
    ok = got.equals(expected)
    big = orders.scan(columns=["order_id", "amount"], filter="amount > 90 and day = '2026-11-21'").to_arrow()
    want_big = sum(1 for r in model.values() if r["amount"] > 90)
    one = orders.scan(filter=f"order_id = {int(got['order_id'][0].as_py())}")
    print()
    print(f"rows after merge : {merged.num_rows} (model: {len(model)})")
    print(f"amount > 90      : {big.num_rows} rows (model: {want_big})")
    print(f"shipped          : {pc.sum(pc.equal(merged['status'], 'shipped')).as_py()} orders")
    print(f"history          : {[c.operation for c in orders.history()]}")
    print(f"write {write_s:.2f} s, merged read {read_s:.3f} s")
    print("key lookup plan  :")
    print(one.explain())
    ok = ok and big.num_rows == want_big
    print("\nRESULT:", "OK, merged table equals the expected result" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
