"""Lossless casts of input columns to a table's types.

An input column is accepted when its type is compatible with the column's type and every value survives
the cast unchanged. Compatible: numbers with numbers (bool is not a number), text with text (and text into
binary), binary with binary, dates with dates, timestamps with timestamps of the same time-zone awareness,
times with times, durations with durations, and nested types whose parts are compatible. Nothing is
parsed or guessed: ``"12.5"`` is not a double, ``5`` is not a string, a naive timestamp is not UTC.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import SchemaMismatch
from mere.spec import normalise_type

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError)


def is_number(t: pa.DataType) -> bool:
    """Number types: integers, floats and decimals (not bool)."""
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def is_text(t: pa.DataType) -> bool:
    """String types of every layout (string, large, view)."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def is_bytes_type(t: pa.DataType) -> bool:
    """Binary types of every layout (binary, large, view, fixed size)."""
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _is_list(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def incompatibility(source: pa.DataType, target: pa.DataType) -> str | None:
    """Why ``source`` values can never be stored as ``target`` without guessing, or None if they may be.

    A None answer still needs the value checks of :func:`lossless_cast` (ranges, precision).
    """
    if source == target or pa.types.is_null(source):
        return None
    if pa.types.is_dictionary(source):
        return incompatibility(source.value_type, target)
    if pa.types.is_run_end_encoded(source):
        return incompatibility(source.value_type, target)
    if is_number(source) and is_number(target):
        return None
    if is_text(source) and (is_text(target) or is_bytes_type(target)):
        return None
    if is_bytes_type(source) and is_bytes_type(target):
        return None
    if pa.types.is_date(source) and pa.types.is_date(target):
        return None
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        if (source.tz is None) == (target.tz is None):
            return None
        if source.tz is None:
            return (
                f"naive timestamps are not taken as {target.tz}: localize them first "
                f"(pandas: .dt.tz_localize({target.tz!r}); Arrow: pc.assume_timezone(col, {target.tz!r}))"
            )
        return "time-zone aware timestamps do not fit a naive column: convert and drop the zone first"
    if pa.types.is_time(source) and pa.types.is_time(target):
        return None
    if pa.types.is_duration(source) and pa.types.is_duration(target):
        return None
    if _is_list(source) and _is_list(target):
        return incompatibility(source.value_type, target.value_type)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        names = [source.field(i).name for i in range(source.num_fields)]
        wanted = [target.field(i).name for i in range(target.num_fields)]
        if names != wanted:
            return f"struct fields {names} differ from {wanted}"
        return next(
            (
                f"field {n!r}: {why}"
                for i, n in enumerate(names)
                if (why := incompatibility(source.field(i).type, target.field(i).type))
            ),
            None,
        )
    if pa.types.is_map(source) and pa.types.is_map(target):
        return incompatibility(source.key_type, target.key_type) or incompatibility(
            source.item_type, target.item_type
        )
    return "the types are not compatible (mere casts only without loss and never parses or guesses)"


def _rounds(source: pa.DataType, target: pa.DataType) -> bool:
    """Casts Arrow's safe mode does not value-check: floats narrowed, and numbers into or out of floats
    or decimals (float -> decimal rounds silently)."""
    if pa.types.is_floating(target) and not pa.types.is_integer(source):
        return bool(source != target)
    if pa.types.is_decimal(target) and pa.types.is_floating(source):
        return True
    return bool(pa.types.is_date64(source) and pa.types.is_date32(target))


def _same_values(before: pa.Array | pa.ChunkedArray, after: pa.Array | pa.ChunkedArray) -> bool:
    back = pc.cast(after, before.type, safe=False)
    equal = pc.equal(back, before)
    if pa.types.is_floating(before.type):
        equal = pc.or_kleene(equal, pc.and_(pc.is_nan(back), pc.is_nan(before)))
    return bool(pc.all(pc.fill_null(equal, True)).as_py())


def lossless_cast(
    values: pa.Array | pa.ChunkedArray, target: pa.DataType, column: str, identifier: str
) -> pa.Array | pa.ChunkedArray:
    """``values`` as ``target``, or :class:`SchemaMismatch` naming the column when the cast is not lossless."""
    source = values.type
    if source == target:
        return values
    why = incompatibility(source, target)
    if why is not None:
        raise SchemaMismatch(
            f"{identifier}: column {column!r} of type {source} cannot be stored as {target}: {why}"
        )
    if pa.types.is_dictionary(source) or pa.types.is_run_end_encoded(source):
        values = decoded(values)
        source = values.type
        if source == target:
            return values
    try:
        if pa.types.is_integer(source) and pa.types.is_decimal(target) and target.scale >= 0:
            # Arrow casts an integer type only to a decimal that holds its every value (int64: 19 digits
            # plus the scale); the values themselves may fit a smaller one: through a wide enough decimal,
            # whose cast down checks each value.
            digits = len(str(2**source.bit_width)) + target.scale
            wide = (
                pa.decimal128(digits, target.scale) if digits <= 38 else pa.decimal256(digits, target.scale)
            )
            values = pc.cast(values, wide, safe=True)
        out = pc.cast(values, target, safe=True)
        if _rounds(source, target) and not _same_values(values, out):
            raise SchemaMismatch(
                f"{identifier}: column {column!r}: some {source} values would change when stored "
                f"as {target}; cast them yourself if that is intended"
            )
    except _ARROW_ERRORS as e:
        raise SchemaMismatch(
            f"{identifier}: column {column!r} of type {source} cannot be stored as {target} "
            f"without loss: {str(e).splitlines()[0]}"
        ) from e
    return out


def decoded(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Values of a dictionary-, run-end- or view-encoded column in their plain type, nested encodings
    too (others unchanged)."""
    kind = values.type
    if pa.types.is_run_end_encoded(kind):
        return decoded(pc.run_end_decode(values))
    plain = normalise_type(kind)  # the type a table stores for it
    if plain == kind:
        return values
    try:
        return pc.cast(values, plain)
    except _ARROW_ERRORS:  # a nesting Arrow cannot cast: left to the type checks that follow
        return values


def decoded_table(table: pa.Table) -> pa.Table:
    """``table`` with every encoded top-level column decoded (see :func:`decoded`)."""
    columns = [decoded(c) for c in table.columns]
    if all(a is b for a, b in zip(columns, table.columns)):
        return table
    fields = [f.with_type(c.type) for f, c in zip(table.schema, columns)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))
