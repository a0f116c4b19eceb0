"""Schema evolution against independent oracles (adversarial trial 48).

A Hypothesis state machine drives a partitioned, bucketed primary-key table with a ``last_non_null``
column through column changes (add with defaults, rename, drop, re-add under a spent name, widen) mixed
with partial and CDC upserts, deletes by key and by predicate, UPDATE, MERGE, compaction, time travel
and rollback. After every step the table must equal a plain-dict model that tracks columns by field id;
filtered reads (mere's own and DuckDB's over a registered mere view, which pushes its filters into mere)
must equal the model filtered by the same SQL, evaluated by DuckDB over the model's rows; ``count()``,
``min()`` and ``max()`` must equal the model's. Refused changes (typed ``MereError``) change nothing.
Deterministic cases cover sequence ordering, merge engines, catalog transactions, CDC sync and the feed.

Bugs found (strict xfails): idempotent replays of transactions that evolve (and of by-name MERGEs after a
rename) raise instead of returning the commit; a handle loaded before a column change reads the newest
version with its old columns (raw pyarrow errors, or a dropped column's values); row-reading changes
(UPDATE, DELETE by filter, MERGE) after tx.evolve() in the same transaction work in the start columns
(an updated row loses its added column's default, a merged-in key gets it, renamed names are refused)."""

from __future__ import annotations

import copy
import itertools
from decimal import Decimal
from typing import Any

import duckdb
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
from cdc_render import wal2json_line
from mere import errors
from mere.integrations.cdc_sync import SyncOptions, events_from_json, sync_batch
from mere.integrations.duckdb import register

_names = itertools.count()

# kind -> (types from narrow to wide, how a small int is stored)
KINDS: dict[str, tuple[list[pa.DataType], Any]] = {
    "int": ([pa.int16(), pa.int32(), pa.int64()], int),
    "float": ([pa.float32(), pa.float64()], lambda v: v / 2),  # halves: exact in float32
    "str": ([pa.string(), pa.large_string()], lambda v: f"s{v:+03d}"),
    "dec": ([pa.decimal128(7, 2), pa.decimal128(20, 2)], lambda v: Decimal(v) / 4),
}

KEYS = st.integers(0, 9)
VALUES = st.one_of(st.none(), st.integers(-20, 20))


def part_of(k: int) -> str:
    """A key's partition never changes (partial rows may not move a key)."""
    return "pa" if k % 3 else "pb"


class Col:
    def __init__(self, name: str, kind: str, width: int, default: Any, op: str = "last") -> None:
        self.name, self.kind, self.width, self.default, self.op = name, kind, width, default, op

    @property
    def type(self) -> pa.DataType:
        return KINDS[self.kind][0][self.width]

    def value(self, v: int | None) -> Any:
        return None if v is None else KINDS[self.kind][1](v)


def sql_literal(value: Any) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    return str(value)


def run_machine(cat: mere.Catalog, auto_compact: bool) -> None:
    class EvolutionOracle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            schema = pa.schema(
                [
                    pa.field("k", pa.int64(), nullable=False),
                    ("p", pa.string()),
                    ("a", pa.int16()),
                    ("b", pa.string()),
                    ("c", pa.float32()),
                ]
            )
            self.t = cat.create_table(
                f"ev48.m{next(_names)}",
                schema,
                primary_key="k",
                partition_by="p",
                buckets=2,
                merge_operators={"b": "last_non_null"},
                cdc_column="op",
                properties={"compaction.auto": "inline" if auto_compact else "off"},
            )
            self.cols: dict[int, Col] = {
                3: Col("a", "int", 0, None),
                4: Col("b", "str", 0, None, "last_non_null"),
                5: Col("c", "float", 0, None),
            }
            self.rows: dict[int, dict[int, Any]] = {}
            self.next_id = 6
            self.dropped: list[str] = []
            self.states: dict[int, tuple[dict[int, Col], dict[int, dict[int, Any]]]] = {}
            self.views: dict[int, tuple[list[tuple[str, pa.DataType]], list[dict[str, Any]]]] = {}
            self._record()

        # -- the model --------------------------------------------------------------------------------

        def _view(self) -> tuple[list[tuple[str, pa.DataType]], list[dict[str, Any]]]:
            ids = sorted(self.cols)
            schema = [(self.cols[i].name, self.cols[i].type) for i in ids]
            rows = [
                {"k": k, "p": part_of(k), **{self.cols[i].name: r[i] for i in ids}}
                for k, r in sorted(self.rows.items())
            ]
            return schema, rows

        def _record(self) -> None:
            self.states[self.t.version] = copy.deepcopy((self.cols, self.rows))
            self.views[self.t.version] = self._view()

        def _model_table(self) -> pa.Table:
            schema, rows = self._view()
            arrow = pa.schema([("k", pa.int64()), ("p", pa.string()), *schema])
            return pa.Table.from_pylist(rows, schema=arrow)

        def _upsert_row(self, k: int, given: dict[int, Any]) -> None:
            row = self.rows.get(k)
            if row is None:
                row = {i: None for i in self.cols}
                for i, v in given.items():
                    row[i] = v
            else:
                for i, v in given.items():
                    if v is None and self.cols[i].op == "last_non_null":
                        continue
                    row[i] = v
            self.rows[k] = row

        def _unchanged(self, call: Any, kind: type[Exception]) -> None:
            before = (self.t.version, self.t.schema, self.t.to_arrow().sort_by("k"))
            with pytest.raises(kind):
                call()
            assert isinstance(kind(""), errors.MereError)
            self.t.refresh()
            assert (self.t.version, self.t.schema, self.t.to_arrow().sort_by("k")) == before

        def _columns_data(self, keys: list[int], ids: list[int], values: list[int | None]) -> dict[str, Any]:
            data: dict[str, Any] = {
                "k": pa.array(keys, pa.int64()),
                "p": pa.array([part_of(k) for k in keys], pa.string()),
            }
            for j, i in enumerate(ids):
                col = self.cols[i]
                data[col.name] = pa.array(
                    [col.value(values[(j + n) % len(values)]) for n in range(len(keys))], col.type
                )
            return data

        # -- writes ----------------------------------------------------------------------------------

        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=5, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
            data=st.data(),
        )
        def upsert(self, keys: list[int], values: list[int | None], data: st.DataObject) -> None:
            ids = sorted(self.cols)
            ids = data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
            batch = self._columns_data(keys, ids, values)
            self.t.upsert(pa.table(batch))
            for n, k in enumerate(keys):
                self._upsert_row(k, {i: self.cols[i].value(values[(j + n) % 6]) for j, i in enumerate(ids)})
            self._record()

        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=6),
            ops=st.lists(st.sampled_from(["I", "U", "D", "-U", "+U", "d"]), min_size=6, max_size=6),
            values=st.lists(VALUES, min_size=6, max_size=6),
        )
        def cdc(self, keys: list[int], ops: list[str], values: list[int | None]) -> None:
            ids = sorted(self.cols)
            batch = self._columns_data(keys, ids, values)
            batch["op"] = pa.array(ops[: len(keys)], pa.string())
            self.t.upsert(pa.table(batch))
            for n, k in enumerate(keys):
                op = ops[n]
                if op in ("D", "d"):
                    self.rows.pop(k, None)
                elif op != "-U":
                    self._upsert_row(
                        k, {i: self.cols[i].value(values[(j + n) % 6]) for j, i in enumerate(ids)}
                    )
            self._record()

        @rule(keys=st.lists(KEYS, min_size=1, max_size=3, unique=True))
        def delete_keys(self, keys: list[int]) -> None:
            self.t.delete(pa.table({"k": pa.array(keys, pa.int64())}))
            for k in keys:
                self.rows.pop(k, None)
            self._record()

        def _predicate(self, data: st.DataObject) -> str:
            ids = sorted(self.cols)
            if not ids:
                return data.draw(st.sampled_from(["p = 'pa'", "k > 4"]))
            col = self.cols[data.draw(st.sampled_from(ids))]
            which = data.draw(st.sampled_from(["cmp", "null", "notnull", "part"]))
            if which == "null":
                return f"{col.name} IS NULL"
            if which == "notnull":
                return f"{col.name} IS NOT NULL"
            v = col.value(data.draw(st.integers(-20, 20)))
            op = data.draw(st.sampled_from(["=", "<", ">=", "<>"]))
            pred = f"{col.name} {op} {sql_literal(v)}"
            return f"({pred}) AND p = 'pb'" if which == "part" else pred

        def _matching(self, predicate: str) -> list[int]:
            """The model's keys the predicate holds for, evaluated by DuckDB over the model's rows."""
            con = duckdb.connect()
            con.register("model", self._model_table())
            return [r[0] for r in con.execute(f"SELECT k FROM model WHERE {predicate} ORDER BY k").fetchall()]

        @rule(data=st.data())
        def delete_where(self, data: st.DataObject) -> None:
            pred = self._predicate(data)
            hit = self._matching(pred)
            result = self.t.delete(pred)
            assert result.no_change == (not hit), (pred, hit, result)
            if hit:
                assert result.rows_deleted == len(hit), (pred, hit, result)
            for k in hit:
                self.rows.pop(k)
            self._record()

        @precondition(lambda self: any(c.kind == "int" for c in self.cols.values()))
        @rule(data=st.data())
        def update(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(i for i, c in self.cols.items() if c.kind == "int")))
            col = self.cols[fid]
            pred = self._predicate(data)
            hit = self._matching(pred)
            self.t.update(set={col.name: f"coalesce({col.name}, 0) + 1"}, where=pred)
            for k in hit:
                old = self.rows[k][fid]
                self.rows[k][fid] = (old or 0) + 1
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=4, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
            data=st.data(),
        )
        def merge(self, keys: list[int], values: list[int | None], data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols[fid]
            source = pa.table(self._columns_data(keys, [fid], values))
            sql = data.draw(st.booleans())
            if sql:
                mere.sql(
                    f"MERGE INTO {self.t.name} AS t USING src AS s ON t.k = s.k "
                    f"WHEN MATCHED THEN UPDATE SET {col.name} = s.{col.name} "
                    "WHEN NOT MATCHED THEN INSERT (k, p, "
                    + col.name
                    + ") VALUES (s.k, s.p, s."
                    + col.name
                    + ")",
                    catalog=cat,
                    src=source,
                )
                self.t.refresh()
            else:
                (
                    self.t.merge(source)
                    .when_matched_update(set={col.name: f"s.{col.name}"})
                    .when_not_matched_insert_all()
                    .execute()
                )
            for n, k in enumerate(keys):
                value = col.value(values[n % 6])
                if k in self.rows:
                    self.rows[k][fid] = value  # written whole: no operator folds it
                else:
                    self.rows[k] = {i: (value if i == fid else None) for i in self.cols}
            self._record()

        @rule()
        def compact(self) -> None:
            if self.t.compact(min_files=1) is not None:
                self._record()

        # -- column changes ---------------------------------------------------------------------------

        @rule(
            kind=st.sampled_from(sorted(KINDS)),
            default=st.one_of(st.none(), st.integers(-20, 20)),
            reuse=st.booleans(),
        )
        def add_column(self, kind: str, default: int | None, reuse: bool) -> None:
            names = {c.name for c in self.cols.values()}
            free = [n for n in self.dropped if n not in names]
            name = free[-1] if reuse and free else f"n{self.next_id}"
            col = Col(name, kind, 0, None)
            value = col.value(default)
            self.t.add_column(name, col.type, default=value)
            col.default = value
            fid = self.next_id
            self.next_id += 1
            self.cols[fid] = col
            for r in self.rows.values():
                r[fid] = value
            self._record()

        @rule(
            kind=st.sampled_from(sorted(KINDS)),
            default=st.one_of(st.none(), st.integers(-20, 20)),
            keys=st.lists(KEYS, min_size=1, max_size=4, unique=True),
            values=st.lists(VALUES, min_size=6, max_size=6),
            data=st.data(),
        )
        def add_and_upsert_in_one_transaction(
            self,
            kind: str,
            default: int | None,
            keys: list[int],
            values: list[int | None],
            data: st.DataObject,
        ) -> None:
            """tx.evolve() then tx.upsert() (what held: upserts after a column change see the new columns)."""
            col = Col(f"n{self.next_id}", kind, 0, None)
            col.default = col.value(default)
            fid = self.next_id
            with self.t.transaction() as tx:
                with tx.evolve() as e:
                    e.add_column(col.name, col.type, default=col.default)
                self.next_id += 1
                self.cols[fid] = col
                for r in self.rows.values():
                    r[fid] = col.default
                ids = data.draw(st.lists(st.sampled_from(sorted(self.cols)), unique=True))
                tx.upsert(pa.table(self._columns_data(keys, ids, values)))
            for n, k in enumerate(keys):
                self._upsert_row(k, {i: self.cols[i].value(values[(j + n) % 6]) for j, i in enumerate(ids)})
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(data=st.data(), to_dropped=st.booleans())
        def rename(self, data: st.DataObject, to_dropped: bool) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            names = {c.name for c in self.cols.values()}
            free = [n for n in self.dropped if n not in names]
            new = free[0] if to_dropped and free else f"r{next(_names)}"
            self.t.rename_column(self.cols[fid].name, new)
            self.cols[fid].name = new
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(data=st.data())
        def drop(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols.pop(fid)
            self.t.drop_column(col.name)
            self.dropped.append(col.name)
            for r in self.rows.values():
                r.pop(fid, None)
            self._record()

        @precondition(lambda self: len(self.cols) > 0)
        @rule(data=st.data())
        def widen(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols[fid]
            ladder = KINDS[col.kind][0]
            width = data.draw(st.integers(col.width, len(ladder) - 1))
            result = self.t.widen(col.name, ladder[width])
            if width == col.width:
                assert result is None
                return
            col.width = width
            self._record()

        @rule(data=st.data())
        def refused_change(self, data: st.DataObject) -> None:
            names = [c.name for c in self.cols.values()]
            calls: list[tuple[Any, type[Exception]]] = [
                (lambda: self.t.drop_column("k"), errors.InvalidInput),
                (lambda: self.t.drop_column("p"), errors.InvalidInput),
                (lambda: self.t.rename_column("p", "q"), errors.InvalidInput),
                (lambda: self.t.widen("k", pa.int32()), errors.InvalidInput),
                (lambda: self.t.rename_column("k", "kk"), errors.InvalidInput),
                (lambda: self.t.add_column("p", pa.string()), errors.SchemaMismatch),
                (lambda: self.t.drop_column("no_such"), errors.SchemaMismatch),
                (lambda: self.t.add_column("op", pa.string()), errors.SchemaMismatch),
            ]
            if len(names) >= 2:
                calls.append((lambda: self.t.rename_column(names[0], names[1]), errors.SchemaMismatch))
                calls.append(
                    (lambda: self.t.rename_column(names[0], names[1].upper()), errors.SchemaMismatch)
                )
            for c in self.cols.values():
                narrower = KINDS[c.kind][0][: c.width]
                if narrower:
                    calls.append((lambda c=c, n=narrower: self.t.widen(c.name, n[0]), errors.SchemaMismatch))
                other = "int" if c.kind != "int" else "str"
                calls.append(
                    (lambda c=c, o=other: self.t.widen(c.name, KINDS[o][0][-1]), errors.SchemaMismatch)
                )
                calls.append(
                    (
                        lambda c=c: self.t.evolve().rename_column(c.name, "tmp48").drop_column("k"),
                        errors.InvalidInput,
                    )
                )
            call, kind = data.draw(st.sampled_from(calls))
            self._unchanged(call, kind)

        # -- reads ------------------------------------------------------------------------------------

        @rule(data=st.data())
        def time_travel(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.views)))
            schema, rows = self.views[v]
            got = self.t.to_arrow(version=v)
            assert [(f.name, f.type) for f in got.schema][2:] == schema
            assert got.sort_by("k").to_pylist() == rows

        @rule(data=st.data())
        def rollback(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.states)))
            self.t.rollback(v)
            self.cols, self.rows = copy.deepcopy(self.states[v])
            self._record()

        @rule(data=st.data())
        def filtered_reads(self, data: st.DataObject) -> None:
            pred = self._predicate(data)
            want = self._matching(pred)
            scan = self.t.scan(filter=pred)
            assert scan.to_arrow().sort_by("k").column("k").to_pylist() == want, (pred, scan.explain())
            assert scan.count() == len(want), pred
            streamed = [
                k
                for b in self.t.scan(filter=pred, columns=["k"]).to_batches()
                for k in b.column(0).to_pylist()
            ]
            assert sorted(streamed) == want, pred
            con = duckdb.connect()
            register(con, "mt", self.t)
            got = [r[0] for r in con.sql(f"SELECT k FROM mt WHERE {pred} ORDER BY k").fetchall()]
            assert got == want, pred

        @rule(data=st.data())
        def extremes(self, data: st.DataObject) -> None:
            if not self.cols:
                return
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols[fid]
            values = [r[fid] for r in self.rows.values() if r[fid] is not None]
            assert self.t.scan().min(col.name) == (min(values) if values else None), col.name
            assert self.t.scan().max(col.name) == (max(values) if values else None), col.name

        @invariant()
        def matches_the_model(self) -> None:
            schema, rows = self._view()
            got = self.t.to_arrow()
            assert [(f.name, f.type) for f in got.schema][2:] == schema
            assert got.sort_by("k").to_pylist() == rows
            assert self.t.scan().count() == len(rows)

    run_state_machine_as_test(
        EvolutionOracle,
        settings=settings(
            max_examples=6 if auto_compact else 8,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.mark.parametrize("auto_compact", [False, True])
def test_evolution_follows_the_model_and_duckdb(local_cat: mere.Catalog, auto_compact: bool) -> None:
    run_machine(local_cat, auto_compact)


# -- deterministic cases ---------------------------------------------------------------------------------

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int32()), ("s", pa.string())])


def new_table(cat: mere.Catalog, schema: pa.Schema = SCHEMA, **kwargs: Any) -> mere.Table:
    kwargs.setdefault("primary_key", "k")
    kwargs.setdefault("buckets", 2)
    return cat.create_table(f"ev48.d{next(_names)}", schema, **kwargs)


def test_a_replayed_table_transaction_that_evolves_is_already_committed(local_cat: mere.Catalog) -> None:
    """Control: the replay is fine on a handle loaded before the first run (its spec lacks the change)."""
    t = new_table(local_cat)
    t.upsert(pa.table({"k": [1], "v": pa.array([1], pa.int32()), "s": ["a"]}))
    stale = local_cat.table(t.name)

    def run(h: mere.Table) -> mere.CommitResult:
        tx = h.transaction(idempotency_key="evolve-once")
        with tx.evolve() as e:
            e.add_column("n", pa.int64(), default=1)
            e.rename_column("s", "label")
        tx.upsert(pa.table({"k": [2], "n": [2], "label": ["b"]}))
        return tx.commit()

    first = run(t)
    assert not first.already_committed
    again = run(stale)
    assert again.already_committed and again.version == first.version
    assert local_cat.table(t.name).to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v": 1, "label": "a", "n": 1},
        {"k": 2, "v": None, "label": "b", "n": 2},
    ]


@pytest.mark.parametrize("handle", ["same", "fresh"])
def test_a_replayed_table_transaction_that_evolves_from_a_current_handle(
    local_cat: mere.Catalog, handle: str
) -> None:
    t = new_table(local_cat)
    t.upsert(pa.table({"k": [1], "v": pa.array([1], pa.int32()), "s": ["a"]}))

    def run(h: mere.Table) -> mere.CommitResult:
        tx = h.transaction(idempotency_key="drop-once")
        with tx.evolve() as e:
            e.drop_column("v")
        tx.upsert(pa.table({"k": [3], "s": ["c"]}))
        return tx.commit()

    first = run(t)
    before = (t.version, t.schema, t.to_arrow().sort_by("k"))
    h = t if handle == "same" else local_cat.table(t.name)
    again = run(h)
    assert again.already_committed and again.version == first.version
    assert (t.version, t.schema, t.to_arrow().sort_by("k")) == before


@pytest.mark.parametrize("created", [False, True])
def test_a_replayed_catalog_transaction_that_evolves(local_cat: mere.Catalog, created: bool) -> None:
    name = f"ev48.c{next(_names)}"
    u = new_table(local_cat)
    if not created:
        local_cat.create_table(name, SCHEMA, primary_key="k", buckets=2).upsert(
            pa.table({"k": [1], "v": pa.array([1], pa.int32()), "s": ["a"]})
        )

    def run() -> mere.CatalogTransaction:
        with local_cat.transaction(idempotency_key="batch-7") as tx:
            share = tx.create_table(name, SCHEMA, primary_key="k", buckets=2) if created else tx.table(name)
            with share.evolve() as e:
                e.add_column("n", pa.int64())
                e.rename_column("s", "label")
            share.upsert(pa.table({"k": [2], "n": [2], "label": ["b"]}))
            tx.table(u.name).upsert(pa.table({"k": [5], "v": pa.array([5], pa.int32())}))
        return tx

    assert not run().already_committed
    versions = (local_cat.table(name).version, local_cat.table(u.name).version)
    rows = local_cat.table(name).to_arrow().sort_by("k")
    assert run().already_committed
    assert (local_cat.table(name).version, local_cat.table(u.name).version) == versions
    assert local_cat.table(name).to_arrow().sort_by("k").equals(rows)


def test_a_replayed_merge_by_name_after_its_column_was_renamed(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat)
    t.upsert(pa.table({"k": [1, 2], "v": pa.array([1, 2], pa.int32()), "s": ["a", "b"]}))

    def merge_by_name(h: mere.Table) -> mere.MergeMetrics:
        source = pa.table({"k": [1, 3], "s": ["m", "n"]})
        return (
            h.merge(source)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(idempotency_key="m1")
        )

    def update(h: mere.Table) -> mere.CommitResult:
        return h.update(set={"s": "s || '!'"}, where="v = 2", idempotency_key="u1")

    first = merge_by_name(t)
    assert not first.already_committed
    assert not update(t).already_committed
    t.rename_column("s", "label")
    before = (t.version, t.to_arrow().sort_by("k"))
    assert update(local_cat.table(t.name)).already_committed  # the same kind of replay: fine
    again = merge_by_name(local_cat.table(t.name))
    assert again.already_committed and again.version == first.version
    assert (t.version, t.to_arrow().sort_by("k")) == before


# -- sequence ordering across column changes ---------------------------------------------------------------


def run_sequence_machine(cat: mere.Catalog) -> None:
    class SequenceOracle(RuleBasedStateMachine):
        """A ``sequence_by`` table whose sequence and value columns are renamed, widened, added and dropped
        while late, duplicate and deleting CDC events arrive. Model: per key the event with the highest
        sequence wins (equal sequences: the later one), deletes stay as tombstones; a winner written before
        a column was added reads that column's default."""

        def __init__(self) -> None:
            super().__init__()
            schema = pa.schema(
                [
                    pa.field("k", pa.int64(), nullable=False),
                    ("lsn", pa.int32()),
                    ("a", pa.int16()),
                    ("b", pa.string()),
                ]
            )
            self.t = cat.create_table(
                f"ev48.q{next(_names)}",
                schema,
                primary_key="k",
                buckets=2,
                sequence_by="lsn",
                cdc_column="op",
                properties={"compaction.auto": "off"},
            )
            self.seq_name, self.seq_wide = "lsn", False
            self.cols: dict[int, Col] = {3: Col("a", "int", 0, None), 4: Col("b", "str", 0, None)}
            self.next_id = 5
            # key -> (sequence, deleted, {id: value} as written)
            self.events: dict[int, tuple[int, bool, dict[int, Any]]] = {}
            self.views: dict[int, list[dict[str, Any]]] = {}
            self._record()

        def _rows(self) -> list[dict[str, Any]]:
            out = []
            for k, (seq, deleted, values) in sorted(self.events.items()):
                if deleted:
                    continue
                row: dict[str, Any] = {"k": k, self.seq_name: seq}
                for i in sorted(self.cols):
                    row[self.cols[i].name] = values.get(i, self.cols[i].default)
                out.append(row)
            return out

        def _record(self) -> None:
            self.views[self.t.version] = self._rows()

        @rule(
            keys=st.lists(KEYS, min_size=1, max_size=5),
            seqs=st.lists(st.integers(0, 12), min_size=5, max_size=5),
            ops=st.lists(st.sampled_from(["I", "U", "D"]), min_size=5, max_size=5),
            values=st.lists(VALUES, min_size=5, max_size=5),
            big=st.booleans(),
        )
        def events_arrive(
            self, keys: list[int], seqs: list[int], ops: list[str], values: list[int | None], big: bool
        ) -> None:
            shift = 2**33 if big and self.seq_wide else 0
            seq = [s + shift for s in seqs[: len(keys)]]
            data: dict[str, Any] = {
                "k": pa.array(keys, pa.int64()),
                self.seq_name: pa.array(seq, pa.int64() if self.seq_wide else pa.int32()),
                "op": pa.array(ops[: len(keys)], pa.string()),
            }
            ids = sorted(self.cols)
            for j, i in enumerate(ids):
                c = self.cols[i]
                data[c.name] = pa.array([c.value(values[(j + n) % 5]) for n in range(len(keys))], c.type)
            self.t.upsert(pa.table(data))
            for n, k in enumerate(keys):
                old = self.events.get(k)
                if old is None or seq[n] >= old[0]:
                    written = {i: self.cols[i].value(values[(j + n) % 5]) for j, i in enumerate(ids)}
                    self.events[k] = (seq[n], ops[n] == "D", written)
            self._record()

        @rule()
        def compact(self) -> None:
            if self.t.compact(min_files=1) is not None:
                self._record()

        @rule(kind=st.sampled_from(["int", "str", "dec"]), default=st.one_of(st.none(), st.integers(-5, 5)))
        def add_column(self, kind: str, default: int | None) -> None:
            col = Col(f"n{self.next_id}", kind, 0, None)
            col.default = col.value(default)
            self.t.add_column(col.name, col.type, default=col.default)
            self.cols[self.next_id] = col
            self.next_id += 1
            self._record()

        @precondition(lambda self: len(self.cols) > 1)
        @rule(data=st.data())
        def drop(self, data: st.DataObject) -> None:
            fid = data.draw(st.sampled_from(sorted(self.cols)))
            self.t.drop_column(self.cols.pop(fid).name)
            self._record()

        @rule(data=st.data(), sequence=st.booleans())
        def rename(self, data: st.DataObject, sequence: bool) -> None:
            new = f"r{next(_names)}"
            if sequence or not self.cols:
                self.t.rename_column(self.seq_name, new)
                self.seq_name = new
            else:
                fid = data.draw(st.sampled_from(sorted(self.cols)))
                self.t.rename_column(self.cols[fid].name, new)
                self.cols[fid].name = new
            self._record()

        @rule(data=st.data())
        def widen(self, data: st.DataObject) -> None:
            if not self.seq_wide and data.draw(st.booleans()):
                self.t.widen(self.seq_name, pa.int64())
                self.seq_wide = True
                self._record()
                return
            ints = [
                i
                for i, c in self.cols.items()
                if c.kind in ("int", "dec") and c.width + 1 < len(KINDS[c.kind][0])
            ]
            if ints:
                c = self.cols[data.draw(st.sampled_from(ints))]
                c.width += 1
                self.t.widen(c.name, c.type)
                self._record()

        @rule()
        def refused(self) -> None:
            before = (self.t.version, self.t.to_arrow().sort_by("k"))
            with pytest.raises(errors.InvalidInput):
                self.t.drop_column(self.seq_name)
            late = pa.table({"k": pa.array([1], pa.int64())})  # no sequence: refused, nothing written
            with pytest.raises(errors.SchemaMismatch):
                self.t.upsert(late)
            assert (self.t.version, self.t.to_arrow().sort_by("k")) == before

        @rule(data=st.data())
        def time_travel(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.views)))
            assert self.t.to_arrow(version=v).sort_by("k").to_pylist() == self.views[v]

        @rule(data=st.data())
        def filtered(self, data: st.DataObject) -> None:
            rows = self._rows()
            bound = data.draw(st.integers(0, 12))
            pred = f"{self.seq_name} >= {bound}"
            want = [r["k"] for r in rows if r[self.seq_name] >= bound]
            assert sorted(self.t.scan(filter=pred).to_arrow().column("k").to_pylist()) == want, pred
            assert self.t.scan(filter=pred).count() == len(want), pred

        @invariant()
        def matches_the_model(self) -> None:
            assert self.t.to_arrow().sort_by("k").to_pylist() == self._rows()
            assert self.t.scan().count() == len(self._rows())

    run_state_machine_as_test(
        SequenceOracle,
        settings=settings(
            max_examples=8, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


def test_sequence_ordering_survives_column_changes(local_cat: mere.Catalog) -> None:
    run_sequence_machine(local_cat)


# -- deterministic cases that held -------------------------------------------------------------------------


def test_sequence_tombstones_hold_across_widening_renaming_and_compaction(local_cat: mere.Catalog) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("lsn", pa.int32()), ("v", pa.string())])
    t = new_table(local_cat, schema, buckets=1, sequence_by="lsn", cdc_column="op")
    t.upsert(pa.table({"k": [1, 2], "lsn": pa.array([5, 5], pa.int32()), "v": ["a", "b"]}))
    t.upsert(pa.table({"k": [1], "lsn": pa.array([10], pa.int32()), "op": ["D"]}))
    t.compact(min_files=1)
    t.widen("lsn", pa.int64())
    t.upsert(pa.table({"k": [1], "lsn": [7], "v": ["late"]}))  # below the tombstone: stays deleted
    t.rename_column("lsn", "pos")
    assert t.spec.sequence_by == ("pos",)
    t.upsert(pa.table({"k": [1, 2], "pos": [8, 2**40], "v": ["late2", "big"]}))
    want = [{"k": 2, "pos": 2**40, "v": "big"}]
    assert t.to_arrow().to_pylist() == want
    t.compact(min_files=1)
    t.upsert(pa.table({"k": [1], "pos": [9], "v": ["late3"]}))
    assert t.to_arrow().to_pylist() == want and t.scan().count() == 1
    assert t.scan(filter="v LIKE 'late%'").to_arrow().num_rows == 0
    assert t.scan(filter="pos > 2147483647").to_arrow().to_pylist() == want
    before = (t.version, t.to_arrow())
    with pytest.raises(errors.InvalidInput, match="sequence_by"):
        t.drop_column("pos")
    assert (t.version, t.to_arrow()) == before
    t.add_column("n", pa.int64(), default=3)
    t.compact(min_files=1)
    kept = (t.version, t.spec.sequence_by, t.to_arrow())
    with pytest.raises(errors.InvalidInput, match="delete markers"):  # the kept tombstone has no n
        t.set_sequence_by("n")
    assert (t.version, t.spec.sequence_by, t.to_arrow()) == kept
    assert t.to_arrow().to_pylist() == [{"k": 2, "pos": 2**40, "v": "big", "n": 3}]


def test_a_sequence_set_to_an_added_column_orders_older_rows_by_its_default(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat, buckets=1, properties={"compaction.auto": "off"})
    t.upsert(pa.table({"k": [1, 2], "v": pa.array([1, 2], pa.int32()), "s": ["a", "b"]}))
    t.add_column("n", pa.int64(), default=3)
    t.compact(min_files=1)
    t.set_sequence_by("n")
    t.upsert(pa.table({"k": [1, 2], "v": pa.array([10, 20], pa.int32()), "s": ["lose", "win"], "n": [2, 4]}))
    assert t.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v": 1, "s": "a", "n": 3},
        {"k": 2, "v": 20, "s": "win", "n": 4},
    ]


@pytest.mark.parametrize("ops", [{"v": "last_non_null"}, "first_row", {"v": "max"}, {"v": "concat:|"}])
def test_merge_engines_fold_added_defaults_and_renamed_columns(local_cat: mere.Catalog, ops: Any) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string()), ("x", pa.int64())])
    t = new_table(local_cat, schema, buckets=1, merge_operators=ops, properties={"compaction.auto": "off"})
    t.upsert(pa.table({"k": [1, 2], "v": ["a", "b"], "x": [1, 2]}))
    t.add_column("c", pa.string(), default="dflt")
    t.upsert(pa.table({"k": [1, 3], "v": [None, "z"], "x": [5, 6], "c": [None, "new"]}))
    t.rename_column("v", "vv")
    t.upsert(pa.table({"k": [2], "vv": ["q"], "x": [7], "c": ["cc"]}))
    first = ops == "first_row"
    v2 = {"first_row": "b", "concat:|": "b|q"}.get(ops if isinstance(ops, str) else ops["v"], "q")
    want = [
        {"k": 1, "vv": "a", "x": 1 if first else 5, "c": "dflt" if first else None},
        {"k": 2, "vv": v2, "x": 2 if first else 7, "c": "dflt" if first else "cc"},
        {"k": 3, "vv": "z", "x": 6, "c": "new"},
    ]
    if ops == {"v": "concat:|"}:
        want[0]["vv"] = "a"  # concat skips NULLs
    assert t.to_arrow().sort_by("k").to_pylist() == want
    dflt = [r["k"] for r in want if r["c"] == "dflt"]
    assert sorted(t.scan(filter="c = 'dflt'").to_arrow().column("k").to_pylist()) == dflt
    t.compact(min_files=1)
    assert t.to_arrow().sort_by("k").to_pylist() == want
    if not first:
        assert t.spec.operator("vv").name == (ops["v"].split(":")[0])


def test_not_null_follows_the_column_through_rename_widen_drop_and_rollback(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("v", pa.int32(), nullable=False),
            ("s", pa.string()),
        ]
    )
    t = new_table(local_cat, schema, buckets=1)
    t.upsert(pa.table({"k": [1], "v": pa.array([1], pa.int32()), "s": ["a"]}))
    t.rename_column("v", "w")
    t.widen("w", pa.int64())
    assert not t.schema.field("w").nullable
    for bad in (pa.table({"k": [2], "s": ["b"]}), pa.table({"k": [1], "w": pa.array([None], pa.int64())})):
        before = (t.version, t.to_arrow())
        with pytest.raises(errors.SchemaMismatch):
            t.upsert(bad)
        assert (t.version, t.to_arrow()) == before
    t.upsert(pa.table({"k": [1], "s": ["a2"]}))  # an existing key keeps its value
    assert t.to_arrow().to_pylist() == [{"k": 1, "w": 1, "s": "a2"}]
    v = t.version
    t.drop_column("w")
    t.add_column("w", pa.int64())  # a new, nullable column
    t.upsert(pa.table({"k": [3], "s": ["c"]}))
    assert t.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "s": "a2", "w": None},
        {"k": 3, "s": "c", "w": None},
    ]
    t.rollback(v)
    with pytest.raises(errors.SchemaMismatch):
        t.upsert(pa.table({"k": [4], "s": ["d"]}))
    assert t.to_arrow().to_pylist() == [{"k": 1, "w": 1, "s": "a2"}]


def test_the_change_feed_is_the_same_with_and_without_the_log_across_evolution(
    local_cat: mere.Catalog,
) -> None:
    feeds = {}
    for log in ("off", "on"):
        schema = pa.schema(
            [
                pa.field("k", pa.int64(), nullable=False),
                ("v", pa.int16()),
                ("s", pa.string()),
                ("f", pa.float32()),
            ]
        )
        t = new_table(local_cat, schema, properties={"changes.log": log, "compaction.auto": "off"})
        t.upsert(
            pa.table(
                {
                    "k": [1, 2, 3],
                    "v": pa.array([1, 2, 3], pa.int16()),
                    "s": ["a", "b", "c"],
                    "f": pa.array([0.5, 1.5, 2.5], pa.float32()),
                }
            )
        )
        with t.evolve() as e:
            e.widen("v", pa.int64()).rename_column("s", "label").add_column("n", pa.int32(), default=7)
            e.widen("f", pa.float64())
        t.upsert(pa.table({"k": [1], "v": [2**40], "label": ["A"]}))
        t.delete("n = 7 and k = 2")
        t.drop_column("f")
        t.upsert(pa.table({"k": [3, 4], "n": pa.array([8, 9], pa.int32())}))
        t.add_column("f", pa.float64(), default=-1.0)
        t.update(set={"f": "f * 2"}, where="k = 3")
        t.compact(min_files=1)
        t.upsert(pa.table({"k": [4], "label": ["D"]}))
        feeds[log] = [
            sorted(
                t.changes(a, b).read_all().drop_columns(["_commit_time"]).to_pylist(),
                key=lambda r: (r["k"], r["_version"], r["_change"]),
            )
            for a in range(t.version)
            for b in range(a + 1, t.version + 1)
        ]
    assert feeds["off"] == feeds["on"]
    whole = feeds["off"][t.version - 1]  # changes(0, newest)
    assert whole == [
        {"k": 1, "v": 2**40, "label": "A", "n": 7, "f": -1.0, "_change": "insert", "_version": 3},
        {"k": 3, "v": 3, "label": "c", "n": 8, "f": -2.0, "_change": "insert", "_version": 8},
        {"k": 4, "v": None, "label": "D", "n": 9, "f": -1.0, "_change": "insert", "_version": 10},
    ]


def test_widened_columns_filter_and_fold_like_duckdb_across_row_groups(local_cat: mere.Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("u", pa.uint32()),
            ("f", pa.float32()),
            ("d", pa.decimal128(5, 2)),
            ("i", pa.int8()),
            ("w", pa.uint16()),
        ]
    )
    t = new_table(
        local_cat, schema, buckets=1, properties={"write.row-group-rows": "4", "compaction.auto": "off"}
    )
    n = 40
    data = pa.table(
        {
            "k": list(range(n)),
            "u": pa.array([(2**32 - 1 - i * 100_000_000) % 2**32 for i in range(n)], pa.uint32()),
            "f": pa.array([0.1 * i for i in range(n)], pa.float32()),
            "d": pa.array([Decimal(i * 25 - 500) / 100 for i in range(n)], pa.decimal128(5, 2)),
            "i": pa.array([(i * 7) % 256 - 128 for i in range(n)], pa.int8()),
            "w": pa.array([i * 1600 for i in range(n)], pa.uint16()),
        },
        schema=schema,
    )
    t.upsert(data)
    t.upsert(pa.table({"k": [1, 2], "f": pa.array([0.5, 0.25], pa.float32())}))  # a partial file
    with t.evolve() as e:
        e.widen("u", pa.int64()).widen("f", pa.float64()).widen("d", pa.decimal128(20, 2))
        e.widen("i", pa.int16()).widen("w", pa.int32())
    # DuckDB's own ALTER TYPE over the same rows is the oracle.
    con = duckdb.connect()
    con.execute("CREATE TABLE m (k BIGINT, u UINTEGER, f FLOAT, d DECIMAL(5, 2), i TINYINT, w USMALLINT)")
    con.execute("INSERT INTO m SELECT * FROM data")
    con.execute("UPDATE m SET f = 0.5 WHERE k = 1")
    con.execute("UPDATE m SET f = 0.25 WHERE k = 2")
    for column, kind in (
        ("u", "BIGINT"),
        ("f", "DOUBLE"),
        ("d", "DECIMAL(20, 2)"),
        ("i", "SMALLINT"),
        ("w", "INTEGER"),
    ):
        con.execute(f"ALTER TABLE m ALTER {column} TYPE {kind}")
    assert t.to_arrow().sort_by("k").to_pylist() == [
        dict(zip(["k", "u", "f", "d", "i", "w"], r)) for r in con.sql("SELECT * FROM m ORDER BY k").fetchall()
    ]
    view = duckdb.connect()
    register(view, "mv", t)
    for pred in [
        "u > 3000000000",
        "u >= 4294967295",
        "f = 0.1",
        "f = 0.10000000149011612",
        "f > 3.5 AND f < 3.75",
        "f = 0.5",
        "d < -4.5",
        "d = 2.25",
        "i = 127",
        "i > 100",
        "i = 1000",
        "i < 1000",
        "w = 62400",
        "u = -1",
    ]:
        want = [r[0] for r in con.sql(f"SELECT k FROM m WHERE {pred} ORDER BY k").fetchall()]
        assert sorted(t.scan(filter=pred).to_arrow().column("k").to_pylist()) == want, pred
        assert t.scan(filter=pred).count() == len(want), pred
        assert [r[0] for r in view.sql(f"SELECT k FROM mv WHERE {pred} ORDER BY k").fetchall()] == want, pred
    for c in ("u", "f", "d", "i", "w"):
        assert [(t.scan().min(c), t.scan().max(c))] == con.sql(
            f"SELECT min({c}), max({c}) FROM m"
        ).fetchall(), c


def test_refused_evolving_writes_add_no_column(local_cat: mere.Catalog) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("q", pa.int8()), ("s", pa.string())])
    t = new_table(local_cat, schema, merge_operators={"q": "sum"})
    t.upsert(pa.table({"k": [1], "q": pa.array([100], pa.int8()), "s": ["a"]}))
    stale = local_cat.table(t.name)
    t.rename_column("s", "label")
    cases: list[tuple[Any, type[Exception]]] = [
        (
            lambda: t.upsert(pa.table({"k": [1], "q": pa.array([100], pa.int8()), "n": [1]}), evolve=True),
            errors.SumOverflow,
        ),
        (lambda: t.upsert(pa.table({"k": [2], "Label": ["x"]}), evolve=True), errors.SchemaMismatch),
        (lambda: t.upsert(pa.table({"k": [2], "z": pa.nulls(1)}), evolve=True), errors.UnsupportedType),
        (lambda: t.upsert(pa.table({"k": [2], "q": ["x"], "n": [1]}), evolve=True), errors.SchemaMismatch),
        (lambda: stale.upsert(pa.table({"k": [2], "s": ["x"], "n": [1]}), evolve=True), errors.SchemaChanged),
        (
            lambda: t.upsert(pa.table({"k": pa.array([None], pa.int64()), "n": [1]}), evolve=True),
            errors.NullKey,
        ),
    ]
    for call, kind in cases:
        before = (t.version, t.schema, t.to_arrow())
        with pytest.raises(kind):
            call()
        assert (t.version, t.schema, t.to_arrow()) == before
    t.upsert(pa.table({"k": [2], "n": [1.5]}), evolve=True)
    assert t.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "q": 100, "label": "a", "n": None},
        {"k": 2, "q": None, "label": None, "n": 1.5},
    ]


def test_a_catalog_transaction_that_evolves_and_writes_is_atomic(local_cat: mere.Catalog) -> None:
    t, u = new_table(local_cat), new_table(local_cat)
    t.upsert(pa.table({"k": [1, 2], "v": pa.array([1, 2], pa.int32()), "s": ["a", "b"]}))
    before = (t.version, u.version, t.schema, t.to_arrow().sort_by("k"))
    with pytest.raises(RuntimeError, match="boom"), local_cat.transaction() as tx:
        share = tx.table(t.name)
        with share.evolve() as e:
            e.add_column("m", pa.float32(), default=1.5)
        share.upsert(pa.table({"k": [4], "m": pa.array([2.5], pa.float32())}))
        tx.table(u.name).upsert(pa.table({"k": [1], "v": pa.array([1], pa.int32())}))
        raise RuntimeError("boom")
    t.refresh()
    u.refresh()
    assert (t.version, u.version, t.schema, t.to_arrow().sort_by("k")) == before
    with local_cat.transaction() as tx:
        share = tx.table(t.name)
        with share.evolve() as e:
            e.add_column("m", pa.float32(), default=1.5).widen("m", pa.float64())
        share.upsert(pa.table({"k": [4], "m": [2.5]}))
        other = tx.table(u.name)
        with other.evolve() as e:
            e.rename_column("s", "ss")
        other.upsert(pa.table({"k": [1], "ss": ["x"]}))
    t.refresh()
    u.refresh()
    assert t.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v": 1, "s": "a", "m": 1.5},
        {"k": 2, "v": 2, "s": "b", "m": 1.5},
        {"k": 4, "v": None, "s": None, "m": 2.5},
    ]
    assert u.to_arrow().to_pylist() == [{"k": 1, "v": None, "ss": "x"}]
    assert t.to_arrow(version=before[0]).schema.names == ["k", "v", "s"]


# -- a handle loaded before a column change, reading ------------------------------------------------------


def stale_and_truth(cat: mere.Catalog) -> tuple[mere.Table, mere.Table]:
    """A handle loaded at version 1; then column a is dropped, b renamed to a, v widened and a row with
    a value only the wide type holds written (version 5)."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("a", pa.string()), ("b", pa.string()), ("v", pa.int32())]
    )
    t = new_table(cat, schema, buckets=1)
    t.upsert(pa.table({"k": [1], "a": ["old-a"], "b": ["old-b"], "v": pa.array([1], pa.int32())}))
    stale = cat.table(t.name)
    with t.evolve() as e:
        e.drop_column("a").rename_column("b", "a")
    t.widen("v", pa.int64())
    t.upsert(pa.table({"k": [2], "a": ["new"], "v": [2**40]}))
    return stale, t


def duckdb_view(h: mere.Table) -> list[Any]:
    con = duckdb.connect()
    register(con, "x", h)
    return con.sql("SELECT k, a FROM x ORDER BY k").fetchall()


STALE_READS: dict[str, Any] = {
    "to_arrow": lambda h: h.to_arrow().sort_by("k").to_pylist(),
    "filter_on_a_name_the_change_reused": lambda h: h.scan(filter="a = 'old-a'").to_arrow().to_pylist(),
    "filter_on_the_widened_column": lambda h: h.scan(filter="v > 1").to_arrow().to_pylist(),
    "max_of_the_widened_column": lambda h: h.scan().max("v"),
    "change_feed": lambda h: h.changes(0).read_all().drop_columns(["_commit_time"]).to_pylist(),
    "duckdb_view": lambda h: duckdb_view(h),
}


@pytest.mark.parametrize("read", sorted(STALE_READS))
def test_a_stale_handle_reads_the_newest_version_with_its_columns_or_refuses(
    local_cat: mere.Catalog, read: str
) -> None:
    stale, t = stale_and_truth(local_cat)
    want = STALE_READS[read](local_cat.table(t.name))
    try:
        got = STALE_READS[read](stale)
    except errors.MereError:
        return  # a typed refusal is fine
    assert got == want


def test_a_stale_handle_time_travels_to_the_newest_version_with_its_own_columns(
    local_cat: mere.Catalog,
) -> None:
    stale, t = stale_and_truth(local_cat)
    newest = local_cat.table(t.name)
    want = newest.to_arrow(version=newest.version).sort_by("k").to_pylist()
    assert want == [{"k": 1, "a": "old-b", "v": 1}, {"k": 2, "a": "new", "v": 2**40}]
    assert stale.to_arrow(version=1).to_pylist() == [{"k": 1, "a": "old-a", "b": "old-b", "v": 1}]  # held
    assert stale.to_arrow(version=newest.version).sort_by("k").to_pylist() == want


def test_stale_handle_writes_are_refused_as_schema_changed(local_cat: mere.Catalog) -> None:
    """What held: every write that reads rows, from a handle loaded before the change, is refused typed."""
    writes: list[Any] = [
        lambda h: h.delete("v > 0"),
        lambda h: h.delete("a = 'old-a'"),
        lambda h: h.update(set={"b": "'x'"}, where="k = 1"),
        lambda h: h.merge(pa.table({"k": [1], "b": ["m"]})).when_matched_update(set={"b": "s.b"}).execute(),
        lambda h: h.merge(pa.table({"k": [3], "a": ["m"]})).when_not_matched_insert_all().execute(),
        lambda h: h.delete(pa.table({"k": [1]})),
        lambda h: h.rollback(1),
        lambda h: h.truncate(),
        lambda h: h.overwrite(pa.table({"k": [9], "a": ["z"], "b": ["y"], "v": pa.array([1], pa.int32())})),
    ]
    for write in writes:
        stale, t = stale_and_truth(local_cat)
        before = (t.version, t.to_arrow().sort_by("k"))
        with pytest.raises(errors.SchemaChanged):
            write(stale)
        fresh = local_cat.table(t.name)
        assert (fresh.version, fresh.to_arrow().sort_by("k")) == before


def test_stale_handle_compaction_is_refused_as_schema_changed(local_cat: mere.Catalog) -> None:
    stale, t = stale_and_truth(local_cat)
    before = (t.version, t.to_arrow().sort_by("k"))
    try:
        with pytest.raises(errors.SchemaChanged):
            stale.compact(min_files=1)
    finally:
        fresh = local_cat.table(t.name)
        assert (fresh.version, fresh.to_arrow().sort_by("k")) == before


# -- a transaction's row-reading changes after its column change -----------------------------------------


def three_rows(cat: mere.Catalog) -> mere.Table:
    t = new_table(cat)
    t.upsert(pa.table({"k": [1, 2, 3], "v": pa.array([1, 2, 3], pa.int32()), "s": ["a", "b", "c"]}))
    return t


@pytest.mark.parametrize("catalog_tx", [False, True])
def test_an_update_after_adding_a_column_in_the_same_transaction_keeps_the_default(
    local_cat: mere.Catalog, catalog_tx: bool
) -> None:
    t = three_rows(local_cat)
    if catalog_tx:
        with local_cat.transaction() as ctx:
            share = ctx.table(t.name)
            with share.evolve() as e:
                e.add_column("n", pa.int64(), default=5)
            share.update(set={"v": "v + 1"}, where="k = 1")
    else:
        with t.transaction() as tx:
            with tx.evolve() as e:
                e.add_column("n", pa.int64(), default=5)
            tx.update(set={"v": "v + 1"}, where="k = 1")
    t.refresh()
    assert t.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v": 2, "s": "a", "n": 5},
        {"k": 2, "v": 2, "s": "b", "n": 5},
        {"k": 3, "v": 3, "s": "c", "n": 5},
    ]


def _delete_new_name(tx: Any) -> None:
    tx.delete("label = 'a'")


def _update_new_name(tx: Any) -> None:
    tx.update(set={"label": "upper(label)"}, where="k = 1")


def _update_literal(tx: Any) -> None:
    tx.update(set={"label": "'A'"}, where="k = 1")


def _merge_new_name(tx: Any) -> None:
    tx.merge(pa.table({"k": [1], "label": ["A"]})).when_matched_update(set={"label": "s.label"}).execute()


def _merge_by_name(tx: Any) -> None:
    tx.merge(pa.table({"k": [1], "label": ["A"]})).when_matched_update_all().execute()


AFTER_RENAME: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "delete": (_delete_new_name, [{"k": 2, "v": 2, "label": "b"}, {"k": 3, "v": 3, "label": "c"}]),
    "update": (
        _update_new_name,
        [{"k": 1, "v": 1, "label": "A"}, {"k": 2, "v": 2, "label": "b"}, {"k": 3, "v": 3, "label": "c"}],
    ),
    "update_literal": (
        _update_literal,
        [{"k": 1, "v": 1, "label": "A"}, {"k": 2, "v": 2, "label": "b"}, {"k": 3, "v": 3, "label": "c"}],
    ),
    "merge": (
        _merge_new_name,
        [{"k": 1, "v": 1, "label": "A"}, {"k": 2, "v": 2, "label": "b"}, {"k": 3, "v": 3, "label": "c"}],
    ),
    "merge_update_all": (
        _merge_by_name,
        [{"k": 1, "v": 1, "label": "A"}, {"k": 2, "v": 2, "label": "b"}, {"k": 3, "v": 3, "label": "c"}],
    ),
}


@pytest.mark.parametrize("catalog_tx", [False, True])
@pytest.mark.parametrize("op", sorted(AFTER_RENAME))
def test_row_reading_changes_after_a_rename_in_the_same_transaction(
    local_cat: mere.Catalog, op: str, catalog_tx: bool
) -> None:
    t = three_rows(local_cat)
    change, want = AFTER_RENAME[op]
    if catalog_tx:
        with local_cat.transaction() as ctx:
            share = ctx.table(t.name)
            with share.evolve() as e:
                e.rename_column("s", "label")
            change(share)
    else:
        with t.transaction() as tx:
            with tx.evolve() as e:
                e.rename_column("s", "label")
            change(tx)
    t.refresh()
    assert t.to_arrow().sort_by("k").to_pylist() == want


EVOLVE_THEN_UPDATE: dict[str, tuple[Any, dict[str, str], list[dict[str, Any]]]] = {
    "widen": (
        lambda e: e.widen("v", pa.int64()),
        {"v": "v + 2147483647"},
        [{"k": 1, "v": 2**31, "s": "a"}, {"k": 2, "v": 2, "s": "b"}, {"k": 3, "v": 3, "s": "c"}],
    ),
    "drop": (
        lambda e: e.drop_column("s"),
        {"v": "v * 10"},
        [{"k": 1, "v": 10}, {"k": 2, "v": 2}, {"k": 3, "v": 3}],
    ),
}


@pytest.mark.parametrize("change", sorted(EVOLVE_THEN_UPDATE))
def test_an_update_after_widening_or_dropping_as_two_commits(local_cat: mere.Catalog, change: str) -> None:
    evolve, assignment, want = EVOLVE_THEN_UPDATE[change]
    t = three_rows(local_cat)
    with t.evolve() as e:
        evolve(e)
    t.update(set=assignment, where="k = 1")
    assert t.to_arrow().sort_by("k").to_pylist() == want


@pytest.mark.parametrize("change", sorted(EVOLVE_THEN_UPDATE))
def test_an_update_after_widening_or_dropping_in_the_same_transaction(
    local_cat: mere.Catalog, change: str
) -> None:
    evolve, assignment, want = EVOLVE_THEN_UPDATE[change]
    t = three_rows(local_cat)
    with t.transaction() as tx:
        with tx.evolve() as e:
            evolve(e)
        tx.update(set=assignment, where="k = 1")
    t.refresh()
    assert t.to_arrow().sort_by("k").to_pylist() == want


def _merge_insert(tx: Any) -> None:
    source = pa.table({"k": [9], "v": pa.array([9], pa.int32())})
    tx.merge(source).when_not_matched_insert_all().execute()


def _merge_set_added(tx: Any) -> None:
    source = pa.table({"k": [1], "v": pa.array([9], pa.int32())})
    tx.merge(source).when_matched_update(set={"n": "t.n + 1"}).execute()


def _upsert_new_key(tx: Any) -> None:
    tx.upsert(pa.table({"k": [9], "v": pa.array([9], pa.int32())}))


AFTER_ADD: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "upsert_new_key": (_upsert_new_key, [{"k": 9, "v": 9, "s": None, "n": None}]),
    "merge_insert": (_merge_insert, [{"k": 9, "v": 9, "s": None, "n": None}]),
    "merge_set_added": (_merge_set_added, [{"k": 1, "v": 1, "s": "a", "n": 6}]),
}


@pytest.mark.parametrize("op", sorted(AFTER_ADD))
def test_changes_after_adding_a_column_as_two_commits(local_cat: mere.Catalog, op: str) -> None:
    change, want = AFTER_ADD[op]
    t = three_rows(local_cat)
    t.add_column("n", pa.int64(), default=5)
    change(t)
    key = want[0]["k"]
    assert t.to_arrow(filter=f"k = {key}").to_pylist() == want


@pytest.mark.parametrize("op", ["merge_insert", "merge_set_added"])
def test_a_merge_after_adding_a_column_in_the_same_transaction(local_cat: mere.Catalog, op: str) -> None:
    change, want = AFTER_ADD[op]
    t = three_rows(local_cat)
    with t.transaction() as tx:
        with tx.evolve() as e:
            e.add_column("n", pa.int64(), default=5)
        change(tx)
    t.refresh()
    key = want[0]["k"]
    assert t.to_arrow(filter=f"k = {key}").to_pylist() == want


def test_an_upsert_after_adding_a_column_in_the_same_transaction(local_cat: mere.Catalog) -> None:
    change, want = AFTER_ADD["upsert_new_key"]
    t = three_rows(local_cat)
    with t.transaction() as tx:
        with tx.evolve() as e:
            e.add_column("n", pa.int64(), default=5)
        change(tx)
        tx.upsert(pa.table({"k": [1], "v": pa.array([7], pa.int32())}))  # partial: n keeps its default
    t.refresh()
    assert t.to_arrow(filter="k = 9").to_pylist() == want
    assert t.to_arrow(filter="k = 1").to_pylist() == [{"k": 1, "v": 7, "s": "a", "n": 5}]


def test_cdc_batches_that_evolve_replay_as_no_change_and_refuse_narrowing(local_cat: mere.Catalog) -> None:
    """What held: sync_batch widens and adds columns in its catalog transaction; a replayed batch (same
    key) changes nothing; a type change that is not a widening is refused and commits nothing."""
    narrow = {"id": "integer", "a": "smallint"}
    wide = {"id": "integer", "a": "integer", "b": "text"}

    def batch(*lines: str) -> pa.Table:
        return events_from_json(list(lines), "wal2json")

    first = batch(wal2json_line("public", "t", "I", None, {"id": 1, "a": 5}, 100, narrow, ["id"]))
    second = batch(
        wal2json_line("public", "t", "I", None, {"id": 2, "a": 70000, "b": "x"}, 200, wide, ["id"]),
        wal2json_line("public", "t", "U", {"id": 1, "a": 5}, {"id": 1, "a": 6, "b": "y"}, 150, wide, ["id"]),
        wal2json_line(
            "public", "t", "U", {"id": 1, "a": 5}, {"id": 1, "a": 4, "b": "late"}, 120, wide, ["id"]
        ),
    )
    opts = SyncOptions("s")
    sync_batch(local_cat, first, opts, "batch-1")
    assert sync_batch(local_cat, second, opts, "batch-2").evolved == ["s.t"]
    t = local_cat.table("s.t")
    want = [{"id": 1, "a": 6, "b": "y"}, {"id": 2, "a": 70000, "b": "x"}]
    assert t.schema.field("a").type == pa.int32()
    assert t.to_arrow().drop_columns(["_cdc_lsn"]).sort_by("id").to_pylist() == want
    version = t.version
    for events, key in ((second, "batch-2"), (first, "batch-1")):
        assert sync_batch(local_cat, events, opts, key).already_committed
    bad = batch(
        wal2json_line(
            "public",
            "t",
            "I",
            None,
            {"id": 3, "a": 1.5},
            300,
            {"id": "integer", "a": "double precision"},
            ["id"],
        )
    )
    with pytest.raises(errors.InvalidInput, match="not a widening"):
        sync_batch(local_cat, bad, opts, "batch-3")
    t = local_cat.table("s.t")
    assert t.version == version
    assert t.to_arrow().drop_columns(["_cdc_lsn"]).sort_by("id").to_pylist() == want
