"""Key lookups (Bloom filters and the page index on key columns) of every key type near its limits.

Each table gets files written with ``write.key-index=off`` (as before key indexes), then with it on,
overlapping upserts, deletes by key and (for some) a compaction. Then point lookups, ``IN`` lists (with
duplicates and absent keys), OR-of-AND lookups of compound keys and small MERGEs are compared with a dict
model and with a full ``scan().to_arrow()`` filtered in Python. ``explain().key_lookup`` confirms the
lookup path is taken (a filter pinning the whole key), and the same filter OR-ed with a never-true value
condition (which pins nothing, so reads whole row groups) must give the same rows.

Key types mere refuses (unsigned integers, date64, decimals above precision 18, decimal256) are checked
to be refused at create time. Literal forms: offsets against zoned columns, dates and midnight datetimes
against date columns, ints/floats/Decimals against decimal and integer keys, values the type cannot hold.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError
from mere.io import keyindex
from mere.read import lookup as lookup_module

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1)
NEVER = mere.col("v") == -(2**62)  # no row has it: OR-ed to a key filter it pins nothing

# kind -> (type, values near the limits, absent values)
KINDS: dict[str, tuple[pa.DataType, list[Any], list[Any]]] = {
    "int8": (pa.int8(), [-128, -127, -1, 0, 1, 126, 127], []),
    "int16": (pa.int16(), [-(2**15), -(2**15) + 1, -1, 0, 1, 2**15 - 2, 2**15 - 1], [77]),
    "int32": (pa.int32(), [-(2**31), -(2**31) + 1, -1, 0, 1, 2**31 - 2, 2**31 - 1], [5]),
    "int64": (
        pa.int64(),
        [-(2**63), -(2**63) + 1, -(2**53) - 1, -1, 0, 1, 2**53 + 1, 2**63 - 2, 2**63 - 1],
        [7],
    ),
    "date32": (
        pa.date32(),
        [dt.date(1, 1, 1), dt.date(1, 1, 2), dt.date(1969, 12, 31), EPOCH.date(), dt.date(9999, 12, 31)],
        [dt.date(2000, 2, 29)],
    ),
    "ts_s": (
        pa.timestamp("s"),
        [-62135596800, -1, 0, 1, 253402300799],  # 0001-01-01 .. 9999-12-31T23:59:59
        [86400],
    ),
    "ts_s_utc": (pa.timestamp("s", "UTC"), [-62135596800, -1, 0, 1, 253402300799], [3600]),
    "ts_ms_paris": (pa.timestamp("ms", "Europe/Paris"), [-62135596800000, -1, 0, 1, 253402300799999], [2]),
    "ts_ms": (pa.timestamp("ms"), [-62135596800000, -1, 0, 1, 253402300799999], [2]),
    "ts_us": (pa.timestamp("us"), [-62135596800000000, -1, 0, 1, 253402300799999999], [2]),
    "ts_us_kolkata": (
        pa.timestamp("us", "Asia/Kolkata"),
        [-62135596800000000, -1, 0, 1, 253402300799999999],
        [2],
    ),
    "ts_ns": (pa.timestamp("ns"), [-(2**63) + 1, -(2**63) + 2, -1, 0, 1, 2**63 - 2, 2**63 - 1], [1000]),
    "ts_ns_utc": (pa.timestamp("ns", "UTC"), [-(2**63) + 1, -1, 0, 1, 2**63 - 1], [999]),
    **{
        f"dec{p}_{s}": (
            pa.decimal128(p, s),
            [
                Decimal(-(10**p) + 1).scaleb(-s),
                Decimal(-1).scaleb(-s),
                Decimal(0).scaleb(-s),
                Decimal(1).scaleb(-s),
                Decimal(10**p - 2).scaleb(-s),
                Decimal(10**p - 1).scaleb(-s),
                Decimal(2 ** (8 * ((p + 1) // 3)) // 2 % (10**p)).scaleb(-s),  # near a byte-width edge
            ],
            [Decimal(3).scaleb(-s)],
        )
        for p, s in [
            (1, 0),
            (2, 1),
            (3, 0),
            (4, 2),
            (7, 3),
            (9, 2),
            (10, 0),
            (12, 5),
            (16, 4),
            (18, 0),
            (18, 18),
        ]
    },
    "string": (pa.string(), ["", "\x00", "a", "é€", "\U0010ffff" * 3, "z" * 200], ["b"]),
    "large_string": (pa.large_string(), ["", "\x00", "a", "é€"], ["b"]),
    "binary": (pa.binary(), [b"", b"\x00", b"\x7f", b"\x80", b"\xff" * 70, b"a"], [b"b"]),
    "large_binary": (pa.large_binary(), [b"", b"\x00", b"\xff"], [b"\x01"]),
}


def _canon(arr: pa.Array) -> list[Any]:
    """Key values as the model keys them (temporal values as integers: no calendar limits)."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return arr.view(pa.int64()).to_pylist()
    if pa.types.is_date32(t):
        return arr.view(pa.int32()).to_pylist()
    return arr.to_pylist()


def _literal(arr: pa.Array, i: int) -> Any:
    """A filter literal for ``arr[i]``: zoned instants as UTC datetimes (pandas Timestamps for ns)."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return arr.cast(pa.timestamp(t.unit, "UTC" if t.tz else None))[i].as_py()
    return arr[i].as_py()


def _table(tmp_path: Path, name: str, schema: pa.Schema, key: list[str], buckets: int) -> mere.Table:
    cat = mere.connect(str(tmp_path / "wh"))
    return cat.create_table(
        f"ns.{name}",
        schema,
        primary_key=key,
        buckets=buckets,
        properties={"write.key-index": "off", "compaction.auto": "off"},
    )


def _check_point_and_in(t: mere.Table, arr: pa.Array, absent: pa.Array, model: dict[Any, int]) -> None:
    full = t.scan().to_arrow()
    full_model = dict(zip(_canon(full.column("k").combine_chunks()), full.column("v").to_pylist()))
    assert full_model == model
    keys = _canon(arr)
    for i, k in enumerate(keys):
        f = mere.col("k") == _literal(arr, i)
        got = t.scan(filter=f).to_arrow()
        assert dict(zip(_canon(got.column("k").combine_chunks()), got.column("v").to_pylist())) == (
            {k: model[k]} if k in model else {}
        ), (k, got)
        assert t.scan(filter=f | NEVER).to_arrow().column("v").to_pylist() == got.column("v").to_pylist()
    for i, k in enumerate(_canon(absent)):
        assert k not in model
        assert t.scan(filter=mere.col("k") == _literal(absent, i)).to_arrow().num_rows == 0
    lits = [_literal(arr, i) for i in range(len(arr))]
    lits += lits[:3] + [_literal(absent, i) for i in range(len(absent))]
    f = mere.col("k").isin(lits)
    assert t.scan(filter=f).explain().key_lookup is not None  # the lookup path: the filter pins the key
    got = t.scan(filter=f).to_arrow()
    assert sorted(got.column("v").to_pylist()) == sorted(model.values())
    # one key of each three
    some = lits[: len(keys)][::3]
    want = sorted(model[k] for k in keys[::3] if k in model)
    assert sorted(t.scan(filter=mere.col("k").isin(some)).to_arrow().column("v").to_pylist()) == want


@pytest.mark.parametrize("kind", list(KINDS))
def test_lookups_of_every_key_type(kind: str, tmp_path: Path) -> None:
    typ, values, absent_values = KINDS[kind]
    arr = pa.array(list(dict.fromkeys(values)), typ)
    absent = pa.array(absent_values, typ)
    keys = _canon(arr)
    assert len(set(keys)) == len(keys)
    schema = pa.schema([pa.field("k", typ, nullable=False), pa.field("v", pa.int64())])
    t = _table(tmp_path, "t", schema, ["k"], buckets=2)
    model: dict[Any, int] = {}

    def upsert(idx: list[int], base: int) -> None:
        sub = arr.take(pa.array(idx, pa.int64()))
        t.upsert(pa.table({"k": sub, "v": pa.array([base + i for i in idx], pa.int64())}))
        model.update(zip(_canon(sub), [base + i for i in idx]))

    upsert(list(range(0, len(arr), 2)), 0)  # no key index
    upsert(list(range(1, len(arr), 3)), 100)
    t.set_properties({"write.key-index": "on"})
    upsert(list(range(len(arr))), 200)
    upsert(list(range(0, len(arr), 3)), 300)
    gone = arr.take(pa.array(list(range(1, len(arr), 4)), pa.int64()))
    t.delete(pa.table({"k": gone}))
    for k in _canon(gone):
        model.pop(k, None)
    _check_point_and_in(t, arr, absent, model)

    # a small MERGE: one existing key, one deleted key, one absent key
    src_idx = [0, 1]
    src = pa.table(
        {
            "k": pa.concat_arrays([arr.take(pa.array(src_idx, pa.int64())), absent]),
            "v": pa.array([500 + i for i in range(len(src_idx) + len(absent))], pa.int64()),
        }
    )
    t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    model.update(zip(_canon(src.column("k").combine_chunks()), src.column("v").to_pylist()))
    if len(keys) % 2 == 0:
        t.compact(min_files=1)
    _check_point_and_in(t, pa.concat_arrays([arr, absent]), pa.array([], typ), model)


COMPOUND: dict[str, list[str]] = {
    "int16+string": ["int16", "string"],
    "date32+dec18_0": ["date32", "dec18_0"],
    "ts_ns_utc+binary": ["ts_ns_utc", "binary"],
    "dec4_2+ts_ms_paris+int8": ["dec4_2", "ts_ms_paris", "int8"],
}


@pytest.mark.parametrize("kind", list(COMPOUND))
def test_compound_key_lookups(kind: str, tmp_path: Path) -> None:
    parts = COMPOUND[kind]
    r = random.Random(kind)
    cols = [f"k{i}" for i in range(len(parts))]
    arrays = [pa.array(KINDS[p][1], KINDS[p][0]) for p in parts]
    n = 40
    picks = [[r.randrange(len(a)) for _ in range(n)] for a in arrays]
    rows = {tuple(p[j] for p in picks): None for j in range(n)}  # distinct index tuples
    tuples = list(rows)

    def keytable(idx: list[tuple[int, ...]]) -> dict[str, pa.Array]:
        return {
            c: a.take(pa.array([tup[i] for tup in idx], pa.int64()))
            for i, (c, a) in enumerate(zip(cols, arrays))
        }

    def canon_rows(tab: pa.Table) -> dict[tuple[Any, ...], int]:
        ks = [_canon(tab.column(c).combine_chunks()) for c in cols]
        return dict(zip(zip(*ks), tab.column("v").to_pylist()))

    schema = pa.schema(
        [*(pa.field(c, a.type, nullable=False) for c, a in zip(cols, arrays)), ("v", pa.int64())]
    )
    t = _table(tmp_path, "c", schema, cols, buckets=3)
    model: dict[tuple[Any, ...], int] = {}
    for step, idx in enumerate([tuples[::2], tuples[1::3], tuples, tuples[::5]]):
        if step == 2:
            t.set_properties({"write.key-index": "on"})
        tab = pa.table(
            {**keytable(idx), "v": pa.array([step * 1000 + j for j in range(len(idx))], pa.int64())}
        )
        t.upsert(tab)
        model.update(canon_rows(tab))
    gone = pa.table(keytable(tuples[1::4]))
    t.delete(gone)
    for k in canon_rows(gone.append_column("v", pa.array([0] * gone.num_rows, pa.int64()))):
        model.pop(k)
    assert canon_rows(t.scan().to_arrow()) == model

    def filt(idx: list[tuple[int, ...]]) -> Any:
        out = None
        for tup in idx:
            conj = None
            for c, a, i in zip(cols, arrays, tup):
                atom = mere.col(c) == _literal(a, i)
                conj = atom if conj is None else conj & atom
            out = conj if out is None else out | conj
        return out

    def want(idx: list[tuple[int, ...]]) -> dict[tuple[Any, ...], int]:
        ks = {tuple(_canon(a.take(pa.array([i], pa.int64())))[0] for a, i in zip(arrays, tup)) for tup in idx}
        return {k: v for k, v in model.items() if k in ks}

    absent = [tuple(len(a) - 1 - i for a, i in zip(arrays, tup)) for tup in tuples[:5]]
    for probe in [tuples[:1], tuples[1:2], tuples[::7] + tuples[:2], absent, tuples[3:9] + absent]:
        f = filt(probe)
        assert t.scan(filter=f).explain().key_lookup is not None
        assert canon_rows(t.scan(filter=f).to_arrow()) == want(probe)
        assert canon_rows(t.scan(filter=f | NEVER).to_arrow()) == want(probe)

    src_idx = tuples[:3] + [a for a in absent if tuple(a) not in rows][:2]
    src = pa.table({**keytable(src_idx), "v": pa.array([-1 - j for j in range(len(src_idx))], pa.int64())})
    t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    model.update(canon_rows(src))
    assert canon_rows(t.scan().to_arrow()) == model
    assert canon_rows(t.scan(filter=filt(src_idx)).to_arrow()) == {k: model[k] for k in canon_rows(src)}


@pytest.mark.parametrize(
    "typ",
    [
        pa.uint8(),
        pa.uint16(),
        pa.uint32(),
        pa.uint64(),
        pa.date64(),
        pa.decimal128(19, 0),
        pa.decimal256(10, 2),
    ],
    ids=str,
)
def test_key_types_mere_refuses(typ: pa.DataType, tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    with pytest.raises(MereError):
        cat.create_table(
            "ns.t", pa.schema([pa.field("k", typ, nullable=False), ("v", pa.int64())]), primary_key=["k"]
        )


LITERALS: list[tuple[pa.DataType, list[Any], Any, list[int]]] = [
    # (key type, stored keys (k[i] has v = i, k[0] then re-upserted with v = 100), filter, expected v)
    (pa.timestamp("us", "UTC"), [0, 1], mere.col("k") == "1970-01-01T02:00:00+02:00", [100]),
    (
        pa.timestamp("us", "UTC"),
        [0, 1],
        mere.col("k").isin(["1970-01-01T02:00:00+02:00", "1969-12-31T19:00:00.000001-05:00"]),
        [100, 1],
    ),
    (
        pa.timestamp("s", "Asia/Kolkata"),
        [0, 253402300799],
        mere.col("k") == "1970-01-01T05:30:00+05:30",
        [100],
    ),
    (pa.timestamp("s", "Asia/Kolkata"), [0, 253402300799], mere.col("k") == "9999-12-31T23:59:59+00:00", [1]),
    (
        pa.timestamp("s"),
        [0, 1],
        mere.col("k") == dt.datetime(1970, 1, 1, 0, 0, 0, 500000),
        [],
    ),  # between two seconds
    (pa.timestamp("s"), [0, 1], mere.col("k").isin([dt.datetime(1970, 1, 1, 0, 0, 0, 500000), EPOCH]), [100]),
    (
        pa.timestamp("ms"),
        [0, 1],
        mere.col("k").isin(
            [EPOCH + dt.timedelta(microseconds=1000), EPOCH + dt.timedelta(microseconds=1500)]
        ),
        [1],
    ),
    (pa.timestamp("ns"), [0, 1, -1, 2**63 - 1], mere.col("k") == "1970-01-01T00:00:00.000000001", [1]),
    (pa.timestamp("ns"), [0, 1, -1, 2**63 - 1], mere.col("k") == "1969-12-31T23:59:59.999999999", [2]),
    (pa.timestamp("ns"), [0, 1, -1, 2**63 - 1], mere.col("k") == "2262-04-11T23:47:16.854775807", [3]),
    (pa.timestamp("ns", "UTC"), [0, 1], mere.col("k") == "1970-01-01T01:00:00.000000001+01:00", [1]),
    (pa.date32(), [19723, 0, 2932896], mere.col("k") == "2024-01-01", [100]),
    (pa.date32(), [19723, 0, 2932896], mere.col("k") == dt.datetime(2024, 1, 1), [100]),
    (pa.date32(), [19723, 0, 2932896], mere.col("k") == dt.datetime(2024, 1, 1, 12), []),
    (
        pa.date32(),
        [19723, 0, 2932896],
        mere.col("k").isin([dt.datetime(2024, 1, 1, 12), dt.date(9999, 12, 31), "1970-01-01"]),
        [1, 2],
    ),
    (pa.decimal128(9, 2), [Decimal("5.00"), Decimal("-9999999.99")], mere.col("k") == 5, [100]),
    (pa.decimal128(9, 2), [Decimal("5.00"), Decimal("-9999999.99")], mere.col("k") == Decimal("5.001"), []),
    (pa.decimal128(9, 2), [Decimal("5.00"), Decimal("-9999999.99")], mere.col("k") == 10**7, []),
    (
        pa.decimal128(9, 2),
        [Decimal("5.00"), Decimal("-9999999.99")],
        mere.col("k").isin([5, 5, Decimal("5.000"), 10**30, Decimal("-9999999.99"), Decimal("0.001")]),
        [100, 1],
    ),
    (
        pa.decimal128(18, 0),
        [Decimal(10**18 - 1), Decimal(0)],
        mere.col("k").isin([10**18 - 1, 10**18, 2**63, -(2**64), 0]),
        [100, 1],
    ),
    (
        pa.decimal128(18, 18),
        [Decimal("0.999999999999999999"), Decimal(0)],
        mere.col("k").isin([1, 0, Decimal("0.999999999999999999")]),
        [100, 1],
    ),
    (
        pa.int8(),
        [127, -128, 0],
        mere.col("k").isin([127, 127, 128, -129, 2**64, -128, Decimal("0.5")]),
        [100, 1],
    ),
    (pa.int8(), [127, -128, 0], mere.col("k") == Decimal("127.0"), [100]),
    (
        pa.int64(),
        [2**63 - 1, -(2**63), 0],
        mere.col("k").isin([2**63, 2**63 - 1, 2**63 - 1, -(2**63) - 1, 2**70]),
        [100],
    ),
    (pa.int64(), [2**63 - 1, -(2**63), 0], mere.col("k") == -(2**63), [1]),
    (pa.string(), ["a", "é", ""], mere.col("k").isin(["a", "a", "", "é\x00"]), [100, 2]),
    (pa.binary(), [b"a", b"\xff", b""], mere.col("k").isin([b"", b"", "a"]), [100, 2]),
]


@pytest.mark.parametrize("case", range(len(LITERALS)))
def test_literal_forms_in_key_lookups(case: int, tmp_path: Path) -> None:
    typ, stored, f, expected = LITERALS[case]
    t = _table(tmp_path, "l", pa.schema([pa.field("k", typ, nullable=False), ("v", pa.int64())]), ["k"], 3)
    t.set_properties({"write.key-index": "on"})
    keys = pa.array(stored, typ)
    t.upsert(pa.table({"k": keys, "v": pa.array(range(len(stored)), pa.int64())}))
    t.upsert(pa.table({"k": keys[:1], "v": pa.array([100], pa.int64())}))
    got = sorted(t.scan(filter=f).to_arrow().column("v").to_pylist())
    assert got == sorted(expected)
    assert sorted(t.scan(filter=f | NEVER).to_arrow().column("v").to_pylist()) == got
    ex = t.scan(filter=f).explain()
    # every filter here pins the key (Gaps of literals between two column values pin no tuple)
    assert ex.key_lookup is not None, str(ex)


@pytest.mark.parametrize(
    ("typ", "gen"),
    [
        (
            pa.binary(),
            lambda i: b"\xff" * 70 + i.to_bytes(3, "big"),
        ),  # page index maxima truncated at 64 bytes
        (pa.binary(), lambda i: b"\x7f" * 63 + b"\xff\xff" + i.to_bytes(3, "big")),
        (pa.string(), lambda i: "\U0010ffff" * 20 + f"{i:06d}"),
        (pa.decimal128(3, 0), lambda i: Decimal(i % 1999 - 999)),
        (
            pa.timestamp("s", "UTC"),
            lambda i: dt.datetime(1, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i * 7919),
        ),
    ],
    ids=["ff-prefix", "7f-ff", "max-codepoint", "dec3", "ts_s"],
)
def test_lookups_across_many_pages(typ: pa.DataType, gen: Any, tmp_path: Path) -> None:
    n = 9000  # more than two pages of 4096 rows in one file
    ks = pa.array([gen(i) for i in range(n)], typ)
    uniq = pa.compute.unique(ks)
    t = _table(tmp_path, "p", pa.schema([pa.field("k", typ, nullable=False), ("v", pa.int64())]), ["k"], 1)
    t.set_properties({"write.key-index": "on"})
    t.upsert(pa.table({"k": uniq, "v": pa.array(range(len(uniq)), pa.int64())}))
    t.upsert(pa.table({"k": uniq[:5], "v": pa.array([-1] * 5, pa.int64())}))
    model = dict(zip(_canon(uniq), range(len(uniq))))
    model.update(dict.fromkeys(_canon(uniq[:5]), -1))
    r = random.Random(7)
    probe = sorted(
        {r.randrange(len(uniq)) for _ in range(60)} | {0, 4, len(uniq) - 1, 4095, 4096, 8191, 8192} - {None}
    )
    probe = [i for i in probe if i < len(uniq)]
    canon = _canon(uniq)
    for i in probe[:25]:
        got = t.scan(filter=mere.col("k") == _literal(uniq, i)).to_arrow().column("v").to_pylist()
        assert got == [model[canon[i]]], i
    got = (
        t.scan(filter=mere.col("k").isin([_literal(uniq, i) for i in probe]))
        .to_arrow()
        .column("v")
        .to_pylist()
    )
    assert sorted(got) == sorted(model[canon[i]] for i in probe)
    src = pa.table({"k": uniq.take(pa.array(probe, pa.int64())), "v": pa.array([7] * len(probe), pa.int64())})
    t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    for i in probe:
        model[canon[i]] = 7
    full = t.scan().to_arrow()
    assert dict(zip(_canon(full.column("k").combine_chunks()), full.column("v").to_pylist())) == model


@settings(max_examples=20, deadline=None)
@given(
    kind=st.sampled_from(["int64", "ts_ns_utc", "dec18_0", "dec7_3", "ts_s", "binary"]),
    ops=st.lists(
        st.tuples(st.sampled_from(["up", "del", "merge", "on"]), st.lists(st.integers(0, 6), max_size=6)),
        max_size=6,
    ),
)
def test_random_histories(
    kind: str, ops: list[tuple[str, list[int]]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    typ, values, _ = KINDS[kind]
    arr = pa.array(values, typ)
    keys = _canon(arr)
    t = _table(
        tmp_path_factory.mktemp("h"),
        "h",
        pa.schema([pa.field("k", typ, nullable=False), ("v", pa.int64())]),
        ["k"],
        2,
    )
    model: dict[Any, int] = {}
    for step, (op, idx) in enumerate(ops):
        idx = sorted({i % len(arr) for i in idx})
        sub = arr.take(pa.array(idx, pa.int64()))
        vals = pa.array([step * 10 + i for i in idx], pa.int64())
        if op == "on":
            t.set_properties({"write.key-index": "on"})
        elif op == "up" and idx:
            t.upsert(pa.table({"k": sub, "v": vals}))
            model.update(zip(_canon(sub), vals.to_pylist()))
        elif op == "del" and idx:
            t.delete(pa.table({"k": sub}))
            for k in _canon(sub):
                model.pop(k, None)
        elif op == "merge" and idx:
            t.merge(pa.table({"k": sub, "v": vals})).when_matched_update_all().execute()
            model.update({k: v for k, v in zip(_canon(sub), vals.to_pylist()) if k in model})
    for i, k in enumerate(keys):
        got = t.scan(filter=mere.col("k") == _literal(arr, i)).to_arrow().column("v").to_pylist()
        assert got == ([model[k]] if k in model else [])


@pytest.mark.parametrize(
    ("typ", "gen"),
    [
        (pa.int64(), lambda j: -(2**63) + j * 2**40),
        (pa.timestamp("ns", "UTC"), lambda j: 2**63 - 1 - j * 10**9),
        (pa.decimal128(18, 2), lambda j: Decimal(-(10**18) + 1 + j * 10**12).scaleb(-2)),
        (pa.binary(), lambda j: b"\xff" * 66 + j.to_bytes(4, "big")),
        (pa.timestamp("s", "Europe/Paris"), lambda j: -62135596800 + j * 3),
    ],
    ids=["int64", "ts_ns_utc", "dec18_2", "binary_ff", "ts_s_paris"],
)
def test_merge_of_a_narrow_key_range(
    typ: pa.DataType, gen: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MERGE source of 3000 keys in a narrow range of a 20000-row file (half present) and a small one;
    ``lookup.read`` is spied on to confirm MERGE probes went through the lookup path."""
    calls = []
    real_read = lookup_module.read

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_read(*args, **kwargs)

    monkeypatch.setattr(lookup_module, "read", spy)
    t = _table(tmp_path, "m", pa.schema([pa.field("k", typ, nullable=False), ("v", pa.int64())]), ["k"], 1)
    t.set_properties({"write.key-index": "on"})
    n = 20000
    a = pa.array([gen(2 * i) for i in range(n)], typ)
    canon = _canon(a)
    model = dict(zip(canon, range(n)))
    t.upsert(pa.table({"k": a, "v": pa.array(range(n), pa.int64())}))
    t.upsert(pa.table({"k": a[100:200], "v": pa.array([-5] * 100, pa.int64())}))
    model.update(dict.fromkeys(canon[100:200], -5))
    t.delete(pa.table({"k": a[150:160]}))
    for c in canon[150:160]:
        model.pop(c)
    src_k = pa.array([gen(j) for j in range(10000, 13000)], typ)
    t.merge(
        pa.table({"k": src_k, "v": pa.array(range(10**6, 10**6 + 3000), pa.int64())})
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    model.update(zip(_canon(src_k), range(10**6, 10**6 + 3000)))
    t.merge(
        pa.table({"k": a[140:170], "v": pa.array([7] * 30, pa.int64())})
    ).when_matched_update_all().execute()
    model.update({c: 7 for c in canon[140:170] if c in model})
    assert calls, "no MERGE probe took the lookup path"
    full = t.scan().to_arrow()
    assert dict(zip(_canon(full.column("k").combine_chunks()), full.column("v").to_pylist())) == model


@pytest.mark.parametrize(
    ("t0", "g0", "t1", "g1"),
    [
        (pa.int8(), lambda i: i * 128 // 12000 - 64, pa.string(), lambda i: "x" * 600 + f"{i:06d}"),
        (pa.string(), lambda i: "y" * 600 + f"{i // 3:06d}", pa.int64(), lambda i: (i % 3 - 1) * 2**62),
        (
            pa.binary(),
            lambda i: b"\xff" * 700 + (i // 7).to_bytes(3, "big"),
            pa.int16(),
            lambda i: (i % 7) * 4000 - 2**15,
        ),
    ],
    ids=["int8+longstr", "longstr+int64", "longbin+int16"],
)
def test_compound_keys_with_long_values(
    t0: pa.DataType, g0: Any, t1: pa.DataType, g1: Any, tmp_path: Path
) -> None:
    """Compound keys whose columns repeat (small integers) or are long (row groups and pages cut by
    size): OR-of-AND lookups and a MERGE equal the model."""
    n = 12000
    schema = pa.schema(
        [pa.field("a", t0, nullable=False), pa.field("b", t1, nullable=False), ("v", pa.int64())]
    )
    t = _table(tmp_path, "lv", schema, ["a", "b"], 1)
    t.set_properties({"write.key-index": "on"})
    a_vals = [g0(i) for i in range(n)]
    b_vals = [g1(i) for i in range(n)]
    t.upsert(
        pa.table({"a": pa.array(a_vals, t0), "b": pa.array(b_vals, t1), "v": pa.array(range(n), pa.int64())})
    )
    model = {(x, y): i for i, (x, y) in enumerate(zip(a_vals, b_vals))}
    idx = sorted(random.Random(3).sample(range(n), 30))
    t.upsert(
        pa.table(
            {
                "a": pa.array([a_vals[i] for i in idx[:15]], t0),
                "b": pa.array([b_vals[i] for i in idx[:15]], t1),
                "v": pa.array([-1] * 15, pa.int64()),
            }
        )
    )
    model.update({(a_vals[i], b_vals[i]): -1 for i in idx[:15]})
    f = None
    for i in idx:
        conj = (mere.col("a") == a_vals[i]) & (mere.col("b") == b_vals[i])
        f = conj if f is None else f | conj
        if i in idx[:4]:
            assert t.scan(filter=conj).to_arrow().column("v").to_pylist() == [model[(a_vals[i], b_vals[i])]]
    assert t.scan(filter=f).explain().key_lookup is not None
    got = sorted(t.scan(filter=f).to_arrow().column("v").to_pylist())
    assert got == sorted(model[(a_vals[i], b_vals[i])] for i in idx)
    src = pa.table(
        {
            "a": pa.array([a_vals[i] for i in idx], t0),
            "b": pa.array([b_vals[i] for i in idx], t1),
            "v": pa.array([7] * len(idx), pa.int64()),
        }
    )
    t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    model.update({(a_vals[i], b_vals[i]): 7 for i in idx})
    full = t.scan().to_arrow()
    assert (
        dict(
            zip(zip(full.column("a").to_pylist(), full.column("b").to_pylist()), full.column("v").to_pylist())
        )
        == model
    )


@pytest.mark.parametrize(
    ("typ", "stored", "lits"),
    [
        (
            pa.timestamp("s", "UTC"),
            [0, 3600],
            ["1970-01-01T01:00:00+01:00", "1970-01-01T00:00:00Z", "1970-01-01T01:00:00Z"],
        ),
        (
            pa.timestamp("ms", "Asia/Kolkata"),
            [0, 1],
            ["1970-01-01T05:30:00+05:30", "1970-01-01T00:00:00.001Z"],
        ),
        (
            pa.timestamp("ns"),
            [0, 1, -1],
            ["1970-01-01T00:00:00.000000001", "1969-12-31T23:59:59.999999999", "1970-01-01"],
        ),
        (
            pa.date32(),
            [0, 1, 19723],
            ["1970-01-01", dt.date(2024, 1, 1), dt.datetime(1970, 1, 2), dt.datetime(1970, 1, 2, 1)],
        ),
        (
            pa.decimal128(5, 2),
            [Decimal("1.00"), Decimal("999.99"), Decimal("-999.99")],
            [1, Decimal("999.999"), Decimal("-999.990"), 1000],
        ),
        (pa.int16(), [1, -(2**15), 2**15 - 1], [1, 40000, 2**63, -(2**15), Decimal("1.5")]),
    ],
    ids=["ts_s_utc", "ts_ms_kolkata", "ts_ns", "date32", "dec5_2", "int16"],
)
def test_in_list_equals_or_of_equalities(
    typ: pa.DataType, stored: list[Any], lits: list[Any], tmp_path: Path
) -> None:
    """``k IN (...)`` binds its literals in bulk; ``k = x OR ...`` one by one: both look up the same rows."""
    t = _table(tmp_path, "io", pa.schema([pa.field("k", typ, nullable=False), ("v", pa.int64())]), ["k"], 2)
    t.set_properties({"write.key-index": "on"})
    t.upsert(pa.table({"k": pa.array(stored, typ), "v": pa.array(range(len(stored)), pa.int64())}))
    ors = None
    each: list[int] = []
    for x in lits:
        ors = mere.col("k") == x if ors is None else ors | (mere.col("k") == x)
        each += t.scan(filter=mere.col("k") == x).to_arrow().column("v").to_pylist()
    got_in = sorted(t.scan(filter=mere.col("k").isin(lits)).to_arrow().column("v").to_pylist())
    assert got_in == sorted(t.scan(filter=ors).to_arrow().column("v").to_pylist()) == sorted(set(each))


def _pyarrow_bloom(values: pa.Array) -> tuple[Any, Any]:
    """A one-column file written by pyarrow with a Bloom filter and page index: (metadata, filter words)."""
    sink = pa.BufferOutputStream()
    table = pa.table({"k": values})
    with pq.ParquetWriter(
        sink,
        table.schema,
        bloom_filter_options={"k": {"ndv": len(values), "fpp": 0.05}},
        store_schema=False,
        write_page_index=True,
    ) as w:
        w.write_table(table)
    buf = sink.getvalue().to_pybytes()
    md = pq.read_metadata(pa.BufferReader(buf))
    col = md.row_group(0).column(0)
    parsed = keyindex.bloom_header(
        buf[col.bloom_filter_offset : col.bloom_filter_offset + col.bloom_filter_length]
    )
    assert parsed is not None
    size, head = parsed
    start = col.bloom_filter_offset + head
    return md, np.frombuffer(buf[start : start + size], dtype="<u4").reshape(-1, 8)


def _probe_cases() -> list[tuple[str, pa.Array]]:
    out = []
    for p in range(1, 19):
        for s in sorted({0, p // 2, p}):
            m = 10**p - 1
            vals = [-m, -m + 1, -1, 0, 1, m - 1, m, 2 ** (8 * ((p + 1) // 2)) // 3 % m]
            out.append((f"dec{p}_{s}", pa.array([Decimal(x).scaleb(-s) for x in vals], pa.decimal128(p, s))))
    out += [
        ("ts_s_paris", pa.array([-62135596800, -1, 0, 1, 253402300799], pa.timestamp("s", "Europe/Paris"))),
        ("ts_ns_utc", pa.array([-(2**63) + 1, -1, 0, 2**63 - 1], pa.timestamp("ns", "UTC"))),
        ("int8", pa.array([-128, -1, 0, 127], pa.int8())),
        ("int16", pa.array([-(2**15), -1, 0, 2**15 - 1], pa.int16())),
        ("date32", pa.array([-719162, -1, 0, 2932896], pa.date32())),
        ("string", pa.array(["", "\x00", "é", "z" * 100], pa.string())),
        ("large_binary", pa.array([b"", b"\xff" * 90, b"a"], pa.large_binary())),
    ]
    return out


@pytest.mark.parametrize(("name", "arr"), _probe_cases(), ids=[n for n, _ in _probe_cases()])
def test_probe_values_of_sliced_arrays_hit_pyarrow_bloom_filters(name: str, arr: pa.Array) -> None:
    """Probes hash the value as stored (decimals of every FLBA width, seconds stored as ms, small ints as
    INT32), also from arrays with an offset (a sliced MERGE source); their order lies in the stats range."""
    md, words = _pyarrow_bloom(arr)
    column = md.schema.column(0)
    shifted = pa.concat_arrays([arr[:1], arr, arr[-1:]]).slice(1, len(arr))
    for probe_arr in (arr, shifted, arr.slice(2)):
        probe = keyindex.probe_values(probe_arr, column)
        assert probe is not None, name
        blocks = keyindex.bloom_blocks(probe.hashes, len(words)).astype(np.int64)
        assert keyindex.bloom_contains(probe.hashes, words[blocks]).all(), (name, probe_arr.offset)
    probe = keyindex.probe_values(arr, column)
    assert probe is not None
    rng = keyindex.FileIndex(md).stats_range(0, 0)
    assert rng is not None
    assert rng[0] <= probe.order[0] and probe.order[-1] <= rng[1]
