"""Table specification: schema, primary key, partitioning, buckets and merge operators.

The spec is engine- and storage-neutral and serialises to JSON for the catalog.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from mere.errors import InvalidInput, SchemaMismatch, UnsupportedType

OP_COLUMN = "_mere_op"
"""Row-level change kind stored in primary-key table files."""

OP_MERGE = 0  # combine with the key's previous state using the merge operators
OP_DELETE = 1  # the key is gone
OP_PUT = 2  # forget the previous state, then merge into an empty row

MERGE_OPERATORS = ("last", "last_non_null", "sum", "concat")


@dataclass(frozen=True)
class MergeOperator:
    """How a column combines a key's versions on read. ``last`` keeps the newest value, nulls included."""

    name: str = "last"
    separator: str = ","

    @staticmethod
    def parse(column: str, value: str | Mapping[str, Any] | tuple[str, str] | MergeOperator) -> MergeOperator:
        if isinstance(value, MergeOperator):
            op = value
        elif isinstance(value, str):
            name, colon, sep = value.partition(":")
            op = MergeOperator(name.strip().lower(), sep if colon else ",")
        elif isinstance(value, tuple) and len(value) == 2:
            op = MergeOperator(str(value[0]).lower(), str(value[1]))
        elif isinstance(value, Mapping):
            op = MergeOperator(str(value.get("op", value.get("name", ""))).lower(),
                               str(value.get("separator", value.get("sep", ","))))
        else:
            raise InvalidInput(f"merge operator for column {column!r} must be a name like 'sum', got {value!r}")
        if op.name not in MERGE_OPERATORS:
            raise InvalidInput(
                f"unknown merge operator {op.name!r} for column {column!r}; choose one of {', '.join(MERGE_OPERATORS)}"
            )
        return op

    def to_json(self) -> dict[str, str]:
        return {"op": self.name, "separator": self.separator}


_PARTITION_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_date,
                    pa.types.is_boolean)


def is_key_type(t: pa.DataType) -> bool:
    """Types mere can hash into buckets the way Spark SQL does."""
    return bool(
        (pa.types.is_integer(t) and pa.types.is_signed_integer(t))
        or pa.types.is_string(t) or pa.types.is_large_string(t)
        or pa.types.is_binary(t) or pa.types.is_large_binary(t)
        or pa.types.is_boolean(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t)
        or (pa.types.is_decimal128(t) and t.precision <= 18)
    )


def _normalise_type(t: pa.DataType) -> pa.DataType:
    """Store plain large-free types; views and dictionaries become their value types."""
    if pa.types.is_dictionary(t):
        return _normalise_type(t.value_type)
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    return t


@dataclass(frozen=True)
class TableSpec:
    """Everything the catalog knows about a table's layout."""

    schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    buckets: int = 1
    merge_operators: Mapping[str, MergeOperator] = field(default_factory=dict)
    cdc_column: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_primary_key(self) -> bool:
        return bool(self.primary_key)

    @property
    def column_names(self) -> list[str]:
        return list(self.schema.names)

    @property
    def identity_columns(self) -> tuple[str, ...]:
        """Columns that identify a row: partition columns then the primary key."""
        return tuple(c for c in self.partition_by if c not in self.primary_key) + self.primary_key

    def operator(self, column: str) -> MergeOperator:
        return self.merge_operators.get(column, MergeOperator())

    @property
    def all_last(self) -> bool:
        return all(op.name == "last" for op in self.merge_operators.values())

    @staticmethod
    def create(
        schema: pa.Schema,
        primary_key: Sequence[str] | str | None = None,
        partition_by: Sequence[str] | str | None = None,
        buckets: int | None = None,
        merge_operators: Mapping[str, Any] | None = None,
        cdc_column: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> TableSpec:
        """Validate user arguments and build a spec; raises :class:`InvalidInput` on any problem."""
        if not isinstance(schema, pa.Schema):
            try:
                schema = pa.schema(schema)
            except (TypeError, ValueError) as e:
                raise SchemaMismatch(f"schema must be a pyarrow.Schema, got {type(schema).__name__}") from e
        pk = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key or ())
        parts = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by or ())
        if cdc_column is not None and cdc_column in schema.names:
            # The change column belongs to incoming batches, not to the stored rows.
            schema = schema.remove(schema.get_field_index(cdc_column))
        names = schema.names
        if len(set(names)) != len(names):
            raise SchemaMismatch(f"duplicate column names in schema: {names}")
        if not names:
            raise SchemaMismatch("schema has no columns")
        if OP_COLUMN in names:
            raise SchemaMismatch(f"column name {OP_COLUMN!r} is reserved")
        for group, label in ((pk, "primary key"), (parts, "partition")):
            if len(set(group)) != len(group):
                raise InvalidInput(f"duplicate {label} columns: {list(group)}")
            for c in group:
                if c not in names:
                    raise SchemaMismatch(f"{label} column {c!r} is not in the schema {names}")
        fields = []
        for f in schema:
            t = _normalise_type(f.type)
            nullable = f.nullable and f.name not in pk
            fields.append(pa.field(f.name, t, nullable=nullable, metadata=f.metadata))
        schema = pa.schema(fields, metadata=schema.metadata)
        for c in pk:
            t = schema.field(c).type
            if not is_key_type(t):
                raise UnsupportedType(
                    f"primary-key column {c!r} has type {t}; keys must be signed integers, strings, binary, "
                    "booleans, dates, timestamps or decimals of precision <= 18"
                )
        for c in parts:
            t = schema.field(c).type
            if not any(check(t) for check in _PARTITION_TYPES):
                raise UnsupportedType(f"partition column {c!r} has type {t}; use integers, strings, dates or booleans")
        if pk:
            n = 8 if buckets is None else buckets
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InvalidInput(f"buckets must be a positive integer, got {buckets!r}")
        else:
            if buckets not in (None, 1):
                raise InvalidInput("buckets apply to primary-key tables only; give primary_key=[...]")
            n = 1
        ops: dict[str, MergeOperator] = {}
        for c, spec in (merge_operators or {}).items():
            op = MergeOperator.parse(c, spec)
            if c not in names:
                raise SchemaMismatch(f"merge operator given for unknown column {c!r}")
            if not pk:
                raise InvalidInput("merge operators apply to primary-key tables only")
            if c in pk or c in parts:
                raise InvalidInput(f"column {c!r} is a key or partition column and cannot have a merge operator")
            t = schema.field(c).type
            if op.name == "sum" and not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                raise InvalidInput(f"merge operator 'sum' needs a numeric column; {c!r} is {t}")
            if op.name == "concat" and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise InvalidInput(f"merge operator 'concat' needs a string column; {c!r} is {t}")
            if op.name != "last":
                ops[c] = op
        if cdc_column is not None and not pk:
            raise InvalidInput("cdc_column needs a primary key")
        return TableSpec(schema, pk, parts, n, ops, cdc_column, dict(properties or {}))

    def to_json(self) -> str:
        return json.dumps({
            "format": 1,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "primary_key": list(self.primary_key),
            "partition_by": list(self.partition_by),
            "buckets": self.buckets,
            "merge_operators": {c: op.to_json() for c, op in self.merge_operators.items()},
            "cdc_column": self.cdc_column,
            "properties": dict(self.properties),
        }, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> TableSpec:
        d = json.loads(text)
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
        return TableSpec(
            schema=schema,
            primary_key=tuple(d["primary_key"]),
            partition_by=tuple(d["partition_by"]),
            buckets=int(d["buckets"]),
            merge_operators={c: MergeOperator(o["op"], o["separator"]) for c, o in d["merge_operators"].items()},
            cdc_column=d["cdc_column"],
            properties=dict(d["properties"]),
        )
