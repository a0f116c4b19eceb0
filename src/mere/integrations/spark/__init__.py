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
applied in order within a Spark partition; changes to one key must sit in one partition in order, unless
the table has ``sequence_by``: then the version with the highest sequence wins whatever the partitions,
the row order and the micro-batch it arrives in (duplicates and replays of a stream included).
Write options: ``operation`` (upsert, append, delete, overwrite), ``partition`` (JSON object: overwrite
only that partition), ``partitionOverwriteMode`` (``static`` or ``dynamic``; default: the session's
``spark.sql.sources.partitionOverwriteMode``, ``static`` unless set: in dynamic mode an overwrite replaces
only the partitions the DataFrame has rows in, as Delta and Iceberg do), ``idempotency_key`` (a rerun with the same key is not applied twice), ``flush_rows``
(rows a task buffers before it writes files, default 250,000), and to create
a missing table: ``primary_key``, ``partition_by`` (comma-separated), ``buckets``, ``cdc_column``,
``merge_operators`` (JSON object of column -> operator, or ``first_row``), ``sequence_by`` (comma-separated), or ``create`` = ``true`` for a table without key. Without one of
them a missing table is :class:`~mere.errors.NoSuchTable` (a typo never creates a table); given for an
existing table they must describe it. ``.partitionBy(...)`` names ``partition_by`` once :func:`register`
(or :func:`local_session`) installed :func:`install_partition_hook`; without it Spark itself refuses it.
Unknown option names are refused with a suggestion.

Streaming: ``df.writeStream.format("mere").option("checkpointLocation", ...).start("sales.orders")``
upserts each micro-batch in one commit whose idempotency key is the query id (stable across restarts from
the same checkpoint) plus the batch id, so a replayed batch is applied once.

Update mode: ``df.writeStream.format("mere").outputMode("update")`` into a key table upserts each micro-batch
with the same exactly-once key (Spark refuses update mode for a Python data source in the JVM; the
``DataStreamWriter`` wrapper that :func:`register` and :func:`local_session` install runs it through
``foreachBatch``). Complete mode replaces the table with each batch's result.

Streaming reads: ``spark.readStream.format("mere").option("readChangeFeed", "true").load("sales.orders")``
streams the table's change feed, one version range per micro-batch (options ``startingVersion``,
``maxVersionsPerTrigger``); see :mod:`mere.integrations.spark.stream`
(also importable as ``mere.integrations.spark_streaming``).

Compaction: ``compact(spark, "sales.orders", warehouse=...)`` folds each split's files in its own Spark task
and commits once; reads of a compacted table cost Spark much less (fewer rows and files to decode).

MERGE: ``merge(spark, source_df, "sales.orders", warehouse=...)`` returns a builder with the WHEN clauses of
:meth:`mere.Table.merge`; ``execute()`` repartitions the source by the table's bucket of the key, each task
merges its rows against one pinned version and stages files, and the driver commits once (``WHEN NOT
MATCHED BY SOURCE`` needs the local ``Table.merge``). ``execute(idempotency_key=...)`` commits it at most
once.

foreachBatch: ``batch_key(df, batch_id)`` is an idempotency key per micro-batch (the query id Spark keeps
in the checkpoint, and the batch id): writes given it inside ``foreachBatch`` commit once even when Spark
replays the batch after a failure (see :mod:`mere.integrations.spark.foreach`).

SQL text: ``sql(spark, "MERGE INTO sales.orders t USING changes s ON ... WHEN ...", warehouse=...)`` runs
MERGE INTO, UPDATE and DELETE (``mere.sql``'s parser, the distributed MERGE) and returns the metrics as a
one-row DataFrame; ``SELECT ... FROM sales.orders VERSION AS OF 3`` and ``DESCRIBE HISTORY sales.orders``
too (see :mod:`mere.integrations.spark.sql`). ``explain(df)`` shows what mere prunes in a DataFrame's mere
reads, which Spark's ``EXPLAIN`` cannot show for a Python data source.

Spark SQL: ``CREATE TABLE orders (...) USING mere OPTIONS (warehouse '...', table 'sales.orders',
primary_key 'order_id')`` (or without a column list, to bind an existing table), ``CREATE TABLE ... AS
SELECT`` and ``df.write.format("mere").saveAsTable(...)`` create or bind the mere table; ``SELECT``,
``INSERT INTO`` and ``INSERT OVERWRITE`` then read and write it, each statement at the newest version, and
``DROP TABLE`` removes Spark's entry only. :func:`describe` shows what ``SHOW TBLPROPERTIES`` cannot. See
:mod:`mere.integrations.spark.ddl` for what Spark lets a Python source see of its catalog.
``CREATE TEMPORARY VIEW orders USING mere OPTIONS (table 'sales.orders', warehouse '...')`` or
``df.createOrReplaceTempView("orders")`` also work, pinned to the version planned first.

Modules (each imports only those above it in this list; this package re-exports the public names):
``compat`` (the PySpark needed), ``options`` (option names and values, the table an operation names),
``types`` (Arrow and Spark types, batches cast to a Spark schema), ``source`` (batch reads), ``sink``
(batch and stream writes, the ``.partitionBy`` hook), ``stream`` (change-feed stream reads), ``ddl``
(Spark catalog tables: ``CREATE TABLE``, CTAS, ``saveAsTable``, :func:`describe`), ``datasource`` (:class:`MereDataSource`), ``session`` (``local_session``, ``register``,
``check_workers``), ``native`` (``read_table``), ``merge`` (``merge``, :class:`SparkMerge`),
``compact``, ``foreach`` (``batch_key``, ``query_id``), ``explain`` (``explain``), ``sql`` (``sql``) and
``sync`` (``sync_database``: a whole source database's change stream, one catalog transaction per
micro-batch; see :mod:`mere.integrations.cdc_sync`).
"""

from __future__ import annotations

# The PySpark check comes first: without PySpark, importing this package is one NotInstalled.
from mere.integrations.spark.compat import (
    SCAN_SCOPED_READS,
    SPARK_VERSION,
)

# isort: split
from mere.integrations.spark.compact import compact
from mere.integrations.spark.datasource import MereDataSource
from mere.integrations.spark.ddl import BINDING_KEY, DDL_OPTIONS, describe, install_ddl_hook
from mere.integrations.spark.explain import MereScan, Pruning, SparkExplain, explain
from mere.integrations.spark.foreach import batch_key, query_id
from mere.integrations.spark.merge import (
    MERGE_ATTEMPTS,
    SparkMerge,
    SparkMergeExplain,
    merge,
)
from mere.integrations.spark.native import read_table, spark_filter
from mere.integrations.spark.options import (
    CREATE_OPTIONS,
    ENV_CATALOG,
    ENV_WAREHOUSE,
    LOCATION_OPTIONS,
    READ_OPTIONS,
    SPARK_OPTIONS,
    STREAM_READ_OPTIONS,
    WRITE_OPTIONS,
    PartitionSizing,
    TableRef,
    check_options,
)
from mere.integrations.spark.session import (
    WORKERS_HINT,
    check_workers,
    local_session,
    register,
)
from mere.integrations.spark.sink import (
    FLUSH_BYTES,
    FLUSH_ROWS,
    OVERWRITE_MODE_CONF,
    OVERWRITE_MODES,
    STREAM_QUERY_ID_PROPERTY,
    WRITE_OPERATIONS,
    MereCommitMessage,
    MereStreamWriter,
    MereWriter,
    install_partition_hook,
)
from mere.integrations.spark.source import (
    MerePushdownReader,
    MereReader,
    SplitPartition,
    translate_filter,
)
from mere.integrations.spark.sql import CATALOG_CONF, HISTORY_SCHEMA, METRICS_SCHEMA, WAREHOUSE_CONF, sql
from mere.integrations.spark.sync import parse_events, sync_batches, sync_database
from mere.integrations.spark.types import native_type, spark_schema

__all__ = [
    "BINDING_KEY",
    "CATALOG_CONF",
    "CREATE_OPTIONS",
    "DDL_OPTIONS",
    "ENV_CATALOG",
    "ENV_WAREHOUSE",
    "FLUSH_BYTES",
    "FLUSH_ROWS",
    "HISTORY_SCHEMA",
    "LOCATION_OPTIONS",
    "MERGE_ATTEMPTS",
    "METRICS_SCHEMA",
    "OVERWRITE_MODES",
    "OVERWRITE_MODE_CONF",
    "READ_OPTIONS",
    "SCAN_SCOPED_READS",
    "SPARK_OPTIONS",
    "SPARK_VERSION",
    "STREAM_QUERY_ID_PROPERTY",
    "STREAM_READ_OPTIONS",
    "WAREHOUSE_CONF",
    "WORKERS_HINT",
    "WRITE_OPERATIONS",
    "WRITE_OPTIONS",
    "MereCommitMessage",
    "MereDataSource",
    "MerePushdownReader",
    "MereReader",
    "MereScan",
    "MereStreamWriter",
    "MereWriter",
    "PartitionSizing",
    "Pruning",
    "SparkExplain",
    "SparkMerge",
    "SparkMergeExplain",
    "SplitPartition",
    "TableRef",
    "batch_key",
    "check_options",
    "check_workers",
    "compact",
    "describe",
    "explain",
    "install_ddl_hook",
    "install_partition_hook",
    "local_session",
    "merge",
    "native_type",
    "parse_events",
    "query_id",
    "read_table",
    "register",
    "spark_filter",
    "spark_schema",
    "sql",
    "sync_batches",
    "sync_database",
    "translate_filter",
]

# The public classes and functions keep the address they are documented (and were pickled) under.
for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith(__name__ + "."):
        _value.__module__ = __name__
del _name, _value
