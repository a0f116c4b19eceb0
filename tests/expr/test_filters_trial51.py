"""Trial 51: filters on merge-on-read scans against DuckDB over the merged table contents.

A keyed, partitioned table of every scalar column type gets several upsert / partial upsert / delete
commits (with and without compaction, so older versions of a key stay stored). A plain dict is the
merged table; DuckDB runs each predicate over it and is the oracle for the rows, ``count()`` and
``min()`` / ``max()`` of a filtered scan. A non-key filter must never bring back an older version.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import FilterError, MereError

duckdb = pytest.importorskip("duckdb")

NAN, INF = math.nan, math.inf
UTC = dt.UTC

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("p", pa.int16()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("u8", pa.uint8()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec", pa.decimal128(10, 2)),
        ("dec38", pa.decimal128(38, 10)),
        ("s", pa.string()),
        ("bn", pa.binary()),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("ts_s", pa.timestamp("s")),
        ("ts_ms", pa.timestamp("ms")),
        ("ts_us", pa.timestamp("us")),
        ("ts_ns", pa.timestamp("ns")),
        ("tsz", pa.timestamp("us", tz="UTC")),
        ("tsp", pa.timestamp("ms", tz="Europe/Paris")),
    ]
)

T0 = dt.datetime(2026, 11, 21, 12, 0, 0)
EPOCH = dt.datetime(1970, 1, 1)
UNIT = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def stamps(unit: str) -> list[int | None]:
    """Epoch counts in ``unit``: T0 and values one unit around it, the epoch, a leap day, NULL."""
    base = int((T0 - EPOCH).total_seconds()) * UNIT[unit]
    leap = int((dt.datetime(2000, 2, 29, 23, 59, 59) - EPOCH).total_seconds()) * UNIT[unit]
    return [base, base + 1, base - 1, 0, -1, leap, base + 86400 * UNIT[unit], None]


POOLS: dict[str, list[Any]] = {
    "p": [0, 1, 2],
    "i8": [-128, -1, 0, 1, 2, 127, None],
    "i16": [-32768, 0, 7, 300, 32767, None],
    "i32": [-(2**31), -5, 0, 5, 12, 2**31 - 1, None],
    "u8": [0, 1, 200, 255, None],
    "u64": [0, 1, 2**63, 2**64 - 1, None],
    "f32": [NAN, -0.0, 0.0, 1.5, -2.25, INF, -INF, 0.1, 3.4e38, None],
    "f64": [NAN, -0.0, 0.0, 0.1, 1e300, -1e-300, INF, -INF, 2.5, 5e-324, -1.5, None],
    "dec": [Decimal("0.00"), Decimal("-0.01"), Decimal("12.50"), Decimal("12.49"), Decimal("99999999.99"),
            Decimal("-99999999.99"), Decimal("1.00"), None],
    "dec38": [Decimal("0"), Decimal("1.0000000001"), Decimal("-1.0000000001"),
              Decimal("9999999999999999999999999999.9999999999"), Decimal("12.5"), None],
    "s": ["", "a", "A", "abc", "ABC", "a%b", "a_b", "a\\b", "ß", "ẞ", "é", "e\u0301", "É", "日本", "İ", "\u0131",
          "straße", " x ", "😀", "Ǆ", None],
    "bn": [b"", b"\x00", b"\xff", b"ab", b"a\x00", None],
    "b": [True, False, None],
    "d": [dt.date(1970, 1, 1), dt.date(2000, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31),
          dt.date(2026, 11, 21), dt.date(1969, 12, 31), None],
    "ts_s": stamps("s"),
    "ts_ms": stamps("ms"),
    "ts_us": stamps("us"),
    "ts_ns": stamps("ns"),
    "tsz": stamps("us"),
    "tsp": stamps("ms"),
}  # fmt: skip
VALUE_COLUMNS = [f.name for f in SCHEMA if f.name != "k"]
KEYS = list(range(10))


# ---------------------------------------------------------------------------------------------
# Predicates: SQL text both mere and DuckDB read alike


INT_LIT = ["0", "1", "-1", "2", "5", "127", "128", "-128", "-129", "255", "256", "300", "32767", "32768",
           "-32769", "2147483647", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
           "18446744073709551615", "18446744073709551616", "1.5", "-0.5", "2.0", "12.50", "1e2", "-1e20",
           "1e20", "2.5e0", "-1.0e0"]  # fmt: skip
F64_LIT = ["0", "1", "-1", "0.0", "-0.0", "0.1", "2.5", "-1.5", "1e300", "5e-324", "1e-300", "-1e-300",
           "'NaN'", "'Infinity'", "'-Infinity'", "DOUBLE 'NaN'", "2.5e0", "1e400"]  # fmt: skip
F32_LIT = ["0", "1", "-1", "0.0", "-0.0", "0.1", "1.5", "-2.25", "3.4e38", "'NaN'", "'Infinity'",
           "'-Infinity'", "340000000000000000000000000000000000000"]  # fmt: skip
DEC_LIT = ["0", "12.5", "12.50", "12.505", "12.49", "-0.01", "-0.010", "99999999.99", "100000000",
           "1.00", "1", "1e1", "1.25e1", "-99999999.991", "1.0000000001", "12.5000000000001"]  # fmt: skip
STR_LIT = ["''", "'a'", "'A'", "'abc'", "'ß'", "'ẞ'", "'é'", "'É'", "'日本'", "'straße'", "' x '", "'😀'",
           "'a\\b'", "'İ'", "'i'"]  # fmt: skip
LIKE_PAT = ["'a%'", "'%b'", "'_'", "'%'", "''", "'a\\_b'", "'a\\b'", "'%ß%'", "'_%_'", "'A%'", "'é'",
            "'%本'", "'STRASSE'", "'_x_'", "'__'"]  # fmt: skip
BIN_LIT = ["X''", "X'00'", "X'FF'", "X'6162'", "X'6100'"]
DATE_LIT = ["DATE '2000-02-29'", "'2026-11-21'", "DATE '1970-01-01'", "TIMESTAMP '2000-02-29 12:00:00'",
            "DATE '0001-01-01'", "DATE '9999-12-31'", "TIMESTAMP '2026-11-21 00:00:00'"]  # fmt: skip
TS_LIT = ["TIMESTAMP '2026-11-21 12:00:00'", "TIMESTAMP '2026-11-21 12:00:00.000001'",
          "TIMESTAMP '2026-11-21 11:59:59.999'", "TIMESTAMP '2026-11-21 12:00:01'", "'2026-11-21 12:00:00'",
          "DATE '2026-11-21'", "TIMESTAMP '1970-01-01 00:00:00'", "TIMESTAMP '2000-03-01 00:00:00'",
          "TIMESTAMP '1969-12-31 23:59:59.999999'"]  # fmt: skip
# A zoned column refuses a naive literal (a typed FilterError asking for an offset): literals with offsets.
TSZ_LIT = ["TIMESTAMPTZ '2026-11-21 13:00:00+01'", "TIMESTAMPTZ '2026-11-21 12:00:00.001+00'",
           "TIMESTAMPTZ '2026-11-21 12:00:00+00'", "TIMESTAMPTZ '2026-11-21 12:00:00.000001+00'",
           "TIMESTAMPTZ '1970-01-01 01:00:00+01'", "TIMESTAMPTZ '1969-12-31 23:59:59.999999+00'",
           "TIMESTAMPTZ '2026-11-21 11:59:59.999-00'", "DATE '2026-11-21'"]  # fmt: skip

LITERALS: dict[str, list[str]] = {
    "p": INT_LIT,
    "i8": INT_LIT,
    "i16": INT_LIT,
    "i32": INT_LIT,
    "u8": INT_LIT,
    "u64": INT_LIT,
    "f32": F32_LIT,
    "f64": F64_LIT,
    "dec": DEC_LIT,
    "dec38": DEC_LIT,
    "s": STR_LIT,
    "bn": BIN_LIT,
    "d": DATE_LIT,
    "ts_s": TS_LIT,
    "ts_ms": TS_LIT,
    "ts_us": TS_LIT,
    "ts_ns": [*TS_LIT, "TIMESTAMP_NS '2026-11-21 12:00:00.000000001'"],
    "tsz": TSZ_LIT,
    "tsp": TSZ_LIT,
}
# DuckDB gives an IN list or BETWEEN one common type: a DOUBLE among decimals on a FLOAT column compares
# the decimals as DOUBLE too (a documented divergence), so lists and bounds on f32 hold no DOUBLE literal.
# DuckDB 2.0 pushes `u64 IN (18446744073709551616, 1e2)` into its Arrow scan as 0 (its bug: SELECT says
# false), so lists and bounds on integer columns stay within 64 bits.
NARROW_INT = [t for t in INT_LIT if t != "18446744073709551616"]
LISTED = {
    **LITERALS,
    **{c: NARROW_INT for c in ("p", "i8", "i16", "i32", "u8", "u64")},
    "f32": [t for t in F32_LIT if "e" not in t and not t.startswith("'")],
}

EXPRESSIONS = [
    "i32 + 1 > 0", "i8 * 2 < 100", "i16 - i8 = 0", "i32 % 3 = 1", "i32 // 2 = 2", "i32 / 2 > 1.5",
    "abs(i8) > 5", "-i16 < 0", "i8 + i16 > 0", "u8 + 1 > 255", "u64 - 1 >= 0", "f64 * 2 > 1", "f32 + 1 = 2.5",
    "dec * 2 > 25", "dec + 0.001 > 12.5", "dec / 2 = 6.25", "round(f64) = 0", "floor(dec) = 12", "ceil(dec) = 13",
    "round(dec, 1) = 12.5", "sign(f64) = -1", "sqrt(abs(f64)) > 1", "power(i8, 2) > 100", "dec38 * 10 > 100",
    "lower(s) = 'ß'", "upper(s) = 'SS'", "upper(s) = 'ẞ'", "upper(s) = 'STRASSE'", "lower(s) = 'i̇'",
    "lower(s) = 'é'", "length(s) = 1", "length(s) = 2", "s || 'x' = 'ax'", "substring(s, 1, 1) = 'a'",
    "substr(s, 2) = 'bc'", "trim(s) = 'x'", "ltrim(s) = 'x '", "starts_with(s, 'a')", "ends_with(s, 'b')",
    "contains(s, 'b')", "left(s, 2) = 'ab'", "replace(s, 'a', 'b') = 'bbc'", "concat(s, 'z') = 'az'",
    "s ILIKE 'STRASSE'", "s ILIKE 'ß'", "s ILIKE 'é'", "s ILIKE 'i'", "s ILIKE 'ǆ'", "s NOT ILIKE 'a%'",
    "year(d) = 2000", "month(d) = 2", "day(d) = 29", "quarter(d) = 1", "dayofweek(d) = 0", "year(d) < 1970",
    "CAST(ts_us AS DATE) = DATE '2026-11-21'", "hour(ts_us) = 12", "minute(ts_ms) = 59", "second(ts_s) = 59",
    "hour(tsz) = 12", "CAST(tsz AS DATE) = DATE '2026-11-21'",
    "CAST(i32 AS DOUBLE) > 1.5", "CAST(dec AS INTEGER) = 13", "CAST(dec AS INTEGER) = 12",
    "CAST(i32 AS VARCHAR) = '5'", "CAST(f64 AS VARCHAR) = '0.1'", "CAST(f64 AS VARCHAR) = '2.5'",
    "CAST(b AS INTEGER) = 1", "CAST(i8 AS BOOLEAN)", "CAST(u8 AS TINYINT) = 1", "CAST(d AS VARCHAR) = '2000-02-29'",
    "CAST(dec AS VARCHAR) = '12.50'", "CAST(f32 AS DOUBLE) = 0.1", "CAST(i16 AS DECIMAL(4, 1)) = 7",
    "CAST(s AS BLOB) = X'61'", "i32::BIGINT > 2147483646", "CAST(d AS TIMESTAMP) < TIMESTAMP '2000-03-01 00:00:00'",
    "coalesce(i8, i16) = 0", "ifnull(s, 'a') = 'a'", "nullif(i32, 5) IS NULL", "greatest(i8, i16) > 100",
    "least(f64, 0) < 0", "greatest(s, 'b') = 'b'", "CASE WHEN i32 > 0 THEN 'pos' ELSE 'neg' END = 'pos'",
    "CASE i8 WHEN 1 THEN true WHEN 2 THEN false END", "if(b, i8, i16) > 0", "i32 IS DISTINCT FROM 5",
    "f64 IS NOT DISTINCT FROM 'NaN'", "s IS DISTINCT FROM NULL", "b", "NOT b", "b IS TRUE", "b IS NOT FALSE",
    "b = (i32 > 0)", "b IS NULL", "(i8 > 0) = b", "f32 = f64", "i8 = i16", "dec = i32", "dec38 > dec",
    "u64 > i32", "d = ts_s", "ts_s = ts_ns", "ts_us < tsz", "tsz = tsp", "d < tsz", "p = i8",
]  # fmt: skip
LIKE_COLUMNS = ["s"]
COMPARE_OPS = ["=", "!=", "<>", "<", "<=", ">", ">="]


@st.composite
def atoms(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["cmp", "cmp", "flip", "in", "between", "null", "like", "expr", "expr"]))
    if kind == "expr":
        return draw(st.sampled_from(EXPRESSIONS))
    if kind == "like":
        pattern = draw(st.sampled_from(LIKE_PAT))
        op = draw(st.sampled_from(["LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE"]))
        return f"s {op} {pattern}"
    column = draw(st.sampled_from(sorted(LITERALS)))
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    literal = st.sampled_from(LITERALS[column])
    listed = st.sampled_from(LISTED[column])
    if kind == "cmp":
        return f"{column} {draw(st.sampled_from(COMPARE_OPS))} {draw(literal)}"
    if kind == "flip":
        return f"{draw(literal)} {draw(st.sampled_from(COMPARE_OPS))} {column}"
    if kind == "in":
        items = draw(st.lists(st.one_of(listed, st.just("NULL")), min_size=1, max_size=4))
        return f"{column} {draw(st.sampled_from(['IN', 'NOT IN']))} ({', '.join(items)})"
    lo, hi = draw(listed), draw(listed)
    return f"{column} {draw(st.sampled_from(['BETWEEN', 'NOT BETWEEN']))} {lo} AND {hi}"


predicates = st.recursive(
    atoms(),
    lambda inner: st.one_of(
        st.builds("({}) AND ({})".format, inner, inner),
        st.builds("({}) OR ({})".format, inner, inner),
        st.builds("NOT ({})".format, inner),
    ),
    max_leaves=4,
)


# ---------------------------------------------------------------------------------------------
# The model and the oracle


def _duck() -> Any:
    """A fresh in-memory DuckDB: the session zone UTC, so zoned values read alike in both."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


def model_table(model: dict[int, dict[str, Any]]) -> pa.Table:
    rows = [model[k] for k in sorted(model)]
    return pa.table({f.name: pa.array([r[f.name] for r in rows], f.type) for f in SCHEMA}, schema=SCHEMA)


class DuckError(Exception):
    pass


def duck(table: pa.Table, sql: str) -> list[tuple[Any, ...]]:
    con = _duck()
    con.register("t", table)
    try:
        return con.execute(sql).fetchall()
    except duckdb.Error as e:
        raise DuckError(str(e)) from e
    finally:
        con.close()


def duck_keys(table: pa.Table, where: str) -> list[int]:
    return [r[0] for r in duck(table, f"SELECT k FROM t WHERE {where} ORDER BY k")]


def mere_keys(t: mere.Table, where: Any) -> list[int]:
    return sorted(t.scan(columns=["k"], filter=where).to_arrow().column("k").to_pylist())


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """("ok", fn(*args)) or ("error", class name); a raw exception of mere propagates as a failure."""
    try:
        return "ok", fn(*args)
    except (MereError, DuckError) as e:
        return "error", type(e).__name__


# ---------------------------------------------------------------------------------------------
# Writes


def full_row(draw: st.DrawFn, k: int) -> dict[str, Any]:
    return {"k": k, **{c: draw(st.sampled_from(POOLS[c])) for c in VALUE_COLUMNS}}


@st.composite
def commits(draw: st.DrawFn) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    first = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=8, unique=True))
    out.append(("upsert", [full_row(draw, k) for k in first]))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["upsert", "upsert", "partial", "delete"]))
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=5, unique=True))
        if kind == "upsert":
            out.append(("upsert", [full_row(draw, k) for k in keys]))
        elif kind == "partial":
            others = [c for c in VALUE_COLUMNS if c != "p"]
            cols = draw(st.lists(st.sampled_from(others), min_size=1, max_size=4, unique=True))
            out.append(("partial", (cols, [{c: draw(st.sampled_from(POOLS[c])) for c in cols} | {"k": k}
                                           for k in keys])))  # fmt: skip
        else:
            out.append(("delete", keys))
    return out


LNN = ("i32", "s")  # the columns the "lnn" flavour merges with last_non_null
FLAVOURS = ["plain", "composite", "seq", "lnn"]
# Where last_non_null folds a key's versions, keys are per partition (key_scope="partition", the documented
# default there): a key's rows keep one partition, so the model holds one row per key. A sequenced table
# takes whole rows only (partial rows are refused): its partial commits are left out.
FIXED_PARTITION = ("lnn",)


def extras(flavour: str, k: int, lsn: int) -> dict[str, Any]:
    """The columns a flavour's table has beyond SCHEMA: a string key part, a sequence."""
    return {"kk": f"key{k:02d}" if flavour == "composite" else "x", "lsn": lsn}


EXTRA_FIELDS = [pa.field("kk", pa.string()), pa.field("lsn", pa.int64())]


def written(rows: list[dict[str, Any]], fields: list[pa.Field], flavour: str, lsn: int) -> pa.Table:
    rows = [r | extras(flavour, r["k"], lsn) for r in rows]
    fields = fields + EXTRA_FIELDS
    return pa.table({f.name: pa.array([r[f.name] for r in rows], f.type) for f in fields})


def merged(flavour: str, old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    row = dict(old or {}) | new
    if flavour == "lnn" and old is not None:
        row.update({c: old[c] for c in LNN if c in new and new[c] is None})
    return row


def apply(t: mere.Table, model: dict[int, dict[str, Any]], commit: tuple[str, Any], flavour: str = "plain",
          lsn: int = 0) -> None:  # fmt: skip
    kind, payload = commit
    if flavour == "seq" and kind == "partial":
        return
    if flavour in FIXED_PARTITION and kind != "delete":
        pin = [r | {"p": r["k"] % 3} for r in (payload if kind == "upsert" else payload[1])]
        payload = pin if kind == "upsert" else (payload[0], pin)
    if kind == "upsert":
        t.upsert(written(payload, list(SCHEMA), flavour, lsn))
        for r in payload:
            model[r["k"]] = merged(flavour, model.get(r["k"]), r)
    elif kind == "partial":
        cols, rows = payload
        # a partial row that creates a key leaves NULLs: skip; the partition column stays (it may not move)
        rows = [r | {"p": model[r["k"]]["p"]} for r in rows if r["k"] in model]
        if not rows:
            return
        fields = [SCHEMA.field("k"), SCHEMA.field("p")] + [SCHEMA.field(c) for c in cols]
        t.upsert(written(rows, fields, flavour, lsn))
        for r in rows:
            model[r["k"]] = merged(flavour, model[r["k"]], r)
    else:
        t.delete(written([{"k": k} for k in payload], [SCHEMA.field("k")], flavour, lsn))
        for k in payload:
            model.pop(k, None)


def build(
    root: Path,
    name: str,
    history: list[tuple[str, Any]],
    compact: bool,
    buckets: int,
    group_rows: int = 0,
    flavour: str = "plain",
) -> tuple[mere.Table, dict[int, dict[str, Any]]]:
    cat = mere.connect(str(root))
    props = {"retention.max-age": "off"}
    if not compact:
        props["compaction.auto"] = "off"
    if group_rows:
        props["write.row-group-rows"] = str(group_rows)
    t = cat.create_table(
        name,
        pa.schema(list(SCHEMA) + EXTRA_FIELDS),
        primary_key=["kk", "k"] if flavour == "composite" else "k",
        partition_by=["p"],
        buckets=buckets,
        properties=props,
        sequence_by="lsn" if flavour == "seq" else None,
        merge_operators={c: "last_non_null" for c in LNN} if flavour == "lnn" else None,
    )
    assert t.key_scope == ("partition" if flavour in FIXED_PARTITION else "table")
    model: dict[int, dict[str, Any]] = {}
    for lsn, commit in enumerate(history):
        apply(t, model, commit, flavour, lsn)
    return t, model


_counter = iter(range(10**9))

SETTINGS = settings(
    max_examples=int(os.environ.get("TRIAL51_EXAMPLES", "25")),  # more for a longer hunt
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def check_filter(t: mere.Table, table: pa.Table, where: str) -> None:
    expected = outcome(lambda: duck_keys(table, where))
    got = outcome(lambda: mere_keys(t, where))
    if expected[0] == "ok" and got[0] == "ok":
        assert got[1] == expected[1], f"{where}\nmere {got[1]}\nduckdb {expected[1]}"


@SETTINGS
@given(
    commits(),
    st.lists(predicates, min_size=1, max_size=6),
    st.booleans(),
    st.sampled_from([1, 3]),
    st.sampled_from([0, 1, 3]),
    st.sampled_from(FLAVOURS),
)
def test_scan_filters_match_duckdb(
    tmp_path_factory: pytest.TempPathFactory,
    history: list[tuple[str, Any]],
    wheres: list[str],
    compact: bool,
    buckets: int,
    group_rows: int,
    flavour: str,
) -> None:
    root = tmp_path_factory.mktemp("wh")
    t, model = build(root, f"n.t{next(_counter)}", history, compact, buckets, group_rows, flavour)
    table = model_table(model)
    for where in wheres:
        check_filter(t, table, where)


# ---------------------------------------------------------------------------------------------
# count(), min() / max() and explain() of filtered scans

EXTREME_COLUMNS = [c for c in VALUE_COLUMNS if c != "bn"] + ["bn"]


def same_value(value: Any, typ: pa.DataType, sql: str, table: pa.Table) -> bool:
    """Whether mere's ``value`` (as a value of ``typ``) is DuckDB's answer to ``sql`` (NULL for none)."""
    mine = pa.table({"v": pa.array([value], typ)})
    con = _duck()
    con.register("t", table)
    con.register("m", mine)
    try:
        return bool(con.execute(f"SELECT ({sql}) IS NOT DISTINCT FROM (SELECT v FROM m)").fetchall()[0][0])
    finally:
        con.close()


def check_aggregates(t: mere.Table, table: pa.Table, where: str, column: str) -> None:
    expected = outcome(lambda: duck(table, f"SELECT count(*) FROM t WHERE {where}")[0][0])
    got = outcome(lambda: t.scan(filter=where).count())
    if expected[0] == "ok" and got[0] == "ok":
        assert got[1] == expected[1], f"count({where}): mere {got[1]}, duckdb {expected[1]}"
    if expected[0] == "error":
        return
    for which in ("min", "max"):
        got = outcome(lambda which=which: getattr(t.scan(filter=where), which)(column))
        if got[0] == "ok":
            sql = f"SELECT {which}({column}) FROM t WHERE {where}"
            assert same_value(got[1], SCHEMA.field(column).type, sql, table), (
                f"{which}({column}) where {where}: mere {got[1]!r}, duckdb {duck(table, sql)}"
            )
    # Explains, or refuses with a MereError as the scan does (mere refuses literals DuckDB reads, e.g. 1e400).
    outcome(lambda: str(t.scan(columns=[column], filter=where).explain()))


@SETTINGS
@given(
    commits(),
    st.lists(st.tuples(st.one_of(predicates, st.just("TRUE")), st.sampled_from(EXTREME_COLUMNS)), max_size=4),
    st.booleans(),
    st.sampled_from([0, 2]),
)
def test_count_min_max_match_duckdb(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, Any]], asks: list[tuple[str, str]],
    compact: bool, group_rows: int,
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("wh")
    t, model = build(root, f"n.a{next(_counter)}", history, compact, 2, group_rows)
    table = model_table(model)
    for column in ("i32", "f64", "ts_ns", "tsp", "d", "dec"):  # no filter: footers may answer
        assert same_value(
            t.scan().min(column), SCHEMA.field(column).type, f"SELECT min({column}) FROM t", table
        )
        assert same_value(
            t.scan().max(column), SCHEMA.field(column).type, f"SELECT max({column}) FROM t", table
        )
    assert t.scan().count() == len(model)
    for where, column in asks:
        check_aggregates(t, table, where, column)


def test_a_double_literal_out_of_range_is_refused_by_every_aggregate_and_explain(tmp_path: Path) -> None:
    """DuckDB reads ``1e400`` as infinity; mere refuses it (as Spark's parser does) with a FilterError, from
    count, min, max and explain alike (a property run once met explain raising where the others were
    expected to)."""
    t, model = build(
        tmp_path,
        "n.inf",
        [("upsert", [{"k": k, **{c: POOLS[c][0] for c in VALUE_COLUMNS}} for k in (0, 1)])],
        False,
        2,
    )
    assert t.scan().count() == len(model) == 2
    where = "(p IS NOT NULL) OR (f64 != 1e400)"
    for ask in (
        lambda: t.scan(filter=where).count(),
        lambda: t.scan(filter=where).min("i16"),
        lambda: t.scan(filter=where).max("i16"),
        lambda: str(t.scan(columns=["i16"], filter=where).explain()),
    ):
        with pytest.raises(FilterError, match="1e400"):
            ask()
    # DuckDB answers the same filter: the refusal is mere's rule, not a malformed query.
    assert isinstance(duck(model_table(model), f"SELECT count(*) FROM t WHERE {where}")[0][0], int)


# ---------------------------------------------------------------------------------------------
# Expression objects (mere.col) against the same predicate written as SQL for DuckDB


def sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::BLOB"
    if isinstance(value, dt.datetime) and getattr(value, "nanosecond", 0):  # a pandas Timestamp
        return f"TIMESTAMP_NS '{value.isoformat(' ')}'"
    if isinstance(value, dt.datetime):
        return (
            f"TIMESTAMPTZ '{value.isoformat(' ')}'" if value.tzinfo else f"TIMESTAMP '{value.isoformat(' ')}'"
        )
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    raise AssertionError(value)


def py_values(column: str) -> list[Any]:
    """Python values a column's values and its neighbours (other types too) are written as."""
    typ = SCHEMA.field(column).type
    if pa.types.is_timestamp(typ):
        values = [v for v in pa.array(POOLS[column], typ).to_pylist() if v is not None]
        values = [v if isinstance(v, dt.datetime) else v.to_pydatetime() for v in values]
        if typ.tz is not None:
            values += [dt.datetime(2026, 11, 21, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))]
        else:
            values += [dt.datetime(2026, 11, 21, 12, 0, 0, 1)]
        return values
    if pa.types.is_integer(typ):
        return [0, 1, -1, 127, 128, 255, 256, -129, 2**31, 2**63, 2**64 - 1, 2**64, Decimal("1.5"), 2.0, 1e20]
    if pa.types.is_floating(typ):
        return [0.0, -0.0, NAN, INF, -INF, 0.1, 1.5, 1e300, 1, Decimal("0.1")]
    if pa.types.is_decimal(typ):
        return [Decimal("12.5"), Decimal("12.505"), Decimal("-0.01"), 12, 0, 12.5, Decimal("99999999.99")]
    return [v for v in POOLS[column] if v is not None]


@st.composite
def col_exprs(draw: st.DrawFn) -> tuple[Any, str]:
    column = draw(st.sampled_from([c for c in VALUE_COLUMNS if c != "b"]))
    c = mere.col(column)
    kind = draw(st.sampled_from(["cmp", "cmp", "in", "null", "between"]))
    values = st.sampled_from(py_values(column))
    if kind == "null":
        neg = draw(st.booleans())
        return (c.is_not_null() if neg else c.is_null()), f"{column} IS {'NOT ' if neg else ''}NULL"
    if kind == "in":
        items = draw(st.lists(values, min_size=1, max_size=3))
        if column == "f32":  # DuckDB types a list as one: a DOUBLE among them makes decimals DOUBLE too
            items = [v for v in items if not isinstance(v, Decimal)] or [0.0]
        if pa.types.is_integer(SCHEMA.field(column).type) and len(items) > 1:
            # DuckDB 2.0 pushes `u64 IN (18446744073709551616, 2.0)` into its Arrow scan as 0 (its bug:
            # SELECT says false): lists of several items stay within 64 bits
            items = [v for v in items if not (isinstance(v, int) and v >= 2**64)] or [0]
        neg = draw(st.booleans())
        text = f"{column} {'NOT IN' if neg else 'IN'} ({', '.join(map(sql_literal, items))})"
        return (c.not_in(items) if neg else c.isin(items)), text
    if kind == "between":
        lo, hi = draw(values), draw(values)
        if column == "f32":
            lo, hi = (
                (float(lo) if isinstance(lo, Decimal) else lo),
                (float(hi) if isinstance(hi, Decimal) else hi),
            )
        return c.between(lo, hi), f"({column} >= {sql_literal(lo)} AND {column} <= {sql_literal(hi)})"
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    value = draw(values)
    expr = {"==": c == value, "!=": c != value, "<": c < value, "<=": c <= value, ">": c > value,
            ">=": c >= value}[op]  # fmt: skip
    return expr, f"{column} {'=' if op == '==' else op} {sql_literal(value)}"


col_trees = st.recursive(
    col_exprs(),
    lambda inner: st.one_of(
        st.builds(lambda a, b: (a[0] & b[0], f"({a[1]}) AND ({b[1]})"), inner, inner),
        st.builds(lambda a, b: (a[0] | b[0], f"({a[1]}) OR ({b[1]})"), inner, inner),
        st.builds(lambda a: (~a[0], f"NOT ({a[1]})"), inner),
    ),
    max_leaves=3,
)


@SETTINGS
@given(commits(), st.lists(col_trees, min_size=1, max_size=6))
def test_expression_objects_match_duckdb(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, Any]], exprs: list[tuple[Any, str]]
) -> None:
    root = tmp_path_factory.mktemp("wh")
    t, model = build(root, f"n.e{next(_counter)}", history, False, 3)
    table = model_table(model)
    for expr, text in exprs:
        expected = outcome(duck_keys, table, text)
        got = outcome(mere_keys, t, expr)
        if expected[0] == "ok" and got[0] == "ok":
            assert got[1] == expected[1], f"{expr} / {text}\nmere {got[1]}\nduckdb {expected[1]}"


# ---------------------------------------------------------------------------------------------
# Found bugs (strict xfails) and the passing neighbours that pin them down


def zoned_table(root: Path) -> mere.Table:
    schema = pa.schema(
        [
            ("k", pa.int64()),
            ("utc_us", pa.timestamp("us", tz="UTC")),
            ("paris_ms", pa.timestamp("ms", tz="Europe/Paris")),
            ("paris_us", pa.timestamp("us", tz="Europe/Paris")),
            ("utc_ms", pa.timestamp("ms", tz="UTC")),
        ]
    )
    t = mere.connect(str(root)).create_table("n.zoned", schema, primary_key="k")
    t.upsert(
        pa.table({"k": [1, 2], **{f.name: pa.array([0, 1000], f.type) for f in schema if f.name != "k"}})
    )
    return t


def test_zoned_columns_compare_as_instants_where_zone_or_unit_differ(tmp_path: Path) -> None:
    t = zoned_table(tmp_path)
    assert mere_keys(t, "utc_us = paris_us") == [1, 2]  # another zone, one unit
    assert mere_keys(t, "utc_us = utc_ms") == [1]  # one zone, another unit
    assert mere_keys(t, "paris_ms = utc_ms") == [1, 2]


def test_zoned_columns_of_other_zone_and_unit_compare(tmp_path: Path) -> None:
    t = zoned_table(tmp_path)
    assert mere_keys(t, "utc_us = paris_ms") == [1]
    assert mere_keys(t, "utc_us < paris_ms") == [2]  # 1 ms after the epoch against 1 s after it
    con = duckdb.connect()
    con.register("z", t.to_arrow())
    assert sorted(k for (k,) in con.execute("SELECT k FROM z WHERE utc_us < paris_ms").fetchall()) == [2]


# ---------------------------------------------------------------------------------------------
# Deletes by predicate: the keys DuckDB finds go, the rest stay; a refused delete changes nothing


@SETTINGS
@given(commits(), predicates, st.sampled_from(["plain", "composite", "lnn"]))
def test_delete_by_predicate_matches_duckdb(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, Any]], where: str, flavour: str
) -> None:
    root = tmp_path_factory.mktemp("wh")
    t, model = build(root, f"n.d{next(_counter)}", history, False, 2, 0, flavour)
    table = model_table(model)
    before = t.version
    expected = outcome(duck_keys, table, where)
    got = outcome(t.delete, where)
    left = sorted(t.scan(columns=["k"]).to_arrow().column("k").to_pylist())
    if got[0] == "error":
        assert t.version == before and left == sorted(model), f"a refused delete changed the table: {where}"
    elif expected[0] == "ok":
        assert left == sorted(set(model) - set(expected[1])), f"DELETE WHERE {where}"


@pytest.mark.parametrize("key", ["int", "composite", "string"])
@pytest.mark.parametrize("group_rows", [0, 64])
def test_selective_reads_never_resurrect_older_versions(tmp_path: Path, key: str, group_rows: int) -> None:
    """Many keys, a few replaced or deleted: the filter matches only the older versions of those keys."""
    schema = pa.schema([("k", pa.int64()), ("ks", pa.string()), ("v", pa.int64()), ("f", pa.float64())])
    props = {"compaction.auto": "off", "retention.max-age": "off"}
    if group_rows:
        props["write.row-group-rows"] = str(group_rows)
    pk = {"int": "k", "composite": ["ks", "k"], "string": "ks"}[key]
    t = mere.connect(str(tmp_path)).create_table("n.sel", schema, primary_key=pk, buckets=2, properties=props)
    n = 2000

    def rows(keys: list[int], v: list[int], f: list[float]) -> pa.Table:
        return pa.table({"k": keys, "ks": [f"s{k:05d}" for k in keys], "v": v, "f": f}, schema=schema)

    t.upsert(rows(list(range(n)), list(range(n)), [float(i) for i in range(n)]))
    moved = list(range(0, n, 37))
    t.upsert(rows(moved, [-1] * len(moved), [NAN] * len(moved)))
    gone = list(range(5, n, 91))
    t.delete(rows(gone, [0] * len(gone), [0.0] * len(gone)).select(["ks", "k"] if key != "int" else ["k"]))
    back = gone[:3]  # deleted, then written again with values the filter does not match
    t.upsert(rows(back, [-2] * 3, [-2.0] * 3))
    model = {i: (i, float(i)) for i in range(n)}
    model.update({i: (-1, NAN) for i in moved})
    for i in gone:
        model.pop(i)
    model.update({i: (-2, -2.0) for i in back})
    table = pa.table(
        {"k": list(model), "v": [m[0] for m in model.values()], "f": [m[1] for m in model.values()]}
    )
    for where in ["v >= 0", "v BETWEEN 100 AND 900", "f < 1000", "f >= 0 AND v < 500", "v IN (0, 37, 74, 5, 96)",
                  "NOT (v < 0)", "f = 'NaN'", "f > 1e9", "v = -1 OR v = -2"]:  # fmt: skip
        expected = duck_keys(table, where)
        assert mere_keys(t, where) == expected, where
        assert t.scan(filter=where).count() == len(expected), where
        extreme = duck(table, f"SELECT min(v), max(v) FROM t WHERE {where}")[0]
        assert (t.scan(filter=where).min("v"), t.scan(filter=where).max("v")) == extreme, where
        assert "selective" in str(t.scan(filter=where).explain()) or where.startswith("f = ")
