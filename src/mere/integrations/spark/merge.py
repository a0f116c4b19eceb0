"""MERGE INTO a mere table from a Spark DataFrame.

The builder (the WHEN clauses of :class:`mere.table.merge.Merge`), the job each task runs, and how the source
is distributed.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Self

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from mere.errors import CommitConflict, InvalidInput, MereError
from mere.integrations.spark.options import TableRef, location_options
from mere.integrations.spark.session import check_workers
from mere.integrations.spark.types import conform_batch, spark_column, spark_type
from mere.table.merge import MergeBuilder, MergeClause, MergeMetrics, MergePlan, MergeSpec, StagedMerge
from mere.table.table import Table, check_idempotency_key

MERGE_ATTEMPTS = 3
"""How often :meth:`SparkMerge.execute` runs the job when a concurrent commit changed rows it read."""

_BY_SOURCE_REFUSED = (
    "WHEN NOT MATCHED BY SOURCE needs every target row, and a Spark MERGE reads in each task only the "
    "target rows of that task's source keys (buckets without source rows get no task at all); run this "
    "MERGE with the local Table.merge(...) (mere.connect(...).table(name).merge(source_arrow)) instead"
)


@dataclass
class MergeJob:
    """One attempt of a Spark MERGE, planned on the driver and shipped to every task."""

    ref: TableRef
    table_uuid: str
    version: int
    schema: pa.Schema  # the source's Arrow schema, as tasks cast their batches to
    spec: MergeSpec

    def open(self) -> Table:
        """The table, checked to be the one the MERGE was planned on."""
        table = self.ref.open()
        if table.record.uuid != self.table_uuid:
            raise InvalidInput(f"{self.ref.name} was dropped and created again during the MERGE")
        return table

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A task: MERGE its source rows (every row of their keys is here) at the pinned version.

        It writes the files and returns the pickled :class:`~mere.table.merge.StagedMerge` (or the error) to
        the driver.
        """
        payload: tuple[Any, ...] | None
        try:
            parts = [conform_batch(b, self.schema) for b in batches if b.num_rows]
            if parts:
                source = pa.Table.from_batches(parts, schema=self.schema)
                payload = ("staged", self.spec.build(self.open(), source).stage(self.version))
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


class SparkMerge(MergeBuilder):
    """A MERGE INTO a mere table from a Spark DataFrame being built (see :func:`merge`).

    The clause methods are those of :class:`mere.table.merge.Merge` (conditions and values are SQL text
    over the aliases); ``WHEN NOT MATCHED BY SOURCE`` is refused (use the local ``Table.merge``).
    ``using_columns`` are the columns of SQL's ``MERGE ... USING (a, b)``: a bare name of one of them names
    the pair (:func:`mere.integrations.spark.sql` passes them).
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
        using_columns: tuple[str, ...] = (),
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
        spec = MergeSpec(on, source_alias, target_alias, using_columns=tuple(using_columns))
        self._job = MergeJob(ref, table.record.uuid, table.version, schema, spec)
        self._check = spec.build(table, schema.empty_table())  # fails now on bad aliases or ON text
        self._state = "open"

    @property
    def spec(self) -> MergeSpec:
        """The MERGE built so far, as the plain data every task turns into its :class:`~mere.table.merge.Merge`."""
        return self._job.spec

    # -- builder ------------------------------------------------------------------------------

    def add_clause(self, clause: MergeClause) -> Self:
        """Add a WHEN clause given as data (the ``when_*`` methods call this); its SQL is checked now.

        ``WHEN NOT MATCHED BY SOURCE`` is refused: a Spark task sees only its own keys' target rows.
        """
        if clause.kind == "not_matched_by_source":
            raise InvalidInput(f"{self.ref.name}: {_BY_SOURCE_REFUSED}")
        if self._state != "open":
            raise InvalidInput(f"{self.ref.name}: this MERGE was executed; build a new one")
        self._check.add_clause(clause)  # parses the SQL text now (*_all's columns: when it is planned)
        self._job = replace(self._job, spec=self._job.spec.adding(clause))
        return self

    # -- planning and running -----------------------------------------------------------------------

    def _plan(self) -> tuple[Table, MergeJob, MergePlan]:
        """Open the table, pin its current version and check every clause on an empty source (no Spark job)."""
        if not self._job.spec.clauses:
            raise InvalidInput(f"{self.ref.name}: a MERGE needs at least one WHEN clause")
        table = self._job.open()
        job = replace(self._job, version=table.version)
        plan = MergePlan(
            job.spec.build(table, job.schema.empty_table())
        )  # resolves and types every expression
        return table, job, plan

    def _distribute(self, table: Table, plan: MergePlan) -> tuple[Any, str, int]:
        """The Spark column of each source row's table bucket, its SQL text, and the number of tasks."""
        from pyspark.sql import functions as F

        spec = table.spec
        types = {f.name: f.dataType for f in self.source.schema.fields}
        cols, texts = [], []
        for key in spec.primary_key:
            src = plan.pairs[key]
            c, text = spark_column(src), f"{self._job.spec.source_alias}.{src}"
            try:
                want = spark_type(spec.schema.field(key).type)
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
        """How the MERGE will run (at the table's current version); no Spark job runs.

        Returns:
            The statement, the version it reads and how the source is distributed.

        Raises:
            InvalidInput: A MERGE without WHEN clauses, a table dropped and created again since the MERGE was
                built, or clauses that are invalid against the table (as :meth:`mere.Merge.execute` checks
                them).
            FilterError: A condition or value that names unknown columns or does not type.
        """
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

    def _stage(self, table: Table, job: MergeJob, plan: MergePlan) -> list[StagedMerge]:
        """Run the Spark job: every task stages its share; on any task's error the others' files go."""
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

    def execute(self, *, idempotency_key: str | None = None) -> MergeMetrics:
        """Run the MERGE as one Spark job and one commit; nothing is committed when any task fails.

        A concurrent commit that changed rows the MERGE read (:class:`~mere.errors.CommitConflict`) runs the
        job again against the new version, up to ``attempts`` times in all.

        Args:
            idempotency_key: commit the MERGE at most once (in ``foreachBatch``:
                :func:`~mere.integrations.spark.batch_key`). The driver looks the key up before any Spark
                job runs, and again before each retry: when a commit with it has landed, no job runs, no
                file is staged and that commit's metrics are returned (``already_committed=True``). When
                the key's commit lands while the job runs (another driver replaying the same work), the
                commit finds it in the catalog transaction, deletes every task's files and returns its
                metrics: one commit per key, no orphan file left referenced. The key alone names the work
                (another source with a known key is a replay too); a MERGE that changes nothing makes no
                version and records no key.

        Returns:
            Rows inserted, updated, deleted and left unchanged, files written and the version committed.

        Raises:
            InvalidInput: A bad ``idempotency_key`` or one naming a commit that was not a MERGE (nothing
                committed), a MERGE without WHEN clauses or executed already, a table dropped and created again
                since the MERGE was built, or clauses that are invalid against the table.
            FilterError: A condition or value that names unknown columns or does not type.
            MergeConflict: A task's MERGE would change a target row twice, or insert a key twice or one the
                table holds (a task's error is raised here after the other tasks' files are deleted).
            NotInstalled: Spark's Python workers cannot import mere.
            CommitConflict: Concurrent commits changed rows the MERGE read in every attempt.
        """
        if self._state != "open":
            raise InvalidInput(f"{self.ref.name}: this MERGE was executed; build a new one")
        check_idempotency_key(self.ref.name, idempotency_key)
        if not self._job.spec.clauses:
            raise InvalidInput(f"{self.ref.name}: a MERGE needs at least one WHEN clause")
        started = time.perf_counter()
        if idempotency_key is not None:  # a replay reads nothing, stages nothing and runs no job
            prior = self._replay(self._job.open(), idempotency_key, started)
            if prior is not None:
                self._state = "executed"
                return prior
        table, job, plan = self._plan()  # bad clauses fail here, before any Spark job
        self._state = "executed"
        check_workers(self.spark)
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                prior = self._replay(table, idempotency_key, started)  # the race may have been our key's
                if prior is not None:
                    return prior
                table, job, plan = self._plan()
            staged = self._stage(table, job, plan)
            try:
                metrics = table.commit_merge(staged, idempotency_key=idempotency_key)
            except CommitConflict:
                if attempt == self.attempts:
                    raise
                continue
            return replace(metrics, seconds=time.perf_counter() - started)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _replay(table: Table, key: str | None, started: float) -> MergeMetrics | None:
        """The metrics of the MERGE that committed with ``key`` already, or None (no key, or none yet)."""
        if key is None:
            return None
        prior = table.find_commit(key)
        if prior is None:
            return None
        return MergeMetrics.of_commit(table.name, prior, time.perf_counter() - started)


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
    """MERGE INTO a mere table from a Spark DataFrame: add WHEN clauses, then ``execute()``.

    ::

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
    ``execute(idempotency_key=...)`` commits it at most once (a retried job or a replayed micro-batch:
    see :func:`~mere.integrations.spark.batch_key`).
    ``partitions`` is the number of Spark tasks (default: the table's buckets, at most
    ``spark.sql.shuffle.partitions``); a task holds its source rows in memory. ``WHEN NOT MATCHED BY
    SOURCE`` is refused: use the local ``Table.merge``.

    Args:
        spark: The SparkSession.
        source: The source rows, a Spark DataFrame.
        table: The table's name, ``namespace.table``.
        on: The ON condition, SQL text over the aliases; default: equality of every primary-key column.
        source_alias: The source's name in conditions and values.
        target_alias: The table's name in conditions and values.
        warehouse: The warehouse URI (default: the environment variable ``MERE_WAREHOUSE``).
        catalog: The catalog URL (default: ``MERE_CATALOG``, else the SQLite catalog inside the warehouse).
        storage_options: Options of the storage (such as S3 endpoint and credentials).
        partitions: The number of Spark tasks (default: the table's buckets, at most
            ``spark.sql.shuffle.partitions``).
        attempts: How often ``execute()`` runs the job when a concurrent commit changed rows it read.

    Returns:
        The MERGE being built.

    Raises:
        InvalidInput: ``source`` is not a Spark DataFrame or has a column type mere cannot take, a
            ``partitions`` or ``attempts`` that is not a positive int, a catalog without a warehouse URI the
            workers can open, no warehouse, a table without primary key, or empty or equal aliases.
        NoSuchTable: There is no such table.
        FilterError: An ON condition that does not parse.
    """
    ref = TableRef.from_options(location_options(table, warehouse, catalog, storage_options))
    return SparkMerge(spark, source, ref, on, source_alias, target_alias, partitions, attempts)
