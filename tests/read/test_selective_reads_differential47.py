"""Adversarial differential test of the selective read paths and the answers from metadata.

A Hypothesis state machine drives random writes against mere and against a plain dict model of the table
at once: full and partial upserts, CDC batches (a change column), ``sequence_by`` tables, merge operators
(``sum``, ``last_non_null``), ``first_row`` tables, appends to keyless tables, deletes by key and by
predicate, compactions (plain, ``min_files=1`` and tiered), an added column with a default, partitions with
table-wide or per-partition keys and several buckets. After each step a read draws a random filter (non-key
comparisons, IS NULL, IN / NOT IN, AND / OR / NOT, key ranges and points, partition columns, floats with NaN
and -0.0, strings, timestamps), a random projection, a version (time travel), threads 1 or 2 and tiny
windows, and checks ``to_arrow()``, ``to_batches()``, ``to_reader()``, ``count()``, ``len()``, ``min()`` /
``max()`` and what ``explain()`` claims (no data page read; metadata answers read none either) against the
model. The filter is evaluated by a Python implementation of SQL's three-valued logic with the documented
float rules (NaN = NaN, NaN above every value, -0.0 = 0.0), sharing no code with mere.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

import mere
from mere.io.storage import Storage
from mere.read import selective
from mere.table.scan import group_tasks, read_tasks

pytestmark = pytest.mark.usefixtures("strings_read_as_dictionaries")

T0 = dt.datetime(2020, 1, 1)
STRINGS = ["", "a", "b", "ab", "A", "é", "zz", "it's"]
INT_KEYS = list(range(-2, 10))
STR_KEYS = ["", "a", "b", "ab", "k1", "k10", "é", "Z"]
PARTS = ["x", "y", ""]
FLOATS = [math.nan, -0.0, 0.0, 1.5, -2.0, math.inf]
ENGINES = ["last", "last", "last", "ops", "first_row", "seq", "keyless"]

# -- the filter oracle: SQL three-valued logic in Python --------------------------------------------------


def _fkey(x: float) -> tuple[int, float]:
    """Floats ordered as mere documents: NaN equal to itself and above everything, -0.0 = 0.0."""
    return (1, 0.0) if math.isnan(x) else (0, x + 0.0)


def _cmp(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):
        a, b = _fkey(float(a)), _fkey(float(b))
    return {
        "=": a == b,
        "<>": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[op]


def _not(x: bool | None) -> bool | None:
    return None if x is None else not x


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _in(x: Any, values: list[Any]) -> bool | None:
    if x is None:
        return None
    if any(v is not None and _cmp("=", x, v) for v in values):
        return True
    return None if any(v is None for v in values) else False


Pred = Callable[[dict[str, Any]], "bool | None"]


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        if math.isnan(v):
            return "'NaN'"
        if math.isinf(v):
            return "'Infinity'" if v > 0 else "'-Infinity'"
        return repr(v)
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    return str(v)


def _literals(column: str, key_kind: str) -> st.SearchStrategy[Any]:
    if column in ("v", "e", "seq"):
        return st.integers(-4, 4)
    if column == "f":
        return st.sampled_from([*FLOATS, -1.0, 2.0])
    if column == "s":
        return st.sampled_from([*STRINGS, "aa", "c"])
    if column == "t":
        return st.integers(-1, 6).map(lambda m: T0 + dt.timedelta(minutes=m))
    if column == "p":
        return st.sampled_from(PARTS)
    if column == "id":
        return st.sampled_from(INT_KEYS if key_kind == "int" else STR_KEYS)
    raise AssertionError(column)


@st.composite
def atoms(draw: st.DrawFn, columns: list[str], key_kind: str) -> tuple[str, Pred]:
    c = draw(st.sampled_from(columns))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "null", "notnull", "in", "notin"]))
    if kind == "null":
        return f"{c} IS NULL", lambda r: r[c] is None
    if kind == "notnull":
        return f"{c} IS NOT NULL", lambda r: r[c] is not None
    if kind in ("in", "notin"):
        values = draw(st.lists(_literals(c, key_kind), min_size=1, max_size=3))
        if kind == "in" and draw(st.booleans()) and c != "id":
            values.append(None)
        text = f"{c} {'NOT ' if kind == 'notin' else ''}IN ({', '.join(_lit(v) for v in values)})"
        if kind == "in":
            return text, lambda r: _in(r[c], values)
        return text, lambda r: _not(_in(r[c], values))
    op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
    value = draw(_literals(c, key_kind))
    return f"{c} {op} {_lit(value)}", lambda r: _cmp(op, r[c], value)


@st.composite
def filters(draw: st.DrawFn, columns: list[str], key_kind: str, depth: int = 2) -> tuple[str, Pred]:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(atoms(columns, key_kind))
    how = draw(st.sampled_from(["and", "or", "not"]))
    a_text, a = draw(filters(columns, key_kind, depth - 1))
    if how == "not":
        return f"NOT ({a_text})", lambda r: _not(a(r))
    b_text, b = draw(filters(columns, key_kind, depth - 1))
    if how == "and":
        return f"({a_text}) AND ({b_text})", lambda r: _and(a(r), b(r))
    return f"({a_text}) OR ({b_text})", lambda r: _or(a(r), b(r))


# -- comparing rows ---------------------------------------------------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if v == 0:
            return "-0.0" if math.copysign(1, v) < 0 else 0.0
    return v


def canon(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    return sorted(repr(tuple(_norm(r[c]) for c in columns)) for r in rows)


def oracle_extreme(values: list[Any], kind: pa.DataType, which: str) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if which == "max" and any(isinstance(v, float) and math.isnan(v) for v in present):
        return math.nan  # NaN sorts above every number (as filters order it, and DuckDB's max)
    return pc.min_max(pa.array(present, type=kind))[which].as_py()


def same_extreme(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return (math.isnan(got) and math.isnan(want)) or got == want  # -0.0 and 0.0: either may win
    return bool(got == want)


class NoPages:
    """A context in which reading a data page fails (footers, Bloom filters and page indexes are allowed)."""

    def __enter__(self) -> None:
        self.saved = Storage.read_row_groups

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a data page was read")

        Storage.read_row_groups = refuse  # type: ignore[method-assign]

    def __exit__(self, *exc: Any) -> None:
        Storage.read_row_groups = self.saved  # type: ignore[method-assign]


# -- the state machine ------------------------------------------------------------------------------------


class SelectiveReads(RuleBasedStateMachine):
    """mere against a dict model (identity -> row; with ``sequence_by``: identity -> (sequence, row or
    None for a tombstone); keyless: a list of rows)."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.history: list[tuple[int, list[str], list[dict[str, Any]]]] = []

    def teardown(self) -> None:
        self.dir.cleanup()

    @initialize(
        engine=st.sampled_from(ENGINES),
        key_kind=st.sampled_from(["int", "int", "str"]),
        partitioned=st.booleans(),
        scope=st.sampled_from(["table", "partition"]),
        buckets=st.sampled_from([1, 3]),
        cdc=st.booleans(),
        tiny=st.sampled_from(["none", "rows", "rows+window", "chunks"]),
        auto=st.booleans(),
    )
    def setup(
        self,
        engine: str,
        key_kind: str,
        partitioned: bool,
        scope: str,
        buckets: int,
        cdc: bool,
        tiny: str,
        auto: bool,
    ) -> None:
        self.engine, self.key_kind, self.partitioned = engine, key_kind, partitioned
        self.streamed = False
        self.keyed = engine != "keyless"
        if engine in ("ops", "first_row", "seq"):
            scope = (
                "partition"  # table-wide keys need newest-wins merges; seq across partitions is not modelled
            )
        self.scope = scope if partitioned and self.keyed else "table"
        self.cdc = cdc and engine in ("last", "ops", "seq")
        fields = [pa.field("id", pa.int64() if key_kind == "int" else pa.string(), nullable=not self.keyed)]
        if partitioned:
            fields.append(pa.field("p", pa.string()))
        fields += [
            pa.field("v", pa.int64()),
            pa.field("f", pa.float64()),
            pa.field("s", pa.string()),
            pa.field("t", pa.timestamp("us")),
        ]
        if engine == "seq":
            fields.append(pa.field("seq", pa.int64(), nullable=False))
        self.schema = pa.schema(fields)
        props = {"compaction.auto": "inline" if auto else "off", "compaction.min-files": "3"}
        if tiny != "none":
            props["write.row-group-rows"] = "2"
        if tiny == "rows+window":
            props["read.window-bytes"] = "200"
        if tiny == "chunks":  # streamed writes cut into many files (runs) of one commit
            props["write.chunk-bytes"] = "1"
            self.streamed = True
        kwargs: dict[str, Any] = {"properties": props}
        if self.keyed:
            kwargs |= {"primary_key": "id", "buckets": buckets}
            if partitioned:
                kwargs["key_scope"] = self.scope
            if engine == "ops":
                kwargs["merge_operators"] = {"v": "sum", "s": "last_non_null", "t": "max"}
            if engine == "first_row":
                kwargs["merge_operators"] = "first_row"
            if engine == "seq":
                kwargs["sequence_by"] = "seq"
            if self.cdc:
                kwargs["cdc_column"] = "op"
        if partitioned:
            kwargs["partition_by"] = "p"
        self.cat = mere.connect(self.dir.name)
        self.t = self.cat.create_table("d.t", self.schema, **kwargs)
        self.columns = list(self.schema.names)
        self.default_e: Any = None
        self.rows: dict[tuple[Any, ...], Any] = {}  # keyed tables
        self.list: list[dict[str, Any]] = []  # keyless
        self.record()

    # -- model helpers

    def ident(self, row: dict[str, Any]) -> tuple[Any, ...]:
        if self.partitioned and self.scope == "partition":
            return (row["p"], row["id"])
        return (row["id"],)

    def live(self) -> list[dict[str, Any]]:
        if not self.keyed:
            return [dict(r) for r in self.list]
        if self.engine == "seq":
            return [dict(r) for _, r in self.rows.values() if r is not None]
        return [dict(r) for r in self.rows.values()]

    def record(self) -> None:
        self.history.append((self.t.version, list(self.columns), self.live()))

    def value_columns(self) -> list[str]:
        return [c for c in self.columns if c not in ("id", "p", "seq")]

    def row_st(self) -> st.SearchStrategy[dict[str, Any]]:
        keys = INT_KEYS if self.key_kind == "int" else STR_KEYS
        text = st.one_of(
            st.sampled_from([None, *STRINGS]), st.text(max_size=4).filter(lambda s: "\x00" not in s)
        )
        parts: dict[str, st.SearchStrategy[Any]] = {
            "id": st.sampled_from(keys),
            "v": st.one_of(st.none(), st.integers(-3, 3), st.just(2**40)),
            "f": st.one_of(st.none(), st.sampled_from(FLOATS)),
            "s": text,
            "t": st.one_of(st.none(), st.integers(0, 5).map(lambda m: T0 + dt.timedelta(minutes=m))),
        }
        if self.partitioned:
            parts["p"] = st.sampled_from([*PARTS, None])
        if self.engine == "seq":
            parts["seq"] = st.integers(0, 4)
        if "e" in self.columns:
            parts["e"] = st.one_of(st.none(), st.integers(-3, 3))
        return st.fixed_dictionaries(parts)

    def arrow(self, rows: list[dict[str, Any]], columns: list[str], ops: list[str] | None = None) -> Any:
        fields = [self.t.schema.field(c) for c in columns]
        data = {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in fields}
        if self.cdc:
            data["op"] = pa.array(ops if ops is not None else ["U"] * len(rows), pa.string())
        table = pa.table(data)
        if self.streamed:  # a reader of batches of two rows: each written as a run of its own
            return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=2))
        return table

    def apply_upsert(self, row: dict[str, Any], present: set[str]) -> None:
        k = self.ident(row)
        if self.engine == "seq":
            old = self.rows.get(k)
            if old is None or row["seq"] >= old[0]:
                self.rows[k] = (row["seq"], {c: row.get(c) for c in self.columns})
            return
        old = self.rows.get(k)
        if self.engine == "first_row":
            if old is None:
                self.rows[k] = {c: row.get(c) for c in self.columns}
            return
        new = {}
        for c in self.columns:
            if c in ("id", "p") or (c not in present):
                new[c] = row.get(c) if c in ("id", "p") else (None if old is None else old[c])
                continue
            if self.engine == "ops" and old is not None and c in ("v", "s", "t"):
                o, n = old[c], row[c]
                if c == "v":
                    new[c] = o if n is None else n if o is None else o + n
                elif c == "t":
                    new[c] = o if n is None else n if o is None else max(o, n)
                else:
                    new[c] = o if n is None else n
            else:
                new[c] = row[c]
        self.rows[k] = new

    def apply_delete(self, row: dict[str, Any]) -> None:
        k = self.ident(row)
        if self.engine == "seq":
            old = self.rows.get(k)
            if old is None or row["seq"] >= old[0]:
                self.rows[k] = (row["seq"], None)
            return
        self.rows.pop(k, None)

    # -- writes

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        rows = data.draw(st.lists(self.row_st(), min_size=1, max_size=8), label="rows")
        if not self.keyed:
            self.t.append(self.arrow(rows, self.columns))
            self.list.extend({c: r.get(c) for c in self.columns} for r in rows)
        else:
            if (
                self.engine == "ops"
                and sum(1 for r in rows if r["v"] == 2**40)
                + sum(1 for r in self.live() if r["v"] is not None and abs(r["v"]) >= 2**40)
                > 100
            ):
                return
            self.t.upsert(self.arrow(rows, self.columns))
            for r in rows:
                self.apply_upsert(r, set(self.columns))
        self.record()
        self.read(data)

    @precondition(lambda self: self.keyed and self.engine in ("last", "ops"))
    @rule(data=st.data())
    def partial_upsert(self, data: st.DataObject) -> None:
        """Rows of some value columns only: for existing keys (in their own partition) and new ones."""
        chosen = data.draw(
            st.lists(st.sampled_from(self.value_columns()), min_size=1, unique=True), label="cols"
        )
        rows = data.draw(st.lists(self.row_st(), min_size=1, max_size=5), label="rows")
        by_key: dict[Any, dict[str, Any]] = {}
        for r in rows:
            if self.partitioned and self.scope == "table":
                old = self.rows.get((r["id"],))
                if old is not None:
                    r["p"] = old["p"]  # a partial row may not move its key
            by_key[self.ident(r)] = r
        rows = list(by_key.values())
        cols = [c for c in self.columns if c in ("id", "p") or c in chosen]
        self.t.upsert(self.arrow(rows, cols))
        for r in rows:
            self.apply_upsert(r, set(cols))
        self.record()
        self.read(data)

    @precondition(lambda self: self.cdc)
    @rule(data=st.data())
    def cdc_batch(self, data: st.DataObject) -> None:
        rows = data.draw(st.lists(self.row_st(), min_size=1, max_size=8), label="rows")
        ops = data.draw(
            st.lists(st.sampled_from(["I", "U", "D", "-U"]), min_size=len(rows), max_size=len(rows))
        )
        if self.partitioned and self.scope == "table":
            # a delete deletes its key wherever it lives (whatever partition value it carries)
            pass
        self.t.upsert(self.arrow(rows, self.columns, ops))
        for r, op in zip(rows, ops):
            if op == "D":
                self.apply_delete(r)
            elif op != "-U":
                self.apply_upsert(r, set(self.columns))
        self.record()
        self.read(data)

    @precondition(lambda self: self.engine != "first_row")
    @rule(data=st.data())
    def delete_where(self, data: st.DataObject) -> None:
        text, pred = data.draw(filters(self.filter_columns(), self.key_kind, 1), label="delete")
        self.t.delete(text)
        if not self.keyed:
            self.list = [r for r in self.list if pred(r) is not True]
        elif self.engine == "seq":
            for k, (sq, r) in list(self.rows.items()):
                if r is not None and pred(r) is True:
                    self.rows[k] = (sq + 0.5, None)  # marked just above the version it read
        else:
            self.rows = {k: r for k, r in self.rows.items() if pred(r) is not True}
        self.record()
        self.read(data)

    @precondition(lambda self: self.keyed and self.engine not in ("first_row", "seq"))
    @rule(data=st.data())
    def delete_keys(self, data: st.DataObject) -> None:
        keys = INT_KEYS if self.key_kind == "int" else STR_KEYS
        ids = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4, unique=True), label="ids")
        if self.partitioned and self.scope == "partition":
            pairs = [k for k in self.rows if k[1] in ids]
            pairs.append((data.draw(st.sampled_from(PARTS)), ids[0]))  # maybe one that is not there
            pairs = list(dict.fromkeys(pairs))
            kind = self.t.schema.field("id").type
            self.t.delete(
                pa.table(
                    {
                        "p": pa.array([p for p, _ in pairs], pa.string()),
                        "id": pa.array([i for _, i in pairs], kind),
                    }
                )
            )
            for k in pairs:
                self.rows.pop(k, None)
        else:
            self.t.delete(pa.table({"id": pa.array(ids, type=self.t.schema.field("id").type)}))
            for i in ids:
                self.rows.pop((i,), None)
        self.record()
        self.read(data)

    @rule(how=st.sampled_from(["plain", "one", "tiered"]), data=st.data())
    def compact(self, how: str, data: st.DataObject) -> None:
        if how == "plain":
            self.t.compact()
        elif how == "one":
            self.t.compact(min_files=1)
        else:
            self.t.compact(tiered=True)
        self.record()
        self.read(data)

    @precondition(lambda self: "e" not in self.columns)
    @rule(default=st.sampled_from([None, 7]), data=st.data())
    def add_column(self, default: Any, data: st.DataObject) -> None:
        self.t.add_column("e", pa.int32(), default=default)
        self.columns.append("e")
        self.default_e = default
        if not self.keyed:
            for r in self.list:
                r["e"] = default
        elif self.engine == "seq":
            for _, r in self.rows.values():
                if r is not None:
                    r["e"] = default
        else:
            for r in self.rows.values():
                r["e"] = default
        self.record()
        self.read(data)

    @precondition(lambda self: "e" in self.columns and self.t.schema.field("e").type == pa.int32())
    @rule(data=st.data())
    def widen(self, data: st.DataObject) -> None:
        self.t.widen("e", pa.int64())
        self.record()
        self.read(data)

    # -- reads

    def filter_columns(self) -> list[str]:
        return list(self.columns)

    @rule(data=st.data())
    def another_read(self, data: st.DataObject) -> None:
        self.read(data)

    def read(self, data: st.DataObject) -> None:
        back = data.draw(st.integers(0, 3), label="versions back")
        version, columns, rows = self.history[max(0, len(self.history) - 1 - back)]
        use = list(columns)
        text, pred = data.draw(
            st.one_of(st.just(("", lambda r: True)), filters(use, self.key_kind)), label="filter"
        )
        projection = data.draw(
            st.lists(st.sampled_from(columns), unique=True, max_size=len(columns)), label="cols"
        )
        if data.draw(st.booleans(), label="all columns"):
            projection = list(columns)
        threads = data.draw(st.sampled_from([1, 2]), label="threads")
        window = data.draw(st.sampled_from([None, 1, 300]), label="window_bytes")
        share = data.draw(st.sampled_from([selective.CANDIDATE_SHARE, 1.0]), label="candidate share")
        expected = [r for r in rows if pred(r) is True]
        if text and data.draw(st.booleans(), label="where"):
            more, pred2 = data.draw(filters(use, self.key_kind, 1), label="where filter")
            first = pred
            pred = lambda r: _and(first(r), pred2(r))  # noqa: E731
            expected = [r for r in rows if pred(r) is True]
        else:
            more = None
        scan = self.t.scan(
            columns=projection,
            filter=text or None,
            version=version,
            threads=threads,
            window_bytes=window,
            queue_batches=data.draw(st.sampled_from([1, 2]), label="queue"),
        )
        if more is not None:
            scan = scan.where(more)
            text = f"({text}) AND ({more})"
        saved = selective.CANDIDATE_SHARE
        selective.CANDIDATE_SHARE = share
        try:
            self.check(scan, projection, expected, text)
        finally:
            selective.CANDIDATE_SHARE = saved

    def check(self, scan: Any, projection: list[str], expected: list[dict[str, Any]], text: str) -> None:
        want = canon(expected, projection)
        got = scan.to_arrow()
        assert got.schema.names == projection
        assert canon(got.to_pylist(), projection) == want, f"to_arrow of {text!r}"
        batches = list(scan.to_batches())
        streamed = pa.Table.from_batches(batches, schema=scan.schema)
        assert canon(streamed.to_pylist(), projection) == want, f"to_batches of {text!r}"
        assert scan.to_reader().read_all().num_rows == len(want)
        assert scan.count() == len(want), f"count of {text!r}"
        assert len(scan) == len(want)
        with NoPages():
            ex = scan.explain()
        assert ex.splits == len(scan.plan())
        notes = " ".join(ex.notes)
        if "answered from metadata" in notes:
            assert not text
            with NoPages():
                count = scan.count()
            assert count == len(want)
        full = scan.select(*[c for c in scan.spec.schema.names])
        for c in ("v", "t", "id", "f", "s"):
            if c not in scan.spec.schema.names:
                continue
            kind = scan.spec.schema.field(c).type
            values = [r[c] for r in expected]
            for which in ("min", "max"):
                got_x = getattr(full, which)(c)
                want_x = oracle_extreme(values, kind, which)
                assert same_extreme(got_x, want_x), f"{which}({c}) of {text!r}: {got_x!r} != {want_x!r}"
        if "answered from metadata" in notes:
            with NoPages():
                full.min("v")
                full.max("t")
        # Engines' path: tasks cut into key-range windows (ScanTask.divide) and packed, then read.
        groups = group_tasks(scan.tasks(), max_bytes=64, open_cost=0, min_groups=2)
        pieces = [b for g in groups for b in read_tasks(g, parallel=2)]
        engine = pa.Table.from_batches(pieces, schema=scan.schema)
        assert canon(engine.to_pylist(), projection) == want, f"scan tasks of {text!r}"


SelectiveReads.TestCase.settings = settings(
    max_examples=max(1, settings.default.max_examples),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_selective_reads_against_a_model = SelectiveReads.TestCase


# -- bugs found, each reproduced on its own -----------------------------------------------------------------


def test_keyless_count_after_add_column(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table("d.k", pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    t.append(pa.table({"id": [1, 2], "v": [None, 3]}, schema=t.schema))
    assert t.scan().count() == 2
    t.add_column("e", pa.int64())
    assert t.scan().to_arrow().num_rows == 2
    assert t.scan().select().to_arrow().num_rows == 2 and t.scan().count() == 2
