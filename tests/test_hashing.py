"""Tests for mere.hashing: Spark SQL ``hash()`` and ``pmod(hash(...), N)`` bucket ids.

The expected values in ``data/spark_hash_vectors.json`` were produced by real Spark
(see the file's ``generator`` field); these tests do not need pyspark.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from collections.abc import Callable
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mere.errors import InvalidInput, UnsupportedType
from mere.hashing import bucket_ids, spark_hash

VECTORS_PATH = Path(__file__).parent / "data" / "spark_hash_vectors.json"


@cache
def _vectors() -> dict[str, Any]:
    with VECTORS_PATH.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
        return data


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = _vectors()["cases"]
    return cases


# --------------------------------------------------------------------------- decoding


def _decode(tp: str, values: list[Any]) -> pa.Array:
    """Build the Arrow array the vector file describes (its canonical Arrow type)."""
    if tp in ("int8", "int16", "int32", "int64"):
        return pa.array(values, getattr(pa, tp)())
    if tp == "bool":
        return pa.array(values, pa.bool_())
    if tp == "date":
        return pa.array([None if v is None else dt.date.fromisoformat(v) for v in values], pa.date32())
    if tp == "timestamp":
        return pa.array(values, pa.timestamp("us"))
    if tp == "string":
        return pa.array(values, pa.string())
    if tp == "binary":
        return pa.array([None if v is None else bytes.fromhex(v) for v in values], pa.binary())
    if tp.startswith("decimal("):
        p, s = (int(x) for x in tp[len("decimal(") : -1].split(","))
        return pa.array([None if v is None else Decimal(v) for v in values], pa.decimal128(p, s))
    if tp in ("float32", "float64"):
        return pa.array([None if v is None else float(v) for v in values], getattr(pa, tp)())
    raise AssertionError(f"unknown vector type {tp}")


def _expected_pmod(case: dict[str, Any], modulus: int) -> np.ndarray:
    digits = case["pmod"][str(modulus)]
    width = len(str(modulus - 1))
    return np.array([int(digits[i : i + width]) for i in range(0, len(digits), width)], dtype=np.int32)


def _fits(values: np.ndarray, factor: int) -> np.ndarray:
    lim = np.iinfo(np.int64).max // factor
    return (values >= -lim) & (values <= lim)


def _variants(tp: str, arr: pa.Array) -> list[tuple[str, pa.Array, np.ndarray | None]]:
    """Other Arrow encodings of the same Spark values: (label, array, row mask or None for all rows)."""
    out: list[tuple[str, pa.Array, np.ndarray | None]] = []
    if tp in ("int8", "int16", "int32", "int64", "string", "binary", "date", "float64"):
        out.append(("dictionary", arr.dictionary_encode(), None))
    if tp == "string":
        out += [
            ("large_string", arr.cast(pa.large_string()), None),
            ("string_view", arr.cast(pa.string_view()), None),
            ("as_binary", arr.cast(pa.binary()), None),
        ]
    if tp == "binary":
        out += [
            ("large_binary", arr.cast(pa.large_binary()), None),
            ("binary_view", arr.cast(pa.binary_view()), None),
        ]
    if tp == "date":
        out.append(("date64", arr.cast(pa.date64()), None))
    if tp == "timestamp":
        micros = arr.cast(pa.int64()).fill_null(0).to_numpy()
        out += [
            ("us_utc", arr.cast(pa.timestamp("us", tz="UTC")), None),
            ("us_kolkata", arr.cast(pa.timestamp("us", tz="Asia/Kolkata")), None),
        ]
        # Coarser units keep only the values they represent exactly; ns only those that fit.
        for unit, factor in (("ms", 1000), ("s", 1_000_000)):
            mask = micros % factor == 0
            vals = pa.array(micros[mask] // factor, pa.int64()).cast(pa.timestamp(unit, tz="UTC"))
            vals = pc.if_else(arr.filter(pa.array(mask)).is_null(), pa.scalar(None, vals.type), vals)
            out.append((unit, vals, mask))
        mask = _fits(micros, 1000)
        ns = pa.array(micros[mask] * 1000, pa.int64()).cast(pa.timestamp("ns"))
        ns = pc.if_else(arr.filter(pa.array(mask)).is_null(), pa.scalar(None, ns.type), ns)
        out.append(("ns", ns, mask))
    if tp.startswith("decimal("):
        p = arr.type.precision
        s = arr.type.scale
        out.append(("decimal64", arr.cast(pa.decimal64(p, s)), None))
        out.append(("decimal256", arr.cast(pa.decimal256(p, s)), None))
        if p <= 9:
            out.append(("decimal32", arr.cast(pa.decimal32(p, s)), None))
    return out


CASE_IDS = [c["name"] for c in _cases()]


# --------------------------------------------------------------------------- Spark vectors


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_spark_hash_matches_spark(case: dict[str, Any]) -> None:
    cols = [_decode(c["type"], c["values"]) for c in case["columns"]]
    expected = np.array(case["hash"], dtype=np.int32)
    got = spark_hash(cols)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_bucket_ids_match_spark_pmod(case: dict[str, Any]) -> None:
    cols = [_decode(c["type"], c["values"]) for c in case["columns"]]
    table = pa.table({f"k{i}": c for i, c in enumerate(cols)})
    for modulus in _vectors()["moduli"]:
        expected = _expected_pmod(case, modulus)
        got = bucket_ids(table, modulus)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected, err_msg=f"N={modulus}")
        np.testing.assert_array_equal(bucket_ids(cols, modulus), expected)
        if len(cols) == 1:
            np.testing.assert_array_equal(bucket_ids(cols[0], modulus), expected)


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_other_arrow_encodings_match_spark(case: dict[str, Any]) -> None:
    """Each column re-encoded (dictionary, large/view, other units and widths) hashes the same."""
    cols = [_decode(c["type"], c["values"]) for c in case["columns"]]
    expected = np.array(case["hash"], dtype=np.int32)
    checked = 0
    for i, spec in enumerate(case["columns"]):
        for label, variant, mask in _variants(spec["type"], cols[i]):
            if mask is None:
                other = [*cols[:i], variant, *cols[i + 1 :]]
                want = expected
            else:
                keep = pa.array(mask)
                other = [
                    *(c.filter(keep) for c in cols[:i]),
                    variant,
                    *(c.filter(keep) for c in cols[i + 1 :]),
                ]
                want = expected[mask]
            np.testing.assert_array_equal(spark_hash(other), want, err_msg=f"column {i} as {label}")
            checked += 1
    if case["columns"][0]["type"] not in ("bool", "float32"):
        assert checked > 0


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_chunked_and_sliced_inputs_match_spark(case: dict[str, Any]) -> None:
    cols = [_decode(c["type"], c["values"]) for c in case["columns"]]
    expected = np.array(case["hash"], dtype=np.int32)
    n = len(expected)
    # Different chunk boundaries per column.
    chunked = [
        pa.chunked_array([c.slice(0, (k + 1) * n // 5), c.slice((k + 1) * n // 5)])
        for k, c in enumerate(cols)
    ]
    np.testing.assert_array_equal(spark_hash(chunked), expected)
    # Slices with non-zero offsets.
    np.testing.assert_array_equal(spark_hash([c.slice(3) for c in cols]), expected[3:])
    np.testing.assert_array_equal(spark_hash([c.slice(1, n // 2) for c in cols]), expected[1 : 1 + n // 2])


def test_vector_coverage() -> None:
    """The fixture has several hundred values for every scalar type and multi-column cases."""
    single = {c["name"]: len(c["hash"]) for c in _cases() if len(c["columns"]) == 1}
    for tp in ("int16", "int32", "int64", "date", "timestamp", "string", "binary", "float32", "float64"):
        assert single[tp] >= 240, tp
    assert single["int8"] == 259  # every int8 value plus nulls
    assert {len(c["columns"]) for c in _cases()} == {1, 2, 3}


def test_spark_spot_checks() -> None:
    """Spark's recorded answers to a few literal queries (-0.0, NaN, null)."""
    spot = _vectors()["spot_checks"]
    f64 = pa.array([0.0, -0.0, float("nan")], pa.float64())
    np.testing.assert_array_equal(spark_hash([f64]), [spot["a"], spot["b"], spot["c"]])
    f32 = pa.array([0.0, -0.0, float("nan")], pa.float32())
    np.testing.assert_array_equal(spark_hash([f32]), [spot["d"], spot["e"], spot["f"]])
    assert spark_hash([pa.array([None], pa.int32())])[0] == spot["g"] == 42
    assert spark_hash([pa.array(["Spark"])])[0] == spot["h"]
    assert spark_hash([pa.array([0], pa.int64())])[0] == spot["i"]
    assert spark_hash([pa.array([0], pa.int32())])[0] == spot["j"]
    assert spark_hash([pa.array([None], pa.int32()), pa.array([None], pa.string())])[0] == spot["k"]


def test_all_nan_payloads_hash_like_canonical_nan() -> None:
    """Java's floatToIntBits/doubleToLongBits collapse every NaN to one bit pattern."""
    spot = _vectors()["spot_checks"]
    f32_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FC12345], dtype=np.uint32)
    f32 = pa.array(f32_bits.view(np.float32))
    assert (spark_hash([f32]) == spot["f"]).all()
    f64_bits = np.array(
        [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF], dtype=np.uint64
    )
    f64 = pa.array(f64_bits.view(np.float64))
    assert (spark_hash([f64]) == spot["c"]).all()


# --------------------------------------------------------------------------- scalar reference

_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _mix_k1(k: int) -> int:
    return (_rotl((k * 0xCC9E2D51) & _M, 15) * 0x1B873593) & _M


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M


def _fmix(h: int, n: int) -> int:
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M
    return h ^ (h >> 16)


def _ref_bytes(b: bytes, seed: int) -> int:
    """Row-at-a-time transcription of Spark's legacy hashUnsafeBytes (reference only)."""
    h = seed & _M
    aligned = len(b) - len(b) % 4
    for i in range(0, aligned, 4):
        h = _mix_h1(h, _mix_k1(int.from_bytes(b[i : i + 4], "little")))
    for i in range(aligned, len(b)):
        signed = b[i] - 256 if b[i] >= 128 else b[i]
        h = _mix_h1(h, _mix_k1(signed & _M))
    return _fmix(h, len(b))


def _ref_long(v: int, seed: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return _fmix(_mix_h1(_mix_h1(seed & _M, _mix_k1(v & _M)), _mix_k1(v >> 32)), 8)


def _as_i32(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


# --------------------------------------------------------------------------- properties

_binary_lists = st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60)
_text_lists = st.lists(st.one_of(st.none(), st.text(max_size=20)), max_size=60)
_int64_lists = st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=80)


@settings(max_examples=100, deadline=None)
@given(_binary_lists, st.integers(-(2**31), 2**31 - 1))
def test_bytes_match_scalar_reference(values: list[bytes | None], seed: int) -> None:
    got = spark_hash([pa.array(values, pa.binary())], seed=seed)
    want = [_as_i32(seed & _M) if v is None else _as_i32(_ref_bytes(v, seed)) for v in values]
    assert got.tolist() == want


@settings(max_examples=100, deadline=None)
@given(_int64_lists, st.integers(-(2**31), 2**31 - 1))
def test_int64_match_scalar_reference(values: list[int | None], seed: int) -> None:
    got = spark_hash([pa.array(values, pa.int64())], seed=seed)
    want = [_as_i32(seed & _M) if v is None else _as_i32(_ref_long(v, seed)) for v in values]
    assert got.tolist() == want


@st.composite
def _arrays(draw: st.DrawFn) -> pa.Array:
    kind = draw(st.sampled_from(["int64", "int32", "int8", "string", "binary", "float64", "bool", "decimal"]))
    if kind == "string":
        return pa.array(draw(_text_lists), pa.string())
    if kind == "binary":
        return pa.array(draw(_binary_lists), pa.binary())
    if kind == "float64":
        return pa.array(draw(st.lists(st.one_of(st.none(), st.floats()), max_size=60)), pa.float64())
    if kind == "bool":
        return pa.array(draw(st.lists(st.one_of(st.none(), st.booleans()), max_size=60)), pa.bool_())
    if kind == "decimal":
        ints = draw(st.lists(st.one_of(st.none(), st.integers(-(10**18) + 1, 10**18 - 1)), max_size=60))
        return pa.array([None if i is None else Decimal(i).scaleb(-4) for i in ints], pa.decimal128(18, 4))
    bits = {"int64": 64, "int32": 32, "int8": 8}[kind]
    ranged = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return pa.array(draw(st.lists(st.one_of(st.none(), ranged), max_size=60)), getattr(pa, kind)())


@settings(max_examples=150, deadline=None)
@given(_arrays(), st.data())
def test_chunked_sliced_and_contiguous_agree(arr: pa.Array, data: st.DataObject) -> None:
    whole = spark_hash([arr])
    n = len(arr)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    chunks = [arr.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    np.testing.assert_array_equal(spark_hash([pa.chunked_array(chunks, type=arr.type)]), whole)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    np.testing.assert_array_equal(spark_hash([arr.slice(start, stop - start)]), whole[start:stop])
    # A slice of a concatenation with junk around it.
    padded = pa.concat_arrays([arr.slice(0, start), arr, arr.slice(stop)])
    np.testing.assert_array_equal(spark_hash([padded.slice(start, n)]), whole)


@settings(max_examples=100, deadline=None)
@given(_text_lists)
def test_string_encodings_agree(values: list[str | None]) -> None:
    base = pa.array(values, pa.string())
    want = spark_hash([base])
    for t in (pa.large_string(), pa.string_view(), pa.binary(), pa.large_binary(), pa.binary_view()):
        np.testing.assert_array_equal(spark_hash([base.cast(t)]), want, err_msg=str(t))
    np.testing.assert_array_equal(spark_hash([base.dictionary_encode()]), want)


@settings(max_examples=100, deadline=None)
@given(_arrays(), st.integers(1, 2**31 - 1))
def test_bucket_ids_in_range_and_pmod(arr: pa.Array, modulus: int) -> None:
    ids = bucket_ids(arr, modulus)
    assert ids.dtype == np.int32
    assert ((ids >= 0) & (ids < modulus)).all()
    h = spark_hash([arr]).astype(np.int64)
    np.testing.assert_array_equal(ids, h % modulus)


@settings(max_examples=100, deadline=None)
@given(_arrays(), _arrays())
def test_nulls_leave_the_running_hash_unchanged(a: pa.Array, b: pa.Array) -> None:
    n = min(len(a), len(b))
    a, b = a.slice(0, n), b.slice(0, n)
    ha = spark_hash([a])
    all_null = pa.nulls(n, b.type)
    np.testing.assert_array_equal(spark_hash([a, all_null]), ha)
    np.testing.assert_array_equal(spark_hash([all_null, a]), ha)
    np.testing.assert_array_equal(spark_hash([a, pa.nulls(n)]), ha)
    hab = spark_hash([a, b])
    b_null = b.is_null().to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(hab[b_null], ha[b_null])
    # Chaining: the second column is hashed with the first column's hash as its seed.
    for i in range(min(n, 5)):
        np.testing.assert_array_equal(hab[i : i + 1], spark_hash([b.slice(i, 1)], seed=int(ha[i])))


# --------------------------------------------------------------------------- edge cases


def test_null_slots_with_garbage_bytes_are_skipped() -> None:
    """A null string slot may still span bytes; they must not affect anything."""
    data = pa.py_buffer(b"abcdefghij")
    offsets = pa.py_buffer(np.array([0, 3, 10, 10], dtype=np.int32).tobytes())
    validity = pa.py_buffer(bytes([0b101]))
    arr = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data], null_count=1)
    np.testing.assert_array_equal(spark_hash([arr]), spark_hash([pa.array(["abc", None, ""])]))


def test_empty_and_all_null_inputs() -> None:
    for t in (pa.int64(), pa.string(), pa.binary(), pa.float32(), pa.bool_(), pa.decimal128(10, 2)):
        assert spark_hash([pa.array([], t)]).tolist() == []
        assert spark_hash([pa.nulls(4, t)]).tolist() == [42] * 4
        assert bucket_ids(pa.chunked_array([], t), 7).tolist() == []
    assert spark_hash([pa.array(["", "", ""])]).tolist() == [142593372] * 3
    assert spark_hash([pa.array([1, 2], pa.int32())], seed=0).dtype == np.int32


def test_known_values() -> None:
    # Values from Spark's documentation / a Spark shell.
    assert spark_hash([pa.array([0, None, 4], pa.int32())]).tolist() == [933211791, 42, -397064898]
    assert spark_hash([pa.array(["Spark"])]).tolist() == [228093765]


def test_record_batch_and_sequence_inputs_agree() -> None:
    a = pa.array([1, None, 3, -7], pa.int64())
    b = pa.array(["x", "yy", None, "zzzzz"])
    want = bucket_ids([a, b], 16)
    np.testing.assert_array_equal(bucket_ids(pa.record_batch([a, b], names=["a", "b"]), 16), want)
    np.testing.assert_array_equal(bucket_ids(pa.table([a, b], names=["a", "b"]), 16), want)
    np.testing.assert_array_equal(bucket_ids((a, b), np.int64(16)), want)
    np.testing.assert_array_equal(spark_hash(a), spark_hash([a]))


def test_timestamp_nanoseconds_floor_to_micros() -> None:
    ns = pa.array([-1, -999, -1000, -1001, 0, 999, 1001], pa.timestamp("ns"))
    us = pa.array([-1, -1, -1, -2, 0, 0, 1], pa.timestamp("us"))
    np.testing.assert_array_equal(spark_hash([ns]), spark_hash([us]))


# --------------------------------------------------------------------------- errors

_UNSUPPORTED: list[tuple[str, Callable[[], pa.Array]]] = [
    ("uint8", lambda: pa.array([1], pa.uint8())),
    ("uint32", lambda: pa.array([1], pa.uint32())),
    ("uint64", lambda: pa.array([1], pa.uint64())),
    ("float16", lambda: pa.array([np.float16(1)], pa.float16())),
    ("decimal128(19, 0)", lambda: pa.array([Decimal(1)], pa.decimal128(19, 0))),
    ("decimal256(40, 2)", lambda: pa.array([Decimal(1)], pa.decimal256(40, 2))),
    ("list<item: int64>", lambda: pa.array([[1]], pa.list_(pa.int64()))),
    ("struct<a: int64>", lambda: pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))),
    ("map<string, int64>", lambda: pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))),
    ("time64[us]", lambda: pa.array([1], pa.time64("us"))),
    ("duration[s]", lambda: pa.array([1], pa.duration("s"))),
    ("fixed_size_binary[2]", lambda: pa.array([b"ab"], pa.binary(2))),
]


@pytest.mark.parametrize(("name", "make"), _UNSUPPORTED, ids=[n for n, _ in _UNSUPPORTED])
def test_unsupported_types_raise(name: str, make: Callable[[], pa.Array]) -> None:
    arr = make()
    with pytest.raises(UnsupportedType, match=re.escape(str(arr.type))):
        spark_hash([arr])
    with pytest.raises(UnsupportedType):
        bucket_ids(pa.table({"ok": pa.array([1]), "bad": arr}), 4)
    with pytest.raises(UnsupportedType):  # also inside a dictionary / chunked array
        spark_hash([pa.chunked_array([arr])])


@pytest.mark.parametrize("modulus", [0, -1, -16, 2**31, 1.5, 4.0, True, "4", None])
def test_bad_bucket_count_raises(modulus: Any) -> None:
    with pytest.raises(InvalidInput):
        bucket_ids(pa.array([1, 2, 3]), modulus)


def test_bad_columns_raise() -> None:
    with pytest.raises(InvalidInput):
        spark_hash([])
    with pytest.raises(InvalidInput):
        spark_hash([pa.array([1, 2]), pa.array([1])])
    with pytest.raises(InvalidInput):
        spark_hash([[1, 2, 3]])
    with pytest.raises(InvalidInput):
        bucket_ids(np.arange(3), 4)
    with pytest.raises(InvalidInput):
        bucket_ids(pa.table({}), 4)


def test_timestamp_overflow_raises() -> None:
    with pytest.raises(InvalidInput):
        spark_hash([pa.array([2**62], pa.timestamp("s"))])
    # Null slots are not checked.
    arr = pa.Array.from_buffers(
        pa.timestamp("s"),
        2,
        [pa.py_buffer(bytes([0b10])), pa.py_buffer(np.array([2**62, 5], np.int64).tobytes())],
    )
    assert (
        spark_hash([arr]).tolist() == spark_hash([pa.array([None, 5_000_000], pa.timestamp("us"))]).tolist()
    )
