"""MERGE INTO, evaluated by mere on Arrow and written as merge-on-read deltas.

A MERGE reads only the target rows whose keys are in the source (every row when a ``WHEN NOT MATCHED BY
SOURCE`` clause is present), pairs them with the source rows on the primary key, runs the clauses in
order (the first whose condition holds acts on a row), and writes the outcome as new files: updated and
inserted rows as whole rows that replace the key's previous state (so merge operators do not fold them
into the old values), deleted keys as delete markers. Base files are never rewritten. The change reads
rows: it commits only if no concurrent commit changed the splits it read
(:class:`~mere.table.conflicts.RowsUnchanged`), and is evaluated again otherwise (the plan is its own
recipe). A distributed MERGE stages shares (:meth:`Merge.stage`) that :func:`commit_shares` commits.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import wait
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mere import expr as E
from mere.arrays import bool_array, first_row, is_nat, sorted_unique
from mere.concurrency import default_threads, shared_pool
from mere.errors import FilterError, InvalidInput, MergeConflict, NullKey, SchemaMismatch, names_its_table
from mere.expr.literals import format_ident
from mere.hashing import bucket_ids
from mere.kernels import KeySet, integer_keys, key_positions
from mere.lang.lower import Lowering, Typed, column_name, evaluate
from mere.lang.parse import Parsed, parse_expression
from mere.metadata import STALE_ROWS, CommitResult, FileEntry, now_micros
from mere.read import lookup
from mere.read.planner import Explain, ReadScope, Split
from mere.read.reader import SplitReader, io_pool
from mere.spec import OP_DELETE, OP_PUT
from mere.table.commit import (
    ONE_ATTEMPT,
    Change,
    Commit,
    StagedChange,
    check_idempotency_key,
    committed_with,
    deletion_summary,
    renumber,
)
from mere.table.conflicts import RowsUnchanged
from mere.table.context import TableContext, TableHandle
from mere.table.images import values_in
from mere.table.ops.update import arrow_failure, assign, expression, split_name
from mere.table.revalidate import ReadRows
from mere.table.stored_keys import resolve
from mere.table.write_checks import WriteChecks
from mere.write.cast import decoded_table, lossless_cast, relax_nested
from mere.write.writer import (
    conform,
    marker_columns,
    marker_spec,
    partition_changed,
    prepare,
    sequence_after,
    sequence_lower,
    to_batches,
)

MERGE_LOOKUP_KEYS = 256  # sources of up to this many keys are looked up, as scans pinning as many keys are

ClauseKind = Literal["matched", "not_matched", "not_matched_by_source"]
Action = Literal["update", "delete", "insert", "nothing"]
_TARGET, _SOURCE = "\x00t.", "\x00s."

StagedMerge = StagedChange  # the name integrations use for a MERGE share


def commit_shares(
    ctx: TableContext, staged: Sequence[StagedChange], idempotency_key: str | None = None
) -> tuple[CommitResult, MergeMetrics]:
    """Commit the staged shares of one MERGE as one version (the driver half of a distributed MERGE).

    Every share must have been evaluated at the same version; the commit fails with
    :class:`~mere.errors.CommitConflict` when a concurrent commit changed a split any share read: run the
    MERGE again (the caller deletes the files). With ``idempotency_key``, a commit that the key names
    already (checked before and inside the catalog transaction) is returned instead, with its metrics
    (:meth:`MergeMetrics.of_commit`), and the shares' files are deleted.
    """
    started = time.perf_counter()
    if isinstance(staged, StagedChange) or not all(
        isinstance(s, StagedChange) and s.operation == "merge" for s in staged
    ):
        raise InvalidInput(f"{ctx.name}: commit_merge() takes a list of StagedMerge")
    if any(s.table != ctx.name for s in staged):
        raise InvalidInput(f"{ctx.name}: staged MERGE shares belong to another table")
    versions = {s.read_version for s in staged}
    if len(versions) > 1:
        raise InvalidInput(
            f"{ctx.name}: staged MERGE shares read different versions {sorted(versions, key=lambda v: -1 if v is None else v)}"
        )
    files = renumber(f for s in staged for f in s.files)
    counts = {
        k: sum(s.counts.get(k, 0) for s in staged)
        for k in ("inserted", "updated", "deleted", "unchanged", "rows_read", "splits_read")
    }
    if any(STALE_ROWS in s.counts for s in staged):
        counts[STALE_ROWS] = sum(s.counts.get(STALE_ROWS, 0) for s in staged)
    read: set[str] = set()
    full = False
    scope: ReadScope | None = None
    for s in staged:
        if isinstance(s.rule, RowsUnchanged):
            read |= s.rule.splits
            full |= s.rule.full
            if s.rule.scope is None:
                full = True  # a share that did not say where it read (staged by an older version)
            else:
                scope = s.rule.scope if scope is None else scope.union(s.rule.scope)
    change = Change("merge", files, sum(f.row_count for f in files), _merge_summary(counts))
    change.rule = RowsUnchanged(frozenset(read), full, "MERGE", scope)
    version = versions.pop() if versions else None
    commit = Commit(ctx, retries=ONE_ATTEMPT, read_version=version, idempotency_key=idempotency_key)
    commit.files_from(staged)
    commit.add(change)
    result = commit.run()
    if result.already_committed:
        return result, MergeMetrics.of_commit(ctx.name, result, time.perf_counter() - started)
    return result, MergeMetrics(
        counts["inserted"],
        counts["updated"],
        counts["deleted"],
        counts["unchanged"],
        len(files),
        time.perf_counter() - started,
        None if result.no_change else result.version,
        counts["rows_read"],
        counts["splits_read"],
        stale_rows=counts.get(STALE_ROWS, 0),
    )


@dataclass(frozen=True)
class MergeMetrics:
    """What a MERGE (or UPDATE) did: rows inserted, updated, deleted and left unchanged, files written.

    ``already_committed`` is True when an idempotency key named a MERGE that had committed before: the
    metrics are then that commit's (its version and counts, from its summary; ``seconds`` is this call's)
    and nothing new was written.
    """

    inserted: int
    updated: int
    deleted: int
    unchanged: int
    files: int
    seconds: float
    version: int | None = None  # the committed version (None when nothing was written)
    rows_read: int = 0  # target rows read
    splits_read: int = 0
    already_committed: bool = False
    # Tables with sequence_by: rows the MERGE wrote (updated, inserted) that merge on read ignores, a stored
    # version of their key (a row or a delete) having a higher sequence.
    stale_rows: int = 0

    @staticmethod
    def of_commit(table: str, result: CommitResult, seconds: float = 0.0) -> MergeMetrics:
        """The metrics of the MERGE that committed ``result``, from its summary (what a replay returns).

        Args:
            table: the table's name, for the message.
            result: the commit (as :meth:`mere.Table.find_commit` returns it).
            seconds: the time to report.

        Returns:
            That MERGE's counts and version, ``already_committed`` as ``result`` says. Commits made before
            the summary kept them report 0 unchanged rows, rows read and splits read.

        Raises:
            InvalidInput: ``result`` is not a MERGE's commit (an idempotency key used for another write).
        """
        if result.operation != "merge":
            raise InvalidInput(
                f"{table}: the idempotency key names version {result.version}, a {result.operation!r} "
                "commit, not a MERGE; give each MERGE a key of its own"
            )
        s = result.summary

        def count(name: str) -> int:
            return int(s.get(name, 0) or 0)

        return MergeMetrics(
            count("inserted"),
            count("updated"),
            count("deleted"),
            count("unchanged"),
            count("added_files"),
            seconds,
            result.version,
            count("rows_read"),
            count("splits_read"),
            already_committed=result.already_committed,
            stale_rows=count(STALE_ROWS),
        )


MERGE_SUMMARY_COUNTS = ("inserted", "updated", "deleted", "unchanged", "rows_read", "splits_read")
"""The counts a MERGE's commit summary keeps (so that a replay by idempotency key reports them)."""


def _merge_summary(counts: Mapping[str, int]) -> dict[str, int]:
    """A MERGE's summary entries: its counts, and its deletes (a marker per target row it deleted)."""
    deleted = counts["deleted"]
    summary = {k: int(counts.get(k, 0)) for k in MERGE_SUMMARY_COUNTS}
    if STALE_ROWS in counts:  # tables with sequence_by (CommitResult.stale_rows reads it)
        summary[STALE_ROWS] = int(counts[STALE_ROWS])
    return {**summary, **deletion_summary(deleted, deleted)} if deleted else summary


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: which rows it sees, what it does, its condition and its assignments."""

    kind: ClauseKind
    action: Action
    condition: Parsed | None = None
    assignments: tuple[tuple[str, Parsed], ...] = ()
    all_columns: bool = False  # the source's columns by name: UPDATE BY NAME / INSERT BY NAME

    def describe(self) -> str:
        """The clause as SQL."""
        when = {
            "matched": "WHEN MATCHED",
            "not_matched": "WHEN NOT MATCHED",
            "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
        }[self.kind]
        cond = f" AND {self.condition.text}" if self.condition is not None else ""
        if self.action == "update":
            what = (
                "UPDATE BY NAME"
                if self.all_columns
                else "UPDATE SET " + ", ".join(f"{c} = {p.text}" for c, p in self.assignments)
            )
        elif self.action == "insert":
            what = (
                "INSERT BY NAME"
                if self.all_columns
                else "INSERT ("
                + ", ".join(c for c, _ in self.assignments)
                + ") VALUES ("
                + ", ".join(p.text for _, p in self.assignments)
                + ")"
            )
        else:
            what = "DELETE" if self.action == "delete" else "DO NOTHING"
        return f"{when}{cond} THEN {what}"

    def spec(self) -> MergeClause:
        """The clause as plain data: its SQL text instead of the parsed trees."""
        return MergeClause(
            self.kind,
            self.action,
            None if self.condition is None else self.condition.text,
            tuple((column, value.text) for column, value in self.assignments),
            self.all_columns,
        )


@dataclass(frozen=True)
class MergeExplain:
    """How a MERGE will run: which target splits it reads and why."""

    table: str
    on: str
    clauses: tuple[str, ...]
    source_rows: int
    full_scan: bool
    splits_read: int
    splits_total: int

    def __str__(self) -> str:
        reads = (
            f"reads every split in full ({self.splits_read} of {self.splits_total}): a WHEN NOT MATCHED BY "
            "SOURCE clause needs every target row"
            if self.full_scan
            else f"reads {self.splits_read} of {self.splits_total} splits: only those that can hold the "
            f"{self.source_rows} source keys, and in them only row groups whose key range holds one "
            "(only pages whose key range holds one, where the key index tells them and they are few)"
        )
        lines = [f"MERGE INTO {self.table} ON {self.on}", *("  " + c for c in self.clauses), reads]
        return "\n".join(lines)


_CLAUSE_ACTIONS: dict[ClauseKind, tuple[Action, ...]] = {
    "matched": ("update", "delete", "nothing"),
    "not_matched": ("insert", "nothing"),
    "not_matched_by_source": ("update", "delete"),
}


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be SQL text (a str), got {type(value).__name__}: {value!r}")
    return value


def _assignment_texts(values: Any, what: str) -> tuple[tuple[str, str], ...]:
    """``{column: SQL text}`` checked as :func:`_assignments` checks it, the text left unparsed."""
    if not isinstance(values, Mapping) or not values:
        raise InvalidInput(f"{what} takes a non-empty dict of column -> SQL expression text, got {values!r}")
    out = []
    for column, text in values.items():
        if not isinstance(column, str) or not column:
            raise InvalidInput(f"{what}: column names must be non-empty strings, got {column!r}")
        if not isinstance(text, str):
            raise InvalidInput(
                f'{what}: the value for {column!r} must be SQL text such as "s.{column}" or "\'text\'", '
                f"got {type(text).__name__} {text!r}"
            )
        out.append((column, text))
    return tuple(out)


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause of a MERGE as plain, picklable data: SQL text, parsed when a :class:`Merge` takes it.

    ``kind`` is which rows it sees (``matched``, ``not_matched``, ``not_matched_by_source``), ``action``
    what it does to them (``update``, ``delete``, ``insert``, ``nothing``), ``assignments`` the
    ``(column, SQL text)`` pairs of an update or insert, ``all_columns`` an update or insert of the
    source's columns by name (``*_all``).
    """

    kind: ClauseKind
    action: Action
    condition: str | None = None
    assignments: tuple[tuple[str, str], ...] = ()
    all_columns: bool = False

    def __post_init__(self) -> None:
        if self.action not in _CLAUSE_ACTIONS.get(self.kind, ()):
            raise InvalidInput(f"a MERGE has no WHEN clause of kind {self.kind!r} and action {self.action!r}")
        sets = self.action in ("update", "insert")
        if self.all_columns and (not sets or self.kind == "not_matched_by_source" or self.assignments):
            raise InvalidInput(
                f"all_columns applies to UPDATE and INSERT clauses without assignments: {self!r}"
            )
        if sets and not self.all_columns and not self.assignments:
            raise InvalidInput(f"a WHEN ... {self.action.upper()} clause needs assignments: {self!r}")
        if not sets and self.assignments:
            raise InvalidInput(f"a WHEN ... {self.action.upper()} clause takes no assignments: {self!r}")

    @staticmethod
    def of(
        kind: ClauseKind, action: Action, condition: Any = None, values: Any = None, all_columns: bool = False
    ) -> MergeClause:
        """A clause from a ``when_*`` method's arguments.

        ``condition`` must be SQL text (or None) and ``values`` of an update or insert a non-empty dict of
        column -> SQL text (InvalidInput otherwise).
        """
        text = None if condition is None else _text(condition, "clause condition")
        pairs: tuple[tuple[str, str], ...] = ()
        if action in ("update", "insert") and not all_columns:
            pairs = _assignment_texts(values, "UPDATE SET" if action == "update" else "INSERT")
        return MergeClause(kind, action, text, pairs, all_columns)

    def parse(self) -> Clause:
        """The clause with its SQL parsed (:class:`~mere.errors.FilterError` for text that does not parse)."""
        what = "UPDATE SET" if self.action == "update" else "INSERT"
        return Clause(
            self.kind,
            self.action,
            None if self.condition is None else expression(self.condition, "clause condition"),
            tuple((c, expression(text, f"{what} value for {c!r}")) for c, text in self.assignments),
            self.all_columns,
        )


@dataclass(frozen=True)
class MergeSpec:
    """A MERGE INTO as plain, picklable data: its ON condition, aliases and WHEN clauses in order.

    :meth:`Merge.to_spec` and the Spark MERGE builder make one; :meth:`build` makes the :class:`Merge` of
    a table and a source from it (each task of a distributed MERGE builds its own).
    """

    on: str | None = None  # None: the primary key columns equal
    source_alias: str = "s"
    target_alias: str = "t"
    clauses: tuple[MergeClause, ...] = ()
    using_columns: tuple[str, ...] = ()  # USING (a, b): a bare name of one of these is the pair

    def adding(self, clause: MergeClause) -> MergeSpec:
        """This spec with one more WHEN clause, last."""
        return replace(self, clauses=(*self.clauses, clause))

    def build(self, table: TableHandle, source: Any) -> Merge:
        """The MERGE of ``source`` into ``table`` this spec describes, ready to explain, stage or execute."""
        m = Merge(table, source, self.on, self.source_alias, self.target_alias)
        m.using_columns = frozenset(self.using_columns)
        for clause in self.clauses:
            m.add_clause(clause)
        return m


@names_its_table
class MergeBuilder:
    """The WHEN clause methods of a MERGE being built, shared by :class:`Merge` and the Spark MERGE builder.

    Each method makes a :class:`MergeClause` and hands it to :meth:`add_clause`; clauses act in the order
    they are added (the first whose condition holds acts on a row). Conditions and values are SQL text
    over the source and target aliases.
    """

    def add_clause(self, clause: MergeClause) -> Self:
        """Add a WHEN clause given as data (the ``when_*`` methods call this)."""
        raise NotImplementedError

    def when_matched_update(self, set: Mapping[str, str], condition: str | None = None) -> Self:
        """Target rows paired with a source row (and meeting ``condition``): set columns to expressions.

        Args:
            set: ``{column: SQL expression text}`` over the aliases, such as ``{"qty": "t.qty + s.qty"}``.
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, ``set`` that is not a non-empty dict of column
                -> SQL text, or a MERGE that was executed already.
            FilterError: A condition or value that does not parse.
        """
        return self.add_clause(MergeClause.of("matched", "update", condition, set))

    def when_matched_update_all(self, condition: str | None = None) -> Self:
        """Matched rows take the source's columns by name.

        This is DuckDB's ``UPDATE BY NAME``, not the positional ``UPDATE SET *``: each source column sets the
        target column of its name, and columns the source lacks keep their values. Key columns are not set
        (they identify the row; the ON condition pairs the key with the source's); a partition column moves
        the row where keys are table-wide, and is not set under ``key_scope="partition"``. A source column
        the table does not have is refused (:class:`~mere.errors.InvalidInput`), except the table's
        ``cdc_column``.

        Args:
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, or a MERGE that was executed already. A
                source column the table does not have is refused by :meth:`execute` (unless it replays an
                idempotency key's commit).
            FilterError: A condition that does not parse.
        """
        return self.add_clause(MergeClause.of("matched", "update", condition, all_columns=True))

    def when_matched_delete(self, condition: str | None = None) -> Self:
        """Delete matched target rows (meeting ``condition``).

        Args:
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, or a MERGE that was executed already.
            FilterError: A condition that does not parse.
        """
        return self.add_clause(MergeClause.of("matched", "delete", condition))

    def when_matched_do_nothing(self, condition: str | None = None) -> Self:
        """Leave matched rows (meeting ``condition``) as they are, so that later clauses skip them.

        Args:
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, or a MERGE that was executed already.
            FilterError: A condition that does not parse.
        """
        return self.add_clause(MergeClause.of("matched", "nothing", condition))

    def when_not_matched_insert(self, values: Mapping[str, str], condition: str | None = None) -> Self:
        """Source rows with no target row: insert a row of these column -> expression values.

        Args:
            values: ``{column: SQL expression text}`` over the source alias; the key columns must be given.
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, ``values`` that is not a non-empty dict of
                column -> SQL text, or a MERGE that was executed already.
            FilterError: A condition or value that does not parse.
        """
        return self.add_clause(MergeClause.of("not_matched", "insert", condition, values))

    def when_not_matched_insert_all(self, condition: str | None = None) -> Self:
        """Source rows with no target row: insert them, columns by name.

        This is DuckDB's ``INSERT BY NAME``, not the positional ``INSERT *``: columns the source lacks are
        NULL. A source column the table does not have is refused (:class:`~mere.errors.InvalidInput`), except
        the table's ``cdc_column``.

        Args:
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, or a MERGE that was executed already. A
                source column the table does not have is refused by :meth:`execute` (unless it replays an
                idempotency key's commit).
            FilterError: A condition that does not parse.
        """
        return self.add_clause(MergeClause.of("not_matched", "insert", condition, all_columns=True))

    def when_not_matched_do_nothing(self, condition: str | None = None) -> Self:
        """Skip unmatched source rows (meeting ``condition``).

        Args:
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, or a MERGE that was executed already.
            FilterError: A condition that does not parse.
        """
        return self.add_clause(MergeClause.of("not_matched", "nothing", condition))

    def when_not_matched_by_source_update(self, set: Mapping[str, str], condition: str | None = None) -> Self:
        """Target rows no source row pairs with: set columns (reads every target row).

        Args:
            set: ``{column: SQL expression text}`` over the target alias.
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, ``set`` that is not a non-empty dict of column
                -> SQL text, or a MERGE that was executed already.
            FilterError: A condition or value that does not parse.
        """
        return self.add_clause(MergeClause.of("not_matched_by_source", "update", condition, set))

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> Self:
        """Delete target rows no source row pairs with (reads every target row).

        Args:
            condition: SQL text over the aliases the rows must also meet; None: every such row.

        Returns:
            This MERGE, to add more clauses to.

        Raises:
            InvalidInput: A ``condition`` that is not SQL text, or a MERGE that was executed already.
            FilterError: A condition that does not parse.
        """
        return self.add_clause(MergeClause.of("not_matched_by_source", "delete", condition))


@names_its_table
class Merge(MergeBuilder):
    """A MERGE INTO being built: add WHEN clauses in order, then :meth:`execute` (see :meth:`Table.merge`)."""

    def __init__(
        self,
        table: TableHandle,
        source: Any,
        on: str | None = None,
        source_alias: str = "s",
        target_alias: str = "t",
        *,
        into: Commit | CommitResult | None = None,
    ) -> None:
        # ``into``: the transaction's commit that execute() adds the MERGE to (a commit result: the
        # transaction replays that commit, and execute() does nothing); None: execute() commits alone.
        self.into = into
        if not table.spec.has_primary_key:
            raise InvalidInput(f"{table.name} has no primary key: MERGE pairs rows by primary key")
        for name, alias in (("source_alias", source_alias), ("target_alias", target_alias)):
            if not isinstance(alias, str) or not alias:
                raise InvalidInput(f"{name} must be a non-empty string, got {alias!r}")
        if source_alias.lower() == target_alias.lower():
            raise InvalidInput(f"source_alias and target_alias must differ, both are {source_alias!r}")
        self.table = table
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.source = _source_table(source, table.name)
        for c in self.source.column_names:
            if not c:
                raise InvalidInput(f"{table.name}: MERGE source has a column without a name")
        if on is None:
            on = " AND ".join(
                f"{_quote(target_alias)}.{_quote(k)} = {_quote(source_alias)}.{_quote(k)}"
                for k in table.spec.primary_key
            )
        self.on = expression(on, "ON condition")
        # SQL's MERGE ... USING (a, b): ON equates these columns of both sides, and a bare ``a`` in a clause
        # that sees both names the pair (the target's value, equal to the source's) instead of being
        # ambiguous, as in DuckDB.
        self.using_columns: frozenset[str] = frozenset()
        self.clauses: list[Clause] = []
        self._state = "open"
        # A ``*_all`` clause's source columns the table lacks: refused by execute(), after a replay of an
        # idempotency key (whose commit may have predated a rename) has returned.
        self._by_name_refusal: InvalidInput | None = None

    # -- builder ------------------------------------------------------------------------------

    def _add(self, clause: Clause) -> Self:
        if self._state != "open":
            raise InvalidInput(f"{self.table.name}: this MERGE was executed; build a new one")
        self.clauses.append(clause)
        return self

    def add_clause(self, clause: MergeClause) -> Self:
        """Add a WHEN clause given as data; its SQL is parsed now.

        The ``when_*`` methods and :meth:`MergeSpec.build` call this.
        """
        if clause.all_columns and self._by_name_refusal is None:
            try:
                self._by_name(f"when_{clause.kind}_{clause.action}_all()")
            except InvalidInput as unknown_columns:
                self._by_name_refusal = unknown_columns
        refusal = self.table.spec.delete_refusal
        if clause.action == "delete" and refusal:
            raise InvalidInput(
                f"{self.table.name}: a MERGE that deletes cannot apply to this table: {refusal}"
            )
        return self._add(clause.parse())

    def _by_name(self, what: str) -> None:
        """Refuse source columns the table lacks to the ``*_all`` clauses, which pair columns by name.

        As SQL's BY NAME, such a column is refused, not dropped (the table's change column aside: writes take
        it, it is not stored).
        """
        known = {*self.table.spec.schema.names, self.table.spec.cdc_column}
        unknown = [c for c in self.source.column_names if c not in known]
        if unknown:
            raise InvalidInput(
                f"{self.table.name}: {what} takes the source's columns by name, and the source column(s) "
                f"{unknown} are not columns of the table {self.table.spec.schema.names}; drop them from the "
                "source, or name the columns set (when_matched_update / when_not_matched_insert)"
            )

    def to_spec(self) -> MergeSpec:
        """This MERGE as plain, picklable data; ``to_spec().build(table, source)`` makes it again."""
        return MergeSpec(
            self.on.text,
            self.source_alias,
            self.target_alias,
            tuple(c.spec() for c in self.clauses),
            tuple(sorted(self.using_columns)),
        )

    # -- running ------------------------------------------------------------------------------

    def _check(self) -> None:
        if not self.clauses:
            raise InvalidInput(f"{self.table.name}: a MERGE needs at least one WHEN clause")

    @property
    def full_scan(self) -> bool:
        """Whether the MERGE must read every target row (a NOT MATCHED BY SOURCE clause)."""
        return any(c.kind == "not_matched_by_source" for c in self.clauses)

    def explain(self) -> MergeExplain:
        """What the MERGE reads (at the table's current version); nothing is read or written.

        Returns:
            The statement, and how many target splits it reads of how many (and why).

        Raises:
            InvalidInput: A MERGE without WHEN clauses, an ON condition that does not equate every key column
                with a source column, or clauses that set key columns, name unknown columns or a column twice.
            FilterError: A condition or value that names unknown columns or does not type.
        """
        self._check()
        plan = MergePlan(self)
        splits = plan.splits(self.table.version)
        total = len({(f.partition, f.bucket) for f in self.table.files_at(self.table.version)})
        return MergeExplain(
            self.table.name,
            self.on.text,
            tuple(c.describe() for c in self.clauses),
            self.source.num_rows,
            self.full_scan,
            len(splits),
            total,
        )

    def stage(self, version: int) -> StagedChange:
        """Evaluate against ``version`` and write the files without committing.

        One task of a distributed MERGE whose source rows of a key all reach the same task; the result is a
        :class:`~mere.table.commit.StagedChange` that :meth:`mere.Table.commit` takes.

        Args:
            version: The table version the MERGE reads (every task of one MERGE the same).

        Returns:
            The staged share of the MERGE.

        Raises:
            InvalidInput: A MERGE without WHEN clauses, or one whose clauses are invalid (as :meth:`execute`).
            FilterError: A condition or value that names unknown columns or does not type.
            MergeConflict: The MERGE would change a target row twice, or insert a key twice or one the table
                holds.
            NullKey: The MERGE would insert a row with a NULL key.
            NoSuchVersion: ``version`` is not readable.
            StorageError: Reading or writing files failed.
        """
        self._check()
        return MergePlan(self).stage(version)

    def execute(self, *, idempotency_key: str | None = None) -> MergeMetrics:
        """Run the MERGE as one commit; nothing is written when any part of it fails.

        Args:
            idempotency_key: commit the MERGE at most once. When a commit with this key has landed (a
                retry of the same work: a job run again, a replayed micro-batch), nothing is read or
                written and the metrics of that commit are returned (its version and counts,
                ``already_committed=True``); the key alone names the work, so a MERGE with a known key and
                another source or other clauses is a replay too. Two handles racing with one key commit
                once: the loser's files are deleted and it returns the winner's metrics. A MERGE that
                changes nothing makes no version and records no key (a retry evaluates it again).

        Returns:
            What the MERGE did and the version it committed (None when it changed nothing).

        Raises:
            InvalidInput: A bad ``idempotency_key`` or one naming a commit that was not a MERGE (nothing
                committed), a MERGE without WHEN clauses or executed already, an ON condition that does not
                equate every key column with a source column, clauses that set key columns, name unknown
                columns or a column twice, or ``*_all`` clauses whose source has a column the table lacks.
            FilterError: A condition or value that names unknown columns or does not type.
            MergeConflict: The MERGE would change a target row twice, or insert a key twice or one the table
                holds.
            NullKey: The MERGE would insert a row with a NULL key.
            CommitConflict: Concurrent commits won every retry (nothing committed).
            CommitStateUnknown: The catalog connection failed while committing; the commit may have landed.
            StorageError: Reading or writing files failed.
        """
        self._check()
        if self._state != "open":
            raise InvalidInput(f"{self.table.name}: this MERGE was executed; build a new one")
        check_idempotency_key(self.table.name, idempotency_key)
        started = time.perf_counter()
        if self.into is not None:
            return self._execute_into(self.into, idempotency_key, started)
        ctx = self.table.context
        if idempotency_key is not None:
            prior = committed_with(ctx, idempotency_key)
            if prior is not None:  # a replay: read nothing, write nothing
                metrics = MergeMetrics.of_commit(self.table.name, prior, time.perf_counter() - started)
                self._state = "executed"
                return metrics
        self._state = "executed"
        plan = MergePlan(self)  # checks every expression before anything is read
        commit = Commit(ctx, idempotency_key=idempotency_key)
        try:
            commit.add_read(plan, "a MERGE")
        except BaseException:
            commit.abort()
            raise
        result = commit.run()
        if result.already_committed:  # the key's commit landed while this MERGE ran: its files are gone
            return MergeMetrics.of_commit(self.table.name, result, time.perf_counter() - started)
        m = plan.metrics
        return MergeMetrics(
            m["inserted"],
            m["updated"],
            m["deleted"],
            m["unchanged"],
            m["files"],
            time.perf_counter() - started,
            None if result.no_change else result.version,
            m["rows_read"],
            m["splits_read"],
            stale_rows=m.get(STALE_ROWS, 0),
        )

    def _execute_into(
        self, into: Commit | CommitResult, idempotency_key: str | None, started: float
    ) -> MergeMetrics:
        """Add the MERGE to a transaction's commit (its counts, without a version yet)."""
        if idempotency_key is not None:
            raise InvalidInput(
                f"{self.table.name}: a MERGE in a transaction takes the transaction's idempotency key"
            )
        self._state = "executed"
        if isinstance(into, CommitResult):  # the transaction replays a commit: nothing is read
            return MergeMetrics.of_commit(self.table.name, into, time.perf_counter() - started)
        plan = MergePlan(self)
        into.add_read(plan, "a MERGE")
        m = plan.metrics
        return MergeMetrics(
            m["inserted"],
            m["updated"],
            m["deleted"],
            m["unchanged"],
            m["files"],
            time.perf_counter() - started,
            None,
            m["rows_read"],
            m["splits_read"],
            stale_rows=m.get(STALE_ROWS, 0),
        )


def _complement(n: int, taken: np.ndarray) -> np.ndarray:
    """Positions in ``range(n)`` not in ``taken`` (linear, unlike a set difference that sorts)."""
    mask = np.ones(n, dtype=bool)
    mask[taken] = False
    return np.flatnonzero(mask)


def _quote(name: str) -> str:
    return format_ident(name)


def _source_table(data: Any, name: str) -> pa.Table:
    """The source's rows, with encoded columns (dictionary, run-end, views) in their plain types."""
    if isinstance(data, pa.Table):
        table = data
    else:
        try:
            schema, batches = to_batches(data)
        except InvalidInput:
            raise
        except Exception as exc:  # anything unreadable is bad input
            raise InvalidInput(
                f"{name}: MERGE source must be Arrow data, a pandas or Polars frame or an Arrow stream: {exc}"
            ) from exc
        table = pa.Table.from_batches(list(batches), schema=schema)
    names = table.column_names
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise SchemaMismatch(f"{name}: the MERGE source names column(s) {twice} more than once")
    return decoded_table(table)


def _to_mask(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


class _Scope:
    """Which columns an expression may name: the target's (``t.x``), the source's (``s.x``) or both."""

    def __init__(
        self, merge: Merge, target: bool, source: bool, what: str, used: set[str] | None = None
    ) -> None:
        self.merge, self.target, self.source, self.what = merge, target, source, what
        self.used = used if used is not None else set()  # the columns named, as frame names
        self.t_names = set(merge.table.spec.schema.names)
        self.s_names = set(merge.source.column_names)
        self.t_aliases = {
            merge.target_alias.lower(),
            merge.table.name.lower(),
            merge.table.name.split(".")[-1].lower(),
        }
        self.s_aliases = {merge.source_alias.lower()}

    def resolve(self, node: exp.Column) -> tuple[str, pa.DataType]:
        parts = [p.name for p in node.parts]
        side: str | None = None
        if len(parts) > 1 and parts[0].lower() in self.s_aliases:
            side, name = "s", ".".join(parts[1:])
        elif len(parts) > 1 and parts[0].lower() in self.t_aliases:
            side, name = "t", ".".join(parts[1:])
        else:
            name = ".".join(parts)
            in_t, in_s = name in self.t_names and self.target, name in self.s_names and self.source
            if in_t and in_s and name in self.merge.using_columns:
                in_s = False
            if in_t and in_s:
                raise FilterError(
                    f"column {name!r} is ambiguous in {self.what}: write {self.merge.target_alias}.{name} or "
                    f"{self.merge.source_alias}.{name}"
                )
            side = "t" if in_t else "s" if in_s else None
            if side is None:
                raise FilterError(f"unknown column {column_name(node)!r} in {self.what}; {self._available()}")
        if side == "t":
            if not self.target:
                raise FilterError(f"{self.what} cannot refer to target column {column_name(node)!r}")
            if name not in self.t_names:
                raise FilterError(f"unknown target column {name!r} in {self.what}; {self._available()}")
            self.used.add(_TARGET + name)
            return _TARGET + name, self.merge.table.spec.schema.field(name).type
        if not self.source:
            raise FilterError(f"{self.what} cannot refer to source column {column_name(node)!r}")
        if name not in self.s_names:
            raise FilterError(f"unknown source column {name!r} in {self.what}; {self._available()}")
        self.used.add(_SOURCE + name)
        return _SOURCE + name, self.merge.source.schema.field(name).type

    def _available(self) -> str:
        parts = []
        if self.target:
            parts.append(f"target ({self.merge.target_alias}): {', '.join(sorted(self.t_names))}")
        if self.source:
            parts.append(f"source ({self.merge.source_alias}): {', '.join(sorted(self.s_names)) or '(none)'}")
        return "; ".join(parts)

    def lower(self, parsed: Parsed) -> Typed:
        return Lowering(self.resolve, parsed.text, parsed.lists).lower(parsed.tree)


@dataclass
class _Lowered:
    clause: Clause
    condition: pc.Expression | None
    values: dict[str, pc.Expression] = field(default_factory=dict)
    # An INSERT whose key columns are the source's ON columns as they are: its keys are source keys.
    keys_from_source: bool = False


class MergePlan:
    """A checked MERGE: the key pairing, the lowered clauses, and the evaluation at a table version."""

    def __init__(self, merge: Merge) -> None:
        if merge._by_name_refusal is not None:  # (checked here, after a replay of a key has returned)
            raise merge._by_name_refusal
        self.merge = merge
        t = merge.table
        self.spec = t.spec
        self.name = t.name
        self.metrics: dict[str, int] = {}
        self.used: set[str] = set()  # the columns conditions and values name (evaluation frames hold those)
        self.pairs, extra = self._on()
        both = _Scope(merge, True, True, "the ON condition", self.used)
        self.on_extra = None if extra is None else Lowering(both.resolve, merge.on.text).lower(extra)
        if self.on_extra is not None and not pa.types.is_boolean(self.on_extra.type):
            raise FilterError(f"the ON condition must be boolean (in {merge.on.text!r})")
        self.source_keys = self._source_keys()
        self.lowered = [self._lower(c) for c in merge.clauses]
        # Updated rows are written whole, as rows that replace the key's state: merge operators then do not
        # fold them into the old values, and reads stay as cheap as after upserts (partial rows would need
        # the slower column-wise merge).
        self.read_columns = list(self.spec.schema.names)

    # -- checking ------------------------------------------------------------------------------

    def _on(self) -> tuple[dict[str, str], exp.Expression | None]:
        """ON as primary key equalities (target key column -> source column) and any other condition."""
        m = self.merge
        conjuncts: list[exp.Expression] = []

        def split(node: exp.Expression) -> None:
            if isinstance(node, exp.Paren):
                split(node.this)
            elif isinstance(node, exp.And):
                split(node.this)
                split(node.expression)
            else:
                conjuncts.append(node)

        split(m.on.tree)
        scope = _Scope(m, True, True, "the ON condition")
        pairs: dict[str, str] = {}
        rest: list[exp.Expression] = []
        for c in conjuncts:
            if (
                isinstance(c, exp.EQ)
                and isinstance(c.this, exp.Column)
                and isinstance(c.expression, exp.Column)
            ):
                a, _ = scope.resolve(c.this)
                b, _ = scope.resolve(c.expression)
                if a.startswith(_SOURCE) and b.startswith(_TARGET):
                    a, b = b, a
                if a.startswith(_TARGET) and b.startswith(_SOURCE):
                    key = a[len(_TARGET) :]
                    if key in self.spec.primary_key and key not in pairs:
                        pairs[key] = b[len(_SOURCE) :]
                        continue
            rest.append(c)
        missing = [k for k in self.spec.primary_key if k not in pairs]
        if missing:
            raise InvalidInput(
                f"{self.name}: MERGE pairs rows by primary key: the ON condition must equate every key column "
                f"of {list(self.spec.primary_key)} with a source column (missing {missing}), e.g. "
                + " AND ".join(f"{m.target_alias}.{k} = {m.source_alias}.{k}" for k in self.spec.primary_key)
                + "; other conditions may be ANDed to it"
            )
        # In primary-key order, whatever the ON condition's order: key tuples are hashed to buckets in it.
        pairs = {k: pairs[k] for k in self.spec.primary_key}
        extra: exp.Expression | None = None
        for c in rest:
            extra = c if extra is None else exp.And(this=extra, expression=c)
        return pairs, extra

    def _source_keys(self) -> pa.Table:
        m = self.merge
        cols = {}
        for key, src in self.pairs.items():
            target_type = self.spec.schema.field(key).type
            cols[key] = lossless_cast(m.source.column(src), target_type, src, f"{self.name} MERGE source")
        return pa.table(cols) if cols else pa.table({})

    def _lower(self, clause: Clause) -> _Lowered:
        m = self.merge
        target = clause.kind != "not_matched"
        source = clause.kind != "not_matched_by_source"
        where = {
            "matched": "WHEN MATCHED",
            "not_matched": "WHEN NOT MATCHED",
            "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
        }[clause.kind]
        scope = _Scope(m, target, source, f"a {where} clause", self.used)
        condition = None
        if clause.condition is not None:
            typed = scope.lower(clause.condition)
            if not (pa.types.is_boolean(typed.type) or pa.types.is_null(typed.type)):
                raise FilterError(
                    f"a {where} condition must be boolean, got {typed.type} (in {clause.condition.text!r})"
                )
            condition = typed.expr
        out = _Lowered(clause, condition)
        schema = self.spec.schema
        identity = set(self.spec.identity_columns)
        if self.spec.cross_partition:  # table-wide keys: SET of a partition column moves the row
            identity = set(self.spec.primary_key)
        if clause.action == "update":
            kept: set[str] = set()
            items = clause.assignments
            if clause.all_columns:
                items = tuple(
                    (c, parse_expression(f"{_quote(m.source_alias)}.{_quote(c)}"))
                    for c in schema.names
                    if c in m.source.column_names and c not in identity
                )
            for column, parsed in items:
                name = (
                    column.split(".", 1)[1]
                    if "." in column and column.split(".", 1)[0].lower() == m.target_alias.lower()
                    else column
                )
                if name not in schema.names:
                    raise InvalidInput(
                        f"{self.name}: UPDATE SET names unknown column {column!r}; columns: {schema.names}"
                    )
                if name in out.values or name in kept:
                    raise InvalidInput(f"{self.name}: UPDATE SET names {name!r} twice")
                if name in identity:
                    if not self._keeps(name, parsed, scope):
                        raise InvalidInput(
                            f"{self.name}: UPDATE cannot set key or partition column {name!r} (delete the row "
                            "and insert the new one instead); only setting it to the value it has is allowed ("
                            f"{name} = {m.source_alias}.<the source column ON equates it with>, as dbt writes)"
                        )
                    kept.add(name)  # a no-op: the row keeps its key
                    continue
                out.values[name] = assign(scope.lower(parsed), schema.field(name).type, name, parsed.text)
        elif clause.action == "insert":
            items = clause.assignments
            if clause.all_columns:
                items = tuple(
                    (c, parse_expression(f"{_quote(m.source_alias)}.{_quote(c)}"))
                    for c in schema.names
                    if c in m.source.column_names
                )
            for column, parsed in items:
                if column not in schema.names:
                    raise InvalidInput(
                        f"{self.name}: INSERT names unknown column {column!r}; columns: {schema.names}"
                    )
                if column in out.values:
                    raise InvalidInput(f"{self.name}: INSERT names {column!r} twice")
                out.values[column] = assign(
                    scope.lower(parsed), schema.field(column).type, column, parsed.text
                )
            missing = [c for c in self.spec.primary_key if c not in out.values]
            if missing:
                raise InvalidInput(f"{self.name}: INSERT must give the primary key column(s) {missing}")
            given = dict(items)
            trees = [given[k].tree for k in self.spec.primary_key]
            out.keys_from_source = all(
                isinstance(tree, exp.Column) and scope.resolve(tree)[0] == _SOURCE + self.pairs[k]
                for k, tree in zip(self.spec.primary_key, trees)
            )
        return out

    def _keeps(self, column: str, parsed: Parsed, scope: _Scope) -> bool:
        """Whether SET ``column`` = ``parsed`` leaves a matched row's key or partition column as it is.

        That is: the target's own value, or the source column the ON condition equates that key column with.
        """
        tree = parsed.tree
        while isinstance(tree, exp.Paren):
            tree = tree.this
        if not isinstance(tree, exp.Column):
            return False
        named, _ = scope.resolve(tree)
        paired = self.pairs.get(column)
        return named == _TARGET + column or (paired is not None and named == _SOURCE + paired)

    # -- reading -------------------------------------------------------------------------------

    def _filter(self) -> E.Expr | None:
        """The source keys' range per key column: prunes row groups by their statistics, cheaply."""
        if self.merge.full_scan:
            return None
        parts: list[E.Expr] = []
        for key in self.spec.primary_key:
            column = self.source_keys.column(key)
            typ = column.type
            if not (
                pa.types.is_integer(typ)
                or pa.types.is_string(typ)
                or pa.types.is_large_string(typ)
                or pa.types.is_date(typ)
                or pa.types.is_decimal(typ)
                or pa.types.is_timestamp(typ)
            ):
                continue
            bounds = pc.min_max(column)
            if not bounds["min"].is_valid:  # every source key is NULL: nothing can match
                return E.AlwaysFalse()
            try:
                low, high = bounds["min"].as_py(), bounds["max"].as_py()
            except (OverflowError, ValueError):  # e.g. a date past year 9999: no Python value, no pruning
                continue
            if is_nat(low) or is_nat(high):  # an ns timestamp of -2**63, not a NULL
                continue
            parts += [E.Compare(">=", key, low), E.Compare("<=", key, high)]
        return E.conjunction(parts)

    @functools.cached_property
    def _keyed_source(self) -> tuple[pa.Table, np.ndarray]:
        """The source's key tuples without a NULL part (those match no target row), in primary-key order.

        With the bucket of each: the buckets a MERGE reads and the keys each of them is probed for.
        """
        keys = self.source_keys.select(list(self.spec.primary_key)).drop_null()
        return keys, bucket_ids(keys, self.spec.buckets) if keys.num_rows else np.zeros(0, np.int32)

    def _buckets(self) -> set[int] | None:
        """The buckets that can hold a source key (None: every bucket)."""
        if self.merge.full_scan:
            return None
        return set(sorted_unique(self._keyed_source[1]).tolist())

    def _scan(self, version: int) -> tuple[Any, list[Split]]:
        scan = self.merge.table.scan(columns=self.read_columns, filter=self._filter(), version=version)
        buckets = self._buckets()
        splits = [s for s in scan.plan() if buckets is None or s.bucket in buckets]
        return scan, splits

    def _scope(self, scan: Any) -> ReadScope:
        """Where the target rows the MERGE reads (through ``scan``) can be, files or not.

        A bucket of a source key may be empty at the scan's version and written concurrently.
        """
        buckets = self._buckets()
        return ReadScope(None if buckets is None else frozenset(buckets), scan.read_scope().excluded)

    def splits(self, version: int) -> list[str]:
        """The splits (as commit summaries name them) the MERGE reads at ``version``."""
        return [split_name(s) for s in self._scan(version)[1]]

    def _read_target(self, version: int) -> tuple[pa.Table, list[str], ReadScope]:
        """The target rows the MERGE needs (those of source keys; every row for NOT MATCHED BY SOURCE)."""
        scan, splits = self._scan(version)
        _, opts = scan.planned(Explain(version))
        storage, spec, schema = self.merge.table.storage, scan.spec, scan.schema
        keys = list(self.spec.primary_key)
        wanted = None if self.merge.full_scan else self._keyed_source[0]
        if wanted is not None:
            # Key indexes rule out row groups that hold no source key; a small source is looked up key
            # by key (the pages of its rows only) rather than read by row groups (mere.read.lookup).
            opts = replace(opts, keys=wanted, lookup=opts.lookup or wanted.num_rows <= MERGE_LOOKUP_KEYS)

        first_keys = None if wanted is None or opts.lookup else lookup.FirstKeys(spec, wanted)
        # A split holds the keys of its bucket only: each split's rows are matched against those.
        key_sets: dict[int, KeySet] = {}
        if wanted is not None:
            buckets = self._keyed_source[1]
            order = np.argsort(buckets, kind="stable")
            ranked = buckets[order]
            for bucket in sorted({s.bucket for s in splits}):
                lo, hi = np.searchsorted(ranked, [bucket, bucket + 1])
                key_sets[bucket] = KeySet(wanted.take(pa.array(order[lo:hi])), keys)

        def read(split: Split) -> pa.Table:
            reader = SplitReader(storage, spec, split, opts)
            if first_keys is not None and lookup.few_pages(
                storage, reader.cursors, first_keys, io_pool() if storage.is_remote else None
            ):
                # A larger source whose keys fall in a narrow key range: the pages whose key min/max admit
                # one are a small share of the row groups that may hold one. Looked up, only those pages
                # are read (every version of each key is in one of them, delete markers included).
                reader.look_up_keys()
            rows = pa.Table.from_batches(list(reader.batches()), schema=schema)
            if wanted is None or not rows.num_rows:
                return rows
            # Keep the rows of source keys only (a semi-join on the key columns alone).
            hit = key_sets[split.bucket].contains(rows)
            kept = rows if hit.all() else rows.filter(bool_array(hit))
            return kept.select(schema.names).cast(schema)

        reads = [shared_pool("merge-read", default_threads()).submit(read, s) for s in splits]
        wait(reads)  # every read ends before an error is raised, as a pool of its own would
        parts = [r.result() for r in reads]
        target = pa.concat_tables(parts) if parts else schema.empty_table()
        return target, [split_name(s) for s in splits], self._scope(scan)

    def stage(self, base: int) -> StagedChange:
        """Evaluate at version ``base`` and write the outcome's files, uncommitted."""
        started = now_micros()
        files_of = self.merge.table.context.files
        target, read, scope = self._read_target(base)
        whole, deletes, counts = self._evaluate(target)
        computed, computed_scope = self._check_computed_inserts(base)
        read += computed
        scope = scope.union(computed_scope)
        files: list[FileEntry] = []
        try:
            if whole.num_rows or deletes.num_rows:
                rows, _ = conform(whole, self.spec, partial_ok=False, identifier=self.name)
                gone, _ = conform(deletes, marker_spec(self.spec), partial_ok=True, identifier=self.name)
                # Deleted keys ride in the same files as whole rows: their other columns are NULL.
                gone = pa.table(
                    {
                        f.name: gone.column(f.name)
                        if f.name in gone.column_names
                        else pa.nulls(gone.num_rows, f.type)
                        for f in rows.schema
                    },
                    schema=rows.schema,
                )
                # Deletes first: a key deleted and inserted again by one MERGE ends up inserted.
                ops = np.concatenate(
                    [
                        np.full(gone.num_rows, OP_DELETE, dtype=np.int8),
                        np.full(rows.num_rows, OP_PUT, dtype=np.int8),
                    ]
                )
                both = pa.concat_tables([gone, rows])
                files += files_of.write(prepare(self.spec, both, ops, identifier=self.name, moves=False))
        except BaseException:
            files_of.discard(files)
            raise
        counts = {**counts, "files": len(files), "rows_read": target.num_rows, "splits_read": len(read)}
        if self.spec.sequence_by:
            # Rows older than their key's stored version (a late SET of the sequence, an insert below a
            # tombstone) lose at merge on read: counted as an upsert's are. With table-wide keys the
            # stored version may be in another partition: a marker beside the row (what an upsert gets).
            ctx = self.merge.table.context
            found = resolve(ctx, base, files, self.spec.cross_partition) if files else None
            counts[STALE_ROWS] = (found.stale if found is not None else 0) + self._stale_moves
            if found is not None and found.markers is not None and found.markers.num_rows:
                try:
                    keys, _ = conform(
                        found.markers, marker_spec(self.spec), partial_ok=True, identifier=self.name
                    )
                    ops = np.full(keys.num_rows, OP_DELETE, dtype=np.int8)
                    files += files_of.write(
                        prepare(self.spec, keys, ops, identifier=self.name, moves=False),
                        first_order=len(files),
                    )
                except BaseException:
                    files_of.discard(files)
                    raise
        return StagedChange(
            self.name,
            "merge",
            files,
            sum(f.row_count for f in files),
            read_version=base,
            rule=RowsUnchanged(frozenset(read), self.merge.full_scan, "MERGE", scope),
            counts=counts,
            table_uuid=self.merge.table.context.uuid,
            written_since=started,
        )

    def change(self, ctx: TableContext, base: int, checks: WriteChecks) -> Change:
        """Evaluate at version ``base`` and write the outcome (the MERGE as a recipe of its own change)."""
        staged = self.stage(base)
        self.metrics = dict(staged.counts)
        change = Change(
            "merge", list(staged.files), staged.rows, _merge_summary(staged.counts), rule=staged.rule
        )
        rule = staged.rule
        if not self.merge.full_scan and isinstance(rule, RowsUnchanged) and rule.scope is not None:
            # Its outcome depends on the target rows of its source keys and of the keys it inserts only.
            keys = list(self.spec.primary_key)
            key_schema = pa.schema([self.spec.schema.field(k) for k in keys])
            read = [self._keyed_source[0].select(keys).cast(key_schema)]
            read += [t.select(keys).cast(key_schema) for t in self._inserted]
            change.read_rows = ReadRows(pa.concat_tables(read), None, rule.scope)
        return change

    # -- evaluation ----------------------------------------------------------------------------

    def _evaluate(self, target: pa.Table) -> tuple[pa.Table, pa.Table, dict[str, int]]:
        """(whole rows to write, keys to delete, counts)."""
        m = self.merge
        source = m.source
        keys = list(self.pairs)
        # Each source row's target row: a sorted search where target keys are unique (they are, but for a
        # key held in several partitions), else a join.
        at = key_positions(self.source_keys, target.select(keys), keys)
        if at is not None:
            s_idx = np.flatnonzero(at >= 0)
            t_idx = at[s_idx]
        else:
            s_side = self.source_keys.append_column(
                "\x00s", pa.array(np.arange(source.num_rows, dtype=np.int64))
            )
            t_side = target.select(keys).append_column(
                "\x00t", pa.array(np.arange(target.num_rows, dtype=np.int64))
            )
            joined = s_side.join(t_side, keys=keys, join_type="inner", use_threads=False)
            s_idx = joined.column("\x00s").to_numpy()
            t_idx = joined.column("\x00t").to_numpy()
        if self.on_extra is not None and len(s_idx):
            both = self._frame(target, t_idx, s_idx)
            keep = self._mask(both, self.on_extra.expr)
            s_idx, t_idx = s_idx[keep], t_idx[keep]
        counts = {"inserted": 0, "updated": 0, "deleted": 0, "unchanged": 0}
        puts: list[pa.Table] = []
        deletes: list[pa.Table] = []
        acted_targets: list[np.ndarray] = []
        self._inserted: list[pa.Table] = []
        self._computed_keys = False  # an INSERT computed a key (not a source key as it is)
        self._updates: list[pa.Table] = []
        self._deleted: list[pa.Table] = []
        self._stale_moves = 0  # updates moving their key below the sequence they matched (not written)

        by_kind: dict[str, list[_Lowered]] = {"matched": [], "not_matched": [], "not_matched_by_source": []}
        for low in self.lowered:
            by_kind[low.clause.kind].append(low)

        # WHEN MATCHED
        if len(t_idx):
            frame = self._frame(target, t_idx, s_idx)
            taken = self._apply(by_kind["matched"], frame, target, t_idx, None, puts, deletes, counts)
            acted_targets.append(t_idx[taken])
            counts["unchanged"] += int(len(t_idx) - taken.sum())
        # WHEN NOT MATCHED (by target)
        unmatched_s = _complement(source.num_rows, s_idx)
        if len(unmatched_s) and by_kind["not_matched"]:
            frame = self._frame(None, None, unmatched_s)
            self._apply(by_kind["not_matched"], frame, None, None, unmatched_s, puts, deletes, counts)
        # WHEN NOT MATCHED BY SOURCE
        if by_kind["not_matched_by_source"]:
            unmatched_t = _complement(target.num_rows, t_idx)
            if len(unmatched_t):
                frame = self._frame(target, unmatched_t, None)
                taken = self._apply(
                    by_kind["not_matched_by_source"], frame, target, unmatched_t, None, puts, deletes, counts
                )
                counts["unchanged"] += int(len(unmatched_t) - taken.sum())

        if acted_targets:
            acted = np.concatenate(acted_targets)
            if len(acted) and np.bincount(acted, minlength=target.num_rows).max() > 1:
                raise MergeConflict(
                    f"{self.name}: MERGE would change a target row more than once: a target row matched more "
                    "than one source row; deduplicate the source or make the ON condition unique"
                )
        # NULL allowed inside nested columns too: conform() refuses a NULL in a NOT NULL field by its path.
        schema = pa.schema([f.with_type(relax_nested(f.type)).with_nullable(True) for f in self.spec.schema])
        whole = [p.cast(schema) for p in puts + self._updates]
        whole_table = pa.concat_tables(whole) if whole else schema.empty_table()
        del_table = (
            pa.concat_tables(deletes) if deletes else schema.empty_table().select(marker_columns(self.spec))
        )
        self._check_inserts(target)
        return whole_table, del_table, counts

    def _check_computed_inserts(self, base: int) -> tuple[list[str], ReadScope]:
        """Look up inserted keys that are not source keys; returns the splits read and their scope.

        Such keys (``INSERT VALUES (s.k + 1, ...)``) were not read with the target: looked up, inserting a key
        the table holds fails as it does for source keys.
        """
        if not self._inserted or self.merge.full_scan or not self._computed_keys:
            return [], ReadScope(frozenset())
        keys = list(self.spec.primary_key)
        inserted = pa.concat_tables(self._inserted).select(keys)
        inserted = inserted.cast(pa.schema([self.spec.schema.field(k) for k in keys]))
        other = inserted.join(
            self.source_keys.select(keys), keys=keys, join_type="left anti", use_threads=False
        )
        if not other.num_rows:
            return [], ReadScope(frozenset())
        where = E.conjunction([values_in(k, other.column(k)) for k in keys])
        scan = self.merge.table.scan(columns=list(self.spec.identity_columns), filter=where, version=base)
        identity = list(self.spec.unique_columns)  # table-wide keys clash in any partition
        held = scan.to_arrow().select(identity)
        found = held.join(
            pa.concat_tables(self._inserted).select(identity).cast(held.schema),
            keys=identity,
            join_type="left semi",
            use_threads=False,
        )
        if found.num_rows:
            raise MergeConflict(
                f"{self.name}: MERGE would insert a key the table already holds: {first_row(found)}"
            )
        return [split_name(s) for s in scan.plan()], scan.read_scope()

    def _check_inserts(self, target: pa.Table) -> None:
        if not self._inserted:
            return
        identity = list(self.spec.unique_columns)  # table-wide keys: one row per key, whatever its partition
        keys = pa.concat_tables(self._inserted).select(identity)
        for k in self.spec.primary_key:
            if keys.column(k).null_count:
                raise NullKey(f"{self.name}: MERGE would insert a row whose primary-key column {k!r} is NULL")
        ints = integer_keys(keys.column(identity[0])) if len(identity) == 1 else None
        if ints is not None:
            ranked = np.sort(ints)
            twice = bool(len(ranked) > 1 and (ranked[1:] == ranked[:-1]).any())
        else:
            twice = keys.group_by(identity).aggregate([([], "count_all")]).num_rows < keys.num_rows
        if twice:
            raise MergeConflict(
                f"{self.name}: MERGE would insert the same key twice (a duplicate key among the source rows "
                "that match no target row)"
            )
        # Source keys inserted as they are matched no target row (every target row of a source key was
        # read): only computed keys or an ON condition beyond the key can clash with a held key.
        if target.num_rows and (self._computed_keys or self.on_extra is not None):
            held = target.select(identity)
            if self._deleted:  # keys this MERGE deletes may be inserted again
                gone = pa.concat_tables(self._deleted).select(identity).cast(held.schema)
                held = held.join(gone, keys=identity, join_type="left anti", use_threads=False)
            clash = keys.join(held, keys=identity, join_type="left semi", use_threads=False)
            if clash.num_rows:
                raise MergeConflict(
                    f"{self.name}: MERGE would insert a key the table already holds: "
                    f"{first_row(clash)} (its row did not meet the ON condition)"
                )

    def _moved_mask(self, before: pa.Table, after: pa.Table) -> np.ndarray:
        """Per updated row, whether its partition changed (table-wide keys: else none can change)."""
        spec = self.spec
        columns = [c for c in spec.partition_by if c not in spec.primary_key] if spec.cross_partition else []
        return partition_changed(before, after, columns)

    def _moved(self, before: pa.Table, after: pa.Table) -> pa.Table | None:
        """Marker rows, in their old partitions, of the updated rows whose partition changed."""
        changed = self._moved_mask(before, after)
        if not changed.any():
            return None
        return before.filter(pa.array(changed)).select(marker_columns(self.spec))

    def _frame(self, target: pa.Table | None, t_idx: np.ndarray | None, s_idx: np.ndarray | None) -> pa.Table:
        """The target and source rows that conditions and values are evaluated on.

        The columns they name (at least one, so that the frame knows its row count).
        """
        sides = []
        if target is not None and t_idx is not None:
            sides.append((_TARGET, target, t_idx))
        if s_idx is not None:
            sides.append((_SOURCE, self.merge.source, s_idx))
        cols: dict[str, Any] = {}
        for prefix, table, idx in sides:
            names = [n for n in table.column_names if prefix + n in self.used]
            if names:
                taken = table.select(names).take(pa.array(idx))
                cols.update((prefix + n, taken.column(n)) for n in names)
        if not cols:
            prefix, table, idx = sides[0]
            cols[prefix + table.column_names[0]] = table.column(0).take(pa.array(idx))
        return pa.table(cols)

    def _mask(self, frame: pa.Table, expression: pc.Expression) -> np.ndarray:
        try:
            return _to_mask(evaluate(frame, {"m": expression}).column("m"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise arrow_failure(self.name, exc) from exc

    def _apply(
        self,
        clauses: Sequence[_Lowered],
        frame: pa.Table,
        target: pa.Table | None,
        t_idx: np.ndarray | None,
        s_idx: np.ndarray | None,
        puts: list[pa.Table],
        deletes: list[pa.Table],
        counts: dict[str, int],
    ) -> np.ndarray:
        """Run clauses in order on ``frame``'s rows; returns which rows a clause took."""
        n = frame.num_rows
        remaining = np.ones(n, dtype=bool)
        taken = np.zeros(n, dtype=bool)
        for low in clauses:
            if not remaining.any():
                break
            hit = remaining.copy()
            if low.condition is not None:
                hit &= self._mask(frame, low.condition)
            if not hit.any():
                continue
            remaining &= ~hit
            idx = np.flatnonzero(hit)
            action = low.clause.action
            if action == "nothing":
                continue  # counted as unchanged by the caller
            taken |= hit
            rows = frame.take(pa.array(idx))
            if action == "delete":
                assert target is not None and t_idx is not None
                gone = target.take(pa.array(t_idx[idx]))
                # With sequence_by a marker goes just above the sequence of the version it deletes.
                deletes.append(sequence_after(gone.select(marker_columns(self.spec)), self.spec))
                self._deleted.append(gone.select(list(self.spec.identity_columns)))
                counts["deleted"] += len(idx)
                continue
            try:
                values = evaluate(rows, low.values) if low.values else None
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise arrow_failure(self.name, exc) from exc
            if action == "update":
                assert target is not None and t_idx is not None
                old = target.take(pa.array(t_idx[idx]))
                base = old
                for name in low.values:
                    assert values is not None
                    base = base.set_column(base.schema.get_field_index(name), name, values.column(name))
                counts["updated"] += len(idx)
                if self.spec.sequence_by and self.spec.cross_partition:
                    # A row moved to another partition below the sequence of the version it matched loses,
                    # as it does in place: not written (its old version stays), counted stale.
                    stale = self._moved_mask(old, base) & sequence_lower(self.spec, old, base)
                    if stale.any():
                        self._stale_moves += int(stale.sum())
                        keep = pa.array(~stale)
                        old, base = old.filter(keep), base.filter(keep)
                self._updates.append(base)
                moved = self._moved(old, base)
                if moved is not None:  # markers where the moved rows were, at the rows' own sequence
                    deletes.append(moved)
            else:
                cols = {}
                for f in self.spec.schema:
                    cols[f.name] = (
                        values.column(f.name)
                        if values is not None and f.name in low.values
                        else pa.nulls(len(idx), f.type)
                    )
                puts.append(pa.table(cols))
                self._inserted.append(puts[-1].select(list(self.spec.identity_columns)))
                self._computed_keys |= not low.keys_from_source
                counts["inserted"] += len(idx)
        return taken
