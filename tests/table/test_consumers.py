"""Change-feed consumers: named positions in the catalog that a feed resumes from and that expire keeps.

On SQLite and PostgreSQL (``cat``): a copy fed by a consumer that crashes, replays and commits equals its
source, manual expire and automatic retention keep every version a consumer needs, an unseen consumer is
dropped loudly (a warning, then a typed error), and concurrent commits keep the furthest position.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import threading
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors
from mere.catalog.sql import consumers as consumers_table
from mere.metadata import now_micros

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
_names = itertools.count()
WEEK = dt.timedelta(days=7)


def _table(cat: mere.Catalog, **properties: str) -> mere.Table:
    props = {"compaction.auto": "off", "retention.max-age": "off", **properties}
    return cat.create_table(f"c.t{next(_names)}", SCHEMA, primary_key="id", buckets=2, properties=props)


def _rows(t: mere.Table, version: int | None = None) -> dict[int, int]:
    return {r["id"]: r["v"] for r in t.to_arrow(version=version).to_pylist()}


def _apply(copy: dict[int, int], feed: pa.Table, limit: int | None = None) -> None:
    """Apply feed rows by key, as a sink does (upsert inserts and after-images, delete deletes); ``limit``:
    only the first rows (a reader that crashed half-way)."""
    for r in feed.to_pylist()[:limit]:
        if r["_change"] in ("insert", "update_after"):
            copy[r["id"]] = r["v"]
        elif r["_change"] == "delete":
            copy.pop(r["id"], None)


def _unseen_for(t: mere.Table, by: dt.timedelta, *names: str) -> None:
    """Consumers last seen ``by`` ago (their last-seen time set back in the catalog)."""
    micros = now_micros() - by // dt.timedelta(microseconds=1)
    with t.catalog.sql.engine.connect() as conn, conn.begin():  # type: ignore[attr-defined]
        conn.execute(
            consumers_table.update()
            .where(consumers_table.c.table_id == t.record.id, consumers_table.c.name.in_(names))
            .values(last_seen=micros)
        )


# -- resuming ------------------------------------------------------------------------------------------

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(st.integers(0, 7), min_size=1, max_size=4), st.integers(0, 3)),
        st.tuples(st.just("delete"), st.integers(0, 7)),
        st.tuples(st.just("read"), st.booleans(), st.integers(0, 6)),  # commit?, rows applied if not
        st.tuples(st.just("expire")),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=14,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=25)
@given(steps=STEPS)
def test_a_copy_fed_by_a_consumer_that_crashes_and_resumes_is_exact(
    cat: mere.Catalog, steps: list[tuple[Any, ...]]
) -> None:
    """Reads that crash after applying part of a batch (no commit), expires and compactions in between:
    the consumer hands out the uncommitted range again, whole, and the copy ends equal to the table."""
    t = _table(cat)
    t.upsert(pa.table({"id": [0, 1], "v": [0, 0]}))
    c = t.consumer("copy")
    assert c.position == t.version == 1
    copy = _rows(t)
    for step in steps:
        if step[0] == "upsert":
            ids = sorted(set(step[1]))
            t.upsert(pa.table({"id": ids, "v": [step[2]] * len(ids)}))
        elif step[0] == "delete":
            t.delete(f"id = {step[1]}")
        elif step[0] == "expire":
            t.expire(dt.timedelta(0), dry_run=False)
            assert not t.snapshot(c.position).expired  # what the consumer needs stays
        elif step[0] == "compact":
            t.compact()
        else:
            end, feed = c.changes()
            rows = feed.read_all()
            if step[1]:
                _apply(copy, rows)
                assert c.commit(end) == end
                assert copy == _rows(t, end)
            else:
                _apply(copy, rows, step[2])  # crashed: nothing committed
                assert c.info().pending == (end if end > c.position else None)
    end, feed = c.changes()
    _apply(copy, feed.read_all())
    c.commit(end)
    end, feed = c.changes()  # everything up to the newest version, if the replay ended before it
    _apply(copy, feed.read_all())
    c.commit(end)
    assert end == t.version and copy == _rows(t)


def test_an_uncommitted_range_is_read_again_whole(cat: mere.Catalog) -> None:
    """A key the crashed batch inserted and a later commit deleted is in no feed from the position to the
    newest version: the replay is the same range, then the delete."""
    t = _table(cat)
    c = t.consumer("sink", start_version=0)
    t.upsert(pa.table({"id": [1, 2], "v": [1, 2]}))  # v1
    copy: dict[int, int] = {}
    end, feed = c.changes()
    assert end == 1
    _apply(copy, feed.read_all(), 1)  # one of the two inserts, then a crash
    t.delete("id = 1")  # v2
    t.delete("id = 2")  # v3
    assert t.changes(0).read_all().num_rows == 0  # net: nothing, the half-applied row would stay
    with pytest.raises(errors.InvalidInput, match=r"has not committed them"):
        c.changes(3)
    assert c.info().pending == 1 and t.inspect.consumers()["pending"].to_pylist() == [1]
    again, feed = c.changes()
    assert again == 1
    _apply(copy, feed.read_all())
    c.commit(again)
    assert c.info().pending is None
    end, feed = c.changes()
    assert end == 3
    _apply(copy, feed.read_all())
    c.commit(end)
    assert copy == {} == _rows(t)
    # seek drops a pending range (the caller rebuilt what it feeds)
    t.upsert(pa.table({"id": [5], "v": [5]}))
    assert c.changes()[0] == 4 and c.info().pending == 4
    assert c.seek(2) == 2 and c.info().pending is None
    assert {r["id"] for r in c.changes(3)[1].read_all().to_pylist()} == {2}


def test_table_changes_and_follow_take_a_consumer(cat: mere.Catalog) -> None:
    t = _table(cat)
    t.upsert(pa.table({"id": [1], "v": [1]}))
    t.consumer("a", start_version=0)
    t.upsert(pa.table({"id": [2], "v": [2]}))
    feed = t.changes(consumer="a", end_version=2).read_all()
    assert sorted(feed["id"].to_pylist()) == [1, 2]
    with pytest.raises(errors.InvalidInput, match="not both"):
        t.changes(0, consumer="a")
    with pytest.raises(errors.InvalidInput, match="start_version"):
        t.changes()
    with pytest.raises(errors.NoSuchConsumer):
        t.changes(consumer="nobody")
    t.consumer("a").commit(2)

    # follow commits a batch only when the caller asks for the next one
    t.upsert(pa.table({"id": [3], "v": [3]}))  # v3
    stream = t.follow(consumer="a", poll_seconds=0.01, max_poll_seconds=0.01)
    version, changes = next(stream)
    assert (version, changes["id"].to_pylist()) == (3, [3])
    assert t.consumer("a").position == 2  # taken, not yet handled
    stream.close()  # the caller stopped (or crashed): the batch is read again
    version, changes = next(mere.follow(t, consumer="a", poll_seconds=0.01))
    assert (version, changes["id"].to_pylist()) == (3, [3])
    stream = t.consumer("a").follow(poll_seconds=0.01, max_poll_seconds=0.01)
    assert next(stream)[0] == 3
    t.upsert(pa.table({"id": [4], "v": [4]}))  # v4
    assert next(stream)[0] == 4  # asking for it committed 3
    assert t.consumer("a").position == 3
    stream.close()

    manual = t.follow(consumer="a", poll_seconds=0.01, auto_commit=False)
    assert next(manual)[0] == 4
    with pytest.raises(errors.InvalidInput, match="auto_commit=False"):
        next(manual)
    manual = t.follow(consumer="a", poll_seconds=0.01, max_poll_seconds=0.01, auto_commit=False)
    assert next(manual)[0] == 4
    t.consumer("a").commit(4)
    t.upsert(pa.table({"id": [5], "v": [5]}))
    assert next(manual)[0] == 5
    for bad in (
        lambda: t.follow(1, consumer="a"),
        lambda: t.follow(consumer="a", auto_commit="yes"),  # type: ignore[arg-type]
        lambda: t.follow(consumer="bad name"),
    ):
        with pytest.raises(errors.InvalidInput):
            next(bad())


# -- expire keeps what consumers need ------------------------------------------------------------------


def test_expire_keeps_the_versions_of_the_lowest_consumer(cat: mere.Catalog) -> None:
    t = _table(cat)
    for i in range(3):
        t.upsert(pa.table({"id": [i], "v": [i]}))  # v1..v3
    slow = t.consumer("slow", start_version=1)
    fast = t.consumer("fast")
    assert (slow.position, fast.position) == (1, 3)
    for i in range(3):
        t.upsert(pa.table({"id": [i], "v": [10 + i]}))  # v4..v6
    dry = t.expire(dt.timedelta(0), dry_run=True)
    assert t.expire(dt.timedelta(0), dry_run=False) == dry
    assert [s.version for s in t.history() if s.expired] == [0]  # slow holds 1 and later
    end, feed = slow.changes()
    assert end == 6 and sorted(feed.read_all()["id"].to_pylist()) == [0, 0, 1, 2]
    slow.commit(4)
    t.expire(dt.timedelta(0), dry_run=False)
    assert [s.version for s in t.history() if not s.expired] == [3, 4, 5, 6]  # fast now holds 3
    fast.commit(6)
    t.expire(dt.timedelta(0), dry_run=False)
    assert [s.version for s in t.history() if not s.expired] == [4, 5, 6]
    with pytest.raises(errors.NoSuchVersion):
        slow.seek(3)  # expired now
    with pytest.raises(errors.NoSuchVersion, match="expired"):
        t.consumer("late", start_version=2)
    t.drop_consumer("slow")
    t.expire(dt.timedelta(0), dry_run=False)
    assert [s.version for s in t.history() if not s.expired] == [6]
    assert fast.changes()[0] == 6


def test_automatic_retention_keeps_what_a_consumer_needs(cat: mere.Catalog) -> None:
    t = _table(cat)
    t.upsert(pa.table({"id": [1], "v": [1]}))  # v1
    c = t.consumer("etl")
    t.set_properties({"retention.max-age": "0", "retention.min-versions": "1"})  # v2
    copy = _rows(t, 1)
    for i in range(4):
        t.upsert(pa.table({"id": [i], "v": [i]}))  # v3..v6, each followed by retention
    assert [s.version for s in t.history() if s.expired] == [0]
    end, feed = c.changes()
    _apply(copy, feed.read_all())
    c.commit(end)
    assert copy == _rows(t)
    t.auto_expire()  # runs the policy at once (a commit would, a tenth of max-age after the last try)
    assert [s.version for s in t.history() if not s.expired] == [end]


# -- unseen consumers ------------------------------------------------------------------------------------


def test_an_unseen_consumer_is_dropped_loudly(cat: mere.Catalog, caplog: pytest.LogCaptureFixture) -> None:
    t = _table(cat)
    t.upsert(pa.table({"id": [1], "v": [1]}))  # v1
    behind = t.consumer("behind")
    idle = t.consumer("idle", start_version=t.version)
    t.upsert(pa.table({"id": [2], "v": [2]}))  # v2
    t.upsert(pa.table({"id": [3], "v": [3]}))  # v3
    idle.commit(3)  # up to date: holds nothing back
    _unseen_for(t, WEEK - dt.timedelta(hours=1), "behind", "idle")  # within the default limit
    t.expire(dt.timedelta(0), dry_run=False)
    assert [s.version for s in t.history() if not s.expired] == [1, 2, 3]
    assert t.inspect.consumers()["dropped_at"].null_count == 2

    _unseen_for(t, WEEK + dt.timedelta(hours=1), "behind", "idle")
    fresh = t.consumer("fresh", start_version=2)  # seen now: pins 2
    assert t.expire(dt.timedelta(0), dry_run=True) == t.expire(dt.timedelta(0), dry_run=True)
    assert t.inspect.consumers()["dropped_at"].null_count == 3  # a dry run drops nothing
    with caplog.at_level(logging.WARNING, logger="mere"):
        t.expire(dt.timedelta(0), dry_run=False)
    warned = [r.getMessage() for r in caplog.records if "consumer" in r.getMessage()]
    assert len(warned) == 1 and "'behind'" in warned[0] and "changes.consumer-expiration (7d)" in warned[0]
    assert [s.version for s in t.history() if not s.expired] == [2, 3]  # fresh holds 2
    info = {r["name"]: r for r in t.inspect.consumers().to_pylist()}
    assert info["behind"]["dropped_at"] is not None and "unseen" in info["behind"]["dropped_reason"]
    assert info["idle"]["dropped_at"] is None  # unseen as long, but it held nothing back
    assert info["fresh"]["droppable_after"] > dt.datetime.now(dt.UTC) + WEEK - dt.timedelta(minutes=1)

    for use in (
        lambda: behind.position,
        lambda: behind.changes(),
        lambda: behind.commit(3),
        lambda: behind.seek(3),
        lambda: behind.heartbeat(),
        lambda: t.consumer("behind"),
        lambda: t.changes(consumer="behind"),
        lambda: next(t.follow(consumer="behind")),
    ):
        with pytest.raises(errors.ConsumerDropped, match=r"'behind' was dropped by expire at .*unseen"):
            use()
    t.drop_consumer("behind")  # the owner rebuilt its copy: the name is free again
    assert t.consumer("behind").position == t.version
    fresh.drop()
    with pytest.raises(errors.NoSuchConsumer):
        fresh.info()


def test_retention_drops_an_unseen_consumer_by_the_tables_limit(
    cat: mere.Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    t = _table(cat, **{"changes.consumer-expiration": "2h"})
    t.upsert(pa.table({"id": [1], "v": [1]}))
    c = t.consumer("etl")
    t.set_properties({"retention.max-age": "0", "retention.min-versions": "1"})
    t.upsert(pa.table({"id": [2], "v": [2]}))
    assert not c.info().dropped
    _unseen_for(t, dt.timedelta(hours=3), "etl")
    with caplog.at_level(logging.WARNING, logger="mere"):
        t.auto_expire()
    assert any("'etl'" in r.getMessage() for r in caplog.records)
    assert [s.version for s in t.history() if not s.expired] == [t.version]
    with pytest.raises(errors.ConsumerDropped, match=r"changes\.consumer-expiration \(2h\)"):
        c.changes()

    never = _table(cat, **{"changes.consumer-expiration": "off"})
    never.upsert(pa.table({"id": [1], "v": [1]}))
    kept = never.consumer("etl", start_version=0)
    never.upsert(pa.table({"id": [2], "v": [2]}))
    _unseen_for(never, dt.timedelta(days=10_000), "etl")
    never.expire(dt.timedelta(0), dry_run=False)
    assert kept.position == 0 and not any(s.expired for s in never.history())
    assert never.inspect.consumers()["droppable_after"].to_pylist() == [None]
    for bad in ("0", "-1d", "soon"):
        with pytest.raises(errors.InvalidInput, match="consumer-expiration"):
            never.set_properties({"changes.consumer-expiration": bad})


# -- the API's edges ----------------------------------------------------------------------------------------


def test_register_drop_and_inspect(cat: mere.Catalog) -> None:
    t = _table(cat)
    assert t.inspect.consumers().num_rows == 0
    assert t.inspect.consumers().schema.names == [
        "name",
        "position",
        "lag",
        "pending",
        "created_at",
        "last_seen",
        "droppable_after",
        "dropped_at",
        "dropped_reason",
    ]
    t.upsert(pa.table({"id": [1], "v": [1]}))
    a = t.consumer("a", start_version=0)
    b = t.consumer("b")
    assert t.consumer("a", start_version=1).position == 0  # an existing one stays where it is
    t.upsert(pa.table({"id": [2], "v": [2]}))
    rows = t.inspect.consumers().to_pylist()
    assert [(r["name"], r["position"], r["lag"], r["pending"]) for r in rows] == [
        ("a", 0, 2, None),
        ("b", 1, 1, None),
    ]
    assert rows[0]["created_at"] <= rows[0]["last_seen"] <= dt.datetime.now(dt.UTC)
    assert repr(a) == f"Consumer('a', table={t.name!r})"
    a.drop()
    with pytest.raises(errors.NoSuchConsumer, match="no consumer 'a'"):
        a.info()
    with pytest.raises(errors.NoSuchConsumer):
        t.drop_consumer("a")
    with pytest.raises(errors.NoSuchConsumer):
        t.consumer("a", create=False)
    assert t.consumer("a", start_version=2).position == 2
    assert b.commit(2) == 2 and b.commit(1) == 2  # only forward
    other = cat.create_table("c.other", SCHEMA, primary_key="id")
    assert other.inspect.consumers().num_rows == 0  # consumers belong to their table
    cat.drop_table(t.name)
    again = cat.create_table(t.name, SCHEMA, primary_key="id")
    assert again.inspect.consumers().num_rows == 0  # and go with it


def test_bad_names_and_versions_are_invalid_input(cat: mere.Catalog) -> None:
    t = _table(cat)
    t.upsert(pa.table({"id": [1], "v": [1]}))
    c = t.consumer("ok-1.x_y")
    for bad in ("", "-x", "a b", "x" * 129, "é", None, 3):
        with pytest.raises(errors.InvalidInput, match="consumer name"):
            t.consumer(bad)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidInput, match="consumer name"):
            t.drop_consumer(bad)  # type: ignore[arg-type]
    for version in (-1, "1", 1.0, True, None):
        with pytest.raises(errors.InvalidInput, match="non-negative integer"):
            c.commit(version)  # type: ignore[arg-type]
        if version is not None:
            with pytest.raises(errors.InvalidInput, match="non-negative integer"):
                t.consumer("new", start_version=version)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput, match="create"):
        t.consumer("x", create="no")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput, match="applies to a consumer being created"):
        t.consumer("ok-1.x_y", start_version=0, create=False)
    for beyond in (2, 2**63, 2**70):
        with pytest.raises(errors.NoSuchVersion):
            c.commit(beyond)
        with pytest.raises(errors.NoSuchVersion):
            t.consumer("new", start_version=beyond)
        with pytest.raises(errors.NoSuchVersion):
            c.changes(beyond)
    with pytest.raises(errors.InvalidInput, match="before consumer"):
        c.changes(0)
    assert c.position == 1 and t.inspect.consumers()["name"].to_pylist() == ["ok-1.x_y"]
    plain = cat.create_table("c.plain", SCHEMA)  # no key: the feed is refused, as without a consumer
    plain.consumer("x")
    with pytest.raises(errors.InvalidInput, match="no primary key"):
        plain.changes(consumer="x")


def test_concurrent_commits_keep_the_furthest_and_registrations_one(cat: mere.Catalog) -> None:
    t = _table(cat)
    for i in range(8):
        t.upsert(pa.table({"id": [i], "v": [i]}))
    t.consumer("c", start_version=0)
    handles = [cat.table(t.name) for _ in range(4)]  # each thread its own handle, as processes would
    errors_seen: list[BaseException] = []

    def ack(h: mere.Table, versions: list[int]) -> None:
        try:
            for v in versions:
                assert h.consumer("c", create=False).commit(v) >= v
                h.consumer("n")  # registered once, whoever comes first
        except BaseException as e:  # pragma: no cover - reported below
            errors_seen.append(e)

    orders = [[1, 5, 3], [8, 2], [4, 7, 6], [2, 2, 8]]
    threads = [threading.Thread(target=ack, args=(h, o)) for h, o in zip(handles, orders)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors_seen == []
    rows = {r["name"]: r["position"] for r in t.inspect.consumers().to_pylist()}
    assert rows == {"c": 8, "n": 8}
