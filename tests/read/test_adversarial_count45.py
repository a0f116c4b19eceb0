"""Adversarial: ``Scan.count()`` (files whose footers rule out delete markers read without the operation
column, windows of ``COUNT_WINDOW_BYTES`` of keys) against ``to_arrow().num_rows`` and a dict model, and
``to_arrow`` (one more key window queued per split group) against ``to_batches``/``to_reader``.

Random tables: int, string, composite, date and zoned timestamp keys; partitions with partition or
table-wide keys; buckets; newest-wins, ``first_row``, partial updates (``last_non_null``) and ``sequence_by``;
row groups of a few rows; steps that upsert, write partial rows, write CDC batches with deletes, delete by
key filter, by value filter and blind (keys never written), update, MERGE INTO, re-insert deleted keys,
compact, and evolve the schema; every version read back (time travel) with tiny count windows (1..600
bytes) and 1..4 threads, with and without filters."""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import os
import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, NoSuchVersion, StorageError
from mere.read import reader
from mere.table import scan as scan_module

KEY_KINDS = ["int", "string", "composite", "date", "timestamp"]
ENGINES = ["last", "first_row", "partial", "sequence"]


def _schema(key_kind: str, partitioned: bool) -> tuple[pa.Schema, list[str]]:
    fields: list[pa.Field] = []
    if key_kind == "int":
        fields.append(pa.field("k", pa.int64(), nullable=False))
        keys = ["k"]
    elif key_kind == "string":
        fields.append(pa.field("k", pa.string(), nullable=False))
        keys = ["k"]
    elif key_kind == "composite":
        fields += [pa.field("k", pa.string(), nullable=False), pa.field("k2", pa.int32(), nullable=False)]
        keys = ["k", "k2"]
    elif key_kind == "date":
        fields.append(pa.field("k", pa.date32(), nullable=False))
        keys = ["k"]
    else:
        fields.append(pa.field("k", pa.timestamp("us", tz="America/New_York"), nullable=False))
        keys = ["k"]
    if partitioned:
        fields.append(pa.field("p", pa.string(), nullable=False))
    fields += [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),
    ]
    return pa.schema(fields), keys


def _key_values(key_kind: str, ids: list[int]) -> dict[str, pa.Array]:
    if key_kind == "int":
        return {"k": pa.array([i * 3 - 40 for i in ids], pa.int64())}
    if key_kind == "string":
        return {"k": pa.array([f"key-{i:03d}" if i % 2 else f"k{i}" for i in ids], pa.string())}
    if key_kind == "composite":
        return {
            "k": pa.array([f"g{i % 4}" for i in ids], pa.string()),
            "k2": pa.array([i // 4 for i in ids], pa.int32()),
        }
    if key_kind == "date":
        return {"k": pa.array([dt.date(1969, 12, 1) + dt.timedelta(days=i * 5) for i in ids], pa.date32())}
    base = dt.datetime(2020, 3, 8, 5, tzinfo=dt.UTC)
    return {
        "k": pa.array(
            [base + dt.timedelta(minutes=17 * i) for i in ids], pa.timestamp("us", tz="America/New_York")
        )
    }


def _partition(i: int) -> str:
    return "ab"[i % 2]


IDS = st.integers(0, 45)
STEP = st.one_of(
    st.tuples(st.just("upsert"), st.lists(IDS, min_size=1, max_size=25, unique=True), st.integers(0, 9)),
    st.tuples(st.just("partial"), st.lists(IDS, min_size=1, max_size=15, unique=True), st.integers(0, 9)),
    st.tuples(
        st.just("cdc"), st.lists(st.tuples(IDS, st.booleans()), min_size=1, max_size=15), st.integers(0, 9)
    ),
    st.tuples(st.just("delete_keys_filter"), st.lists(IDS, min_size=1, max_size=8, unique=True), st.just(0)),
    st.tuples(st.just("delete_value_filter"), st.just([]), st.integers(-3, 9)),
    st.tuples(
        st.just("delete_blind"),
        st.lists(st.integers(30, 60), min_size=1, max_size=8, unique=True),
        st.just(0),
    ),
    st.tuples(st.just("update"), st.lists(IDS, min_size=1, max_size=8, unique=True), st.integers(0, 9)),
    st.tuples(
        st.just("merge"), st.lists(st.tuples(IDS, st.booleans()), min_size=1, max_size=12), st.integers(0, 9)
    ),
    st.tuples(st.just("compact"), st.just([]), st.booleans()),
    st.tuples(st.just("evolve"), st.just([]), st.integers(0, 2)),
)


class _Model:
    """Live keys (as id -> value of ``v``) of a table without ``sequence_by``."""

    def __init__(self) -> None:
        self.rows: dict[int, int | None] = {}

    def count(self) -> int:
        return len(self.rows)


def _rows(
    schema: pa.Schema, key_kind: str, partitioned: bool, ids: list[int], v: int, cols: list[str] | None = None
) -> pa.Table:
    data: dict[str, pa.Array] = _key_values(key_kind, ids)
    if partitioned:
        data["p"] = pa.array([_partition(i) for i in ids], pa.string())
    data["seq"] = pa.array([v * 100 + i for i in ids], pa.int64())
    data["v"] = pa.array([v + i for i in ids], pa.int64())
    data["s"] = pa.array([f"s{(v + i) % 3}" for i in ids], pa.string())
    names = [f.name for f in schema if f.name in data and (cols is None or f.name in cols)]
    return pa.table({n: data[n] for n in names}).cast(pa.schema([schema.field(n) for n in names]))


def _key_filter(key_kind: str, ids: list[int]) -> str:
    keys = _key_values(key_kind, ids)
    if key_kind == "int":
        return "k in (" + ", ".join(str(x) for x in keys["k"].to_pylist()) + ")"
    if key_kind in ("string",):
        return "k in (" + ", ".join(f"'{x}'" for x in keys["k"].to_pylist()) + ")"
    if key_kind == "composite":
        pairs = zip(keys["k"].to_pylist(), keys["k2"].to_pylist())
        return " or ".join(f"(k = '{a}' and k2 = {b})" for a, b in pairs)
    if key_kind == "date":
        return " or ".join(f"k = DATE '{x.isoformat()}'" for x in keys["k"].to_pylist())
    return " or ".join(f"k = TIMESTAMP '{x.astimezone(dt.UTC).isoformat()}'" for x in keys["k"].to_pylist())


def _create(
    root: str, key_kind: str, partitioned: bool, scope: str, engine: str, rg: int, auto: bool
) -> mere.Table:
    schema, keys = _schema(key_kind, partitioned)
    options: dict[str, Any] = {}
    if engine == "first_row":
        options["merge_operators"] = "first_row"
    elif engine == "partial":
        options["merge_operators"] = {"v": "last_non_null", "s": "last_non_null"}
    elif engine == "sequence":
        options["sequence_by"] = "seq"
    if partitioned:
        options["partition_by"] = "p"
        options["key_scope"] = scope
    return mere.connect(root).create_table(
        f"c.t{uuid.uuid4().hex[:10]}",
        schema,
        primary_key=keys,
        buckets=2 if rg % 2 else 1,
        cdc_column="op",
        properties={
            "write.row-group-rows": str(rg),
            "compaction.auto": "inline" if auto else "off",
            "retention.max-age": "off",
        },
        **options,
    )


def _apply(t: mere.Table, model: _Model, key_kind: str, partitioned: bool, engine: str, step: Any) -> None:
    kind, arg, n = step
    schema = t.schema
    first_row = engine == "first_row"
    if kind == "upsert":
        t.upsert(_rows(schema, key_kind, partitioned, arg, n))
        for i in arg:
            if not (first_row and i in model.rows):
                model.rows[i] = n + i
    elif kind == "partial":
        cols = [
            *(["k", "k2"] if key_kind == "composite" else ["k"]),
            *(["p"] if partitioned else []),
            "seq",
            "v",
        ]
        try:
            t.upsert(_rows(schema, key_kind, partitioned, arg, n, cols))
        except InvalidInput:
            return  # a partial row the engine refuses: nothing committed
        for i in arg:
            if not (first_row and i in model.rows):
                model.rows[i] = n + i
    elif kind == "cdc":
        dedup = dict(arg)  # the newest operation of a key in the batch
        ids = list(dedup)
        data = _rows(schema, key_kind, partitioned, ids, n)
        data = data.append_column("op", pa.array(["D" if dedup[i] else "U" for i in ids]))
        t.upsert(data)
        for i in ids:
            if dedup[i]:
                model.rows.pop(i, None)
            elif not (first_row and i in model.rows):
                model.rows[i] = n + i
    elif kind == "delete_keys_filter":
        t.delete(_key_filter(key_kind, arg))
        for i in arg:
            model.rows.pop(i, None)
    elif kind == "delete_value_filter":
        t.delete(f"v < {n + 10}")
        got = t.to_arrow()  # (which rows a value filter deleted: the model holds no values under engines)
        del got
        model.rows = {i: v for i, v in model.rows.items() if v is None or v >= n + 10}
    elif kind == "delete_blind":
        keys = _key_values(key_kind, arg)
        if partitioned:
            keys["p"] = pa.array([_partition(i) for i in arg], pa.string())
        if engine == "sequence":
            keys["seq"] = pa.array([10**6] * len(arg), pa.int64())
        t.delete(pa.table(keys))
        for i in arg:
            model.rows.pop(i, None)
    elif kind == "update":
        t.update({"v": f"{n}"}, _key_filter(key_kind, arg))
        for i in arg:
            if i in model.rows:
                model.rows[i] = n
    elif kind == "merge":
        dedup = dict(arg)
        ids = list(dedup)
        src = _rows(schema, key_kind, partitioned, ids, n).append_column(
            "d", pa.array([dedup[i] for i in ids])
        )
        on = " and ".join(f"t.{c} = s.{c}" for c in t.primary_key)
        cols = [c for c in src.column_names if c != "d"]
        (
            t.merge(src, on=on)
            .when_matched_delete(condition="s.d")
            .when_matched_update(set={"v": "s.v", "seq": "s.seq"}, condition="not s.d")
            .when_not_matched_insert(values={c: f"s.{c}" for c in cols}, condition="not s.d")
            .execute()
        )
        for i in ids:
            if dedup[i]:
                model.rows.pop(i, None)
            else:
                model.rows[i] = n + i
    elif kind == "compact":
        t.compact(tiered=bool(n))
    elif kind == "evolve":
        if n == 0 and "w" not in t.schema.names:
            t.add_column("w", pa.int32(), default=7)
        elif n == 1 and "s" in t.schema.names:
            t.rename_column("s", "s_renamed")
        elif n == 2 and "w" in t.schema.names:
            t.drop_column("w")


def _counts(t: mere.Table, version: int, threads: int, filters: list[str | None]) -> None:
    for f in filters:
        scan = t.scan(filter=f, version=version, threads=threads)
        expected = scan.to_arrow().num_rows
        assert scan.count() == expected, (version, f, threads)
        assert t.scan(filter=f, version=version, threads=threads, window_bytes=1).count() == expected


SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(
    key_kind=st.sampled_from(KEY_KINDS),
    partitioned=st.booleans(),
    scope=st.sampled_from(["partition", "table"]),
    engine=st.sampled_from(ENGINES),
    rg=st.integers(1, 7),
    auto=st.booleans(),
    steps=st.lists(STEP, min_size=1, max_size=9),
    window=st.integers(1, 600),
    threads=st.integers(1, 4),
)
def test_count_equals_the_merged_rows_and_a_model(
    tmp_path_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    key_kind: str,
    partitioned: bool,
    scope: str,
    engine: str,
    rg: int,
    auto: bool,
    steps: list[Any],
    window: int,
    threads: int,
) -> None:
    monkeypatch.setattr(scan_module, "COUNT_WINDOW_BYTES", window)
    if engine in ("first_row", "partial"):
        scope = "partition"  # (merge operators refuse table-wide keys over partitions)
    t = _create(str(tmp_path_factory.mktemp("c")), key_kind, partitioned, scope, engine, rg, auto)
    # Keys of a table with partition-scoped keys are (partition, key): ids map to one partition each, so the
    # model's ids stay keys under both scopes.
    model = _Model()
    expected_by_version: dict[int, int] = {}
    for step in steps:
        # A step the engine refuses (first_row deletes, partial rows, ...) commits nothing.
        with contextlib.suppress(InvalidInput):
            _apply(t, model, key_kind, partitioned, engine, step)
        t = t.refresh()
        if engine != "sequence":
            expected_by_version[t.version] = model.count()
    latest = t.scan()
    merged = latest.to_arrow().num_rows
    if engine != "sequence":
        assert merged == model.count()
    assert latest.count() == merged
    filters: list[str | None] = [
        None,
        _key_filter(key_kind, [1, 2, 3, 40]),
        "v > 4",
        "v is null or v < 3",
        _key_filter(key_kind, [5])
        .replace("k =", "k >")
        .replace("k in (", "k >= coalesce(")
        .replace(" or ", " and "),
    ]
    if key_kind == "composite":
        filters.append("k2 > 3")  # the second key column alone
    if partitioned:
        filters += ["p = 'a'", f"p = 'b' and ({_key_filter(key_kind, [7, 9, 11])})"]
    versions = [h.version for h in t.history()]
    for v in versions[-4:]:
        _counts(t, v, threads, filters)
        if v in expected_by_version:
            assert t.scan(version=v, threads=threads).count() == expected_by_version[v]


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("key_kind", KEY_KINDS)
def test_tiny_count_windows_through_many_row_groups(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, threads: int, key_kind: str
) -> None:
    """Many row groups of 3 rows, keys shared across files, deletes of some: every window size agrees."""
    t = _create(str(tmp_path), key_kind, False, "table", "last", 3, False)
    schema = t.schema
    model: dict[int, bool] = {}
    for round_ in range(4):
        ids = list(range(round_ * 7, round_ * 7 + 60, 2 + round_ % 2))
        t.upsert(_rows(schema, key_kind, False, ids, round_))
        model.update(dict.fromkeys(ids, True))
        gone = ids[round_::5]
        t.delete(_key_filter(key_kind, gone))
        for i in gone:
            model.pop(i, None)
    t.upsert(_rows(schema, key_kind, False, list(range(0, 90, 9)), 9))  # re-insert after delete
    model.update(dict.fromkeys(range(0, 90, 9), True))
    t = t.refresh()
    assert t.to_arrow().num_rows == len(model)
    for window in (1, 2, 7, 40, 333, 600):
        monkeypatch.setattr(scan_module, "COUNT_WINDOW_BYTES", window)
        assert t.scan(threads=threads).count() == len(model), window
        assert t.scan(threads=threads, filter="v > 3").count() == t.scan(filter="v > 3").to_arrow().num_rows


def test_count_reads_op_columns_only_where_deletes_may_be(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slim route ran (some files counted without their operation column) and still counts delete markers
    in CDC batches, MERGE deletes and blind deletes, whatever the window."""
    t = _create(str(tmp_path), "int", False, "table", "last", 4, False)
    schema = t.schema
    t.upsert(_rows(schema, "int", False, list(range(40)), 0))
    cdc = _rows(schema, "int", False, list(range(10, 20)), 1).append_column("op", pa.array(["D", "U"] * 5))
    t.upsert(cdc)
    t.delete(pa.table(_key_values("int", [44, 45, 1])))
    t.upsert(_rows(schema, "int", False, [45, 10], 2))
    expected = 40 - 5 - 1 + 2
    assert t.to_arrow().num_rows == expected
    slim: list[bool] = []
    real = reader.may_hold_deletes

    def spy(storage: Any, task: Any) -> bool:
        got = real(storage, task)
        slim.append(not got)
        return got

    monkeypatch.setattr(reader, "may_hold_deletes", spy)
    for window in (1, 50, 2 << 20):
        monkeypatch.setattr(scan_module, "COUNT_WINDOW_BYTES", window)
        for threads in (1, 2):
            assert t.scan(threads=threads).count() == expected
    assert any(slim) and not all(slim)


def _busy_readers() -> list[str]:
    return [th.name for th in threading.enumerate() if th.name.startswith(("mere-merge", "mere-count"))]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    threads=st.integers(1, 4),
    window=st.sampled_from([1, 64, 500, 4096]),
    queue=st.sampled_from([None, 1, 3]),
    key_kind=st.sampled_from(KEY_KINDS),
    seed=st.integers(0, 5),
)
def test_to_arrow_equals_batches_and_reader(
    tmp_path_factory: Any, threads: int, window: int, queue: int | None, key_kind: str, seed: int
) -> None:
    t = _create(str(tmp_path_factory.mktemp("b")), key_kind, seed % 2 == 0, "table", "last", 2 + seed, False)
    schema = t.schema
    for r in range(4):
        ids = list(range(r, 45, 1 + (seed + r) % 3))
        t.upsert(_rows(schema, key_kind, seed % 2 == 0, ids, r))
        t.delete(_key_filter(key_kind, ids[::4]))
    t = t.refresh()
    by = [(c, "ascending") for c in t.primary_key]
    one = t.scan(threads=1).to_arrow().sort_by(by)
    scan = t.scan(threads=threads, window_bytes=window, queue_batches=queue)
    whole = scan.to_arrow()
    assert whole.schema == t.schema
    assert whole.sort_by(by).equals(one)
    batches = pa.Table.from_batches(list(scan.to_batches()), schema=t.schema)
    assert batches.sort_by(by).equals(one)
    assert scan.to_reader().read_all().sort_by(by).equals(one)
    assert scan.count() == one.num_rows


def test_an_abandoned_batch_iterator_leaves_no_thread_busy(tmp_path: Any) -> None:
    t = _create(str(tmp_path), "int", False, "table", "last", 2, False)
    for r in range(5):
        t.upsert(_rows(t.schema, "int", False, list(range(r, 46, 1 + r % 2)), r))
    before = set(_busy_readers())
    for threads in (1, 2, 4):
        it = t.scan(threads=threads, window_bytes=1).to_batches()
        next(it)
        it.close()  # a consumer that stops early
        del it
    gc.collect()
    deadline = time.monotonic() + 10
    while set(_busy_readers()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(_busy_readers()) - before
    assert t.scan(threads=4, window_bytes=1).to_arrow().num_rows == t.scan(threads=1).count()


@pytest.mark.parametrize("route", ["to_arrow", "to_batches", "count"])
@pytest.mark.parametrize("threads", [1, 4])
def test_a_data_file_deleted_under_the_scan_surfaces_as_a_storage_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, route: str, threads: int
) -> None:
    monkeypatch.setattr(scan_module, "COUNT_WINDOW_BYTES", 16)
    t = _create(str(tmp_path), "int", False, "table", "last", 2, False)
    for r in range(4):
        t.upsert(_rows(t.schema, "int", False, list(range(r, 46, 2)), r))
        t.delete(_key_filter("int", [r, r + 10]))
    t = t.refresh()
    scan = t.scan(threads=threads, window_bytes=8)
    files = t.files()
    victim = files.column("path").to_pylist()[len(files) // 2]
    os.remove(t.storage.full_path(victim))
    started = time.monotonic()
    with pytest.raises((StorageError, NoSuchVersion)):
        if route == "to_arrow":
            scan.to_arrow()
        elif route == "to_batches":
            for _ in scan.to_batches():
                pass
        else:
            scan.count()
    assert time.monotonic() - started < 60


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    toggles=st.lists(
        st.sampled_from(["on", "off", "write", "delete", "blind", "compact"]), min_size=1, max_size=8
    ),
    window=st.integers(1, 300),
    threads=st.integers(1, 3),
    seed=st.integers(0, 9),
)
def test_count_across_sequence_by_switched_on_and_off(
    tmp_path_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    toggles: list[str],
    window: int,
    threads: int,
    seed: int,
) -> None:
    """Versions before, under and after ``sequence_by`` (time travel reads each with its own spec): count()
    equals the merged rows at every version, whether it counts keys or merges."""
    monkeypatch.setattr(scan_module, "COUNT_WINDOW_BYTES", window)
    t = _create(str(tmp_path_factory.mktemp("q")), "int", False, "table", "sequence", 2, False)
    schema = t.schema
    for r, step in enumerate(toggles):
        ids = [(seed * 7 + r * 5 + j * 3) % 40 for j in range(12)]
        ids = list(dict.fromkeys(ids))
        with contextlib.suppress(InvalidInput):
            if step == "on":
                t.set_sequence_by("seq")
            elif step == "off":
                t.set_sequence_by(None)
            elif step == "write":
                data = _rows(schema, "int", False, ids, (seed + r) % 4)  # sequences that go up and down
                t.upsert(data)
            elif step == "delete":
                t.delete(_key_filter("int", ids[:4]))
            elif step == "blind":
                keys = _key_values("int", ids[4:8])
                if t.sequence_by:
                    keys["seq"] = pa.array([150] * 4, pa.int64())
                t.delete(pa.table(keys))
            else:
                t.compact()
        t = t.refresh()
    for h in t.history():
        scan = t.scan(version=h.version, threads=threads)
        assert scan.count() == scan.to_arrow().num_rows, h.version
