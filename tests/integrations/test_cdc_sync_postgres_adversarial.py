"""Adversarial property test of the whole-database sync's core against a real PostgreSQL change stream.

Hypothesis draws small workloads of transactions on a PostgreSQL table whose large text column is stored
out of line (``SET STORAGE EXTERNAL``) under ``REPLICA IDENTITY DEFAULT``: inserts, updates of the other
columns (the TOASTed value is then not logged), updates of the TOASTed value, deletes, re-inserts of
deleted keys, key changes onto fresh keys and onto keys deleted earlier (in the same transaction or an
earlier one), and chains of key changes. The decoded stream (test_decoding, the unchanged TOAST values
left out) is rendered as wal2json and as Debezium lines, cut into micro-batches at transaction
boundaries, shuffled and duplicated inside each batch, and at random points whole earlier batches are
sent again under new idempotency keys, or the stream is re-read from an earlier transaction and batched
anew (at-least-once delivery). After every batch the synced table must equal ``SELECT *`` as of the last
transaction delivered, and ``SyncResult.unresolved`` must be 0 (every key's history is in the stream).

It found three bugs, since fixed; their minimal reproductions stay at the end as regression tests. The
two narrower properties leave out what each bug needed (``avoid`` of ``_run``), the whole property runs
without restriction. Shrinking is off: a failing example shrank for more than five minutes; a failure
lists the SQL run and every batch sent.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import mere
from cdc_render import render_change, wal2json_line
from cdc_source import DOCS, DOCS_TYPES, LOGICAL_SETTINGS, ChangeSource, Event, diff_models
from mere.integrations.cdc_sync import SyncOptions, events_from_json, sync_batch
from services import PostgresServer

pytestmark = pytest.mark.postgres

TYPES = DOCS_TYPES
KEYS = range(1, 7)  # a small key space: keys are reused (re-inserted, moved onto) often


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


@pytest.fixture(scope="module")
def source(server: PostgresServer) -> Iterator[ChangeSource]:
    with ChangeSource((DOCS,), server=server) as src:
        with src.connect(autocommit=True) as conn:
            conn.execute("ALTER TABLE docs REPLICA IDENTITY DEFAULT")
            conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
        yield src


def _big(seed: int) -> str:
    # random (incompressible) text over 2 kB: stored out of line, in TOAST
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(2100, 2600)))


def _body(kind: int, seed: int) -> str | None:
    return {0: None, 1: f"small-{seed}"}.get(kind, _big(seed))


# -- the workload ------------------------------------------------------------------------------------

OPS = ("insert", "reinsert", "n", "tag", "body", "delete", "move-fresh", "move-deleted", "move-chain")
STATEMENT = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, 50),  # which present row
    st.integers(0, 50),  # which target key
    st.integers(0, 3),  # body kind: NULL, small (inline), big, big
    st.integers(0, 10**6),  # value seed
)
WORKLOAD = st.lists(st.lists(STATEMENT, min_size=1, max_size=5), min_size=1, max_size=7)


def _run(
    conn: Any, txns: list[list[tuple[str, int, int, int, int]]], avoid: frozenset[str]
) -> list[tuple[int, dict[Any, Any]]]:
    """Runs the transactions; returns (xid, SELECT * after its commit) for each.

    ``avoid`` leaves out what the known bugs need: ``"reused-moved-key"``: a key a key change left is
    never used again (the replayed key change's bug); ``"move-off-landed"``: a row a key change put on a
    key used before is not moved again (the chain's bug)."""
    present: list[int] = []
    retired: list[int] = []  # keys a key change left, never used again
    landed: set[int] = set()  # keys whose row came by a key change onto a key used before
    deleted: list[int] = []  # keys that held a row and do not now (deleted or moved away), oldest first
    moved_last: int | None = None
    states = []
    for txn in txns:
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        xid = int(row[0]) & 0xFFFFFFFF
        for op, a, b, kind, seed in txn:
            fresh = [k for k in KEYS if k not in present and k not in deleted and k not in retired]
            if op == "reinsert" and not deleted:
                op = "insert"
            if op == "move-deleted" and not deleted:
                op = "move-fresh"
            if op == "move-chain" and moved_last not in present:
                op = "move-fresh"
            if op == "move-chain" and "move-off-landed" in avoid and moved_last in landed:
                op = "move-fresh"
            if op.startswith("move") and not fresh and op != "move-deleted":
                op = "move-deleted" if deleted else "n"
            if op == "insert" and not fresh:
                op = "reinsert" if deleted else "n"
            if op not in ("insert", "reinsert") and not present:
                op = "insert" if fresh else "reinsert"
            if op in ("insert", "reinsert"):
                key = fresh[b % len(fresh)] if op == "insert" else deleted[b % len(deleted)]
                conn.execute(
                    "INSERT INTO docs VALUES (%s, %s, %s, %s)",
                    [key, seed % 100, _body(kind, seed), f"t{seed}"],
                )
                present.append(key)
                if key in deleted:
                    deleted.remove(key)
                continue
            target = present[a % len(present)]
            if op.startswith("move") and "move-off-landed" in avoid and target in landed:
                op = "n"
            if op == "n":
                conn.execute("UPDATE docs SET n = n + 1 WHERE id = %s", [target])
            elif op == "tag":
                conn.execute("UPDATE docs SET tag = %s WHERE id = %s", [f"u{seed}", target])
            elif op == "body":
                conn.execute("UPDATE docs SET body = %s WHERE id = %s", [_body(kind, seed), target])
            elif op == "delete":
                conn.execute("DELETE FROM docs WHERE id = %s", [target])
                present.remove(target)
                deleted.append(target)
                landed.discard(target)
            else:  # a key change: the TOAST pointer is kept, the new row's body is not logged
                if op == "move-chain":
                    assert moved_last is not None
                    target = moved_last
                pool = deleted if op == "move-deleted" else fresh
                new = pool[b % len(pool)]
                if kind == 3:  # a key change that also changes another column
                    conn.execute("UPDATE docs SET id = %s, n = n + 10 WHERE id = %s", [new, target])
                else:
                    conn.execute("UPDATE docs SET id = %s WHERE id = %s", [new, target])
                present[present.index(target)] = new
                if new in deleted:
                    deleted.remove(new)
                    landed.add(new)
                (retired if "reused-moved-key" in avoid else deleted).append(target)
                moved_last = new
        conn.commit()
        rows = conn.execute("SELECT id, n, body, tag FROM docs").fetchall()
        conn.commit()
        states.append((xid, {(r[0],): dict(zip(("id", "n", "body", "tag"), r)) for r in rows}))
    return states


class _Logged:
    """A connection that records the statements it runs (long values shortened), for failure messages."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.log: list[str] = []

    def execute(self, query: str, params: list[Any] | None = None) -> Any:
        if not query.startswith("SELECT"):
            shown = [
                f"<{len(p)} chars {p[:4]}..>" if isinstance(p, str) and len(p) > 40 else p
                for p in params or []
            ]
            self.log.append(f"{query} {shown}")
        return self.conn.execute(query, params)

    def commit(self) -> None:
        if self.log and self.log[-1] != "COMMIT":
            self.log.append("COMMIT")
        self.conn.commit()


def _summary(event: Event) -> str:
    """An event in a few characters: op, LSN, old key -> new key, whether the body is in the image."""
    old = "" if event.before is None else f"{event.before['id']}->"
    new = "" if event.after is None else str(event.after["id"])
    body = "" if event.after is None else (" body" if "body" in event.after else " (no body)")
    return f"{event.op[0].upper()}@{event.lsn:X} {old}{new}{body}"


# -- rendering and delivery --------------------------------------------------------------------------


def _render(event: Event, fmt: str) -> tuple[str, str | None]:
    return render_change(event.op, event.before, event.after, event.lsn, fmt, "docs", TYPES, ["id"])


def _sync(
    source: ChangeSource,
    fmt: str,
    workload: list[list[tuple[str, int, int, int, int]]],
    plan: Any,
    *,
    avoid: frozenset[str] = frozenset(),
    replays: bool = True,
    unresolved_on_replay: bool = True,
) -> list[str]:
    """Runs the workload and delivers its stream as ``plan`` says; returns the failures seen.

    ``replays``: also send earlier events again under new idempotency keys; ``unresolved_on_replay``: count
    ``SyncResult.unresolved`` of those batches as failures too."""
    with source.connect(autocommit=True) as conn:  # start from an empty table and an empty slot
        conn.execute("DELETE FROM docs")
    source.changes(consume=True)
    with source.connect() as conn:
        logged = _Logged(conn)
        states = _run(logged, workload, avoid)
    events = source.changes(consume=True, keep_unchanged=True)
    state_of = dict(states)
    # whole transactions in commit order, each with the source's state after it
    txns: list[tuple[int, list[tuple[str, str | None, str]]]] = []
    for event in events:
        if not txns or txns[-1][0] != event.xid:
            txns.append((event.xid, []))
        txns[-1][1].append((*_render(event, fmt), _summary(event)))
    assert [x for x, _ in txns] == [x for x, _ in states]  # every transaction wrote
    rng: random.Random = plan["rng"]
    failures: list[str] = []
    options = SyncOptions("src", buckets=2)
    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh)
        sent: list[list[tuple[str, str | None, str]]] = []
        trace: list[str] = []
        done = 0  # transactions delivered so far
        counter = 0

        def send(
            part: list[tuple[str, str | None]], why: str, replay: bool = False, again: bool = False
        ) -> None:
            nonlocal counter
            part = part + [rng.choice(part) for _ in range(rng.randint(0, len(part) // 2))]  # duplicates
            rng.shuffle(part)  # out of order inside a batch
            batch = events_from_json(
                [p for p, _, _ in part], fmt, [k for _, k, _ in part] if fmt == "debezium" else None
            )
            trace.append(f"b{counter + (0 if again else 1)} ({why}): {', '.join(s for _, _, s in part)}")
            if not again:
                counter += 1
            result = sync_batch(cat, batch, options, f"b{counter}")
            assert result.already_committed == again
            rows = cat.table("src.docs").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
            got = {(r["id"],): r for r in rows}
            diff = diff_models(got, state_of[txns[done - 1][0]])
            if diff:
                short = [d if len(d) < 200 else d[:200] + "..." for d in diff[:4]]
                failures.append(f"after {why} (batch b{counter}): {short}")
            if result.unresolved and (unresolved_on_replay or not replay):
                failures.append(f"after {why} (batch b{counter}): unresolved={result.unresolved}")

        for size, replay in zip(plan["sizes"], plan["replays"], strict=False):
            if done >= len(txns):
                break
            chunk = [line for _, lines in txns[done : done + size] for line in lines]
            done = min(len(txns), done + size)
            sent.append(chunk)
            if replay == 4 and replays and len(sent) > 1:  # with earlier events again (a producer's retry)
                earlier = [line for batch in sent[:-1] for line in batch]
                mixed = chunk + rng.sample(earlier, rng.randint(1, len(earlier)))
                send(mixed, f"new transactions up to {done}, earlier events among them", replay=True)
                continue
            send(chunk, f"new transactions up to {done}")
            if replay == 3:  # the same batch again under its own key: already committed, changes nothing
                send(chunk, "the same batch again", again=True)
            elif not replays:
                continue
            elif replay == 1 and len(sent) > 1:  # an earlier batch again, under a new idempotency key
                send(list(rng.choice(sent)), "a whole earlier batch again", replay=True)
            elif replay == 2:  # restarted from an earlier offset: the stream read again, batched anew
                start = rng.randrange(done)
                while start < done:
                    stop = rng.randint(start + 1, done)
                    part = [line for _, lines in txns[start:stop] for line in lines]
                    send(part, f"re-read {start}:{stop}", replay=True)
                    start = stop
        if done < len(txns):
            rest = [line for _, lines in txns[done:] for line in lines]
            done = len(txns)
            send(rest, "the rest")
        if not failures:
            # the end: the synced table is the source's table
            rows = cat.table("src.docs").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
            assert diff_models({(r["id"],): r for r in rows}, source.expected_model("docs")) == []
    if failures:
        failures += ["SQL:", *logged.log, "batches:", *trace]
    return failures


PLAN = st.fixed_dictionaries(
    {
        "sizes": st.lists(st.integers(1, 3), min_size=1, max_size=8),
        "replays": st.lists(st.sampled_from([0, 0, 1, 2, 3, 4]), min_size=8, max_size=8),
        "rng": st.randoms(use_true_random=False),
    }
)
SETTINGS = settings(
    max_examples=100,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
@SETTINGS
@given(workload=WORKLOAD, plan=PLAN)
def test_synced_table_follows_postgres_batch_by_batch(
    source: ChangeSource, fmt: str, workload: list[list[tuple[str, int, int, int, int]]], plan: Any
) -> None:
    """Every kind of change, keys moved onto deleted and vacated keys, chains of moves; batches shuffled,
    duplicated and sent twice under their own key; no replays under new keys."""
    failures = _sync(source, fmt, workload, plan, replays=False, avoid=frozenset({"move-off-landed"}))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
@SETTINGS
@given(workload=WORKLOAD, plan=PLAN)
def test_synced_table_survives_replays_when_moved_keys_stay_vacant(
    source: ChangeSource, fmt: str, workload: list[list[tuple[str, int, int, int, int]]], plan: Any
) -> None:
    """At-least-once delivery (earlier batches again under new keys, the stream re-read from an earlier
    transaction), with a workload that never re-uses a key a key change left (deleted keys are re-used):
    the room left by the two bugs below. The unresolved count of replayed batches is not checked here."""
    failures = _sync(
        source,
        fmt,
        workload,
        plan,
        avoid=frozenset({"move-off-landed", "reused-moved-key"}),
        unresolved_on_replay=False,
    )
    assert not failures, "\n".join(failures)


@SETTINGS
@example(
    workload=[
        [("insert", 0, 0, 2, 1), ("insert", 0, 0, 2, 2)],  # 1 and 2, both TOASTed
        [("delete", 0, 0, 0, 0), ("move-deleted", 0, 0, 0, 0), ("move-deleted", 0, 0, 0, 0)],  # 2->1->2
    ],
    plan={"sizes": [1, 1], "replays": [0] * 8, "rng": random.Random(0)},
)
@given(workload=WORKLOAD, plan=PLAN)
def test_synced_table_follows_postgres_through_anything(
    source: ChangeSource, workload: list[list[tuple[str, int, int, int, int]]], plan: Any
) -> None:
    """The whole property: every workload, every delivery, unresolved counted on replays too."""
    failures = _sync(source, "wal2json", workload, plan)
    assert not failures, "\n".join(failures)


# -- the bugs found, as minimal deterministic reproductions (wal2json records) -------------------------

Y, Z = "y" * 3000, "z" * 3000


def _w2j(
    action: str, lsn: int, key: int, n: int | None = None, body: Any = ..., old: int | None = None
) -> str:
    """A wal2json record of ``docs``; ``body=...`` leaves the body out (an unchanged TOASTed value)."""
    after = None if action == "D" else {"id": key, "n": n} | ({} if body is ... else {"body": body})
    return wal2json_line(
        "public", "docs", action, None if old is None else {"id": old}, after, lsn, TYPES, ["id"]
    )


def _apply(batches: list[list[str]], compact: bool = False) -> tuple[dict[int, Any], list[int]]:
    """Sync the batches (batch i under key ``b<i>``; with ``compact``, the table compacted after each): the
    rows by id and each batch's unresolved count."""
    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh)
        unresolved = []
        for i, b in enumerate(batches):
            unresolved.append(
                sync_batch(cat, events_from_json(b, "wal2json"), SyncOptions("src"), f"b{i}").unresolved
            )
            if compact:
                cat.table("src.docs").compact()
        rows = cat.table("src.docs").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
    return {r["id"]: (r["n"], r["body"]) for r in rows}, unresolved


def test_key_change_back_onto_its_key_keeps_its_value() -> None:
    # PostgreSQL: INSERT 1 (body y), 2 (body z); COMMIT. DELETE id=1; UPDATE SET id=1 WHERE id=2;
    # UPDATE SET id=2 WHERE id=1; COMMIT (the key changes keep the TOAST pointer: the body is not logged)
    first = [_w2j("I", 0x10, 1, 0, Y), _w2j("I", 0x11, 2, 15, Z)]
    second = [_w2j("D", 0x20, 1, old=1), _w2j("U", 0x21, 1, 15, old=2), _w2j("U", 0x22, 2, 15, old=1)]
    rows, unresolved = _apply([first, second])
    assert rows == {2: (15, Z)}  # observed: {2: (15, y...)}
    assert unresolved == [0, 0]


@pytest.mark.parametrize("reused_by", ["insert", "key change"])
def test_replayed_key_change_ignores_a_later_row_of_its_old_key(reused_by: str) -> None:
    move = _w2j("U", 0x20, 2, 1, old=1)  # the body (y) not logged
    later = _w2j("I", 0x30, 1, 5, Z) if reused_by == "insert" else _w2j("U", 0x30, 1, 5, old=3)
    first = [_w2j("I", 0x10, 1, 0, Y), _w2j("I", 0x11, 3, 5, Z)]
    rows, _ = _apply([first, [move], [later], [move]])  # the last: the move's batch again, a new key
    assert rows[2] == (1, Y)  # observed: (1, z...)


@pytest.mark.parametrize("gone_by", ["delete", "key change"])
def test_replayed_partial_update_of_a_gone_key_is_not_unresolved(gone_by: str) -> None:
    update = _w2j("U", 0x20, 1, 1)  # the body not logged
    gone = _w2j("D", 0x30, 1, old=1) if gone_by == "delete" else _w2j("U", 0x30, 2, 1, old=1)
    rows, unresolved = _apply([[_w2j("I", 0x10, 1, 0, Y)], [update], [gone], [update]])
    assert rows == ({} if gone_by == "delete" else {2: (1, Y)})
    assert unresolved == [0, 0, 0, 0]  # observed: [0, 0, 0, 1]


@pytest.mark.parametrize("with_later_update", [False, True])
def test_replayed_partial_update_ignores_a_newer_stored_row_of_its_key(with_later_update: bool) -> None:
    # PostgreSQL: INSERT 1 (body y); COMMIT. UPDATE n WHERE id=1; UPDATE SET id=2 WHERE id=1; [UPDATE n
    # WHERE id=2]; COMMIT. INSERT 1 (no body); COMMIT. Then the second transaction is delivered again. Its
    # first update of 1 must not take the body of the newer 1 (NULL) and hand it on along the move to 2.
    update, move = _w2j("U", 0x20, 1, 1), _w2j("U", 0x21, 2, 1, old=1)  # the body (y) not logged
    second = [update, move] + ([_w2j("U", 0x22, 2, 2)] if with_later_update else [])
    third = [_w2j("I", 0x30, 1, 7, None)]
    rows, unresolved = _apply([[_w2j("I", 0x10, 1, 0, Y)], second, third, second])
    assert rows == {1: (7, None), 2: (2 if with_later_update else 1, Y)}  # observed: 2's body None
    assert unresolved == [0, 0, 0, 0]


@pytest.mark.parametrize("compact", [False, True])
def test_a_partial_update_takes_a_stored_version_newer_than_the_batch_rows_before_it(compact: bool) -> None:
    # The stream re-read from an earlier offset, batched anew: an old full update (x) of 1 comes again with
    # a new partial one. The new one's past is the stored version (z, logged after x), not the old event.
    first, old, newer = _w2j("I", 0x10, 1, 0, Y), _w2j("U", 0x20, 1, 1, "x"), _w2j("U", 0x30, 1, 2, Z)
    rows, unresolved = _apply([[first], [old], [newer], [old, _w2j("U", 0x40, 1, 3)]], compact)
    assert rows == {1: (3, Z)}
    assert unresolved == [0, 0, 0, 0]


def _in_txn(xid: int, lines: list[str]) -> list[str]:
    return [line[:-1] + f',"xid":{xid}}}' for line in lines]


@pytest.mark.parametrize("stored_before", [True, False])
def test_keys_shifted_in_one_transaction_keep_every_row(stored_before: bool) -> None:
    # A deferrable key shifted by one statement (UPDATE SET id = id + 1, rows 1 and 2): 1 -> 2 is logged
    # before 2 -> 3, and the second move's delete of 2 means the row that held 2 before, not the moved one.
    first = _in_txn(1, [_w2j("I", 0x10, 1, 0, "one"), _w2j("I", 0x11, 2, 0, "two")])
    shift = _in_txn(2, [_w2j("U", 0x20, 2, 0, "one", old=1), _w2j("U", 0x21, 3, 0, "two", old=2)])
    batches = [first, shift] if stored_before else [first + shift]
    rows, _ = _apply([*batches, shift])  # and the shift delivered again
    assert rows == {2: (0, "one"), 3: (0, "two")}


@pytest.mark.parametrize("deleted_first", [True, False])
def test_a_chain_of_key_changes_in_one_transaction_deletes_its_middle_key(deleted_first: bool) -> None:
    # 1 -> 2 -> 3 in one transaction, 2 held by no row before it (never, or deleted earlier in it)
    first = _in_txn(
        1, [_w2j("I", 0x10, 1, 0, "one")] + ([_w2j("I", 0x11, 2, 0, "two")] if deleted_first else [])
    )
    chain = [_w2j("U", 0x20, 2, 0, "one", old=1), _w2j("U", 0x21, 3, 0, "one", old=2)]
    if deleted_first:
        chain.insert(0, _w2j("D", 0x1F, 2, old=2))
    rows, _ = _apply([first, _in_txn(2, chain), _in_txn(2, chain)])
    assert rows == {3: (0, "one")}


@pytest.mark.parametrize("compact", [False, True])
def test_keys_shifted_with_unchanged_bodies_and_delivered_again(compact: bool) -> None:
    # The shift's updates leave the TOASTed bodies out; delivered again, stored versions newer than the
    # batch's first event join its rows while the bodies are filled, beside the dropped delete of 2.
    first = _in_txn(1, [_w2j("I", 0x10, 1, 0, Y), _w2j("I", 0x11, 2, 0, Z)])
    shift = _in_txn(2, [_w2j("U", 0x20, 2, 0, old=1), _w2j("U", 0x21, 3, 0, old=2)])
    rows, unresolved = _apply([first, shift, shift], compact)
    assert rows == {2: (0, Y), 3: (0, Z)}
    assert unresolved == [0, 0, 0]
