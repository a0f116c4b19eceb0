"""The data source's options: their names, how their values read, and the table they name.

Values read by the rules of :mod:`mere.options` (booleans, byte sizes, column lists, ``as_of``), as on the
command line and in the Python API; an option given as blank text is not given.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mere
from mere.concurrency import default_threads, positive_int
from mere.errors import InvalidInput
from mere.options import parse_as_of, parse_bool, parse_bytes, parse_columns
from mere.table.scan import OPEN_COST_BYTES, TASK_BYTES
from mere.table.table import Table

FORMAT_NAME = "mere"
"""The data source's name: ``spark.read.format("mere")``."""

ENV_WAREHOUSE = "MERE_WAREHOUSE"
ENV_CATALOG = "MERE_CATALOG"

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
STREAM_READ_OPTIONS = ("readchangefeed", "startingversion", "maxversionspertrigger", "consumer")
# "partitionby": what DataFrameWriter.partitionBy(...) passes through the hook (see install_partition_hook)
CREATE_OPTIONS = (
    "primary_key",
    "partition_by",
    "partitionby",
    "buckets",
    "cdc_column",
    "merge_operators",
    "sequence_by",
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


def lower_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options given, names in lower case (Spark's own options are case-insensitive), None dropped."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def check_options(options: Mapping[str, str]) -> None:
    """Refuse option names mere does not read (a typo would otherwise be ignored). Read and write options
    are both accepted either way: one temporary view's options serve its SELECTs and INSERTs."""
    allowed = {*LOCATION_OPTIONS, *SPARK_OPTIONS, *READ_OPTIONS, *STREAM_READ_OPTIONS, *WRITE_OPTIONS}
    for key in lower_options(options):
        if key in allowed or key.startswith("storage."):
            continue
        close = difflib.get_close_matches(key, sorted(allowed), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidInput(
            f"unknown option {key!r} for the mere data source{hint} It reads "
            f"{', '.join(sorted(allowed - set(SPARK_OPTIONS)))} and storage.<key>."
        )


# ---------------------------------------------------------------------------------------------
# Values


def column_list_option(name: str, value: str | None) -> list[str] | None:
    """A list of column names (:func:`mere.options.parse_columns`); None when not given."""
    return parse_columns(value, f"option {name!r}")


def int_option(name: str, value: str | None) -> int | None:
    """A positive integer; None when not given."""
    return positive_int(value, f"option {name!r}")


def bool_option(name: str, value: str | None, default: bool = False) -> bool:
    """A boolean (:func:`mere.options.parse_bool`); ``default`` when not given."""
    return parse_bool(value, f"option {name!r}", default)


def size_option(name: str, value: str | None, minimum: int = 1) -> int | None:
    """A byte size (:func:`mere.options.parse_bytes`: ``134217728``, ``128m``, ``1g``); None when not given."""
    return parse_bytes(value, f"option {name!r}", minimum)


def json_object_option(name: str, value: str | None) -> dict[str, Any] | None:
    """A JSON object; None when not given."""
    if value is None or not value.strip():
        return None
    try:
        parsed = json.loads(value, object_pairs_hook=_unique_names)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"option {name!r} must be a JSON object, got {value!r}") from e
    except ValueError as e:  # a name given twice
        raise InvalidInput(f"option {name!r}: {e}, in {value!r}") from None
    if not isinstance(parsed, dict):
        raise InvalidInput(f"option {name!r} must be a JSON object, got {value!r}")
    return parsed


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [k for k, _ in pairs]
    twice = sorted({k for k in names if names.count(k) > 1})
    if twice:
        raise ValueError(f"{twice} named more than once")
    return dict(pairs)


def merge_operators_option(name: str, value: str | None) -> dict[str, Any] | str | None:
    """Option ``merge_operators``: a JSON object of column -> operator, or a merge engine's name
    (``first_row``, bare or as a JSON string); None when not given."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = text  # a bare name: create_table checks it is an engine
    if isinstance(parsed, str):
        return parsed
    if not isinstance(parsed, dict):
        raise InvalidInput(
            f"option {name!r} must be a JSON object of column -> operator or a merge engine "
            f"('first_row'), got {value!r}"
        )
    return parsed


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
        open_cost = size_option("open_cost_bytes", opts.get("open_cost_bytes"), minimum=0)
        return PartitionSizing(
            size_option("max_partition_bytes", opts.get("max_partition_bytes")) or TASK_BYTES,
            OPEN_COST_BYTES if open_cost is None else open_cost,
            int_option("min_partitions", opts.get("min_partitions")) or default_threads(),
        )


# ---------------------------------------------------------------------------------------------
# Time travel


def version_option(value: str | None) -> int | None:
    """Option ``version`` (or ``versionAsOf``): an integer; None when not given."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as e:
        raise InvalidInput(f"option 'version' must be an integer, got {value!r}") from e


def naive_time(value: Any) -> dt.datetime | None:
    """``value`` as a datetime when it names a time without a zone (by :func:`mere.options.parse_as_of`:
    ISO text without an offset, or a naive datetime); None otherwise."""
    try:
        when = parse_as_of(value)
    except InvalidInput:
        return None
    return when if when.tzinfo is None else None


def as_of_option(value: str | None) -> Any:
    """Option ``as_of`` (or ``timestampAsOf``) for a read planned in this process: a time without a zone in
    this process's local zone, anything else as given (the table reads it by the one rule)."""
    if value is None:
        return None
    naive = naive_time(value)
    # A time without a zone is in Spark's session zone, as Spark reads its own. The planner process gets
    # no session conf: it takes its local zone, which is the JVM's default, the session zone unless set;
    # read tasks check the version against the zone the session sets (MereReader._check_session_zone).
    return value if naive is None else naive.astimezone()


def read_point(opts: Mapping[str, str]) -> tuple[int | None, Any, str | None]:
    """The (version, as_of, tag) a read's options name."""
    tag = opts.get("tag")
    return (
        version_option(_one_spelling(opts, "version", "versionasof")),
        as_of_option(_one_spelling(opts, "as_of", "timestampasof")),
        tag if tag else None,
    )


def _one_spelling(opts: Mapping[str, str], *names: str, blank_given: bool = True) -> str | None:
    """The value of an option that has several names; two names given different values are refused.
    ``blank_given=False`` counts an empty value as not given (the table: ``save()`` passes no path as "")."""
    given = {name: opts[name] for name in names if opts.get(name) is not None and (blank_given or opts[name])}
    if len(set(given.values())) > 1:
        raise InvalidInput(f"options {sorted(given)} name one thing and disagree: {given}; give one of them")
    return next(iter(given.values()), None)


_OFFSET_ZONE = re.compile(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")


def session_zone(name: str) -> dt.tzinfo | None:
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


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def exact_micros(when: dt.datetime) -> int:
    """Microseconds since the epoch of an aware datetime, in integer arithmetic."""
    return (when - _EPOCH) // dt.timedelta(microseconds=1)


def session_as_of(spark: Any, value: Any) -> Any:
    """``as_of`` for a read planned on the driver: a time without a zone in the session's time zone."""
    naive = naive_time(value)
    if naive is None:
        return value
    name = str(spark.conf.get("spark.sql.session.timeZone"))
    zone = session_zone(name)
    if zone is None:
        raise InvalidInput(
            f"as_of {value!r} has no time zone and Python does not know the session time zone {name!r}; "
            "give as_of with an explicit offset, such as '2026-11-21T08:00:00+00:00'"
        )
    return naive.replace(tzinfo=zone)


# ---------------------------------------------------------------------------------------------
# The table an operation names


@dataclass(frozen=True)
class TableRef:
    """Where a table lives; picklable, so workers can open it themselves."""

    name: str
    warehouse: str
    catalog: str | None = field(default=None, repr=False)  # a URL may hold a password
    storage_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold secrets

    @staticmethod
    def from_options(options: Mapping[str, str]) -> TableRef:
        """The table the options name: ``table`` (or the path of ``load``/``save``), ``warehouse`` (or
        ``$MERE_WAREHOUSE``), ``catalog`` (or ``$MERE_CATALOG``) and ``storage.<key>`` options."""
        opts = lower_options(options)
        name = _one_spelling(opts, "table", "path", blank_given=False)
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
        """The table's catalog, one per process and location (Spark reuses Python workers across tasks)."""
        key = (self.warehouse, self.catalog, self.storage_options)
        with _cache_lock:
            cat = _catalogs.get(key)
            if cat is None:
                cat = _catalogs[key] = mere.connect(
                    self.warehouse, catalog=self.catalog, storage_options=dict(self.storage_options)
                )
            return cat

    def open(self) -> Table:
        """The table, as it is now."""
        return self.connect().table(self.name)


_catalogs: dict[tuple[Any, ...], mere.Catalog] = {}
_cache_lock = threading.Lock()


def location_options(
    table: str, warehouse: str | None, catalog: str | None, storage_options: Mapping[str, str] | None
) -> dict[str, str]:
    """Data source options naming a table, from the keyword arguments of compact(), merge() and read_table()."""
    given = {"table": table, **{f"storage.{k}": str(v) for k, v in (storage_options or {}).items()}}
    if warehouse is not None:
        given["warehouse"] = warehouse
    if catalog is not None:
        given["catalog"] = catalog
    return given
