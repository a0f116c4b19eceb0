"""PySpark: read and write mere tables as the ``mere`` data source (Python Data Source API, PySpark >= 4.1).

Reading::

    df = (spark.read.format("mere")
          .option("warehouse", "/data/wh")                 # or env MERE_WAREHOUSE
          .option("catalog", "postgresql://u@h/db")        # optional (default: SQLite inside the warehouse)
          .load("sales.orders"))                           # or .option("table", "sales.orders").load()

Splits (range partition x bucket) become Spark input partitions by bytes, as Spark cuts its own files:
small splits share a task, big ones are divided into key-range windows (options ``max_partition_bytes``,
``open_cost_bytes``, ``min_partitions``). The merge runs in the executors; each task streams merged Arrow
record batches cast exactly to the declared Spark schema. :func:`read_table` also hands the splits that
need no merge (compacted ones) to Spark's own Parquet reader. Read options:
``version`` / ``versionAsOf``, ``as_of`` / ``timestampAsOf`` (ISO timestamp or epoch seconds; one without
a zone is in the session time zone, ``spark.sql.session.timeZone``, as Spark reads its own), ``filter``
(a mere filter such as ``"day = '2026-11-21' and order_id in (1, 2)"``: pruned and evaluated inside the
scan, with merge-on-read semantics), ``columns`` (comma-separated projection) and ``storage.<key>`` for
storage options. A user-given ``.schema(...)`` with a subset of the columns also projects.

Spark filters: Spark <= 4.3 caches the planned read of a Python data source on the relation, so a query
reusing a DataFrame or temp view without a pushable filter runs with the reader (and pruned partitions)
planned for an earlier query's filters. No reader can tell the two apart (the read function and the
partitions Spark ships are byte-identical), so any pruning derived from ``pushFilters`` can return wrong
rows there. The default reader therefore does not implement ``pushFilters``: every Spark filter runs in
Spark after the merge, and pruning comes from the ``filter`` option, which belongs to the DataFrame's
definition and so holds for every query on it. ``.option("pushdown", "true")`` enables ``pushFilters``
for key and partition columns on Spark versions whose planned read is scoped to one scan (>= 5.0), and
is refused with an explanation on older ones.

Writing (``mode("append")`` or ``mode("overwrite")``)::

    df.write.format("mere").mode("append").option("warehouse", wh).save("sales.orders")      # upsert / append
    df.write.format("mere").mode("append").option("operation", "delete").save("sales.orders")
    df.write.format("mere").mode("overwrite").option("partition", '{"day": "2026-11-21"}').save("sales.orders")

Each task buffers Spark's Arrow batches and stages files with :meth:`mere.Table.stage` (bucketed with
Spark's ``pmod(hash(key), N)``, sorted, de-duplicated); the driver commits all tasks' files in one catalog
transaction. A failed job leaves the table unchanged; files orphaned by killed tasks are never referenced
and :meth:`mere.Table.cleanup` removes them. Rows of a CDC DataFrame (with the table's change column) are
applied in order within a Spark partition; changes to one key must sit in one partition in order.
Write options: ``operation`` (upsert, append, delete, overwrite), ``partition`` (JSON object: overwrite
only that partition), ``partitionOverwriteMode`` (``static`` or ``dynamic``; default: the session's
``spark.sql.sources.partitionOverwriteMode``, ``static`` unless set: in dynamic mode an overwrite replaces
only the partitions the DataFrame has rows in, as Delta and Iceberg do), ``idempotency_key`` (a rerun with the same key is not applied twice), ``flush_rows``
(rows a task buffers before it writes files, default 250,000), and to create
a missing table: ``primary_key``, ``partition_by`` (comma-separated), ``buckets``, ``cdc_column``,
``merge_operators`` (JSON object), or ``create`` = ``true`` for a table without key. Without one of
them a missing table is :class:`~mere.errors.NoSuchTable` (a typo never creates a table); given for an
existing table they must describe it. ``.partitionBy(...)`` names ``partition_by`` once :func:`register`
(or :func:`local_session`) installed :func:`install_partition_hook`; without it Spark itself refuses it.
Unknown option names are refused with a suggestion.

Streaming: ``df.writeStream.format("mere").option("checkpointLocation", ...).start("sales.orders")``
upserts each micro-batch in one commit whose idempotency key is the query id (stable across restarts from
the same checkpoint) plus the batch id, so a replayed batch is applied once.

Streaming reads: ``spark.readStream.format("mere").option("readChangeFeed", "true").load("sales.orders")``
streams the table's change feed, one version range per micro-batch (options ``startingVersion``,
``maxVersionsPerTrigger``); see :mod:`mere.integrations.spark_streaming`.

Compaction: ``compact(spark, "sales.orders", warehouse=...)`` folds each split's files in its own Spark task
and commits once; reads of a compacted table cost Spark much less (fewer rows and files to decode).

MERGE: ``merge(spark, source_df, "sales.orders", warehouse=...)`` returns a builder with the WHEN clauses of
:meth:`mere.Table.merge`; ``execute()`` repartitions the source by the table's bucket of the key, each task
merges its rows against one pinned version and stages files, and the driver commits once (``WHEN NOT
MATCHED BY SOURCE`` needs the local ``Table.merge``).

Spark SQL: ``CREATE TEMPORARY VIEW orders USING mere OPTIONS (table 'sales.orders', warehouse '...')`` or
``df.createOrReplaceTempView("orders")``; Spark cannot query a Python data source by path.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import functools
import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import mere
from mere import expr as E
from mere.concurrency import positive_int
from mere.errors import (
    InvalidInput,
    MereError,
    NoSuchNamespace,
    NoSuchTable,
    NotInstalled,
    SchemaChanged,
    SchemaMismatch,
)
from mere.metadata import CommitResult, FileEntry
from mere.read.reader import stored_rows_are_merged
from mere.spec import TableSpec
from mere.table.compaction import CompactionTask
from mere.table.evolve import can_widen, same_columns
from mere.table.merge import Merge, MergeMetrics, MergePlan, StagedMerge
from mere.table.scan import OPEN_COST_BYTES, TASK_BYTES, ScanTask, group_tasks, read_tasks
from mere.table.table import StagedWrite, Table
from mere.write.cast import relax_nested

_INSTALL_HINT = "pip install 'mere[spark]' (PySpark >= 4.1 and a Java 17+ runtime)"

try:
    import pyspark
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        DataType,
        IntegerType,
        LongType,
        MapType,
        ShortType,
        StructField,
        StructType,
    )
except ImportError as _e:  # pragma: no cover - exercised only without pyspark
    raise NotInstalled(f"mere's Spark integration needs PySpark >= 4.1: {_INSTALL_HINT}") from _e


def _version_tuple(text: str) -> tuple[int, int]:
    parts = [*text.split("."), "0", "0"][:2]
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


SPARK_VERSION = _version_tuple(pyspark.__version__)
if SPARK_VERSION < (4, 1):  # pragma: no cover
    raise NotInstalled(
        f"mere's Spark integration needs PySpark >= 4.1, found {pyspark.__version__}: {_INSTALL_HINT}"
    )

SCAN_SCOPED_READS = SPARK_VERSION >= (5, 0)
"""Whether Spark plans a Python data source read per scan (so pushed filters cannot leak into other queries)."""

ENV_WAREHOUSE = "MERE_WAREHOUSE"
ENV_CATALOG = "MERE_CATALOG"
FLUSH_ROWS = (
    250_000  # rows a write task buffers before staging files (one chunk stages while the next arrives)
)
FLUSH_BYTES = 256 << 20
STREAM_QUERY_ID_PROPERTY = (
    "sql.streaming.queryId"  # Spark's local property: the query id kept in the checkpoint
)
# Spark hands every SQL conf the session set to its tasks as local properties; the Python planner that
# runs DataSource.writer() sees none of them, so write tasks read this one and report it to commit().
OVERWRITE_MODE_CONF = "spark.sql.sources.partitionOverwriteMode"
OVERWRITE_MODES = ("static", "dynamic")
WRITE_OPERATIONS = ("upsert", "append", "delete", "overwrite")

__all__ = [
    "MereCommitMessage",
    "MereDataSource",
    "MereReader",
    "MereStreamWriter",
    "MereWriter",
    "PartitionSizing",
    "SparkMerge",
    "SparkMergeExplain",
    "SplitPartition",
    "TableRef",
    "check_workers",
    "compact",
    "install_partition_hook",
    "merge",
    "native_type",
    "read_table",
    "register",
    "spark_filter",
    "spark_schema",
]


# ---------------------------------------------------------------------------------------------
# Options and table access


def _options(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


LOCATION_OPTIONS = ("warehouse", "catalog", "table", "path")
READ_OPTIONS = (
    "version",
    "versionasof",
    "as_of",
    "timestampasof",
    "tag",
    "filter",
    "columns",
    "pushdown",
    "merged_only",
    "max_partition_bytes",
    "open_cost_bytes",
    "min_partitions",
)
STREAM_READ_OPTIONS = ("readchangefeed", "startingversion", "maxversionspertrigger")  # spark_streaming
# "partitionby": what DataFrameWriter.partitionBy(...) passes through the hook (see install_partition_hook)
CREATE_OPTIONS = (
    "primary_key",
    "partition_by",
    "partitionby",
    "buckets",
    "cdc_column",
    "merge_operators",
    "create",
)
WRITE_OPTIONS = (
    "operation",
    "partition",
    "idempotency_key",
    "flush_rows",
    "query_id",
    "mergeschema",
    "partitionoverwritemode",
    *CREATE_OPTIONS,
)
SPARK_OPTIONS = ("checkpointlocation", "paths")  # set by Spark itself for some reads and streams


def check_options(options: Mapping[str, str]) -> None:
    """Refuse option names mere does not read (a typo would otherwise be ignored). Read and write options
    are both accepted either way: one temporary view's options serve its SELECTs and INSERTs."""
    allowed = {*LOCATION_OPTIONS, *SPARK_OPTIONS, *READ_OPTIONS, *STREAM_READ_OPTIONS, *WRITE_OPTIONS}
    for key in _options(options):
        if key in allowed or key.startswith("storage."):
            continue
        close = difflib.get_close_matches(key, sorted(allowed), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidInput(
            f"unknown option {key!r} for the mere data source{hint} It reads "
            f"{', '.join(sorted(allowed - set(SPARK_OPTIONS)))} and storage.<key>."
        )


@dataclass(frozen=True)
class TableRef:
    """Where a table lives; picklable, so workers can open it themselves."""

    name: str
    warehouse: str
    catalog: str | None = field(default=None, repr=False)  # a URL may hold a password
    storage_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold secrets

    @staticmethod
    def from_options(options: Mapping[str, str]) -> TableRef:
        opts = _options(options)
        name = opts.get("table") or opts.get("path")
        if not name:
            raise InvalidInput(
                'give the table name: .load("ns.table") / .save("ns.table") or .option("table", ...)'
            )
        warehouse = opts.get("warehouse") or os.environ.get(ENV_WAREHOUSE)
        if not warehouse:
            raise InvalidInput(
                f"{name}: give .option('warehouse', URI) or set the environment variable {ENV_WAREHOUSE}"
            )
        catalog = opts.get("catalog") or os.environ.get(ENV_CATALOG) or None
        storage = tuple(
            sorted((k[len("storage.") :], v) for k, v in opts.items() if k.startswith("storage."))
        )
        return TableRef(name, warehouse, catalog, storage)

    def connect(self) -> mere.Catalog:
        return _catalog(self.warehouse, self.catalog, self.storage_options)

    def open(self) -> Table:
        return self.connect().table(self.name)


_catalogs: dict[tuple[Any, ...], mere.Catalog] = {}
_cache_lock = threading.Lock()


def _catalog(warehouse: str, catalog: str | None, storage: tuple[tuple[str, str], ...]) -> mere.Catalog:
    """One catalog per process and location: Spark reuses Python workers across tasks."""
    key = (warehouse, catalog, storage)
    with _cache_lock:
        cat = _catalogs.get(key)
        if cat is None:
            cat = _catalogs[key] = mere.connect(warehouse, catalog=catalog, storage_options=dict(storage))
        return cat


def local_session(app_name: str, driver_memory: str = "1g", shuffle_partitions: int = 2) -> Any:
    """A local[2] SparkSession for jobs, tests and benchmarks on one machine (UTC, quiet, no UI)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    install_partition_hook()
    return session


def _split_list(value: str | None) -> list[str] | None:
    if value is None or not value.strip():
        return None
    return [c.strip() for c in value.split(",") if c.strip()]


def _int_option(name: str, value: str | None) -> int | None:
    return positive_int(value, f"option {name!r}")


def _bool_option(name: str, value: str | None, default: bool = False) -> bool:
    text = (value or "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise InvalidInput(f"option {name!r} must be true or false, got {value!r}")
    return text == "true"


def _json_object(name: str, value: str | None) -> dict[str, Any] | None:
    if value is None or not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"option {name!r} must be a JSON object, got {value!r}") from e
    if not isinstance(parsed, dict):
        raise InvalidInput(f"option {name!r} must be a JSON object, got {value!r}")
    return parsed


# ---------------------------------------------------------------------------------------------
# Types


def _spark_type(t: pa.DataType) -> DataType:
    if pa.types.is_uint8(t):
        return ShortType()
    if pa.types.is_uint16(t):
        return IntegerType()
    if pa.types.is_uint32(t) or pa.types.is_uint64(t):
        return LongType()  # uint64 values above 2**63 - 1 are refused on read (see _conform_batch)
    if pa.types.is_dictionary(t):
        return _spark_type(t.value_type)
    if pa.types.is_decimal(t) and t.precision > 38:
        raise InvalidInput(f"Arrow type {t} has no Spark equivalent (Spark's decimals hold 38 digits)")
    # Nested types map their children the same way (a list of uint32 is an array of bigint).
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ArrayType(_spark_type(t.value_type), containsNull=t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(
            _spark_type(t.key_type), _spark_type(t.item_type), valueContainsNull=t.item_field.nullable
        )
    if pa.types.is_struct(t):
        return StructType([StructField(f.name, _spark_type(f.type), nullable=f.nullable) for f in t])
    try:
        return from_arrow_type(t, prefer_timestamp_ntz=True)
    except (TypeError, NotImplementedError, ValueError) as e:
        raise InvalidInput(f"Arrow type {t} has no Spark equivalent") from e
    except Exception as e:  # PySparkTypeError and friends
        raise InvalidInput(f"Arrow type {t} has no Spark equivalent: {e}") from e


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a mere Arrow schema: tz-aware timestamps are TIMESTAMP, naive ones TIMESTAMP_NTZ."""
    fields = []
    for f in schema:
        try:
            fields.append(StructField(f.name, _spark_type(f.type), nullable=f.nullable))
        except InvalidInput as e:
            raise InvalidInput(f"column {f.name!r}: {e}") from e
    return StructType(fields)


def _arrow_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark checks record batches against (microsecond UTC timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def _conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(target):
        return batch
    arrays = []
    for f in target:
        a = batch.column(f.name)
        if a.type != f.type:
            if pa.types.is_timestamp(f.type) and pa.types.is_timestamp(a.type) and a.type.unit == "ns":
                # Nanoseconds floor to Spark's microseconds (a cast would round towards 1970).
                a = pc.floor_temporal(a, unit="microsecond")
            try:
                a = pc.cast(a, f.type, safe=not pa.types.is_timestamp(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatch(
                    f"column {f.name!r}: a value of {a.type} does not fit Spark's {f.type} "
                    f"({str(e).splitlines()[0]})"
                ) from e
        arrays.append(a)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


# ---------------------------------------------------------------------------------------------
# Reading


class SplitPartition(InputPartition):
    """One Spark task's share of a scan: small splits packed together, or key-range windows of a big one.
    Each scan task merges on its own; they are read one after another."""

    def __init__(self, index: int, tasks: Sequence[ScanTask]) -> None:
        super().__init__(index)
        self.index = index
        self.tasks = tuple(tasks)

    @property
    def size_bytes(self) -> int:
        """Bytes this partition reads, about."""
        return sum(t.size_bytes for t in self.tasks)


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
}


def _size_option(name: str, value: str | None, minimum: int = 1) -> int | None:
    """A byte size option: an integer, or Spark-style ``128m`` / ``1g`` / ``64kb``."""
    if value is None or not value.strip():
        return None
    text = value.strip().lower()
    digits = text.rstrip("bkmg")
    unit = text[len(digits) :]
    if not digits.isdigit() or unit not in _SIZE_UNITS or int(digits) * _SIZE_UNITS[unit] < minimum:
        raise InvalidInput(
            f"option {name!r} must be a byte size of at least {minimum} (e.g. 134217728, 128m, 1g), got {value!r}"
        )
    return int(digits) * _SIZE_UNITS[unit]


@dataclass(frozen=True)
class PartitionSizing:
    """How a read is cut into Spark tasks (see :func:`mere.table.scan.group_tasks`)."""

    max_bytes: int = TASK_BYTES
    open_cost: int = OPEN_COST_BYTES
    min_partitions: int = 1

    @staticmethod
    def from_options(opts: Mapping[str, str]) -> PartitionSizing:
        """Options ``max_partition_bytes``, ``open_cost_bytes`` and ``min_partitions``; the defaults are
        Spark's (128 MiB, 4 MiB) and the planning machine's core count (``read_table`` passes the session's
        own ``spark.sql.files.*`` settings and ``defaultParallelism``)."""
        open_cost = _size_option("open_cost_bytes", opts.get("open_cost_bytes"), minimum=0)
        return PartitionSizing(
            _size_option("max_partition_bytes", opts.get("max_partition_bytes")) or TASK_BYTES,
            OPEN_COST_BYTES if open_cost is None else open_cost,
            _int_option("min_partitions", opts.get("min_partitions")) or _cores(),
        )


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _as_of(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return float(value)  # epoch seconds
    except ValueError:
        pass
    naive = _naive_time(value)
    # A time without a zone is in Spark's session zone, as Spark reads its own. The planner process gets
    # no session conf: it takes its local zone, which is the JVM's default, the session zone unless set;
    # read tasks check the version against the zone the session sets (MereReader._check_session_zone).
    return value if naive is None else naive.astimezone()


def _naive_time(value: Any) -> dt.datetime | None:
    """``value`` as a datetime when it is an ISO time without a zone (a naive datetime included)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value
    return None


_OFFSET_ZONE = re.compile(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")


def _zone(name: str) -> dt.tzinfo | None:
    """A zone as Spark's ``spark.sql.session.timeZone`` names it (a region such as America/Los_Angeles, or
    an offset such as +08:00 or GMT-5); None when Python does not know it."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    text = name.strip()
    if text.upper() in ("Z", "UTC", "GMT", "UT"):
        return dt.UTC
    m = _OFFSET_ZONE.fullmatch(text)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        hours, minutes, seconds = (int(g or 0) for g in m.group(2, 3, 4))
        return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds))
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _micros(when: dt.datetime) -> int:
    return (when - _EPOCH) // dt.timedelta(microseconds=1)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _session_as_of(spark: Any, value: Any) -> Any:
    """``as_of`` for a read planned on the driver: a time without a zone in the session's time zone."""
    naive = _naive_time(value)
    if naive is None:
        return value
    name = str(spark.conf.get("spark.sql.session.timeZone"))
    zone = _zone(name)
    if zone is None:
        raise InvalidInput(
            f"as_of {value!r} has no time zone and Python does not know the session time zone {name!r}; "
            "give as_of with an explicit offset, such as '2026-11-21T08:00:00+00:00'"
        )
    return naive.replace(tzinfo=zone)


def _version(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as e:
        raise InvalidInput(f"option 'version' must be an integer, got {value!r}") from e


def _read_point(opts: Mapping[str, str]) -> tuple[int | None, Any, str | None]:
    """The (version, as_of, tag) a read's options name."""
    tag = opts.get("tag")
    return (
        _version(opts.get("version", opts.get("versionasof"))),
        _as_of(opts.get("as_of", opts.get("timestampasof"))),
        tag if tag else None,
    )


def _check_user_schema(name: str, table: pa.Schema, given: StructType) -> None:
    """A schema given with ``.schema(...)`` must describe the table's columns: a column the table may hold
    NULL in declared NOT NULL would let Spark optimise ``IS NULL`` away and crash on the NULLs; a type
    that cannot hold every stored value would fail mid-read."""
    have = spark_schema(table)
    for f in given.fields:
        if f.name not in have.fieldNames():
            continue  # the scan refused unknown columns already
        stored = have[f.name]
        if stored.nullable and not f.nullable:
            raise SchemaMismatch(
                f"{name}: column {f.name!r} may hold NULL in the table; the schema given declares it NOT NULL"
            )
        if f.dataType != stored.dataType:
            old, new = (_arrow_target(StructType([x])).field(0).type for x in (stored, f))
            if not can_widen(old, new):
                raise SchemaMismatch(
                    f"{name}: column {f.name!r} is {stored.dataType.simpleString()} in the table; the schema "
                    f"given declares {f.dataType.simpleString()}, which cannot hold every value of it"
                )


class MereReader(DataSourceReader):
    """Plans one table version on the driver; each task merges one split."""

    def __init__(self, ref: TableRef, options: Mapping[str, str], schema: StructType) -> None:
        check_options(options)
        opts = _options(options)
        self.ref = ref
        self.base_filter: str | None = opts.get("filter") or None
        self.columns = list(schema.fieldNames())
        self.requested_version, self.as_of, self.tag = _read_point(opts)
        text = opts.get("as_of", opts.get("timestampasof"))
        self.naive_as_of = text if _naive_time(text) is not None else None
        self.as_of_window: tuple[int, int | None] = (0, None)  # commit times that read self.version
        self.target = _arrow_target(schema)
        self.user_schema = schema
        self.sizing = PartitionSizing.from_options(opts)
        self.merged_only = _bool_option("merged_only", opts.get("merged_only"))
        self.pushed: list[E.Expr] = []
        self._plan()

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships the reader to every task with its read function: the plan stays on the driver
        # (it grows with the table and would be sent, whole, once per task).
        return {k: v for k, v in self.__dict__.items() if k != "tasks"}

    def _plan(self) -> None:
        table = self.ref.open()
        filt: Any = self.base_filter
        for e in self.pushed:
            filt = e if filt is None else E.to_expr(filt) & e
        scan = table.scan(
            columns=self.columns, filter=filt, version=self.requested_version, as_of=self.as_of, tag=self.tag
        )
        _check_user_schema(table.name, scan.schema, self.user_schema)
        self.version = scan.version
        if self.naive_as_of is not None:
            # Every instant in [this version's commit, the next commit) reads this version: a task can tell
            # whether the session's zone reads it too without asking the catalog.
            later = [
                _micros(s.committed_at)
                for s in table.catalog.sql.history(table.record.id, after=self.version)
            ]
            self.as_of_window = (
                _micros(table.snapshot(version=self.version).committed_at),
                min(later, default=None),
            )
        tasks = scan.tasks()
        if self.merged_only:  # read_table() reads the other splits with Spark's own Parquet reader
            tasks = [t for t in tasks if not stored_rows_are_merged(table.storage, scan.spec, t.split)]
        self.tasks = tasks

    def partitions(self) -> list[InputPartition]:
        groups = group_tasks(
            self.tasks, self.sizing.max_bytes, self.sizing.open_cost, self.sizing.min_partitions
        )
        return [SplitPartition(i, g) for i, g in enumerate(groups)]

    def _check_session_zone(self) -> None:
        """In a read task: a time travel to a time without a zone must read the same version in the session's
        time zone as the planner read in its local zone, or the read fails (never another version)."""
        if self.naive_as_of is None:
            return
        from pyspark import TaskContext

        context = TaskContext.get()
        name = context.getLocalProperty("spark.sql.session.timeZone") if context is not None else None
        if not name:
            return  # the session's zone is the JVM's default, the planner's local zone
        naive = _naive_time(self.naive_as_of)
        assert naive is not None
        zone = _zone(name)
        lo, hi = self.as_of_window
        when = None if zone is None else _micros(naive.replace(tzinfo=zone))
        if when is not None and lo <= when and (hi is None or when < hi):
            return
        local = naive.astimezone()
        example = naive.replace(tzinfo=zone or dt.UTC).isoformat()
        raise InvalidInput(
            f"{self.ref.name}: as_of {self.naive_as_of!r} has no time zone: Spark's planner read it in its "
            f"local zone ({local.tzname()}, UTC{local.strftime('%z')}) as version {self.version}, but the "
            f"session time zone (spark.sql.session.timeZone) is {name}, "
            + ("which Python does not know" if zone is None else "where it names another version")
            + f"; give as_of with an explicit offset, such as {example!r}"
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._check_session_zone()
        if not isinstance(partition, SplitPartition):
            return  # Spark's placeholder partition of an empty table
        for batch in read_tasks(partition.tasks):
            if batch.num_rows:
                yield _conform_batch(batch, self.target)


_PUSHABLE_VALUE_TYPES = (int, str, bytes, bool)


def _pushable_column(spec: TableSpec, attribute: Sequence[str]) -> str | None:
    if len(attribute) != 1 or attribute[0] not in spec.identity_columns:
        return None
    t = spec.schema.field(attribute[0]).type
    # Timestamp literals arrive as naive datetimes whose zone depends on Spark settings: leave them to Spark.
    if pa.types.is_timestamp(t) or pa.types.is_floating(t):
        return None
    return attribute[0]


def _literal_ok(value: Any) -> bool:
    import datetime as dt
    from decimal import Decimal

    if isinstance(value, dt.datetime):
        return False
    return isinstance(value, (*_PUSHABLE_VALUE_TYPES, dt.date, Decimal))


def translate_filter(f: Any, spec: TableSpec) -> E.Expr | None:
    """A Spark data source filter on key/partition columns as a mere expression, or None to leave it to Spark."""
    from pyspark.sql import datasource as ds

    name = type(f).__name__
    if isinstance(f, ds.Not):
        inner = translate_filter(f.child, spec)
        return None if inner is None else E.Not(inner)
    column = _pushable_column(spec, getattr(f, "attribute", ()))
    if column is None:
        return None
    expr: E.Expr | None = None
    if isinstance(f, ds.IsNull):
        expr = E.IsNull(column)
    elif isinstance(f, ds.IsNotNull):
        expr = E.IsNull(column, negated=True)
    elif isinstance(f, ds.In):
        values = tuple(f.value)
        if all(v is None or _literal_ok(v) for v in values):
            expr = E.In(column, values)
    elif name in (
        "EqualTo",
        "EqualNullSafe",
        "GreaterThan",
        "GreaterThanOrEqual",
        "LessThan",
        "LessThanOrEqual",
    ):
        value = f.value
        if value is None:
            expr = E.IsNull(column) if name == "EqualNullSafe" else None
        elif _literal_ok(value):
            op = {
                "EqualTo": "==",
                "EqualNullSafe": "==",
                "GreaterThan": ">",
                "GreaterThanOrEqual": ">=",
                "LessThan": "<",
                "LessThanOrEqual": "<=",
            }[name]
            expr = E.Compare(op, column, value)  # type: ignore[arg-type]
    if expr is None:
        return None
    try:
        E.bind(expr, spec.schema)
    except MereError:
        return None
    return expr


class MerePushdownReader(MereReader):
    """A reader that also takes Spark's key/partition filters (only where Spark scopes reads to one scan)."""

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        spec = self.tasks[0].spec if self.tasks else self.ref.open().spec
        rest = []
        accepted = []
        for f in filters:
            expr = translate_filter(f, spec)
            if expr is None:
                rest.append(f)
            else:
                accepted.append(expr)  # evaluated exactly before the merge: Spark drops it
        if accepted:
            self.pushed = accepted
            self._plan()
        return rest


# ---------------------------------------------------------------------------------------------
# Writing


@dataclass
class MereCommitMessage(WriterCommitMessage):
    """Files one task staged, in the order they were written."""

    staged: list[StagedWrite] = field(default_factory=list)
    rows: int = 0
    query_id: str | None = None
    overwrite_mode: str | None = (
        None  # the session's spark.sql.sources.partitionOverwriteMode, as tasks see it
    )


def _chunks(batches: Iterator[pa.RecordBatch], flush_rows: int = FLUSH_ROWS) -> Iterator[pa.Table]:
    """Spark's small Arrow batches regrouped into tables of about ``flush_rows`` rows."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for b in batches:
        if not b.num_rows:
            continue
        pending.append(b)
        rows += b.num_rows
        size += b.nbytes
        if rows >= flush_rows or size >= FLUSH_BYTES:
            yield pa.Table.from_batches(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending)


def _create_table(ref: TableRef, opts: Mapping[str, str], schema: StructType) -> Table:
    keys = set(_split_list(opts.get("primary_key")) or ())
    # Columns other than keys take NULL, whatever the DataFrame's plan proved of its own rows (a literal
    # column is NOT NULL there, and so are the elements of array(1, 2), the fields of named_struct and the
    # values of map literals): as Spark's file sources write them. Map keys stay NOT NULL (Arrow's rule).
    arrow = to_arrow_schema(schema, timezone="UTC")
    arrow = pa.schema(
        [
            f.with_type(relax_nested(f.type))
            if f.name in keys
            else f.with_type(relax_nested(f.type)).with_nullable(True)
            for f in arrow
        ],
        metadata=arrow.metadata,
    )
    buckets = opts.get("buckets")
    return ref.connect().create_table(
        ref.name,
        arrow,
        primary_key=_split_list(opts.get("primary_key")),
        partition_by=list(_partition_by(ref.name, opts) or ()) or None,
        buckets=_int_option("buckets", buckets),
        merge_operators=_json_object("merge_operators", opts.get("merge_operators")),
        cdc_column=opts.get("cdc_column") or None,
        exist_ok=True,
    )


def _partition_by(name: str, opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """The partition columns a write names: option ``partition_by`` or Spark's ``.partitionBy(...)`` (as
    the hook passes it), which must agree when both are given; None when neither is."""
    given = {k: tuple(_split_list(opts[k]) or ()) for k in ("partition_by", "partitionby") if k in opts}
    if len(set(given.values())) > 1:
        raise InvalidInput(
            f"{name}: .partitionBy{given['partitionby']} and option 'partition_by' "
            f"{opts['partition_by']!r} disagree; give the partition columns once"
        )
    return next(iter(given.values()), None)


def _check_layout(table: Table, opts: Mapping[str, str]) -> None:
    """Layout options given for an existing table must describe it (a mismatch is never ignored)."""
    spec = table.spec
    partition_by = _partition_by(table.name, opts)
    if "partitionby" in opts and partition_by != spec.partition_by:
        have = f"partitioned by {', '.join(spec.partition_by)}" if spec.partition_by else "not partitioned"
        raise mere.errors.TableExists(
            f"{table.name} already exists and is {have}: .partitionBy({', '.join(partition_by or ())}) does "
            "not match it, and a write never changes a table's partitioning; drop .partitionBy or write to "
            "a new table (nothing was written)"
        )
    wanted: dict[str, Any] = {}
    if "primary_key" in opts:
        wanted["primary_key"] = (tuple(_split_list(opts["primary_key"]) or ()), spec.primary_key)
    if partition_by is not None:
        wanted["partition_by"] = (partition_by, spec.partition_by)
    if "buckets" in opts:
        wanted["buckets"] = (_int_option("buckets", opts["buckets"]), spec.buckets)
    if "cdc_column" in opts:
        wanted["cdc_column"] = (opts["cdc_column"] or None, spec.cdc_column)
    if "merge_operators" in opts:
        given = TableSpec.create(
            spec.schema,
            spec.primary_key or None,
            spec.partition_by or None,
            spec.buckets if spec.primary_key else None,
            _json_object("merge_operators", opts["merge_operators"]),
            spec.cdc_column,
        )
        wanted["merge_operators"] = (dict(given.merge_operators), dict(spec.merge_operators))
    different = [f"{k} {a!r} vs the table's {b!r}" for k, (a, b) in wanted.items() if a != b]
    if different:
        raise mere.errors.TableExists(
            f"{table.name} already exists with a different spec: {'; '.join(different)}"
        )


@dataclass
class _WriteJob:
    """One write (or one streaming query's writes), planned on the driver and shipped to every task."""

    ref: TableRef
    table_uuid: str
    operation: str
    partition: dict[str, Any] | None
    idempotency_key: str | None
    query_id: str | None
    flush_rows: int = FLUSH_ROWS
    evolved_spec: str | None = None  # mergeSchema: the spec with the DataFrame's new columns
    base_spec: str | None = None  # ... and the one it was derived from
    created_version: int | None = None  # the write created the table (at this version): abort drops it
    overwrite_mode: str | None = None  # option partitionOverwriteMode; None: the session's conf decides
    streaming: bool = False

    @staticmethod
    def plan(
        ref: TableRef, options: Mapping[str, str], schema: StructType, overwrite: bool, streaming: bool
    ) -> _WriteJob:
        check_options(options)
        opts = _options(options)
        operation = opts.get("operation", "").strip().lower() or None
        if operation is not None and operation not in WRITE_OPERATIONS:
            raise InvalidInput(
                f"{ref.name}: unknown operation {operation!r}; choose one of {', '.join(WRITE_OPERATIONS)}"
            )
        if overwrite and operation not in (None, "overwrite"):
            raise InvalidInput(
                f"{ref.name}: mode('overwrite') cannot run operation {operation!r}; use mode('append')"
            )
        created: int | None = None
        try:
            table = ref.open()
        except (NoSuchTable, NoSuchNamespace) as missing:
            create = opts.get("create", "").strip().lower()
            if create not in ("", "true", "false"):
                raise InvalidInput(f"option 'create' must be true or false, got {create!r}") from None
            if (
                operation == "delete"
                or create == "false"
                or (create != "true" and not any(o in opts for o in CREATE_OPTIONS))
            ):
                raise NoSuchTable(
                    f"{missing} in warehouse {ref.warehouse!r}; to create it on write give its layout "
                    "(.option('primary_key', ...), partition_by, buckets, cdc_column, merge_operators) or "
                    ".option('create', 'true') for a table without key"
                ) from None
            table = _create_table(ref, opts, schema)
            created = table.version
        else:
            _check_layout(table, opts)
        if overwrite:
            operation = "overwrite"
        elif operation is None:
            operation = "upsert" if table.spec.has_primary_key else "append"
        keyed = table.spec.has_primary_key
        if (operation in ("upsert", "delete") and not keyed) or (operation == "append" and keyed):
            raise InvalidInput(
                f"{ref.name}: operation {operation!r} does not apply to a table "
                + (f"with primary key {list(table.spec.primary_key)}" if keyed else "without key")
            )
        partition = _json_object("partition", opts.get("partition"))
        if partition is not None and operation != "overwrite":
            raise InvalidInput(f"{ref.name}: option 'partition' applies to mode('overwrite') only")
        overwrite_mode = _overwrite_mode(ref.name, opts.get("partitionoverwritemode"), "option")
        if overwrite_mode is not None and (operation != "overwrite" or streaming):
            raise InvalidInput(
                f"{ref.name}: option 'partitionOverwriteMode' applies to batch writes with mode('overwrite') only"
            )
        names = set(table.schema.names) | ({table.spec.cdc_column} if table.spec.cdc_column else set())
        unknown = [c for c in schema.fieldNames() if c not in names]
        evolved: str | None = None
        if unknown and _bool_option("mergeSchema", opts.get("mergeschema")) and operation != "delete":
            # The new columns commit with the rows: tasks stage under the evolved spec, the driver commits it.
            arrow = to_arrow_schema(schema, timezone="UTC")
            update = table.evolve()
            for c in unknown:
                update.add_column(c, arrow.field(c).type)
            evolved = update.spec.to_json()
        elif unknown:
            raise mere.errors.SchemaMismatch(
                f"{ref.name}: the DataFrame has column(s) {unknown} the table lacks; the table has "
                f"{sorted(names)} (.option('mergeSchema', 'true') adds them)"
            )
        key = opts.get("idempotency_key") or None
        if key is None and not streaming:
            key = f"spark-write:{uuid.uuid4().hex}"  # lets abort() tell whether a failed commit landed
        flush = _int_option("flush_rows", opts.get("flush_rows"))
        return _WriteJob(
            ref,
            table.record.uuid,
            operation,
            partition,
            key,
            opts.get("query_id") or None,
            flush or FLUSH_ROWS,
            evolved,
            table.spec.to_json() if evolved else None,
            None if streaming else created,  # a stream's failed batch is retried into the same table
            overwrite_mode,
            streaming,
        )

    def open(self) -> Table:
        table = self.ref.open()
        if table.record.uuid != self.table_uuid:
            raise InvalidInput(f"{self.ref.name} was dropped and created again during the write")
        if self.evolved_spec is None or self.base_spec is None:
            return table
        # mergeSchema: write (and commit) the new columns too, unless an earlier batch already did.
        evolved = TableSpec.from_json(self.evolved_spec, table.name)
        if same_columns(table.spec, evolved):
            return table
        if not same_columns(table.spec, TableSpec.from_json(self.base_spec, table.name)):
            raise SchemaChanged(f"{table.name}: the table's columns changed during the write; run it again")
        update = table.evolve()
        update.spec, update.steps = evolved, ["mergeSchema"]
        return table.adding_columns(update)

    def write(self, batches: Iterator[pa.RecordBatch], query_id: str | None = None) -> MereCommitMessage:
        """Stage files chunk by chunk; a chunk is written in the background while Spark sends the next one."""
        table = self.open()
        staged: list[StagedWrite] = []
        pending: Future[StagedWrite] | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mere-spark-stage") as pool:
            try:
                for chunk in _chunks(batches, self.flush_rows):
                    if pending is not None:
                        staged.append(pending.result())
                    pending = pool.submit(table.stage, chunk, self.operation)
                if pending is not None:
                    staged.append(pending.result())
                    pending = None
            except BaseException:
                if pending is not None and not pending.cancel():
                    with contextlib.suppress(BaseException):
                        staged.append(pending.result())
                table.abort(staged)
                raise
        return MereCommitMessage(staged, sum(s.rows for s in staged), query_id, _task_overwrite_mode())

    def commit(self, messages: Sequence[WriterCommitMessage | None], key: str | None) -> None:
        table = self.open()
        ours = [m for m in messages if isinstance(m, MereCommitMessage)]
        staged = [s for m in ours for s in m.staged]
        dynamic = self.operation == "overwrite" and self.dynamic_overwrite(ours)
        if not any(s.files for s in staged) and (self.operation != "overwrite" or dynamic):
            return  # nothing written: no new version
        table.commit(
            staged, operation=self.operation, partition=self.partition, idempotency_key=key, dynamic=dynamic
        )

    def dynamic_overwrite(self, messages: Sequence[MereCommitMessage]) -> bool:
        """Whether this overwrite replaces only the partitions it writes: the write's option, else the
        session's ``spark.sql.sources.partitionOverwriteMode`` as its tasks saw it (static by default)."""
        if self.streaming:
            return False  # complete mode: the query's whole result replaces the table
        if self.overwrite_mode is not None:
            return self.overwrite_mode == "dynamic"
        if not messages:
            # No task ran, so the session's mode is unknown: static would empty the table, dynamic keep it.
            raise InvalidInput(
                f"{self.ref.name}: no write task reported the session's {OVERWRITE_MODE_CONF}; nothing was "
                "changed. Give .option('partitionOverwriteMode', 'static' or 'dynamic')"
            )
        seen = {m.overwrite_mode or "static" for m in messages}
        if len(seen) > 1:
            raise InvalidInput(
                f"{self.ref.name}: write tasks saw different {OVERWRITE_MODE_CONF}: {sorted(seen)}"
            )
        mode = _overwrite_mode(self.ref.name, seen.pop(), "session conf")
        return mode == "dynamic"

    def abort(self, messages: Sequence[WriterCommitMessage | None], key: str | None) -> None:
        table = self.open()
        if key is not None and table.find_commit(key) is not None:
            return  # the commit landed (its outcome was unknown to the caller): the files are the table's now
        table.abort([s for m in messages if isinstance(m, MereCommitMessage) for s in m.staged])
        if self.created_version is not None:  # a failed write leaves no table it created behind
            table.catalog._drop_if_unchanged(table, self.created_version)


class MereWriter(DataSourceArrowWriter):
    """Batch writes: tasks stage files, the driver commits them all as one version."""

    def __init__(self, job: _WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        return self.job.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.commit(messages, self.job.idempotency_key)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.abort(messages, self.job.idempotency_key)


def _overwrite_mode(table: str, value: str | None, where: str) -> str | None:
    if value is None or not value.strip():
        return None
    mode = value.strip().lower()
    if mode not in OVERWRITE_MODES:
        name = "partitionOverwriteMode" if where == "option" else OVERWRITE_MODE_CONF
        raise InvalidInput(f"{table}: {where} {name} must be static or dynamic, got {value!r}")
    return mode


def _task_overwrite_mode() -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(OVERWRITE_MODE_CONF)


def _task_query_id() -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(STREAM_QUERY_ID_PROPERTY)


class MereStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: each micro-batch is one commit, keyed by (query id, batch id) so a replay is a no-op."""

    def __init__(self, job: _WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        return self.job.write(iterator, query_id=self.job.query_id or _task_query_id())

    def batch_key(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> str | None:
        query_id = self.job.query_id or next(
            (m.query_id for m in messages if isinstance(m, MereCommitMessage) and m.query_id), None
        )
        if query_id is None:
            if any(isinstance(m, MereCommitMessage) and m.staged for m in messages):
                raise InvalidInput(
                    f"{self.job.ref.name}: cannot tell which streaming query this is; "
                    "give .option('query_id', ...)"
                )
            return None
        return f"spark-stream:{query_id}:{batch_id}"

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.job.commit(messages, self.batch_key(messages, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        try:
            key = self.batch_key(messages, batchId)
        except InvalidInput:
            key = None
        self.job.abort(messages, key)


# ---------------------------------------------------------------------------------------------
# The data source


class MereDataSource(DataSource):
    """``spark.read.format("mere")`` / ``df.write.format("mere")`` / ``df.writeStream.format("mere")`` /
    ``spark.readStream.format("mere").option("readChangeFeed", "true")``."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.ref = TableRef.from_options(options)

    @classmethod
    def name(cls) -> str:
        return "mere"

    def schema(self) -> StructType:
        check_options(self.options)
        from mere.integrations import spark_streaming  # imports this module: loaded on first use

        if spark_streaming.wants_change_feed(self.options):  # Spark gives no other sign of a stream read
            return spark_streaming.stream_schema(self.ref, self.options)
        table = self.ref.open()
        opts = _options(self.options)
        version, as_of, tag = _read_point(opts)
        # The columns of the version read: a time-travel read sees that version's schema.
        return spark_schema(
            table.scan(columns=_split_list(opts.get("columns")), version=version, as_of=as_of, tag=tag).schema
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        pushdown = _options(self.options).get("pushdown", "false").strip().lower()
        if pushdown not in ("true", "false"):
            raise InvalidInput(f"option 'pushdown' must be true or false, got {pushdown!r}")
        if _options(self.options).get("readchangefeed", "").strip().lower() == "true":
            raise InvalidInput(
                f"{self.ref.name}: 'readChangeFeed' reads are streams (spark.readStream); for a batch of "
                "changes use Table.changes(start_version, end_version)"
            )
        streaming = [o for o in ("startingversion", "maxversionspertrigger") if o in _options(self.options)]
        if streaming:
            raise InvalidInput(
                f"{self.ref.name}: option {streaming[0]!r} is for stream reads (spark.readStream); a batch "
                "read takes 'version', 'as_of' or 'tag'"
            )
        if pushdown == "true":
            if not SCAN_SCOPED_READS:
                raise InvalidInput(
                    f"{self.ref.name}: .option('pushdown', 'true') is refused on Spark {pyspark.__version__}: it reuses "
                    "one query's pushed filters for later queries on the same DataFrame or view, which would return "
                    "wrong rows. Prune with .option('filter', \"<key/partition filter>\") instead."
                )
            return MerePushdownReader(self.ref, self.options, schema)
        return MereReader(self.ref, self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> MereWriter:
        return MereWriter(_WriteJob.plan(self.ref, self.options, schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> MereStreamWriter:
        return MereStreamWriter(_WriteJob.plan(self.ref, self.options, schema, overwrite, streaming=True))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("mere").option("readChangeFeed", "true")``: the table's change feed,
        micro-batch by micro-batch (see :mod:`mere.integrations.spark_streaming`)."""
        from mere.integrations.spark_streaming import MereStreamReader

        return MereStreamReader(self.ref, self.options, schema)


def _location(
    table: str, warehouse: str | None, catalog: str | None, storage_options: Mapping[str, str] | None
) -> dict[str, str]:
    """Data source options naming a table, from the keyword arguments of compact() and read_table()."""
    given = {"table": table, **{f"storage.{k}": str(v) for k, v in (storage_options or {}).items()}}
    if warehouse is not None:
        given["warehouse"] = warehouse
    if catalog is not None:
        given["catalog"] = catalog
    return given


def compact(
    spark: Any,
    table: str,
    *,
    warehouse: str | None = None,
    catalog: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    min_files: int = 2,
    partition: Mapping[str, Any] | None = None,
) -> CommitResult | None:
    """Compact a table with Spark: one task per split folds its files, the driver commits once.

    The same as :meth:`mere.Table.compact` for tables too big for one machine. Returns None when no split
    has ``min_files`` sorted runs (files; those one compaction wrote count once). A commit that loses a
    race against an overwrite or another compaction plans again; a failed job commits nothing, and files
    of killed tasks are removed by :meth:`mere.Table.cleanup`.
    """
    ref = TableRef.from_options(_location(table, warehouse, catalog, storage_options))
    target = ref.open()
    if not target.storage.portable:
        raise InvalidInput(f"{table}: Spark compaction needs a warehouse URI its workers can open")
    check_workers(spark)

    def run(tasks: Sequence[CompactionTask]) -> list[list[FileEntry]]:
        rdd = spark.sparkContext.parallelize(list(tasks), max(1, len(tasks)))
        results: list[list[FileEntry]] = rdd.map(CompactionTask.run).collect()
        return results

    return target.compact(min_files, partition, run=run)


def register(spark: Any, *, check: bool = True) -> None:
    """Register the data source explicitly (auto-discovery through ``pyspark_mere`` usually does it).

    With ``check`` (the default) it first makes sure Spark's Python workers can import mere
    (:func:`check_workers`: one tiny task per session), so that a worker interpreter without mere is one
    clear :class:`~mere.errors.NotInstalled` here, not a Java stack trace at the first query.
    """
    if check:
        check_workers(spark)
    spark.dataSource.register(MereDataSource)
    install_partition_hook()
    _registered_sessions.add(spark.sparkContext.applicationId)


# ---------------------------------------------------------------------------------------------
# DataFrameWriter.partitionBy for the mere format

_HOOKED = "_mere_partition_hook"


def install_partition_hook() -> None:
    """Let ``df.write.format("mere").partitionBy(...)`` name the partition columns of the table.

    Spark's DataFrameWriter checks ``partitionBy`` against the partitioning a data source's table declares,
    in the JVM, before any code of the data source runs, and a Python data source cannot declare any: the
    write fails with "requirement failed: The provided partitioning or clustering columns do not match the
    existing table's". This wraps three methods of PySpark's classic ``DataFrameWriter`` (once per process;
    :func:`register` and :func:`local_session` call it): ``format`` and ``partitionBy`` also note what they
    were given on the writer, and ``save`` of a mere write hands the columns over as the option
    ``partitionBy`` (with Spark's own partitioning emptied): the partitioning of a table the write creates,
    or, for an existing table, one that must be its partitioning (a mismatch is refused before anything is
    written). Every other format gets Spark's own calls, unchanged. Spark Connect's writer is not wrapped.
    """
    from pyspark.sql.readwriter import DataFrameWriter

    if getattr(DataFrameWriter.save, _HOOKED, False):
        return
    spark_format, spark_partition_by, spark_save = (
        DataFrameWriter.format,
        DataFrameWriter.partitionBy,
        DataFrameWriter.save,
    )

    def format(self: Any, source: str) -> Any:
        out = spark_format(self, source)
        self._mere_format = source
        return out

    def partitionBy(self: Any, *cols: Any) -> Any:
        out = spark_partition_by(self, *cols)  # Spark's own, as always: other formats need it
        if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
            cols = tuple(cols[0])
        self._mere_partition_by = cols
        return out

    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> None:
        if partitionBy is None and getattr(self, "_mere_partition_by", None) is None:
            return spark_save(self, path, format, mode, partitionBy, **options)
        source = format or getattr(self, "_mere_format", None)
        if source is None:
            source = self._spark.conf.get("spark.sql.sources.default", "parquet")
        if str(source).strip().lower() != MereDataSource.name():
            return spark_save(self, path, format, mode, partitionBy, **options)
        # Spark's own order of save()'s arguments, then the columns as mere's option instead of Spark's.
        self.mode(mode).options(**options)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        cols = self._mere_partition_by
        spark_partition_by(self)  # none for Spark: its check against the table's partitioning is skipped
        if not all(isinstance(c, str) for c in cols):
            raise InvalidInput(f"partitionBy takes column names for the mere format, got {list(cols)!r}")
        self._jwrite = self._jwrite.option("partitionBy", ",".join(cols))
        return spark_save(self, path)

    for name, wrapper in (("format", format), ("partitionBy", partitionBy), ("save", save)):
        original = getattr(DataFrameWriter, name)
        functools.update_wrapper(wrapper, original)
        setattr(wrapper, _HOOKED, True)
        setattr(DataFrameWriter, name, wrapper)


# ---------------------------------------------------------------------------------------------
# Workers and the native route


WORKERS_HINT = (
    "Spark's Python workers must run an interpreter where mere is installed: set PYSPARK_PYTHON (and "
    "PYSPARK_DRIVER_PYTHON) to it before the session starts, e.g. PYSPARK_PYTHON=$(which python) in the "
    "activated virtual environment, or the spark.pyspark.python setting."
)
_checked_sessions: set[str] = set()
_registered_sessions: set[str] = set()


def check_workers(spark: Any) -> None:
    """Fail with one clear sentence if Spark's Python workers cannot import mere (or pyarrow).

    Runs one tiny Spark task per session (remembered), whose function travels by value so that it runs
    even where mere is missing. Called by :func:`register` and :func:`read_table`.
    """
    app = spark.sparkContext.applicationId
    if app in _checked_sessions:
        return

    def probe(_: Any) -> str | None:  # nested: cloudpickle sends it by value, not as a reference to mere
        import sys as worker_sys

        try:
            import pyarrow  # noqa: F401

            import mere as worker_mere  # noqa: F401
        except ImportError as e:
            return f"{worker_sys.executable} ({e})"
        return None

    try:
        problem = spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    except Exception as e:  # the worker could not even start (wrong or missing interpreter)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise NotInstalled(f"Spark could not run a Python worker ({first[:300]}). {WORKERS_HINT}") from None
    if problem is not None:
        raise NotInstalled(f"Spark's Python workers run {problem}, which cannot import mere. {WORKERS_HINT}")
    _checked_sessions.add(app)


_NATIVE_LEAVES = (
    pa.types.is_boolean,
    pa.types.is_signed_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_date32,
    pa.types.is_decimal128,
)


def native_type(t: pa.DataType) -> bool:
    """Whether Spark's Parquet reader returns this mere column exactly as the mere data source does:
    unsigned integers (read as wider or decimal types), nanosecond timestamps and float16 are not."""
    if pa.types.is_float16(t):
        return False
    if any(check(t) for check in _NATIVE_LEAVES):
        return True
    if pa.types.is_timestamp(t):
        return t.unit in ("ms", "us")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return native_type(t.value_type)
    if pa.types.is_struct(t):
        return all(native_type(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return native_type(t.key_type) and native_type(t.item_type)
    return False


def _column(name: str) -> Any:
    """A Spark column reference for any name (dots and backticks quoted)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


_SPARK_OPS = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _spark_literal_ok(value: Any, column_type: pa.DataType) -> bool:
    import datetime as dt
    from decimal import Decimal

    if pa.types.is_floating(column_type) or pa.types.is_timestamp(column_type):
        return False  # NaN ordering and time zones: leave those to the merged route
    return value is None or (
        isinstance(value, (bool, int, str, bytes, Decimal, dt.date)) and not isinstance(value, dt.datetime)
    )


def spark_filter(expr: E.Expr, schema: pa.Schema) -> Any | None:
    """A bound mere filter as a Spark Column with the same result on every row, or None when some part
    has no exact Spark equivalent (float or timestamp literals, pyarrow expressions)."""
    from pyspark.sql import functions as F

    col = _column

    def go(e: E.Expr) -> Any | None:
        if isinstance(e, E.AlwaysTrue):
            return F.lit(True)
        if isinstance(e, (E.And, E.Or)):
            left, right = go(e.left), go(e.right)
            if left is None or right is None:
                return None
            return (left & right) if isinstance(e, E.And) else (left | right)
        if isinstance(e, E.Not):
            inner = go(e.operand)
            return None if inner is None else ~inner
        if isinstance(e, E.IsNull):
            return col(e.column).isNotNull() if e.negated else col(e.column).isNull()
        if isinstance(e, E.Compare):
            if not _spark_literal_ok(e.value, schema.field(e.column).type):
                return None
            return getattr(col(e.column), _SPARK_OPS[e.op])(F.lit(e.value))
        if isinstance(e, E.In):
            kind = schema.field(e.column).type
            if not all(_spark_literal_ok(v, kind) for v in e.values):
                return None
            if not e.values:
                return F.lit(e.negated)  # x IN () is false, NOT IN () true, NULL or not
            test = col(e.column).isin([F.lit(v) for v in e.values])
            return ~test if e.negated else test
        return None

    return go(expr)


def _spark_path(uri: str) -> str:
    """A file URI for Spark's reader: glob characters escaped (Spark globs every path it is given)."""
    return "".join("\\" + ch if ch in "*?[]{}\\" else ch for ch in uri)


def read_table(
    spark: Any,
    table: str,
    *,
    warehouse: str | None = None,
    catalog: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
    filter: str | E.Expr | None = None,
    version: int | None = None,
    as_of: Any = None,
    native: bool | None = None,
    options: Mapping[str, str] | None = None,
) -> Any:
    """A Spark DataFrame of a mere table in which splits with nothing to merge are read by Spark's own
    vectorised Parquet reader, and the others are merged by mere's data source: one snapshot, one schema.

    A split needs no merge when its stored rows already are its merged rows (see
    :func:`mere.read.reader.stored_rows_are_merged`): a compacted split, or one written by a single upsert
    without deletes; every file of a table without key. After :func:`compact`, the whole table is read
    natively. Both parts read the same version (pinned here), and Spark's own filters may prune the native
    part freely (its rows need no merge). ``filter`` is mere's filter language, evaluated by mere for the
    merged part and translated exactly for the native part (or, where it cannot be, such as float or
    timestamp literals, every split goes through mere). ``native`` = None uses the route for local
    warehouses; True also for object stores, whose files Spark then reads as ``s3a://`` (the session
    needs hadoop-aws and credentials configured); False never. Columns of types Spark's Parquet reader
    returns differently (unsigned integers, nanosecond timestamps) turn the route off. ``options`` are
    passed to the mere data source (``max_partition_bytes``, ``storage.<key>``, ...). An ``as_of`` (or
    option ``as_of``/``timestampAsOf``) without a zone is read in the session time zone
    (``spark.sql.session.timeZone``), as Spark reads its own timestamps; mere's Python API reads it as UTC.
    """
    if spark.sparkContext.applicationId not in _registered_sessions:
        register(spark)  # the registered source runs in the interpreter check_workers tests
    given = _location(table, warehouse, catalog, storage_options)
    given.update({str(k): str(v) for k, v in (options or {}).items()})
    check_options(given)
    given = _options(given)
    ref = TableRef.from_options(given)
    t = ref.open()
    text = given.get("as_of", given.get("timestampasof"))
    if as_of is None and text is not None:  # the option, as load() takes it (epoch seconds or ISO time)
        as_of = text if _naive_time(text) is not None else _as_of(text)
    # On the driver the session's zone is known: a time without a zone is read in it, as Spark reads its own.
    as_of = _session_as_of(spark, as_of)
    scan = t.scan(
        columns=columns, filter=filter, version=version, as_of=as_of, tag=given.pop("tag", None) or None
    )
    target = spark_schema(scan.schema)
    conf = spark.conf
    given.setdefault("max_partition_bytes", str(conf.get("spark.sql.files.maxPartitionBytes", "128m")))
    given.setdefault("open_cost_bytes", str(conf.get("spark.sql.files.openCostInBytes", "4m")))
    given.setdefault("min_partitions", str(spark.sparkContext.defaultParallelism))
    given["version"] = str(scan.version)
    given.pop("versionasof", None)
    given.pop("as_of", None)
    given.pop("timestampasof", None)
    given.pop("columns", None)
    if filter is not None:
        given["filter"] = E.render(E.to_expr(filter)) if isinstance(filter, E.Expr) else str(filter)

    def merged(only: bool) -> Any:
        reader = spark.read.format("mere").schema(target).options(**given)
        return reader.option("merged_only", "true" if only else "false").load()

    use_native = t.storage.is_local if native is None else native
    if not use_native or not all(native_type(f.type) for f in t.spec.schema):
        return merged(only=False)
    condition = None
    if filter is not None:
        condition = spark_filter(E.bind(E.to_expr(filter), t.spec.schema), t.spec.schema)
        if condition is None:
            return merged(only=False)
    splits = scan.plan()
    clean = [s for s in splits if stored_rows_are_merged(t.storage, scan.spec, s)]
    if not clean:
        return merged(only=False)
    uris = [t.storage.file_uri(f.path) for s in clean for f in s.files]
    if not t.storage.is_local:
        uris = ["s3a://" + u.split("://", 1)[1] if u.startswith("s3://") else u for u in uris]
    full = spark_schema(t.spec.schema)
    native_df = spark.read.schema(full).parquet(*[_spark_path(u) for u in uris])
    if condition is not None:
        native_df = native_df.where(condition)
    native_df = native_df.select(*[_column(c) for c in target.fieldNames()])
    if len(clean) == len(splits):
        return native_df
    return native_df.unionByName(merged(only=True))


# ---------------------------------------------------------------------------------------------
# MERGE INTO from a Spark DataFrame

MERGE_ATTEMPTS = 3
"""How often :meth:`SparkMerge.execute` runs the job when a concurrent commit changed rows it read."""

_MERGE_CLAUSES = (
    "when_matched_update",
    "when_matched_update_all",
    "when_matched_delete",
    "when_matched_do_nothing",
    "when_not_matched_insert",
    "when_not_matched_insert_all",
    "when_not_matched_do_nothing",
)
_BY_SOURCE_REFUSED = (
    "WHEN NOT MATCHED BY SOURCE needs every target row, and a Spark MERGE reads in each task only the "
    "target rows of that task's source keys (buckets without source rows get no task at all); run this "
    "MERGE with the local Table.merge(...) (mere.connect(...).table(name).merge(source_arrow)) instead"
)


@dataclass
class _MergeJob:
    """One attempt of a Spark MERGE, planned on the driver and shipped to every task."""

    ref: TableRef
    table_uuid: str
    version: int
    schema: pa.Schema  # the source's Arrow schema, as tasks cast their batches to
    on: str | None
    source_alias: str
    target_alias: str
    clauses: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]

    def open(self) -> Table:
        table = self.ref.open()
        if table.record.uuid != self.table_uuid:
            raise InvalidInput(f"{self.ref.name} was dropped and created again during the MERGE")
        return table

    def build(self, table: Table, source: pa.Table) -> Merge:
        m = Merge(table, source, self.on, self.source_alias, self.target_alias)
        for method, kwargs in self.clauses:
            getattr(m, method)(**dict(kwargs))
        return m

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A task: MERGE its source rows (every row of their keys is here) at the pinned version, write the
        files, and return the pickled :class:`~mere.table.merge.StagedMerge` (or the error) to the driver."""
        import pickle
        import traceback

        payload: tuple[Any, ...] | None
        try:
            parts = [_conform_batch(b, self.schema) for b in batches if b.num_rows]
            if parts:
                source = pa.Table.from_batches(parts, schema=self.schema)
                payload = ("staged", self.build(self.open(), source).stage(self.version))
            else:
                payload = None  # no source rows: nothing to read or write
        except Exception as exc:  # reported to the driver, which deletes the other tasks' files
            payload = ("error", _portable_error(exc), traceback.format_exc())
        if payload is not None:
            yield pa.RecordBatch.from_arrays(
                [pa.array([pickle.dumps(payload)], pa.binary())], names=["payload"]
            )


def _portable_error(exc: Exception) -> Exception:
    """``exc`` if it survives pickling (mere's errors do), else a MereError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return MereError(f"{type(exc).__name__}: {exc}")
    return exc


@dataclass(frozen=True)
class SparkMergeExplain:
    """How a Spark MERGE runs: its statement, the version it reads and how the source is distributed."""

    table: str
    on: str
    clauses: tuple[str, ...]
    version: int
    buckets: int
    partitions: int
    distribute_by: str

    def __str__(self) -> str:
        return "\n".join(
            [
                f"MERGE INTO {self.table} ON {self.on}",
                *("  " + c for c in self.clauses),
                f"Spark: the source is repartitioned by {self.distribute_by} (the table's bucket of the key, "
                f"{self.buckets} buckets) into {self.partitions} tasks; each task merges its rows against "
                f"version {self.version}, reading only the target rows of its keys, and stages files; the "
                "driver commits every task's files as one version",
            ]
        )


class SparkMerge:
    """A MERGE INTO a mere table from a Spark DataFrame being built (see :func:`merge`).

    The clause methods are those of :class:`mere.table.merge.Merge` (conditions and values are SQL text
    over the aliases); ``WHEN NOT MATCHED BY SOURCE`` is refused (use the local ``Table.merge``).
    """

    def __init__(
        self,
        spark: Any,
        source: Any,
        ref: TableRef,
        on: str | None,
        source_alias: str,
        target_alias: str,
        partitions: int | None,
        attempts: int,
    ) -> None:
        from pyspark.sql import DataFrame

        if not isinstance(source, DataFrame):
            raise InvalidInput(
                f"{ref.name}: merge() takes a Spark DataFrame as the source, got {type(source).__name__}; "
                "for Arrow, pandas or Polars data use the local Table.merge(...)"
            )
        if partitions is not None and (
            isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1
        ):
            raise InvalidInput(f"{ref.name}: partitions must be a positive int, got {partitions!r}")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidInput(f"{ref.name}: attempts must be a positive int, got {attempts!r}")
        self.spark = spark
        self.source = source
        self.ref = ref
        self.partitions = partitions
        self.attempts = attempts
        table = ref.open()
        if not table.storage.portable:
            raise InvalidInput(f"{ref.name}: a Spark MERGE needs a warehouse URI its workers can open")
        try:
            schema = to_arrow_schema(source.schema, timezone="UTC")
        except Exception as e:  # PySpark's type errors
            raise InvalidInput(f"{ref.name}: the MERGE source has a column type mere cannot take: {e}") from e
        self._job = _MergeJob(
            ref, table.record.uuid, table.version, schema, on, source_alias, target_alias, ()
        )
        self._check = self._job.build(table, schema.empty_table())  # fails now on bad aliases or ON text
        self._state = "open"

    # -- builder ------------------------------------------------------------------------------

    def _add(self, method: str, **kwargs: Any) -> SparkMerge:
        if self._state != "open":
            raise InvalidInput(f"{self.ref.name}: this MERGE was executed; build a new one")
        assert method in _MERGE_CLAUSES, method
        getattr(self._check, method)(**kwargs)  # parses the SQL text now
        given = tuple((k, v) for k, v in kwargs.items())
        self._job = _replace(self._job, clauses=(*self._job.clauses, (method, given)))
        return self

    def when_matched_update(self, set: Mapping[str, str], condition: str | None = None) -> SparkMerge:
        """Target rows paired with a source row (and meeting ``condition``): set columns to expressions."""
        return self._add(
            "when_matched_update", set=dict(set) if isinstance(set, Mapping) else set, condition=condition
        )

    def when_matched_update_all(self, condition: str | None = None) -> SparkMerge:
        """Matched rows take the source's columns by name (DuckDB's ``UPDATE BY NAME``); a source column
        the table does not have is refused (see :meth:`mere.table.merge.Merge.when_matched_update_all`)."""
        return self._add("when_matched_update_all", condition=condition)

    def when_matched_delete(self, condition: str | None = None) -> SparkMerge:
        """Delete matched target rows (meeting ``condition``)."""
        return self._add("when_matched_delete", condition=condition)

    def when_matched_do_nothing(self, condition: str | None = None) -> SparkMerge:
        """Leave matched rows (meeting ``condition``) as they are, so that later clauses skip them."""
        return self._add("when_matched_do_nothing", condition=condition)

    def when_not_matched_insert(self, values: Mapping[str, str], condition: str | None = None) -> SparkMerge:
        """Source rows with no target row: insert a row of these column -> expression values."""
        return self._add(
            "when_not_matched_insert",
            values=dict(values) if isinstance(values, Mapping) else values,
            condition=condition,
        )

    def when_not_matched_insert_all(self, condition: str | None = None) -> SparkMerge:
        """Source rows with no target row: insert them, columns by name (DuckDB's ``INSERT BY NAME``: missing
        columns are NULL); a source column the table does not have is refused (see
        :meth:`mere.table.merge.Merge.when_not_matched_insert_all`)."""
        return self._add("when_not_matched_insert_all", condition=condition)

    def when_not_matched_do_nothing(self, condition: str | None = None) -> SparkMerge:
        """Skip unmatched source rows (meeting ``condition``)."""
        return self._add("when_not_matched_do_nothing", condition=condition)

    def when_not_matched_by_source_update(
        self, set: Mapping[str, str], condition: str | None = None
    ) -> SparkMerge:
        """Refused: a Spark task sees only its own keys' target rows; use the local ``Table.merge``."""
        raise InvalidInput(f"{self.ref.name}: {_BY_SOURCE_REFUSED}")

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> SparkMerge:
        """Refused: a Spark task sees only its own keys' target rows; use the local ``Table.merge``."""
        raise InvalidInput(f"{self.ref.name}: {_BY_SOURCE_REFUSED}")

    # -- planning and running -----------------------------------------------------------------------

    def _plan(self) -> tuple[Table, _MergeJob, MergePlan]:
        """Open the table, pin its current version and check every clause on an empty source (no Spark job)."""
        if not self._job.clauses:
            raise InvalidInput(f"{self.ref.name}: a MERGE needs at least one WHEN clause")
        table = self._job.open()
        job = _replace(self._job, version=table.version)
        plan = MergePlan(job.build(table, job.schema.empty_table()))  # resolves and types every expression
        return table, job, plan

    def _distribute(self, table: Table, plan: MergePlan) -> tuple[Any, str, int]:
        """The Spark column of each source row's table bucket, its SQL text, and the number of tasks."""
        from pyspark.sql import functions as F

        spec = table.spec
        types = {f.name: f.dataType for f in self.source.schema.fields}
        cols, texts = [], []
        for key in spec.primary_key:
            src = plan.pairs[key]
            c, text = _column(src), f"{self._job.source_alias}.{src}"
            try:
                want = _spark_type(spec.schema.field(key).type)
            except InvalidInput:
                want = types[src]
            if types[src] != want:  # hash the key as the table stores it (a failed cast is NULL here and
                c = c.try_cast(want)  # an error in the task, as in a local MERGE)
                text = f"try_cast({text} AS {want.simpleString()})"
            cols.append(c)
            texts.append(text)
        default = int(self.spark.conf.get("spark.sql.shuffle.partitions", "200"))
        n = min(spec.buckets, self.partitions if self.partitions is not None else default)
        bucket = F.pmod(F.hash(*cols), F.lit(spec.buckets))
        return bucket, f"pmod(hash({', '.join(texts)}), {spec.buckets})", max(1, n)

    def explain(self) -> SparkMergeExplain:
        """How the MERGE will run (at the table's current version); no Spark job runs."""
        table, job, plan = self._plan()
        _, distribute_by, n = self._distribute(table, plan)
        return SparkMergeExplain(
            table.name,
            plan.merge.on.text,
            tuple(c.describe() for c in plan.merge.clauses),
            job.version,
            table.spec.buckets,
            n,
            distribute_by,
        )

    def _stage(self, table: Table, job: _MergeJob, plan: MergePlan) -> list[StagedMerge]:
        """Run the Spark job: every task stages its share; on any task's error the others' files go."""
        import pickle

        bucket, _, n = self._distribute(table, plan)
        shuffled = self.source.repartition(n, bucket.alias("__mere_bucket"))
        rows = shuffled.mapInArrow(job.run, "payload binary").collect()
        staged: list[StagedMerge] = []
        errors: list[tuple[Exception, str]] = []
        for row in rows:
            payload = pickle.loads(bytes(row[0]))
            if payload[0] == "staged":
                staged.append(payload[1])
            else:
                errors.append((payload[1], payload[2]))
        if errors:
            table.abort_merge(staged)
            exc, trace = errors[0]
            exc.add_note(f"raised in a Spark task of the MERGE into {table.name}:\n{trace.rstrip()}")
            raise exc
        return staged

    def execute(self) -> MergeMetrics:
        """Run the MERGE as one Spark job and one commit; nothing is committed when any task fails.

        A concurrent commit that changed rows the MERGE read (:class:`~mere.errors.CommitConflict`) runs
        the job again against the new version, up to ``attempts`` times in all.
        """
        import time

        from mere.errors import CommitConflict

        if self._state != "open":
            raise InvalidInput(f"{self.ref.name}: this MERGE was executed; build a new one")
        started = time.perf_counter()
        table, job, plan = self._plan()  # bad clauses fail here, before any Spark job
        self._state = "executed"
        check_workers(self.spark)
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                table, job, plan = self._plan()
            staged = self._stage(table, job, plan)
            try:
                metrics = table.commit_merge(staged)
            except CommitConflict:
                if attempt == self.attempts:
                    raise
                continue
            return _replace(metrics, seconds=time.perf_counter() - started)
        raise AssertionError("unreachable")  # pragma: no cover


def merge(
    spark: Any,
    source: Any,
    table: str,
    *,
    on: str | None = None,
    source_alias: str = "s",
    target_alias: str = "t",
    warehouse: str | None = None,
    catalog: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    partitions: int | None = None,
    attempts: int = MERGE_ATTEMPTS,
) -> SparkMerge:
    """MERGE INTO a mere table from a Spark DataFrame: add WHEN clauses, then ``execute()``::

        (merge(spark, changes, "sales.orders", warehouse="s3://bucket/wh")
           .when_matched_update(set={"qty": "t.qty + s.qty"}, condition="s.ts > t.ts")
           .when_matched_delete(condition="s.op = 'D'")
           .when_not_matched_insert_all()
           .execute())

    The same statement as :meth:`mere.Table.merge`, distributed: the driver pins the table's current
    version and checks every clause (on an empty source, so a bad expression fails before any Spark job);
    the source is repartitioned by the table's bucket of its key (Spark's ``pmod(hash(key), N)``, which is
    mere's bucket function), so all source rows of a key reach one task; each task evaluates the MERGE
    on its rows against the pinned version, reading only the target rows of its keys, and writes files;
    the driver commits every task's files as one version. A task's error (such as
    :class:`~mere.errors.MergeConflict`) is raised on the driver after the other tasks' files are deleted;
    a :class:`~mere.errors.CommitConflict` runs the job again at the new version (``attempts`` in all).
    ``partitions`` is the number of Spark tasks (default: the table's buckets, at most
    ``spark.sql.shuffle.partitions``); a task holds its source rows in memory. ``WHEN NOT MATCHED BY
    SOURCE`` is refused: use the local ``Table.merge``.
    """
    ref = TableRef.from_options(_location(table, warehouse, catalog, storage_options))
    return SparkMerge(spark, source, ref, on, source_alias, target_alias, partitions, attempts)
