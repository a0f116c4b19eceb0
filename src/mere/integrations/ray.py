"""Ray Data: read a mere table as a ``ray.data.Dataset`` and write a Dataset to a table in one commit.

Reading::

    from mere.integrations.ray import read_table, write

    ds = read_table(table, columns=["id", "qty"], filter="day = '2026-11-21'", version=12)

The scan is planned on the driver (catalog access, pruning); its splits (range partition x bucket) are
packed into Ray read tasks by bytes (``max_task_bytes``, default 128 MiB): small splits share a task,
big ones are divided into key-range windows, and at least as many tasks as Ray asks for are made when
the table has the splits or row groups for it. Each task merges its splits in the worker with storage
access only (never the catalog) and yields Arrow tables of the scan's schema, which the Dataset knows
before anything runs. ``ds.select_columns(...)`` right after the read is pushed into the scan.
Other keyword arguments go to ``ray.data.read_datasource`` (``concurrency``, ``ray_remote_args``, ...).

Writing::

    result = write(ds, table, mode="upsert")        # or "append" (table without key), "overwrite"

Every write task stages Parquet files with :meth:`mere.Table.stage`; the driver commits all of them
once, as one new version (:meth:`mere.Table.commit`), and :func:`write` returns its
:class:`~mere.CommitResult`. Rows of one task keep their order; between tasks the files are ordered
by Ray's task index, so for a key written by several blocks the block Ray hands out last wins: keep the
changes to one key in one block (as Spark's integration asks of a partition). A CDC Dataset (with the
table's change column) is applied in order within a block.

Failures: a failed job leaves the table unchanged and deletes what its tasks staged. Ray does not hand
the results of finished tasks to ``on_write_failed``, so the datasink keeps a small ledger actor that
every task tells what it staged; on failure the driver deletes those files, waits (a bounded time) for
the tasks Ray is cancelling, and a task that finishes after the job failed deletes its own files. Every
task stages with the job's ``write_id``, so the driver of a failed job also deletes the job's files by name
(:meth:`mere.Table.abort_write`), those of tasks Ray killed mid-write included; after a commit it does so
when tasks never reported. Only a worker killed after that leaves files, never referenced, which
:meth:`mere.Table.cleanup` removes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mere.errors import CommitStateUnknown, InvalidInput, MereError, NotInstalled, SchemaMismatch
from mere.metadata import CommitResult
from mere.table.catalog_transaction import CatalogSnapshot, pinned_version
from mere.table.scan import TASK_BYTES, Scan, ScanTask, group_tasks, read_tasks
from mere.table.table import StagedWrite, Table, check_idempotency_key

_INSTALL_HINT = "pip install 'mere[ray]'"

try:
    import ray
    import ray.data
    import ray.exceptions
    from ray.data import Datasink, Datasource, ReadTask
    from ray.data.block import BlockAccessor, BlockMetadata
except ImportError as _e:  # pragma: no cover - exercised only without ray
    raise NotInstalled(f"mere's Ray integration needs Ray Data (ray[data] >= 2.40): {_INSTALL_HINT}") from _e

if TYPE_CHECKING:
    from ray.data._internal.execution.interfaces import TaskContext
    from ray.data.block import Block
    from ray.data.datasource.datasink import WriteResult

log = logging.getLogger(__name__)

MODES = ("upsert", "append", "overwrite")
CLEANUP_WAIT_S = 30.0  # how long a failed write waits for cancelled tasks to report what they staged


# -- reading -------------------------------------------------------------------------------------------


class MereDatasource(Datasource):
    """A planned scan of a mere table as a Ray Data source (see :func:`read_table`).

    Planning (catalog, pruning, argument checks) happens here, on the driver; the read tasks carry picklable
    :class:`~mere.table.scan.ScanTask` objects only. The arguments are those of :meth:`mere.Table.scan`.

    Args:
        table: The mere table (its catalog opened with a warehouse URI the workers can open).
        columns: The columns to read (default: all).
        filter: A mere filter, evaluated in the scan.
        version: The version to read (default: the newest).
        as_of: A point in time to read the table at; an ``as_of`` without a zone is read as UTC, not as local
            time.
        max_task_bytes: The most file bytes one read task merges (default 128 MiB).
        tag: A tag whose version to read.

    Raises:
        InvalidInput: ``table`` is not a mere Table or its catalog was opened with ``filesystem=``, a
            ``max_task_bytes`` that is not a positive integer, or an invalid scan argument (as
            :meth:`mere.Table.scan` raises it).
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
    """

    def __init__(
        self,
        table: Table,
        columns: Sequence[str] | str | None = None,
        filter: Any = None,
        version: int | None = None,
        as_of: Any = None,
        max_task_bytes: int | None = None,
        *,
        tag: str | None = None,
    ) -> None:
        super().__init__()
        _check_table(table)
        if max_task_bytes is not None and (
            not isinstance(max_task_bytes, int) or isinstance(max_task_bytes, bool) or max_task_bytes < 1
        ):
            raise InvalidInput(f"max_task_bytes must be a positive integer, got {max_task_bytes!r}")
        self._scan: Scan = table.scan(columns=columns, filter=filter, version=version, as_of=as_of, tag=tag)
        self._max_task_bytes = max_task_bytes or TASK_BYTES
        self._tasks: list[ScanTask] | None = None
        self._projection_map: dict[str, str] | None = None
        self._tasks_now()  # a warehouse workers cannot open fails here, not in a worker

    @property
    def scan(self) -> Scan:
        """The planned scan (version, columns and filter)."""
        return self._scan

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of every block this source yields."""
        return self._scan.schema

    def _tasks_now(self) -> list[ScanTask]:
        if self._tasks is None:
            self._tasks = self._scan.tasks()
        return self._tasks

    def get_name(self) -> str:
        """The name Ray shows for the read operator."""
        return "Mere"

    def estimate_inmemory_data_size(self) -> int | None:
        """Bytes of the files the scan reads (Parquet, so the Arrow data is larger)."""
        return sum(t.size_bytes for t in self._tasks_now())

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
        """One Ray read task per group of splits (at least ``parallelism`` groups where the data allows)."""
        schema = self.schema
        groups = group_tasks(
            self._tasks_now(), max_bytes=self._max_task_bytes, min_groups=max(1, parallelism)
        )
        if not groups:  # no split: one task yields an empty table, so the Dataset keeps the schema
            meta = _metadata(0, 0, schema)
            return [_read_task(functools.partial(_empty, schema), meta, schema, per_task_row_limit)]
        out = []
        for group in groups:
            meta = _metadata(None, int(sum(t.size_bytes for t in group)), schema)
            out.append(
                _read_task(functools.partial(_read_group, group, schema), meta, schema, per_task_row_limit)
            )
        return out

    def supports_projection_pushdown(self) -> bool:
        """``select_columns`` after the read narrows the scan itself."""
        return True

    def get_projection_map(self) -> dict[str, str] | None:
        """The columns pushed into the scan by Ray (None: the scan's own columns)."""
        return self._projection_map

    def apply_projection(self, projection_map: dict[str, str] | None) -> MereDatasource:
        """A copy of this source reading only the columns in ``projection_map``, in its order."""
        if projection_map is None:
            return self
        have = self._scan.output_columns
        lacking = [c for c in projection_map if c not in have]
        if lacking:  # as Ray's own sources: a column the read does not produce is an error, not dropped
            raise SchemaMismatch(
                f"{self._scan.table.name}: the read has no column(s) {lacking}; it has {have}"
            )
        columns = list(projection_map)
        clone = _copy(self)
        clone._scan = self._scan.select(*columns)
        clone._tasks = None
        clone._projection_map = {c: c for c in columns}
        return clone


def _cluster_cpus() -> int:
    if not ray.is_initialized():
        ray.init()  # what Ray Data would do on the first execution
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _copy(source: MereDatasource) -> MereDatasource:
    clone = MereDatasource.__new__(MereDatasource)
    clone.__dict__.update(source.__dict__)
    return clone


# Newer Ray takes the schema on ReadTask, older Ray on BlockMetadata: both are supported.
_META_SCHEMA = "schema" in {f.name for f in dataclasses.fields(BlockMetadata)}
_TASK_ARGS = set(inspect.signature(ReadTask.__init__).parameters)


def _metadata(num_rows: int | None, size_bytes: int, schema: pa.Schema) -> BlockMetadata:
    extra: dict[str, Any] = {"schema": schema} if _META_SCHEMA else {}
    return BlockMetadata(num_rows=num_rows, size_bytes=size_bytes, input_files=None, exec_stats=None, **extra)


def _read_task(
    fn: functools.partial[Iterator[Any]],
    meta: BlockMetadata,
    schema: pa.Schema,
    per_task_row_limit: int | None,
) -> ReadTask:
    kwargs: dict[str, Any] = {}
    if "schema" in _TASK_ARGS:
        kwargs["schema"] = schema
    if per_task_row_limit is not None and "per_task_row_limit" in _TASK_ARGS:
        kwargs["per_task_row_limit"] = per_task_row_limit
    return ReadTask(fn, meta, **kwargs)


def _read_group(group: Sequence[ScanTask], schema: pa.Schema) -> Iterator[Any]:
    """Runs in a Ray worker: the merged rows of a group of splits, one Arrow table per batch."""
    if len(schema) == 0:
        # Ray counts no rows in an Arrow table without columns (an empty projection, as ``count()``
        # pushes): a pandas frame keeps its row count in its index.
        import pandas as pd

        for batch in read_tasks(group):
            yield pd.DataFrame(index=pd.RangeIndex(batch.num_rows))
        return
    empty = True
    for batch in read_tasks(group):
        empty = False
        yield pa.Table.from_batches([batch], schema=schema)
    if empty:  # Ray turns a task without blocks into a block without columns: yield the schema instead
        yield schema.empty_table()


def _empty(schema: pa.Schema) -> Iterator[pa.Table]:
    yield schema.empty_table()


def read_table(
    table: Table,
    columns: Sequence[str] | str | None = None,
    filter: Any = None,
    version: int | None = None,
    as_of: Any = None,
    max_task_bytes: int | None = None,
    *,
    tag: str | None = None,
    snapshot: CatalogSnapshot | None = None,
    **ray_kwargs: Any,
) -> ray.data.Dataset:
    """The merged rows of ``table`` as a Ray Dataset (lazy; planned now, read when Ray executes).

    The scan arguments are those of :meth:`mere.Table.scan` and are checked here, before anything runs.

    Args:
        table: The mere table (its catalog opened with a warehouse URI the workers can open).
        columns: The columns to read (default: all).
        filter: A mere filter, evaluated in the scan.
        version: The version to read (default: the newest).
        as_of: A point in time to read the table at; an ``as_of`` without a zone is read as UTC, not as local
            time.
        max_task_bytes: The most file bytes one read task merges (default 128 MiB).
        tag: A tag whose version to read.
        snapshot: A catalog snapshot (``cat.snapshot()``) whose version of the table to read (not with
            ``version``, ``as_of`` or ``tag``).
        **ray_kwargs: Passed to ``ray.data.read_datasource`` (e.g. ``concurrency``, ``ray_remote_args``,
            ``override_num_blocks``: by default one read task per CPU of the cluster, more for big tables).

    Returns:
        The Ray Dataset.

    Raises:
        InvalidInput: ``table`` is not a mere Table or its catalog was opened with ``filesystem=``, a
            ``max_task_bytes`` that is not a positive integer, or an invalid scan argument (as
            :meth:`mere.Table.scan` raises it).
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
    """
    version = pinned_version(snapshot, table, version, as_of, tag)
    source = MereDatasource(table, columns, filter, version, as_of, max_task_bytes, tag=tag)
    if ray_kwargs.get("override_num_blocks") is None:
        # Ray's default (200 blocks at least) would cut a table into tiny merges, each paying its files'
        # footers and a task's start, and then split the blocks again: W1 took 4.1 s that way against
        # 0.7 s with one read task per CPU (bigger tables get more tasks: about 128 MiB of files each).
        ray_kwargs["override_num_blocks"] = _cluster_cpus()
    ds: ray.data.Dataset = ray.data.read_datasource(source, **ray_kwargs)
    return ds


# -- writing -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskStaged:
    """What one Ray write task staged, with the task's index (the commit orders the files by it)."""

    task: int
    staged: StagedWrite


@dataclass
class _Job:
    """What the ledger knows of one write job."""

    open: bool = True
    running: set[str] = field(default_factory=set)  # tokens of task attempts that began and did not end
    staged: list[StagedWrite] = field(default_factory=list)  # not yet collected by the driver
    failed: set[int] = field(default_factory=set)  # task indexes with a failed attempt
    succeeded: set[int] = field(default_factory=set)  # task indexes with an attempt that staged


class _Ledger:
    """An actor beside the write jobs of one driver: per job, the running tasks and what finished ones staged.

    A job the driver has collected for the last time is forgotten: a task that reports to it after that
    deletes its own files.
    """

    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}

    def open(self, job: str) -> None:
        self.jobs[job] = _Job()

    def begin(self, job: str, token: str) -> bool:
        entry = self.jobs.get(job)
        if entry is None or not entry.open:
            return False
        entry.running.add(token)
        return True

    def end(self, job: str, token: str, task: int, staged: StagedWrite | None) -> bool:
        entry = self.jobs.get(job)
        if entry is None:
            return False  # nobody collects any more: the task deletes its own files
        entry.running.discard(token)
        if staged is None:
            entry.failed.add(task)
        else:
            entry.succeeded.add(task)
            entry.staged.append(staged)
        return True

    def drain(self, job: str, final: bool) -> tuple[list[StagedWrite], int, int]:
        """(staged since the last drain, attempts still running, tasks that failed for good)."""
        entry = self.jobs.pop(job, None) if final else self.jobs.get(job)
        if entry is None:
            return [], 0, 0
        entry.open = False
        out = list(entry.staged)
        entry.staged.clear()
        return out, len(entry.running), len(entry.failed - entry.succeeded)


def _ledger_actor() -> Any:
    """The ledger as an actor class, which may run calls out of order.

    Its callers wait for each call before the next, so order is not needed: in order, Ray numbers each
    caller's calls and holds later ones until a missing number arrives, and a number lost with a task Ray
    cancelled stalled a call 30 s and then failed it (ActorUnavailableError, seen once in CI).
    """
    remote: Any = ray.remote  # its typed overloads do not list every actor option
    try:
        return remote(num_cpus=0, allow_out_of_order_execution=True)(_Ledger)
    except (TypeError, ValueError):  # a Ray without the option
        return remote(num_cpus=0)(_Ledger)


_LedgerActor: Any = _ledger_actor()


_ledgers: dict[str, Any] = {}  # a handle per Ray session and job: the actor lives as long as its handle


def _open_ledger(job: str) -> Any:
    """This driver's ledger actor (created on first use, gone with the driver), with ``job`` opened."""
    if not ray.is_initialized():
        ray.init()  # what Ray Data would do on the first execution
    ctx = ray.get_runtime_context()
    key = f"{ctx.get_node_id()}:{ctx.get_job_id()}"
    handle = _ledgers.get(key)
    if handle is not None:
        try:
            ray.get(handle.open.remote(job))
            return handle
        except ray.exceptions.RayActorError:
            pass
    handle = _ledgers[key] = _LedgerActor.remote()
    ray.get(handle.open.remote(job))
    return handle


if TYPE_CHECKING:
    _SinkBase = Datasink[TaskStaged]
else:  # Datasink is not subscriptable in every supported Ray
    _SinkBase = Datasink


class MereDatasink(_SinkBase):
    """A Ray Data sink that commits a whole Dataset to a mere table as one version (see :func:`write`).

    Single use: after the job, :attr:`result` holds the :class:`~mere.CommitResult`.

    Args:
        table: The mere table (its catalog opened with a warehouse URI the workers can open).
        mode: ``upsert``, ``append`` or ``overwrite`` (see :func:`write`).
        partition: With ``overwrite``: replace only the partition ``{column: value}``.
        idempotency_key: A key that makes the commit happen once (default: one of the sink's own, so that a
            commit whose outcome is unknown can be told).

    Raises:
        InvalidInput: ``table`` is not a mere Table or its catalog was opened with ``filesystem=``, an unknown
            ``mode`` or one that does not fit the table (upsert without key, append with one), ``partition``
            with a mode other than ``overwrite`` or naming columns that are not partition columns, or an
            invalid ``idempotency_key``.
    """

    def __init__(
        self,
        table: Table,
        mode: str = "upsert",
        *,
        partition: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        _check_write(table, mode, partition)
        check_idempotency_key(table.name, idempotency_key)
        self.table = table
        self.mode = mode
        self.partition = dict(partition) if partition is not None else None
        # Always a key: after a commit whose outcome is unknown, it tells whether the commit landed.
        self.idempotency_key = idempotency_key or f"ray-write:{uuid.uuid4().hex}"
        self.result: CommitResult | None = None
        self._committing: list[StagedWrite] | None = None
        self._returned: list[StagedWrite] = []
        self._job = uuid.uuid4().hex
        self._ledger: Any = _open_ledger(self._job)

    def __getstate__(self) -> dict[str, Any]:
        # Workers need the table, the mode and the ledger; the driver-side outcome stays on the driver.
        state = dict(self.__dict__)
        state.update(result=None, _committing=None, _returned=[])
        return state

    def get_name(self) -> str:
        """The name Ray shows for the write operator."""
        return "Mere"

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> TaskStaged:
        """Runs in a Ray worker: stage this task's blocks as files, and tell the ledger what was staged."""
        token = uuid.uuid4().hex
        if not ray.get(self._ledger.begin.remote(self._job, token)):
            raise InvalidInput(f"{self.table.name}: the Ray write job already ended; this task wrote nothing")
        staged: StagedWrite | None = None
        try:
            staged = self._stage(blocks)
        finally:
            try:
                accepted = ray.get(self._ledger.end.remote(self._job, token, ctx.task_idx, staged))
            except BaseException:
                if staged is not None:
                    self.table.abort([staged])
                raise
        assert staged is not None
        if not accepted:
            self.table.abort([staged])
            raise InvalidInput(f"{self.table.name}: the Ray write job failed; this task's files were deleted")
        return TaskStaged(ctx.task_idx, staged)

    def _stage(self, blocks: Iterable[Block]) -> StagedWrite:
        tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
        tables = [t for t in tables if t.num_rows or t.num_columns]
        if not tables:
            return StagedWrite(self.table.name, self.mode)
        try:
            data = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise InvalidInput(
                f"{self.table.name}: the blocks of one Ray task do not share a schema: {e}"
            ) from e
        return self.table.stage(data, self.mode, write_id=self._job)

    def on_write_complete(self, write_result: WriteResult[TaskStaged]) -> None:
        """Runs on the driver once every task finished: commit everything staged as one version."""
        returns: Sequence[Any] = (
            write_result if isinstance(write_result, list) else write_result.write_returns
        )
        parts = sorted((r for r in returns if isinstance(r, TaskStaged)), key=lambda r: r.task)
        staged = [p.staged for p in parts]
        self._returned = staged
        committing = {f.path for s in staged for f in s.files}
        # Staged by attempts Ray retried (their results were dropped): never committed, so deleted.
        registered, running, lost = ray.get(self._ledger.drain.remote(self._job, True))
        self.table.abort([s for s in registered if not any(f.path in committing for f in s.files)])
        if lost:  # Ray went on without them (DataContext.max_errored_blocks): a partial write never commits
            self._abort_unreported(running)
            raise MereError(
                f"{self.table.name}: {lost} Ray write task(s) failed and Ray completed the job without "
                "them (DataContext.max_errored_blocks?); nothing was committed"
            )
        self._committing = staged
        self.result = self.table.commit(
            staged, operation=self.mode, partition=self.partition, idempotency_key=self.idempotency_key
        )
        self._returned = []
        self._abort_unreported(running)  # (the commit landed: its files are referenced, so they stay)

    def on_write_failed(self, error: Exception) -> None:
        """Runs on the driver when the job failed: delete every file its tasks staged; nothing commits."""
        try:
            keep: set[str] = set()
            if self._committing is not None and isinstance(error, CommitStateUnknown):
                # Table.commit deleted its files on any other failure; here it may have landed.
                try:
                    landed = self.table.find_commit(self.idempotency_key) is not None
                except MereError:
                    landed = True  # cannot tell: keep the files (cleanup() removes them if unreferenced)
                if landed:
                    keep = {f.path for s in self._committing for f in s.files}
            self._discard(self._returned, keep)
            unreported = self._collect(keep, wait=self._committing is None)
            if self._committing is None:  # (a commit that was tried may still land: its files stay)
                # by name even when every task reported: one interrupted mid-write may not know its files
                self._abort_unreported(max(1, unreported))
        finally:
            self._returned = []

    def _collect(self, keep: set[str], wait: bool) -> int:
        """Delete what the ledger knows was staged; the number of task attempts that never reported.

        With ``wait``, first wait a while for the tasks that Ray is cancelling to report (a task reporting
        after that deletes its own files).
        """
        deadline = time.monotonic() + (CLEANUP_WAIT_S if wait else 0.0)
        while True:
            final = time.monotonic() >= deadline
            try:
                staged, running, _lost = ray.get(self._ledger.drain.remote(self._job, final))
            except Exception:
                return 1  # the ledger is gone, and with it what it knew
            self._discard(staged, keep)
            if final:
                return int(running)
            if running == 0:
                deadline = 0.0  # one last, final drain: from now on late tasks clean up after themselves
                continue
            time.sleep(0.05)

    def _abort_unreported(self, unreported: int) -> None:
        """Delete, by the job's write id, the files of task attempts that never reported (killed workers)."""
        if unreported:
            try:
                self.table.abort_write(self._job)
            except MereError as e:  # what stays is never referenced: cleanup() removes it
                log.warning("%s: could not delete the files of killed Ray tasks: %s", self.table.name, e)

    def _discard(self, staged: Sequence[StagedWrite], keep: set[str]) -> None:
        for s in staged:
            files = [f for f in s.files if f.path not in keep]
            if files:
                self.table.abort([StagedWrite(s.table, s.operation, files, s.rows)])


def write(
    ds: ray.data.Dataset,
    table: Table,
    mode: str = "upsert",
    *,
    partition: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
    **ray_kwargs: Any,
) -> CommitResult:
    """Write a Ray Dataset to ``table`` as ONE new version and return its :class:`~mere.CommitResult`.

    Ray tasks stage files in parallel; the driver commits once. If any task fails nothing is committed and the
    staged files are deleted.

    Args:
        ds: The Ray Dataset to write.
        table: The mere table (its catalog opened with a warehouse URI the workers can open).
        mode: ``"upsert"`` (table with primary key; missing columns keep their values, a CDC column applies
            deletes), ``"append"`` (table without key) or ``"overwrite"`` (replace every row, or with
            ``partition`` that partition's rows).
        partition: With ``overwrite``: replace only the partition ``{column: value}``, such as ``{"day":
            ...}``.
        idempotency_key: A key that makes the write happen once: with one that already committed, nothing runs
            and that commit is returned.
        **ray_kwargs: Passed to ``Dataset.write_datasink`` (e.g. ``concurrency``, ``ray_remote_args``).

    Returns:
        The commit.

    Raises:
        InvalidInput: ``table`` is not a mere Table or its catalog was opened with ``filesystem=``, an unknown
            ``mode`` or one that does not fit the table (upsert without key, append with one), ``partition``
            with a mode other than ``overwrite`` or naming columns that are not partition columns, or an
            invalid ``idempotency_key``.
        MereError: Ray completed the job without some failed tasks (``DataContext.max_errored_blocks``);
            nothing was committed. A failed task's own error reaches the caller as Ray raises it.
        CommitConflict: Concurrent commits won every retry (nothing committed).
        CommitStateUnknown: The catalog connection failed while committing; the commit may have landed.
    """
    _check_write(table, mode, partition)
    if not isinstance(ds, ray.data.Dataset):
        raise InvalidInput(f"write() takes a ray.data.Dataset, got {type(ds).__name__}")
    if idempotency_key is not None:
        prior = table.find_commit(idempotency_key)  # also checks the key
        if prior is not None:
            return prior
    sink = MereDatasink(table, mode, partition=partition, idempotency_key=idempotency_key)
    ds.write_datasink(sink, **ray_kwargs)
    if sink.result is None:  # pragma: no cover - Ray returned without calling on_write_complete
        raise MereError(f"{table.name}: Ray finished the write without completing it; nothing was committed")
    return sink.result


def _check_table(table: Any) -> None:
    if not isinstance(table, Table):
        raise InvalidInput(
            f"expected a mere.Table (catalog.table('ns.name')), got {type(table).__name__}: {table!r}"
        )
    if not table.storage.portable:
        raise InvalidInput(
            f"{table.name}: Ray workers open the warehouse from its URI; this catalog was opened with "
            "filesystem=: connect with a warehouse URI and storage_options instead"
        )


def _check_write(table: Any, mode: Any, partition: Mapping[str, Any] | None) -> None:
    _check_table(table)
    if mode not in MODES:
        raise InvalidInput(f"{table.name}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    keyed = table.spec.has_primary_key
    if mode == "upsert" and not keyed:
        raise InvalidInput(f"{table.name} has no primary key: write with mode='append'")
    if mode == "append" and keyed:
        raise InvalidInput(
            f"{table.name} has a primary key {list(table.primary_key)}: write with mode='upsert'"
        )
    if partition is not None:
        if mode != "overwrite":
            raise InvalidInput(f"{table.name}: partition= applies to mode='overwrite' only")
        table.partition_values(partition)  # checked now, before any task runs


__all__ = ["MODES", "MereDatasink", "MereDatasource", "TaskStaged", "read_table", "write"]
