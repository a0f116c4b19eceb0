"""Key indexes of Parquet files: Bloom filters on the key columns and the page index, read by hand.

mere writes key-sorted files with what the Parquet format offers for point reads (see
:func:`writer_options`): a split-block Bloom filter (SBBF) per key column and row group, the page
index (each page's byte range, first row and min/max) and pages of at most ``PAGE_ROWS`` rows. pyarrow
writes all of them but reads none back, so this module parses them itself:

- the Thrift compact protocol of the footer, page indexes, Bloom filter headers and page headers;
- XXH64 (the Bloom filters' hash) of the plain encoding of many probe values at once, in NumPy;
- a few rows of a row group: the pages that hold them (and dictionary pages) are fetched and put
  together as a small Parquet file of their own, which pyarrow decodes.

Every answer is conservative: anything unexpected (a file written without the index, a type or an
encoding not handled here, a malformed structure) means "maybe", never "not there". Bytes are
fetched by :class:`~mere.io.storage.Storage` only.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mere.arrays import sorted_unique
from mere.io.footer import relaxed

if TYPE_CHECKING:
    from mere.io.storage import Storage

__all__ = [
    "PAGE_ROWS",
    "FileIndex",
    "ProbeValues",
    "ThriftError",
    "bloom_excluded",
    "candidate_rows",
    "file_index",
    "probe_values",
    "read_rows",
    "writer_options",
    "xxh64",
]

PAGE_ROWS = 4096  # rows per data page of key-sorted files: a point read decodes this many rows per column
BLOOM_FPP = 0.01  # asked of the writer; sizes round up to a power of two: files get 1% to 0.1%
WHOLE_SHARE = 0.75  # when a row group's selected pages hold more than this share of its bytes, read it whole
WRITE_INDEX = True  # False: write files as mere did before key indexes (benchmarks, compatibility tests)


def writer_options(table: pa.Table, key_columns: Sequence[str], row_group_rows: int) -> dict[str, Any]:
    """ParquetWriter options that give a key-sorted file its key index.

    A Bloom filter per key column (booleans cannot have one) sized for one row group's rows, the page
    index, and pages of ``PAGE_ROWS`` rows (Arrow's default, 20,000, is more than a row group of ours).
    """
    if not WRITE_INDEX:
        return {}
    ndv = max(1, min(row_group_rows, table.num_rows))
    bloom = {
        c: {"ndv": ndv, "fpp": BLOOM_FPP}
        for c in key_columns
        if c in table.column_names and not pa.types.is_boolean(table.schema.field(c).type)
    }
    return {"write_page_index": True, "max_rows_per_page": PAGE_ROWS, "bloom_filter_options": bloom or None}


# -- Thrift compact protocol ------------------------------------------------------------------------
# A struct decodes to {field id: (compact type, value)}: enough to encode it again, edited or not.

_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
Struct = dict[int, tuple[int, Any]]


class ThriftError(ValueError):
    """Bytes that are not the Thrift structure expected."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ThriftError("varint too long")


def _list_header(buf: bytes, pos: int) -> tuple[int, int, int]:
    """A list's (size, element type, position of its first element)."""
    head = buf[pos]
    size, etype = head >> 4, head & 0x0F
    pos += 1
    if size == 15:
        size, pos = _varint(buf, pos)
    return size, etype, pos


def _value(buf: bytes, pos: int, ttype: int) -> tuple[Any, int]:
    if ttype in (_I16, _I32, _I64):
        v, pos = _varint(buf, pos)
        return (v >> 1) ^ -(v & 1), pos
    if ttype == _BINARY:
        n, pos = _varint(buf, pos)
        if pos + n > len(buf):
            raise ThriftError("truncated binary")
        return bytes(buf[pos : pos + n]), pos + n
    if ttype == _STRUCT:
        return decode(buf, pos)
    if ttype in (_LIST, _SET):
        size, etype, pos = _list_header(buf, pos)
        items: list[Any] = []
        if etype in (_TRUE, _FALSE):
            items = [b == _TRUE for b in buf[pos : pos + size]]
            return (etype, items), pos + size
        for _ in range(size):
            item, pos = _value(buf, pos, etype)
            items.append(item)
        return (etype, items), pos
    if ttype == _BYTE:
        return struct.unpack_from("b", buf, pos)[0], pos + 1
    if ttype == _DOUBLE:
        return bytes(buf[pos : pos + 8]), pos + 8
    if ttype == _MAP:
        size, pos = _varint(buf, pos)
        if size == 0:
            return (0, 0, []), pos
        kinds = buf[pos]
        pos += 1
        pairs = []
        for _ in range(size):
            k, pos = _value(buf, pos, kinds >> 4)
            v, pos = _value(buf, pos, kinds & 0x0F)
            pairs.append((k, v))
        return (kinds >> 4, kinds & 0x0F, pairs), pos
    raise ThriftError(f"unknown compact type {ttype}")


def decode(buf: bytes, pos: int = 0, skip: int = -1) -> tuple[Struct, int]:
    """The compact-protocol struct starting at ``pos``, and the position after it; field ``skip`` is
    stepped over rather than decoded."""
    out: Struct = {}
    last = 0
    try:
        while True:
            head = buf[pos]
            pos += 1
            if head == 0:
                return out, pos
            ttype = head & 0x0F
            if head >> 4:
                last += head >> 4
            else:
                raw, pos = _varint(buf, pos)
                last = (raw >> 1) ^ -(raw & 1)
            if last == skip:
                if ttype not in (_TRUE, _FALSE):
                    pos = _skip(buf, pos, ttype)
            elif ttype in (_I32, _I64, _I16):  # most fields: inline the common one-byte varint
                v = buf[pos]
                if v < 0x80:
                    pos += 1
                else:
                    v, pos = _varint(buf, pos)
                out[last] = (ttype, (v >> 1) ^ -(v & 1))
            elif ttype in (_TRUE, _FALSE):
                out[last] = (_TRUE, ttype == _TRUE)
            else:
                value, pos = _value(buf, pos, ttype)
                out[last] = (ttype, value)
    except (IndexError, struct.error) as e:
        raise ThriftError(f"truncated struct: {e}") from e


def _skip(buf: bytes, pos: int, ttype: int) -> int:
    """The position after a value of ``ttype`` at ``pos`` (walks it without building it)."""
    if ttype in (_I16, _I32, _I64):
        while buf[pos] >= 0x80:
            pos += 1
        return pos + 1
    if ttype == _BINARY:
        n, pos = _varint(buf, pos)
        return pos + n
    if ttype == _STRUCT:
        return _skip_struct(buf, pos)
    if ttype in (_LIST, _SET):
        size, etype, pos = _list_header(buf, pos)
        if etype in (_TRUE, _FALSE, _BYTE):
            return pos + size
        for _ in range(size):
            pos = _skip(buf, pos, etype)
        return pos
    if ttype == _BYTE:
        return pos + 1
    if ttype == _DOUBLE:
        return pos + 8
    if ttype == _MAP:
        size, pos = _varint(buf, pos)
        if size:
            kinds = buf[pos]
            pos += 1
            for _ in range(size):
                pos = _skip(buf, _skip(buf, pos, kinds >> 4), kinds & 0x0F)
        return pos
    raise ThriftError(f"unknown compact type {ttype}")


def _skip_struct(buf: bytes, pos: int) -> int:
    """The position after the struct at ``pos``: an iterative walk (footers hold thousands of fields,
    and a Python call per field would be most of the cost)."""
    stack = [-1]  # per open level: -1 while in a struct's fields, n >= 0 for n structs left in a list
    while stack:
        top = stack[-1]
        if top >= 0:
            if top == 0:
                stack.pop()
            else:
                stack[-1] = top - 1
                stack.append(-1)
            continue
        head = buf[pos]
        pos += 1
        if head == 0:
            stack.pop()
            continue
        if not head >> 4:  # a long field id
            while buf[pos] >= 0x80:
                pos += 1
            pos += 1
        ttype = head & 0x0F
        if ttype in (_I32, _I64, _I16):
            while buf[pos] >= 0x80:
                pos += 1
            pos += 1
        elif ttype == _BINARY:
            n, pos = _varint(buf, pos)
            pos += n
        elif ttype == _STRUCT:
            stack.append(-1)
        elif ttype in (_LIST, _SET):
            size, etype = buf[pos] >> 4, buf[pos] & 0x0F
            pos += 1
            if size == 15:
                size, pos = _varint(buf, pos)
            if etype == _STRUCT:
                stack.append(size)
            elif etype in (_I32, _I64, _I16):
                for _ in range(size):
                    while buf[pos] >= 0x80:
                        pos += 1
                    pos += 1
            elif etype in (_TRUE, _FALSE, _BYTE):
                pos += size
            else:
                for _ in range(size):
                    pos = _skip(buf, pos, etype)
        elif ttype not in (_TRUE, _FALSE):
            pos = _skip(buf, pos, ttype)
    return pos


def _page_locations(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, sizes, first rows) of an OffsetIndex: its field 1, a list of (i64, i32, i64) structs."""
    try:
        pos, fid = 0, 0
        while True:
            head = buf[pos]
            pos += 1
            if head == 0:
                raise ThriftError("offset index without page locations")
            fid = fid + (head >> 4) if head >> 4 else _zigzag_at(buf, pos)
            if not head >> 4:
                pos = _skip(buf, pos, _I16)
            if fid == 1 and head & 0x0F == _LIST:
                break
            pos = _skip(buf, pos, head & 0x0F)
        head = buf[pos]
        pos += 1
        size = head >> 4
        if size == 15:
            size, pos = _varint(buf, pos)
        out = np.zeros((3, size), dtype=np.int64)
        for i in range(size):
            last = 0
            while True:
                h = buf[pos]
                pos += 1
                if h == 0:
                    break
                last = last + (h >> 4) if h >> 4 else _zigzag_at(buf, pos)
                if not h >> 4:
                    pos = _skip(buf, pos, _I16)
                if h & 0x0F in (_I32, _I64) and 1 <= last <= 3:
                    v, pos = _varint(buf, pos)
                    out[last - 1, i] = (v >> 1) ^ -(v & 1)
                elif h & 0x0F not in (_TRUE, _FALSE):
                    pos = _skip(buf, pos, h & 0x0F)
    except IndexError as e:
        raise ThriftError(f"truncated offset index: {e}") from e
    return out[0], out[1], out[2]


def _list_head(buf: bytes, pos: int) -> tuple[int, int]:
    size = buf[pos] >> 4
    pos += 1
    if size == 15:
        size, pos = _varint(buf, pos)
    return size, pos


def _zigzag_at(buf: bytes, pos: int) -> int:
    v, _ = _varint(buf, pos)
    return (v >> 1) ^ -(v & 1)


def _put_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_value(out: bytearray, ttype: int, value: Any) -> None:
    if ttype in (_I16, _I32, _I64):
        _put_varint(out, (value << 1) ^ (value >> 63))
    elif ttype == _BINARY:
        _put_varint(out, len(value))
        out += value
    elif ttype == _STRUCT:
        _put_struct(out, value)
    elif ttype in (_LIST, _SET):
        etype, items = value
        if len(items) < 15:
            out.append((len(items) << 4) | etype)
        else:
            out.append(0xF0 | etype)
            _put_varint(out, len(items))
        for item in items:
            if etype in (_TRUE, _FALSE):
                out.append(_TRUE if item else _FALSE)
            else:
                _put_value(out, etype, item)
    elif ttype == _BYTE:
        out += struct.pack("b", value)
    elif ttype == _DOUBLE:
        out += value
    elif ttype == _MAP:
        ktype, vtype, pairs = value
        _put_varint(out, len(pairs))
        if pairs:
            out.append((ktype << 4) | vtype)
            for k, v in pairs:
                _put_value(out, ktype, k)
                _put_value(out, vtype, v)
    else:
        raise ThriftError(f"unknown compact type {ttype}")


def _put_struct(out: bytearray, fields: Struct) -> None:
    last = 0
    for fid in sorted(fields):
        ttype, value = fields[fid]
        wire = (_TRUE if value else _FALSE) if ttype in (_TRUE, _FALSE) else ttype
        if 0 < fid - last <= 15:
            out.append(((fid - last) << 4) | wire)
        else:
            out.append(wire)
            _put_varint(out, (fid << 1) ^ (fid >> 63))
        last = fid
        if wire not in (_TRUE, _FALSE):
            _put_value(out, ttype, value)
    out.append(0)


def encode(fields: Struct) -> bytes:
    """A struct, as :func:`decode` returns it, in the compact protocol."""
    out = bytearray()
    _put_struct(out, fields)
    return bytes(out)


def _get(s: Struct, fid: int, default: Any = None) -> Any:
    entry = s.get(fid)
    return default if entry is None else entry[1]


def _items(s: Struct, fid: int) -> list[Any]:
    entry = s.get(fid)
    return [] if entry is None else list(entry[1][1])


# -- XXH64 ------------------------------------------------------------------------------------------

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return cast(np.ndarray, (x << np.uint64(r)) | (x >> np.uint64(64 - r)))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def _words(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Little-endian unsigned words of ``width`` bytes at byte positions ``at`` (unaligned)."""
    raw = np.ascontiguousarray(data[at[:, None] + np.arange(width)])
    return raw.view("<u8" if width == 8 else "<u4").reshape(-1).astype(np.uint64)


def xxh64(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each value ``data[offsets[i]:offsets[i + 1]]``, vectorised over the values.

    ``data`` is a uint8 array and ``offsets`` n + 1 positions. The work is proportional to the total
    bytes: a value leaves the arrays being updated once its bytes are consumed.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    start = offsets[:-1]
    length = offsets[1:] - start
    padded = np.concatenate([np.asarray(data, dtype=np.uint8), np.zeros(8, dtype=np.uint8)])
    h = np.empty(len(start), dtype=np.uint64)
    pos = start.copy()
    with np.errstate(over="ignore"):
        stripes = length // 32
        long_ = np.flatnonzero(stripes > 0)
        h[stripes == 0] = _P5
        if len(long_):
            m = len(long_)
            v = [
                np.full(m, _P1 + _P2, dtype=np.uint64),
                np.full(m, _P2, dtype=np.uint64),
                np.zeros(m, dtype=np.uint64),
                np.zeros(m, dtype=np.uint64) - _P1,
            ]
            count, at = stripes[long_], pos[long_]
            for k in range(int(count.max())):
                live = np.flatnonzero(count > k)
                for j in range(4):
                    v[j][live] = _round(v[j][live], _words(padded, at[live] + 32 * k + 8 * j, 8))
            acc = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for j in range(4):
                acc = (acc ^ _round(np.zeros(m, dtype=np.uint64), v[j])) * _P1 + _P4
            h[long_] = acc
            pos[long_] += 32 * count
        h += length.astype(np.uint64)
        rest = length % 32
        for k in range(3):
            live = np.flatnonzero(rest >= 8 * (k + 1))
            if len(live):
                lane = _round(np.zeros(len(live), dtype=np.uint64), _words(padded, pos[live] + 8 * k, 8))
                h[live] = _rotl(h[live] ^ lane, 27) * _P1 + _P4
        pos += rest - rest % 8
        rest %= 8
        live = np.flatnonzero(rest >= 4)
        if len(live):
            h[live] = _rotl(h[live] ^ (_words(padded, pos[live], 4) * _P1), 23) * _P2 + _P3
            pos[live] += 4
            rest[live] -= 4
        for k in range(3):
            live = np.flatnonzero(rest > k)
            if len(live):
                h[live] = _rotl(h[live] ^ (padded[pos[live] + k].astype(np.uint64) * _P5), 11) * _P1
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


# -- probe values -----------------------------------------------------------------------------------


class ProbeValues:
    """Values as one file's column stores them.

    ``hashes`` (uint64, aligned with the values given) are what its Bloom filters hold (hashed when first
    asked for: reads that only compare values with min/max statistics never hash them); ``order`` holds
    the values sorted, comparable with its min/max statistics (integers, or bytes compared unsigned),
    and ``rank`` the position of each sorted value among the values given.
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray, order: np.ndarray, rank: np.ndarray) -> None:
        self._plain = (data, offsets)  # the plain encoding, hashed when first asked for
        self._hashes: np.ndarray | None = None
        self.order = order
        self.rank = rank

    @property
    def hashes(self) -> np.ndarray:
        if self._hashes is None:
            self._hashes = xxh64(*self._plain)  # threads racing here compute the same hashes
        return self._hashes

    def within(self, low: Any, high: Any) -> np.ndarray:
        """Positions (among the values given) of the values between ``low`` and ``high``."""
        start = int(np.searchsorted(self.order, low, side="left"))
        end = int(np.searchsorted(self.order, high, side="right"))
        return self.rank[start:end] if end > start else self.rank[:0]


def _logical(column: pq.ColumnSchema) -> dict[str, Any]:
    logical = column.logical_type
    text = logical.to_json() if logical is not None else None
    return dict(json.loads(text)) if text else {}


def _plain(
    values: pa.Array, physical: str, width: int, logical: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(bytes, offsets, order) of ``values`` in the plain encoding of a column of this physical and
    logical type (what Bloom filters hash), or None where this module does not know it."""
    t = values.type
    n = len(values)
    if physical in ("INT32", "INT64"):
        if logical.get("Type") == "Int" and not logical.get("isSigned", True):
            return None  # unsigned logical types order differently; mere keys are signed
        if pa.types.is_timestamp(t):
            units = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}
            unit = units.get(str(logical.get("timeUnit")))
            if logical.get("Type") != "Timestamp" or unit is None:
                return None
            ints = values.cast(pa.timestamp(unit, t.tz)).view(pa.int64())  # seconds are stored as ms
        elif pa.types.is_date32(t):
            ints = values.view(pa.int32())
        elif pa.types.is_signed_integer(t):
            ints = values
        else:
            return None
        dtype = np.dtype("<i4" if physical == "INT32" else "<i8")
        order = np.asarray(ints.to_numpy(zero_copy_only=False)).astype(dtype)
        return order.view(np.uint8), np.arange(n + 1, dtype=np.int64) * dtype.itemsize, order
    if physical == "BYTE_ARRAY":
        if not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
        ):
            return None
        values = values.cast(pa.large_binary())
        buffers = values.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64)[values.offset : values.offset + n + 1]
        data = np.zeros(0, np.uint8) if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
        return data, offsets, np.array(values.to_pylist(), dtype=object)
    if physical == "FIXED_LEN_BYTE_ARRAY" and pa.types.is_decimal128(t) and 0 < width <= 8:
        if logical.get("Type") != "Decimal" or int(logical.get("scale", -1)) != t.scale:
            return None
        little = np.frombuffer(values.buffers()[1], dtype=np.uint8)[
            values.offset * 16 : (values.offset + n) * 16
        ]
        big = np.ascontiguousarray(little.reshape(n, 16)[:, :width][:, ::-1])  # two's complement, truncated
        sign = np.where(big[:, :1] >= 0x80, 0xFF, 0x00).astype(np.uint8)
        order = np.concatenate([np.repeat(sign, 8 - width, axis=1), big], axis=1).view(">i8").reshape(-1)
        return big.reshape(-1), np.arange(n + 1, dtype=np.int64) * width, order.astype(np.int64)
    return None


def probe_values(values: pa.Array, column: pq.ColumnSchema) -> ProbeValues | None:
    """``values`` (nulls dropped) as ``column`` stores them, or None if this module cannot tell."""
    if values.null_count:
        values = values.drop_null()
    try:
        plain = _plain(values, column.physical_type, int(column.length or 0), _logical(column))
    except (pa.ArrowException, ValueError, TypeError):
        return None  # e.g. a probe finer than the file's time unit: no pruning rather than a wrong answer
    if plain is None:
        return None
    data, offsets, order = plain
    rank = np.argsort(order, kind="stable")
    return ProbeValues(data, offsets, order[rank], rank)


# -- split-block Bloom filters ----------------------------------------------------------------------

_SALT = np.array(
    [0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31],
    dtype=np.uint32,
)


def bloom_blocks(hashes: np.ndarray, num_blocks: int) -> np.ndarray:
    """The 32-byte block of each hash in a filter of ``num_blocks`` blocks."""
    with np.errstate(over="ignore"):
        return ((hashes >> np.uint64(32)) * np.uint64(num_blocks)) >> np.uint64(32)


def bloom_contains(hashes: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Whether each hash may be in the filter; ``words[i]`` are the 8 uint32 words of its block."""
    key = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    with np.errstate(over="ignore"):
        bits = (key[:, None] * _SALT[None, :]) >> np.uint32(27)
    return cast(np.ndarray, ((words & np.left_shift(np.uint32(1), bits)) != 0).all(axis=1))


def bloom_header(buf: bytes) -> tuple[int, int] | None:
    """(bitset bytes, header bytes) of a Bloom filter header: split blocks, XXH64, uncompressed only."""
    try:
        header, end = decode(buf)
    except ThriftError:
        return None
    size = _get(header, 1)
    parts = [_get(header, f) for f in (2, 3, 4)]  # algorithm, hash, compression: each a union
    if (
        not isinstance(size, int)
        or size <= 0
        or size % 32
        or not all(isinstance(p, dict) and 1 in p for p in parts)
    ):
        return None
    return size, end


# -- one file ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pages:
    """The offset index of one column chunk: each data page's bytes and first row."""

    offsets: np.ndarray  # int64 byte offset of each page
    sizes: np.ndarray  # int64 bytes of each page, header included
    first_rows: np.ndarray  # int64 first row of each page within the row group
    rows: int  # rows of the row group
    dictionary: tuple[int, int] | None  # (offset, bytes) of the dictionary page

    def of_rows(self, rows: np.ndarray) -> np.ndarray:
        """The page of each row."""
        return cast(np.ndarray, np.searchsorted(self.first_rows, rows, side="right") - 1)

    def row_ranges(self, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first row, row count) of each of ``pages``."""
        ends = np.append(self.first_rows[1:], self.rows)
        return self.first_rows[pages], ends[pages] - self.first_rows[pages]


class FileIndex:
    """The key index of one Parquet file, parsed from its footer when first needed (and cached with the
    footer by the storage). ``has_page_index`` is False for files written before mere wrote one."""

    def __init__(self, md: pq.FileMetaData) -> None:
        self.md = md
        self.has_page_index = (
            md.num_row_groups > 0 and md.num_columns > 0 and md.row_group(0).column(0).has_offset_index
        )
        self._raw = b""
        self._footer: Struct | None = None
        self._heads: list[list[Struct]] = []  # per row group, per column chunk: its fields but metadata
        self._chunk_starts: list[list[int]] = []
        self._chunks: dict[tuple[int, int], Struct] = {}
        self._pages: dict[tuple[int, int], Pages] = {}
        self._raw_pages: dict[tuple[int, int], bytes] = {}  # offset indexes fetched, parsed when used
        self.column_indexes: dict[tuple[int, int], bytes] = {}
        self.bloom_layout: dict[tuple[int, int], tuple[int, int, int] | None] = {}  # checked headers
        self._lock = threading.Lock()  # scans on several threads may share a file

    @property
    def footer(self) -> Struct:
        """The footer's FileMetaData as a Thrift struct, without its row groups: those are walked once,
        keeping each column chunk's own fields (where its page index is) and where it starts (its
        metadata is decoded only for the chunks a lookup reads pages of: decoding in Python costs)."""
        with self._lock:
            if self._footer is None:
                self._footer = self._parse_footer()
            return self._footer

    def _parse_footer(self) -> Struct:
        try:  # pyarrow pickles a footer as its serialized Thrift
            raw = self._raw = memoryview(self.md.__reduce__()[1][0]).tobytes()
        except (AttributeError, IndexError, TypeError) as e:
            raise ThriftError(f"no serialized footer from pyarrow: {e}") from e
        footer: Struct = {}
        pos = last = 0
        try:
            while raw[pos]:
                head = raw[pos]
                pos += 1
                ttype = head & 0x0F
                if head >> 4:
                    last += head >> 4
                else:
                    last = _zigzag_at(raw, pos)
                    pos = _skip(raw, pos, _I16)
                if last == 4 and ttype == _LIST:
                    size, pos = _list_head(raw, pos)
                    for _ in range(size):
                        pos = self._walk_row_group(raw, pos)
                elif ttype in (_TRUE, _FALSE):
                    footer[last] = (_TRUE, ttype == _TRUE)
                else:
                    value, pos = _value(raw, pos, ttype)
                    footer[last] = (ttype, value)
        except IndexError as e:
            raise ThriftError(f"truncated footer: {e}") from e
        if len(self._heads) != self.md.num_row_groups or any(
            len(h) != self.md.num_columns for h in self._heads
        ):
            raise ThriftError("footer does not match its metadata")
        return footer

    def _walk_row_group(self, raw: bytes, pos: int) -> int:
        heads: list[Struct] = []
        starts: list[int] = []
        last = 0
        while raw[pos]:
            head = raw[pos]
            pos += 1
            if head >> 4:
                last += head >> 4
            else:
                last = _zigzag_at(raw, pos)
                pos = _skip(raw, pos, _I16)
            if last == 1 and head & 0x0F == _LIST:  # the column chunks
                size, pos = _list_head(raw, pos)
                for _ in range(size):
                    starts.append(pos)
                    chunk, pos = decode(raw, pos, skip=3)  # its ColumnMetaData only walked
                    heads.append(chunk)
            elif head & 0x0F not in (_TRUE, _FALSE):
                pos = _skip(raw, pos, head & 0x0F)
        self._heads.append(heads)
        self._chunk_starts.append(starts)
        return pos + 1

    def _chunk(self, rg: int, leaf: int, shallow: bool = False) -> Struct:
        """One ColumnChunk of the footer; ``shallow``: without its ColumnMetaData (decoded on first use
        otherwise)."""
        self.footer  # noqa: B018 - walks the row groups
        if shallow:
            return self._heads[rg][leaf]
        chunk = self._chunks.get((rg, leaf))
        if chunk is None:
            chunk = self._chunks[(rg, leaf)] = decode(self._raw, self._chunk_starts[rg][leaf])[0]
        return chunk

    def stats_range(self, rg: int, leaf: int) -> tuple[Any, Any] | None:
        """A column chunk's min and max as :attr:`ProbeValues.order` compares them (None: unknown)."""
        st = self.md.row_group(rg).column(leaf).statistics
        if st is None or not st.has_min_max:
            return None
        physical = st.physical_type
        low, high = st.min_raw, st.max_raw
        if physical in ("INT32", "INT64"):
            return (low, high) if isinstance(low, int) and isinstance(high, int) else None
        if physical == "BYTE_ARRAY" and isinstance(low, bytes) and isinstance(high, bytes):
            return low, high
        if physical == "FIXED_LEN_BYTE_ARRAY" and isinstance(low, bytes) and isinstance(high, bytes):
            lo, hi = _stat(low, physical), _stat(high, physical)
            return None if lo is None or hi is None else (lo, hi)
        return None

    def bloom_range(self, rg: int, leaf: int) -> tuple[int, int] | None:
        """(offset, bytes) of a column chunk's Bloom filter, header included, if it has one."""
        col = self.md.row_group(rg).column(leaf)
        offset, length = col.bloom_filter_offset, col.bloom_filter_length
        if offset is None or not length or length <= 32:
            return None
        return int(offset), int(length)

    def _range(self, rg: int, leaf: int, offset_field: int) -> tuple[int, int]:
        chunk = self._chunk(rg, leaf, shallow=True)
        offset, length = _get(chunk, offset_field), _get(chunk, offset_field + 1)
        if not isinstance(offset, int) or not isinstance(length, int) or length <= 0:
            raise ThriftError(f"row group {rg} column {leaf} has no page index")
        return offset, length

    def index_ranges(
        self, groups: Sequence[int], leaves: Sequence[int], column_index_of: int | None = None
    ) -> list[tuple[tuple[int, int, int], tuple[int, int]]]:
        """What to fetch for the offset indexes of ``leaves`` and the column indexes of one leaf in
        ``groups``, of those not fetched yet: ((row group, leaf, Thrift field), byte range) pairs."""
        out = [
            ((rg, x, 4), self._range(rg, x, 4))
            for rg in groups
            for x in leaves
            if (rg, x) not in self._pages and (rg, x) not in self._raw_pages
        ]
        if column_index_of is not None:
            out += [
                ((rg, column_index_of, 6), self._range(rg, column_index_of, 6))
                for rg in groups
                if (rg, column_index_of) not in self.column_indexes
            ]
        return out

    def keep_indexes(self, fetched: Sequence[tuple[tuple[int, int, int], bytes]]) -> None:
        """Keep index bytes fetched for :meth:`index_ranges` (offset indexes are parsed when used)."""
        for (rg, leaf, kind), raw in fetched:
            (self._raw_pages if kind == 4 else self.column_indexes)[(rg, leaf)] = raw

    def load_pages(
        self,
        storage: Storage,
        rel: str,
        size: int | None,
        groups: Sequence[int],
        leaves: Sequence[int],
        column_index_of: int | None = None,
    ) -> None:
        """Fetch the offset indexes of ``leaves`` and the column indexes of one leaf in ``groups``,
        those not fetched yet, in one request."""
        wanted = self.index_ranges(groups, leaves, column_index_of)
        if wanted:
            raw = storage.read_ranges(rel, [r for _, r in wanted], size)
            self.keep_indexes([(k, b) for (k, _), b in zip(wanted, raw)])

    def pages(self, rg: int, leaf: int) -> Pages:
        """A column chunk's offset index (fetched by :meth:`load_pages` or :func:`candidate_rows`)."""
        known = self._pages.get((rg, leaf))
        if known is None:
            with self._lock:
                known = self._pages.get((rg, leaf))
                if known is None:
                    raw = self._raw_pages.pop((rg, leaf))
                    known = self._pages[(rg, leaf)] = self._parse_pages(rg, leaf, raw)
        return known

    def _parse_pages(self, rg: int, leaf: int, raw: bytes) -> Pages:
        offsets, sizes, first = _page_locations(raw)
        if not len(offsets):
            raise ThriftError("empty offset index")
        if first[0] != 0 or (np.diff(first) <= 0).any() or (sizes <= 0).any():
            raise ThriftError("offset index out of order")
        start = self.md.row_group(rg).column(leaf).dictionary_page_offset
        dictionary = (
            (start, int(offsets[0]) - start) if isinstance(start, int) and 0 < start < offsets[0] else None
        )
        return Pages(offsets, sizes, first, self.md.row_group(rg).num_rows, dictionary)

    def candidate_pages(
        self, rg: int, leaf: int, column_index: bytes, probe: ProbeValues
    ) -> np.ndarray | None:
        """Pages of a column chunk whose min/max may hold a probe value (None: cannot tell)."""
        orders = _items(self.footer, 7)
        if leaf >= len(orders) or 1 not in orders[leaf]:
            return None  # min/max are only comparable under the type-defined order
        parsed = decode(column_index)[0]
        nulls, mins, maxs = _items(parsed, 1), _items(parsed, 2), _items(parsed, 3)
        if not mins or not (len(nulls) == len(mins) == len(maxs) == len(self.pages(rg, leaf).offsets)):
            return None
        physical = self.md.schema.column(leaf).physical_type
        order = probe.order
        keep = np.zeros(len(mins), dtype=bool)
        for i, (null, low, high) in enumerate(zip(nulls, mins, maxs)):
            if null:
                continue  # only nulls: no key
            lo, hi = _stat(low, physical), _stat(high, physical)
            if lo is None or hi is None:
                return None
            at = int(np.searchsorted(order, lo, side="left"))
            keep[i] = at < len(order) and order[at] <= hi
        return np.flatnonzero(keep)

    def synthetic_file(
        self, leaves: Sequence[int], parts: Sequence[tuple[int, Mapping[int, tuple[bytes, int]], int]]
    ) -> bytes:
        """A Parquet file holding only ``leaves`` (whole top-level columns), with a row group per part
        ``(row group, chunks, rows)``: ``chunks[leaf]`` is the leaf's dictionary page and some data
        pages back to back, and the number of values in those data pages."""
        schema = _items(self.footer, 2)
        kept_schema, kept_leaves = _schema_subset(schema, set(leaves))
        if kept_leaves != sorted(leaves):
            raise ThriftError("leaves do not make whole columns")
        body = bytearray(b"PAR1")
        groups = []
        for rg, chunks, rows in parts:
            columns = []
            begin = len(body)
            for leaf in kept_leaves:
                data, values = chunks[leaf]
                meta = dict(cast(Struct, _get(self._chunk(rg, leaf), 3)))
                dictionary = self.pages(rg, leaf).dictionary
                start = len(body)
                body += data
                for fid in (8, 10, 11, 12, 13, 14, 15, 16, 17):
                    # key/value metadata, index and dictionary offsets, statistics, encoding stats,
                    # Bloom filter, size and geospatial statistics: none describes these pages
                    meta.pop(fid, None)
                meta[5] = (_I64, values)
                meta[6] = (_I64, len(data))  # sizes buffers only
                meta[7] = (_I64, len(data))
                meta[9] = (_I64, start + (dictionary[1] if dictionary else 0))
                if dictionary:
                    meta[11] = (_I64, start)
                columns.append({2: (_I64, start), 3: (_STRUCT, meta)})
            groups.append({1: (_LIST, (_STRUCT, columns)), 2: (_I64, len(body) - begin), 3: (_I64, rows)})
        footer: Struct = {
            1: self.footer[1],
            2: (_LIST, (_STRUCT, kept_schema)),
            3: (_I64, sum(rows for _, _, rows in parts)),
            4: (_LIST, (_STRUCT, groups)),
        }
        if 6 in self.footer:
            footer[6] = self.footer[6]  # created_by: readers apply fixes for known writers by it
        if 7 in self.footer:
            orders = _items(self.footer, 7)
            footer[7] = (_LIST, (_STRUCT, [orders[leaf] for leaf in kept_leaves]))
        meta_bytes = encode(footer)
        return bytes(body + meta_bytes + struct.pack("<i", len(meta_bytes)) + b"PAR1")


def _stat(raw: bytes, physical: str) -> Any:
    if physical == "INT32" and len(raw) == 4:
        return struct.unpack("<i", raw)[0]
    if physical == "INT64" and len(raw) == 8:
        return struct.unpack("<q", raw)[0]
    if physical == "BYTE_ARRAY":
        return raw
    if physical == "FIXED_LEN_BYTE_ARRAY" and 0 < len(raw) <= 8:
        return int.from_bytes(raw, "big", signed=True)
    return None


def _schema_subset(schema: list[Struct], leaves: set[int]) -> tuple[list[Struct], list[int]]:
    """The flattened schema with only the top-level fields owning some of ``leaves``, and the leaf
    indices of the fields kept."""
    kept: list[Struct] = []
    kept_leaves: list[int] = []
    pos, leaf, fields = 1, 0, 0
    for _ in range(_get(schema[0], 5, 0)):
        end, count = _subtree(schema, pos)
        owned = list(range(leaf, leaf + count))
        if leaves.intersection(owned):
            kept += schema[pos:end]
            kept_leaves += owned
            fields += 1
        leaf += count
        pos = end
    root = dict(schema[0])
    root[5] = (_I32, fields)
    return [root, *kept], kept_leaves


def _subtree(schema: list[Struct], pos: int) -> tuple[int, int]:
    """(position after, number of leaves) of the schema element at ``pos`` and everything below it."""
    children = _get(schema[pos], 5)
    if not children:
        return pos + 1, 1
    end, leaves = pos + 1, 0
    for _ in range(children):
        end, n = _subtree(schema, end)
        leaves += n
    return end, leaves


def file_index(storage: Storage, rel: str, size: int | None) -> FileIndex:
    """The file's key index (cached with its footer)."""
    cache = storage.file_cache(rel, size)
    index = cache.get("key_index")
    if index is None:
        index = cache["key_index"] = FileIndex(storage.metadata(rel, size))
    return cast(FileIndex, index)


# -- reads ------------------------------------------------------------------------------------------


def bloom_excluded(
    storage: Storage,
    rel: str,
    size: int | None,
    probes: Mapping[int, Sequence[tuple[int, np.ndarray]]],
    prefetch: tuple[Sequence[int], int] | None = None,
) -> set[int]:
    """The row groups whose Bloom filters rule out every probe key.

    ``probes[rg]`` lists (leaf, hashes) per key column, the hashes aligned across leaves (one per key
    tuple): a tuple may be in a row group only if every filter may hold its value. Fetches only the
    blocks the hashes fall in, and each filter's header the first time (one request per file).
    ``prefetch`` (leaves, key leaf): the same request also fetches those leaves' offset indexes and the
    key leaf's column index in the probed row groups, which a lookup reads next (a round trip less on
    object stores, a few hundred bytes more per row group).
    """
    index = file_index(storage, rel, size)
    extra: list[tuple[tuple[int, int, int], tuple[int, int]]] = []
    if prefetch is not None and index.has_page_index:
        try:
            extra = index.index_ranges(list(probes), prefetch[0], prefetch[1])
        except ThriftError:
            extra = []
    layout: dict[tuple[int, int], tuple[int, int, int]] = {}  # (rg, leaf) -> offset, header, bitset bytes
    ranges: list[tuple[int, int]] = []
    for rg, columns in probes.items():
        for leaf, hashes in columns:
            known = index.bloom_layout.get((rg, leaf), ())
            if known is None:
                continue  # no filter, or one this module does not read
            if known:
                offset, head, bitset = known
            else:
                where = index.bloom_range(rg, leaf)
                if where is None:
                    index.bloom_layout[(rg, leaf)] = None
                    continue
                offset, length = where
                # Arrow sizes bitsets in powers of two; the header, checked once fetched, must agree.
                bitset = 1 << (length.bit_length() - 1)
                head = length - bitset
                ranges.append((offset, head))
            layout[(rg, leaf)] = (offset, head, bitset)
            blocks = sorted_unique(bloom_blocks(hashes, bitset // 32)).astype(np.int64)
            ranges += [(offset + head + 32 * b, 32) for b in blocks.tolist()]
    if not layout:
        return set()
    raw = storage.read_ranges(rel, ranges + [r for _, r in extra], size)
    index.keep_indexes([(k, b) for (k, _), b in zip(extra, raw[len(ranges) :])])
    fetched = dict(zip(ranges, raw))
    out = set()
    for rg, columns in probes.items():
        maybe: np.ndarray | None = None
        for leaf, hashes in columns:
            if (rg, leaf) not in layout:
                continue
            offset, head, bitset = layout[(rg, leaf)]
            if (rg, leaf) not in index.bloom_layout:
                ok = head > 0 and bloom_header(fetched[(offset, head)]) == (bitset, head)
                index.bloom_layout[(rg, leaf)] = (offset, head, bitset) if ok else None
                if not ok:
                    continue  # not the layout assumed: this filter prunes nothing
            blocks = bloom_blocks(hashes, bitset // 32).astype(np.int64)
            words = np.frombuffer(
                b"".join(fetched[(offset + head + 32 * b, 32)] for b in blocks.tolist()), dtype="<u4"
            ).reshape(-1, 8)
            hit = bloom_contains(hashes, words)
            maybe = hit if maybe is None else maybe & hit
        if maybe is not None and not maybe.any():
            out.add(rg)
    return out


def candidate_rows(
    storage: Storage,
    rel: str,
    size: int | None,
    groups: Sequence[int],
    leaf: int,
    probe: ProbeValues,
    other_leaves: Sequence[int] = (),
) -> dict[int, np.ndarray]:
    """Per row group of ``groups``, the rows in pages whose key column (``leaf``) min/max may hold a
    probe value (empty: none may). Row groups left out cannot tell (no page index): all their rows
    may. One request fetches the column indexes and the offset indexes of ``leaf`` and
    ``other_leaves`` of every row group."""
    index = file_index(storage, rel, size)
    if not index.has_page_index or not groups:
        return {}
    leaves = list(dict.fromkeys([leaf, *other_leaves]))
    try:
        index.load_pages(storage, rel, size, groups, leaves, column_index_of=leaf)
    except ThriftError:
        return {}
    out = {}
    for rg in groups:
        raw = index.column_indexes.get((rg, leaf))
        try:
            pages = None if raw is None else index.candidate_pages(rg, leaf, raw, probe)
            if pages is None:
                continue
            first, count = index.pages(rg, leaf).row_ranges(pages)
        except ThriftError:
            continue
        parts = [np.arange(f, f + c, dtype=np.int64) for f, c in zip(first.tolist(), count.tolist())]
        out[rg] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return out


def read_rows(
    storage: Storage,
    rel: str,
    size: int | None,
    wanted: Mapping[int, np.ndarray],
    columns: Sequence[str],
    leaves_of: Mapping[str, Sequence[int]],
) -> dict[int, pa.Table]:
    """Per row group, the rows ``wanted[rg]`` (sorted, unique positions) of ``columns``, from the pages
    that hold them only. Row groups left out of the result are better read whole: the file has no page
    index, or the pages would hold most of the row group's bytes. One request fetches the pages of
    every row group, and one small Parquet file holds them all."""
    index = file_index(storage, rel, size)
    if not index.has_page_index or not columns or not wanted:
        return {}
    md = index.md
    leaves = sorted(i for c in columns for i in leaves_of[c])
    try:
        index.load_pages(storage, rel, size, list(wanted), leaves)
    except ThriftError:
        return {}
    chosen: dict[int, dict[int, np.ndarray]] = {}  # row group -> leaf -> its pages holding the rows
    for rg, rows in wanted.items():
        if not len(rows) or len(rows) >= md.row_group(rg).num_rows:
            continue
        mine = {leaf: sorted_unique(index.pages(rg, leaf).of_rows(rows)) for leaf in leaves}
        part = whole = 0
        for leaf in leaves:
            p = index.pages(rg, leaf)
            part += int(p.sizes[mine[leaf]].sum()) + (p.dictionary[1] if p.dictionary else 0)
            whole += md.row_group(rg).column(leaf).total_compressed_size
        if part <= WHOLE_SHARE * whole:
            chosen[rg] = mine
    if not chosen:
        return {}
    ranges: list[tuple[int, int]] = []
    for rg, mine in chosen.items():
        for leaf in leaves:
            p = index.pages(rg, leaf)
            if p.dictionary:
                ranges.append(p.dictionary)
            ranges += [(int(p.offsets[i]), int(p.sizes[i])) for i in mine[leaf].tolist()]
    fetched = dict(zip(ranges, storage.read_ranges(rel, ranges, size)))
    # Columns whose leaves chose pages covering the same rows decode together, from one small file.
    groups: dict[tuple[Any, ...], list[str]] = {}
    for c in columns:
        spans = {
            tuple(tuple(index.pages(rg, leaf).first_rows[mine[leaf]].tolist()) for rg, mine in chosen.items())
            for leaf in leaves_of[c]
        }
        key = next(iter(spans)) if len(spans) == 1 else (-1, len(groups))
        groups.setdefault(key, []).append(c)
    out: dict[int, dict[str, pa.ChunkedArray]] = {rg: {} for rg in chosen}
    for group in groups.values():
        tables = _decode(index, group, wanted, chosen, fetched, leaves_of)
        if tables is None:
            return {}
        for rg, table in tables.items():
            for c in group:
                out[rg][c] = table.column(c)
    # (read back nullable, as :meth:`Storage.read_row_groups` reads them; the list is parsed once per footer)
    required = storage.footer(rel, size).made_required
    return {rg: relaxed(pa.table({c: cols[c] for c in columns}), required) for rg, cols in out.items()}


def _decode(
    index: FileIndex,
    columns: Sequence[str],
    wanted: Mapping[int, np.ndarray],
    chosen: Mapping[int, Mapping[int, np.ndarray]],
    fetched: Mapping[tuple[int, int], bytes],
    leaves_of: Mapping[str, Sequence[int]],
) -> dict[int, pa.Table] | None:
    """The wanted rows of ``columns``, whose leaves chose pages covering the same rows, per row group:
    decoded from one synthetic file with a row group per row group read."""
    leaves = sorted(i for c in columns for i in leaves_of[c])
    parts: list[tuple[int, dict[int, tuple[bytes, int]], int]] = []
    positions: dict[int, np.ndarray] = {}
    for rg, mine in chosen.items():
        pages = index.pages(rg, leaves[0])
        pick = mine[leaves[0]]
        if any(
            not np.array_equal(index.pages(rg, leaf).first_rows[mine[leaf]], pages.first_rows[pick])
            for leaf in leaves
        ):
            return None
        _, count = pages.row_ranges(pick)
        starts = np.concatenate([[0], np.cumsum(count)[:-1]])  # where each chosen page begins
        rows = wanted[rg]
        page = pages.of_rows(rows)
        positions[rg] = starts[np.searchsorted(pick, page)] + rows - pages.first_rows[page]
        chunks: dict[int, tuple[bytes, int]] = {}
        for leaf in leaves:
            p = index.pages(rg, leaf)
            data = [fetched[p.dictionary]] if p.dictionary else []
            values = 0
            for i in mine[leaf].tolist():
                page_bytes = fetched[(int(p.offsets[i]), int(p.sizes[i]))]
                n = _page_values(page_bytes)
                if n is None:
                    return None
                values += n
                data.append(page_bytes)
            chunks[leaf] = (b"".join(data), values)
        parts.append((rg, chunks, int(count.sum())))
    try:
        synthetic = index.synthetic_file(leaves, parts)
        table = pq.ParquetFile(pa.BufferReader(synthetic)).read(use_threads=False)
    except (ThriftError, pa.ArrowException, OSError):
        return None
    if table.num_rows != sum(n for _, _, n in parts) or set(table.column_names) != set(columns):
        return None
    out = {}
    offset = 0
    for rg, _, n in parts:
        out[rg] = table.slice(offset, n).take(pa.array(positions[rg], pa.int64()))
        offset += n
    return out


def _page_values(page: bytes) -> int | None:
    """The number of values (levels) of a data page, from its header (the rest of it only walked)."""
    try:
        pos = last = 0
        kind = None
        while page[pos]:
            head = page[pos]
            pos += 1
            if head >> 4:
                last += head >> 4
            else:
                last = _zigzag_at(page, pos)
                pos = _skip(page, pos, _I16)
            ttype = head & 0x0F
            if last == 1 and ttype == _I32:
                v, pos = _varint(page, pos)
                kind = (v >> 1) ^ -(v & 1)
            elif (last, kind, ttype) in ((5, 0, _STRUCT), (8, 3, _STRUCT)):  # DATA_PAGE, DATA_PAGE_V2
                body = page[pos]  # its field 1, num_values, comes first
                if body & 0x0F != _I32 or body >> 4 != 1:
                    return None
                v, _ = _varint(page, pos + 1)
                return (v >> 1) ^ -(v & 1)
            elif ttype not in (_TRUE, _FALSE):
                pos = _skip(page, pos, ttype)
    except (IndexError, ThriftError):
        return None
    return None
