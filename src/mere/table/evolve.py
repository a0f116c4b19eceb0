"""Schema evolution: add, widen, rename and drop columns, as changes of a table's layout (committed by
:class:`mere.table.ops.evolve.SchemaUpdate`).

Columns carry stable field ids (in the spec, and in every Parquet file written since ids were written),
so a change never rewrites data: readers map each file's columns to the table's by id. A renamed column
keeps its id; a dropped column's id is never given again (a column added later under the same name is a
new column, and old files' values of the dropped one stay hidden); a widened column's old values are cast
on read; an added column reads as its default (or null) in rows written before it existed.

Key, partition and bucket columns cannot be dropped, renamed or retyped: files are sorted, bucketed and
placed by them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from mere.errors import InvalidInput, SchemaMismatch, UnsupportedType
from mere.spec import RESERVED_COLUMNS, TableSpec, storable_text
from mere.write.cast import check_storable, holds_bounded, incompatibility, lossless_cast

_SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOATS = [pa.float16(), pa.float32(), pa.float64()]


def can_widen(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly a value of ``new`` (the type changes mere allows)."""
    if old == new:
        return True
    for ladder in (_SIGNED, _UNSIGNED, _FLOATS):
        if old in ladder and new in ladder:
            return ladder.index(new) > ladder.index(old)
    if old in _UNSIGNED and new in _SIGNED:  # uint8 -> int16, ...: the signed type must be wider
        return bool(new.bit_width > old.bit_width)
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return bool(new.scale == old.scale and new.precision >= old.precision)
    return (old, new) in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary()))


_NOT_A_VALUE = (
    SchemaMismatch,
    InvalidInput,
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    TypeError,
    ValueError,
    OverflowError,
)


def _value_of(value: Any, kind: pa.DataType) -> pa.Array:
    """``value`` as a one-element array of ``kind``, by the rules writes follow (:mod:`mere.write.cast`):
    nothing parsed, rounded or guessed. Arrow's own conversion would take ``"abc"`` as a list of letters,
    drop a struct's unknown fields and truncate ``1.5`` to an integer. Recursion runs per element of one
    value, never per row."""
    if value is None:
        return pa.nulls(1, kind)
    if isinstance(value, pa.Scalar):  # typed already: the write rules decide between the two types
        given = pa.array([value], value.type)  # its own value (as_py() floors a date64 to its day)
        return _checked(given, kind)
    if pa.types.is_struct(kind):
        if not isinstance(value, Mapping):
            raise InvalidInput(f"a {kind} value is a dict of its fields, not {type(value).__name__}")
        names = [kind.field(i).name for i in range(kind.num_fields)]
        unknown = [k for k in value if k not in names]
        if unknown:
            raise InvalidInput(f"{kind} has no field {unknown[0]!r}")
        children = [
            _value_of(value.get(kind.field(i).name), kind.field(i).type) for i in range(kind.num_fields)
        ]
        return pa.StructArray.from_arrays(children, fields=[kind.field(i) for i in range(kind.num_fields)])
    if pa.types.is_map(kind):
        pairs = list(value.items()) if isinstance(value, Mapping) else _items(value, kind)
        if any(not isinstance(p, (tuple, list)) or len(p) != 2 for p in pairs):
            raise InvalidInput(f"a {kind} value is a dict or a list of (key, value) pairs")
        keys = _elements([p[0] for p in pairs], kind.key_type)
        items = _elements([p[1] for p in pairs], kind.item_type)
        return pa.MapArray.from_arrays(pa.array([0, len(pairs)], pa.int32()), keys, items, type=kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        elements = _elements(_items(value, kind), kind.value_type)
        if pa.types.is_fixed_size_list(kind):
            if len(elements) != kind.list_size:
                raise InvalidInput(f"a {kind} value holds {kind.list_size} elements, not {len(elements)}")
            return pa.FixedSizeListArray.from_arrays(elements, type=kind)
        offsets = pa.array([0, len(elements)], pa.int64() if pa.types.is_large_list(kind) else pa.int32())
        return (pa.LargeListArray if pa.types.is_large_list(kind) else pa.ListArray).from_arrays(
            offsets, elements, type=kind
        )
    if isinstance(value, int) and not isinstance(value, bool) and value > 2**63 - 1:
        return _checked(pa.array([value], pa.uint64()), kind)  # Arrow would guess int64 and overflow
    return _checked(pa.array([value]), kind)


def _checked(given: pa.Array, kind: pa.DataType) -> pa.Array:
    why = incompatibility(given.type, kind)
    if why is not None:
        raise InvalidInput(f"a {given.type} value: {why}")
    try:
        value = lossless_cast(given, kind, "default", "value")
    except SchemaMismatch:
        raise InvalidInput(f"the {given.type} value would change when stored as {kind}") from None
    if holds_bounded(kind):  # as every written value: what Parquet cannot store is refused
        check_storable(value, pa.field("value", kind), "default")
    return value


def _items(value: Any, kind: pa.DataType) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidInput(f"a {kind} value is a list, not {type(value).__name__}")
    return list(value)


def _elements(values: list[Any], kind: pa.DataType) -> pa.Array:
    parts = [_value_of(v, kind) for v in values]
    return pa.concat_arrays(parts) if parts else pa.array([], kind)


def _data_type(value: Any, what: str) -> pa.DataType:
    if isinstance(value, pa.DataType):
        return value
    if isinstance(value, str):
        try:
            return pa.type_for_alias(value)
        except (ValueError, KeyError):
            pass
    raise InvalidInput(f"{what} must be a pyarrow DataType or a type name such as 'int64', got {value!r}")


def _column_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty column name, got {value!r}")
    return value


def _existing(spec: TableSpec, column: Any, verb: str, table: str) -> str:
    name = _column_name(column, "column")
    if name not in spec.schema.names:
        raise SchemaMismatch(f"{table}: no column {name!r} to {verb}; the table has {spec.schema.names}")
    if name in spec.identity_columns:
        role = "primary-key" if name in spec.primary_key else "partition"
        done = {"drop": "dropped", "rename": "renamed", "retype": "retyped"}.get(verb, verb)
        raise InvalidInput(f"{table}: {name!r} is a {role} column and cannot be {done}")
    return name


def check_new_columns(spec: TableSpec, names: Sequence[str], table: str) -> None:
    """Raise what adding ``names`` in order would (a name taken, alike but for case to a column or to an
    earlier one of them, reserved), before anything is written: a caller that adds columns in a commit
    refuses its input up front instead of failing midway."""
    taken = list(spec.schema.names)
    for name in names:
        _new_name(spec, name, table, taken=taken)
        taken.append(name)


def _new_name(
    spec: TableSpec, value: Any, table: str, renaming: str | None = None, taken: Sequence[str] | None = None
) -> str:
    name = _column_name(value, "the new column name")
    names = spec.schema.names if taken is None else taken
    if name in names:
        raise SchemaMismatch(f"{table}: the table already has a column {name!r}")
    if not storable_text(name):
        raise SchemaMismatch(
            f"{table}: a column name must be text without NUL that UTF-8 can encode, got {name!r}"
        )
    same = [n for n in names if n.lower() == name.lower() and n != renaming]
    if same:
        raise SchemaMismatch(
            f"{table}: {name!r} differs from column {same[0]!r} only in case (Spark and DuckDB resolve names "
            "without it)"
        )
    if name in RESERVED_COLUMNS or name == spec.cdc_column:
        raise SchemaMismatch(f"{table}: column name {name!r} is reserved")
    return name


def _started(spec: TableSpec) -> TableSpec:
    """The spec about to change for the first time remembers how files without field ids name columns."""
    return spec if spec.evolved else replace(spec, legacy_field_ids=dict(spec.field_ids))


def add_column(
    spec: TableSpec, name: Any, data_type: Any, default: Any = None, *, table: str = "table"
) -> TableSpec:
    """``spec`` with a nullable column appended; older rows read ``default`` (None: null)."""
    name = _new_name(spec, name, table)
    kind = _data_type(data_type, "type")
    schema = spec.schema.append(pa.field(name, kind, nullable=True))
    try:  # the same checks as a new table's columns (storable types, names)
        checked = TableSpec.create(schema, spec.primary_key, spec.partition_by, spec.buckets)
    except (SchemaMismatch, UnsupportedType) as e:
        raise type(e)(f"{table}: {e}") from None
    field = checked.schema.field(name)
    spec = _started(spec)
    new_id = spec.last_field_id + 1
    defaults = dict(spec.defaults)
    if default is not None:
        try:
            defaults[new_id] = _value_of(default, field.type)[0]
        except _NOT_A_VALUE as e:
            raise InvalidInput(
                f"{table}: default {default!r} is not a value of type {field.type}: {str(e).splitlines()[0]}"
            ) from None
    return replace(
        spec,
        schema=spec.schema.append(field),
        field_ids={**spec.field_ids, name: new_id},
        last_field_id=new_id,
        defaults=defaults,
    )


def widen(spec: TableSpec, column: Any, data_type: Any, *, table: str = "table") -> TableSpec:
    """``spec`` with ``column`` of a wider type (int8 -> ... -> int64, float32 -> float64, decimal precision
    up, string -> large_string, binary -> large_binary); the same type changes nothing."""
    name = _existing(spec, column, "retype", table)
    kind = _data_type(data_type, "type")
    old = spec.schema.field(name)
    if old.type == kind:
        return spec
    if not can_widen(old.type, kind):
        raise SchemaMismatch(
            f"{table}: cannot change {name!r} from {old.type} to {kind}: only widening that keeps every "
            "value (int8 -> int16 -> int32 -> int64, float32 -> float64, decimal precision up at the same "
            "scale, string -> large_string, binary -> large_binary) is allowed"
        )
    op = spec.operator(name)
    if op.name == "concat" and not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InvalidInput(f"{table}: {name!r} has merge operator 'concat' and must stay a string")
    if spec.sequence_groups and (name in spec.sequence_groups or name in spec.sequence_by):
        raise InvalidInput(
            f"{table}: {name!r} orders sequence groups (group sequences share the type of sequence_by) and "
            "cannot be widened on its own"
        )
    spec = _started(spec)
    index = spec.schema.get_field_index(name)
    fid = spec.field_ids[name]
    defaults = dict(spec.defaults)
    if fid in defaults:
        defaults[fid] = defaults[fid].cast(kind)
    return replace(spec, schema=spec.schema.set(index, old.with_type(kind)), defaults=defaults)


def rename_column(spec: TableSpec, column: Any, new_name: Any, *, table: str = "table") -> TableSpec:
    """``spec`` with ``column`` called ``new_name`` (same id, same place, same merge operator)."""
    name = _existing(spec, column, "rename", table)
    new = _new_name(spec, new_name, table, renaming=name)
    if spec.operator(name).name == "sum":
        # The integer-sum range checks read file statistics by name; renaming would blind them.
        raise InvalidInput(f"{table}: {name!r} has merge operator 'sum' and cannot be renamed")
    spec = _started(spec)
    index = spec.schema.get_field_index(name)
    ops = {(new if c == name else c): op for c, op in spec.merge_operators.items()}
    ids = {(new if c == name else c): i for c, i in spec.field_ids.items()}
    return replace(
        spec,
        schema=spec.schema.set(index, spec.schema.field(name).with_name(new)),
        merge_operators=ops,
        field_ids=ids,
        sequence_by=tuple(new if c == name else c for c in spec.sequence_by),
        sequence_groups={
            (new if g == name else g): tuple(new if c == name else c for c in cs)
            for g, cs in spec.sequence_groups.items()
        },
    )


def drop_column(spec: TableSpec, column: Any, *, table: str = "table") -> TableSpec:
    """``spec`` without ``column``; its id is retired, its data stays in old files, unread."""
    name = _existing(spec, column, "drop", table)
    if name in spec.sequence_by:
        raise InvalidInput(
            f"{table}: {name!r} is a sequence_by column and cannot be dropped (it orders the versions of "
            "each key); change sequence_by first (Table.set_sequence_by)"
        )
    if name in spec.grouped:
        raise InvalidInput(
            f"{table}: {name!r} belongs to the sequence group {spec.grouped[name]!r} and cannot be dropped "
            "(groups are fixed at create_table)"
        )
    if len(spec.schema) == 1:
        raise InvalidInput(f"{table}: cannot drop {name!r}, the table's only column")
    spec = _started(spec)
    fid = spec.field_ids[name]
    return replace(
        spec,
        schema=spec.schema.remove(spec.schema.get_field_index(name)),
        merge_operators={c: op for c, op in spec.merge_operators.items() if c != name},
        field_ids={c: i for c, i in spec.field_ids.items() if c != name},
        defaults={i: v for i, v in spec.defaults.items() if i != fid},
    )


def same_columns(a: TableSpec, b: TableSpec) -> bool:
    """Whether two specs read files the same way (schema, ids, defaults and sequence columns; properties
    aside)."""
    return (
        a.schema.equals(b.schema)
        and dict(a.field_ids) == dict(b.field_ids)
        and (None if a.legacy_field_ids is None else dict(a.legacy_field_ids))
        == (None if b.legacy_field_ids is None else dict(b.legacy_field_ids))
        and {i: v.as_py() for i, v in a.defaults.items()} == {i: v.as_py() for i, v in b.defaults.items()}
        and a.sequence_by == b.sequence_by  # they order versions: a writer must know them
    )
