"""The native route of :func:`read_table`: splits with nothing to merge read by Spark's own Parquet reader.

The others are read by the mere data source, and mere filters are translated exactly into Spark columns.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from mere import expr as E
from mere.integrations.spark.options import (
    FORMAT_NAME,
    TableRef,
    check_options,
    location_options,
    lower_options,
    session_as_of,
)
from mere.integrations.spark.session import is_registered, register
from mere.integrations.spark.types import native_type, spark_column, spark_schema
from mere.read.reader import stored_rows_are_merged
from mere.table.catalog_transaction import CatalogSnapshot, pinned_version

_SPARK_OPS = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _spark_literal_ok(value: Any, column_type: pa.DataType) -> bool:
    if pa.types.is_floating(column_type) or pa.types.is_timestamp(column_type):
        return False  # NaN ordering and time zones: leave those to the merged route
    return value is None or (
        isinstance(value, (bool, int, str, bytes, Decimal, dt.date)) and not isinstance(value, dt.datetime)
    )


def spark_filter(expr: E.Expr, schema: pa.Schema) -> Any | None:
    """A bound mere filter as a Spark Column with the same result on every row.

    None when some part has no exact Spark equivalent (float or timestamp literals, pyarrow expressions).
    """
    from pyspark.sql import functions as F

    col = spark_column

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
    snapshot: CatalogSnapshot | None = None,
) -> Any:
    """A Spark DataFrame of a mere table, splits with nothing to merge read by Spark's own Parquet reader.

    The other splits are merged by mere's data source: one snapshot, one schema. A split needs no merge when
    its stored rows already are its merged rows (see :func:`mere.read.reader.stored_rows_are_merged`): a
    compacted split, or one written by a single upsert without deletes; every file of a table without key.
    After :func:`compact`, the whole table is read natively. Both parts read the same version (pinned here),
    and Spark's own filters may prune the native part freely (its rows need no merge). Columns of types
    Spark's Parquet reader returns differently (unsigned integers, nanosecond timestamps) turn the route off.
    Registers the data source in the session first if needed (see :func:`register`).

    Args:
        spark: The SparkSession.
        table: The table's name, ``namespace.table``.
        warehouse: The warehouse URI (default: the environment variable ``MERE_WAREHOUSE``).
        catalog: The catalog URL (default: ``MERE_CATALOG``, else the SQLite catalog inside the warehouse).
        storage_options: Options of the storage (such as S3 endpoint and credentials).
        columns: The columns to read (default: all).
        filter: mere's filter language, evaluated by mere for the merged part and translated exactly for the
            native part (or, where it cannot be, such as float or timestamp literals, every split goes through
            mere).
        version: The version to read (default: the newest).
        as_of: A point in time to read the table at. An ``as_of`` (or option ``as_of``/``timestampAsOf``)
            without a zone is read in the session time zone (``spark.sql.session.timeZone``), as Spark reads
            its own timestamps; mere's Python API reads it as UTC.
        native: None uses the native route for local warehouses; True also for object stores, whose files
            Spark then reads as ``s3a://`` (the session needs hadoop-aws and credentials configured); False
            never.
        options: Options passed to the mere data source (``max_partition_bytes``, ``storage.<key>``, ...).
        snapshot: A catalog snapshot (``cat.snapshot()``) whose version of the table to read (not with
            ``version``, ``as_of`` or ``tag``): DataFrames of several tables read at one read point.

    Returns:
        The DataFrame.

    Raises:
        InvalidInput: An unknown option, no warehouse, or an invalid read argument (as :meth:`mere.Table.scan`
            raises it).
        NoSuchTable: There is no such table.
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
        NotInstalled: Spark's Python workers cannot import mere (when the data source is registered here).
    """
    if not is_registered(spark):
        register(spark)  # the registered source runs in the interpreter check_workers tests
    given = location_options(table, warehouse, catalog, storage_options)
    given.update({str(k): str(v) for k, v in (options or {}).items()})
    check_options(given)
    given = lower_options(given)
    ref = TableRef.from_options(given)
    t = ref.open()
    text = given.get("as_of", given.get("timestampasof"))
    if as_of is None and text is not None:  # the option, as load() takes it (epoch seconds or ISO time)
        as_of = text
    if snapshot is not None:
        version = pinned_version(snapshot, t, version, as_of, given.get("tag") or None)
    # On the driver the session's zone is known: a time without a zone is read in it, as Spark reads its own.
    as_of = session_as_of(spark, as_of)
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
        reader = spark.read.format(FORMAT_NAME).schema(target).options(**given)
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
    native_df = native_df.select(*[spark_column(c) for c in target.fieldNames()])
    if len(clean) == len(splits):
        return native_df
    return native_df.unionByName(merged(only=True))
