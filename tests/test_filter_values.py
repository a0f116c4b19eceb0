"""Filter literals end to end: scans and deletes agree with SQL on decimals, signed zero, NaN and long IN lists.

tests/test_expr.py checks the filter language itself (against DuckDB); these check that a table's scans,
pruning and predicate deletes see the same rows, on keys (pruned before the merge) and values (after it).
"""

from __future__ import annotations

import math
from decimal import Decimal

import pyarrow as pa
import pytest

import mere


def test_decimal_literals_keep_their_digits_in_scans_and_deletes(cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.decimal128(18, 9)), ("d", pa.decimal128(38, 20)), ("v", pa.int64())])
    t = cat.create_table("t.dec", schema, primary_key="k", buckets=4)
    keys = [Decimal("123456789.123456789"), Decimal("123456789.123456788"), Decimal("-0.000000001")]
    wide = [Decimal("1.00000000000000000001"), Decimal("1"), Decimal("-3.5")]
    t.upsert(
        pa.table(
            {
                "k": pa.array(keys, schema.field("k").type),
                "d": pa.array(wide, schema.field("d").type),
                "v": [1, 2, 3],
            }
        )
    )
    assert t.scan(filter="k = 123456789.123456789").count() == 1
    assert t.scan(filter="k IN (123456789.123456789, -0.000000001)").count() == 2
    assert t.scan(filter="k >= 123456789.123456789").count() == 1
    assert t.scan(filter="k = 123456789.1234567885").count() == 0  # finer than the column: equal to nothing
    assert t.scan(filter="k < 123456789.1234567885").count() == 2
    assert t.scan(filter="d = 1.00000000000000000001").to_arrow().column("v").to_pylist() == [1]
    assert t.scan(filter="d > 1").to_arrow().column("v").to_pylist() == [1]
    t.delete("k IN (123456789.123456789)")
    assert sorted(t.scan().to_arrow().column("v").to_pylist()) == [2, 3]
    t.delete("d < -3.49999999999999999999")
    assert t.scan().to_arrow().column("v").to_pylist() == [2]


def test_integer_columns_against_literals_they_cannot_hold(cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("small", pa.int8()), ("u", pa.uint64())])
    t = cat.create_table("t.ints", schema, primary_key="k", buckets=2)
    t.upsert(
        pa.table(
            {
                "k": [1, 2, 3],
                "small": pa.array([-128, 0, None], pa.int8()),
                "u": pa.array([2**64 - 1, 0, 5], pa.uint64()),
            }
        )
    )
    assert t.scan(filter="k = 1.5").count() == 0
    assert t.scan(filter="k < 1.5").count() == 1
    assert t.scan(filter="NOT k = 1.5").count() == 3
    assert t.scan(filter="small < 1000").count() == 2  # NULL stays NULL
    assert t.scan(filter="small > -1000 AND small <= -128").count() == 1
    assert t.scan(filter="u = 18446744073709551615").count() == 1
    assert t.scan(filter="u > -1").count() == 3


def test_signed_zero_and_nan_follow_sql(cat: mere.Catalog) -> None:
    t = cat.create_table("t.floats", pa.schema([("k", pa.int64()), ("f", pa.float64())]), primary_key="k")
    t.upsert(pa.table({"k": [1, 2, 3, 4, 5], "f": [0.0, -0.0, math.nan, 1.5, None]}))

    def keys(where: str) -> list[int]:
        return sorted(t.scan(filter=where).to_arrow().column("k").to_pylist())

    assert keys("f = 0.0") == [1, 2]
    assert keys("f IN (0.0)") == [1, 2]
    assert keys("f IN (-0.0)") == [1, 2]
    assert keys("f NOT IN (0.0)") == [3, 4]
    assert keys("f = 'NaN'") == [3]
    assert keys("f > 1") == [3, 4]  # NaN is larger than every number
    assert keys("f < 'NaN'") == [1, 2, 4]
    assert keys("f IN ('NaN', 1.5)") == [3, 4]
    t.delete("f IN (0.0)")
    assert keys("TRUE") == [3, 4, 5]
    t.delete("f = 'NaN'")
    assert keys("TRUE") == [4, 5]


@pytest.mark.parametrize("n", [300, 20_000])
def test_long_key_in_lists_read_exactly_their_keys(local_cat: mere.Catalog, n: int) -> None:
    t = local_cat.create_table(
        "t.keys", pa.schema([("k", pa.int64()), ("v", pa.string())]), primary_key="k", buckets=4
    )
    t.upsert(pa.table({"k": list(range(50_000)), "v": [str(i) for i in range(50_000)]}))
    t.upsert(pa.table({"k": list(range(0, 50_000, 7)), "v": ["new"] * len(range(0, 50_000, 7))}))
    wanted = [*list(range(3, 50_000, 50_000 // n))[:n], 10**9]  # one key that does not exist
    text = f"k IN ({', '.join(map(str, wanted))})"
    got = t.scan(filter=text).to_arrow()
    assert sorted(got.column("k").to_pylist()) == wanted[:-1]
    assert all(
        v == ("new" if k % 7 == 0 else str(k))
        for k, v in zip(got.column("k").to_pylist(), got.column("v").to_pylist())
    )
    assert "... and" in str(t.scan(filter=text).explain())
    t.delete(text)
    assert t.scan().count() == 50_000 - n
