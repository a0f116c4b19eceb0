"""Trial 50: out-of-order, late and duplicated change arrival on keyed tables with ``sequence_by`` and the
merge engines, checked against a plain dict model of the documented semantics.

The oracle never looks at mere: an event is (key, partition, sequence, op, values); the table after any
delivery of a set of events is the model folded in sequence order (the highest sequence wins for the
default engine; the lowest for ``first_row``; the aggregate of every live version for ``max``/``min``/
``bool_and``/``bool_or``; per group for sequence groups). Deliveries shuffle, repeat and overlap batches,
mix CDC deletes, deletes by filter and by key, MERGE, compaction and time travel, and every read path is
compared: full, projected and filtered scans, key lookups, ``count()``, ``min()``/``max()``, older
versions, the change feed (applied to the older snapshot it must give the newer one) and the table after
``compact()``. Bad arguments must raise a typed ``MereError`` and leave the table as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError

PARTS = ["a", "b", "c"]

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("lsn", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
STORED = ["k", "p", "v", "s", "lsn"]


@dataclass(frozen=True)
class Ev:
    key: int
    part: str
    rank: int  # the sequence (unique per event; 3 apart so rank + 1 and rank + 2 stay free)
    op: str  # 'u' or 'd'
    v: int | None
    s: str | None


def row_of(e: Ev) -> dict[str, Any]:
    return {"k": e.key, "p": e.part, "v": e.v, "s": e.s, "lsn": e.rank}


def batch(events: list[Ev]) -> pa.Table:
    return pa.Table.from_pylist([{**row_of(e), "op": e.op} for e in events], schema=SCHEMA)


def model(events: list[Ev]) -> dict[int, dict[str, Any]]:
    """Table-wide keys, highest sequence wins (a delete wherever the key lives)."""
    best: dict[int, Ev] = {}
    for e in events:  # in commit order: equal sequences, the later commit wins
        if e.key not in best or e.rank >= best[e.key].rank:
            best[e.key] = e
    return {k: row_of(e) for k, e in best.items() if e.op == "u"}


def model_partition(events: list[Ev]) -> dict[tuple[str, int], dict[str, Any]]:
    """Partition-scoped keys: (partition, key) is the identity."""
    best: dict[tuple[str, int], Ev] = {}
    for e in events:
        ident = (e.part, e.key)
        if ident not in best or e.rank >= best[ident].rank:
            best[ident] = e
    return {i: row_of(e) for i, e in best.items() if e.op == "u"}


def rows(t: mere.Table, **kw: Any) -> dict[int, dict[str, Any]]:
    got = t.to_arrow(**kw).to_pylist()
    out = {r["k"]: r for r in got}
    assert len(out) == len(got), f"a key came out twice: {sorted(r['k'] for r in got)}"
    return out


def idents(t: mere.Table, **kw: Any) -> dict[tuple[str, int], dict[str, Any]]:
    got = t.to_arrow(**kw).to_pylist()
    out = {(r["p"], r["k"]): r for r in got}
    assert len(out) == len(got), "a (partition, key) came out twice"
    return out


def new_table(cat: mere.Catalog, name: str = "q.t", **kw: Any) -> mere.Table:
    kw.setdefault("key_scope", "table")
    return cat.create_table(
        name,
        SCHEMA,
        primary_key="k",
        partition_by="p",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        properties={"compaction.min-files": "3"},
        **kw,
    )


def expected_stale(stored: list[Ev], write: list[Ev]) -> tuple[int, int]:
    """Bounds of the rows of a write that a higher sequence of the same key replaces, in the write or
    stored (table-wide keys: anywhere): the distinct stale events, and the stale rows (replays of one
    stale event in one write count once against a stored version, once each against a row of the write:
    see the report)."""
    top: dict[int, int] = {}
    for e in stored + write:
        top[e.key] = max(top.get(e.key, -1), e.rank)
    stale = [e for e in write if e.rank < top[e.key]]
    return len(set(stale)), len(stale)


def feed_applied(before: dict[int, dict[str, Any]], feed: pa.Table) -> dict[int, dict[str, Any]]:
    """A change feed applied in its order to a copy keyed by (partition, key)."""
    state = {(r["p"], r["k"]): r for r in before.values()}
    for r in feed.to_pylist():
        ident = (r["p"], r["k"])
        change = r["_change"]
        row = {c: r[c] for c in STORED}
        if change == "delete":
            assert ident in state, f"feed deletes {ident}, not in the older snapshot"
            del state[ident]
        elif change in ("insert", "update_after"):
            state[ident] = row
        else:
            assert change == "update_before", change
    out: dict[int, dict[str, Any]] = {}
    for (_, k), row in state.items():
        assert k not in out, f"key {k} in two partitions after applying the feed"
        out[k] = row
    return out


def check_reads(t: mere.Table, expected: dict[int, dict[str, Any]], version: int | None = None) -> None:
    """Every read path of one version against the model."""
    at = {} if version is None else {"version": version}
    assert rows(t, **at) == expected
    scan = t.scan(**at)
    assert scan.count() == len(expected)
    vs = [r["v"] for r in expected.values() if r["v"] is not None]
    assert scan.min("v") == (min(vs) if vs else None)
    assert scan.max("v") == (max(vs) if vs else None)
    lsns = [r["lsn"] for r in expected.values()]
    assert scan.max("lsn") == (max(lsns) if lsns else None)
    assert scan.min("lsn") == (min(lsns) if lsns else None)
    ss = [r["s"] for r in expected.values() if r["s"] is not None]
    assert scan.max("s") == (max(ss) if ss else None)
    # projected
    proj = t.to_arrow(columns=["k", "s"], **at).to_pylist()
    assert sorted((r["k"], r["s"]) for r in proj) == sorted((r["k"], r["s"]) for r in expected.values())
    # non-key filters run after the merge: an older matching version never comes back
    for flt, keep in (
        ("v > 2", lambda r: r["v"] is not None and r["v"] > 2),
        ("s = 'x'", lambda r: r["s"] == "x"),
        ("v is null", lambda r: r["v"] is None),
        ("lsn < 30", lambda r: r["lsn"] < 30),
    ):
        want = {k: r for k, r in expected.items() if keep(r)}
        assert rows(t, filter=flt, **at) == want, flt
        assert t.scan(filter=flt, **at).count() == len(want), flt
        only_keys = t.to_arrow(columns=["k"], filter=flt, **at).column("k").to_pylist()
        assert sorted(only_keys) == sorted(want), flt
        wv = [r["v"] for r in want.values() if r["v"] is not None]
        assert t.scan(filter=flt, **at).max("v") == (max(wv) if wv else None), flt
        wl = [r["lsn"] for r in want.values()]
        assert t.scan(filter=flt, **at).min("lsn") == (min(wl) if wl else None), flt
    # partition filter (prunes) and key lookups
    for part in PARTS:
        want = {k: r for k, r in expected.items() if r["p"] == part}
        assert rows(t, filter=f"p = '{part}'", **at) == want
    for k in range(6):
        assert rows(t, filter=f"k = {k}", **at) == ({k: expected[k]} if k in expected else {})


VALS = st.sampled_from([None, 0, 1, 3, 5, 9])
STRS = st.sampled_from([None, "x", "y", ""])


@st.composite
def deliveries(draw: st.DrawFn, deletes: bool = True) -> tuple[list[Ev], list[list[Ev]], list[str]]:
    """Unique events, delivered shuffled, some twice, cut into (overlapping) batches."""
    n = draw(st.integers(1, 18))
    ranks = draw(st.permutations(range(3, 3 * n + 3, 3)))
    events = [
        Ev(
            draw(st.integers(0, 5)),
            draw(st.sampled_from(PARTS)),
            r,
            draw(st.sampled_from("uud" if deletes else "u")),
            draw(VALS),
            draw(STRS),
        )
        for r in ranks
    ]
    repeats = draw(st.lists(st.sampled_from(events), max_size=n))
    arrival = draw(st.permutations(events + repeats))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(arrival) - 1)), max_size=5)))
    batches = [arrival[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrival)]) if arrival[a:b]]
    # overlap: a batch may also carry (again) the tail of the batch before it
    out: list[list[Ev]] = []
    for i, b in enumerate(batches):
        if i and draw(st.booleans()):
            b = batches[i - 1][-draw(st.integers(1, len(batches[i - 1]))) :] + b
        out.append(b)
    actions = draw(
        st.lists(
            st.sampled_from(
                [
                    "none",
                    "compact",
                    "tiered",
                    "feed",
                    "travel",
                    "del_filter",
                    "del_keys",
                    "merge",
                    "update",
                    "merge_del",
                    "tx",
                    "compact_part",
                ]
            ),
            min_size=len(out),
            max_size=len(out),
        )
    )
    return events, out, actions


# No shrinking: a failing delivery is printed as drawn (shrinking these took minutes).
FAST = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)


# -- the default engine, table-wide keys moving partitions -------------------------------------------


@FAST
@given(case=deliveries(), data=st.data())
def test_any_arrival_of_moving_keys_equals_the_sequence_model(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[Ev], list[list[Ev]], list[str]], data: Any
) -> None:
    _, batches, actions = case
    t = new_table(mere.connect(str(tmp_path_factory.mktemp("w"))))
    seen: list[Ev] = []
    versions: list[tuple[int, dict[int, dict[str, Any]]]] = [(t.version, {})]
    extra = 0
    for b, action in zip(batches, actions):
        seen += b
        result = t.upsert(batch(b))
        low, high = expected_stale(seen[: len(seen) - len(b)], b)
        assert low <= result.stale_rows <= high, "stale_rows"
        versions.append((t.version, model(seen)))
        now = model(seen)
        if action == "compact":
            t.compact()
        elif action == "tiered":
            t.compact(tiered=True)
        elif action == "compact_part":
            t.compact(min_files=1, partition={"p": data.draw(st.sampled_from(PARTS), label="part")})
        elif action == "del_filter" and now:
            # a delete without a sequence: a marker just above the version it reads
            cut = data.draw(st.sampled_from([0, 1, 3, 5, 9]), label="del_filter v >=")
            for k, r in now.items():
                if r["v"] is not None and r["v"] >= cut:
                    seen.append(Ev(k, r["p"], r["lsn"] + 1, "d", None, None))
            t.delete(f"v >= {cut}")
            versions.append((t.version, model(seen)))
        elif action == "del_keys":
            # a blind delete of keys with their sequence, present or not, with a partition value that
            # need not be the key's (table-wide keys: deleted wherever they live). Without the partition
            # column see test_a_delete_of_keys_with_a_lower_sequence_keeps_the_newer_row.
            extra += 1
            keys = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True), label="keys")
            rank = (
                data.draw(st.sampled_from(sorted({e.rank for e in seen if e.rank % 3 == 0})), label="rank")
                + 2
            )
            for k in keys:
                seen.append(Ev(k, "a", rank, "d", None, None))
            t.delete(
                pa.table(
                    {
                        "k": pa.array(keys, pa.int64()),
                        "p": pa.array(["a"] * len(keys)),
                        "lsn": pa.array([rank] * len(keys), pa.int64()),
                    }
                )
            )
            versions.append((t.version, model(seen)))
        elif action == "update" and now:
            # an UPDATE keeps each row's sequence: it wins the tie as the later commit
            cut = data.draw(st.sampled_from([0, 3, 5]), label="update v >=")
            for k, r in now.items():
                if r["v"] is not None and r["v"] >= cut:
                    seen.append(Ev(k, r["p"], r["lsn"], "u", r["v"] + 100, "upd"))
            t.update(set={"v": "v + 100", "s": "'upd'"}, where=f"v >= {cut}")
            versions.append((t.version, model(seen)))
        elif action == "merge_del" and now:
            # a MERGE delete without a sequence: a marker just above the version it reads
            keys = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True), label="mdel")
            for k in keys:
                if k in now:
                    seen.append(Ev(k, now[k]["p"], now[k]["lsn"] + 1, "d", None, None))
            t.merge(pa.table({"k": pa.array(keys, pa.int64())})).when_matched_delete().execute()
            versions.append((t.version, model(seen)))
        elif action == "tx" and now:
            # a transaction: a delete by filter and a replay of this batch, one version
            cut = data.draw(st.sampled_from([1, 5]), label="tx v >=")
            for k, r in now.items():
                if r["v"] is not None and r["v"] >= cut:
                    seen.append(Ev(k, r["p"], r["lsn"] + 1, "d", None, None))
            seen += b
            with t.transaction() as tx:
                tx.delete(f"v >= {cut}")
                tx.upsert(batch(b))
            versions.append((t.version, model(seen)))
        elif action == "merge":
            # MERGE update/insert of whole rows = one more event per source row, sequence decides
            # (a stale update that moves its key: test_a_stale_merge_update_moving_its_key_is_ignored; a
            # stale insert of a deleted key: test_a_merge_insert_below_a_delete_in_another_partition_...)
            ups = [
                e
                for e in b
                if e.op == "u"
                and not (e.key in now and now[e.key]["p"] != e.part and e.rank < now[e.key]["lsn"])
                and (e.key in now or all(x.rank <= e.rank for x in seen if x.key == e.key))
            ]
            if not ups:
                continue
            src_events = data.draw(st.lists(st.sampled_from(ups), min_size=1, max_size=3), label="merge src")
            src = {e.key: e for e in src_events}  # one source row per key
            ev = [Ev(e.key, e.part, e.rank, "u", e.v, e.s) for e in src.values()]
            m = {e.key: e for e in ev}
            source = pa.Table.from_pylist([row_of(e) for e in m.values()], schema=SCHEMA.remove(5))
            t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
            seen += list(m.values())
            versions.append((t.version, model(seen)))
        expected = model(seen)
        assert rows(t) == expected
        if action == "feed":
            v0, then = versions[max(0, len(versions) - 3)]
            feed = t.changes(v0).read_all()
            assert feed_applied(then, feed) == expected
        if action == "travel":
            v, then = versions[len(versions) // 2]
            check_reads(t, then, v)
    expected = model(seen)
    check_reads(t, expected)
    before = t.version
    t.compact()
    check_reads(t, expected)
    feed = t.changes(versions[0][0]).read_all()
    assert feed_applied({}, feed) == expected
    for v, then in versions:
        assert rows(t, version=v) == then
    assert t.changes(before).read_all().num_rows == 0  # compaction changes no row


@pytest.mark.parametrize("scope", ["table", "partition"])
def test_a_delete_of_keys_with_a_lower_sequence_keeps_the_newer_row(tmp_path: Path, scope: str) -> None:
    t = new_table(mere.connect(str(tmp_path)), key_scope=scope)
    t.upsert(batch([Ev(0, "a", 42, "u", 1, "x")]))
    t.delete(pa.table({"k": pa.array([0], pa.int64()), "lsn": pa.array([5], pa.int64())}))
    assert rows(t) == {0: {"k": 0, "p": "a", "v": 1, "s": "x", "lsn": 42}}


@pytest.mark.parametrize("scope", ["table", "partition"])
def test_a_delete_of_keys_with_partition_and_a_lower_sequence_keeps_the_newer_row(
    tmp_path: Path, scope: str
) -> None:
    t = new_table(mere.connect(str(tmp_path)), key_scope=scope)
    t.upsert(batch([Ev(0, "a", 42, "u", 1, "x")]))
    t.delete(pa.table({"k": pa.array([0], pa.int64()), "p": ["a"], "lsn": pa.array([5], pa.int64())}))
    t.upsert(batch([Ev(0, "a", 5, "d", None, None)]))  # the same late delete as a CDC row
    assert rows(t) == {0: {"k": 0, "p": "a", "v": 1, "s": "x", "lsn": 42}}
    t.compact()
    assert rows(t) == {0: {"k": 0, "p": "a", "v": 1, "s": "x", "lsn": 42}}


STORED_30 = {5: {"k": 5, "p": "c", "v": 5, "s": "x", "lsn": 30}}


def test_a_stale_merge_update_in_place_is_ignored(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(5, "c", 30, "u", 5, "x")]))
    src = pa.Table.from_pylist([row_of(Ev(5, "c", 9, "u", 3, None))], schema=SCHEMA.remove(5))
    m = t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    assert m.stale_rows == 1
    assert rows(t) == STORED_30


def test_a_stale_merge_update_moving_its_key_is_ignored(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(5, "c", 30, "u", 5, "x")]))
    src = pa.Table.from_pylist([row_of(Ev(5, "a", 9, "u", 3, None))], schema=SCHEMA.remove(5))
    m = t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(t) == STORED_30
    assert m.stale_rows == 1


def test_a_stale_upsert_moving_its_key_is_ignored(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(5, "c", 30, "u", 5, "x")]))
    r = t.upsert(batch([Ev(5, "a", 9, "u", 3, None)]))
    assert r.stale_rows == 1
    assert rows(t) == STORED_30


def test_an_update_moving_its_key_with_a_lower_sequence_loses(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(5, "c", 30, "u", 5, "x")]))
    t.update(set={"p": "'a'", "lsn": "9"}, where="k = 5")
    assert rows(t) == STORED_30


def test_an_update_in_place_with_a_lower_sequence_loses(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(5, "c", 30, "u", 5, "x")]))
    t.update(set={"v": "7", "lsn": "9"}, where="k = 5")
    assert rows(t) == STORED_30


# -- merge engines on partition-scoped keys ------------------------------------------------------------

ENGINE_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("hi", pa.int64()),
        pa.field("lo", pa.string()),
        pa.field("some", pa.bool_()),
        pa.field("v", pa.string()),
        pa.field("lsn", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
ENGINE_COLS = ["k", "p", "hi", "lo", "some", "v", "lsn"]


@dataclass(frozen=True)
class Ee:
    key: int
    part: str
    rank: int
    op: str
    hi: int | None
    lo: str | None
    some: bool | None

    def row(self) -> dict[str, Any]:
        return {
            "k": self.key,
            "p": self.part,
            "hi": self.hi,
            "lo": self.lo,
            "some": self.some,
            "v": f"v{self.rank}",
            "lsn": self.rank,
        }


def engine_model(engine: str, events: list[Ee]) -> dict[tuple[str, int], dict[str, Any]]:
    by: dict[tuple[str, int], list[Ee]] = {}
    for e in events:
        by.setdefault((e.part, e.key), []).append(e)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for ident, evs in by.items():
        if engine == "first_row":
            out[ident] = min(evs, key=lambda e: e.rank).row()
        elif engine == "agg":
            top = max(evs, key=lambda e: e.rank).row()
            his = [e.hi for e in evs if e.hi is not None]
            los = [e.lo for e in evs if e.lo is not None]
            somes = [e.some for e in evs if e.some is not None]
            top["hi"] = max(his) if his else None
            top["lo"] = min(los) if los else None
            top["some"] = any(somes) if somes else None
            out[ident] = top
        else:  # default: the highest sequence wins, deletes included
            top_e = max(evs, key=lambda e: e.rank)
            if top_e.op == "u":
                out[ident] = top_e.row()
    return out


ENGINE_ARGS: dict[str, dict[str, Any]] = {
    "first_row": {"merge_operators": "first_row"},
    "agg": {"merge_operators": {"hi": "max", "lo": "min", "some": "bool_or"}},
    "last": {"key_scope": "partition"},
}


@st.composite
def engine_deliveries(draw: st.DrawFn, engine: str) -> tuple[list[list[Ee]], list[str]]:
    n = draw(st.integers(1, 16))
    ranks = draw(st.permutations(range(3, 3 * n + 3, 3)))
    events = [
        Ee(
            draw(st.integers(0, 4)),
            draw(st.sampled_from(PARTS[:2])),
            r,
            draw(st.sampled_from("uud" if engine == "last" else "u")),
            draw(VALS),
            draw(STRS),
            draw(st.sampled_from([None, True, False])),
        )
        for r in ranks
    ]
    repeats = draw(st.lists(st.sampled_from(events), max_size=n))
    arrival = draw(st.permutations(events + repeats))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(arrival) - 1)), max_size=5)))
    batches = [arrival[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrival)]) if arrival[a:b]]
    actions = draw(
        st.lists(
            st.sampled_from(["none", "compact", "tiered", "feed", "travel"]),
            min_size=len(batches),
            max_size=len(batches),
        )
    )
    return batches, actions


def ident_rows(t: mere.Table, **kw: Any) -> dict[tuple[str, int], dict[str, Any]]:
    got = t.to_arrow(**kw).to_pylist()
    out = {(r["p"], r["k"]): r for r in got}
    assert len(out) == len(got), "a (partition, key) came out twice"
    return out


def check_engine_reads(t: mere.Table, expected: dict[tuple[str, int], dict[str, Any]], **at: Any) -> None:
    assert ident_rows(t, **at) == expected
    scan = t.scan(**at)
    assert scan.count() == len(expected)
    for col in ("hi", "lsn", "lo"):
        vals = [r[col] for r in expected.values() if r[col] is not None]
        assert scan.min(col) == (min(vals) if vals else None), col
        assert scan.max(col) == (max(vals) if vals else None), col
    got = t.to_arrow(columns=["p", "k", "hi"], **at).to_pylist()
    assert sorted((r["p"], r["k"], r["hi"]) for r in got) == sorted(
        (r["p"], r["k"], r["hi"]) for r in expected.values()
    )
    for flt, keep in (
        ("hi >= 3", lambda r: r["hi"] is not None and r["hi"] >= 3),
        ("lo = 'x'", lambda r: r["lo"] == "x"),
        ("some", lambda r: r["some"] is True),
        ("lsn > 12", lambda r: r["lsn"] > 12),
        ("p = 'b' and hi is null", lambda r: r["p"] == "b" and r["hi"] is None),
    ):
        want = {i: r for i, r in expected.items() if keep(r)}
        assert ident_rows(t, filter=flt, **at) == want, flt
        assert t.scan(filter=flt, **at).count() == len(want), flt
        his = [r["hi"] for r in want.values() if r["hi"] is not None]
        assert t.scan(filter=flt, **at).max("hi") == (max(his) if his else None), flt
        assert t.scan(filter=flt, **at).min("lsn") == min((r["lsn"] for r in want.values()), default=None), (
            flt
        )
    for k in range(5):
        assert ident_rows(t, filter=f"k = {k}", **at) == {i: r for i, r in expected.items() if i[1] == k}


def apply_feed(
    before: dict[tuple[str, int], dict[str, Any]], feed: pa.Table
) -> dict[tuple[str, int], dict[str, Any]]:
    state = dict(before)
    for r in feed.to_pylist():
        ident = (r["p"], r["k"])
        if r["_change"] == "delete":
            assert ident in state, ident
            del state[ident]
        elif r["_change"] in ("insert", "update_after"):
            state[ident] = {c: r[c] for c in ENGINE_COLS}
    return state


@pytest.mark.parametrize("engine", ["first_row", "agg", "last"])
@FAST
@given(data=st.data())
def test_any_arrival_equals_the_engine_model(
    tmp_path_factory: pytest.TempPathFactory, engine: str, data: Any
) -> None:
    batches, actions = data.draw(engine_deliveries(engine))
    t = mere.connect(str(tmp_path_factory.mktemp("e"))).create_table(
        "q.e",
        ENGINE_SCHEMA,
        primary_key="k",
        partition_by="p",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        properties={"compaction.min-files": "3"},
        **ENGINE_ARGS[engine],
    )
    seen: list[Ee] = []
    versions = [(t.version, {})]
    for b, action in zip(batches, actions):
        seen += b
        t.upsert(pa.Table.from_pylist([{**e.row(), "op": e.op} for e in b], schema=ENGINE_SCHEMA))
        expected = engine_model(engine, seen)
        versions.append((t.version, expected))
        if action == "compact":
            t.compact()
        elif action == "tiered":
            t.compact(tiered=True)
        elif action == "feed":
            v0, then = versions[max(0, len(versions) - 3)]
            assert apply_feed(then, t.changes(v0).read_all()) == expected
        elif action == "travel":
            v, then = versions[len(versions) // 2]
            check_engine_reads(t, then, version=v)
        assert ident_rows(t) == expected
    expected = engine_model(engine, seen)
    check_engine_reads(t, expected)
    before = t.version
    t.compact()
    check_engine_reads(t, expected)
    assert apply_feed({}, t.changes(versions[0][0]).read_all()) == expected
    assert t.changes(before).read_all().num_rows == 0
    for v, then in versions:
        assert ident_rows(t, version=v) == then


# -- bad arguments: a typed MereError, and the table unchanged -----------------------------------------


def _seeded(cat: mere.Catalog, **kw: Any) -> mere.Table:
    t = new_table(cat, **kw)
    t.upsert(batch([Ev(1, "a", 30, "u", 1, "x"), Ev(2, "b", 33, "u", 2, "y"), Ev(3, "c", 36, "u", 3, None)]))
    t.upsert(batch([Ev(1, "b", 12, "u", 9, "late"), Ev(4, "a", 39, "d", None, None)]))
    return t


def _src(**cols: Any) -> pa.Table:
    return pa.table(cols)


K = pa.array([1], pa.int64())
BAD_CALLS: dict[str, Any] = {
    "upsert NULL lsn": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "lsn": pa.array([None], pa.int64()), "op": ["u"]})
    ),
    "upsert no lsn": lambda t: t.upsert(pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "op": ["u"]})),
    "upsert lsn as text": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "lsn": ["70"], "op": ["u"]})
    ),
    "upsert lsn as float": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "lsn": [70.5], "op": ["u"]})
    ),
    "upsert bad op": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "lsn": [70], "op": ["X"]})
    ),
    "upsert NULL op": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "lsn": [70], "op": pa.array([None], pa.string())})
    ),
    "upsert one NULL lsn among good rows": lambda t: t.upsert(
        pa.table(
            {
                "k": pa.array([5, 1], pa.int64()),
                "p": ["a", "a"],
                "v": [1, 2],
                "s": ["z", "z"],
                "lsn": pa.array([90, None], pa.int64()),
                "op": ["u", "u"],
            }
        )
    ),
    "upsert NULL key": lambda t: t.upsert(
        pa.table(
            {"k": pa.array([None], pa.int64()), "p": ["a"], "v": [1], "s": ["z"], "lsn": [70], "op": ["u"]}
        )
    ),
    "upsert partial row moving a key": lambda t: t.upsert(
        pa.table({"k": K, "p": ["c"], "v": [5], "lsn": [99], "op": ["u"]})
    ),
    "upsert unknown column": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "v": [1], "s": ["z"], "lsn": [70], "op": ["u"], "zz": [1]})
    ),
    "delete None": lambda t: t.delete(None),
    "delete keys NULL lsn": lambda t: t.delete(pa.table({"k": K, "lsn": pa.array([None], pa.int64())})),
    "delete keys text lsn": lambda t: t.delete(pa.table({"k": K, "lsn": ["5"]})),
    "delete bad filter": lambda t: t.delete("nope = 1"),
    "delete unparsable filter": lambda t: t.delete("k = = 1"),
    "update NULL lsn": lambda t: t.update(set={"lsn": "NULL"}, where="k = 1"),
    "update text lsn": lambda t: t.update(set={"lsn": "'abc'"}, where="k = 1"),
    "update unknown column": lambda t: t.update(set={"nope": "1"}, where="k = 1"),
    "update the key": lambda t: t.update(set={"k": "k + 100"}, where="k = 1"),
    "merge NULL lsn insert": lambda t: (
        t.merge(_src(k=pa.array([8], pa.int64()), p=["a"], v=[1], s=["z"], lsn=pa.array([None], pa.int64())))
        .when_not_matched_insert_all()
        .execute()
    ),
    "merge NULL lsn update": lambda t: (
        t.merge(_src(k=K, p=["b"], v=[1], s=["z"], lsn=pa.array([None], pa.int64())))
        .when_matched_update_all()
        .execute()
    ),
    "merge set lsn NULL": lambda t: t.merge(_src(k=K)).when_matched_update(set={"lsn": "NULL"}).execute(),
    "merge duplicate source keys": lambda t: (
        t.merge(_src(k=pa.array([1, 1], pa.int64()), p=["b", "b"], v=[1, 2], s=["z", "z"], lsn=[80, 81]))
        .when_matched_update_all()
        .execute()
    ),
    "merge bad condition": lambda t: t.merge(_src(k=K)).when_matched_update(set={"v": "s.nope"}).execute(),
    "merge no clause": lambda t: t.merge(_src(k=K)).execute(),
    "changes start after end": lambda t: t.changes(t.version, 1).read_all(),
    "changes future": lambda t: t.changes(t.version + 5).read_all(),
    "changes negative": lambda t: t.changes(-3).read_all(),
    "changes text version": lambda t: t.changes("one").read_all(),
    "changes unknown column": lambda t: t.changes(0, columns=["nope"]).read_all(),
    "changes bad filter": lambda t: t.changes(0, filter="nope > 1").read_all(),
    "changes no start": lambda t: t.changes().read_all(),
    "scan future version": lambda t: t.scan(version=t.version + 10).to_arrow(),
    "scan negative version": lambda t: t.scan(version=-1).to_arrow(),
    "scan version and tag": lambda t: t.scan(version=1, tag="x").to_arrow(),
    "scan unknown column": lambda t: t.scan(columns=["nope"]).to_arrow(),
    "scan bad filter": lambda t: t.scan(filter="v >").to_arrow(),
    "scan filter type": lambda t: t.scan(filter="s > 5").to_arrow(),
    "scan zero threads": lambda t: t.scan(threads=0).to_arrow(),
    "min unknown column": lambda t: t.scan().min("nope"),
    "max unknown column": lambda t: t.scan().max("nope"),
    "compact unknown partition column": lambda t: t.compact(partition={"nope": "a"}),
    "compact zero files": lambda t: t.compact(min_files=0),
    "set_sequence_by unknown": lambda t: t.set_sequence_by("nope"),
    "set_sequence_by key": lambda t: t.set_sequence_by("k"),
    "set_sequence_by partition": lambda t: t.set_sequence_by("p"),
    "set_sequence_by on several runs": lambda t: t.set_sequence_by("v"),
    "set_sequence_by None on several runs": lambda t: t.set_sequence_by(None),
    "set_sequence_by empty": lambda t: t.set_sequence_by([]),
    "set_sequence_by twice the column": lambda t: t.set_sequence_by(["lsn", "lsn"]),
    "set_sequence_by not a name": lambda t: t.set_sequence_by(5),
    "set_sequence_by the cdc column": lambda t: t.set_sequence_by("op"),
}


BAD_CALL_BUGS: dict[str, str] = {}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=BAD_CALL_BUGS[c]))
        if c in BAD_CALL_BUGS
        else c
        for c in sorted(BAD_CALLS)
    ],
)
def test_bad_arguments_raise_typed_errors_and_change_nothing(tmp_path: Path, call: str) -> None:
    t = _seeded(mere.connect(str(tmp_path)))
    version, before = t.version, rows(t)
    with pytest.raises(MereError):
        BAD_CALLS[call](t)
    fresh = mere.connect(str(tmp_path)).load_table("q.t")
    assert fresh.version == version
    assert rows(fresh) == before
    assert fresh.scan().count() == len(before)


# -- engines that refuse deletes under sequences --------------------------------------------------------


def _engine_table(cat: mere.Catalog, engine: str) -> mere.Table:
    t = cat.create_table(
        "q.e",
        ENGINE_SCHEMA,
        primary_key="k",
        partition_by="p",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        **ENGINE_ARGS[engine],
    )
    t.upsert(
        pa.Table.from_pylist(
            [
                {**e.row(), "op": "u"}
                for e in (Ee(1, "a", 30, "u", 5, "m", True), Ee(2, "b", 9, "u", 1, "n", False))
            ],
            schema=ENGINE_SCHEMA,
        )
    )
    t.upsert(
        pa.Table.from_pylist([{**Ee(1, "a", 6, "u", 7, "a", None).row(), "op": "u"}], schema=ENGINE_SCHEMA)
    )
    return t


REFUSED_DELETES: dict[str, Any] = {
    "cdc delete": lambda t: t.upsert(
        pa.table({"k": K, "p": ["a"], "lsn": pa.array([40], pa.int64()), "op": ["d"]})
    ),
    "cdc delete among upserts": lambda t: t.upsert(
        pa.Table.from_pylist(
            [
                {**Ee(3, "a", 50, "u", 1, "q", True).row(), "op": "u"},
                {**Ee(1, "a", 40, "u", 1, "q", True).row(), "op": "d"},
            ],
            schema=ENGINE_SCHEMA,
        )
    ),
    "delete by filter": lambda t: t.delete("k = 1"),
    "delete by value filter": lambda t: t.delete("hi > 0"),
    "delete all": lambda t: t.delete("TRUE"),
    "delete keys with partition and sequence": lambda t: t.delete(
        pa.table({"k": K, "p": ["a"], "lsn": pa.array([40], pa.int64())})
    ),
    "delete keys with sequence": lambda t: t.delete(pa.table({"k": K, "lsn": pa.array([40], pa.int64())})),
    "delete keys alone": lambda t: t.delete(pa.table({"k": K})),
    "merge delete": lambda t: (
        t.merge(pa.table({"k": K, "p": ["a"]}), on="t.k = s.k and t.p = s.p").when_matched_delete().execute()
    ),
    "merge by source delete": lambda t: (
        t.merge(pa.table({"k": pa.array([9], pa.int64()), "p": ["a"]}))
        .when_not_matched_by_source_delete()
        .execute()
    ),
    "transaction delete": lambda t: _tx(t, lambda tx: tx.delete("k = 2")),
}


def _tx(t: mere.Table, body: Any) -> None:
    with t.transaction() as tx:
        body(tx)


@pytest.mark.parametrize("engine", ["first_row", "agg"])
@pytest.mark.parametrize("call", sorted(REFUSED_DELETES))
def test_engines_refuse_deletes_and_change_nothing(tmp_path: Path, engine: str, call: str) -> None:
    t = _engine_table(mere.connect(str(tmp_path)), engine)
    version, before = t.version, ident_rows(t)
    with pytest.raises(InvalidInput):
        REFUSED_DELETES[call](t)
    fresh = mere.connect(str(tmp_path)).load_table("q.e")
    assert fresh.version == version
    assert ident_rows(fresh) == before


# -- partial updates (sequence groups) on a partitioned table with table-wide keys ----------------------

GROUP_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("c", pa.string()),
        pa.field("a", pa.int64()),
        pa.field("a_seq", pa.int64()),
        pa.field("b", pa.string()),
        pa.field("b_seq", pa.int64()),
        pa.field("lsn", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
GROUP_COLS = ["k", "p", "c", "a", "a_seq", "b", "b_seq", "lsn"]


@dataclass(frozen=True)
class Ge:
    key: int
    rank: int  # 4 apart: group sequences rank - 1 .. rank + 1 stay distinct from other events' ranks
    op: str
    a: tuple[int | None, int] | None  # (value, group sequence) when carried
    b: tuple[str | None, int] | None

    @property
    def part(self) -> str:
        return "ab"[self.key % 2]


def group_rows(events: list[Ge]) -> list[dict[str, Any]]:
    out = []
    for e in events:
        r: dict[str, Any] = {"k": e.key, "p": e.part, "lsn": e.rank, "op": e.op, "c": None}
        if e.op == "u":
            r["c"] = f"c{e.rank}"
        r["a"], r["a_seq"] = e.a if e.a else (None, None)
        r["b"], r["b_seq"] = e.b if e.b else (None, None)
        out.append(r)
    return out


def group_batch(events: list[Ge]) -> pa.Table:
    rs = group_rows(events)
    names = [f.name for f in GROUP_SCHEMA]
    for seq, col in (("a_seq", "a"), ("b_seq", "b")):
        if all(r[seq] is None for r in rs):  # a group no row carries is left out: a partial write
            names = [n for n in names if n not in (seq, col)]
    return pa.Table.from_pylist(rs, schema=pa.schema([GROUP_SCHEMA.field(n) for n in names]))


def groups_model(events: list[Ge]) -> dict[int, dict[str, Any]]:
    by: dict[int, set[Ge]] = {}
    for e in events:
        by.setdefault(e.key, set()).add(e)
    out = {}
    for k, evs in by.items():
        dels = [e.rank for e in evs if e.op == "d"]
        d = max(dels) if dels else None
        ups = [e for e in evs if e.op == "u"]
        live = [e for e in ups if d is None or e.rank > d]
        if not live:
            continue
        top = max(live, key=lambda e: e.rank)
        row: dict[str, Any] = {"k": k, "p": top.part, "c": f"c{top.rank}", "lsn": top.rank}
        for name, non_null in (("a", False), ("b", True)):
            carriers = [
                getattr(e, name)
                for e in ups
                if getattr(e, name) is not None
                and (not non_null or getattr(e, name)[0] is not None)
                and (d is None or getattr(e, name)[1] > d)
            ]
            best = max(carriers, key=lambda g: g[1]) if carriers else (None, None)
            row[name], row[f"{name}_seq"] = best
        out[k] = row
    return out


@st.composite
def group_deliveries(draw: st.DrawFn) -> tuple[list[list[Ge]], list[str]]:
    n = draw(st.integers(1, 16))
    ranks = draw(st.permutations(range(4, 4 * n + 4, 4)))
    events = []
    for r in ranks:
        op = draw(st.sampled_from("uud"))
        a = b = None
        if op == "u" and draw(st.booleans()):
            a = (draw(VALS), r + draw(st.sampled_from([-1, 0, 1])))
        if op == "u" and draw(st.booleans()):
            b = (draw(STRS), r + draw(st.sampled_from([-1, 0, 1])))
        events.append(Ge(draw(st.integers(0, 4)), r, op, a, b))
    repeats = draw(st.lists(st.sampled_from(events), max_size=n))
    arrival = draw(st.permutations(events + repeats))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(arrival) - 1)), max_size=5)))
    batches = [arrival[x:y] for x, y in zip([0, *cuts], [*cuts, len(arrival)]) if arrival[x:y]]
    actions = draw(
        st.lists(
            st.sampled_from(["none", "compact", "tiered", "feed", "travel", "tx"]),
            min_size=len(batches),
            max_size=len(batches),
        )
    )
    return batches, actions


def check_group_reads(t: mere.Table, expected: dict[int, dict[str, Any]], **at: Any) -> None:
    assert rows(t, **at) == expected
    scan = t.scan(**at)
    assert scan.count() == len(expected)
    for col in ("a", "a_seq", "b", "lsn"):
        vals = [r[col] for r in expected.values() if r[col] is not None]
        assert scan.min(col) == (min(vals) if vals else None), col
        assert scan.max(col) == (max(vals) if vals else None), col
    for flt, keep in (
        ("a >= 3", lambda r: r["a"] is not None and r["a"] >= 3),
        ("b = 'x'", lambda r: r["b"] == "x"),
        ("b is null", lambda r: r["b"] is None),
        ("p = 'a'", lambda r: r["p"] == "a"),
    ):
        want = {k: r for k, r in expected.items() if keep(r)}
        assert rows(t, filter=flt, **at) == want, flt
        # (a filtered count: test_a_filtered_count_sees_a_late_group_value)
    got = t.to_arrow(columns=["k", "b"], **at).to_pylist()
    assert sorted((r["k"], r["b"] or "") for r in got) == sorted(
        (r["k"], r["b"] or "") for r in expected.values()
    )


@FAST
@given(case=group_deliveries())
def test_partial_updates_in_any_arrival_equal_the_group_model(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[list[Ge]], list[str]]
) -> None:
    batches, actions = case
    t = mere.connect(str(tmp_path_factory.mktemp("g"))).create_table(
        "q.g",
        GROUP_SCHEMA,
        primary_key=["k", "p"],  # the partition is part of the key: table-wide keys with last_non_null
        partition_by="p",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        merge_operators={"b": "last_non_null"},
        sequence_groups={"a_seq": ["a"], "b_seq": ["b"]},
        key_scope="table",
        properties={"compaction.min-files": "3"},
    )
    seen: list[Ge] = []
    versions: list[tuple[int, dict[int, dict[str, Any]]]] = [(t.version, {})]
    for b, action in zip(batches, actions):
        seen += b
        if action == "tx":  # the same batch, cut in two, in one transaction
            with t.transaction() as tx:
                tx.upsert(group_batch(b[: len(b) // 2 + 1]))
                if b[len(b) // 2 + 1 :]:
                    tx.upsert(group_batch(b[len(b) // 2 + 1 :]))
        else:
            t.upsert(group_batch(b))
        expected = groups_model(seen)
        versions.append((t.version, expected))
        if action == "compact":
            t.compact()
        elif action == "tiered":
            t.compact(tiered=True)
        elif action == "feed":
            v0, then = versions[max(0, len(versions) - 3)]
            state = {(r["p"], r["k"]): r for r in then.values()}
            for r in t.changes(v0).read_all().to_pylist():
                if r["_change"] == "delete":
                    del state[(r["p"], r["k"])]
                elif r["_change"] in ("insert", "update_after"):
                    state[(r["p"], r["k"])] = {c: r[c] for c in GROUP_COLS}
            assert {k: r for (_, k), r in state.items()} == expected
        elif action == "travel":
            v, then = versions[len(versions) // 2]
            check_group_reads(t, then, version=v)
        assert rows(t) == expected
    expected = groups_model(seen)
    check_group_reads(t, expected)
    t.compact()
    check_group_reads(t, expected)
    for v, then in versions:
        assert rows(t, version=v) == then


def _groups_table(cat: mere.Catalog) -> mere.Table:
    return cat.create_table(
        "q.g",
        pa.schema([f for f in GROUP_SCHEMA if f.name not in ("b", "b_seq")]),
        primary_key="k",
        partition_by="p",
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"a_seq": ["a"]},
    )


def test_a_filtered_count_sees_a_late_group_value(tmp_path: Path) -> None:
    t = _groups_table(mere.connect(str(tmp_path)))
    k = pa.array([2], pa.int64())
    t.upsert(
        pa.table(
            {
                "k": k,
                "p": ["a"],
                "c": ["c36"],
                "a": pa.array([None], pa.int64()),
                "a_seq": pa.array([None], pa.int64()),
                "lsn": [36],
                "op": ["u"],
            }
        )
    )
    t.upsert(pa.table({"k": k, "p": ["a"], "c": ["late"], "a": [5], "a_seq": [16], "lsn": [16], "op": ["u"]}))
    got = t.to_arrow(filter="a >= 3").to_pylist()
    assert [(r["k"], r["a"], r["c"]) for r in got] == [(2, 5, "c36")]
    assert t.scan(filter="a >= 3").count() == 1


# -- targeted: CDC idioms, truncate, feeds over ranges ----------------------------------------------------


def test_a_conditional_merge_keeps_the_newest_and_moves_keys(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(1, "a", 30, "u", 1, "x"), Ev(2, "b", 30, "u", 2, "y")]))
    src = pa.Table.from_pylist(
        [
            row_of(Ev(1, "c", 10, "u", 7, "old")),
            row_of(Ev(2, "c", 40, "u", 8, "new")),
            row_of(Ev(3, "a", 5, "u", 9, "z")),
        ],
        schema=SCHEMA.remove(5),
    )
    m = (
        t.merge(src)
        .when_matched_update_all(condition="s.lsn > t.lsn")
        .when_not_matched_insert_all()
        .execute()
    )
    assert (m.updated, m.inserted) == (1, 1)
    expected = {
        1: {"k": 1, "p": "a", "v": 1, "s": "x", "lsn": 30},
        2: {"k": 2, "p": "c", "v": 8, "s": "new", "lsn": 40},
        3: {"k": 3, "p": "a", "v": 9, "s": "z", "lsn": 5},
    }
    check_reads(t, expected)
    t.upsert(batch([Ev(2, "b", 35, "u", 0, "late")]))  # late, in the key's old partition
    check_reads(t, expected)
    t.compact()
    check_reads(t, expected)


def test_truncate_drops_tombstones_and_later_events_apply(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(1, "a", 30, "u", 1, "x"), Ev(2, "b", 40, "d", None, None)]))
    t.compact()
    t.truncate()
    assert rows(t) == {}
    t.upsert(batch([Ev(2, "c", 10, "u", 2, "back"), Ev(1, "a", 20, "u", 3, "older")]))
    expected = {
        1: {"k": 1, "p": "a", "v": 3, "s": "older", "lsn": 20},
        2: {"k": 2, "p": "c", "v": 2, "s": "back", "lsn": 10},
    }
    check_reads(t, expected)


@FAST
@given(case=deliveries())
def test_feeds_between_any_two_versions_bridge_their_snapshots(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[Ev], list[list[Ev]], list[str]]
) -> None:
    _, batches, actions = case
    t = new_table(mere.connect(str(tmp_path_factory.mktemp("f"))))
    snaps = [(t.version, {})]
    seen: list[Ev] = []
    for b, action in zip(batches, actions):
        seen += b
        t.upsert(batch(b))
        if action in ("compact", "tiered"):
            t.compact(tiered=action == "tiered")
        snaps.append((t.version, model(seen)))
    for i, (v0, s0) in enumerate(snaps):
        for v1, s1 in snaps[i + 1 :]:
            feed = t.changes(v0, v1).read_all()
            assert feed_applied(s0, feed) == s1, (v0, v1)
            assert set(feed.column("_version").to_pylist()) <= set(range(v0 + 1, v1 + 1))
            # a filter keeps the feed rows it holds for; columns project (key and partition first)
            part = t.changes(v0, v1, columns=["v"], filter="v > 2").read_all()
            assert set(part.column_names[:2]) == {"k", "p"} and part.column_names[2] == "v"
            want = sorted(
                (r["k"], r["p"], r["v"], r["_change"])
                for r in feed.to_pylist()
                if r["v"] is not None and r["v"] > 2
            )
            assert sorted((r["k"], r["p"], r["v"], r["_change"]) for r in part.to_pylist()) == want


def test_a_merge_insert_below_a_delete_in_another_partition_stays_deleted(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(4, "c", 24, "d", None, None)]))
    source = pa.Table.from_pylist([row_of(Ev(4, "a", 9, "u", 9, ""))], schema=SCHEMA.remove(5))
    m = t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(t) == {}
    assert m.stale_rows == 1


def test_a_merge_insert_below_a_delete_in_its_partition_stays_deleted(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(4, "a", 24, "d", None, None)]))
    source = pa.Table.from_pylist([row_of(Ev(4, "a", 9, "u", 9, ""))], schema=SCHEMA.remove(5))
    m = t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(t) == {}
    assert m.stale_rows == 1
    assert t.upsert(batch([Ev(4, "c", 9, "u", 9, "")])).stale_rows == 1
    assert rows(t) == {}


def test_deletes_by_partition_filter_follow_where_a_moved_key_lives(tmp_path: Path) -> None:
    t = new_table(mere.connect(str(tmp_path)))
    t.upsert(batch([Ev(1, "a", 10, "u", 1, "x")]))
    t.upsert(batch([Ev(1, "b", 20, "u", 2, "y")]))
    t.upsert(batch([Ev(1, "a", 15, "u", 3, "late")]))  # late, in the partition it left
    moved = {1: {"k": 1, "p": "b", "v": 2, "s": "y", "lsn": 20}}
    check_reads(t, moved)
    assert t.delete("p = 'a'").no_change
    t.upsert(batch([Ev(1, "c", 5, "u", 3, "later")]))
    check_reads(t, moved)
    t.delete("p = 'b' and v > 0")
    t.upsert(batch([Ev(1, "b", 20, "u", 2, "y")]))  # a replay of the deleted version stays deleted
    check_reads(t, {})
    t.upsert(batch([Ev(1, "a", 22, "u", 9, "new")]))
    t.compact()
    back = {1: {"k": 1, "p": "a", "v": 9, "s": "new", "lsn": 22}}
    check_reads(t, back)
    assert feed_applied({}, t.changes(0).read_all()) == back
