"""Trial 50: the read shortcuts against an independent oracle.

The shortcuts: non-key filters evaluated on every stored version before the merge
(``mere.read.selective``), ``Scan.count()`` from catalog row counts or key columns alone
(``mere.read.counting``), ``Scan.min()`` / ``Scan.max()`` from footer statistics, key-range pruning,
windowed and multi-threaded merges. A plain dict model of the table replays the same writes; DuckDB runs
the same filter text over the model's merged rows. Each shortcut must give what merging everything and
filtering after gives (an older version never comes back), and ``explain()`` must say truthfully which
route answered.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import tempfile
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput
from mere.read import selective

PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
NOAUTO = {"compaction.auto": "off", "retention.max-age": "off"}
KEYS = list(range(12))
PARTS = ["a", "b"]
FLOATS = [math.nan, -0.0, 0.0, 1.5, -2.0, math.inf, None]
STRS = ["", "x", "y", "xy", None]
VARIANTS = ["last", "table_scope", "first_row", "partial", "seq"]

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("p", pa.string()),
        ("v", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("z", pa.int64()),  # always NULL
        ("lsn", pa.int64()),
    ]
)
COLS = [f.name for f in SCHEMA]

FILTERS = [
    "v > 3",
    "v <= 2",
    "v = 5",
    "v is null",
    "v is not null",
    "not (v > 4)",
    "v between 2 and 6",
    "v in (1, 3, 7)",
    "v not in (1, 3)",
    "f > 1",
    "f < 0",
    "f = 0",
    "f >= 'NaN'::double",
    "f is null",
    "f <> 0",
    "s = 'x'",
    "s like 'x%'",
    "s is null or v > 5",
    "z is null",
    "z = 1",
    "z is null and v < 4",
    "(v > 2 or f > 0) and s <> 'y'",
    "coalesce(v, -1) < 3",
    "k > 3 and v > 3",
    "k in (1, 2, 5, 9) and v < 6",
    "k between 2 and 8 and f <= 1.5",
    "p = 'a' and v > 1",
]


# -- the model -------------------------------------------------------------------------------------------


class Model:
    """Merged rows of the table as a dict key -> row (and, for ``seq``, tombstone sequences)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.rows: dict[int, dict[str, Any]] = {}
        self.seq: dict[int, int] = {}  # seq variant: the winning sequence per key, live or deleted

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            k = r["k"]
            old = self.rows.get(k)
            if self.variant == "first_row":
                if old is None:
                    self.rows[k] = {c: r.get(c) for c in COLS}
                continue
            if self.variant == "seq":
                if k in self.seq and r["lsn"] < self.seq[k]:
                    continue  # a late row: the higher sequence (or tombstone) stays
                self.seq[k] = r["lsn"]
                self.rows[k] = {c: r.get(c) for c in COLS}
                continue
            if self.variant == "partial":
                new = {c: (old or {}).get(c) for c in COLS}
                for c, val in r.items():
                    if c in ("k", "p", "lsn", "z") or val is not None:
                        new[c] = val
                    elif c not in new:
                        new[c] = None
                self.rows[k] = new
                continue
            new = {c: (old or {}).get(c) for c in COLS} if old is not None else {c: None for c in COLS}
            new.update(r)
            self.rows[k] = new

    def delete_keys(self, keys: list[int], lsn: int | None = None) -> None:
        for k in keys:
            if self.variant == "seq":
                assert lsn is not None
                if k in self.seq and lsn < self.seq[k]:
                    continue
                self.seq[k] = lsn
            self.rows.pop(k, None)

    def frame(self) -> pd.DataFrame:
        data = {c: [r[c] for r in self.rows.values()] for c in COLS}
        return pa.table(data, schema=SCHEMA).to_pandas(types_mapper=pd.ArrowDtype)

    def copy(self) -> Model:
        m = Model(self.variant)
        m.rows = {k: dict(r) for k, r in self.rows.items()}
        m.seq = dict(self.seq)
        return m


def duck(model_rows: pa.Table, filter_: str | None) -> pa.Table:
    con = duckdb.connect()
    con.register("m", model_rows)
    where = f"WHERE {filter_}" if filter_ else ""
    return con.sql(f"SELECT * FROM m {where} ORDER BY k").to_arrow_table()


def duck_extreme(model_rows: pa.Table, filter_: str | None, column: str, which: str) -> Any:
    con = duckdb.connect()
    con.register("m", model_rows)
    where = f"WHERE {filter_}" if filter_ else ""
    return con.execute(f"SELECT {which}({column}) FROM m {where}").fetchall()[0][0]


def model_table(model: Model) -> pa.Table:
    rows = sorted(model.rows.values(), key=lambda r: r["k"])
    return pa.table({c: [r[c] for r in rows] for c in COLS}, schema=SCHEMA)


def make_table(cat: mere.Catalog, variant: str, name: str = "t.x") -> mere.Table:
    kw: dict[str, Any] = {"primary_key": "k", "buckets": 2, "properties": dict(NOAUTO)}
    if variant == "table_scope":
        kw.update(partition_by="p", key_scope="table")
    elif variant == "first_row":
        kw.update(merge_operators="first_row")
    elif variant == "partial":
        kw.update(merge_operators={"v": "last_non_null", "f": "last_non_null", "s": "last_non_null"})
    elif variant == "seq":
        kw.update(sequence_by="lsn")
    return cat.create_table(name, SCHEMA, **kw)


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """Equal as sets of rows, NaN equal to NaN and -0.0 equal to 0.0 (as SQL orders them)."""

    def norm(t: pa.Table) -> list[tuple[Any, ...]]:
        return [
            tuple(
                ("nan",)
                if isinstance(r[c], float) and math.isnan(r[c])
                else (r[c] + 0.0 if isinstance(r[c], float) else r[c])
                for c in COLS
            )
            for r in t.sort_by("k").to_pylist()
        ]

    return norm(got.select(COLS)) == norm(want.select(COLS))


def same_value(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if (isinstance(a, float) or isinstance(b, float)) and (math.isnan(a) or math.isnan(b)):
        return math.isnan(a) and math.isnan(b)
    return bool(a == b)


# -- the operations ---------------------------------------------------------------------------------------

row_st = st.fixed_dictionaries(
    {
        "k": st.sampled_from(KEYS),
        "p": st.sampled_from(PARTS),
        "v": st.one_of(st.none(), st.integers(0, 8)),
        "f": st.sampled_from(FLOATS),
        "s": st.sampled_from(STRS),
    }
)

op_st = st.one_of(
    st.tuples(st.just("upsert"), st.lists(row_st, min_size=1, max_size=8)),
    st.tuples(st.just("partial"), st.lists(row_st, min_size=1, max_size=4)),
    st.tuples(st.just("delete_keys"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("delete_where"), st.sampled_from(["v > 5", "f < 0", "s = 'x'", "v is null"])),
    st.tuples(st.just("compact"), st.sampled_from(["full", "tiered", "bucket0"])),
)


def apply(t: mere.Table, model: Model, op: tuple[str, Any], lsn: list[int], draw_lsn: int) -> bool:
    """Applies one op to the table and the model; False where the variant has no such op (skipped)."""
    kind, arg = op
    v = model.variant
    if kind in ("upsert", "partial"):
        if kind == "partial" and v in ("seq", "first_row"):
            return False
        rows = []
        for r in arg:
            r = dict(r)
            if v == "seq":
                lsn[0] += 1
                r["lsn"] = max(1, lsn[0] + draw_lsn if r["k"] % 3 == 0 else lsn[0])  # some late
            r["z"] = None  # whole rows (first_row, sequence_by and key moves need them)
            r.setdefault("lsn", None)
            if kind == "partial":
                # only the key and v (and the partition column of a partitioned table)
                r = (
                    {"k": r["k"], "p": r["p"], "v": r["v"]}
                    if v == "table_scope"
                    else {"k": r["k"], "v": r["v"]}
                )
            rows.append(r)
        cols = list(rows[0].keys())
        schema = pa.schema([SCHEMA.field(c) for c in cols])
        before = t.version
        try:
            t.upsert(pa.table({c: [r.get(c) for r in rows] for c in cols}, schema=schema))
        except InvalidInput as e:
            # documented: a partial row may not move a table-wide key to another partition
            assert kind == "partial" and v == "table_scope" and "move" in str(e), e
            assert t.version == before
            return False
        model.upsert(rows)
        return True
    if kind == "delete_keys":
        if v == "first_row":
            return False
        if v == "seq":
            lsn[0] += 1
            at = max(1, lsn[0] + draw_lsn)
            t.delete(pa.table({"k": arg, "lsn": [at] * len(arg)}))
            model.delete_keys(arg, at)
        else:
            t.delete(pa.table({"k": arg}))
            model.delete_keys(arg)
        return True
    if kind == "delete_where":
        if v in ("first_row", "seq"):
            return False
        frame = model_table(model)
        hit = duck(frame, arg).column("k").to_pylist()
        t.delete(arg)
        model.delete_keys(hit)
        return True
    if kind == "compact":
        if arg == "full":
            t.compact(min_files=1)
        elif arg == "tiered":
            t.compact(tiered=True)
        else:
            t.compact(min_files=1, splits=[(s, b) for s, b in t.compaction_due() if b == 0] or None)
        return True
    raise AssertionError(kind)


MODES = ["default", "no_search", "semijoin_always", "mark_all", "narrow_declines", "tiny_wide_runs"]


class _Mode:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        self.saved = (selective.SEARCH_LATER, selective.CANDIDATE_SHARE, selective.SINGLE_FILE_SHARE)
        self.saved_sizes = (selective.MAX_NARROW_BYTES, selective.WIDE_RUN_ROWS)
        if self.mode == "narrow_declines":  # every split too big for the narrow pass: the plain route
            selective.MAX_NARROW_BYTES = 0
        elif self.mode == "tiny_wide_runs":
            selective.WIDE_RUN_ROWS, selective.SINGLE_FILE_SHARE = 1, 2.0
        if self.mode == "no_search":
            selective.SEARCH_LATER = False
        elif self.mode == "semijoin_always":
            selective.SEARCH_LATER, selective.CANDIDATE_SHARE, selective.SINGLE_FILE_SHARE = False, 2.0, 2.0
        elif self.mode == "mark_all":
            selective.SEARCH_LATER, selective.CANDIDATE_SHARE = False, -1.0

    def __exit__(self, *exc: Any) -> None:
        selective.SEARCH_LATER, selective.CANDIDATE_SHARE, selective.SINGLE_FILE_SHARE = self.saved
        selective.MAX_NARROW_BYTES, selective.WIDE_RUN_ROWS = self.saved_sizes


def check_reads(t: mere.Table, version: int, model: Model, filter_: str | None, mode: str) -> None:
    want_all = model_table(model)
    want = duck(want_all, filter_)
    with _Mode(mode):
        for kw in ({"threads": 1}, {"threads": 4}, {"threads": 3, "window_bytes": 64}):
            scan = t.scan(version=version, filter=filter_, **kw)
            got = scan.to_arrow()
            assert same_rows(got, want), (kw, filter_, got.to_pylist(), want.to_pylist())
            assert scan.count() == want.num_rows, (kw, filter_)
            batches = pa.Table.from_batches(list(scan.to_batches()), schema=scan.schema)
            assert same_rows(batches, want)
        scan = t.scan(version=version, filter=filter_)
        for column in ("v", "f", "z", "s"):
            for which in ("min", "max"):
                got_v = getattr(scan, which)(column)
                want_v = duck_extreme(want_all, filter_, column, which)
                assert same_value(got_v, want_v), (column, which, filter_, got_v, want_v)
        ex = str(scan.explain())
        if "answered from metadata" in ex:
            # every split clean: the catalog's row counts are the merged rows
            assert filter_ is None
            files = t.inspect.files(version=version).to_pylist()
            assert sum(f["row_count"] for f in files) == want_all.num_rows, ex


@pytest.mark.usefixtures("strings_read_as_dictionaries")  # the dictionary paths of small splits too
@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), phases=PHASES)
@given(
    ops=st.lists(op_st, min_size=1, max_size=7),
    late=st.integers(-6, 0),
    filters=st.lists(st.sampled_from([None, *FILTERS]), min_size=2, max_size=3),
    mode=st.sampled_from(MODES),
    back=st.integers(0, 3),
    sized=st.booleans(),
)
def test_shortcuts_equal_merge_then_filter(
    variant: str,
    ops: list[tuple[str, Any]],
    late: int,
    filters: list[str | None],
    mode: str,
    back: int,
    sized: bool,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        cat = mere.connect(d)
        t = make_table(cat, variant)
        model = Model(variant)
        lsn = [0]
        versions = [(t.version, model.copy()) for op in ops if apply(t, model, op, lsn, late)]
        if sized:  # the table's own window sizes: a window per row group, every split windowed
            t.set_properties({"read.window-bytes": "1", "read.whole-split-bytes": "0"})
        t = cat.table("t.x")
        if not versions:
            versions.append((t.version, model.copy()))
        for f in filters:
            check_reads(t, t.version, model, f, mode)
        old_version, old_model = versions[max(0, len(versions) - 1 - back)]
        check_reads(t, old_version, old_model, filters[0], mode)


# -- bigger tables: many row groups, streamed writes in several runs, compaction output in many files -----

BIG_SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("v", pa.int64()),
        ("f", pa.float64()),
        ("ts", pa.timestamp("ms")),
        ("d", pa.date32()),
        ("z", pa.int32()),
    ]
)
BIG_COLS = BIG_SCHEMA.names
BIG_FILTERS = [
    None,
    "v > 900",
    "v < 50",
    "v % 7 = 0",
    "f >= 'NaN'::double",
    "f < 0",
    "f = 0",
    "ts >= TIMESTAMP '2021-01-01 00:00:00'",
    "d < DATE '2020-02-01'",
    "z is null",
    "v is null",
    "k between 100 and 300 and v > 500",
    "k >= 250",
    "k in (3, 77, 150, 299, 450) and v is not null",
]


def _big_rows(rng: Any, keys: list[int], gen: int) -> list[dict[str, Any]]:
    out = []
    for k in keys:
        roll = rng.random()
        out.append(
            {
                "k": k,
                "v": None if roll < 0.05 else rng.randrange(1000),
                "f": rng.choice([math.nan, -0.0, 0.0, -1.5, 2.5, None, float(gen)]),
                "ts": dt.datetime(2020, 1, 1) + dt.timedelta(days=rng.randrange(800), milliseconds=gen),
                "d": dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(100)),
                "z": None,
                "op": "D" if roll > 0.9 else "I",
            }
        )
    return out


def _stream(rows: list[dict[str, Any]], batch: int) -> pa.RecordBatchReader:
    schema = BIG_SCHEMA.append(pa.field("op", pa.string()))
    table = pa.table({c: [r[c] for r in rows] for c in schema.names}, schema=schema)
    return pa.RecordBatchReader.from_batches(schema, table.to_batches(max_chunksize=batch))


def _apply_big(model: dict[int, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if r["op"] == "D":
            model.pop(r["k"], None)
        else:
            model[r["k"]] = {c: r[c] for c in BIG_COLS}


def _big_table(model: dict[int, dict[str, Any]]) -> pa.Table:
    rows = sorted(model.values(), key=lambda r: r["k"])
    return pa.table({c: [r[c] for r in rows] for c in BIG_COLS}, schema=BIG_SCHEMA)


def _same_big(got: pa.Table, want: pa.Table) -> bool:
    def norm(t: pa.Table) -> list[tuple[Any, ...]]:
        return [
            tuple(
                "nan" if isinstance(x, float) and math.isnan(x) else (x + 0.0 if isinstance(x, float) else x)
                for x in r.values()
            )
            for r in t.select(BIG_COLS).sort_by("k").to_pylist()
        ]

    return norm(got) == norm(want)


@pytest.fixture
def small_compaction_files(monkeypatch: pytest.MonkeyPatch) -> None:
    from mere.table import compaction

    monkeypatch.setattr(compaction, "CHUNK_ROWS", 64)  # a compaction's output cut into many files
    monkeypatch.setattr(selective, "WIDE_RUN_ROWS", 16)  # the wide pass in many runs


@pytest.mark.usefixtures("small_compaction_files")
@pytest.mark.parametrize("seed", [1])
def test_big_tables_in_every_state(seed: int) -> None:
    import random

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        cat = mere.connect(d)
        props = dict(NOAUTO, **{"write.row-group-rows": "16", "write.chunk-bytes": "2k"})
        t = cat.create_table(
            "t.big", BIG_SCHEMA, primary_key="k", buckets=2, cdc_column="op", properties=props
        )
        model: dict[int, dict[str, Any]] = {}
        history: list[tuple[int, pa.Table]] = []
        steps = ["stream", "stream", "compact", "upsert", "stream", "tiered", "upsert", "delete", "upsert"]
        for gen, step in enumerate(steps):
            if step in ("stream", "upsert"):
                n = 400 if step == "stream" else 25
                keys = [rng.randrange(500) for _ in range(n)]  # repeats across a stream's runs too
                rows = _big_rows(rng, keys, gen)
                if step == "stream":
                    t.upsert(_stream(rows, 37))
                else:
                    t.upsert(_stream(rows, 1000).read_all())
                _apply_big(model, rows)
            elif step == "delete":
                gone = [rng.randrange(500) for _ in range(30)]
                t.delete(pa.table({"k": gone}))
                for k in gone:
                    model.pop(k, None)
            elif step == "compact":
                t.compact(min_files=1)
            else:
                t.compact(tiered=True)
            history.append((t.version, _big_table(model)))
        for version, want_all in [history[-1], history[2], history[4], history[6]]:
            con = duckdb.connect()
            con.register("m", want_all)
            for flt in BIG_FILTERS:
                where = f"WHERE {flt}" if flt else ""
                want = con.sql(f"SELECT * FROM m {where}").to_arrow_table()
                for kw in ({"threads": 1}, {"threads": 4}, {"threads": 2, "window_bytes": 300}):
                    for mode in ("default", "semijoin_always", "mark_all"):
                        with _Mode(mode):
                            scan = t.scan(version=version, filter=flt, **kw)
                            got = scan.to_arrow()
                            assert _same_big(got, want), (version, flt, kw, mode)
                            assert scan.count() == want.num_rows, (version, flt, kw, mode)
                scan = t.scan(version=version, filter=flt)
                for column in ("v", "f", "ts", "d", "z"):
                    for which in ("min", "max"):
                        want_v = con.sql(f"SELECT {which}({column}) FROM m {where}").fetchall()[0][0]
                        got_v = getattr(scan, which)(column)
                        assert same_value(got_v, want_v), (version, flt, column, which, got_v, want_v)


# -- explain() against the route the read takes -------------------------------------------------------------


class _Spy:
    """Records, per call of ``selective.read``, whether it answered (a list) or handed back (None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: list[bool] = []
        real = selective.read

        def spy(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            self.answers.append(out is not None)
            return out

        monkeypatch.setattr(selective, "read", spy)


def _claimed_selective(scan: mere.Scan) -> int:
    for line in str(scan.explain()).splitlines():
        if "selective read of" in line:
            return int(line.split("selective read of ")[1].split("/")[0])
    return 0


def test_explain_counts_the_splits_that_read_selectively_across_files(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    t = mere.connect(str(tmp_path)).create_table(
        "t.e",
        pa.schema([("k", pa.int64()), ("v", pa.int64())]),
        primary_key="k",
        buckets=2,
        properties=NOAUTO,
    )
    t.upsert(pa.table({"k": list(range(200)), "v": list(range(200))}))
    t.upsert(pa.table({"k": [3, 150], "v": [1000, 7]}))
    scan = t.scan(filter="v > 500", threads=1)
    assert scan.to_arrow().to_pylist() == [{"k": 3, "v": 1000}]
    assert sum(spy.answers) == len(spy.answers) > 0
    assert _claimed_selective(scan) == sum(spy.answers)


def test_explain_does_not_claim_a_one_file_split_read_selectively(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    t = mere.connect(str(tmp_path)).create_table(
        "t.e",
        pa.schema([("k", pa.int64()), ("v", pa.int64())]),
        primary_key="k",
        buckets=1,
        properties=NOAUTO,
    )
    t.upsert(pa.table({"k": list(range(100)), "v": list(range(100))}))
    scan = t.scan(filter="v > 98", threads=1)
    assert scan.to_arrow().to_pylist() == [{"k": 99, "v": 99}]
    assert spy.answers == [False]  # the route handed the split back: statistics rule nothing out
    # explain() reads footers only, and the footers tell it: it must not count the split as selective
    assert _claimed_selective(scan) == sum(spy.answers)


def test_metadata_claims_of_explain_hold(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where explain() says metadata answers, min()/max()/count() read no merged batch."""
    from mere.table.scan import Scan

    t = mere.connect(str(tmp_path)).create_table(
        "t.m",
        pa.schema(
            [("k", pa.int64()), ("v", pa.int16()), ("ts", pa.timestamp("us", tz="UTC")), ("f", pa.float64())]
        ),
        primary_key="k",
        buckets=3,
        properties=NOAUTO,
    )
    t.upsert(
        pa.table(
            {
                "k": [1, 2, 3, 4],
                "v": pa.array([-5, None, 300, 2], pa.int16()),
                "ts": pa.array([None, 0, 10**15, -(10**12)], pa.timestamp("us", tz="UTC")),
                "f": [math.nan, -0.0, 1.0, None],
            }
        )
    )
    t.upsert(pa.table({"k": [3], "v": pa.array([7], pa.int16())}))  # overlaps: not clean
    scan = t.scan()
    assert "answered from metadata" not in str(scan.explain())
    assert (scan.min("v"), scan.max("v"), scan.count()) == (-5, 7, 4)
    t.compact(min_files=1)
    scan = t.scan()
    assert "answered from metadata" in str(scan.explain())
    monkeypatch.setattr(Scan, "to_batches", lambda self: pytest.fail("read merged batches"))
    assert (scan.min("v"), scan.max("v"), scan.count()) == (-5, 7, 4)
    assert scan.min("ts") == dt.datetime(1969, 12, 20, 10, 13, 20, tzinfo=dt.UTC)
    assert scan.max("ts") == dt.datetime(2001, 9, 9, 1, 46, 40, tzinfo=dt.UTC)
    monkeypatch.undo()
    assert math.isnan(t.scan().max("f")) and t.scan().min("f") == 0.0


@pytest.mark.parametrize(
    "kind",
    [
        pa.int64(),
        pa.string(),
        pa.float64(),
        pa.float32(),
    ],
)
def test_an_all_null_input_column_is_stored_as_nulls(tmp_path: Any, kind: pa.DataType) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.n", pa.schema([("k", pa.int64()), ("x", kind)]), primary_key="k", properties=NOAUTO
    )
    t.upsert(pa.table({"k": [1, 2], "x": [None, None]}))  # x: Arrow's null type
    scan = t.scan()
    assert scan.to_arrow().sort_by("k").to_pylist() == [{"k": 1, "x": None}, {"k": 2, "x": None}]
    assert scan.max("x") is None and scan.count() == 2
    assert t.scan(filter="x is null").count() == 2


# -- further states ---------------------------------------------------------------------------------------


def test_time_travel_across_renames_widenings_and_a_reused_name(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.ev",
        pa.schema([("k", pa.int64()), ("b", pa.int32()), ("f", pa.float64())]),
        primary_key="k",
        buckets=1,
        properties=NOAUTO,
    )
    t.upsert(pa.table({"k": [1, 2, 3], "b": pa.array([10, 20, 30], pa.int32()), "f": [1.0, 2.0, 3.0]}))
    v1 = t.version
    t.rename_column("b", "bb")
    t.add_column("b", pa.int64(), default=-7)  # the old name, reused by a new column
    t.widen("bb", pa.int64())
    v2 = t.version
    t.upsert(pa.table({"k": [2], "bb": [200], "b": [5], "f": [math.nan]}))
    t.compact(min_files=1)
    v3 = t.version
    old = t.scan(version=v1)
    assert (old.min("b"), old.max("b"), old.count()) == (10, 30, 3)
    assert "answered from metadata" in str(old.explain())
    assert t.scan(version=v1, filter="b > 15").count() == 2
    mid = t.scan(version=v2)
    assert "answered from metadata" not in str(mid.explain())  # old files hold other names and types
    assert (mid.min("b"), mid.max("b"), mid.min("bb"), mid.max("bb")) == (-7, -7, 10, 30)
    assert t.scan(version=v2, filter="b = -7").count() == 3
    assert t.scan(version=v2, filter="b > 15").count() == 0
    new = t.scan(version=v3)
    assert (new.min("b"), new.max("b"), new.max("bb")) == (-7, 5, 200)
    assert math.isnan(new.max("f")) and new.min("f") == 1.0
    assert sorted(t.scan(version=v3, filter="b = -7").to_arrow().column("k").to_pylist()) == [1, 3]
    assert t.scan(version=v3, filter="f >= 'NaN'::double").to_arrow().column("k").to_pylist() == [2]


def test_big_in_lists_with_nulls_nan_and_out_of_range_values(tmp_path: Any) -> None:
    import random

    schema = pa.schema(
        [("k", pa.int64()), ("v", pa.int32()), ("f", pa.float64()), ("s", pa.string()), ("u", pa.uint64())]
    )
    t = mere.connect(str(tmp_path)).create_table(
        "t.in", schema, primary_key="k", buckets=2, properties=NOAUTO
    )
    rng = random.Random(3)
    model: dict[int, dict[str, Any]] = {}
    for _ in range(4):
        rows = [
            {
                "k": rng.randrange(300),
                "v": rng.choice([None, *range(-5, 200)]),
                "f": rng.choice([math.nan, -0.0, 0.0, 1.5, None, float(rng.randrange(100))]),
                "s": rng.choice([None, "a", str(rng.randrange(100))]),
                "u": rng.choice([None, 0, 2**63 + 1, 2**64 - 1, rng.randrange(100)]),
            }
            for _ in range(200)
        ]
        t.upsert(pa.table({c: [r[c] for r in rows] for c in schema.names}, schema=schema))
        model.update({r["k"]: r for r in rows})
    frame = pa.table({c: [r[c] for r in model.values()] for c in schema.names}, schema=schema)
    con = duckdb.connect()
    con.register("m", frame)
    ints = ",".join(str(i) for i in range(0, 140, 2))  # over SORTED_IN_MIN_VALUES: the sorted search
    floats = ",".join(str(float(i)) for i in range(0, 140, 2))
    strs = ",".join(f"'{i}'" for i in range(0, 140, 2))
    for flt in [
        f"v in ({ints})",
        f"v in ({ints}, NULL)",
        f"v not in ({ints}, NULL)",
        f"v in ({ints}, 99999999999)",
        f"f in ({floats}, 'NaN'::double)",
        f"f not in ({floats})",
        f"s not in ({strs}, NULL)",
        f"u in ({ints}, 18446744073709551615)",
        f"not (v in ({ints}))",
        f"v in ({ints}) or s = 'a'",
        f"(v in ({ints})) is null",
    ]:
        want = sorted(r[0] for r in con.sql(f"SELECT k FROM m WHERE {flt}").fetchall())
        for kw in ({"threads": 1}, {"threads": 3, "window_bytes": 100}):
            scan = t.scan(filter=flt, **kw)
            assert sorted(scan.to_arrow().column("k").to_pylist()) == want, flt
            assert scan.count() == len(want), flt


@pytest.mark.parametrize("order", ["delete_first", "insert_first"])
def test_a_tombstone_and_a_lower_sequence_in_two_runs_of_one_write(tmp_path: Any, order: str) -> None:
    """One streamed write cut into two runs (two files of one commit): a delete of sequence 9 in one, the
    same key's row of sequence 5 in the other. The tombstone wins, read any way, after compaction too."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("lsn", pa.int64()), ("op", pa.string())])
    t = mere.connect(str(tmp_path)).create_table(
        "t.seq",
        schema.remove(3),
        primary_key="k",
        buckets=1,
        sequence_by="lsn",
        cdc_column="op",
        properties=dict(NOAUTO, **{"write.chunk-bytes": "1k"}),
    )
    filler = [(100 + i, i, 1, "I") for i in range(300)]
    d9, i5 = [(1, None, 9, "D")], [(1, 5, 5, "I")]
    runs = [d9 + filler, i5 + filler] if order == "delete_first" else [i5 + filler, d9 + filler]
    batches = [pa.record_batch([pa.array(c) for c in zip(*run)], schema=schema) for run in runs]
    t.upsert(pa.RecordBatchReader.from_batches(schema, batches))
    assert len(t.inspect.files()) == 2
    for _ in range(2):
        for kw in ({"threads": 1}, {"threads": 4, "window_bytes": 64}):
            assert t.scan(filter="k = 1", **kw).to_arrow().num_rows == 0
            assert t.scan(filter="v = 5", **kw).to_arrow().column("k").to_pylist() == [105]
            assert t.scan(**kw).count() == 300
        t.compact(min_files=1)


@pytest.mark.parametrize(
    "kind, runs, deleted",
    [
        (pa.bool_(), [[True, False], [False]], [False]),
        (pa.date32(), [[0, 1, 2], [1]], [2]),
        (pa.binary(), [[b"", b"a", b"\x00"], [b"\x00", b""]], [b"\x00"]),
        (pa.timestamp("ns"), [[0, 1, 2], [1, -1]], [2]),
        (pa.string(), [["", "é", "a"], ["a", "Z"]], ["é"]),
    ],
)
def test_keys_of_other_kinds_with_one_byte_windows(
    tmp_path: Any, kind: pa.DataType, runs: list[list[Any]], deleted: list[Any]
) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.kk",
        pa.schema([("k", kind), ("v", pa.int64())]),
        primary_key="k",
        buckets=2,
        properties=dict(NOAUTO, **{"read.window-bytes": "1"}),  # a window per row group
    )
    model: dict[Any, int] = {}
    for gen, keys in enumerate(runs):
        t.upsert(pa.table({"k": pa.array(keys, kind), "v": [gen] * len(keys)}))
        model.update(dict.fromkeys(pa.array(keys, kind).to_pylist(), gen))
    t.delete(pa.table({"k": pa.array(deleted, kind)}))
    for k in pa.array(deleted, kind).to_pylist():
        model.pop(k)
    got = t.scan().to_arrow()
    assert dict(zip(got.column("k").to_pylist(), got.column("v").to_pylist())) == model
    for kw in ({"threads": 1}, {"threads": 4}):
        assert t.scan(**kw).count() == len(model)
        assert t.scan(filter="v >= 0", **kw).count() == len(model)
        assert t.scan(filter="v = 0", **kw).count() == sum(1 for v in model.values() if v == 0)
    assert t.scan().max("v") == max(model.values())


@pytest.mark.parametrize("order", ["old_first", "new_first"])
def test_staged_files_of_one_commit_merge_in_the_order_given(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """Two staged upserts committed together share a commit; the later stage wins a shared key, whichever
    route reads: the search of later files, the merge's marking, counts, windows, threads."""
    t = mere.connect(str(tmp_path)).create_table(
        "t.st",
        pa.schema([("k", pa.int64()), ("v", pa.int64())]),
        primary_key="k",
        buckets=1,
        properties=NOAUTO,
    )
    old = t.stage(pa.table({"k": list(range(20)), "v": [100] * 20}), "upsert")
    new = t.stage(pa.table({"k": [5, 6], "v": [200, 200]}), "upsert")
    t.commit([old, new] if order == "old_first" else [new, old])
    winner = 200 if order == "old_first" else 100
    model = {k: 100 for k in range(20)} | {5: winner, 6: winner}
    for search in (True, False):
        monkeypatch.setattr(selective, "SEARCH_LATER", search)
        for kw in ({"threads": 1}, {"threads": 4, "window_bytes": 64}):
            for value in (100, 200):
                scan = t.scan(filter=f"v = {value}", **kw)
                want = sorted(k for k, v in model.items() if v == value)
                assert sorted(scan.to_arrow().column("k").to_pylist()) == want, (search, kw, value)
                assert scan.count() == len(want)
    assert (t.scan().count(), t.scan().max("v")) == (20, max(model.values()))


def test_staged_upsert_delete_upsert_in_one_transaction(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.st",
        pa.schema([("k", pa.int64()), ("v", pa.int64())]),
        primary_key="k",
        buckets=1,
        properties=NOAUTO,
    )
    t.upsert(pa.table({"k": list(range(20)), "v": [100] * 20}))
    up = t.stage(pa.table({"k": [5, 6, 7], "v": [200] * 3}), "upsert")
    gone = t.stage(pa.table({"k": [6]}), "delete")
    again = t.stage(pa.table({"k": [7], "v": [300]}), "upsert")
    with t.transaction() as tx:
        tx.add_staged([up])
        tx.add_staged([gone])
        tx.add_staged([again])
    for kw in ({"threads": 1}, {"threads": 4, "window_bytes": 64}):
        assert t.scan(filter="v = 100", **kw).count() == 17  # 5, 6 and 7 replaced, 6 deleted
        assert t.scan(filter="v = 200", **kw).to_arrow().column("k").to_pylist() == [5]
        assert t.scan(filter="v > 150", **kw).count() == 2
        assert t.scan(**kw).count() == 19
    assert (t.scan().max("v"), t.scan(filter="k = 6").count()) == (300, 0)


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize(
    "kind, values",
    [(pa.timestamp("us"), [2**62, -(2**62), 0]), (pa.date32(), [2**31 - 1, -(2**31), 0])],
)
def test_extremes_beyond_python_datetimes_fail_as_mere_errors(
    tmp_path: Any, kind: pa.DataType, values: list[int], clean: bool
) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.big", pa.schema([("k", pa.int64()), ("x", kind)]), primary_key="k", buckets=1, properties=NOAUTO
    )
    t.upsert(pa.table({"k": [1, 2, 3], "x": pa.array(values, kind)}))
    if not clean:
        t.upsert(pa.table({"k": [3], "x": pa.array([0], kind)}))  # overlapping files: the column is read
    scan = t.scan()
    assert ("answered from metadata" in str(scan.explain())) == clean
    assert scan.count() == 3  # the rows themselves read fine
    for which in ("min", "max"):
        with contextlib.suppress(mere.MereError):  # a documented error is fine; a raw one is not
            getattr(scan, which)("x")


def test_late_rows_after_a_compacted_tombstone_stay_hidden(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t.ts",
        pa.schema([("k", pa.int64()), ("v", pa.int64()), ("lsn", pa.int64())]),
        primary_key="k",
        buckets=1,
        sequence_by="lsn",
        properties=NOAUTO,
    )
    t.upsert(pa.table({"k": list(range(10)), "v": [1] * 10, "lsn": [5] * 10}))
    t.delete(pa.table({"k": [1, 2], "lsn": [9, 9]}))
    t.compact(min_files=1)  # the tombstones live on beside the compacted rows
    t.upsert(pa.table({"k": [1, 2, 3], "v": [7, 7, 7], "lsn": [7, 10, 4]}))  # 1 and 3 late, 2 newer
    for _ in range(2):
        for kw in ({"threads": 1}, {"threads": 4, "window_bytes": 32}):
            assert t.scan(filter="v = 7", **kw).to_arrow().column("k").to_pylist() == [2]
            assert t.scan(filter="v = 7", **kw).count() == 1
            assert t.scan(filter="v = 1 and k < 4", **kw).count() == 2  # 0 and 3
            assert t.scan(**kw).count() == 9
            assert (t.scan(**kw).max("v"), t.scan(**kw).min("v")) == (7, 1)
        t.compact(min_files=1)


@pytest.mark.parametrize("seed", range(4))
def test_first_row_under_sequence_by_keeps_the_lowest_sequence(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    import random

    rng = random.Random(seed)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("lsn", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table(
        "t.fr",
        schema,
        primary_key="k",
        buckets=2,
        sequence_by="lsn",
        merge_operators="first_row",
        properties=dict(NOAUTO, **{"write.row-group-rows": "4"}),
    )
    model: dict[int, tuple[int, int]] = {}
    for _ in range(6):
        if rng.random() < 0.2:
            t.compact(min_files=1)
            continue
        rows = [
            (rng.randrange(30), rng.randrange(10), rng.randrange(1, 20)) for _ in range(rng.randrange(1, 25))
        ]
        t.upsert(pa.table(list(map(list, zip(*rows))), schema=schema))
        for k, v, lsn in rows:
            if k not in model or lsn < model[k][1]:  # equal sequences: the first written stays
                model[k] = (v, lsn)
    frame = pa.table({"k": list(model), "v": [v for v, _ in model.values()]})
    con = duckdb.connect()
    con.register("m", frame)
    for flt in ["v > 5", "v = 3", None, "v < 2 and k > 10"]:
        want = sorted(r[0] for r in con.sql(f"SELECT k FROM m {'WHERE ' + flt if flt else ''}").fetchall())
        for search in (True, False):
            monkeypatch.setattr(selective, "SEARCH_LATER", search)
            for kw in ({"threads": 1}, {"threads": 4, "window_bytes": 40}):
                scan = t.scan(filter=flt, **kw)
                assert sorted(scan.to_arrow().column("k").to_pylist()) == want, (flt, kw)
                assert scan.count() == len(want)
