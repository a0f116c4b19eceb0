"""Trial 51: every engine adapter (pandas, Polars, DuckDB, Dask, Ray, PyTorch) against a dict model.

A primary-key table with a string key, a nullable int partition column, three buckets and every column type
mere accepts (decimals of 128 and 256 bits, a timestamp with a non-UTC zone in ns, a naive ms timestamp,
large strings, binary and large binary, lists, a struct holding a list, booleans, unsigned ints, float32,
times, durations, nulls everywhere) gets several upsert, partial-upsert and delete commits. Each adapter
must return exactly the merged rows of a plain dict model (and of ``to_arrow``) at every version, with
projections and filters; non-key filters must never bring back an older version of a row. The engine
queries (Polars expressions, DuckDB SQL) are compared with the same query run by the same engine on the
materialised merged rows. Dask partitions and Ray blocks sum to the table; writes through Dask and Ray
commit once or not at all; bad arguments are typed MereErrors.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import mere
from mere.errors import InvalidInput, MereError

pd = pytest.importorskip("pandas")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

MANUAL = {"compaction.auto": "off", "retention.max-age": "off", "write.row-group-rows": "8"}
NY = zoneinfo.ZoneInfo("America/New_York")
SCHEMA = pa.schema(
    [
        pa.field("k", pa.string(), nullable=False),
        pa.field("p", pa.int32()),
        pa.field("q", pa.int64()),
        pa.field("d", pa.decimal128(20, 4)),
        pa.field("d256", pa.decimal256(30, 2)),
        pa.field("ts", pa.timestamp("ns", tz="America/New_York")),
        pa.field("tsn", pa.timestamp("ms")),
        pa.field("ls", pa.large_string()),
        pa.field("bin", pa.binary()),
        pa.field("lb", pa.large_binary()),
        pa.field("lst", pa.list_(pa.int64())),
        pa.field("st", pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])),
        pa.field("b", pa.bool_()),
        pa.field("u8", pa.uint8()),
        pa.field("f", pa.float32()),
        pa.field("t", pa.time64("us")),
        pa.field("dur", pa.duration("us")),
    ]
)
COLUMNS = SCHEMA.names
KEYS = 60


def _row(i: int, v: int) -> dict[str, Any]:
    return {
        "k": f"k{i:03d}",
        "p": None if i % 5 == 0 else i % 3,
        "q": None if (i + v) % 7 == 0 else i * 10 + v,
        "d": Decimal(f"{i}.{v:04d}") if i % 4 else None,
        "d256": Decimal(f"-{i}.{v:02d}"),
        "ts": dt.datetime(2026, 3, 8, 6, 59, tzinfo=dt.UTC) + dt.timedelta(minutes=i, seconds=v),
        "tsn": dt.datetime(1960, 1, 1) + dt.timedelta(days=i, milliseconds=v) if i % 6 else None,
        "ls": "é" * (i % 9) + f"-{v}",
        "bin": bytes([i % 256, 0, v]),
        "lb": None if i % 3 == 0 else b"\x00\xff" * (i % 5),
        "lst": [i, v, None] if i % 2 else None,
        "st": {"a": i * v, "b": ["q", None]} if i % 7 else None,
        "b": [True, False, None][(i + v) % 3],
        "u8": 255 - (i * v) % 256,
        "f": float("nan") if i % 11 == 0 else (-0.0 if i % 13 == 0 else i / 3 + v),
        "t": dt.time(i % 24, v % 60),
        "dur": dt.timedelta(microseconds=i * v - 100),
    }


def canon(v: Any) -> Any:
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, pd.Timestamp):
        v = v.to_pydatetime()
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC)
    if isinstance(v, list):
        return tuple(canon(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((a, canon(b)) for a, b in v.items()))
    return v


def rows_of(table: pa.Table, columns: list[str] | None = None) -> dict[str, tuple[Any, ...]]:
    columns = columns or table.column_names
    out: dict[str, tuple[Any, ...]] = {}
    for r in table.select(columns).to_pylist():
        assert r["k"] not in out, f"key {r['k']} read twice"
        out[r["k"]] = tuple(canon(r[c]) for c in columns)
    return out


def model_rows(model: dict[str, dict[str, Any]], columns: list[str], keep: Any = None) -> Any:
    """The model's rows as Arrow holds them (float32 rounding, ns timestamps), in ``rows_of``'s form."""
    kept = [r for r in model.values() if keep is None or keep(r)]
    return rows_of(pa.Table.from_pylist(kept, schema=SCHEMA), columns)


class Lake:
    """The table and its dict model after each version."""

    def __init__(self, catalog: mere.Catalog) -> None:
        self.table = catalog.create_table(
            "t51.all", SCHEMA, primary_key="k", partition_by="p", buckets=3, properties=MANUAL
        )
        self.empty = catalog.create_table("t51.empty", SCHEMA, primary_key="k", partition_by="p", buckets=3)
        self.models: dict[int, dict[str, dict[str, Any]]] = {}
        model: dict[str, dict[str, Any]] = {}
        t = self.table

        def snap() -> None:
            self.models[t.version] = {k: dict(r) for k, r in model.items()}

        batch = [_row(i, 1) for i in range(KEYS)]
        t.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))
        model.update({r["k"]: r for r in batch})
        snap()
        batch = [_row(i, 2) for i in range(0, KEYS, 2)]
        t.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))
        model.update({r["k"]: r for r in batch})
        snap()
        t.delete("k = 'k003' or k = 'k010' or k = 'k011'")
        for k in ("k003", "k010", "k011"):
            del model[k]
        snap()
        partial_schema = pa.schema([SCHEMA.field(c) for c in ("k", "p", "q", "ls")])
        partial = [
            {"k": f"k{i:03d}", "p": _row(i, 1)["p"], "q": 7000 + i, "ls": None} for i in range(1, KEYS, 5)
        ]
        t.upsert(pa.Table.from_pylist(partial, schema=partial_schema))
        for r in partial:
            model[r["k"]] = {**model.get(r["k"], dict.fromkeys(COLUMNS)), **r}
        snap()
        batch = [_row(i, 5) for i in (3, 10, 20, 21, 22)] + [_row(i, 5) for i in range(KEYS, KEYS + 5)]
        t.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))
        model.update({r["k"]: r for r in batch})
        snap()
        t.delete("q >= 7000")  # a non-key delete of the partially upserted rows
        for k in [k for k, r in model.items() if r["q"] is not None and r["q"] >= 7000]:
            del model[k]
        snap()
        self.model = model
        self.all_deleted = catalog.create_table(
            "t51.gone", SCHEMA, primary_key="k", partition_by="p", buckets=3, properties=MANUAL
        )
        self.all_deleted.upsert(pa.Table.from_pylist([_row(i, 1) for i in range(10)], schema=SCHEMA))
        self.all_deleted.delete("k >= ''")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    return Lake(mere.connect(str(tmp_path_factory.mktemp("t51") / "wh")))


def test_model_equals_to_arrow_at_every_version(lake: Lake) -> None:
    assert len(lake.models) == 6
    for version, model in lake.models.items():
        assert rows_of(lake.table.scan(version=version).to_arrow()) == model_rows(model, COLUMNS), version
    assert len(lake.model) > 40
    assert lake.empty.scan().to_arrow().num_rows == 0
    assert lake.all_deleted.scan().count() == 0


# -- pandas -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mapper", ["default", "arrow"])
def test_pandas_round_trips_every_version(lake: Lake, mapper: str) -> None:
    kwargs = {"types_mapper": pd.ArrowDtype} if mapper == "arrow" else {}
    for version, model in lake.models.items():
        frame = lake.table.scan(version=version).to_pandas(**kwargs)
        got = pa.Table.from_pandas(frame, preserve_index=False)
        if mapper == "arrow":
            got = got.cast(SCHEMA)
            assert rows_of(got) == model_rows(model, COLUMNS), version
        else:
            assert sorted(frame["k"]) == sorted(model), version


def test_pandas_empty_tables_keep_the_columns(lake: Lake) -> None:
    for t in (lake.empty, lake.all_deleted):
        frame = t.scan().to_pandas()
        assert list(frame.columns) == COLUMNS and len(frame) == 0


# -- Polars -----------------------------------------------------------------------------------------------

pl = pytest.importorskip("polars")


def _polars_predicates() -> list[tuple[str, Any]]:
    c = pl.col
    return [
        ("key eq", c("k") == "k020"),
        ("key range", (c("k") >= "k020") & (c("k") < "k030")),
        ("key in", c("k").is_in(["k003", "k010", "k011", "k020", "k999"])),
        ("part null", c("p").is_null()),
        ("part in", c("p").is_in([0, 2])),
        ("part ne", c("p") != 1),
        ("nonkey old value", c("q") == 11),  # k001's q at v1; its q is 7001 since v4 (then deleted)
        ("nonkey old ls", c("ls") == "é-1"),
        ("nonkey q gt", c("q") > 300),
        ("q null", c("q").is_null()),
        ("key or nonkey", (c("k") == "k000") | (c("q") < 50)),
        ("not key", ~(c("k") < "k030")),
        ("decimal", c("d") > Decimal("20")),
        ("d256", c("d256") < Decimal("-30")),
        ("bin", c("bin") == bytes([4, 0, 2])),
        ("bool", c("b")),
        ("u8", c("u8") >= 250),
        ("f nan", c("f").is_nan()),
        ("ts", c("ts") > dt.datetime(2026, 3, 8, 7, 30, tzinfo=dt.UTC).astimezone(NY)),
        ("tsn", c("tsn") < dt.datetime(1960, 1, 20)),
        ("struct", c("st").struct.field("a") > 20),
        ("list len", c("lst").list.len() == 3),
        ("key between", c("k").is_between(pl.lit("k010"), pl.lit("k020"))),
        ("part and key", (c("p") == 1) & (c("k") > "k040")),
        ("time", c("t") < dt.time(5, 0)),
    ]


POLARS_PREDICATES = _polars_predicates()


@pytest.mark.parametrize("which", range(len(POLARS_PREDICATES)), ids=[n for n, _ in POLARS_PREDICATES])
def test_polars_lazy_filters_equal_polars_on_the_merged_rows(lake: Lake, which: int) -> None:
    from mere.integrations.polars import scan_table

    _, predicate = POLARS_PREDICATES[which]
    for version in lake.models:
        truth = lake.table.scan(version=version).to_polars().filter(predicate).sort("k")
        got = scan_table(lake.table, version=version).filter(predicate).collect().sort("k")
        assert got.equals(truth, null_equal=True), version
        projected = (
            scan_table(lake.table, version=version).filter(predicate).select("k", "q").collect().sort("k")
        )
        assert projected.equals(truth.select("k", "q"), null_equal=True), version
        head = scan_table(lake.table, version=version).filter(predicate).head(2).collect()
        assert head.height == min(2, truth.height)
        assert set(head["k"].to_list()) <= set(truth["k"].to_list())


def test_polars_every_version_equals_the_model(lake: Lake) -> None:
    from mere.integrations.polars import scan_table

    for version, model in lake.models.items():
        lazy = scan_table(lake.table, version=version).collect(engine="streaming").to_arrow().cast(SCHEMA)
        assert rows_of(lazy) == model_rows(model, COLUMNS), version
        eager = lake.table.scan(version=version).to_polars().to_arrow().cast(SCHEMA)
        assert rows_of(eager) == model_rows(model, COLUMNS), version
        cols = ["k", "st", "d256", "lb"]
        proj = scan_table(lake.table, version=version, columns=cols, filter="p is null").collect()
        keep = lambda r: r["p"] is None  # noqa: E731
        got = proj.to_arrow().cast(pa.schema([SCHEMA.field(c) for c in cols]))
        assert rows_of(got) == model_rows(model, cols, keep), version


def test_polars_empty_tables(lake: Lake) -> None:
    from mere.integrations.polars import scan_table

    for t in (lake.empty, lake.all_deleted):
        frame = scan_table(t).filter(pl.col("q") > 1).collect()
        assert frame.height == 0 and frame.columns == COLUMNS
        assert scan_table(t).select(pl.len()).collect().item() == 0
        assert t.scan().to_polars().height == 0


# -- DuckDB -----------------------------------------------------------------------------------------------

duckdb = pytest.importorskip("duckdb")

DUCK_QUERIES = [
    "SELECT k FROM {v} WHERE k = 'k020'",
    "SELECT k, q FROM {v} WHERE k BETWEEN 'k010' AND 'k020'",
    "SELECT k FROM {v} WHERE k IN ('k003', 'k010', 'k011', 'k020', 'zzz')",
    "SELECT k FROM {v} WHERE k NOT IN ('k003', 'k020')",
    "SELECT k, p FROM {v} WHERE p IS NULL",
    "SELECT k, p FROM {v} WHERE p IS NOT NULL AND p <> 1",
    "SELECT k FROM {v} WHERE q = 11",
    "SELECT k FROM {v} WHERE ls = 'é-1'",
    "SELECT k, q FROM {v} WHERE q > 300 OR k < 'k005'",
    "SELECT k FROM {v} WHERE q IS NULL",
    "SELECT k FROM {v} WHERE NOT (k < 'k030')",
    "SELECT k, d FROM {v} WHERE d > 20",
    "SELECT k FROM {v} WHERE d256 < -30",
    "SELECT k FROM {v} WHERE bin = '\\x04\\x00\\x02'::BLOB",
    "SELECT k FROM {v} WHERE b",
    "SELECT k FROM {v} WHERE u8 >= 250",
    "SELECT k FROM {v} WHERE isnan(f)",
    "SELECT k FROM {v} WHERE tsn < TIMESTAMP '1960-01-20'",
    "SELECT k FROM {v} WHERE st.a > 20",
    "SELECT k FROM {v} WHERE len(lst) = 3",
    "SELECT k FROM {v} WHERE p = 1 AND k > 'k040'",
    "SELECT k FROM {v} WHERE t < TIME '05:00:00'",
    "SELECT k FROM {v} WHERE k LIKE 'k02%'",
    "SELECT k FROM {v} WHERE coalesce(q, -1) < 100",
    "SELECT p, count(*) AS n, sum(q) AS s FROM {v} GROUP BY p",
    "SELECT k FROM {v} WHERE lb IS NULL AND p IN (0, 1)",
    "SELECT k FROM {v} WHERE f = 0",
    "SELECT k FROM {v} WHERE k > 'k050' LIMIT 100",
]


def _duck_rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(con.sql(sql).fetchall(), key=repr)


@pytest.mark.parametrize("which", range(len(DUCK_QUERIES)))
def test_duckdb_queries_equal_duckdb_on_the_merged_rows(lake: Lake, which: int) -> None:
    from mere.integrations.duckdb import register

    sql = DUCK_QUERIES[which]
    con = duckdb.connect()
    for version in lake.models:
        register(con, "v", lake.table, version=version)
        merged = lake.table.scan(version=version).to_arrow()
        merged = merged.cast(merged.schema.set(4, pa.field("d256", pa.decimal128(30, 2))))
        con.register("truth", merged)
        assert _duck_rows(con, sql.format(v="v")) == _duck_rows(con, sql.format(v="truth")), (version, sql)


def test_duckdb_every_version_equals_the_model(lake: Lake) -> None:
    from mere.integrations.duckdb import register

    con = duckdb.connect()
    cols = [c for c in COLUMNS if c != "dur"]  # DuckDB reads a duration as an INTERVAL
    for version, model in lake.models.items():
        register(con, "v", lake.table, version=version)
        got = con.sql(f"SELECT {', '.join(cols)} FROM v").to_arrow_table()
        got = got.cast(pa.schema([SCHEMA.field(c) for c in cols]))
        assert rows_of(got) == model_rows(model, cols), version
        got = con.sql("SELECT k, q FROM v WHERE q < 100 OR q IS NULL").to_arrow_table()
        keep = lambda r: r["q"] is None or r["q"] < 100  # noqa: E731
        assert rows_of(got) == model_rows(model, ["k", "q"], keep), version


def test_duckdb_empty_tables(lake: Lake) -> None:
    from mere.integrations.duckdb import register

    con = duckdb.connect()
    for t in (lake.empty, lake.all_deleted):
        register(con, "e", t)
        assert con.sql("SELECT count(*) FROM e").fetchall() == [(0,)]
        assert con.sql("SELECT k FROM e WHERE k = 'k001' AND q > 3").fetchall() == []
        assert len(con.sql("SELECT * FROM e").columns) == len(COLUMNS)


def test_duckdb_register_a_scan_and_the_pinned_version(lake: Lake, tmp_path: Path) -> None:
    from mere.integrations.duckdb import register

    t = mere.connect(str(tmp_path / "wh")).create_table("x.pin", SCHEMA, primary_key="k", buckets=2)
    t.upsert(pa.Table.from_pylist([_row(i, 1) for i in range(10)], schema=SCHEMA))
    con = duckdb.connect()
    register(con, "pinned", t)
    register(con, "scan", t.scan(filter="q > 50"))
    t.upsert(pa.Table.from_pylist([_row(i, 9) for i in range(5, 20)], schema=SCHEMA))
    t.delete("k = 'k001'")
    assert con.sql("SELECT count(*) FROM pinned").fetchall() == [(10,)]
    assert sorted(con.sql("SELECT k FROM scan").fetchall()) == [
        (r["k"],) for r in map(_row, range(10), [1] * 10) if (r["q"] or 0) > 50
    ]
    register(con, "pinned", t)
    assert con.sql("SELECT count(*) FROM pinned").fetchall() == [(19,)]


# -- bad arguments ----------------------------------------------------------------------------------------


def _bad_calls(lake: Lake) -> list[tuple[str, Any]]:
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table

    t = lake.table
    return [
        ("polars not a table", lambda: scan_table("t51.all")),
        ("polars no column", lambda: scan_table(t, columns=["nope"])),
        ("polars bad filter", lambda: scan_table(t, filter="q >")),
        ("polars filter type", lambda: scan_table(t, filter="k > 3")),
        ("polars version", lambda: scan_table(t, version=999)),
        ("polars version -1", lambda: scan_table(t, version=-1)),
        ("polars version str", lambda: scan_table(t, version="2")),
        ("polars version and tag", lambda: scan_table(t, version=1, tag="x")),
        ("polars no tag", lambda: scan_table(t, tag="nope")),
        ("polars columns str", lambda: scan_table(t, columns=5)),
        ("duckdb not con", lambda: register(object(), "v", t)),
        ("duckdb empty name", lambda: register(duckdb.connect(), "", t)),
        ("duckdb no column", lambda: register(duckdb.connect(), "v", t, columns=["nope"])),
        ("duckdb empty columns", lambda: register(duckdb.connect(), "v", t, columns=[])),
        ("duckdb scan and args", lambda: register(duckdb.connect(), "v", t.scan(), version=1)),
        ("duckdb version", lambda: register(duckdb.connect(), "v", t, version=999)),
        ("duckdb filter", lambda: register(duckdb.connect(), "v", t, filter="nope = 1")),
        ("duckdb as_of before", lambda: register(duckdb.connect(), "v", t, as_of=dt.datetime(2000, 1, 1))),
        ("duckdb as_of junk", lambda: register(duckdb.connect(), "v", t, as_of="yesterday-ish")),
        ("duckdb not a table", lambda: register(duckdb.connect(), "v", pa.table({"a": [1]}))),
        ("duckdb closed con", lambda: _closed_register(t)),
    ]


def _closed_register(t: mere.Table) -> None:
    from mere.integrations.duckdb import register

    con = duckdb.connect()
    con.close()
    register(con, "v", t)


@pytest.mark.parametrize("which", range(21))
def test_bad_arguments_are_typed_mere_errors(lake: Lake, which: int) -> None:
    calls = _bad_calls(lake)
    assert len(calls) == 21
    name, call = calls[which]
    before = lake.table.version
    with pytest.raises(MereError):
        call()
    assert lake.table.version == before, name


# -- PyTorch ----------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")

TORCH_COLS = ["u8", "q", "f", "p"]


def test_torch_ranks_and_workers_cover_each_row_once(lake: Lake) -> None:
    from mere.integrations.torch import TableDataset

    for version, model in lake.models.items():
        want = model_rows(model, ["k", *TORCH_COLS])
        for world in (1, 2, 5):
            seen: dict[str, tuple[Any, ...]] = {}
            for rank in range(world):
                ds = TableDataset(
                    lake.table,
                    columns=["k", *TORCH_COLS],
                    version=version,
                    batch_size=7,
                    rank=rank,
                    world_size=world,
                    output="arrow",
                    shuffle=True,
                    seed=3,
                )
                for batch in ds:
                    for k, row in rows_of(pa.Table.from_batches([batch])).items():
                        assert k not in seen, (version, world, k)
                        seen[k] = row
            assert seen == want, (version, world)


def test_torch_tensors_equal_the_model(lake: Lake) -> None:
    from torch.utils.data import DataLoader

    from mere.integrations.torch import TableDataset

    version = max(lake.models)
    model = lake.models[version]
    ds = TableDataset(
        lake.table, columns=["u8", "d256"], filter="u8 is not null", output="arrow", batch_size=5
    )
    assert sorted(x for b in ds for x in b.column("u8").to_pylist()) == sorted(
        r["u8"] for r in model.values()
    )
    ds = TableDataset(lake.table, columns=["u8", "f"], version=version, batch_size=4)
    seen = []
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        assert batch["u8"].dtype == torch.uint8 and batch["f"].dtype == torch.float32
        seen += list(zip(batch["u8"].tolist(), [canon(x) for x in batch["f"].tolist()], strict=True))
    want = [(r["u8"], canon(float(pa.scalar(r["f"], pa.float32()).as_py()))) for r in model.values()]
    assert sorted(seen, key=repr) == sorted(want, key=repr)


def test_torch_empty_tables_yield_nothing(lake: Lake) -> None:
    from mere.integrations.torch import TableDataset

    for t in (lake.empty, lake.all_deleted):
        assert list(TableDataset(t, columns=["u8", "q"])) == []
        assert list(TableDataset(t, columns=["k"], output="arrow", rank=1, world_size=3)) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"columns": ["k"]},
        {"columns": []},
        {"columns": ["u8"], "batch_size": 0},
        {"columns": ["u8"], "batch_size": True},
        {"columns": ["u8"], "rank": 2, "world_size": 2},
        {"columns": ["u8"], "rank": 0},
        {"columns": ["u8"], "shuffle": 1},
        {"columns": ["u8"], "seed": -1},
        {"columns": ["u8"], "output": "numpy"},
        {"columns": ["u8"], "version": 999},
        {"columns": ["u8"], "max_task_bytes": 0},
        {"columns": ["nope"]},
        {"columns": ["u8"], "filter": "u8 >"},
    ],
)
def test_torch_bad_arguments(lake: Lake, kwargs: dict[str, Any]) -> None:
    from mere.integrations.torch import TableDataset

    with pytest.raises(MereError):
        TableDataset(lake.table, **kwargs)


def test_torch_nulls_in_a_tensor_column_are_a_typed_error(lake: Lake) -> None:
    from mere.integrations.torch import TableDataset

    with pytest.raises(InvalidInput):
        list(TableDataset(lake.table, columns=["q"]))


# -- Dask -------------------------------------------------------------------------------------------------

dask = pytest.importorskip("dask")


def _dask_table(frame: Any, columns: list[str]) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False).cast(
        pa.schema([SCHEMA.field(c) for c in columns])
    )


DASK_FILTERS = [
    (None, None),
    ("q > 300", lambda r: r["q"] is not None and r["q"] > 300),
    ("q = 11 or ls = 'é-1'", lambda r: r["q"] == 11 or r["ls"] == "é-1"),
    ("p is null or k < 'k010'", lambda r: r["p"] is None or r["k"] < "k010"),
    ("d256 < -30", lambda r: r["d256"] is not None and r["d256"] < Decimal(-30)),
]


@pytest.mark.parametrize("where", range(len(DASK_FILTERS)))
def test_dask_reads_equal_the_model(lake: Lake, where: int) -> None:
    from mere.integrations.dask import read_table

    text, keep = DASK_FILTERS[where]
    for version, model in lake.models.items():
        for columns in (COLUMNS, ["k", "d", "st"]):
            ddf = read_table(lake.table, columns=columns, filter=text, version=version, partition_bytes=400)
            with dask.config.set(scheduler="sync"):
                parts = [p.compute() for p in ddf.to_delayed()]
                whole = ddf.compute()
            assert sum(len(p) for p in parts) == len(whole)
            got = rows_of(_dask_table(whole, columns))
            assert got == model_rows(model, columns, keep), (version, text, columns)
            if where == 0 and columns is COLUMNS:
                assert ddf.npartitions > 1


def test_dask_empty_tables(lake: Lake) -> None:
    from mere.integrations.dask import read_table

    for t in (lake.empty, lake.all_deleted):
        ddf = read_table(t)
        with dask.config.set(scheduler="sync"):
            frame = ddf.compute()
        assert len(frame) == 0 and list(frame.columns) == COLUMNS
        assert list(ddf.dtypes.index) == COLUMNS


class Boom(Exception):
    pass


def _maybe_fail(frame: Any) -> Any:
    if (frame["k"] == "k030").any():
        raise Boom("partition with k030")
    return frame


def test_dask_write_is_one_commit_or_none(tmp_path: Path) -> None:
    import dask.dataframe as dd

    from mere.integrations.dask import read_table, write

    t = mere.connect(str(tmp_path / "wh")).create_table(
        "x.dw", SCHEMA, primary_key="k", partition_by="p", buckets=3, properties=MANUAL
    )
    t.upsert(pa.Table.from_pylist([_row(i, 1) for i in range(40)], schema=SCHEMA))
    base = t.scan().to_arrow()
    frame = pa.Table.from_pylist([_row(i, 4) for i in range(20, 60)], schema=SCHEMA).to_pandas(
        types_mapper=pd.ArrowDtype
    )
    ddf = dd.from_pandas(frame, npartitions=4)
    with dask.config.set(scheduler="threads"), pytest.raises((Boom, MereError)):
        write(ddf.map_partitions(_maybe_fail, meta=ddf._meta), t)
    assert t.version == 1 and rows_of(t.scan().to_arrow()) == rows_of(base)
    with dask.config.set(scheduler="threads"):
        result = write(ddf, t, idempotency_key="t51-once")
        again = write(ddf, t, idempotency_key="t51-once")
    assert t.version == 2 and result.version == again.version == 2
    model = {r["k"]: r for r in [_row(i, 1) for i in range(20)] + [_row(i, 4) for i in range(20, 60)]}
    assert rows_of(t.scan().to_arrow()) == model_rows(model, COLUMNS)
    with dask.config.set(scheduler="sync"):
        back = read_table(t).compute()
    assert rows_of(_dask_table(back, COLUMNS)) == model_rows(model, COLUMNS)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partition_bytes": 0},
        {"partition_bytes": 1.5},
        {"min_partitions": 0},
        {"types_mapper": 3},
        {"columns": ["nope"]},
        {"filter": "q >"},
        {"version": 999},
        {"version": 1, "tag": "x"},
    ],
)
def test_dask_bad_read_arguments(lake: Lake, kwargs: dict[str, Any]) -> None:
    from mere.integrations.dask import read_table

    with pytest.raises(MereError):
        read_table(lake.table, **kwargs)


def test_dask_bad_write_arguments(lake: Lake) -> None:
    import dask.dataframe as dd

    from mere.integrations.dask import write

    ddf = dd.from_pandas(pd.DataFrame({"k": ["z"]}), npartitions=1)
    before = lake.table.version
    for call in (
        lambda: write(ddf, lake.table, mode="append"),
        lambda: write(ddf, lake.table, mode="merge"),
        lambda: write(pd.DataFrame({"k": ["z"]}), lake.table),
        lambda: write(ddf, "t51.all"),
    ):
        with pytest.raises(MereError):
            call()
    assert lake.table.version == before


# -- Ray --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_mod() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from rayutil import local_ray

    with local_ray(ray):
        yield ray


def test_ray_reads_equal_the_model(lake: Lake, ray_mod: Any) -> None:
    from mere.integrations.ray import read_table

    cols = ["k", "p", "q", "d", "d256", "ts", "ls", "bin", "lst", "st", "b", "u8"]
    for version in (1, 3, max(lake.models)):
        model = lake.models[version]
        for text, keep in DASK_FILTERS[:3]:
            ds = read_table(lake.table, columns=cols, filter=text, version=version, max_task_bytes=500)
            tables = [ray_mod.get(ref) for ref in ds.to_arrow_refs()]
            assert sum(x.num_rows for x in tables) == ds.count()
            merged = pa.concat_tables([x.cast(pa.schema([SCHEMA.field(c) for c in cols])) for x in tables])
            assert rows_of(merged) == model_rows(model, cols, keep), (version, text)


def test_ray_empty_tables(lake: Lake, ray_mod: Any) -> None:
    from mere.integrations.ray import read_table

    for t in (lake.empty, lake.all_deleted):
        ds = read_table(t, columns=["k", "q"])
        assert ds.count() == 0
        assert ds.schema().names == ["k", "q"]


def test_ray_write_is_one_commit(tmp_path: Path, ray_mod: Any) -> None:
    from mere.integrations.ray import write

    t = mere.connect(str(tmp_path / "wh")).create_table(
        "x.rw", SCHEMA, primary_key="k", partition_by="p", buckets=3, properties=MANUAL
    )
    t.upsert(pa.Table.from_pylist([_row(i, 1) for i in range(30)], schema=SCHEMA))
    cols = ["k", "p", "q", "d", "ls", "bin"]
    rows = pa.Table.from_pylist([_row(i, 6) for i in range(20, 50)], schema=SCHEMA).select(cols)
    ds = ray_mod.data.from_arrow(rows).repartition(3)
    result = write(ds, t, idempotency_key="t51-ray")
    assert result.version == 2 and t.version == 2
    assert write(ds, t, idempotency_key="t51-ray").version == 2 and t.version == 2
    model = {r["k"]: r for r in [_row(i, 1) for i in range(30)]}
    for r in rows.to_pylist():
        model[r["k"]] = {**model.get(r["k"], dict.fromkeys(COLUMNS)), **r}
    assert rows_of(t.scan().to_arrow()) == model_rows(model, COLUMNS)


def test_ray_bad_arguments(lake: Lake, ray_mod: Any) -> None:
    from mere.integrations.ray import read_table, write

    before = lake.table.version
    ds = ray_mod.data.from_items([{"k": "z"}])
    for call in (
        lambda: read_table("t51.all"),
        lambda: read_table(lake.table, columns=["nope"]),
        lambda: read_table(lake.table, filter="q >"),
        lambda: read_table(lake.table, version=999),
        lambda: read_table(lake.table, max_task_bytes=0),
        lambda: write(ds, lake.table, mode="append"),
        lambda: write(ds, lake.table, mode="overwrite", partition={"q": 1}),
        lambda: write(ds, lake.table, mode="upsert", partition={"p": 1}),
        lambda: write([{"k": "z"}], lake.table),
        lambda: write(ds, lake.table, idempotency_key=""),
    ):
        with pytest.raises(MereError):
            call()
    assert lake.table.version == before


def test_ray_projection_pushdown_and_read_points(lake: Lake, ray_mod: Any) -> None:
    from mere.integrations.ray import read_table

    version = 2
    model = lake.models[version]
    lake.table.tag("t51-v2", version=version)
    ds = read_table(lake.table, tag="t51-v2", filter="q = 11 or p is null").select_columns(["k", "d"])
    got = pa.concat_tables([ray_mod.get(r) for r in ds.to_arrow_refs()])
    keep = lambda r: r["q"] == 11 or r["p"] is None  # noqa: E731
    assert rows_of(got.cast(pa.schema([SCHEMA.field("k"), SCHEMA.field("d")]))) == model_rows(
        model, ["k", "d"], keep
    )
    assert read_table(lake.table, version=0).count() == 0


# -- writes through frames of each engine ------------------------------------------------------------------


def test_frames_of_every_engine_upsert_exactly(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "x.frames", SCHEMA, primary_key="k", partition_by="p", buckets=3, properties=MANUAL
    )
    model: dict[str, dict[str, Any]] = {}

    def batch(keys: range, v: int) -> pa.Table:
        rows = [_row(i, v) for i in keys]
        for r in pa.Table.from_pylist(rows, schema=SCHEMA).to_pylist():
            model[r["k"]] = r
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    t.upsert(batch(range(20), 1).to_pandas(types_mapper=pd.ArrowDtype))
    narrow = batch(range(10, 30), 2)
    t.upsert(pl.from_arrow(narrow.set_column(4, "d256", narrow["d256"].cast(pa.decimal128(30, 2)))))
    con = duckdb.connect()
    part = pa.Table.from_pylist([_row(i, 3) for i in range(25, 35)], schema=SCHEMA).drop_columns(
        ["d256", "dur"]
    )
    con.register("part", part)
    t.upsert(con.sql("SELECT * FROM part"))
    for r in part.to_pylist():
        model[r["k"]] = {**model.get(r["k"], dict.fromkeys(COLUMNS)), **r}
    assert t.version == 3
    assert rows_of(t.scan().to_arrow()) == model_rows(model, COLUMNS)
    before = t.scan().to_arrow()
    for bad in (
        pl.DataFrame({"k": ["k001"], "p": [1], "q": ["notint"]}),
        pd.DataFrame({"k": ["k001"], "p": [1], "zz": [1]}),
        pd.DataFrame({"k": [None], "p": [1]}),
        pd.DataFrame({"k": ["k001"], "p": [1], "u8": [300]}),
        con.sql("SELECT 'k001' AS k, 1::INTEGER AS p, 'x' AS ls, 2 AS nope"),
    ):
        with pytest.raises(MereError):
            t.upsert(bad)
    assert t.version == 3 and rows_of(t.scan().to_arrow()) == rows_of(before)


# -- read points: as_of, tag, snapshot ----------------------------------------------------------------------


def test_every_adapter_honours_as_of_tag_and_snapshot(tmp_path: Path) -> None:
    import time

    from mere.integrations.dask import read_table
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("x.pts", SCHEMA, primary_key="k", partition_by="p", buckets=2, properties=MANUAL)
    stamps = []
    for v in range(1, 4):
        t.upsert(pa.Table.from_pylist([_row(i, v) for i in range(v * 4)], schema=SCHEMA))
        t.delete(f"k = 'k{v:03d}'")
        time.sleep(0.02)
        stamps.append(dt.datetime.now(dt.UTC))
        time.sleep(0.02)
    t.tag("mid", version=4)
    snap = cat.snapshot()
    t.upsert(pa.Table.from_pylist([_row(i, 9) for i in range(50, 55)], schema=SCHEMA))

    def counts(**point: Any) -> list[int]:
        con = duckdb.connect()
        register(con, "v", t, **point)
        with dask.config.set(scheduler="sync"):
            n_dask = len(read_table(t, columns=["k"], **point).compute())
        return [
            scan_table(t, **point).collect().height,
            con.sql("SELECT count(*) FROM v").fetchall()[0][0],
            n_dask,
            sum(b.num_rows for b in TableDataset(t, columns=["k"], output="arrow", **point)),
        ]

    for stamp in stamps:
        want = t.scan(as_of=stamp).count()
        assert counts(as_of=stamp) == [want] * 4
        assert counts(as_of=stamp.replace(tzinfo=None)) == [want] * 4  # naive: UTC
    assert counts(tag="mid") == [t.scan(version=4).count()] * 4
    assert counts(snapshot=snap) == [t.scan(version=6).count()] * 4
    assert t.scan(version=6).count() != t.scan().count()


# -- the DuckDB dataset's own reading methods ---------------------------------------------------------------

DATASET_FILTERS = [
    pc.field("k") == "k020",
    pc.field("p").is_null(),
    pc.field("p").isin([0, 2]),
    (pc.field("k") > "k030") & (pc.field("q") > 300),
    ~(pc.field("p") == 1),
    pc.field("q") == 11,
    pc.field("p") == 1.5,
    pc.field("p") < pc.scalar(1.5),
    pc.field("k").isin(["k003", None]),
    pc.field("p") == pa.scalar(2**40, pa.int64()),
    pc.field("st", "a") > 10,
    pc.invert(pc.field("k").isin(["k004"])),
]


@pytest.mark.parametrize("which", range(len(DATASET_FILTERS)))
def test_mere_dataset_methods_equal_arrow_on_the_merged_rows(lake: Lake, which: int) -> None:
    from mere.integrations.duckdb import dataset

    f = DATASET_FILTERS[which]
    for version in (2, max(lake.models)):
        merged = lake.table.scan(version=version).to_arrow()
        want = merged.filter(f).sort_by("k")
        m = dataset(lake.table.scan(version=version))
        assert rows_of(m.to_table(filter=f)) == rows_of(want)  # rows_of: NaN equals NaN
        assert rows_of(m.scanner(filter=f, columns=["k", "q"]).to_table()) == rows_of(want.select(["k", "q"]))
        assert m.count_rows(filter=f) == want.num_rows
        head = m.head(3, filter=f)
        assert head.num_rows == min(3, want.num_rows)
        assert set(head["k"].to_pylist()) <= set(want["k"].to_pylist())


def test_ray_select_columns_of_a_column_the_scan_lacks_is_an_error(lake: Lake, ray_mod: Any) -> None:
    from mere.integrations.ray import read_table

    def rows_or_error(ds: Any, n: int | None = None) -> list[dict[str, Any]] | None:
        try:
            return ds.take_all() if n is None else ds.take(n)
        except Exception:  # an error (Ray wraps what the read raises) is a right answer
            return None

    rows = rows_or_error(read_table(lake.table, columns=["k", "q"]).select_columns(["k", "ls"]))
    assert rows is None or all(set(r) == {"k", "ls"} for r in rows), rows and rows[:2]
    rows = rows_or_error(read_table(lake.table, columns=["k"]).select_columns(["q"]), 1)
    assert rows is None or [set(r) for r in rows] == [{"q"}], rows


def _ray_fail_on_k030(frame: Any) -> Any:
    if (frame["k"] == "k030").any():
        raise ValueError("block with k030")
    return frame


def test_ray_failed_write_commits_nothing(tmp_path: Path, ray_mod: Any) -> None:
    from mere.integrations.ray import write

    t = mere.connect(str(tmp_path / "wh")).create_table(
        "x.rf", SCHEMA, primary_key="k", partition_by="p", buckets=3, properties=MANUAL
    )
    t.upsert(pa.Table.from_pylist([_row(i, 1) for i in range(20)], schema=SCHEMA))
    before = t.scan().to_arrow()
    parquet = sorted(p.name for p in (tmp_path / "wh").rglob("*.parquet"))
    rows = pa.Table.from_pylist([_row(i, 7) for i in range(10, 40)], schema=SCHEMA).select(["k", "p", "q"])
    ds = ray_mod.data.from_arrow(rows).repartition(3).map_batches(_ray_fail_on_k030, batch_format="pandas")
    with pytest.raises(Exception):  # noqa: B017 - Ray raises the task's error as it wraps it
        write(ds, t)
    assert t.version == 1 and rows_of(t.scan().to_arrow()) == rows_of(before)
    assert sorted(p.name for p in (tmp_path / "wh").rglob("*.parquet")) == parquet  # staged files deleted


# -- Polars row limits, wide decimals -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 5, 100])
def test_polars_row_limits_return_merged_rows_only(lake: Lake, n: int) -> None:
    from mere.integrations.polars import scan_table

    truth = lake.table.scan().to_polars()
    for p in (pl.col("q") > 300, pl.col("k") > "k040", pl.col("p") == 1, pl.col("q").is_null()):
        kept = set(truth.filter(p)["k"].to_list())
        first_then_filter = scan_table(lake.table).head(n).filter(p).collect()
        assert first_then_filter.height <= n and set(first_then_filter["k"].to_list()) <= kept
        filter_then_first = scan_table(lake.table).filter(p).head(n).collect()
        assert filter_then_first.height == min(n, len(kept)) and set(filter_then_first["k"].to_list()) <= kept
        sliced = scan_table(lake.table).filter(p).slice(2, n).collect()
        assert sliced.height == max(0, min(n, len(kept) - 2))
        assert scan_table(lake.table).filter(p).select(pl.len()).collect().item() == len(kept)


def test_decimals_wider_than_38_digits_are_typed_errors(tmp_path: Path) -> None:
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    wide = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("w", pa.decimal256(50, 3)), ("x", pa.int64())]
    )
    t = mere.connect(str(tmp_path / "wh")).create_table("x.wide", wide, primary_key="k", buckets=2)
    t.upsert(
        pa.table({"k": [1, 2], "w": pa.array([Decimal("1.5"), None], pa.decimal256(50, 3)), "x": [1, 2]})
    )
    for call in (
        lambda: scan_table(t),
        lambda: register(duckdb.connect(), "v", t),
        lambda: t.scan().to_polars(),
        lambda: TableDataset(t, columns=["k", "w"]),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert scan_table(t, columns=["k", "x"]).collect().height == 2
    con = duckdb.connect()
    register(con, "v", t, columns=["k", "x"])
    assert con.sql("SELECT sum(x) FROM v").fetchall() == [(3,)]
    back = pa.concat_tables(
        b for b in [pa.Table.from_batches(list(TableDataset(t, columns=["w"], output="arrow")))]
    )
    assert sorted(back["w"].to_pylist(), key=repr) == sorted([Decimal("1.500"), None], key=repr)


def test_planned_reads_stay_pinned_through_commits_and_compaction(tmp_path: Path) -> None:
    from mere.integrations.dask import read_table
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    t = Lake(mere.connect(str(tmp_path / "wh"))).table
    want = rows_of(t.scan().to_arrow(), ["k", "q"])
    lazy = scan_table(t, columns=["k", "q"])
    con = duckdb.connect()
    register(con, "v", t)
    ddf = read_table(t, columns=["k", "q"])
    tds = TableDataset(t, columns=["k", "q"], output="arrow")
    t.upsert(pa.Table.from_pylist([_row(i, 8) for i in range(0, 70, 3)], schema=SCHEMA))
    t.delete("k < 'k020'")
    assert t.compact() is not None
    assert rows_of(lazy.collect().to_arrow()) == want
    assert rows_of(con.sql("SELECT k, q FROM v").to_arrow_table()) == want
    with dask.config.set(scheduler="sync"):
        assert rows_of(pa.Table.from_pandas(ddf.compute(), preserve_index=False)) == want
    assert rows_of(pa.Table.from_batches(list(tds))) == want
    assert rows_of(t.scan().to_arrow(), ["k", "q"]) != want


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_tensor_values_of_temporal_and_small_types(lake: Lake, workers: int) -> None:
    from torch.utils.data import DataLoader

    from mere.integrations.torch import TableDataset

    cols = ["ts", "t", "dur", "u8", "f", "b", "p"]
    where = "b is not null and p is not null and tsn is not null"
    want = lake.table.scan(columns=cols, filter=where).to_arrow()
    as_ints = [want[c].cast(pa.int64()) if c in ("ts", "t", "dur") else want[c] for c in cols]
    expected = sorted(tuple(repr(x) for x in r) for r in zip(*[a.to_pylist() for a in as_ints], strict=True))
    for size in (1, 7, 1000):
        ds = TableDataset(lake.table, columns=cols, filter=where, batch_size=size, max_task_bytes=100)
        got = []
        for batch in DataLoader(ds, batch_size=None, num_workers=workers):
            assert [str(batch[c].dtype) for c in cols] == [
                "torch.int64",
                "torch.int64",
                "torch.int64",
                "torch.uint8",
                "torch.float32",
                "torch.bool",
                "torch.int32",
            ]
            got += [tuple(repr(x) for x in r) for r in zip(*[batch[c].tolist() for c in cols], strict=True)]
        assert sorted(got) == expected, size


def test_quoted_and_unicode_column_names_through_polars_and_duckdb(tmp_path: Path) -> None:
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table

    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("select", pa.string()),
            ("Mixed Case", pa.int64()),
            ("é", pa.int64()),
        ]
    )
    t = mere.connect(str(tmp_path / "wh")).create_table("x.names", schema, primary_key="k", buckets=2)
    t.upsert(
        pa.table({"k": [1, 2, 3], "select": ["a", None, "c"], "Mixed Case": [10, 20, None], "é": [1, 2, 3]})
    )
    t.upsert(pa.table({"k": [2], "select": ["b"], "Mixed Case": [25], "é": [9]}))
    con = duckdb.connect()
    for name in ("select", 'we"ird', "ünï", "a.b"):
        register(con, name, t)
        assert con.sql(f'SELECT count(*) FROM "{name.replace(chr(34), chr(34) * 2)}"').fetchall() == [(3,)]
    register(con, "v", t)
    con.register("truth", t.scan().to_arrow())
    for where in (
        "\"select\" = 'b'",
        '"Mixed Case" > 15',
        '"é" = 9',
        '"select" IS NULL',
        '"é" BETWEEN 2 AND 9',
    ):
        assert sorted(con.sql(f"SELECT * FROM v WHERE {where}").fetchall()) == sorted(
            con.sql(f"SELECT * FROM truth WHERE {where}").fetchall()
        )
    truth = t.scan().to_polars()
    for e in (
        pl.col("select") == "b",
        pl.col("Mixed Case") > 15,
        pl.col("é") == 9,
        pl.col("select").is_null(),
    ):
        assert scan_table(t).filter(e).collect().sort("k").equals(truth.filter(e).sort("k"))


def test_dask_write_later_partitions_win_and_a_typed_failure_leaves_no_files(tmp_path: Path) -> None:
    import dask.dataframe as dd

    from mere.errors import NullKey
    from mere.integrations.dask import write

    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    t = mere.connect(str(tmp_path / "wh")).create_table("x.dk", schema, primary_key="k", buckets=2)
    frame = pd.DataFrame({"k": [1, 2, 3] * 3, "v": [0, 0, 0, 1, 1, 1, 2, 2, 2]})
    with dask.config.set(scheduler="threads"):
        write(dd.from_pandas(frame, npartitions=3, sort=False), t)
    assert sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": k, "v": 2} for k in (1, 2, 3)
    ]
    parquet = sorted(p.name for p in (tmp_path / "wh").rglob("*.parquet"))
    parts = [pd.DataFrame({"k": [5.0, 6.0], "v": [1, 2]}), pd.DataFrame({"k": [7.0, None], "v": [1, 2]})]
    meta = pd.DataFrame({"k": pd.Series([], dtype="float64"), "v": pd.Series([], dtype="int64")})
    ddf = dd.from_delayed([dask.delayed(p) for p in parts], meta=meta)
    with dask.config.set(scheduler="threads"), pytest.raises(NullKey):
        write(ddf, t)
    assert t.version == 1 and t.scan().count() == 3
    assert sorted(p.name for p in (tmp_path / "wh").rglob("*.parquet")) == parquet


def test_version_diffs_by_self_joins_in_polars_and_duckdb(lake: Lake) -> None:
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table

    t = lake.table
    versions = sorted(lake.models)
    for a in versions:
        for b in versions:
            ma, mb = lake.models[a], lake.models[b]
            gone = sorted(set(ma) - set(mb))
            changed = sorted(k for k in set(ma) & set(mb) if ma[k]["q"] != mb[k]["q"])
            la, lb = scan_table(t, version=a).select("k", "q"), scan_table(t, version=b).select("k", "q")
            assert sorted(la.join(lb, on="k", how="anti").collect()["k"].to_list()) == gone
            inner = la.join(lb, on="k", how="inner").filter(pl.col("q").ne_missing(pl.col("q_right")))
            assert sorted(inner.collect(engine="streaming")["k"].to_list()) == changed
            con = duckdb.connect()
            register(con, "va", t, version=a)
            register(con, "vb", t, version=b)
            assert sorted(x for (x,) in con.sql("SELECT k FROM va ANTI JOIN vb USING (k)").fetchall()) == gone
            both = con.sql(
                "SELECT va.k FROM va JOIN vb USING (k) WHERE va.q IS DISTINCT FROM vb.q"
            ).fetchall()
            assert sorted(x for (x,) in both) == changed
