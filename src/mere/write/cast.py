"""Lossless casts of input columns to a table's types.

An input column is accepted when its type is compatible with the column's type and every value survives
the cast unchanged. Compatible: numbers with numbers (bool is not a number), text with text (and text into
binary), binary with binary, dates with dates, timestamps with timestamps of the same time-zone awareness,
times with times, durations with durations, and nested types whose parts are compatible. Nothing is
parsed or guessed: ``"12.5"`` is not a double, ``5`` is not a string, a naive timestamp is not UTC.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.arrays import decimal_rescale_steps
from mere.errors import InvalidInput, SchemaMismatch
from mere.spec import is_bytes_type, is_number, is_text, normalise_type

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError)


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
    values: pa.Array | pa.ChunkedArray,
    target: pa.DataType,
    column: str,
    identifier: str,
    rows: pa.Array | pa.ChunkedArray | None = None,
) -> pa.Array | pa.ChunkedArray:
    """``values`` as ``target``, or :class:`SchemaMismatch` naming the column when the cast is not lossless,
    or naming the field when a NOT NULL field inside the column holds a NULL in a present value of ``rows``
    (a boolean mask; every row when None): see :func:`nested_not_null`."""
    if strict_nested(target):
        # Cast to the shape with nullable fields (Arrow's struct cast refuses NULL children even under a NULL
        # struct, its list cast lets NULL elements through): the NOT NULL check below is exact instead.
        shaped = (
            values
            if values.type == target
            else _lossless_cast(values, relax_nested(target), column, identifier)
        )
        return nested_not_null(shaped, target, column, identifier, rows)
    return _lossless_cast(values, target, column, identifier)


def _lossless_cast(
    values: pa.Array | pa.ChunkedArray, target: pa.DataType, column: str, identifier: str
) -> pa.Array | pa.ChunkedArray:
    source = values.type
    if source == target:
        return values
    why = incompatibility(source, target)
    if why is not None:
        raise SchemaMismatch(
            f"{identifier}: column {column!r} of type {source} cannot be stored as {target}: {why}"
        )
    if pa.types.is_null(source):  # an all-NULL column as Arrow types it: NULLs of the column's type
        return pc.cast(values, target)
    if normalise_type(source) != source:  # encodings (dictionary, run-end, views), nested ones too
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
        if pa.types.is_decimal(source) and (pa.types.is_decimal(target) or pa.types.is_integer(target)):
            values = _scaled_down(values, target.scale if pa.types.is_decimal(target) else 0)
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


def _scaled_down(values: pa.Array | pa.ChunkedArray, scale: int) -> pa.Array | pa.ChunkedArray:
    """Decimal ``values`` within a step of ``scale`` (:func:`mere.arrays.decimal_rescale_steps`), each step
    checked lossless by Arrow; the caller's cast takes the last one."""
    kind = values.type
    width = pa.decimal128 if pa.types.is_decimal128(kind) else pa.decimal256
    for step in decimal_rescale_steps(kind.scale, scale)[:-1]:
        values = pc.cast(values, width(kind.precision, step), safe=True)
    return values


def decoded(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Values of a dictionary-, run-end- or view-encoded column in their plain type, nested encodings
    too (others unchanged).

    Built here rather than by ``pc.cast``, which has no kernel for some of them (a dictionary of
    ``string_view``, what Polars' Categorical exports, or a run-end encoded column) and casts a
    ``list_view`` to a list array that fails validation.
    """
    plain = normalise_type(values.type)
    if plain == values.type:
        return values
    if isinstance(values, pa.ChunkedArray):
        chunks = [_decoded_array(c, plain) for c in values.chunks]
        if any(c.type != plain for c in chunks):  # one this cannot rebuild: left to the type checks
            return values
        return pa.chunked_array(chunks, type=plain)
    return _decoded_array(values, plain)


def _decoded_array(arr: pa.Array, plain: pa.DataType) -> pa.Array:
    kind = arr.type
    if kind == plain:
        return arr
    mask = arr.is_null() if arr.null_count else None
    try:
        if pa.types.is_run_end_encoded(kind):
            return _decoded_array(pc.run_end_decode(arr), plain)
        if pa.types.is_dictionary(kind):
            return _decoded_array(arr.dictionary, plain).take(arr.indices)
        if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
            valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            sizes = np.where(valid, np.asarray(arr.sizes.fill_null(0).to_numpy(), np.int64), 0)
            starts = np.asarray(arr.offsets.fill_null(0).to_numpy(), np.int64)
            ends = np.cumsum(sizes)
            at = np.repeat(starts - (ends - sizes), sizes) + np.arange(int(ends[-1]) if len(ends) else 0)
            items = _decoded_array(arr.values, plain.value_type).take(pa.array(at))
            offsets = np.concatenate([[0], ends])
            build = pa.ListArray if pa.types.is_list(plain) else pa.LargeListArray
            width = pa.int32() if pa.types.is_list(plain) else pa.int64()
            return build.from_arrays(pa.array(offsets, width), items, type=plain, mask=mask)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            lengths = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(), np.int64)
            items = _decoded_array(pc.list_flatten(arr), plain.value_type)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            build = pa.ListArray if pa.types.is_list(kind) else pa.LargeListArray
            width = pa.int32() if pa.types.is_list(kind) else pa.int64()
            return build.from_arrays(pa.array(offsets, width), items, type=plain, mask=mask)
        if pa.types.is_fixed_size_list(kind):
            size = kind.list_size
            items = arr.values.slice(arr.offset * size, len(arr) * size)
            return pa.FixedSizeListArray.from_arrays(
                _decoded_array(items, plain.value_type), type=plain, mask=mask
            )
        if pa.types.is_map(kind):
            offsets = np.asarray(arr.offsets.to_numpy(), np.int64)  # of the slice, into the whole children
            lo, hi = int(offsets[0]), int(offsets[-1])
            keys = _decoded_array(arr.keys.slice(lo, hi - lo), plain.key_type)
            items = _decoded_array(arr.items.slice(lo, hi - lo), plain.item_type)
            return pa.MapArray.from_arrays(
                pa.array(offsets - lo, pa.int32()), keys, items, type=plain, mask=mask
            )
        if pa.types.is_struct(kind):
            children = [_decoded_array(arr.field(i), plain.field(i).type) for i in range(kind.num_fields)]
            return pa.StructArray.from_arrays(children, fields=list(plain), mask=mask)
        return pc.cast(arr, plain)
    except _ARROW_ERRORS:  # a nesting this cannot rebuild: left to the type checks that follow
        return arr


def decoded_table(table: pa.Table) -> pa.Table:
    """``table`` with every encoded top-level column decoded (see :func:`decoded`)."""
    columns = [decoded(c) for c in table.columns]
    if all(a is b for a, b in zip(columns, table.columns)):
        return table
    fields = [f.with_type(c.type) for f, c in zip(table.schema, columns)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


# -- NOT NULL inside nested columns ------------------------------------------------------------------
#
# Arrow checks a field's NOT NULL nowhere but in the Parquet writer, and there on the raw child arrays:
# a NULL element in a NOT NULL list element fails the write with a bare ArrowInvalid, and so does a NULL
# struct whose NOT NULL children are NULL under it (pa.nulls builds those), although nothing is wrong with
# it. So present values are checked (a typed refusal naming the field's path) and the children of NULL
# parents are filled with zeros that no reader sees.


def _is_plain_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


@functools.lru_cache(maxsize=512)
def strict_nested(t: pa.DataType) -> bool:
    """Whether a field below the top of ``t`` is declared NOT NULL (a map's keys, which always are, and
    its entries aside)."""
    if pa.types.is_struct(t):
        return any(not f.nullable or strict_nested(f.type) for f in t)
    if pa.types.is_map(t):
        return not t.item_field.nullable or strict_nested(t.key_type) or strict_nested(t.item_type)
    if _is_plain_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return not t.value_field.nullable or strict_nested(t.value_type)
    return False


def relax_nested(t: pa.DataType) -> pa.DataType:
    """``t`` with every field below its top nullable, except a map's keys (Arrow requires them)."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(relax_nested(f.type)).with_nullable(True) for f in t])
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return pa.map_(
            key.with_type(relax_nested(key.type)),
            item.with_type(relax_nested(item.type)).with_nullable(True),
            t.keys_sorted,
        )
    if _is_plain_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        value = t.value_field.with_type(relax_nested(t.value_type)).with_nullable(True)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(value, t.list_size)
        if pa.types.is_large_list(t):
            return pa.large_list(value)
        if pa.types.is_list_view(t):
            return pa.list_view(value)
        if pa.types.is_large_list_view(t):
            return pa.large_list_view(value)
        return pa.list_(value)
    return t


def _map_entries(arr: pa.MapArray, t: pa.MapType) -> pa.Array:
    """The (key, item) entries of the present maps of ``arr``."""
    if arr.offset:
        arr = pa.concat_arrays([arr])  # offsets from zero: from_arrays takes no sliced offsets with a mask
    shape = arr.type  # t's shape, its fields possibly nullable
    entries = pa.StructArray.from_arrays([arr.keys, arr.items], fields=[shape.key_field, shape.item_field])
    mask = arr.is_null() if arr.null_count else None
    return pc.list_flatten(pa.ListArray.from_arrays(arr.offsets, entries, mask=mask))


def _null_inside(arr: pa.Array, t: pa.DataType, path: str) -> str | None:
    """The path of a NOT NULL field below ``arr`` that holds a NULL inside a present value, if any."""
    if pa.types.is_struct(t):
        kids: list[tuple[pa.Field, pa.Array]] = list(zip(t, arr.flatten()))  # NULL under a NULL parent
        present = arr.is_valid() if arr.null_count else None
    elif pa.types.is_map(t):
        entries = _map_entries(arr, t)
        kids = [(t.key_field, entries.field(0)), (t.item_field, entries.field(1))]
        present = None
    elif _is_plain_list(t):
        kids, present = [(t.value_field, pc.list_flatten(arr))], None  # the values of present lists
    else:
        return None
    for f, kid in kids:
        where = f"{path}.{f.name}"
        if not f.nullable and kid.null_count:
            hole = kid.is_null() if present is None else pc.and_(kid.is_null(), present)
            if pc.any(hole).as_py():
                return where
        if strict_nested(f.type) and (found := _null_inside(kid, f.type, where)):
            return found
    return None


def _raw_children(arr: pa.Array, t: pa.DataType) -> list[tuple[pa.Field, pa.Array]]:
    if pa.types.is_struct(t):
        return [(f, arr.field(i)) for i, f in enumerate(t)]
    if pa.types.is_map(t):
        return [(t.key_field, arr.keys), (t.item_field, arr.items)]
    if _is_plain_list(t):
        return [(t.value_field, arr.values)]
    return []


def _hidden_nulls(arr: pa.Array, t: pa.DataType) -> bool:
    """Whether a NOT NULL field below ``arr`` has NULLs in its arrays (under NULL parents, once checked)."""
    return any(
        (not f.nullable and kid.null_count) or (strict_nested(f.type) and _hidden_nulls(kid, f.type))
        for f, kid in _raw_children(arr, t)
    )


def _zeros(t: pa.DataType, n: int) -> pa.Array:
    """``n`` present values of ``t`` with every field present: zeros, empty strings and lists."""
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_zeros(f.type, n) for f in t], fields=list(t))
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(_zeros(t.value_type, n * t.list_size), type=t)
    if pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.repeat(pa.scalar([], t), n)
    if pa.types.is_boolean(t):
        return pa.repeat(pa.scalar(False), n)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return pa.repeat(pa.scalar(b"" if is_bytes_type(t) else "", t), n)
    width = t.bit_width  # numbers, decimals, dates, times, timestamps, durations, fixed-size binary
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(bytes(n * width // 8))])


def _fill(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` (of ``t``'s shape; its own fields may be nullable) with the NULLs of ``t``'s NOT NULL fields
    below it replaced by zeros: once checked, they lie under NULL parents, where no reader sees them."""
    if not _hidden_nulls(arr, t):
        return arr
    if arr.offset:
        arr = pa.concat_arrays([arr])
    shape = arr.type
    mask = arr.is_null() if arr.null_count else None
    kids = []
    for f, kid in _raw_children(arr, t):
        kid = _fill(kid, f.type) if strict_nested(f.type) else kid
        if not f.nullable and kid.null_count:
            kid = pc.if_else(kid.is_valid(), kid, _zeros(kid.type, len(kid)))
        kids.append(kid)
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(kids, fields=list(shape), mask=mask)
    if pa.types.is_map(t):
        return pa.MapArray.from_arrays(arr.offsets, kids[0], kids[1], type=shape, mask=mask)
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(kids[0], type=shape, mask=mask)
    return type(arr).from_arrays(arr.offsets, kids[0], type=shape, mask=mask)


def nested_not_null(
    values: pa.Array | pa.ChunkedArray,
    target: pa.DataType,
    column: str,
    identifier: str,
    rows: pa.Array | pa.ChunkedArray | None = None,
) -> pa.Array | pa.ChunkedArray:
    """``values`` (of ``target``'s shape) as ``target``, ready to store: :class:`SchemaMismatch` naming the
    field (``arr.element``, ``s.f``, ``m.value``) when a NOT NULL field inside the column holds a NULL
    within a present value of ``rows`` (a boolean mask; every row when None), and NULLs under NULL parents
    filled. Values of types without such fields are returned as given."""
    t = target
    if not strict_nested(t):
        return values
    checked = values if rows is None else values.filter(rows)
    chunks = checked.chunks if isinstance(checked, pa.ChunkedArray) else [checked]
    for chunk in chunks:
        where = _null_inside(chunk, t, column)
        if where is not None:
            raise SchemaMismatch(
                f"{identifier}: {where!r} holds a NULL but is declared NOT NULL inside column {column!r} "
                f"({t}); the table is unchanged"
            )
    if isinstance(values, pa.ChunkedArray):
        out: pa.Array | pa.ChunkedArray = pa.chunked_array(
            [_fill(c, t) for c in values.chunks], type=values.type
        )
    else:
        out = _fill(values, t)
    return out if out.type == t else pc.cast(out, t)


SECONDS_STORABLE = (2**63 - 1) // 1000  # Parquet has no unit of seconds: they are stored as milliseconds
DAY_MILLIS = 86_400_000  # Parquet keeps a date64 as DATE, days in 32 bits


def _bounded_by_parquet(t: pa.DataType) -> bool:
    """Whether Parquet keeps this type in a unit narrower than Arrow's (values may not fit)."""
    return bool((pa.types.is_timestamp(t) and t.unit == "s") or pa.types.is_date64(t))


def holds_bounded(t: pa.DataType) -> bool:
    """Whether values of this type (or nested in it) may not fit Parquet's unit for them."""
    return _bounded_by_parquet(t) or any(holds_bounded(t.field(i).type) for i in range(t.num_fields))


def _bounded_leaves(arr: pa.Array) -> Iterator[pa.Array]:
    """The values of ``arr`` (nested ones included: lists and maps flattened, struct fields) whose type
    Parquet keeps in a narrower unit."""
    t = arr.type
    if _bounded_by_parquet(t):
        yield arr
    elif pa.types.is_struct(t):
        for child in arr.flatten():  # the struct's offset and NULLs applied
            yield from _bounded_leaves(child)
    elif pa.types.is_map(t):  # its keys and items, offsets applied (maps have no flatten kernel)
        for part in (arr.keys, arr.items):
            yield from _bounded_leaves(pa.ListArray.from_arrays(arr.offsets, part).flatten())
    elif t.num_fields == 1:  # list types: their values, offsets applied
        yield from _bounded_leaves(arr.flatten())


def check_storable(values: pa.ChunkedArray | pa.Array, f: pa.Field, identifier: str) -> None:
    """Refuse values Parquet cannot hold in the unit it keeps the type in, at any depth: ``timestamp[s]``
    beyond what milliseconds hold (about 292 million years from 1970), which failed in the writer, and
    ``date64`` beyond days in 32 bits (about 5.9 million years), which Arrow's conversion to DATE wrapped
    silently, and a ``date64`` that is not a whole day (Arrow's format asks for one), which DATE truncated
    silently."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    for leaf in (x for chunk in chunks for x in _bounded_leaves(chunk)):
        if len(leaf) == leaf.null_count:
            continue
        raw = leaf.cast(pa.int64())
        lo, hi = (s.as_py() for s in pc.min_max(raw).values())
        if pa.types.is_date64(leaf.type):
            # Arrow asks a date64 for whole days; Parquet's DATE would keep another truncated to its day.
            if pc.any(pc.not_equal(pc.multiply(pc.divide(raw, DAY_MILLIS), DAY_MILLIS), raw)).as_py():
                limit = "milliseconds that are not a whole day, which Parquet's DATE cannot store"
            elif lo // DAY_MILLIS >= -(2**31) and hi // DAY_MILLIS < 2**31:
                continue
            else:
                limit = "days beyond 32 bits, which Parquet's DATE cannot store"
        else:
            if max(-lo, hi) <= SECONDS_STORABLE:
                continue
            limit = f"seconds beyond ±{SECONDS_STORABLE}, which Parquet's milliseconds cannot store"
        raise InvalidInput(f"{identifier}: column {f.name!r} holds a {leaf.type} value of {limit}")
