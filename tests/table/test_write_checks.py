"""Writes that depend on the table's state: NOT NULL columns left out, and integer ``sum`` columns.

No write may leave a table that reads back wrong or cannot be read: a partial row may only update a key
that exists, and an upsert whose sums would leave the column's type is refused, naming the key. Both are
checked per split at the version the write commits on, for the direct and the staged (distributed) path,
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from maintenance import MANUAL
from mere import errors

REQ = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("p", pa.string()),
        pa.field("req", pa.int64(), nullable=False),
        pa.field("opt", pa.string()),
    ]
)


def rows(t: mere.Table) -> list[dict[str, Any]]:
    return sorted(t.scan().to_arrow().to_pylist(), key=lambda r: (r["id"], str(r.get("p"))))


def unchanged(t: mere.Table, call: Any, error: type[Exception], match: str | None = None) -> None:
    """``call`` raises ``error`` and leaves the table exactly as it was (version, rows and files)."""
    before = (t.version, rows(t), sorted(t.files().column("path").to_pylist()))
    with pytest.raises(error, match=match):
        call()
    assert (t.version, rows(t), sorted(t.files().column("path").to_pylist())) == before


# -- NOT NULL columns -----------------------------------------------------------------------------------------


def test_cdc_batch_with_a_not_null_column_is_accepted(cat: mere.Catalog) -> None:
    """Deleted keys carry nulls in every other column: that must not clash with NOT NULL."""
    t = cat.create_table("t.cdc", REQ, primary_key="id", cdc_column="op", buckets=1)
    t.upsert(pa.table({"id": [1, 1, 2], "p": ["a"] * 3, "req": [1, 2, 5], "op": ["I", "U", "D"]}))
    assert rows(t) == [{"id": 1, "p": "a", "req": 2, "opt": None}]
    t.upsert(pa.table({"id": [1, 3, 3], "p": ["a"] * 3, "req": [0, 7, 8], "op": ["D", "I", "U"]}))
    assert rows(t) == [{"id": 3, "p": "a", "req": 8, "opt": None}]


def test_partial_rows_may_only_update_existing_keys(cat: mere.Catalog) -> None:
    t = cat.create_table("t.req", REQ, primary_key="id", cdc_column="op", buckets=2)
    t.upsert(pa.table({"id": [1, 2], "p": ["a", "a"], "req": [7, 8]}))
    t.upsert(pa.table({"id": [1], "p": ["a"], "opt": ["x"]}))  # an existing key: fine
    assert rows(t)[0] == {"id": 1, "p": "a", "req": 7, "opt": "x"}
    unchanged(
        t,
        lambda: t.upsert(pa.table({"id": [1, 9], "p": ["a", "a"], "opt": ["y", "z"]})),
        errors.SchemaMismatch,
        "new key.*9.*req",
    )
    # Deleted and inserted again in one batch without the column: a fresh row that would read back null.
    unchanged(
        t,
        lambda: t.upsert(pa.table({"id": [1, 1], "p": ["a", "a"], "op": ["D", "I"]})),
        errors.SchemaMismatch,
        "deleted and inserted again",
    )
    unchanged(
        t,
        lambda: t.upsert(pa.table({"id": [2, 2], "p": ["a", "a"], "opt": ["q", "r"], "op": ["D", "U"]})),
        errors.SchemaMismatch,
        "req",
    )
    # With the column, the same batch is fine; a key deleted earlier needs it again.
    t.upsert(pa.table({"id": [2, 2], "p": ["a", "a"], "req": [None, 3], "op": ["D", "I"]}))
    t.delete("id = 1")
    unchanged(t, lambda: t.upsert(pa.table({"id": [1], "p": ["a"], "opt": ["back"]})), errors.SchemaMismatch)
    assert rows(t) == [{"id": 2, "p": "a", "req": 3, "opt": None}]


def test_staged_partial_rows_are_checked_when_committed(cat: mere.Catalog) -> None:
    t = cat.create_table("t.staged", REQ, primary_key="id", buckets=2)
    t.upsert(pa.table({"id": [1], "p": ["a"], "req": [7]}))
    staged = t.stage(pa.table({"id": [2], "p": ["a"]}), "upsert")
    unchanged(t, lambda: t.commit([staged]), errors.SchemaMismatch, "new key.*2")
    # Two stages: the first creates the key with the column, the second updates it partially.
    first = t.stage(pa.table({"id": [5], "p": ["a"], "req": [50]}), "upsert")
    second = t.stage(pa.table({"id": [5, 1], "p": ["a", "a"], "opt": ["five", "one"]}), "upsert")
    t.commit([first, second])
    assert rows(t) == [
        {"id": 1, "p": "a", "req": 7, "opt": "one"},
        {"id": 5, "p": "a", "req": 50, "opt": "five"},
    ]


def test_partial_upsert_in_the_null_partition(cat: mere.Catalog) -> None:
    t = cat.create_table(
        "t.nullpart", REQ, primary_key="id", partition_by="p", buckets=2, key_scope="partition"
    )
    t.upsert(pa.table({"id": [1, 1], "p": pa.array([None, "b"], pa.string()), "req": [1, 2]}))
    t.upsert(pa.table({"id": [1], "p": pa.array([None], pa.string()), "opt": ["x"]}))
    assert rows(t) == [{"id": 1, "p": None, "req": 1, "opt": "x"}, {"id": 1, "p": "b", "req": 2, "opt": None}]
    # The key exists in another partition only: a new row of this one.
    unchanged(t, lambda: t.upsert(pa.table({"id": [1], "p": ["c"], "opt": ["y"]})), errors.SchemaMismatch)


def test_partial_rows_spread_over_several_runs_of_one_streamed_write(cat: mere.Catalog) -> None:
    """A stream is written in runs (here one per batch): the checks see the runs in order, as one write."""
    t = cat.create_table(
        "t.runs", REQ, primary_key="id", cdc_column="op", buckets=2, properties={"write.chunk-bytes": "1"}
    )
    t.upsert(pa.table({"id": [1, 2], "p": ["a", "a"], "req": [1, 2]}))
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("opt", pa.string()), ("op", pa.string())])

    def stream(*batches: tuple[list[int], list[str]]) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(
            schema,
            [
                pa.record_batch(
                    [
                        pa.array(ids),
                        pa.array(["a"] * len(ids)),
                        pa.array([f"v{i}" for i in ids]),
                        pa.array(ops),
                    ],
                    schema=schema,
                )
                for ids, ops in batches
            ],
        )

    t.upsert(stream(([1], ["U"]), ([2], ["U"]), ([1], ["U"])))
    assert len(t.history()[-1].internal["splits"]) >= 1 and t.history()[-1].summary["added_files"] == 3
    # Deleted in one run, inserted again in a later one, never given req: refused as a whole.
    unchanged(
        t, lambda: t.upsert(stream(([2], ["D"]), ([1], ["U"]), ([2], ["I"]))), errors.SchemaMismatch, "2"
    )
    assert rows(t) == [{"id": 1, "p": "a", "req": 1, "opt": "v1"}, {"id": 2, "p": "a", "req": 2, "opt": "v2"}]


# -- integer sums ---------------------------------------------------------------------------------------------


SUMS = pa.schema(
    [("id", pa.int64()), ("q", pa.int64()), ("small", pa.int32()), ("u", pa.uint64()), ("f", pa.float64())]
)


def summed(cat: mere.Catalog, **kwargs: Any) -> mere.Table:
    return cat.create_table(
        "t.sums",
        SUMS,
        primary_key="id",
        cdc_column="op",
        merge_operators={"q": "sum", "small": "sum", "u": "sum", "f": "sum"},
        properties=MANUAL,  # the tests count what a write reads: no compaction after it
        **kwargs,
    )


def test_an_overflowing_sum_is_refused_and_the_table_stays_readable(cat: mere.Catalog) -> None:
    t = summed(cat, buckets=2)
    big = 2**62
    t.upsert(pa.table({"id": [1, 2], "q": [big, -big]}))
    t.upsert(pa.table({"id": [1], "q": [big - 1]}))  # 2**63 - 1: still fits
    unchanged(t, lambda: t.upsert(pa.table({"id": [1], "q": [1]})), errors.SumOverflow, r"key \{'id': 1\}")
    unchanged(t, lambda: t.upsert(pa.table({"id": [2], "q": [-big - 1]})), errors.SumOverflow, "'id': 2")
    t.upsert(pa.table({"id": [2], "q": [-big]}))  # -2**63 fits
    assert {r["id"]: r["q"] for r in rows(t)} == {1: 2**63 - 1, 2: -(2**63)}
    # Narrower types overflow at their own bounds; a batch overflowing on its own names the key too.
    t.upsert(pa.table({"id": [3], "small": pa.array([2**31 - 1], pa.int32())}))
    unchanged(
        t, lambda: t.upsert(pa.table({"id": [3], "small": pa.array([1], pa.int32())})), errors.SumOverflow
    )
    unchanged(t, lambda: t.upsert(pa.table({"id": [4, 4], "q": [big, big]})), errors.SumOverflow, "'id': 4")
    # A key deleted (or deleted and inserted again in one batch) starts from zero.
    t.upsert(pa.table({"id": [1, 1], "q": [None, 5], "op": ["D", "I"]}))
    assert {r["id"]: r["q"] for r in rows(t)}[1] == 5
    t.delete("TRUE")
    assert rows(t) == []
    assert t.scan().count() == 0


def test_unsigned_sums_use_the_whole_range(cat: mere.Catalog) -> None:
    t = summed(cat, buckets=1)
    t.upsert(pa.table({"id": [1], "u": pa.array([2**63 + 5], pa.uint64())}))
    assert rows(t)[0]["u"] == 2**63 + 5
    t.upsert(pa.table({"id": [1], "u": pa.array([2**63 - 6], pa.uint64())}))
    assert rows(t)[0]["u"] == 2**64 - 1
    unchanged(t, lambda: t.upsert(pa.table({"id": [1], "u": pa.array([1], pa.uint64())})), errors.SumOverflow)
    t.compact()
    assert rows(t)[0]["u"] == 2**64 - 1


def test_float_sums_never_refuse(cat: mere.Catalog) -> None:
    t = summed(cat, buckets=1)
    t.upsert(pa.table({"id": [1], "f": [1e308]}))
    t.upsert(pa.table({"id": [1], "f": [1e308]}))
    assert rows(t)[0]["f"] == float("inf")


def test_staged_sums_are_checked_when_committed(cat: mere.Catalog) -> None:
    t = summed(cat, buckets=2)
    t.upsert(pa.table({"id": [1], "q": [2**62]}))
    a = t.stage(pa.table({"id": [1], "q": [2**62 - 1]}), "upsert")
    b = t.stage(pa.table({"id": [1], "q": [1]}), "upsert")
    unchanged(t, lambda: t.commit([a, b]), errors.SumOverflow, "'id': 1")
    t.commit([t.stage(pa.table({"id": [1], "q": [2**62 - 1]}), "upsert")])
    assert rows(t)[0]["q"] == 2**63 - 1


def test_sum_checks_stay_cheap_while_far_from_the_bound(cat: mere.Catalog) -> None:
    """Statistics bound the current sums: small values never read data pages before committing."""
    t = summed(cat, buckets=2)
    for i in range(5):
        t.upsert(pa.table({"id": list(range(1000)), "q": [i] * 1000}))
    t.storage.stats.reset()
    t.upsert(pa.table({"id": [3], "q": [1]}))
    assert t.storage.stats.row_groups_read == 0
    # Two big keys of one bucket: the statistics bound (2**63 + ...) no longer proves the next write safe,
    # so the current sums are read, of that bucket only; the exact sums show it fits.
    buckets = mere.bucket_ids(pa.table({"id": list(range(2000, 2100))}), 2).tolist()
    a, b = [2000 + i for i, x in enumerate(buckets) if x == buckets[0]][:2]
    t.upsert(pa.table({"id": [a], "q": [2**62]}))
    t.upsert(pa.table({"id": [b], "q": [2**62]}))
    t.storage.stats.reset()
    t.upsert(pa.table({"id": [a], "q": [2**62 - 1]}))
    in_bucket = [f for f in t.files_at(t.version) if f.bucket == buckets[0]]
    assert 0 < t.storage.stats.row_groups_read <= len(in_bucket)
    assert {r["id"]: r["q"] for r in rows(t)}[a] == 2**63 - 1
    unchanged(t, lambda: t.upsert(pa.table({"id": [a], "q": [1]})), errors.SumOverflow)


def _add(warehouse: str, catalog: str, value: int, n: int) -> int:
    t = mere.connect(warehouse, catalog=catalog).table("t.sums")
    refused = 0
    for _ in range(n):
        try:
            t.upsert(pa.table({"id": [1], "q": [value]}))
        except errors.SumOverflow:
            refused += 1
    return refused


def test_concurrent_writers_cannot_overflow_a_sum_together(catalog_url: str, tmp_path: Any) -> None:
    """Each writer's check holds at its own version; the commit validation accounts for the others."""
    wh = str(tmp_path / "wh")
    t = summed(mere.connect(wh, catalog=catalog_url), buckets=1)
    step = 2**59  # 16 additions fit below 2**63, the 17th does not (start 0)
    t.upsert(pa.table({"id": [1], "q": [0]}))
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        refused = sum(pool.starmap(_add, [(wh, catalog_url, step, 6)] * 4))
    total = rows(t)[0]["q"]
    assert total == (24 - refused) * step
    assert total <= 2**63 - 1 and refused >= 24 - 15  # at most 15 more additions fit after the first 0


_names = itertools.count()


def test_a_batch_whose_running_sum_leaves_the_type_but_ends_inside_is_stored_exactly(
    local_cat: mere.Catalog,
) -> None:
    t = local_cat.create_table(
        "t.running", SUMS, primary_key="id", cdc_column="op", merge_operators={"q": "sum"}
    )
    t.upsert(
        pa.table(
            {"id": [0, 0, 0, 0], "q": pa.array([2**61, 2**61, 2**62, -(2**62)], pa.int64()), "op": ["I"] * 4}
        )
    )
    assert t.scan().to_arrow().column("q").to_pylist() == [2**62]
    t.upsert(pa.table({"id": [0], "q": pa.array([-(2**62)], pa.int64()), "op": ["U"]}))
    t.upsert(pa.table({"id": [0], "q": pa.array([2**62], pa.int64()), "op": ["U"]}))
    assert t.scan().to_arrow().column("q").to_pylist() == [2**62]  # each write's resulting sum fits
    with pytest.raises(errors.SumOverflow):
        t.upsert(pa.table({"id": [0], "q": pa.array([2**62], pa.int64()), "op": ["U"]}))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 3),
                st.sampled_from([2**61, 2**62, -(2**62), 1, None]),
                st.sampled_from(["I", "U", "D"]),
            ),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_property_sums_never_overflow_and_match_a_model(local_cat: mere.Catalog, batches: list[Any]) -> None:
    name = f"t.s{next(_names)}"  # one table per example (examples can repeat while Hypothesis shrinks)
    t = local_cat.create_table(
        name, SUMS, primary_key="id", cdc_column="op", merge_operators={"q": "sum"}, buckets=2
    )
    model: dict[int, int | None] = {}
    for batch in batches:
        trial = dict(model)
        for k, v, op in batch:
            if op == "D":
                trial.pop(k, None)
            else:
                old = trial.get(k)
                trial[k] = old if v is None else (v if old is None else old + v)
        # A write is stored as one net row per key (its rows folded since the batch's last delete of the key),
        # so that net sum must fit, as must each key's resulting sum. Partial sums that leave the type on the
        # way (2**62 + 2**62 - 2**62) are fine: the fold is exact whenever its result fits.
        net: dict[int, int | None] = {}
        for k, v, op in batch:
            if op == "D":
                net.pop(k, None)
            else:
                old = net.get(k)
                net[k] = old if v is None else (v if old is None else old + v)
        fits = all(v is None or -(2**63) <= v < 2**63 for v in [*trial.values(), *net.values()])
        data = pa.table(
            {
                "id": [b[0] for b in batch],
                "q": pa.array([b[1] for b in batch], pa.int64()),
                "op": [b[2] for b in batch],
            }
        )
        if fits:
            t.upsert(data)
            model = trial
        else:
            with pytest.raises(errors.SumOverflow):
                t.upsert(data)
        assert {r["id"]: r["q"] for r in t.scan(columns=["id", "q"]).to_arrow().to_pylist()} == model


# -- NOT NULL columns in sequence groups --------------------------------------------------------------------

G = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("price", pa.int64(), nullable=False),
        pa.field("price_lsn", pa.int64()),
        pa.field("stock", pa.int64()),
        pa.field("stock_lsn", pa.int64()),
        pa.field("lsn", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
# (key, sequence, kind): a whole row, a row carrying the stock group only, or a delete.
G_EVENT = st.tuples(st.integers(0, 4), st.integers(1, 10_000), st.sampled_from(["full", "stock", "delete"]))


def g_table(where: str, properties: dict[str, str] | None = None) -> mere.Table:
    """A table of G keyed by ``k``, sequenced by ``lsn``, with a price group (NOT NULL) and a stock group."""
    return mere.connect(where).create_table(
        "w.g",
        G,
        primary_key="k",
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price"], "stock_lsn": ["stock"]},
        properties=properties,
    )


def g_batch(events: list[tuple[int, int, str]]) -> pa.Table:
    """One batch: rows not carrying the price group hold NULL in it (its sequence NULL)."""
    rows = []
    for k, s, kind in events:
        full = kind == "full"
        rows.append(
            dict(
                k=k,
                price=s if full else None,
                price_lsn=s if full else None,
                stock=s if kind != "delete" else None,
                stock_lsn=s if kind != "delete" else None,
                lsn=s,
                op="d" if kind == "delete" else "u",
            )
        )
    return pa.Table.from_pylist(rows, schema=G)


def g_model(events: list[tuple[int, int, str]]) -> dict[int, tuple[int | None, int]]:
    """Each key's (price, stock) from events applied in sequence order (a delete clears every group)."""
    state: dict[int, tuple[int | None, int]] = {}
    for k, s, kind in sorted(events, key=lambda e: e[1]):
        if kind == "delete":
            state.pop(k, None)
        elif kind == "full":
            state[k] = (s, s)
        else:
            state[k] = (state[k][0] if k in state else None, s)
    return state


def recreated(events: list[tuple[int, int, str]]) -> bool:
    """Whether a batch deletes a key and then (in sequence order) carries it on without a whole row."""
    for key in {e[0] for e in events}:
        mine = sorted((e for e in events if e[0] == key), key=lambda e: e[1])
        deletes = [i for i, e in enumerate(mine) if e[2] == "delete"]
        after = mine[deletes[-1] + 1 :] if deletes else []
        if after and all(e[2] == "stock" for e in after):
            return True
    return False


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_not_null_group_columns_under_sequences_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    events = data.draw(st.lists(G_EVENT, min_size=1, max_size=16, unique_by=lambda e: e[1]))
    stream = data.draw(st.permutations(events + data.draw(st.lists(st.sampled_from(events), max_size=4))))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=5)))
    compact_after = data.draw(st.sets(st.integers(0, 5)))
    t = g_table(str(tmp_path_factory.mktemp("gnn")), {"compaction.auto": "off"})
    accepted: list[tuple[int, int, str]] = []

    def state() -> dict[int, tuple[int | None, int]]:
        return {r["k"]: (r["price"], r["stock"]) for r in t.to_arrow().to_pylist()}

    for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(stream)])):
        batch = stream[lo:hi]
        if not batch:
            continue
        before = t.version
        try:
            t.upsert(g_batch(batch))
        except errors.SchemaMismatch:
            assert t.refresh().version == before  # refused: nothing committed
            # Refused only where the events would leave a live key without its NOT NULL price, or where
            # the batch deletes a key and brings it back without it (refused whatever is stored above).
            assert any(p is None for p, _ in g_model(accepted + batch).values()) or recreated(batch)
        else:
            accepted += batch
        want = g_model(accepted)
        assert all(p is not None for p, _ in want.values())  # NOT NULL holds
        assert state() == want
        if i in compact_after:
            t.compact()
    # A replay of any accepted event is never refused (a late event after a delete is stale, not new),
    # and changes nothing.
    for e in accepted:
        t.upsert(g_batch([e]))
        assert state() == g_model(accepted)


def test_a_late_delete_below_a_partial_update_is_refused_and_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # In sequence order: a whole row at 2, a delete at 3 (arriving last), the stock group alone at 4. The
    # delete clears the price group (its sequence 2 is below 3) and the stock update at 4 lives on: the
    # key would be live without its NOT NULL price. Hypothesis found it (the property above).
    t = g_table(str(tmp_path_factory.mktemp("gld")))
    t.upsert(g_batch([(0, 1, "full"), (1, 2, "full"), (1, 4, "stock")]))
    t.upsert(g_batch([(2, 2, "full")]))
    t.upsert(g_batch([(2, 4, "stock")]))  # the same in two commits
    version = t.version
    for key in (1, 2):
        with pytest.raises(errors.SchemaMismatch, match="price"):
            t.upsert(g_batch([(0, 9, "delete"), (key, 3, "delete")]))
        assert t.refresh().version == version
    assert {r["k"]: (r["price"], r["stock"]) for r in t.to_arrow().to_pylist()} == {
        0: (1, 1),
        1: (2, 4),
        2: (2, 4),
    }
    # Below a whole row (the price group newer than the delete), or with the price in the same batch, or
    # below a later delete: the key ends whole or deleted, and the delete lands.
    t.upsert(g_batch([(1, 5, "full")]))
    t.upsert(g_batch([(1, 3, "delete")]))
    t.upsert(g_batch([(2, 3, "delete"), (2, 6, "full")]))
    t.upsert(g_batch([(0, 7, "stock"), (0, 8, "delete")]))
    t.upsert(g_batch([(0, 6, "delete")]))
    assert {r["k"]: (r["price"], r["stock"]) for r in t.to_arrow().to_pylist()} == {1: (5, 5), 2: (6, 6)}


def test_staged_rows_leaving_out_a_not_null_group_are_checked_when_committed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    t = g_table(str(tmp_path_factory.mktemp("gst")))
    t.commit([t.stage(g_batch([(1, 10, "full")]))])
    # Key 1 exists: a row carrying the stock group only updates it; key 2 does not: refused, nothing lands.
    version = t.version
    with pytest.raises(errors.SchemaMismatch, match="price"):
        t.commit([t.stage(g_batch([(1, 12, "stock")])), t.stage(g_batch([(2, 13, "stock")]))])
    assert t.refresh().version == version
    t.commit([t.stage(g_batch([(1, 12, "stock")]))])
    t.commit([t.stage(g_batch([(1, 20, "delete")]))])
    t.commit([t.stage(g_batch([(1, 15, "stock")]))])  # below the delete: stale, not refused
    assert {r["k"]: (r["price"], r["stock"]) for r in t.to_arrow().to_pylist()} == {}
