"""Adversarial: ``mere.arrays.distinct_count`` as the writer's encoding choice (``parquet._dictionary_columns``
and ``writer._dictionary_strings``) over every type a table accepts, on tables of more than 4,096 rows (the
writer samples above that): few or many distinct values, NULLs (all-NULL columns too), NaN payloads and
``-0.0``, chunked inputs with empty chunks and sliced chunks. Every value reads back equal through mere and
through DuckDB reading the data files directly (where DuckDB holds the type), and ``distinct_count``
itself agrees with a Python set and never raises."""

from __future__ import annotations

import itertools
import struct
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import arrays
from mere.io import parquet as P
from mere.write import writer as W

N_MIN = 4_200  # above the writer's 4,096-row sample


def _ints(rng: np.random.Generator, n: int, card: int) -> np.ndarray:
    return rng.integers(0, card, n)


def _values(kind: pa.DataType, rng: np.random.Generator, n: int, card: int) -> pa.Array:
    """``n`` values of ``kind`` drawn from about ``card`` distinct ones."""
    i = _ints(rng, n, card)
    if pa.types.is_integer(kind):
        if pa.types.is_unsigned_integer(kind):
            top = np.iinfo(kind.to_pandas_dtype()).max
            pool = np.array([0, top, top // 2 + 1, 1, *range(2, max(2, card))], dtype=np.uint64)
        else:
            info = np.iinfo(kind.to_pandas_dtype())
            pool = np.array([info.min, info.max, -1, 0, *range(1, max(1, card))], dtype=np.int64)
        return pa.array(pool[i % len(pool)].astype(kind.to_pandas_dtype()), kind)
    if pa.types.is_floating(kind):
        dtype = kind.to_pandas_dtype()
        special = [0.0, -0.0, np.inf, -np.inf, np.nan]
        pool = np.array([*special, *(np.arange(card) / 3.0)], dtype=np.float64).astype(dtype)
        out = pool[i % len(pool)]
        if dtype == np.float64:  # a second NaN payload
            bits = out.view(np.uint64).copy()
            bits[i % 97 == 1] = np.frombuffer(b"\x01\x00\x00\x00\x00\x00\xf8\x7f", np.uint64)[0]
            out = bits.view(np.float64)
        return pa.array(out, kind)
    if pa.types.is_decimal(kind):
        top = 10 ** min(kind.precision, 9) - 1  # (wrapped into the precision, signs both ways)
        unscaled = [(int(x) * 7 - 3) % (2 * top + 1) - top for x in i]
        return pa.array([Decimal(u).scaleb(-kind.scale) for u in unscaled], kind)
    if pa.types.is_date32(kind):
        return pa.array(((i % 50_000) * 37 - 200_000).astype(np.int32)).view(kind)
    if pa.types.is_date64(kind):
        return pa.array((((i % 50_000) * 37 - 20_000) * 86_400_000).astype(np.int64)).view(kind)
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        micros = i.astype(np.int64) * 1_000_003 - 10**12  # (within Python's datetimes in every unit)
        per = {"s": 10**-6, "ms": 10**-3, "us": 1, "ns": 10**3}[kind.unit]
        return pa.array((micros * per).astype(np.int64) if per >= 1 else micros // round(1 / per)).view(kind)
    if pa.types.is_time32(kind):
        day = 86_400 if kind.unit == "s" else 86_400_000
        return pa.array((i * 997 % day).astype(np.int32)).view(kind)
    if pa.types.is_time64(kind):
        day = 86_400_000_000 if kind.unit == "us" else 86_400_000_000_000
        return pa.array((i * 1_000_003 % day).astype(np.int64)).view(kind)
    if pa.types.is_boolean(kind):
        return pa.array(i % 2 == 0)
    if kind in (pa.string(), pa.large_string(), pa.string_view()):
        return pa.array(["é" * (int(x) % 3) + str(x) + ("\x00" if x % 5 == 0 else "") for x in i], kind)
    if kind in (pa.binary(), pa.large_binary(), pa.binary_view()):
        return pa.array([struct.pack("<q", int(x))[: 1 + int(x) % 8] for x in i], kind)
    if pa.types.is_fixed_size_binary(kind):
        return pa.array(
            [struct.pack("<q", int(x)).ljust(kind.byte_width, b"\xff")[: kind.byte_width] for x in i], kind
        )
    if pa.types.is_dictionary(kind):
        return pa.array([f"d{x}" for x in i], pa.string()).dictionary_encode().cast(kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.array([[int(x) % 30_000] * (int(x) % 3) for x in i], kind)  # (int16 items)
    if pa.types.is_struct(kind):
        return pa.array([{"a": int(x) % 120, "b": str(x)} for x in i], kind)
    if pa.types.is_map(kind):
        return pa.array([[("k", int(x) % 100)] * (int(x) % 2) for x in i], kind)
    raise AssertionError(kind)


KINDS: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "decimal128": pa.decimal128(38, 6),
    "decimal32ish": pa.decimal128(5, 2),
    "decimal256": pa.decimal256(50, 4),
    "date32": pa.date32(),
    "date64": pa.date64(),
    "timestamp_s": pa.timestamp("s"),
    "timestamp_ns_tz": pa.timestamp("ns", tz="Asia/Kolkata"),
    "timestamp_us_utc": pa.timestamp("us", tz="UTC"),
    "duration_ms": pa.duration("ms"),
    "duration_ns": pa.duration("ns"),
    "time32_s": pa.time32("s"),
    "time64_ns": pa.time64("ns"),
    "bool": pa.bool_(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "string_view": pa.string_view(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "binary_view": pa.binary_view(),
    "fixed_size_binary": pa.binary(5),
    "dictionary": pa.dictionary(pa.int32(), pa.string()),
    "list": pa.list_(pa.int32()),
    "large_list": pa.large_list(pa.int16()),
    "struct": pa.struct([("a", pa.int8()), ("b", pa.string())]),
    "map": pa.map_(pa.string(), pa.int64()),
}
# Types DuckDB cannot hold as Parquet stores them (wider decimals, halves, durations and views come back
# as other types; the mere read is checked for those).
NOT_IN_DUCKDB = {"decimal256", "float16", "duration_ms", "duration_ns", "string_view", "binary_view", "map"}


def _pieces(values: pa.Array, cuts: list[int]) -> pa.ChunkedArray:
    """``values`` cut into chunks at ``cuts``, each a slice with an offset, with empty chunks between."""
    bounds = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    chunks: list[pa.Array] = [values.slice(0, 0)]
    for a, b in itertools.pairwise(bounds):
        padded = pa.concat_arrays([pa.nulls(3, values.type), values.slice(a, b - a)])
        chunks.append(padded.slice(3, b - a))
        chunks.append(values.slice(len(values), 0))
    return pa.chunked_array(chunks, type=values.type)


def _with_nulls(values: pa.Array, share: float, rng: np.random.Generator) -> pa.Array:
    if share <= 0:
        return values
    if share >= 1:
        return pa.nulls(len(values), values.type)
    mask = pa.array(rng.random(len(values)) < share)
    plain = values.cast(_plain(values.type))
    return pa.compute.if_else(mask, pa.nulls(len(values), plain.type), plain).cast(values.type)


def _counted_calls(monkeypatch: pytest.MonkeyPatch) -> list[pa.DataType]:
    """Spy on the writer's two calls of ``distinct_count`` (to prove the sampled route ran and never raised)."""
    seen: list[pa.DataType] = []
    real = arrays.distinct_count

    def spy(values: Any) -> int:
        seen.append(values.type)
        got = real(values)
        assert 0 <= got <= len(values)
        return got

    monkeypatch.setattr(P, "distinct_count", spy)
    monkeypatch.setattr(W, "distinct_count", spy)
    return seen


def _data_files(t: mere.Table) -> list[str]:
    files = t.files()
    return [
        str(t.storage.full_path(p))
        for p, c in zip(files.column("path").to_pylist(), files.column("content").to_pylist())
        if c == "data"
    ]


def _duckdb_values(t: mere.Table, kind: pa.DataType) -> pa.Table:
    listed = ", ".join(f"'{p}'" for p in _data_files(t))
    got = duckdb.sql(f'select "k", "v" from read_parquet([{listed}]) order by "k"').to_arrow_table()
    return pa.table({"k": got.column("k").cast(pa.int64()), "v": got.column("v").cast(kind)})


def _plain(kind: pa.DataType) -> pa.DataType:
    """The type values are compared in (Arrow cannot sort or take views)."""
    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    return {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}.get(kind, kind)


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """Equal values, NaNs with equal bits equal (``equals`` sees NaN != NaN)."""
    if pa.types.is_floating(a.type):
        width = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[a.type.bit_width]
        a = pa.chunked_array([c.view(width) for c in a.chunks], type=width)
        b = pa.chunked_array([c.view(width) for c in b.chunks], type=width)
    return a.combine_chunks().equals(b.combine_chunks())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(sorted(KINDS)),
    card=st.sampled_from([1, 3, 17, 900, 2_500, 100_000]),
    nulls=st.sampled_from([0.0, 0.3, 0.99, 1.0]),
    n=st.integers(N_MIN, 6_500),
    cuts=st.lists(st.integers(0, 10_000), max_size=4),
    seed=st.integers(0, 2**32 - 1),
    upserted=st.booleans(),
)
def test_every_type_reads_back_after_the_sampled_encoding_choice(
    tmp_path_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    card: int,
    nulls: float,
    n: int,
    cuts: list[int],
    seed: int,
    upserted: bool,
) -> None:
    kind = KINDS[name]
    rng = np.random.default_rng(seed)
    values = _with_nulls(_values(kind, rng, n, card), nulls, rng)
    keys = pa.array(rng.permutation(n).astype(np.int64))
    data = pa.table({"k": _pieces(keys, cuts), "v": _pieces(values, cuts)})
    # distinct_count on the whole column and on the slices the writer takes agrees with a set of Python values
    # (floats by their bits): for hashable types only.
    if not pa.types.is_nested(kind):
        plain = values.cast(_plain(kind))  # (a table stores views as plain strings and binaries)
        stored = values if pa.types.is_dictionary(kind) else plain
        py = plain.to_pylist()
        if pa.types.is_floating(kind):
            width = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[kind.bit_width]
            py = [None if v is None else b for v, b in zip(py, plain.view(width).to_pylist())]
        expected = len(set(py))
        assert arrays.distinct_count(_pieces(stored, cuts)) == expected
        assert arrays.distinct_count(stored.slice(7)) == len(set(py[7:]))
    seen = _counted_calls(monkeypatch)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", kind)])
    cat = mere.connect(str(tmp_path_factory.mktemp("d")))
    t = cat.create_table(
        f"x.t{uuid.uuid4().hex[:8]}",
        schema,
        primary_key="k" if upserted else None,
        properties={"compaction.auto": "off"},
    )
    (t.upsert if upserted else t.append)(data)
    if not pa.types.is_nested(kind) and not pa.types.is_boolean(kind) and not pa.types.is_dictionary(kind):
        assert seen, "the writer's sampled distinct count did not run"
    read = t.to_arrow()
    assert read.schema == t.schema  # (views are stored as plain strings and binaries)
    assert t.schema.field("v").type == _plain(kind)  # (and dictionaries as their values)
    got = read.cast(pa.schema([schema.field("k"), pa.field("v", _plain(kind))])).sort_by("k")
    want = pa.table({"k": keys, "v": values.cast(_plain(kind))}).sort_by("k")
    assert got.num_rows == n
    assert got.column("k").equals(want.column("k"))
    assert _same(got.column("v").cast(_plain(kind)), want.column("v").cast(_plain(kind)))
    if name not in NOT_IN_DUCKDB:
        theirs = _duckdb_values(t, _plain(kind))
        assert theirs.column("k").equals(want.column("k"))
        assert _same(theirs.column("v"), want.column("v").cast(_plain(kind)))


@pytest.mark.parametrize("name", sorted(KINDS))
def test_distinct_count_never_raises_on_a_writer_input(name: str) -> None:
    """Every accepted type, with NULLs, chunked with empty chunks and an offset: a count or, for nested
    types the writer never samples, Arrow's own refusal -- never a crash of the NumPy route."""
    kind = KINDS[name]
    rng = np.random.default_rng(7)
    kind = kind if pa.types.is_dictionary(kind) else _plain(kind)  # views are stored plain
    values = _with_nulls(_values(kind, rng, 500, 40), 0.2, rng)
    chunked = _pieces(values, [0, 10, 10, 499])
    if pa.types.is_nested(kind):
        return  # the writer skips nested columns (``_dictionary_columns``)
    got = arrays.distinct_count(chunked)
    assert got == arrays.distinct_count(values)
    assert 1 <= got <= 41 + 1
    assert arrays.distinct_count(pa.nulls(9, kind)) == 1
    assert arrays.distinct_count(pa.chunked_array([], type=kind)) == 0
    assert arrays.distinct_count(values.slice(500)) == 0


def test_all_null_and_single_value_columns_of_many_rows_round_trip(tmp_path: Path) -> None:
    n = 5_000
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("f", pa.float64()),
            pa.field("s", pa.string()),
            pa.field("t", pa.timestamp("us", tz="Europe/Paris")),
            pa.field("z", pa.float64()),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table("t", schema, primary_key="k")
    data = pa.table(
        {
            "k": pa.array(np.arange(n)),
            "f": pa.nulls(n, pa.float64()),
            "s": pa.array(["same"] * n),
            "t": pa.nulls(n, pa.timestamp("us", tz="Europe/Paris")),
            "z": pa.array(np.where(np.arange(n) % 2 == 0, 0.0, -0.0)),
        },
        schema=schema,
    )
    t.upsert(data)
    got = t.to_arrow().sort_by("k")
    assert got.equals(data)
    signs = np.signbit(got.column("z").to_numpy())
    assert signs.sum() == n // 2  # -0.0 kept apart from 0.0


def test_distinct_count_of_a_dictionary_holding_a_null_value() -> None:
    encoded = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 1, None], pa.int32()), pa.array([None, 5], pa.int64())
    )
    assert arrays.distinct_count(encoded) == 2  # NULL and 5


def test_distinct_count_of_a_string_dictionary_holding_a_null_value() -> None:
    encoded = pa.DictionaryArray.from_arrays(pa.array([0, None, 1], pa.int32()), pa.array([None, "a"]))
    assert arrays.distinct_count(encoded) == 2  # NULL and "a"


def test_float_specials_keep_their_bits_in_a_sampled_file(tmp_path: Path) -> None:
    n = 6_000
    payload = np.frombuffer(b"\x01\x00\x00\x00\x00\x00\xf8\x7f", np.float64)[0]
    pool = np.array([0.0, -0.0, np.nan, payload, np.inf, -np.inf], np.float64)
    x = pool[np.arange(n) % len(pool)]
    t = mere.connect(str(tmp_path)).create_table(
        "t",
        pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("x", pa.float64())]),
        primary_key="k",
    )
    t.upsert(pa.table({"k": np.arange(n), "x": x}))
    got = t.to_arrow().sort_by("k").column("x").to_numpy()
    assert (got.view(np.uint64) == x.view(np.uint64)).all()
