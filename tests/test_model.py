"""Stateful property test: random writes against mere and a plain dict model must always agree.

Three tables see every step: a primary-key table with default ``last`` columns and tiny row groups
and read windows (so pruning and windowed merging run), a primary-key table with merge operators,
and a table without key. After each step a full scan, a filtered scan and a time-travel read of an
earlier version must equal the model.

The model keeps every version of every table (``versions[name][v]``: its rows and properties), so steps
that go back in time can be checked against it: rollbacks (a new commit whose rows and properties are an
older version's), expiry (older versions stop being readable), automatic compaction (commits that change
no row), and the change feed between any two versions, which must be exactly the difference of the two
model versions.

It runs on the SQLite catalog inside the warehouse, and with fewer examples on PostgreSQL.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import settings
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
from mere.errors import NoSuchVersion
from mere.table import compaction
from services import PostgresServer

MAX_KEY = 40
KEYS = st.integers(min_value=0, max_value=MAX_KEY)
PARTS = st.sampled_from(["a", "b"])
INTS = st.one_of(st.none(), st.integers(min_value=-5, max_value=5))
STRS = st.one_of(st.none(), st.sampled_from(["x", "y", "zz", ""]))

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.string()),
        ("v", pa.int64()),
        ("s", pa.string()),
        ("q", pa.int64()),
        ("c", pa.string()),
    ]
)
VALUE_COLS = ["v", "s", "q", "c"]
OPERATORS = {"s": "last_non_null", "q": "sum", "c": "concat:|"}


def row_strategy(p: Any = PARTS) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"id": KEYS, "p": p, "v": INTS, "s": STRS, "q": INTS, "c": STRS})


def merge_value(op: str, old: Any, new: Any) -> Any:
    if op == "last":
        return new
    if new is None:
        return old
    if old is None:
        return new
    if op == "last_non_null":
        return new
    if op == "sum":
        return old + new
    if op == "concat":
        return f"{old}|{new}"
    raise AssertionError(op)


class PkModel:
    """dict[(p, id)] -> row, applying versions the way the spec says."""

    def __init__(self, operators: dict[str, str]) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.ops = operators

    def upsert(self, row: dict[str, Any]) -> None:
        key = (row["p"], row["id"])
        old = self.rows.get(key)
        new = {"id": row["id"], "p": row["p"]}
        for c in VALUE_COLS:
            op = self.ops.get(c, "last").split(":")[0]
            if c not in row:
                new[c] = None if old is None else old[c]
            else:
                new[c] = merge_value(op, None if old is None else old[c], row[c])
        self.rows[key] = new

    def delete(self, key: tuple[str, int]) -> None:
        self.rows.pop(key, None)

    def table(self) -> list[dict[str, Any]]:
        return sorted(self.rows.values(), key=lambda r: (r["p"], r["id"]))


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(
        table.to_pylist(), key=lambda r: (r["p"], r["id"]) + ((r["v"] or 0,) if "q" not in r else ())
    )


Key = tuple[str, int]
Rows = dict[Key, dict[str, Any]]
META_COLUMNS = ("_change", "_version", "_commit_time")
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "insert", "update_before", "update_after", "delete"
# The ``last`` table compacts only when asked (``auto_compact``); the ``ops`` one after every commit
# that leaves a split with 4 files. The compaction_policy step switches either way.
LAST_PROPERTIES = {"write.row-group-rows": "3", "read.window-bytes": "400", "compaction.min-files": "3"}
OPS_PROPERTIES = {"compaction.auto": "inline", "compaction.min-files": "4"}
NOW = dt.timedelta(0)  # expire everything but the current version
_RUNS = itertools.count()


@dataclass(frozen=True)
class ModelVersion:
    """What the model says one version of a table holds: rows (by key for keyed tables, a list for the
    table without key) and properties."""

    rows: Any
    properties: dict[str, str]


def key_of(row: dict[str, Any]) -> Key:
    return (row["p"], row["id"])


def expected_feed(before: Rows, after: Rows) -> list[tuple[Key, str, dict[str, Any]]]:
    """The net change feed between two model versions, as (key, change, row), sorted."""
    out: list[tuple[Key, str, dict[str, Any]]] = []
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old is None:
            out.append((key, INSERT, after[key]))
        elif new is None:
            out.append((key, DELETE, old))
        elif old != new:
            out += [(key, UPDATE_BEFORE, old), (key, UPDATE_AFTER, new)]
    return sorted(out, key=lambda e: (e[0], e[1]))


def apply_feed(before: Rows, feed: list[tuple[Key, str, dict[str, Any]]]) -> Rows:
    """Apply a change feed to a snapshot: drop the keys of update_before and delete rows (which must be
    the snapshot's rows), then add the insert and update_after rows (whose keys must be free by then)."""
    state = dict(before)
    for key, change, row in feed:
        if change in (UPDATE_BEFORE, DELETE):
            assert state.get(key) == row, (change, key, row, state.get(key))
            del state[key]
    for key, change, row in feed:
        if change in (INSERT, UPDATE_AFTER):
            assert key not in state, (change, key, row)
            state[key] = row
    return state


def files_per_split(t: mere.Table) -> Counter[tuple[str, int]]:
    files = t.files()
    return Counter(zip(files.column("partition").to_pylist(), files.column("bucket").to_pylist()))


def compaction_folds_to_one_file() -> bool:
    """Compaction writes one file per split (tests may shrink its chunks to get several)."""
    return compaction.CHUNK_ROWS > MAX_KEY + 1


class LakeMachine(RuleBasedStateMachine):
    catalog_url: str | None = None  # None: the SQLite file inside the warehouse

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mere-model-")
        self.cat = mere.connect(self.dir, catalog=self.catalog_url)
        ns = f"m{next(_RUNS)}"  # a shared catalog database sees every example's tables
        self.t_last = self.cat.create_table(
            f"{ns}.last",
            SCHEMA,
            primary_key=["id"],
            partition_by=["p"],
            buckets=3,
            cdc_column="op",
            properties=LAST_PROPERTIES,
        )
        self.t_ops = self.cat.create_table(
            f"{ns}.ops",
            SCHEMA,
            primary_key=["id"],
            partition_by=["p"],
            buckets=2,
            cdc_column="op",
            merge_operators=OPERATORS,
            properties=OPS_PROPERTIES,
        )
        self.t_plain = self.cat.create_table(f"{ns}.plain", SCHEMA, partition_by=["p"])
        self.m_last = PkModel({})
        self.m_ops = PkModel(OPERATORS)
        self.m_plain: list[dict[str, Any]] = []
        # Per table: the model's current properties, every version it committed, the oldest readable one.
        self.props: dict[str, dict[str, str]] = {
            "last": dict(LAST_PROPERTIES),
            "ops": dict(OPS_PROPERTIES),
            "plain": {},
        }
        self.versions: dict[str, dict[int, ModelVersion]] = {"last": {}, "ops": {}, "plain": {}}
        self.oldest: dict[str, int] = {"last": 0, "ops": 0, "plain": 0}

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        self._snapshot()

    # -- the model's versions --------------------------------------------------------------------

    def _tables(self) -> list[tuple[str, mere.Table]]:
        return [("last", self.t_last), ("ops", self.t_ops), ("plain", self.t_plain)]

    def _pk_tables(self) -> list[tuple[mere.Table, PkModel]]:
        return [(self.t_last, self.m_last), (self.t_ops, self.m_ops)]

    def _named_pk_tables(self) -> list[tuple[str, mere.Table, PkModel]]:
        return [("last", self.t_last, self.m_last), ("ops", self.t_ops, self.m_ops)]

    def _state(self, name: str) -> ModelVersion:
        rows = copy.deepcopy(self.m_plain if name == "plain" else self._model(name).rows)
        return ModelVersion(rows, dict(self.props[name]))

    def _model(self, name: str) -> PkModel:
        return {"last": self.m_last, "ops": self.m_ops}[name]

    def _restore(self, name: str, version: ModelVersion) -> None:
        if name == "plain":
            self.m_plain = copy.deepcopy(version.rows)
        else:
            self._model(name).rows = copy.deepcopy(version.rows)
        self.props[name] = dict(version.properties)

    def _readable(self, name: str, version: int) -> bool:
        return self.oldest[name] <= version <= max(self.versions[name])

    def _versions_from(self, name: str, low: int, high: int) -> st.SearchStrategy[int]:
        """Versions from ``low`` to ``high``, readable ones more often than not."""
        anything = st.integers(min_value=low, max_value=high)
        first, last = max(low, self.oldest[name]), min(high, max(self.versions[name]))
        return anything if first > last else st.one_of(st.integers(first, last), anything)

    def _snapshot(self) -> None:
        """Record the model's state as every version the step committed (a step commits once per table,
        followed only by automatic compactions, which change no row)."""
        for name, t in self._tables():
            versions, state, current = self.versions[name], self._state(name), t.version
            last = max(versions, default=-1)
            if current == last:
                assert versions[last] == state, f"{t.name}: the model changed but no version was committed"
                continue
            assert current > last, (t.name, current, last)
            if current > last + 1 and last >= 0:
                operations = {s.version: s.operation for s in t.history()}
                extra = [operations[v] for v in range(last + 2, current + 1)]
                assert set(extra) == {"compact"}, (t.name, extra)
            for v in range(last + 1, current + 1):
                versions[v] = state

    # -- writes ----------------------------------------------------------------------------------

    @rule(rows=st.lists(row_strategy(), max_size=12))
    def upsert(self, rows: list[dict[str, Any]]) -> None:
        data = pa.Table.from_pylist(rows, schema=SCHEMA)
        for t, m in self._pk_tables():
            t.upsert(data)
            for r in rows:
                m.upsert(r)
        self.t_plain.append(data)
        self.m_plain.extend(copy.deepcopy(rows))
        self._snapshot()

    @rule(
        rows=st.lists(row_strategy(), min_size=1, max_size=8),
        cols=st.lists(st.sampled_from(VALUE_COLS), unique=True, max_size=3),
    )
    def partial_upsert(self, rows: list[dict[str, Any]], cols: list[str]) -> None:
        keep = ["id", "p", *cols]
        rows = [{k: r[k] for k in keep} for r in rows]
        data = pa.Table.from_pylist(rows, schema=pa.schema([SCHEMA.field(c) for c in keep]))
        for t, m in self._pk_tables():
            t.upsert(data)
            for r in rows:
                m.upsert(r)
        self._snapshot()

    @rule(
        changes=st.lists(
            st.tuples(st.sampled_from(["I", "U", "D", "-U"]), row_strategy()), min_size=1, max_size=12
        )
    )
    def cdc(self, changes: list[tuple[str, dict[str, Any]]]) -> None:
        rows = [dict(r, op=op) for op, r in changes]
        schema = SCHEMA.append(pa.field("op", pa.string()))
        data = pa.Table.from_pylist(rows, schema=schema)
        for t, m in self._pk_tables():
            t.upsert(data)
            for op, r in changes:
                if op == "D":
                    m.delete((r["p"], r["id"]))
                elif op != "-U":
                    m.upsert(r)
        self._snapshot()

    @rule(keys=st.lists(KEYS, max_size=5))
    def delete_keys(self, keys: list[int]) -> None:
        text = f"id in ({', '.join(map(str, keys))})" if keys else "id = -1"
        for t, m in self._pk_tables():
            t.delete(text)
            for k in keys:
                for p in ("a", "b"):
                    m.delete((p, k))
        self.t_plain.delete(text)
        self.m_plain = [r for r in self.m_plain if r["id"] not in keys]
        self._snapshot()

    @rule(bound=st.integers(min_value=-5, max_value=5), part=st.one_of(st.none(), PARTS))
    def delete_where(self, bound: int, part: str | None) -> None:
        text = f"v > {bound}" + ("" if part is None else f" and p = '{part}'")

        def hit(r: dict[str, Any]) -> bool:
            return r["v"] is not None and r["v"] > bound and (part is None or r["p"] == part)

        for t, m in self._pk_tables():
            t.delete(text)
            for key, r in list(m.rows.items()):
                if hit(r):
                    m.delete(key)
        self.t_plain.delete(text)
        self.m_plain = [r for r in self.m_plain if not hit(r)]
        self._snapshot()

    @rule(part=st.one_of(st.none(), PARTS), data=st.data())
    def overwrite(self, part: str | None, data: st.DataObject) -> None:
        rows = data.draw(st.lists(row_strategy(PARTS if part is None else st.just(part)), max_size=8))
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        partition = None if part is None else {"p": part}
        for t, m in self._pk_tables():
            t.overwrite(table, partition=partition)
            for key in list(m.rows):
                if part is None or key[0] == part:
                    m.delete(key)
            for r in rows:
                m.upsert(r)
        self.t_plain.overwrite(table, partition=partition)
        self.m_plain = [r for r in self.m_plain if part is not None and r["p"] != part] + copy.deepcopy(rows)
        self._snapshot()

    # -- maintenance -----------------------------------------------------------------------------

    @rule(min_files=st.integers(min_value=1, max_value=4), part=st.one_of(st.none(), PARTS))
    def compact(self, min_files: int, part: str | None) -> None:
        for t, _ in self._pk_tables():
            before = t.version
            result = t.compact(min_files=min_files, partition=None if part is None else {"p": part})
            assert (result is None) == (t.version == before)
        self._snapshot()

    @rule(
        name=st.sampled_from(["last", "ops"]),
        mode=st.sampled_from(["inline", "off"]),
        min_files=st.integers(min_value=2, max_value=4),
    )
    def compaction_policy(self, name: str, mode: str, min_files: int) -> None:
        """Turn automatic compaction on or off. Turning it on is a commit, so a split that already holds
        ``min-files`` files is compacted right away, in a second commit that changes no row."""
        t = self.t_last if name == "last" else self.t_ops
        before, files = t.version, t.files().num_rows
        due = mode == "inline" and max(files_per_split(t).values(), default=0) >= min_files
        t.set_properties({"compaction.auto": mode, "compaction.min-files": str(min_files)})
        self.props[name].update({"compaction.auto": mode, "compaction.min-files": str(min_files)})
        assert t.compaction_policy == (mode, min_files)
        assert t.version == before + 1 + due, (t.name, before, t.version, due)
        if due:
            assert t.current_snapshot().operation == "compact"
            if compaction_folds_to_one_file():
                assert t.files().num_rows < files
        # A property change and a compaction change no row: their change feed is empty.
        assert t.changes(before).read_all().num_rows == 0
        self._snapshot()

    @rule(name=st.sampled_from(["last", "ops"]))
    def auto_compact(self, name: str) -> None:
        """A policy run (``auto_compact``, as from cron) compacts exactly when ``compaction_due`` says so,
        whatever ``compaction.auto`` is."""
        t = self.t_last if name == "last" else self.t_ops
        before, files = t.version, t.files().num_rows
        min_files = t.compaction_policy[1]
        assert min_files == int(self.props[name].get("compaction.min-files", 8))
        due = t.compaction_due()
        assert due == (min_files if max(files_per_split(t).values(), default=0) >= min_files else None)
        result = t.auto_compact()
        assert (result is None) == (due is None) == (t.version == before)
        if result is not None:
            assert result.operation == "compact" and result.version == t.version
            if compaction_folds_to_one_file():
                assert t.files().num_rows < files
                assert t.compaction_due() is None
        with pytest.raises(NoSuchVersion):
            t.auto_compact(t.version + 1)
        assert t.version == before + (result is not None)
        self._snapshot()

    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        """Each table rolls back to a version drawn from -1 to one past the current one: a readable version
        comes back as a new commit (rows and properties); any other raises NoSuchVersion and changes
        nothing."""
        befores = {}
        for name, t in self._tables():
            before = befores[name] = t.version
            target = data.draw(self._versions_from(name, -1, before + 1), label=f"{name} to")
            if not self._readable(name, target):
                state = (t.properties, sorted(t.files().column("path").to_pylist()))
                with pytest.raises(NoSuchVersion):
                    t.rollback(target)
                assert (t.version, t.properties, sorted(t.files().column("path").to_pylist())) == (
                    before,
                    *state,
                )
                continue
            result = t.rollback(target)
            assert (result.version, result.operation) == (before + 1, "rollback")
            assert result.summary["rollback_to"] == target
            self._restore(name, self.versions[name][target])
            # The handle and a fresh one see the restored properties (they drive automatic compaction).
            assert t.properties == self.props[name]
            assert self.cat.table(t.name).properties == self.props[name]
        self._snapshot()
        for name, t, _ in self._named_pk_tables():
            # The feed across the rollback takes the table from its state before to the restored one.
            self._check_feed(name, t, befores[name], t.version)

    @rule()
    def expire(self) -> None:
        """Give up every version but the current one: reads, rollbacks and change feeds from them fail."""
        for name, t in self._tables():
            t.expire(older_than=NOW)
            self.oldest[name] = t.version
            if t.version == 0:
                continue
            gone = t.version - 1
            with pytest.raises(NoSuchVersion):
                t.scan(version=gone)
            with pytest.raises(NoSuchVersion):
                t.rollback(gone)
            if name != "plain":
                with pytest.raises(NoSuchVersion):
                    t.changes(gone)
                with pytest.raises(NoSuchVersion):
                    t.changes(gone, t.version)
                assert t.changes(t.version).read_all().num_rows == 0
        self._snapshot()

    # -- change feed -----------------------------------------------------------------------------

    @rule(data=st.data())
    def change_feed(self, data: st.DataObject) -> None:
        """The feed between two versions drawn from all versions so far (expired ones included)."""
        for name, t, _ in self._named_pk_tables():
            if t.version == 0:
                continue
            start = data.draw(self._versions_from(name, 0, t.version - 1), label=f"{name} from")
            end = data.draw(st.integers(min_value=start + 1, max_value=t.version), label=f"{name} to")
            if not self._readable(name, start):
                with pytest.raises(NoSuchVersion):
                    t.changes(start, end).read_all()
                continue
            self._check_feed(name, t, start, end)

    def _check_feed(self, name: str, t: mere.Table, start: int, end: int) -> None:
        """``t.changes(start, end)`` is exactly the difference of the model's two versions: applied to the
        rows at ``start`` it gives those at ``end``, and each row's ``_version`` is a commit of the range
        that is no later than the key's last change there."""
        feed = t.changes(start, end).read_all()
        assert set(feed.schema.names) == {*SCHEMA.names, *META_COLUMNS}, feed.schema.names
        versions = self.versions[name]
        before, after = versions[start].rows, versions[end].rows
        got = []
        history = {s.version: s for s in t.history()} if feed.num_rows else {}
        touched: dict[Key, set[int]] = {}
        for r in feed.to_pylist():
            row = {c: v for c, v in r.items() if c not in META_COLUMNS}
            key = key_of(row)
            got.append((key, r["_change"], row))
            v = r["_version"]
            assert start < v <= end and history[v].operation != "compact", (t.name, start, end, r)
            assert r["_commit_time"] == history[v].committed_at, (t.name, r)
            touched.setdefault(key, set()).add(v)
            # The commit that last changed the key inside the range touched it: _version is no older.
            changed = [
                u
                for u in range(start + 1, end + 1)
                if versions[u].rows.get(key) != versions[u - 1].rows.get(key)
            ]
            assert changed, (t.name, start, end, "a feed row for a key that never changed", r)
            assert v >= max(changed), (t.name, start, end, r, changed)
        assert all(len(vs) == 1 for vs in touched.values()), (t.name, touched)  # before/after: one _version
        assert apply_feed(before, got) == after, (t.name, start, end)
        assert sorted(got, key=lambda e: (e[0], e[1])) == expected_feed(before, after), (t.name, start, end)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def files_are_sorted_and_bucketed(self) -> None:
        for t, _ in self._pk_tables():
            for path, bucket in zip(
                t.files().column("path").to_pylist(), t.files().column("bucket").to_pylist()
            ):
                ids = pq.read_table(t.storage.full_path(path), columns=["id"]).column("id")
                assert ids.to_pylist() == sorted(ids.to_pylist()), path
                assert set(mere.bucket_ids(ids, t.spec.buckets).tolist()) <= {bucket}, path

    @invariant()
    def full_scan_matches(self) -> None:
        for t, m in self._pk_tables():
            assert rows_of(t.scan().to_arrow()) == m.table(), t.name
        plain = sorted(self.t_plain.scan().to_arrow().to_pylist(), key=_plain_key)
        assert plain == sorted(self.m_plain, key=_plain_key)

    @invariant()
    def filtered_scans_match(self) -> None:
        for t, m in self._pk_tables():
            got = rows_of(t.scan(filter="id >= 10 and id <= 30 and v < 3").to_arrow())
            want = [r for r in m.table() if 10 <= r["id"] <= 30 and r["v"] is not None and r["v"] < 3]
            assert got == want, t.name
            got = rows_of(t.scan(filter="id in (3, 7, 11) and p = 'a'").to_arrow())
            assert got == [r for r in m.table() if r["id"] in (3, 7, 11) and r["p"] == "a"], t.name
            got = rows_of(t.scan(filter="s is null or q > 0", columns=["p", "id", "q"]).to_arrow())
            want = [
                {"id": r["id"], "p": r["p"], "q": r["q"]}
                for r in m.table()
                if r["s"] is None or (r["q"] is not None and r["q"] > 0)
            ]
            assert sorted(got, key=lambda r: (r["p"], r["id"])) == want, t.name

    @invariant()
    def versions_and_properties_match(self) -> None:
        for name, t in self._tables():
            assert t.version == max(self.versions[name]), t.name
            assert t.properties == self.props[name], t.name
            readable = [s.version for s in t.history() if not s.expired]
            assert readable == list(range(self.oldest[name], t.version + 1)), (t.name, readable)
            if name != "plain" and self.props[name].get("compaction.auto") == "inline":
                # Every commit compacted what it left due (unless compaction writes several files).
                assert t.compaction_due() is None or not compaction_folds_to_one_file(), t.name

    @precondition(lambda self: len(self.versions["last"]) > 1)
    @invariant()
    def time_travel_matches(self) -> None:
        for name, t in self._tables():
            readable = range(self.oldest[name], t.version + 1)
            version = readable[len(readable) // 2]
            rows = self.versions[name][version].rows
            got = t.scan(version=version).to_arrow().to_pylist()
            if name == "plain":
                assert sorted(got, key=_plain_key) == sorted(rows, key=_plain_key), (t.name, version)
            else:
                assert sorted(got, key=key_of) == sorted(rows.values(), key=key_of), (t.name, version)


def _plain_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((r[c] is None, r[c]) for c in SCHEMA.names)


TestLake = LakeMachine.TestCase


@pytest.mark.postgres
def test_the_model_on_postgresql(pg_server: PostgresServer) -> None:
    """The same machine with a PostgreSQL catalog (its locking, transactions and queries: versions, expiry,
    the specs rollbacks restore); a sixth of the examples, as the SQLite run above explores the rules."""

    class OnPostgres(LakeMachine):
        catalog_url = pg_server.create_database(f"mere_model_{os.getpid()}_{next(_RUNS)}")

    run_state_machine_as_test(
        OnPostgres,
        settings=settings(max_examples=max(1, settings().max_examples // 6)),
    )
