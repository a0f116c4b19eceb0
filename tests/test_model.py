"""Stateful property test: random writes against mere and a plain dict model must always agree.

Three tables see every step: a primary-key table with default ``last`` columns and tiny row groups
and read windows (so pruning and windowed merging run), a primary-key table with merge operators,
and a table without key. After each step a full scan, a filtered scan and a time-travel read of an
earlier version must equal the model.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import mere

KEYS = st.integers(min_value=0, max_value=40)
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


class LakeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mere-model-")
        self.cat = mere.connect(self.dir)
        self.t_last = self.cat.create_table(
            "m.last",
            SCHEMA,
            primary_key=["id"],
            partition_by=["p"],
            buckets=3,
            cdc_column="op",
            properties={"write.row-group-rows": "3", "read.window-bytes": "400"},
        )
        self.t_ops = self.cat.create_table(
            "m.ops",
            SCHEMA,
            primary_key=["id"],
            partition_by=["p"],
            buckets=2,
            cdc_column="op",
            merge_operators=OPERATORS,
        )
        self.t_plain = self.cat.create_table("m.plain", SCHEMA, partition_by=["p"])
        self.m_last = PkModel({})
        self.m_ops = PkModel(OPERATORS)
        self.m_plain: list[dict[str, Any]] = []
        self.snapshots: dict[str, list[tuple[int, Any]]] = {"last": [], "ops": [], "plain": []}

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        self._snapshot()

    def _snapshot(self) -> None:
        for name, t, m in (("last", self.t_last, self.m_last), ("ops", self.t_ops, self.m_ops)):
            self.snapshots[name].append((t.version, copy.deepcopy(m.table())))
        self.snapshots["plain"].append((self.t_plain.version, copy.deepcopy(self.m_plain)))

    def _pk_tables(self) -> list[tuple[mere.Table, PkModel]]:
        return [(self.t_last, self.m_last), (self.t_ops, self.m_ops)]

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

    @rule(min_files=st.integers(min_value=1, max_value=4), part=st.one_of(st.none(), PARTS))
    def compact(self, min_files: int, part: str | None) -> None:
        for t, _ in self._pk_tables():
            before = t.version
            result = t.compact(min_files=min_files, partition=None if part is None else {"p": part})
            assert (result is None) == (t.version == before)
        self._snapshot()

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

    @precondition(lambda self: len(self.snapshots["last"]) > 1)
    @invariant()
    def time_travel_matches(self) -> None:
        for name, t in (("last", self.t_last), ("ops", self.t_ops)):
            snaps = self.snapshots[name]
            version, rows = snaps[len(snaps) // 2]
            assert rows_of(t.scan(version=version).to_arrow()) == rows, (t.name, version)
        version, plain = self.snapshots["plain"][len(self.snapshots["plain"]) // 2]
        got = sorted(self.t_plain.scan(version=version).to_arrow().to_pylist(), key=_plain_key)
        assert got == sorted(plain, key=_plain_key)


def _plain_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((r[c] is None, r[c]) for c in SCHEMA.names)


TestLake = LakeMachine.TestCase
