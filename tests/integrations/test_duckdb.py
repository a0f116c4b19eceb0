"""DuckDB SQL over mere tables: a registered table equals the same SQL over ``scan.to_arrow()``, DuckDB's
projection and key/partition filters reach mere's pruning, and non-key filters run after the merge."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from enginelake import build_big
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import FilterError, InvalidInput, MereError, SchemaMismatch
from mere.integrations.duckdb import dataset, pushdown, register

duckdb = pytest.importorskip("duckdb")

QUERIES = [
    "SELECT * FROM {t}",
    "SELECT id, name, tags FROM {t}",
    "SELECT * FROM {t} WHERE id < 100",
    "SELECT * FROM {t} WHERE id = 12",
    "SELECT price, id FROM {t} WHERE id IN (3, 12, 30, 599, 10000)",
    "SELECT * FROM {t} WHERE id BETWEEN 50 AND 70 OR id = 300",
    "SELECT * FROM {t} WHERE day = DATE '2026-11-21'",
    "SELECT * FROM {t} WHERE day IS NULL AND id > 200",
    "SELECT * FROM {t} WHERE day IN ('2026-11-20', '2026-11-21') AND NOT (id < 100)",
    "SELECT * FROM {t} WHERE qty > 3000",
    "SELECT * FROM {t} WHERE qty IS NULL",
    "SELECT * FROM {t} WHERE isnan(score) OR score = 0",
    "SELECT * FROM {t} WHERE name LIKE '%v2%' AND id < 300",
    "SELECT * FROM {t} WHERE ts > TIMESTAMPTZ '2026-11-20 05:00:00+00' AND id <> 7",
    "SELECT day, count(*) AS n, sum(qty) AS q, sum(price) AS p, max(name) AS m FROM {t} GROUP BY day",
    "SELECT count(*) FROM {t} WHERE id < 300",
    "SELECT list_sort(tags) AS tags, id FROM {t} WHERE len(tags) = 2 AND id % 7 = 1",
]


def rows(result: Any) -> list[tuple[Any, ...]]:
    """Result rows in a canonical order, with NaN and the sign of zero made comparable."""

    def norm(v: Any) -> Any:
        if isinstance(v, float):
            return ("nan",) if math.isnan(v) else (v, math.copysign(1.0, v))
        if isinstance(v, list):
            return tuple(norm(x) for x in v)
        return v

    return sorted((tuple(norm(v) for v in r) for r in result.fetchall()), key=repr)


@pytest.mark.parametrize("query", QUERIES)
def test_registered_table_equals_sql_on_the_arrow_result(lake: mere.Table, query: str) -> None:
    con = duckdb.connect()
    register(con, "orders", lake)
    reference = lake.scan().to_arrow()
    con.register("reference", reference)
    assert rows(con.sql(query.format(t="orders"))) == rows(con.sql(query.format(t="reference")))
    assert (
        con.sql(query.format(t="orders")).to_arrow_table().schema
        == con.sql(query.format(t="reference")).to_arrow_table().schema
    )


def test_scan_variable_time_travel_and_pinning(lake: mere.Table) -> None:
    scan = lake.scan(columns=["id", "qty"], version=2)
    expected = scan.to_arrow()
    got = duckdb.sql("SELECT * FROM scan ORDER BY id").to_arrow_table()
    assert got.cast(expected.schema).equals(expected.sort_by("id"))  # DuckDB drops NOT NULL
    assert duckdb.sql("SELECT count(*) FROM scan").fetchall()[0] == (expected.num_rows,)  # re-callable stream
    con = duckdb.connect()
    register(con, "v2", lake, version=2, columns=["id", "qty"], filter="id < 300")
    assert rows(con.sql("SELECT * FROM v2")) == rows(duckdb.sql("SELECT * FROM scan WHERE id < 300"))
    register(con, "now", lake)
    before = con.sql("SELECT count(*) FROM now").fetchall()[0]
    lake.upsert(pa.table({"id": [10_000, 10_001], "day": pa.array([None, None], pa.date32())}))
    assert con.sql("SELECT count(*) FROM now").fetchall()[0] == before  # pinned at registration
    register(con, "now", lake)
    assert con.sql("SELECT count(*) FROM now").fetchall()[0] == (before[0] + 2,)
    register(con, "s", lake.scan(filter="id >= 10000"))
    assert con.sql("SELECT id FROM s ORDER BY id").fetchall() == [(10_000,), (10_001,)]


def test_non_key_filter_never_drops_an_older_version(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table(
        "t.v", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id", buckets=1
    )
    t.upsert(pa.table({"id": [1, 2], "v": [10, 20]}))
    t.upsert(pa.table({"id": [1], "v": [0]}))
    con = duckdb.connect()
    register(con, "t", t)
    assert con.sql("SELECT id FROM t WHERE v > 5").fetchall() == [(2,)]
    assert con.sql("SELECT v FROM t WHERE v < 5 AND id = 1").fetchall() == [(0,)]


def test_key_point_filter_reads_little(tmp_path: Path) -> None:
    t = build_big(mere.connect(str(tmp_path / "wh")))
    con = duckdb.connect()
    register(con, "big", t)

    def fetched(sql: str) -> tuple[int, list[Any]]:
        t.storage.stats.reset()
        t.storage.clear_cache()
        result = con.sql(sql).fetchall()
        return t.storage.stats.bytes_read, result

    full, everything = fetched("SELECT * FROM big")
    assert len(everything) == 300_000
    point, row = fetched("SELECT x FROM big WHERE id = 12345")
    assert row == [(0.5,)]
    assert point <= 0.02 * full, (point, full)
    t.storage.stats.reset()
    t.storage.clear_cache()
    t.scan(columns=["x"], filter="id = 12345").to_arrow()
    assert point <= t.storage.stats.bytes_read  # what mere itself reads for the same lookup
    listed, found = fetched("SELECT x FROM big WHERE id IN (7, 150001)")
    assert sorted(found) == [(0.5,), (150_001.0,)]
    assert listed <= 0.04 * full, (listed, full)
    ranged, counted = fetched("SELECT count(*) FROM big WHERE id BETWEEN 1000 AND 1999 AND x = 0.5")
    assert counted == [(1000,)]
    assert ranged <= 0.2 * full, (ranged, full)


def test_pushdown_is_proven_or_left_out(lake: mere.Table) -> None:
    scan = lake.scan()
    f = ds.field
    assert str(pushdown(f("id") == 3, scan)) == str(mere.col("id") == 3)
    assert str(pushdown((f("id") == 3) & (f("qty") > 5), scan)) == str(mere.col("id") == 3)
    assert pushdown(~((f("id") == 3) & (f("qty") > 5)), scan) is None  # a NOT needs an exact inside
    assert pushdown((f("id") == 3) | (f("qty") > 5), scan) is None
    assert pushdown(f("qty") == 3, scan) is None  # not a key or partition column
    assert pushdown(f("name") == 'a"b', scan) is None
    # A string whose text looks like more filter is one literal, not a conjunct.
    tricky = (f("id") == 3) | (f("day").cast(pa.string()) == '") or (id == 5')
    assert pushdown(tricky, scan) is None
    big = pc.is_in(f("id"), value_set=pa.array(range(500), pa.int64()))
    # pyarrow prints a long value set cut short; its values come from the typed, serialised form
    assert str(pushdown(big, scan)) == str(mere.col("id").isin(list(range(500))))
    con = duckdb.connect()
    register(con, "o", lake)
    con.register("reference", lake.scan().to_arrow())
    ids = ", ".join(str(i) for i in range(0, 600, 2))
    query = "SELECT id FROM {t} WHERE id IN (" + ids + ")"
    assert rows(con.sql(query.format(t="o"))) == rows(con.sql(query.format(t="reference")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lo=st.integers(-5, 650),
    width=st.integers(0, 300),
    ids=st.lists(st.integers(-3, 650), min_size=1, max_size=6),
    negate=st.booleans(),
    qty=st.integers(0, 6000),
    day=st.sampled_from(["DATE '2026-11-20'", "DATE '2026-11-21'", "NULL"]),
)
def test_random_predicates_equal_the_arrow_result(
    lake: mere.Table, lo: int, width: int, ids: list[int], negate: bool, qty: int, day: str
) -> None:
    pred = f"(id >= {lo} AND id < {lo + width} OR id IN ({', '.join(map(str, ids))}))"
    if negate:
        pred = f"NOT {pred}"
    day_test = "day IS NULL" if day == "NULL" else f"day = {day}"
    query = (
        f"SELECT id, qty FROM {{t}} WHERE {pred} AND (qty > {qty} OR qty IS NULL) AND ({day_test} OR id < 50)"
    )
    con = duckdb.connect()
    register(con, "orders", lake)
    con.register("reference", lake.scan().to_arrow())
    assert rows(con.sql(query.format(t="orders"))) == rows(con.sql(query.format(t="reference")))


def test_bad_arguments(lake: mere.Table) -> None:
    con = duckdb.connect()
    before = lake.version
    with pytest.raises(InvalidInput):
        register("not a connection", "t", lake)
    with pytest.raises(InvalidInput):
        register(con, "", lake)
    with pytest.raises(InvalidInput):
        register(con, "t", "eng.orders")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        register(con, "t", lake.scan(), columns=["id"])
    with pytest.raises(MereError):
        register(con, "t", lake, columns=["nope"])
    with pytest.raises(MereError):
        register(con, "t", lake, version=99)
    assert con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name = 't'").fetchall()[0] == (0,)
    assert lake.version == before
    assert isinstance(dataset(lake.scan()), ds.Dataset)
    data = dataset(
        lake.scan()
    )  # every entry point checks columns and filters alike (to_table once raised KeyError)
    for call in (
        lambda: data.to_table(columns=["nope"]),
        lambda: data.head(1, columns=["nope"]),
        lambda: data.scanner(columns=["nope"]).to_table(),
    ):
        with pytest.raises(SchemaMismatch):
            call()
    for call in (
        lambda: data.to_table(filter=ds.field("nope") > 1),
        lambda: data.count_rows(filter=ds.field("nope") > 1),
        lambda: data.scanner(filter=ds.field("nope") > 1).to_table(),
    ):
        with pytest.raises(FilterError):
            call()


def test_dataset_methods_read_through_mere(lake: mere.Table) -> None:
    data = dataset(lake.scan())
    expected = lake.scan().to_arrow()
    wanted = (ds.field("id") < 100) & (ds.field("qty") > 50)
    reference = expected.filter(wanted).select(["id", "qty"])
    assert data.to_table(columns=["id", "qty"], filter=wanted).sort_by("id").equals(reference.sort_by("id"))
    assert data.count_rows() == expected.num_rows
    assert data.count_rows(filter=wanted) == reference.num_rows
    assert data.head(5, columns=["id"]).num_rows == 5
    assert data.take([0, 2]).num_rows == 2
    assert sum(b.num_rows for b in data.to_batches(filter=wanted)) == reference.num_rows
    assert data.partition_expression.equals(pc.scalar(True))
    for call in (
        lambda: data.get_fragments(),
        lambda: data.filter(ds.field("id") > 1),
        lambda: data.sort_by("id"),
        lambda: data.join(data, "id"),
        lambda: data.replace_schema(data.schema),
    ):
        with pytest.raises(InvalidInput):
            call()
    with pytest.raises(InvalidInput):
        data.to_table(filter="id < 3")  # type: ignore[arg-type]


def test_stopping_early_lets_the_process_exit(lake: mere.Table, tmp_path: Path) -> None:
    """A LIMIT or head() stops the read; nothing is left running that keeps the interpreter alive."""
    import subprocess
    import sys

    code = f"""
import duckdb, mere
from mere.integrations.duckdb import dataset, register
t = mere.connect({str(tmp_path / "wh")!r}).table("eng.orders")
print(dataset(t.scan()).head(3).num_rows)
con = duckdb.connect()
register(con, "o", t)
print(len(con.sql("SELECT * FROM o LIMIT 3").fetchall()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["3", "3"]
