"""Reading files written under an older schema: columns are matched by field id, not by name.

Only tables whose schema changed (``TableSpec.evolved``) pay for this; for them each file's columns are
mapped once, when its cursor opens (its footer is already cached). Files written before mere recorded
Parquet field ids name their columns as the table did before its first schema change
(``TableSpec.legacy_field_ids``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mere.io import Storage
from mere.metadata import FileEntry
from mere.spec import FIELD_ID_KEY, LAST_FIELD_ID_KEY, OP_COLUMN, TOMBSTONE_TIME_COLUMN, TableSpec


@dataclass(frozen=True)
class FileColumns:
    """How one file's top-level columns map to the table's current columns."""

    to_table: Mapping[str, str]  # file column -> table column (dropped columns are absent)
    from_table: Mapping[str, str]  # table column -> file column
    known_up_to: int  # the newest field id when the file was written: later columns read their default

    def defaulted(self, spec: TableSpec, columns: Sequence[str], whole_rows: bool) -> list[str]:
        """Those of ``columns`` the file lacks and whose rows read the column's default: columns added
        after it was written, and, in a file of whole rows, any column it lacks (one dropped when it was
        written and brought back by a rollback since). A partial file lacks a column it knew because it
        did not write it: older versions hold that column's value."""
        return [
            c
            for c in columns
            if c in spec.field_ids
            and c not in self.from_table
            and (whole_rows or spec.field_ids[c] > self.known_up_to)
        ]

    def file_names(self, columns: Sequence[str]) -> list[str]:
        """The file's names of those table columns the file holds."""
        return [self.from_table[c] for c in columns if c in self.from_table]


def file_columns(spec: TableSpec, md: pq.FileMetaData) -> FileColumns:
    """Map a file's columns to ``spec``'s by field id (the file's own ids, else the legacy names)."""
    arrow = md.schema.to_arrow_schema()
    ids = {f.name: int(f.metadata[FIELD_ID_KEY]) for f in arrow if f.metadata and FIELD_ID_KEY in f.metadata}
    legacy = spec.legacy_field_ids if spec.legacy_field_ids is not None else spec.field_ids
    if not ids:
        ids = {name: legacy[name] for name in arrow.names if name in legacy}
    stamp = (md.metadata or {}).get(LAST_FIELD_ID_KEY)
    known = int(stamp) if stamp is not None else max(legacy.values(), default=0)
    by_id = {fid: name for name, fid in spec.field_ids.items()}
    to_table: dict[str, str] = {}
    for name in arrow.names:
        if name in ids:
            target = by_id.get(ids[name])
            if target is not None:
                to_table[name] = target
        elif name in (OP_COLUMN, TOMBSTONE_TIME_COLUMN):  # mere's own columns keep their names
            to_table[name] = name
    return FileColumns(to_table, {t: f for f, t in to_table.items()}, known)


def to_table_columns(
    table: pa.Table, mapping: FileColumns, spec: TableSpec, fill: Sequence[str] = ()
) -> pa.Table:
    """Rows read from a file, renamed to the table's columns and cast to their (widened) types; ``fill``
    columns, which the file predates, take their default (or null)."""
    names = spec.schema.names
    arrays: list[pa.ChunkedArray | pa.Array] = []
    fields: list[pa.Field] = []
    for f, column in zip(table.schema, table.columns):
        target = mapping.to_table[f.name]
        if target in names:
            want = spec.schema.field(target).type
            if column.type != want and not pa.types.is_dictionary(column.type):
                column = column.cast(want)
        arrays.append(column)
        fields.append(pa.field(target, column.type, f.nullable))
    for name in fill:
        kind = spec.schema.field(name).type
        default = spec.defaults.get(spec.field_ids[name])
        arrays.append(
            pa.nulls(table.num_rows, kind) if default is None else pa.repeat(default, table.num_rows)
        )
        fields.append(pa.field(name, kind, True))
    if not arrays:  # no column asked for (a count): the rows still count
        return table.select([])
    return in_table_types(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), spec)


def stored_as_table(spec: TableSpec, md: pq.FileMetaData) -> bool:
    """Whether a file holds every table column under its current name and type (string and binary
    widths aside), so any Parquet reader reads it as the table's rows."""
    mapping = file_columns(spec, md)
    if any(mapping.to_table[n] != n for n in mapping.to_table) or set(spec.schema.names) - set(
        mapping.from_table
    ):
        return False
    stored = md.schema.to_arrow_schema()
    for f in spec.schema:
        kind = stored.field(f.name).type
        if kind != f.type and not (_width_only(kind, f.type)):
            return False
    return True


def _width_only(a: pa.DataType, b: pa.DataType) -> bool:
    strings = (pa.string(), pa.large_string())
    binaries = (pa.binary(), pa.large_binary())
    return (a in strings and b in strings) or (a in binaries and b in binaries)


@dataclass
class StoredFile:
    """A data, delete or log file read whole, as written: ``rows`` without the operation column, ``ops``
    (the ``_mere_op`` column as NumPy; None when the file has none) and the file's footer ``md``."""

    rows: pa.Table
    ops: np.ndarray | None
    md: pq.FileMetaData

    def as_table(self, spec: TableSpec) -> pa.Table:
        """The rows as the table's current columns (see :func:`whole_file_as_table`)."""
        return whole_file_as_table(self.rows, spec, self.md)


def read_stored_file(storage: Storage, entry: FileEntry) -> StoredFile:
    """Every row group of ``entry``'s file, every column, as written (one owner for this read: the change
    feed's logs, the before-images of a logged commit and a lost race's winners all read files whole)."""
    md = storage.metadata(entry.path, entry.size_bytes or None)
    raw = storage.read_row_groups(entry.path, range(md.num_row_groups), None, entry.size_bytes or None)
    ops = None
    if OP_COLUMN in raw.column_names:
        ops = np.asarray(raw.column(OP_COLUMN).to_numpy(zero_copy_only=False))
        raw = raw.drop_columns([OP_COLUMN])
    return StoredFile(raw, ops, md)


def whole_file_as_table(table: pa.Table, spec: TableSpec, md: pq.FileMetaData) -> pa.Table:
    """Every column of a file read whole, as the table's current columns (a copy-on-write rewrite)."""
    if not spec.evolved:
        return in_table_types(without_field_ids(table), spec)
    mapping = file_columns(spec, md)
    kept = table.select([n for n in table.column_names if n in mapping.to_table])
    fill = mapping.defaulted(spec, spec.schema.names, whole_rows=True)
    return to_table_columns(kept, mapping, spec, fill)


def in_table_types(table: pa.Table, spec: TableSpec) -> pa.Table:
    """Top-level columns whose stored type stands for the table's type, given the table's type:
    time-zone-aware timestamps labelled with their table column's zone (no copy: the stored instants are
    the same; Parquet keeps instants in UTC and gives them back labelled UTC), and decimal256 columns of at
    most 38 digits, which Parquet gives back as decimal128 (widened: a copy). Filters and SQL functions
    (``hour(ts)``, ``greatest(d, 2)``, ``d * i``) are lowered against the table's types and must see them.
    Fields inside structs and lists keep their stored types."""
    relabelled = _relabelled_columns(spec)
    if not relabelled:
        return table
    fields = list(table.schema)
    changed = False
    for i, f in enumerate(fields):
        want = relabelled.get(f.name)
        if want is None or f.type == want:
            continue
        if pa.types.is_timestamp(want) and pa.types.is_timestamp(f.type) and f.type.tz is not None:
            fields[i] = f.with_type(pa.timestamp(f.type.unit, want.tz))
            changed = True
        elif pa.types.is_decimal256(want) and pa.types.is_decimal128(f.type) and f.type.scale == want.scale:
            fields[i] = f.with_type(pa.decimal256(f.type.precision, f.type.scale))
            changed = True
    if not changed:
        return table
    arrays = [c.cast(f.type) if c.type != f.type else c for c, f in zip(table.columns, fields)]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def _relabelled_columns(spec: TableSpec) -> dict[str, pa.DataType]:
    """The spec's top-level timestamp columns with a time zone other than UTC and its decimal256 columns
    (cached on the spec)."""
    found = spec.__dict__.get("_relabelled_columns")
    if found is None:
        found = {
            f.name: f.type
            for f in spec.schema
            if (pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz not in ("UTC", "utc"))
            or pa.types.is_decimal256(f.type)
        }
        object.__setattr__(spec, "_relabelled_columns", found)
    return found


def without_field_ids(table: pa.Table) -> pa.Table:
    """Drop the Parquet field ids pyarrow puts in the fields of rows it reads (they are the files'
    business, not the caller's)."""
    if not any(f.metadata and FIELD_ID_KEY in f.metadata for f in table.schema):
        return table
    fields = []
    for f in table.schema:
        if f.metadata and FIELD_ID_KEY in f.metadata:
            rest = {k: v for k, v in f.metadata.items() if k != FIELD_ID_KEY}
            f = f.remove_metadata() if not rest else f.with_metadata(rest)
        fields.append(f)
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, metadata=table.schema.metadata))
