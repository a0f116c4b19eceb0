"""Writes: batch and streaming writers, the write job a driver plans and ships to every task (create on
write, layout checks, mergeSchema, overwrite modes), and the ``.partitionBy(...)`` hook."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from mere.durations import parse_duration
from mere.errors import (
    InvalidInput,
    MereError,
    NoSuchNamespace,
    NoSuchTable,
    SchemaChanged,
    SchemaMismatch,
    TableExists,
)
from mere.integrations.spark.options import (
    CREATE_OPTIONS,
    FORMAT_NAME,
    TableRef,
    bool_option,
    check_options,
    column_list_option,
    int_option,
    json_object_option,
    lower_options,
    merge_operators_option,
)
from mere.options import format_columns
from mere.spec import TableSpec
from mere.table.evolve import same_columns
from mere.table.table import StagedWrite, Table
from mere.write.cast import relax_nested

log = logging.getLogger(__name__)

KILL_TIMEOUT_CONF = "spark.python.task.killTimeout"
"""How long Spark lets a cancelled task's Python worker run before it kills it (Spark's default: 2s)."""


def python_kill_timeout() -> float:
    """The session's :data:`KILL_TIMEOUT_CONF` in seconds (2 when no session or no readable value; at most
    60: the abort of a failed job waits this long)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    text = session.conf.get(KILL_TIMEOUT_CONF, "2s") if session is not None else "2s"
    try:
        seconds = parse_duration(str(text)).total_seconds()
    except (ValueError, OverflowError):
        seconds = 2.0
    return min(max(seconds, 0.0), 60.0)


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


@dataclass
class MereCommitMessage(WriterCommitMessage):
    """Files one task staged, in the order they were written."""

    staged: list[StagedWrite] = field(default_factory=list)
    rows: int = 0
    query_id: str | None = None
    overwrite_mode: str | None = (
        None  # the session's spark.sql.sources.partitionOverwriteMode, as tasks see it
    )


def chunks(batches: Iterator[pa.RecordBatch], flush_rows: int = FLUSH_ROWS) -> Iterator[pa.Table]:
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


def create_table(ref: TableRef, opts: Mapping[str, str], schema: StructType) -> Table:
    """The table a write creates, from its layout options and the DataFrame's schema."""
    keys = set(column_list_option("primary_key", opts.get("primary_key")) or ())
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
        primary_key=column_list_option("primary_key", opts.get("primary_key")),
        partition_by=list(partition_columns(ref.name, opts) or ()) or None,
        buckets=int_option("buckets", buckets),
        merge_operators=merge_operators_option("merge_operators", opts.get("merge_operators")),
        cdc_column=opts.get("cdc_column") or None,
        sequence_by=column_list_option("sequence_by", opts.get("sequence_by")),
        exist_ok=True,
    )


def partition_columns(name: str, opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """The partition columns a write names: option ``partition_by`` or Spark's ``.partitionBy(...)`` (as
    the hook passes it), which must agree when both are given; None when neither is."""
    given = {
        k: tuple(column_list_option(k, opts[k]) or ()) for k in ("partition_by", "partitionby") if k in opts
    }
    if len(set(given.values())) > 1:
        raise InvalidInput(
            f"{name}: .partitionBy{given['partitionby']} and option 'partition_by' "
            f"{opts['partition_by']!r} disagree; give the partition columns once"
        )
    return next(iter(given.values()), None)


def check_layout(table: Table, opts: Mapping[str, str]) -> None:
    """Layout options given for an existing table must describe it (a mismatch is never ignored)."""
    spec = table.spec
    partition_by = partition_columns(table.name, opts)
    if "partitionby" in opts and partition_by != spec.partition_by:
        have = f"partitioned by {', '.join(spec.partition_by)}" if spec.partition_by else "not partitioned"
        raise TableExists(
            f"{table.name} already exists and is {have}: .partitionBy({', '.join(partition_by or ())}) does "
            "not match it, and a write never changes a table's partitioning; drop .partitionBy or write to "
            "a new table (nothing was written)"
        )
    wanted: dict[str, Any] = {}
    if "primary_key" in opts:
        wanted["primary_key"] = (
            tuple(column_list_option("primary_key", opts["primary_key"]) or ()),
            spec.primary_key,
        )
    if partition_by is not None:
        wanted["partition_by"] = (partition_by, spec.partition_by)
    if "buckets" in opts:
        wanted["buckets"] = (int_option("buckets", opts["buckets"]), spec.buckets)
    if "cdc_column" in opts:
        wanted["cdc_column"] = (opts["cdc_column"] or None, spec.cdc_column)
    if "sequence_by" in opts:
        wanted["sequence_by"] = (
            tuple(column_list_option("sequence_by", opts["sequence_by"]) or ()),
            spec.sequence_by,
        )
    if "merge_operators" in opts:
        given = TableSpec.create(
            spec.schema,
            spec.primary_key or None,
            spec.partition_by or None,
            spec.buckets if spec.primary_key else None,
            merge_operators_option("merge_operators", opts["merge_operators"]),
            spec.cdc_column,
        )
        wanted["merge_operators"] = (
            given.merge_engine or dict(given.merge_operators),
            spec.merge_engine or dict(spec.merge_operators),
        )
    different = [f"{k} {a!r} vs the table's {b!r}" for k, (a, b) in wanted.items() if a != b]
    if different:
        raise TableExists(f"{table.name} already exists with a different spec: {'; '.join(different)}")


@dataclass
class WriteJob:
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
    write_id: str | None = None  # a batch write's id in its files' names: abort() finds killed tasks' files

    @staticmethod
    def plan(
        ref: TableRef, options: Mapping[str, str], schema: StructType, overwrite: bool, streaming: bool
    ) -> WriteJob:
        check_options(options)
        opts = lower_options(options)
        operation = opts.get("operation", "").strip().lower() or None
        if operation is not None and operation not in WRITE_OPERATIONS:
            raise InvalidInput(
                f"{ref.name}: unknown operation {operation!r}; choose one of {', '.join(WRITE_OPERATIONS)}"
            )
        if overwrite and operation not in (None, "overwrite"):
            raise InvalidInput(
                f"{ref.name}: mode('overwrite') cannot run operation {operation!r}; use mode('append')"
            )
        # Every yes/no option is read now, used or not: a bad value is refused whatever the table.
        given = opts.get("create", "")
        create = bool_option("create", given) if given.strip() else None
        merge_schema = bool_option("mergeSchema", opts.get("mergeschema"))
        created: int | None = None
        try:
            table = ref.open()
        except (NoSuchTable, NoSuchNamespace) as missing:
            if (
                operation == "delete"
                or create is False
                or (create is not True and not any(o in opts for o in CREATE_OPTIONS))
            ):
                raise NoSuchTable(
                    f"{missing} in warehouse {ref.warehouse!r}; to create it on write give its layout "
                    "(.option('primary_key', ...), partition_by, buckets, cdc_column, merge_operators, "
                    "sequence_by) or "
                    ".option('create', 'true') for a table without key"
                ) from None
            table = create_table(ref, opts, schema)
            created = table.version
        else:
            check_layout(table, opts)
        try:
            return WriteJob._plan_for(
                ref,
                opts,
                schema,
                table,
                created,
                operation,
                overwrite=overwrite,
                streaming=streaming,
                merge_schema=merge_schema,
            )
        except BaseException:
            if created is not None:  # refused before anything was written: the table this write made goes
                with contextlib.suppress(MereError):
                    table.catalog.drop_if_unchanged(table, created)
            raise

    @staticmethod
    def _plan_for(
        ref: TableRef,
        opts: Mapping[str, str],
        schema: StructType,
        table: Table,
        created: int | None,
        operation: str | None,
        *,
        overwrite: bool,
        streaming: bool,
        merge_schema: bool,
    ) -> WriteJob:
        """The rest of :meth:`plan`, once the table is open (or was made by this write)."""
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
        partition = json_object_option("partition", opts.get("partition"))
        if partition is not None and operation != "overwrite":
            raise InvalidInput(f"{ref.name}: option 'partition' applies to mode('overwrite') only")
        table.partition_values(partition)  # its columns and values, checked before any task writes
        overwrite_mode = parse_overwrite_mode(ref.name, opts.get("partitionoverwritemode"), "option")
        if overwrite_mode is not None and (operation != "overwrite" or streaming):
            raise InvalidInput(
                f"{ref.name}: option 'partitionOverwriteMode' applies to batch writes with mode('overwrite') only"
            )
        names = set(table.schema.names) | ({table.spec.cdc_column} if table.spec.cdc_column else set())
        unknown = [c for c in schema.fieldNames() if c not in names]
        evolved: str | None = None
        if unknown and merge_schema and operation != "delete":
            # The new columns commit with the rows: tasks stage under the evolved spec, the driver commits it.
            arrow = to_arrow_schema(schema, timezone="UTC")
            update = table.evolve()
            for c in unknown:
                update.add_column(c, arrow.field(c).type)
            evolved = update.spec.to_json()
        elif unknown:
            raise SchemaMismatch(
                f"{ref.name}: the DataFrame has column(s) {unknown} the table lacks; the table has "
                f"{sorted(names)} (.option('mergeSchema', 'true') adds them)"
            )
        key = opts.get("idempotency_key") or None
        if key is None and not streaming:
            key = f"spark-write:{uuid.uuid4().hex}"  # lets abort() tell whether a failed commit landed
        flush = int_option("flush_rows", opts.get("flush_rows"))
        return WriteJob(
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
            None if streaming else uuid.uuid4().hex,
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
                for chunk in chunks(batches, self.flush_rows):
                    if pending is not None:
                        staged.append(pending.result())
                    pending = pool.submit(table.stage, chunk, self.operation, write_id=self.write_id)
                if pending is not None:
                    staged.append(pending.result())
                    pending = None
            except BaseException:
                if pending is not None and not pending.cancel():
                    with contextlib.suppress(BaseException):
                        staged.append(pending.result())
                table.abort(staged)
                raise
        return MereCommitMessage(staged, sum(s.rows for s in staged), query_id, task_overwrite_mode())

    def commit(self, messages: Sequence[WriterCommitMessage | None], key: str | None) -> None:
        table = self.open()
        ours = [m for m in messages if isinstance(m, MereCommitMessage)]
        staged = [s for m in ours for s in m.staged]
        try:
            dynamic = self.operation == "overwrite" and self.dynamic_overwrite(ours)
        except BaseException:
            table.abort(staged)  # refused before committing: abort() keeps a completed job's files
            raise
        if not any(s.files for s in staged) and (self.operation != "overwrite" or dynamic):
            return  # nothing written: no new version
        table.commit(
            staged, operation=self.operation, partition=self.partition, idempotency_key=key, dynamic=dynamic
        )

    def abort_killed(self, table: Table) -> None:
        """Delete the files of tasks killed before they reported them (no commit was tried): by the write's
        id, once Spark has had time to kill the Python workers of the tasks it cancels (their files stay
        for ``cleanup`` otherwise)."""
        if self.write_id is None:
            return
        time.sleep(python_kill_timeout() + 1.0)
        try:
            table.abort_write(self.write_id)
        except MereError as e:
            log.warning("%s: could not delete the files of killed tasks: %s", self.ref.name, e)

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
        mode = parse_overwrite_mode(self.ref.name, seen.pop(), "session conf")
        return mode == "dynamic"

    def abort(self, messages: Sequence[WriterCommitMessage | None], key: str | None) -> None:
        """Spark gave up on the write. A task failed (its message is None): no commit was tried, so the
        other tasks' files go. Every task finished: the commit failed, or Spark stopped waiting for it (the
        query was stopped or restarted, a worker timed out) while it may still land; :meth:`commit` deletes
        the files of a commit that failed, so these stay, and if no commit takes them they are garbage for
        :meth:`mere.Table.cleanup` (deleting them could leave a landing version without its files)."""
        table = self.open()
        if key is not None and table.find_commit(key) is not None:
            return  # the commit landed (its outcome was unknown to the caller): the files are the table's now
        staged = [s for m in messages if isinstance(m, MereCommitMessage) for s in m.staged]
        if not (messages and all(m is not None for m in messages)):
            table.abort(staged)
            self.abort_killed(table)
        elif any(s.files for s in staged):
            log.warning(
                "%s: a write whose tasks all finished was aborted; its %d staged file(s) stay (a commit of "
                "them may still land); Table.cleanup removes them if none does",
                self.ref.name,
                sum(len(s.files) for s in staged),
            )
        if self.created_version is not None:  # a failed write leaves no table it created behind
            table.catalog.drop_if_unchanged(table, self.created_version)


class MereWriter(DataSourceArrowWriter):
    """Batch writes: tasks stage files, the driver commits them all as one version."""

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        return self.job.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.commit(messages, self.job.idempotency_key)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.abort(messages, self.job.idempotency_key)


def parse_overwrite_mode(table: str, value: str | None, where: str) -> str | None:
    if value is None or not value.strip():
        return None
    mode = value.strip().lower()
    if mode not in OVERWRITE_MODES:
        name = "partitionOverwriteMode" if where == "option" else OVERWRITE_MODE_CONF
        raise InvalidInput(f"{table}: {where} {name} must be static or dynamic, got {value!r}")
    return mode


def task_overwrite_mode() -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(OVERWRITE_MODE_CONF)


def task_query_id() -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(STREAM_QUERY_ID_PROPERTY)


class MereStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: each micro-batch is one commit, keyed by (query id, batch id) so a replay is a no-op."""

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        return self.job.write(iterator, query_id=self.job.query_id or task_query_id())

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
        try:
            key = self.batch_key(messages, batchId)
        except BaseException:
            with contextlib.suppress(Exception):  # refused before committing: abort() keeps these files
                self.job.open().abort(
                    [s for m in messages if isinstance(m, MereCommitMessage) for s in m.staged]
                )
            raise
        self.job.commit(messages, key)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        try:
            key = self.batch_key(messages, batchId)
        except InvalidInput:
            key = None
        self.job.abort(messages, key)


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

    install_update_mode_hook()
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
        if str(source).strip().lower() != FORMAT_NAME:
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
        self._jwrite = self._jwrite.option("partitionBy", format_columns(cols))
        return spark_save(self, path)

    for name, wrapper in (("format", format), ("partitionBy", partitionBy), ("save", save)):
        original = getattr(DataFrameWriter, name)
        functools.update_wrapper(wrapper, original)
        setattr(wrapper, _HOOKED, True)
        setattr(DataFrameWriter, name, wrapper)


# ---------------------------------------------------------------------------------------------
# DataStreamWriter.outputMode("update") for the mere format

_STREAM_HOOKED = "_mere_update_mode_hook"
UPDATE_MODE_KEY_PREFIX = "spark-stream"
"""Update-mode batches commit under ``spark-stream:<query id>:<batch id>``, the key of the append sink."""


def update_mode_batch(
    table: str, options: Mapping[str, str], query_id: str | None
) -> Any:  # a function (DataFrame, batch id) -> None
    """The ``foreachBatch`` function an update-mode stream into ``table`` runs: each micro-batch is one
    upsert, committed once under the batch's idempotency key (a replayed batch changes nothing)."""
    write_options = {
        k: v
        for k, v in options.items()
        if k.lower() not in ("checkpointlocation", "path", "table", "query_id")
    }

    def upsert_batch(df: Any, batch_id: int) -> None:
        qid = query_id or df.sparkSession.sparkContext.getLocalProperty(STREAM_QUERY_ID_PROPERTY)
        if not qid:
            raise InvalidInput(
                f"{table}: cannot tell which streaming query this is; give .option('query_id', ...)"
            )
        (
            df.write.format(FORMAT_NAME)
            .mode("append")
            .options(**write_options)
            .option("idempotency_key", f"{UPDATE_MODE_KEY_PREFIX}:{qid}:{batch_id}")
            .save(table)
        )

    return upsert_batch


def check_update_mode(table: str, options: Mapping[str, str]) -> None:
    """Refuse, before the stream starts, an update-mode stream mere cannot run as an upsert per micro-batch."""
    check_options(options)
    opts = lower_options(options)
    ref = TableRef.from_options({**options, "table": table})
    operation = opts.get("operation", "").strip().lower()
    if operation not in ("", "upsert"):
        raise InvalidInput(
            f"{table}: outputMode('update') upserts each micro-batch; option operation {operation!r} does not apply"
        )
    try:
        existing = ref.open()
    except (NoSuchTable, NoSuchNamespace):
        if not column_list_option("primary_key", opts.get("primary_key")):
            raise InvalidInput(
                f"{table} does not exist in warehouse {ref.warehouse!r}: outputMode('update') upserts by primary "
                "key, so give .option('primary_key', ...) to create it on the first micro-batch"
            ) from None
        return
    if not existing.spec.has_primary_key:
        raise InvalidInput(
            f"{table} has no primary key: outputMode('update') replaces rows by key, and a table without key can "
            "only be appended to; use outputMode('append'), or stream into a table with a primary key"
        )
    check_layout(existing, opts)


def install_update_mode_hook() -> None:
    """Let ``df.writeStream.format("mere").outputMode("update")`` upsert each micro-batch into a key table.

    Spark plans a Python data source's stream write without update mode (its write builder does not declare
    ``SupportsStreamingUpdateAsAppend``), and refuses it in the JVM: "mere does not support Update mode".
    This wraps five methods of PySpark's classic ``DataStreamWriter`` (once per process; :func:`register`
    and :func:`local_session` call it through :func:`install_partition_hook`): ``format``, ``outputMode``,
    ``option`` and ``options`` also note what they were given, and ``start`` of a mere stream in update
    mode checks the table (it must have a primary key, or be created with option ``primary_key``) and runs
    the query through ``foreachBatch`` instead, each micro-batch one batch write of the mere format keyed by
    ``spark-stream:<query id>:<batch id>`` (the key of the append sink): a batch Spark replays after a
    failure or a restart from the checkpoint is committed once. Every other stream gets Spark's own calls.
    """
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    if getattr(DataStreamWriter.start, _STREAM_HOOKED, False):
        return
    spark_format, spark_mode, spark_option, spark_options, spark_start = (
        DataStreamWriter.format,
        DataStreamWriter.outputMode,
        DataStreamWriter.option,
        DataStreamWriter.options,
        DataStreamWriter.start,
    )

    def noted(self: Any) -> dict[str, Any]:
        found = getattr(self, "_mere_stream", None)
        if found is None:
            found = self._mere_stream = {"options": {}}
        return found

    def format(self: Any, source: str) -> Any:
        out = spark_format(self, source)
        noted(self)["format"] = source
        return out

    def outputMode(self: Any, outputMode: str) -> Any:
        out = spark_mode(self, outputMode)
        noted(self)["mode"] = outputMode
        return out

    def option(self: Any, key: str, value: Any) -> Any:
        out = spark_option(self, key, value)
        if value is not None:
            noted(self)["options"][key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def options(self: Any, **opts: Any) -> Any:
        out = spark_options(self, **opts)
        for key, value in opts.items():
            if value is not None:
                noted(self)["options"][key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def start(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        outputMode: str | None = None,
        partitionBy: Any = None,
        queryName: str | None = None,
        **opts: Any,
    ) -> Any:
        state = noted(self)
        source = format or state.get("format")
        mode = outputMode or state.get("mode")
        if str(source or "").strip().lower() != FORMAT_NAME or str(mode or "").strip().lower() != "update":
            return spark_start(self, path, format, outputMode, partitionBy, queryName, **opts)
        self.options(**opts)
        given = dict(state["options"])
        lowered = lower_options(given)
        table = path or lowered.get("table") or lowered.get("path")
        if not table:
            raise InvalidInput('give the table name: .start("ns.table") or .option("table", ...)')
        if partitionBy is not None:
            raise InvalidInput(
                f"{table}: a stream in update mode takes the partitioning of its table; give option "
                "'partition_by' to create the table, not partitionBy"
            )
        check_update_mode(table, given)
        self.foreachBatch(update_mode_batch(table, given, lowered.get("query_id") or None))
        self.outputMode("update")
        return spark_start(self, None, None, None, None, queryName)

    for name, wrapper in (
        ("format", format),
        ("outputMode", outputMode),
        ("option", option),
        ("options", options),
        ("start", start),
    ):
        original = getattr(DataStreamWriter, name)
        functools.update_wrapper(wrapper, original)
        setattr(wrapper, _STREAM_HOOKED, True)
        setattr(DataStreamWriter, name, wrapper)
