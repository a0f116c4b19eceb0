"""Adversarial: the adaptive value layout (``value_layout``) and required-where-no-NULL files written from
awkward inputs (sliced and many-chunked columns, empty chunks, extremes that overflow 64-bit deltas,
dates before 1970, zoned timestamps, decimals, odd names) read back exactly, by mere, by pyarrow and by
DuckDB reading the data files directly, and DuckDB's registered view equals mere's read."""

from __future__ import annotations

import datetime as dt
import io
import itertools
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.integrations import duckdb as mere_duckdb
from mere.io import parquet as P


def _pieces(values: pa.Array, cuts: list[int], pad: int) -> pa.ChunkedArray:
    """``values`` as chunks cut at ``cuts``, each a slice of a longer array (a non-zero offset), with
    empty chunks between them."""
    bounds = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    chunks = []
    for a, b in itertools.pairwise(bounds):
        part = values.slice(a, b - a)
        padded = pa.concat_arrays([pa.nulls(pad, values.type), part, pa.nulls(pad, values.type)])
        chunks.append(padded.slice(pad, b - a))
        chunks.append(values.slice(0, 0))
    return pa.chunked_array(chunks, type=values.type)


def _column(kind: str, n: int, rng: np.random.Generator) -> pa.Array:
    if kind == "int64 extremes":
        return pa.array(rng.choice(np.array([-(2**63), 2**63 - 1, 0, -1, 1], np.int64), n))
    if kind == "uint64 extremes":
        return pa.array(rng.choice(np.array([0, 2**64 - 1, 2**63, 2**63 - 1], np.uint64), n))
    if kind == "ramp":
        return pa.array(np.arange(n, dtype=np.int64) * 7 - 2**62)
    if kind == "int8":
        return pa.array(rng.integers(-128, 128, n).astype(np.int8))
    if kind == "uint32":
        return pa.array(rng.choice(np.array([0, 2**32 - 1, 2**31], np.uint32), n))
    if kind == "date before 1970":
        return pa.array(rng.integers(-800_000, 10, n).astype(np.int32)).view(pa.date32())
    if kind == "zoned ns":
        ts = pa.array(np.sort(rng.integers(-(2**62), 2**62, n))).view(pa.timestamp("ns"))
        return ts.cast(pa.timestamp("ns", tz="Asia/Kolkata"))
    if kind == "float32":
        return pa.array(rng.random(n).astype(np.float32))
    if kind == "string":
        return pa.array(np.char.add("é", rng.integers(0, 10**9, n).astype(str)).tolist())
    if kind == "large_binary":
        return pa.array([bytes(int(x) % 7) for x in rng.integers(0, 100, n)], pa.large_binary())
    if kind == "decimal":
        return pa.array(
            [Decimal(int(x)) / 100 for x in rng.integers(-(10**9), 10**9, n)], pa.decimal128(12, 2)
        )
    if kind == "bool":
        return pa.array(rng.random(n) < 0.5)
    raise AssertionError(kind)


KINDS = [
    "int64 extremes",
    "uint64 extremes",
    "ramp",
    "int8",
    "uint32",
    "date before 1970",
    "zoned ns",
    "float32",
    "string",
    "large_binary",
    "decimal",
    "bool",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4),
    rows=st.sampled_from([1, 2, 129, 4096, 4097, 6000]),
    cuts=st.lists(st.integers(0, 10_000), max_size=4),
    pad=st.integers(0, 3),
    nulls=st.sampled_from(["none", "some", "all"]),
    compression=st.sampled_from(["lz4", "zstd", "snappy", "gzip", "none", "brotli"]),
    seed=st.integers(0, 2**16),
)
def test_sliced_and_chunked_inputs_read_back_as_written(
    kinds: list[str], rows: int, cuts: list[int], pad: int, nulls: str, compression: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    columns = {}
    for i, kind in enumerate(kinds):
        values = _column(kind, rows, rng)
        if nulls == "some":
            values = pa.compute.if_else(pa.array(rng.random(rows) < 0.2), pa.nulls(rows, values.type), values)
        elif nulls == "all" and i == 0:
            values = pa.nulls(rows, values.type)
        columns[f"c.{i} {kind}"] = _pieces(values, cuts, pad)
    table = pa.table(columns)
    written = P.required_where_no_nulls(table)
    sink = io.BytesIO()
    options = P.writer_options(written, row_group_rows=1000, compression=compression)
    with pq.ParquetWriter(sink, written.schema, **options) as w:
        w.write_table(written, row_group_size=1000)
    back = pq.read_table(pa.BufferReader(sink.getvalue()))
    for name in table.column_names:
        assert back.schema.field(name).nullable == (table.column(name).null_count > 0)
    assert back.cast(table.schema).equals(table)


SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("i", pa.int64()),
        ("u", pa.uint64()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("dec", pa.decimal128(10, 2)),
        ("st", pa.struct([("a", pa.int32())])),
        ("l", pa.list_(pa.string())),
    ]
)


def _batch(keys: list[int], nulls: set[str], seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(keys)
    cols: dict[str, Any] = {
        "k": keys,
        "i": rng.choice(np.array([-(2**63), 2**63 - 1, 5], np.int64), n),
        "u": rng.choice(np.array([0, 2**64 - 1], np.uint64), n),
        "d": [dt.date(1901, 1, 1) + dt.timedelta(days=int(x)) for x in rng.integers(0, 40_000, n)],
        "ts": [dt.datetime(1950, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=int(x)) for x in keys],
        "x": rng.random(n),
        "s": ["v" + str(int(x)) for x in rng.integers(0, 3, n)],
        "dec": [Decimal(int(x)) / 100 for x in rng.integers(-(10**7), 10**7, n)],
        "st": [{"a": int(x)} for x in rng.integers(-9, 9, n)],
        "l": [["a"] * int(x) for x in rng.integers(0, 3, n)],
    }
    table = pa.table(cols, schema=SCHEMA)
    for c in nulls:
        mask = pa.array(rng.random(n) < 0.5)
        table = table.set_column(
            table.schema.get_field_index(c),
            c,
            pa.compute.if_else(mask, pa.nulls(n, SCHEMA.field(c).type), table[c]),
        )
    return table


def _duckdb_files(t: mere.Table) -> pa.Table:
    paths = [str(t.storage.full_path(p)) for p in t.files().column("path").to_pylist()]
    names = ", ".join(f'"{c}"' for c in SCHEMA.names)
    listed = ", ".join(f"'{p}'" for p in paths)
    rel = duckdb.sql(f"select {names} from read_parquet([{listed}], union_by_name=true)")
    assert rel is not None
    return rel.to_arrow_table()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.integers(0, 10_000), min_size=1, max_size=300, unique=True),
            st.sets(st.sampled_from(SCHEMA.names[1:])),
            st.integers(0, 1000),
        ),
        min_size=1,
        max_size=4,
    ),
    compression=st.sampled_from(["lz4", "zstd", "none"]),
)
def test_duckdb_reads_the_data_files_of_an_appended_table_as_mere_does(
    tmp_path_factory: Any, batches: Any, compression: str
) -> None:
    t = mere.connect(str(tmp_path_factory.mktemp("a"))).create_table(
        "t", SCHEMA, properties={"write.compression": compression}
    )
    for keys, nulls, seed in batches:
        t.append(_batch(keys, nulls, seed))
    mine = t.to_arrow()
    assert mine.schema == t.schema
    by = [("k", "ascending"), ("i", "ascending"), ("x", "ascending")]
    theirs = _duckdb_files(t).cast(t.schema)
    assert theirs.sort_by(by).equals(mine.sort_by(by))
    con = duckdb.connect()
    mere_duckdb.register(con, "v", t)
    rel = con.sql("select * from v")
    assert rel is not None
    view = rel.to_arrow_table()
    assert view.cast(t.schema).sort_by(by).equals(mine.sort_by(by))
    assert con.execute("select count(*) from v where i > 0").fetchone() == (
        int(pa.compute.sum(pa.compute.greater(mine["i"], 0)).as_py() or 0),
    )


def test_duckdb_reads_a_compacted_keyed_table_as_mere_does(tmp_path: Path) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "t", SCHEMA, primary_key="k", buckets=2, properties={"compaction.auto": "off"}
    )
    t.upsert(_batch(list(range(0, 5000)), set(), 1))
    t.upsert(_batch(list(range(0, 5000, 3)), {"i", "s", "st"}, 2))
    t.upsert(_batch(list(range(1, 6000, 7)), {"u", "l", "dec"}, 3))
    before = t.to_arrow().sort_by("k")
    t.compact()
    after = t.to_arrow().sort_by("k")
    assert after.equals(before)
    assert _duckdb_files(t).cast(t.schema).sort_by("k").equals(after)
