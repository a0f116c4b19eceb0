"""Times and timestamps finer than Python's microsecond: filters on them give exactly the rows an exact
integer model gives, or refuse a literal they cannot hold (never a silently cut one).

- A ``time64[ns]`` column's row-group statistics read as Python times cut to microseconds: a maximum of
  1-2 ns read as midnight pruned ``t > '00:00:00'``.
- A time literal finer than a microsecond was cut by ``time.fromisoformat``.
- Timestamp columns of two units compare exactly, even where a value of the coarser one has no value in the
  finer one (a microsecond beyond the years 1677-2262 has no nanosecond)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.errors import FilterError

OPS = {
    "<": int.__lt__,
    "<=": int.__le__,
    "=": int.__eq__,
    "<>": int.__ne__,
    ">": int.__gt__,
    ">=": int.__ge__,
}
DAY_NS = 86_400 * 10**9


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.integers(0, 5000), st.integers(DAY_NS - 5000, DAY_NS - 1), st.integers(0, DAY_NS - 1)),
        min_size=1,
        max_size=30,
    ),
    micros=st.integers(0, 6),
    op=st.sampled_from(sorted(OPS)),
)
def test_time_ns_filters_with_microsecond_literals(
    tmp_path_factory: Any, values: list[int], micros: int, op: str
) -> None:
    """Row groups of two rows (statistics per pair), literals at whole microseconds, against exact ns."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("t", pa.time64("ns"))])
    t = mere.connect(str(tmp_path_factory.mktemp("w"))).create_table(
        "db.t", schema, primary_key="id", properties={"write.row-group-rows": "2"}
    )
    times = pa.array(values, pa.int64()).cast(pa.time64("ns"))
    t.upsert(pa.table({"id": range(len(values)), "t": times}, schema=schema))
    literal = f"00:00:00.{micros:06d}"
    got = sorted(t.scan(filter=f"t {op} '{literal}'").to_arrow().column("id").to_pylist())
    assert got == [i for i, v in enumerate(values) if OPS[op](v, micros * 1000)]


@pytest.mark.parametrize("unit", ["us", "ns"])
def test_time_literals_finer_than_a_microsecond_are_refused(tmp_path: Path, unit: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("t", pa.time64(unit))])
    t = mere.connect(str(tmp_path)).create_table("db.t", schema, primary_key="id")
    t.upsert(pa.table({"id": [0, 1], "t": pa.array([1, 2], pa.int64()).cast(pa.time64(unit))}, schema=schema))
    before = t.version
    for text in ("t >= '00:00:00.000000002'", "t < '00:00:00.0000019'"):
        with pytest.raises(FilterError, match="finer than a microsecond"):
            t.scan(filter=text).to_arrow()
        with pytest.raises(FilterError, match="finer than a microsecond"):
            t.delete(text)
    assert t.version == before
    # Zeros past the sixth digit cut nothing.
    assert t.scan(filter="t < '00:00:00.000003000'").count() == 2


SCALE = {"n": 1, "u": 1000, "s": 10**9, "m": 10**6, "z": 1}  # ns in a unit of each column
TIMESTAMPS = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("n", pa.timestamp("ns")),
        pa.field("u", pa.timestamp("us")),
        pa.field("s", pa.timestamp("s")),
        pa.field("m", pa.timestamp("ms", "UTC")),
        pa.field("z", pa.timestamp("ns", "UTC")),
    ]
)


@pytest.fixture(scope="module")
def timestamps(tmp_path_factory: Any) -> tuple[mere.Table, list[dict[str, Any]]]:
    ns = [0, -1, 1, 999, 1000, -1000, -1001, 1001, 2**63 - 1, -(2**63), None, 5 * 10**9, -5 * 10**9]
    us = [0, -1, 1, 2**62, -(2**62), None, 5 * 10**6, -5 * 10**6, 2**63 - 1, -(2**63) + 1]
    rows = []
    for a in ns:
        for b in us:
            rows.append(
                {
                    "id": len(rows),
                    "n": a,
                    "u": b,
                    "s": None if b is None else b // 10**7,
                    "m": None if b is None else b // 10**4,
                    "z": a,
                }
            )
    columns = {"id": pa.array([r["id"] for r in rows], pa.int64())}
    for field in TIMESTAMPS:
        if field.name != "id":
            columns[field.name] = pa.array([r[field.name] for r in rows], pa.int64()).view(field.type)
    t = mere.connect(str(tmp_path_factory.mktemp("ts"))).create_table("db.t", TIMESTAMPS, primary_key="id")
    t.upsert(pa.table(columns, schema=TIMESTAMPS))
    return t, rows


@pytest.mark.parametrize("pair", ["n u", "u n", "n s", "s n", "z m", "m z", "u s", "s u"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_timestamps_of_two_units_compare_exactly(
    timestamps: tuple[mere.Table, list[dict[str, Any]]], pair: str, op: str
) -> None:
    t, rows = timestamps
    a, b = pair.split()
    for text in (f"{a} {op} {b}", f"not ({a} {op} {b})", f"({a} {op} {b}) is null"):
        want = []
        for r in rows:
            x, y = r[a], r[b]
            if text.endswith("is null"):
                if x is None or y is None:
                    want.append(r["id"])
            elif (
                x is not None
                and y is not None
                and OPS[op](x * SCALE[a], y * SCALE[b]) != text.startswith("not")
            ):
                want.append(r["id"])
        assert sorted(t.scan(filter=text).to_arrow().column("id").to_pylist()) == want, text


def test_ns_string_literals_in_the_first_second_of_the_range_are_refused(tmp_path: Path) -> None:
    """docs/sql.md: Arrow's parser refuses a string within the first second of timestamp[ns]'s range
    (it overflows on the whole seconds before adding the fraction): a typed FilterError that changes
    nothing, where a pandas Timestamp of the same value filters exactly."""
    pd = pytest.importorskip("pandas")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("n", pa.timestamp("ns"))])
    t = mere.connect(str(tmp_path)).create_table("db.t", schema, primary_key="id")
    low = -(2**63) + 1  # 1677-09-21 00:12:43.145224193, pandas' smallest Timestamp
    values = [low, low + 1, low + 10**9, 0]
    t.upsert(pa.table({"id": range(4), "n": pa.array(values, pa.int64()).view(pa.timestamp("ns"))}))
    before = t.version
    for text in ("n = '1677-09-21T00:12:43.145224193'", "n < '1677-09-21 00:12:43.5'"):
        with pytest.raises(FilterError, match="Failed to parse"):
            t.scan(filter=text).to_arrow()
        with pytest.raises(FilterError, match="Failed to parse"):
            t.delete(text)
    assert t.version == before
    assert t.scan(filter="n >= '1677-09-21 00:12:44'").count() == 2  # past the first second: parsed
    stamp = pd.Timestamp(low, unit="ns")
    assert t.scan(filter=mere.col("n") == stamp).to_arrow().column("id").to_pylist() == [0]
    assert t.scan(filter=mere.col("n") < stamp + pd.Timedelta(2, "ns")).count() == 2
