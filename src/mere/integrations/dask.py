"""Dask: a Dask DataFrame over a mere table, and distributed writes committed once.

Reads plan on the client and ship self-contained :class:`~mere.table.scan.ScanTask` s to the workers
(no catalog access there): one partition per split, or per group of small splits, big splits cut into
key-range windows. Column selections on the DataFrame reach mere's projection.

Writes stage files in the workers (:meth:`~mere.Table.stage`) and the client commits them once; when
any partition fails, the files of every partition are deleted and nothing is committed.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from mere.concurrency import default_threads
from mere.errors import InvalidInput, MereError
from mere.metadata import CommitResult
from mere.optional import require
from mere.table.catalog_transaction import CatalogSnapshot, pinned_version
from mere.table.scan import TASK_BYTES, ScanTask, group_tasks, read_tasks
from mere.table.table import StagedWrite, Table

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd

WRITE_MODES = ("upsert", "append", "overwrite")


def _dask() -> Any:
    return require("dask.dataframe", "dask", "mere.integrations.dask")


def read_table(
    table: Table,
    columns: Sequence[str] | str | None = None,
    filter: Any = None,
    version: int | None = None,
    as_of: Any = None,
    *,
    tag: str | None = None,
    snapshot: CatalogSnapshot | None = None,
    partition_bytes: int = TASK_BYTES,
    min_partitions: int | None = None,
    types_mapper: Callable[[pa.DataType], Any] | None = None,
) -> dd.DataFrame:
    """The table's merged rows at one version as a Dask DataFrame (lazy; the version is pinned now).

    Partitions are pandas DataFrames with exact dtypes (:func:`pandas_types`: nullable integers, floats and
    booleans, Arrow-backed strings, ``pd.ArrowDtype`` for the rest). ``meta`` comes from the schema, so
    nothing is read to plan.

    Args:
        table: The mere table.
        columns: The columns to read (default: all).
        filter: A mere filter, evaluated in the scan (see :meth:`mere.Table.scan`).
        version: The version to read (default: the newest).
        as_of: A point in time to read the table at; an ``as_of`` without a zone is read as UTC, not as local
            time.
        tag: A tag whose version to read.
        snapshot: A catalog snapshot (``cat.snapshot()``) whose version of the table to read (not with
            ``version``, ``as_of`` or ``tag``).
        partition_bytes: About how many bytes of stored data each partition reads (Spark's default, 128 MiB).
        min_partitions: At least this many partitions where the table has enough splits and row groups to cut
            (default: the worker threads of the current distributed client, else this machine's cores).
        types_mapper: A function of a pyarrow type giving the pandas dtype, for ``pyarrow.Table.to_pandas``
            (default :func:`pandas_types`; ``pd.ArrowDtype`` for Arrow dtypes in every column).

    Returns:
        The lazy Dask DataFrame.

    Raises:
        NotInstalled: Dask is not installed.
        InvalidInput: ``table`` is not a mere Table, a ``types_mapper`` that is not callable, a
            ``partition_bytes`` or ``min_partitions`` that is not a positive integer, an invalid scan argument
            (as :meth:`mere.Table.scan` raises it), or a catalog opened with ``filesystem=``.
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
    """
    dd_module = _dask()
    if types_mapper is None:
        types_mapper = pandas_types
    elif not callable(types_mapper):  # it would fail only in the workers, at compute()
        raise InvalidInput(f"types_mapper must be a function of a pyarrow type, got {types_mapper!r}")
    if not isinstance(table, Table):
        raise InvalidInput(f"read_table() takes a mere Table, got {type(table).__name__}")
    for name, value in (("partition_bytes", partition_bytes), ("min_partitions", min_partitions)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
    version = pinned_version(snapshot, table, version, as_of, tag)
    scan = table.scan(columns=columns, filter=filter, version=version, as_of=as_of, tag=tag)
    groups = group_tasks(scan.tasks(), max_bytes=partition_bytes, min_groups=min_partitions or _threads())
    reader = _PartitionReader(scan.schema, types_mapper)
    meta = reader.frame(scan.schema.empty_table())
    if not groups:
        return cast("dd.DataFrame", dd_module.from_pandas(meta, npartitions=1))
    frame = dd_module.from_map(
        reader, groups, meta=meta, label=f"mere-read-{table.name}", enforce_metadata=False
    )
    return cast("dd.DataFrame", frame)


def pandas_types(kind: pa.DataType) -> Any:
    """The pandas dtype of a partition's Arrow column.

    Exact (nulls stay nulls, NaN stays NaN), and cheap to move between Dask processes: numbers and booleans
    are pandas' masked NumPy arrays, strings Arrow-backed ``string``, everything else (decimals, dates,
    timestamps, lists, structs) ``pd.ArrowDtype``.
    """
    import pandas as pd

    masked = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
        pa.float32(): pd.Float32Dtype(),
        pa.float64(): pd.Float64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }.get(kind)
    if masked is not None:
        return masked
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pd.StringDtype("pyarrow")
    return pd.ArrowDtype(kind)


@dataclass(frozen=True)
class _PartitionReader:
    """Reads one partition: a group of scan tasks, merged, as pandas (picklable)."""

    schema: pa.Schema
    types_mapper: Callable[[pa.DataType], Any] | None = None

    def frame(self, table: pa.Table) -> pd.DataFrame:
        kwargs = {} if self.types_mapper is None else {"types_mapper": self.types_mapper}
        return table.to_pandas(**kwargs)

    def __call__(self, group: Sequence[ScanTask], columns: Sequence[str] | None = None) -> pd.DataFrame:
        """One partition; ``columns`` is Dask's projection (the signature is its hook), read by mere."""
        schema = self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
        wanted = schema.names
        tasks = [
            t if list(t.options.columns) == wanted else replace(t, options=replace(t.options, columns=wanted))
            for t in group
        ]
        return self.frame(pa.Table.from_batches(list(read_tasks(tasks)), schema=schema))


@dataclass(frozen=True)
class _Failed:
    """A partition whose staging raised (kept as text: the exception may not unpickle on the client)."""

    kind: str
    message: str
    trace: str
    typed: MereError | None = None


def _stage(frame: pd.DataFrame, table: Table, operation: str, write_id: str) -> StagedWrite | _Failed:
    try:
        data = pa.Table.from_pandas(frame, preserve_index=False)
        return table.stage(data, operation, write_id=write_id)
    except Exception as e:  # reported to the client, which cleans every partition's files
        return _Failed(
            type(e).__name__, str(e), traceback.format_exc(), e if isinstance(e, MereError) else None
        )


def write(
    ddf: dd.DataFrame, table: Table, mode: str = "upsert", *, idempotency_key: str | None = None
) -> CommitResult:
    """Write a Dask DataFrame into ``table`` as one commit.

    Each partition is staged by a worker; the client commits all of them once. If any partition fails, every
    staged file is deleted, nothing is committed and the first failure is raised (a
    :class:`~mere.errors.MereError` keeps its type). Partitions stage with one write id, so when the write
    fails the files of a worker killed mid-write are deleted with the rest (:meth:`~mere.Table.abort_write`).
    A write that commits after Dask retried a killed worker's task leaves the killed attempt's files (finding
    them costs a listing per write); they are never visible, and :meth:`~mere.Table.cleanup` removes them.

    Args:
        ddf: The Dask DataFrame to write.
        table: The mere table.
        mode: ``upsert`` (table with primary key), ``append`` (table without key) or ``overwrite``.
        idempotency_key: A key that makes the commit happen once (a known one commits nothing new).

    Returns:
        The commit.

    Raises:
        NotInstalled: Dask is not installed.
        InvalidInput: ``table`` is not a mere Table, ``ddf`` is not a Dask DataFrame, an unknown ``mode``, or
            one that does not fit the table (upsert without key, append with one).
        MereError: A partition failed: its own error when it is one of mere's (such as
            :class:`~mere.errors.SchemaMismatch`), else a MereError with its type, message and traceback.
        CommitConflict: Concurrent commits won every retry (nothing committed).
        CommitFailed: Staged files no longer exist, or the catalog connection failed before the commit landed;
            nothing changed.
        CommitStateUnknown: The catalog connection failed while committing; the commit may have landed.
    """
    dd_module = _dask()
    import dask

    if not isinstance(table, Table):
        raise InvalidInput(f"write() takes a mere Table, got {type(table).__name__}")
    if mode not in WRITE_MODES:
        raise InvalidInput(f"write(): mode must be one of {', '.join(WRITE_MODES)}, got {mode!r}")
    if not isinstance(ddf, dd_module.DataFrame):
        raise InvalidInput(f"write() takes a Dask DataFrame, got {type(ddf).__name__}")
    keyed = table.spec.has_primary_key
    if mode == "upsert" and not keyed:
        raise InvalidInput(f"{table.name} has no primary key: write with mode='append'")
    if mode == "append" and keyed:
        raise InvalidInput(f"{table.name} has a primary key: write with mode='upsert'")
    stage = dask.delayed(_stage, pure=False)
    write_id = uuid.uuid4().hex
    try:
        results = _compute_all([stage(part, table, mode, write_id) for part in ddf.to_delayed()], table)
    except BaseException:
        _abort_killed(table, write_id)
        raise
    staged = [r for r in results if isinstance(r, StagedWrite)]
    failed = [r for r in results if isinstance(r, _Failed)]
    if failed:
        table.abort(staged)
        _abort_killed(table, write_id)
        first = failed[0]
        if first.typed is not None:
            raise first.typed
        raise MereError(
            f"{table.name}: {len(failed)} of {len(results)} partitions failed, nothing committed; first: "
            f"{first.kind}: {first.message}\n{first.trace}"
        )
    return table.commit(staged, operation=mode, idempotency_key=idempotency_key)


def _abort_killed(table: Table, write_id: str) -> None:
    """Delete, by the write's id, what workers staged and never returned (killed ones); best effort."""
    try:
        table.abort_write(write_id)
    except MereError as e:
        log.warning("%s: could not delete the files of failed Dask tasks: %s", table.name, e)


def _compute_all(stages: list[Any], table: Table) -> list[Any]:
    """Every stage's result; the other partitions' files are deleted when one partition's work raises.

    The files staged by the others are deleted before the error is re-raised (Dask stops at the first error
    and drops finished results).
    """
    import dask

    client = _client()
    if client is not None:  # distributed: wait for every future, then sort results from errors
        import distributed

        if not table.storage.portable:  # the tasks would carry the table pickled: refused before any runs
            raise InvalidInput(
                f"{table.name}: Dask's distributed workers open the warehouse from its URI; this catalog was "
                "opened with filesystem=: connect with a warehouse URI and storage_options instead"
            )
        futures = client.compute(stages)
        distributed.wait(futures)
        done = [f.result() for f in futures if f.status == "finished"]
        errors = [f for f in futures if f.status != "finished"]
        if errors:
            table.abort([r for r in done if isinstance(r, StagedWrite)])
            errors[0].result()  # raises the partition's own error
        return done
    # Local schedulers stop at the first error while other threads still finish their writes, so each
    # partition is computed apart (shared upstream work of a shuffle is repeated) and all are awaited.
    parallel = 1 if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded") else 0
    with ThreadPoolExecutor(max_workers=parallel or min(8, default_threads())) as pool:
        outcomes = list(pool.map(_compute_one, stages))
    raised = [o for o in outcomes if isinstance(o, BaseException)]
    if raised:
        table.abort([o for o in outcomes if isinstance(o, StagedWrite)])
        raise raised[0]
    return outcomes


def _compute_one(stage: Any) -> Any:
    import dask

    try:
        return dask.compute(stage, scheduler="sync")[0]
    except Exception as e:
        return e


def _threads() -> int:
    """Worker threads of the current distributed client, else this machine's cores."""
    client = _client()
    if client is not None:
        try:
            return max(1, int(sum(client.nthreads().values())))
        except Exception:  # a client that cannot answer: plan for this machine
            pass
    return default_threads()


def _client() -> Any:
    import dask

    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None  # a local scheduler was chosen explicitly
    try:
        from distributed import get_client
    except ImportError:
        return None
    try:
        return get_client()
    except ValueError:  # no client: a local scheduler
        return None
