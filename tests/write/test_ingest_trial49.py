"""Adversarial ingest test (trial 49): data exactly as engines produce it, through every write path.

Sources: pyarrow Tables and RecordBatchReaders with unusual physical layouts (empty chunks, slices,
dictionary, run-end and view encodings, large types, list_view, metadata, reordered columns), pandas
frames (nullable extension dtypes, pyarrow dtypes, categoricals, tz-aware datetimes, non-default index),
Polars frames (string_view strings, Categorical/Enum, Decimal, Duration, nested), DuckDB results (HUGEINT,
UUID, INTERVAL, ENUM, TIMESTAMPTZ) and rows read back from another mere table. Each write either reads back
exactly the values written (compared with an independent normalisation into plain Python values) or is
refused with a typed MereError before anything is written (same version, no new files).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError, NullKey, SchemaMismatch, UnsupportedType
from mere.table.table import Table

pl = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string()), ("v", pa.int32())])
UTC = dt.UTC

# ---------------------------------------------------------------------------------------------- helpers


def _table(tmp_path: Path, schema: pa.Schema = SCHEMA, keyed: bool = True, **kw: Any) -> Table:
    cat = mere.connect(tmp_path / "wh")
    return cat.create_table(
        "ing.t",
        schema,
        primary_key=schema.names[0] if keyed else None,
        properties={"compaction.auto": "off"},
        **kw,
    )


def _files(tmp_path: Path) -> list[str]:
    wh = tmp_path / "wh"
    return sorted(str(p) for p in wh.rglob("*") if p.is_file() and "catalog" not in p.name)


def _plain(value: Any) -> Any:
    """An independent normal form of one Python value: tz-aware datetimes as UTC instants, others as is."""
    if isinstance(value, pd.Timestamp):  # nanosecond timestamps: compare the integer nanoseconds
        if value.tzinfo is not None:
            return ("tz", value.tz_convert("UTC").tz_localize(None).value)
        return ("naive", value.value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return ("tz", value.astimezone(UTC).replace(tzinfo=None))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def _rows(data: pa.Table, key: str = "id") -> list[dict[str, Any]]:
    """Rows as plain dicts sorted by key, each value decoded by pyarrow's per-scalar conversion."""
    cols = data.column_names
    pylists = {c: [_plain(x.as_py()) for x in _scalars(data.column(c))] for c in cols}
    return _sorted([{c: pylists[c][i] for c in cols} for i in range(data.num_rows)], key)


def _sorted(rows: list[dict[str, Any]], key: str = "id") -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r[key] is None, r[key], repr(sorted(r.items()))))


def _scalars(col: pa.ChunkedArray) -> list[pa.Scalar]:
    """Every scalar of a column, chunk by chunk (independent of any whole-column cast)."""
    out: list[pa.Scalar] = []
    for chunk in col.chunks:
        out.extend(chunk[i] for i in range(len(chunk)))
    return out


def _read(t: Table) -> list[dict[str, Any]]:
    return _rows(t.refresh().to_arrow(), t.schema.names[0])


def _state(t: Table, tmp_path: Path) -> tuple[int, list[str], list[dict[str, Any]]]:
    return t.refresh().version, _files(tmp_path), _read(t)


def _write(t: Table, op: str, data: Any) -> Any:
    if op == "upsert":
        return t.upsert(data)
    if op == "append":
        return t.append(data)
    if op == "merge":
        return t.merge(data).when_matched_update_all().when_not_matched_insert_all().execute()
    if op == "overwrite":
        return t.overwrite(data)
    if op == "transaction":
        with t.transaction() as tx:
            tx.upsert(data)
        return None
    if op == "stage":
        staged = t.stage(data, "upsert")
        return t.commit([staged])
    raise AssertionError(op)


KEYED_OPS = ["upsert", "merge", "overwrite", "transaction", "stage"]
ALL_OPS = [*KEYED_OPS, "append"]


def _fresh(tmp_path: Path, op: str, schema: pa.Schema = SCHEMA, **kw: Any) -> Table:
    return _table(tmp_path, schema, keyed=op != "append", **kw)


def _expect_refused(
    t: Table, tmp_path: Path, op: str, data: Any, error: type[MereError] = MereError, match: str | None = None
) -> MereError:
    before = _state(t, tmp_path)
    with pytest.raises(Exception) as caught:
        _write(t, op, data)
    assert isinstance(caught.value, error), f"{type(caught.value).__mro__}: {caught.value}"
    if match is not None:
        assert match in str(caught.value), str(caught.value)
    assert _state(t, tmp_path) == before
    return caught.value


def _expect_stored(t: Table, op: str, data: Any, expected: list[dict[str, Any]]) -> None:
    _write(t, op, data)
    got = _read(t)
    key = t.schema.names[0]
    full = [{c: r.get(c) for c in t.schema.names} for r in expected]
    assert got == _sorted(full, key)


# ----------------------------------------------------------------- pyarrow layouts that must round-trip

BIG = pa.table(
    {
        "id": pa.array(range(10), pa.int64()),
        "s": [f"value number {i} long enough for a view" for i in range(10)],
        "v": pa.array(range(10), pa.int32()),
    }
)


def _expected(ids: list[int], s: list[Any] | None = None, v: list[Any] | None = None) -> list[dict[str, Any]]:
    return [
        {"id": i, "s": None if s is None else s[n], "v": None if v is None else v[n]}
        for n, i in enumerate(ids)
    ]


def _layouts() -> dict[str, tuple[Callable[[], Any], list[dict[str, Any]]]]:
    sv = ["a", "a string longer than twelve bytes", None]
    return {
        "empty_chunks": (
            lambda: pa.table(
                {
                    "id": pa.chunked_array([[], [1, 2], [], [3]], pa.int64()),
                    "s": pa.chunked_array([[], ["a", "b"], [], ["c"]], pa.string()),
                    "v": pa.chunked_array([[], [1, 2], [], [3]], pa.int32()),
                }
            ),
            _expected([1, 2, 3], ["a", "b", "c"], [1, 2, 3]),
        ),
        "sliced": (
            lambda: BIG.slice(3, 4),
            _expected([3, 4, 5, 6], [BIG["s"][i].as_py() for i in range(3, 7)], [3, 4, 5, 6]),
        ),
        "sliced_combined_chunks": (
            lambda: pa.concat_tables([BIG.slice(1, 2), BIG.slice(8, 1), BIG.slice(0, 0)]),
            _expected([1, 2, 8], [BIG["s"][i].as_py() for i in (1, 2, 8)], [1, 2, 8]),
        ),
        "record_batch_sliced": (
            lambda: BIG.to_batches()[0].slice(5),
            _expected([5, 6, 7, 8, 9], [BIG["s"][i].as_py() for i in range(5, 10)], [5, 6, 7, 8, 9]),
        ),
        "reader_with_empty_batches": (
            lambda: pa.RecordBatchReader.from_batches(
                BIG.schema,
                [_empty_batch(), *BIG.to_batches(max_chunksize=3), _empty_batch()],
            ),
            _expected(list(range(10)), [BIG["s"][i].as_py() for i in range(10)], list(range(10))),
        ),
        "reader_of_dictionary_batches": (
            lambda: pa.RecordBatchReader.from_batches(
                pa.schema(
                    [("id", pa.int64()), ("s", pa.dictionary(pa.int8(), pa.string())), ("v", pa.int32())]
                ),
                [
                    pa.record_batch(
                        [
                            b.column(0),
                            b.column(1).dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string())),
                            b.column(2),
                        ],
                        names=["id", "s", "v"],
                    )
                    for b in BIG.to_batches(max_chunksize=4)
                ],
            ),
            _expected(list(range(10)), [BIG["s"][i].as_py() for i in range(10)], list(range(10))),
        ),
        "dictionary_values": (
            lambda: pa.table(
                {"id": pa.array([1, 2, 3], pa.int64()), "s": pa.array(["x", None, "x"]).dictionary_encode()}
            ),
            _expected([1, 2, 3], ["x", None, "x"]),
        ),
        "dictionary_uint32_indices": (
            lambda: pa.table(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "s": pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.uint32()), pa.array(["p", "q"])),
                }
            ),
            _expected([1, 2], ["q", "p"]),
        ),
        "dictionary_large_string": (
            lambda: pa.table(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "s": pa.array(["p", "q"], pa.large_string()).dictionary_encode(),
                }
            ),
            _expected([1, 2], ["p", "q"]),
        ),
        "dictionary_key": (
            lambda: pa.table(
                {
                    "id": pa.array([7, 8, 9], pa.int64()).dictionary_encode(),
                    "v": pa.array([1, 2, 3], pa.int32()),
                }
            ),
            _expected([7, 8, 9], None, [1, 2, 3]),
        ),
        "string_view": (
            lambda: pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": pa.array(sv, pa.string_view())}),
            _expected([1, 2, 3], sv),
        ),
        "large_string": (
            lambda: pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": pa.array(sv, pa.large_string())}),
            _expected([1, 2, 3], sv),
        ),
        "run_end_values": (
            lambda: pa.table(
                {
                    "id": pa.array([1, 2, 3], pa.int64()),
                    "v": pc.run_end_encode(pa.array([5, 5, None], pa.int32())),
                }
            ),
            _expected([1, 2, 3], None, [5, 5, None]),
        ),
        "run_end_key": (
            lambda: pa.table(
                {
                    "id": pc.run_end_encode(pa.array([1, 2, 3], pa.int64())),
                    "v": pa.array([5, 6, 7], pa.int32()),
                }
            ),
            _expected([1, 2, 3], None, [5, 6, 7]),
        ),
        "columns_reordered": (
            lambda: pa.table({"v": pa.array([4], pa.int32()), "s": ["x"], "id": pa.array([1], pa.int64())}),
            _expected([1], ["x"], [4]),
        ),
        "metadata_everywhere": (
            lambda: pa.table(
                {"id": pa.array([1], pa.int64()), "s": ["x"]},
                schema=pa.schema(
                    [
                        pa.field("id", pa.int64(), metadata={"k": "v"}),
                        pa.field("s", pa.string(), metadata={"PARQUET:field_id": "9"}),
                    ],
                    metadata={"pandas": "not json at all"},
                ),
            ),
            _expected([1], ["x"]),
        ),
        "narrower_ints": (
            lambda: pa.table({"id": pa.array([1, 2], pa.int8()), "v": pa.array([3, 4], pa.uint16())}),
            _expected([1, 2], None, [3, 4]),
        ),
        "null_typed_column": (
            lambda: pa.table({"id": pa.array([1], pa.int64()), "s": pa.nulls(1)}),
            _expected([1]),
        ),
        "nullable_key_field_without_nulls": (
            lambda: pa.table(
                {"id": pa.array([1], pa.int64())},
                schema=pa.schema([pa.field("id", pa.int64(), nullable=True)]),
            ),
            _expected([1]),
        ),
    }


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=BIG.schema)


LAYOUTS = _layouts()


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_unusual_arrow_layouts_read_back_exactly(tmp_path: Path, layout: str, op: str) -> None:
    make, expected = LAYOUTS[layout]
    t = _fresh(tmp_path, op)
    _expect_stored(t, op, make(), expected)


@pytest.mark.parametrize("op", ALL_OPS)
def test_a_batch_replaces_an_earlier_batch_of_another_layout(tmp_path: Path, op: str) -> None:
    """Second write with a different physical layout of the same keys: values are the new ones."""
    t = _fresh(tmp_path, op)
    _write(t, op, BIG)
    again = pa.table(
        {
            "id": pa.array([3, 4], pa.int64()).dictionary_encode(),
            "s": pa.array(["new three", None], pa.string_view()),
        }
    )
    _write(t, op, again)
    base = {r["id"]: r for r in _rows(BIG)}
    if op == "overwrite":
        expected = [{"id": 3, "s": "new three", "v": None}, {"id": 4, "s": None, "v": None}]
    elif op == "append":
        expected = [*base.values(), {"id": 3, "s": "new three", "v": None}, {"id": 4, "s": None, "v": None}]
    else:
        # a partial upsert (and MERGE update *) changes only the columns it carries
        base[3] = {"id": 3, "s": "new three", "v": 3}
        base[4] = {"id": 4, "s": None, "v": 4}
        expected = list(base.values())
    assert _read(t) == _sorted(expected)


# ---------------------------------------------------------- list_view and dictionaries of string_view

LIST_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("l", pa.list_(pa.int32()))])


@pytest.mark.parametrize("op", ALL_OPS)
def test_list_view_input_is_stored_as_a_list(tmp_path: Path, op: str) -> None:
    t = _fresh(tmp_path, op, LIST_SCHEMA)
    data = pa.table(
        {"id": pa.array([0, 1, 2], pa.int64()), "l": pa.array([[1, 2], None, []], pa.list_view(pa.int32()))}
    )
    data.validate(full=True)
    try:
        _write(t, op, data)
    except MereError:
        pytest.fail("a valid list_view column was refused")
    assert _read(t) == [{"id": 0, "l": [1, 2]}, {"id": 1, "l": None}, {"id": 2, "l": []}]


@pytest.mark.parametrize("op", ALL_OPS)
def test_list_view_input_never_escapes_raw_and_never_writes(tmp_path: Path, op: str) -> None:
    """Whatever the outcome, nothing half-written: the table is unchanged when the write raises."""
    t = _fresh(tmp_path, op, LIST_SCHEMA)
    before = _state(t, tmp_path)
    data = pa.table({"id": pa.array([0], pa.int64()), "l": pa.array([[1]], pa.list_view(pa.int32()))})
    try:
        _write(t, op, data)
    except Exception:
        assert _state(t, tmp_path) == before


@pytest.mark.parametrize("op", ["upsert", "append"])
def test_dictionary_of_string_view_is_stored(tmp_path: Path, op: str) -> None:
    t = _fresh(tmp_path, op)
    data = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "s": pa.array(["x", "y"], pa.string_view()).dictionary_encode()}
    )
    _expect_stored(t, op, data, _expected([1, 2], ["x", "y"]))


@pytest.mark.parametrize("kind", ["categorical", "enum", "list_of_categorical", "struct_of_categorical"])
def test_polars_categorical_and_enum_are_stored_as_strings(tmp_path: Path, kind: str) -> None:
    if kind == "list_of_categorical":
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.list_(pa.string()))])
        t = _table(tmp_path, schema)
        df = pl.DataFrame({"id": [1, 2], "s": pl.Series([["lo"], None], dtype=pl.List(pl.Categorical))})
        _expect_stored(t, "upsert", df, [{"id": 1, "s": ["lo"]}, {"id": 2, "s": None}])
        return
    if kind == "struct_of_categorical":
        schema = pa.schema(
            [pa.field("id", pa.int64(), nullable=False), ("s", pa.struct([("a", pa.string())]))]
        )
        t = _table(tmp_path, schema)
        df = pl.DataFrame(
            {"id": [1, 2], "s": pl.Series([{"a": "lo"}, None], dtype=pl.Struct({"a": pl.Categorical}))}
        )
        _expect_stored(t, "upsert", df, [{"id": 1, "s": {"a": "lo"}}, {"id": 2, "s": None}])
        return
    t = _table(tmp_path)
    dtype = pl.Categorical if kind == "categorical" else pl.Enum(["lo", "hi"])
    df = pl.DataFrame({"id": [1, 2, 3], "s": pl.Series(["lo", "hi", None], dtype=dtype)})
    _expect_stored(t, "upsert", df, _expected([1, 2, 3], ["lo", "hi", None]))


def test_polars_categorical_refusal_changes_nothing(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.upsert(BIG)
    df = pl.DataFrame({"id": [1], "s": pl.Series(["lo"], dtype=pl.Categorical)})
    before = _state(t, tmp_path)
    try:
        t.upsert(df)
    except MereError:
        assert _state(t, tmp_path) == before


# ------------------------------------------------------------------------------ CDC change columns

CDC_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int32())])
CDC_IDS = pa.array([1, 2, 4], pa.int64())
CDC_VALUES = pa.array([10, None, 40], pa.int32())
CDC_EXPECTED = [{"id": 1, "v": 10}, {"id": 3, "v": 3}, {"id": 4, "v": 40}]


def _cdc_table(tmp_path: Path) -> Table:
    t = _table(tmp_path, CDC_SCHEMA, cdc_column="op")
    t.upsert(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([1, 2, 3], pa.int32())}))
    return t


CDC_OPS_OK = {
    "plain": lambda: pa.array(["U", "D", "I"]),
    "dictionary": lambda: pa.array(["U", "D", "I"]).dictionary_encode(),
    "string_view": lambda: pa.array(["U", "D", "I"], pa.string_view()),
    "large_string": lambda: pa.array(["+U", "-D", "+I"], pa.large_string()),
    "debezium_spaced": lambda: pa.array(["u", " d ", "c"]),
    "binary": lambda: pa.array([b"U", b"D", b"I"]),
}


@pytest.mark.parametrize("layout", list(CDC_OPS_OK))
def test_cdc_change_column_layouts_apply(tmp_path: Path, layout: str) -> None:
    t = _cdc_table(tmp_path)
    t.upsert(pa.table({"id": CDC_IDS, "v": CDC_VALUES, "op": CDC_OPS_OK[layout]()}))
    assert _read(t) == CDC_EXPECTED


def test_cdc_from_pandas_categorical_and_polars_strings(tmp_path: Path) -> None:
    t = _cdc_table(tmp_path)
    t.upsert(
        pd.DataFrame(
            {"id": [1, 2, 4], "v": pd.array([10, None, 40], "Int32"), "op": pd.Categorical(["U", "D", "I"])}
        )
    )
    assert _read(t) == CDC_EXPECTED
    t.upsert(pl.DataFrame({"id": [4], "v": pl.Series([None], dtype=pl.Int32), "op": ["D"]}))
    assert _read(t) == CDC_EXPECTED[:2]


CDC_OPS_RAW = {
    "run_end_encoded": lambda: pc.run_end_encode(pa.array(["U", "D", "I"])),
    "dictionary_of_string_view": lambda: pa.array(["U", "D", "I"], pa.string_view()).dictionary_encode(),
    "polars_categorical": None,
}


@pytest.mark.parametrize("layout", list(CDC_OPS_RAW))
def test_cdc_change_column_encodings_apply_or_are_refused_typed(tmp_path: Path, layout: str) -> None:
    t = _cdc_table(tmp_path)
    if layout == "polars_categorical":
        data: Any = pl.DataFrame(
            {
                "id": [1, 2, 4],
                "v": pl.Series([10, None, 40], dtype=pl.Int32),
                "op": pl.Series(["U", "D", "I"], dtype=pl.Categorical),
            }
        )
    else:
        data = pa.table({"id": CDC_IDS, "v": CDC_VALUES, "op": CDC_OPS_RAW[layout]()})
    before = _state(t, tmp_path)
    try:
        t.upsert(data)
    except MereError:
        assert _state(t, tmp_path) == before
        return
    assert _read(t) == CDC_EXPECTED


@pytest.mark.parametrize("bad", [["U", None, "I"], ["U", "X", "I"], ["1", "2", "3"]])
def test_cdc_bad_change_values_are_refused_before_writing(tmp_path: Path, bad: list[Any]) -> None:
    t = _cdc_table(tmp_path)
    _expect_refused(t, tmp_path, "upsert", pa.table({"id": CDC_IDS, "v": CDC_VALUES, "op": pa.array(bad)}))


def test_delete_keys_with_a_string_view_delete_column(tmp_path: Path) -> None:
    t = _cdc_table(tmp_path)
    t.delete(pa.table({"id": pa.array([1], pa.int64()), "op": pa.array(["D"], pa.string_view())}))
    assert [r["id"] for r in _read(t)] == [2, 3]


@pytest.mark.parametrize("layout", ["string_view_U", "run_end_D"])
def test_delete_keys_with_an_encoded_change_column_never_escapes_raw(tmp_path: Path, layout: str) -> None:
    t = _cdc_table(tmp_path)
    op = (
        pa.array(["U"], pa.string_view()) if layout == "string_view_U" else pc.run_end_encode(pa.array(["D"]))
    )
    before = _state(t, tmp_path)
    try:
        t.delete(pa.table({"id": pa.array([1], pa.int64()), "op": op}))
    except MereError:
        assert _state(t, tmp_path) == before
        return
    assert layout == "run_end_D"
    assert [r["id"] for r in _read(t)] == [2, 3]


# -------------------------------------------------------------------- MERGE casts of source values

TS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("naive", pa.timestamp("us")),
        ("aware", pa.timestamp("us", "UTC")),
    ]
)


@pytest.mark.parametrize("column", ["naive", "aware"])
def test_upsert_refuses_mixing_naive_and_aware_timestamps(tmp_path: Path, column: str) -> None:
    t = _table(tmp_path, TS_SCHEMA)
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    wrong = pa.timestamp("us", "Asia/Tokyo") if column == "naive" else pa.timestamp("us")
    _expect_refused(
        t,
        tmp_path,
        "upsert",
        pa.table({"id": pa.array([1], pa.int64()), column: pa.array([0], wrong)}),
        SchemaMismatch,
    )


@pytest.mark.parametrize("clause", ["update_all", "set", "insert_all"])
@pytest.mark.parametrize("column", ["naive", "aware"])
def test_merge_refuses_mixing_naive_and_aware_timestamps(tmp_path: Path, column: str, clause: str) -> None:
    t = _table(tmp_path, TS_SCHEMA)
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    wrong = pa.timestamp("us", "Asia/Tokyo") if column == "naive" else pa.timestamp("us")
    source = pa.table(
        {"id": pa.array([1 if clause != "insert_all" else 2], pa.int64()), column: pa.array([0], wrong)}
    )
    before = _state(t, tmp_path)
    merge = t.merge(source)
    if clause == "update_all":
        merge = merge.when_matched_update_all()
    elif clause == "set":
        merge = merge.when_matched_update(set={column: f"s.{column}"})
    else:
        merge = merge.when_not_matched_insert_all()
    with pytest.raises(MereError):
        merge.execute()
    assert _state(t, tmp_path) == before


def test_merge_source_layouts_read_back(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 2], pa.int32())}))
    sources = [
        pa.table(
            {
                "id": pa.array([1, 3], pa.int64()).dictionary_encode(),
                "s": pa.array(["x" * 20, "y"], pa.string_view()),
            }
        ),
        pa.table({"id": pc.run_end_encode(pa.array([1, 3], pa.int64())), "s": ["x", "y"]}),
        pd.DataFrame({"id": pd.array([1, 3], "Int64"), "s": pd.array(["x", None], "string")}),
        pl.DataFrame({"id": [1, 3], "s": ["x", "y" * 20]}),
        pa.RecordBatchReader.from_batches(
            pa.schema([("id", pa.int32()), ("s", pa.large_string())]),
            [
                pa.record_batch(
                    {"id": pa.array([1, 3], pa.int32()), "s": pa.array(["x", "y"], pa.large_string())}
                )
            ],
        ),
    ]
    for source in sources:
        t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
        expect = _rows(
            pa.table({"id": [1, 3], "s": [None, None]}).cast(
                pa.schema([("id", pa.int64()), ("s", pa.string())])
            )
        )
        got = {r["id"]: r for r in _read(t)}
        assert sorted(got) == [1, 2, 3]
        assert got[2] == {"id": 2, "s": None, "v": 2}
        assert got[1]["v"] == 1 and got[3]["v"] is None
        assert len(expect) == 2
    assert {r["id"]: r["s"] for r in _read(t)} == {1: "x", 2: None, 3: "y"}


def test_merge_with_an_unrelated_list_view_source_column_never_escapes_raw_state(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    before = _state(t, tmp_path)
    source = pa.table({"id": pa.array([1], pa.int64()), "l": pa.array([[1]], pa.list_view(pa.int32()))})
    try:
        t.merge(source).when_matched_update(set={"s": "'q'"}).execute()
    except Exception:
        assert _state(t, tmp_path) == before


def test_merge_with_an_unrelated_list_view_source_column(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    source = pa.table({"id": pa.array([1], pa.int64()), "l": pa.array([[1]], pa.list_view(pa.int32()))})
    try:
        t.merge(source).when_matched_update(set={"s": "'q'"}).execute()
    except MereError:
        return
    assert _read(t) == [{"id": 1, "s": "q", "v": None}]


# ------------------------------------------------------------- bad values: refused, nothing written

WIDE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("i32", pa.int32()),
        ("ts", pa.timestamp("us")),
        ("tsn", pa.timestamp("ns")),
        ("dec", pa.decimal128(5, 2)),
        ("s", pa.string()),
        ("f32", pa.float32()),
        ("req", pa.field("req", pa.int64(), nullable=False).type),
    ]
)
WIDE = WIDE.set(WIDE.get_field_index("req"), pa.field("req", pa.int64(), nullable=False))


def _one(column: str, array: pa.Array, key: Any = 5) -> pa.Table:
    return pa.table({"id": pa.array([key], pa.int64()), "req": pa.array([1], pa.int64()), column: array})


BAD_VALUES: dict[str, Callable[[], pa.Table]] = {
    "int_overflow": lambda: _one("i32", pa.array([2**31], pa.int64())),
    "uint_overflow": lambda: _one("i32", pa.array([2**32 - 1], pa.uint32())),
    "float_fraction_in_int": lambda: _one("i32", pa.array([2.5])),
    "nan_in_int": lambda: _one("i32", pa.array([float("nan")])),
    "string_in_int": lambda: _one("i32", pa.array(["7"])),
    "bool_in_int": lambda: _one("i32", pa.array([True])),
    "list_in_int": lambda: _one("i32", pa.array([[1]], pa.list_(pa.int32()))),
    "struct_in_string": lambda: _one("s", pa.array([{"a": "x"}])),
    "map_in_string": lambda: _one("s", pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string()))),
    "int_in_string": lambda: _one("s", pa.array([5])),
    "binary_in_string": lambda: _one("s", pa.array([b"\xff"])),
    "ns_in_us_truncates": lambda: _one("ts", pa.array([1_000_000_001], pa.timestamp("ns"))),
    "year_2500_in_ns": lambda: _one("tsn", pa.array([dt.datetime(2500, 1, 1)], pa.timestamp("us"))),
    "year_1500_in_ns": lambda: _one("tsn", pa.array([dt.datetime(1500, 1, 1)], pa.timestamp("ms"))),
    "seconds_far_future_in_ns": lambda: _one("tsn", pa.array([10**11], pa.timestamp("s"))),
    "date_in_timestamp": lambda: _one("ts", pa.array([dt.date(2020, 1, 1)])),
    "naive_in_int": lambda: _one("i32", pa.array([1], pa.timestamp("us"))),
    "decimal_overflow": lambda: _one("dec", pa.array([decimal.Decimal("12345.67")], pa.decimal128(7, 2))),
    "decimal_scale_loss": lambda: _one("dec", pa.array([decimal.Decimal("1.234")], pa.decimal128(4, 3))),
    "decimal256_overflow": lambda: _one("dec", pa.array([decimal.Decimal("1" * 30)], pa.decimal256(40, 0))),
    "int_overflows_decimal": lambda: _one("dec", pa.array([123456], pa.int64())),
    "double_not_a_float32": lambda: _one("f32", pa.array([0.1])),
    "int_not_a_float32": lambda: _one("f32", pa.array([16_777_217], pa.int32())),
    "interval": lambda: _one("i32", pa.array([pa.scalar((1, 2, 3), pa.month_day_nano_interval())])),
    "uuid_extension": lambda: _one("s", pa.array([b"0" * 16], pa.uuid())),
    "null_in_required": lambda: pa.table(
        {"id": pa.array([5], pa.int64()), "req": pa.array([None], pa.int64())}
    ),
    "null_key": lambda: pa.table(
        {"id": pa.array([5, None], pa.int64()), "req": pa.array([1, 1], pa.int64())}
    ),
    "uint64_key_too_big": lambda: pa.table(
        {"id": pa.array([2**63], pa.uint64()), "req": pa.array([1], pa.int64())}
    ),
    "float_key_fraction": lambda: pa.table({"id": pa.array([5.5]), "req": pa.array([1], pa.int64())}),
    "nan_key": lambda: pa.table({"id": pa.array([float("nan")]), "req": pa.array([1], pa.int64())}),
    "string_key": lambda: pa.table({"id": pa.array(["5"]), "req": pa.array([1], pa.int64())}),
    "unknown_column": lambda: pa.table(
        {"id": pa.array([5], pa.int64()), "req": pa.array([1], pa.int64()), "zz": [1]}
    ),
    "differently_cased": lambda: pa.table(
        {"ID": pa.array([5], pa.int64()), "REQ": pa.array([1], pa.int64())}
    ),
    "duplicate_column": lambda: pa.Table.from_arrays(
        [pa.array([5], pa.int64()), pa.array([1], pa.int64()), pa.array([2], pa.int64())],
        names=["id", "req", "req"],
    ),
}


# MERGE stores values with SQL's assignment cast (docs/sql.md): floats round to integers, doubles to float,
# decimals to the column's scale, dates widen to timestamps. Those cases are checked for their documented result below, not refused.
MERGE_ASSIGNMENT_CASTS = {
    "float_fraction_in_int": ("i32", 2),  # a DOUBLE's half to even, as DuckDB stores it
    "date_in_timestamp": ("ts", dt.datetime(2020, 1, 1)),
    "double_not_a_float32": ("f32", float(np.float32(0.1))),
    "int_not_a_float32": ("f32", 16_777_216.0),
    "decimal_scale_loss": ("dec", decimal.Decimal("1.23")),  # rounded to the column's scale, as DuckDB
}
MERGE_RAW = {"duplicate_column"}


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_bad_values_are_refused_typed_before_anything_is_written(tmp_path: Path, case: str, op: str) -> None:
    if op == "merge" and (case in MERGE_ASSIGNMENT_CASTS or case in MERGE_RAW):
        pytest.skip("checked by the MERGE tests below")
    t = _fresh(tmp_path, op, WIDE)
    _write(
        t,
        op if op != "overwrite" else "upsert",
        pa.table({"id": pa.array([1, 2], pa.int64()), "req": pa.array([1, 2], pa.int64())}),
    )
    if op == "append" and case == "null_key":
        _expect_refused(t, tmp_path, op, BAD_VALUES[case](), SchemaMismatch)  # id is NOT NULL
        return
    _expect_refused(t, tmp_path, op, BAD_VALUES[case]())


@pytest.mark.parametrize(
    "case", ["null_key", "nan_key", "float_key_fraction", "string_key", "uint64_key_too_big"]
)
def test_bad_keys_in_a_blind_delete_are_refused(tmp_path: Path, case: str) -> None:
    t = _table(tmp_path, WIDE)
    t.upsert(pa.table({"id": pa.array([1, 5], pa.int64()), "req": pa.array([1, 2], pa.int64())}))
    before = _state(t, tmp_path)
    keys = BAD_VALUES[case]().select(["id"])
    with pytest.raises(MereError):
        t.delete(keys)
    assert _state(t, tmp_path) == before


def test_null_key_is_a_null_key_error(tmp_path: Path) -> None:
    t = _table(tmp_path, WIDE)
    _expect_refused(t, tmp_path, "upsert", BAD_VALUES["null_key"](), NullKey)
    _expect_refused(t, tmp_path, "upsert", pd.DataFrame({"id": [1.0, np.nan], "req": [1, 1]}), NullKey)


def test_values_that_fit_are_stored_exactly(tmp_path: Path) -> None:
    """The lossless side of the same casts: every value is exactly what was given."""
    t = _table(tmp_path, WIDE)
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.uint8()),
            "req": pa.array([7, 8], pa.int8()),
            "i32": pa.array([2**31 - 1, -(2**31)], pa.int64()),
            "ts": pa.array([1_000_000_000, None], pa.timestamp("ns")),
            "tsn": pa.array([dt.datetime(2262, 4, 11), dt.datetime(1677, 9, 22)], pa.timestamp("us")),
            "dec": pa.array([decimal.Decimal("999.99"), decimal.Decimal("-999.99")], pa.decimal128(20, 4)),
            "s": pa.array(["é", ""], pa.large_string()),
            "f32": pa.array([0.5, 16_777_216.0]),
        }
    )
    t.upsert(data)
    assert _read(t) == [
        {
            "id": 1,
            "i32": 2**31 - 1,
            "ts": dt.datetime(1970, 1, 1, 0, 0, 1),
            "tsn": pd.Timestamp("2262-04-11").value and _plain(pd.Timestamp("2262-04-11")),
            "dec": decimal.Decimal("999.99"),
            "s": "é",
            "f32": 0.5,
            "req": 7,
        },
        {
            "id": 2,
            "i32": -(2**31),
            "ts": None,
            "tsn": _plain(pd.Timestamp("1677-09-22")),
            "dec": decimal.Decimal("-999.99"),
            "s": "",
            "f32": 16_777_216.0,
            "req": 8,
        },
    ]


@pytest.mark.parametrize("case", list(MERGE_ASSIGNMENT_CASTS))
def test_merge_assignment_casts_are_the_documented_ones(tmp_path: Path, case: str) -> None:
    t = _table(tmp_path, WIDE)
    _write(t, "merge", BAD_VALUES[case]())
    column, value = MERGE_ASSIGNMENT_CASTS[case]
    assert {r["id"]: r[column] for r in _read(t)} == {5: value}


@pytest.mark.parametrize("column", ["req", "id"])
def test_merge_source_with_duplicate_column_names_is_refused_typed(tmp_path: Path, column: str) -> None:
    t = _table(tmp_path, WIDE)
    t.upsert(pa.table({"id": pa.array([5], pa.int64()), "req": pa.array([1], pa.int64())}))
    names = ["id", "req", column]
    source = pa.Table.from_arrays(
        [
            pa.array([5], pa.int64()),
            pa.array([2], pa.int64()),
            pa.array([5 if column == "id" else 3], pa.int64()),
        ],
        names=names,
    )
    before = _state(t, tmp_path)
    with pytest.raises(MereError):
        t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
    assert _state(t, tmp_path) == before


# ----------------------------------------------------------------------------------- pandas frames

PD_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("i", pa.int64()),
        ("b", pa.bool_()),
        ("s", pa.string()),
        ("ts", pa.timestamp("ns")),
        ("tz", pa.timestamp("ns", "UTC")),
        ("f", pa.float64()),
    ]
)
PD_EXPECTED = [
    {
        "id": 1,
        "i": 1,
        "b": True,
        "s": "a",
        "ts": ("naive", pd.Timestamp("2020-01-01").value),
        "tz": ("tz", pd.Timestamp("2019-12-31 23:00").value),
        "f": 1.5,
    },
    {"id": 2, "i": None, "b": None, "s": None, "ts": None, "tz": None, "f": None},
    {
        "id": 3,
        "i": -(2**62),
        "b": False,
        "s": "ünï",
        "ts": ("naive", pd.Timestamp("2021-01-01").value + 1),
        "tz": ("tz", pd.Timestamp("2021-06-30 22:00").value),
        "f": -0.0,
    },
]


def _pandas_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": [1, 2, 3],
            "i": pd.array([1, None, -(2**62)], "Int64"),
            "b": pd.array([True, None, False], "boolean"),
            "s": pd.array(["a", None, "ünï"], "string"),
            "ts": pd.to_datetime(["2020-01-01", None, "2021-01-01 00:00:00.000000001"], format="ISO8601"),
            "tz": pd.to_datetime(["2020-01-01", None, "2021-07-01"]).tz_localize("Europe/Paris"),
            "f": pd.array([1.5, None, -0.0], "Float64"),
        },
        index=[30, 10, 20],
    )


PANDAS_VARIANTS: dict[str, Callable[[], pd.DataFrame]] = {
    "nullable_extension": _pandas_frame,
    "pyarrow_backed": lambda: _pandas_frame().convert_dtypes(dtype_backend="pyarrow"),
    "categorical_strings": lambda: _pandas_frame().assign(s=lambda d: d["s"].astype("category")),
    "object_strings": lambda: _pandas_frame().assign(
        s=pd.Series(["a", None, "ünï"], dtype=object, index=[30, 10, 20])
    ),
    "columns_reordered": lambda: _pandas_frame()[["f", "tz", "ts", "s", "b", "i", "id"]],
    "numpy_int_key_int32": lambda: _pandas_frame().assign(id=np.array([1, 2, 3], dtype=np.int32)),
}


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("variant", list(PANDAS_VARIANTS))
def test_pandas_frames_read_back_exactly(tmp_path: Path, variant: str, op: str) -> None:
    t = _fresh(tmp_path, op, PD_SCHEMA)
    _expect_stored(t, op, PANDAS_VARIANTS[variant](), PD_EXPECTED)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(
            lambda: pd.DataFrame(
                {"id": [1], "i": pd.Series([1], dtype=object).astype(object).replace(1, "x")}
            ),
            id="object_str_in_int",
        ),
        pytest.param(
            lambda: pd.DataFrame({"id": [1], "s": pd.Series([1, "a"], dtype=object)[:1]}),
            id="object_int_in_string",
        ),
        pytest.param(
            lambda: pd.DataFrame({"id": [1, 2], "s": pd.Series([1, "a"], dtype=object)}), id="object_mixed"
        ),
        pytest.param(
            lambda: pd.DataFrame({"id": [1], "ts": pd.to_datetime(["2020-01-01"]).tz_localize("UTC")}),
            id="aware_in_naive",
        ),
        pytest.param(
            lambda: pd.DataFrame({"id": [1], "tz": pd.to_datetime(["2020-01-01"])}), id="naive_in_aware"
        ),
        pytest.param(lambda: pd.DataFrame({"id": [1], "i": [1.5]}), id="fraction_in_int"),
        pytest.param(
            lambda: pd.DataFrame({"id": [1], "i": pd.to_timedelta([1], "s")}), id="timedelta_in_int"
        ),
        pytest.param(lambda: pd.DataFrame({"id": [1.0, np.nan]}), id="nan_key"),
        pytest.param(lambda: pd.DataFrame({"id": pd.array([1, None], "Int64")}), id="na_key"),
        pytest.param(lambda: pd.DataFrame([[1, 2, 3]], columns=["id", "i", "i"]), id="duplicate_columns"),
        pytest.param(lambda: pd.DataFrame({0: [1]}), id="int_column_name"),
        pytest.param(lambda: pd.DataFrame({"i": [1]}, index=pd.Index([1], name="id")), id="key_in_index"),
    ],
)
@pytest.mark.parametrize("op", ["upsert", "append", "merge", "overwrite"])
def test_pandas_bad_frames_are_refused_typed(
    request: pytest.FixtureRequest, tmp_path: Path, frame: Callable[[], pd.DataFrame], op: str
) -> None:
    case = request.node.callspec.id.split("-", 1)[1]
    if op == "merge" and case in ("aware_in_naive", "naive_in_aware", "fraction_in_int"):
        pytest.skip("MERGE: documented assignment cast / the timestamp xfail above")
    t = _fresh(tmp_path, op, PD_SCHEMA)
    _write(t, op if op != "overwrite" else "upsert", pd.DataFrame({"id": [7]}))
    _expect_refused(t, tmp_path, op, frame())


def test_pandas_numpy_nan_floats(tmp_path: Path) -> None:
    """pandas' numpy float64 NaN is its missing value: pyarrow's from_pandas, hence mere, stores NULL. Arrow NaN
    (a pyarrow-backed double) stays NaN."""
    t = _table(tmp_path, PD_SCHEMA)
    t.upsert(pd.DataFrame({"id": [1], "f": [np.nan]}))
    t.upsert(pd.DataFrame({"id": [2], "f": pd.array([float("nan")], dtype="double[pyarrow]")}))
    t.upsert(pa.table({"id": pa.array([3], pa.int64()), "f": pa.array([float("nan")])}))
    got = {r["id"]: r["f"] for r in _read(t)}
    assert got[1] is None
    assert got[3] == "NaN"
    assert got[2] in ("NaN", None)


# ----------------------------------------------------------------------------------- Polars frames


def test_polars_frames_read_back_exactly(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("s", pa.string()),
            ("tz", pa.timestamp("us", "UTC")),
            ("naive", pa.timestamp("ns")),
            ("dec", pa.decimal128(10, 2)),
            ("dur", pa.duration("us")),
            ("l", pa.list_(pa.int64())),
            ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
            ("u8", pa.int16()),
            ("d", pa.date32()),
        ]
    )
    df = pl.DataFrame(
        {
            "id": [1, 2, 3],
            "s": ["a", None, "a string longer than twelve bytes"],
            "tz": pl.Series([dt.datetime(2020, 1, 1, 9), None, dt.datetime(2021, 1, 1)]).dt.replace_time_zone(
                "Asia/Tokyo"
            ),
            "naive": pl.Series(
                [dt.datetime(2020, 1, 1), None, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)]
            ).cast(pl.Datetime("ns")),
            "dec": pl.Series(
                [decimal.Decimal("1.23"), None, decimal.Decimal("-99999999.99")], dtype=pl.Decimal(10, 2)
            ),
            "dur": pl.Series([dt.timedelta(seconds=1), None, dt.timedelta(microseconds=-3)]),
            "l": [[1, 2], None, []],
            "st": [{"a": 1, "b": "x"}, None, {"a": None, "b": "z"}],
            "u8": pl.Series([0, None, 255], dtype=pl.UInt8),
            "d": [dt.date(2020, 2, 29), None, dt.date(1, 1, 1)],
        }
    )
    t = _table(tmp_path, schema)
    t.upsert(df)
    got = _read(t)
    assert got == [
        {
            "id": 1,
            "s": "a",
            "tz": ("tz", dt.datetime(2020, 1, 1, 0)),
            "naive": ("naive", pd.Timestamp("2020-01-01").value),
            "dec": decimal.Decimal("1.23"),
            "dur": dt.timedelta(seconds=1),
            "l": [1, 2],
            "st": {"a": 1, "b": "x"},
            "u8": 0,
            "d": dt.date(2020, 2, 29),
        },
        {
            "id": 2,
            "s": None,
            "tz": None,
            "naive": None,
            "dec": None,
            "dur": None,
            "l": None,
            "st": None,
            "u8": None,
            "d": None,
        },
        {
            "id": 3,
            "s": "a string longer than twelve bytes",
            "tz": ("tz", dt.datetime(2020, 12, 31, 15)),
            "naive": ("naive", -1000),
            "dec": decimal.Decimal("-99999999.99"),
            "dur": dt.timedelta(microseconds=-3),
            "l": [],
            "st": {"a": None, "b": "z"},
            "u8": 255,
            "d": dt.date(1, 1, 1),
        },
    ]


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(
            lambda: pl.DataFrame({"id": [1], "v": pl.Series([2**40], dtype=pl.Int64)}), id="int_overflow"
        ),
        pytest.param(lambda: pl.DataFrame({"id": [1], "v": ["7"]}), id="string_in_int"),
        pytest.param(lambda: pl.DataFrame({"id": [1], "v": [[1]]}), id="list_in_int"),
        pytest.param(lambda: pl.DataFrame({"id": [1], "s": [{"a": 1}]}), id="struct_in_string"),
        pytest.param(lambda: pl.DataFrame({"id": pl.Series([None, 1], dtype=pl.Int64)}), id="null_key"),
        pytest.param(lambda: pl.DataFrame({"id": [1], "v": pl.Series([1.5])}), id="fraction_in_int"),
        pytest.param(
            lambda: pl.DataFrame({"id": [1], "v": pl.Series([dt.timedelta(1)])}), id="duration_in_int"
        ),
    ],
)
@pytest.mark.parametrize("op", ["upsert", "append", "overwrite"])
def test_polars_bad_frames_are_refused_typed(tmp_path: Path, frame: Callable[[], Any], op: str) -> None:
    t = _fresh(tmp_path, op)
    _write(t, op if op != "overwrite" else "upsert", pl.DataFrame({"id": [9]}))
    _expect_refused(t, tmp_path, op, frame())


def test_polars_lazy_frame_is_refused_typed(tmp_path: Path) -> None:
    t = _table(tmp_path)
    _expect_refused(t, tmp_path, "upsert", pl.DataFrame({"id": [1]}).lazy())


# --------------------------------------------------------------------------------- DuckDB results


def _duck() -> Any:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
    return con


def _duck_arrow(rel: Any) -> pa.Table:
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


DUCK_SQL = """
SELECT i::BIGINT AS id,
       i::HUGEINT * 100000000000000000000 AS h,
       ('00000000-0000-0000-0000-00000000000' || i)::UUID AS u,
       (CASE WHEN i % 2 = 0 THEN 'sad' ELSE 'ok' END)::mood AS m,
       TIMESTAMPTZ '2020-01-01 00:00:00+02' + to_seconds(i) AS tstz,
       [i, NULL] AS l,
       {'a': i, 'b': 'x' || i} AS st,
       i::UBIGINT AS ub,
       1.5::DECIMAL(4, 1) + i AS d
FROM range(3) t(i)
"""


def _duck_expected() -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "h": decimal.Decimal(i * 10**20),
            "u": f"00000000-0000-0000-0000-00000000000{i}",
            "m": "sad" if i % 2 == 0 else "ok",
            "tstz": ("tz", dt.datetime(2019, 12, 31, 22, 0, i)),
            "l": [i, None],
            "st": {"a": i, "b": f"x{i}"},
            "ub": i,
            "d": decimal.Decimal("1.5") + i,
        }
        for i in range(3)
    ]


DUCK_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("h", pa.decimal128(38, 0)),
        ("u", pa.string()),
        ("m", pa.string()),
        ("tstz", pa.timestamp("us", "UTC")),
        ("l", pa.list_(pa.int64())),
        ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
        ("ub", pa.int64()),
        ("d", pa.decimal128(10, 1)),
    ]
)


@pytest.mark.parametrize("form", ["arrow_table", "record_batch_reader", "relation"])
@pytest.mark.parametrize("op", ALL_OPS)
def test_duckdb_results_read_back_exactly(tmp_path: Path, form: str, op: str) -> None:
    con = _duck()
    rel = con.sql(DUCK_SQL)
    data: Any
    if form == "arrow_table":
        data = _duck_arrow(rel)
    elif form == "record_batch_reader":
        data = rel.to_arrow_reader(2) if hasattr(rel, "to_arrow_reader") else rel.fetch_record_batch(2)
    else:
        data = rel
    t = _fresh(tmp_path, op, DUCK_SCHEMA)
    _expect_stored(t, op, data, _duck_expected())


def test_duckdb_interval_is_refused_at_create_and_at_write(tmp_path: Path) -> None:
    con = _duck()
    data = _duck_arrow(con.sql("SELECT 1::BIGINT AS id, to_seconds(5) AS iv"))
    cat = mere.connect(tmp_path / "wh")
    with pytest.raises(UnsupportedType):
        cat.create_table("ing.iv", data.schema, primary_key="id")
    t = _table(tmp_path, pa.schema([pa.field("id", pa.int64(), nullable=False), ("iv", pa.duration("us"))]))
    _expect_refused(t, tmp_path, "upsert", data, SchemaMismatch)
    _expect_refused(t, tmp_path, "merge", data)


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param(
            "SELECT 1::BIGINT AS id, 100000000000000000000::HUGEINT AS ub", id="hugeint_overflow_int64"
        ),
        pytest.param("SELECT 1::BIGINT AS id, 18446744073709551615::UBIGINT AS ub", id="ubigint_overflow"),
        pytest.param("SELECT 1::BIGINT AS id, gen_random_uuid() AS h", id="uuid_in_decimal"),
        pytest.param("SELECT 1::BIGINT AS id, 12345678901.5::DECIMAL(12,1) AS d", id="decimal_overflow"),
        pytest.param("SELECT 1::BIGINT AS id, 1.25::DECIMAL(4,2) AS d", id="decimal_scale"),
        pytest.param("SELECT 1::BIGINT AS id, TIMESTAMP '2020-01-01' AS tstz", id="naive_in_tz"),
        pytest.param("SELECT NULL::BIGINT AS id", id="null_key"),
        pytest.param("SELECT 1::BIGINT AS id, [[1]] AS l", id="nested_list"),
        pytest.param("SELECT 1::BIGINT AS id, {'a': 1} AS st", id="struct_fields_differ"),
    ],
)
@pytest.mark.parametrize("op", ["upsert", "append", "overwrite"])
def test_duckdb_bad_results_are_refused_typed(tmp_path: Path, sql: str, op: str) -> None:
    t = _fresh(tmp_path, op, DUCK_SCHEMA)
    _write(t, op if op != "overwrite" else "upsert", pa.table({"id": pa.array([7], pa.int64())}))
    _expect_refused(t, tmp_path, op, _duck_arrow(_duck().sql(sql)))


# ------------------------------------------------------------- partition columns in encoded layouts

PART_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("day", pa.string()), ("v", pa.int32())])
PART_LAYOUTS = {
    "dictionary": lambda: pa.array(["b", "c", None, "x/y=%"]).dictionary_encode(),
    "string_view": lambda: pa.array(["b", "c", None, "x/y=%"], pa.string_view()),
    "run_end": lambda: pc.run_end_encode(pa.array(["b", "c", None, "x/y=%"])),
    "large_string": lambda: pa.array(["b", "c", None, "x/y=%"], pa.large_string()),
}


@pytest.mark.parametrize("op", ["upsert", "append", "overwrite", "dynamic", "merge"])
@pytest.mark.parametrize("layout", list(PART_LAYOUTS))
def test_encoded_partition_columns(tmp_path: Path, layout: str, op: str) -> None:
    keyed = op != "append"
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table(
        "ing.p",
        PART_SCHEMA,
        primary_key="id" if keyed else None,
        partition_by="day",
        **({"buckets": 2} if keyed else {}),
    )
    seed = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "day": ["a", "b"], "v": pa.array([1, 2], pa.int32())}
    )
    (t.upsert if keyed else t.append)(seed)
    data = pa.table(
        {
            "id": pa.array([1, 3, 4, 5], pa.int64()),
            "day": PART_LAYOUTS[layout](),
            "v": pa.array([10, 30, 40, 50], pa.int32()),
        }
    )
    new = [(1, "b", 10), (3, "c", 30), (4, None, 40), (5, "x/y=%", 50)]
    if op == "dynamic":
        t.overwrite(data, dynamic=True)
        expected = new  # partitions b, c, NULL and x/y=% replaced; key 1 moved out of 'a' (table-wide keys)
    elif op == "overwrite":
        t.overwrite(data)
        expected = new
    elif op == "append":
        t.append(data)
        expected = [(1, "a", 1), (2, "b", 2), *new]
    else:
        _write(t, op, data)
        expected = [(2, "b", 2), *new]
    got = sorted(((r["id"], r["day"], r["v"]) for r in t.to_arrow().to_pylist()), key=repr)
    assert got == sorted(expected, key=repr)


# ------------------------------------------------------------------ evolve=True with odd input types

EVOLVE_OK = {
    "string_view": (lambda: pa.array(["a", "b" * 20], pa.string_view()), pa.string(), ["a", "b" * 20]),
    "dictionary": (lambda: pa.array(["a", "b"]).dictionary_encode(), pa.string(), ["a", "b"]),
    "dictionary_int": (lambda: pa.array([5, 6]).dictionary_encode(), pa.int64(), [5, 6]),
    "run_end": (lambda: pc.run_end_encode(pa.array([1, 1], pa.int32())), pa.int32(), [1, 1]),
    "binary_view": (lambda: pa.array([b"a", None], pa.binary_view()), pa.binary(), [b"a", None]),
    "struct_of_dictionary": (
        lambda: pa.StructArray.from_arrays([pa.array(["q", "r"]).dictionary_encode()], ["a"]),
        pa.struct([("a", pa.string())]),
        [{"a": "q"}, {"a": "r"}],
    ),
}
EVOLVE_REFUSED = {
    "interval": lambda: pa.array([pa.scalar((1, 2, 3), pa.month_day_nano_interval())] * 2),
    "uuid_extension": lambda: pa.array([b"0" * 16] * 2, pa.uuid()),
    "null_type": lambda: pa.nulls(2),
    "union": lambda: pa.UnionArray.from_dense(
        pa.array([0, 0], pa.int8()), pa.array([0, 1], pa.int32()), [pa.array([1, 2])]
    ),
    "empty_struct": lambda: pa.array([{}, {}], pa.struct([])),
    "dictionary_of_interval": lambda: pa.DictionaryArray.from_arrays(
        pa.array([0, 0], pa.int32()), pa.array([pa.scalar((1, 2, 3), pa.month_day_nano_interval())])
    ),
}


def _evolving(tmp_path: Path, op: str) -> Table:
    t = _table(tmp_path, CDC_SCHEMA, keyed=op == "upsert")
    (t.upsert if op == "upsert" else t.append)(pa.table({"id": pa.array([1], pa.int64())}))
    return t


@pytest.mark.parametrize("op", ["upsert", "append"])
@pytest.mark.parametrize("case", list(EVOLVE_OK))
def test_evolve_adds_plain_typed_columns(tmp_path: Path, case: str, op: str) -> None:
    make, plain, values = EVOLVE_OK[case]
    t = _evolving(tmp_path, op)
    getattr(t, op)(pa.table({"id": pa.array([2, 3], pa.int64()), "new": make()}), evolve=True)
    assert t.refresh().schema.field("new").type == plain
    assert [r["new"] for r in _read(t)] == [None, *values]


@pytest.mark.parametrize("op", ["upsert", "append"])
@pytest.mark.parametrize("case", list(EVOLVE_REFUSED))
def test_evolve_refuses_unstorable_types_without_adding_anything(tmp_path: Path, case: str, op: str) -> None:
    t = _evolving(tmp_path, op)
    before = (_state(t, tmp_path), t.schema)
    with pytest.raises(UnsupportedType):
        getattr(t, op)(
            pa.table({"id": pa.array([2, 3], pa.int64()), "new": EVOLVE_REFUSED[case]()}), evolve=True
        )
    assert (_state(t, tmp_path), t.refresh().schema) == before


@pytest.mark.parametrize("op", ["upsert", "append"])
def test_evolve_with_a_list_view_column(tmp_path: Path, op: str) -> None:
    t = _evolving(tmp_path, op)
    before = (_state(t, tmp_path), t.schema)
    try:
        getattr(t, op)(
            pa.table(
                {"id": pa.array([2, 3], pa.int64()), "new": pa.array([[1], None], pa.list_view(pa.int32()))}
            ),
            evolve=True,
        )
    except MereError:
        assert (_state(t, tmp_path), t.refresh().schema) == before
        return
    assert [r["new"] for r in _read(t)] == [None, [1], None]


# --------------------------------------------------------------- data read back from another mere table


def test_rows_read_from_another_mere_table_round_trip(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    src_schema = pa.schema(
        [
            pa.field("k", pa.int32(), nullable=False),
            ("s", pa.large_string()),
            ("ts", pa.timestamp("ms", "Europe/Paris")),
            ("d", pa.decimal128(6, 2)),
            ("l", pa.large_list(pa.int16())),
            ("u", pa.uint32()),
        ]
    )
    src = cat.create_table("ing.src", src_schema, primary_key="k", buckets=3)
    rows = {
        "k": pa.array([1, 2, 3], pa.int32()),
        "s": pa.array(["x", None, "é" * 20], pa.large_string()),
        "ts": pa.array([0, None, 1_600_000_000_123], pa.timestamp("ms", "Europe/Paris")),
        "d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-9999.99")], pa.decimal128(6, 2)),
        "l": pa.array([[1, -1], None, []], pa.large_list(pa.int16())),
        "u": pa.array([0, None, 2**32 - 1], pa.uint32()),
    }
    src.upsert(pa.table(rows))
    src.delete("k = 2")
    dst_schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("s", pa.string()),
            ("ts", pa.timestamp("us", "UTC")),
            ("d", pa.decimal128(12, 4)),
            ("l", pa.list_(pa.int64())),
            ("u", pa.int64()),
        ]
    )
    expected = [
        {
            "k": 1,
            "s": "x",
            "ts": ("tz", dt.datetime(1970, 1, 1)),
            "d": decimal.Decimal("1.5000"),
            "l": [1, -1],
            "u": 0,
        },
        {
            "k": 3,
            "s": "é" * 20,
            "ts": ("tz", dt.datetime(2020, 9, 13, 12, 26, 40, 123000)),
            "d": decimal.Decimal("-9999.9900"),
            "l": [],
            "u": 2**32 - 1,
        },
    ]
    for n, source in enumerate(
        [
            lambda: src.scan(),
            lambda: src.to_arrow(),
            lambda: pa.table(src.scan()).combine_chunks().to_batches()[0],
        ]
    ):
        dst = cat.create_table(f"ing.dst{n}", dst_schema, primary_key="k", buckets=2)
        dst.upsert(source())
        assert _rows(dst.to_arrow(), "k") == expected
        # MERGE: the same rows without the large_list column (see the large_list xfail below)
        dst.merge(
            pa.table(source()).drop_columns(["l"])
        ).when_matched_update_all().when_not_matched_insert_all().execute()
        assert _rows(dst.to_arrow(), "k") == expected


def test_a_change_feed_is_refused_by_a_plain_table_and_accepted_after_dropping_its_columns(
    tmp_path: Path,
) -> None:
    cat = mere.connect(tmp_path / "wh")
    src = cat.create_table("ing.src", CDC_SCHEMA, primary_key="id")
    src.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 2], pa.int32())}))
    start = src.version
    src.upsert(pa.table({"id": pa.array([3], pa.int64()), "v": pa.array([3], pa.int32())}))
    feed = src.changes(start).read_all()
    dst = _table(tmp_path / "d", CDC_SCHEMA)
    _expect_refused(dst, tmp_path / "d", "upsert", feed, SchemaMismatch)
    dst.upsert(feed.drop_columns([c for c in feed.column_names if c.startswith("_")]))
    assert _read(dst) == [{"id": 3, "v": 3}]


# --------------------------------------------------------------------- duplicate keys in one batch


@pytest.mark.parametrize("layout", ["plain", "dictionary_key", "run_end_key", "chunks", "reader"])
def test_duplicate_keys_in_one_upsert_apply_in_row_order(tmp_path: Path, layout: str) -> None:
    """docs/concepts.md: duplicate keys in one batch apply in order (the last row of a key wins)."""
    ids = [5, 1, 5, 2, 5, 1]
    vs = [1, 2, 3, 4, 5, None]
    if layout == "dictionary_key":
        data: Any = pa.table(
            {"id": pa.array(ids, pa.int64()).dictionary_encode(), "v": pa.array(vs, pa.int32())}
        )
    elif layout == "run_end_key":
        data = pa.table(
            {"id": pc.run_end_encode(pa.array(sorted(ids), pa.int64())), "v": pa.array(vs, pa.int32())}
        )
        ids = sorted(ids)
    elif layout == "chunks":
        data = pa.table(
            {
                "id": pa.chunked_array([ids[:2], [], ids[2:]], pa.int64()),
                "v": pa.chunked_array([vs[:2], [], vs[2:]], pa.int32()),
            }
        )
    elif layout == "reader":
        whole = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.int32())})
        data = pa.RecordBatchReader.from_batches(whole.schema, whole.to_batches(max_chunksize=1))
    else:
        data = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.int32())})
    model: dict[int, Any] = dict(zip(ids, vs, strict=True))  # a later row of a key replaces an earlier one
    t = _table(tmp_path, CDC_SCHEMA, buckets=2)
    t.upsert(data)
    assert _read(t) == [{"id": k, "v": model[k]} for k in sorted(model)]


def test_duplicate_keys_in_one_merge_source_are_refused(tmp_path: Path) -> None:
    t = _table(tmp_path, CDC_SCHEMA)
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    for ids in ([1, 1], [3, 3]):
        before = _state(t, tmp_path)
        with pytest.raises(MereError):
            t.merge(
                pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([5, 6], pa.int32())})
            ).when_matched_update_all().when_not_matched_insert_all().execute()
        assert _state(t, tmp_path) == before


@pytest.mark.parametrize("kind", ["polars", "large_list", "fixed_size_list"])
@pytest.mark.parametrize("clause", ["update_all", "insert_all"])
def test_merge_stores_lossless_list_layouts_like_upsert(tmp_path: Path, kind: str, clause: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("l", pa.list_(pa.int64()))])
    t = _table(tmp_path, schema)
    t.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    key = 1 if clause == "update_all" else 2
    source: Any
    if kind == "polars":
        source = pl.DataFrame({"id": [key], "l": [[1, 2]]})
    else:
        typ = pa.large_list(pa.int64()) if kind == "large_list" else pa.list_(pa.int64(), 2)
        source = pa.table({"id": pa.array([key], pa.int64()), "l": pa.array([[1, 2]], typ)})
    merge = t.merge(source)
    merge = merge.when_matched_update_all() if clause == "update_all" else merge.when_not_matched_insert_all()
    merge.execute()
    assert {r["id"]: r["l"] for r in _read(t)}[key] == [1, 2]


# ----------------------------------------------------------- a source that fails in the middle of a stream


@pytest.mark.parametrize("failure", ["engine_error", "null_key_late"])
@pytest.mark.parametrize("op", ["upsert", "append", "overwrite"])
def test_a_stream_failing_midway_writes_nothing(tmp_path: Path, op: str, failure: str) -> None:
    """A RecordBatchReader whose 4th batch fails (the engine raises, or a late batch holds a NULL key), written
    in tiny runs: no version, no file left behind, the old rows intact."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.int32())])

    def batches() -> Any:
        for i in range(6):
            if i == 3:
                if failure == "engine_error":
                    raise RuntimeError("the engine died")
                yield pa.record_batch(
                    {"id": pa.array([None], pa.int64()), "v": pa.array([1], pa.int32())}, schema=schema
                )
                continue
            ids = pa.array(range(i * 500, i * 500 + 500), pa.int64())
            yield pa.record_batch({"id": ids, "v": pa.array([i] * 500, pa.int32())}, schema=schema)

    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table(
        "ing.s",
        CDC_SCHEMA,
        primary_key="id" if op != "append" else None,
        properties={"write.chunk-bytes": "1024"},
    )
    _write(t, "append" if op == "append" else "upsert", pa.table({"id": pa.array([1], pa.int64())}))
    before = _state(t, tmp_path)
    with pytest.raises((RuntimeError, MereError)) as caught:
        _write(t, op, pa.RecordBatchReader.from_batches(schema, batches()))
    if failure == "null_key_late":
        assert isinstance(caught.value, MereError)
    assert _state(t, tmp_path) == before


# ------------------------------------------------------ property: any physical layout, same logical rows

KEYS = st.integers(min_value=-5, max_value=40)
TEXT = st.one_of(st.none(), st.text(alphabet="aé_Z\u00ff", max_size=20))


def _encode(column: pa.Array, how: str) -> pa.Array:
    if how == "dictionary":
        return column.dictionary_encode()
    if how == "run_end":
        return pc.run_end_encode(column)
    if how == "view" and pa.types.is_string(column.type):
        return column.cast(pa.string_view())
    if how == "large" and pa.types.is_string(column.type):
        return column.cast(pa.large_string())
    return column


@st.composite
def _batches(draw: Any) -> tuple[pa.Table | pa.RecordBatchReader, list[tuple[int, str | None, int | None]]]:
    rows = draw(
        st.lists(st.tuples(KEYS, TEXT, st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))), max_size=12)
    )
    pad = draw(st.integers(0, 3))
    ids = pa.array([0] * pad + [r[0] for r in rows], pa.int64()).slice(pad)
    texts = pa.array([None] * pad + [r[1] for r in rows], pa.string()).slice(pad)
    vals = pa.array([0] * pad + [r[2] for r in rows], pa.int64()).slice(pad)  # int64 that fits int32
    key_how = draw(st.sampled_from(["plain", "dictionary", "run_end"]))
    text_how = draw(st.sampled_from(["plain", "dictionary", "run_end", "view", "large"]))
    cols = {"id": _encode(ids, key_how), "s": _encode(texts, text_how), "v": vals}
    order = draw(st.permutations(list(cols)))
    table = pa.table({c: cols[c] for c in order})
    cut = draw(st.integers(0, len(rows)))
    if draw(st.booleans()):
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut, 0), table.slice(cut)])
    if draw(st.booleans()):
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=3)), rows
    return table, rows


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["upsert", "merge", "delete"]), _batches()), min_size=1, max_size=4
    )
)
def test_any_layout_of_the_same_rows_writes_the_same_table(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Any]
) -> None:
    tmp_path = tmp_path_factory.mktemp("prop")
    t = _table(tmp_path, SCHEMA, buckets=3)
    model: dict[int, dict[str, Any]] = {}
    for op, (data, rows) in steps:
        if op == "merge" and len({r[0] for r in rows}) != len(rows):
            op = "upsert"  # MERGE refuses duplicate source keys (checked elsewhere)
        if op == "delete":
            keys = data.read_all() if isinstance(data, pa.RecordBatchReader) else data
            t.delete(keys.select(["id"]))
            for k, _, _ in rows:
                model.pop(k, None)
            continue
        if op == "merge":
            t.merge(data).when_matched_update_all().when_not_matched_insert_all().execute()
        else:
            t.upsert(data)
        for k, text, v in rows:
            model[k] = {"id": k, "s": text, "v": v}
        assert _read(t) == [model[k] for k in sorted(model)]
    assert _read(t) == [model[k] for k in sorted(model)]


# ---------------------------------------------- merge operators and sequences fed encoded layouts

OPS_SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("seq", pa.int64()), ("v", pa.int64()), ("s", pa.string())]
)


def _ops_table(tmp_path: Path, **kw: Any) -> Table:
    t = _table(tmp_path, OPS_SCHEMA, **kw)
    t.upsert(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "seq": pa.array([5, 5], pa.int64()),
                "v": pa.array([1, 1], pa.int64()),
                "s": ["a", "b"],
            }
        )
    )
    return t


ENCODINGS = ["plain", "dictionary", "run_end"]


@pytest.mark.parametrize("how", ENCODINGS)
def test_sequence_column_in_encoded_layouts(tmp_path: Path, how: str) -> None:
    t = _ops_table(tmp_path, sequence_by="seq")
    t.upsert(
        pa.table(
            {
                "id": pa.array([1, 1, 2], pa.int64()),
                "seq": _encode(pa.array([7, 6, 4], pa.int64()), how),
                "v": _encode(pa.array([10, 20, 30], pa.int64()), how),
                "s": pa.array(["x", "y", "z"], pa.string_view()),
            }
        )
    )
    assert _read(t) == [{"id": 1, "seq": 7, "v": 10, "s": "x"}, {"id": 2, "seq": 5, "v": 1, "s": "b"}]


@pytest.mark.parametrize("how", ENCODINGS)
def test_sum_and_concat_fold_encoded_values(tmp_path: Path, how: str) -> None:
    t = _ops_table(tmp_path, merge_operators={"v": "sum", "s": "concat:|"})
    t.upsert(
        pa.table(
            {
                "id": _encode(pa.array([1, 1, 2], pa.int64()), how),
                "v": _encode(pa.array([10, 10, 30], pa.int8()), how),
                "s": _encode(pa.array(["x", "y", None]), how),
            }
        )
    )
    assert _read(t) == [{"id": 1, "seq": 5, "v": 21, "s": "a|x|y"}, {"id": 2, "seq": 5, "v": 31, "s": "b"}]


@pytest.mark.parametrize("how", [*ENCODINGS, "view"])
def test_max_and_last_non_null_fold_encoded_values(tmp_path: Path, how: str) -> None:
    t = _ops_table(tmp_path, merge_operators={"v": "max", "s": "last_non_null"})
    t.upsert(
        pa.table(
            {
                "id": pa.array([1, 1, 2], pa.int64()),
                "v": pa.array([3, None, 0], pa.int64()),
                "s": _encode(pa.array(["x", None, "z"]), how),
            }
        )
    )
    assert _read(t) == [{"id": 1, "seq": 5, "v": 3, "s": "x"}, {"id": 2, "seq": 5, "v": 1, "s": "z"}]


# ------------------------------------------------------------- refused writes inside transactions

REFUSED_IN_TX = {
    "overflow": lambda: pa.table({"id": pa.array([2], pa.int64()), "v": pa.array([2**40], pa.int64())}),
    "dictionary_of_view": lambda: pa.table(
        {"id": pa.array([2], pa.int64()), "v": pa.array(["x"], pa.string_view()).dictionary_encode()}
    ),
    "null_key": lambda: pa.table({"id": pa.array([None], pa.int64())}),
}


@pytest.mark.parametrize("case", list(REFUSED_IN_TX))
def test_a_refused_write_in_a_transaction_drops_the_earlier_writes_too(tmp_path: Path, case: str) -> None:
    cat = mere.connect(tmp_path / "wh")
    a = cat.create_table("ing.a", CDC_SCHEMA, primary_key="id")
    b = cat.create_table("ing.b", CDC_SCHEMA, primary_key="id")
    a.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    b.upsert(pa.table({"id": pa.array([1], pa.int64())}))
    before = (_state(a, tmp_path), _state(b, tmp_path))
    streamed = pa.RecordBatchReader.from_batches(
        pa.schema([("id", pa.int64()), ("v", pa.int32())]),
        [pa.record_batch({"id": pa.array([5], pa.int64()), "v": pa.array([5], pa.int32())})],
    )
    with pytest.raises(MereError), cat.transaction() as tx:
        tx.table("ing.a").upsert(streamed)
        tx.table("ing.b").upsert(REFUSED_IN_TX[case]())
    assert (_state(a, tmp_path), _state(b, tmp_path)) == before
    with pytest.raises(MereError), a.transaction() as one:
        one.upsert(pa.table({"id": pa.array([6], pa.int64())}).to_batches()[0])
        one.upsert(REFUSED_IN_TX[case]())
    assert (_state(a, tmp_path), _state(b, tmp_path)) == before


# ------------------------------------------------------------------- DuckDB edge values, decimal precision


def _as_ints(table: pa.Table) -> list[list[Any]]:
    """Columns as Python lists, timestamps as their integer ticks (infinity is int64's extreme)."""
    out = []
    for col in table.columns:
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        out.append(col.to_pylist())
    return out


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1::BIGINT AS id, 'infinity'::TIMESTAMP AS x",
        "SELECT 1::BIGINT AS id, '-infinity'::TIMESTAMP AS x",
        "SELECT 1::BIGINT AS id, TIMESTAMP_NS '2020-01-01 00:00:00.000000001' AS x",
        "SELECT 1::BIGINT AS id, TIMESTAMP_S '2020-01-01' AS x",
        "SELECT 1::BIGINT AS id, MAP {'a': 1, 'b': NULL} AS x",
        "SELECT 1::BIGINT AS id, '\\xAA\\x00'::BLOB AS x",
        "SELECT 1::BIGINT AS id, [1, NULL]::INT[2] AS x",
        "SELECT 1::BIGINT AS id, 'nan'::DOUBLE AS x",
        "SELECT 1::BIGINT AS id, -99999999999999999999999999999999999999::DECIMAL(38, 0) AS x",
        "SELECT 1::BIGINT AS id, [{'a': [1, NULL]}, NULL] AS x",
    ],
)
def test_duckdb_edge_values_are_stored_exactly(tmp_path: Path, sql: str) -> None:
    data = _duck_arrow(_duck().sql(sql))
    schema = pa.schema([f.with_nullable(f.name != "id") for f in data.schema])
    t = _table(tmp_path, schema)
    t.upsert(data)
    got, want = _as_ints(t.to_arrow()), _as_ints(data)
    assert repr(got) == repr(want)


@pytest.mark.parametrize("source", ["duckdb_hugeint_max", "pyarrow_buffers"])
def test_a_decimal_outside_its_declared_precision_is_refused(tmp_path: Path, source: str) -> None:
    if source == "duckdb_hugeint_max":
        data = _duck_arrow(
            _duck().sql("SELECT 1::BIGINT AS id, 170141183460469231731687303715884105727::HUGEINT AS x")
        )
    else:
        value = 10**38  # 39 digits: one more than decimal128(38, 0) holds
        raw = value.to_bytes(16, "little", signed=True)
        x = pa.Array.from_buffers(pa.decimal128(38, 0), 1, [None, pa.py_buffer(raw)])
        data = pa.table({"id": pa.array([1], pa.int64()), "x": x})
    with pytest.raises(pa.ArrowInvalid):
        data.validate(full=True)
    t = _table(tmp_path, pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.decimal128(38, 0))]))
    _expect_refused(t, tmp_path, "upsert", data)


def test_polars_exotic_dtypes_store_exactly(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("bin", pa.binary()),
            ("nul", pa.string()),
            ("arr", pa.list_(pa.int64())),
            ("tm", pa.time64("us")),
            ("dec", pa.decimal128(10, 2)),
            ("ny", pa.timestamp("ns", "UTC")),
            ("ms", pa.timestamp("us")),
            ("f32", pa.float32()),
            ("ls", pa.list_(pa.string())),
        ]
    )
    df = pl.DataFrame(
        {
            "id": [1, 2],
            "bin": pl.Series([b"\x00a", None]),
            "nul": pl.Series([None, None], dtype=pl.Null),
            "arr": pl.Series([[1, 2], None], dtype=pl.Array(pl.Int64, 2)),
            "tm": pl.Series([dt.time(1, 2, 3, 4), None]),
            "dec": pl.Series([decimal.Decimal("1.25"), None], dtype=pl.Decimal(None, 2)),
            "ny": pl.Series([dt.datetime(2020, 1, 1), None]).cast(pl.Datetime("ns", "America/New_York")),
            "ms": pl.Series([dt.datetime(2020, 1, 1, 0, 0, 0, 1000), None]).cast(pl.Datetime("ms")),
            "f32": pl.Series([float("nan"), None], dtype=pl.Float32),
            "ls": pl.Series([["a", "b" * 20], None]),
        }
    )
    t = _table(tmp_path, schema)
    t.upsert(df)
    assert (
        _read(t)
        == [
            {
                "id": 1,
                "bin": b"\x00a",
                "nul": None,
                "arr": [1, 2],
                "tm": dt.time(1, 2, 3, 4),
                "dec": decimal.Decimal("1.25"),
                "ny": ("tz", pd.Timestamp("2020-01-01").value),  # polars casts naive as UTC
                "ms": dt.datetime(2020, 1, 1, 0, 0, 0, 1000),
                "f32": "NaN",
                "ls": ["a", "b" * 20],
            },
            {"id": 2, **dict.fromkeys(schema.names[1:])},
        ]
    )


@pytest.mark.parametrize(
    "series",
    [
        pytest.param(lambda: pl.Series([5, None], dtype=pl.Int128), id="int128"),
        pytest.param(lambda: pl.Series([object(), None], dtype=pl.Object), id="object"),
        pytest.param(lambda: pl.Series([2**64 - 1, None], dtype=pl.UInt64), id="uint64_max"),
    ],
)
def test_polars_unstorable_dtypes_are_refused_typed(tmp_path: Path, series: Callable[[], Any]) -> None:
    t = _table(tmp_path, pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64())]))
    _expect_refused(t, tmp_path, "upsert", pl.DataFrame({"id": [1, 2]}).with_columns(x=series()))


# -------------------------------------------------------- sliced nested columns (offsets inside lists)

NESTED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("l", pa.list_(pa.field("element", pa.int32(), nullable=False))),
        ("st", pa.struct([pa.field("f", pa.int32(), nullable=False), ("g", pa.string())])),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("ll", pa.list_(pa.list_(pa.string()))),
    ]
)


def _nested_rows(n: int = 12) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "l": pa.array(
                [None if i % 3 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())
            ),
            "st": pa.array(
                [None if i % 4 == 1 else {"f": i, "g": None if i % 2 else str(i)} for i in range(n)],
                pa.struct([("f", pa.int32()), ("g", pa.string())]),
            ),
            "m": pa.array(
                [None if i % 5 == 2 else [(str(i), i)] for i in range(n)], pa.map_(pa.string(), pa.int64())
            ),
            "ll": pa.array(
                [None if i % 2 else [[str(i)], None, []] for i in range(n)], pa.list_(pa.list_(pa.string()))
            ),
        }
    )


@pytest.mark.parametrize("op", ["upsert", "append", "merge", "overwrite"])
@pytest.mark.parametrize(
    ("start", "stop", "chunk"), [(0, 12, 0), (1, 7, 0), (5, 11, 2), (3, 4, 0), (7, 12, 3)]
)
def test_sliced_nested_columns_round_trip(tmp_path: Path, start: int, stop: int, chunk: int, op: str) -> None:
    data = _nested_rows().slice(start, stop - start)
    if chunk:
        data = pa.Table.from_batches(data.to_batches(max_chunksize=chunk), schema=data.schema)
    t = _fresh(tmp_path, op, NESTED_SCHEMA)
    if op == "merge":
        t.merge(data).when_not_matched_insert_all().execute()
    else:
        _write(t, op, data)
    assert _read(t) == _rows(_nested_rows().slice(start, stop - start))
