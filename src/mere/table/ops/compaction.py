"""Compaction as an operation: plan the splits to fold (:func:`plan`), run the tasks anywhere
(:class:`~mere.table.compaction.CompactionTask`), and commit their files in for their inputs
(:func:`commit_results`: :meth:`CompactionPlan.staged`, a :class:`~mere.table.commit.StagedChange`
removing the inputs by catalog id, committed onto the planned version). :func:`compact` loops the three under the retry policy, and
:func:`runs_due` is the automatic (tiered) policy's choice of splits.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from mere.arrays import DECODED_PER_STORED, release_freed_memory, release_freed_memory_of_pools
from mere.errors import CommitConflict, InvalidInput, SchemaChanged
from mere.metadata import SEQ_SHIFT, CommitResult, FileEntry, datetime_to_micros
from mere.partitions import partition_json
from mere.read.planner import Explain, Split
from mere.retry import COMMIT_RETRIES
from mere.spec import TableSpec, tombstone_retention
from mere.table.commit import ONE_ATTEMPT, Change, Commit, StagedChange
from mere.table.compaction import CompactionPlan, CompactionTask, can_fold_partially, runs_to_fold
from mere.table.conflicts import columns_current
from mere.table.context import TableContext, TableHandle
from mere.table.scan import ScanTask

AUTO_COMPACT_MIN_FILES = 8  # compaction.min-files default: a split is folded when it holds this many runs
Runner = Callable[[Sequence[CompactionTask]], list[list[FileEntry]]]


def policy(spec: TableSpec) -> tuple[str, int]:
    """``(compaction.auto, compaction.min-files)``, defaults filled in."""
    props = spec.properties
    mode = props.get("compaction.auto", "off").lower()
    return mode, int(props.get("compaction.min-files", AUTO_COMPACT_MIN_FILES))


def size_amplification(spec: TableSpec) -> int | None:
    """``compaction.size-amplification-percent``; None (the default): no size rule."""
    value = spec.properties.get("compaction.size-amplification-percent")
    return None if value is None else int(value)


def runs_due(
    table: TableHandle, version: int | None, files: Sequence[FileEntry] | None = None
) -> dict[tuple[str, int], int]:
    """Per split the policy finds due at ``version`` (default: the newest), how many newest runs it folds
    (``files``: those at ``version``, when the caller listed them).

    Once a split is due, splits a commit or two from due are folded in the same compaction: one commit
    for all instead of one for each, as splits that commits fill evenly fall due together."""
    spec = table.spec
    if not spec.has_primary_key:
        return {}  # tables without a key have nothing to fold
    if files is None:
        files = table.files_at(table.resolve_version(version))
    min_files, percent = policy(spec)[1], size_amplification(spec)
    sizes: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    rows: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    for f in files:
        split = (f.partition, f.bucket)
        sizes[split][f.seq or 0] += f.size_bytes  # a catalog seq is never NULL
        rows[split][f.seq or 0] += f.row_count

    def picks(trigger: int, splits: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        out = {}
        for split in splits:
            by_seq = sizes[split]
            newest = sorted(by_seq, reverse=True)
            fold = runs_to_fold(
                [by_seq[q] for q in newest], [rows[split][q] for q in newest], trigger, percent
            )
            if fold:
                out[split] = fold
        return out

    due = picks(min_files, sizes)
    if due and min_files > 2:
        early = max(2, min_files - max(1, min_files // 4))
        due |= picks(early, [s for s in sizes if s not in due])
    return due


def plan(
    table: TableHandle,
    min_files: int = 2,
    partition: Mapping[str, Any] | None = None,
    splits: Collection[tuple[str, int]] | None = None,
    *,
    tiered: bool = False,
) -> CompactionPlan:
    """The splits :func:`compact` would fold now, as picklable tasks (see :meth:`mere.Table.plan_compaction`)."""
    ctx = table.context
    check_count(ctx.name, "min_files", min_files)
    check_flag(ctx.name, "tiered", tiered)
    wanted = ctx.files.wanted_partition(partition)
    only = wanted_splits(ctx, splits)
    base = table.version
    if not ctx.spec.has_primary_key:
        return CompactionPlan(ctx.name, ctx.uuid, base, (), (), ())
    columns_current(ctx, base)  # its tasks write the handle's columns
    files = table.files_at(base)
    picks = runs_due(table, base, files) if tiered else {}
    planned, opts = table.scan(version=base).planned(Explain(base))
    ids = {f.path: f.id for f in files}
    storage_options = tuple(sorted(ctx.storage.storage_options.items()))
    settings = ctx.settings
    tasks: list[CompactionTask] = []
    remove: list[int] = []
    partitions: set[str] = set()
    cutoff, times = _tombstone_clock(ctx, files)
    for split in planned:
        values = dict(split.partition)
        if wanted is not None and any(values.get(c) != v for c, v in wanted.items()):
            continue
        if only is not None and (partition_json(values), split.bucket) not in only:
            continue
        seqs = sorted({f.seq for f in split.files}, reverse=True)  # a compaction's files share one
        partial = False
        if tiered:
            fold = picks.get((partition_json(values), split.bucket), 0)
            if not fold:
                continue
            if fold < len(seqs):
                newest = [f for f in split.files if f.seq >= seqs[fold - 1]]
                if can_fold_partially(newest, ctx.spec):
                    split, partial = replace(split, files=tuple(newest)), True
        elif len(seqs) < min_files and not any(f.content == "delete" for f in split.files):
            continue
        elif ctx.spec.sequence_by and len(seqs) < 2:
            continue  # one run already: a fold would write the same rows (its tombstones included) again
        read = ScanTask(ctx.storage.uri, storage_options, ctx.record.spec, split, opts, table=ctx.name)
        tasks.append(
            CompactionTask(
                read,
                ctx.location,
                max(f.seq for f in split.files),
                settings.row_group_rows,
                settings.compression,
                settings.compression_level,
                partial,
                cutoff,
                _times_of(times, split),
            )
        )
        remove += [i for f in split.files if (i := ids.get(f.path)) is not None]
        partitions.add(partition_json(values))
    return CompactionPlan(ctx.name, ctx.uuid, base, tuple(tasks), tuple(remove), tuple(sorted(partitions)))


def _times_of(times: Sequence[tuple[int, int]], split: Split) -> tuple[tuple[int, int], ...]:
    """The commit times of the versions that wrote the split's files."""
    if not times:
        return ()
    versions = {f.seq >> SEQ_SHIFT for f in split.files}
    return tuple((v, t) for v, t in times if v in versions)


def _tombstone_clock(
    ctx: TableContext, files: Sequence[FileEntry]
) -> tuple[int | None, tuple[tuple[int, int], ...]]:
    """For a table with ``sequence_by``: the time before which a full fold drops tombstones (now less
    ``sequence.tombstone-retention``, UTC microseconds), and the commit time of each version that wrote
    one of ``files`` (a delete marker's deletion time, until a compaction stores it). (None, ()) else."""
    if not ctx.spec.sequence_by or not files:
        return None, ()
    retention = tombstone_retention(ctx.spec.properties)
    now = datetime_to_micros(dt.datetime.now(dt.UTC))
    cutoff = now - min(now, retention // dt.timedelta(microseconds=1))
    versions = {(f.seq or 0) >> SEQ_SHIFT for f in files}
    history = ctx.store.history(ctx.table_id, after=min(versions) - 1, upto=max(versions))
    return cutoff, tuple((s.version, s.committed_micros) for s in history if s.version in versions)


def commit_results(
    ctx: TableContext, plan: CompactionPlan, results: Sequence[Sequence[FileEntry]]
) -> CommitResult:
    """Swap the files the tasks wrote in for their inputs, as one new version (CommitConflict, and the new
    files deleted, when an input was replaced since the plan)."""
    if plan.table_uuid != ctx.uuid:
        discard_results(ctx, results)
        raise InvalidInput(f"{ctx.name}: this compaction was planned for another table")
    if len(results) != len(plan.tasks):
        discard_results(ctx, results)
        raise InvalidInput(f"{ctx.name}: {len(results)} results for {len(plan.tasks)} compaction tasks")
    if not all(
        isinstance(files, Sequence) and all(isinstance(f, FileEntry) for f in files) for files in results
    ):
        written = [files for files in results if isinstance(files, Sequence)]
        discard_results(ctx, [[f for f in files if isinstance(f, FileEntry)] for files in written])
        raise InvalidInput(
            f"{ctx.name}: compaction results must be the lists of files CompactionTask.run returns"
        )
    message = plan.staged(results)
    if any(f.seq is None for f in message.files):
        ctx.files.discard(message.files)
        raise InvalidInput(f"{ctx.name}: compaction results must come from CompactionTask.run")
    return commit_message(ctx, message)


def commit_message(ctx: TableContext, message: StagedChange) -> CommitResult:
    """Commit a compaction's message onto the version it planned at."""
    if message.table_uuid != ctx.uuid:
        ctx.files.discard(message.files)
        raise InvalidInput(f"{ctx.name}: this compaction was planned for another table")
    commit = Commit(ctx, retries=ONE_ATTEMPT, read_version=message.read_version)
    commit.files_from([message])
    commit.add(Change("compact", list(message.files), message.rows, removes=message.removes))
    return commit.run()


def discard_results(ctx: TableContext, results: Sequence[Sequence[FileEntry]]) -> None:
    """Delete files written by compaction tasks that will not be committed."""
    ctx.files.discard([f for files in results for f in files])


def compact(
    table: TableHandle,
    min_files: int,
    partition: Mapping[str, Any] | None,
    run: Runner | None,
    splits: Collection[tuple[str, int]] | None,
    tiered: bool,
) -> CommitResult | None:
    """Plan, run and commit, planning again when an overwrite or another compaction replaced some inputs
    (see :meth:`mere.Table.compact`)."""
    name = table.name
    if run is not None and not callable(run):
        raise InvalidInput(f"{name}: run must be a function of the compaction tasks, got {run!r}")
    check_flag(name, "tiered", tiered)

    def attempt() -> CommitResult | None:
        planned = plan(table, min_files, partition, splits, tiered=tiered)
        if not planned.remove:
            return None
        ctx = table.context
        return commit_results(ctx, planned, (run or (lambda tasks: run_here(ctx, tasks)))(planned.tasks))

    try:
        return COMMIT_RETRIES.run(
            attempt, lambda e: isinstance(e, CommitConflict) and not isinstance(e, SchemaChanged)
        )
    except SchemaChanged:
        raise
    except CommitConflict as e:
        raise CommitConflict(f"{name}: compaction lost {COMMIT_RETRIES.attempts} races; try again") from e


def run_here(ctx: TableContext, tasks: Sequence[CompactionTask]) -> list[list[FileEntry]]:
    """Run the tasks one after another in this process (deleting what they wrote on failure)."""
    results: list[list[FileEntry]] = []
    # A big fold starts from what the threads hold (the writes before it left theirs cached, often an
    # automatic compaction's own commit), and hands back what it freed: peak RSS is its rows, not more.
    handled = DECODED_PER_STORED * sum(task.read.split.size_bytes for task in tasks)
    release_freed_memory(handled)
    release_freed_memory_of_pools(handled)
    try:
        results.extend(task.run(ctx.storage) for task in tasks)  # keeps the finished ones on error
    except BaseException:
        discard_results(ctx, results)
        raise
    release_freed_memory(handled)
    release_freed_memory_of_pools(handled)
    return results


def wanted_splits(
    ctx: TableContext, splits: Collection[tuple[str, int]] | None
) -> set[tuple[str, int]] | None:
    """Splits given as (partition JSON, bucket) pairs, checked and spelled as the catalog spells them."""
    if splits is None:
        return None
    spec = ctx.spec
    bad = InvalidInput(
        f"{ctx.name}: splits must be (partition JSON, bucket) pairs, as compaction_due returns them; "
        f"got {splits!r}"
    )
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Collection):
        raise bad
    out = set()
    for split in splits:
        if not (
            isinstance(split, (tuple, list))
            and len(split) == 2
            and isinstance(split[0], str)
            and isinstance(split[1], int)
            and not isinstance(split[1], bool)
        ):
            raise bad
        try:
            values = json.loads(split[0])
        except ValueError:
            raise bad from None
        if (
            not isinstance(values, dict)
            or set(values) != set(spec.partition_by)
            or not all(v is None or isinstance(v, str) for v in values.values())
            or not 0 <= split[1] < spec.buckets
        ):
            raise InvalidInput(
                f"{ctx.name}: {split!r} is no split of this table (partition JSON of "
                f"{list(spec.partition_by)} and a bucket below {spec.buckets})"
            )
        out.add((partition_json(values), split[1]))  # the catalog's spelling of the JSON
    return out


def check_count(table: str, name: str, value: Any) -> None:
    """``value`` is a positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{table}: {name} must be a positive integer, got {value!r}")


def check_flag(table: str, name: str, value: Any) -> None:
    """``value`` is a bool."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{table}: {name} must be True or False, got {value!r}")
