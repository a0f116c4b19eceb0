"""Trial 59a: string and binary primary keys (and string partition columns) at their edges.

Empty values, NUL characters, 4-byte UTF-8, long shared prefixes, values longer than 4096 bytes (Parquet
drops their row-group statistics and truncates page-index min/max), invalid UTF-8 and 0xFF bytes in
binaries, over string, large_string, binary and large_binary keys (and string_view / binary_view input),
compound keys and table-wide keys across partitions. Every read (full scans, small key windows, point
lookups, IN lists, ranges, prefixes, counts, min/max, time travel, the change feed) is compared with a
plain dict model."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere

LONG = "p" * 5000
STR_POOL = [
    "",
    "\x00",
    "\x00\x00",
    "a",
    "a\x00",
    "a\x00b",
    "é",
    "\U0001f600",
    "\U0001f600\x00",
    "\uffff",
    "\U0010ffff",
    LONG,
    LONG + "a",
    LONG + "b",
    LONG + "\x00",
    LONG + "\U0001f600",
    "q" * 4097,
    "\U0010ffff" * 1100,
    "z" * 70,
    "z" * 69 + "\x7f",
]
BLONG = b"\xff" * 5000
BIN_POOL = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"\xff",
    b"\xff\xff",
    b"\xc3\x28",
    b"\xfe" + b"\xff" * 100,
    b"\xff" * 100,
    BLONG,
    BLONG + b"\x00",
    BLONG + b"\xff",
    b"a" * 4097,
    b"a" * 4096 + b"\xff",
    b"\x80" * 5000,
    b"\x7f" * 64 + b"\xff",
    b"\x7f" * 64 + b"\x80",
]
TYPES = {
    "string": (pa.string(), STR_POOL),
    "large_string": (pa.large_string(), STR_POOL),
    "binary": (pa.binary(), BIN_POOL),
    "large_binary": (pa.large_binary(), BIN_POOL),
}


def to_sql(value: Any) -> str:
    """A SQL literal written here (not by mere): 'text' with quotes doubled, X'hex' for bytes."""
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    return "'" + value.replace("'", "''") + "'"


def _filler(kind: str, n: int) -> list[Any]:
    """Long keys spread over the pool's range, so files hold several row groups and pages."""
    if TYPES[kind][1] is STR_POOL:
        return [f"{c}{i:04d}" + "x" * 4200 for i in range(n) for c in "Apz"][:n]
    return [bytes([c]) + i.to_bytes(2, "big") + b"y" * 4200 for i in range(n) for c in (0x01, 0x7F, 0xFE)][:n]


def _schema(kind: str) -> pa.Schema:
    return pa.schema([("id", TYPES[kind][0]), ("v", pa.int64())])


def _table(tmp: Path, schema: pa.Schema, **options: Any) -> mere.Table:
    options.setdefault("properties", {"compaction.auto": "off"})
    return mere.connect(str(tmp / uuid.uuid4().hex)).create_table("ns.t", schema, **options)


def _rows(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    """Tuples whose fields follow the schema's columns, as a table."""
    return pa.table([[r[i] for r in rows] for i in range(len(schema))], schema=schema)


def _state(t: mere.Table, **scan: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for r in t.scan(**scan).to_arrow().to_pylist():
        assert r["id"] not in out, f"key {r['id']!r:.40} live twice"
        out[r["id"]] = r["v"]
    return out


def _short(d: dict[Any, int]) -> dict[str, int]:
    """Keys shortened for readable diffs (a digest keeps them distinct)."""
    return {
        repr(k)[:30] + f"..len{len(k)}.{hashlib.sha1(repr(k).encode()).hexdigest()[:8]}": v
        for k, v in d.items()
    }


def _check(t: mere.Table, model: dict[Any, int], pool: list[Any], version: int | None = None) -> None:
    full = _state(t, version=version)
    assert _short(full) == _short(model) and full == model
    assert _state(t, version=version, window_bytes=4096) == model
    assert t.scan(version=version).count() == len(model)
    # point lookups: every pool key, present or not
    for k in pool:
        got = _state(t, version=version, filter=f"id = {to_sql(k)}")
        assert got == ({k: model[k]} if k in model else {}), f"lookup {k!r:.40} len {len(k)}"
    # IN lists
    for chunk in (pool[::2], pool[1::2], pool[-6:]):
        lit = ", ".join(to_sql(k) for k in chunk)
        got = _state(t, version=version, filter=f"id IN ({lit})")
        assert got == {k: model[k] for k in chunk if k in model}
    # ranges
    for k in pool[::3]:
        for op, fn in ((">", lambda a, b: a > b), ("<=", lambda a, b: a <= b), (">=", lambda a, b: a >= b)):
            got = _state(t, version=version, filter=f"id {op} {to_sql(k)}")
            want = {x: y for x, y in model.items() if fn(x, k)}
            assert got == want, f"id {op} {k!r:.40} len {len(k)}"
    if model:
        mn, mx = t.scan(version=version).min("id"), t.scan(version=version).max("id")
        assert mn == min(model) and mx == max(model), (repr(mn)[:40], repr(mx)[:40])


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"), st.lists(st.tuples(st.integers(0, 99), st.integers(0, 999)), max_size=8)
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 99), min_size=1, max_size=4)),
        st.tuples(st.just("delete_gt"), st.integers(0, 99)),
        st.tuples(st.just("update"), st.integers(0, 99), st.integers(0, 999)),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("kind", list(TYPES))
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, buckets=st.sampled_from([1, 2]))
def test_edge_keys_equal_a_dict(tmp_path: Path, kind: str, ops: list[Any], buckets: int) -> None:
    typ, pool = TYPES[kind]
    t = _table(tmp_path, _schema(kind), primary_key="id", buckets=buckets)
    filler = _filler(kind, 300)
    model: dict[Any, int] = {k: 7 for k in filler}
    model.update({k: i for i, k in enumerate(pool)})
    t.upsert(pa.table({"id": pa.array(list(model), typ), "v": list(model.values())}))
    versions = [(t.version, dict(model))]

    def key(i: int) -> Any:
        return pool[i % len(pool)]

    for op in ops:
        if op[0] == "upsert":
            rows = {key(i): v for i, v in op[1]}
            if not rows:
                continue
            t.upsert(pa.table({"id": pa.array(list(rows), typ), "v": list(rows.values())}))
            model.update(rows)
        elif op[0] == "delete":
            ks = list({key(i): None for i in op[1]})
            t.delete(pa.table({"id": pa.array(ks, typ)}))
            for k in ks:
                model.pop(k, None)
        elif op[0] == "delete_gt":
            k = key(op[1])
            t.delete(f"id > {to_sql(k)} AND v < 500")
            model = {x: y for x, y in model.items() if not (x > k and y < 500)}
        elif op[0] == "update":
            k = key(op[1])
            t.update({"v": str(op[2])}, where=f"id = {to_sql(k)}")
            if k in model:
                model[k] = op[2]
        else:
            t.compact()
        versions.append((t.version, dict(model)))
    _check(t, model, pool)
    for v, m in versions[:-1][-2:]:
        assert _state(t, version=v) == m


@pytest.mark.parametrize("kind", ["string", "binary"])
def test_prefix_like_and_long_windows(tmp_path: Path, kind: str) -> None:
    typ, pool = TYPES[kind]
    t = _table(tmp_path, _schema(kind), primary_key="id", buckets=1)
    filler = _filler(kind, 500)
    model = {k: 1 for k in filler}
    t.upsert(pa.table({"id": pa.array(filler, typ), "v": [1] * len(filler)}))
    second = {k: i for i, k in enumerate(pool)}
    t.upsert(pa.table({"id": pa.array(list(second), typ), "v": list(second.values())}))
    model.update(second)
    _check(t, model, pool)
    if kind == "string":
        for prefix in ("p" * 4999, "p" * 5000, "\U0001f600", "a", "z" * 69, "q"):
            got = _state(t, filter=f"id LIKE {to_sql(prefix + '%')}")
            assert got == {k: v for k, v in model.items() if k.startswith(prefix)}, prefix[:10]
    # key-range windows: a narrow window between two long keys
    lo, hi = pool[-9], pool[-6] if kind == "string" else pool[-5]
    lo, hi = min(lo, hi), max(lo, hi)
    got = _state(t, filter=f"id >= {to_sql(lo)} AND id < {to_sql(hi)}", window_bytes=4096)
    assert got == {k: v for k, v in model.items() if lo <= k < hi}


@pytest.mark.parametrize("view", [pa.string_view(), pa.binary_view()])
def test_view_input_into_string_and_binary_keys(tmp_path: Path, view: pa.DataType) -> None:
    kind = "string" if view == pa.string_view() else "binary"
    pool = TYPES[kind][1]
    t = _table(tmp_path, _schema(kind), primary_key="id", buckets=2)
    data = pa.table({"id": pa.array(pool, view), "v": pa.array(range(len(pool)), pa.int64())})
    t.upsert(data)
    model = {k: i for i, k in enumerate(pool)}
    t.upsert(pa.table({"id": pa.array(pool[:5], view), "v": pa.array([100] * 5, pa.int64())}))
    model.update({k: 100 for k in pool[:5]})
    t.delete(pa.table({"id": pa.array(pool[5:8], view)}))
    for k in pool[5:8]:
        del model[k]
    _check(t, model, pool)
    t.compact()
    _check(t, model, pool)


def test_compound_key_with_table_wide_keys_across_partitions(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.string()), ("n", pa.int32()), ("part", pa.string()), ("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key=["id", "n"], partition_by="part", key_scope="table", buckets=3)
    parts = ["", "\x00", "\U0001f600", "a/b", "p" * 300, "__HIVE_DEFAULT_PARTITION__", None]
    model: dict[tuple[str, int], tuple[Any, int]] = {}

    def up(rows: list[tuple[str, int, Any, int]]) -> None:
        t.upsert(_rows(rows, schema))
        for r in rows:
            model[(r[0], r[1])] = (r[2], r[3])

    def state(**scan: Any) -> dict[tuple[str, int], tuple[Any, int]]:
        out = {}
        for r in t.scan(**scan).to_arrow().to_pylist():
            k = (r["id"], r["n"])
            assert k not in out, f"{k!r:.60} live twice"
            out[k] = (r["part"], r["v"])
        return out

    keys = STR_POOL[:12]
    up([(k, i % 2, parts[i % len(parts)], i) for i, k in enumerate(keys)])
    v1, m1 = t.version, dict(model)
    # move every key to another partition
    up([(k, i % 2, parts[(i + 3) % len(parts)], 100 + i) for i, k in enumerate(keys)])
    up([(k, 1 - i % 2, parts[(i + 1) % len(parts)], 200 + i) for i, k in enumerate(keys[:6])])
    assert state() == model
    assert state(window_bytes=4096) == model
    for (k, n), val in list(model.items()):
        assert state(filter=f"id = {to_sql(k)} AND n = {n}") == {(k, n): val}
    t.delete(f"id = {to_sql(keys[3])}")
    model = {x: y for x, y in model.items() if x[0] != keys[3]}
    t.compact()
    assert state() == model
    assert state(version=v1) == m1
    assert t.scan().count() == len(model)
    for p in parts:
        f = "part IS NULL" if p is None else f"part = {to_sql(p)}"
        assert state(filter=f) == {x: y for x, y in model.items() if y[0] == p}, repr(p)[:20]
    ch = t.changes(v1).read_all().to_pylist()
    assert {(r["id"], r["n"]) for r in ch if r["_change"] in ("insert", "update_after")} <= set(model) | set(
        m1
    )


@pytest.mark.parametrize("kind", ["string", "large_binary"])
def test_merge_with_edge_keys(tmp_path: Path, kind: str) -> None:
    typ, pool = TYPES[kind]
    t = _table(tmp_path, _schema(kind), primary_key="id", buckets=2)
    filler = _filler(kind, 300)
    base = {k: 1 for k in filler} | {k: 2 for k in pool[::2]}
    t.upsert(pa.table({"id": pa.array(list(base), typ), "v": list(base.values())}))
    model = dict(base)
    src = {k: 10 + i for i, k in enumerate(pool)}
    src_t = pa.table({"id": pa.array(list(src), typ), "v": list(src.values())})
    (t.merge(src_t).when_matched_update(set={"v": "t.v + s.v"}).when_not_matched_insert_all().execute())
    for k, v in src.items():
        model[k] = model[k] + v if k in model else v
    _check(t, model, pool)
    # a MERGE deleting long keys only
    dels = [k for k in pool if len(k) > 4000]
    t.merge(pa.table({"id": pa.array(dels, typ), "v": [0] * len(dels)})).when_matched_delete().execute()
    for k in dels:
        model.pop(k, None)
    _check(t, model, pool)


def test_changes_with_edge_keys(tmp_path: Path) -> None:
    t = _table(tmp_path, _schema("binary"), primary_key="id", buckets=2)
    t.upsert(pa.table({"id": pa.array(BIN_POOL, pa.binary()), "v": list(range(len(BIN_POOL)))}))
    v0 = t.version
    t.upsert(pa.table({"id": pa.array(BIN_POOL[:4], pa.binary()), "v": [50] * 4}))
    t.delete(pa.table({"id": pa.array(BIN_POOL[8:11], pa.binary())}))
    ch = t.changes(v0).read_all().to_pylist()
    got = {(r["id"], r["_change"]) for r in ch}
    want = {(k, c) for k in BIN_POOL[:4] for c in ("update_before", "update_after")}
    want |= {(k, "delete") for k in BIN_POOL[8:11]}
    assert got == want


def _neighbours(k: Any) -> list[Any]:
    """Absent probes next to a key: its truncations and one-unit extensions."""
    nul = b"\x00" if isinstance(k, bytes) else "\x00"
    out = [k + nul, k[:-1], k[:64], k[:63], k[:4096], k[:4095]]
    return out


@pytest.mark.parametrize("kind", ["string", "large_binary"])
def test_lookups_among_many_short_keys_pages_and_merge(tmp_path: Path, kind: str) -> None:
    """Tens of thousands of short keys put the edge keys in pages of 4,096 rows (page-index pruning)."""
    typ, pool = TYPES[kind]
    short = [f"k{i:06d}" for i in range(30000)]
    if kind != "string":
        short = [s.encode() for s in short]
    t = _table(tmp_path, _schema(kind), primary_key="id", buckets=1)
    model = {k: 3 for k in short} | {k: i for i, k in enumerate(pool)}
    t.upsert(pa.table({"id": pa.array(list(model), typ), "v": list(model.values())}))
    probes = list(dict.fromkeys(p for k in pool for p in [k, *_neighbours(k)]))
    for k in probes:
        got = _state(t, filter=f"id = {to_sql(k)}")
        assert got == ({k: model[k]} if k in model else {}), f"lookup {k!r:.40} len {len(k)}"
    lit = ", ".join(to_sql(k) for k in probes)
    assert _state(t, filter=f"id IN ({lit})") == {k: model[k] for k in probes if k in model}
    # MERGE of many source keys in a narrow key range (the page path split by split), edge keys among them
    src = {k: 1000 for k in short[10000:10400]} | {k: 2000 for k in probes}
    t.merge(pa.table({"id": pa.array(list(src), typ), "v": list(src.values())})).when_matched_update(
        set={"v": "s.v + t.v"}
    ).when_not_matched_insert_all().execute()
    for k, v in src.items():
        model[k] = model[k] + v if k in model else v
    assert _state(t) == model
    assert _state(t, window_bytes=4096) == model
    assert t.scan().count() == len(model)
    for k in probes[::5]:
        assert _state(t, filter=f"id = {to_sql(k)}") == {k: model[k]}


SEQS = [
    "",
    "\x00",
    "a",
    "a\x00",
    "\U0001f600",
    "\uffff",
    "\U0010ffff",
    "s" * 5000,
    "s" * 5000 + "\x00",
    "s" * 4999 + "t",
]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.integers(0, 5), st.integers(0, len(SEQS) - 1), st.booleans()), min_size=1, max_size=6
        ),
        min_size=1,
        max_size=4,
    ),
    compact_after=st.integers(0, 3),
)
def test_string_sequences_at_their_edges(tmp_path: Path, batches: list[Any], compact_after: int) -> None:
    """``sequence_by`` a string column holding edge values: the highest sequence wins, ties to the later."""
    schema = pa.schema([("id", pa.string()), ("seq", pa.string()), ("v", pa.int64()), ("op", pa.string())])
    t = _table(tmp_path, schema, primary_key="id", sequence_by="seq", cdc_column="op", buckets=2)
    keys = [*STR_POOL[:3], LONG, LONG + "a", "\U0001f600"]
    best: dict[str, tuple[str, int, bool]] = {}  # key -> (seq, v, deleted)
    n = 0
    for b, batch in enumerate(batches):
        rows = []
        for k, s, d in batch:
            n += 1
            rows.append((keys[k], SEQS[s], n, "d" if d else "u"))
        for k, s, v, op in rows:
            old = best.get(k)
            if old is None or s >= old[0]:  # equal sequences: the later event wins
                best[k] = (s, v, op == "d")
        t.upsert(_rows(rows, schema))
        if b == compact_after:
            t.compact()
    want = {k: (s, v) for k, (s, v, d) in best.items() if not d}
    got = {r["id"]: (r["seq"], r["v"]) for r in t.scan().to_arrow().to_pylist()}
    assert _short(got) == _short(want) and got == want
    for k in keys:
        g = {r["id"]: (r["seq"], r["v"]) for r in t.scan(filter=f"id = {to_sql(k)}").to_arrow().to_pylist()}
        assert g == ({k: want[k]} if k in want else {})


def _input_forms(vals: list[Any], base: pa.DataType) -> dict[str, Any]:
    big = pa.large_string() if base == pa.string() else pa.large_binary()
    view = pa.string_view() if base == pa.string() else pa.binary_view()
    a = pa.array(vals, base)
    junk = ["junk"] * 3 if base == pa.string() else [b"junk"] * 3
    return {
        "large": a.cast(big),
        "view": pa.array(vals, view),
        "dict": a.dictionary_encode(),
        "chunked_view": pa.chunked_array([pa.array(vals[:3], view), pa.array(vals[3:], view)]),
        "sliced": pa.array(junk + vals, base).slice(3),
    }


@pytest.mark.parametrize("base", [pa.string(), pa.binary()])
def test_other_input_forms_hash_to_the_same_key(tmp_path: Path, base: pa.DataType) -> None:
    """large, view, dictionary, chunked and sliced input of a key lands on the stored key's bucket."""
    vals = STR_POOL[::2] if base == pa.string() else BIN_POOL[::2]
    for name, arr in _input_forms(vals, base).items():
        t = _table(tmp_path, pa.schema([("id", base), ("v", pa.int64())]), primary_key="id", buckets=5)
        t.upsert(pa.table({"id": pa.array(vals, base), "v": [1] * len(vals)}))
        t.upsert(pa.table({"id": arr, "v": pa.array([2] * len(vals), pa.int64())}))
        src = pa.table({"id": arr, "v": pa.array([3] * len(vals), pa.int64())})
        t.merge(src).when_matched_update(set={"v": "t.v + s.v"}).when_not_matched_insert_all().execute()
        rows = t.to_arrow().to_pylist()
        assert len(rows) == len(vals) and {r["id"]: r["v"] for r in rows} == {k: 5 for k in vals}, name
        t.delete(pa.table({"id": arr}))
        assert t.to_arrow().num_rows == 0, name


def test_or_of_composite_long_keys_and_big_in_lists(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.large_string()), ("n", pa.int64()), ("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key=["id", "n"], buckets=4)
    ids = [LONG + f"{i:03d}" for i in range(400)] + STR_POOL
    rows = [(k, n) for k in ids for n in (-1, 0)]
    model = {r: i for i, r in enumerate(rows)}
    t.upsert(
        pa.table({"id": [r[0] for r in rows], "n": [r[1] for r in rows], "v": list(model.values())}, schema)
    )
    t.upsert(pa.table({"id": ids[::7], "n": [0] * len(ids[::7]), "v": [-5] * len(ids[::7])}, schema))
    model.update({(k, 0): -5 for k in ids[::7]})

    def state(f: str) -> dict[tuple[str, int], int]:
        return {(r["id"], r["n"]): r["v"] for r in t.scan(filter=f).to_arrow().to_pylist()}

    probe = [(k, n) for k in ids[::13] for n in (0, 1)]
    f = " OR ".join(f"(id = {to_sql(k)} AND n = {n})" for k, n in probe)
    assert state(f) == {p: model[p] for p in probe if p in model}
    many = ids[::2] + [k + "\x00" for k in ids[::5]]
    f = f"id IN ({', '.join(to_sql(k) for k in many)})"
    assert state(f) == {r: v for r, v in model.items() if r[0] in set(many)}
    t.delete(f"id IN ({', '.join(to_sql(k) for k in ids[::3])}) AND n = 0")
    model = {r: v for r, v in model.items() if not (r[0] in set(ids[::3]) and r[1] == 0)}
    assert state("TRUE") == model
    t.compact()
    assert {(r["id"], r["n"]): r["v"] for r in t.scan(window_bytes=4096).to_arrow().to_pylist()} == model


@pytest.mark.parametrize("compact", [False, True])
def test_delete_marker_just_above_an_edge_string_sequence(tmp_path: Path, compact: bool) -> None:
    """A delete without a sequence marks each version at its sequence + NUL: replays stay deleted, the
    next string up (``seq + '\\x00'``) and anything above bring the key back."""
    schema = pa.schema([("id", pa.string()), ("seq", pa.string()), ("v", pa.int64())])
    t = _table(tmp_path, schema, primary_key="id", sequence_by="seq", buckets=2)
    keys = ["", "\x00", LONG, "\U0001f600"]
    seqs = ["", "\x00", "s" * 5000, "\U0010ffff"]
    t.upsert(pa.table({"id": keys, "seq": seqs, "v": [1, 2, 3, 4]}, schema))
    t.delete("v > 0")
    if compact:
        t.compact()
    t.upsert(pa.table({"id": keys, "seq": seqs, "v": [5, 6, 7, 8]}, schema))  # replays
    assert t.to_arrow().num_rows == 0
    up = [s + "\x00" for s in seqs]
    t.upsert(pa.table({"id": keys[:2], "seq": up[:2], "v": [9, 10]}, schema))
    t.upsert(pa.table({"id": keys[2:], "seq": [s + "\x01" for s in seqs[2:]], "v": [11, 12]}, schema))
    got = {r["id"]: (r["seq"], r["v"]) for r in t.to_arrow().to_pylist()}
    want = {
        keys[0]: (up[0], 9),
        keys[1]: (up[1], 10),
        keys[2]: (seqs[2] + "\x01", 11),
        keys[3]: (seqs[3] + "\x01", 12),
    }
    assert _short(got) == _short(want) and got == want
