"""NOT NULL inside nested columns through Spark (issue 30, item 7).

Spark's plan proves ``array(1, 2)``'s elements, ``named_struct``'s fields and a ``map`` literal's values NOT
NULL; a table a Spark write created kept that, so later rows with a NULL there were refused (and an upsert
of ``{"arr": [[1, None]]}`` raised pyarrow's bare ``ArrowInvalid``). Created nested fields are nullable now,
map keys aside; a table that does declare a NOT NULL field inside a column refuses a NULL there with
SchemaMismatch naming the field, from every Spark write path, and stays as it was.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read, write

import mere
from mere.errors import SchemaMismatch
from mere.integrations.spark import merge

LITERALS = """
    SELECT {id}L AS id, array(1, 2) AS arr, named_struct('f', 1, 'g', 'x') AS s, map('k', 1) AS m,
           array(array(1L)) AS deep, array(named_struct('f', 1)) AS rows
"""
NULLS = """
    SELECT 2L AS id, array(1, NULL) AS arr, named_struct('f', CAST(NULL AS INT), 'g', 'y') AS s,
           map('k', CAST(NULL AS INT)) AS m, array(array(1L, NULL), NULL) AS deep,
           array(named_struct('f', CAST(NULL AS INT)), NULL) AS rows
"""


def _not_null_inside(t: pa.DataType, path: str) -> list[str]:
    out = []
    kids: list[pa.Field] = []
    if pa.types.is_struct(t):
        kids = list(t)
    elif pa.types.is_map(t):
        kids = [t.item_field]
        out += [f"{path}.{t.key_field.name}"] if not t.key_field.nullable else []
        out += _not_null_inside(t.key_type, f"{path}.{t.key_field.name}")
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        kids = [t.value_field]
    for f in kids:
        if not f.nullable:
            out.append(f"{path}.{f.name}")
        out += _not_null_inside(f.type, f"{path}.{f.name}")
    return out


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_table_spark_creates_takes_nulls_inside_nested_columns(
    spark: SparkSession, wh: str, mode: str
) -> None:
    write(spark.sql(LITERALS.format(id=1)), wh, "n.t", mode=mode, primary_key="id")
    t = mere.connect(wh).table("n.t")
    inside = {f.name: _not_null_inside(f.type, f.name) for f in t.schema}
    assert inside == {"id": [], "arr": [], "s": [], "m": ["m.key"], "deep": [], "rows": []}
    write(spark.sql(NULLS), wh, "n.t")  # Spark rows with NULLs in there
    t.upsert(pa.table({"id": [3], "deep": [[[1, None]]]}))  # and Python ones
    got = {r["id"]: r for r in read(spark, wh, "n.t").collect()}
    assert got[2]["arr"] == [1, None] and got[2]["s"]["f"] is None and got[2]["m"] == {"k": None}
    assert (
        got[2]["deep"] == [[1, None], None] and got[2]["rows"][0]["f"] is None and got[2]["rows"][1] is None
    )
    assert got[3]["deep"] == [[1, None]] and got[1]["arr"] == [1, 2]


def test_a_strict_table_refuses_a_nested_null_from_every_spark_write(spark: SparkSession, wh: str) -> None:
    element = pa.field("element", pa.int32(), nullable=False)
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("arr", pa.list_(element)),
            ("s", pa.struct([pa.field("f", pa.int32(), nullable=False), ("g", pa.string())])),
        ]
    )
    t = mere.connect(wh).create_table("n.strict", schema, primary_key="id")
    t.upsert(pa.table({"id": [1], "arr": [[1]], "s": [{"f": 1, "g": "a"}]}, schema=schema))
    before = (t.version, t.to_arrow().to_pylist())
    arr_null = spark.sql("SELECT 2L AS id, array(1, NULL) AS arr")
    s_null = spark.sql("SELECT 2L AS id, named_struct('f', CAST(NULL AS INT), 'g', 'y') AS s")
    for mode in ("append", "overwrite"):
        with pytest.raises(Exception, match=r"SchemaMismatch.*'arr\.element' holds a NULL"):
            write(arr_null, wh, "n.strict", mode=mode)
    with pytest.raises(Exception, match=r"SchemaMismatch.*'s\.f' holds a NULL"):
        write(s_null, wh, "n.strict")
    with pytest.raises(SchemaMismatch, match=r"'s\.f' holds a NULL"):
        merge(spark, s_null, "n.strict", warehouse=wh).when_not_matched_insert_all().execute()
    assert (t.version, t.to_arrow().to_pylist()) == before
    # A NULL struct or list is a value: stored, whatever Spark puts under it.
    write(
        spark.sql(
            "SELECT 3L AS id, CAST(NULL AS ARRAY<INT>) AS arr, CAST(NULL AS STRUCT<f: INT, g: STRING>) AS s"
        ),
        wh,
        "n.strict",
    )
    assert t.to_arrow(filter="id = 3").to_pylist() == [{"id": 3, "arr": None, "s": None}]
