"""Adversarial tests of the change log (table property ``changes.log = on``).

The oracle, for every pair of versions ``a <= b``: the feed applied to the snapshot at ``a`` gives the
snapshot at ``b`` (a delete or update_before names a row present at ``a`` with exactly that row, an insert
a key absent at ``a``); no key equal at both versions appears; and the feed of a logged table equals the
feed of a twin table with the same history and the log off.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
import math
import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from maintenance import MANUAL
from mere import errors
from mere.spec import OP_COLUMN
from mere.table.context import TableContext
from mere.table.images import (
    LOG_AFTER,
    LOG_BEFORE,
    LOG_DELETE,
    LOG_INSERT,
    LOG_SUMMARY_KEY,
    LOG_UNCHANGED,
)


def examples(n: int) -> settings:
    """``n`` examples (times ``CHANGE_LOG_SCALE`` from the environment, for longer hunts)."""
    return settings(
        max_examples=n * int(os.environ.get("CHANGE_LOG_SCALE", "1")),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("v", pa.float64()),
        pa.field("s", pa.string()),
    ]
)
FEED_META = ("_change", "_version", "_commit_time")


# -- oracle helpers ----------------------------------------------------------------------------------


def canon(row: dict[str, Any], names: list[str]) -> tuple[str, ...]:
    """A row's values compared by repr: NaN equals NaN, -0.0 differs from 0.0."""
    return tuple(repr(row.get(c)) for c in names)


def by_identity(table: pa.Table, identity: list[str], names: list[str]) -> dict[tuple[Any, ...], Any]:
    out = {}
    for r in table.to_pylist():
        key = tuple(r[c] for c in identity)
        assert key not in out, f"duplicate identity {key} in a snapshot"
        out[key] = canon(r, names)
    return out


def apply_feed(
    before: dict[tuple[Any, ...], Any], feed: pa.Table, identity: list[str], names: list[str]
) -> dict[tuple[Any, ...], Any]:
    """The feed applied to a snapshot, checking each row against what the snapshot holds."""
    state = dict(before)
    pending: set[tuple[Any, ...]] = set()
    for r in feed.to_pylist():
        key = tuple(r[c] for c in identity)
        change = r["_change"]
        if change in ("delete", "update_before"):
            assert key in state, f"{change} of a key the older snapshot lacks: {r}"
            assert state[key] == canon(r, names), f"before-image differs from the start row: {r} {state[key]}"
            if change == "delete":
                del state[key]
            else:
                pending.add(key)
        elif change == "update_after":
            assert key in pending, f"update_after without its update_before: {r}"
            pending.discard(key)
            state[key] = canon(r, names)
        else:
            assert change == "insert", r
            assert key not in before, f"insert of a key the older snapshot holds: {r} (held {before[key]})"
            state[key] = canon(r, names)
    assert not pending, f"update_before without update_after: {pending}"
    return state


def feed_list(t: mere.Table, a: int, b: int | None = None) -> list[tuple[str, ...]]:
    """The feed's rows in order, values by repr (NaN equals NaN), without the commit times."""
    rows = t.changes(a, b).read_all().to_pylist()
    return [tuple(f"{c}={v!r}" for c, v in r.items() if c != "_commit_time") for r in rows]


def check_pair(
    t: mere.Table, a: int, b: int, identity: list[str], snaps: dict[int, dict[Any, Any]], names: list[str]
) -> pa.Table:
    feed = t.changes(a, b).read_all()
    got = apply_feed(snaps[a], feed, identity, names)
    assert got == snaps[b], (a, b, feed.select([*identity, "_change", "_version"]).to_pylist())
    keys = {tuple(r[c] for c in identity) for r in feed.to_pylist()}
    same = [k for k in keys if snaps[a].get(k) == snaps[b].get(k)]
    assert not same, f"keys equal at {a} and {b} appear in the feed: {same}"
    assert all(a < v <= b for v in feed.column("_version").to_pylist())
    return feed


def is_logged(snapshot: Any) -> bool:
    """Whether a commit logged its changes (in either format)."""
    return bool(snapshot.internal.get("change_log") or snapshot.internal.get(LOG_SUMMARY_KEY))


def log_files(root: Path) -> list[Path]:
    return sorted(root.rglob("log-*"))


# -- the twin-table history ------------------------------------------------------------------------

KEYS = st.integers(0, 9)
FLOATS = st.sampled_from([0.0, -0.0, 1.5, 4.0, math.nan, None])
ROW = st.fixed_dictionaries(
    {
        "k": KEYS,
        "p": st.sampled_from(["a", "b", None]),
        "v": FLOATS,
        "s": st.one_of(st.none(), st.sampled_from(["x", "y"])),
    }
)
ROWS = st.lists(ROW, min_size=1, max_size=6)
PREDICATES = st.sampled_from(["v > 3", "v IS NULL", "s = 'x'", "k < 3", "p = 'a'", "p IS NULL"])
OPS = st.one_of(
    st.tuples(st.just("upsert"), ROWS),
    st.tuples(st.just("upsert"), ROWS),
    st.tuples(st.just("partial"), ROWS),
    st.tuples(st.just("delete_keys"), ROWS),
    st.tuples(st.just("delete_bare_keys"), st.lists(KEYS, min_size=1, max_size=3)),
    st.tuples(st.just("delete_where"), PREDICATES),
    st.tuples(st.just("merge"), ROWS),
    st.tuples(st.just("merge_delete"), ROWS),
    st.tuples(st.just("update"), PREDICATES),
    st.tuples(st.just("tx"), st.tuples(PREDICATES, ROWS)),
    st.tuples(st.just("stage"), ROWS),
    st.tuples(st.just("stage_delete"), ROWS),
    st.tuples(st.just("overwrite"), st.lists(ROW, max_size=4)),
    st.tuples(st.just("overwrite_a"), st.lists(ROW.map(lambda r: {**r, "p": "a"}), max_size=3)),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("rollback"), st.integers(0, 40)),
    st.tuples(st.just("toggle"), st.sampled_from(["on", "off"])),
    st.tuples(st.just("tag"), st.integers(0, 40)),
    st.tuples(st.just("cleanup"), st.none()),
    st.tuples(st.just("expire"), st.none()),
    st.tuples(st.just("idempotent"), st.tuples(st.sampled_from(["i1", "i2"]), ROWS)),
    st.tuples(st.just("race_same"), st.tuples(ROWS, ROWS)),
    st.tuples(st.just("race_delete"), st.tuples(ROWS, PREDICATES)),
)
# A transaction of one handle (first) with another handle's commit (second) landing before it commits.
# Partition overwrites are left out: see test_a_partition_overwrite_racing_a_logged_upsert_in_another_bucket.
TX_OPS = st.one_of(
    st.tuples(st.just("upsert"), ROWS),
    st.tuples(st.just("partial"), ROWS),
    st.tuples(st.just("delete_keys"), ROWS),
    st.tuples(st.just("delete_bare_keys"), st.lists(KEYS, min_size=1, max_size=3)),
    st.tuples(st.just("delete_where"), PREDICATES),
    st.tuples(st.just("update"), PREDICATES),
)
OTHER_OPS = st.one_of(
    TX_OPS,
    st.tuples(st.just("merge"), ROWS),
    st.tuples(st.just("stage"), ROWS),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("toggle"), st.sampled_from(["on", "off"])),
    st.tuples(st.just("overwrite"), st.lists(ROW, max_size=4)),
)
OPS = st.one_of(
    OPS, st.tuples(st.just("race"), st.tuples(st.lists(TX_OPS, min_size=1, max_size=2), OTHER_OPS))
)


def tx_op(tx: Any, kind: str, arg: Any) -> None:
    if kind == "upsert":
        tx.upsert(rows_table(arg))
    elif kind == "partial":
        tx.upsert(rows_table(arg, ["k", "p", "v"]))
    elif kind == "delete_keys":
        tx.delete(rows_table(arg, ["k", "p"]))
    elif kind == "delete_bare_keys":
        tx.delete(pa.table({"k": pa.array(sorted(set(arg)), pa.int64())}))
    elif kind == "delete_where":
        tx.delete(arg)
    else:
        assert kind == "update"
        tx.update(set={"v": "coalesce(v, 0) + 1", "s": "'u'"}, where=arg)


def rows_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> pa.Table:
    unique = {(r["p"], r["k"]): r for r in rows}  # one version per identity and batch
    columns = columns or SCHEMA.names
    return pa.table(
        {c: pa.array([r[c] for r in unique.values()], SCHEMA.field(c).type) for c in columns},
        schema=pa.schema([SCHEMA.field(c) for c in columns]),
    )


TX_KINDS = ("upsert", "partial", "delete_keys", "delete_bare_keys", "delete_where", "update")


def run_op(t: mere.Table, other: mere.Table, kind: str, arg: Any, logged: bool, step: int) -> None:
    if kind in TX_KINDS:  # a table takes the same calls as a transaction
        tx_op(t, kind, arg)
    elif kind == "merge":
        (
            t.merge(rows_table(arg), on="t.k = s.k AND t.p IS NOT DISTINCT FROM s.p")
            .when_matched_update(set={"v": "s.v"})
            .when_not_matched_insert_all()
            .execute()
        )
    elif kind == "merge_delete":
        (
            t.merge(rows_table(arg), on="t.k = s.k AND t.p IS NOT DISTINCT FROM s.p")
            .when_matched_delete(condition="s.v IS NULL")
            .when_matched_update_all()
            .execute()
        )
    elif kind == "tx":
        with t.transaction() as tx:
            tx.delete(arg[0])
            tx.upsert(rows_table(arg[1]))
    elif kind == "stage":
        staged = other.stage(rows_table(arg))
        t.commit([staged])
    elif kind == "stage_delete":
        staged = other.stage(rows_table(arg, ["k", "p"]), operation="delete")
        t.commit([staged])
    elif kind == "overwrite":
        t.overwrite(rows_table(arg) if arg else SCHEMA.empty_table())
    elif kind == "overwrite_a":
        t.overwrite(rows_table(arg) if arg else SCHEMA.empty_table(), partition={"p": "a"})
    elif kind == "compact":
        t.compact(min_files=1)
    elif kind == "rollback":
        t.rollback(arg % (t.version + 1))
    elif kind == "toggle":
        t.set_properties({"changes.log": arg} if logged else {"x.toggle": arg})
    elif kind == "tag":
        t.tag(f"tag{step}", arg % (t.version + 1))
    elif kind == "cleanup":
        t.cleanup(dt.timedelta(0), dry_run=False)
    elif kind == "expire":
        dry = t.expire(dt.timedelta(0), dry_run=True)
        assert sorted(t.expire(dt.timedelta(0), dry_run=False)) == sorted(dry)
    elif kind == "idempotent":
        t.upsert(rows_table(arg[1]), idempotency_key=arg[0])
    elif kind == "race_same":
        # Another handle commits between this transaction's start and its commit.
        with t.transaction() as tx:
            tx.upsert(rows_table(arg[0]))
            other.upsert(rows_table(arg[1]))
    elif kind == "race_delete":
        with t.transaction() as tx:
            tx.upsert(rows_table(arg[0]))
            other.delete(arg[1])
    elif kind == "race":
        mine, (their_kind, their_arg) = arg
        # Reading changes come first in a transaction: order them so.
        mine = sorted(mine, key=lambda op: op[0] in ("upsert", "partial"))
        with t.transaction() as tx:
            for my_kind, my_arg in mine:
                tx_op(tx, my_kind, my_arg)
            run_op(other, t, their_kind, their_arg, logged, step)
    else:  # pragma: no cover
        raise AssertionError(kind)


# Tiny row groups and input chunks (several files per split and commit), inline compaction (compactions
# inside the feeds' ranges), no key index.
EXTRA_PROPERTIES = st.sampled_from(
    [
        {},
        {},
        {"write.row-group-rows": "2", "write.chunk-bytes": "64"},
        {"compaction.auto": "inline", "compaction.min-files": "2"},
        {"write.key-index": "off"},
    ]
)


def twin_tables(
    root: Path, buckets: int, extra: dict[str, str] | None = None
) -> tuple[mere.Table, mere.Table, mere.Table, mere.Table]:
    out = []
    for name, props in (("logged", {"changes.log": "on"}), ("plain", {})):
        path = str(root / name)
        t = mere.connect(path).create_table(
            "a.t",
            SCHEMA,
            primary_key="k",
            partition_by="p",
            key_scope="partition",
            buckets=buckets,
            properties={**props, **(extra or {})},
        )
        out += [t, mere.connect(path).table("a.t")]
    return out[0], out[1], out[2], out[3]


@examples(40)
@given(
    ops=st.lists(OPS, min_size=1, max_size=9),
    buckets=st.sampled_from([1, 3]),
    extra=EXTRA_PROPERTIES,
    data=st.data(),
)
def test_logged_feeds_equal_merged_feeds_and_apply(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, Any]],
    buckets: int,
    extra: dict[str, str],
    data: st.DataObject,
) -> None:
    root = tmp_path_factory.mktemp("twins")
    logged, logged_other, plain, plain_other = twin_tables(root, buckets, extra)
    # A logged write conflicts with a concurrent commit to its splits and, retried, evaluates the reading
    # changes of its transaction (deletes by predicate or by key alone, UPDATE) again on the newer
    # version; without the log the same transaction commits on its first read. Both are valid outcomes,
    # so after such a race the twins may differ: each is then checked on its own.
    diverged = False
    for step, (kind, arg) in enumerate(ops):
        results: list[str | None] = []
        for t, other, is_logged in ((logged, logged_other, True), (plain, plain_other, False)):
            try:
                run_op(t, other, kind, arg, is_logged, step)
                results.append(None)
            except errors.MereError as e:
                results.append(type(e).__name__)
        assert diverged or results[0] == results[1], (kind, results)
        if kind == "race" and any(k in ("delete_bare_keys", "delete_where", "update") for k, _ in arg[0]):
            diverged = True
        logged, plain = logged.refresh(), plain.refresh()
        logged_other, plain_other = logged_other.refresh(), plain_other.refresh()
    identity, names = ["p", "k"], SCHEMA.names
    # Versions from the oldest readable one (a tagged older version: see
    # test_expire_keeps_the_logs_a_feed_from_a_tagged_version_needs).
    oldest = logged._sql.oldest_version(logged.record.id)
    versions = range(oldest, logged.version + 1)
    snaps = {v: by_identity(logged.to_arrow(version=v), identity, names) for v in versions}
    pairs = list(itertools.combinations_with_replacement(versions, 2))
    chosen = data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=8, unique=True))
    chosen.append((oldest, logged.version))
    if diverged:
        plain_oldest = plain._sql.oldest_version(plain.record.id)
        plain_snaps = {
            v: by_identity(plain.to_arrow(version=v), identity, names)
            for v in range(plain_oldest, plain.version + 1)
        }
        for a, b in [*chosen, (plain_oldest, plain.version)]:
            if a in plain_snaps and b in plain_snaps:
                check_pair(plain, a, b, identity, plain_snaps, names)
    else:
        assert logged.version == plain.version
        assert [s.operation for s in logged.history()] == [s.operation for s in plain.history()]
        assert oldest == plain._sql.oldest_version(plain.record.id)
        assert snaps == {v: by_identity(plain.to_arrow(version=v), identity, names) for v in versions}
    for a, b in chosen:
        full = check_pair(logged, a, b, identity, snaps, names)
        twins = (logged,) if diverged else (logged, plain)
        if not diverged:
            assert feed_list(logged, a, b) == feed_list(plain, a, b), (a, b)
        # A projection and a filter keep the matching rows of the same feed, logged or not.
        parts = [t.changes(a, b, columns=["s"], filter="v > 1").read_all() for t in twins]
        assert parts[0].column_names == ["p", "k", "s", *FEED_META]
        # (NaN is greater than every number, as in Spark SQL and PostgreSQL.)
        expected = [
            (r["p"], r["k"], r["s"], r["_change"])
            for r in full.to_pylist()
            if r["v"] is not None and (math.isnan(r["v"]) or r["v"] > 1)
        ]
        for part in parts:
            assert [(r["p"], r["k"], r["s"], r["_change"]) for r in part.to_pylist()] == expected
    # Every log file on disk belongs to a commit (nothing failed or lost leaves one behind) and every
    # logged commit's logs are on disk.
    on_disk = {p.name for p in log_files(root / "logged")}
    listed = {
        f.path.rsplit("/", 1)[-1]
        for f, _ in logged._sql.files_changed(logged.record.id, 0, logged.version)
        if f.content == "log"
    }
    assert on_disk == listed


# -- schema evolution --------------------------------------------------------------------------------

EVOLVING = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("i", pa.int32()),
        pa.field("s", pa.string()),
        pa.field("f", pa.float32()),
    ]
)
SEED = st.tuples(KEYS, st.sampled_from(["a", "b"]), st.one_of(st.none(), st.integers(-3, 3)))
EVOLVE_OPS = st.one_of(
    st.tuples(st.just("upsert"), st.lists(SEED, min_size=1, max_size=5)),
    st.tuples(st.just("upsert"), st.lists(SEED, min_size=1, max_size=5)),
    st.tuples(st.just("delete"), st.lists(SEED, min_size=1, max_size=3)),
    st.tuples(st.just("update"), st.none()),
    st.tuples(st.just("add"), st.sampled_from([None, "dflt"])),
    st.tuples(st.just("add_by_write"), st.lists(SEED, min_size=1, max_size=3)),
    st.tuples(st.just("rename"), st.integers(0, 10)),
    st.tuples(st.just("drop"), st.integers(0, 10)),
    st.tuples(st.just("widen"), st.integers(0, 10)),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("rollback"), st.integers(0, 30)),
)
WIDER = {pa.int8(): pa.int16(), pa.int16(): pa.int32(), pa.int32(): pa.int64(), pa.float32(): pa.float64()}
WIDER[pa.string()] = pa.large_string()


def seeded_rows(schema: pa.Schema, seeds: list[tuple[int, str, int | None]], step: int) -> pa.Table:
    """Rows of the table's current columns filled from (key, partition, value) seeds."""
    unique = {(p, k): x for k, p, x in seeds}
    cols: dict[str, pa.Array] = {}
    for field in schema:
        if field.name == "k":
            values: list[Any] = [k for _, k in unique]
        elif field.name == "p":
            values = [p for p, _ in unique]
        elif pa.types.is_integer(field.type):
            values = [None if x is None else x + step for x in unique.values()]
        elif pa.types.is_floating(field.type):
            values = [None if x is None else x / 2 + step for x in unique.values()]
        else:
            values = [None if x is None else f"{field.name}{x}-{step}" for x in unique.values()]
        cols[field.name] = pa.array(values, field.type)
    return pa.table(cols, schema=schema)


def evolve_op(t: mere.Table, kind: str, arg: Any, step: int) -> None:
    values = [f.name for f in t.schema if f.name not in ("k", "p")]
    if kind == "upsert":
        t.upsert(seeded_rows(t.schema, arg, step))
    elif kind == "delete":
        t.delete(seeded_rows(t.schema, arg, step).select(["k", "p"]))
    elif kind == "update":
        ints = [c for c in values if pa.types.is_integer(t.schema.field(c).type)]
        if ints:
            t.update(set={ints[0]: f"coalesce({ints[0]}, 0) + 1"}, where="k < 5")
    elif kind == "add":
        t.add_column(f"c{step}", pa.string(), default=arg)
    elif kind == "add_by_write":
        rows = seeded_rows(t.schema, arg, step)
        t.upsert(rows.append_column(f"w{step}", pa.array([step] * rows.num_rows, pa.int64())), evolve=True)
    elif kind == "rename" and values:
        t.rename_column(values[arg % len(values)], f"r{step}")
    elif kind == "drop" and values:
        t.drop_column(values[arg % len(values)])
    elif kind == "widen":
        wide = [c for c in values if t.schema.field(c).type in WIDER]
        if wide:
            name = wide[arg % len(wide)]
            t.widen(name, WIDER[t.schema.field(name).type])
    elif kind == "compact":
        t.compact(min_files=1)
    elif kind == "rollback":
        t.rollback(arg % (t.version + 1))


def current_columns_snapshot(t: mere.Table, version: int) -> dict[tuple[Any, ...], Any]:
    """The rows of a version in the current columns (as the feed speaks them)."""
    splits = {(f.partition, f.bucket) for f in t.files_at(version)}
    tables = t.split_tables(version, splits, t.schema.names) if splits else {}
    rows = pa.concat_tables([x for x in tables.values()]) if tables else t.schema.empty_table()
    return by_identity(rows, ["p", "k"], t.schema.names)


@examples(25)
@given(ops=st.lists(EVOLVE_OPS, min_size=1, max_size=9), buckets=st.sampled_from([1, 2]), data=st.data())
def test_logged_feeds_across_schema_changes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, Any]], buckets: int, data: st.DataObject
) -> None:
    """Logs written before columns were added, renamed, dropped or widened read in the current columns,
    as the merged start version does."""
    root = tmp_path_factory.mktemp("evolving")
    tables = [
        mere.connect(str(root / name)).create_table(
            "a.t",
            EVOLVING,
            primary_key="k",
            partition_by="p",
            buckets=buckets,
            properties=props,
            key_scope="partition",
        )
        for name, props in (("logged", {"changes.log": "on"}), ("plain", {}))
    ]
    for step, (kind, arg) in enumerate(ops):
        outcome: list[str | None] = []
        for t in tables:
            try:
                evolve_op(t, kind, arg, step)
                outcome.append(None)
            except errors.MereError as e:
                outcome.append(type(e).__name__)
        assert outcome[0] == outcome[1], (kind, outcome)
        tables = [t.refresh() for t in tables]
    logged, plain = tables
    assert logged.version == plain.version and logged.schema == plain.schema
    versions = range(logged.version + 1)
    snaps = {v: current_columns_snapshot(logged, v) for v in versions}
    pairs = list(itertools.combinations_with_replacement(versions, 2))
    chosen = data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=6, unique=True))
    for a, b in [*chosen, (0, logged.version)]:
        refused = []
        for t in (logged, plain):  # a rollback that undid a widening: both refuse the feed, logged or not
            try:
                t.changes(a, b)
                refused.append(False)
            except errors.InvalidInput as e:
                assert "rollback undid its widening" in str(e), e
                refused.append(True)
        assert refused[0] == refused[1], (a, b)
        if refused[0]:
            continue
        check_pair(logged, a, b, ["p", "k"], snaps, logged.schema.names)
        assert feed_list(logged, a, b) == feed_list(plain, a, b), (a, b)


# -- key types, many splits, nested values -----------------------------------------------------------

LONG = "k" * 70  # longer than Parquet's truncated statistics
KEY_KINDS: dict[str, tuple[list[pa.Field], Any]] = {
    "int32": ([pa.field("k", pa.int32(), nullable=False)], lambda i: [i - 20]),
    "int64": (
        [pa.field("k", pa.int64(), nullable=False)],
        lambda i: [2**63 - 1 - i if i % 2 else -(2**63) + i],
    ),
    "binary": ([pa.field("k", pa.binary(), nullable=False)], lambda i: [bytes([i, 0, 255])]),
    "decimal": ([pa.field("k", pa.decimal128(18, 2), nullable=False)], lambda i: [decimal.Decimal(i) / 4]),
    "string": ([pa.field("k", pa.string(), nullable=False)], lambda i: [f"{LONG}{i}é" if i % 2 else str(i)]),
    "date": (
        [pa.field("k", pa.date32(), nullable=False)],
        lambda i: [dt.date(2024, 2, 28) + dt.timedelta(i)],
    ),
    "timestamp": (
        [pa.field("k", pa.timestamp("us", tz="UTC"), nullable=False)],
        lambda i: [dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=i)],
    ),
    "composite": (
        [pa.field("k", pa.string(), nullable=False), pa.field("k2", pa.int16(), nullable=False)],
        lambda i: [f"a{i % 3}", i // 3],
    ),
}
NESTED = [
    pa.field("q", pa.int32()),
    pa.field("v", pa.float64()),
    pa.field("st", pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])),
    pa.field("m", pa.map_(pa.string(), pa.int64())),
]
NESTED_VALUE = st.fixed_dictionaries(
    {
        "q": st.sampled_from([None, 1, 2]),
        "v": FLOATS,
        "st": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "a": st.sampled_from([None, 1]),
                    "b": st.one_of(st.none(), st.lists(st.sampled_from(["x", ""]))),
                }
            ),
        ),
        "m": st.one_of(
            st.none(), st.lists(st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 2)), max_size=2)
        ),
    }
)
KEYED_OPS = st.one_of(
    st.tuples(
        st.just("upsert"), st.lists(st.tuples(st.integers(0, 30), NESTED_VALUE), min_size=1, max_size=12)
    ),
    st.tuples(
        st.just("upsert"), st.lists(st.tuples(st.integers(0, 30), NESTED_VALUE), min_size=1, max_size=12)
    ),
    st.tuples(
        st.just("delete"), st.lists(st.tuples(st.integers(0, 30), NESTED_VALUE), min_size=1, max_size=5)
    ),
    st.tuples(st.just("delete_where"), st.sampled_from(["v > 1", "q IS NULL", "v IS NULL"])),
    st.tuples(st.just("update"), st.sampled_from(["q = 1", "v > 1"])),
    st.tuples(st.just("compact"), st.none()),
)


def keyed_schema(kind: str) -> pa.Schema:
    return pa.schema([*KEY_KINDS[kind][0], *NESTED])


def keyed_rows(kind: str, items: list[tuple[int, dict[str, Any]]]) -> pa.Table:
    schema = keyed_schema(kind)
    unique = dict(items)
    keys = [KEY_KINDS[kind][1](i) for i in unique]
    cols: dict[str, list[Any]] = {f.name: [k[j] for k in keys] for j, f in enumerate(KEY_KINDS[kind][0])}
    for name in ("q", "v", "st", "m"):
        cols[name] = [value[name] for value in unique.values()]
    return pa.table(cols, schema=schema)


@examples(20)
@given(
    kind=st.sampled_from(sorted(KEY_KINDS)),
    buckets=st.sampled_from([1, 5, 20]),
    ops=st.lists(KEYED_OPS, min_size=1, max_size=6),
    data=st.data(),
)
def test_logged_feeds_of_key_types_many_splits_and_nested_values(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    buckets: int,
    ops: list[tuple[str, Any]],
    data: st.DataObject,
) -> None:
    """Integer-like keys are matched by a sorted search, other keys by joins; 20 buckets and the partition
    (NULL included) give more than 16 splits (two groups of reads); values nest."""
    root = tmp_path_factory.mktemp("keys")
    schema = keyed_schema(kind)
    key_names = [f.name for f in KEY_KINDS[kind][0]]
    tables = [
        mere.connect(str(root / name)).create_table(
            "a.t",
            schema,
            primary_key=key_names,
            partition_by="q",
            buckets=buckets,
            properties=props,
            key_scope="partition",
        )
        for name, props in (("logged", {"changes.log": "on"}), ("plain", {}))
    ]
    for kind_op, arg in ops:
        for t in tables:
            if kind_op == "upsert":
                t.upsert(keyed_rows(kind, arg))
            elif kind_op == "delete":
                t.delete(keyed_rows(kind, arg).select([*key_names, "q"]))
            elif kind_op == "delete_where":
                t.delete(arg)
            elif kind_op == "update":
                t.update(set={"v": "coalesce(v, 0) * 2 + 1"}, where=arg)
            else:
                t.compact(min_files=1)
    logged, plain = (t.refresh() for t in tables)
    identity = ["q", *key_names]
    names = schema.names
    versions = range(logged.version + 1)
    snaps = {v: by_identity(logged.to_arrow(version=v), identity, names) for v in versions}
    pairs = list(itertools.combinations_with_replacement(versions, 2))
    for a, b in [*data.draw(st.lists(st.sampled_from(pairs), max_size=4, unique=True)), (0, logged.version)]:
        check_pair(logged, a, b, identity, snaps, names)
        assert feed_list(logged, a, b) == feed_list(plain, a, b), (a, b)


# -- targeted tests ----------------------------------------------------------------------------------

SMALL = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), pa.field("p", pa.string()), pa.field("v", pa.string())]
)


def small(keys: list[int], v: str, p: str | None = "a") -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.int64()), "p": [p] * len(keys), "v": [f"{v}{k}" for k in keys]}, SMALL
    )


def small_table(root: Path, log: str = "on", **kwargs: Any) -> mere.Table:
    kwargs.setdefault("partition_by", "p")
    if kwargs["partition_by"]:
        kwargs.setdefault("key_scope", "partition")  # rows are (p, k): keys do not move between partitions
    return mere.connect(str(root)).create_table(
        "a.t", SMALL, primary_key="k", properties={"changes.log": log}, **kwargs
    )


def check_all_pairs(t: mere.Table, identity: tuple[str, ...] = ("p", "k")) -> None:
    t = t.refresh()
    versions = range(t.resolve_version(None) + 1)
    oldest = t._sql.oldest_version(t.record.id)
    readable = [v for v in versions if v >= oldest]
    names = t.schema.names
    snaps = {v: by_identity(t.to_arrow(version=v), list(identity), names) for v in readable}
    for a, b in itertools.combinations_with_replacement(readable, 2):
        check_pair(t, a, b, list(identity), snaps, names)


def buckets_by_key(root: Path, buckets: int, keys: range) -> dict[int, int]:
    """Which bucket each key lands in (one upsert per key on a scratch table)."""
    t = mere.connect(str(root)).create_table("scratch.b", SMALL, primary_key="k", buckets=buckets)
    out = {}
    for k in keys:
        version = t.upsert(small([k], "x")).version
        (bucket,) = [f["bucket"] for f in t.files().to_pylist() if f["added_version"] == version]
        out[k] = bucket
    return out


def test_a_partition_overwrite_racing_a_logged_upsert_in_another_bucket(tmp_path: Path) -> None:
    where = buckets_by_key(tmp_path / "scratch", 4, range(8))
    kept, moved = next((a, b) for a in range(8) for b in range(8) if where[a] != where[b])
    t = small_table(tmp_path / "w", buckets=4)
    other = mere.connect(str(tmp_path / "w")).table("a.t")
    t.upsert(small([kept, moved], "x"))
    with t.transaction() as tx:
        tx.upsert(small([moved], "mine"))  # a bucket the overwrite empties and writes nothing to
        other.overwrite(small([kept], "ov"), partition={"p": "a"})
    t = t.refresh()
    assert [s.operation for s in t.history()][-2:] == ["overwrite", "upsert"]
    start = t.version - 1
    assert t.to_arrow(version=start).column("k").to_pylist() == [kept]
    feed = t.changes(start).read_all().to_pylist()
    assert [(r["k"], r["_change"], r["v"]) for r in feed] == [(moved, "insert", f"mine{moved}")]


def test_expire_keeps_the_logs_a_feed_from_a_tagged_version_needs(tmp_path: Path) -> None:
    t = small_table(tmp_path)
    t.upsert(small([1], "a"))
    t.tag("mark")
    t.upsert(small([1], "b"))
    t.expire(dt.timedelta(0), dry_run=False)
    assert t.resolve_version(tag="mark") == 1
    feed = t.changes(1).read_all().to_pylist()
    assert [(r["k"], r["_change"], r["v"]) for r in feed] == [
        (1, "update_before", "a1"),
        (1, "update_after", "b1"),
    ]


def test_a_concurrent_commit_to_another_bucket_needs_no_retry(tmp_path: Path) -> None:
    where = buckets_by_key(tmp_path / "scratch", 4, range(8))
    mine, theirs = next((a, b) for a in range(8) for b in range(8) if where[a] != where[b])
    t = small_table(tmp_path / "w", buckets=4)
    other = mere.connect(str(tmp_path / "w")).table("a.t")
    t.upsert(small([mine, theirs], "x"))
    base = t.version
    with t.transaction() as tx:
        tx.upsert(small([mine], "mine"))
        other.upsert(small([theirs], "theirs"))
        other.compact(min_files=1)  # compaction of any split changes no row: no conflict either
    t = t.refresh()
    assert t.history()[-1].summary["read_version"] == base  # committed on its first attempt
    assert t.history()[-1].internal.get(LOG_SUMMARY_KEY) is True
    check_all_pairs(t)
    assert feed_list(t, base) == feed_list(t.refresh(), base)
    rows = sorted((r["k"], r["_change"], r["v"]) for r in t.changes(base).read_all().to_pylist())
    assert rows == sorted(
        [
            (mine, "update_before", f"x{mine}"),
            (mine, "update_after", f"mine{mine}"),
            (theirs, "update_before", f"x{theirs}"),
            (theirs, "update_after", f"theirs{theirs}"),
        ]
    )


def test_a_concurrent_merge_update_and_delete_in_the_same_split_are_logged_again(
    tmp_path: Path, catalog_url: str
) -> None:
    warehouse = str(tmp_path / "warehouse")
    t = mere.connect(warehouse, catalog=catalog_url).create_table(
        "a.t",
        SMALL,
        primary_key="k",
        partition_by="p",
        buckets=1,
        properties={"changes.log": "on", **MANUAL},
        key_scope="partition",
    )
    other = mere.connect(warehouse, catalog=catalog_url).table("a.t")
    t.upsert(small([1, 2, 3], "x"))
    for interfere in (
        lambda: (
            other.merge(small([1, 4], "m")).when_matched_update_all().when_not_matched_insert_all().execute()
        ),
        lambda: other.update(set={"v": "'u'"}, where="k = 2"),
        lambda: other.delete("k = 3"),
        lambda: other.delete(small([1], "", p="a").select(["k", "p"])),
    ):
        base = t.version
        with t.transaction() as tx:
            tx.upsert(small([1, 2, 3, 4], f"t{base}-"))
            interfere()
        t = t.refresh()
        assert t.history()[-1].summary["read_version"] == base + 1  # read again after the conflict
    check_all_pairs(t)


def test_concurrent_threads_upserting_the_same_keys_lose_no_commit(tmp_path: Path, catalog_url: str) -> None:
    """Threads, each with its own handle, upsert the same keys with the log on (SQLite and PostgreSQL):
    every commit lands, each logged commit read the version just before it, every feed applies."""
    warehouse = str(tmp_path / "warehouse")
    t = mere.connect(warehouse, catalog=catalog_url).create_table(
        "a.t", SMALL, primary_key="k", buckets=2, properties={"changes.log": "on", **MANUAL}
    )
    t.upsert(small(list(range(6)), "init"))
    failures: list[BaseException] = []
    versions: list[int] = []

    def writer(w: int) -> None:
        handle = mere.connect(warehouse, catalog=catalog_url).table("a.t")
        for i in range(6):
            try:
                versions.append(handle.upsert(small([0, 1, 2, 3, 10 + w], f"w{w}-{i}-")).version)
            except BaseException as e:  # collected for the assertion
                failures.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures
    t = t.refresh()
    assert sorted(versions) == list(range(2, 20)) and t.version == 19
    assert all(is_logged(s) for s in t.history()[1:])
    assert all(s.summary["read_version"] == s.version - 1 for s in t.history()[2:])
    assert {r["k"] for r in t.to_arrow().to_pylist()} == {*range(6), 10, 11, 12}
    snaps = {v: by_identity(t.to_arrow(version=v), ["p", "k"], SMALL.names) for v in range(t.version + 1)}
    for a, b in itertools.combinations(range(t.version + 1), 2):
        check_pair(t, a, b, ["p", "k"], snaps, SMALL.names)
    # Each commit's log holds exactly the rows of the version before it that it replaced.
    for v in range(3, t.version + 1):
        feed = t.changes(v - 1, v).read_all().to_pylist()
        befores = {r["k"]: r["v"] for r in feed if r["_change"] == "update_before"}
        previous = {r["k"]: r["v"] for r in t.to_arrow(version=v - 1).to_pylist()}
        assert befores == {k: previous[k] for k in befores} and set(befores) >= {0, 1, 2, 3}


def test_a_logged_upsert_that_keeps_losing_races_fails_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attempt of a logged upsert meets a new commit to its split (the log off, the same upsert
    never conflicts): after the last attempt it raises CommitConflict, leaving no log or data file."""
    from mere.retry import RetryPolicy
    from mere.table import commit as commit_module

    t = small_table(tmp_path, buckets=1)
    other = mere.connect(str(tmp_path)).table("a.t")
    t.upsert(small([1], "x"))
    files_before = sorted(p.name for p in tmp_path.rglob("*.parquet"))
    real = commit_module.write_change_log
    attempts: list[int] = []

    def racing(ctx: TableContext, base: int, added: Any) -> Any:
        out = real(ctx, base, added)
        if ctx.handle is t:
            attempts.append(base)
            other.upsert(small([1], f"o{len(attempts)}-"))  # lands before this attempt commits
        return out

    monkeypatch.setattr(commit_module, "write_change_log", racing)
    tx = t.transaction()
    tx.retries = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.001)
    tx.upsert(small([1], "mine"))
    with pytest.raises(errors.CommitConflict, match="lost 3 races"):
        tx.commit()
    monkeypatch.undo()
    assert attempts == [1, 2, 3]  # each retry read the before-images again, at the newer version
    t = t.refresh()
    assert t.version == 4 and t.to_arrow().column("v").to_pylist() == ["o3-1"]
    mine = [p for p in tmp_path.rglob("*.parquet") if p.name not in files_before]
    listed = {f.path.rsplit("/", 1)[-1] for f, _ in t._sql.files_changed(t.record.id, 0, t.version)}
    assert {p.name for p in mine} <= listed, "the failed upsert left files behind"
    check_all_pairs(t)


@pytest.mark.parametrize("failure", ["bad_input", "split_tables", "commit", "state_unknown"])
def test_a_failed_logged_write_leaves_no_log_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    t = small_table(tmp_path, buckets=2)
    t.upsert(small(list(range(6)), "x"))
    before = (t.version, t.to_arrow().sort_by("k"), sorted(p.name for p in tmp_path.rglob("*.parquet")))
    logs_before = log_files(tmp_path)
    if failure == "bad_input":
        with pytest.raises(errors.InvalidInput):
            t.upsert(pa.table({"k": pa.array([1, None], pa.int64()), "p": ["a", "a"], "v": ["y", "z"]}))
    elif failure == "split_tables":
        calls: list[int] = []
        real = mere.Table.split_tables

        def second_group_fails(self: mere.Table, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) > 1:
                raise OSError("disk full")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(mere.Table, "split_tables", second_group_fails)
        monkeypatch.setattr("mere.table.images.SPLITS_PER_READ", 1)  # one split per read: fails halfway
        with pytest.raises(OSError, match="disk full"):
            t.upsert(small(list(range(6)), "y"))
        assert len(calls) == 2
    elif failure == "commit":

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("catalog gone")

        monkeypatch.setattr(t._sql, "commit", broken)
        with pytest.raises(RuntimeError, match="catalog gone"):
            t.upsert(small([1, 2], "y"))
    else:

        def unknown(*args: Any, **kwargs: Any) -> Any:
            raise errors.CommitStateUnknown("connection lost after the commit was sent")

        monkeypatch.setattr(t._sql, "commit", unknown)
        with pytest.raises(errors.CommitStateUnknown):
            t.upsert(small([1, 2], "y"))
        monkeypatch.undo()
        # The commit may have landed, so its files stay; cleanup() removes them once they are known orphans.
        assert len(log_files(tmp_path)) == len(logs_before) + 2
        t.cleanup(dt.timedelta(0), dry_run=False)
    monkeypatch.undo()
    t = t.refresh()
    after = (t.version, t.to_arrow().sort_by("k"), sorted(p.name for p in tmp_path.rglob("*.parquet")))
    assert after == before
    assert log_files(tmp_path) == logs_before
    check_all_pairs(t)


def test_cleanup_never_deletes_a_live_log_and_expire_dry_run_lists_what_expire_deletes(
    tmp_path: Path,
) -> None:
    t = small_table(tmp_path, buckets=3)
    t.upsert(small(list(range(9)), "a"))
    t.upsert(small([1, 2, 3], "b"))
    t.delete("k > 6")
    t.tag("t2", 2)
    t.compact(min_files=1)
    t.upsert(small([1, 8], "c"))
    t.rollback(3)
    t.upsert(small([2, 3], "d"))
    orphan = next(tmp_path.rglob("part-*")).parent / "part-0123456789abcdef0123456789abcdef.parquet"
    orphan.write_bytes(b"junk")
    logs = log_files(tmp_path)
    assert len(logs) >= 6
    removed = t.cleanup(dt.timedelta(0), dry_run=False)
    assert [Path(p).name for p in removed] == ["part-0123456789abcdef0123456789abcdef.parquet"]
    assert log_files(tmp_path) == logs
    check_all_pairs(t)
    dry = t.expire(dt.timedelta(0), dry_run=True)
    assert log_files(tmp_path) == logs
    # The kept (current) version's logs stay: a feed from the version before it may need them.
    current = {
        f.path.rsplit("/", 1)[-1]
        for f, _ in t._sql.files_changed(t.record.id, t.version - 1, t.version)
        if f.content == "log"
    }
    done = t.expire(dt.timedelta(0), dry_run=False)
    assert sorted(done) == sorted(dry)
    assert {Path(p).name for p in done if Path(p).name.startswith("log-")} == {p.name for p in logs} - current
    assert {p.name for p in log_files(tmp_path)} == current
    assert t.to_arrow(tag="t2").num_rows == 9
    # The tagged version stays readable; the commits after it expired, so no feed starts there.
    with pytest.raises(errors.NoSuchVersion):
        t.changes(2)
    # Later logged commits log again; a second expiry (nothing to expire) deletes nothing that is used.
    t.upsert(small([4], "e"))
    assert t.expire(dt.timedelta(days=1), dry_run=False) == []
    assert len(log_files(tmp_path)) == len(current) + 1
    check_all_pairs(t)


def test_idempotent_retries_write_no_second_log(tmp_path: Path) -> None:
    t = small_table(tmp_path)
    t.upsert(small([1, 2], "a"))
    first = t.upsert(small([1, 2], "b"), idempotency_key="once")
    logs = log_files(tmp_path)
    again = t.upsert(small([1, 2], "c"), idempotency_key="once")
    assert again.already_committed and again.version == first.version
    with t.transaction("once") as tx:
        tx.upsert(small([1], "d"))
    staged = t.stage(small([2], "e"))
    assert t.commit([staged], idempotency_key="once").version == first.version
    assert log_files(tmp_path) == logs
    assert t.refresh().version == first.version
    check_all_pairs(t)


def test_a_transaction_turning_the_log_on_or_off_with_its_write(tmp_path: Path) -> None:
    t = small_table(tmp_path, log="off")
    t.upsert(small([1, 2, 3], "a"))
    with t.transaction() as tx:
        tx.set_properties({"changes.log": "on"})
        tx.upsert(small([1, 4], "b"))
    t = t.refresh()
    t.upsert(small([2, 4], "c"))
    with t.transaction() as tx:
        tx.delete("k = 3")
        tx.set_properties({"changes.log": "off"})
        tx.upsert(small([1], "d"))
    t = t.refresh()
    t.upsert(small([4], "e"))
    t.set_properties({"changes.log": "on"})
    t.upsert(small([4, 5], "f"))
    assert t.history()[3].internal.get(LOG_SUMMARY_KEY) is True
    assert not is_logged(t.history()[-3])
    check_all_pairs(t)


def test_rollback_brings_back_the_property_of_its_version(tmp_path: Path) -> None:
    t = small_table(tmp_path, log="off")
    t.upsert(small([1, 2], "a"))
    t.set_properties({"changes.log": "on"})
    t.upsert(small([1], "b"))
    t.rollback(1)  # the log was off at version 1
    t = t.refresh()
    assert t.properties.get("changes.log", "off") == "off"
    t.upsert(small([2], "c"))
    assert not is_logged(t.history()[-1])
    t.rollback(3)
    t = t.refresh()
    assert t.properties["changes.log"] == "on"
    t.upsert(small([1, 2], "d"))
    assert t.history()[-1].internal.get(LOG_SUMMARY_KEY) is True
    check_all_pairs(t)


@pytest.mark.parametrize("partition", ["a/b", "x=y", "", "null", "é €", "%2F", None, "__NULL__"])
def test_odd_partition_values_find_their_logs(tmp_path: Path, partition: str | None) -> None:
    t = small_table(tmp_path, buckets=2)
    t.upsert(small([1, 2, 3], "a", p=partition))
    t.upsert(small([1, 2, 3], "a", p="plain"))
    start, logs_at_start = t.version, len(log_files(tmp_path))
    t.upsert(small([1, 2], "b", p=partition))
    t.delete(small([3], "", p=partition).select(["k", "p"]))
    # two splits logged by the upsert, one by the delete
    assert len(log_files(tmp_path)) == logs_at_start + 3
    rows = sorted((r["k"], r["_change"], r["v"]) for r in t.changes(start).read_all().to_pylist())
    assert rows == [
        (1, "update_after", "b1"),
        (1, "update_before", "a1"),
        (2, "update_after", "b2"),
        (2, "update_before", "a2"),
        (3, "delete", "a3"),
    ]
    check_all_pairs(t)


def test_upsert_evolve_and_spark_style_stages_with_stale_handles(tmp_path: Path) -> None:
    t = small_table(tmp_path, buckets=2)
    worker = mere.connect(str(tmp_path)).table("a.t")  # a task's handle
    t.upsert(small([1, 2, 3], "a"))
    staged = [worker.stage(small([1], "b")), worker.stage(small([1, 2], "c"))]
    deletes = worker.stage(small([3], "").select(["k", "p"]), operation="delete")
    t.commit(staged)
    t.commit([deletes])
    wide = small([2, 4], "d").append_column("extra", pa.array([7, 8], pa.int64()))
    t.upsert(wide, evolve=True)
    t = t.refresh()
    assert all(is_logged(s) for s in t.history()[1:])
    worker = worker.refresh()
    worker.upsert(small([1], "e").append_column("extra", pa.array([9], pa.int64())))
    # The feed speaks the current columns: before-images logged before 'extra' existed read it as NULL.
    feed = t.changes(1, 4).read_all().to_pylist()
    assert sorted((r["k"], r["_change"], r["v"], r["extra"]) for r in feed) == [
        (1, "update_after", "c1", None),
        (1, "update_before", "a1", None),
        (2, "update_after", "d2", 7),
        (2, "update_before", "a2", None),
        (3, "delete", "a3", None),
        (4, "insert", "d4", 8),
    ]
    check_all_pairs(t)


def test_a_logged_upsert_whose_read_version_expired_meanwhile_still_commits(tmp_path: Path) -> None:
    t = small_table(tmp_path, buckets=1)
    other = mere.connect(str(tmp_path)).table("a.t")
    t.upsert(small([1, 2], "a"))
    with t.transaction() as tx:
        tx.upsert(small([1], "mine"))
        other.upsert(small([2], "theirs"))
        other.expire(dt.timedelta(0), dry_run=False)  # maintenance elsewhere: version 1 is no longer readable
    t = t.refresh()
    assert sorted(t.to_arrow().column("v").to_pylist()) == ["mine1", "theirs2"]
    check_all_pairs(t)


def test_an_update_racing_a_partition_overwrite_does_not_resurrect_rows(tmp_path: Path) -> None:
    where = buckets_by_key(tmp_path / "scratch", 4, range(8))
    kept, moved = next((a, b) for a in range(8) for b in range(8) if where[a] != where[b])
    t = small_table(tmp_path / "w", log="off", buckets=4)
    other = mere.connect(str(tmp_path / "w")).table("a.t")
    t.upsert(small([kept, moved], "x"))
    with t.transaction() as tx:
        tx.update(set={"v": "'upd'"}, where=f"k = {moved}")
        other.overwrite(small([kept], "ov"), partition={"p": "a"})
    assert t.refresh().to_arrow().column("k").to_pylist() == [kept]


CDC = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string()), pa.field("op", pa.string())]
)


@examples(15)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.integers(0, 6), st.sampled_from(["I", "U", "D", "-U", "+U", "c", "d", "r"])),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_cdc_batches_with_repeated_keys(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[tuple[int, str]]]
) -> None:
    """Change-data batches (deletes among upserts in one data file, a key several times in a batch)."""
    root = tmp_path_factory.mktemp("cdc")
    tables = [
        mere.connect(str(root / name)).create_table(
            "a.t", CDC, primary_key="k", buckets=2, cdc_column="op", properties=props
        )
        for name, props in (("logged", {"changes.log": "on"}), ("plain", {}))
    ]
    for i, batch in enumerate(batches):
        data = pa.table(
            {
                "k": pa.array([k for k, _ in batch], pa.int64()),
                "v": [f"{i}-{j}" for j in range(len(batch))],
                "op": [op for _, op in batch],
            }
        )
        for t in tables:
            t.upsert(data)
    logged, plain = (t.refresh() for t in tables)
    assert all(is_logged(s) for s in logged.history()[1:] if s.summary.get("added_files"))
    names = ["k", "v"]
    snaps = {v: by_identity(logged.to_arrow(version=v), ["k"], names) for v in range(logged.version + 1)}
    for a, b in itertools.combinations(range(logged.version + 1), 2):
        check_pair(logged, a, b, ["k"], snaps, names)
        assert feed_list(logged, a, b) == feed_list(plain, a, b)


def test_odd_string_keys_are_found_by_the_log_reads(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("v", pa.int64())])
    keys = ["", "a'b", 'q"', "back\\slash", "nul\x00byte", "😀", "NULL", "NaN", " ", "ä" * 200, "%", "_"]
    tables = [
        mere.connect(str(tmp_path / name)).create_table(
            "a.t", schema, primary_key="k", buckets=3, properties=props
        )
        for name, props in (("logged", {"changes.log": "on"}), ("plain", {}))
    ]
    for t in tables:
        t.upsert(pa.table({"k": keys, "v": list(range(len(keys)))}, schema))
        t.upsert(pa.table({"k": keys[::2], "v": [100] * len(keys[::2])}, schema))
        t.delete(pa.table({"k": keys[1::4]}))
        t.update(set={"v": "v + 1"}, where="v < 5")
    logged, plain = (t.refresh() for t in tables)
    assert len(log_files(tmp_path / "logged")) >= 3
    snaps = {v: by_identity(logged.to_arrow(version=v), ["k"], ["k", "v"]) for v in range(logged.version + 1)}
    for a, b in itertools.combinations(range(logged.version + 1), 2):
        check_pair(logged, a, b, ["k"], snaps, ["k", "v"])
        assert feed_list(logged, a, b) == feed_list(plain, a, b)


def test_expire_by_age_keeps_the_logs_of_the_versions_it_keeps(tmp_path: Path) -> None:
    import time

    t = small_table(tmp_path, buckets=2)
    t.upsert(small(list(range(6)), "a"))
    t.upsert(small([1, 2], "b"))
    t.upsert(small([2, 3], "c"))
    time.sleep(1.0)
    t.upsert(small([3, 4], "d"))  # the version kept at the cutoff is 3: commits 3 to 5 keep their logs
    t.delete(small([4, 5], "").select(["k", "p"]))
    old_logs = {p.name for p in log_files(tmp_path)}
    assert len(old_logs) >= 6
    history = t.history()
    # A cutoff half way between versions 3 and 4, however long the commits took.
    middle = history[3].committed_at + (history[4].committed_at - history[3].committed_at) / 2

    def age() -> dt.timedelta:
        return dt.datetime.now(dt.UTC) - middle

    dry = t.expire(age(), dry_run=True)
    done = t.expire(age(), dry_run=False)
    assert sorted(done) == sorted(dry)
    assert t._sql.oldest_version(t.record.id) == 3
    remaining = {p.name for p in log_files(tmp_path)}
    listed = {
        f.path.rsplit("/", 1)[-1]
        for f, _ in t._sql.files_changed(t.record.id, 2, t.version)
        if f.content == "log"
    }
    assert remaining == listed and len(listed) >= 3
    assert {Path(p).name for p in done if "log-" in p} == old_logs - remaining
    check_all_pairs(t)


def test_follow_over_logged_and_unlogged_commits(tmp_path: Path) -> None:
    t = small_table(tmp_path, buckets=2)
    t.upsert(small([1, 2, 3], "a"))
    stream = mere.follow(t, 1, poll_seconds=0.01, max_poll_seconds=0.01)
    seen: list[tuple[int, list[tuple[int, str, str]]]] = []
    for step, write in enumerate(
        [
            lambda: t.upsert(small([1, 4], "b")),
            lambda: t.set_properties({"changes.log": "off"}),
            lambda: t.delete("k = 2"),
            lambda: t.set_properties({"changes.log": "on"}),
            lambda: t.upsert(small([2, 4], "c")),
        ]
    ):
        write()
        version, changes = next(stream)
        seen.append((version, sorted((r["k"], r["_change"], r["v"]) for r in changes.to_pylist())))
        assert version == 2 + step
    assert seen == [
        (2, [(1, "update_after", "b1"), (1, "update_before", "a1"), (4, "insert", "b4")]),
        (3, []),
        (4, [(2, "delete", "a2")]),
        (5, []),
        (6, [(2, "insert", "c2"), (4, "update_after", "c4"), (4, "update_before", "b4")]),
    ]
    check_all_pairs(t)


def first_format_log(ctx: TableContext, base: int, added: Any) -> list[Any]:
    """A log as ``changes.log`` first wrote it: the rows at ``base`` of the keys the commit wrote, no
    change kinds (the commit marked ``change_log: True``)."""
    from mere.kernels import KeySet
    from mere.table.images import written_rows
    from mere.write.writer import PreparedFile

    spec = ctx.spec
    by_split: dict[tuple[str, int], list[Any]] = {}
    for entry in added:
        by_split.setdefault((entry.partition, entry.bucket), []).append(entry)
    prepared = []
    for split, entries in sorted(by_split.items()):
        touched, _ = written_rows(ctx, entries)
        rows = ctx.handle.split_tables(base, {split}, spec.schema.names).get(split)
        if rows is None or not rows.num_rows:
            continue
        rows = rows.filter(pa.array(KeySet(touched, list(spec.primary_key)).contains(rows)))
        rows = pa.Table.from_arrays(
            [c.cast(f.type) for c, f in zip(rows.columns, spec.schema)], schema=spec.schema
        )
        prepared.append(PreparedFile(json.loads(split[0]), split[1], rows.sort_by("k"), "log"))
    return ctx.files.write(prepared)


def test_logs_of_the_first_format_still_serve_feeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables logged before logs held change kinds: their before-images are merged with the data files
    (no shortcut), alone and in ranges mixing both formats, and give the unlogged twin's feeds."""
    from mere.table import commit as commit_module

    twins = [
        small_table(tmp_path / name, log=log, buckets=2) for name, log in (("old", "on"), ("plain", "off"))
    ]
    steps = [
        lambda t: t.upsert(small([1, 2, 3, 4], "a")),
        lambda t: t.upsert(small([2, 3, 5], "b")),
        lambda t: t.delete(small([1, 9], "", p="a").select(["k", "p"])),
        lambda t: t.upsert(small([3, 4], "b")),  # 3 written back unchanged
        lambda t: t.upsert(small([1, 6], "c")),
        lambda t: t.upsert(small([2, 6], "d")),
        lambda t: t.delete(small([5], "", p="a").select(["k", "p"])),
    ]
    with monkeypatch.context() as patch:
        patch.setattr(commit_module, "write_change_log", first_format_log)
        patch.setattr(commit_module, "LOG_SUMMARY_KEY", "change_log")
        for step in steps[:4]:
            for t in twins:
                step(t)
    for step in steps[4:]:  # written in the current format
        for t in twins:
            step(t)
    old, plain = (t.refresh() for t in twins)
    marks = [(s.internal.get("change_log"), s.internal.get(LOG_SUMMARY_KEY)) for s in old.history()[1:]]
    assert marks == [(True, None)] * 4 + [(None, True)] * 3
    for a, b in itertools.combinations_with_replacement(range(old.version + 1), 2):
        assert feed_list(old, a, b) == feed_list(plain, a, b), (a, b)
    check_all_pairs(old)


def test_a_log_holds_what_its_commit_did_to_each_key(tmp_path: Path) -> None:
    t = small_table(tmp_path, buckets=1)
    t.upsert(small([1, 2, 3], "a"))
    t.upsert(pa.concat_tables([small([1], "a"), small([2, 4], "b")]))  # 1 unchanged, 2 updated, 4 new
    t.delete(small([3, 7], "", p="a").select(["k", "p"]))  # 7 was never there
    logs = sorted(log_files(tmp_path), key=lambda p: p.stat().st_mtime_ns)
    got = [[(r["k"], r["v"], r[OP_COLUMN]) for r in pq.read_table(p).to_pylist()] for p in logs]
    assert got == [
        [(1, "a1", LOG_INSERT), (2, "a2", LOG_INSERT), (3, "a3", LOG_INSERT)],
        [(1, "a1", LOG_UNCHANGED), (2, "a2", LOG_BEFORE), (2, "b2", LOG_AFTER), (4, "b4", LOG_INSERT)],
        [(3, "a3", LOG_DELETE)],
    ]
    assert feed_list(t, 1, 2) == [
        ("p='a'", "k=2", "v='a2'", "_change='update_before'", "_version=2"),
        ("p='a'", "k=2", "v='b2'", "_change='update_after'", "_version=2"),
        ("p='a'", "k=4", "v='b4'", "_change='insert'", "_version=2"),
    ]
    check_all_pairs(t)
