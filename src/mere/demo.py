"""The main job: a PySpark pipeline on embedded defaults (local Spark, SQLite catalog, local warehouse).

It creates a primary-key table of orders, ingests several CDC batches (new orders, updates, deletes)
generated in Spark through the ``mere`` data source, reads the merged table back with Spark SQL and with
pandas, prints a short summary and checks it against a plain-Python model of the same changes.

Run with ``make demo`` (or ``python -m mere.demo [WAREHOUSE]``, default ``demo-warehouse``). Needs Java 17+
for Spark. The demo writes a marker file (``.mere-demo``) into a warehouse folder it makes and only ever
replaces its own table in a folder that holds the marker: it refuses any other folder that is not empty.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any

import pyarrow as pa

import mere
from mere.errors import InvalidInput, MereError

SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("day", pa.string()),
        ("customer", pa.string()),
        ("qty", pa.int64()),
        ("amount", pa.float64()),
        ("status", pa.string()),
    ]
)
COLUMNS = SCHEMA.names
DEMO_TABLE = "sales.orders"
MARKER = ".mere-demo"  # the file that says the demo made this folder (and may replace its table in it)
MARKER_TEXT = (
    "This folder is a warehouse made by `python -m mere.demo`. A new run of the demo replaces its table "
    f"{DEMO_TABLE} here and nothing else; delete this file to keep the demo out of the folder.\n"
)
JAVA_HINT = (
    "Spark needs a Java 17+ runtime. On Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless "
    "(or install any JDK 17+ and set JAVA_HOME)."
)


def java_missing() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is None and not (home and os.path.exists(os.path.join(home, "bin", "java")))


def cdc_batch_sql(batch: int, rows: int) -> str:
    """One CDC batch as Spark SQL: ``rows`` new orders, then updates (~25%) and deletes (~5%) of older ones.

    Every value derives from (order id, batch) through Spark's ``hash``, so the batch is the same whenever
    Spark computes it. An order's day is fixed by its id: updates and deletes hit the order's partition.
    """
    first = batch * rows
    pick = f"pmod(hash(id, {batch}), 100)"
    return f"""
        SELECT id AS order_id,
               concat('2026-11-', lpad(cast(10 + floor(id / {rows}) AS string), 2, '0')) AS day,
               concat('c', cast(pmod(hash(id), 997) AS string)) AS customer,
               cast(pmod(hash(id, {batch}, 1), 9) + 1 AS bigint) AS qty,
               cast(pmod(hash(id, {batch}, 2), 10000) AS double) / 100 AS amount,
               CASE WHEN id >= {first} THEN 'new' ELSE 'shipped' END AS status,
               CASE WHEN id >= {first} THEN 'I' WHEN {pick} < 25 THEN 'U' ELSE 'D' END AS op
        FROM range(0, {first + rows})
        WHERE id >= {first} OR {pick} < 30
    """


def apply_model(model: dict[int, tuple[Any, ...]], batch: pa.Table) -> None:
    """The reference: the obvious row-at-a-time dictionary update (allowed to be slow)."""
    cols = [batch.column(c).to_pylist() for c in [*COLUMNS, "op"]]
    for row in zip(*cols):
        if row[-1] == "D":
            model.pop(row[0], None)
        else:
            model[row[0]] = row[:-1]


def prepare_warehouse(warehouse: str) -> None:
    """Make ``warehouse`` ready for a demo run without deleting anything the demo did not create.

    A missing or empty folder becomes the demo's (it gets the marker file). A folder with the marker loses
    the demo's table from an earlier run (dropped through the catalog, its files with it) and keeps
    everything else. Any other folder is refused with :class:`~mere.errors.InvalidInput`, unchanged.
    """
    marker = os.path.join(warehouse, MARKER)
    if os.path.exists(warehouse) and not os.path.isdir(warehouse):
        raise InvalidInput(f"{warehouse} is a file; give the demo a new or empty folder for its warehouse")
    if os.path.isdir(warehouse) and not os.path.isfile(marker) and os.listdir(warehouse):
        # Also a warehouse of a demo older than the marker: only its owner may delete it.
        raise InvalidInput(
            f"{warehouse} is not empty and is not a warehouse the demo made (it has no {MARKER} file), "
            "so the demo leaves it alone: give it a new or empty folder, such as "
            "`python -m mere.demo demo-warehouse-2`, or delete this one yourself"
        )
    if not os.path.isfile(marker):
        os.makedirs(warehouse, exist_ok=True)
        with open(marker, "x", encoding="utf-8") as f:
            f.write(MARKER_TEXT)
        return
    cat = mere.connect(warehouse)
    if cat.initialized and cat.exists(DEMO_TABLE):
        cat.drop_table(DEMO_TABLE, purge=True)


def start_spark() -> Any:
    from mere.integrations.spark import local_session

    return local_session("mere-demo", shuffle_partitions=4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("warehouse", nargs="?", default="demo-warehouse")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=50_000, help="new orders per batch")
    args = parser.parse_args(argv)
    warehouse = os.path.abspath(args.warehouse)
    try:
        prepare_warehouse(warehouse)
    except (MereError, OSError) as e:
        print(f"mere.demo: {e}", file=sys.stderr)
        return 2
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("PySpark is not installed: pip install 'mere[spark]' (make demo does it)", file=sys.stderr)
        return 2
    if java_missing():
        print(JAVA_HINT, file=sys.stderr)
        return 2

    cat = mere.connect(warehouse)
    orders = cat.create_table(
        DEMO_TABLE, SCHEMA, primary_key=["order_id"], partition_by=["day"], buckets=4, cdc_column="op"
    )
    started = time.perf_counter()
    spark = start_spark()
    try:
        print(
            f"spark {spark.version} local[2] started in {time.perf_counter() - started:.1f} s; "
            f"warehouse {warehouse}"
        )
        model: dict[int, tuple[Any, ...]] = {}
        started = time.perf_counter()
        for b in range(args.batches):
            batch = spark.sql(cdc_batch_sql(b, args.rows))
            (batch.write.format("mere").mode("append").option("warehouse", warehouse).save("sales.orders"))
            changes = batch.toArrow()  # the same rows again, for the reference model
            apply_model(model, changes)
            ops = changes.column("op").value_counts().to_pylist()
            counts = {d["values"]: d["counts"] for d in ops}
            print(
                f"batch {b + 1}: {changes.num_rows:>7} changes (I {counts.get('I', 0)}, U {counts.get('U', 0)}, "
                f"D {counts.get('D', 0)}) -> version {orders.version}"
            )
        write_s = time.perf_counter() - started

        started = time.perf_counter()
        spark.sql(
            f"CREATE OR REPLACE TEMPORARY VIEW orders USING mere "
            f"OPTIONS (table 'sales.orders', warehouse '{warehouse}')"
        )
        per_day = spark.sql("""
            SELECT day, count(*) AS orders, sum(qty) AS qty, round(sum(amount), 2) AS amount,
                   sum(CASE WHEN status = 'shipped' THEN 1 ELSE 0 END) AS shipped
            FROM orders GROUP BY day ORDER BY day""").collect()
        merged = spark.sql("SELECT * FROM orders").toPandas()  # Spark SQL -> pandas
        read_s = time.perf_counter() - started
        native = orders.scan().to_pandas()  # mere's own reader, no Spark

        expected = pa.Table.from_pylist(
            [dict(zip(COLUMNS, r)) for r in sorted(model.values())], schema=orders.schema
        ).to_pandas()
        got = merged.sort_values("order_id").reset_index(drop=True)[COLUMNS]
        ok = got.equals(expected) and native.sort_values("order_id").reset_index(drop=True)[COLUMNS].equals(
            expected
        )
        want_days: dict[str, list[Any]] = {}
        for r in model.values():
            d = want_days.setdefault(r[1], [0, 0, 0.0, 0])
            d[0] += 1
            d[1] += r[3]
            d[2] += r[4]
            d[3] += r[5] == "shipped"
        ok = ok and [(r.day, r.orders, r.qty, r.shipped) for r in per_day] == [
            (day, v[0], v[1], v[3]) for day, v in sorted(want_days.items())
        ]
        ok = ok and all(abs(r.amount - want_days[r.day][2]) < 0.01 for r in per_day)

        print()
        print("day         orders      qty      amount  shipped")
        for r in per_day:
            print(f"{r.day}  {r.orders:>6} {r.qty:>8} {r.amount:>11.2f} {r.shipped:>8}")
        print(
            f"rows after merge : {len(merged)} (model: {len(model)}); Spark read {read_s:.1f} s "
            f"in {len(orders.scan().plan())} splits"
        )
        print(f"history          : {[c.operation for c in orders.history()]}")
        print(f"ingest           : {args.batches} CDC batches from Spark in {write_s:.1f} s")
        print(
            "\nRESULT:",
            "OK, merged table equals the expected result (Spark SQL and pandas)" if ok else "MISMATCH",
        )
        return 0 if ok else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
