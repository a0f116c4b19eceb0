"""Before and after images of keys: what a commit did to each key it wrote (the change log a commit with
``changes.log=on`` records) and the comparison of two images that the change feed shares.

A change log holds, per split a commit changed, what the commit did to each key it wrote: the row before
it (deleted, updated or written back unchanged) and the row after it (updated or inserted). Its
``_mere_op`` column holds the change kind (the codes are the feed's order of kinds).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import bool_array, is_nat
from mere.concurrency import cpu_workers, shared_pool
from mere.kernels import KeySet, key_positions, numpy_sortable, sort_indices
from mere.metadata import FileEntry
from mere.read.evolution import read_stored_file
from mere.read.reader import plain_columns
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec
from mere.table.context import TableContext
from mere.write.writer import PreparedFile

SPLITS_PER_READ = 16  # touched splits read together (one plan per group, memory bounded by the group)
LOG_DELETE, LOG_BEFORE, LOG_AFTER, LOG_INSERT, LOG_UNCHANGED = range(5)
# The summary key of a commit whose logs hold change kinds. Commits marked ``change_log`` logged the rows
# before them only; a mere that knows only that key merges the commits marked with this one instead of
# reading their logs (it would take their rows after for rows before).
LOG_SUMMARY_KEY = "change_log_rows"


def positions(left: pa.Table, right: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """For each row of ``left``, the row of ``right`` with the same key, or -1 (keys are unique in
    ``right``)."""
    at = key_positions(left, right, keys, right_unique=True)
    assert at is not None
    return at


def compare_images(
    touched: pa.Table,
    before: pa.Table,
    after: pa.Table,
    keys: Sequence[str],
    columns: Sequence[str],
    unchanged: bool,
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """What happened to each touched key (each once in ``touched``) between its row in ``before`` and its
    row in ``after`` (absent: the key was absent): ``(rows, at, kind, key)``, where output row ``i`` is
    ``rows.take(at)[i]``, of change kind ``kind[i]`` (a code of ``_ORDER``, or ``LOG_UNCHANGED`` for a
    key present and equal at both, listed only when ``unchanged``), for touched key ``key[i]``. ``rows``
    is ``before`` followed by ``after``."""
    row_before = positions(touched, before, keys)
    row_after = positions(touched, after, keys)
    was, now = row_before >= 0, row_after >= 0
    both = np.flatnonzero(was & now)
    same = rows_equal(before, row_before[both], after, row_after[both], columns)
    kept = both[same] if unchanged else both[:0]
    both = both[~same]
    gone, came = np.flatnonzero(was & ~now), np.flatnonzero(now & ~was)
    key = np.concatenate([gone, both, both, came, kept])
    kind = np.repeat(
        np.array([LOG_DELETE, LOG_BEFORE, LOG_AFTER, LOG_INSERT, LOG_UNCHANGED], dtype=np.int64),
        [len(gone), len(both), len(both), len(came), len(kept)],
    )
    shift = before.num_rows  # rows of ``after`` follow those of ``before``
    at = np.concatenate(
        [
            row_before[gone],
            row_before[both],
            row_after[both] + shift,
            row_after[came] + shift,
            row_before[kept],
        ]
    )
    rows = pa.concat_tables([before.select(list(columns)), after.select(list(columns))])
    return rows, at, kind, key


def values_in(column: str, values: pa.Array | pa.ChunkedArray) -> E.Expr:
    """``column IN (values)``, to prune what a scan reads; always true where a value has no Python form,
    which prunes nothing: a date or timestamp beyond Python's datetime range, or an ns timestamp of -2**63
    (pandas' NaT, which would read as NULL and match nothing)."""
    try:
        listed = pc.unique(values).to_pylist()
    except (OverflowError, ValueError):
        return E.AlwaysTrue()
    if any(is_nat(v) for v in listed):
        return E.AlwaysTrue()
    return E.In(column, tuple(listed))


def key_filter(key_columns: Sequence[str], keys: pa.Table) -> E.Expr | None:
    """``key IN (keys)`` for a one-column integer or string key (None otherwise: the keys are joined
    after the merge anyway). Runs before the merge: every version of a key holds the same key, and row
    groups outside the keys' range are not read at all."""
    if len(key_columns) != 1 or not keys.num_rows:
        return None
    kind = keys.schema.field(key_columns[0]).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None  # other key types are joined only (their literals need no round trip here)
    return values_in(key_columns[0], keys.column(key_columns[0]))


def file_keys(ctx: TableContext, entry: FileEntry) -> pa.Table:
    """The key columns of one file, in the table's key types."""
    keys = list(ctx.spec.primary_key)  # key columns are never renamed or retyped
    md = ctx.storage.metadata(entry.path, entry.size_bytes or None)
    return as_keys(
        ctx.spec, ctx.storage.read_row_groups(entry.path, range(md.num_row_groups), keys, entry.size_bytes)
    )


def as_keys(spec: TableSpec, rows: pa.Table) -> pa.Table:
    """The key columns of rows read from a file, in the table's key types."""
    keys = list(spec.primary_key)
    return rows.select(keys).cast(pa.schema([spec.schema.field(k) for k in keys]))


def logs_changes(spec: TableSpec, added: Sequence[FileEntry], removes_files: bool) -> bool:
    """Whether a commit records its before-images: ``changes.log`` is on, the newest version wins (no
    ``sequence_by``), and the commit adds whole rows or delete markers and removes nothing (feeds over
    other commits merge)."""
    return (
        spec.properties.get("changes.log", "off").lower() == "on"
        and spec.has_primary_key
        and spec.all_last
        # With sequence_by the rows a commit writes need not be their keys' rows after it (a late event
        # loses to the stored version): feeds merge instead.
        and not spec.sequence_by
        and not removes_files
        and bool(added)
        and all(f.content == "delete" or (f.content == "data" and f.columns is None) for f in added)
    )


def written_rows(ctx: TableContext, entries: Sequence[FileEntry]) -> tuple[pa.Table, pa.Table]:
    """The keys the whole-row or delete-marker files ``entries`` (of one split, oldest first) hold, each
    once, and the rows they leave for them (a key whose newest entry is a delete marker has none)."""
    spec, storage = ctx.spec, ctx.storage
    keys, rows, alive = [], [], []
    for entry in entries:
        stored = read_stored_file(storage, entry)
        keys.append(as_keys(spec, stored.rows))
        if entry.content == "delete":
            alive.append(np.zeros(stored.rows.num_rows, dtype=bool))
            continue
        assert stored.ops is not None, entry.path  # whole-row data files carry their operations
        alive.append(stored.ops != OP_DELETE)
        rows.append(stored.as_table(spec))
    if len(entries) == 1:  # a file holds each key once
        (live,) = alive
        kept = rows[0] if rows else None
        if kept is not None and not live.all():
            kept = kept.filter(bool_array(live))
        return keys[0], kept if kept is not None else empty_rows(spec)
    # Several files: each key's newest entry (files are oldest first, a file holds a key once).
    both = pa.concat_tables(keys)
    row = "\x00row"
    numbered = both.append_column(row, pa.array(np.arange(both.num_rows, dtype=np.int64)))
    grouped = numbered.group_by(list(spec.primary_key), use_threads=False).aggregate([(row, "max")])
    newest = np.sort(np.asarray(grouped.column(f"{row}_max").to_numpy()))
    live = np.concatenate(alive)
    chosen = np.zeros(both.num_rows, dtype=bool)
    chosen[newest] = True
    # Rows of the data files, numbered as ``both`` is (delete files hold no rows).
    data_rows, offset = [], 0
    for entry, live_of, key_part in zip(entries, alive, keys):
        if entry.content != "delete":
            data_rows.append(np.arange(offset, offset + len(live_of)))
        offset += key_part.num_rows
    taken = np.concatenate(data_rows) if data_rows else np.empty(0, np.int64)
    if not rows:
        return both.take(pa.array(newest)), empty_rows(spec)
    whole = pa.concat_tables([plain_columns(r, spec.schema).select(spec.schema.names) for r in rows])
    keep = (chosen & live)[taken]
    return both.take(pa.array(newest)), whole.filter(bool_array(keep))


def empty_rows(spec: TableSpec) -> pa.Table:
    """No rows, in the table's columns."""
    return spec.schema.empty_table()


def write_change_log(ctx: TableContext, base: int, added: Sequence[FileEntry]) -> list[FileEntry]:
    """What the commit adding the ``added`` files (whole rows and delete markers, oldest first) does to
    each key they hold, against the rows at ``base``: one log file per split with any row before or
    after (``LOG_*`` kinds in ``_mere_op``). The commit must also check that no concurrent commit changed
    those splits since ``base`` (:class:`~mere.table.conflicts.RowsUnchanged`), so the rows before are
    those it replaces."""
    spec = ctx.spec
    keys = list(spec.primary_key)
    columns = list(spec.identity_columns) + [c for c in spec.schema.names if c not in spec.identity_columns]
    by_split: dict[tuple[str, int], list[FileEntry]] = defaultdict(list)
    for entry in added:
        by_split[(entry.partition, entry.bucket)].append(entry)
    splits = sorted(by_split)
    pool = shared_pool("change-log", cpu_workers())  # a pool of its own: feeds never queue behind it
    prepared = []
    for i in range(0, len(splits), SPLITS_PER_READ):  # memory bounded as the feed's reads are
        chosen = splits[i : i + SPLITS_PER_READ]
        images = dict(zip(chosen, pool.map(lambda split: written_rows(ctx, by_split[split]), chosen)))
        where = key_filter(keys, pa.concat_tables([images[split][0] for split in chosen]))
        before = ctx.handle.split_tables(base, set(chosen), columns, where)
        for split in chosen:
            touched, after = images[split]
            if not touched.num_rows:
                continue
            rows = before.pop(split, None)
            if rows is None or not rows.num_rows:
                rows = empty_rows(spec)
            else:
                rows = plain_columns(rows, spec.schema).select(spec.schema.names)
                hit = KeySet(touched, keys).contains(rows)
                if not hit.all():
                    rows = rows.filter(pa.array(hit))
            after = plain_columns(after, spec.schema).select(spec.schema.names)
            rows = pa.Table.from_arrays(
                [as_type(c, f.type) for c, f in zip(rows.columns, spec.schema)], schema=spec.schema
            )
            after = pa.Table.from_arrays(
                [as_type(c, f.type) for c, f in zip(after.columns, spec.schema)], schema=spec.schema
            )
            both, at, kind, _ = compare_images(touched, rows, after, keys, spec.schema.names, unchanged=True)
            if not len(at):
                continue
            taken = pa.array(at)
            order = sort_indices([both.column(k).take(taken) for k in keys] + [kind])
            log = both.take(pa.array(at[order])).append_column(
                pa.field(OP_COLUMN, pa.int8(), nullable=False), pa.array(kind[order].astype(np.int8))
            )
            prepared.append(PreparedFile(json.loads(split[0]), split[1], log, "log"))
    return ctx.files.write(prepared)


def rows_equal(
    a: pa.Table, a_rows: np.ndarray, b: pa.Table, b_rows: np.ndarray, columns: Sequence[str]
) -> np.ndarray:
    """Whether row ``a_rows[i]`` of ``a`` equals row ``b_rows[i]`` of ``b`` in every one of ``columns``
    (see :func:`values_equal`). Numbers, dates and timestamps without NULLs are compared in NumPy,
    without taking the rows out first."""
    same = np.ones(len(a_rows), dtype=bool)
    if not len(a_rows):
        return same
    a_take, b_take = pa.array(a_rows), pa.array(b_rows)
    for name in columns:
        x, y = a.column(name), b.column(name)
        x_values, y_values = numpy_sortable(x), numpy_sortable(y)
        if x_values is not None and y_values is not None:
            xs, ys = x_values[a_rows], y_values[b_rows]
            if pa.types.is_floating(x.type):
                with np.errstate(invalid="ignore"):
                    same &= ((xs == ys) & (np.signbit(xs) == np.signbit(ys))) | (np.isnan(xs) & np.isnan(ys))
            else:
                same &= xs == ys
        else:
            same &= values_equal(x.take(a_take).combine_chunks(), y.take(b_take).combine_chunks())
    return same


def as_type(column: pa.ChunkedArray, kind: pa.DataType) -> pa.ChunkedArray:
    """``column`` cast to ``kind`` (as it is when it has that type)."""
    return column if column.type == kind else column.cast(kind)


def values_equal(x: pa.Array, y: pa.Array) -> np.ndarray:
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
            eq &= values_equal(pc.struct_field(x, [i]), pc.struct_field(y, [i]))
    elif pa.types.is_map(kind):
        entries = pa.list_(pa.struct([kind.key_field, kind.item_field]))
        eq = values_equal(x.cast(entries), y.cast(entries))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        x_len = np.asarray(pc.list_value_length(x).fill_null(-1).to_numpy(zero_copy_only=False))
        y_len = np.asarray(pc.list_value_length(y).fill_null(-1).to_numpy(zero_copy_only=False))
        eq = (x_len == y_len) & ~x_null & ~y_null
        rows = np.flatnonzero(eq)
        if len(rows):  # lists of equal length flatten to aligned elements
            xs, ys = x.take(pa.array(rows)), y.take(pa.array(rows))
            element = values_equal(pc.list_flatten(xs), pc.list_flatten(ys))
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
