"""The small table every engine test reads: upserts, CDC deletes, a partial upsert, a partition, several
versions, and column types the engines map differently (decimal, timestamp with zone, list, struct, unsigned above 2**63,
NaN and -0.0, nulls)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

import mere

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("qty", pa.int64()),
        pa.field("price", pa.decimal128(12, 2)),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("big", pa.uint64()),
        pa.field("where", pa.struct([("lat", pa.float32()), ("city", pa.string())])),
    ]
)
STORED = SCHEMA  # the change column "op" is not stored
DAYS = [dt.date(2026, 11, 20), dt.date(2026, 11, 21), None]
ROWS = 600


def _rows(ids: range, version: int, op: str | None = None) -> pa.Table:
    n = len(ids)
    base = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    columns: dict[str, pa.Array] = {
        "id": pa.array(list(ids), pa.int64()),
        "day": pa.array([DAYS[i % 3] for i in ids], pa.date32()),
        "qty": pa.array([None if i % 17 == 0 else i * 10 + version for i in ids], pa.int64()),
        "price": pa.array([Decimal(i) / 4 + version for i in ids], pa.decimal128(12, 2)),
        "name": pa.array([None if i % 11 == 0 else f"n{i}-v{version}-{i * 7919 % 1000}" for i in ids]),
        "score": pa.array([float("nan") if i % 13 == 0 else -0.0 if i % 7 == 0 else i / 3 for i in ids]),
        "ts": pa.array([base + dt.timedelta(minutes=i + version) for i in ids], pa.timestamp("us", tz="UTC")),
        "tags": pa.array(
            [[f"t{i % 5}", f"v{version}"] if i % 4 else None for i in ids], pa.list_(pa.string())
        ),
    }
    table = pa.table(columns)
    if op is not None:
        table = table.append_column("op", pa.array([op] * n))
    return table


# As tests/maintenance.py's MANUAL; Ray's workers import this module without tests/ on their path.
MANUAL = {"compaction.auto": "off", "retention.max-age": "off"}


def build(catalog: mere.Catalog, name: str = "eng.orders", buckets: int = 4) -> mere.Table:
    """Create and fill the table: 5 commits ending with ``ROWS`` - 40 live keys over three day partitions."""
    t = catalog.create_table(
        name,
        SCHEMA.append(pa.field("op", pa.string())),
        primary_key="id",
        partition_by="day",
        buckets=buckets,
        cdc_column="op",
        properties=MANUAL,  # the engines' tests name these versions: no compaction commits in between
    )
    t.upsert(_rows(range(ROWS), 1, "I"))  # v1
    t.upsert(_rows(range(0, ROWS, 3), 2, "U"))  # v2: a third of the keys updated
    t.upsert(_rows(range(ROWS - 40, ROWS), 3, "D"))  # v3: CDC deletes of the last 40 keys
    partial = _rows(range(1, ROWS - 40, 5), 4).select(["id", "day", "qty"])
    t.upsert(partial)  # v4: a partial upsert (only qty changes)
    t.upsert(_rows(range(10, 20), 5, "D").select(["id", "day", "op"]))  # v5: more deletes, keys only
    t.upsert(_rows(range(10, 15), 6, "I"))  # v6: five of them come back
    return t


def build_big(catalog: mere.Catalog, rows: int = 300_000) -> mere.Table:
    """A table for pushdown byte counts: 16 buckets, small row groups, a base write and an upsert of 20k keys
    (high-cardinality strings), so a key point read touches one bucket's row groups."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64())])
    t = catalog.create_table(
        "eng.big", schema, primary_key="id", buckets=16, properties={"write.row-group-rows": "2048", **MANUAL}
    )
    ids = pa.array(range(rows), pa.int64())
    names = pa.array([f"name-{i * 7919 % 100_003}" for i in range(rows)])
    t.upsert(pa.table({"id": ids, "name": names, "x": pa.array(range(rows), pa.float64())}))
    t.upsert(
        pa.table({"id": ids.slice(0, 20_000), "name": names.slice(0, 20_000), "x": pa.array([0.5] * 20_000)})
    )
    return t


def assert_same_rows(got: pa.Table, expected: pa.Table) -> None:
    """Equal rows in key order, with NaN equal to NaN and the sign of zero compared (Table.equals says
    NaN != NaN); nullability may differ (engines drop NOT NULL)."""
    import numpy as np

    assert got.column_names == expected.column_names
    got, expected = got.cast(expected.schema).sort_by("id"), expected.sort_by("id")
    assert got.num_rows == expected.num_rows
    for name in expected.column_names:
        a, b = got[name].combine_chunks(), expected[name].combine_chunks()
        if pa.types.is_floating(b.type):
            assert a.is_null().equals(b.is_null()), name
            bits_a = a.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.int64)
            bits_b = b.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.int64)
            assert (bits_a == bits_b).all(), name
        else:
            assert a.equals(b), name
