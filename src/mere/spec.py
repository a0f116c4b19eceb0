"""Table specification: schema, primary key, partitioning, buckets and merge operators.

The spec is engine- and storage-neutral and serialises to JSON for the catalog.
"""

from __future__ import annotations

import base64
import datetime as dt
import difflib
import functools
import json
import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from mere.durations import parse_duration
from mere.errors import CatalogError, InvalidInput, SchemaMismatch, UnsupportedType
from mere.options import parse_bytes

OP_COLUMN = "_mere_op"
"""Row-level change kind stored in primary-key table files."""
# Tables with ``sequence_by``: when the delete a tombstone (a delete marker that compaction keeps) stands
# for was committed, stored in the files compaction writes (UTC microseconds; NULL on other rows).
TOMBSTONE_TIME_COLUMN = "_mere_deleted_at"
# The change feed's own columns (Table.changes): a table column of one of these names would clash there.
FEED_COLUMNS = ("_change", "_version", "_commit_time")
RESERVED_COLUMNS = (OP_COLUMN, TOMBSTONE_TIME_COLUMN, *FEED_COLUMNS)

OP_MERGE = 0  # combine with the key's previous state using the merge operators
OP_DELETE = 1  # the key is gone
OP_PUT = 2  # forget the previous state, then merge into an empty row

MERGE_OPERATORS = ("last", "last_non_null", "sum", "concat", "max", "min", "bool_and", "bool_or")
# Operators whose result is the same whatever the order of the versions and however often one repeats
# (SQL aggregates that ignore NULLs): exact under replays, so they combine with ``sequence_by``.
ORDER_FREE_OPERATORS = ("max", "min", "bool_and", "bool_or")
# ``merge_operators`` given as one of these strings instead of a mapping: a merge engine for whole rows.
# ``first_row``: the first version of a key wins (lowest sequence, or oldest commit then row), later
# ones are ignored; deletes are refused. Internally every value column merges with ``first``.
MERGE_ENGINES = ("first_row",)


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
            op = MergeOperator(
                str(value.get("op", value.get("name", ""))).lower(),
                str(value.get("separator", value.get("sep", ","))),
            )
        else:
            raise InvalidInput(
                f"merge operator for column {column!r} must be a name like 'sum', got {value!r}"
            )
        if op.name not in MERGE_OPERATORS:
            raise InvalidInput(
                f"unknown merge operator {op.name!r} for column {column!r}; choose one of {', '.join(MERGE_OPERATORS)}"
            )
        return op

    def to_json(self) -> dict[str, str]:
        return {"op": self.name, "separator": self.separator}


_PARTITION_TYPES = (
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_date,
    pa.types.is_boolean,
)


def is_key_type(t: pa.DataType) -> bool:
    """Types mere can hash into buckets the way Spark SQL does."""
    return bool(
        (pa.types.is_integer(t) and pa.types.is_signed_integer(t))
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or (pa.types.is_decimal128(t) and t.precision <= 18)
    )


def is_sequence_type(t: pa.DataType) -> bool:
    """Types a ``sequence_by`` column may have: integers, decimals, timestamps, dates and strings (their
    order is total and exact; floats are not: NaN and -0.0 would make equal events unequal)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_decimal(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def is_orderable(t: pa.DataType) -> bool:
    """Types ``max`` and ``min`` take: numbers, decimals, strings, binaries, dates, timestamps, booleans."""
    return bool(
        is_number(t)
        or is_text(t)
        or is_bytes_type(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_boolean(t)
    )


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


MAX_BUCKETS = 100_000  # Spark's own limit (spark.sql.sources.bucketing.maxBuckets)


def normalise_type(t: pa.DataType) -> pa.DataType:
    """The stored type: encodings (dictionary, run-end, views) become their plain value types, also inside
    nested types."""
    if pa.types.is_dictionary(t):
        return normalise_type(t.value_type)
    if pa.types.is_run_end_encoded(t):
        return normalise_type(t.value_type)
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    if pa.types.is_list_view(t):
        return pa.list_(_normalise_field(t.value_field))
    if pa.types.is_large_list_view(t):
        return pa.large_list(_normalise_field(t.value_field))
    if pa.types.is_list(t):
        return pa.list_(_normalise_field(t.value_field))
    if pa.types.is_large_list(t):
        return pa.large_list(_normalise_field(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_normalise_field(t.value_field), t.list_size)
    if pa.types.is_map(t):
        return pa.map_(_normalise_field(t.key_field), _normalise_field(t.item_field), t.keys_sorted)
    if pa.types.is_struct(t):
        return pa.struct([_normalise_field(t.field(i)) for i in range(t.num_fields)])
    return t


def _normalise_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, normalise_type(f.type), f.nullable, f.metadata)


EXTENSION_NAME = b"ARROW:extension:name"


def declared_extension(f: pa.Field) -> str | None:
    """The extension a field declares in its metadata (DuckDB's GEOMETRY: ``geoarrow.wkb`` on a binary
    field), at any depth of a nested type, or None."""
    if f.metadata and EXTENSION_NAME in f.metadata:
        return str(f.metadata[EXTENSION_NAME].decode("utf-8", "replace"))
    t = f.type
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_map(t):
        children = [t.key_field, t.item_field]
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        children = [t.value_field]
    else:
        children = []
    return next((name for c in children if (name := declared_extension(c)) is not None), None)


def is_zone_name(tz: str) -> bool:
    """Whether ``tz`` names a zone of the IANA database (``UTC``, ``Europe/Paris``); offsets do not."""
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


def is_known_zone(tz: str) -> bool:
    """Whether a timestamp's zone is one readers know: an IANA name (in any case, as pandas takes it) or an
    offset ``+HH:MM``. Where this machine has no zone database, every name is taken (nothing to check)."""
    if _OFFSET.fullmatch(tz) or is_zone_name(tz):
        return True
    names = _zone_names()
    return not names or tz.lower() in names


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(name.lower() for name in zoneinfo.available_timezones())


_OFFSET = re.compile(r"[+-](?:[01]\d|2[0-3]):[0-5]\d")


def _unstorable(t: pa.DataType) -> str | None:
    """Why a (normalised) type cannot be stored and read back exactly, or None if it can."""
    if isinstance(t, pa.BaseExtensionType):
        return f"extension type {t} (store its storage type {t.storage_type} instead)"
    if pa.types.is_union(t):
        return "union types (Parquet cannot store them)"
    if pa.types.is_interval(t):
        return "interval types (Parquet cannot store them; use a duration or separate columns)"
    if pa.types.is_null(t):
        return "the null type (it holds no values; give the column a real type)"
    if pa.types.is_decimal(t) and not 0 <= t.scale <= t.precision:
        return "a decimal whose scale is negative or above its precision (Parquet's DECIMAL needs 0 <= scale <= precision)"
    if pa.types.is_timestamp(t) and t.tz is not None and not is_known_zone(t.tz):
        return (
            f"the time zone {t.tz!r}: no time zone database knows it (give a name such as 'Europe/Paris' "
            "or 'UTC', or an offset such as '+05:30')"
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _unstorable(t.value_type)
    if pa.types.is_map(t):
        return _unstorable(t.key_type) or _unstorable(t.item_type)
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return "structs without fields"
        return next((r for i in range(t.num_fields) if (r := _unstorable(t.field(i).type))), None)
    return None


def _names(value: Sequence[str] | str | None, what: str) -> tuple[str, ...]:
    """A column list argument: one name, a sequence of names, or None."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(c, str) for c in value):
        return tuple(value)
    raise InvalidInput(f"{what} must be a column name or a list of column names, got {value!r}")


SPEC_FORMAT = 4  # bumped when a spec gains something older readers would misread
# Specs of tables whose schema never changed are still written as format 1, so older mere reads them;
# format 2 adds renamed, dropped, widened and added columns, which an older reader would misread;
# format 3 adds ``sequence_by``, which an older reader would ignore (merging in commit order).
# format 4 adds merge engines (``first_row``), the operators max/min/bool_and/bool_or and sequence groups,
# which an older reader would misread.
EVOLVED_SPEC_FORMAT = 2
SEQUENCE_SPEC_FORMAT = 3
ENGINE_SPEC_FORMAT = 4
# format 4 adds table-wide keys on a table with a partition column outside the key, which an older reader
# would write as (partition, key) identities, leaving a moved key in two partitions.
KEY_SCOPE_SPEC_FORMAT = 4  # the same format as merge engines: a mere that reads one reads both

KEY_SCOPES = ("table", "partition")
"""``key_scope`` values: a key names one row in the whole table, or one row per partition."""

# LZ4 (Parquet's LZ4_RAW): on W1, merged reads 30% faster than zstd for files 20% bigger (decode is
# most of a local read); tables on slow links may prefer write.compression=zstd.
DEFAULT_COMPRESSION = "lz4"

PROPERTIES: dict[str, tuple[str, Any]] = {
    # key: (what it takes, validator returning the parsed value or raising ValueError)
    "write.compression": (
        "a Parquet codec: zstd, snappy, gzip, brotli, lz4 or none",
        lambda v: v if v.lower() in ("zstd", "snappy", "gzip", "brotli", "lz4", "none") else _bad(),
    ),
    "write.compression-level": ("an integer", int),
    "write.row-group-rows": ("a positive integer", lambda v: _positive(int(v))),
    "write.chunk-bytes": (
        "a positive byte size (of a streamed input written as one run)",
        lambda v: _byte_size(v, 1),
    ),
    "write.key-index": (
        "on (Bloom filters and page index on key columns, for point lookups) or off",
        lambda v: v.lower() if v.lower() in ("on", "off") else _bad(),
    ),
    "read.window-bytes": ("a positive byte size", lambda v: _byte_size(v, 1)),
    "read.whole-split-bytes": ("a byte size (0 or more)", lambda v: _byte_size(v, 0)),
    "compaction.auto": (
        "off, inline (the committing call compacts) or background (a thread of the committing process)",
        lambda v: v.lower() if v.lower() in ("off", "inline", "background") else _bad(),
    ),
    "compaction.min-files": ("an integer of at least 2", lambda v: _positive(int(v) - 1) + 1),
    "compaction.size-amplification-percent": ("a positive integer (percent)", lambda v: _positive(int(v))),
    "retention.max-age": (
        "a duration such as 7d, 12h or 30m (versions older than this expire automatically) or off",
        lambda v: v.lower() if v.strip().lower() == "off" else _duration(v),
    ),
    "retention.min-versions": (
        "a positive integer (the newest versions kept whatever their age)",
        lambda v: _positive(int(v)),
    ),
    "changes.consumer-expiration": (
        "a positive duration such as 7d or 12h (a change-feed consumer unseen that long may be dropped by "
        "expire) or off",
        lambda v: v.lower() if v.strip().lower() == "off" else _positive_duration(v),
    ),
    "changes.log": (
        "off, or on (each write of whole rows records the rows it replaces, for fast change feeds)",
        lambda v: v.lower() if v.lower() in ("off", "on") else _bad(),
    ),
    "sequence.tombstone-retention": (
        "a duration such as 7d or 12h (how long compaction keeps a deleted key's newest delete of a "
        "table with sequence_by, so that a late event with a lower sequence cannot bring it back)",
        lambda v: _duration(v),
    ),
}
"""Table properties mere reads. Other keys are kept for users, except under mere's prefixes."""

MERE_PREFIXES = ("read.", "write.", "compaction.", "retention.", "changes.", "sequence.")

# A replay of a change stream within its own retention must not bring deleted keys back: Kafka keeps a
# topic's records 7 days by default (retention.ms), so a consumer reset to the topic's start replays at
# most that far back. Tables fed from streams kept longer should raise it.
DEFAULT_TOMBSTONE_RETENTION = "7d"


def tombstone_retention(properties: Mapping[str, str]) -> dt.timedelta:
    """``sequence.tombstone-retention`` of a table (default :data:`DEFAULT_TOMBSTONE_RETENTION`)."""
    return parse_duration(properties.get("sequence.tombstone-retention", DEFAULT_TOMBSTONE_RETENTION))


# What a table created now gets unless its creator says otherwise (tables created before keep what they
# had: no property means off). Measured in bench/bench_tiny_commits.py; see docs/concepts.md.
NEW_KEYED_TABLE_PROPERTIES = {"compaction.auto": "inline"}
NEW_TABLE_PROPERTIES = {"retention.max-age": "7d", "retention.min-versions": "10"}


def default_properties(has_primary_key: bool) -> dict[str, str]:
    """The properties a new table gets by default (see :data:`NEW_TABLE_PROPERTIES`)."""
    return {**NEW_TABLE_PROPERTIES, **(NEW_KEYED_TABLE_PROPERTIES if has_primary_key else {})}


def _duration(text: str) -> Any:
    try:
        return parse_duration(text)
    except OverflowError:
        raise ValueError(text) from None


def _positive_duration(text: str) -> Any:
    value = _duration(text)
    if value <= dt.timedelta(0):
        raise ValueError(text)
    return value


def _bad() -> Any:
    raise ValueError


def _byte_size(text: str, minimum: int) -> int:
    """A byte size as options read one (``1048576``, ``64k``, ``128m``, ``1MiB``)."""
    try:
        size = parse_bytes(text, "a byte size", minimum)
    except InvalidInput:
        raise ValueError(text) from None
    if size is None:
        raise ValueError(text)
    return size


# Properties stored as the number their value reads as (``8MiB`` is kept as ``8388608``): readers take
# them as plain integers.
BYTE_PROPERTIES = ("write.chunk-bytes", "read.window-bytes", "read.whole-split-bytes")


def _positive(n: int) -> int:
    if not 1 <= n <= 2**63 - 1:  # counts reach Arrow and Parquet as 64-bit integers
        raise ValueError
    return n


def storable_text(text: str) -> bool:
    """Whether every catalog can store ``text`` as it is: no NUL (PostgreSQL's text cannot hold it) and
    no lone surrogate (UTF-8 cannot encode it)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_properties(properties: Mapping[str, str] | None) -> dict[str, str]:
    """Check property keys and values; raises InvalidInput naming what is allowed."""
    if properties is None:
        return {}
    if not isinstance(properties, Mapping):
        raise InvalidInput(f"properties must be a dict of strings, got {properties!r}")
    out: dict[str, str] = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str | int) or isinstance(value, bool):
            raise InvalidInput(f"properties must map strings to strings, got {key!r}: {value!r}")
        text = str(value)
        if not key.strip() or not key.isprintable():
            raise InvalidInput(f"a property key must be printable text, not blank, got {key!r}")
        if "\x00" in text:  # PostgreSQL's text cannot hold it
            raise InvalidInput(f"property {key!r}: a value cannot hold the NUL character, got {text!r}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no catalog, JSON or terminal can take it
            raise InvalidInput(
                f"property {key!r}: the value is not valid Unicode text, got {text!r}"
            ) from None
        if key in PROPERTIES:
            what, parse = PROPERTIES[key]
            try:
                parsed = parse(text)
            except (ValueError, TypeError):
                raise InvalidInput(f"property {key!r} must be {what}, got {text!r}") from None
            if key in BYTE_PROPERTIES:
                text = str(parsed)
        elif key.lower().startswith(MERE_PREFIXES) or key.lower() in PROPERTIES:
            # mere's own prefixes in any case (a typo there would silently leave a setting off)
            close = difflib.get_close_matches(key.lower(), PROPERTIES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidInput(
                f"unknown table property {key!r}{hint} mere reads {', '.join(sorted(PROPERTIES))}"
            )
        out[key] = text
    _check_codec_level(out)
    return out


def _check_codec_level(properties: Mapping[str, str]) -> None:
    """A compression level needs a codec that takes one (every write would fail otherwise)."""
    import pyarrow as pa

    level = properties.get("write.compression-level")
    codec = properties.get("write.compression", DEFAULT_COMPRESSION).lower()
    if level is None or codec == "none":
        if level is not None:
            raise InvalidInput("property 'write.compression-level' needs a compression codec, not none")
        return
    name = "lz4" if codec == "lz4" else codec
    if not pa.Codec.supports_compression_level(name):
        raise InvalidInput(f"codec {codec!r} takes no compression level; drop 'write.compression-level'")
    low, high = pa.Codec.minimum_compression_level(name), pa.Codec.maximum_compression_level(name)
    if not low <= int(level) <= high:
        raise InvalidInput(f"codec {codec!r} takes compression levels {low} to {high}, got {level}")


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
    field_ids: Mapping[str, int] = field(default_factory=dict)  # top-level column -> id; ids are never reused
    # Schema evolution. The largest id ever given (a dropped column's id is not given again); the
    # name -> id mapping of files written without Parquet field ids (the schema before the first change:
    # None while the schema never changed); and the values that added columns take in older rows, by id.
    last_field_id: int = 0
    legacy_field_ids: Mapping[str, int] | None = None
    defaults: Mapping[int, pa.Scalar] = field(default_factory=dict)
    # Columns whose values order a key's versions (highest wins; ties: commit order, then row order);
    # empty: commit order alone. See :func:`checked_sequence_by`.
    sequence_by: tuple[str, ...] = ()
    # ``first_row`` (see :data:`MERGE_ENGINES`), or "" for per-column merge operators.
    merge_engine: str = ""
    # Partial-column updates under sequences: group sequence column -> the columns it orders. A group's
    # columns come from the live version carrying the group with the highest group sequence, and the
    # group sequence column keeps that sequence. See :func:`checked_sequence_groups`.
    sequence_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # What a primary key identifies: one row in the whole table ("table": a row whose partition values
    # change moves its key) or one row per partition ("partition": the identity is partition values and
    # key). Specs stored before the field read as "partition". See :func:`checked_key_scope`.
    key_scope: str = "partition"

    def __post_init__(self) -> None:
        if not self.field_ids:  # specs written before field ids: number the columns in order
            object.__setattr__(self, "field_ids", {name: i + 1 for i, name in enumerate(self.schema.names)})
        highest = max(self.field_ids.values(), default=0)
        if self.last_field_id < highest:
            object.__setattr__(self, "last_field_id", highest)

    @property
    def evolved(self) -> bool:
        """Whether a column was ever added, renamed, widened or dropped (files then map by field id)."""
        return self.legacy_field_ids is not None

    def field_id(self, column: str) -> int:
        """The column's stable id: it survives renames and is never given to another column."""
        return self.field_ids[column]

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

    @property
    def unique_columns(self) -> tuple[str, ...]:
        """Columns whose values name at most one live row: the primary key where keys are table-wide
        (``key_scope`` "table"), else :attr:`identity_columns` (a key once per partition)."""
        return self.primary_key if self.key_scope == "table" else self.identity_columns

    @property
    def cross_partition(self) -> bool:
        """Whether a key is table-wide while rows of one key may sit in several partitions (``key_scope``
        "table" and a partition column outside the key): writes then move keys between partitions."""
        return self.key_scope == "table" and any(c not in self.primary_key for c in self.partition_by)

    def operator(self, column: str) -> MergeOperator:
        """How ``column`` merges a key's versions (``first`` for every value column of a ``first_row``
        table; group columns merge by their group, see :attr:`sequence_groups`)."""
        if self.merge_engine == "first_row" and column not in self.identity_columns:
            return MergeOperator("first")
        return self.merge_operators.get(column, MergeOperator())

    @property
    def operators(self) -> dict[str, MergeOperator]:
        """The merge operator of every value column that does not merge ``last``."""
        if self.merge_engine == "first_row":
            return {c: MergeOperator("first") for c in self.schema.names if c not in self.identity_columns}
        return dict(self.merge_operators)

    @property
    def all_last(self) -> bool:
        """Whether a key's newest version alone is its merged row (every operator ``last``, no engine,
        no sequence group)."""
        return (
            not self.merge_engine
            and not self.sequence_groups
            and all(op.name == "last" for op in self.merge_operators.values())
        )

    def newest_wins(self, columns: Sequence[str]) -> bool:
        """Whether these columns merge newest-wins: each takes its value from the key's newest version.
        Never under sequence groups: there a delete also removes versions of its sequence committed after
        it, which the newest-wins merge (ties to the later commit) would keep."""
        if self.merge_engine or self.sequence_groups:
            return False
        return all(self.operator(c).name == "last" for c in columns)

    @property
    def delete_refusal(self) -> str | None:
        """Why this table refuses deletes (``first_row``, or ``sequence_by`` with an order-free operator),
        or None."""
        if self.merge_engine == "first_row":
            return (
                "a 'first_row' table keeps each key's first version and ignores later ones, so a delete "
                "would either be ignored or let a later (ignored) version come back"
            )
        free = sorted(c for c, op in self.merge_operators.items() if op.name in ORDER_FREE_OPERATORS)
        if self.sequence_by and free:
            return (
                f"with sequence_by, the order-free operators of {free} fold a key's versions into one "
                "value that no longer knows the sequence of each version, so a delete arriving after the "
                "fold could not take out exactly the versions below it"
            )
        return None

    @property
    def reduce_options(self) -> dict[str, Any]:
        """How :func:`mere.kernels.reduce_versions` merges this table's versions (beyond its operators)."""
        return {
            "groups": dict(self.sequence_groups),
            "sequence": self.sequence_by[0] if self.sequence_groups else None,
            "puts_reset": not self.sequence_by or self.merge_engine == "first_row",
        }

    @property
    def grouped(self) -> dict[str, str]:
        """Column -> its group's sequence column, for the columns of sequence groups (the group sequence
        columns included)."""
        out = {}
        for seq, columns in self.sequence_groups.items():
            out[seq] = seq
            out.update({c: seq for c in columns})
        return out

    @staticmethod
    def create(
        schema: pa.Schema,
        primary_key: Sequence[str] | str | None = None,
        partition_by: Sequence[str] | str | None = None,
        buckets: int | None = None,
        merge_operators: Mapping[str, Any] | str | None = None,
        cdc_column: str | None = None,
        properties: Mapping[str, str] | None = None,
        sequence_by: Sequence[str] | str | None = None,
        sequence_groups: Mapping[str, Sequence[str]] | None = None,
        key_scope: str | None = None,
    ) -> TableSpec:
        """Validate user arguments and build a spec; raises :class:`InvalidInput` on any problem."""
        if not isinstance(schema, pa.Schema):
            try:
                schema = pa.schema(schema)
            except (TypeError, ValueError, pa.ArrowInvalid) as e:
                raise SchemaMismatch(f"schema must be a pyarrow.Schema, got {type(schema).__name__}") from e
        pk = _names(primary_key, "primary_key")
        parts = _names(partition_by, "partition_by")
        # The change column is not stored: a change feed's `_change` may be one (mere -> Spark -> mere).
        if cdc_column is not None and (
            not isinstance(cdc_column, str) or not cdc_column or cdc_column == OP_COLUMN
        ):
            raise InvalidInput(f"cdc_column must be a column name (not {OP_COLUMN!r}), got {cdc_column!r}")
        engine = ""
        if isinstance(merge_operators, str):
            engine = merge_operators.strip().lower()
            if engine not in MERGE_ENGINES:
                raise InvalidInput(
                    f"merge_operators must be a dict of column name -> operator or a merge engine "
                    f"({', '.join(MERGE_ENGINES)}), got {merge_operators!r}"
                )
            merge_operators = None
        if merge_operators is not None and not isinstance(merge_operators, Mapping):
            raise InvalidInput(
                f"merge_operators must be a dict of column name -> operator, got {merge_operators!r}"
            )
        props = validate_properties(properties)
        if cdc_column is not None and cdc_column in schema.names:
            # The change column belongs to incoming batches, not to the stored rows.
            schema = schema.remove(schema.get_field_index(cdc_column))
        names = schema.names
        if len(set(names)) != len(names):
            raise SchemaMismatch(f"duplicate column names in schema: {names}")
        if len({n.lower() for n in names}) != len(names):
            raise SchemaMismatch(
                f"column names must differ in more than case (Spark and DuckDB resolve names without it): {names}"
            )
        if not names:
            raise SchemaMismatch("schema has no columns")
        reserved = [n for n in names if n in RESERVED_COLUMNS]
        if reserved:
            raise SchemaMismatch(
                f"column name(s) {reserved} are reserved (mere's operation column and the change feed's "
                f"{list(FEED_COLUMNS)})"
            )
        if any(not n for n in names):
            raise SchemaMismatch("column names must not be empty")
        unstorable = [n for n in names if not storable_text(n)]
        if unstorable:
            raise SchemaMismatch(
                f"column names must be text without NUL that UTF-8 can encode (no lone surrogate): {unstorable}"
            )
        for group, label in ((pk, "primary key"), (parts, "partition")):
            if cdc_column is not None and cdc_column in group:
                raise InvalidInput(
                    f"cdc_column {cdc_column!r} is a {label} column: the change column of incoming batches "
                    "is not stored, so it cannot be one; name the column that holds each row's operation"
                )
            if len(set(group)) != len(group):
                raise InvalidInput(f"duplicate {label} columns: {list(group)}")
            for c in group:
                if c not in names:
                    raise SchemaMismatch(f"{label} column {c!r} is not in the schema {names}")
        fields = []
        for f in schema:
            t = normalise_type(f.type)
            reason = _unstorable(t)
            if reason is not None:
                raise UnsupportedType(f"column {f.name!r} has type {f.type}: mere cannot store {reason}")
            extension = declared_extension(pa.field(f.name, t, metadata=f.metadata))
            if extension is not None:
                # mere cannot check that values (an UPDATE's text, say) are what the extension's readers
                # take: stored bytes they reject would make the table unreadable to them.
                raise UnsupportedType(
                    f"column {f.name!r} declares the extension type {extension!r} (field metadata "
                    f"{EXTENSION_NAME.decode()}): mere cannot store extension types; store the storage type "
                    f"{f.type} without that metadata (in DuckDB: cast the column, e.g. CAST(g AS BLOB))"
                )
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
                raise UnsupportedType(
                    f"partition column {c!r} has type {t}; use integers, strings, dates or booleans"
                )
        if pk:
            n = 8 if buckets is None else buckets
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_BUCKETS:
                raise InvalidInput(f"buckets must be an integer from 1 to {MAX_BUCKETS:,}, got {buckets!r}")
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
                raise InvalidInput(
                    f"column {c!r} is a key or partition column and cannot have a merge operator"
                )
            t = schema.field(c).type
            if op.name == "sum" and not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                raise InvalidInput(f"merge operator 'sum' needs a numeric column; {c!r} is {t}")
            if op.name == "concat" and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise InvalidInput(f"merge operator 'concat' needs a string column; {c!r} is {t}")
            if op.name in ("max", "min") and not is_orderable(t):
                raise InvalidInput(
                    f"merge operator {op.name!r} needs an orderable column (numbers, decimals, strings, "
                    f"binaries, dates, timestamps or booleans); {c!r} is {t}"
                )
            if op.name in ("bool_and", "bool_or") and not pa.types.is_boolean(t):
                raise InvalidInput(f"merge operator {op.name!r} needs a boolean column; {c!r} is {t}")
            if op.name != "last":
                ops[c] = op
        if cdc_column is not None and not pk:
            raise InvalidInput("cdc_column needs a primary key")
        if engine and not pk:
            raise InvalidInput(
                f"merge engine {engine!r} orders the versions of a key and needs a primary key"
            )
        spec = TableSpec(schema, pk, parts, n, ops, cdc_column, props, merge_engine=engine)
        if sequence_by is not None:
            spec = replace(spec, sequence_by=checked_sequence_by(spec, sequence_by, groups=sequence_groups))
        if sequence_groups is not None:
            spec = replace(spec, sequence_groups=checked_sequence_groups(spec, sequence_groups))
        return replace(spec, key_scope=checked_key_scope(spec, key_scope))

    def differences(self, other: TableSpec, properties: bool = True) -> list[str]:
        """What differs between two specs, in words (empty when they describe the same table)."""
        out = []

        def columns(schema: pa.Schema) -> list[str]:
            return [f"{f.name} {f.type}{'' if f.nullable else ' not null'}" for f in schema]

        mine, theirs = columns(self.schema), columns(other.schema)
        if mine != theirs:
            out.append(f"schema ({', '.join(mine)}) vs ({', '.join(theirs)})")
        for label in (
            "primary_key",
            "partition_by",
            "buckets",
            "cdc_column",
            "sequence_by",
            "merge_engine",
            "sequence_groups",
            "key_scope",
        ):
            a, b = getattr(self, label), getattr(other, label)
            if a != b:
                out.append(f"{label} {a!r} vs {b!r}")
        ops = {c: (o.name, o.separator) for c, o in self.merge_operators.items()}
        other_ops = {c: (o.name, o.separator) for c, o in other.merge_operators.items()}
        if ops != other_ops:
            out.append(f"merge_operators {ops} vs {other_ops}")
        if dict(self.sequence_groups) != dict(other.sequence_groups):
            out.append(f"sequence_groups {dict(self.sequence_groups)} vs {dict(other.sequence_groups)}")
        if properties and dict(self.properties) != dict(other.properties):
            out.append(f"properties {dict(self.properties)} vs {dict(other.properties)}")
        return out

    def to_json(self) -> str:
        evolution: dict[str, Any] = {}
        if self.evolved:
            assert self.legacy_field_ids is not None
            evolution = {
                "last_field_id": self.last_field_id,
                "legacy_field_ids": dict(self.legacy_field_ids),
                "defaults": _defaults_json(self.defaults),
            }
        if self.sequence_by:
            # Only specs that order by sequence carry the key (and format 3): older mere refuses them
            # rather than read them in commit order.
            evolution["sequence_by"] = list(self.sequence_by)
        if self.merge_engine:
            evolution["merge_engine"] = self.merge_engine
        if self.sequence_groups:
            evolution["sequence_groups"] = {g: list(cs) for g, cs in self.sequence_groups.items()}
        fmt = (
            ENGINE_SPEC_FORMAT
            if self.uses_engines
            else SEQUENCE_SPEC_FORMAT
            if self.sequence_by
            else EVOLVED_SPEC_FORMAT
            if self.evolved
            else 1
        )
        if self.key_scope != "partition":
            # Written only when not the meaning of specs stored before the field; the format changes only
            # where older mere would misread it (a partition column outside the key).
            evolution["key_scope"] = self.key_scope
            if self.cross_partition:
                fmt = max(fmt, KEY_SCOPE_SPEC_FORMAT)
        return json.dumps(
            {
                **evolution,
                "format": fmt,
                "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
                "primary_key": list(self.primary_key),
                "partition_by": list(self.partition_by),
                "buckets": self.buckets,
                "merge_operators": {c: op.to_json() for c, op in self.merge_operators.items()},
                "cdc_column": self.cdc_column,
                "properties": dict(self.properties),
                "field_ids": dict(self.field_ids),
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str, identifier: str = "table") -> TableSpec:
        d = json.loads(text)
        if int(d.get("format", 1)) > SPEC_FORMAT:
            raise CatalogError(
                f"{identifier} was written in spec format {d['format']}, newer than this mere "
                f"reads ({SPEC_FORMAT}): upgrade mere to read it"
            )
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
        return TableSpec(
            schema=schema,
            primary_key=tuple(d["primary_key"]),
            partition_by=tuple(d["partition_by"]),
            buckets=int(d["buckets"]),
            merge_operators={
                c: MergeOperator(o["op"], o["separator"]) for c, o in d["merge_operators"].items()
            },
            cdc_column=d["cdc_column"],
            properties=dict(d["properties"]),
            field_ids={k: int(v) for k, v in d.get("field_ids", {}).items()},
            last_field_id=int(d.get("last_field_id", 0)),
            legacy_field_ids=(
                None
                if d.get("legacy_field_ids") is None
                else {k: int(v) for k, v in d["legacy_field_ids"].items()}
            ),
            defaults=_defaults_from_json(d.get("defaults")),
            sequence_by=tuple(d.get("sequence_by") or ()),
            merge_engine=str(d.get("merge_engine") or ""),
            sequence_groups={g: tuple(cs) for g, cs in (d.get("sequence_groups") or {}).items()},
            key_scope=str(d.get("key_scope") or "partition"),
        )

    @property
    def uses_engines(self) -> bool:
        """Whether the spec needs format 4 to be read right: a merge engine, an order-free operator or a
        sequence group."""
        return bool(
            self.merge_engine
            or self.sequence_groups
            or any(op.name in ORDER_FREE_OPERATORS for op in self.merge_operators.values())
        )


def checked_sequence_by(
    spec: TableSpec, value: Any, table: str = "table", groups: Mapping[str, Any] | None = None
) -> tuple[str, ...]:
    """``value`` (a column name, a list of names, or None / empty for none) as the ``sequence_by`` of a
    table of layout ``spec``, checked (``groups``: the sequence groups the table is about to get, else
    its own).

    Raises:
        InvalidInput: not a name or list of names, a repeated name, a table without primary key, a key or
            partition column, a table whose merge operators cannot follow sequences (``sum`` and
            ``concat``; ``last_non_null`` outside a sequence group of its own), or none for a table with
            sequence groups.
        SchemaMismatch: a column the table lacks.
        UnsupportedType: a column of a type without an exact total order (floats, booleans, binaries,
            nested types).
    """
    columns = _names(value, "sequence_by")
    if groups is None:
        groups = spec.sequence_groups
    elif not isinstance(groups, Mapping):
        checked_sequence_groups(spec, groups, table)  # refuses it, naming the shape it takes
    if not columns:
        if groups:
            raise InvalidInput(
                f"{table}: sequence groups order partial rows under sequence_by; a table with sequence "
                "groups keeps its sequence_by"
            )
        return ()
    if len(set(columns)) != len(columns):
        raise InvalidInput(f"{table}: duplicate sequence_by columns: {list(columns)}")
    if not spec.primary_key:
        raise InvalidInput(f"{table}: sequence_by orders the versions of a key and needs a primary key")
    for c in columns:
        if c not in spec.schema.names:
            hint = " (the change column is not stored)" if c == spec.cdc_column else ""
            raise SchemaMismatch(
                f"{table}: sequence_by column {c!r} is not a column of the table{hint}; it has "
                f"{spec.schema.names}"
            )
        if c in spec.identity_columns:
            role = "primary-key" if c in spec.primary_key else "partition"
            raise InvalidInput(
                f"{table}: sequence_by column {c!r} is a {role} column; a sequence orders the versions "
                "of one key, so it must be a value column"
            )
        t = spec.schema.field(c).type
        if not is_sequence_type(t):
            raise UnsupportedType(
                f"{table}: sequence_by column {c!r} has type {t}; sequences must be integers, decimals, "
                "timestamps, dates or strings"
            )
    alone = {
        cs[0]
        for cs in (_group_columns(v) for v in (groups or {}).values())
        if cs is not None and len(cs) == 1
    }
    for c, op in spec.merge_operators.items():
        if op.name in ("sum", "concat"):
            raise InvalidInput(
                f"{table}: merge operator {op.name!r} on column {c!r} cannot combine with sequence_by: "
                "a stream replays and duplicates events, and a replayed event would be added twice "
                f"(sequences make the newest version win, not each event count once)"
            )
        if op.name == "last_non_null" and c not in alone:
            raise InvalidInput(
                f"{table}: merge operator 'last_non_null' on column {c!r} cannot combine with sequence_by "
                "unless the column is alone in a sequence group (sequence_groups={'<c>_seq': "
                f"[{c!r}]}}): mere keeps one row per key once versions are folded (in a write, in "
                "compaction), so an event arriving late with a lower sequence could not tell which "
                "non-null value is newer (that needs a sequence per column)"
            )
    return columns


def _group_columns(value: Any) -> tuple[str, ...] | None:
    try:
        return _names(value, "a sequence group")
    except InvalidInput:
        return None


def checked_sequence_groups(spec: TableSpec, value: Any, table: str = "table") -> dict[str, tuple[str, ...]]:
    """``value`` (``{group sequence column: [columns]}``) as the ``sequence_groups`` of a table of layout
    ``spec`` (with its ``sequence_by`` set), checked.

    Raises:
        InvalidInput: not such a mapping, a table without ``sequence_by``, a group naming a key,
            partition or ``sequence_by`` column, a column in two groups (or a group sequence column in a
            group), an empty group, a group column whose operator is not ``last`` (or ``last_non_null``
            alone in its group), or a ``first_row`` table.
        SchemaMismatch: a column the table lacks.
        UnsupportedType: a group sequence column of a type without an exact total order.
    """
    if value is None or (isinstance(value, Mapping) and not value):
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInput(
            f"{table}: sequence_groups must be a dict of group sequence column -> list of columns, got "
            f"{value!r}"
        )
    if not spec.sequence_by:
        raise InvalidInput(
            f"{table}: sequence_groups order partial rows of a table with sequence_by; give sequence_by "
            "(the sequence deletes and the columns outside groups follow) too"
        )
    if spec.merge_engine:
        raise InvalidInput(
            f"{table}: a {spec.merge_engine!r} table keeps whole versions; sequence_groups do not apply"
        )
    if len(spec.sequence_by) != 1:
        raise InvalidInput(
            f"{table}: sequence_groups need a sequence_by of one column (a delete at sequence d takes out "
            f"the group values whose group sequence is below d), not {list(spec.sequence_by)}"
        )
    row_type = spec.schema.field(spec.sequence_by[0]).type
    out: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for seq, raw in value.items():
        columns = _group_columns(raw)
        if columns is None or not columns:
            raise InvalidInput(
                f"{table}: sequence group {seq!r} must list the columns it orders, got {raw!r}"
            )
        for c in (seq, *columns):
            if c not in spec.schema.names:
                raise SchemaMismatch(
                    f"{table}: sequence group {seq!r} names {c!r}, not a column of the table; it has "
                    f"{spec.schema.names}"
                )
            if c in spec.identity_columns or c in spec.sequence_by:
                role = (
                    "primary-key"
                    if c in spec.primary_key
                    else "partition"
                    if c in spec.partition_by
                    else "sequence_by"
                )
                raise InvalidInput(
                    f"{table}: sequence group {seq!r} names the {role} column {c!r}; groups order value "
                    "columns (deletes and the columns outside groups follow sequence_by)"
                )
            if c in owner:
                raise InvalidInput(
                    f"{table}: column {c!r} is in two sequence groups ({owner[c]!r} and {seq!r}); a column "
                    "takes its value from one group's newest version"
                )
            owner[c] = seq
        t = spec.schema.field(seq).type
        if t != row_type:
            raise UnsupportedType(
                f"{table}: group sequence column {seq!r} has type {t}; group sequences share the domain of "
                f"sequence_by {spec.sequence_by[0]!r} (a delete compares with both), so give it type {row_type}"
            )
        if seq in spec.merge_operators:
            raise InvalidInput(
                f"{table}: group sequence column {seq!r} keeps the winning sequence; give it no merge operator"
            )
        for c in columns:
            op = spec.operator(c).name
            if op == "last" or (op == "last_non_null" and len(columns) == 1):
                continue
            raise InvalidInput(
                f"{table}: column {c!r} of sequence group {seq!r} has merge operator {op!r}; a group takes "
                "its columns from one version ('last', or 'last_non_null' for a column alone in its group, "
                "where NULL means not carried)"
            )
        out[seq] = columns
    return out


def checked_key_scope(spec: TableSpec, value: Any, table: str = "table") -> str:
    """``value`` ("table", "partition" or None for the default) as the ``key_scope`` of a table of layout
    ``spec``, checked.

    The default is "table" (as Paimon's cross-partition upsert) for a keyed table, but "partition" where a
    partition column is outside the key and versions do not merge newest-wins (a merge operator other than
    ``last``, a merge engine or sequence groups): folding a moved key's
    columns needs its old row, and table-wide keys take whole rows only. A table without key has none.

    Raises:
        InvalidInput: a value other than those, any value for a table without primary key, or "table" with
            a merge operator other than ``last`` on a table whose keys could move between partitions.
    """
    moving = any(c not in spec.primary_key for c in spec.partition_by)
    if value is None:
        if not spec.primary_key:
            return "partition"
        return "partition" if moving and not spec.all_last else "table"
    if not isinstance(value, str) or value not in KEY_SCOPES:
        raise InvalidInput(f"{table}: key_scope must be 'table' or 'partition', got {value!r}")
    if not spec.primary_key:
        raise InvalidInput(
            f"{table}: key_scope says what a primary key identifies, and the table has none; drop key_scope "
            "or give primary_key"
        )
    if value == "table" and moving and not spec.all_last:
        ops = {c: o.name for c, o in spec.merge_operators.items() if o.name != "last"}
        merging = (
            f"the merge engine {spec.merge_engine!r}"
            if spec.merge_engine
            else f"merge operators {ops}"
            if ops
            else f"sequence groups {sorted(spec.sequence_groups)}"
        )
        raise InvalidInput(
            f"{table}: key_scope='table' cannot combine with {merging}: a key that moves to "
            "another partition would have to fold its new row into its old one, which lives elsewhere; "
            "use key_scope='partition', or make the partition columns part of the key"
        )
    return value


FIELD_ID_KEY = b"PARQUET:field_id"  # where Parquet (and pyarrow) keep a column's field id
# A file's newest known field id: a column with a larger id was added after the file was written, so
# the file's rows read that column's default (a column the file lacks but knew was left out on purpose).
LAST_FIELD_ID_KEY = b"mere.last_field_id"


def with_field_ids(table: pa.Table, spec: TableSpec) -> pa.Table:
    """``table`` with each table column's field id in its Arrow field metadata, so Parquet files written
    from it record the ids (readers map columns by id after renames and drops). Zero-copy."""
    fields = []
    for f in table.schema:
        fid = spec.field_ids.get(f.name)
        if fid is not None:
            f = f.with_metadata({**(f.metadata or {}), FIELD_ID_KEY: str(fid).encode()})
        fields.append(f)
    metadata = {**(table.schema.metadata or {}), LAST_FIELD_ID_KEY: str(spec.last_field_id).encode()}
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, metadata=metadata))


def _defaults_json(defaults: Mapping[int, pa.Scalar]) -> str | None:
    """Default values as one Arrow IPC row (any type survives), base64; columns named by field id."""
    if not defaults:
        return None
    ids = sorted(defaults)
    row = pa.table({str(i): pa.array([defaults[i].as_py()], type=defaults[i].type) for i in ids})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, row.schema) as writer:
        writer.write_table(row)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def _defaults_from_json(text: str | None) -> dict[int, pa.Scalar]:
    if not text:
        return {}
    row = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text))).read_all()
    return {int(name): row.column(name)[0] for name in row.column_names}
