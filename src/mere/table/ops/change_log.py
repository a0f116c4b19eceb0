"""Change feed: the net change of every key of a keyed table between two versions.

A key is *touched* by the commits ``start < version <= end`` when a file one of them added or removed
holds it (compactions change no row and touch nothing). Each touched key is read merged at ``start`` and
at ``end``, split by split, and compared:

- absent at ``start``, present at ``end``: one ``insert`` row (its state at ``end``);
- present at ``start``, absent at ``end``: one ``delete`` row (its state at ``start``);
- present at both with some column different: ``update_before`` then ``update_after``;
- otherwise (written back unchanged, or inserted and deleted again inside the range): nothing.

So the feed applied to the snapshot at ``start`` gives the snapshot at ``end``, whatever happened in
between (merge operators, partial upserts, overwrites, compactions, rollbacks). ``_version`` is the newest
commit of the range that touched the key, ``_commit_time`` its commit time.
"""

from __future__ import annotations

import copy
import functools
import itertools
import time
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import sorted_unique
from mere.concurrency import cpu_workers, shared_pool
from mere.errors import InvalidInput, NoSuchVersion, StorageError
from mere.kernels import numpy_sortable, sort_indices
from mere.metadata import SEQ_SHIFT, ConsumerRecord, FileEntry
from mere.read.evolution import read_stored_file
from mere.read.planner import Explain, plan_splits, split_filter
from mere.read.reader import filter_rows, plain_columns
from mere.spec import FEED_COLUMNS, FIELD_ID_KEY, TableSpec
from mere.table.conflicts import columns_changed
from mere.table.context import TableHandle, is_handle
from mere.table.evolve import can_widen
from mere.table.images import (
    LOG_AFTER,
    LOG_BEFORE,
    LOG_DELETE,
    LOG_SUMMARY_KEY,
    LOG_UNCHANGED,
    SPLITS_PER_READ,
    as_type,
    compare_images,
    file_keys,
    key_filter,
    positions,
    rows_equal,
    written_rows,
)
from mere.table.layout_view import WithLayout
from mere.table.ops import consumers
from mere.table.scan import Scan
from mere.table.versions import within as version_within

CHANGE_COLUMN, VERSION_COLUMN, COMMIT_TIME_COLUMN = FEED_COLUMNS
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "insert", "update_before", "update_after", "delete"
_ORDER = {DELETE: 0, UPDATE_BEFORE: 1, UPDATE_AFTER: 2, INSERT: 3}


@functools.cache
def _change_names() -> pa.Array:
    """The change kinds by code; made on first use (pa.array at import would make pyarrow import pandas)."""
    return pa.array(list(_ORDER))


_FIRST = "\x00first"  # the first version of the range that touched a key
_WROTE = "\x00wrote"  # the newest version of the range that added a file holding a key (0: none)
MAX_VERSION = 2**63 - 1  # the largest version a catalog can hold (a signed 64-bit integer)
MAX_POLL_SECONDS = 86_400.0  # follow() polls at least daily (and time.sleep cannot wait forever)
_BEFORE_KINDS = (LOG_DELETE, LOG_BEFORE, LOG_UNCHANGED)


def change_feed(
    table: TableHandle,
    start_version: int,
    end_version: int | None = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    splits: Collection[tuple[str, int]] | None = None,
) -> pa.RecordBatchReader:
    """See :meth:`mere.Table.changes`; ``splits`` limits the feed to some splits.

    ``splits`` ((partition JSON, bucket) pairs): an engine's task computes its share of one feed.
    """
    if columns_changed(table.context) is not None:
        # The feed speaks the table's current columns, also to a handle loaded before they changed: a
        # fresh copy reads it (the caller's handle stays as it is; its writes are refused as before).
        table = copy.copy(table).refresh()
    spec = table.spec
    if not spec.has_primary_key:
        raise InvalidInput(
            f"{table.name} has no primary key: a change feed follows keys (read the appended files with "
            "scan(version=...) instead)"
        )
    clash = [c for c in spec.schema.names if c in FEED_COLUMNS]
    if clash:  # a table made before these names were reserved
        raise InvalidInput(
            f"{table.name}: column(s) {clash} share names with the change feed's own columns "
            f"{list(FEED_COLUMNS)}: rename them (Table.rename_column) to read its changes"
        )
    for name, value in (("start_version", start_version), ("end_version", end_version)):
        if (value is not None or name == "start_version") and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise InvalidInput(f"{table.name}: {name} must be a non-negative integer, got {value!r}")
    # One catalog read for the whole plan; the versions are checked against what it found.
    # Versions beyond any catalog's integers are left to _version_within to refuse.
    found = table.context.store.version_range_changes(
        table.context.table_id,
        min(start_version, MAX_VERSION),
        None if end_version is None else min(end_version, MAX_VERSION),
    )
    current, oldest = found.current, found.oldest
    end = version_within(table.context, end_version, current, oldest)
    start = version_within(table.context, start_version, current, oldest)
    if start > end:
        raise InvalidInput(f"{table.name}: start_version {start} is after end_version {end}")
    identity = list(spec.identity_columns)
    # The feed speaks the current columns.
    wanted = spec.schema.names if columns is None else list(table.scan(columns=columns).output_columns)
    out_columns = identity + [c for c in wanted if c not in identity]
    # Rows are compared and filtered whole; the projection applies to what comes out.
    read_columns = identity + [c for c in spec.schema.names if c not in identity]
    predicate = split_filter(spec, filter).bound  # validated now; runs on the feed's whole rows
    schema = pa.schema(
        [spec.schema.field(c).with_nullable(True) for c in out_columns]
        + [
            pa.field(CHANGE_COLUMN, pa.string(), nullable=False),
            pa.field(VERSION_COLUMN, pa.int64(), nullable=False),
            pa.field(COMMIT_TIME_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )
    if start == end:
        return pa.RecordBatchReader.from_batches(schema, iter(()))
    then = _order_of_range(table, start, end)
    if then is not None:
        # The range was written in an order set_sequence_by changed since: it merges in that order.
        spec = replace(spec, sequence_by=then.sequence_by, sequence_groups=then.sequence_groups)
        handle, ordered = table, spec
        table = WithLayout(handle, ordered, lambda: replace(handle.context, spec=ordered))
    history = {s.version: s for s in found.commits}
    gone = [v for v, snap in history.items() if snap.expired]
    if gone:  # e.g. a tagged start_version: readable itself, but the commits after it were expired
        raise NoSuchVersion(
            f"{table.name}: the change feed from version {start} needs every commit after it, and "
            f"version {gone[0]} has expired"
        )
    # Columns changed at some point: a rollback may have narrowed one since, or brought one back that
    # logs written while it was dropped do not hold.
    logs_hold_every_column = True
    if spec.evolved:
        specs = _specs_in_force(table, start, end)
        _refuse_narrowed_columns(table, specs, start, end)
        # The current columns files at start may hold: those created by then, even if dropped at start and
        # brought back later by a rollback (their old files still hold them). Every log of the range must
        # hold them too, or its before-images would read NULL where the merged start version has values.
        created = specs[0][1].last_field_id
        in_files = {i for i in spec.field_ids.values() if i <= created}
        logs_hold_every_column = all(in_files <= set(s.field_ids.values()) for _, s in specs)
    touched: dict[tuple[str, int], list[tuple[FileEntry, int]]] = defaultdict(list)
    added_files: dict[tuple[str, int], list[FileEntry]] = defaultdict(list)
    replaced: set[tuple[str, int]] = set()  # splits where the range removed or partially wrote rows
    removed_from: set[tuple[str, int]] = set()  # splits where the range removed files
    only = None if splits is None else set(splits)
    logs: dict[tuple[str, int], list[FileEntry]] = defaultdict(list)
    for entry, removed in found.files:
        split = (entry.partition, entry.bucket)
        if only is not None and split not in only:
            continue
        if entry.content == "log":
            logs[split].append(entry)
            continue
        added = entry.added_version
        if added is not None and added > start and history[added].operation != "compact":
            touched[split].append((entry, added))
            added_files[split].append(entry)
            if entry.content == "data" and entry.columns is not None:
                replaced.add(split)
            # A file a rollback brought back keeps the older sequence it had: it is not newer than the
            # rest of the range, so the after-image cannot come from the added files alone.
            if entry.seq is not None and entry.seq >> SEQ_SHIFT < added:
                replaced.add(split)
        if removed is not None and history[removed].operation != "compact":
            touched[split].append((entry, removed))
            replaced.add(split)
            removed_from.add(split)
    # Newest version wins and the range only added whole rows and delete markers: the newest version of
    # every touched key is in the files the range added (they are newer than every file before it), so
    # the after-image merges those files alone instead of the whole split.
    # Not with sequence_by: an older file may hold a key's version of higher sequence.
    from_added = (
        {split: files for split, files in added_files.items() if split not in replaced}
        if spec.all_last and not spec.sequence_by
        else {}
    )
    # Where every commit that touched a split logged its before-images (``changes.log``), the before-image
    # of a key is in the log of the first commit of the range that touched it: no merge at ``start``.
    # Logs go with expired versions: only those from the oldest readable version on are kept.
    logged = {
        v
        for v, snap in history.items()
        if max(start, oldest - 1) < v <= end
        and logs_hold_every_column
        and (snap.internal.get("change_log") or snap.internal.get(LOG_SUMMARY_KEY))
    }
    from_logs = {
        split: logs.get(split, [])
        for split in from_added
        if all(e.added_version in logged for e in added_files[split])
    }
    # A split that one commit of the range changed, and that commit logged its rows: its feed is that
    # commit's log (no data file read, nothing compared).
    from_log_rows = {}
    for split, files in from_logs.items():
        versions = {e.added_version for e in added_files[split]}
        if len(versions) == 1:
            (version,) = versions
            if version is not None and history[version].internal.get(LOG_SUMMARY_KEY):
                from_log_rows[split] = ([e for e in files if e.added_version == version], version)
    times = {v: s.committed_at for v, s in history.items()}
    full = pa.schema(
        [spec.schema.field(c).with_nullable(True) for c in read_columns] + list(schema)[len(out_columns) :]
    )
    feed = _Feed(
        table,
        start,
        end,
        read_columns,
        predicate,
        full,
        times,
        out_columns,
        from_added,
        from_logs,
        from_log_rows,
        removed_from,
    )
    return pa.RecordBatchReader.from_batches(schema, _expiry_named(table, start, feed.batches(touched)))


def _expiry_named(
    table: TableHandle, start: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The feed's batches; a file an ``expire`` deleted meanwhile is named as the expiry it is."""
    try:
        yield from batches
    except StorageError as e:
        try:
            table.resolve_version(start)
        except NoSuchVersion:
            raise NoSuchVersion(
                f"{table.name}: version {start} expired while its change feed was being read"
            ) from e
        raise


class _Part:
    """Feed rows of some touched keys: ``rows.take(at)``.

    Of change kinds ``kind`` (codes of ``_ORDER``), versions ``versions`` and splits ``split`` (ranks among
    the splits emitted together). ``ordered``: the rows are in the feed's order already (one split, one
    version, in key and kind order).
    """

    def __init__(
        self,
        rows: pa.Table,
        at: np.ndarray,
        kind: np.ndarray,
        versions: np.ndarray,
        split: np.ndarray,
        ordered: bool = False,
    ) -> None:
        self.rows, self.at, self.kind, self.versions, self.split = rows, at, kind, versions, split
        self.ordered = ordered


class _Feed:
    def __init__(
        self,
        table: TableHandle,
        start: int,
        end: int,
        columns: list[str],
        predicate: E.Expr,
        schema: pa.Schema,
        times: dict[int, Any],
        out_columns: list[str],
        from_added: dict[tuple[str, int], list[FileEntry]],
        from_logs: dict[tuple[str, int], list[FileEntry]],
        from_log_rows: dict[tuple[str, int], tuple[list[FileEntry], int]],
        removed: set[tuple[str, int]],
    ) -> None:
        self.table, self.start, self.end = table, start, end
        self.ctx = table.context
        self.from_added, self.from_logs, self.from_log_rows = from_added, from_logs, from_log_rows
        self.removed = removed
        self.columns, self.predicate, self.schema, self.times = columns, predicate, schema, times
        self.out_names = [*out_columns, CHANGE_COLUMN, VERSION_COLUMN, COMMIT_TIME_COLUMN]
        # The splits of one partition share its values: a row is known by its key there.
        self.keys = list(table.spec.primary_key)

    def batches(
        self, touched: dict[tuple[str, int], list[tuple[FileEntry, int]]]
    ) -> Iterator[pa.RecordBatch]:
        moves = self.table.spec.cross_partition
        pool = shared_pool("feed", cpu_workers())  # splits are independent: their files read in parallel
        for chosen in _split_groups(sorted(touched), moves):
            emitted: list[pa.Table] = []
            from_log = [split for split in chosen if split in self.from_log_rows]
            # A split that one whole-row file of the range changed: the file holds its touched keys (each
            # once) and, but for its delete markers, their rows at the end version. Read once, no merge.
            single = [
                split
                for split in chosen
                if split not in self.from_log_rows
                and split in self.from_added
                and len(self.from_added[split]) == 1
                and len(touched[split]) == 1
            ]
            rest = [split for split in chosen if split not in single and split not in from_log]
            # One hand-off for every file read of the group that needs no plan.
            quick = pool.map(
                lambda split: (
                    self._log_rows(split) if split in self.from_log_rows else self._single_images(split)
                ),
                from_log + single,
            )
            keys = dict(zip(rest, pool.map(lambda split: self._touched_keys(touched[split]), rest)))
            parts: dict[tuple[str, int], _Part] = {}
            after_single: dict[tuple[str, int], pa.Table] = {}
            before: dict[tuple[str, int], pa.Table] = {}
            for split, got in zip(from_log + single, quick):
                if isinstance(got, _Part):
                    parts[split] = got
                    continue
                keys[split], after_single[split], logged_rows = got
                if logged_rows is not None:
                    before[split] = logged_rows
            compared = [split for split in chosen if split not in parts]
            merged = {split for split in compared if split not in self.from_logs}
            # The after-image of a split read from its added files needs no key filter: they hold only
            # touched keys.
            slow = merged | {split for split in compared if split not in self.from_added}
            where = (
                self._key_filter(pa.concat_tables([keys[split] for split in sorted(slow)])) if slow else None
            )
            if merged:
                before.update(self.table.split_tables(self.start, merged, self.columns, where))
            logged = [split for split in compared if split in self.from_logs and split not in before]
            before.update(
                zip(
                    logged,
                    pool.map(self._logged, [self.from_logs[s] for s in logged], [keys[s] for s in logged]),
                )
            )
            after = self._after(rest, where) if rest else {}
            after.update(after_single)
            if moves:
                for split in rest:
                    if split in self.removed:
                        mine = self._together([after[split]] if split in after else [])
                        keys[split] = self._moved_before_removal(split, keys[split], mine)
            # The splits of a partition are compared and ordered at once (a key lives in one bucket): one
            # pass of a few Arrow calls, not one per split.
            for _, run in itertools.groupby(chosen, key=lambda split: split[0]):
                together = list(run)
                rank = {split: i for i, split in enumerate(together)}
                found = []
                for split in together:  # in split order: parts in the feed's order need no sort
                    if split in parts:
                        part = parts[split]
                        part.split = np.full(len(part.at), rank[split], np.int64)
                        found.append(part)
                others = [s for s in together if s not in parts]
                if others:
                    touched_keys = [keys[s] for s in others]
                    found.append(
                        self._compare(
                            pa.concat_tables(touched_keys),
                            self._together([before[s] for s in others if s in before]),
                            self._together([after[s] for s in others if s in after]),
                            np.repeat([rank[s] for s in others], [k.num_rows for k in touched_keys]),
                        )
                    )
                out = self._emit(found)
                if out.num_rows:
                    if not moves:
                        yield from out.to_batches()
                    emitted.append(out)
            if moves and emitted:
                # A key that moved partition has its delete in one split and its row in another (of its
                # bucket, which the group holds whole): deletes first, so that rows applied in order keep
                # it. A key has one change per split, so no other order between its rows matters.
                out = pa.concat_tables(emitted)
                live = pc.not_equal(out.column(CHANGE_COLUMN), pa.scalar(DELETE))
                order = np.argsort(live.to_numpy(zero_copy_only=False), kind="stable")
                yield from out.take(pa.array(order)).to_batches()

    def _together(self, tables: list[pa.Table]) -> pa.Table:
        """Merged rows of several splits as one table of the feed's column types."""
        kept = [self._conformed(t) for t in tables if t.num_rows]
        return pa.concat_tables(kept) if kept else self._schema_of_rows().empty_table()

    def _schema_of_rows(self) -> pa.Schema:
        return pa.schema([self.table.spec.schema.field(c).with_nullable(True) for c in self.columns])

    def _conformed(self, rows: pa.Table) -> pa.Table:
        """Rows of the feed's columns in their table types (dictionaries decoded, all nullable)."""
        schema = self._schema_of_rows()
        rows = plain_columns(rows, self.table.spec.schema).select(self.columns)
        if rows.schema.equals(schema):
            return rows
        return pa.Table.from_arrays([as_type(c, f.type) for c, f in zip(rows.columns, schema)], schema=schema)

    def _after(self, chosen: list[tuple[str, int]], where: E.Expr | None) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of the touched keys at the end version."""
        quick = [split for split in chosen if split in self.from_added]
        rest = {split for split in chosen if split not in self.from_added}
        after = self.table.split_tables(self.end, rest, self.columns, where) if rest else {}
        if quick:
            t = self.table
            scan = Scan(t, self.end, tuple(self.columns), None, spec=t.spec)
            entries = [e for split in quick for e in self.from_added[split]]
            after.update(
                scan.merge_splits(plan_splits(t.spec, entries, split_filter(t.spec, None), Explain(self.end)))
            )
        return after

    def _key_filter(self, keys: pa.Table) -> E.Expr | None:
        return key_filter(self.keys, keys)

    def _read_log(self, entry: FileEntry) -> tuple[pa.Table, np.ndarray | None, bool]:
        """A log file's rows in the feed's columns, their change kinds, and whether it holds a dropped column.

        The last tells whether the log holds a column dropped since it was written. Change kinds None: a log
        of before-images only, as ``changes.log`` first wrote them.
        """
        spec, storage = self.table.spec, self.table.storage
        stored = read_stored_file(storage, entry)
        current = {str(i).encode() for i in spec.field_ids.values()}
        dropped = any(
            f.metadata is not None and f.metadata.get(FIELD_ID_KEY, b"") not in current
            for f in stored.rows.schema
        )
        return self._conformed(stored.as_table(spec)), stored.ops, dropped

    def _log_rows(self, split: tuple[str, int]) -> _Part:
        """The feed rows of a split that one logged commit of the range changed: its log, as written."""
        logs, version = self.from_log_rows[split]
        tables, kinds = [], []
        for entry in logs:
            rows, kind, dropped = self._read_log(entry)
            assert kind is not None  # these logs carry their change kinds
            kind = kind.astype(np.int64)
            if dropped:
                # A key updated only in columns dropped since is unchanged in the current ones. The log
                # lists a key's row before right before its row after.
                pair = np.flatnonzero(kind == LOG_BEFORE)
                assert (kind[pair + 1] == LOG_AFTER).all(), entry.path  # written in key, then kind order
                same = pair[rows_equal(rows, pair, rows, pair + 1, self.columns)]
                kind[same] = kind[same + 1] = LOG_UNCHANGED
            tables.append(rows)
            kinds.append(kind)
        if not tables:  # e.g. deletes of keys the table did not hold: no change
            return _Part(self._schema_of_rows().empty_table(), *(np.empty(0, np.int64),) * 4)
        rows = pa.concat_tables(tables)
        kind = np.concatenate(kinds)
        at = np.flatnonzero(kind != LOG_UNCHANGED)
        # Logs are written in key, then kind order.
        return _Part(rows, at, kind[at], np.full(len(at), version, np.int64), at[:0], ordered=len(logs) == 1)

    def _logged(self, logs: list[FileEntry], touched: pa.Table) -> pa.Table:
        """Rows at the start version of the touched keys, from the logs.

        Each key's row in the log of the first commit of the range that touched it (absent there: the key was
        absent).
        """
        if not logs:
            return self._schema_of_rows().empty_table()
        parts = []
        for entry in logs:
            rows, kind, _ = self._read_log(entry)
            if kind is not None:  # only the rows before the commit
                rows = rows.filter(pa.array(np.isin(kind, _BEFORE_KINDS)))
            version = np.full(rows.num_rows, entry.added_version, np.int64)
            parts.append(rows.append_column(_FIRST, pa.array(version)))
        logged = pa.concat_tables(parts)
        first = np.asarray(touched.column(_FIRST).to_numpy())
        if len(logs) == 1 and len(first) and (first == logs[0].added_version).all():
            # One commit's log and every touched key first touched by it: the log holds exactly their
            # rows before it.
            return logged.select(self.columns)
        at = positions(logged, touched, self.keys)
        found = at >= 0
        found[found] = first[at[found]] == np.asarray(logged.column(_FIRST).to_numpy())[found]
        return logged.filter(pa.array(found)).select(self.columns)

    def _single_images(self, split: tuple[str, int]) -> tuple[pa.Table, pa.Table, pa.Table | None]:
        """:meth:`_single` of the split's one added file, and its before-image from the logs.

        The before-image is None when the split is not logged (it is merged at the start version then).
        """
        keys, rows = self._single(self.from_added[split][0])
        logs = self.from_logs.get(split)
        return keys, rows, None if logs is None else self._logged(logs, keys)

    def _single(self, entry: FileEntry) -> tuple[pa.Table, pa.Table]:
        """The touched keys and the rows at the end version of a file that alone changed its split.

        Each touched key comes with the version that added the file as both newest and first.
        """
        keys, rows = written_rows(self.ctx, [entry])
        version = pa.array(np.full(keys.num_rows, entry.added_version, np.int64))
        keys = (
            keys.append_column(VERSION_COLUMN, version)
            .append_column(_FIRST, version)
            .append_column(_WROTE, version)
        )
        return keys, self._conformed(rows)

    def _touched_keys(self, files: list[tuple[FileEntry, int]]) -> pa.Table:
        """Each touched key of the split with the newest and the first version of the range touching it.

        And the newest version that added a file holding it (0: none).
        """
        # A file added and removed in the range is read once, with its removal's version (then its split
        # is merged, not read from logs, so the first version matters only for files the range added).
        newest: dict[str, tuple[FileEntry, int]] = {}
        wrote: dict[str, int] = {}
        for entry, version in files:
            if entry.path not in newest or newest[entry.path][1] < version:
                newest[entry.path] = (entry, version)
            if version == entry.added_version:
                wrote[entry.path] = version
        parts = []
        for entry, version in newest.values():
            keys = file_keys(self.ctx, entry)
            n = keys.num_rows
            parts.append(
                keys.append_column(VERSION_COLUMN, pa.array(np.full(n, version, np.int64))).append_column(
                    _WROTE, pa.array(np.full(n, wrote.get(entry.path, 0), np.int64))
                )
            )
        both = pa.concat_tables(parts)
        return (
            both.group_by(self.keys, use_threads=False)
            .aggregate([(VERSION_COLUMN, "max"), (VERSION_COLUMN, "min"), (_WROTE, "max")])
            .rename_columns([*self.keys, VERSION_COLUMN, _FIRST, _WROTE])
        )

    def _moved_before_removal(self, split: tuple[str, int], touched: pa.Table, after: pa.Table) -> pa.Table:
        """``touched`` with the versions of keys that a removal did not change set to the version that wrote them.

        Such a key's newest touch removed a file the range had written it to, and its row at the version
        before equals its row at the end: e.g. a move out of a partition that an overwrite replaced later.
        Where keys move between partitions a consumer keyed by the key orders a move's halves by these
        versions.
        """
        newest = np.array(touched.column(VERSION_COLUMN).to_numpy())  # a copy: it is changed below
        wrote = np.asarray(touched.column(_WROTE).to_numpy())
        suspect = np.flatnonzero((wrote > self.start) & (newest > wrote))
        if not len(suspect):
            return touched
        for version in np.unique(newest[suspect]).tolist():
            mine = suspect[newest[suspect] == version]
            keys = touched.take(pa.array(mine))
            before = self.table.split_tables(version - 1, {split}, self.columns, self._key_filter(keys))
            prior = self._together([before[split]] if split in before else [])
            _, _, _, changed = compare_images(keys, prior, after, self.keys, self.columns, unchanged=False)
            same = np.setdiff1d(np.arange(len(mine)), changed)
            newest[mine[same]] = wrote[mine[same]]
        at = touched.schema.get_field_index(VERSION_COLUMN)
        return touched.set_column(at, VERSION_COLUMN, pa.array(newest, pa.int64()))

    def _compare(self, touched: pa.Table, before: pa.Table, after: pa.Table, split: np.ndarray) -> _Part:
        """The feed rows of the touched keys from their merged rows at the start and the end.

        ``touched`` holds each key once, with its newest version, of splits ``split``.
        """
        rows, at, kind, key = compare_images(touched, before, after, self.keys, self.columns, unchanged=False)
        versions = np.asarray(touched.column(VERSION_COLUMN).to_numpy())[key]
        return _Part(rows, at, kind, versions, split[key])

    def _emit(self, parts: list[_Part]) -> pa.Table:
        """Feed rows of some parts (in split order), split by split, in the feed's schema.

        Each split's rows are ordered by version, then key, then change kind (one NumPy sort and one take of
        the rows, none where the parts are in that order already).
        """
        parts = [p for p in parts if len(p.at)]
        if not parts:
            return self.schema.empty_table().select(self.out_names)
        offsets = np.cumsum([0] + [p.rows.num_rows for p in parts[:-1]])
        at = np.concatenate([p.at + offset for p, offset in zip(parts, offsets)])
        kind = np.concatenate([p.kind for p in parts])
        versions = np.concatenate([p.versions for p in parts])
        rows = (
            pa.concat_tables([p.rows.select(self.columns) for p in parts])
            if len(parts) > 1
            else parts[0].rows.select(self.columns)
        )
        if not all(p.ordered for p in parts):
            # A key's rows come in order of change kind in every part (a log is in key and kind order; a
            # comparison lists its rows kind by kind), and a key is in one split: a stable sort by split,
            # version and key keeps them so.
            by: list[pa.Array | np.ndarray] = [_rows_of(rows.column(k), at) for k in self.keys]
            if versions.min() != versions.max():
                by.insert(0, versions)
            split = np.concatenate([p.split for p in parts])
            if split.min() != split.max():
                by.insert(0, split)
            order = sort_indices(by)
            versions, kind, at = versions[order], kind[order], at[order]
        if len(at) != rows.num_rows or (np.diff(at) != 1).any():  # else every row, in order
            rows = rows.take(pa.array(at))
        stamp_type = pa.timestamp("us", tz="UTC")
        if versions.min() == versions.max():  # one commit: no lookup
            stamps = pa.repeat(pa.scalar(self.times[int(versions[0])], stamp_type), len(versions))
        else:
            seen = sorted_unique(versions)
            stamps = pa.array([self.times[int(v)] for v in seen], stamp_type)
            stamps = stamps.take(pa.array(np.searchsorted(seen, versions)))
        cols = [as_type(rows.column(c), self.schema.field(c).type) for c in self.columns]
        cols += [_change_names().take(pa.array(kind)), pa.array(versions, pa.int64()), stamps]
        out = pa.Table.from_arrays(cols, schema=self.schema)
        if not isinstance(self.predicate, E.AlwaysTrue):
            out = filter_rows(out, self.predicate)
        return out.select(self.out_names)


def _split_groups(splits: list[tuple[str, int]], moves: bool) -> Iterator[list[tuple[str, int]]]:
    """The splits (sorted) read together, up to ``SPLITS_PER_READ`` at a time.

    Where keys can move (``moves``) the groups hold whole buckets (a key keeps its bucket when it moves),
    each group in split order.
    """
    if not moves:
        for i in range(0, len(splits), SPLITS_PER_READ):
            yield splits[i : i + SPLITS_PER_READ]
        return
    by_bucket: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for split in splits:
        by_bucket[split[1]].append(split)
    group: list[tuple[str, int]] = []
    for bucket in sorted(by_bucket):
        if group and len(group) + len(by_bucket[bucket]) > SPLITS_PER_READ:
            yield sorted(group)
            group = []
        group.extend(by_bucket[bucket])
    if group:
        yield sorted(group)


def _specs_in_force(table: TableHandle, start: int, end: int) -> list[tuple[int, TableSpec]]:
    """The spec at ``start``, then each spec a commit of ``(start, end]`` set, with its version."""
    specs = [(start, table.spec_at(start))]
    specs += [
        (v, TableSpec.from_json(text, table.name))
        for v, text in table.context.store.specs_after(table.context.table_id, start)
        if v <= end
    ]
    return specs


def _order_of_range(table: TableHandle, start: int, end: int) -> TableSpec | None:
    """The layout whose ``sequence_by`` the versions ``start`` to ``end`` were written in (None: the current).

    A range across a change of order is refused: the feed merges both ends in one order (each version reads
    in its own with ``scan(version=...)``)."""
    store, table_id, now = table.context.store, table.context.table_id, table.spec.sequence_by
    at_start = store.spec_at(table_id, start)
    found = [] if at_start is None else [(start, at_start)]
    orders: dict[tuple[str, ...], tuple[int, TableSpec]] = {}
    for version, text in [*found, *store.specs_after(table_id, start)]:
        if version > end and at_start is not None:  # (without the spec at start, the current order must do)
            break
        then = TableSpec.from_json(text, table.name)
        orders.setdefault(then.sequence_by, (version, then))
    if at_start is None:
        orders.setdefault(now, (end, table.spec))
    if len(orders) > 1:
        (v1, s1), (v2, s2) = list(orders.values())[:2]
        raise InvalidInput(
            f"{table.name}: the change feed from {start} to {end} reads both versions in one sequence order, "
            f"but version {v1} ordered by {list(s1.sequence_by)} and version {v2} by {list(s2.sequence_by)}: "
            "read each version with scan(version=...) instead"
        )
    if not orders or next(iter(orders)) == now:
        return None
    return next(iter(orders.values()))[1]


def _refuse_narrowed_columns(
    table: TableHandle, specs: list[tuple[int, TableSpec]], start: int, end: int
) -> None:
    """Refuse a range in which a rollback undid a widening, naming the column and the versions.

    Values of the range's wider versions would not fit the current column type the feed speaks (an overflow,
    or a float64 silently rounded to float32).
    """
    current = table.spec
    ids = {fid: name for name, fid in current.field_ids.items()}
    for version, spec in specs:
        for name, fid in spec.field_ids.items():
            now = ids.get(fid)
            if now is None or name not in spec.schema.names:
                continue
            was, kind = spec.schema.field(name).type, current.schema.field(now).type
            # Numbers may not fit back (an overflow, or float64 rounded to float32); a large_string's
            # values are strings all the same.
            numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
            if numeric and was != kind and not can_widen(was, kind):
                raise InvalidInput(
                    f"{table.name}: column {now!r} was {was} at version {version} and is {kind} now (a "
                    f"rollback undid its widening); the feed from {start} to {end} speaks the current columns "
                    f"and would not keep its values: widen {now!r} again to read it (scan(version=...) reads "
                    "each version in its own columns)"
                )


def _rows_of(column: pa.ChunkedArray, at: np.ndarray) -> pa.Array | np.ndarray:
    """``column.take(at)``, in NumPy where the values sort there as in Arrow.

    That is numbers, dates and timestamps without NULLs.
    """
    values = numpy_sortable(column)
    return column.take(pa.array(at)) if values is None else values[at]


HEARTBEAT_SECONDS = 60.0
"""How often a consumer's ``follow`` marks it seen while nothing lands (reads and commits mark it too)."""


class Consumer:
    """A named change-feed consumer of a table: :meth:`mere.Table.consumer` registers or opens one.

    Its position (the last version it has processed) lives in the catalog: its feed starts after it,
    and ``expire`` keeps every version from it on. Nothing moves it but :meth:`commit` (or :meth:`seek`,
    or :meth:`follow`'s automatic commits), so a reader that fails before committing reads the same
    changes again: at-least-once. The range a read hands out stays pending until a commit reaches its
    end, and until then every read hands out that same range: a batch applied in part is read again
    whole, never merged into a longer range (whose net changes could miss a key the partial batch left
    behind, such as one it inserted that a later commit deleted). Applying a feed's rows by key
    (upserting ``insert`` and ``update_after`` rows, deleting ``delete`` rows) is idempotent, so a copy
    fed this way ends up exact.

    ``expire`` drops a consumer unseen (no read, no commit) for longer than the table's
    ``changes.consumer-expiration`` (default 7 days) if it holds back versions expire would give up: a
    warning is logged, the time and reason are kept (``Table.inspect.consumers()``), and every later use
    raises :class:`~mere.errors.ConsumerDropped`.

    A handle is cheap and reads nothing by itself; every method asks the catalog.
    """

    def __init__(self, table: TableHandle, name: str) -> None:
        """A handle on consumer ``name`` of ``table`` (nothing is read or registered).

        Args:
            table: the table whose changes it consumes.
            name: the consumer's name (see :meth:`mere.Table.consumer`).

        Raises:
            InvalidInput: a bad name.
        """
        self.table = table
        self.name = consumers.check_name(table.name, name)

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, table={self.table.name!r})"

    def info(self) -> ConsumerRecord:
        """The consumer as the catalog holds it (position, creation and last-seen times).

        Reading it does not mark it seen.

        Raises:
            NoSuchConsumer: it was dropped with :meth:`drop` (or never registered).
            ConsumerDropped: expire dropped it.
        """
        return consumers.get(self.table.context, self.name, touch=False)

    @property
    def position(self) -> int:
        """The last version it has processed (its feed starts after it); see :meth:`info`."""
        return self.info().position

    def changes(
        self, end_version: int | None = None, *, columns: Sequence[str] | None = None, filter: Any = None
    ) -> tuple[int, pa.RecordBatchReader]:
        """The changes after its position, up to ``end_version``, and that end version.

        ``end_version`` defaults to the newest version now; commit it once the rows are processed. Marks the consumer seen; moves nothing.
        While a range read before is not committed, this is that range again (``end_version`` must then
        be None or its end).

        ``end, feed = c.changes(); apply(feed); c.commit(end)``. ``columns`` and ``filter`` as in
        :meth:`mere.Table.changes`.

        Args:
            end_version: the last version to read (at least the position).
            columns: the columns to read (key columns always come first).
            filter: keeps the feed rows it holds for.

        Returns:
            ``(end_version, feed)``: the feed is a ``pyarrow.RecordBatchReader``.

        Raises:
            NoSuchConsumer, ConsumerDropped: as :meth:`info`.
            NoSuchVersion: ``end_version`` is not a version of the table.
            InvalidInput: ``end_version`` is before the position or is not a pending range's end, or bad
                columns or filter.
        """
        return consumer_feed(self.table, self.name, end_version, columns, filter)

    def commit(self, version: int) -> int:
        """Record that the changes up to ``version`` are processed.

        The feed then starts after it and ``expire`` may give up the versions before it. Atomic, and only forward: a version at or before
        the position changes nothing (of concurrent commits, the furthest wins). Marks the consumer seen.

        Args:
            version: a committed version of the table.

        Returns:
            The position after the commit.

        Raises:
            InvalidInput: not a non-negative integer.
            NoSuchVersion: a version after the newest.
            NoSuchConsumer, ConsumerDropped: as :meth:`info`.
        """
        return consumers.advance(self.table.context, self.name, version, seek=False).position

    def seek(self, version: int) -> int:
        """Set the position to ``version``, forward or back.

        To read changes again, e.g. after rebuilding what it feeds from a snapshot. It drops a pending
        range; the version must be readable (not expired).

        Returns:
            The new position.

        Raises:
            InvalidInput: not a non-negative integer.
            NoSuchVersion: expired, or after the newest version.
            NoSuchConsumer, ConsumerDropped: as :meth:`info`.
        """
        return consumers.advance(self.table.context, self.name, version, seek=True).position

    def heartbeat(self) -> None:
        """Mark the consumer seen without reading or moving it.

        A reader idle for a long time keeps its place this way; :meth:`follow` does it while it waits.

        Raises:
            NoSuchConsumer, ConsumerDropped: as :meth:`info`.
        """
        consumers.get(self.table.context, self.name, touch=True)

    def drop(self) -> None:
        """Remove the consumer (also one expire dropped).

        The versions it held go at the next expire, and its name can be registered again.

        Raises:
            NoSuchConsumer: there is none of that name.
        """
        consumers.drop(self.table.context, self.name)

    def follow(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        poll_seconds: float = 1.0,
        max_poll_seconds: float = 30.0,
        auto_commit: bool = True,
    ) -> Iterator[tuple[int, pa.Table]]:
        """Yield ``(version, changes)`` from its position on as commits land.

        ``mere.follow(table, consumer=self)``: with ``auto_commit`` (the default), commit each yielded version when the caller asks
        for the next one (at-least-once: see :func:`follow`)."""
        return follow(
            self.table,
            columns=columns,
            filter=filter,
            poll_seconds=poll_seconds,
            max_poll_seconds=max_poll_seconds,
            consumer=self,
            auto_commit=auto_commit,
        )


def check_feed_arguments(table: TableHandle, columns: Sequence[str] | None, filter: Any) -> None:
    """Refuse a feed's bad ``columns`` or ``filter`` now, as :func:`change_feed` would."""
    if columns is not None:
        table.scan(columns=columns).output_columns  # noqa: B018 - checks the names
    split_filter(table.spec, filter)


def consumer_feed(
    table: TableHandle,
    name: str,
    end_version: int | None,
    columns: Sequence[str] | None,
    filter: Any,
) -> tuple[int, pa.RecordBatchReader]:
    """The feed of consumer ``name`` up to ``end_version``, with that version.

    It starts after the consumer's position (marked seen); ``end_version`` None is the newest now, or a
    pending range's end if it has one (see :meth:`Consumer.changes`)."""
    check_feed_arguments(table, columns, filter)  # a refused read claims no range
    start, end = consumers.claim(table.context, name, end_version)
    return end, change_feed(table, start, end, columns, filter)


def follow(
    table: TableHandle,
    from_version: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    poll_seconds: float = 1.0,
    max_poll_seconds: float = 30.0,
    consumer: str | Consumer | None = None,
    auto_commit: bool = True,
) -> Iterator[tuple[int, pa.Table]]:
    """Yield ``(version, changes)`` as commits land after ``from_version`` (or a consumer's position).

    Each item is the change feed from the last version yielded to the newest one, polled with exponential backoff (from ``poll_seconds`` up to
    ``max_poll_seconds``) while nothing lands. Runs until the caller stops iterating.

    With ``consumer`` (a name, or a :class:`Consumer`) instead of ``from_version``, it starts after that
    consumer's position (it must exist: :meth:`mere.Table.consumer` registers it) and, with
    ``auto_commit``, commits each yielded version when the caller asks for the next one: only once the
    caller has taken and handled the batch, never before. A batch whose handling failed, or the last one
    before the caller stopped, is read again, the same range whole, by the next read of the consumer
    (at-least-once); commit it (``Consumer.commit(version)``) before stopping to avoid that. With
    ``auto_commit=False`` the caller commits each batch before asking for the next (InvalidInput
    otherwise). While nothing lands it marks the
    consumer seen every minute, so a live follower is never dropped as unseen.

    Args:
        table: a keyed mere table.
        from_version: the version after which to start (not with ``consumer``).
        columns: the columns to read (key columns always come first).
        filter: keeps the feed rows it holds for.
        poll_seconds: the first wait while nothing lands.
        max_poll_seconds: the longest wait.
        consumer: a consumer whose position to start after, and to commit.
        auto_commit: with ``consumer``, commit each version the caller has taken.

    Yields:
        ``(version, changes)``: the newest version and the feed up to it, as an Arrow table.

    Raises:
        InvalidInput: bad arguments (checked at the first ``next()``).
        NoSuchVersion: the start version has expired or does not exist.
        NoSuchConsumer, ConsumerDropped: an unknown consumer, or one that expire dropped.
    """
    if not is_handle(table):
        raise InvalidInput(f"follow needs a mere Table, got {type(table).__name__}")
    handle: Consumer | None = None
    if consumer is not None:
        if from_version is not None:
            raise InvalidInput(
                f"{table.name}: give from_version or consumer, not both (a consumer starts after its position)"
            )
        handle = consumer if isinstance(consumer, Consumer) else Consumer(table, consumer)
        if handle.table.context.uuid != table.context.uuid:
            raise InvalidInput(
                f"{table.name}: consumer {handle.name!r} is a consumer of {handle.table.name}, not of this "
                "table (give its name, or follow its own table)"
            )
        if not isinstance(auto_commit, bool):
            raise InvalidInput(f"{table.name}: auto_commit must be True or False, got {auto_commit!r}")
    elif not isinstance(from_version, int) or isinstance(from_version, bool) or from_version < 0:
        raise InvalidInput(f"{table.name}: from_version must be a non-negative integer, got {from_version!r}")
    for name, value in (("poll_seconds", poll_seconds), ("max_poll_seconds", max_poll_seconds)):
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= MAX_POLL_SECONDS:
            raise InvalidInput(
                f"{table.name}: {name} must be a positive number of seconds up to {MAX_POLL_SECONDS:g} "
                f"(a day), got {value!r}"
            )
    if handle is not None:
        seen = consumers.get(table.context, handle.name, touch=False).position
    else:
        assert from_version is not None
        seen = from_version
    table.resolve_version(seen)  # an unknown or expired version fails now, not at the first commit
    check_feed_arguments(table, columns, filter)
    delay = float(poll_seconds)
    beat = time.monotonic()
    claim = handle is not None  # the first read of a consumer takes a pending range up again
    while True:
        table = table.refresh()
        if handle is not None and (claim or table.version > seen):
            claim = False
            start, end = consumers.claim(table.context, handle.name, None)
            beat = time.monotonic()
            if end > start:
                changes = change_feed(table, start, end, columns, filter).read_all()
                yield end, changes
                # The caller asked for the next batch: it has taken this one.
                if auto_commit:
                    handle.commit(end)
                elif handle.position < end:
                    raise InvalidInput(
                        f"{table.name}: consumer {handle.name!r} has not committed version {end}: with "
                        "auto_commit=False, commit each batch (Consumer.commit) before asking for the next"
                    )
                seen, delay = end, float(poll_seconds)
                continue
            seen = max(seen, end)
        elif handle is None and table.version > seen:
            newest = table.version
            changes = change_feed(table, seen, newest, columns, filter).read_all()
            seen, delay = newest, float(poll_seconds)
            yield newest, changes
            continue
        if handle is not None and time.monotonic() - beat >= HEARTBEAT_SECONDS:
            handle.heartbeat()
            beat = time.monotonic()
        time.sleep(delay)
        delay = min(delay * 2, float(max_poll_seconds))
