"""Audit 46: behavioural claims of README.md and docs/*.md (Python API) checked against the code.

Strict xfails pin claims that are false or misleading as written (the reason quotes the doc and what
happens); the plain tests pin claims about refusals and data safety that were verified true.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import errors


def _cat(tmp_path: Path) -> mere.Catalog:
    return mere.connect(str(tmp_path / "wh"))


def _readable(t: mere.Table, version: int) -> bool:
    try:
        t.scan(version=version).count()
    except errors.NoSuchVersion:
        return False
    return True


# --- claims found false and fixed (docs mended, or byte-size properties read as options are) ----------


def test_readme_example_table_is_partition_scoped_as_the_readme_says(tmp_path: Path) -> None:
    """README: table-wide keys are the default except where a partition column is outside the key and an
    operator other than `last` would fold a moved key's row into its old one, as in its sales.orders."""
    schema = pa.schema(
        [("order_id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())]
    )
    t = _cat(tmp_path).create_table(
        "sales.orders",
        schema,
        primary_key=["order_id"],
        partition_by=["day"],
        buckets=8,
        merge_operators={"qty": "sum", "note": "concat:|"},
        cdc_column="op",
    )
    assert t.key_scope == "partition"
    t.upsert(pa.table({"order_id": [1], "day": ["2026-11-21"], "qty": [1], "note": ["a"]}))
    t.upsert(pa.table({"order_id": [1], "day": ["2026-11-22"], "qty": [2], "note": ["b"]}))
    assert sorted(t.to_arrow().column("day").to_pylist()) == ["2026-11-21", "2026-11-22"]
    plain = _cat(tmp_path).create_table("sales.plain", schema, primary_key=["order_id"], partition_by=["day"])
    assert plain.key_scope == "table"


def test_explicit_expire_goes_by_its_cutoff_alone(tmp_path: Path) -> None:
    """concepts.md: retention.min-versions is what the automatic expiry keeps; an explicit expire goes by
    its cutoff (the version current at it stays readable)."""
    t = _cat(tmp_path).create_table(
        "a.e", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id"
    )
    assert t.properties["retention.min-versions"] == "10"
    for i in range(5):
        t.upsert(pa.table({"id": [i], "n": [i]}))
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert [v for v in range(1, t.version + 1) if _readable(t, v)] == [t.version]
    assert t.scan().count() == 5


def test_byte_size_properties_read_as_options_do(tmp_path: Path) -> None:
    """Byte-size properties take 64k / 128m / 1MiB as options do, kept as numbers of bytes; switched ones
    take the on/off the properties table lists."""
    t = _cat(tmp_path).create_table("a.p", pa.schema([("id", pa.int64())]), primary_key="id")
    t.set_properties({"write.chunk-bytes": "1m", "read.window-bytes": "8MiB", "read.whole-split-bytes": "0"})
    assert {
        k: t.properties[k] for k in ("write.chunk-bytes", "read.window-bytes", "read.whole-split-bytes")
    } == {
        "write.chunk-bytes": str(1 << 20),
        "read.window-bytes": str(8 << 20),
        "read.whole-split-bytes": "0",
    }
    t.upsert(pa.table({"id": [1, 2]}))
    assert t.scan().count() == 2
    version = t.version
    for bad in ({"read.window-bytes": "0"}, {"write.chunk-bytes": "1.5m"}, {"changes.log": "yes"}):
        with pytest.raises(errors.InvalidInput, match="must be"):
            t.set_properties(bad)
    assert t.version == version


def test_keys_without_partition_columns_are_looked_up_and_counted(tmp_path: Path) -> None:
    """concepts.md / sql.md: a delete of keys without their partition columns (table-wide keys) looks
    them up, so rows_deleted counts the rows that existed; with every identity column it is blind (None)."""
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("n", pa.int64())])
    t = _cat(tmp_path).create_table("a.b", schema, primary_key="id", partition_by="day", buckets=4)
    t.upsert(pa.table({"id": [1, 2, 3], "day": ["a", "b", "c"], "n": [1, 2, 3]}))
    assert t.key_scope == "table"
    r = t.delete(pa.table({"id": [1, 99]}))
    assert (r.rows_deleted, r.no_change) == (1, False)
    before = t.version
    r = t.delete(pa.table({"id": [98]}))
    assert r.no_change and t.version == before
    r = t.delete(pa.table({"id": [2], "day": ["b"]}))
    assert r.rows_deleted is None and r.delete_markers == 1
    assert t.to_arrow().column("id").to_pylist() == [3]


def test_blind_delete_of_an_absent_key_writes_its_marker(tmp_path: Path) -> None:
    """README: a blind delete reads nothing, so it writes a marker for each key given, present or not."""
    t = _cat(tmp_path).create_table(
        "a.d", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": list(range(20)), "n": list(range(20))}))
    before = t.version
    r = t.delete(pa.table({"id": [12345]}))
    assert (r.no_change, r.delete_markers, t.version) == (False, 1, before + 1)
    assert t.scan().count() == 20


def test_a_zero_divisor_gives_null_as_documented(tmp_path: Path) -> None:
    """sql.md: `//` and `%` give NULL for a zero divisor (every branch is computed for every row, so a
    guarded CASE must not fail); DuckDB's default raises instead."""
    cat = _cat(tmp_path)
    t = cat.create_table("a.t", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "n": [7, 0]}))
    t.update(set={"n": "CASE WHEN n <> 0 THEN 14 // n ELSE -1 END"})
    assert sorted(t.to_arrow().column("n").to_pylist()) == [-1, 2]
    mere.sql("DELETE FROM a.t WHERE n // 0 IS NULL AND n % 0 IS NULL", catalog=cat)
    assert t.scan().count() == 0


# --- verified claims (refusals and data safety) ----------------------------------------------------


def test_first_row_refuses_every_delete_path(tmp_path: Path) -> None:
    """concepts.md:63: deletes on a first_row table are refused with InvalidInput before anything is written."""
    cat = _cat(tmp_path)
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("op", pa.string())])
    t = cat.create_table("a.first", schema, primary_key="id", merge_operators="first_row", cdc_column="op")
    t.upsert(pa.table({"id": [1, 1], "v": ["first", "second"], "op": ["I", "I"]}))
    before = t.version
    attempts = [
        lambda: t.upsert(pa.table({"id": [1], "v": [None], "op": ["D"]})),
        lambda: t.delete("id = 1"),
        lambda: t.delete(pa.table({"id": [1]})),
        lambda: t.merge(pa.table({"id": [1], "v": ["x"]})).when_matched_delete().execute(),
        lambda: mere.sql("DELETE FROM a.first WHERE id = 1", catalog=cat),
    ]
    for attempt in attempts:
        with pytest.raises(errors.InvalidInput):
            attempt()
    assert t.refresh().version == before
    assert t.to_arrow(columns=["v"]).to_pylist() == [{"v": "first"}]


def test_sequence_delete_by_filter_keeps_replays_deleted(tmp_path: Path) -> None:
    """concepts.md:166-172: a delete without a sequence writes its marker just above the version it read (a NUL
    appended to strings): a replay of that version stays deleted, a newer event brings the key back."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("seq", pa.string())])
    t = _cat(tmp_path).create_table("a.s", schema, primary_key="id", sequence_by="seq")
    t.upsert(pa.table({"id": [1], "v": ["a"], "seq": ["b"]}))
    t.delete("id = 1")
    t.upsert(pa.table({"id": [1], "v": ["replay"], "seq": ["b"]}))
    assert t.to_arrow().num_rows == 0
    t.compact()
    t.upsert(pa.table({"id": [1], "v": ["replay"], "seq": ["b"]}))
    assert t.to_arrow().num_rows == 0
    t.upsert(pa.table({"id": [1], "v": ["newer"], "seq": ["b\x01"]}))
    assert t.to_arrow(columns=["v"]).to_pylist() == [{"v": "newer"}]


def test_sequence_refusals_change_nothing(tmp_path: Path) -> None:
    """README.md:84-86 / concepts.md:153-165: NULL sequences (deletes too), sum/concat operators refused."""
    cat = _cat(tmp_path)
    schema = pa.schema(
        [("id", pa.int64()), ("v", pa.string()), ("n", pa.int64()), ("lsn", pa.int64()), ("op", pa.string())]
    )
    t = cat.create_table("a.seq", schema, primary_key="id", sequence_by="lsn", cdc_column="op")
    nulls = pa.array([None], pa.int64())
    with pytest.raises(errors.InvalidInput):
        t.upsert(pa.table({"id": [1], "v": ["a"], "n": [1], "lsn": nulls, "op": ["I"]}))
    with pytest.raises(errors.InvalidInput):
        t.upsert(pa.table({"id": [1], "lsn": nulls, "op": ["D"]}))
    with pytest.raises(errors.SchemaMismatch):
        t.upsert(pa.table({"id": [1], "v": ["a"], "n": [1], "op": ["I"]}))
    assert t.version == 0
    for ops in ({"n": "sum"}, {"v": "concat"}):
        with pytest.raises(errors.InvalidInput):
            cat.create_table("a.bad", schema, primary_key="id", sequence_by="lsn", merge_operators=ops)
    with pytest.raises(errors.NoSuchTable):
        cat.table("a.bad")


def test_table_wide_partial_move_refused(tmp_path: Path) -> None:
    """concepts.md:353: a partial row that would move a key is refused (InvalidInput, nothing committed)."""
    schema = pa.schema([("id", pa.int64()), ("status", pa.string()), ("v", pa.int64()), ("w", pa.string())])
    t = _cat(tmp_path).create_table("a.o", schema, primary_key="id", partition_by="status")
    t.upsert(pa.table({"id": [1], "status": ["open"], "v": [1], "w": ["a"]}))
    before = t.version
    with pytest.raises(errors.InvalidInput):
        t.upsert(pa.table({"id": [1], "status": ["shipped"], "v": [2]}))
    assert t.version == before
    r = t.upsert(pa.table({"id": [1], "status": ["shipped"], "v": [2], "w": ["b"]}))
    assert r.moved_keys == 1
    assert t.to_arrow().to_pylist() == [{"id": 1, "status": "shipped", "v": 2, "w": "b"}]


def test_sum_overflow_leaves_table_unchanged(tmp_path: Path) -> None:
    """README.md:90-91 / concepts.md:424-428: SumOverflow names the key, nothing is committed; a batch's
    partial sums may leave the type when its net sum fits."""
    schema = pa.schema([("id", pa.int64()), ("q", pa.int8())])
    t = _cat(tmp_path).create_table("a.sum", schema, primary_key="id", merge_operators={"q": "sum"})
    t.upsert(pa.table({"id": [1], "q": pa.array([100], pa.int8())}))
    before = t.version
    with pytest.raises(errors.SumOverflow, match="'id': 1"):
        t.upsert(pa.table({"id": [1], "q": pa.array([100], pa.int8())}))
    assert t.version == before
    t.upsert(pa.table({"id": [2, 2, 2], "q": pa.array([100, 100, -100], pa.int8())}))
    assert t.to_arrow().sort_by("id").column("q").to_pylist() == [100, 100]


def test_catalog_transaction_key_names_one_set_of_tables(tmp_path: Path) -> None:
    """concepts.md:737-738: a replay that opens another set of tables raises InvalidInput, nothing committed."""
    cat = _cat(tmp_path)
    schema = pa.schema([("id", pa.int64()), ("n", pa.int64())])
    a = cat.create_table("s.a", schema, primary_key="id")
    b = cat.create_table("s.b", schema, primary_key="id")
    c = cat.create_table("s.c", schema, primary_key="id")
    with cat.transaction(idempotency_key="k") as tx:
        tx.table("s.a").upsert(pa.table({"id": [1], "n": [1]}))
        tx.table("s.b").upsert(pa.table({"id": [1], "n": [1]}))
    with pytest.raises(errors.InvalidInput), cat.transaction(idempotency_key="k") as tx:
        tx.table("s.a").upsert(pa.table({"id": [2], "n": [2]}))
        tx.table("s.c").upsert(pa.table({"id": [2], "n": [2]}))
    assert (a.refresh().version, b.refresh().version, c.refresh().version) == (1, 1, 0)
    assert a.to_arrow().num_rows == 1


def test_staged_files_deleted_by_cleanup_fail_the_commit(tmp_path: Path) -> None:
    """concepts.md:601: a commit of staged files checks that they still exist (CommitFailed, nothing changes)."""
    t = _cat(tmp_path).create_table(
        "a.c", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": [1], "n": [1]}))
    staged = t.stage(pa.table({"id": [2], "n": [2]}))
    time.sleep(0.05)
    assert len(t.cleanup(older_than=dt.timedelta(0), dry_run=False)) == 1
    before = t.version
    with pytest.raises(errors.CommitFailed):
        t.commit([staged])
    assert t.version == before and t.to_arrow().num_rows == 1


def test_stale_handle_refuses_compaction_and_properties(tmp_path: Path) -> None:
    """concepts.md:1055-1057: a commit from a handle loaded before a schema change (a compaction or a property
    change too) raises SchemaChanged and changes nothing."""
    cat = _cat(tmp_path)
    t = cat.create_table(
        "a.s",
        pa.schema([("id", pa.int64()), ("n", pa.int64())]),
        primary_key="id",
        buckets=1,
        properties={"compaction.auto": "off"},
    )
    t.upsert(pa.table({"id": [1], "n": [1]}))
    t.upsert(pa.table({"id": [2], "n": [2]}))
    stale = cat.table("a.s")
    t.add_column("x", pa.int64())
    before = t.version
    with pytest.raises(errors.SchemaChanged):
        stale.compact()
    with pytest.raises(errors.SchemaChanged):
        stale.set_properties({"team": "a"})
    assert t.refresh().version == before
