"""Trial 52: decimal arithmetic beyond 38 digits (exact decimal256) in filters, DELETE, UPDATE and MERGE
against an exact Python ``decimal`` oracle and DuckDB; property key/value validation on every entry point;
``cdc_column`` naming a key, partition or ordinary column; CDC TRUNCATE refusals."""

from __future__ import annotations

import ast
import contextlib
import decimal
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError

D = Decimal
CTX = decimal.Context(prec=400)

# ---------------------------------------------------------------------------------------------
# Decimal arithmetic: a random table and random expressions, checked exactly


DEC_TYPES = [
    pa.decimal128(38, 10),
    pa.decimal128(38, 0),
    pa.decimal128(38, 38),
    pa.decimal128(20, 4),
    pa.decimal128(5, 5),
    pa.decimal128(1, 0),
    pa.decimal128(10, 2),
    pa.decimal128(37, 3),
    pa.decimal256(40, 6),
    pa.decimal256(50, 0),
]
INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


@st.composite
def _dec_value(draw: st.DrawFn, t: pa.DataType) -> Decimal | None:
    if draw(st.integers(0, 6)) == 0:
        return None
    p, s = t.precision, t.scale
    top = 10**p - 1
    kind = draw(st.integers(0, 3))
    if kind == 0:
        n = draw(st.integers(-top, top))
    elif kind == 1:
        n = draw(st.integers(-1000, 1000))
    elif kind == 2:
        n = draw(st.sampled_from([top, -top, 0, 1, -1]))
    else:
        n = draw(st.integers(-(10 ** min(p, 6)), 10 ** min(p, 6))) * 10 ** max(0, min(s, p - 6))
    n = max(-top, min(top, n))
    return D(n).scaleb(-s, CTX)


@st.composite
def _int_value(draw: st.DrawFn, t: pa.DataType) -> int | None:
    if draw(st.integers(0, 6)) == 0:
        return None
    lo, hi = _int_range(t)
    return draw(
        st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1]), st.integers(max(lo, -50), 50))
    )


N_ROWS = 6


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Schema, list[dict[str, Any]]]:
    d1, d2, d3 = (draw(st.sampled_from(DEC_TYPES)) for _ in range(3))
    i1, i2 = (draw(st.sampled_from(INT_TYPES)) for _ in range(2))
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("d1", d1),
            ("d2", d2),
            ("d3", d3),
            ("i1", i1),
            ("i2", i2),
        ]
    )
    rows = [
        {
            "id": k,
            "d1": draw(_dec_value(d1)),
            "d2": draw(_dec_value(d2)),
            "d3": draw(_dec_value(d3)),
            "i1": draw(_int_value(i1)),
            "i2": draw(_int_value(i2)),
        }
        for k in range(N_ROWS)
    ]
    return schema, rows


LEAVES = st.one_of(
    st.sampled_from(["d1", "d2", "d3", "i1", "i2"]),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["10", "0", "1", "-1", "99999999999999999999999999999999999999"]),
    st.builds(lambda n, s: format(D(n).scaleb(-s), "f"), st.integers(-(10**12), 10**12), st.integers(1, 30)),
)


def _exprs() -> st.SearchStrategy[str]:
    return st.recursive(
        LEAVES,
        lambda inner: st.builds(
            lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["+", "-", "*"]), inner
        ),
        max_leaves=4,
    )


def _has_column(e: str) -> bool:
    return any(c in e for c in ("d1", "d2", "d3", "i1", "i2"))


def _py_value(row: dict[str, Any], expr: str) -> Decimal | None:
    env = {k: (D(v) if isinstance(v, int) else v) for k, v in row.items()}
    with decimal.localcontext(CTX):
        try:
            return eval(_literal_decimals(expr), {"D": D}, env)
        except TypeError:  # a NULL operand
            return None


def _literal_decimals(expr: str) -> str:
    """Numeric literals as exact Decimal('...') so Python computes exactly."""
    import re

    return re.sub(r"(?<![\w.])(\d+(?:\.\d+)?)", r"D('\1')", expr)


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _static(schema: pa.Schema, expr: str) -> tuple[str, int, int]:
    """A conservative static type of ``expr``: ("int", 0, 0), ("dec", precision, scale); precision over
    76 means mere may refuse it; ("intint", ...) where integer arithmetic may overflow."""
    return _static_node(schema, ast.parse(_literal_decimals(expr), mode="eval").body)


def _static_node(schema: pa.Schema, tree: ast.AST) -> tuple[str, int, int]:
    def walk(node: ast.AST) -> tuple[str, int, int]:
        if isinstance(node, ast.Name):
            t = schema.field(node.id).type
            if _is_int(t):
                return ("int", 20, 0)
            return ("dec", t.precision, t.scale)
        if isinstance(node, ast.UnaryOp):
            return walk(node.operand)
        if isinstance(node, ast.Call):  # D('text'): a literal as written
            text = node.args[0].value  # type: ignore[attr-defined]
            if "." not in text:
                return ("lit", len(text), 0)
            whole, frac = text.split(".")
            return ("dec", len(whole.lstrip("0")) + len(frac), len(frac))
        assert isinstance(node, ast.BinOp)
        a, b = walk(node.left), walk(node.right)
        if a[0] in ("int", "lit", "intint") and b[0] in ("int", "lit", "intint"):
            return ("intint", 20, 0)
        (p1, s1), (p2, s2) = a[1:], b[1:]
        if a[0] in ("int", "intint"):
            p1 = 20
        if b[0] in ("int", "intint"):
            p2 = 20
        if isinstance(node.op, ast.Mult):
            return ("dec", p1 + p2 + 1, s1 + s2)
        return ("dec", max(s1, s2) + max(p1 - s1, p2 - s2) + 1, max(s1, s2))

    return walk(tree)


def _ids(t: mere.Table, where: str) -> list[int]:
    return sorted(t.scan(filter=where).to_arrow().column("id").to_pylist())


def _make(cat: mere.Catalog, name: str, schema: pa.Schema, rows: list[dict[str, Any]]) -> mere.Table:
    t = cat.create_table(name, schema, primary_key="id", buckets=2)
    t.upsert(pa.Table.from_pylist(rows, schema=schema))
    return t


def _intint_anywhere(schema: pa.Schema, expr: str) -> bool:
    tree = ast.parse(expr, mode="eval").body
    found = False

    def walk(node: ast.AST) -> str:
        nonlocal found
        if isinstance(node, ast.Name):
            return "int" if _is_int(schema.field(node.id).type) else "dec"
        if isinstance(node, ast.Constant):
            return "int" if isinstance(node.value, int) else "dec"
        if isinstance(node, ast.UnaryOp):
            return walk(node.operand)
        assert isinstance(node, ast.BinOp)
        a, b = walk(node.left), walk(node.right)
        if a == "int" and b == "int":
            found = True
            return "int"
        return "dec"

    walk(tree)
    return found


def _deep_refuse(schema: pa.Schema, expr: str) -> bool:
    """Whether some subexpression's conservative precision exceeds 76 (mere may refuse)."""
    tree = ast.parse(_literal_decimals(expr), mode="eval").body
    over = False

    def walk(node: ast.AST) -> None:
        nonlocal over
        if isinstance(node, ast.BinOp):
            walk(node.left)
            walk(node.right)
            kind, p, _ = _static_node(schema, node)
            if kind == "dec" and p > 76:
                over = True

    walk(tree)
    return over


SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(data=tables(), left=_exprs(), op=st.sampled_from([">", "<", "=", "<>", ">=", "<="]), right=_exprs())
def test_decimal_filters_match_exact_decimal_oracle(
    tmp_path_factory: pytest.TempPathFactory,
    data: tuple[pa.Schema, list[dict[str, Any]]],
    left: str,
    op: str,
    right: str,
) -> None:
    schema, rows = data
    if not (_has_column(left) or _has_column(right)):
        left = f"(d1 * {left})"
    where = f"{left} {op} {right}"
    pyop = {"=": "==", "<>": "!="}.get(op, op)
    expected = []
    for r in rows:
        a, b = _py_value(r, left), _py_value(r, right)
        if a is not None and b is not None and eval(f"a {pyop} b"):
            expected.append(r["id"])
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = _make(cat, "t.dec", schema, rows)
    try:
        got = _ids(t, where)
    except MereError as exc:
        allowed = (
            _deep_refuse(schema, left)
            or _deep_refuse(schema, right)
            or _intint_anywhere(schema, left)
            or _intint_anywhere(schema, right)
        )
        # comparing decimals whose common type exceeds 38 digits is refused today (see the xfail tests below)
        allowed = allowed or bool(
            re.search(r"\b(equal|not_equal|greater|greater_equal|less|less_equal) cannot take", str(exc))
        )
        assert allowed, f"{where}: refused {exc}"
        return
    assert got == expected, where
    assert t.scan(filter=where).count() == len(expected)
    t.delete(where)
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == sorted(set(range(N_ROWS)) - set(expected))


def _store_expected(value: Decimal | None, t: pa.DataType) -> tuple[str, Any]:
    """("ok", stored) where the column holds the exact value; ("refuse", None) where it cannot;
    ("round", rounded) where only more fraction digits than the scale (DuckDB rounds, mere may refuse)."""
    if value is None:
        return ("ok", None)
    if _is_int(t):
        lo, hi = _int_range(t)
        if value != value.to_integral_value():
            r = int(value.to_integral_value(rounding=decimal.ROUND_HALF_UP))
            return ("round", r) if lo <= r <= hi else ("refuse", None)
        return ("ok", int(value)) if lo <= value <= hi else ("refuse", None)
    q = D(1).scaleb(-t.scale)
    rounded = value.quantize(q, rounding=decimal.ROUND_HALF_UP, context=CTX)
    fits = rounded.copy_abs() < D(10).scaleb(t.precision - t.scale - 1)
    if not fits:
        return ("refuse", None)
    if rounded == value:
        return ("ok", rounded)
    return ("round", rounded)


@SETTINGS
@given(
    data=tables(),
    expr=_exprs(),
    target=st.sampled_from(["d1", "d2", "d3", "i1"]),
    where=st.sampled_from([None, "id % 2 = 0", "d1 > 0"]),
)
def test_decimal_update_stores_exact_values_or_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    data: tuple[pa.Schema, list[dict[str, Any]]],
    expr: str,
    target: str,
    where: str | None,
) -> None:
    schema, rows = data
    if not _has_column(expr):
        expr = f"(d2 * {expr})"
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = _make(cat, "t.upd", schema, rows)
    before = t.scan().to_arrow().sort_by("id")
    v0 = t.version
    col_type = schema.field(target).type
    picked = []
    for r in rows:
        if where is None:
            hit = True
        elif where.startswith("id"):
            hit = r["id"] % 2 == 0
        else:
            hit = r["d1"] is not None and r["d1"] > 0
        picked.append(hit)
    outcomes = [
        _store_expected(_py_value(r, expr), col_type) if hit else ("ok", r[target])
        for r, hit in zip(rows, picked)
    ]
    try:
        t.update(set={target: expr}, where=where)
    except MereError:
        t2 = cat.table("t.upd")
        assert t2.version == v0 and t2.scan().to_arrow().sort_by("id").equals(before)
        ok = all(o[0] == "ok" for o in outcomes)
        if ok:  # every value fits: a refusal only for a statement beyond 76 digits or int overflow
            assert _deep_refuse(schema, expr) or _intint_anywhere(schema, expr), expr
        return
    assert all(o[0] != "refuse" for o in outcomes), f"{expr}: stored a value {target} cannot hold"
    got = sorted(cat.table("t.upd").scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    for r, o in zip(got, outcomes):
        assert r[target] == o[1], (expr, r, o)
        other = {k: v for k, v in r.items() if k != target}
        assert other == {k: v for k, v in rows[r["id"]].items() if k != target}


@SETTINGS
@given(
    data=tables(),
    expr=_exprs(),
    target=st.sampled_from(["d1", "d3", "i2"]),
    picks=st.sets(st.integers(0, N_ROWS + 1)),
)
def test_decimal_merge_update_stores_exact_values_or_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    data: tuple[pa.Schema, list[dict[str, Any]]],
    expr: str,
    target: str,
    picks: set[int],
) -> None:
    schema, rows = data
    if not _has_column(expr):
        expr = f"(d1 * {expr})"
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = _make(cat, "t.mrg", schema, rows)
    before = t.scan().to_arrow().sort_by("id")
    v0 = t.version
    src_rows = [dict(rows[k]) if k < N_ROWS else {**rows[0], "id": k} for k in sorted(picks)]
    src = pa.Table.from_pylist(src_rows, schema=schema)
    on_target = re.sub(r"\b(d1|d2|d3|i1|i2)\b", r"t.\1", expr)
    col_type = schema.field(target).type
    outcomes = {k: _store_expected(_py_value(rows[k], expr), col_type) for k in picks if k < N_ROWS}
    try:
        t.merge(src).when_matched_update(set={target: on_target}).when_not_matched_insert_all().execute()
    except MereError:
        t2 = cat.table("t.mrg")
        assert t2.version == v0 and t2.scan().to_arrow().sort_by("id").equals(before)
        if all(o[0] == "ok" for o in outcomes.values()):
            assert _deep_refuse(schema, expr) or _intint_anywhere(schema, expr), expr
        return
    assert all(o[0] != "refuse" for o in outcomes.values()), f"{expr}: stored a value {target} cannot hold"
    got = {r["id"]: r for r in cat.table("t.mrg").scan().to_arrow().to_pylist()}
    assert sorted(got) == sorted(set(range(N_ROWS)) | picks)
    for k, r in got.items():
        if k >= N_ROWS:
            assert r == {**rows[0], "id": k}
        elif k in outcomes:
            assert r[target] == outcomes[k][1], (expr, r, outcomes[k])
        else:
            assert r == rows[k]


def test_cdc_sync_properties_validated(tmp_path: Path) -> None:
    from cdc_render import wal2json_line
    from mere.integrations.cdc_sync import SyncOptions, events_from_json, sync_batch

    lines = [wal2json_line("public", "a", "I", None, {"id": 1, "v": "x"}, 10, TYPES, ["id"])]
    for i, opts in enumerate(
        [
            {"properties": {"": "x"}},
            {"properties": {"k": "a\x00"}},
            {"properties": {"k\n": "a"}, "on_error": "quarantine"},
            {"overrides": {"public.a": {"properties": {" ": "x"}}}},
            {"overrides": {"public.a": {"properties": {"k": "\x00"}}}, "on_error": "quarantine"},
        ]
    ):
        cat = mere.connect(str(tmp_path / f"wh{i}"))
        with pytest.raises(MereError):
            sync_batch(cat, events_from_json(lines, "wal2json"), SyncOptions("s", **opts), "k")
        assert cat.tables() == []


def test_dec38_times_ten_update_and_merge_exact(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("a", pa.decimal128(38, 10)), ("n", pa.decimal128(5, 2))]
    )
    rows = [
        {"id": 1, "a": D("1234567890123456789012345678.5000000000"), "n": D("1.25")},
        {"id": 2, "a": D("-2.25"), "n": D("999.99")},
        {"id": 3, "a": None, "n": None},
    ]
    t = _make(local_cat, "t.m", schema, rows)
    v = t.version
    # a * 10 overflows DECIMAL(38, 10) for row 1: refused, nothing changes
    with pytest.raises(MereError):
        t.update(set={"a": "a * 10"}, where=None)
    assert t.version == v
    t.update(set={"a": "a * 10 - a * 9"}, where="id = 1")  # exact through 49 digits, fits again
    assert t.scan(filter="id = 1").to_arrow().column("a").to_pylist() == [rows[0]["a"]]
    src = pa.table(
        {"id": [1, 2, 4], "a": [D("10"), D("3"), D("5")], "n": [D("1"), D("2"), D("3")]}, schema=schema
    )
    m = (
        t.merge(src)
        .when_matched_update(set={"a": "t.a * 10 - t.a * 9 + s.a"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert m is not None
    got = {r["id"]: r["a"] for r in t.scan().to_arrow().to_pylist()}
    assert got == {1: CTX.add(rows[0]["a"], 10), 2: D("0.75"), 3: None, 4: D("5")}
    v = t.version
    with pytest.raises(MereError):  # n * s.n * 1000 overflows DECIMAL(5, 2): refused, unchanged
        t.merge(src).when_matched_update(set={"n": "t.n * 1000"}).execute()
    assert t.version == v


def test_modulo_on_dec38_answers_like_duckdb(local_cat: mere.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("c", pa.decimal128(38, 0))])
    t = _make(local_cat, "t.mod", schema, [{"id": 1, "c": D(10)}, {"id": 2, "c": D(14)}])
    assert _ids(t, "c % 7 = 3") == [1]


def test_big_integer_literal_compared_with_scaled_decimal(local_cat: mere.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("i1", pa.int8())])
    t = _make(local_cat, "t.lit", schema, [{"id": 1, "i1": 1}, {"id": 2, "i1": None}])
    assert _ids(t, "99999999999999999999999999999999999999 > i1 + 0.5") == [1]


def test_comparing_dec38_columns_of_different_scales(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("c", pa.decimal128(38, 0)),
            ("a", pa.decimal128(38, 10)),
        ]
    )
    t = _make(
        local_cat, "t.cmp", schema, [{"id": 1, "c": D(7), "a": D(7)}, {"id": 2, "c": D(7), "a": D("7.5")}]
    )
    assert _ids(t, "c = a") == [1]


BIG = 10**38  # a 39-digit literal: mere types it as a DOUBLE (as DuckDB does)


def test_decimal256_expression_vs_39_digit_literal_is_exact(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("v", pa.decimal128(38, 0)), ("w", pa.decimal256(45, 0))]
    )
    t = _make(local_cat, "t.big", schema, [{"id": 1, "v": D(10**37 + 1), "w": D(BIG + 10)}])
    assert _ids(t, f"w > {BIG + 9}") == [1]  # the column alone compares exactly
    assert _ids(t, f"v * 10 - {BIG} > 0") == [1]
    assert _ids(t, f"w * 1 > {BIG + 9}") == [1]
    assert _ids(t, f"w + 0 > {BIG + 9}") == [1]
    assert _ids(t, f"v * 10 > {BIG}") == [1]
    assert _ids(t, f"v * 10 <> {BIG}") == [1]
    t.delete(f"v * 10 > {BIG}")
    assert t.scan().count() == 0


DUCK_CASES = [
    "d * 10 > 100",
    "d * i8 > 0",
    "d * u64 < 1e40",
    "d * 10 + c - 10 > 0",
    "d - c * 2 < 0",
    "d * f > 1",
    "c * 10 > f",
    "d * 10 in (15, 20)",
    "abs(d * 10) > 20",
    "cast(d * 10 as bigint) = -23",
    "round(d * 10, 0) = -23",
    "coalesce(d * 10, c) > 0",
    "-(d * 10) > 0",
    "d * 10 between 10 and 20",
]


@pytest.mark.parametrize("where", DUCK_CASES)
def test_decimal_arithmetic_vs_duckdb(local_cat: mere.Catalog, where: str) -> None:
    duckdb = pytest.importorskip("duckdb")
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("d", pa.decimal128(38, 10)),
            ("c", pa.decimal128(20, 0)),
            ("i8", pa.int8()),
            ("u64", pa.uint64()),
            ("f", pa.float64()),
        ]
    )
    rows = [
        {"id": 1, "d": D("1.5"), "c": D(10**19), "i8": 1, "u64": 0, "f": 1.5},
        {"id": 2, "d": D("-2.25"), "c": D(-5), "i8": -128, "u64": 2**64 - 1, "f": 2.0},
        {"id": 3, "d": None, "c": D(3), "i8": 127, "u64": 5, "f": None},
        {"id": 4, "d": D("12345678901234567.0123456789"), "c": None, "i8": None, "u64": None, "f": -1.0},
    ]
    t = _make(local_cat, "t.duck", schema, rows)
    con = duckdb.connect()
    table = pa.Table.from_pylist(rows, schema=schema)
    con.register("t", table)
    try:
        expected = sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())
    except duckdb.Error:
        pytest.skip("DuckDB overflows its DECIMAL(38)")
    assert _ids(t, where) == expected


# ---------------------------------------------------------------------------------------------
# Properties

BAD_KEYS = ["", " ", "\t", "a\x00b", "a\nb", "\u200b", "\u00a0", "k\ud800"]
BAD_VALUES = ["a\x00b", "\x00"]


def _props(t: mere.Table) -> dict[str, str]:
    return dict(t.properties)


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_property_keys_refused_everywhere(cat: mere.Catalog, key: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    with pytest.raises(InvalidInput):
        cat.create_table("p.new", schema, primary_key="id", properties={key: "v"})
    assert "p.new" not in cat.tables()
    t = cat.create_table("p.t", schema, primary_key="id")
    v, props = t.version, _props(t)
    with pytest.raises(InvalidInput):
        t.set_properties({key: "v"})
    with pytest.raises(InvalidInput):
        t.set_properties({"ok.key": "1", key: "v"})
    t2 = cat.table("p.t")
    assert t2.version == v and _props(t2) == props
    with pytest.raises(InvalidInput), cat.transaction() as tx:
        tx.create_table("p.tx", schema, primary_key="id", properties={key: "v"})
    assert "p.tx" not in cat.tables()
    with pytest.raises(InvalidInput), cat.transaction() as tx:
        tx.table("p.t").set_properties({key: "v"})
    assert cat.table("p.t").version == v


@pytest.mark.parametrize("value", BAD_VALUES)
def test_nul_in_property_values_refused_everywhere(cat: mere.Catalog, value: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    with pytest.raises(InvalidInput):
        cat.create_table("p.new", schema, primary_key="id", properties={"tier": value})
    assert "p.new" not in cat.tables()
    t = cat.create_table("p.t", schema, primary_key="id", properties={"tier": "gold"})
    v = t.version
    with pytest.raises(InvalidInput):
        t.set_properties({"tier": value})
    assert cat.table("p.t").version == v and _props(cat.table("p.t"))["tier"] == "gold"
    with pytest.raises(InvalidInput), cat.transaction() as tx:
        tx.create_table("p.tx", schema, primary_key="id", properties={"x": value})
    assert "p.tx" not in cat.tables()


@pytest.mark.parametrize("value", ["a\nb", "  padded  ", "ünïcødé ✓", "x" * 5000, "\t"])
def test_odd_but_legal_property_values_round_trip(cat: mere.Catalog, value: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    t = cat.create_table("p.ok", schema, primary_key="id", properties={"note": value})
    assert _props(cat.table("p.ok"))["note"] == value
    t.set_properties({"note2": value, "note": None})
    p = _props(cat.table("p.ok"))
    assert p["note2"] == value and "note" not in p


def test_lone_surrogate_property_value_refused_or_history_readable(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    wh = str(tmp_path / "wh")
    cat = mere.connect(wh)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    t = cat.create_table("p.s", schema, primary_key="id")
    v = t.version
    try:
        t.set_properties({"k": "\ud800"})
    except MereError:
        assert cat.table("p.s").version == v
        return
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    run = subprocess.run(
        [sys.executable, "-m", "mere", "--warehouse", wh, "history", "p.s", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr


def test_removing_a_property_with_an_unprintable_name_changes_no_property(cat: mere.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    t = cat.create_table("p.r", schema, primary_key="id", properties={"tier": "a"})
    props = _props(t)
    for key in ["", "a\x00", "\n"]:
        with contextlib.suppress(InvalidInput):
            t.set_properties({key: None})
        assert _props(cat.table("p.r")) == props
    assert cat.table("p.r").scan().count() == 0


# ---------------------------------------------------------------------------------------------
# cdc_column


def test_cdc_column_naming_key_or_partition_refused(cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("day", pa.string(), nullable=False),
            ("v", pa.int64()),
        ]
    )
    for kw in (
        {"cdc_column": "id"},
        {"cdc_column": "day", "partition_by": "day"},
        {"cdc_column": "id", "partition_by": "day"},
    ):
        with pytest.raises(InvalidInput):
            cat.create_table("c.t", schema, primary_key="id", **kw)
        assert "c.t" not in cat.tables()
        with pytest.raises(InvalidInput), cat.transaction() as tx:
            tx.create_table("c.t", schema, primary_key="id", **kw)
        assert "c.t" not in cat.tables()
    schema2 = pa.schema(
        [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.int64(), nullable=False)]
    )
    with pytest.raises(InvalidInput):
        cat.create_table("c.t2", schema2, primary_key=["a", "b"], cdc_column="b")
    assert "c.t2" not in cat.tables()


@SETTINGS
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(["I", "U", "D", "i", "u", "d"]), st.integers(-100, 100)),
        min_size=1,
        max_size=25,
    ),
    chunks=st.integers(1, 4),
)
def test_cdc_column_dropped_from_schema_and_upserts_match_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, str | None, int]], chunks: int
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("op", pa.string()), ("v", pa.int64())])
    t = cat.create_table("c.m", schema, primary_key="id", buckets=2, cdc_column="op")
    assert "op" not in t.schema.names
    assert t.schema.names == ["id", "v"]
    model: dict[int, int] = {}
    size = max(1, len(ops) // chunks)
    for start in range(0, len(ops), size):
        part = ops[start : start + size]
        # within a batch, the last row of a key wins
        for k, op, v in part:
            if op in ("D", "d"):
                model.pop(k, None)
            else:
                model[k] = v
        t.upsert(
            pa.table(
                {"id": [k for k, _, _ in part], "op": [o for _, o, _ in part], "v": [v for _, _, v in part]},
                schema=schema,
            )
        )
    got = {r["id"]: r["v"] for r in cat.table("c.m").scan().to_arrow().to_pylist()}
    assert got == model
    assert "op" not in cat.table("c.m").scan().to_arrow().column_names


# ---------------------------------------------------------------------------------------------
# CDC TRUNCATE


def _cdc_state(cat: mere.Catalog) -> dict[str, Any]:
    return {n: (cat.table(n).version, cat.table(n).to_arrow().to_pylist()) for n in cat.tables()}


TYPES = {"id": "integer", "v": "text"}


def _w2j_insert(k: int, v: str, lsn: int) -> str:
    from cdc_render import wal2json_line

    return wal2json_line("public", "a", "I", None, {"id": k, "v": v}, lsn, TYPES, ["id"])


def _dbz_insert(k: int, v: str, lsn: int) -> str:
    from cdc_render import debezium_line

    return debezium_line("public", "a", "c", None, {"id": k, "v": v}, lsn, TYPES)


def _truncates(fmt: str, lsn: int, table: str = "a") -> list[str]:
    if fmt == "wal2json":
        return [
            json.dumps({"action": a, "schema": "public", "table": table, "lsn": f"0/{lsn:X}"})
            for a in ("T", "t", " T ")
        ]
    base = json.loads(_dbz_insert(99, "x", lsn))
    out = []
    for op in ("t", "T", " t"):
        ev = json.loads(json.dumps(base))
        ev["payload"]["op"], ev["payload"]["after"] = op, None
        ev["payload"]["source"]["table"] = table
        out.append(json.dumps(ev))
    return out


def _keys(fmt: str, lines: list[str]) -> list[str | None] | None:
    if fmt == "wal2json":
        return None
    out: list[str | None] = []
    for line in lines:
        p = json.loads(line)["payload"]
        img = p.get("after") or p.get("before")
        out.append(json.dumps({"id": img["id"]}) if img else None)
    return out


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
def test_cdc_truncate_refused_nothing_commits(tmp_path: Path, fmt: str) -> None:
    from mere.integrations.cdc_sync import CdcEventError, SyncOptions, events_from_json, sync_batch

    cat = mere.connect(str(tmp_path / "wh"))
    ins = _w2j_insert if fmt == "wal2json" else _dbz_insert
    seed = [ins(1, "one", 10)]
    sync_batch(cat, events_from_json(seed, fmt, _keys(fmt, seed)), SyncOptions("s"), "seed")
    for i, trunc in enumerate(_truncates(fmt, 20)):
        for lines in ([ins(2, "two", 11), trunc, ins(3, "three", 30)], [trunc], [trunc, ins(4, "x", 31)]):
            before = _cdc_state(cat)
            with pytest.raises(CdcEventError) as caught:
                sync_batch(cat, events_from_json(lines, fmt, _keys(fmt, lines)), SyncOptions("s"), f"b{i}")
            assert isinstance(caught.value, MereError)
            assert "TRUNCATE" in str(caught.value) and caught.value.table == "public.a"
            assert _cdc_state(cat) == before
    assert [(r["id"], r["v"]) for r in cat.table("s.a").to_arrow().to_pylist()] == [(1, "one")]


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
def test_cdc_truncate_quarantined_rest_commits(tmp_path: Path, fmt: str) -> None:
    from mere.integrations.cdc_sync import SyncOptions, events_from_json, sync_batch

    cat = mere.connect(str(tmp_path / "wh"))
    ins = _w2j_insert if fmt == "wal2json" else _dbz_insert
    trunc = _truncates(fmt, 20)[0]
    lines = [ins(1, "one", 10), trunc, ins(2, "two", 30)]
    result = sync_batch(
        cat, events_from_json(lines, fmt, _keys(fmt, lines)), SyncOptions("s", on_error="quarantine"), "q"
    )
    assert result.refused == 1 and result.applied == 2
    assert sorted(r["id"] for r in cat.table("s.a").to_arrow().to_pylist()) == [1, 2]
    kept = cat.table("s.cdc_quarantine").to_arrow().to_pylist()
    assert [r["event"] for r in kept] == [trunc]
    assert "TRUNCATE" in kept[0]["reason"]
    # replaying the same batch key changes nothing
    again = sync_batch(
        cat, events_from_json(lines, fmt, _keys(fmt, lines)), SyncOptions("s", on_error="quarantine"), "q"
    )
    assert again.already_committed
    assert len(cat.table("s.cdc_quarantine").to_arrow()) == 1


def test_cdc_truncate_of_a_new_table_refused_without_creating_it(tmp_path: Path) -> None:
    from mere.integrations.cdc_sync import CdcEventError, SyncOptions, events_from_json, sync_batch

    cat = mere.connect(str(tmp_path / "wh"))
    lines = [_w2j_insert(1, "one", 10), _truncates("wal2json", 20, table="fresh")[0]]
    with pytest.raises(CdcEventError) as caught:
        sync_batch(cat, events_from_json(lines, "wal2json"), SyncOptions("s"), "b")
    assert caught.value.table == "public.fresh"
    assert cat.tables() == []


def test_cdc_truncate_inside_a_source_transaction_cut_across_batches(tmp_path: Path) -> None:
    """B, insert, T held open in batch 1; batch 2 brings the COMMIT: refused (stop) and nothing commits;
    with quarantine the TRUNCATE is kept aside and the insert commits."""
    from mere.integrations.cdc_sync import CdcEventError, SyncOptions, events_from_json, sync_batch

    def body(line: str) -> str:
        return "{" + '"xid":7,' + line[1:]

    trunc = body(_truncates("wal2json", 12)[0])
    first = [json.dumps({"action": "B", "xid": 7}), body(_w2j_insert(1, "one", 11)), trunc]
    commit = [json.dumps({"action": "C", "xid": 7})]
    for mode in ("stop", "quarantine"):
        cat = mere.connect(str(tmp_path / mode))
        sync_batch(cat, events_from_json(first, "wal2json"), SyncOptions("s", on_error=mode), "k1")
        assert "s.a" not in cat.tables()  # held: the transaction has not ended
        if mode == "stop":
            before = _cdc_state(cat)
            with pytest.raises(CdcEventError) as caught:
                sync_batch(cat, events_from_json(commit, "wal2json"), SyncOptions("s"), "k2")
            assert "TRUNCATE" in str(caught.value)
            assert _cdc_state(cat) == before
        else:
            sync_batch(cat, events_from_json(commit, "wal2json"), SyncOptions("s", on_error=mode), "k2")
            assert [(r["id"], r["v"]) for r in cat.table("s.a").to_arrow().to_pylist()] == [(1, "one")]
            kept = cat.table("s.cdc_quarantine").to_arrow().to_pylist()
            assert len(kept) == 1 and "TRUNCATE" in kept[0]["reason"]


def test_cdc_truncate_in_one_whole_transaction_refused(tmp_path: Path) -> None:
    from mere.integrations.cdc_sync import CdcEventError, SyncOptions, events_from_json, sync_batch

    def body(line: str) -> str:
        return "{" + '"xid":9,' + line[1:]

    cat = mere.connect(str(tmp_path / "wh"))
    seed = [_w2j_insert(5, "five", 5)]
    sync_batch(cat, events_from_json(seed, "wal2json"), SyncOptions("s"), "seed")
    lines = [
        json.dumps({"action": "B", "xid": 9}),
        body(_w2j_insert(1, "one", 11)),
        body(_truncates("wal2json", 12)[0]),
        body(_w2j_insert(2, "two", 13)),
        json.dumps({"action": "C", "xid": 9}),
    ]
    before = _cdc_state(cat)
    with pytest.raises(CdcEventError):
        sync_batch(cat, events_from_json(lines, "wal2json"), SyncOptions("s"), "b")
    assert _cdc_state(cat) == before


CASE_FILTERS = [
    "case when a < 0 then a * 10 else a end < 0",
    "case when a < 0 then c * 10 * i else c end > 0",
    "coalesce(case when a < 0 then a * 10 end, 0) < 0",
    "case when c < 0 then c * 100 else 0 end = -300",
    "case when a < 0 then cast(a * 10 as decimal(38,10)) else 0 end < 0",
]


@pytest.mark.parametrize("where", CASE_FILTERS)
def test_guarded_decimal256_branches_match_duckdb(local_cat: mere.Catalog, where: str) -> None:
    duckdb = pytest.importorskip("duckdb")
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("a", pa.decimal128(38, 10)),
            ("c", pa.decimal128(38, 0)),
            ("i", pa.int64()),
        ]
    )
    rows = [
        {"id": 1, "a": D("9999999999999999999999999999.5"), "c": D(10**37), "i": 2**62},
        {"id": 2, "a": D("-2.5"), "c": D(-3), "i": -1},
        {"id": 3, "a": None, "c": None, "i": None},
    ]
    t = _make(local_cat, "t.case", schema, rows)
    con = duckdb.connect()
    con.register("t", pa.Table.from_pylist(rows, schema=schema))
    expected = sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())
    assert _ids(t, where) == expected
    t.delete(where)
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == sorted({1, 2, 3} - set(expected))


def test_sql_text_and_transactions_use_exact_decimal256(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("a", pa.decimal128(38, 10)),
            ("c", pa.decimal128(38, 0)),
        ]
    )
    rows = [
        {"id": 1, "a": D("9999999999999999999999999999.5"), "c": D(10**37)},
        {"id": 2, "a": D("-2.5"), "c": D(-3)},
        {"id": 3, "a": None, "c": None},
    ]
    _make(local_cat, "x.t", schema, rows)
    mere.sql("UPDATE x.t SET a = a * 10 - a * 9 + 1 WHERE c * 10 < 0", catalog=local_cat)
    got = {r["id"]: r["a"] for r in local_cat.table("x.t").scan().to_arrow().to_pylist()}
    assert got == {1: rows[0]["a"], 2: D("-1.5"), 3: None}
    v = local_cat.table("x.t").version
    with pytest.raises(MereError):
        mere.sql("UPDATE x.t SET a = a * 10", catalog=local_cat)  # row 1 overflows DECIMAL(38, 10)
    assert local_cat.table("x.t").version == v
    with local_cat.table("x.t").transaction() as tx:
        tx.delete("c * 100 > 99999999999999999999999999999999999999")
    assert sorted(local_cat.table("x.t").scan().to_arrow().column("id").to_pylist()) == [2, 3]
    mere.sql("DELETE FROM x.t WHERE a * 10 * 10 < 0", catalog=local_cat)
    assert sorted(local_cat.table("x.t").scan().to_arrow().column("id").to_pylist()) == [3]
