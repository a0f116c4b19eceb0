"""Adversarial trial 57: ties on group sequences go to the later arrival (commit, then row of a batch).

docs/concepts.md, "Sequence groups": each group's columns come from the version carrying it with the
highest group sequence, on ties the later to arrive (the later commit, then the later row of a batch),
among group values above the key's newest delete; a delete at d removes every version of row sequence up
to d (also one committed after it) and every group value whose group sequence is not above d; a row
carries a group when its batch has the group's columns and the group sequence is not NULL (for the
``last_non_null`` column ``stock``, alone in its group, also when its value is not NULL). The model (tests/group_events.py)
is a plain dict model over the events in arrival order; the table must equal it whatever the split into
writes, the delivery (single upserts, transactions of several upserts, staged changes committed
together), compactions between writes, auto compaction, bucket count and read route.
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
from group_events import SCHEMA, Ev, batch, model, rows

FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def new_table(root: Path, buckets: int = 1, auto: bool = False) -> mere.Table:
    props = {"compaction.auto": "inline", "compaction.min-files": "2"} if auto else {"compaction.auto": "off"}
    return mere.connect(str(root)).create_table(
        "g.t",
        SCHEMA,
        primary_key="k",
        buckets=buckets,
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price", "currency"], "stock_lsn": ["stock"]},
        merge_operators={"stock": "last_non_null"},
        properties=props,
    )


def bag(rs: Any, cols: list[str]) -> list[tuple[str, ...]]:
    return sorted(tuple(repr(r[c]) for c in cols) for r in rs)


FILTERS: list[tuple[str, Any]] = [
    ("price_lsn = 6", lambda r: r["price_lsn"] == 6),
    ("price > 2", lambda r: r["price"] is not None and r["price"] > 2),
    ("currency = 'B'", lambda r: r["currency"] == "B"),
    ("price is null", lambda r: r["price"] is None),
    ("stock >= 3", lambda r: r["stock"] is not None and r["stock"] >= 3),
    ("stock_lsn = 6", lambda r: r["stock_lsn"] == 6),
    ("lsn < 6", lambda r: r["lsn"] < 6),
    ("price_lsn = 6 and stock_lsn = 6", lambda r: r["price_lsn"] == 6 and r["stock_lsn"] == 6),
]
SUBSETS = [["k"], ["price"], ["currency", "stock"], ["price_lsn"], ["stock", "stock_lsn"], ["name", "lsn"]]


def check_reads(t: mere.Table, expected: dict[int, dict[str, Any]], **at: Any) -> None:
    assert rows(t, **at) == expected
    assert t.scan(**at).count() == len(expected)
    for text, keep in FILTERS:
        want = {k: r for k, r in expected.items() if keep(r)}
        assert rows(t, filter=text, **at) == want, text
        assert t.scan(filter=text, **at).count() == len(want), text
        got = t.to_arrow(columns=["k", "price", "stock"], filter=text, **at).to_pylist()
        assert bag(got, ["k", "price", "stock"]) == bag(want.values(), ["k", "price", "stock"]), text
    for cols in SUBSETS:
        got = t.to_arrow(columns=cols, **at).to_pylist()
        assert bag(got, cols) == bag(expected.values(), cols), cols


def deliver(t: mere.Table, parts: list[list[Ev]], how: str) -> None:
    """Commit ``parts`` (in order) as one version (``tx``, ``staged``) or one version each (``single``)."""
    if how == "single":
        for p in parts:
            t.upsert(batch(p))
    elif how == "tx":
        with t.transaction() as tx:
            for p in parts:
                tx.upsert(batch(p))
    else:
        t.commit([t.stage(batch(p)) for p in parts])


# -- generated histories: ties everywhere ---------------------------------------------------------------

KEY = st.integers(0, 2)
GSEQ = st.sampled_from([4, 6, 6, 6, None])  # mostly the one tied group sequence
DSEQ = st.sampled_from([3, 4, 5, 6, 7, 8])  # at, below and above the tie


@st.composite
def event(draw: st.DrawFn) -> Ev:
    k = draw(KEY)
    lsn = draw(st.integers(1, 10))
    if draw(st.integers(0, 6)) == 0:
        return Ev(k, draw(DSEQ), "d")
    price = stock = None
    if draw(st.integers(0, 3)):
        price = (draw(st.integers(0, 5)), draw(st.sampled_from(["A", "B", None])), draw(GSEQ))
    if draw(st.booleans()):
        stock = (draw(st.one_of(st.none(), st.integers(0, 5))), draw(GSEQ))
    return Ev(k, lsn, "u", f"n{draw(st.integers(0, 9))}", price, stock)


@st.composite
def history(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Steps: ("write", (how, [part, ...])) or ("compact", tiered); parts may replay earlier events."""
    steps: list[tuple[str, Any]] = []
    seen: list[Ev] = []
    for _ in range(draw(st.integers(1, 6))):
        if seen and draw(st.integers(0, 4)) == 0:
            steps.append(("compact", draw(st.booleans())))
            continue
        how = draw(st.sampled_from(["single", "single", "tx", "staged"]))
        parts = []
        for _ in range(draw(st.integers(1, 3)) if how != "single" else 1):
            part = []
            for _ in range(draw(st.integers(1, 4))):
                if seen and draw(st.integers(0, 3)) == 0:
                    part.append(seen[draw(st.integers(0, len(seen) - 1))])  # a replay
                else:
                    part.append(draw(event()))
            parts.append(part)
            seen += part
        steps.append(("write", (how, parts)))
    return steps


@FAST
@given(steps=history(), buckets=st.sampled_from([1, 2, 3]), auto=st.booleans())
def test_tied_group_sequences_follow_arrival_whatever_the_delivery(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, Any]], buckets: int, auto: bool
) -> None:
    t = new_table(tmp_path_factory.mktemp("h"), buckets, auto)
    seen: list[Ev] = []
    versions: list[tuple[int, dict[int, dict[str, Any]]]] = []
    for kind, arg in steps:
        if kind == "compact":
            t.compact(tiered=arg)
        else:
            how, parts = arg
            deliver(t, parts, how)
            for p in parts:
                seen += p
        want = model(seen)
        assert rows(t) == want, (kind, arg)
        versions.append((t.version, want))
    check_reads(t, model(seen))
    for v, want in versions[-3:]:
        assert rows(t, version=v) == want, v
        assert t.scan(version=v).count() == len(want), v
    t.compact()
    check_reads(t, model(seen))


@FAST
@given(
    steps=history(),
    buckets=st.sampled_from([1, 2, 3]),
    cuts=st.lists(st.integers(0, 30), max_size=4),
    fold=st.sampled_from(["none", "full", "tiered"]),
)
def test_resplitting_one_event_stream_gives_one_table(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[str, Any]],
    buckets: int,
    cuts: list[int],
    fold: str,
) -> None:
    """The same events, cut into other writes (and folded between them): same table as the model."""
    events = [e for kind, arg in steps if kind == "write" for p in arg[1] for e in p]
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    t = new_table(tmp_path_factory.mktemp("r"), buckets)
    for lo, hi in itertools.pairwise(bounds):
        if lo < hi:
            t.upsert(batch(events[lo:hi]))
            if fold != "none":
                t.compact(tiered=fold == "tiered")
    check_reads(t, model(events))


# -- hand-made ties --------------------------------------------------------------------------------------

TIE = [
    Ev(7, 9, "u", "a", (1, "A", 6), (1, 6)),
    Ev(7, 2, "u", "b", (2, "B", 6), None),
    Ev(7, 30, "u", "c", None, (3, 6)),  # no price: a partial row above all
    Ev(7, 5, "u", "d", (4, "D", 6), (None, 6)),  # stock NULL: not carried
    Ev(7, 1, "u", "e", (5, "E", 6), (None, None)),
]


@pytest.mark.parametrize("buckets", [1, 3])
@pytest.mark.parametrize("how", ["single", "tx", "staged", "one"])
@pytest.mark.parametrize("fold", ["none", "full", "tiered", "auto"])
def test_five_ties_of_one_key_the_last_price_wins(tmp_path: Path, buckets: int, how: str, fold: str) -> None:
    t = new_table(tmp_path, buckets, auto=fold == "auto")
    if how == "one":
        t.upsert(batch(TIE))
    elif how == "single":
        for e in TIE:
            t.upsert(batch([e]))
            if fold in ("full", "tiered"):
                t.compact(tiered=fold == "tiered")
    else:
        deliver(t, [[e] for e in TIE], how)
    want = model(TIE)
    assert want[7] == {
        "k": 7,
        "price": 5,
        "currency": "E",
        "price_lsn": 6,
        "stock": 3,
        "stock_lsn": 6,
        "name": "c",
        "lsn": 30,
    }
    check_reads(t, want)
    t.compact()
    check_reads(t, want)


@pytest.mark.parametrize("d", [5, 6, 7])
@pytest.mark.parametrize("split", [0, 1, 2, 3])
@pytest.mark.parametrize("fold", [False, True])
def test_deletes_at_below_and_above_a_tie(tmp_path: Path, d: int, split: int, fold: bool) -> None:
    """A delete at d between tied prices: at or above the tie it clears them, below it they survive and
    the later arrival (after the delete) wins; a row above d brings the key back."""
    events = [
        Ev(1, 4, "u", "a", (1, "A", 6), None),
        Ev(1, 8, "u", "b", (2, "B", 6), (1, 6)),
        Ev(1, d, "d"),
        Ev(1, 3, "u", "c", (3, "C", 6), None),  # stale row, its group may still count
        Ev(1, 20, "u", "z", None, None),
    ]
    t = new_table(tmp_path, 2)
    for part in (events[:split], events[split:]):
        if part:
            t.upsert(batch(part))
            if fold:
                t.compact()
    want = model(events)
    check_reads(t, want)
    t.compact()
    check_reads(t, want)


@pytest.mark.parametrize("order", ["abc", "acb", "bac"])
def test_replays_of_tied_events_move_the_win(tmp_path: Path, order: str) -> None:
    """Replaying an earlier tied event makes it the latest arrival: it wins the tie again."""
    ev = {
        "a": Ev(2, 5, "u", "a", (1, "A", 6), (1, 6)),
        "b": Ev(2, 7, "u", "b", (2, "B", 6), (2, 6)),
        "c": Ev(2, 3, "u", "c", (3, "C", 6), None),
    }
    events = [ev[c] for c in order]
    events += [events[0], events[1]]  # replays of the first two, in that order
    t = new_table(tmp_path, 1)
    t.upsert(batch(events[:2]))
    t.compact()
    t.upsert(batch(events[2:3]))
    t.compact(tiered=True)
    for e in events[3:]:
        t.upsert(batch([e]))
    check_reads(t, model(events))
    t.compact()
    check_reads(t, model(events))


@pytest.mark.parametrize("d", [5, 6, 7])
@pytest.mark.parametrize("route", ["tx", "table"])
@pytest.mark.parametrize("auto", [False, True])
def test_blind_deletes_beside_tied_upserts(tmp_path: Path, d: int, route: str, auto: bool) -> None:
    """Blind deletes (``Table.delete`` of keys with their sequence, or in a transaction with the upserts)
    between tied group values: the model's max-delete rule, ties to the later arrival."""
    first = [Ev(3, 9, "u", "a", (1, "A", 6), (2, 6)), Ev(4, 2, "u", "b", (2, "B", 6), None)]
    second = [Ev(3, 4, "u", "c", (3, "C", 6), (None, 6)), Ev(4, 12, "u", "d", (4, "D", 6), (5, 8))]
    dels = pa.table({"k": pa.array([3, 4], pa.int64()), "lsn": pa.array([d, d], pa.int64())})
    t = new_table(tmp_path, 2, auto=auto)
    t.upsert(batch([Ev(3, 1, "u", "z", (0, "Z", 6), (0, 6))]))
    if route == "tx":
        with t.transaction() as tx:
            tx.upsert(batch(first))
            tx.delete(dels)
            tx.upsert(batch(second))
    else:
        t.upsert(batch(first))
        t.delete(dels)
        t.compact(tiered=True)
        t.upsert(batch(second))
    events = [Ev(3, 1, "u", "z", (0, "Z", 6), (0, 6)), *first, Ev(3, d, "d"), Ev(4, d, "d"), *second]
    want = model(events)
    check_reads(t, want)
    t.compact()
    check_reads(t, want)
