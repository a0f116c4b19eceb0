"""Catalog-level behaviour over both backends (SQLite and PostgreSQL via the ``cat`` fixture).

Namespaces, listing, dropping, table names, racing creates, reconnecting, and idempotent writes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere import errors
from mere.spec import default_properties

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("note", pa.string())])
EVENTS = pa.schema([("ts", pa.int64()), ("note", pa.string())])


def make(cat: mere.Catalog, name: str, **kwargs: Any) -> mere.Table:
    kwargs.setdefault("primary_key", ["id"])
    kwargs.setdefault("merge_operators", {"qty": "sum"})
    return cat.create_table(name, SCHEMA, **kwargs)


def rows(ids: list[int], qty: int = 1) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "qty": pa.array([qty] * len(ids), pa.int64())})


def content(t: mere.Table) -> dict[int, Any]:
    return {r["id"]: r["qty"] for r in t.to_arrow().to_pylist()}


def reconnect(cat: mere.Catalog) -> mere.Catalog:
    return mere.connect(cat.storage.uri, catalog=cat.sql.url)


def run_together(n: int, fn: Callable[[int], Any]) -> list[tuple[str, Any]]:
    """Run fn(0..n-1) in threads released at the same moment; collect ("ok", value) or ("error", exc)."""
    barrier = threading.Barrier(n)
    results: list[tuple[str, Any]] = [("missing", None)] * n

    def work(i: int) -> None:
        barrier.wait()
        try:
            results[i] = ("ok", fn(i))
        except BaseException as e:
            results[i] = ("error", e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads)
    return results


# -- namespaces and listing ------------------------------------------------------------------------------


def test_empty_catalog(cat: mere.Catalog) -> None:
    assert cat.tables() == []
    assert cat.tables("sales") == []
    assert cat.namespaces() == []
    with pytest.raises(KeyError):
        cat.table("sales.orders")
    assert "Catalog(" in repr(cat)


def test_namespaces_and_listing(cat: mere.Catalog) -> None:
    make(cat, "sales.orders")
    make(cat, "sales.returns")
    make(cat, "hr.people")
    cat.create_table("plain", EVENTS)
    assert cat.tables() == ["default.plain", "hr.people", "sales.orders", "sales.returns"]
    assert cat.tables("sales") == ["sales.orders", "sales.returns"]
    assert cat.tables("hr") == ["hr.people"]
    assert cat.tables("default") == ["default.plain"]
    assert cat.tables("nowhere") == []
    assert cat.namespaces() == ["default", "hr", "sales"]
    # A bare name lives in the default namespace and can be spelled either way.
    assert cat.table("plain").name == "default.plain"
    assert cat.table("default.plain").location == cat.table("plain").location
    # Names are exact: case matters and tables with the same short name in two namespaces are distinct.
    make(cat, "hr.orders")
    assert cat.table("hr.orders").location != cat.table("sales.orders").location
    with pytest.raises(KeyError):
        cat.table("Sales.Orders")
    # Dotted namespaces: the last dot separates the table name.
    t = make(cat, "a.b.c")
    assert t.name == "a.b.c"
    assert "a.b" in cat.namespaces()
    assert cat.tables("a.b") == ["a.b.c"]


def test_tables_are_independent(cat: mere.Catalog) -> None:
    a = make(cat, "sales.a")
    b = make(cat, "sales.b")
    a.upsert(rows([1, 2]))
    b.upsert(rows([2, 3], qty=5))
    a.upsert(rows([2]))
    assert content(a) == {1: 1, 2: 2}
    assert content(b) == {2: 5, 3: 5}
    assert a.version == 2 and b.version == 1
    assert not set(a.files().column("path").to_pylist()) & set(b.files().column("path").to_pylist())
    assert a.location != b.location


def test_invalid_names_are_rejected(cat: mere.Catalog) -> None:
    for name in ["", "  ", "a/b", "ns/x.t", "_t", "ns._t", "_ns.t", "ns.", None, 3]:
        with pytest.raises(errors.InvalidInput):
            cat.create_table(name, SCHEMA, primary_key=["id"])
        with pytest.raises(errors.InvalidInput):
            cat.table(name)
    assert cat.tables() == []


def test_names_cannot_escape_the_warehouse(cat: mere.Catalog, tmp_path: Path) -> None:
    """Whatever the name, a table's files stay inside the warehouse directory."""
    warehouse = os.path.realpath(cat.storage.root)
    for name in ["...t", "...", "...x.y", "a/../../t", "..", "..x"]:
        try:
            t = cat.create_table(name, SCHEMA, primary_key=["id"])
        except errors.InvalidInput:
            continue
        t.upsert(rows([1]))
        for rel in t.files().column("path").to_pylist():
            full = os.path.realpath(t.storage.full_path(rel))
            assert full.startswith(warehouse + os.sep), (name, full)
    outside = [p for p in tmp_path.rglob("*.parquet") if not str(p.resolve()).startswith(warehouse + os.sep)]
    assert outside == []


# -- missing tables --------------------------------------------------------------------------------------


def test_missing_tables(cat: mere.Catalog) -> None:
    make(cat, "sales.orders")
    cat.create_table("plain", EVENTS)
    for name in ("sales.nope", "nope", "default.nope"):
        with pytest.raises(errors.NoSuchTable) as info:
            cat.table(name)
        assert isinstance(info.value, KeyError)
        assert isinstance(info.value, mere.MereError)
        with pytest.raises(errors.NoSuchTable):
            cat.drop_table(name)
        assert cat.exists(name) is False
    assert cat.exists("sales.orders") is True


def test_exists_in_unknown_namespace(cat: mere.Catalog) -> None:
    """exists() answers False for any missing table, also in a namespace nobody has used yet."""
    assert cat.exists("nowhere.orders") is False
    make(cat, "sales.orders")
    assert cat.exists("nowhere.orders") is False


def test_table_in_unknown_namespace_is_a_key_error(cat: mere.Catalog) -> None:
    with pytest.raises(KeyError) as info:
        cat.table("nowhere.orders")
    assert isinstance(info.value, errors.CatalogError)
    with pytest.raises(errors.NoSuchTable):
        cat.drop_table("nowhere.orders")


# -- drop ------------------------------------------------------------------------------------------------


def test_drop_and_recreate(cat: mere.Catalog) -> None:
    t = make(cat, "sales.orders")
    t.upsert(rows([1, 2]))
    keep = make(cat, "sales.keep")
    keep.upsert(rows([9]))
    paths = t.files().column("path").to_pylist()
    cat.drop_table("sales.orders")
    assert cat.tables() == ["sales.keep"]
    assert "sales" in cat.namespaces()  # the namespace stays
    # Without purge the files stay (another reader may still be reading them).
    assert all(os.path.exists(t.storage.full_path(p)) for p in paths)
    with pytest.raises(errors.NoSuchTable):
        t.version  # noqa: B018 - the dropped table's handle knows it is gone
    with pytest.raises(errors.NoSuchTable):
        t.upsert(rows([3]))
    again = make(cat, "sales.orders", merge_operators={})
    assert again.version == 0
    assert content(again) == {}
    again.upsert(rows([5], qty=7))
    again.upsert(rows([5], qty=8))
    assert content(again) == {5: 8}  # the new spec (no sum) applies
    assert content(keep) == {9: 1}
    assert [c.version for c in again.history()] == [0, 1, 2]
    # A handle to the dropped table must not see or touch the new table of the same name.
    with pytest.raises(errors.NoSuchTable):
        t.upsert(rows([3]))
    with pytest.raises(errors.NoSuchTable):
        t.to_arrow()
    assert content(again) == {5: 8}


def test_drop_purge(cat: mere.Catalog) -> None:
    t = make(cat, "sales.orders")
    t.upsert(rows([1, 2]))
    t.upsert(rows([3]))
    keep = make(cat, "sales.keep")
    keep.upsert(rows([1]))
    location = t.storage.full_path(t.location)
    assert os.path.isdir(location)
    cat.drop_table("sales.orders", purge=True)
    assert t.storage.list_files(t.location) == []
    assert content(keep) == {1: 1}
    assert all(os.path.exists(keep.storage.full_path(p)) for p in keep.files().column("path").to_pylist())


# -- concurrency -----------------------------------------------------------------------------------------


def test_concurrent_create_of_the_same_name(cat: mere.Catalog) -> None:
    for attempt in range(3):
        name = f"race.t{attempt}"
        other = reconnect(cat)
        cats = [cat, other]
        results = run_together(2, lambda i, cats=cats, name=name: make(cats[i], name, buckets=2 + i))
        winners = [v for kind, v in results if kind == "ok"]
        losers = [v for kind, v in results if kind == "error"]
        assert len(winners) == 1, results
        assert len(losers) == 1 and isinstance(losers[0], errors.TableExists), results
        loaded = cat.table(name)
        assert loaded.location == winners[0].location
        assert loaded.spec.buckets == winners[0].spec.buckets
        assert cat.tables("race").count(name) == 1


def test_concurrent_create_with_exist_ok(cat: mere.Catalog) -> None:
    other = reconnect(cat)
    cats = [cat, other, reconnect(cat)]
    results = run_together(3, lambda i: make(cats[i], "race.ok", exist_ok=True))
    assert all(kind == "ok" for kind, _ in results), results
    assert len({t.location for _, t in results}) == 1
    assert cat.tables() == ["race.ok"]


def test_concurrent_creates_of_different_names_in_a_new_namespace(cat: mere.Catalog) -> None:
    other = reconnect(cat)
    cats = [cat, other, reconnect(cat), reconnect(cat)]
    results = run_together(4, lambda i: make(cats[i], f"fresh.t{i}"))
    assert all(kind == "ok" for kind, _ in results), results
    assert cat.tables("fresh") == [f"fresh.t{i}" for i in range(4)]
    assert cat.namespaces() == ["fresh"]


# -- reconnect -------------------------------------------------------------------------------------------


def test_catalog_survives_reconnect(cat: mere.Catalog) -> None:
    t = make(cat, "sales.orders", partition_by=None, buckets=4, properties={"owner": "ops"})
    t.upsert(rows([1, 2]))
    t.upsert(rows([2], qty=5))
    cat.create_table("logs.events", EVENTS).append(pa.table({"ts": [1], "note": ["x"]}))

    again = reconnect(cat)
    assert again.tables() == ["logs.events", "sales.orders"]
    assert again.namespaces() == ["logs", "sales"]
    loaded = again.table("sales.orders")
    assert loaded.spec == t.spec
    assert loaded.spec.properties == default_properties(True) | {"owner": "ops"}
    assert loaded.version == 2
    assert [c.operation for c in loaded.history()] == ["create", "upsert", "upsert"]
    assert content(loaded) == {1: 1, 2: 6}
    assert content(loaded) == content(t)
    # Writes through either connection are visible through the other.
    loaded.upsert(rows([3]))
    assert content(t) == {1: 1, 2: 6, 3: 1}
    assert t.version == 3
    t.delete("id = 1")
    assert content(loaded) == {2: 6, 3: 1}
    assert again.table("logs.events").to_arrow().to_pylist() == [{"ts": 1, "note": "x"}]


def test_embedded_catalog_survives_reconnect(local_cat: mere.Catalog) -> None:
    t = make(local_cat, "sales.orders")
    t.upsert(rows([1, 2], qty=3))
    assert os.path.exists(os.path.join(local_cat.storage.root, "catalog.db"))
    again = mere.connect(local_cat.storage.uri)
    assert again.tables() == ["sales.orders"]
    assert content(again.table("sales.orders")) == {1: 3, 2: 3}


# -- idempotency -----------------------------------------------------------------------------------------


def test_idempotency_key_applies_once(cat: mere.Catalog) -> None:
    t = make(cat, "sales.orders")
    first = t.upsert(rows([1, 2], qty=5), idempotency_key="batch-1")
    second = t.upsert(rows([1, 2], qty=5), idempotency_key="batch-1")
    assert second.version == first.version == 1
    assert (
        not first.already_committed
        and second.already_committed
        and second.rows_written == first.rows_written == 2
    )
    assert t.version == 1
    assert content(t) == {1: 5, 2: 5}  # the sum is not doubled
    # Another key applies; reusing the first key later still does nothing, even with other data.
    t.upsert(rows([1], qty=1), idempotency_key="batch-2")
    again = t.upsert(rows([7], qty=100), idempotency_key="batch-1")
    assert again.version == 1
    assert content(t) == {1: 6, 2: 5}
    assert [c.version for c in t.history()] == [0, 1, 2]
    # The key is remembered across connections.
    other = reconnect(cat).table("sales.orders")
    assert other.upsert(rows([1, 2], qty=5), idempotency_key="batch-1").version == 1
    assert content(other) == {1: 6, 2: 5}
    # Writes without a key always apply.
    t.upsert(rows([1], qty=1))
    t.upsert(rows([1], qty=1))
    assert content(t)[1] == 8


def test_idempotency_keys_are_per_table(cat: mere.Catalog) -> None:
    a = make(cat, "sales.a")
    b = make(cat, "sales.b")
    a.upsert(rows([1], qty=2), idempotency_key="k")
    b.upsert(rows([1], qty=3), idempotency_key="k")
    assert content(a) == {1: 2}
    assert content(b) == {1: 3}
    log = cat.create_table("logs.events", EVENTS)
    log.append(pa.table({"ts": [1], "note": ["x"]}), idempotency_key="k")
    log.append(pa.table({"ts": [1], "note": ["x"]}), idempotency_key="k")
    assert log.to_arrow().num_rows == 1
    assert log.version == 1


def test_idempotency_key_under_concurrent_retries(cat: mere.Catalog) -> None:
    t = make(cat, "sales.orders")
    t.upsert(rows([1], qty=1))
    handles = [reconnect(cat).table("sales.orders") for _ in range(4)]
    results = run_together(4, lambda i: handles[i].upsert(rows([1, 2], qty=10), idempotency_key="retry"))
    assert all(kind == "ok" for kind, _ in results), results
    assert len({r.version for _, r in results}) == 1
    assert sum(not r.already_committed for _, r in results) == 1  # exactly one handle wrote it
    assert t.version == 2
    assert content(t) == {1: 11, 2: 10}


def test_failed_write_does_not_consume_the_idempotency_key(cat: mere.Catalog) -> None:
    t = make(cat, "sales.orders")
    with pytest.raises(errors.NullKey):
        t.upsert(pa.table({"id": pa.array([None], pa.int64()), "qty": [1]}), idempotency_key="k")
    assert t.version == 0
    t.upsert(rows([1], qty=4), idempotency_key="k")
    assert content(t) == {1: 4}
    assert t.version == 1


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:hunter2-secret@db:notaport/lake",
        "postgres://app:hunter2-secret@db:54x2/lake",
    ],
)
def test_malformed_catalog_url_is_typed_and_hides_the_password(tmp_path: Path, url: str) -> None:
    with pytest.raises(mere.errors.InvalidInput) as info:
        mere.connect(str(tmp_path / "wh"), catalog=url)
    assert "hunter2-secret" not in str(info.value) and "***" in str(info.value)
    assert not (tmp_path / "wh").exists()


def test_relative_paths_survive_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Engine workers open a pickled catalog, table or scan task from another directory."""
    import pickle

    monkeypatch.chdir(tmp_path)
    for catalog in (None, "sqlite:///cat.db", "side.db"):
        cat = mere.connect(f"wh-{catalog is None}", catalog=catalog)
        t = cat.create_table(
            f"a.t{abs(hash(catalog)) % 1000}", pa.schema([("id", pa.int64())]), primary_key="id"
        )
        t.upsert(pa.table({"id": [1, 2]}))
        shipped = pickle.dumps((cat, t, t.scan().tasks()))
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(exist_ok=True)
        monkeypatch.chdir(elsewhere)
        cat2, t2, tasks = pickle.loads(shipped)
        assert t2.scan().count() == 2 and cat2.table(t.name).version == 1
        assert sum(b.num_rows for task in tasks for b in task.read()) == 2
        assert list(elsewhere.iterdir()) == []  # nothing created in the worker's directory
        monkeypatch.chdir(tmp_path)


def test_reads_leave_files_that_hold_no_catalog_untouched(tmp_path: Path) -> None:
    """An empty file or another program's SQLite database given as the catalog: a read finds no catalog
    and writes nothing into it (opening once switched the file to WAL mode, or wrote a header)."""
    import sqlite3

    empty, foreign = tmp_path / "empty.db", tmp_path / "foreign.db"
    empty.touch()
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE t (a)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    for path in (empty, foreign):
        cat = mere.connect(tmp_path / "wh", path)
        assert cat.tables() == [] and not cat.initialized and not cat.exists("a.b")
        with pytest.raises(errors.NoSuchTable):
            cat.table("a.b")
    assert empty.stat().st_size == 0 and foreign.read_bytes() == before
    assert not (tmp_path / "wh").exists()
    cat = mere.connect(tmp_path / "wh", empty)  # a write makes the empty file a catalog, in WAL mode
    cat.create_table("a.b", pa.schema([("id", pa.int64())]), primary_key="id")
    assert cat.initialized and sqlite3.connect(empty).execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize(
    "catalog",
    ["sqlite://", "sqlite:///:memory:", "host=h user=u password=SECRET-PW dbname=d", "dbname=d"],
)
def test_catalogs_mere_cannot_keep_are_refused(tmp_path: Path, catalog: str) -> None:
    with pytest.raises(errors.InvalidInput) as e:
        mere.connect(tmp_path / "wh", catalog)
    assert "SECRET-PW" not in str(e.value)
    assert not (tmp_path / "wh").exists()
    # A path may hold '=' (a folder named like a partition): it is still a path.
    assert not mere.connect(tmp_path / "wh", tmp_path / "day=1" / "catalog.db").initialized


def test_a_conditional_drop_drops_only_an_unchanged_table(cat: mere.Catalog) -> None:
    # What a failed Spark write that created a table does: drop it only if nothing committed to it since.
    t = cat.create_table("n.made", pa.schema([("id", pa.int64())]), primary_key="id")
    created = t.version
    t.upsert(pa.table({"id": [1]}))
    assert not cat.drop_if_unchanged(t, created)  # a commit landed: the table stays, rows and all
    assert cat.table("n.made").to_arrow().num_rows == 1
    assert cat.drop_if_unchanged(t, t.version)
    assert "n.made" not in cat.tables()


@pytest.mark.postgres
def test_a_write_waits_out_a_catalog_server_restart(tmp_path: Path) -> None:
    """The PostgreSQL catalog goes down for two seconds and comes back on the same port: a write made while
    it is down waits and lands (nothing had been sent), instead of failing with ``CatalogError``."""
    from services import PostgresServer

    with PostgresServer() as server:
        url = server.create_database("restart")
        t = mere.connect(str(tmp_path / "w"), catalog=url).create_table(
            "s.t", pa.schema([("k", pa.int64()), ("v", pa.string())]), primary_key="k"
        )
        t.upsert(pa.table({"k": [1], "v": ["before"]}))
        down = threading.Event()
        restart = threading.Thread(target=lambda: (down.set(), server.restart(down_seconds=2.0)))
        restart.start()
        down.wait()
        import time

        time.sleep(1.0)  # pg_ctl stop -m fast is done by now: the pooled connections are dead
        result = t.upsert(pa.table({"k": [2], "v": ["during"]}))
        restart.join()
        assert result.version == 2
        assert sorted(r["v"] for r in t.refresh().to_arrow().to_pylist()) == ["before", "during"]


def test_an_unreachable_catalog_fails_at_once(tmp_path: Path) -> None:
    """Only a server that answered before is waited for: a wrong address is reported without delay."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket closes
    started = time.monotonic()
    with pytest.raises(errors.CatalogError):
        mere.connect(str(tmp_path / "w"), catalog=f"postgresql://postgres@127.0.0.1:{port}/none").namespaces()
    assert time.monotonic() - started < 5.0
