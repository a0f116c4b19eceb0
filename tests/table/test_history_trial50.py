"""A table's history under schema evolution (adversarial trial 50).

A Hypothesis state machine drives a partitioned, bucketed primary-key table (with a NOT NULL value
column) through column changes (add with defaults, add by an evolving upsert, rename, rename to a spent
name, drop, widen, several in one ``evolve()`` block) interleaved with full and partial upserts, deletes by
key and by predicate, MERGE, partition overwrites, compaction, ``expire``, rollback and tags. A plain-dict
model keeps every version's columns and rows. At every live version it checks scans by version, by tag
and by ``as_of`` (the version's commit time), projections and filters naming that version's own column
names, ``count()``, ``min()`` and ``max()``; ``changes(a, b)`` applied to the model's snapshot at ``a`` (in
the current columns) must give the snapshot at ``b``, with before-images equal to ``a``'s rows; expired
versions raise ``NoSuchVersion`` while tagged and current ones stay readable. Refused calls raise a typed
``MereError`` and change nothing. Reads at old versions also go through DuckDB and Polars (pushed-down
filters naming that version's columns) and catalog snapshots; feeds of consecutive ranges, applied in turn
as a consumer does, must end at the current rows whatever the columns did in between (a drop undone by a
rollback too). The machine runs with ``changes.log`` off and on, and on SQLite and PostgreSQL. A
deterministic case covers the CLI's ``describe``/``scan``/``changes`` at old and expired versions.

No bug was found in this area (every check passes).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import io
import itertools
import json
import os
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import mere
from mere import errors
from mere.integrations.duckdb import register

try:
    import polars

    from mere.integrations.polars import scan_table
except ImportError:  # pragma: no cover - polars is optional
    polars = None  # type: ignore[assignment]

_names = itertools.count()

NOW = dt.timedelta(0)

# kind -> (types from narrow to wide, how a small int is stored)
KINDS: dict[str, tuple[list[pa.DataType], Any]] = {
    "int": ([pa.int16(), pa.int32(), pa.int64()], int),
    "flt": ([pa.float32(), pa.float64()], lambda v: v / 2),  # halves: exact in float32
    "str": ([pa.string(), pa.large_string()], lambda v: f"s{v:+03d}"),
}

KEYS = st.integers(0, 9)
VALUES = st.one_of(st.none(), st.integers(-20, 20))


def part_of(k: int) -> str:
    """A key's partition never changes (so that partial rows and overwrites never move a key)."""
    return "pa" if k % 2 else "pb"


def props(log: str = "off") -> dict[str, str]:
    return {"compaction.auto": "off", "retention.max-age": "off", "changes.log": log}


class Model:
    """Columns by model id: {id: {name, kind, ti, nullable, default, born}}; rows: {key: {id: value}}."""

    def __init__(self) -> None:
        self.cols: dict[int, dict[str, Any]] = {
            1: {"name": "nn", "kind": "int", "ti": 1, "nullable": False, "default": None, "born": 0},
            2: {"name": "a", "kind": "int", "ti": 0, "nullable": True, "default": None, "born": 0},
            3: {"name": "s", "kind": "str", "ti": 0, "nullable": True, "default": None, "born": 0},
        }
        self.rows: dict[int, dict[int, Any]] = {}
        self.next_id = 4
        self.log: str | None = None  # the changes.log property (None: as created)

    def type_of(self, fid: int) -> pa.DataType:
        c = self.cols[fid]
        return KINDS[c["kind"]][0][c["ti"]]

    def value(self, fid: int, v: int | None) -> Any:
        if v is None and not self.cols[fid]["nullable"]:
            v = 0
        return None if v is None else KINDS[self.cols[fid]["kind"]][1](v)

    def schema(self) -> list[tuple[str, pa.DataType, bool]]:
        head = [("k", pa.int64(), False), ("p", pa.string(), True)]
        return head + [(c["name"], self.type_of(i), c["nullable"]) for i, c in sorted(self.cols.items())]

    def view(self) -> dict[int, dict[str, Any]]:
        return {
            k: {"p": part_of(k), **{c["name"]: r.get(i) for i, c in sorted(self.cols.items())}}
            for k, r in self.rows.items()
        }

    def fids(self, kind: str | None = None) -> list[int]:
        return [i for i, c in sorted(self.cols.items()) if kind is None or c["kind"] == kind]

    def name(self, fid: int) -> str:
        return str(self.cols[fid]["name"])


def schema_of(table: pa.Table | pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    schema = table if isinstance(table, pa.Schema) else table.schema
    return [(f.name, f.type, f.nullable) for f in schema]


def rows_of(table: pa.Table) -> dict[Any, dict[str, Any]]:
    out = {r["k"]: {c: v for c, v in r.items() if c != "k"} for r in table.to_pylist()}
    assert len(out) == table.num_rows, "a key read twice"
    return out


def new_table(cat: mere.Catalog, log: str = "off") -> mere.Table:
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("p", pa.string()),
            pa.field("nn", pa.int32(), nullable=False),
            ("a", pa.int16()),
            ("s", pa.string()),
        ]
    )
    return cat.create_table(
        f"hist.t{next(_names)}", schema, primary_key="k", partition_by="p", buckets=2, properties=props(log)
    )


def run_model(cat: mere.Catalog, max_examples: int, steps: int, log: str) -> None:
    class HistoryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.t = new_table(cat, log)
            self.m = Model()
            self.versions: dict[int, Model] = {}
            self.times: dict[int, dt.datetime] = {}
            self.oldest = 0  # the version current at the last expire: older ones live on by their tags only
            self.tags: dict[str, int] = {}
            self.spent: list[str] = []  # names of dropped or renamed-away columns
            self._record()

        # -- the model ------------------------------------------------------------------------------

        def _record(self) -> None:
            v = self.t.version
            assert v not in self.versions, f"version {v} recorded twice"
            self.versions[v] = copy.deepcopy(self.m)
            self.times[v] = self.t.snapshot(version=v).committed_at

        @property
        def live(self) -> set[int]:
            return {v for v in self.versions if v >= self.oldest or v in self.tags.values()}

        @property
        def expired(self) -> set[int]:
            return set(self.versions) - self.live

        def _after(self, before: int, changed: bool | None = True) -> None:
            """Record a commit: the table moved exactly one version when the model says it changed (None:
            either way, a commit that changes no row being allowed)."""
            if self.t.version != before:
                assert self.t.version == before + 1
                assert changed is not False, "a write that should change nothing made a version"
                self._record()
            else:
                assert not changed, "a write that should commit made no version"

        def _frame(self, keys: list[int], values: list[int | None], fids: list[int]) -> pa.Table:
            data: dict[str, Any] = {"k": pa.array(keys, pa.int64()), "p": [part_of(k) for k in keys]}
            for j, fid in enumerate(fids):
                col = [self.m.value(fid, values[(j + n) % len(values)]) for n in range(len(keys))]
                data[self.m.name(fid)] = pa.array(col, self.m.type_of(fid))
            return pa.table(data)

        def _put(self, keys: list[int], values: list[int | None], fids: list[int]) -> None:
            for n, k in enumerate(keys):
                row = self.rows_get(k)
                for j, fid in enumerate(fids):
                    row[fid] = self.m.value(fid, values[(j + n) % len(values)])
                self.m.rows[k] = row

        def rows_get(self, k: int) -> dict[int, Any]:
            # A new key's missing columns are null (defaults are for rows written before a column).
            return self.m.rows.get(k, {i: None for i in self.m.cols})

        def _check(self, got: pa.Table, model: Model, what: str) -> None:
            assert schema_of(got) == model.schema(), what
            assert rows_of(got) == model.view(), what

        # -- writes ---------------------------------------------------------------------------------

        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=4, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
            partial=st.booleans(),
        )
        def upsert(self, keys: list[int], values: list[int | None], partial: bool) -> None:
            fids = self.m.fids()
            if partial and len(fids) > 1 and all(k in self.m.rows for k in keys):
                fids = fids[len(fids) // 2 :]  # a column subset of existing keys: the others stay
            before = self.t.version
            self.t.upsert(self._frame(keys, values, fids))
            self._put(keys, values, fids)
            self._after(before)

        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=3, unique=True),
            kind=st.sampled_from(sorted(KINDS)),
            v=st.integers(-20, 20),
            reuse=st.booleans(),
        )
        def upsert_evolving(self, keys: list[int], kind: str, v: int, reuse: bool) -> None:
            """An upsert that brings a new column (evolve=True): added nullable in the same commit (under a
            spent name too: a new column, which never reads the old one's values)."""
            names = {c["name"] for c in self.m.cols.values()}
            free = [n for n in self.spent if n not in names]
            name = free[-1] if reuse and free else f"e{next(_names)}"
            fid = self.m.next_id
            before = self.t.version
            frame = self._frame(keys, [v], self.m.fids())
            frame = frame.append_column(name, pa.array([KINDS[kind][1](v)] * len(keys), KINDS[kind][0][0]))
            self.t.upsert(frame, evolve=True)
            self.m.next_id += 1
            self.m.cols[fid] = {"name": name, "kind": kind, "ti": 0, "nullable": True, "default": None}
            self.m.cols[fid]["born"] = before + 1
            for r in self.m.rows.values():
                r[fid] = None
            self._put(keys, [v], self.m.fids())
            self._after(before)

        @rule(keys=st.lists(KEYS, min_size=1, max_size=3, unique=True))
        def delete_keys(self, keys: list[int]) -> None:
            before = self.t.version
            present = any(k in self.m.rows for k in keys)
            self.t.delete(pa.table({"k": pa.array(keys, pa.int64())}))
            for k in keys:
                self.m.rows.pop(k, None)
            self._after(before, changed=True if present else None)

        @precondition(lambda self: bool(self.m.fids("int")))
        @rule(data=st.data(), x=st.integers(-20, 20))
        def delete_where(self, data: st.DataObject, x: int) -> None:
            fid = data.draw(st.sampled_from(self.m.fids("int")))
            name = self.m.name(fid)
            gone = [k for k, r in self.m.rows.items() if r.get(fid) is not None and r[fid] > x]
            before = self.t.version
            self.t.delete(f"{name} > {x}")
            for k in gone:
                del self.m.rows[k]
            self._after(before, changed=bool(gone))

        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=4, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
            data=st.data(),
        )
        def merge(self, keys: list[int], values: list[int | None], data: st.DataObject) -> None:
            fids = self.m.fids()
            source = self._frame(keys, values, fids)
            ints = self.m.fids("int")
            before = self.t.version
            builder = self.t.merge(source)
            changed = False
            if ints:
                fid = data.draw(st.sampled_from(ints))
                name = self.m.name(fid)
                builder = builder.when_matched_delete(condition=f"s.{name} < -10").when_matched_update(
                    set={name: f"t.{name} + 1"}
                )
            else:
                fid = None
                builder = builder.when_matched_update_all()
            builder.when_not_matched_insert_all().execute()
            src = {r["k"]: r for r in source.to_pylist()}
            for _n, k in enumerate(keys):
                if k in self.m.rows:
                    if fid is None:
                        self.m.rows[k] = {i: src[k][self.m.name(i)] for i in fids}
                        changed = True
                    elif src[k][self.m.name(fid)] is not None and src[k][self.m.name(fid)] < -10:
                        del self.m.rows[k]
                        changed = True
                    elif self.m.rows[k].get(fid) is not None:
                        self.m.rows[k][fid] += 1
                        changed = True
                else:
                    self.m.rows[k] = {i: src[k][self.m.name(i)] for i in fids}
                    changed = True
            self._after(before, True if changed else None)  # an update to the same value may commit

        @precondition(lambda self: bool(self.m.fids("int")) and len(self.m.cols) >= 2)
        @rule(data=st.data(), x=st.integers(-20, 20))
        def update(self, data: st.DataObject, x: int) -> None:
            """UPDATE an int column by a condition on another column, both by their current names."""
            fid = data.draw(st.sampled_from(self.m.fids("int")))
            other = data.draw(st.sampled_from([i for i in self.m.fids() if i != fid]))
            name, oname = self.m.name(fid), self.m.name(other)
            before = self.t.version
            self.t.update(set={name: f"coalesce({name}, 0) - 1"}, where=f"{oname} is null")
            hit = [k for k, r in self.m.rows.items() if r.get(other) is None]
            for k in hit:
                old = self.m.rows[k].get(fid)
                self.m.rows[k][fid] = (0 if old is None else old) - 1
            self._after(before, changed=bool(hit))

        @rule(
            keys=st.lists(KEYS, max_size=3, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
        )
        def overwrite_all(self, keys: list[int], values: list[int | None]) -> None:
            before = self.t.version
            had = bool(self.m.rows)
            if keys:
                self.t.overwrite(self._frame(keys, values, self.m.fids()))
            else:
                self.t.truncate()
            self.m.rows = {k: {} for k in keys}
            self._put(keys, values, self.m.fids())
            self._after(before, changed=True if had or keys else None)

        @rule(
            part=st.sampled_from(["pa", "pb"]),
            keys=st.lists(KEYS, max_size=4, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
        )
        def overwrite_partition(self, part: str, keys: list[int], values: list[int | None]) -> None:
            keys = [k for k in keys if part_of(k) == part]
            fids = self.m.fids()
            had = any(part_of(k) == part for k in self.m.rows)
            before = self.t.version
            self.t.overwrite(self._frame(keys, values, fids), partition={"p": part})
            for k in [k for k in self.m.rows if part_of(k) == part]:
                del self.m.rows[k]
            for _n, k in enumerate(keys):
                self.m.rows[k] = {}
            self._put(keys, values, fids)
            # Nothing to replace may still drop the partition's files (of deleted rows): either way.
            self._after(before, changed=True if had or keys else None)

        # -- columns --------------------------------------------------------------------------------

        def _add(self, e: Any, kind: str, default: int | None, reuse: bool) -> None:
            names = {c["name"] for c in self.m.cols.values()}
            free = [n for n in self.spent if n not in names]
            name = free[-1] if reuse and free else f"c{next(_names)}"
            fid = self.m.next_id
            self.m.next_id += 1
            self.m.cols[fid] = {"name": name, "kind": kind, "ti": 0, "nullable": True, "born": None}
            value = self.m.value(fid, default)
            self.m.cols[fid]["default"] = value
            e.add_column(name, KINDS[kind][0][0], default=value)
            for r in self.m.rows.values():
                r[fid] = value  # rows written before read the default

        def _rename(self, e: Any, fid: int, reuse: bool) -> None:
            names = {c["name"] for c in self.m.cols.values()}
            free = [n for n in self.spent if n not in names and n.lower() not in {x.lower() for x in names}]
            new = free[0] if reuse and free else f"r{next(_names)}"
            old = self.m.name(fid)
            e.rename_column(old, new)
            self.m.cols[fid]["name"] = new
            self.spent.append(old)

        def _drop(self, e: Any, fid: int) -> None:
            name = self.m.cols.pop(fid)["name"]
            e.drop_column(name)
            self.spent.append(name)
            for r in self.m.rows.values():
                r.pop(fid, None)

        def _widen(self, e: Any, fid: int) -> bool:
            c = self.m.cols[fid]
            ladder = KINDS[c["kind"]][0]
            if c["ti"] + 1 >= len(ladder):
                return False
            c["ti"] += 1
            if c["default"] is not None and c["kind"] == "flt":
                c["default"] = float(c["default"])
            e.widen(c["name"], ladder[c["ti"]])
            return True

        def _born(self, version: int) -> None:
            for c in self.m.cols.values():
                if c.get("born") is None:
                    c["born"] = version

        @rule(kind=st.sampled_from(sorted(KINDS)), default=VALUES, reuse=st.booleans())
        def add_column(self, kind: str, default: int | None, reuse: bool) -> None:
            before = self.t.version
            self._add(self.t, kind, default, reuse)
            self._born(before + 1)
            self._after(before)

        @precondition(lambda self: bool(self.m.cols))
        @rule(data=st.data(), reuse=st.booleans())
        def rename(self, data: st.DataObject, reuse: bool) -> None:
            before = self.t.version
            self._rename(self.t, data.draw(st.sampled_from(self.m.fids())), reuse)
            self._after(before)

        @precondition(lambda self: bool(self.m.cols))
        @rule(data=st.data())
        def drop(self, data: st.DataObject) -> None:
            before = self.t.version
            self._drop(self.t, data.draw(st.sampled_from(self.m.fids())))
            self._after(before)

        @precondition(lambda self: bool(self.m.cols))
        @rule(data=st.data())
        def widen(self, data: st.DataObject) -> None:
            before = self.t.version
            fid = data.draw(st.sampled_from(self.m.fids()))
            c = self.m.cols[fid]
            if c["ti"] + 1 >= len(KINDS[c["kind"]][0]):
                assert self.t.widen(c["name"], KINDS[c["kind"]][0][c["ti"]]) is None  # the same type
                assert self.t.version == before
                return
            self._widen(self.t, fid)
            self._after(before)

        @precondition(lambda self: len(self.m.cols) >= 2)
        @rule(data=st.data(), kind=st.sampled_from(sorted(KINDS)), default=VALUES)
        def evolve_block(self, data: st.DataObject, kind: str, default: int | None) -> None:
            """Widen one column, rename another, then add one: one version."""
            fids = data.draw(st.permutations(self.m.fids()))
            before = self.t.version
            with self.t.evolve() as e:
                self._widen(e, fids[0])
                self._rename(e, fids[1], reuse=True)
                self._add(e, kind, default, reuse=True)
            self._born(before + 1)
            self._after(before)

        # -- maintenance and history ----------------------------------------------------------------

        @rule(log=st.sampled_from(["on", "off"]))
        def set_log(self, log: str) -> None:
            """A property change is a version too; a rollback brings its version's properties back."""
            before = self.t.version
            self.t.set_properties({"changes.log": log})
            self.m.log = log
            self._after(before, changed=None)

        @rule()
        def compact(self) -> None:
            before = self.t.version
            self.t.compact()
            self._after(before, changed=None)

        @rule(go=st.integers(0, 3))
        def expire(self, go: int) -> None:
            if go:  # rarely: it ends the ranges a change feed can read
                return
            self.t.expire(older_than=NOW, dry_run=False)
            self.t.cleanup(older_than=NOW, dry_run=False)  # never a file a kept version holds
            self.oldest = self.t.version
            flags = {h.version: h.expired for h in self.t.history()}
            assert flags == {v: v not in self.live for v in self.versions}

        @rule(data=st.data())
        def rollback(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.live)))
            before = self.t.version
            by_tag = [n for n, tv in self.tags.items() if tv == v]
            if by_tag and data.draw(st.booleans()):
                self.t.rollback(tag=by_tag[0])
            else:
                self.t.rollback(v)
            next_id = self.m.next_id
            self.m = copy.deepcopy(self.versions[v])
            self.m.next_id = next_id  # ids once given stay given
            self._after(before)
            if self.m.log is not None:
                assert self.t.properties["changes.log"] == self.m.log

        @rule(data=st.data(), name=st.sampled_from(["t1", "t2", "rel-1", "x.y"]))
        def tag(self, data: st.DataObject, name: str) -> None:
            v = data.draw(st.sampled_from(sorted(self.live)))
            assert self.t.tag(name, v, replace=True) == v
            self.tags[name] = v
            assert self.t.tags() == self.tags

        @precondition(lambda self: bool(self.tags))
        @rule(data=st.data())
        def untag(self, data: st.DataObject) -> None:
            name = data.draw(st.sampled_from(sorted(self.tags)))
            self.t.untag(name)
            v = self.tags.pop(name)
            assert self.t.tags() == self.tags
            if v in self.live:  # not past an expire, or tagged twice: still readable
                self._check(self.t.to_arrow(version=v), self.versions[v], f"untagged version {v}")
            else:
                with pytest.raises(errors.NoSuchVersion):
                    self.t.scan(version=v)

        # -- reads ----------------------------------------------------------------------------------

        @rule(data=st.data())
        def read_version(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.live)))
            model = self.versions[v]
            self._check(self.t.to_arrow(version=v), model, f"version {v}")
            self._check(self.t.scan(as_of=self.times[v]).to_arrow(), model, f"as_of version {v}")
            for name, tv in self.tags.items():
                if tv == v:
                    self._check(self.t.scan(tag=name).to_arrow(), model, f"tag {name}")
            assert self.t.scan(version=v).count() == len(model.rows)
            small = self.t.scan(version=v, window_bytes=256, threads=1).to_arrow()  # windowed merges
            self._check(small, model, f"windowed version {v}")
            keys = [*sorted(model.rows)[::2], 42]
            looked = self.t.scan(filter=f"k in ({', '.join(map(str, keys))})", version=v).to_arrow()
            assert rows_of(looked) == {k: r for k, r in model.view().items() if k in keys}, ("lookup", v)
            assert self.t.snapshot(as_of=self.times[v]).version == v
            assert [(f.name, f.type, f.nullable) for f in self.t.spec_at(v).schema] == model.schema()
            if v + 1 in self.times:  # between two commits: the older one
                mid = self.times[v] + (self.times[v + 1] - self.times[v]) / 2
                self._check(self.t.scan(as_of=mid.isoformat()).to_arrow(), model, f"as_of text, version {v}")
            snap = cat.snapshot(as_of=self.times[v])
            self._check(snap.table(self.t.name).to_arrow(), model, f"catalog snapshot as_of version {v}")

        @rule(data=st.data(), x=st.integers(-20, 20))
        def read_filtered(self, data: st.DataObject, x: int) -> None:
            v = data.draw(st.sampled_from(sorted(self.live)))
            model = self.versions[v]
            if not model.cols:
                return
            fid = data.draw(st.sampled_from(model.fids()))
            name, kind = model.name(fid), model.cols[fid]["kind"]
            lit = repr(KINDS[kind][1](x)).replace('"', "'")
            match = {
                k: r[fid]
                for k, r in model.rows.items()
                if r.get(fid) is not None and r[fid] > KINDS[kind][1](x)
            }
            scan = self.t.scan(columns=["k", name], filter=f"{name} > {lit}", version=v)
            got = scan.to_arrow()
            assert got.schema.names == ["k", name]
            assert got.schema.field(name).type == model.type_of(fid)
            assert {r["k"]: r[name] for r in got.to_pylist()} == match, (v, name, x)
            assert scan.count() == len(match)
            con = duckdb.connect()
            register(con, "view", self.t, version=v)
            got = con.sql(f'select k, "{name}" from view where "{name}" > {lit}').to_arrow_table()
            assert {r["k"]: r[name] for r in got.to_pylist()} == match, ("duckdb", v, name, x)
            if polars is not None:  # Polars pushes its projection and filter into mere
                frame = scan_table(self.t, version=v).filter(polars.col(name) > KINDS[kind][1](x))
                got = frame.select(["k", name]).collect().to_dicts()
                assert {r["k"]: r[name] for r in got} == match, ("polars", v, name, x)
            values = [r[fid] for r in model.rows.values() if r.get(fid) is not None]
            whole = self.t.scan(version=v)
            assert whole.min(name) == (min(values) if values else None), (v, name)
            assert whole.max(name) == (max(values) if values else None), (v, name)
            assert scan.min(name) == (min(match.values()) if match else None), (v, name, x)
            assert scan.max(name) == (max(match.values()) if match else None), (v, name, x)
            # A name the version does not have is refused (a typed error), never read as another column.
            now_names = {c["name"] for c in self.m.cols.values()} | set(self.spent)
            absent = sorted(now_names - {c["name"] for c in model.cols.values()})
            if absent:
                with pytest.raises(errors.MereError):
                    self.t.scan(columns=["k", absent[0]], version=v).to_arrow()
                with pytest.raises(errors.MereError):
                    self.t.scan(filter=f"{absent[0]} is null", version=v).to_arrow()

        def _feed_checkable(self, a: int, b: int) -> bool:
            """Whether the model can tell the feed's values: every current column exists at every version
            of the range, or was born inside it and exists from then on (rows before read its default)."""
            for fid, c in self.m.cols.items():
                born = c["born"]
                for v in range(a, b + 1):
                    if fid not in self.versions[v].cols and not (born > a and v < born):
                        return False
                    if fid in self.versions[v].cols and born > a and v < born:
                        return False
            return True

        def _last_change(self, k: int, a: int, b: int) -> int:
            """The newest version of (a, b] at which the key's row changed (on the columns both sides have)."""
            last = a
            for v in range(a + 1, b + 1):
                old, new = self.versions[v - 1], self.versions[v]
                same = set(old.cols) & set(new.cols)
                ro, rn = old.rows.get(k), new.rows.get(k)
                if (ro is None) != (rn is None) or (
                    ro is not None and rn is not None and any(ro[i] != rn[i] for i in same)
                ):
                    last = v
            return last

        def _narrowed(self, a: int, b: int) -> bool:
            for fid, c in self.m.cols.items():
                for v in range(a, b + 1):
                    old = self.versions[v].cols.get(fid)
                    if old is not None and old["ti"] > c["ti"]:
                        return True
            return False

        @rule(data=st.data())
        def changes(self, data: st.DataObject) -> None:
            live = sorted(self.live)
            a = data.draw(st.sampled_from(live))
            ends = [b for b in live if b >= a and all(v in self.live for v in range(a, b + 1))]
            b = data.draw(st.sampled_from(ends[1:] or ends))
            if self._narrowed(a, b):
                with contextlib.suppress(errors.InvalidInput):
                    self.t.changes(a, b).read_all()
                return
            feed = self.t.changes(a, b).read_all()
            now = self.m.schema()
            got_names = [f.name for f in feed.schema]
            assert sorted(got_names[:2]) == ["k", "p"], got_names
            assert got_names[2:] == [*[n for n, _, _ in now][2:], "_change", "_version", "_commit_time"]
            if not self._feed_checkable(a, b):
                return
            names = [n for n, _, _ in now]

            def in_current(model: Model) -> dict[int, dict[str, Any]]:
                out = {}
                for k, r in model.rows.items():
                    row: dict[str, Any] = {"p": part_of(k)}
                    for fid, c in sorted(self.m.cols.items()):
                        row[c["name"]] = r[fid] if fid in model.cols else c["default"]
                    out[k] = row
                return out

            old, new = in_current(self.versions[a]), in_current(self.versions[b])
            applied = copy.deepcopy(old)
            seen: dict[int, list[str]] = {}
            for r in feed.to_pylist():
                k, change = r["k"], r["_change"]
                seen.setdefault(k, []).append(change)
                assert a < r["_version"] <= b, r
                assert r["_version"] >= self._last_change(k, a, b), (
                    "_version older than the key's change",
                    a,
                    b,
                    r,
                )
                assert r["_commit_time"] == self.times[r["_version"]], r
                image = {n: r[n] for n in names if n != "k"}
                if change in ("delete", "update_before"):
                    assert old.get(k) == image, ("before image", a, b, r, old.get(k))
                if change == "delete":
                    applied.pop(k)
                elif change in ("insert", "update_after"):
                    applied[k] = image
            for k, changes in seen.items():
                assert sorted(changes) in (["delete"], ["insert"], ["update_after", "update_before"]), (
                    k,
                    changes,
                )
                assert (k in old) == (changes != ["insert"]) and (k in new) == (changes != ["delete"]), (
                    k,
                    changes,
                )
            assert applied == new, (a, b)
            # A projection and a filter naming a current column, across the range's column changes.
            fids = self.m.fids()
            if not fids:
                return
            fid = data.draw(st.sampled_from(fids))
            name, kind = self.m.name(fid), self.m.cols[fid]["kind"]
            x = KINDS[kind][1](data.draw(st.integers(-20, 20)))
            lit = repr(x).replace('"', "'")
            part = self.t.changes(a, b, columns=[name], filter=f"{name} > {lit}").read_all()
            assert sorted(part.schema.names) == sorted(
                ["k", "p", name, "_change", "_version", "_commit_time"]
            )
            want = sorted(
                (r["k"], r["_change"], r[name], r["_version"])
                for r in feed.to_pylist()
                if r[name] is not None and r[name] > x
            )
            have = sorted((r["k"], r["_change"], r[name], r["_version"]) for r in part.to_pylist())
            assert have == want, (a, b, name, x)

        def _in_current(self, model: Model) -> dict[int, dict[str, Any]]:
            out = {}
            for k, r in model.rows.items():
                row: dict[str, Any] = {"p": part_of(k)}
                for fid, c in sorted(self.m.cols.items()):
                    row[c["name"]] = r[fid] if fid in model.cols else c["default"]
                out[k] = row
            return out

        @rule(data=st.data())
        def follow_in_segments(self, data: st.DataObject) -> None:
            """A consumer applying the feeds of consecutive ranges, whatever the columns did in between
            (dropped and brought back by a rollback too), ends at the current rows."""
            b = self.t.version
            starts = [
                a
                for a in sorted(self.live)
                if all(v in self.live for v in range(a, b + 1))
                and all(fid in self.versions[a].cols or c["born"] > a for fid, c in self.m.cols.items())
                and not self._narrowed(a, b)
            ]
            if not starts:
                return
            a = data.draw(st.sampled_from(starts))
            cuts = sorted(set(data.draw(st.lists(st.integers(a, b), max_size=3))) | {a, b})
            state = self._in_current(self.versions[a])
            names = [c["name"] for _, c in sorted(self.m.cols.items())]
            for lo, hi in itertools.pairwise(cuts):
                rows = self.t.changes(lo, hi).read_all().to_pylist()
                for r in sorted(rows, key=lambda r: r["_change"] not in ("delete", "update_before")):
                    if r["_change"] == "delete":
                        state.pop(r["k"], None)
                    elif r["_change"] in ("insert", "update_after"):
                        state[r["k"]] = {"p": r["p"], **{n: r[n] for n in names}}
            assert state == self._in_current(self.m), (a, cuts)

        @precondition(lambda self: bool(self.expired))
        @rule(data=st.data())
        def expired_versions_are_refused(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.expired)))
            with pytest.raises(errors.NoSuchVersion):
                self.t.scan(version=v).to_arrow()
            with pytest.raises(errors.NoSuchVersion):
                self.t.changes(v)
            with pytest.raises(errors.NoSuchVersion):  # never an older tagged version instead
                self.t.scan(as_of=self.times[v]).to_arrow()
            before = self.t.version
            with pytest.raises(errors.NoSuchVersion):
                self.t.rollback(v)
            with pytest.raises(errors.NoSuchVersion):
                self.t.tag("late", v)
            assert self.t.version == before and self.t.tags() == self.tags

        @rule(which=st.integers(0, 20))
        def bad_argument(self, which: int) -> None:
            t = self.t
            before = t.version
            cols = self.m.fids()
            name = self.m.name(cols[0]) if cols else None
            calls: list[Any] = [
                lambda: t.rename_column("k", "kk"),
                lambda: t.drop_column("p"),
                lambda: t.widen("p", pa.large_string()),
                lambda: t.add_column("k", pa.int64()),
                lambda: t.rename_column(name, "_change") if name else t.drop_column("nope"),
                lambda: t.rename_column(name, "K") if name else t.drop_column("nope"),
                lambda: t.widen(name, pa.bool_()) if name else t.widen("nope", pa.int64()),
                lambda: t.add_column("z", pa.int16(), default="x"),
                lambda: t.rollback(tag="no-such-tag"),
                lambda: t.tag("-bad", before),
                lambda: t.scan(version=before, tag="t1"),
                lambda: t.changes(before + 1),
                lambda: t.upsert(pa.table({"k": [1], "p": ["pa"], "no_such": [1]})),
                lambda: self._half_evolve(),
                lambda: (
                    t.upsert(self._frame([self._new_key()], [1], self.m.fids()[1:]))
                    if 1 in self.m.cols
                    else t.widen("k", pa.int64())
                ),  # a new key without its NOT NULL column
                lambda: t.upsert(self._null_nn()) if 1 in self.m.cols else t.drop_column("k"),
                lambda: t.changes(before, before - 1) if before else t.changes(-1),
                lambda: t.upsert(
                    self._frame([1], [1], self.m.fids()).append_column("K", pa.array([1])), evolve=True
                ),
                lambda: t.changes(0, before, columns=["no_such"]),
                lambda: t.scan(as_of=dt.datetime(2000, 1, 1)).to_arrow(),  # before the table
                lambda: t.scan(as_of="yesterday").to_arrow(),
            ]
            with pytest.raises(errors.MereError):
                calls[which]()
            assert t.version == before, which
            assert t.tags() == self.tags
            fresh = cat.load_table(t.name)
            self._check(fresh.to_arrow(), self.m, f"after refused call {which}")

        def _new_key(self) -> int:
            return next(k for k in range(10, 100) if k not in self.m.rows)

        def _null_nn(self) -> pa.Table:
            frame = self._frame([self._new_key()], [1], self.m.fids())
            i = frame.schema.get_field_index(self.m.name(1))
            return frame.set_column(i, self.m.name(1), pa.nulls(1, self.m.type_of(1)))

        def _half_evolve(self) -> None:
            with self.t.evolve() as e:
                e.add_column(f"h{next(_names)}", pa.int32())
                e.rename_column("k", "kk")

        @invariant()
        def matches_the_model(self) -> None:
            self._check(self.t.to_arrow(), self.m, "current")
            for v in self.tags.values():
                assert v in self.live

        def teardown(self) -> None:
            # Expire never breaks a live version or tag: expire, then read them all.
            if self.t.version not in self.versions:
                return  # a step failed half-way: its own error is the report
            self.t.expire(older_than=NOW, dry_run=False)
            keep = set(self.tags.values()) | {self.t.version}
            for v in sorted(keep):
                self._check(self.t.to_arrow(version=v), self.versions[v], f"kept version {v}")
            for name, v in self.tags.items():
                self._check(self.t.to_arrow(tag=name), self.versions[v], f"kept tag {name}")
            for v in sorted(set(self.versions) - keep):
                with pytest.raises(errors.NoSuchVersion):
                    self.t.scan(version=v)

    run_state_machine_as_test(
        HistoryMachine,
        settings=settings(
            max_examples=max_examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.reuse, Phase.generate]
            if os.environ.get("NO_SHRINK")
            else list(Phase),
        ),
    )


@pytest.mark.parametrize("log", ["off", "on"])
def test_history_under_evolution_follows_the_model(local_cat: mere.Catalog, log: str) -> None:
    run_model(
        local_cat,
        max_examples=int(os.environ.get("N_EX", "30")),
        steps=int(os.environ.get("N_STEPS", "30")),
        log=log,
    )


# -- the command line at old versions --------------------------------------------------------------------


def cli(*args: str) -> tuple[int, str, str]:
    pytest.importorskip("click")
    from mere.cli import app as cli_app

    raw, err = io.BytesIO(), io.StringIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_app.run(list(args))
    out.flush()
    return rc, raw.getvalue().decode(), err.getvalue()


def jsonl(text: str) -> list[dict[str, Any]]:
    return sorted((json.loads(line) for line in text.splitlines() if line.strip()), key=lambda r: r["k"])


def test_the_cli_describes_and_scans_old_versions_with_their_own_columns(tmp_path: Any) -> None:
    wh = str(tmp_path / "wh")
    t = new_table(mere.connect(wh))
    t.upsert(
        pa.table(
            {"k": [1, 2], "p": ["pa", "pb"], "nn": pa.array([1, 2], pa.int32()), "a": [5, 6], "s": ["x", "y"]}
        )
    )
    t.tag("first")  # v1
    with t.evolve() as e:  # v2
        e.rename_column("s", "label")
        e.widen("a", pa.int64())
        e.add_column("s", pa.int32(), default=9)  # the old name, a new column
    t.upsert(pa.table({"k": [3], "p": ["pa"], "nn": [3], "a": [2**40], "label": ["z"], "s": [1]}))  # v3
    t.compact()  # v4
    t.expire(older_than=NOW, dry_run=False)  # v1 (tagged) and v4 stay
    rc, out, err = cli("-w", wh, "describe", t.name, "--version", "1", "--json")
    assert rc == 0, err
    cols = {c["name"]: c for c in json.loads(out)["columns"]}
    assert list(cols) == ["k", "p", "nn", "a", "s"]
    assert (cols["a"]["type"], cols["s"]["type"], cols["nn"]["nullable"]) == ("int16", "string", False)
    rc, out, err = cli("-w", wh, "describe", t.name, "--json")
    assert rc == 0, err
    cols = {c["name"]: c for c in json.loads(out)["columns"]}
    assert list(cols) == ["k", "p", "nn", "a", "label", "s"] and cols["s"]["default"] == "9"
    for how in (["--version", "1"], ["--tag", "first"]):
        rc, out, err = cli(
            "-w", wh, "scan", t.name, *how, "--columns", "k,s", "--filter", "s = 'y'", "--json"
        )
        assert rc == 0, err
        assert jsonl(out) == [{"k": 2, "s": "y"}]
    rc, out, err = cli("-w", wh, "scan", t.name, "--columns", "k,s,label", "--filter", "s = 9", "--json")
    assert rc == 0, err
    assert jsonl(out) == [{"k": 1, "s": 9, "label": "x"}, {"k": 2, "s": 9, "label": "y"}]
    before = t.version
    for args in (
        ["scan", t.name, "--version", "2"],  # expired
        ["describe", t.name, "--version", "3"],
        ["scan", t.name, "--version", "1", "--columns", "label"],  # not a column of version 1
        ["changes", t.name, "--from", "1"],  # the commits after the tag expired
    ):
        rc, out, err = cli("-w", wh, *args)
        assert rc == 1 and err.startswith("mere: error: ") and "Traceback" not in err, (args, rc, err)
    assert t.version == before


def test_history_under_evolution_on_each_catalog(cat: mere.Catalog) -> None:
    """The same machine on SQLite and PostgreSQL (commit times, tags and expiry live in the catalog)."""
    run_model(cat, max_examples=int(os.environ.get("N_EX_CAT", "8")), steps=25, log="off")
