"""Turn a batch of rows into sorted, bucketed Parquet files ready to commit.

Nothing here is visible to readers: files become part of the table only when the catalog commits them.
"""

from __future__ import annotations

import decimal
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.arrays import bool_array, distinct_count, stable_argsort
from mere.concurrency import cpu_workers, shared_pool, wait_all
from mere.errors import InvalidInput, NullKey, SchemaMismatch, SumOverflow
from mere.hashing import bucket_ids
from mere.io import Storage
from mere.io.parquet import Layout, choose_layout, write_parquet
from mere.kernels import (
    fold_sequenced,
    group_starts,
    last_by_sequence,
    numpy_sortable_array,
    reduce_versions,
    sort_indices,
    superseded,
)
from mere.metadata import FileEntry
from mere.partitions import partition_json, partition_path, partition_value_strings
from mere.spec import DEFAULT_COMPRESSION, OP_COLUMN, OP_DELETE, OP_MERGE, TableSpec, with_field_ids
from mere.write.cast import (
    check_storable,
    decoded,
    holds_bounded,
    lossless_cast,
    nested_not_null,
    strict_nested,
)

DEFAULT_ROW_GROUP_BYTES = 1 << 20  # uncompressed bytes per row group: small enough for key lookups
CHUNK_ROWS = 2_000_000  # rows per prepared chunk of inputs already in memory
CHUNK_BYTES = 64 << 20  # Arrow bytes per prepared chunk of streamed inputs (memory bound of a streamed write)


class ArrowStreamExportable(Protocol):
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...


def to_batches(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """Accept Arrow tables, batches, readers, pandas frames or anything with ``__arrow_c_stream__``."""
    return converted_input(data)[:2]


def converted_input(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch], bool]:
    """(schema, batches, whether the batches stream in, rather than already being in memory)."""
    try:
        return _to_batches(data)
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        TypeError,
        ValueError,
        OverflowError,
    ) as e:
        if isinstance(e, InvalidInput):
            raise
        raise InvalidInput(f"cannot convert {type(data).__name__} to Arrow: {e}") from e


def _to_batches(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch], bool]:
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches()), False
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data]), False
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data), True
    mod = type(data).__module__
    if mod.startswith("pandas"):
        t = pa.Table.from_pandas(data, preserve_index=False)
        return t.schema, iter(t.to_batches()), False
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, iter(reader), True
    if hasattr(data, "__arrow_c_array__"):
        batch = pa.record_batch(data)
        return batch.schema, iter([batch]), False
    if isinstance(data, dict):
        t = pa.table(data)
        return t.schema, iter(t.to_batches()), False
    raise InvalidInput(
        f"cannot write {type(data).__name__}: pass a pyarrow Table/RecordBatch/RecordBatchReader, a pandas "
        "DataFrame or an object with __arrow_c_stream__"
    )


def input_chunks(data: Any, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pa.Table]:
    """The input as tables to prepare one after another (always at least one, maybe empty).

    Streams are cut every ``chunk_bytes`` of Arrow data, so a streamed write holds a bounded amount;
    inputs already in memory are cut every CHUNK_ROWS rows. Each chunk becomes one sorted file per split.
    """
    schema, batches, streaming = converted_input(data)
    return chunked(schema, batches, CHUNK_ROWS, chunk_bytes if streaming else None)


def chunked(
    schema: pa.Schema, batches: Iterator[pa.RecordBatch], rows: int = CHUNK_ROWS, max_bytes: int | None = None
) -> Iterator[pa.Table]:
    """Group a batch stream into tables of about ``rows`` rows or ``max_bytes`` (always one, maybe empty)."""
    pending: list[pa.RecordBatch] = []
    count = size = 0
    emitted = False
    for b in batches:
        pending.append(b)
        count += b.num_rows
        size += b.nbytes
        if count >= rows or (max_bytes is not None and size >= max_bytes):
            out = _gathered(pending, schema, max_bytes is not None)
            pending, count, size = [], 0, 0
            emitted = True
            yield out
    if pending or not emitted:
        yield _gathered(pending, schema, max_bytes is not None)


def _gathered(batches: list[pa.RecordBatch], schema: pa.Schema, contiguous: bool) -> pa.Table:
    """Streamed batches are copied into contiguous columns here, where the batches can be freed at once
    (the writer needs contiguous columns anyway): a streamed chunk is never held twice."""
    table = pa.Table.from_batches(batches, schema=schema)
    if contiguous:
        table = table.combine_chunks()
        batches.clear()
    return table


_CDC_UPSERT = (
    "I",
    "+I",
    "INSERT",
    "C",
    "CREATE",
    "R",
    "READ",
    "SNAPSHOT",
    "U",
    "+U",
    "UPDATE",
    "UPDATE_AFTER",
    "UPSERT",
)
_CDC_DELETE = ("D", "-D", "DELETE")
_CDC_IGNORE = ("-U", "UPDATE_BEFORE")


def _check_precision(values: pa.Array | pa.ChunkedArray, f: pa.Field, identifier: str) -> None:
    """Refuse decimals with more digits than their type's precision: Arrow builds such arrays (from
    buffers, or DuckDB's HUGEINT beyond 38 digits) without a check, and other readers reject them."""
    try:
        for chunk in values.chunks if isinstance(values, pa.ChunkedArray) else [values]:
            chunk.validate(full=True)
    except pa.ArrowInvalid as e:
        raise SchemaMismatch(
            f"{identifier}: column {f.name!r} holds values outside {f.type}: {str(e).splitlines()[0]}"
        ) from None


def decode_cdc(values: pa.ChunkedArray | pa.Array, column: str) -> np.ndarray:
    """Map a change column to operations: MERGE, DELETE, or -1 for rows to ignore (update-before images)."""
    values = decoded(values)  # dictionaries (Polars' Categorical), run-end and view encodings
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = pc.cast(values, pa.string())
    upper = pc.utf8_upper(pc.utf8_trim_whitespace(values))
    vocabulary = pa.array(_CDC_UPSERT + _CDC_DELETE + _CDC_IGNORE)
    idx = pc.index_in(upper, value_set=vocabulary).to_numpy(zero_copy_only=False)
    bad = np.isnan(idx) if idx.dtype.kind == "f" else np.zeros(len(idx), dtype=bool)
    if bad.any():
        samples = pc.unique(upper.filter(pa.array(bad))).to_pylist()[:5]
        raise InvalidInput(
            f"change column {column!r} holds unknown operations {samples}; use insert/update/delete "
            "(I/U/D, +I/+U/-U/-D, c/u/d/r)"
        )
    idx = idx.astype(np.int64)
    table = np.array(
        [OP_MERGE] * len(_CDC_UPSERT) + [OP_DELETE] * len(_CDC_DELETE) + [-1] * len(_CDC_IGNORE),
        dtype=np.int8,
    )
    return np.asarray(table[idx])


def _holds_text(t: pa.DataType) -> bool:
    """Whether values of ``t`` hold strings (at any depth)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return True
    return any(_holds_text(t.field(i).type) for i in range(t.num_fields))


def _check_utf8(values: pa.ChunkedArray, column: str, identifier: str) -> None:
    """Refuse strings that are not UTF-8 (Arrow checks them only on request; stored, they would fail every
    engine that reads them). About 2.5 GB/s: a small part of a write's cost."""
    try:
        values.validate(full=True)
    except pa.ArrowInvalid as e:
        raise InvalidInput(
            f"{identifier}: column {column!r} holds a value that is not valid text: {e}"
        ) from None


def refuse_repeated_names(table: pa.Table, identifier: str) -> None:
    """Input naming a column twice is refused: which of the two is meant cannot be told."""
    names = table.column_names
    if len(set(names)) != len(names):
        raise SchemaMismatch(f"{identifier}: input has duplicate column names {names}")


def conform(
    table: pa.Table, spec: TableSpec, *, partial_ok: bool, identifier: str
) -> tuple[pa.Table, np.ndarray | None]:
    """Check and cast input to the table schema. Returns the rows and, for CDC input, their operations."""
    refuse_repeated_names(table, identifier)
    names = table.column_names
    ops: np.ndarray | None = None
    if spec.cdc_column is not None and spec.cdc_column in names:
        if table.num_rows:
            col = table.column(spec.cdc_column)
            if col.null_count:
                raise InvalidInput(f"{identifier}: change column {spec.cdc_column!r} holds nulls")
            ops = decode_cdc(col, spec.cdc_column)
        else:
            ops = np.zeros(0, dtype=np.int8)
        table = table.drop_columns([spec.cdc_column])
        names = table.column_names
    unknown = [c for c in names if c not in spec.schema.names]
    if unknown:
        raise SchemaMismatch(f"{identifier}: unknown column(s) {unknown}; the table has {spec.schema.names}")
    missing = [c for c in spec.identity_columns if c not in names]
    if missing:
        raise SchemaMismatch(f"{identifier}: input lacks key/partition column(s) {missing}")
    if spec.delete_refusal and ops is not None and bool((ops == OP_DELETE).any()):
        raise InvalidInput(delete_refusal(spec, identifier, "change rows that delete"))
    if spec.sequence_by:
        _check_sequenced_input(table, spec, ops, identifier, partial_ok)
    elif spec.merge_engine == "first_row" and partial_ok:
        lacking = [c for c in spec.schema.names if c not in names]
        if lacking:
            raise SchemaMismatch(
                f"{identifier}: input lacks column(s) {lacking}; a 'first_row' table keeps each key's first "
                "whole version, so every row carries every column"
            )
    arrays = []
    fields = []
    for f in spec.schema:
        if f.name in names:
            # Change rows that delete a key carry no values to check inside nested columns.
            rows = None if ops is None or not strict_nested(f.type) else bool_array(ops == OP_MERGE)
            col = lossless_cast(table.column(f.name), f.type, f.name, identifier, rows)
            if _holds_text(f.type):
                _check_utf8(col, f.name, identifier)
            if pa.types.is_decimal(f.type):
                _check_precision(col, f, identifier)
            if holds_bounded(f.type):
                check_storable(col, f, identifier)
            if not f.nullable and col.null_count:
                if f.name in spec.primary_key:
                    raise NullKey(
                        f"{identifier}: primary-key column {f.name!r} holds {col.null_count} null(s)"
                    )
                nulls = col.is_null().to_numpy(zero_copy_only=False)
                if ops is not None:
                    nulls &= ops == OP_MERGE  # change rows that delete a key (or are ignored) carry no values
                group = spec.grouped.get(f.name)
                if partial_ok and group not in (None, f.name) and group in names:
                    # A row whose group sequence is NULL does not carry the group: its NULLs are no values
                    # (the write checks then treat the row as one lacking the column).
                    nulls &= table.column(group).is_valid().to_numpy(zero_copy_only=False)
                if nulls.any():
                    raise SchemaMismatch(f"{identifier}: non-nullable column {f.name!r} holds nulls")
            arrays.append(col)
        elif not partial_ok:
            if not f.nullable:
                raise SchemaMismatch(f"{identifier}: input lacks non-nullable column {f.name!r}")
            arrays.append(nested_not_null(pa.nulls(table.num_rows, f.type), f.type, f.name, identifier))
        else:
            continue
        # Rows of deleted keys carry nulls in every other column: only key columns stay NOT NULL in files.
        fields.append(f if f.name in spec.identity_columns else f.with_nullable(True))
    out = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    for c in spec.sequence_by:
        nulls = out.column(c).null_count
        if nulls and (
            ops is None or (out.column(c).is_null().to_numpy(zero_copy_only=False) & (ops >= 0)).any()
        ):
            raise InvalidInput(
                f"{identifier}: sequence column {c!r} holds {nulls} NULL(s); every row of a table with "
                f"sequence_by {list(spec.sequence_by)} needs its sequence (deletes too): a version without "
                "one could not be ordered against the others"
            )
    if ops is not None and (ops < 0).any():
        keep = ops >= 0
        out = out.filter(bool_array(keep))
        ops = ops[keep]
    return out, ops


def delete_refusal(spec: TableSpec, identifier: str, what: str) -> str:
    """Why a table refuses deletes (``what``: the kind of write): see :attr:`TableSpec.delete_refusal`."""
    return f"{identifier}: {what} cannot apply to this table: {spec.delete_refusal}; nothing was written"


def _check_sequenced_input(
    table: pa.Table, spec: TableSpec, ops: np.ndarray | None, identifier: str, partial_ok: bool
) -> None:
    """Rows written to a table with ``sequence_by`` carry their sequence, and upserted rows that are not
    deletes carry every column outside sequence groups and every column of each group they carry: a
    key's versions are ordered as whole rows, or group by group (writes that are not partial fill a
    missing nullable column with NULL, a whole row)."""
    names = table.column_names
    lacking = [c for c in spec.sequence_by if c not in names]
    if lacking:
        raise SchemaMismatch(
            f"{identifier}: input lacks sequence column(s) {lacking}; the table orders a key's versions "
            f"by sequence_by {list(spec.sequence_by)}"
        )
    partial = [c for c in spec.schema.names if c not in names]
    if not (partial_ok and partial and (ops is None or bool((ops == OP_MERGE).any()))):
        return
    grouped = spec.grouped
    outside = [c for c in partial if c not in grouped]
    if outside:
        groups = (
            f" (only whole sequence groups {dict(spec.sequence_groups)} may be left out)" if grouped else ""
        )
        raise SchemaMismatch(
            f"{identifier}: input lacks column(s) {outside}; a table with sequence_by "
            f"{list(spec.sequence_by)} takes whole rows{groups} (rows that only delete may carry the key, "
            "partition and sequence columns alone): a late partial row could not tell which of its columns "
            "are newer"
        )
    for seq, members in spec.sequence_groups.items():
        carried = [c for c in (seq, *members) if c in names]
        if carried and len(carried) != len(members) + 1:
            raise SchemaMismatch(
                f"{identifier}: input carries {carried} of sequence group {seq!r} but lacks "
                f"{[c for c in (seq, *members) if c not in names]}; a partial row leaves out whole groups "
                "(the group's sequence column orders all of its columns together)"
            )


@dataclass
class PreparedFile:
    """A slice of rows destined for one file."""

    partition: dict[str, str | None]
    bucket: int
    rows: pa.Table
    content: str
    # Rows of the batch that a row of the same key with a higher sequence replaced (tables with
    # ``sequence_by``; always 0 for others).
    stale: int = 0
    # Per row of ``rows``, how many other rows of the batch it stands for: rows of its key at its equal
    # sequence it won over (they are stale with it when a stored version has a higher sequence).
    ties: np.ndarray | None = None


def _group_order(code: np.ndarray, groups: int) -> np.ndarray:
    """Stable permutation that groups rows by a small non-negative code (radix sort for 16-bit codes)."""
    if groups <= np.iinfo(np.int16).max:
        return np.argsort(code.astype(np.int16), kind="stable")
    return np.argsort(code, kind="stable")


def prepare(
    spec: TableSpec, table: pa.Table, ops: np.ndarray | None, identifier: str = "", *, moves: bool = True
) -> list[PreparedFile]:
    """Bucket, sort and de-duplicate rows, then cut them into one slice per (partition, bucket).

    On a table with table-wide keys a key given in several partitions keeps one partition's rows
    (:func:`one_partition_per_key`), unless ``moves`` is False (markers of one key in several partitions).

    Rows are grouped by (partition, bucket) first; each group is then sorted by key and reduced on its
    own, in parallel threads (NumPy and Arrow kernels release the GIL).
    """
    n = table.num_rows
    if n == 0:
        return []
    pcode, pvalues = partition_value_strings(spec, table)
    if not spec.has_primary_key:
        order = _group_order(pcode, len(pvalues))
        if not (order[1:] > order[:-1]).all():
            table = table.take(pa.array(order))
            pcode = pcode[order]
        bounds = np.flatnonzero(np.diff(pcode)) + 1
        return [
            PreparedFile(pvalues[int(pcode[lo])], 0, table.slice(int(lo), int(hi - lo)), "data")
            for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n])
        ]
    table = table.combine_chunks()
    moved_stale = 0
    carried: np.ndarray | None = None  # per row, rows of other partitions it won over at an equal sequence
    if moves and spec.cross_partition and n > 1:
        keep, moved_stale, carried = one_partition_per_key(spec, table, pcode)
        carried = carried if spec.all_last else None  # (other engines fold ties instead of dropping them)
        if keep is not None:
            table, pcode = table.filter(pa.array(keep)), pcode[keep]
            ops = None if ops is None else ops[keep]
            carried = None if carried is None else carried[keep]
            n = table.num_rows
    buckets = bucket_ids([table.column(c) for c in spec.primary_key], spec.buckets).astype(np.int64)
    code = pcode * spec.buckets + buckets
    order = _group_order(code, len(pvalues) * spec.buckets)
    sorted_code = code[order]
    cut = np.flatnonzero(np.diff(sorted_code)) + 1
    op_all = np.full(n, OP_MERGE, dtype=np.int8) if ops is None else ops.astype(np.int8)
    key_np = None
    if len(spec.primary_key) == 1:
        key_np = numpy_sortable_array(_contiguous_column(table, spec.primary_key[0]))
    # Sequence columns (no NULLs: conform refused them) as NumPy values where they sort so.
    sequence: list[np.ndarray | pa.Array] = []
    for c in spec.sequence_by:
        whole = _contiguous_column(table, c)
        as_np = numpy_sortable_array(whole)
        sequence.append(whole if as_np is None else as_np)

    def one_group(lo: int, hi: int) -> list[PreparedFile]:
        idx = order[lo:hi]
        if key_np is not None:
            idx = idx[stable_argsort(key_np[idx])]  # duplicates keep input order among them
            rows = source.take(pa.array(idx))
        else:
            rows = source.take(pa.array(idx))
            sub = sort_indices([rows.column(c) for c in spec.primary_key])
            rows = rows.take(pa.array(sub))
            idx = idx[sub]
        op = op_all[idx]
        starts = group_starts(
            [key_np[idx]] if key_np is not None else [rows.column(c) for c in spec.primary_key], len(idx)
        )
        stale = 0
        ties = None if carried is None else carried[idx]  # (rows as they are: no key twice in the group)
        if not starts.all() and sequence and not spec.all_last:
            # Sequenced versions that fold by operator, engine or group: ordered by (sequence, input
            # order) within each key, folded, and each key's last reset kept as a delete marker at its
            # sequence (it still hides late versions of lower sequence).
            sub = sort_indices(
                [*(rows.column(c) for c in spec.primary_key), *(rows.column(c) for c in spec.sequence_by)]
            )
            rows, op = rows.take(pa.array(sub)), op[sub]
            options = spec.reduce_options
            options["groups"] = {g: cs for g, cs in spec.sequence_groups.items() if g in rows.column_names}
            reset_at, tombs, merged, dead = fold_sequenced(
                rows, op, starts, spec.identity_columns, spec.operators, None, **options, arrival=idx[sub]
            )
            stale = _stale(spec, starts, op, dead)
            c = int(sorted_code[lo])
            out = []
            if len(reset_at):
                markers = tombs.select([m for m in tombstone_columns(spec) if m in tombs.column_names])
                markers = markers.append_column(
                    pa.field(OP_COLUMN, pa.int8(), nullable=False),
                    pa.array(np.full(len(tombs), OP_DELETE, np.int8)),
                )
                out.append(
                    PreparedFile(pvalues[c // spec.buckets], c % spec.buckets, markers, "delete", stale)
                )
                stale = 0
            if merged.num_rows:
                merged = merged.append_column(
                    pa.field(OP_COLUMN, pa.int8(), nullable=False),
                    pa.array(np.full(merged.num_rows, OP_MERGE, np.int8)),
                )
                out.append(PreparedFile(pvalues[c // spec.buckets], c % spec.buckets, merged, "data", stale))
            return out
        if not starts.all() and sequence:
            # Duplicate keys in one batch of a sequenced table: each key's version with the highest
            # sequence (the last of them in input order on ties). Its rows are whole and every operator
            # is ``last``, so that version alone is the key's outcome (a delete keeps its sequence).
            picked = pa.array(idx)
            at = [s[idx] if isinstance(s, np.ndarray) else s.take(picked) for s in sequence]
            winners = last_by_sequence(starts, at)
            replaced = superseded(starts, winners, at)
            stale = int(np.count_nonzero(replaced))
            ties = _tied(starts, replaced, None if carried is None else carried[idx])
            rows, op = rows.take(pa.array(winners)), op[winners]
        elif not starts.all():
            # Duplicate keys in one batch: apply them in input order, like separate commits would.
            if spec.merge_engine == "first_row":
                stale = _stale(spec, starts, op, np.zeros(len(op), dtype=bool))
            try:
                rows, op = reduce_versions(
                    rows, op, starts, spec.identity_columns, spec.operators, None, **spec.reduce_options
                )
            except SumOverflow as e:
                raise SumOverflow(f"{identifier}: {e} within this batch; the write was not applied") from None
        rows = rows.append_column(pa.field(OP_COLUMN, pa.int8(), nullable=False), pa.array(op, pa.int8()))
        content = "delete" if bool((op == OP_DELETE).all()) else "data"
        if content == "delete":
            rows = rows.select([*marker_columns(spec), OP_COLUMN])
        c = int(sorted_code[lo])
        return [PreparedFile(pvalues[c // spec.buckets], c % spec.buckets, rows, content, stale, ties)]

    if spec.delete_refusal and bool((op_all == OP_DELETE).any()):
        raise InvalidInput(delete_refusal(spec, identifier or "table", "deletes"))
    if spec.sequence_groups and bool((op_all == OP_DELETE).any()):
        # A delete row carries no group (a compaction's tombstone may: what its deleted key still holds).
        deleting = bool_array(op_all == OP_DELETE)
        for g in spec.sequence_groups:
            if g in table.column_names:
                i = table.schema.get_field_index(g)
                column = table.column(i)
                table = table.set_column(
                    i, table.field(i), pc.if_else(deleting, pa.nulls(n, column.type), column)
                )
    source = _dictionary_strings(table, spec)
    ranges = [(int(lo), int(hi)) for lo, hi in zip(np.r_[0, cut], np.r_[cut, n])]
    if len(ranges) == 1:
        out = one_group(*ranges[0])
    else:
        groups = shared_pool("prepare", cpu_workers()).map(lambda r: one_group(*r), ranges)
        out = [p for files in groups for p in files]
    if out:
        out[0].stale += moved_stale
    return out


def _tied(starts: np.ndarray, replaced: np.ndarray, carried: np.ndarray | None) -> np.ndarray | None:
    """Per key (its winner's row), how many other rows of the batch its winner stands for: the key's rows
    a higher sequence did not replace (the winner's ties) and what each of them stood for already
    (``carried``). None where no winner stands for another row."""
    kept = ~replaced
    if int(np.count_nonzero(kept)) == int(np.count_nonzero(starts)) and (
        carried is None or not carried[kept].any()
    ):
        return None  # each key kept its winner alone (the common case: no tie)
    weight = kept.astype(np.int64)
    if carried is not None:
        weight += np.where(replaced, 0, carried)
    first = np.flatnonzero(starts)
    ties = np.add.reduceat(weight, first) - 1
    return ties if ties.any() else None


def _tie_pairs(ties: np.ndarray) -> bytes:
    """:attr:`FileEntry.ties` of a file from its rows' counts."""
    rows = np.flatnonzero(ties)
    return np.column_stack([rows, ties[rows]]).astype("<i8").tobytes()


def _stale(spec: TableSpec, starts: np.ndarray, op: np.ndarray, dead: np.ndarray) -> int:
    """Rows of a batch its fold ignores: versions below their key's last reset, and (``first_row``)
    every live version after its key's first."""
    stale = int(np.count_nonzero(dead))
    if spec.merge_engine == "first_row":
        live = ~dead & (op != OP_DELETE)
        group = np.cumsum(starts) - 1
        stale += int(np.count_nonzero(live)) - len(np.unique(group[live]))
    return stale


def one_partition_per_key(
    spec: TableSpec, table: pa.Table, pcode: np.ndarray
) -> tuple[np.ndarray | None, int, np.ndarray | None]:
    """Table-wide keys: a key given in several partitions in one batch keeps the rows of the partition of
    its winning row (highest sequence, the last of them on ties; without ``sequence_by`` the last row),
    and, without a sequence, only those after its last row in another partition (the rows before were
    moved away by it). Returns the rows to keep (None: all), how many dropped rows a higher sequence
    replaced (stale), and per row how many dropped rows at its equal sequence it won over (None: none;
    with ``sequence_by`` only)."""
    n = table.num_rows
    keys = [_contiguous_column(table, c) for c in spec.primary_key]
    order = sort_indices(keys)
    starts = group_starts([k.take(pa.array(order)) for k in keys], n)
    if starts.all():
        return None, 0, None
    part = pcode[order]
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    if spec.sequence_by:
        seq = [_contiguous_column(table, c).take(pa.array(order)) for c in spec.sequence_by]
        winners = last_by_sequence(starts, seq)
        kept = part == part[winners][group]
        replaced = superseded(starts, winners, seq)
        stale = int(np.count_nonzero(replaced & ~kept))
        # the winner stands for the rows it beat at its own sequence in other partitions (dropped here)
        tied = ~replaced & ~kept
        carried = None
        if tied.any():
            carried = np.zeros(n, dtype=np.int64)
            carried[order[winners]] = np.bincount(group[tied], minlength=len(first))
    else:
        ends = np.r_[first[1:] - 1, n - 1]
        elsewhere = np.where(part != part[ends][group], np.arange(n), -1)
        last_elsewhere = np.maximum.reduceat(elsewhere, first)
        kept = np.arange(n) > last_elsewhere[group]
        stale = 0
        carried = None
    if kept.all():
        return None, stale, None
    keep = np.zeros(n, dtype=bool)
    keep[order[kept]] = True
    return keep, stale, carried


def partition_changed(before: pa.Table, after: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Per row, whether ``after`` holds other values than ``before`` in ``columns`` (NULL equals NULL):
    an update that moved the row to another partition."""
    changed = np.zeros(before.num_rows, dtype=bool)
    for c in columns:
        old, new = before.column(c), after.column(c).cast(before.schema.field(c).type)
        same = pc.or_(pc.fill_null(pc.equal(old, new), False), pc.and_(pc.is_null(old), pc.is_null(new)))
        changed |= ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    return changed


def sequence_lower(spec: TableSpec, before: pa.Table, after: pa.Table) -> np.ndarray:
    """Per row, whether ``after``'s sequence (``sequence_by``, compared column by column) is below
    ``before``'s: an update of the row that loses to the version it read."""
    lower = np.zeros(before.num_rows, dtype=bool)
    for c in reversed(spec.sequence_by):
        old, new = before.column(c), after.column(c).cast(before.schema.field(c).type)
        less = np.asarray(pc.fill_null(pc.less(new, old), False).to_numpy(zero_copy_only=False), dtype=bool)
        same = np.asarray(pc.fill_null(pc.equal(new, old), False).to_numpy(zero_copy_only=False), dtype=bool)
        lower = less | (same & lower)
    return lower


def marker_columns(spec: TableSpec) -> list[str]:
    """The columns a delete marker stores: the key and partition columns, and the sequence columns of a
    table with ``sequence_by`` (a delete is ordered against other versions by its sequence)."""
    return [*spec.identity_columns, *spec.sequence_by]


def tombstone_columns(spec: TableSpec) -> list[str]:
    """The columns a fold's tombstone stores: a delete marker's, and the columns of sequence groups (what
    a deleted key still holds above its delete)."""
    grouped = spec.grouped
    return [*marker_columns(spec), *(c for c in spec.schema.names if c in grouped)]


def sequence_after(rows: pa.Table, spec: TableSpec) -> pa.Table:
    """``rows`` with each sequence moved to the next one above it: the last ``sequence_by`` column takes
    its type's next value (+1 for integers, one unit for timestamps and decimals, a day for dates, a NUL
    character appended to strings; a value at its type's maximum stays). A delete that read the version it
    deletes carries that: it wins over the version and every replay of it, and loses to any newer event."""
    if not spec.sequence_by or rows.num_rows == 0:
        return rows
    name = spec.sequence_by[-1]
    index = rows.schema.get_field_index(name)
    column = rows.column(index).combine_chunks()
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        after = pc.binary_join_element_wise(column, pa.scalar("", kind), pa.scalar("\x00", kind))
    elif pa.types.is_decimal(kind):
        step = decimal.Decimal(1).scaleb(-kind.scale)
        top = decimal.Decimal(10) ** (kind.precision - kind.scale) - step
        added = pc.add(column, pa.scalar(step, kind))
        at_top = pc.equal(column, pa.scalar(top, kind))
        after = pc.if_else(at_top, column.cast(added.type), added).cast(kind)
    else:
        width = pa.int32() if pa.types.is_date32(kind) else pa.int64()
        if pa.types.is_integer(kind):
            width = kind
        values = np.asarray(column.view(width).to_numpy(zero_copy_only=False))
        unit = 86_400_000 if pa.types.is_date64(kind) else 1
        highest = np.iinfo(values.dtype).max - unit + 1
        with np.errstate(over="ignore"):
            moved = np.where(values >= highest, values, values + unit)
        after = pa.array(moved, width).view(kind) if width != kind else pa.array(moved, kind)
    return rows.set_column(index, rows.schema.field(index), after)


def marker_spec(spec: TableSpec) -> TableSpec:
    """The layout of delete markers' rows (:func:`marker_columns`), to :func:`conform` them with."""
    stored = marker_columns(spec)
    fields = [spec.schema.field(c) for c in spec.schema.names if c in stored]
    return TableSpec(
        pa.schema(fields),
        spec.primary_key,
        spec.partition_by,
        spec.buckets,
        {},
        None,
        {},
        sequence_by=spec.sequence_by,
    )


def _dictionary_strings(table: pa.Table, spec: TableSpec) -> pa.Table:
    """Dictionary-encode repetitive string columns: gathering indices is ~50x cheaper than gathering
    strings, and Parquet writes dictionary pages straight from them. Files are written without the
    Arrow schema, so readers still see plain strings."""
    if table.num_rows < 4096:
        return table
    out = table
    sample = min(table.num_rows, 8192)
    for i, f in enumerate(table.schema):
        if f.name in spec.primary_key or not (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)):
            continue
        col = table.column(i)
        if distinct_count(col.slice(0, sample)) * 8 > sample:
            continue  # too many distinct values to gain from a dictionary
        out = out.set_column(
            i, pa.field(f.name, pa.dictionary(pa.int32(), f.type), f.nullable), pc.dictionary_encode(col)
        )
    return out


class _SharedLayouts:
    """One layout (:func:`mere.io.parquet.choose_layout`) per group of alike files of a write: the same
    partition, content and columns. A partition's buckets split its rows by a hash of the key, so they
    hold rows of one distribution; the group's biggest file chooses, once, when the first of them is
    written, for the group's rows (many small bucket files of a big write get a chosen layout too)."""

    def __init__(
        self, prepared: Sequence[PreparedFile], sorting: Sequence[str], compression: str, level: int | None
    ) -> None:
        self._prepared, self._args = prepared, (sorting, compression, level)
        ids: dict[Any, int] = {}
        if len(prepared) > 1:  # (a lone file chooses its own: no key, whose types hash slowly, is made)
            keys = (
                (
                    partition_json(p.partition),
                    p.content,
                    tuple(p.rows.schema.names),
                    tuple(p.rows.schema.types),
                )
                for p in prepared
            )
            self._group = [ids.setdefault(key, len(ids)) for key in keys]
        else:
            self._group = [0] * len(prepared)
        groups = max(len(ids), 1)
        self._chooser = [-1] * groups  # per group: its biggest file
        self._rows = [0] * groups  # per group: its rows
        files = [0] * groups
        for i, g in enumerate(self._group):
            j = self._chooser[g]
            if j < 0 or prepared[i].rows.num_rows > prepared[j].rows.num_rows:
                self._chooser[g] = i
            self._rows[g] += prepared[i].rows.num_rows
            files[g] += 1
        # one lock per group shared by several files: a group's files wait only for its own choice
        self._locks = {g: threading.Lock() for g, count in enumerate(files) if count > 1}
        self._chosen: dict[int, Layout] = {}

    def of(self, i: int) -> Layout | None:
        """The layout of file ``i`` (None: a file alike to no other chooses its own)."""
        g = self._group[i]
        lock = self._locks.get(g)
        if lock is None:
            return None
        with lock:  # (the group's other files wait for the one choosing: a few milliseconds)
            if g not in self._chosen:
                rows = self._prepared[self._chooser[g]].rows
                self._chosen[g] = choose_layout(rows, *self._args, serves=self._rows[g])
            return self._chosen[g]


def _rows_per_group(table: pa.Table, target_bytes: int) -> int:
    if table.num_rows == 0:
        return 1024
    per_row = max(1, table.nbytes // table.num_rows)
    return int(min(1 << 17, max(1024, target_bytes // per_row)))


def _contiguous_column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _nested_checked(rows: pa.Table, spec: TableSpec, identifier: str) -> pa.Table:
    """The last check of every write path (rows an UPDATE or MERGE computed included): NOT NULL fields
    inside columns hold no NULL in rows that are not deletes (typed refusal), and the Parquet writer meets
    no NULL under a NULL parent."""
    strict = [i for i, f in enumerate(rows.schema) if f.name != OP_COLUMN and strict_nested(f.type)]
    if not strict:
        return rows
    mask = None
    if OP_COLUMN in rows.column_names:
        mask = pc.not_equal(rows.column(OP_COLUMN), pa.scalar(OP_DELETE, pa.int8()))
    for i in strict:
        f = rows.schema.field(i)
        rows = rows.set_column(i, f, nested_not_null(rows.column(i), f.type, f.name, identifier, mask))
    return rows


def write_prepared(
    storage: Storage,
    location: str,
    spec: TableSpec,
    prepared: Sequence[PreparedFile],
    *,
    first_order: int = 0,
    row_group_rows: int | None = None,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    max_workers: int = 8,
    compression: str = DEFAULT_COMPRESSION,
    compression_level: int | None = None,
    write_id: str | None = None,
) -> list[FileEntry]:
    """Write the slices concurrently. On any failure the files already written are deleted.

    ``write_id``: the files' names carry it (see :func:`mere.io.storage.Storage.unique_name`)."""
    if not prepared:
        return []
    sorting = list(spec.primary_key)
    key_index = spec.properties.get("write.key-index", "on").lower() == "on"
    layouts = _SharedLayouts(prepared, sorting, compression, compression_level)

    def write_one(i: int, p: PreparedFile) -> FileEntry:
        ppath = partition_path(spec, p.partition)
        prefix = {"delete": "del", "log": "log"}.get(p.content, "part")
        bucket_dir = f"bucket-{p.bucket:05d}" if spec.has_primary_key else ""
        rel = "/".join(x for x in (location, ppath, bucket_dir, Storage.unique_name(prefix, write_id)) if x)
        rows = row_group_rows or _rows_per_group(p.rows, row_group_bytes)
        written = write_parquet(
            storage,
            rel,
            with_field_ids(_nested_checked(p.rows, spec, storage.table or "table"), spec),
            row_group_rows=rows,
            sorting_columns=sorting,
            compression=compression,
            compression_level=compression_level,
            key_index=key_index,
            layout=layouts.of(i),
        )
        stored = [c for c in p.rows.column_names if c in spec.schema.names]  # not _mere_op and the like
        columns = None if len(stored) == len(spec.schema) else stored
        return FileEntry(
            path=written.path,
            partition=partition_json(p.partition),
            bucket=p.bucket,
            row_count=written.row_count,
            size_bytes=written.size_bytes,
            content=p.content,
            columns=columns,
            order=first_order + i,
            ties=b"" if p.ties is None else _tie_pairs(p.ties),
        )

    pool = shared_pool("write", max_workers)
    # Every write ends before a failure is raised, an interrupt included (while the writes are handed to
    # the pool or waited for): none is left behind. The futures exist before any write is handed over, so
    # an interrupt between two hand-offs cannot lose one.
    futures: list[Future[FileEntry]] = [Future() for _ in prepared]

    def run(i: int, p: PreparedFile, future: Future[FileEntry]) -> None:
        if future.set_running_or_notify_cancel():  # else cancelled after an interrupt: never written
            try:
                future.set_result(write_one(i, p))
            except BaseException as e:
                future.set_exception(e)

    try:
        for i, p in enumerate(prepared):
            pool.submit(run, i, p, futures[i])
    except BaseException:
        for future in futures:
            future.cancel()  # those not handed over (or not started) never run
        written, _ = wait_all(futures)
        storage.discard(r.path for r in written if r is not None)
        raise
    results, errors = wait_all(futures)
    if errors:
        storage.discard(r.path for r in results if r is not None)
        raise errors[0]
    return [r for r in results if r is not None]
