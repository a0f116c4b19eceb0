"""Tests for mere.expr: parsing, binding, lowering to pyarrow and pruning analysis."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mere.errors import FilterError
from mere.expr import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    ArrowPredicate,
    ColumnStats,
    Compare,
    Expr,
    In,
    IsNull,
    Not,
    Or,
    bind,
    col,
    columns,
    conjunction,
    conjuncts,
    evaluate_constant,
    key_points,
    might_match,
    parse,
    split_by_columns,
    to_expr,
    to_pyarrow,
)

NAN = float("nan")
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 1", Compare("==", "x", 1)),
        ("x == 1", Compare("==", "x", 1)),
        ("x <> 'a'", Compare("!=", "x", "a")),
        ("x != -2", Compare("!=", "x", -2)),
        ("x >= 1.5", Compare(">=", "x", 1.5)),
        ("x < 1e3", Compare("<", "x", 1000.0)),
        ("x <= .5", Compare("<=", "x", 0.5)),
        ("10 < x", Compare(">", "x", 10)),
        ("10 >= x", Compare("<=", "x", 10)),
        ("'a' = x", Compare("==", "x", "a")),
        ("x = 'it''s'", Compare("==", "x", "it's")),
        ("x = TRUE", Compare("==", "x", True)),
        ("x = false", Compare("==", "x", False)),
        ("d = DATE '2026-11-21'", Compare("==", "d", dt.date(2026, 11, 21))),
        ("t > timestamp '2026-11-21 10:00:00'", Compare(">", "t", dt.datetime(2026, 11, 21, 10))),
        ("b = X'00ff'", Compare("==", "b", b"\x00\xff")),
        ('"my col" = 1', Compare("==", "my col", 1)),
        ('"a""b" = 1', Compare("==", 'a"b', 1)),
        ("`select` = 1", Compare("==", "select", 1)),
        ('"and" = 1', Compare("==", "and", 1)),
        ("a.b_c = 1", Compare("==", "a.b_c", 1)),
        ("date = 1", Compare("==", "date", 1)),
        ("x IN (1, 2, NULL)", In("x", (1, 2, None))),
        ("x not in ('a')", In("x", ("a",), negated=True)),
        ("x IN ()", In("x", ())),
        ("x IS NULL", IsNull("x")),
        ("x is not null", IsNull("x", negated=True)),
        ("x BETWEEN 1 AND 5", And(Compare(">=", "x", 1), Compare("<=", "x", 5))),
        ("x NOT BETWEEN 1 AND 5", Not(And(Compare(">=", "x", 1), Compare("<=", "x", 5)))),
        ("TRUE", AlwaysTrue()),
        ("NOT false", Not(AlwaysFalse())),
        ("((x = 1))", Compare("==", "x", 1)),
    ],
)
def test_parse(text: str, expected: Expr) -> None:
    result = parse(text)
    assert result == expected
    assert str(result) == str(expected)
    assert parse(str(result)) == result


def test_precedence() -> None:
    a, b, c = Compare("==", "a", 1), Compare("==", "b", 2), Compare("==", "c", 3)
    assert parse("a = 1 OR b = 2 AND NOT c = 3") == Or(a, And(b, Not(c)))
    assert parse("NOT a = 1 AND b = 2") == And(Not(a), b)
    assert parse("(a = 1 OR b = 2) AND c = 3") == And(Or(a, b), c)
    assert parse("a = 1 or b = 2 or c = 3") == Or(Or(a, b), c)
    assert parse("a = 1 AND b = 2 AND c = 3") == And(And(a, b), c)
    assert parse("x BETWEEN 1 AND 2 AND c = 3") == And(And(Compare(">=", "x", 1), Compare("<=", "x", 2)), c)
    assert str(And(a, Or(b, c))) == "a = 1 AND (b = 2 OR c = 3)"
    assert str(Or(a, Or(b, c))) == "a = 1 OR (b = 2 OR c = 3)"
    assert str(Not(And(a, b))) == "NOT (a = 1 AND b = 2)"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("x = NULL", "position 4"),
        ("NULL = x", "IS NULL"),
        ("x = y", "another column"),
        ("1 = 2", "column on one side"),
        ("x IN (1", "end of filter"),
        ("x = 'abc", "unterminated"),
        ("x = 1 y", "position 6"),
        ("x @ 1", "position 2"),
        ("x = 1 AND", "end of filter"),
        ("(x = 1", "expected ')'"),
        ("x IS 1", "NULL after IS"),
        ("x NOT = 1", "position 6"),
        ("x = DATE '2026-13-01'", "invalid DATE"),
        ("x", "after column 'x'"),
        ("5", "operator after the literal"),
        ('"" = 1', "empty quoted identifier"),
        ("", "empty filter"),
    ],
)
def test_parse_errors(text: str, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        parse(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_x_equals_null_suggests_is_null() -> None:
    with pytest.raises(FilterError, match="IS NULL"):
        parse("x = NULL")
    with pytest.raises(FilterError, match="is_null"):
        _ = col("x") == None  # noqa: E711
    with pytest.raises(FilterError):
        Compare("==", "x", None)


# Random expressions for the round-trip property ----------------------------------------------

names = st.one_of(
    st.sampled_from(["x", "y_1", "a.b", "date", "and", "Not", "my col", 'q"uote', "back`tick", "é"]),
    st.text(min_size=1, max_size=6),
)
any_literal = st.one_of(
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.booleans(),
    st.dates(),
    st.datetimes(timezones=st.sampled_from([None, dt.UTC, dt.timezone(dt.timedelta(hours=-5))])),
    st.binary(max_size=4),
)


def atoms(column: st.SearchStrategy[str], literal: st.SearchStrategy[Any]) -> st.SearchStrategy[Expr]:
    ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
    return st.one_of(
        st.builds(Compare, ops, column, literal),
        st.builds(In, column, st.lists(st.one_of(st.none(), literal), max_size=4).map(tuple), st.booleans()),
        st.builds(IsNull, column, st.booleans()),
        st.sampled_from([AlwaysTrue(), AlwaysFalse()]),
    )


def trees(leaves: st.SearchStrategy[Expr], max_leaves: int = 8) -> st.SearchStrategy[Expr]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.builds(And, inner, inner), st.builds(Or, inner, inner), st.builds(Not, inner)
        ),
        max_leaves=max_leaves,
    )


def expressions(column: st.SearchStrategy[str], literal: st.SearchStrategy[Any]) -> st.SearchStrategy[Expr]:
    return trees(atoms(column, literal))


@SETTINGS
@given(expressions(names, any_literal))
def test_round_trip(expr: Expr) -> None:
    text = str(expr)
    assert repr(expr) == text
    again = parse(text)
    assert again == expr
    assert str(again) == text


# ---------------------------------------------------------------------------------------------
# Builder API and helpers


def test_builder() -> None:
    x = col("x")
    assert (x == 3) == Compare("==", "x", 3)
    assert (x != 3) == Compare("!=", "x", 3)
    assert (x > 3) == Compare(">", "x", 3)
    assert (x <= 3) == Compare("<=", "x", 3)
    assert (3 < x) == Compare(">", "x", 3)  # noqa: SIM300 - the literal on the left is the point
    assert (3 >= x) == Compare("<=", "x", 3)  # noqa: SIM300
    assert (3 == x) == Compare("==", "x", 3)  # noqa: SIM300
    assert x.isin([1, 2]) == In("x", (1, 2))
    assert x.not_in([1]) == In("x", (1,), negated=True)
    assert x.is_null() == IsNull("x")
    assert x.is_not_null() == IsNull("x", negated=True)
    assert x.between(1, 2) == And(Compare(">=", "x", 1), Compare("<=", "x", 2))
    assert ((x == 1) & (x == 2)) == And(Compare("==", "x", 1), Compare("==", "x", 2))
    assert ((x == 1) | ~(x == 2)) == Or(Compare("==", "x", 1), Not(Compare("==", "x", 2)))
    assert Compare("=", "x", pa.scalar(3)) == Compare("==", "x", 3)  # type: ignore[arg-type]
    assert In("x", [1, 2]) == In("x", (1, 2))  # type: ignore[arg-type]
    arrow = pc.field("y") > 1
    combined = (x == 1) & arrow
    assert isinstance(combined, And) and combined.right == ArrowPredicate(arrow)
    assert hash(Compare("==", "x", 1)) == hash(parse("x = 1"))
    assert Compare("==", "x", np.int64(3)).value == 3 and type(Compare("==", "x", np.int64(3)).value) is int
    assert In("x", (np.float32(1.5), np.bool_(True))).values == (1.5, True)
    with pytest.raises(FilterError, match="no truth value"):
        bool(x == 1)
    with pytest.raises(FilterError, match="another column"):
        _ = x == col("y")
    with pytest.raises(FilterError):
        Compare("~", "x", 1)  # type: ignore[arg-type]
    with pytest.raises(FilterError):
        In("x", "abc")  # type: ignore[arg-type]


def test_to_expr() -> None:
    assert to_expr(None) == AlwaysTrue()
    assert to_expr("x = 1") == Compare("==", "x", 1)
    e = Compare("==", "x", 1)
    assert to_expr(e) is e
    arrow = pc.field("x") == 1
    assert to_expr(arrow) == ArrowPredicate(arrow)
    assert to_expr(arrow) != ArrowPredicate(pc.field("x") == 2)
    with pytest.raises(FilterError):
        to_expr(5)


def test_columns_conjuncts_split() -> None:
    e = parse("a = 1 AND (b = 2 OR c IS NULL) AND NOT (d = 1 OR e IN (1))")
    assert columns(e) == frozenset("abcde")
    assert columns(AlwaysTrue()) == frozenset()
    assert columns(e & ArrowPredicate(pc.field("z") == 1)) is None
    parts = conjuncts(e)
    assert parts == [
        Compare("==", "a", 1),
        Or(Compare("==", "b", 2), IsNull("c")),
        Compare("!=", "d", 1),
        In("e", (1,), negated=True),
    ]
    assert conjuncts(AlwaysTrue()) == []
    assert conjunction([]) == AlwaysTrue()
    assert conjunction([AlwaysTrue(), parts[0]]) == parts[0]
    assert conjunction(parts[:3]) == And(And(parts[0], parts[1]), parts[2])
    arrow = ArrowPredicate(pc.field("a") == 1)
    inside, rest = split_by_columns(e & arrow, {"a", "d", "e"})
    assert inside == conjunction([parts[0], parts[2], parts[3]])
    assert rest == And(parts[1], arrow)
    assert split_by_columns(AlwaysTrue(), ["a"]) == (AlwaysTrue(), AlwaysTrue())


# ---------------------------------------------------------------------------------------------
# Binding

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("i8", pa.int8()),
        ("f", pa.float64()),
        ("f32", pa.float32()),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("ns")),
        ("tsz", pa.timestamp("us", "UTC")),
        ("dec", pa.decimal128(10, 2)),
        ("dict", pa.dictionary(pa.int32(), pa.string())),
    ]
)


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("i", 3, 3),
        ("i", 3.0, 3),
        ("i8", -5, -5),
        ("f", 3, 3.0),
        ("f", 1.5, 1.5),
        ("f32", 1.5, 1.5),
        ("s", "abc", "abc"),
        ("ls", "abc", "abc"),
        ("dict", "abc", "abc"),
        ("bin", "ab", b"ab"),
        ("bin", b"ab", b"ab"),
        ("b", True, True),
        ("d", "2026-11-21", dt.date(2026, 11, 21)),
        ("d", dt.date(2026, 11, 21), dt.date(2026, 11, 21)),
        ("d", dt.datetime(2026, 11, 21), dt.date(2026, 11, 21)),
        ("ts", "2026-11-21 10:00:00", dt.datetime(2026, 11, 21, 10)),
        ("ts", "2026-11-21T10:00:00.123456", dt.datetime(2026, 11, 21, 10, 0, 0, 123456)),
        ("ts", dt.date(2026, 11, 21), dt.datetime(2026, 11, 21)),
        ("tsz", "2026-11-21 10:00:00+01:00", dt.datetime(2026, 11, 21, 9, tzinfo=dt.UTC)),
        ("tsz", dt.datetime(2026, 11, 21, 9, tzinfo=dt.UTC), dt.datetime(2026, 11, 21, 9, tzinfo=dt.UTC)),
        ("dec", 1.5, Decimal("1.50")),
        ("dec", 2, Decimal("2.00")),
        ("dec", Decimal("0.1"), Decimal("0.10")),
    ],
)
def test_bind_casts(column: str, value: object, expected: object) -> None:
    bound = bind(Compare("==", column, value), SCHEMA)
    assert isinstance(bound, Compare)
    assert bound.value == expected
    assert type(bound.value) is type(expected)
    bound_in = bind(In(column, (value, None)), SCHEMA)
    assert isinstance(bound_in, In)
    assert bound_in.values == (expected, None)
    assert type(bound_in.values[0]) is type(expected)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("i", "abc"),
        ("i", "3"),
        ("i", 3.5),
        ("i", True),
        ("i8", 300),
        ("f", "1.5"),
        ("f", False),
        ("s", 1),
        ("b", 1),
        ("d", "nope"),
        ("d", "2026-02-30"),
        ("d", 5),
        ("d", dt.datetime(2026, 11, 21, 10)),
        ("ts", "yesterday"),
        ("ts", dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
        ("ts", "2026-11-21 10:00:00.123456789"),
        ("tsz", dt.datetime(2026, 1, 1)),
        ("dec", 1.234),
        ("dec", "1.5"),
    ],
)
def test_bind_rejects(column: str, value: object) -> None:
    with pytest.raises(FilterError, match=repr(column)):
        bind(Compare("==", column, value), SCHEMA)


def test_bind_unknown_column_and_passthrough() -> None:
    with pytest.raises(FilterError, match=r"unknown column 'nope'.*available columns: i, i8, f"):
        bind(parse("i = 1 AND nope IS NULL"), SCHEMA)
    arrow = ArrowPredicate(pc.field("whatever") == 1)
    assert bind(arrow, SCHEMA) == arrow
    e = parse("NOT (i = 1.0 OR f IN (1, 2)) AND d BETWEEN '2026-01-01' AND '2026-02-01'")
    assert str(bind(e, SCHEMA)) == (
        "NOT (i = 1 OR f IN (1.0, 2.0)) AND (d >= DATE '2026-01-01' AND d <= DATE '2026-02-01')"
    )


def _evaluate(table: pa.Table, expr: Expr) -> list[bool | None]:
    """The 3-valued result of ``expr`` per row, computed by Arrow."""
    result = ds.dataset(table).to_table(columns={"r": to_pyarrow(expr)}).column("r").to_pylist()
    return [None if r is None else bool(r) for r in result]


def test_bound_literals_work_with_arrow() -> None:
    table = pa.table(
        {
            "ts": pa.array(
                [dt.datetime(2026, 11, 21, 10), None, dt.datetime(2026, 11, 22)], pa.timestamp("ns")
            ),
            "d": pa.array([dt.date(2026, 11, 21), dt.date(2026, 11, 20), None], pa.date32()),
            "dec": pa.array([Decimal("1.50"), Decimal("2.00"), None], pa.decimal128(10, 2)),
            "f32": pa.array([1.5, 0.1, None], pa.float32()),
            "i8": pa.array([1, None, 3], pa.int8()),
        }
    )
    expr = bind(
        parse(
            "ts >= '2026-11-21 10:00:00' AND d = '2026-11-21' AND dec IN (1.5, 3) AND f32 < 2 AND i8 NOT IN (2, 4)"
        ),
        table.schema,
    )
    assert _evaluate(table, expr) == [True, False, None]
    assert _evaluate(table, bind(parse("f32 = 0.1"), table.schema)) == [False, True, None]
    assert table.filter(to_pyarrow(bind(parse("d < DATE '2026-11-21'"), table.schema))).num_rows == 1


# ---------------------------------------------------------------------------------------------
# to_pyarrow against a pure-Python model with SQL null semantics

BASE_DATE = dt.date(2026, 1, 1)
DOMAINS: dict[str, tuple[pa.DataType, list[Any], list[Any]]] = {
    # column: (type, data values, literal values)
    "i": (pa.int64(), [-2, -1, 0, 1, 2, 3], [-3, -1, 0, 1, 2, 4]),
    "f": (pa.float64(), [-1.5, 0.0, 2.5, NAN], [-1.5, 0.0, 1.0, 2.5, NAN]),
    "s": (pa.string(), ["", "a", "ab", "b", "é"], ["", "a", "ab", "b", "c", "é"]),
    "d": (
        pa.date32(),
        [BASE_DATE + dt.timedelta(n) for n in range(4)],
        [BASE_DATE + dt.timedelta(n) for n in range(-1, 5)],
    ),
    "b": (pa.bool_(), [True, False], [True, False]),
}
TABLE_SCHEMA = pa.schema([(name, typ) for name, (typ, _, _) in DOMAINS.items()])


# Random expressions where each atom uses a literal of its own column's type.
mixed_expressions = trees(
    st.one_of(*[atoms(st.just(c), st.sampled_from(DOMAINS[c][2])) for c in sorted(DOMAINS)]), max_leaves=10
)


def rows_strategy(min_size: int = 0) -> st.SearchStrategy[list[dict[str, Any]]]:
    row = st.fixed_dictionaries(
        {c: st.one_of(st.none(), st.sampled_from(data)) for c, (_, data, _) in DOMAINS.items()}
    )
    return st.lists(row, min_size=min_size, max_size=12)


def _same(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def model(expr: Expr, row: dict[str, Any]) -> bool | None:
    """Reference 3-valued evaluation of one row, written independently of mere.expr."""
    if isinstance(expr, AlwaysTrue):
        return True
    if isinstance(expr, AlwaysFalse):
        return False
    if isinstance(expr, Not):
        v = model(expr.operand, row)
        return None if v is None else not v
    if isinstance(expr, And):
        vals = [model(expr.left, row), model(expr.right, row)]
        return False if False in vals else (None if None in vals else True)
    if isinstance(expr, Or):
        vals = [model(expr.left, row), model(expr.right, row)]
        return True if True in vals else (None if None in vals else False)
    if isinstance(expr, IsNull):
        return (row[expr.column] is None) != expr.negated
    assert isinstance(expr, Compare | In)
    x = row[expr.column]
    if isinstance(expr, Compare):
        if x is None:
            return None
        lit = expr.value
        return bool(
            {
                "==": lambda: x == lit,
                "!=": lambda: x != lit,
                "<": lambda: x < lit,
                "<=": lambda: x <= lit,
                ">": lambda: x > lit,
                ">=": lambda: x >= lit,
            }[expr.op]()
        )
    result: bool | None
    if not expr.values:
        result = False  # an empty IN list is FALSE for every row
    elif x is None:
        result = None
    elif any(v is not None and _same(x, v) for v in expr.values):
        result = True
    else:
        result = None if None in expr.values else False
    if expr.negated and result is not None:
        result = not result
    return result


def make_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=TABLE_SCHEMA)


@SETTINGS
@given(rows_strategy(), mixed_expressions, st.booleans())
def test_to_pyarrow_matches_model(rows: list[dict[str, Any]], expr: Expr, bound: bool) -> None:
    table = make_table(rows)
    if bound:
        expr = bind(expr, TABLE_SCHEMA)
    expected = [model(expr, row) for row in rows]
    assert _evaluate(table, expr) == expected
    kept = table.filter(to_pyarrow(expr)).to_pylist()
    assert len(kept) == expected.count(True)


def test_sql_null_semantics() -> None:
    table = pa.table({"x": pa.array([1, 2, None], pa.int64())})
    cases = {
        "x = 1": [True, False, None],
        "NOT x = 1": [False, True, None],
        "x IN (1, NULL)": [True, None, None],
        "x NOT IN (1, NULL)": [False, None, None],
        "x NOT IN (1)": [False, True, None],
        "x IN (NULL)": [None, None, None],
        "x IN ()": [False, False, False],
        "x NOT IN ()": [True, True, True],
        "x IS NULL": [False, False, True],
        "NOT (x > 1 OR x IS NULL)": [True, False, False],
        "x = 1 OR x IS NULL": [True, False, True],
        "NOT TRUE": [False, False, False],
    }
    for text, expected in cases.items():
        assert _evaluate(table, parse(text)) == expected, text
    assert _evaluate(table, ArrowPredicate(pc.field("x") == 2)) == [False, True, None]


# ---------------------------------------------------------------------------------------------
# key_points


@pytest.mark.parametrize(
    ("text", "keys", "expected"),
    [
        ("a = 1 AND b = 'x'", ["a", "b"], [(1, "x")]),
        ("b = 'x' AND a = 1", ["a", "b"], [(1, "x")]),
        ("a IN (1, 2) AND b IN ('x', 'y', NULL)", ["a", "b"], [(1, "x"), (1, "y"), (2, "x"), (2, "y")]),
        ("(a = 1 OR a = 2 OR a IN (2, 3)) AND b = 'x'", ["a", "b"], [(1, "x"), (2, "x"), (3, "x")]),
        ("a = 1", ["a", "b"], None),
        ("a = 1 OR b = 'x'", ["a"], None),
        ("a > 1", ["a"], None),
        ("a != 1", ["a"], None),
        ("a NOT IN (1)", ["a"], None),
        ("a = 1 AND a = 2", ["a"], []),
        ("a IN (1, 2, 3) AND a IN (2, 3, 4) AND c > 5", ["a"], [(2,), (3,)]),
        ("(a = 1 AND b = 'x') OR (a = 2 AND b = 'y')", ["a", "b"], [(1, "x"), (1, "y"), (2, "x"), (2, "y")]),
        ("(a = 1 AND b = 'x') OR a = 2", ["a", "b"], None),
        ("NOT a != 1", ["a"], [(1,)]),
        ("NOT (a NOT IN (4, 5) OR a != 5)", ["a"], [(5,)]),
        ("FALSE", ["a"], []),
        ("a = 1 AND FALSE", ["a"], []),
        ("FALSE OR a = 3", ["a"], [(3,)]),
        ("a IN ()", ["a"], []),
        ("a IN (NULL)", ["a"], []),
        ("TRUE", ["a"], None),
    ],
)
def test_key_points(text: str, keys: list[str], expected: list[tuple[Any, ...]] | None) -> None:
    result = key_points(parse(text), keys)
    if expected is None or result is None:
        assert result == expected
    else:
        assert sorted(result) == sorted(expected)


def test_key_points_limit_and_arrow() -> None:
    e = parse("a IN (1, 2, 3) AND b IN (1, 2, 3)")
    assert key_points(e, ["a", "b"], limit=9) is not None
    assert key_points(e, ["a", "b"], limit=8) is None
    arrow = ArrowPredicate(pc.field("a") == 1)
    assert key_points(arrow, ["a"]) is None
    assert key_points(Compare("==", "a", 1) & arrow, ["a"]) == [(1,)]


@SETTINGS
@given(rows_strategy(), mixed_expressions)
def test_key_points_sound(rows: list[dict[str, Any]], expr: Expr) -> None:
    keys = ["i", "s"]
    points = key_points(expr, keys)
    if points is None:
        return
    for row in rows:
        if model(expr, row) is True:
            assert tuple(row[k] for k in keys) in points


# ---------------------------------------------------------------------------------------------
# might_match (row-group pruning)


def chunk_stats(rows: list[dict[str, Any]]) -> dict[str, ColumnStats]:
    """Parquet-like statistics: min/max ignore nulls and NaN."""
    stats = {}
    for name in DOMAINS:
        values = [r[name] for r in rows]
        present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
        stats[name] = ColumnStats(
            min=min(present) if present else None,
            max=max(present) if present else None,
            null_count=values.count(None),
            num_values=len(values),
        )
    return stats


def degrade(stats: dict[str, ColumnStats], data: st.DataObject) -> dict[str, ColumnStats]:
    """Randomly forget some statistics (still sound inputs)."""
    out = {}
    for name, s in stats.items():
        choice = data.draw(st.sampled_from(["keep", "keep", "drop", "no-minmax", "no-counts"]))
        if choice == "keep":
            out[name] = s
        elif choice == "no-minmax":
            out[name] = ColumnStats(null_count=s.null_count, num_values=s.num_values)
        elif choice == "no-counts":
            out[name] = ColumnStats(min=s.min, max=s.max)
    return out


@SETTINGS
@given(rows_strategy(min_size=1), mixed_expressions, st.data())
def test_might_match_sound(rows: list[dict[str, Any]], expr: Expr, data: st.DataObject) -> None:
    stats = chunk_stats(rows)
    if any(model(expr, row) is True for row in rows):
        assert might_match(expr, stats)
        assert might_match(expr, degrade(stats, data))
        assert might_match(bind(expr, TABLE_SCHEMA), stats)


def test_might_match_prunes() -> None:
    stats = {
        "x": ColumnStats(min=10, max=20, null_count=0, num_values=100),
        "n": ColumnStats(min=None, max=None, null_count=100, num_values=100),
        "s": ColumnStats(min="b", max="d", null_count=3, num_values=100),
        "c": ColumnStats(min=5, max=5, null_count=0, num_values=100),
        "f": ColumnStats(min=1.0, max=1.0, null_count=0, num_values=100),
        "d": ColumnStats(min=dt.date(2026, 1, 1), max=dt.date(2026, 1, 31), null_count=0, num_values=100),
    }
    pruned = [
        "x < 10", "x > 20", "x = 9", "x >= 21", "x <= 9", "x IN (1, 2, 30)", "x IS NULL",
        "n = 1", "n IS NOT NULL", "n IN (1)", "s = 'a'", "s > 'd'", "c != 5", "c NOT IN (5)",
        "NOT c = 5", "NOT x > 5", "NOT (x >= 10 AND x <= 20)", "x < 10 OR x > 20",
        "FALSE", "x IN ()", "x IN (NULL)", "x NOT IN (1, NULL)", "c IN (1, NULL)", "d < DATE '2026-01-01'",
        "NOT c IS NOT NULL", "x = 15 AND s = 'e'",
    ]  # fmt: skip
    kept = [
        "x = 10", "x >= 20", "x IN (20, NULL)", "x != 15", "n IS NULL", "s IS NULL", "s = 'c'",
        "c = 5", "c NOT IN (4)", "NOT x < 15", "y = 1", "x = 'a'", "f != 1.0", "NOT f < 2.0",
        "x NOT IN ()", "TRUE", "d = DATE '2026-01-15'", "d = TIMESTAMP '2026-01-01 00:00:00'",
        "NOT (x = 1 AND y = 2)",
    ]  # fmt: skip
    for text in pruned:
        assert not might_match(parse(text), stats), text
    for text in kept:
        assert might_match(parse(text), stats), text
    assert might_match(ArrowPredicate(pc.field("x") < 0), stats)
    assert might_match(parse("x = 1"), {})


def test_might_match_with_parquet_statistics(tmp_path: Path) -> None:
    """Row groups that hold matching rows are never pruned; clearly empty ones are."""
    rows = [
        {
            "i": n,
            "f": [0.5, NAN, None, -2.0][n % 4],
            "s": None if n % 5 == 0 else f"k{n:03d}",
            "d": BASE_DATE + dt.timedelta(days=n),
            "ts": dt.datetime(2026, 1, 1) + dt.timedelta(hours=n),
            "dec": Decimal(n) / 4,
        }
        for n in range(100)
    ]
    schema = pa.schema(
        [
            ("i", pa.int32()),
            ("f", pa.float64()),
            ("s", pa.string()),
            ("d", pa.date32()),
            ("ts", pa.timestamp("ns")),
            ("dec", pa.decimal128(9, 2)),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=10)
    metadata = pq.ParquetFile(path).metadata
    filters = [
        "i = 15", "i IN (3, 47)", "i > 95", "NOT i < 90", "f != 0.5", "f = 0.5", "NOT f < 0", "f IS NULL",
        "s = 'k033'", "s IS NULL AND i > 50", "s > 'k090'", "d = DATE '2026-01-15'", "d < '2026-01-05'",
        "ts >= '2026-01-04 01:00:00'", "dec BETWEEN 2.5 AND 3", "dec IN (10, 24.75)", "i != 5 AND d != DATE '2026-01-06'",
    ]  # fmt: skip
    pruned_any = False
    for text in filters:
        expr = bind(parse(text), schema)
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            stats = {}
            for c in range(group.num_columns):
                s = group.column(c).statistics
                has = s is not None and s.has_min_max
                stats[group.column(c).path_in_schema] = ColumnStats(
                    min=s.min if has else None,
                    max=s.max if has else None,
                    null_count=s.null_count if s is not None and s.has_null_count else None,
                    num_values=group.num_rows,
                )
            chunk = table.slice(g * 10, 10)
            matches = chunk.filter(to_pyarrow(expr)).num_rows
            assert might_match(expr, stats) or matches == 0, (text, g)
            pruned_any = pruned_any or not might_match(expr, stats)
    assert pruned_any


# ---------------------------------------------------------------------------------------------
# evaluate_constant (partition pruning)


@SETTINGS
@given(rows_strategy(min_size=1), mixed_expressions, st.data())
def test_evaluate_constant_sound(rows: list[dict[str, Any]], expr: Expr, data: st.DataObject) -> None:
    row = rows[0]
    assert evaluate_constant(expr, row) is (model(expr, row) is True)
    known = data.draw(st.sets(st.sampled_from(sorted(DOMAINS))))
    result = evaluate_constant(expr, {c: row[c] for c in known})
    if result is not None:
        for other in rows:
            completed = {**other, **{c: row[c] for c in known}}
            assert result is (model(expr, completed) is True)


def test_evaluate_constant_cases() -> None:
    assert evaluate_constant(parse("p = 1"), {"p": 1}) is True
    assert evaluate_constant(parse("p = 1"), {"p": 2}) is False
    assert evaluate_constant(parse("p = 1"), {"p": None}) is False
    assert evaluate_constant(parse("NOT p = 1"), {"p": None}) is False
    assert evaluate_constant(parse("p IS NULL"), {"p": None}) is True
    assert evaluate_constant(parse("p = 1 AND x > 5"), {"p": 2}) is False
    assert evaluate_constant(parse("p = 1 AND x > 5"), {"p": 1}) is None
    assert evaluate_constant(parse("p = 1 OR x > 5"), {"p": 1}) is True
    assert evaluate_constant(parse("p NOT IN (1, NULL)"), {"p": 2}) is False
    assert evaluate_constant(parse("x IS NULL OR x IS NOT NULL"), {}) is None  # per-atom analysis
    assert evaluate_constant(parse("d = DATE '2026-11-21'"), {"d": dt.date(2026, 11, 21)}) is True
    assert evaluate_constant(parse("p = '1'"), {"p": 1}) is None  # incomparable types: unknown
    assert evaluate_constant(ArrowPredicate(pc.field("p") == 1), {"p": 2}) is None
    assert evaluate_constant(AlwaysFalse(), {}) is False
