"""Trial 58b: legal Arrow dates and timestamps that have no Python value (before year 1, after year 9999,
nanoseconds at int64's limits, -2**63 being pandas' NaT) as primary key, partition column, value column
and ``sequence_by`` column, through every public operation, against a plain dict model over the raw
integers (results are compared as Arrow arrays / raw integers, never as Python datetimes)."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError

I64 = 2**63
# kind: (type, raw values from lowest to highest: type minimum, before year 1 / near minimum, 0,
# after year 9999 / near maximum, type maximum)
KINDS: dict[str, tuple[pa.DataType, list[int]]] = {
    "date32": (pa.date32(), [-(2**31), -800_000, 0, 3_000_000, 2**31 - 1]),
    "timestamp_us": (pa.timestamp("us"), [-I64, -(2**62), 0, 2**62, I64 - 1]),
    "timestamp_ms_utc": (pa.timestamp("ms", "UTC"), [-I64, -(2**50), 0, 2**50, I64 - 1]),
    "timestamp_ns": (pa.timestamp("ns"), [-I64, -I64 + 1, 0, I64 - 2, I64 - 1]),
}
# Keys are bucketed by their value in microseconds (as Spark hashes them): a millisecond key must fit
# int64 microseconds (beyond, the write is refused: test_ms_key_beyond_int64_micros_is_refused).
MS_KEY_LIMIT = (I64 - 1) // 1000
KEY_POOLS = {
    **{k: v[1] for k, v in KINDS.items()},
    "timestamp_ms_utc": [-MS_KEY_LIMIT, -(2**50), 0, 2**50, MS_KEY_LIMIT],
}


def _arr(kind: str, raw: list[int]) -> pa.Array:
    arrow_type = KINDS[kind][0]
    width = pa.int32() if arrow_type == pa.date32() else pa.int64()
    return pa.array(raw, width).view(arrow_type)


def _raw(column: Any) -> list[int]:
    """The raw integers of a date or timestamp column (no Python datetimes involved)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = pa.int32() if column.type == pa.date32() else pa.int64()
    return column.view(width).to_pylist()


def _table(tmp: Path, schema: pa.Schema, **options: Any) -> mere.Table:
    options.setdefault("properties", {"compaction.auto": "off"})
    return mere.connect(str(tmp / uuid.uuid4().hex)).create_table("db.t", schema, **options)


def _rows(t: mere.Table, key: str = "k", **scan: Any) -> dict[int, int]:
    got = t.scan(**scan).to_arrow()
    return dict(zip(_raw(got.column(key)), got.column("v").to_pylist()))


# ---------------------------------------------------------------- key column: random ops vs dict model


OPS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete_keys", "delete_filter", "update", "compact"]),
        st.lists(st.integers(0, 4), min_size=1, max_size=4),
        st.integers(0, 99),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("layout", ["plain", "partition_scope", "table_scope"])
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS)
def test_extreme_keys_random_ops_match_dict_model(tmp_path: Path, kind: str, layout: str, ops: list) -> None:
    arrow_type, pool = KINDS[kind][0], KEY_POOLS[kind]
    fields = [pa.field("k", arrow_type), pa.field("p", pa.string()), pa.field("v", pa.int64())]
    schema = pa.schema(fields)
    options: dict[str, Any] = {"primary_key": "k", "buckets": 2}
    if layout != "plain":
        options.update(partition_by="p", key_scope=layout.split("_")[0])
    t = _table(tmp_path, schema, **options)
    model: dict[int, int] = {}
    history: dict[int, dict[int, int]] = {t.version: {}}
    for op, picks, n in ops:
        keys = sorted({pool[i] for i in picks})
        if op == "upsert":
            t.upsert(
                pa.table({"k": _arr(kind, keys), "p": ["a"] * len(keys), "v": [n] * len(keys)}, schema=schema)
            )
            model.update(dict.fromkeys(keys, n))
        elif op == "delete_keys":
            t.delete(pa.table({"k": _arr(kind, keys), "p": ["a"] * len(keys)}))
            for k in keys:
                model.pop(k, None)
        elif op == "delete_filter":  # a pyarrow Expression compares the key with an extreme literal
            t.delete(pc.field("k") >= pc.scalar(_arr(kind, keys[-1:])[0]))
            model = {k: v for k, v in model.items() if k < keys[-1]}
        elif op == "update":
            t.update(set={"v": f"v + {n}"}, where=pc.field("k") <= pc.scalar(_arr(kind, keys[:1])[0]))
            model = {k: v + n if k <= keys[0] else v for k, v in model.items()}
        else:
            t.compact()
        history[t.version] = dict(model)
        assert _rows(t) == model
        assert t.scan().count() == len(model)
    for version, expected in history.items():  # time travel
        assert _rows(t, version=version) == expected
    # the key as a filter: equality on each extreme, ranges around 0
    for k in pool:
        got = _rows(t, filter=pc.field("k") == pc.scalar(_arr(kind, [k])[0]))
        assert got == ({k: model[k]} if k in model else {})
    zero = pc.scalar(_arr(kind, [0])[0])
    assert _rows(t, filter=pc.field("k") > zero) == {k: v for k, v in model.items() if k > 0}
    assert _rows(t, filter=pc.field("k") < zero) == {k: v for k, v in model.items() if k < 0}
    assert t.scan(filter=pc.field("k") < zero).count() == sum(1 for k in model if k < 0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_extreme_keys_change_feed_and_inspect(tmp_path: Path, kind: str) -> None:
    arrow_type, pool = KINDS[kind][0], KEY_POOLS[kind]
    schema = pa.schema([pa.field("k", arrow_type), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="k")
    t.upsert(pa.table({"k": _arr(kind, pool), "v": [0] * 5}, schema=schema))
    start = t.version
    t.upsert(pa.table({"k": _arr(kind, pool[:2]), "v": [1, 1]}, schema=schema))
    t.delete(pa.table({"k": _arr(kind, pool[3:])}))
    t.compact()
    feed = t.changes(start).read_all()
    got = sorted(
        zip(_raw(feed.column("k")), feed.column("_change").to_pylist(), feed.column("v").to_pylist())
    )
    expected = sorted(
        [
            (pool[0], "update_before", 0),
            (pool[0], "update_after", 1),
            (pool[1], "update_before", 0),
            (pool[1], "update_after", 1),
            (pool[3], "delete", 0),
            (pool[4], "delete", 0),
        ]
    )
    assert got == expected
    assert t.inspect.files().num_rows >= 1
    assert t.inspect.snapshots().num_rows >= 4
    plan = str(t.scan(filter=pc.field("k") == pc.scalar(_arr(kind, pool[4:])[0])).explain())
    assert "scan at version" in plan
    t.overwrite(pa.table({"k": _arr(kind, pool[::4]), "v": [7, 8]}, schema=schema))
    assert _rows(t) == {pool[0]: 7, pool[4]: 8}
    assert _rows(t, version=start) == dict.fromkeys(pool, 0)


def test_ms_key_beyond_int64_micros_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.timestamp("ms", "UTC")), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="k")
    t.upsert(pa.table({"k": _arr("timestamp_ms_utc", [0]), "v": [0]}, schema=schema))
    before = t.version
    for raw in (MS_KEY_LIMIT + 1, -MS_KEY_LIMIT - 1, I64 - 1, -I64):
        with pytest.raises(InvalidInput):
            t.upsert(pa.table({"k": _arr("timestamp_ms_utc", [raw, 5]), "v": [1, 1]}, schema=schema))
        assert t.version == before and _rows(t) == {0: 0}


# ---------------------------------------------------------------- value column


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_extreme_values_filters_merge_update(tmp_path: Path, kind: str) -> None:
    arrow_type, pool = KINDS[kind]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", arrow_type), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id", buckets=2)
    t.upsert(pa.table({"id": range(5), "ts": _arr(kind, pool), "v": [0] * 5}, schema=schema))
    model = dict(enumerate(pool))
    for i, lit in enumerate(pool):
        s = pc.scalar(_arr(kind, [lit])[0])
        for op, f in [(">", pc.field("ts") > s), ("<=", pc.field("ts") <= s), ("==", pc.field("ts") == s)]:
            ids = sorted(t.scan(filter=f).to_arrow().column("id").to_pylist())
            cmp = {">": lambda a, b: a > b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b}[op]
            assert ids == [j for j, x in model.items() if cmp(x, lit)], (op, i)
    assert sorted(t.scan(filter="ts = ts AND ts IS NOT NULL").to_arrow().column("id").to_pylist()) == list(
        range(5)
    )
    # MERGE: a condition comparing two extreme values, then an UPDATE keeping them
    source = pa.table({"id": range(6), "ts": _arr(kind, [*reversed(pool), 0]), "v": [1] * 6}, schema=schema)
    metrics = (
        t.merge(source)
        .when_matched_update(set={"v": "s.v", "ts": "s.ts"}, condition="s.ts > t.ts")
        .when_not_matched_insert_all()
        .execute()
    )
    assert (metrics.updated, metrics.inserted) == (2, 1)
    model = {i: (max(pool[i], pool[4 - i]), 1 if pool[4 - i] > pool[i] else 0) for i in range(5)}
    model[5] = (0, 1)
    got = t.scan().to_arrow().sort_by("id")
    assert list(zip(_raw(got.column("ts")), got.column("v").to_pylist())) == [model[i] for i in range(6)]
    t.update(set={"ts": "GREATEST(ts, ts)", "v": "v + 10"}, where="ts >= ts")
    after = t.scan().to_arrow().sort_by("id")
    assert _raw(after.column("ts")) == [model[i][0] for i in range(6)]
    assert after.column("v").to_pylist() == [model[i][1] + 10 for i in range(6)]
    t.compact()
    assert t.scan().to_arrow().sort_by("id").equals(after)


@pytest.mark.parametrize("kind", ["date32", "timestamp_us", "timestamp_ms_utc"])
def test_min_max_beyond_python_raise_invalid_input(tmp_path: Path, kind: str) -> None:
    arrow_type, pool = KINDS[kind]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", arrow_type)])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": [0, 1, 2], "ts": _arr(kind, pool[1:4])}, schema=schema))
    for scan in (t.scan(), t.scan(filter="id >= 0")):  # footer statistics, then a read
        with pytest.raises(InvalidInput):
            scan.min("ts")
        with pytest.raises(InvalidInput):
            scan.max("ts")
    before = t.version
    assert t.scan(filter="id = 1").min("ts") is not None and t.version == before


def test_min_max_of_ns_near_limits(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("ns"))])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": [0, 1, 2], "ts": _arr("timestamp_ns", [-I64 + 1, 5, I64 - 1])}, schema=schema))
    low, high = t.scan().min("ts"), t.scan().max("ts")
    assert pa.scalar(low, pa.timestamp("ns")).value == -I64 + 1
    assert pa.scalar(high, pa.timestamp("ns")).value == I64 - 1


def test_min_of_ns_at_int64_minimum_is_not_nat(tmp_path: Path) -> None:
    """Found by this trial: min() returned pandas' NaT (a missing value) for the legal -2**63 ns."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("ns"))])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": [0, 1], "ts": _arr("timestamp_ns", [-I64, 5])}, schema=schema))
    with pytest.raises(InvalidInput, match="NaT"):
        t.scan().min("ts")
    assert t.scan().max("ts") == pd.Timestamp(5)


def test_year_of_dates_beyond_year_32767(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.date32())])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": [0, 1], "d": _arr("date32", [11_248_738, -(2**31)])}, schema=schema))
    # pyarrow's year kernel wraps there (32768 -> -32768; 2**31-1 and -2**31 both 20599): year() is exact.
    assert t.scan(filter="year(d) > 9999").to_arrow().column("id").to_pylist() == [0]
    assert t.scan(filter="year(d) = 32768").to_arrow().column("id").to_pylist() == [0]
    assert t.scan(filter="year(d) = -5877641").to_arrow().column("id").to_pylist() == [1]  # DuckDB's year


SECONDS_STORABLE = (2**63 - 1) // 1000  # Parquet keeps seconds as milliseconds
# kind: (type, raw width, raw units a day, lowest and highest raw value a table stores; date64 in whole days,
# as Arrow's format asks and Parquet's DATE keeps)
YEAR_TYPES = {
    "date32": (pa.date32(), pa.int32(), 1, -(2**31), 2**31 - 1),
    "date64": (pa.date64(), pa.int64(), 86_400_000, -(2**31), 2**31 - 1),
    "timestamp_s": (pa.timestamp("s"), pa.int64(), 86_400, -SECONDS_STORABLE, SECONDS_STORABLE),
    "timestamp_us": (pa.timestamp("us"), pa.int64(), 86_400_000_000, -(2**63), 2**63 - 1),
    "timestamp_ns": (pa.timestamp("ns"), pa.int64(), 86_400_000_000_000, -(2**63), 2**63 - 1),
}


def _proleptic_year(days: int) -> int:
    """The Gregorian year of a day count since 1970, by Python's calendar: shifted by whole 400-year
    cycles (146,097 days each) into the years it holds, and the cycles' years added back."""
    cycles = (days - 200_000) // 146_097
    return (dt.date(1970, 1, 1) + dt.timedelta(days=days - cycles * 146_097)).year + 400 * cycles


@pytest.mark.parametrize("kind", sorted(YEAR_TYPES))
@given(data=st.data())
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_year_equals_the_calendar_over_the_whole_range(
    tmp_path: Path, kind: str, data: st.DataObject
) -> None:
    arrow_type, width, per_day, lo, hi = YEAR_TYPES[kind]
    step = per_day if kind == "date64" else 1  # date64: whole days (lo and hi count days)
    # Around years 1 to 9999 as well (within the type: nanoseconds hold 1677 to 2262).
    near = st.integers(max(lo, -800_000 * per_day // step), min(hi, 3_000_000 * per_day // step))
    drawn = data.draw(
        st.lists(
            st.one_of(st.integers(lo, hi), near, st.sampled_from([lo, hi, 0, -1])), min_size=1, max_size=12
        )
    )
    raw = [v * step for v in drawn]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", arrow_type)])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(
        pa.table({"id": list(range(len(raw))), "d": pa.array(raw, width).view(arrow_type)}, schema=schema)
    )
    years = [_proleptic_year(v // per_day) for v in raw]
    pivot = data.draw(st.sampled_from(years))
    for op, holds in (("=", lambda y: y == pivot), ("<", lambda y: y < pivot)):
        got = sorted(t.scan(filter=f"year(d) {op} {pivot}").to_arrow().column("id").to_pylist())
        assert got == [i for i, y in enumerate(years) if holds(y)], (kind, op, pivot, raw)
    if kind == "date32":  # DuckDB agrees wherever it has a year (2**31-1 and its negation are its infinities)
        duck = duckdb_years(pa.array(raw, width).view(arrow_type))
        assert all(d is None or d == y for d, y in zip(duck, years)), (raw, duck, years)


ZONES = [
    "UTC",
    "America/New_York",
    "Australia/Sydney",
    "Asia/Kolkata",
    "Pacific/Kiritimati",
    "+05:30",
    "-12:00",
]
_UNIT_SECONDS = {"s": 1, "ms": 1_000, "us": 1_000_000}


def _wall_year(raw: int, unit: str, zone: str) -> int:
    """The year of a zoned timestamp's wall clock, by Python's calendar and zoneinfo (never pyarrow), the
    offset as :func:`_offset_seconds` takes it."""
    seconds = raw // _UNIT_SECONDS[unit]
    return _proleptic_year((seconds + _offset_seconds(seconds, zone)) // 86_400)


def _new_year(cycles: int, year: int, minutes: int) -> int:
    """Seconds since 1970 of a turn of a year: ``year`` of the 400-year cycle from 1600 moved by ``cycles``,
    plus ``minutes``."""
    return (
        (cycles * 146_097 + (dt.date(1600 + year, 1, 1) - dt.date(1970, 1, 1)).days) * 1_440 + minutes
    ) * 60


@pytest.mark.parametrize("unit", sorted(_UNIT_SECONDS))
@given(data=st.data())
@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_year_of_zoned_timestamps_follows_the_wall_clock_over_the_whole_range(
    tmp_path: Path, unit: str, data: st.DataObject
) -> None:
    """pyarrow's year kernel wrapped beyond year 32767 for zoned timestamps too (year 40000 gave -25536)."""
    zone = data.draw(st.sampled_from(ZONES))
    arrow_type = pa.timestamp(unit, tz=zone)
    per_second = _UNIT_SECONDS[unit]
    lo, hi = (-SECONDS_STORABLE, SECONDS_STORABLE) if unit == "s" else (-(2**63), 2**63 - 1)
    cycle = 146_097 * 86_400 * per_second
    # The turn of a year, far away and near, any year of the 400-year cycle, to the minute: where the wall
    # clock's year differs from UTC's, and where one zone's offset differed over time (local mean time, a
    # zone that moved across the date line).
    new_year = st.builds(
        lambda *parts: _new_year(*parts) * per_second,
        st.integers(lo // cycle + 2, hi // cycle - 2),
        st.integers(0, 399),
        st.integers(-15 * 60, 15 * 60),
    )
    values = st.one_of(st.integers(lo, hi), new_year, st.sampled_from([lo, hi, 0]))
    drawn = data.draw(st.lists(values, min_size=1, max_size=10))
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", arrow_type)])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": list(range(len(drawn))), "ts": pa.array(drawn, pa.int64()).view(arrow_type)}))
    years = [_wall_year(v, unit, zone) for v in drawn]
    for pivot in {data.draw(st.sampled_from(years)), years[0] - 1}:
        for op in ("=", "<"):
            got = sorted(t.scan(filter=f"year(ts) {op} {pivot}").to_arrow().column("id").to_pylist())
            want = [i for i, y in enumerate(years) if (y == pivot if op == "=" else y < pivot)]
            assert got == want, (zone, op, pivot, drawn, years)


@pytest.mark.parametrize(
    ("zone", "cycles", "year", "minutes"),
    [
        ("Pacific/Kiritimati", 95, 380, -12 * 60),  # 40380: its last offset is +14; in 1980, -10
        ("Pacific/Kiritimati", -104, 350, 10 * 60 + 35),  # -39650: its first offset, -10:29:20; 1950: -10:40
        ("Asia/Kolkata", -104, 300, -340),  # -39700: local mean time, +5:53:28; in 1900, +5:21:10
        ("America/New_York", -104, 300, 4 * 60 + 58),  # -39700: local mean time, -4:56:02; in 1900, -5
    ],
)
def test_year_of_far_zoned_timestamps_takes_the_offset_of_their_own_era(
    tmp_path: Path, zone: str, cycles: int, year: int, minutes: int
) -> None:
    """A value moved by 400-year cycles near 1970 would take the offset of that era, which differs from the
    far past's (local mean time) or far future's (the last one) by minutes to a day: at the turn of a year
    that changes the year."""
    arrow_type = pa.timestamp("us", tz=zone)
    raw = _new_year(cycles, year, minutes) * 1_000_000
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", arrow_type)])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": [0], "ts": pa.array([raw], pa.int64()).view(arrow_type)}))
    wall = _wall_year(raw, "us", zone)
    assert wall in (1600 + year + 400 * cycles, 1600 + year + 400 * cycles - 1)
    assert t.scan(filter=f"year(ts) = {wall}").to_arrow().num_rows == 1


def _wall_clock(raw_ns: int, zone: str) -> tuple[dt.datetime, dt.timedelta]:
    """The wall clock of a zoned nanosecond timestamp (to the second) and the zone's offset, by Python's
    datetime and zoneinfo, the offset as :func:`_offset_seconds` takes it."""
    seconds = raw_ns // 1_000_000_000
    offset = dt.timedelta(seconds=_offset_seconds(seconds, zone))
    return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds) + offset, offset


_PARTS = {
    "year": lambda w: w.year,
    "month": lambda w: w.month,
    "day": lambda w: w.day,
    "hour": lambda w: w.hour,
    "minute": lambda w: w.minute,
    "second": lambda w: w.second,
    "quarter": lambda w: (w.month - 1) // 3 + 1,
}


@given(data=st.data())
@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_wall_clock_of_zoned_nanoseconds_at_the_ends_of_their_range(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Arrow reads a zoned timestamp's wall clock as the instant plus the zone's offset; for nanoseconds
    within an offset of int64's ends that overflowed and wrapped (Berlin's last instant read as 1677)."""
    zone = data.draw(st.sampled_from([*ZONES, "Europe/Berlin", "+14:00"]))
    arrow_type = pa.timestamp("ns", tz=zone)
    end = 2 * 86_400 * 1_000_000_000  # two days of each end, where an offset reaches
    values = st.one_of(st.integers(-(2**63), -(2**63) + end), st.integers(2**63 - 1 - end, 2**63 - 1))
    drawn = data.draw(st.lists(st.one_of(values, st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=8))
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", arrow_type)])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": list(range(len(drawn))), "ts": pa.array(drawn, pa.int64()).view(arrow_type)}))
    walls = [_wall_clock(v, zone)[0] for v in drawn]
    # pyarrow's second() leaves out the seconds of an offset (local mean time's -4:56:02 in New York):
    # compared where offsets are whole minutes.
    name = data.draw(st.sampled_from([p for p in sorted(_PARTS) if p != "second" or zone[0] in "+-U"]))
    pivot = _PARTS[name](walls[0])
    got = sorted(t.scan(filter=f"{name}(ts) = {pivot}").to_arrow().column("id").to_pylist())
    assert got == [i for i, w in enumerate(walls) if _PARTS[name](w) == pivot], (zone, name, drawn, walls)
    day = walls[-1].date().isoformat()
    got = sorted(t.scan(filter=f"CAST(ts AS DATE) = DATE '{day}'").to_arrow().column("id").to_pylist())
    assert got == [i for i, w in enumerate(walls) if w.date().isoformat() == day], (zone, drawn, walls)
    # As text: Arrow's spelling, nanoseconds and offset (where the offset is whole minutes).
    wall, offset = _wall_clock(drawn[-1], zone)
    minutes, seconds = divmod(int(offset.total_seconds()), 60)
    if not seconds:
        sign, minutes = ("+" if minutes >= 0 else "-"), abs(minutes)
        suffix = "Z" if zone == "UTC" else f"{sign}{minutes // 60:02d}{minutes % 60:02d}"
        text = f"{wall:%Y-%m-%d %H:%M:%S}.{drawn[-1] % 1_000_000_000:09d}{suffix}"
        got = sorted(t.scan(filter=f"CAST(ts AS VARCHAR) = '{text}'").to_arrow().column("id").to_pylist())
        assert got == [i for i, v in enumerate(drawn) if v == drawn[-1]], (zone, drawn, text)


def _offset_seconds(seconds: int, zone: str | None) -> int:
    """A zone's offset at an instant by zoneinfo (none for a naive value): where Python has one (years 1 to
    2037), its first one (local mean time) before, and its offset at the end of 2037 after (pyarrow's zone
    data end there and its last offset applies beyond; at the turn of a year it agrees with every zone's
    rules)."""
    if zone is None or zone == "UTC":
        return 0
    if zone[0] in "+-":
        hours, minutes = zone[1:].split(":")
        return (int(hours) * 3600 + int(minutes) * 60) * (1 if zone[0] == "+" else -1)
    year = _proleptic_year(seconds // 86_400)
    if year < 2:
        when = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
    elif year > 2037:
        when = dt.datetime(2037, 12, 31, 12, tzinfo=dt.UTC)
    else:
        when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    shift = when.astimezone(zoneinfo.ZoneInfo(zone)).utcoffset()
    assert shift is not None
    return int(shift.total_seconds())


def _calendar(seconds: int) -> dict[str, int]:
    """Month to second, quarter and weekday (Sunday 0) of a wall clock in seconds since 1970, by Python's
    calendar moved by 400-year cycles."""
    days, rest = divmod(seconds, 86_400)
    cycles = (days - 200_000) // 146_097
    date = dt.date(1970, 1, 1) + dt.timedelta(days=days - cycles * 146_097)
    return {
        "month": date.month,
        "day": date.day,
        "quarter": (date.month - 1) // 3 + 1,
        "dayofweek": (date.weekday() + 1) % 7,
        "hour": rest // 3600,
        "minute": rest // 60 % 60,
        "second": rest % 60,
    }


# kind: (type, raw units a second (dates: a day's raw units over 86,400), lowest and highest raw value)
PART_TYPES = {
    "date32": (pa.date32(), None, -(2**31), 2**31 - 1),
    "date64": (pa.date64(), None, -(2**31), 2**31 - 1),
    "s": (pa.timestamp("s"), 1, -SECONDS_STORABLE, SECONDS_STORABLE),
    "ms": (pa.timestamp("ms"), 1_000, -(2**63), 2**63 - 1),
    "us": (pa.timestamp("us"), 1_000_000, -(2**63), 2**63 - 1),
}


@pytest.mark.parametrize("kind", sorted(PART_TYPES))
@given(data=st.data())
@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_calendar_parts_over_the_whole_range(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    """pyarrow's kernels for month, day, hour, ... of seconds and milliseconds overflow far from 1970 (the
    hour of the last storable second read 2,576,980,377,607), a zoned value's offset overflows at int64's
    ends, and a date's month and day at 2**31 - 1 days were wrong: each part equals Python's calendar."""
    arrow_type, per_second, lo, hi = PART_TYPES[kind]
    zone = None
    if per_second is not None and data.draw(st.booleans()):
        zone = data.draw(st.sampled_from(ZONES))
        arrow_type = pa.timestamp(arrow_type.unit, tz=zone)
    drawn = data.draw(
        st.lists(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, lo + 1, hi - 1, 0, -1])), max_size=8)
    )
    drawn.append(data.draw(st.sampled_from([lo, hi])))
    if kind == "date64":
        raw, width = [v * 86_400_000 for v in drawn], pa.int64()
        seconds = [v * 86_400 for v in drawn]
    elif kind == "date32":
        raw, width = drawn, pa.int32()
        seconds = [v * 86_400 for v in drawn]
    else:
        assert per_second is not None
        raw, width = drawn, pa.int64()
        seconds = [v // per_second for v in drawn]
    walls = [_calendar(s + _offset_seconds(s, zone)) for s in seconds]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", arrow_type)])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": list(range(len(raw))), "ts": pa.array(raw, width).view(arrow_type)}))
    # pyarrow's second() leaves out the seconds of an offset (local mean time): compared where they are none.
    names = [n for n in sorted(walls[0]) if n != "second" or zone is None or zone[0] in "+-U"]
    for name in data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
        pivot = walls[-1][name]
        got = sorted(t.scan(filter=f"{name}(ts) = {pivot}").to_arrow().column("id").to_pylist())
        assert got == [i for i, w in enumerate(walls) if w[name] == pivot], (kind, zone, name, drawn)


def test_seconds_beyond_what_milliseconds_hold_are_refused(tmp_path: Path) -> None:
    """Found by the year test: such a value reached the Parquet writer and failed there with pyarrow's own
    error; now a typed refusal before anything is written."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.timestamp("s"))])
    t = _table(tmp_path, schema, primary_key="id")
    edge = [-SECONDS_STORABLE, SECONDS_STORABLE]
    t.upsert(pa.table({"id": [0, 1], "d": pa.array(edge, pa.int64()).view(pa.timestamp("s"))}, schema=schema))
    before = t.version
    for raw in (SECONDS_STORABLE + 1, -SECONDS_STORABLE - 1, 2**63 - 1, -(2**63)):
        with pytest.raises(InvalidInput, match="milliseconds"):
            t.upsert(pa.table({"id": [2, 3], "d": pa.array([0, raw], pa.int64()).view(pa.timestamp("s"))}))
        assert t.version == before
    assert _raw(t.to_arrow().sort_by("id").column("d")) == edge


def test_date64_beyond_days_in_32_bits_is_refused(tmp_path: Path) -> None:
    """Found by the year test: Parquet keeps a date64 as DATE (days in 32 bits), and a day beyond that
    range was written wrapped (2**31 read back as -2**31) without a word."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.date64())])
    t = _table(tmp_path, schema, primary_key="id")
    day = 86_400_000
    edge = [-(2**31) * day, (2**31 - 1) * day]
    t.upsert(pa.table({"id": [0, 1], "d": pa.array(edge, pa.int64()).view(pa.date64())}, schema=schema))
    before = t.version
    # The last two are not whole days either.
    for raw in (2**31 * day, (-(2**31) - 1) * day, 2**63 - 1, -(2**63)):
        with pytest.raises(InvalidInput, match=r"32 bits|not a whole day"):
            t.upsert(pa.table({"id": [2, 3], "d": pa.array([0, raw], pa.int64()).view(pa.date64())}))
        assert t.version == before
    assert t.to_arrow().sort_by("id").column("d").cast(pa.int64()).to_pylist() == edge


@pytest.mark.parametrize(
    "nesting",
    [
        lambda t: pa.list_(t),
        lambda t: pa.struct([("a", pa.int64()), ("x", t)]),
        lambda t: pa.map_(pa.string(), t),
        lambda t: pa.list_(pa.struct([("x", t)])),
    ],
    ids=["list", "struct", "map", "list_of_struct"],
)
@pytest.mark.parametrize("kind", ["date64", "timestamp_s"])
def test_nested_values_beyond_parquet_units_are_refused(tmp_path: Path, kind: str, nesting: Any) -> None:
    leaf_type, _, per_day, lo, hi = YEAR_TYPES[kind]
    step = per_day if kind == "date64" else 1
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("n", nesting(leaf_type))])
    t = _table(tmp_path, schema, primary_key="id")

    def rows(raw: list[int]) -> pa.Table:
        leaves = pa.array(raw, pa.int64()).view(leaf_type)
        n_type = schema.field("n").type
        if pa.types.is_map(n_type):
            n = pa.MapArray.from_arrays([0, len(raw)], pa.array([str(i) for i in range(len(raw))]), leaves)
        elif pa.types.is_struct(n_type):
            n = pa.StructArray.from_arrays([pa.array(range(len(raw)), pa.int64()), leaves], ["a", "x"])
            return pa.table({"id": list(range(len(raw))), "n": n}, schema=schema)
        elif pa.types.is_struct(n_type.value_type):
            n = pa.ListArray.from_arrays([0, len(raw)], pa.StructArray.from_arrays([leaves], ["x"]))
        else:
            n = pa.ListArray.from_arrays([0, len(raw)], leaves)
        return pa.table({"id": [0], "n": n.cast(n_type)}, schema=schema)

    edge = rows([lo * step, hi * step])
    t.upsert(edge)
    before = t.version
    for beyond in ((hi + 1) * step, (lo - 1) * step):
        with pytest.raises(InvalidInput, match="cannot store"):
            t.upsert(rows([0, beyond]))
        assert t.version == before
    assert t.to_arrow().sort_by("id").column("n").combine_chunks().equals(edge.column("n").combine_chunks())


def duckdb_years(dates: pa.Array) -> list[int | None]:
    import duckdb

    con = duckdb.connect()
    try:
        con.register("t", pa.table({"d": dates}))
        return [r[0] for r in con.execute("SELECT year(d) FROM t").fetchall()]
    finally:
        con.close()


def test_ns_column_compared_with_us_column_beyond_ns_range(tmp_path: Path) -> None:
    """Found by this trial: the us side was cast to ns, which failed (FilterError) for a us value beyond
    the ns range; timestamps of two units now compare exactly in the coarser unit and a remainder."""
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("n", pa.timestamp("ns")), pa.field("u", pa.timestamp("us"))]
    )
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(
        pa.table(
            {"id": [0, 1], "n": _arr("timestamp_ns", [0, 0]), "u": _arr("timestamp_us", [2**62, -5])},
            schema=schema,
        )
    )
    assert t.scan(filter="n > u").to_arrow().column("id").to_pylist() == [1]


# ---------------------------------------------------------------- partition column


@pytest.mark.parametrize("raw", [-800_000, -719_163, 2_932_897, 3_000_000, 2**31 - 1, -(2**31)])
def test_partition_date_beyond_python_is_refused_typed(tmp_path: Path, raw: int) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", pa.date32()), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id", partition_by="p")
    t.upsert(pa.table({"id": [9], "p": _arr("date32", [0]), "v": [9]}, schema=schema))
    before = (t.version, _rows(t, key="id"))
    batch = pa.table({"id": [1, 2], "p": _arr("date32", [raw, 0]), "v": [1, 2]}, schema=schema)
    for write in (t.upsert, lambda b: t.overwrite(b, dynamic=True), t.overwrite):
        with pytest.raises(MereError):
            write(batch)
        assert (t.version, _rows(t, key="id")) == before
    assert t.delete(pc.field("p") == pc.scalar(_arr("date32", [raw])[0])).no_change


@pytest.mark.parametrize("raw", [-719_162, 2_932_896])  # 0001-01-01 and 9999-12-31: the edges that fit
def test_partition_dates_at_python_edges(tmp_path: Path, raw: int) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", pa.date32()), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id", partition_by="p")
    t.upsert(pa.table({"id": [1, 2], "p": _arr("date32", [raw, 0]), "v": [1, 2]}, schema=schema))
    edge = pc.scalar(_arr("date32", [raw])[0])
    assert t.scan(filter=pc.field("p") == edge).to_arrow().column("id").to_pylist() == [1]
    t.update(set={"v": "v + 1"}, where=pc.field("p") == edge)
    assert _rows(t, key="id") == {1: 2, 2: 2}
    t.overwrite(pa.table({"id": [3], "p": _arr("date32", [raw]), "v": [3]}, schema=schema), dynamic=True)
    assert _rows(t, key="id") == {2: 2, 3: 3}
    t.compact()
    t.delete(pc.field("p") == edge)
    assert _rows(t, key="id") == {2: 2}
    assert _raw(t.scan().to_arrow().column("p")) == [0]


# ---------------------------------------------------------------- sequence_by column


@pytest.mark.parametrize("kind", ["date32", "timestamp_us", "timestamp_ns"])
def test_sequence_extremes_grid(tmp_path: Path, kind: str) -> None:
    """Every (stored, incoming) pair of extreme sequences: the higher wins (ties: the later commit), and
    ``stale_rows`` counts an incoming row below the stored one."""
    arrow_type, pool = KINDS[kind]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", arrow_type), pa.field("v", pa.int64())])
    for a, b in itertools.product(pool, pool):
        t = _table(tmp_path, schema, primary_key="id", sequence_by="s")
        t.upsert(pa.table({"id": [1, 2], "s": _arr(kind, [a, a]), "v": [1, 1]}, schema=schema))
        result = t.upsert(pa.table({"id": [1], "s": _arr(kind, [b]), "v": [2]}, schema=schema))
        assert _rows(t, key="id") == {1: 2 if b >= a else 1, 2: 1}, (a, b)
        assert result.stale_rows == (1 if b < a else 0), (a, b)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sequence_late_events_deletes_and_compaction(tmp_path: Path, kind: str) -> None:
    arrow_type, (lo, below, zero, above, hi) = KINDS[kind]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", arrow_type), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id", sequence_by="s")

    def write(ids: list[int], seqs: list[int], v: int) -> None:
        t.upsert(pa.table({"id": ids, "s": _arr(kind, seqs), "v": [v] * len(ids)}, schema=schema))

    write([1, 2, 3, 4], [hi, above, lo, zero], 1)
    write([1, 2, 3, 4], [above, lo, lo, below], 2)  # late events: lower sequences lose, the tie wins
    assert _rows(t, key="id") == {1: 1, 2: 1, 3: 2, 4: 1}
    t.compact()
    write([1, 2, 3, 4], [below, below, below, below], 3)  # after a fold, late events still lose
    assert _rows(t, key="id") == {1: 1, 2: 1, 3: 3, 4: 1}
    # a delete by filter marks just above the version read: its replay stays deleted, a newer event wins
    t.delete("id = 2")
    write([2], [above], 4)
    assert _rows(t, key="id") == {1: 1, 3: 3, 4: 1}
    write([2], [hi], 5)
    assert _rows(t, key="id") == {1: 1, 2: 5, 3: 3, 4: 1}
    # keys with their sequences are deleted blind at them: below the stored version they change nothing
    t.delete(pa.table({"id": [3, 4], "s": _arr(kind, [lo, hi])}))
    assert _rows(t, key="id") == {1: 1, 2: 5, 3: 3}
    write([4], [hi], 6)  # equal to the delete's sequence: the later commit wins
    assert _rows(t, key="id") == {1: 1, 2: 5, 3: 3, 4: 6}
    t.merge(pa.table({"id": [3]})).when_matched_delete().execute()
    t.compact()
    write([3], [below], 7)  # the replay of what the MERGE deleted stays deleted after a fold
    assert _rows(t, key="id") == {1: 1, 2: 5, 4: 6}
    feed = t.changes(0).read_all()
    assert sorted(zip(feed.column("id").to_pylist(), _raw(feed.column("s")))) == [(1, hi), (2, hi), (4, hi)]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sequence_delete_at_type_maximum_deletes(tmp_path: Path, kind: str) -> None:
    """A delete by filter of a version at the sequence type's maximum (no value above it) still deletes
    it. (Its replay at the maximum comes back: writer.sequence_after leaves a maximum where it is.)"""
    arrow_type, pool = KINDS[kind]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", arrow_type), pa.field("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id", sequence_by="s")
    t.upsert(pa.table({"id": [1, 2], "s": _arr(kind, [pool[4], pool[0]]), "v": [1, 2]}, schema=schema))
    assert t.delete("id IN (1, 2)").rows_deleted == 2
    assert t.scan().count() == 0
    t.upsert(pa.table({"id": [2], "s": _arr(kind, [pool[0]]), "v": [2]}, schema=schema))
    assert t.scan().count() == 0  # the replay of the minimum stays deleted


def _ms(raw: list[int]) -> pa.Array:
    return pa.array(raw, pa.int64()).view(pa.date64())


@pytest.mark.parametrize("offset", [1, -1, 86_399_999, -86_399_999, 3_600_000])
def test_date64_that_is_not_a_whole_day_is_refused_on_every_write(tmp_path: Path, offset: int) -> None:
    """Arrow asks a date64 for whole days; Parquet's DATE kept such a value's day alone (truncated toward
    zero: -1 ms was stored as 1970-01-01), changing the value, and the partition it names, without a word."""
    day = 86_400_000
    dates = pa.list_(pa.date64())
    schema = pa.schema(
        [("id", pa.int64(), False), ("p", pa.date64()), ("d", pa.date64()), ("n", dates)]  # type: ignore[list-item]
    )
    keyed = _table(tmp_path, schema, primary_key="id", partition_by="p")
    plain = _table(tmp_path, schema)

    def rows(key: int, p: int, d: int, n: list[int]) -> pa.Table:
        nested = pa.ListArray.from_arrays([0, len(n)], _ms(n))
        return pa.table({"id": [key], "p": _ms([p]), "d": _ms([d]), "n": nested}).cast(schema)

    whole = rows(0, day, -day, [0, 5 * day])
    keyed.upsert(whole)
    plain.append(whole)
    before = (keyed.version, plain.version)
    bad = 7 * day + offset
    for table in (rows(1, bad, 0, [0]), rows(1, 0, bad, [0]), rows(1, 0, 0, [0, bad])):
        attempts: list[Callable[[pa.Table], Any]] = [
            keyed.upsert,
            plain.append,
            lambda rows: keyed.merge(rows).when_not_matched_insert_all().execute(),
            keyed.stage,
        ]
        for attempt in attempts:
            with pytest.raises(InvalidInput, match="not a whole day"):
                attempt(table)
        assert (keyed.version, plain.version) == before
    for t in (keyed, plain):
        assert t.to_arrow().cast(schema).equals(whole)


def test_a_default_parquet_cannot_store_is_refused(tmp_path: Path) -> None:
    """Found by review: a date64 default that is not a whole day was floored to its day (its Python value
    was taken) instead of refused as a written value is; a seconds default beyond milliseconds likewise."""
    schema = pa.schema([pa.field("id", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id")
    t.upsert(pa.table({"id": [1]}))
    before = t.version
    day = 86_400_000
    for kind, raw in (
        (pa.date64(), 7 * day + 1),
        (pa.date64(), -1),
        (pa.timestamp("s"), SECONDS_STORABLE + 1),
    ):
        scalar = pa.array([raw], pa.int64()).view(kind)[0]
        with pytest.raises(InvalidInput, match="cannot store"):
            t.add_column("x", kind, default=scalar)
        assert t.version == before
    t.add_column("x", pa.date64(), default=pa.array([-7 * day], pa.int64()).view(pa.date64())[0])
    assert t.to_arrow().column("x").cast(pa.int64()).to_pylist() == [-7 * day]
