"""Adversarial trial of the change feeds: ``Table.changes``, consumers, ``follow`` and change-log tables.

The oracle is independent of the feed: every version's snapshot is read with ``to_arrow(version=v)`` and
the expected feed between two versions is a dict diff of their rows by identity (partition, key): a key
only in the older snapshot is a ``delete`` of its row there, only in the newer one an ``insert``, in both
with different rows an ``update_before`` (older row) and ``update_after`` (newer row). A rule-based state
machine mixes writes (moving keys between partitions on tables with table-wide keys, late rows on
``sequence_by`` tables, catalog transactions), compaction, expire, rollback, overwrite and truncate with a
consumer reading in random steps (crashing half-way, re-reading its pending range, committing), a
``follow``-ing consumer and unseen consumers being dropped; the feeds between random readable versions, in
each mode the API has, must equal the oracle.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import mere
from mere import errors
from mere.catalog.sql import consumers as consumers_table
from mere.metadata import now_micros

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.int64()),
        pa.field("seq", pa.int64()),
    ]
)
NAMES = SCHEMA.names
META = ["_change", "_version", "_commit_time"]
PARTS = ["a", "b", "c"]
KEYS = st.integers(0, 9)
ROW = st.tuples(
    KEYS, st.sampled_from([*PARTS, None]), st.one_of(st.none(), st.integers(-3, 9)), st.integers(0, 6)
)
_ids = itertools.count()

Key = tuple[Any, Any]


def rows_of(table: pa.Table) -> dict[Key, tuple[Any, ...]]:
    """A snapshot by identity (partition, key)."""
    out: dict[Key, tuple[Any, ...]] = {}
    for r in table.select(NAMES).to_pylist():
        ident = (r["p"], r["k"])
        assert ident not in out, f"two rows of {ident} in one snapshot"
        out[ident] = tuple(r[c] for c in NAMES)
    return out


def expected_feed(older: dict[Key, Any], newer: dict[Key, Any]) -> list[tuple[Any, ...]]:
    """The net feed between two snapshots, as sorted (identity, change, row) tuples."""
    out: list[tuple[Any, ...]] = []
    for ident in set(older) | set(newer):
        a, b = older.get(ident), newer.get(ident)
        if a == b:
            continue
        if a is None:
            out.append((ident, "insert", b))
        elif b is None:
            out.append((ident, "delete", a))
        else:
            out += [(ident, "update_before", a), (ident, "update_after", b)]
    return sorted(out, key=repr)


def feed_rows(feed: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(
        (((r["p"], r["k"]), r["_change"], tuple(r[c] for c in NAMES)) for r in feed.to_pylist()), key=repr
    )


def apply(copy: dict[Key, Any], feed: pa.Table, limit: int | None = None) -> None:
    """Apply feed rows as a sink keyed by identity does (``limit``: a reader that crashed half-way)."""
    for r in feed.to_pylist()[:limit]:
        ident = (r["p"], r["k"])
        if r["_change"] in ("insert", "update_after"):
            copy[ident] = tuple(r[c] for c in NAMES)
        elif r["_change"] == "delete":
            copy.pop(ident, None)


def arrow_rows(rows: list[tuple[int, str, int | None, int]]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[], [], [], []]
    return pa.table({n: pa.array(list(c), SCHEMA.field(n).type) for n, c in zip(NAMES, cols)})


def set_unseen(t: mere.Table, name: str, by: dt.timedelta) -> None:
    micros = now_micros() - by // dt.timedelta(microseconds=1)
    with t.catalog.sql.engine.connect() as conn, conn.begin():  # type: ignore[attr-defined]
        conn.execute(
            consumers_table.update()
            .where(consumers_table.c.table_id == t.record.id, consumers_table.c.name == name)
            .values(last_seen=micros)
        )


class FeedMachine(RuleBasedStateMachine):
    """A table, its snapshots, a stepping consumer ``c``, a following consumer ``f``."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="feed48-")
        self.snaps: dict[int, dict[Key, Any]] = {}

    def teardown(self) -> None:
        gen = getattr(self, "gen", None)
        if gen is not None:
            gen.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @initialize(
        scope=st.sampled_from(["table", "partition"]),
        sequenced=st.booleans(),
        log=st.booleans(),
        buckets=st.sampled_from([1, 3]),
    )
    def setup(self, scope: str, sequenced: bool, log: bool, buckets: int) -> None:
        self.cat = mere.connect(self.root)
        props = {"compaction.auto": "off", "retention.max-age": "off"}
        if log:
            props["changes.log"] = "on"
        self.sequenced = sequenced
        self.t = self.cat.create_table(
            f"a.t{next(_ids)}",
            SCHEMA,
            primary_key="k",
            partition_by="p",
            buckets=buckets,
            key_scope=scope,
            sequence_by="seq" if sequenced else None,
            properties=props,
        )
        self.config = (scope, sequenced, log, buckets)
        self.record_versions()
        # The stepping consumer and its copy; pending: the range its last uncommitted read handed out.
        self.c = self.t.consumer("c", start_version=0)
        self.c_copy: dict[Key, Any] = {}
        self.pending: tuple[int, int] | None = None
        # The following consumer: a generator committing each batch when asked for the next.
        self.t.consumer("f", start_version=0)
        self.gen = self.t.follow(consumer="f", poll_seconds=0.001, max_poll_seconds=0.01)
        self.f_copy: dict[Key, Any] = {}
        self.f_seen = 0

    # -- bookkeeping -----------------------------------------------------------------------------------

    def record_versions(self) -> None:
        self.t = self.t.refresh()
        for v in range(max(self.snaps, default=-1) + 1, self.t.version + 1):
            self.snaps[v] = rows_of(self.t.to_arrow(version=v))

    def readable_from(self) -> int:
        """The oldest version from which every version up to the newest is readable."""
        live = {s.version for s in self.t.history() if not s.expired}
        v = self.t.version
        while v - 1 in live:
            v -= 1
        return v

    def attempt(self, fn: Any) -> None:
        before = self.t.refresh().version
        try:
            fn()
        except errors.MereError as e:
            # A refused write changes nothing.
            assert self.t.refresh().version == before, e
        self.record_versions()

    # -- writes ----------------------------------------------------------------------------------------

    @rule(rows=st.lists(ROW, min_size=1, max_size=6))
    def upsert(self, rows: list[tuple[int, str, int | None, int]]) -> None:
        self.attempt(lambda: self.t.upsert(arrow_rows(rows)))

    @rule(keys=st.lists(KEYS, min_size=1, max_size=3))
    def delete_keys(self, keys: list[int]) -> None:
        self.attempt(lambda: self.t.delete(f"k IN ({', '.join(map(str, keys))})"))

    @rule(where=st.sampled_from(["v > 4", "v IS NULL", "p = 'b'", "k < 3 AND v < 2"]))
    def delete_where(self, where: str) -> None:
        self.attempt(lambda: self.t.delete(where))

    @rule(where=st.sampled_from(["k < 4", "p = 'a'", "v IS NULL"]))
    def update(self, where: str) -> None:
        self.attempt(lambda: self.t.update({"v": "coalesce(v, 0) + 1"}, where=where))

    @rule(rows=st.lists(ROW, max_size=4), part=st.sampled_from([None, "a", "b"]))
    def overwrite(self, rows: list[tuple[int, str, int | None, int]], part: str | None) -> None:
        if part is not None:
            rows = [(k, part, v, s) for k, _, v, s in rows]
        self.attempt(lambda: self.t.overwrite(arrow_rows(rows), None if part is None else {"p": part}))

    @rule(rows=st.lists(ROW, max_size=4))
    def overwrite_dynamic(self, rows: list[tuple[int, str, int | None, int]]) -> None:
        """Replace the partitions the rows name (Spark's dynamic partition overwrite)."""
        self.attempt(lambda: self.t.overwrite(arrow_rows(rows), dynamic=True))

    @rule(where=st.sampled_from(["k < 4", "v IS NULL", "p = 'b'"]), to=st.sampled_from(PARTS))
    def update_moving_partition(self, where: str, to: str) -> None:
        """UPDATE of a partition column: moves keys under table-wide keys, refused under partition keys."""
        self.attempt(lambda: self.t.update({"p": f"'{to}'"}, where=where))

    @rule(rows=st.lists(ROW, min_size=1, max_size=4), deleting=st.booleans())
    def merge(self, rows: list[tuple[int, str, int | None, int]], deleting: bool) -> None:
        def run() -> None:
            m = self.t.merge(arrow_rows(rows), on="t.k = s.k")
            if deleting:
                m = m.when_matched_delete(condition="s.v IS NULL")
            m.when_matched_update(set={"v": "s.v", "seq": "s.seq"}).when_not_matched_insert_all().execute()

        self.attempt(run)

    @rule(rows=st.lists(ROW, min_size=1, max_size=4))
    def partial_upsert(self, rows: list[tuple[int, str, int | None, int]]) -> None:
        """Rows without ``v``: it keeps its value (or null for a new key)."""
        self.attempt(lambda: self.t.upsert(arrow_rows(rows).drop_columns(["v"])))

    @rule()
    def truncate(self) -> None:
        self.attempt(self.t.truncate)

    @rule(rows=st.lists(ROW, min_size=1, max_size=4), keys=st.lists(KEYS, max_size=2))
    def catalog_transaction(self, rows: list[tuple[int, str, int | None, int]], keys: list[int]) -> None:
        def run() -> None:
            with self.cat.transaction() as tx:
                share = tx.table(self.t.name)
                if keys:
                    share.delete(f"k IN ({', '.join(map(str, keys))})")
                share.upsert(arrow_rows(rows))

        self.attempt(run)

    @rule(on=st.booleans())
    def toggle_log(self, on: bool) -> None:
        """Turn the change log on or off: ranges mixing logged and unlogged commits merge as before."""
        self.attempt(lambda: self.t.set_properties({"changes.log": "on" if on else "off"}))

    @rule()
    def compact(self) -> None:
        self.attempt(lambda: self.t.compact(min_files=1))

    @rule(back=st.integers(0, 40))
    def rollback(self, back: int) -> None:
        first = self.readable_from()
        target = first + back % (self.t.version - first + 1)
        self.attempt(lambda: self.t.rollback(target))

    @rule()
    def expire(self) -> None:
        self.t.expire(older_than=dt.timedelta(0), dry_run=False)
        self.t = self.t.refresh()
        # Every version from the lowest live consumer's position on stays readable.
        positions = [r["position"] for r in self.t.inspect.consumers().to_pylist() if r["dropped_at"] is None]
        if positions:
            assert self.readable_from() <= min(positions), (positions, self.readable_from())

    # -- readers ---------------------------------------------------------------------------------------

    @rule(data=st.data())
    def feed_between(self, data: st.DataObject) -> None:
        first = self.readable_from()
        a = data.draw(st.integers(first, self.t.version), label="a")
        b = data.draw(st.integers(a, self.t.version), label="b")
        feed = self.t.changes(a, b).read_all()
        assert feed.column_names == ["p", "k", "v", "seq", *META]
        assert feed_rows(feed) == expected_feed(self.snaps[a], self.snaps[b]), (self.config, a, b)
        if feed.num_rows:
            versions = feed.column("_version").to_pylist()
            assert all(a < v <= b for v in versions), (a, b, versions)
        # Each key's _version is at least the last commit of the range that changed its row.
        for r in feed.to_pylist():
            ident = (r["p"], r["k"])
            last = max(
                v for v in range(a + 1, b + 1) if self.snaps[v].get(ident) != self.snaps[v - 1].get(ident)
            )
            assert r["_version"] >= last, (self.config, a, b, r, last)
        # _version names a commit that wrote rows (never a compaction), _commit_time its time.
        history = {s.version: s for s in self.t.history()}
        for r in feed.to_pylist():
            assert history[r["_version"]].operation != "compact", (self.config, a, b, r)
            assert r["_commit_time"] == history[r["_version"]].committed_at, (self.config, r)
        # Split by split (partition, bucket), each ordered by _version then key; with table-wide keys the
        # deletes of a group of whole buckets come before its other rows, each part split by split.
        rows = feed.to_pylist()
        parts = [rows]
        if self.config[0] == "table":
            parts = [
                [r for r in rows if r["_change"] == "delete"],
                [r for r in rows if r["_change"] != "delete"],
            ]
            live_at: dict[int, int] = {}
            for i, r in enumerate(rows):
                if r["_change"] != "delete":
                    live_at.setdefault(r["k"], i)
                else:
                    assert i < live_at.get(r["k"], len(rows)), (self.config, a, b, "delete after", r)
        for part in parts:
            if not part:
                continue
            buckets = mere.bucket_ids(pa.Table.from_pylist(part).select(["k"]), self.config[3]).tolist()
            splits = [(r["p"], bkt) for r, bkt in zip(part, buckets)]
            seen: list[Any] = []
            for split in splits:
                if not seen or seen[-1] != split:
                    assert split not in seen, (self.config, a, b, "split comes back", splits)
                    seen.append(split)
            for split in seen:
                order = [(r["_version"], r["k"]) for r, sp in zip(part, splits) if sp == split]
                assert order == sorted(order), (self.config, a, b, split, order)
        # A projection and a filter keep the same rows' values.
        part = self.t.changes(a, b, columns=["v"], filter="v >= 2").read_all()
        assert part.column_names == ["p", "k", "v", *META]
        want = sorted(
            (
                (r["p"], r["k"], r["v"], r["_change"], r["_version"])
                for r in feed.to_pylist()
                if r["v"] is not None and r["v"] >= 2
            ),
            key=repr,
        )
        got = sorted(
            ((r["p"], r["k"], r["v"], r["_change"], r["_version"]) for r in part.to_pylist()), key=repr
        )
        assert got == want, (self.config, a, b)

    @rule(data=st.data(), crash=st.booleans(), commit=st.sampled_from(["none", "end", "part"]))
    def consumer_step(self, data: st.DataObject, crash: bool, commit: str) -> None:
        position = self.c.position
        if self.pending is None:
            end_arg = data.draw(st.one_of(st.none(), st.integers(position, self.t.version)), label="end")
        else:
            end_arg = data.draw(st.sampled_from([None, self.pending]), label="end")
        end, reader = self.c.changes(end_arg)
        feed = reader.read_all()
        if self.pending is not None:
            assert end == self.pending, "a pending range is handed out again whole"
        else:
            assert end == (self.t.version if end_arg is None else end_arg)
        # An empty range is nothing to commit: it leaves nothing pending.
        self.pending = end if end > position else None
        assert feed_rows(feed) == expected_feed(self.snaps[position], self.snaps[end]), (
            self.config,
            position,
            end,
        )
        assert all(position < v <= end for v in feed.column("_version").to_pylist())
        if crash:
            apply(self.c_copy, feed, data.draw(st.integers(0, max(feed.num_rows - 1, 0)), label="applied"))
            return
        apply(self.c_copy, feed)
        if commit == "end":
            assert self.c.commit(end) == end
            self.pending = None
            assert self.c_copy == self.snaps[end], (self.config, end)
        elif commit == "part" and end > position + 1:
            part = data.draw(st.integers(position + 1, end - 1), label="part")
            assert self.c.commit(part) == part  # the rest of the range stays pending

    @rule(data=st.data())
    def consumer_seek(self, data: st.DataObject) -> None:
        to = data.draw(st.integers(self.readable_from(), self.t.version), label="to")
        assert self.c.seek(to) == to
        self.pending = None
        self.c_copy = dict(self.snaps[to])

    @precondition(lambda self: self.t.version > self.f_seen)
    @rule()
    def follow_step(self) -> None:
        version, feed = next(self.gen)
        assert version == self.t.refresh().version
        apply(self.f_copy, feed)
        assert self.f_copy == self.snaps[version], (self.config, self.f_seen, version)
        self.f_seen = version

    @rule()
    def drop_unseen_consumer(self) -> None:
        """``c``, unseen for a year, is dropped by an expire that would give up versions it holds."""
        set_unseen(self.t, "c", dt.timedelta(days=365))
        self.t.expire(older_than=dt.timedelta(0), dry_run=False)
        self.t = self.t.refresh()
        row = {r["name"]: r for r in self.t.inspect.consumers().to_pylist()}["c"]
        if row["dropped_at"] is None:
            # Kept: it must still find every version it needs.
            assert row["position"] >= self.readable_from(), (row, self.readable_from())
            self.c.heartbeat()  # seen again: the model's reader is alive
            return
        assert row["position"] < self.t.version, "a consumer holding nothing back is left alone"
        for use in (self.c.changes, lambda: self.c.commit(self.t.version), self.c.info, self.c.heartbeat):
            with pytest.raises(errors.ConsumerDropped):
                use()
        with pytest.raises(errors.ConsumerDropped):
            self.t.changes(consumer="c")
        with pytest.raises(errors.ConsumerDropped):
            self.t.consumer("c")  # registering the name again needs drop_consumer first
        with pytest.raises(errors.ConsumerDropped):
            next(self.t.follow(consumer="c"))
        with pytest.raises(errors.ConsumerDropped):
            self.c.seek(self.t.version)
        self.t.drop_consumer("c")
        with pytest.raises(errors.NoSuchConsumer):
            self.c.info()
        self.c = self.t.consumer("c")
        assert self.c.position == self.t.version
        self.c_copy = dict(self.snaps[self.t.version])  # rebuilt from a snapshot
        self.pending = None

    @invariant()
    def consumer_positions_stay_readable(self) -> None:
        if not hasattr(self, "t"):
            return
        newest = self.t.refresh().version
        for r in self.t.inspect.consumers().to_pylist():
            if r["dropped_at"] is None:
                assert r["lag"] == newest - r["position"], r
                assert r["droppable_after"] - r["last_seen"] == dt.timedelta(days=7), r
                assert r["position"] >= self.readable_from() or r["position"] == self.t.version


FeedMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("FEED48_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("FEED48_NOSHRINK")
    else tuple(Phase),
)
test_feeds_consumers_and_follow_match_the_snapshot_oracle = FeedMachine.TestCase


# -- bad arguments ---------------------------------------------------------------------------------------


def _small_table(root: Any, **properties: str) -> mere.Table:
    props = {"compaction.auto": "off", "retention.max-age": "off", **properties}
    t = mere.connect(str(root)).create_table(
        "a.t", SCHEMA, primary_key="k", partition_by="p", buckets=2, properties=props
    )
    for i in range(4):
        t.upsert(arrow_rows([(i, "a", i, 1)]))
    return t


def _state(t: mere.Table) -> tuple[Any, ...]:
    """What a refused call must leave as it was: versions, snapshot, consumers (position, pending)."""
    t = t.refresh()
    consumers = sorted(
        (r["name"], r["position"], r["pending"], r["dropped_at"]) for r in t.inspect.consumers().to_pylist()
    )
    rows = sorted(map(repr, t.to_arrow().to_pylist()))
    return t.version, rows, consumers, [(s.version, s.expired) for s in t.history()]


def test_bad_arguments_to_every_feed_function_are_typed_and_change_nothing(tmp_path: Any) -> None:
    t = _small_table(tmp_path)
    c = t.consumer("c", start_version=1)
    t.tag("old", 1)
    t.compact(min_files=1)
    t.upsert(arrow_rows([(9, "b", 9, 1)]))
    newest = t.version
    bad_calls = {
        "changes start -1": lambda: t.changes(-1),
        "changes start str": lambda: t.changes("1"),
        "changes start float": lambda: t.changes(1.0),
        "changes start bool": lambda: t.changes(False),
        "changes start None": lambda: t.changes(None),
        "changes reversed": lambda: t.changes(3, 2),
        "changes end beyond": lambda: t.changes(0, newest + 1),
        "changes start beyond": lambda: t.changes(newest + 1),
        "changes end huge": lambda: t.changes(0, 2**64),
        "changes end float": lambda: t.changes(0, 2.0),
        "changes start and consumer": lambda: t.changes(1, consumer="c"),
        "changes unknown consumer": lambda: t.changes(consumer="nobody"),
        "changes consumer int": lambda: t.changes(consumer=3),
        "changes consumer end before": lambda: t.changes(0, consumer="c"),
        "changes consumer end beyond": lambda: t.changes(end_version=newest + 1, consumer="c"),
        "changes columns repeated": lambda: t.changes(0, columns=["v", "v"]),
        "changes columns reserved": lambda: t.changes(0, columns=["_change"]),
        "changes columns not names": lambda: t.changes(0, columns=[1]),
        "changes filter int": lambda: t.changes(0, filter=5),
        "changes filter reserved": lambda: t.changes(0, filter="_version > 1"),
        "consumer start beyond": lambda: t.consumer("n", start_version=newest + 1),
        "consumer start str": lambda: t.consumer("n", start_version="0"),
        "consumer name": lambda: t.consumer("bad name"),
        "consumer create=False unknown": lambda: t.consumer("nobody", create=False),
        "drop unknown": lambda: t.drop_consumer("nobody"),
        "drop bad name": lambda: t.drop_consumer(""),
        "c.changes end beyond": lambda: c.changes(newest + 1),
        "c.changes end before": lambda: c.changes(0),
        "c.changes end str": lambda: c.changes("2"),
        "c.commit beyond": lambda: c.commit(newest + 1),
        "c.commit negative": lambda: c.commit(-1),
        "c.commit float": lambda: c.commit(2.0),
        "c.seek beyond": lambda: c.seek(newest + 1),
        "c.seek bool": lambda: c.seek(True),
        "follow not a table": lambda: next(mere.follow("a.t", 0)),
        "follow no start": lambda: next(mere.follow(t)),
        "follow start beyond": lambda: next(mere.follow(t, newest + 1)),
        "follow both": lambda: next(t.follow(1, consumer="c")),
        "follow unknown consumer": lambda: next(t.follow(consumer="nobody")),
        "follow auto_commit": lambda: next(t.follow(consumer="c", auto_commit=1)),
        "follow poll": lambda: next(t.follow(0, poll_seconds=-1)),
        "follow max poll": lambda: next(t.follow(0, max_poll_seconds=float("nan"))),
    }
    before = _state(t)
    for label, call in bad_calls.items():
        with pytest.raises(errors.MereError):
            result = call()
            if isinstance(result, pa.RecordBatchReader):
                result.read_all()
            pytest.fail(f"{label}: no error")
        assert _state(t) == before, label
    # Versions given up by expire: a feed from them, a consumer placed or moved there, are refused.
    t.expire(older_than=dt.timedelta(0), dry_run=False)  # c (position 1) keeps 1.. readable
    c.commit(newest)
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    before = _state(t)
    for label, call in {
        "changes expired": lambda: t.changes(0),
        "changes from a tag whose later commits expired": lambda: t.changes(1),
        "consumer at expired": lambda: t.consumer("n", start_version=0),
        "consumer at a tag whose later commits expired": lambda: t.consumer("n", start_version=1),
        "seek expired": lambda: c.seek(2),
        "follow expired": lambda: next(t.follow(2)),
    }.items():
        with pytest.raises(errors.NoSuchVersion):
            result = call()
            if isinstance(result, pa.RecordBatchReader):
                result.read_all()
        assert _state(t) == before, label
    # A dropped table: every feed function is a typed error.
    c.changes()  # pending now: a dropped table must not need it
    t.catalog.drop_table(t.name)
    for label, call in {
        "changes": lambda: t.changes(newest),
        "changes consumer": lambda: t.changes(consumer="c"),
        "consumer": lambda: t.consumer("c"),
        "c.changes": lambda: c.changes(),
        "c.commit": lambda: c.commit(newest),
        "c.seek": lambda: c.seek(newest),
        "drop_consumer": lambda: t.drop_consumer("c"),
        "follow": lambda: next(t.follow(newest)),
        "follow consumer": lambda: next(t.follow(consumer="c")),
        "inspect": lambda: t.inspect.consumers(),
    }.items():
        with pytest.raises(errors.MereError):
            call()
            pytest.fail(f"{label}: no error on a dropped table")


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(lambda c: c.changes(columns=["nope"]), id="consumer-changes-bad-column"),
        pytest.param(lambda c: c.changes(filter="nope > 1"), id="consumer-changes-bad-filter"),
        pytest.param(
            lambda c: c.table.changes(consumer="c", columns=["v", "v"]), id="table-changes-consumer"
        ),
        pytest.param(lambda c: next(c.follow(filter="v =", poll_seconds=0.01)), id="follow-consumer"),
    ],
)
def test_a_consumer_read_refused_for_bad_columns_or_filter_claims_no_range(tmp_path: Any, read: Any) -> None:
    t = _small_table(tmp_path)
    c = t.consumer("c", start_version=1)
    before = _state(t)
    with pytest.raises(errors.MereError):
        read(c)
    assert _state(t) == before  # no pending range
    end, feed = c.changes(2)  # the reader picks its own range, as it could before the bad call
    assert end == 2 and feed.read_all().num_rows == 1


# -- a consumer racing writers, compaction and expire -----------------------------------------------------


@pytest.mark.parametrize(
    "scope, sequenced, log",
    [("table", False, True), ("table", True, False), ("partition", False, True)],
    ids=["table-keys-logged", "table-keys-sequenced", "partition-keys-logged"],
)
def test_a_consumer_stepping_while_writers_compaction_and_expire_run_sees_each_change_once(
    tmp_path: Any, scope: str, sequenced: bool, log: str
) -> None:
    import random
    import threading

    cat = mere.connect(str(tmp_path))
    props = {"compaction.auto": "off", "retention.max-age": "off", "changes.log": "on" if log else "off"}
    t = cat.create_table(
        "a.t",
        SCHEMA,
        primary_key="k",
        partition_by="p",
        buckets=2,
        key_scope=scope,
        sequence_by="seq" if sequenced else None,
        properties=props,
    )
    c = t.consumer("c", start_version=0)
    stop = threading.Event()
    failures: list[BaseException] = []

    def guarded(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # pragma: no cover - reported below
                failures.append(e)
                stop.set()

        return run

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        h = cat.table("a.t")
        for i in range(25):
            if stop.is_set():
                return
            kind = rng.random()
            try:
                if kind < 0.7:
                    rows = [(rng.randrange(12), rng.choice(PARTS), rng.randrange(9), i) for _ in range(3)]
                    h.upsert(arrow_rows(rows))
                elif kind < 0.9:
                    h.delete(f"k = {rng.randrange(12)}")
                else:
                    h.delete("v > 6")
            except errors.CommitConflict:
                pass  # a lost race after every retry: nothing committed

    def maintainer() -> None:
        h = cat.table("a.t")
        while not stop.is_set():
            with contextlib.suppress(errors.CommitConflict):
                h.compact(min_files=1)
            h.expire(older_than=dt.timedelta(0), dry_run=False)

    copy: dict[Key, Any] = {}
    rng = random.Random(7)
    steps = 0

    def step(to_newest: bool) -> None:
        nonlocal steps
        h = cat.table("a.t")
        position = c.position
        newest = h.version
        end_arg = newest if to_newest else rng.randint(position, newest)
        end, reader = c.changes(end_arg)
        feed = reader.read_all()
        # Both ends are still readable (the consumer pins its position), and the feed is their diff.
        older, newer = rows_of(h.to_arrow(version=position)), rows_of(h.to_arrow(version=end))
        assert feed_rows(feed) == expected_feed(older, newer), (position, end)
        assert all(position < v <= end for v in feed.column("_version").to_pylist())
        apply(copy, feed)
        assert copy == newer, (position, end)
        assert c.commit(end) == end
        steps += 1

    threads = [threading.Thread(target=guarded(lambda s=s: writer(s))) for s in range(2)]
    threads.append(threading.Thread(target=guarded(maintainer)))
    for th in threads:
        th.start()
    while any(th.is_alive() for th in threads[:2]) and not failures:
        step(False)
    stop.set()
    for th in threads:
        th.join()
    assert failures == []
    step(True)
    assert copy == rows_of(t.refresh().to_arrow())
    assert steps > 3


# -- moved keys in copies fed by the feed ----------------------------------------------------------------


def _moving_source(root: Any) -> mere.Table:
    """A table with table-wide keys (the default here) whose four keys all move partitions at version 2."""
    t = mere.connect(str(root)).create_table(
        "a.src", SCHEMA.remove(3), primary_key="k", partition_by="p", buckets=2
    )
    assert t.key_scope == "table"
    t.upsert(pa.table({"k": [1, 2, 3, 4], "p": ["a", "b", "a", "b"], "v": [1, 2, 3, 4]}))
    t.upsert(pa.table({"k": [1, 2, 3, 4], "p": ["b", "a", "b", "a"], "v": [10, 20, 30, 40]}))
    return t


def _kpv(t: mere.Table) -> list[tuple[Any, ...]]:
    return sorted((r["k"], r["p"], r["v"]) for r in t.to_arrow().to_pylist())


def test_a_copy_keyed_by_the_key_alone_applying_deletes_first_is_exact(tmp_path: Any) -> None:
    """The documented rule for a consumer keyed by the key alone holds: per version, deletes first."""
    t = _moving_source(tmp_path)
    copy: dict[int, tuple[Any, ...]] = {}
    for a in range(t.version):
        feed = t.changes(a, a + 1).read_all().to_pylist()
        assert {r["_version"] for r in feed} <= {a + 1}
        for r in sorted(feed, key=lambda r: r["_change"] != "delete"):
            if r["_change"] == "delete":
                del copy[r["k"]]
            elif r["_change"] in ("insert", "update_after"):
                copy[r["k"]] = (r["k"], r["p"], r["v"])
        assert sorted(copy.values()) == sorted(
            (r["k"], r["p"], r["v"]) for r in t.to_arrow(version=a + 1).to_pylist()
        )
    # Each move is a delete in the old partition and an insert in the new one, in the same version.
    moves = t.changes(1, 2).read_all().to_pylist()
    assert sorted((r["k"], r["p"], r["_change"]) for r in moves) == sorted(
        [(k, old, "delete") for k, old in ((1, "a"), (2, "b"), (3, "a"), (4, "b"))]
        + [(k, new, "insert") for k, new in ((1, "b"), (2, "a"), (3, "b"), (4, "a"))]
    )


def test_the_documented_spark_copy_keeps_keys_that_moved_partition(tmp_path: Any) -> None:
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mere.integrations.spark import local_session

    had_session = SparkSession.getActiveSession() is not None
    spark = local_session("trial48", warehouse_dir=str(tmp_path / "spark-warehouse"))
    wh = str(tmp_path / "wh")
    t = mere.connect(wh).create_table("a.src", SCHEMA.remove(3), primary_key="k", partition_by="p", buckets=2)
    t.upsert(pa.table({"k": [1, 2, 3, 4], "p": ["a", "b", "a", "b"], "v": [1, 2, 3, 4]}))
    query = (
        spark.readStream.format("mere")
        .option("warehouse", wh)
        .option("readChangeFeed", "true")
        .load("a.src")
        .drop("_version", "_commit_time")
        .writeStream.format("mere")
        .option("warehouse", wh)
        .option("primary_key", "k")
        .option("partition_by", "p")
        .option("cdc_column", "_change")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="100 milliseconds")
        .start("a.dst")
    )
    try:
        query.processAllAvailable()
        target = mere.connect(wh).table("a.dst")
        assert _kpv(target) == _kpv(t)
        t.upsert(pa.table({"k": [1, 2, 3, 4], "p": ["b", "a", "b", "a"], "v": [10, 20, 30, 40]}))
        query.processAllAvailable()
        assert query.exception() is None
        assert _kpv(target.refresh()) == _kpv(t.refresh())
    finally:
        query.stop()
        if not had_session:
            spark.stop()


# -- a change of sequence order --------------------------------------------------------------------------


def _ordered_later(root: Any) -> tuple[mere.Table, int]:
    """Versions 1..3 (two upserts, a compaction) in commit order, ``set_sequence_by`` at 4, an upsert at 5."""
    t = mere.connect(str(root)).create_table(
        "a.t", SCHEMA.remove(1), primary_key="k", properties={"compaction.auto": "off"}
    )
    t.upsert(pa.table({"k": [1], "v": [1], "seq": [1]}))
    t.upsert(pa.table({"k": [2, 1], "v": [2, 10], "seq": [1, 2]}))
    t.compact(min_files=1)
    changed = t.set_sequence_by("seq")
    assert changed is not None
    t = t.refresh()
    t.upsert(pa.table({"k": [3], "v": [3], "seq": [1]}))
    return t, changed.version


def test_a_feed_across_a_change_of_sequence_order_is_refused(tmp_path: Any) -> None:
    t, at = _ordered_later(tmp_path)
    before = _state(t)
    with pytest.raises(errors.InvalidInput, match="sequence order"):
        t.changes(at - 1, at + 1).read_all()
    assert _state(t) == before
    assert [r["k"] for r in t.changes(at).read_all().to_pylist()] == [3]


def test_a_feed_wholly_before_a_change_of_sequence_order_is_read(tmp_path: Any) -> None:
    t, at = _ordered_later(tmp_path)
    for a, b in [(0, 1), (0, 2), (1, 2), (0, at - 1)]:
        got = t.changes(a, b).read_all()
        older, newer = ({r["k"]: (r["k"], r["v"]) for r in t.to_arrow(version=v).to_pylist()} for v in (a, b))
        want = sorted(
            [(k, "insert") for k in newer.keys() - older.keys()]
            + [(k, "delete") for k in older.keys() - newer.keys()]
            + [
                (k, c)
                for k in older.keys() & newer.keys()
                if older[k] != newer[k]
                for c in ("update_before", "update_after")
            ]
        )
        assert sorted((r["k"], r["_change"]) for r in got.to_pylist()) == want


# -- handles loaded before another handle changed the columns ---------------------------------------------


def _evolved_elsewhere(root: Any, change: str) -> tuple[mere.Table, mere.Table]:
    """A handle loaded at version 1, and the table after another handle's column change and an upsert."""
    cat = mere.connect(str(root))
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int32())])
    t = cat.create_table("a.t", schema, primary_key="k", properties={"compaction.auto": "off"})
    t.upsert(pa.table({"k": [1, 2], "v": pa.array([1, 2], pa.int32())}))
    t.consumer("c", start_version=0)
    other = cat.table("a.t")
    if change == "rename":
        other.rename_column("v", "w")
        other.upsert(pa.table({"k": [3], "w": [3]}))
    elif change == "drop":
        other.drop_column("v")
        other.upsert(pa.table({"k": [3]}))
    else:
        other.widen("v", pa.int64())
        other.upsert(pa.table({"k": [3], "v": [2**40]}))
    return t, other.refresh()


@pytest.mark.parametrize("change", ["rename", "drop", "widen"])
@pytest.mark.parametrize("how", ["table", "consumer"])
def test_a_stale_handle_reads_the_feed_in_the_current_columns_or_fails_typed(
    tmp_path: Any, change: str, how: str
) -> None:
    stale, fresh = _evolved_elsewhere(tmp_path, change)
    want = fresh.changes(0).read_all()
    try:
        if how == "table":
            got = stale.changes(0).read_all()
        else:
            got = stale.consumer("c", create=False).changes()[1].read_all()
    except errors.MereError:
        return  # a typed refusal is fine too
    assert got.drop_columns(["_commit_time"]).to_pylist() == want.drop_columns(["_commit_time"]).to_pylist()


# -- a Consumer handle of another table --------------------------------------------------------------------


def test_follow_refuses_a_consumer_of_another_table(tmp_path: Any) -> None:
    cat = mere.connect(str(tmp_path))
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    a = cat.create_table("a.a", schema, primary_key="k")
    b = cat.create_table("a.b", schema, primary_key="k")
    for i in range(5):
        a.upsert(pa.table({"k": [i], "v": [i]}))
    for i in range(10):
        b.upsert(pa.table({"k": [i], "v": [i]}))
    a.consumer("etl", start_version=0)
    other = b.consumer("etl", start_version=0)
    before = (_state(a), _state(b))
    gen = mere.follow(a, consumer=other, poll_seconds=0.01)
    try:
        with pytest.raises(errors.InvalidInput):
            version, _ = next(gen)
            a.upsert(pa.table({"k": [9], "v": [9]}))
            again, _ = next(gen)  # commits the first batch, then yields the next
            assert (version, again) == (5, 6), "the first batch was not committed"
            pytest.fail("a Consumer of another table was accepted")
    finally:
        gen.close()
        assert _state(b) == before[1], "table b's consumer moved"


# -- the command line's consumer feed ----------------------------------------------------------------------


def test_the_readme_consumer_feed_command_writes_parquet_and_commits(tmp_path: Any) -> None:
    import shlex

    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from mere.cli.app import cli

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "changes sales.orders --consumer etl --commit" in x)
    args = shlex.split(line.split("#")[0])[1:]  # without 'mere'
    wh = tmp_path / "warehouse"
    t = mere.connect(str(wh)).create_table(
        "sales.orders",
        pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())]),
        primary_key="k",
    )
    t.consumer("etl", start_version=0)
    t.upsert(pa.table({"k": [1, 2], "v": [1, 2]}))
    args = [
        str(wh) if a == "warehouse/" else str(tmp_path / a) if a.endswith(".parquet") else a for a in args
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "feed.parquet").num_rows == 2
    assert t.consumer("etl", create=False).position == t.version


# -- more splits than the feed reads at a time -------------------------------------------------------------


@pytest.mark.parametrize("scope, log", [("table", "on"), ("partition", "off")])
def test_feeds_over_more_than_sixteen_splits_match_the_oracle(tmp_path: Any, scope: str, log: str) -> None:
    import random

    rng = random.Random(48)
    t = mere.connect(str(tmp_path)).create_table(
        "a.t",
        SCHEMA,
        primary_key="k",
        partition_by="p",
        buckets=9,
        key_scope=scope,
        properties={"compaction.auto": "off", "changes.log": log},
    )
    parts = [f"p{i}" for i in range(5)]  # 45 splits
    for i in range(9):
        r = rng.random()
        if r < 0.6 or i == 0:
            t.upsert(
                arrow_rows([(rng.randrange(300), rng.choice(parts), rng.randrange(5), 1) for _ in range(150)])
            )
        elif r < 0.8:
            t.delete(f"k % 7 = {rng.randrange(7)}")
        elif r < 0.9:
            t.compact(min_files=1)
        else:
            t.rollback(rng.randrange(t.version))
    t = t.refresh()
    snaps = {v: rows_of(t.to_arrow(version=v)) for v in range(t.version + 1)}
    for a, b in rng.sample(list(itertools.combinations(range(t.version + 1), 2)), 12):
        feed = t.changes(a, b).read_all()
        assert feed_rows(feed) == expected_feed(snaps[a], snaps[b]), (a, b)


@pytest.mark.parametrize("log", ["off", "on"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_moved_key_stays_in_a_copy_keyed_by_the_key_after_its_old_partition_is_overwritten(
    tmp_path: Any, log: str, dynamic: bool
) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "a.t",
        SCHEMA.remove(3),
        primary_key="k",
        partition_by="p",
        buckets=1,
        properties={"compaction.auto": "off", "changes.log": log},
    )
    assert t.key_scope == "table"
    t.upsert(pa.table({"k": [1, 2], "p": ["a", "a"], "v": [1, 2]}))  # v1
    t.upsert(pa.table({"k": [1], "p": ["b"], "v": [10]}))  # v2: key 1 moves to b
    replacement = pa.table({"k": [5], "p": ["a"], "v": [5]})
    if dynamic:  # v3: partition a replaced
        t.overwrite(replacement, dynamic=True)
    else:
        t.overwrite(replacement, {"p": "a"})
    feed = t.changes(1).read_all().to_pylist()
    moved = sorted((r["p"], r["_change"], r["_version"]) for r in feed if r["k"] == 1)
    assert moved[0][2] == moved[1][2], f"a move in one version, got {moved}"
    copy = {r["k"]: (r["p"], r["v"]) for r in t.to_arrow(version=1).to_pylist()}
    for r in sorted(feed, key=lambda r: (r["_version"], r["_change"] != "delete")):
        if r["_change"] == "delete":
            copy.pop(r["k"], None)
        elif r["_change"] in ("insert", "update_after"):
            copy[r["k"]] = (r["p"], r["v"])
    assert copy == {r["k"]: (r["p"], r["v"]) for r in t.to_arrow().to_pylist()}
