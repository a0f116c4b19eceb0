"""Writes that read rows (UPDATE, MERGE, deletes by predicate or by looked-up keys) see every concurrent
commit that could hold a row they read, also in a split that was empty or absent when they read.

Found by the soak (``bench/bench_soak.py``): a MERGE read an empty table, a transaction inserted one of its
source keys meanwhile, and the MERGE landed as an insert on top of it, so the key's ``sum`` column took the
source's value instead of keeping the stored one. Commits apply in version order: each test checks the
result against a dict model that applies the concurrent write first, then the write that read.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import CommitConflict
from mere.hashing import bucket_ids

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), ("p", pa.string()), ("v", pa.int64()), ("total", pa.int64())]
)
BUCKETS = 4
_names = itertools.count()

Row = tuple[Any, ...]  # (p, v, total[, f, seq])

# Key types of the property: a drawn integer names a key, mapped to a value of the type (and back).
KEY_TYPES: dict[str, tuple[pa.DataType, Callable[[int], Any]]] = {
    "int64": (pa.int64(), lambda i: i),
    "string": (pa.string(), lambda i: f"key-{i:02d}"),
    "decimal": (pa.decimal128(12, 2), lambda i: Decimal(i) / 4 - 1),
    "date": (pa.date32(), lambda i: dt.date(1969, 12, 28) + dt.timedelta(days=i)),
}
NAN = "nan"  # NaN in a model row: NaN equals nothing, its stand-in equals itself


def _table(cat: mere.Catalog, partitioned: bool) -> mere.Table:
    name = f"s.t{next(_names)}"
    if partitioned:  # table-wide keys: an upsert moves a key to its new partition
        return cat.create_table(name, SCHEMA, primary_key="k", partition_by="p", buckets=BUCKETS)
    return cat.create_table(name, SCHEMA, primary_key="k", buckets=BUCKETS, merge_operators={"total": "sum"})


def _rows(rows: list[tuple[int, str, int, int]]) -> pa.Table:
    by_key = {r[0]: r for r in rows}  # one row per key in a batch
    cols = list(zip(*by_key.values())) if by_key else [[], [], [], []]
    return pa.table({n: list(c) for n, c in zip(SCHEMA.names, cols)}, schema=SCHEMA)


def _state(t: mere.Table) -> dict[int, Row]:
    return {r["k"]: (r["p"], r["v"], r["total"]) for r in t.to_arrow().to_pylist()}


@dataclass(frozen=True)
class Shape:
    """A table of the property: its key type, and what decides between a key's versions."""

    key_type: str
    kind: str  # "summed" (``total`` sums), "partitioned" (table-wide keys), "sequenced" (``sequence_by``)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(
            [
                pa.field("k", KEY_TYPES[self.key_type][0], nullable=False),
                ("p", pa.string()),
                ("v", pa.int64()),
                ("total", pa.int64()),
                ("f", pa.float64()),
                ("seq", pa.int64()),
            ]
        )

    def create(self, cat: mere.Catalog) -> mere.Table:
        name = f"s.t{next(_names)}"
        kw: dict[str, Any] = {"primary_key": "k", "buckets": BUCKETS}
        if self.kind == "partitioned":
            kw["partition_by"] = "p"
        elif self.kind == "summed":
            kw["merge_operators"] = {"total": "sum"}
        else:
            kw["sequence_by"] = "seq"
        return cat.create_table(name, self.schema, **kw)

    def key(self, i: int) -> Any:
        return KEY_TYPES[self.key_type][1](i)

    def rows(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        by_key = {r[0]: r for r in rows}  # one row per key in a batch
        cols = [list(c) for c in zip(*by_key.values())] if by_key else [[] for _ in self.schema]
        cols[0] = [self.key(i) for i in cols[0]]
        return pa.table(dict(zip(self.schema.names, cols)), schema=self.schema)

    def state(self, t: mere.Table) -> dict[int, Row]:
        back = {self.key(i): i for i in range(10)}
        return {
            back[r["k"]]: (r["p"], r["v"], r["total"], NAN if r["f"] != r["f"] else r["f"], r["seq"])
            for r in t.to_arrow().to_pylist()
        }

    def upsert(self, model: dict[int, Row], rows: list[tuple[Any, ...]]) -> None:
        for k, p, v, total, f, seq in {r[0]: r for r in rows}.values():
            f = NAN if f != f else f
            if k in model and self.kind == "summed":
                total += model[k][2]
            if k in model and self.kind == "sequenced" and seq < model[k][4]:
                continue  # stale: an older event than the stored one is ignored
            model[k] = (p, v, total, f, seq)


def _apply(model: dict[int, Row], op: tuple[Any, ...]) -> None:
    kind, arg = op
    if kind == "update":
        for k, (p, v, *rest) in list(model.items()):
            if v >= arg:
                model[k] = (p, v + 100, *rest)
    elif kind == "delete_where":
        for k in [k for k, row in model.items() if row[1] >= arg]:
            del model[k]
    elif kind == "delete_keys":
        for k in arg:
            model.pop(k, None)
    else:  # merge: matched rows take the source's v, others are inserted whole
        for k, p, v, total, f, seq in {r[0]: r for r in arg}.values():
            if k in model:
                model[k] = (model[k][0], v, *model[k][2:])
            else:
                model[k] = (p, v, total, NAN if f != f else f, seq)


def _run(shape: Shape, tx: Any, op: tuple[Any, ...]) -> None:
    kind, arg = op
    if kind == "update":
        tx.update({"v": "v + 100"}, f"v >= {arg}")
    elif kind == "delete_where":
        tx.delete(f"v >= {arg}")
    else:
        tx.delete(pa.table({"k": pa.array([shape.key(i) for i in arg], shape.schema.field("k").type)}))


_row = st.tuples(
    st.integers(0, 9),
    st.sampled_from("ab"),
    st.integers(0, 9),
    st.integers(1, 5),
    st.sampled_from([0.5, -0.0, float("nan"), float("inf")]),
    st.integers(0, 20),  # shuffled sequences: a concurrent upsert may be older than what it meets
)
_ops = st.one_of(
    st.tuples(st.just("update"), st.integers(0, 9)),
    st.tuples(st.just("delete_where"), st.integers(0, 9)),
    st.tuples(st.just("delete_keys"), st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("merge"), st.lists(_row, min_size=1, max_size=4)),
)


def _changed_buckets(t: mere.Table, before: int, after: int) -> set[int]:
    """Buckets whose files differ between two versions (a write or a compaction there)."""
    old, new = t.files(before), t.files(after)
    a = set(zip(old.column("path").to_pylist(), old.column("bucket").to_pylist()))
    b = set(zip(new.column("path").to_pylist(), new.column("bucket").to_pylist()))
    return {bucket for _, bucket in a ^ b}


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=st.builds(
        Shape, st.sampled_from(sorted(KEY_TYPES)), st.sampled_from(["summed", "partitioned", "sequenced"])
    ),
    initial=st.lists(_row, max_size=5),
    concurrent=st.lists(_row, min_size=1, max_size=3),
    compact=st.booleans(),
    op=_ops,
)
def test_a_write_that_read_rows_lands_as_if_after_every_commit_before_it(
    tmp_path: Path,
    shape: Shape,
    initial: list[tuple[Any, ...]],
    concurrent: list[tuple[Any, ...]],
    compact: bool,
    op: tuple[Any, ...],
) -> None:
    """Between the write's read and its commit another writer upserts (on a ``sequence_by`` table maybe
    older rows than the stored ones: ignored) and, maybe, compacts."""
    cat = mere.connect(str(tmp_path / "w"))
    t = shape.create(cat)
    other = mere.connect(str(tmp_path / "w")).table(t.name)
    model: dict[int, Row] = {}
    if initial:
        t.upsert(shape.rows(initial))
        shape.upsert(model, initial)
    base = t.version

    def meanwhile() -> int:
        other.upsert(shape.rows(concurrent))
        if compact:
            other.compact()
        return other.refresh().version

    if op[0] == "merge":
        staged = (
            t.merge(shape.rows(op[1])).when_matched_update(set={"v": "s.v"}).when_not_matched_insert_all()
        ).stage(base)
        mid = meanwhile()
        shape.upsert(model, concurrent)
        try:
            t.commit_merge([staged])
        except CommitConflict:
            source_buckets = set(bucket_ids(shape.rows(op[1]).column("k"), BUCKETS).tolist())
            assert source_buckets & _changed_buckets(t, base, mid), (
                "a MERGE conflicted with a write to buckets it did not read"
            )
        else:
            _apply(model, op)
    else:
        with t.transaction() as tx:
            _run(shape, tx, op)
            mid = meanwhile()  # lands between the transaction's read and its commit
        initial_model = dict(model)
        shape.upsert(model, concurrent)
        if t.refresh().version == mid:
            # The write made no version: it had nothing to change, either at the version it read (it ran
            # before the concurrent commit) or, evaluated again after losing the race, after it.
            before, after = dict(initial_model), dict(model)
            _apply(before, op)
            _apply(after, op)
            assert before == initial_model or after == model
        else:
            _apply(model, op)
    assert shape.state(t.refresh()) == model


def test_a_merge_that_read_an_empty_table_sees_a_concurrent_insert(catalog_url: str, tmp_path: Path) -> None:
    """The soak's case: MERGE (update v, insert otherwise) on a ``sum`` table, staged on an empty table,
    while another writer inserts one of its keys. The MERGE must not land as an insert over that row."""
    cat = mere.connect(str(tmp_path / "w"), catalog=catalog_url)
    t = _table(cat, partitioned=False)
    other = mere.connect(str(tmp_path / "w"), catalog=catalog_url).table(t.name)

    def merge(on: mere.Table) -> Any:
        return (
            on.merge(_rows([(1, "a", 7, 5)]))
            .when_matched_update(set={"v": "s.v"})
            .when_not_matched_insert_all()
        )

    staged = merge(t).stage(t.version)
    other.upsert(_rows([(1, "a", 0, 3)]))
    with pytest.raises(CommitConflict):
        t.commit_merge([staged])
    assert _state(t.refresh()) == {1: ("a", 0, 3)}  # nothing of the MERGE landed

    # Through execute(), the race is lost once and the MERGE is evaluated again at the new version.
    t2 = _table(cat, partitioned=False)
    rival = mere.connect(str(tmp_path / "w"), catalog=catalog_url).table(t2.name)
    from mere.table.ops import merge_into

    original = merge_into.MergePlan.stage
    raced: list[Any] = []

    def racing(self: Any, base: int) -> Any:
        staged = original(self, base)
        if not raced:
            raced.append(rival.upsert(_rows([(1, "a", 0, 3)])))
        return staged

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(merge_into.MergePlan, "stage", racing)
        metrics = merge(t2).execute()
    assert raced and metrics.updated == 1 and metrics.inserted == 0
    assert _state(t2.refresh()) == {1: ("a", 7, 3)}  # v from the source, total kept


def test_a_write_to_a_partition_the_filter_rules_out_needs_no_retry(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "w"))
    t = cat.create_table("s.t", SCHEMA, primary_key=["k", "p"], partition_by="p", buckets=BUCKETS)
    other = mere.connect(str(tmp_path / "w")).table("s.t")
    t.upsert(_rows([(1, "a", 1, 1), (2, "b", 2, 2)]))
    base = t.version
    with t.transaction() as tx:
        tx.update({"v": "v + 100"}, "p = 'a'")
        other.upsert(_rows([(3, "b", 3, 3)]))  # an existing partition the filter excludes
    assert t.history()[-1].summary["read_version"] == base  # landed on its first attempt
    base = t.version
    with t.transaction() as tx:
        tx.update({"v": "v + 100"}, "p = 'a'")
        other.upsert(_rows([(4, "c", 4, 4)]))  # a new partition: its values were never checked
    assert t.history()[-1].summary["read_version"] == base + 1  # evaluated again after the race
    assert _state(t.refresh()) == {
        1: ("a", 201, 1),
        2: ("b", 2, 2),
        3: ("b", 3, 3),
        4: ("c", 4, 4),
    }


def _same_bucket_pair() -> tuple[int, int]:
    ids = list(range(40))
    buckets = bucket_ids(pa.array(ids, pa.int64()), BUCKETS).tolist()
    return next((a, b) for a in ids for b in ids if a != b and buckets[a] == buckets[b])


def test_a_merge_that_lost_a_race_to_other_keys_keeps_what_it_wrote(tmp_path: Path) -> None:
    """A concurrent write to the MERGE's buckets but not its keys: the MERGE lands without being
    evaluated again (its outcome cannot differ); one to its keys: evaluated again, with the right result."""
    from mere.table.ops import merge_into

    mine, theirs = _same_bucket_pair()
    cat = mere.connect(str(tmp_path / "w"))
    for rival_key, evaluations, expected in (
        (theirs, 1, {mine: ("a", 7, 1), theirs: ("a", 0, 1 + 3)}),
        (mine, 2, {mine: ("a", 7, 1 + 3), theirs: ("a", 0, 1)}),
    ):
        t = _table(cat, partitioned=False)
        t.upsert(_rows([(mine, "a", 0, 1), (theirs, "a", 0, 1)]))
        rival = mere.connect(str(tmp_path / "w")).table(t.name)
        calls: list[int] = []

        def racing(
            self: Any,
            base: int,
            rival: mere.Table = rival,
            key: int = rival_key,
            calls: list[int] = calls,
            original: Any = merge_into.MergePlan.stage,
        ) -> Any:
            staged = original(self, base)
            if not calls:
                rival.upsert(_rows([(key, "a", 0, 3)]))
            calls.append(base)
            return staged

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(merge_into.MergePlan, "stage", racing)
            metrics = (
                t.merge(_rows([(mine, "a", 7, 5)]))
                .when_matched_update(set={"v": "s.v"})
                .when_not_matched_insert_all()
                .execute()
            )
        assert len(calls) == evaluations
        assert metrics.updated == 1 and metrics.inserted == 0
        assert _state(t.refresh()) == expected


@pytest.mark.parametrize(
    ("rival_row", "evaluations"),
    [
        ((None, "a", 3, 1), 1),  # another key in a bucket the update read, not matching: kept
        ((None, "a", 50, 1), 2),  # another key that now matches: evaluated again, and updated
    ],
)
def test_an_update_that_lost_a_race_is_evaluated_again_only_when_it_must(
    tmp_path: Path, rival_row: tuple[Any, ...], evaluations: int
) -> None:
    from mere.table.ops import update as update_ops

    mine, theirs = _same_bucket_pair()
    cat = mere.connect(str(tmp_path / "w"))
    t = cat.create_table("s.t", SCHEMA, primary_key="k", buckets=BUCKETS)
    t.upsert(_rows([(mine, "a", 20, 1)]))
    rival = mere.connect(str(tmp_path / "w")).table("s.t")
    original = update_ops.UpdateWhere.change
    calls: list[int] = []

    def racing(self: Any, ctx: Any, base: int, checks: Any) -> Any:
        change = original(self, ctx, base, checks)
        if not calls:
            rival.upsert(_rows([(theirs, *rival_row[1:])]))
        calls.append(base)
        return change

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(update_ops.UpdateWhere, "change", racing)
        t.update({"v": "v + 100"}, "v >= 10")
    assert len(calls) == evaluations
    v = rival_row[2]
    assert _state(t.refresh()) == {mine: ("a", 120, 1), theirs: ("a", v + 100 if v >= 10 else v, 1)}
