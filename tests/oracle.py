"""Independent oracles for tests/test_differential.py.

* ``Kind``: one column type the differential test generates, with its Hypothesis values, its filter
  literals and how DuckDB must spell a comparison with them so that it means what mere's filter means.
* ``Model``: a primary-key table as a plain dict, applying upserts, CDC, deletes and overwrites the way
  the docs define them, and telling which writes must (or may) be rejected.
* ``duck_select``: the rows of the model a WHERE clause keeps, evaluated by DuckDB.
* ``canon_rows`` / ``diff``: normalised rows (NaN, -0.0, time zones) and a readable difference.

Nothing here imports mere: the oracle must not share code with what it checks.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import strategies as st

# -- values ----------------------------------------------------------------------------------------------

UTC = dt.UTC
_CTX = decimal.Context(prec=200)  # exact for every decimal generated here
PARIS_LIKE = [dt.timezone(dt.timedelta(hours=h, minutes=m)) for h, m in ((1, 0), (2, 0), (-5, -30), (5, 45))]
SPECIAL_FLOATS = [math.nan, -0.0, 0.0, math.inf, -math.inf]
# Text without surrogates (Arrow cannot encode them); NUL, quotes and non-BMP characters stay in.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
LITERAL_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=6)
COMMON_STRINGS = [
    "",
    "a",
    "A",
    "b",
    "ab",
    "a b",
    "it's",
    "ä",
    "日本語",
    "😀",
    "x" * 40,
    "NULL",
    "-",
    "__HIVE_DEFAULT_PARTITION__",
    "a/b=c%20",
]


def int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def ints_of(t: pa.DataType) -> st.SearchStrategy[int]:
    lo, hi = int_range(t)
    edges = sorted({lo, hi, 0, 1, lo + 1, hi - 1, max(lo, -1)})
    return st.one_of(st.sampled_from(edges), st.integers(max(lo, -5), min(hi, 5)), st.integers(lo, hi))


def dec_of(unscaled: int, scale: int) -> Decimal:
    """unscaled * 10**-scale, exactly (Decimal arithmetic would round to 28 digits)."""
    return Decimal(f"{unscaled}E-{scale}")


def decimals_of(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    top = 10**precision - 1
    edge = st.sampled_from([top, -top, 0, 1, -1, min(top, 10**scale)])
    small = st.integers(-min(999, top), min(999, top))
    return st.one_of(edge, small, st.integers(-top, top)).map(lambda i: dec_of(i, scale))


def floats_of(width: int) -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from([*SPECIAL_FLOATS, 1.5, -2.25, 0.1 if width == 64 else 0.5]),
        st.floats(width=width),
        st.integers(-4, 4).map(float),
    )


def dyadic_floats() -> st.SearchStrategy[float]:
    """Values whose sums are exact in any order (sum columns: the fold order is mere's business)."""
    return st.one_of(st.integers(-400, 400).map(lambda k: k / 4), st.sampled_from(SPECIAL_FLOATS))


DATES = st.one_of(
    st.sampled_from([dt.date(1970, 1, 1), dt.date(2026, 11, 21), dt.date(1, 1, 1), dt.date(9999, 12, 31)]),
    st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
)
NAIVE_TIMES = st.one_of(
    st.sampled_from(
        [
            dt.datetime(1970, 1, 1),
            dt.datetime(2026, 3, 29, 2, 30),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        ]
    ),
    st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1)),
)
AWARE_TIMES = st.builds(lambda t, tz: t.replace(tzinfo=tz), NAIVE_TIMES, st.sampled_from([UTC, *PARIS_LIKE]))


def in_unit(value: dt.datetime, unit: str) -> dt.datetime:
    """``value`` cut to a timestamp unit coarser than microseconds (so that it fits the column)."""
    if unit == "s":
        return value.replace(microsecond=0)
    if unit == "ms":
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


def nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values)


STRUCT_AB = pa.struct([("a", pa.int64()), ("b", pa.string())])
STRUCT_VALUES = st.fixed_dictionaries({"a": nullable(ints_of(pa.int64())), "b": nullable(TEXT)})


# -- filter literals -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    """A filter literal: ``cls`` says how it is spelt (int, dec, float, special, str, bool, date, ts, bin, null)."""

    cls: str
    value: Any

    def mere(self) -> str:
        v = self.value
        if self.cls == "null":
            return "NULL"
        if self.cls == "int":
            return str(v)
        if self.cls == "dec":
            return format(v, "f")
        if self.cls == "float":
            text = repr(v)
            return text if "e" in text else text + "e0"  # an exponent makes it a float literal
        if self.cls == "special":
            return f"'{v}'"  # 'NaN', 'Infinity', '-Infinity' bind to float columns
        if self.cls == "str":
            return "'" + v.replace("'", "''") + "'"
        if self.cls == "bool":
            return "TRUE" if v else "FALSE"
        if self.cls == "date":
            return f"DATE '{v.isoformat()}'"
        if self.cls == "ts":
            return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
        if self.cls == "bin":
            return f"X'{v.hex()}'"
        raise AssertionError(self.cls)


def _decimal_digits(d: Decimal) -> tuple[int, int]:
    """(integer digits, scale) of a decimal as written."""
    _, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    scale = max(0, -exp)
    return max(0, len(digits) + exp), scale


# -- column kinds ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One column type: values to generate and, for scalar types, literals and their DuckDB spelling."""

    name: str
    type: pa.DataType
    family: str  # int, float, dec, bool, str, bin, date, ts, tstz, nested
    values: st.SearchStrategy[Any]

    @property
    def filterable(self) -> bool:
        if self.family == "nested":
            return False
        # DuckDB cannot load decimal256; one that fits 38 digits is loaded as decimal128.
        return not (self.family == "dec" and self.type.precision > 38)

    @property
    def sum_ok(self) -> bool:
        return self.family in ("int", "float")

    @property
    def concat_ok(self) -> bool:
        return self.family == "str"

    @property
    def partition_ok(self) -> bool:
        return self.family in ("int", "str", "date", "bool") and not pa.types.is_large_string(self.type)

    def dec_scale(self) -> int:
        """Decimal columns: the scale DuckDB compares at (every literal is drawn to fit DECIMAL(38, it))."""
        p, s = self.type.precision, self.type.scale
        return min(s + 2, 38 - (p - s))

    def literals(self, pool: Sequence[Any]) -> st.SearchStrategy[Lit]:
        """Literals to compare this column with; ``pool`` holds values the column has now."""
        f, t = self.family, self.type
        if f == "int":
            lo, hi = int_range(t)
            opts = [
                st.integers(lo - 2, hi + 2).map(lambda v: Lit("int", v)),
                st.integers(-(10**25), 10**25).map(lambda v: Lit("int", v)),
                st.builds(
                    lambda i, s: Lit("dec", dec_of(i, s)),
                    st.integers(-(10**20) + 1, 10**20 - 1),
                    st.integers(1, 3),
                ),
            ]
            if pool:
                opts += [st.sampled_from(pool).map(lambda v: Lit("int", v))] * 3
                # v.00 equals v; v.5 and v-0.25 fall between two integers.
                opts.append(
                    st.builds(
                        lambda v, d: Lit("dec", dec_of(v * 100 + d, 2)),
                        st.sampled_from(pool),
                        st.sampled_from([0, 50, -25]),
                    )
                )
            if t.bit_width <= 32:  # exact as a double, so SQL's double comparison is exact too
                opts.append(st.integers(lo - 2, hi + 2).map(lambda v: Lit("float", float(v))))
                opts.append(st.integers(lo, hi).map(lambda v: Lit("float", v + 0.5)))
            return st.one_of(opts)
        if f == "float":
            width = t.bit_width
            finite = [v for v in pool if math.isfinite(v)]
            opts = [
                st.sampled_from(["NaN", "Infinity", "-Infinity"]).map(lambda v: Lit("special", v)),
                st.floats(width=width, allow_nan=False, allow_infinity=False).map(lambda v: Lit("float", v)),
                st.integers(-(2**20), 2**20).map(lambda v: Lit("int", v)),
                st.integers(-40, 40).map(lambda k: Lit("dec", Decimal(k) / 4)),
                st.sampled_from([0.0, -0.0, 1.5]).map(lambda v: Lit("float", v)),
            ]
            if finite:
                opts += [st.sampled_from(finite).map(lambda v: Lit("float", v))] * 3
            if any(math.isnan(v) for v in pool):
                opts.append(st.just(Lit("special", "NaN")))
            return st.one_of(opts)
        if f == "dec":
            p, s = t.precision, t.scale
            smax = self.dec_scale()
            int_digits = 38 - smax

            def dec(i: int, scale: int) -> Lit:
                return Lit("dec", dec_of(i, scale)) if scale else Lit("int", i)

            def anywhere(scale: int) -> st.SearchStrategy[Lit]:
                top = 10 ** (int_digits + scale) - 1
                return st.integers(-top, top).map(lambda i: dec(i, scale))

            opts = [
                st.integers(0, smax).flatmap(anywhere),  # up to the widest DuckDB can compare
                st.builds(dec, st.integers(-(10 ** (p + 2)), 10 ** (p + 2)), st.integers(0, smax)),
                st.integers(-999, 999).map(lambda v: Lit("int", v)),
            ]
            if pool:
                opts += [st.sampled_from(pool).map(lambda v: Lit("dec", v) if s else Lit("int", int(v)))] * 3
                if smax > s:  # finer than the column: never equal but ordered exactly (d=0: trailing zeros)
                    opts.append(
                        st.builds(
                            lambda v, d: dec(int(v.scaleb(smax, _CTX)) + d, smax),
                            st.sampled_from(pool),
                            st.sampled_from([-1, 1, 0]),
                        )
                    )
            return st.one_of(opts).filter(lambda lit: _fits_dec(lit, smax))
        if f == "bool":
            return st.booleans().map(lambda v: Lit("bool", v))
        if f == "str":
            opts = [
                LITERAL_TEXT.map(lambda v: Lit("str", v)),
                st.sampled_from(COMMON_STRINGS).map(lambda v: Lit("str", v)),
            ]
            clean = [v for v in pool if "\x00" not in v]
            if clean:
                opts += [st.sampled_from(clean).map(lambda v: Lit("str", v))] * 3
                opts.append(
                    st.builds(lambda v, n: Lit("str", v[:n]), st.sampled_from(clean), st.integers(0, 3))
                )
            return st.one_of(opts)
        if f == "bin":
            opts = [st.binary(max_size=4).map(lambda v: Lit("bin", v))]
            if pool:
                opts += [st.sampled_from(pool).map(lambda v: Lit("bin", v))] * 2
            return st.one_of(opts)
        if f == "date":
            opts = [DATES.map(lambda v: Lit("date", v))]
            if pool:
                opts += [st.sampled_from(pool).map(lambda v: Lit("date", v))] * 2
            return st.one_of(opts)
        if f in ("ts", "tstz"):
            base = NAIVE_TIMES if f == "ts" else AWARE_TIMES
            opts = [base.map(lambda v: Lit("ts", v))]  # finer than a column unit: compared exactly
            if pool and f == "ts":
                opts += [st.sampled_from(pool).map(lambda v: Lit("ts", v))] * 2
            elif pool:  # the same instant, spelt with some offset
                opts += [
                    st.builds(
                        lambda v, tz: Lit("ts", v.astimezone(tz)),
                        st.sampled_from(pool),
                        st.sampled_from([UTC, *PARIS_LIKE]),
                    )
                ] * 2
            return st.one_of(opts)
        raise AssertionError(f"{self.name} is not filterable")

    def duck_compare(self, column: str, op: str, lit: Lit, lit_left: bool = False) -> str:
        """DuckDB text of ``column op lit`` with the comparison done exactly as SQL defines it."""
        col = quote(column)
        if lit.cls == "null":
            lhs, rhs = col, "NULL"
        elif self.family == "int":
            if lit.cls == "int":
                lhs, rhs = f"CAST({col} AS HUGEINT)", f"CAST('{lit.value}' AS HUGEINT)"
            elif lit.cls == "dec":
                scale = _decimal_digits(lit.value)[1]
                lhs, rhs = (
                    f"CAST({col} AS DECIMAL(38,{scale}))",
                    f"CAST('{format(lit.value, 'f')}' AS DECIMAL(38,{scale}))",
                )
            else:
                lhs, rhs = f"CAST({col} AS DOUBLE)", f"CAST('{lit.value!r}' AS DOUBLE)"
        elif self.family == "float":
            text = repr(lit.value) if lit.cls == "float" else str(lit.value)
            lhs, rhs = f"CAST({col} AS DOUBLE)", f"CAST('{text}' AS DOUBLE)"
        elif self.family == "dec":
            s = self.dec_scale()
            text = format(lit.value, "f") if lit.cls == "dec" else str(lit.value)
            lhs, rhs = f"CAST({col} AS DECIMAL(38,{s}))", f"CAST('{text}' AS DECIMAL(38,{s}))"
        elif self.family == "str":
            lhs, rhs = col, "'" + lit.value.replace("'", "''") + "'"
        elif self.family == "bool":
            lhs, rhs = col, "TRUE" if lit.value else "FALSE"
        elif self.family == "bin":
            lhs, rhs = col, f"from_hex('{lit.value.hex()}')"
        elif self.family == "date":
            lhs, rhs = col, f"DATE '{lit.value.isoformat()}'"
        elif self.family == "ts":
            lhs, rhs = col, f"CAST('{lit.value.isoformat(sep=' ')}' AS TIMESTAMP)"
        elif self.family == "tstz":
            lhs, rhs = col, f"CAST('{lit.value.isoformat(sep=' ')}' AS TIMESTAMPTZ)"
        else:
            raise AssertionError(self.family)
        return f"{rhs} {FLIP[op]} {lhs}" if lit_left else f"{lhs} {op} {rhs}"


FLIP = {"=": "=", "!=": "!=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _fits_dec(lit: Lit, smax: int) -> bool:
    if lit.cls == "int":
        return len(str(abs(lit.value))) <= 38 - smax
    digits, scale = _decimal_digits(lit.value)
    return scale <= smax and digits <= 38 - smax


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _int_kind(t: pa.DataType) -> Kind:
    return Kind(str(t), t, "int", ints_of(t))


def _dec_kind(t: pa.DataType) -> Kind:
    return Kind(str(t), t, "dec", decimals_of(t.precision, t.scale))


def _str_values() -> st.SearchStrategy[str]:
    # Repetitive (a few common values) and high-cardinality (free text) mixed.
    return st.one_of(st.sampled_from(COMMON_STRINGS), TEXT)


VALUE_KINDS: list[Kind] = [
    *(
        _int_kind(t)
        for t in (
            pa.int8(),
            pa.int16(),
            pa.int32(),
            pa.int64(),
            pa.uint8(),
            pa.uint16(),
            pa.uint32(),
            pa.uint64(),
        )
    ),
    Kind("float32", pa.float32(), "float", floats_of(32)),
    Kind("float64", pa.float64(), "float", floats_of(64)),
    *(_dec_kind(pa.decimal128(p, s)) for p, s in ((1, 0), (5, 2), (9, 9), (18, 4), (38, 0), (38, 10))),
    *(_dec_kind(pa.decimal256(p, s)) for p, s in ((20, 3), (40, 5), (76, 38))),
    Kind("bool", pa.bool_(), "bool", st.booleans()),
    Kind("string", pa.string(), "str", _str_values()),
    Kind("large_string", pa.large_string(), "str", _str_values()),
    Kind(
        "binary",
        pa.binary(),
        "bin",
        st.one_of(st.binary(max_size=6), st.sampled_from([b"", b"\x00", b"\xff" * 9])),
    ),
    Kind("date32", pa.date32(), "date", DATES),
    Kind("ts", pa.timestamp("us"), "ts", NAIVE_TIMES),
    Kind("ts_utc", pa.timestamp("us", "UTC"), "tstz", AWARE_TIMES),
    Kind("ts_paris", pa.timestamp("us", "Europe/Paris"), "tstz", AWARE_TIMES),
    # Other units in a zone: files give them back labelled UTC, and the filter's literal is in microseconds.
    Kind(
        "ts_ms_paris", pa.timestamp("ms", "Europe/Paris"), "tstz", AWARE_TIMES.map(lambda v: in_unit(v, "ms"))
    ),
    Kind("ts_s_tokyo", pa.timestamp("s", "Asia/Tokyo"), "tstz", AWARE_TIMES.map(lambda v: in_unit(v, "s"))),
    Kind("list_int32", pa.list_(pa.int32()), "nested", st.lists(nullable(ints_of(pa.int32())), max_size=4)),
    Kind("large_list_string", pa.large_list(pa.string()), "nested", st.lists(nullable(TEXT), max_size=3)),
    Kind("struct", STRUCT_AB, "nested", STRUCT_VALUES),
    Kind(
        "map",
        pa.map_(pa.string(), pa.int64()),
        "nested",
        st.lists(st.tuples(TEXT, nullable(ints_of(pa.int64()))), max_size=3, unique_by=lambda kv: kv[0]),
    ),
    Kind("list_struct", pa.list_(STRUCT_AB), "nested", st.lists(nullable(STRUCT_VALUES), max_size=3)),
]
KINDS = {k.name: k for k in VALUE_KINDS}

KEY_KINDS: list[Kind] = [
    KINDS["int64"],
    KINDS["int32"],
    KINDS["string"],
    KINDS["date32"],
    KINDS["ts"],
    KINDS["ts_utc"],
    KINDS["ts_ms_paris"],
    _dec_kind(pa.decimal128(9, 2)),
    _dec_kind(pa.decimal128(18, 0)),
    KINDS["binary"],
    KINDS["bool"],
]
PARTITION_KINDS: list[Kind] = [
    KINDS["string"],
    KINDS["int32"],
    KINDS["int8"],
    KINDS["uint16"],
    KINDS["date32"],
    KINDS["bool"],
]


def canon(values: Sequence[Any], t: pa.DataType) -> list[Any]:
    """Values as Arrow stores and returns them (decimal scale, time zone, float32 rounding, map pairs)."""
    return pa.array(list(values), type=t).to_pylist()


# -- the table as a dict ---------------------------------------------------------------------------------

UPSERT_OPS = {
    "I",
    "+I",
    "INSERT",
    "C",
    "CREATE",
    "R",
    "READ",
    "SNAPSHOT",
    "U",
    "+U",
    "UPDATE",
    "UPDATE_AFTER",
    "UPSERT",
}
DELETE_OPS = {"D", "-D", "DELETE"}
IGNORED_OPS = {"-U", "UPDATE_BEFORE"}


def change_kind(op: str) -> str:
    """'upsert', 'delete' or 'ignore' for a CDC change value (case and surrounding blanks do not matter)."""
    up = op.strip().upper()
    if up in UPSERT_OPS:
        return "upsert"
    if up in DELETE_OPS:
        return "delete"
    if up in IGNORED_OPS:
        return "ignore"
    raise ValueError(op)


@dataclass
class Outcome:
    """What a write must do: ``rows`` if it succeeds, and which typed errors it must or may raise."""

    rows: dict[tuple[Any, ...], dict[str, Any]]
    must_fail: set[str] = field(default_factory=set)  # error class names; any one of them is right
    may_fail: set[str] = field(default_factory=set)
    overflow_keys: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass
class Model:
    """A primary-key table: identity (partition values not in the key, then the key) -> row."""

    schema: pa.Schema
    primary_key: list[str]
    partition_by: list[str]
    operators: dict[str, tuple[str, str]]  # column -> (operator, concat separator)
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    @property
    def identity(self) -> list[str]:
        return [c for c in self.partition_by if c not in self.primary_key] + self.primary_key

    @property
    def not_null(self) -> list[str]:
        return [f.name for f in self.schema if not f.nullable and f.name not in self.primary_key]

    def ident(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.identity)

    def sorted_rows(self) -> list[dict[str, Any]]:
        return [self.rows[k] for k in sorted(self.rows, key=sort_key)]

    def _fold(self, column: str, old: Any, new: Any) -> Any:
        op, sep = self.operators.get(column, ("last", ""))
        if op == "last":
            return new
        if new is None:
            return old
        if old is None:
            return new
        if op == "last_non_null":
            return new
        if op == "sum":
            return old + new
        if op == "concat":
            return f"{old}{sep}{new}"
        raise AssertionError(op)

    def apply(
        self,
        rows: Sequence[Mapping[str, Any]],
        changes: Sequence[str] | None = None,
        fresh: Callable[[tuple[Any, ...]], bool] | None = None,
    ) -> Outcome:
        """Apply a batch in order without touching ``self``; ``rows`` carry only the batch's columns.

        ``fresh(identity)`` says the key starts from nothing (an overwritten partition).
        """
        state = dict(self.rows)
        if fresh is not None:
            state = {k: v for k, v in state.items() if not fresh(k)}
        present = set(rows[0]) if rows else set()
        sums = [
            f
            for f in self.schema
            if self.operators.get(f.name, ("",))[0] == "sum" and pa.types.is_integer(f.type)
        ]
        # Per key and integer sum column: the values added since the key was (re)created, oldest first.
        history: dict[tuple[tuple[Any, ...], str], list[int]] = {}
        created: set[tuple[Any, ...]] = set()
        for i, row in enumerate(rows):
            kind = "upsert" if changes is None else change_kind(changes[i])
            key = self.ident(row)
            if kind == "ignore":
                continue
            if kind == "delete":
                state.pop(key, None)
                for f in sums:
                    history.pop((key, f.name), None)
                continue
            old = state.get(key)
            if old is None:
                created.add(key)
                for f in sums:
                    history[(key, f.name)] = []
            new: dict[str, Any] = {}
            for f in self.schema:
                c = f.name
                if c in self.identity:
                    new[c] = row[c]
                elif c not in present:
                    new[c] = None if old is None else old[c]
                else:
                    new[c] = self._fold(c, None if old is None else old[c], row[c])
            for f in sums:
                if f.name in present and row[f.name] is not None:
                    seq = history.setdefault(
                        (key, f.name), [] if old is None or old[f.name] is None else [old[f.name]]
                    )
                    seq.append(row[f.name])
            state[key] = new
        out = Outcome(state)
        for f in sums:
            lo, hi = int_range(f.type)
            for (key, c), seq in history.items():
                if c != f.name or key not in state:
                    continue
                total = state[key][c]
                if total is not None and not lo <= total <= hi:
                    out.must_fail.add("SumOverflow")
                    out.overflow_keys.append(key)
                # Partial sums mere may form on the way (in batch order or pre-folded per batch).
                elif any(
                    not lo <= sum(seq[a:b]) <= hi for a in range(len(seq)) for b in range(a + 1, len(seq) + 1)
                ):
                    out.may_fail.add("SumOverflow")
        for c in self.not_null:
            if any(r[c] is None for r in state.values()):
                out.must_fail.add("SchemaMismatch")
            elif c not in present and created:
                out.may_fail.add("SchemaMismatch")  # a key created, then deleted again in the batch
        return out

    def delete_idents(self, idents: Iterable[tuple[Any, ...]]) -> None:
        for k in idents:
            self.rows.pop(k, None)

    def delete_keys(self, keys: Iterable[tuple[Any, ...]]) -> None:
        """Delete bare primary keys in whatever partition they live."""
        wanted = set(keys)
        n = len(self.primary_key)
        self.rows = {k: v for k, v in self.rows.items() if k[len(k) - n :] not in wanted}


# -- comparing rows --------------------------------------------------------------------------------------


def _sort_value(v: Any) -> tuple[Any, ...]:
    return (v is None, v if v is not None else 0)


def sort_key(ident: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_sort_value(v) for v in ident)


def norm(v: Any, zero_sign: bool = True) -> Any:
    """A canonical, repr-stable form: NaN equals NaN, aware datetimes as UTC text, -0.0 kept unless asked."""
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if v == 0 and not zero_sign:
            return 0.0
        return v if v != 0 else ("-0.0" if math.copysign(1, v) < 0 else 0.0)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(UTC).isoformat() + "@tz"
    if isinstance(v, dict):
        return tuple((k, norm(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return tuple(norm(x) for x in v)
    return v


def canon_rows(
    rows: Iterable[Mapping[str, Any]], columns: Sequence[str], signless: Iterable[str] = ()
) -> list[tuple[Any, ...]]:
    """Rows as sorted tuples of normalised values (a multiset), for order-free comparison."""
    loose = set(signless)
    out = [tuple(norm(r[c], c not in loose) for c in columns) for r in rows]
    return sorted(out, key=repr)


def diff(
    got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], columns: Sequence[str], limit: int = 4
) -> str:
    """Readable difference of two canon_rows results ('' when equal)."""
    if got == want:
        return ""
    g, w = Counter(map(repr, got)), Counter(map(repr, want))
    extra, missing = list((g - w).elements()), list((w - g).elements())
    return (
        f"columns {list(columns)}: got {len(got)} rows, want {len(want)}; "
        f"unexpected {extra[:limit]}{' ...' if len(extra) > limit else ''}; "
        f"missing {missing[:limit]}{' ...' if len(missing) > limit else ''}"
    )


# -- DuckDB ----------------------------------------------------------------------------------------------


def duck_type(t: pa.DataType) -> pa.DataType:
    """The type DuckDB loads a column as (it has no decimal256)."""
    if pa.types.is_decimal256(t):
        return pa.decimal128(t.precision, t.scale)
    return t


def duck_select(
    con: duckdb.DuckDBPyConnection, schema: pa.Schema, rows: Sequence[Mapping[str, Any]], where: str
) -> list[int]:
    """Indexes of ``rows`` for which DuckDB finds ``where`` TRUE (scalar, DuckDB-loadable columns only)."""
    fields = [pa.field(f.name, duck_type(f.type)) for f in schema]
    data = {f.name: pa.array([r[f.name] for r in rows], type=f.type) for f in fields}
    data["__rid"] = pa.array(range(len(rows)), type=pa.int64())
    table = pa.table(data)
    con.register("oracle_rows", table)
    try:
        return [r[0] for r in con.execute(f"SELECT __rid FROM oracle_rows WHERE {where}").fetchall()]
    finally:
        con.unregister("oracle_rows")


def duck_connect() -> duckdb.DuckDBPyConnection:
    # One thread: cheaper for tiny tables and no nondeterminism; UTC so nothing depends on the host zone.
    con = duckdb.connect(":memory:", config={"threads": "1"})
    con.execute("SET TimeZone = 'UTC'")
    return con
