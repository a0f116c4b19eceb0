"""The whole-database sync's core (mere.integrations.cdc_sync), without Spark: envelopes, routing, table
creation, evolution, one catalog transaction per batch, replays, and bad input changing nothing.

The property test drives random multi-table transactions through random batches (events shuffled and
duplicated inside a batch, batches replayed under their own key and under a new one, Debezium and wal2json
envelopes mixed) and compares every table after every batch with a dict model of the events applied in
log order.
"""

from __future__ import annotations

import base64
import decimal
import itertools
import json
import random
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from cdc_render import debezium_key, debezium_line, wal2json_line
from mere.errors import MereError
from mere.integrations.cdc_sync import (
    EVENT_SCHEMA,
    CdcEventError,
    SyncOptions,
    apply_plan,
    base64_decoded,
    decode_values,
    events_from_json,
    plan_batch,
    source_type,
    sync_batch,
)

TABLES = {
    "a": ({"id": "integer", "v": "text", "n": "bigint"}, ["id"]),
    "b": ({"k": "text", "x": "double precision", "on": "boolean"}, ["k"]),
    "c": ({"id": "integer", "a_id": "integer", "amt": "numeric(10,2)", "day": "date"}, ["id"]),
}
Model = dict[str, dict[Any, dict[str, Any]]]


def _row(table: str, key: int, value: int) -> dict[str, Any]:
    if table == "a":
        return {"id": key, "v": f"v'{value}\n", "n": value * 10**12}
    if table == "b":
        return {"k": f"k{key}", "x": value / 3, "on": value % 2 == 0}
    return {
        "id": key,
        "a_id": value % 4,
        "amt": Decimal(value).scaleb(-2),
        "day": __import__("datetime").date(2000, 1, 1 + value % 28),
    }


UNCHANGED = "__debezium_unavailable_value"
TOASTABLE = {"a": "v", "c": "amt"}  # a column an update may leave out (PostgreSQL's unchanged TOAST value)


def _line(
    fmt: str, table: str, op: str, before: Any, after: Any, lsn: int, omit: bool = False
) -> tuple[str, str | None]:
    types, key = TABLES[table]
    if omit and after is not None:  # wal2json leaves the column out, Debezium writes its placeholder
        col = TOASTABLE[table]
        after = {c: v for c, v in after.items() if c != col or fmt == "debezium"}
        if fmt == "debezium":
            after[col] = UNCHANGED
    if fmt == "debezium":
        line = debezium_line("public", table, op, before, after, lsn, types)
        return line, debezium_key(after or before, key)
    w2j = {"c": "I", "u": "U", "d": "D"}[op]
    return wal2json_line("public", table, w2j, before, after, lsn, types, key), None


def _lines(
    fmt: str, table: str, op: str, before: Any, after: Any, lsn: int, omit: bool = False
) -> list[tuple[str | None, str | None]]:
    """A change's lines; a key change ("mv") is one wal2json U, and a Debezium delete + create. Debezium
    follows a delete with a tombstone (its key, a null value), as it does by default."""
    if op != "mv":
        lines = [_line(fmt, table, op, before, after, lsn, omit)]
    elif fmt == "wal2json":
        lines = [_line(fmt, table, "u", before, after, lsn, omit)]
    else:
        lines = [_line(fmt, table, "d", before, None, lsn), _line(fmt, table, "c", None, after, lsn)]
    if fmt == "debezium" and op in ("d", "mv"):
        lines.insert(1, (None, lines[0][1]))
    return lines  # type: ignore[return-value]


def _events(lines: list[tuple[str | None, str | None]], fmt: str) -> pa.Table:
    return events_from_json(
        [line for line, _ in lines], fmt, [k for _, k in lines] if fmt == "debezium" else None
    )


def _read(cat: mere.Catalog) -> Model:
    snap = cat.snapshot()
    out: Model = {}
    for name in snap.tables():
        table = name.split(".")[1]
        if table not in TABLES:
            continue
        key = TABLES[table][1][0]
        rows = snap.table(name).to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
        out[table] = {r[key]: r for r in rows}
    return out


ops = st.lists(
    st.tuples(
        st.sampled_from(sorted(TABLES)),
        st.integers(0, 5),
        st.sampled_from(["up", "up", "del", "mv"]),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    transactions=st.lists(ops, min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 12), max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_transactions_in_random_batches_land_as_the_model(
    transactions: list[list[tuple[str, int, str, int]]], cuts: list[int], seed: int
) -> None:
    rng = random.Random(seed)
    model: Model = {t: {} for t in TABLES}
    lsn = 0
    per_tx: list[list[tuple[str, str, Any, Any, int, bool]]] = []
    # One envelope per stream: Debezium (decimal.handling.mode=string) makes numeric columns strings.
    fmt = rng.choice(["debezium", "wal2json"])
    for tx in transactions:
        events = []
        for table, k, action, value in tx:
            key = k if table != "b" else f"k{k}"
            old = model[table].get(key)
            lsn += rng.randint(1, 3)
            omit = old is not None and table in TOASTABLE and rng.random() < 0.4
            if action == "up":
                row = _row(table, k, value)
                if omit:  # an update leaving the TOASTed column as it was: its image lacks it
                    row[TOASTABLE[table]] = old[TOASTABLE[table]]
                events.append((table, "u" if old else "c", old, row, lsn, omit))
                model[table][key] = row
            elif action == "mv" and old is not None:
                moved = (k + 1 + value % 5) % 6
                new_key = moved if table != "b" else f"k{moved}"
                if new_key not in model[table]:
                    row = _row(table, moved, value)
                    omit = omit and fmt == "wal2json"  # Debezium's key change is a delete and a create
                    if omit:
                        row[TOASTABLE[table]] = old[TOASTABLE[table]]
                    events.append((table, "mv", old, row, lsn, omit))
                    del model[table][key]
                    model[table][new_key] = row
            elif old is not None:
                events.append((table, "d", old, None, lsn, False))
                del model[table][key]
        per_tx.append(events)
    # the model after each transaction, to compare at batch ends
    states: list[Model] = []
    replay: Model = {t: {} for t in TABLES}
    for events in per_tx:
        for table, op, before, after, *_ in events:
            key_col = TABLES[table][1][0]
            if op in ("d", "mv"):
                replay[table].pop(before[key_col], None)
            if op != "d":
                replay[table][after[key_col]] = dict(after)
        states.append({t: dict(rows) for t, rows in replay.items()})
    bounds = sorted({0, len(per_tx), *(c for c in cuts if c <= len(per_tx))})

    def expected(rows: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
        if fmt == "wal2json":
            return rows
        return {
            k: {c: str(v) if isinstance(v, Decimal) else v for c, v in r.items()} for k, r in rows.items()
        }

    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh)
        options = SyncOptions("src", buckets=2)
        sent: list[tuple[str, pa.Table]] = []
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            lines = [line for events in per_tx[lo:hi] for e in events for line in _lines(fmt, *e)]
            lines += [rng.choice(lines) for _ in range(len(lines) // 4)] if lines else []
            rng.shuffle(lines)  # out of order inside the batch: the log position orders
            batch = _events(lines, fmt)
            sync_batch(cat, batch, options, f"batch-{i}")
            sent.append((f"batch-{i}", batch))
            if (
                batch.num_rows and rng.random() < 0.5
            ):  # Spark replaying the batch: the same key changes nothing
                assert sync_batch(cat, batch, options, f"batch-{i}").already_committed
            if sent and rng.random() < 0.3:  # at-least-once delivery: an old batch again, under a new key
                _, old_batch = rng.choice(sent)
                sync_batch(cat, old_batch, options, f"again-{i}")
            got = _read(cat)
            want = states[hi - 1]
            for table in TABLES:
                assert got.get(table, {}) == expected(want[table]), (table, i)


def _cat(tmp_path: Path) -> mere.Catalog:
    return mere.connect(str(tmp_path / "wh"))


def _state(cat: mere.Catalog) -> dict[str, Any]:
    return {name: (cat.table(name).version, cat.table(name).to_arrow().to_pylist()) for name in cat.tables()}


def test_one_batch_commits_every_table_in_one_catalog_transaction(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    lines = [
        _line("debezium", "a", "c", None, _row("a", 1, 1), 10),
        _line("debezium", "c", "c", None, _row("c", 7, 1), 11),
    ]
    result = sync_batch(cat, _events(lines, "debezium"), SyncOptions("shop"), "k1")
    assert sorted(result.created) == ["shop.a", "shop.c"]
    times = {cat.table(n).history()[-1].committed_at for n in ("shop.a", "shop.c")}
    assert len(times) == 1  # one catalog transaction: one commit time
    assert cat.table("shop.a").spec.sequence_by == ("_cdc_lsn",)
    assert cat.table("shop.c").schema.field("amt").type == pa.string()  # decimal.handling.mode=string
    again = sync_batch(cat, _events(lines, "debezium"), SyncOptions("shop"), "k1")
    assert again.already_committed and cat.table("shop.a").version == 1


def test_table_overrides_set_buckets_partitioning_and_names(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    options = SyncOptions(
        "shop",
        buckets=2,
        overrides={"public.c": {"buckets": 3, "partition_by": ["day"], "name": "lines"}},
    )
    lines = [
        _line("wal2json", "c", "c", None, _row("c", 7, 1), 11),
        _line("wal2json", "a", "c", None, _row("a", 1, 1), 12),
    ]
    sync_batch(cat, _events(lines, "wal2json"), options, "k1")
    spec = cat.table("shop.lines").spec
    assert (spec.buckets, spec.partition_by) == (3, ("day",))
    assert cat.table("shop.a").spec.buckets == 2


def test_per_table_options_match_a_bare_table_name_and_the_qualified_one_wins(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    options = SyncOptions(
        "shop",
        partition_by={"c": ["day"]},
        overrides={"c": {"buckets": 3, "name": "lines"}, "a": {"buckets": 5}, "public.a": {"buckets": 2}},
    )
    lines = [
        _line("wal2json", "c", "c", None, _row("c", 7, 1), 11),
        _line("wal2json", "a", "c", None, _row("a", 1, 1), 12),
    ]
    sync_batch(cat, _events(lines, "wal2json"), options, "k1")
    spec = cat.table("shop.lines").spec  # "c" named the source table public.c: nothing ignored
    assert (spec.buckets, spec.partition_by) == (3, ("day",))
    assert cat.table("shop.a").spec.buckets == 2


def test_key_only_deletes_of_a_table_not_made_yet_wait_for_its_partition_columns(tmp_path: Path) -> None:
    """A stream started on a populated source: a table's first events may be deletes whose images hold the
    key only, so no event yet says what the partition column is. They wait in the pending table and apply,
    in log order, with the batch that makes the table (a late older insert of a deleted key stays deleted)."""
    cat = _cat(tmp_path)
    options = SyncOptions("shop", partition_by={"c": ["day"]})
    first = [_line("wal2json", "c", "d", {"id": 5}, None, 20)]
    result = sync_batch(cat, _events(first, "wal2json"), options, "k1")
    assert (result.waiting, result.applied, cat.tables()) == (1, 0, ["shop.cdc_pending"])
    assert cat.table("shop.cdc_pending").to_arrow().num_rows == 1
    late = [
        _line("wal2json", "c", "c", None, _row("c", 5, 1), 10),  # older than the delete: stays deleted
        _line("wal2json", "c", "c", None, _row("c", 6, 2), 30),
    ]
    result = sync_batch(cat, _events(late, "wal2json"), options, "k2")
    assert (result.waiting, result.created) == (0, ["shop.c"])
    t = cat.table("shop.c")
    assert t.spec.partition_by == ("day",)
    assert [r["id"] for r in t.to_arrow().to_pylist()] == [6]
    assert cat.table("shop.cdc_pending").to_arrow().num_rows == 0
    # Planned and applied by a caller that does not hold the pending table: the waiting events are added.
    other = SyncOptions("two", partition_by={"c": ["day"]})
    plan = plan_batch(cat, _events(first, "wal2json"), other)
    assert (plan.tables, plan.waiting.num_rows) == ([], 1)
    apply_plan(cat, plan, other, "k3")
    assert cat.table("two.cdc_pending").to_arrow().num_rows == 1
    # Unpartitioned, the same deletes make the table from the key alone.
    result = sync_batch(cat, _events(first, "wal2json"), SyncOptions("three"), "k4")
    assert (result.waiting, result.created) == (0, ["three.c"])


def test_added_columns_and_widened_types_evolve_the_table(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    types = {"id": "integer", "q": "integer", "amt": "numeric(8,2)"}
    first = wal2json_line(
        "public", "t", "I", None, {"id": 1, "q": 5, "amt": Decimal("1.50")}, 10, types, ["id"]
    )
    sync_batch(cat, events_from_json([first], "wal2json"), SyncOptions("s"), "k1")
    wider = {"id": "integer", "q": "bigint", "amt": "numeric(12,2)", "note": "text"}
    row = {"id": 2, "q": 2**40, "amt": Decimal("12345678.25"), "note": "new"}
    second = wal2json_line("public", "t", "I", None, row, 20, wider, ["id"])
    result = sync_batch(cat, events_from_json([second], "wal2json"), SyncOptions("s"), "k2")
    assert result.evolved == ["s.t"]
    t = cat.table("s.t")
    assert t.schema.field("q").type == pa.int64() and t.schema.field("amt").type == pa.decimal128(12, 2)
    rows = sorted(t.to_arrow().drop_columns(["_cdc_lsn"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "q": 5, "amt": Decimal("1.50"), "note": None},
        {"id": 2, "q": 2**40, "amt": Decimal("12345678.25"), "note": "new"},
    ]
    # a narrower type than the table's is read into the table's type (no change of layout)
    third = wal2json_line(
        "public", "t", "U", {"id": 1}, {"id": 1, "q": 6}, 30, {"id": "integer", "q": "integer"}, ["id"]
    )
    assert sync_batch(cat, events_from_json([third], "wal2json"), SyncOptions("s"), "k3").evolved == []


def _bad(cat: mere.Catalog, lines: list[str], fmt: str = "debezium", **options: Any) -> CdcEventError:
    before = _state(cat)
    with pytest.raises(CdcEventError) as caught:
        sync_batch(cat, events_from_json(lines, fmt), SyncOptions("s", **options), "bad")
    assert isinstance(caught.value, MereError)
    assert _state(cat) == before  # nothing committed
    assert cat.transaction("bad").already_committed is False
    return caught.value


def _seed(cat: mere.Catalog) -> str:
    good = debezium_line("public", "a", "c", None, _row("a", 1, 1), 10, TABLES["a"][0])
    sync_batch(cat, events_from_json([good], "debezium", [json.dumps({"id": 1})]), SyncOptions("s"), "seed")
    return good


def test_a_table_without_primary_key_is_refused_naming_it(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    good = _seed(cat)
    keyless = debezium_line("public", "log", "c", None, {"m": "x"}, 11, {"m": "text"})
    e = _bad(cat, [good, keyless])
    assert e.table == "public.log" and e.event == keyless and "primary key" in str(e)


def test_a_table_without_primary_key_can_be_kept_as_a_change_log(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    lines = [
        debezium_line("public", "log", "c", None, {"m": "x"}, 11, {"m": "text"}),
        debezium_line("public", "log", "d", {"m": "x"}, None, 12, {"m": "text"}),
    ]
    sync_batch(cat, events_from_json(lines, "debezium"), SyncOptions("s", no_key="append"), "k")
    t = cat.table("s.log")
    assert not t.spec.primary_key
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["_cdc_lsn"]) == [
        {"m": "x", "_cdc_lsn": 11, "_cdc_op": "c"},
        {"m": "x", "_cdc_lsn": 12, "_cdc_op": "d"},
    ]


def test_an_unknown_op_is_refused(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    good = _seed(cat)
    odd = json.loads(debezium_line("public", "a", "c", None, _row("a", 2, 2), 12, TABLES["a"][0]))
    odd["payload"]["op"] = "x"
    e = _bad(cat, [good, json.dumps(odd)])
    assert e.table == "public.a" and "unknown op" in str(e) and '"op": "x"' in (e.event or "")


@pytest.mark.parametrize("fmt", ["debezium", "wal2json"])
def test_a_truncate_is_refused_with_what_to_do_instead(tmp_path: Path, fmt: str) -> None:
    cat = _cat(tmp_path)
    good = _seed(cat)
    if fmt == "debezium":
        odd = json.loads(debezium_line("public", "a", "c", None, _row("a", 2, 2), 12, TABLES["a"][0]))
        odd["payload"]["op"], odd["payload"]["after"] = "t", None
        line = json.dumps(odd)
        lines = [good, line]
    else:
        line = '{"action":"T","schema":"public","table":"a","lsn":"0/C"}'
        lines = [line]
    e = _bad(cat, lines, fmt)
    assert e.table == "public.a" and "TRUNCATE is not applied" in str(e) and "Table.truncate" in str(e)
    assert e.event == line


@pytest.mark.parametrize(
    "line",
    [
        "not json at all",
        '{"payload": {"op": "c", "after": {"id": 1}}}',
        '["an", "array"]',
        '{"op": "c", "source": {}}',
    ],
)
def test_a_malformed_envelope_is_refused(tmp_path: Path, line: str) -> None:
    cat = _cat(tmp_path)
    good = _seed(cat)
    e = _bad(cat, [good, line])
    assert e.event == line and "malformed" in str(e)


def test_missing_images_and_positions_are_refused(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    good = _seed(cat)
    no_after = json.loads(debezium_line("public", "a", "u", _row("a", 1, 1), None, 12, TABLES["a"][0]))
    assert "no row image" in str(_bad(cat, [good, json.dumps(no_after)]))
    no_lsn = json.loads(good)
    del no_lsn["payload"]["source"]["lsn"], no_lsn["payload"]["ts_ms"]
    assert "log position" in str(_bad(cat, [json.dumps(no_lsn)]))


@pytest.mark.parametrize("image", ["columns", "identity"])
def test_a_row_image_naming_a_column_twice_is_refused(tmp_path: Path, image: str) -> None:
    cat = _cat(tmp_path)
    _seed(cat)
    record = json.loads(
        wal2json_line("public", "a", "U", {"id": 1}, _row("a", 1, 2), 12, TABLES["a"][0], ["id"])
    )
    record[image].append(dict(record[image][-1], value="7"))  # which of the two is meant cannot be told
    twice = json.dumps(record)
    e = _bad(cat, [twice], "wal2json")
    assert e.event == twice and "names a column twice" in str(e)
    kept = sync_batch(
        cat, events_from_json([twice], "wal2json"), SyncOptions("s", on_error="quarantine"), "q"
    )
    assert kept.refused == 1 and kept.applied == 0


def test_two_source_tables_of_one_name_in_one_batch_are_refused(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    types = {"id": "integer", "v": "text"}
    lines = [
        wal2json_line(schema, "t", "I", None, {"id": 1, "v": schema}, lsn, types, ["id"])
        for lsn, schema in ((10, "public"), (11, "other"))
    ]
    e = _bad(cat, lines, "wal2json")
    assert "map onto one table s.t" in str(e) and "overrides" in str(e)
    kept = sync_batch(cat, events_from_json(lines, "wal2json"), SyncOptions("s", on_error="quarantine"), "q")
    assert kept.refused == 2 and "s.t" not in cat.tables()
    one = sync_batch(cat, events_from_json(lines[:1], "wal2json"), SyncOptions("s"), "one")
    assert one.applied == 1 and cat.table("s.t").spec.properties["cdc.source-table"] == "public.t"
    e = _bad(cat, lines[1:], "wal2json")  # a later batch of the other one
    assert "holds the events of source table public.t, not of other.t" in str(e)


def test_a_type_change_that_cannot_evolve_is_refused_naming_the_table(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    _seed(cat)
    retyped = debezium_line(
        "public", "a", "u", None, {"id": 1, "v": "x", "n": "12"}, 20, {**TABLES["a"][0], "n": "text"}
    )
    other = debezium_line("public", "b", "c", None, _row("b", 1, 1), 21, TABLES["b"][0])
    e = _bad(cat, [retyped, other])
    assert e.table == "public.a" and "changed type from int64 to string" in str(e)
    assert "s.b" not in cat.tables()  # the other table's events did not commit either


def test_a_value_its_type_cannot_hold_is_refused(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    _seed(cat)
    bad = wal2json_line(
        "public",
        "a",
        "I",
        None,
        {"id": 3, "v": "x", "n": 1},
        30,
        {"id": "integer", "v": "text", "n": "date"},
        ["id"],
    )
    assert "column 'n'" in str(_bad(cat, [bad], "wal2json"))


def test_quarantine_commits_the_good_events_and_keeps_the_bad_ones(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    good = _seed(cat)
    odd = json.loads(debezium_line("public", "a", "c", None, _row("a", 2, 2), 12, TABLES["a"][0]))
    odd["payload"]["op"] = "x"
    keyless = debezium_line("public", "log", "c", None, {"m": "x"}, 13, {"m": "text"})
    update = debezium_line("public", "a", "u", _row("a", 1, 1), _row("a", 1, 9), 14, TABLES["a"][0])
    lines = [json.dumps(odd), "garbage", keyless, update]
    result = sync_batch(
        cat,
        events_from_json(lines, "debezium", [None, None, None, json.dumps({"id": 1})]),
        SyncOptions("s", on_error="quarantine"),
        "q1",
    )
    assert result.refused == 3 and result.applied == 1
    assert cat.table("s.a").to_arrow().to_pylist()[0]["n"] == 9 * 10**12
    kept = cat.table("s.cdc_quarantine").to_arrow().to_pylist()
    assert sorted(r["event"] for r in kept) == sorted(lines[:3])
    assert {r["batch"] for r in kept} == {"q1"}
    assert good  # the seed's event stays applied


def test_replayed_batches_and_transactions_see_one_read_point(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    lines = [_line("wal2json", "a", "c", None, _row("a", i, i), 10 + i) for i in range(5)]
    lines += [_line("wal2json", "c", "c", None, _row("c", i, i), 20 + i) for i in range(5)]
    sync_batch(cat, _events(lines, "wal2json"), SyncOptions("s"), "k1")
    snap = cat.snapshot()
    assert snap.versions == {"s.a": 1, "s.c": 1}


def test_source_types_and_decoding() -> None:
    assert source_type("numeric(12,3)")[0] == pa.decimal128(12, 3)
    assert source_type("character varying(20)")[0] == pa.string()
    assert source_type("io.debezium.time.Date")[0] == pa.date32()
    for refused in ("numeric", "org.apache.kafka.connect.data.Decimal", "integer[]", "numeric(40,2)"):
        with pytest.raises(MereError):
            source_type(refused)
    assert decode_values(pa.array(["\\x00ff", None, "\\x"]), "bytea").to_pylist() == [b"\x00\xff", None, b""]
    assert decode_values(pa.array(["AP8=", None]), "bytes").to_pylist() == [b"\x00\xff", None]
    assert (
        decode_values(pa.array(["0", "1"]), "io.debezium.time.Date").to_pylist()[1].isoformat()
        == "1970-01-02"
    )
    with pytest.raises(MereError):
        decode_values(pa.array(["\\x0"]), "bytea")


def test_plan_reads_only(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    lines = [_line("debezium", "a", "c", None, _row("a", 1, 1), 10)]
    plan = plan_batch(cat, _events(lines, "debezium"), SyncOptions("s"))
    assert [p.name for p in plan.tables] == ["s.a"] and cat.tables() == []
    with pytest.raises(MereError):
        plan_batch(cat, pa.table({"table": ["x"]}), SyncOptions("s"))
    assert EVENT_SCHEMA.names[0] == "table"


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "cdc.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "spark" not in b]
    assert blocks
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/cdc.md", "exec"), {})


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
def test_an_update_of_the_primary_key_moves_the_row(tmp_path: Path, fmt: str) -> None:
    cat = _cat(tmp_path)
    one, two = _row("a", 1, 1), {**_row("a", 1, 5), "id": 2}
    if fmt == "wal2json":  # one U record, the old key as identity
        lines = [_line(fmt, "a", "c", None, one, 10), _line(fmt, "a", "u", one, two, 11)]
    else:  # Debezium writes a key change as a delete and a create
        lines = [_line(fmt, "a", "c", None, one, 10), _line(fmt, "a", "d", one, None, 11)]
        lines.append(_line(fmt, "a", "c", None, two, 11))
    sync_batch(cat, _events(lines, fmt), SyncOptions("s"), "k")
    assert [r["id"] for r in cat.table("s.a").to_arrow().to_pylist()] == [2]
    # a late replay of the first insert does not bring key 1 back
    sync_batch(cat, _events(lines[:1], fmt), SyncOptions("s"), "again")
    assert [r["id"] for r in cat.table("s.a").to_arrow().to_pylist()] == [2]


def test_a_moved_row_takes_its_unchanged_toasted_value_from_its_old_key_only(tmp_path: Path) -> None:
    """wal2json's key-changing U leaves an unchanged TOASTed column out: its value is the OLD key's, never
    a value the new key held before a delete (earlier in the batch or stored), and a replay of the batch
    (at-least-once, under a new key: the old key is gone by then) keeps it rather than blanking it."""
    cat = _cat(tmp_path)
    big1, old2 = _row("a", 1, 1), _row("a", 2, 2)

    def moved(lsn: int) -> tuple[str, str | None]:  # 1 -> 2, the TOASTed v left out, n changed
        return _line("wal2json", "a", "u", big1, {**_row("a", 2, 7), "v": big1["v"]}, lsn, omit=True)

    def later(lsn: int) -> tuple[str, str | None]:  # a later update of key 2 leaving v out again
        return _line("wal2json", "a", "u", None, {**_row("a", 2, 9), "v": big1["v"]}, lsn, omit=True)

    def v_of_key_2() -> Any:
        return {r["id"]: r["v"] for r in cat.table("s.a").to_arrow().to_pylist()}.get(2)

    # one batch: key 2 inserted and deleted, then key 1 moved onto it
    first = [
        _line("wal2json", "a", "c", None, big1, 10),
        _line("wal2json", "a", "c", None, old2, 11),
        _line("wal2json", "a", "d", old2, None, 12),
        moved(13),
        later(14),
    ]
    for order in (first, first[::-1]):  # the log position orders, not the line order
        sync_batch(cat, _events(order, "wal2json"), SyncOptions("s"), f"one-{order is first}")
        assert v_of_key_2() == big1["v"]
        cat.drop_table("s.a")
    # across batches: key 2's old value is stored, its delete and the move come later
    sync_batch(cat, _events(first[:2], "wal2json"), SyncOptions("s"), "base")
    batch = _events([first[2], moved(13), later(14)], "wal2json")
    sync_batch(cat, batch, SyncOptions("s"), "move")
    assert v_of_key_2() == big1["v"]
    sync_batch(cat, batch, SyncOptions("s"), "move-again")  # at-least-once: key 1 is stored nowhere now
    assert v_of_key_2() == big1["v"]
    cat.table("s.a").compact()  # the stored rows folded into one run: a replay reads the same versions
    sync_batch(cat, batch, SyncOptions("s"), "move-after-compaction")
    sync_batch(cat, _events(first[:2], "wal2json"), SyncOptions("s"), "base-again")  # late: older LSNs
    assert v_of_key_2() == big1["v"]
    assert sorted(r["id"] for r in cat.table("s.a").to_arrow().to_pylist()) == [2]


def _unscaled(value: str, scale: int) -> str:
    """Connect's binary decimal: base64 of the unscaled value, big-endian two's complement."""
    unscaled = int(Decimal(value).scaleb(scale, context=decimal.Context(prec=80)))
    width = (unscaled.bit_length() + 8) // 8
    return base64.b64encode(unscaled.to_bytes(width, "big", signed=True)).decode()


EDGE_DECIMALS = [
    "0",
    "-0.0000000001",
    "0.0000000001",
    "1.5",
    "-128",
    "127.9999999999",
    "9999999999999999999999999999.9999999999",
    "-9999999999999999999999999999.9999999999",
    "12345678901234567890.1234567890",
]
EDGE_IDS = [2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1, 0, 1, 2, 3, 4]


def _binary_decimal_line(table: str, lsn: int, row: dict[str, Any], parameters: dict[str, str] | None) -> str:
    decimal_field: dict[str, Any] = {
        "field": "amt",
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
    }
    if parameters is not None:
        decimal_field["parameters"] = parameters
    fields = [{"field": "id", "type": "int64"}, decimal_field]
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": fields}]}
    payload = {"op": "c", "after": row, "source": {"schema": "public", "table": table, "lsn": lsn}}
    return json.dumps({"schema": schema, "payload": payload})


def test_numbers_are_exact_in_both_envelopes(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    types = {"id": "bigint", "amt": "numeric(38,10)"}
    w2j = [
        wal2json_line("public", "w", "I", None, {"id": i, "amt": Decimal(d)}, n + 1, types, ["id"])
        for n, (i, d) in enumerate(zip(EDGE_IDS, EDGE_DECIMALS, strict=True))
    ]
    parameters = {"scale": "10", "connect.decimal.precision": "38"}
    dbz = [
        _binary_decimal_line("d", n + 1, {"id": i, "amt": _unscaled(d, 10)}, parameters)
        for n, (i, d) in enumerate(zip(EDGE_IDS, EDGE_DECIMALS, strict=True))
    ]
    keys = [json.dumps({"id": i}) for i, _ in zip(EDGE_IDS, EDGE_DECIMALS, strict=True)]
    sync_batch(cat, events_from_json(w2j, "wal2json"), SyncOptions("s"), "w")
    sync_batch(cat, events_from_json(dbz, "debezium", keys), SyncOptions("s"), "d")
    want = {i: Decimal(d) for i, d in zip(EDGE_IDS, EDGE_DECIMALS, strict=True)}
    for name in ("s.w", "s.d"):
        t = cat.table(name)
        assert t.schema.field("amt").type == pa.decimal128(38, 10) and t.schema.field("id").type == pa.int64()
        got = {r["id"]: r["amt"] for r in t.to_arrow().to_pylist()}
        assert got == want, name


def test_binary_decimals_that_cannot_be_decoded_exactly_are_refused(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    key = {"primary_keys": {"public.nos": ["id"], "public.wide": ["id"]}}
    # no scale in the envelope's schema: the unscaled bytes cannot be read
    line = _binary_decimal_line("nos", 1, {"id": 1, "amt": _unscaled("1.5", 1)}, None)
    e = _bad(cat, [line], **key)
    assert e.table == "public.nos" and "'amt'" in str(e)
    # a value wider than its declared precision
    line = _binary_decimal_line(
        "wide",
        1,
        {"id": 1, "amt": _unscaled("123456.78", 2)},
        {"scale": "2", "connect.decimal.precision": "5"},
    )
    e = _bad(cat, [line], **key)
    assert e.table == "public.wide" and "'amt'" in str(e)
    # Debezium's variable-scale decimal (numeric without precision) has no exact Arrow type
    e = _bad(
        cat,
        [line.replace("org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal")],
        **key,
    )
    assert e.table == "public.wide" and "VariableScaleDecimal" in str(e)
    assert cat.tables() == []


def _with_boundaries(
    fmt: str, txn: int, lines: list[tuple[str | None, str | None]]
) -> list[tuple[str | None, str | None]]:
    """A source transaction's lines between its begin and its end, each change naming the transaction
    (a Debezium tombstone, a null value, is outside transactions: it stays as it is)."""
    if fmt == "wal2json":
        body = [("{" + f'"xid":{txn},' + line[1:], key) for line, key in lines]
        return [
            (json.dumps({"action": "B", "xid": txn}), None),
            *body,
            (json.dumps({"action": "C", "xid": txn}), None),
        ]
    ident = f"{txn}:{txn * 100}"
    body = [
        (
            line
            if line is None
            else line.replace('"payload": {', f'"payload": {{"transaction": {{"id": "{ident}"}}, ', 1),
            key,
        )
        for line, key in lines
    ]
    begin = json.dumps(
        {"schema": {"type": "struct"}, "payload": {"status": "BEGIN", "id": ident, "ts_ms": 1}}
    )
    count = sum(line is not None for line, _ in lines)
    end = json.dumps({"status": "END", "id": ident, "event_count": count, "ts_ms": 1})
    return [(begin, None), *body, (end, None)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    transactions=st.lists(ops, min_size=1, max_size=10),
    cuts=st.lists(st.integers(1, 200), max_size=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_source_transaction_cut_across_batches_never_shows_partly(
    transactions: list[list[tuple[str, int, str, int]]], cuts: list[int], seed: int
) -> None:
    rng = random.Random(seed)
    fmt = rng.choice(["debezium", "wal2json"])
    model: Model = {t: {} for t in TABLES}
    states: list[Model] = [{t: {} for t in TABLES}]
    stream: list[tuple[str, str | None]] = []
    ends: list[int] = []  # the stream position of each transaction's end
    lsn = 0
    for number, tx in enumerate(transactions, start=1):
        lines: list[tuple[str, str | None]] = []
        for table, k, action, value in tx:
            key = k if table != "b" else f"k{k}"
            old = model[table].get(key)
            lsn += 1
            if action in ("up", "mv"):
                row = _row(table, k, value)
                lines += _lines(fmt, table, "u" if old else "c", old, row, lsn)
                model[table][key] = row
            elif old is not None:
                lines += _lines(fmt, table, "d", old, None, lsn)
                del model[table][key]
        stream += _with_boundaries(fmt, 1000 + number, lines)
        ends.append(len(stream))
        states.append({t: dict(rows) for t, rows in model.items()})
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})

    def expected(rows: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
        if fmt == "wal2json":
            return rows
        return {
            k: {c: str(v) if isinstance(v, Decimal) else v for c, v in r.items()} for k, r in rows.items()
        }

    with tempfile.TemporaryDirectory() as wh:
        cat = mere.connect(wh)
        options = SyncOptions("src", buckets=2)
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            part = stream[lo:hi]
            rng.shuffle(part)  # out of order inside the batch: the log position orders
            batch = _events(part, fmt)
            first = sync_batch(cat, batch, options, f"batch-{i}")
            if rng.random() < 0.3:  # Spark replaying the batch: the same key changes nothing
                again = sync_batch(cat, batch, options, f"batch-{i}")
                # (a batch that committed nothing, e.g. only an empty transaction's boundaries, has no
                # commit to name: its replay commits nothing either)
                assert again.already_committed or not (first.commits or again.commits)
            done = sum(1 for end in ends if end <= hi)  # transactions whose end has arrived
            got = _read(cat)
            for table in TABLES:
                assert got.get(table, {}) == expected(states[done][table]), (table, i, done)
        assert (
            cat.table("src.cdc_pending").to_arrow().num_rows == 0
            if "src.cdc_pending" in cat.tables()
            else True
        )


def test_events_without_boundaries_apply_as_they_come(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    line = wal2json_line("public", "t", "I", None, {"id": 1}, 1, {"id": "integer"}, ["id"])
    sync_batch(cat, events_from_json([line], "wal2json"), SyncOptions("s"), "k1")
    assert cat.table("s.t").to_arrow().num_rows == 1 and "s.cdc_pending" not in cat.tables()
    # a transaction begun in one batch waits for its end, in the pending table
    begun = [
        (json.dumps({"action": "B", "xid": 7}), None),
        ("{" + '"xid":7,' + line.replace('"value":1', '"value":2')[1:], None),
    ]
    sync_batch(cat, _events(begun, "wal2json"), SyncOptions("s"), "k2")
    assert cat.table("s.t").to_arrow().num_rows == 1 and cat.table("s.cdc_pending").to_arrow().num_rows == 2
    sync_batch(
        cat, _events([(json.dumps({"action": "C", "xid": 7}), None)], "wal2json"), SyncOptions("s"), "k3"
    )
    assert sorted(r["id"] for r in cat.table("s.t").to_arrow().to_pylist()) == [1, 2]
    assert cat.table("s.cdc_pending").to_arrow().num_rows == 0


@given(st.lists(st.none() | st.binary(max_size=24), max_size=40), st.integers(0, 5))
def test_base64_values_decode_together_as_one_by_one(values: list[bytes | None], start: int) -> None:
    """The vectorised decoder gives each value's bytes as the standard library does, also for a slice
    (an offset into the array) and NULLs (no bytes)."""
    text = pa.array([None if v is None else base64.b64encode(v).decode() for v in values], pa.string())
    part = text.slice(min(start, len(values)))
    flat, lengths = base64_decoded(part)
    expected = [v or b"" for v in values[min(start, len(values)) :]]
    assert flat.tobytes() == b"".join(expected)
    assert lengths.tolist() == [len(v) for v in expected]


@pytest.mark.parametrize("bad", ["abc", "ab=c", "a===", "ab!d", "=abc", "YQ==YQ==", "YQ=a"])
def test_text_that_is_not_padded_base64_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        base64_decoded(pa.array(["YWJj", bad]))


@pytest.mark.parametrize("fmt", ["debezium", "wal2json"])
def test_an_update_takes_an_unchanged_value_from_its_full_old_image(tmp_path: Path, fmt: str) -> None:
    """A stream started on a populated REPLICA IDENTITY FULL table: the first update of a row leaves its
    unchanged TOASTed column out (wal2json) or writes the placeholder (Debezium), and no earlier version
    exists; the old image holds the value. A placeholder in the old image too is no value: unresolved."""
    cat = _cat(tmp_path)
    old = _row("a", 1, 1)
    line = _line(fmt, "a", "u", old, {**_row("a", 1, 2), "v": old["v"]}, 10, omit=True)
    result = sync_batch(cat, _events([line], fmt), SyncOptions("s"), "b0")
    assert result.unresolved == 0
    assert cat.table("s.a").to_arrow().to_pylist() == [{**_row("a", 1, 2), "v": old["v"], "_cdc_lsn": 10}]
    if fmt == "debezium":
        blank = _line(
            fmt,
            "a",
            "u",
            {**_row("a", 2, 0), "v": UNCHANGED},
            {**_row("a", 2, 3), "v": old["v"]},
            11,
            omit=True,
        )
        result = sync_batch(cat, _events([blank], fmt), SyncOptions("s"), "b1")
        assert result.unresolved == 1
        assert [r["v"] for r in cat.table("s.a").to_arrow().to_pylist() if r["id"] == 2] == [None]
