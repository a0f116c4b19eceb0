"""Filter literals end to end: scans and deletes agree with SQL on decimals, signed zero, NaN and long IN lists.

tests/expr/test_expr.py checks the filter language itself (against DuckDB); these check that a table's scans,
pruning and predicate deletes see the same rows, on keys (pruned before the merge) and values (after it).
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest

import mere
from mere import expr as E
from mere.errors import FilterError


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


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint64()])
def test_long_in_lists_on_columns_with_nulls_compare_exact_integers(
    cat: mere.Catalog, kind: pa.DataType
) -> None:
    # 64+ values take a sorted search in NumPy; a NULL once made NumPy see floats, and large integers
    # rounded onto values of the list (a delete then removed rows it did not match).
    big = 2**63 - 1 if kind == pa.int64() else 2**64 - 1
    t = cat.create_table(f"t.nulls_{kind}", pa.schema([("k", pa.int64()), ("v", kind)]), primary_key="k")
    t.upsert(pa.table({"k": [1, 2, 3], "v": pa.array([big, None, 2**53 + 1], kind)}))
    near = [big - 1, 2**53, *range(1000, 1070)]
    where = f"v IN ({', '.join(map(str, near))})"
    assert t.scan(filter=where).count() == 0
    t.delete(where)
    assert sorted(t.to_arrow().column("k").to_pylist()) == [1, 2, 3]
    hit = f"v IN ({', '.join(map(str, [big, *range(1000, 1070)]))})"
    assert t.scan(filter=hit).to_arrow().column("k").to_pylist() == [1]
    loose = cat.create_table(
        f"t.loose_{kind}", pa.schema([("v", kind)])
    )  # no key: the filter prunes and reads
    loose.append(pa.table({"v": pa.array([big, None], kind)}))
    assert loose.scan(filter=where).count() == 0


@pytest.mark.parametrize("bad", ["abc", b"ab", 5, None])
def test_isin_wants_a_collection_of_values(bad: object) -> None:
    with pytest.raises(FilterError, match="IN needs a list"):
        mere.col("s").isin(bad)  # type: ignore[arg-type]
    with pytest.raises(FilterError, match="IN needs a list"):
        mere.col("s").not_in(bad)  # type: ignore[arg-type]
    assert mere.col("s").isin(iter(["a", "b"])) == mere.expr.In("s", ("a", "b"))


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("zone", ["America/New_York", "+01:00", "UTC"])
def test_zoned_timestamps_of_every_unit_filter_scans_and_writes(
    cat: mere.Catalog, unit: str, zone: str
) -> None:
    # Parquet hands zoned instants back labelled UTC: filters (and SQL functions of the zone) must still
    # see the column's own zone, whatever its unit.
    kind = pa.timestamp(unit, zone)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("ts", kind), ("v", pa.int64())])
    keyed = cat.create_table("t.zoned", schema, primary_key=["k", "ts"], buckets=2)
    utc = dt.UTC
    stamps = pa.array([dt.datetime(2020, 1, 1, 3, tzinfo=utc), dt.datetime(2021, 1, 1, 12, tzinfo=utc)], kind)
    keyed.upsert(pa.table({"k": [1, 2], "ts": stamps, "v": [1, 2]}))
    later = "ts > TIMESTAMP '2020-06-01 00:00:00+00:00'"
    assert keyed.scan(filter=later).to_arrow().column("k").to_pylist() == [2]
    assert keyed.scan(filter=f"{later} AND v > 0").count() == 1  # after the merge too
    assert keyed.scan(filter="ts IN (TIMESTAMP '2020-01-01 04:00:00+01:00')").count() == 1
    hour = {"America/New_York": 22, "+01:00": 4, "UTC": 3}[zone]
    assert keyed.scan(filter=f"hour(ts) = {hour} AND v = 1").count() == 1  # the column's zone
    keyed.update(set={"v": "hour(ts)"}, where=f"{later} OR v = 1")
    hours = {"America/New_York": [22, 7], "+01:00": [4, 13], "UTC": [3, 12]}[zone]
    assert keyed.to_arrow().sort_by("k").column("v").to_pylist() == hours
    keyed.delete(later)
    assert keyed.to_arrow().column("k").to_pylist() == [1]
    loose = cat.create_table("t.zoned_loose", schema)
    loose.append(pa.table({"k": [1, 2], "ts": stamps, "v": [1, 2]}))
    assert loose.scan(filter=later).to_arrow().column("k").to_pylist() == [2]
    loose.delete(later)
    assert loose.to_arrow().column("k").to_pylist() == [1]


def test_nanosecond_literals_and_merge_keys_keep_their_nanoseconds(local_cat: mere.Catalog) -> None:
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    schema = pa.schema([pa.field("k", pa.timestamp("ns"), nullable=False), ("v", pa.int64())])
    t = local_cat.create_table("t.ns", schema, primary_key="k", buckets=2)
    base = 1_000_000_000_000_000_000
    keys = pa.array([base, base + 1, base + 2, base + 3], pa.int64()).cast(pa.timestamp("ns"))
    t.upsert(pa.table({"k": keys, "v": [0, 1, 2, 3]}))
    one = pd.Timestamp(base + 1, unit="ns")
    assert t.scan(filter=mere.col("k") == one).to_arrow().column("v").to_pylist() == [1]
    assert t.scan(filter=mere.col("k") == np.datetime64(base + 1, "ns")).count() == 1
    assert sorted(t.scan(filter=mere.col("k").isin([one, keys[3]])).to_arrow().column("v").to_pylist()) == [
        1,
        3,
    ]
    assert t.scan(filter=mere.col("k") > one).count() == 2
    # finer than a microseconds column: equal to no row, between two of them
    coarse = local_cat.create_table(
        "t.us", pa.schema([pa.field("k", pa.timestamp("us"), nullable=False)]), primary_key="k"
    )
    coarse.upsert(pa.table({"k": pa.array([base // 1000], pa.int64()).cast(pa.timestamp("us"))}))
    assert coarse.scan(filter=mere.col("k") == one).count() == 0
    assert coarse.scan(filter=mere.col("k") < one).count() == 1
    # MERGE finds target keys that differ only in their nanoseconds (its source's key range prunes files)
    found = t.merge(pa.table({"k": keys.slice(1, 2)})).when_matched_delete().execute()
    assert found.deleted == 2
    assert sorted(t.to_arrow().column("v").to_pylist()) == [0, 3]
    kept = t.merge(pa.table({"k": keys.slice(3, 1), "v": [99]})).when_not_matched_insert_all().execute()
    assert (kept.inserted, kept.unchanged) == (0, 1)
    assert sorted(t.to_arrow().column("v").to_pylist()) == [0, 3]
    # In text, TIMESTAMP holds microseconds (later digits dropped, as DuckDB does) and TIMESTAMP_NS
    # nanoseconds; a filter with nanoseconds renders as the latter and reads back as itself.
    three = mere.col("k") == pd.Timestamp(base + 3, unit="ns")
    assert "TIMESTAMP_NS '" in E.render(three) and E.parse(E.render(three)) == three
    assert t.scan(filter=E.render(three)).to_arrow().column("v").to_pylist() == [3]
    text = "2001-09-09 01:46:40.000000003"
    assert t.scan(filter=f"k = TIMESTAMP '{text}'").to_arrow().column("v").to_pylist() == [0]
    assert t.scan(filter=f"k = TIMESTAMP_NS '{text}'").to_arrow().column("v").to_pylist() == [3]
    duck = pytest.importorskip("duckdb")
    assert duck.sql(f"SELECT TIMESTAMP '{text}' = TIMESTAMP '2001-09-09 01:46:40'").fetchall() == [(True,)]
    later = local_cat.create_table(
        "t.ns_values", pa.schema([("k", pa.int64()), ("at", pa.timestamp("ns"))]), primary_key="k"
    )
    later.upsert(pa.table({"k": [1], "at": keys.slice(0, 1)}))
    mere.sql(f"UPDATE t.ns_values SET at = TIMESTAMP_NS '{text}' WHERE k = 1", catalog=local_cat)
    assert later.to_arrow().column("at").cast(pa.int64()).to_pylist() == [base + 3]


def test_instants_of_a_repeated_wall_clock_hour_stay_apart(local_cat: mere.Catalog) -> None:
    # 01:30 happens twice in New York on 2024-11-03 (EDT, then EST): literals must compare as instants.
    kind = pa.timestamp("us", "America/New_York")
    schema = pa.schema([pa.field("k", kind, nullable=False), ("v", pa.int64())])
    t = local_cat.create_table("t.fold", schema, primary_key="k", buckets=1)
    first, second = (dt.datetime(2024, 11, 3, h, 30, tzinfo=dt.UTC) for h in (5, 6))
    t.upsert(pa.table({"k": pa.array([first, second], kind), "v": [1, 2]}))
    assert sorted(t.scan(filter=mere.col("k").isin([first, second])).to_arrow().column("v").to_pylist()) == [
        1,
        2,
    ]
    assert t.scan(filter="k IN ('2024-11-03 05:45:00+00:00', '2024-11-03 06:15:00+00:00')").count() == 0
    both = "k >= '2024-11-03 05:00:00+00:00' AND k <= '2024-11-03 06:45:00+00:00'"
    assert t.scan(filter=both).count() == 2
    t.delete(mere.col("k") == second)
    assert t.to_arrow().column("v").to_pylist() == [1]


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_zoned_key_lookups_read_pages_in_the_column_zone(local_cat: mere.Catalog, unit: str) -> None:
    # A lookup of a few keys reads single pages of a big file: its rows must carry the column's zone, as
    # whole row groups do (hour() sees it; pages and whole row groups concatenate).
    kind = pa.timestamp(unit, "America/New_York")
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("ts", kind), ("v", pa.int64())])
    t = local_cat.create_table("t.paged", schema, primary_key="k", buckets=1)
    n = 50_000
    at = pa.array([dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)] * n, kind)  # 05:00 in New York
    t.upsert(pa.table({"k": list(range(n)), "ts": at, "v": list(range(n))}))
    assert t.scan(filter="k = 123 AND hour(ts) = 5").to_arrow().column("v").to_pylist() == [123]
    t.upsert(pa.table({"k": [5], "ts": at.slice(0, 1), "v": [-5]}))  # a second, small file
    assert sorted(t.scan(filter="k IN (5, 123)").to_arrow().column("v").to_pylist()) == [-5, 123]
    zoned_key = local_cat.create_table(
        "t.zoned_key", pa.schema([pa.field("k", kind, nullable=False), ("v", pa.int64())]), primary_key="k"
    )
    stamps = pa.array(
        [dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(n)], kind
    )
    zoned_key.upsert(pa.table({"k": stamps, "v": list(range(n))}))
    zoned_key.upsert(pa.table({"k": stamps.slice(5, 1), "v": [-5]}))
    assert sorted(
        zoned_key.scan(filter=mere.col("k").isin([stamps[5], stamps[123]])).to_arrow()["v"].to_pylist()
    ) == [
        -5,
        123,
    ]
    merged = zoned_key.merge(pa.table({"k": stamps.take([5, 100]), "v": [1, 2]})).when_matched_update_all()
    assert merged.execute().updated == 2


def test_numpy_and_pandas_missing_and_dated_literals(local_cat: mere.Catalog) -> None:
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("d", pa.date32()), ("ts", pa.timestamp("s"))]
    )
    t = local_cat.create_table("t.np", schema, primary_key="k")
    t.upsert(pa.table({"k": [1, 2], "d": [dt.date(2020, 1, 1), None], "ts": [dt.datetime(2020, 1, 1), None]}))
    assert t.scan(filter=mere.col("d") == np.datetime64("2020-01-01")).count() == 1
    assert t.scan(filter=mere.col("ts") < np.datetime64("2020-01-01T00:00:01")).count() == 1
    assert t.scan(filter=mere.col("d").isin([np.datetime64("NaT"), np.datetime64("2020-01-01")])).count() == 1
    for missing in (np.datetime64("NaT"), pd.NaT):
        for column in ("d", "ts"):
            with pytest.raises(FilterError, match="NULL"):
                t.scan(filter=mere.col(column) == missing).to_arrow()


def test_timestamp_literal_edges(local_cat: mere.Catalog) -> None:
    pd = pytest.importorskip("pandas")
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("d", pa.date32()), ("lower", pa.timestamp("ms", "utc"))]
    )
    t = local_cat.create_table("t.edges", schema, primary_key="k")
    day = dt.date(2021, 11, 7)
    at = dt.datetime(2021, 11, 7, 6, 30, tzinfo=dt.UTC)
    t.upsert(
        pa.table(
            {
                "k": [1, 2],
                "d": [day, dt.date(2021, 11, 8)],
                "lower": pa.array([at, None], schema.field(2).type),
            }
        )
    )
    # a nanosecond past midnight is not the day itself (pandas' time() drops nanoseconds)
    past_midnight = pd.Timestamp("2021-11-07 00:00:00.000000001")
    assert t.scan(filter=mere.col("d") == past_midnight).count() == 0
    assert t.scan(filter=mere.col("d") > past_midnight).to_arrow().column("k").to_pylist() == [2]
    # a zone spelt "utc" is another zone name to Arrow: literals take the column's own spelling
    assert t.scan(filter=mere.col("lower") == at).to_arrow().column("k").to_pylist() == [1]
    assert t.scan(filter="lower >= TIMESTAMP '2021-11-07 01:00:00-05:00'").count() == 1
    # literals beyond what Python or pandas can hold: rows or a typed error, never a raw one
    assert t.scan(filter=mere.col("lower") < pd.Timestamp.max.tz_localize("UTC")).count() == 1
    with pytest.raises(FilterError):
        t.scan(filter=mere.col("d") == pa.scalar(3_000_000, pa.int32()).cast(pa.date32())).count()


DECIMAL_ARITHMETIC = [
    "dec38 * 10 > 100",  # Arrow's decimal128 result would need 41 digits
    "dec38 * 10 * 10 > 1000",
    "dec38 + d2 > 12",
    "dec38 - d2 < 9",
    "dec38 * i > 0",  # an int64 column: DECIMAL(19, 0) to Arrow
    "dec38 * u < 1e40",
    "d2 * i > 10",  # fits decimal128: unchanged
    "dec38 * 10 = 105",
]


@pytest.mark.parametrize("where", DECIMAL_ARITHMETIC)
def test_decimal_arithmetic_beyond_38_digits_matches_duckdb(cat: mere.Catalog, where: str) -> None:
    """Arithmetic whose decimal128 result needs more than 38 digits is computed exactly as decimal256 (DuckDB
    answers the same where its own DECIMAL(38) holds the values), not refused."""
    import duckdb

    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("dec38", pa.decimal128(38, 10)),
            ("d2", pa.decimal128(10, 2)),
            ("i", pa.int64()),
            ("u", pa.uint64()),
        ]
    )
    rows = pa.table(
        {
            "id": [1, 2, 3, 4, 5],
            "dec38": [Decimal("9.5"), Decimal("10.5"), None, Decimal("12345.5"), Decimal("-7.25")],
            "d2": [Decimal("1.00"), Decimal("2.50"), Decimal("3.00"), None, Decimal("-0.01")],
            "i": [5, 2**62, None, -3, 0],
            "u": [1, 2**64 - 1, 3, None, 0],
        },
        schema=schema,
    )
    t = cat.create_table("t.decarith", schema, primary_key="id", buckets=2)
    t.upsert(rows)
    con = duckdb.connect()
    con.register("t", rows)
    expected = sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())
    assert sorted(t.scan(filter=where).to_arrow().column("id").to_pylist()) == expected
    t.delete(where)
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == sorted(set(range(1, 6)) - set(expected))
