"""Whole-database CDC on Spark: one stream of change events for many tables, each micro-batch committed to
every table it touches in one catalog transaction (see :mod:`mere.integrations.cdc_sync` for the
semantics)::

    from mere.integrations.spark import sync_database

    events = spark.readStream.text("/landing/cdc")           # or Kafka: value (and key) columns
    query = sync_database(events, warehouse="/data/wh", namespace="shop", format="debezium",
                          checkpoint_location="/chk/shop", buckets=4)
    query.awaitTermination()

The envelopes are parsed in the JVM (``from_json``: row images as ``map<string,string>``, values as their
JSON text), handed to Python as one Arrow table per micro-batch, and applied by
:func:`mere.integrations.cdc_sync.sync_batch` with the idempotency key
``mere-sync:<query id>:<batch id>``: Spark replays a batch after a failure or restart with the same id,
and the replay changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mere.errors import InvalidInput
from mere.integrations.cdc_sync import (
    EVENT_SCHEMA,
    FORMATS,
    TOMBSTONE,
    UNAVAILABLE_VALUE,
    SyncOptions,
    SyncResult,
    sync_batch,
)
from mere.integrations.spark.foreach import query_id
from mere.table.catalog import Catalog, connect

KEY_PREFIX = "mere-sync"

_DEBEZIUM_FIELDS = "struct<field:string,type:string,name:string,parameters:map<string,string>>"
_DEBEZIUM_SOURCE = "struct<schema:string,table:string,lsn:bigint,ts_ms:bigint>"
_DEBEZIUM_BODY = (
    f"before:map<string,string>,after:map<string,string>,op:string,ts_ms:bigint,source:{_DEBEZIUM_SOURCE},"
    "transaction:struct<id:string>,status:string,id:string"
)
DEBEZIUM_JSON_SCHEMA = (
    f"struct<schema:struct<fields:array<struct<field:string,type:string,name:string,"
    f"fields:array<{_DEBEZIUM_FIELDS}>>>>,payload:struct<{_DEBEZIUM_BODY}>,{_DEBEZIUM_BODY}>"
)
"""What ``from_json`` reads of a Debezium envelope (with or without the JSON converter's wrapping)."""

_WAL2JSON_COLUMN = "struct<name:string,type:string,value:string>"
WAL2JSON_JSON_SCHEMA = (
    f"struct<action:string,xid:bigint,schema:string,table:string,lsn:string,columns:array<{_WAL2JSON_COLUMN}>,"
    f"identity:array<{_WAL2JSON_COLUMN}>,pk:array<struct<name:string,type:string>>>"
)
"""What ``from_json`` reads of a wal2json ``format-version`` 2 record."""

_BARE_VALUE = r'((?<!\\)"value"\s*:\s*)(-?[0-9][0-9.eE+-]*)'
_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def parse_events(stream_df: Any, format: str = "debezium") -> Any:
    """The events of a DataFrame of JSON change events, shaped as
    :data:`~mere.integrations.cdc_sync.EVENT_SCHEMA` (parsed by Spark, in the JVM).

    Args:
        stream_df: A (streaming or batch) DataFrame with a ``value`` column (string or binary: one JSON
            event), and for Debezium optionally a ``key`` column (the Kafka message key, whose fields are
            the primary key).
        format: ``"debezium"`` or ``"wal2json"``.

    Returns:
        The DataFrame of events.

    Raises:
        InvalidInput: An unknown format, or no ``value`` column.
    """
    from pyspark.sql import functions as F

    if format not in FORMATS:
        raise InvalidInput(f"sync_database: format must be one of {FORMATS}, got {format!r}")
    if "value" not in stream_df.columns:
        raise InvalidInput(
            f"sync_database: the stream needs a 'value' column of JSON events; it has {stream_df.columns}"
        )
    raw = F.col("value").cast("string")
    if format == "debezium":
        message_key = (
            F.col("key").cast("string") if "key" in stream_df.columns else F.lit(None).cast("string")
        )
        parsed = stream_df.select(
            raw.alias("raw"), F.from_json(raw, DEBEZIUM_JSON_SCHEMA).alias("e"), message_key.alias("k")
        )
        e = F.col("e")

        def part(name: str) -> Any:
            return F.coalesce(e["payload"][name], e[name])

        source = part("source")
        table = F.when(
            source["schema"].isNotNull(), F.concat_ws(".", source["schema"], source["table"])
        ).otherwise(source["table"])
        image = F.expr("try_element_at(filter(e.schema.fields, f -> f.field IN ('after', 'before')), 1)")

        def connect_type(c: Any) -> Any:
            # a binary decimal carries its precision and scale as parameters (see cdc_sync._connect_type)
            name = F.coalesce(c["name"], c["type"])
            scale = c["parameters"]["scale"]
            decimal = F.concat(
                name,
                F.lit("("),
                F.coalesce(c["parameters"]["connect.decimal.precision"], F.lit("")),
                F.lit(","),
                scale,
                F.lit(")"),
            )
            return F.when((name == F.lit(_CONNECT_DECIMAL)) & scale.isNotNull(), decimal).otherwise(name)

        types = F.transform(image["fields"], lambda c: F.struct(c["field"], connect_type(c)))
        whole = F.from_json(F.col("k"), "map<string,string>")
        inner = F.from_json(whole["payload"], "map<string,string>")
        key = F.map_keys(F.when(inner.isNotNull(), inner).otherwise(whole))
        status = part("status")
        boundary = F.when(status == "BEGIN", F.lit("B")).when(status == "END", F.lit("C"))
        marker = boundary.isNotNull() & part("id").isNotNull()  # a transaction metadata event
        tombstone = F.col("raw").isNull() | (F.trim(F.col("raw")) == F.lit("null"))  # Kafka's null value
        return parsed.select(
            F.when(~marker, table).alias("table"),
            F.when(tombstone, F.lit(TOMBSTONE)).when(marker, boundary).otherwise(part("op")).alias("op"),
            F.when(~marker, F.coalesce(source["lsn"], part("ts_ms"))).alias("seq"),
            part("before").alias("before"),
            part("after").alias("after"),
            F.map_from_entries(types).alias("types"),
            F.when(~marker & ~tombstone, key).alias("key"),
            F.col("raw"),
            F.when(marker, part("id")).otherwise(part("transaction")["id"]).alias("txn"),
        )
    # Spark reads a bare JSON number into a string field through a double (numeric(38,10) and bigint
    # values near 2^63 would lose digits): wal2json's values are quoted first, so each keeps its exact text.
    # Inside a JSON string every '"' is escaped, so the pattern only meets the records' own "value" keys.
    exact = F.regexp_replace(raw, _BARE_VALUE, '$1"$2"')
    parsed = stream_df.select(raw.alias("raw"), F.from_json(exact, WAL2JSON_JSON_SCHEMA).alias("e"))
    e = F.col("e")
    lsn = F.split(e["lsn"], "/")
    seq = F.when(
        e["lsn"].rlike("^[0-9A-Fa-f]+/[0-9A-Fa-f]+$"),
        F.conv(lsn[0], 16, 10).cast("bigint") * F.lit(1 << 32) + F.conv(lsn[1], 16, 10).cast("bigint"),
    )

    def entries(array: Any, part: str) -> Any:
        return F.map_from_entries(F.transform(array, lambda c: F.struct(c["name"], c[part])))

    table = F.when(e["schema"].isNotNull(), F.concat_ws(".", e["schema"], e["table"])).otherwise(e["table"])
    # The new image's types, then the old image's for columns the new one leaves out (an unchanged
    # TOASTed value of a REPLICA IDENTITY FULL table is in the old image only), as the Python parser.
    none = F.array().cast(f"array<{_WAL2JSON_COLUMN}>")
    shown = F.transform(F.coalesce(e["columns"], none), lambda c: c["name"])
    typed = F.when(
        F.coalesce(e["columns"], e["identity"]).isNotNull(),
        F.concat(
            F.coalesce(e["columns"], none),
            F.filter(F.coalesce(e["identity"], none), lambda c: ~F.array_contains(shown, c["name"])),
        ),
    )
    return parsed.select(
        table.alias("table"),
        e["action"].alias("op"),
        seq.alias("seq"),
        entries(e["identity"], "value").alias("before"),
        entries(e["columns"], "value").alias("after"),
        entries(typed, "type").alias("types"),
        F.transform(e["pk"], lambda p: p["name"]).alias("key"),
        F.col("raw"),
        e["xid"].cast("string").alias("txn"),
    )


def _catalog(catalog: Any, warehouse: str | None, storage_options: Mapping[str, str] | None) -> Catalog:
    if isinstance(catalog, Catalog):
        return catalog
    if warehouse is None:
        raise InvalidInput("sync_database: give warehouse= (and catalog= a URL), or catalog= a mere Catalog")
    return connect(warehouse, catalog=catalog, storage_options=dict(storage_options or {}))


def sync_batches(
    *,
    namespace: str,
    catalog: Any = None,
    warehouse: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    query: str | None = None,
    on_batch: Callable[[int, SyncResult], None] | None = None,
    **options: Any,
) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function of a sync: parsed events (:func:`parse_events`) in, one catalog
    transaction per micro-batch, keyed ``mere-sync:<query id>:<batch id>``.

    Args:
        namespace: The namespace of the synced tables.
        catalog: A :class:`mere.Catalog`, or the catalog URL (with ``warehouse``).
        warehouse: The warehouse (when ``catalog`` is a URL or None).
        storage_options: Storage options of the warehouse.
        query: A name for the query in the idempotency keys (default: the id Spark keeps in the
            checkpoint).
        on_batch: Called with each batch id and its result (metrics, tests).
        **options: :class:`~mere.integrations.cdc_sync.SyncOptions` fields (``buckets``,
            ``partition_by``, ``primary_keys``, ``properties``, ``overrides``, ``on_error``,
            ``quarantine_table``, ``no_key``, ``sequence_column``, ``unavailable_value``,
            ``pending_table``).

    Returns:
        A function (DataFrame, batch id) -> None.

    Raises:
        InvalidInput: Bad options.
    """
    settings = SyncOptions(namespace, **options)
    state: dict[str, Catalog] = {}

    def run(df: Any, batch_id: int) -> None:
        cat = state.get("cat")
        if cat is None:
            cat = state["cat"] = _catalog(catalog, warehouse, storage_options)
        events = df.toArrow()
        key = f"{KEY_PREFIX}:{query or query_id(df)}:{batch_id}"
        result = sync_batch(cat, events.select(EVENT_SCHEMA.names), settings, key)
        if on_batch is not None:
            on_batch(batch_id, result)

    return run


def sync_database(
    stream_df: Any,
    *,
    namespace: str,
    catalog: Any = None,
    warehouse: str | None = None,
    format: str = "debezium",
    checkpoint_location: str | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    buckets: int | None = None,
    partition_by: Mapping[str, Sequence[str]] | None = None,
    primary_keys: Mapping[str, Sequence[str]] | None = None,
    properties: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    on_error: str = "stop",
    quarantine_table: str | None = None,
    no_key: str = "refuse",
    pending_table: str | None = None,
    unavailable_value: str | None = UNAVAILABLE_VALUE,
) -> Any:
    """Sync a whole source database into a catalog namespace from one stream of change events.

    Each micro-batch's events are routed to their tables; missing tables are created from the events'
    columns, types and primary key; added columns and widened types evolve the tables; rows are ordered by
    the source's log position (the tables' ``sequence_by``); and every table's change commits in one
    catalog transaction keyed by the query id and batch id, so a restarted query never applies a batch
    twice. Bad events stop the query with :class:`~mere.integrations.cdc_sync.CdcEventError` (nothing
    of the batch committed) or, with ``on_error="quarantine"``, go to the quarantine table. See
    :mod:`mere.integrations.cdc_sync`.

    Args:
        stream_df: A streaming DataFrame with a ``value`` column of JSON events (and, for Debezium from
            Kafka, optionally ``key``).
        namespace: The namespace the tables live in.
        catalog: A :class:`mere.Catalog`, or the catalog URL (with ``warehouse``).
        warehouse: The warehouse (when ``catalog`` is a URL or None).
        format: ``"debezium"`` or ``"wal2json"`` (``format-version`` 2, with ``include-lsn`` and
            ``include-pk``).
        checkpoint_location: Spark's checkpoint (needed for exactly-once across restarts).
        trigger: ``DataStreamWriter.trigger`` arguments (``{"availableNow": True}``, ...).
        query_name: The streaming query's name.
        storage_options: Storage options of the warehouse.
        buckets: Buckets of new tables.
        partition_by: Partition columns of new tables, by source table.
        primary_keys: Key columns by source table (where events carry none).
        properties: Table properties of new tables (compaction, retention: maintenance as usual).
        overrides: Per source table: ``buckets``, ``partition_by``, ``primary_key``, ``properties``,
            ``name``.
        on_error: ``"stop"`` or ``"quarantine"``.
        quarantine_table: The quarantine table's name in the namespace (default ``cdc_quarantine``).
        no_key: ``"refuse"`` tables without primary key or ``"append"`` their events to change logs.
        pending_table: The table holding the events of source transactions whose end has not arrived
            (default ``cdc_pending``).
        unavailable_value: Debezium's placeholder for an unchanged TOASTed value (None: none).

    Returns:
        The started ``StreamingQuery``.

    Raises:
        InvalidInput: Bad options (before the query starts).
    """
    extra: dict[str, Any] = {}
    if quarantine_table is not None:
        extra["quarantine_table"] = quarantine_table
    if pending_table is not None:
        extra["pending_table"] = pending_table
    run = sync_batches(
        namespace=namespace,
        catalog=catalog,
        warehouse=warehouse,
        storage_options=storage_options,
        buckets=buckets,
        partition_by=dict(partition_by or {}),
        primary_keys=dict(primary_keys or {}),
        properties=dict(properties or {}),
        overrides=dict(overrides or {}),
        on_error=on_error,
        no_key=no_key,
        unavailable_value=unavailable_value,
        **extra,
    )
    writer = parse_events(stream_df, format).writeStream.foreachBatch(run)
    if checkpoint_location is not None:
        writer = writer.option("checkpointLocation", checkpoint_location)
    if trigger is not None:
        writer = writer.trigger(**trigger)
    if query_name is not None:
        writer = writer.queryName(query_name)
    return writer.start()


__all__ = [
    "DEBEZIUM_JSON_SCHEMA",
    "KEY_PREFIX",
    "WAL2JSON_JSON_SCHEMA",
    "parse_events",
    "sync_batches",
    "sync_database",
]
