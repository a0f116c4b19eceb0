"""Batch reads: the reader Spark plans on the driver, the input partitions it ships, and the key and
partition filters a reader may take from Spark (``pushdown``; see the package docstring for why it is off
by default)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from mere import expr as E
from mere.errors import InvalidInput, MereError
from mere.integrations.spark.options import (
    PartitionSizing,
    TableRef,
    bool_option,
    check_options,
    exact_micros,
    lower_options,
    naive_time,
    read_point,
    session_zone,
)
from mere.integrations.spark.types import arrow_target, check_user_schema, conform_batch
from mere.read.reader import stored_rows_are_merged
from mere.spec import TableSpec
from mere.table.scan import ScanTask, group_tasks, read_tasks


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


class MereReader(DataSourceReader):
    """Plans one table version on the driver; each task merges one split."""

    def __init__(self, ref: TableRef, options: Mapping[str, str], schema: StructType) -> None:
        check_options(options)
        opts = lower_options(options)
        self.ref = ref
        self.base_filter: str | None = opts.get("filter") or None
        self.columns = list(schema.fieldNames())
        self.requested_version, self.as_of, self.tag = read_point(opts)
        text = opts.get("as_of", opts.get("timestampasof"))
        self.naive_as_of = text if naive_time(text) is not None else None
        self.as_of_window: tuple[int, int | None] = (0, None)  # commit times that read self.version
        self.target = arrow_target(schema)
        self.user_schema = schema
        self.sizing = PartitionSizing.from_options(opts)
        self.merged_only = bool_option("merged_only", opts.get("merged_only"))
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
        check_user_schema(table.name, scan.schema, self.user_schema)
        self.version = scan.version
        if self.naive_as_of is not None:
            # Every instant in [this version's commit, the next commit) reads this version: a task can tell
            # whether the session's zone reads it too without asking the catalog.
            later = [
                exact_micros(s.committed_at)
                for s in table.catalog.sql.history(table.record.id, after=self.version)
            ]
            self.as_of_window = (
                exact_micros(table.snapshot(version=self.version).committed_at),
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
        naive = naive_time(self.naive_as_of)
        assert naive is not None
        zone = session_zone(name)
        lo, hi = self.as_of_window
        when = None if zone is None else exact_micros(naive.replace(tzinfo=zone))
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
                yield conform_batch(batch, self.target)


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
