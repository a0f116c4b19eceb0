"""Spark SQL compatible hashing: ``hash(c1, ..., cn)`` and ``pmod(hash(...), N)`` bucket ids.

Spark's ``hash`` is Murmur3_x86_32 with seed 42, chained across its arguments: each
column is hashed with the running hash as its seed, and a null leaves the running hash
unchanged. Everything here is vectorised with NumPy over Arrow buffers: there are loops
over columns, chunks and 4-byte word positions, never over rows.

Type mapping (Spark type -> Murmur3 routine):

* int8 / int16 / int32 / date32 -> ``hashInt`` of the value (date32: days since epoch).
* int64 -> ``hashLong`` (low 32-bit word, then high word).
* timestamp (any unit, any time zone) -> ``hashLong`` of microseconds since the epoch,
  sub-microsecond values floored as Spark does when it reads a nanosecond instant.
* bool -> ``hashInt(1 or 0)``.
* string / binary (plain, large, view) -> Spark's legacy ``hashUnsafeBytes``: little-endian
  4-byte words, then each trailing byte separately as a *signed* byte, then the
  finaliser with the byte length.
* decimal with precision <= 18 -> ``hashLong`` of the unscaled value.
* float32 -> ``hashInt(floatToIntBits(x))``, float64 -> ``hashLong(doubleToLongBits(x))``;
  both map -0.0 to 0.0 and collapse every NaN to Java's canonical NaN bits.
* null type -> leaves the hash unchanged (Spark's ``NullType``).
* dictionary arrays are decoded first.

Anything else (unsigned integers, decimals with precision > 18, nested types, ...)
raises :class:`~mere.errors.UnsupportedType`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, SupportsIndex, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from mere.errors import InvalidInput, UnsupportedType

__all__ = ["SPARK_HASH_SEED", "bucket_ids", "spark_hash"]

SPARK_HASH_SEED = 42
"""The seed Spark SQL's ``hash()`` starts from."""

U32: TypeAlias = npt.NDArray[np.uint32]
ArrayLike: TypeAlias = pa.Array | pa.ChunkedArray
_ARRAY_CLASSES = (pa.Array, pa.ChunkedArray)

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_H_ADD = np.uint32(0xE6546B64)
_FMIX1 = np.uint32(0x85EBCA6B)
_FMIX2 = np.uint32(0xC2B2AE35)
_FIVE = np.uint32(5)
_FLOAT_NAN_BITS = np.uint32(0x7FC00000)  # Float.floatToIntBits(NaN)
_DOUBLE_NAN_BITS = np.int64(0x7FF8000000000000)  # Double.doubleToLongBits(NaN)
_MICROS_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_INT64_MAX = np.iinfo(np.int64).max
_MAX_BUCKETS = 2**31 - 1


# --------------------------------------------------------------------------- Murmur3 core
# All helpers take uint32 arrays and rely on NumPy's modular uint32 arithmetic; callers run
# them inside ``np.errstate(over="ignore")`` so 0-d inputs cannot warn either.


def _rotl(x: U32, r: int) -> U32:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k: U32) -> U32:
    k = k * _C1
    k = _rotl(k, 15)
    k *= _C2
    return k


def _mix_h1(h: U32, k: U32) -> U32:
    h = h ^ k
    h = _rotl(h, 13)
    h *= _FIVE
    h += _H_ADD
    return h


def _fmix(h: U32, length: U32 | np.uint32) -> U32:
    h = h ^ length
    h ^= h >> np.uint32(16)
    h *= _FMIX1
    h ^= h >> np.uint32(13)
    h *= _FMIX2
    h ^= h >> np.uint32(16)
    return h


def _hash_int(values: U32, seed: U32) -> U32:
    """Murmur3_x86_32.hashInt for each (value, seed) pair."""
    return _fmix(_mix_h1(seed, _mix_k1(values)), np.uint32(4))


def _hash_long(values: npt.NDArray[np.int64], seed: U32) -> U32:
    """Murmur3_x86_32.hashLong: the low 32-bit word, then the high word."""
    words = np.ascontiguousarray(values, dtype="<i8").view("<u4").reshape(-1, 2)
    h = _mix_h1(seed, _mix_k1(words[:, 0]))
    h = _mix_h1(h, _mix_k1(words[:, 1]))
    return _fmix(h, np.uint32(8))


def _hash_bytes(
    starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], data: npt.NDArray[np.uint8], seed: U32
) -> U32:
    """Spark's legacy Murmur3_x86_32.hashUnsafeBytes over ``data[starts[i]:starts[i] + lengths[i]]``.

    Vectorised over rows: the loop walks 4-byte word positions, keeping only the rows that
    are still long enough, then handles the (at most three) trailing bytes.
    """
    nwords = lengths >> 2
    h = seed.copy()

    if nwords.size and int(nwords.max()) > 0:
        # An overlapping, unaligned little-endian uint32 view: words[j] = data[j:j + 4].
        words = np.ndarray(shape=(data.size - 3,), dtype="<u4", buffer=data, strides=(1,))
        idx = np.flatnonzero(nwords)
        pos = starts[idx]
        left = nwords[idx]
        hs = h[idx]
        while idx.size:
            hs = _mix_h1(hs, _mix_k1(words[pos]))
            left -= 1
            pos += 4
            done = left == 0
            if done.any():
                h[idx[done]] = hs[done]
                keep = ~done
                idx, pos, left, hs = idx[keep], pos[keep], left[keep], hs[keep]

    tail_len = lengths & 3
    tail_start = starts + (nwords << 2)
    signed = data.view(np.int8)
    for t in range(3):
        sel = np.flatnonzero(tail_len > t)
        if not sel.size:
            break
        byte = signed[tail_start[sel] + t].astype(np.int32).view(np.uint32)
        h[sel] = _mix_h1(h[sel], _mix_k1(byte))

    return _fmix(h, lengths.astype(np.uint32))


# --------------------------------------------------------------------------- Arrow access


def _fixed_values(arr: pa.Array, dtype: npt.DTypeLike, per_slot: int = 1) -> npt.NDArray[Any]:
    """The value buffer of a fixed-width array as NumPy (zero-copy, slice-aware)."""
    buf = arr.buffers()[1]
    n = len(arr)
    if buf is None or n == 0:
        return np.zeros(n * per_slot, dtype=dtype)
    start = arr.offset * per_slot
    return np.frombuffer(buf, dtype=dtype, count=start + n * per_slot)[start:]


def _valid_mask(arr: pa.Array) -> npt.NDArray[np.bool_] | None:
    """Validity as a bool array, or None when the array has no nulls."""
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)


def _timestamp_micros(arr: pa.Array, valid: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.int64]:
    """Microseconds since the epoch; raises InvalidInput if a non-null value overflows int64."""
    unit = arr.type.unit
    raw = _fixed_values(arr, np.int64).astype(np.int64, copy=False)
    if unit == "ns":
        return raw // 1000
    factor = _MICROS_PER_UNIT[unit]
    if factor == 1:
        return raw
    limit = _INT64_MAX // factor
    checked = raw if valid is None else raw[valid]
    if checked.size and (int(checked.max()) > limit or int(checked.min()) < -limit):
        raise InvalidInput(f"timestamp[{unit}] value does not fit in int64 microseconds")
    return raw * factor


def _float_bits(arr: pa.Array) -> U32:
    x = _fixed_values(arr, np.float32)
    bits = x.view(np.uint32).copy()
    bits[x == 0] = 0  # -0.0 hashes like 0.0
    bits[np.isnan(x)] = _FLOAT_NAN_BITS
    return bits


def _double_bits(arr: pa.Array) -> npt.NDArray[np.int64]:
    x = _fixed_values(arr, np.float64)
    bits = x.view(np.int64).copy()
    bits[x == 0] = 0
    bits[np.isnan(x)] = _DOUBLE_NAN_BITS
    return bits


def _decimal_unscaled(arr: pa.Array) -> npt.NDArray[np.int64]:
    t = arr.type
    if t.precision > 18:
        raise UnsupportedType(
            f"cannot hash {t}: Spark hashes decimals with precision > 18 as bytes, which is not supported"
        )
    width = t.byte_width
    if width == 4:
        return _fixed_values(arr, "<i4").astype(np.int64)  # decimal32
    # decimal64/128/256 are little-endian two's complement; with precision <= 18 the low
    # 8 bytes hold the whole value.
    per_slot = width // 8
    return cast(npt.NDArray[np.int64], _fixed_values(arr, "<i8", per_slot)[::per_slot])


def _binary_parts(arr: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """(offsets, data) of a (large) string/binary array, offsets sliced to the array."""
    t = arr.type
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
        t = arr.type
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    _, off_buf, data_buf = arr.buffers()
    n = len(arr)
    if off_buf is None:  # pragma: no cover - arrow always allocates offsets for n > 0
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        off = np.frombuffer(off_buf, dtype="<i8" if large else "<i4", count=arr.offset + n + 1)
        offsets = off[arr.offset :].astype(np.int64)
    if data_buf is None or data_buf.size == 0:
        data = np.zeros(0, dtype=np.uint8)
    else:
        data = np.frombuffer(data_buf, dtype=np.uint8)
    return offsets, data


_STRINGISH = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_string_view,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_binary_view,
)


def _hash_array(arr: pa.Array, seed: U32) -> U32:
    """Hash one contiguous array with per-row seeds; nulls keep their seed."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _hash_array(arr.dictionary_decode(), seed)
    if pa.types.is_null(t):
        return seed.copy()

    valid = _valid_mask(arr)
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t) or pa.types.is_date32(t):
        width = {1: "<i1", 2: "<i2", 4: "<i4"}[t.byte_width]
        values = _fixed_values(arr, width).astype(np.int32, copy=False).view(np.uint32)
        out = _hash_int(values, seed)
    elif pa.types.is_int64(t):
        out = _hash_long(_fixed_values(arr, "<i8"), seed)
    elif pa.types.is_timestamp(t):
        out = _hash_long(_timestamp_micros(arr, valid), seed)
    elif pa.types.is_date64(t):
        out = _hash_int((_fixed_values(arr, "<i8") // 86_400_000).astype(np.int32).view(np.uint32), seed)
    elif pa.types.is_boolean(t):
        bits = np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint32)
        out = _hash_int(bits, seed)
    elif pa.types.is_float32(t):
        out = _hash_int(_float_bits(arr), seed)
    elif pa.types.is_float64(t):
        out = _hash_long(_double_bits(arr), seed)
    elif pa.types.is_decimal(t):
        out = _hash_long(_decimal_unscaled(arr), seed)
    elif any(check(t) for check in _STRINGISH):
        offsets, data = _binary_parts(arr)
        starts = offsets[:-1]
        lengths = offsets[1:] - starts
        if valid is not None:
            lengths[~valid] = 0  # do not walk the bytes of null slots
        out = _hash_bytes(starts, lengths, data, seed)
    else:
        raise UnsupportedType(f"cannot compute a Spark hash of Arrow type {t}")

    if valid is not None:
        out = np.where(valid, out, seed)
    return out


# --------------------------------------------------------------------------- public API


def _as_columns(keys: object) -> list[ArrayLike]:
    """Normalise keys to a list of key columns."""
    if isinstance(keys, pa.Table | pa.RecordBatch):
        cols: list[object] = list(keys.columns)
    elif isinstance(keys, _ARRAY_CLASSES):
        cols = [keys]
    elif isinstance(keys, Sequence) and not isinstance(keys, str | bytes):
        cols = list(keys)
    else:
        raise InvalidInput(f"expected Arrow key columns, got {type(keys).__name__}")
    if not cols:
        raise InvalidInput("Spark's hash needs at least one column")
    out: list[ArrayLike] = []
    for i, col in enumerate(cols):
        if not isinstance(col, _ARRAY_CLASSES):
            raise InvalidInput(f"key column {i} is a {type(col).__name__}, not a pyarrow Array/ChunkedArray")
        out.append(col)
    lengths = {len(c) for c in out}
    if len(lengths) > 1:
        raise InvalidInput(f"key columns have different lengths: {sorted(lengths)}")
    return out


def _hash_columns(columns: list[ArrayLike], seed: int) -> U32:
    n = len(columns[0])
    h = np.full(n, seed & 0xFFFFFFFF, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for col in columns:
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            pos = 0
            for chunk in chunks:
                m = len(chunk)
                if m:
                    h[pos : pos + m] = _hash_array(chunk, h[pos : pos + m])
                pos += m
    return h


def spark_hash(columns: Sequence[pa.Array | pa.ChunkedArray], seed: int = SPARK_HASH_SEED) -> np.ndarray:
    """Spark SQL ``hash(c1, ..., cn)`` of each row, as an int32 array.

    ``columns`` are equal-length Arrow arrays (chunked or not; a single array is also
    accepted). Raises :class:`UnsupportedType` for a type Spark's hash is not reproduced
    for, and :class:`InvalidInput` for no columns or columns of different lengths.
    """
    return _hash_columns(_as_columns(columns), seed).view(np.int32)


def bucket_ids(
    keys: pa.Table | pa.RecordBatch | pa.Array | pa.ChunkedArray | Sequence[pa.Array | pa.ChunkedArray],
    num_buckets: SupportsIndex,
) -> np.ndarray:
    """Spark SQL ``pmod(hash(k1, ..., kn), num_buckets)`` of each row, as int32 in ``[0, num_buckets)``.

    ``keys`` is a table or record batch (all its columns are key columns, in order), a
    single array, or a sequence of arrays.
    """
    if isinstance(num_buckets, bool | np.bool_):
        raise InvalidInput(f"num_buckets must be a positive int, got {num_buckets!r}")
    try:
        n = operator.index(num_buckets)
    except TypeError:
        raise InvalidInput(f"num_buckets must be a positive int, got {num_buckets!r}") from None
    if not 0 < n <= _MAX_BUCKETS:
        raise InvalidInput(f"num_buckets must be in [1, {_MAX_BUCKETS}], got {n}")
    h = _hash_columns(_as_columns(keys), SPARK_HASH_SEED).view(np.int32).astype(np.int64)
    return np.mod(h, n).astype(np.int32)
