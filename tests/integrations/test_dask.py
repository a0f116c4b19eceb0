"""Dask reads mere tables (one partition per split or group of splits, on a real distributed cluster)
and writes them as one commit; a failing partition leaves the table and its directory unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from enginelake import assert_same_rows

import mere
from maintenance import MANUAL
from mere.errors import InvalidInput, MereError, SchemaMismatch
from mere.integrations.dask import read_table, write
from mere.table.scan import storage_for

dd = pytest.importorskip("dask.dataframe")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """One local cluster of 2 worker processes for the module; its dashboard on any free port (two test
    processes may each start one: both asking for 8787 failed one of them)."""
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit="2GiB"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def arrow(frame: Any) -> pa.Table:
    """Computed partitions as Arrow."""
    return pa.Table.from_pandas(frame, preserve_index=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"columns": ["id", "name", "tags", "price"]},
        {"filter": "id < 100"},
        {"filter": "qty > 3000"},
        {"filter": "day IS NULL AND id > 200"},
        {"version": 2},
        {"version": 4, "columns": ["id", "qty"]},
    ],
)
def test_read_equals_the_scan(client: Any, lake: mere.Table, kwargs: dict[str, Any]) -> None:
    expected = lake.scan(**kwargs).to_arrow()
    ddf = read_table(lake, partition_bytes=20_000, **kwargs)
    assert ddf.npartitions > 1
    frame = ddf.compute()
    assert list(frame.dtypes) == list(ddf.dtypes)  # meta (from the schema) matches what workers return
    assert_same_rows(arrow(frame), expected)


def test_partitions_follow_the_cluster(client: Any, lake: mere.Table) -> None:
    assert read_table(lake).npartitions == 2  # the cluster's 2 worker threads, though the table is tiny
    assert read_table(lake, min_partitions=5).npartitions == 5
    assert read_table(lake, partition_bytes=1 << 40, min_partitions=1).npartitions == 1


def test_column_selection_reaches_mere(client: Any, lake: mere.Table) -> None:
    ddf = read_table(lake, partition_bytes=20_000)
    expected = lake.scan(columns=["id", "qty"]).to_arrow()
    selected = ddf[["id", "qty"]]
    assert_same_rows(arrow(selected.compute()), expected)
    assert int(ddf["qty"].sum().compute()) == pa.compute.sum(expected["qty"]).as_py()
    # Bytes read in this process (synchronous scheduler): the selection is pushed into the read.
    storage = storage_for(lake.storage.uri, ())
    sizes = []
    for read in (
        lambda: ddf.compute(scheduler="sync"),
        lambda: selected.compute(scheduler="sync"),
        lambda: [list(task.read()) for task in lake.scan(columns=["id", "qty"]).tasks()],
    ):
        storage.stats.reset()
        storage.clear_cache()
        read()
        sizes.append(storage.stats.bytes_read)
    assert sizes[1] == sizes[2] < sizes[0], sizes  # what mere reads for those two columns


def test_empty_and_pinned(client: Any, tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("t.e", pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key="id")
    empty = read_table(t)
    assert len(empty.compute()) == 0 and list(empty.columns) == ["id", "v"]
    t.upsert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    pinned = read_table(t)
    t.upsert(pa.table({"id": [3], "v": ["c"]}))
    assert len(pinned) == 2
    assert len(read_table(t)) == 3


def test_writes_commit_once(client: Any, tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.float64())])
    t = cat.create_table("t.w", schema, primary_key="id", buckets=4, properties=MANUAL)  # counts versions
    import pandas as pd

    base = pd.DataFrame(
        {"id": range(10_000), "v": [f"v{i}" for i in range(10_000)], "n": [i / 2 for i in range(10_000)]}
    )
    result = write(dd.from_pandas(base, npartitions=5), t)
    assert t.version == 1 and result.version == 1
    changes = base.iloc[::10].assign(v="changed")
    write(dd.from_pandas(changes, npartitions=3), t, mode="upsert")
    assert t.version == 2
    got = t.scan().to_arrow().sort_by("id").to_pandas()
    assert (
        len(got) == 10_000
        and (got["v"].iloc[::10] == "changed").all()
        and (got["v"].iloc[1::10] != "changed").all()
    )
    write(dd.from_pandas(base.iloc[:100], npartitions=2), t, mode="overwrite")
    assert t.version == 3 and t.scan().count() == 100
    log = cat.create_table("t.log", schema)
    write(dd.from_pandas(base, npartitions=4), log, mode="append")
    write(dd.from_pandas(base, npartitions=4), log, mode="append")
    assert log.version == 2 and log.scan().count() == 20_000
    # read back through Dask and write to another table: a round trip keeps every value
    copy = cat.create_table("t.copy", schema, primary_key="id", buckets=2)
    write(read_table(t), copy)
    assert copy.scan().to_arrow().sort_by("id").equals(t.scan().to_arrow().sort_by("id"))


def _boom(frame: Any) -> Any:
    if (frame["id"] >= 5_000).any():
        raise RuntimeError("partition failed on purpose")
    return frame


def test_failed_partition_leaves_the_table_unchanged(client: Any, tmp_path: Path) -> None:
    import pandas as pd

    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = cat.create_table("t.f", schema, primary_key="id", buckets=4)
    t.upsert(pa.table({"id": [1], "v": ["kept"]}))
    before, files = t.scan().to_arrow(), sorted(p for p in (tmp_path / "wh").rglob("*.parquet"))
    frame = pd.DataFrame({"id": range(10_000), "v": ["x"] * 10_000})
    ddf = dd.from_pandas(frame, npartitions=4)
    for scheduler in ("distributed", "threads", "sync"):  # the user's own error comes back as raised
        with dask.config.set(scheduler=scheduler), pytest.raises(RuntimeError, match="on purpose"):
            write(ddf.map_partitions(_boom, meta=ddf._meta), t)
    bad = dd.from_pandas(pd.DataFrame({"id": range(100), "v": [1.5] * 100}), npartitions=2)
    with pytest.raises(SchemaMismatch):  # a typed error keeps its type through the workers
        write(bad, t)
    assert t.version == 1 and t.scan().to_arrow().equals(before)
    assert sorted(p for p in (tmp_path / "wh").rglob("*.parquet")) == files


def test_bad_arguments(lake: mere.Table) -> None:
    import pandas as pd

    before = lake.version
    ddf = dd.from_pandas(pd.DataFrame({"id": [1]}), npartitions=1)
    for call in (
        lambda: read_table("eng.orders"),  # type: ignore[arg-type]
        lambda: read_table(lake, partition_bytes=0),
        lambda: write(ddf, lake, mode="merge"),
        lambda: write(ddf, lake, mode="append"),
        lambda: write(pd.DataFrame({"id": [1]}), lake),  # type: ignore[arg-type]
        lambda: write(ddf, "eng.orders"),  # type: ignore[arg-type]
        lambda: read_table(lake, types_mapper=5),  # type: ignore[arg-type]  # failed only at compute()
    ):
        with pytest.raises(InvalidInput):
            call()
    with pytest.raises(MereError):
        read_table(lake, columns=["nope"])
    with pytest.raises(MereError):
        read_table(lake, version=99)
    assert lake.version == before
