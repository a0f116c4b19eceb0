"""Adversarial tests of the per-bucket index of stored keys (``stored_keys.KEY_INDEX``) for table-wide keys.

Every state is compared with a dict keyed by key alone (key -> (partition, value)) and with a twin table
whose lookups read the stored files (``KEY_INDEX = False``): integer keys of several widths at their
limits, keys spanning more than 2**47 (the fold's lexsort route), many partitions, staged commits, table
and catalog transactions, dynamic overwrites, explicit and automatic compaction, a catalog reopened, a
table dropped and created again at its name, threads and processes writing one table at once.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError
from mere.table import stored_keys

PARTS = tuple(f"p{i}" for i in range(9))

KEYS: dict[str, tuple[pa.DataType, list[int]]] = {
    "int16": (pa.int16(), [-(2**15), -(2**15) + 1, -1, 0, 1, 2**15 - 2, 2**15 - 1]),
    "int32": (pa.int32(), [-(2**31), -(2**31) + 1, -7, 0, 3, 2**31 - 2, 2**31 - 1]),
    "int64": (pa.int64(), [-(2**63), -(2**63) + 1, -(2**47), -1, 0, 2**47, 2**63 - 1]),
    "int64-narrow": (pa.int64(), [-3, -2, -1, 0, 1, 2, 5]),  # the packed-sort route
    "int8": (pa.int8(), [-128, -127, -1, 0, 1, 126, 127]),
}

Model = dict[int, tuple[str, int]]


def schema_of(kind: str) -> pa.Schema:
    return pa.schema([("id", KEYS[kind][0]), ("status", pa.string()), ("v", pa.int64()), ("op", pa.string())])


def make(cat: mere.Catalog, name: str, kind: str, buckets: int, auto: str) -> mere.Table:
    props = {"compaction.auto": auto}
    if auto != "off":
        props["compaction.min-files"] = "2"
    return cat.create_table(
        name,
        schema_of(kind),
        primary_key="id",
        partition_by="status",
        cdc_column="op",
        buckets=buckets,
        properties=props,
    )


def batch(kind: str, rows: list[tuple[int, str, int | None, str]]) -> pa.Table:
    return pa.table(
        {
            "id": [r[0] for r in rows],
            "status": [r[1] for r in rows],
            "v": [r[2] for r in rows],
            "op": [r[3] for r in rows],
        },
        schema_of(kind),
    )


def state(t: mere.Table, version: int | None = None) -> Model:
    out: Model = {}
    for r in t.scan(version=version).to_arrow().to_pylist():
        assert r["id"] not in out, f"key {r['id']} live twice: {out[r['id']]} and {r}"
        out[r["id"]] = (r["status"], r["v"])
    return out


class index_off:
    def __enter__(self) -> None:
        self.was = stored_keys.KEY_INDEX
        stored_keys.KEY_INDEX = False

    def __exit__(self, *exc: object) -> None:
        stored_keys.KEY_INDEX = self.was


@pytest.fixture(autouse=True)
def index_on() -> Iterator[None]:
    was = stored_keys.KEY_INDEX, stored_keys.INDEX_BYTES
    stored_keys.KEY_INDEX = True
    yield
    stored_keys.KEY_INDEX, stored_keys.INDEX_BYTES = was


# -- the property -----------------------------------------------------------------------------------------

EVENT = st.tuples(st.integers(0, 6), st.integers(0, len(PARTS) - 1), st.integers(0, 99), st.booleans())
EVENTS = st.lists(EVENT, min_size=1, max_size=8)
STEP = st.one_of(
    st.tuples(st.just("upsert"), EVENTS),
    st.tuples(st.just("upsert"), EVENTS),
    st.tuples(st.just("staged"), EVENTS, EVENTS),
    st.tuples(st.just("tx"), EVENTS, EVENTS),
    st.tuples(st.just("cat-tx"), EVENTS),
    st.tuples(
        st.just("dynamic"), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8), st.integers(0, 99)))
    ),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 6), min_size=1, max_size=3)),
    st.tuples(st.just("compact")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("forget")),
)


def apply_events(model: Model, keys: list[int], events: list[tuple[int, int, int, bool]]) -> None:
    for k, p, v, d in events:
        if d:
            model.pop(keys[k], None)
        else:
            model[keys[k]] = (PARTS[p], v)


def rows(kind: str, keys: list[int], events: list[tuple[int, int, int, bool]]) -> pa.Table:
    return batch(kind, [(keys[k], PARTS[p], None if d else v, "d" if d else "u") for k, p, v, d in events])


def step_on(cat: mere.Catalog, t: mere.Table, kind: str, keys: list[int], step: Any) -> mere.Table:
    what = step[0]
    if what == "upsert":
        t.upsert(rows(kind, keys, step[1]))
    elif what == "staged":  # two stages, the later wins for equal keys
        t.commit([t.stage(rows(kind, keys, step[1])), t.stage(rows(kind, keys, step[2]))])
    elif what == "tx":
        with t.transaction() as tx:
            tx.upsert(rows(kind, keys, step[1]))
            tx.upsert(rows(kind, keys, step[2]))
    elif what == "cat-tx":
        with cat.transaction() as ctx:
            ctx.table(t.name).upsert(rows(kind, keys, step[1]))
    elif what == "dynamic":
        data = batch(kind, [(keys[k], PARTS[p], v, "c") for k, p, v in step[1]])
        t.overwrite(data, dynamic=True)
    elif what == "delete":
        t.delete(pa.table({"id": pa.array([keys[k] for k in step[1]], KEYS[kind][0])}))
    elif what == "compact":
        t.compact()
    elif what == "reopen":
        return mere.connect(str(cat_root(cat))).table(t.name)
    return t


_roots: dict[int, Path] = {}


def cat_root(cat: mere.Catalog) -> Path:
    return _roots[id(cat)]


def step_model(model: Model, keys: list[int], step: Any) -> None:
    what = step[0]
    if what in ("upsert", "cat-tx"):
        apply_events(model, keys, step[1])
    elif what in ("staged", "tx"):
        apply_events(model, keys, step[1])
        apply_events(model, keys, step[2])
    elif what == "dynamic":
        parts = {PARTS[p] for _, p, _ in step[1]}
        for k in [k for k, (p, _) in model.items() if p in parts]:
            del model[k]
        for k, p, v in step[1]:
            model[keys[k]] = (PARTS[p], v)
    elif what == "delete":
        for k in step[1]:
            model.pop(keys[k], None)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(STEP, min_size=1, max_size=9),
    buckets=st.integers(1, 3),
    auto=st.sampled_from(["off", "inline"]),
)
@pytest.mark.parametrize("kind", sorted(KEYS))
def test_index_and_file_reads_equal_a_dict_for_every_key_type(
    tmp_path_factory: pytest.TempPathFactory, kind: str, steps: list[Any], buckets: int, auto: str
) -> None:
    keys = KEYS[kind][1]
    root = tmp_path_factory.mktemp("k")
    cat = mere.connect(str(root))
    _roots[id(cat)] = root
    a = make(cat, "a", kind, buckets, auto)
    b = make(cat, "b", kind, buckets, auto)
    model: Model = {}
    seen: list[tuple[int, int, Model]] = []
    for step in steps:
        a = step_on(cat, a, kind, keys, step)
        with index_off():
            b = step_on(cat, b, kind, keys, step)
        if step[0] == "reopen":
            cat = mere.connect(str(root))
            _roots[id(cat)] = root
        if step[0] == "forget":
            stored_keys.forget()  # as a new process
        step_model(model, keys, step)
        assert state(b) == model, ("read-files", step)
        assert state(a) == model, ("key-index", step)
        seen.append((a.version, b.version, dict(model)))
    for va, vb, want in seen:
        assert state(a, va) == want
        assert state(b, vb) == want


# -- sequences --------------------------------------------------------------------------------------------

SEQ = pa.schema(
    [("id", pa.int64()), ("status", pa.string()), ("lsn", pa.int64()), ("v", pa.int64()), ("op", pa.string())]
)


def seq_rows(events: list[tuple[int, int, int, bool]]) -> pa.Table:
    return pa.table(
        {
            "id": [e[0] for e in events],
            "status": [PARTS[e[1]] for e in events],
            "lsn": [e[2] for e in events],
            "v": [None if e[3] else e[2] * 10 + e[1] for e in events],
            "op": ["d" if e[3] else "u" for e in events],
        },
        SEQ,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), buckets=st.integers(1, 3), auto=st.sampled_from(["off", "inline"]))
def test_sequenced_moves_with_duplicate_sequences_equal_the_model(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, buckets: int, auto: str
) -> None:
    """Out-of-order events, duplicated sequences (ties: the later commit, then the later row wins), keys
    at int64 limits (a span over 2**47), deletes living in other partitions; index vs file reads."""
    keys = [-(2**63), -1, 0, 7, 2**62]
    # One event per (key, sequence); duplicates are replays of an event (events of one key sharing a
    # sequence: test_on_equal_sequences_the_later_event_wins_in_any_partition).
    events = data.draw(
        st.lists(
            st.tuples(st.sampled_from(keys), st.integers(0, 5), st.integers(1, 12), st.booleans()),
            min_size=1,
            max_size=20,
            unique_by=lambda e: (e[0], e[2]),
        )
    )
    replays = data.draw(st.lists(st.sampled_from(events), max_size=5))
    events = data.draw(st.permutations(events + replays))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=5)))
    compact_after = data.draw(st.sets(st.integers(0, 5)))
    root = tmp_path_factory.mktemp("sq")
    cat = mere.connect(str(root))
    props = {"compaction.auto": auto, "compaction.min-files": "2"}
    kw: dict[str, Any] = dict(
        primary_key="id", partition_by="status", cdc_column="op", sequence_by="lsn", buckets=buckets
    )
    a = cat.create_table("a", SEQ, properties=props, **kw)
    b = cat.create_table("b", SEQ, properties=props, **kw)
    applied: list[tuple[int, int, int, bool]] = []
    for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(events)])):
        chunk = events[lo:hi]
        if not chunk:
            continue
        ra = a.upsert(seq_rows(chunk))
        with index_off():
            rb = b.upsert(seq_rows(chunk))
        assert ra.stale_rows == rb.stale_rows
        applied += chunk
        newest: dict[int, tuple[int, int, int, bool]] = {}
        for e in applied:  # highest sequence (ties are replays of one event)
            if e[0] not in newest or e[2] > newest[e[0]][2]:
                newest[e[0]] = e
        model = {k: (PARTS[e[1]], e[2] * 10 + e[1]) for k, e in newest.items() if not e[3]}
        got_b = {r["id"]: (r["status"], r["v"]) for r in b.scan().to_arrow().to_pylist()}
        got_a = {r["id"]: (r["status"], r["v"]) for r in a.scan().to_arrow().to_pylist()}
        assert a.scan().count() == len(got_a)
        assert got_b == model, ("read-files", chunk)
        assert got_a == model, ("key-index", chunk)
        if i in compact_after:
            a.compact()
            b.compact()


@pytest.mark.parametrize("route", ["key-index", "read-files"])
def test_a_delete_at_the_sequence_of_a_row_elsewhere_wins_as_it_does_at_home(
    tmp_path: Path, route: str
) -> None:
    stored_keys.KEY_INDEX = route == "key-index"
    cat = mere.connect(str(tmp_path))
    kw: dict[str, Any] = dict(primary_key="id", partition_by="status", cdc_column="op", sequence_by="lsn")
    home = cat.create_table("home", SEQ, properties={"compaction.auto": "off"}, **kw)
    away = cat.create_table("away", SEQ, properties={"compaction.auto": "off"}, **kw)
    for t, part in ((home, 0), (away, 1)):
        t.upsert(seq_rows([(1, 0, 5, False)]))
        t.upsert(seq_rows([(1, part, 5, True)]))  # a later commit, the same sequence
    assert state(home) == {}
    assert state(away) == state(home)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), buckets=st.integers(1, 2), auto=st.sampled_from(["off", "inline"]))
def test_on_equal_sequences_the_later_event_wins_in_any_partition(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, buckets: int, auto: str
) -> None:
    """Events of few keys at few sequences, so that rows and deletes of one key share sequences across
    partitions: as in one partition, the highest sequence wins, then the later commit, then the later row.
    Index and file reads, with and without compaction between commits."""
    events = data.draw(
        st.lists(
            st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 3), st.booleans()),
            min_size=1,
            max_size=16,
        )
    )
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=6)))
    compact_after = data.draw(st.sets(st.integers(0, 6)))
    cat = mere.connect(str(tmp_path_factory.mktemp("tie")))
    props = {"compaction.auto": auto, "compaction.min-files": "2"}
    kw: dict[str, Any] = dict(
        primary_key="id", partition_by="status", cdc_column="op", sequence_by="lsn", buckets=buckets
    )
    a = cat.create_table("a", SEQ, properties=props, **kw)
    b = cat.create_table("b", SEQ, properties=props, **kw)
    newest: dict[int, tuple[int, int, int, bool]] = {}
    for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(events)])):
        chunk = events[lo:hi]
        a.upsert(seq_rows(chunk))
        with index_off():
            b.upsert(seq_rows(chunk))
        for e in chunk:  # in commit order, then row order: a tie goes to the later event
            if e[0] not in newest or e[2] >= newest[e[0]][2]:
                newest[e[0]] = e
        model = {k: (PARTS[e[1]], e[2] * 10 + e[1]) for k, e in newest.items() if not e[3]}
        assert state(b) == model, ("read-files", chunk)
        assert state(a) == model, ("key-index", chunk)
        assert a.scan().count() == len(model)
        if i in compact_after:
            a.compact()
            b.compact()


@pytest.mark.parametrize("budget", [None, 40 * 32])
def test_a_long_stream_of_moves_equals_file_reads_and_the_model(tmp_path: Path, budget: int | None) -> None:
    """60 commits of sequenced moves, replays and deletes over 8 partitions and 3 buckets (with a budget:
    some buckets indexed, others read, in one commit); stale counts and states equal the file-read twin."""
    import random

    if budget is not None:
        stored_keys.INDEX_BYTES = budget
    rng = random.Random(7)
    cat = mere.connect(str(tmp_path))
    kw: dict[str, Any] = dict(
        primary_key="id", partition_by="status", cdc_column="op", sequence_by="lsn", buckets=3
    )
    props = {"compaction.auto": "inline", "compaction.min-files": "3"}
    a = cat.create_table("a", SEQ, properties=props, **kw)
    b = cat.create_table("b", SEQ, properties=props, **kw)
    keys = [rng.randrange(-(2**62), 2**62) for _ in range(30)] + list(range(-5, 5))
    newest: dict[int, tuple[int, int, int, bool]] = {}
    used: set[tuple[int, int]] = set()
    history: list[tuple[int, int, int, bool]] = []
    for step in range(60):
        chunk = []
        for _ in range(rng.randrange(1, 12)):
            if history and rng.random() < 0.2:
                chunk.append(rng.choice(history))  # a replay
                continue
            k, lsn = rng.choice(keys), rng.randrange(1, 400)
            if (k, lsn) in used:
                continue
            used.add((k, lsn))
            e = (k, rng.randrange(8), lsn, rng.random() < 0.25)
            chunk.append(e)
            history.append(e)
        if not chunk:
            continue
        ra = a.upsert(seq_rows(chunk))
        with index_off():
            rb = b.upsert(seq_rows(chunk))
        assert ra.stale_rows == rb.stale_rows, step
        for e in chunk:
            if e[0] not in newest or e[2] > newest[e[0]][2]:
                newest[e[0]] = e
        if step % 10 == 9:
            stored_keys.forget()  # as a new process
        if step % 7 == 6:
            a.compact()
            b.compact()
        model = {k: (PARTS[e[1]], e[2] * 10 + e[1]) for k, e in newest.items() if not e[3]}
        assert state(b) == model, step
        assert state(a) == model, step


# -- drop and create again, reopen -----------------------------------------------------------------------


def test_a_table_dropped_and_created_again_at_its_name_starts_a_fresh_index(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    t = make(cat, "o", "int64", 1, "off")
    t.upsert(batch("int64", [(1, "p0", 1, "u"), (2, "p1", 2, "u")]))
    t.upsert(batch("int64", [(1, "p2", 3, "u")]))
    assert state(t) == {1: ("p2", 3), 2: ("p1", 2)}
    cat.drop_table("o", purge=True)
    t = make(cat, "o", "int64", 1, "off")
    assert state(t) == {}
    t.upsert(batch("int64", [(1, "p1", 10, "u")]))
    t.upsert(batch("int64", [(2, "p3", 20, "u")]))
    t.upsert(batch("int64", [(1, "p3", 11, "u"), (2, "p0", 21, "u")]))
    assert state(t) == {1: ("p3", 11), 2: ("p0", 21)}
    t2 = mere.connect(str(tmp_path)).table("o")  # reopened: the same process, the same index
    t2.upsert(batch("int64", [(1, "p5", 12, "u")]))
    t.upsert(batch("int64", [(2, "p5", 22, "u"), (1, "p0", None, "d")]))
    assert state(t2) == {2: ("p5", 22)}
    cat.drop_table("o")  # no purge: the files stay at the location
    t = make(cat, "o", "int64", 1, "off")
    t.upsert(batch("int64", [(2, "p1", 30, "u")]))
    t.upsert(batch("int64", [(2, "p2", 31, "u"), (1, "p2", 1, "u")]))
    assert state(t) == {2: ("p2", 31), 1: ("p2", 1)}


def test_an_older_base_after_a_newer_one_rebuilds(tmp_path: Path) -> None:
    """A staged change committed on a later base, and a time-travel read between writes."""
    cat = mere.connect(str(tmp_path))
    t = make(cat, "o", "int64", 1, "off")
    t.upsert(batch("int64", [(k, PARTS[k % 3], k, "u") for k in range(10)]))
    old = t.version
    staged = t.stage(batch("int64", [(k, "p8", 100 + k, "u") for k in range(0, 10, 2)]))
    t.upsert(batch("int64", [(k, "p7", 200 + k, "u") for k in range(0, 10, 3)]))
    t.commit([staged])
    t.upsert(batch("int64", [(k, "p6", 300 + k, "u") for k in range(0, 10, 5)]))
    want = {k: (PARTS[k % 3], k) for k in range(10)}
    assert state(t, old) == want
    for k in range(0, 10, 3):
        want[k] = ("p7", 200 + k)
    for k in range(0, 10, 2):
        want[k] = ("p8", 100 + k)
    for k in range(0, 10, 5):
        want[k] = ("p6", 300 + k)
    assert state(t) == want


# -- concurrency ------------------------------------------------------------------------------------------


def _writer(root: str, who: int, rounds: int) -> None:
    """Moves its own keys (who*100 + i) and a shared key (0) among partitions, round after round."""
    t = mere.connect(root).table("o")
    for r in range(rounds):
        data = batch(
            "int64",
            [(who * 100 + i, PARTS[(r + i + who) % len(PARTS)], r, "u") for i in range(4)]
            + [(0, PARTS[(r + who) % len(PARTS)], who * 1000 + r, "u")],
        )
        for _ in range(50):
            try:
                t.upsert(data)
                break
            except MereError:
                continue
        else:
            raise AssertionError("no commit after 50 tries")


def _check_concurrent(root: str, writers: int, rounds: int) -> None:
    t = mere.connect(root).table("o")
    got = state(t)  # at most one live row per key
    last = rounds - 1
    for w in range(1, writers + 1):
        for i in range(4):
            assert got[w * 100 + i] == (PARTS[(last + i + w) % len(PARTS)], last)
    assert got[0][1] % 1000 == last  # the shared key: some writer's last round
    # The next writer, with a cold process and with this one's index, still finds every key once.
    t.upsert(batch("int64", [(k, "p0", -1, "u") for k in got]))
    assert state(t) == {k: ("p0", -1) for k in got}


@pytest.mark.parametrize("auto", ["off", "inline"])
def test_threads_moving_keys_at_once(tmp_path: Path, auto: str) -> None:
    make(mere.connect(str(tmp_path)), "o", "int64", 2, auto)
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            _writer(str(tmp_path), w, 6)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in (1, 2, 3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    _check_concurrent(str(tmp_path), 3, 6)


def test_processes_moving_keys_at_once(tmp_path: Path) -> None:
    make(mere.connect(str(tmp_path)), "o", "int64", 2, "inline")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 5)) for w in (1, 2)]
    for p in procs:
        p.start()
    _writer(str(tmp_path), 3, 5)  # this process too, with its index
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    _check_concurrent(str(tmp_path), 3, 5)


@pytest.mark.parametrize("route", ["key-index", "read-files"])
def test_a_change_staged_before_a_compaction_commits_after_it(tmp_path: Path, route: str) -> None:
    stored_keys.KEY_INDEX = route == "key-index"
    t = make(mere.connect(str(tmp_path)), "o", "int32", 2, "off")
    for r in range(4):
        t.upsert(batch("int32", [(k, PARTS[(k + r) % 4], r, "u") for k in range(-6, 6)]))
    staged = t.stage(batch("int32", [(k, "p8", 100, "u") for k in range(-6, 6, 2)] + [(5, "p0", None, "d")]))
    t.compact()
    t.upsert(batch("int32", [(k, "p7", 200, "u") for k in range(-6, 6, 3)]))
    t.commit([staged])
    want = {k: (PARTS[(k + 3) % 4], 3) for k in range(-6, 6)}
    want.update({k: ("p7", 200) for k in range(-6, 6, 3)})
    want.update({k: ("p8", 100) for k in range(-6, 6, 2)})
    del want[5]
    assert state(t) == want
    stored_keys.forget()  # as a new process
    t.upsert(batch("int32", [(k, "p1", 1, "u") for k in want]))
    assert state(t) == {k: ("p1", 1) for k in want}
