"""Writing mere's Parquet files: how a table of rows is encoded; :class:`~mere.io.storage.Storage` moves
the bytes.

Every file has statistics. Sort columns are delta-encoded: sorted, mostly unique keys shrink to a few bits
each, which keeps key lookups (that read key columns first) cheap. Other columns are dictionary-encoded
only when a sample shows few distinct values. Key-sorted files get a key index (:mod:`mere.io.keyindex`),
and the schema's ``mere.*`` metadata is kept in the footer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mere.io import keyindex
from mere.io.storage import Storage


@dataclass(frozen=True)
class WrittenFile:
    """A file :func:`write_parquet` wrote."""

    path: str  # relative to the storage root
    size_bytes: int
    row_count: int


def write_parquet(
    storage: Storage,
    rel: str,
    table: pa.Table,
    *,
    row_group_rows: int,
    sorting_columns: Sequence[str] = (),
    compression: str = "lz4",
    compression_level: int | None = None,
    key_index: bool = True,
) -> WrittenFile:
    """Write one Parquet file (with statistics) at a path of the storage that must not exist yet.

    Key-sorted files get a key index unless ``key_index`` is False. On object stores the file is encoded
    in memory, then uploaded (see :meth:`Storage.write`); a failed write leaves no object behind and no
    referenced file.
    """
    options = writer_options(
        table,
        row_group_rows=row_group_rows,
        sorting_columns=sorting_columns,
        compression=compression,
        compression_level=compression_level,
        key_index=key_index,
    )

    def encode(sink: pa.NativeFile) -> None:
        with pq.ParquetWriter(sink, table.schema, **options) as writer:
            writer.write_table(table, row_group_size=row_group_rows)
            _add_mere_metadata(writer, table.schema)

    size = storage.write(rel, encode)
    return WrittenFile(rel, size, table.num_rows)


def writer_options(
    table: pa.Table,
    *,
    row_group_rows: int,
    sorting_columns: Sequence[str] = (),
    compression: str = "lz4",
    compression_level: int | None = None,
    key_index: bool = True,
) -> dict[str, Any]:
    """The ``ParquetWriter`` options of a file of these rows (see the module's docstring)."""
    sorting = None
    if sorting_columns:
        sorting = [pq.SortingColumn(table.schema.get_field_index(c)) for c in sorting_columns]
    encodings = {c: e for c in sorting_columns if (e := _delta_encoding(table.schema.field(c).type))}
    dictionary = _dictionary_columns(table, encodings)
    options: dict[str, Any] = dict(
        compression=compression,
        compression_level=compression_level,
        write_statistics=True,
        sorting_columns=sorting,
        use_dictionary=dictionary,
        column_encoding=encodings or None,
        store_schema=False,  # readers cast to the table schema; dictionary columns read as plain
    )
    if sorting_columns and key_index:  # key-sorted files get a key index (see mere.io.keyindex)
        options.update(keyindex.writer_options(table, sorting_columns, row_group_rows))
    return options


def _add_mere_metadata(writer: pq.ParquetWriter, schema: pa.Schema) -> None:
    """Keep the schema's ``mere.*`` entries in the file's footer (the Arrow schema itself is not stored)."""
    ours = {k: v for k, v in (schema.metadata or {}).items() if k.startswith(b"mere.")}
    if ours:
        writer.add_key_value_metadata(ours)


def _delta_encoding(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return "DELTA_BINARY_PACKED"
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return "DELTA_BYTE_ARRAY"
    return None


DICTIONARY_SAMPLE_ROWS = 4096
DICTIONARY_MAX_DISTINCT = 0.5  # share of distinct values in the sample above which a column is written plain


def _dictionary_columns(table: pa.Table, skip: Iterable[str]) -> list[str]:
    """Columns worth dictionary encoding: few distinct values among rows sampled across the file.

    Parquet writers try a dictionary for every column by default; for measures, timestamps and ids the
    dictionary holds every value of a row group, which grows files and costs time to write and to read.
    Under half distinct in 4,096 sampled rows means a few thousand values at most: small dictionaries
    for our row groups.
    """
    skipped = set(skip)
    n = table.num_rows
    sample = None
    if n > DICTIONARY_SAMPLE_ROWS:
        sample = pa.array(np.linspace(0, n - 1, DICTIONARY_SAMPLE_ROWS).astype(np.int64))
    out = []
    for name in table.column_names:
        t = table.schema.field(name).type
        if name in skipped or pa.types.is_boolean(t) or pa.types.is_nested(t):
            continue
        if pa.types.is_dictionary(t) or n == 0:
            out.append(name)
            continue
        column = table.column(name)
        values = column if sample is None else column.take(sample)
        if pc.count_distinct(values, mode="all").as_py() <= max(16, len(values) * DICTIONARY_MAX_DISTINCT):
            out.append(name)
    return out
