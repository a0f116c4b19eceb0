"""What mere reads from a Parquet footer: which leaf columns hold each top-level column, the leaf of a
primitive column (the only kind whose statistics mere uses) and the bytes of each column chunk.

Storage caches one :class:`Footer` per file; readers, the key index and the planner derive the rest from
it. Nothing here does IO.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mere.errors import StorageError

if TYPE_CHECKING:
    import pyarrow.dataset as ds


def column_leaves(md: pq.FileMetaData) -> dict[str, list[int]]:
    """Top-level column name -> indices of its Parquet leaf columns.

    Parquet's flat schema names leaves only (``l.list.element``, ``s.a``), and a top-level name may itself
    contain dots, even equal another column's leaf path: leaves are assigned by structure instead. Each
    top-level field owns the next run of leaves, as many as its type has primitive values.
    """
    fields = md.schema.to_arrow_schema()
    out = ColumnLeaves({name: [] for name in fields.names})
    counts = [_leaf_count(f.type) for f in fields]
    if sum(counts) != md.num_columns:  # pragma: no cover - a schema pyarrow maps some other way
        raise StorageError(f"cannot map the {md.num_columns} Parquet columns of a file to its fields")
    start = 0
    for f, n in zip(fields, counts):
        out[f.name] = list(range(start, start + n))
        start += n
    out.primitive = {f.name: out[f.name][0] for f in fields if not pa.types.is_nested(f.type)}
    return out


def _leaf_count(kind: pa.DataType) -> int:
    """How many Parquet leaf columns a field of this Arrow type has."""
    if pa.types.is_struct(kind):
        return sum(_leaf_count(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaf_count(kind.key_type) + _leaf_count(kind.item_type)
    if pa.types.is_nested(kind):  # the list types (unions are refused by create_table)
        return _leaf_count(kind.value_type)
    return 1


class ColumnLeaves(dict[str, list[int]]):
    """:func:`column_leaves` of one footer, with the leaf of each top-level primitive column worked out
    once (``primitive_leaf`` is asked per row group and column on every scan)."""

    primitive: dict[str, int]


def primitive_leaf(md: pq.FileMetaData, leaves: Mapping[str, Sequence[int]], column: str) -> int | None:
    """The leaf index of a top-level primitive column (the only kind with statistics mere uses)."""
    if isinstance(leaves, ColumnLeaves):
        return leaves.primitive.get(column)
    idx = leaves.get(column)
    if idx is None or len(idx) != 1 or md.schema.column(idx[0]).path != column:
        return None
    return idx[0]


REQUIRED_KEY = b"mere.required"  # footer metadata: the columns a file holds required that were nullable


def made_required(md: pq.FileMetaData) -> frozenset[str]:
    """The columns a file's writer made required for holding no NULL (see
    :func:`mere.io.parquet.required_where_no_nulls`)."""
    raw = (md.metadata or {}).get(REQUIRED_KEY)
    return frozenset(json.loads(raw)) if raw else frozenset()


def relaxed(table: pa.Table, names: frozenset[str]) -> pa.Table:
    """``table`` (read from a file) with its columns ``names`` nullable again, as they were written (no
    copy)."""
    if not names or not any(not f.nullable and f.name in names for f in table.schema):
        return table
    schema = pa.schema(
        [f.with_nullable(True) if f.name in names else f for f in table.schema],
        metadata=table.schema.metadata,
    )
    return pa.Table.from_arrays(table.columns, schema=schema)


class Footer:
    """A file's parsed footer with what readers derive from it (its column leaves, chunk sizes, and a dict
    of whatever else they parse, such as the key index, cached with it) and, on object stores, a dataset
    fragment that reads the file without a HEAD."""

    __slots__ = ("_leaves", "extra", "fragment", "metadata")

    def __init__(self, metadata: pq.FileMetaData, fragment: ds.ParquetFileFragment | None) -> None:
        self.metadata = metadata
        self.fragment = fragment
        self._leaves: dict[str, list[int]] | None = None
        self.extra: dict[str, Any] = {}  # what readers parse from the footer (key index), cached with it

    @property
    def made_required(self) -> frozenset[str]:
        """The columns the file's writer made required for holding no NULL (read back nullable)."""
        known = self.extra.get("made_required")
        if known is None:
            known = self.extra["made_required"] = made_required(self.metadata)
        return known

    @property
    def leaves(self) -> dict[str, list[int]]:
        if self._leaves is None:
            self._leaves = column_leaves(self.metadata)
        return self._leaves

    def group_bytes(self, leaves: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray]:
        """(uncompressed, stored) bytes of these leaf columns (None: every leaf) in each row group. Each
        leaf's chunk sizes are parsed once, and only those asked for: a read of one column of a wide file
        walks that column's chunks alone (pyarrow makes an object per chunk)."""
        md = self.metadata
        known: dict[int, tuple[np.ndarray, np.ndarray]] = self.extra.setdefault("leaf_bytes", {})
        wanted = list(range(md.num_columns)) if leaves is None else list(leaves)
        missing = [j for j in dict.fromkeys(wanted) if j not in known]
        if missing:
            shape = (len(missing), md.num_row_groups)
            uncompressed, stored = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
            for i in range(md.num_row_groups):
                rg = md.row_group(i)
                for at, j in enumerate(missing):
                    chunk = rg.column(j)
                    uncompressed[at, i] = chunk.total_uncompressed_size
                    stored[at, i] = chunk.total_compressed_size
            # Whole entries only: the footer is shared by the threads reading the file.
            known.update({j: (uncompressed[at], stored[at]) for at, j in enumerate(missing)})
        group_uncompressed = np.zeros(md.num_row_groups, dtype=np.int64)
        group_stored = np.zeros(md.num_row_groups, dtype=np.int64)
        for j in wanted:
            group_uncompressed += known[j][0]
            group_stored += known[j][1]
        return group_uncompressed, group_stored

    def read_layout(
        self, columns: Sequence[str] | None, dictionary: Sequence[str]
    ) -> tuple[list[str] | None, list[int] | None, list[int], list[int]]:
        """What a read of these columns derives from the footer, kept with it: the columns the file has
        (None: all), their leaf indices (None: all), the leaves to read as dictionaries, and the stored
        bytes of those leaves in each row group."""
        key = f"read:{None if columns is None else tuple(columns)}:{tuple(dictionary)}"
        layout = self.extra.get(key)
        if layout is None:
            md, leaves = self.metadata, self.leaves
            names = None if columns is None else [c for c in columns if c in leaves]
            read = None if names is None else [i for c in names for i in leaves[c]]
            as_dictionary = [i for c in dictionary if (i := primitive_leaf(md, leaves, c)) is not None]
            per_group = self.group_bytes(read)[1].tolist()
            layout = self.extra[key] = (names, read, as_dictionary, per_group)
        return layout
