"""Adversarial tests of the refusal of late deletes below partial updates (``WriteChecks._check_late_deletes``).

With ``sequence_by`` and a NOT NULL column in a sequence group, a delete whose sequence falls below a
stored version that carries only other groups would leave the key live without the NOT NULL column: such
a write is refused (``SchemaMismatch``, nothing changed). A refusal where the events, applied in
sequence order, leave every live key whole is a false refusal. The model applies every accepted event of
a (partition, key) in sequence order; the tables are partitioned (keys per partition: table-wide keys
cannot combine with sequence groups), in several buckets, with several events per key in a batch,
compaction (explicit and automatic) in between, and replays.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors

G = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("price", pa.int64(), nullable=False),
        pa.field("price_lsn", pa.int64()),
        pa.field("stock", pa.int64()),
        pa.field("stock_lsn", pa.int64()),
        pa.field("lsn", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
KINDS = ("full", "stock", "price", "delete")
Event = tuple[int, str, int, str]  # key, partition, sequence, kind
State = dict[tuple[str, int], tuple[int | None, int | None]]


def g_batch(events: list[Event]) -> pa.Table:
    rows = []
    for k, p, s, kind in events:
        price = kind in ("full", "price")
        stock = kind in ("full", "stock")
        rows.append(
            dict(
                k=k,
                p=p,
                price=s if price else None,
                price_lsn=s if price else None,
                stock=s if stock else None,
                stock_lsn=s if stock else None,
                lsn=s,
                op="d" if kind == "delete" else "u",
            )
        )
    return pa.Table.from_pylist(rows, schema=G)


def model(events: list[Event]) -> State:
    """Each (partition, key)'s (price, stock): events in sequence order, a delete clearing every group."""
    out: State = {}
    for k, p, s, kind in sorted(events, key=lambda e: e[2]):
        key = (p, k)
        price, stock = out.get(key, (None, None))
        if kind == "delete":
            out.pop(key, None)
            continue
        if kind in ("full", "price"):
            price = s
        if kind in ("full", "stock"):
            stock = s
        out[key] = (price, stock)
    return out


def recreated(events: list[Event]) -> bool:
    """A batch that deletes a key and then (in sequence order) carries it on without its price: refused
    whatever is stored (the documented rule for partial rows starting a key afresh)."""
    for key in {(e[0], e[1]) for e in events}:
        mine = sorted((e for e in events if (e[0], e[1]) == key), key=lambda e: e[2])
        deletes = [i for i, e in enumerate(mine) if e[3] == "delete"]
        after = mine[deletes[-1] + 1 :] if deletes else []
        if after and all(e[3] == "stock" for e in after):
            return True
    return False


def create(root: Path, buckets: int, auto: str, name: str = "g") -> mere.Table:
    props = {"compaction.auto": auto}
    if auto != "off":
        props["compaction.min-files"] = "2"
    return mere.connect(str(root)).create_table(
        name,
        G,
        primary_key="k",
        partition_by="p",
        buckets=buckets,
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price"], "stock_lsn": ["stock"]},
        properties=props,
    )


def state(t: mere.Table, version: int | None = None) -> State:
    out: State = {}
    for r in t.scan(version=version).to_arrow().to_pylist():
        key = (r["p"], r["k"])
        assert key not in out
        out[key] = (r["price"], r["stock"])
    return out


def files(t: mere.Table) -> list[str]:
    return sorted(t.files().column("path").to_pylist())


EVENT = st.tuples(st.integers(0, 5), st.sampled_from(["a", "b"]), st.integers(1, 40), st.sampled_from(KINDS))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), buckets=st.integers(1, 3), auto=st.sampled_from(["off", "inline"]))
def test_late_deletes_are_refused_exactly_where_the_sequence_order_leaves_a_key_without_price(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, buckets: int, auto: str
) -> None:
    events = data.draw(st.lists(EVENT, min_size=1, max_size=18, unique_by=lambda e: (e[0], e[1], e[2])))
    stream = data.draw(st.permutations(events + data.draw(st.lists(st.sampled_from(events), max_size=4))))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=6)))
    compact_after = data.draw(st.sets(st.integers(0, 6)))
    t = create(tmp_path_factory.mktemp("ld"), buckets, auto)
    accepted: list[Event] = []
    for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(stream)])):
        batch = stream[lo:hi]
        if not batch:
            continue
        before = (t.version, state(t), files(t))
        trial = model(accepted + batch)
        whole = all(p is not None for p, _ in trial.values())
        try:
            t.upsert(g_batch(batch))
        except errors.SchemaMismatch as e:
            assert (t.refresh().version, state(t), files(t)) == before  # nothing changed
            assert not whole or recreated(batch), f"false refusal of {batch} after {accepted}: {e}"
        else:
            assert whole, f"accepted {batch} after {accepted}: leaves {trial}"
            accepted += batch
        assert state(t) == model(accepted)
        if i in compact_after:
            t.compact()
            assert state(t) == model(accepted)
    for e in accepted:  # replays change nothing and are never refused
        t.upsert(g_batch([e]))
    assert state(t) == model(accepted)


def test_a_late_delete_is_judged_per_partition_and_bucket(tmp_path: Path) -> None:
    t = create(tmp_path, 4, "off")
    keys = range(8)
    t.upsert(g_batch([(k, p, 1, "full") for k in keys for p in "ab"]))
    t.upsert(g_batch([(k, "a", 5, "stock") for k in keys]))  # partition a: stock newer than the delete below
    version = t.version
    # The delete at 3 in partition b leaves b's rows deleted; in a it would strand the stock update at 5.
    t.upsert(g_batch([(k, "b", 3, "delete") for k in keys]))
    assert state(t) == {("a", k): (1, 5) for k in keys}
    for k in keys:
        with pytest.raises(errors.SchemaMismatch, match="price"):
            t.upsert(g_batch([(j, "b", 9, "full") for j in keys] + [(k, "a", 3, "delete")]))
    assert t.refresh().version == version + 1
    # With the price newer than the delete in the same batch (events of one key in any order): lands.
    t.upsert(g_batch([(k, "a", 3, "delete") for k in keys] + [(k, "a", 4, "price") for k in keys]))
    assert state(t) == {("a", k): (4, 5) for k in keys}


def test_a_late_delete_after_compaction_is_judged_on_the_compacted_groups(tmp_path: Path) -> None:
    t = create(tmp_path, 1, "off")
    t.upsert(g_batch([(1, "a", 1, "full"), (2, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 5, "stock"), (2, "a", 5, "full")]))
    t.compact()
    version = t.version
    with pytest.raises(errors.SchemaMismatch):
        t.upsert(g_batch([(1, "a", 3, "delete")]))
    assert t.refresh().version == version
    t.upsert(g_batch([(2, "a", 3, "delete")]))  # below a whole row: stale
    assert state(t) == {("a", 1): (1, 5), ("a", 2): (5, 5)}
    # A delete above everything, then the late one below it: the key ends deleted, both land.
    t.upsert(g_batch([(1, "a", 9, "delete")]))
    t.compact()
    t.upsert(g_batch([(1, "a", 3, "delete")]))
    assert state(t) == {("a", 2): (5, 5)}


def test_staged_and_transaction_late_deletes_are_refused(tmp_path: Path) -> None:
    t = create(tmp_path, 2, "off")
    t.upsert(g_batch([(1, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 5, "stock")]))
    version, before = t.version, files(t)
    staged = t.stage(g_batch([(1, "a", 3, "delete")]))
    with pytest.raises(errors.SchemaMismatch):
        t.commit([staged])
    with pytest.raises(errors.SchemaMismatch), t.transaction() as tx:
        tx.upsert(g_batch([(2, "a", 1, "full")]))
        tx.upsert(g_batch([(1, "a", 3, "delete")]))
    assert (t.refresh().version, files(t)) == (version, before)
    # The transaction's later upsert carries the price above the delete: the key stays whole.
    with t.transaction() as tx:
        tx.upsert(g_batch([(1, "a", 3, "delete")]))
        tx.upsert(g_batch([(1, "a", 4, "price")]))
    assert state(t) == {("a", 1): (4, 5)}


def test_a_late_delete_replayed_by_a_second_writer_is_refused_there_too(tmp_path: Path) -> None:
    t = create(tmp_path, 1, "off")
    other: Any = mere.connect(str(tmp_path)).table("g")
    t.upsert(g_batch([(1, "a", 1, "full")]))
    other.upsert(g_batch([(1, "a", 6, "stock")]))  # t has not seen it
    with pytest.raises(errors.SchemaMismatch):
        t.upsert(g_batch([(1, "a", 2, "delete")]))
    assert state(t) == {("a", 1): (1, 6)}


def _stranded(t: mere.Table) -> None:
    t.upsert(g_batch([(1, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 5, "stock")]))


LATE_KEYS = {"k": [1], "p": ["a"], "lsn": [3]}  # a delete by key carrying its (late) sequence


def _by_table_delete(t: mere.Table) -> None:
    t.delete(pa.table(LATE_KEYS))


def _by_transaction_delete(t: mere.Table) -> None:
    with t.transaction() as tx:
        tx.delete(pa.table(LATE_KEYS))


def _by_staged_delete(t: mere.Table) -> None:
    t.commit([t.stage(pa.table(LATE_KEYS), "delete")])


@pytest.mark.parametrize("how", [_by_table_delete, _by_transaction_delete, _by_staged_delete])
def test_a_late_delete_by_key_below_a_partial_update_is_refused(tmp_path: Path, how: Any) -> None:
    t = create(tmp_path, 1, "off")
    _stranded(t)
    version, before = t.version, files(t)
    with contextlib.suppress(errors.SchemaMismatch):
        how(t)
    assert (t.refresh().version, files(t)) == (version, before)
    assert state(t) == {("a", 1): (1, 5)}


def test_the_same_late_delete_as_a_cdc_row_is_refused(tmp_path: Path) -> None:
    """The CDC form of the test above: the two must agree."""
    t = create(tmp_path, 1, "off")
    _stranded(t)
    narrow = pa.table(
        {"k": pa.array([1], pa.int64()), "p": ["a"], "lsn": pa.array([3], pa.int64()), "op": ["d"]}
    )
    with pytest.raises(errors.SchemaMismatch, match="price"):
        t.upsert(narrow)
    with pytest.raises(errors.SchemaMismatch, match="price"):
        t.commit([t.stage(narrow)])
    assert state(t) == {("a", 1): (1, 5)}


def test_a_late_delete_by_key_beside_an_upsert_in_one_transaction_is_refused(tmp_path: Path) -> None:
    """With an upsert in the same transaction the checks run, and see the delete's markers."""
    t = create(tmp_path, 1, "off")
    _stranded(t)
    version = t.version
    with pytest.raises(errors.SchemaMismatch, match="price"), t.transaction() as tx:
        tx.delete(pa.table(LATE_KEYS))
        tx.upsert(g_batch([(2, "a", 1, "full")]))
    assert t.refresh().version == version
    assert state(t) == {("a", 1): (1, 5)}


@pytest.mark.parametrize("auto", ["off", "inline"])
def test_late_events_below_a_compacted_delete_stay_stale(tmp_path: Path, auto: str) -> None:
    """A delete at 9 compacted (with everything below it): late partial rows, whole rows and deletes
    below 9 are stale, neither refused nor resurrecting the key."""
    t = create(tmp_path, 1, auto)
    t.upsert(g_batch([(1, "a", 1, "full"), (2, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 9, "delete")]))
    t.compact()
    t.compact()
    for late in (
        [(1, "a", 5, "stock")],
        [(1, "a", 3, "full")],
        [(1, "a", 4, "delete"), (1, "a", 6, "stock")],
    ):
        try:
            t.upsert(g_batch(late))
        except errors.SchemaMismatch:
            assert late[-1][2] == 6  # the batch's own delete-then-partial rule (refused whatever is stored)
        assert state(t) == {("a", 2): (1, 1)}
        t.compact()


@pytest.mark.parametrize("rename", [("price", "cost"), ("price_lsn", "plsn")])
def test_a_late_delete_below_a_whole_row_lands_after_a_rename(
    tmp_path: Path, rename: tuple[str, str]
) -> None:
    t = create(tmp_path, 1, "off")
    t.upsert(g_batch([(1, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 5, "full")]))
    t.rename_column(*rename)
    late = g_batch([(1, "a", 3, "delete")])
    t.upsert(late.rename_columns([rename[1] if c == rename[0] else c for c in G.names]))  # stale: lands
    assert t.scan().count() == 1


@pytest.mark.parametrize("rename", [("stock", "qty"), ("stock_lsn", "slsn"), ("lsn", "seqno")])
def test_late_deletes_after_other_renames(tmp_path: Path, rename: tuple[str, str]) -> None:
    t = create(tmp_path, 1, "off")
    t.upsert(g_batch([(1, "a", 1, "full"), (2, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 5, "stock"), (2, "a", 5, "full")]))
    t.rename_column(*rename)
    names = [rename[1] if c == rename[0] else c for c in G.names]
    with pytest.raises(errors.SchemaMismatch, match="price"):
        t.upsert(g_batch([(1, "a", 3, "delete")]).rename_columns(names))
    t.upsert(g_batch([(2, "a", 3, "delete")]).rename_columns(names))
    assert t.scan().count() == 2


def test_a_replayed_partial_row_below_a_delete_stays_stale_after_renaming_the_sequence(
    tmp_path: Path,
) -> None:
    t = create(tmp_path, 1, "off")
    t.upsert(g_batch([(1, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 9, "delete")]))
    t.rename_column("lsn", "seqno")
    t.upsert(g_batch([(1, "a", 5, "stock")]).rename_columns(["seqno" if c == "lsn" else c for c in G.names]))
    assert t.scan().count() == 0


def test_a_replayed_partial_row_below_a_delete_stays_stale(tmp_path: Path) -> None:
    t = create(tmp_path, 1, "off")
    t.upsert(g_batch([(1, "a", 1, "full")]))
    t.upsert(g_batch([(1, "a", 9, "delete")]))
    t.rename_column("stock", "qty")
    t.upsert(g_batch([(1, "a", 5, "stock")]).rename_columns(["qty" if c == "stock" else c for c in G.names]))
    assert t.scan().count() == 0


def test_a_late_delete_racing_a_partial_update_never_strands_the_key(tmp_path: Path) -> None:
    """Two writers, one a late delete at 3 and one a stock update at 5, of a key whole at 1: whichever
    lands first, the other is refused (or retried and refused); never both (the key live without price)."""
    import threading

    create(tmp_path, 1, "off")
    ta = mere.connect(str(tmp_path)).table("g")
    tb = mere.connect(str(tmp_path)).table("g")
    rounds = 12
    for k in range(rounds):
        ta.upsert(g_batch([(k, "a", 1, "full")]))
    outcome: dict[tuple[str, int], str] = {}

    def run(name: str, t: mere.Table, kind: str, seq: int, barrier: threading.Barrier, k: int) -> None:
        barrier.wait()
        try:
            t.upsert(g_batch([(k, "a", seq, kind)]))
            outcome[(name, k)] = "landed"
        except errors.SchemaMismatch:
            outcome[(name, k)] = "refused"
        except errors.MereError as e:  # a conflict the retry policy gave up on
            outcome[(name, k)] = type(e).__name__

    for k in range(rounds):
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=run, args=("delete", ta, "delete", 3, barrier, k)),
            threading.Thread(target=run, args=("stock", tb, "stock", 5, barrier, k)),
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    got = {k: v for (_, k), v in state(ta.refresh()).items()}
    for k in range(rounds):
        accepted = [(k, "a", 1, "full")]
        if outcome[("delete", k)] == "landed":
            accepted.append((k, "a", 3, "delete"))
        if outcome[("stock", k)] == "landed":
            accepted.append((k, "a", 5, "stock"))
        want = model(accepted).get(("a", k))
        assert want is None or want[0] is not None, (k, outcome)
        assert got.get(k) == want, (k, outcome)


def test_a_stored_delete_between_a_folded_rows_group_and_its_sequence_is_refused(tmp_path: Path) -> None:
    """A write's events of one key fold into one row: price from the event at 1, the row at 3. A stored
    delete at 2 clears that price group and would leave the key live at 3 without its NOT NULL price."""
    t = create(tmp_path / "a", 1, "off")
    t.upsert(g_batch([(1, "b", 2, "delete")]))
    before = (t.version, state(t), files(t))
    with pytest.raises(errors.SchemaMismatch, match="non-nullable"):
        t.upsert(g_batch([(1, "b", 1, "full"), (1, "b", 3, "stock")]))
    assert (t.refresh().version, state(t), files(t)) == before
    # a stored price above the delete keeps the key whole: accepted
    t = create(tmp_path / "b", 1, "off")
    t.upsert(g_batch([(1, "b", 2, "delete")]))
    t.upsert(g_batch([(1, "b", 4, "full")]))
    t.upsert(g_batch([(1, "b", 1, "full"), (1, "b", 6, "stock")]))
    assert (
        state(t)
        == {("b", 1): (4, 6)}
        == model([(1, "b", 2, "delete"), (1, "b", 4, "full"), (1, "b", 1, "full"), (1, "b", 6, "stock")])
    )
    # the group at the row's own sequence, above the delete: accepted
    t = create(tmp_path / "c", 1, "off")
    t.upsert(g_batch([(1, "b", 2, "delete")]))
    t.upsert(g_batch([(1, "b", 3, "full"), (1, "b", 5, "stock")]))
    assert state(t) == {("b", 1): (3, 5)}
