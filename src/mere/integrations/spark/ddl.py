"""Spark catalog tables of the mere format: ``CREATE TABLE ... USING mere``, CTAS and ``saveAsTable``.

What PySpark 4.x lets a Python data source see of a catalog table (read in PySpark's Scala sources; the
README's section "Spark: what works and the limits" cites them):

- ``CREATE TABLE t USING mere OPTIONS (...) TBLPROPERTIES (...)`` *without* a column list is the one
  statement that runs the source at creation: the session catalog asks it for the table's schema, handing
  it the table properties (``OPTIONS`` both as ``option.<k>`` and ``<k>``, ``TBLPROPERTIES`` as given, plus
  Spark's own ``provider``, ``owner``, ``location``). :func:`bind` creates or binds the mere table there.
- Reads and writes of the Spark table get no options (only those of ``WITH (...)`` on the statement) and
  the schema Spark stored at creation, with each column's metadata. So :func:`bind` stores the mere
  table's location in every column's metadata (key :data:`BINDING_KEY`), and :func:`ref_from_schema`
  finds it again for ``SELECT``. Writes never trust it: where the query's columns already match the
  table's, Spark passes the query's own metadata (that of another mere table, say), so the hook names the
  table of each ``INSERT`` in its ``WITH (...)`` options (:func:`name_insert_target`) and a write that names
  none is refused (:func:`unnamed_write`).
- With a column list, ``AS SELECT`` or ``saveAsTable`` Spark calls nothing of the source at creation and
  hands the later write no table options, so nothing could say where the rows go. :func:`install_ddl_hook`
  (installed by ``register`` and ``local_session``) takes these statements in PySpark itself: it parses
  them with Spark's own parser, creates (or binds) the mere table first, then makes the Spark table
  through the column-less form above, and writes the rows of ``AS SELECT`` / the DataFrame. A failure
  leaves neither the Spark table nor a mere table behind. Made around the hook (Spark Connect, a session
  without ``register``), such a statement cannot be refused when it runs, as nothing of the source runs:
  the entry names no mere table, and its first read or write is refused saying how to fix it
  (:data:`NO_BINDING`).
- ``saveAsTable(mode="overwrite")`` of an existing table replaces its rows and keeps the table, where Spark
  would drop and recreate it: it runs only when it asks for the table as it is (:func:`check_overwrite`).
- ``DROP TABLE`` of such a table calls nothing of the source: it removes Spark's entry only and the mere
  table keeps its data (:meth:`mere.Catalog.drop_table` drops it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

import mere
from mere.errors import InvalidInput, NoSuchNamespace, NoSuchTable, TableExists
from mere.integrations.spark.options import (
    FORMAT_NAME,
    TableRef,
    column_list_option,
    int_option,
    lower_options,
    merge_operators_option,
)
from mere.integrations.spark.sink import check_layout
from mere.integrations.spark.types import spark_schema
from mere.spec import MERE_PREFIXES
from mere.table.table import Table
from mere.write.cast import relax_nested

BINDING_KEY = "mere.table"
"""Column metadata key of a Spark catalog table's columns: the mere table's location (JSON)."""

# Table properties Spark itself adds to those of CREATE TABLE (not the user's options).
_SPARK_PROPERTIES = frozenset(
    {"provider", "owner", "comment", "external", "is_managed_location", "collation", "transient_lastddltime"}
)
DDL_OPTIONS = (
    "primary_key",
    "partition_by",
    "buckets",
    "cdc_column",
    "merge_operators",
    "sequence_by",
    "create",
)
"""Options (or table properties) of ``CREATE TABLE ... USING mere`` that describe the table's layout."""
_LOCATION = ("table", "warehouse", "catalog")

NO_BINDING = (
    "{what} names no mere table. It was made by CREATE TABLE with a column list (or CTAS, saveAsTable) in a "
    "session without mere's hook (Spark Connect, or before mere.integrations.spark.register(spark) ran): "
    "Spark then calls no code of a Python data source, so no mere table was made, and it never hands the "
    "source a catalog table's name or OPTIONS. To fix it, DROP TABLE it (it holds no rows; DROP removes only "
    "Spark's entry), then either create it again in a classic session after register(spark): CREATE TABLE t "
    "(columns) USING mere OPTIONS (warehouse '...', primary_key '...'), or (Spark Connect too) make the mere "
    "table first (mere.connect(warehouse).create_table(...) or df.write.format('mere').save('ns.name')) and "
    "bind it without a column list: CREATE TABLE t USING mere OPTIONS (table 'ns.name', warehouse '...'). "
    "Reads and writes by name need no Spark table: spark.read.format('mere').load('ns.name')"
)


def same_table(a: TableRef, b: TableRef) -> bool:
    """Whether two references name one mere table (the same name in the same warehouse and catalog).

    Args:
        a: One reference.
        b: The other.

    Returns:
        True when both name the same table (a local warehouse compared as its real path).
    """

    def where(warehouse: str) -> str:
        w = warehouse.rstrip("/")
        return w if "://" in w else os.path.realpath(w)

    return (
        a.name == b.name
        and where(a.warehouse) == where(b.warehouse)
        and (a.catalog or None) == (b.catalog or None)
        and dict(a.storage_options) == dict(b.storage_options)
    )


def is_table_creation(options: Mapping[str, str]) -> bool:
    """Whether Spark asks for the schema of a catalog table it creates (``CREATE TABLE ... USING mere``
    without a column list, ``spark.catalog.createTable``): only then does it add the property ``provider``."""
    return lower_options(options).get("provider", "").strip().lower() == FORMAT_NAME


def creation_options(properties: Mapping[str, str]) -> dict[str, str]:
    """mere's options from a Spark table's properties: ``OPTIONS`` (``option.<k>``) and ``TBLPROPERTIES``.

    Raises:
        InvalidInput: ``LOCATION`` was given, an option mere does not read, or OPTIONS and TBLPROPERTIES
            disagree on one.
    """
    props = lower_options(properties)
    if "location" in props or "path" in props:
        raise InvalidInput(
            "CREATE TABLE ... USING mere takes no LOCATION: a mere table lives in its warehouse; give "
            "OPTIONS (warehouse '...', table 'ns.name') (nothing was created)"
        )
    given: dict[str, str] = {}
    for key, value in props.items():
        if key in _SPARK_PROPERTIES:
            continue
        name = key.removeprefix("option.")
        if name in given and given[name] != value:
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: {name!r} is given twice, as {given[name]!r} and {value!r} "
                "(OPTIONS and TBLPROPERTIES); give it once (nothing was created)"
            )
        given[name] = value
    allowed = {*_LOCATION, *DDL_OPTIONS}
    for key in given:
        if key not in allowed and not key.startswith("storage."):
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: unknown option or property {key!r}; it reads "
                f"{', '.join(sorted(allowed))} and storage.<key> (nothing was created)"
            )
    return given


def location_of(ref: TableRef) -> dict[str, str]:
    """The options that name ``ref``'s table (what a bound column's metadata holds)."""
    out = {"table": ref.name, "warehouse": ref.warehouse}
    if ref.catalog:
        out["catalog"] = ref.catalog
    out.update({f"storage.{k}": v for k, v in ref.storage_options})
    return out


def bind(options: Mapping[str, str]) -> StructType:
    """``CREATE TABLE t USING mere OPTIONS (...)`` without columns: bind the mere table, checking the layout
    given, and return the Spark schema that remembers it.

    Raises:
        InvalidInput: The options name no table, or Spark gave a LOCATION or unknown options.
        NoSuchTable: The mere table does not exist (Spark gave no columns to create it with).
        TableExists: It exists with another layout.
    """
    opts = creation_options(options)
    if not opts.get("table"):
        raise InvalidInput(
            "CREATE TABLE ... USING mere needs OPTIONS (table 'ns.name'): Spark does not tell a Python data "
            "source the name of the table it creates (nothing was created)"
        )
    ref = TableRef.from_options(opts)
    table, _ = open_or_create(ref, opts, None)
    return bound_schema(ref, table)


def open_or_create(
    ref: TableRef, opts: Mapping[str, str], schema: StructType | None, declared: bool = False
) -> tuple[Table, bool]:
    """The mere table ``ref`` names, checked against the layout ``opts`` give, or (with the Spark columns
    ``schema``; ``declared``: listed by a CREATE TABLE) created; and whether it was created."""
    try:
        table = ref.open()
    except (NoSuchTable, NoSuchNamespace):
        if schema is None:
            raise NoSuchTable(
                f"{ref.name} does not exist in warehouse {ref.warehouse!r}, and CREATE TABLE without a column "
                "list gives no columns to create it with: list them, CREATE TABLE t (id BIGINT, ...) USING "
                "mere ..., or create it with mere first (nothing was created)"
            ) from None
        return create(ref, opts, schema, declared), True
    check_layout(table, opts)
    sequence = column_list_option("sequence_by", opts.get("sequence_by"))
    if sequence is not None and tuple(sequence) != tuple(table.spec.sequence_by):
        raise TableExists(
            f"{table.name} already exists with a different spec: sequence_by {tuple(sequence)!r} vs the "
            f"table's {tuple(table.spec.sequence_by)!r}"
        )
    return table, False


def create(ref: TableRef, opts: Mapping[str, str], schema: StructType, declared: bool = False) -> Table:
    """A new mere table of the Spark columns ``schema`` and the layout ``opts`` give. ``declared``: the
    columns were listed (CREATE TABLE t (...)), and their NOT NULL is kept."""
    keys = set(column_list_option("primary_key", opts.get("primary_key")) or ())
    arrow = to_arrow_schema(
        StructType([StructField(f.name, f.dataType, f.nullable) for f in schema]), timezone="UTC"
    )
    # As Spark's file sources store a query's columns: columns other than keys take NULL whatever the plan
    # proved. A column declared NOT NULL stays so.
    arrow = pa.schema(
        [
            f.with_type(relax_nested(f.type)).with_nullable(
                f.nullable or (f.name not in keys and not declared)
            )
            for f in arrow
        ]
    )
    return ref.connect().create_table(
        ref.name,
        arrow,
        primary_key=column_list_option("primary_key", opts.get("primary_key")),
        partition_by=column_list_option("partition_by", opts.get("partition_by")),
        buckets=int_option("buckets", opts.get("buckets")),
        merge_operators=merge_operators_option("merge_operators", opts.get("merge_operators")),
        cdc_column=opts.get("cdc_column") or None,
        sequence_by=column_list_option("sequence_by", opts.get("sequence_by")),
    )


def bound_schema(ref: TableRef, table: Table) -> StructType:
    """The table's Spark schema, each column carrying the table's location (:data:`BINDING_KEY`) and a
    comment saying its part in the layout (what ``DESCRIBE TABLE`` shows)."""
    spec = table.spec
    binding = json.dumps(location_of(ref), sort_keys=True)
    fields = []
    for f in spark_schema(table.schema).fields:
        roles = []
        if f.name in spec.primary_key:
            roles.append(f"primary key ({spec.buckets} buckets)")
        if f.name in spec.partition_by:
            roles.append("partition column")
        if f.name in spec.merge_operators:
            roles.append(f"merge operator {spec.merge_operators[f.name]}")
        if f.name in spec.sequence_by:
            roles.append("sequence_by")
        meta = {BINDING_KEY: binding}
        if roles:
            meta["comment"] = "mere " + ", ".join(roles)
        fields.append(StructField(f.name, f.dataType, f.nullable, meta))
    return StructType(fields)


def ref_from_schema(schema: StructType, what: str) -> TableRef:
    """The mere table a Spark catalog table's columns name (see :func:`bound_schema`).

    Raises:
        InvalidInput: The columns name no table, or not all the same one (rows selected from a mere table
            into a Spark table that names none carry the source's metadata: they must not go back there).
    """
    found = {f.metadata.get(BINDING_KEY) for f in schema.fields}
    if len(found) != 1 or None in found:
        raise InvalidInput(NO_BINDING.format(what=what))
    (binding,) = found
    return TableRef.from_options(json.loads(str(binding)))


UNNAMED_WRITE = (
    "{what} into a Spark table of the mere format names no table: Spark hands a Python data source neither "
    "the table's name nor its OPTIONS, and the column metadata it passes may be the source query's own "
    "(rows selected from another mere table would go back there). Run INSERT INTO / INSERT OVERWRITE through "
    "spark.sql after mere.integrations.spark.register(spark), which names the table, or write with "
    "df.write.format('mere').mode('append').saveAsTable('t') or .save('ns.name') (nothing was written)"
)


def unnamed_write(schema: StructType, what: str) -> TableRef:
    """Refuse a write that names no table (see :data:`UNNAMED_WRITE`); it never returns.

    Raises:
        InvalidInput: Always; with :data:`NO_BINDING` when the columns name no mere table at all.
    """
    ref_from_schema(schema, what)  # raises NO_BINDING for a Spark table that names no mere table
    raise InvalidInput(UNNAMED_WRITE.format(what=what))


# ---------------------------------------------------------------------------------------------
# The statements Spark runs without the source: taken in PySpark before Spark sees them

_CREATE = re.compile(r"^\s*(create|replace)\b", re.IGNORECASE)
_USING = re.compile(r"\busing\s+`?mere`?(\s|$|`)", re.IGNORECASE)
_HOOKED = "_mere_ddl_hook"
# A table name as a statement gives it: dotted parts, each a word or a backquoted name.
_TABLE_NAME = r"((?:`(?:[^`]|``)*`|[\w]+)(?:\s*\.\s*(?:`(?:[^`]|``)*`|[\w]+))*)"
_INSERT = re.compile(r"^\s*insert\s+(?:into|overwrite)\s+(?:table\s+)?" + _TABLE_NAME, re.IGNORECASE)
_INSERT_ANYWHERE = re.compile(_INSERT.pattern.removeprefix("^"), re.IGNORECASE)
_WITH_OPTIONS = re.compile(r"\s*with\s*\(", re.IGNORECASE)
_CTE_HEAD = re.compile(r"\s*with\s+(?:recursive\s+)?", re.IGNORECASE)
_CTE_NAME = re.compile(r"\s*(?:`(?:[^`]|``)*`|[A-Za-z_]\w*)\s*", re.IGNORECASE)
_CTE_AS = re.compile(r"\s*as\s*\(", re.IGNORECASE)


def _closing(text: str, start: int) -> int | None:
    """The index just after the parenthesis that closes the one before ``start`` (quotes skipped)."""
    depth, i = 1, start
    while i < len(text):
        c = text[i]
        if c in "'\"`":
            end = i + 1
            while end < len(text) and text[end] != c:
                end += 2 if text[end] == "\\" and c != "`" else 1
            i = end + 1
            continue
        depth += {"(": 1, ")": -1}.get(c, 0)
        i += 1
        if depth == 0:
            return i
    return None


def _after_common_table_expressions(text: str) -> int | None:
    """Where the statement after ``WITH name [(columns)] AS (...) [, ...]`` starts, or None if ``text``
    does not open with such a list."""
    head = _CTE_HEAD.match(text)
    if head is None:
        return None
    at = head.end()
    while True:
        name = _CTE_NAME.match(text, at)
        if name is None:
            return None
        at = name.end()
        if text.startswith("(", at):  # a column list
            closed = _closing(text, at + 1)
            if closed is None:
                return None
            at = closed
        body = _CTE_AS.match(text, at)
        if body is None:
            return None
        closed = _closing(text, body.end())
        if closed is None:
            return None
        at = closed
        more = re.compile(r"\s*,").match(text, at)
        if more is None:
            return at
        at = more.end()


_ALTER_COLUMNS = re.compile(
    r"^\s*alter\s+table\s+" + _TABLE_NAME + r"\s+(add|drop|rename\s+column|alter|change|replace)\b",
    re.IGNORECASE,
)


_LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)+", re.DOTALL)


def _without_leading_comments(text: str) -> str:
    """The statement without the comments (``--`` lines, ``/* */`` blocks) and blanks before it."""
    return _LEADING_COMMENTS.sub("", text, count=1)


_ALTER_PROPERTIES = re.compile(
    r"^\s*alter\s+table\s+" + _TABLE_NAME + r"\s+(?:set|unset)\s+(?:tblproperties|options)\s*"
    r"(?:if\s+exists\s*)?\(",
    re.IGNORECASE,
)


def _bound_table(spark: Any, name: str) -> TableRef | None:
    """The mere table the Spark table ``name`` is bound to; None for a table Spark does not know here
    (Spark's own error comes with the statement) or one bound to no mere table."""
    try:
        schema = spark.table(name).schema
    except Exception:
        return None
    bindings = {f.metadata.get(BINDING_KEY) for f in schema.fields}
    if len(bindings) != 1 or None in bindings:
        return None
    return TableRef.from_options({str(k): str(v) for k, v in json.loads(str(bindings.pop())).items()})


def refuse_layout_properties(spark: Any, text: str) -> None:
    """Refuse ``ALTER TABLE t SET|UNSET TBLPROPERTIES (...)`` of a bound mere table naming one of mere's
    options or properties (``buckets``, ``primary_key``, ``table``, ``write.*``, ...): Spark's entry alone
    would change, and the mere table would not follow. Other properties (the user's own) go to Spark's
    entry as Spark writes them.

    Raises:
        InvalidInput: ``t`` is bound to a mere table and a key is mere's (nothing was changed).
    """
    m = _ALTER_PROPERTIES.match(text)
    if m is None:
        return
    read = _option_list(text, m.end())
    if read is None:
        return  # a list this reader cannot follow: Spark reads it (and refuses what it cannot parse)
    keys = [k.lower() for k, _, _ in read[0]]
    mine = [
        k
        for k in keys
        if k in DDL_OPTIONS or k in _LOCATION or k == "path" or k.startswith(("storage.", *MERE_PREFIXES))
    ]
    if not mine:
        return
    bound = _bound_table(spark, m.group(1))
    if bound is None:
        return
    raise InvalidInput(
        f"ALTER TABLE {m.group(1)} ... TBLPROPERTIES {mine} would change only Spark's entry of the mere table "
        f"{bound.name}, not the table: a layout is fixed when the table is made, and mere's own properties "
        "are set with mere.connect(warehouse).table(name).set_properties({...}) (nothing was changed)"
    )


def refuse_column_changes(spark: Any, text: str) -> None:
    """Refuse ``ALTER TABLE t ADD/DROP/RENAME/ALTER/CHANGE/REPLACE COLUMN(S) ...`` of a bound mere table: it
    would change Spark's entry alone, which then no longer matches the mere table it reads and writes.

    Raises:
        InvalidInput: ``t`` is bound to a mere table (nothing was changed).
    """
    m = _ALTER_COLUMNS.match(text)
    if m is None:
        return
    bound = _bound_table(spark, m.group(1))
    if bound is None:
        return
    raise InvalidInput(
        f"ALTER TABLE {m.group(1)} ... would change only Spark's entry of the mere table {bound.name}; change "
        "its columns with mere (mere.connect(warehouse).table(name).evolve() or add_column), then DROP TABLE "
        "the Spark table and CREATE TABLE ... USING mere OPTIONS (...) to bind it again (nothing was changed)"
    )


def name_insert_target(spark: Any, text: str) -> str:
    """``INSERT INTO|OVERWRITE t ...`` with the mere table ``t`` is bound to named in ``WITH (...)`` options
    (the writer's only sure way to know it); any other statement as given.

    Location options the statement gives itself (``table``, ``warehouse``, ``catalog``, ``storage.<k>``, in
    any case) must name that same table: they are then given once, not twice.

    Raises:
        InvalidInput: The statement's own options name another mere table than ``t`` (nothing is written).
    """
    m = _INSERT.match(text)
    if m is None:
        after = _after_common_table_expressions(text)  # WITH s AS (...) INSERT INTO t ...
        m = None if after is None else _INSERT_ANYWHERE.match(text, after)
    if m is None:
        return text
    try:
        schema = spark.table(m.group(1)).schema
    except Exception:  # not a table Spark knows here: Spark's own error comes with the statement
        return text
    bindings = {f.metadata.get(BINDING_KEY) for f in schema.fields}
    if len(bindings) != 1 or None in bindings:
        return text  # not a bound mere table
    binding = {str(k): str(v) for k, v in json.loads(str(bindings.pop())).items()}
    given = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in sorted(binding.items()))
    end = m.end(1)
    existing = _WITH_OPTIONS.match(text, end)
    if existing is None:
        return f"{text[:end]} WITH ({given}){text[end:]}"
    read = _option_list(text, existing.end())
    if (
        read is None
    ):  # a list this reader cannot follow: Spark reads it, and a write naming no table is refused
        return text
    items, close = read
    location = {k.lower(): v for k, v, _ in items if _is_location(k)}
    if location:
        bound = TableRef.from_options(binding)
        try:
            wanted = TableRef.from_options({**binding, **{k: v or "" for k, v in location.items()}})
        except InvalidInput:
            wanted = None
        if wanted is None or not same_table(wanted, bound):
            shown = ", ".join(f"{k} {v!r}" for k, v in sorted(location.items()))
            raise InvalidInput(
                f"{m.group(1)} is the mere table {bound.name} in {bound.warehouse!r}, and the statement's WITH "
                f"options ({shown}) name another; leave table, warehouse and catalog out of WITH (...), the "
                "Spark table names its mere table, or insert into the Spark table bound to the other one, or "
                "write it by name: df.write.format('mere').save('ns.name') (nothing was written)"
            )
    kept = [source for key, _, source in items if not _is_location(key)]
    return f"{text[: existing.end()]}{', '.join([given, *kept])}{text[close:]}"


def _is_location(key: str) -> bool:
    k = key.lower()
    return k in (*_LOCATION, "path") or k.startswith("storage.")


_OPTION_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<num>[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[A-Za-z]*)"""
    r"""|(?P<ident>`(?:[^`]|``)*`|[A-Za-z_]\w*)|(?P<punct>[=,.)]))""",
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _unquote(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1].replace("``", "`")
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _option_list(text: str, start: int) -> tuple[list[tuple[str, str | None, str]], int] | None:
    """Spark's ``WITH (...)`` property list from ``start`` (just after the parenthesis): each property's
    key, value (None when it has none) and text, and where the closing parenthesis is; None for a list it
    cannot read (Spark's grammar: ``key [=] [value]`` items, a key an identifier path or a string, a value a
    string, number or boolean)."""
    tokens: list[tuple[str, str, int, int]] = []
    at = start
    while True:
        m = _OPTION_TOKEN.match(text, at)
        if m is None:
            return None
        kind = next(k for k, v in m.groupdict().items() if v is not None)
        tokens.append((kind, m.group(kind), m.start(kind), m.end(kind)))
        at = m.end()
        if kind == "punct" and m.group(kind) == ")":
            break
    items: list[tuple[str, str | None, str]] = []
    i = 0
    if tokens[0][1] == ")":
        return items, tokens[0][2]
    while True:
        first = i
        kind, tok, _, _ = tokens[i]
        if kind == "str":
            key = _unquote(tok)
            i += 1
        elif kind == "ident":
            parts = [_unquote(tok) if tok.startswith("`") else tok]
            i += 1
            while tokens[i][1] == "." and tokens[i + 1][0] == "ident":
                t = tokens[i + 1][1]
                parts.append(_unquote(t) if t.startswith("`") else t)
                i += 2
            key = ".".join(parts)
        else:
            return None
        if tokens[i][1] == "=":
            i += 1
        value: str | None = None
        kind, tok, _, _ = tokens[i]
        if kind == "str":
            value = ""
            while tokens[i][0] == "str":  # adjacent literals concatenate, as in Spark
                value += _unquote(tokens[i][1])
                i += 1
        elif kind == "num" or (kind == "ident" and tok.lower() in ("true", "false")):
            value = tok.lower() if kind == "ident" else tok
            i += 1
        items.append((key, value, text[tokens[first][2] : tokens[i - 1][3]]))
        if tokens[i][1] == ")":
            return items, tokens[i][2]
        if tokens[i][1] != ",":
            return None
        i += 1


@dataclass
class _Creation:
    """A ``CREATE TABLE ... USING mere`` with columns, or ``AS SELECT``, as Spark's parser read it."""

    parts: list[str]
    if_not_exists: bool
    options: dict[str, str]
    comment: str | None
    schema: StructType | None  # the column list
    query: str | None  # the text of AS SELECT


def _scala_list(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]


def _parse(spark: Any, text: str) -> _Creation | None:
    """The statement, when it is one the hook takes; None for any other (Spark runs it as always)."""
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(text)
    kind = plan.nodeName()
    if kind in ("ReplaceTable", "ReplaceTableAsSelect"):
        spec = plan.tableSpec()
        if spec.provider().isDefined() and str(spec.provider().get()).lower() == FORMAT_NAME:
            raise InvalidInput(
                "CREATE OR REPLACE / REPLACE TABLE ... USING mere is refused: it would drop the table's "
                "history; overwrite the rows with INSERT OVERWRITE t ... or df.write.mode('overwrite') "
                "(nothing was changed)"
            )
        return None
    if kind not in ("CreateTable", "CreateTableAsSelect"):
        return None
    spec = plan.tableSpec()
    if not spec.provider().isDefined() or str(spec.provider().get()).lower() != FORMAT_NAME:
        return None
    if kind == "CreateTable" and plan.columns().isEmpty():
        return None  # the column-less form: Spark asks the source itself (bind)
    if spec.location().isDefined():
        creation_options({"location": "given"})  # refused, with the sentence
    conv = spark._jvm.scala.jdk.javaapi.CollectionConverters
    props = {str(k): str(v) for k, v in dict(conv.asJava(spec.properties())).items()}
    for kv in _scala_list(spec.optionExpression().options()):
        value = kv._2().eval(None)
        props[f"option.{kv._1()}"] = "" if value is None else str(value.toString())
    options = creation_options(props)
    partitions = []
    for transform in _scala_list(plan.partitioning()):
        if transform.name() != "identity":
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: {transform.toString()} is not a partitioning mere has (it "
                "partitions by column values); buckets hash the primary key: give OPTIONS (primary_key '...', "
                "buckets 'n') (nothing was created)"
            )
        partitions.append(str(transform.describe()))
    if partitions:
        given = column_list_option("partition_by", options.get("partition_by"))
        if given is not None and list(given) != partitions:
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: PARTITIONED BY ({', '.join(partitions)}) and OPTIONS (partition_by "
                f"{options['partition_by']!r}) disagree; give the partition columns once (nothing was created)"
            )
        options["partition_by"] = ",".join(partitions)
    comment = str(spec.comment().get()) if spec.comment().isDefined() else None
    parts = [str(p) for p in _scala_list(plan.name().nameParts())]
    if kind == "CreateTable":
        schema = StructType.fromJson(json.loads(plan.tableSchema().json()))
        _refuse_column_clauses(schema)
        _refuse_column_definitions(plan)
        key = _primary_key_constraint(spec)
        if key is not None:
            given = column_list_option("primary_key", options.get("primary_key"))
            if given is not None and list(given) != key:
                raise InvalidInput(
                    f"CREATE TABLE ... USING mere: PRIMARY KEY ({', '.join(key)}) and OPTIONS (primary_key "
                    f"{options['primary_key']!r}) disagree; give the key once (nothing was created)"
                )
            options["primary_key"] = ",".join(key)
        return _Creation(parts, bool(plan.ignoreIfExists()), options, comment, schema, None)
    query = _query_text(text)
    return _Creation(parts, bool(plan.ignoreIfExists()), options, comment, None, query)


def _primary_key_constraint(spec: Any) -> list[str] | None:
    """The columns of a ``PRIMARY KEY`` constraint (mere's primary key), or None; any other constraint
    (CHECK, UNIQUE, FOREIGN KEY), which mere would not enforce, is refused."""
    try:
        constraints = _scala_list(spec.constraints())
    except Exception:  # a Spark without table constraints (before 4.1): none were parsed
        return None
    key = None
    for constraint in constraints:
        kind = str(constraint.getClass().getSimpleName())
        if kind != "PrimaryKeyConstraint":
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: {constraint.toString()} is a constraint mere does not enforce "
                "(only PRIMARY KEY, which is the table's key); leave it out (nothing was created)"
            )
        key = [str(c) for c in _scala_list(constraint.columns())]
    return key


def _refuse_column_definitions(plan: Any) -> None:
    """Column clauses Spark keeps in its column definitions and mere would drop: GENERATED ALWAYS AS
    (expression or IDENTITY) and COMMENT."""
    for i in range(plan.columns().size()):
        column = plan.columns().apply(i)
        name = str(column.name())
        for accessor, clause in (
            ("generationExpression", "GENERATED ALWAYS AS (...)"),
            ("identityColumnSpec", "GENERATED ... AS IDENTITY"),
            ("comment", "a COMMENT"),
        ):
            try:
                given = getattr(column, accessor)().isDefined()
            except Exception:  # a Spark whose columns have no such clause
                continue
            if given:
                raise InvalidInput(
                    f"CREATE TABLE ... USING mere: column {name!r} has {clause}, which mere tables do not keep "
                    "(a generated value would be stored as NULL, a comment lost); leave it out (nothing was "
                    "created)"
                )


def _refuse_column_clauses(schema: StructType) -> None:
    """Column clauses of a CREATE TABLE that mere cannot keep: DEFAULT values and CHAR/VARCHAR lengths."""
    from pyspark.sql.types import CharType, VarcharType

    for f in schema.fields:
        if any(key in (f.metadata or {}) for key in ("CURRENT_DEFAULT", "EXISTS_DEFAULT")):
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: column {f.name!r} has a DEFAULT, which mere tables do not keep "
                "(an INSERT without the column would store NULL); leave it out (nothing was created)"
            )
        if isinstance(f.dataType, CharType | VarcharType) or "__CHAR_VARCHAR_TYPE_STRING" in (
            f.metadata or {}
        ):
            raise InvalidInput(
                f"CREATE TABLE ... USING mere: column {f.name!r} is {f.dataType.simpleString()}, whose length "
                "mere does not check; declare it STRING (nothing was created)"
            )


def _query_text(text: str) -> str:
    """The query of ``CREATE TABLE ... AS <query>``: what follows the first ``AS`` outside quotes, comments
    and parentheses (Spark's parser gives the query plan's origin only for its top clause)."""
    depth, i, quote = 0, 0, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            i = text.find("*/", i) + 2 if "*/" in text[i:] else len(text)
            continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif (
            depth == 0
            and re.match(r"(?i)as\b", text[i:])
            and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
        ):
            return text[i + 2 :].strip().rstrip(";")
        i += 1
    raise InvalidInput(
        "CREATE TABLE ... USING mere AS SELECT: the query was not found; create the table, then INSERT INTO t "
        "SELECT ... (nothing was created)"
    )


def _quote_ident(parts: Sequence[str]) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _spark_parts(spark: Any, parts: Sequence[str]) -> list[str]:
    return list(parts) if len(parts) > 1 else [spark.catalog.currentDatabase(), *parts]


def _make_entry(
    run: Any, spark: Any, parts: Sequence[str], options: Mapping[str, str], comment: str | None
) -> Any:
    """The Spark table, made through the column-less CREATE TABLE (which binds the existing mere table)."""
    given = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in sorted(options.items()))
    text = f"CREATE TABLE {_quote_ident(parts)} USING {FORMAT_NAME} OPTIONS ({given})"
    if comment is not None:
        text += f" COMMENT {_literal(comment)}"
    return run(spark, text)


def _undo(run: Any, spark: Any, parts: Sequence[str] | None, ref: TableRef | None) -> None:
    """Remove what a failed creation made (the Spark table, the mere table it created)."""
    if parts is not None:
        with contextlib.suppress(Exception):
            run(spark, f"DROP TABLE IF EXISTS {_quote_ident(parts)}")
    if ref is not None:
        with contextlib.suppress(Exception):
            ref.connect().drop_table(ref.name, purge=True)


def create_table(
    run: Any,
    spark: Any,
    parts: Sequence[str],
    options: Mapping[str, str],
    *,
    schema: StructType | None = None,
    rows: Any = None,
    comment: str | None = None,
) -> Any:
    """Create the mere table (or bind an existing one, without ``rows``), then the Spark table; with ``rows``
    (a DataFrame: CTAS, saveAsTable) the mere table must be new and the rows are written into it. On any
    failure neither table is left behind. ``run`` is Spark's own ``SparkSession.sql``."""
    parts = _spark_parts(spark, parts)
    opts = dict(options)
    opts.setdefault("table", ".".join(parts))
    ref = TableRef.from_options(opts)
    if rows is not None:
        schema = rows.schema
        try:
            ref.open()
        except (NoSuchTable, NoSuchNamespace):
            pass
        else:
            raise TableExists(
                f"{ref.name} already exists in warehouse {ref.warehouse!r}: bind it with CREATE TABLE t USING "
                "mere OPTIONS (table ..., warehouse ...), then INSERT INTO t SELECT ... (nothing was created)"
            )
    table, created = open_or_create(ref, opts, schema, declared=rows is None)
    if schema is not None and rows is None and not created:
        have = [(f.name, f.dataType.simpleString()) for f in spark_schema(table.schema).fields]
        want = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        if have != want:
            raise TableExists(
                f"{ref.name} already exists with columns {have}, not the {want} listed; list its columns or "
                "leave the list out to bind it (nothing was created)"
            )
    entry: list[str] | None = None
    try:
        out = _make_entry(run, spark, parts, {**opts, **location_of(ref)}, comment)
        entry = list(parts)
        if rows is not None:
            rows.write.format(FORMAT_NAME).options(**location_of(ref)).mode("append").save(ref.name)
    except BaseException:
        _undo(run, spark, entry, ref if created else None)
        raise
    return out


def install_ddl_hook() -> None:
    """Let ``spark.sql("CREATE TABLE ... USING mere ...")`` with a column list or ``AS SELECT``, and
    ``df.write.format("mere").saveAsTable(...)``, make a mere table (once per process; :func:`register` and
    :func:`local_session` call it). Wraps PySpark's classic ``SparkSession.sql`` (only statements that start
    with CREATE or REPLACE and say ``USING mere`` are parsed, by Spark's own parser; every other statement
    runs unchanged; ``INSERT`` into a mere catalog table gets the table's name, :func:`name_insert_target`)
    and ``DataFrameWriter.saveAsTable``, ``mode``, ``option`` and ``options`` (which note
    what they were given). Spark Connect sessions are not wrapped."""
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.session import SparkSession

    if getattr(SparkSession.sql, _HOOKED, False):
        return
    spark_sql = SparkSession.sql
    spark_mode, spark_option, spark_options, spark_save_as_table = (
        DataFrameWriter.mode,
        DataFrameWriter.option,
        DataFrameWriter.options,
        DataFrameWriter.saveAsTable,
    )
    spark_bucket_by, spark_sort_by = DataFrameWriter.bucketBy, DataFrameWriter.sortBy

    def sql(self: Any, sqlQuery: str, args: Any = None, **kwargs: Any) -> Any:
        if isinstance(sqlQuery, str):
            sqlQuery = _without_leading_comments(sqlQuery)  # a comment before CREATE hid it from the hook
        statement = isinstance(sqlQuery, str) and args is None and not kwargs
        if isinstance(sqlQuery, str) and _CREATE.match(sqlQuery) and _USING.search(sqlQuery):
            if not statement:
                raise InvalidInput(
                    "CREATE TABLE ... USING mere with parameters (args or keyword arguments) is refused: "
                    "write the values into the statement (nothing was created)"
                )
            creation = _parse(self, sqlQuery)
            if creation is not None:
                return _run_creation(self, creation)
        if statement and (_INSERT.match(sqlQuery) or _CTE_HEAD.match(sqlQuery)):
            sqlQuery = name_insert_target(self, sqlQuery)
        if isinstance(sqlQuery, str) and _ALTER_COLUMNS.match(sqlQuery):
            refuse_column_changes(self, sqlQuery)  # with parameters too: the table's name is plain text
        if isinstance(sqlQuery, str) and _ALTER_PROPERTIES.match(sqlQuery):
            refuse_layout_properties(self, sqlQuery)
        return spark_sql(self, sqlQuery, args, **kwargs)

    def _run_creation(spark: Any, c: _Creation) -> Any:
        parts = _spark_parts(spark, c.parts)
        if spark.catalog.tableExists(".".join(parts)):
            if c.if_not_exists:
                return spark_sql(spark, "SELECT 1 WHERE false")
            raise TableExists(f"Spark table {_quote_ident(parts)} already exists (nothing was created)")
        rows = spark_sql(spark, c.query) if c.query is not None else None
        return create_table(spark_sql, spark, parts, c.options, schema=c.schema, rows=rows, comment=c.comment)

    def mode(self: Any, saveMode: str | None) -> Any:
        self._mere_mode = saveMode
        return spark_mode(self, saveMode)

    def option(self: Any, key: str, value: Any) -> Any:
        self._mere_options = {**getattr(self, "_mere_options", {}), str(key): value}
        return spark_option(self, key, value)

    def options(self: Any, **given: Any) -> Any:
        self._mere_options = {**getattr(self, "_mere_options", {}), **{str(k): v for k, v in given.items()}}
        return spark_options(self, **given)

    def bucketBy(self: Any, numBuckets: Any, col: Any, *cols: Any) -> Any:
        self._mere_layout = [*getattr(self, "_mere_layout", []), "bucketBy"]
        return spark_bucket_by(self, numBuckets, col, *cols)

    def sortBy(self: Any, col: Any, *cols: Any) -> Any:
        self._mere_layout = [*getattr(self, "_mere_layout", []), "sortBy"]
        return spark_sort_by(self, col, *cols)

    def saveAsTable(
        self: Any,
        name: str,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **given: Any,
    ) -> Any:
        source = (
            format
            or getattr(self, "_mere_format", None)
            or self._spark.conf.get("spark.sql.sources.default", "parquet")
        )
        if str(source).strip().lower() != FORMAT_NAME:
            return spark_save_as_table(self, name, format, mode, partitionBy, **given)
        spark = self._spark
        layout = getattr(self, "_mere_layout", [])
        if layout:
            raise InvalidInput(
                f"saveAsTable({name!r}): {' and '.join(sorted(set(layout)))} are not layouts mere has: its "
                "buckets hash the primary key and its files are sorted by it; give .option('primary_key', "
                "...) and .option('buckets', n) (nothing was written)"
            )
        opts = {
            str(k): "" if v is None else str(v)
            for k, v in {**getattr(self, "_mere_options", {}), **given}.items()
        }
        cols = partitionBy if partitionBy is not None else getattr(self, "_mere_partition_by", None)
        if cols:
            cols = (
                [cols]
                if isinstance(cols, str)
                else list(cols[0] if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else cols)
            )
            named = {k.lower(): v for k, v in opts.items()}.get("partition_by")
            option = column_list_option("partition_by", named)
            if option is not None and list(option) != list(cols):
                raise InvalidInput(
                    f"saveAsTable({name!r}): partitionBy {list(cols)} and option partition_by {named!r} "
                    "disagree; give the partition columns once (nothing was written)"
                )
            opts = {k: v for k, v in opts.items() if k.lower() != "partition_by"}
            opts["partition_by"] = ",".join(cols)
        how = str(mode or getattr(self, "_mere_mode", None) or "errorifexists").lower()
        parts = _spark_parts(spark, [p for p in _split_name(name)])
        if spark.catalog.tableExists(".".join(parts)):
            if how in ("error", "errorifexists", "default"):
                raise TableExists(
                    f"Spark table {_quote_ident(parts)} already exists: write with mode('append') or "
                    "mode('overwrite') (nothing was written)"
                )
            if how == "ignore":
                return None
            ref = ref_from_schema(spark.table(_quote_ident(parts)).schema, f"Spark table {name}")
            location = {k: v for k, v in opts.items() if _is_location(k)}
            if location and not same_table(TableRef.from_options({**location_of(ref), **location}), ref):
                raise InvalidInput(
                    f"Spark table {name} is the mere table {ref.name} in {ref.warehouse!r}, not the one the "
                    f"options {sorted(location)} name; leave them out (nothing was written)"
                )
            if how == "overwrite":
                check_overwrite(ref, self._df.schema, opts, f"Spark table {name}")
            writer = self._df.write.format(FORMAT_NAME).options(**{**opts, **location_of(ref)})
            writer.mode("overwrite" if how == "overwrite" else "append").save(ref.name)
            refresh_cached(spark, _quote_ident(parts))
            return None
        create_table(spark_sql, spark, parts, opts, rows=self._df)
        return None

    wrappers: dict[str, Any] = {
        "bucketBy": bucketBy,
        "sortBy": sortBy,
        "mode": mode,
        "option": option,
        "options": options,
        "saveAsTable": saveAsTable,
    }
    for attr, wrapper in wrappers.items():
        functools.update_wrapper(wrapper, getattr(DataFrameWriter, attr))
        setattr(DataFrameWriter, attr, wrapper)
    hooked: Any = sql
    functools.update_wrapper(hooked, spark_sql)
    setattr(hooked, _HOOKED, True)
    SparkSession.sql = hooked  # type: ignore[method-assign]


def check_overwrite(ref: TableRef, schema: StructType, options: Mapping[str, str], what: str) -> None:
    """``saveAsTable(mode="overwrite")`` of an existing table: Spark drops and recreates the table with the
    DataFrame's columns and the layout the writer gives, mere replaces the rows and keeps the table (its
    layout, history and key). Refused, before anything is written, unless what the write asks for is the
    table as it is: the same columns (names, order and types; a CDC column aside) and, for every layout
    option given, the table's value (a layout option left out keeps the table's, as for Delta tables).

    Args:
        ref: The mere table the Spark table is bound to.
        schema: The DataFrame's columns.
        options: The writer's options.
        what: The Spark table, as the message names it.

    Raises:
        InvalidInput: The DataFrame's columns or a layout option given differ from the table's.
    """
    table = ref.open()
    spec = table.spec
    have = [(f.name, f.dataType.simpleString()) for f in spark_schema(table.schema).fields]
    want = [(f.name, f.dataType.simpleString()) for f in schema.fields if f.name != spec.cdc_column]
    different = []
    if have != want:
        different.append(
            "the DataFrame's columns "
            + ", ".join(f"{n} {t}" for n, t in want)
            + " are not the table's "
            + ", ".join(f"{n} {t}" for n, t in have)
        )
    if "overwriteschema" in lower_options(options):
        different.append("option overwriteSchema asks for a new layout")
    layout = {k: v for k, v in lower_options(options).items() if k in (*DDL_OPTIONS, "partitionby")}
    layout.pop("create", None)
    try:
        check_layout(table, layout)
    except TableExists as exc:
        different.append(str(exc).split(": ", 1)[-1].removesuffix(" (nothing was written)"))
    if different:
        raise InvalidInput(
            f"{what}: mode('overwrite') would drop and recreate the table in Spark, but mere keeps the table "
            f"{ref.name} (its key, partitioning, history) and replaces only its rows, and {'; '.join(different)}. "
            "To replace the rows, write the table's columns in its order (df.select(*spark.table(t).columns)) "
            "with its layout options or none; to change the layout, DROP TABLE the Spark table, drop the mere "
            "table (mere.connect(warehouse).drop_table(name)) and saveAsTable again, or evolve it "
            "(Table.evolve()) (nothing was written)"
        )


def refresh_cached(spark: Any, name: str) -> None:
    """After a commit Spark's own writers did not make (``sql()``'s MERGE, UPDATE, DELETE; the
    ``saveAsTable`` append), drop what ``CACHE TABLE`` holds of the Spark table ``name``, as Spark's own
    INSERT does: the next read reads the new version. Names Spark does not hold are left alone."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        if spark.catalog.tableExists(name) and spark.catalog.isCached(name):
            spark.catalog.refreshTable(name)
    except (AnalysisException, ParseException):
        pass  # the commit stands; a name Spark cannot resolve has nothing cached under it


def table_format(spark: Any, name: str) -> str | None:
    """A session catalog table's format (its provider), lower-case; None when unknown.

    ``DESCRIBE TABLE EXTENDED`` shows no provider for a Python data source's table, so it is read from the
    session catalog.

    Args:
        spark: The SparkSession.
        name: The table's name (``t``, ``db.t`` or ``spark_catalog.db.t``).

    Returns:
        The format, such as ``mere`` or ``parquet``; None for a name the session catalog does not hold.
    """
    try:
        jvm, state = spark._jvm, spark._jsparkSession.sessionState()
        seq = state.sqlParser().parseMultipartIdentifier(name)
        parts = [str(seq.apply(i)) for i in range(seq.size())]
        if len(parts) == 3 and parts[0].lower() == "spark_catalog":
            parts = parts[1:]
        db = jvm.scala.Option.apply(parts[0] if len(parts) == 2 else None)
        ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(parts[-1], db)
        provider = state.catalog().getTableMetadata(ident).provider()
        return str(provider.get()).lower() if provider.isDefined() else None
    except Exception:  # a name the session catalog does not hold: the format stays unknown
        return None


def _split_name(name: str) -> list[str]:
    """A Spark table name's parts (backticks quote a part)."""
    parts, current, quoted, i = [], "", False, 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and name[i + 1 : i + 2] == "`":
                current += "`"
                i += 1
            else:
                quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
        i += 1
    parts.append(current)
    return [p.strip() if "`" not in name else p for p in parts]


def describe(spark: Any, name: str) -> Any:
    """What ``SHOW TBLPROPERTIES`` cannot show of a Spark table of the mere format (a Python data source
    reports no properties to Spark): the mere table's name, location, layout and current version.

    Args:
        spark: The SparkSession.
        name: The Spark table's name (or a temporary view of a whole mere catalog table).

    Returns:
        A DataFrame of ``key``, ``value`` rows.

    Raises:
        InvalidInput: The Spark table names no mere table.
    """
    ref = ref_from_schema(spark.table(name).schema, f"Spark table {name}")
    table = ref.open()
    spec = table.spec
    rows = [
        ("mere.version", mere.__version__),
        ("table", ref.name),
        ("warehouse", ref.warehouse),
        ("table_version", str(table.version)),
        ("primary_key", ",".join(spec.primary_key)),
        ("partition_by", ",".join(spec.partition_by)),
        ("buckets", str(spec.buckets)),
        (
            "merge_operators",
            spec.merge_engine
            or json.dumps({k: str(v) for k, v in spec.merge_operators.items()}, sort_keys=True),
        ),
        ("sequence_by", ",".join(spec.sequence_by)),
        ("cdc_column", spec.cdc_column or ""),
    ]
    return spark.createDataFrame(rows, "key string, value string")
