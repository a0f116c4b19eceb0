"""Adversarial: ``Scan.count()``, ``Scan.min()`` and ``Scan.max()`` (answered from catalog row counts and
footer statistics where every split is clean, else by reading) against DuckDB over ``scan.to_arrow()``,
and ``explain()``'s "answered from metadata" claim.

Random histories of keyed (table-wide keys moving between partitions) and keyless tables over many
column kinds (int8..int64, uint64 at its extremes, dates, zoned millisecond and naive nanosecond
timestamps, floats with NaN/-0.0/inf, decimals, strings, booleans): upserts, appends, deletes by key and
by value, partition overwrites, truncates, compactions, and schema evolution (an added column with a
default, widenings, renames, a column dropped and added again under its name with another type), read at
the newest and at older versions, with and without filters. Plus sequence-group tables, whose stored rows
are not their merged rows even with one version per key."""

from __future__ import annotations

import math
import random
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere

METADATA = "answered from metadata"
OFF = {"compaction.auto": "off"}

BASE_FIELDS = [
    pa.field("i", pa.int32()),
    pa.field("u", pa.uint64()),
    pa.field("d", pa.date32()),
    pa.field("tz", pa.timestamp("ms", tz="America/Sao_Paulo")),
    pa.field("tn", pa.timestamp("ns")),
    pa.field("f", pa.float64()),
    pa.field("s", pa.string()),
    pa.field("dec", pa.decimal128(9, 2)),
    pa.field("b", pa.bool_()),
    pa.field("t8", pa.int8()),
]
WIDER = {
    pa.int8(): pa.int16(),
    pa.int16(): pa.int32(),
    pa.int32(): pa.int64(),
    pa.decimal128(9, 2): pa.decimal128(12, 2),
    pa.decimal128(12, 2): pa.decimal128(18, 2),
}
READD_KINDS = [pa.int64(), pa.date32(), pa.string(), pa.timestamp("us", tz="UTC"), pa.int16()]


def _values(rng: random.Random, kind: pa.DataType, n: int) -> pa.Array:
    """``n`` values of ``kind``, a fifth NULL, extremes and odd floats included."""

    def pick(gen: Any) -> list[Any]:
        return [None if rng.random() < 0.2 else gen() for _ in range(n)]

    if pa.types.is_unsigned_integer(kind):
        hi = 2 ** (kind.bit_width) - 1
        return pa.array(
            pick(lambda: rng.choice([0, 1, hi, hi - 1, 2 ** (kind.bit_width - 1), rng.randint(0, hi)])), kind
        )
    if pa.types.is_integer(kind):
        lo, hi = -(2 ** (kind.bit_width - 1)), 2 ** (kind.bit_width - 1) - 1
        return pa.array(
            pick(lambda: rng.choice([lo, hi, 0, -1, rng.randint(lo, hi), rng.randint(-50, 50)])), kind
        )
    if pa.types.is_date(kind):
        return pa.array(pick(lambda: rng.randint(-30000, 60000)), pa.int32()).cast(kind)
    if pa.types.is_timestamp(kind):
        scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[kind.unit]
        vals = pick(lambda: rng.randint(-(3 * 10**9), 3 * 10**9) * scale + rng.randint(0, scale - 1))
        return pa.array(vals, pa.int64()).cast(kind)
    if pa.types.is_floating(kind):
        odd = [math.nan, -0.0, 0.0, math.inf, -math.inf, 1e308, -5e-324]
        return pa.array(pick(lambda: rng.choice(odd) if rng.random() < 0.4 else rng.uniform(-1e6, 1e6)), kind)
    if pa.types.is_decimal(kind):
        digits = kind.precision - kind.scale
        return pa.array(
            pick(lambda: Decimal(rng.randint(-(10 ** (digits + 2)) + 1, 10 ** (digits + 2) - 1)).scaleb(-2)),
            kind,
        )
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.array(
            pick(lambda: rng.choice(["", "a", "ab", "B", "é", "\U0001f600", "z" * 40, "a\x00"])), kind
        )
    if pa.types.is_boolean(kind):
        return pa.array(pick(lambda: rng.random() < 0.5), kind)
    raise AssertionError(kind)


def _rows(t: Any, rng: random.Random, ids: list[int], keyed: bool) -> pa.Table:
    n = len(ids)
    cols: dict[str, pa.Array] = {}
    for field in t.schema:
        if field.name == "id":
            cols["id"] = pa.array(ids, pa.int64())
        elif field.name == "p":
            cols["p"] = pa.array([rng.choice(["a", "b"]) for _ in ids], pa.string())
        else:
            cols[field.name] = _values(rng, field.type, n)
    return pa.table(cols, schema=t.schema)


def _oracle(table: pa.Table, column: str) -> tuple[pa.Scalar, pa.Scalar]:
    con = duckdb.connect()
    try:
        con.register("rel", table.select([column]))
        out = con.sql(f'SELECT min("{column}") AS lo, max("{column}") AS hi FROM rel').to_arrow_table()
    finally:
        con.close()
    return out.column("lo")[0], out.column("hi")[0]


def _same(got: Any, want: pa.Scalar, kind: pa.DataType) -> bool:
    if not want.is_valid:
        return got is None
    if got is None:
        return False
    if pa.types.is_floating(kind):
        w = want.as_py()
        return (math.isnan(got) and math.isnan(w)) or got == w
    g = pa.scalar(got, type=kind)
    w = want.cast(kind)
    if pa.types.is_timestamp(kind):
        return g.cast(pa.int64()).as_py() == w.cast(pa.int64()).as_py()
    return g.as_py() == w.as_py()


def _check(scan: Any, filtered: bool, what: str) -> None:
    merged = scan.to_arrow()
    notes = " ".join(scan.explain().notes)
    if filtered:
        assert METADATA not in notes, f"{what}: a filtered scan claims metadata answers"
    assert scan.count() == merged.num_rows, f"{what}: count"
    for field in scan.schema:
        lo, hi = _oracle(merged, field.name)
        got_lo, got_hi = scan.min(field.name), scan.max(field.name)
        claim = f" (explain: {'metadata' if METADATA in notes else 'read'})"
        assert _same(got_lo, lo, field.type), f"{what}: min({field.name}) {got_lo!r} != {lo}{claim}"
        assert _same(got_hi, hi, field.type), f"{what}: max({field.name}) {got_hi!r} != {hi}{claim}"


STEP = st.sampled_from(
    ["write", "write", "write", "delete_keys", "delete_value", "compact", "compact", "add", "widen",
     "rename", "readd", "overwrite", "truncate"]
)  # fmt: skip


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    keyed=st.booleans(),
    buckets=st.sampled_from([1, 2]),
    steps=st.lists(STEP, min_size=2, max_size=9),
    seed=st.integers(0, 2**32 - 1),
    zone=st.sampled_from(["UTC", "America/Sao_Paulo"]),
)
def test_count_min_max_equal_duckdb_over_merged_rows(
    tmp_path_factory: pytest.TempPathFactory,
    keyed: bool,
    buckets: int,
    steps: list[str],
    seed: int,
    zone: str,
) -> None:
    rng = random.Random(seed)
    zoned = pa.field("tz", pa.timestamp("ms", tz=zone))
    base = [zoned if f.name == "tz" else f for f in BASE_FIELDS]
    fields = [pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False), *base]
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    if keyed:
        t = cat.create_table(
            "m.t", pa.schema(fields), primary_key="id", partition_by="p", buckets=buckets, properties=OFF
        )
    else:
        t = cat.create_table("m.t", pa.schema(fields), partition_by="p")
    versions: list[int] = []
    added = 0
    for step in ["write", *steps]:
        t.refresh()
        values = [f.name for f in t.schema if f.name not in ("id", "p")]
        if step == "write":
            ids = rng.sample(range(16), rng.randint(1, 8))
            data = _rows(t, rng, ids, keyed)
            t.upsert(data) if keyed else t.append(data)
        elif step == "delete_keys":
            t.delete(f"id IN ({', '.join(str(k) for k in rng.sample(range(16), 4))})")
        elif step == "delete_value":
            ints = [f.name for f in t.schema if pa.types.is_signed_integer(f.type) and f.name != "id"]
            if ints:
                t.delete(f'"{rng.choice(ints)}" < {rng.randint(-20, 20)} OR id = {rng.randint(0, 15)}')
        elif step == "compact":
            if keyed:
                t.compact()
        elif step == "add":
            added += 1
            kind = rng.choice([pa.int64(), pa.date32(), pa.timestamp("ms")])
            default = _values(random.Random(rng.random()), kind, 1)[0].as_py() if rng.random() < 0.7 else None
            t.add_column(f"n{added}", kind, default=default)
        elif step == "widen":
            wide = [(f.name, WIDER[f.type]) for f in t.schema if f.type in WIDER]
            if wide:
                t.widen(*rng.choice(wide))
        elif step == "rename" and values:
            old = rng.choice(values)
            t.rename_column(old, f"{old}_r" if not old.endswith("_r") else old[:-2])
        elif step == "readd" and values:
            old = rng.choice(values)
            kind = t.schema.field(old).type
            t.drop_column(old)
            new_kind = rng.choice([k for k in READD_KINDS if k != kind])
            default = (
                _values(random.Random(rng.random()), new_kind, 1)[0].as_py() if rng.random() < 0.5 else None
            )
            t.add_column(old, new_kind, default=default)
        elif step == "overwrite":
            part = rng.choice(["a", "b"])
            data = _rows(t, rng, rng.sample(range(16), rng.randint(0, 4)), keyed)
            data = data.set_column(1, "p", pa.array([part] * data.num_rows, pa.string()))
            t.overwrite(data, partition={"p": part})
        elif step == "truncate":
            t.truncate()
        versions.append(t.version)
    t.refresh()
    if rng.random() < 0.35:  # every file rewritten under the current columns (an evolved table too)
        current = t.to_arrow()
        t.overwrite(current)
        assert sorted(map(repr, t.to_arrow().to_pylist())) == sorted(map(repr, current.to_pylist()))
        versions.append(t.version)
    elif keyed and rng.random() < 0.6:  # evolved, deleted, moved: compacted, every split is clean again
        t.compact()
        versions.append(t.version)
    ints = [f.name for f in t.schema if pa.types.is_integer(f.type) and f.name != "id"]
    col = ints[0] if ints else "id"
    for v in sorted({versions[-1], rng.choice(versions), versions[0]}):
        _check(t.scan(version=v), False, f"v{v}")
    for text in [
        "id < 8",
        "p = 'a'",
        f'"{col}" IS NULL',
        f'"{col}" > 0 OR "{col}" IS NULL',
        f'NOT ("{col}" > 0)',
    ]:
        _check(t.scan(filter=text), True, f"filter {text}")


def _group_table(tmp_path: Any) -> Any:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("price", pa.int64()),
            pa.field("price_lsn", pa.int64()),
            pa.field("name", pa.string()),
            pa.field("lsn", pa.int64(), nullable=False),
        ]
    )
    return mere.connect(str(tmp_path)).create_table(
        "g.t",
        schema,
        primary_key="id",
        sequence_by="lsn",
        sequence_groups={"price_lsn": ["price"]},
        properties=OFF,
    )


def test_a_sequence_group_row_carrying_its_group_is_answered_exactly(tmp_path: Any) -> None:
    g = _group_table(tmp_path)
    g.upsert(
        pa.table({"id": [1, 2], "price": [-100, 7], "price_lsn": [30, 3], "name": ["a", "b"], "lsn": [20, 4]})
    )
    scan = g.scan()
    assert scan.to_arrow().sort_by("id").column("price").to_pylist() == [-100, 7]
    assert (scan.count(), scan.min("price"), scan.max("price"), scan.max("price_lsn")) == (2, -100, 7, 30)


@pytest.mark.parametrize("compacted", [False, True])
def test_a_group_value_not_carried_is_no_extreme(tmp_path: Any, compacted: bool) -> None:
    g = _group_table(tmp_path)
    # id 1 carries no price group (its group sequence is NULL): its merged price is NULL.
    g.upsert(
        pa.table(
            {"id": [1, 2], "price": [-100, 7], "price_lsn": [None, 3], "name": ["a", "b"], "lsn": [20, 4]}
        )
    )
    g.upsert(pa.table({"id": [3], "price": [1], "price_lsn": [1], "name": ["c"], "lsn": [1]}))
    if compacted:
        g.compact()
    scan = g.scan()
    merged = scan.to_arrow()
    assert merged.sort_by("id").column("price").to_pylist() == [None, 7, 1]
    lo, hi = _oracle(merged, "price")
    assert (lo.as_py(), hi.as_py()) == (1, 7)
    # The stored -100 is no merged value: min/max are read, not taken from footer statistics.
    assert METADATA not in " ".join(scan.explain().notes)
    assert (scan.min("price"), scan.max("price")) == (1, 7)


def test_a_group_sequence_of_a_group_not_carried_is_no_extreme(tmp_path: Any) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("q", pa.int64()),
            pa.field("q_lsn", pa.int64()),
            pa.field("lsn", pa.int64(), nullable=False),
        ]
    )
    g = mere.connect(str(tmp_path)).create_table(
        "g.q",
        schema,
        primary_key="id",
        sequence_by="lsn",
        sequence_groups={"q_lsn": ["q"]},
        merge_operators={"q": "last_non_null"},
        properties=OFF,
    )
    g.upsert(pa.table({"id": [1, 2], "q": [None, 7], "q_lsn": [50, 3], "lsn": [20, 4]}))
    merged = g.scan().to_arrow()
    assert merged.sort_by("id").column("q_lsn").to_pylist() == [None, 3]
    assert _oracle(merged, "q_lsn")[1].as_py() == 3
    assert g.scan().max("q_lsn") == 3  # not 50, the stored value of a group id 1 does not carry
    projected = g.scan(columns=["q_lsn"]).to_arrow().column("q_lsn").to_pylist()  # q is read to merge it
    assert sorted(projected, key=lambda v: (v is None, v)) == [3, None]


def test_table_wide_keys_late_in_another_partition_and_stale_overwrites(tmp_path: Any) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("p", pa.string(), nullable=False),
            pa.field("v", pa.int64()),
            pa.field("lsn", pa.int64(), nullable=False),
        ]
    )
    t = mere.connect(str(tmp_path)).create_table(
        "w.t", schema, primary_key="id", partition_by="p", sequence_by="lsn", properties=OFF
    )
    t.upsert(pa.table({"id": [1, 2], "p": ["A", "A"], "v": [10, 20], "lsn": [10, 10]}))
    assert t.upsert(pa.table({"id": [1], "p": ["B"], "v": [999], "lsn": [5]})).stale_rows == 1
    t.overwrite(pa.table({"id": [2], "p": ["C"], "v": [-5], "lsn": [1]}), partition={"p": "C"})
    for filt in (None, "p = 'B'", "p = 'C'", "v > 15"):
        scan = t.scan(filter=filt)
        _check(scan, filt is not None, f"filter {filt}")
    scan = t.scan()
    assert (scan.count(), scan.min("v"), scan.max("v")) == (2, 10, 20)
    t.compact()
    _check(t.scan(), False, "compacted")


@pytest.mark.parametrize("buckets", [1, 3])
def test_evolved_then_compacted_tables_answer_from_metadata_exactly(tmp_path: Any, buckets: int) -> None:
    rng = random.Random(buckets)
    # (A zone other than UTC, seconds and date64 are stored otherwise in Parquet: an evolved table
    # holding one is never clean, which is exact, only slower.)
    utc = pa.field("tz", pa.timestamp("ms", tz="UTC"))
    fields = [
        pa.field("id", pa.int64(), nullable=False),
        *(utc if f.name == "tz" else f for f in BASE_FIELDS),
    ]
    t = mere.connect(str(tmp_path)).create_table(
        "e.t", pa.schema(fields), primary_key="id", buckets=buckets, properties=OFF
    )
    t.upsert(_rows(t, rng, list(range(0, 40, 2)), True))
    before = t.version
    with t.evolve() as e:
        e.add_column("n", pa.int64(), default=-7)  # old rows read -7, below every value written later
        e.add_column("z", pa.date32())  # old rows read NULL
        e.widen("i", pa.int64())
        e.widen("dec", pa.decimal128(12, 2))
        e.rename_column("u", "u2")
        e.drop_column("t8")
    t.add_column(
        "t8", pa.timestamp("us", tz="UTC")
    )  # the old name, another type: the old int8 values never show
    t.refresh()
    scan = t.scan()
    assert METADATA not in " ".join(scan.explain().notes)  # old files hold other names and types
    _check(scan, False, "evolved")
    rows = _rows(t, rng, list(range(1, 40, 2)), True)
    rows = rows.set_column(rows.schema.get_field_index("n"), "n", pa.array(range(20), pa.int64()))
    t.upsert(rows)
    last = _rows(t, rng, [0, 1, 2], True)
    t.upsert(last.set_column(last.schema.get_field_index("n"), "n", pa.array([100, None, 102], pa.int64())))
    _check(t.scan(), False, "evolved, written")
    t.compact()
    scan = t.scan()
    assert len(scan.plan()) == buckets and all(len(s.files) == 1 for s in scan.plan())
    assert METADATA in " ".join(scan.explain().notes)
    _check(scan, False, "evolved, compacted")
    merged = scan.to_arrow()
    assert scan.min("n") == -7 and scan.min("n") == pc_min(merged, "n")
    _check(t.scan(version=before), False, "before the evolution")
    assert t.scan(version=before).schema.field("t8").type == pa.int8()


def pc_min(table: pa.Table, column: str) -> Any:
    return _oracle(table, column)[0].as_py()
