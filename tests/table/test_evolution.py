"""Schema evolution: add, widen, rename and drop columns. Checked against a plain-dict model that tracks
columns by id (every version, read back with its own schema), on SQLite and PostgreSQL; plus files
written before field ids, stale handles, evolving writes, the change feed, copy-on-write tables and bad
arguments (typed errors, nothing changed)."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
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
import mere.write.writer as writer_module
from mere import errors

_names = itertools.count()

# Value column kinds: (type, how a small int is stored, the type it may widen to).
KINDS: dict[str, tuple[pa.DataType, Any, pa.DataType]] = {
    "i8": (pa.int8(), int, pa.int16()),
    "i32": (pa.int32(), int, pa.int64()),
    "u16": (pa.uint16(), lambda v: abs(v), pa.int32()),
    "f32": (pa.float32(), float, pa.float64()),
    "str": (pa.string(), str, pa.large_string()),
    "bin": (pa.binary(), lambda v: str(v).encode(), pa.large_binary()),
    "dec": (pa.decimal128(9, 2), lambda v: Decimal(v) / 4, pa.decimal128(18, 2)),
    "list": (pa.list_(pa.int32()), lambda v: [v, v + 1], pa.list_(pa.int32())),
}


def rows_of(table: pa.Table) -> dict[Any, dict[str, Any]]:
    return {r["k"]: {c: v for c, v in r.items() if c != "k"} for r in table.to_pylist()}


def run_model(cat: mere.Catalog) -> None:
    class EvolutionMachine(RuleBasedStateMachine):
        """Columns by id: {id: [name, kind, type, default]}; rows: {key: {id: value}}."""

        def __init__(self) -> None:
            super().__init__()
            self.t = cat.create_table(
                f"ev.t{next(_names)}",
                pa.schema([pa.field("k", pa.int64(), nullable=False), ("a", pa.int32()), ("b", pa.string())]),
                primary_key="k",
                buckets=2,
            )
            self.cols: dict[int, list[Any]] = {
                2: ["a", "i32", pa.int32(), None],
                3: ["b", "str", pa.string(), None],
            }
            self.rows: dict[int, dict[int, Any]] = {}
            self.next_id = 4
            self.dropped: list[str] = []
            self.versions: dict[int, tuple[list[tuple[str, pa.DataType]], dict[int, dict[str, Any]]]] = {}
            self.states: dict[int, tuple[dict[int, list[Any]], dict[int, dict[int, Any]]]] = {}
            self._record()

        # -- the model ------------------------------------------------------------------------------

        def _view(self) -> tuple[list[tuple[str, pa.DataType]], dict[int, dict[str, Any]]]:
            order = sorted(self.cols)
            schema = [(self.cols[i][0], self.cols[i][2]) for i in order]
            rows = {
                k: {self.cols[i][0]: r.get(i, self.cols[i][3]) for i in order} for k, r in self.rows.items()
            }
            return schema, rows

        def _record(self) -> None:
            self.versions[self.t.version] = self._view()
            self.states[self.t.version] = copy.deepcopy((self.cols, self.rows))

        def _value(self, fid: int, v: int | None) -> Any:
            return None if v is None else KINDS[self.cols[fid][1]][1](v)

        # -- steps ------------------------------------------------------------------------------------

        @rule(
            keys=st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
            values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=8, max_size=8),
            partial=st.booleans(),
        )
        def upsert(self, keys: list[int], values: list[int | None], partial: bool) -> None:
            ids = sorted(self.cols)
            if partial and len(ids) > 1:
                ids = ids[: len(ids) // 2]  # a column subset: the others keep their values
            data: dict[str, Any] = {"k": pa.array(keys, pa.int64())}
            for j, fid in enumerate(ids):
                col = [self._value(fid, values[(j + n) % len(values)]) for n in range(len(keys))]
                data[self.cols[fid][0]] = pa.array(col, self.cols[fid][2])
            self.t.upsert(pa.table(data))
            for n, k in enumerate(keys):
                # A new key's missing columns are null (not the default: that is for rows written before).
                row = self.rows.get(k, {i: None for i in self.cols})
                for j, fid in enumerate(ids):
                    row[fid] = self._value(fid, values[(j + n) % len(values)])
                self.rows[k] = row
            self._record()

        @rule(keys=st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
        def delete(self, keys: list[int]) -> None:
            self.t.delete(pa.table({"k": pa.array(keys, pa.int64())}))
            for k in keys:
                self.rows.pop(k, None)
            self._record()

        @rule(
            kind=st.sampled_from(sorted(KINDS)),
            default=st.one_of(st.none(), st.integers(0, 9)),
            reuse=st.booleans(),
        )
        def add_column(self, kind: str, default: int | None, reuse: bool) -> None:
            names = {c[0] for c in self.cols.values()}
            free = [n for n in self.dropped if n not in names]
            name = free[-1] if reuse and free else f"c{self.next_id}"
            kind_type = KINDS[kind][0]
            fid = self.next_id
            self.next_id += 1
            self.cols[fid] = [name, kind, kind_type, None]
            value = self._value(fid, default)
            self.t.add_column(name, kind_type, default=value)
            self.cols[fid][3] = value
            for r in self.rows.values():
                r[fid] = value  # rows written before read the default
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(data=st.data())
        def rename(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            new = f"r{next(_names)}"
            self.t.rename_column(self.cols[fid][0], new)
            self.cols[fid][0] = new
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(data=st.data())
        def drop(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            name = self.cols.pop(fid)[0]
            self.t.drop_column(name)
            self.dropped.append(name)
            for r in self.rows.values():
                r.pop(fid, None)
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(data=st.data())
        def widen(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            name, kind, kind_type, _ = self.cols[fid]
            wider = KINDS[kind][2]
            if kind_type == wider:
                assert self.t.widen(name, wider) is None  # nothing to change: no commit
                return
            self.t.widen(name, wider)
            self.cols[fid][2] = wider
            self._record()

        @rule()
        def compact(self) -> None:
            if self.t.compact(min_files=1) is not None:
                self._record()

        @rule(data=st.data())
        def read_version(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.versions)))
            schema, rows = self.versions[v]
            got = self.t.to_arrow(version=v)
            assert [(f.name, f.type) for f in got.schema][1:] == schema
            assert rows_of(got) == rows

        @rule(data=st.data())
        def rollback(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.versions)))
            schema, rows = self.versions[v]
            self.t.rollback(v)
            assert [(f.name, f.type) for f in self.t.schema][1:] == schema
            assert rows_of(self.t.to_arrow()) == rows
            # The model takes that version's columns and rows back; ids keep counting up.
            self.cols, self.rows = copy.deepcopy(self.states[v])
            self._record()

        @invariant()
        def matches_the_model(self) -> None:
            schema, rows = self._view()
            got = self.t.to_arrow()
            assert [(f.name, f.type) for f in got.schema][1:] == schema
            assert rows_of(got) == rows

        def teardown(self) -> None:
            pass

    run_state_machine_as_test(
        EvolutionMachine,
        settings=settings(
            max_examples=25, stateful_step_count=16, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


def test_schema_evolution_follows_the_model(cat: mere.Catalog) -> None:
    run_model(cat)


# -- deterministic cases -------------------------------------------------------------------------------

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), ("day", pa.string()), ("v", pa.int32()), ("s", pa.string())]
)


def new_table(cat: mere.Catalog, **kwargs: Any) -> mere.Table:
    kwargs.setdefault("primary_key", "k")
    kwargs.setdefault("buckets", 2)
    return cat.create_table(f"ev.d{next(_names)}", kwargs.pop("schema", SCHEMA), **kwargs)


def put(t: mere.Table, rows: list[dict[str, Any]]) -> None:
    t.upsert(pa.Table.from_pylist(rows, schema=pa.schema([t.schema.field(c) for c in rows[0]])))


def test_identity_columns_cannot_change_and_bad_arguments_change_nothing(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat, partition_by="day")
    put(t, [{"k": 1, "day": "d1", "v": 1, "s": "x"}])
    before = (t.version, t.schema, t.to_arrow())
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: t.drop_column("k"), errors.InvalidInput, "primary-key"),
        (lambda: t.rename_column("k", "key"), errors.InvalidInput, "primary-key"),
        (lambda: t.widen("k", pa.int64()), errors.InvalidInput, "primary-key"),
        (lambda: t.drop_column("day"), errors.InvalidInput, "partition"),
        (lambda: t.rename_column("day", "d"), errors.InvalidInput, "partition"),
        (lambda: t.drop_column("nope"), errors.SchemaMismatch, "no column 'nope'"),
        (lambda: t.rename_column("v", "s"), errors.SchemaMismatch, "already has a column 's'"),
        (lambda: t.rename_column("v", ""), errors.InvalidInput, "non-empty"),
        (lambda: t.rename_column("v", "_mere_op"), errors.SchemaMismatch, "reserved"),
        (lambda: t.rename_column(3, "x"), errors.InvalidInput, "column name"),
        (lambda: t.add_column("v", pa.int64()), errors.SchemaMismatch, "already has"),
        (lambda: t.add_column("n", "no-such-type"), errors.InvalidInput, "type"),
        (lambda: t.add_column("n", pa.int64(), default="abc"), errors.InvalidInput, "not a value of type"),
        # Arrow alone would take these, changed: a list of letters, a struct without its unknown field,
        # a truncated number, a day count as a date, a naive time as UTC.
        (lambda: t.add_column("n", pa.list_(pa.string()), default="abc"), errors.InvalidInput, "is a list"),
        (
            lambda: t.add_column("n", pa.struct([("a", pa.int8())]), default={"b": 1}),
            errors.InvalidInput,
            "no field 'b'",
        ),
        (
            lambda: t.add_column("n", pa.struct([("a", pa.int8())]), default={"a": 300}),
            errors.InvalidInput,
            "int8",
        ),
        (lambda: t.add_column("n", pa.int64(), default=1.5), errors.InvalidInput, "would change"),
        (lambda: t.add_column("n", pa.int64(), default=True), errors.InvalidInput, "not compatible"),
        (lambda: t.add_column("n", pa.date32(), default=1), errors.InvalidInput, "not compatible"),
        (
            lambda: t.add_column("n", pa.decimal128(5, 2), default=Decimal("1.234")),
            errors.InvalidInput,
            "value",
        ),
        (lambda: t.add_column("n", pa.float64(), default="1.5"), errors.InvalidInput, "not compatible"),
        (lambda: t.add_column("n", pa.uint8(), default=-1), errors.InvalidInput, "uint8"),
        (
            lambda: t.add_column("n", pa.timestamp("us", "UTC"), default=dt.datetime(2020, 1, 1)),
            errors.InvalidInput,
            "naive",
        ),
        (
            lambda: t.add_column("n", pa.map_(pa.string(), pa.int64()), default=[("a", 1.5)]),
            errors.InvalidInput,
            "would change",
        ),
        (
            lambda: t.add_column("n", pa.map_(pa.string(), pa.int64()), default=["a"]),
            errors.InvalidInput,
            "pairs",
        ),
        (lambda: t.add_column("n", pa.list_(pa.int64(), 2), default=[1]), errors.InvalidInput, "holds 2"),
        (lambda: t.add_column("n", pa.int64(), default=object()), errors.InvalidInput, "not a value of type"),
        (lambda: t.add_column("n", pa.null()), errors.UnsupportedType, "cannot store"),
        (lambda: t.widen("v", pa.int16()), errors.SchemaMismatch, "only widening"),
        (lambda: t.widen("v", pa.float64()), errors.SchemaMismatch, "only widening"),
        (lambda: t.widen("s", pa.int64()), errors.SchemaMismatch, "only widening"),
        (lambda: t.widen("v", "int128"), errors.InvalidInput, "type"),
        (
            lambda: t.evolve().add_column("n", pa.int64()).add_column("n", pa.int64()),
            errors.SchemaMismatch,
            "already has",
        ),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind, match=text):
            call()
        assert (t.version, t.schema, t.to_arrow()) == before
    from mere.spec import OP_COLUMN

    with pytest.raises(errors.SchemaMismatch, match="reserved"):
        t.add_column(OP_COLUMN, pa.int64())
    with pytest.raises(errors.InvalidInput, match="evolve must be True or False"):
        t.upsert(pa.table({"k": [2]}), evolve="yes")
    assert (t.version, t.schema) == before[:2]


def test_sum_columns_cannot_be_renamed_but_widen(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat, merge_operators={"v": "sum"})
    put(t, [{"k": 1, "v": 2}])
    with pytest.raises(errors.InvalidInput, match="sum"):
        t.rename_column("v", "w")
    t.widen("v", pa.int64())
    t.upsert(pa.table({"k": [1], "v": pa.array([2**40], pa.int64())}))
    assert t.to_arrow().column("v").to_pylist() == [2 + 2**40]


def test_a_dropped_column_never_comes_back_under_its_old_name(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, [{"k": 1, "v": 10, "s": "old"}])
    t.drop_column("s")
    t.add_column("s", pa.string(), default="fresh")
    put(t, [{"k": 2, "v": 20, "s": "new"}])
    assert t.to_arrow().sort_by("k").column("s").to_pylist() == ["fresh", "new"]
    # A filter on the new column never uses the old column's statistics to skip files.
    assert t.scan(filter="s = 'fresh'").to_arrow().column("k").to_pylist() == [1]
    assert t.scan(filter="s = 'old'").to_arrow().num_rows == 0
    t.compact()
    assert t.to_arrow().sort_by("k").column("s").to_pylist() == ["fresh", "new"]
    # Time travel shows the old column in its own schema.
    assert t.to_arrow(version=1).column("s").to_pylist() == ["old"]


def test_a_rename_swap_keeps_every_value_with_its_column(cat: mere.Catalog) -> None:
    t = new_table(
        cat,
        schema=pa.schema([pa.field("k", pa.int64(), nullable=False), ("a", pa.int64()), ("b", pa.int64())]),
    )
    t.upsert(pa.table({"k": [1, 2], "a": [1, 2], "b": [100, 200]}))
    with t.evolve() as e:
        e.rename_column("a", "tmp").rename_column("b", "a").rename_column("tmp", "b")
    assert t.to_arrow().sort_by("k").to_pydict() == {"k": [1, 2], "a": [100, 200], "b": [1, 2]}
    assert t.scan(filter="a > 150").to_arrow().column("k").to_pylist() == [2]
    assert t.scan(filter="b > 1").to_arrow().column("k").to_pylist() == [2]
    t.upsert(pa.table({"k": [1], "b": [7]}))  # a partial upsert after the swap
    assert t.to_arrow().sort_by("k").to_pydict() == {"k": [1, 2], "a": [100, 200], "b": [7, 2]}


def test_files_written_before_field_ids_map_by_their_original_names(
    local_cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:  # files as mere wrote them before it recorded field ids
        m.setattr(writer_module, "with_field_ids", lambda table, spec: table)
        t = new_table(local_cat)
        put(t, [{"k": 1, "v": 1, "s": "a"}, {"k": 2, "v": 2, "s": "b"}])
        t.upsert(pa.table({"k": [2], "s": ["b2"]}))  # a partial file
    for f in t.files_at(t.version):
        md = t.storage.metadata(f.path)
        assert not any(b"PARQUET:field_id" in (x.metadata or {}) for x in md.schema.to_arrow_schema())
    t.rename_column("s", "label")
    t.drop_column("v")
    t.add_column("v", pa.int64(), default=-1)
    put(t, [{"k": 3, "label": "c", "v": 3}])
    assert t.to_arrow().sort_by("k").to_pydict() == {
        "k": [1, 2, 3],
        "day": [None] * 3,
        "label": ["a", "b2", "c"],
        "v": [-1, -1, 3],
    }
    t.compact()
    assert t.to_arrow().sort_by("k").to_pydict()["label"] == ["a", "b2", "c"]


def test_widened_values_read_in_the_new_type(cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("i", pa.int8()),
            ("u", pa.uint32()),
            ("f", pa.float32()),
            ("d", pa.decimal128(5, 2)),
            ("s", pa.string()),
            ("b", pa.binary()),
        ]
    )
    t = new_table(cat, schema=schema)
    t.upsert(
        pa.table(
            {
                "k": [1, 2],
                "i": pa.array([-128, 127], pa.int8()),
                "u": pa.array([0, 2**32 - 1], pa.uint32()),
                "f": pa.array([-0.0, float("nan")], pa.float32()),
                "d": pa.array([Decimal("-999.99"), Decimal("1.5")], pa.decimal128(5, 2)),
                "s": ["x", None],
                "b": [b"\x00", b"y"],
            },
            schema=schema,
        )
    )
    with t.evolve() as e:
        e.widen("i", pa.int64()).widen("u", pa.int64()).widen("f", pa.float64())
        e.widen("d", pa.decimal128(20, 2)).widen("s", pa.large_string()).widen("b", pa.large_binary())
    got = t.to_arrow().sort_by("k")
    assert got.schema.field("u").type == pa.int64() and got.schema.field("d").type == pa.decimal128(20, 2)
    assert got.column("i").to_pylist() == [-128, 127]
    assert got.column("u").to_pylist() == [0, 2**32 - 1]
    f = got.column("f").to_pylist()
    assert str(f[0]) == "-0.0" and f[1] != f[1]
    assert got.column("d").to_pylist() == [Decimal("-999.99"), Decimal("1.50")]
    assert got.column("s").to_pylist() == ["x", None] and got.column("b").to_pylist() == [b"\x00", b"y"]
    t.upsert(pa.table({"k": [3], "u": pa.array([2**40], pa.int64())}))
    assert t.scan(filter="u > 4294967295").to_arrow().column("k").to_pylist() == [3]
    assert t.scan(filter="i = -128").to_arrow().column("k").to_pylist() == [1]
    assert t.to_arrow(version=1).schema.field("u").type == pa.uint32()


def test_a_stale_handle_cannot_write_under_old_columns(cat: mere.Catalog) -> None:
    t = new_table(cat)
    other = cat.table(t.name)
    put(t, [{"k": 1, "v": 1}])
    t.drop_column("s")
    files = set(p for p, _, _ in t.storage.list_files(t.location))
    for write in (
        lambda: other.upsert(pa.table({"k": [2], "s": ["lost?"]})),
        lambda: other.set_properties({"team": "x"}),
        lambda: other.add_column("n", pa.int64()),
        lambda: other.compact(min_files=1),
    ):
        before = t.version
        with pytest.raises(errors.SchemaChanged, match="refresh"):
            write()
        assert t.version == before
    assert set(p for p, _, _ in t.storage.list_files(t.location)) == files  # nothing left behind
    other.refresh()
    other.upsert(pa.table({"k": [2], "v": [2]}))
    assert t.to_arrow().sort_by("k").to_pydict() == {"k": [1, 2], "day": [None, None], "v": [1, 2]}


def test_evolving_writes_add_columns_in_the_same_commit(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, [{"k": 1, "v": 1}])
    with pytest.raises(errors.SchemaMismatch, match="unknown column"):
        t.upsert(pa.table({"k": [2], "extra": [1.5]}))
    v = t.version
    with pytest.raises(errors.NullKey):  # a failed evolving write adds no column
        t.upsert(pa.table({"k": pa.array([None], pa.int64()), "extra": [1.5]}), evolve=True)
    assert t.version == v and "extra" not in t.schema.names
    result = t.upsert(pa.table({"k": [2], "extra": [1.5], "tags": [["a"]]}), evolve=True)
    assert result.version == v + 1 and t.version == v + 1
    assert t.schema.field("extra").type == pa.float64() and t.schema.field("tags").type == pa.list_(
        pa.string()
    )
    assert t.to_arrow().sort_by("k").to_pydict()["extra"] == [None, 1.5]
    # A table without key appends with evolve too.
    log = cat.create_table(f"ev.log{next(_names)}", pa.schema([("a", pa.int64())]))
    log.append(pa.table({"a": [1]}))
    log.append(pa.table({"a": [2], "b": ["x"]}), evolve=True)
    assert sorted(log.to_arrow().to_pylist(), key=lambda r: r["a"]) == [
        {"a": 1, "b": None},
        {"a": 2, "b": "x"},
    ]


def test_copy_on_write_tables_keep_values_across_renames(cat: mere.Catalog) -> None:
    t = cat.create_table(f"ev.cow{next(_names)}", pa.schema([("a", pa.int64()), ("b", pa.string())]))
    t.append(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}))
    t.rename_column("b", "label")
    t.add_column("n", pa.int64(), default=0)
    t.delete("a = 2")
    t.update(set={"label": "'Z'"}, where="a = 3")
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["a"]) == [
        {"a": 1, "label": "x", "n": 0},
        {"a": 3, "label": "Z", "n": 0},
    ]


def test_the_change_feed_speaks_the_current_columns(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, [{"k": 1, "v": 1, "s": "a"}])
    start = t.version
    t.rename_column("s", "label")
    put(t, [{"k": 1, "v": 2, "label": "b"}])
    feed = t.changes(start).read_all().sort_by([("k", "ascending"), ("_change", "descending")])
    assert feed.column("label").to_pylist() == ["a", "b"]
    assert feed.column("_change").to_pylist() == ["update_before", "update_after"]


def test_rollback_restores_the_columns_of_its_version_and_ids_stay_spent(cat: mere.Catalog) -> None:
    t = new_table(cat)
    put(t, [{"k": 1, "v": 1, "s": "a"}])
    v = t.version
    t.add_column("n", pa.int64(), default=5)
    t.drop_column("s")
    t.rollback(v)
    assert t.schema.names == ["k", "day", "v", "s"]
    assert t.to_arrow().to_pylist() == [{"k": 1, "day": None, "v": 1, "s": "a"}]
    t.add_column("n", pa.int64())  # the same name, a new id: the old n's default does not apply
    assert t.spec.field_ids["n"] > 5
    assert t.to_arrow().column("n").to_pylist() == [None]


def test_an_evolved_spec_is_refused_by_an_older_reader() -> None:
    from mere.spec import TableSpec
    from mere.table.evolve import add_column

    spec = TableSpec.create(SCHEMA, "k")
    evolved = add_column(
        spec, "n", pa.timestamp("us", "UTC"), default=pa.scalar(0, pa.timestamp("us", "UTC"))
    )
    again = TableSpec.from_json(evolved.to_json())
    assert again == evolved and again.defaults[again.field_ids["n"]].type == pa.timestamp("us", "UTC")
    assert '"format": 2' in evolved.to_json() and '"format": 1' in spec.to_json()
    import json

    with pytest.raises(errors.CatalogError, match="upgrade mere"):
        TableSpec.from_json(json.dumps({**json.loads(evolved.to_json()), "format": 99}))


@pytest.mark.parametrize(
    ("kind", "default", "read"),
    [
        (pa.float64(), float("-0.0"), -0.0),
        (pa.int64(), 2.0, 2),
        (pa.int8(), np.int64(-128), -128),
        (pa.binary(), "x", b"x"),
        (pa.decimal128(5, 2), Decimal("1.2"), Decimal("1.20")),
        (pa.date32(), dt.date(2020, 1, 2), dt.date(2020, 1, 2)),
        (pa.struct([("a", pa.int8()), ("b", pa.string())]), {"b": "x"}, {"a": None, "b": "x"}),
        (pa.map_(pa.string(), pa.int64()), {"a": 1}, [("a", 1)]),
        (pa.list_(pa.struct([("x", pa.float32())])), [{"x": 0.5}, None], [{"x": 0.5}, None]),
        (pa.list_(pa.int64(), 2), (1, 2), [1, 2]),
        (
            pa.timestamp("us", "UTC"),
            pa.scalar(0, pa.timestamp("s", "UTC")),
            dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        ),
    ],
)
def test_defaults_are_read_as_given(tmp_path: Path, kind: pa.DataType, default: Any, read: Any) -> None:
    t = new_table(mere.connect(str(tmp_path / "w")))
    put(t, [{"k": 1, "v": 1}])
    t.add_column("n", kind, default=default)
    got = t.to_arrow().column("n").to_pylist()
    assert got == [read]
    if isinstance(read, float):
        assert math.copysign(1.0, got[0]) == math.copysign(1.0, read)


def test_a_nested_column_can_be_added_renamed_and_dropped(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "w"))
    t = new_table(cat)
    put(t, [{"k": 1, "v": 1}])
    kind = pa.struct([("x", pa.int64()), ("tags", pa.list_(pa.string()))])
    t.add_column("nest", kind, default={"x": 1, "tags": ["d"]})
    t.upsert(pa.table({"k": [2], "nest": pa.array([{"x": 2, "tags": []}], kind)}))
    t.rename_column("nest", "nested")
    assert t.to_arrow().sort_by("k").column("nested").to_pylist() == [
        {"x": 1, "tags": ["d"]},
        {"x": 2, "tags": []},
    ]
    t.drop_column("nested")
    assert t.schema.names == ["k", "day", "v", "s"]
    # The files stay: the older version still reads the column.
    older = t.to_arrow(version=t.version - 1).sort_by("k")
    assert older.column("nested").to_pylist()[1] == {"x": 2, "tags": []}


def test_point_lookups_and_small_merges_of_an_evolved_table(cat: mere.Catalog) -> None:
    t = new_table(cat)
    t.upsert(
        pa.table(
            {"k": list(range(50)), "v": pa.array(range(50), pa.int32()), "s": [str(i) for i in range(50)]}
        )
    )
    t.upsert(pa.table({"k": [3], "s": ["partial"]}))  # a partial file
    with t.evolve() as e:
        e.rename_column("s", "label").widen("v", pa.int64()).add_column("n", pa.int64(), default=7)
    t.drop_column("day")
    t.upsert(pa.table({"k": [4], "v": [40], "label": ["new"], "n": [1]}))
    expected = {
        3: {"k": 3, "v": 3, "label": "partial", "n": 7},
        4: {"k": 4, "v": 40, "label": "new", "n": 1},
        5: {"k": 5, "v": 5, "label": "5", "n": 7},
    }
    for k, row in expected.items():
        assert t.to_arrow(filter=f"k = {k}").to_pylist() == [row]
    got = t.to_arrow(filter="k IN (3, 4, 5, 999)").sort_by("k").to_pylist()
    assert got == list(expected.values())
    src = pa.table({"k": [5, 60], "v": [55, 60]})
    t.merge(src).when_matched_update(set={"v": "s.v", "n": "t.n + 1"}).when_not_matched_insert_all().execute()
    assert t.to_arrow(filter="k IN (5, 60)").sort_by("k").to_pylist() == [
        {"k": 5, "v": 55, "label": "5", "n": 8},
        {"k": 60, "v": 60, "label": None, "n": None},
    ]


# -- found by an independent adversarial review (evolution x feed x time travel) ---------------------------


@pytest.mark.parametrize("name", ["_change", "_version", "_commit_time", "_mere_op"])
def test_the_change_feed_s_column_names_are_reserved(local_cat: mere.Catalog, name: str) -> None:
    with pytest.raises(errors.SchemaMismatch, match="reserved"):
        local_cat.create_table(
            f"ev.r{next(_names)}", pa.schema([("k", pa.int64()), (name, pa.int64())]), primary_key="k"
        )
    t = new_table(local_cat)
    put(t, [{"k": 1, "day": "d", "v": 1, "s": "x"}])
    before = (t.version, t.to_arrow())
    for change in (
        lambda: t.add_column(name, pa.int64()),
        lambda: t.rename_column("s", name),
        lambda: t.upsert(pa.table({"k": [2], name: [1]}), evolve=True),
    ):
        with pytest.raises(errors.SchemaMismatch, match=r"reserved|unknown column"):  # _mere_op: not data
            change()
    assert (t.version, t.to_arrow()) == before
    assert t.changes(0).read_all().num_rows == 1


@pytest.mark.parametrize(
    "narrow, wide, value",
    [
        (pa.int16(), pa.int32(), 100_000),
        (pa.float32(), pa.float64(), 0.1),
        (pa.decimal128(5, 2), pa.decimal128(9, 2), Decimal("1234567.89")),
    ],
)
def test_a_feed_over_values_a_rollback_narrowed_is_refused(
    local_cat: mere.Catalog, narrow: pa.DataType, wide: pa.DataType, value: Any
) -> None:
    """A rollback past a widening: the feed speaks the current (narrow) type, which cannot hold the values
    written while the column was wide. Refused (was: an overflow from pyarrow, or float64 rounded)."""
    t = new_table(local_cat, schema=pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", narrow)]))
    t.upsert(pa.table({"k": [1], "v": pa.array([1], narrow)}))  # v1
    t.widen("v", wide)  # v2
    t.upsert(pa.table({"k": [2], "v": pa.array([value], wide)}))  # v3
    assert t.changes(1, 3).read_all().column("v").to_pylist() == [value]  # the current type is wide
    t.rollback(1)  # v4: v is narrow again
    assert t.schema.field("v").type == narrow
    for start, end in ((2, 3), (1, 4), (0, 3), (3, 4)):
        with pytest.raises(errors.InvalidInput, match="rollback undid its widening"):
            t.changes(start, end)
    assert t.changes(0, 1).read_all().num_rows == 1  # before the widening: readable
    t.widen("v", wide)  # v5: wide again, the feed is whole
    assert t.changes(2, 3).read_all().column("v").to_pylist() == [value]


def test_logged_before_images_of_a_column_a_rollback_restored(local_cat: mere.Catalog) -> None:
    """Logs written while a column was dropped do not hold it: after a rollback brings it back, a feed
    that needs its earlier values merges instead (was: NULL from the log)."""
    feeds = []
    for log in ("off", "on"):
        t = new_table(local_cat)
        put(t, [{"k": 1, "day": "d", "v": 5, "s": "x"}, {"k": 2, "day": "d", "v": 7, "s": "y"}])  # v1
        t.set_properties({"changes.log": log})  # v2
        t.drop_column("v")  # v3
        t.delete("k = 2")  # v4
        t.rollback(2)  # v5: v is back, with its id
        feed = t.changes(1, 4).read_all().select(["k", "v", "s", "_change"]).to_pylist()
        assert feed == [{"k": 2, "v": 7, "s": "y", "_change": "delete"}], (log, feed)
        feeds.append(feed)
    assert feeds[0] == feeds[1]


def test_defaults_and_values_that_fit_though_their_arrow_type_is_wider(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat)
    put(t, [{"k": 1, "day": "d", "v": 1, "s": "x"}])
    t.add_column("u", pa.uint64(), default=2**64 - 1)  # Arrow alone guesses int64 for a Python int
    t.add_column("lu", pa.list_(pa.uint64()), default=[2**63])
    t.add_column("d", pa.decimal128(10, 2), default=5)
    t.upsert(pa.table({"k": [2], "d": [7]}))  # int64 values into decimal(10, 2): each fits
    with pytest.raises(errors.SchemaMismatch, match="precision"):
        t.upsert(pa.table({"k": [3], "d": [10**9]}))  # 1000000000.00 needs 12 digits
    got = {r["k"]: (r["u"], r["lu"], r["d"]) for r in t.to_arrow().to_pylist()}
    # Defaults are for rows written before their column; a new row without it holds NULL.
    assert got == {1: (2**64 - 1, [2**63], Decimal("5.00")), 2: (None, None, Decimal("7.00"))}


def test_a_schema_change_that_cancels_out_commits_nothing(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat)
    assert t.evolve().rename_column("s", "z").rename_column("z", "s").commit() is None
    assert t.version == 0 and not t.spec.evolved
