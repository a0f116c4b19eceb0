"""``mere.sql``: MERGE INTO, UPDATE and DELETE statements as SQL text.

mere is not a SQL engine: a statement names one mere table and, for MERGE, one source given as a keyword
argument (Arrow, pandas, Polars, an Arrow stream) or another mere table of the catalog. The statement is
turned into the Python API's calls (:meth:`Table.merge`, :meth:`Table.update`, :meth:`Table.delete`), so
both run the same code.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from sqlglot import exp

from mere.errors import FilterError, InvalidInput
from mere.expr.literals import format_ident
from mere.lang.lower import sql_text
from mere.lang.parse import (
    INSERT_BY_NAME,
    INSERT_BY_POSITION,
    INSERT_DEFAULT_VALUES,
    MERGE_ERROR,
    UPDATE_BY_NAME,
    UPDATE_BY_POSITION,
    parse_expression,
    parse_statement,
)
from mere.metadata import CommitResult
from mere.table.ops.merge_into import ClauseKind, Merge, MergeClause, MergeMetrics, MergeSpec

if TYPE_CHECKING:
    from mere.table.catalog import Catalog


def sql(text: str, *, catalog: Catalog, **sources: Any) -> MergeMetrics | CommitResult:
    """Run one MERGE INTO, UPDATE or DELETE statement on a table of ``catalog``.

    ::

        mere.sql(
            "MERGE INTO sales.orders t USING changes s ON t.order_id = s.order_id "
            "WHEN MATCHED AND s.op = 'D' THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET qty = t.qty + s.qty "
            "WHEN NOT MATCHED THEN INSERT (order_id, qty) VALUES (s.order_id, s.qty)",
            catalog=cat,
            changes=arrow_table,
        )
        mere.sql("UPDATE sales.orders SET status = 'shipped' WHERE day = '2026-11-21'", catalog=cat)
        mere.sql("DELETE FROM sales.orders WHERE qty = 0", catalog=cat)

    MERGE returns :class:`~mere.table.merge.MergeMetrics`; UPDATE and DELETE their
    :class:`~mere.metadata.CommitResult`. The text is read as DuckDB reads it (``UPDATE SET *`` and
    ``INSERT *`` by position, ``BY NAME`` by name, ``USING (columns)``, ``SET (a, b) = (x, y)``) and gives
    DuckDB's rows; docs/sql.md lists the forms refused (:class:`~mere.errors.FilterError`, nothing changed).
    """
    from mere.table.catalog import Catalog

    if not isinstance(catalog, Catalog):
        raise InvalidInput(f"mere.sql needs catalog=<a mere Catalog>, got {type(catalog).__name__}")
    statement = parse_sql(text)
    if isinstance(statement, MergeStatement):
        return _merge(statement, catalog, sources)
    if sources:
        raise InvalidInput(f"only MERGE takes sources; got {sorted(sources)}")
    table = catalog.load_table(statement.table)
    statement = statement.resolved(table.spec.schema.names)
    if isinstance(statement, UpdateStatement):
        return table.update(dict(statement.assignments), where=statement.where)
    return table.delete(statement.where if statement.where is not None else "TRUE")


# How ``UPDATE SET *`` / ``INSERT *`` pair the table's columns with the source's (see MergeStatement.spec).
StarPairing = Literal["position", "name"]


@dataclass(frozen=True)
class MergeStatement:
    """A MERGE INTO statement read from SQL text: its tables and aliases; :meth:`spec` pairs its WHEN
    clauses with the columns of a target and a source (``*`` actions and ``USING (columns)`` need them).

    ``source_is_query`` is True for ``USING (subquery)`` (``source`` is then the subquery's SQL text),
    which ``mere.sql`` refuses and the Spark helper hands to Spark.
    """

    table: str
    source: str
    target_alias: str
    source_alias: str
    source_is_query: bool
    tree: exp.Merge = field(repr=False, compare=False)

    def spec(
        self, target_columns: Sequence[str], source_columns: Sequence[str], star: StarPairing = "position"
    ) -> MergeSpec:
        """The MERGE as plain data, for a target and a source with these columns.

        Args:
            target_columns: The target table's columns, in order.
            source_columns: The source's columns, in order.
            star: How ``UPDATE SET *`` and ``INSERT *`` pair columns: ``"position"`` as DuckDB does, or
                ``"name"`` as Spark SQL does (each target column takes the source column of its name,
                without case; a source lacking one is refused, other source columns are not read).

        Returns:
            The ON condition, aliases and WHEN clauses, as :meth:`mere.Table.merge` builds them.

        Raises:
            FilterError: A clause mere does not run (docs/sql.md), or a ``*`` action whose columns do not
                pair.
        """
        if star not in ("position", "name"):
            raise InvalidInput(f"star must be 'position' or 'name', got {star!r}")
        # Names without case, as DuckDB and Spark SQL read them (a copy: the statement stays as parsed).
        source = self.source_alias.lower()  # (a source aliased with the table's name is the source)
        sides = [
            ({self.target_alias.lower(), *_table_aliases(self.table)} - {source}, list(target_columns)),
            ({source}, list(source_columns)),
        ]
        joined_names = {c.name.casefold() for c in self.tree.args.get("using_cond") or []}
        tree = _names_resolved(self.tree, sides, list(target_columns), shared=joined_names)
        assert isinstance(tree, exp.Merge)
        joined = [c.name for c in tree.args.get("using_cond") or []]
        on_node = tree.args.get("on")
        if joined and on_node:
            raise FilterError("MERGE takes ON or USING (columns), not both")
        on = sql_text(on_node) if on_node else None
        using: tuple[str, ...] = ()
        if joined:
            # USING (a, b) is ON t.a = s.a AND t.b = s.b (names without case, as DuckDB resolves them), and a
            # bare a names the pair (equal when matched).
            t_names, s_names = _by_lower(list(target_columns)), _by_lower(list(source_columns))
            pairs = [(t_names.get(c.lower(), c), s_names.get(c.lower(), c)) for c in joined]
            on = " AND ".join(
                f"{_quote(self.target_alias)}.{_quote(t)} = {_quote(self.source_alias)}.{_quote(s)}"
                for t, s in pairs
            )
            parse_expression(on, "ON condition")
            using = tuple(sorted(t for t, s in pairs if t == s))
        spec = MergeSpec(on, self.source_alias, self.target_alias, (), using)
        whens = tree.args.get("whens")
        closed: set[tuple[bool, bool]] = set()
        for when in whens.expressions if whens is not None else []:
            kind = (bool(when.args.get("matched")), bool(when.args.get("source")))
            if kind in closed:  # DuckDB refuses the statement rather than ignore a clause
                raise FilterError(
                    f"Unconditional {_when(when)} clause was already defined - any following {_when(when)} "
                    "clause would be unreachable (DuckDB refuses this too)"
                )
            if when.args.get("condition") is None:
                closed.add(kind)
            spec = spec.adding(
                _clause(when, self.source_alias, list(target_columns), list(source_columns), star)
            )
        return spec


@dataclass(frozen=True)
class UpdateStatement:
    """An UPDATE statement read from SQL text: the table, ``column -> SQL text`` assignments, WHERE text."""

    table: str
    alias: str
    assignments: tuple[tuple[str, str], ...]
    where: str | None
    tree: exp.Update | None = field(default=None, repr=False, compare=False)

    def resolved(self, columns: Sequence[str]) -> UpdateStatement:
        """The statement with its column names read without case against the table's ``columns``, as
        DuckDB and Spark SQL read them (a name that matches exactly, or none or several, stays as written)."""
        if self.tree is None:
            return self
        aliases = {self.alias.lower(), *_table_aliases(self.table)}
        tree = _names_resolved(self.tree, [(aliases, columns)], columns, unqualify=True)
        assert isinstance(tree, exp.Update)
        where = tree.args.get("where")
        assignments = tuple(_assignments(tree.expressions, "UPDATE SET").items())
        return replace(
            self, assignments=assignments, where=sql_text(where.this) if where is not None else None
        )


@dataclass(frozen=True)
class DeleteStatement:
    """A DELETE statement read from SQL text: the table and the WHERE text (None: every row)."""

    table: str
    alias: str
    where: str | None
    tree: exp.Delete | None = field(default=None, repr=False, compare=False)

    def resolved(self, columns: Sequence[str]) -> DeleteStatement:
        """The statement with its column names read without case (see :meth:`UpdateStatement.resolved`)."""
        if self.tree is None:
            return self
        aliases = {self.alias.lower(), *_table_aliases(self.table)}
        tree = _names_resolved(self.tree, [(aliases, columns)], columns, unqualify=True)
        where = tree.args.get("where")
        return replace(self, where=sql_text(where.this) if where is not None else None)


def parse_sql(text: str) -> MergeStatement | UpdateStatement | DeleteStatement:
    """Read one MERGE INTO, UPDATE or DELETE statement, refusing every clause mere does not run.

    The reading :func:`sql` and the Spark helper (``mere.integrations.spark.sql``) share.

    Args:
        text: The statement.

    Returns:
        The statement as data.

    Raises:
        FilterError: Text that does not parse, another kind of statement, or a clause mere does not run
            (nothing runs).
    """
    tree = parse_statement(text).tree
    if isinstance(tree, exp.Merge):
        _refuse_other_clauses(tree, "MERGE", {"this", "using", "on", "using_cond", "whens"})
        target = _name(tree.this)
        using = tree.args["using"]
        if isinstance(using, exp.Subquery | exp.Select):
            query = using.this if isinstance(using, exp.Subquery) else using
            return MergeStatement(
                target,
                query.sql(dialect="spark"),
                _alias(tree.this, target.split(".")[-1]),
                _alias(using, ""),  # "" when the subquery has none
                True,
                tree,
            )
        source = _name(using)
        return MergeStatement(
            target,
            source,
            _alias(tree.this, target.split(".")[-1]),
            _alias(using, source.split(".")[-1]),
            False,
            tree,
        )
    if isinstance(tree, exp.Update):
        if tree.args.get("from_") is not None or tree.args.get("from") is not None or tree.args.get("joins"):
            raise FilterError(
                "UPDATE ... FROM is not supported: use MERGE INTO with the other table as source"
            )
        _refuse_other_clauses(tree, "UPDATE", {"this", "expressions", "where"})
        name = _name(tree.this)
        where = tree.args.get("where")
        return UpdateStatement(
            name,
            _alias(tree.this, name.split(".")[-1]),
            tuple(_assignments(tree.expressions, "UPDATE SET").items()),
            sql_text(where.this) if where is not None else None,
            tree,
        )
    assert isinstance(tree, exp.Delete)
    if tree.args.get("using"):
        raise FilterError("DELETE ... USING is not supported: use MERGE INTO ... WHEN MATCHED THEN DELETE")
    _refuse_other_clauses(tree, "DELETE", {"this", "where"})
    name = _name(tree.this)
    where = tree.args.get("where")
    return DeleteStatement(
        name,
        _alias(tree.this, name.split(".")[-1]),
        sql_text(where.this) if where is not None else None,
        tree,
    )


_CLAUSES = {
    "with_": "WITH",
    "limit": "LIMIT",
    "order": "ORDER BY",
    "returning": "RETURNING",
    "tables": "a table list",
}


def _refuse_other_clauses(tree: exp.Expression, statement: str, supported: set[str]) -> None:
    """Every clause the statement holds besides ``supported`` is refused: one run without it (a LIMIT
    ignored deletes every matching row) would change rows the statement did not ask for."""
    name = _first_unsupported(tree, supported)
    if name is not None:
        clause = _CLAUSES.get(name, name.rstrip("_").upper())
        raise FilterError(
            f"{clause} is not supported in {statement} (mere runs no part of a statement it cannot run)"
        )


def _first_unsupported(node: exp.Expression, supported: Collection[str]) -> str | None:
    """The first argument ``node`` holds (not empty) that is not in ``supported``, or None."""
    for name, value in node.args.items():
        if name not in supported and value is not None and value is not False and value != []:
            return name
    return None


def _table_aliases(table: str) -> set[str]:
    """The names a statement's columns may be qualified with for ``table`` (``ns.t`` and ``t``)."""
    return {table.lower(), table.split(".")[-1].lower()}


def _matching(name: str, columns: Sequence[str]) -> str | None:
    """The one of ``columns`` that ``name`` names: itself, else the only one equal without case; else None."""
    if name in columns:
        return name
    folded = name.casefold()
    matches = {c for c in columns if c.casefold() == folded}
    return matches.pop() if len(matches) == 1 else None


def _without_case(name: str, columns: Sequence[str]) -> str:
    """``name`` as ``columns`` spell it (see :func:`_matching`), else as written (unknown or ambiguous: the
    caller's own check names it)."""
    return _matching(name, columns) or name


def _names_resolved(
    tree: exp.Expression,
    sides: Sequence[tuple[set[str], Sequence[str]]],
    target: Sequence[str],
    unqualify: bool = False,
    shared: Collection[str] = (),
) -> exp.Expression:
    """A copy of ``tree`` whose column names are spelt as the columns they match without case.

    ``sides``: (lower-case qualifiers, columns) per table of the statement, the target's first (a MERGE's
    source second). A qualified name reads its side's columns; an unqualified one the sides it can see (a
    WHEN NOT MATCHED clause the source's, BY SOURCE the target's), resolved when they agree on one
    spelling; the columns UPDATE SET assigns and INSERT lists read the ``target``'s. ``unqualify`` (one
    table, as in UPDATE and DELETE): names qualified with the table's name or alias lose the qualifier.
    ``shared``: the case-folded names of ``USING (columns)``, which both sides may have.
    """
    tree = tree.copy()
    assigned: set[int] = set()
    for node in tree.find_all(exp.Update, exp.Insert):
        items = node.expressions if isinstance(node, exp.Update) else [node.this]
        for item in items:
            left = item.this if isinstance(item, exp.EQ) else item
            for column in left.find_all(exp.Column) if isinstance(left, exp.Expression) else ():
                assigned.add(id(column))
    seen: dict[int, list[Sequence[str]]] = {}  # columns inside a WHEN NOT MATCHED [BY SOURCE] clause
    for when in tree.find_all(exp.When):
        if not when.args.get("matched") and len(sides) > 1:
            visible = [sides[0][1]] if when.args.get("source") else [sides[1][1]]
            for column in when.find_all(exp.Column):
                seen[id(column)] = visible
    every = [columns for _, columns in sides]
    for column in list(tree.find_all(exp.Column)):
        parts = column.parts
        if id(column) in assigned:
            if len(parts) == 1:
                _rename(column, _without_case(column.name, target))
            continue
        if len(parts) == 1:
            found = (_matching(column.name, columns) for columns in seen.get(id(column), every))
            spellings = {m for m in found if m is not None}
            if len(spellings) == 1:
                _rename(column, spellings.pop())
            elif len(spellings) > 1 and column.name.casefold() not in shared:
                raise FilterError(
                    f"column {column.name!r} is ambiguous: both tables have it ({', '.join(sorted(spellings))}); "
                    "qualify it with the table's alias"
                )
        elif len(parts) == 2:
            qualifier = parts[0].name.lower()
            for aliases, columns in sides:
                if qualifier in aliases:
                    _rename(column, _without_case(column.name, columns))
                    if unqualify:
                        column.set("table", None)
                    break
    return tree


def _rename(column: exp.Column, name: str) -> None:
    if name != column.name:
        column.set("this", exp.to_identifier(name, quoted=True))


# What a table reference may hold besides its name and alias, as the refusals name it.
_TABLE_CLAUSES = {
    "joins": "JOIN or a second table",
    "laterals": "LATERAL",
    "sample": "TABLESAMPLE",
    "version": "time travel (VERSION / TIMESTAMP AS OF)",
    "when": "time travel (AT / BEFORE)",
    "changes": "CHANGES",
    "hints": "a table hint",
    "only": "ONLY",
    "pivots": "PIVOT",
    "partition": "PARTITION",
}


def _name(node: exp.Expression) -> str:
    """The dotted name of a table reference that holds nothing else but an alias: a join, a sample or a
    time-travel clause left out would make the statement change rows it did not name."""
    if not isinstance(node, exp.Table):
        raise FilterError(f"expected a table name, got {sql_text(node)!r}")
    name = _first_unsupported(node, ("this", "db", "catalog", "alias"))
    if name is not None:
        clause = _TABLE_CLAUSES.get(name, name.rstrip("_").upper())
        hint = "; a MERGE INTO with the other table as source joins on the key" if name == "joins" else ""
        raise FilterError(
            f"{clause} is not supported on the table {sql_text(node)!r} (mere runs no part of a statement "
            f"it cannot run{hint})"
        )
    _alias(node, "")  # refuses column aliases
    return ".".join(p.name for p in node.parts)


def _alias(node: exp.Expression, default: str) -> str:
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        # The columns would be renamed by position, which mere does not do; ignoring them would not.
        raise FilterError(f"column aliases are not supported: {sql_text(alias)!r}")
    return alias.name if alias is not None and alias.name else default


def _set_column(node: exp.Expression, what: str) -> str:
    if not isinstance(node, exp.Column):
        raise FilterError(f"{what} takes column = expression items, got {sql_text(node)!r}")
    if node.table:
        # DuckDB's parser refuses them (as do PostgreSQL and the standard): the statement names one table.
        raise FilterError(
            f"Qualified column names in UPDATE .. SET not supported (DuckDB refuses them too): write "
            f"{node.name} = ..., not {sql_text(node)} = ..."
        )
    return node.name


def _row_values(node: exp.Expression, count: int, what: str) -> list[exp.Expression]:
    """The values of SET (a, b) = (x, y) or = ROW(x, y); one value, as = x, is every column's (DuckDB)."""
    if isinstance(node, exp.Subquery | exp.Select):
        raise FilterError(
            f"{what} (columns) = (subquery) is not supported: mere is not a SQL engine; give the values as "
            "expressions, or use MERGE INTO with the query's result as source"
        )
    row = isinstance(node, exp.Tuple) or (isinstance(node, exp.Anonymous) and str(node.this).upper() == "ROW")
    if not row:
        return [node] * count
    values = list(node.expressions)
    if len(values) != count:
        raise FilterError(f"{what}: could not perform assignment, expected {count} values, got {len(values)}")
    return values


def _assignments(items: list[exp.Expression], what: str) -> dict[str, str]:
    """SET items as column -> expression text: ``a = x``, and DuckDB's ``(a, b) = (x, y)``."""
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, exp.EQ):
            raise FilterError(f"{what} takes column = expression items, got {sql_text(item)!r}")
        target = item.this
        if isinstance(target, exp.Tuple | exp.Paren):
            nodes = target.expressions if isinstance(target, exp.Tuple) else [target.this]
            columns = [_set_column(c, what) for c in nodes]
            pairs = list(zip(columns, _row_values(item.expression, len(columns), what)))
        else:
            pairs = [(_set_column(target, what), item.expression)]
        for column, value in pairs:
            if column in out:
                raise FilterError(f"{what} assigns column {column!r} twice")
            out[column] = sql_text(value)
    return out


def _merge(statement: MergeStatement, catalog: Catalog, sources: dict[str, Any]) -> MergeMetrics:
    target = catalog.load_table(statement.table)
    if statement.source_is_query:
        raise FilterError(
            "MERGE ... USING (subquery) is not supported: mere is not a SQL engine; compute the source with "
            "DuckDB, Polars or pandas and pass it as a keyword argument: mere.sql(..., catalog=cat, src=data)"
        )
    source_name = statement.source
    if source_name in sources:
        source = sources[source_name]
    elif "." not in source_name and not catalog.exists(source_name):
        given = ", ".join(sorted(sources)) or "none"
        raise InvalidInput(
            f"MERGE source {source_name!r} is neither a keyword argument of mere.sql (given: {given}) nor a table"
        )
    else:
        source = catalog.load_table(source_name).to_arrow()
    unused = sorted(set(sources) - {source_name})
    if unused:
        raise InvalidInput(f"sources {unused} are not used by the statement")
    # The builder reads the source (any Arrow-compatible data) once; the statement's clauses then pair with
    # its columns.
    m = Merge(target, source, source_alias=statement.source_alias, target_alias=statement.target_alias)
    spec = statement.spec(target.spec.schema.names, m.source.column_names)
    return spec.build(target, m.source).execute()


def _by_lower(names: list[str]) -> dict[str, str]:
    return {n.lower(): n for n in names}


def _source_columns(
    action: str, by_name: bool, target: list[str], source: list[str], table: str = "the table"
) -> list[tuple[str, str]]:
    """(target column, source column) pairs of a ``*`` action, as DuckDB pairs them: by position, with
    the column counts equal, or by name (without case), every source column naming a target column."""
    if by_name:
        by_lower = {c.lower(): c for c in target}
        unknown = [c for c in source if c.lower() not in by_lower]
        if unknown:
            raise FilterError(
                f"{action} BY NAME: the source column(s) {unknown} are not columns of {table} "
                f"{target} (DuckDB refuses them too)"
            )
        return [(by_lower[c.lower()], c) for c in source]
    if len(source) != len(target):
        raise FilterError(
            f"{action} * takes the source's columns by position, as DuckDB does: the source has "
            f"{len(source)} columns {source}, {table} has {len(target)} {target}; give a source of "
            f"the table's columns in its order, or write {action} BY NAME"
        )
    return list(zip(target, source))


def _star_columns(
    verb: str,
    action: str | None,
    by_name: str,
    by_position: str,
    star: StarPairing,
    target: list[str],
    source: list[str],
) -> list[tuple[str, str]]:
    """(target column, source column) pairs of a ``*`` action: ``BY NAME`` / ``BY POSITION`` as written,
    a plain ``*`` as ``star`` says."""
    if action in (by_name, by_position) or star == "position":
        return _source_columns(verb, action == by_name, target, source)
    # Spark SQL: each target column is resolved by name (without case) against the source.
    by_lower: dict[str, list[str]] = {}
    for c in source:
        by_lower.setdefault(c.lower(), []).append(c)
    missing = [c for c in target if c.lower() not in by_lower]
    if missing:
        raise FilterError(
            f"{verb} * takes each column of the table from the source column of its name, as Spark SQL "
            f"does: the source lacks {missing} (it has {source}); give it those columns or name the "
            "columns set"
        )
    twice = sorted({c for c in target if len(by_lower[c.lower()]) > 1})
    if twice:
        raise FilterError(
            f"{verb} *: the source has several columns named {twice} but for case; Spark SQL cannot "
            "resolve them either"
        )
    return [(c, by_lower[c.lower()][0]) for c in target]


def _from_source(source_alias: str, pairs: list[tuple[str, str]]) -> dict[str, str]:
    return {t: f"{_quote(source_alias)}.{_quote(s)}" for t, s in pairs}


def _when(when: exp.When) -> str:
    if when.args.get("matched"):
        return "WHEN MATCHED"
    return "WHEN NOT MATCHED BY SOURCE" if when.args.get("source") else "WHEN NOT MATCHED"


def _clause(
    when: exp.When, source_alias: str, target: list[str], source: list[str], star: StarPairing = "position"
) -> MergeClause:
    """One WHEN clause as data, for a target and a source of these columns."""
    matched = bool(when.args.get("matched"))
    by_source = bool(when.args.get("source"))
    condition = when.args.get("condition")
    cond = sql_text(condition) if condition is not None else None
    then = when.args.get("then")
    kind: ClauseKind = "matched" if matched else "not_matched_by_source" if by_source else "not_matched"
    action = then.name.upper() if isinstance(then, exp.Var) else None
    if action in (UPDATE_BY_NAME, UPDATE_BY_POSITION):
        then = exp.Update(expressions=[exp.Star()])  # checked as UPDATE SET * below, then paired
    if action in (INSERT_BY_NAME, INSERT_BY_POSITION):
        then = exp.Insert(this=exp.Star())
    if action == INSERT_DEFAULT_VALUES:
        raise FilterError(
            "INSERT DEFAULT VALUES is not supported: mere's columns have no defaults, and a row of NULLs "
            "has no key"
        )
    if action == MERGE_ERROR:
        raise FilterError(
            "THEN ERROR is not supported: check the source before the MERGE (no MERGE of mere fails on a "
            "row on purpose)"
        )
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        if kind == "not_matched":
            raise FilterError("WHEN NOT MATCHED THEN DELETE: there is no target row to delete")
        return MergeClause.of(kind, "delete", cond)
    if isinstance(then, exp.Var) and then.name.upper() == "DO NOTHING":
        if kind == "not_matched_by_source":
            raise FilterError(
                "WHEN NOT MATCHED BY SOURCE THEN DO NOTHING is not supported; leave the clause out"
            )
        return MergeClause.of(kind, "nothing", cond)
    if isinstance(then, exp.Update):
        if kind == "not_matched":
            raise FilterError("WHEN NOT MATCHED THEN UPDATE: there is no target row to update; use INSERT")
        if len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star):
            _plain_star(then.expressions[0], "UPDATE SET *")
            if not matched:
                raise FilterError("UPDATE SET * needs a source row: use it WHEN MATCHED")
            pairs = _star_columns("UPDATE", action, UPDATE_BY_NAME, UPDATE_BY_POSITION, star, target, source)
            return MergeClause.of(kind, "update", cond, _from_source(source_alias, pairs))
        return MergeClause.of(kind, "update", cond, _assignments(then.expressions, "UPDATE SET"))
    if isinstance(then, exp.Insert):
        if kind != "not_matched":
            raise FilterError("INSERT is only for WHEN NOT MATCHED")
        if isinstance(then.this, exp.Star):
            _plain_star(then.this, "INSERT *")
            pairs = _star_columns("INSERT", action, INSERT_BY_NAME, INSERT_BY_POSITION, star, target, source)
            return MergeClause.of(kind, "insert", cond, _from_source(source_alias, pairs))
        columns = then.this.expressions if isinstance(then.this, exp.Tuple) else None
        values = then.expression.expressions if isinstance(then.expression, exp.Tuple) else None
        if values is None:
            raise FilterError(f"INSERT needs VALUES (...), got {sql_text(then)!r}")
        if columns is None:
            if len(values) != len(target):
                raise FilterError(
                    f"INSERT VALUES gives {len(values)} values for the {len(target)} columns {target}; name "
                    "the columns: INSERT (a, b) VALUES (...)"
                )
            column_names = list(target)
        else:
            column_names = [c.name for c in columns]
            if len(column_names) != len(values):
                raise FilterError(f"INSERT names {len(column_names)} columns but gives {len(values)} values")
        return MergeClause.of(kind, "insert", cond, {c: sql_text(v) for c, v in zip(column_names, values)})
    raise FilterError(f"unsupported MERGE action {sql_text(then) if then is not None else None!r}")


def _plain_star(star: exp.Expression, what: str) -> None:
    modifiers = [k.rstrip("_").upper() for k, v in star.args.items() if v]
    if modifiers:
        raise FilterError(f"{what} {modifiers[0]} (...) is not supported (DuckDB refuses it too)")


def _quote(name: str) -> str:
    return format_ident(name)
