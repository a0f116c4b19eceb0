"""SQL text on Spark: MERGE INTO, UPDATE and DELETE on mere tables through the distributed MERGE, SELECT
with ``VERSION AS OF`` / ``TIMESTAMP AS OF``, and ``DESCRIBE HISTORY``.

PySpark's Python Data Source API gives a source no row-level operations and no catalog, so Spark itself
refuses ``MERGE INTO``, ``UPDATE``, ``DELETE`` and time travel on a ``mere`` table. :func:`sql` runs that
text instead: row-level statements are read by the parser of :func:`mere.sql` (the same forms, the same
refusals) and run as one :class:`~mere.integrations.spark.SparkMerge`; queries run in ``spark.sql`` after
every mere table they name is bound to a read of it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from mere.errors import FilterError, InvalidInput, MereError, NoSuchTable
from mere.expr.literals import format_ident
from mere.integrations.spark.ddl import NO_BINDING, ref_from_schema, refresh_cached, same_table, table_format
from mere.integrations.spark.merge import MERGE_ATTEMPTS, SparkMerge
from mere.integrations.spark.native import read_table
from mere.integrations.spark.options import ENV_WAREHOUSE, FORMAT_NAME, TableRef, location_options
from mere.lang.parse import MereDialect
from mere.statements import DeleteStatement, MergeStatement, UpdateStatement, parse_sql
from mere.table.merge import MergeClause, MergeMetrics
from mere.table.table import Table

WAREHOUSE_CONF = "spark.mere.warehouse"
"""The session's default warehouse for :func:`sql` (after the ``warehouse`` argument, before ``$MERE_WAREHOUSE``)."""
CATALOG_CONF = "spark.mere.catalog"
"""The session's default catalog URL for :func:`sql` (after the ``catalog`` argument, before ``$MERE_CATALOG``)."""

METRICS_SCHEMA = (
    "statement string, inserted long, updated long, deleted long, unchanged long, files long, version long, "
    "rows_read long, splits_read long, seconds double, already_committed boolean, stale long"
)
"""The columns of the one-row DataFrame a MERGE, UPDATE or DELETE returns."""
HISTORY_SCHEMA = (
    "version long, timestamp timestamp, operation string, parent long, expired boolean, "
    "summary map<string, string>"
)
"""The columns ``DESCRIBE HISTORY`` returns, newest version first."""

RUNS = "MERGE INTO, UPDATE, DELETE, SELECT (with VERSION AS OF / TIMESTAMP AS OF) and DESCRIBE HISTORY"
_QUERY_SOURCE = "__mere_using_query"
_KEY_SOURCE = "__mere_keys"
_HISTORY = re.compile(
    r"\s*DESC(?:RIBE)?\s+HISTORY\s+(?P<name>.+?)(?:\s+LIMIT\s+(?P<limit>\S+))?\s*", re.I | re.S
)
_TRAVEL = re.compile(
    r"\s+(?P<kind>VERSION|TIMESTAMP)\s+AS\s+OF\s+(?P<value>\d+|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", re.I
)


def sql(
    spark: Any,
    text: str,
    *,
    warehouse: str | None = None,
    catalog: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    partitions: int | None = None,
    attempts: int = MERGE_ATTEMPTS,
    idempotency_key: str | None = None,
    **sources: Any,
) -> Any:
    """Run one statement on mere tables from Spark: row-level changes, time travel, history.

    ::

        sql(spark, '''MERGE INTO sales.orders t USING updates s ON t.order_id = s.order_id
                      WHEN MATCHED AND s.op = 'D' THEN DELETE
                      WHEN MATCHED THEN UPDATE SET qty = s.qty
                      WHEN NOT MATCHED THEN INSERT *''', warehouse=wh)
        sql(spark, "UPDATE sales.orders SET status = 'shipped' WHERE day = '2026-11-21'", warehouse=wh)
        sql(spark, "DELETE FROM sales.orders WHERE qty = 0", warehouse=wh)
        sql(spark, "SELECT day, sum(qty) FROM sales.orders VERSION AS OF 3 GROUP BY day", warehouse=wh)
        sql(spark, "DESCRIBE HISTORY sales.orders", warehouse=wh)

    Names: a table name is a mere table when it is a Spark catalog table bound to one (made with
    ``CREATE TABLE ... USING mere``, CTAS or ``saveAsTable``; named as Spark names it: ``orders`` in the
    current database, ``db.orders``, ``spark_catalog.db.orders``), or when the mere catalog (``warehouse``
    / ``catalog``, else the session's ``spark.mere.warehouse`` / ``spark.mere.catalog``, else
    ``$MERE_WAREHOUSE`` / ``$MERE_CATALOG``) has it: ``namespace.table``, as :func:`mere.sql` names it. A
    name that is both, for two different tables, is refused. The target of MERGE, UPDATE, DELETE and
    DESCRIBE HISTORY must be one: a Spark view, another format's table or a Spark table of the mere format
    that names no mere table is refused before anything runs. A MERGE source is, in this order, a DataFrame given as a keyword
    argument of that name, a mere table, a Spark table or view, or ``USING (subquery) AS alias`` (Spark
    SQL, run by ``spark.sql``). In a query, every name the mere catalog has reads that table (newest
    version, or the one ``VERSION AS OF n`` / ``TIMESTAMP AS OF 'ts'`` names; a time without a zone is in
    the session time zone) and every other name is Spark's.

    MERGE, UPDATE and DELETE read their text as :func:`mere.sql` does (``BY NAME``, ``USING (columns)``,
    ``SET (a, b) = (x, y)``; the refusals of docs/sql.md), except that ``INSERT *`` and ``UPDATE SET *``
    pair columns as Spark SQL does: each column of the table takes the source column of its name (without
    case), a source lacking one is refused, and other source columns are not read. They run as one
    distributed MERGE (:func:`~mere.integrations.spark.merge`): one Spark
    job, one commit. ``UPDATE t SET ... WHERE c`` is the MERGE of the table's keys (read at the version the
    statement starts at, pruned by ``c`` where mere's filter language reads it) with ``WHEN MATCHED AND c
    THEN UPDATE SET ...``; DELETE the same with ``THEN DELETE``. ``WHEN NOT MATCHED BY SOURCE`` needs the
    local :func:`mere.sql`. Anything refused fails before a Spark job runs, and nothing is changed.

    Args:
        spark: The SparkSession.
        text: One statement (a trailing ``;`` is allowed).
        warehouse: The warehouse URI of the mere tables named.
        catalog: The catalog URL (default: the SQLite catalog inside the warehouse).
        storage_options: Options of the storage (such as S3 endpoint and credentials).
        partitions: Spark tasks of a MERGE, UPDATE or DELETE (see :func:`~mere.integrations.spark.merge`).
        attempts: How often a MERGE, UPDATE or DELETE runs again after a concurrent commit changed rows it
            read.
        idempotency_key: Commit a MERGE, UPDATE or DELETE at most once (see
            :meth:`~mere.integrations.spark.SparkMerge.execute`).
        **sources: MERGE sources by the name the statement gives them (Spark DataFrames).

    Returns:
        MERGE, UPDATE, DELETE: a one-row DataFrame of the metrics (:data:`METRICS_SCHEMA`). A query: its
        DataFrame. DESCRIBE HISTORY: one row per version, newest first (:data:`HISTORY_SCHEMA`).

    Raises:
        FilterError: Text that does not parse, or a form mere does not run (docs/sql.md).
        InvalidInput: Another kind of statement, a MERGE source that is no DataFrame, table or view, a
            keyless target, ``WHEN NOT MATCHED BY SOURCE``, sources the statement does not use, a query Spark
            cannot analyse, no warehouse, a target that is a Spark view or another format's Spark table (or
            one of the mere format that names no mere table), or a name that is a Spark table and a table of
            the mere catalog, not the same one.
        NoSuchTable: A target, or a table read with ``VERSION AS OF``, that neither the Spark catalog nor the
            mere catalog has.
        NoSuchVersion: A version or time outside the retained history.
        MergeConflict: The MERGE would change a target row twice or insert a key twice.
        CommitConflict: Concurrent commits changed rows the statement read in every attempt.
    """
    if not isinstance(text, str) or not text.strip():
        raise FilterError("sql() takes one statement as text")
    body = text.strip()
    if body.endswith(";"):
        body = body[:-1].rstrip()
    first = re.match(r"[\s(]*([A-Za-z]+)", body)
    word = first.group(1).upper() if first else ""
    context = _Context(spark, warehouse, catalog, storage_options)
    if word in ("MERGE", "UPDATE", "DELETE"):
        return _change(context, body, partitions, attempts, idempotency_key, sources)
    if sources:
        raise InvalidInput(f"only MERGE takes sources; got {sorted(sources)}")
    if word in ("DESCRIBE", "DESC") and _HISTORY.fullmatch(body):
        return _history(context, body)
    if word in ("SELECT", "WITH", "FROM", "VALUES", "TABLE"):
        return _query(context, body)
    hint = ""
    if word == "INSERT":
        hint = (
            " Insert rows with df.write.format('mere').mode('append').save(name), or MERGE INTO ... WHEN NOT "
            "MATCHED THEN INSERT."
        )
    raise InvalidInput(
        f"mere's sql() runs {RUNS}; got {word or body[:20]!r}.{hint} Run other SQL with spark.sql."
    )


class _Context:
    """Where the statement's mere tables live, and the session."""

    def __init__(
        self, spark: Any, warehouse: str | None, catalog: str | None, storage: Mapping[str, str] | None
    ) -> None:
        self.spark = spark
        conf = spark.conf
        self.warehouse = warehouse or conf.get(WAREHOUSE_CONF, None) or None
        self.catalog = catalog or conf.get(CATALOG_CONF, None) or None
        self.storage = dict(storage or {})

    def ref(self, name: str) -> TableRef:
        try:
            return TableRef.from_options(location_options(name, self.warehouse, self.catalog, self.storage))
        except InvalidInput:
            raise InvalidInput(
                f"{name}: give sql(..., warehouse=URI), set the session's {WAREHOUSE_CONF} or the environment "
                f"variable {ENV_WAREHOUSE}"
            ) from None

    def has(self, name: str) -> bool:
        """Whether the mere catalog has the table (False without any warehouse, or for a name mere cannot
        hold, such as Spark's three-part ``catalog.schema.table``)."""
        if not (self.warehouse or os.environ.get(ENV_WAREHOUSE)):
            return False
        try:
            return bool(self.ref(name).connect().exists(name))
        except MereError:
            return False

    def spark_entry(self, name: str) -> _SparkEntry:
        """What the Spark catalog holds under ``name`` (``t``, ``db.t``, ``spark_catalog.db.t``)."""
        from pyspark.errors import AnalysisException, ParseException

        try:
            if not self.spark.catalog.tableExists(name):
                return _SparkEntry("none")
            found = self.spark.catalog.getTable(name)
            if found.isTemporary or str(found.tableType).upper() == "VIEW":
                return _SparkEntry("view")
            schema = self.spark.table(name).schema
        except (AnalysisException, ParseException):
            return _SparkEntry("none")  # a name Spark cannot read as a table: not Spark's
        try:
            return _SparkEntry("mere", ref_from_schema(schema, f"Spark table {name}"))
        except InvalidInput:
            return _SparkEntry("other")  # another format's table, or one of mere's that names no table

    def resolve(self, name: str) -> TableRef | None:
        """The mere table ``name`` names: a Spark catalog table bound to one (``CREATE TABLE ... USING
        mere``), else the mere catalog's ``namespace.table``; None when it names neither.

        Raises:
            InvalidInput: Both name a mere table, and not the same one.
        """
        entry = self.spark_entry(name)
        mine = self.ref(name) if self.has(name) else None
        if entry.ref is not None and mine is not None and not same_table(entry.ref, mine):
            raise InvalidInput(
                f"{name} is ambiguous: the Spark table {name} is the mere table {entry.ref.name} in "
                f"{entry.ref.warehouse!r}, and the mere catalog in {mine.warehouse!r} has a table {name} of its "
                f"own; give the Spark table another name: DROP TABLE {name} (the mere table stays) and CREATE "
                f"TABLE <name> USING mere OPTIONS (table '{entry.ref.name}', warehouse '...') (nothing was run)"
            )
        return entry.ref or mine

    def target(self, name: str, kind: str) -> TableRef:
        """The mere table a MERGE, UPDATE, DELETE or DESCRIBE HISTORY names; refused before anything runs
        when ``name`` is no mere table."""
        ref = self.resolve(name)
        if ref is not None:
            return ref
        entry = self.spark_entry(name)
        how = (
            f"run {kind} on it with spark.sql"
            if kind != "DESCRIBE HISTORY"
            else "Spark keeps no history of it"
        )
        if entry.kind == "view":
            raise InvalidInput(
                f"{name} is a Spark view, not a table: mere's sql() runs {kind} on a mere table (a Spark table "
                "made with CREATE TABLE ... USING mere, or namespace.table of the mere catalog); name the table "
                "the view reads (nothing was run)"
            )
        if entry.kind == "other":
            provider = table_format(self.spark, name)
            if provider == FORMAT_NAME:
                raise InvalidInput(NO_BINDING.format(what=f"Spark table {name}") + " (nothing was run)")
            raise InvalidInput(
                f"{name} is a Spark table of format {provider or 'unknown'}, not a mere table: {how} "
                "(nothing was run)"
            )
        return self.ref(name)  # the mere catalog's name: opening it says which table is missing

    def read(self, ref: TableRef, version: int | None = None, as_of: Any = None) -> Any:
        return read_table(
            self.spark,
            ref.name,
            warehouse=ref.warehouse,
            catalog=ref.catalog,
            storage_options=dict(ref.storage_options),
            version=version,
            as_of=as_of,
        )


@dataclass(frozen=True)
class _SparkEntry:
    """A name in the Spark catalog: ``none``, a ``view``, a table bound to a ``mere`` table (``ref``), or
    an ``other`` table (another format's, or one of the mere format that names no mere table)."""

    kind: str
    ref: TableRef | None = None


# -- MERGE, UPDATE, DELETE ------------------------------------------------------------------------


def _lift_query(text: str) -> tuple[str, str | None]:
    """A MERGE's ``USING (subquery)`` cut out of the text (for Spark to run), a placeholder name left."""
    try:
        tokens = MereDialect().tokenize(text)
    except TokenError as exc:
        raise FilterError(f"cannot read the statement ({exc}) (statement: {text!r})") from None
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif tok.token_type == TokenType.USING and depth == 0:
            if i + 1 >= len(tokens) or tokens[i + 1].token_type != TokenType.L_PAREN:
                return text, None
            open_tok, level = tokens[i + 1], 0
            for j in range(i + 1, len(tokens)):
                if tokens[j].token_type == TokenType.L_PAREN:
                    level += 1
                elif tokens[j].token_type == TokenType.R_PAREN:
                    level -= 1
                    if level == 0:
                        query = text[open_tok.end + 1 : tokens[j].start].strip()
                        rest = text[tokens[j].end + 1 :]
                        return text[: open_tok.start] + _QUERY_SOURCE + rest, query
            raise FilterError(f"unbalanced parentheses after USING (statement: {text!r})")
    return text, None


def _spark_error(exc: Exception, what: str) -> MereError:
    """A Spark parse or analysis error as mere's (the first line of Spark's message kept)."""
    from pyspark.errors import AnalysisException, ParseException

    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, ParseException):
        return FilterError(f"Spark cannot parse the {what}: {first}")
    if isinstance(exc, AnalysisException) and "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
        return NoSuchTable(
            f"{first} (a mere table is a Spark table made with CREATE TABLE ... USING mere, or namespace.table "
            "in the warehouse given to sql())"
        )
    return InvalidInput(f"Spark cannot run the {what}: {first}")


def _spark_sql(spark: Any, text: str, what: str, **frames: Any) -> Any:
    from pyspark.errors import AnalysisException, ParseException

    try:
        return spark.sql(text, **frames)
    except (ParseException, AnalysisException) as exc:
        raise _spark_error(exc, what) from None


def _source(context: _Context, statement: MergeStatement, query: str | None, sources: dict[str, Any]) -> Any:
    from pyspark.sql import DataFrame

    name = statement.source
    if query is not None and name == _QUERY_SOURCE:
        if statement.source_alias == _QUERY_SOURCE:
            raise FilterError("MERGE ... USING (subquery) needs an alias: USING (SELECT ...) AS s")
        return _spark_sql(context.spark, query, "MERGE source query")
    if name in sources:
        given = sources[name]
        if not isinstance(given, DataFrame):
            raise InvalidInput(
                f"MERGE source {name!r} must be a Spark DataFrame, got {type(given).__name__}; for Arrow, pandas "
                "or Polars data use mere.sql"
            )
        return given
    if context.has(name):
        return context.read(context.ref(name))
    if context.spark.catalog.tableExists(name):
        return context.spark.table(name)
    given_names = ", ".join(sorted(sources)) or "none"
    raise InvalidInput(
        f"MERGE source {name!r} is neither a DataFrame given to sql() (given: {given_names}), nor a table of the "
        f"mere catalog, nor a Spark table or view"
    )


def _change(
    context: _Context,
    text: str,
    partitions: int | None,
    attempts: int,
    key: str | None,
    sources: dict[str, Any],
) -> Any:
    lifted, query = _lift_query(text) if text.lstrip()[:5].upper() == "MERGE" else (text, None)
    statement = parse_sql(lifted)
    kind = type(statement).__name__.removesuffix("Statement").upper()
    ref = context.target(statement.table, kind)
    table = ref.open()
    if isinstance(statement, MergeStatement):
        source = _source(context, statement, query, sources)
        unused = sorted(set(sources) - {statement.source})
        if unused:
            raise InvalidInput(f"sources {unused} are not used by the statement")
        spec = statement.spec(table.spec.schema.names, source.columns, star="name")  # Spark SQL's ``*``
        builder = SparkMerge(
            context.spark,
            source,
            ref,
            spec.on,
            spec.source_alias,
            spec.target_alias,
            partitions,
            attempts,
            using_columns=spec.using_columns,
        )
        for clause in spec.clauses:
            builder.add_clause(clause)
        metrics = builder.execute(idempotency_key=key)
        refresh_cached(context.spark, statement.table)
        return _metrics(context.spark, "MERGE", metrics)
    if sources:
        raise InvalidInput(f"only MERGE takes sources; got {sorted(sources)}")
    statement = statement.resolved(table.spec.schema.names)  # names without case, as Spark SQL reads them
    builder = _keyed_merge(context, ref, table, statement, partitions, attempts)
    metrics = builder.execute(idempotency_key=key)
    refresh_cached(context.spark, statement.table)
    return _metrics(context.spark, kind, metrics)


def _keyed_merge(
    context: _Context,
    ref: TableRef,
    table: Table,
    statement: UpdateStatement | DeleteStatement,
    partitions: int | None,
    attempts: int,
) -> SparkMerge:
    """UPDATE / DELETE as the MERGE of the table's own keys: WHEN MATCHED AND <where> THEN UPDATE / DELETE.

    The keys are read at the table's current version, pruned by the WHERE text where mere's filter language
    reads it (the clause condition decides each row either way).
    """
    kind = "UPDATE" if isinstance(statement, UpdateStatement) else "DELETE"
    spec = table.spec
    if not spec.has_primary_key:
        raise InvalidInput(
            f"{table.name} has no primary key: Spark's {kind} runs as a MERGE by key; run it with the local "
            f"mere.sql(...) (Table.{kind.lower()}) instead"
        )
    where = statement.where
    clause = (
        MergeClause.of("matched", "update", where, dict(statement.assignments))
        if isinstance(statement, UpdateStatement)
        else MergeClause.of("matched", "delete", where)
    )
    prune: str | None = None
    if where is not None:
        try:
            table.scan(columns=list(spec.primary_key), filter=where).filter_parts()
            prune = where
        except MereError:
            prune = None  # the condition reads every key's row instead
    keys = read_table(
        context.spark,
        table.name,
        warehouse=ref.warehouse,
        catalog=ref.catalog,
        storage_options=dict(ref.storage_options),
        columns=list(spec.primary_key),
        filter=prune,
        version=table.version,
    )
    renamed = [f"__mere_key_{i}" for i in range(len(spec.primary_key))]
    keys = keys.toDF(*renamed)
    alias = statement.alias
    on = " AND ".join(
        f"{format_ident(alias)}.{format_ident(k)} = {_KEY_SOURCE}.{r}"
        for k, r in zip(spec.primary_key, renamed)
    )
    builder = SparkMerge(context.spark, keys, ref, on, _KEY_SOURCE, alias, partitions, attempts)
    builder.add_clause(clause)
    return builder


def _metrics(spark: Any, statement: str, metrics: MergeMetrics) -> Any:
    m = asdict(metrics)
    row = (
        statement,
        m["inserted"],
        m["updated"],
        m["deleted"],
        m["unchanged"],
        m["files"],
        m["version"],
        m["rows_read"],
        m["splits_read"],
        float(m["seconds"]),
        bool(m["already_committed"]),
        m["stale_rows"],
    )
    return spark.createDataFrame([row], METRICS_SCHEMA)


# -- queries ----------------------------------------------------------------------------------------


def _query(context: _Context, text: str) -> Any:
    """A query with every mere table it names bound to a read of the version it asks for."""
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except (ParseError, TokenError):
        return _spark_sql(context.spark, text, "query")  # Spark reads more than sqlglot: Spark decides
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    spans: list[tuple[int, int, str, Any]] = []
    for node in tree.find_all(exp.Table):
        parts = node.parts
        if not parts or not all(isinstance(p, exp.Identifier) for p in parts) or not node.name:
            continue
        name = ".".join(p.name for p in parts)
        travel = node.args.get("version")
        if len(parts) == 1 and name.lower() in ctes:
            continue
        first, last = parts[0].meta.get("start"), parts[-1].meta.get("end")
        if not isinstance(first, int) or not isinstance(last, int):
            continue  # no position to rewrite: Spark resolves the name
        ref = context.resolve(name)
        if ref is None:
            if travel is not None:
                raise NoSuchTable(
                    f"{name} is not a table of the mere catalog in {context.ref(name).warehouse!r} nor a Spark "
                    "table of the mere format: sql() reads VERSION AS OF / TIMESTAMP AS OF of mere tables "
                    "(namespace.table, or a Spark table made with CREATE TABLE ... USING mere); for Spark's own "
                    "tables use spark.sql"
                )
            continue
        start, end = first, last + 1
        version: int | None = None
        as_of: Any = None
        if travel is not None:
            m = _TRAVEL.match(text, end)
            if m is None:
                raise FilterError(
                    f"{name}: VERSION AS OF takes an integer and TIMESTAMP AS OF a quoted time, such as "
                    "TIMESTAMP AS OF '2026-11-21 08:00:00'"
                )
            end = m.end()
            value = m.group("value")
            if m.group("kind").upper() == "VERSION":
                digits = value[1:-1].strip() if value[0] in "'\"" else value  # Spark takes VERSION AS OF '3'
                if not digits.isascii() or not digits.isdigit():
                    raise FilterError(f"{name}: VERSION AS OF takes a version number, got {value}")
                version = int(digits)
            else:
                as_of = value[1:-1]
        alias = "" if node.alias else f" AS {_backtick(parts[-1].name)}"
        spans.append((start, end, alias, context.read(ref, version=version, as_of=as_of)))
    if not spans:
        return _spark_sql(context.spark, text, "query")
    spans.sort(key=lambda s: s[0])
    out, frames, at = [], {}, 0
    for i, (start, end, alias, frame) in enumerate(spans):
        out.append(_escape(text[at:start]))
        out.append(f"{{__mere_{i}}}{alias}")
        frames[f"__mere_{i}"] = frame
        at = end
    out.append(_escape(text[at:]))
    return _spark_sql(context.spark, "".join(out), "query", **frames)


def _escape(text: str) -> str:
    """Text for PySpark's ``spark.sql(text, **frames)`` formatting: braces doubled."""
    return text.replace("{", "{{").replace("}", "}}")


def _backtick(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- DESCRIBE HISTORY ---------------------------------------------------------------------------------


def _history(context: _Context, text: str) -> Any:
    m = _HISTORY.fullmatch(text)
    assert m is not None
    limit = m.group("limit")
    if limit is not None and not (limit.isascii() and limit.isdigit()):
        raise InvalidInput(f"DESCRIBE HISTORY ... LIMIT takes a count of versions, got {limit!r}")
    try:
        tree = sqlglot.parse_one(f"SELECT * FROM {m.group('name')}", read="spark")
    except (ParseError, TokenError):
        raise FilterError(f"DESCRIBE HISTORY takes a table name, got {m.group('name')!r}") from None
    tables = list(tree.find_all(exp.Table))
    if len(tables) != 1 or not isinstance(tree, exp.Select) or tree.args.get("where"):
        raise FilterError(f"DESCRIBE HISTORY takes a table name, got {m.group('name')!r}")
    name = ".".join(p.name for p in tables[0].parts)
    table = context.target(name, "DESCRIBE HISTORY").open()
    snapshots = list(reversed(table.history()))
    if limit is not None:
        snapshots = snapshots[: int(limit)]
    rows = [
        (
            s.version,
            s.committed_at,
            s.operation,
            s.parent,
            s.expired,
            {str(k): _text(v) for k, v in s.summary.items()},
        )
        for s in snapshots
    ]
    return context.spark.createDataFrame(rows, HISTORY_SCHEMA)


def _text(value: Any) -> str:
    """A summary value as text (JSON for anything but a string)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
