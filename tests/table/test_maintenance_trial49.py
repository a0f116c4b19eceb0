"""Adversarial trial of a table fed by many tiny commits, and its maintenance.

The oracle is a plain dict model that keeps every version's expected contents (``{key: row}`` with the
columns that version has). A rule-based state machine mixes tiny upserts (whole and partial rows), CDC
batches, deletes by key and by predicate, UPDATE, MERGE, schema evolution (adding and dropping a column),
compaction (full, tiered and by the automatic policy), expire (cutoff now, a cutoff between versions, a
cutoff older than every version), rollback (by version and by tag), tags, cleanup, time travel (version=,
as_of=, tag=) and change feeds, through two handles of the same table (one of them from a second catalog
connection) so that maintenance and writes of one interleave with the other's. After every step the
current read equals the model, sampled retained versions read exactly their model (also through count(),
a filter on a non-key column and a projection), expired versions raise NoSuchVersion, tagged versions
stay readable.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import mere
from mere import errors

NAME = "m.t"
BASE = ["k", "v", "s"]
KEYS = st.integers(0, 11)
VALS = st.one_of(st.none(), st.integers(-5, 9))
STRS = st.sampled_from([None, "a", "b", "c"])
ROW = st.tuples(KEYS, VALS, STRS, st.one_of(st.none(), st.integers(0, 3)))
TAG_NAMES = st.sampled_from(["t1", "rel-2.0", "A_b", "9z", "x" * 128])

Snap = dict[int, dict[str, Any]]


def schema(with_w: bool) -> pa.Schema:
    fields = [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),
    ]
    if with_w:
        fields.append(pa.field("w", pa.int64()))
    return pa.schema(fields)


def by_key(table: pa.Table) -> Snap:
    out: Snap = {}
    for r in table.to_pylist():
        assert r["k"] not in out, f"key {r['k']} read twice"
        out[r["k"]] = r
    return out


def files_on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def add(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


class MaintenanceMachine(RuleBasedStateMachine):
    """One keyed table (CDC column ``op``), two handles, and the model of every version."""

    catalog_url: str | None = None  # None: the SQLite catalog inside the warehouse

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="maint49-")
        self.snaps: dict[int, Snap] = {}
        self.cols: dict[int, list[str]] = {}
        self.props: dict[int, dict[str, str]] = {}
        self.gens: dict[int, int] = {}  # which add_column made the version's ``w`` (field identity)
        self.gen = 0
        self.adds = 0
        self.abandoned: list[str] = []
        self.oldest = 0  # versions before it are readable only while a tag names them
        self.tagged: dict[str, int] = {}
        self.rng = random.Random(0)
        self.steps = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- setup and bookkeeping -------------------------------------------------------------------

    @initialize(
        auto=st.sampled_from(["off", "inline"]),
        min_files=st.sampled_from([2, 3, 8]),
        buckets=st.sampled_from([1, 2]),
    )
    def setup(self, auto: str, min_files: int, buckets: int) -> None:
        url = self.catalog_url
        if url is not None and url.startswith("postgresql"):
            url = type(self).make_pg_database()  # type: ignore[attr-defined]
        self.cat = mere.connect(self.root, catalog=url)
        props = {"compaction.auto": auto, "compaction.min-files": str(min_files), "retention.max-age": "off"}
        t = self.cat.create_table(
            NAME, schema(False), primary_key="k", buckets=buckets, cdc_column="op", properties=props
        )
        other = mere.connect(self.root, catalog=url) if url is not None else mere.connect(self.root)
        self.handles = [t, other.table(NAME)]
        self.model: Snap = {}
        self.current_cols = list(BASE)
        self.snaps[0] = {}
        self.cols[0] = list(BASE)
        self.policy = {"compaction.auto": auto, "compaction.min-files": str(min_files)}
        self.props[0] = dict(self.policy)
        self.gens[0] = 0
        self.last = 0
        self.last_op_was_maintenance = True
        assert t.version == 0

    def h(self, i: int) -> mere.Table:
        return self.handles[i]

    def newest(self) -> int:
        return self.handles[0].refresh().version

    def landed(self, data: bool = False) -> None:
        """Record the model for every version that landed since the last step (a write and the automatic
        compaction after it, which changes no row)."""
        newest = self.newest()
        assert newest >= self.last
        for v in range(self.last + 1, newest + 1):
            self.snaps[v] = {k: dict(r) for k, r in self.model.items()}
            self.cols[v] = list(self.current_cols)
            self.props[v] = dict(self.policy)
            self.gens[v] = self.gen
        self.last = newest
        self.last_op_was_maintenance = not data

    def write(self, i: int, call: Any, stale: tuple[type[Exception], ...] = ()) -> Any:
        """A write through handle ``i``; a stale handle whose columns changed refreshes and writes again,
        as the SchemaChanged message says."""
        try:
            return call(self.h(i))
        except (errors.SchemaChanged, errors.SchemaMismatch, *stale):
            # (SchemaMismatch: a stale handle refuses a column another handle added, see
            # test_a_stale_handle_writing_a_column_another_handle_added_is_told_to_refresh)
            self.h(i).refresh()
            return call(self.h(i))

    @property
    def expired(self) -> set[int]:
        tagged = set(self.tagged.values())
        return {v for v in self.snaps if v < self.oldest and v not in tagged}

    def readable(self) -> list[int]:
        return sorted(v for v in self.snaps if v not in self.expired)

    def row(self, k: int, v: Any, s: Any, w: Any) -> dict[str, Any]:
        r = {"k": k, "v": v, "s": s}
        if "w" in self.current_cols:
            r["w"] = w
        return r

    def arrow(self, rows: list[dict[str, Any]], cols: list[str]) -> pa.Table:
        sch = schema("w" in self.current_cols)
        fields = [sch.field(c) for c in cols if c != "op"]
        if "op" in cols:
            fields.append(pa.field("op", pa.string()))
        return pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows], schema=pa.schema(fields))

    # -- writes ----------------------------------------------------------------------------------

    @rule(i=st.integers(0, 1), rows=st.lists(ROW, min_size=1, max_size=3), whole=st.booleans())
    def upsert(self, i: int, rows: list[tuple[Any, ...]], whole: bool) -> None:
        with_w = "w" in self.current_cols
        cols = (["k", "v", "s"] + (["w"] if with_w else [])) if whole else ["k", "v"]
        batch = [self.row(k, v, s, w) for k, v, s, w in rows]
        self.write(i, lambda t: t.upsert(self.arrow(batch, cols)))
        for r in batch:
            old = self.model.get(r["k"])
            if whole or old is None:
                new = {c: None for c in self.current_cols}
                new.update({c: r[c] for c in cols})
            else:
                new = dict(old)
                new["v"] = r["v"]
            self.model[r["k"]] = new
        self.landed(data=True)

    @rule(
        i=st.integers(0, 1),
        rows=st.lists(st.tuples(ROW, st.sampled_from(["I", "U", "D", "d", " +U "])), min_size=1, max_size=4),
    )
    def cdc_batch(self, i: int, rows: list[tuple[tuple[Any, ...], str]]) -> None:
        cols = [*self.current_cols, "op"]
        batch = []
        for (k, v, s, w), op in rows:
            r = self.row(k, v, s, w)
            r["op"] = op
            batch.append(r)
        self.write(i, lambda t: t.upsert(self.arrow(batch, cols)))
        for r in batch:
            if r["op"].strip().upper() == "D":
                self.model.pop(r["k"], None)
            else:
                self.model[r["k"]] = {c: r[c] for c in self.current_cols}
        self.landed(data=True)

    @rule(i=st.integers(0, 1), keys=st.lists(KEYS, min_size=1, max_size=3))
    def delete_keys(self, i: int, keys: list[int]) -> None:
        self.write(i, lambda t: t.delete(pa.table({"k": pa.array(keys, pa.int64())})))
        for k in keys:
            self.model.pop(k, None)
        self.landed(data=True)

    @rule(
        i=st.integers(0, 1),
        pred=st.sampled_from(["v > 5", "s = 'b'", "v IS NULL", "v < 0 and s = 'a'", "FALSE"]),
    )
    def delete_where(self, i: int, pred: str) -> None:
        self.write(i, lambda t: t.delete(pred))
        match = {
            "v > 5": lambda r: r["v"] is not None and r["v"] > 5,
            "s = 'b'": lambda r: r["s"] == "b",
            "v IS NULL": lambda r: r["v"] is None,
            "v < 0 and s = 'a'": lambda r: r["v"] is not None and r["v"] < 0 and r["s"] == "a",
            "FALSE": lambda r: False,
        }[pred]
        self.model = {k: r for k, r in self.model.items() if not match(r)}
        self.landed(data=True)

    @rule(i=st.integers(0, 1), which=st.integers(0, 2), d=st.integers(-3, 3))
    def update(self, i: int, which: int, d: int) -> None:
        if which == 0:
            self.write(i, lambda t: t.update(set={"v": f"v + {d}"}, where="s = 'a'"))
            for r in self.model.values():
                if r["s"] == "a":
                    r["v"] = add(r["v"], d)
        elif which == 1:
            self.write(i, lambda t: t.update(set={"s": "'c'"}, where=f"v > {d}"))
            for r in self.model.values():
                if r["v"] is not None and r["v"] > d:
                    r["s"] = "c"
        else:
            if "w" not in self.current_cols:
                return
            self.write(i, lambda t: t.update(set={"w": f"coalesce(v, 0) * {d}"}))
            for r in self.model.values():
                r["w"] = (r["v"] or 0) * d
        self.landed(data=True)

    @rule(i=st.integers(0, 1), rows=st.lists(ROW, min_size=1, max_size=4, unique_by=lambda r: r[0]))
    def merge(self, i: int, rows: list[tuple[Any, ...]]) -> None:
        src = pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.int64()),
                "v": pa.array([r[1] for r in rows], pa.int64()),
                "s": pa.array([r[2] for r in rows], pa.string()),
            }
        )

        def run(t: mere.Table) -> Any:
            return (
                t.merge(src)
                .when_matched_delete(condition="s.v < 0")
                .when_matched_update(set={"v": "t.v + s.v"})
                .when_not_matched_insert_all()
                .execute()
            )

        self.write(i, run)
        for k, v, s, _ in rows:
            old = self.model.get(k)
            if old is None:
                new = {c: None for c in self.current_cols}
                new.update({"k": k, "v": v, "s": s})
                self.model[k] = new
            elif v is not None and v < 0:
                del self.model[k]
            else:
                old["v"] = add(old["v"], v)
        self.landed(data=True)

    @rule(i=st.integers(0, 1), default=st.sampled_from([None, 7]))
    def evolve(self, i: int, default: Any) -> None:
        if "w" in self.current_cols:
            # (a stale handle that never saw the column refuses with SchemaMismatch: refresh, drop)
            self.write(i, lambda t: t.drop_column("w"), stale=(errors.SchemaMismatch,))
            self.current_cols.remove("w")
            for r in self.model.values():
                del r["w"]
        else:
            self.write(i, lambda t: t.add_column("w", pa.int64(), default), stale=(errors.SchemaMismatch,))
            self.current_cols.append("w")
            self.adds += 1
            self.gen = self.adds
            for r in self.model.values():
                r["w"] = default
        self.landed()

    @rule(i=st.integers(0, 1), data=st.data())
    def restore_by_overwrite(self, i: int, data: st.DataObject) -> None:
        """A user's restore: overwrite the table with an older version's rows (same columns only)."""
        same = [v for v in self.readable() if self.cols[v] == self.current_cols and self.gens[v] == self.gen]
        v = data.draw(st.sampled_from(same)) if same else self.last
        self.write(i, lambda t: t.overwrite(t.to_arrow(version=v).select(self.current_cols)))
        self.model = {k: dict(r) for k, r in self.snaps[v].items()}
        self.landed(data=True)

    @rule(i=st.integers(0, 1), rows=st.lists(ROW, min_size=1, max_size=2))
    def abandoned_stage(self, i: int, rows: list[tuple[Any, ...]]) -> None:
        """A worker's staged write that is never committed: garbage for cleanup, invisible to reads."""
        batch = [self.row(k, v, s, w) for k, v, s, w in rows]
        staged = self.write(i, lambda t: t.stage(self.arrow(batch, self.current_cols)))
        self.abandoned += [f.path for f in staged.files]
        assert self.newest() == self.last

    @rule(i=st.integers(0, 1))
    def truncate(self, i: int) -> None:
        self.write(i, lambda t: t.truncate())
        self.model = {}
        self.landed(data=True)

    @rule(i=st.integers(0, 1), auto=st.sampled_from(["off", "inline"]), min_files=st.sampled_from([2, 4]))
    def set_policy(self, i: int, auto: str, min_files: int) -> None:
        change = {"compaction.auto": auto, "compaction.min-files": str(min_files)}
        self.write(i, lambda t: t.set_properties(change))
        self.policy = change
        self.landed()

    # -- maintenance -----------------------------------------------------------------------------

    @rule(i=st.integers(0, 1), how=st.sampled_from(["full", "min1", "tiered", "auto"]))
    def compact(self, i: int, how: str) -> None:
        call = {
            "full": lambda t: t.compact(),
            "min1": lambda t: t.compact(min_files=1),
            "tiered": lambda t: t.compact(tiered=True),
            "auto": lambda t: t.auto_compact(),
        }[how]
        self.write(i, call)  # (a stale handle's compaction refuses with SchemaChanged, as writes do)
        self.landed()

    @rule(i=st.integers(0, 1))
    def expire_now(self, i: int) -> None:
        t = self.h(i)
        dry = t.expire(older_than=dt.timedelta(0))
        assert self.newest() == self.last  # a dry run commits nothing
        for v in self.readable():  # and expires nothing
            t.resolve_version(v)
        done = t.expire(older_than=dt.timedelta(0), dry_run=False)
        assert set(done) == set(dry), "the dry run listed other files than expire deleted"
        self.oldest = self.last

    @rule(i=st.integers(0, 1), data=st.data())
    def expire_between(self, i: int, data: st.DataObject) -> None:
        """A cutoff at the commit time of a chosen retained version: that version (or, when the next ones
        landed within the call's own latency, one of them) stays, the older ones go."""
        t = self.h(i)
        readable = self.readable()
        v = data.draw(st.sampled_from(readable))
        at = t.snapshot(version=v).committed_at
        started = dt.datetime.now(dt.UTC)
        t.expire(older_than=started - at, dry_run=False)
        slack = dt.datetime.now(dt.UTC) - started
        hist = {s.version: s for s in t.history()}
        allowed = {u for u in readable if u >= v and hist[u].committed_at <= at + slack}
        gone = {u for u in readable if hist[u].expired}
        keeps = [
            u for u in allowed if gone == {x for x in readable if x < u and x not in self.tagged.values()}
        ]
        assert keeps, (v, sorted(gone), sorted(allowed))
        self.oldest = max(self.oldest, keeps[0])

    @rule(i=st.integers(0, 1))
    def expire_nothing_old_enough(self, i: int) -> None:
        t = self.h(i)
        assert t.expire(older_than=dt.timedelta(days=3650), dry_run=False) == []
        assert t.expire(older_than=dt.timedelta.max, dry_run=False) == []

    @rule(i=st.integers(0, 1), data=st.data())
    def rollback(self, i: int, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from(self.readable()))
        self.h(i).refresh()  # (a stale handle restores no properties: see test_a_stale_handle_s_rollback_...)
        self.write(i, lambda t: t.rollback(v))
        self.model = {k: dict(r) for k, r in self.snaps[v].items()}
        self.current_cols = list(self.cols[v])
        self.policy = dict(self.props[v])  # a rollback brings its version's properties back
        self.gen = self.gens[v]
        self.landed()

    @precondition(lambda self: bool(self.tagged))
    @rule(i=st.integers(0, 1), data=st.data())
    def rollback_tag(self, i: int, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.tagged)))
        v = self.tagged[name]
        self.h(i).refresh()  # (as in rollback)
        self.write(i, lambda t: t.rollback(tag=name))
        self.model = {k: dict(r) for k, r in self.snaps[v].items()}
        self.current_cols = list(self.cols[v])
        self.policy = dict(self.props[v])  # a rollback brings its version's properties back
        self.gen = self.gens[v]
        self.landed()

    @rule(i=st.integers(0, 1), name=TAG_NAMES, data=st.data())
    def tag(self, i: int, name: str, data: st.DataObject) -> None:
        t = self.h(i)
        v = data.draw(st.sampled_from(self.readable()))
        if name in self.tagged:
            with pytest.raises(errors.TagExists):
                t.tag(name, v)
            assert t.tag(name, v, replace=True) == v
        else:
            assert t.tag(name, v) == v
        self.tagged[name] = v

    @rule(i=st.integers(0, 1), data=st.data())
    def tag_expired(self, i: int, data: st.DataObject) -> None:
        gone = sorted(self.expired - set(self.tagged.values()))
        if not gone:
            return
        v = data.draw(st.sampled_from(gone))
        with pytest.raises(errors.NoSuchVersion):
            self.h(i).tag("late", v)
        with pytest.raises(errors.NoSuchVersion):
            self.h(i).rollback(v)
        assert self.newest() == self.last

    @precondition(lambda self: bool(self.tagged))
    @rule(i=st.integers(0, 1), data=st.data())
    def untag(self, i: int, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.tagged)))
        self.h(i).untag(name)
        del self.tagged[name]
        with pytest.raises(errors.NoSuchTag):
            self.h(i).untag(name)

    @rule(i=st.integers(0, 1))
    def cleanup(self, i: int) -> None:
        t = self.h(i)
        dry = t.cleanup(older_than=dt.timedelta(0))
        done = t.cleanup(older_than=dt.timedelta(0), dry_run=False)
        assert set(done) == set(dry), "cleanup deleted other files than its dry run listed"
        assert set(self.abandoned) <= set(done)  # the files of abandoned staged writes go
        self.abandoned = []
        for v in self.readable():  # every retained version keeps its files
            assert by_key(t.to_arrow(version=v)) == self.snaps[v], v

    # -- reads -----------------------------------------------------------------------------------

    @rule(data=st.data())
    def change_feed(self, data: st.DataObject) -> None:
        readable = self.readable()
        a = data.draw(st.sampled_from(readable))
        b = data.draw(st.sampled_from([u for u in readable if u >= a]))
        t = self.h(data.draw(st.integers(0, 1)))
        broken = any(u in self.expired for u in range(a, b + 1))
        if broken:
            with pytest.raises(errors.NoSuchVersion):
                t.changes(a, b).read_all()
            return
        if not (
            self.cols[a] == self.cols[b] == self.current_cols and self.gens[a] == self.gens[b] == self.gen
        ):
            # (the feed speaks the current columns: a ``w`` dropped and added again is another column, whose
            # values an older version's own ``w`` does not give)
            return
        feed = t.changes(a, b).read_all().to_pylist()
        got = {k: dict(r) for k, r in self.snaps[a].items()}
        after = []
        for r in feed:
            ch = r.pop("_change")
            del r["_version"], r["_commit_time"]
            if ch in ("delete", "update_before"):
                assert got.pop(r["k"]) == r, (ch, r)
            else:
                assert ch in ("insert", "update_after"), ch
                after.append(r)
        for r in after:
            assert r["k"] not in got, r
            got[r["k"]] = r
        assert got == self.snaps[b], (a, b)

    @rule(data=st.data())
    def read_expired(self, data: st.DataObject) -> None:
        gone = sorted(self.expired - set(self.tagged.values()))
        if not gone:
            return
        v = data.draw(st.sampled_from(gone))
        t = self.h(data.draw(st.integers(0, 1)))
        for call in (
            lambda: t.to_arrow(version=v),
            lambda: t.scan(version=v).count(),
            lambda: t.scan(columns=["v"], filter="v > 0", version=v).to_arrow(),
            lambda: t.files_at(v),
            lambda: t.rollback(v),
        ):
            with pytest.raises(errors.NoSuchVersion):
                call()
        assert self.newest() == self.last

    @rule()
    def read_every_version(self) -> None:
        for v in self.readable():
            self.check_version(self.h(v % 2), v)

    def check_version(self, t: mere.Table, v: int) -> None:
        want = self.snaps[v]
        got = t.to_arrow(version=v)
        assert sorted(got.column_names) == sorted(self.cols[v]), (v, got.column_names, self.cols[v])
        assert by_key(got) == want, v
        assert t.scan(version=v).count() == len(want), v
        pos = sorted(k for k, r in want.items() if r["v"] is not None and r["v"] > 2)
        assert (
            sorted(t.scan(columns=["k"], filter="v > 2", version=v).to_arrow().column("k").to_pylist()) == pos
        )
        assert t.scan(filter="s = 'a'", version=v).count() == sum(r["s"] == "a" for r in want.values())
        proj = t.scan(columns=["s"], version=v).to_arrow()
        assert proj.column_names == ["s"]
        assert sorted(map(repr, proj.column("s").to_pylist())) == sorted(repr(r["s"]) for r in want.values())

    @invariant()
    def current_and_sampled_versions_match_the_model(self) -> None:
        if not hasattr(self, "handles"):
            return
        self.steps += 1
        for t in self.handles:  # a stale handle reads the newest version too
            assert by_key(t.to_arrow()) == self.model
        t = self.handles[self.steps % 2]
        self.check_version(t, self.last)
        readable = self.readable()
        for v in self.rng.sample(readable, min(2, len(readable))):
            self.check_version(t, v)
        for name, v in self.tagged.items():
            assert by_key(t.to_arrow(tag=name)) == self.snaps[v], name
        assert t.tags() == self.tagged
        props = t.refresh().properties
        assert {k: props.get(k) for k in self.policy} == self.policy
        if self.policy["compaction.auto"] == "inline":  # the policy leaves no split due after a write
            assert len(t.compaction_due()) == 0 or self.last_op_was_maintenance
        # as_of: the newest version committed at or before a retained version's time
        hist = {s.version: s for s in t.history()}
        for v in self.rng.sample(readable, min(1, len(readable))):
            at = hist[v].committed_at
            if v + 1 in hist and hist[v + 1].committed_at == at:
                continue
            assert t.resolve_version(as_of=at) == v
            assert by_key(t.to_arrow(as_of=at)) == self.snaps[v]
        for v in self.snaps:
            assert hist[v].expired == (v in self.expired), (v, hist[v])
        if self.expired:
            v = self.rng.choice(sorted(self.expired))
            with pytest.raises(errors.NoSuchVersion):
                t.scan(version=v)


MACHINE_SETTINGS = settings(
    max_examples=int(os.environ.get("MAINT49_EXAMPLES", "8")),
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("MAINT49_NOSHRINK")
    else tuple(Phase),
    stateful_step_count=int(os.environ.get("MAINT49_STEPS", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_maintenance_machine_on_sqlite() -> None:
    run_state_machine_as_test(MaintenanceMachine, settings=MACHINE_SETTINGS)


@pytest.mark.postgres
def test_maintenance_machine_on_postgresql(pg_server: Any) -> None:
    counter = iter(range(10_000))

    class OnPostgres(MaintenanceMachine):
        catalog_url = "postgresql"

        @staticmethod
        def make_pg_database() -> str:
            return pg_server.create_database(f"maint49_{time.time_ns()}_{next(counter)}")

    run_state_machine_as_test(
        OnPostgres,
        settings=settings(
            MACHINE_SETTINGS,
            max_examples=int(os.environ.get("MAINT49_PG_EXAMPLES", "3")),
            stateful_step_count=int(os.environ.get("MAINT49_STEPS", "15")),
        ),
    )


# -- targeted tests --------------------------------------------------------------------------------------


def keyed(root: Any, **props: str) -> mere.Table:
    properties = {"compaction.auto": "off", "retention.max-age": "off", **props}
    return mere.connect(str(root)).create_table(
        NAME, schema(False), primary_key="k", buckets=2, properties=properties
    )


def put(t: mere.Table, rows: dict[int, int]) -> None:
    t.upsert(
        pa.table({"k": pa.array(list(rows), pa.int64()), "v": pa.array(list(rows.values()), pa.int64())})
    )


def state(t: mere.Table) -> tuple[Any, ...]:
    t = t.refresh()
    return (
        t.version,
        [(s.version, s.operation, s.expired) for s in t.history()],
        t.tags(),
        files_on_disk(t),
        t.properties,
        sorted(map(repr, t.to_arrow().to_pylist())),
    )


def test_a_table_fed_200_tiny_commits_with_auto_compaction_does_not_decay(tmp_path: Path) -> None:
    """200 one-row upserts over 40 keys: the live files per split stay bounded by the policy, the reads
    stay exact, and the last reads take no longer than the early ones (generously)."""
    t = keyed(tmp_path, **{"compaction.auto": "inline", "compaction.min-files": "4"})
    model: dict[int, int] = {}
    worst = 0
    early: list[float] = []
    late: list[float] = []
    rnd = random.Random(49)
    for i in range(200):
        k = rnd.randrange(40)
        put(t, {k: i})
        model[k] = i
        per_split: dict[tuple[str, int], int] = {}
        for r in t.files().to_pylist():
            split = (str(r.get("partition")), r["bucket"])
            per_split[split] = per_split.get(split, 0) + 1
        worst = max(worst, *per_split.values())
        assert max(per_split.values()) <= 8, (i, per_split)
        if i % 10 == 9:
            started = time.perf_counter()
            got = {r["k"]: r["v"] for r in t.to_arrow().to_pylist()}
            took = time.perf_counter() - started
            assert got == model, i
            (early if i < 60 else late if i >= 140 else []).append(took)
    assert len(t.files()) <= 2 * 8
    assert sorted(late)[len(late) // 2] < 5 * sorted(early)[len(early) // 2] + 0.05
    # expire then cleanup leave only what the newest version needs on disk
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == model


def test_tiered_compaction_by_hand_also_keeps_runs_bounded(tmp_path: Path) -> None:
    t = keyed(tmp_path, **{"compaction.min-files": "3"})
    model: dict[int, int] = {}
    for i in range(60):
        put(t, {i % 7: i, 100 + i: i})
        model.update({i % 7: i, 100 + i: i})
        t.auto_compact()
        assert len(t.files()) <= 2 * 6, (i, len(t.files()))  # two buckets, bounded runs each
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == model
    assert t.compaction_due() == []
    t.compact(tiered=True)
    t.compact()
    assert len(t.files()) <= 2
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == model


def test_a_keyless_table_under_appends_and_maintenance_keeps_every_version(tmp_path: Path) -> None:
    """Appends (duplicates allowed), deletes by predicate, UPDATE, compaction, rollback, expire and cleanup
    on a table without key: each retained version reads its multiset of rows."""
    t = mere.connect(str(tmp_path)).create_table(
        "m.log", schema(False), properties={"compaction.auto": "off", "retention.max-age": "off"}
    )
    snaps: dict[int, list[tuple[Any, ...]]] = {0: []}
    rows: list[tuple[Any, ...]] = []
    rnd = random.Random(7)

    def read(**kw: Any) -> list[tuple[Any, ...]]:
        return [(r["k"], r["v"], r["s"]) for r in t.to_arrow(**kw).to_pylist()]

    def key(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((x is None, x) for x in r)

    for step in range(40):
        op = rnd.choice(["append", "append", "append", "delete", "update", "compact", "rollback", "expire"])
        if op == "append":
            new = [
                (rnd.randrange(5), rnd.choice([None, rnd.randrange(9)]), rnd.choice(["a", "b"]))
                for _ in range(2)
            ]
            t.append(
                pa.Table.from_pylist([dict(zip(BASE, r, strict=True)) for r in new], schema=schema(False))
            )
            rows += new
        elif op == "delete":
            t.delete("k = 1")
            rows = [r for r in rows if r[0] != 1]
        elif op == "update":
            t.update(set={"v": "coalesce(v, 0) + 1"}, where="s = 'b'")
            rows = [(k, (v or 0) + 1, s) if s == "b" else (k, v, s) for k, v, s in rows]
        elif op == "compact":
            t.compact(min_files=1)
        elif op == "rollback":
            v = rnd.choice(sorted(u for u in snaps if t._expired(u) is False))
            t.rollback(v)
            rows = list(snaps[v])
        else:
            t.expire(older_than=dt.timedelta(0), dry_run=False)
            t.cleanup(older_than=dt.timedelta(0), dry_run=False)
        for v in range(max(snaps) + 1, t.refresh().version + 1):
            snaps[v] = list(rows)
        assert sorted(read(), key=key) == sorted(rows, key=key), (step, op)
        assert t.scan().count() == len(rows)
        for v, want in snaps.items():
            if not t._expired(v):
                assert sorted(read(version=v), key=key) == sorted(want, key=key), (step, v)


def test_untagging_a_version_an_expire_passed_over_gives_it_up_at_once(tmp_path: Path) -> None:
    """``Table.untag``: a version older than the oldest readable one, kept only by its tag, is given up
    when the tag goes (its files at the next expire); a version the expire has not passed stays readable."""
    t = keyed(tmp_path)
    put(t, {1: 1})  # v1
    t.tag("keep", 1)
    put(t, {1: 2})  # v2
    t.compact(min_files=1)  # v3
    t.tag("newer", 2)
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert t.to_arrow(version=1).to_pylist() == [{"k": 1, "v": 1, "s": None}]
    t.untag("keep")
    with pytest.raises(errors.NoSuchVersion):
        t.to_arrow(version=1)
    t.untag("newer")
    assert t.to_arrow(version=3).to_pylist() == [{"k": 1, "v": 2, "s": None}]


def test_untag_then_expire_gives_the_old_versions_files_back(tmp_path: Path) -> None:
    """Whatever untag does to readability: the next expire deletes the files only the untagged version
    used (no leak), and never a file a retained version reads."""
    t = keyed(tmp_path)
    put(t, {1: 1, 2: 2})  # v1
    t.tag("keep", 1)
    put(t, {1: 3})  # v2
    t.compact(min_files=1)  # v3
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    held = files_on_disk(t)
    assert held > set(t.files().column("path").to_pylist())  # the tag holds v1's files
    t.untag("keep")
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())
    assert sorted(map(repr, t.to_arrow().to_pylist())) == sorted(
        map(repr, [{"k": 1, "v": 3, "s": None}, {"k": 2, "v": 2, "s": None}])
    )


def test_moving_a_tag_off_a_version_an_expire_passed_over_gives_it_up_at_once(tmp_path: Path) -> None:
    """``tag(name, v, replace=True)`` moves a tag; a version it left that only it kept is given up, as by
    untag."""
    t = keyed(tmp_path)
    put(t, {1: 1})  # v1
    t.tag("keep", 1)
    put(t, {1: 2})  # v2
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.tag("keep", 2, replace=True)
    with pytest.raises(errors.NoSuchVersion):
        t.to_arrow(version=1)
    assert t.to_arrow(version=2).column("v").to_pylist() == [2]


def test_a_stale_handle_writing_a_column_another_handle_added_is_told_to_refresh(tmp_path: Path) -> None:
    """A handle loaded before another added column ``w`` upserts rows carrying ``w``: the table has the
    column, so the write should succeed or raise SchemaChanged ("refresh() the table and write again"),
    as every other stale-handle write does; a SchemaMismatch saying the table lacks the column is false."""
    t = keyed(tmp_path)
    put(t, {1: 1})
    stale = mere.connect(str(tmp_path)).table(NAME)
    t.add_column("w", pa.int64())
    rows = pa.table(
        {"k": pa.array([2], pa.int64()), "v": pa.array([2], pa.int64()), "w": pa.array([9], pa.int64())}
    )
    with contextlib.suppress(errors.SchemaChanged):
        stale.upsert(rows)
    assert t.refresh().schema.names == ["k", "v", "s", "w"]


def test_a_stale_handle_dropping_a_column_another_handle_added_is_told_to_refresh(tmp_path: Path) -> None:
    t = keyed(tmp_path)
    stale = mere.connect(str(tmp_path)).table(NAME)
    t.add_column("w", pa.int64())
    with contextlib.suppress(errors.SchemaChanged):
        stale.drop_column("w")
    assert "w" in t.refresh().schema.names or stale.refresh().schema.names == ["k", "v", "s"]


def test_auto_expire_keeps_min_versions_and_tags(tmp_path: Path) -> None:
    """retention.max-age=1s with retention.min-versions=3: after the age passes, a commit expires every
    version but the newest three, the one current at the cutoff, and the tagged one."""
    t = keyed(tmp_path, **{"retention.max-age": "1s", "retention.min-versions": "3"})
    for i in range(6):
        put(t, {i: i})  # v1..v6
    t.tag("two", 2)
    time.sleep(1.3)
    put(t, {9: 9})  # v7: the policy runs after it
    t.auto_expire()
    readable = [v for v in range(8) if not t._expired(v)]
    assert readable == [2, 5, 6, 7], readable
    assert [r["k"] for r in t.to_arrow(tag="two").to_pylist()] == [0, 1] or sorted(
        r["k"] for r in t.to_arrow(tag="two").to_pylist()
    ) == [0, 1]


# -- bad arguments ---------------------------------------------------------------------------------------

TD = dt.timedelta
BAD_MAINTENANCE_CALLS: list[tuple[str, Any]] = [
    ("expire(-1s)", lambda t: t.expire(older_than=TD(seconds=-1), dry_run=False)),
    ("expire(5)", lambda t: t.expire(older_than=5, dry_run=False)),
    ("expire(0)", lambda t: t.expire(older_than=0, dry_run=False)),
    ("expire('7d')", lambda t: t.expire(older_than="7d", dry_run=False)),
    ("expire(None)", lambda t: t.expire(older_than=None, dry_run=False)),
    ("expire(dry_run='no')", lambda t: t.expire(older_than=TD(0), dry_run="no")),
    ("expire(dry_run=0)", lambda t: t.expire(older_than=TD(0), dry_run=0)),
    ("expire(dry_run=None)", lambda t: t.expire(older_than=TD(0), dry_run=None)),
    ("expire(-max)", lambda t: t.expire(older_than=TD.min, dry_run=False)),
    ("cleanup(-1s)", lambda t: t.cleanup(older_than=TD(seconds=-1), dry_run=False)),
    ("cleanup(3600)", lambda t: t.cleanup(older_than=3600, dry_run=False)),
    ("cleanup(dry_run='no')", lambda t: t.cleanup(older_than=TD(0), dry_run="no")),
    ("cleanup(dry_run=0)", lambda t: t.cleanup(older_than=TD(0), dry_run=0)),
    ("compact(min_files=0)", lambda t: t.compact(min_files=0)),
    ("compact(min_files=-1)", lambda t: t.compact(min_files=-1)),
    ("compact(min_files='2')", lambda t: t.compact(min_files="2")),
    ("compact(min_files=True)", lambda t: t.compact(min_files=True)),
    ("compact(min_files=1.5)", lambda t: t.compact(min_files=1.5)),
    ("compact(min_files=None)", lambda t: t.compact(min_files=None)),
    ("compact(partition=nope)", lambda t: t.compact(min_files=1, partition={"nope": 1})),
    ("compact(partition='x')", lambda t: t.compact(min_files=1, partition="x")),
    ("compact(splits=bad bucket)", lambda t: t.compact(min_files=1, splits=[("{}", 99)])),
    ("compact(splits=-1 bucket)", lambda t: t.compact(min_files=1, splits=[("{}", -1)])),
    ("compact(splits='abc')", lambda t: t.compact(min_files=1, splits="abc")),
    ("compact(splits=[1])", lambda t: t.compact(min_files=1, splits=[1])),
    ("compact(splits=[(None, 0)])", lambda t: t.compact(min_files=1, splits=[(None, 0)])),
    ("compact(tiered='yes')", lambda t: t.compact(tiered="yes")),
    ("compact(tiered=None)", lambda t: t.compact(tiered=None)),
    ("compact(run=5)", lambda t: t.compact(min_files=1, run=5)),
    ("plan_compaction(min_files=0)", lambda t: t.plan_compaction(min_files=0)),
    ("plan_compaction(tiered=1)", lambda t: t.plan_compaction(tiered=1)),
    ("auto_compact(-1)", lambda t: t.auto_compact(-1)),
    ("auto_compact(99)", lambda t: t.auto_compact(99)),
    ("auto_compact('1')", lambda t: t.auto_compact("1")),
    ("auto_compact(True)", lambda t: t.auto_compact(True)),
    ("auto_compact(1.0)", lambda t: t.auto_compact(1.0)),
    ("auto_compact(expired 1)", lambda t: t.auto_compact(1)),
    ("compaction_due(99)", lambda t: t.compaction_due(99)),
    ("compaction_due(-1)", lambda t: t.compaction_due(-1)),
    ("compaction_due('x')", lambda t: t.compaction_due("x")),
    ("compaction_due(expired 1)", lambda t: t.compaction_due(1)),
    ("rollback(-1)", lambda t: t.rollback(-1)),
    ("rollback(10**30)", lambda t: t.rollback(10**30)),
    ("rollback(expired 1)", lambda t: t.rollback(1)),
    ("rollback(2.0)", lambda t: t.rollback(2.0)),
    ("rollback(tag=' ')", lambda t: t.rollback(tag=" ")),
    ("tag(' ')", lambda t: t.tag(" ")),
    ("tag('.hidden')", lambda t: t.tag(".hidden")),
    ("tag('..')", lambda t: t.tag("..")),
    ("tag('a\\n')", lambda t: t.tag("a\n")),
    ("tag('a\\x00')", lambda t: t.tag("a\x00")),
    ("tag('a;drop')", lambda t: t.tag("a;drop table mere_tags")),
    ('tag("a\'b")', lambda t: t.tag("a'b")),
    ("tag('a%')", lambda t: t.tag("a%")),
    ("tag(b'x')", lambda t: t.tag(b"x")),
    ("tag(v=10**30)", lambda t: t.tag("n", 10**30)),
    ("tag(v=-10**30)", lambda t: t.tag("n", -(10**30))),
    ("tag(v=expired 1)", lambda t: t.tag("n", 1)),
    ("tag(v=2.0)", lambda t: t.tag("n", 2.0)),
    ("untag('ghost')", lambda t: t.untag("ghost")),
    ("untag('a%')", lambda t: t.untag("k%")),
    ("untag('_')", lambda t: t.untag("_")),
    ("untag(None)", lambda t: t.untag(None)),
    ("changes(-1)", lambda t: t.changes(-1).read_all()),
    ("changes(99)", lambda t: t.changes(99).read_all()),
    ("changes(3, 2)", lambda t: t.changes(3, 2).read_all()),
    ("changes(expired 1)", lambda t: t.changes(1).read_all()),
    ("changes('2')", lambda t: t.changes("2").read_all()),
    ("changes(True)", lambda t: t.changes(True).read_all()),
    ("changes(2, 10**30)", lambda t: t.changes(2, 10**30).read_all()),
    ("scan(version=-1)", lambda t: t.scan(version=-1)),
    ("scan(version=10**30)", lambda t: t.scan(version=10**30)),
    ("scan(version=2.0)", lambda t: t.scan(version=2.0)),
    ("scan(version='2')", lambda t: t.scan(version="2")),
    ("scan(as_of='garbage')", lambda t: t.scan(as_of="garbage")),
    ("scan(as_of=1970)", lambda t: t.scan(as_of=dt.datetime(1970, 1, 1, tzinfo=dt.UTC))),
    ("scan(as_of=-1e30)", lambda t: t.scan(as_of=-1e30)),
    ("scan(as_of=nan)", lambda t: t.scan(as_of=float("nan"))),
    ("scan(as_of=inf)", lambda t: t.scan(as_of=float("inf"))),
    ("scan(as_of=1e30)", lambda t: t.scan(as_of=1e30)),
    ("scan(as_of=10**30)", lambda t: t.scan(as_of=10**30)),
    ("snapshot(as_of=year 1)", lambda t: t.snapshot(as_of=dt.datetime(1, 1, 1, tzinfo=dt.UTC))),
    ("set retention.min-versions=0", lambda t: t.set_properties({"retention.min-versions": "0"})),
    ("set retention.min-versions=-1", lambda t: t.set_properties({"retention.min-versions": -1})),
    ("set retention.min-versions=abc", lambda t: t.set_properties({"retention.min-versions": "abc"})),
    ("set retention.min-versions=1.5", lambda t: t.set_properties({"retention.min-versions": "1.5"})),
    ("set retention.min-versions=''", lambda t: t.set_properties({"retention.min-versions": ""})),
    ("set retention.max-age=-1d", lambda t: t.set_properties({"retention.max-age": "-1d"})),
    ("set retention.max-age=abc", lambda t: t.set_properties({"retention.max-age": "abc"})),
    (
        "set retention.max-age=1e400d",
        lambda t: t.set_properties({"retention.max-age": "1" + "0" * 400 + "d"}),
    ),
    ("set retention.max-age=7", lambda t: t.set_properties({"retention.max-age": 7})),
    ("set compaction.min-files=1", lambda t: t.set_properties({"compaction.min-files": "1"})),
    ("set compaction.min-files=0", lambda t: t.set_properties({"compaction.min-files": 0})),
    ("set compaction.min-files=-3", lambda t: t.set_properties({"compaction.min-files": "-3"})),
    ("set compaction.min-files=x", lambda t: t.set_properties({"compaction.min-files": "x"})),
    ("set compaction.auto=yes", lambda t: t.set_properties({"compaction.auto": "yes"})),
    (
        "set compaction.size-amplification-percent=0",
        lambda t: t.set_properties({"compaction.size-amplification-percent": "0"}),
    ),
    ("set properties=None", lambda t: t.set_properties(None)),
    ("set properties=list", lambda t: t.set_properties([("retention.min-versions", "2")])),
]


def bad_call_table(root: Path) -> mere.Table:
    """Versions 1..4, the first two expired, tag 'k1' on version 3, unreferenced junk none."""
    t = keyed(root)
    put(t, {1: 1})  # v1
    put(t, {2: 2})  # v2
    t.compact(min_files=1)  # v3
    t.expire(older_than=dt.timedelta(0), dry_run=False)  # 1, 2 expire
    t.tag("k1", 3)
    put(t, {3: 3})  # v4
    return t


@pytest.mark.parametrize(("what", "call"), BAD_MAINTENANCE_CALLS, ids=[c[0] for c in BAD_MAINTENANCE_CALLS])
def test_bad_arguments_to_maintenance_are_typed_and_change_nothing(
    tmp_path: Path, what: str, call: Any
) -> None:
    t = bad_call_table(tmp_path)
    before = state(t)
    with pytest.raises(errors.MereError):
        call(t)
    assert state(t) == before, what
    assert state(mere.connect(str(tmp_path)).table(NAME)) == before


HUGE_BUT_VALID: list[tuple[str, Any]] = [
    ("compact(min_files=10**30)", lambda t: t.compact(min_files=10**30)),
    ("plan_compaction(min_files=10**30)", lambda t: t.plan_compaction(min_files=10**30)),
    ("expire(max)", lambda t: t.expire(older_than=TD.max, dry_run=False)),
    ("cleanup(max)", lambda t: t.cleanup(older_than=TD.max, dry_run=False)),
    ("expire(10000 years)", lambda t: t.expire(older_than=TD(days=3650000), dry_run=False)),
    (
        "set retention.min-versions=10**20",
        lambda t: t.set_properties({"retention.min-versions": str(10**20)}),
    ),
    ("set compaction.min-files=10**20", lambda t: t.set_properties({"compaction.min-files": str(10**20)})),
    ("set retention.max-age=100000d", lambda t: t.set_properties({"retention.max-age": "100000d"})),
    ("set retention.max-age=0s", lambda t: t.set_properties({"retention.max-age": "0s"})),
]


@pytest.mark.parametrize(("what", "call"), HUGE_BUT_VALID, ids=[c[0] for c in HUGE_BUT_VALID])
def test_huge_maintenance_values_never_crash_nor_lose_rows(tmp_path: Path, what: str, call: Any) -> None:
    """Extreme but well-typed values: refused with a MereError or accepted; either way every retained
    version reads as before, and writes and automatic maintenance go on afterwards."""
    t = bad_call_table(tmp_path)
    rows = {v: sorted(map(repr, t.to_arrow(version=v).to_pylist())) for v in (3, 4)}
    with contextlib.suppress(errors.MereError):
        call(t)
    for v, want in rows.items():
        assert sorted(map(repr, t.to_arrow(version=v).to_pylist())) == want, (what, v)
    t.set_properties({"compaction.auto": "inline"})
    for i in range(5):
        put(t, {10 + i: i})
    t.auto_expire()
    t.auto_compact()
    assert t.scan().count() == 8
    assert sorted(map(repr, t.to_arrow(tag="k1").to_pylist())) == rows[3]


# -- maintenance interleaved with writes in flight ------------------------------------------------------


def test_cleanup_taking_a_staged_write_s_files_makes_its_commit_fail_typed(tmp_path: Path) -> None:
    """A staged (uncommitted) write's files are old enough for cleanup(older_than=0) from another handle:
    its commit then fails with a MereError, and the table stays readable with its rows."""
    t = keyed(tmp_path)
    put(t, {1: 1})
    staged = t.stage(pa.table({"k": pa.array([2], pa.int64()), "v": pa.array([2], pa.int64())}))
    other = mere.connect(str(tmp_path)).table(NAME)
    removed = other.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert removed  # the staged files, which no version references
    before = state(t)
    with pytest.raises(errors.MereError):
        t.commit([staged])
    assert state(t) == before
    assert t.to_arrow().to_pylist() == [{"k": 1, "v": 1, "s": None}]


def test_a_compaction_planned_before_another_handle_compacted_and_expired_fails_typed(tmp_path: Path) -> None:
    """plan_compaction on one handle; another compacts and expires (deleting the plan's inputs); running
    and committing the plan raises a MereError, and the table reads its rows."""
    t = keyed(tmp_path)
    for i in range(4):
        put(t, {i: i, 9: i})
    plan = t.plan_compaction(min_files=1)
    assert plan.tasks
    other = mere.connect(str(tmp_path)).table(NAME)
    other.compact(min_files=1)
    put(other, {5: 5})
    other.expire(older_than=dt.timedelta(0), dry_run=False)
    before = state(t)
    with pytest.raises(errors.MereError):
        results = [task.run() for task in plan.tasks]
        t.commit_compaction(plan, results)
    assert state(t) == before
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == {0: 0, 1: 1, 2: 2, 3: 3, 9: 3, 5: 5}


def test_a_compaction_planned_before_a_write_and_expire_commits_without_losing_the_write(
    tmp_path: Path,
) -> None:
    """plan_compaction, run its tasks, then another handle writes and expires (the inputs stay: the newest
    version reads them); the commit lands or is refused, and never loses the write."""
    t = keyed(tmp_path)
    for i in range(4):
        put(t, {i: i, 9: i})
    plan = t.plan_compaction(min_files=1)
    results = [task.run() for task in plan.tasks]
    other = mere.connect(str(tmp_path)).table(NAME)
    put(other, {9: 99, 1: 11})
    other.delete("k = 2")
    other.expire(older_than=dt.timedelta(0), dry_run=False)
    with contextlib.suppress(errors.CommitConflict):
        t.commit_compaction(plan, results)
    want = {0: 0, 1: 11, 3: 3, 9: 99}
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == want
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == want
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())


def test_rollback_to_a_tagged_version_then_untag_and_expire_keeps_the_current_files(tmp_path: Path) -> None:
    """The rollback re-adds the tagged version's files; after the tag goes and expire runs, the current
    version (the rollback) still reads them."""
    t = keyed(tmp_path)
    put(t, {1: 1, 2: 2})  # v1
    t.tag("good", 1)
    put(t, {1: 10})  # v2
    t.compact(min_files=1)  # v3
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.rollback(tag="good")  # v4: v1's files again
    t.untag("good")
    put(t, {3: 3})  # v5
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == {1: 1, 2: 2, 3: 3}
    t.compact(min_files=1)
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == {1: 1, 2: 2, 3: 3}
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())


def test_tag_names_are_exact_on_both_catalogs(cat: mere.Catalog) -> None:
    """Tag names differ by case and are matched literally (no LIKE wildcards), on SQLite and PostgreSQL."""
    t = cat.create_table(
        NAME, schema(False), primary_key="k", buckets=1, properties={"retention.max-age": "off"}
    )
    put(t, {1: 1})
    put(t, {2: 2})
    t.tag("Rel", 1)
    t.tag("rel", 2)
    t.tag("a_b", 1)
    assert t.tags() == {"Rel": 1, "a_b": 1, "rel": 2}
    assert t.to_arrow(tag="Rel").num_rows == 1
    assert t.to_arrow(tag="rel").num_rows == 2
    for ghost in ("REL", "axb", "a%", "Rel "):
        with pytest.raises(errors.MereError):
            t.untag(ghost)
        with pytest.raises(errors.MereError):
            t.to_arrow(tag=ghost)
    t.untag("rel")
    assert t.tags() == {"Rel": 1, "a_b": 1}
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    assert t.to_arrow(tag="Rel").num_rows == 1
    with pytest.raises(errors.NoSuchTag):
        t.to_arrow(tag="rel")


def test_a_self_maintaining_table_fed_tiny_commits_keeps_disk_and_history_bounded(tmp_path: Path) -> None:
    """Inline compaction plus automatic expiry (max-age 1s, min-versions 5) over 150 one-row commits: the
    files on disk stay bounded, the newest five versions and a tagged early version stay readable with
    their rows, and every version still readable reads its model."""
    t = keyed(
        tmp_path,
        **{
            "compaction.auto": "inline",
            "compaction.min-files": "4",
            "retention.max-age": "1s",
            "retention.min-versions": "5",
        },
    )
    rnd = random.Random(149)
    model: dict[int, int] = {}
    snaps: dict[int, dict[int, int]] = {0: {}}
    most = 0
    for i in range(150):
        k = rnd.randrange(30)
        if rnd.random() < 0.2:
            t.delete(pa.table({"k": pa.array([k], pa.int64())}))
            model.pop(k, None)
        else:
            put(t, {k: i})
            model[k] = i
        for v in range(max(snaps) + 1, t.refresh().version + 1):
            snaps[v] = dict(model)
        if i == 20:
            t.tag("early")
            early = (t.version, dict(model))
        most = max(most, len(files_on_disk(t)))
        time.sleep(0.02)
    assert most <= 120, most
    newest = t.version
    for v in range(newest - 4, newest + 1):
        assert {r["k"]: r["v"] for r in t.to_arrow(version=v).to_pylist()} == snaps[v], v
    assert t.tags() == {"early": early[0]}
    assert {r["k"]: r["v"] for r in t.to_arrow(tag="early").to_pylist()} == early[1]
    expired = [v for v in snaps if t._expired(v)]
    assert expired, "the retention policy expired nothing"
    assert early[0] not in expired
    for v in snaps:
        if v not in expired:
            assert {r["k"]: r["v"] for r in t.to_arrow(version=v).to_pylist()} == snaps[v], v
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == model
    assert {r["k"]: r["v"] for r in t.to_arrow(tag="early").to_pylist()} == early[1]


def test_maintenance_looping_on_a_second_handle_while_a_writer_commits_loses_nothing(
    tmp_path: Path, catalog_url: str
) -> None:
    """A writer thread commits 60 tiny upserts and deletes through one handle while another thread loops
    compact / tiered compact / expire(0) / cleanup(2s) through a second handle. A write refused because
    cleanup took its files in flight (OutlivedCleanup) is written again; in the end the table equals
    the model, and the newest version's files are exactly what is on disk after a last expire and cleanup."""
    import threading

    root = str(tmp_path / "wh")
    t = mere.connect(root, catalog=catalog_url).create_table(
        NAME,
        schema(False),
        primary_key="k",
        buckets=2,
        properties={"compaction.auto": "inline", "compaction.min-files": "3", "retention.max-age": "off"},
    )
    other = mere.connect(root, catalog=catalog_url).table(NAME)
    model: dict[int, int] = {}
    done = threading.Event()
    problems: list[BaseException] = []
    refused: list[str] = []

    def maintain() -> None:
        n = 0
        while not done.is_set():
            try:
                [
                    lambda: other.compact(min_files=1),
                    lambda: other.compact(tiered=True),
                    lambda: other.expire(older_than=dt.timedelta(0), dry_run=False),
                    lambda: other.cleanup(older_than=dt.timedelta(seconds=2), dry_run=False),
                ][n % 4]()
                time.sleep(0.01)
            except errors.CommitConflict:
                pass
            except BaseException as e:
                problems.append(e)
                return
            n += 1

    worker = threading.Thread(target=maintain)
    worker.start()
    try:
        rnd = random.Random(3)
        for i in range(60):
            k = rnd.randrange(15)
            for _ in range(5):
                try:
                    if i % 5 == 4:
                        t.delete(f"k = {k}")
                    else:
                        put(t, {k: i})
                    break
                except errors.MereError as e:
                    refused.append(type(e).__name__)
            else:
                raise AssertionError(f"write {i} refused five times: {refused[-5:]}")
            if i % 5 == 4:
                model.pop(k, None)
            else:
                model[k] = i
    finally:
        done.set()
        worker.join()
    assert not problems, problems
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == model
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert files_on_disk(t) == set(t.files().column("path").to_pylist())
    assert {r["k"]: r["v"] for r in other.to_arrow().to_pylist()} == model


def test_a_stale_handle_s_rollback_restores_the_properties_of_its_version(tmp_path: Path) -> None:
    t = keyed(tmp_path, **{"compaction.min-files": "8"})
    put(t, {1: 1})  # v1
    t.set_properties({"compaction.min-files": "4"})  # v2
    put(t, {2: 2})  # v3
    stale = mere.connect(str(tmp_path)).table(NAME)  # sees min-files 4
    t.rollback(1)  # v4: min-files 8 again
    assert t.refresh().properties["compaction.min-files"] == "8"
    stale.rollback(3)  # v5: version 3's files and properties
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [1, 2]
    assert t.refresh().properties["compaction.min-files"] == "4"


def test_spec_at_gives_the_properties_of_its_version(tmp_path: Path) -> None:
    t = keyed(tmp_path, **{"compaction.min-files": "8"})
    put(t, {1: 1})  # v1
    t.set_properties({"compaction.min-files": "4"})  # v2
    assert t.spec_at(1).properties["compaction.min-files"] == "8"
    assert t.spec_at(2).properties["compaction.min-files"] == "4"


def test_a_writer_handle_follows_a_compaction_policy_turned_on_later(tmp_path: Path) -> None:
    t = keyed(tmp_path)
    put(t, {0: 0})
    writer = mere.connect(str(tmp_path)).table(NAME)
    t.set_properties({"compaction.auto": "inline", "compaction.min-files": "3"})
    for i in range(20):
        put(writer, {i: i})
    assert len(t.refresh().files()) <= 2 * 2 * 3, len(t.files())  # two buckets, min-files 3
    assert {r["k"]: r["v"] for r in t.to_arrow().to_pylist()} == {i: i for i in range(20)}


def test_a_writer_handle_follows_a_compaction_policy_turned_off_later(tmp_path: Path) -> None:
    t = keyed(tmp_path, **{"compaction.auto": "inline", "compaction.min-files": "3"})
    writer = mere.connect(str(tmp_path)).table(NAME)
    t.set_properties({"compaction.auto": "off"})
    for i in range(10):
        put(writer, {i: i})
    assert [s.operation for s in t.history()].count("compact") == 0
