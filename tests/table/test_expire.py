"""Expiring old versions deletes only files no kept version needs, on both catalog backends."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest

import mere
from mere import errors

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def files_on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def test_expire_keeps_recent_versions_and_deletes_unneeded_files(cat: mere.Catalog) -> None:
    t = cat.create_table("x.t", SCHEMA, primary_key=["id"], buckets=2)
    for i in range(4):
        t.upsert(pa.table({"id": [1, 2, 3], "v": [i, i, i]}))
    assert t.compact() is not None  # version 5 replaces the files of versions 1-4
    t.upsert(pa.table({"id": [4], "v": [9]}))
    expected = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    at_v2 = t.scan(version=2).to_arrow().num_rows
    before = files_on_disk(t)

    assert t.expire(older_than=dt.timedelta(days=1), dry_run=False) == []  # nothing is a day old
    assert t.scan(version=2).to_arrow().num_rows == at_v2

    deleted = t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert deleted and set(deleted) <= before
    assert not any(os.path.exists(t.storage.full_path(p)) for p in deleted)
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    with pytest.raises(errors.NoSuchVersion):
        t.scan(version=2)
    assert [c.version for c in t.history()] == list(range(7))  # history itself is kept
    t.upsert(pa.table({"id": [5], "v": [5]}))  # writes go on
    assert t.to_arrow().num_rows == 5
    assert (
        t.expire(older_than=dt.timedelta(0), dry_run=False) == []
    )  # idempotent: compaction inputs are gone already


def test_a_read_that_expire_overtook_raises_no_such_version(
    cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scans planned (or files listed) before expire gave their version up: NoSuchVersion, never a partial
    or empty result (the file listing once returned what rows were left) nor a bare StorageError. Found
    by an adversarial review racing readers against expire."""
    t = cat.create_table(
        "exp.race", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id", buckets=2
    )
    t.upsert(pa.table({"id": [1, 2], "v": [1, 2]}))  # v1
    t.upsert(pa.table({"id": [1, 3], "v": [10, 3]}))  # v2
    t.compact()  # v3 replaces the files of v1 and v2
    old, then_current = t.scan(version=1), t.scan()
    t.upsert(pa.table({"id": [4], "v": [4]}))
    t.compact()  # v5 replaces v3's files
    assert t.expire(older_than=dt.timedelta(0), dry_run=False)
    for scan in (old, then_current):
        with pytest.raises(errors.NoSuchVersion):
            scan.to_arrow()
    with pytest.raises(errors.NoSuchVersion):
        t.files_at(1)
    assert t.expire(older_than=dt.timedelta(0), dry_run=True) == []  # a second expire lists nothing
    # Files deleted between planning and reading: the read names the expired version.
    t.upsert(pa.table({"id": [5], "v": [5]}))  # v6
    t.compact()  # v7
    planned = t.scan(version=6)
    splits = planned._plan(mere.table.scan.Explain(6))
    monkeypatch.setattr(type(planned), "_plan", lambda self, explain: splits)
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    with pytest.raises(errors.NoSuchVersion, match="expired while it was being read"):
        planned.to_arrow()
    monkeypatch.undo()
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_a_commit_of_staged_files_a_cleanup_took_is_refused(cat: mere.Catalog) -> None:
    """A long job's staged files are older than a cleanup's cutoff: committing them would leave a table
    that cannot be read, so the commit fails and changes nothing (it used to land). Found by review."""
    t = cat.create_table("exp.staged", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1], "v": [1]}))
    staged = t.stage(pa.table({"id": [2, 3], "v": [2, 3]}))
    kept = t.stage(pa.table({"id": [4], "v": [4]}))
    assert sorted(t.cleanup(older_than=dt.timedelta(0), dry_run=False)) == sorted(
        f.path for s in (staged, kept) for f in s.files
    )
    before = (t.version, t.to_arrow())
    with pytest.raises(errors.CommitFailed, match="no longer exist"):
        t.commit([staged])
    assert (t.version, t.to_arrow()) == before
    fresh = t.stage(pa.table({"id": [2], "v": [2]}))
    t.commit([fresh])
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2]


def test_a_write_that_outlived_a_cleanup_is_refused_and_the_table_stays_readable(cat: mere.Catalog) -> None:
    """A cleanup whose ``older_than`` is shorter than a write takes may delete that write's files before
    they are committed (the soak found a committed version whose file was gone). The cleanup fences the
    table first: the write is then refused with ``OutlivedCleanup`` and nothing changes."""
    t = cat.create_table("exp.fence", SCHEMA, primary_key="id", buckets=2)
    t.upsert(pa.table({"id": [1], "v": [1]}))
    other = mere.connect(cat.storage.uri, catalog=cat.sql.url).table("exp.fence")
    before = (t.version, t.to_arrow())
    with pytest.raises(errors.OutlivedCleanup, match="older_than"), t.transaction() as tx:
        tx.upsert(pa.table({"id": [2, 3], "v": [2, 3]}))
        removed = other.cleanup(older_than=dt.timedelta(0), dry_run=False)
        assert removed  # the transaction's files, written and not yet committed
    t = t.refresh()
    assert (t.version, t.to_arrow()) == before
    for version in range(t.version + 1):
        t.scan(version=version).to_arrow()  # every version readable
    # A write begun after the cleanup lands, and a cleanup with a long age refuses nothing.
    with t.transaction() as tx:
        tx.upsert(pa.table({"id": [2], "v": [2]}))
        other.cleanup(older_than=dt.timedelta(hours=1), dry_run=False)
    assert sorted(t.refresh().to_arrow().column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    "skew_s", [10, -10, 14 * 60, -3600], ids=["ahead-10s", "behind-10s", "ahead-14m", "behind-1h"]
)
def test_the_cleanup_fence_holds_whatever_the_writer_clock(
    cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch, skew_s: int
) -> None:
    """The fence compares the store's times where clocks could mislead it: a writer whose clock is off
    (by up to ``CLOCK_MARGIN_MICROS`` ahead, or any amount behind) is refused when a cleanup took its
    files, and lands when the cleanup ran before it began (a clock behind once refused that)."""
    import time

    import mere.table.commit as commit_module

    t = cat.create_table("exp.skew", SCHEMA, primary_key="id", buckets=2)
    t.upsert(pa.table({"id": [1], "v": [1]}))
    other = mere.connect(cat.storage.uri, catalog=cat.sql.url).table("exp.skew")
    real_now = commit_module.now_micros
    monkeypatch.setattr(commit_module, "now_micros", lambda: real_now() + skew_s * 1_000_000)
    before = (t.version, t.to_arrow())
    with pytest.raises(errors.OutlivedCleanup), t.transaction() as tx:
        tx.upsert(pa.table({"id": [2, 3], "v": [2, 3]}))
        assert other.cleanup(older_than=dt.timedelta(0), dry_run=False)  # took the files just written
    t = t.refresh()
    assert (t.version, t.to_arrow()) == before
    time.sleep(0.05)  # past the cleanup's cutoff by the file system's clock too
    t.upsert(pa.table({"id": [4], "v": [4]}))  # begun after the cleanup: lands
    assert sorted(t.refresh().to_arrow().column("id").to_pylist()) == [1, 4]
    for version in range(t.version + 1):
        t.scan(version=version).to_arrow()


def test_a_staged_write_that_outlived_a_cleanup_is_refused(cat: mere.Catalog) -> None:
    t = cat.create_table("exp.fence_staged", SCHEMA, primary_key="id", buckets=2)
    staged = t.stage(pa.table({"id": [1], "v": [1]}))
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    again = t.stage(pa.table({"id": [2], "v": [2]}))  # staged after the cleanup: lands
    t.commit([again])
    with pytest.raises(errors.CommitFailed):  # its files are gone (or may be): refused
        t.commit([staged])
    assert t.to_arrow().column("id").to_pylist() == [2]


def test_a_rollback_right_after_a_cleanup_lands(cat: mere.Catalog) -> None:
    """A rollback adds an older version's files again, which no cleanup takes: the fence does not refuse
    it, however recent the cleanup (its files are far older than the cutoff)."""
    t = cat.create_table("exp.rollback_fence", SCHEMA, primary_key="id", buckets=2)
    t.upsert(pa.table({"id": [1], "v": [1]}))
    t.upsert(pa.table({"id": [1], "v": [2]}))
    assert t.compact() is not None  # version 3: the files of versions 1 and 2 are live at those only
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    t.rollback(1)  # brings version 1's file back
    assert t.to_arrow().to_pylist() == [{"id": 1, "v": 1}]
