"""mere.integrations.torch.TableDataset through real DataLoaders with worker processes: every live row once
per epoch over ranks x workers, reproducible shuffles, persistent workers, exact values, typed errors."""

from __future__ import annotations

import copy
import datetime as dt
import importlib
import pickle
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from enginelake import build

import mere
from mere.errors import FilterError, InvalidInput, NotInstalled, SchemaMismatch

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from mere.integrations.torch import TableDataset, assign_units, rebatch  # noqa: E402

# Python >= 3.12 warns when a multi-threaded process forks (Arrow keeps a thread pool); DataLoader forks.
# The tests start 3 workers even on a machine with fewer cores, where DataLoader warns.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

ROWS = 4000
NUM_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.float64()),
        pa.field("f32", pa.float32()),
        pa.field("i8", pa.int8()),
        pa.field("flag", pa.bool_()),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("ns")),
    ]
)


def _num_rows(ids: np.ndarray, version: int) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "v": np.where(ids % 9 == 0, np.nan, np.where(ids % 5 == 0, -0.0, ids / 7 + version)),
            "f32": (ids * 0.5).astype(np.float32),
            "i8": (ids % 100 - 50).astype(np.int8),
            "flag": ids % 3 == version % 3,
            "d": pa.array((ids % 1000).astype(np.int32), pa.int32()).cast(pa.date32()),
            "ts": pa.array(ids * 1_000_003 + version, pa.int64()).cast(pa.timestamp("ns")),
        },
        schema=NUM_SCHEMA,
    )


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[mere.Table, mere.Table]:
    """(the engine test table, an all-numeric 8-bucket table with 100-row row groups and deletes)."""
    catalog = mere.connect(str(tmp_path_factory.mktemp("torch") / "wh"))
    eng = build(catalog)
    nums = catalog.create_table(
        "t.nums", NUM_SCHEMA, primary_key="id", buckets=8, properties={"write.row-group-rows": "100"}
    )
    nums.upsert(_num_rows(np.arange(ROWS), 1))
    nums.upsert(_num_rows(np.arange(0, ROWS, 10), 2))
    nums.delete("id >= 3900")
    nums.upsert(_num_rows(np.arange(ROWS, ROWS + 300), 3))
    return eng, nums


def _ids(batches: Iterable[Any]) -> list[int]:
    out: list[int] = []
    for b in batches:
        out.extend(b["id"].tolist() if isinstance(b, dict) else b.column("id").to_pylist())
    return out


def _loader(ds: TableDataset, workers: int, **kwargs: Any) -> DataLoader[Any]:
    return DataLoader(ds, batch_size=None, num_workers=workers, **kwargs)


def _live(table: mere.Table, **scan: Any) -> list[int]:
    return sorted(table.scan(columns=["id"], **scan).to_arrow().column("id").to_pylist())


def _bits(table: pa.Table) -> pa.Table:
    """The table with float64 columns as their bits (so NaN equals NaN and -0.0 differs from 0.0)."""
    return pa.table(
        {
            name: col.combine_chunks().view(pa.int64()) if col.type == pa.float64() else col
            for name, col in zip(table.column_names, table.columns)
        }
    )


def test_ranks_times_workers_read_every_row_once_per_epoch(lake: tuple[mere.Table, mere.Table]) -> None:
    _, nums = lake
    live = _live(nums)
    ranks = [
        TableDataset(
            nums,
            columns=["id", "v"],
            batch_size=256,
            shuffle=True,
            seed=3,
            rank=r,
            world_size=2,
            max_task_bytes=3000,
        )
        for r in range(2)
    ]
    units = len(ranks[0].units)
    assert units >= 12 > 8  # the 8 splits were cut into key-range windows
    assert all(ranks[0].shard_units(s, 6) for s in range(6))  # every (rank, worker) shard has work
    orders = []
    for epoch in range(2):
        ids: list[int] = []
        for ds in ranks:
            ds.set_epoch(epoch)
            ids += _ids(_loader(ds, 3))
        assert sorted(ids) == live  # exactly once over 2 ranks x 3 workers
        orders.append(ids)
    assert orders[0] != orders[1]


def test_more_shards_than_units(lake: tuple[mere.Table, mere.Table]) -> None:
    _, nums = lake
    live = _live(nums)
    ids: list[int] = []
    for rank in range(3):
        ds = TableDataset(nums, columns=["id"], batch_size=500, rank=rank, world_size=3)
        assert len(ds.units) == 8
        empty = [s for s in range(9) if not ds.shard_units(s, 9)]
        assert len(empty) == 1
        ids += _ids(_loader(ds, 3))
    assert sorted(ids) == live


def test_assignment_is_a_partition_and_balanced() -> None:
    sizes = [50, 10, 10, 40, 30, 30, 5, 5, 5]
    for rng in (None, np.random.default_rng(1)):
        lots = assign_units(sizes, 4, rng)
        assert sorted(i for lot in lots for i in lot) == list(range(len(sizes)))
        loads = sorted(sum(sizes[i] for i in lot) for lot in lots)
        assert loads[-1] - loads[0] <= 20
    assert assign_units(sizes, 4) == assign_units(sizes, 4)
    assert [lot for lot in assign_units([1, 2], 5) if lot] == [[1], [0]]


def test_shuffle_is_reproducible_per_seed_and_epoch(lake: tuple[mere.Table, mere.Table]) -> None:
    _, nums = lake
    live = _live(nums)

    def order(seed: int, epoch: int) -> list[int]:
        ds = TableDataset(nums, columns=["id"], batch_size=300, shuffle=True, seed=seed, max_task_bytes=3000)
        ds.set_epoch(epoch)
        return _ids(_loader(ds, 2))

    first = order(7, 0)
    assert sorted(first) == live
    assert order(7, 0) == first  # a fresh dataset and DataLoader, the same order
    assert order(7, 1) != first
    assert order(8, 0) != first
    plain = _ids(_loader(TableDataset(nums, columns=["id"], batch_size=300, max_task_bytes=3000), 2))
    assert sorted(plain) == live and plain != first


@pytest.mark.parametrize(
    ("context", "workers"), [("fork", 2), ("spawn", 1)]
)  # spawn: the epoch's shared memory
def test_persistent_workers_see_set_epoch(
    lake: tuple[mere.Table, mere.Table], context: str, workers: int
) -> None:
    _, nums = lake
    live = _live(nums)
    ds = TableDataset(nums, columns=["id"], batch_size=300, shuffle=True, seed=5, max_task_bytes=3000)
    loader = _loader(ds, workers, persistent_workers=True, multiprocessing_context=context)
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        ids = _ids(loader)
        assert sorted(ids) == live
        orders.append(ids)
    assert orders[0] != orders[1]
    # The persistent workers read epoch 1, not a stale epoch 0: a fresh loader at epoch 1 agrees.
    fresh = TableDataset(nums, columns=["id"], batch_size=300, shuffle=True, seed=5, max_task_bytes=3000)
    fresh.set_epoch(1)
    assert _ids(_loader(fresh, workers)) == orders[1]


def test_batches_are_exactly_batch_size_but_the_last_of_a_shard(lake: tuple[mere.Table, mere.Table]) -> None:
    _, nums = lake
    ds = TableDataset(nums, columns=["id"], batch_size=333, max_task_bytes=3000)
    sizes = [len(b["id"]) for b in ds]
    assert sizes[:-1] == [333] * (len(sizes) - 1) and 0 < sizes[-1] <= 333
    sizes = [len(b["id"]) for b in _loader(ds, 3)]
    assert sum(s != 333 for s in sizes) <= 3
    batches = [pa.record_batch({"x": np.arange(n)}) for n in (0, 5, 7, 1, 0, 20, 3)]
    out = list(rebatch(batches, 6))
    assert [b.num_rows for b in out] == [6, 6, 6, 6, 6, 6]
    assert (
        pa.Table.from_batches(out).column("x").to_pylist()
        == np.concatenate([np.arange(n) for n in (0, 5, 7, 1, 0, 20, 3)]).tolist()
    )


def test_tensor_values_and_dtypes(lake: tuple[mere.Table, mere.Table]) -> None:
    eng, nums = lake
    for table, columns, flt in (
        (nums, list(NUM_SCHEMA.names), None),
        (eng, ["id", "day", "score", "ts"], "day is not null"),
    ):
        want = table.scan(columns=columns, filter=flt).to_arrow().sort_by("id")
        ds = TableDataset(table, columns=columns, filter=flt, batch_size=97)
        got = {c: torch.cat([b[c] for b in _loader(ds, 2)]) for c in columns}
        order = torch.argsort(got["id"])
        for c in columns:
            t, a = got[c][order], want.column(c)
            kind = a.type
            if pa.types.is_timestamp(kind):
                assert t.dtype == torch.int64
                expect = a.cast(pa.int64()).to_numpy()
            elif pa.types.is_date32(kind):
                assert t.dtype == torch.int32
                expect = a.cast(pa.int32()).to_numpy()
            else:
                expect = a.to_numpy()
                assert t.dtype == torch.from_numpy(expect.copy()).dtype
            got_np = t.numpy()
            np.testing.assert_array_equal(got_np, expect)  # NaN == NaN here
            if got_np.dtype.kind == "f":
                assert (np.signbit(got_np) == np.signbit(expect)).all()  # -0.0 stays negative
    batches = list(_loader(TableDataset(nums, batch_size=500), 1))
    assert all(type(b) is dict and all(t.is_contiguous() for t in b.values()) for b in batches)
    v = torch.cat([b["v"] for b in TableDataset(nums, columns=["v"])])
    assert torch.isnan(v).any() and (torch.signbit(v) & (v == 0)).any()


def test_arrow_output_filter_and_version(lake: tuple[mere.Table, mere.Table]) -> None:
    eng, _ = lake
    for kwargs in (
        {},
        {"version": 3},
        {"filter": "id < 200"},  # key filter
        {"filter": "score > 50 and day = '2026-11-21'"},  # non-key filters
        {"filter": "qty is null"},
        {"filter": "id < 0"},  # nothing
    ):
        want = eng.scan(**kwargs).to_arrow().sort_by("id")
        ds = TableDataset(eng, output="arrow", batch_size=50, **kwargs)
        got = pa.Table.from_batches(list(_loader(ds, 2)), schema=want.schema).sort_by("id")
        assert _bits(got).equals(_bits(want)), kwargs
    assert TableDataset(eng, version=3, columns=["id"]).version == 3


def test_version_is_pinned_at_construction(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table("a.b", NUM_SCHEMA, primary_key="id", buckets=2)
    t.upsert(_num_rows(np.arange(100), 1))
    ds = TableDataset(t, columns=["id"])
    t.upsert(_num_rows(np.arange(100, 150), 2))
    assert sorted(_ids(ds)) == list(range(100))


def test_distributed_rank_is_taken_where_workers_start(
    lake: tuple[mere.Table, mere.Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nums = lake
    explicit = TableDataset(nums, columns=["id"], rank=1, world_size=2, max_task_bytes=3000)
    want = {w: sorted(_ids(_loader(explicit, w))) for w in (1, 2)}  # shards depend on the worker count
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
    ds = TableDataset(nums, columns=["id"], max_task_bytes=3000)
    assert ds.shard() == (1, 2)
    assert sorted(_ids(_loader(ds, 2))) == want[2]
    # A spawned worker has no process group: the rank travels with the dataset.
    assert sorted(_ids(_loader(ds, 1, multiprocessing_context="spawn"))) == want[1]


def test_pickles_small_without_the_catalog(lake: tuple[mere.Table, mere.Table]) -> None:
    eng, _ = lake
    ds = TableDataset(eng, columns=["id", "score"], shuffle=True, seed=2)
    ds.set_epoch(4)
    blob = pickle.dumps(ds)
    assert len(blob) < 64_000
    assert b"catalog.db" not in blob and b"mere.table.table" not in blob  # no Table, no catalog
    copy = pickle.loads(blob)
    assert copy.epoch == 4 and sorted(_ids(copy)) == _live(eng)
    assert _ids(copy) == _ids(ds)
    text = repr(ds)
    assert "eng.orders @ v6" in text and "shuffle=True" in text and "epoch=4" in text


def test_bad_arguments_are_typed_errors(lake: tuple[mere.Table, mere.Table]) -> None:
    eng, nums = lake
    for kwargs in (
        {"batch_size": 0},
        {"batch_size": -3},
        {"batch_size": 1.5},
        {"batch_size": True},
        {"output": "numpy"},
        {"rank": 2, "world_size": 2},
        {"rank": -1, "world_size": 2},
        {"rank": 0},
        {"world_size": 2},
        {"rank": 0, "world_size": 0},
        {"seed": -1},
        {"seed": "a"},
        {"shuffle": "yes"},
        {"max_task_bytes": 0},
    ):
        with pytest.raises(InvalidInput):
            TableDataset(nums, columns=["id"], **kwargs)
    for table in (None, "eng.nums"):
        with pytest.raises(InvalidInput, match="mere Table"):
            TableDataset(table)  # type: ignore[arg-type]
    for shard, shards in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(InvalidInput):
            TableDataset(nums, columns=["id"]).shard_units(shard, shards)
    for epoch in (-1, "x", 1.5):
        with pytest.raises(InvalidInput, match="epoch"):
            TableDataset(nums, columns=["id"], shuffle=True).shard_units(0, 1, epoch)  # type: ignore[arg-type]
    with pytest.raises(SchemaMismatch, match="nope"):
        TableDataset(nums, columns=["id", "nope"])
    with pytest.raises(FilterError):
        TableDataset(nums, filter="id <")
    with pytest.raises(InvalidInput, match=r"name \(string\).*price.*output='arrow'") as info:
        TableDataset(eng, columns=["id", "name", "price", "tags"])
    assert "tags" in str(info.value)
    TableDataset(eng, columns=["id", "name", "price", "tags"], output="arrow")  # fine as record batches
    with pytest.raises(InvalidInput):
        TableDataset(nums, columns=["id"]).set_epoch(-1)
    nulls = TableDataset(eng, columns=["id", "qty"])  # qty is nullable: its nulls show when read
    with pytest.raises(InvalidInput, match=r"'qty'.*null.*is not null"):
        list(nulls)
    with pytest.raises(InvalidInput, match="'qty'"):  # re-raised from a worker with its type
        list(_loader(nulls, 1))
    assert len(list(TableDataset(eng, columns=["id", "qty"], filter="qty is not null"))) > 0


def test_a_shared_batch_travels_as_one_block(lake: tuple[mere.Table, mere.Table]) -> None:
    _, nums = lake
    ds = TableDataset(nums, columns=["id", "v", "flag", "d"], batch_size=1000, max_task_bytes=3000)
    pieces = [
        p.select(ds.columns) for p in nums.scan(columns=ds.columns).to_arrow().slice(0, 1000).to_batches()
    ]
    want = ds.to_tensors(pa.Table.from_batches(pieces).combine_chunks().to_batches()[0])
    shared = ds.shared_tensors(pieces)
    assert len({t.untyped_storage().data_ptr() for t in shared.values()}) == 1
    assert type(copy.copy(shared)) is type(shared)  # DataLoader's default_convert copies it
    for got in (shared, pickle.loads(pickle.dumps(shared))):
        assert list(got) == list(want)
        for name, t in want.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name].nan_to_num(7.5), t.nan_to_num(7.5))


def test_missing_torch_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    monkeypatch.delitem(sys.modules, "mere.integrations.torch")
    with pytest.raises(NotInstalled, match=r"pip install 'mere\[torch\]'"):
        importlib.import_module("mere.integrations.torch")


def test_timestamps_keep_their_unit(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ts", pa.timestamp("ms", tz="UTC"))])
    t = mere.connect(str(tmp_path / "wh")).create_table("a.ts", schema, primary_key="id")
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    t.upsert(pa.table({"id": [1], "ts": pa.array([when], schema.field("ts").type)}, schema=schema))
    (batch,) = list(TableDataset(t))
    assert batch["ts"].tolist() == [int(when.timestamp() * 1000)]
    assert pc.equal(t.to_arrow().column("ts").cast(pa.int64()), 1767323045678).to_pylist() == [True]
