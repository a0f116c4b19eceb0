"""Whole-database change data capture: one stream of change events for many tables, applied to a catalog
one micro-batch at a time, every table's change in one catalog transaction.

The engine-neutral core of :func:`mere.integrations.spark.sync_database`; it runs without Spark
(:func:`sync_batch` takes a batch of events as an Arrow table), and Spark calls it once per micro-batch.

**Events.** A batch is an Arrow table of the shape :data:`EVENT_SCHEMA`, one row per change:

- ``table``: the source table (``schema.table`` or ``table``; the target is ``<namespace>.<table>``);
- ``op``: Debezium's ``c``/``u``/``d``/``r`` or wal2json's ``I``/``U``/``D`` (``B``/``C``/``M``
  transaction and message records are skipped, and so are Debezium's tombstones, op ``tombstone``: the
  null value Kafka log compaction needs after a delete, which carries no change of its own);
- ``seq``: the change's position in the source's log (its LSN as an integer): the tables' ``sequence_by``;
- ``before`` / ``after``: the old and new row images, each a map from column name to the value's JSON
  text (strings unquoted), as Spark's ``from_json`` gives them for ``map<string,string>``;
- ``types``: the columns' source types (PostgreSQL names such as ``numeric(12,3)``, as wal2json writes
  them, or Kafka Connect types and logical names, as Debezium's JSON converter writes them);
- ``key``: the primary-key columns (wal2json's ``pk``, or the Kafka message key's fields for Debezium);
- ``raw``: the event as it arrived (named in errors, kept by quarantine);
- ``txn``: the source transaction (wal2json's ``xid``, Debezium's ``transaction.id``), or null; the
  transaction boundaries are events of op ``B`` (begin) and ``C`` (end) with only ``txn`` set.

:func:`events_from_json` builds that table from JSON lines in Python (a reference, used by tests and
small batches); the Spark path parses in the JVM with ``from_json``.

**What a batch does.** Events are routed to their tables, and for each table:
a missing table is created (the events' columns and types, their key, plus the sequence column
``_cdc_lsn``; options give buckets, partitioning and properties, overall or per table); a new column is
added and a widened type is widened (:func:`mere.table.evolve.can_widen`); anything else is refused with
the table named. The rows are upserted as change rows (column ``_cdc_op``, not stored) into a table with
``sequence_by`` on the sequence column, so the version with the highest log position wins whatever the
order, duplication or replay of events. Every table's change commits in one catalog transaction whose
idempotency key names the batch: a batch applied again (a restarted stream) changes nothing.

**Bad input** (an event without table, op or sequence, an unknown op, an insert or update without its
new image, a delete without its old one, a table without primary key, a value its type cannot hold, a
column type that cannot be evolved): :class:`CdcEventError` naming the table and the event, and nothing
commits, unless ``on_error="quarantine"``: then the bad events (for table-level errors, every event of
that table in the batch) are appended to the quarantine table, in the same transaction, with the reason.

**Tables without primary key** are refused by default (``no_key="refuse"``): their updates and deletes
cannot be applied. ``no_key="append"`` keeps them as change logs instead: a keyless table of every event
(the row image, ``_cdc_op`` stored, and ``_cdc_lsn``).

**Unchanged TOASTed values**: an update's column its image lacks (wal2json leaves it out, Debezium
writes ``unavailable_value``) keeps the row's earlier value: the same key's latest earlier event of the
batch, else the stored row; for a key-changing update, the old key's; never across a delete (see
docs/cdc.md).

**Source transactions**: where the stream carries boundaries (``B``/``C`` events), the events of a
transaction whose end has not arrived wait in the pending table, written in the batch's catalog
transaction, and apply with the batch that brings the end; an end that comes before its begin waits for
it (the newest ``LONE_ENDS_KEPT`` such ends). Without boundaries each batch applies what it holds: feed the
stream in units of whole transactions.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.errors import InvalidInput, NoSuchNamespace, NoSuchTable
from mere.metadata import CommitResult
from mere.spec import validate_properties
from mere.table.catalog import Catalog
from mere.table.evolve import can_widen, check_new_columns

FORMATS = ("debezium", "wal2json")
ON_ERROR = ("stop", "quarantine")
NO_KEY = ("refuse", "append")
OP_COLUMN = "_cdc_op"
SEQUENCE_COLUMN = "_cdc_lsn"
QUARANTINE_TABLE = "cdc_quarantine"
PENDING_TABLE = "cdc_pending"
LONE_ENDS_KEPT = 10_000  # ends of source transactions whose begin has not arrived, kept to wait for it
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

_TEXT_MAP = pa.map_(pa.string(), pa.string())
EVENT_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("op", pa.string()),
        ("seq", pa.int64()),
        ("before", _TEXT_MAP),
        ("after", _TEXT_MAP),
        ("types", _TEXT_MAP),
        ("key", pa.list_(pa.string())),
        ("raw", pa.string()),
        ("txn", pa.string()),
    ]
)
"""The events a batch holds (see the module's docstring)."""

QUARANTINE_SCHEMA = pa.schema(
    [
        ("batch", pa.string()),
        ("table", pa.string()),
        ("op", pa.string()),
        ("seq", pa.int64()),
        ("reason", pa.string()),
        ("event", pa.string()),
    ]
)
"""The quarantine table's columns: the batch's idempotency key, the event's table, op and sequence, why
it was refused, and the event as it arrived."""

_UPSERT_OPS = {"c": "c", "r": "c", "i": "c", "u": "u"}
_DELETE_OPS = {"d": "d"}


class CdcEventError(InvalidInput):
    """A change event the sync cannot apply; nothing of its batch was committed.

    Attributes:
        table: The source table the event names (None when the envelope names none).
        event: The event as it arrived (its JSON text), or None.
        reason: Why it was refused.
    """

    def __init__(self, reason: str, table: str | None = None, event: str | None = None) -> None:
        self.table = table
        self.event = event
        self.reason = reason
        shown = event if event is None or len(event) <= 1000 else event[:1000] + "..."
        where = f"table {table}" if table else "an event without table"
        super().__init__(f"{where}: {reason}; event: {shown}; nothing of this batch was committed")


@dataclass(frozen=True)
class SyncOptions:
    """How :func:`sync_batch` maps a source database onto a catalog.

    Attributes:
        namespace: The namespace the tables are created in (``<namespace>.<source table>``).
        buckets: Buckets of each new table (None: mere's default).
        partition_by: Partition columns of new tables, by source table name. Every per-table mapping here
            is keyed by the qualified name (``public.orders``) or the bare one (``orders``, the name the
            target takes); the qualified entry wins.
        primary_keys: Key columns by source table name (for events that carry none, or to override).
        properties: Table properties of new tables.
        overrides: Per source table, options of its creation (``buckets``, ``partition_by``,
            ``primary_key``, ``properties``, ``name``: the target table's name in the namespace).
        on_error: ``"stop"`` (raise, commit nothing) or ``"quarantine"`` (commit the good events and
            append the bad ones to ``quarantine_table``).
        quarantine_table: The quarantine table's name in the namespace.
        no_key: ``"refuse"`` events of tables without primary key, or ``"append"`` them to change-log
            tables.
        sequence_column: The stored column holding each row's log position (``sequence_by``).
        unavailable_value: Debezium's placeholder for a value it did not get (``unavailable.value.placeholder``;
            an unchanged TOASTed column): such a cell, like a column an update's image leaves out, keeps
            the row's earlier value. None: no placeholder.
        pending_table: The table (in the namespace) holding the events of source transactions whose end
            has not arrived yet.
    """

    namespace: str
    buckets: int | None = None
    partition_by: Mapping[str, Sequence[str]] = field(default_factory=dict)
    primary_keys: Mapping[str, Sequence[str]] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    on_error: str = "stop"
    quarantine_table: str = QUARANTINE_TABLE
    no_key: str = "refuse"
    sequence_column: str = SEQUENCE_COLUMN
    unavailable_value: str | None = UNAVAILABLE_VALUE
    pending_table: str = PENDING_TABLE

    def __post_init__(self) -> None:
        for what, value in (
            ("namespace", self.namespace),
            ("pending_table", self.pending_table),
            ("quarantine_table", self.quarantine_table),
        ):
            if not isinstance(value, str) or not re.fullmatch(_NAME, value):
                raise InvalidInput(f"sync: {what} must be letters, digits, '_' and '-', got {value!r}")
        if self.pending_table == self.quarantine_table:
            raise InvalidInput(
                f"sync: pending_table and quarantine_table must be two tables, both are {self.pending_table!r}"
            )
        if not isinstance(self.sequence_column, str) or not self.sequence_column:
            raise InvalidInput(f"sync: sequence_column must be a column name, got {self.sequence_column!r}")
        if self.on_error not in ON_ERROR:
            raise InvalidInput(f"sync: on_error must be one of {ON_ERROR}, got {self.on_error!r}")
        if self.no_key not in NO_KEY:
            raise InvalidInput(f"sync: no_key must be one of {NO_KEY}, got {self.no_key!r}")
        _properties("properties", self.properties)
        for what in ("partition_by", "primary_keys"):
            for table, columns in _per_table_mapping(what, getattr(self, what)).items():
                _column_names(f"{what}[{table!r}]", columns)
        known = {"buckets", "partition_by", "primary_key", "properties", "name"}
        for table, given in _per_table_mapping("overrides", self.overrides).items():
            if not isinstance(given, Mapping):
                raise InvalidInput(f"sync: overrides[{table!r}] must be a mapping of options, got {given!r}")
            unknown = set(given) - known
            if unknown:
                raise InvalidInput(
                    f"sync: overrides of {table}: unknown option(s) {sorted(unknown)}; use {sorted(known)}"
                )
            name = given.get("name")
            if name is not None and (not isinstance(name, str) or not re.fullmatch(_NAME, name)):
                raise InvalidInput(
                    f"sync: overrides[{table!r}]['name'] must be letters, digits, '_' and '-', got {name!r}"
                )
            for option in ("partition_by", "primary_key"):
                if given.get(option) is not None:
                    _column_names(f"overrides[{table!r}][{option!r}]", given[option])
            if given.get("properties") is not None:
                _properties(f"overrides[{table!r}]['properties']", given["properties"])

    def override(self, table: str, name: str, default: Any) -> Any:
        """A per-table creation option, else ``default``."""
        return (_per_table(self.overrides, table) or {}).get(name, default)

    def target(self, table: str) -> str:
        """The catalog name of a source table: ``<namespace>.<table>`` (its schema dropped)."""
        name = self.override(table, "name", table.rpartition(".")[2])
        if not re.fullmatch(_NAME, name or ""):
            raise CdcEventError(
                f"source table name {name!r} is not a valid mere table name (give overrides[...]['name'])",
                table,
            )
        if name in (self.pending_table, self.quarantine_table):
            which = "pending" if name == self.pending_table else "quarantine"
            raise CdcEventError(
                f"source table {table} would be synced into the sync's own {which} table "
                f"{self.namespace}.{name}: give overrides[{table!r}]['name'] (or another {which}_table)",
                table,
            )
        return f"{self.namespace}.{name}"


_NAME = r"[A-Za-z0-9_-]+"  # a namespace or a table name in it


def _per_table_mapping(what: str, value: Any) -> Mapping[str, Any]:
    """``value`` checked as a mapping keyed by source table names."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise InvalidInput(f"sync: {what} must be a mapping keyed by source table names, got {value!r}")
    return value


def _column_names(what: str, value: Any) -> None:
    """Refuse anything but a column name or a list of them."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise InvalidInput(f"sync: {what} must be a column name or a list of them, got {value!r}")


def _properties(what: str, value: Any) -> None:
    """Refuse anything but valid table properties: a bad option is the caller's, never an event's to
    quarantine."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInput(f"sync: {what} must map property names to values, got {value!r}")
    try:
        validate_properties(value)
    except InvalidInput as e:
        raise InvalidInput(f"sync: {what}: {e}") from None


def _per_table(mapping: Mapping[str, Any], table: str) -> Any:
    """A per-source-table option: the entry of the qualified name (``public.orders``), else that of the
    bare name (``orders``, as the target is named), else None."""
    if table in mapping:
        return mapping[table]
    return mapping.get(table.rpartition(".")[2])


# -- source types --------------------------------------------------------------------------------------

_PG_TYPES: dict[str, pa.DataType] = {
    "smallint": pa.int16(),
    "int2": pa.int16(),
    "integer": pa.int32(),
    "int": pa.int32(),
    "int4": pa.int32(),
    "serial": pa.int32(),
    "bigint": pa.int64(),
    "int8": pa.int64(),
    "bigserial": pa.int64(),
    "real": pa.float32(),
    "float4": pa.float32(),
    "double precision": pa.float64(),
    "float8": pa.float64(),
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "text": pa.string(),
    "character varying": pa.string(),
    "varchar": pa.string(),
    "character": pa.string(),
    "char": pa.string(),
    "bpchar": pa.string(),
    "uuid": pa.string(),
    "json": pa.string(),
    "jsonb": pa.string(),
    "citext": pa.string(),
    "date": pa.date32(),
    "timestamp with time zone": pa.timestamp("us", "UTC"),
    "timestamptz": pa.timestamp("us", "UTC"),
    "timestamp without time zone": pa.timestamp("us"),
    "timestamp": pa.timestamp("us"),
    "bytea": pa.binary(),
    # Kafka Connect (Debezium's JSON converter) types; "int8" is PostgreSQL's bigint (Debezium writes
    # PostgreSQL's smallest integer as int16, so Connect's int8 never comes from it)
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "io.debezium.time.date": pa.date32(),
    "io.debezium.time.microtimestamp": pa.timestamp("us"),
    "io.debezium.time.timestamp": pa.timestamp("us"),
    "io.debezium.time.zonedtimestamp": pa.timestamp("us", "UTC"),
    "io.debezium.data.uuid": pa.string(),
    "io.debezium.data.json": pa.string(),
}
# How a type's values are written, where it is not the type's own text form.
_ENCODINGS = {
    "io.debezium.time.date": "days",
    "io.debezium.time.microtimestamp": "micros",
    "io.debezium.time.timestamp": "millis",
    "bytes": "base64",
    "bytea": "hex",
}


def source_type(name: str) -> tuple[pa.DataType, str]:
    """The Arrow type of a source column type, and how its values are written (``text``, ``hex``,
    ``base64``, ``days``, ``micros``, ``millis``).

    Args:
        name: A PostgreSQL type as wal2json writes it (``numeric(12,3)``, ``character varying(20)``,
            ``timestamp with time zone``) or a Kafka Connect type or logical name as Debezium's JSON
            converter writes it (``int32``, ``io.debezium.time.Date``).

    Returns:
        (Arrow type, encoding).

    Raises:
        InvalidInput: A type mere cannot hold exactly (``numeric`` without precision, Connect's
            binary ``Decimal``: use Debezium's ``decimal.handling.mode=string``, arrays, ...).
    """
    text = name.strip().lower()
    match = re.fullmatch(r"(numeric|decimal)\s*\(\s*(\d+)\s*(?:,\s*(-?\d+)\s*)?\)", text)
    if match:
        precision, scale = int(match.group(2)), int(match.group(3) or 0)
        # PostgreSQL 15 takes a scale above the precision (numeric(3,5): below 0.01) and below zero
        # (numeric(5,-2): hundreds); Parquet's decimals take neither, so the type that holds every value
        # exactly stands in: numeric(s,s), numeric(p-s,0).
        if scale > precision:
            precision = scale
        elif scale < 0:
            precision, scale = precision - scale, 0
        if not 1 <= precision <= 38:
            raise InvalidInput(f"type {name!r}: no exact Arrow type (a precision above 38)")
        return pa.decimal128(precision, scale), "text"
    match = re.fullmatch(r"org\.apache\.kafka\.connect\.data\.decimal\((\d*),(\d+)\)", text)
    if match:  # Connect's binary decimal: the unscaled value's bytes; precision and scale from the schema
        precision, scale = int(match.group(1) or 38), int(match.group(2))
        if precision > 38 or scale > precision:
            raise InvalidInput(f"type {name!r}: no exact Arrow type (precision above 38, or scale above it)")
        return pa.decimal128(precision, scale), "unscaled"
    # A type modifier may sit inside the name: ``timestamp(3) with time zone``, ``character varying(20)``.
    base = " ".join(re.sub(r"\([^()]*\)", " ", text).split())
    if base in _PG_TYPES:
        return _PG_TYPES[base], _ENCODINGS.get(base, "text")
    if base == "org.apache.kafka.connect.data.decimal":
        raise InvalidInput(
            f"type {name!r}: a binary decimal without its scale (the envelope's schema must carry "
            "parameters.scale), or use decimal.handling.mode=string"
        )
    if base in ("numeric", "decimal"):
        raise InvalidInput(
            f"type {name!r}: numeric without precision has no exact Arrow type; declare numeric(p,s)"
        )
    raise InvalidInput(f"unsupported source column type {name!r}")


def decode_values(text: pa.Array, name: str) -> pa.Array:
    """Values as the events write them (JSON text, strings unquoted) -> an array of the type's Arrow type.

    Args:
        text: The values' text (null: SQL NULL).
        name: The source type (see :func:`source_type`).

    Returns:
        The typed values.

    Raises:
        InvalidInput: A value the type cannot hold, or an unsupported type.
    """
    kind, encoding = source_type(name)
    try:
        if encoding == "text" and pa.types.is_timestamp(kind) and kind.tz is not None:
            return _zoned_text(text, kind)
        if encoding == "text":
            return pc.cast(text, kind)
        if encoding == "days":
            return pc.cast(pc.cast(text, pa.int32()), kind)
        if encoding == "micros":
            return pc.cast(pc.cast(text, pa.int64()), kind)
        if encoding == "millis":
            return pc.cast(pc.multiply_checked(pc.cast(text, pa.int64()), 1000), kind)
        if encoding == "hex":
            return _hex(text)
        if encoding == "unscaled":
            return _unscaled(text, kind)
        return _base64_binary(text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise InvalidInput(f"a value is not a {name}: {e}") from None


_SECONDS_OFFSET = r"(?P<sign>[+-])(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)$"


def _zoned_text(text: pa.Array, kind: pa.DataType) -> pa.Array:
    """Timestamps with a zone offset as text; PostgreSQL writes an offset with seconds for local mean times
    (``1900-01-01 00:00:00+00:19:32`` in Europe/Amsterdam), which Arrow's parser does not take."""
    odd = pc.fill_null(pc.match_substring_regex(text, _SECONDS_OFFSET), False)
    if not pc.any(odd).as_py():
        return pc.cast(text, kind)
    parts = pc.extract_regex(pc.if_else(odd, text, "+00:00:00"), _SECONDS_OFFSET)
    sign = pc.if_else(pc.equal(parts.field("sign"), "-"), -1, 1)
    seconds = pc.add(
        pc.add(
            pc.multiply(pc.cast(parts.field("h"), pa.int64()), 3600),
            pc.multiply(pc.cast(parts.field("m"), pa.int64()), 60),
        ),
        pc.cast(parts.field("s"), pa.int64()),
    )
    offset = pc.cast(pc.multiply(pc.multiply(sign, seconds), 1_000_000), pa.duration("us"))
    local = pc.cast(
        pc.replace_substring_regex(pc.if_else(odd, text, None), _SECONDS_OFFSET, ""), pa.timestamp("us")
    )
    shifted = pc.cast(pc.cast(pc.subtract_checked(local, offset), pa.int64()), pa.timestamp("us", "UTC"))
    plain = pc.cast(pc.if_else(odd, None, text), kind)
    return pc.if_else(odd, shifted.cast(kind), plain)


def _unscaled(text: pa.Array, kind: pa.DataType) -> pa.Array:
    """Connect's binary decimals (base64 of the unscaled value, big-endian two's complement) -> ``kind``;
    the bytes are placed into Arrow's little-endian 128-bit layout vectorised."""
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    flat, lengths = base64_decoded(text)
    if (lengths > 16).any():
        raise ValueError("a decimal's unscaled value is wider than 128 bits")
    count = len(lengths)
    out = np.zeros((count, 16), dtype=np.uint8)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    negative = np.zeros(count, dtype=bool)
    has = lengths > 0
    negative[has] = flat[starts[has]] >= 0x80
    out[negative] = 0xFF  # sign extension
    row = np.repeat(np.arange(count), lengths)
    position = np.arange(len(flat)) - np.repeat(starts, lengths)  # index in its big-endian value
    out[row, np.repeat(lengths, lengths) - 1 - position] = flat
    wide = pa.Array.from_buffers(
        pa.decimal128(38, kind.scale),
        count,
        [pa.compute.is_valid(text).buffers()[1] if text.null_count else None, pa.py_buffer(out.tobytes())],
        text.null_count,
    )
    return pc.cast(wide, kind)


_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE64_SEXTETS = np.full(256, 255, dtype=np.uint8)
_BASE64_SEXTETS[np.frombuffer(_BASE64_ALPHABET, dtype=np.uint8)] = np.arange(64, dtype=np.uint8)
_BASE64_SEXTETS[ord("=")] = 0  # padding: its bits are dropped below


def base64_decoded(text: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Standard, padded base64 values decoded together in NumPy (Arrow has no base64 kernel): the
    decoded bytes of every value, concatenated, and each value's length (a NULL decodes to no bytes).

    Raises:
        ValueError: A value that is not padded base64 (a length not a multiple of 4, a character outside
            the alphabet, padding anywhere but the last two characters).
    """
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    text = pc.fill_null(pc.cast(text, pa.large_string()), "")
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int64)[text.offset : text.offset + len(text) + 1]
    data = np.frombuffer(text.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    sizes = np.diff(offsets)
    if (sizes % 4).any():
        raise ValueError("a base64 value's length is not a multiple of 4")
    sextets = _BASE64_SEXTETS[data]
    if (sextets == 255).any():
        raise ValueError("a base64 value holds a character outside its alphabet")
    ends = np.cumsum(sizes)
    present = sizes > 0
    last, second = np.zeros(len(sizes), dtype=bool), np.zeros(len(sizes), dtype=bool)
    last[present] = data[ends[present] - 1] == ord("=")
    second[present] = data[ends[present] - 2] == ord("=")
    padding = last.astype(np.int64) + second
    if (second & ~last).any() or int(np.count_nonzero(data == ord("="))) != int(padding.sum()):
        raise ValueError("a base64 value is padded in the wrong place")
    quads = sextets.reshape(-1, 4).astype(np.uint8)
    out = np.empty((len(quads), 3), dtype=np.uint8)
    out[:, 0] = (quads[:, 0] << 2) | (quads[:, 1] >> 4)
    out[:, 1] = ((quads[:, 1] & 0x0F) << 4) | (quads[:, 2] >> 2)
    out[:, 2] = ((quads[:, 2] & 0x03) << 6) | quads[:, 3]
    keep = np.ones(out.size, dtype=bool)
    decoded_ends = np.cumsum(sizes // 4 * 3)
    keep[decoded_ends[padding >= 1] - 1] = False
    keep[decoded_ends[padding == 2] - 2] = False
    return out.reshape(-1)[keep], sizes // 4 * 3 - padding


def _base64_binary(text: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Base64 values -> binary (NULL stays NULL)."""
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    flat, lengths = base64_decoded(text)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    valid = None if not text.null_count else pc.is_valid(text).buffers()[1]
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        len(text),
        [valid, pa.py_buffer(offsets.tobytes()), pa.py_buffer(flat.tobytes())],
        text.null_count,
    ).cast(pa.binary())


def _hex(text: pa.Array) -> pa.Array:
    """PostgreSQL's bytea output (``\\x0a1b``) -> binary, vectorised over the values' bytes."""
    text = pc.cast(text, pa.string())
    ok = pc.fill_null(pc.starts_with(text, "\\x"), True)
    if not pc.all(ok).as_py():
        raise ValueError("bytea value not in hex form (\\x...)")
    body = pc.utf8_slice_codeunits(text, 2)
    body = body.combine_chunks() if isinstance(body, pa.ChunkedArray) else body
    validity, offsets_buf, data_buf = body.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[body.offset : body.offset + len(body) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    if (lengths % 2).any():
        raise ValueError("bytea hex value of odd length")
    table = np.full(256, 255, dtype=np.uint8)
    for i, c in enumerate(b"0123456789abcdef"):
        table[c] = i
    for i, c in enumerate(b"ABCDEF"):
        table[c] = 10 + i
    nibbles = table[data]
    if (nibbles == 255).any():
        raise ValueError("bytea value with a non-hex digit")
    out = (nibbles[0::2] << 4) | nibbles[1::2]
    new_offsets = ((offsets - offsets[0]) // 2).astype(np.int32)
    if body.offset and body.null_count:
        validity = pc.is_valid(body).buffers()[1]
    return pa.Array.from_buffers(
        pa.binary(),
        len(body),
        [validity, pa.py_buffer(new_offsets), pa.py_buffer(out.tobytes())],
        body.null_count,
    )


# -- events ------------------------------------------------------------------------------------------


def _json_text(value: Any) -> str | None:
    """A parsed JSON value as Spark's from_json gives it for a string field: strings as they are, other
    values as their JSON text, null as None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


_MAX_POSITION = 2**63 - 1  # log positions are stored as 64-bit integers


def _lsn(value: Any) -> int | None:
    """A log position: an integer or PostgreSQL's ``high/low`` hex text, in 0..2**63-1 (None otherwise)."""
    if isinstance(value, bool):
        return None
    position = None
    if isinstance(value, int):
        position = int(value)
    elif isinstance(value, str) and re.fullmatch(r"[0-9A-Fa-f]+/[0-9A-Fa-f]+", value):
        high, low = value.split("/")
        position = (int(high, 16) << 32) | int(low, 16)
    return position if position is not None and 0 <= position <= _MAX_POSITION else None


SOURCE_PROPERTY = "cdc.source-table"
"""The table property naming the source table a synced table holds (``schema.table``): the events of
another source table that maps onto the same name are refused, not merged into it."""

TOMBSTONE = "tombstone"
"""The op of a Debezium tombstone (a Kafka message whose value is null): skipped."""


class _NegativeZero(int):
    """JSON's ``-0``, kept as its text (a float column's negative zero: Python's ints have no sign for 0)."""

    def __str__(self) -> str:
        return "-0"


def _json_int(text: str) -> int:
    return _NegativeZero(0) if text == "-0" else int(text)


def _text_map(obj: Any) -> list[tuple[str, str | None]] | None:
    if not isinstance(obj, dict):
        return None
    return [(str(k), _json_text(v)) for k, v in obj.items()]


def _connect_types(envelope: dict[str, Any]) -> list[tuple[str, str]] | None:
    schema = envelope.get("schema")
    if not isinstance(schema, dict):
        return None
    for part in schema.get("fields") or ():
        if isinstance(part, dict) and part.get("field") in ("after", "before") and part.get("fields"):
            return [(str(f.get("field")), _connect_type(f)) for f in part["fields"] if isinstance(f, dict)]
    return None


_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _connect_type(f: dict[str, Any]) -> str:
    """A Connect field's type name; a binary decimal with its precision and scale from ``parameters``."""
    name = str(f.get("name") or f.get("type"))
    parameters = f.get("parameters")
    if name == _CONNECT_DECIMAL and isinstance(parameters, dict) and parameters.get("scale") is not None:
        return f"{name}({parameters.get('connect.decimal.precision') or ''},{parameters['scale']})"
    return name


def _debezium_row(line: str, envelope: Any, message_key: Any) -> dict[str, Any]:
    if not isinstance(envelope, dict):
        return {"raw": line}
    types = _connect_types(envelope)
    payload = envelope.get("payload") if "payload" in envelope else envelope
    if not isinstance(payload, dict):
        return {"raw": line}
    found = payload.get("source")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    status = payload.get("status")
    if status in ("BEGIN", "END") and isinstance(payload.get("id"), str):
        # a transaction metadata event (provide.transaction.metadata): its boundary
        return {"op": "B" if status == "BEGIN" else "C", "txn": payload["id"], "raw": line}
    block = payload.get("transaction")
    txn = block.get("id") if isinstance(block, dict) and isinstance(block.get("id"), str) else None
    table = source.get("table")
    if isinstance(table, str) and isinstance(source.get("schema"), str):
        table = f"{source['schema']}.{table}"
    seq = _lsn(source.get("lsn"))
    if seq is None and source.get("lsn") is None:  # a bad lsn is refused, not replaced by the time
        seq = _lsn(payload.get("ts_ms"))
    key = None
    if isinstance(message_key, dict):
        inner = message_key.get("payload", message_key)
        if isinstance(inner, dict):
            key = [str(k) for k in inner]
    return {
        "table": table if isinstance(table, str) else None,
        "op": payload.get("op") if isinstance(payload.get("op"), str) else None,
        "seq": seq,
        "before": _text_map(payload.get("before")),
        "after": _text_map(payload.get("after")),
        "types": types,
        "key": key,
        "raw": line,
        "txn": txn,
    }


def _wal2json_row(line: str, change: Any) -> dict[str, Any]:
    if not isinstance(change, dict):
        return {"raw": line}

    def pairs(name: str, part: str) -> list[tuple[str, Any]] | None:
        items = change.get(name)
        if not isinstance(items, list):
            return None
        return [
            (str(c.get("name")), _json_text(c.get(part)) if part == "value" else c.get(part))
            for c in items
            if isinstance(c, dict)
        ]

    table = change.get("table")
    if isinstance(table, str) and isinstance(change.get("schema"), str):
        table = f"{change['schema']}.{table}"
    # The new image's types, then the old image's for columns the new one leaves out (an unchanged
    # TOASTed value of a REPLICA IDENTITY FULL table is in the old image only).
    types = pairs("columns", "type") or []
    shown = {name for name, _ in types}
    types += [(name, kind) for name, kind in pairs("identity", "type") or () if name not in shown]
    pk = change.get("pk")
    return {
        "table": table if isinstance(table, str) else None,
        "op": change.get("action") if isinstance(change.get("action"), str) else None,
        "seq": _lsn(change.get("lsn")),
        "before": pairs("identity", "value"),
        "after": pairs("columns", "value"),
        "types": types or None,
        "key": [str(p.get("name")) for p in pk if isinstance(p, dict)] if isinstance(pk, list) else None,
        "raw": line,
        "txn": str(xid)
        if isinstance((xid := change.get("xid")), int) and not isinstance(xid, bool)
        else None,
    }


def events_from_json(
    lines: Iterable[str | None], format: str = "debezium", keys: Iterable[str | None] | None = None
) -> pa.Table:
    """JSON change events -> the :data:`EVENT_SCHEMA` table :func:`sync_batch` takes (parsed in Python:
    the reference for the Spark path, which parses in the JVM).

    Args:
        lines: One JSON document per event: Debezium envelopes (with or without the JSON converter's
            ``schema``/``payload`` wrapping; None or ``null``, a tombstone, is skipped) or wal2json
            ``format-version`` 2 records.
        format: ``"debezium"`` or ``"wal2json"``.
        keys: For Debezium, each event's Kafka message key (JSON), whose fields are the primary key.

    Returns:
        The events; lines that are not JSON objects keep only ``raw`` (refused as malformed).

    Raises:
        InvalidInput: An unknown format.
    """
    if format not in FORMATS:
        raise InvalidInput(f"sync: format must be one of {FORMATS}, got {format!r}")
    rows = []
    key_list = list(keys) if keys is not None else None
    for i, line in enumerate(lines):
        if line is None:  # a Kafka tombstone (a null value): Debezium's, skipped; malformed in wal2json
            rows.append({"op": TOMBSTONE} if format == "debezium" else {"raw": None})
            continue
        try:
            parsed = json.loads(line, parse_float=Decimal, parse_int=_json_int)
        except (json.JSONDecodeError, TypeError):
            rows.append({"raw": line})
            continue
        if format == "debezium" and parsed is None:  # a tombstone written as JSON null
            rows.append({"op": TOMBSTONE, "raw": line})
            continue
        if format == "debezium":
            key = None
            if key_list is not None and key_list[i] is not None:
                try:
                    key = json.loads(key_list[i])  # type: ignore[arg-type]
                except json.JSONDecodeError:
                    key = None
            rows.append(_debezium_row(line, parsed, key))
        else:
            rows.append(_wal2json_row(line, parsed))
    return pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)


# -- planning ----------------------------------------------------------------------------------------


@dataclass
class TablePlan:
    """What a batch does to one table."""

    source: str
    name: str
    rows: pa.Table
    create: dict[str, Any] | None = None  # create_table's arguments (schema, primary_key, ...)
    add: list[tuple[str, pa.DataType]] = field(default_factory=list)
    widen: list[tuple[str, pa.DataType]] = field(default_factory=list)
    keyed: bool = True
    partial: PartialRows | None = None


@dataclass
class PartialRows:
    """Updates whose new image lacks columns (unchanged TOASTed values): which cells are missing, and the
    key each row's earlier value is looked up under (its own; for a key-changing update, the old one)."""

    missing: dict[str, np.ndarray]  # column -> rows missing it
    lookup: pa.Table  # key columns, one row per row of the table plan
    moved: np.ndarray | None = None  # rows that are key-changing updates
    gone: int | None = None  # the old-key deletes of those, the table plan's last rows (None: one per move)
    asked_at: np.ndarray | None = (
        None  # per moved row, the log position its old key is asked at (None: its own)
    )


@dataclass
class SyncPlan:
    """What a batch does: per table, and the events refused (with ``on_error="quarantine"``)."""

    tables: list[TablePlan]
    refused: pa.Table  # QUARANTINE_SCHEMA without "batch"
    events: int = 0
    skipped: int = 0
    # Events that wait in the pending table: key-only deletes of a table that does not exist yet and
    # whose partition columns no event has brought (a stream started on a populated source table).
    waiting: pa.Table = field(default_factory=EVENT_SCHEMA.empty_table)


@dataclass
class SyncResult:
    """What :func:`sync_batch` committed: each table's commit, events applied, skipped and refused."""

    commits: dict[str, CommitResult]
    applied: int
    skipped: int
    refused: int
    created: list[str]
    evolved: list[str]
    already_committed: bool = False
    unresolved: int = 0  # cells an update lacked that no earlier version held, left NULL in the table
    waiting: int = 0  # events held until their table can be made (see SyncPlan.waiting)


class _CannotCreateYet(CdcEventError):
    """A table's events cannot make the table yet, and need not: they wait in the pending table."""


TRUNCATE_REFUSAL = (
    "TRUNCATE is not applied: it empties the table at its log position, and a replayed or late TRUNCATE "
    "would delete rows logged after it; stop the stream, truncate the mere table (Table.truncate) once "
    "every event before it is applied, and resume after it"
)


def _normal_op(op: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(normal op c/u/d or null, skipped mask, unknown mask)."""
    low = pc.utf8_lower(pc.utf8_trim_whitespace(op))
    upsert = pc.is_in(low, pa.array(["c", "r", "i", "u", "create", "read", "insert", "update"]))
    delete = pc.is_in(low, pa.array(["d", "delete"]))
    # "c" is Debezium's create; wal2json writes COMMIT as "C" (upper case) and BEGIN as "B", messages "M".
    marker = pc.is_in(op, pa.array(["B", "C", "M", TOMBSTONE]))
    is_update = pc.is_in(low, pa.array(["u", "update"]))
    normal = pc.if_else(
        marker,
        pa.scalar(None, pa.string()),
        pc.if_else(
            delete, "d", pc.if_else(is_update, "u", pc.if_else(upsert, "c", pa.scalar(None, pa.string())))
        ),
    )
    skipped = pc.fill_null(marker, False)
    unknown = pc.and_(pc.invert(skipped), pc.is_null(normal))
    return normal, skipped, pc.fill_null(unknown, True)


def _map_parts(maps: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(parent row of each entry, keys, values) of a map array."""
    maps = maps.combine_chunks() if isinstance(maps, pa.ChunkedArray) else maps
    offsets = np.asarray(maps.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    parents = np.repeat(np.arange(len(maps), dtype=np.int64), np.diff(offsets))
    return parents, maps.keys.slice(lo, hi - lo), maps.items.slice(lo, hi - lo)


def _names_a_column_twice(maps: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Rows of a map column whose map holds a name twice (no JSON source writes one; which value is meant
    cannot be told)."""
    parents, keys, _ = _map_parts(maps)
    out = np.zeros(len(maps), dtype=bool)
    if len(keys):
        pairs = (
            pa.table({"row": parents, "name": keys}).group_by(["row", "name"]).aggregate([([], "count_all")])
        )
        out[pairs.filter(pc.greater(pairs.column("count_all"), 1)).column("row").to_numpy()] = True
    return out


def _columns_of(
    parents: np.ndarray,
    keys: pa.Array,
    values: pa.Array,
    n: int,
    present: dict[str, np.ndarray] | None = None,
) -> dict[str, pa.Array]:
    """Each column a map holds, as a text array of ``n`` rows (null where a row lacks it; the last entry
    wins where a row has it twice); ``present`` (when given) gets, per column, which rows hold it."""
    if not len(keys):
        return {}
    encoded = (
        pc.dictionary_encode(keys).combine_chunks()
        if isinstance(keys, pa.ChunkedArray)
        else pc.dictionary_encode(keys)
    )
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    out = {}
    for i, name in enumerate(encoded.dictionary.to_pylist()):
        mine = np.flatnonzero(codes == i)
        index = np.full(n, -1, dtype=np.int64)
        index[parents[mine]] = mine
        taken = pa.array(index, mask=index < 0)
        out[str(name)] = pc.take(values, taken)
        if present is not None:
            present[str(name)] = index >= 0
    return out


def _types_of(table: str, events: pa.Table, raw: pa.Array) -> dict[str, str]:
    _parents, keys, values = _map_parts(events.column("types"))
    found: dict[str, str] = {}
    if not len(keys):
        return found
    pairs = pa.table({"k": keys, "v": values}).group_by(["k", "v"]).aggregate([]).to_pylist()
    for pair in pairs:
        name, kind = pair["k"], pair["v"]
        if kind is None:
            continue
        if name in found and found[name] != kind:
            a, b = source_type(found[name])[0], source_type(kind)[0]
            if can_widen(a, b):
                found[name] = kind
            elif not can_widen(b, a):
                raise CdcEventError(
                    f"column {name!r} arrives as {found[name]} and as {kind} in one batch",
                    table,
                    raw[0].as_py(),
                )
            continue
        found[name] = kind
    return found


def _key_of(table: str, events: pa.Table, options: SyncOptions, existing: Any) -> list[str] | None:
    given = options.override(table, "primary_key", _per_table(options.primary_keys, table))
    if given is not None:
        return [given] if isinstance(given, str) else list(given)
    keys = events.column("key")
    joined = pc.binary_join(keys, ",")
    distinct = [k for k in pc.unique(joined).to_pylist() if k is not None]
    if len(distinct) > 1:
        row = pc.index(joined, distinct[1]).as_py()
        raise CdcEventError(
            f"events name different primary keys: {distinct}", table, events.column("raw")[row].as_py()
        )
    if distinct and distinct[0]:
        return [str(k) for k in distinct[0].split(",")]
    if existing is not None and existing.spec.primary_key:
        return list(existing.spec.primary_key)
    return None


class _Refusals:
    def __init__(self) -> None:
        self.parts: list[pa.Table] = []

    def add(self, events: pa.Table, reason: str) -> None:
        if events.num_rows:
            self.parts.append(
                pa.table(
                    {
                        "table": events.column("table"),
                        "op": events.column("op"),
                        "seq": events.column("seq"),
                        "reason": pa.array([reason] * events.num_rows, pa.string()),
                        "event": events.column("raw"),
                    }
                )
            )

    def table(self) -> pa.Table:
        schema = pa.schema([f for f in QUARANTINE_SCHEMA if f.name != "batch"])
        if not self.parts:
            return schema.empty_table()
        return pa.concat_tables([p.cast(schema) for p in self.parts])


def _open(cat: Catalog, name: str) -> Any:
    try:
        return cat.table(name)
    except (NoSuchTable, NoSuchNamespace):
        return None


def _shaped(events: pa.Table) -> pa.Table:
    """The events as :data:`EVENT_SCHEMA` (``txn`` may be left out: no transaction boundaries)."""
    if "txn" not in events.column_names:
        events = events.append_column("txn", pa.nulls(events.num_rows, pa.string()))
    missing = [n for n in EVENT_SCHEMA.names if n not in events.column_names]
    if missing:
        raise InvalidInput(f"sync: the events lack column(s) {missing}; see EVENT_SCHEMA")
    return events.select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA).combine_chunks()


def hold_open_transactions(events: pa.Table, pending: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Split a batch (with the events held from earlier batches) into what applies now and what waits.

    A source transaction is open when its begin (op ``B`` with its ``txn``) has arrived, now or earlier,
    and its end (op ``C``) has not: its events (and its begin) wait in the pending table; every other event
    applies, so streams without boundaries apply everything as it comes.

    Args:
        events: The batch, shaped as :data:`EVENT_SCHEMA`.
        pending: The events held by earlier batches (same shape).

    Returns:
        (events to apply now, events to hold).
    """
    both = pa.concat_tables([pending, events]).combine_chunks()
    if not both.num_rows:
        return both, both
    op, txn = both.column("op"), both.column("txn")
    begun = pc.unique(txn.filter(pc.fill_null(pc.equal(op, "B"), False))).drop_null()
    is_end = pc.fill_null(pc.equal(op, "C"), False)
    ended = pc.unique(txn.filter(is_end)).drop_null()
    open_ = pc.filter(begun, pc.invert(pc.is_in(begun, ended)))
    wait = pc.fill_null(pc.is_in(txn, open_), False)
    # An end whose begin has not arrived waits for it: without it, the begin would open the transaction
    # again and hold its events for good. The events themselves apply, as those of streams without
    # boundaries do. An end delivered again after its transaction applied waits too (nothing tells the
    # two apart): the newest LONE_ENDS_KEPT such ends are kept, one small row each.
    early = np.asarray(
        pc.and_(is_end, pc.invert(pc.fill_null(pc.is_in(txn, begun), False))).to_numpy(zero_copy_only=False)
    )
    early[np.flatnonzero(early)[:-LONE_ENDS_KEPT]] = False
    wait = pc.or_(wait, pa.array(early))
    return both.filter(pc.invert(wait)), both.filter(wait)


def plan_batch(cat: Catalog, events: pa.Table, options: SyncOptions) -> SyncPlan:
    """Route a batch's events to their tables and work out each table's change; writes nothing.

    Args:
        cat: The catalog (read for the tables' current layouts).
        events: The batch, shaped as :data:`EVENT_SCHEMA` (columns may come in any order).
        options: The sync's options.

    Returns:
        The plan :func:`apply_plan` commits.

    Raises:
        CdcEventError: A bad event or table, with ``on_error="stop"``.
        InvalidInput: ``events`` lacks a column of :data:`EVENT_SCHEMA`.
    """
    events = _shaped(events)
    refused = _Refusals()
    stop = options.on_error == "stop"

    def refuse(rows: pa.Table, reason: str) -> None:
        if not rows.num_rows:
            return
        if stop:
            first = rows.slice(0, 1).to_pylist()[0]
            raise CdcEventError(reason, first["table"], first["raw"])
        refused.add(rows, reason)

    normal, skipped, unknown = _normal_op(pc.fill_null(events.column("op"), ""))
    missing_op = pc.is_null(events.column("op"))
    malformed = pc.or_(pc.is_null(events.column("table")), missing_op)
    bad = pc.and_(malformed, pc.invert(skipped))
    refuse(events.filter(bad), "malformed envelope: no table or no op")
    keep = pc.invert(pc.or_(bad, skipped))
    low = pc.utf8_lower(pc.utf8_trim_whitespace(pc.fill_null(events.column("op"), "")))
    truncate = pc.and_(keep, pc.is_in(low, pa.array(["t", "truncate"])))
    refuse(events.filter(truncate), TRUNCATE_REFUSAL)
    bad_op = pc.and_(pc.and_(keep, unknown), pc.invert(truncate))
    refuse(events.filter(bad_op), "unknown op")
    keep = pc.and_(keep, pc.invert(unknown))
    no_seq = pc.and_(keep, pc.is_null(events.column("seq")))
    refuse(events.filter(no_seq), "no log position in 0..2^63-1 (source.lsn / lsn / ts_ms)")
    keep = pc.and_(keep, pc.invert(no_seq))
    is_delete = pc.equal(normal, "d")
    no_image = pc.and_(
        keep,
        pc.if_else(is_delete, pc.is_null(events.column("before")), pc.is_null(events.column("after"))),
    )
    refuse(
        events.filter(no_image),
        "no row image (an insert or update without 'after', a delete without 'before')",
    )
    keep = pc.fill_null(pc.and_(keep, pc.invert(no_image)), False)
    twice = pa.array(
        _names_a_column_twice(events.column("after")) | _names_a_column_twice(events.column("before"))
    )
    refuse(events.filter(pc.and_(keep, twice)), "a row image names a column twice")
    keep = pc.and_(keep, pc.invert(twice))
    total = events.num_rows
    skipped_count = pc.sum(pc.cast(skipped, pa.int64())).as_py() or 0
    events = events.set_column(events.schema.get_field_index("op"), "op", normal).filter(keep)

    plans: list[TablePlan] = []
    waiting: list[pa.Table] = []
    if events.num_rows:
        encoded = pc.dictionary_encode(events.column("table")).combine_chunks()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1))
        for i, table in enumerate(encoded.dictionary.to_pylist()):
            rows = events.take(pa.array(order[bounds[i] : bounds[i + 1]]))
            try:
                plans.append(_plan_table(cat, str(table), rows, options))
            except _CannotCreateYet:
                waiting.append(rows)
            except CdcEventError as e:
                if stop:
                    raise
                refused.add(rows, e.reason)
            except InvalidInput as e:
                if stop:
                    raise CdcEventError(str(e), str(table), rows.column("raw")[0].as_py()) from None
                refused.add(rows, str(e))
    targets: dict[str, list[TablePlan]] = {}
    for tp in plans:
        targets.setdefault(tp.name, []).append(tp)
    for name, sharing in targets.items():
        if len(sharing) < 2:
            continue
        sources = sorted(tp.source for tp in sharing)
        reason = f"source tables {sources} map onto one table {name} (give overrides[...]['name'])"
        for tp in sharing:
            plans.remove(tp)
            refuse(events.filter(pc.equal(events.column("table"), tp.source)), reason)
    plan = SyncPlan(plans, refused.table(), total, skipped_count)
    if waiting:
        plan.waiting = pa.concat_tables(waiting).select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA)
    return plan


def _plan_table(cat: Catalog, table: str, events: pa.Table, options: SyncOptions) -> TablePlan:
    name = options.target(table)
    raw = events.column("raw")
    existing = _open(cat, name)
    recorded = None if existing is None else existing.spec.properties.get(SOURCE_PROPERTY)
    if recorded is not None and recorded != table:
        raise CdcEventError(
            f"{name} holds the events of source table {recorded}, not of {table}: two source tables map "
            "onto one name (give overrides[...]['name'])",
            table,
            raw[0].as_py(),
        )
    key = _key_of(table, events, options, existing)
    keyed = key is not None
    if not keyed and options.no_key == "refuse":
        raise CdcEventError(
            "the table has no primary key: its updates and deletes cannot be applied (give primary_keys, or "
            "no_key='append' to keep its events as a change log)",
            table,
            raw[0].as_py(),
        )
    n = events.num_rows
    op = events.column("op")
    is_delete = pc.equal(op, "d").to_numpy(zero_copy_only=False)
    present: dict[str, np.ndarray] = {}
    after = _columns_of(*_map_parts(events.column("after")), n, present)
    in_before: dict[str, np.ndarray] = {}
    before = _columns_of(*_map_parts(events.column("before")), n, in_before)
    is_update = pc.fill_null(pc.equal(op, "u"), False).to_numpy(zero_copy_only=False)
    if options.unavailable_value is not None and is_update.any():
        # Debezium's placeholder for a value it did not get (an unchanged TOASTed column): not a value
        marks = pa.array(
            [options.unavailable_value, base64.b64encode(options.unavailable_value.encode()).decode()]
        )
        for col, text in after.items():
            hit = pc.fill_null(pc.is_in(text, marks), False).to_numpy(zero_copy_only=False) & is_update
            if hit.any():
                after[col] = pc.if_else(pa.array(hit), pa.scalar(None, pa.string()), text)
                present[col] = present[col] & ~hit
        for col, text in before.items():  # nor is it one in the old image
            hit = pc.fill_null(pc.is_in(text, marks), False).to_numpy(zero_copy_only=False)
            in_before[col] = in_before[col] & ~hit
    for col, held in in_before.items():
        # An update's new image without a column (or with Debezium's placeholder) that its old image
        # holds (REPLICA IDENTITY FULL logs the whole old row): the value did not change, so the old
        # image's is the row's. Only a value: Debezium's old image lists every column, NULL outside the
        # identity, and an unchanged TOASTed value is never NULL.
        absent = ~present.get(col, np.zeros(n, dtype=bool))
        valued = pc.is_valid(before[col]).to_numpy(zero_copy_only=False)
        fill = is_update & held & absent & valued
        if fill.any():
            after[col] = pc.if_else(pa.array(fill), before[col], after.get(col, pa.nulls(n, pa.string())))
            present[col] = ~absent | fill
    types = _types_of(table, events, raw)
    names = list(dict.fromkeys([*after, *before]))
    if existing is not None:
        have = {f.name: f.type for f in existing.schema}
    else:
        have = {}
    for col in (
        *(key or ()),
        *(options.override(table, "partition_by", _per_table(options.partition_by, table)) or ()),
    ):
        if col not in names and col not in have:
            if existing is None and bool(is_delete.all()):
                # Deletes alone (their images hold the key only): they wait for an event that brings the
                # column; until then the table has no row for them to delete.
                raise _CannotCreateYet(f"partition column {col!r} is in no event yet", table)
            raise CdcEventError(f"key or partition column {col!r} is in no event", table, raw[0].as_py())
    reserved = {options.sequence_column, OP_COLUMN} & set(names)
    if reserved:
        raise CdcEventError(
            f"source column(s) {sorted(reserved)} clash with the sync's own columns", table, raw[0].as_py()
        )
    columns: dict[str, pa.Array] = {}
    fields: list[pa.Field] = []
    add: list[tuple[str, pa.DataType]] = []
    widen: list[tuple[str, pa.DataType]] = []
    delete_mask = pa.array(is_delete)
    final: dict[str, pa.DataType] = {}
    for col in names:
        kind_name = types.get(col)
        old = have.get(col)
        if kind_name is None and old is None:
            raise CdcEventError(
                f"column {col!r} has no type (give Debezium's schema, or wal2json's types)",
                table,
                raw[0].as_py(),
            )
        if kind_name is None:
            kind = old
            text = _pick(after, before, col, delete_mask, n)
            values = pc.cast(text, pa.string())
            try:
                typed = _cast_like(values, kind)
            except InvalidInput as e:
                raise CdcEventError(f"column {col!r}: {e}", table, raw[0].as_py()) from None
        else:
            try:
                kind = source_type(kind_name)[0]
                typed = decode_values(_pick(after, before, col, delete_mask, n), kind_name)
            except InvalidInput as e:
                raise CdcEventError(
                    f"column {col!r}: {e}", table, _first_bad(raw, _pick(after, before, col, delete_mask, n))
                ) from None
        if (
            old is not None
            and old != kind
            and can_widen(old, kind)
            and existing is not None
            and col in existing.spec.identity_columns
        ):
            # A key or partition column keeps its type (its bucket hash and partition values follow the
            # type): values the old type holds are taken as it; others stop the table's events.
            try:
                typed, kind = pc.cast(typed, old), old
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise CdcEventError(
                    f"column {col!r} is a key or partition column of {old} that the source changed to {kind}, "
                    f"and a value does not fit {old} ({e}); mere cannot retype it: recreate the table",
                    table,
                    raw[0].as_py(),
                ) from None
        if old is not None and old != kind:
            if can_widen(old, kind):
                widen.append((col, kind))
            elif can_widen(kind, old):
                typed = pc.cast(typed, old)
                kind = old
            else:
                raise CdcEventError(
                    f"column {col!r} changed type from {old} to {kind}: not a widening mere can evolve",
                    table,
                    raw[0].as_py(),
                )
        elif old is None and existing is not None:
            add.append((col, kind))
        columns[col] = typed
        final[col] = kind
        fields.append(pa.field(col, kind, nullable=not (keyed and col in (key or ()))))
    if add and existing is not None:
        try:  # refused now, with this table's events, not midway through the batch's commit
            check_new_columns(existing.spec, [col for col, _ in add], name)
        except InvalidInput as e:
            raise CdcEventError(str(e), table, raw[0].as_py()) from None
    if keyed:
        for col in key or ():
            if columns.get(col) is not None and columns[col].null_count:
                raise CdcEventError(
                    f"primary-key column {col!r} is null", table, _first_null(raw, columns[col])
                )
    for col, kind in have.items():  # whole rows: a column the events lack is NULL (an older image)
        if col not in columns and col not in (options.sequence_column, OP_COLUMN):
            columns[col] = pa.nulls(n, kind)
            final[col] = kind
    moved = _moved_keys(key or [], op, before, columns, final, types) if keyed else None
    asked_at = None
    # An update's column the new image does not hold (wal2json leaves out an unchanged TOASTed value,
    # Debezium writes its placeholder) keeps the row's earlier value: filled when the batch is applied.
    missing: dict[str, np.ndarray] = {}
    if keyed and is_update.any():
        for col in final:
            if col in (key or ()):
                continue
            gap = is_update & ~present.get(col, np.zeros(n, dtype=bool))
            if gap.any():
                missing[col] = gap
    old_keys = None
    if missing and moved is not None:
        old_keys = {c: _decode_as(before[c].take(pa.array(moved)), types.get(c), final[c]) for c in key or ()}
    columns[options.sequence_column] = events.column("seq").combine_chunks()
    columns[OP_COLUMN] = op.combine_chunks() if isinstance(op, pa.ChunkedArray) else op
    rows = pa.table(columns)
    if moved is not None:
        # An update that changed the key (wal2json writes one U, the old key as identity): the old key
        # goes, at the update's position, beside the new key's row.
        take = pa.array(moved)
        gone = {
            c: _decode_as(before[c].take(take), types.get(c), final[c])
            if c in before
            else pa.nulls(len(moved), final[c])
            for c in final
        }
        gone[options.sequence_column] = rows.column(options.sequence_column).take(take)
        gone[OP_COLUMN] = pa.array(["d"] * len(moved), pa.string())
        gone_rows = pa.table(gone).select(rows.column_names).cast(rows.schema)
        kept, asked_at = _shifted_keys_kept(
            None if existing is None else cat,
            name,
            key or [],
            options.sequence_column,
            rows,
            gone_rows,
            moved,
            events.column("txn").combine_chunks(),
        )
        if not kept.all():
            gone_rows = gone_rows.filter(pa.array(kept))
        rows = pa.concat_tables([rows, gone_rows])
        missing = {
            c: np.concatenate([m, np.zeros(gone_rows.num_rows, dtype=bool)]) for c, m in missing.items()
        }
    partial = None
    if missing:
        # the key each row's missing values come from: its own, the old one for an update that moved it
        lookup = rows.select(list(key or ())).combine_chunks()
        if old_keys is not None and moved is not None:
            for c, values in old_keys.items():
                idx = np.arange(rows.num_rows)
                spot = np.full(rows.num_rows, -1, dtype=np.int64)
                spot[moved] = np.arange(len(moved))
                merged = pc.if_else(
                    pa.array(spot >= 0),
                    values.take(pa.array(np.maximum(spot, 0))),
                    lookup.column(c).take(pa.array(idx)),
                )
                lookup = lookup.set_column(lookup.schema.get_field_index(c), c, merged)
        partial = PartialRows(
            missing,
            lookup,
            None if moved is None else np.asarray(moved),
            None if moved is None else rows.num_rows - n,
            asked_at,
        )
    create = None
    if existing is None:
        schema = pa.schema([*fields, pa.field(options.sequence_column, pa.int64(), nullable=False)])
        if not keyed:
            schema = schema.append(pa.field(OP_COLUMN, pa.string(), nullable=False))
        partition = options.override(table, "partition_by", _per_table(options.partition_by, table))
        create = {
            "schema": schema,
            "primary_key": key,
            "partition_by": list(partition) if partition else None,
            "buckets": options.override(table, "buckets", options.buckets) if keyed else None,
            "properties": {
                **dict(options.override(table, "properties", options.properties) or {}),
                SOURCE_PROPERTY: table,
            },
        }
        if keyed:
            create["cdc_column"] = OP_COLUMN
            create["sequence_by"] = options.sequence_column
        try:  # checked now: a key type mere cannot key, or names alike but for case, refuse this table only
            cat.new_table(name, **{k: v for k, v in create.items() if v is not None})
        except InvalidInput as e:
            raise CdcEventError(str(e), table, raw[0].as_py()) from None
    elif keyed and (not existing.spec.sequence_by or existing.spec.cdc_column != OP_COLUMN):
        raise CdcEventError(
            f"{name} exists without sequence_by / cdc_column {OP_COLUMN!r}: the sync applies changes only to "
            "tables it creates (or tables with the same layout)",
            table,
            raw[0].as_py(),
        )
    return TablePlan(table, name, rows, create, add, widen, keyed, partial)


def _decode_as(text: pa.Array, kind_name: str | None, kind: pa.DataType) -> pa.Array:
    """Values' text -> ``kind`` (through their source type when the events name it)."""
    if kind_name is None:
        return _cast_like(pc.cast(text, pa.string()), kind)
    typed = decode_values(text, kind_name)
    return typed if typed.type == kind else pc.cast(typed, kind)


def _shifted_keys_kept(
    cat: Catalog | None,
    name: str,
    key: Sequence[str],
    seq_col: str,
    rows: pa.Table,
    gone: pa.Table,
    moved: np.ndarray,
    txn: pa.Array,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Which old-key deletes of key-changing updates stand. One that follows, in the same source
    transaction, an update moving another row onto that key while the key held a row (a deferrable key
    shifted or swapped in one statement, ``SET id = id + 1``: two rows held it for a moment) deletes the
    row that was there before, not the one moved there: it is dropped, and the moved row stays. Whether
    the key held a row: its latest earlier event in the batch is a live row, or, with none, its stored
    row (``cat``: None for a new table) is live and not newer than the move. Such a move's values are that
    earlier row's: the second result gives, per move, the log position its old key is asked at (just
    before the move onto it), or None when no delete was dropped."""
    kept = np.ones(gone.num_rows, dtype=bool)
    if not key or len(moved) < 2 or txn.null_count == len(txn):
        return kept, None
    keys = list(key)
    seq = rows.column(seq_col).to_numpy(zero_copy_only=False)
    at, through = pa.array(seq[moved]), txn.take(pa.array(moved))
    onto = rows.select(keys).take(pa.array(moved)).append_column("__a", at).append_column("__txn", through)
    leaving = (
        gone.select(keys)
        .append_column("__b", at)
        .append_column("__txn", through)
        .append_column("__j", pa.array(np.arange(len(moved))))
    )
    pairs = leaving.join(onto, [*keys, "__txn"], join_type="inner")
    pairs = pairs.filter(pc.less(pairs.column("__a"), pairs.column("__b")))
    if not pairs.num_rows:
        return kept, None
    every = pa.concat_tables(
        [
            rows.select(keys)
            .append_column("__s", pa.array(seq))
            .append_column("__live", pc.not_equal(rows.column(OP_COLUMN), "d")),
            gone.select(keys)
            .append_column("__s", at)
            .append_column("__live", pa.array(np.zeros(len(moved), dtype=bool))),
        ]
    )
    earlier = pairs.select([*keys, "__a", "__j"]).join(every, keys, join_type="inner")
    earlier = earlier.filter(pc.less(earlier.column("__s"), earlier.column("__a")))
    held = np.zeros(len(moved), dtype=bool)
    seen = np.zeros(len(moved), dtype=bool)
    if earlier.num_rows:
        latest = earlier.join(earlier.group_by(["__j"]).aggregate([("__s", "max")]), ["__j"])
        latest = latest.filter(pc.equal(latest.column("__s"), latest.column("__s_max")))
        j = latest.column("__j").to_numpy()
        seen[j] = True
        held[j] = np.asarray(latest.column("__live").to_numpy(zero_copy_only=False), dtype=bool)
    pair_j = pairs.column("__j").to_numpy()
    ask = pairs.filter(pa.array(~seen[pair_j]))
    if ask.num_rows and cat is not None:
        stored = cat.table(name).scan(columns=[*keys, seq_col], filter=_of_keys(ask.select(keys))).to_arrow()
        if stored.num_rows:
            stored = stored.cast(
                pa.schema(
                    [
                        ask.schema.field(c) if c in keys else f
                        for c, f in zip(stored.column_names, stored.schema)
                    ]
                )
            )
            found = ask.join(stored, keys, join_type="inner")
            live = found.filter(pc.less_equal(found.column(seq_col), found.column("__a")))
            held[live.column("__j").to_numpy()] = True
    dropped = pair_j[held[pair_j]]
    if not len(dropped):
        return kept, None
    kept[dropped] = False
    asked_at = np.asarray(seq[moved], dtype=np.int64).copy()
    onto_at = pairs.column("__a").to_numpy()[held[pair_j]]
    np.minimum.at(asked_at, dropped, onto_at - 1)  # just before the (earliest) move onto the key
    return kept, asked_at


def _moved_keys(
    key: Sequence[str],
    op: pa.Array,
    before: dict[str, pa.Array],
    columns: dict[str, pa.Array],
    final: dict[str, pa.DataType],
    types: dict[str, str],
) -> np.ndarray | None:
    """The rows of updates whose old image names another key (None when there are none)."""
    if not key or not all(c in before for c in key):
        return None
    moved = pc.fill_null(pc.equal(op, "u"), False)
    differs = None
    for c in key:
        old = _decode_as(before[c], types.get(c), final[c])
        ne = pc.and_(pc.is_valid(old), pc.fill_null(pc.not_equal(old, columns[c]), True))
        differs = ne if differs is None else pc.or_(differs, ne)
    found = np.flatnonzero(pc.and_(moved, differs).to_numpy(zero_copy_only=False))
    return found if len(found) else None


def _pick(
    after: dict[str, pa.Array], before: dict[str, pa.Array], col: str, delete: pa.Array, n: int
) -> pa.Array:
    """A column's text: from the old image for deletes, the new image otherwise."""
    none = pa.nulls(n, pa.string())
    return pc.if_else(delete, before.get(col, none), after.get(col, none))


def _cast_like(values: pa.Array, kind: pa.DataType) -> pa.Array:
    try:
        if pa.types.is_binary(kind):
            return _hex(values) if pc.any(pc.starts_with(values, "\\x")).as_py() else pc.cast(values, kind)
        return pc.cast(values, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise InvalidInput(f"a value is not a {kind}: {e}") from None


def _first_bad(raw: pa.Array, text: pa.Array) -> str | None:
    return raw[0].as_py() if len(raw) else None


def _first_null(raw: pa.Array, values: pa.Array) -> str | None:
    idx = pc.index(pc.is_null(values), True).as_py()
    event = raw[max(idx, 0)].as_py()
    return None if event is None else str(event)


# -- applying ----------------------------------------------------------------------------------------


def _key_groups(keys: pa.Table, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by key then log position: (order, the sorted position where each row's key starts)."""
    n = keys.num_rows
    sortable = keys.append_column("__seq", pa.array(seq, pa.int64()))
    order = pc.sort_indices(sortable, sort_keys=[(c, "ascending") for c in sortable.column_names]).to_numpy(
        zero_copy_only=False
    )
    first = np.zeros(n, dtype=bool)
    if n:
        first[0] = True
        ordered = keys.take(pa.array(order))
        for c in keys.column_names:
            col = ordered.column(c).combine_chunks()
            first[1:] |= pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True).to_numpy(
                zero_copy_only=False
            )
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    return order, start


def _carry(
    known: np.ndarray,
    order: np.ndarray,
    start: np.ndarray,
    only: np.ndarray | None = None,
    block: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each unknown cell, the row of the same key's latest known cell before it (by log position):
    (rows to fill, rows they take from); ``only`` limits the rows filled. A ``block`` row (a delete, a
    moved row not filled yet) ends what the rows after it may take: its key held no such value then."""
    n = len(order)
    known_sorted = known[order]
    stops = known_sorted if block is None else known_sorted | block[order]
    last = np.maximum.accumulate(np.where(stops, np.arange(n), -1))
    take = ~stops & (last >= start)
    take[take] = known_sorted[last[take]]
    if only is not None:
        take &= only[order]
    return order[take], order[last[take]]


def _behind(block: np.ndarray, order: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Rows with a ``block`` row of their key earlier (by log position; ``order`` and ``start`` as
    :func:`_key_groups` gives them)."""
    block_sorted = block[order]
    last = np.maximum.accumulate(np.where(block_sorted, np.arange(len(order)), -1))
    out = np.zeros(len(order), dtype=bool)
    out[order] = np.r_[-1, last[:-1]] >= start
    return out


def _complete(cat: Catalog, tp: TablePlan, share: Any, options: SyncOptions) -> pa.Table | None:
    """Fill the cells an update's image lacks from the key's latest earlier version: an earlier event of
    the batch, else the stored row (read at the version the transaction writes on) when it is not newer
    than the update. An update a newer stored version overtook keeps its cells NULL: that version wins
    anyway (``sequence_by``). Returns the rows with cells left NULL (no earlier version found): their keys,
    ``__seq`` and ``__cells``, or None."""
    partial = tp.partial
    if partial is None:
        return None
    rows = tp.rows
    key = partial.lookup.column_names
    # Stored versions newer than some row of the batch (a stream re-read from an earlier offset brings old
    # events beside new ones) take their place among the batch's rows: a row's past is then the latest of
    # its earlier rows and of the stored version, whichever the log wrote last. They are dropped at the end.
    seq_col = options.sequence_column
    stored_rows = None if tp.create is not None else _stored_for(cat, tp, share, options)
    held = set() if stored_rows is None else set(stored_rows.column_names) - {*key, seq_col}
    prior = None
    if stored_rows is not None and tp.rows.num_rows:
        newer = pc.greater(stored_rows.column(seq_col), pc.min(tp.rows.column(seq_col)))
        prior = _as_plan_rows(tp.rows.schema, stored_rows.filter(newer))
    ahead = 0 if prior is None else prior.num_rows
    if ahead:
        assert prior is not None
        rows = pa.concat_tables([prior, rows])
        partial = PartialRows(
            {c: np.concatenate([np.zeros(ahead, dtype=bool), m]) for c, m in partial.missing.items()},
            pa.concat_tables([prior.select(key).cast(partial.lookup.schema), partial.lookup]),
            None if partial.moved is None else partial.moved + ahead,
            partial.gone,
            partial.asked_at,
        )
    seq = rows.column(options.sequence_column).to_numpy(zero_copy_only=False)
    asked_seq = seq  # where each row's past is looked for: a moved row's may be earlier (a shifted key)
    if partial.moved is not None and partial.asked_at is not None:
        asked_seq = seq.copy()
        asked_seq[partial.moved] = partial.asked_at
    live = pc.not_equal(rows.column(OP_COLUMN), "d").to_numpy(zero_copy_only=False)
    own = rows.select(key)
    order, start = _key_groups(own, seq)
    n = rows.num_rows
    across = None
    if partial.moved is not None:
        # a moved row asks under its old key: the rows (own keys) and the moved rows' questions (old keys)
        # sorted together, so a question finds the old key's latest earlier row
        asks = partial.moved
        questions = partial.lookup.take(pa.array(asks)).cast(own.schema)
        both = pa.concat_tables([own, questions])
        joint_order, joint_start = _key_groups(both, np.concatenate([seq, asked_seq[asks]]))
        only = np.concatenate([np.zeros(n, dtype=bool), np.ones(len(asks), dtype=bool)])
        across = (joint_order, joint_start, only, asks)
    values = {c: rows.column(c).combine_chunks() for c in partial.missing}
    known = {c: live & ~m for c, m in partial.missing.items()}
    for c in set(partial.missing) - held:  # a column the table lacks: its stored versions hold no value
        known[c][:ahead] = False
    # What a key's later rows may not look past: its deletes (the key held nothing after one), and its
    # moved rows until they are filled (their values come from the old key, not from this key's past).
    # The old keys' deletes a move adds (the last rows) do not stop the move's own question.
    moved_rows = np.zeros(n, dtype=bool)
    gone_rows = np.zeros(n, dtype=bool)
    if partial.moved is not None:
        moved_rows[partial.moved] = True
        gone_rows[n - (len(partial.moved) if partial.gone is None else partial.gone) :] = True

    def blocks(col: str, deletes: np.ndarray) -> np.ndarray:
        return np.asarray((deletes | moved_rows) & ~known[col], dtype=bool)

    def fill(col: str, dst: np.ndarray, src: np.ndarray) -> None:
        if not len(dst):
            return
        index = np.arange(rows.num_rows)
        index[dst] = src
        values[col] = values[col].take(pa.array(index))
        known[col][dst] = True

    def spread(col: str) -> None:
        # along each key's events; a moved row from its old key's (again while that fills more: moves chain)
        for _ in range(2 + (0 if across is None else len(across[3]))):
            fill(col, *_carry(known[col], order, start, block=blocks(col, ~live)))
            if across is None:
                return
            joint_order, joint_start, only, asks = across
            pending = ~known[col][asks]
            if not pending.any():
                return
            no = np.zeros(len(asks), dtype=bool)
            dst, src = _carry(
                np.concatenate([known[col], no]),
                joint_order,
                joint_start,
                only,
                np.concatenate([blocks(col, ~live & ~gone_rows), no]),
            )
            dst = asks[dst - n]
            keep = ~known[col][dst]
            if not keep.any():
                return
            fill(col, dst[keep], src[keep])

    for col in partial.missing:
        spread(col)

    def read_stored() -> pa.Table:
        # the stored rows of the keys asked about, with their log positions (as ``__stored<sequence column>``)
        if stored_rows is None:
            return pa.table({})
        return stored_rows.rename_columns(
            [f"__stored{seq_col}" if c == seq_col else c for c in stored_rows.column_names]
        )

    def from_stored(
        stored: pa.Table, lookup: pa.Table, need: np.ndarray, older: np.ndarray | None, not_older: bool
    ) -> None:
        # ``stored`` rows of ``lookup``'s keys fill the rows in ``need``: the ``older`` rows only from a
        # stored version before their own log position; with ``not_older``, every row only from one at or
        # after it
        if not stored.num_rows or not need.any():
            return
        wanted = lookup.append_column("__row", pa.array(np.arange(rows.num_rows))).filter(pa.array(need))
        joined = wanted.join(stored, key, join_type="inner")
        at = joined.column("__row").to_numpy()
        stored_seq = joined.column(f"__stored{seq_col}").to_numpy(zero_copy_only=False)
        if not_older:
            ok = stored_seq >= seq[at]
        elif older is not None:
            # a moved row's old key before the move; a row's own key at or before it (the same log position
            # is this event applied before). A newer stored row is not its past: its values, handed on along
            # the batch (a move, a replay tying with its stored self), would overwrite rows it never wrote.
            ok = np.where(older[at], stored_seq < asked_seq[at], stored_seq <= seq[at])
        else:
            ok = np.ones(len(at), dtype=bool)
        for col in partial.missing:
            if col not in stored.column_names:
                continue
            gap = ok & partial.missing[col][at] & ~known[col][at]
            if not gap.any():
                continue
            dst = at[gap]
            got = joined.column(col).take(pa.array(np.flatnonzero(gap))).combine_chunks()
            merged = pa.concat_arrays([values[col], got.cast(values[col].type)])
            index = np.arange(rows.num_rows)
            index[dst] = rows.num_rows + np.arange(len(dst))
            values[col] = merged.take(pa.array(index))
            known[col][dst] = True
        for col in partial.missing:  # later partial updates of the same key take the filled values
            spread(col)

    def unfilled() -> np.ndarray:
        need = np.zeros(rows.num_rows, dtype=bool)
        for col, m in partial.missing.items():
            need |= m & ~known[col]
        return need

    def after_a_block(col: str) -> np.ndarray:
        # rows with a delete or an unfilled moved row of their own key earlier in the batch: their earlier
        # value is that row's (none, or the move's), never the stored one
        return _behind(blocks(col, ~live), order, start)

    def question_after_a_block(col: str) -> np.ndarray:
        # moved rows whose old key has a delete or an unfilled moved row earlier in the batch: their value
        # comes from that row (a move onto the old key, filled in turn), never from the stored one
        out = np.zeros(n, dtype=bool)
        if across is None:
            return out
        joint_order, joint_start, _, asks = across
        joint_block = np.concatenate([blocks(col, ~live & ~gone_rows), np.zeros(len(asks), dtype=bool)])
        out[asks] = _behind(joint_block, joint_order, joint_start)[n:]
        return out

    if tp.create is None and unfilled().any():
        barred = np.zeros(n, dtype=bool)
        for col in partial.missing:
            barred |= np.where(moved_rows, question_after_a_block(col), after_a_block(col))
        # A row's earlier value is its key's stored one; a moved row's is its old key's before the move (a
        # later row of that key, re-used since, is not its past). The one read serves this question and the
        # replayed moves' below (their new keys).
        first = unfilled() & ~barred
        stored = read_stored()
        from_stored(stored, partial.lookup, first, moved_rows, not_older=False)
        # A moved row still without its value: a replay of a move applied before (its old key is gone or
        # re-used by then, or moved onto by a row of this replay that has no value either), whose new
        # key's stored row is that move (same log position) or newer. Its values are what the move wrote,
        # and a newer stored version wins anyway; without them the replay would tie with it and blank it.
        replayed = unfilled() & moved_rows
        if replayed.any():
            from_stored(stored, own, replayed, None, not_older=True)
    cells = np.zeros(n, dtype=np.int64)
    for col, m in partial.missing.items():
        cells += m & ~known[col]
        rows = rows.set_column(rows.schema.get_field_index(col), col, values[col])
    if ahead:
        rows, own, seq, cells = rows.slice(ahead), own.slice(ahead), seq[ahead:], cells[ahead:]
    tp.rows = rows
    tp.partial = None
    if not cells.any():
        return None
    left = cells > 0
    return (
        own.filter(pa.array(left))
        .append_column("__seq", pa.array(seq[left]))
        .append_column("__cells", pa.array(cells[left]))
    )


def _unresolved(cat: Catalog, name: str, unfilled: pa.Table, options: SyncOptions) -> int:
    """Of the cells left NULL, those in rows that are their key's version after the commit: a row that lost
    to a newer version (a replay of events a later delete or move has overtaken) leaves no NULL behind."""
    key = [c for c in unfilled.column_names if c not in ("__seq", "__cells")]
    seq_col = options.sequence_column
    stored = cat.table(name).scan(columns=[*key, seq_col], filter=_of_keys(unfilled.select(key))).to_arrow()
    if not stored.num_rows:
        return 0
    stored = stored.cast(
        pa.schema(
            [unfilled.schema.field(c) if c in key else f for c, f in zip(stored.column_names, stored.schema)]
        )
    )
    kept = unfilled.join(stored, key, join_type="inner")
    kept = kept.filter(pc.equal(kept.column("__seq"), kept.column(seq_col)))
    # a duplicated event is one row of the table
    once = kept.group_by([*key, "__seq"]).aggregate([("__cells", "max")])
    return int(pc.sum(once.column("__cells_max")).as_py() or 0)


def _stored_for(cat: Catalog, tp: TablePlan, share: Any, options: SyncOptions) -> pa.Table | None:
    """The stored rows (at the version the share writes on) of the keys the batch's partial updates look
    up, and of the new keys of its key changes: key columns, the missing columns the table holds and the
    log position; None when no row lacks a cell or the table holds none of the missing columns."""
    partial = tp.partial
    assert partial is not None
    seq_col = options.sequence_column
    asking = np.zeros(tp.rows.num_rows, dtype=bool)
    for m in partial.missing.values():
        asking |= m
    if not asking.any():
        return None
    key = partial.lookup.column_names
    own = tp.rows.select(key)
    keys = partial.lookup.filter(pa.array(asking)).cast(own.schema)
    if partial.moved is not None and len(partial.moved):
        keys = pa.concat_tables([keys, own.take(pa.array(partial.moved))])
    table = cat.table(tp.name)
    have = set(table.schema.names)
    wanted = [c for c in partial.missing if c in have]
    if not wanted or seq_col not in have:
        return None
    stored = table.scan(
        columns=[*key, *wanted, seq_col], filter=_of_keys(keys), version=share.read_version
    ).to_arrow()
    stored = stored.cast(
        pa.schema(
            [keys.schema.field(c) if c in key else f for c, f in zip(stored.column_names, stored.schema)]
        )
    )
    return stored.join(keys.group_by(key).aggregate([]), key, join_type="left semi")


def _as_plan_rows(shape: pa.Schema, stored: pa.Table) -> pa.Table | None:
    """Stored rows as live rows of a table plan (columns they lack NULL), or None for none."""
    if not stored.num_rows:
        return None
    columns = []
    for f in shape:
        if f.name == OP_COLUMN:
            columns.append(pa.repeat(pa.scalar("u", f.type), stored.num_rows))
        elif f.name in stored.column_names:
            columns.append(stored.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(stored.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=shape)


def _of_keys(keys: pa.Table) -> Any:
    """A filter holding the rows of these keys (each key column among the keys' values; the caller joins
    for the exact pairs)."""
    condition = None
    for c in keys.column_names:
        inside = pc.field(c).isin(pc.unique(keys.column(c)).drop_null())
        condition = inside if condition is None else condition & inside
    return condition


def apply_plan(
    cat: Catalog,
    plan: SyncPlan,
    options: SyncOptions,
    idempotency_key: str,
    pending: pa.Table | None = None,
) -> SyncResult:
    """Commit a plan: every table's change (creations, column changes, rows) and the quarantined events in
    one catalog transaction under ``idempotency_key``.

    Args:
        cat: The catalog.
        plan: From :func:`plan_batch`.
        options: The sync's options.
        idempotency_key: Names the batch: a batch committed under it before is not applied again.
        pending: The events of open source transactions to hold (they replace the pending table's), or
            None to leave the pending table as it is.

    Returns:
        What was committed.

    Raises:
        CommitConflict: Concurrent commits won every retry; nothing committed.
        MereError: Any failure of a table's write; nothing committed.
    """
    created: list[str] = []
    evolved: list[str] = []
    applied = 0
    unfilled: list[tuple[str, pa.Table]] = []
    with cat.transaction(idempotency_key=idempotency_key) as tx:
        if tx.already_committed:
            results = tx.commit()
            return SyncResult(results, 0, plan.skipped, 0, [], [], already_committed=True)
        for tp in plan.tables:
            if tp.create is not None:
                share = tx.create_table(tp.name, **{k: v for k, v in tp.create.items() if v is not None})
                created.append(tp.name)
            else:
                share = tx.table(tp.name)
                if tp.add or tp.widen:
                    update = share.evolve()
                    for col, kind in tp.add:
                        update.add_column(col, kind)
                    for col, kind in tp.widen:
                        update.widen(col, kind)
                    update.commit()
                    evolved.append(tp.name)
            left = _complete(cat, tp, share, options)
            if left is not None:
                unfilled.append((tp.name, left))
            if tp.keyed:
                share.upsert(tp.rows)
            else:
                share.append(tp.rows)
            applied += tp.rows.num_rows
        pname = f"{options.namespace}.{options.pending_table}"
        if pending is not None:
            if _open(cat, pname) is None:
                if pending.num_rows:
                    tx.create_table(pname, EVENT_SCHEMA).append(pending)
            else:
                tx.table(pname).overwrite(pending)
        elif plan.waiting.num_rows:  # a caller that does not hold the pending table: add to it
            if _open(cat, pname) is None:
                tx.create_table(pname, EVENT_SCHEMA).append(plan.waiting)
            else:
                tx.table(pname).append(plan.waiting)
        if plan.refused.num_rows:
            qname = f"{options.namespace}.{options.quarantine_table}"
            rows = plan.refused
            rows = rows.add_column(0, "batch", pa.array([idempotency_key] * rows.num_rows, pa.string()))
            if _open(cat, qname) is None:
                tx.create_table(qname, QUARANTINE_SCHEMA).append(rows)
            else:
                tx.table(qname).append(rows)
    unresolved = sum(_unresolved(cat, name, left, options) for name, left in unfilled)
    return SyncResult(
        tx.results,
        applied,
        plan.skipped,
        plan.refused.num_rows,
        created,
        evolved,
        unresolved=unresolved,
        waiting=plan.waiting.num_rows,
    )


def sync_batch(cat: Catalog, events: pa.Table, options: SyncOptions, idempotency_key: str) -> SyncResult:
    """Apply one batch of change events to the catalog: every table's change in one catalog transaction
    under ``idempotency_key`` (a batch applied again changes nothing).

    Args:
        cat: The catalog.
        events: The batch, shaped as :data:`EVENT_SCHEMA` (see :func:`events_from_json`).
        options: The sync's options.
        idempotency_key: Names the batch across restarts (Spark's query id and batch id).

    Returns:
        What was committed.

    Raises:
        CdcEventError: A bad event or table, with ``on_error="stop"``: nothing committed.
        CommitConflict: Concurrent commits won every retry; nothing committed.

    Source transactions: where the stream carries their boundaries, the events of a transaction whose end
    has not arrived are held in the pending table (written in the same catalog transaction) and applied
    with the batch that brings its end (see :func:`hold_open_transactions`). Key-only deletes of a table
    not made yet whose partition columns no event has brought wait there too, until one does.
    """
    tx = cat.transaction(idempotency_key=idempotency_key)
    if tx.already_committed:  # a replay: nothing to plan
        return SyncResult(tx.commit(), 0, 0, 0, [], [], already_committed=True)
    tx.abort()
    events = _shaped(events)
    stored = _open(cat, f"{options.namespace}.{options.pending_table}")
    held = EVENT_SCHEMA.empty_table() if stored is None else _shaped(stored.to_arrow())
    now, hold = hold_open_transactions(events, held)
    plan = plan_batch(cat, now, options)
    if plan.waiting.num_rows:
        hold = pa.concat_tables([hold, plan.waiting])
    pending = hold if held.num_rows or hold.num_rows else None
    return apply_plan(cat, plan, options, idempotency_key, pending)


__all__ = [
    "EVENT_SCHEMA",
    "FORMATS",
    "PENDING_TABLE",
    "QUARANTINE_SCHEMA",
    "UNAVAILABLE_VALUE",
    "CdcEventError",
    "SyncOptions",
    "SyncPlan",
    "SyncResult",
    "TablePlan",
    "apply_plan",
    "decode_values",
    "events_from_json",
    "hold_open_transactions",
    "plan_batch",
    "source_type",
    "sync_batch",
]
