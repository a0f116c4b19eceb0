"""Sequence ordering (``sequence_by``): the version of a key with the highest sequence wins, whatever the
order of commits and of rows in a batch.

The backbone is a property: any permutation and duplication of a list of sequenced events (upserts and
CDC deletes of a few keys), cut into random commits, with compactions (``compact()`` and the automatic
tiered policy), deletes without a sequence (by filter, by key) and time travel in between, gives the
table a plain dict model gives by applying the events in sequence order, at every commit, through full
scans and key lookups. Then targeted tests:
ties, deletes followed by late events (no resurrection, also after compaction), tombstone expiry (a late
event does come back after it), deletes without a sequence, MERGE, UPDATE, the change feed, changing
``sequence_by`` on an existing table, and bad input (typed errors, nothing committed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError, SchemaChanged, SchemaMismatch, UnsupportedType

EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class SeqType:
    """A sequence shape: its columns and a map from an integer rank to values of the same order."""

    name: str
    fields: tuple[pa.Field, ...]
    values: Callable[[int], tuple[Any, ...]]

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.fields]


SEQ_TYPES = [
    SeqType("int64", (pa.field("seq", pa.int64()),), lambda i: (i,)),
    SeqType("uint32", (pa.field("seq", pa.uint32()),), lambda i: (i,)),
    SeqType("string", (pa.field("seq", pa.string()),), lambda i: (f"{i:05d}",)),
    SeqType("decimal", (pa.field("seq", pa.decimal128(12, 2)),), lambda i: (Decimal(i) / 4,)),
    SeqType(
        "timestamp",
        (pa.field("seq", pa.timestamp("us", tz="UTC")),),
        lambda i: (EPOCH + dt.timedelta(microseconds=i),),
    ),
    SeqType("date", (pa.field("seq", pa.date32()),), lambda i: (dt.date(2000, 1, 1) + dt.timedelta(days=i),)),
    SeqType(  # lexicographic: the first column decides, the second breaks its ties
        "int32+string",
        (pa.field("epoch", pa.int32()), pa.field("pos", pa.string())),
        lambda i: (i // 3, f"{i % 3:02d}"),
    ),
]


@dataclass(frozen=True)
class Event:
    key: int
    rank: int  # the sequence, as an order-preserving rank (SeqType.values maps it to column values)
    op: str  # 'u' or 'd'
    value: str


def schema_of(seq: SeqType, key_type: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("k", key_type, nullable=False),
            pa.field("p", pa.int64()),
            pa.field("v", pa.string()),
            *seq.fields,
            pa.field("op", pa.string()),
        ]
    )


def key_value(key: int, key_type: pa.DataType) -> Any:
    return key if pa.types.is_integer(key_type) else f"key-{key:03d}"


def batch_of(events: list[Event], seq: SeqType, key_type: pa.DataType) -> pa.Table:
    rows = []
    for e in events:
        row = {"k": key_value(e.key, key_type), "p": e.key % 2, "v": e.value, "op": e.op}
        row.update(zip(seq.columns, seq.values(e.rank)))
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema_of(seq, key_type))


def model_of(events: list[Event], seq: SeqType, key_type: pa.DataType) -> dict[Any, dict[str, Any]]:
    """The events applied in sequence order (unique ranks: the order is total)."""
    state: dict[Any, dict[str, Any]] = {}
    for e in sorted(set(events), key=lambda e: e.rank):
        k = key_value(e.key, key_type)
        if e.op == "d":
            state.pop(k, None)
        else:
            state[k] = {"k": k, "p": e.key % 2, "v": e.value, **dict(zip(seq.columns, seq.values(e.rank)))}
    return state


def table_rows(t: mere.Table, **kwargs: Any) -> dict[Any, dict[str, Any]]:
    rows = t.to_arrow(**kwargs).to_pylist()
    out = {r["k"]: r for r in rows}
    assert len(out) == len(rows), "a key came out twice"
    return out


def new_table(cat: mere.Catalog, name: str, seq: SeqType, key_type: pa.DataType, **props: str) -> mere.Table:
    return cat.create_table(
        name,
        schema_of(seq, key_type),
        primary_key="k",
        partition_by="p",
        buckets=2,
        cdc_column="op",
        sequence_by=seq.columns,
        properties={"compaction.min-files": "3", **props},
        key_scope="partition",  # rows are (partition, key); tests/table/test_key_scope.py moves keys
    )


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[Event], list[list[Event]], list[tuple[str, int]]]:
    """Events with unique sequences, then their delivery: shuffled, some repeated, cut into commits, and
    an action after each commit (with a key, for deletes without a sequence)."""
    n = draw(st.integers(1, 24))
    keys = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    ops = draw(st.lists(st.sampled_from("uud"), min_size=n, max_size=n))
    ranks = draw(st.permutations(range(0, 3 * n, 3)))  # gaps: a delete's successor never hits a rank
    events = [Event(k, r, o, f"{o}{r}") for k, r, o in zip(keys, ranks, ops)]
    repeats = draw(st.lists(st.sampled_from(events), max_size=n))
    arrival = draw(st.permutations(events + repeats))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(arrival) - 1)), max_size=6)))
    batches = [arrival[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrival)]) if arrival[a:b]]
    actions = draw(
        st.lists(
            st.tuples(
                st.sampled_from(
                    ["none", "compact", "tiered", "travel", "lookup", "delete_filter", "delete_keys"]
                ),
                st.integers(0, 5),
            ),
            min_size=len(batches),
            max_size=len(batches),
        )
    )
    return events, batches, actions


@pytest.mark.parametrize("seq", SEQ_TYPES, ids=lambda s: s.name)
@settings(max_examples=15)
@given(case=deliveries(), string_key=st.booleans())
def test_any_delivery_gives_the_sequence_order(
    tmp_path_factory: pytest.TempPathFactory,
    seq: SeqType,
    case: tuple[list[Event], list[list[Event]], list[tuple[str, int]]],
    string_key: bool,
) -> None:
    events, batches, actions = case
    key_type = pa.string() if string_key else pa.int64()
    cat = mere.connect(str(tmp_path_factory.mktemp("seq")))
    t = new_table(cat, "s.t", seq, key_type)
    seen: list[Event] = []
    versions: list[tuple[int, dict[Any, dict[str, Any]]]] = []
    for batch, (action, target) in zip(batches, actions):
        seen += batch
        result = t.upsert(batch_of(batch, seq, key_type))
        versions.append((result.version, model_of(seen, seq, key_type)))
        if action == "compact":
            t.compact()
        elif action == "tiered":
            t.compact(tiered=True)
        elif action.startswith("delete"):
            # A delete without a sequence: the version it reads is deleted, and its replays (a marker just
            # above it: ranks are 3 apart, so rank + 1 stands for it), not a newer event.
            k = key_value(target, key_type)
            if k in model_of(seen, seq, key_type):
                seen.append(Event(target, max(e.rank for e in seen if e.key == target) + 1, "d", "manual"))
            literal = k if isinstance(k, int) else f"'{k}'"
            t.delete(f"k = {literal}" if action == "delete_filter" else pa.table({"k": [k]}))
            versions.append((t.version, model_of(seen, seq, key_type)))
        expected = model_of(seen, seq, key_type)
        assert table_rows(t) == expected
        if action == "travel":
            v, then = versions[len(versions) // 2]
            assert table_rows(t, version=v) == then
        if action == "lookup":
            for k in {key_value(e.key, key_type) for e in events}:
                literal = k if isinstance(k, int) else f"'{k}'"
                assert table_rows(t, filter=f"k = {literal}") == ({k: expected[k]} if k in expected else {})
    t.compact()
    assert table_rows(t) == model_of(seen, seq, key_type)
    for v, then in versions:
        assert table_rows(t, version=v) == then


# -- ties, deletes and late events ---------------------------------------------------------------------


def rows(t: mere.Table) -> list[tuple[Any, ...]]:
    return sorted((r["k"], r["v"], r["seq"]) for r in t.to_arrow(columns=["k", "v", "seq"]).to_pylist())


@pytest.fixture
def t(local_cat: mere.Catalog) -> mere.Table:
    return new_table(local_cat, "s.t", SEQ_TYPES[0], pa.int64())


def up(t: mere.Table, *events: tuple[int, int, str, str]) -> mere.CommitResult:
    """Upsert (key, seq, op, value) rows in this order."""
    return t.upsert(
        pa.table(
            {
                "k": [e[0] for e in events],
                "p": [e[0] % 2 for e in events],
                "v": [e[3] for e in events],
                "seq": [e[1] for e in events],
                "op": [e[2] for e in events],
            }
        )
    )


def test_equal_sequences_fall_back_to_commit_order_then_row_order(t: mere.Table) -> None:
    up(t, (1, 5, "u", "first"), (1, 5, "u", "second"))  # one batch: the later row
    assert rows(t) == [(1, "second", 5)]
    up(t, (1, 5, "u", "third"))  # a later commit of the same sequence
    assert rows(t) == [(1, "third", 5)]
    up(t, (1, 4, "u", "older"))  # a lower sequence, committed later: ignored
    assert rows(t) == [(1, "third", 5)]
    t.compact()
    up(t, (1, 5, "u", "fourth"))
    assert rows(t) == [(1, "fourth", 5)]


def test_stale_rows_counts_rows_a_higher_sequence_replaced_in_the_write(t: mere.Table) -> None:
    result = up(t, (1, 3, "u", "a"), (1, 9, "u", "b"), (1, 9, "u", "b"), (2, 1, "u", "c"), (1, 2, "d", ""))
    assert result.stale_rows == 2  # (1, 3) and (1, 2); the repeated (1, 9) is the same event
    assert result.rows_written == 5
    assert up(t, (1, 1, "u", "late")).stale_rows == 1  # older than the stored version: counted too
    assert rows(t) == [(1, "b", 9), (2, "c", 1)]
    assert t.history()[-1].summary["stale_rows"] == 1
    assert up(t, (1, 9, "u", "b")).stale_rows == 0  # a replay of the stored version is not stale


def test_a_delete_is_never_undone_by_a_late_lower_event(t: mere.Table) -> None:
    up(t, (1, 1, "u", "a"), (2, 1, "u", "b"))
    up(t, (1, 10, "d", ""))
    up(t, (1, 5, "u", "late"))
    assert rows(t) == [(2, "b", 1)]
    t.compact()  # the delete stays as a tombstone (key and sequence)
    assert [f["content"] for f in t.files().to_pylist()].count("delete") == 1
    up(t, (1, 7, "u", "later"))
    t.compact(tiered=True)
    up(t, (1, 9, "u", "latest"))
    t.compact()
    assert rows(t) == [(2, "b", 1)]
    up(t, (1, 11, "u", "new"))  # a newer event brings the key back
    assert rows(t) == [(1, "new", 11), (2, "b", 1)]


def test_tombstones_expire_after_their_retention(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64())])
    props = {"sequence.tombstone-retention": "0", "compaction.auto": "off", "compaction.min-files": "8"}
    t = local_cat.create_table("s.x", schema, primary_key="k", buckets=1, sequence_by="seq", properties=props)

    def put(k: int, seq: int, v: str | None) -> None:
        if v is None:
            t.delete(pa.table({"k": [k], "seq": [seq]}))
        else:
            t.upsert(pa.table({"k": [k], "v": [v], "seq": [seq]}))

    t.upsert(pa.table({"k": range(100, 200), "v": ["base"] * 100, "seq": [1] * 100}))  # the oldest run
    put(1, 1, "a")
    put(1, 10, None)
    put(1, 5, "late")
    for i in range(5):
        put(300 + i, 1, "other")
    base = t.files().column("path").to_pylist()[0]
    t.compact(tiered=True)  # folds the newest runs only: the tombstone stays, whatever its age
    assert base in t.files().column("path").to_pylist()
    put(1, 6, "late too")
    assert t.to_arrow(filter="k = 1").num_rows == 0
    t.compact()  # a full fold: the tombstone is older than the retention (0) and goes
    assert t.files().column("content").to_pylist() == ["data"]
    assert t.to_arrow(filter="k = 1").num_rows == 0  # it went with the versions it had beaten
    put(1, 4, "after expiry")  # documented: a late event after the expiry comes back
    assert t.to_arrow(filter="k = 1", columns=["v"]).to_pylist() == [{"v": "after expiry"}]


def test_tombstones_keep_the_time_of_their_delete_through_folds(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat, "s.y", SEQ_TYPES[0], pa.int64(), **{"sequence.tombstone-retention": "1h"})
    up(t, (1, 10, "d", ""), (3, 1, "u", "c"))
    up(t, (2, 1, "u", "b"))
    t.compact()
    up(t, (1, 2, "u", "late"), (3, 2, "u", "d"))
    t.compact()  # the tombstone of key 1 is rewritten, still within the hour
    up(t, (1, 3, "u", "later"))
    t.compact()
    assert rows(t) == [(2, "b", 1), (3, "d", 2)]
    stamps = [
        pq.read_table(t.storage.full_path(p)).to_pydict().get("_mere_deleted_at")
        for p in t.files().column("path").to_pylist()
    ]
    deleted_at = t.history()[1].committed_at
    assert [s for found in stamps if found for s in found if s is not None] == [deleted_at]


# -- deletes without a sequence, MERGE, UPDATE ---------------------------------------------------------


def test_deletes_without_a_sequence_delete_the_version_read(t: mere.Table) -> None:
    up(t, (1, 5, "u", "a"), (2, 5, "u", "b"), (3, 5, "u", "c"))
    assert t.delete("k = 1").rows_deleted == 1
    assert t.delete(pa.table({"k": [2]})).rows_deleted == 1  # keys without sequence: read as well
    assert t.delete(pa.table({"k": [3], "p": [0]})).rows_deleted == 0  # key 3 lives in partition 1
    up(t, (1, 5, "u", "replayed"), (2, 4, "u", "older"))  # a replay of the deleted version: still gone
    assert rows(t) == [(3, "c", 5)]
    up(t, (1, 6, "u", "newer"), (2, 6, "u", "newer"))  # any newer event comes back
    assert rows(t) == [(1, "newer", 6), (2, "newer", 6), (3, "c", 5)]
    # Keys with their sequence are deleted blind, at that sequence.
    result = t.delete(pa.table({"k": [3], "p": [1], "seq": [4]}))
    assert result.rows_deleted is None and result.delete_markers == 1
    assert rows(t)[-1] == (3, "c", 5)  # a delete of sequence 4 is older than version 5
    t.delete(pa.table({"k": [3], "p": [1], "seq": [8]}))
    assert [r[0] for r in rows(t)] == [1, 2]


def test_sequences_of_every_type_step_past_the_deleted_version(local_cat: mere.Catalog) -> None:
    for i, seq in enumerate(SEQ_TYPES):
        t = new_table(local_cat, f"s.d{i}", seq, pa.int64())
        t.upsert(batch_of([Event(1, 6, "u", "a")], seq, pa.int64()))
        t.delete("k = 1")
        t.upsert(batch_of([Event(1, 6, "u", "replay")], seq, pa.int64()))
        assert t.to_arrow().num_rows == 0, seq.name
        t.upsert(batch_of([Event(1, 7, "u", "next")], seq, pa.int64()))
        assert t.to_arrow(columns=["v"]).to_pylist() == [{"v": "next"}], seq.name


def test_update_and_merge_follow_sequences(t: mere.Table) -> None:
    up(t, (1, 5, "u", "a"), (2, 5, "u", "b"))
    t.update({"v": "'set'"}, "k = 1")  # keeps the row's sequence: wins the tie as the later commit
    assert rows(t) == [(1, "set", 5), (2, "b", 5)]
    lost = t.update({"v": "'lower'", "seq": "1"}, "k = 2")  # an update to a lower sequence loses
    assert rows(t) == [(1, "set", 5), (2, "b", 5)]
    assert lost.stale_rows == 1, lost  # counted as lost
    source = pa.table({"k": [1, 2, 3], "p": [1, 0, 1], "v": ["m1", "m2", "m3"], "seq": [4, 9, 1]})
    (
        t.merge(source)
        .when_matched_delete(condition="s.k = 1")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert rows(t) == [(2, "m2", 9), (3, "m3", 1)]
    up(t, (1, 5, "u", "replay"))  # the MERGE deleted version 5 of key 1: its replay stays deleted
    assert [r[0] for r in rows(t)] == [2, 3]
    with pytest.raises(InvalidInput, match="'seq'"):
        t.merge(pa.table({"k": [7], "p": [1], "v": ["x"]})).when_not_matched_insert_all().execute()


@settings(max_examples=25, deadline=None)
@given(
    stored=st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 50), st.booleans()),
        min_size=1,
        max_size=12,
        unique_by=lambda e: e[1],
    ),
    source=st.dictionaries(st.integers(0, 8), st.integers(1, 60), min_size=1, max_size=6),
    compact=st.booleans(),
    string_keys=st.booleans(),
    seq=st.sampled_from([SEQ_TYPES[0], SEQ_TYPES[2]]),
)
def test_merge_counts_the_rows_it_writes_below_a_stored_sequence(
    tmp_path_factory: pytest.TempPathFactory,
    stored: list[tuple[int, int, bool]],
    source: dict[int, int],
    compact: bool,
    string_keys: bool,
    seq: SeqType,
) -> None:
    key_type = pa.string() if string_keys else pa.int64()
    t = new_table(mere.connect(str(tmp_path_factory.mktemp("ms"))), "s.m", seq, key_type)
    for i in range(0, len(stored), 4):  # a few commits, sequences in any order
        part = stored[i : i + 4]
        t.upsert(batch_of([Event(k, q, "d" if d else "u", f"s{q}") for k, q, d in part], seq, key_type))
    if compact:
        t.compact()
    # The model: each key's highest stored sequence (a row's or a delete's) and its live winner.
    top: dict[int, tuple[int, bool]] = {}
    for k, q, d in stored:
        if k not in top or q > top[k][0]:
            top[k] = (q, d)
    live = {k for k, (_, d) in top.items() if not d}
    src = pa.table(
        {
            "k": pa.array([key_value(k, key_type) for k in source], key_type),
            "p": [k % 2 for k in source],
            "v": [f"m{q}" for q in source.values()],
            "seq": pa.array([seq.values(q)[0] for q in source.values()], seq.fields[0].type),
        }
    )
    m = t.merge(src).when_matched_update_all().when_not_matched_insert_all().execute()
    assert m.updated == len(live & source.keys())
    want_stale = sum(1 for k, q in source.items() if k in top and q < top[k][0])
    assert m.stale_rows == want_stale
    assert next(s for s in t.history() if s.version == m.version).summary.get("stale_rows") == want_stale
    want = {k: f"s{q}" for k, (q, d) in top.items() if not d}
    for k, q in source.items():
        if k not in top or q >= top[k][0]:
            want[k] = f"m{q}"
    assert {r["k"]: r["v"] for r in table_rows(t).values()} == {
        key_value(k, key_type): v for k, v in want.items()
    }


def test_merge_metrics_of_a_replayed_merge_keep_the_stale_count(t: mere.Table) -> None:
    up(t, (1, 5, "u", "a"), (3, 8, "d", ""))
    source = pa.table({"k": [1, 2, 3], "p": [1, 0, 1], "v": ["x", "y", "z"], "seq": [4, 1, 7]})
    merge = t.merge(source).when_matched_update_all().when_not_matched_insert_all()
    m = merge.execute(idempotency_key="m-1")
    assert (m.updated, m.inserted, m.stale_rows) == (1, 2, 2)  # 1 below 5, 3 below its delete at 8
    again = (
        t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute(idempotency_key="m-1")
    )
    assert again.already_committed and again.stale_rows == 2
    assert rows(t) == [(1, "a", 5), (2, "y", 1)]


def test_the_change_feed_skips_late_events(t: mere.Table) -> None:
    start = up(t, (1, 5, "u", "a"), (2, 5, "u", "b")).version
    up(t, (1, 3, "u", "late"), (2, 6, "u", "new"), (3, 1, "d", ""))
    feed = t.changes(start).read_all().to_pylist()
    assert sorted((r["k"], r["_change"], r["v"]) for r in feed) == [
        (2, "update_after", "new"),
        (2, "update_before", "b"),
    ]


def test_the_change_log_is_not_used_with_sequences(local_cat: mere.Catalog) -> None:
    t = new_table(local_cat, "s.l", SEQ_TYPES[0], pa.int64(), **{"changes.log": "on"})
    start = up(t, (1, 5, "u", "a")).version
    up(t, (1, 3, "u", "late"))
    assert t.files().column("content").to_pylist() == ["data", "data"]  # no log file
    assert t.changes(start).read_all().num_rows == 0


def test_lookups_find_a_winner_in_an_older_file(t: mere.Table) -> None:
    up(t, *[(k, 100, "u", f"v{k}") for k in range(200)])
    for _ in range(3):
        up(t, *[(k, 1, "u", "late") for k in range(0, 200, 7)])
    assert table_rows(t, filter="k = 14")[14]["v"] == "v14"
    assert table_rows(t, filter="k IN (7, 8)")[7]["v"] == "v7"
    assert {r["v"] for r in t.to_arrow().to_pylist()} == {f"v{k}" for k in range(200)}


def test_one_big_run_and_a_few_newer_rows(t: mere.Table) -> None:
    """The reader's fast path (a big sorted run and a few newer rows searched in it) follows sequences."""
    up(t, *[(k, 10, "u", "base") for k in range(0, 4000, 2)])
    t.compact()
    t.set_properties({"compaction.auto": "off"})
    up(t, (4, 9, "u", "older"), (6, 11, "u", "newer"), (8, 12, "d", ""), (10, 3, "d", ""), (5, 1, "u", "new"))
    up(t, (12, 10, "u", "tie"), (14, 10, "d", ""))  # equal sequences: the later commit
    assert len(t.files()) == 2 + 3 + 1  # base (2 buckets), three delta files, a delete file
    got = table_rows(t)
    assert got[4]["v"] == "base" and got[6]["v"] == "newer" and 8 not in got and got[10]["v"] == "base"
    assert got[12]["v"] == "tie" and 14 not in got
    assert got[5]["v"] == "new" and len(got) == 1999


# -- sequence_by on an existing table ------------------------------------------------------------------


def plain(cat: mere.Catalog, name: str = "s.plain") -> mere.Table:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64())])
    return cat.create_table(name, schema, primary_key="k", buckets=2, properties={"compaction.auto": "off"})


def test_set_sequence_by_on_an_empty_or_compacted_table(local_cat: mere.Catalog) -> None:
    t = plain(local_cat)
    assert t.set_sequence_by("seq").operation == "set-sequence-by"
    assert t.sequence_by == ("seq",) and t.set_sequence_by(["seq"]) is None
    t.upsert(pa.table({"k": [1], "v": ["a"], "seq": [5]}))
    t.upsert(pa.table({"k": [1], "v": ["late"], "seq": [2]}))
    assert t.to_arrow(columns=["v"]).to_pylist() == [{"v": "a"}]
    with pytest.raises(InvalidInput, match="compact"):  # two runs: clearing could reorder them
        t.set_sequence_by(None)
    t.compact()
    before = t.version
    t.set_sequence_by(None)
    assert t.sequence_by == () and t.version == before + 1
    t.upsert(pa.table({"k": [1], "v": ["late"], "seq": [2]}))  # commit order now
    assert t.to_arrow(columns=["v"]).to_pylist() == [{"v": "late"}]
    assert t.to_arrow(columns=["v"], version=before).to_pylist() == [{"v": "a"}]


def test_set_sequence_by_refuses_what_would_reorder_data(local_cat: mere.Catalog) -> None:
    t = plain(local_cat)
    t.upsert(pa.table({"k": [1, 2], "v": ["a", "b"], "seq": [5, 1]}))
    t.upsert(pa.table({"k": [1], "v": ["c"], "seq": [2]}))
    version = t.version
    with pytest.raises(InvalidInput, match="sorted runs"):
        t.set_sequence_by("seq")
    t.delete("k = 2")
    t.compact()  # one run, no delete markers (a full fold drops them)
    t.upsert(pa.table({"k": [3], "v": ["x"], "seq": [None]}, schema=t.schema))
    t.compact()
    with pytest.raises(InvalidInput, match="NULL"):
        t.set_sequence_by("seq")
    t.update({"seq": "0"}, "seq IS NULL")
    t.delete(pa.table({"k": [9]}))  # a blind delete marker without sequence
    with pytest.raises(InvalidInput, match="sorted runs"):
        t.set_sequence_by("seq")
    t.compact()
    version = t.version
    assert t.set_sequence_by("seq") is not None and t.version == version + 1
    assert sorted(r["v"] for r in t.to_arrow().to_pylist()) == ["c", "x"]
    t.rollback(version)  # the order of that version comes back with it
    assert t.sequence_by == ()


def test_set_sequence_by_refuses_delete_markers_without_a_sequence(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64()), ("op", pa.string())])
    t = local_cat.create_table("s.m", schema, primary_key="k", buckets=1, cdc_column="op")
    t.upsert(pa.table({"k": [1, 2], "v": ["a", None], "seq": [1, None], "op": ["c", "d"]}))  # one run
    with pytest.raises(InvalidInput, match="delete markers"):
        t.set_sequence_by("seq")
    assert t.refresh().sequence_by == () and t.version == 1


def test_a_handle_older_than_the_sequence_change_refreshes(local_cat: mere.Catalog) -> None:
    t = plain(local_cat)
    other = local_cat.table("s.plain")
    t.set_sequence_by("seq")
    with pytest.raises(SchemaChanged):
        other.upsert(pa.table({"k": [1], "v": ["a"], "seq": [None]}, schema=other.schema))
    assert t.to_arrow().num_rows == 0
    other.refresh()
    with pytest.raises(InvalidInput, match="NULL"):
        other.upsert(pa.table({"k": [1], "v": ["a"], "seq": [None]}, schema=other.schema))


def test_sequence_columns_can_be_renamed_and_widened_not_dropped(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("seq", pa.int32())])
    t = local_cat.create_table("s.e", schema, primary_key="k", sequence_by="seq")
    t.upsert(pa.table({"k": [1], "v": ["a"], "seq": pa.array([5], pa.int32())}))
    t.widen("seq", pa.int64())
    t.rename_column("seq", "lsn")
    assert t.sequence_by == ("lsn",)
    t.upsert(pa.table({"k": [1], "v": ["late"], "lsn": [4]}))
    assert t.to_arrow().to_pylist() == [{"k": 1, "v": "a", "lsn": 5}]
    with pytest.raises(InvalidInput, match="sequence_by"):
        t.drop_column("lsn")


def test_a_spec_with_sequence_by_is_stored_in_format_3(local_cat: mere.Catalog) -> None:
    t = plain(local_cat)
    assert '"format": 1' in t.record.spec and "sequence_by" not in t.record.spec
    t.set_sequence_by("seq")
    assert '"format": 3' in t.refresh().record.spec
    assert local_cat.table("s.plain").sequence_by == ("seq",)


# -- bad input: typed errors, nothing committed --------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sequence_by": "k"}, InvalidInput, "primary-key column"),
        ({"sequence_by": "p"}, InvalidInput, "partition column"),
        ({"sequence_by": "nope"}, SchemaMismatch, "not a column"),
        ({"sequence_by": "op"}, SchemaMismatch, "change column is not stored"),
        ({"sequence_by": "f"}, UnsupportedType, "double"),
        ({"sequence_by": ["seq", "seq"]}, InvalidInput, "duplicate"),
        ({"sequence_by": 5}, InvalidInput, "column name"),
        ({"sequence_by": "seq", "merge_operators": {"n": "sum"}}, InvalidInput, "added twice"),
        ({"sequence_by": "seq", "merge_operators": {"v": "concat"}}, InvalidInput, "added twice"),
        ({"sequence_by": "seq", "merge_operators": {"v": "last_non_null"}}, InvalidInput, "per column"),
        (
            {"sequence_by": "seq", "primary_key": None, "partition_by": None, "cdc_column": None},
            InvalidInput,
            "needs a primary key",
        ),
        ({"sequence_by": "seq", "properties": {"sequence.tombstone-retention": "soon"}}, InvalidInput, "dur"),
        ({"sequence_by": "seq", "properties": {"sequence.tombstone": "1d"}}, InvalidInput, "unknown"),
    ],
)
def test_bad_sequence_by_is_refused_at_create(
    local_cat: mere.Catalog, kwargs: dict[str, Any], error: type[MereError], match: str
) -> None:
    schema = pa.schema(
        [("k", pa.int64()), ("p", pa.int64()), ("v", pa.string()), ("n", pa.int64()), ("f", pa.float64()),
         ("seq", pa.int64()), ("op", pa.string())]
    )  # fmt: skip
    args: dict[str, Any] = {"primary_key": "k", "partition_by": "p", "cdc_column": "op", **kwargs}
    with pytest.raises(error, match=match):
        local_cat.create_table("s.bad", schema, **args)
    assert local_cat.tables("s") == []


def test_bad_sequence_by_is_refused_when_set(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("n", pa.int64()), ("seq", pa.int64())])
    t = local_cat.create_table("s.ops", schema, primary_key="k", merge_operators={"n": "sum"})
    with pytest.raises(InvalidInput, match="added twice"):
        t.set_sequence_by("seq")
    with pytest.raises(InvalidInput, match="primary-key"):
        t.set_sequence_by("k")
    assert t.version == 0 and t.refresh().sequence_by == ()


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        ({"k": [1], "p": [1], "v": ["a"], "op": ["u"]}, SchemaMismatch, "sequence column.*'seq'"),
        ({"k": [1, 2], "p": [1, 0], "v": ["a", "b"], "seq": [1, None], "op": ["u", "u"]}, InvalidInput,
         "'seq' holds 1 NULL"),
        ({"k": [1, 2], "p": [1, 0], "v": ["a", None], "seq": [1, None], "op": ["u", "d"]}, InvalidInput,
         "deletes too"),
        ({"k": [1], "p": [1], "v": ["a"], "seq": ["7"], "op": ["u"]}, SchemaMismatch, "'seq' of type string"),
        ({"k": [1], "p": [1], "v": ["a"], "seq": [1.5], "op": ["u"]}, SchemaMismatch, "'seq'"),
        ({"k": [1], "p": [1], "seq": [1], "op": ["u"]}, SchemaMismatch, "whole rows"),
    ],
)  # fmt: skip
def test_bad_writes_are_refused_and_commit_nothing(
    t: mere.Table, batch: dict[str, list[Any]], error: type[MereError], match: str
) -> None:
    up(t, (1, 1, "u", "kept"))
    version = t.version
    with pytest.raises(error, match=match):
        t.upsert(pa.table(batch))
    assert t.version == version and rows(t) == [(1, "kept", 1)]


def test_deletes_only_batches_may_carry_keys_and_sequences_alone(t: mere.Table) -> None:
    up(t, (1, 1, "u", "a"), (2, 1, "u", "b"))
    t.upsert(pa.table({"k": [1], "p": [1], "seq": [2], "op": ["d"]}))
    assert rows(t) == [(2, "b", 1)]
    version = t.version
    with pytest.raises(InvalidInput, match="sequence"):
        t.commit([t.stage(pa.table({"k": [2], "p": [0]}), "delete")])
    assert t.version == version
    t.commit([t.stage(pa.table({"k": [2], "p": [0], "seq": [3]}), "delete")])
    assert rows(t) == []


def test_tables_without_sequence_by_keep_commit_order(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "w"))
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64())])
    t = cat.create_table("s.t", schema, primary_key="k")
    r = t.upsert(pa.table({"k": [1, 1], "v": ["a", "b"], "seq": [9, 1]}))
    assert r.stale_rows is None and "stale_rows" not in r.summary
    t.upsert(pa.table({"k": [1], "v": ["c"], "seq": [None]}, schema=schema))
    assert t.to_arrow(columns=["v"]).to_pylist() == [{"v": "c"}]
    assert "sequence_by" not in t.record.spec


def test_deletes_of_keys_without_their_partition_are_unchanged_without_sequences(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "w"))
    schema = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("seq", pa.int64())])
    rows = pa.table({"k": [1, 1, 2], "a": [1, 2, 1], "b": ["x", "x", "y"], "seq": [1, 1, 1]})
    plain = cat.create_table("s.p", schema, primary_key="k", partition_by=["a", "b"], key_scope="partition")
    plain.upsert(rows)
    assert plain.delete(pa.table({"k": [1], "a": [1]})).rows_deleted == 2  # by key, in every partition
    sequenced = cat.create_table(
        "s.q", schema, primary_key="k", partition_by=["a", "b"], sequence_by="seq", key_scope="partition"
    )
    sequenced.upsert(rows)
    assert sequenced.delete(pa.table({"k": [1], "a": [1]})).rows_deleted == 1  # the partition given
