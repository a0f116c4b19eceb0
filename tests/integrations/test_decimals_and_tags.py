"""Every engine integration on what engines disagree about: 256-bit decimals (Polars and DuckDB have
only 128-bit ones; wider values are a typed error), NULL fixed-size lists of them, ``tag=`` reads, a
predicate Polars refuses on a fully pruned read, ``set_epoch`` past 2**63, and DuckDB's dataset's
arguments, scanner and pickling."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.errors import InvalidInput

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", "UTC")),
        ("d", pa.decimal256(30, 2)),
        ("l", pa.list_(pa.decimal256(20, 1))),
    ]
)


@pytest.fixture
def tagged(tmp_path: Path) -> mere.Table:
    """Two rows tagged 'first', then a third row and a changed first one."""
    t = mere.connect(tmp_path / "wh").create_table("ns.t", SCHEMA, primary_key="id")
    t.upsert(
        pa.table(
            {
                "id": [1, 2],
                "ts": pa.array([0, 1], pa.timestamp("us", "UTC")),
                "d": pa.array([decimal.Decimal("1.25"), None], pa.decimal256(30, 2)),
                "l": pa.array([[decimal.Decimal("2.5")], None], pa.list_(pa.decimal256(20, 1))),
            },
            schema=SCHEMA,
        )
    )
    t.tag("first")
    t.upsert(pa.table({"id": [1, 3], "d": pa.array([decimal.Decimal("9.5")] * 2, pa.decimal256(30, 2))}))
    return t


def test_polars(tagged: mere.Table) -> None:
    pl = pytest.importorskip("polars")
    from mere.integrations.polars import scan_table

    # Refused by Polars on the rows themselves: refused too where mere pruned every row away.
    wrong = (pl.col("id") == 5) & (pl.col("ts") > dt.datetime(2020, 1, 1))  # naive literal, zoned column
    with pytest.raises(pl.exceptions.SchemaError):  # Polars itself, on the rows (no 256-bit decimals)
        pl.from_arrow(tagged.to_arrow(columns=["id", "ts"])).filter(wrong)
    with pytest.raises(pl.exceptions.SchemaError):
        scan_table(tagged).filter(wrong).collect()
    # 256-bit decimals of up to 38 digits arrive as Polars decimals, nested ones too; tag= and columns=.
    first = scan_table(tagged, tag="first").sort("id").collect()
    assert first.to_dicts() == [
        {"id": 1, "ts": dt.datetime(1970, 1, 1, tzinfo=dt.UTC), "d": decimal.Decimal("1.25"),
         "l": [decimal.Decimal("2.5")]},
        {"id": 2, "ts": dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC), "d": None, "l": None},
    ]  # fmt: skip
    now = scan_table(tagged, columns=["id", "d"]).filter(pl.col("d") > 2).sort("id").collect()
    assert now.to_dicts() == [
        {"id": 1, "d": decimal.Decimal("9.50")},
        {"id": 3, "d": decimal.Decimal("9.50")},
    ]
    assert tagged.scan().to_polars().sort("id")["d"].to_list() == [
        decimal.Decimal("9.50"),
        None,
        decimal.Decimal("9.50"),
    ]
    # Wider ones: a typed error naming the column, and columns= leaves it out.
    wide = tagged.catalog.create_table(
        "ns.w",
        pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.decimal256(40, 2))]),
        primary_key="id",
    )
    wide.upsert(pa.table({"id": [1], "x": pa.array([decimal.Decimal("1.5")], pa.decimal256(40, 2))}))
    for read in (lambda: scan_table(wide), lambda: wide.scan().to_polars()):
        with pytest.raises(InvalidInput, match="38 digits"):
            read()
    assert scan_table(wide, columns=["id"]).collect().to_dicts() == [{"id": 1}]


def test_duckdb(tagged: mere.Table) -> None:
    duckdb = pytest.importorskip("duckdb")
    from mere.integrations.duckdb import dataset, register

    con = duckdb.connect()
    register(con, "v", tagged, tag="first")  # 256-bit decimals of up to 38 digits: as DuckDB decimals
    assert con.execute("SELECT id, d, l FROM v ORDER BY id").fetchall() == [
        (1, decimal.Decimal("1.25"), [decimal.Decimal("2.5")]),
        (2, None, None),
    ]
    register(con, "now", tagged)
    assert con.execute("SELECT id FROM now WHERE d > 2 ORDER BY id").fetchall() == [(1,), (3,)]
    wide = tagged.catalog.create_table(
        "ns.w",
        pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.decimal256(40, 2))]),
        primary_key="id",
    )
    with pytest.raises(InvalidInput, match="38 digits"):
        register(con, "w", wide)
    register(con, "w", wide, columns=["id"])
    with pytest.raises(InvalidInput):
        register(con, "v2", tagged.scan(), tag="first")  # a Scan is pinned already
    d = dataset(tagged.scan())
    for bad in (lambda: list(d.to_batches(columns=5)), lambda: d.scanner(columns="id"), lambda: d.head("2"),
                lambda: d.head(-1)):  # fmt: skip
        with pytest.raises(InvalidInput):
            bad()
    assert d.head(0).num_rows == 0 and d.head(2).num_rows == 2


def test_torch(tagged: mere.Table) -> None:
    pytest.importorskip("torch")
    from mere.integrations.torch import TableDataset

    ds = TableDataset(tagged, columns=["id"], tag="first")
    assert sorted(int(i) for batch in ds for i in batch["id"]) == [1, 2]
    later = TableDataset(tagged, columns=["id"], as_of=dt.datetime.now(dt.UTC))
    assert sorted(int(i) for batch in later for i in batch["id"]) == [1, 2, 3]
    ds.set_epoch(2**63 - 1)
    assert ds.epoch == 2**63 - 1
    for epoch in (2**63, 2**64 + 1):
        with pytest.raises(InvalidInput, match="epoch"):
            ds.set_epoch(epoch)
    assert ds.epoch == 2**63 - 1
    with pytest.raises(InvalidInput, match="at least one column"):
        TableDataset(tagged, columns=[])


def test_dask(tagged: mere.Table) -> None:
    pytest.importorskip("dask.dataframe")
    from mere.integrations.dask import read_table

    frame = read_table(tagged, columns=["id"], tag="first").compute()
    assert sorted(frame["id"].tolist()) == [1, 2]


def test_fixed_size_lists_of_wide_decimals_with_nulls(tmp_path: Path) -> None:
    # pyarrow leaves junk under a NULL fixed-size list's slots: the narrowing cast must not check it.
    kind = pa.list_(pa.decimal256(4, 1), 2)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("f", kind)])
    t = mere.connect(tmp_path / "wh").create_table("ns.f", schema, primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "f": [[decimal.Decimal("1.5"), None], None]}, schema=schema))
    want = [(1, [decimal.Decimal("1.5"), None]), (2, None)]
    pl = pytest.importorskip("polars")
    from mere.integrations.polars import scan_table

    def rows(found: list[Any]) -> list[tuple[Any, Any]]:
        return [(i, None if f is None else list(f)) for i, f in found]

    assert rows(t.scan().to_polars().sort("id").rows()) == want
    assert rows(scan_table(t).sort("id").collect().rows()) == want
    duckdb = pytest.importorskip("duckdb")
    from mere.integrations.duckdb import register

    con = duckdb.connect()
    register(con, "f", t)
    assert rows(con.execute("SELECT id, f FROM f ORDER BY id").fetchall()) == want
    del pl


def test_duckdb_dataset_scanner_and_pickling(tagged: mere.Table) -> None:
    import pickle

    pytest.importorskip("duckdb")
    from mere.integrations.duckdb import dataset

    narrow = mere.table.scan.decimal128_schema(tagged.scan().schema, "ns.t", "DuckDB")
    d = dataset(tagged.scan(), narrow)
    # The scanner's own to_table() once waited forever (pyarrow's fragment readahead of 0).
    assert d.scanner(columns=["id"]).to_table().column("id").to_pylist() in (
        [1, 2, 3],
        [1, 3, 2],
        [2, 1, 3],
        [2, 3, 1],
        [3, 1, 2],
        [3, 2, 1],
    )
    copy = pickle.loads(pickle.dumps(d))
    assert copy.schema == narrow and copy.to_table().schema.field("d").type == pa.decimal128(30, 2)
