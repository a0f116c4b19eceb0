"""Trial 53: the read path's shortcuts against a dict model and DuckDB, across DML, schema changes,
rollback and time travel.

A plain dict (key -> row) replays every write: upserts (whole and partial rows), deletes by key and by
filter, UPDATE, MERGE, compaction, rollback to an earlier version, an added column and a widened type.
After every few steps ``count()`` (with and without a filter), ``min()`` / ``max()`` of integer, date,
zoned timestamp, decimal, string, float (NaN) and NULL-only columns, ``to_arrow()`` under non-key filters
and ``explain()``'s metadata claim are compared with DuckDB over the model, at the newest version and at
earlier ones (``scan(version=...)``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import tempfile
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mere

NOAUTO = {"compaction.auto": "off", "retention.max-age": "off"}
ZONE = "Europe/Berlin"
TS = pa.timestamp("us", tz=ZONE)
D0 = dt.date(2020, 1, 1)
T0 = dt.datetime(2020, 3, 29, 0, 30, tzinfo=dt.UTC)  # around a DST switch of Berlin

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("p", pa.string()),
        ("i", pa.int32()),
        ("d", pa.date32()),
        ("ts", TS),
        ("dec", pa.decimal128(9, 2)),
        ("s", pa.string()),
        ("f", pa.float64()),
        ("z", pa.int64()),  # NULL only
    ]
)
VALUE_COLS = ["i", "d", "ts", "dec", "s", "f", "z"]
KEYS = list(range(16))
FLOATS = [math.nan, -0.0, 0.0, 1.5, -2.0, None]
STRS = ["", "a", "b", "ab", None]

FILTERS = [
    "i > 3",
    "i <= 2",
    "i is null",
    "i between 1 and 5",
    "d >= DATE '2020-01-05'",
    "d is null",
    "dec > 1.50",
    "dec <= 0.25",
    "s = 'a'",
    "s < 'b'",
    "f > 0",
    "f = 'NaN'",
    "f is null",
    "z is null",
    "i > 2 and s is not null",
    "i < 2 or f >= 1.5",
    "ts > TIMESTAMPTZ '2020-03-29 03:00:00+02'",
]


def _value(draw: Any, c: str) -> Any:
    if c == "i":
        return draw(st.one_of(st.none(), st.integers(-3, 8)))
    if c == "d":
        return draw(st.one_of(st.none(), st.integers(0, 9).map(lambda n: D0 + dt.timedelta(days=n))))
    if c == "ts":
        return draw(st.one_of(st.none(), st.integers(0, 6).map(lambda n: T0 + dt.timedelta(minutes=37 * n))))
    if c == "dec":
        return draw(st.one_of(st.none(), st.integers(-100, 300).map(lambda n: decimal.Decimal(n).scaleb(-2))))
    if c == "s":
        return draw(st.sampled_from(STRS))
    if c == "f":
        return draw(st.sampled_from(FLOATS))
    if c == "z":
        return None
    if c == "e":
        return draw(st.one_of(st.none(), st.integers(-5, 5)))
    raise AssertionError(c)


@st.composite
def ops(draw: Any) -> list[tuple]:
    out: list[tuple] = []
    for _ in range(draw(st.integers(3, 9))):
        kind = draw(
            st.sampled_from(
                [
                    "upsert",
                    "upsert",
                    "partial",
                    "delete_keys",
                    "delete_filter",
                    "update",
                    "merge",
                    "compact",
                    "rollback",
                    "add_column",
                    "widen",
                    "overwrite",
                    "truncate",
                ]
            )
        )
        if kind in ("upsert", "merge", "overwrite"):
            keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=10))
            rows = [{"k": k, **{c: _value(draw, c) for c in VALUE_COLS}} for k in keys]
            out.append((kind, rows, draw(st.sampled_from(["i > 0", "s is null", "TRUE"]))))
        elif kind == "partial":
            cols = draw(st.lists(st.sampled_from(VALUE_COLS[:-1]), min_size=1, max_size=3, unique=True))
            keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=6))
            out.append((kind, [{"k": k, **{c: _value(draw, c) for c in cols}} for k in keys], cols))
        elif kind == "delete_keys":
            out.append((kind, draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=5, unique=True))))
        elif kind in ("delete_filter", "update"):
            out.append((kind, draw(st.sampled_from(FILTERS))))
        elif kind == "rollback":
            out.append((kind, draw(st.integers(0, 1000))))
        elif kind == "compact":
            out.append((kind, draw(st.booleans())))
        else:
            out.append((kind,))
    return out


class Model:
    """Newest-wins rows per key, and the state after each version."""

    def __init__(self, partitioned: bool) -> None:
        self.rows: dict[int, dict] = {}
        self.types = {f.name: f.type for f in SCHEMA}
        self.partitioned = partitioned
        self.states: dict[int, tuple[dict[int, dict], dict[str, pa.DataType]]] = {}

    def part(self, k: int) -> str:
        return "p" + str(k % 2) if self.partitioned else "x"

    def save(self, version: int) -> None:
        self.states[version] = ({k: dict(r) for k, r in self.rows.items()}, dict(self.types))

    def arrow(self, state: tuple[dict[int, dict], dict[str, pa.DataType]] | None = None) -> pa.Table:
        rows, types = state or (self.rows, self.types)
        schema = pa.schema(list(types.items()))
        return pa.Table.from_pylist([rows[k] for k in sorted(rows)], schema=schema)


def _duck(table: pa.Table, sql: str) -> list[tuple]:
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{ZONE}'")
    con.register("m", table)
    return con.execute(sql).fetchall()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a == b
    return a == b and type(a) is type(b) if a is not None and b is not None else a is b


def _mere_where(model: Model, where: str, state: Any = None) -> set[int]:
    table = model.arrow(state)
    return {r[0] for r in _duck(table, f"SELECT k FROM m WHERE {where}")}


def _check(t: Any, model: Model, version: int | None, rng_filters: list[str]) -> None:
    state = model.states[version] if version is not None else None
    rows, types = state or (model.rows, model.types)
    oracle = model.arrow(state)
    scan = t.scan(version=version)
    assert scan.count() == len(rows), ("count", version)
    for f in rng_filters:
        if f.startswith("e ") and "e" not in types:
            continue
        want = _duck(oracle, f"SELECT k FROM m WHERE {f} ORDER BY k")
        got = t.scan(filter=f, version=version).to_arrow()
        assert sorted(got.column("k").to_pylist()) == [r[0] for r in want], (f, version)
        assert t.scan(filter=f, version=version).count() == len(want), ("count", f, version)
        # whole rows equal the model's rows of those keys (no older version resurfaces)
        got_rows = sorted(got.select(list(types)).to_pylist(), key=lambda r: r["k"])
        want_rows = [dict(rows[r[0]], p=model.part(r[0])) for r in want]
        for g, w in zip(got_rows, want_rows, strict=True):
            for c in types:
                assert _same(g[c], w[c]), (f, c, g, w)
    for c in [c for c in types if c not in ("k", "p")]:
        for which in ("min", "max"):
            got = getattr(scan, which)(c)
            want = _duck(oracle, f'SELECT {which}("{c}") FROM m')[0][0]
            if isinstance(want, dt.datetime) and want.tzinfo is not None:
                want = want.astimezone(dt.UTC)
                got = got.astimezone(dt.UTC) if got is not None else got
            if isinstance(want, dt.datetime) or isinstance(got, dt.datetime):
                assert got == want, (which, c, version, got, want)
            elif isinstance(want, float) and isinstance(got, float):
                assert _same(got, want) or got == want, (which, c, version, got, want)
            else:
                assert got == want, (which, c, version, got, want)
    # explain's metadata claim ("answered from metadata ... every split is clean") holds only where the
    # stored rows are the merged rows: catalog row counts then add up to count(), and no delete file exists
    ex = str(scan.explain())
    files = t.inspect.files(version=version).to_pylist()
    if "answered from metadata" in ex:
        assert all(f["content"] == "data" for f in files), ex
        assert sum(f["row_count"] for f in files) == len(rows), ex
    else:
        assert "count():" in ex, ex


def _new_table(cat: Any, name: str, buckets: int, partitioned: bool, window: str | None, auto: bool) -> Any:
    props = dict(NOAUTO)
    if auto:  # inline tiered compaction after commits
        props.update({"compaction.auto": "inline", "compaction.min-files": "2"})
    props["write.row-group-rows"] = "3"
    if window:
        props["read.window-bytes"] = window
        props["read.whole-split-bytes"] = window
    return cat.create_table(
        name,
        SCHEMA,
        primary_key=["k"],
        partition_by=["p"] if partitioned else None,
        buckets=buckets,
        properties=props,
    )


def _rows_table(model: Model, rows: list[dict], cols: list[str]) -> pa.Table:
    types = model.types
    fields = [("k", types["k"]), ("p", types["p"]), *[(c, types[c]) for c in cols]]
    data = [{**r, "p": model.part(r["k"])} for r in rows]
    return pa.Table.from_pylist([{c: d.get(c) for c, _ in fields} for d in data], schema=pa.schema(fields))


def _apply(t: Any, model: Model, op: tuple) -> bool:
    """Apply ``op`` to the table and the model; False where mere made no version."""
    kind = op[0]
    before = t.version
    if kind == "upsert":
        rows = op[1]
        cols = [c for c in model.types if c not in ("k", "p")]
        t.upsert(_rows_table(model, rows, cols))
        for r in rows:
            model.rows[r["k"]] = {c: r.get(c) for c in model.types if c != "p"} | {"p": model.part(r["k"])}
    elif kind == "partial":
        rows, cols = op[1], op[2]
        t.upsert(_rows_table(model, rows, cols))
        for r in rows:
            old = model.rows.get(r["k"]) or {c: None for c in model.types} | {
                "k": r["k"],
                "p": model.part(r["k"]),
            }
            if r["k"] not in model.rows and "e" in model.types:
                old["e"] = None
            model.rows[r["k"]] = old | {c: r[c] for c in cols}
    elif kind == "delete_keys":
        t.delete(pa.table({"k": pa.array(op[1], pa.int64()), "p": [model.part(k) for k in op[1]]}))
        for k in op[1]:
            model.rows.pop(k, None)
    elif kind == "delete_filter":
        gone = _mere_where(model, op[1])
        t.delete(op[1])
        for k in gone:
            del model.rows[k]
    elif kind == "update":
        hit = _mere_where(model, op[1])
        t.update(set={"i": "coalesce(i, 0) + 1", "s": "s || 'u'"}, where=op[1])
        for k in hit:
            r = model.rows[k]
            r["i"] = (r["i"] or 0) + 1
            r["s"] = None if r["s"] is None else r["s"] + "u"
    elif kind == "merge":
        rows, cond = op[1], op[2]
        last: dict[int, dict] = {}
        for r in rows:
            last[r["k"]] = r  # MERGE sources with repeated keys are refused; keep one row per key
        rows = list(last.values())
        cols = [c for c in model.types if c not in ("k", "p") and c in SCHEMA.names]
        src = _rows_table(model, rows, cols)
        cond_s = cond.replace("i ", "t.i ").replace("s is", "t.s is")
        (
            t.merge(src)
            .when_matched_update(set={"i": "s.i", "f": "s.f", "d": "s.d"}, condition=cond_s)
            .when_not_matched_insert_all()
            .execute()
        )
        for r in rows:
            k = r["k"]
            if k in model.rows:
                old = model.rows[k]
                ok = {
                    "i > 0": old["i"] is not None and old["i"] > 0,
                    "s is null": old["s"] is None,
                    "TRUE": True,
                }
                if ok[cond]:
                    old.update(i=r["i"], f=r["f"], d=r["d"])
            else:
                new = {c: r.get(c) for c in model.types if c != "p"} | {"p": model.part(k)}
                model.rows[k] = new
    elif kind == "overwrite":
        rows, dynamic = op[1], op[2] == "TRUE"
        cols = [c for c in model.types if c not in ("k", "p")]
        t.overwrite(_rows_table(model, rows, cols), dynamic=dynamic)
        touched = {model.part(r["k"]) for r in rows}
        model.rows = {k: r for k, r in model.rows.items() if dynamic and model.part(k) not in touched}
        for r in rows:
            model.rows[r["k"]] = {c: r.get(c) for c in model.types if c != "p"} | {"p": model.part(r["k"])}
    elif kind == "truncate":
        t.truncate()
        model.rows = {}
    elif kind == "compact":
        t.compact(min_files=1, tiered=op[1])
    elif kind == "rollback":
        candidates = sorted(v for v in model.states if v < t.version)
        if not candidates:
            return False
        v = candidates[op[1] % len(candidates)]
        t.rollback(v)
        rows, types = model.states[v]
        model.rows = {k: dict(r) for k, r in rows.items()}
        model.types = dict(types)
    elif kind == "add_column":
        if "e" in model.types:
            return False
        t.add_column("e", pa.int16(), default=7)
        model.types["e"] = pa.int16()
        for r in model.rows.values():
            r["e"] = 7
    elif kind == "widen":
        if model.types["i"] == pa.int64():
            return False
        t.widen("i", pa.int64())
        model.types["i"] = pa.int64()
    return t.version != before


CONFIGS = st.fixed_dictionaries(
    {
        "buckets": st.integers(1, 4),
        "partitioned": st.booleans(),
        "window": st.sampled_from([None, "1", "200", "2k"]),
        "threads": st.sampled_from([1, 2, 3]),
        "auto": st.booleans(),
    }
)


@settings(
    max_examples=int(os.environ.get("T53_EXAMPLES", "25")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(config=CONFIGS, steps=ops(), data=st.data())
def test_reads_after_dml_rollback_and_evolution_equal_the_model(config: dict, steps: list, data: Any) -> None:
    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh, threads=config["threads"])
        t = _new_table(cat, "t.x", config["buckets"], config["partitioned"], config["window"], config["auto"])
        model = Model(config["partitioned"])
        model.save(t.version)
        for n, op in enumerate(steps):
            _apply(t, model, op)
            if t.version not in model.states:
                model.save(t.version)
            if n % 3 == 2 or n == len(steps) - 1:
                filters = data.draw(st.lists(st.sampled_from([*FILTERS, "e > 3", "e is null"]), max_size=3))
                _check(t, model, None, filters)
        old = data.draw(st.sampled_from(sorted(model.states)))
        _check(t, model, old, data.draw(st.lists(st.sampled_from(FILTERS), max_size=3)))


OPS_SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("total", pa.int64()),  # sum
        ("hi", pa.float64()),  # max: NaN only where every value is NaN
        ("lo", pa.date32()),  # min
        ("seen", TS),  # max
        ("tag", pa.string()),  # last
    ]
)
OPERATORS = {"total": "sum", "hi": "max", "lo": "min", "seen": "max"}
OPS_FILTERS = [
    "total > 3",
    "total is null",
    "hi > 0",
    "hi = 'NaN'",
    "lo <= DATE '2020-01-03'",
    "tag = 'a'",
    "seen > TIMESTAMPTZ '2020-03-29 02:00:00+00'",
    "tag is null or total < 0",
]


def _fold(old: Any, new: Any, op: str) -> Any:
    if new is None:
        return old
    if old is None:
        return new
    if op == "sum":
        return old + new
    if op == "max" and isinstance(new, float):
        if math.isnan(old):
            return new
        if math.isnan(new):
            return old
    return max(old, new) if op == "max" else min(old, new)


@st.composite
def ops_steps(draw: Any) -> list[tuple]:
    out: list[tuple] = []
    for _ in range(draw(st.integers(2, 8))):
        kind = draw(st.sampled_from(["upsert", "upsert", "partial", "delete", "compact", "rollback"]))
        if kind in ("upsert", "partial"):
            cols = ["total", "hi", "lo", "seen", "tag"]
            if kind == "partial":
                cols = draw(st.lists(st.sampled_from(cols), min_size=1, max_size=3, unique=True))
            rows = []
            for k in draw(st.lists(st.sampled_from(KEYS[:8]), min_size=1, max_size=8)):
                row = {"k": k}
                for c in cols:
                    if c == "total":
                        row[c] = draw(st.one_of(st.none(), st.integers(-3, 5)))
                    elif c == "hi":
                        row[c] = draw(st.sampled_from(FLOATS))
                    elif c == "lo":
                        row[c] = _value(draw, "d")
                    elif c == "seen":
                        row[c] = _value(draw, "ts")
                    else:
                        row[c] = draw(st.sampled_from(STRS))
                rows.append(row)
            out.append(("upsert", rows, cols))
        elif kind == "delete":
            out.append((kind, draw(st.lists(st.sampled_from(KEYS[:8]), min_size=1, max_size=4, unique=True))))
        else:
            out.append((kind, draw(st.integers(0, 100))))
    return out


@settings(
    max_examples=int(os.environ.get("T53_EXAMPLES", "25")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(config=CONFIGS, steps=ops_steps(), data=st.data())
def test_merge_operator_tables_count_and_extremes_equal_the_fold(
    config: dict, steps: list, data: Any
) -> None:
    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh, threads=config["threads"])
        props = dict(NOAUTO, **{"write.row-group-rows": "2"})
        if config["window"]:
            props["read.window-bytes"] = props["read.whole-split-bytes"] = config["window"]
        t = cat.create_table(
            "t.ops",
            OPS_SCHEMA,
            primary_key=["k"],
            buckets=config["buckets"],
            merge_operators=OPERATORS,
            properties=props,
        )
        rows: dict[int, dict] = {}
        states = {t.version: {}}
        for op in steps:
            if op[0] == "upsert":
                fields = [OPS_SCHEMA.field("k"), *[OPS_SCHEMA.field(c) for c in op[2]]]
                t.upsert(pa.Table.from_pylist(op[1], schema=pa.schema(fields)))
                for r in op[1]:
                    old = rows.get(r["k"]) or {c: None for c in OPS_SCHEMA.names} | {"k": r["k"]}
                    for c in op[2]:
                        old[c] = r[c] if c == "tag" else _fold(old[c], r[c], OPERATORS[c])
                    rows[r["k"]] = old
            elif op[0] == "delete":
                t.delete(pa.table({"k": pa.array(op[1], pa.int64())}))
                for k in op[1]:
                    rows.pop(k, None)
            elif op[0] == "compact":
                t.compact(min_files=1)
            else:
                earlier = sorted(v for v in states if v < t.version)
                if not earlier:
                    continue
                v = earlier[op[1] % len(earlier)]
                t.rollback(v)
                rows = {k: dict(r) for k, r in states[v].items()}
            states[t.version] = {k: dict(r) for k, r in rows.items()}
        for version in {None, data.draw(st.sampled_from(sorted(states)))}:
            want_rows = states[t.version if version is None else version]
            oracle = pa.Table.from_pylist([want_rows[k] for k in sorted(want_rows)], schema=OPS_SCHEMA)
            scan = t.scan(version=version)
            got = scan.to_arrow().sort_by("k")
            assert got.num_rows == len(want_rows)
            for g, w in zip(got.to_pylist(), oracle.to_pylist(), strict=True):
                assert all(_same(g[c], w[c]) for c in OPS_SCHEMA.names), (g, w)
            assert scan.count() == len(want_rows)
            for c in ["total", "hi", "lo", "seen", "tag"]:
                for which in ("min", "max"):
                    want = _duck(oracle, f'SELECT {which}("{c}") FROM m')[0][0]
                    assert _same(getattr(scan, which)(c), want) or getattr(scan, which)(c) == want, (c, which)
            for f in data.draw(st.lists(st.sampled_from(OPS_FILTERS), max_size=3)):
                want = [r[0] for r in _duck(oracle, f"SELECT k FROM m WHERE {f} ORDER BY k")]
                got_f = t.scan(filter=f, version=version)
                assert sorted(got_f.to_arrow().column("k").to_pylist()) == want, (f, version)
                assert got_f.count() == len(want), (f, version)


@pytest.mark.parametrize("seed", range(3))
def test_pinned_versions_read_alike_while_another_thread_writes_and_compacts(seed: int) -> None:
    import random
    import threading

    rnd = random.Random(seed)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("d", pa.date32())])
    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh, threads=2)
        props = dict(
            NOAUTO, **{"write.row-group-rows": "4", "read.window-bytes": "64", "read.whole-split-bytes": "64"}
        )
        t = cat.create_table("t.c", schema, primary_key=["k"], buckets=2, properties=props)
        model: dict[int, tuple[int, dt.date]] = {}
        states: dict[int, dict[int, tuple[int, dt.date]]] = {t.version: {}}
        lock = threading.Lock()
        errors: list[BaseException] = []
        done = threading.Event()

        def write() -> None:
            try:
                for _ in range(14):
                    r = rnd.random()
                    if r < 0.55:
                        keys = [rnd.randrange(40) for _ in range(rnd.randint(1, 12))]
                        vals = [
                            (rnd.randint(-9, 9), D0 + dt.timedelta(days=rnd.randint(0, 30))) for _ in keys
                        ]
                        t.upsert(
                            pa.table(
                                {"k": keys, "v": [v for v, _ in vals], "d": [d for _, d in vals]},
                                schema=schema,
                            )
                        )
                        model.update(zip(keys, vals, strict=True))
                    elif r < 0.8:
                        keys = list({rnd.randrange(40) for _ in range(rnd.randint(1, 6))})
                        t.delete(pa.table({"k": pa.array(keys, pa.int64())}))
                        for k in keys:
                            model.pop(k, None)
                    else:
                        t.compact(min_files=1)
                    with lock:
                        states[t.version] = dict(model)
            except BaseException as e:
                errors.append(e)
            finally:
                done.set()

        def read() -> None:
            try:
                while not done.is_set() or rnd.random() < 0.3:
                    with lock:
                        v, want = rnd.choice(sorted(states.items()))
                    s = t.scan(version=v)
                    assert s.count() == len(want), (v, "count")
                    assert s.max("v") == max((x for x, _ in want.values()), default=None), (v, "max")
                    assert s.min("d") == min((d for _, d in want.values()), default=None), (v, "min")
                    n = sum(1 for x, _ in want.values() if x > 0)
                    assert t.scan(filter="v > 0", version=v).count() == n, (v, "filtered")
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=write), *[threading.Thread(target=read) for _ in range(2)]]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors


@pytest.mark.parametrize("seed", range(6))
def test_updates_moving_keys_between_partitions_read_like_the_model(seed: int) -> None:
    """UPDATE of the partition column moves keys (table-wide keys): counts, filters on the partition and
    on values, and extremes in one-byte windows equal the dict model."""
    import random

    rnd = random.Random(seed)
    sch = pa.schema([("k", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
    with tempfile.TemporaryDirectory() as wh:
        props = dict(NOAUTO, **{"read.window-bytes": "1", "write.row-group-rows": "2"})
        t = mere.connect(wh, threads=2).create_table(
            "a.b", sch, primary_key=["k"], partition_by=["p"], buckets=rnd.randint(1, 3), properties=props
        )
        model: dict[int, tuple[str, int]] = {}
        for _ in range(7):
            r = rnd.random()
            if r < 0.4:
                rows = [
                    (rnd.randrange(12), rnd.choice("abc"), rnd.randrange(8)) for _ in range(rnd.randint(1, 8))
                ]
                t.upsert(
                    pa.table(
                        {"k": [x[0] for x in rows], "p": [x[1] for x in rows], "v": [x[2] for x in rows]},
                        schema=sch,
                    )
                )
                for k, p, v in rows:
                    model[k] = (p, v)
            elif r < 0.7:
                x, to = rnd.randrange(8), rnd.choice("abc")
                t.update(set={"p": repr(to), "v": "v + 1"}, where=f"v > {x}")
                model = {k: ((to, v + 1) if v > x else (p, v)) for k, (p, v) in model.items()}
            elif r < 0.85:
                x = rnd.randrange(8)
                t.delete(f"v < {x} and p = 'a'")
                model = {k: pv for k, pv in model.items() if not (pv[1] < x and pv[0] == "a")}
            else:
                t.compact(min_files=1)
        got = {r["k"]: (r["p"], r["v"]) for r in t.to_arrow().to_pylist()}
        assert got == model
        assert t.to_arrow().num_rows == len(model)
        assert t.scan().count() == len(model)
        assert t.scan(filter="p = 'b'").count() == sum(p == "b" for p, _ in model.values())
        assert t.scan(filter="v > 3").count() == sum(v > 3 for _, v in model.values())
        assert t.scan().max("v") == max((v for _, v in model.values()), default=None)
        assert t.scan().min("p") == min((p for p, _ in model.values()), default=None)
