"""Trial 54: a stateful (Hypothesis ``RuleBasedStateMachine``) check of ``sequence_by`` tables fed change
events that arrive late, twice and out of order, against a plain dict model of docs/concepts.md
(*Sequence ordering*, *Merge engines under sequences*, *Table-wide keys*).

Unlike the earlier trials, sequences are drawn from a small domain so that **ties** (equal sequences with
different values, in one batch and across commits, across partitions, between a delete and an upsert) are
frequent: the docs define them (``Equal sequences fall back to commit order, then row order``; for
``first_row`` the lowest sequence wins, ties by commit order then row order). The model orders each key's
versions by ``(sequence, commit, row)``; compaction (full, tiered, of one partition, automatic) never adds a
commit, so a read before and after it must agree. Sequences are one integer, a naive millisecond timestamp
or two columns compared as a tuple; deletes without a sequence write their marker one unit of the last
sequence column above the version they read.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import mere
from mere.errors import InvalidInput

PARTS = ["a", "b", "c"]
KEYS = range(5)
EPOCH = dt.datetime(2025, 3, 1, 12, 0, 0)
_dirs = itertools.count()

SEQ_KINDS: dict[str, list[pa.Field]] = {
    "int": [pa.field("lsn", pa.int64())],
    "ts": [pa.field("ts", pa.timestamp("ms"))],
    "pair": [pa.field("epoch", pa.int32()), pa.field("lsn", pa.int64())],
}


def seq_values(kind: str, seq: tuple[int, ...]) -> dict[str, Any]:
    if kind == "int":
        return {"lsn": seq[0]}
    if kind == "ts":
        return {"ts": EPOCH + dt.timedelta(milliseconds=seq[0])}
    return {"epoch": seq[0], "lsn": seq[1]}


def seq_strategy(kind: str) -> st.SearchStrategy[tuple[int, ...]]:
    if kind == "pair":
        return st.tuples(st.integers(0, 2), st.integers(0, 3))
    return st.tuples(st.integers(0, 9))


def above(seq: tuple[int, ...]) -> tuple[int, ...]:
    """One unit of the last sequence column above (a delete without a sequence)."""
    return (*seq[:-1], seq[-1] + 1)


def schema_of(kind: str, engine: str) -> pa.Schema:
    fields = [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.int64()),
    ]
    if engine == "agg":
        fields += [pa.field("hi", pa.int64()), pa.field("lo", pa.string()), pa.field("any", pa.bool_())]
    fields += [pa.field("s", pa.string()), *SEQ_KINDS[kind], pa.field("op", pa.string())]
    return pa.schema(fields)


# An event: (key, partition, sequence, op, payload). The payload differs between events of equal sequence,
# so that a tie decided the wrong way shows.
Event = tuple[int, str, tuple[int, ...], str, tuple[Any, ...]]


def event_strategy(kind: str, engine: str) -> st.SearchStrategy[Event]:
    if engine == "agg":
        payload = st.tuples(
            st.sampled_from([None, 0, 2, 5]),
            st.sampled_from([None, 1, 4, 7]),
            st.sampled_from([None, "m", "x", "z"]),
            st.sampled_from([None, True, False]),
        )
    else:
        payload = st.tuples(st.sampled_from([None, 0, 2, 5, 8]))
    return st.tuples(
        st.sampled_from(list(KEYS)),
        st.sampled_from(PARTS),
        seq_strategy(kind),
        st.sampled_from("uuud" if engine == "last" else "u"),
        payload,
    )


class SequenceMachine(RuleBasedStateMachine):
    """The default (``last``) engine with table-wide keys: a key moves to its newest version's partition."""

    KIND = "int"
    ENGINE = "last"

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(_ROOT) / f"m{next(_dirs)}"
        self.schema = schema_of(self.KIND, self.ENGINE)
        self.seq_cols = [f.name for f in SEQ_KINDS[self.KIND]]
        kw: dict[str, Any] = {}
        if self.ENGINE == "first_row":
            kw["merge_operators"] = "first_row"
        elif self.ENGINE == "agg":
            kw["merge_operators"] = {"hi": "max", "lo": "min", "any": "bool_or"}
        else:
            kw["key_scope"] = "table"
        self.t = mere.connect(str(self.root)).create_table(
            "q.t",
            self.schema,
            primary_key="k",
            partition_by="p",
            buckets=2,
            cdc_column="op",
            sequence_by=self.seq_cols,
            properties={"compaction.min-files": "3"},
            **kw,
        )
        # every version of every key: (event, commit, row); commits counted by the model, not by mere
        self.log: list[tuple[Event, int, int]] = []
        self.commit = 0
        self.sent: list[Event] = []
        self.history: list[tuple[int, dict[Any, dict[str, Any]]]] = [(self.t.version, {})]

    # -- the model ------------------------------------------------------------------------------------

    def row(self, e: Event) -> dict[str, Any]:
        k, p, seq, _, pay = e
        r: dict[str, Any] = {"k": k, "p": p, "v": pay[0]}
        if self.ENGINE == "agg":
            r.update({"hi": pay[1], "lo": pay[2], "any": pay[3]})
        r["s"] = f"s{pay[0]}-{'.'.join(map(str, seq))}"  # differs with the sequence
        r.update(seq_values(self.KIND, seq))
        return r

    def winners(self) -> dict[int, Event]:
        """Table-wide keys: the highest (sequence, commit, row) wins anywhere; live keys only."""
        best: dict[int, tuple[Event, int, int]] = {}
        for ver in self.log:
            k = ver[0][0]
            if k not in best or (ver[0][2], ver[1], ver[2]) >= (best[k][0][2], best[k][1], best[k][2]):
                best[k] = ver
        return {k: v[0] for k, v in best.items() if v[0][3] == "u"}

    def model(self) -> dict[Any, dict[str, Any]]:
        if self.ENGINE == "last":
            return {k: self.row(e) for k, e in self.winners().items()}
        by: dict[tuple[str, int], list[tuple[Event, int, int]]] = {}
        for ver in self.log:  # partition-scoped: (partition, key)
            by.setdefault((ver[0][1], ver[0][0]), []).append(ver)
        out: dict[Any, dict[str, Any]] = {}
        for ident, vers in by.items():
            order = sorted(vers, key=lambda x: (x[0][2], x[1], x[2]))
            if self.ENGINE == "first_row":
                out[ident] = self.row(order[0][0])
                continue
            top = self.row(order[-1][0])
            his = [x[0][4][1] for x in vers if x[0][4][1] is not None]
            los = [x[0][4][2] for x in vers if x[0][4][2] is not None]
            anys = [x[0][4][3] for x in vers if x[0][4][3] is not None]
            top["hi"] = max(his) if his else None
            top["lo"] = min(los) if los else None
            top["any"] = any(anys) if anys else None
            out[ident] = top
        return out

    def ident(self, r: dict[str, Any]) -> Any:
        return r["k"] if self.ENGINE == "last" else (r["p"], r["k"])

    def read(self, **kw: Any) -> dict[Any, dict[str, Any]]:
        got = self.t.to_arrow(**kw).to_pylist()
        out = {self.ident(r): r for r in got}
        assert len(out) == len(got), f"a key came out twice: {sorted((r['p'], r['k']) for r in got)}"
        return out

    def batch(self, events: list[Event]) -> pa.Table:
        return pa.Table.from_pylist([{**self.row(e), "op": e[3]} for e in events], schema=self.schema)

    def landed(self, events: list[Event]) -> None:
        self.commit += 1
        for i, e in enumerate(events):
            self.log.append((e, self.commit, i))
        self.history.append((self.t.version, self.model()))

    # -- rules ----------------------------------------------------------------------------------------

    @rule(data=st.data())
    def upsert(self, data: Any) -> None:
        """New events, some replays of events sent before (late, and twice), shuffled into one batch."""
        new = data.draw(st.lists(event_strategy(self.KIND, self.ENGINE), min_size=1, max_size=6), label="new")
        old = (
            data.draw(st.lists(st.sampled_from(self.sent), max_size=4), label="replays") if self.sent else []
        )
        events = data.draw(st.permutations(new + old), label="arrival")
        result = self.t.upsert(self.batch(events))
        self.check_stale(events, result.stale_rows)
        self.sent += new
        self.landed(events)

    def check_stale(self, events: list[Event], stale_rows: int | None) -> None:
        """Default engine: stale rows are those a higher sequence of the same key replaced (stored anywhere
        or in the write), each row of the write once: replays of one event and distinct events at an equal
        sequence count one by one; a tie with the key's highest sequence is never stale."""
        if self.ENGINE != "last":
            return
        top: dict[int, tuple[int, ...]] = {}
        for e in [x[0] for x in self.log] + events:
            top[e[0]] = max(top.get(e[0], e[2]), e[2])
        stale = [e for e in events if e[2] < top[e[0]]]
        assert stale_rows is not None
        assert stale_rows == len(stale), (stale_rows, stale)

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def replay(self, data: Any) -> None:
        """A replay of earlier events alone (a consumer reset): each is late or a tie it wins again."""
        events = data.draw(st.lists(st.sampled_from(self.sent), min_size=1, max_size=5), label="replay")
        self.check_stale(events, self.t.upsert(self.batch(events)).stale_rows)
        self.landed(events)

    @precondition(lambda self: self.ENGINE == "last")
    @rule(data=st.data())
    def delete_keys(self, data: Any) -> None:
        """A blind delete of keys at their sequences (with a partition value that need not be the key's)."""
        keys = data.draw(
            st.lists(st.sampled_from(list(KEYS)), min_size=1, max_size=3, unique=True), label="dk"
        )
        seq = data.draw(seq_strategy(self.KIND), label="dseq")
        part = data.draw(st.sampled_from(PARTS), label="dpart")
        events: list[Event] = [(k, part, seq, "d", (None,)) for k in keys]
        table = pa.Table.from_pylist(
            [{"k": k, "p": part, **seq_values(self.KIND, seq)} for k in keys],
            schema=pa.schema([self.schema.field(c) for c in ["k", "p", *self.seq_cols]]),
        )
        self.t.delete(table)
        self.landed(events)

    @precondition(lambda self: self.ENGINE == "last")
    @rule(cut=st.sampled_from([0, 2, 5, 8]))
    def delete_filter(self, cut: int) -> None:
        """A delete without a sequence: a marker one unit above the version it reads."""
        events: list[Event] = []
        for k, e in sorted(self.winners().items()):
            if e[4][0] is not None and e[4][0] >= cut:
                events.append((k, e[1], above(e[2]), "d", (None,)))
        self.t.delete(f"v >= {cut}")
        if events:
            self.landed(events)
        else:
            self.history.append((self.t.version, self.model()))

    @precondition(lambda self: self.ENGINE == "last")
    @rule(part=st.sampled_from(PARTS))
    def delete_partition(self, part: str) -> None:
        """A delete by a partition filter: only where each key lives now, one unit above its version."""
        events: list[Event] = [
            (k, e[1], above(e[2]), "d", (None,)) for k, e in sorted(self.winners().items()) if e[1] == part
        ]
        self.t.delete(f"p = '{part}'")
        if events:
            self.landed(events)
        else:
            self.history.append((self.t.version, self.model()))

    @precondition(lambda self: self.ENGINE != "last" and bool(self.log))
    @rule(data=st.data())
    def engines_refuse_deletes(self, data: Any) -> None:
        """first_row and max/min/bool_or under sequences refuse deletes (a filter that matches nothing
        deletes nothing and is not refused; keys stored nowhere: see
        test_engines_refuse_a_delete_of_absent_keys_without_partition)."""
        k = data.draw(st.sampled_from(sorted({x[0][0] for x in self.log})), label="stored key")
        before = self.t.version
        with pytest.raises(InvalidInput):
            self.t.delete("k >= 0")
        with pytest.raises(InvalidInput):
            self.t.delete(
                pa.Table.from_pylist(
                    [{"k": k, **seq_values(self.KIND, self.log[-1][0][2])}],
                    schema=pa.schema([self.schema.field(c) for c in ["k", *self.seq_cols]]),
                )
            )
        assert self.t.version == before

    @rule(how=st.sampled_from(["full", "tiered", "part_a", "part_b", "auto"]))
    def compact(self, how: str) -> None:
        before = self.read()
        if how == "full":
            self.t.compact()
        elif how == "tiered":
            self.t.compact(tiered=True)
        elif how == "auto":
            self.t.auto_compact()
        else:
            self.t.compact(min_files=1, partition={"p": how[-1]})
        assert self.read() == before, "a read before and after compaction disagree"
        self.history.append((self.t.version, before))

    @rule(data=st.data())
    def time_travel(self, data: Any) -> None:
        v, then = data.draw(st.sampled_from(self.history), label="version")
        assert self.read(version=v) == then
        assert self.t.scan(version=v).count() == len(then)
        want = {i: r for i, r in then.items() if r["p"] == "b"}
        assert self.read(version=v, filter="p = 'b'") == want

    @rule(
        flt=st.sampled_from(
            [
                ("v >= 2", lambda r: r["v"] is not None and r["v"] >= 2),
                ("v is null", lambda r: r["v"] is None),
                ("s like 's5%'", lambda r: r["s"].startswith("s5")),
                ("p = 'a'", lambda r: r["p"] == "a"),
                ("p in ('b', 'c')", lambda r: r["p"] in ("b", "c")),
                ("p = 'c' and v > 0", lambda r: r["p"] == "c" and r["v"] is not None and r["v"] > 0),
                ("p = 'a' or v = 8", lambda r: r["p"] == "a" or r["v"] == 8),
                ("k = 3", lambda r: r["k"] == 3),
            ]
        )
    )
    def filtered_reads(self, flt: tuple[str, Any]) -> None:
        text, keep = flt
        want = {i: r for i, r in self.model().items() if keep(r)}
        assert self.read(filter=text) == want, text
        assert self.t.scan(filter=text).count() == len(want), text
        got = self.t.to_arrow(columns=["k", "p"], filter=text).to_pylist()
        assert sorted((r["p"], r["k"]) for r in got) == sorted((r["p"], r["k"]) for r in want.values()), text

    @invariant()
    def matches_the_model(self) -> None:
        expected = self.model()
        assert self.read() == expected
        assert self.t.scan().count() == len(expected)

    def teardown(self) -> None:
        if self.log:  # one last fold of everything, and every version read again
            expected = self.model()
            self.t.compact()
            assert self.read() == expected
            for v, then in self.history:
                assert self.read(version=v) == then


_ROOT = ""

STATEFUL = settings(
    max_examples=8,
    stateful_step_count=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: stateful shrinks took minutes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _machine(kind: str, engine: str) -> type[SequenceMachine]:
    return type(f"Machine_{kind}_{engine}", (SequenceMachine,), {"KIND": kind, "ENGINE": engine})


@pytest.mark.parametrize(
    ("kind", "engine"),
    [
        ("int", "last"),
        ("ts", "last"),
        ("pair", "last"),
        ("int", "first_row"),
        ("ts", "first_row"),
        ("int", "agg"),
        ("pair", "agg"),
    ],
)
def test_sequence_machine(tmp_path: Path, kind: str, engine: str) -> None:
    global _ROOT
    _ROOT = str(tmp_path)
    machine = _machine(kind, engine)
    machine.TestCase.settings = STATEFUL
    machine.TestCase().runTest()


@pytest.mark.parametrize("ops", ["first_row", {"hi": "max"}], ids=["first_row", "max"])
def test_engines_refuse_a_delete_of_absent_keys_without_partition(tmp_path: Path, ops: Any) -> None:
    """docs/concepts.md: under first_row (and max/min/bool_* with sequence_by) deletes 'are refused with
    InvalidInput before anything is written (CDC delete rows, Table.delete, ...)'; a delete that is
    silently ignored is what the refusal is there to prevent (a later event at a lower sequence than the
    delete is then inserted). The refusal must not depend on what the table stores."""
    schema = pa.schema(
        [("k", pa.int64()), ("p", pa.string()), ("hi", pa.int64()), ("lsn", pa.int64()), ("op", pa.string())]
    )
    t = mere.connect(str(tmp_path)).create_table(
        "q.t",
        schema,
        primary_key="k",
        partition_by="p",
        cdc_column="op",
        sequence_by="lsn",
        merge_operators=ops,
    )
    t.upsert(pa.table({"k": [0], "p": ["a"], "hi": [1], "lsn": [0], "op": ["u"]}))
    with pytest.raises(InvalidInput):  # a stored key: refused
        t.delete(pa.table({"k": [0], "lsn": [5]}))
    with pytest.raises(InvalidInput):  # with the partition column: refused
        t.delete(pa.table({"k": [1], "p": ["a"], "lsn": [5]}))
    with pytest.raises(InvalidInput):  # the same key, no partition column: accepted, nothing written
        t.delete(pa.table({"k": [1], "lsn": [5]}))


def test_stale_rows_counts_each_tied_row_below_a_stored_version(tmp_path: Path) -> None:
    """docs/concepts.md, *Write results*: stale_rows counts 'those a row of the same key with a higher
    sequence replaced, in the same write or already stored'. Both rows at 9 are replaced by the stored 10
    (neither is a replay of the stored event)."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("lsn", pa.int64()), ("op", pa.string())])
    cat = mere.connect(str(tmp_path))

    def rows(*vals: tuple[str, int]) -> pa.Table:
        return pa.Table.from_pylist([{"k": 1, "v": v, "lsn": q, "op": "u"} for v, q in vals], schema=schema)

    def table(name: str) -> mere.Table:
        return cat.create_table(name, schema, primary_key="k", cdc_column="op", sequence_by="lsn")

    t = table("q.a")
    t.upsert(rows(("s", 10)))
    assert t.upsert(rows(("x", 8), ("y", 9))).stale_rows == 2  # unequal sequences: both count
    assert table("q.b").upsert(rows(("x", 9), ("y", 9), ("z", 10))).stale_rows == 2  # in one write: both
    t = table("q.c")
    t.upsert(rows(("s", 10)))
    assert t.upsert(rows(("x", 9), ("y", 9))).stale_rows == 2  # below a stored version: both
    assert t.to_arrow().to_pylist() == [{"k": 1, "v": "s", "lsn": 10}]
