"""Ray Data reads mere tables (read_table: merged rows, split into read tasks) and writes Datasets as one
commit (write); a failed write job leaves the table and its directory as they were."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from enginelake import SCHEMA, build
from rayutil import local_ray

import mere
from mere.errors import InvalidInput, MereError, SchemaMismatch

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import mere.integrations.ray as mere_ray  # noqa: E402
from mere.integrations.ray import MereDatasink, MereDatasource, read_table, write  # noqa: E402

# Ray Data's own code warns of its deprecated settings (DataContext copies them); not ours to fail on.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    """One local Ray for the module (its workers run this interpreter, which imports mere; the test
    folder is on their path for the functions the tests hand to map_batches)."""
    with local_ray(ray):
        yield


@pytest.fixture
def lake(tmp_path: Path) -> mere.Table:
    return build(mere.connect(str(tmp_path / "wh")))


def arrow(ds: Any) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def normal(table: pa.Table) -> pa.Table:
    """Sorted by id, floats as their bits: NaN equals NaN and -0.0 differs from 0.0."""
    table = table.sort_by("id").combine_chunks()
    for i, f in enumerate(table.schema):
        if pa.types.is_float64(f.type):
            table = table.set_column(i, f.name, table.column(i).chunk(0).view(pa.int64()))
    return table


def same(ds: Any, expected: pa.Table) -> None:
    got = arrow(ds)
    assert got.schema == expected.schema
    assert normal(got).equals(normal(expected))


def parquet_files(table: mere.Table) -> set[Path]:
    return set(Path(table.storage.full_path(table.location)).rglob("*.parquet"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"columns": ["id", "price", "tags"]},
        {"filter": "id < 100"},
        {"filter": "qty > 3000"},  # a non-key column: evaluated after the merge
        {"version": 2},
        {"columns": ["id", "score"], "filter": "day is null", "version": 4},
    ],
)
def test_read_equals_the_scan(lake: mere.Table, kwargs: dict[str, Any]) -> None:
    expected = lake.scan(**kwargs).to_arrow()
    assert expected.num_rows > 0
    ds = read_table(lake, max_task_bytes=4096, **kwargs)  # small tasks: several per split
    assert ds.schema().base_schema == lake.scan(**kwargs).schema  # known without executing
    same(ds, expected)


def test_read_tasks_schema_projection_and_count(lake: mere.Table) -> None:
    source = MereDatasource(lake)
    assert len(source.get_read_tasks(4)) > 1  # 3 day partitions x 4 buckets
    assert all(t.schema == lake.schema for t in source.get_read_tasks(4))
    assert source.estimate_inmemory_data_size() == sum(t.size_bytes for t in lake.scan().tasks())
    # select_columns is pushed into the scan (and keeps its order); count() pushes an empty projection
    same(read_table(lake).select_columns(["qty", "id"]), lake.scan(columns=["qty", "id"]).to_arrow())
    assert read_table(lake).count() == lake.scan().count() == 555
    assert read_table(lake, filter="id < 100").count() == lake.scan(filter="id < 100").count()


def test_empty_table_reads_as_empty_dataset_with_schema(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path / "wh")).create_table("eng.empty", SCHEMA, primary_key="id", buckets=2)
    ds = read_table(t)
    assert ds.schema().base_schema == SCHEMA
    assert ds.count() == 0
    blocks = ray.get(ds.to_arrow_refs())  # Ray drops empty blocks
    assert all(b.num_rows == 0 and b.schema == SCHEMA for b in blocks)


def test_upsert_is_one_commit(lake: mere.Table) -> None:
    before = lake.version
    rows = lake.scan(version=1).to_arrow().sort_by("id").slice(0, 300)
    rows = rows.set_column(2, "qty", pc.multiply(rows["qty"], 1000))
    ds = ray.data.from_arrow([rows.slice(0, 100), rows.slice(100, 100), rows.slice(200, 100)])
    result = write(ds, lake, mode="upsert")
    assert result.version == lake.version == before + 1
    assert result.operation == "upsert" and result.rows_written == 300
    got = lake.to_arrow(filter=pc.field("id").isin(rows["id"]))
    assert normal(got).equals(normal(rows))
    assert lake.to_arrow().num_rows == 555 + 5  # the deleted keys 15..19 came back
    # a key in several blocks: the commit orders the tasks' files by block, so the last block wins
    ids = rows.slice(0, 50)
    versions = [ids.set_column(2, "qty", pa.array([k] * 50, pa.int64())) for k in range(3)]
    write(ray.data.from_arrow(versions), lake, mode="upsert")
    assert set(lake.to_arrow(filter=pc.field("id").isin(ids["id"]))["qty"].to_pylist()) == {2}
    before += 1
    # a rerun with a known idempotency key runs nothing
    again = write(ds, lake, mode="upsert", idempotency_key="k1")
    assert write(ds, lake, mode="upsert", idempotency_key="k1").already_committed
    assert lake.version == again.version == before + 2


def test_append_and_overwrite(tmp_path: Path, lake: mere.Table) -> None:
    cat = mere.connect(str(tmp_path / "wh2"))
    events = cat.create_table("eng.events", SCHEMA)  # no key
    rows = lake.to_arrow()
    first = write(ray.data.from_arrow([rows.slice(0, 200), rows.slice(200)]), events, mode="append")
    assert first.version == events.version == 1
    write(ray.data.from_arrow(rows.slice(0, 10)), events, mode="append")
    assert events.to_arrow().num_rows == rows.num_rows + 10

    # pandas blocks (a map_batches in pandas format) arrive as Arrow without the index
    notes = cat.create_table("eng.notes", pa.schema([("id", pa.int64()), ("note", pa.string())]))
    frames = pa.table([rows["id"], rows["name"]], schema=notes.schema)
    write(ray.data.from_arrow(frames).map_batches(lambda f: f, batch_format="pandas"), notes, mode="append")
    assert notes.to_arrow().sort_by("id").equals(frames.sort_by("id"))

    result = write(ray.data.from_arrow(rows.slice(0, 50)), events, mode="overwrite")
    assert result.version == events.version == 3 and result.operation == "overwrite"
    assert normal(events.to_arrow()).equals(normal(rows.slice(0, 50)))

    before = lake.version
    small = rows.filter(pc.less(rows["id"], 30))
    write(ray.data.from_arrow([small.slice(0, 10), small.slice(10)]), lake, mode="overwrite")
    assert lake.version == before + 1
    assert normal(lake.to_arrow()).equals(normal(small))


def _fail_on_id_300(batch: pa.Table) -> pa.Table:
    if pc.any(pc.equal(batch["id"], 300)).as_py():
        time.sleep(1.0)  # the other tasks stage their files first
        raise RuntimeError("boom in a Ray task")
    return batch


class _DyingSink(MereDatasink):
    """Stages like mere's sink, but the first worker to stage id 300 dies before it reports its files (Ray
    retries the task, which then succeeds); with ``fail``, the task of id 500 raises once that happened."""

    def __init__(self, table: mere.Table, died: str, fail: bool) -> None:
        super().__init__(table, "upsert")
        self.died, self.fail = died, fail

    def _stage(self, blocks: Any) -> Any:
        blocks = list(blocks)
        ids = {i for b in blocks for i in b.column("id").to_pylist()}
        if self.fail and 500 in ids:
            deadline = time.monotonic() + 120
            while not os.path.exists(self.died) and time.monotonic() < deadline:
                time.sleep(0.05)
            raise RuntimeError("boom after a worker died")
        staged = super()._stage(blocks)
        if 300 in ids and not os.path.exists(self.died):
            Path(self.died).touch()
            os._exit(1)  # killed after its files were written, as Ray's force-cancel or an OOM kill does
        return staged


@pytest.mark.parametrize("fail", [False, True], ids=["the job commits", "the job fails"])
def test_files_of_a_killed_attempt_are_deleted_by_the_write_id(
    lake: mere.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    """A worker killed after staging never reports its files (Ray retries its task elsewhere); the driver
    finds them by the job's write id, after the commit and after a failed job alike."""
    monkeypatch.setattr(mere_ray, "CLEANUP_WAIT_S", 3.0)  # a killed attempt never reports: do not wait 30 s
    version, rows = lake.version, lake.to_arrow()
    new = lake.scan(version=1).to_arrow().sort_by("id")
    new = new.set_column(new.schema.get_field_index("qty"), "qty", pc.add(new["qty"], 1000))
    ds = ray.data.from_arrow([new.slice(i, 100) for i in range(0, 600, 100)])
    sink = _DyingSink(lake, str(tmp_path / "died"), fail)
    if fail:
        with pytest.raises(Exception, match="boom after a worker died"):
            ds.write_datasink(sink)
        assert lake.version == version
        assert normal(lake.to_arrow()).equals(normal(rows))
    else:
        ds.write_datasink(sink)
        assert sink.result is not None and lake.version == version + 1
        kept = rows.filter(pc.invert(pc.is_in(rows["id"], new["id"])))
        assert normal(lake.to_arrow()).equals(normal(pa.concat_tables([kept, new])))
    assert (tmp_path / "died").exists()  # a worker did die after staging
    assert lake.cleanup(dt.timedelta(0)) == []  # and no file is left that no version references


@pytest.mark.parametrize("failure", ["task raises", "stage rejects", "Ray skips the failed block"])
def test_failed_write_changes_nothing(lake: mere.Table, failure: str) -> None:
    version, rows, files = lake.version, lake.to_arrow(), parquet_files(lake)
    new = lake.scan(version=1).to_arrow().sort_by("id")
    blocks = [new.slice(i, 100) for i in range(0, 600, 100)]
    ctx = ray.data.DataContext.get_current()
    skipped = ctx.max_errored_blocks
    expected: type[BaseException] = Exception
    if failure == "stage rejects":
        bad = blocks[3].set_column(2, "qty", pa.array(["x"] * 100))
        ds = ray.data.from_arrow([*blocks[:3], bad, *blocks[4:]])
        expected = SchemaMismatch  # Ray's RayTaskError(SchemaMismatch) is one
    else:
        if failure == "Ray skips the failed block":
            ctx.max_errored_blocks = 1  # Ray would complete the job without the block
            expected = MereError  # raised by on_write_complete, which refuses a partial commit
        ds = ray.data.from_arrow(blocks).map_batches(_fail_on_id_300, batch_format="pyarrow")
    try:
        with pytest.raises(expected) as info:
            write(ds, lake, mode="upsert")
    finally:
        ctx.max_errored_blocks = skipped
    if failure == "task raises":
        assert "boom" in str(info.value)
    assert lake.version == version
    assert normal(lake.to_arrow()).equals(normal(rows))
    assert parquet_files(lake) == files  # everything the tasks staged is gone


def test_bad_arguments_change_nothing(lake: mere.Table) -> None:
    version, files = lake.version, parquet_files(lake)
    ds = ray.data.from_arrow(lake.to_arrow().slice(0, 5))
    cases = [
        lambda: write(ds, lake, mode="merge"),
        lambda: write(ds, lake, mode="append"),  # the table has a key
        lambda: write(ds, "eng.orders"),
        lambda: write(lake.to_arrow(), lake),
        lambda: write(ds, lake, mode="upsert", partition={"day": "2026-11-21"}),
        lambda: write(ds, lake, idempotency_key=""),
        lambda: read_table(lake, columns=["nope"]),
        lambda: read_table(lake, filter="nope > 1"),
        lambda: read_table(lake, version=99),
        lambda: read_table(lake, max_task_bytes=0),
        lambda: read_table("eng.orders"),
    ]
    for case in cases:
        with pytest.raises(MereError):
            case()
    with pytest.raises(InvalidInput, match="mode"):
        write(ds, lake, mode="merge")
    assert lake.version == version and parquet_files(lake) == files


def test_the_ledger_runs_calls_out_of_order() -> None:
    # Every caller waits for its ledger calls one by one; executed in order, Ray holds a caller's calls
    # until a call number lost with a cancelled task arrives: 30 s, then ActorUnavailableError.
    from mere.integrations.ray import _LedgerActor

    assert _LedgerActor._default_options.get("allow_out_of_order_execution") is True
