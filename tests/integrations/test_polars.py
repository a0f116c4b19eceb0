"""Polars reads mere tables eagerly (to_polars) and lazily (scan_table, the IO-plugin LazyFrame), and
writes them; the LazyFrame's projection, predicate and row limit reach mere without changing results."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from enginelake import build_big
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError
from mere.integrations.polars import pushdown, scan_table

pl = pytest.importorskip("polars")


def same(frame: Any, expected: pa.Table) -> None:
    """A Polars result equals mere's Arrow result (order-insensitive, types as Polars maps them)."""
    want = pl.from_arrow(expected)
    assert frame.schema == want.schema
    got, want = frame.sort("id"), want.sort("id")
    assert got.equals(want)  # NaN equals NaN here; the sign of zero is checked apart
    if "score" in frame.columns:
        assert (got["score"].to_numpy().view("int64") == want["score"].to_numpy().view("int64")).all()


def test_to_polars_and_c_stream_equal_the_scan(lake: mere.Table) -> None:
    scan = lake.scan()
    expected = scan.to_arrow()
    frame = scan.to_polars()
    assert isinstance(frame, pl.DataFrame)
    same(frame, expected)
    same(pl.DataFrame(scan), expected)  # the C stream, read twice: each call is a fresh read
    same(pl.DataFrame(scan), expected)
    same(
        lake.scan(columns=["id", "qty"], version=2).to_polars(),
        lake.scan(columns=["id", "qty"], version=2).to_arrow(),
    )


@pytest.mark.parametrize(
    "query",
    [
        lambda lf: lf,
        lambda lf: lf.select("id", "name", "tags"),
        lambda lf: lf.filter(pl.col("id") < 100),
        lambda lf: lf.filter(pl.col("id").is_in([3, 12, 30, 599, 10_000])),
        lambda lf: lf.filter(pl.col("id").is_between(50, 70)).select("id", "price"),
        lambda lf: lf.filter(pl.col("day") == dt.date(2026, 11, 21)),
        lambda lf: lf.filter(pl.col("day").is_null()),
        lambda lf: lf.filter(pl.col("qty") > 3000),  # non-key: after the merge
        lambda lf: lf.filter(pl.col("score").is_nan() | (pl.col("score") == 0)),
        lambda lf: lf.filter(~((pl.col("id") > 100) & (pl.col("qty") > 10))),
        lambda lf: lf.filter((pl.col("id") < 20) | (pl.col("name").str.contains("v2"))),
    ],
)
def test_lazy_queries_equal_polars_on_the_merged_rows(lake: mere.Table, query: Any) -> None:
    lazy = query(scan_table(lake)).collect()
    eager = query(lake.scan().to_polars().lazy()).collect()
    assert lazy.schema == eager.schema
    assert lazy.sort("id").equals(eager.sort("id"))
    streamed = query(scan_table(lake)).collect(engine="streaming")
    assert streamed.sort("id").equals(eager.sort("id"))


def test_head_stops_early_and_time_travel(lake: mere.Table) -> None:
    assert scan_table(lake).head(7).collect().height == 7
    assert scan_table(lake).filter(pl.col("id") > 500).head(3).collect()["id"].min() > 500
    same(scan_table(lake, version=2).collect(), lake.scan(version=2).to_arrow())
    lf = scan_table(lake)
    lake.upsert(pa.table({"id": [10_000], "day": [dt.date(2026, 11, 20)]}))
    assert lf.collect().height == lake.scan(version=lake.version - 1).count()  # pinned at planning
    assert scan_table(lake).collect().height == lake.scan().count()


def test_non_key_filter_never_drops_an_older_version(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table(
        "t.v", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id", buckets=1
    )
    t.upsert(pa.table({"id": [1, 2], "v": [10, 20]}))
    t.upsert(pa.table({"id": [1], "v": [0]}))  # key 1 now has v = 0: a filter v > 5 must not resurrect 10
    assert scan_table(t).filter(pl.col("v") > 5).collect()["id"].to_list() == [2]
    assert scan_table(t).filter(pl.col("v") < 5).collect()["v"].to_list() == [0]


def test_key_point_filter_reads_little(tmp_path: Path) -> None:
    t = build_big(mere.connect(str(tmp_path / "wh")))
    n = 300_000

    def fetched(query: Any, read: Any = lambda lf: lf.collect()) -> tuple[int, Any]:
        t.storage.stats.reset()
        t.storage.clear_cache()
        result = read(query(scan_table(t)))
        return t.storage.stats.bytes_read, result

    full, everything = fetched(lambda lf: lf)
    assert everything.height == n
    point, row = fetched(lambda lf: lf.filter(pl.col("id") == 12_345))
    assert row["x"].to_list() == [0.5]
    assert point <= 0.02 * full, (point, full)
    native, _ = fetched(lambda lf: None, lambda _: t.scan(filter="id = 12345").to_arrow())
    assert point == native  # Polars' predicate reaches mere's pruning whole
    listed, rows = fetched(lambda lf: lf.filter(pl.col("id").is_in([7, 150_001])).select("x"))
    assert sorted(rows["x"].to_list()) == [0.5, 150_001.0]
    assert listed <= 0.04 * full, (listed, full)


def test_pushdown_translation_is_never_narrower(lake: mere.Table) -> None:
    scan = lake.scan()
    assert str(pushdown(pl.col("id") == 5, scan)) == str(mere.col("id") == 5)
    # A non-key conjunct is left to Polars; under NOT only an exact translation is used.
    assert pushdown((pl.col("id") > 5) & (pl.col("qty") > 3), scan) is not None
    assert pushdown(~((pl.col("id") > 5) & (pl.col("qty") > 3)), scan) is None
    assert pushdown((pl.col("id") < 3) | (pl.col("name") == "x"), scan) is None
    assert pushdown(pl.col("id") == 5.5, scan) is None  # a float literal on an integer key: Polars decides
    assert pushdown(pl.col("qty") == 5, scan) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lo=st.integers(-5, 650),
    width=st.integers(0, 300),
    ids=st.lists(st.integers(-3, 650), max_size=6),
    negate=st.booleans(),
    qty=st.integers(0, 6000),
)
def test_random_key_predicates_equal_the_eager_result(
    lake: mere.Table, lo: int, width: int, ids: list[int], negate: bool, qty: int
) -> None:
    pred = (pl.col("id") >= lo) & (pl.col("id") < lo + width) | pl.col("id").is_in(ids)
    if negate:
        pred = ~pred
    pred = pred & ((pl.col("qty") > qty) | pl.col("qty").is_null())
    eager = lake.scan().to_polars().filter(pred)
    lazy = scan_table(lake).filter(pred).collect()
    assert lazy.sort("id").equals(eager.sort("id"))


def test_polars_writes(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table(
        "t.w", pa.schema([("id", pa.int64()), ("name", pa.string()), ("d", pa.date32())]), primary_key="id"
    )
    frame = pl.DataFrame({"id": [1, 2, 3], "name": ["a", None, "c"], "d": [dt.date(2026, 1, 1)] * 3})
    t.upsert(frame)  # Polars strings are string views: cast losslessly on the way in
    t.upsert(frame.filter(pl.col("id") == 2).with_columns(name=pl.lit("b")))
    t.upsert(frame.lazy().filter(pl.col("id") == 3).with_columns(name=pl.lit("z")).collect())
    assert t.scan().to_polars().sort("id")["name"].to_list() == ["a", "b", "z"]
    assert len(t.history()) == 4


def test_bad_arguments(lake: mere.Table) -> None:
    before = lake.version
    with pytest.raises(InvalidInput):
        scan_table("eng.orders")  # type: ignore[arg-type]
    with pytest.raises(MereError):
        scan_table(lake, version=99)
    with pytest.raises(MereError):
        scan_table(lake, filter="nope > 1")
    with pytest.raises(pl.exceptions.ColumnNotFoundError):
        scan_table(lake).select("nope").collect()
    assert lake.version == before
