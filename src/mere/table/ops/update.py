"""UPDATE: set columns of the rows matching a filter to SQL expressions of the row, and the assignment
rules (SQL's implicit casts on store) that MERGE's UPDATE and INSERT clauses share.

Keyed tables write the changed rows as whole new rows (read at the commit's version: the change follows
:class:`~mere.table.conflicts.RowsUnchanged` and is evaluated again after a lost race); tables without a
key rewrite the files holding matching rows (copy on write).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mere.errors import FilterError, InvalidInput
from mere.lang.lower import Lowering, Typed, evaluate, schema_resolver
from mere.lang.parse import Parsed, parse_expression
from mere.metadata import FileEntry
from mere.read.planner import Split, split_filter
from mere.spec import OP_DELETE, OP_PUT, TableSpec, is_number, is_text
from mere.table.commit import Change, Commit
from mere.table.conflicts import RowsUnchanged
from mere.table.context import TableContext, split_label
from mere.table.ops.write import rewrite_files, stale_summary
from mere.table.revalidate import ReadRows
from mere.table.write_checks import WriteChecks
from mere.write.cast import incompatibility, relax_nested
from mere.write.writer import (
    conform,
    marker_columns,
    marker_spec,
    partition_changed,
    partition_json,
    prepare,
    sequence_lower,
)


def update(commit: Commit, values: Mapping[str, str], where: Any = None) -> None:
    """Set columns of matching rows to SQL expressions (see :meth:`mere.Table.update`)."""
    ctx = commit.ctx
    check_update(ctx, values)
    where = "TRUE" if where is None else where
    split_filter(ctx.spec, where)  # a bad filter fails now
    if ctx.spec.has_primary_key:
        commit.add_read(UpdateWhere(dict(values), where), "an update")
    else:
        commit.add_read(RewriteUpdate(dict(values), where), "an update")


@dataclass(frozen=True)
class UpdateWhere:
    """UPDATE of a keyed table: the rows matching ``where``, rewritten as whole rows."""

    values: Mapping[str, str]
    where: Any

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """The rows matching at ``base``, updated and written."""
        spec = ctx.spec
        scan = ctx.handle.scan(filter=self.where, version=base)
        read = {split_name(s) for s in scan.plan()}
        scope = scan.read_scope()
        rows = scan.to_arrow()
        read_keys = rows.select(list(spec.primary_key))
        values = _update_values(ctx, self.values)
        files: list[FileEntry] = []
        stale = 0
        if rows.num_rows:
            try:
                computed = evaluate(rows, values)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise arrow_failure(ctx.name, exc) from exc
            before = rows
            for name in values:
                rows = rows.set_column(rows.schema.get_field_index(name), name, computed.column(name))
            conformed, _ = conform(rows, spec, partial_ok=False, identifier=ctx.name)
            if spec.sequence_by:
                # A row set below the sequence of the version it read loses to that version (sequence_by
                # orders every write, as MERGE's): counted in stale_rows. Moved to another partition, it
                # is not written, and its old version stays (as in place).
                lower = sequence_lower(spec, before, conformed)
                stale = int(lower.sum())
                if spec.cross_partition and stale:
                    keep = pa.array(~(lower & _moved_mask(spec, before, conformed, values)))
                    before, conformed = before.filter(keep), conformed.filter(keep)
            ops = np.full(conformed.num_rows, OP_PUT, dtype=np.int8)
            files = ctx.files.write(prepare(spec, conformed, ops, identifier=ctx.name))
            moved = _moved(spec, before, conformed, values)
            if moved is not None:
                # Table-wide keys: a row whose partition changed leaves its old one. Its marker carries
                # the row's own sequence: it wins over the old version there as the later commit, and
                # loses to the moved row (a live version wins a tie across partitions).
                try:
                    marks, _ = conform(moved, marker_spec(spec), partial_ok=True, identifier=ctx.name)
                    files += ctx.files.write(
                        prepare(
                            spec, marks, np.full(marks.num_rows, OP_DELETE, np.int8), ctx.name, moves=False
                        ),
                        first_order=len(files),
                    )
                except BaseException:
                    ctx.files.discard(files)
                    raise
        change = Change(
            "update", files, rows.num_rows, {"updated_rows": rows.num_rows, **stale_summary(spec, stale)}
        )
        change.rule = RowsUnchanged(frozenset(read), False, "UPDATE", scope)
        change.read_rows = ReadRows(read_keys, self.where, scope)
        return change


def _moved_mask(spec: TableSpec, before: pa.Table, after: pa.Table, values: Mapping[str, Any]) -> np.ndarray:
    """Per row, whether an UPDATE moved it to another partition."""
    columns = [c for c in spec.partition_by if c in values and c not in spec.primary_key]
    return partition_changed(before, after, columns)


def _moved(spec: TableSpec, before: pa.Table, after: pa.Table, values: Mapping[str, Any]) -> pa.Table | None:
    """Marker rows (old partition values) of the rows an UPDATE moved to another partition."""
    changed = _moved_mask(spec, before, after, values)
    if not changed.any():
        return None
    return before.filter(pa.array(changed)).select(marker_columns(spec))


@dataclass(frozen=True)
class RewriteUpdate:
    """UPDATE of a table without key: the files holding matching rows are rewritten (copy on write)."""

    values: Mapping[str, str]
    where: Any

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """The rewrite at ``base``."""
        values = _update_values(ctx, self.values)
        spec = ctx.spec

        def update(data: pa.Table, hit: pa.Array) -> pa.Table:
            try:
                computed = evaluate(data.filter(hit), values)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise arrow_failure(ctx.name, exc) from exc
            mask = np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
            positions = pa.array(np.where(mask, np.cumsum(mask) - 1, 0))  # file row -> its updated row
            for name in values:
                new = computed.column(name).combine_chunks().take(positions)
                merged = pc.if_else(hit, new, data.column(name).combine_chunks())
                data = data.set_column(data.schema.get_field_index(name), name, merged)
            return conform(data, spec, partial_ok=False, identifier=ctx.name)[0]

        return rewrite_files(ctx, self.where, base, update, "update", "updated_rows")


def expression(text: Any, what: str) -> Parsed:
    """SQL text of an expression, parsed (``what`` names it in errors)."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be SQL text (a str), got {type(text).__name__}: {text!r}")
    return parse_expression(text, what)


def assignments(values: Any, what: str) -> tuple[tuple[str, Parsed], ...]:
    """``column -> SQL text`` pairs, parsed (``what`` names the clause in errors)."""
    if not isinstance(values, Mapping) or not values:
        raise InvalidInput(f"{what} takes a non-empty dict of column -> SQL expression text, got {values!r}")
    out = []
    for column, text in values.items():
        if not isinstance(column, str) or not column:
            raise InvalidInput(f"{what}: column names must be non-empty strings, got {column!r}")
        if isinstance(text, str):
            out.append((column, expression(text, f"{what} value for {column!r}")))
        else:
            raise InvalidInput(
                f'{what}: the value for {column!r} must be SQL text such as "s.{column}" or "\'text\'", '
                f"got {type(text).__name__} {text!r}"
            )
    return tuple(out)


def assign(value: Typed, to: pa.DataType, column: str, text: str) -> pc.Expression:
    """A value stored into a column of type ``to``: SQL's assignment cast (floats round to integers).

    Fields inside nested columns are cast as nullable: writing the rows refuses a NULL in a NOT NULL one
    by its path (Arrow's cast would fail on a NULL struct's children, or pass a NULL list element)."""
    to = relax_nested(to)
    if value.type == to:
        return value.expr
    if not (value.is_literal and isinstance(value.value, str)) and not _assignable(value.type, to):
        raise FilterError(f"cannot store {text!r} ({value.type}) in column {column!r} ({to})")
    lowering = Lowering(lambda node: ("", pa.null()), text)
    if pa.types.is_integer(to):
        value = lowering.to_integer(value, to)  # as DuckDB: DOUBLE halves to even, DECIMAL away from zero
    try:  # into a decimal, halves round away from zero (floats and decimals alike, as CAST rounds them)
        return lowering.cast(value, to).expr
    except FilterError as exc:
        raise FilterError(
            f"cannot store {text!r} ({value.type}) in column {column!r} ({to}): {exc}"
        ) from None


def _kind(t: pa.DataType) -> str:
    if is_number(t):
        return "number"
    if is_text(t):
        return "text"
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "datetime"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "bytes"  # of any layout: the same values
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return "list"  # lists of any layout hold the same values (an upsert stores each as the column's)
    return str(t.id)


def _assignable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether SQL stores values of ``source`` into a ``target`` column by an implicit cast."""
    if pa.types.is_null(source):
        return True
    kinds = (_kind(source), _kind(target))
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        # A naive time is not taken as UTC, nor a zoned one as its UTC wall clock: as upsert refuses them.
        return (source.tz is None) == (target.tz is None)
    if kinds[0] == kinds[1] and kinds[0] in ("number", "text", "datetime", "time", "bytes"):
        return True
    if kinds == ("text", "bytes") and pa.types.is_binary(target):
        return True
    return kinds[0] == kinds[1] and incompatibility(source, target) is None


def arrow_failure(name: str, exc: BaseException) -> InvalidInput:
    """An Arrow failure while evaluating a statement, as bad input."""
    return InvalidInput(f"{name}: evaluating the statement failed: {str(exc).splitlines()[0]}")


def split_name(split: Split) -> str:
    """How commit summaries name a planned split."""
    return split_label((partition_json(dict(split.partition)), split.bucket))


def _update_values(ctx: TableContext, values: Mapping[str, str]) -> dict[str, pc.Expression]:
    spec = ctx.spec
    items = assignments(values, "UPDATE SET")
    out: dict[str, pc.Expression] = {}
    for column, parsed in items:
        if column not in spec.schema.names:
            raise InvalidInput(
                f"{ctx.name}: UPDATE SET names unknown column {column!r}; columns: {spec.schema.names}"
            )
        movable = spec.cross_partition and column not in spec.primary_key  # table-wide keys move
        if spec.has_primary_key and column in spec.identity_columns and not movable:
            if isinstance(parsed.tree, exp.Column) and not parsed.tree.table and parsed.tree.name == column:
                continue  # SET k = k leaves the row's key as it is
            raise InvalidInput(
                f"{ctx.name}: UPDATE cannot set key or partition column {column!r} (delete the row and insert "
                "the new one instead)"
            )
        typed = Lowering(schema_resolver(spec.schema), parsed.text, parsed.lists).lower(parsed.tree)
        out[column] = assign(typed, spec.schema.field(column).type, column, parsed.text)
    return out


def check_update(ctx: TableContext, values: Mapping[str, str]) -> None:
    """Fail now on a bad SET (unknown column, key column, type) before anything is read."""
    _update_values(ctx, values)
