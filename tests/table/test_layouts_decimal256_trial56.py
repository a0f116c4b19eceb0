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
