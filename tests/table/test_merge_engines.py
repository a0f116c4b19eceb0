"""Merge engines: the order-free operators ``max``, ``min``, ``bool_and``, ``bool_or``, the ``first_row``
engine, and partial-column updates under sequences (``sequence_groups``).

The backbone is a property per engine: any permutation and duplication of a sequenced event list, cut
into random commits with compactions (full and tiered) and time travel in between, gives the table a
plain dict model gives from the set of events (sequence order decides). Then a DuckDB differential of
the order-free operators (GROUP BY aggregates over each key's versions since its last delete, in commit
order), targeted cases of sequence groups (a partial row older than a full row, a delete between them,
replays), ``first_row`` (stale rows, updates, the fast path) and bad input (typed errors, nothing
committed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError, SchemaMismatch, UnsupportedType
from mere.spec import TableSpec


@dataclass(frozen=True)
class Event:
    key: int
    rank: int  # the row sequence (unique; 4 apart, so group sequences rank +- 1 stay unique)
    op: str  # 'u' or 'd'
    values: tuple[tuple[str, Any], ...]  # column -> value (a group left out: its sequence is None)

    def get(self, name: str) -> Any:
        return dict(self.values).get(name)


@dataclass(frozen=True)
class Engine:
    name: str
    schema: pa.Schema
    create: dict[str, Any]
    deletes: bool
    values: Callable[[st.DrawFn, int], dict[str, Any]]
    model: Callable[[list[Event]], dict[str, Any] | None]  # one key's distinct events -> its row


BOOLS = st.sampled_from([None, True, False])
INTS = st.sampled_from([None, -5, 0, 3, 7, 2**40])
STRS = st.sampled_from([None, "", "a", "b", "zz", "ä"])


def _agg(events: list[Event], column: str, how: Callable[[list[Any]], Any]) -> Any:
    values = [e.get(column) for e in events if e.get(column) is not None]
    return how(values) if values else None


def agg_values(draw: st.DrawFn, rank: int) -> dict[str, Any]:
    return {"hi": draw(INTS), "lo": draw(STRS), "every": draw(BOOLS), "some": draw(BOOLS), "v": f"v{rank}"}


def agg_model(events: list[Event]) -> dict[str, Any] | None:
    top = max(events, key=lambda e: e.rank)
    return {
        "hi": _agg(events, "hi", max),
        "lo": _agg(events, "lo", min),
        "every": _agg(events, "every", all),
        "some": _agg(events, "some", any),
        "v": top.get("v"),
        "seq": top.rank,
    }


def first_values(draw: st.DrawFn, rank: int) -> dict[str, Any]:
    return {"v": f"v{rank}", "x": draw(INTS)}


def first_model(events: list[Event]) -> dict[str, Any] | None:
    first = min(events, key=lambda e: e.rank)
    return {"v": first.get("v"), "x": first.get("x"), "seq": first.rank}


def group_values(draw: st.DrawFn, rank: int) -> dict[str, Any]:
    out: dict[str, Any] = {"c": f"c{rank}"}
    if draw(st.booleans()):  # group a carried, its sequence near the row's
        out |= {"a": draw(INTS), "a_seq": rank + draw(st.sampled_from([-1, 0, 1]))}
    if draw(st.booleans()):  # group b (last_non_null alone in its group): a NULL value is not carried
        out |= {"b": draw(STRS), "b_seq": rank + draw(st.sampled_from([-1, 0, 1]))}
    return out


def group_model(events: list[Event]) -> dict[str, Any] | None:
    """Sequence order per group: the row lives when an upsert is above the newest delete; columns
    outside groups come from the highest upsert, and each group from its carrier of highest group
    sequence, among those above the newest delete (group sequences share the row sequence's domain)."""
    deletes = [e.rank for e in events if e.op == "d"]
    d = max(deletes) if deletes else None
    ups = [e for e in events if e.op == "u"]
    live = [e for e in ups if d is None or e.rank > d]
    if not live:
        return None
    top = max(live, key=lambda e: e.rank)
    row: dict[str, Any] = {"c": top.get("c"), "seq": top.rank}
    for seq, col, non_null in (("a_seq", "a", False), ("b_seq", "b", True)):
        carriers = [
            e
            for e in ups
            if e.get(seq) is not None
            and (not non_null or e.get(col) is not None)
            and (d is None or e.get(seq) > d)
        ]
        best = max(carriers, key=lambda e: e.get(seq)) if carriers else None
        row[col], row[seq] = (best.get(col), best.get(seq)) if best else (None, None)
    return row


BASE = [pa.field("k", pa.int64(), nullable=False), pa.field("p", pa.int64())]
TAIL = [pa.field("seq", pa.int64()), pa.field("op", pa.string())]
ENGINES = [
    Engine(
        "order-free",
        pa.schema(
            [
                *BASE,
                pa.field("hi", pa.int64()),
                pa.field("lo", pa.string()),
                pa.field("every", pa.bool_()),
                pa.field("some", pa.bool_()),
                pa.field("v", pa.string()),
                *TAIL,
            ]
        ),
        {"merge_operators": {"hi": "max", "lo": "min", "every": "bool_and", "some": "bool_or"}},
        False,
        agg_values,
        agg_model,
    ),
    Engine(
        "first_row",
        pa.schema([*BASE, pa.field("v", pa.string()), pa.field("x", pa.int64()), *TAIL]),
        {"merge_operators": "first_row"},
        False,
        first_values,
        first_model,
    ),
    Engine(
        "groups",
        pa.schema(
            [
                *BASE,
                pa.field("c", pa.string()),
                pa.field("a", pa.int64()),
                pa.field("a_seq", pa.int64()),
                pa.field("b", pa.string()),
                pa.field("b_seq", pa.int64()),
                *TAIL,
            ]
        ),
        {
            "merge_operators": {"b": "last_non_null"},
            "sequence_groups": {"a_seq": ["a"], "b_seq": ["b"]},
        },
        True,
        group_values,
        group_model,
    ),
]


def model_of(engine: Engine, seen: list[Event]) -> dict[int, dict[str, Any]]:
    by_key: dict[int, list[Event]] = {}
    for e in set(seen):
        by_key.setdefault(e.key, []).append(e)
    out = {}
    for k, events in by_key.items():
        row = engine.model(events)
        if row is not None:
            out[k] = {"k": k, "p": k % 2, **row}
    return out


def batch_of(engine: Engine, events: list[Event]) -> pa.Table:
    rows = [{"k": e.key, "p": e.key % 2, "seq": e.rank, "op": e.op, **dict(e.values)} for e in events]
    names = [f.name for f in engine.schema]
    if engine.name == "groups":
        # A group no row of the batch carries is left out of the batch: a partial write.
        for seq, col in (("a_seq", "a"), ("b_seq", "b")):
            if all(r.get(seq) is None for r in rows):
                names = [n for n in names if n not in (seq, col)]
    schema = pa.schema([engine.schema.field(n) for n in names])
    return pa.Table.from_pylist(rows, schema=schema)


def table_rows(t: mere.Table, **kwargs: Any) -> dict[int, dict[str, Any]]:
    got = t.to_arrow(**kwargs).to_pylist()
    out = {r["k"]: r for r in got}
    assert len(out) == len(got), "a key came out twice"
    return out


@st.composite
def deliveries(draw: st.DrawFn, engine: Engine) -> tuple[list[list[Event]], list[str]]:
    n = draw(st.integers(1, 20))
    keys = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    ops = draw(st.lists(st.sampled_from("uud" if engine.deletes else "u"), min_size=n, max_size=n))
    ranks = draw(st.permutations(range(4, 4 * n + 4, 4)))
    events = [
        Event(k, r, o, tuple(sorted(engine.values(draw, r).items())) if o == "u" else ())
        for k, r, o in zip(keys, ranks, ops)
    ]
    repeats = draw(st.lists(st.sampled_from(events), max_size=n))
    arrival = draw(st.permutations(events + repeats))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(arrival) - 1)), max_size=6)))
    batches = [arrival[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrival)]) if arrival[a:b]]
    actions = draw(
        st.lists(
            st.sampled_from(["none", "compact", "tiered", "travel", "lookup"]),
            min_size=len(batches),
            max_size=len(batches),
        )
    )
    return batches, actions


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_any_delivery_gives_the_sequence_order(
    tmp_path_factory: pytest.TempPathFactory, engine: Engine, data: st.DataObject
) -> None:
    batches, actions = data.draw(deliveries(engine))
    cat = mere.connect(str(tmp_path_factory.mktemp("engines")))
    t = cat.create_table(
        "e.t",
        engine.schema,
        primary_key="k",
        partition_by="p",
        buckets=2,
        cdc_column="op",
        sequence_by="seq",
        properties={"compaction.min-files": "3"},
        **engine.create,
    )
    seen: list[Event] = []
    versions: list[tuple[int, dict[int, dict[str, Any]]]] = []
    for batch, action in zip(batches, actions):
        seen += batch
        result = t.upsert(batch_of(engine, batch))
        expected = model_of(engine, seen)
        versions.append((result.version, expected))
        if action == "compact":
            t.compact()
        elif action == "tiered":
            t.compact(tiered=True)
        assert table_rows(t) == expected
        if action == "travel":
            v, then = versions[len(versions) // 2]
            assert table_rows(t, version=v) == then
        if action == "lookup":
            for k in range(5):
                assert table_rows(t, filter=f"k = {k}") == ({k: expected[k]} if k in expected else {})
    t.compact()
    assert table_rows(t) == model_of(engine, seen)
    for v, then in versions:
        assert table_rows(t, version=v) == then


# -- the order-free operators against DuckDB ------------------------------------------------------------

AGG_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("i", pa.int32()),
        pa.field("f", pa.float64()),
        pa.field("d", pa.decimal128(9, 2)),
        pa.field("s", pa.string()),
        pa.field("bin", pa.binary()),
        pa.field("day", pa.date32()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("flag", pa.bool_()),
        pa.field("all_", pa.bool_()),
        pa.field("any_", pa.bool_()),
        pa.field("op", pa.string()),
    ]
)
AGG_OPERATORS = {
    "i": "max",
    "f": "min",
    "d": "max",
    "s": "min",
    "bin": "max",
    "day": "min",
    "ts": "max",
    "flag": "max",
    "all_": "bool_and",
    "any_": "bool_or",
}
SQL_OF = {"max": "max", "min": "min", "bool_and": "bool_and", "bool_or": "bool_or"}


@st.composite
def agg_rows(draw: st.DrawFn) -> dict[str, Any]:
    import datetime as dt

    def maybe(values: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(st.none(), values))

    return {
        "k": draw(st.integers(0, 5)),
        "i": maybe(st.integers(-(2**31), 2**31 - 1)),
        "f": maybe(st.floats(allow_nan=False, width=64)),
        "d": maybe(st.decimals(-9999999, 9999999, places=2, allow_nan=False, allow_infinity=False)),
        "s": maybe(st.text(max_size=3)),
        "bin": maybe(st.binary(max_size=3)),
        "day": maybe(st.dates(dt.date(1900, 1, 1), dt.date(2100, 1, 1))),
        "ts": maybe(st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1))),
        "flag": maybe(st.booleans()),
        "all_": maybe(st.booleans()),
        "any_": maybe(st.booleans()),
        "op": draw(st.sampled_from(["u", "u", "u", "d"])),
    }


@settings(max_examples=30, deadline=None)
@given(
    commits=st.lists(st.lists(agg_rows(), min_size=1, max_size=8), min_size=1, max_size=5),
    compact_after=st.sets(st.integers(0, 4)),
)
def test_order_free_operators_match_duckdb_aggregates(
    tmp_path_factory: pytest.TempPathFactory, commits: list[list[dict[str, Any]]], compact_after: set[int]
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("agg")))
    t = cat.create_table(
        "e.a",
        AGG_SCHEMA,
        primary_key="k",
        buckets=2,
        cdc_column="op",
        merge_operators=AGG_OPERATORS,
        properties={"compaction.auto": "off"},
    )
    history = []
    for i, rows in enumerate(commits):
        t.upsert(pa.Table.from_pylist(rows, schema=AGG_SCHEMA))
        history += [{**r, "pos": len(history) + j} for j, r in enumerate(rows)]
        if i in compact_after:
            t.compact()
    versions = pa.Table.from_pylist(history, schema=AGG_SCHEMA.append(pa.field("pos", pa.int64())))
    aggregates = ", ".join(f"{SQL_OF[op]}({c}) AS {c}" for c, op in AGG_OPERATORS.items())
    # Each key's versions after its last delete (commit order, then row order); keys ending deleted go.
    con = duckdb.connect()
    con.register("versions", versions)
    expected = con.sql(
        f"""
            WITH last_delete AS (
                SELECT k, max(CASE WHEN op = 'd' THEN pos END) AS at FROM versions GROUP BY k
            )
            SELECT v.k, {aggregates}
            FROM versions v JOIN last_delete l USING (k)
            WHERE l.at IS NULL OR v.pos > l.at
            GROUP BY v.k ORDER BY v.k
            """
    ).to_arrow_table()
    got = t.to_arrow().sort_by("k")
    names = expected.column_names
    assert (
        got.select(names).to_pylist()
        == expected.cast(pa.schema([AGG_SCHEMA.field(c) for c in names])).to_pylist()
    )


# -- sequence groups ------------------------------------------------------------------------------------

G_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("price", pa.int64()),
        pa.field("currency", pa.string()),
        pa.field("price_lsn", pa.int64()),
        pa.field("stock", pa.int64()),
        pa.field("stock_lsn", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("lsn", pa.int64()),
        pa.field("op", pa.string()),
    ]
)


@pytest.fixture
def g(local_cat: mere.Catalog) -> mere.Table:
    return local_cat.create_table(
        "e.g",
        G_SCHEMA,
        primary_key="k",
        buckets=1,
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price", "currency"], "stock_lsn": ["stock"]},
        properties={"compaction.auto": "off"},
    )


def full(k: int, lsn: int, price: int, stock: int, name: str) -> dict[str, Any]:
    return dict(
        k=k,
        price=price,
        currency="EUR",
        price_lsn=lsn,
        stock=stock,
        stock_lsn=lsn,
        name=name,
        lsn=lsn,
        op="u",
    )


def write(t: mere.Table, *rows: dict[str, Any]) -> mere.CommitResult:
    names = [n for n in G_SCHEMA.names if any(n in r for r in rows)]
    schema = pa.schema([G_SCHEMA.field(n) for n in names])
    return t.upsert(pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], schema=schema))


def state(t: mere.Table) -> list[tuple[Any, ...]]:
    cols = ["k", "price", "price_lsn", "stock", "stock_lsn", "name", "lsn"]
    return sorted(tuple(r.values()) for r in t.to_arrow(columns=cols).to_pylist())


def price(k: int, lsn: int, value: int, row_lsn: int | None = None) -> dict[str, Any]:
    """A partial row carrying the price group only (and the columns outside groups)."""
    return dict(k=k, price=value, currency="USD", price_lsn=lsn, name=f"p{lsn}", lsn=row_lsn or lsn, op="u")


def test_a_partial_row_older_than_a_full_row_is_ignored_in_any_order(g: mere.Table) -> None:
    write(g, price(1, 5, 50))
    write(g, full(1, 10, 100, 7, "full"))
    assert state(g) == [(1, 100, 10, 7, 10, "full", 10)]
    g.compact()
    write(g, price(1, 5, 50))  # a replay of the older partial row
    assert state(g) == [(1, 100, 10, 7, 10, "full", 10)]
    write(g, price(1, 12, 120, row_lsn=12))  # a newer partial row takes its group only
    assert state(g) == [(1, 120, 12, 7, 10, "p12", 12)]


def test_a_late_partial_row_newer_than_its_group_wins_after_compaction(g: mere.Table) -> None:
    # The row-level sequence of the folded row (20) is above the late row's (15), but the price group's
    # own sequence (10) is below: the group takes the late values, the row's other columns stay.
    write(g, full(1, 10, 100, 7, "full"))
    write(g, dict(k=1, stock=3, stock_lsn=20, name="s20", lsn=20, op="u"))
    g.compact()
    write(g, price(1, 15, 150))
    assert state(g) == [(1, 150, 15, 3, 20, "s20", 20)]
    g.compact()
    assert state(g) == [(1, 150, 15, 3, 20, "s20", 20)]


def test_a_delete_between_a_full_row_and_a_partial_row(g: mere.Table) -> None:
    write(g, full(1, 10, 100, 7, "full"))
    g.upsert(pa.table({"k": [1], "lsn": [12], "op": ["d"]}))
    write(g, price(1, 11, 110))  # below the delete: ignored
    assert state(g) == []
    write(g, dict(k=1, stock=1, stock_lsn=14, name="s14", lsn=14, op="u"))  # above it: the key is back
    assert state(g) == [(1, None, None, 1, 14, "s14", 14)]  # the price group went with the delete
    g.compact()
    write(g, price(1, 13, 130, row_lsn=13))  # above the delete, below the row: the group only
    assert state(g) == [(1, 130, 13, 1, 14, "s14", 14)]
    g.compact()
    write(g, price(1, 9, 90))  # far below the delete (its tombstone)
    assert state(g) == [(1, 130, 13, 1, 14, "s14", 14)]


def test_partial_rows_may_leave_out_whole_groups_only(g: mere.Table) -> None:
    write(g, full(1, 10, 100, 7, "full"))
    version = g.version
    with pytest.raises(SchemaMismatch, match="lacks column"):
        g.upsert(pa.table({"k": [1], "price": [1], "currency": ["X"], "price_lsn": [11], "lsn": [11]}))
    with pytest.raises(SchemaMismatch, match="whole groups"):
        g.upsert(pa.table({"k": [1], "price": [1], "price_lsn": [11], "name": ["n"], "lsn": [11]}))
    assert g.version == version and state(g) == [(1, 100, 10, 7, 10, "full", 10)]


# -- first_row ------------------------------------------------------------------------------------------

F_SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string()), pa.field("op", pa.string())]
)


@pytest.fixture
def f(local_cat: mere.Catalog) -> mere.Table:
    return local_cat.create_table(
        "e.f", F_SCHEMA, primary_key="k", buckets=2, cdc_column="op", merge_operators="first_row"
    )


def values(t: mere.Table) -> list[tuple[Any, ...]]:
    return sorted((r["k"], r["v"]) for r in t.to_arrow(columns=["k", "v"]).to_pylist())


def test_first_row_keeps_the_oldest_commit_then_the_first_row(f: mere.Table) -> None:
    r = f.upsert(pa.table({"k": [1, 1, 2], "v": ["a", "b", "c"], "op": ["u", "u", "u"]}))
    assert r.stale_rows == 1  # the second row of key 1 in the batch
    f.upsert(pa.table({"k": [1, 3], "v": ["late", "d"], "op": ["i", "i"]}))
    assert values(f) == [(1, "a"), (2, "c"), (3, "d")]
    f.compact()
    f.upsert(pa.table({"k": [1, 2], "v": ["later", "later"], "op": ["u", "u"]}))
    assert values(f) == [(1, "a"), (2, "c"), (3, "d")]
    assert values(f) == sorted((r["k"], r["v"]) for r in f.to_arrow(filter="k >= 0").to_pylist())
    f.update({"v": "'set'"}, "k = 2")  # an UPDATE replaces the row it read
    assert values(f) == [(1, "a"), (2, "set"), (3, "d")]
    f.upsert(pa.table({"k": [2], "v": ["ignored"], "op": ["u"]}))
    f.compact()
    assert values(f) == [(1, "a"), (2, "set"), (3, "d")]


def test_first_row_refuses_deletes_and_commits_nothing(f: mere.Table) -> None:
    f.upsert(pa.table({"k": [1], "v": ["a"], "op": ["u"]}))
    version = f.version
    with pytest.raises(InvalidInput, match="first_row"):
        f.upsert(pa.table({"k": [1, 2], "v": [None, "b"], "op": ["u", "d"]}))
    with pytest.raises(InvalidInput, match="first_row"):
        f.delete("k = 1")
    with pytest.raises(InvalidInput, match="first_row"):
        f.merge(pa.table({"k": [1]}), on="t.k = s.k").when_matched_delete().execute()
    with pytest.raises(SchemaMismatch, match="first_row"):
        f.upsert(pa.table({"k": [5]}))  # a partial row
    assert f.version == version and values(f) == [(1, "a")]


def test_first_row_with_sequences_keeps_the_lowest_sequence(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64())])
    t = local_cat.create_table(
        "e.fs", schema, primary_key="k", sequence_by="seq", merge_operators="first_row"
    )
    r = t.upsert(pa.table({"k": [1, 1, 1], "v": ["b", "a", "c"], "seq": [5, 3, 9]}))
    assert r.stale_rows == 2
    t.compact()
    t.upsert(pa.table({"k": [1], "v": ["earliest"], "seq": [1]}))  # late but lower: it wins
    assert t.to_arrow(columns=["v", "seq"]).to_pylist() == [{"v": "earliest", "seq": 1}]
    t.compact()
    t.upsert(pa.table({"k": [1], "v": ["replay"], "seq": [3]}))
    assert t.to_arrow(columns=["v", "seq"]).to_pylist() == [{"v": "earliest", "seq": 1}]


def test_order_free_operators_with_sequences_refuse_deletes(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("hi", pa.int64()), ("seq", pa.int64()), ("op", pa.string())])
    t = local_cat.create_table(
        "e.m", schema, primary_key="k", sequence_by="seq", cdc_column="op", merge_operators={"hi": "max"}
    )
    t.upsert(pa.table({"k": [1], "hi": [1], "seq": [1], "op": ["u"]}))
    version = t.version
    with pytest.raises(InvalidInput, match="order-free"):
        t.upsert(pa.table({"k": [1], "hi": [None], "seq": [2], "op": ["d"]}, schema=schema))
    with pytest.raises(InvalidInput, match="order-free"):
        t.delete("k = 1")
    assert t.version == version


def test_order_free_operators_without_sequences_reset_on_delete(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("hi", pa.int64()), ("lo", pa.int64()), ("op", pa.string())])
    t = local_cat.create_table(
        "e.n", schema, primary_key="k", cdc_column="op", merge_operators={"hi": "max", "lo": "min"}
    )
    t.upsert(pa.table({"k": [1, 1], "hi": [5, None], "lo": [5, 2], "op": ["u", "u"]}))
    t.upsert(pa.table({"k": [1], "hi": [3], "lo": [9], "op": ["u"]}))
    assert t.to_arrow(columns=["hi", "lo"]).to_pylist() == [{"hi": 5, "lo": 2}]
    t.delete("k = 1")
    t.upsert(pa.table({"k": [1], "hi": [None], "lo": [7], "op": ["u"]}))
    assert t.to_arrow(columns=["hi", "lo"]).to_pylist() == [{"hi": None, "lo": 7}]


# -- bad input ------------------------------------------------------------------------------------------

BAD_SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("p", pa.int64()),
        ("n", pa.int64()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("l", pa.list_(pa.int64())),
        ("seq", pa.int64()),
        ("g1", pa.int64()),
        ("g2", pa.int64()),
        ("gs", pa.string()),
        ("d", pa.decimal128(12, 2)),
    ]
)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"merge_operators": {"n": "maximum"}}, InvalidInput, "unknown merge operator 'maximum'"),
        ({"merge_operators": "last_row"}, InvalidInput, "merge engine"),
        ({"merge_operators": {"l": "max"}}, InvalidInput, "orderable"),
        ({"merge_operators": {"n": "bool_or"}}, InvalidInput, "boolean"),
        ({"merge_operators": {"s": "bool_and"}}, InvalidInput, "boolean"),
        ({"merge_operators": {"s": "sum"}}, InvalidInput, "needs a numeric column"),
        ({"merge_operators": {"d": "sum"}}, InvalidInput, "needs a numeric column"),  # docs: decimals too
        ({"merge_operators": {"n": "sum"}, "sequence_by": "seq"}, InvalidInput, "added twice"),
        ({"merge_operators": {"s": "last_non_null"}, "sequence_by": "seq"}, InvalidInput, "alone in a sequence"),
        ({"sequence_groups": {"g1": ["n"]}}, InvalidInput, "give sequence_by"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["k"]}}, InvalidInput, "primary-key"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["p"]}}, InvalidInput, "partition"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["seq"]}}, InvalidInput, "sequence_by column"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["nope"]}}, SchemaMismatch, "'nope'"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["n"], "g2": ["n"]}}, InvalidInput, "two sequence"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["g2"], "g2": ["n"]}}, InvalidInput, "two sequence"),
        ({"sequence_by": "seq", "sequence_groups": {"g1": []}}, InvalidInput, "must list"),
        ({"sequence_by": "seq", "sequence_groups": {"gs": ["n"]}}, UnsupportedType, "domain"),
        (
            {"sequence_by": "seq", "sequence_groups": {"g1": ["n", "s"]}, "merge_operators": {"s": "last_non_null"}},
            InvalidInput,
            "alone",
        ),
        (
            {"sequence_by": "seq", "sequence_groups": {"g1": ["n"]}, "merge_operators": {"n": "max"}},
            InvalidInput,
            "from one version",
        ),
        ({"sequence_by": "seq", "sequence_groups": {"g1": ["n"]}, "merge_operators": "first_row"}, InvalidInput, "first_row"),
    ],
)  # fmt: skip
def test_bad_engines_are_refused_at_create(
    local_cat: mere.Catalog, kwargs: dict[str, Any], error: type[MereError], match: str
) -> None:
    with pytest.raises(error, match=match):
        local_cat.create_table("e.bad", BAD_SCHEMA, primary_key="k", partition_by="p", **kwargs)
    with pytest.raises(MereError):
        local_cat.table("e.bad")


def test_engines_are_stored_in_the_spec(local_cat: mere.Catalog) -> None:
    t = local_cat.create_table(
        "e.s",
        BAD_SCHEMA,
        primary_key="k",
        sequence_by="seq",
        sequence_groups={"g1": ["n", "s"], "g2": ["b"]},
        merge_operators={"b": "last_non_null"},
    )
    spec = TableSpec.from_json(t.record.spec)
    assert dict(spec.sequence_groups) == {"g1": ("n", "s"), "g2": ("b",)}
    assert '"format": 4' in t.record.spec
    f = local_cat.create_table("e.f", BAD_SCHEMA, primary_key="k", merge_operators="first_row")
    assert TableSpec.from_json(f.record.spec).merge_engine == "first_row"
    assert (
        local_cat.create_table(
            "e.f", BAD_SCHEMA, primary_key="k", merge_operators="first_row", exist_ok=True
        ).record.spec
        == f.record.spec
    )
    with pytest.raises(mere.errors.TableExists, match="merge_engine"):
        local_cat.create_table("e.f", BAD_SCHEMA, primary_key="k", exist_ok=True)
    m = local_cat.create_table("e.m", BAD_SCHEMA, primary_key="k", merge_operators={"n": "max"})
    assert '"format": 4' in m.record.spec


def test_groups_follow_renames_and_refuse_what_would_reorder_them(g: mere.Table) -> None:
    write(g, full(1, 10, 100, 7, "full"))
    version = g.version
    with pytest.raises(InvalidInput, match="keeps its sequence_by"):
        g.set_sequence_by(None)
    with pytest.raises(InvalidInput, match="sequence group"):
        g.drop_column("currency")
    small = g.catalog.create_table(
        "e.small",
        pa.schema([("k", pa.int64()), ("v", pa.int64()), ("vs", pa.int32()), ("seq", pa.int32())]),
        primary_key="k",
        sequence_by="seq",
        sequence_groups={"vs": ["v"]},
    )
    for column in ("vs", "seq"):
        with pytest.raises(InvalidInput, match="widened"):
            small.widen(column, pa.int64())
    assert g.version == version
    g.rename_column("price_lsn", "price_seq")
    assert dict(g.spec.sequence_groups) == {"price_seq": ("price", "currency"), "stock_lsn": ("stock",)}
    g.upsert(
        pa.table({"k": [1], "price": [120], "currency": ["X"], "price_seq": [12], "name": ["n"], "lsn": [5]})
    )
    assert g.to_arrow(columns=["price", "name"]).to_pylist() == [{"price": 120, "name": "full"}]
