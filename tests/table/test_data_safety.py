"""What an ordinary user does must lose nothing (issue 30): expiry lists before it deletes, writes with
nothing to commit make no version, new tables stay fast under tiny commits and bounded under retention,
and errors name the table."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors
from mere.cli import app as cli_app
from mere.io.parquet import write_parquet
from mere.spec import NEW_KEYED_TABLE_PROPERTIES, NEW_TABLE_PROPERTIES

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("day", pa.string()), ("qty", pa.int64())])
_names = itertools.count()


def _table(cat: mere.Catalog, **kwargs: Any) -> mere.Table:
    kwargs.setdefault("primary_key", "id")
    kwargs.setdefault("buckets", 2)
    return cat.create_table(f"s.t{next(_names)}", SCHEMA, **kwargs)


def _rows(ids: list[int], day: str = "d1", qty: int = 1) -> pa.Table:
    return pa.table({"id": ids, "day": [day] * len(ids), "qty": [qty] * len(ids)}, schema=SCHEMA)


def _files_on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli_app.run(list(args))
    return rc, out.getvalue()


# -- item 3: expire and cleanup list unless told to delete, in Python as in the CLI -------------------


def test_expire_and_cleanup_list_by_default_as_the_cli_does(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = _table(cat, properties={"compaction.auto": "off"})
    for i in range(4):
        t.upsert(_rows([1, 2], qty=i))
    t.compact()
    orphan = write_parquet(
        t.storage,
        f"{t.location}/part-0123456789abcdef0123456789abcdef.parquet",
        _rows([9]),
        row_group_rows=10,
    ).path
    disk, history = _files_on_disk(t), [s.expired for s in t.history()]
    listed = t.expire(older_than=dt.timedelta(0))  # the default: a dry run
    orphans = t.cleanup(older_than=dt.timedelta(0))
    assert listed and orphans == [orphan]
    assert _files_on_disk(t) == disk and [s.expired for s in t.history()] == history
    assert t.to_arrow(version=1).num_rows == 2  # time travel still there
    rc, out = _cli("-w", str(tmp_path / "wh"), "expire", t.name, "--older-than", "0", "--json")
    assert rc == 0 and sorted(__import__("json").loads(out)["files"]) == sorted(listed)
    deleted = t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert sorted(deleted) == sorted(listed) and not set(deleted) & _files_on_disk(t)
    with pytest.raises(errors.NoSuchVersion):
        t.to_arrow(version=1)
    assert t.cleanup(older_than=dt.timedelta(0), dry_run=False) == [orphan]
    assert {r["id"]: r["qty"] for r in t.to_arrow().to_pylist()} == {1: 3, 2: 3}
    for method in (mere.Table.expire, mere.Table.cleanup):
        assert method.__doc__ is not None and "dry_run=False" in method.__doc__


# -- item 9: nothing to commit, no version ---------------------------------------------------------


@pytest.mark.parametrize(
    "write",
    [
        lambda t: t.upsert(SCHEMA.empty_table()),
        lambda t: t.upsert(pa.table({"id": pa.array([], pa.int64()), "day": pa.array([], pa.string())})),
        lambda t: t.delete("qty > 1000"),
        lambda t: t.delete(pa.table({"id": pa.array([], pa.int64()), "day": pa.array([], pa.string())})),
        lambda t: t.update(set={"qty": "qty + 1"}, where="id = 999"),
        lambda t: t.overwrite(SCHEMA.empty_table(), dynamic=True),
        lambda t: t.overwrite(SCHEMA.empty_table(), partition={"day": "d9"}),
        lambda t: t.merge(_rows([1])).when_matched_delete(condition="s.qty > 5").execute(),
        lambda t: t.commit([t.stage(SCHEMA.empty_table())]),
        lambda t: t.commit([]),
    ],
)
def test_a_write_with_nothing_to_commit_makes_no_version(local_cat: mere.Catalog, write: Any) -> None:
    t = _table(local_cat, partition_by="day", properties={"compaction.auto": "off"})
    t.upsert(_rows([1, 2]))
    before, disk = t.version, _files_on_disk(t)
    result = write(t)
    assert t.version == before and [s.version for s in t.history()][-1] == before
    if isinstance(result, mere.CommitResult):
        assert result.no_change and result.version == before and "no_change=True" in repr(result)
        assert (result.rows_written, result.files_added, result.files_removed) == (0, 0, 0)
    else:  # a MERGE
        assert result.version is None
    assert _files_on_disk(t) == disk  # nothing written and left behind either


def test_an_empty_transaction_makes_no_version(local_cat: mere.Catalog) -> None:
    t = _table(local_cat)
    with t.transaction():
        pass
    tx = t.transaction(idempotency_key="k-1")
    tx.upsert(SCHEMA.empty_table())
    result = tx.commit()
    assert result.no_change and t.version == 0 and t.find_commit("k-1") is None
    assert t.upsert(_rows([1]), idempotency_key="k-1").version == 1  # the key was not used up


# -- item 4: tiny commits do not decay a new table ---------------------------------------------------


def test_a_new_table_fed_by_tiny_commits_stays_small(local_cat: mere.Catalog) -> None:
    t = _table(local_cat, buckets=4)
    assert NEW_KEYED_TABLE_PROPERTIES.items() <= t.properties.items()
    for i in range(120):
        t.upsert(_rows([2 * i, 2 * i + 1], qty=i))
    runs = Counter((f.partition, f.bucket, f.seq) for f in t.files_at(t.version))
    per_split = Counter((p, b) for p, b, _ in runs)
    assert max(per_split.values()) < 8 and t.scan().count() == 240
    assert {r["id"]: r["qty"] for r in t.to_arrow().to_pylist()} == {k: k // 2 for k in range(240)}
    # Turned off, it stops; turned on again, it catches up at the next commit.
    t.set_properties({"compaction.auto": "off"})
    for i in range(10):
        t.upsert(_rows([1000 + i]))
    assert max(Counter((f.partition, f.bucket) for f in t.files_at(t.version)).values()) >= 8
    t.set_properties({"compaction.auto": "inline"})
    t.upsert(_rows([5000]))
    runs = Counter((f.partition, f.bucket, f.seq) for f in t.files_at(t.version))
    assert max(Counter((p, b) for p, b, _ in runs).values()) < 8


# -- item 5: retention -------------------------------------------------------------------------------


def test_new_tables_get_the_retention_defaults(local_cat: mere.Catalog) -> None:
    keyed, plain = _table(local_cat), _table(local_cat, primary_key=None, buckets=None)
    assert NEW_TABLE_PROPERTIES.items() <= keyed.properties.items()
    assert NEW_TABLE_PROPERTIES.items() <= plain.properties.items()
    assert "compaction.auto" not in plain.properties
    assert keyed.retention_policy == (dt.timedelta(days=7), 10)
    for i in range(12):
        keyed.upsert(_rows([i]))
    assert not any(s.expired for s in keyed.history())  # nothing is a week old


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    commits=st.integers(1, 25),
    keep=st.integers(1, 6),
    tagged=st.lists(st.integers(1, 25), max_size=3),
)
def test_retention_keeps_the_newest_versions_and_tagged_ones(
    tmp_path: Path, commits: int, keep: int, tagged: list[int]
) -> None:
    cat = mere.connect(str(tmp_path / f"w{next(_names)}"))
    t = _table(cat, properties={"compaction.auto": "off"})
    states: dict[int, dict[int, int]] = {}
    state: dict[int, int] = {}
    for i in range(commits):
        t.upsert(_rows([i % 4], qty=i))
        state[i % 4] = i
        states[t.version] = dict(state)
        if t.version in tagged:
            t.tag(f"v{t.version}")
    # Retention turned on: the next commit's maintenance expires what is due (max-age 0: all but the kept).
    t.set_properties({"retention.max-age": "0", "retention.min-versions": str(keep)})
    t.upsert(_rows([100], qty=-1))
    state[100] = -1
    states[t.version - 1] = states.get(t.version - 2, {})  # the property change kept the rows
    states[t.version] = dict(state)
    readable = {s.version for s in t.history() if not s.expired}
    newest = set(range(max(0, t.version - keep + 1), t.version + 1))
    assert newest <= readable
    assert readable - newest <= {v for v in tagged if v in states}, "only tagged versions are kept beyond"
    for v in readable:
        if v in states:
            assert {r["id"]: r["qty"] for r in t.to_arrow(version=v).to_pylist()} == states[v]
    referenced = {f.path for v in readable for f in t.files_at(v)}
    assert _files_on_disk(t) <= referenced | {f for f in _files_on_disk(t) if "/log" in f}


def test_retention_does_not_run_on_every_commit(
    local_cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once nothing can be due before a known time, commits skip the catalog look-ups."""
    t = _table(local_cat, properties={"retention.max-age": "1h", "compaction.auto": "off"})
    calls: list[int] = []
    original = type(t._sql).version_range
    monkeypatch.setattr(type(t._sql), "version_range", lambda self, i: calls.append(i) or original(self, i))
    for i in range(30):
        t.upsert(_rows([i]))
    assert len(calls) <= 2 and not any(s.expired for s in t.history())


def test_bad_retention_properties_are_refused(local_cat: mere.Catalog) -> None:
    t = _table(local_cat)
    for bad in ({"retention.max-age": "soon"}, {"retention.min-versions": "0"}, {"retention.maxage": "1d"}):
        with pytest.raises(errors.InvalidInput):
            t.set_properties(bad)
    assert t.version == 0
    assert t.set_properties({"retention.max-age": "off"}) and t.retention_policy[0] is None


# -- item 11: errors name the table -----------------------------------------------------------------


def test_catalog_errors_name_the_table(local_cat: mere.Catalog) -> None:
    t = _table(local_cat)
    t.upsert(_rows([1]))
    with pytest.raises(errors.NoSuchVersion, match=t.name):
        t.snapshot(version=99)
    with pytest.raises(errors.NoSuchVersion, match=t.name):
        t.to_arrow(as_of=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    stale = local_cat.table(t.name)
    local_cat.drop_table(t.name)
    for call in (lambda: stale.upsert(_rows([2])), lambda: stale.snapshot(version=1)):
        with pytest.raises(errors.NoSuchTable) as raised:
            call()
        assert t.name in str(raised.value) and "table id" not in str(raised.value)


def test_a_write_that_landed_is_not_reported_refused_when_the_reload_after_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a commit lands, the handle reloads a changed layout; a catalog failing that reload is logged:
    the write returns its version (the soak once saw a CatalogError for a write that had landed)."""
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("s.reload", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id")
    other = mere.connect(str(tmp_path)).table("s.reload")
    t.upsert(pa.table({"id": [1], "v": [1]}))
    other.set_properties({"compaction.auto": "off"})  # another handle's property change: t reloads
    other.upsert(pa.table({"id": [2], "v": [2]}))

    def failing(*_: Any) -> Any:
        raise mere.errors.CatalogError("the catalog went away")

    monkeypatch.setattr(type(t), "refresh", failing)
    result = t.upsert(pa.table({"id": [3], "v": [3]}))
    monkeypatch.undo()
    assert result.version == mere.connect(str(tmp_path)).table("s.reload").version
    assert sorted(mere.connect(str(tmp_path)).table("s.reload").to_arrow().column("id").to_pylist()) == [
        1,
        2,
        3,
    ]
