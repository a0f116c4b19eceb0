"""Self-test of the CDC oracle (tests/cdc_source.py): PostgreSQL logical decoding parsed back into events.

The round trip is the proof: for random workloads, applying the decoded events in ``seq`` order gives
exactly (types and values) what PostgreSQL's tables hold; a scrambled delivery applied in arrival order
does not, and the same delivery sorted by ``seq`` and de-duplicated does again.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_source import (
    DEFAULT_TABLES,
    LOGICAL_SETTINGS,
    ChangeSource,
    Column,
    Event,
    TableSpec,
    WorkloadLog,
    apply_in_order,
    apply_in_sequence,
    arrow_schema,
    deliver,
    diff_models,
    diff_rows,
    in_sequence,
    parse_change,
    parse_lsn,
    to_arrow_events,
)
from services import PostgresServer

pytestmark = pytest.mark.postgres

SEEDS = [0, 1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """One logical-decoding server for the module; every ChangeSource gets its own database and slot."""
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


def check_round_trip(src: ChangeSource, log: WorkloadLog, events: list[Event]) -> None:
    """Everything the oracle promises for one workload."""
    # one event per row changed by a committed statement; none from rolled-back work
    assert len(events) == log.rows_changed
    xids = {e.xid for e in events}
    assert xids <= set(log.committed)
    assert not xids & set(log.rolled_back)
    # seq: unique, commit order first (the runner's commit order), then order inside the transaction
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert list(dict.fromkeys(e.xid for e in events)) == [x for x in log.committed if x in xids]
    assert all(e.commit_lsn >= e.lsn for e in events)
    for name in src.tables:
        # strict: every before-image equals the row it replaces, every insert is of an absent key
        model = apply_in_sequence([e for e in events if e.table == name], strict=True)
        assert diff_models(model, src.expected_model(name)) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_workload_round_trip(server: PostgresServer, seed: int) -> None:
    with ChangeSource(server=server) as src:
        log = src.run_workload(random.Random(seed), transactions=40)
        events = src.changes()
        check_round_trip(src, log, events)
        assert src.changes() == events  # peeking does not consume


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    transactions=st.integers(1, 25),
    rollback=st.floats(0, 0.6),
    interleave=st.floats(0, 0.5),
    toast=st.sampled_from([0.0, 0.05]),
)
def test_workload_round_trip_hypothesis(
    server: PostgresServer, seed: int, transactions: int, rollback: float, interleave: float, toast: float
) -> None:
    with ChangeSource(server=server) as src:
        log = src.run_workload(
            random.Random(seed),
            transactions=transactions,
            rollback=rollback,
            interleave=interleave,
            toast=toast,
        )
        check_round_trip(src, log, src.changes())


def test_workload_covers_the_hazards(server: PostgresServer) -> None:
    """One longer workload exercises every operation, type hazard and ordering effect it claims to."""
    with ChangeSource(server=server) as src:
        log = src.run_workload(random.Random(7), transactions=80, toast=0.05)
        events = src.changes()
        raw = src.raw_changes()
        check_round_trip(src, log, events)
    assert log.rolled_back and log.statements["rolled-back-savepoint"] and log.statements["multi-row"]
    for kind in ("insert", "upsert", "reinsert", "update-values", "update-key", "update-partition", "delete"):
        assert log.statements[kind], kind
    for spec in DEFAULT_TABLES:
        mine = [e for e in events if e.table == spec.name]
        assert {e.op for e in mine} == {"insert", "update", "delete"}, spec.name
        assert any(e.key_changed for e in mine), spec.name
        assert spec.partition is not None
        assert any(
            e.op == "update" and e.before and e.after and e.before[spec.partition] != e.after[spec.partition]
            for e in mine
        ), spec.name
        # a key inserted again after it was deleted (or moved away)
        gone: set[tuple[Any, ...]] = set()
        reinserted = False
        for e in mine:
            if e.op == "insert" and e.after_key in gone:
                reinserted = True
            if e.op == "delete" or e.key_changed:
                assert e.before_key is not None
                gone.add(e.before_key)
        assert reinserted, spec.name
        rows = [r for e in mine for r in (e.before, e.after) if r is not None]
        for col in spec.columns:
            assert any(r[col.name] is not None for r in rows), (spec.name, col.name)
            if col.nullable:
                assert any(r[col.name] is None for r in rows), (spec.name, col.name)
    texts = [v for e in events for r in (e.before, e.after) if r for v in r.values() if isinstance(v, str)]
    for hazard in ("'", "''", "\n", "\\", "new-tuple: ", "🦆", "\u2028"):
        assert any(hazard in t for t in texts), hazard
    assert "" in texts
    assert any(len(t) > 2000 for t in texts)
    assert any("]:unchanged-toast-datum" in data for _, _, data in raw)  # TOAST values kept by updates
    # interleaved transactions: commit order (seq) is not the order of the changes' own LSNs
    assert log.statements["interleaved"]
    assert any(a.lsn > b.lsn for a, b in itertools.pairwise(events))


def test_shuffled_delivery_needs_the_sequence(server: PostgresServer) -> None:
    """Last-arrival-wins over an at-least-once delivery is wrong; ordering by seq + de-dup is right."""
    wrong = 0
    for seed in SEEDS:
        with ChangeSource(server=server) as src:
            src.run_workload(random.Random(100 + seed), transactions=30)
            events = src.changes()
            oracle = {name: src.expected_model(name) for name in src.tables}
        batches = deliver(events, random.Random(seed), batches=4, duplicates=0.2, replay_batches=1)
        arrived = [e for batch in batches for e in batch]
        assert len(arrived) > len(events)
        assert {e.seq for e in arrived} == {e.seq for e in events}  # nothing lost, only repeated
        assert in_sequence(arrived) == events
        for name, expected in oracle.items():
            mine = [e for e in arrived if e.table == name]
            assert diff_models(apply_in_sequence(mine), expected) == []
            wrong += bool(diff_models(apply_in_order(mine), expected))
    assert wrong > 0


def _apply_arrow(table: pa.Table, spec: TableSpec) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A consumer of the landed CDC shape: de-dup on (key, lsn, op), then apply in lsn order."""
    model: dict[tuple[Any, ...], dict[str, Any]] = {}
    rows = {(spec.key_of(r), r["lsn"], r["op"]): r for r in table.to_pylist()}
    for row in sorted(rows.values(), key=lambda r: r["lsn"]):
        values = {n: row[n] for n in spec.names}
        if row["op"] == "d":
            model.pop(spec.key_of(values), None)
        else:
            model[spec.key_of(values)] = values
    return model


def test_arrow_landing(server: PostgresServer) -> None:
    with ChangeSource(server=server) as src:
        src.run_workload(random.Random(11), transactions=40)
        events = src.changes()
        oracle = {name: src.expected_model(name) for name in src.tables}
    batches = deliver(events, random.Random(1), batches=3)
    for spec in DEFAULT_TABLES:
        split = to_arrow_events(events, spec, split_key_changes=True)
        assert split.schema == arrow_schema(spec)
        types = {f.name: f.type for f in split.schema}
        assert types["lsn"] == pa.int64() and types["op"] == pa.string()
        mine = [e for e in events if e.table == spec.name]
        moved = sum(e.key_changed for e in mine)
        assert moved
        assert split.num_rows == len(mine) + moved
        assert set(split.column("op").to_pylist()) == {"c", "u", "d"}
        assert diff_models(_apply_arrow(split, spec), oracle[spec.name]) == []
        # landed batch by batch, scrambled: still right once ordered by lsn
        landed = pa.concat_tables(to_arrow_events(b, spec, split_key_changes=True) for b in batches)
        assert diff_models(_apply_arrow(landed, spec), oracle[spec.name]) == []
        # without the split, a key change leaves its old key behind
        plain = to_arrow_events(events, spec)
        assert plain.num_rows == len(mine)
        assert diff_models(_apply_arrow(plain, spec), oracle[spec.name]) != []
    orders = arrow_schema(DEFAULT_TABLES[0])
    assert orders.field("amount").type == pa.decimal128(12, 3)
    assert orders.field("at").type == pa.timestamp("us", tz="UTC")
    assert orders.field("day").type == pa.date32() and not orders.field("day").nullable
    assert orders.field("blob").type == pa.binary() and orders.field("flag").type == pa.bool_()
    assert orders.field("id").type == pa.int32() and orders.field("big").type == pa.int64()
    assert orders.field("score").type == pa.float64() and orders.field("note").type == pa.string()


HAZARD = TableSpec(
    "hazard",
    (
        Column("id", "integer", nullable=False),
        Column('we "ird', "text"),  # quote_identifier'd in the output, with a doubled quote
        Column("new-tuple", "text"),  # the format's own marker, as a (quoted) column name
        Column("i", "integer"),
        Column("b", "bigint"),
        Column("n", "numeric(12,3)"),
        Column("f", "double precision"),
        Column("ok", "boolean"),
        Column("d", "date"),
        Column("ts", "timestamp with time zone"),
        Column("raw", "bytea"),
    ),
    key=("id",),
)
NAMES = HAZARD.names
NASTY = "it's ''q'' \\ \\\\ \n\r\n üñ \t \"dq\" new-tuple: x[text]:'y' old-key: \u2028 🦆 'null'"
HAZARD_ROWS: list[dict[str, Any]] = [
    dict(
        zip(
            NAMES,
            (
                1,
                NASTY,
                "'",
                2**31 - 1,
                -(2**63),
                Decimal("123456789.123"),
                5e-324,
                True,
                date(1, 1, 1),
                datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                b"\x00\x00'\\x00",
            ),
        )
    ),
    dict(
        zip(
            NAMES,
            (
                2,
                "",
                "''",
                -(2**31),
                2**63 - 1,
                Decimal("-999999999.999"),
                float("-inf"),
                False,
                date(9999, 12, 31),
                datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
                b"",
            ),
        )
    ),
    dict(
        zip(
            NAMES,
            (
                3,
                "null",
                "unchanged-toast-datum",
                0,
                0,
                Decimal("0.001"),
                0.1,
                None,
                date(2000, 2, 29),
                datetime(1970, 1, 1, tzinfo=UTC),
                b"\\x",
            ),
        )
    ),
    {name: (4 if name == "id" else None) for name in NAMES},
    {
        **{name: None for name in NAMES},
        "id": 5,
        'we "ird': "x" * 3 + "".join(random.Random(5).choice("ab'\n") for _ in range(6000)),
    },
]


def test_parser_exactness_on_hazards(server: PostgresServer) -> None:
    with ChangeSource([HAZARD], server=server) as src, src.connect() as conn:
        columns = ", ".join('"' + n.replace('"', '""') + '"' for n in NAMES)
        for row in HAZARD_ROWS:
            marks = ", ".join("%s" for _ in NAMES)
            conn.execute(f"INSERT INTO hazard ({columns}) VALUES ({marks})", [row[n] for n in NAMES])
        conn.commit()
        conn.execute("UPDATE hazard SET i = 7 WHERE id = 5")  # the TOASTed text stays: unchanged-toast-datum
        conn.execute("UPDATE hazard SET id = 40 WHERE id = 4")  # old image of all NULLs: no columns but id
        conn.execute('UPDATE hazard SET "we ""ird" = NULL, n = 1 WHERE id = 2')
        conn.execute("DELETE FROM hazard WHERE id = 1")
        conn.commit()
        conn.execute("INSERT INTO hazard (id) VALUES (99)")
        conn.rollback()
        events = src.changes()
        oracle = src.expected_model("hazard")

    r = {row["id"]: row for row in HAZARD_ROWS}
    expected: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = [
        *(("insert", None, row) for row in HAZARD_ROWS),
        ("update", r[5], {**r[5], "i": 7}),
        ("update", r[4], {**r[4], "id": 40}),
        ("update", r[2], {**r[2], 'we "ird': None, "n": Decimal("1.000")}),
        ("delete", r[1], None),
    ]
    assert [e.op for e in events] == [op for op, _, _ in expected]
    for event, (_, before, after) in zip(events, expected):
        for got, want in ((event.before, before), (event.after, after)):
            assert (got is None) == (want is None)
            if got is not None and want is not None:
                assert diff_rows(got, want) == [], event.seq
    assert len({e.xid for e in events}) == 2 and len({e.commit_lsn for e in events}) == 2
    assert diff_models(apply_in_sequence(events), oracle) == []


def test_parse_change_directly() -> None:
    tables = {"hazard": HAZARD}
    line = (
        "table public.hazard: UPDATE: old-key: id[integer]:1 \"we \"\"ird\"[text]:'a''b c[text]:''d' "
        'new-tuple: id[integer]:2 "we ""ird"[text]:\'new-tuple: x\' "new-tuple"[text]:\'\' i[integer]:null '
        "b[bigint]:-9223372036854775808 n[numeric]:-0.500 f[double precision]:-Infinity ok[boolean]:false "
        "d[date]:'0001-01-01' ts[timestamp with time zone]:'2024-02-29 23:59:59.000001+00' "
        "raw[bytea]:'\\x00ff27'"
    )
    table, op, before, after = parse_change(line, tables)
    assert (table, op) == ("hazard", "update")
    assert before is not None and after is not None
    assert before == {**dict.fromkeys(NAMES), "id": 1, 'we "ird': "a'b c[text]:'d"}
    want = {
        "id": 2,
        'we "ird': "new-tuple: x",
        "new-tuple": "",
        "i": None,
        "b": -(2**63),
        "n": Decimal("-0.500"),
        "f": float("-inf"),
        "ok": False,
        "d": date(1, 1, 1),
        "ts": datetime(2024, 2, 29, 23, 59, 59, 1, tzinfo=UTC),
        "raw": b"\x00\xff'",
    }
    assert diff_rows(after, want) == []
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    for bad in (
        "table public.hazard: INSERT: id[integer]:1 ts[timestamp with time zone]:'infinity'",
        "table public.hazard: INSERT: id[integer]:1 d[date]:'0044-03-15 BC'",
        "table public.hazard: INSERT: id[text]:'1'",  # decoded type differs from the declared one
        "table public.other: INSERT: id[integer]:1",
        "table public.hazard: TRUNCATE: (no-flags)",
        "table public.hazard: DELETE: (no-tuple-data)",
    ):
        with pytest.raises(ValueError):
            parse_change(bad, tables)


def test_change_source_starts_its_own_server() -> None:
    with ChangeSource([HAZARD]) as src, src.connect() as conn:
        assert src.server is not None
        root = src.server.root
        conn.execute("INSERT INTO hazard (id, n) VALUES (1, 2.5)")
        conn.commit()
        [event] = src.changes(consume=True)
        assert event.op == "insert" and event.after == {
            **dict.fromkeys(NAMES),
            "id": 1,
            "n": Decimal("2.500"),
        }
        assert src.changes() == []  # consumed
    assert root is not None and not root.exists()
