"""NOT NULL inside nested columns (issue 30, item 7).

A table may declare fields inside its nested columns NOT NULL (a list's element, a struct's field, a map's
value): every table created before Spark writes made them nullable, and any table created with such a
schema. A write that puts a NULL there inside a present value is refused with SchemaMismatch naming the
field's path (``arr.element``, ``s.f``), on every write path, and the table stays as it was; a NULL
*parent* (a NULL struct, list or map) is an ordinary value and is stored, however Arrow built it (pa.nulls
leaves NULL children under it, which the Parquet writer refused with a bare ArrowInvalid). Before, the
refusal was pyarrow's ``ArrowInvalid: Column 'element' is declared non-nullable``, and a NULL list inside
a list whose element is NOT NULL was stored as an empty list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import SchemaMismatch
from mere.table.table import Table
from mere.write.cast import relax_nested, strict_nested

ELEMENT = pa.field("element", pa.int32(), nullable=False)
INNER = pa.list_(
    pa.field("element", pa.list_(ELEMENT), nullable=False)
)  # arr: list<list<int32 NOT NULL> NOT NULL>
STRUCT = pa.struct([pa.field("f", pa.int32(), nullable=False), ("g", pa.string())])
MAP = pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("arr", INNER), ("s", STRUCT), ("m", MAP), ("x", pa.int64())]
)
LOOSE = pa.schema([f.with_type(relax_nested(f.type)) for f in SCHEMA])  # the same shapes, NULL allowed


def _table(tmp_path: Path, keyed: bool = True) -> Table:
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table("n.t", SCHEMA, primary_key="id" if keyed else None)
    good = pa.table(
        {
            "id": [1, 2],
            "arr": [[[1]], None],
            "s": [{"f": 1, "g": "a"}, None],
            "m": [[("a", 1)], None],
            "x": [1, 2],
        },
        schema=SCHEMA,
    )
    (t.upsert if keyed else t.append)(good)
    return t


def _snapshot(t: Table) -> tuple[int, list[dict[str, Any]]]:
    return t.version, sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])


BAD = {
    "arr.element.element": {"id": [3], "arr": [[[1, None]]]},
    "arr.element": {"id": [3], "arr": [[[1], None]]},
    "s.f": {"id": [3], "s": [{"f": None, "g": "x"}]},
    "m.value": {"id": [3], "m": [[("k", None)]]},
}


@pytest.mark.parametrize("path", list(BAD))
@pytest.mark.parametrize("op", ["upsert", "overwrite", "merge", "append", "stage", "transaction"])
def test_a_null_inside_a_present_value_is_refused_naming_the_field(
    tmp_path: Path, path: str, op: str
) -> None:
    t = _table(tmp_path, keyed=op != "append")
    before = _snapshot(t)
    files = sorted((tmp_path / "wh").rglob("*.parquet"))
    data = pa.table(BAD[path], schema=pa.schema([LOOSE.field(c) for c in BAD[path]]))
    with pytest.raises(SchemaMismatch, match=rf"'{path}' holds a NULL but is declared NOT NULL") as caught:
        if op == "merge":
            t.merge(data).when_matched_update_all().when_not_matched_insert_all().execute()
        elif op == "stage":
            t.commit([t.stage(data, "upsert")])
        elif op == "transaction":
            with t.transaction() as tx:
                tx.upsert(pa.table({"id": [9], "x": [9]}))
                tx.upsert(data)
        else:
            getattr(t, op)(data)
    assert "n.t" in str(caught.value)
    assert _snapshot(t) == before
    assert sorted((tmp_path / "wh").rglob("*.parquet")) == files  # nothing left behind


def test_update_and_merge_computed_values_are_checked_too(tmp_path: Path) -> None:
    schema = SCHEMA.append(pa.field("loose", relax_nested(STRUCT)))
    t = mere.connect(tmp_path / "wh").create_table("n.t", schema, primary_key="id")
    t.upsert(
        pa.table(
            {"id": [1, 2], "s": [{"f": 1, "g": "a"}, None], "loose": [{"f": None, "g": "b"}, None]},
            schema=pa.schema([schema.field(c) for c in ("id", "s", "loose")]),
        )
    )
    before = _snapshot(t)
    with pytest.raises(SchemaMismatch, match=r"'s\.f' holds a NULL"):
        t.update(set={"s": "loose"})
    assert _snapshot(t) == before
    source = pa.table(
        {"id": [1], "loose": [{"f": None, "g": "c"}]},
        schema=pa.schema([schema.field("id"), schema.field("loose")]),
    )
    with pytest.raises(SchemaMismatch, match=r"'s\.f' holds a NULL"):
        t.merge(source).when_matched_update(set={"s": "s.loose"}).execute()
    assert _snapshot(t) == before
    t.update(set={"s": "NULL"}, where="id = 1")  # a NULL struct is a value
    assert [r["s"] for r in sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])] == [None, None]


def test_null_parents_are_stored_however_arrow_built_them(tmp_path: Path) -> None:
    """pa.nulls builds NULL children under NULL parents: a column missing from the input, SET ... = NULL,
    CDC deletes, an overwrite without the column; all of them are plain NULL values."""
    t = _table(tmp_path)
    t.upsert(pa.table({"id": [3], "x": [3]}))
    t.upsert(
        pa.table({"id": [4], "s": pa.nulls(1, STRUCT), "m": pa.nulls(1, MAP), "arr": pa.nulls(1, INNER)})
    )
    t.update(set={"s": "NULL", "x": "x + 1"}, where="id <= 2")
    k = mere.connect(tmp_path / "wh2").create_table("n.k", SCHEMA)
    k.append(pa.table({"id": [1], "x": [1]}))
    assert k.to_arrow().to_pylist() == [{"id": 1, "arr": None, "s": None, "m": None, "x": 1}]
    rows = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["s"] for r in rows] == [None, None, None, None]
    assert rows[0]["arr"] == [[1]] and rows[0]["m"] == [("a", 1)] and rows[3]["arr"] is None


def test_cdc_deletes_carry_no_values_to_check(tmp_path: Path) -> None:
    schema = SCHEMA.append(pa.field("op", pa.string()))
    t = mere.connect(tmp_path / "wh").create_table("n.c", schema, primary_key="id", cdc_column="op")
    loose = pa.schema([f.with_type(relax_nested(f.type)) for f in schema])
    t.upsert(
        pa.table(
            {"id": [1, 2], "s": [{"f": 1, "g": None}, {"f": 2, "g": None}], "op": ["I", "I"]},
            schema=pa.schema([loose.field(c) for c in ("id", "s", "op")]),
        )
    )
    t.upsert(
        pa.table(
            {"id": [1], "s": [{"f": None, "g": None}], "op": ["D"]},
            schema=pa.schema([loose.field(c) for c in ("id", "s", "op")]),
        )
    )
    assert t.to_arrow().to_pylist() == [
        {"id": 2, "arr": None, "s": {"f": 2, "g": None}, "m": None, "x": None}
    ]
    with pytest.raises(SchemaMismatch, match=r"'s\.f'"):
        t.upsert(
            pa.table(
                {"id": [3], "s": [{"f": None, "g": None}], "op": ["U"]},
                schema=pa.schema([loose.field(c) for c in ("id", "s", "op")]),
            )
        )


def test_relax_nested_keeps_map_keys_and_shapes() -> None:
    assert not strict_nested(relax_nested(SCHEMA.field("arr").type))
    relaxed = relax_nested(MAP)
    assert relaxed.key_field.nullable is False and relaxed.item_field.nullable
    deep = pa.map_(
        pa.string(), pa.field("v", pa.large_list(pa.field("e", pa.int8(), nullable=False)), nullable=False)
    )
    assert relax_nested(deep) == pa.map_(pa.string(), pa.field("v", pa.large_list(pa.field("e", pa.int8()))))
    fixed = pa.list_(pa.field("e", STRUCT, nullable=False), 2)
    assert relax_nested(fixed) == pa.list_(pa.field("e", relax_nested(STRUCT)), 2)


# -- the class: random nested types, NOT NULL flags and values ----------------------------------------


def _types(depth: int = 2) -> st.SearchStrategy[pa.DataType]:
    leaf = st.sampled_from(
        [pa.int32(), pa.string(), pa.float64(), pa.bool_(), pa.date32(), pa.timestamp("us")]
    )
    if depth == 0:
        return leaf
    inner = _types(depth - 1)
    nullable = st.booleans()

    def field(name: str, t: pa.DataType, n: bool) -> pa.Field:
        # A NOT NULL fixed-size list under a NULL struct does not read back (reader's list -> fixed-size
        # list cast of the empty list Parquet gives there; a separate, older bug): fixed-size lists nullable.
        return pa.field(name, t, nullable=n or pa.types.is_fixed_size_list(t))

    return st.one_of(
        leaf,
        st.builds(lambda t, n: pa.list_(field("element", t, n)), inner, nullable),
        st.builds(lambda t, n: pa.large_list(field("element", t, n)), inner, nullable),
        st.builds(lambda t, n: pa.list_(field("element", t, n), 2), inner, nullable),
        st.builds(
            lambda a, na, b, nb: pa.struct([field("a", a, na), field("b", b, nb)]),
            inner,
            nullable,
            inner,
            nullable,
        ),
        st.builds(lambda t, n: pa.map_(pa.string(), field("value", t, n)), inner, nullable),
    )


def _values(t: pa.DataType, nulls: bool = True) -> st.SearchStrategy[Any]:
    """Python values of ``t``'s shape with NULLs anywhere (NOT NULL fields included): the input."""
    if pa.types.is_struct(t):
        base: st.SearchStrategy[Any] = st.fixed_dictionaries({f.name: _values(f.type) for f in t})
    elif pa.types.is_fixed_size_list(t):
        base = st.lists(_values(t.value_type), min_size=t.list_size, max_size=t.list_size)
    elif pa.types.is_map(t):
        base = st.lists(
            st.tuples(st.sampled_from("abc"), _values(t.item_type)), max_size=2, unique_by=lambda e: e[0]
        )
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        base = st.lists(_values(t.value_type), max_size=2)
    elif pa.types.is_integer(t):
        base = st.integers(-5, 5)
    elif pa.types.is_string(t):
        base = st.text("xy", max_size=2)
    elif pa.types.is_floating(t):
        base = st.floats(-2, 2)
    elif pa.types.is_boolean(t):
        base = st.booleans()
    elif pa.types.is_date(t):
        base = st.dates()
    else:
        base = st.datetimes()
    return st.one_of(st.none(), base) if nulls else base


def _violation(value: Any, t: pa.DataType, path: str) -> str | None:
    """The reference: the first NOT NULL field holding None inside a present value (row-at-a-time)."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        kids = [(f, value[f.name]) for f in t]
    elif pa.types.is_map(t):
        kids = [(t.item_field, v) for _, v in value]
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        kids = [(t.value_field, v) for v in value]
    else:
        return None
    for f, v in kids:
        if v is None and not f.nullable:
            return f"{path}.{f.name}"
    for f, v in kids:
        found = _violation(v, f.type, f"{path}.{f.name}")
        if found:
            return found
    return None


def _paths(value: Any, t: pa.DataType, path: str) -> set[str]:
    out = set()
    if value is None:
        return out
    kids: list[tuple[pa.Field, Any]] = []
    if pa.types.is_struct(t):
        kids = [(f, value[f.name]) for f in t]
    elif pa.types.is_map(t):
        kids = [(t.item_field, v) for _, v in value]
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        kids = [(t.value_field, v) for v in value]
    for f, v in kids:
        if v is None and not f.nullable:
            out.add(f"{path}.{f.name}")
        out |= _paths(v, f.type, f"{path}.{f.name}")
    return out


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), kind=_types(), keyed=st.booleans())
def test_nested_not_null_is_enforced_exactly(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, kind: pa.DataType, keyed: bool
) -> None:
    values = data.draw(st.lists(_values(kind), min_size=1, max_size=5), label="values")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("c", kind)])
    t = mere.connect(tmp_path_factory.mktemp("wh")).create_table(
        "n.h", schema, primary_key="id" if keyed else None
    )
    given_ = pa.table({"id": range(len(values)), "c": pa.array(values, relax_nested(kind))})
    bad = set().union(*(_paths(v, kind, "c") for v in values))
    if bad:
        with pytest.raises(SchemaMismatch) as caught:
            (t.upsert if keyed else t.append)(given_)
        where = str(caught.value).split("'")[1]
        assert where in bad, (where, bad)
        assert t.version == 0 and t.to_arrow().num_rows == 0
    else:
        (t.upsert if keyed else t.append)(given_)
        got = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [r["c"] for r in got] == pa.array(values, relax_nested(kind)).to_pylist()
        # and a row without the column: NULL, written whatever NOT NULL fields lie inside
        (t.upsert if keyed else t.append)(pa.table({"id": [99]}))
        assert t.to_arrow(filter="id = 99").column("c").to_pylist() == [None]
