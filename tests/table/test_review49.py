"""Independent adversarial review of the changes of stop 49 (change feed of table-wide keys, writer
input decoding, long filter chains, stale handles, CDC sync transaction ends).

Oracles: snapshots read after every commit and diffed as plain dicts (feeds), plain-input writes
(decoding), DuckDB over the same rows (filters), and a plain dict model (CDC sync).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors

# --------------------------------------------------------------------------------------------------
# 1. change feed of table-wide keys
# --------------------------------------------------------------------------------------------------

FEED_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.int64()),
        pa.field("w", pa.string()),
    ]
)
PARTS = ["a", "b", "c"]
ROW = st.tuples(
    st.integers(0, 11), st.sampled_from(PARTS), st.one_of(st.none(), st.integers(0, 6)), st.sampled_from("xy")
)
OP = st.one_of(
    st.tuples(st.just("upsert"), st.lists(ROW, min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 11), min_size=1, max_size=4)),
    st.tuples(st.just("overwrite"), st.lists(ROW, max_size=5), st.sampled_from(PARTS)),
    st.tuples(st.just("dynamic"), st.lists(ROW, min_size=1, max_size=5)),
    st.tuples(st.just("rollback"), st.integers(1, 50)),
    st.tuples(st.just("compact")),
    st.tuples(st.just("expire")),
    st.tuples(st.just("delete_where"), st.integers(0, 6)),
)

FILTERS: dict[str | None, Any] = {
    None: lambda r: True,
    "v > 3": lambda r: r["v"] is not None and r["v"] > 3,
    "p = 'a'": lambda r: r["p"] == "a",
    "v IS NULL OR p = 'b'": lambda r: r["v"] is None or r["p"] == "b",
    "w = 'x' AND (v < 2 OR v > 4)": lambda r: r["w"] == "x" and r["v"] is not None and (r["v"] < 2 or r["v"] > 4),
}


def _table_of(rows: list[tuple[Any, ...]]) -> pa.Table:
    last = {r[0]: r for r in rows}.values()  # one row per key
    return pa.table({n: [r[i] for r in last] for i, n in enumerate(FEED_SCHEMA.names)}, FEED_SCHEMA)


def _snap(t: Any, version: int | None = None) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in t.to_arrow(version=version).select(FEED_SCHEMA.names).to_pylist():
        assert r["k"] not in out, "a table-wide key twice in one snapshot"
        out[r["k"]] = r
    return out


def _diff(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], cols: list[str]) -> Counter:
    """The net feed by identity (partition, key) as a multiset of (change, row) without versions."""
    older = {(r["p"], k): tuple(r[c] for c in cols) for k, r in a.items()}
    newer = {(r["p"], k): tuple(r[c] for c in cols) for k, r in b.items()}
    out: Counter = Counter()
    for ident in set(older) | set(newer):
        x, y = older.get(ident), newer.get(ident)
        if x == y:
            continue
        if x is None:
            out[("insert", y)] += 1
        elif y is None:
            out[("delete", x)] += 1
        else:
            out[("update_before", x)] += 1
            out[("update_after", y)] += 1
    return out


def _run_workload(t: Any, ops: list[tuple[Any, ...]]) -> tuple[dict[int, dict], int]:
    """Applies ``ops``; returns the snapshot of every version and the oldest readable start."""
    snaps = {t.version: _snap(t)}
    oldest = t.version
    for op in ops:
        kind = op[0]
        try:
            if kind == "upsert":
                t.upsert(_table_of(op[1]))
            elif kind == "delete":
                t.delete(pa.table({"k": pa.array(op[1], pa.int64())}))
            elif kind == "overwrite":
                rows = [(k, op[2], v, w) for k, _, v, w in op[1]]
                t.overwrite(_table_of(rows), {"p": op[2]})
            elif kind == "dynamic":
                t.overwrite(_table_of(op[1]), dynamic=True)
            elif kind == "rollback":
                readable = [v for v in snaps if v >= oldest and v < t.version]
                if not readable:
                    continue
                t.rollback(readable[op[1] % len(readable)])
            elif kind == "compact":
                t.compact(min_files=1)
            elif kind == "expire":
                t.expire(dt.timedelta(0), dry_run=False)
                oldest = t.version
            elif kind == "delete_where":
                t.delete(f"v = {op[1]}")
        except errors.InvalidInput:
            continue
        snaps[t.version] = _snap(t)
    return snaps, oldest


def _apply(start: dict[int, dict], feed: list[dict], cols: list[str]) -> dict[int, tuple]:
    copy = {k: tuple(r[c] for c in cols) for k, r in start.items()}
    for r in feed:
        if r["_change"] == "delete":
            copy.pop(r["k"], None)
        elif r["_change"] in ("insert", "update_after"):
            copy[r["k"]] = tuple(r[c] for c in cols)
    return copy


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(OP, min_size=2, max_size=9),
    log=st.sampled_from(["off", "on"]),
    buckets=st.sampled_from([1, 2, 3]),
    pairs=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=4),
    flt=st.sampled_from(list(FILTERS)),
    project=st.booleans(),
)
def test_table_wide_key_feed_against_snapshot_diffs(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[Any, ...]],
    log: str,
    buckets: int,
    pairs: list[tuple[int, int]],
    flt: str | None,
    project: bool,
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("feed")))
    props = {"compaction.auto": "off", "changes.log": log}
    t = cat.create_table("a.t", FEED_SCHEMA, primary_key="k", partition_by="p", buckets=buckets, properties=props)
    assert t.key_scope == "table"
    snaps, oldest = _run_workload(t, ops)
    versions = sorted(v for v in snaps if v >= oldest)
    cols = ["k", "p", "v"] if project else FEED_SCHEMA.names
    for x, y in pairs:
        a, b = sorted((versions[x % len(versions)], versions[y % len(versions)]))
        feeds = {}
        for per_read in (1, 2, 16):
            monkeypatch.setattr("mere.table.ops.change_log.SPLITS_PER_READ", per_read)
            feed = t.changes(a, b, columns=["v"] if project else None, filter=flt).read_all()
            assert set(feed.column_names[:2]) == {"k", "p"}
            rows = feed.to_pylist()
            feeds[per_read] = rows
            for r in rows:
                assert a < r["_version"] <= b, (a, b, r)
            # the feed's own order: applied to the start, it gives the end (no filter only)
            if flt is None:
                got = _apply(snaps[a], rows, cols)
                want = {k: tuple(r[c] for c in cols) for k, r in snaps[b].items()}
                assert got == want, (a, b, per_read, rows)
            # versions: an after image is the key's row at its version; a delete's row is gone there
            for r in rows:
                at = snaps[r["_version"]].get(r["k"])
                if r["_change"] in ("insert", "update_after"):
                    assert at is not None and all(at[c] == r[c] for c in cols), (a, b, r, at)
        # the multiset of rows (with versions) does not depend on how many splits are read at once
        norm = {n: Counter(tuple(sorted(r.items())) for r in rows) for n, rows in feeds.items()}
        assert norm[1] == norm[2] == norm[16], (a, b)
        # against the snapshot diff, filtered row by row
        keep = FILTERS[flt]
        want = Counter()
        for (change, row), n in _diff(snaps[a], snaps[b], FEED_SCHEMA.names).items():
            full = dict(zip(FEED_SCHEMA.names, row))
            if keep(full):
                want[(change, tuple(full[c] for c in cols))] += n
        got = Counter((r["_change"], tuple(r[c] for c in cols)) for r in feeds[16])
        if project:
            # an update of w alone: the projected images are equal (either kept as a pair or dropped)
            same = Counter()
            for (change, row), n in want.items():
                same[(change, row)] = n
            for (change, row), n in list(got.items()):
                if change in ("update_before", "update_after"):
                    got.pop((change, row))
            for (change, row), n in list(same.items()):
                if change in ("update_before", "update_after"):
                    same.pop((change, row))
            assert got == same, (a, b)
        else:
            assert got == want, (a, b, flt)
