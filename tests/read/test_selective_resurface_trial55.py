"""Trial 55: selective (non-key filtered) reads must never let an older version of a key resurface.

Attacks the selective route (:mod:`mere.read.selective`) where the other trials do not: table-wide keys
that move between partitions (a filter on the partition column or on a value only the old partition's
version holds), ``sequence_by`` tables fed late, replayed and out-of-order CDC events (ties included),
CDC deletes and deletes by key / by filter followed by filters matching the deleted rows, re-inserts,
filters with OR / NOT / IS NULL / IN / BETWEEN / LIKE / CASE / COALESCE over NULLs and NaN, compaction
between writes, time travel, tiny row groups and read windows, several buckets. Every read is done by
each route (the default cost model, the semi-join of candidates, the search of later files, every row
marked, and the plain merge-then-filter route) and must equal DuckDB evaluating the same SQL over a plain
dict model of each key's winning version. Schema evolution (added and renamed columns) and merge
engines other than newest-wins have deterministic tests at the end.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mere
from mere.read import selective

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("f", pa.float64()),
        pa.field("seq", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
OUT = ["id", "p", "v", "s", "f", "seq"]  # the op column is not stored

# Routes: (MAX_NARROW_BYTES, CANDIDATE_SHARE, SEARCH_LATER, SINGLE_FILE_SHARE).
ROUTES = {
    "default": None,
    "semi-join": (256 << 20, 1.0, False, 1.0),
    "search": (256 << 20, 1.0, True, 1.0),
    "mark-all": (256 << 20, 0.0, False, 1.0),
    "plain": (-1, 0.25, True, 0.5),
}


@contextlib.contextmanager
def route(name: str) -> Iterator[None]:
    knobs = ROUTES[name]
    saved = (
        selective.MAX_NARROW_BYTES,
        selective.CANDIDATE_SHARE,
        selective.SEARCH_LATER,
        selective.SINGLE_FILE_SHARE,
    )
    if knobs is not None:
        (
            selective.MAX_NARROW_BYTES,
            selective.CANDIDATE_SHARE,
            selective.SEARCH_LATER,
            selective.SINGLE_FILE_SHARE,
        ) = knobs
    try:
        yield
    finally:
        (
            selective.MAX_NARROW_BYTES,
            selective.CANDIDATE_SHARE,
            selective.SEARCH_LATER,
            selective.SINGLE_FILE_SHARE,
        ) = saved


def norm(r: dict[str, Any]) -> tuple[Any, ...]:
    f = r["f"]
    return (
        r["id"],
        r["p"],
        r["v"],
        r["s"],
        "NaN" if isinstance(f, float) and math.isnan(f) else f,
        r["seq"],
    )


def canon(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((norm(r) for r in rows), key=lambda t: t[0])


def duck(rows: list[dict[str, Any]], where: str) -> list[tuple[Any, ...]]:
    """DuckDB's answer: the filter over the model's rows."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA.remove(SCHEMA.get_field_index("op")))
    con = duckdb.connect()
    con.register("m", table)
    result = con.execute(f"select * from m where {where}")
    names = [d[0] for d in result.description]
    got = [dict(zip(names, r)) for r in result.fetchall()]
    con.close()
    return canon(got)


FILTERS = [
    "v < {x}",
    "p = '{p}'",
    "p <> '{p}' and v >= {x}",
    "s = '{w}' or v is null",
    "not (v between {x} and {x} + 2)",
    "v in ({x}, {x} + 1, NULL)",
    "v not in ({x}, 1)",
    "s like '{w}%'",
    "s not like '%{w}'",
    "s is null and p = '{p}'",
    "f > 0.5",
    "f = 'NaN'::double or f is null",
    "f >= 2 and not (f = 2)",
    "case when v > {x} then s = '{w}' when v is null then p = '{p}' else false end",
    "coalesce(v, {x}) = {x}",
    "coalesce(s, 'zz') <> 'a' and not (p = '{p}')",
    "v + seq > {x}",
    "(v > {x}) is not true",
    "f between -1 and 1 or s in ('{w}', 'c')",
]

row_st = st.fixed_dictionaries(
    {
        "id": st.integers(0, 12),
        "p": st.sampled_from(["x", "y", "z"]),
        "v": st.one_of(st.none(), st.integers(-3, 3)),
        "s": st.sampled_from(["a", "b", "ab", "c", None]),
        "f": st.one_of(st.none(), st.just(math.nan), st.sampled_from([-1.0, 0.0, -0.0, 0.75, 2.0])),
        "seq": st.integers(0, 6),
        "op": st.sampled_from(["c", "u", "u", "d"]),
    }
)
step_st = st.one_of(
    st.tuples(st.just("upsert"), st.lists(row_st, min_size=1, max_size=8)),
    st.tuples(st.just("upsert"), st.lists(row_st, min_size=1, max_size=8)),
    st.tuples(st.just("delete_keys"), st.lists(st.integers(0, 12), min_size=1, max_size=4)),
    st.tuples(st.just("delete_where"), st.integers(-3, 3)),
    st.tuples(st.just("update"), st.integers(-3, 3)),
    st.tuples(st.just("compact"), st.none()),
)
check_st = st.tuples(
    st.sampled_from(FILTERS),
    st.integers(-3, 3),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["x", "y", "z"]),
)


class Model:
    """Each key's winning state: (sequence, row or None when deleted). Without ``sequence_by`` the
    sequence is the write's position, so every later write wins."""

    def __init__(self, sequenced: bool) -> None:
        self.sequenced = sequenced
        self.state: dict[int, tuple[int, dict[str, Any] | None]] = {}
        self.tick = 0

    def live(self) -> list[dict[str, Any]]:
        return [dict(r) for _, r in self.state.values() if r is not None]

    def event(self, r: dict[str, Any]) -> None:
        self.tick += 1
        s = r["seq"] if self.sequenced else self.tick
        cur = self.state.get(r["id"])
        if cur is not None and s < cur[0]:
            return  # late: a newer version (or delete) stands
        if r["op"] == "d":
            if cur is None and not self.sequenced:
                return
            self.state[r["id"]] = (s, None)
        else:
            self.state[r["id"]] = (s, {c: r[c] for c in OUT})

    def delete_key(self, k: int) -> None:
        """A delete without a sequence: its marker sits just above the live version it read."""
        self.tick += 1
        cur = self.state.get(k)
        if cur is None or cur[1] is None:
            return
        self.state[k] = ((cur[0] + 1) if self.sequenced else self.tick, None)


def apply(t: mere.Table, model: Model, step: tuple[str, Any]) -> None:
    kind, arg = step
    if kind == "upsert":
        t.upsert(pa.Table.from_pylist(arg, schema=SCHEMA))
        for r in arg:
            model.event(r)
    elif kind == "delete_keys":
        t.delete(f"id in ({', '.join(map(str, arg))})")
        for k in arg:
            model.delete_key(k)
    elif kind == "delete_where":
        t.delete(f"v < {arg}")
        for r in model.live():
            if r["v"] is not None and r["v"] < arg:
                model.delete_key(r["id"])
    elif kind == "update":
        # Moves rows into and out of the filters: v, s and the partition change (table-wide keys move).
        t.update(set={"v": "v + 2", "s": "'c'", "p": "'z'"}, where=f"v >= {arg}")
        model.tick += 1
        for k, (sq, r) in list(model.state.items()):
            if r is not None and r["v"] is not None and r["v"] >= arg:
                r = dict(r, v=r["v"] + 2, s="c", p="z")
                model.state[k] = (sq if model.sequenced else model.tick, r)
    else:
        t.compact()


CONFIGS = {
    "newest-wins": {},
    "sequence_by": {"sequence_by": "seq"},
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@settings(
    max_examples=25,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(step_st, min_size=1, max_size=6),
    checks=st.lists(check_st, min_size=1, max_size=3),
    buckets=st.sampled_from([1, 3]),
    tiny=st.booleans(),
)
def test_moves_late_events_and_deletes_never_resurface(
    tmp_path_factory: pytest.TempPathFactory,
    config: str,
    steps: list[tuple[str, Any]],
    checks: list[tuple[str, int, str, str]],
    buckets: int,
    tiny: bool,
) -> None:
    props = {"write.row-group-rows": "2", "compaction.auto": "off"}
    if tiny:
        props["read.window-bytes"] = "1"
    t = mere.connect(str(tmp_path_factory.mktemp("wh"))).create_table(
        "s.t",
        SCHEMA,
        primary_key="id",
        partition_by="p",
        key_scope="table",
        cdc_column="op",
        buckets=buckets,
        properties=props,
        **CONFIGS[config],
    )
    model = Model(sequenced=config == "sequence_by")
    history: list[tuple[int, list[dict[str, Any]]]] = []
    for step in steps:
        apply(t, model, step)
        history.append((t.version, model.live()))
    assert canon(t.to_arrow().select(OUT).to_pylist()) == canon(history[-1][1]), "unfiltered"
    for f, x, w, p in checks:
        where = f.format(x=x, w=w, p=p)
        for version, rows in {history[-1][0]: history[-1][1], history[0][0]: history[0][1]}.items():
            want = duck(rows, where)
            for name in ROUTES:
                with route(name):
                    scan = t.scan(filter=where, version=version)
                    got = canon(scan.to_arrow().select(OUT).to_pylist())
                    assert got == want, (name, where, version)
                    assert scan.count() == len(want), (name, where, version)
            ids = sorted(r["id"] for r in t.scan("id", filter=where, version=version).to_arrow().to_pylist())
            assert ids == [r[0] for r in want], (where, version)


def _table(tmp_path: Any, **options: Any) -> mere.Table:
    return mere.connect(str(tmp_path)).create_table(
        "s.t",
        SCHEMA,
        primary_key="id",
        partition_by="p",
        cdc_column="op",
        properties={"write.row-group-rows": "2", "compaction.auto": "off"},
        **options,
    )


def rows_of(*rows: tuple[Any, ...]) -> pa.Table:
    names = ["id", "p", "v", "s", "f", "seq", "op"]
    return pa.Table.from_pylist([{"op": "u"} | dict(zip(names, r)) for r in rows], schema=SCHEMA)


def every_route(t: mere.Table, where: str, **scan: Any) -> list[int]:
    """The ids a filter keeps, the same by every route (asserted)."""
    answers = {}
    for name in ROUTES:
        with route(name):
            answers[name] = sorted(r["id"] for r in t.scan(filter=where, **scan).to_arrow().to_pylist())
    assert len({tuple(a) for a in answers.values()}) == 1, (where, answers)
    return answers["plain"]


def test_a_late_event_written_later_never_resurfaces(tmp_path: Any) -> None:
    t = _table(tmp_path, sequence_by="seq")
    t.upsert(rows_of(*[(i, "x", 5, "new", 1.0, 10) for i in range(10)]))
    # Late, lower-sequence events of half the keys, committed after: they match "v = 1", the winners not.
    t.upsert(rows_of(*[(i, "x", 1, "old", 0.0, 3) for i in range(0, 10, 2)]))
    # Replays of the winners (equal sequence, later commit): the same event, now with another value.
    t.upsert(rows_of((1, "x", 7, "replay", 1.0, 10)))
    assert every_route(t, "v = 1") == []
    assert "selective read" in str(t.scan(filter="v = 1").explain())  # the route under test ran
    assert every_route(t, "s = 'old' or v = 1") == []
    assert every_route(t, "v = 7") == [1]
    assert every_route(t, "v = 5") == [0, 2, 3, 4, 5, 6, 7, 8, 9]
    t.compact()
    t.upsert(rows_of((4, "x", 1, "old", 0.0, 2)))
    assert every_route(t, "v = 1") == []
    # A late CDC delete below the winner changes nothing; one above deletes.
    t.upsert(rows_of((2, "x", None, None, None, 9, "d"), (3, "x", None, None, None, 11, "d")))
    assert every_route(t, "v = 5") == [0, 2, 4, 5, 6, 7, 8, 9]
    # A re-insert below the delete stays hidden; above it, it comes back with its own values.
    t.upsert(rows_of((3, "x", 5, "back", 1.0, 10), (3, "x", 6, "back2", 1.0, 12)))
    assert every_route(t, "v = 5") == [0, 2, 4, 5, 6, 7, 8, 9]
    assert every_route(t, "s like 'back%'") == [3]


def test_a_key_moved_between_partitions_is_not_found_in_its_old_one(tmp_path: Any) -> None:
    t = _table(tmp_path, key_scope="table", buckets=2)
    t.upsert(rows_of(*[(i, "x", 1, "a", 0.0, 0) for i in range(12)]))
    t.upsert(rows_of(*[(i, "y", 2, "b", 0.0, 0) for i in range(0, 12, 3)]))  # moves 0, 3, 6, 9
    t.update(set={"p": "'z'", "v": "3"}, where="id = 1 or id = 4")
    assert every_route(t, "v = 1 and p = 'x'") == [2, 5, 7, 8, 10, 11]
    assert every_route(t, "p = 'x'") == [2, 5, 7, 8, 10, 11]
    assert every_route(t, "v = 1 or s = 'a'") == [1, 2, 4, 5, 7, 8, 10, 11]  # the update kept s
    assert every_route(t, "v <> 1") == [0, 1, 3, 4, 6, 9]
    t.delete("v = 2")
    assert every_route(t, "v is not null") == [1, 2, 4, 5, 7, 8, 10, 11]
    # The CDC delete carries another partition than the key's: it deletes the key wherever it lives.
    t.upsert(rows_of((2, "y", None, None, None, 0, "d")))
    assert every_route(t, "s = 'a'") == [1, 4, 5, 7, 8, 10, 11]
    t.upsert(rows_of((0, "x", 1, "a", 0.0, 0)))  # re-insert of a deleted, moved key in its first partition
    assert every_route(t, "s = 'a' and p = 'x'") == [0, 5, 7, 8, 10, 11]


def test_added_column_older_files_lack(tmp_path: Any) -> None:
    t = _table(tmp_path, buckets=2)
    t.upsert(rows_of(*[(i, "x", i % 3, "a", 0.0, 0) for i in range(9)]))
    t.add_column("w", pa.int64())
    schema = t.schema
    t.upsert(
        pa.Table.from_pylist(
            [{"id": i, "p": "x", "v": 9, "s": "b", "f": 1.0, "seq": 1, "op": "u", "w": i} for i in (1, 4)],
            schema=pa.schema([*SCHEMA, pa.field("w", pa.int64())]),
        )
    )
    assert "w" in schema.names
    assert every_route(t, "w is null") == [0, 2, 3, 5, 6, 7, 8]
    assert every_route(t, "w = 4 or v = 1") == [4, 7]
    assert every_route(t, "coalesce(w, -1) < 2 and v <> 9") == [0, 2, 3, 5, 6, 7, 8]
    t.rename_column("v", "v2")
    assert every_route(t, "v2 = 1") == [7]
    assert every_route(t, "v2 = 9 and w > 1") == [4]
    t.compact()
    assert every_route(t, "v2 = 1") == [7]
    older = t.version - 2
    assert every_route(t, "v = 1", version=older) == [7]


def test_max_operator_under_a_filter_on_the_aggregate(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "s.t", SCHEMA, primary_key="id", merge_operators={"v": "max"}, cdc_column="op"
    )
    t.upsert(rows_of(*[(i, "x", 5, "a", 0.0, 0) for i in range(6)]))
    t.upsert(rows_of(*[(i, "x", 1, "b", 0.0, 0) for i in range(0, 6, 2)]))
    # The stored versions of 0, 2, 4 match "v = 1", their merged rows (max 5) do not.
    assert every_route(t, "v = 1") == []
    assert every_route(t, "v = 5 and s = 'b'") == [0, 2, 4]
    t.upsert(rows_of((2, "x", None, None, None, 0, "d"), (2, "x", 1, "c", 0.0, 0)))
    assert every_route(t, "v = 1") == [2]


def test_first_row_with_late_lower_sequence(tmp_path: Any) -> None:
    t = _table(tmp_path, sequence_by="seq", merge_operators="first_row", buckets=2)
    t.upsert(rows_of(*[(i, "x", 5, "a", 0.0, 10) for i in range(8)]))
    t.upsert(rows_of(*[(i, "x", 1, "late", 0.0, 3) for i in range(0, 8, 2)]))  # lower: these win
    t.upsert(rows_of(*[(i, "x", 7, "later", 0.0, 20) for i in range(8)]))  # higher: ignored
    assert every_route(t, "v = 1") == [0, 2, 4, 6]
    assert every_route(t, "v = 5") == [1, 3, 5, 7]
    assert every_route(t, "v = 7 or s = 'later'") == []
    t.compact()
    t.upsert(rows_of((1, "x", 2, "tie", 0.0, 10)))  # a tie: the earlier commit stays
    assert every_route(t, "v = 2") == []
    assert every_route(t, "v = 5") == [1, 3, 5, 7]


def test_a_replay_after_an_update_moved_the_key_under_sequences(tmp_path: Any) -> None:
    t = _table(tmp_path, sequence_by="seq", key_scope="table", buckets=2)
    t.upsert(rows_of(*[(i, "x", 1, "a", 0.0, 5) for i in range(6)]))
    t.update(set={"p": "'z'", "v": "2"}, where="id < 3")  # moved to z at sequence 5, marker in x above it
    assert every_route(t, "p = 'x'") == [3, 4, 5]
    assert every_route(t, "v = 1") == [3, 4, 5]
    # Later-committed events of equal sequence back in x win the tie (commit order): the key moves back.
    t.upsert(rows_of((0, "x", 3, "r", 0.0, 5), (1, "x", 3, "r", 0.0, 6)))
    got = sorted(r["id"] for r in t.to_arrow().to_pylist())
    assert got == [0, 1, 2, 3, 4, 5]
    assert every_route(t, "v = 3") == [0, 1]
    assert every_route(t, "v = 2 or p = 'z'") == [2]


@pytest.mark.parametrize("sequenced", [False, True])
def test_string_keys_ties_and_many_small_files(tmp_path: Any, sequenced: bool) -> None:
    """String keys (the semi-join by ``is_in``, no search of later files), ties of sequence in one batch
    and across commits, a file per write."""
    schema = pa.schema([pa.field("k", pa.string(), nullable=False), ("v", pa.int64()), ("seq", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table(
        "s.t",
        schema,
        primary_key="k",
        buckets=2,
        properties={"write.row-group-rows": "1", "compaction.auto": "off", "read.window-bytes": "1"},
        **({"sequence_by": "seq"} if sequenced else {}),
    )
    model: dict[str, tuple[int, int]] = {}
    tick = 0
    for round_ in range(6):
        batch = [{"k": f"k{i}", "v": (i + round_) % 4, "seq": (i * round_) % 3} for i in range(8)]
        batch += [{"k": "k1", "v": 9, "seq": batch[1]["seq"]}]  # a tie in the batch: the later row wins
        t.upsert(pa.Table.from_pylist(batch, schema=schema))
        for r in batch:
            tick += 1
            s = r["seq"] if sequenced else tick
            if r["k"] not in model or s >= model[r["k"]][0]:
                model[r["k"]] = (s, r["v"])
        for x in range(4):
            for where, equal in [(f"v = {x}", True), (f"v <> {x}", False)]:
                want = sorted(k for k, (_, v) in model.items() if (v == x) == equal)
                for name in ROUTES:
                    with route(name):
                        got = sorted(r["k"] for r in t.scan(filter=where).to_arrow().to_pylist())
                    assert got == want, (name, where, round_)
