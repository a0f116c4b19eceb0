"""Spark SQL's ``pmod(hash(cols...), N)`` equals ``mere.bucket_ids`` for every key type, single and multi-column."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import mere

ROWS = 3000
MODULI = (1, 7, 8, 64, 1000)
ALPHABET = list("abcXYZ019 _-é中😀\x00")


def _random_table(rng: np.random.Generator) -> pa.Table:
    def nulls(a: pa.Array) -> pa.Array:
        return pc.if_else(pa.array(rng.random(ROWS) < 0.05), pa.scalar(None, a.type), a)

    def ints(bits: int) -> pa.Array:
        info = np.iinfo(f"int{bits}")
        values = rng.integers(info.min, info.max, ROWS, endpoint=True, dtype=f"int{bits}")
        values[:4] = [info.min, info.max, 0, -1]
        return nulls(pa.array(values))

    strings = ["".join(rng.choice(ALPHABET, size=rng.integers(0, 24))) for _ in range(ROWS)]
    days = rng.integers(-700_000, 2_900_000, ROWS)
    micros = rng.integers(-(2**60), 2**60, ROWS)
    unscaled = rng.integers(-(10**18) + 1, 10**18 - 1, ROWS)
    return pa.table(
        {
            "rid": pa.array(range(ROWS), pa.int32()),
            "i8": ints(8),
            "i16": ints(16),
            "i32": ints(32),
            "i64": ints(64),
            "s": nulls(pa.array(strings)),
            "bin": nulls(
                pa.array([s.encode() + bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for s in strings])
            ),
            "flag": nulls(pa.array(rng.random(ROWS) < 0.5)),
            "d": nulls(pa.array(days.astype("int32")).cast(pa.date32())),
            "ts": nulls(pa.array(micros, pa.timestamp("us", tz="UTC"))),
            "ntz": nulls(pa.array(micros // 7, pa.timestamp("us"))),
            "dec18": nulls(pa.array([Decimal(int(u)).scaleb(-4) for u in unscaled], pa.decimal128(18, 4))),
            "dec7": nulls(
                pa.array([Decimal(int(u) % 10**7).scaleb(-2) for u in unscaled], pa.decimal128(7, 2))
            ),
        }
    )


KEYS = [
    ["i8"],
    ["i16"],
    ["i32"],
    ["i64"],
    ["s"],
    ["bin"],
    ["flag"],
    ["d"],
    ["ts"],
    ["ntz"],
    ["dec18"],
    ["dec7"],
    ["i64", "s"],
    ["d", "dec18", "flag"],
    ["s", "bin", "ts", "i8"],
    ["i8", "i16", "i32", "i64", "s", "bin", "flag", "d", "ts", "ntz", "dec18", "dec7"],
]


def test_spark_pmod_hash_equals_bucket_ids(spark: SparkSession, tmp_path: Path) -> None:
    table = _random_table(np.random.default_rng(2026))
    path = str(tmp_path / "keys.parquet")
    pq.write_table(table, path)
    df = spark.read.parquet(path)
    types = dict(df.dtypes)
    assert types["i8"] == "tinyint" and types["ntz"] == "timestamp_ntz" and types["dec7"] == "decimal(7,2)"
    exprs = [f"pmod(hash({', '.join(k)}), {n}) AS k{i}_{n}" for i, k in enumerate(KEYS) for n in MODULI]
    got = df.selectExpr("rid", *exprs).orderBy("rid").toPandas()
    assert len(got) == ROWS
    for i, key in enumerate(KEYS):
        for n in MODULI:
            ours = mere.bucket_ids(table.select(key), n)
            assert np.array_equal(np.asarray(ours), got[f"k{i}_{n}"].to_numpy()), (key, n)
