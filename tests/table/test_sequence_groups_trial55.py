"""Adversarial trial 55c: sequence groups (partial-column updates under sequences) against a dict model.

The model follows docs/concepts.md, "Sequence groups": each group's columns come from the version carrying
it with the highest group sequence (on ties the later to arrive: commit, then row order), among group
values above the key's newest
delete; a row carries a group when its batch has the group's columns and the group sequence is not NULL
(for ``stock``, a ``last_non_null`` column alone in its group, also when its value is not NULL); columns
outside groups come from the upsert of highest ``lsn`` (later arrival on ties); a key lives when an upsert
has a sequence above its newest delete. Deletes by filter mark each key just above its merged ``lsn``;
UPDATE writes the merged row again (its sequences as they are) as a later commit.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from group_events import COLS, SCHEMA, Ev, batch, model, rows

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def new_table(root: Path, buckets: int = 1) -> mere.Table:
    return mere.connect(str(root)).create_table(
        "g.t",
        SCHEMA,
        primary_key="k",
        buckets=buckets,
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price", "currency"], "stock_lsn": ["stock"]},
        merge_operators={"stock": "last_non_null"},
        properties={"compaction.auto": "off"},
    )


def bag(rs: Any, cols: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(repr(r[c]) for c in cols) for r in rs), key=repr)


# Filters: mere text, and the same predicate over a model row (SQL: NULL compares to nothing).
FILTERS: list[tuple[str, Any]] = [
    ("price >= 5", lambda r: r["price"] is not None and r["price"] >= 5),
    ("currency = 'EUR'", lambda r: r["currency"] == "EUR"),
    ("price is null", lambda r: r["price"] is None),
    ("stock > 2", lambda r: r["stock"] is not None and r["stock"] > 2),
    ("stock is null", lambda r: r["stock"] is None),
    ("price_lsn >= 6", lambda r: r["price_lsn"] is not None and r["price_lsn"] >= 6),
    ("stock_lsn < 6", lambda r: r["stock_lsn"] is not None and r["stock_lsn"] < 6),
    ("name = 'n3'", lambda r: r["name"] == "n3"),
    ("lsn > 6", lambda r: r["lsn"] > 6),
    ("k = 1 and price < 5", lambda r: r["k"] == 1 and r["price"] is not None and r["price"] < 5),
    ("stock = 1 or currency = 'USD'", lambda r: r["stock"] == 1 or r["currency"] == "USD"),
]


def check_reads(
    t: mere.Table, expected: dict[int, dict[str, Any]], subsets: list[list[str]], **at: Any
) -> None:
    assert rows(t, **at) == expected
    scan = t.scan(**at)
    assert scan.count() == len(expected)
    for col in COLS:
        vals = [r[col] for r in expected.values() if r[col] is not None]
        assert (scan.min(col), scan.max(col)) == ((min(vals), max(vals)) if vals else (None, None)), col
    for text, keep in FILTERS:
        want = {k: r for k, r in expected.items() if keep(r)}
        assert rows(t, filter=text, **at) == want, text
        assert t.scan(filter=text, **at).count() == len(want), text
        assert bag(t.to_arrow(columns=["name"], filter=text, **at).to_pylist(), ["name"]) == bag(
            want.values(), ["name"]
        ), text
    for cols in subsets:
        got = t.to_arrow(columns=cols, **at).to_pylist()
        assert bag(got, cols) == bag(expected.values(), cols), cols
        assert t.scan(columns=cols, **at).count() == len(expected), cols


# -- generated histories ------------------------------------------------------------------------------------

# Upserts and their group sequences are even; deletes take any sequence, so they tie upserts too (a
# delete at d removes every version up to d, also one committed after it).
LSN = st.integers(1, 12).map(lambda x: 2 * x)
DEL = st.one_of(LSN, st.integers(0, 12).map(lambda x: 2 * x + 1))  # half of them at an upsert's sequence
KEY = st.integers(0, 4)


@st.composite
def events(draw: st.DrawFn) -> Ev:
    k, lsn = draw(KEY), draw(LSN)
    if draw(st.integers(0, 5)) == 0:
        return Ev(k, draw(DEL), "d")
    price = stock = None
    if draw(st.booleans()):
        gseq = draw(st.one_of(st.none(), st.sampled_from([lsn - 2, lsn, lsn + 2])))
        price = (
            draw(st.one_of(st.none(), st.integers(0, 9))),
            draw(st.sampled_from(["EUR", "USD", None])),
            gseq,
        )
    if draw(st.booleans()):
        gseq = draw(st.one_of(st.none(), st.sampled_from([lsn - 2, lsn, lsn + 2])))
        stock = (draw(st.one_of(st.none(), st.integers(0, 5))), gseq)
    return Ev(k, lsn, "u", f"n{draw(st.integers(0, 5))}", price, stock)


STEP = st.one_of(
    st.tuples(st.just("upsert"), st.lists(events(), min_size=1, max_size=6)),
    st.tuples(st.just("compact"), st.sampled_from([False, True])),
    st.tuples(
        st.just("delete_keys"),
        st.lists(st.tuples(KEY, DEL), min_size=1, max_size=3, unique_by=lambda x: x[0]),
    ),
    st.tuples(st.just("delete_filter"), st.sampled_from([f for f, _ in FILTERS])),
    st.tuples(st.just("update"), st.tuples(st.sampled_from([f for f, _ in FILTERS]), st.booleans())),
    st.tuples(st.just("replay"), st.integers(0, 1000)),
    st.tuples(st.just("merge"), st.tuples(st.lists(KEY, min_size=1, max_size=3, unique=True), st.booleans())),
)

FILTER_OF = dict(FILTERS)
SUBSETS = [
    ["k"],
    ["price_lsn"],
    ["stock_lsn"],
    ["stock"],
    ["price", "currency"],
    ["price"],
    ["currency", "stock_lsn"],
    ["lsn"],
    ["name", "stock"],
    ["k", "price_lsn", "stock_lsn"],
]


def apply(t: mere.Table, step: tuple[str, Any], seen: list[Ev]) -> None:
    """Run ``step`` on ``t`` and append the events it amounts to (in arrival order) to ``seen``."""
    kind, arg = step
    if kind == "upsert":
        t.upsert(batch(arg))
        seen += arg
    elif kind == "replay" and seen:  # a late duplicate of an earlier event
        e = seen[arg % len(seen)]
        t.upsert(batch([e]))
        seen.append(e)
    elif kind == "compact":
        t.compact(tiered=True) if arg else t.compact()
    elif kind == "delete_keys":  # blind, at the given sequences
        t.delete(pa.table({"k": pa.array([k for k, _ in arg], pa.int64()), "lsn": [s for _, s in arg]}))
        seen += [Ev(k, s, "d") for k, s in arg]
    elif kind == "delete_filter":  # each match just above its merged sequence
        now = model(seen)
        t.delete(arg)
        seen += [Ev(k, r["lsn"] + 1, "d") for k, r in now.items() if FILTER_OF[arg](r)]
    elif kind == "update":  # the merged row again, its sequences as they are, as a later commit
        where, set_price = arg
        now = model(seen)
        # Setting a group's columns on a row whose group sequence is NULL carries nothing (the carry rule).
        t.update(
            {"price": "coalesce(price, 0) + 1", "currency": "'UPD'"} if set_price else {"name": "'upd'"},
            where,
        )
        for k, r in now.items():
            if FILTER_OF[where](r):
                if set_price:
                    r = {**r, "price": (r["price"] or 0) + 1, "currency": "UPD", "name": r["name"]}
                else:
                    r = {**r, "name": "upd"}
                price = None if r["price_lsn"] is None else (r["price"], r["currency"], r["price_lsn"])
                stock = None if r["stock_lsn"] is None else (r["stock"], r["stock_lsn"])
                seen.append(Ev(k, r["lsn"], "u", r["name"], price, stock))
    elif kind == "merge":  # matched keys: deleted just above their sequence, or their row again with a name
        keys, delete = arg
        now = model(seen)
        source = pa.table({"k": pa.array(keys, pa.int64()), "name": [f"m{k}" for k in keys]})
        m = t.merge(source)
        m = m.when_matched_delete() if delete else m.when_matched_update(set={"name": "s.name"})
        m.execute()
        for k in keys:
            if k in now:
                r = now[k]
                if delete:
                    seen.append(Ev(k, r["lsn"] + 1, "d"))
                else:
                    price = None if r["price_lsn"] is None else (r["price"], r["currency"], r["price_lsn"])
                    stock = None if r["stock_lsn"] is None else (r["stock"], r["stock_lsn"])
                    seen.append(Ev(k, r["lsn"], "u", f"m{k}", price, stock))


def test_group_ties_do_not_depend_on_batching(tmp_path: Path) -> None:
    """docs/concepts.md: on a tie of group sequences the later to arrive wins. Events a@4 (price 1 at group
    sequence 6), b@22 (no price) and c@4 (price 8 at 6), c committed last: c wins the tie however a and b
    are batched (before, a write folding a and b into one row at 22 made a win: the tie went by that row's
    sequence)."""
    a = Ev(k=0, lsn=4, op="u", name="n0", price=(1, "EUR", 6))
    b = Ev(k=0, lsn=22, op="u", name="n0", price=None)
    c = Ev(k=0, lsn=4, op="u", name="n5", price=(8, "EUR", 6))
    prices = []
    for i, batches in enumerate(([[a], [b], [c]], [[a, b], [c]])):
        t = new_table(tmp_path / str(i))
        for events in batches:
            t.upsert(batch(events))
        prices.append(rows(t)[0]["price"])
    assert prices == [8, 8] == [model([a, b, c])[0]["price"]] * 2


@pytest.mark.parametrize("buckets", [1, 2])
@pytest.mark.parametrize("fold", ["none", "full", "tiered"])
@pytest.mark.parametrize(
    "batches",
    [
        [[0], [1], [2], [3]],
        [[0, 1], [2], [3]],
        [[0, 1, 2], [3]],
        [[0], [1, 2], [3]],
        [[0, 1, 2, 3]],
        [[0], [1, 2, 3]],
    ],
    ids=str,
)
def test_a_group_tie_goes_to_the_later_arrival_however_batched_and_compacted(
    tmp_path: Path, buckets: int, fold: str, batches: list[list[int]]
) -> None:
    """Four events of key 7 whose price groups tie at group sequence 6 while their row sequences fall: the
    last to arrive sets the price, also within one batch (a lower row sequence does not lose the tie), and
    after a fold of the earlier writes (a compaction, full or of the newest runs, between every write)."""
    events = [
        Ev(k=7, lsn=30, op="u", name="a", price=(1, "A", 6)),
        Ev(k=7, lsn=40, op="u", name="b", price=None, stock=(5, 2)),
        Ev(k=7, lsn=20, op="u", name="c", price=(2, "C", 6)),
        Ev(k=7, lsn=10, op="u", name="d", price=(3, "D", 6), stock=(9, 1)),
    ]
    t = new_table(tmp_path, buckets)
    for written in batches:
        t.upsert(batch([events[i] for i in written]))
        if fold != "none":
            t.compact(tiered=fold == "tiered")
    want = model(events)
    assert want[7]["price"] == 3 and want[7]["name"] == "b" and want[7]["stock"] == 5
    assert rows(t) == want
    assert t.to_arrow(columns=["k", "price", "currency"], filter="price_lsn = 6").to_pylist() == [
        {"k": 7, "price": 3, "currency": "D"}
    ]
    t.compact()
    assert rows(t) == want


@FAST
@given(steps=st.lists(STEP, min_size=1, max_size=10), buckets=st.sampled_from([1, 2]))
def test_any_history_equals_the_group_model(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, Any]], buckets: int
) -> None:
    t = new_table(tmp_path_factory.mktemp("g"), buckets)
    seen: list[Ev] = []
    history: list[tuple[int, dict[int, dict[str, Any]]]] = []
    for step in steps:
        apply(t, step, seen)
        expected = model(seen)
        assert rows(t) == expected, step
        history.append((t.version, expected))
    expected = model(seen)
    check_reads(t, expected, SUBSETS)
    t.compact()
    check_reads(t, expected, SUBSETS[:4])
    for v, then in history[:: max(1, len(history) // 3)]:
        assert rows(t, version=v) == then


@FAST
@given(
    first=st.lists(events(), min_size=1, max_size=8),
    late=st.lists(events(), min_size=1, max_size=8),
    cut=st.integers(0, 8),
)
def test_late_events_after_compaction_keep_each_groups_sequence(
    tmp_path_factory: pytest.TempPathFactory, first: list[Ev], late: list[Ev], cut: int
) -> None:
    t = new_table(tmp_path_factory.mktemp("c"))
    t.upsert(batch(first[:cut] or first))
    if first[cut:]:
        t.upsert(batch(first[cut:]))
    seen = first if cut else first + first[cut:]
    t.compact()
    for e in late:  # one commit each: later commits on ties
        t.upsert(batch([e]))
    seen = seen + late
    assert rows(t) == model(seen)
    t.compact()
    assert rows(t) == model(seen)


# -- every projection, other engines ------------------------------------------------------------------------


def _fixed(t: mere.Table) -> list[Ev]:
    evs = [
        [
            Ev(1, 10, "u", "full1", (100, "EUR", 10), (7, 10)),
            Ev(2, 10, "u", "full2", (200, "USD", 10), (3, 10)),
            Ev(3, 5, "u", "full3", (300, "EUR", 5), (1, 5)),
        ],
        [Ev(1, 20, "u", "s20", None, (2, 20))],  # the stock group alone, above the row
        [Ev(1, 15, "u", "late", (150, "USD", 15), None)],  # a late price: below the row, above its group
        [
            Ev(2, 12, "u", "nul", (None, None, None), (None, 30))
        ],  # carries neither group (NULL seq; NULL stock)
        [Ev(3, 8, "d")],
        [Ev(3, 9, "u", "back", None, None)],  # back, with both groups gone
        [Ev(4, 4, "u", "four", (1, None, 40), (5, 2))],
        [Ev(4, 6, "d")],  # the price group (40) outlives the delete; the stock group (2) goes
        [Ev(4, 7, "u", "four2", None, None)],
    ]
    seen: list[Ev] = []
    for i, b in enumerate(evs):
        t.upsert(batch(b))
        seen += b
        if i == 2:
            t.compact()
    return seen


ALL_SUBSETS = [list(c) for n in range(1, len(COLS) + 1) for c in itertools.combinations(COLS, n)]


@pytest.mark.parametrize("compacted", [False, True])
def test_every_projection_equals_the_model(tmp_path: Path, compacted: bool) -> None:
    t = new_table(tmp_path, buckets=2)
    expected = model(_fixed(t))
    assert expected[4]["price"] == 1 and expected[4]["price_lsn"] == 40 and expected[4]["stock"] is None
    if compacted:
        t.compact()
    assert rows(t) == expected
    for cols in ALL_SUBSETS:
        got = t.to_arrow(columns=cols).to_pylist()
        assert bag(got, cols) == bag(expected.values(), cols), cols


def test_filters_count_minmax_and_explain_on_the_fixed_history(tmp_path: Path) -> None:
    t = new_table(tmp_path, buckets=2)
    expected = model(_fixed(t))
    check_reads(t, expected, SUBSETS)
    for text, _ in FILTERS:
        assert t.scan(filter=text).explain() is not None
    # A filter on a group column never lets an older group value resurface: key 1's price 100 is gone.
    assert rows(t, filter="price = 100") == {}
    assert rows(t, filter="stock = 7") == {}
    assert rows(t, filter="price = 300") == {}


def test_duckdb_and_polars_read_the_model(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    from mere.integrations.duckdb import register

    t = new_table(tmp_path, buckets=2)
    expected = model(_fixed(t))
    con = duckdb.connect()
    register(con, "g", t)
    got = con.sql("select * from g").to_arrow_table().to_pylist()
    assert bag(got, COLS) == bag(expected.values(), COLS)
    for text, keep in FILTERS:
        sql = text.replace("==", "=")
        got = con.sql(f"select k, price, stock from g where {sql}").to_arrow_table().to_pylist()
        want = [r for r in expected.values() if keep(r)]
        assert bag(got, ["k", "price", "stock"]) == bag(want, ["k", "price", "stock"]), text
    for col in ("price", "price_lsn", "stock", "stock_lsn"):
        vals = [r[col] for r in expected.values() if r[col] is not None]
        assert con.sql(f"select min({col}), max({col}), count(*) from g").fetchall()[0] == (
            min(vals),
            max(vals),
            len(expected),
        ), col
        assert con.sql(f"select count(*) from g where {col} is null").fetchall()[0][0] == sum(
            r[col] is None for r in expected.values()
        ), col
    frame = t.scan().to_polars()
    assert bag(frame.to_dicts(), COLS) == bag(expected.values(), COLS)
    lazy = t.scan(columns=["k", "stock_lsn"]).to_polars().filter(pl.col("stock_lsn") > 5)
    want = [r for r in expected.values() if r["stock_lsn"] is not None and r["stock_lsn"] > 5]
    assert bag(lazy.to_dicts(), ["k", "stock_lsn"]) == bag(want, ["k", "stock_lsn"])


# -- a delete and an upsert at one sequence -------------------------------------------------------------------


@pytest.mark.parametrize("how", ["one_batch", "two_commits", "compacted_between"])
def test_an_upsert_at_its_keys_delete_sequence_is_deleted_or_whole(tmp_path: Path, how: str) -> None:
    t = new_table(tmp_path)
    d, u = Ev(1, 5, "d"), Ev(1, 5, "u", "n", (7, "EUR", 5), (2, 5))
    if how == "one_batch":
        t.upsert(batch([d, u]))
    else:
        t.upsert(batch([d]))
        if how == "compacted_between":
            t.compact()
        t.upsert(batch([u]))
    got = list(rows(t).values())
    whole = {
        "k": 1,
        "price": 7,
        "currency": "EUR",
        "price_lsn": 5,
        "stock": 2,
        "stock_lsn": 5,
        "name": "n",
        "lsn": 5,
    }
    assert whole["lsn"] == 5
    # A delete at sequence 5 removes every version up to 5 (docs: sequence groups), whatever the order of
    # commits: the key stays deleted (it read back with name 'n' and every group NULL).
    assert got == []
    # Projections without group columns and count() merge alike (they had kept the key).
    assert t.scan(columns=["k", "name"]).to_arrow().num_rows == 0
    assert t.scan(columns=["k"]).to_arrow().num_rows == 0
    assert t.scan().count() == 0


def test_an_upsert_at_its_keys_delete_sequence_never_reads_null_from_a_not_null_column(
    tmp_path: Path,
) -> None:
    s = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("price", pa.int64(), nullable=False),
            pa.field("price_lsn", pa.int64()),
            pa.field("name", pa.string()),
            pa.field("lsn", pa.int64(), nullable=False),
            pa.field("op", pa.string()),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table(
        "g.n",
        s,
        primary_key="k",
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price"]},
    )
    t.upsert(pa.table({"k": pa.array([1], pa.int64()), "lsn": pa.array([5], pa.int64()), "op": ["d"]}))
    t.upsert(
        pa.Table.from_pylist(
            [{"k": 1, "price": 7, "price_lsn": 5, "name": "x", "lsn": 5, "op": "u"}], schema=s
        )
    )
    got = t.to_arrow()
    assert got.schema.field("price").nullable is False
    assert got.column("price").null_count == 0, got.to_pylist()  # got: [{'price': None, 'name': 'x', ...}]
    assert got.num_rows == 0  # the delete at 5 removes the row at 5
    t.upsert(
        pa.Table.from_pylist(
            [{"k": 1, "price": 8, "price_lsn": 6, "name": "y", "lsn": 6, "op": "u"}], schema=s
        )
    )
    assert t.to_arrow().select(["k", "price", "price_lsn", "name"]).to_pylist() == [
        {"k": 1, "price": 8, "price_lsn": 6, "name": "y"}
    ]
