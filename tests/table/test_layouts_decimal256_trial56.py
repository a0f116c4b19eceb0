"""Shared value layouts across a write's files and decimal256 columns in reads (adversarial trial 56).

Layouts: one write's buckets (and partitions) share one Parquet layout chosen from the group's biggest
file. Buckets here hold wildly different distributions (one all NULL, one constant, one random, skewed
sizes, extreme integers, NaN/-0.0 floats, nested values); every row must read back through mere and
through DuckDB's ``read_parquet`` of the written files exactly as a dict model holds it.

decimal256: Parquet hands back decimal128 for decimal columns of at most 38 digits; mere casts them to
the table's decimal256 before filters run. Filters, lookups, counts, extremes, UPDATE, MERGE, evolution
and time travel over decimal256 columns of 38 digits or fewer and of more, against Python's decimal
module (and DuckDB where the precision fits)."""

from __future__ import annotations

import decimal
import math
import random
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import mere
from mere.io.parquet import LAYOUT_MIN_ROWS

NB = 4


def keys_by_bucket(counts: list[int], start: int = 0) -> list[list[int]]:
    """Keys (int64) landing in each bucket, ``counts[b]`` of them."""
    cand = np.arange(start, start + 12 * sum(counts), dtype=np.int64)
    ids = mere.bucket_ids(pa.array(cand), len(counts))
    return [cand[ids == b][: counts[b]].tolist() for b in range(len(counts))]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return (a == b and type(a) is type(b)) or (a == b and {type(a), type(b)} <= {int, float})


def check_rows(got: list[dict], model: dict[Any, dict], key: str = "k") -> None:
    assert len(got) == len(model)
    by = {r[key]: r for r in got}
    assert by.keys() == model.keys()
    bad = [k for k in model if not same(by[k], model[k])]
    assert not bad, (len(bad), bad[:3], [by[k] for k in bad[:2]], [model[k] for k in bad[:2]])


def duck_files(t: mere.Table, cols: list[str]) -> list[tuple]:
    paths = [t.storage.full_path(f["path"]) for f in t.files().to_pylist() if f["content"] == "data"]
    return duckdb.sql(f"select {', '.join(cols)} from read_parquet({paths!r}) order by k").fetchall()


LAYOUT_SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("i8", pa.int8()),
        ("u16", pa.uint16()),
        ("u64", pa.uint64()),
        ("i64", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bn", pa.binary()),
        ("dt", pa.date32()),
        ("ts", pa.timestamp("us", "America/New_York")),
        ("dec", pa.decimal128(18, 3)),
        ("b", pa.bool_()),
        ("l", pa.list_(pa.int32())),
        ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])),
    ]
)


def bucket_values(style: str, keys: list[int], rng: random.Random) -> dict[str, list]:
    n = len(keys)
    if style == "null":
        return {c: [None] * n for c in LAYOUT_SCHEMA.names if c != "k"}
    if style == "const":
        return {
            "i8": [-128] * n,
            "u16": [65535] * n,
            "u64": [2**64 - 1] * n,
            "i64": [-(2**63)] * n,
            "f": [-0.0] * n,
            "s": ["same"] * n,
            "ls": [""] * n,
            "bn": [b"\x00"] * n,
            "dt": [0] * n,
            "ts": [0] * n,
            "dec": [D("-999999999999999.999")] * n,
            "b": [True] * n,
            "l": [[]] * n,
            "st": [{"x": 1, "y": None}] * n,
        }
    if style == "seq":  # sorted, delta friendly
        return {
            "i8": [(k % 256) - 128 for k in keys],
            "u16": [k % 65536 for k in keys],
            "u64": [2**63 + k for k in keys],
            "i64": keys,
            "f": [float(k) for k in keys],
            "s": [f"{k:08d}" for k in keys],
            "ls": [f"{k:08d}" for k in keys],
            "bn": [k.to_bytes(8, "big") for k in keys],
            "dt": [k % 100000 for k in keys],
            "ts": [k * 1_000_000 for k in keys],
            "dec": [D(k) / 1000 for k in keys],
            "b": [k % 2 == 0 for k in keys],
            "l": [[k, k + 1] for k in keys],
            "st": [{"x": k, "y": str(k)} for k in keys],
        }

    # random, extremes mixed in
    def r64() -> int:
        return rng.choice([-(2**63), 2**63 - 1, rng.randrange(-(2**63), 2**63)])

    return {
        "i8": [rng.choice([None, -128, 127, rng.randrange(-128, 128)]) for _ in keys],
        "u16": [rng.choice([0, 65535, rng.randrange(65536)]) for _ in keys],
        "u64": [rng.choice([0, 2**64 - 1, rng.randrange(2**64)]) for _ in keys],
        "i64": [r64() for _ in keys],
        "f": [rng.choice([math.nan, -0.0, math.inf, -math.inf, rng.random(), None]) for _ in keys],
        "s": [rng.choice([None, "", "é" * rng.randrange(5), str(rng.random())]) for _ in keys],
        "ls": [str(rng.random()) for _ in keys],
        "bn": [rng.randbytes(rng.randrange(0, 9)) for _ in keys],
        "dt": [rng.randrange(-719162, 2932896) for _ in keys],
        "ts": [rng.randrange(-(6 * 10**16), 2 * 10**17) for _ in keys],
        "dec": [D(rng.randrange(-(10**18) + 1, 10**18)).scaleb(-3) for _ in keys],
        "b": [rng.choice([None, True, False]) for _ in keys],
        "l": [rng.choice([None, [], [None], [rng.randrange(-(2**31), 2**31)]]) for _ in keys],
        "st": [rng.choice([None, {"x": None, "y": "q"}, {"x": r64(), "y": None}]) for _ in keys],
    }


def layout_batch(styles: list[str], counts: list[int], seed: int, start: int = 0) -> pa.Table:
    rng = random.Random(seed)
    cols: dict[str, list] = {c: [] for c in LAYOUT_SCHEMA.names}
    for style, keys in zip(styles, keys_by_bucket(counts, start)):
        vals = bucket_values(style, keys, rng)
        cols["k"] += keys
        for c, v in vals.items():
            cols[c] += v
    return pa.table(cols, schema=LAYOUT_SCHEMA)


def model_of(batch: pa.Table) -> dict[int, dict]:
    out = {}
    for r in batch.to_pylist():
        out[r["k"]] = r
    return out


@pytest.mark.parametrize(
    "styles,counts",
    [
        (
            ["null", "const", "random", "seq"],
            [3 * LAYOUT_MIN_ROWS, LAYOUT_MIN_ROWS, LAYOUT_MIN_ROWS + 5, LAYOUT_MIN_ROWS],
        ),
        (["const", "null", "seq", "random"], [2 * LAYOUT_MIN_ROWS, LAYOUT_MIN_ROWS, LAYOUT_MIN_ROWS, 7]),
        (
            ["seq", "random", "null", "const"],
            [LAYOUT_MIN_ROWS + 100, LAYOUT_MIN_ROWS, LAYOUT_MIN_ROWS, LAYOUT_MIN_ROWS],
        ),
        (["random", "const", "null", "seq"], [LAYOUT_MIN_ROWS + 100, LAYOUT_MIN_ROWS, 3, LAYOUT_MIN_ROWS]),
    ],
)
def test_buckets_of_different_distributions_share_a_layout(
    tmp_path: Path, styles: list[str], counts: list[int]
) -> None:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table(
        "l.t", LAYOUT_SCHEMA, primary_key="k", buckets=NB, properties={"compaction.auto": "off"}
    )
    batch = layout_batch(styles, counts, seed=sum(counts))
    t.upsert(batch)
    model = model_of(batch)
    check_rows(t.to_arrow().to_pylist(), model)
    cols = ["k", "i8", "u16", "u64", "i64", "s", "ls", "bn", "dt", "dec", "b"]
    want = [tuple(model[k][c] for c in cols) for k in sorted(model)]
    got = duck_files(t, cols)
    assert got == want
    # floats through DuckDB: NaN and the sign of zero
    fl = duck_files(t, ["k", "f"])
    assert all(same(f, model[k]["f"]) for k, f in fl)


decimal.getcontext().prec = 200
DEC_SCHEMA = pa.schema(
    [
        ("k", pa.decimal128(18, 2)),
        ("a", pa.decimal256(38, 10)),
        ("b", pa.decimal256(60, 20)),
        ("c", pa.decimal256(10, 0)),
        ("e", pa.decimal256(76, 0)),
        ("i", pa.int64()),
    ]
)


def nn(*x: Any) -> bool:
    return all(v is not None for v in x)


def _first(*x: Any) -> Any:
    return next((v for v in x if v is not None), None)


def _big(vs: list) -> Any:
    vs = [v for v in vs if v is not None]
    return max(vs) if vs else None


def _small(vs: list) -> Any:
    vs = [v for v in vs if v is not None]
    return min(vs) if vs else None


DEC_FILTERS: list[tuple[str, Any]] = [
    ("a > 0", lambda r: nn(r["a"]) and r["a"] > 0),
    ("a > b", lambda r: nn(r["a"], r["b"]) and r["a"] > r["b"]),
    ("c * i > 100", lambda r: nn(r["c"], r["i"]) and r["c"] * r["i"] > 100),
    ("a * i > 100", lambda r: nn(r["a"], r["i"]) and r["a"] * r["i"] > 100),
    ("a + 1.5 > 0", lambda r: nn(r["a"]) and r["a"] + D("1.5") > 0),
    ("c + 1.5 > 0", lambda r: nn(r["c"]) and r["c"] + D("1.5") > 0),
    ("b - 0.00000000000000000001 < 0", lambda r: nn(r["b"]) and r["b"] - D("1e-20") < 0),
    ("greatest(a, c) > 3", lambda r: (lambda g: g is not None and g > 3)(_big([r["a"], r["c"]]))),
    ("least(a, 2) < 1", lambda r: (lambda g: g is not None and g < 1)(_small([r["a"], D(2)]))),
    ("greatest(c, e) > 0", lambda r: (lambda g: g is not None and g > 0)(_big([r["c"], r["e"]]))),
    (
        "CASE WHEN a > 0 THEN c ELSE i END > 2",
        lambda r: (lambda g: g is not None and g > 2)(r["c"] if nn(r["a"]) and r["a"] > 0 else r["i"]),
    ),
    ("c IN (1, -3, 5, 999)", lambda r: r["c"] in (D(1), D(-3), D(5), D(999))),
    ("c NOT IN (1, -3, 5)", lambda r: nn(r["c"]) and r["c"] not in (D(1), D(-3), D(5))),
    ("c BETWEEN -100 AND 100", lambda r: nn(r["c"]) and -100 <= r["c"] <= 100),
    ("b BETWEEN -1.5 AND 1000.5", lambda r: nn(r["b"]) and D("-1.5") <= r["b"] <= D("1000.5")),
    ("a IS NULL", lambda r: r["a"] is None),
    ("e IS NOT NULL AND e < c", lambda r: nn(r["e"], r["c"]) and r["e"] < r["c"]),
    ("k = 0.13", lambda r: r["k"] == D("0.13")),
    ("k IN (0.13, -0.5, 0.01)", lambda r: r["k"] in (D("0.13"), D("-0.5"), D("0.01"))),
    ("k > 0.2 AND a < 0", lambda r: r["k"] > D("0.2") and nn(r["a"]) and r["a"] < 0),
    ("k = c", lambda r: nn(r["c"]) and r["k"] == r["c"]),
    ("abs(a) < 1", lambda r: nn(r["a"]) and abs(r["a"]) < 1),
    ("a % 7 = 1", lambda r: nn(r["a"]) and r["a"] % 7 == 1),
    ("coalesce(a, c, 0) > 0", lambda r: _first(r["a"], r["c"], D(0)) > 0),
    ("-b > 0", lambda r: nn(r["b"]) and -r["b"] > 0),
    ("e > 1000000000000000000000000000000000000000", lambda r: nn(r["e"]) and r["e"] > 10**39),
    ("e = -7", lambda r: r["e"] == D(-7)),
    ("a = 0.0000000001 OR c = 0", lambda r: r["a"] == D("1e-10") or r["c"] == 0),
]


def _dec(rng: random.Random, p: int, s: int) -> Any:
    x = rng.random()
    if x < 0.15:
        return None
    if x < 0.4:
        return D(rng.randrange(-(10**p) + 1, 10**p)).scaleb(-s)
    if x < 0.45:
        return D(rng.choice([-(10**p) + 1, 10**p - 1])).scaleb(-s)
    return (
        D(rng.randrange(-1000, 1000)).scaleb(-rng.randrange(0, s + 1)) if s else D(rng.randrange(-1000, 1000))
    )


@pytest.fixture(scope="module")
def dec_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[mere.Table, dict, list[dict]]:
    cat = mere.connect(str(tmp_path_factory.mktemp("dec")))
    t = cat.create_table("d.t", DEC_SCHEMA, primary_key="k", buckets=2, properties={"compaction.auto": "off"})
    rng = random.Random(56)
    model: dict = {}
    versions = []
    for _ in range(6):  # many upserts: several files a bucket, keys overwritten
        rows = []
        for _ in range(40):
            k = D(rng.randrange(-60, 60)).scaleb(-2)
            r = {
                "k": k,
                "a": _dec(rng, 38, 10),
                "b": _dec(rng, 60, 20),
                "c": _dec(rng, 10, 0),
                "e": _dec(rng, 76, 0),
                "i": rng.choice([None, -3, 0, 2, 7]),
            }
            rows.append(r)
            model[k] = r
        t.upsert(pa.Table.from_pylist(rows, schema=DEC_SCHEMA))
        versions.append({k: dict(r) for k, r in model.items()})
    assert len(t.files()) > 4
    return t, model, versions


@pytest.mark.parametrize("flt,pred", DEC_FILTERS, ids=[f for f, _ in DEC_FILTERS])
def test_decimal256_filters_match_python_decimal(dec_table: Any, flt: str, pred: Any) -> None:
    t, model, versions = dec_table
    want = sorted(k for k, r in model.items() if pred(r))
    got = t.scan(filter=flt).to_arrow()
    assert got.schema.types == DEC_SCHEMA.types
    assert sorted(r["k"] for r in got.to_pylist()) == want
    assert all(r == model[r["k"]] for r in got.to_pylist())
    assert t.scan(filter=flt).count() == len(want)
    assert sorted(t.scan(columns=["k", "b"], filter=flt).to_arrow().column("k").to_pylist()) == want
    old = versions[2]
    assert t.scan(version=3, filter=flt).count() == sum(1 for r in old.values() if pred(r))


def test_decimal256_scan_extremes_and_outputs(dec_table: Any) -> None:
    t, model, _ = dec_table
    check_rows(t.to_arrow().to_pylist(), model)
    for col in "abce":
        vals = [r[col] for r in model.values() if r[col] is not None]
        assert t.scan().min(col) == min(vals)
        assert t.scan().max(col) == max(vals)
        assert t.scan(filter=f"{col} IS NOT NULL").count() == len(vals)
    df = t.scan(columns=["k", "a", "c"], filter="a > 0").to_polars()
    want = {k: (r["a"], r["c"]) for k, r in model.items() if nn(r["a"]) and r["a"] > 0}
    assert {k: (a, c) for k, a, c in df.iter_rows()} == want
    con = duckdb.connect()
    from mere.integrations.duckdb import register

    register(con, "m", t, columns=["k", "a", "c"])
    s = con.sql("select max(a), count(*), min(c) from m where a > c").fetchall()[0]
    sel = [r for r in model.values() if nn(r["a"], r["c"]) and r["a"] > r["c"]]
    assert s == (max(r["a"] for r in sel), len(sel), min(r["c"] for r in sel))


def test_decimal256_update_and_merge(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    s = pa.schema(
        [("k", pa.int64()), ("a", pa.decimal256(20, 4)), ("b", pa.decimal256(50, 6)), ("i", pa.int32())]
    )
    t = cat.create_table("d.u", s, primary_key="k", buckets=2, properties={"compaction.auto": "off"})
    rows = [
        {
            "k": k,
            "a": D(k * 37 - 100).scaleb(-3),
            "b": D(-k * 10**40 + 7).scaleb(-6) if k % 3 else None,
            "i": k % 5,
        }
        for k in range(20)
    ]
    t.upsert(pa.Table.from_pylist(rows, schema=s))
    t.upsert(pa.Table.from_pylist(rows[5:10], schema=s))
    model = {r["k"]: dict(r) for r in rows}
    t.update({"a": "a * i + 0.00005"}, where="a > 0")
    for r in model.values():
        if r["a"] > 0:
            r["a"] = (r["a"] * r["i"] + D("0.00005")).quantize(D("0.0001"), rounding=decimal.ROUND_HALF_UP)
    assert {r["k"]: r for r in t.to_arrow().to_pylist()} == model
    t.update({"b": "b * 2 + a - 0.0000005"}, where="b IS NOT NULL AND b < a")
    for r in model.values():
        if r["b"] is not None and r["b"] < r["a"]:
            r["b"] = (r["b"] * 2 + r["a"] - D("0.0000005")).quantize(
                D("0.000001"), rounding=decimal.ROUND_HALF_UP
            )
    assert {r["k"]: r for r in t.to_arrow().to_pylist()} == model
    src = pa.Table.from_pylist(
        [{"k": 3, "a": D("1.2345"), "b": D(5), "i": 1}, {"k": 100, "a": D("-9.9"), "b": None, "i": 2}],
        schema=s,
    )
    t.merge(src).when_matched_update(
        set={"a": "t.a + s.a", "b": "greatest(t.b, s.b)"}
    ).when_not_matched_insert_all().execute()
    model[3]["a"] += D("1.2345")
    model[3]["b"] = _big([model[3]["b"], D(5)])
    model[100] = src.to_pylist()[1]
    assert {r["k"]: r for r in t.to_arrow().to_pylist()} == model
    for flt, pred in [
        ("b < a", lambda r: nn(r["b"]) and r["b"] < r["a"]),
        ("k IN (3, 100)", lambda r: r["k"] in (3, 100)),
    ]:
        assert sorted(r["k"] for r in t.scan(filter=flt).to_arrow().to_pylist()) == sorted(
            k for k, r in model.items() if pred(r)
        )


def test_decimal256_widen_across_38_digits_and_added_columns(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    s = pa.schema([("k", pa.int64()), ("a", pa.decimal128(20, 4)), ("c", pa.decimal256(30, 0))])
    t = cat.create_table("d.e", s, primary_key="k", buckets=2)
    t.upsert(
        pa.Table.from_pylist(
            [
                {"k": 1, "a": D("1.5"), "c": D(7)},
                {"k": 2, "a": D("-3.25"), "c": None},
                {"k": 3, "a": None, "c": D(-2)},
            ],
            schema=s,
        )
    )
    for w in [pa.decimal256(20, 4), pa.decimal256(40, 4), pa.decimal256(60, 4)]:
        t.widen("a", w)
        assert t.to_arrow().schema.field("a").type == w
        for flt, want in [
            ("a > 0", [1]),
            ("a * 3 < 0", [2]),
            ("a = 1.5", [1]),
            ("greatest(a, c) > 1", [1]),
            ("a BETWEEN -4 AND 2", [1, 2]),
        ]:
            assert sorted(r["k"] for r in t.scan(filter=flt).to_arrow().to_pylist()) == want
            assert t.scan(filter=flt).count() == len(want)
        assert (t.scan().min("a"), t.scan().max("a")) == (D("-3.25"), D("1.5"))
    t.widen("c", pa.decimal256(76, 0))
    t.upsert(pa.Table.from_pylist([{"k": 4, "a": D("10"), "c": D(10**70)}], schema=t.schema))
    assert [
        r["k"] for r in t.scan(filter="c > 1000000000000000000000000000000000000000").to_arrow().to_pylist()
    ] == [4]
    assert sorted(r["k"] for r in t.scan(filter="c IN (7, -2)").to_arrow().to_pylist()) == [1, 3]
    t.add_column("z", pa.decimal256(38, 20), default=D("-1.00000000000000000001"))
    t.add_column("y", pa.decimal256(70, 3), default=D("12345678901234567890123456789012345678901234567.891"))
    t.upsert(
        pa.Table.from_pylist([{"k": 5, "a": D(1), "c": D(1), "z": None, "y": D("-0.001")}], schema=t.schema)
    )
    for flt, want in [
        ("z < 0", [1, 2, 3, 4]),
        ("z = -1.00000000000000000001", [1, 2, 3, 4]),
        ("z * 2 < -2", [1, 2, 3, 4]),
        ("y > 1", [1, 2, 3, 4]),
        ("y = 12345678901234567890123456789012345678901234567.891", [1, 2, 3, 4]),
        ("y < 0 AND z IS NULL", [5]),
        ("least(y, 0) < 0", [5]),
    ]:
        assert sorted(r["k"] for r in t.scan(filter=flt).to_arrow().to_pylist()) == want, flt
        assert t.scan(filter=flt).count() == len(want), flt
    assert t.scan().min("y") == D("-0.001") and t.scan().max("z") == D("-1.00000000000000000001")
    for v in range(1, t.version + 1):
        assert t.scan(version=v, filter="a > 0").count() == (1 if v < 6 else 2 if v < 9 else 3)


CDC_SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("p", pa.string()),
        ("q", pa.int64()),
        ("v", pa.int64()),
        ("s", pa.string()),
        ("d", pa.decimal256(40, 3)),
        ("op", pa.string()),
    ]
)


def test_partitions_sequence_cdc_compaction_and_update_share_layouts(tmp_path: Path) -> None:
    """Partition 'a' holds a constant, 'b' random values; sequence_by and CDC deletes, then an
    out-of-order batch, UPDATE, compaction and an added column, each write big enough for layouts."""
    cat = mere.connect(str(tmp_path))
    t = cat.create_table(
        "l.cdc",
        CDC_SCHEMA,
        primary_key="k",
        partition_by="p",
        sequence_by="q",
        cdc_column="op",
        buckets=2,
        properties={"compaction.auto": "off"},
    )
    rng = random.Random(7)
    n = 2 * LAYOUT_MIN_ROWS + 500
    model: dict[int, dict] = {}
    seqs: dict[int, int] = {}

    def apply(rows: list[dict]) -> None:
        for r in rows:
            if r["q"] < seqs.get(r["k"], -1):
                continue
            seqs[r["k"]] = r["q"]
            if r["op"] == "d":
                model.pop(r["k"], None)
            else:
                model[r["k"]] = {c: r[c] for c in CDC_SCHEMA.names if c != "op"} | {"op": r["op"]}

    def rows_for(keys: list[int], q: int, part_style: bool) -> list[dict]:
        out = []
        for k in keys:
            p = "a" if (k % 2 == 0) == part_style else "b"
            out.append(
                {
                    "k": k,
                    "p": p,
                    "q": q if p == "a" else q + rng.randrange(0, 3),
                    "v": 5 if p == "a" else rng.randrange(-(2**63), 2**63),
                    "s": None if p == "a" else str(rng.random()),
                    "d": D(-(10**39) + 1).scaleb(-3)
                    if p == "a"
                    else D(rng.randrange(-(10**40) + 1, 10**40)).scaleb(-3),
                    "op": "c",
                }
            )
        return out

    first = rows_for(list(range(2 * n)), 10, True)
    t.upsert(pa.Table.from_pylist(first, schema=CDC_SCHEMA))
    apply(first)
    sizes = [f["row_count"] for f in t.files().to_pylist()]
    assert len(sizes) == 4 and min(sizes) >= LAYOUT_MIN_ROWS
    # every key moves partition (and style), a third deleted, a few stale
    second = rows_for(list(range(0, 2 * n, 1)), 20, False)
    for r in second:
        if r["k"] % 3 == 0:
            r["op"] = "d"
        if r["k"] % 17 == 0:
            r["q"] = 1  # older than what is stored: ignored
    t.upsert(pa.Table.from_pylist(second, schema=CDC_SCHEMA))
    apply(second)
    cols = [c for c in CDC_SCHEMA.names if c != "op"]

    def check() -> None:
        got = t.scan(columns=cols).to_arrow().to_pylist()
        check_rows(got, {k: {c: r[c] for c in cols} for k, r in model.items()})
        flt = "d > 0 AND v < 0"
        want = sorted(k for k, r in model.items() if r["d"] > 0 and r["v"] < 0)
        assert sorted(r["k"] for r in t.scan(columns=["k"], filter=flt).to_arrow().to_pylist()) == want
        assert t.scan(filter=flt).count() == len(want)
        assert t.scan().count() == len(model)

    check()
    t.update({"d": "d * 2 + v", "s": "'u'"}, where="p = 'a' AND k % 5 = 1")
    for r in model.values():
        if r["p"] == "a" and r["k"] % 5 == 1:
            r["d"], r["s"] = r["d"] * 2 + r["v"], "u"
    check()
    t.compact(min_files=1)
    check()
    t.add_column("z", pa.uint64())
    cols.append("z")
    third = [
        r | {"q": 30, "z": 2**64 - 1 if r["p"] == "a" else rng.randrange(2**64)}
        for r in rows_for(list(range(n)), 30, True)
    ]
    t.upsert(pa.Table.from_pylist(third, schema=t.schema))
    for r in model.values():
        r["z"] = None
    apply(third)
    for r in third:
        model[r["k"]]["z"] = r["z"]
    check()
    paths = [t.storage.full_path(f["path"]) for f in t.files().to_pylist()]
    got = duckdb.sql(
        f"select k, v, s, z from read_parquet({paths!r}, union_by_name=true) where z is not null order by k"
    ).fetchall()
    assert got == [(r["k"], r["v"], r["s"], r["z"]) for r in sorted(third, key=lambda r: r["k"])]


def test_dotted_names_and_odd_types_share_a_layout(tmp_path: Path) -> None:
    """A column named "v.x" beside a struct "v" with a string field "x" (one Parquet path for two
    leaves), float16/float32, uint32 extremes, times, durations and fixed-size binary."""
    s = pa.schema(
        [
            ("k", pa.int64()),
            ("v.x", pa.int64()),
            ("v", pa.struct([("x", pa.string())])),
            ("w", pa.float32()),
            ("h", pa.float16()),
            ("u", pa.uint32()),
            ("t", pa.time64("ns")),
            ("du", pa.duration("ms")),
            ("fb", pa.binary(3)),
        ]
    )
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("z.t", s, primary_key="k", buckets=3)
    n = 3 * LAYOUT_MIN_ROWS + 3000
    rng = random.Random(3)
    batch = pa.table(
        {
            "k": list(range(n)),
            "v.x": list(range(n)),
            "v": [{"x": str(rng.random())} for _ in range(n)],
            "w": [float(np.float32(rng.random())) for _ in range(n)],
            "h": np.array([rng.choice([rng.random(), np.nan, -0.0]) for _ in range(n)], dtype=np.float16),
            "u": [rng.choice([0, 2**32 - 1, i]) for i in range(n)],
            "t": [i * 1000 for i in range(n)],
            "du": [rng.randrange(-(2**62), 2**62) for _ in range(n)],
            "fb": [rng.randbytes(3) for _ in range(n)],
        },
        schema=s,
    )
    t.upsert(batch)
    assert min(f["row_count"] for f in t.files().to_pylist()) >= LAYOUT_MIN_ROWS
    got = t.to_arrow().sort_by("k")
    for c in s.names:
        a, b = got.column(c).combine_chunks(), batch.column(c).combine_chunks()
        if c == "h":  # NaN and -0.0: compare the bits
            a, b = a.view(pa.uint16()), b.view(pa.uint16())
        assert a.equals(b), c
    paths = [t.storage.full_path(f["path"]) for f in t.files().to_pylist()]
    rows = duckdb.sql(f'select k, "v.x", v.x, u, fb from read_parquet({paths!r}) order by k').fetchall()
    assert rows == [
        (r["k"], r["v.x"], r["v"]["x"], r["u"], r["fb"])
        for r in batch.select(["k", "v.x", "v", "u", "fb"]).to_pylist()
    ]


AGG_SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("hi", pa.decimal256(30, 5)),
        ("lo", pa.decimal256(60, 5)),
        ("sm", pa.decimal256(38, 2)),
        ("sw", pa.decimal256(70, 2)),
        ("f", pa.decimal256(20, 1)),
    ]
)


@pytest.mark.parametrize(
    "ops",
    [{"hi": "max", "lo": "min", "sm": "last", "sw": "last", "f": "last_non_null"}, "first_row"],
    ids=["agg", "first"],
)
def test_decimal256_merge_operators_filters_extremes_delete(tmp_path: Path, ops: Any) -> None:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table(
        "a.t",
        AGG_SCHEMA,
        primary_key="k",
        buckets=2,
        merge_operators=ops,
        properties={"compaction.auto": "off"},
    )
    rng = random.Random(2)
    hist: dict[int, list[dict]] = {}
    for _ in range(5):
        rows = []
        for k in range(30):
            if rng.random() < 0.5:
                continue
            r = {
                "k": k,
                "hi": rng.choice([None, D(rng.randrange(-(10**30) + 1, 10**30)).scaleb(-5)]),
                "lo": rng.choice([None, D(rng.randrange(-(10**60) + 1, 10**60)).scaleb(-5)]),
                "sm": rng.choice([None, D(rng.randrange(-(10**20), 10**20)).scaleb(-2)]),
                "sw": rng.choice([None, D(rng.randrange(-(10**60), 10**60)).scaleb(-2)]),
                "f": rng.choice([None, D(rng.randrange(-1000, 1000)).scaleb(-1)]),
            }
            rows.append(r)
            hist.setdefault(k, []).append(r)
        t.upsert(pa.Table.from_pylist(rows, schema=AGG_SCHEMA))
    model = {}
    for k, rs in hist.items():
        if ops == "first_row":
            model[k] = rs[0]
            continue

        def vals(c: str, rs: list[dict] = rs) -> list:
            return [r[c] for r in rs if r[c] is not None]

        model[k] = {
            "k": k,
            "hi": _big(vals("hi")),
            "lo": _small(vals("lo")),
            "sm": rs[-1]["sm"],
            "sw": rs[-1]["sw"],
            "f": (vals("f") or [None])[-1],
        }

    def check() -> None:
        assert {r["k"]: r for r in t.to_arrow().to_pylist()} == model
        for flt, p in [
            ("hi > 0", lambda r: nn(r["hi"]) and r["hi"] > 0),
            ("lo < sm", lambda r: nn(r["lo"], r["sm"]) and r["lo"] < r["sm"]),
            ("sw * 2 > 0", lambda r: nn(r["sw"]) and r["sw"] > 0),
            ("f = 0.5 OR hi IS NULL", lambda r: r["f"] == D("0.5") or r["hi"] is None),
        ]:
            want = sorted(k for k, r in model.items() if p(r))
            assert sorted(r["k"] for r in t.scan(filter=flt).to_arrow().to_pylist()) == want, flt
            assert t.scan(filter=flt).count() == len(want), flt
        for c in ["hi", "lo", "sm", "sw", "f"]:
            vs = [r[c] for r in model.values() if r[c] is not None]
            assert (t.scan().min(c), t.scan().max(c)) == (min(vs), max(vs)), c

    check()
    if ops == "first_row":  # deletes are refused there (documented)
        with pytest.raises(mere.errors.InvalidInput):
            t.delete("sw < lo OR f IS NULL")
        return
    t.delete("sw < lo OR f IS NULL")
    model = {
        k: r for k, r in model.items() if not ((nn(r["sw"], r["lo"]) and r["sw"] < r["lo"]) or r["f"] is None)
    }
    check()
    t.compact()
    check()


def test_decimal256_update_rounds_and_refuses_overflow(tmp_path: Path) -> None:
    s = pa.schema(
        [
            ("k", pa.int64()),
            ("a", pa.decimal256(38, 10)),
            ("c", pa.decimal256(40, 0)),
            ("s", pa.decimal256(12, 2)),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table("j.t", s, primary_key="k")
    top = D("9999999999999999999999999999.9999999999")
    t.upsert(
        pa.Table.from_pylist(
            [
                {"k": 1, "a": D(1), "c": D(10**39), "s": D("-1.25")},
                {"k": 2, "a": top, "c": D(-(10**40) + 1), "s": D("0.05")},
            ],
            schema=s,
        )
    )

    def rows() -> list[tuple]:
        return [(r["k"], r["a"], r["c"], r["s"]) for r in t.to_arrow().sort_by("k").to_pylist()]

    t.update({"a": "a + 0.00000000005"}, where="k = 1")  # halves away from zero
    t.update({"s": "s - 0.005"}, where="k = 1")
    assert rows() == [(1, D("1.0000000001"), D(10**39), D("-1.26")), (2, top, D(-(10**40) + 1), D("0.05"))]
    v = t.version
    for set_ in ({"a": "a * 2"}, {"c": "c * 3"}):
        with pytest.raises(mere.errors.InvalidInput):
            t.update(set_, where="k = 2")
    t.update({"c": "a"}, where="k = 1")
    t.update({"s": "s * s * s"})
    assert rows() == [(1, D("1.0000000001"), D(1), D("-2.00")), (2, top, D(-(10**40) + 1), D("0.00"))]
    with pytest.raises(mere.errors.InvalidInput):  # least(0.00, c) of k 2 does not fit DECIMAL(12, 2)
        t.update({"s": "CASE WHEN s < 0 THEN greatest(s, -0.5) ELSE least(s, c) END"})
    t.update(
        {
            "s": "CASE WHEN s < 0 THEN greatest(s, -0.5) ELSE least(s, c + 10000000000000000000000000000000000000000) END"
        }
    )
    assert rows() == [(1, D("1.0000000001"), D(1), D("-0.50")), (2, top, D(-(10**40) + 1), D("0.00"))]
    assert t.version == v + 3
    assert [r["k"] for r in t.scan(filter="s = -0.5 AND c = 1").to_arrow().to_pylist()] == [1]
