"""Key indexes: point lookups and MERGE probes read only what may hold their keys, and nothing changes.

* The format pieces read by hand (``mere.io.keyindex``): XXH64, the plain encoding of every key type and
  split-block Bloom filters agree with what pyarrow writes (no inserted value is ever missed); footers
  survive a Thrift decode/encode byte for byte; a few rows read from their pages equal a full read.
* Differential: after random upserts (whole and partial rows), deletes and small MERGEs, lookups of
  present, deleted, absent and multi-version keys equal a dict model and a full read, for every key type
  (integers of all widths, strings, binaries, dates, timestamps, decimals, booleans, composite keys),
  with files written with the index, without it (as before it existed) and mixed.
* Bytes: a lookup reads fewer bytes than the same lookup of files without the index, skips files whose
  Bloom filters rule the key out, and reads no older version of a key a newer one settles; a MERGE
  source of many keys in a narrow key range reads their pages only (every version of its keys).
* Bad input: NULL and out-of-range literals, malformed index bytes, ranges past the end of a file.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable
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
from mere.errors import StorageError
from mere.io import keyindex
from mere.io.parquet import write_parquet
from mere.io.storage import Storage
from mere.read import lookup as lookup_module
from mere.table.ops import merge_into as merge_module

# -- key types --------------------------------------------------------------------------------------

KeyGen = Callable[[random.Random], Any]


def _text(r: random.Random) -> str:
    return "".join(r.choice(string.ascii_letters + "é€ \x00") for _ in range(r.randint(0, 45)))


def _bytes(r: random.Random) -> bytes:
    return bytes(r.randrange(256) for _ in range(r.randint(0, 45)))


EPOCH = dt.datetime(1970, 1, 1)

KEY_TYPES: dict[str, tuple[pa.DataType, KeyGen]] = {
    "int8": (pa.int8(), lambda r: r.randint(-128, 127)),
    "int16": (pa.int16(), lambda r: r.randint(-(2**15), 2**15 - 1)),
    "int32": (pa.int32(), lambda r: r.randint(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), lambda r: r.randint(-(2**63), 2**63 - 1)),
    "string": (pa.string(), _text),
    "large_string": (pa.large_string(), _text),
    "binary": (pa.binary(), _bytes),
    "large_binary": (pa.large_binary(), _bytes),
    "date32": (pa.date32(), lambda r: dt.date(2000, 1, 1) + dt.timedelta(days=r.randint(-30000, 30000))),
    "ts_s": (pa.timestamp("s"), lambda r: EPOCH + dt.timedelta(seconds=r.randint(-(10**9), 10**9))),
    "ts_ms_utc": (
        pa.timestamp("ms", "UTC"),
        lambda r: (
            dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=r.randint(-(10**12), 10**12))
        ),
    ),
    "ts_us": (pa.timestamp("us"), lambda r: EPOCH + dt.timedelta(microseconds=r.randint(-(10**15), 10**15))),
    "ts_ns": (pa.timestamp("ns"), lambda r: EPOCH + dt.timedelta(microseconds=r.randint(-(10**15), 10**15))),
    "decimal_10_2": (
        pa.decimal128(10, 2),
        lambda r: Decimal(r.randint(-(10**10) + 1, 10**10 - 1)).scaleb(-2),
    ),
    "decimal_18_0": (pa.decimal128(18, 0), lambda r: Decimal(r.randint(-(10**18) + 1, 10**18 - 1))),
    "decimal_3_1": (pa.decimal128(3, 1), lambda r: Decimal(r.randint(-999, 999)).scaleb(-1)),
    "bool": (pa.bool_(), lambda r: r.random() < 0.5),
}

COMPOSITE: dict[str, tuple[str, str]] = {
    "int32+string": ("int32", "string"),
    "string+date32": ("string", "date32"),
    "bool+int64": ("bool", "int64"),
    "decimal_10_2+binary": ("decimal_10_2", "binary"),
}


def _key_columns(kind: str) -> list[tuple[str, pa.DataType, KeyGen]]:
    parts = COMPOSITE.get(kind, (kind,))
    return [(f"k{i}", *KEY_TYPES[p]) for i, p in enumerate(parts)]


def _schema(keys: list[tuple[str, pa.DataType, KeyGen]]) -> pa.Schema:
    fields = [pa.field(name, t, nullable=False) for name, t, _ in keys]
    return pa.schema([*fields, pa.field("v", pa.int64()), pa.field("s", pa.string())])


def _key_pool(keys: list[tuple[str, pa.DataType, KeyGen]], r: random.Random, n: int) -> list[tuple[Any, ...]]:
    """``n`` distinct key tuples (fewer when the type has fewer values), as the table stores them."""
    seen: dict[tuple[Any, ...], None] = {}
    for _ in range(n * 20):
        if len(seen) >= n:
            break
        tup = tuple(gen(r) for _, _, gen in keys)
        stored = tuple(pa.array([v], type=t)[0].as_py() for v, (_, t, _) in zip(tup, keys))
        seen[stored] = None
    return list(seen)


def _rows(
    keys: list[tuple[str, pa.DataType, KeyGen]], tuples: list[tuple[Any, ...]], values: dict[str, list[Any]]
) -> pa.Table:
    cols: dict[str, pa.Array] = {
        name: pa.array([tup[i] for tup in tuples], type=t) for i, (name, t, _) in enumerate(keys)
    }
    for name, vals in values.items():
        cols[name] = pa.array(vals, type=pa.int64() if name == "v" else pa.string())
    return pa.table(cols)


def _key_filter(keys: list[tuple[str, pa.DataType, KeyGen]], wanted: list[tuple[Any, ...]]) -> Any:
    """``k = x`` for one key, ``k IN (...)`` for several, an OR of ANDs for composite keys."""
    if len(keys) == 1:
        name = keys[0][0]
        values = [w[0] for w in wanted]
        return mere.col(name) == values[0] if len(values) == 1 else mere.col(name).isin(values)
    expr: Any = None
    for tup in wanted:
        conj: Any = None
        for (name, _, _), v in zip(keys, tup):
            term = mere.col(name) == v
            conj = term if conj is None else conj & term
        expr = conj if expr is None else expr | conj
    return expr


def _canon(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(row[c] for c in names) for row in table.to_pylist()), key=repr)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 8 rows, so that small tables have several pages per row group."""
    monkeypatch.setattr(keyindex, "PAGE_ROWS", 8)


def _table(
    tmp_path: Path, kind: str, name: str = "t", **kw: Any
) -> tuple[mere.Table, list[tuple[str, pa.DataType, KeyGen]]]:
    keys = _key_columns(kind)
    cat = mere.connect(str(tmp_path / "wh"))
    props = {"write.row-group-rows": "32", **kw.pop("properties", {})}
    t = cat.create_table(
        f"ns.{name}",
        _schema(keys),
        primary_key=[k for k, _, _ in keys],
        buckets=kw.pop("buckets", 2),
        properties=props,
        **kw,
    )
    return t, keys


# -- the format pieces ------------------------------------------------------------------------------


def test_xxh64_known_values() -> None:
    values = [b"", b"a", b"abc"]
    data = np.frombuffer(b"".join(values), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(v) for v in values])
    assert [int(h) for h in keyindex.xxh64(data, offsets)] == [
        0xEF46DB3751D8E999,
        0xD24EC4F1A98C6E5B,
        0x44BC2CF5AD770999,
    ]


def _written_filter(values: pa.Array) -> tuple[pq.ColumnSchema, np.ndarray]:
    """A one-column file with a Bloom filter on ``values``: its column and the filter's words."""
    sink = pa.BufferOutputStream()
    table = pa.table({"k": values})
    with pq.ParquetWriter(
        sink, table.schema, bloom_filter_options={"k": {"ndv": len(values), "fpp": 0.05}}, store_schema=False
    ) as w:
        w.write_table(table)
    buf = sink.getvalue().to_pybytes()
    md = pq.read_metadata(pa.BufferReader(buf))
    col = md.row_group(0).column(0)
    offset, length = col.bloom_filter_offset, col.bloom_filter_length
    parsed = keyindex.bloom_header(buf[offset : offset + length])
    assert parsed is not None
    size, head = parsed
    words = np.frombuffer(buf[offset + head : offset + head + size], dtype="<u4").reshape(-1, 8)
    return md.schema.column(0), words


@pytest.mark.parametrize("kind", [k for k in KEY_TYPES if k != "bool"])
def test_bloom_filters_written_by_pyarrow_hold_every_value(kind: str) -> None:
    """Hash, plain encoding and block layout all agree with Arrow's writer: every written value is
    found, and values not written mostly are not."""
    t, gen = KEY_TYPES[kind]
    r = random.Random(kind)
    written = pa.array([gen(r) for _ in range(2000)], type=t)
    others = pa.array([gen(r) for _ in range(2000)], type=t)
    column, words = _written_filter(written)
    probe = keyindex.probe_values(written, column)
    assert probe is not None
    blocks = keyindex.bloom_blocks(probe.hashes, len(words)).astype(np.int64)
    assert keyindex.bloom_contains(probe.hashes, words[blocks]).all()
    absent = pa.array(sorted(set(others.to_pylist()) - set(written.to_pylist()), key=repr), type=t)
    if len(absent) > 200:
        p = keyindex.probe_values(absent, column)
        assert p is not None
        hits = keyindex.bloom_contains(
            p.hashes, words[keyindex.bloom_blocks(p.hashes, len(words)).astype(np.int64)]
        )
        assert hits.mean() < 0.2


def test_probe_order_sorts_like_statistics() -> None:
    values = pa.array([5, -3, 100, 0], pa.int32())
    column, _ = _written_filter(values)
    probe = keyindex.probe_values(values, column)
    assert probe is not None
    assert probe.order.tolist() == [-3, 0, 5, 100]
    assert sorted(probe.within(-3, 5).tolist()) == [0, 1, 3]
    assert probe.within(6, 99).tolist() == []


def test_thrift_round_trips_footers_byte_for_byte(tmp_path: Path) -> None:
    t, keys = _table(tmp_path, "int32+string")
    r = random.Random(1)
    pool = _key_pool(keys, r, 200)
    t.upsert(_rows(keys, pool, {"v": list(range(len(pool))), "s": [str(i) for i in range(len(pool))]}))
    for path in t.files().column("path").to_pylist():
        md = pq.read_metadata(t.storage.full_path(path))
        raw = memoryview(md.__reduce__()[1][0]).tobytes()
        decoded, end = keyindex.decode(raw)
        assert end == len(raw)
        assert keyindex.encode(decoded) == raw


def test_thrift_rejects_truncated_bytes() -> None:
    raw = keyindex.encode({1: (5, 7), 2: (8, b"hello")})
    with pytest.raises(keyindex.ThriftError):
        keyindex.decode(raw[:-3])
    with pytest.raises(keyindex.ThriftError):
        keyindex.decode(b"\x19\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")


def test_bloom_header_refuses_what_it_does_not_know() -> None:
    assert keyindex.bloom_header(b"") is None
    assert keyindex.bloom_header(b"\x00") is None  # no size
    # 64 bytes, but hashed with something other than XXH64 (union field 2)
    odd = keyindex.encode(
        {1: (5, 64), 2: (12, {1: (12, {})}), 3: (12, {2: (12, {})}), 4: (12, {1: (12, {})})}
    )
    assert keyindex.bloom_header(odd) is None
    good = keyindex.encode(
        {1: (5, 64), 2: (12, {1: (12, {})}), 3: (12, {1: (12, {})}), 4: (12, {1: (12, {})})}
    )
    assert keyindex.bloom_header(good) == (64, len(good))


def test_probe_values_refuse_unknown_encodings() -> None:
    column, _ = _written_filter(pa.array([1, 2], pa.int64()))
    assert keyindex.probe_values(pa.array([1.5]), column) is None  # a float probe for an integer column
    assert keyindex.probe_values(pa.array(["x"]), column) is None


@pytest.mark.usefixtures("small_pages")
def test_rows_read_from_their_pages_equal_a_full_read(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("l", pa.list_(pa.int32())),
            pa.field("st", pa.struct([("x", pa.int64()), ("y", pa.string())])),
            pa.field("m", pa.map_(pa.string(), pa.int64())),
            pa.field("d", pa.string()),
        ]
    )
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table(
        "ns.nested", schema, primary_key="k", buckets=1, properties={"write.row-group-rows": "40"}
    )
    n = 100
    t.upsert(
        pa.table(
            {
                "k": list(range(n)),
                "l": [[i, i + 1] if i % 3 else None for i in range(n)],
                "st": [{"x": i, "y": str(i)} if i % 5 else None for i in range(n)],
                "m": [[("a", i)] if i % 2 else [] for i in range(n)],
                "d": [f"v{i % 4}" for i in range(n)],  # dictionary-encoded
            },
            schema=schema,
        )
    )
    (path,) = t.files().column("path").to_pylist()
    full = pq.read_table(t.storage.full_path(path))
    leaves = t.storage.column_leaves(path)
    md = t.storage.metadata(path)
    r = random.Random(3)
    starts = np.cumsum([0] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
    for _ in range(8):
        wanted = {
            rg: np.array(sorted(r.sample(range(md.row_group(rg).num_rows), r.randint(1, 2))), dtype=np.int64)
            for rg in range(md.num_row_groups)
            if r.random() < 0.7
        }
        got = keyindex.read_rows(t.storage, path, None, wanted, full.column_names, leaves)
        assert got  # some row groups are read from their pages; the others are left to a whole read
        for rg, table in got.items():
            want = full.take(pa.array(starts[rg] + wanted[rg]))
            assert table.to_pylist() == want.to_pylist()


def test_read_ranges_past_the_end_fail(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    write_parquet(storage, "a.parquet", pa.table({"k": [1, 2]}), row_group_rows=10, sorting_columns=["k"])
    size = (tmp_path / "a.parquet").stat().st_size
    assert storage.read_ranges("a.parquet", [(0, 4), (size - 4, 4)]) == [b"PAR1", b"PAR1"]
    with pytest.raises(StorageError):
        storage.read_ranges("a.parquet", [(size - 2, 10)])


# -- differential -----------------------------------------------------------------------------------


class Model:
    """The merged rows a table must hold: key tuple -> {"v": ..., "s": ...}."""

    def __init__(self, sum_v: bool) -> None:
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.sum_v = sum_v

    def upsert(self, tuples: list[tuple[Any, ...]], values: dict[str, list[Any]]) -> None:
        for i, tup in enumerate(tuples):
            row = self.rows.setdefault(tup, {"v": None, "s": None})
            for c, vals in values.items():
                if c == "v" and self.sum_v:
                    row[c] = vals[i] if row[c] is None else (row[c] if vals[i] is None else row[c] + vals[i])
                else:
                    row[c] = vals[i]

    def put(self, tuples: list[tuple[Any, ...]], values: dict[str, list[Any]]) -> None:
        for i, tup in enumerate(tuples):
            self.rows[tup] = {c: values[c][i] for c in ("v", "s")}

    def delete(self, tuples: list[tuple[Any, ...]]) -> None:
        for tup in tuples:
            self.rows.pop(tup, None)


def _apply(
    t: mere.Table,
    keys: list[tuple[str, pa.DataType, KeyGen]],
    model: Model,
    op: str,
    tuples: list[tuple[Any, ...]],
    seed: int,
) -> None:
    tuples = list(dict.fromkeys(tuples))
    if not tuples:
        return
    vals = [seed * 1000 + i for i in range(len(tuples))]
    strs = [f"s{seed}-{i}" for i in range(len(tuples))]
    if op == "upsert":
        t.upsert(_rows(keys, tuples, {"v": vals, "s": strs}))
        model.upsert(tuples, {"v": vals, "s": strs})
    elif op == "partial":  # a file lacking column s: older versions still give it
        t.upsert(_rows(keys, tuples, {"v": vals}))
        model.upsert(tuples, {"v": vals})
    elif op == "delete":
        t.delete(_rows(keys, tuples, {}))
        model.delete(tuples)
    elif op == "merge":  # a small MERGE: looked up by key; matched rows are put whole
        source = _rows(keys, tuples, {"v": vals, "s": strs})
        t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
        model.put(tuples, {"v": vals, "s": strs})


def _check_lookups(
    t: mere.Table, keys: list[tuple[str, pa.DataType, KeyGen]], model: Model, probes: list[tuple[Any, ...]]
) -> None:
    names = [k for k, _, _ in keys] + ["v", "s"]
    full = _canon(t.to_arrow(), names)
    assert full == sorted(((*k, r["v"], r["s"]) for k, r in model.rows.items()), key=repr)
    if not probes:
        return
    expected = sorted(
        ((*p, model.rows[p]["v"], model.rows[p]["s"]) for p in dict.fromkeys(probes) if p in model.rows),
        key=repr,
    )
    got = _canon(t.scan(filter=_key_filter(keys, probes)).to_arrow(), names)
    assert got == expected
    for p in probes[:3]:  # single-key lookups, and count() through the same path
        one = _canon(t.scan(filter=_key_filter(keys, [p])).to_arrow(), names)
        assert one == [e for e in expected if tuple(e[: len(keys)]) == p]
        assert t.scan(filter=_key_filter(keys, [p])).count() == len(one)


def _scenario(
    t: mere.Table,
    keys: list[tuple[str, pa.DataType, KeyGen]],
    model: Model,
    ops: list[tuple[str, list[int]]],
    pool: list[tuple[Any, ...]],
) -> list[tuple[Any, ...]]:
    for seed, (op, picks) in enumerate(ops):
        _apply(t, keys, model, op, [pool[i % len(pool)] for i in picks], seed)
    return pool


OPS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "upsert", "partial", "delete", "merge"]),
        st.lists(st.integers(0, 80), min_size=1, max_size=60),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.usefixtures("small_pages")
@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from([*KEY_TYPES, *COMPOSITE]),
    ops=OPS,
    probes=st.lists(st.integers(0, 120), min_size=1, max_size=12),
    sum_v=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_lookups_match_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    ops: list[tuple[str, list[int]]],
    probes: list[int],
    sum_v: bool,
    seed: int,
) -> None:
    tmp = tmp_path_factory.mktemp("lookups")
    t, keys = _table(tmp, kind, merge_operators={"v": "sum"} if sum_v else None)
    model = Model(sum_v)
    pool = _key_pool(keys, random.Random(seed), 100)  # probes past the pool's end: absent keys
    absent = _key_pool(keys, random.Random(seed + 1), 140)
    everything = pool + [a for a in absent if a not in set(pool)]
    _scenario(t, keys, model, ops, pool)
    _check_lookups(t, keys, model, [everything[i % len(everything)] for i in probes])


@pytest.mark.usefixtures("small_pages")
@pytest.mark.parametrize("kind", [*KEY_TYPES, *COMPOSITE])
def test_every_key_type(tmp_path: Path, kind: str) -> None:
    """One fixed scenario per key type: keys in several files, deleted, partially updated, absent."""
    t, keys = _table(tmp_path, kind)
    model = Model(sum_v=False)
    pool = _key_pool(keys, random.Random(kind), 120)
    ops = [
        ("upsert", list(range(0, 100))),
        ("upsert", list(range(0, 100, 3))),
        ("partial", list(range(1, 100, 7))),
        ("delete", list(range(2, 100, 11))),
        ("merge", [5, 17, 18, 110]),
        ("upsert", list(range(90, 110))),
    ]
    _scenario(t, keys, model, ops, pool)
    _check_lookups(
        t, keys, model, [pool[i % len(pool)] for i in (0, 1, 2, 3, 5, 13, 24, 57, 99, 105, 115, 119)]
    )


@pytest.mark.usefixtures("small_pages")
@pytest.mark.parametrize("kind", ["int64", "string", "int32+string"])
def test_files_without_the_index_read_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Files written before key indexes existed (no Bloom filter, no page index) and mixed splits."""
    t, keys = _table(tmp_path, kind)
    model = Model(sum_v=False)
    pool = _key_pool(keys, random.Random(7), 120)
    monkeypatch.setattr(keyindex, "WRITE_INDEX", False)
    _scenario(t, keys, model, [("upsert", list(range(100))), ("partial", list(range(0, 100, 5)))], pool)
    for path in t.files().column("path").to_pylist():
        assert not keyindex.file_index(t.storage, path, None).has_page_index
    probes = [pool[i] for i in (0, 3, 5, 50, 99, 110)]
    _check_lookups(t, keys, model, probes)
    monkeypatch.setattr(keyindex, "WRITE_INDEX", True)
    _scenario(
        t,
        keys,
        model,
        [("upsert", list(range(50, 110))), ("delete", [3, 51, 60]), ("merge", [0, 5, 111])],
        pool,
    )
    _check_lookups(t, keys, model, probes + [pool[i] for i in (51, 60, 111)])
    t.compact(min_files=1)
    _check_lookups(t, keys, model, probes)


def test_partitioned_table(tmp_path: Path, small_pages: None) -> None:
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), pa.field("day", pa.string()), pa.field("v", pa.int64())]
    )
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table(
        "ns.p",
        schema,
        primary_key="k",
        partition_by=["day"],
        buckets=2,
        properties={"write.row-group-rows": "16"},
        key_scope="partition",  # one key in several partitions: the index is looked up in each
    )
    t.upsert(
        pa.table({"k": list(range(60)), "day": ["a", "b", None] * 20, "v": list(range(60))}, schema=schema)
    )
    t.upsert(pa.table({"k": [1, 2, 3], "day": ["a", "b", None], "v": [-1, -2, -3]}, schema=schema))
    got = t.scan(filter="k IN (1, 2, 3, 4, 99)").to_arrow().to_pylist()
    want = [
        {"k": 1, "day": "b", "v": 1},
        {"k": 1, "day": "a", "v": -1},
        {"k": 2, "day": None, "v": 2},
        {"k": 2, "day": "b", "v": -2},
        {"k": 3, "day": "a", "v": 3},
        {"k": 3, "day": None, "v": -3},
        {"k": 4, "day": "b", "v": 4},
    ]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert t.scan(filter="k = 2 AND day IS NULL").to_arrow().to_pylist() == [{"k": 2, "day": None, "v": 2}]


# -- bytes ------------------------------------------------------------------------------------------


def _build(
    root: Path,
    indexed: bool,
    monkeypatch: pytest.MonkeyPatch,
    upserts: int = 6,
    buckets: int = 1,
    upsert_rows: int = 2000,
) -> mere.Table:
    monkeypatch.setattr(keyindex, "WRITE_INDEX", indexed)
    cat = mere.connect(str(root))
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("a", pa.int64()), pa.field("b", pa.string())]
    )
    t = cat.create_table("ns.t", schema, primary_key="id", buckets=buckets)
    rng = np.random.default_rng(0)
    n = 40_000
    t.upsert(
        pa.table(
            {"id": np.arange(n) * 2, "a": rng.integers(0, 1 << 40, n), "b": [f"x{i}" for i in range(n)]},
            schema=schema,
        )
    )
    for u in range(upserts):
        # odd keys across the base's whole key range: only Bloom filters tell these files apart
        ids = np.unique(rng.choice(n * 2, upsert_rows, replace=False) | 1)
        t.upsert(pa.table({"id": ids, "a": ids, "b": [f"u{u}"] * len(ids)}, schema=schema))
    monkeypatch.setattr(keyindex, "WRITE_INDEX", True)
    return t


def _bytes_of(t: mere.Table, filter_: Any) -> tuple[int, pa.Table]:
    t.storage.clear_cache()
    t.storage.stats.reset()
    rows = t.scan(filter=filter_).to_arrow()
    return t.storage.stats.bytes_read, rows


def test_lookups_read_fewer_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_index = _build(tmp_path / "with", True, monkeypatch)
    without = _build(tmp_path / "without", False, monkeypatch)
    for key in (2 * 1234, 2 * 39_000):  # in the base file only
        indexed, rows = _bytes_of(with_index, f"id = {key}")
        plain, rows_plain = _bytes_of(without, f"id = {key}")
        assert rows.to_pylist() == rows_plain.to_pylist() and rows.num_rows == 1
        assert indexed * 2 < plain, (indexed, plain)
    # Bloom filters rule out the six upserts' files: one file is read beyond footers
    ex = with_index.scan(filter="id = 2468").explain()
    assert (ex.files_kept, ex.files_total) == (1, 7)
    # An IN list of keys, some absent everywhere
    indexed, rows = _bytes_of(with_index, "id IN (2, 4, 6, 7, 9, 100001)")
    plain, rows_plain = _bytes_of(without, "id IN (2, 4, 6, 7, 9, 100001)")
    assert sorted(rows.to_pylist(), key=repr) == sorted(rows_plain.to_pylist(), key=repr)
    assert indexed < plain


def test_settled_versions_are_not_read(tmp_path: Path, small_pages: None) -> None:
    """A whole newer version (or a delete) settles its key: the older file's pages are not read. A
    partial newer version does not, and a sum column needs every version."""
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("a", pa.int64()), pa.field("b", pa.string())]
    )
    rows = pa.table(
        {"id": list(range(400)), "a": list(range(400)), "b": [f"x{i}" * 20 for i in range(400)]},
        schema=schema,
    )
    for name, operators in (("last", None), ("sum", {"a": "sum"})):
        t = cat.create_table(f"ns.{name}", schema, primary_key="id", buckets=1, merge_operators=operators)
        t.upsert(rows)
        t.upsert(pa.table({"id": [7], "a": [70], "b": ["new"]}, schema=schema))  # whole row
        t.upsert(pa.table({"id": [8], "a": [80]}))  # partial: b comes from the base file
        t.delete("id = 9")
        whole, got = _bytes_of(t, "id = 7")
        assert got.to_pylist() == [{"id": 7, "a": 77 if name == "sum" else 70, "b": "new"}]
        partial, got = _bytes_of(t, "id = 8")
        assert got.to_pylist() == [{"id": 8, "a": 88 if name == "sum" else 80, "b": "x8" * 20}]
        gone, got = _bytes_of(t, "id = 9")
        assert got.num_rows == 0
        if name == "last":
            assert whole < partial, (whole, partial)  # the base file's pages are not read for id 7
            assert gone < partial


@pytest.mark.usefixtures("small_pages")
def test_merge_probes_read_fewer_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = {}
    for lookup in (True, False):
        t = _build(tmp_path / f"m{lookup}", True, monkeypatch, upserts=3)
        monkeypatch.setattr(merge_module, "MERGE_LOOKUP_KEYS", 256 if lookup else 0)
        if not lookup:  # nor looked up for falling in a narrow key range: read by row groups
            monkeypatch.setattr(lookup_module, "few_pages", lambda *args, **kwargs: False)
        source = pa.table({"id": [2, 4, 3, 160_009], "a": [1, 2, 3, 4], "b": ["m"] * 4})
        t.storage.clear_cache()
        t.storage.stats.reset()
        metrics = t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
        results[lookup] = (
            t.storage.stats.bytes_read,
            metrics.updated,
            metrics.inserted,
            _canon(t.to_arrow(), ["id", "a", "b"]),
        )
    assert results[True][1:] == results[False][1:]
    assert results[True][0] < results[False][0]


def test_large_merge_sources_are_pruned_by_bloom_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the lookup size a MERGE reads row groups whole, but only those its keys may be in."""
    ids = list(range(0, 8000, 20)) + [10**9 + i for i in range(5)]  # even: in the base file only
    assert len(ids) > merge_module.MERGE_LOOKUP_KEYS
    source = pa.table({"id": ids, "a": list(range(len(ids))), "b": ["big"] * len(ids)})
    results = []
    for indexed in (True, False):
        t = _build(tmp_path / f"big{indexed}", indexed, monkeypatch, upserts=3, buckets=8, upsert_rows=20_000)
        model = {r["id"]: (r["a"], r["b"]) for r in t.to_arrow().to_pylist()}
        t.storage.clear_cache()
        t.storage.stats.reset()
        t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
        results.append(t.storage.stats.bytes_read)
        model.update({i: (a, "big") for i, a in zip(ids, range(len(ids)))})
        assert {r["id"]: (r["a"], r["b"]) for r in t.to_arrow().to_pylist()} == model
    assert results[0] < results[1]  # the upserts' files hold none of the source keys


def _merge_table(root: Path, sum_a: bool) -> mere.Table:
    """Keys 0..19,999 in 2 buckets (row groups of 1,024 rows, pages of 64), then versions in the window
    5,000..5,999 only: whole rows, partial rows (column a alone) and deletes, each in files of their own."""
    cat = mere.connect(str(root))
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("a", pa.int64()), pa.field("b", pa.string())]
    )
    t = cat.create_table(
        "ns.t",
        schema,
        primary_key="id",
        buckets=2,
        merge_operators={"a": "sum"} if sum_a else None,
        properties={"write.row-group-rows": "1024"},
    )
    n = 20_000
    t.upsert(
        pa.table({"id": np.arange(n), "a": np.arange(n), "b": [f"x{i}" for i in range(n)]}, schema=schema)
    )
    t.upsert(
        pa.table({"id": np.arange(5000, 6000, 3), "a": np.full(334, 7), "b": ["whole"] * 334}, schema=schema)
    )
    t.upsert(pa.table({"id": np.arange(5001, 6000, 5), "a": np.full(200, 1000)}))  # partial: a only
    t.delete(pa.table({"id": np.arange(5002, 6000, 7)}))
    return t


@pytest.mark.parametrize("sum_a", [False, True])
def test_merge_of_a_narrow_key_range_reads_its_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sum_a: bool
) -> None:
    """A MERGE source of more keys than are looked up one by one, all in a narrow key range, reads the
    pages whose key min/max admit one (every version of its keys: whole, partial, deleted and summed
    ones) rather than whole row groups: the same rows and counts, fewer bytes. A source spread over the
    key range reads what it did."""
    monkeypatch.setattr(keyindex, "PAGE_ROWS", 64)
    narrow = np.arange(5100, 5900, 2)  # updated keys, and deleted ones inserted again
    spread = np.arange(3, 20_000, 50)
    assert min(len(narrow), len(spread)) > merge_module.MERGE_LOOKUP_KEYS
    decide = lookup_module.few_pages
    for keys, paged in ((narrow, True), (spread, False)):
        source = pa.table({"id": keys, "a": np.ones(len(keys), np.int64), "b": ["m"] * len(keys)})
        bytes_read = {}
        for allowed in (True, False):
            t = _merge_table(tmp_path / f"{paged}-{allowed}", sum_a)
            model = {r["id"]: (r["a"], r["b"]) for r in t.to_arrow().to_pylist()}
            chosen: list[bool] = []

            def few_pages(*args: Any, allowed: bool = allowed, chosen: list[bool] = chosen) -> bool:
                chosen.append(allowed and decide(*args))
                return chosen[-1]

            with monkeypatch.context() as m:
                m.setattr(lookup_module, "few_pages", few_pages)
                t.storage.clear_cache()
                t.storage.stats.reset()
                metrics = (
                    t.merge(source)
                    .when_matched_update(set={"a": "t.a + s.a", "b": "s.b"})
                    .when_not_matched_insert_all()
                    .execute()
                )
                bytes_read[allowed] = t.storage.stats.bytes_read
            assert chosen == [allowed and paged] * 2  # one decision per bucket
            held = [int(k) for k in keys if k in model]
            model.update({k: (model[k][0] + 1, "m") for k in held})
            model.update({int(k): (1, "m") for k in keys if k not in model})
            assert (metrics.updated, metrics.inserted) == (len(held), len(keys) - len(held))
            assert {r["id"]: (r["a"], r["b"]) for r in t.to_arrow().to_pylist()} == model
        if paged:  # (the footers of the small files are most of the bytes here)
            assert bytes_read[True] < bytes_read[False], bytes_read
        else:
            assert bytes_read[True] == bytes_read[False], bytes_read


# -- bad input --------------------------------------------------------------------------------------


def test_literals_a_key_cannot_hold(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int8(), nullable=False), pa.field("v", pa.int64())])
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("ns.small", schema, primary_key="k")
    t.upsert(pa.table({"k": [1, 2, 3], "v": [10, 20, 30]}, schema=schema))
    assert t.scan(filter="k = 1000").to_arrow().num_rows == 0
    assert t.scan(filter="k IN (1, 1000, -1000)").to_arrow().to_pylist() == [{"k": 1, "v": 10}]
    assert t.scan(filter="k IN (1, NULL)").to_arrow().to_pylist() == [{"k": 1, "v": 10}]
    assert t.scan(filter="k IS NULL").to_arrow().num_rows == 0
    assert t.scan(filter="k = 1.5").to_arrow().num_rows == 0
    assert t.scan(filter=mere.col("k").isin([])).to_arrow().num_rows == 0


def test_corrupt_bloom_filter_header_prunes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter whose header is not the one expected rules nothing out (the key is still found)."""
    t, _ = _table(tmp_path, "int64")
    t.upsert(pa.table({"k0": list(range(100)), "v": list(range(100)), "s": ["a"] * 100}, schema=t.schema))
    monkeypatch.setattr(keyindex, "bloom_header", lambda buf: None)
    assert t.scan(filter="k0 = 42").to_arrow().to_pylist() == [{"k0": 42, "v": 42, "s": "a"}]
    assert t.scan(filter="k0 = 4242").to_arrow().num_rows == 0
