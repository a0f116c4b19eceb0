"""Polars: a ``LazyFrame`` over a mere table, built on Polars' IO-source plugin hook.

Polars hands the source its projection, its predicate and its row limit. The projection becomes mere's
projection. Predicate conjuncts on key and partition columns are translated into mere filters, so they
prune partitions, buckets and row groups before the merge; the whole predicate is then evaluated by
Polars on the merged rows, so a predicate on any other column never drops an older version of a row
before the merge, and its semantics stay Polars' own (NaN ordering, nulls).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from mere import expr as E
from mere.errors import InvalidInput
from mere.integrations.pushdown import narrowed, prunable_kind
from mere.optional import require
from mere.read.reader import gather_batches
from mere.table.catalog_transaction import CatalogSnapshot, pinned_version
from mere.table.scan import Scan, cast_to, decimal128_schema
from mere.table.table import Table

if TYPE_CHECKING:
    import polars as pl

_COMPARE = {"Eq": "==", "NotEq": "!=", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}
_EPOCH = dt.date(1970, 1, 1)
BUNDLE_ROWS = 262_144  # merged rows handed to Polars per frame


def _polars() -> Any:
    return require("polars", "polars", "mere.integrations.polars")


def scan_table(
    table: Table,
    *,
    version: int | None = None,
    as_of: Any = None,
    tag: str | None = None,
    snapshot: CatalogSnapshot | None = None,
    filter: Any = None,
    columns: Sequence[str] | str | None = None,
) -> pl.LazyFrame:
    """A ``LazyFrame`` of the table's merged rows at one version (the current one unless one is named).

    Polars' own ``filter()``, ``select()`` and ``head()`` reach mere through the plugin hook. Batches stream;
    ``collect(engine="streaming")`` works. 256-bit decimals of up to 38 digits come as Polars decimals; wider
    ones must be left out with ``columns``.

    Args:
        table: The mere table.
        version: The version to read (default: the newest).
        as_of: A point in time to read the table at; an ``as_of`` without a zone is read as UTC, not as local
            time.
        tag: A tag whose version to read.
        snapshot: A catalog snapshot (``cat.snapshot()``) whose version of the table to read (not with
            ``version``, ``as_of`` or ``tag``).
        filter: An extra mere filter, applied by mere.
        columns: The columns the frame has (default: all), read by mere.

    Returns:
        The lazy frame; its version is pinned now.

    Raises:
        NotInstalled: Polars is not installed.
        InvalidInput: ``table`` is not a mere Table, an invalid scan argument (as :meth:`mere.Table.scan`
            raises it), or a decimal column of more than 38 digits.
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
    """
    polars = _polars()
    if not isinstance(table, Table):
        raise InvalidInput(f"scan_table() takes a mere Table, got {type(table).__name__}")
    version = pinned_version(snapshot, table, version, as_of, tag)
    base = table.scan(version=version, as_of=as_of, tag=tag, filter=filter, columns=columns)
    target = decimal128_schema(base.schema, table.name, "Polars")
    schema = polars.from_arrow(target.empty_table()).schema

    def source(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        return _batches(base, target, with_columns, predicate, n_rows)

    return cast(
        "pl.LazyFrame",
        polars.io.plugins.register_io_source(
            source,
            schema=schema,
            is_pure=True,
            explain_name="mere",
            explain_detail=f"{table.name} @ v{base.version}",
        ),
    )


def _batches(
    base: Scan,
    target: pa.Schema,
    with_columns: list[str] | None,
    predicate: pl.Expr | None,
    n_rows: int | None,
) -> Iterator[pl.DataFrame]:
    polars = _polars()

    def check_predicate() -> None:
        # Polars checks a predicate's types only on the frames it filters: on no frame (every row pruned,
        # an empty table) a predicate Polars refuses would give no rows instead of its error.
        if predicate is not None:
            polars.from_arrow(target.empty_table()).filter(predicate)

    # Polars hands a row limit with a predicate for ``head(n).filter(p)``: the first n rows, then the
    # filter. Such a predicate cannot prune (it would change which rows are first) and runs after the cut.
    limit_first = n_rows is not None and predicate is not None
    pushed = pushdown(predicate, base) if predicate is not None and not limit_first else None
    scan = narrowed(base, pushed, with_columns, predicate.meta.root_names() if predicate is not None else ())
    left = n_rows
    if left is not None and left <= 0:
        check_predicate()
        return
    batches = cast(Generator[pa.RecordBatch, None, None], scan.to_batches())
    filtered = False
    try:
        # Polars takes a few large frames faster than many small ones (each conversion and each frame
        # it concatenates costs a little); a row limit streams batch by batch.
        for chunk in gather_batches(batches, 1 if n_rows is not None else BUNDLE_ROWS):
            frame = polars.from_arrow(cast_to(chunk, target), rechunk=False)  # 256-bit decimals narrowed
            if left is not None and limit_first:
                frame = frame.head(left)
                left -= frame.height
            if predicate is not None:
                frame = frame.filter(predicate)
                filtered = True
            if with_columns is not None:
                frame = frame.select(with_columns)
            if left is not None and not limit_first:
                frame = frame.head(left)
                left -= frame.height
            if frame.height:
                yield frame
            if left == 0:
                return
        if not filtered:
            check_predicate()
    finally:
        batches.close()  # a row limit stops the read: the splits' readers shut down here


def pushdown(predicate: pl.Expr, scan: Scan) -> E.Expr | None:
    """What of a Polars predicate mere can use to prune, as one mere filter (None when nothing).

    Comparisons, IN lists, BETWEEN and null tests of key and partition columns of integer, string or date
    type are translated, with AND, OR and NOT around them. The result holds every row the predicate holds
    (a conjunct that cannot be translated is left out, never guessed); Polars still evaluates the whole
    predicate on the merged rows.
    """
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # an expression Polars cannot serialise prunes nothing
        return None
    spec = scan.spec
    prunable = {*spec.primary_key, *spec.partition_by}
    kinds = {f.name: prunable_kind(f.type) for f in spec.schema if f.name in prunable}
    try:
        return _translate(tree, {k: v for k, v in kinds.items() if v is not None}, exact=False)
    except _NoValue:
        return None


class _NoValue(Exception):
    """A node this translation does not understand."""


def _column(node: Any, kinds: dict[str, type]) -> str | None:
    if isinstance(node, dict) and isinstance(node.get("Column"), str) and node["Column"] in kinds:
        return str(node["Column"])
    return None


def _value(node: Any, kind: type) -> Any:
    """The Python value of a Polars literal node, which must be of ``kind``."""
    literal = node.get("Literal") if isinstance(node, dict) else None
    if not isinstance(literal, dict):
        raise _NoValue
    for form in ("Dyn", "Scalar"):
        inner = literal.get(form)
        if not isinstance(inner, dict) or len(inner) != 1:
            continue
        ((tag, value),) = inner.items()
        if tag == "Date" and isinstance(value, int) and not isinstance(value, bool):
            value = _EPOCH + dt.timedelta(days=value)
        elif tag not in ("Int", "Str", "String") and not (
            tag.startswith(("Int", "UInt")) and tag[-1].isdigit()
        ):
            raise _NoValue
        if type(value) is kind:
            return value
    raise _NoValue


def _values(node: Any, kind: type) -> list[Any]:
    """The values of a Polars list literal (an Arrow IPC stream of one list column), all of ``kind``."""
    literal = node.get("Literal") if isinstance(node, dict) else None
    scalar = literal.get("Scalar") if isinstance(literal, dict) else None
    payload = scalar.get("List") if isinstance(scalar, dict) else None
    if not isinstance(payload, list):
        raise _NoValue
    try:
        values = pa.ipc.open_stream(bytes(payload)).read_all().column(0).to_pylist()
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise _NoValue from e
    if not values or any(type(v) is not kind for v in values):
        raise _NoValue
    return list(values)


def _translate(node: Any, kinds: dict[str, type], exact: bool) -> E.Expr | None:
    """A mere filter for ``node``: equal to it when ``exact``, else holding at least its rows.

    None: nothing known. Raises _NoValue where an exact translation is impossible.
    """
    binary = node.get("BinaryExpr") if isinstance(node, dict) else None
    function = node.get("Function") if isinstance(node, dict) else None
    if isinstance(binary, dict):
        op = binary.get("op")
        if op in ("And", "LogicalAnd"):
            known = [e for side in ("left", "right") if (e := _part(binary[side], kinds, exact)) is not None]
            return E.conjunction(known) if known else None
        if op in ("Or", "LogicalOr"):
            left, right = (_part(binary[side], kinds, exact) for side in ("left", "right"))
            return None if left is None or right is None else left | right
        if op in _COMPARE:
            name = _column(binary["left"], kinds)
            if name is not None:
                return E.Compare(_COMPARE[op], name, _value(binary["right"], kinds[name]))  # type: ignore[arg-type]
            name = _column(binary["right"], kinds)
            if name is not None:
                return E.Compare(E.flip(_COMPARE[op]), name, _value(binary["left"], kinds[name]))  # type: ignore[arg-type]
    elif isinstance(function, dict):
        inputs, kind = function.get("input") or [], function.get("function")
        boolean = kind.get("Boolean") if isinstance(kind, dict) else None
        name = _column(inputs[0], kinds) if inputs else None
        if boolean == "Not" and len(inputs) == 1:
            try:  # under a NOT only an exact translation is safe: a wider one would narrow the rows
                return ~_translate(inputs[0], kinds, exact=True)  # type: ignore[operator]
            except _NoValue:
                if exact:
                    raise
                return None
        if boolean in ("IsNull", "IsNotNull") and name is not None:
            return E.IsNull(name) if boolean == "IsNull" else ~E.IsNull(name)
        if isinstance(boolean, dict) and name is not None:
            is_in = boolean.get("IsIn")
            # With nulls_equal a null is not IN the list (false, not null): the same rows, but not under
            # a NOT, where SQL's null would drop what Polars keeps.
            loose = isinstance(is_in, dict) and bool(is_in.get("nulls_equal"))
            if "IsIn" in boolean and len(inputs) == 2 and not (exact and loose):
                return E.In(name, tuple(_values(inputs[1], kinds[name])))
            between = boolean.get("IsBetween")
            if isinstance(between, dict) and len(inputs) == 3:
                closed = between.get("closed")
                low, high = _value(inputs[1], kinds[name]), _value(inputs[2], kinds[name])
                lower = ">=" if closed in ("Both", "Left") else ">"
                upper = "<=" if closed in ("Both", "Right") else "<"
                return E.Compare(lower, name, low) & E.Compare(upper, name, high)  # type: ignore[arg-type]
    if exact:
        raise _NoValue
    return None


def _part(node: Any, kinds: dict[str, type], exact: bool) -> E.Expr | None:
    """A sub-expression's translation; outside an exact context one that fails is unknown (None)."""
    return _translate(node, kinds, exact) if exact else _part_or_none(node, kinds)


def _part_or_none(node: Any, kinds: dict[str, type]) -> E.Expr | None:
    try:
        return _translate(node, kinds, exact=False)
    except _NoValue:
        return None
