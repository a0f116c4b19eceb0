"""``mere.sql``: MERGE INTO, UPDATE and DELETE statements as SQL text.

mere is not a SQL engine: a statement names one mere table and, for MERGE, one source given as a keyword
argument (Arrow, pandas, Polars, an Arrow stream) or another mere table of the catalog. The statement is
turned into the Python API's calls (:meth:`Table.merge`, :meth:`Table.update`, :meth:`Table.delete`), so
both run the same code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from mere.errors import FilterError, InvalidInput
from mere.lang.lower import sql_text
from mere.lang.parse import parse_statement
from mere.metadata import CommitResult
from mere.table.merge import Merge, MergeMetrics

if TYPE_CHECKING:
    from mere.table.catalog import Catalog
    from mere.table.table import Table


def sql(text: str, *, catalog: Catalog, **sources: Any) -> MergeMetrics | CommitResult:
    """Run one MERGE INTO, UPDATE or DELETE statement on a table of ``catalog``.

    ::

        mere.sql(
            "MERGE INTO sales.orders t USING changes s ON t.order_id = s.order_id "
            "WHEN MATCHED AND s.op = 'D' THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET qty = t.qty + s.qty "
            "WHEN NOT MATCHED THEN INSERT *",
            catalog=cat,
            changes=arrow_table,
        )
        mere.sql("UPDATE sales.orders SET status = 'shipped' WHERE day = '2026-11-21'", catalog=cat)
        mere.sql("DELETE FROM sales.orders WHERE qty = 0", catalog=cat)

    MERGE returns :class:`~mere.table.merge.MergeMetrics`; UPDATE and DELETE their
    :class:`~mere.metadata.CommitResult`.
    """
    from mere.table.catalog import Catalog

    if not isinstance(catalog, Catalog):
        raise InvalidInput(f"mere.sql needs catalog=<a mere Catalog>, got {type(catalog).__name__}")
    tree = parse_statement(text).tree
    if isinstance(tree, exp.Merge):
        _refuse_other_clauses(tree, "MERGE", {"this", "using", "on", "using_cond", "whens"})
        return _merge(tree, catalog, sources)
    if sources:
        raise InvalidInput(f"only MERGE takes sources; got {sorted(sources)}")
    if isinstance(tree, exp.Update):
        if tree.args.get("from_") is not None or tree.args.get("from") is not None or tree.args.get("joins"):
            raise FilterError(
                "UPDATE ... FROM is not supported: use MERGE INTO with the other table as source"
            )
        _refuse_other_clauses(tree, "UPDATE", {"this", "expressions", "where"})
        table = _table(catalog, tree.this)
        assignments = _assignments(tree.expressions, "UPDATE SET")
        where = tree.args.get("where")
        return table.update(assignments, where=sql_text(where.this) if where is not None else None)
    assert isinstance(tree, exp.Delete)
    if tree.args.get("using"):
        raise FilterError("DELETE ... USING is not supported: use MERGE INTO ... WHEN MATCHED THEN DELETE")
    _refuse_other_clauses(tree, "DELETE", {"this", "where"})
    table = _table(catalog, tree.this)
    where = tree.args.get("where")
    return table.delete(sql_text(where.this) if where is not None else "TRUE")


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
    for name, value in tree.args.items():
        if name in supported or value is None or value is False or value == []:
            continue
        clause = _CLAUSES.get(name, name.rstrip("_").upper())
        raise FilterError(
            f"{clause} is not supported in {statement} (mere runs no part of a statement it cannot run)"
        )


def _name(node: exp.Expression) -> str:
    if not isinstance(node, exp.Table):
        raise FilterError(f"expected a table name, got {sql_text(node)!r}")
    return ".".join(p.name for p in node.parts)


def _table(catalog: Catalog, node: exp.Expression) -> Table:
    return catalog.load_table(_name(node))


def _alias(node: exp.Expression, default: str) -> str:
    alias = node.args.get("alias")
    return alias.name if alias is not None and alias.name else default


def _assignments(items: list[exp.Expression], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise FilterError(f"{what} takes column = expression items, got {sql_text(item)!r}")
        if item.this.name in out:
            raise FilterError(f"{what} assigns column {item.this.name!r} twice")
        out[item.this.name] = sql_text(item.expression)
    return out


def _merge(tree: exp.Merge, catalog: Catalog, sources: dict[str, Any]) -> MergeMetrics:
    target = _table(catalog, tree.this)
    using = tree.args["using"]
    if isinstance(using, exp.Subquery | exp.Select):
        raise FilterError(
            "MERGE ... USING (subquery) is not supported: mere is not a SQL engine; compute the source with "
            "DuckDB, Polars or pandas and pass it as a keyword argument: mere.sql(..., catalog=cat, src=data)"
        )
    source_name = _name(using)
    if source_name in sources:
        source = sources[source_name]
    elif len(using.parts) == 1 and not catalog.exists(source_name):
        given = ", ".join(sorted(sources)) or "none"
        raise InvalidInput(
            f"MERGE source {source_name!r} is neither a keyword argument of mere.sql (given: {given}) nor a table"
        )
    else:
        source = catalog.load_table(source_name).to_arrow()
    unused = sorted(set(sources) - {source_name})
    if unused:
        raise InvalidInput(f"sources {unused} are not used by the statement")
    if tree.args.get("using_cond"):
        raise FilterError("MERGE ... USING (columns) is not supported; write ON t.k = s.k")
    on = tree.args.get("on")
    m = Merge(
        target,
        source,
        on=sql_text(on) if on is not None else None,
        source_alias=_alias(using, source_name.split(".")[-1]),
        target_alias=_alias(tree.this, _name(tree.this).split(".")[-1]),
    )
    whens = tree.args.get("whens")
    for when in whens.expressions if whens is not None else []:
        _clause(m, when)
    return m.execute()


def _clause(m: Merge, when: exp.When) -> None:
    matched = bool(when.args.get("matched"))
    by_source = bool(when.args.get("source"))
    condition = when.args.get("condition")
    cond = sql_text(condition) if condition is not None else None
    then = when.args.get("then")
    kind = "matched" if matched else "not_matched_by_source" if by_source else "not_matched"
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        if kind == "not_matched":
            raise FilterError("WHEN NOT MATCHED THEN DELETE: there is no target row to delete")
        (m.when_matched_delete if matched else m.when_not_matched_by_source_delete)(condition=cond)
    elif isinstance(then, exp.Var) and then.name.upper() == "DO NOTHING":
        if kind == "not_matched_by_source":
            raise FilterError(
                "WHEN NOT MATCHED BY SOURCE THEN DO NOTHING is not supported; leave the clause out"
            )
        (m.when_matched_do_nothing if matched else m.when_not_matched_do_nothing)(condition=cond)
    elif isinstance(then, exp.Update):
        if kind == "not_matched":
            raise FilterError("WHEN NOT MATCHED THEN UPDATE: there is no target row to update; use INSERT")
        if len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star):
            if not matched:
                raise FilterError("UPDATE SET * needs a source row: use it WHEN MATCHED")
            m.when_matched_update_all(condition=cond)
        else:
            settings = _assignments(then.expressions, "UPDATE SET")
            (m.when_matched_update if matched else m.when_not_matched_by_source_update)(
                set=settings, condition=cond
            )
    elif isinstance(then, exp.Insert):
        if kind != "not_matched":
            raise FilterError("INSERT is only for WHEN NOT MATCHED")
        if isinstance(then.this, exp.Star):
            m.when_not_matched_insert_all(condition=cond)
            return
        columns = then.this.expressions if isinstance(then.this, exp.Tuple) else None
        values = then.expression.expressions if isinstance(then.expression, exp.Tuple) else None
        if values is None:
            raise FilterError(f"INSERT needs VALUES (...), got {sql_text(then)!r}")
        if columns is None:
            names = m.table.spec.schema.names
            if len(values) != len(names):
                raise FilterError(
                    f"INSERT VALUES gives {len(values)} values for the {len(names)} columns {names}; name the "
                    "columns: INSERT (a, b) VALUES (...)"
                )
            column_names = list(names)
        else:
            column_names = [c.name for c in columns]
            if len(column_names) != len(values):
                raise FilterError(f"INSERT names {len(column_names)} columns but gives {len(values)} values")
        m.when_not_matched_insert(
            values={c: sql_text(v) for c, v in zip(column_names, values)}, condition=cond
        )
    else:
        raise FilterError(f"unsupported MERGE action {sql_text(then) if then is not None else None!r}")
