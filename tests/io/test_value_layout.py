"""How value columns are encoded (``mere.io.parquet.value_layout``): bit-packed deltas for integer-like
columns where they are smaller, no codec where it saves nothing, and every value read back as written,
by pyarrow and by DuckDB."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path
from unittest import mock

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.io import parquet as P
from mere.io.storage import Storage

N = 20_000


def _write(table: pa.Table, sort: tuple[str, ...] = (), **kw: object) -> pq.FileMetaData:
    sink = io.BytesIO()
    options = P.writer_options(table, row_group_rows=8192, sorting_columns=sort, **kw)  # type: ignore[arg-type]
    with pq.ParquetWriter(sink, table.schema, **options) as w:
        w.write_table(table, row_group_size=8192)
    data = sink.getvalue()
    back = pq.read_table(pa.BufferReader(data)).cast(table.schema)
    assert _bits(back).equals(_bits(table))
    return pq.ParquetFile(pa.BufferReader(data)).metadata


def _bits(table: pa.Table) -> pa.Table:
    """Floats as their bits (NaN equals NaN), everything else as it is."""
    for i, f in enumerate(table.schema):
        if pa.types.is_floating(f.type):
            as_int = pa.int32() if f.type.bit_width == 32 else pa.int64()
            table = table.set_column(i, f.name, table.column(i).combine_chunks().view(as_int))
    return table


def _chunks(md: pq.FileMetaData) -> dict[str, tuple[str, set[str]]]:
    """Per leaf: its codec and encodings, the same in every row group."""
    out: dict[str, tuple[str, set[str]]] = {}
    for g in range(md.num_row_groups):
        for i in range(md.num_columns):
            c = md.row_group(g).column(i)
            seen = (c.compression, set(c.encodings))
            assert out.setdefault(c.path_in_schema, seen) == seen
    return out


def test_each_kind_of_value_column_gets_its_encoding_and_codec() -> None:
    rng = np.random.default_rng(7)
    table = pa.table(
        {
            "id": np.arange(N, dtype=np.int64),
            "small_ints": rng.integers(0, 1_000_000, N),  # 20 bits of 64: bit-packed deltas
            "random_ints": rng.integers(-(2**62), 2**62, N),  # no bits to spare, no codec gains
            "narrow": pa.array(rng.integers(-(2**31), 2**31 - 1, N), pa.int32()),  # 32 random bits
            "sorted_times": pa.array(
                np.sort(rng.integers(0, 10**15, N)).astype("datetime64[us]"), pa.timestamp("us", "UTC")
            ),
            "days": pa.array(rng.integers(0, 200_000, N).astype(np.int32), pa.date32()),
            "measure": rng.random(N),  # random floats: incompressible
            "prices": rng.integers(0, 50, N) / 4,
            "codes": pa.array(np.char.add("c", (rng.integers(0, 40, N)).astype(str)).tolist()),
            "text": pa.array(np.char.add("user_", rng.integers(0, 10**9, N).astype(str)).tolist()),
            "flag": rng.integers(0, 2, N).astype(bool),
        }
    )
    chunks = _chunks(_write(table, ("id",)))
    assert chunks["id"] == ("LZ4", {"RLE", "DELTA_BINARY_PACKED"})  # the key, as before
    for name in ("small_ints", "sorted_times", "days"):
        assert chunks[name] == ("UNCOMPRESSED", {"RLE", "DELTA_BINARY_PACKED"}), name
    for name in ("random_ints", "narrow", "measure"):
        assert chunks[name] == ("UNCOMPRESSED", {"RLE", "PLAIN"}), name
    assert chunks["prices"][0] == "LZ4"  # few distinct values: a dictionary under the codec
    assert chunks["codes"][0] == "LZ4" and "RLE_DICTIONARY" in chunks["codes"][1]
    assert chunks["text"] == ("LZ4", {"RLE", "PLAIN"})  # digits compress
    assert chunks["flag"][0] == "LZ4"
    # Smaller than the same file with every value column plain under the codec.
    adaptive = _size(table)
    P.ADAPTIVE_ENCODINGS = False
    try:
        plain = _size(table)
    finally:
        P.ADAPTIVE_ENCODINGS = True
    assert adaptive < 0.9 * plain, (adaptive, plain)


def _size(table: pa.Table) -> int:
    sink = io.BytesIO()
    options = P.writer_options(table, row_group_rows=8192, sorting_columns=("id",))
    with pq.ParquetWriter(sink, table.schema, **options) as w:
        w.write_table(table, row_group_size=8192)
    return len(sink.getvalue())


def test_switched_off_every_value_column_is_plain_under_the_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "ADAPTIVE_ENCODINGS", False)
    rng = np.random.default_rng(1)
    table = pa.table({"id": np.arange(N), "small": rng.integers(0, 100_000, N), "f": rng.random(N)})
    chunks = _chunks(_write(table, ("id",)))
    assert {c for c, _ in chunks.values()} == {"LZ4"}
    assert chunks["small"][1] == {"RLE", "PLAIN"}


@pytest.mark.parametrize(
    ("compression", "level", "codec"),
    [("zstd", 9, "ZSTD"), ("snappy", None, "SNAPPY"), ("gzip", 4, "GZIP"), ("none", None, "UNCOMPRESSED")],
)
def test_the_tables_codec_and_level_stay_on_columns_it_shrinks(
    compression: str, level: int | None, codec: str
) -> None:
    rng = np.random.default_rng(2)
    table = pa.table(
        {
            "small": rng.integers(0, 5_000, N),
            "random": rng.random(N),
            "text": pa.array(np.char.add("name-", rng.integers(0, 10**6, N).astype(str)).tolist()),
            "nested": pa.array([[int(i), int(i) + 1] for i in range(N)]),
            "record": pa.array([{"a": int(i) % 7, "b": "x"} for i in range(N)]),
        }
    )
    chunks = _chunks(_write(table, compression=compression, compression_level=level))
    assert chunks["small"] == ("UNCOMPRESSED", {"RLE", "DELTA_BINARY_PACKED"})
    assert chunks["random"][0] == "UNCOMPRESSED"
    for leaf in ("text", "nested.list.element", "record.a", "record.b"):
        assert chunks[leaf][0] == codec, leaf


def test_dotted_and_odd_column_names_get_their_own_settings() -> None:
    rng = np.random.default_rng(3)
    table = pa.table(
        {
            "a.b": rng.integers(0, 10**6, N),
            "a": pa.array([{"c": float(x)} for x in rng.random(N)]),
            "é x": rng.random(N),
            "z": pa.array(np.char.add("v", rng.integers(0, 10**6, N).astype(str)).tolist()),
        }
    )
    chunks = _chunks(_write(table))
    assert chunks["a.b"] == ("UNCOMPRESSED", {"RLE", "DELTA_BINARY_PACKED"})
    assert chunks["a.c"] == ("LZ4", {"RLE", "PLAIN"})  # (a nested leaf keeps the codec)
    assert chunks["é x"][0] == "UNCOMPRESSED"
    assert chunks["z"][0] == "LZ4"
    # A column "a.b" beside a struct "a" with a field "b": one path for two leaves, left as before.
    clash = pa.table(
        {"a.b": rng.integers(0, 10**6, N), "a": pa.array([{"b": float(x)} for x in rng.random(N)])}
    )
    md = _write(clash)
    assert {md.row_group(0).column(i).compression for i in range(2)} == {"LZ4"}


@pytest.mark.parametrize(
    "values",
    [
        np.arange(N, dtype=np.int64) * 3,  # constant deltas: no bits
        np.random.default_rng(4).integers(0, 1 << 12, N),
        np.random.default_rng(5).integers(-(1 << 40), 1 << 40, N),
        np.cumsum(np.random.default_rng(6).integers(-3, 50, N)),
        np.random.default_rng(8).integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, N),  # deltas wrap
        np.random.default_rng(9).integers(-(2**31), 2**31 - 1, N).astype(np.int32),
    ],
    ids=["steps", "12-bit", "41-bit", "walk", "64-bit", "int32"],
)
def test_the_delta_size_estimate_follows_what_the_encoder_writes(values: np.ndarray) -> None:
    column = pa.array(values)
    sink = io.BytesIO()
    pq.write_table(
        pa.table({"v": column}),
        sink,
        compression="none",
        use_dictionary=False,
        column_encoding={"v": "DELTA_BINARY_PACKED"},
        data_page_size=1 << 30,
        row_group_size=N,
    )
    md = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    written = md.row_group(0).column(0).total_uncompressed_size
    estimate = P._delta_bytes(P._physical_integers(column))
    headers = 8 * N // 128  # a block's header is a few bytes: what the estimate may miss by
    assert 0.8 * written - headers <= estimate <= 1.25 * written + headers, (estimate, written)


_KINDS = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "date": pa.date32(),
    "ts": pa.timestamp("ns"),
    "tsz": pa.timestamp("ms", "Europe/Paris"),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "str": pa.string(),
    "large": pa.large_string(),
    "bin": pa.binary(),
    "dec": pa.decimal128(18, 3),
}


def _column(kind: str, shape: str, n: int, seed: int, nulls: bool) -> pa.Array:
    rng = np.random.default_rng(seed)
    t = _KINDS[kind]
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        if shape == "extremes":
            raw = rng.choice(np.array([info.min, info.max, 0], dtype=t.to_pandas_dtype()), n)
        elif shape == "sorted":
            raw = np.sort(rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True))
        else:
            raw = rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True)
        values = pa.array(raw, t)
    elif t == pa.date32():
        values = pa.array(rng.integers(-(10**6), 10**6, n).astype(np.int32), pa.int32()).view(t)
    elif pa.types.is_timestamp(t):
        raw = rng.integers(-(2**62), 2**62, n) if shape != "sorted" else np.sort(rng.integers(0, 10**15, n))
        values = pa.array(raw, pa.int64()).view(t)
    elif pa.types.is_floating(t):
        raw = rng.standard_normal(n) * 1e6
        raw[rng.random(n) < 0.05] = np.nan
        raw[rng.random(n) < 0.05] = np.inf
        values = pa.array(raw.astype(t.to_pandas_dtype()), t)
    elif pa.types.is_decimal(t):
        values = pa.array([Decimal(int(x)) / 1000 for x in rng.integers(-(10**12), 10**12, n)], t)
    else:
        words = np.char.add("w", rng.integers(0, 10 ** (2 if shape == "extremes" else 9), n).astype(str))
        values = pa.array(words.tolist(), pa.string()).cast(t)
    if nulls:
        mask = pa.array(rng.random(n) < 0.3)
        values = pa.compute.if_else(mask, pa.nulls(n, t), values)
    return values


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=5),
    shape=st.sampled_from(["random", "sorted", "extremes"]),
    rows=st.sampled_from([0, 1, 5, 127, 128, 129, 3000, 4097, 9000]),
    nulls=st.booleans(),
    all_null=st.booleans(),
    compression=st.sampled_from(["lz4", "zstd", "snappy", "none"]),
    seed=st.integers(0, 2**16),
)
def test_every_type_reads_back_as_written(
    kinds: list[str], shape: str, rows: int, nulls: bool, all_null: bool, compression: str, seed: int
) -> None:
    columns = {f"c{i}_{k}": _column(k, shape, rows, seed + i, nulls) for i, k in enumerate(kinds)}
    if all_null and rows:
        name = next(iter(columns))
        columns[name] = pa.nulls(rows, columns[name].type)
    table = pa.table(columns)
    with mock.patch.object(P, "LAYOUT_MIN_ROWS", 0):  # small tables chosen for too
        _write(table, compression=compression)


def test_small_files_keep_plain_values_under_the_codec() -> None:
    rng = np.random.default_rng(12)
    small = pa.table(
        {"n": rng.integers(0, 1000, P.LAYOUT_MIN_ROWS - 1), "x": rng.random(P.LAYOUT_MIN_ROWS - 1)}
    )
    assert {c: v[0] for c, v in _chunks(_write(small)).items()} == {"n": "LZ4", "x": "LZ4"}
    big = pa.table({"n": rng.integers(0, 10**6, P.LAYOUT_MIN_ROWS), "x": rng.random(P.LAYOUT_MIN_ROWS)})
    assert {c: v[0] for c, v in _chunks(_write(big)).items()} == {"n": "UNCOMPRESSED", "x": "UNCOMPRESSED"}


def test_other_engines_read_the_files_mere_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    table = pa.table(
        {
            "id": np.arange(N, dtype=np.int64),
            "small": rng.integers(0, 1000, N),
            "narrow": pa.array(rng.integers(-100, 100, N), pa.int16()),
            "day": pa.array(rng.integers(0, 20_000, N).astype(np.int32), pa.int32()).view(pa.date32()),
            "at": pa.array(np.sort(rng.integers(0, 10**15, N)), pa.int64()).view(pa.timestamp("us")),
            "measure": rng.random(N),
            "text": pa.array(np.char.add("t", rng.integers(0, 10**9, N).astype(str)).tolist()),
        }
    )
    storage = Storage(str(tmp_path))
    P.write_parquet(storage, "f.parquet", table, row_group_rows=8192, sorting_columns=["id"])
    path = tmp_path / "f.parquet"
    assert any(
        "DELTA_BINARY_PACKED" in pq.ParquetFile(path).metadata.row_group(0).column(i).encodings
        for i in range(1, 4)
    )
    got = duckdb.sql(f"select * from read_parquet('{path}') order by id").to_arrow_table()
    assert got.cast(table.schema).equals(table)


def _file_layouts(table: mere.Table, root: Path) -> dict[tuple[str, int], dict[str, tuple[str, set[str]]]]:
    files = table.files().to_pylist()
    return {(f["partition"], f["bucket"]): _chunks(pq.ParquetFile(root / f["path"]).metadata) for f in files}


def test_the_buckets_of_a_partition_share_one_layout_and_partitions_choose_their_own(tmp_path: Path) -> None:
    """One write's files of one partition take the layout its biggest file chose (they hold rows of one
    distribution); each partition chooses its own; every row reads back."""
    rng = np.random.default_rng(21)
    n = 8 * (P.LAYOUT_MIN_ROWS + 2_000)  # over LAYOUT_MIN_ROWS a bucket file
    region = np.where(np.arange(n) % 2 == 0, "random", "steady")
    steady = region == "steady"
    batch = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "region": region,
            # random doubles where region=random (no codec); a few repeated ones elsewhere (dictionary)
            "x": np.where(steady, np.round(rng.integers(0, 5, n) * 0.5, 1), rng.random(n)),
            "count": np.where(steady, np.arange(n), rng.integers(-(2**60), 2**60, n)),
        }
    )
    catalog = mere.connect(str(tmp_path))
    t = catalog.create_table("db.t", batch.schema, primary_key=["id"], buckets=4, partition_by=["region"])
    t.upsert(batch)
    layouts = _file_layouts(t, tmp_path)
    assert len(layouts) == 8
    by_partition: dict[str, list[dict[str, tuple[str, set[str]]]]] = {}
    for (partition, _), layout in layouts.items():
        by_partition.setdefault(partition, []).append(layout)
    assert len(by_partition) == 2
    for files in by_partition.values():
        assert all(f == files[0] for f in files)  # one layout per partition
    random_files, steady_files = (by_partition[p][0] for p in sorted(by_partition))
    assert random_files["x"][0] == "UNCOMPRESSED" and "RLE_DICTIONARY" not in random_files["x"][1]
    assert "RLE_DICTIONARY" in steady_files["x"][1]
    assert "DELTA_BINARY_PACKED" in steady_files["count"][1]
    got = t.scan().to_arrow().sort_by("id")
    assert got.select(batch.column_names).cast(batch.schema).equals(batch)


def test_one_write_chooses_a_layout_once_per_partition(tmp_path: Path) -> None:
    """Sampling runs once per group of alike files (not per bucket file); single files choose their own."""
    from mere.write import writer

    rng = np.random.default_rng(22)
    n = 3 * P.LAYOUT_MIN_ROWS
    batch = pa.table(
        {
            "id": rng.permutation(n).astype(np.int64),
            "part": np.where(np.arange(n) % 3 == 0, "a", "b"),
            "v": rng.integers(0, 50, n),
        }
    )
    catalog = mere.connect(str(tmp_path))
    bucketed = catalog.create_table("db.bucketed", batch.schema, primary_key=["id"], buckets=3)
    partitioned = catalog.create_table(
        "db.partitioned", batch.schema, primary_key=["id"], buckets=3, partition_by=["part"]
    )
    single = catalog.create_table("db.single", batch.schema, primary_key=["id"], buckets=1)
    for table, calls in ((bucketed, 1), (partitioned, 2), (single, 0)):
        with mock.patch.object(writer, "choose_layout", wraps=writer.choose_layout) as spy:
            table.upsert(batch)
        assert spy.call_count == calls
        assert table.scan().to_arrow().num_rows == n
    assert len({frozenset(f["v"][1]) for f in _file_layouts(bucketed, tmp_path).values()}) == 1


def test_small_bucket_files_of_a_big_write_get_a_chosen_layout(tmp_path: Path) -> None:
    """Files under LAYOUT_MIN_ROWS rows each, of a write whose partition holds more: they share a layout
    chosen for all their rows (ids delta-encoded, random doubles uncompressed); a small write's files keep
    plain values under the codec."""
    rng = np.random.default_rng(23)
    buckets = 8
    n = 2 * P.LAYOUT_MIN_ROWS  # about LAYOUT_MIN_ROWS / 4 rows a bucket file
    batch = pa.table(
        {"id": rng.permutation(n).astype(np.int64), "seen": np.arange(n) * 3, "x": rng.random(n)}
    )
    catalog = mere.connect(str(tmp_path))
    big = catalog.create_table("db.big", batch.schema, primary_key=["id"], buckets=buckets)
    big.upsert(batch)
    small = catalog.create_table("db.small", batch.schema, primary_key=["id"], buckets=buckets)
    small.upsert(batch.slice(0, P.LAYOUT_MIN_ROWS // 2))
    chosen = list(_file_layouts(big, tmp_path).values())
    assert len(chosen) == buckets and all(f["id"][0] for f in chosen)
    assert max(f["row_count"] for f in big.files().to_pylist()) < P.LAYOUT_MIN_ROWS
    for f in chosen:
        assert f["x"][0] == "UNCOMPRESSED"
        assert "DELTA_BINARY_PACKED" in f["seen"][1]
    for f in _file_layouts(small, tmp_path).values():
        assert f["x"][0] == "LZ4" and "DELTA_BINARY_PACKED" not in f["seen"][1]
    assert big.scan().to_arrow().sort_by("id").cast(batch.schema).equals(batch.sort_by("id"))


def test_a_layout_for_many_rows_is_judged_only_from_a_block_of_rows_or_more() -> None:
    rng = np.random.default_rng(24)
    few = pa.table({"x": rng.random(P.SAMPLE_BLOCK_ROWS - 1)})
    enough = pa.table({"x": rng.random(P.SAMPLE_BLOCK_ROWS)})
    assert P.value_layout(few, [], "lz4", serves=10 * P.LAYOUT_MIN_ROWS) == ({}, [])
    assert P.value_layout(enough, [], "lz4", serves=10 * P.LAYOUT_MIN_ROWS) == ({}, ["x"])
    assert P.value_layout(enough, [], "lz4") == ({}, [])  # serves its own rows: too few to choose for
