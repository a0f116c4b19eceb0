"""Stateful property test: random writes against mere and a plain dict model must always agree.

Three tables see every step: a primary-key table with default ``last`` columns and tiny row groups
and read windows (so pruning and windowed merging run), a primary-key table with merge operators,
and a table without key. After each step a full scan, a filtered scan and a time-travel read of an
earlier version must equal the model.

The model keeps every version of every table (``versions[name][v]``: its rows, properties and columns),
so steps that go back in time can be checked against it: rollbacks (a new commit whose rows, properties
and columns are an older version's), expiry (older versions stop being readable), automatic compaction
(commits that change no row), and the change feed between any two versions, which must be exactly the
difference of the two model versions.

Columns evolve too: added (with and without a default, nested and decimal ones included), widened,
renamed, dropped (and added back under the same name: the old values never come back), several at once
in an ``evolve()`` block, or added by an evolving upsert. Model rows are keyed by a column's *identity*
(its name when it was created, and for added columns a sequence number), which never changes, as mere
keys file columns by field id; a version's ``columns`` say what each identity is called and holds then.
Calls that mere must refuse (key and partition columns, ``sum`` renames, narrowing, taken or reserved
names, bad defaults and types) are drawn among the good ones: the model predicts the typed error, and the
table must not change. The change feed reads both of its versions in the table's current columns: a
column added since reads its default there; one the version had dropped (a rollback brought it back) is
a value the model cannot tell.

It runs on the SQLite catalog inside the warehouse, and with fewer examples on PostgreSQL.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from decimal import Decimal
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
from mere.errors import InvalidInput, NoSuchVersion, SchemaChanged, SchemaMismatch, UnsupportedType
from mere.spec import default_properties
from mere.table import compaction
from mere.table.evolve import can_widen
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
OPERATORS = {"s": "last_non_null", "q": "sum", "c": "concat:|"}


def row_strategy(p: Any = PARTS) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"id": KEYS, "p": p, "v": INTS, "s": STRS, "q": INTS, "c": STRS})


# -- columns -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A type a column may be added with: the values rows draw for it, a default for ``add_column`` and a
    default that is no value of the type (``InvalidInput``)."""

    type: pa.DataType
    values: st.SearchStrategy[Any]
    default: Any
    bad_default: Any


DEC = pa.decimal128(5, 2)
KINDS = {
    "int32": Kind(pa.int32(), INTS, 7, "seven"),
    "float32": Kind(pa.float32(), st.sampled_from([None, 0.5, -1.25, 3.0]), 1.5, "x"),
    "decimal": Kind(
        DEC,
        st.sampled_from([None, Decimal("1.25"), Decimal("-0.50"), Decimal("999.99")]),
        Decimal("0.10"),
        5.125,
    ),
    "string": Kind(pa.string(), STRS, "new", 5),
    "list": Kind(
        pa.list_(pa.string()), st.none() | st.lists(st.sampled_from(["x", "y"]), max_size=2), ["d"], 5
    ),
    "struct": Kind(
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        st.none() | st.fixed_dictionaries({"a": INTS, "b": STRS}),
        {"a": 1, "b": "z"},
        5,
    ),
}
UNSTORABLE = "null"  # add_column with pa.null(): UnsupportedType
# The widenings mere allows among the types below (evolve.can_widen); any other change is SchemaMismatch.
WIDENINGS = {
    (pa.int32(), pa.int64()),
    (pa.float32(), pa.float64()),
    (DEC, pa.decimal128(12, 2)),
    (pa.string(), pa.large_string()),
}
WIDEN_TO = [
    pa.int64(),
    pa.float64(),
    pa.decimal128(12, 2),
    pa.large_string(),
    pa.int16(),
    pa.float16(),
    pa.string(),
    pa.decimal128(12, 3),
    pa.large_binary(),
]
# Names for new columns: free ones, the base columns' (taken, or free again once dropped), reserved ones.
NAMES = ["n1", "n2", "n3", "s", "q", "c"]
ANY_NAME = st.sampled_from([*NAMES, "op", "_mere_op", "", "id"])
FIXED = ("id", "p", "v")  # never changed here: writes and filters need them (id, p: refused targets)
MISSING = "nope"


@dataclass(frozen=True)
class Col:
    """A model column: ``ident`` keys its values in model rows for good; ``name`` and ``type`` are what it
    is called and holds now; ``kind`` draws its values (a ``KINDS`` key, or the base column it is)."""

    ident: str
    name: str
    type: pa.DataType
    kind: str
    op: str = "last"
    default: Any = None


Columns = tuple[Col, ...]


def base_columns(operators: dict[str, str]) -> Columns:
    return tuple(
        Col(f.name, f.name, f.type, f.name, operators.get(f.name, "last").split(":")[0]) for f in SCHEMA
    )


def schema_of(cols: Columns) -> list[tuple[str, pa.DataType]]:
    return [(c.name, c.type) for c in cols]


def named(row: dict[str, Any], cols: Columns) -> dict[str, Any]:
    """A model row (by identity) as a table row (by name)."""
    return {c.name: row[c.ident] for c in cols}


class Refused(Exception):
    """The model's word that mere must refuse a schema change with ``error``."""

    def __init__(self, error: type[Exception]) -> None:
        super().__init__(error.__name__)
        self.error = error


# A schema change: ("add", name, kind, "none" | "good" | "bad" default), ("widen", column, type),
# ("rename", column, new name) or ("drop", column).
Step = tuple[Any, ...]


def evolved(
    cols: Columns, step: Step, fixed: tuple[str, ...], reserved: tuple[str, ...], ident: str
) -> Columns:
    """``cols`` after one schema change, the way docs/concepts.md says; ``Refused`` when mere must refuse it
    (checked in evolve.py's order). ``fixed``: the table's key and partition columns; ``ident``: the identity
    an added column gets."""
    names = [c.name for c in cols]
    verb, *args = step

    def new_name(name: str) -> str:
        if not name:
            raise Refused(InvalidInput)
        if name in names or name in reserved:
            raise Refused(SchemaMismatch)
        return name

    if verb == "add":
        name, kind, default = args
        new_name(name)
        if kind == UNSTORABLE:
            raise Refused(UnsupportedType)
        if default == "bad":
            raise Refused(InvalidInput)
        value = KINDS[kind].default if default == "good" else None
        return (*cols, Col(ident, name, KINDS[kind].type, kind, "last", value))
    target = args[0]
    if target not in names:
        raise Refused(SchemaMismatch)
    if target in fixed:
        raise Refused(InvalidInput)
    i = names.index(target)
    col = cols[i]
    if verb == "widen":
        if col.type == args[1]:
            return cols
        if (col.type, args[1]) not in WIDENINGS:
            raise Refused(SchemaMismatch)
        col = replace(col, type=args[1])
    elif verb == "rename":
        new_name(args[1])
        if col.op == "sum":
            raise Refused(InvalidInput)
        col = replace(col, name=args[1])
    else:
        assert verb == "drop", step
        return cols[:i] + cols[i + 1 :]
    return (*cols[:i], col, *cols[i + 1 :])


def call(target: Any, step: Step) -> Any:
    """Make the schema change ``step`` on a table or in an ``evolve()`` block."""
    verb, *args = step
    if verb == "add":
        name, kind, default = args
        if kind == UNSTORABLE:
            return target.add_column(name, pa.null())
        value = {"none": None, "good": KINDS[kind].default, "bad": KINDS[kind].bad_default}[default]
        return target.add_column(name, KINDS[kind].type, value)
    return getattr(target, {"widen": "widen", "rename": "rename_column", "drop": "drop_column"}[verb])(*args)


# -- rows --------------------------------------------------------------------------------------------


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
    """dict[(p, id)] -> row (column identity -> value) of a table with columns ``cols``, applying versions
    the way the spec says."""

    def __init__(self, cols: Columns) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.cols = cols

    def upsert(self, row: dict[str, Any]) -> None:
        """A row that lacks a column keeps the key's value (null for a new key), whatever the column's age."""
        key = (row["p"], row["id"])
        old = self.rows.get(key)
        new = {}
        for c in self.cols:
            before = None if old is None else old[c.ident]
            new[c.ident] = before if c.ident not in row else merge_value(c.op, before, row[c.ident])
        self.rows[key] = new

    def delete(self, key: tuple[str, int]) -> None:
        self.rows.pop(key, None)

    def table(self) -> list[dict[str, Any]]:
        """The rows by column name, sorted by key."""
        return sorted((named(r, self.cols) for r in self.rows.values()), key=key_of)


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=key_of)


Key = tuple[str, int]
Rows = dict[Key, dict[str, Any]]
META_COLUMNS = ("_change", "_version", "_commit_time")
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "insert", "update_before", "update_after", "delete"
# The ``last`` table compacts only when asked (``auto_compact``); the ``ops`` one after every commit
# that leaves a split with 4 files. The compaction_policy step switches either way.
LAST_PROPERTIES = {
    "write.row-group-rows": "3",
    "read.window-bytes": "400",
    "compaction.min-files": "3",
    "changes.log": "on",  # its feeds read before-images from the writes' logs
}
OPS_PROPERTIES = {"compaction.auto": "inline", "compaction.min-files": "4"}
NOW = dt.timedelta(0)  # expire everything but the current version
_RUNS = itertools.count()


@dataclass(frozen=True)
class ModelVersion:
    """What the model says one version of a table holds: rows (by key for keyed tables, a list for the
    table without key; each row by column identity), properties and columns."""

    rows: Any
    properties: dict[str, str]
    columns: Columns


class _Unknown:
    """A value the model cannot tell (it equals anything)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()


def key_of(row: dict[str, Any]) -> Key:
    return (row["p"], row["id"])


def check_feed_rows(before: Rows, after: Rows, got: list[tuple[Key, str, dict[str, Any]]]) -> None:
    """The net change feed between two model versions is exactly their difference, key by key: an insert
    (the row at the end), a delete (the row at the start), an update pair (both) or nothing when the rows
    are equal. Model values may be UNKNOWN: rows equal but for those may come out as an update pair, whose
    rows then differ."""
    feed: dict[Key, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for key, change, row in got:
        feed[key].append((change, row))
    for key in before.keys() | after.keys() | feed.keys():
        old, new, rows = before.get(key), after.get(key), sorted(feed.get(key, []), key=lambda e: e[0])
        if old is None and new is None:
            want = []
        elif new is None:
            want = [(DELETE, old)]
        elif old is None:
            want = [(INSERT, new)]
        else:
            want = [(UPDATE_AFTER, new), (UPDATE_BEFORE, old)]
            if old == new:  # equal where the model can tell
                unknown = any(v is UNKNOWN for v in [*old.values(), *new.values()])
                if not rows or not unknown:
                    want = []
                else:
                    assert rows[0][1] != rows[1][1], (key, rows)  # the feed saw a change where we cannot
        assert rows == want, (key, rows, want)


def files_per_split(t: mere.Table) -> Counter[tuple[str, int]]:
    files = t.files()
    return Counter(zip(files.column("partition").to_pylist(), files.column("bucket").to_pylist()))


def policy_due(t: mere.Table, min_files: int, percent: int | None = None) -> list[tuple[str, int]]:
    """The splits the compaction policy folds, by its documented rules, from the catalog's files: those
    with ``min_files`` runs (files of one sequence) or more, or (``percent`` set) whose runs besides the
    largest hold ``percent`` of its bytes; once any is due (and ``min_files`` > 2), also those a commit or
    two from due: ``min_files - max(1, min_files // 4)`` runs or more (at least 2)."""
    runs: dict[tuple[str, int], Counter[int]] = {}
    for f in t.files_at(t.version):
        runs.setdefault((f.partition, f.bucket), Counter())[f.seq] += f.size_bytes

    def due_at(trigger: int) -> set[tuple[str, int]]:
        return {
            split
            for split, sizes in runs.items()
            if len(sizes) >= trigger
            or (
                percent is not None
                and len(sizes) > 1
                and (sum(sizes.values()) - max(sizes.values())) * 100 >= percent * max(sizes.values())
            )
        }

    due = due_at(min_files)
    if due and min_files > 2:
        due |= due_at(max(2, min_files - max(1, min_files // 4)))
    return sorted(due)


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
            key_scope="partition",  # the model's rows are (partition, key)
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
            key_scope="partition",
        )
        self.t_plain = self.cat.create_table(f"{ns}.plain", SCHEMA, partition_by=["p"])
        self.m_last = PkModel(base_columns({}))
        self.m_ops = PkModel(base_columns(OPERATORS))
        self.plain_columns: list[dict[str, Any]] = []  # by column identity
        # Per table: the model's current properties and columns, every version it committed, the oldest
        # readable one.
        self.props: dict[str, dict[str, str]] = {  # what the tables were given, over mere's defaults
            "last": default_properties(True) | LAST_PROPERTIES,
            "ops": default_properties(True) | OPS_PROPERTIES,
            "plain": default_properties(False),
        }
        self.cols: dict[str, Columns] = {
            "last": self.m_last.cols,
            "ops": self.m_ops.cols,
            "plain": base_columns({}),
        }
        self.versions: dict[str, dict[int, ModelVersion]] = {"last": {}, "ops": {}, "plain": {}}
        self.oldest: dict[str, int] = {"last": 0, "ops": 0, "plain": 0}
        self.added = itertools.count(1)  # numbers the identities of added columns

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
        rows = copy.deepcopy(self.plain_columns if name == "plain" else self._model(name).rows)
        return ModelVersion(rows, dict(self.props[name]), self.cols[name])

    def _model(self, name: str) -> PkModel:
        return {"last": self.m_last, "ops": self.m_ops}[name]

    def _model_rows(self, name: str) -> list[dict[str, Any]]:
        return self.plain_columns if name == "plain" else list(self._model(name).rows.values())

    def _restore(self, name: str, version: ModelVersion) -> None:
        if name == "plain":
            self.plain_columns = copy.deepcopy(version.rows)
        else:
            self._model(name).rows = copy.deepcopy(version.rows)
        self.props[name] = dict(version.properties)
        self._columns_are(name, version.columns)

    @property
    def m_plain(self) -> list[dict[str, Any]]:
        """The plain table's rows by column name."""
        return [named(r, self.cols["plain"]) for r in self.plain_columns]

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

    # -- the model's columns ---------------------------------------------------------------------

    def _set_columns(self, name: str, cols: Columns) -> None:
        """Evolve a table's model: rows gain each added column's default and lose each dropped column
        (renames and widenings change no value)."""
        old = {c.ident for c in self.cols[name]}
        for row in self._model_rows(name):
            for c in cols:
                if c.ident not in old:
                    row[c.ident] = copy.deepcopy(c.default)
            for ident in old - {c.ident for c in cols}:
                del row[ident]
        self._columns_are(name, cols)

    def _columns_are(self, name: str, cols: Columns) -> None:
        self.cols[name] = cols
        if name != "plain":
            self._model(name).cols = cols

    def _added_kinds(self) -> dict[str, str]:
        """Every added column some table has now: identity -> kind."""
        return {c.ident: c.kind for cols in self.cols.values() for c in cols if c.kind in KINDS}

    def _with_added(self, data: st.DataObject, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (of the base columns) with values for every added column."""
        added = self._added_kinds()
        if not added or not rows:
            return rows
        values = st.fixed_dictionaries({ident: KINDS[kind].values for ident, kind in sorted(added.items())})
        extra = data.draw(st.lists(values, min_size=len(rows), max_size=len(rows)), label="added columns")
        return [{**r, **e} for r, e in zip(rows, extra)]

    def _data(self, name: str, rows: list[dict[str, Any]], idents: set[str] | None = None) -> pa.Table:
        """Rows as the table ``name`` takes them now: its columns (those of ``idents``) by their names."""
        cols = [c for c in self.cols[name] if idents is None or c.ident in idents]
        return pa.table({c.name: pa.array([r[c.ident] for r in rows], c.type) for c in cols})

    def _targets(self, key: bool = True) -> st.SearchStrategy[str]:
        """A column to change: one that some table has (but those the other steps need), the partition
        column or (``key``) the primary key (refused), or no column at all."""
        names = sorted({c.name for cols in self.cols.values() for c in cols} - set(FIXED))
        bad = ["p", MISSING, *(["id"] if key else [])]
        return st.sampled_from(names + names + bad if names else bad)

    def _new_names(self) -> st.SearchStrategy[str]:
        """A name for a new column: a free one half the time, else any (taken, reserved, empty)."""
        free = sorted(set(NAMES) - {c.name for cols in self.cols.values() for c in cols})
        return st.one_of(st.sampled_from(free), ANY_NAME) if free else ANY_NAME

    def _draw_step(self, data: st.DataObject, verb: str, key: bool = True) -> Step:
        if verb == "add":
            name = data.draw(self._new_names(), label="name")
            kind = data.draw(st.sampled_from([*KINDS, *KINDS, UNSTORABLE]), label="kind")
            return (
                "add",
                name,
                kind,
                data.draw(st.sampled_from(["none", "good", "good", "bad"]), label="default"),
            )
        target = data.draw(self._targets(key), label=verb)
        if verb == "widen":
            now = {c.name: c.type for c in self.cols["last"]}.get(target)
            wider = [new for old, new in WIDENINGS if old == now]
            to = (
                st.one_of(st.sampled_from(wider), st.sampled_from(WIDEN_TO))
                if wider
                else st.sampled_from(WIDEN_TO)
            )
            return ("widen", target, data.draw(to, label="to"))
        if verb == "rename":
            return ("rename", target, data.draw(self._new_names(), label="new name"))
        return ("drop", target)

    def _evolve(self, steps: list[Step], block: bool = False) -> None:
        """Make schema changes on every table, one by one (or in one ``evolve()`` block), as the model says:
        refused ones raise their typed error and change nothing; the others commit once (nothing for a
        change that changes nothing), and a handle loaded before then can no longer write."""
        ident = f"@{next(self.added)}"
        for name, t in self._tables():
            if name == "plain" and any(s[0] != "add" and s[1] == "id" for s in steps):
                continue  # id is a plain column there (mere would change it), and the writes need it
            cols, fixed = self.cols[name], ("p", "id") if name != "plain" else ("p",)
            reserved = ("_mere_op", "op") if name != "plain" else ("_mere_op",)
            before = (t.version, t.spec.to_json())

            def run(steps: list[Step] = steps, t: mere.Table = t) -> Any:
                if not block:
                    (step,) = steps
                    return call(t, step)
                with t.evolve() as e:
                    for step in steps:
                        call(e, step)
                return None

            try:
                new = cols
                for step in steps:
                    new = evolved(new, step, fixed, reserved, f"{step[1]}{ident}")
            except Refused as refused:
                with pytest.raises(InvalidInput) as raised:
                    run()
                assert type(raised.value) is refused.error, (t.name, steps, raised.value)
                assert (t.version, t.spec.to_json()) == before, t.name
                assert self.cat.table(t.name).spec.to_json() == before[1], t.name
                continue
            stale = self.cat.table(t.name) if name == "last" else None
            result = run()
            if not block and new == cols:
                assert result is None and t.version == before[0], (t.name, steps)
            if name != "plain":  # a schema change touches no key
                assert t.changes(before[0]).read_all().num_rows == 0, (t.name, steps)
            self._set_columns(name, new)
            if stale is not None and new != cols:
                version = t.version
                with pytest.raises(SchemaChanged):
                    stale.upsert(pa.table({"id": [0], "p": ["a"]}))
                assert t.version == version, t.name
        self._snapshot()

    # -- writes ----------------------------------------------------------------------------------

    def _write(
        self,
        rows: list[dict[str, Any]],
        idents: set[str] | None = None,
        cdc: list[str] | None = None,
        evolve: bool = False,
    ) -> None:
        """Upsert ``rows`` (only the columns of ``idents``, when given) into the keyed tables and the model;
        ``cdc``: each row's change (``D`` deletes, ``-U`` is ignored)."""
        if idents is not None:
            rows = [{k: v for k, v in r.items() if k in idents} for r in rows]
        for name, t, m in self._named_pk_tables():
            data = self._data(name, rows, idents)
            t.upsert(
                data if cdc is None else data.append_column("op", pa.array(cdc, pa.string())), evolve=evolve
            )
            for op, r in zip(cdc or ["I"] * len(rows), rows):
                if op == "D":
                    m.delete(key_of(r))
                elif op != "-U":
                    m.upsert(r)

    def _append(
        self, rows: list[dict[str, Any]], idents: set[str] | None = None, evolve: bool = False
    ) -> None:
        """Append ``rows`` (only the columns of ``idents``, the others null) to the plain table and model."""
        self.t_plain.append(self._data("plain", rows, idents), evolve=evolve)
        self.plain_columns.extend(
            {
                c.ident: copy.deepcopy(r[c.ident]) if idents is None or c.ident in idents else None
                for c in self.cols["plain"]
            }
            for r in rows
        )

    @rule(rows=st.lists(row_strategy(), max_size=12), data=st.data())
    def upsert(self, rows: list[dict[str, Any]], data: st.DataObject) -> None:
        rows = self._with_added(data, rows)
        self._write(rows)
        self._append(rows)
        self._snapshot()

    @rule(rows=st.lists(row_strategy(), min_size=1, max_size=8), data=st.data())
    def partial_upsert(self, rows: list[dict[str, Any]], data: st.DataObject) -> None:
        """Rows of some columns: the others keep their values (added columns included)."""
        values = sorted({c.ident for cols in self.cols.values() for c in cols} - {"id", "p"})
        cols = data.draw(st.lists(st.sampled_from(values), unique=True, max_size=3), label="columns")
        befores = {name: t.version for name, t, _ in self._named_pk_tables()}
        self._write(self._with_added(data, rows), {"id", "p", *cols})
        self._snapshot()
        for name, t, _ in self._named_pk_tables():  # keys whose one changed column is any of them
            self._check_feed(name, t, befores[name], t.version)

    @rule(
        changes=st.lists(
            st.tuples(st.sampled_from(["I", "U", "D", "-U"]), row_strategy()), min_size=1, max_size=12
        ),
        data=st.data(),
    )
    def cdc(self, changes: list[tuple[str, dict[str, Any]]], data: st.DataObject) -> None:
        self._write(self._with_added(data, [r for _, r in changes]), cdc=[op for op, _ in changes])
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
        self.plain_columns = [r for r in self.plain_columns if r["id"] not in keys]
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
        self.plain_columns = [r for r in self.plain_columns if not hit(r)]
        self._snapshot()

    @rule(part=st.one_of(st.none(), PARTS), data=st.data())
    def overwrite(self, part: str | None, data: st.DataObject) -> None:
        rows = data.draw(st.lists(row_strategy(PARTS if part is None else st.just(part)), max_size=8))
        rows = self._with_added(data, rows)
        partition = None if part is None else {"p": part}
        for name, t, m in self._named_pk_tables():
            t.overwrite(self._data(name, rows), partition=partition)
            for key in list(m.rows):
                if part is None or key[0] == part:
                    m.delete(key)
            for r in rows:
                m.upsert(r)
        self.t_plain.overwrite(self._data("plain", rows), partition=partition)
        self.plain_columns = [r for r in self.plain_columns if part is not None and r["p"] != part]
        self.plain_columns.extend(
            {c.ident: copy.deepcopy(r[c.ident]) for c in self.cols["plain"]} for r in rows
        )
        self._snapshot()

    # -- schema evolution ------------------------------------------------------------------------

    @rule(data=st.data())
    def add_column(self, data: st.DataObject) -> None:
        """Rows written before read the default (or null); rows written after without it null for a new
        key, the key's value for an existing one. Added columns merge with ``last``."""
        self._evolve([self._draw_step(data, "add")])

    @rule(data=st.data())
    def widen(self, data: st.DataObject) -> None:
        """Stored values read in the wider type; the same type commits nothing."""
        self._evolve([self._draw_step(data, "widen")])

    @rule(data=st.data())
    def rename_column(self, data: st.DataObject) -> None:
        """Same values, same merge operator (``sum`` columns cannot be renamed)."""
        self._evolve([self._draw_step(data, "rename")])

    @rule(data=st.data())
    def drop_column(self, data: st.DataObject) -> None:
        """A column added later under the same name is a new column: the old values never come back."""
        self._evolve([self._draw_step(data, "drop")])

    @rule(data=st.data(), swap=st.booleans())
    def evolve_block(self, data: st.DataObject, swap: bool) -> None:
        """Several changes as one version, each checked against the columns as changed so far; a refused
        one commits none. ``swap``: two columns trade names (through a third name)."""
        verbs = st.sampled_from(["add", "add", "widen", "rename", "drop"])
        steps = [
            self._draw_step(data, data.draw(verbs), key=False) for _ in range(data.draw(st.integers(1, 3)))
        ]
        names = sorted({c.name for c in self.cols["last"]} - set(FIXED))
        if swap and len(names) >= 2:
            a, b = data.draw(
                st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True), label="swap"
            )
            steps += [("rename", a, "tmp"), ("rename", b, a), ("rename", "tmp", b)]
        self._evolve(steps, block=True)

    @rule(data=st.data(), kind=st.sampled_from(list(KINDS)), partial=st.booleans(), fail=st.booleans())
    def evolving_upsert(self, data: st.DataObject, kind: str, partial: bool, fail: bool) -> None:
        """``evolve=True`` adds the input's new column (nullable, ``last``, no default) in the commit of its
        rows; a write that fails (``fail``: a value of the wrong type) adds none."""
        taken = {c.name for cols in self.cols.values() for c in cols}
        number = next(self.added)
        free = [n for n in NAMES if n not in taken] or [f"e{number}"]
        new = data.draw(st.sampled_from(free), label="new column")
        if fail:
            self._failed_evolving_write(new)
            return
        col = Col(f"{new}@{number}", new, KINDS[kind].type, kind)
        rows = self._with_added(
            data, data.draw(st.lists(row_strategy(), min_size=1, max_size=6), label="rows")
        )
        values = data.draw(st.lists(KINDS[kind].values, min_size=len(rows), max_size=len(rows)), label=new)
        rows = [{**r, col.ident: value} for r, value in zip(rows, values)]
        idents = None
        if partial:
            some = sorted({c.ident for c in self.cols["last"]} - {"id", "p"})
            idents = {
                "id",
                "p",
                col.ident,
                *data.draw(st.lists(st.sampled_from(some), unique=True, max_size=2)),
            }
        befores = {name: t.version for name, t in self._tables()}
        for name in self.cols:
            self._set_columns(name, (*self.cols[name], col))
        self._write(rows, idents, evolve=True)
        self._append(rows, idents, evolve=True)
        for _, t in self._tables():
            assert t.spec.operator(new).name == "last", t.name
        self._snapshot()
        for name, t, _ in self._named_pk_tables():
            # The feed of the commit: its before side reads the new column as null (keys whose only
            # change is the new column's value are updates).
            self._check_feed(name, t, befores[name], t.version)

    def _failed_evolving_write(self, new: str) -> None:
        """An evolving write whose rows cannot be stored (a string in ``v``) adds no column either."""
        bad = pa.table({"id": [0], "p": ["a"], "v": ["not a number"], new: [1]})
        for name, t in self._tables():
            before = (t.version, t.spec.to_json())
            with pytest.raises(SchemaMismatch):
                (t.append if name == "plain" else t.upsert)(bad, evolve=True)
            assert (t.version, t.spec.to_json()) == before, t.name

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
        due = mode == "inline" and bool(policy_due(t, min_files))
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
        assert due == policy_due(t, min_files)
        result = t.auto_compact()
        assert (result is None) == (not due) == (t.version == before)
        if result is not None:
            assert result.operation == "compact" and result.version == t.version
            if compaction_folds_to_one_file():
                assert t.files().num_rows < files
                assert t.compaction_due() == []
        with pytest.raises(NoSuchVersion):
            t.auto_compact(t.version + 1)
        assert t.version == before + (result is not None)
        self._snapshot()

    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        """Each table rolls back to a version drawn from -1 to one past the current one: a readable version
        comes back as a new commit (rows, properties and columns); any other raises NoSuchVersion and
        changes nothing."""
        befores = {}
        for name, t in self._tables():
            before = befores[name] = t.version
            target = data.draw(self._versions_from(name, -1, before + 1), label=f"{name} to")
            if not self._readable(name, target):
                state = (t.spec.to_json(), sorted(t.files().column("path").to_pylist()))
                with pytest.raises(NoSuchVersion):
                    t.rollback(target)
                assert (t.version, t.spec.to_json(), sorted(t.files().column("path").to_pylist())) == (
                    before,
                    *state,
                )
                continue
            result = t.rollback(target)
            assert (result.version, result.operation) == (before + 1, "rollback")
            assert result.summary["rollback_to"] == target
            self._restore(name, self.versions[name][target])
            # The handle and a fresh one see the restored properties (they drive automatic compaction) and
            # columns.
            fresh = self.cat.table(t.name)
            assert t.properties == fresh.properties == self.props[name]
            assert schema_of(self.cols[name]) == [(f.name, f.type) for f in fresh.schema], t.name
        self._snapshot()
        for name, t, _ in self._named_pk_tables():
            # The feed across the rollback takes the table from its state before to the restored one.
            self._check_feed(name, t, befores[name], t.version)

    @rule()
    def expire(self) -> None:
        """Give up every version but the current one: reads, rollbacks and change feeds from them fail."""
        for name, t in self._tables():
            t.expire(older_than=NOW, dry_run=False)
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

    def _feed_views(self, name: str, start: int, end: int) -> dict[int, Rows]:
        """The model's rows at each version from ``start`` to ``end`` in the table's current columns, by
        name, as the change feed reads every version: a column the version had holds its value there, one
        added after it reads its default, and one the version had dropped (before a rollback brought it
        back) is UNKNOWN (its files may hold old values, or not, or the default)."""
        cols, versions = self.cols[name], self.versions[name]
        born = {
            c.ident: min(v for v, mv in versions.items() if c.ident in {x.ident for x in mv.columns})
            for c in cols
        }
        views = {}
        for u in range(start, end + 1):
            had = {c.ident for c in versions[u].columns}
            fill = {c.ident: c.default if born[c.ident] > u else UNKNOWN for c in cols if c.ident not in had}
            views[u] = {
                key: {c.name: row[c.ident] if c.ident in had else fill[c.ident] for c in cols}
                for key, row in versions[u].rows.items()
            }
        return views

    def _check_feed(self, name: str, t: mere.Table, start: int, end: int) -> None:
        """``t.changes(start, end)`` speaks the table's current columns for both sides and is exactly the
        difference of the model's two versions read in them, and each row's ``_version`` is a commit of the
        range that is no later than the key's last change there."""
        cols = self.cols[name]
        now = {c.ident: c.type for c in cols}
        narrowed = [
            (u, c.name)
            for u in range(start, end + 1)
            for c in self.versions[name][u].columns
            if c.ident in now
            and c.type != now[c.ident]
            and (
                pa.types.is_integer(now[c.ident])
                or pa.types.is_floating(now[c.ident])
                or pa.types.is_decimal(now[c.ident])
            )
            and not can_widen(c.type, now[c.ident])
        ]
        if narrowed:  # a rollback undid a widening: the current type may not hold the range's values
            with pytest.raises(InvalidInput, match="rollback undid its widening"):
                t.changes(start, end)
            return
        views = self._feed_views(name, start, end)
        feed = t.changes(start, end).read_all()
        identity_first = sorted(cols, key=lambda c: ("p", "id", c.name).index(c.name))  # stable
        assert [(f.name, f.type) for f in feed.schema][: len(cols)] == schema_of(tuple(identity_first))
        assert feed.schema.names[len(cols) :] == list(META_COLUMNS), feed.schema.names
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
            changed = [u for u in range(start + 1, end + 1) if views[u].get(key) != views[u - 1].get(key)]
            assert v >= max(changed, default=0), (t.name, start, end, r, changed)
        assert all(len(vs) == 1 for vs in touched.values()), (t.name, touched)  # before/after: one _version
        check_feed_rows(views[start], views[end], got)

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

    def _rows(self, name: str) -> list[dict[str, Any]]:
        """The model's current rows, by name, sorted."""
        rows = [named(r, self.cols[name]) for r in self._model_rows(name)]
        return sorted(rows, key=_plain_key if name == "plain" else key_of)

    @invariant()
    def full_scan_matches(self) -> None:
        for name, t, _ in self._named_pk_tables():
            got = t.scan().to_arrow()
            assert [(f.name, f.type) for f in got.schema] == schema_of(self.cols[name]), t.name
            assert rows_of(got) == self._rows(name), t.name
        plain = sorted(self.t_plain.scan().to_arrow().to_pylist(), key=_plain_key)
        assert plain == self._rows("plain")

    @invariant()
    def filtered_scans_match(self) -> None:
        for name, t, _ in self._named_pk_tables():
            rows = self._rows(name)
            got = rows_of(t.scan(filter="id >= 10 and id <= 30 and v < 3").to_arrow())
            want = [r for r in rows if 10 <= r["id"] <= 30 and r["v"] is not None and r["v"] < 3]
            assert got == want, t.name
            got = rows_of(t.scan(filter="id in (3, 7, 11) and p = 'a'").to_arrow())
            assert got == [r for r in rows if r["id"] in (3, 7, 11) and r["p"] == "a"], t.name
            # Filters name columns as they are called now, whatever they were called when written.
            cols = {c.ident: c for c in self.cols[name]}
            s, q = cols.get("s"), cols.get("q")
            newest = next((c for c in reversed(self.cols[name]) if c.kind in KINDS), None)  # added last
            if s is not None and q is not None:
                got = rows_of(
                    t.scan(filter=f"{s.name} is null or {q.name} > 0", columns=["p", "id", q.name]).to_arrow()
                )
                want = [
                    {"id": r["id"], "p": r["p"], q.name: r[q.name]}
                    for r in rows
                    if r[s.name] is None or (r[q.name] is not None and r[q.name] > 0)
                ]
                assert got == want, t.name
            if newest is not None:
                got = rows_of(
                    t.scan(filter=f"{newest.name} is null", columns=["p", "id", newest.name]).to_arrow()
                )
                want = [
                    {"id": r["id"], "p": r["p"], newest.name: None} for r in rows if r[newest.name] is None
                ]
                assert got == want, t.name

    @invariant()
    def versions_and_properties_match(self) -> None:
        for name, t in self._tables():
            assert t.version == max(self.versions[name]), t.name
            assert t.properties == self.props[name], t.name
            assert [(f.name, f.type) for f in t.schema] == schema_of(self.cols[name]), t.name
            assert [t.spec.operator(c.name).name for c in self.cols[name]] == [c.op for c in self.cols[name]]
            readable = [s.version for s in t.history() if not s.expired]
            assert readable == list(range(self.oldest[name], t.version + 1)), (t.name, readable)
            if name != "plain" and self.props[name].get("compaction.auto") == "inline":
                # Every commit compacted what it left due (unless compaction writes several files).
                assert t.compaction_due() == [] or not compaction_folds_to_one_file(), t.name

    @precondition(lambda self: len(self.versions["last"]) > 1)
    @invariant()
    def time_travel_matches(self) -> None:
        """An older version reads with its own columns (names, types) and values."""
        for name, t in self._tables():
            readable = range(self.oldest[name], t.version + 1)
            version = readable[len(readable) // 2]
            mv = self.versions[name][version]
            got = t.scan(version=version).to_arrow()
            assert [(f.name, f.type) for f in got.schema] == schema_of(mv.columns), (t.name, version)
            rows = [named(r, mv.columns) for r in (mv.rows if name == "plain" else mv.rows.values())]
            sort = _plain_key if name == "plain" else key_of
            assert sorted(got.to_pylist(), key=sort) == sorted(rows, key=sort), (t.name, version)


def _plain_key(value: Any) -> str:
    """A sort key for rows without key: their values' text, struct fields in name order."""
    if isinstance(value, dict):
        return repr(sorted((k, _plain_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return repr([_plain_key(v) for v in value])
    return repr(value)


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


def test_the_feed_skips_unchanged_keys_of_a_table_with_a_nested_column(tmp_path: Any) -> None:
    """A key written back unchanged is not in the change feed (docs/concepts.md, *Change feed*), nested
    columns or not."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key="id")
    t.upsert(pa.table({"id": [1], "v": [1]}))
    t.add_column("tags", pa.list_(pa.string()))
    start = t.version
    t.upsert(pa.table({"id": [1], "v": [1]}))  # written back unchanged
    assert t.changes(start).read_all().num_rows == 0


def test_the_feed_reads_a_version_in_columns_it_had_dropped(tmp_path: Any) -> None:
    """The feed speaks the current columns for both sides, also for a version that had dropped one of them
    (a rollback brought it back)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("c", pa.string())])
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key="id", buckets=1)
    t.upsert(pa.table({"id": [1], "v": [1], "c": ["x"]}))  # v1: a file with c
    t.drop_column("c")  # v2
    t.upsert(pa.table({"id": [2], "v": [2]}))  # v3: a file without c
    t.rollback(0)  # v4: the empty table, with c
    feed = t.changes(3, 4).read_all()
    assert sorted(feed.column("id").to_pylist()) == [1, 2]
    assert set(feed.column("_change").to_pylist()) == {"delete"}
