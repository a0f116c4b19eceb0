"""Every column type a schema accepts round-trips: write, merge, read, projection, time travel.

Nested columns (list, large_list, fixed-size list, struct, map, list of struct) used to read back as null:
the reader looked columns up by Parquet leaf name. Types Parquet cannot store exactly are refused when the
table is created, and encodings (dictionary, run-end, views) are stored as their plain types.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors

NESTED = {
    "list": pa.list_(pa.int32()),
    "large_list": pa.large_list(pa.string()),
    "fixed_list": pa.list_(pa.float64(), 2),
    "struct": pa.struct([("a", pa.int64()), ("b", pa.string())]),
    "map": pa.map_(pa.string(), pa.int64()),
    "list_struct": pa.list_(pa.struct([("id", pa.int64()), ("tags", pa.list_(pa.string()))])),
    "struct_list": pa.struct([("xs", pa.large_list(pa.int16())), ("when", pa.timestamp("us", tz="UTC"))]),
}
SCALAR = {
    "i8": pa.int8(),
    "u64": pa.uint64(),
    "f16": pa.float16(),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "bool": pa.bool_(),
    "str": pa.string(),
    "lstr": pa.large_string(),
    "bin": pa.binary(),
    "lbin": pa.large_binary(),
    "fsb": pa.binary(3),
    "d32": pa.date32(),
    "t64": pa.time64("us"),
    "ts": pa.timestamp("us"),
    "ts_tz": pa.timestamp("ms", tz="Europe/Paris"),
    "ts_ns": pa.timestamp("ns"),
    "dur": pa.duration("us"),
    "dec": pa.decimal128(38, 20),
    "dec256": pa.decimal256(50, 10),
}
ALL_TYPES = {**SCALAR, **NESTED}


def values_of(t: pa.DataType, nulls: bool = True) -> st.SearchStrategy[Any]:
    """Python values of an Arrow type (None included unless ``nulls`` is False), with the edge values that
    break things."""
    present = _present_values(t)
    return st.one_of(st.none(), present) if nulls else present


def _present_values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_integer(t):
        info = (t.bit_width, pa.types.is_signed_integer(t))
        lo = -(2 ** (info[0] - 1)) if info[1] else 0
        hi = 2 ** (info[0] - 1) - 1 if info[1] else 2 ** info[0] - 1
        return st.one_of(st.sampled_from([lo, hi, 0]), st.integers(lo, hi))
    if pa.types.is_floating(t):
        width = {16: 16, 32: 32, 64: 64}[t.bit_width]
        return st.one_of(
            st.sampled_from([math.nan, -0.0, 0.0, math.inf, -math.inf]),
            st.floats(width=width, allow_nan=False),
        )
    if pa.types.is_boolean(t):
        return st.one_of(st.booleans())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.one_of(st.text(max_size=6), st.sampled_from(["", "ü€", "x" * 40]))
    if pa.types.is_fixed_size_binary(t):
        return st.one_of(st.binary(min_size=t.byte_width, max_size=t.byte_width))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return st.one_of(st.binary(max_size=6))
    if pa.types.is_date(t):
        return st.one_of(st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)))
    if pa.types.is_time(t):
        return st.one_of(st.times())
    if pa.types.is_timestamp(t):
        stamps = st.datetimes(dt.datetime(1700, 1, 1), dt.datetime(2200, 1, 1))
        if t.tz is not None:
            stamps = stamps.map(lambda v: v.replace(tzinfo=dt.UTC))
        if t.unit in ("s", "ms"):
            stamps = stamps.map(lambda v: v.replace(microsecond=0))
        return st.one_of(stamps)
    if pa.types.is_duration(t):
        return st.one_of(st.timedeltas(dt.timedelta(days=-9999), dt.timedelta(days=9999)))
    if pa.types.is_decimal(t):
        # Unscaled integers, scaled by string: exact at any precision (st.decimals filters wide ones away).
        edge = 10**t.precision - 1
        unscaled = st.one_of(st.sampled_from([-edge, edge, 0]), st.integers(-edge, edge))
        return st.one_of(unscaled.map(lambda i: Decimal(f"{i}E-{t.scale}")))
    if pa.types.is_fixed_size_list(t):
        return st.one_of(st.lists(values_of(t.value_type), min_size=t.list_size, max_size=t.list_size))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return st.one_of(st.lists(values_of(t.value_type), max_size=3))
    if pa.types.is_struct(t):
        return st.one_of(
            st.fixed_dictionaries({t.field(i).name: values_of(t.field(i).type) for i in range(t.num_fields)})
        )
    if pa.types.is_map(t):
        return st.one_of(
            st.lists(
                st.tuples(st.text(max_size=3), values_of(t.item_type)), max_size=3, unique_by=lambda kv: kv[0]
            )
        )
    raise AssertionError(t)


def same(a: Any, b: Any) -> bool:
    """Equality that counts NaN equal to NaN and tells -0.0 from 0.0 (values must round-trip exactly)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    # Nanosecond timestamps come back as pandas Timestamps.
    a, b = (v.to_pydatetime(warn=False) if hasattr(v, "to_pydatetime") else v for v in (a, b))
    return type(a) is type(b) and a == b


def rows_equal(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> bool:
    return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_type_round_trips_with_merge_projection_and_time_travel(
    tmp_path_factory: pytest.TempPathFactory, name: str, data: st.DataObject
) -> None:
    t_ = ALL_TYPES[name]
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    schema = pa.schema([("id", pa.int64()), ("c", t_), ("n", pa.int64())])
    keyed = cat.create_table("t.keyed", schema, primary_key="id", buckets=2)
    keyless = cat.create_table("t.keyless", schema)
    value = values_of(t_, nulls=False)
    first = [data.draw(value), None, data.draw(value)]
    second = [data.draw(value), data.draw(value)]
    base = pa.table({"id": [1, 2, 3], "c": pa.array(first, t_), "n": [1, 2, 3]})
    keyed.upsert(base)
    keyless.append(base)
    keyed.upsert(pa.table({"id": [1], "n": [10]}))  # partial: c of key 1 keeps its value
    keyed.upsert(pa.table({"id": [2, 4], "c": pa.array(second, t_)}))
    keyed.delete("id = 3")
    want = [
        {"id": 1, "c": first[0], "n": 10},
        {"id": 2, "c": second[0], "n": 2},
        {"id": 4, "c": second[1], "n": None},
    ]
    got = keyed.scan().to_arrow().sort_by("id")
    assert got.schema.field("c").type == t_
    assert rows_equal(got.to_pylist(), want)
    assert rows_equal(
        keyed.scan(columns=["c", "id"]).to_arrow().sort_by("id").to_pylist(),
        [{"c": r["c"], "id": r["id"]} for r in want],
    )
    assert rows_equal(keyed.scan(version=1).to_arrow().sort_by("id").to_pylist(), base.to_pylist())
    assert keyed.compact() is not None
    assert rows_equal(keyed.scan().to_arrow().sort_by("id").to_pylist(), want)
    assert rows_equal(keyless.scan().to_arrow().sort_by("id").to_pylist(), base.to_pylist())
    assert rows_equal(
        keyless.scan(columns=["c"], filter="n >= 2").to_arrow().to_pylist(), [{"c": v} for v in first[1:]]
    )


@st.composite
def nested_batches(draw: st.DrawFn) -> tuple[pa.DataType, list[list[tuple[int, Any, str | None]]]]:
    t_ = draw(st.sampled_from(sorted(NESTED.items())))[1]
    batches = draw(
        st.lists(
            st.lists(
                st.tuples(st.integers(0, 6), values_of(t_), st.sampled_from(["I", "U", "D"])),
                min_size=1,
                max_size=8,
            ),
            min_size=1,
            max_size=4,
        )
    )
    return t_, batches


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=nested_batches())
def test_property_nested_columns_merge_like_a_model(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[pa.DataType, list[list[Any]]]
) -> None:
    """CDC batches (several changes per key per batch) on a nested column and a last_non_null nested column."""
    t_, batches = case
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    schema = pa.schema([("k", pa.int64()), ("v", t_), ("w", t_)])
    table = cat.create_table(
        "t.nested",
        schema,
        primary_key="k",
        buckets=2,
        cdc_column="op",
        merge_operators={"w": "last_non_null"},
    )
    model: dict[int, dict[str, Any]] = {}
    for rows in batches:
        table.upsert(
            pa.table(
                {
                    "k": [r[0] for r in rows],
                    "v": pa.array([r[1] for r in rows], t_),
                    "w": pa.array([r[1] for r in rows], t_),
                    "op": [r[2] for r in rows],
                }
            )
        )
        for k, v, op in rows:
            if op == "D":
                model.pop(k, None)
                continue
            old = model.get(k)
            w = v if v is not None or old is None else old["w"]
            model[k] = {"k": k, "v": v, "w": w}
        got = table.scan().to_arrow().sort_by("k").to_pylist()
        assert rows_equal(got, [model[k] for k in sorted(model)])


@pytest.mark.parametrize(
    "bad",
    [
        pa.month_day_nano_interval(),
        pa.null(),
        pa.sparse_union([pa.field("a", pa.int32())]),
        pa.list_(pa.month_day_nano_interval()),
        pa.struct([]),
        pa.fixed_shape_tensor(pa.int32(), [2]),
        pa.struct([("x", pa.dense_union([pa.field("a", pa.int8())]))]),
        # Arrow builds these; Parquet's DECIMAL needs 0 <= scale <= precision (the first write failed)
        pa.decimal128(5, -2),
        pa.decimal128(3, 5),
        pa.list_(pa.decimal256(40, -1)),
    ],
)
def test_types_parquet_cannot_store_are_refused_at_create(tmp_path: Path, bad: pa.DataType) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    with pytest.raises(errors.UnsupportedType, match="column 'c'"):
        cat.create_table("t.bad", pa.schema([("id", pa.int64()), ("c", bad)]), primary_key="id")
    assert cat.tables() == []
    assert not (tmp_path / "wh").exists()  # nothing created, not even the catalog


def test_encodings_are_stored_as_plain_types_also_inside_nested_types(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("d", pa.dictionary(pa.int32(), pa.string())),
            ("v", pa.string_view()),
            ("r", pa.run_end_encoded(pa.int32(), pa.int64())),
            ("lv", pa.list_view(pa.int32())),
            (
                "s",
                pa.struct([("x", pa.string_view()), ("l", pa.list_(pa.dictionary(pa.int8(), pa.string())))]),
            ),
        ]
    )
    t = cat.create_table("t.enc", schema, primary_key="id")
    assert [str(f.type) for f in t.schema] == [
        "int64",
        "string",
        "string",
        "int64",
        "list<item: int32>",
        "struct<x: string, l: list<item: string>>",
    ]
    t.upsert(
        pa.table(
            {"id": [1], "d": ["a"], "v": ["b"], "r": [7], "lv": [[1, 2]], "s": [{"x": "y", "l": ["p", "q"]}]}
        )
    )
    assert t.scan().to_arrow().to_pylist() == [
        {"id": 1, "d": "a", "v": "b", "r": 7, "lv": [1, 2], "s": {"x": "y", "l": ["p", "q"]}}
    ]


def test_encoded_input_columns_write_and_merge_as_their_plain_values(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string()), ("n", pa.int64())])
    t = cat.create_table("t.plain", schema, primary_key="id", buckets=2)
    t.upsert(
        pa.table(
            {
                "id": pc.run_end_encode(pa.array([1, 2, 3])),
                "s": pa.array(["a", "b", "a"]).dictionary_encode(),
                "n": pc.run_end_encode(pa.array([5, 5, 6])),
            }
        )
    )
    t.upsert(pa.table({"id": [2], "s": pa.array(["v"], pa.string_view())}))  # partial, a view
    source = pa.table(
        {
            "id": pa.array([3, 4]).dictionary_encode(),
            "s": pc.run_end_encode(pa.array(["x", "y"])),
            "n": pa.array([7, 8]),
        }
    )
    t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
    t.delete(pa.table({"id": pc.run_end_encode(pa.array([1]))}))
    nested = cat.create_table(
        "t.nested", pa.schema([("k", pa.string()), ("l", pa.list_(pa.string()))]), primary_key="k"
    )
    views = pa.table({"k": ["a", "c"], "l": pa.array([["p"], ["r"]], pa.list_(pa.string_view()))})
    nested.merge(views).when_not_matched_insert_all().execute()  # a view inside a list
    assert sorted(nested.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "l": ["p"]},
        {"k": "c", "l": ["r"]},
    ]
    got = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 2, "s": "v", "n": 5}, {"id": 3, "s": "x", "n": 7}, {"id": 4, "s": "y", "n": 8}]


def test_a_struct_field_named_like_a_key_column_does_not_shadow_it(tmp_path: Path) -> None:
    """Parquet leaf names repeat: a struct's field ``id`` is a leaf named ``id`` too."""
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("s", pa.struct([("id", pa.int64())])), ("id", pa.int64()), ("v", pa.string())])
    t = cat.create_table("t.shadow", schema, primary_key="id", properties={"write.row-group-rows": "2"})
    t.upsert(pa.table({"s": [{"id": 100 - i} for i in range(6)], "id": list(range(6)), "v": list("abcdef")}))
    assert t.scan(filter="id = 4").to_arrow().to_pylist() == [{"s": {"id": 96}, "id": 4, "v": "e"}]
    assert sorted(t.scan(filter="id IN (0, 5)", columns=["v"]).to_arrow().column("v").to_pylist()) == [
        "a",
        "f",
    ]
    explained = t.scan(filter="id = 4").explain()
    assert explained.row_groups_kept == 1  # pruned by the key's statistics, not the struct field's


@pytest.mark.parametrize("threads", [1, 3])
def test_columns_named_like_another_column_s_leaves(tmp_path: Path, threads: int) -> None:
    """A top-level name may equal a nested column's Parquet leaf path (``s.a``, ``l.list.element``,
    ``m.key_value.value``): every projection and filter reads each column's own leaves, as the rows were
    written (found by review: a projected struct came back NULL)."""
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("s.a", pa.string()),
            ("s", pa.struct([("a", pa.string()), ("b", pa.int32())])),
            ("l", pa.list_(pa.string())),
            ("l.list.element", pa.string()),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("m.key_value.value", pa.int64()),
        ]
    )
    rows = [
        {
            "id": i,
            "s.a": f"top{i}",
            "s": {"a": f"in{i}", "b": i},
            "l": [f"e{i}", "f"],
            "l.list.element": f"L{i}",
            "m": [("k", i)],
            "m.key_value.value": -i,
        }
        for i in range(4)
    ]
    rows[1]["s"] = None
    t = cat.create_table("t.leaves", schema, primary_key="id", buckets=2)
    t.upsert(pa.Table.from_pylist(rows[:3], schema=schema))
    t.upsert(pa.Table.from_pylist(rows[2:], schema=schema))  # a second file per split: a merge
    for column in schema.names[1:]:
        got = t.scan(columns=["id", column], threads=threads).to_arrow().sort_by("id").to_pylist()
        assert got == [{"id": r["id"], column: r[column]} for r in rows], column
        assert t.scan(columns=[column], threads=threads).to_arrow().num_rows == len(rows)
    assert t.scan(filter="s is null", threads=threads).count() == 1
    assert t.scan(filter="`s.a` = 'top2'", columns=["id"]).to_arrow().column("id").to_pylist() == [2]
    assert t.scan(filter="`m.key_value.value` < -1").count() == 2


def test_concat_of_repetitive_and_large_strings(tmp_path: Path) -> None:
    """Repetitive strings are dictionary-encoded while a batch is prepared; concat must still fold them."""
    cat = mere.connect(str(tmp_path / "wh"))
    for t_ in (pa.string(), pa.large_string()):
        t = cat.create_table(
            f"t.tags_{t_}".replace("_string", ""),
            pa.schema([("k", pa.int64()), ("tags", t_)]),
            primary_key="k",
            merge_operators={"tags": "concat:|"},
        )
        t.upsert(pa.table({"k": [1] * 5000 + [2], "tags": pa.array(["x"] * 5000 + [None], t_)}))
        t.upsert(pa.table({"k": [1, 2], "tags": pa.array(["y", "z"], t_)}))
        got = {r["k"]: r["tags"] for r in t.scan().to_arrow().to_pylist()}
        assert got == {1: "|".join(["x"] * 5000 + ["y"]), 2: "z"}
        assert t.scan().schema.field("tags").type == t_


LOSSLESS = [  # (input array, column type, stored values)
    (pa.array([1, None], pa.int64()), pa.int8(), [1, None]),
    (pa.array([2**53], pa.int64()), pa.float64(), [float(2**53)]),
    (pa.array([1.0, 2.0]), pa.int32(), [1, 2]),
    (pa.array([0.5]), pa.float32(), [0.5]),
    (pa.array([0.1]), pa.decimal128(5, 2), [Decimal("0.10")]),
    (pa.array(["a"]), pa.large_string(), ["a"]),
    (pa.array(["a"]).dictionary_encode(), pa.string(), ["a"]),
    (pa.array(["ü"]), pa.binary(), ["ü".encode()]),
    (
        pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC)], pa.timestamp("s", tz="UTC")),
        pa.timestamp("us", tz="Asia/Tokyo"),
        [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)],
    ),
    (pa.array([[1, 2]], pa.list_(pa.int64())), pa.list_(pa.int16()), [[1, 2]]),
    (pa.nulls(1), pa.date32(), [None]),
]
LOSSY = [  # (input array, column type, what the message names)
    (pa.array(["12.5"]), pa.float64(), "never parses"),
    (pa.array(["2026-11-02"]), pa.date32(), "never parses"),
    (pa.array(["7"]), pa.int64(), "never parses"),
    (pa.array([5]), pa.string(), "not compatible"),
    (pa.array([True]), pa.int32(), "not compatible"),
    (pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us")), pa.timestamp("us", tz="UTC"), "tz_localize"),
    (
        pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
        pa.timestamp("us"),
        "naive column",
    ),
    (pa.array([300]), pa.int8(), "without loss"),
    (pa.array([1.5]), pa.int64(), "without loss"),
    (pa.array([2**53 + 1]), pa.float64(), "without loss"),
    (pa.array([0.1]), pa.float32(), "would change"),
    (pa.array([0.125]), pa.decimal128(5, 2), "would change"),
    (pa.array([dt.datetime(2026, 1, 1, 0, 0, 0, 1)], pa.timestamp("us")), pa.timestamp("ms"), "without loss"),
    (pa.array([[1.5]], pa.list_(pa.float64())), pa.list_(pa.int64()), "without loss"),
    (pa.array([b"\xff"]), pa.string(), "not compatible"),
]


@pytest.mark.parametrize(("given", "column", "stored"), LOSSLESS, ids=lambda v: str(v)[:30])
def test_lossless_input_casts_are_accepted(
    tmp_path: Path, given: pa.Array, column: pa.DataType, stored: list[Any]
) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "t.c", pa.schema([("id", pa.int64()), ("c", column)]), primary_key="id"
    )
    t.upsert(pa.table({"id": list(range(len(given))), "c": given}))
    assert t.scan().to_arrow().sort_by("id").column("c").to_pylist() == stored


@pytest.mark.parametrize(("given", "column", "says"), LOSSY, ids=lambda v: str(v)[:30])
def test_lossy_or_guessing_input_casts_are_refused(
    tmp_path: Path, given: pa.Array, column: pa.DataType, says: str
) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "t.c", pa.schema([("id", pa.int64()), ("c", column)]), primary_key="id"
    )
    with pytest.raises(errors.SchemaMismatch, match=f"column 'c'.*{says}"):
        t.upsert(pa.table({"id": list(range(len(given))), "c": given}))
    assert t.version == 0 and t.scan().count() == 0


@pytest.mark.parametrize("keyed", [True, False])
def test_projection_reads_only_the_needed_columns(tmp_path: Path, keyed: bool) -> None:
    """Bytes fetched, not time: a one-column scan reads that column (plus the key for the merge)."""
    cat = mere.connect(str(tmp_path / "wh"))
    n = 20_000
    schema = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.float64()), ("c", pa.string())])
    t = cat.create_table("t.p", schema, primary_key="id" if keyed else None)
    rows = pa.table(
        {
            "id": list(range(n)),
            "a": [f"a{i}" * 5 for i in range(n)],
            "b": [i / 3 for i in range(n)],
            "c": [f"c{i * 7}" * 5 for i in range(n)],
        }
    )
    (t.upsert if keyed else t.append)(rows)
    if keyed:
        t.upsert(rows.slice(0, 100))

    def fetched(**kwargs: Any) -> int:
        t.storage.stats.reset()
        t.storage.clear_cache()
        t.scan(**kwargs).to_arrow()
        return t.storage.stats.bytes_read

    full = fetched()
    assert fetched(columns=["b"]) < full / 2
    assert fetched(columns=["id"]) < full / 5
    assert fetched(columns=["b"], filter="id < 10") < full / 2
    assert t.scan(columns=["b"], filter="b > 10").count() == n - 31


def test_dates_beyond_python_s_calendar_read_back_and_cannot_be_partition_values(tmp_path: Path) -> None:
    # Arrow holds dates past year 9999 (DuckDB too); Python's date cannot, so statistics of such values
    # prune nothing, and a partition value (kept as a string, read back as a Python value) is refused.
    cat = mere.connect(str(tmp_path))
    far = pa.array([0, 3_000_000], pa.int32()).cast(pa.date32())  # 1970-01-01 and year 10183
    keyed = cat.create_table("t.far", pa.schema([("k", pa.date32()), ("v", pa.int64())]), primary_key="k")
    keyed.upsert(pa.table({"k": far, "v": [1, 2]}))
    keyed.upsert(pa.table({"k": far.slice(1), "v": [3]}))
    assert sorted(keyed.to_arrow().column("v").to_pylist()) == [1, 3] and keyed.scan().count() == 2
    assert keyed.scan(filter="k > DATE '2000-01-01'").to_arrow().column("v").to_pylist() == [3]
    stamps = cat.create_table("t.far_ts", pa.schema([("k", pa.timestamp("us")), ("v", pa.int64())]))
    stamps.append(pa.table({"k": pa.array([0, 10**18], pa.int64()).cast(pa.timestamp("us")), "v": [1, 2]}))
    assert stamps.scan(filter="k > TIMESTAMP '2000-01-01 00:00:00'").to_arrow().column("v").to_pylist() == [2]
    parted = cat.create_table(
        "t.far_part", pa.schema([("k", pa.int64()), ("d", pa.date32())]), primary_key="k", partition_by=["d"]
    )
    with pytest.raises(errors.InvalidInput, match="would not read back"):
        parted.upsert(pa.table({"k": [1, 2], "d": far}))
    assert parted.refresh().version == 0 and parted.to_arrow().num_rows == 0
    # MERGE prunes its target by the source's key range: none to take where it has no Python value
    merged = keyed.merge(pa.table({"k": far, "v": [10, 20]})).when_matched_update_all().execute()
    assert merged.updated == 2 and sorted(keyed.to_arrow().column("v").to_pylist()) == [10, 20]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    big=st.lists(st.one_of(st.none(), st.integers(0, 2**64 - 1)), min_size=1, max_size=6),
    signed=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=6),
)
def test_to_pandas_with_arrow_dtypes_keeps_every_64_bit_integer_as_documented(
    tmp_path_factory: pytest.TempPathFactory, big: list[int | None], signed: list[int | None]
) -> None:
    """Issue 30 item 12: plain to_pandas() turns an integer column holding a NULL into float64 (2**63 + 5
    becomes 9.223372036854776e+18); to_pandas' documentation says so and shows the exact call."""
    import pandas as pd

    from mere.table.scan import Scan

    doc = Scan.to_pandas.__doc__ or ""
    assert "float64" in doc and "types_mapper=pd.ArrowDtype" in doc and "9.223372036854776e+18" in doc
    n = min(len(big), len(signed))
    schema = pa.schema([("id", pa.int64()), ("u", pa.uint64()), ("i", pa.int64())])
    t = mere.connect(tmp_path_factory.mktemp("wh")).create_table("t.t", schema, primary_key="id")
    t.upsert(pa.table({"id": range(n), "u": big[:n], "i": signed[:n]}, schema=schema))
    frame = t.scan().to_pandas(types_mapper=pd.ArrowDtype).sort_values("id")
    assert [None if v is pd.NA else int(v) for v in frame["u"]] == big[:n]
    assert [None if v is pd.NA else int(v) for v in frame["i"]] == signed[:n]


def test_plain_to_pandas_turns_a_uint64_with_nulls_into_float64_as_documented(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("u", pa.uint64())])
    t = mere.connect(tmp_path).create_table("t.t", schema, primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "u": [2**63 + 5, None]}, schema=schema))
    frame = t.scan().to_pandas().sort_values("id")
    assert str(frame["u"].dtype) == "float64" and frame["u"].iloc[0] == 9.223372036854776e18  # lossy
