"""Bad input to the read, maintenance and catalog API: typed errors that change nothing (found by review)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import errors


@pytest.fixture
def table(local_cat: mere.Catalog) -> mere.Table:
    t = local_cat.create_table("n.t", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "v": [1, 2]}))
    t.upsert(pa.table({"id": [2], "v": [3]}))
    return t


def test_find_commit_wants_a_key(table: mere.Table) -> None:
    # None matched the commits made without a key: a pipeline would have skipped its write.
    with pytest.raises(errors.InvalidInput, match="needs an idempotency key"):
        table.find_commit(None)  # type: ignore[arg-type]
    assert table.find_commit("never-used") is None


def test_versions_are_checked_where_files_and_specs_are_read(table: mere.Table) -> None:
    with pytest.raises(errors.NoSuchVersion, match="does not exist"):
        table.files_at(99)
    with pytest.raises(errors.InvalidInput, match="integer"):
        table.files_at(None)  # type: ignore[arg-type]
    for beyond in (-1, 2**63, 2**70):  # also beyond the catalog's integers
        with pytest.raises(errors.NoSuchVersion):
            table.files_at(beyond)
    with pytest.raises(errors.NoSuchVersion):
        table.spec_at(-1)
    with pytest.raises(errors.NoSuchVersion):
        mere.Scan(table, 99).to_arrow()
    with pytest.raises(errors.InvalidInput, match="start_version"):
        table.changes(None)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput, match="mere Table"):
        next(mere.follow(None, 0))  # type: ignore[arg-type]


def test_maintenance_on_a_handle_of_a_dropped_table_refuses(
    local_cat: mere.Catalog, table: mere.Table
) -> None:
    files = sorted(p for p, _, _ in table.storage.list_files(table.location))
    local_cat.drop_table("n.t")  # no purge: the files stay
    for run in (
        lambda: table.cleanup(dt.timedelta(0), dry_run=False),
        lambda: table.expire(dt.timedelta(0), dry_run=False),
        table.tags,
        table.auto_compact,
        lambda: table.version,
    ):
        with pytest.raises(errors.NoSuchTable, match=r"n\.t no longer exists"):
            run()
    assert sorted(p for p, _, _ in table.storage.list_files(table.location)) == files


def test_an_age_beyond_the_calendar_expires_nothing(table: mere.Table) -> None:
    assert table.expire(dt.timedelta.max, dry_run=False) == []
    assert table.expire(dt.timedelta(days=10**8), dry_run=True) == []


def test_properties_and_columns_a_typo_would_silently_break(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    for props, match in (
        ({"compaction.min_files": "4"}, "did you mean 'compaction.min-files'"),
        ({"changes.logs": "on"}, "did you mean 'changes.log'"),
        ({"Write.Compression": "zstd"}, "did you mean 'write.compression'"),
        ({"write.compression": "snappy", "write.compression-level": "3"}, "takes no compression level"),
        ({"write.compression": "zstd", "write.compression-level": "99"}, "compression levels"),
    ):
        with pytest.raises(errors.InvalidInput, match=match):
            local_cat.create_table("n.p", schema, primary_key="id", properties=props)
    t = local_cat.create_table("n.p", schema, primary_key="id", properties={"team.owner": "me"})
    with pytest.raises(errors.InvalidInput, match="takes no compression level"):
        t.set_properties({"write.compression": "snappy", "write.compression-level": "3"})
    for cdc in ("", "_mere_op"):
        with pytest.raises(errors.InvalidInput, match="cdc_column"):
            local_cat.create_table("n.c", schema, primary_key="id", cdc_column=cdc)
    with pytest.raises(errors.SchemaMismatch, match="more than case"):
        local_cat.create_table(
            "n.case", pa.schema([("id", pa.int64()), ("a", pa.int64()), ("A", pa.int64())])
        )
    with pytest.raises(errors.SchemaMismatch, match="only in case"):
        t.evolve().add_column("ID", pa.int64()).commit()
    t.evolve().rename_column("v", "V").commit()  # a column may change its own case
    assert t.schema.names == ["id", "V"]
    assert sorted(local_cat.tables()) == ["n.p"]


def test_a_warehouse_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(errors.InvalidInput, match="is a file"):
        mere.connect(str(tmp_path / "file"))


def test_filters_combine_with_strings(table: mere.Table) -> None:
    assert table.scan(filter=(mere.col("id") == 1) | "id = 2").count() == 2
    assert table.scan(filter="v > 1" & (mere.col("id") == 2)).count() == 1


def test_engine_entry_points_check_their_arguments(table: mere.Table) -> None:
    scan = table.scan()
    with pytest.raises(errors.InvalidInput, match="read_split takes a Split"):
        next(scan.read_split(None))  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput, match="merge_splits takes a list of Split"):
        scan.merge_splits(None)  # type: ignore[arg-type]
    for bad in ("x", {("garbage",)}, {(1, 0)}):
        with pytest.raises(errors.InvalidInput, match="pairs"):
            scan.split_tables(bad)  # type: ignore[arg-type]
    (task,) = scan.tasks()[:1]
    for size in ("x", 0, -1):
        with pytest.raises(errors.InvalidInput, match="positive number of bytes"):
            task.divide(size)  # type: ignore[arg-type]
    assert scan.split_tables(set()) == {}
