"""Writing mere's Parquet files: how a table of rows is encoded; :class:`~mere.io.storage.Storage` moves
the bytes.

Every file has statistics. Sort columns are delta-encoded: sorted, mostly unique keys shrink to a few bits
each, which keeps key lookups (that read key columns first) cheap. Other columns are chosen an encoding
and a codec from blocks of rows sampled across the file (:func:`value_layout`), or across the biggest of
several files of alike rows that share one layout (:func:`choose_layout`):

- dictionary-encoded where the sample shows few distinct values;
- integers, dates and timestamps delta-encoded (``DELTA_BINARY_PACKED``) and left uncompressed where their
  bit-packed deltas are no bigger than the plain values under the table's codec: ids, counts and
  amounts within a range, and times, come out smaller and decode about twice as fast;
- uncompressed where the codec keeps over ``INCOMPRESSIBLE`` of the sampled bytes (random measures):
  decompressing them costs reads time and saves no bytes.

Columns holding no NULL in a file are required in it (:func:`required_where_no_nulls`). Key-sorted files
get a key index (:mod:`mere.io.keyindex`), and the schema's ``mere.*`` metadata is kept in the footer.
"""

from __future__ import annotations

import functools
import io
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mere.arrays import distinct_count, is_binary_like
from mere.io import keyindex
from mere.io.footer import REQUIRED_KEY
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
    layout: Layout | None = None,
) -> WrittenFile:
    """Write one Parquet file (with statistics) at a path of the storage that must not exist yet.

    Key-sorted files get a key index unless ``key_index`` is False. ``layout``: the value columns' encodings
    and codecs, chosen once for files of alike rows (see :func:`choose_layout`); chosen from these rows if
    None. On object stores the file is encoded in memory, then uploaded (see :meth:`Storage.write`); a
    failed write leaves no object behind and no referenced file.
    """
    table = required_where_no_nulls(table)
    options = writer_options(
        table,
        row_group_rows=row_group_rows,
        sorting_columns=sorting_columns,
        compression=compression,
        compression_level=compression_level,
        key_index=key_index,
        layout=layout,
    )

    def encode(sink: pa.NativeFile) -> None:
        with pq.ParquetWriter(sink, table.schema, **options) as writer:
            writer.write_table(table, row_group_size=row_group_rows)
            _add_mere_metadata(writer, table.schema)

    size = storage.write(rel, encode)
    return WrittenFile(rel, size, table.num_rows)


REQUIRED_WHERE_NO_NULLS = True  # False: every file keeps the table's nullability (benchmarks, tests)


def required_where_no_nulls(table: pa.Table) -> pa.Table:
    """``table`` with its nullable top-level columns that hold no NULL marked required (no copy), their
    names kept in the schema's ``mere.required`` metadata (which the file's footer keeps).

    A file's required column has no definition levels: readers skip decoding them (a quarter of the
    decode of numbers and dictionary indices). :meth:`Storage.read_row_groups` hands those columns back
    nullable, as written (:func:`mere.io.footer.relaxed`): every reader of mere sees the table's nullability, and any
    Parquet reader reads the file.
    """
    schema = table.schema
    if REQUIRED_KEY in (schema.metadata or {}):  # (rows read from a file carry its footer's list)
        table = table.replace_schema_metadata({k: v for k, v in schema.metadata.items() if k != REQUIRED_KEY})
        schema = table.schema
    if not REQUIRED_WHERE_NO_NULLS:
        return table
    made = [
        i
        for i, f in enumerate(schema)
        if f.nullable and not pa.types.is_null(f.type) and table.column(i).null_count == 0
    ]
    if not made:
        return table
    chosen = set(made)
    fields = [f.with_nullable(False) if i in chosen else f for i, f in enumerate(schema)]
    metadata = dict(schema.metadata or {})
    metadata[REQUIRED_KEY] = json.dumps([schema.field(i).name for i in made]).encode()
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, metadata=metadata))


def writer_options(
    table: pa.Table,
    *,
    row_group_rows: int,
    sorting_columns: Sequence[str] = (),
    compression: str = "lz4",
    compression_level: int | None = None,
    key_index: bool = True,
    layout: Layout | None = None,
) -> dict[str, Any]:
    """The ``ParquetWriter`` options of a file of these rows (see the module's docstring); ``layout`` as
    :func:`choose_layout` chose it for alike rows (None: chosen from these rows)."""
    sorting = None
    if sorting_columns:
        sorting = [pq.SortingColumn(table.schema.get_field_index(c)) for c in sorting_columns]
    if layout is None:
        layout = choose_layout(table, sorting_columns, compression, compression_level)
    codec: str | dict[str, str] = compression
    level: int | dict[str, int] | None = compression_level
    if layout.uncompressed:
        codec, level = _codecs(table.schema, layout.uncompressed, compression, compression_level)
    options: dict[str, Any] = dict(
        compression=codec,
        compression_level=level,
        write_statistics=True,
        sorting_columns=sorting,
        use_dictionary=list(layout.dictionary),
        column_encoding=dict(layout.encodings) or None,
        store_schema=False,  # readers cast to the table schema; dictionary columns read as plain
    )
    if sorting_columns and key_index:  # key-sorted files get a key index (see mere.io.keyindex)
        options.update(keyindex.writer_options(table, sorting_columns, row_group_rows))
    return options


@dataclass(frozen=True)
class Layout:
    """How a file's columns are stored: the dictionary-encoded columns, each column's encoding (where not
    pyarrow's default) and the columns written without the table's codec."""

    dictionary: tuple[str, ...]
    encodings: tuple[tuple[str, str], ...]
    uncompressed: tuple[str, ...]


def choose_layout(
    table: pa.Table,
    sorting_columns: Sequence[str] = (),
    compression: str = "lz4",
    compression_level: int | None = None,
    serves: int | None = None,
) -> Layout:
    """The layout for files of rows like ``table``'s: sort columns delta-encoded, repetitive columns
    dictionary-encoded, other value columns as :func:`value_layout` chooses (when ``ADAPTIVE_ENCODINGS``).

    Every layout is valid for any rows of the schema: files whose rows come from one distribution (the
    buckets of a partition in one write) share the layout chosen for the biggest of them, which spares
    sampling each file (a few milliseconds a file, holding the GIL). ``serves``: the rows of all the
    files the layout is for (``table``'s own by default), which decide whether choosing is worth it.
    """
    encodings = {c: e for c in sorting_columns if (e := _delta_encoding(table.schema.field(c).type))}
    dictionary = _dictionary_columns(table, encodings)
    uncompressed: list[str] = []
    if ADAPTIVE_ENCODINGS:
        delta, uncompressed = value_layout(
            table, [*encodings, *dictionary], compression, compression_level, serves
        )
        encodings.update(delta)
    return Layout(tuple(dictionary), tuple(encodings.items()), tuple(uncompressed))


def _add_mere_metadata(writer: pq.ParquetWriter, schema: pa.Schema) -> None:
    """Keep the schema's ``mere.*`` entries in the file's footer (the Arrow schema itself is not stored)."""
    ours = {k: v for k, v in (schema.metadata or {}).items() if k.startswith(b"mere.")}
    if ours:
        writer.add_key_value_metadata(ours)


ADAPTIVE_ENCODINGS = True  # False: value columns plain under the table's codec (benchmarks, compatibility)
SAMPLE_BLOCKS = 32  # blocks of consecutive rows sampled across a file to choose value encodings
SAMPLE_BLOCK_ROWS = 128  # a DELTA_BINARY_PACKED block: deltas are taken between neighbouring rows
INCOMPRESSIBLE = 0.9  # a codec keeping more than this share of a column's sampled bytes is not used on it
# Layouts for fewer rows (one small file, or a few sharing one layout) keep plain values under the codec:
# choosing costs ~0.1 ms a column, which a small commit to a wide table would feel, and compaction rewrites
# such files anyway.
LAYOUT_MIN_ROWS = 16_384


def value_layout(
    table: pa.Table,
    skip: Iterable[str],
    compression: str,
    compression_level: int | None = None,
    serves: int | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Encodings of value columns other than ``skip`` (``DELTA_BINARY_PACKED`` for integer-like columns
    whose bit-packed deltas are no bigger than their plain values under ``compression``) and the columns
    to write uncompressed (those delta-encoded, and those the codec does not shrink by a tenth).

    Estimated on ``SAMPLE_BLOCKS`` blocks of ``SAMPLE_BLOCK_ROWS`` consecutive rows spread across the
    table, in NumPy and one compression of each column's sampled bytes; nothing where the layout serves
    fewer than ``LAYOUT_MIN_ROWS`` rows (``serves``: the rows of every file it is for; ``table``'s own by
    default), or where ``table`` holds too few rows to judge by (under one block).
    """
    n = table.num_rows
    if (n if serves is None else max(n, serves)) < LAYOUT_MIN_ROWS or n < SAMPLE_BLOCK_ROWS:
        return {}, []
    # pyarrow names columns by dotted paths: a column "a.b" beside a struct "a" with a field "b" would
    # give both the same settings
    paths = Counter(path for path, _ in _leaf_paths(table.schema))
    skipped = set(skip) | {p for p, count in paths.items() if count > 1}
    if n > SAMPLE_BLOCKS * SAMPLE_BLOCK_ROWS:
        starts = np.linspace(0, n - SAMPLE_BLOCK_ROWS, SAMPLE_BLOCKS).astype(np.int64)
        sample: pa.Array | None = pa.array((starts[:, None] + np.arange(SAMPLE_BLOCK_ROWS)).ravel())
    else:
        sample = None
    name = _CODECS.get(compression.lower(), compression.lower())
    codec = None if name in ("none", "uncompressed") else pa.Codec(name, compression_level)
    encodings: dict[str, str] = {}
    uncompressed: list[str] = []
    for column in table.column_names:
        t = table.schema.field(column).type
        if column in skipped:
            continue
        integer_like = _delta_encoding(t) == "DELTA_BINARY_PACKED"
        if not (integer_like or pa.types.is_floating(t) or is_binary_like(t)):
            continue
        values = table.column(column)
        values = pc.drop_null((values if sample is None else values.take(sample)).combine_chunks())
        if len(values) == 0:
            continue
        if integer_like:
            plain = _physical_integers(values)
            raw = plain.tobytes()
            stored = len(raw) if codec is None else codec.compress(raw).size
            if _delta_bytes(plain) <= stored:
                encodings[column] = "DELTA_BINARY_PACKED"
                uncompressed.append(column)
                continue
        elif codec is None:
            continue
        else:
            raw = _value_bytes(values)
            stored = codec.compress(raw).size if len(raw) else 0
        if codec is not None and stored > INCOMPRESSIBLE * len(raw):
            uncompressed.append(column)
    return encodings, uncompressed


_CODECS = {"lz4": "lz4_raw"}  # Parquet's LZ4 (as pyarrow writes it) is the raw block format


def _physical_integers(values: pa.Array) -> np.ndarray:
    """Integer-like values as Parquet stores them: 32-bit for 8- to 32-bit integers and dates, else 64."""
    t = values.type
    if pa.types.is_date32(t):
        values = values.view(pa.int32())
    elif pa.types.is_timestamp(t):
        values = values.view(pa.int64())
    elif t.bit_width == 64:
        values = values.view(pa.int64())  # (unsigned 64-bit values wrap, as Parquet's INT64 holds them)
    else:
        return np.asarray(values.cast(pa.int64()).to_numpy()).astype(np.int32)
    return np.asarray(values.to_numpy())


def _delta_bytes(values: np.ndarray) -> int:
    """Bytes of ``values`` in ``DELTA_BINARY_PACKED`` (blocks of 128: deltas less the block's least,
    bit-packed per miniblock of 32 at the widest one's width), estimated block by block."""
    per_block = SAMPLE_BLOCK_ROWS
    blocks = values[: len(values) // per_block * per_block].reshape(-1, per_block)
    if not len(blocks):
        blocks = values.reshape(1, -1)
    deltas = np.diff(blocks, axis=1)  # wraps at the physical width, as the encoder's arithmetic does
    if not deltas.shape[1]:
        return 16
    unsigned = np.uint32 if values.dtype == np.int32 else np.uint64
    rel = (deltas - deltas.min(axis=1, keepdims=True)).view(unsigned).astype(np.uint64)
    width = -(-rel.shape[1] // 32) * 32
    rel = np.pad(rel, ((0, 0), (0, width - rel.shape[1])))
    bits = _bit_lengths(rel.reshape(len(rel), -1, 32).max(axis=2))
    estimate = int(bits.sum()) * 4 + len(blocks) * 6  # 32 values a miniblock; a block's header
    return estimate * len(values) // blocks.size


def _bit_lengths(x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        high = x >= np.uint64(1 << shift)
        out += high * shift
        x = np.where(high, x >> np.uint64(shift), x)
    return out + (x > 0)


def _value_bytes(values: pa.Array) -> bytes:
    """The bytes of values a codec sees in plain pages: fixed-width values, or strings' characters."""
    if is_binary_like(values.type):
        width = np.int64 if _is_large(values.type) else np.int32
        offsets = np.frombuffer(values.buffers()[1], dtype=width)[
            values.offset : values.offset + len(values) + 1
        ]
        data = values.buffers()[2]
        return b"" if data is None else data.to_pybytes()[int(offsets[0]) : int(offsets[-1])]
    return np.asarray(values.to_numpy()).tobytes()


def _is_large(t: pa.DataType) -> bool:
    return bool(pa.types.is_large_string(t) or pa.types.is_large_binary(t))


def _codecs(
    schema: pa.Schema, uncompressed: Sequence[str], compression: str, compression_level: int | None
) -> tuple[dict[str, str], dict[str, int] | None]:
    """Per-leaf codecs (and levels) for pyarrow: the table's codec but on ``uncompressed`` columns."""
    leaves = _leaf_paths(schema)
    off = set(uncompressed)  # (never a path two leaves share: see value_layout)
    codecs = {path: ("none" if top in off else compression) for path, top in leaves}
    levels = None
    if compression_level is not None:
        levels = {path: compression_level for path, top in leaves if top not in off}
    return codecs, levels


@functools.lru_cache(maxsize=256)
def _leaf_paths(schema: pa.Schema) -> tuple[tuple[str, str], ...]:
    """Each Parquet leaf's dotted path (as pyarrow's per-column options name it) and its top-level column,
    from the footer pyarrow writes for the schema (no rows, no data page)."""
    sink = io.BytesIO()
    pq.write_metadata(schema, sink)
    md = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    tops = schema.names
    out = []
    for i in range(md.num_columns):
        path = md.schema.column(i).path
        top = path if path in tops else next((t for t in tops if path.startswith(t + ".")), path)
        out.append((path, top))
    return tuple(out)


def _delta_encoding(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return "DELTA_BINARY_PACKED"
    if is_binary_like(t):
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
        if distinct_count(values) <= max(16, len(values) * DICTIONARY_MAX_DISTINCT):
            out.append(name)
    return out
