"""Differential test: mere against a dict model of the table and DuckDB as the filter oracle.

Hypothesis draws a whole table definition (every column type the schema accepts, every key type,
partitions with NULL values, 1..8 buckets, merge operators, a CDC column, NOT NULL columns, tiny row
groups and read windows), then runs random writes against mere and against ``oracle.Model`` at once:
full and partial upserts (with lossless input casts), CDC batches, deletes by keys and by filter,
overwrites of the table or one partition, compactions, and bad input that must be rejected without
changing anything. After every step it reads back the full table, a random projection, a random
filter (evaluated by DuckDB over the model's rows) and an earlier version, and compares them all.

The semantics tested are the documented, intended ones (README "Semantics worth knowing",
docs/concepts.md, and the filter/cast/overflow rules in ``oracle``), not whatever the code does today.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import mere
from mere import errors
from oracle import (
    FLIP,
    KEY_KINDS,
    KINDS,
    PARTITION_KINDS,
    VALUE_KINDS,
    Kind,
    Lit,
    Model,
    Outcome,
    canon,
    canon_rows,
    dec_of,
    diff,
    duck_connect,
    duck_select,
    dyadic_floats,
    int_range,
    norm,
    nullable,
    quote,
    sort_key,
)

# These tables are small: their splits would read dictionary pages plain; here they take the dictionary path.
pytestmark = pytest.mark.usefixtures("strings_read_as_dictionaries")


CDC_COLUMN = "cdc_op"
UPSERT_SPELLINGS = ["I", "U", "+I", "+U", "c", "u", "r", "insert", "update", " U ", "Update"]
DELETE_SPELLINGS = ["D", "-D", "d", "delete"]
IGNORE_SPELLINGS = ["-U", "update_before"]
SEPARATORS = ["", "|", ", ", "→", "'"]
TINY_IO = [{}, {"write.row-group-rows": "2", "read.window-bytes": "300"}, {"write.row-group-rows": "3"}]


# -- table definitions -----------------------------------------------------------------------------------


@dataclass
class Column:
    name: str
    kind: Kind
    nullable: bool = True
    values: st.SearchStrategy[Any] | None = None  # overrides kind.values (sum columns)

    @property
    def field(self) -> pa.Field:
        return pa.field(self.name, self.kind.type, nullable=self.nullable)

    def __repr__(self) -> str:
        return f"{self.name}: {self.kind.type}{'' if self.nullable else ' not null'}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis prints failing examples with this
        p.text(repr(self))

    def strategy(self) -> st.SearchStrategy[Any]:
        base = self.values if self.values is not None else self.kind.values
        return nullable(base) if self.nullable else base


@dataclass
class TableDef:
    columns: list[Column]
    primary_key: list[str]
    partition_by: list[str]
    buckets: int
    operators: dict[str, str]  # mere's spelling, e.g. "concat:|"
    cdc: bool
    cdc_in_schema: bool
    properties: dict[str, str]
    pools: dict[str, list[Any]] = field(default_factory=dict)  # identity column -> values rows use

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([c.field for c in self.columns])

    def __repr__(self) -> str:  # what a failing example needs to be rebuilt by hand
        return (
            f"TableDef(schema={self.columns}, primary_key={self.primary_key}, partition_by={self.partition_by}, "
            f"buckets={self.buckets}, merge_operators={self.operators}, "
            f"cdc_column={CDC_COLUMN if self.cdc else None}, properties={self.properties}, pools={self.pools})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))

    def col(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def identity(self) -> list[str]:
        return [c for c in self.partition_by if c not in self.primary_key] + self.primary_key

    @property
    def value_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.name not in self.identity]

    def model(self) -> Model:
        ops = {}
        for c, spelt in self.operators.items():
            name, _, sep = spelt.partition(":")
            ops[c] = (name, sep)
        return Model(self.schema, list(self.primary_key), list(self.partition_by), ops)

    def signless(self) -> list[str]:
        """Float sum columns: whether a fold starts from +0.0 is not specified, so -0.0 == 0.0 there."""
        return [c for c, op in self.operators.items() if op == "sum" and self.col(c).kind.family == "float"]

    def create(self, cat: mere.Catalog, name: str) -> mere.Table:
        schema = self.schema
        if self.cdc_in_schema:
            schema = schema.append(pa.field(CDC_COLUMN, pa.string()))
        return cat.create_table(
            name,
            schema,
            primary_key=self.primary_key,
            partition_by=self.partition_by,
            buckets=self.buckets,
            merge_operators=self.operators,
            cdc_column=CDC_COLUMN if self.cdc else None,
            properties=self.properties,
            # The oracle identifies rows by partition values and key (tests/test_key_scope.py covers keys
            # that move between partitions).
            key_scope="partition" if self.primary_key else None,
        )


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def _sum_values(kind: Kind) -> st.SearchStrategy[Any]:
    """Mostly small addends, sometimes the type's edges, so that sums overflow now and then."""
    if kind.family == "float":
        return dyadic_floats()
    lo, hi = int_range(kind.type)
    small = st.integers(max(lo, -5), 5)
    return st.one_of(small, small, small, st.sampled_from(sorted({hi, hi // 2 + 1, lo, lo // 2})))


def _pool(draw: st.DrawFn, kind: Kind, size: int) -> list[Any]:
    values = draw(st.lists(kind.values, min_size=1, max_size=size))
    out = []
    for v in canon(values, kind.type):
        if v not in out:
            out.append(v)
    return out


@st.composite
def table_defs(draw: st.DrawFn) -> TableDef:
    keys = [
        Column(f"k{i}", k, nullable=False)
        for i, k in enumerate(draw(st.lists(st.sampled_from(KEY_KINDS), min_size=1, max_size=2)))
    ]
    mode = draw(st.sampled_from(["none", "one", "one", "two", "key"]))
    parts: list[Column] = []
    if mode == "key" and keys[0].kind.partition_ok:
        partition_by = [keys[0].name]
    else:
        n = {"none": 0, "one": 1, "two": 2, "key": 1}[mode]
        parts = [
            Column(f"p{i}", k)
            for i, k in enumerate(draw(st.lists(st.sampled_from(PARTITION_KINDS), min_size=n, max_size=n)))
        ]
        partition_by = [p.name for p in parts]
    kinds = draw(st.lists(st.sampled_from(VALUE_KINDS), min_size=1, max_size=7))
    values = [Column(f"v{i}_{_slug(k.name)}", k) for i, k in enumerate(kinds)]
    if draw(st.booleans()):
        values[0].name = "odd name"  # needs quoting in filters
    operators: dict[str, str] = {}
    for c in values:
        choices = ["last", "last", "last_non_null"]
        choices += ["sum", "sum"] if c.kind.sum_ok else []
        choices += ["concat"] if c.kind.concat_ok else []
        op = draw(st.sampled_from(choices))
        if op == "sum":
            c.values = _sum_values(c.kind)
        if op == "concat":
            op = f"concat:{draw(st.sampled_from(SEPARATORS))}"
        if op != "last":
            operators[c.name] = op
    if draw(st.integers(0, 3)) == 0:
        values[draw(st.integers(0, len(values) - 1))].nullable = False
    columns = draw(st.permutations(keys + parts + values))
    cdc = draw(st.booleans())
    tdef = TableDef(
        list(columns),
        [k.name for k in keys],
        partition_by,
        draw(st.integers(1, 8)),
        operators,
        cdc=cdc,
        cdc_in_schema=cdc and draw(st.booleans()),
        properties=dict(draw(st.sampled_from(TINY_IO))),
    )
    for k in keys:
        tdef.pools[k.name] = [False, True] if k.kind.family == "bool" else _pool(draw, k.kind, 6)
    for p in parts:
        tdef.pools[p.name] = [*_pool(draw, p.kind, 3), None]
    return tdef


# -- batches ---------------------------------------------------------------------------------------------


def lossless_alternative(kind: Kind, values: list[Any]) -> st.SearchStrategy[pa.Array | None]:
    """Other input types mere must accept for these values (casts that lose nothing)."""
    t = kind.type
    present = [v for v in values if v is not None]
    options: list[pa.Array | None] = [None]
    if kind.family == "int":
        for other in (
            pa.int8(),
            pa.int16(),
            pa.int32(),
            pa.int64(),
            pa.uint8(),
            pa.uint16(),
            pa.uint32(),
            pa.uint64(),
        ):
            lo, hi = int_range(other)
            if other != t and all(lo <= v <= hi for v in present):
                options.append(pa.array(values, other))
    elif kind.family == "float":
        limit = 2**24 if t == pa.float32() else 2**53
        if all(
            math.isfinite(v) and v == int(v) and abs(v) <= limit and math.copysign(1, v) > 0 for v in present
        ):
            options.append(pa.array([None if v is None else int(v) for v in values], pa.int64()))
    elif t == pa.large_string():
        options.append(pa.array(values, pa.string()))
    elif t == pa.string():
        options.append(pa.array(values, pa.string()).dictionary_encode())
    return st.sampled_from(options)


@dataclass
class Batch:
    table: pa.Table
    rows: list[dict[str, Any]]  # canonical values of the batch's columns, for the model
    changes: list[str] | None = None


@st.composite
def batches(
    draw: st.DrawFn,
    tdef: TableDef,
    columns: list[str],
    max_rows: int = 8,
    cdc: bool = False,
    fixed: dict[str, Any] | None = None,
    min_rows: int = 0,
) -> Batch:
    """Rows over ``columns`` (identity columns always included); ``fixed`` pins some identity values."""
    fixed = fixed or {}
    names = [c.name for c in tdef.columns if c.name in tdef.identity or c.name in columns]
    n = draw(st.integers(max(min_rows, int(cdc)), max_rows))
    raw: dict[str, list[Any]] = {}
    for name in names:
        if name in fixed:
            raw[name] = [fixed[name]] * n
        elif name in tdef.identity:
            raw[name] = draw(st.lists(st.sampled_from(tdef.pools[name]), min_size=n, max_size=n))
        else:
            raw[name] = draw(st.lists(tdef.col(name).strategy(), min_size=n, max_size=n))
    changes = None
    if cdc:
        changes = draw(
            st.lists(
                st.one_of(
                    st.sampled_from(UPSERT_SPELLINGS),
                    st.sampled_from(DELETE_SPELLINGS),
                    st.sampled_from(IGNORE_SPELLINGS),
                ),
                min_size=n,
                max_size=n,
            )
        )
        # A delete carries only its key: its other values may be null, NOT NULL columns included.
        for name in names:
            if not tdef.col(name).nullable and name not in tdef.identity and draw(st.booleans()):
                raw[name] = [None if c in DELETE_SPELLINGS else v for c, v in zip(changes, raw[name])]
    arrays = {}
    model_cols = {}
    for name in names:
        kind = tdef.col(name).kind
        alt = draw(lossless_alternative(kind, raw[name]))
        arrays[name] = alt if alt is not None else pa.array(raw[name], kind.type)
        model_cols[name] = canon(raw[name], kind.type)
    if changes is not None:
        arrays[CDC_COLUMN] = pa.array(changes, pa.string())
    rows = [{name: model_cols[name][i] for name in names} for i in range(n)]
    order = draw(st.permutations(list(arrays)))  # input column order must not matter
    return Batch(pa.table({c: arrays[c] for c in order}), rows, changes)


# -- filters ---------------------------------------------------------------------------------------------


@dataclass
class Filter:
    mere: str
    duck: str


OPS = ["=", "!=", "<>", "<", "<=", ">", ">="]


@st.composite
def atoms(draw: st.DrawFn, tdef: TableDef, pools: dict[str, list[Any]], kw: Callable[[str], str]) -> Filter:
    cols = [c for c in tdef.columns if c.kind.filterable]
    weights = [c for c in cols if c.name in tdef.identity] * 2 + cols  # key/partition filters prune
    c = draw(st.sampled_from(weights))
    kind = c.kind
    ident = quote(c.name) if c.name == "odd name" or draw(st.booleans()) else c.name
    lits = kind.literals(pools.get(c.name, []))
    shape = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "between", "null", "const"]))
    if shape == "cmp":
        op, lit, left = draw(st.sampled_from(OPS)), draw(lits), draw(st.integers(0, 4)) == 0
        text = f"{lit.mere()} {FLIP[op]} {ident}" if left else f"{ident} {op} {lit.mere()}"
        return Filter(text, kind.duck_compare(c.name, op, lit, lit_left=left))
    if shape == "in":
        values = draw(st.lists(st.one_of(lits, st.just(Lit("null", None))), max_size=4))
        negated = draw(st.booleans())
        text = f"{ident} {kw('NOT IN') if negated else kw('IN')} ({', '.join(v.mere() for v in values)})"
        duck = " OR ".join(f"({kind.duck_compare(c.name, '=', v)})" for v in values) or "FALSE"
        return Filter(text, f"(NOT ({duck}))" if negated else f"({duck})")
    if shape == "between":
        lo, hi, negated = draw(lits), draw(lits), draw(st.booleans())
        text = (
            f"{ident} {kw('NOT BETWEEN') if negated else kw('BETWEEN')} {lo.mere()} {kw('AND')} {hi.mere()}"
        )
        duck = f"(({kind.duck_compare(c.name, '>=', lo)}) AND ({kind.duck_compare(c.name, '<=', hi)}))"
        return Filter(text, f"(NOT {duck})" if negated else duck)
    if shape == "null":
        negated = draw(st.booleans())
        return Filter(
            f"{ident} {kw('IS NOT NULL') if negated else kw('IS NULL')}",
            f"({quote(c.name)} IS {'NOT ' if negated else ''}NULL)",
        )
    value = draw(st.booleans())
    return Filter(kw("TRUE" if value else "FALSE"), "TRUE" if value else "FALSE")


@st.composite
def filters(
    draw: st.DrawFn,
    tdef: TableDef,
    pools: dict[str, list[Any]],
    depth: int = 0,
    style: tuple[bool, bool] | None = None,
) -> Filter:
    """A random filter; mere gets SQL-like text (keywords in random case, minimal or full parentheses)."""
    lower, full_parens = style if style is not None else (draw(st.booleans()), draw(st.booleans()))

    def kw(word: str) -> str:
        return word.lower() if lower else word

    if depth >= 2 or draw(st.integers(0, 2)) > 0:
        return draw(atoms(tdef, pools, kw))
    shape = draw(st.sampled_from(["and", "or", "not"]))
    left = draw(filters(tdef, pools, depth + 1, (lower, full_parens)))
    if shape == "not":
        return Filter(f"{kw('NOT')} ({left.mere})", f"(NOT ({left.duck}))")
    right = draw(filters(tdef, pools, depth + 1, (lower, full_parens)))
    word = kw(shape.upper())
    # Parentheses are always needed around OR inside AND; full_parens adds the redundant ones too.
    wrap = full_parens or shape == "and"
    lt, rt = (f"({x.mere})" if wrap else x.mere for x in (left, right))
    return Filter(f"{lt} {word} {rt}", f"(({left.duck}) {shape.upper()} ({right.duck}))")


def value_pools(tdef: TableDef, rows: list[dict[str, Any]], limit: int = 25) -> dict[str, list[Any]]:
    """Distinct non-null values each filterable column holds, for literals that hit rows."""
    pools: dict[str, list[Any]] = {}
    for c in tdef.columns:
        if not c.kind.filterable:
            continue
        seen: list[Any] = []
        for r in rows:
            v = r[c.name]
            if v is not None and v not in seen and not (isinstance(v, float) and math.isnan(v)):
                seen.append(v)
                if len(seen) >= limit:
                    break
        if any(isinstance(r[c.name], float) and math.isnan(r[c.name]) for r in rows):
            seen.append(math.nan)
        pools[c.name] = seen
    return pools


def duck_schema(tdef: TableDef) -> pa.Schema:
    return pa.schema([c.field for c in tdef.columns if c.kind.filterable])


# -- reads -----------------------------------------------------------------------------------------------


def assert_rows(
    got: pa.Table, want: list[dict[str, Any]], columns: list[str], tdef: TableDef, what: str
) -> None:
    signless = tdef.signless()
    problem = diff(
        canon_rows(got.to_pylist(), columns, signless), canon_rows(want, columns, signless), columns
    )
    assert not problem, f"{what}: {problem}"


# -- the state machine -----------------------------------------------------------------------------------


class DifferentialMachine(RuleBasedStateMachine):
    """One random table per example; every step writes to mere and the model, then reads everything back."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mere-diff-")
        self.cat = mere.connect(self.dir)
        self.duck = duck_connect()
        self.snapshots: dict[int, dict[tuple[Any, ...], dict[str, Any]]] = {}

    def teardown(self) -> None:
        self.duck.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(tdef=table_defs())
    def create(self, tdef: TableDef) -> None:
        self.tdef = tdef
        self.t = tdef.create(self.cat, "diff.t")
        self.model = tdef.model()
        self.snapshots[self.t.version] = dict(self.model.rows)

    # -- helpers -----------------------------------------------------------------------------------

    def _write(self, what: str, call: Callable[[], Any], outcome: Outcome | None) -> None:
        """Run a write; it must succeed (and then the model moves on) or raise one of the allowed errors."""
        before = self.t.version
        allowed = set() if outcome is None else outcome.must_fail | outcome.may_fail
        try:
            result = call()
        except mere.MereError as e:
            assert allowed, f"{what} raised {type(e).__name__}: {e}"
            assert any(isinstance(e, getattr(errors, name)) for name in allowed), (
                f"{what} raised {type(e).__name__}: {e}; expected one of {sorted(allowed)}"
            )
            assert self.t.version == before, f"{what} failed but committed a version"
            if (
                outcome is not None
                and "SumOverflow" in outcome.must_fail
                and isinstance(e, errors.SumOverflow)
            ):
                self._check_names_key(e, outcome)
            return
        assert outcome is None or not outcome.must_fail, (
            f"{what} should have raised {sorted(outcome.must_fail)}; it committed version {self.t.version}"
        )
        if isinstance(result, mere.CommitResult) and result.no_change:  # nothing to write: no version
            assert self.t.version == before and result.version == before, f"{what}: {result}"
            assert outcome is None or outcome.rows == self.model.rows, f"{what} changed nothing, rows differ"
        else:  # one version, then any the table's automatic compaction made (they change no row)
            ops = [c.operation for c in self.t.history() if c.version > before]
            assert ops and ops[0] != "compact" and set(ops[1:]) <= {"compact"}, f"{what}: {before} -> {ops}"
        if outcome is not None:
            self.model.rows = outcome.rows
        self.snapshots[self.t.version] = dict(self.model.rows)

    def _check_names_key(self, e: Exception, outcome: Outcome) -> None:
        n = len(self.tdef.primary_key)
        keys = [k[-n:] for k in outcome.overflow_keys]
        # Only keys whose text is unambiguous (dates, bytes or decimals could be spelt many ways).
        if keys and all(isinstance(v, int | str) and not isinstance(v, bool) for k in keys for v in k):
            assert any(all(str(v) in str(e) or repr(v) in str(e) for v in k) for k in keys), (
                f"SumOverflow should name the key, one of {keys[:3]}: {e}"
            )

    # -- writes ------------------------------------------------------------------------------------

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        values = self.tdef.value_columns
        partial = data.draw(st.booleans(), label="partial")
        cols = (
            data.draw(st.lists(st.sampled_from(values), unique=True), label="columns") if partial else values
        )
        # Now and then a batch big enough for many row groups and read windows (with TINY_IO).
        batch = data.draw(
            batches(self.tdef, cols, max_rows=data.draw(st.sampled_from([8, 8, 8, 40])), min_rows=1)
        )
        outcome = self.model.apply(batch.rows)
        self._write("upsert", lambda: self.t.upsert(batch.table), outcome)
        self.check(data)

    @rule(data=st.data())
    def cdc(self, data: st.DataObject) -> None:
        if not self.tdef.cdc:
            return self.upsert(data)
        values = self.tdef.value_columns
        cols = data.draw(
            st.one_of(st.just(values), st.lists(st.sampled_from(values), unique=True)), label="columns"
        )
        batch = data.draw(batches(self.tdef, cols, max_rows=10, cdc=True))
        outcome = self.model.apply(batch.rows, batch.changes)
        self._write("cdc upsert", lambda: self.t.upsert(batch.table), outcome)
        self.check(data)
        return None

    @rule(data=st.data())
    def delete_keys(self, data: st.DataObject) -> None:
        bare = len(self.tdef.identity) > len(self.tdef.primary_key) and data.draw(
            st.booleans(), label="bare keys"
        )
        cols = self.tdef.primary_key if bare else self.tdef.identity
        n = data.draw(st.integers(0, 5))
        keys = [tuple(data.draw(st.sampled_from(self.tdef.pools[c])) for c in cols) for _ in range(n)]
        arrays = {}
        for i, c in enumerate(cols):
            kind = self.tdef.col(c).kind
            values = [k[i] for k in keys]
            alt = data.draw(lossless_alternative(kind, values))
            arrays[c] = alt if alt is not None else pa.array(values, kind.type)
        self._write(f"delete keys {keys}", lambda: self.t.delete(pa.table(arrays)), None)
        if bare:
            self.model.delete_keys(keys)
        else:
            self.model.delete_idents(keys)
        self.snapshots[self.t.version] = dict(self.model.rows)
        self.check(data)

    @rule(data=st.data())
    def delete_where(self, data: st.DataObject) -> None:
        rows = self.model.sorted_rows()
        f = data.draw(filters(self.tdef, value_pools(self.tdef, rows)), label="filter")
        hit = duck_select(self.duck, duck_schema(self.tdef), rows, f.duck)
        self._write(f"delete {f.mere!r}", lambda: self.t.delete(f.mere), None)
        self.model.delete_idents(self.model.ident(rows[i]) for i in hit)
        self.snapshots[self.t.version] = dict(self.model.rows)
        self.check(data)

    @rule(data=st.data())
    def overwrite(self, data: st.DataObject) -> None:
        tdef = self.tdef
        fixed: dict[str, Any] = {}
        if tdef.partition_by and data.draw(st.booleans(), label="one partition"):
            names = data.draw(st.lists(st.sampled_from(tdef.partition_by), min_size=1, unique=True))
            fixed = {c: data.draw(st.sampled_from(tdef.pools[c])) for c in names}
        # Columns left out of an overwrite are null (NOT NULL ones must be there, or it is rejected).
        dropped = (
            data.draw(st.lists(st.sampled_from(tdef.value_columns), unique=True, max_size=2))
            if data.draw(st.integers(0, 3)) == 0
            else []
        )
        cols = [c for c in tdef.value_columns if c not in dropped]
        batch = data.draw(batches(tdef, cols, fixed=fixed))
        full = [{**{c: None for c in dropped}, **r} for r in batch.rows]
        where = {tdef.identity.index(c): v for c, v in fixed.items()}
        outcome = self.model.apply(full, fresh=lambda k: all(k[i] == v for i, v in where.items()))
        if not batch.rows:
            outcome.must_fail.discard("SchemaMismatch")
        if any(not tdef.col(c).nullable for c in dropped):
            outcome.must_fail.add("SchemaMismatch")
        self._write(
            f"overwrite {fixed or 'all'}",
            lambda: self.t.overwrite(batch.table, partition=fixed or None),
            outcome,
        )
        self.check(data)

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        min_files = data.draw(st.integers(1, 3), label="min_files")
        partition = None
        if self.tdef.partition_by and data.draw(st.booleans()):
            c = data.draw(st.sampled_from(self.tdef.partition_by))
            partition = {c: data.draw(st.sampled_from(self.tdef.pools[c]))}
        before = self.t.version
        result = self.t.compact(min_files=min_files, partition=partition)
        assert (result is None) == (self.t.version == before)
        self.snapshots[self.t.version] = dict(self.model.rows)
        self.check(data)

    @rule(data=st.data())
    def bad_input(self, data: st.DataObject) -> None:
        case = data.draw(bad_writes(self.tdef, self.model), label="bad input")
        before_version, before_rows = self.t.version, self._rows()
        try:
            case.call(self.t)
        except mere.MereError as e:
            assert isinstance(e, case.error), (
                f"{case.name}: expected {case.error.__name__}, got {type(e).__name__}: {e}"
            )
        except Exception as e:
            raise AssertionError(f"{case.name}: {type(e).__name__} is not a MereError: {e}") from e
        else:
            raise AssertionError(
                f"{case.name}: nothing raised (version {before_version} -> {self.t.version})"
            )
        assert self.t.version == before_version, f"{case.name}: committed version {self.t.version}"
        assert self._rows() == before_rows, f"{case.name}: rows changed"
        self.check(data)

    # -- reads -------------------------------------------------------------------------------------

    def _rows(self) -> list[tuple[Any, ...]]:
        return canon_rows(self.t.scan().to_arrow().to_pylist(), self.t.schema.names)

    def check(self, data: st.DataObject) -> None:
        tdef, t = self.tdef, self.t
        want = self.model.sorted_rows()
        names = [c.name for c in tdef.columns]
        assert t.version in self.snapshots

        full = t.scan().to_arrow()  # also proves every file written so far is readable
        assert full.schema.equals(t.schema), f"scan schema {full.schema} != table schema {t.schema}"
        assert_rows(full, want, names, tdef, "full scan")

        cols = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=4), label="projection")
        projected = t.scan(columns=cols).to_arrow()
        assert projected.schema.names == cols
        assert projected.num_rows == len(want), (
            f"projection {cols}: {projected.num_rows} rows, want {len(want)}"
        )
        assert_rows(projected, want, cols, tdef, f"projection {cols}")
        if not cols:  # the streaming path counts rows without any column
            assert t.scan(columns=[]).count() == len(want)

        f = data.draw(filters(tdef, value_pools(tdef, want)), label="filter")
        cols = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(names), unique=True)), label="columns")
        hit = duck_select(self.duck, duck_schema(tdef), want, f.duck)
        got = t.scan(columns=cols, filter=f.mere).to_arrow()
        out_cols = names if cols is None else cols
        assert_rows(got, [want[i] for i in hit], out_cols, tdef, f"filter {f.mere!r} (DuckDB: {f.duck})")

        older = [v for v in self.snapshots if v < t.version]
        if older:
            v = data.draw(st.sampled_from(older), label="version")
            rows = [self.snapshots[v][k] for k in sorted(self.snapshots[v], key=sort_key)]
            assert_rows(t.scan(version=v).to_arrow(), rows, names, tdef, f"time travel to version {v}")
            if data.draw(st.booleans()):  # an old version, filtered
                f = data.draw(filters(tdef, value_pools(tdef, rows)), label="old filter")
                hit = duck_select(self.duck, duck_schema(tdef), rows, f.duck)
                assert_rows(
                    t.scan(version=v, filter=f.mere).to_arrow(),
                    [rows[i] for i in hit],
                    names,
                    tdef,
                    f"version {v} with filter {f.mere!r} (DuckDB: {f.duck})",
                )


# -- bad input -------------------------------------------------------------------------------------------


@dataclass
class BadWrite:
    name: str
    call: Callable[[mere.Table], Any]
    error: type[Exception]


def _good_rows(draw: st.DrawFn, tdef: TableDef, n: int) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for c in tdef.columns:
        if c.name in tdef.identity:
            out[c.name] = draw(st.lists(st.sampled_from(tdef.pools[c.name]), min_size=n, max_size=n))
        elif tdef.operators.get(c.name) == "sum" and c.kind.family == "int":
            out[c.name] = [
                None if c.nullable else 0
            ] * n  # never an overflow: the case must fail for its own reason
        else:
            out[c.name] = draw(st.lists(c.strategy(), min_size=n, max_size=n))
    return out


def _typed(tdef: TableDef, raw: dict[str, list[Any]]) -> dict[str, pa.Array]:
    return {c: pa.array(v, tdef.col(c).kind.type) for c, v in raw.items()}


def wrong_values(kind: Kind) -> list[tuple[str, pa.Array]]:
    """Arrays that must not be cast into a column of ``kind`` (documented rules, plus values that do not fit)."""
    t, f = kind.type, kind.family
    out: list[tuple[str, pa.Array]] = []
    if f == "int":
        lo, hi = int_range(t)
        out += [
            ("numeric string", pa.array(["12"])),
            ("text", pa.array(["abc"])),
            ("bool", pa.array([True])),
            ("fraction", pa.array([1.5])),
        ]
        if lo > -(2**63):
            out.append(("too small", pa.array([lo - 1], pa.int64())))
        if hi < 2**63 - 1:
            out.append(("too big", pa.array([hi + 1], pa.uint64())))
    elif f == "float":
        inexact = 2**24 + 1 if t == pa.float32() else 2**53 + 1
        out += [
            ("numeric string", pa.array(["12.5"])),
            ("NaN string", pa.array(["NaN"])),
            ("inexact int", pa.array([inexact], pa.int64())),
            ("bool", pa.array([True])),
        ]
    elif f == "dec":
        p, s = t.precision, t.scale
        out.append(("numeric string", pa.array(["1.5"])))
        if p - s < 76:
            out.append(("too many digits", pa.array([10 ** (p - s)], pa.decimal256(p - s + 1, 0))))
        if p < 76:
            wider = pa.decimal128(p + 1, s + 1) if p < 38 else pa.decimal256(p + 1, s + 1)
            out.append(("finer scale", pa.array([dec_of(1, s + 1)], wider)))
    elif f == "bool":
        out += [("int", pa.array([1])), ("text", pa.array(["true"]))]
    elif f == "str":
        out += [("int", pa.array([5])), ("float", pa.array([1.5]))]
    elif f == "bin":
        out += [("int", pa.array([5]))]
    elif f == "date":
        out += [
            ("date string", pa.array(["2026-11-02"])),
            ("timestamp with time", pa.array([dt.datetime(2026, 11, 2, 12)], pa.timestamp("us"))),
        ]
    elif f == "ts":
        out += [("timestamp string", pa.array(["2026-11-02 00:00:00"])), ("int", pa.array([5]))]
    elif f == "tstz":
        out += [
            ("naive timestamp", pa.array([dt.datetime(2026, 11, 2)], pa.timestamp("us"))),
            ("timestamp string", pa.array(["2026-11-02 00:00:00+00:00"])),
        ]
    elif kind.name == "list_int32":
        out += [
            ("list of too-big ints", pa.array([[2**40]], pa.list_(pa.int64()))),
            ("list of strings", pa.array([["x"]], pa.list_(pa.string()))),
        ]
    elif kind.name == "struct":
        out += [("struct with a string a", pa.array([{"a": "x", "b": "y"}]))]
    return out


@st.composite
def bad_writes(draw: st.DrawFn, tdef: TableDef, model: Model) -> BadWrite:
    n = draw(st.integers(1, 3))
    raw = _good_rows(draw, tdef, n)
    arrays = _typed(tdef, raw)
    cases: list[BadWrite] = []

    def upsert(name: str, cols: dict[str, pa.Array], error: type[Exception]) -> None:
        table = pa.table(cols)
        cases.append(BadWrite(name, lambda t: t.upsert(table), error))

    for c in tdef.columns:
        for what, one in wrong_values(c.kind):
            bad = dict(arrays)
            bad[c.name] = pa.concat_arrays([one] * n) if len(one) == 1 else one
            upsert(f"{what} into {c.name} ({c.kind.type})", bad, errors.SchemaMismatch)
            # The same, with the bad column alone (a partial upsert).
            upsert(
                f"{what} into {c.name} ({c.kind.type}), partial",
                {k: v for k, v in bad.items() if k in tdef.identity or k == c.name},
                errors.SchemaMismatch,
            )
    for k in tdef.primary_key:
        bad = dict(arrays)
        bad[k] = pa.array([None] * n, tdef.col(k).kind.type)
        upsert(f"null key {k}", bad, errors.NullKey)
        upsert(f"missing key {k}", {c: v for c, v in arrays.items() if c != k}, errors.SchemaMismatch)
        cases.append(
            BadWrite(
                f"delete keys with a null {k}",
                lambda t, bad=bad: t.delete(pa.table({c: bad[c] for c in tdef.identity})),
                errors.NullKey,
            )
        )
    for p in tdef.partition_by:
        if p not in tdef.primary_key:
            upsert(
                f"missing partition column {p}",
                {c: v for c, v in arrays.items() if c != p},
                errors.SchemaMismatch,
            )
    for c in tdef.columns:
        if not c.nullable and c.name not in tdef.primary_key:
            bad = dict(arrays)
            bad[c.name] = pa.array([None] * n, c.kind.type)
            upsert(f"null in NOT NULL {c.name}", bad, errors.SchemaMismatch)
            cases.append(
                BadWrite(
                    f"overwrite without NOT NULL {c.name}",
                    lambda t, name=c.name: t.overwrite(
                        pa.table({k: v for k, v in arrays.items() if k != name})
                    ),
                    errors.SchemaMismatch,
                )
            )
    upsert("unknown column", {**arrays, "no_such_column": pa.array([1] * n)}, errors.SchemaMismatch)
    if tdef.cdc:
        upsert("unknown change", {**arrays, CDC_COLUMN: pa.array(["X"] * n)}, errors.InvalidInput)
        upsert("null change", {**arrays, CDC_COLUMN: pa.array([None] * n, pa.string())}, errors.InvalidInput)
    cases.append(BadWrite("delete(None)", lambda t: t.delete(None), mere.MereError))
    ints = [c for c in tdef.columns if c.kind.family == "int" and c.kind.filterable]
    if ints:
        cases.append(
            BadWrite(
                "delete with a text literal for an int column",
                lambda t: t.delete(f"{quote(ints[0].name)} = 'abc'"),
                errors.FilterError,
            )
        )
    # Two rows of a partition overwrite that belong to another partition.
    parts = [p for p in tdef.partition_by if len([v for v in tdef.pools[p]]) > 1]
    if parts:
        p = parts[0]
        a, b = tdef.pools[p][0], tdef.pools[p][1]
        bad = dict(raw)
        bad[p] = [b] * n
        table = pa.table(_typed(tdef, bad))
        cases.append(
            BadWrite(
                f"overwrite {p}={a!r} with rows of {p}={b!r}",
                lambda t: t.overwrite(table, partition={p: a}),
                errors.InvalidInput,
            )
        )
    # A sum that leaves its integer type, with the existing state counted in.
    for c in tdef.columns:
        if tdef.operators.get(c.name) == "sum" and c.kind.family == "int":
            hi = int_range(c.kind.type)[1]
            rows = {k: [v[0]] * 3 for k, v in raw.items()}
            rows[c.name] = [hi] * 3
            outcome = model.apply(
                [{k: canon(v, tdef.col(k).kind.type)[i] for k, v in rows.items()} for i in range(3)]
            )
            if "SumOverflow" in outcome.must_fail:
                upsert(f"sum overflow in {c.name}", _typed(tdef, rows), errors.SumOverflow)
    # A bad row in the second record batch of a stream: nothing of the first may land.
    if tdef.primary_key:
        k = tdef.primary_key[0]
        bad = dict(arrays)
        bad[k] = pa.array([None] * n, tdef.col(k).kind.type)
        good_t, bad_t = pa.table(arrays), pa.table(bad)
        cases.append(
            BadWrite(
                "null key in a later batch",
                lambda t: t.upsert(
                    pa.RecordBatchReader.from_batches(good_t.schema, good_t.to_batches() + bad_t.to_batches())
                ),
                errors.NullKey,
            )
        )
    return draw(st.sampled_from(cases))


TestDifferential = DifferentialMachine.TestCase
TestDifferential.settings = settings(
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


# -- focused properties ----------------------------------------------------------------------------------

FOCUSED = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


@settings(FOCUSED, max_examples=30)
@given(tdef=table_defs(), data=st.data())
def test_filters_match_duckdb(
    tmp_path_factory: pytest.TempPathFactory, tdef: TableDef, data: st.DataObject
) -> None:
    """Many random filters over one table: every one must keep exactly the rows DuckDB keeps."""
    t = tdef.create(mere.connect(str(tmp_path_factory.mktemp("wh"))), "diff.filters")
    model = tdef.model()
    for _ in range(2):  # two versions of some keys, so filters run on merged values
        batch = data.draw(batches(tdef, tdef.value_columns, max_rows=14, min_rows=5))
        outcome = model.apply(batch.rows)
        if outcome.must_fail or outcome.may_fail:
            continue
        t.upsert(batch.table)
        model.rows = outcome.rows
    want = model.sorted_rows()
    pools = value_pools(tdef, want)
    names = [c.name for c in tdef.columns]
    con = duck_connect()
    try:
        failures = []
        for _ in range(12):
            f = data.draw(filters(tdef, pools), label="filter")
            hit = duck_select(con, duck_schema(tdef), want, f.duck)
            try:
                got = t.scan(filter=f.mere).to_arrow()
            except mere.MereError as e:
                failures.append(f"{f.mere!r}: {type(e).__name__}: {e}")
                continue
            signless = tdef.signless()
            if problem := diff(
                canon_rows(got.to_pylist(), names, signless),
                canon_rows([want[i] for i in hit], names, signless),
                names,
            ):
                failures.append(f"{f.mere!r} (DuckDB: {f.duck}): {problem}")
        assert not failures, "\n".join(failures)
    finally:
        con.close()


@settings(FOCUSED, max_examples=40)
@given(tdef=table_defs(), data=st.data())
def test_bad_input_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory, tdef: TableDef, data: st.DataObject
) -> None:
    """Every kind of bad input this schema allows must raise its typed error and leave the table as it was."""
    t = tdef.create(mere.connect(str(tmp_path_factory.mktemp("wh"))), "diff.bad")
    model = tdef.model()
    batch = data.draw(batches(tdef, tdef.value_columns, max_rows=6))
    outcome = model.apply(batch.rows)
    if not (outcome.must_fail or outcome.may_fail):
        t.upsert(batch.table)
        model.rows = outcome.rows
    names = t.schema.names
    failures = []
    for _ in range(6):
        case = data.draw(bad_writes(tdef, model), label="bad input")
        version, rows = t.version, canon_rows(t.scan().to_arrow().to_pylist(), names)
        try:
            case.call(t)
            failures.append(f"{case.name}: nothing raised")
        except mere.MereError as e:
            if not isinstance(e, case.error):
                failures.append(f"{case.name}: expected {case.error.__name__}, got {type(e).__name__}: {e}")
        except Exception as e:
            failures.append(f"{case.name}: {type(e).__name__} is not a MereError: {e}")
        if t.version != version:
            failures.append(f"{case.name}: committed version {t.version}")
            break
        if canon_rows(t.scan().to_arrow().to_pylist(), names) != rows:
            failures.append(f"{case.name}: rows changed")
            break
    assert not failures, "\n".join(failures)


@settings(FOCUSED, max_examples=10)
@given(rows=st.lists(st.tuples(*[nullable(k.values) for k in VALUE_KINDS]), min_size=6, max_size=6))
def test_every_type_round_trips(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[Any, ...]]
) -> None:
    """One table with every value kind: written, merged, projected and read at an older version."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False)]
        + [pa.field(f"c{i}", k.type) for i, k in enumerate(VALUE_KINDS)]
    )
    t = mere.connect(str(tmp_path_factory.mktemp("wh"))).create_table(
        "diff.types", schema, primary_key=["k"], buckets=3
    )
    first = pa.table(
        {
            "k": list(range(6)),
            **{f"c{i}": pa.array([r[i] for r in rows], k.type) for i, k in enumerate(VALUE_KINDS)},
        }
    )
    t.upsert(first)
    second = first.slice(0, 3).set_column(0, "k", pa.array([3, 4, 6], pa.int64()))  # replaces 3 and 4, adds 6
    t.upsert(second)
    want = {r["k"]: r for r in first.to_pylist()}
    want.update({r["k"]: r for r in second.to_pylist()})
    names = schema.names
    got = t.scan().to_arrow()
    assert got.schema.equals(t.schema)
    problem = diff(canon_rows(got.to_pylist(), names), canon_rows(want.values(), names), names)
    assert not problem, problem
    sub = ["c3", *[f"c{i}" for i, k in enumerate(VALUE_KINDS) if k.family == "nested"]]
    problem = diff(
        canon_rows(t.scan(columns=sub).to_arrow().to_pylist(), sub), canon_rows(want.values(), sub), sub
    )
    assert not problem, problem
    problem = diff(
        canon_rows(t.scan(version=1).to_arrow().to_pylist(), names),
        canon_rows(first.to_pylist(), names),
        names,
    )
    assert not problem, problem


@pytest.mark.parametrize("typ", [pa.int8(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64()])
def test_sum_overflow_is_rejected_and_uint64_sums_reach_the_top(tmp_path: Path, typ: pa.DataType) -> None:
    lo, hi = int_range(typ)
    schema = pa.schema([("k", pa.int64()), ("q", typ)])
    t = mere.connect(str(tmp_path)).create_table(
        "diff.sums", schema, primary_key=["k"], buckets=2, merge_operators={"q": "sum"}
    )
    half = hi // 2
    t.upsert(pa.table({"k": [7, 8], "q": pa.array([half, 1], typ)}))
    t.upsert(pa.table({"k": [7], "q": pa.array([hi - half], typ)}))  # exactly the maximum
    assert {r["k"]: r["q"] for r in t.scan().to_arrow().to_pylist()} == {7: hi, 8: 1}
    version = t.version
    for attempt in ([1], [hi, hi]):
        with pytest.raises(errors.SumOverflow) as info:
            t.upsert(pa.table({"k": [7] * len(attempt), "q": pa.array(attempt, typ)}))
        assert "7" in str(info.value)
        assert t.version == version
    assert {r["k"]: r["q"] for r in t.scan().to_arrow().to_pylist()} == {7: hi, 8: 1}
    if lo < 0:  # and below the minimum
        t.upsert(pa.table({"k": [9], "q": pa.array([lo], typ)}))
        with pytest.raises(errors.SumOverflow):
            t.upsert(pa.table({"k": [9], "q": pa.array([-1], typ)}))
    # A deleted key sums from scratch.
    t.delete(pa.table({"k": [7]}))
    t.upsert(pa.table({"k": [7], "q": pa.array([hi], typ)}))
    assert {r["k"]: r["q"] for r in t.scan(filter="k = 7").to_arrow().to_pylist()} == {7: hi}


def test_not_null_column_and_new_keys(tmp_path: Path) -> None:
    """Leaving out a NOT NULL column is fine for existing keys (NULL partition included), not for new ones."""
    schema = pa.schema(
        [
            pa.field("k", pa.int64()),
            pa.field("p", pa.string()),
            pa.field("amount", pa.int64(), nullable=False),
            pa.field("note", pa.string()),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table(
        "diff.nn",
        schema,
        primary_key=["k"],
        partition_by=["p"],
        buckets=2,
        cdc_column="op",
        key_scope="partition",
    )
    t.upsert(
        pa.table(
            {"k": [1, 2], "p": pa.array([None, "a"], pa.string()), "amount": [10, 20], "note": ["x", "y"]}
        )
    )
    t.upsert(pa.table({"k": [1, 2], "p": pa.array([None, "a"], pa.string()), "note": ["x2", "y2"]}))
    assert sorted((r["k"], r["p"], r["amount"], r["note"]) for r in t.scan().to_arrow().to_pylist()) == [
        (1, None, 10, "x2"),
        (2, "a", 20, "y2"),
    ]
    version = t.version
    for case, batch in {
        "new key": pa.table({"k": [3], "p": ["a"], "note": ["z"]}),
        "existing key in another partition": pa.table({"k": [1], "p": ["a"], "note": ["z"]}),
        "delete then re-insert": pa.table(
            {"k": [2, 2], "p": ["a", "a"], "note": ["z", "z"], "op": ["D", "I"]}
        ),
    }.items():
        with pytest.raises(errors.SchemaMismatch):
            t.upsert(batch)
        assert t.version == version, case
    assert t.scan().to_arrow().column("amount").null_count == 0


def test_delete_none_is_an_error_and_true_deletes_all(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    t = mere.connect(str(tmp_path)).create_table("diff.del", schema, primary_key=["k"], buckets=2)
    t.upsert(pa.table({"k": [1, 2], "v": ["a", None]}))
    with pytest.raises(mere.MereError):
        t.delete(None)
    assert t.version == 1 and t.scan().count() == 2
    t.delete("TRUE")
    assert t.scan().count() == 0
    t.upsert(pa.table({"k": [1], "v": ["b"]}))
    assert t.scan().to_arrow().to_pylist() == [{"k": 1, "v": "b"}]


def test_float_sums_of_opposite_infinities_are_nan(tmp_path: Path) -> None:
    """inf + -inf is NaN (IEEE), in one batch and across commits, without a warning (pytest makes them errors)."""
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("y", pa.float32())])
    t = mere.connect(str(tmp_path)).create_table(
        "diff.inf", schema, primary_key=["k"], buckets=2, merge_operators={"x": "sum", "y": "sum"}
    )
    inf = math.inf
    t.upsert(pa.table({"k": [1, 1, 2], "x": [inf, -inf, inf], "y": pa.array([-inf, inf, 1.5], pa.float32())}))
    t.upsert(pa.table({"k": [2], "x": [-inf], "y": pa.array([-inf], pa.float32())}))
    got = {r["k"]: (r["x"], r["y"]) for r in t.scan().to_arrow().to_pylist()}
    assert [norm(v) for v in got[1] + got[2]] == ["NaN", "NaN", "NaN", -inf]


@pytest.mark.parametrize("operators", [{}, {"n": "last_non_null"}])
def test_not_null_column_after_compaction(tmp_path: Path, operators: dict[str, str]) -> None:
    """Compacted files and newer files of one split must merge whatever nullability each file's schema says."""
    schema = pa.schema(
        [pa.field("k", pa.int64()), pa.field("d", pa.string(), nullable=False), pa.field("n", pa.int64())]
    )
    t = mere.connect(str(tmp_path)).create_table(
        "diff.nnc", schema, primary_key=["k"], buckets=1, merge_operators=operators
    )
    t.upsert(pa.table({"k": [1, 2], "d": ["a", "b"], "n": [1, 2]}))
    t.compact(min_files=1)
    t.upsert(pa.table({"k": [3], "d": ["c"], "n": [3]}))
    assert sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "d": "a", "n": 1},
        {"k": 2, "d": "b", "n": 2},
        {"k": 3, "d": "c", "n": 3},
    ]


# A sanity check of the oracle itself, so that a failure above is mere's and not DuckDB spelling.
def test_duckdb_oracle_spelling() -> None:
    con = duck_connect()
    schema = pa.schema(
        [
            ("f", pa.float32()),
            ("d", pa.decimal128(5, 2)),
            ("i", pa.int8()),
            ("z", pa.timestamp("us", "Europe/Paris")),
        ]
    )
    rows = [
        {"f": math.nan, "d": dec_of(150, 2), "i": 5, "z": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)},
        {"f": -0.0, "d": None, "i": -128, "z": None},
    ]
    f, d, i, z = (
        KINDS["float32"],
        Kind("d", pa.decimal128(5, 2), "dec", st.nothing()),
        KINDS["int8"],
        KINDS["ts_paris"],
    )
    assert duck_select(con, schema, rows, f.duck_compare("f", "=", Lit("special", "NaN"))) == [0]
    assert duck_select(con, schema, rows, f.duck_compare("f", ">", Lit("float", 1e300))) == [0]
    assert duck_select(con, schema, rows, f.duck_compare("f", "=", Lit("float", 0.0))) == [1]
    from decimal import Decimal

    assert duck_select(con, schema, rows, d.duck_compare("d", "=", Lit("dec", Decimal("1.5000")))) == [0]
    assert duck_select(con, schema, rows, d.duck_compare("d", "<", Lit("int", 10**30))) == [0]
    assert duck_select(con, schema, rows, i.duck_compare("i", "<", Lit("int", 1000))) == [0, 1]
    assert duck_select(con, schema, rows, i.duck_compare("i", "=", Lit("dec", Decimal("5.00")))) == [0]
    assert duck_select(
        con,
        schema,
        rows,
        z.duck_compare(
            "z", "=", Lit("ts", dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))))
        ),
    ) == [0]
    con.close()


def test_these_tables_read_strings_as_dictionaries() -> None:
    from mere.read import reader

    assert reader.DICTIONARY_MIN_ROWS == 0  # the module's fixture is in force
