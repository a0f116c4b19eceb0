"""``mere.arrays.distinct_count`` (the writer's count of distinct sampled values, for its encoding
choices) against Python sets: every type the writer samples, NULLs as one value, numbers by their bits
(NaN payloads, ``-0.0``), chunked and sliced arrays."""

from __future__ import annotations

import datetime as dt
import itertools
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from mere.arrays import distinct_count

FLOAT_BITS = st.sampled_from(
    [
        0.0,
        -0.0,
        1.5,
        float("inf"),
        float("-inf"),
        float("nan"),
        struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0],
    ]
)

KINDS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "few_int8": (pa.int8(), st.integers(-2, 2)),
    "uint64": (pa.uint64(), st.sampled_from([0, 1, 2**63, 2**64 - 1])),
    "uint16": (pa.uint16(), st.integers(0, 2**16 - 1)),
    "float64": (pa.float64(), st.one_of(FLOAT_BITS, st.floats(allow_nan=False, width=64))),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "date32": (pa.date32(), st.dates(dt.date(1600, 1, 1), dt.date(2400, 1, 1))),
    "date64": (pa.date64(), st.dates(dt.date(1969, 12, 30), dt.date(1970, 1, 3))),
    "timestamp_tz": (
        pa.timestamp("ns", tz="Europe/Paris"),
        st.integers(-3, 3).map(lambda s: dt.datetime(2000, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=s)),
    ),
    "time64": (pa.time64("us"), st.times()),
    "duration": (pa.duration("ms"), st.integers(-5, 5).map(lambda s: dt.timedelta(milliseconds=s))),
    "string": (pa.string(), st.sampled_from(["", "a", "b", "é", "a\x00"])),
    "large_string": (pa.large_string(), st.text(max_size=3)),
    "binary": (pa.binary(), st.binary(max_size=2)),
    "decimal": (pa.decimal128(9, 2), st.sampled_from([Decimal("0.00"), Decimal("-1.50"), Decimal("1.5")])),
    "bool": (pa.bool_(), st.booleans()),
}


def _identity(kind: pa.DataType, value: Any) -> Any:
    """What makes two values one: floats by their bits."""
    if pa.types.is_float64(kind):
        return struct.pack("<d", value)
    if pa.types.is_float32(kind):
        return struct.pack("<f", value)
    return value


@settings(max_examples=300)
@given(
    name=st.sampled_from(sorted(KINDS)),
    data=st.data(),
    cuts=st.lists(st.integers(0, 30), max_size=3),
    offset=st.integers(0, 3),
)
def test_distinct_count_matches_a_set(name: str, data: Any, cuts: list[int], offset: int) -> None:
    kind, values = KINDS[name]
    rows = data.draw(st.lists(st.one_of(st.none(), values), max_size=30))
    array = pa.array(rows, type=kind)
    bounds = sorted({min(c, len(rows)) for c in cuts} | {0, len(rows)})
    chunked = pa.chunked_array([array.slice(lo, hi - lo) for lo, hi in itertools.pairwise(bounds)], type=kind)
    expected = len({_identity(kind, v) for v in rows if v is not None}) + (None in rows)
    assert distinct_count(array) == expected
    assert distinct_count(chunked) == expected
    tail = array.slice(min(offset, len(rows)))
    assert distinct_count(tail) == len({_identity(kind, v) for v in rows[offset:] if v is not None}) + (
        None in rows[offset:]
    )
    if not pa.types.is_floating(kind):  # Arrow's hash count sees -0.0 and 0.0 as one, and any NaN as one
        assert distinct_count(array) == pc.count_distinct(array, mode="all").as_py()


def test_distinct_count_of_dictionaries_and_empty_arrays() -> None:
    encoded = pa.array(["a", "b", None, "a"]).dictionary_encode()
    assert distinct_count(encoded) == 3
    twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None]), pa.array(["a", "b", "a"]))
    assert distinct_count(twice) == 3  # "a", "b" and NULL
    assert distinct_count(pa.chunked_array([], type=pa.int64())) == 0
    assert distinct_count(pa.array([None, None], type=pa.float64())) == 1
