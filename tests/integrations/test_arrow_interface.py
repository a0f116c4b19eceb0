"""The Arrow PyCapsule interface both ways, and pandas: a Scan is a re-callable C stream that honours a
requested schema; every write takes any object exposing ``__arrow_c_stream__`` or ``__arrow_c_array__``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from enginelake import assert_same_rows

import mere
from mere.errors import InvalidInput, SchemaMismatch


class StreamOnly:
    """An object that is nothing but an Arrow C stream (as nanoarrow or a Rust library would hand over)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.table.__arrow_c_stream__(requested_schema)


class ArrayOnly:
    """An object that is nothing but an Arrow C array of a struct (a record batch)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        return self.batch.__arrow_c_array__(requested_schema)


def test_c_stream_is_recallable_and_lazy(lake: mere.Table) -> None:
    scan = lake.scan()
    expected = scan.to_arrow()
    first = pa.RecordBatchReader.from_stream(scan).read_all()
    second = pa.table(scan)
    assert_same_rows(first, expected)
    assert_same_rows(second, expected)
    assert pa.schema(scan) == scan.schema  # __arrow_c_schema__ reads nothing
    lake.upsert(pa.table({"id": [10_000], "day": pa.array([None], pa.date32())}))
    assert pa.table(scan).num_rows == expected.num_rows  # the scan's version is pinned


def test_requested_schema_projects_and_casts(lake: mere.Table) -> None:
    scan = lake.scan()
    wanted = pa.schema([("qty", pa.float64()), ("id", pa.int64()), ("name", pa.large_string())])
    got = pa.RecordBatchReader.from_stream(scan, schema=wanted).read_all()
    assert got.schema == wanted
    expected = lake.scan(columns=["qty", "id", "name"]).to_arrow()
    assert got.column("id").equals(expected.column("id").cast(pa.int64()))
    assert got.column("qty").to_pylist() == [
        None if v is None else float(v) for v in expected["qty"].to_pylist()
    ]
    # Only the requested columns are read.
    fetched = []
    for read in (
        lambda: pa.RecordBatchReader.from_stream(scan).read_all(),
        lambda: pa.RecordBatchReader.from_stream(scan, schema=pa.schema([("id", pa.int64())])).read_all(),
        lambda: lake.scan(columns=["id"]).to_arrow(),
    ):
        lake.storage.stats.reset()
        lake.storage.clear_cache()
        read()
        fetched.append(lake.storage.stats.bytes_read)
    assert fetched[1] == fetched[2] < fetched[0], fetched
    with pytest.raises(SchemaMismatch, match="nope"):
        pa.RecordBatchReader.from_stream(scan, schema=pa.schema([("nope", pa.int64())]))
    with pytest.raises(SchemaMismatch):
        pa.RecordBatchReader.from_stream(scan, schema=pa.schema([("tags", pa.int64())]))
    with pytest.raises(SchemaMismatch):  # a column the scan's own projection left out
        pa.RecordBatchReader.from_stream(lake.scan(columns=["id"]), schema=pa.schema([("qty", pa.int64())]))
    # Types that cast, values that do not: the error crosses the C stream with mere's message (it was
    # pyarrow's own, from a lazy cast that bypassed mere).
    big = max(v for v in lake.scan(columns=["id"]).to_arrow().column("id").to_pylist())
    assert big > 127
    with pytest.raises(pa.ArrowInvalid, match="does not fit the requested schema"):
        pa.RecordBatchReader.from_stream(scan, schema=pa.schema([("id", pa.int8())])).read_all()


def test_writes_take_any_arrow_producer(tmp_path: Path) -> None:
    import duckdb
    import polars as pl

    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("d", pa.date32()), ("x", pa.float64())])
    t = cat.create_table("t.w", schema, primary_key="id", buckets=2)
    base = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "name": ["a", None, "c", "d"],
            "d": pa.array([dt.date(2026, 1, i) for i in range(1, 5)], pa.date32()),
            "x": [0.5, float("nan"), -0.0, 2.0],
        }
    )
    t.upsert(StreamOnly(base))
    t.upsert(ArrayOnly(base.slice(0, 1).to_batches()[0].set_column(1, "name", pa.array(["array"]))))
    t.upsert(pl.DataFrame({"id": [2], "name": ["polars"], "d": [dt.date(2026, 2, 2)], "x": [1.0]}))
    con = duckdb.connect()
    t.upsert(con.sql("SELECT 3::BIGINT AS id, 'duckdb' AS name, DATE '2026-03-03' AS d, 3.0::DOUBLE AS x"))
    t.upsert(pd.DataFrame({"id": [4], "name": ["pandas"], "d": [dt.date(2026, 4, 4)], "x": [4.0]}))
    got = t.scan().to_arrow().sort_by("id")
    assert got["name"].to_pylist() == ["array", "polars", "duckdb", "pandas"]
    assert len(t.history()) == 6
    log = cat.create_table("t.log", schema)
    log.append(StreamOnly(base))
    log.append(pl.from_arrow(base))
    assert log.scan().count() == 8
    with pytest.raises(InvalidInput):
        t.upsert(object())
    assert len(t.history()) == 6


def test_pandas_kwargs_pass_through(lake: mere.Table) -> None:
    scan = lake.scan()
    frame = scan.to_pandas(types_mapper=pd.ArrowDtype)
    assert all(isinstance(d, pd.ArrowDtype) for d in frame.dtypes)
    assert_same_rows(pa.Table.from_pandas(frame, preserve_index=False), scan.to_arrow())
    plain = scan.to_pandas()
    assert plain["qty"].dtype == "float64"  # pyarrow's default: nullable integers become floats
    assert scan.to_pandas(split_blocks=True, self_destruct=False).shape == plain.shape
    with pytest.raises(InvalidInput):
        scan.to_pandas(no_such_option=1)


def test_to_polars_without_polars_names_the_extra(monkeypatch: Any, lake: mere.Table) -> None:
    import builtins

    real_import = builtins.__import__

    def no_polars(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "polars" or name.startswith("polars."):
            raise ImportError("No module named 'polars'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_polars)
    monkeypatch.delitem(__import__("sys").modules, "polars", raising=False)
    with pytest.raises(mere.errors.NotInstalled, match=r"pip install 'mere\[polars\]'"):
        lake.scan().to_polars()
