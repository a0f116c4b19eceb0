"""NumPy helpers shared by the read, write and io layers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.concurrency import on_every_thread

RELEASE_AFTER_BYTES = 64 << 20
DECODED_PER_STORED = 3  # Arrow bytes of a Parquet byte, about (what a read of stored bytes handles)


def release_freed_memory(handled_bytes: int = RELEASE_AFTER_BYTES) -> None:
    """Hand the memory Arrow's pool keeps after frees back to the OS, after work that handled at least
    ``RELEASE_AFTER_BYTES`` (a millisecond or so, and the memory handed back is faulted in again by the
    next big step: not worth it after small ones).

    The pool keeps freed memory per thread, where another thread (the next scan's, a write's) often
    cannot reuse it: without this, the peak RSS of a process that writes then reads grows by the
    memory each step freed, not by what it holds.
    """
    if handled_bytes >= RELEASE_AFTER_BYTES:
        pa.default_memory_pool().release_unused()


def release_freed_memory_of_pools(
    handled_bytes: int, pools: Sequence[str] = ("prepare", "write", "io")
) -> None:
    """:func:`release_freed_memory` on every thread of the shared pools ``pools`` (the pool keeps what a
    thread freed for that thread: the writer's threads hold what encoding freed until they work again).
    Not waited for: the threads do it as soon as they are free."""
    global _written
    if handled_bytes >= RELEASE_AFTER_BYTES:
        _written = 0
        on_every_thread(pools, pa.default_memory_pool().release_unused)


_written = 0  # bytes written since the shared pools' threads last handed back what they keep


def note_written(nbytes: int) -> None:
    """Count rows a write handed to the writer's threads (see :func:`release_after_writes`)."""
    global _written
    _written += nbytes


def release_after_writes(read_bytes: int) -> None:
    """Before a read of ``read_bytes`` (at least ``RELEASE_AFTER_BYTES``): if writes of 4 MiB or more ran
    since the last hand-back, have the shared pools' threads hand back what they keep (it serves no
    read). Once per switch from writing to reading: each hand-back costs the next step page faults."""
    global _written
    if read_bytes >= RELEASE_AFTER_BYTES and _written >= 4 << 20:
        release_freed_memory()
        release_freed_memory_of_pools(RELEASE_AFTER_BYTES)


def is_binary_like(t: pa.DataType) -> bool:
    """Strings and binaries with offsets (plain and large): the types Parquet stores as byte arrays and
    reads dictionary-encoded on request."""
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


EXACT_RESCALE_DIGITS = 9  # Arrow rescales decimals exactly by this many digits at once (one-word divisor)


def decimal_rescale_steps(scale: int, target: int) -> list[int]:
    """The scales a decimal of ``scale`` passes through down to ``target`` (last), each at most
    ``EXACT_RESCALE_DIGITS`` below the one before.

    Arrow rescales by 10 or more digits at once wrongly for some large decimals (casts, round, floor,
    ceil: DECIMAL(38, 14) 18446744072436898870 to DECIMAL(38, 0) gave 18446744066392269771, and a safe
    cast of it was refused as lossy, pyarrow 26); by 9 digits or fewer its divisor fits one machine word
    and every value tried came out exact (``tests/expr/test_decimal_rescale.py`` records the bug).
    """
    steps = []
    while scale > target:
        scale = max(target, scale - EXACT_RESCALE_DIGITS)
        steps.append(scale)
    return steps


_SAME_WIDTH_INTEGER = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def distinct_count(values: pa.Array | pa.ChunkedArray) -> int:
    """Distinct values of an array, NULL counting as one value (as ``pyarrow.compute.count_distinct``'s
    ``mode="all"``), for the writer's choices of encodings on a few thousand sampled rows.

    Numbers, dates, times and timestamps are compared by their bits (NaNs with one payload are one value,
    ``-0.0`` and ``0.0`` two) through a NumPy sort: about ten times faster than Arrow's hash count on a
    sample of mostly distinct values. Strings and other types count through ``pyarrow.compute.unique``.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()  # (a dictionary may hold a value twice, or a NULL)
    if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
        values = values.cast(pa.large_string() if pa.types.is_string_view(values.type) else pa.large_binary())
    nulls = values.null_count
    present = values.drop_null() if nulls else values
    kind = present.type
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind)
    width = kind.bit_width if numeric and not pa.types.is_interval(kind) else 0
    if not len(present):
        distinct = 0
    elif width in _SAME_WIDTH_INTEGER:
        bits = np.sort(present.view(_SAME_WIDTH_INTEGER[width]).to_numpy())
        distinct = int(np.count_nonzero(bits[1:] != bits[:-1])) + 1
    else:
        distinct = len(pc.unique(present))
    return distinct + (1 if nulls else 0)


def bool_array(mask: np.ndarray) -> pa.BooleanArray:
    """A NumPy bool mask as an Arrow boolean array (no NULLs): its bits packed by NumPy, about 20x faster
    than ``pa.array(mask)`` for a few hundred thousand rows here (an Arrow filter's selection per split)."""
    mask = np.asarray(mask, dtype=bool)
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, bits], null_count=0)


@overload
def sorted_unique(values: np.ndarray, return_inverse: Literal[False] = False) -> np.ndarray: ...
@overload
def sorted_unique(values: np.ndarray, return_inverse: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...
def sorted_unique(
    values: np.ndarray, return_inverse: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``np.unique`` by sorting: NumPy 2.3+ finds unique values of many distinct integers by hashing,
    which took 0.9 s for 1M random int64 here against 0.05 s for a sort."""
    values = np.asarray(values).ravel()
    order = np.argsort(values, kind="stable") if return_inverse else None
    ranked = np.sort(values) if order is None else values[order]
    first = np.ones(len(ranked), dtype=bool)
    if len(ranked) > 1:
        first[1:] = ranked[1:] != ranked[:-1]
        if ranked.dtype.kind in "fc":  # NaNs sort last and count once, as in np.unique
            first[1:] &= ~(np.isnan(ranked[1:]) & np.isnan(ranked[:-1]))
    if order is None:
        return ranked[first]
    inverse = np.empty(len(ranked), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ranked[first], inverse


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")``, faster for integers in a narrow range: each value, less the
    smallest, is packed with its position into one unsigned 64-bit word and the words are sorted by value
    (NumPy's vectorised sort), about 1.5x faster than an argsort for 2.5M random int64 keys here. Equal
    values keep their order, as the positions break ties."""
    values = np.asarray(values)
    n = len(values)
    if n < 2 or not (np.issubdtype(values.dtype, np.integer) and values.ndim == 1):
        return np.argsort(values, kind="stable")
    low, high = int(values.min()), int(values.max())
    bits = (n - 1).bit_length()
    if (high - low).bit_length() + bits > 64:
        return np.argsort(values, kind="stable")
    # values - low fits in 64 unsigned bits; computed in the unsigned domain (no signed overflow).
    offset = values.astype(np.uint64) - np.uint64(low % (1 << 64))
    packed = (offset << np.uint64(bits)) | np.arange(n, dtype=np.uint64)
    packed.sort()
    return (packed & np.uint64((1 << bits) - 1)).astype(np.intp)


def is_nat(value: object) -> bool:
    """Whether a value pyarrow handed to Python is pandas' NaT: what an ns timestamp or duration of -2**63
    becomes. It is a value, not a missing one, yet equals nothing and orders with nothing, so it can
    neither prune a read nor stand for the value in a filter. (A float's NaN is not one.)"""
    return value is not None and not isinstance(value, float) and value != value


def first_row(rows: pa.Table) -> dict[str, object]:
    """The first row as Python values, for messages; a value Python cannot hold (a date after year 9999,
    an ns timestamp of -2**63) as Arrow spells it instead."""
    head = rows.slice(0, 1)
    out: dict[str, object] = {}
    for name, column in zip(head.column_names, head.columns):
        try:
            value = column.to_pylist()[0]
            out[name] = column.cast(pa.string())[0].as_py() if is_nat(value) else value
        except (OverflowError, ValueError):
            out[name] = column.cast(pa.string())[0].as_py()
    return out
