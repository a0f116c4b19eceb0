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


# --- false or misleading claims --------------------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason=(
        "README.md:74 says a key names one row of the table (key_scope='table', 'the default for new keyed "
        "tables') so an upsert moving a key to another partition removes it from the old one; actual: the "
        "README's own sales.orders (partition_by day, sum/concat operators) is created with "
        "key_scope='partition' and a moved key lives in both partitions (the exception is in "
        "docs/concepts.md only)"
    ),
)
def test_readme_example_table_has_table_wide_keys(tmp_path: Path) -> None:
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
    t.upsert(pa.table({"order_id": [1], "day": ["2026-11-21"], "qty": [1], "note": ["a"]}))
    t.upsert(pa.table({"order_id": [1], "day": ["2026-11-22"], "qty": [2], "note": ["b"]}))
    assert t.to_arrow().num_rows == 1
    assert t.key_scope == "table"


@pytest.mark.xfail(
    strict=True,
    reason=(
        "docs/concepts.md:570 says retention.min-versions (10 for new tables) are 'the newest versions kept "
        "readable whatever their age'; actual: Table.expire(older_than=0, dry_run=False) ignores it and "
        "leaves only the current version readable (only the automatic policy honours it)"
    ),
)
def test_min_versions_kept_by_explicit_expire(tmp_path: Path) -> None:
    t = _cat(tmp_path).create_table(
        "a.e", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id"
    )
    assert t.properties["retention.min-versions"] == "10"
    for i in range(5):
        t.upsert(pa.table({"id": [i], "n": [i]}))
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert all(_readable(t, v) for v in range(1, t.version + 1))


@pytest.mark.xfail(
    strict=True,
    reason=(
        "README.md:398 says option values read alike everywhere, 'the Python API' included: booleans yes/no, "
        "byte sizes 128m / 1MiB; actual: Table.set_properties refuses changes.log='yes', "
        "write.chunk-bytes='1m' and read.window-bytes='8MiB' with InvalidInput"
    ),
)
@pytest.mark.parametrize(
    "props",
    [{"changes.log": "yes"}, {"write.chunk-bytes": "1m"}, {"read.window-bytes": "8MiB"}],
    ids=["bool-yes", "chunk-1m", "window-8MiB"],
)
def test_table_properties_read_option_values_like_everywhere(tmp_path: Path, props: dict[str, str]) -> None:
    t = _cat(tmp_path).create_table("a.p", pa.schema([("id", pa.int64())]), primary_key="id")
    t.set_properties(props)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "docs/concepts.md:523 and docs/sql.md:69 say a blind delete of given keys reads nothing and its "
        "rows_deleted is None; actual: on a partitioned table with table-wide keys, keys given without the "
        "partition columns are looked up and rows_deleted is a count (1, or 0 with no_change=True)"
    ),
)
def test_blind_delete_without_partition_columns_says_none(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("n", pa.int64())])
    t = _cat(tmp_path).create_table("a.b", schema, primary_key="id", partition_by="day", buckets=4)
    t.upsert(pa.table({"id": [1, 2], "day": ["a", "b"], "n": [1, 2]}))
    assert t.key_scope == "table"
    r = t.delete(pa.table({"id": [1, 99]}))
    assert t.to_arrow().column("id").to_pylist() == [2]
    assert r.rows_deleted is None


@pytest.mark.xfail(
    strict=True,
    reason=(
        "README.md:131 says a write with nothing to commit ('a delete that matches nothing') makes no "
        "version (no_change=True); actual: t.delete(table_of_keys) of a key the table does not hold commits "
        "a new version with a delete marker (a blind delete; only some shapes, e.g. table-wide keys given "
        "without partition columns, answer no_change)"
    ),
)
def test_blind_delete_of_absent_key_makes_no_version(tmp_path: Path) -> None:
    t = _cat(tmp_path).create_table(
        "a.d", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id"
    )
    t.upsert(pa.table({"id": list(range(20)), "n": list(range(20))}))
    before = t.version
    r = t.delete(pa.table({"id": [12345]}))
    assert r.no_change and t.version == before


@pytest.mark.xfail(
    strict=True,
    reason=(
        "docs/sql.md:121 says a statement mere runs gives the rows DuckDB gives for the same text, and "
        "sql.md:178 / the 'Unlike DuckDB' list do not mention zero divisors; actual: mere's n // 0 and n % 0 "
        "are NULL (a DELETE ... WHERE n // 0 IS NULL deletes every row) while DuckDB (>= 2.0, its default "
        "error_on_division_by_zero) raises and changes nothing"
    ),
)
def test_integer_zero_divisor_as_duckdb(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1::BIGINT AS id, 7::BIGINT AS n")
    try:
        con.execute("DELETE FROM t WHERE n // 0 IS NULL")
    except duckdb.Error:
        duck_raises = True
    else:
        duck_raises = False
    if not duck_raises:
        pytest.skip("this DuckDB returns NULL for a zero divisor, as mere does")
    cat = _cat(tmp_path)
    t = cat.create_table("a.t", pa.schema([("id", pa.int64()), ("n", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1], "n": [7]}))
    with pytest.raises(errors.MereError):
        mere.sql("DELETE FROM a.t WHERE n // 0 IS NULL", catalog=cat)


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
