"""Rollback and tags: a rollback is a new commit whose live files are those of an older version; tags name
versions, are read by name and keep their versions through expire. Checked against a plain-dict model, on
SQLite and PostgreSQL, with bad arguments, races and the catalog migration."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import mere
from maintenance import MANUAL
from mere import errors
from mere.catalog.sql import CATALOG_FORMAT, SqlCatalog
from mere.spec import default_properties

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
NOW = dt.timedelta(0)
_names = itertools.count()

State = dict[int, int]


def rows(t: mere.Table, **at: Any) -> State:
    """The table's rows as {key: value}."""
    return {r["k"]: r["v"] for r in t.to_arrow(**at).to_pylist()}


def files_on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


# The model numbers every version a test writes: no automatic maintenance commits in between.
DEFAULTS = default_properties(True) | MANUAL  # what a table given MANUAL holds besides its own properties


def new_table(cat: mere.Catalog, properties: dict[str, str] | None = None, **kwargs: Any) -> mere.Table:
    return cat.create_table(
        f"rb.t{next(_names)}",
        SCHEMA,
        primary_key="k",
        buckets=2,
        properties=MANUAL | (properties or {}),
        **kwargs,
    )


def put(t: mere.Table, values: State) -> mere.CommitResult:
    return t.upsert(pa.table({"k": list(values), "v": list(values.values())}, schema=SCHEMA))


# -- the model ------------------------------------------------------------------------------------


def run_model(cat: mere.Catalog) -> None:
    """Random upserts, deletes, property changes, compactions, rollbacks, tags and expiries, against a model
    that keeps every version's rows and properties, which versions are readable and the tags."""

    class RollbackMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.t = new_table(cat)
            self.states: dict[int, State] = {0: {}}
            self.props: dict[int, dict[str, str]] = {0: dict(DEFAULTS)}
            self.oldest = 0
            self.tags: dict[str, int] = {}

        @property
        def current(self) -> int:
            return max(self.states)

        def readable(self, v: int) -> bool:
            return 0 <= v <= self.current and (v >= self.oldest or v in self.tags.values())

        def _commit(
            self, result: mere.CommitResult, state: State, props: dict[str, str] | None = None
        ) -> None:
            assert result.version == self.current + 1
            self.props[result.version] = dict(self.props[self.current] if props is None else props)
            self.states[result.version] = state

        @rule(keys=st.lists(st.integers(0, 7), min_size=1, max_size=4), value=st.integers(-50, 50))
        def upsert(self, keys: list[int], value: int) -> None:
            state = dict(self.states[self.current])
            state.update(dict.fromkeys(keys, value))
            self._commit(put(self.t, dict.fromkeys(keys, value)), state)

        @rule(keys=st.lists(st.integers(0, 7), min_size=1, max_size=3))
        def delete(self, keys: list[int]) -> None:
            result = self.t.delete(pa.table({"k": keys}, schema=pa.schema([SCHEMA.field("k")])))
            self._commit(result, {k: v for k, v in self.states[self.current].items() if k not in keys})

        @rule(team=st.sampled_from(["red", "blue", None]))
        def set_team(self, team: str | None) -> None:
            props = dict(self.props[self.current])
            if team is None:
                props.pop("team", None)
            else:
                props["team"] = team
            self._commit(self.t.set_properties({"team": team}), dict(self.states[self.current]), props)

        @rule()
        def compact(self) -> None:
            result = self.t.compact(min_files=1)
            if result is not None:
                self._commit(result, dict(self.states[self.current]))

        @rule(data=st.data())
        def rollback(self, data: st.DataObject) -> None:
            v = data.draw(st.integers(-1, self.current + 1))
            if not self.readable(v):
                before = (self.t.version, self.t.tags(), files_on_disk(self.t))
                with pytest.raises(errors.NoSuchVersion):
                    self.t.rollback(v)
                assert (self.t.version, self.t.tags(), files_on_disk(self.t)) == before
                return
            seen = rows(self.t, version=v)  # what a read of v gave before the rollback
            result = self.t.rollback(v)
            assert result.operation == "rollback" and result.summary["rollback_to"] == v
            self._commit(result, dict(self.states[v]), self.props[v])
            assert rows(self.t) == seen

        @precondition(lambda self: self.tags)
        @rule(data=st.data())
        def rollback_to_tag(self, data: st.DataObject) -> None:
            name = data.draw(st.sampled_from(sorted(self.tags)))
            v = self.tags[name]
            self._commit(self.t.rollback(tag=name), dict(self.states[v]), self.props[v])

        @rule(name=st.sampled_from(["v1", "release-2", "a.b_c"]), data=st.data(), replace=st.booleans())
        def tag(self, name: str, data: st.DataObject, replace: bool) -> None:
            v = data.draw(st.integers(0, self.current))
            if name in self.tags and not replace:
                with pytest.raises(errors.TagExists):
                    self.t.tag(name, v)
            elif not self.readable(v):
                with pytest.raises(errors.NoSuchVersion):
                    self.t.tag(name, v, replace=replace)
            else:
                assert self.t.tag(name, v, replace=replace) == v
                self.tags[name] = v

        @precondition(lambda self: self.tags)
        @rule(data=st.data())
        def untag(self, data: st.DataObject) -> None:
            name = data.draw(st.sampled_from(sorted(self.tags)))
            self.t.untag(name)
            del self.tags[name]

        @rule()
        def expire(self) -> None:
            self.t.expire(older_than=NOW, dry_run=False)
            self.oldest = self.current

        @precondition(lambda self: self.tags)
        @rule(data=st.data())
        def read_tag(self, data: st.DataObject) -> None:
            name = data.draw(st.sampled_from(sorted(self.tags)))
            assert rows(self.t, tag=name) == self.states[self.tags[name]]
            assert self.t.snapshot(tag=name).version == self.tags[name]
            assert not self.t.snapshot(tag=name).expired

        @rule(data=st.data())
        def read_version(self, data: st.DataObject) -> None:
            v = data.draw(st.integers(0, self.current))
            if self.readable(v):
                assert rows(self.t, version=v) == self.states[v]
            else:
                with pytest.raises(errors.NoSuchVersion):
                    self.t.scan(version=v)

        @invariant()
        def matches_the_model(self) -> None:
            assert self.t.version == self.current
            assert rows(self.t) == self.states[self.current]
            assert self.t.properties == self.props[self.current]
            assert self.t.tags() == dict(sorted(self.tags.items()))
            # Every file of every readable version is on disk (expire deleted none of them).
            needed = {f.path for v in range(self.current + 1) if self.readable(v) for f in self.t.files_at(v)}
            assert needed <= files_on_disk(self.t)
            assert [s.version for s in self.t.history() if not s.expired] == [
                v for v in range(self.current + 1) if self.readable(v)
            ]

    run_state_machine_as_test(
        RollbackMachine,
        settings=settings(
            max_examples=15, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


def test_rollback_and_tags_follow_the_model(cat: mere.Catalog) -> None:
    run_model(cat)


# -- rollback ------------------------------------------------------------------------------------


def test_rollback_is_a_new_commit_and_keeps_history(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1, 2: 2})
    put(t, {2: 20, 3: 30})
    t.delete("k = 1")
    assert t.compact() is not None
    before = t.history()
    result = t.rollback(1)
    assert result.version == 5 and result.operation == "rollback"
    assert result.rows_written == 0 and result.summary["rollback_to"] == 1
    assert rows(t) == {1: 1, 2: 2}
    assert t.history()[:5] == before  # nothing rewritten
    assert rows(t, version=3) == {2: 20, 3: 30}  # every version still reads as before
    put(t, {4: 4})  # writes go on, on top of the restored files
    assert rows(t) == {1: 1, 2: 2, 4: 4}
    t.rollback(3)  # forward again
    assert rows(t) == {2: 20, 3: 30}
    assert t.rollback(t.version).version == 8  # to the current version: an empty commit
    assert rows(t) == {2: 20, 3: 30}


def test_rollback_restores_the_properties_of_its_version(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat, properties={"team": "a"})
    put(t, {1: 1})
    t.set_properties({"team": "b", "write.compression": "snappy"})
    put(t, {1: 2})
    t.rollback(1)
    assert t.properties == DEFAULTS | {"team": "a"}
    assert local_cat.table(t.name).properties == DEFAULTS | {"team": "a"}
    assert t.current_snapshot().summary["properties"] == DEFAULTS | {"team": "a"}
    t.rollback(3)
    assert t.properties == DEFAULTS | {"team": "b", "write.compression": "snappy"}
    assert rows(t) == {1: 2}


def test_rollback_keeps_current_properties_when_the_catalog_does_not_know_older_ones(
    local_cat: mere.Catalog,
) -> None:
    t = new_table(local_cat, properties={"team": "a"})
    put(t, {1: 1})
    t.set_properties({"team": "b"})
    with local_cat.sql.engine.begin() as conn:  # as a table created before create commits kept the spec
        conn.execute(sa.text("UPDATE mere_commits SET spec = NULL WHERE version = 0"))
    t.rollback(1)
    assert rows(t) == {1: 1}
    assert t.properties == DEFAULTS | {"team": "b"}


def test_rollback_refuses_versions_whose_files_are_gone_and_changes_nothing(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2})
    assert t.compact() is not None
    t.expire(older_than=NOW, dry_run=False)
    with pytest.raises(errors.NoSuchVersion, match="expired"):
        t.rollback(1)
    assert t.version == 3 and rows(t) == {1: 2}
    # A file lost from storage (deleted by hand) is found before anything commits.
    t2 = new_table(cat)
    put(t2, {1: 1})
    t2.truncate()
    (gone,) = t2.files_at(1)
    t2.storage.delete(gone.path)
    with pytest.raises(errors.NoSuchVersion, match="gone from storage"):
        t2.rollback(1)
    assert t2.version == 2 and rows(t2) == {}


def _hook_commit(t: mere.Table, before: Callable[[], None]) -> list[str]:
    """Run ``before`` once, just before the table's next catalog commit (as a concurrent writer would)."""
    real = t._sql.commit
    seen: list[str] = []

    def commit(*args: Any, **kwargs: Any) -> Any:
        if not seen:
            seen.append(kwargs["operation"])
            before()
        return real(*args, **kwargs)

    t._sql.commit = commit  # type: ignore[method-assign]
    return seen


def test_a_rollback_overtaken_by_an_upsert_fails_and_changes_nothing(
    cat: mere.Catalog, tmp_path: Path
) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2, 2: 2})
    other = mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)
    hooked = _hook_commit(t, lambda: put(other, {3: 3}) and None)
    with pytest.raises(errors.CommitConflict, match=r"version 3 \(upsert\) landed"):
        t.rollback(1)
    assert hooked == ["rollback"]
    assert [s.operation for s in t.history()] == ["create", "upsert", "upsert", "upsert"]
    assert rows(t) == {1: 2, 2: 2, 3: 3}  # the concurrent write is there, not undone
    assert rows(t, version=1) == {1: 1}  # and the files of version 1 were not discarded
    assert t.rollback(1).version == 4  # asked again, knowing about version 3
    assert rows(t) == {1: 1}


def test_a_rollback_never_undoes_a_write_after_the_version_the_caller_saw(
    cat: mere.Catalog, tmp_path: Path
) -> None:
    """A caller reads version v and rolls back to it; a write landing in between is refused, not undone,
    with ``expected_version``; compactions after it are rolled back over."""
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2, 2: 2})
    seen = t.version
    other = mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)
    put(other, {3: 3})  # lands after the caller looked, before it calls rollback
    with pytest.raises(errors.CommitConflict, match=r"version 3 \(upsert\) landed"):
        t.rollback(seen, expected_version=seen)
    assert t.version == 3 and rows(t) == {1: 2, 2: 2, 3: 3}
    other.compact(min_files=1)
    assert t.rollback(1, expected_version=3).version == 5  # over the compaction: version 3's content goes
    assert rows(t) == {1: 1}
    assert t.rollback(4, expected_version=t.version).version == 6
    assert rows(t) == {1: 2, 2: 2, 3: 3}
    # without it, the rollback undoes what was current when it started (the documented default)
    put(other, {4: 4})
    assert t.rollback(6).version == 8 and rows(t) == {1: 2, 2: 2, 3: 3}


def test_a_rollback_is_recomputed_over_a_concurrent_compaction(cat: mere.Catalog, tmp_path: Path) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2, 2: 2})
    put(t, {3: 3})
    other = mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)
    _hook_commit(t, lambda: other.compact(min_files=1) and None)
    result = t.rollback(2)
    assert [s.operation for s in t.history()][-2:] == ["compact", "rollback"]
    assert result.version == 5 and rows(t) == {1: 2, 2: 2}


def test_a_rollback_racing_expire_of_its_version_fails_and_changes_nothing(
    cat: mere.Catalog, tmp_path: Path
) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    t.truncate()
    other = mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)
    _hook_commit(t, lambda: other.expire(older_than=NOW, dry_run=False) and None)
    with pytest.raises(errors.NoSuchVersion):
        t.rollback(1)
    assert t.version == 2 and rows(t) == {}
    assert files_on_disk(t) == {f.path for f in t.files_at(2)}  # expired files went; nothing dangles


def test_rollback_racing_upserts_never_loses_a_write(cat: mere.Catalog, tmp_path: Path) -> None:
    """Threads with their own catalog connections: upserts of fresh keys race rollbacks to version 1.

    Every upsert lands; a rollback either raises CommitConflict or lands right after the version it read
    (nothing between), so replaying the history serially gives the final table.
    """
    t = new_table(cat)
    put(t, {0: 0})
    failures: list[BaseException] = []
    outcomes: list[str] = []

    def handle() -> mere.Table:
        return mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)

    def upserts() -> None:
        try:
            mine = handle()
            for i in range(1, 13):
                put(mine, {i: i})
        except BaseException as e:
            failures.append(e)

    def rollbacks() -> None:
        try:
            mine = handle()
            for _ in range(6):
                try:
                    mine.rollback(1)
                    outcomes.append("landed")
                except errors.CommitConflict:
                    outcomes.append("conflict")
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=upserts), threading.Thread(target=rollbacks)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not failures, failures
    history = t.history()
    assert sum(s.operation == "upsert" for s in history) == 13
    assert sum(s.operation == "rollback" for s in history) == outcomes.count("landed")
    state: State = {}
    states: dict[int, State] = {}
    upserted = itertools.count()  # the n-th upsert wrote {n: n}
    for s in history:
        if s.operation == "upsert":
            n = next(upserted)
            state = {**state, n: n}
        elif s.operation == "rollback":
            assert s.summary["read_version"] == s.version - 1  # nothing landed between read and commit
            state = dict(states[s.summary["rollback_to"]])
        states[s.version] = state
        assert rows(t, version=s.version) == state
    assert rows(t) == state


# -- tags ----------------------------------------------------------------------------------------


def test_tags_name_versions_for_reads(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    assert t.tag("first") == 1
    put(t, {1: 2})
    assert t.tag("zero", 0) == 0
    assert t.tags() == {"first": 1, "zero": 0}
    assert rows(t, tag="first") == {1: 1}
    assert t.scan(tag="zero").to_arrow().num_rows == 0
    assert t.snapshot(tag="first") == t.snapshot(version=1)
    assert t.scan(columns=["v"], filter="k = 1", tag="first").to_arrow().to_pylist() == [{"v": 1}]
    with pytest.raises(errors.TagExists, match="replace=True"):
        t.tag("first")
    assert t.tag("first", replace=True) == 2
    assert rows(t, tag="first") == {1: 2}
    t.untag("first")
    assert t.tags() == {"zero": 0}
    with pytest.raises(errors.NoSuchTag):
        t.scan(tag="first")


def test_tagged_versions_survive_expire_and_cleanup(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1, 2: 1})
    t.tag("v1")
    put(t, {1: 2})
    put(t, {2: 3})
    assert t.compact() is not None
    t.delete("k = 1")
    tagged_files = {f.path for f in t.files_at(1)}
    deleted = t.expire(older_than=NOW, dry_run=False)
    assert deleted and not set(deleted) & tagged_files
    assert t.cleanup(older_than=NOW, dry_run=False) == []
    assert tagged_files <= files_on_disk(t)
    assert rows(t, tag="v1") == rows(t, version=1) == {1: 1, 2: 1}
    with pytest.raises(errors.NoSuchVersion):
        t.scan(version=2)  # untagged versions did expire
    expired = {s.version: s.expired for s in t.history()}
    assert expired == {0: True, 1: False, 2: True, 3: True, 4: True, 5: False}
    # Rollback to the tagged version after the expire, then give the tag up: the files the rollback made
    # live again stay, though the rows of version 1 go.
    t.rollback(tag="v1")
    assert rows(t) == {1: 1, 2: 1}
    t.untag("v1")
    with pytest.raises(errors.NoSuchVersion):
        t.scan(version=1)  # untagged: it expired long ago
    t.expire(older_than=NOW, dry_run=False)
    assert {f.path for f in t.files_at(t.version)} <= files_on_disk(t)
    assert rows(t) == {1: 1, 2: 1}
    put(t, {3: 3})
    t.expire(older_than=NOW, dry_run=False)
    assert files_on_disk(t) == {f.path for f in t.files_at(t.version)}  # the rest did go
    assert rows(t) == {1: 1, 2: 1, 3: 3}


def test_an_untagged_version_gives_up_its_files_at_the_next_expire(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    t.tag("keep")
    t.truncate()
    t.expire(older_than=NOW, dry_run=False)
    kept = {f.path for f in t.files_at(1)}
    assert kept <= files_on_disk(t)
    t.untag("keep")
    assert (
        set(t.expire(older_than=NOW, dry_run=False)) == kept
    )  # no newer version needed: same cutoff, files go now
    assert not kept & files_on_disk(t)


def test_dropping_a_table_removes_its_tags(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    t.tag("a")
    t.tag("b", 0)
    cat.drop_table(t.name)
    with cat.sql.engine.connect() as conn:
        left = conn.execute(sa.text("SELECT count(*) FROM mere_tags WHERE table_id = :i"), {"i": t.record.id})
        assert left.scalar() == 0
    again = cat.create_table(t.name, SCHEMA, primary_key="k", buckets=2)
    assert again.tags() == {}


# -- bad arguments ---------------------------------------------------------------------------------

BAD_CALLS: list[tuple[str, Callable[[mere.Table], Any], type[errors.MereError]]] = [
    ("rollback()", lambda t: t.rollback(), errors.InvalidInput),
    ("rollback(-1)", lambda t: t.rollback(-1), errors.NoSuchVersion),
    ("rollback(99)", lambda t: t.rollback(99), errors.NoSuchVersion),
    ("rollback('1')", lambda t: t.rollback("1"), errors.InvalidInput),
    ("rollback(True)", lambda t: t.rollback(True), errors.InvalidInput),
    ("rollback(1.0)", lambda t: t.rollback(1.0), errors.InvalidInput),
    ("rollback(1, tag)", lambda t: t.rollback(1, tag="t1"), errors.InvalidInput),
    ("rollback(tag=unknown)", lambda t: t.rollback(tag="nope"), errors.NoSuchTag),
    ("rollback(tag='')", lambda t: t.rollback(tag=""), errors.InvalidInput),
    ("rollback(tag=1)", lambda t: t.rollback(tag=1), errors.InvalidInput),
    ("rollback(1, expected_version=-1)", lambda t: t.rollback(1, expected_version=-1), errors.InvalidInput),
    ("rollback(1, expected_version=99)", lambda t: t.rollback(1, expected_version=99), errors.InvalidInput),
    ("rollback(1, expected_version='2')", lambda t: t.rollback(1, expected_version="2"), errors.InvalidInput),
    (
        "rollback(1, expected_version=True)",
        lambda t: t.rollback(1, expected_version=True),
        errors.InvalidInput,
    ),
    ("rollback(1, expected_version=1)", lambda t: t.rollback(1, expected_version=1), errors.CommitConflict),
    ("tag('')", lambda t: t.tag(""), errors.InvalidInput),
    ("tag('-x')", lambda t: t.tag("-x"), errors.InvalidInput),
    ("tag('a b')", lambda t: t.tag("a b"), errors.InvalidInput),
    ("tag('a/b')", lambda t: t.tag("a/b"), errors.InvalidInput),
    ("tag('été')", lambda t: t.tag("été"), errors.InvalidInput),
    ("tag(129 chars)", lambda t: t.tag("x" * 129), errors.InvalidInput),
    ("tag(5)", lambda t: t.tag(5), errors.InvalidInput),
    ("tag(None)", lambda t: t.tag(None), errors.InvalidInput),
    ("tag(existing)", lambda t: t.tag("t1"), errors.TagExists),
    ("tag(v=-1)", lambda t: t.tag("new", -1), errors.NoSuchVersion),
    ("tag(v=99)", lambda t: t.tag("new", 99), errors.NoSuchVersion),
    ("tag(v='1')", lambda t: t.tag("new", "1"), errors.InvalidInput),
    ("tag(v=True)", lambda t: t.tag("new", True), errors.InvalidInput),
    ("tag(replace='yes')", lambda t: t.tag("t1", replace="yes"), errors.InvalidInput),
    ("untag(unknown)", lambda t: t.untag("nope"), errors.NoSuchTag),
    ("untag(3)", lambda t: t.untag(3), errors.InvalidInput),
    ("untag('')", lambda t: t.untag(""), errors.InvalidInput),
    ("scan(tag=unknown)", lambda t: t.scan(tag="nope"), errors.NoSuchTag),
    ("scan(tag=1)", lambda t: t.scan(tag=1), errors.InvalidInput),
    ("scan(version, tag)", lambda t: t.scan(version=1, tag="t1"), errors.InvalidInput),
    ("scan(as_of, tag)", lambda t: t.scan(as_of=dt.datetime.now(dt.UTC), tag="t1"), errors.InvalidInput),
    ("to_arrow(tag=unknown)", lambda t: t.to_arrow(tag="nope"), errors.NoSuchTag),
    ("snapshot(tag=unknown)", lambda t: t.snapshot(tag="nope"), errors.NoSuchTag),
    ("snapshot(version, tag)", lambda t: t.snapshot(version=1, tag="t1"), errors.InvalidInput),
]


@pytest.mark.parametrize(("what", "call", "error"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_raise_typed_errors_and_change_nothing(
    local_cat: mere.Catalog, what: str, call: Callable[[mere.Table], Any], error: type[errors.MereError]
) -> None:
    t = new_table(local_cat)
    put(t, {1: 1})
    t.tag("t1")
    put(t, {2: 2})
    before = (t.version, t.history(), t.tags(), files_on_disk(t), t.properties)
    with pytest.raises(error) as info:
        call(t)
    assert isinstance(info.value, errors.MereError)
    assert (t.version, t.history(), t.tags(), files_on_disk(t), t.properties) == before


def test_tag_names_that_are_fine(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat)
    for name in ("a", "7", "v1.2.3", "release_2026-11-21", "X" * 128):
        assert t.tag(name) == 0
    assert sorted(t.tags()) == sorted(["a", "7", "v1.2.3", "release_2026-11-21", "X" * 128])


def test_an_expired_version_cannot_be_tagged(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2})
    t.expire(older_than=NOW, dry_run=False)
    with pytest.raises(errors.NoSuchVersion, match="expired"):
        t.tag("late", 1)
    assert t.tags() == {}


def test_an_existing_tag_name_is_the_error_even_for_an_expired_version(cat: mere.Catalog) -> None:
    # Found by the model: without replace, the name clash wins over the version check.
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2})
    t.tag("keep", 2)
    t.expire(older_than=NOW, dry_run=False)
    with pytest.raises(errors.TagExists):
        t.tag("keep", 1)
    with pytest.raises(errors.NoSuchVersion, match="expired"):
        t.tag("keep", 1, replace=True)
    assert t.tags() == {"keep": 2}


# -- the catalog -------------------------------------------------------------------------------------


def test_a_format_3_catalog_gains_the_tags_table(cat: mere.Catalog, catalog_url: str) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    with cat.sql.engine.begin() as conn:  # as a format-3 mere left it
        conn.execute(sa.text("DROP TABLE mere_tags"))
        conn.execute(sa.text("DROP TABLE mere_consumers"))
        conn.execute(sa.text("UPDATE mere_catalog SET value = '3' WHERE key = 'format'"))
    cat.sql.engine.dispose()
    fresh = SqlCatalog(cat.catalog_url)
    assert fresh.format_version() == 3
    reopened = mere.connect(str(t.storage.root), catalog=catalog_url)
    table = reopened.table(t.name)
    assert table.tags() == {}  # connecting migrated it
    assert reopened.sql.format_version() == CATALOG_FORMAT == 6
    assert reopened.upgrade() == []
    table.tag("after-upgrade")
    put(table, {1: 2})
    table.rollback(tag="after-upgrade")
    assert rows(table) == {1: 1}
    fresh.engine.dispose()


def test_upgrade_from_format_3_lists_the_tags_step(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    new_table(cat)
    db = tmp_path / "wh" / "catalog.db"
    cat.sql.engine.dispose()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE mere_tags")
        conn.execute("DROP TABLE mere_consumers")
        conn.execute("DROP TABLE mere_transactions")
        conn.execute("UPDATE mere_catalog SET value = '3' WHERE key = 'format'")
    steps = SqlCatalog(f"sqlite:///{db}").upgrade()
    assert [s.split(":")[0] for s in steps] == ["format 4", "format 5", "format 6"]


# -- docs ------------------------------------------------------------------------------------------


def _concepts_examples() -> Iterator[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "concepts.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if "rollback" in block and "mere.connect" in block:
            yield block


def test_the_concepts_rollback_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (code,) = list(_concepts_examples())
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/concepts.md[rollback]", "exec"), {})
