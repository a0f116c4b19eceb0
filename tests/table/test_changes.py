"""Change feed (``Table.changes``) and ``mere.follow``.

The property: for any two versions a <= b of a table built by random upserts (full and partial, with merge
operators), deletes (by key and by filter), compactions, overwrites and rollbacks, the feed between them
applied to the snapshot at a gives the snapshot at b, it names no key whose row did not change, and every
``_version`` lies in (a, b].
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import subprocess
import sys
import threading
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.float64()),
        pa.field("n", pa.int64()),
        pa.field("s", pa.string()),
    ]
)
OPERATORS = {"n": "sum", "s": "last_non_null"}
FLOATS = st.sampled_from([0.0, -0.0, 1.5, math.nan, math.inf, None])
KEYS = st.integers(0, 12)


def rows_table(rows: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    return pa.table({c: pa.array([r[c] for r in rows], SCHEMA.field(c).type) for c in columns})


ROW = st.fixed_dictionaries(
    {
        "k": KEYS,
        "p": st.sampled_from(["a", "b", None]),
        "v": FLOATS,
        "n": st.one_of(st.none(), st.integers(-5, 5)),
        "s": st.one_of(st.none(), st.sampled_from(["x", "y", ""])),
    }
)
OPS = st.one_of(
    st.tuples(st.just("upsert"), st.lists(ROW, min_size=1, max_size=6)),
    st.tuples(st.just("partial"), st.lists(ROW, min_size=1, max_size=4)),
    st.tuples(st.just("delete_keys"), st.lists(KEYS, min_size=1, max_size=4)),
    st.tuples(st.just("delete_where"), st.sampled_from(["n > 0", "v IS NULL", "s = 'x'"])),
    st.tuples(st.just("compact"), st.just(None)),
    st.tuples(st.just("overwrite"), st.lists(ROW, max_size=5)),
    st.tuples(st.just("rollback"), st.integers(0, 30)),
)


def key_rows(table: pa.Table) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Rows by identity (partition, key), values compared by repr so NaN == NaN and -0.0 != 0.0."""
    names = SCHEMA.names
    return {(r["p"], r["k"]): tuple(repr(r[c]) for c in names) for r in table.select(names).to_pylist()}


def apply_feed(before: dict[Any, Any], feed: pa.Table) -> dict[Any, Any]:
    state = dict(before)
    names = SCHEMA.names
    for r in feed.to_pylist():
        key = (r["p"], r["k"])
        if r["_change"] in ("delete", "update_before"):
            assert key in state, f"{r['_change']} of a key the older snapshot lacks: {r}"
            assert state[key] == tuple(repr(r[c]) for c in names), f"before image differs: {r}"
            if r["_change"] == "delete":
                del state[key]
        else:
            state[key] = tuple(repr(r[c]) for c in names)
    return state


def run_ops(t: mere.Table, ops: list[tuple[str, Any]]) -> None:
    for kind, arg in ops:
        if kind in ("upsert", "overwrite"):
            unique = {(r["p"], r["k"]): r for r in arg}  # one version per key and batch
            data = rows_table(list(unique.values()), SCHEMA.names)
            t.upsert(data) if kind == "upsert" else t.overwrite(data)
        elif kind == "partial":
            unique = {(r["p"], r["k"]): r for r in arg}
            t.upsert(rows_table(list(unique.values()), ["k", "p", "n"]))
        elif kind == "delete_keys":
            t.delete(f"k IN ({', '.join(map(str, arg))})")
        elif kind == "delete_where":
            t.delete(arg)
        elif kind == "compact":
            t.compact(min_files=1)
        elif kind == "rollback":
            t.rollback(arg % (t.version + 1))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(OPS, min_size=1, max_size=8),
    buckets=st.sampled_from([1, 3]),
    kind=st.sampled_from(["operators", "last", "logged"]),
    data=st.data(),
)
def test_feed_applied_to_the_older_snapshot_gives_the_newer(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, Any]],
    buckets: int,
    kind: str,
    data: st.DataObject,
) -> None:
    """Merge operators, newest-wins, and newest-wins with the change log (before-images kept by the
    writes, read by the feed instead of merging the older version)."""
    cat = mere.connect(str(tmp_path_factory.mktemp("feed")))
    t = cat.create_table(
        "a.t",
        SCHEMA,
        primary_key="k",
        partition_by="p",
        buckets=buckets,
        merge_operators=OPERATORS if kind == "operators" else None,
        properties={"changes.log": "on"} if kind == "logged" else None,
        key_scope="partition",  # the feed's model: rows are (partition, key)
    )
    run_ops(t, ops)
    t = t.refresh()
    snapshots = {v: key_rows(t.to_arrow(version=v)) for v in range(t.version + 1)}
    pairs = list(itertools.combinations_with_replacement(range(t.version + 1), 2))
    for a, b in data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=6, unique=True)):
        feed = t.changes(a, b).read_all()
        assert apply_feed(snapshots[a], feed) == snapshots[b], (a, b, feed.to_pylist())
        if feed.num_rows:
            versions = feed.column("_version").to_pylist()
            assert all(a < v <= b for v in versions), (a, b, versions)
        # No key appears whose row is the same at a and b.
        keys = {(r["p"], r["k"]) for r in feed.to_pylist()}
        assert all(snapshots[a].get(k) != snapshots[b].get(k) for k in keys), (a, b)
        # A projection and a filter keep the matching rows of the same feed.
        part = t.changes(a, b, columns=["n"], filter="n > 0").read_all()
        assert part.column_names == ["p", "k", "n", "_change", "_version", "_commit_time"]
        expected = [(r["p"], r["k"], r["n"], r["_change"]) for r in feed.to_pylist() if (r["n"] or 0) > 0]
        got = [(r["p"], r["k"], r["n"], r["_change"]) for r in part.to_pylist()]
        assert got == expected


def test_feed_rows_and_times(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table("a.t", SCHEMA, primary_key="k", merge_operators=OPERATORS)
    base = rows_table(
        [{"k": 1, "p": "a", "v": 1.0, "n": 1, "s": "x"}, {"k": 2, "p": "a", "v": 2.0, "n": 2, "s": "y"}],
        SCHEMA.names,
    )
    start = t.upsert(base).version
    t.upsert(rows_table([{"k": 1, "p": "a", "v": 1.0, "n": 5, "s": None}], SCHEMA.names))  # sum: n 1 -> 6
    t.delete("k = 2")
    t.upsert(base.slice(1))  # key 2 back, as it was at `start`
    t.compact(min_files=1)
    feed = t.changes(start).read_all().to_pylist()
    assert [(r["k"], r["_change"], r["n"], r["s"]) for r in feed] == [
        (1, "update_before", 1, "x"),
        (1, "update_after", 6, "x"),
    ]
    assert feed[0]["_version"] == start + 1
    when = {s.version: s.committed_at for s in t.history()}
    assert feed[0]["_commit_time"] == when[start + 1]
    assert t.changes(t.version).read_all().num_rows == 0
    mid = t.changes(start, start + 2).read_all().to_pylist()
    assert sorted((r["k"], r["_change"], r["_version"]) for r in mid) == [
        (1, "update_after", start + 1),
        (1, "update_before", start + 1),
        (2, "delete", start + 2),
    ]


def test_bad_arguments_raise_and_expired_versions_are_refused(tmp_path: Any) -> None:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("a.t", SCHEMA, primary_key="k")
    for _ in range(3):
        t.upsert(rows_table([{"k": 1, "p": "a", "v": 1.0, "n": 1, "s": "x"}], SCHEMA.names))
    for bad in (
        lambda: t.changes(-1),
        lambda: t.changes("1"),  # type: ignore[arg-type]
        lambda: t.changes(True),  # type: ignore[arg-type]
        lambda: t.changes(2, 1),
        lambda: t.changes(0, 99),
        lambda: t.changes(0, columns=["nope"]),
        lambda: t.changes(0, filter="nope > 1"),
        lambda: t.changes(0, filter="v ="),
        lambda: t.changes(2**63),  # beyond the catalog's integers
        lambda: t.changes(0, 2**70),
    ):
        with pytest.raises(errors.MereError):
            bad()
    opened = t.changes(1, 2)  # read after an expire gave its start up: named as that
    t.compact(min_files=1)
    t.upsert(rows_table([{"k": 2, "p": "a", "v": 1.0, "n": 1, "s": "x"}], SCHEMA.names))
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    with pytest.raises(errors.NoSuchVersion):
        t.changes(0)
    with pytest.raises(errors.NoSuchVersion, match="expired while"):
        opened.read_all()
    keyless = cat.create_table("a.plain", SCHEMA)
    with pytest.raises(errors.InvalidInput, match="primary key"):
        keyless.changes(0)


def test_follow_yields_each_new_range(tmp_path: Any) -> None:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("a.t", SCHEMA, primary_key="k")
    start = t.version
    got: list[tuple[int, int]] = []

    def writer() -> None:
        for k in range(3):
            t.upsert(rows_table([{"k": k, "p": "a", "v": 1.0, "n": 1, "s": "x"}], SCHEMA.names))

    thread = threading.Thread(target=writer)
    thread.start()
    seen = 0
    for version, changes in mere.follow(cat.table("a.t"), start, poll_seconds=0.01, max_poll_seconds=0.05):
        got.append((version, changes.num_rows))
        seen += changes.num_rows
        if seen == 3:
            break
    thread.join()
    assert sum(n for _, n in got) == 3 and got[-1][0] == start + 3
    assert [v for v, _ in got] == sorted({v for v, _ in got})
    for bad in (
        lambda: next(mere.follow(t, -1)),
        lambda: next(mere.follow(t, 0, poll_seconds=0)),
        lambda: next(mere.follow(t, 0, max_poll_seconds="1")),  # type: ignore[arg-type]
        lambda: next(mere.follow(t, 0, poll_seconds=math.inf)),
        lambda: next(mere.follow(t, 0, max_poll_seconds=1e300)),
        lambda: next(mere.follow(t, 99)),
    ):
        with pytest.raises(errors.MereError):
            bad()


@pytest.mark.parametrize("key_type", [pa.string(), pa.date32()])
def test_composite_and_non_integer_keys(tmp_path: Any, key_type: pa.DataType) -> None:
    schema = pa.schema(
        [
            pa.field("a", key_type, nullable=False),
            pa.field("b", pa.int32(), nullable=False),
            ("v", pa.float64()),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key=["a", "b"], buckets=3)
    values = ["x", "y"] if key_type == pa.string() else [dt.date(2026, 1, 1), dt.date(2026, 1, 2)]
    rows = pa.table({"a": values * 2, "b": [1, 1, 2, 2], "v": [1.0, 2.0, 3.0, 4.0]}, schema=schema)
    start = t.upsert(rows).version
    t.upsert(pa.table({"a": values[:1], "b": [2], "v": [-0.0]}, schema=schema))
    t.upsert(pa.table({"a": values[1:], "b": [9], "v": [9.0]}, schema=schema))
    t.delete(pa.table({"a": values[1:], "b": [1]}, schema=pa.schema([schema.field("a"), schema.field("b")])))
    feed = sorted((r["a"], r["b"], r["_change"], r["v"]) for r in t.changes(start).read_all().to_pylist())
    assert feed == sorted(
        [
            (values[0], 2, "update_before", 3.0),
            (values[0], 2, "update_after", -0.0),
            (values[1], 9, "insert", 9.0),
            (values[1], 1, "delete", 2.0),
        ]
    )


def test_nested_columns_projection_and_filters_on_other_columns(tmp_path: Any) -> None:
    """Found by an adversarial review: nested columns broke Arrow's joins; a projection changed which rows
    came out (rows are compared whole); a filter on a column left out of ``columns`` failed."""
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("tags", pa.list_(pa.string())),
            ("meta", pa.struct([("a", pa.int32())])),
            ("v", pa.float64()),
            ("n", pa.int64()),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key="k", buckets=2)
    start = t.upsert(
        pa.table(
            {"k": [1, 2], "tags": [["x"], []], "meta": [{"a": 1}, None], "v": [1.0, 2.0], "n": [5, 6]}, schema
        )
    ).version
    t.upsert(pa.table({"k": [1], "v": [9.0]}))  # partial: only v changes
    t.upsert(pa.table({"k": [3], "tags": [["y", "z"]], "meta": [{"a": 3}], "v": [3.0], "n": [7]}, schema))
    feed = t.changes(start).read_all()
    assert sorted((r["k"], r["_change"], r["tags"]) for r in feed.to_pylist()) == [
        (1, "update_after", ["x"]),
        (1, "update_before", ["x"]),
        (3, "insert", ["y", "z"]),
    ]
    only_n = t.changes(start, columns=["n"]).read_all()
    assert only_n.column_names == ["k", "n", "_change", "_version", "_commit_time"]
    assert sorted((r["k"], r["_change"]) for r in only_n.to_pylist()) == sorted(
        (r["k"], r["_change"]) for r in feed.to_pylist()
    )
    by_v = t.changes(start, columns=["n"], filter="v > 5").read_all().to_pylist()
    assert [(r["k"], r["_change"], r["n"]) for r in by_v] == [(1, "update_after", 5)]


def test_a_tagged_start_whose_later_commits_expired_is_refused(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table("a.t", SCHEMA, primary_key="k")
    row = {"k": 1, "p": "a", "v": 1.0, "n": 1, "s": "x"}
    start = t.upsert(rows_table([row], SCHEMA.names)).version
    t.tag("keep", start)
    t.upsert(rows_table([{**row, "v": 2.0}], SCHEMA.names))
    t.compact(min_files=1)
    t.upsert(rows_table([{**row, "k": 2}], SCHEMA.names))
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert t.to_arrow(tag="keep").num_rows == 1  # the tagged version itself stays readable
    with pytest.raises(errors.NoSuchVersion, match="expired"):
        t.changes(start)
    assert t.changes(t.version).read_all().num_rows == 0  # the kept history itself reads


def test_a_half_read_scan_does_not_keep_the_program_alive(tmp_path: Any) -> None:
    """Found by an adversarial review: split workers blocked on a full queue kept the interpreter from
    exiting when a reader was abandoned half-read."""
    code = (
        "import pyarrow as pa, mere, sys\n"
        "t = mere.connect(sys.argv[1]).create_table('a.t', pa.schema([pa.field('k', pa.int64(), "
        "nullable=False), ('n', pa.int64())]), primary_key='k', buckets=2)\n"
        "t.upsert(pa.table({'k': list(range(600_000)), 'n': [1] * 600_000}))\n"
        "reader = t.scan(threads=1).to_reader()\n"
        "reader.read_next_batch()\n"
        "print('done')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done


def test_nested_values_are_compared_element_by_element(tmp_path: Any) -> None:
    """A key written back with equal nested values is no change (NaN equals NaN inside lists too); one
    nested element that differs (a value, a length, a NULL, a map entry, a -0.0) is an update pair."""
    inner = pa.struct([("x", pa.float64()), ("tags", pa.list_(pa.string()))])
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("l", pa.list_(inner)),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("f", pa.list_(pa.int32(), 2)),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key="id", buckets=1)
    base = [
        {"id": i, "l": [{"x": math.nan, "tags": ["a"]}, None], "m": [("k", 1)], "f": [1, 2]} for i in range(7)
    ]
    t.upsert(pa.Table.from_pylist(base, schema))
    start = t.version
    after = [dict(r) for r in base]
    after[1]["l"] = [{"x": 1.0, "tags": ["a"]}, None]
    after[2]["l"] = [{"x": math.nan, "tags": ["a", "b"]}, None]
    after[3]["l"] = [{"x": math.nan, "tags": ["a"]}]
    after[4]["m"] = [("k", 2)]
    after[5]["f"] = None
    after[6]["l"] = [{"x": -0.0, "tags": None}, None]
    t.upsert(pa.Table.from_pylist(after, schema))
    feed = t.changes(start).read_all()
    assert sorted(set(feed.column("id").to_pylist())) == [1, 2, 3, 4, 5, 6]
    assert feed.num_rows == 12
    assert t.changes(start - 1).read_all().num_rows == 7  # all inserts from the empty table


LOGGED = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])


def logged_table(tmp_path: Any, **kwargs: Any) -> mere.Table:
    props = {"changes.log": "on", **kwargs.pop("properties", {})}
    t = mere.connect(str(tmp_path)).create_table(
        "a.t", LOGGED, primary_key="k", buckets=2, properties=props, **kwargs
    )
    t.upsert(pa.table({"k": pa.array(range(10), pa.int64()), "v": [f"a{i}" for i in range(10)]}))
    return t


def feed_rows(t: mere.Table, start: int, end: int | None = None) -> list[tuple[Any, ...]]:
    feed = t.changes(start, end).read_all()
    return sorted((r["k"], r["_change"], r["v"], r["_version"]) for r in feed.to_pylist())


def test_a_logged_feed_reads_no_older_version(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``changes.log`` on, the before-images come from the writes' logs: the feed merges no split
    at its start version (and the after-images come from the added files)."""
    t = logged_table(tmp_path)
    start = t.version
    t.upsert(pa.table({"k": pa.array([1, 11], pa.int64()), "v": ["b1", "b11"]}))
    t.delete(pa.table({"k": pa.array([2], pa.int64())}))
    t.upsert(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["c1", "c2"]}))
    merged: list[int] = []
    real = mere.Table.split_tables

    def spy(self: mere.Table, version: int, *args: Any, **kwargs: Any) -> Any:
        merged.append(version)
        return real(self, version, *args, **kwargs)

    monkeypatch.setattr(mere.Table, "split_tables", spy)
    assert feed_rows(t, start) == [
        (1, "update_after", "c1", 4),
        (1, "update_before", "a1", 4),
        (2, "update_after", "c2", 4),
        (2, "update_before", "a2", 4),
        (11, "insert", "b11", 2),
    ]
    assert feed_rows(t, start + 1, start + 2) == [(2, "delete", "a2", 3)]
    assert merged == []
    monkeypatch.undo()
    # The same table without logs gives the same feeds, by merging.
    t.set_properties({"changes.log": "off"})
    t.upsert(pa.table({"k": pa.array([3], pa.int64()), "v": ["d3"]}))
    assert feed_rows(t, start, t.version - 2) == feed_rows(t, start, start + 3)
    assert feed_rows(t, start + 3) == [(3, "update_after", "d3", 6), (3, "update_before", "a3", 6)]


def test_a_commit_whose_logged_rows_changed_meanwhile_logs_them_again(tmp_path: Any) -> None:
    """A logged write reads the rows it replaces at its read version; a concurrent commit to the same
    split makes it read them again (a retry), so its log holds the rows it really replaced."""
    t = logged_table(tmp_path)
    other = mere.connect(str(tmp_path)).table("a.t")
    start = t.version
    with t.transaction() as tx:
        tx.upsert(pa.table({"k": pa.array([5], pa.int64()), "v": ["mine"]}))
        other.upsert(pa.table({"k": pa.array([5], pa.int64()), "v": ["theirs"]}))
    t = t.refresh()
    assert t.version == start + 2 and t.history()[-1].summary["read_version"] == start + 1
    assert feed_rows(t, start + 1) == [(5, "update_after", "mine", 3), (5, "update_before", "theirs", 3)]
    assert feed_rows(t, start) == [(5, "update_after", "mine", 3), (5, "update_before", "a5", 3)]


def test_logs_go_with_their_versions_and_failed_logs_leave_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = logged_table(tmp_path)
    root = tmp_path / "a" / "t" if (tmp_path / "a" / "t").exists() else tmp_path
    inserted = set(root.rglob("log-*"))  # the first upsert's log: its inserts
    assert len(inserted) == 2
    t.upsert(pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["x", "y", "z"]}))
    logs = [p for p in root.rglob("log-*")]
    assert len(logs) == 4  # one per split with changed rows
    before = (t.version, t.to_arrow().sort_by("k"), sorted(p.name for p in root.rglob("*.parquet")))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(mere.Table, "split_tables", broken)
    with pytest.raises(OSError, match="disk full"):
        t.upsert(pa.table({"k": pa.array([4], pa.int64()), "v": ["w"]}))
    monkeypatch.undo()
    t = t.refresh()
    assert (t.version, t.to_arrow().sort_by("k"), sorted(p.name for p in root.rglob("*.parquet"))) == before
    t.compact(min_files=1)
    listed = {path.rsplit("/", 1)[-1] for path in t.expire(dt.timedelta(0), dry_run=True)}
    assert {p.name for p in logs} <= listed  # the dry run lists the logs too
    assert {path.rsplit("/", 1)[-1] for path in t.expire(dt.timedelta(0), dry_run=False)} == listed
    assert not [p for p in root.rglob("log-*")]  # the logs' versions expired: their files went
    assert t.changes(t.version).read_all().num_rows == 0


def test_changes_log_property_is_checked(tmp_path: Any) -> None:
    t = logged_table(tmp_path)
    with pytest.raises(errors.InvalidInput, match=r"changes\.log"):
        t.set_properties({"changes.log": "sometimes"})
    assert t.spec.properties["changes.log"] == "on"


@pytest.mark.parametrize("log", ["on", "off"])
def test_a_file_a_rollback_brings_back_is_not_newer_than_the_range(tmp_path: Any, log: str) -> None:
    # Found by CI (test_change_log's twin test): compactions dropped both a delete marker and the file it
    # masked, then a rollback brought back an older file with its older sequence. The feed merged the
    # range's added files alone for the after-image, so the marker of version 4 hid the restored row.
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.float64())])
    t = mere.connect(str(tmp_path)).create_table(
        "a.t",
        schema,
        primary_key="k",
        buckets=1,
        properties={"changes.log": log, "compaction.auto": "inline", "compaction.min-files": "2"},
    )
    t.upsert(pa.table({"k": [0], "v": [0.0]}, schema=schema))  # 1
    t.upsert(pa.table({"k": [0], "v": [4.0]}, schema=schema))  # 2, then 3 compacts
    t.delete("v > 3")  # 4, then 5 compacts every file away
    assert [s.operation for s in t.history()] == [
        "create",
        "upsert",
        "upsert",
        "compact",
        "delete",
        "compact",
    ]
    t.rollback(1)  # 6 adds back version 1's file, removing nothing
    assert t.to_arrow().to_pylist() == [{"k": 0, "v": 0.0}]

    def feed(a: int, b: int) -> list[tuple[int, float, str]]:
        return [(r["k"], r["v"], r["_change"]) for r in t.changes(a, b).read_all().to_pylist()]

    assert feed(0, 6) == [(0, 0.0, "insert")]
    assert feed(1, 6) == []
    assert feed(2, 6) == [(0, 4.0, "update_before"), (0, 0.0, "update_after")]
    assert feed(5, 6) == [(0, 0.0, "insert")]


def test_a_logged_feed_reads_a_column_a_rollback_brought_back_as_the_merged_feed(tmp_path: Any) -> None:
    feeds = {}
    for log in ("off", "on"):
        schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64()), ("s", pa.string())])
        t = mere.connect(str(tmp_path / log)).create_table("a.t", schema, primary_key="k", buckets=2)
        t.upsert(pa.table({"k": [1, 2], "v": [5, 7], "s": ["x", "y"]}))
        t.set_properties({"changes.log": log})
        t.drop_column("v")  # version 3: the files still hold v
        t.upsert(pa.table({"k": [2], "s": ["z"]}))  # logged without v
        t.rollback(2)  # v is back, with its field id: version 3 reads v = 7 again
        feeds[log] = t.changes(3, 4).read_all().select(["k", "v", "s", "_change"]).to_pylist()
    assert feeds["on"] == feeds["off"]
    assert feeds["on"][0] == {"k": 2, "v": 7, "s": "y", "_change": "update_before"}


MOVE = st.tuples(st.integers(0, 15), st.sampled_from("abcd"), st.integers(0, 9), st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.lists(MOVE, min_size=1, max_size=10), min_size=2, max_size=7),
    ranges=st.lists(st.integers(1, 3), min_size=1, max_size=7),
    per_read=st.sampled_from([1, 2, 16]),
    log=st.sampled_from(["off", "on"]),
)
def test_a_copy_upserting_the_feed_in_its_order_keeps_keys_that_move(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    steps: list[list[tuple[int, str, int, bool]]],
    ranges: list[int],
    per_read: int,
    log: str,
) -> None:
    """With table-wide keys a move is a delete in one split and an insert in another: the feed gives the
    delete first, whatever splits it reads together, so a copy keyed by the key alone that upserts each
    feed as it comes (a CDC batch: the last row of a key wins) equals its source."""
    monkeypatch.setattr("mere.table.ops.change_log.SPLITS_PER_READ", per_read)
    cat = mere.connect(str(tmp_path_factory.mktemp("mv")))
    schema = pa.schema([("k", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
    props = {"compaction.auto": "off", "changes.log": log}
    t = cat.create_table("a.src", schema, primary_key="k", partition_by="p", buckets=3, properties=props)
    copy = cat.create_table(
        "a.copy", schema, primary_key="k", partition_by="p", buckets=2, cdc_column="_change"
    )
    assert t.key_scope == copy.key_scope == "table"
    for batch in steps:
        last = {k: (k, p, v, d) for k, p, v, d in batch}.values()  # one row per key and batch
        upserts = [(k, p, v) for k, p, v, d in last if not d]
        if upserts:
            t.upsert(pa.table(dict(zip(schema.names, map(list, zip(*upserts)))), schema))
        deletes = [k for k, _, _, d in last if d]
        if deletes:
            t.delete(pa.table({"k": deletes}))
    seen, i = 0, 0
    while seen < t.version:
        end = min(t.version, seen + ranges[i % len(ranges)])
        feed = t.changes(seen, end).read_all().drop_columns(["_version", "_commit_time"])
        if feed.num_rows:
            copy.upsert(feed)
        assert sorted(copy.to_arrow().to_pylist(), key=lambda r: r["k"]) == sorted(
            t.to_arrow(version=end).to_pylist(), key=lambda r: r["k"]
        ), (seen, end)
        seen, i = end, i + 1
