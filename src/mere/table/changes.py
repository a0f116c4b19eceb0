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

import itertools
import json
import time
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import sorted_unique
from mere.concurrency import cpu_workers, shared_pool
from mere.errors import InvalidInput, NoSuchVersion
from mere.metadata import SEQ_SHIFT, FileEntry
from mere.read.evolution import whole_file_as_table
from mere.read.merge import KeySet, key_positions, sort_indices
from mere.read.planner import Explain, plan_splits, split_filter
from mere.read.reader import _filter, _plain
from mere.spec import OP_COLUMN, OP_DELETE
from mere.table.scan import Scan
from mere.write.writer import PreparedFile

if TYPE_CHECKING:
    from mere.table.table import Table

CHANGE_COLUMN = "_change"
VERSION_COLUMN = "_version"
COMMIT_TIME_COLUMN = "_commit_time"
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "insert", "update_before", "update_after", "delete"
_ORDER = {DELETE: 0, UPDATE_BEFORE: 1, UPDATE_AFTER: 2, INSERT: 3}
_FIRST = "\x00first"  # the first version of the range that touched a key
SPLITS_PER_READ = 16  # touched splits read together (one plan per group, memory bounded by the group)


def change_feed(
    table: Table,
    start_version: int,
    end_version: int | None = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    splits: Collection[tuple[str, int]] | None = None,
) -> pa.RecordBatchReader:
    """See :meth:`mere.Table.changes`. ``splits`` ((partition JSON, bucket) pairs) limits the feed to those
    splits: an engine's task computes its share of one feed."""
    spec = table.spec
    if not spec.has_primary_key:
        raise InvalidInput(
            f"{table.name} has no primary key: a change feed follows keys (read the appended files with "
            "scan(version=...) instead)"
        )
    for name, value in (("start_version", start_version), ("end_version", end_version)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidInput(f"{table.name}: {name} must be a non-negative integer, got {value!r}")
    current, oldest = table._sql.version_range(table.record.id)
    end = table._version_within(end_version, current, oldest)
    start = table._version_within(start_version, current, oldest)
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
    history = {s.version: s for s in table._sql.history(table.record.id, after=start, upto=end)}
    gone = [v for v, snap in history.items() if snap.expired]
    if gone:  # e.g. a tagged start_version: readable itself, but the commits after it were expired
        raise NoSuchVersion(
            f"{table.name}: the change feed from version {start} needs every commit after it, and "
            f"version {gone[0]} has expired"
        )
    touched: dict[tuple[str, int], list[tuple[FileEntry, int]]] = defaultdict(list)
    added_files: dict[tuple[str, int], list[FileEntry]] = defaultdict(list)
    replaced: set[tuple[str, int]] = set()  # splits where the range removed or partially wrote rows
    only = None if splits is None else set(splits)
    logs: dict[tuple[str, int], list[FileEntry]] = defaultdict(list)
    for entry, removed in table._sql.files_changed(table.record.id, start, end):
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
    # Newest version wins and the range only added whole rows and delete markers: the newest version of
    # every touched key is in the files the range added (they are newer than every file before it), so
    # the after-image merges those files alone instead of the whole split.
    from_added = (
        {split: files for split, files in added_files.items() if split not in replaced}
        if spec.all_last
        else {}
    )
    # Where every commit that touched a split logged its before-images (``changes.log``), the before-image
    # of a key is in the log of the first commit of the range that touched it: no merge at ``start``.
    # Logs go with expired versions: only those from the oldest readable version on are kept.
    logged = {
        v
        for v, snap in history.items()
        if max(start, oldest - 1) < v <= end and snap.internal.get("change_log")
    }
    from_logs = {
        split: logs.get(split, [])
        for split in from_added
        if all(e.added_version in logged for e in added_files[split])
    }
    times = {v: s.committed_at for v, s in history.items()}
    full = pa.schema(
        [spec.schema.field(c).with_nullable(True) for c in read_columns] + list(schema)[len(out_columns) :]
    )
    feed = _Feed(table, start, end, read_columns, predicate, full, times, out_columns, from_added, from_logs)
    return pa.RecordBatchReader.from_batches(schema, feed.batches(touched))


class _Feed:
    def __init__(
        self,
        table: Table,
        start: int,
        end: int,
        columns: list[str],
        predicate: E.Expr,
        schema: pa.Schema,
        times: dict[int, Any],
        out_columns: list[str],
        from_added: dict[tuple[str, int], list[FileEntry]],
        from_logs: dict[tuple[str, int], list[FileEntry]],
    ) -> None:
        self.table, self.start, self.end = table, start, end
        self.from_added, self.from_logs = from_added, from_logs
        self.columns, self.predicate, self.schema, self.times = columns, predicate, schema, times
        self.out_names = [*out_columns, CHANGE_COLUMN, VERSION_COLUMN, COMMIT_TIME_COLUMN]
        # The splits of one partition share its values: a row is known by its key there.
        self.keys = list(table.spec.primary_key)

    def batches(
        self, touched: dict[tuple[str, int], list[tuple[FileEntry, int]]]
    ) -> Iterator[pa.RecordBatch]:
        splits = sorted(touched)
        pool = shared_pool("feed", cpu_workers())  # splits are independent: their files read in parallel
        for i in range(0, len(splits), SPLITS_PER_READ):
            chosen = splits[i : i + SPLITS_PER_READ]
            # A split that one whole-row file of the range changed: the file holds its touched keys (each
            # once) and, but for its delete markers, their rows at the end version. Read once, no merge.
            single = [
                split
                for split in chosen
                if split in self.from_added and len(self.from_added[split]) == 1 and len(touched[split]) == 1
            ]
            rest = [split for split in chosen if split not in single]
            keys = dict(zip(rest, pool.map(lambda split: self._touched_keys(touched[split]), rest)))
            after_single: dict[tuple[str, int], pa.Table] = {}
            for split, (split_keys, rows) in zip(
                single, pool.map(lambda split: self._single(self.from_added[split][0]), single)
            ):
                keys[split], after_single[split] = split_keys, rows
            merged = {split for split in chosen if split not in self.from_logs}
            # The after-image of a split read from its added files needs no key filter: they hold only
            # touched keys.
            slow = merged | {split for split in chosen if split not in self.from_added}
            where = (
                self._key_filter(pa.concat_tables([keys[split] for split in sorted(slow)])) if slow else None
            )
            before = self.table.split_tables(self.start, merged, self.columns, where) if merged else {}
            logged = [split for split in chosen if split in self.from_logs]
            before.update(
                zip(
                    logged,
                    pool.map(self._logged, [self.from_logs[s] for s in logged], [keys[s] for s in logged]),
                )
            )
            after = self._after(rest, where) if rest else {}
            after.update(after_single)
            # The splits of a partition are compared at once (a key lives in one bucket): one pass of a
            # few Arrow calls, not one per split.
            for _, run in itertools.groupby(chosen, key=lambda split: split[0]):
                together = list(run)
                out = self._split(
                    pa.concat_tables([keys[s] for s in together]),
                    self._together([before[s] for s in together if s in before]),
                    self._together([after[s] for s in together if s in after]),
                )
                if out.num_rows:
                    yield from out.to_batches()

    def _together(self, tables: list[pa.Table]) -> pa.Table:
        """Merged rows of several splits as one table of the feed's column types."""
        kept = [self._conformed(t) for t in tables if t.num_rows]
        return pa.concat_tables(kept) if kept else self._schema_of_rows().empty_table()

    def _schema_of_rows(self) -> pa.Schema:
        return pa.schema([self.table.spec.schema.field(c).with_nullable(True) for c in self.columns])

    def _conformed(self, rows: pa.Table) -> pa.Table:
        """Rows of the feed's columns in their table types (dictionaries decoded, all nullable)."""
        schema = self._schema_of_rows()
        rows = _plain(rows, self.table.spec.schema).select(self.columns)
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(rows.columns, schema)], schema=schema)

    def _after(self, chosen: list[tuple[str, int]], where: E.Expr | None) -> dict[tuple[str, int], pa.Table]:
        """Merged rows of the touched keys at the end version."""
        quick = [split for split in chosen if split in self.from_added]
        rest = {split for split in chosen if split not in self.from_added}
        after = self.table.split_tables(self.end, rest, self.columns, where) if rest else {}
        if quick:
            t = self.table
            scan = Scan(t, self.end, tuple(self.columns), None, spec=t.spec)
            entries = [e for split in quick for e in self.from_added[split]]
            after.update(scan.merge_splits(plan_splits(t.spec, entries, scan._parts(), Explain(self.end))))
        return after

    def _key_filter(self, keys: pa.Table) -> E.Expr | None:
        return key_filter(self.keys, keys)

    def _logged(self, logs: list[FileEntry], touched: pa.Table) -> pa.Table:
        """Rows at the start version of the touched keys, from the logs: each key's row in the log of
        the first commit of the range that touched it (absent there: the key was absent)."""
        if not logs:
            return self._schema_of_rows().empty_table()
        spec, storage = self.table.spec, self.table.storage
        parts = []
        for entry in logs:
            md = storage.metadata(entry.path, entry.size_bytes or None)
            rows = storage.read_row_groups(entry.path, range(md.num_row_groups), None, entry.size_bytes)
            rows = self._conformed(whole_file_as_table(rows, spec, md))
            version = np.full(rows.num_rows, entry.added_version, np.int64)
            parts.append(rows.append_column(_FIRST, pa.array(version)))
        logged = pa.concat_tables(parts)
        at = self._lookup(logged, touched)
        first = np.asarray(touched.column(_FIRST).to_numpy())
        found = at >= 0
        found[found] = first[at[found]] == np.asarray(logged.column(_FIRST).to_numpy())[found]
        return logged.filter(pa.array(found)).select(self.columns)

    def _single(self, entry: FileEntry) -> tuple[pa.Table, pa.Table]:
        """The touched keys (with the version that added the file as both newest and first) and the rows
        at the end version of a file that alone changed its split."""
        spec, storage = self.table.spec, self.table.storage
        md = storage.metadata(entry.path, entry.size_bytes or None)
        raw = storage.read_row_groups(entry.path, range(md.num_row_groups), None, entry.size_bytes)
        version = pa.array(np.full(raw.num_rows, entry.added_version, np.int64))
        keys = _as_keys(self.table, raw).append_column(VERSION_COLUMN, version).append_column(_FIRST, version)
        if entry.content == "delete":
            return keys, self._schema_of_rows().empty_table()
        alive = pc.not_equal(raw.column(OP_COLUMN), pa.scalar(OP_DELETE, pa.int8()))
        rows = whole_file_as_table(raw.drop_columns([OP_COLUMN]), spec, md)
        return keys, self._conformed(rows.filter(alive))

    def _touched_keys(self, files: list[tuple[FileEntry, int]]) -> pa.Table:
        """Each touched key of the split with the newest and the first version of the range that touched
        it."""
        # A file added and removed in the range is read once, with its removal's version (then its split
        # is merged, not read from logs, so the first version matters only for files the range added).
        newest: dict[str, tuple[FileEntry, int]] = {}
        for entry, version in files:
            if entry.path not in newest or newest[entry.path][1] < version:
                newest[entry.path] = (entry, version)
        parts = []
        for entry, version in newest.values():
            keys = _file_keys(self.table, entry)
            parts.append(
                keys.append_column(VERSION_COLUMN, pa.array(np.full(keys.num_rows, version, np.int64)))
            )
        both = pa.concat_tables(parts)
        return (
            both.group_by(self.keys, use_threads=False)
            .aggregate([(VERSION_COLUMN, "max"), (VERSION_COLUMN, "min")])
            .rename_columns([*self.keys, VERSION_COLUMN, _FIRST])
        )

    def _split(self, touched: pa.Table, before: pa.Table, after: pa.Table) -> pa.Table:
        """The feed rows of the touched keys (each once in ``touched``) from their merged rows at the start
        and the end: positions among the touched keys, then one NumPy sort, no joins of whole rows."""
        row_before = self._lookup(touched, before)
        row_after = self._lookup(touched, after)
        was, now = row_before >= 0, row_after >= 0
        both = np.flatnonzero(was & now)
        old = before.take(pa.array(row_before[both]))
        new = after.take(pa.array(row_after[both]))
        changed = ~_rows_equal(old.select(self.columns), new.select(self.columns))
        if not changed.all():
            both = both[changed]
            mask = pa.array(changed)
            old, new = old.filter(mask), new.filter(mask)
        gone, came = np.flatnonzero(was & ~now), np.flatnonzero(now & ~was)
        at = np.concatenate([gone, both, both, came])  # the touched key of each output row
        if not len(at):
            return self.schema.empty_table().select(self.out_names)
        kind = np.repeat(np.arange(4, dtype=np.int64), [len(gone), len(both), len(both), len(came)])
        parts = [before.take(pa.array(row_before[gone])), old, new, after.take(pa.array(row_after[came]))]
        rows = pa.concat_tables([p.select(self.columns) for p in parts])
        versions = np.asarray(touched.column(VERSION_COLUMN).to_numpy())[at]
        key_rank = np.empty(touched.num_rows, dtype=np.int64)
        key_rank[sort_indices([touched.column(k) for k in self.keys])] = np.arange(touched.num_rows)
        order = np.lexsort((kind, key_rank[at], versions))  # by version, then key, then change kind
        versions, kind = versions[order], kind[order]
        seen = sorted_unique(versions)
        stamps = pa.array([self.times[int(v)] for v in seen], pa.timestamp("us", tz="UTC"))
        rows = rows.take(pa.array(order))
        cols = [rows.column(c).cast(self.schema.field(c).type) for c in self.columns]
        cols += [
            pa.array(list(_ORDER)).take(pa.array(kind)),
            pa.array(versions, pa.int64()),
            stamps.take(pa.array(np.searchsorted(seen, versions))),
        ]
        out = pa.Table.from_arrays(cols, schema=self.schema)
        if not isinstance(self.predicate, E.AlwaysTrue):
            out = _filter(out, self.predicate)
        return out.select(self.out_names)

    def _lookup(self, left: pa.Table, right: pa.Table) -> np.ndarray:
        """For each row of ``left``, the row of ``right`` with the same key, or -1 (keys are unique in
        ``right``)."""
        at = key_positions(left, right, self.keys, right_unique=True)
        assert at is not None
        return at


def key_filter(key_columns: Sequence[str], keys: pa.Table) -> E.Expr | None:
    """``key IN (keys)`` for a one-column integer or string key (None otherwise: the keys are joined
    after the merge anyway). Runs before the merge: every version of a key holds the same key, and row
    groups outside the keys' range are not read at all."""
    if len(key_columns) != 1 or not keys.num_rows:
        return None
    kind = keys.schema.field(key_columns[0]).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None  # other key types are joined only (their literals need no round trip here)
    return E.In(key_columns[0], tuple(pc.unique(keys.column(key_columns[0])).to_pylist()))


def _file_keys(table: Table, entry: FileEntry) -> pa.Table:
    """The key columns of one file, in the table's key types."""
    keys = list(table.spec.primary_key)  # key columns are never renamed or retyped
    md = table.storage.metadata(entry.path, entry.size_bytes or None)
    return _as_keys(
        table, table.storage.read_row_groups(entry.path, range(md.num_row_groups), keys, entry.size_bytes)
    )


def _as_keys(table: Table, rows: pa.Table) -> pa.Table:
    """The key columns of rows read from a file, in the table's key types."""
    keys = list(table.spec.primary_key)
    return rows.select(keys).cast(pa.schema([table.spec.schema.field(k) for k in keys]))


def logs_changes(table: Table, added: Sequence[FileEntry], removes_files: bool) -> bool:
    """Whether a commit records its before-images: ``changes.log`` is on, the newest version wins, and the
    commit adds whole rows or delete markers and removes nothing (feeds over other commits merge)."""
    spec = table.spec
    return (
        spec.properties.get("changes.log", "off").lower() == "on"
        and spec.has_primary_key
        and spec.all_last
        and not removes_files
        and bool(added)
        and all(f.content == "delete" or (f.content == "data" and f.columns is None) for f in added)
    )


def write_change_log(table: Table, base: int, added: Sequence[FileEntry]) -> list[FileEntry]:
    """The rows at ``base`` of the keys the ``added`` files hold (the rows the commit replaces or deletes),
    one log file per split that had any. The commit must also check that no concurrent commit changed
    those splits since ``base`` (``Table._rows_unchanged``), so the rows are those it replaces."""
    spec = table.spec
    keys = list(spec.primary_key)
    columns = list(spec.identity_columns) + [c for c in spec.schema.names if c not in spec.identity_columns]
    by_split: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    for entry in added:
        by_split[(entry.partition, entry.bucket)].append(_file_keys(table, entry))
    split_keys = {split: pa.concat_tables(parts) for split, parts in by_split.items()}
    splits = sorted(split_keys)
    prepared = []
    for i in range(0, len(splits), SPLITS_PER_READ):  # memory bounded as the feed's reads are
        chosen = splits[i : i + SPLITS_PER_READ]
        where = key_filter(keys, pa.concat_tables([split_keys[split] for split in chosen]))
        before = table.split_tables(base, set(chosen), columns, where)
        for split in chosen:
            rows = before.pop(split, None)
            if rows is None or not rows.num_rows:
                continue
            hit = KeySet(split_keys[split], keys).contains(rows)
            if not hit.any():
                continue
            rows = _plain(rows, spec.schema).filter(pa.array(hit))
            rows = rows.sort_by([(k, "ascending") for k in keys]).select(spec.schema.names)
            prepared.append(PreparedFile(json.loads(split[0]), split[1], rows, "log"))
    return table._write_files(prepared)


def _rows_equal(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Row-wise equality of two aligned tables (see :func:`_values_equal`)."""
    same = np.ones(a.num_rows, dtype=bool)
    for name in a.column_names:
        same &= _values_equal(a.column(name).combine_chunks(), b.column(name).combine_chunks())
    return same


def _values_equal(x: pa.Array, y: pa.Array) -> np.ndarray:
    """Element-wise equality of two arrays of one type: NULL equals NULL, floats compare by value and sign
    (NaN equals NaN, -0.0 differs from 0.0), structs field by field, lists (and maps, in order) by length
    and element. A type Arrow cannot compare (unions) counts as different."""
    if pa.types.is_dictionary(x.type):
        x, y = x.dictionary_decode(), y.dictionary_decode()
    kind = x.type
    x_null = np.asarray(x.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    y_null = np.asarray(y.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_floating(kind):
        xs = np.asarray(x.fill_null(0).to_numpy(zero_copy_only=False))
        ys = np.asarray(y.fill_null(0).to_numpy(zero_copy_only=False))
        with np.errstate(invalid="ignore"):
            eq = ((xs == ys) & (np.signbit(xs) == np.signbit(ys))) | (np.isnan(xs) & np.isnan(ys))
    elif pa.types.is_struct(kind):
        eq = np.ones(len(x), dtype=bool)
        for i in range(kind.num_fields):  # a NULL struct's fields read NULL: settled by the NULL masks
            eq &= _values_equal(pc.struct_field(x, [i]), pc.struct_field(y, [i]))
    elif pa.types.is_map(kind):
        entries = pa.list_(pa.struct([kind.key_field, kind.item_field]))
        eq = _values_equal(x.cast(entries), y.cast(entries))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        x_len = np.asarray(pc.list_value_length(x).fill_null(-1).to_numpy(zero_copy_only=False))
        y_len = np.asarray(pc.list_value_length(y).fill_null(-1).to_numpy(zero_copy_only=False))
        eq = (x_len == y_len) & ~x_null & ~y_null
        rows = np.flatnonzero(eq)
        if len(rows):  # lists of equal length flatten to aligned elements
            xs, ys = x.take(pa.array(rows)), y.take(pa.array(rows))
            element = _values_equal(pc.list_flatten(xs), pc.list_flatten(ys))
            parents = np.asarray(pc.list_parent_indices(xs).to_numpy(zero_copy_only=False))
            differs = np.bincount(parents[~element], minlength=len(rows)) > 0
            eq[rows[differs]] = False
    else:
        try:
            cmp = pc.equal(x, y)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return np.asarray(x_null & y_null, dtype=bool)
        eq = np.asarray(cmp.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(np.where(x_null | y_null, x_null & y_null, eq), dtype=bool)


def follow(
    table: Table,
    from_version: int,
    *,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    poll_seconds: float = 1.0,
    max_poll_seconds: float = 30.0,
) -> Iterator[tuple[int, pa.Table]]:
    """Yield ``(version, changes)`` as commits land after ``from_version``: the change feed from the last
    version yielded to the newest one, polled with exponential backoff (from ``poll_seconds`` up to
    ``max_poll_seconds``) while nothing lands. Runs until the caller stops iterating."""
    if not isinstance(from_version, int) or isinstance(from_version, bool) or from_version < 0:
        raise InvalidInput(f"{table.name}: from_version must be a non-negative integer, got {from_version!r}")
    for name, value in (("poll_seconds", poll_seconds), ("max_poll_seconds", max_poll_seconds)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise InvalidInput(f"{table.name}: {name} must be a positive number of seconds, got {value!r}")
    table.resolve_version(from_version)  # an unknown or expired version fails now, not at the first commit
    seen = from_version
    delay = float(poll_seconds)
    while True:
        table = table.refresh()
        if table.version > seen:
            newest = table.version
            changes = change_feed(table, seen, newest, columns, filter).read_all()
            seen, delay = newest, float(poll_seconds)
            yield newest, changes
            continue
        time.sleep(delay)
        delay = min(delay * 2, float(max_poll_seconds))
