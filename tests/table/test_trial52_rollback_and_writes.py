"""Trial 52: rollback(expected_version=) against a plain-dict model per version (SQLite and PostgreSQL),
with racing writers, bad arguments and tags; and interrupted writes (KeyboardInterrupt in the waiting
thread) leaving no unreferenced file behind."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import settings
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

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
KEYS = pa.schema([SCHEMA.field("k")])
_names = itertools.count()
State = dict[int, int]


def rows(t: mere.Table, **at: Any) -> State:
    return {r["k"]: r["v"] for r in t.to_arrow(**at).to_pylist()}


def on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def new_table(cat: mere.Catalog, buckets: int = 2) -> mere.Table:
    return cat.create_table(
        f"rb52.t{next(_names)}", SCHEMA, primary_key="k", buckets=buckets, properties=MANUAL
    )


def put(t: mere.Table, values: State) -> mere.CommitResult:
    return t.upsert(pa.table({"k": list(values), "v": list(values.values())}, schema=SCHEMA))


def fingerprint(t: mere.Table) -> tuple[Any, ...]:
    return (t.version, rows(t), t.properties, t.tags(), on_disk(t), [s.operation for s in t.history()])


# -- the model: every version's rows; rollback(expected_version=) refused iff a non-compaction landed ----


def run_model(cat: mere.Catalog) -> None:
    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.t = new_table(cat)
            self.states: dict[int, State] = {0: {}}
            self.ops: dict[int, str] = {0: "create"}
            self.props: dict[int, str | None] = {0: None}
            self.tags: dict[str, int] = {}
            self.oldest = 0

        def readable(self, v: int) -> bool:
            return v >= self.oldest or v in self.tags.values()

        @property
        def current(self) -> int:
            return max(self.states)

        def _commit(self, result: mere.CommitResult, state: State, op: str, prop: Any = "same") -> None:
            assert result.version == self.current + 1
            self.props[result.version] = self.props[self.current] if prop == "same" else prop
            self.states[result.version] = state
            self.ops[result.version] = op

        @rule(keys=st.lists(st.integers(0, 7), min_size=1, max_size=4), value=st.integers(-50, 50))
        def upsert(self, keys: list[int], value: int) -> None:
            state = dict(self.states[self.current])
            state.update(dict.fromkeys(keys, value))
            self._commit(put(self.t, dict.fromkeys(keys, value)), state, "upsert")

        @rule(keys=st.lists(st.integers(0, 7), min_size=1, max_size=3))
        def delete(self, keys: list[int]) -> None:
            result = self.t.delete(pa.table({"k": keys}, schema=KEYS))
            self._commit(
                result, {k: v for k, v in self.states[self.current].items() if k not in keys}, "delete"
            )

        @rule(team=st.sampled_from(["red", "blue", None]))
        def set_team(self, team: str | None) -> None:
            self._commit(
                self.t.set_properties({"team": team}), dict(self.states[self.current]), "props", team
            )

        @rule()
        def compact(self) -> None:
            result = self.t.compact(min_files=1)
            if result is not None:
                self._commit(result, dict(self.states[self.current]), "compact")

        def _rollback(self, target: int, expected: int, tag: str | None) -> None:
            refused = any(self.ops[v] != "compact" for v in range(expected + 1, self.current + 1))
            before = fingerprint(self.t)
            if not self.readable(target):
                with pytest.raises((errors.NoSuchVersion, errors.CommitConflict)):
                    self.t.rollback(target, expected_version=expected)
                assert fingerprint(self.t) == before
                return
            call = (
                (lambda: self.t.rollback(tag=tag, expected_version=expected))
                if tag
                else (lambda: self.t.rollback(target, expected_version=expected))
            )
            if refused:
                with pytest.raises(errors.CommitConflict):
                    call()
                assert fingerprint(self.t) == before
            else:
                result = call()
                assert result.operation == "rollback"
                self._commit(result, dict(self.states[target]), "rollback", self.props[target])

        @rule(data=st.data())
        def rollback(self, data: st.DataObject) -> None:
            target = data.draw(st.integers(0, self.current))
            expected = data.draw(st.integers(0, self.current))
            self._rollback(target, expected, None)

        @precondition(lambda self: self.tags)
        @rule(data=st.data())
        def rollback_to_tag(self, data: st.DataObject) -> None:
            name = data.draw(st.sampled_from(sorted(self.tags)))
            expected = data.draw(st.integers(0, self.current))
            self._rollback(self.tags[name], expected, name)

        @rule(name=st.sampled_from(["a", "b"]), data=st.data())
        def tag(self, name: str, data: st.DataObject) -> None:
            v = data.draw(st.integers(0, self.current))
            if not self.readable(v):
                with pytest.raises(errors.NoSuchVersion):
                    self.t.tag(name, v, replace=True)
                return
            assert self.t.tag(name, v, replace=True) == v
            self.tags[name] = v

        @rule()
        def expire(self) -> None:
            self.t.expire(older_than=dt.timedelta(0), dry_run=False)
            self.oldest = self.current

        @rule(data=st.data())
        def bad_expected(self, data: st.DataObject) -> None:
            bad = data.draw(
                st.sampled_from(
                    [-1, self.current + 1, 2**70, -(2**70), 1.0, "0", True, False, [0], float("nan")]
                )
            )
            before = fingerprint(self.t)
            with pytest.raises(errors.InvalidInput):
                self.t.rollback(self.current, expected_version=bad)
            if self.tags:
                with pytest.raises(errors.InvalidInput):
                    self.t.rollback(tag=sorted(self.tags)[0], expected_version=bad)
            assert fingerprint(self.t) == before

        @invariant()
        def matches(self) -> None:
            assert self.t.version == self.current
            assert rows(self.t) == self.states[self.current]
            assert self.t.properties.get("team") == self.props[self.current]
            for v in range(self.current + 1):
                if self.readable(v):
                    assert rows(self.t, version=v) == self.states[v], v

    run_state_machine_as_test(
        Machine, settings=settings(max_examples=10, stateful_step_count=16, deadline=None)
    )


def test_rollback_expected_version_model(cat: mere.Catalog) -> None:
    run_model(cat)


# -- bad arguments: every one a MereError, nothing changed ---------------------------------------------


BAD = [
    ({"version": 2**70}, errors.MereError),
    ({"version": -(2**70)}, errors.MereError),
    ({"version": 2**63}, errors.MereError),
    ({"version": 1, "expected_version": 2**63}, errors.InvalidInput),
    ({"version": 2**63, "expected_version": 1}, errors.MereError),
    ({"version": None, "expected_version": 1}, errors.InvalidInput),
    ({"version": 1, "expected_version": 1.5}, errors.InvalidInput),
    ({"version": 1, "expected_version": b"1"}, errors.InvalidInput),
    ({"version": 1, "expected_version": {}}, errors.InvalidInput),
    ({"tag": "t1", "expected_version": -1}, errors.InvalidInput),
    ({"tag": "t1", "expected_version": "x"}, errors.InvalidInput),
    ({"tag": "nope", "expected_version": 2}, errors.NoSuchTag),
    ({"tag": "t1", "version": 1, "expected_version": 2}, errors.InvalidInput),
    ({"tag": "x" * 10_000, "expected_version": 2}, errors.MereError),
    ({"tag": "a\x00b", "expected_version": 2}, errors.MereError),
    ({"version": 1, "expected_version": 0}, errors.CommitConflict),
    ({"tag": "t1", "expected_version": 1}, errors.CommitConflict),
]


@pytest.mark.parametrize("kwargs,error", BAD, ids=[repr(k)[:60] for k, _ in BAD])
def test_bad_rollback_arguments_change_nothing(
    cat: mere.Catalog, kwargs: dict[str, Any], error: type
) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    t.tag("t1")
    put(t, {2: 2})
    before = fingerprint(t)
    with pytest.raises(error):
        t.rollback(**kwargs)
    assert fingerprint(t) == before
    assert t.rollback(1, expected_version=2).version == 3 and rows(t) == {1: 1}


def test_expected_version_with_only_compactions_after_it(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1, 2: 1})
    put(t, {2: 2, 3: 3})
    seen = t.version
    t.compact(min_files=1)
    assert t.history()[-1].operation == "compact"
    put(t, {9: 9})
    t.compact(min_files=1)
    # a non-compaction (version 4) after 2: refused
    before = fingerprint(t)
    with pytest.raises(errors.CommitConflict):
        t.rollback(1, expected_version=seen)
    assert fingerprint(t) == before
    # only the compaction (5) after 4
    assert t.rollback(1, expected_version=4).version == 6
    assert rows(t) == {1: 1, 2: 1}
    assert rows(t, version=5) == {1: 1, 2: 2, 3: 3, 9: 9}
    # roll forward again to the compacted version, with expected = current
    assert t.rollback(5, expected_version=6).version == 7
    assert rows(t) == {1: 1, 2: 2, 3: 3, 9: 9}


def test_rollback_to_an_expired_version_with_expected_version(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {1: 2})
    put(t, {1: 3})
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    before = fingerprint(t)
    with pytest.raises(errors.NoSuchVersion):
        t.rollback(1, expected_version=3)
    assert fingerprint(t) == before
    assert t.rollback(3, expected_version=3).version == 4 and rows(t) == {1: 3}


# -- races: rollback(expected_version=seen) against writers on other handles ----------------------------


def _race(cat: mere.Catalog, seed: int) -> None:
    t = new_table(cat, buckets=3)
    for i in range(3):
        put(t, {i: i, i + 10: i})
    url = cat.catalog_url
    written: dict[int, tuple[str, Any]] = {}
    lock = threading.Lock()
    problems: list[BaseException] = []
    rolled: list[tuple[int, int, int]] = []  # (result version, target, expected)
    refused: list[tuple[int, int]] = []

    def other() -> mere.Table:
        return mere.connect(WH[0], catalog=url).table(t.name)

    def writer(n: int) -> None:
        rnd = random.Random(seed * 100 + n)
        h = other()
        for _ in range(6):
            try:
                what = rnd.choice(["upsert", "delete", "compact", "props", "tag"])
                if what == "upsert":
                    vals = {rnd.randrange(12): rnd.randrange(100) for _ in range(3)}
                    r = put(h, vals)
                    with lock:
                        written[r.version] = ("upsert", vals)
                elif what == "delete":
                    ks = [rnd.randrange(12) for _ in range(2)]
                    r = h.delete(pa.table({"k": ks}, schema=KEYS))
                    with lock:
                        written[r.version] = ("delete", ks)
                elif what == "compact":
                    r = h.compact(min_files=1)
                    if r is not None:
                        with lock:
                            written[r.version] = ("compact", None)
                elif what == "props":
                    r = h.set_properties({"team": str(rnd.randrange(5))})
                    with lock:
                        written[r.version] = ("props", None)
                else:
                    h.tag(f"w{n}", replace=True)
            except errors.CommitConflict:
                pass
            except BaseException as e:
                problems.append(e)

    def roller(n: int) -> None:
        rnd = random.Random(seed * 1000 + n)
        h = other()
        for _ in range(5):
            seen = h.version
            target = rnd.randrange(seen + 1)
            try:
                r = h.rollback(target, expected_version=seen)
                with lock:
                    rolled.append((r.version, target, seen))
            except errors.CommitConflict:
                refused.append((target, seen))
            except errors.NoSuchVersion:
                pass
            except BaseException as e:
                problems.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=roller, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "hang"
    assert not problems, problems
    _replay(t, written, rolled)


def _replay(t: mere.Table, written: dict[int, tuple[str, Any]], rolled: list[tuple[int, int, int]]) -> None:
    """Every version against the model: what its writer did; a rollback's target state, and no
    non-compaction between its expected_version and itself."""
    hist = t.history()
    ops = {s.version: s.operation for s in hist}
    states: dict[int, State] = {0: {}}
    for v in range(1, t.version + 1):
        prev = dict(states[v - 1])
        if v <= 3:  # the setup: put(t, {i: i, i + 10: i}) for i in 0..2
            prev.update({v - 1: v - 1, v + 9: v - 1})
            states[v] = prev
            assert rows(t, version=v) == prev
            continue
        kind = written.get(v)
        roll = [r for r in rolled if r[0] == v]
        if roll:
            _, target, expected = roll[0]
            states[v] = dict(states[target])
            # no non-compaction between expected and v
            between = [ops[u] for u in range(expected + 1, v)]
            assert all(o == "compact" for o in between), (v, expected, between)
        elif kind is None:
            raise AssertionError(f"version {v} ({ops[v]}) by nobody")
        elif kind[0] == "upsert":
            prev.update(kind[1])
            states[v] = prev
        elif kind[0] == "delete":
            states[v] = {k: x for k, x in prev.items() if k not in kind[1]}
        else:
            states[v] = prev
        assert rows(t, version=v) == states[v], (v, ops[v])
    assert rows(t) == states[t.version]


WH: list[str] = []


@pytest.mark.parametrize("seed", [1, 2])
def test_rollback_races_writers(cat: mere.Catalog, tmp_path: Path, seed: int) -> None:
    WH[:] = [str(tmp_path / "warehouse")]
    _race(cat, seed)


# -- interrupted writes: a KeyboardInterrupt in the calling thread at a random moment ------------------

INTERRUPT_CHILD = textwrap.dedent(
    """
    import _thread, json, random, sys, threading, time
    from pathlib import Path
    import pyarrow as pa
    import mere
    from mere.io.storage import Storage

    warehouse, op, seed, pk = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "pk"
    rnd = random.Random(seed)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("p", pa.string()), ("v", pa.string())])
    t = mere.connect(warehouse).create_table(
        "db.t", schema, primary_key=["id", "p"] if pk else None, partition_by=["p"],
        buckets=8 if pk else None,
        properties={"compaction.auto": "off", "retention.max-age": "off"})

    def data(lo, hi, tag):
        ids = list(range(lo, hi))
        return pa.table({"id": pa.array(ids, pa.int64()), "p": [f"p{i % 3}" for i in ids],
                         "v": [f"{tag}{i}" for i in ids]}, schema=schema)

    t.upsert(data(0, 300, "a")) if pk else t.append(data(0, 300, "a"))
    t.upsert(data(100, 400, "b")) if pk else t.append(data(100, 400, "b"))
    root = Path(t.storage.full_path(t.location))

    def state(tt):
        return sorted(tuple(r.values()) for r in tt.to_arrow().to_pylist())

    before_rows, before_version = state(t), t.version
    real = Storage.write

    def slow(self, rel, encode):
        time.sleep(rnd.uniform(0, 0.15))
        return real(self, rel, encode)

    Storage.write = slow
    staged = []

    def call():
        if op == "upsert":
            t.upsert(data(200, 900, "c"))
        elif op == "append":
            t.append(data(200, 900, "c"))
        elif op == "overwrite":
            t.overwrite(data(0, 600, "d"))
        elif op == "overwrite_part":
            t.overwrite(data(0, 600, "d").filter(pa.compute.equal(pa.compute.field("p"), "p1")), {"p": "p1"})
        elif op == "delete":
            t.delete(data(0, 900, "x").select(["id", "p"]) if pk else pa.compute.field("id") < 250)
        elif op == "compact":
            t.compact(min_files=1)
        elif op == "transaction":
            with t.transaction() as tx:
                tx.upsert(data(200, 900, "c"))
                tx.delete(data(0, 150, "x").select(["id", "p"]))
                tx.upsert(data(900, 1500, "e"))
        elif op == "stage":
            staged.append(t.stage(data(200, 900, "c"), "upsert" if pk else "append"))
        else:
            raise SystemExit("bad op " + op)

    when = sys.argv[5] if len(sys.argv) > 5 else "timer"
    if when == "timer":
        threading.Timer(rnd.uniform(0.0, 0.5), _thread.interrupt_main).start()
    else:  # right before / right after the catalog commit of the call
        store = t._sql
        real_commit = store.commit

        def hooked(*args, **kwargs):
            if when == "before":
                _thread.interrupt_main()
            result = real_commit(*args, **kwargs)
            if when == "after":
                _thread.interrupt_main()
            return result

        store.commit = hooked
    outcome = "DONE"
    try:
        call()
        time.sleep(0.6)  # the interrupt arrives here if the call finished first
    except KeyboardInterrupt:
        outcome = "INTERRUPTED"
    time.sleep(1.0)  # any writer thread still going would have written its file by now
    Storage.write = real
    if when != "timer":
        store.commit = real_commit
    t = t.refresh() if hasattr(t, "refresh") else t
    referenced = set()
    for v in range(t.version + 1):
        referenced |= {f.path for f in t.files_at(v)}
    on_disk = {p for p, _, _ in t.storage.list_files(t.location) if p.endswith(".parquet")}
    for s in staged:
        referenced |= {f.path for f in s.files}
    stray = sorted(p for p in on_disk if p not in referenced)
    missing = sorted(p for p in referenced if p not in on_disk)
    after_call = t.version
    try:
        unchanged = t.version == before_version and state(t) == before_rows
        readable = True
        # the next write works
        t.upsert(data(5000, 5010, "z")) if pk else t.append(data(5000, 5010, "z"))
        ok_next = {r["id"] for r in t.to_arrow().to_pylist()} >= set(range(5000, 5010))
    except mere.MereError as e:
        unchanged = ok_next = readable = False
        print("READ FAILED", repr(e)[:300], file=sys.stderr)
    print(json.dumps({"outcome": outcome, "stray": stray, "missing": missing, "unchanged": unchanged, "readable": readable,
                      "version": after_call, "before": before_version, "ok_next": ok_next}))
    """
)


def _interrupted(tmp_path: Path, op: str, seed: int, pk: bool, when: str = "timer") -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            INTERRUPT_CHILD,
            str(tmp_path / f"wh{seed}"),
            op,
            str(seed),
            "pk" if pk else "nopk",
            when,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return __import__("json").loads(out.stdout.strip().splitlines()[-1])


OPS = ["upsert", "append", "overwrite", "overwrite_part", "delete", "compact", "transaction", "stage"]


@pytest.mark.parametrize("op", OPS)
def test_an_interrupted_write_leaves_no_stray_file(tmp_path: Path, op: str) -> None:
    pk = op != "append"
    for seed in range(3):
        res = _interrupted(tmp_path, op, seed, pk)
        assert res["missing"] == [], res
        assert res["stray"] == [], res
        assert res["ok_next"], res
        # interrupted before its commit: nothing changed; after it: the commit is whole
        assert res["unchanged"] or res["version"] == res["before"] + 1, res
        if op == "stage" or res["outcome"] == "DONE":
            assert res["version"] == res["before"] + (op != "stage"), res


@pytest.mark.parametrize("op", ["upsert", "compact"])
def test_an_interrupt_before_the_catalog_commit_changes_nothing(tmp_path: Path, op: str) -> None:
    res = _interrupted(tmp_path, op, 1, True, "before")
    assert res["outcome"] == "INTERRUPTED" and res["unchanged"] and res["readable"], res
    assert res["stray"] == [] and res["missing"] == [] and res["ok_next"], res


@pytest.mark.parametrize("op", ["upsert", "compact"])
def test_an_interrupt_just_after_the_catalog_commit_keeps_the_committed_files(
    tmp_path: Path, op: str
) -> None:
    res = _interrupted(tmp_path, op, 1, True, "after")
    assert res["version"] == res["before"] + 1, res  # the commit landed
    assert res["missing"] == [], res  # today: every file the new version references is deleted
    assert res["readable"] and res["ok_next"] and res["stray"] == [], res


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_interrupted_rollback_keeps_every_version_readable(cat: mere.Catalog, when: str) -> None:
    t = new_table(cat)
    put(t, {1: 1, 2: 1})
    put(t, {1: 2, 3: 2})
    t.compact(min_files=1)
    model = {v: rows(t, version=v) for v in range(t.version + 1)}
    store = t._sql
    real = store.commit

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if when == "before":
            raise KeyboardInterrupt
        real(*args, **kwargs)
        raise KeyboardInterrupt

    store.commit = hooked  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        t.rollback(1, expected_version=3)
    store.commit = real  # type: ignore[method-assign]
    if when == "after":
        model[4] = model[1]
    assert t.version == max(model)
    assert {v: rows(t, version=v) for v in model} == model
    put(t, {9: 9})
    assert rows(t) == model[max(model)] | {9: 9}


def test_rollback_from_a_stale_handle_over_a_column_change(cat: mere.Catalog, tmp_path: Path) -> None:
    t = new_table(cat)
    put(t, {1: 1})
    put(t, {2: 2})
    other = mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)
    other.add_column("w", pa.int64(), default=7)
    other.upsert(pa.table({"k": [3], "v": [3], "w": [30]}))
    seen = other.version
    # the stale handle, with an expected_version before the column change: refused, nothing changed
    before = fingerprint(other)
    with pytest.raises(errors.CommitConflict):
        t.rollback(1, expected_version=2)
    assert fingerprint(other) == before
    # knowing the newest version, the stale handle is still told to refresh first (nothing changed)
    with pytest.raises(errors.SchemaChanged):
        t.rollback(1, expected_version=seen)
    assert fingerprint(other) == before
    # refreshed: the columns of version 1 come back, with its rows
    t.refresh().rollback(1, expected_version=seen)
    fresh = mere.connect(str(tmp_path / "warehouse"), catalog=cat.catalog_url).table(t.name)
    assert fresh.to_arrow().to_pylist() == [{"k": 1, "v": 1}]
    assert other.refresh().to_arrow().to_pylist() == [{"k": 1, "v": 1}]
    assert [r["w"] for r in fresh.to_arrow(version=seen).to_pylist()] == [7, 7, 30] or sorted(
        (r["k"], r["w"]) for r in fresh.to_arrow(version=seen).to_pylist()
    ) == [(1, 7), (2, 7), (3, 30)]
    # rolling forward again brings the column back with its values
    fresh.rollback(seen, expected_version=fresh.version)
    assert sorted((r["k"], r["w"]) for r in fresh.to_arrow().to_pylist()) == [(1, 7), (2, 7), (3, 30)]
    put(fresh, {4: 4})


RACE_CHILD = textwrap.dedent(
    """
    import json, random, sys
    import pyarrow as pa
    import mere
    from mere import errors

    wh, url, name, role, seed, out = sys.argv[1:7]
    rnd = random.Random(int(seed))
    t = mere.connect(wh, catalog=url).table(name)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    events = []
    for _ in range(8):
        try:
            if role == "roller":
                seen = t.version
                target = rnd.randrange(seen + 1)
                try:
                    r = t.rollback(target, expected_version=seen)
                    events.append(["rollback", r.version, target, seen])
                except errors.CommitConflict:
                    pass
                continue
            what = rnd.choice(["upsert", "delete", "compact", "props", "tag", "expire"])
            if what == "upsert":
                vals = {rnd.randrange(12): rnd.randrange(100) for _ in range(3)}
                r = t.upsert(pa.table({"k": list(vals), "v": list(vals.values())}, schema=schema))
                events.append(["upsert", r.version, sorted(vals.items())])
            elif what == "delete":
                ks = [rnd.randrange(12) for _ in range(2)]
                r = t.delete(pa.table({"k": ks}, schema=pa.schema([schema.field("k")])))
                events.append(["delete", r.version, ks])
            elif what == "compact":
                r = t.compact(min_files=1)
                if r is not None:
                    events.append(["compact", r.version])
            elif what == "props":
                r = t.set_properties({"team": str(rnd.randrange(5))})
                events.append(["props", r.version])
            elif what == "tag":
                t.tag("w" + seed, replace=True)
            else:
                t.expire(dry_run=True)
        except errors.CommitConflict:
            pass
    json.dump(events, open(out, "w"))
    """
)


def test_rollback_races_writer_processes(cat: mere.Catalog, tmp_path: Path) -> None:
    t = new_table(cat, buckets=3)
    for i in range(3):
        put(t, {i: i, i + 10: i})
    wh = str(tmp_path / "warehouse")
    roles = ["writer", "writer", "roller", "roller"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACE_CHILD,
                wh,
                cat.catalog_url,
                t.name,
                role,
                str(i),
                str(tmp_path / f"{i}.json"),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, role in enumerate(roles)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    written: dict[int, tuple[str, Any]] = {}
    rolled: list[tuple[int, int, int]] = []
    for i in range(len(roles)):
        for e in __import__("json").loads((tmp_path / f"{i}.json").read_text()):
            if e[0] == "rollback":
                rolled.append((e[1], e[2], e[3]))
            elif e[0] == "upsert":
                written[e[1]] = ("upsert", dict(e[2]))
            elif e[0] == "delete":
                written[e[1]] = ("delete", e[2])
            else:
                written[e[1]] = (e[0], None)
    _replay(t, written, rolled)


def test_cli_rollback_expected_version(tmp_path: Path) -> None:
    import contextlib
    import io

    pytest.importorskip("click")
    from mere.cli import app as cli_app

    def cli(*args: str) -> tuple[int, str]:
        out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli_app.run(["-w", str(tmp_path / "wh"), *args])
        assert "Traceback" not in err.getvalue(), err.getvalue()
        return rc, err.getvalue()

    t = new_table(mere.connect(str(tmp_path / "wh")))
    put(t, {1: 1})
    put(t, {2: 2})
    t.compact(min_files=1)
    before = fingerprint(t)
    for bad in (
        ["1.5"],
        ["abc"],
        ["99999999999999999999999"],
        ["-1"],
        ["4"],
        ["0"],
        [""],
        ["1", "--tag", "x"],
    ):
        rc, err = cli("rollback", t.name, "1", "--expected-version", *bad)
        assert rc in (1, 2), (bad, err)
        assert err.startswith("mere: error: ") or "Usage" in err or "Error" in err, (bad, err)
        assert fingerprint(t.refresh()) == before, bad
    rc, err = cli("rollback", t.name, "1", "--expected-version", "2")  # only the compaction after it
    assert rc == 0, err
    assert t.refresh().version == 4 and rows(t) == {1: 1}


SUBMIT_CHILD = textwrap.dedent(
    """
    import _thread, sys, time
    import pyarrow as pa
    import mere
    import mere.write.writer as writer

    S = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    t = mere.connect(sys.argv[1]).create_table(
        "a.t", S, primary_key="k", buckets=8, properties={"compaction.auto": "off", "retention.max-age": "off"})
    t.upsert(pa.table({"k": [1], "v": [1]}, schema=S))
    real_pool = writer.shared_pool

    class Interrupting:  # the interrupt arrives while the third file write is being handed to the pool
        def __init__(self, pool):
            self.pool, self.n = pool, 0

        def map(self, *a, **k):
            return self.pool.map(*a, **k)

        def submit(self, *a, **k):
            self.n += 1
            future = self.pool.submit(*a, **k)
            if self.n == 3:
                _thread.interrupt_main()
            return future

    writer.shared_pool = lambda *a, **k: Interrupting(real_pool(*a, **k))
    try:
        t.upsert(pa.table({"k": list(range(1000)), "v": list(range(1000))}, schema=S))
        print("NOT INTERRUPTED")
    except KeyboardInterrupt:
        pass
    time.sleep(1.5)  # the writes already handed to the pool end by now
    writer.shared_pool = real_pool
    referenced = set()
    for v in range(t.version + 1):
        referenced |= {f.path for f in t.files_at(v)}
    on_disk = {p for p, _, _ in t.storage.list_files(t.location) if p.endswith(".parquet")}
    print("VERSION", t.version, "ROWS", t.to_arrow().num_rows)
    print("STRAY", sorted(on_disk - referenced))
    """
)


def test_an_interrupt_while_file_writes_are_being_submitted_leaves_no_file(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SUBMIT_CHILD, str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "VERSION 1 ROWS 1" in lines, out.stdout  # the table reads as before
    assert "STRAY []" in lines, out.stdout
