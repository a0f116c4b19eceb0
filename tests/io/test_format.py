"""The stable format: catalog versions and migrations, spec format, the metadata model and typed errors.

The fixture tests/data/catalog_format2 was written by the mere of commit 2ed63ed (catalog format 2, before
versioning) with tests/data/make_catalog_format2.py; this code must open, migrate and read it exactly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

import mere
from mere import errors
from mere.catalog.sql import CATALOG_FORMAT
from mere.spec import default_properties
from services import PostgresServer

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "catalog_format2"


def _rows(table: mere.Table, version: int) -> list[dict[str, Any]]:
    rows = table.scan(version=version).to_arrow().to_pylist()
    return json.loads(
        json.dumps(sorted(rows, key=lambda r: json.dumps(r, default=str, sort_keys=True)), default=str)
    )


def _old_warehouse(tmp_path: Path) -> Path:
    target = tmp_path / "old"
    shutil.copytree(FIXTURE / "warehouse", target)
    return target


def _check_migrated_catalog(cat: mere.Catalog) -> None:
    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert cat.tables() == sorted(expected)
    for name, versions in expected.items():
        t = cat.table(name)
        assert t.version == len(versions) - 1
        for v, rows in versions.items():
            assert _rows(t, int(v)) == rows, (name, v)
        assert [s.version for s in t.history()] == list(range(len(versions)))
    orders = cat.table("sales.orders")
    assert orders.properties == {"owner": "sales-team", "write.compression": "zstd"}
    assert orders.spec.field_ids == {"id": 1, "day": 2, "qty": 3, "note": 4, "tags": 5}
    # The migrated catalog takes writes of every kind, property changes included.
    before = _rows(orders, orders.version)
    orders.upsert(
        pa.table({"id": [1], "day": pa.array([before[0]["day"]], pa.string()).cast(pa.date32()), "qty": [1]})
    )
    orders.set_properties({"owner": "ops"})
    assert cat.table("sales.orders").properties["owner"] == "ops"
    assert orders.compact() is not None
    assert {r["id"]: r["qty"] for r in orders.to_arrow().to_pylist()}[1] == 12
    # ... and holds change-feed consumers (format 5), which expire respects.
    reader = orders.consumer("migrated", start_version=orders.version - 1)
    orders.upsert(
        pa.table({"id": [1], "day": pa.array([before[0]["day"]], pa.string()).cast(pa.date32()), "qty": [5]})
    )
    orders.expire(dt.timedelta(0), dry_run=False)
    end, feed = reader.changes()
    assert end == orders.version and feed.read_all().num_rows > 0
    assert reader.commit(end) == end


def test_a_format_2_sqlite_catalog_is_migrated_on_connect_and_reads_the_same(tmp_path: Path) -> None:
    warehouse = _old_warehouse(tmp_path)
    db = warehouse / "catalog.db"
    with sqlite3.connect(db) as conn:
        assert "mere_catalog" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    cat = mere.connect(str(warehouse))
    assert cat.sql.format_version() == 2  # connecting alone changes nothing
    _check_migrated_catalog(cat)
    assert cat.sql.format_version() == CATALOG_FORMAT
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM mere_catalog WHERE key = 'format'").fetchone() == (
            str(CATALOG_FORMAT),
        )
        assert "spec" in {r[1] for r in conn.execute("PRAGMA table_info(mere_commits)")}
    assert cat.sql.upgrade() == []  # idempotent


def test_a_format_1_catalog_gains_the_columns_it_lacks(tmp_path: Path) -> None:
    warehouse = _old_warehouse(tmp_path)
    with sqlite3.connect(warehouse / "catalog.db") as conn:  # as the first mere made it: no expiry column
        conn.execute("ALTER TABLE mere_tables DROP COLUMN oldest_version")
    cat = mere.connect(str(warehouse))
    assert cat.sql.format_version() == 1
    steps = cat.upgrade()
    assert [s.split(":")[0] for s in steps] == ["format 2", "format 3", "format 4", "format 5", "format 6"]
    _check_migrated_catalog(cat)


@pytest.mark.postgres
def test_a_format_2_postgresql_catalog_is_migrated_and_reads_the_same(
    tmp_path: Path, pg_server: PostgresServer
) -> None:
    dump = json.loads((FIXTURE / "postgresql.json").read_text())
    url = pg_server.create_database(f"mere_format2_{os.getpid()}")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        for statement in dump["ddl"]:
            conn.exec_driver_sql(statement)
        for table, rows in dump["rows"].items():
            if rows:
                t = sa.Table(table, sa.MetaData(), autoload_with=conn)
                conn.execute(t.insert(), rows)
        for table in ("mere_tables", "mere_files"):
            conn.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"
            )
    engine.dispose()
    cat = mere.connect(str(_old_warehouse(tmp_path)), catalog=url)
    assert cat.sql.format_version() == 2
    _check_migrated_catalog(cat)
    assert cat.sql.format_version() == CATALOG_FORMAT


def test_a_format_4_catalog_gains_the_consumers_table(tmp_path: Path) -> None:
    """A catalog of the mere before consumers (format 4: tags, no mere_consumers) migrates to format 5,
    keeping its tags, and then holds consumers."""
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("a.t", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1], "v": [1]}))
    t.tag("first")
    db = tmp_path / "wh" / "catalog.db"
    with sqlite3.connect(db) as conn:  # as format 4 left it
        conn.execute("DROP TABLE mere_consumers")
        conn.execute("DROP TABLE mere_transactions")
        conn.execute("UPDATE mere_catalog SET value = '4' WHERE key = 'format'")
    old = mere.connect(str(tmp_path / "wh"))
    assert old.sql.format_version() == 4
    assert old.upgrade() == [
        "format 5: add mere_consumers (change-feed consumers whose positions expire keeps)",
        "format 6: add mere_transactions (idempotency keys of catalog transactions)",
    ]
    assert old.sql.format_version() == CATALOG_FORMAT == 6
    t = old.table("a.t")
    assert t.tags() == {"first": 1}
    assert t.consumer("c", start_version=1).position == 1
    assert t.inspect.consumers()["name"].to_pylist() == ["c"]


def test_a_format_5_catalog_gains_the_transactions_table(tmp_path: Path) -> None:
    """A catalog of the mere before catalog transactions (format 5) migrates to format 6 on connect, and
    then commits catalog transactions with idempotency keys."""
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    t = cat.create_table("a.t", schema, primary_key="id")
    t.upsert(pa.table({"id": [1], "v": [1]}))
    with sqlite3.connect(tmp_path / "wh" / "catalog.db") as conn:  # as format 5 left it
        conn.execute("DROP TABLE mere_transactions")
        conn.execute("UPDATE mere_catalog SET value = '5' WHERE key = 'format'")
    old = mere.connect(str(tmp_path / "wh"))
    assert old.sql.format_version() == 5
    with old.transaction(idempotency_key="k") as tx:  # connecting migrates it
        tx.table("a.t").upsert(pa.table({"id": [2], "v": [2]}))
    assert old.sql.format_version() == CATALOG_FORMAT == 6
    assert old.table("a.t").version == 2
    with old.transaction(idempotency_key="k") as tx:
        tx.table("a.t").upsert(pa.table({"id": [3], "v": [3]}))
    assert tx.results["a.t"].already_committed and old.table("a.t").version == 2


def test_a_catalog_newer_than_this_mere_is_refused_and_left_alone(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    cat.create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
    db = tmp_path / "wh" / "catalog.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE mere_catalog SET value = ? WHERE key = 'format'", (str(CATALOG_FORMAT + 1),))
    newer = mere.connect(str(tmp_path / "wh"))
    for call in (
        lambda: newer.table("a.t"),
        newer.tables,
        lambda: newer.create_table("a.u", pa.schema([("x", pa.int8())])),
    ):
        with pytest.raises(errors.CatalogError, match="newer than this mere"):
            call()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM mere_catalog").fetchone() == (str(CATALOG_FORMAT + 1),)
        assert conn.execute("SELECT count(*) FROM mere_tables").fetchone() == (1,)


def test_a_spec_of_a_newer_format_is_refused(local_cat: mere.Catalog) -> None:
    t = local_cat.create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
    spec = json.loads(t.record.spec)
    spec["format"] = 99
    engine = sa.create_engine(local_cat.sql.url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE mere_tables SET spec = ?", (json.dumps(spec),))
    engine.dispose()
    with pytest.raises(errors.CatalogError, match="spec format 99"):
        local_cat.table("a.t")


def test_a_corrupt_catalog_file_raises_catalog_error(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1]}))
    t = pickle.loads(pickle.dumps(t))  # a handle that has not connected yet (pooled connections cache pages)
    db = tmp_path / "wh" / "catalog.db"
    for extra in ("-wal", "-shm"):
        if os.path.exists(f"{db}{extra}"):
            os.remove(f"{db}{extra}")
    db.write_bytes(b"this is not a database" * 100)
    fresh = mere.connect(str(tmp_path / "wh"))
    for i, call in enumerate(
        (lambda: fresh.table("a.t"), fresh.tables, lambda: t.version, t.history, t.scan)
    ):
        with pytest.raises(errors.CatalogError) as info:
            call()
            pytest.fail(f"call {i} did not raise")
        assert info.value.__cause__ is not None  # the database's own error stays chained


def test_workers_that_read_or_stage_never_import_sqlalchemy(local_cat: mere.Catalog) -> None:
    t = local_cat.create_table(
        "a.t", pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key="id", buckets=2
    )
    t.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    payload = pickle.dumps((t, t.scan().tasks()))
    code = textwrap.dedent("""
        import pickle, sys
        import pyarrow as pa
        table, tasks = pickle.loads(sys.stdin.buffer.read())
        rows = sum(b.num_rows for task in tasks for b in task.read())
        staged = table.stage(pa.table({"id": [4], "v": ["d"]}))
        assert rows == 3 and staged.rows == 1, (rows, staged)
        print("sqlalchemy" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, check=True)
    assert out.stdout.decode().strip() == "False", out.stderr.decode()


def test_results_and_snapshots_are_typed(local_cat: mere.Catalog) -> None:
    t = local_cat.create_table(
        "a.t", pa.schema([("id", pa.int64()), ("day", pa.string())]), primary_key="id", partition_by="day"
    )
    first = t.upsert(pa.table({"id": [1, 2], "day": ["x", "y"]}))
    assert isinstance(first, mere.CommitResult)
    assert (first.version, first.operation, first.rows_written, first.files_added) == (1, "upsert", 2, 2)
    gone = t.delete("id = 1")
    assert gone.rows_deleted == 1 and gone.rows_written == 0
    snap = t.current_snapshot()
    assert isinstance(snap, mere.Snapshot) and snap.version == 2 and snap.parent == 1
    assert snap.committed_at == gone.committed_at and snap.committed_at.tzinfo is not None
    assert t.snapshot(version=1).operation == "upsert"
    assert t.snapshot(as_of=snap.committed_at).version == 2
    with pytest.raises(errors.NoSuchVersion):
        t.snapshot(version=7)
    snaps = t.inspect.snapshots()
    assert snaps.column("version").to_pylist() == [0, 1, 2]
    assert snaps.column("parent").to_pylist() == [None, 0, 1]
    assert snaps.schema.field("committed_at").type == pa.timestamp("us", tz="UTC")
    assert t.inspect.files().num_rows == t.files().num_rows == 3
    scan = t.scan()
    t.set_properties({"team": "x"})
    defaults = default_properties(True)
    assert scan.snapshot().version == 2 and scan.spec.properties == defaults
    assert t.spec.properties == defaults | {"team": "x"}
    text = repr(t)
    assert "version=3" in text and "partition_by=['day']" in text and "primary_key=['id']" in text


def test_refresh_sees_another_handles_property_change(local_cat: mere.Catalog) -> None:
    t = local_cat.create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
    other = local_cat.table("a.t")
    result = t.set_properties({"write.compression": "snappy", "team": "x"})
    assert result.operation == "set-properties" and result.files_added == 0
    defaults = default_properties(True)
    assert t.properties == defaults | {"write.compression": "snappy", "team": "x"}  # this handle at once
    assert other.properties == defaults
    assert other.refresh() is other and other.properties == t.properties
    t.set_properties({"team": None})
    assert local_cat.table("a.t").properties == defaults | {"write.compression": "snappy"}
    assert t.snapshot(version=1).summary["properties"] == defaults | {
        "write.compression": "snappy",
        "team": "x",
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"write.compresion": "zstd"},
        {"read.window-bytes": "8 mebibytes"},
        {},
        None,
        {"write.compression": "lzma"},
        {5: "x"},
    ],
)
def test_bad_properties_change_nothing(local_cat: mere.Catalog, bad: Any) -> None:
    t = local_cat.create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
    with pytest.raises(errors.InvalidInput):
        t.set_properties(bad)
    assert t.version == 0 and local_cat.table("a.t").properties == default_properties(True)
    with pytest.raises(errors.InvalidInput):
        local_cat.create_table("a.u", pa.schema([("id", pa.int64())]), properties=bad or {"read.x": "1"})
    assert local_cat.tables() == ["a.t"]


@pytest.mark.postgres
def test_a_commit_whose_connection_dies_before_it_lands_is_retried_once(
    tmp_path: Path, pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mere.catalog.sql import SqlCatalog

    url = pg_server.create_database(f"mere_lost_{os.getpid()}")
    cat = mere.connect(str(tmp_path / "wh"), catalog=url)
    t = cat.create_table("a.t", pa.schema([("id", pa.int64()), ("q", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "q": [1, 50]}))
    original = SqlCatalog._changes_since
    killed: list[int] = []

    def dying(self: SqlCatalog, conn: Any, *args: Any) -> Any:
        if not killed:  # the server drops this session in the middle of the commit transaction
            killed.append(1)
            conn.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")
        return original(self, conn, *args)

    monkeypatch.setattr(SqlCatalog, "_changes_since", dying)
    tx = t.transaction()
    tx.delete("q > 10")  # reads at version 1 ...
    cat.table("a.t").upsert(pa.table({"id": [3], "q": [3]}))  # ... so the commit must look at version 2
    result = tx.commit()
    assert killed and result.version == 3 and result.operation == "delete"
    assert [s.operation for s in t.history()] == ["create", "upsert", "upsert", "delete"]
    assert sorted(r["id"] for r in t.to_arrow().to_pylist()) == [1, 3]


def test_commit_failed_is_a_catalog_error_that_says_nothing_changed() -> None:
    assert issubclass(errors.CommitFailed, errors.CatalogError)
    assert "nothing changed" in (errors.CommitFailed.__doc__ or "")
