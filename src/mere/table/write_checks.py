"""Checks an upsert must pass against the table state it commits on top of.

Most upserts are blind: they never read the table and rebase onto whatever committed meanwhile. Two
rules need the table's state, and both are checked per split (partition x bucket), for only the splits
and keys a write touches:

- **NOT NULL columns.** A partial row (one lacking a NOT NULL column) may only update a key that exists.
  A row that starts a key afresh (the batch deleted it first) lacking such a column is refused at once;
  a row that merges onto a key is refused if the key does not exist at the version the write commits on.
  With ``sequence_by``, a delete is refused where it falls below a stored version of its key that merge
  on read would then leave live without a NOT NULL column (a late delete behind a partial update).
- **Integer ``sum`` columns.** A write whose sums would leave the column's type is refused, naming the
  key, instead of leaving a table no read can merge. Cheap in the common case: Parquet statistics bound
  every key's current sum by the sum over the split's files of their largest absolute value; only when
  that bound plus the incoming values could overflow are the current sums read. Each commit records the
  largest value it adds per column (``sum_max``), so a concurrent writer's headroom check stays exact
  without re-reading: its commit conflicts (and is retried) only if the recorded additions could
  exceed its headroom.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.arrays import first_row
from mere.errors import SchemaMismatch, SumOverflow
from mere.io.footer import primitive_leaf
from mere.kernels import group_starts, operation_codes, reduce_versions, sort_indices
from mere.metadata import FileEntry
from mere.partitions import partition_json
from mere.read.evolution import file_columns, to_table_columns
from mere.read.reader import io_pool
from mere.spec import OP_COLUMN, OP_DELETE, OP_MERGE, OP_PUT, MergeOperator, TableSpec
from mere.table.conflicts import ChecksHold
from mere.table.context import TableHandle, split_label
from mere.write.writer import PreparedFile

SplitKey = tuple[str, int]  # (partition JSON, bucket)


def _limit(t: pa.DataType) -> int:
    """Largest absolute sum that stays in range (for signed types the smaller of |min| and max)."""
    return int(np.iinfo(t.to_pandas_dtype()).max)


def _abs_max(values: pa.Array | pa.ChunkedArray) -> int:
    if len(values) == 0 or values.null_count == len(values):
        return 0
    lo, hi = pc.min_max(values).values()
    return max(abs(int(lo.as_py())), abs(int(hi.as_py())))


_FULL = "__mere_full__"  # True on rows that carry every NOT NULL column


@dataclass
class WriteChecks:
    """What one write must check before it commits; filled while its files are prepared."""

    spec: TableSpec
    identifier: str
    required: list[str] = field(init=False)
    sum_columns: list[str] = field(init=False)
    rows: dict[SplitKey, list[pa.Table]] = field(default_factory=lambda: defaultdict(list))
    tags: dict[SplitKey, list[Any]] = field(default_factory=lambda: defaultdict(list))  # who observed each
    partial: bool = False  # some row lacks a NOT NULL column
    deletes: bool = False  # some row deletes its key
    buried: bool = False  # some row carries a NOT NULL column's group below its own sequence
    _reduced: dict[SplitKey, tuple[pa.Table, np.ndarray]] | None = None

    def __post_init__(self) -> None:
        spec = self.spec
        self.required = [
            f.name for f in spec.schema if not f.nullable and f.name not in spec.identity_columns
        ]
        self.sum_columns = [
            c
            for c, op in spec.merge_operators.items()
            if op.name == "sum" and pa.types.is_integer(spec.schema.field(c).type)
        ]

    @property
    def needed(self) -> bool:
        """Whether the commit must consult the table: rows lacking NOT NULL columns, or integer sums."""
        return self.partial or bool(self.sum_columns and self.rows) or self.late_deletes_matter

    @property
    def late_deletes_matter(self) -> bool:
        """With ``sequence_by``, a delete below a stored version of its key that lacks a NOT NULL column
        leaves that version live on nothing: such deletes are checked against the table. So are rows whose
        NOT NULL column's group sequence lies below their own sequence (a write's events folded into one
        row): a stored delete between the two clears the group and leaves the row live without it."""
        return (self.deletes or self.buried) and bool(self.spec.sequence_by and self.required)

    # -- collecting -------------------------------------------------------------------------------

    def observe(self, prepared: Sequence[PreparedFile], tag: Any = None, first: bool = False) -> None:
        """Take note of prepared (reduced, per-split) rows, in write order (``first``: before all others).

        ``tag`` names the observer, so that :meth:`forget` can take its rows back.
        """
        if self.required or self.sum_columns:
            for p in prepared:
                full = True if p.content == "delete" else None
                self._observe((partition_json(p.partition), p.bucket), p.rows, full, tag, first)

    def forget(self, tag: Any) -> None:
        """Drop the rows observed under ``tag`` (a change evaluated again replaces them)."""
        for key in list(self.rows):
            kept = [(r, t) for r, t in zip(self.rows[key], self.tags[key]) if t is not tag]
            if kept:
                self.rows[key], self.tags[key] = [r for r, _ in kept], [t for _, t in kept]
            else:
                del self.rows[key], self.tags[key]
        self._reduced = None

    def observe_files(self, table: TableHandle, entries: Sequence[FileEntry]) -> None:
        """The same for files another process staged: read only the columns the checks need."""

        def has(e: FileEntry, c: str) -> bool:
            return e.columns is None or c in e.columns

        partial = any(e.content != "delete" and not all(has(e, c) for c in self.required) for e in entries)
        # A row may leave out a group holding a NOT NULL column in a file that has the column.
        partial |= any(c in self.spec.grouped for c in self.required)
        summed = any(has(e, c) for e in entries for c in self.sum_columns)
        late = bool(self.spec.sequence_by and self.required)  # (their deletes may be late)
        if not partial and not summed and not late:
            return
        pk = list(self.spec.primary_key)
        for e in entries:
            md = table.storage.metadata(e.path, e.size_bytes)
            # NOT NULL group columns are judged row by row (see _carried); late deletes read them all
            checked = self._checked if self.spec.sequence_by else []
            extra = [*self.sum_columns, *self.spec.sequence_by, *checked]
            wanted = [*pk, OP_COLUMN, *dict.fromkeys(c for c in extra if has(e, c) and c not in pk)]
            rows = table.storage.read_row_groups(e.path, range(md.num_row_groups), wanted, e.size_bytes)
            full = e.content == "delete" or all(has(e, c) for c in self.required)
            self._observe((e.partition, e.bucket), rows, full)

    def _observe(
        self, key: SplitKey, rows: pa.Table, full: bool | None = None, tag: Any = None, first: bool = False
    ) -> None:
        if full is None:
            full = OP_COLUMN in rows.column_names and all(c in rows.column_names for c in self.required)
        carries = self._carried(rows) if full is True and OP_COLUMN in rows.column_names else None
        if OP_COLUMN in rows.column_names:
            self.deletes |= bool(pc.any(pc.equal(rows.column(OP_COLUMN), OP_DELETE)).as_py())
            self.buried |= bool(self._buried(rows).any())
        self.partial |= not full or (carries is not None and not carries.all())
        pk = list(self.spec.primary_key)
        keep = rows.select(
            [
                *pk,
                OP_COLUMN,
                *(c for c in self.sum_columns if c in rows.column_names),
                *(c for c in self.spec.sequence_by if c in rows.column_names),
                *(
                    c
                    for c in (self._checked if self.spec.sequence_by else [])
                    if c in rows.column_names and c not in self.spec.sequence_by and c not in self.sum_columns
                ),
            ]
        )
        if carries is not None:
            flag = pa.array(np.ones(rows.num_rows, dtype=bool), mask=~carries)
        else:
            flag = (
                pa.array(np.ones(rows.num_rows, dtype=bool)) if full else pa.nulls(rows.num_rows, pa.bool_())
            )
        at = 0 if first else len(self.rows[key])
        self.rows[key].insert(at, keep.append_column(_FULL, flag))
        self.tags[key].insert(at, tag)
        self._reduced = None

    def _buried(self, rows: pa.Table) -> np.ndarray:
        """Which rows (not deletes) carry a NOT NULL column's group at a sequence below the row's own: a
        stored delete of their key between the two would clear that group (see :attr:`late_deletes_matter`).
        Where the two sequences do not compare (several sequence columns, types apart), every row that
        carries such a group counts."""
        grouped = self.spec.grouped
        sequences = sorted({grouped[c] for c in self.required if c in grouped and grouped[c] != c})
        out = np.zeros(rows.num_rows, dtype=bool)
        if not sequences or OP_COLUMN not in rows.column_names or not self.spec.sequence_by:
            return out
        own = self.spec.sequence_by[0] if len(self.spec.sequence_by) == 1 else None
        comparable = own is not None and own in rows.column_names
        for g in sequences:
            if g not in rows.column_names:
                continue
            below = rows.column(g).is_valid()  # carried: counts where the sequences do not compare
            if comparable:
                with contextlib.suppress(pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                    below = pc.fill_null(pc.less(rows.column(g), rows.column(own)), False)
            out |= np.asarray(below.to_numpy(zero_copy_only=False), dtype=bool)
        return np.asarray(out & (operation_codes(rows) != OP_DELETE), dtype=bool)

    def _carried(self, rows: pa.Table) -> np.ndarray | None:
        """Sequence groups: which rows carry every NOT NULL column of a group (the group's sequence and
        the value not NULL; a row not carrying a group lacks its columns). None: no such column."""
        grouped = self.spec.grouped
        columns = [c for c in self.required if c in grouped and grouped[c] != c]
        if not columns:
            return None
        ops = np.asarray(rows.column(OP_COLUMN).to_numpy(zero_copy_only=False))
        out: np.ndarray = ops == OP_DELETE  # delete rows carry no values
        carried = np.ones(rows.num_rows, dtype=bool)
        for c in columns:
            for name in (grouped[c], c):
                if name not in rows.column_names:
                    carried[:] = False
                    continue
                carried &= np.asarray(rows.column(name).is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return np.asarray(out | carried, dtype=bool)

    def _net(self) -> dict[SplitKey, tuple[pa.Table, np.ndarray]]:
        """Per split, each key's net effect of this write (its rows folded in write order) and its operation."""
        if self._reduced is None:
            fields = [self.spec.schema.field(c) for c in self.spec.primary_key]
            fields += [
                pa.field(OP_COLUMN, pa.int8()),
                *(self.spec.schema.field(c) for c in self.sum_columns),
                *(self.spec.schema.field(c) for c in self.spec.sequence_by),
                pa.field(_FULL, pa.bool_()),
            ]
            schema = pa.schema([f.with_nullable(True) for f in fields])
            operators = {c: MergeOperator("sum") for c in self.sum_columns} | {
                _FULL: MergeOperator("last_non_null")
            }
            self._reduced = {}
            for key, parts in self.rows.items():
                versions = pa.concat_tables([_align(p, schema) for p in parts])
                pk = [versions.column(c) for c in self.spec.primary_key]
                order = sort_indices(pk)
                versions = versions.take(pa.array(order))
                ops = versions.column(OP_COLUMN).to_numpy(zero_copy_only=False).astype(np.int8)
                starts = group_starts([versions.column(c) for c in self.spec.primary_key], versions.num_rows)
                try:
                    self._reduced[key] = reduce_versions(
                        versions.drop_columns([OP_COLUMN]), ops, starts, self.spec.primary_key, operators
                    )
                except SumOverflow as e:
                    raise SumOverflow(f"{self.identifier}: {e}; the write was not applied") from None
        return self._reduced

    def summary(self) -> dict[str, Any]:
        """What the commit records for concurrent writers' checks: the most it adds to any key's sum."""
        if not self.sum_columns:
            return {}
        peak: dict[str, int] = {}
        for rows, _ in self._net().values():
            for c in self.sum_columns:
                peak[c] = max(peak.get(c, 0), _abs_max(rows.column(c)))
        return {"sum_max": peak}

    # -- checking ---------------------------------------------------------------------------------

    def verify(self, table: TableHandle, base: int) -> ChecksHold:
        """Check the rules at ``base``; returns the conflict rule for what lands after ``base``."""
        net = self._net()
        must_exist = self._check_fresh_rows(net, table, base) if self.partial else {}
        headroom = self._check_sums(table, base, net) if self.sum_columns else {}
        if must_exist:
            self._check_existing(table, base, must_exist)
        late = self.late_deletes_matter
        if late:
            self._check_late_deletes(table, base)
        return ChecksHold(frozenset(split_label(k) for k in net), bool(must_exist) or late, headroom)

    def _check_fresh_rows(
        self, net: dict[SplitKey, tuple[pa.Table, np.ndarray]], table: TableHandle, base: int
    ) -> dict[SplitKey, pa.Table]:
        """Refuse keys this write (re)creates without NOT NULL columns; return those that must exist already.
        With ``sequence_by``, a row below its key's stored delete creates nothing (it is stale)."""
        pk = list(self.spec.primary_key)
        must_exist: dict[SplitKey, pa.Table] = {}
        for key, (rows, ops) in net.items():
            lacking = rows.column(_FULL).is_null().to_numpy(zero_copy_only=False)
            fresh = lacking & (ops == OP_PUT)
            if fresh.any() and self.spec.sequence_by:
                at = np.flatnonzero(fresh)
                mine = rows.take(pa.array(at)).select([*pk, *self.spec.sequence_by])
                below = at[_stale(table, base, key, mine, self.spec)]
                fresh[below] = False
                lacking[below] = False
            if fresh.any():
                example = first_row(rows.filter(pa.array(fresh)).select(pk))
                raise SchemaMismatch(
                    f"{self.identifier}: key {example} is deleted and inserted again in this write "
                    f"without non-nullable column(s) {self.required}"
                )
            merging = lacking & (ops == OP_MERGE)
            if merging.any():
                must_exist[key] = rows.filter(pa.array(merging)).select([*pk, *self.spec.sequence_by])
        return must_exist

    def _check_existing(self, table: TableHandle, base: int, must_exist: dict[SplitKey, pa.Table]) -> None:
        pk = list(self.spec.primary_key)
        current = table.split_tables(base, set(must_exist), pk)
        for key, wanted in must_exist.items():
            have = current.get(key)
            found = (
                _contains(have, wanted, pk)
                if have is not None and have.num_rows
                else np.zeros(wanted.num_rows, dtype=bool)
            )
            if not found.all() and self.spec.sequence_by:
                # A row older than its key's stored version (a delete's, a tombstone's) is stale: merge on
                # read ignores it, so it creates nothing (a replayed event after a delete).
                found |= _stale(table, base, key, wanted, self.spec)
            if not found.all():
                example = first_row(wanted.filter(pa.array(~found)))
                raise SchemaMismatch(
                    f"{self.identifier}: {int((~found).sum())} new key(s) such as {example} lack "
                    f"non-nullable column(s) {self.required}; rows that insert keys need them"
                )

    def _check_late_deletes(self, table: TableHandle, base: int) -> None:
        """Refuse deletes that merge on read would leave behind a later version of their key lacking a NOT
        NULL column (a late delete below a partial update, or below a row whose group it clears): every
        version of such keys, stored and incoming, is merged as reads merge them, and the key must end
        deleted or with its NOT NULL columns."""
        spec = self.spec
        pk, seq = list(spec.primary_key), list(spec.sequence_by)
        columns = list(dict.fromkeys([*pk, *seq, *self._checked]))
        schema = pa.schema(
            [*(spec.schema.field(c).with_nullable(True) for c in columns), pa.field(OP_COLUMN, pa.int8())]
        )
        files = sorted(
            (f for f in table.files_at(base) if f.content in ("data", "delete")),
            key=lambda f: (f.seq or 0, f.id or 0),
        )
        for key, parts in self.rows.items():
            incoming = [p for p in parts if OP_COLUMN in p.column_names]
            # the keys this write deletes, and those it gives a NOT NULL group below the row's sequence
            keys = pa.schema([schema.field(c) for c in pk])
            deleted = pa.concat_tables(
                [
                    _align(p.select(pk), keys).filter(
                        pa.array((operation_codes(p) == OP_DELETE) | self._buried(p))
                    )
                    for p in incoming
                ]
            )
            if not deleted.num_rows:
                continue
            stored = [
                _read_current(table, spec, f, [*columns, OP_COLUMN])
                for f in files
                if (f.partition, f.bucket) == key
            ]
            # stored versions first (files in commit order), then this write's: the order ties fall in
            versions = [
                v.filter(pa.array(_contains(deleted, v.select(pk), pk))) for v in [*stored, *incoming]
            ]
            present = {
                c: np.concatenate([np.full(v.num_rows, c in v.column_names) for v in versions])
                for c in columns
                if c not in pk
            }
            rows = pa.concat_tables([_align(v, schema) for v in versions])
            order = sort_indices([rows.column(c) for c in [*pk, *seq]])
            rows = rows.take(pa.array(order))
            ops = rows.column(OP_COLUMN).to_numpy(zero_copy_only=False).astype(np.int8)
            starts = group_starts([rows.column(c) for c in pk], rows.num_rows)
            options = spec.reduce_options
            options["groups"] = {
                g: [c for c in cs if c in columns] for g, cs in spec.sequence_groups.items() if g in columns
            }
            merged, out_op = reduce_versions(
                rows.drop_columns([OP_COLUMN]),
                ops,
                starts,
                spec.identity_columns,
                spec.operators,
                {c: m[order] for c, m in present.items()},
                **options,
                arrival=order,
            )
            bare = np.zeros(merged.num_rows, dtype=bool)
            for c in self.required:
                bare |= np.asarray(merged.column(c).is_null().to_numpy(zero_copy_only=False), dtype=bool)
            bare &= out_op != OP_DELETE
            if bare.any():
                example = first_row(merged.select(pk).filter(pa.array(bare)))
                raise SchemaMismatch(
                    f"{self.identifier}: key {example} would be left live without non-nullable column(s) "
                    f"{self.required}: a delete lies between the sequences of its versions (a delete of "
                    "this write below a stored version, or a stored delete above a group this write "
                    "carries); the write was not applied"
                )

    @property
    def _checked(self) -> list[str]:
        """The NOT NULL columns and the sequences of the groups holding them."""
        grouped = self.spec.grouped
        return list(dict.fromkeys(c for r in self.required for c in (r, grouped.get(r, r))))

    def _check_sums(
        self, table: TableHandle, base: int, net: dict[SplitKey, tuple[pa.Table, np.ndarray]]
    ) -> dict[str, int]:
        """Refuse overflowing sums; return each column's headroom left for concurrent additions."""
        files: dict[SplitKey, list[FileEntry]] = defaultdict(list)
        for f in table.files_at(base):
            key = (f.partition, f.bucket)
            if key in net and f.content != "delete":
                files[key].append(f)
        storage = table.storage
        storage.prefetch_metadata([(f.path, f.size_bytes) for fs in files.values() for f in fs], io_pool())
        headroom: dict[str, int] = {}
        exact: dict[SplitKey, list[str]] = defaultdict(list)
        for key, (rows, _) in net.items():
            for col in self.sum_columns:
                limit = _limit(self.spec.schema.field(col).type)
                bound = sum(_file_abs_max(storage, f, col) for f in files.get(key, ()))
                peak = _abs_max(rows.column(col))
                if bound + peak <= limit:
                    headroom[col] = min(headroom.get(col, limit), limit - bound - peak)
                else:
                    exact[key].append(col)
        if exact:
            pk = list(self.spec.primary_key)
            columns = sorted({c for cols in exact.values() for c in cols})
            current = table.split_tables(base, set(exact), [*pk, *columns])
            for key, cols in exact.items():
                rows, ops = net[key]
                for col in cols:
                    limit = _limit(self.spec.schema.field(col).type)
                    peak = _exact_peak(rows, ops, current.get(key), pk, col, self.identifier)
                    headroom[col] = min(headroom.get(col, limit), limit - peak)
        return headroom


def _read_current(table: TableHandle, spec: TableSpec, f: FileEntry, columns: Sequence[str]) -> pa.Table:
    """Those of ``columns`` a stored file holds, under the table's current names (a renamed column found
    by its field id, a column added since the file was written reading its default where the file holds
    whole rows); the others are left out."""
    md = table.storage.metadata(f.path, f.size_bytes)
    groups = range(md.num_row_groups)
    if not spec.evolved:
        names = [c for c in columns if c in md.schema.names]
        return table.storage.read_row_groups(f.path, groups, names, f.size_bytes)
    mapping = file_columns(spec, md)
    rows = table.storage.read_row_groups(f.path, groups, mapping.file_names(columns), f.size_bytes)
    fill = mapping.defaulted(spec, [c for c in columns if c != OP_COLUMN], whole_rows=f.columns is None)
    return to_table_columns(rows, mapping, spec, fill)


def _stale(table: TableHandle, base: int, split: SplitKey, wanted: pa.Table, spec: TableSpec) -> np.ndarray:
    """Which ``wanted`` rows (keys and sequences) lie below their key's stored delete in the split at
    ``base``: the key's stored version of highest sequence is a delete (a marker, a tombstone) above the
    row's, so the key ends deleted whatever the row carries."""
    pk, seq = list(spec.primary_key), list(spec.sequence_by)
    files = [
        f
        for f in table.files_at(base)
        if (f.partition, f.bucket) == split and f.content in ("data", "delete")
    ]
    columns = [*pk, *seq, OP_COLUMN]
    fields = [
        *(spec.schema.field(c).with_nullable(True) for c in [*pk, *seq]),
        pa.field(OP_COLUMN, pa.int8()),
    ]
    parts = [_align(_read_current(table, spec, f, columns), pa.schema(fields)) for f in files]
    out = np.zeros(wanted.num_rows, dtype=bool)
    if not parts:
        return out
    stored = pa.concat_tables(parts)
    order = sort_indices([stored.column(c) for c in [*pk, *seq]])
    stored = stored.take(pa.array(order))
    starts = group_starts([stored.column(c) for c in pk], stored.num_rows)
    ends = np.append(np.flatnonzero(starts)[1:], stored.num_rows) - 1
    top = stored.take(pa.array(ends))  # each stored key's version of highest sequence
    top = top.filter(pc.equal(top.column(OP_COLUMN), pa.scalar(OP_DELETE, pa.int8()))).drop_columns(
        [OP_COLUMN]
    )
    marked = wanted.append_column("__row__", pa.array(np.arange(wanted.num_rows)))
    renamed = top.rename_columns([*pk, *(f"__top_{c}" for c in seq)])
    joined = marked.join(renamed, keys=pk, join_type="inner")
    less = pa.array(np.zeros(joined.num_rows, dtype=bool))
    equal = pa.array(np.ones(joined.num_rows, dtype=bool))
    for c in seq:  # lexicographic over the sequence columns
        mine, theirs = joined.column(c), joined.column(f"__top_{c}").cast(joined.column(c).type)
        less = pc.or_(less, pc.and_(equal, pc.less(mine, theirs)))
        equal = pc.and_(equal, pc.equal(mine, theirs))
    rows = joined.column("__row__").to_numpy()
    out[rows] = np.asarray(less.to_numpy(zero_copy_only=False), dtype=bool)
    return out


def _align(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays(
        [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in schema
        ],
        schema=schema,
    )


def _file_abs_max(storage: Any, f: FileEntry, column: str) -> int:
    """Largest absolute value of ``column`` in a file by its statistics (a huge number when unknown)."""
    if f.columns is not None and column not in f.columns:
        return 0
    md = storage.metadata(f.path, f.size_bytes)
    index = primitive_leaf(md, storage.column_leaves(f.path, f.size_bytes), column)
    if index is None:
        return 0
    out = 0
    for i in range(md.num_row_groups):
        chunk = md.row_group(i).column(index)
        st = chunk.statistics
        if st is None or not st.has_min_max:
            if st is not None and st.has_null_count and st.null_count == chunk.num_values:
                continue  # only nulls
            return 1 << 128
        out = max(out, abs(int(st.min)), abs(int(st.max)))
    return out


def _contains(have: pa.Table, wanted: pa.Table, pk: list[str]) -> np.ndarray:
    """Which ``wanted`` keys are among ``have``'s (keys are never null)."""
    if len(pk) == 1:
        return np.asarray(
            pc.is_in(wanted.column(pk[0]), value_set=have.column(pk[0]).combine_chunks()).to_numpy(
                zero_copy_only=False
            )
        )
    marked = wanted.append_column("__row__", pa.array(np.arange(wanted.num_rows)))
    hit = marked.join(have.select(pk), keys=pk, join_type="left semi").column("__row__").to_numpy()
    found = np.zeros(wanted.num_rows, dtype=bool)
    found[hit] = True
    return found


def _exact_peak(
    net: pa.Table, ops: np.ndarray, current: pa.Table | None, pk: list[str], col: str, identifier: str
) -> int:
    """Largest absolute sum any key of this write reaches on top of ``current``; raises on overflow."""
    t = net.schema.field(col).type
    limit = _limit(t)
    live = pc.and_(pc.is_valid(net.column(col)), pa.array(ops != OP_DELETE))
    rows = net.filter(live)
    ops = ops[live.to_numpy(zero_copy_only=False)]
    unsigned = pa.types.is_unsigned_integer(t)
    dtype = np.uint64 if unsigned else np.int64
    add = rows.column(col).to_numpy(zero_copy_only=False).astype(dtype)
    base = np.zeros(rows.num_rows, dtype=dtype)
    if current is not None and current.num_rows:
        marked = rows.select(pk).append_column("__row__", pa.array(np.arange(rows.num_rows)))
        joined = marked.join(current.select([*pk, col]), keys=pk, join_type="inner")
        idx = joined.column("__row__").to_numpy()
        values = joined.column(col).fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
        merging = ops[idx] == OP_MERGE  # rows that start a key afresh do not add to its old sum
        base[idx[merging]] = values[merging]
    with np.errstate(over="ignore"):
        total = base + add  # 64-bit sums wrap on overflow: detected next
    info = np.iinfo(t.to_pandas_dtype())
    if unsigned:
        bad = (total < base) | (total > info.max)
    else:
        bad = (((base ^ total) & (add ^ total)) < 0) | (total < info.min) | (total > info.max)
    if bad.any():
        i = int(np.argmax(bad))
        key = first_row(rows.select(pk).slice(i, 1))
        raise SumOverflow(
            f"{identifier}: merge operator 'sum' on column {col!r} would overflow {t} for key {key} "
            f"(stored sum {base[i]} + {add[i]}); the write was not applied"
        )
    return min(limit, int(np.abs(total.astype(np.float64)).max())) if len(total) else 0
