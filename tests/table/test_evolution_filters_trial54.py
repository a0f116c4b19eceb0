"""Schema evolution meets merge-on-read filters, counts and extremes (adversarial trial 54).

A Hypothesis state machine drives newest-wins primary-key tables (every column ``last``, so non-key
filters take the two-pass selective route) through column changes (add with non-NULL defaults, rename,
rename onto a dropped column's name, widen int32 -> int64, float32 -> float64, string -> large_string, drop)
mixed with whole and partial upserts, deletes by key and by a non-key filter, compaction and, for a table
with ``sequence_by``, events that arrive out of order. Layouts: unpartitioned, partitioned with
table-wide keys (keys move between partitions), partitioned with per-partition keys, and ``sequence_by``.
After every step reads must equal a plain-dict model: the whole table, projections, non-key filters
(evaluated by DuckDB over the model's rows), ``count()`` with and without a filter, ``min()``/``max()``
(metadata or data route), time travel to any older version with its own columns, and DuckDB and Polars
readers over the evolved table. Refused column changes raise a ``MereError`` and change nothing.

Bugs found (strict xfails at first, fixed since): ``||`` / ``concat`` fail on a column widened to large_string; on table-wide
keys with ``sequence_by``, a blind delete of keys with sequences but no partition values writes no marker
for a key that lives nowhere, so a late event with a lower sequence brings the key back."""

from __future__ import annotations

import copy
import itertools
import os
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import mere
from mere import errors
from mere.integrations.duckdb import register
from mere.integrations.polars import scan_table

_names = itertools.count()

LADDERS: dict[str, list[pa.DataType]] = {
    "int": [pa.int32(), pa.int64()],
    "float": [pa.float32(), pa.float64()],
    "str": [pa.string(), pa.large_string()],
}
SMALL = st.one_of(st.none(), st.integers(-4, 4))


class Col:
    def __init__(self, name: str, kind: str, width: int = 0) -> None:
        self.name, self.kind, self.width = name, kind, width

    @property
    def type(self) -> pa.DataType:
        return LADDERS[self.kind][self.width]

    def value(self, v: int | None) -> Any:
        if v is None:
            return None
        if self.kind == "int":
            return v if self.width == 0 or v % 2 else v * 2**33  # wide values only after widening
        if self.kind == "float":
            return v / 2
        return f"s{v}"

    def literal(self, v: int) -> str:
        if self.kind == "int":
            return str(v)
        if self.kind == "float":
            return str(v / 2)
        return f"'s{v}'"


def run_machine(cat: mere.Catalog, layout: str) -> None:
    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.seq = layout in ("sequence", "table_sequence")
            fields: list[Any] = [pa.field("k", pa.int64(), nullable=False), ("p", pa.string())]
            self.cols: dict[int, Col] = {3: Col("a", "int"), 4: Col("b", "float"), 5: Col("s", "str")}
            if self.seq:
                self.cols[6] = Col("q", "int")  # the sequence column
            fields += [(c.name, c.type) for c in self.cols.values()]
            kwargs: dict[str, Any] = {"buckets": 2, "properties": {"compaction.auto": "off"}}
            if layout in ("table", "partition", "table_sequence"):
                kwargs.update(partition_by="p", key_scope="partition" if layout == "partition" else "table")
            if self.seq:
                kwargs.update(sequence_by="q")
            self.t = cat.create_table(f"ev54.m{next(_names)}", pa.schema(fields), primary_key="k", **kwargs)
            self.next_id = 7
            self.dropped: list[str] = []
            # identity -> (sequence, row or None); a row maps "p" and field ids to values
            self.rows: dict[tuple[Any, ...], tuple[int, dict[Any, Any] | None]] = {}
            self.views: dict[int, tuple[list[tuple[str, pa.DataType]], list[dict[str, Any]]]] = {}
            self._record()

        # -- the model ----------------------------------------------------------------------------------

        def ident(self, k: int, p: str) -> tuple[Any, ...]:
            return (p, k) if layout == "partition" else (k,)

        def live(self) -> dict[tuple[Any, ...], dict[Any, Any]]:
            return {i: r for i, (_, r) in self.rows.items() if r is not None}

        def _arrow_schema(self) -> pa.Schema:
            return pa.schema(
                [
                    ("k", pa.int64()),
                    ("p", pa.string()),
                    *((self.cols[i].name, self.cols[i].type) for i in sorted(self.cols)),
                ]
            )

        def _view(self) -> tuple[list[tuple[str, pa.DataType]], list[dict[str, Any]]]:
            ids = sorted(self.cols)
            rows = [
                {"k": i[-1], "p": r["p"], **{self.cols[f].name: r[f] for f in ids}}
                for i, r in self.live().items()
            ]
            rows.sort(key=lambda r: (r["k"], r["p"]))
            return [(self.cols[f].name, self.cols[f].type) for f in ids], rows

        def _record(self) -> None:
            self.views[self.t.version] = copy.deepcopy(self._view())

        def _model_table(self) -> pa.Table:
            return pa.Table.from_pylist(self._view()[1], schema=self._arrow_schema())

        def _sorted(self, table: pa.Table) -> list[dict[str, Any]]:
            return sorted(table.to_pylist(), key=lambda r: (r["k"], r["p"]))

        def _value_ids(self) -> list[int]:
            return sorted(f for f in self.cols if not (self.seq and f == 6))

        def _part(self, k: int, data: st.DataObject, moving: bool) -> str:
            current = [i for i in self.live() if i[-1] == k]
            if layout == "none":
                return "x"
            if layout != "partition" and current and not moving:
                return self.live()[current[0]]["p"]
            return data.draw(st.sampled_from(["pa", "pb"]))

        def _unchanged(self, call: Any) -> None:
            before = (self.t.version, self.t.schema, self._sorted(self.t.to_arrow()))
            with pytest.raises(errors.MereError):
                call()
            self.t.refresh()
            assert (self.t.version, self.t.schema, self._sorted(self.t.to_arrow())) == before

        # -- writes -------------------------------------------------------------------------------------

        @rule(data=st.data(), keys=st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True))
        def upsert(self, data: st.DataObject, keys: list[int]) -> None:
            partial = not self.seq and data.draw(st.booleans())
            ids = self._value_ids()
            if partial:
                ids = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids))) if ids else []
            parts = [self._part(k, data, moving=not partial) for k in keys]
            batch: dict[str, Any] = {"k": pa.array(keys, pa.int64()), "p": pa.array(parts, pa.string())}
            given: list[dict[int, Any]] = [{} for _ in keys]
            for f in ids:
                col = self.cols[f]
                vals = [col.value(data.draw(SMALL)) for _ in keys]
                batch[col.name] = pa.array(vals, col.type)
                for g, v in zip(given, vals):
                    g[f] = v
            seqs = [0] * len(keys)
            if self.seq:
                seqs = [data.draw(st.integers(0, 12)) for _ in keys]
                col = self.cols[6]
                batch[col.name] = pa.array(seqs, col.type)
                for g, s in zip(given, seqs):
                    g[6] = s
            self.t.upsert(pa.table(batch))
            for k, p, g, s in zip(keys, parts, given, seqs):
                ident = self.ident(k, p)
                stored_seq, row = self.rows.get(ident, (None, None))
                if self.seq and stored_seq is not None and s < stored_seq:
                    continue
                if row is None or not partial:
                    row = {f: None for f in self.cols}
                row = dict(row, p=p)
                row.update(g)
                self.rows[ident] = (s, row)
            self._record()

        @rule(data=st.data(), keys=st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True))
        def delete_keys(self, data: st.DataObject, keys: list[int]) -> None:
            if layout == "partition":
                parts = [data.draw(st.sampled_from(["pa", "pb"])) for _ in keys]
                self.t.delete(pa.table({"k": pa.array(keys, pa.int64()), "p": parts}))
                for k, p in zip(keys, parts):
                    self.rows.pop((p, k), None)
            elif self.seq:
                seqs = [data.draw(st.integers(0, 12)) for _ in keys]
                batch = {
                    "k": pa.array(keys, pa.int64()),
                    self.cols[6].name: pa.array(seqs, self.cols[6].type),
                }
                if layout == "table_sequence" and data.draw(st.booleans()):  # with or without partitions
                    batch["p"] = pa.array([self._part(k, data, moving=False) for k in keys], pa.string())
                self.t.delete(pa.table(batch))
                for k, s in zip(keys, seqs):
                    stored_seq, _ = self.rows.get((k,), (None, None))
                    if stored_seq is None or s >= stored_seq:
                        self.rows[(k,)] = (s, None)
            else:
                self.t.delete(f"k IN ({', '.join(map(str, keys))})")
                for k in keys:
                    self.rows.pop((k,), None)
            self._record()

        @rule(data=st.data())
        def delete_where(self, data: st.DataObject) -> None:
            pred = self._predicate(data)
            hit = self._matching(pred)
            self.t.delete(pred)
            for ident in hit:
                s, _ = self.rows[ident]
                self.rows[ident] = (s + 1, None)  # a marker just above the version it deleted
            self._record()

        @rule(data=st.data())
        def update(self, data: st.DataObject) -> None:
            """UPDATE of a value column (renamed, added, widened ones included) where a non-key filter."""
            pred = self._predicate(data)
            hit = self._matching(pred)
            f = data.draw(st.sampled_from([None, *self._value_ids()]))
            if f is None:
                if layout not in ("table", "table_sequence"):
                    return
                part = data.draw(st.sampled_from(["pa", "pb"]))
                self.t.update({"p": f"'{part}'"}, where=pred)  # table-wide keys move partition
                for ident in hit:
                    self.rows[ident][1]["p"] = part  # type: ignore[index]
                self._record()
                return
            col = self.cols[f]
            form = data.draw(
                st.sampled_from(["literal", "null", "plus"] if col.kind == "int" else ["literal", "null"])
            )
            v = data.draw(st.integers(-4, 4))
            expr = {"literal": col.literal(v), "null": "NULL", "plus": f"{col.name} + 1"}[form]
            self.t.update({col.name: expr}, where=pred)
            for ident in hit:
                row = self.rows[ident][1]
                assert row is not None
                if form == "literal":
                    row[f] = {"int": v, "float": v / 2, "str": f"s{v}"}[col.kind]
                elif form == "null":
                    row[f] = None
                elif row[f] is not None:
                    row[f] += 1
            self._record()

        @rule()
        def compact(self) -> None:
            self.t.compact(min_files=1)
            self._record()

        # -- column changes -----------------------------------------------------------------------------

        @rule(data=st.data())
        def add_column(self, data: st.DataObject) -> None:
            kind = data.draw(st.sampled_from(sorted(LADDERS)))
            name = data.draw(st.sampled_from([f"c{self.next_id}", *self.dropped]))
            col = Col(name, kind)
            default = col.value(data.draw(SMALL))
            self.t.add_column(name, col.type, default=default)
            if name in self.dropped:
                self.dropped.remove(name)
            self.cols[self.next_id] = col
            for _, row in self.rows.values():
                if row is not None:
                    row[self.next_id] = default
            self.next_id += 1
            self._record()

        @rule(data=st.data())
        def rename_column(self, data: st.DataObject) -> None:
            f = data.draw(st.sampled_from(sorted(self.cols)))
            new = data.draw(st.sampled_from([f"r{self.next_id}{len(self.dropped)}", *self.dropped]))
            old = self.cols[f].name
            self.t.rename_column(old, new)
            if new in self.dropped:
                self.dropped.remove(new)
            self.dropped.append(old)  # the old name is free again
            self.cols[f].name = new
            self._record()

        @rule(data=st.data())
        def widen(self, data: st.DataObject) -> None:
            narrow = [f for f in sorted(self.cols) if self.cols[f].width == 0]
            if not narrow:
                return
            f = data.draw(st.sampled_from(narrow))
            col = self.cols[f]
            assert self.t.widen(col.name, LADDERS[col.kind][1]) is not None
            col.width = 1
            self._record()

        @rule(data=st.data())
        def drop_column(self, data: st.DataObject) -> None:
            ids = self._value_ids()
            if len(ids) < 2:
                return
            f = data.draw(st.sampled_from(ids))
            self.t.drop_column(self.cols[f].name)
            self.dropped.append(self.cols.pop(f).name)
            for _, row in self.rows.values():
                if row is not None:
                    row.pop(f, None)
            self._record()

        @rule(data=st.data())
        def evolve_block(self, data: st.DataObject) -> None:
            """Several changes as one version: rename a column, add one under its old name, widen."""
            f = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols[f]
            old, new = col.name, f"r{self.next_id}x"
            with self.t.evolve() as e:
                e.rename_column(old, new)
                e.add_column(old, pa.int32(), default=7)
                if col.width == 0:
                    e.widen(new, LADDERS[col.kind][1])
            col.name, col.width = new, 1
            if old in self.dropped:
                self.dropped.remove(old)
            self.cols[self.next_id] = Col(old, "int")
            for _, row in self.rows.values():
                if row is not None:
                    row[self.next_id] = 7
            self.next_id += 1
            self._record()

        @rule(data=st.data())
        def refused_change(self, data: st.DataObject) -> None:
            names = [c.name for c in self.cols.values()]
            first = self.cols[min(self.cols)]
            calls: list[Any] = [
                lambda: self.t.rename_column("k", "kk"),
                lambda: self.t.widen("k", pa.int32()),
                lambda: self.t.drop_column("k"),
                lambda: self.t.add_column("k", pa.int64()),
                lambda: self.t.add_column(first.name, pa.int64()),
                lambda: self.t.add_column("", pa.int64()),
                lambda: self.t.add_column("_mere_op", pa.int64()),
                lambda: self.t.add_column("bad\x00name", pa.int64()),
                lambda: self.t.add_column("n1", pa.int32(), default="x"),
                lambda: self.t.add_column("n2", pa.int32(), default=2**40),
                lambda: self.t.rename_column(first.name, ""),
                lambda: self.t.rename_column("no_such", "n3"),
                lambda: self.t.widen(first.name, pa.bool_()),
                lambda: self.t.evolve().add_column("dup", pa.int32()).add_column("dup", pa.int64()).commit(),
                lambda: (
                    self.t.evolve().add_column("dup2", pa.int32()).rename_column(first.name, "dup2").commit()
                ),
            ]

            def block() -> None:  # a valid step, then a refused one: the block commits nothing
                with self.t.evolve() as e:
                    e.add_column("ok54", pa.int32(), default=1)
                    e.widen(first.name, pa.int8())

            calls.append(block)
            if len(names) >= 2:
                calls.append(lambda: self.t.rename_column(names[0], names[1]))
                calls.append(lambda: self.t.rename_column(names[-1], "K"))
            calls.extend(
                lambda c=c: self.t.widen(c.name, LADDERS[c.kind][0])
                for c in self.cols.values()
                if c.width == 1
            )
            if layout in ("table", "partition", "table_sequence"):
                calls.append(lambda: self.t.rename_column("p", "pp"))
                calls.append(lambda: self.t.drop_column("p"))
            if self.seq:
                calls.append(lambda: self.t.drop_column(self.cols[6].name))
            call = data.draw(st.sampled_from(calls))
            self._unchanged(call)

        # -- reads --------------------------------------------------------------------------------------

        def _predicate(self, data: st.DataObject) -> str:
            def atom() -> str:
                f = data.draw(st.sampled_from(sorted(self.cols)))
                col = self.cols[f]
                v = data.draw(st.integers(-4, 4))
                form = data.draw(st.sampled_from(["=", "<", ">=", "<>", "null", "notnull", "in"]))
                if form == "null":
                    return f"{col.name} IS NULL"
                if form == "notnull":
                    return f"{col.name} IS NOT NULL"
                if form == "in":
                    return f"{col.name} IN ({col.literal(v)}, {col.literal(-v)})"
                return f"{col.name} {form} {col.literal(v)}"

            pred = atom()
            for _ in range(data.draw(st.integers(0, 2))):
                glue = data.draw(st.sampled_from(["AND", "OR", "AND NOT"]))
                pred = f"({pred}) {glue} ({atom()})"
            return pred

        def _matching(self, pred: str) -> list[tuple[Any, ...]]:
            con = duckdb.connect()
            con.register("model", self._model_table())
            found = con.sql(f"SELECT k, p FROM model WHERE {pred}").fetchall()
            return sorted(self.ident(k, p) for k, p in found)

        @rule(data=st.data())
        def filtered_reads(self, data: st.DataObject) -> None:
            pred = self._predicate(data)
            want = self._matching(pred)
            scan = self.t.scan(filter=pred)
            assert str(scan.explain()).startswith("scan at version"), pred
            got = sorted(self.ident(r["k"], r["p"]) for r in scan.to_arrow().to_pylist())
            assert got == want, (pred, scan.explain())
            assert scan.count() == len(want), pred
            rows = {self.ident(r["k"], r["p"]): r for r in self._view()[1]}
            full = self._sorted(scan.to_arrow())
            assert full == sorted((rows[i] for i in want), key=lambda r: (r["k"], r["p"])), pred
            con = duckdb.connect()
            register(con, "mt", self.t)
            found = con.sql(f"SELECT k, p FROM mt WHERE {pred}").fetchall()
            assert sorted(self.ident(k, p) for k, p in found) == want, pred

        @rule(data=st.data())
        def extremes(self, data: st.DataObject) -> None:
            f = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols[f]
            pred = self._predicate(data) if data.draw(st.booleans()) else None
            keep = set(self._matching(pred)) if pred else None
            values = [
                r[f] for i, r in self.live().items() if r[f] is not None and (keep is None or i in keep)
            ]
            scan = self.t.scan(filter=pred) if pred else self.t.scan()
            assert scan.min(col.name) == (min(values) if values else None), (col.name, pred, scan.explain())
            assert scan.max(col.name) == (max(values) if values else None), (col.name, pred, scan.explain())

        @rule(data=st.data())
        def projection(self, data: st.DataObject) -> None:
            names = [c.name for c in self.cols.values()]
            cols = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
            got = self.t.to_arrow(columns=["k", "p", *cols])
            _, rows = self._view()
            assert got.column_names == ["k", "p", *cols]
            assert self._sorted(got) == [{"k": r["k"], "p": r["p"], **{c: r[c] for c in cols}} for r in rows]

        @rule(data=st.data())
        def time_travel(self, data: st.DataObject) -> None:
            v = data.draw(st.sampled_from(sorted(self.views)))
            schema, rows = self.views[v]
            got = self.t.to_arrow(version=v)
            assert [(f.name, f.type) for f in got.schema][2:] == schema, v
            assert self._sorted(got) == rows, v
            assert self.t.scan(version=v).count() == len(rows), v
            # a filter, count and extremes at that version speak its own column names
            names = [n for n, _ in schema]
            if names:
                name = data.draw(st.sampled_from(names))
                pred = data.draw(st.sampled_from([f"{name} IS NULL", f"{name} IS NOT NULL"]))
                want = [r for r in rows if (r[name] is None) == (pred.endswith("S NULL"))]
                assert self._sorted(self.t.to_arrow(version=v, filter=pred)) == want, (v, pred)
                assert self.t.scan(version=v, filter=pred).count() == len(want), (v, pred)
                values = [r[name] for r in rows if r[name] is not None]
                scan = self.t.scan(version=v)
                assert scan.min(name) == (min(values) if values else None), (v, name)
                assert scan.max(name) == (max(values) if values else None), (v, name)
                lazy = scan_table(self.t, version=v).filter(pl.col(name).is_not_null()).collect()
                assert len(lazy) == len(values), (v, name)

        @rule(data=st.data())
        def engines(self, data: st.DataObject) -> None:
            _, rows = self._view()
            polars = scan_table(self.t).collect()
            assert self._sorted(polars.to_arrow()) == rows
            f = data.draw(st.sampled_from(sorted(self.cols)))
            col = self.cols[f]
            v = col.value(data.draw(st.integers(-4, 4)))
            lazy = scan_table(self.t).filter(pl.col(col.name) == v).select("k", "p").collect()
            want = sorted((r["k"], r["p"]) for r in rows if r[col.name] == v)
            assert sorted(lazy.iter_rows()) == want, (col.name, v)
            con = duckdb.connect()
            register(con, "mt", self.t)
            got = con.sql("SELECT * FROM mt").arrow()
            got = got if isinstance(got, pa.Table) else got.read_all()
            assert self._sorted(got) == rows

        @invariant()
        def matches_the_model(self) -> None:
            schema, rows = self._view()
            got = self.t.to_arrow()
            assert [(f.name, f.type) for f in got.schema][2:] == schema
            assert self._sorted(got) == rows
            assert self.t.scan().count() == len(rows)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=int(os.environ.get("EV54", "10")),
            stateful_step_count=14,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.mark.parametrize("layout", ["none", "table", "partition", "sequence", "table_sequence"])
def test_evolution_filters_follow_the_model(local_cat: mere.Catalog, layout: str) -> None:
    run_machine(local_cat, layout)


def test_concatenation_still_filters_and_updates_after_widening_to_large_string(
    local_cat: mere.Catalog,
) -> None:
    """docs/sql.md lists ``||`` and ``concat``; docs/concepts.md lists string -> large_string as a widening
    whose stored values are cast when read. A filter or SET that worked before the widening must keep
    working (DuckDB, the oracle, evaluates both on the widened rows)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("s", pa.string()), ("u", pa.string())])
    t = local_cat.create_table("ev54.concat", schema, primary_key="k")
    t.upsert(pa.table({"k": [1, 2], "s": ["x", None], "u": ["y", "z"]}))
    assert t.to_arrow(filter="s || 'q' = 'xq'").column("k").to_pylist() == [1]
    t.widen("s", pa.large_string())
    con = duckdb.connect()
    con.register("m", t.to_arrow())
    for pred in ["s || 'q' = 'xq'", "concat(s, 'q') = 'xq'", "'q' || s = 'qx'", "s || u = 'xy'"]:
        want = sorted(r[0] for r in con.sql(f"SELECT k FROM m WHERE {pred}").fetchall())
        assert want == [1]
        assert t.to_arrow(filter=pred).column("k").to_pylist() == want, pred
    t.update({"s": "s || u"}, where="k = 1")
    assert t.to_arrow(filter="k = 1").column("s").to_pylist() == ["xy"]


def test_a_blind_sequenced_delete_without_partition_values_holds_off_late_events(
    local_cat: mere.Catalog,
) -> None:
    """docs/concepts.md: keys given with their sequence columns are deleted blind at those sequences,
    t.delete(keys) works "with or without the partition columns", and the highest sequence wins
    "whatever the order of the commits". The same delete given the partition column does hold it off."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("p", pa.string()), ("q", pa.int32()), ("v", pa.string())]
    )
    late = pa.table({"k": [0], "p": ["pa"], "q": pa.array([0], pa.int32()), "v": ["late"]})
    oracle = local_cat.create_table(
        "ev54.with_p", schema, primary_key="k", partition_by="p", key_scope="table", sequence_by="q"
    )
    oracle.delete(pa.table({"k": pa.array([0], pa.int64()), "p": ["pa"], "q": pa.array([4], pa.int32())}))
    assert oracle.upsert(late).stale_rows == 1
    assert oracle.to_arrow().num_rows == 0
    t = local_cat.create_table(
        "ev54.without_p", schema, primary_key="k", partition_by="p", key_scope="table", sequence_by="q"
    )
    t.delete(pa.table({"k": pa.array([0], pa.int64()), "q": pa.array([4], pa.int32())}))
    assert t.upsert(late).stale_rows == 1
    assert t.to_arrow().num_rows == 0
