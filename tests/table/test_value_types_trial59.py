"""Trial 59c: non-key columns of nested and unusual Arrow types, with values at their edges.

Every operation (upserts with replays and overlapping keys, partial upserts under ``last`` and
``last_non_null``, deletes by key and by a filter on the key, UPDATE and MERGE setting nested columns,
compaction, overwrite) is checked against a plain dict model: full reads, ``to_batches``, projections,
windowed reads (``window_bytes=4096``), ``count()``, ``IS NULL`` filters on nested columns, time travel
and the change feed (applied to the snapshot at its start it must give the one at its end, and it must
hold no row for a key whose row did not change). The values that look alike are the point: a NULL struct
against a struct of NULL fields, NULL against an empty list, map, string or binary, a fixed-size list of
NULLs against a NULL list.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError

S = pa.struct([("a", pa.int64()), ("b", pa.string())])
M = pa.map_(pa.string(), pa.int64())
COLUMNS: dict[str, pa.DataType] = {
    "s": S,
    "s_nn": S,
    "l": pa.list_(pa.int32()),
    "ll": pa.large_list(pa.string()),
    "fsl": pa.list_(pa.int8(), 2),
    "m": M,
    "m_nn": M,
    "ls": pa.list_(S),
    "sl": pa.struct([("xs", pa.list_(pa.int16())), ("w", pa.bool_())]),
    "fsb": pa.binary(2),
    "bin": pa.binary(),
    "lstr": pa.large_string(),
    "str": pa.string(),
    "dec": pa.decimal128(38, 0),
    "dec5": pa.decimal128(5, 5),
    "d256": pa.decimal256(76, 38),
    "dur_s": pa.duration("s"),
    "dur_ms": pa.duration("ms"),
    "dur_us": pa.duration("us"),
    "dur_ns": pa.duration("ns"),
    "t32s": pa.time32("s"),
    "t32ms": pa.time32("ms"),
    "t64us": pa.time64("us"),
    "t64ns": pa.time64("ns"),
    "b": pa.bool_(),
    "allnull": pa.string(),
}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)] + [(n, t) for n, t in COLUMNS.items()])
OPERATORS = {"s_nn": "last_non_null", "m_nn": "last_non_null"}
MAX38 = 10**38 - 1
D256 = Decimal(f"{10**76 - 1}E-38")
I64 = 2**63 - 1

EDGES: dict[str, list[Any]] = {
    "s": [None, {"a": None, "b": None}, {"a": -(2**63), "b": ""}, {"a": I64, "b": "\x00é"}],
    "l": [None, [], [None], [-(2**31), 2**31 - 1]],
    "ll": [None, [], [None, ""], ["x" * 30]],
    "fsl": [None, [None, None], [-128, 127]],
    "m": [None, [], [("", None)], [("k", -1), ("z", I64)]],
    "ls": [None, [], [None], [{"a": None, "b": None}], [{"a": 1, "b": "q"}, None]],
    "sl": [None, {"xs": None, "w": None}, {"xs": [], "w": False}, {"xs": [None, -32768], "w": True}],
    "fsb": [None, b"\x00\x00", b"\xff\xff", b"\x00\xff"],
    "bin": [None, b"", b"\x00", b"\xff" * 5, b"\x00\xff\x00"],
    "lstr": [None, "", "\x00", "ü€"],
    "str": [None, "", "a", "b"],
    "dec": [None, Decimal(0), Decimal(MAX38), Decimal(-MAX38)],
    "dec5": [None, Decimal("0.00000"), Decimal("-0.99999"), Decimal("0.00001")],
    "d256": [None, D256, Decimal(f"-{10**76 - 1}E-38"), Decimal("1E-38")],
    "dur_s": [None, 0, I64, -I64],
    "dur_ms": [None, 0, I64, -I64],
    "dur_us": [None, 0, I64, -(2**63)],
    "dur_ns": [None, 0, I64, -I64],
    "t32s": [None, 0, 86399],
    "t32ms": [None, 0, 86_399_999],
    "t64us": [None, 0, 86_399_999_999],
    "t64ns": [None, 0, 86_399_999_999_999],
    "b": [None, True, False],
    "allnull": [None],
}
EDGES["s_nn"] = EDGES["s"]
EDGES["m_nn"] = EDGES["m"]
INTS = (pa.types.is_duration, pa.types.is_time)  # compared as their integers (edges beyond timedelta)


def column(name: str, values: list[Any], dictionary: bool = False) -> pa.Array:
    arr = pa.array(values, SCHEMA.field(name).type)
    return arr.dictionary_encode() if dictionary and name in ("str", "lstr") else arr


def batch(rows: list[dict[str, Any]], names: list[str], dictionary: bool = False) -> pa.Table:
    return pa.table({n: column(n, [r[n] for r in rows], dictionary) for n in names})


def plain(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as Python values, durations and times as integers, sorted by key."""
    cols = {}
    for f in table.schema:
        arr = table.column(f.name)
        if any(check(f.type) for check in INTS):
            arr = arr.cast(pa.int64() if f.type.bit_width == 64 else pa.int32())
        cols[f.name] = arr
    rows = pa.table(cols).to_pylist()
    return sorted(rows, key=lambda r: r["id"]) if rows and "id" in rows[0] else rows


def model_rows(model: dict[int, dict[str, Any]], names: list[str] | None = None) -> list[dict[str, Any]]:
    names = names or SCHEMA.names
    rows = [{n: model[k][n] for n in names} for k in sorted(model)]
    return plain(pa.table({n: column(n, [r[n] for r in rows]) for n in names}))


def check_reads(t: Any, model: dict[int, dict[str, Any]]) -> None:
    want = model_rows(model)
    got = t.scan().to_arrow()
    assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in SCHEMA]
    assert plain(got) == want
    assert plain(pa.Table.from_batches(list(t.scan(window_bytes=4096).to_batches()), got.schema)) == want
    proj = ["m_nn", "id", "s", "fsl", "dur_ns"]
    assert plain(t.scan(columns=proj).to_arrow()) == model_rows(model, proj)
    assert t.scan().count() == len(model)
    for col in ("s", "ls", "m_nn", "sl"):
        nulls = sorted(k for k, r in model.items() if r[col] is None)
        assert sorted(t.scan(columns=["id"], filter=f"{col} IS NULL").to_arrow()["id"].to_pylist()) == nulls
        assert t.scan(filter=f"{col} IS NOT NULL").count() == len(model) - len(nulls)
    for text, keep in FILTERS:
        want_ids = sorted(k for k, r in model.items() if keep(r))
        got = t.scan(filter=text).to_arrow()
        assert [r["id"] for r in plain(got)] == want_ids, text
        assert plain(got) == [r for r in want if r["id"] in want_ids], text


FILTERS = [  # non-key filters: after the merge (selectively on newest-wins tables)
    ("b = true", lambda r: r["b"] is True),
    ("str = ''", lambda r: r["str"] == ""),
    ("lstr = '' OR lstr IS NULL", lambda r: r["lstr"] in ("", None)),
    ("dec5 = 0", lambda r: r["dec5"] is not None and r["dec5"] == 0),
    ("dec > 0", lambda r: r["dec"] is not None and r["dec"] > 0),
    ("d256 < 0", lambda r: r["d256"] is not None and r["d256"] < 0),
    ("s IS NULL AND b IS NOT NULL", lambda r: r["s"] is None and r["b"] is not None),
]


KEYS = st.integers(0, 12)
OPERATION_KINDS = ["upsert", "upsert", "partial", "partial", "delete_keys", "delete_filter", "compact"]
OPERATION_KINDS += ["overwrite", "update", "merge"]
VALUE_COLUMNS = list(COLUMNS)


@st.composite
def full_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(st.lists(KEYS, min_size=1, max_size=8))
    return [{"id": k, **{n: draw(st.sampled_from(EDGES[n])) for n in VALUE_COLUMNS}} for k in keys]


@st.composite
def operations(draw: st.DrawFn) -> tuple[Any, ...]:
    kind = draw(st.sampled_from(OPERATION_KINDS))
    if kind in ("upsert", "overwrite", "merge"):
        return (kind, draw(full_rows()), draw(st.booleans()))
    if kind == "partial":
        cols = draw(st.lists(st.sampled_from(VALUE_COLUMNS), min_size=1, max_size=6, unique=True))
        rows = draw(full_rows())
        return (kind, [{n: r[n] for n in ["id", *cols]} for r in rows], draw(st.booleans()))
    if kind == "delete_keys":
        return (kind, draw(st.lists(KEYS, min_size=1, max_size=4)))
    if kind == "delete_filter":
        lo = draw(KEYS)
        return (kind, lo, lo + draw(st.integers(0, 4)))
    if kind == "update":
        return (kind, draw(KEYS), draw(st.sampled_from(["null", "copy"])))
    return (kind,)


def fold(model: dict[int, dict[str, Any]], rows: list[dict[str, Any]], operators: dict[str, str]) -> None:
    """Upserted rows, in order: the columns they carry replace (a NULL does not under last_non_null)."""
    for r in rows:
        new = dict(model.get(r["id"]) or dict.fromkeys(SCHEMA.names), id=r["id"])
        for n in list(r)[1:]:
            if operators.get(n) != "last_non_null" or r[n] is not None:
                new[n] = r[n]
        model[r["id"]] = new


def apply(
    t: Any, model: dict[int, dict[str, Any]], op: tuple[Any, ...], operators: dict[str, str] = OPERATORS
) -> None:
    kind = op[0]
    if kind == "upsert":
        rows, dictionary = op[1], op[2]
        t.upsert(batch(rows, SCHEMA.names, dictionary))
        t.upsert(batch(rows[-1:], SCHEMA.names))  # a replay of the batch's last row changes nothing
        fold(model, rows, operators)
    elif kind == "partial":
        rows, dictionary = op[1], op[2]
        t.upsert(batch(rows, list(rows[0]), dictionary))
        fold(model, rows, operators)
    elif kind == "delete_keys":
        t.delete(pa.table({"id": pa.array(op[1], pa.int64())}))
        for k in op[1]:
            model.pop(k, None)
    elif kind == "delete_filter":
        t.delete(f"id >= {op[1]} AND id < {op[2]}")
        for k in [k for k in model if op[1] <= k < op[2]]:
            del model[k]
    elif kind == "compact":
        t.compact(min_files=1)
    elif kind == "overwrite":
        last = {r["id"]: r for r in op[1]}  # an overwrite's rows: one per key
        t.overwrite(batch(list(last.values()), SCHEMA.names, op[2]))
        model.clear()
        model.update({k: dict(r) for k, r in last.items()})
    elif kind == "update":
        k, how = op[1], op[2]
        if how == "null":  # an UPDATE's value is the value set, also for last_non_null columns
            t.update(set={"s": "NULL", "s_nn": "NULL", "m_nn": "NULL", "ls": "NULL"}, where=f"id = {k}")
            if k in model:
                model[k].update(s=None, s_nn=None, m_nn=None, ls=None)
        else:
            t.update(set={"s_nn": "s", "m_nn": "m", "l": "l"}, where=f"id = {k}")
            if k in model:
                model[k].update(s_nn=model[k]["s"], m_nn=model[k]["m"])
    elif kind == "merge":
        src = {r["id"]: r for r in op[1]}  # a MERGE source holds each key once
        (
            t.merge(batch(list(src.values()), SCHEMA.names), on="t.id = s.id")
            .when_matched_update(
                set={"s": "s.s", "ls": "s.ls", "m_nn": "s.m_nn", "fsl": "s.fsl", "bin": "s.bin"}
            )
            .when_not_matched_insert_all()
            .execute()
        )
        for k, r in src.items():
            if k in model:
                model[k].update({n: r[n] for n in ("s", "ls", "m_nn", "fsl", "bin")})
            else:
                model[k] = dict(r)


def check_feed(t: Any, snaps: dict[int, list[dict[str, Any]]], start: int, end: int) -> None:
    before = {r["id"]: r for r in snaps[start]}
    after = {r["id"]: r for r in snaps[end]}
    feed = plain(t.changes(start, end).read_all().drop_columns(["_version", "_commit_time"]))
    got: dict[tuple[int, str], dict[str, Any]] = {}
    for r in feed:
        change = r.pop("_change")
        assert (r["id"], change) not in got, (r["id"], change)
        got[(r["id"], change)] = r
    want: dict[tuple[int, str], dict[str, Any]] = {}
    for k in before.keys() | after.keys():
        if k not in after:
            want[(k, "delete")] = before[k]
        elif k not in before:
            want[(k, "insert")] = after[k]
        elif before[k] != after[k]:
            want[(k, "update_before")] = before[k]
            want[(k, "update_after")] = after[k]
    assert got == want


@settings(
    max_examples=int(os.environ.get("TRIAL59C_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(operations(), min_size=1, max_size=6),
    buckets=st.sampled_from([1, 3]),
    operators=st.sampled_from([OPERATORS, {}]),  # {}: newest-wins, where filters read selectively
    data=st.data(),
)
def test_nested_and_edge_values_follow_a_dict_model(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[Any, ...]],
    buckets: int,
    operators: dict[str, str],
    data: st.DataObject,
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = cat.create_table("ns.t", SCHEMA, primary_key=["id"], buckets=buckets, merge_operators=operators)
    model: dict[int, dict[str, Any]] = {}
    snaps = {t.version: []}
    for op in ops:
        apply(t, model, op, operators)
        check_reads(t, model)
        snaps[t.version] = model_rows(model)
    for v, rows in snaps.items():
        assert plain(t.scan(version=v).to_arrow()) == rows, v
    versions = sorted(snaps)
    start = data.draw(st.sampled_from(versions))
    end = data.draw(st.sampled_from([v for v in versions if v >= start]))
    check_feed(t, snaps, start, end)
    check_feed(t, snaps, versions[0], versions[-1])


# Values that read alike: each pair (old, new) must read back as written and show in the feed.
LOOKALIKES = [
    ("s", None, {"a": None, "b": None}),
    ("l", None, []),
    ("ll", [None], [""]),
    ("fsl", None, [None, None]),
    ("m", None, []),
    ("m", [], [("", None)]),
    ("ls", [], [None]),
    ("ls", [None], [{"a": None, "b": None}]),
    ("sl", None, {"xs": None, "w": None}),
    ("sl", {"xs": None, "w": None}, {"xs": [], "w": None}),
    ("bin", None, b""),
    ("bin", b"\x00", b"\x00\x00"),
    ("fsb", b"\x00\x00", None),
    ("lstr", None, ""),
    ("str", "", None),
    ("dec5", Decimal("0.00000"), None),
    ("b", False, None),
    ("dur_ns", 0, None),
    ("t32s", None, 0),
]


@pytest.mark.parametrize(
    ("name", "old", "new"), LOOKALIKES, ids=[f"{c[0]}-{i}" for i, c in enumerate(LOOKALIKES)]
)
@pytest.mark.parametrize("compact", [False, True])
def test_lookalike_values_change_rows_and_the_feed_both_ways(
    tmp_path: Path, name: str, old: Any, new: Any, compact: bool
) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table("ns.t", SCHEMA, primary_key="id", buckets=2)
    for first, second in ((old, new), (new, old)):
        t.upsert(pa.table({"id": pa.array([1], pa.int64()), name: column(name, [first])}))
        v = t.version
        t.upsert(pa.table({"id": pa.array([1], pa.int64()), name: column(name, [second])}))
        if compact:
            t.compact(min_files=1)
        want = plain(pa.table({"id": pa.array([1], pa.int64()), name: column(name, [second])}))
        assert plain(t.scan(columns=["id", name]).to_arrow()) == want
        assert plain(t.scan(columns=["id", name], version=v).to_arrow()) == plain(
            pa.table({"id": pa.array([1], pa.int64()), name: column(name, [first])})
        )
        feed = plain(t.changes(v, columns=[name]).read_all().drop_columns(["_version", "_commit_time"]))
        firsts = plain(pa.table({"id": [1], name: column(name, [first])}))[0]
        assert feed == [dict(firsts, _change="update_before"), dict(want[0], _change="update_after")]
        nulls = [1] if second is None else []
        assert t.scan(columns=["id"], filter=f"{name} IS NULL").to_arrow()["id"].to_pylist() == nulls


def test_last_non_null_keeps_struct_of_nulls_and_empty_map_as_values(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "ns.t", SCHEMA, primary_key="id", buckets=2, merge_operators=OPERATORS
    )
    ids = pa.array([1, 2, 3], pa.int64())
    t.upsert(
        pa.table(
            {
                "id": ids,
                "s_nn": column("s_nn", [{"a": 1, "b": "x"}] * 3),
                "m_nn": column("m_nn", [[("k", 1)]] * 3),
            }
        )
    )
    t.upsert(
        pa.table(
            {
                "id": ids,
                "s_nn": column("s_nn", [{"a": None, "b": None}, None, None]),
                "m_nn": column("m_nn", [[], None, [("", None)]]),
            }
        )
    )
    t.upsert(pa.table({"id": ids, "s_nn": column("s_nn", [None, None, None])}))  # no value: all kept
    want = [
        {"id": 1, "s_nn": {"a": None, "b": None}, "m_nn": []},
        {"id": 2, "s_nn": {"a": 1, "b": "x"}, "m_nn": [("k", 1)]},
        {"id": 3, "s_nn": {"a": 1, "b": "x"}, "m_nn": [("", None)]},
    ]
    for _ in range(2):
        assert plain(t.scan(columns=["id", "s_nn", "m_nn"]).to_arrow()) == want
        assert plain(t.scan(columns=["id", "s_nn", "m_nn"], window_bytes=4096).to_arrow()) == want
        t.compact(min_files=1)


def test_windowed_reads_of_many_nested_rows_over_several_commits(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "ns.t", SCHEMA, primary_key="id", buckets=2, merge_operators=OPERATORS
    )
    model: dict[int, dict[str, Any]] = {}
    n = 1500
    for step in range(4):
        keys = list(range(step * 250, step * 250 + n, 1 + step))
        rows = [
            {"id": k, **{c: EDGES[c][(k * 7 + step * 3 + i) % len(EDGES[c])] for i, c in enumerate(COLUMNS)}}
            for k in keys
        ]
        if step == 2:  # partial rows: only some columns
            names = ["id", "s", "s_nn", "ls", "m_nn", "dur_ns"]
            apply(t, model, ("partial", [{c: r[c] for c in names} for r in rows], True))
        else:
            apply(t, model, ("upsert", rows, step == 1))
    t.delete("id >= 100 AND id < 300")
    for k in range(100, 300):
        model.pop(k, None)
    want = model_rows(model)
    got = list(t.scan(window_bytes=4096, threads=2).to_batches())
    assert len(got) > 1
    assert plain(pa.Table.from_batches(got)) == want
    assert t.scan(window_bytes=4096).count() == len(model)
    t.compact(min_files=1)
    assert plain(t.scan(window_bytes=4096).to_arrow()) == want


BAD_WRITES = [
    ("l", pa.array([[2**40]], pa.list_(pa.int64()))),  # an element out of int32's range
    ("fsb", pa.array([b"abc"], pa.binary(3))),  # longer than the fixed size
    ("fsb", pa.array([b"a"], pa.binary())),  # shorter than the fixed size
    ("fsl", pa.array([[1, 2, 3]], pa.list_(pa.int8()))),  # a list of another length
    ("dec5", pa.array([Decimal("0.000001")], pa.decimal128(6, 6))),  # a digit beyond the scale
    ("dur_s", pa.array([1500], pa.duration("ms"))),  # a sub-second duration into seconds
    ("t32s", pa.array([1500], pa.time32("ms"))),  # a sub-second time into seconds
    ("s", pa.array([{"a": 1, "c": "x"}], pa.struct([("a", pa.int64()), ("c", pa.string())]))),  # other fields
    ("m", pa.array([[("k", 1.5)]], pa.map_(pa.string(), pa.float64()))),  # 1.5 is no int64
    ("b", pa.array([1], pa.int8())),  # an integer is no boolean
]


@pytest.mark.parametrize(("name", "value"), BAD_WRITES, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_WRITES)])
def test_lossy_values_are_refused_with_a_typed_error_and_change_nothing(
    tmp_path: Path, name: str, value: pa.Array
) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table("ns.t", SCHEMA, primary_key="id")
    t.upsert(pa.table({"id": pa.array([1], pa.int64()), "s": column("s", [{"a": 1, "b": "x"}])}))
    version, before = t.version, plain(t.to_arrow())
    with pytest.raises(MereError):
        t.upsert(pa.table({"id": pa.array([2], pa.int64()), name: value}))
    assert t.version == version and plain(t.to_arrow()) == before


def test_big_files_whose_layout_is_sampled_read_back_every_edge(tmp_path: Path) -> None:
    """Files of 16,384 rows or more get encodings chosen from samples (dictionary, delta, plain): monotone
    durations and times (delta-friendly) end on their type's extremes, few-distinct nested values, and a
    column that holds no NULL in one file but NULL children (required in that file)."""
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "ns.t", SCHEMA, primary_key="id", buckets=1, merge_operators=OPERATORS
    )
    n = 20_000
    ids = list(range(n))

    def rows(step: int, keys: list[int]) -> list[dict[str, Any]]:
        out = []
        for k in keys:
            r: dict[str, Any] = {"id": k}
            for c in COLUMNS:
                e = EDGES[c]
                r[c] = e[(k // 97 + step) % len(e)]  # runs of equal values: dictionary-friendly
            r["dur_ns"] = k * 1000 if k < n - 2 else (I64 if k == n - 1 else -I64)
            r["dur_s"] = k - n // 2
            r["t64ns"] = k * 4_000_000_000 if k < n - 1 else 86_399_999_999_999
            r["t32ms"] = k * 4000
            r["s"] = {"a": k, "b": None}  # no NULL struct, NULL fields: required in this file
            r["l"] = [None, k] if k % 2 else []
            out.append(r)
        return out

    model: dict[int, dict[str, Any]] = {}
    apply(t, model, ("partial", rows(0, ids), True))
    apply(t, model, ("partial", rows(1, ids[::3]), False))  # overlapping keys, another file
    apply(t, model, ("delete_filter", 5000, 5100))
    want = model_rows(model)
    assert plain(t.scan().to_arrow()) == want
    assert plain(t.scan(window_bytes=4096).to_arrow()) == want
    assert t.scan().count() == len(model)
    t.compact(min_files=1)
    assert plain(t.scan(window_bytes=4096).to_arrow()) == want
    assert plain(t.scan(version=1).to_arrow()) == model_rows({r["id"]: r for r in rows(0, ids)})


def test_encoded_inputs_whose_nulls_hide_in_dictionaries_runs_and_views(tmp_path: Path) -> None:
    """A dictionary whose index is valid but whose value is NULL is a NULL (last_non_null keeps the old
    value), as are NULL runs of a run-end encoded struct and NULL list views; NULL-looking values (an empty
    string, a struct of NULLs, an empty list) are values."""
    sch = pa.schema(
        [
            ("id", pa.int64()),
            ("v", pa.string()),
            ("w", pa.large_string()),
            ("s", S),
            ("l", pa.list_(pa.int32())),
        ]
    )
    ops = dict.fromkeys(["v", "w", "s", "l"], "last_non_null")
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("ns.t", sch, primary_key="id", buckets=2, merge_operators=ops)
    plain_t = cat.create_table("ns.p", sch, primary_key="id", buckets=2)
    old = pa.table(
        {
            "id": [1, 2, 3],
            "v": ["a", "b", "c"],
            "w": ["a", "b", "c"],
            "s": pa.array([{"a": 1, "b": "x"}] * 3, S),
            "l": pa.array([[1]] * 3, pa.list_(pa.int32())),
        },
        schema=sch,
    )
    new = pa.table(
        {
            "id": [1, 2, 3],
            "v": pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int8()), pa.array(["", None])),
            "w": pa.DictionaryArray.from_arrays(
                pa.array([1, 1, 0], pa.int32()), pa.array(["z", None], pa.large_string())
            ),
            "s": pa.RunEndEncodedArray.from_arrays(
                pa.array([2, 3], pa.int32()), pa.array([None, {"a": None, "b": None}], S)
            ),
            "l": pa.array([[None], None, []], pa.list_view(pa.int32())),
        }
    )
    for table in (t, plain_t):
        table.upsert(old)
        table.upsert(new)
    want_nn = [
        {"id": 1, "v": "", "w": "a", "s": {"a": 1, "b": "x"}, "l": [None]},
        {"id": 2, "v": "b", "w": "b", "s": {"a": 1, "b": "x"}, "l": [1]},
        {"id": 3, "v": "c", "w": "z", "s": {"a": None, "b": None}, "l": []},
    ]
    want_last = [
        {"id": 1, "v": "", "w": None, "s": None, "l": [None]},
        {"id": 2, "v": None, "w": None, "s": None, "l": None},
        {"id": 3, "v": None, "w": "z", "s": {"a": None, "b": None}, "l": []},
    ]
    for _ in range(2):
        assert plain(t.to_arrow()) == want_nn
        assert plain(plain_t.to_arrow()) == want_last
        assert plain(plain_t.scan(filter="w IS NULL AND s IS NULL").to_arrow()) == want_last[:2]
        t.compact(min_files=1)
        plain_t.compact(min_files=1)


def test_evolve_adds_a_nested_column_that_old_rows_and_versions_read_as_null(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "ns.t", pa.schema([("id", pa.int64()), ("x", pa.int64())]), primary_key="id", buckets=2
    )
    t.upsert(pa.table({"id": [1, 2], "x": [1, 2]}))
    v = t.version
    ls = pa.list_(S)
    t.upsert(pa.table({"id": [2, 3], "n": pa.array([[{"a": None, "b": None}], []], ls)}), evolve=True)
    want = [
        {"id": 1, "x": 1, "n": None},
        {"id": 2, "x": 2, "n": [{"a": None, "b": None}]},
        {"id": 3, "x": None, "n": []},
    ]
    assert t.schema.field("n").type == ls
    assert plain(t.to_arrow()) == want
    assert plain(t.scan(filter="n IS NULL").to_arrow()) == want[:1]
    assert plain(t.scan(version=v).to_arrow()) == [{"id": 1, "x": 1}, {"id": 2, "x": 2}]
    feed = plain(t.changes(v).read_all().drop_columns(["_version", "_commit_time"]))
    assert feed == [
        {"id": 2, "x": 2, "n": None, "_change": "update_before"},
        {"id": 2, "x": 2, "n": [{"a": None, "b": None}], "_change": "update_after"},
        {"id": 3, "x": None, "n": [], "_change": "insert"},
    ]
