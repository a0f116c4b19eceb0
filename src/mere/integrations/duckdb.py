"""DuckDB: SQL over mere tables, merged by mere, with projection and key/partition filters reaching mere.

``register(con, "orders", table)`` registers a :class:`pyarrow.dataset.Dataset` whose scanning is mere's.
DuckDB treats a registered Arrow dataset as a source it can push work into: for each query it asks the
dataset for a scanner with the columns the query needs and the filters DuckDB could push, as a pyarrow
expression. mere reads only those columns; the filter's comparisons, IN lists and null tests on key and
partition columns prune partitions, buckets and row groups; and the whole filter runs on the merged rows,
so a filter on any other column never drops an older version of a row before the merge. DuckDB is never
handed the raw Parquet files (that would skip the merge).

A plain ``Scan`` also works in DuckDB's SQL as a Python variable (``duckdb.sql("SELECT * FROM scan")``):
every query calls its Arrow C stream again and gets a fresh read, without pushdown.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from mere import expr as E
from mere.errors import FilterError, InvalidInput, SchemaMismatch
from mere.integrations.pushdown import narrowed, prunable_kind
from mere.optional import require
from mere.table.catalog_transaction import CatalogSnapshot, pinned_version
from mere.table.scan import Scan, cast_to, decimal128_schema
from mere.table.table import Table


def register(
    con: Any,
    name: str,
    table: Table | Scan,
    *,
    columns: Any = None,
    filter: Any = None,
    version: int | None = None,
    as_of: Any = None,
    tag: str | None = None,
    snapshot: CatalogSnapshot | None = None,
) -> None:
    """Register ``table`` (or a planned ``Scan``) as the view ``name`` of the DuckDB connection ``con``.

    The view reads one version (the current one unless ``version``/``as_of``/``tag`` names one), pinned now;
    register again to see later commits. DuckDB pushes each query's projection and filters into the read (see
    the module documentation).

    Args:
        con: The DuckDB connection.
        name: The view's name.
        table: A mere Table, or a planned :class:`~mere.table.scan.Scan` (then give none of the other read
            arguments).
        columns: The columns the view has (default: all), read by mere.
        filter: A mere filter narrowing the view, evaluated by mere.
        version: The version to read (default: the newest).
        as_of: A point in time to read the table at; an ``as_of`` without a zone is read as UTC, not as local
            time.
        tag: A tag whose version to read.
        snapshot: A catalog snapshot (``cat.snapshot()``) whose version of the table to read (not with
            ``version``, ``as_of`` or ``tag``).

    Raises:
        NotInstalled: DuckDB is not installed.
        InvalidInput: ``con`` is not a DuckDB connection, an empty ``name``, ``table`` is neither a Table nor
            a Scan, read arguments given with a Scan, an invalid scan argument (as :meth:`mere.Table.scan`
            raises it), or a decimal column of more than 38 digits (DuckDB holds at most 38).
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
    """
    duckdb = require("duckdb", "duckdb", "mere.integrations.duckdb")
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise InvalidInput(f"register() takes a duckdb connection, got {type(con).__name__}")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"register() takes a view name, got {name!r}")
    if isinstance(table, Scan):
        if any(v is not None for v in (columns, filter, version, as_of, tag, snapshot)):
            raise InvalidInput(
                "register(): pass columns/filter/version/as_of/tag with a Table, not with a Scan"
            )
        scan = table
    elif isinstance(table, Table):
        if isinstance(columns, list | tuple) and not columns:
            raise InvalidInput("register(): columns names no column; give at least one (None: every column)")
        version = pinned_version(snapshot, table, version, as_of, tag)
        scan = table.scan(columns=columns, filter=filter, version=version, as_of=as_of, tag=tag)
    else:
        raise InvalidInput(f"register() takes a mere Table or Scan, got {type(table).__name__}")
    # DuckDB has no 256-bit decimals: those of up to 38 digits are handed over as 128-bit ones.
    given = dataset(scan, decimal128_schema(scan.schema, scan.table.name, "DuckDB"))
    try:
        con.register(name, given)
    except duckdb.Error as e:  # a closed connection, a name DuckDB refuses
        raise InvalidInput(f"register() of {scan.table.name} as {name!r} failed in DuckDB: {e}") from e


def dataset(scan: Scan, schema: pa.Schema | None = None) -> MereDataset:
    """The scan as a :class:`pyarrow.dataset.Dataset` that engines push projections and filters into.

    Args:
        scan: The planned mere scan.
        schema: The scan's columns in other types (such as 128-bit decimals for 256-bit ones), to cast what
            the dataset hands out to; None: the scan's own schema.

    Returns:
        The dataset (picklable; reading it reads the scan).

    Raises nothing: the scan was checked when it was planned; reads raise as the scan's reads do.
    """
    made: MereDataset = MereDataset.__new__(MereDataset)  # the C++ constructor is bypassed: mere scans
    made._scan = scan
    made._cast = schema if schema is not None and schema != scan.schema else None
    return made


class MereDataset(ds.Dataset):
    """A pyarrow Dataset whose ``scanner()`` is a mere read (see the module docstring).

    Reading methods (``scanner``, ``to_table``, ``to_batches``, ``head``, ``take``, ``count_rows``) are
    mere reads; the rest (fragments, ``filter``, ``sort_by``, joins, ``replace_schema``) raise
    :class:`~mere.errors.InvalidInput`, as this dataset has no files of its own.
    """

    _scan: Scan
    _cast: pa.Schema | None

    @property
    def schema(self) -> pa.Schema:
        """The output schema of the scan."""
        return self._cast if self._cast is not None else self._scan.schema

    def _as_given(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch if self._cast is None else cast_to(batch, self._cast)

    def scanner(
        self, columns: list[str] | None = None, filter: pc.Expression | None = None, **options: Any
    ) -> ds.Scanner:
        """A scanner over the merged rows: ``columns`` and ``filter`` reach mere (see the module)."""
        reader = self._planned(columns, filter).to_reader()
        if self._cast is not None:
            given = pa.schema([self._cast.field(name) for name in reader.schema.names])
            reader = pa.RecordBatchReader.from_batches(given, map(self._as_given, reader))
        batch_size = options.get("batch_size")
        if batch_size is not None and (
            not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
        ):
            raise InvalidInput(
                f"MereDataset.scanner: batch_size must be a positive integer, got {batch_size!r}"
            )
        extra = {} if batch_size is None else {"batch_size": batch_size}
        return ds.Scanner.from_batches(
            reader,
            columns=columns,
            filter=filter,
            use_threads=False,
            batch_readahead=0,
            fragment_readahead=1,  # 0 made the scanner's to_table() wait forever (pyarrow 26)
            **extra,
        )

    def _planned(self, columns: list[str] | None, filter: pc.Expression | None) -> Scan:
        """The mere scan for a projection and filter.

        The filter's prunable part is pushed, and the columns it needs are read.
        """
        scan = self._scan
        if columns is not None and (
            isinstance(columns, str)
            or not isinstance(columns, (list, tuple))
            or not all(isinstance(c, str) for c in columns)
        ):
            raise InvalidInput(f"MereDataset: columns must be a list of names, got {columns!r}")
        if filter is not None and not isinstance(filter, pc.Expression):
            raise InvalidInput(
                f"MereDataset: filter must be a pyarrow Expression, got {type(filter).__name__}"
            )
        if columns is not None:
            self._schema_of(columns)  # unknown names: SchemaMismatch before anything is read
        if filter is None:
            return narrowed(scan, None, columns, ())
        try:  # bound against the columns now: an unknown field or a type error fails here, typed
            self.schema.empty_table().filter(filter)
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise FilterError(
                f"MereDataset: filter {filter} does not apply to {self.schema.names}: {e}"
            ) from e
        return narrowed(scan, pushdown(filter, scan), columns, _columns(filter, scan))

    def _schema_of(self, columns: list[str] | None) -> pa.Schema:
        if columns is None:
            return self.schema
        unknown = [c for c in columns if c not in self.schema.names]
        if unknown:
            raise SchemaMismatch(
                f"MereDataset: unknown column(s) {unknown}; the scan returns {self.schema.names}"
            )
        return pa.schema([self.schema.field(c) for c in columns])

    def to_batches(
        self, columns: list[str] | None = None, filter: pc.Expression | None = None, **_: Any
    ) -> Iterator[pa.RecordBatch]:
        """Merged batches (``columns``/``filter`` as for :meth:`scanner`), streamed in this thread.

        A consumer that stops early stops the read (no background scanner keeps calling into it).
        """
        scan = self._planned(columns, filter)
        batches = scan.to_batches()
        try:
            for batch in batches:
                table = pa.Table.from_batches([self._as_given(batch)])
                if filter is not None:
                    table = table.filter(filter)
                if columns is not None:
                    table = table.select(columns)
                yield from table.to_batches()
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def to_table(
        self, columns: list[str] | None = None, filter: pc.Expression | None = None, **_: Any
    ) -> pa.Table:
        """Merged rows as one table (``columns``/``filter`` as for :meth:`scanner`)."""
        schema = self._schema_of(columns)
        return pa.Table.from_batches(list(self.to_batches(columns, filter)), schema=schema)

    def head(
        self, num_rows: int, columns: list[str] | None = None, filter: pc.Expression | None = None, **_: Any
    ) -> pa.Table:
        """The first ``num_rows`` merged rows (the read stops there)."""
        if not isinstance(num_rows, int) or isinstance(num_rows, bool) or num_rows < 0:
            raise InvalidInput(f"MereDataset.head: num_rows must be a non-negative integer, got {num_rows!r}")
        out: list[pa.RecordBatch] = []
        left = num_rows
        batches = self.to_batches(columns, filter)
        for batch in batches:
            if left <= 0:
                break
            out.append(batch.slice(0, left))
            left -= out[-1].num_rows
        batches.close()  # type: ignore[attr-defined]
        schema = self._schema_of(columns)
        return pa.Table.from_batches(out, schema=schema)

    def take(
        self, indices: Any, columns: list[str] | None = None, filter: pc.Expression | None = None, **_: Any
    ) -> pa.Table:
        """Merged rows at ``indices`` (of the whole, filtered read)."""
        try:
            positions = pa.array(indices)
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise InvalidInput(f"MereDataset.take: indices must be integers, got {indices!r}") from e
        if not pa.types.is_integer(positions.type):
            raise InvalidInput(f"MereDataset.take: indices must be integers, got {positions.type}")
        rows = self.to_table(columns, filter)
        if len(positions) and (
            positions.null_count
            or pc.min(positions).as_py() < 0
            or pc.max(positions).as_py() >= rows.num_rows
        ):
            raise InvalidInput(f"MereDataset.take: indices must be within the {rows.num_rows} rows read")
        return rows.take(positions)

    def count_rows(self, filter: pc.Expression | None = None, **_: Any) -> int:
        """Merged rows (a read: see :meth:`mere.Scan.count`)."""
        return sum(b.num_rows for b in self.to_batches(None, filter))

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidInput(
            "a mere dataset has no files of its own to list, filter, sort, join or re-type: scan it "
            "(to_table, scanner) or use the mere Scan"
        )

    get_fragments = _get_fragments = filter = sort_by = join = join_asof = replace_schema = _unsupported

    @property
    def partition_expression(self) -> pc.Expression:
        """Always true: mere's partitions are pruned inside :meth:`scanner`."""
        return pc.scalar(True)

    def __reduce__(self) -> tuple[Any, ...]:
        return dataset, (self._scan, self._cast)

    def __repr__(self) -> str:
        return f"MereDataset({self._scan!r})"


def _columns(filter: pc.Expression, scan: Scan) -> list[str]:
    """Columns a pyarrow filter may reference: every column whose name appears in its text.

    A few too many at worst, never one too few.
    """
    text = str(filter)
    return [name for name in scan.spec.schema.names if name in text]


# --- reading DuckDB's pyarrow filters ---------------------------------------------------------------
# pyarrow offers no public way to walk an Expression. Its structure is read from its text, and its
# literals (typed values, IN lists, function options) from its serialised form, an Arrow IPC file
# holding one column per literal in the order the text shows them. Every piece used for pruning is then
# proven: rebuilt as a pyarrow Expression from those typed values, its text must equal the piece's own.
# A piece that does not prove out prunes nothing; the filter itself always runs whole on the merged rows.


class _Unreadable(Exception):
    """Filter text this parser does not read."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<ts>\d{4}-\d{2}-\d{2}\ \d{2}:\d{2}:\d{2}(?:\.\d+)?Z?)
    | (?P<op>==|!=|<=|>=|<|>|[(){}\[\],:=])
    | (?P<word>[A-Za-z0-9_.+\-]+(?:\[[A-Za-z0-9_, ]*\])?)
    )""",
    re.VERBOSE,
)
_COMPARE = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass
class _Node:
    kind: str  # "bin", "call", "field", "lit", "opts"
    text: str  # this node's own source text
    op: str = ""  # operator or function name
    args: tuple[_Node, ...] = ()
    raw: str = ""  # a literal's or options' text
    value: pa.Array | None = None  # a literal's or options' typed value (one row), from the IPC form

    def fields(self, out: list[str]) -> None:
        if self.kind == "field" and self.op not in out:
            out.append(self.op)
        for a in self.args:
            a.fields(out)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise _Unreadable(text[pos : pos + 20])
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind), m.start(kind), m.end(kind)))
            pos = m.end()
        self.i = 0
        self.literals: list[_Node] = []  # literal and options nodes, in text order

    def peek(self) -> tuple[str, str, int, int]:
        return (
            self.tokens[self.i] if self.i < len(self.tokens) else ("end", "", len(self.text), len(self.text))
        )

    def take(self, value: str | None = None) -> tuple[str, str, int, int]:
        token = self.peek()
        if token[0] == "end" or (value is not None and token[1] != value):
            raise _Unreadable(f"expected {value!r} at {token[2]}")
        self.i += 1
        return token

    def parse(self) -> _Node:
        node = self.expr()
        if self.peek()[0] != "end":
            raise _Unreadable("trailing text")
        return node

    def expr(self) -> _Node:
        kind, value, start, _ = self.peek()
        if value == "(":
            self.take("(")
            left = self.expr()
            _, op, _, _ = self.take()
            if op not in _COMPARE and op not in ("and", "or"):
                raise _Unreadable(f"operator {op!r}")
            right = self.expr()
            end = self.take(")")[3]
            return _Node("bin", self.text[start:end], op, (left, right))
        if kind in ("str", "ts"):
            self.take()
            return self.literal(_Node("lit", value, raw=value))
        if kind != "word":
            raise _Unreadable(f"unexpected {value!r}")
        self.take()
        if self.peek()[1] == "(":  # a function call
            self.take("(")
            args: list[_Node] = []
            while self.peek()[1] != ")":
                args.append(self.options() if self.peek()[1] == "{" else self.expr())
                if self.peek()[1] == ",":
                    self.take(",")
            end = self.take(")")[3]
            return _Node("call", self.text[start:end], value, tuple(args))
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) and value not in ("true", "false", "null"):
            return _Node("field", value, value)
        return self.literal(_Node("lit", value, raw=value))

    def literal(self, node: _Node) -> _Node:
        self.literals.append(node)
        return node

    def options(self) -> _Node:
        start = self.take("{")[2]
        depth = 1
        while depth:
            _, value, _, end = self.take()
            depth += {"{": 1, "}": -1}.get(value, 0)
        return self.literal(_Node("opts", self.text[start:end], raw=self.text[start:end]))


def pushdown(filter: pc.Expression, scan: Scan) -> E.Expr | None:
    """What of a pyarrow filter mere can use to prune, as one mere filter; None when nothing.

    Only key and partition columns of integer, string or date type prune; the result holds at least the
    filter's rows.
    """
    try:
        parser = _Parser(str(filter))
        node = parser.parse()
    except _Unreadable:
        return None
    values = _literal_values(filter)
    if values is None or len(values) != len(parser.literals):
        return None
    for literal, value in zip(parser.literals, values):
        literal.value = value
    spec = scan.spec
    prunable = {*spec.primary_key, *spec.partition_by}
    types = {f.name: f.type for f in spec.schema if f.name in prunable and prunable_kind(f.type) is not None}
    return _part(node, types, exact=False)


def _literal_values(filter: pc.Expression) -> list[pa.Array] | None:
    """The filter's literals, typed, in text order (None when its serialised form cannot be read)."""
    try:
        _, args = filter.__reduce__()
        table = pa.ipc.open_file(args[0]).read_all()
    except Exception:  # a form this pyarrow does not write: nothing is pushed
        return None
    return [column.combine_chunks() for column in table.columns]


def _part(node: _Node, types: dict[str, pa.DataType], exact: bool) -> E.Expr | None:
    try:
        return _translate(node, types, exact)
    except _Unreadable:
        if exact:
            raise
        return None


def _translate(node: _Node, types: dict[str, pa.DataType], exact: bool) -> E.Expr | None:
    """Equal to ``node`` when ``exact`` (else raises), else holding at least its rows (None: unknown)."""
    if node.kind == "bin" and node.op in ("and", "or"):
        sides = [_part(a, types, exact) for a in node.args]
        if node.op == "and":
            known = [s for s in sides if s is not None]
            return E.conjunction(known) if known else None
        return None if None in sides else sides[0] | sides[1]  # type: ignore[operator]
    leaf = _leaf(node, types, exact)
    if leaf is None:
        if exact:
            raise _Unreadable(node.text)
        return None
    mere_expr, rebuilt = leaf
    if str(rebuilt) != node.text:  # the proof: pyarrow prints the rebuilt piece exactly as the original
        if exact:
            raise _Unreadable(node.text)
        return None
    return mere_expr


def _leaf(node: _Node, types: dict[str, pa.DataType], exact: bool) -> tuple[E.Expr, pc.Expression] | None:
    """A comparison, IN list or null test of one prunable column: (mere filter, the same in pyarrow).

    With ``exact`` the mere filter must equal the piece on every row, nulls included (it is under a NOT);
    otherwise it must hold the same rows where the piece is true."""
    try:
        return _leaf_unguarded(node, types, exact)
    except (pa.ArrowException, OverflowError, ValueError, TypeError) as e:  # e.g. 1000 on an int8 key
        raise _Unreadable(node.text) from e


def _leaf_unguarded(
    node: _Node, types: dict[str, pa.DataType], exact: bool
) -> tuple[E.Expr, pc.Expression] | None:
    if node.kind == "bin" and node.op in _COMPARE:
        left, right = node.args
        op = node.op
        if right.kind == "field" and left.kind == "lit":
            left, right, op = right, left, E.flip(op)  # type: ignore[arg-type]  # op is in _COMPARE
        if left.kind != "field" or right.kind != "lit" or left.op not in types:
            return None
        column = types[left.op]
        value = _value(right, column)
        rebuilt = _compare(op, ds.field(left.op), pa.scalar(value, column))
        if node.args[0].kind == "lit":
            rebuilt = _compare(node.op, pc.scalar(pa.scalar(value, column)), ds.field(left.op))
        return E.Compare(op, left.op, value), rebuilt  # type: ignore[arg-type]
    if node.kind != "call":
        return None
    if node.op in ("is_null", "is_valid") and node.args and node.args[0].kind == "field":
        name = node.args[0].op
        if name not in types:
            return None
        if node.op == "is_valid":
            return ~E.IsNull(name), pc.is_valid(ds.field(name))
        nan_is_null = len(node.args) > 1 and "nan_is_null=true" in node.args[1].raw
        return E.IsNull(name), pc.is_null(ds.field(name), nan_is_null=nan_is_null)
    if node.op == "if_else" and len(node.args) == 3:  # DuckDB's IN: if_else(is_valid(c), is_in(c, ...), null)
        test, inner, otherwise = node.args
        if (
            inner.kind != "call"
            or inner.op != "is_in"
            or len(inner.args) != 2
            or inner.args[0].kind != "field"
        ):
            return None
        name = inner.args[0].op
        if name not in types or test.text != f"is_valid({name})" or otherwise.text != "null[bool]":
            return None
        values = _value_set(inner.args[1], types[name])
        rebuilt = pc.if_else(
            pc.is_valid(ds.field(name)),
            pc.is_in(ds.field(name), value_set=pa.array(values, types[name])),
            pa.scalar(None, pa.bool_()),
        )
        return E.In(name, tuple(values)), rebuilt
    # A bare is_in gives false, not null, for a null: the same rows as SQL IN, but not under a NOT.
    if node.op == "is_in" and len(node.args) == 2 and node.args[0].kind == "field" and not exact:
        name = node.args[0].op
        if name not in types or "null_matching_behavior=MATCH" not in node.args[1].raw:
            return None
        values = _value_set(node.args[1], types[name])
        return E.In(name, tuple(values)), pc.is_in(ds.field(name), value_set=pa.array(values, types[name]))
    if node.op == "invert" and len(node.args) == 1:
        negated = _translate(node.args[0], types, exact=True)
        if negated is None:
            return None
        return ~negated, ~_rebuilt_exact(node.args[0], types)
    return None


def _rebuilt_exact(node: _Node, types: dict[str, pa.DataType]) -> pc.Expression:
    """The pyarrow expression of a node already proven exact."""
    if node.kind == "bin" and node.op in ("and", "or"):
        left, right = (_rebuilt_exact(a, types) for a in node.args)
        return (left & right) if node.op == "and" else (left | right)
    leaf = _leaf(node, types, exact=True)
    if leaf is None:
        raise _Unreadable(node.text)
    return leaf[1]


def _compare(op: str, left: Any, right: Any) -> pc.Expression:
    if not isinstance(left, pc.Expression):
        left = pc.scalar(left)
    if not isinstance(right, pc.Expression):
        right = pc.scalar(right)
    result: pc.Expression = {
        "==": left.__eq__,
        "!=": left.__ne__,
        "<": left.__lt__,
        "<=": left.__le__,
        ">": left.__gt__,
        ">=": left.__ge__,
    }[op](right)
    return result


def _same_kind(literal: pa.DataType, column: pa.DataType) -> bool:
    """Whether a literal of type ``literal`` compares with the column's values as the same Python value.

    A binary literal never stands for a string, whatever its printed form.
    """
    kind = prunable_kind(column)
    if kind is int:
        return bool(pa.types.is_integer(literal))
    if kind is str:
        return bool(
            pa.types.is_string(literal)
            or pa.types.is_large_string(literal)
            or pa.types.is_string_view(literal)
        )
    return kind is dt.date and bool(pa.types.is_date32(literal))


def _value(node: _Node, column: pa.DataType) -> Any:
    """A literal node's value, from its typed form, if it is of the column's kind and not null."""
    value = node.value
    if value is None or len(value) != 1 or value.null_count or not _same_kind(value.type, column):
        raise _Unreadable(node.text)
    return value[0].as_py()


def _value_set(node: _Node, column: pa.DataType) -> list[Any]:
    """The value set of an is_in options node, from its typed form (no nulls, of the column's kind)."""
    options = node.value
    if (
        options is None
        or not pa.types.is_struct(options.type)
        or options.type.get_field_index("value_set") < 0
    ):
        raise _Unreadable(node.text)
    values = options.field("value_set")[0].values
    if len(values) == 0 or values.null_count or not _same_kind(values.type, column):
        raise _Unreadable(node.text)
    return list(values.to_pylist())
