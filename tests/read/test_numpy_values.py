"""Arrow arrays as NumPy values without Arrow's ``to_numpy`` (which imports pandas first), and NumPy numbers
back to Arrow without ``pa.array``: checked against Arrow's own conversions on every width and at every
offset and length, with and without NULLs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from mere.kernels import arrow_numbers, numpy_sortable_array, operation_codes, plain_values
from mere.spec import OP_COLUMN

NUMBERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
FLOATS = [pa.float16(), pa.float32(), pa.float64()]
TEMPORAL = [pa.date32(), pa.date64(), pa.timestamp("s"), pa.timestamp("us", tz="UTC"), pa.timestamp("ns")]


@st.composite
def sliced_arrays(draw: st.DrawFn) -> pa.Array:
    kind = draw(st.sampled_from([*NUMBERS, *FLOATS, *TEMPORAL, pa.bool_()]))
    n = draw(st.integers(0, 70))
    raw = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, 256, n * 8, dtype=np.uint8)
    if pa.types.is_boolean(kind):
        values = pa.array(raw[:n] % 2 == 1)
    else:
        width = kind.bit_width // 8
        values = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(raw[: n * width].tobytes())])
    if draw(st.booleans()) and n:
        mask = np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        values = pc.if_else(pa.array(mask), pa.nulls(n, kind), values)
    start = draw(st.integers(0, n))
    return values.slice(start, draw(st.integers(0, n - start)))


def _same(ours: np.ndarray, arrows: np.ndarray) -> bool:
    if ours.dtype.kind in "mM" and ours.dtype == arrows.dtype:  # NaT equals NaT here: compare the integers
        return bool(np.array_equal(ours.view(np.int64), arrows.view(np.int64)))
    if ours.dtype.kind == "f" or arrows.dtype.kind == "f":
        return bool(np.array_equal(ours, arrows, equal_nan=True))
    return ours.dtype == arrows.dtype and bool(np.array_equal(ours, arrows))


@given(sliced_arrays())
def test_plain_values_are_arrows_own_conversion(arr: pa.Array) -> None:
    ours = plain_values(arr)
    assert len(ours) == len(arr)
    assert _same(ours, np.asarray(arr.to_numpy(zero_copy_only=False)))


@given(sliced_arrays())
def test_sortable_values_are_the_integer_views_arrow_gives(arr: pa.Array) -> None:
    if arr.null_count:
        return  # callers look at NULLs first (booleans with NULLs have no int8 values)
    ours = numpy_sortable_array(arr)
    assert ours is not None and len(ours) == len(arr)
    if pa.types.is_boolean(arr.type):
        expected = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int8)
    elif pa.types.is_date32(arr.type):
        expected = arr.view(pa.int32()).to_numpy()
    elif pa.types.is_temporal(arr.type):
        expected = arr.view(pa.int64()).to_numpy()
    else:
        expected = arr.to_numpy()
    assert _same(ours, expected)


@given(sliced_arrays())
def test_numbers_go_back_to_arrow_unchanged(arr: pa.Array) -> None:
    if arr.null_count or not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        return
    back = arrow_numbers(plain_values(arr))
    assert back.type == arr.type and back.null_count == 0
    assert _same(back.to_numpy(), arr.to_numpy())


@given(st.lists(st.lists(st.sampled_from([0, 1, 2]), max_size=20), max_size=4))
def test_operation_codes_of_any_chunking(chunks: list[list[int]]) -> None:
    column = pa.chunked_array([pa.array(c, pa.int8()) for c in chunks], type=pa.int8())
    table = pa.table({OP_COLUMN: column})
    expected = np.asarray([v for c in chunks for v in c], dtype=np.int8)
    got = operation_codes(table)
    assert got.dtype == np.int8 and np.array_equal(got, expected)
