"""Trial 52: Spark checks an overwrite's ``partition`` option when it plans the write (before any task),
and drops a table the write itself made when planning refuses. Oracle: mere's own ``Table.overwrite``
with the same partition on an identical table (accepts / refuses the same, leaves the same rows)."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import write

import mere
from mere import errors

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("day", pa.string()), ("qty", pa.int64())])
SPARK_SCHEMA = "id long, n int, day string, qty long"
_names = itertools.count()


def _table(wh: str) -> mere.Table:
    t = mere.connect(wh).create_table(
        f"p52.t{next(_names)}", SCHEMA, primary_key=["id"], partition_by=["n", "day"], buckets=2
    )
    t.upsert(
        pa.table(
            {"id": [1, 2, 3, 4], "n": [1, 1, 2, None], "day": ["d1", "d2", "d1", None], "qty": [1, 2, 3, 4]},
            schema=SCHEMA,
        )
    )
    return t


def _rows(t: mere.Table) -> set[tuple[Any, ...]]:
    return {(r["id"], r["n"], r["day"], r["qty"]) for r in t.to_arrow().to_pylist()}


def _files(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


# (partition option, the rows written): each is judged by mere's Python overwrite on a twin table
CASES = [
    ('{"nope": 1}', [(10, 1, "d1", 10)]),
    ('{"n": "abc"}', [(10, 1, "d1", 10)]),
    ('{"n": 2147483648}', [(10, 1, "d1", 10)]),
    ('{"n": 1.5}', [(10, 1, "d1", 10)]),
    ('{"n": [1]}', [(10, 1, "d1", 10)]),
    ('{"n": {"a": 1}}', [(10, 1, "d1", 10)]),
    ('{"day": 5}', [(10, 1, "5", 10)]),
    ('{"n": true}', [(10, 1, "d1", 10)]),
    ('{"n": 1}', [(10, 1, "d1", 10), (11, 1, "d2", 11)]),
    ('{"n": 1, "day": "d1"}', [(10, 1, "d1", 10)]),
    ('{"n": null}', [(10, None, "d9", 10)]),
    ('{"day": null, "n": null}', [(10, None, None, 10)]),
    ('{"n": "1"}', [(10, 1, "d1", 10)]),
    ("{}", [(10, 1, "d1", 10)]),
    ('{"n": 2}', []),
]


@pytest.mark.parametrize("partition,new", CASES, ids=[c[0] for c in CASES])
def test_spark_partition_overwrite_matches_python(
    spark: SparkSession, wh: str, partition: str, new: list[tuple[Any, ...]]
) -> None:
    import json

    twin = _table(wh)
    try:
        twin.overwrite(
            pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in new], schema=SCHEMA),
            json.loads(partition),
        )
        python_error: Exception | None = None
    except errors.MereError as e:
        python_error = e
    except Exception as e:
        pytest.fail(f"Python overwrite raised a raw {type(e).__name__}: {e}")
    t = _table(wh)
    before, version, files = _rows(t), t.version, _files(t)
    df = spark.createDataFrame(new, SPARK_SCHEMA)
    if python_error is None:
        write(df, wh, t.name, mode="overwrite", partition=partition)
        assert _rows(t) == _rows(twin)
    else:
        with pytest.raises(Exception) as info:
            write(df, wh, t.name, mode="overwrite", partition=partition)
        text = str(info.value)
        assert "Job aborted" not in text and "Lost task" not in text, text[:2000]  # refused when planned
        assert (_rows(t), t.version, _files(t)) == (before, version, files)
        assert not t.cleanup(older_than=dt.timedelta(0))


def test_planning_refusal_drops_only_a_table_the_write_made(spark: SparkSession, wh: str) -> None:
    df = spark.createDataFrame([(10, 1, "d1", 10)], SPARK_SCHEMA)
    opts = {"primary_key": "id", "partition_by": "n,day", "buckets": "2"}
    # a table made by this write: gone again, for each planning refusal
    for bad, message in (
        ({"partition": '{"n": "abc"}'}, "does not fit"),
        ({"partition": '{"x": 1}'}, "not partition columns"),
        ({"partitionOverwriteMode": "x"}, "static or dynamic"),
        ({"partition": "n=1"}, "partition"),
        ({"partition": "[1]"}, "partition"),
        ({"partition": '{"n": 1'}, "partition"),
    ):
        name = f"p52.new{next(_names)}"
        with pytest.raises(Exception, match=message):
            write(df, wh, name, mode="overwrite", **opts, **bad)
        assert name not in mere.connect(wh).tables(), bad
        # the name is free: the next write makes it
        write(df, wh, name, mode="overwrite", **opts, partition='{"n": 1}')
        assert {r["id"] for r in mere.connect(wh).table(name).to_arrow().to_pylist()} == {10}
    # a table an earlier Spark write made (empty, even): kept
    name = f"p52.kept{next(_names)}"
    write(df.limit(0), wh, name, mode="append", **opts)
    assert name in mere.connect(wh).tables()
    with pytest.raises(Exception, match="does not fit"):
        write(df, wh, name, mode="overwrite", partition='{"n": "abc"}')
    assert name in mere.connect(wh).tables()
    # an unpartitioned table made by the write with a partition option: refused, dropped
    name = f"p52.flat{next(_names)}"
    with pytest.raises(Exception, match="not partition columns"):
        write(df, wh, name, mode="overwrite", primary_key="id", buckets="2", partition='{"n": 1}')
    assert name not in mere.connect(wh).tables()
