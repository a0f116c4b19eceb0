"""Selective reads of keyed tables: a filter on non-key columns evaluated on every stored version first.

A filter on columns other than the key cannot prune before the merge: an old version may match while the
key's newest one does not (the row must not come back), and the reverse. The plain route merges every
row, then filters. This route, for splits whose columns all merge newest-wins (or ``first_row``) from
whole-row files, reads in two passes:

1. Narrow pass: each file's key, operation and sequence columns, and the filter's columns of the row
   groups whose statistics may match it (the verdicts kept with the file's footer per filter). The
   filter is evaluated on every stored version, as a projection; the keys of the matching versions
   (delete markers left out) are the candidates.
2. Which candidates are their key's newest version. Newest-wins splits without ``sequence_by`` on one
   integer-like key: each candidate's key is searched in the later files (sorted by key, as written)
   and in its own file's next row; any later version (a delete marker too) hides it. Only the
   candidates' keys are looked up: no merge, no sort. Otherwise the candidates' versions, found in every
   file of the split by a semi-join on the key (a sorted search for integer-like keys), are merged
   alone: a candidate survives only where its winning version is the one that matched. Either way
   delete markers and newer versions that do not match hide it, so an old version never comes back.
   Where candidates' versions are over ``CANDIDATE_SHARE`` of the rows, every row is marked as the
   plain merge marks them (a semi-join would cost more than it saves).
3. Wide pass: the other columns only of the row groups holding a surviving row, and of those rows only.
   Runs of those row groups (``WIDE_RUN_ROWS`` rows, at least one group) are decoded at once, their
   survivors taken and the rest released: the pass holds a run per thread, not a file, and the runs, not
   the files, are the pool's jobs.

Rows, merge decisions and the filter's three-valued logic are exactly the plain route's: a filter that
fails on some stored row (e.g. an overflow on an old version) sends the split back to the plain route,
which evaluates it on merged rows only. Splits whose narrow columns exceed ``MAX_NARROW_BYTES`` (held at
once), and merges with other operators, take the plain route.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as E
from mere.arrays import bool_array, sorted_unique
from mere.errors import FilterError
from mere.io import Storage
from mere.kernels import contiguous, integer_keys, numpy_sortable_array
from mere.read.newest_wins import first_wins, newest_wins
from mere.read.options import ReadOptions
from mere.read.planner import FileTask, Split, row_group_stats
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec

__all__ = [
    "CANDIDATE_SHARE",
    "MAX_NARROW_BYTES",
    "MAY_CACHE_FILTERS",
    "SEARCH_LATER",
    "SINGLE_FILE_SHARE",
    "SORTED_IN_MIN_VALUES",
    "WIDE_RUN_ROWS",
    "Cursor",
    "eligible",
    "read",
]

CANDIDATE_SHARE = 0.25  # candidates' versions above this share of the rows: every row is marked
MAX_NARROW_BYTES = 256 << 20  # a split's narrow columns held at once, at most (else the plain route)
# A split of one file reads selectively only when the filter's statistics rule out more than this share.
SINGLE_FILE_SHARE = 0.5
# Newest-wins splits without sequence_by on one integer key: candidates are searched in later files, not
# merged (``_newest_by_search``). False: always the merge's own marking (tests compare the two).
SEARCH_LATER = True
WIDE_RUN_ROWS = 1 << 17  # rows of a file's row groups the wide pass decodes at once (then takes from)
MAY_CACHE_FILTERS = 16  # filters whose row-group verdicts a file's footer keeps
SORTED_IN_MIN_VALUES = 64  # IN lists this long are searched sorted by the reader's filter (``filter_rows``)
_ROW = "\x00row"
_T = TypeVar("_T")
_R = TypeVar("_R")


class Cursor(Protocol):
    """What this route needs of a reader's file cursor (see ``reader._FileCursor``)."""

    @property
    def task(self) -> FileTask: ...
    @property
    def groups(self) -> Sequence[Any]: ...  # candidate row groups (``.index``)
    @property
    def columns(self) -> Sequence[str]: ...  # table columns the file gives
    @property
    def dictionary(self) -> Sequence[str]: ...
    @property
    def row_counts(self) -> Sequence[int]: ...
    @property
    def mapping(self) -> Any: ...

    def load(
        self, groups: Sequence[int], columns: Sequence[str], dictionary: Sequence[str] = ()
    ) -> pa.Table: ...


def eligible(spec: TableSpec, split: Split, opts: ReadOptions, needed: Sequence[str]) -> bool:
    """Whether a split's read may take this route (no IO): a keyed table, a filter on non-key columns
    whose columns are known, no key lookup, and a newest-wins or ``first_row`` merge of whole rows."""
    post = opts.post
    if not spec.has_primary_key or isinstance(post, E.AlwaysTrue) or opts.lookup:
        return False
    if opts.keys is not None or opts.tombstones:
        return False
    used, pre_used = E.columns(post), E.columns(opts.pre)
    if not used or pre_used is None:
        return False
    values = [c for c in needed if c not in spec.identity_columns]
    if not (spec.newest_wins(values) or spec.merge_engine == "first_row"):
        return False
    return all(
        t.content == "delete" or t.columns is None or set(values) <= set(t.columns) for t in split.files
    )


def _mask(table: pa.Table, predicate: E.Expr, filter_: Callable[[pa.Table, E.Expr], pa.Table]) -> np.ndarray:
    """Which rows of ``table`` ``predicate`` holds for (TRUE; NULL and FALSE drop the row)."""
    n = table.num_rows
    if isinstance(predicate, E.AlwaysTrue):
        return np.ones(n, dtype=bool)
    numbered = table.append_column(_ROW, pa.array(np.arange(n, dtype=np.int64)))
    hit = np.asarray(filter_(numbered, predicate).column(_ROW).to_numpy())
    out = np.zeros(n, dtype=bool)
    out[hit] = True
    return out


def _holds(table: pa.Table, predicate: E.Expr) -> np.ndarray:
    """``_mask`` evaluated as a projection (no copy of the rows that match, no row numbers); the caller
    falls back to ``_mask`` where ``filter_`` treats a conjunct specially."""
    import pyarrow.acero as acero  # on first use: pyarrow.acero imports pandas (half a second of start-up)

    expr = E.to_pyarrow(predicate, table.schema)
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration("project", acero.ProjectNodeOptions([expr], [_ROW])),
        ]
    )
    verdict = plan.to_table(use_threads=False).column(0)  # one thread: rows stay in order
    if verdict.null_count:
        verdict = pc.fill_null(verdict, False)
    out = np.asarray(verdict.to_numpy(zero_copy_only=False), dtype=bool)
    if len(out) != table.num_rows:
        raise pa.ArrowInvalid("a filter's projection lost rows")  # never expected: the plain route reads
    return out


def _values(arrays: Sequence[pa.ChunkedArray], kind: pa.DataType) -> np.ndarray | pa.ChunkedArray:
    """Arrays of one column, concatenated: NumPy values where they sort so, else Arrow."""
    chunks = [a if a.type == kind else a.cast(kind) for ch in arrays for a in ch.chunks]
    as_np = [numpy_sortable_array(a) for a in chunks]
    if chunks and all(a is not None for a in as_np):
        return as_np[0] if len(as_np) == 1 else np.concatenate(as_np)  # type: ignore[arg-type]
    return pa.chunked_array(chunks, type=kind)


def _take(values: np.ndarray | pa.ChunkedArray, idx: np.ndarray) -> np.ndarray | pa.ChunkedArray:
    return values[idx] if isinstance(values, np.ndarray) else contiguous(values).take(pa.array(idx))


class _Narrow:
    """One file's narrow pass: the rows passing the pre-merge filter, as their key, operation and sequence
    columns (``keys``), where they sit among the file's loaded rows (``at``), whether the scan's filter
    holds for each (``match``) and the filter's other columns of the matching rows (``extra``)."""

    def __init__(
        self, cursor: Cursor, keys: pa.Table, at: np.ndarray | None, match: np.ndarray, extra: pa.Table | None
    ) -> None:
        self.cursor, self.keys, self.at, self.match, self.extra = cursor, keys, at, match, extra
        self.ops = (
            np.asarray(keys.column(OP_COLUMN).to_numpy()).astype(np.int8, copy=False)
            if OP_COLUMN in keys.column_names
            else np.zeros(keys.num_rows, dtype=np.int8)
        )


def _may_match(storage: Storage, spec: TableSpec, cursor: Cursor, post: E.Expr) -> np.ndarray:
    """Per candidate row group of the file, whether its statistics admit a row the filter holds for."""
    groups = [g.index for g in cursor.groups]
    used = sorted(E.columns(post) or ())
    if cursor.mapping is not None or not used:
        # (a table whose columns changed: statistics are by the file's names)
        return np.ones(len(groups), dtype=bool)
    task = cursor.task
    footer = storage.footer(task.path, task.size_bytes or None)
    # Kept with the footer per filter: weighing every row group's statistics again on each scan costs
    # more than reading the filter's column of a small file.
    key: Any = (post, tuple(str(spec.schema.field(c).type) for c in used if c in spec.schema.names))
    try:
        hash(key)
    except TypeError:  # (an opaque pyarrow predicate)
        key = None
    cache = footer.extra.setdefault("selective:may", {})
    every = cache.get(key) if key is not None else None
    if every is None:
        md = footer.metadata
        every = np.fromiter(
            (
                E.might_match(post, row_group_stats(md, g, spec.schema, used, footer.leaves))
                for g in range(md.num_row_groups)
            ),
            dtype=bool,
            count=md.num_row_groups,
        )
        if key is not None:
            if len(cache) >= MAY_CACHE_FILTERS:
                cache.clear()
            cache[key] = every
    return every[np.asarray(groups, dtype=np.int64)] if groups else np.ones(0, dtype=bool)


class _Declined(Exception):
    """The plain route must read this split."""


def _narrow(
    storage: Storage,
    spec: TableSpec,
    cursor: Cursor,
    opts: ReadOptions,
    filter_: Callable[[pa.Table, E.Expr], pa.Table],
) -> _Narrow:
    task = cursor.task
    key_cols = [
        c
        for c in dict.fromkeys([*spec.identity_columns, *spec.sequence_by, OP_COLUMN])
        if c in cursor.columns
    ]
    groups = [g.index for g in cursor.groups]
    used = E.columns(opts.post) or frozenset()
    extra_cols = sorted(c for c in used if c not in key_cols)
    data = task.content != "delete"
    if data and any(c not in cursor.columns for c in extra_cols):
        raise _Declined
    # Row groups whose statistics rule the filter out hold no match: their filter columns stay unread.
    may = (
        _may_match(storage, spec, cursor, opts.post)
        if data and extra_cols
        else np.ones(len(groups), dtype=bool)
    )
    together = None
    if data and extra_cols and may.all():  # one read of the key and filter columns
        together = cursor.load(groups, [*key_cols, *extra_cols])
        keys = together.select(key_cols)
    else:
        keys = cursor.load(groups, key_cols)
    n = keys.num_rows
    match = np.zeros(n, dtype=bool)
    extra = None
    # Big integer IN lists are answered by ``filter_``'s sorted search, everything else by a projection.
    plain_filter = not any(
        isinstance(p, E.In) and not p.negated and len(p.values) >= SORTED_IN_MIN_VALUES
        for p in E.conjuncts(opts.post)
    )
    if data:
        counts = np.asarray([cursor.row_counts[g] for g in groups], dtype=np.int64)
        if may.any():
            where = None
            rows = keys
            if not may.all():
                starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
                where = np.concatenate(
                    [np.arange(s, s + c, dtype=np.int64) for s, c, m in zip(starts, counts, may) if m]
                )
                rows = keys.take(pa.array(where))
            table = rows
            if together is not None:
                table = together
            elif extra_cols:
                loaded = cursor.load([g for g, m in zip(groups, may) if m], extra_cols)
                for f in loaded.schema:
                    table = table.append_column(f, loaded.column(f.name))
            try:
                if plain_filter:
                    hit = _holds(
                        table.select([c for c in sorted(used) if c in table.column_names]), opts.post
                    )
                else:
                    hit = _mask(table, opts.post, filter_)
            except (FilterError, pa.ArrowException) as e:
                raise _Declined from e
            if hit.any() and extra_cols:
                extra = table.select(extra_cols).filter(bool_array(hit))
            if where is None:
                match = hit
            else:
                match[where] = hit
    at = None  # positions among the file's loaded rows, where some failed the pre-merge filter
    live = _mask(keys, opts.pre, filter_)
    if not live.all():
        # Rows failing the pre-merge filter (key and partition columns: every version of a key agrees)
        # take no part: as in the plain route, where the cursor drops them.
        keep = bool_array(live)
        if extra is not None:
            extra = extra.filter(bool_array(live[match]))
        keys, at, match = keys.filter(keep), np.flatnonzero(live), match[live]
    return _Narrow(cursor, keys, at, match, extra)


def _members(
    keys: list[np.ndarray | pa.ChunkedArray], candidates: np.ndarray, sizes: Sequence[int]
) -> np.ndarray | None:
    """Which rows hold a candidate's key (a semi-join), or None where keys are not one integer-like or
    string column (then every row is marked). ``sizes``: rows per file (each file's rows in a run)."""
    if len(keys) != 1:
        return None
    column = keys[0]
    if isinstance(column, np.ndarray) and np.issubdtype(column.dtype, np.integer):
        wanted = sorted_unique(column[candidates])
        out = np.zeros(len(column), dtype=bool)
        offset = 0
        for size in sizes:
            run = column[offset : offset + size]
            if size > 4 * len(wanted) and bool((run[1:] >= run[:-1]).all()):
                # A key-sorted file (as files are written): the candidates are searched in it, not the
                # reverse, and each found run of equal keys is marked.
                low = np.searchsorted(run, wanted, side="left")
                high = np.searchsorted(run, wanted, side="right")
                low, high = low[high > low], high[high > low]
                if len(low) and int((high - low).max()) > 1:  # a key held by several rows of the file
                    lengths = high - low
                    low = np.repeat(low - np.cumsum(lengths) + lengths, lengths) + np.arange(
                        int(lengths.sum())
                    )
                out[offset + low] = True
            else:
                at = np.minimum(np.searchsorted(wanted, run), len(wanted) - 1)
                out[offset : offset + size] = wanted[at] == run
            offset += size
        return out
    if isinstance(column, np.ndarray):
        return None  # floats, booleans: keys of those kinds are not looked up by value here
    whole = contiguous(column)
    kind = whole.type
    if (
        integer_keys(whole) is not None
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or (pa.types.is_binary(kind) or pa.types.is_large_binary(kind))
    ):
        value_set = pc.unique(whole.filter(bool_array(candidates)))
        return np.asarray(pc.is_in(whole, value_set=value_set).to_numpy(zero_copy_only=False), dtype=bool)
    return None


def declined(storage: Storage, spec: TableSpec, cursors: Sequence[Cursor], opts: ReadOptions) -> bool:
    """Whether :func:`read` hands the split back to the plain route before reading anything (footers
    only): its narrow pass would not fit, or a split of one file whose statistics rule little out."""
    width = len(spec.identity_columns) + len(spec.sequence_by) + len(E.columns(opts.post) or ()) + 1
    rows = sum(int(c.row_counts[g.index]) for c in cursors for g in c.groups)
    if rows * 8 * width > MAX_NARROW_BYTES:
        return True
    data = [c for c in cursors if c.task.content != "delete"]
    if len(cursors) == 1 and data:
        # Nothing to merge: the plain route reads the file once. Two passes pay only where the statistics
        # leave most of it out.
        may = _may_match(storage, spec, data[0], opts.post)
        counts = np.asarray([data[0].row_counts[g.index] for g in data[0].groups], dtype=np.int64)
        if int(counts[may].sum()) > SINGLE_FILE_SHARE * int(counts.sum()):
            return True
    return False


def read(
    storage: Storage,
    spec: TableSpec,
    cursors: Sequence[Cursor],
    opts: ReadOptions,
    output: Sequence[str],
    filter_: Callable[[pa.Table, E.Expr], pa.Table],
    pool: Executor | None = None,
) -> list[pa.Table] | None:
    """The split's merged rows that pass the scan's filter, per file (None: the plain route must read
    the split). ``cursors`` are the split's file cursors, oldest first; ``output`` the columns the
    caller needs besides those the narrow pass reads. Tables hold a file's columns as it stores them
    (dictionaries, narrower nullability): the caller makes them alike."""
    if declined(storage, spec, cursors, opts):
        return None
    try:
        files = _map(pool, lambda c: _narrow(storage, spec, c, opts, filter_), cursors)
    except _Declined:
        return None
    files = [f for f in files if f.keys.num_rows]
    if not files or not any(f.match.any() for f in files):
        return []
    chosen = _newest_by_search(spec, files) if SEARCH_LATER else None
    if chosen is None:
        chosen = _marked(spec, files)
    wide = [
        _plan_wide(f, mine, output)
        for f, mine in zip(files, chosen)
        if f.cursor.task.content != "delete" and mine.any()
    ]
    # Runs of row groups, not files, are the pool's jobs: a big file's decode is spread over the threads,
    # and each job holds one run's decoded columns at most.
    runs = [(w, groups, where) for w in wide for groups, where in w.runs]
    pieces = iter(_map(pool, lambda run: _load_run(*run), runs))
    return [w.finish([next(pieces) for _ in w.runs]) for w in wide]


def _newest_by_search(spec: TableSpec, files: Sequence[_Narrow]) -> list[np.ndarray] | None:
    """Per file, which of its matching rows are their key's newest version, found by searching each
    candidate's key in the same file's next row and in every later file (all sorted by key): no row's
    key but the candidates' is looked at, nothing is concatenated or sorted. Only newest-wins without
    ``sequence_by``, on one integer-like key column (None: :func:`_marked` decides)."""
    if spec.merge_engine == "first_row" or spec.sequence_by or len(spec.primary_key) != 1:
        return None
    name = spec.primary_key[0]
    kind = spec.schema.field(name).type
    keys = []
    for f in files:
        k = _values([f.keys.column(name)], kind)
        if not isinstance(k, np.ndarray) or not np.issubdtype(k.dtype, np.integer):
            return None
        if len(k) > 1 and not bool((k[1:] >= k[:-1]).all()):
            return None  # (files are written sorted by key; anything else is merged the general way)
        keys.append(k)
    out = []
    for i, f in enumerate(files):
        mine = np.zeros(len(keys[i]), dtype=bool)
        at = np.flatnonzero(f.match & (f.ops != OP_DELETE))
        if len(at):
            k = keys[i]
            wanted = k[at]
            newest = np.ones(len(at), dtype=bool)
            # A later row of the same file holds the key (a file's equal keys are adjacent, the last wins).
            inner = at + 1 < len(k)
            newest[inner] = k[at[inner] + 1] != wanted[inner]
            for later in keys[i + 1 :]:
                if len(later):  # any later version of the key, a delete marker too, hides this one
                    pos = np.minimum(np.searchsorted(later, wanted), len(later) - 1)
                    newest &= later[pos] != wanted
            mine[at[newest]] = True
        out.append(mine)
    return out


def _marked(spec: TableSpec, files: Sequence[_Narrow]) -> list[np.ndarray]:
    """Per file, which of its matching rows win the merge, by the merge's own marking: of the candidates'
    versions alone (a semi-join on the key) or, where those are many, of every row."""
    ops = np.concatenate([f.ops for f in files])
    match = np.concatenate([f.match for f in files])
    n = len(ops)
    keys = [_values([f.keys.column(k) for f in files], spec.schema.field(k).type) for k in spec.primary_key]
    sequence = [
        _values([f.keys.column(s) for f in files], spec.schema.field(s).type) for s in spec.sequence_by
    ]
    candidates = match & (ops != OP_DELETE)
    members = _members(keys, candidates, [f.keys.num_rows for f in files])
    first_file = files[0].keys.num_rows if files[0].cursor.task.content != "delete" else 0
    if members is None or int(np.count_nonzero(members)) > CANDIDATE_SHARE * n:
        idx = None
        sub_keys, sub_ops, sub_seq, first = keys, ops, sequence, first_file
    else:
        idx = np.flatnonzero(members)
        sub_keys = [_take(k, idx) for k in keys]
        sub_seq = [_take(s, idx) for s in sequence]
        sub_ops = ops[idx]
        first = int(np.searchsorted(idx, first_file))
    if spec.merge_engine == "first_row":
        winner = first_wins(sub_keys, sub_ops, sub_seq)
    else:
        winner = newest_wins(sub_keys, sub_ops, first, sub_seq)
    chosen = np.zeros(n, dtype=bool)
    if idx is None:
        chosen = winner & match
    else:
        chosen[idx] = winner & match[idx]
    ends = np.cumsum([f.keys.num_rows for f in files])[:-1]
    return np.split(chosen, ends)


def _map(pool: Executor | None, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    if pool is None or len(items) <= 1:
        return [fn(x) for x in items]
    return list(pool.map(fn, items))


class _Wide:
    """One file's wide pass: its survivors' narrow columns (``table``), the other columns to read
    (``rest``, ``dictionary`` of them read as dictionaries) and the runs of row groups decoded at once,
    each with its survivors' positions among the run's rows."""

    def __init__(
        self,
        cursor: Cursor,
        table: pa.Table,
        rest: list[str],
        dictionary: list[str],
        runs: list[tuple[list[int], np.ndarray]],
    ) -> None:
        self.cursor, self.table, self.rest, self.dictionary, self.runs = cursor, table, rest, dictionary, runs

    def finish(self, pieces: Sequence[pa.Table]) -> pa.Table:
        """The survivors with the other columns (``pieces``: the runs' rows, in order) appended."""
        table = self.table
        if not pieces:
            return table
        loaded = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        for fld in loaded.schema:
            table = table.append_column(fld, loaded.column(fld.name))
        return table


def _plan_wide(f: _Narrow, mine: np.ndarray, output: Sequence[str]) -> _Wide:
    """A file's surviving rows (``mine`` over its narrow rows) as the narrow pass read them, and which row
    groups the wide pass decodes for the other columns, in runs of about ``WIDE_RUN_ROWS`` rows."""
    cursor = f.cursor
    local = np.flatnonzero(mine)
    table = f.keys.take(pa.array(local))
    if f.extra is not None:
        among = np.flatnonzero(f.match)  # extra holds the matching rows; survivors are among them
        table_extra = f.extra.take(pa.array(np.searchsorted(among, local)))
        for fld in table_extra.schema:
            if fld.name not in table.column_names:
                table = table.append_column(fld, table_extra.column(fld.name))
    rest = [c for c in output if c in cursor.columns and c not in table.column_names]
    if not rest:
        return _Wide(cursor, table, [], [], [])
    groups = np.asarray([g.index for g in cursor.groups], dtype=np.int64)
    counts = np.asarray([cursor.row_counts[g] for g in groups.tolist()], dtype=np.int64)
    ends = np.cumsum(counts)
    at = local if f.at is None else f.at[local]  # positions among the file's loaded rows (ascending)
    group_of = np.searchsorted(ends, at, side="right")
    used = sorted_unique(group_of)  # the row groups holding a survivor, by their place among the loaded
    used_counts = counts[used]
    starts = np.cumsum(used_counts) - used_counts  # where each used group starts among the used groups' rows
    where = starts[np.searchsorted(used, group_of)] + (at - (ends - counts)[group_of])
    # Consecutive used groups starting in the same window of WIDE_RUN_ROWS rows form a run (at least one
    # group; a run holds under WIDE_RUN_ROWS rows plus its last group's).
    window = starts // WIDE_RUN_ROWS
    cuts = np.flatnonzero(window[1:] != window[:-1]) + 1
    first = np.concatenate([[0], cuts])
    last = np.concatenate([cuts, [len(used)]])
    run_start = starts[first]
    run_end = np.concatenate([starts[cuts], [int(used_counts.sum())]])
    lo = np.searchsorted(where, run_start)
    hi = np.searchsorted(where, run_end)
    runs = [
        (groups[used[a:b]].tolist(), where[x:y] - s)
        for a, b, s, x, y in zip(first.tolist(), last.tolist(), run_start.tolist(), lo.tolist(), hi.tolist())
    ]
    dictionary = [c for c in cursor.dictionary if c in rest]
    return _Wide(cursor, table, rest, dictionary, runs)


def _load_run(w: _Wide, groups: list[int], where: np.ndarray) -> pa.Table:
    """The other columns of a run's survivors: its row groups decoded at once, the survivors taken."""
    return _take_sorted(w.cursor.load(groups, w.rest, w.dictionary), where)


def _take_sorted(table: pa.Table, where: np.ndarray) -> pa.Table:
    """Rows ``where`` (ascending) of ``table``. A column read as dictionaries has a chunk per row group,
    each with its own dictionary: its rows are taken chunk by chunk, as chunks with their own
    dictionaries (taking from the whole column would unify every chunk's dictionary first)."""
    index = pa.array(where)
    columns = []
    for column in table.columns:
        if column.num_chunks > 1 and pa.types.is_dictionary(column.type):
            ends = np.cumsum([len(c) for c in column.chunks])
            cuts = np.searchsorted(where, ends).tolist()
            starts = [0, *cuts[:-1]]
            offsets = [0, *ends[:-1].tolist()]
            pieces = [
                chunk.take(pa.array(where[a:b] - offset))
                for chunk, a, b, offset in zip(column.chunks, starts, cuts, offsets)
                if b > a
            ]
            columns.append(pa.chunked_array(pieces, type=column.type))
        else:
            columns.append(column.take(index))
    return pa.Table.from_arrays(columns, schema=table.schema)
