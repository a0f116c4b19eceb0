"""Adversarial replay of a real PostgreSQL change stream into mere: late, duplicated, out-of-order batches.

A throwaway PostgreSQL (``wal_level=logical``) runs a random workload on a table of many column types
(integers, numeric, unicode text, bytea, bool, date, timestamp, timestamptz, floats with NaN/inf/-0,
NULLs): inserts, updates of values, of the partition-like ``band`` column and of the primary key, deletes,
re-inserts of deleted keys, rolled-back transactions. Its decoded stream (test_decoding, via
tests/cdc_source.py) is cut into batches that are shuffled, duplicated (the same batch twice, overlapping
windows) and delayed, and delivered to mere:

- as CDC change rows upserted into a ``sequence_by`` table (``cdc_column``), partitioned on ``band`` with
  table-wide keys (or not partitioned), several buckets, compaction between deliveries; after every
  delivery the table (whole and filtered on non-key columns) must equal the model "per key, the delivered
  event with the highest sequence" (no older version may resurface), and at the end PostgreSQL's
  ``SELECT *`` exactly;
- as wal2json / Debezium lines through :func:`mere.integrations.cdc_sync.sync_batch`.

Bad inputs to the CDC apply API must raise a typed ``MereError`` and change nothing.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql

import cdc_source
import mere
from cdc_render import render_change, wal2json_line
from cdc_source import (
    LOGICAL_SETTINGS,
    ChangeSource,
    Column,
    Event,
    TableSpec,
    apply_in_sequence,
    diff_models,
    to_arrow_events,
)
from mere.errors import MereError
from mere.integrations.cdc_sync import SyncOptions, events_from_json, sync_batch
from services import PostgresServer

pytestmark = pytest.mark.postgres

# -- a timestamp-without-time-zone column for the harness (cdc_source knows timestamptz only) -----------

_TS = "timestamp without time zone"
if _TS not in cdc_source._TYPES:
    cdc_source._TYPES[_TS] = cdc_source._PgType(_TS, datetime.fromisoformat)


@dataclass(frozen=True)
class _TsColumn(Column):
    @property
    def base_type(self) -> str:
        return _TS

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.timestamp("us")


BANDS = 4
ACCT = TableSpec(
    "acct",
    (
        Column("id", "integer", nullable=False),
        Column("band", "integer", nullable=False),
        Column("qty", "integer"),
        Column("big", "bigint"),
        Column("amount", "numeric(12,3)"),
        Column("score", "double precision"),
        Column("note", "text"),
        Column("flag", "boolean"),
        Column("day", "date"),
        Column("at", "timestamp with time zone"),
        _TsColumn("ts", _TS),
        Column("blob", "bytea"),
    ),
    key=("id",),
    partition="band",
)
# The sync_batch variant: the renderers of tests/cdc_render.py have no tz-less timestamps.
ACCT_SYNC = TableSpec("acct", tuple(c for c in ACCT.columns if c.name != "ts"), key=("id",), partition="band")
SYNC_TYPES = {c.name: c.pg_type for c in ACCT_SYNC.columns}

_TEXTS = (
    "",
    "a",
    "it's",
    "''",
    "\\",
    "é",
    "e\u0301",
    "日本語",
    "🦆",
    "\n",
    "\t x ",
    "null",
    "NULL",
    "\u2028",
)
_FLOATS = (0.0, -0.0, 1.5, -2.25, 1e308, -1e-308, 5e-324, math.inf, -math.inf, math.nan)


def _value(col: Column, rng: random.Random) -> Any:
    if col.nullable and rng.random() < 0.2:
        return None
    name = col.name
    if name == "id":
        return 0  # set by the caller
    if name == "band":
        return rng.randrange(BANDS)
    if name == "qty":
        return rng.choice((0, 1, -1, 2**31 - 1, -(2**31), rng.randint(-50, 50)))
    if name == "big":
        return rng.choice((0, 2**63 - 1, -(2**63), rng.randint(-(10**12), 10**12)))
    if name == "amount":
        return Decimal(rng.choice((0, 1, -1, 999_999_999_999, rng.randint(-(10**6), 10**6)))).scaleb(-3)
    if name == "score":
        return rng.choice(_FLOATS) if rng.random() < 0.5 else rng.uniform(-1e3, 1e3)
    if name == "note":
        return "".join(rng.choice(_TEXTS) for _ in range(rng.randint(0, 4)))
    if name == "flag":
        return rng.random() < 0.5
    if name == "day":
        return (
            rng.choice((date(1970, 1, 1), date(2000, 2, 29), date(1, 1, 1), date(9999, 12, 31)))
            if (rng.random() < 0.3)
            else date(2020, 1, 1) + timedelta(days=rng.randint(-5000, 5000))
        )
    if name == "at":
        return datetime(2001, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(0, 10**15))
    if name == "ts":
        return datetime(1999, 12, 31, 23, 59, 59) + timedelta(microseconds=rng.randint(-(10**14), 10**14))
    if name == "blob":
        return rng.choice((b"", b"\x00", b"\\x00'", rng.randbytes(rng.randint(0, 12))))
    raise AssertionError(name)


def run_workload(src: ChangeSource, spec: TableSpec, rng: random.Random, transactions: int) -> None:
    """Random transactions on ``spec``: inserts of fresh and of deleted keys, value updates, partition
    moves, key changes (onto fresh and deleted keys), deletes; some transactions rolled back."""
    cols = spec.names
    insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(spec.name),
        sql.SQL(", ").join(map(sql.Identifier, cols)),
        sql.SQL(", ").join(sql.Placeholder() * len(cols)),
    )
    live: set[int] = set()
    dead: set[int] = set()
    next_id = 1
    with src.connect() as conn:
        conn.execute("SET synchronous_commit = on")
        conn.commit()
        for _ in range(transactions):
            before = (set(live), set(dead), next_id)
            for _ in range(rng.randint(1, 4)):
                kind = rng.choice(["ins", "ins", "upd", "upd", "band", "key", "del", "reins"])
                if kind == "reins" and dead:
                    kind, new = "ins", rng.choice(sorted(dead))
                elif kind in ("upd", "band", "key", "del") and not live:
                    kind, new = "ins", next_id
                else:
                    new = next_id
                    kind = "ins" if kind == "reins" else kind
                if kind == "ins":
                    row = {c.name: _value(c, rng) for c in spec.columns}
                    row["id"] = new
                    conn.execute(insert, [row[c] for c in cols])
                    live.add(new)
                    dead.discard(new)
                    next_id = max(next_id, new + 1)
                    continue
                target = rng.choice(sorted(live))
                if kind == "upd":
                    changed = rng.sample([c for c in spec.columns if c.name not in ("id", "band")], 3)
                    conn.execute(
                        sql.SQL("UPDATE {} SET {} WHERE id = %s").format(
                            sql.Identifier(spec.name),
                            sql.SQL(", ").join(
                                sql.SQL("{} = %s").format(sql.Identifier(c.name)) for c in changed
                            ),
                        ),
                        [*(_value(c, rng) for c in changed), target],
                    )
                elif kind == "band":
                    conn.execute(
                        sql.SQL("UPDATE {} SET band = %s, qty = %s WHERE id = %s").format(
                            sql.Identifier(spec.name)
                        ),
                        [rng.randrange(BANDS), rng.randint(-9, 9), target],
                    )
                elif kind == "key":
                    onto = rng.choice(sorted(dead)) if dead and rng.random() < 0.5 else next_id
                    moved_band = rng.random() < 0.5
                    conn.execute(
                        sql.SQL("UPDATE {} SET id = %s{} WHERE id = %s").format(
                            sql.Identifier(spec.name),
                            sql.SQL(", band = (band + 1) %% 4" if moved_band else ""),
                        ),
                        [onto, target],
                    )
                    live.discard(target)
                    dead.add(target)
                    live.add(onto)
                    dead.discard(onto)
                    next_id = max(next_id, onto + 1)
                else:
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE id = %s").format(sql.Identifier(spec.name)), [target]
                    )
                    live.discard(target)
                    dead.add(target)
            if rng.random() < 0.12:
                conn.rollback()
                live, dead, next_id = before
            else:
                conn.commit()


class Workload:
    """A captured stream and PostgreSQL's final table (a plain class: hypothesis prints it short)."""

    def __init__(self, events: list[Event], oracle: dict[tuple[Any, ...], dict[str, Any]]) -> None:
        self.events = events
        self.oracle = oracle

    def __repr__(self) -> str:  # hypothesis prints the fixture: keep it short
        return f"Workload({len(self.events)} events, {len(self.oracle)} rows)"


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


def _oracle(src: ChangeSource, spec: TableSpec) -> dict[tuple[Any, ...], dict[str, Any]]:
    """PostgreSQL's ``SELECT *`` keyed by primary key (timestamptz in UTC, tz-less timestamps naive)."""
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, spec.names)), sql.Identifier(spec.name)
    )
    out = {}
    for values in src.reader.execute(query):
        row = dict(zip(spec.names, values, strict=True))
        for name, value in row.items():
            if isinstance(value, datetime) and value.tzinfo is not None:
                row[name] = value.astimezone(UTC)
            elif isinstance(value, memoryview):
                row[name] = bytes(value)
        out[spec.key_of(row)] = row
    return out


def _capture(server: PostgresServer, spec: TableSpec, seed: int, transactions: int) -> Workload:
    with ChangeSource((spec,), server=server) as src:
        run_workload(src, spec, random.Random(seed), transactions)
        events = src.changes()
        oracle = _oracle(src, spec)
    # the harness's own sanity: the stream in order reproduces PostgreSQL
    assert diff_models(apply_in_sequence(events), oracle) == []
    return Workload(events, oracle)


@pytest.fixture(scope="module")
def workloads(server: PostgresServer) -> list[Workload]:
    out = [_capture(server, ACCT, seed, 45) for seed in (4901, 4902, 4903)]
    ops = {e.op for w in out for e in w.events}
    assert ops == {"insert", "update", "delete"}
    assert any(e.key_changed for w in out for e in w.events)
    assert any(
        e.op == "update" and e.before and e.after and e.before["band"] != e.after["band"]
        for w in out
        for e in w.events
    )
    assert any(
        isinstance(r["score"], float) and math.isnan(r["score"]) for w in out for r in w.oracle.values()
    )
    return out


# -- the per-key model of a delivered subset ----------------------------------------------------------


def _rows_of(events: list[Event]) -> list[tuple[int, str, dict[str, Any]]]:
    """(seq, op, row) per key-level change: a key-changing update is a delete of the old key and an
    insert of the new one at the update's seq (what ``to_arrow_events(split_key_changes=True)`` lands)."""
    out = []
    for e in events:
        if e.op == "insert":
            out.append((e.seq, "c", dict(e.after or {})))
        elif e.op == "delete":
            out.append((e.seq, "d", dict(e.before or {})))
        elif e.key_changed:
            out.append((e.seq, "d", dict(e.before or {})))
            out.append((e.seq, "c", dict(e.after or {})))
        else:
            out.append((e.seq, "u", dict(e.after or {})))
    return out


def model_of(delivered: list[Event]) -> dict[tuple[Any, ...], dict[str, Any]]:
    best: dict[tuple[Any, ...], tuple[int, str, dict[str, Any]]] = {}
    for seq, op, row in _rows_of(delivered):
        key = (row["id"],)
        if key not in best or seq >= best[key][0]:
            # equal seq: the same event (a replay), or a split key change of two keys
            best[key] = (seq, op, row)
    return {k: row for k, (_, op, row) in best.items() if op != "d"}


def contents(t: mere.Table, spec: TableSpec, filter: Any = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = t.scan(filter=filter).to_arrow().to_pylist()
    model = {spec.key_of(r): {n: r[n] for n in spec.names} for r in rows}
    assert len(model) == len(rows), "a key came back twice"
    return model


def _nonkey_filters() -> list[tuple[str, Any]]:
    # (mere filter text, the same predicate on a model row)
    return [
        ("qty > 0", lambda r: r["qty"] is not None and r["qty"] > 0),
        ("note is null", lambda r: r["note"] is None),
        ("flag = true", lambda r: r["flag"] is True),
        ("amount < 0", lambda r: r["amount"] is not None and r["amount"] < 0),
    ]


def plan_deliveries(events: list[Event], rnd: random.Random, n: int, overlap: int) -> list[list[Event]]:
    """Shuffled into ``n`` windows of a random permutation, neighbouring windows overlapping by up to
    ``overlap`` events, a random batch delivered twice, one batch held back (delayed) to the end."""
    pool = list(events)
    rnd.shuffle(pool)
    cuts = sorted(rnd.sample(range(1, len(pool)), n - 1)) if len(pool) > n else []
    bounds = list(zip([0, *cuts], [*cuts, len(pool)], strict=True))
    batches = [pool[max(0, lo - rnd.randint(0, overlap)) : hi] for lo, hi in bounds]
    batches.insert(rnd.randrange(len(batches) + 1), list(rnd.choice(batches)))
    late = batches.pop(rnd.randrange(len(batches)))
    batches.append(late)
    return batches


def landing(
    cat: mere.Catalog, spec: TableSpec, partitioned: bool, buckets: int, split_seq: bool
) -> mere.Table:
    schema = cdc_source.arrow_schema(spec)
    if split_seq:  # the sequence as a tuple: (commit position, position in the transaction)
        schema = schema.append(pa.field("commit", pa.int64(), nullable=False))
        schema = schema.append(pa.field("pos", pa.int32(), nullable=False))
    return cat.create_table(
        "cdc.acct",
        schema,
        primary_key=list(spec.key),
        partition_by="band" if partitioned else None,
        key_scope="table" if partitioned else None,
        cdc_column="op",
        sequence_by=["commit", "pos"] if split_seq else "lsn",
        buckets=buckets,
        properties={"compaction.min-files": "3"},
    )


def land(
    batch: list[Event], rnd: random.Random, split_seq: bool, slim_deletes: bool, wrong_band: bool
) -> list[pa.Table]:
    """The batch as the upserts that deliver it: one table of change rows, or (``slim_deletes``) its
    inserts/updates and its deletes carrying only key, partition and sequence (their partition value
    random with ``wrong_band``: a CDC delete deletes its key wherever it lives), in a random order."""
    landed = to_arrow_events(batch, ACCT, split_key_changes=True)
    if split_seq:
        lsn = landed.column("lsn").to_pylist()
        landed = landed.append_column(
            "commit", pa.array([v >> cdc_source.POSITION_BITS for v in lsn], pa.int64())
        )
        mask = (1 << cdc_source.POSITION_BITS) - 1
        landed = landed.append_column("pos", pa.array([v & mask for v in lsn], pa.int32()))
    if not slim_deletes:
        return [landed] if landed.num_rows else []
    is_d = pa.array([op == "d" for op in landed.column("op").to_pylist()], pa.bool_())
    rows = landed.filter(pa.compute.invert(is_d))
    seq_cols = ["commit", "pos"] if split_seq else ["lsn"]
    dels = landed.filter(is_d).select(["id", "band", "op", *seq_cols])
    if wrong_band and dels.num_rows:
        bands = pa.array([rnd.randrange(BANDS) for _ in range(dels.num_rows)], pa.int32())
        dels = dels.set_column(dels.schema.get_field_index("band"), dels.schema.field("band"), bands)
    out = [x for x in (rows, dels) if x.num_rows]
    rnd.shuffle(out)
    return out


def read(
    t: mere.Table, filter: Any = None, version: int | None = None
) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = t.scan(filter=filter, version=version).to_arrow().to_pylist()
    model = {ACCT.key_of(r): {n: r[n] for n in ACCT.names} for r in rows}
    assert len(model) == len(rows), "a key came back twice"
    return model


def check(
    t: mere.Table, expected: dict[tuple[Any, ...], dict[str, Any]], rnd: random.Random, where: Any
) -> None:
    assert diff_models(read(t), expected) == [], where
    for text, pred in _nonkey_filters():
        want = {k: r for k, r in expected.items() if pred(r)}
        assert diff_models(read(t, text), want) == [], (where, text)
    band = rnd.randrange(BANDS)  # a partition filter: an older version in another partition must stay out
    assert (
        diff_models(read(t, f"band = {band}"), {k: r for k, r in expected.items() if r["band"] == band}) == []
    ), (
        where,
        band,
    )
    ids = rnd.sample(range(1, 40), 4)  # key lookups: present, deleted and never-seen keys
    want = {k: r for k, r in expected.items() if k[0] in ids}
    assert diff_models(read(t, f"id in ({', '.join(map(str, ids))})"), want) == [], (where, ids)
    one = ids[0]
    assert diff_models(read(t, f"id = {one}"), {k: r for k, r in want.items() if k[0] == one}) == [], (
        where,
        one,
    )


def check_feed(
    t: mere.Table,
    a: int,
    model_a: dict[tuple[Any, ...], dict[str, Any]],
    b: int,
    model_b: dict[tuple[Any, ...], dict[str, Any]],
) -> None:
    feed = t.changes(a, b).read_all().to_pylist()
    out = {k: dict(r) for k, r in model_a.items()}
    for row in feed:  # deletes and before images first: a moved key may come as delete + insert
        if row["_change"] in ("delete", "update_before"):
            out.pop(ACCT.key_of(row), None)
    for row in feed:
        if row["_change"] in ("insert", "update_after"):
            out[ACCT.key_of(row)] = {n: row[n] for n in ACCT.names}
    assert diff_models(out, model_b) == [], ("feed", a, b)
    unchanged = {k for k in set(model_a) & set(model_b) if not cdc_source.diff_rows(model_a[k], model_b[k])}
    noisy = sorted({ACCT.key_of(r) for r in feed} & unchanged)
    assert noisy == [], ("feed lists unchanged keys", a, b, noisy[:5])


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    which=st.integers(0, 2),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 7),
    overlap=st.integers(0, 15),
    partitioned=st.booleans(),
    buckets=st.sampled_from([1, 2, 3]),
    compact_every=st.integers(1, 4),
    split_seq=st.booleans(),
    slim_deletes=st.booleans(),
    wrong_band=st.booleans(),
)
def test_scrambled_replay_equals_postgresql(
    workloads: list[Workload],
    which: int,
    seed: int,
    n: int,
    overlap: int,
    partitioned: bool,
    buckets: int,
    compact_every: int,
    split_seq: bool,
    slim_deletes: bool,
    wrong_band: bool,
) -> None:
    w = workloads[which]
    rnd = random.Random(seed)
    wrong_band = wrong_band and partitioned and slim_deletes
    with tempfile.TemporaryDirectory() as tmp:
        cat = mere.connect(str(Path(tmp) / "wh"))
        t = landing(cat, ACCT, partitioned, buckets, split_seq)
        delivered: list[Event] = []
        history: list[tuple[int, dict[tuple[Any, ...], dict[str, Any]]]] = []
        for i, batch in enumerate(plan_deliveries(w.events, rnd, n, overlap)):
            for part in land(batch, rnd, split_seq, slim_deletes, wrong_band):
                t.upsert(part)
            delivered += batch
            if i % compact_every == compact_every - 1:
                t.compact()
            expected = model_of(delivered)
            check(t, expected, rnd, ("after batch", i))
            history.append((t.version, expected))
        assert diff_models(read(t), w.oracle) == []
        t.compact()
        check(t, w.oracle, rnd, "after the last compaction")
        # every event replayed once more, in reverse, after the compaction: nothing changes
        for part in land(list(reversed(w.events)), rnd, split_seq, slim_deletes, wrong_band):
            t.upsert(part)
        check(t, w.oracle, rnd, "after a full replay")
        # time travel: every version reads as the model of what had been delivered by then
        for version, expected in history:
            assert diff_models(read(t, version=version), expected) == [], ("version", version)
        # the change feed between two of those versions turns the one model into the other
        history.append((t.version, w.oracle))
        for _ in range(3):
            (a, model_a), (b, model_b) = sorted(rnd.sample(history, 2), key=lambda h: h[0])
            check_feed(t, a, model_a, b, model_b)


# -- through the whole-database sync (wal2json / Debezium lines) ---------------------------------------


@pytest.fixture(scope="module")
def sync_workloads(server: PostgresServer) -> list[Workload]:
    return [_capture(server, ACCT_SYNC, seed, 35) for seed in (4911, 4912)]


def _lines(events: list[Event], fmt: str) -> list[tuple[str, str | None]]:
    return [render_change(e.op, e.before, e.after, e.seq, fmt, "acct", SYNC_TYPES, ["id"]) for e in events]


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    which=st.integers(0, 1),
    fmt=st.sampled_from(["wal2json", "debezium"]),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 6),
    overlap=st.integers(0, 10),
    partitioned=st.booleans(),
)
def test_sync_batch_scrambled_replay_equals_postgresql(
    sync_workloads: list[Workload],
    which: int,
    fmt: str,
    seed: int,
    n: int,
    overlap: int,
    partitioned: bool,
) -> None:
    w = sync_workloads[which]
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        cat = mere.connect(str(Path(tmp) / "wh"))
        options = SyncOptions("src", buckets=2, partition_by={"acct": ["band"]} if partitioned else {})
        batches = plan_deliveries(w.events, rnd, n, overlap)
        for i, batch in enumerate(batches):
            part = _lines(batch, fmt)
            events = events_from_json(
                [p for p, _ in part], fmt, [k for _, k in part] if fmt == "debezium" else None
            )
            sync_batch(cat, events, options, f"b{i}")
            if i == 0:  # the same batch under the same key again: already committed, no change
                assert sync_batch(cat, events, options, f"b{i}").already_committed
        rows = cat.table("src.acct").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
        got = {(r["id"],): {n_: r[n_] for n_ in ACCT_SYNC.names} for r in rows}
        assert len(got) == len(rows)
        oracle = w.oracle
        if fmt == "debezium":  # decimal.handling.mode=string: Debezium declares numeric as a string
            oracle = {
                k: {**r, "amount": None if r["amount"] is None else str(r["amount"])}
                for k, r in oracle.items()
            }
        assert diff_models(got, oracle) == []


# -- bad inputs to the CDC apply API: a typed error, nothing changed ----------------------------------


def _small_table(tmp_path: Path, partitioned: bool) -> mere.Table:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            pa.field("band", pa.int32(), nullable=False),
            pa.field("v", pa.string()),
            pa.field("op", pa.string(), nullable=False),
            pa.field("lsn", pa.int64(), nullable=False),
        ]
    )
    t = cat.create_table(
        "cdc.small",
        schema,
        primary_key="id",
        partition_by="band" if partitioned else None,
        cdc_column="op",
        sequence_by="lsn",
        buckets=2,
    )
    t.upsert(
        pa.table(
            {"id": [1, 2], "band": [0, 1], "v": ["a", "b"], "op": ["c", "c"], "lsn": [10, 10]}, schema=schema
        )
    )
    return t


_BAD: dict[str, Any] = {
    "missing_sequence": {"id": [1], "band": [0], "v": ["x"], "op": ["u"]},
    "null_sequence": {"id": [1], "band": [0], "v": ["x"], "op": ["u"], "lsn": pa.array([None], pa.int64())},
    "null_sequence_delete": {
        "id": [2],
        "band": [1],
        "v": ["b"],
        "op": ["d"],
        "lsn": pa.array([None], pa.int64()),
    },
    "string_sequence": {"id": [1], "band": [0], "v": ["x"], "op": ["u"], "lsn": ["99"]},
    "float_sequence": {"id": [1], "band": [0], "v": ["x"], "op": ["u"], "lsn": [99.5]},
    "unknown_op": {"id": [1, 2], "band": [0, 1], "v": ["x", "y"], "op": ["u", "x"], "lsn": [99, 99]},
    "null_op": {"id": [1], "band": [0], "v": ["x"], "op": pa.array([None], pa.string()), "lsn": [99]},
    "empty_op": {"id": [1], "band": [0], "v": ["x"], "op": [""], "lsn": [99]},
    "null_key": {
        "id": pa.array([1, None], pa.int32()),
        "band": [0, 0],
        "v": ["x", "y"],
        "op": ["u", "c"],
        "lsn": [99, 99],
    },
    "null_key_delete": {
        "id": pa.array([None], pa.int32()),
        "band": [0],
        "v": ["x"],
        "op": ["d"],
        "lsn": [99],
    },
    "key_type_mismatch": {"id": ["1"], "band": [0], "v": ["x"], "op": ["u"], "lsn": [99]},
    "value_type_mismatch": {"id": [1], "band": [0], "v": [5], "op": ["u"], "lsn": [99]},
    "key_overflow": {"id": [2**40], "band": [0], "v": ["x"], "op": ["c"], "lsn": [99]},
    "null_partition": {"id": [1], "band": pa.array([None], pa.int32()), "v": ["x"], "op": ["u"], "lsn": [99]},
}


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize("case", sorted(_BAD))
def test_bad_cdc_rows_raise_typed_error_and_change_nothing(
    tmp_path: Path, case: str, partitioned: bool
) -> None:
    t = _small_table(tmp_path, partitioned)
    version = t.version
    before = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    data = pa.table(_BAD[case])
    with pytest.raises(MereError):
        t.upsert(data)
    t2 = mere.connect(str(tmp_path / "wh")).table("cdc.small")
    assert t2.version == version
    assert sorted(t2.to_arrow().to_pylist(), key=lambda r: r["id"]) == before


# -- bad events through sync_batch -----------------------------------------------------------------------


def _w2j(op: str, after: dict[str, Any] | None, before: dict[str, Any] | None, lsn: int) -> str:
    from cdc_render import wal2json_line

    types = {"id": "integer", "v": "text"}
    return wal2json_line("public", "kv", op, before, after, lsn, types, ["id"])


def _synced(cat: mere.Catalog) -> list[dict[str, Any]]:
    return sorted(cat.table("src.kv").to_arrow().to_pylist(), key=lambda r: r["id"])


_BAD_EVENTS: dict[str, Any] = {
    "unknown_op": lambda: [_w2j("X", {"id": 1, "v": "x"}, None, 500)],
    "integer_text": lambda: [
        _w2j("I", {"id": 3, "v": "x"}, None, 500).replace('"value":3', '"value":"three"')
    ],
    "null_key": lambda: [_w2j("I", {"id": None, "v": "x"}, None, 500)],
    "update_without_new_image": lambda: [_w2j("U", None, {"id": 1}, 500)],
    "delete_without_old_image": lambda: [_w2j("D", None, None, 500)],
    "integer_overflow": lambda: [_w2j("I", {"id": 2**40, "v": "x"}, None, 500)],
}


@pytest.mark.parametrize("case", sorted(_BAD_EVENTS))
def test_bad_sync_events_raise_typed_error_and_commit_nothing(tmp_path: Path, case: str) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    options = SyncOptions("src")
    good = [_w2j("I", {"id": 1, "v": "a"}, None, 100), _w2j("I", {"id": 2, "v": "b"}, None, 101)]
    sync_batch(cat, events_from_json(good, "wal2json"), options, "b0")
    version = cat.table("src.kv").version
    before = _synced(cat)
    # one good event beside the bad one: the whole batch is refused
    lines = [_w2j("U", {"id": 2, "v": "B"}, {"id": 2}, 600), *_BAD_EVENTS[case]()]
    with pytest.raises(MereError):
        sync_batch(cat, events_from_json(lines, "wal2json"), options, "b1")
    assert cat.table("src.kv").version == version
    assert _synced(cat) == before


def test_sync_null_sequence_event_is_refused(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    options = SyncOptions("src")
    sync_batch(cat, events_from_json([_w2j("I", {"id": 1, "v": "a"}, None, 100)], "wal2json"), options, "b0")
    before = _synced(cat)
    events = events_from_json([_w2j("U", {"id": 1, "v": "z"}, {"id": 1}, 900)], "wal2json")
    events = events.set_column(events.schema.get_field_index("seq"), "seq", pa.array([None], pa.int64()))
    with pytest.raises(MereError):
        sync_batch(cat, events, options, "b1")
    assert _synced(cat) == before


# -- transaction boundaries delivered out of order ------------------------------------------------------


def _kv_insert(i: int, lsn: int, xid: int) -> str:
    line = _w2j("I", {"id": i, "v": f"r{i}"}, None, lsn)
    return "{" + f'"xid":{xid},' + line[1:]


def _begin(xid: int) -> str:
    return json.dumps({"action": "B", "xid": xid})


def _commit(xid: int) -> str:
    return json.dumps({"action": "C", "xid": xid})


def test_transaction_with_boundaries_in_order_applies(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    options = SyncOptions("src")
    sync_batch(cat, events_from_json([_begin(7), _kv_insert(1, 100, 7)], "wal2json"), options, "b0")
    assert "src.kv" not in cat.tables() or _synced(cat) == []  # held until its end arrives
    sync_batch(cat, events_from_json([_commit(7)], "wal2json"), options, "b1")
    assert [r["id"] for r in _synced(cat)] == [1]
    # the whole transaction delivered again, in one batch: nothing changes
    lines = [_begin(7), _kv_insert(1, 100, 7), _commit(7)]
    sync_batch(cat, events_from_json(lines, "wal2json"), options, "b2")
    assert [r["id"] for r in _synced(cat)] == [1]


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
def test_transaction_end_delivered_before_its_begin_still_applies(tmp_path: Path, fmt: str) -> None:
    from cdc_render import debezium_key, debezium_line

    cat = mere.connect(str(tmp_path / "wh"))
    options = SyncOptions("src")
    types = {"id": "integer", "v": "text"}

    def txn(xid: int, i: int, lsn: int) -> list[tuple[str, str | None]]:
        row = {"id": i, "v": f"r{i}"}
        if fmt == "wal2json":
            change = (wal2json_line("public", "kv", "I", None, row, lsn, types, ["id"]), None)
        else:
            change = (debezium_line("public", "kv", "c", None, row, lsn, types), debezium_key(row, ["id"]))
        return _bounded(fmt, xid, [change])

    def send(lines: list[tuple[str, str | None]], key: str) -> None:
        keys = [k or "null" for _, k in lines] if fmt == "debezium" else None
        sync_batch(cat, events_from_json([p for p, _ in lines], fmt, keys), options, key)

    t6, t7, t8 = txn(6, 1, 100), txn(7, 2, 200), txn(8, 3, 300)
    send([*t6, t7[-1]], "b0")  # 7's end overtook its begin
    send(t7[:-1], "b1")
    send(t8, "b2")
    assert [r["id"] for r in _synced(cat)] == [1, 2, 3]


# -- PostgreSQL's float text through the wal2json parser ---------------------------------------------------


def _w2j_float(i: int, text: str, lsn: int) -> str:
    return (
        f'{{"action":"I","schema":"public","table":"f","lsn":"0/{lsn:X}","columns":[{{"name":"id",'
        f'"type":"integer","value":{i}}},{{"name":"x","type":"double precision","value":{text}}}],'
        '"pk":[{"name":"id","type":"integer"}]}'
    )


def _synced_floats(texts: list[str], tmp_path: Path) -> list[float]:
    cat = mere.connect(str(tmp_path / "wh"))
    lines = [_w2j_float(i, text, 16 * (i + 1)) for i, text in enumerate(texts)]
    sync_batch(cat, events_from_json(lines, "wal2json"), SyncOptions("src"), "b0")
    return [r["x"] for r in cat.table("src.f").to_arrow().sort_by("id").to_pylist()]


def test_wal2json_float_specials_keep_their_values(tmp_path: Path) -> None:
    # wal2json quotes NaN and the infinities of float columns, and writes the rest bare (float8out's text)
    got = _synced_floats(['"NaN"', '"Infinity"', '"-Infinity"', "1e+308", "5e-324", "-1.5", "0"], tmp_path)
    assert math.isnan(got[0])
    assert got[1:] == [math.inf, -math.inf, 1e308, 5e-324, -1.5, 0.0]


def test_wal2json_negative_zero_float_keeps_its_sign(tmp_path: Path) -> None:
    (got,) = _synced_floats(["-0"], tmp_path)
    assert math.copysign(1.0, got) == -1.0


# -- several appliers at once ------------------------------------------------------------------------------


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(which=st.integers(0, 2), seed=st.integers(0, 2**32 - 1), partitioned=st.booleans())
def test_concurrent_appliers_and_compaction_converge_to_postgresql(
    workloads: list[Workload], which: int, seed: int, partitioned: bool
) -> None:
    """Three appliers (own catalog handles, threads) deliver scrambled, overlapping batches of the same
    stream while a fourth compacts; a refused commit (``CommitConflict``) is retried. The end state is
    PostgreSQL's, whatever the interleaving."""
    import threading

    from mere.errors import CommitConflict

    w = workloads[which]
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        wh = str(Path(tmp) / "wh")
        landing(mere.connect(wh), ACCT, partitioned, 2, False)
        plans = [plan_deliveries(w.events, random.Random(rnd.random()), 4, 10) for _ in range(3)]
        # together the appliers deliver every event at least once
        plans[0].append(list(w.events))
        errors: list[BaseException] = []
        done = threading.Event()

        def apply(batches: list[list[Event]], r: random.Random) -> None:
            try:
                t = mere.connect(wh).table("cdc.acct")
                for batch in batches:
                    for part in land(batch, r, False, r.random() < 0.5, partitioned):
                        for _ in range(20):
                            try:
                                t.upsert(part)
                                break
                            except CommitConflict:
                                t = mere.connect(wh).table("cdc.acct")
                        else:
                            raise AssertionError("20 conflicts in a row")
            except BaseException as e:
                errors.append(e)

        def compact() -> None:
            t = mere.connect(wh).table("cdc.acct")
            while not done.is_set():
                try:
                    t.compact()
                except CommitConflict:
                    t = mere.connect(wh).table("cdc.acct")
                except BaseException as e:
                    errors.append(e)
                    return

        threads = [threading.Thread(target=apply, args=(p, random.Random(rnd.random()))) for p in plans]
        compactor = threading.Thread(target=compact)
        compactor.start()
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=300)
        done.set()
        compactor.join(timeout=300)
        assert not errors, errors
        t = mere.connect(wh).table("cdc.acct")
        assert diff_models(read(t), w.oracle) == []
        check(t, w.oracle, rnd, "after the concurrent appliers")


# -- merge engines under sequences ---------------------------------------------------------------------------


def _agg(values: list[Any], op: str) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"max": max, "min": min, "bool_or": any, "bool_and": all}[op](present)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    which=st.integers(0, 2),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 6),
    engine=st.sampled_from(["aggregate", "first_row"]),
    buckets=st.sampled_from([1, 3]),
)
def test_merge_engines_under_scrambled_replay(
    workloads: list[Workload], which: int, seed: int, n: int, engine: str, buckets: int
) -> None:
    """The stream's inserts and key-keeping updates (these engines refuse deletes), scrambled and
    duplicated: ``max``/``min``/``bool_or``/``bool_and`` columns hold the aggregate of every event of the
    key and ``last`` columns its highest-sequence version; ``first_row`` holds the lowest-sequence one."""
    w = workloads[which]
    rnd = random.Random(seed)
    events = [e for e in w.events if e.op == "insert" or (e.op == "update" and not e.key_changed)]
    operators: Any = (
        {"qty": "max", "big": "min", "flag": "bool_or", "amount": "max"}
        if engine == "aggregate"
        else "first_row"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cat = mere.connect(str(Path(tmp) / "wh"))
        t = cat.create_table(
            "cdc.agg",
            cdc_source.arrow_schema(ACCT),
            primary_key="id",
            cdc_column="op",
            sequence_by="lsn",
            merge_operators=operators,
            buckets=buckets,
            properties={"compaction.min-files": "3"},
        )
        delivered: list[Event] = []
        for i, batch in enumerate(plan_deliveries(events, rnd, n, 8)):
            landed = to_arrow_events(batch, ACCT)
            if landed.num_rows:
                t.upsert(landed)
            delivered += batch
            if rnd.random() < 0.4:
                t.compact()
            by_key: dict[tuple[Any, ...], list[Event]] = {}
            for e in sorted({e.seq: e for e in delivered}.values(), key=lambda e: e.seq):
                by_key.setdefault(e.after_key or (), []).append(e)
            expected = {}
            for key, evs in by_key.items():
                if engine == "first_row":
                    expected[key] = dict(evs[0].after or {})
                    continue
                row = dict(evs[-1].after or {})
                for col, op in operators.items():
                    row[col] = _agg([(e.after or {})[col] for e in evs], op)
                expected[key] = row
            assert diff_models(read(t), expected) == [], ("after batch", i)
            assert (
                diff_models(read(t, "qty > 0"), {k: r for k, r in expected.items() if (r["qty"] or 0) > 0})
                == []
            )


@pytest.mark.parametrize("operators", [{"v": "max"}, "first_row"])
def test_cdc_delete_into_a_merge_engine_table_is_refused_and_changes_nothing(
    tmp_path: Path, operators: Any
) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("v", pa.int64()),
            ("op", pa.string()),
            ("lsn", pa.int64()),
        ]
    )
    t = cat.create_table(
        "cdc.m", schema, primary_key="id", cdc_column="op", sequence_by="lsn", merge_operators=operators
    )
    t.upsert(pa.table({"id": [1, 2], "v": [5, 6], "op": ["c", "c"], "lsn": [1, 1]}, schema=schema))
    version, before = t.version, t.to_arrow().sort_by("id").to_pylist()
    with pytest.raises(MereError):
        t.upsert(pa.table({"id": [1, 2], "v": [9, 6], "op": ["u", "d"], "lsn": [2, 2]}, schema=schema))
    t = mere.connect(str(tmp_path / "wh")).table("cdc.m")
    assert t.version == version and t.to_arrow().sort_by("id").to_pylist() == before


@pytest.mark.parametrize(
    "case",
    [
        {"id": [1], "v": ["x"], "op": ["u"], "hi": [5]},  # one of the two sequence columns missing
        {"id": [1], "v": ["x"], "op": ["u"], "hi": [5], "lo": pa.array([None], pa.int32())},
        {
            "id": [1],
            "v": ["x"],
            "op": ["d"],
            "hi": pa.array([None], pa.int64()),
            "lo": pa.array([1], pa.int32()),
        },
        {"id": [1], "v": ["x"], "op": ["u"], "hi": ["5"], "lo": pa.array([1], pa.int32())},
    ],
    ids=["missing_lo", "null_lo", "null_hi_delete", "string_hi"],
)
def test_bad_tuple_sequence_rows_are_refused_and_change_nothing(tmp_path: Path, case: dict[str, Any]) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("v", pa.string()),
            ("op", pa.string()),
            ("hi", pa.int64()),
            ("lo", pa.int32()),
        ]
    )
    t = cat.create_table("cdc.s", schema, primary_key="id", cdc_column="op", sequence_by=["hi", "lo"])
    t.upsert(pa.table({"id": [1], "v": ["a"], "op": ["c"], "hi": [1], "lo": [1]}, schema=schema))
    version, before = t.version, t.to_arrow().to_pylist()
    with pytest.raises(MereError):
        t.upsert(pa.table(case))
    t = mere.connect(str(tmp_path / "wh")).table("cdc.s")
    assert t.version == version and t.to_arrow().to_pylist() == before


# -- the harness's own workload (composite text keys, interleaved transactions) through sync_batch ----------


@pytest.fixture(scope="module")
def default_workloads(server: PostgresServer) -> list[tuple[list[Event], dict[str, dict[Any, Any]]]]:
    out = []
    for seed in (4921, 4922):
        with ChangeSource(server=server) as src:
            src.run_workload(random.Random(seed), transactions=30, toast=0.0)
            out.append((src.changes(), {name: src.expected_model(name) for name in src.tables}))
    return out


class _Shown:
    """Wraps a fixture value so hypothesis prints it short."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<workloads>"


@pytest.fixture(scope="module")
def default_shown(default_workloads: Any) -> _Shown:
    return _Shown(default_workloads)


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    which=st.integers(0, 1),
    fmt=st.sampled_from(["wal2json", "debezium"]),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 6),
    partitioned=st.booleans(),
    change_lsn=st.booleans(),
)
def test_sync_batch_two_tables_composite_keys_equal_postgresql(
    default_shown: _Shown, which: int, fmt: str, seed: int, n: int, partitioned: bool, change_lsn: bool
) -> None:
    """``change_lsn``: each event's own WAL position as its log position (what wal2json's ``lsn`` and
    Debezium's ``source.lsn`` carry), not its transaction's commit position: per key the same order."""
    events, oracle = default_shown.value[which]
    rnd = random.Random(seed)
    specs = {s.name: s for s in cdc_source.DEFAULT_TABLES}
    types = {name: {c.name: c.pg_type for c in s.columns} for name, s in specs.items()}

    def line(e: Event) -> tuple[str, str | None]:
        s = specs[e.table]
        seq = e.lsn if change_lsn else e.seq
        return render_change(e.op, e.before, e.after, seq, fmt, e.table, types[e.table], list(s.key))

    with tempfile.TemporaryDirectory() as tmp:
        cat = mere.connect(str(Path(tmp) / "wh"))
        options = SyncOptions(
            "src",
            buckets=3,
            partition_by={s.name: [s.partition] for s in specs.values()} if partitioned else {},
        )
        for i, batch in enumerate(plan_deliveries(events, rnd, n, 10)):
            part = [line(e) for e in batch]
            ev = events_from_json(
                [p for p, _ in part], fmt, [k for _, k in part] if fmt == "debezium" else None
            )
            sync_batch(cat, ev, options, f"b{i}")
        for name, s in specs.items():
            rows = cat.table(f"src.{name}").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
            got = {s.key_of(r): {c: r[c] for c in s.names} for r in rows}
            assert len(got) == len(rows)
            want = oracle[name]
            if fmt == "debezium":  # numeric arrives as Debezium's string (decimal.handling.mode=string)
                dec = [c.name for c in s.columns if c.base_type == "numeric"]
                want = {
                    k: {**r, **{c: None if r[c] is None else str(r[c]) for c in dec}} for k, r in want.items()
                }
            assert diff_models(got, want) == [], name


# -- log positions beyond a signed 64-bit integer ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
def test_log_position_beyond_int64_is_a_typed_error(tmp_path: Path, fmt: str) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    if fmt == "wal2json":
        lines = [_w2j("I", {"id": 1, "v": "a"}, None, 100).replace('"lsn":"0/64"', '"lsn":"80000000/0"')]
        assert '"80000000/0"' in lines[0]
        keys = None
    else:
        payload = {"op": "c", "after": {"id": 1}, "source": {"schema": "public", "table": "kv", "lsn": 2**63}}
        lines, keys = [json.dumps({"payload": payload})], ['{"id": 1}']
    with pytest.raises(MereError):
        sync_batch(cat, events_from_json(lines, fmt, keys), SyncOptions("src"), "b0")
    assert "src.kv" not in cat.tables()


# -- transactions with boundaries: whole, split across batches, replayed, out of order ----------------------


def _bounded(fmt: str, xid: int, lines: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """A transaction's lines between its begin and its end, each change naming it (as tests/integrations/
    test_cdc_sync.py renders wal2json's B/C and Debezium's transaction metadata)."""
    if fmt == "wal2json":
        body = [("{" + f'"xid":{xid},' + line[1:], key) for line, key in lines]
        return [(_begin(xid), None), *body, (_commit(xid), None)]
    ident = f"{xid}:{xid * 100}"
    body = [
        (line.replace('"payload": {', f'"payload": {{"transaction": {{"id": "{ident}"}}, ', 1), key)
        for line, key in lines
    ]
    begin = json.dumps(
        {"schema": {"type": "struct"}, "payload": {"status": "BEGIN", "id": ident, "ts_ms": 1}}
    )
    end = json.dumps({"status": "END", "id": ident, "event_count": len(lines), "ts_ms": 1})
    return [(begin, None), *body, (end, None)]


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    which=st.integers(0, 1),
    fmt=st.sampled_from(["wal2json", "debezium"]),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 6),
)
def test_sync_transactions_with_boundaries_scrambled_equal_postgresql(
    sync_workloads: list[Workload], which: int, fmt: str, seed: int, n: int
) -> None:
    """Transactions (B ... C) land whole or cut in two (the begin's part in an earlier or the same batch
    as the end's part), in shuffled batches, some replayed whole; at the end nothing is pending and the
    table is PostgreSQL's."""
    w = sync_workloads[which]
    rnd = random.Random(seed)
    txns: dict[int, list[Event]] = {}
    for e in sorted(w.events, key=lambda e: e.seq):
        txns.setdefault(e.xid, []).append(e)
    batches: list[list[tuple[str, str | None]]] = [[] for _ in range(n)]
    for xid, evs in txns.items():
        lines = _bounded(fmt, xid, _lines(evs, fmt))
        if rnd.random() < 0.4:
            cut = rnd.randint(1, len(lines) - 1)
            i = rnd.randrange(n)
            batches[i] += lines[:cut]
            batches[rnd.randrange(i, n)] += lines[cut:]
        else:
            batches[rnd.randrange(n)] += lines
        if rnd.random() < 0.2:  # a whole replay, anywhere
            batches[rnd.randrange(n)] += lines
    with tempfile.TemporaryDirectory() as tmp:
        cat = mere.connect(str(Path(tmp) / "wh"))
        options = SyncOptions("src", buckets=2, partition_by={"acct": ["band"]})
        for i, part in enumerate(batches):
            if not part:
                continue
            events = events_from_json(
                [p for p, _ in part], fmt, [k for _, k in part] if fmt == "debezium" else None
            )
            sync_batch(cat, events, options, f"b{i}")
        rows = cat.table("src.acct").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
        got = {(r["id"],): {c: r[c] for c in ACCT_SYNC.names} for r in rows}
        oracle = w.oracle
        if fmt == "debezium":
            oracle = {
                k: {**r, "amount": None if r["amount"] is None else str(r["amount"])}
                for k, r in oracle.items()
            }
        assert diff_models(got, oracle) == []
        if "src.cdc_pending" in cat.tables():
            # No event waits; the ends delivered again after their transactions applied wait for a begin
            # (nothing tells them from ends that came early).
            held = cat.table("src.cdc_pending").to_arrow()
            assert set(held.column("op").to_pylist()) <= {"C", "END"}, held.to_pylist()


# -- a user's delete by filter in the middle of the stream --------------------------------------------------


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    which=st.integers(0, 2),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(3, 7),
    partitioned=st.booleans(),
    where=st.sampled_from(["qty > 0", "note is null", "flag = false", "band = 1"]),
)
def test_delete_by_filter_mid_stream_then_late_events(
    workloads: list[Workload], which: int, seed: int, n: int, partitioned: bool, where: str
) -> None:
    """``t.delete(filter)`` writes each matching key's marker just above its version's sequence: late
    events at or below it stay deleted, newer ones bring the key back (docs/concepts.md, "Deletes")."""
    w = workloads[which]
    rnd = random.Random(seed)
    preds = dict(_nonkey_filters()) | {
        "flag = false": lambda r: r["flag"] is False,
        "band = 1": lambda r: r["band"] == 1,
    }
    pred = preds[where]
    with tempfile.TemporaryDirectory() as tmp:
        cat = mere.connect(str(Path(tmp) / "wh"))
        t = landing(cat, ACCT, partitioned, 2, False)
        records: list[tuple[int, int, str, dict[str, Any]]] = []  # (seq, commit order, op, row)

        def model() -> dict[tuple[Any, ...], tuple[int, str, dict[str, Any]]]:
            best: dict[tuple[Any, ...], tuple[int, int, str, dict[str, Any]]] = {}
            for rec in records:
                key = (rec[3]["id"],)
                if key not in best or rec[:2] >= best[key][:2]:
                    best[key] = rec
            return {k: (seq, op, row) for k, (seq, _, op, row) in best.items()}

        def live() -> dict[tuple[Any, ...], dict[str, Any]]:
            return {k: row for k, (_, op, row) in model().items() if op != "d"}

        batches = plan_deliveries(w.events, rnd, n, 5)
        middle = rnd.randrange(1, len(batches))
        for i, batch in enumerate(batches):
            if i == middle:
                for seq, op, row in model().values():
                    if op != "d" and pred(row):
                        records.append((seq + 1, i, "d", row))
                t.delete(where)
                assert diff_models(read(t), live()) == [], "after the delete"
            for part in land(batch, rnd, False, False, False):
                t.upsert(part)
            records += [(seq, i, op, row) for seq, op, row in _rows_of(batch)]
            if rnd.random() < 0.3:
                t.compact()
            assert diff_models(read(t), live()) == [], ("after batch", i)
