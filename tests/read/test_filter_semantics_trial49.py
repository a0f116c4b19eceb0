"""Filter semantics, differentially against DuckDB: random predicates over columns of many types.

Every predicate is SQL text that mere and DuckDB both read. The oracle is DuckDB evaluating that text over
the table's expected merged contents (a dict model kept beside the writes, turned into an Arrow table).
Tables are merge-on-read with overlapping files (compaction off): full and partial upserts over the same
keys, deletes by key and by predicate, a partitioned table whose keys move between partitions, and a
``sequence_by`` table fed out of order. Each predicate runs through every read route (the plain merge, the
selective route and its semi-join / search variants, ``to_batches``, ``count``, ``min`` / ``max``,
``explain``), as an :mod:`mere.expr` object where one exists, and through the engine adapters (DuckDB's
``register``, Polars' ``scan_table``, Dask's ``read_table``). Comparisons of a column with a literal of
another kind must follow SQL or be refused with a typed ``MereError``; bad filters are typed too.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import expr as E
from mere.errors import MereError
from mere.integrations import duckdb as mere_duckdb
from mere.integrations import polars as mere_polars
from mere.read import selective

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

UTC = dt.UTC

# --- the schema and its value pools -------------------------------------------------------------------

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64()),
        pa.field("p", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("i8", pa.int8()),
        pa.field("u8", pa.uint8()),
        pa.field("i16", pa.int16()),
        pa.field("i64", pa.int64()),
        pa.field("u64", pa.uint64()),
        pa.field("f64", pa.float64()),
        pa.field("f32", pa.float32()),
        pa.field("dec", pa.decimal128(9, 2)),
        pa.field("s", pa.string()),
        pa.field("bn", pa.binary()),
        pa.field("bo", pa.bool_()),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("tss", pa.timestamp("s")),
        pa.field("tsz", pa.timestamp("ms", "UTC")),
        pa.field("tsn", pa.timestamp("ns")),
    ]
)
NAN = float("nan")
INF = float("inf")
D1 = dt.date(2026, 11, 21)
T1 = dt.datetime(2026, 11, 21, 12, 0, 0)
POOLS: dict[str, list[Any]] = {
    "p": ["x", "y", "", None],
    "i8": [-128, 127, 0, 1, -1, None],
    "u8": [0, 255, 1, 128, None],
    "i16": [-32768, 32767, 3, -3, None],
    "i64": [-(2**63), 2**63 - 1, 0, 7, -7, 2**53 + 1, None],
    "u64": [0, 2**64 - 1, 2**63, 5, 2**53 + 1, None],
    "f64": [NAN, -0.0, 0.0, INF, -INF, 1.5, -2.25, 1e300, 0.1, None],
    "f32": [NAN, -0.0, 0.5, INF, -3.0, -INF, None],
    "dec": [
        Decimal("0.00"),
        Decimal("-1.25"),
        Decimal("9999999.99"),
        Decimal("1.50"),
        Decimal("-0.01"),
        None,
    ],
    "s": ["", "a", "A", "é", "it's", "a%b", "a_b", "a\\b", "%", "_", "ünï", "NULL", "\n", "😀", "ab", None],
    "bn": [b"", b"\x00", b"\x00\xff", b"a'", b"\xff", None],
    "bo": [True, False, None],
    "d": [dt.date(1970, 1, 1), D1, dt.date(1900, 3, 1), dt.date(2262, 4, 11), dt.date(1969, 12, 31), None],
    "ts": [
        T1,
        T1 + dt.timedelta(microseconds=1),
        dt.datetime(1970, 1, 1),
        dt.datetime(1969, 12, 31, 23, 59),
        None,
    ],
    "tss": [T1, dt.datetime(1970, 1, 1), dt.datetime(2000, 2, 29, 23, 59, 59), None],
    "tsz": [
        dt.datetime(2026, 11, 21, 12, tzinfo=UTC),
        dt.datetime(2026, 11, 21, 12, 0, 0, 1000, tzinfo=UTC),
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        None,
    ],
    # nanoseconds as integers since the epoch (pyarrow builds the timestamps)
    "tsn": [1_763_726_400_000_000_000, 1_763_726_400_000_000_001, 0, -1, None],
}
VALUE_COLUMNS = [n for n in SCHEMA.names if n not in ("k", "p", "seq")]


def _value(rng: random.Random, name: str) -> Any:
    return rng.choice(POOLS[name])


def _arrow(rows: list[dict[str, Any]], names: list[str]) -> pa.Table:
    arrays = []
    for n in names:
        kind = SCHEMA.field(n).type
        vals = [r[n] for r in rows]
        if n == "tsn":
            arrays.append(pa.array(vals, pa.int64()).cast(kind))
        else:
            arrays.append(pa.array(vals, kind))
    return pa.Table.from_arrays(arrays, schema=pa.schema([SCHEMA.field(n) for n in names]))


# --- the tables and their models ----------------------------------------------------------------------


@dataclass(repr=False)
class Lake:
    name: str
    table: mere.Table
    model: dict[int, dict[str, Any]]  # k -> the merged row (tsn as integer nanoseconds)
    versions: dict[int, dict[int, dict[str, Any]]]  # version -> the model then

    def at(self, version: int) -> Lake:
        return Lake(self.name, self.table, self.versions[version], {})

    def __repr__(self) -> str:
        return f"<Lake {self.name}>"

    def expected(self) -> pa.Table:
        rows = [self.model[k] for k in sorted(self.model)]
        return _arrow(rows, SCHEMA.names)


def _duck() -> Any:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


def _duck_keys(con: Any, frame: pa.Table, where: str) -> list[int] | None:
    """DuckDB's keys of the rows ``where`` holds for; None where DuckDB refuses the text."""
    con.register("model_rows", frame)
    try:
        return sorted(r[0] for r in con.execute(f"SELECT k FROM model_rows WHERE {where}").fetchall())
    except duckdb.Error:
        return None
    finally:
        con.unregister("model_rows")


OFF = {"compaction.auto": "off", "retention.max-age": "off"}


def _build(cat: mere.Catalog, kind: str, seed: int) -> Lake:
    rng = random.Random(seed)
    name = f"f.{kind}{seed}"
    model: dict[int, dict[str, Any]] = {}
    versions: dict[int, dict[int, dict[str, Any]]] = {}
    keys = list(range(-5, 45))
    if kind == "seq":
        t = cat.create_table(
            name, SCHEMA, primary_key="k", buckets=3, sequence_by="seq", cdc_column="op", properties=OFF
        )
        best: dict[int, tuple[int, dict[str, Any] | None]] = {}
        for _ in range(7):
            chosen = rng.sample(keys, 18)
            rows, ops = [], []
            for k in chosen:
                row = {"k": k, "p": None, "seq": rng.randrange(0, 50)}
                row.update({n: _value(rng, n) for n in VALUE_COLUMNS})
                op = "D" if rng.random() < 0.25 else "U"
                rows.append(row)
                ops.append(op)
                old = best.get(k)
                if old is None or row["seq"] >= old[0]:
                    best[k] = (row["seq"], None if op == "D" else row)
            batch = _arrow(rows, SCHEMA.names).append_column("op", pa.array(ops))
            t.upsert(batch)
            versions[t.version] = {k: r for k, (_, r) in best.items() if r is not None}
        model = {k: r for k, (_, r) in best.items() if r is not None}
        return Lake(name, t, model, versions)
    if kind == "first":  # first_row: a key's first version stays; later ones are dropped
        t = cat.create_table(
            name, SCHEMA, primary_key="k", buckets=2, merge_operators="first_row", properties=OFF
        )
        for step in range(6):
            rows = []
            for k in rng.sample(keys, 15):
                row = {"k": k, "p": _value(rng, "p"), "seq": step}
                row.update({n: _value(rng, n) for n in VALUE_COLUMNS})
                rows.append(row)
            t.upsert(_arrow(rows, SCHEMA.names))
            for r in rows:
                model.setdefault(r["k"], r)
            versions[t.version] = dict(model)
        return Lake(name, t, model, versions)
    part = kind == "part"
    t = cat.create_table(
        name,
        SCHEMA,
        primary_key="k",
        buckets=2 if part else 4,
        partition_by="p" if part else None,
        properties=OFF,
    )
    con = _duck()
    for step in range(8):
        choice = rng.random()
        if step == 0 or choice < 0.45:  # whole rows
            rows = []
            for k in rng.sample(keys, 20):
                row = {"k": k, "p": _value(rng, "p"), "seq": step}
                row.update({n: _value(rng, n) for n in VALUE_COLUMNS})
                rows.append(row)
            t.upsert(_arrow(rows, SCHEMA.names))
            for r in rows:
                model[r["k"]] = r
        elif choice < 0.7:  # partial rows: a few value columns only (new keys get NULLs elsewhere)
            cols = rng.sample(VALUE_COLUMNS, 3)
            names = ["k", "p", *cols] if part else ["k", *cols]
            rows = []
            for k in rng.sample(keys, 12):
                old = model.get(k)
                row = {"k": k, "p": old["p"] if (old and part) else _value(rng, "p")}
                row.update({n: _value(rng, n) for n in cols})
                rows.append(row)
            t.upsert(_arrow(rows, names))
            for r in rows:
                base = model.get(r["k"]) or {n: None for n in SCHEMA.names}
                merged = dict(base)
                merged.update({n: r[n] for n in names})
                if not part:
                    merged["p"] = base["p"]
                model[r["k"]] = merged
        elif choice < 0.85:  # delete some keys
            gone = rng.sample(keys, 6)
            t.delete(mere.col("k").isin(gone))
            for k in gone:
                model.pop(k, None)
        else:  # delete by a predicate on a value column: DuckDB says which rows go
            column = rng.choice(["i8", "s", "f64", "d", "bo"])
            lit = {"i8": "0", "s": "'a'", "f64": "0.0", "d": "DATE '2026-11-21'", "bo": "TRUE"}[column]
            where = f"{column} > {lit}" if column != "bo" else f"{column} = {lit}"
            doomed = _duck_keys(con, _arrow([model[k] for k in sorted(model)], SCHEMA.names), where)
            assert doomed is not None
            t.delete(where)
            for k in doomed:
                model.pop(k)
        versions[t.version] = dict(model)
    return Lake(name, t, model, versions)


class Lakes(dict):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        return "<lakes>"


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Lake]:
    cat = mere.connect(str(tmp_path_factory.mktemp("wh49")))
    return Lakes(
        {
            "plain": _build(cat, "plain", 1),
            "plain2": _build(cat, "plain", 2),
            "part": _build(cat, "part", 3),
            "seq": _build(cat, "seq", 4),
            "first": _build(cat, "first", 5),
        }
    )


# --- predicates -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    mere: str  # SQL text for mere
    duck: str  # SQL text for DuckDB
    value: Any  # the Python value (None: NULL) for mere.expr objects and Polars
    cross: bool = False  # of another kind than the column: mere may refuse it (typed)
    obj: bool = True  # usable as an mere.expr literal


def _num(v: int | str) -> Lit:
    text = str(v)
    if isinstance(v, int):
        return Lit(text, text, v)
    value: Any = float(text) if "e" in text.lower() else Decimal(text)
    return Lit(text, text, value)


def _str(s: str, cross: bool = False) -> Lit:
    text = "'" + s.replace("'", "''") + "'"
    return Lit(text, text, s, cross)


NULL = Lit("NULL", "NULL", None)


def _date(d: dt.date) -> Lit:
    return Lit(f"DATE '{d.isoformat()}'", f"DATE '{d.isoformat()}'", d)


def _ts(t: dt.datetime) -> Lit:
    text = f"TIMESTAMP '{t.isoformat(sep=' ')}'"
    return Lit(text, text, t)


def _tstz(t: dt.datetime) -> Lit:
    text = f"TIMESTAMPTZ '{t.isoformat(sep=' ')}'"
    return Lit(text, text, t)


def _bytes(b: bytes) -> Lit:
    return Lit(f"X'{b.hex()}'", f"unhex('{b.hex()}')", b)


def _double(word: str, value: float) -> Lit:
    return Lit(f"DOUBLE '{word}'", f"DOUBLE '{word}'", value)


INT_LITS = [_num(v) for v in (0, 1, -1, 127, 128, -128, -129, 255, 256, 7, -7, 3)]
BIG_LITS = [_num(v) for v in (2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**53 + 1, 2**53)]
FRACTION_LITS = [
    _num(v) for v in ("0.5", "-0.5", "1.5", "127.0", "-128.0", "0.0", "-0.0", "1.25", "9999999.99")
]
FLOAT_LITS = [_num(v) for v in ("1e0", "1.5e0", "-2.5e1", "0e0", "-1.25e0", "2.5e-1")]
SPECIAL = [_double("NaN", NAN), _double("Infinity", INF), _double("-Infinity", -INF)]
STRING_LITS = [_str(s) for s in POOLS["s"] if s is not None] + [
    _str(s) for s in ("b", "a\\", "zz", "é ", "A%")
]
LIKE_PATTERNS = ["a%", "%b", "a_b", "a\\b", "a\\%", "%", "_", "", "%'%", "ü%", "A%", "%\n%", "a%b%", "__"]


def _column_lits(name: str) -> list[Lit]:
    """Literals of the column's own kind, and some of other kinds (cross)."""
    kind = SCHEMA.field(name).type
    cross_str = [_str("5", cross=True), _str("abc", cross=True)]
    if pa.types.is_integer(kind):
        return INT_LITS + BIG_LITS + FRACTION_LITS + FLOAT_LITS + cross_str
    if name == "f64":
        return INT_LITS + FRACTION_LITS + FLOAT_LITS + SPECIAL + [_num("1e300"), _num("1e-1")] + cross_str
    if name == "f32":  # literals a float32 holds exactly (the others: test_float32_against_a_double_literal)
        return (
            INT_LITS
            + [_num(v) for v in ("0.5", "-3.0", "0.0", "-0.0", "1.5e0", "-3e0")]
            + SPECIAL
            + cross_str
        )
    if name == "dec":
        return (
            INT_LITS + FRACTION_LITS + [_num(v) for v in ("1.255", "-0.015", "1.5e0", "-1.25e0")] + cross_str
        )
    if name == "s":
        return [*STRING_LITS, Lit("5", "5", 5, cross=True)]
    if name == "bn":
        return [_bytes(b) for b in POOLS["bn"] if b is not None] + [_bytes(b"a"), _bytes(b"\x00\x00")]
    if name == "bo":
        return [Lit("TRUE", "TRUE", True), Lit("FALSE", "FALSE", False), Lit("1", "1", 1, cross=True)]
    if name == "d":
        dates = [_date(d) for d in POOLS["d"] if d is not None] + [_date(dt.date(2026, 11, 22))]
        return [
            *dates,
            _str("2026-11-21"),
            _str("1970-01-01"),
            _ts(dt.datetime(2026, 11, 21)),
            _ts(dt.datetime(2026, 11, 21, 0, 0, 1)),
            _ts(dt.datetime(1969, 12, 31, 23)),
            Lit("5", "5", 5, cross=True),
        ]
    if name in ("ts", "tss"):
        stamps = [
            T1,
            T1 + dt.timedelta(microseconds=1),
            T1 - dt.timedelta(microseconds=1),
            dt.datetime(1970, 1, 1),
        ]
        stamps += [dt.datetime(2000, 2, 29, 23, 59, 59), dt.datetime(2000, 2, 29, 23, 59, 59, 500000)]
        return (
            [_ts(x) for x in stamps] + [_date(D1), _date(dt.date(1970, 1, 1))] + [_str("2026-11-21 12:00:00")]
        )
    if name == "tsz":
        stamps = [
            dt.datetime(2026, 11, 21, 12, tzinfo=UTC),
            dt.datetime(2026, 11, 21, 17, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
        ]
        stamps += [
            dt.datetime(2026, 11, 21, 12, 0, 0, 1000, tzinfo=UTC),
            dt.datetime(2026, 11, 21, 12, 0, 0, 500, tzinfo=UTC),
        ]
        stamps += [
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            dt.datetime(1969, 12, 31, 19, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        ]
        naive = [_ts(T1)]
        return [_tstz(x) for x in stamps] + [Lit(n.mere, n.duck, n.value, cross=True) for n in naive]
    if name == "tsn":
        ns = [
            Lit(
                "TIMESTAMP_NS '2025-11-21 12:00:00.000000001'",
                "TIMESTAMP_NS '2025-11-21 12:00:00.000000001'",
                None,
                obj=False,
            ),
            Lit(
                "TIMESTAMP_NS '1969-12-31 23:59:59.999999999'",
                "TIMESTAMP_NS '1969-12-31 23:59:59.999999999'",
                None,
                obj=False,
            ),
        ]
        return [
            *ns,
            _ts(dt.datetime(2025, 11, 21, 12)),
            _ts(dt.datetime(1970, 1, 1)),
            _date(dt.date(1970, 1, 1)),
        ]
    raise AssertionError(name)


FILTER_COLUMNS = [*VALUE_COLUMNS, "k", "p"]
OPS = ["=", "<>", "<", "<=", ">", ">="]


@dataclass(frozen=True)
class Pred:
    mere: str
    duck: str
    cross: bool
    obj: Any  # an mere.expr Expr (None: text only)


def _wrap(p: Pred, how: str, q: Pred | None = None) -> Pred:
    if how == "not":
        obj = ~p.obj if p.obj is not None else None
        return Pred(f"NOT ({p.mere})", f"NOT ({p.duck})", p.cross, obj)
    assert q is not None
    word = how.upper()
    obj = None
    if p.obj is not None and q.obj is not None:
        obj = (p.obj & q.obj) if how == "and" else (p.obj | q.obj)
    return Pred(f"({p.mere}) {word} ({q.mere})", f"({p.duck}) {word} ({q.duck})", p.cross or q.cross, obj)


@st.composite
def atoms(draw: st.DrawFn, columns: list[str] | None = None) -> Pred:
    name = draw(st.sampled_from(columns or FILTER_COLUMNS))
    if name == "k":
        lits = [_num(v) for v in (-5, 0, 3, 10, 44, 45, -6, 2**63, -(2**63) - 1)] + [_num("3.5"), _num("1e1")]
    elif name == "p":
        lits = [_str(v) for v in ("x", "y", "", "z")]
    else:
        lits = _column_lits(name)
    lit = st.sampled_from(lits)
    form = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "between", "null", "like", "distinct", "flip"]))
    c = name
    if form == "like" and name in ("s", "p"):
        pattern = draw(st.sampled_from(LIKE_PATTERNS))
        neg = draw(st.booleans())
        word = "NOT LIKE" if neg else "LIKE"
        text = f"{c} {word} " + _str(pattern).mere
        return Pred(text, text, False, E.FilterText(text))
    if form == "null" or (form == "like"):
        neg = draw(st.booleans())
        text = f"{c} IS {'NOT ' if neg else ''}NULL"
        return Pred(text, text, False, mere.col(c).is_not_null() if neg else mere.col(c).is_null())
    if form == "in":
        values = draw(st.lists(st.one_of(lit, st.just(NULL)), min_size=1, max_size=4))
        neg = draw(st.booleans())
        word = "NOT IN" if neg else "IN"
        m = f"{c} {word} (" + ", ".join(v.mere for v in values) + ")"
        d = f"{c} {word} (" + ", ".join(v.duck for v in values) + ")"
        obj = None
        if all(v.obj for v in values):
            vals = [v.value for v in values]
            obj = mere.col(c).not_in(vals) if neg else mere.col(c).isin(vals)
        return Pred(m, d, any(v.cross for v in values), obj)
    if form == "between":
        lo, hi = draw(lit), draw(lit)
        neg = draw(st.booleans())
        word = "NOT BETWEEN" if neg else "BETWEEN"
        obj = None
        if lo.obj and hi.obj:
            obj = mere.col(c).between(lo.value, hi.value)
            obj = ~obj if neg else obj
        return Pred(
            f"{c} {word} {lo.mere} AND {hi.mere}",
            f"{c} {word} {lo.duck} AND {hi.duck}",
            lo.cross or hi.cross,
            obj,
        )
    v = draw(lit)
    if form == "distinct" and name != "bn":  # bn: test_binary_literal_in_is_distinct_from
        if isinstance(v.value, int) and not -(2**63) <= v.value < 2**64:
            v = _num(0)  # test_huge_integer_literals_in_the_expression_language
        neg = draw(st.booleans())
        word = "IS NOT DISTINCT FROM" if neg else "IS DISTINCT FROM"
        return Pred(f"{c} {word} {v.mere}", f"{c} {word} {v.duck}", v.cross, None)
    op = draw(st.sampled_from(OPS))
    if form == "flip":  # the literal on the left
        return Pred(f"{v.mere} {op} {c}", f"{v.duck} {op} {c}", v.cross, None)
    obj = None
    if v.obj:
        column = mere.col(c)
        obj = {
            "=": column.__eq__,
            "<>": column.__ne__,
            "<": column.__lt__,
            "<=": column.__le__,
            ">": column.__gt__,
            ">=": column.__ge__,
        }[op](v.value)
    return Pred(f"{c} {op} {v.mere}", f"{c} {op} {v.duck}", v.cross, obj)


EXPRESSIONS = [
    "i8 < i16",
    "f64 = f32",
    "f64 > f32",
    "f64 <> f32",
    "i64 < u64",
    "dec < f64",
    "dec = i8",
    "d < ts",
    "ts = tss",
    "ts < tsn",
    "s = p",
    "s < p",
    "f64 <> f64",
    "i8 IS DISTINCT FROM i16",
    "f64 IS NOT DISTINCT FROM f32",
    "k % 3 = 1",
    "k % 4 = -1",
    "abs(k) > 3",
    "f64 + 1 > 2",
    "-f64 < 0",
    "abs(f64) = 0",
    "coalesce(f64, 0) > 1",
    "f64 * 0 = 0",
    "s || 'x' = 'ax'",
    "lower(s) = 'a'",
    "upper(s) = 'É'",
    "length(s) = 1",
    "substring(s, 1, 1) = 'ü'",
    "left(s, 1) = 'a'",
    "starts_with(s, 'a')",
    "contains(s, '%')",
    "ends_with(s, 'b')",
    "s ILIKE 'a%'",
    "s NOT ILIKE '%B'",
    "year(d) = 2026",
    "month(ts) = 11",
    "CAST(dec AS INT) = 2",
    "round(dec) = 2",
    "i8 % 3 = 1",
    "greatest(i8, i16) > 0",
    "least(f64, 0) < 0",
    "nullif(i8, 0) IS NULL",
    "if(bo, 1, 0) = 1",
    "CASE WHEN f64 > 0 THEN 'p' WHEN f64 < 0 THEN 'n' ELSE 'z' END = 'z'",
    "CAST(i8 AS VARCHAR) = '-1'",
    "CAST(d AS VARCHAR) = '2026-11-21'",
    "hour(tsz) = 12",
    "CAST(ts AS DATE) = DATE '2026-11-21'",
    "bo = (i8 > 0)",
    "(i8 > 0) = (i16 > 0)",
    "bo IS NOT FALSE",
    "bo",
    "NOT bo",
    "dec * dec > 1",
    "k + 0 IN (1, 2, 3, NULL)",
    "p IS NULL OR p = ''",
    "COALESCE(p, 'none') = 'none'",
]


def predicates(columns: list[str] | None = None, depth: int = 3) -> st.SearchStrategy[Pred]:
    base = atoms(columns)
    if columns is None:
        base = st.one_of(
            base,
            base,
            base,
            st.sampled_from(EXPRESSIONS).map(lambda text: Pred(text, text, False, E.FilterText(text))),
        )

    def extend(inner: st.SearchStrategy[Pred]) -> st.SearchStrategy[Pred]:
        return st.one_of(
            st.builds(lambda p: _wrap(p, "not"), inner),
            st.builds(lambda p, q: _wrap(p, "and", q), inner, inner),
            st.builds(lambda p, q: _wrap(p, "or", q), inner, inner),
        )

    return st.recursive(base, extend, max_leaves=5)


# --- comparison helpers ---------------------------------------------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)  # keeps -0.0 apart from 0.0
    return v


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    table = table.select(SCHEMA.names)
    return sorted((tuple(_norm(v) for v in r.values()) for r in table.to_pylist()), key=lambda r: r[0])


def _expected_rows(lake: Lake, keys: list[int]) -> list[tuple[Any, ...]]:
    return _rows(_arrow([lake.model[k] for k in keys], SCHEMA.names))


def _oracle(lake: Lake, pred: Pred) -> list[int] | None:
    return _duck_keys(_duck(), lake.expected(), pred.duck)


def _mere_or_error(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except MereError as e:
        return None, e


ROUTES = {
    "plain": {"MAX_NARROW_BYTES": -1},
    "mark-all": {"CANDIDATE_SHARE": 0.0, "SEARCH_LATER": False},
    "semi-join": {"CANDIDATE_SHARE": 1.0, "SEARCH_LATER": False},
    "search": {"CANDIDATE_SHARE": 1.0, "SEARCH_LATER": True},
}


@contextmanager
def route(name: str) -> Iterator[None]:
    """Reads in the block take the named route of :mod:`mere.read.selective`."""
    saved = {k: getattr(selective, k) for k in ROUTES[name]}
    for k, v in ROUTES[name].items():
        setattr(selective, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(selective, k, v)


def _check(lake: Lake, pred: Pred, version: int | None = None) -> None:
    """Every read route of ``pred`` gives DuckDB's rows, or (for a literal of another kind) a typed refusal."""
    expected = _oracle(lake, pred)
    t = lake.table
    scan, err = _mere_or_error(lambda: t.scan(filter=pred.mere, version=version))
    if err is not None:
        assert pred.cross, f"{pred.mere!r} refused: {err}"
        return
    assert scan is not None
    str(scan.explain())
    for name in ROUTES:
        with route(name):
            got, err = _mere_or_error(scan.to_arrow)
            if err is not None:
                assert pred.cross or expected is None, f"{name}: {pred.mere!r} refused at read: {err}"
                return
            if expected is None:
                return  # DuckDB refuses the text (a cross-kind literal); mere's answer is not checked
            assert _rows(got) == _expected_rows(lake, expected), f"{name}: {pred.mere!r} / {pred.duck!r}"
    if expected is None:
        return
    batches = pa.Table.from_batches(list(scan.to_batches()), schema=scan.schema)
    assert _rows(batches) == _expected_rows(lake, expected), f"to_batches: {pred.mere!r}"
    assert scan.count() == len(expected), f"count: {pred.mere!r}"
    for column in ("i64", "d", "s"):
        got_min, got_max = scan.min(column), scan.max(column)
        values = [lake.model[k][column] for k in expected if lake.model[k][column] is not None]
        assert got_min == (min(values) if values else None), f"min({column}): {pred.mere!r}"
        assert got_max == (max(values) if values else None), f"max({column}): {pred.mere!r}"
    keys_only = t.scan(columns=["k"], filter=pred.mere, version=version).to_arrow()["k"].to_pylist()
    assert sorted(keys_only) == expected, f"columns=['k']: {pred.mere!r}"
    if pred.obj is not None:
        got, err = _mere_or_error(lambda: t.scan(filter=pred.obj, version=version).to_arrow())
        if err is not None:
            assert pred.cross, f"expr {pred.obj!r} refused: {err}"
        else:
            assert _rows(got) == _expected_rows(lake, expected), f"expr: {pred.obj!r} (text {pred.mere!r})"
            rendered = str(E.to_expr(pred.obj))  # an Expr reads back from its text to the same rows
            got = t.scan(filter=rendered, version=version).to_arrow()
            assert _rows(got) == _expected_rows(lake, expected), (
                f"rendered: {rendered!r} (text {pred.mere!r})"
            )


# --- the tests ------------------------------------------------------------------------------------------

SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def test_models_are_what_mere_reads(lakes: dict[str, Lake]) -> None:
    for lake in lakes.values():
        assert _rows(lake.table.scan().to_arrow()) == _rows(lake.expected()), lake.name
        assert len(lake.table.inspect.files()) > 3, lake.name  # overlapping files, not one compacted one


@pytest.mark.parametrize("which", ["plain", "plain2", "part", "seq", "first"])
@SETTINGS
@given(pred=predicates())
def test_random_predicates_equal_duckdb(lakes: dict[str, Lake], which: str, pred: Pred) -> None:
    _check(lakes[which], pred)


@pytest.mark.parametrize("which", ["plain", "part", "seq"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=predicates())
def test_duckdb_register_equals_duckdb_on_the_model(lakes: dict[str, Lake], which: str, pred: Pred) -> None:
    lake = lakes[which]
    con = _duck()
    mere_duckdb.register(con, "lake", lake.table)
    con.register("model_rows", lake.expected())
    try:
        expected = sorted(r[0] for r in con.execute(f"SELECT k FROM model_rows WHERE {pred.duck}").fetchall())
    except duckdb.Error:
        return
    got = con.sql(f"SELECT * FROM lake WHERE {pred.duck}").arrow()
    if isinstance(got, pa.RecordBatchReader):
        got = got.read_all()
    assert sorted(got["k"].to_pylist()) == expected, pred.duck
    count = con.sql(f"SELECT count(*), min(i64), max(s) FROM lake WHERE {pred.duck}").fetchall()
    want_count = con.sql(f"SELECT count(*), min(i64), max(s) FROM model_rows WHERE {pred.duck}").fetchall()
    assert count == want_count, pred.duck
    # whole rows: no older version of a key comes back
    kept = {
        r["k"]: (r["i64"], r["s"], r["d"], r["seq"])
        for r in got.select(["k", "i64", "s", "d", "seq"]).to_pylist()
    }
    want = {
        k: (lake.model[k]["i64"], lake.model[k]["s"], lake.model[k]["d"], lake.model[k]["seq"])
        for k in expected
    }
    assert kept == want, pred.duck


@pytest.mark.parametrize("which", ["plain2", "part"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=predicates())
def test_dask_read_table_filter_equals_duckdb(lakes: dict[str, Lake], which: str, pred: Pred) -> None:
    dask = pytest.importorskip("dask")
    from mere.integrations import dask as mere_dask

    lake = lakes[which]
    expected = _oracle(lake, pred)
    ddf, err = _mere_or_error(
        lambda: mere_dask.read_table(lake.table, columns=["k", "i64", "s"], filter=pred.mere)
    )
    if err is not None:
        assert pred.cross, f"{pred.mere!r} refused: {err}"
        return
    with dask.config.set(scheduler="sync"):
        frame, err = _mere_or_error(ddf.compute)
    if err is not None:
        assert pred.cross or expected is None, f"{pred.mere!r} refused at compute: {err}"
        return
    if expected is None:
        return
    assert sorted(int(k) for k in frame["k"]) == expected, pred.mere


# --- Polars: the lazy frame's filter (key and partition parts pushed into mere) ---------------------------

POLARS_VALUES: dict[str, list[Any]] = {
    "k": [-5, 0, 3, 10, 44, 45, -6],
    "p": ["x", "y", "", "z"],
    "i8": [-128, 127, 0, 1, -1, 5],
    "i64": [0, 7, -7, 2**53 + 1, 2**63 - 1],
    "s": ["", "a", "A", "é", "it's", "a%b", "zz"],
    "d": [D1, dt.date(1970, 1, 1), dt.date(1900, 3, 1), dt.date(2026, 11, 22)],
    "f64": [0.0, -0.0, 1.5, INF, -INF, NAN],
    "bo": [True, False],
}


@st.composite
def polars_atoms(draw: st.DrawFn) -> Any:
    name = draw(st.sampled_from(sorted(POLARS_VALUES)))
    c = pl.col(name)
    value = st.sampled_from(POLARS_VALUES[name])
    form = draw(st.sampled_from(["cmp", "cmp", "in", "between", "null", "flip"]))
    if form == "null":
        return c.is_null() if draw(st.booleans()) else c.is_not_null()
    if form == "in":
        values = draw(st.lists(value, min_size=1, max_size=4))
        return c.is_in(values, nulls_equal=draw(st.booleans()))
    if form == "between":
        closed = draw(st.sampled_from(["both", "left", "right", "none"]))
        return c.is_between(draw(value), draw(value), closed=closed)
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    v = draw(value)
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }
    if form == "flip":
        return ops[op](pl.lit(v), c)
    return ops[op](c, v)


def polars_predicates() -> st.SearchStrategy[Any]:
    return st.recursive(
        polars_atoms(),
        lambda inner: st.one_of(
            st.builds(lambda p: ~p, inner),
            st.builds(lambda p, q: p & q, inner, inner),
            st.builds(lambda p, q: p | q, inner, inner),
        ),
        max_leaves=5,
    )


@pytest.mark.parametrize("which", ["plain", "part", "seq"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=polars_predicates())
def test_polars_lazy_filter_equals_polars_on_the_model(lakes: dict[str, Lake], which: str, pred: Any) -> None:
    lake = lakes[which]
    columns = ["k", "p", "i8", "i64", "s", "d", "f64", "bo", "seq"]
    model = pl.from_arrow(lake.expected().select(columns))
    try:
        expected = model.lazy().filter(pred).select(columns).collect()
    except pl.exceptions.PolarsError:
        return
    got = mere_polars.scan_table(lake.table).filter(pred).select(columns).collect()
    assert sorted(got["k"].to_list()) == sorted(expected["k"].to_list()), str(pred)
    assert (
        got.sort("k").select("k", "seq", "i64", "s").rows()
        == expected.sort("k").select("k", "seq", "i64", "s").rows()
    ), str(pred)


@pytest.mark.parametrize("which", ["plain", "part", "seq"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=predicates(), data=st.data())
def test_random_predicates_at_earlier_versions_equal_duckdb(
    lakes: dict[str, Lake], which: str, pred: Pred, data: st.DataObject
) -> None:
    lake = lakes[which]
    version = data.draw(st.sampled_from(sorted(lake.versions)), label="version")
    _check(lake.at(version), pred, version)


# --- targeted cases -------------------------------------------------------------------------------------


def _small(cat: mere.Catalog, schema: pa.Schema, data: dict[str, Any], **kw: Any) -> mere.Table:
    t = cat.create_table("t.small", schema, primary_key="k", buckets=2, properties=OFF, **kw)
    t.upsert(pa.table(data, schema=schema))
    return t


def _keys(t: mere.Table, where: Any) -> list[int]:
    return sorted(t.scan(filter=where).to_arrow()["k"].to_pylist())


def _duck_on(t: mere.Table, where: str) -> list[int]:
    rows = t.scan().to_arrow()
    con = _duck()
    con.register("rows_", rows)
    return sorted(r[0] for r in con.execute(f"SELECT k FROM rows_ WHERE {where}").fetchall())


def test_binary_literal_in_is_distinct_from(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("bn", pa.binary())])
    t = _small(local_cat, schema, {"k": [1, 2, 3], "bn": [b"\xff", b"", None]})
    assert _keys(t, "bn = X'ff'") == [1]  # the literal itself is fine
    assert _keys(t, "bn IS DISTINCT FROM X'ff'") == [2, 3]
    assert _keys(t, "bn IS NOT DISTINCT FROM X''") == [2]


def test_trim_strips_what_duckdb_strips(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    vals = ["\n", "\t a ", " a ", "a", "\r", "  "]
    t = _small(local_cat, schema, {"k": list(range(len(vals))), "s": vals})
    for where in (
        "trim(s) = ''",
        "trim(s) = 'a'",
        "ltrim(s) = 'a '",
        "trim(s) = '\t a'",
        "rtrim(s) = '\t a'",
    ):
        assert _keys(t, where) == _duck_on(t, where), where


def test_float32_against_a_double_literal(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("f", pa.float32())])
    t = _small(local_cat, schema, {"k": [1, 2, 3], "f": [0.1, 0.5, float("inf")]})
    for where in ("f = 0.5e0", "f = 1e-1", "f > 1e-1", "f < 1e-1", "f = 1e300", "f < 1e300"):
        assert _keys(t, where) == _duck_on(t, where), where


def test_big_integer_against_a_double_literal(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("u", pa.uint64()), ("i", pa.int64())])
    t = _small(local_cat, schema, {"k": [1, 2], "u": [2**64 - 1, 2**53 + 1], "i": [2**63 - 1, 2**53 + 1]})
    for where in ("u = 1.8446744073709552e19", "i = 9.223372036854776e18", "i = 9.007199254740992e15"):
        assert _keys(t, where) == _duck_on(t, where), where


LONG = 600


@pytest.mark.parametrize("form", ["text-or", "text-and", "expr-or", "delete-or"])
def test_long_flat_boolean_filters(local_cat: mere.Catalog, form: str) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    t = _small(local_cat, schema, {"k": list(range(10)), "v": list(range(10))})
    before = t.version
    if form == "text-or":
        where: Any = " OR ".join(f"v = {i}" for i in range(LONG))
    elif form == "text-and":
        where = " AND ".join(f"v <> {i + 100}" for i in range(LONG))
    else:
        where = mere.col("v") == 0
        for i in range(1, LONG):
            where = where | (mere.col("v") == i)
    try:
        if form == "delete-or":
            t.delete(where)
            assert t.scan().count() == 0
        else:
            assert t.scan(filter=where).count() == 10
    except MereError:
        assert t.version == before  # a typed refusal changes nothing


@pytest.mark.parametrize(
    ("where", "how"),
    [
        (where, how)
        for where in [
            "f = 1e",
            "k = 12e8.0",
            "f IN (1e1.5)",
            "NOT (k BETWEEN 1ee1 AND 0)",
            "0e < f",
            "f = .0.5",
        ]
        for how in ["scan", "delete", "sql"]
        if not (how == "sql" and where == "f = .0.5")  # mere.sql refuses this one typed
    ],
)
def test_malformed_number_literals_are_typed(local_cat: mere.Catalog, where: str, how: str) -> None:
    schema = pa.schema([("k", pa.int64()), ("f", pa.float64())])
    t = _small(local_cat, schema, {"k": [1, 2], "f": [1.0, 2.0]})
    before = t.version
    with pytest.raises(MereError):
        if how == "scan":
            t.scan(filter=where).to_arrow()
        elif how == "delete":
            t.delete(where)
        else:
            mere.sql(f"DELETE FROM t.small WHERE {where}", catalog=local_cat)
    assert t.version == before and t.scan().count() == 2


BAD_TEXT = [
    "",
    "   ",
    "k = 1\x00",
    "1",
    "'abc'",
    "i8",
    "s",
    "sum(i8) > 0",
    "row_number() over () = 1",
    "exists (select 1)",
    "k in (select 1)",
    "*",
    "s = 'abc",
    "(k = 1",
    "k = 1)",
    "CAST(s AS FOO) = 1",
    "ts = TIMESTAMP 'nope'",
    "d = DATE '2020-02-30'",
    "d = DATE '2020-13-01'",
    "d = '2020-02-30'",
    "d < '20200101'",
    "ts > TIMESTAMP '2020-01-01' - INTERVAL 1 DAY",
    "nope = 1",
    "I8 = 1",
    "s like NULL",
    "s LIKE 'a' ESCAPE '!'",
    "s SIMILAR TO 'a'",
    "s GLOB 'a*'",
    "s ~ 'a'",
    "(i8, s) = (1, 'a')",
    "i8 > ALL (1)",
    "s = ?",
    "s = $1",
    "s = :x",
    "s = 'a'; DROP TABLE x",
    "select",
    "SELECT * FROM t WHERE k = 1",
    "i8 = NULL",
    "NULL = NULL",
    "i8 < 1e400",
    "s = 5",
    "i8 = '1'",
    "bo = 1",
    "i8 = TRUE",
    "d = 5",
    "tsz = TIMESTAMP '2026-11-21 12:00:00'",
    "u64 + 1 > 0",
    "k = 0x10",
    "i8 in (1, 'x')",
    "'",
    ";",
    "-- x",
    "k = 1 AND",
    "OR k = 1",
    "k == == 1",
    "k IN ()",
    "k IN (1,)",
    "k BETWEEN 1",
    "k IS",
    "NOT",
    "CASE WHEN k = 1 THEN TRUE",
    "coalesce()",
    "lower(s, s) = 'a'",
    "length() = 1",
    "CAST(k AS) = 1",
    "k::NOPE = 1",
    "{'a': 1} = k",
    "[1, 2] = k",
    "k = 1 COLLATE NOCASE",
    "k = 1 LIMIT 1",
    "bn LIKE 'a%'",
    "CAST(s AS INT) = 1",
]


@pytest.mark.parametrize("where", BAD_TEXT)
def test_bad_filter_text_is_typed_everywhere(
    lakes: dict[str, Lake], local_cat: mere.Catalog, where: str
) -> None:
    """A filter that cannot run raises a MereError (or runs) in scans, the adapters and writes, and a refused
    delete or update changes nothing."""
    t = lakes["plain2"].table
    for call in (
        lambda: t.scan(filter=where).to_arrow(),
        lambda: t.scan(filter=where).count(),
        lambda: t.scan(filter=where).explain(),
        lambda: mere_polars.scan_table(t, filter=where).collect(),
        lambda: mere_duckdb.register(_duck(), "x", t, filter=where),
    ):
        with suppress(MereError):
            call()
    w = local_cat.create_table("t.w", SCHEMA, primary_key="k", buckets=2, properties=OFF)
    w.upsert(lakes["plain2"].expected())
    before, rows = w.version, w.scan().count()
    for write in (
        lambda: w.delete(where),
        lambda: w.update(set={"i64": "i64"}, where=where),
        lambda: mere.sql(f"DELETE FROM t.w WHERE {where}", catalog=local_cat),
    ):
        try:
            write()
        except MereError:
            assert w.version == before and w.scan().count() == rows, where
        before, rows = w.version, w.scan().count()


BAD_VALUES: list[Callable[[], Any]] = [
    lambda: mere.col("i8") == Decimal("NaN"),
    lambda: mere.col("i8") == pa.scalar(None, pa.int8()),
    lambda: mere.col("i8") == object(),
    lambda: mere.col("i8") == 1j,
    lambda: mere.col("i8").isin([[1]]),
    lambda: mere.col("i8").isin([object()]),
    lambda: mere.col("i8").isin([Decimal("sNaN")]),
    lambda: mere.col("i8").isin(5),
    lambda: mere.col("i8").isin("abc"),
    lambda: mere.col("i8") == True,  # noqa: E712
    lambda: mere.col("i8") == "1",
    lambda: mere.col("s") == b"a",
    lambda: mere.col("s") == "\ud800",
    lambda: mere.col("bn") == 1,
    lambda: mere.col("d") == dt.time(1),
    lambda: mere.col("d") == dt.timedelta(1),
    lambda: mere.col("d") == "garbage",
    lambda: mere.col("ts") == dt.datetime(2020, 1, 1, tzinfo=UTC),
    lambda: mere.col("tsz") == dt.datetime(2020, 1, 1),
    lambda: mere.col("dec") == "1.5",
    lambda: mere.col("bo") == 1,
    lambda: mere.col("nope") == 1,
    lambda: mere.col("") == 1,
    lambda: mere.col(5) == 1,  # type: ignore[arg-type]
    lambda: mere.col("k") == mere.col("i8"),
    lambda: mere.col("k") < (mere.col("i8") > 1),
    lambda: mere.col("k").between(1, None),
    lambda: (mere.col("k") == 1) & "i8 >>> 0",
    lambda: (mere.col("k") == 1) | 5,
    lambda: bool(mere.col("k") == 1),
    lambda: 5,
    lambda: b"k = 1",
    lambda: ["k = 1"],
    lambda: {"k": 1},
    lambda: E.In("k", (1, 2), negated=True) & E.FilterText(""),
]


@pytest.mark.parametrize("make", BAD_VALUES, ids=range(len(BAD_VALUES)))
def test_bad_filter_values_are_typed(lakes: dict[str, Lake], make: Callable[[], Any]) -> None:
    t = lakes["plain2"].table
    try:
        where = make()
        t.scan(filter=where).to_arrow()
    except MereError:
        pass
    except TypeError as e:  # Python's own operators: `x | 5` on an Expr is Python refusing, not mere
        assert "unsupported operand" in str(e), e


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=predicates(), data=st.data())
def test_mutated_filter_text_is_typed_or_equals_duckdb(
    lakes: dict[str, Lake], pred: Pred, data: st.DataObject
) -> None:
    """A valid filter with a character deleted or a token inserted: a typed refusal, or DuckDB's rows."""
    inserts = [" ", "(", ")", "'", "NOT ", " AND ", " OR ", "-", "+", "1", ".", "e", "NULL", ",", "::INT"]
    inserts += ["::VARCHAR", "::DOUBLE", " IS NULL", "\\", "%", "''", '"', "`", "/*", "--", "\n", "=", "<"]
    text = pred.mere
    for _ in range(data.draw(st.integers(1, 2), label="edits")):
        i = data.draw(st.integers(0, len(text)), label="at")
        if data.draw(st.booleans(), label="delete") and i < len(text):
            text = text[:i] + text[i + 1 :]
        else:
            text = text[:i] + data.draw(st.sampled_from(inserts), label="insert") + text[i:]
    lake = lakes["plain"]
    try:
        got = sorted(lake.table.scan(filter=text).to_arrow()["k"].to_pylist())
    except MereError:
        return
    except (ValueError, InvalidOperation) as e:  # test_malformed_number_literals_are_typed
        assert "could not convert string to float" in str(e) or isinstance(e, InvalidOperation), (text, e)
        return
    if "X'" in text:
        return  # DuckDB spells bytes otherwise
    expected = _duck_keys(_duck(), lake.expected(), text)
    if expected is not None:
        assert got == expected, text


@pytest.mark.parametrize(
    "where",
    [
        "k IS DISTINCT FROM -9223372036854775809",
        "u IS NOT DISTINCT FROM 18446744073709551616",
        "k + 0 = -9223372036854775809",
        "coalesce(k, 0) <> 18446744073709551616",
    ],
)
def test_huge_integer_literals_in_the_expression_language(local_cat: mere.Catalog, where: str) -> None:
    schema = pa.schema([("k", pa.int64()), ("u", pa.uint64())])
    t = _small(local_cat, schema, {"k": [1, 2], "u": [1, None]})
    assert _keys(t, where) == _duck_on(t, where), where


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=predicates(), seed=st.integers(0, 10**6))
def test_delete_by_random_predicate_equals_duckdb(
    tmp_path_factory: pytest.TempPathFactory, pred: Pred, seed: int
) -> None:
    """``delete(where)`` over overlapping files removes exactly the merged rows DuckDB's WHERE selects, and
    nothing else (an older version of a deleted or kept key never comes back); a refusal changes nothing."""
    rng = random.Random(seed)
    cat = mere.connect(str(tmp_path_factory.mktemp("del49")))
    t = cat.create_table("d.t", SCHEMA, primary_key="k", buckets=2, properties=OFF)
    model: dict[int, dict[str, Any]] = {}
    for step in range(3):
        rows = []
        for k in rng.sample(range(30), 15):
            row = {"k": k, "p": _value(rng, "p"), "seq": step}
            row.update({n: _value(rng, n) for n in VALUE_COLUMNS})
            rows.append(row)
        t.upsert(_arrow(rows, SCHEMA.names))
        model.update({r["k"]: r for r in rows})
    lake = Lake("d.t", t, model, {})
    expected = _oracle(lake, pred)
    before = t.version
    try:
        t.delete(pred.mere)
    except MereError as e:
        assert pred.cross or expected is None, f"{pred.mere!r} refused: {e}"
        assert t.version == before and _rows(t.scan().to_arrow()) == _rows(lake.expected())
        return
    if expected is None:
        return
    for k in expected:
        model.pop(k)
    assert _rows(t.scan().to_arrow()) == _rows(lake.expected()), pred.mere


@pytest.mark.parametrize("which", ["plain", "part", "first"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=predicates(), b=predicates())
def test_chained_where_on_a_projection_equals_duckdb(
    lakes: dict[str, Lake], which: str, a: Pred, b: Pred
) -> None:
    """``scan(columns=["k"], filter=a).where(b)`` keeps the rows DuckDB's ``(a) AND (b)`` keeps, though
    neither filter's columns are read out."""
    lake = lakes[which]
    both = _wrap(a, "and", b)
    expected = _oracle(lake, both)
    try:
        got = lake.table.scan(columns=["k"], filter=a.mere).where(b.mere).to_arrow()
    except MereError as e:
        assert both.cross, f"{both.mere!r} refused: {e}"
        return
    assert got.column_names == ["k"]
    if expected is not None:
        assert sorted(got["k"].to_pylist()) == expected, both.mere


def test_ilike_folds_case_as_duckdb(local_cat: mere.Catalog) -> None:
    sigma, final, capital = "\u03c3", "\u03c2", "\u03a3"
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    t = _small(local_cat, schema, {"k": [1, 2, 3], "s": [capital, final, sigma]})
    same = f"lower(s) = '{sigma}'"
    assert _keys(t, same) == _duck_on(t, same)  # the function agrees
    like = f"s ILIKE '{sigma}'"
    assert _keys(t, like) == _duck_on(t, like)


def test_max_of_a_float_column_orders_nan_as_filters_do(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("f", pa.float64())])
    t = _small(local_cat, schema, {"k": [1, 2, 3], "f": [NAN, 1.0, -0.0]})
    assert _keys(t, "f > 1.0") == [1]  # NaN is above 1.0 in a filter
    assert t.scan().min("f") == 0.0
    top = t.scan(filter="k > 0").max("f")
    assert isinstance(top, float) and math.isnan(top), top
