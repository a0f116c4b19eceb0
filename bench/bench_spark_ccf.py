"""LakeSoul's published Spark upsert workload (their CCF benchmark) at this machine's size, one run.

10M rows written by Spark into a primary-key table with 4 buckets, then 10 upserts of 2M rows each (1M
existing keys, 1M new ones), then ``count()`` and a full read into Spark's ``noop`` sink, through the
mere data source and through ``read_table`` after ``compact(spark, ...)``. LakeSoul reported 57 s for
write + upserts and 9.39 s for the read on 4 cores. Rows are made by Spark SQL from their ids (strings
of high and low cardinality), so every run writes the same data.

Usage: python bench/bench_spark_ccf.py [--rows 10000000] [--upserts 10] [--upsert-rows 2000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mere
from mere.integrations.spark import compact, local_session, read_table


def rows_sql(first: int, count: int, version: int) -> str:
    """``count`` rows with ids from ``first``: a key, 4 strings (1 high-cardinality) and 3 numbers."""
    return f"""
        SELECT id,
               concat('name-', sha2(cast(id AS string), 256)) AS name,
               concat('+1-', lpad(cast(pmod(hash(id, 1), 10000000) AS string), 7, '0')) AS phone,
               concat('city-', cast(pmod(hash(id, 2), 500) AS string)) AS address,
               element_at(array('engineer', 'teacher', 'nurse', 'artist', 'clerk'),
                          cast(pmod(hash(id, 3), 5) + 1 AS int)) AS job,
               cast(pmod(hash(id, {version}), 100000) AS bigint) AS amount,
               cast(pmod(hash(id, {version}, 4), 1000) AS double) / 10 AS score,
               {version} AS version
        FROM range({first}, {first + count})
    """


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--upserts", type=int, default=10)
    ap.add_argument("--upsert-rows", type=int, default=2_000_000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mere-bench-ccf-")
    wh = os.path.join(tmp, "wh")
    spark = local_session("mere-bench-ccf", driver_memory="4g")
    res: dict[str, Any] = {"spark": spark.version, **vars(args)}
    try:
        opts = {"warehouse": wh, "primary_key": "id", "buckets": "4"}

        def write(sql: str) -> None:
            spark.sql(sql).write.format("mere").mode("append").options(**opts).save("ccf.t")

        res["write_s"] = timed(lambda: write(rows_sql(0, args.rows, 0)))
        print(json.dumps(res), flush=True)
        upserts = []
        next_new = args.rows
        half = args.upsert_rows // 2
        for u in range(1, args.upserts + 1):
            # half existing keys (a stride through the base), half new ones
            stride = max(1, args.rows // half)
            existing = f"SELECT * FROM ({rows_sql(0, args.rows, u)}) WHERE pmod(id, {stride}) = {u % stride}"
            new = rows_sql(next_new, half, u)
            next_new += half
            sql = f"{existing} UNION ALL {new}"
            upserts.append(timed(lambda sql=sql: write(sql)))
            print(f"upsert {u}: {upserts[-1]:.1f} s", flush=True)
        res["upsert_s"] = upserts
        res["write_and_upserts_s"] = res["write_s"] + sum(upserts)
        t = mere.connect(wh).table("ccf.t")
        res["files"] = t.files().num_rows
        df = spark.read.format("mere").option("warehouse", wh).load("ccf.t")
        count = 0

        def do_count() -> None:
            nonlocal count
            count = df.count()

        res["count_s"] = timed(do_count)
        res["rows"] = count
        res["read_noop_s"] = timed(lambda: df.write.format("noop").mode("overwrite").save())
        res["compact_s"] = timed(lambda: compact(spark, "ccf.t", warehouse=wh))
        native = read_table(spark, "ccf.t", warehouse=wh)
        res["count_after_compact_s"] = timed(lambda: native.count())
        res["read_noop_after_compact_s"] = timed(lambda: native.write.format("noop").mode("overwrite").save())
        assert native.count() == count == args.rows + args.upserts * half
        print(json.dumps(res, indent=1))
        os.makedirs("bench/out", exist_ok=True)
        with open("bench/out/bench_spark_ccf.json", "w") as f:
            json.dump(res, f, indent=1)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
