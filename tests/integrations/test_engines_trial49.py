"""Trial 49: the Dask, Ray and PyTorch adapters against a dict model.

Merge-on-read tables with overlapping files, deletes, partitions, table-wide keys moving between partitions
and ``sequence_by`` out-of-order commits are read through ``mere.integrations.dask.read_table`` (the sync
scheduler and a one-worker distributed cluster), ``mere.integrations.ray.read_table`` (a 2-CPU local Ray)
and ``mere.integrations.torch.TableDataset`` (ranks x DataLoader workers x epochs); each must equal mere's
own ``to_arrow()`` and a plain dict model of the commits, with filters (also on non-key columns) and
projections, and a read pinned to a version must not see a writer committing meanwhile. The distributed
writes (Dask and Ray) must commit exactly the rows written, once per idempotency key, nothing on failure,
and concurrent writers with table-wide keys leave one row per key. Bad arguments are typed MereErrors and
write nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.errors import InvalidInput, MereError

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

MANUAL = {"compaction.auto": "off", "retention.max-age": "off", "write.row-group-rows": "16"}
PARTS = ["a", "b", "ünï", None]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("part", pa.string()),
        ("q", pa.int64()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("ts", pa.timestamp("us", "UTC")),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("i8", pa.int8()),
        ("f32", pa.float32()),
    ]
)
COLUMNS = SCHEMA.names
BASE_TS = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def canon(v: Any) -> Any:
    """NaN as a marker (NaN != NaN), -0.0 apart from 0.0."""
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return "-0.0"
    return v


def rows_of(table: pa.Table) -> dict[int, tuple[Any, ...]]:
    out: dict[int, tuple[Any, ...]] = {}
    for r in table.to_pylist():
        assert r["id"] not in out, f"key {r['id']} read twice"
        out[r["id"]] = tuple(canon(r[c]) for c in table.column_names)
    return out


def model_rows(
    model: dict[int, dict[str, Any]], columns: list[str], keep: Callable[[dict[str, Any]], bool]
) -> Any:
    return {k: tuple(canon(r[c]) for c in columns) for k, r in model.items() if keep(r)}


def _row(r: random.Random, key: int, version: int) -> dict[str, Any]:
    return {
        "id": key,
        "part": r.choice(PARTS),
        "q": None if r.random() < 0.1 else r.randint(-1000, 1000) + version,
        "x": r.choice([math.nan, -0.0, 0.0, None, r.random(), -r.random() * 100]),
        "s": r.choice([None, "", "a", "é😀", f"s{key}-{version}", "O'Brien"]),
        "ts": None if r.random() < 0.1 else BASE_TS + dt.timedelta(seconds=r.randint(-(10**8), 10**8)),
        "b": r.choice([True, False, None]),
        "d": r.choice([None, dt.date(1969, 12, 31), dt.date(2026, 11, 30), dt.date(1900, 1, 1)]),
        "i8": r.choice([None, -128, 127, 0, r.randint(-128, 127)]),
        "f32": r.choice([None, 1.5, -0.0, math.inf, -2.25]),
    }


class History:
    """A keyed, day-partitioned, table-wide-keyed table and its dict model after every version."""

    def __init__(self, catalog: mere.Catalog, name: str, seed: int) -> None:
        r = random.Random(seed)
        self.table = catalog.create_table(
            name, SCHEMA, primary_key="id", partition_by="part", buckets=2, properties=MANUAL
        )
        assert self.table.key_scope == "table"
        model: dict[int, dict[str, Any]] = {}
        self.models: dict[int, dict[int, dict[str, Any]]] = {}
        keys = 300
        for step in range(9):
            kind = (
                "full" if step < 2 else r.choice(["full", "full", "partial", "delete_keys", "delete_filter"])
            )
            if kind == "full":
                batch = [_row(r, r.randrange(keys), step) for _ in range(r.randint(40, 220))]
                for row in batch:  # the last row of a key in a batch wins
                    model[row["id"]] = dict(row)
                self.table.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))
            elif kind == "partial":
                batch = []
                for key in r.sample(range(keys), 60):
                    part = model[key]["part"] if key in model else r.choice(PARTS)  # partial rows never move
                    batch.append({"id": key, "part": part, "q": r.randint(5000, 6000)})
                for row in batch:
                    old = model.get(row["id"], {c: None for c in COLUMNS})
                    model[row["id"]] = {**old, **row}
                self.table.upsert(
                    pa.Table.from_pylist(
                        batch, schema=pa.schema([SCHEMA.field(c) for c in ("id", "part", "q")])
                    )
                )
            elif kind == "delete_keys":
                victims = r.sample(sorted(model), min(len(model), 25))
                for key in victims:
                    del model[key]
                self.table.delete(pa.table({"id": pa.array(victims, pa.int64())}))
            else:
                bound = r.randint(-900, 900)
                for key in [k for k, v in model.items() if v["q"] is not None and v["q"] < bound]:
                    del model[key]
                self.table.delete(f"q < {bound}")
            self.models[self.table.version] = {k: dict(v) for k, v in model.items()}
        self.model = model


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> History:
    catalog = mere.connect(str(tmp_path_factory.mktemp("h49") / "wh"))
    return History(catalog, "h.moves", seed=49)


FILTERS: list[tuple[str | None, Callable[[dict[str, Any]], bool]]] = [
    (None, lambda r: True),
    ("q > 100", lambda r: r["q"] is not None and r["q"] > 100),
    ("s is null", lambda r: r["s"] is None),
    ("part = 'ünï'", lambda r: r["part"] == "ünï"),
    ("part is null or id < 40", lambda r: r["part"] is None or r["id"] < 40),
    (
        "b and x > 0.5",
        lambda r: r["b"] is True and r["x"] is not None and (math.isnan(r["x"]) or r["x"] > 0.5),
    ),  # NaN is largest
]


def test_model_equals_to_arrow_at_every_version(hist: History) -> None:
    for version, model in hist.models.items():
        got = rows_of(hist.table.scan(version=version).to_arrow())
        assert got == model_rows(model, COLUMNS, lambda r: True), version
    assert len(hist.models) >= 8 and len(hist.model) > 50


# -- Dask -----------------------------------------------------------------------------------------------


def _dask_arrow(frame: Any, columns: list[str]) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False).cast(
        pa.schema([SCHEMA.field(c) for c in columns])
    )


@pytest.mark.parametrize("where", range(len(FILTERS)))
def test_dask_sync_reads_equal_the_model(hist: History, where: int) -> None:
    from mere.integrations.dask import read_table

    text, keep = FILTERS[where]
    for version in [*sorted(hist.models)[1::3], hist.table.version]:
        for columns in (COLUMNS, ["id", "x", "part"]):
            ddf = read_table(hist.table, columns=columns, filter=text, version=version, partition_bytes=1_500)
            with dask.config.set(scheduler="sync"):
                frame = ddf.compute()
            got = rows_of(_dask_arrow(frame, columns))
            assert got == model_rows(hist.models[version], columns, keep), (version, text, columns)
            assert got == rows_of(hist.table.scan(columns=columns, filter=text, version=version).to_arrow())


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0", memory_limit="2GiB"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.mark.parametrize("where", [0, 1, 5])
def test_dask_distributed_reads_and_projections_equal_the_model(
    hist: History, dask_client: Any, where: int
) -> None:
    from mere.integrations.dask import read_table

    text, keep = FILTERS[where]
    version = sorted(hist.models)[-3]
    ddf = read_table(hist.table, filter=text, version=version, partition_bytes=1_500)
    assert ddf.npartitions > 2
    got = rows_of(_dask_arrow(ddf.compute(), COLUMNS))
    assert got == model_rows(hist.models[version], COLUMNS, keep)
    # a column selection after the read leaves the filter's columns out: the filter still applies
    got = rows_of(_dask_arrow(ddf[["id", "s", "d"]].compute(), ["id", "s", "d"]))
    assert got == model_rows(hist.models[version], ["id", "s", "d"], keep)
    assert int(ddf["id"].count().compute()) == len(model_rows(hist.models[version], ["id"], keep))


# -- sequence_by + table-wide keys ------------------------------------------------------------------------

SEQ_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("part", pa.string()),
        ("lsn", pa.int64()),
        ("v", pa.string()),
        ("op", pa.string()),
    ]
)


class SeqHistory:
    """A sequence_by CDC table fed late, duplicated and out-of-order events, and its dict model."""

    def __init__(self, catalog: mere.Catalog, seed: int) -> None:
        r = random.Random(seed)
        self.table = catalog.create_table(
            "h.seq",
            SEQ_SCHEMA,
            primary_key="id",
            partition_by="part",
            buckets=2,
            sequence_by="lsn",
            cdc_column="op",
            properties=MANUAL,
        )
        best: dict[int, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        self.models: dict[int, dict[int, dict[str, Any]]] = {}
        for commit in range(8):
            batch = []
            for row in range(r.randint(30, 120)):
                key = r.randrange(120)
                lsn = r.randrange(400)
                op = r.choice(["I", "U", "U", "D"])
                event = {
                    "id": key,
                    "part": r.choice(["p", "q", "r"]),
                    "lsn": lsn,
                    "v": f"{key}@{lsn}",
                    "op": op,
                }
                batch.append(event)
                rank = (lsn, commit, row)
                if key not in best or rank > best[key][0]:
                    best[key] = (rank, event)
            self.table.upsert(pa.Table.from_pylist(batch, schema=SEQ_SCHEMA))
            self.models[self.table.version] = {
                k: {c: e[c] for c in SEQ_SCHEMA.names if c != "op"}
                for k, (_, e) in best.items()
                if e["op"] != "D"
            }


@pytest.fixture(scope="module")
def seq(tmp_path_factory: pytest.TempPathFactory) -> SeqHistory:
    return SeqHistory(mere.connect(str(tmp_path_factory.mktemp("seq") / "wh")), seed=7)


SEQ_COLUMNS = ["id", "part", "lsn", "v"]


def test_sequence_by_model_equals_to_arrow(seq: SeqHistory) -> None:
    for version, model in seq.models.items():
        got = rows_of(seq.table.scan(version=version).to_arrow())
        assert got == model_rows(model, SEQ_COLUMNS, lambda r: True), version


def test_sequence_by_reads_in_dask_and_torch_equal_the_model(seq: SeqHistory) -> None:
    from mere.integrations.dask import read_table

    for version in sorted(seq.models)[2::2]:
        for text, keep in ((None, lambda r: True), ("lsn > 200", lambda r: r["lsn"] > 200)):
            ddf = read_table(seq.table, version=version, filter=text, partition_bytes=600)
            with dask.config.set(scheduler="sync"):
                frame = ddf.compute()
            got = rows_of(pa.Table.from_pandas(frame, preserve_index=False))
            assert got == model_rows(seq.models[version], SEQ_COLUMNS, keep), (version, text)
    torch = pytest.importorskip("torch")
    from mere.integrations.torch import TableDataset

    version = max(seq.models)
    expected = model_rows(seq.models[version], ["id", "lsn"], lambda r: True)
    seen: list[tuple[int, int]] = []
    for rank in range(3):
        ds = TableDataset(
            seq.table,
            columns=["id", "lsn"],
            version=version,
            batch_size=4,
            rank=rank,
            world_size=3,
            max_task_bytes=300,
        )
        for batch in ds:
            assert batch["lsn"].dtype == torch.int64
            seen += list(zip(batch["id"].tolist(), batch["lsn"].tolist(), strict=True))
    assert len(seen) == len({k for k, _ in seen})
    assert {k: (k, lsn) for k, lsn in seen} == expected


# -- Ray Data -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_up() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from rayutil import local_ray

    with local_ray(ray):
        yield ray


def _ray_arrow(ray: Any, ds: Any) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def test_ray_reads_equal_the_model(hist: History, seq: SeqHistory, ray_up: Any) -> None:
    from mere.integrations.ray import read_table

    versions = sorted(hist.models)
    for version, (text, keep) in zip([versions[2], versions[5], versions[-1]], FILTERS[1:4], strict=True):
        ds = read_table(hist.table, filter=text, version=version, max_task_bytes=1_500)
        assert rows_of(_ray_arrow(ray_up, ds)) == model_rows(hist.models[version], COLUMNS, keep), (
            version,
            text,
        )
        assert ds.count() == len(model_rows(hist.models[version], ["id"], keep))
        # select_columns after the read is pushed into the scan; the filter's columns left out still filter
        got = rows_of(_ray_arrow(ray_up, ds.select_columns(["i8", "id", "ts"])))
        assert got == model_rows(hist.models[version], ["i8", "id", "ts"], keep)
    version = max(seq.models)
    ds = read_table(seq.table, version=version, filter="v is not null", max_task_bytes=300)
    assert rows_of(_ray_arrow(ray_up, ds)) == model_rows(seq.models[version], SEQ_COLUMNS, lambda r: True)


# -- pinned reads while another writer commits -------------------------------------------------------------


def _writer(table: mere.Table, seed: int, rounds: int) -> None:
    r = random.Random(seed)
    for i in range(rounds):
        batch = [_row(r, r.randrange(400), 100 + i) for _ in range(60)]
        table.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))
        if i % 3 == 1:
            table.delete(f"q < {r.randint(-500, 500)}")
        if i % 4 == 3:
            table.compact()


@pytest.fixture
def busy(tmp_path: Path) -> History:
    """A fresh history table whose own compaction is automatic (so concurrent commits rewrite files)."""
    h = History(mere.connect(str(tmp_path / "wh")), "h.busy", seed=11)
    h.table.set_properties({"compaction.auto": "inline"})
    h.models[h.table.version] = {k: dict(v) for k, v in h.model.items()}
    return h


def test_pinned_reads_never_see_a_concurrent_writer(busy: History, ray_up: Any) -> None:
    from mere.integrations.dask import read_table as dask_read
    from mere.integrations.ray import read_table as ray_read
    from mere.integrations.torch import TableDataset

    pinned = busy.table.version
    expected = model_rows(busy.model, COLUMNS, lambda r: True)
    expected_q = model_rows(busy.model, ["id", "q"], lambda r: r["q"] is not None)
    ddf = dask_read(busy.table, partition_bytes=1_500)  # the newest version, pinned now
    ds = ray_read(busy.table, max_task_bytes=1_500)
    tds = TableDataset(
        busy.table, columns=["id", "q"], filter="q is not null", batch_size=16, max_task_bytes=800
    )
    writer = threading.Thread(target=_writer, args=(busy.table, 5, 12))
    writer.start()
    try:
        with dask.config.set(scheduler="sync"):
            assert rows_of(_dask_arrow(ddf.compute(), COLUMNS)) == expected
        assert rows_of(_ray_arrow(ray_up, ds)) == expected
    finally:
        writer.join()
    assert busy.table.version > pinned + 10
    # after the writer is done (and compacted): still the pinned rows, also through new projections
    with dask.config.set(scheduler="sync"):
        assert rows_of(_dask_arrow(ddf.compute(), COLUMNS)) == expected
        assert rows_of(_dask_arrow(ddf[["id", "q"]].dropna().compute(), ["id", "q"])) == expected_q
    assert rows_of(_ray_arrow(ray_up, ds)) == expected
    projected = _ray_arrow(ray_up, ds.select_columns(["id", "q"]))
    assert rows_of(projected.filter(projected["q"].is_valid())) == expected_q
    assert ds.count() == len(expected)
    got: list[tuple[int, int]] = []
    for batch in tds:
        got += list(zip(batch["id"].tolist(), batch["q"].tolist(), strict=True))
    assert {k: (k, q) for k, q in got} == expected_q and len(got) == len(expected_q)


# -- PyTorch: ranks x workers x epochs ---------------------------------------------------------------------

TENSOR_COLUMNS = ["id", "q", "ts", "b", "d", "i8", "f32", "x"]


def _tensor_model(model: dict[int, dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    table = pa.Table.from_pylist(list(model.values()), schema=SCHEMA).select(TENSOR_COLUMNS)
    keep = pa.array([all(v is not None for v in r.values()) for r in table.to_pylist()])
    table = table.filter(keep)
    cols = []
    for f in table.schema:
        col = table.column(f.name)
        if pa.types.is_timestamp(f.type):
            col = col.cast(pa.int64())
        elif pa.types.is_date32(f.type):
            col = col.cast(pa.int32())
        cols.append(col.to_pylist())
    return {row[0]: tuple(canon(v) for v in row) for row in zip(*cols, strict=True)}


@pytest.mark.parametrize("shuffle", [False, True])
def test_torch_every_row_once_per_epoch_over_ranks_and_workers(hist: History, shuffle: bool) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from mere.integrations.torch import TableDataset

    version = sorted(hist.models)[-2]
    expected = _tensor_model(hist.models[version])
    not_null = " and ".join(f"{c} is not null" for c in TENSOR_COLUMNS)
    datasets = [
        TableDataset(
            hist.table,
            columns=TENSOR_COLUMNS,
            filter=not_null,
            version=version,
            batch_size=6,
            shuffle=shuffle,
            seed=49,
            rank=rank,
            world_size=2,
            max_task_bytes=700,
        )
        for rank in range(2)
    ]
    assert len(datasets[0].units) >= 6
    loaders = [DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True) for ds in datasets]
    orders = []
    for epoch in (0, 1, 0):
        seen: list[tuple[Any, ...]] = []
        for ds, loader in zip(datasets, loaders, strict=True):
            ds.set_epoch(epoch)
            for batch in loader:
                assert batch["ts"].dtype == torch.int64 and batch["d"].dtype == torch.int32
                assert batch["b"].dtype == torch.bool and batch["f32"].dtype == torch.float32
                assert len(batch["id"]) <= 6
                cols = [batch[c].tolist() for c in TENSOR_COLUMNS]
                seen += [tuple(canon(v) for v in row) for row in zip(*cols, strict=True)]
        ids = [row[0] for row in seen]
        assert len(ids) == len(set(ids)), f"epoch {epoch}: a row read twice"
        assert {row[0]: row for row in seen} == expected, epoch
        orders.append(ids)
    assert orders[0] == orders[2]  # the same epoch reads in the same order (persistent workers see set_epoch)
    if shuffle:
        assert orders[0] != orders[1]


def test_torch_filter_on_a_column_left_out_and_nulls_in_a_worker(hist: History) -> None:
    from torch.utils.data import DataLoader

    from mere.integrations.torch import TableDataset

    ds = TableDataset(
        hist.table, columns=["id"], filter="s is null or q > 500", batch_size=5, max_task_bytes=500
    )
    ids = [i for batch in DataLoader(ds, batch_size=None, num_workers=2) for i in batch["id"].tolist()]
    keep = [k for k, r in hist.model.items() if r["s"] is None or (r["q"] is not None and r["q"] > 500)]
    assert sorted(ids) == sorted(keep)
    with_nulls = TableDataset(hist.table, columns=["id", "q"], batch_size=5)
    with pytest.raises(InvalidInput, match="null"):
        for _ in DataLoader(with_nulls, batch_size=None, num_workers=2):
            pass


# -- distributed writes ----------------------------------------------------------------------------------

W_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("part", pa.string()),
        ("v", pa.string()),
        ("n", pa.float64()),
    ]
)


def _wtable(tmp_path: Path, name: str = "w.t") -> mere.Table:
    cat = mere.connect(str(tmp_path / "wh"))
    return cat.create_table(
        name, W_SCHEMA, primary_key="id", partition_by="part", buckets=2, properties=MANUAL
    )


def _parquet(table: mere.Table) -> set[Path]:
    return set(Path(table.storage.full_path(table.location)).rglob("*.parquet"))


def _frame(rows: list[dict[str, Any]]) -> Any:
    return pd.DataFrame(rows, columns=W_SCHEMA.names).astype({"n": "float64"})


def _random_rows(r: random.Random, n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "id": r.randrange(60),
            "part": r.choice(["a", "b", "c"]),
            "v": r.choice([None, f"{tag}-{i}"]),
            "n": r.choice([None, -0.0, 1.5, float(i)]),
        }
        for i in range(n)
    ]


def test_dask_upserts_equal_the_model(tmp_path: Path) -> None:
    """Random upserts with keys repeated across Dask partitions and moving partitions: the frame's order
    decides (the last row of a key wins), as one upsert of the whole frame would."""
    from mere.integrations.dask import read_table, write

    t = _wtable(tmp_path)
    model: dict[int, dict[str, Any]] = {}
    r = random.Random(3)
    with dask.config.set(scheduler="sync"):
        for step in range(8):
            rows = _random_rows(r, r.randint(1, 80), f"s{step}")
            for row in rows:
                model[row["id"]] = row
            before = t.version
            result = write(dd.from_pandas(_frame(rows), npartitions=r.randint(1, 5), sort=False), t)
            assert result.version == t.version == before + 1
            assert rows_of(t.scan().to_arrow()) == model_rows(model, W_SCHEMA.names, lambda _: True), step
            got = read_table(t, partition_bytes=500).compute()
            assert rows_of(pa.Table.from_pandas(got, preserve_index=False)) == rows_of(t.scan().to_arrow())


def test_dask_overwrite_and_append_write_exactly_the_rows(tmp_path: Path) -> None:
    from mere.integrations.dask import write

    t = _wtable(tmp_path)
    r = random.Random(5)
    rows = _random_rows(r, 50, "a")
    with dask.config.set(scheduler="sync"):
        write(dd.from_pandas(_frame(rows), npartitions=3, sort=False), t)
        rows = _random_rows(r, 40, "o")
        ddf = dd.from_pandas(_frame(rows), npartitions=4, sort=False)
        write(ddf, t, mode="overwrite")
        model = {row["id"]: row for row in rows}
        assert rows_of(t.scan().to_arrow()) == model_rows(model, W_SCHEMA.names, lambda _: True)
        write(ddf[ddf["id"] < 0], t, mode="overwrite")  # every partition empty: the table is emptied
        assert t.scan().count() == 0
        log = mere.connect(str(tmp_path / "wh")).create_table("w.log", W_SCHEMA)
        write(ddf, log, mode="append")
        write(ddf, log, mode="append")
        got = sorted(repr(tuple(canon(v) for v in x.values())) for x in log.scan().to_arrow().to_pylist())
        want = sorted(repr(tuple(canon(v) for v in x.values())) for x in rows * 2)
        assert got == want


def test_dask_failed_stage_after_files_leaves_nothing_and_the_key_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition that staged its files and then failed (as a worker dying after its write): nothing is
    committed, no file stays; a retry with the same idempotency key commits once, a second retry nothing."""
    from mere.integrations.dask import write
    from mere.table.table import Table

    t = _wtable(tmp_path)
    t.upsert(pa.Table.from_pylist([{"id": 1, "part": "a", "v": "kept", "n": 1.0}], schema=W_SCHEMA))
    before, files = t.scan().to_arrow(), _parquet(t)
    real = Table.stage
    calls = []

    def flaky(self: Any, data: Any, operation: str = "upsert", **kw: Any) -> Any:
        out = real(self, data, operation, **kw)
        calls.append(out)
        if len(calls) == 2:
            raise OSError("worker died after its files were written")
        return out

    rows = [{"id": i, "part": "b" if i % 2 else "c", "v": f"w{i}", "n": 0.5} for i in range(40)]
    ddf = dd.from_pandas(_frame(rows), npartitions=3)
    monkeypatch.setattr(Table, "stage", flaky)
    with dask.config.set(scheduler="sync"), pytest.raises(MereError, match="worker died"):
        write(ddf, t, idempotency_key="job-1")
    monkeypatch.setattr(Table, "stage", real)
    assert t.version == 1 and t.scan().to_arrow().equals(before)
    assert _parquet(t) == files, "files of the failed write stayed"
    with dask.config.set(scheduler="sync"):
        first = write(ddf, t, idempotency_key="job-1")
        files = _parquet(t)
        again = write(ddf.assign(v="other"), t, idempotency_key="job-1")
    assert again.already_committed and again.version == first.version == t.version == 2
    assert _parquet(t) == files, "the retry's staged files stayed"
    model = {1: {"id": 1, "part": "a", "v": "kept", "n": 1.0}, **{row["id"]: row for row in rows}}
    assert rows_of(t.scan().to_arrow()) == model_rows(model, W_SCHEMA.names, lambda _: True)


def test_ray_writes_equal_the_model_and_retry_once(tmp_path: Path, ray_up: Any) -> None:
    from mere.integrations.ray import write

    ray = ray_up
    t = _wtable(tmp_path)
    r = random.Random(8)
    model: dict[int, dict[str, Any]] = {}
    for step in range(4):
        rows = list({row["id"]: row for row in _random_rows(r, 70, f"r{step}")}.values())  # a key once
        for row in rows:
            model[row["id"]] = row
        ds = ray.data.from_pandas(_frame(rows)).repartition(3)
        result = write(ds, t, idempotency_key=f"ray-{step}")
        assert result.version == t.version
        assert rows_of(t.scan().to_arrow()) == model_rows(model, W_SCHEMA.names, lambda _: True), step
    files, version = _parquet(t), t.version
    again = write(ray.data.from_pandas(_frame(rows[:3])), t, idempotency_key="ray-3")
    assert again.already_committed and t.version == version and _parquet(t) == files
    # overwrite of one partition: exactly that partition's rows replaced; keys moved in leave their old one
    rows = [{"id": k, "part": "a", "v": "ow", "n": 2.0} for k in (1, 2, 3, 59)]
    write(ray.data.from_pandas(_frame(rows)), t, "overwrite", partition={"part": "a"})
    model = {k: v for k, v in model.items() if v["part"] != "a"}
    model.update({row["id"]: row for row in rows})
    assert rows_of(t.scan().to_arrow()) == model_rows(model, W_SCHEMA.names, lambda _: True)


def _boom(frame: Any) -> Any:
    if (frame["id"] >= 30).any():
        raise RuntimeError("task failed on purpose")
    return frame


def test_failed_distributed_writes_leave_the_table_unchanged(
    tmp_path: Path, ray_up: Any, dask_client: Any
) -> None:
    from mere.integrations import dask as mdask
    from mere.integrations import ray as mray

    t = _wtable(tmp_path)
    t.upsert(pa.Table.from_pylist(_random_rows(random.Random(1), 30, "base"), schema=W_SCHEMA))
    before, files, version = t.scan().to_arrow(), _parquet(t), t.version
    rows = [{"id": i, "part": "c", "v": "bad", "n": 1.0} for i in range(60)]
    ds = ray_up.data.from_pandas(_frame(rows)).repartition(4).map_batches(_boom, batch_format="pandas")
    with pytest.raises(Exception, match="on purpose"):
        mray.write(ds, t, idempotency_key="fails")
    ddf = dd.from_pandas(_frame(rows), npartitions=4)
    with pytest.raises(RuntimeError, match="on purpose"):  # on the distributed cluster
        mdask.write(ddf.map_partitions(_boom, meta=ddf._meta), t, idempotency_key="fails-too")
    assert t.version == version and t.scan().to_arrow().equals(before)
    assert _parquet(t) == files
    assert t.find_commit("fails") is None and t.find_commit("fails-too") is None


def test_concurrent_distributed_writes_with_table_wide_keys(
    tmp_path: Path, ray_up: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dask and a Ray write of the same keys into different partitions, both staged before either commits:
    one row per key, all from the write that committed last."""
    from mere.integrations import dask as mdask
    from mere.integrations import ray as mray
    from mere.table.table import Table

    t = _wtable(tmp_path)
    t.upsert(
        pa.Table.from_pylist(
            [{"id": i, "part": "a", "v": "old", "n": 0.0} for i in range(50)], schema=W_SCHEMA
        )
    )
    real = Table.commit
    barrier = threading.Barrier(2, timeout=120)

    def commit_together(self: Any, staged: Any, **kw: Any) -> Any:
        barrier.wait()
        return real(self, staged, **kw)

    monkeypatch.setattr(Table, "commit", commit_together)
    results: dict[str, Any] = {}

    def by_dask() -> None:
        rows = [{"id": i, "part": "b", "v": "dask", "n": 1.0} for i in range(0, 50, 1)]
        with dask.config.set(scheduler="sync"):
            results["b"] = mdask.write(dd.from_pandas(_frame(rows), npartitions=3), t)

    def by_ray() -> None:
        rows = [{"id": i, "part": "c", "v": "ray", "n": 2.0} for i in range(25, 75)]
        results["c"] = mray.write(ray_up.data.from_pandas(_frame(rows)).repartition(2), t)

    threads = [threading.Thread(target=by_dask), threading.Thread(target=by_ray)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    monkeypatch.setattr(Table, "commit", real)
    assert set(results) == {"b", "c"}
    last = max(results, key=lambda p: results[p].version)
    got = t.scan().to_arrow().to_pylist()
    ids = [row["id"] for row in got]
    assert len(ids) == len(set(ids)) == 75
    by_id = {row["id"]: row["part"] for row in got}
    assert all(by_id[i] == "b" for i in range(25))
    assert all(by_id[i] == last for i in range(25, 50))
    assert all(by_id[i] == "c" for i in range(50, 75))


def test_read_then_write_round_trips_every_value(hist: History, tmp_path: Path, ray_up: Any) -> None:
    """Dask and Ray reads written back through the same adapter into a copy keep every value (NaN, -0.0,
    nulls in every type, zones, dates, int8, float32)."""
    from mere.integrations import dask as mdask
    from mere.integrations import ray as mray

    cat = mere.connect(str(tmp_path / "wh"))
    expected = model_rows(hist.model, COLUMNS, lambda _: True)
    for engine in ("dask", "ray"):
        copy = cat.create_table(f"c.{engine}", SCHEMA, primary_key="id", partition_by="part", buckets=3)
        if engine == "dask":
            with dask.config.set(scheduler="sync"):
                mdask.write(mdask.read_table(hist.table, partition_bytes=1_500), copy)
        else:
            mray.write(mray.read_table(hist.table, max_task_bytes=1_500), copy)
        assert rows_of(copy.scan().to_arrow()) == expected, engine


# -- bad arguments: typed, nothing written ---------------------------------------------------------------


def test_bad_arguments_are_typed_and_write_nothing(tmp_path: Path, ray_up: Any) -> None:
    from mere.integrations import dask as mdask
    from mere.integrations import ray as mray
    from mere.integrations.torch import TableDataset

    t = _wtable(tmp_path)
    t.upsert(pa.Table.from_pylist(_random_rows(random.Random(2), 20, "x"), schema=W_SCHEMA))
    files, version = _parquet(t), t.version
    good = _frame([{"id": 100, "part": "a", "v": "new", "n": 1.0}])
    ddf = dd.from_pandas(good, npartitions=1)
    ds = ray_up.data.from_pandas(good)
    catalog = mere.connect(str(tmp_path / "wh"))
    log = catalog.create_table("w.log2", W_SCHEMA)
    calls: dict[str, Callable[[], Any]] = {
        "dask read non-table": lambda: mdask.read_table("w.t"),
        "dask read columns int": lambda: mdask.read_table(t, columns=5),
        "dask read unknown column": lambda: mdask.read_table(t, columns=["nope"]),
        "dask read filter": lambda: mdask.read_table(t, filter="nope = 1"),
        "dask read version": lambda: mdask.read_table(t, version=99),
        "dask read version and as_of": lambda: mdask.read_table(t, version=1, as_of="2026-01-01"),
        "dask read snapshot": lambda: mdask.read_table(t, snapshot="s"),
        "dask read tag": lambda: mdask.read_table(t, tag="missing"),
        "dask read partition_bytes": lambda: mdask.read_table(t, partition_bytes=0),
        "dask read min_partitions": lambda: mdask.read_table(t, min_partitions=True),
        "dask read types_mapper": lambda: mdask.read_table(t, types_mapper="str"),
        "dask write mode": lambda: mdask.write(ddf, t, mode="merge"),
        "dask write append to keyed": lambda: mdask.write(ddf, t, mode="append"),
        "dask write upsert to log": lambda: mdask.write(ddf, log, mode="upsert"),
        "dask write pandas": lambda: mdask.write(good, t),
        "dask write non-table": lambda: mdask.write(ddf, "w.t"),
        "dask write key": lambda: mdask.write(ddf, t, idempotency_key=""),
        "dask write wrong type": lambda: mdask.write(dd.from_pandas(good.assign(v=1.5), npartitions=1), t),
        "dask write extra column": lambda: mdask.write(dd.from_pandas(good.assign(zz=1), npartitions=1), t),
        "dask write null key": lambda: mdask.write(dd.from_pandas(good.assign(id=[None]), npartitions=1), t),
        "ray read non-table": lambda: mray.read_table("w.t"),
        "ray read columns": lambda: mray.read_table(t, columns=["nope"]),
        "ray read filter": lambda: mray.read_table(t, filter=5),
        "ray read max_task_bytes": lambda: mray.read_table(t, max_task_bytes=1.5),
        "ray read version": lambda: mray.read_table(t, version="1"),
        "ray source": lambda: mray.MereDatasource(t, max_task_bytes=0),
        "ray sink mode": lambda: mray.MereDatasink(t, "delete"),
        "ray sink partition": lambda: mray.MereDatasink(t, "upsert", partition={"part": "a"}),
        "ray write non-dataset": lambda: mray.write([1], t),
        "ray write non-table": lambda: mray.write(ds, "w.t"),
        "ray write mode": lambda: mray.write(ds, t, mode="merge"),
        "ray write append to keyed": lambda: mray.write(ds, t, mode="append"),
        "ray write partition column": lambda: mray.write(ds, t, "overwrite", partition={"nope": 1}),
        "ray write partition kind": lambda: mray.write(ds, t, "overwrite", partition="a"),
        "ray write partition other rows": lambda: mray.write(ds, t, "overwrite", partition={"part": "b"}),
        "ray write key": lambda: mray.write(ds, t, idempotency_key=5),
        "torch non-table": lambda: TableDataset("w.t"),
        "torch string column": lambda: TableDataset(t),
        "torch no columns": lambda: TableDataset(t, columns=[]),
        "torch batch_size": lambda: TableDataset(t, columns=["id"], batch_size=0),
        "torch rank": lambda: TableDataset(t, columns=["id"], rank=2, world_size=2),
        "torch rank alone": lambda: TableDataset(t, columns=["id"], rank=0),
        "torch seed": lambda: TableDataset(t, columns=["id"], seed=-1),
        "torch output": lambda: TableDataset(t, columns=["id"], output="numpy"),
        "torch shuffle": lambda: TableDataset(t, columns=["id"], shuffle="yes"),
        "torch epoch": lambda: TableDataset(t, columns=["id"]).set_epoch(-1),
        "torch shard_units": lambda: TableDataset(t, columns=["id"]).shard_units(2, 2),
        "torch snapshot and version": lambda: TableDataset(
            t, columns=["id"], version=1, snapshot=catalog.snapshot()
        ),
        "torch snapshot kind": lambda: TableDataset(t, columns=["id"], snapshot=5),
        "dask read snapshot and version": lambda: mdask.read_table(t, version=1, snapshot=catalog.snapshot()),
        "ray read snapshot and tag": lambda: mray.read_table(t, tag="x", snapshot=catalog.snapshot()),
    }
    for name, call in calls.items():
        with pytest.raises(MereError):
            call()
        assert _parquet(t) == files and t.version == version, name
    assert log.version == 0


def test_dask_write_with_a_filesystem_catalog_on_a_cluster_is_typed(tmp_path: Path, dask_client: Any) -> None:
    """Catalogs opened with filesystem= cannot reach workers: read_table says so (InvalidInput), write too."""
    import pyarrow.fs as pafs

    from mere.integrations import dask as mdask

    cat = mere.connect(str(tmp_path / "wh"), filesystem=pafs.LocalFileSystem())
    t = cat.create_table("f.t", W_SCHEMA, primary_key="id", buckets=2)
    t.upsert(pa.Table.from_pylist([{"id": 1, "part": "a", "v": "x", "n": 1.0}], schema=W_SCHEMA))
    with pytest.raises(InvalidInput, match="filesystem="):
        mdask.read_table(t)
    files = set((tmp_path / "wh").rglob("*.parquet"))
    ddf = dd.from_pandas(_frame([{"id": 2, "part": "a", "v": "y", "n": 2.0}]), npartitions=2)
    try:
        with pytest.raises(MereError):
            mdask.write(ddf, t)
    finally:
        assert t.version == 1 and set((tmp_path / "wh").rglob("*.parquet")) == files


def test_distributed_writes_of_out_of_order_events_into_a_sequence_by_table(
    tmp_path: Path, ray_up: Any
) -> None:
    """Late, duplicated and out-of-order CDC events written by Dask (spread over partitions) and Ray: the
    highest sequence of each key wins wherever it lands, deletes included, as the dict model says."""
    from mere.integrations import dask as mdask
    from mere.integrations import ray as mray

    t = mere.connect(str(tmp_path / "wh")).create_table(
        "s.t",
        SEQ_SCHEMA,
        primary_key="id",
        partition_by="part",
        buckets=2,
        sequence_by="lsn",
        cdc_column="op",
        properties=MANUAL,
    )
    r = random.Random(21)
    lsns = iter(r.sample(range(100_000), 2_000))  # no ties: Ray's block order between tasks is not fixed
    best: dict[int, dict[str, Any]] = {}
    for step in range(6):
        events = []
        for _ in range(r.randint(20, 90)):
            key, lsn = r.randrange(50), next(lsns)
            op = r.choice(["I", "U", "D"])
            events.append(
                {"id": key, "part": r.choice(["p", "q", "r"]), "lsn": lsn, "v": f"{key}@{lsn}", "op": op}
            )
        replay = r.sample(events, min(5, len(events)))  # duplicates of this batch's events
        events += replay
        r.shuffle(events)
        for e in events:
            if e["id"] not in best or e["lsn"] > best[e["id"]]["lsn"]:
                best[e["id"]] = e
        frame = pd.DataFrame(events, columns=SEQ_SCHEMA.names)
        if step % 2:
            mray.write(ray_up.data.from_pandas(frame).repartition(3), t)
        else:
            with dask.config.set(scheduler="sync"):
                mdask.write(dd.from_pandas(frame, npartitions=3, sort=False), t)
        model = {k: {c: e[c] for c in SEQ_COLUMNS} for k, e in best.items() if e["op"] != "D"}
        assert rows_of(t.scan().to_arrow()) == model_rows(model, SEQ_COLUMNS, lambda _: True), step


def test_a_commit_landing_between_stage_and_commit_moves_no_key_twice(
    tmp_path: Path, dask_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another handle moves keys to another partition (and deletes some) after the Dask workers staged and
    before the client commits: the Dask write, committed last, leaves one row per key, its own."""
    from mere.integrations.dask import write
    from mere.table.table import Table

    t = _wtable(tmp_path)
    t.upsert(
        pa.Table.from_pylist(
            [{"id": i, "part": "a", "v": "old", "n": 0.0} for i in range(40)], schema=W_SCHEMA
        )
    )
    other = mere.connect(str(tmp_path / "wh")).table("w.t")
    real = Table.commit
    interleaved = []

    def commit_after_another(self: Any, staged: Any, **kw: Any) -> Any:
        if not interleaved:
            interleaved.append(True)
            moved = [{"id": i, "part": "c", "v": "other", "n": 9.0} for i in range(0, 40, 2)]
            other.upsert(pa.Table.from_pylist(moved, schema=W_SCHEMA))
            other.delete(pa.table({"id": pa.array([1, 3, 5], pa.int64())}))
        return real(self, staged, **kw)

    monkeypatch.setattr(Table, "commit", commit_after_another)
    rows = [{"id": i, "part": "b", "v": "dask", "n": 1.0} for i in range(10, 30)]
    result = write(dd.from_pandas(_frame(rows), npartitions=4), t)
    monkeypatch.setattr(Table, "commit", real)
    assert interleaved and result.version == t.version
    model = {i: {"id": i, "part": "a", "v": "old", "n": 0.0} for i in range(40)}
    model.update({i: {"id": i, "part": "c", "v": "other", "n": 9.0} for i in range(0, 40, 2)})
    for i in (1, 3, 5):
        del model[i]
    model.update({row["id"]: row for row in rows})
    assert rows_of(t.scan().to_arrow()) == model_rows(model, W_SCHEMA.names, lambda _: True)


def test_sequence_by_wins_over_commit_order_between_stage_and_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a sequence_by table, newer events committed by another handle after the Dask write staged its older
    ones keep winning (in their new partition), and their deletes stay deletes."""
    from mere.integrations.dask import write
    from mere.table.table import Table

    t = mere.connect(str(tmp_path / "wh")).create_table(
        "s.t",
        SEQ_SCHEMA,
        primary_key="id",
        partition_by="part",
        buckets=2,
        sequence_by="lsn",
        cdc_column="op",
    )
    t.upsert(
        pa.Table.from_pylist(
            [{"id": i, "part": "p", "lsn": 10, "v": "a", "op": "I"} for i in range(20)], schema=SEQ_SCHEMA
        )
    )
    other = mere.connect(str(tmp_path / "wh")).table("s.t")
    real = Table.commit
    newer = [
        {"id": i, "part": "q", "lsn": 100, "v": "newer", "op": "D" if i % 4 == 0 else "U"}
        for i in range(0, 20, 2)
    ]

    def commit_after_newer(self: Any, staged: Any, **kw: Any) -> Any:
        if self is not other:
            other.upsert(pa.Table.from_pylist(newer, schema=SEQ_SCHEMA))
        return real(self, staged, **kw)

    monkeypatch.setattr(Table, "commit", commit_after_newer)
    older = [{"id": i, "part": "r", "lsn": 50, "v": "older", "op": "U"} for i in range(20)]
    with dask.config.set(scheduler="sync"):
        write(dd.from_pandas(pd.DataFrame(older), npartitions=3), t)
    monkeypatch.setattr(Table, "commit", real)
    model = {i: {"id": i, "part": "r", "lsn": 50, "v": "older"} for i in range(20)}
    for e in newer:
        if e["op"] == "D":
            del model[e["id"]]
        else:
            model[e["id"]] = {c: e[c] for c in SEQ_COLUMNS}
    assert rows_of(t.scan().to_arrow()) == model_rows(model, SEQ_COLUMNS, lambda _: True)
