"""Adversarial trial 53 of the write API: bad arguments and DuckDB as the oracle of UPDATE/DELETE/upsert.

Part one calls every public write method (upsert, append, delete, update, merge, overwrite, truncate,
set_properties, add_column/widen/rename_column/drop_column, set_sequence_by, ``mere.sql``) with bad values
and checks that each raises a typed ``MereError`` and leaves the table as it was: the same version, the
same rows and no new file under the warehouse.

Part two runs random sequences of ``UPDATE ... SET`` with SQL expressions, ``DELETE ... WHERE`` on non-key
columns and upserts with duplicate keys in one batch on tables with one to three key columns (int, string,
date, decimal) and a partition column, and runs the same statements on a DuckDB mirror table: the rows
must agree after every statement, and a statement DuckDB refuses must be refused by mere before anything
is written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError

D = decimal.Decimal
UTC = dt.UTC

# ---------------------------------------------------------------------------------------------------
# Part one: bad arguments are refused typed and change nothing
# ---------------------------------------------------------------------------------------------------

SCHEMA = pa.schema(
    [
        ("k1", pa.int64()),
        ("k2", pa.string()),
        ("p", pa.string()),
        ("v", pa.int32()),
        ("s", pa.string()),
        ("d", pa.decimal128(10, 2)),
        ("ts", pa.timestamp("us", "UTC")),
        ("f", pa.float64()),
    ]
)


def _base() -> pa.Table:
    return pa.table(
        {
            "k1": [1, 2, 3],
            "k2": ["a", "b", "c"],
            "p": ["x", "x", "y"],
            "v": pa.array([1, 2, None], pa.int32()),
            "s": ["aa", None, "cc"],
            "d": pa.array([D("1.50"), None, D("-2.25")], pa.decimal128(10, 2)),
            "ts": pa.array([dt.datetime(2026, 1, 1, tzinfo=UTC)] * 3, pa.timestamp("us", "UTC")),
            "f": [1.0, 2.0, None],
        },
        schema=SCHEMA,
    )


def _row(**columns: Any) -> pa.Table:
    """One row of the base table with some columns replaced (arrays of length one)."""
    base = _base().slice(0, 1)
    data = {name: base[name] for name in base.column_names}
    data.update(columns)
    return pa.table(data)


def _bad_utf8() -> pa.Array:
    """A string array whose one value is the bytes ff fe: not UTF-8 (``validate(full=True)`` refuses it)."""
    offsets = pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00")
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])


def _files(root: Path) -> list[str]:
    """Every file under the warehouse but the SQLite catalog's own."""
    return sorted(
        os.path.join(d, f) for d, _, names in os.walk(root) for f in names if not f.startswith("catalog")
    )


BAD_CALLS: dict[str, Callable[[mere.Table, mere.Catalog], Any]] = {
    # upsert: data, idempotency_key, evolve
    "upsert-data-int": lambda t, c: t.upsert(5),
    "upsert-data-none": lambda t, c: t.upsert(None),
    "upsert-data-list": lambda t, c: t.upsert([]),
    "upsert-data-str": lambda t, c: t.upsert("k1"),
    "upsert-no-columns": lambda t, c: t.upsert(pa.table({})),
    "upsert-null-key": lambda t, c: t.upsert(_row(k1=pa.array([None], pa.int64()))),
    "upsert-null-string-key": lambda t, c: t.upsert(_row(k2=pa.array([None], pa.string()))),
    "upsert-nan-into-int": lambda t, c: t.upsert(_row(v=pa.array([float("nan")]))),
    "upsert-inf-into-int": lambda t, c: t.upsert(_row(v=pa.array([float("inf")]))),
    "upsert-inf-into-decimal": lambda t, c: t.upsert(_row(d=pa.array([float("inf")]))),
    "upsert-int64-beyond-int32": lambda t, c: t.upsert(_row(v=pa.array([2**40]))),
    "upsert-string-into-int": lambda t, c: t.upsert(_row(v=pa.array(["1"]))),
    "upsert-int-into-string-key": lambda t, c: t.upsert(_row(k2=pa.array([1]))),
    "upsert-bool-into-int": lambda t, c: t.upsert(_row(v=pa.array([True]))),
    "upsert-decimal-too-many-digits": lambda t, c: t.upsert(
        _row(d=pa.array([D("123456789012.00")], pa.decimal128(20, 2)))
    ),
    "upsert-decimal-too-fine": lambda t, c: t.upsert(_row(d=pa.array([D("1.234")], pa.decimal128(10, 3)))),
    "upsert-decimal256-huge": lambda t, c: t.upsert(
        _row(d=pa.array([D("1" + "0" * 50)], pa.decimal256(60, 0)))
    ),
    "upsert-timestamp-naive": lambda t, c: t.upsert(_row(ts=pa.array([1], pa.timestamp("us")))),
    "upsert-timestamp-ns-fraction": lambda t, c: t.upsert(
        _row(ts=pa.array([1_000_000_000_000_000_001], pa.timestamp("ns", "UTC")))
    ),
    "upsert-timestamp-ns-other-zone-fraction": lambda t, c: t.upsert(
        _row(ts=pa.array([1_000_000_000_000_000_001], pa.timestamp("ns", "Asia/Kolkata")))
    ),
    "upsert-date-into-timestamp": lambda t, c: t.upsert(_row(ts=pa.array([dt.date(2026, 1, 1)]))),
    "upsert-unknown-column": lambda t, c: t.upsert(_row(zz=pa.array([1]))),
    "upsert-key-column-missing": lambda t, c: t.upsert(_row().drop_columns(["k2"])),
    "upsert-partition-column-missing": lambda t, c: t.upsert(_row().drop_columns(["p"])),
    "upsert-idempotency-key-int": lambda t, c: t.upsert(_row(), idempotency_key=5),
    "upsert-idempotency-key-empty": lambda t, c: t.upsert(_row(), idempotency_key=""),
    "upsert-idempotency-key-huge": lambda t, c: t.upsert(_row(), idempotency_key="x" * 100_000),
    "upsert-evolve-str": lambda t, c: t.upsert(_row(), evolve="yes"),
    "upsert-evolve-null-type": lambda t, c: t.upsert(_row(zz=pa.array([None])), evolve=True),
    "append-keyed": lambda t, c: t.append(_row()),
    # update: set, where, idempotency_key
    "update-set-empty": lambda t, c: t.update(set={}),
    "update-set-none": lambda t, c: t.update(set=None),  # type: ignore[arg-type]
    "update-set-list": lambda t, c: t.update(set=["v"]),  # type: ignore[arg-type]
    "update-set-int-value": lambda t, c: t.update(set={"v": 1}),  # type: ignore[dict-item]
    "update-set-unknown": lambda t, c: t.update(set={"zz": "1"}),
    "update-set-key": lambda t, c: t.update(set={"k1": "k1 + 1"}),
    "update-set-key-null": lambda t, c: t.update(set={"k2": "NULL"}),
    "update-string-into-int": lambda t, c: t.update(set={"v": "'abc'"}),
    "update-int-into-string": lambda t, c: t.update(set={"s": "5"}),
    "update-int32-overflow": lambda t, c: t.update(set={"v": "v * 2000000000"}),
    "update-int64-overflow": lambda t, c: t.update(set={"v": "9223372036854775807 + v"}),
    "update-nan-into-int": lambda t, c: t.update(set={"v": "DOUBLE 'NaN'"}),
    "update-inf-into-int": lambda t, c: t.update(set={"v": "DOUBLE 'inf'"}),
    "update-inf-into-decimal": lambda t, c: t.update(set={"d": "DOUBLE 'inf'"}),
    "update-nan-into-decimal": lambda t, c: t.update(set={"d": "CAST('NaN' AS DOUBLE)"}),
    "update-decimal-overflow": lambda t, c: t.update(set={"d": "d * 100000000000"}),
    "update-decimal-literal-39-digits": lambda t, c: t.update(
        set={"d": "12345678901234567890123456789012345678.5"}
    ),
    "update-integer-literal-100-digits": lambda t, c: t.update(set={"v": "1" + "0" * 100}),
    "update-naive-timestamp-literal": lambda t, c: t.update(set={"ts": "TIMESTAMP '2026-01-01 00:00:00'"}),
    "update-unparsable-timestamp": lambda t, c: t.update(set={"ts": "'yesterday'"}),
    "update-syntax-error": lambda t, c: t.update(set={"v": "v +"}),
    "update-unknown-function": lambda t, c: t.update(set={"s": "chr(0)"}),
    "update-where-int": lambda t, c: t.update(set={"v": "1"}, where=5),
    "update-where-nan": lambda t, c: t.update(set={"v": "1"}, where=float("nan")),
    "update-where-unknown": lambda t, c: t.update(set={"v": "1"}, where="zz = 1"),
    "update-where-not-boolean": lambda t, c: t.update(set={"v": "1"}, where="v + 1"),
    "update-where-string-vs-int": lambda t, c: t.update(set={"v": "1"}, where="v = '1'"),
    "update-idempotency-key-empty": lambda t, c: t.update(set={"v": "1"}, idempotency_key=""),
    # delete: where, idempotency_key
    "delete-none": lambda t, c: t.delete(None),
    "delete-int": lambda t, c: t.delete(5),
    "delete-empty-text": lambda t, c: t.delete(""),
    "delete-blank-text": lambda t, c: t.delete("   "),
    "delete-nan": lambda t, c: t.delete(float("nan")),
    "delete-empty-list": lambda t, c: t.delete([]),
    "delete-unknown-column": lambda t, c: t.delete("zz > 1"),
    "delete-not-boolean": lambda t, c: t.delete("v"),
    "delete-keys-null": lambda t, c: t.delete(
        pa.table({"k1": pa.array([None], pa.int64()), "k2": ["a"], "p": ["x"]})
    ),
    "delete-keys-wrong-type": lambda t, c: t.delete(pa.table({"k1": ["1"], "k2": ["a"], "p": ["x"]})),
    "delete-keys-missing-key-column": lambda t, c: t.delete(pa.table({"k1": [1]})),
    "delete-idempotency-key-float": lambda t, c: t.delete("TRUE", idempotency_key=1.5),
    # truncate
    "truncate-idempotency-key-int": lambda t, c: t.truncate(idempotency_key=5),
    "truncate-idempotency-key-bytes": lambda t, c: t.truncate(idempotency_key=b"k"),
    # overwrite: data, partition, dynamic, idempotency_key
    "overwrite-partition-unknown": lambda t, c: t.overwrite(_row(), partition={"zz": "x"}),
    "overwrite-partition-nan": lambda t, c: t.overwrite(_row(), partition={"p": float("nan")}),
    "overwrite-partition-list": lambda t, c: t.overwrite(_row(), partition=[]),  # type: ignore[arg-type]
    "overwrite-partition-text": lambda t, c: t.overwrite(_row(), partition="p=x"),  # type: ignore[arg-type]
    "overwrite-partition-empty": lambda t, c: t.overwrite(_row(), partition={}),
    "overwrite-partition-not-a-partition-column": lambda t, c: t.overwrite(_row(), partition={"v": 1}),
    "overwrite-partition-int-for-string": lambda t, c: t.overwrite(_row(), partition={"p": 5}),
    "overwrite-rows-outside-partition": lambda t, c: t.overwrite(_row(), partition={"p": "y"}),
    "overwrite-dynamic-str": lambda t, c: t.overwrite(_row(), dynamic="yes"),  # type: ignore[arg-type]
    "overwrite-null-key": lambda t, c: t.overwrite(_row(k1=pa.array([None], pa.int64()))),
    "overwrite-data-none": lambda t, c: t.overwrite(None),
    # merge: source, on, aliases, clauses, execute(idempotency_key)
    "merge-source-none": lambda t, c: t.merge(None),
    "merge-source-int": lambda t, c: t.merge(5),
    "merge-on-not-every-key": lambda t, c: (
        t.merge(_row(), on="t.k1 = s.k1").when_matched_update_all().execute()
    ),
    "merge-on-int": lambda t, c: t.merge(_row(), on=5),  # type: ignore[arg-type]
    "merge-alias-empty": lambda t, c: t.merge(_row(), source_alias=""),
    "merge-alias-int": lambda t, c: t.merge(_row(), source_alias=1),  # type: ignore[arg-type]
    "merge-alias-equal": lambda t, c: t.merge(_row(), source_alias="t"),
    "merge-no-clause": lambda t, c: t.merge(_row()).execute(),
    "merge-set-empty": lambda t, c: t.merge(_row()).when_matched_update(set={}).execute(),
    "merge-set-int-value": lambda t, c: t.merge(_row()).when_matched_update(set={"v": 1}).execute(),  # type: ignore[dict-item]
    "merge-condition-int": lambda t, c: t.merge(_row()).when_matched_delete(condition=5).execute(),  # type: ignore[arg-type]
    "merge-duplicate-source-keys": lambda t, c: (
        t.merge(pa.concat_tables([_row(), _row()])).when_matched_update_all().execute()
    ),
    "merge-null-source-key-insert": lambda t, c: (
        t.merge(_row(k1=pa.array([None], pa.int64()))).when_not_matched_insert_all().execute()
    ),
    "merge-insert-values-list": lambda t, c: (
        t.merge(_row(k1=pa.array([9]))).when_not_matched_insert(values=["k1"]).execute()  # type: ignore[arg-type]
    ),
    "merge-insert-overflow": lambda t, c: (
        t.merge(_row()).when_matched_update(set={"v": "s.v * 2147483647 * 2"}).execute()
    ),
    "merge-update-decimal-overflow": lambda t, c: (
        t.merge(_row()).when_matched_update(set={"d": "t.d * 1e20"}).execute()
    ),
    "merge-idempotency-key-int": lambda t, c: (
        t.merge(_row()).when_matched_update_all().execute(idempotency_key=5)
    ),
    # properties and schema changes
    "set-properties-empty": lambda t, c: t.set_properties({}),
    "set-properties-none": lambda t, c: t.set_properties(None),  # type: ignore[arg-type]
    "set-properties-nan": lambda t, c: t.set_properties({"write.compression": float("nan")}),  # type: ignore[dict-item]
    "set-properties-int-key": lambda t, c: t.set_properties({5: "x"}),  # type: ignore[dict-item]
    "set-properties-unknown": lambda t, c: t.set_properties({"write.row-group-size": "inf"}),
    "set-properties-nul": lambda t, c: t.set_properties({"write.compression": "zstd\x00"}),
    "add-column-empty-name": lambda t, c: t.add_column("", pa.int64()),
    "add-column-exists": lambda t, c: t.add_column("v", pa.int64()),
    "add-column-exists-other-case": lambda t, c: t.add_column("V", pa.int64()),
    "add-column-type-name-bogus": lambda t, c: t.add_column("z", "nonsense"),
    "add-column-type-int": lambda t, c: t.add_column("z", 5),  # type: ignore[arg-type]
    "add-column-name-int": lambda t, c: t.add_column(5, pa.int64()),  # type: ignore[arg-type]
    "add-column-default-str-for-int": lambda t, c: t.add_column("z", pa.int64(), default="abc"),
    "add-column-default-nan-for-int": lambda t, c: t.add_column("z", pa.int64(), default=float("nan")),
    "add-column-default-too-big": lambda t, c: t.add_column("z", pa.int8(), default=1000),
    "add-column-default-beyond-int64": lambda t, c: t.add_column("z", pa.int64(), default=2**70),
    "add-column-default-decimal-too-many-digits": lambda t, c: t.add_column(
        "z", pa.decimal128(5, 2), default=D("1234.5")
    ),
    "add-column-default-naive-for-zone": lambda t, c: t.add_column(
        "z", pa.timestamp("us", "UTC"), default=dt.datetime(2026, 1, 1)
    ),
    "add-column-null-type": lambda t, c: t.add_column("z", pa.null()),
    "widen-narrower": lambda t, c: t.widen("v", pa.int8()),
    "widen-unknown": lambda t, c: t.widen("zz", pa.int64()),
    "widen-key": lambda t, c: t.widen("k1", pa.decimal128(30, 0)),
    "widen-string-to-int": lambda t, c: t.widen("s", pa.int64()),
    "widen-int-to-double": lambda t, c: t.widen("v", pa.float64()),
    "widen-decimal-less-scale": lambda t, c: t.widen("d", pa.decimal128(12, 1)),
    "widen-type-name-bogus": lambda t, c: t.widen("v", "bogus"),
    "rename-to-existing": lambda t, c: t.rename_column("v", "s"),
    "rename-to-existing-other-case": lambda t, c: t.rename_column("v", "S"),
    "rename-to-empty": lambda t, c: t.rename_column("v", ""),
    "rename-to-int": lambda t, c: t.rename_column("v", 5),  # type: ignore[arg-type]
    "rename-key": lambda t, c: t.rename_column("k1", "kk"),
    "rename-partition": lambda t, c: t.rename_column("p", "pp"),
    "rename-unknown": lambda t, c: t.rename_column("zz", "yy"),
    "drop-key": lambda t, c: t.drop_column("k1"),
    "drop-partition": lambda t, c: t.drop_column("p"),
    "drop-unknown": lambda t, c: t.drop_column("zz"),
    "sequence-unknown": lambda t, c: t.set_sequence_by(["zz"]),
    "sequence-float": lambda t, c: t.set_sequence_by("f"),
    "sequence-key": lambda t, c: t.set_sequence_by("k1"),
    "sequence-int": lambda t, c: t.set_sequence_by(5),  # type: ignore[arg-type]
    "sequence-none-in-list": lambda t, c: t.set_sequence_by([None]),  # type: ignore[list-item]
    "sequence-with-nulls": lambda t, c: t.set_sequence_by("v"),
    "sequence-twice": lambda t, c: t.set_sequence_by(["d", "d"]),
    # mere.sql
    "sql-select": lambda t, c: mere.sql("SELECT 1", catalog=c),
    "sql-int": lambda t, c: mere.sql(5, catalog=c),  # type: ignore[arg-type]
    "sql-empty": lambda t, c: mere.sql("", catalog=c),
    "sql-no-catalog": lambda t, c: mere.sql("DELETE FROM db.t WHERE v = 1", catalog=None),  # type: ignore[arg-type]
    "sql-catalog-str": lambda t, c: mere.sql("DELETE FROM db.t WHERE v = 1", catalog="db"),  # type: ignore[arg-type]
    "sql-two-statements": lambda t, c: mere.sql("DELETE FROM db.t WHERE v = 1; DELETE FROM db.t", catalog=c),
    "sql-unknown-table": lambda t, c: mere.sql("DELETE FROM db.zz WHERE v = 1", catalog=c),
    "sql-returning": lambda t, c: mere.sql("DELETE FROM db.t WHERE v = 1 RETURNING *", catalog=c),
    "sql-update-key": lambda t, c: mere.sql("UPDATE db.t SET k1 = 5", catalog=c),
    "sql-update-string-into-int": lambda t, c: mere.sql("UPDATE db.t SET v = 'x'", catalog=c),
    "sql-unused-source": lambda t, c: mere.sql("DELETE FROM db.t WHERE v = 1", catalog=c, src=_row()),
    "sql-source-int": lambda t, c: mere.sql(
        "MERGE INTO db.t USING src AS s ON t.k1 = s.k1 AND t.k2 = s.k2 WHEN MATCHED THEN DELETE",
        catalog=c,
        src=5,
    ),
    "sql-merge-on-one-of-two-keys": lambda t, c: mere.sql(
        "MERGE INTO db.t USING src AS s ON t.k1 = s.k1 WHEN MATCHED THEN DELETE", catalog=c, src=_row()
    ),
    "sql-parameter": lambda t, c: mere.sql("DELETE FROM db.t WHERE v = ?", catalog=c),
}


@pytest.fixture
def bad_args_table(tmp_path: Path) -> tuple[mere.Catalog, mere.Table, Path]:
    root = tmp_path / "wh"
    cat = mere.connect(str(root))
    t = cat.create_table(
        "db.t",
        SCHEMA,
        primary_key=["k1", "k2"],
        partition_by=["p"],
        buckets=2,
        properties={"compaction.auto": "off"},
    )
    t.upsert(_base())
    return cat, t, root


def _state(t: mere.Table, root: Path) -> tuple[int, list[dict[str, Any]], list[str]]:
    t.refresh()
    rows = t.to_arrow().sort_by([("k1", "ascending")]).to_pylist()
    return t.version, rows, _files(root)


def _refused_unchanged(t: mere.Table, cat: mere.Catalog, root: Path, call: Callable[..., Any]) -> None:
    before = _state(t, root)
    with pytest.raises(MereError):
        call(t, cat)
    assert _state(t, root) == before
    # the handle still writes afterwards
    t.upsert(_row(k1=pa.array([77]), v=pa.array([7], pa.int32())))
    assert t.scan(filter="k1 = 77").to_arrow()["v"].to_pylist() == [7]


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_arguments_are_refused_typed_and_change_nothing(
    bad_args_table: tuple[mere.Catalog, mere.Table, Path], case: str
) -> None:
    cat, t, root = bad_args_table
    _refused_unchanged(t, cat, root, BAD_CALLS[case])


# Were bugs (fixed): values that escaped as a raw Python error, or were stored although Arrow's own checks
# refuse them. Each entry: what went wrong, the call.
BUGGY_CALLS: dict[str, tuple[str, Callable[[mere.Table, mere.Catalog], Any]]] = {
    "idempotency-key-lone-surrogate": (
        "an idempotency_key holding a lone surrogate escapes as builtins.UnicodeEncodeError, not InvalidInput",
        lambda t, c: t.upsert(_row(), idempotency_key="key\ud800"),
    ),
    "transaction-idempotency-key-lone-surrogate": (
        "transaction(idempotency_key=...) with a lone surrogate escapes as UnicodeEncodeError",
        lambda t, c: t.delete("TRUE", idempotency_key="\udcff"),
    ),
    "add-column-lone-surrogate-name": (
        "add_column with a lone surrogate in the name escapes as builtins.UnicodeEncodeError",
        lambda t, c: t.add_column("a\ud800", pa.int64()),
    ),
    "rename-column-lone-surrogate-name": (
        "rename_column to a name with a lone surrogate escapes as builtins.UnicodeEncodeError",
        lambda t, c: t.rename_column("s", "a\ud800"),
    ),
    "upsert-invalid-utf8-value": (
        "a string column holding bytes that are not UTF-8 is stored; reads then fail Arrow validation",
        lambda t, c: t.upsert(_row(k1=pa.array([50]), s=_bad_utf8())),
    ),
    "upsert-invalid-utf8-key": (
        "a string key holding bytes that are not UTF-8 is stored (and hashed into a bucket)",
        lambda t, c: t.upsert(_row(k1=pa.array([51]), k2=_bad_utf8())),
    ),
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(name, id=name) for name in sorted(BUGGY_CALLS)],
)
def test_bad_text_is_refused_typed_and_changes_nothing(
    bad_args_table: tuple[mere.Catalog, mere.Table, Path], case: str
) -> None:
    cat, t, root = bad_args_table
    _refused_unchanged(t, cat, root, BUGGY_CALLS[case][1])


def test_values_that_fit_are_taken_and_read_back(
    bad_args_table: tuple[mere.Catalog, mere.Table, Path],
) -> None:
    """The lossless conversions the README promises: other zones and coarser units, NUL inside text."""
    _, t, _ = bad_args_table
    instant = dt.datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    t.upsert(_row(k1=pa.array([10]), ts=pa.array([instant], pa.timestamp("ms", "America/New_York"))))
    t.upsert(
        _row(k1=pa.array([11]), ts=pa.array([int(instant.timestamp())], pa.timestamp("s", "Asia/Kolkata")))
    )
    t.upsert(_row(k1=pa.array([12]), s=pa.array(["a\x00b"]), k2=pa.array(["\x00"])))
    t.upsert(
        _row(k1=pa.array([13]), d=pa.array([D("1.230")], pa.decimal128(10, 3)), v=pa.array([5], pa.int8()))
    )
    got = {r["k1"]: r for r in t.scan(filter="k1 >= 10").to_arrow().to_pylist()}
    assert got[10]["ts"] == instant and got[11]["ts"] == instant
    assert (got[12]["s"], got[12]["k2"]) == ("a\x00b", "\x00")
    assert (got[13]["d"], got[13]["v"]) == (D("1.23"), 5)
    assert t.scan(filter="s = 'a\x00b'").count() == 1
    t.delete("k2 = '\x00'")
    assert t.scan(filter="k1 = 12").count() == 0


def test_overwrite_with_duplicate_keys_keeps_the_last_row(
    bad_args_table: tuple[mere.Catalog, mere.Table, Path],
) -> None:
    """Rows of one batch apply in order (README), an overwrite's batch too."""
    _, t, _ = bad_args_table
    rows = pa.concat_tables([_row(v=pa.array([10], pa.int32())), _row(v=pa.array([20], pa.int32()))])
    t.overwrite(rows, partition={"p": "x"})
    got = t.to_arrow().sort_by([("k1", "ascending")]).to_pylist()
    assert [(r["k1"], r["p"], r["v"]) for r in got] == [(1, "x", 20), (3, "y", None)]


# ---------------------------------------------------------------------------------------------------
# Part two: UPDATE / DELETE / upsert sequences against DuckDB
# ---------------------------------------------------------------------------------------------------

VALUE_COLUMNS = [("v", pa.int32(), "INTEGER"), ("w", pa.int64(), "BIGINT"), ("s", pa.string(), "VARCHAR"),
                 ("d", pa.decimal128(10, 2), "DECIMAL(10,2)")]  # fmt: skip

LAYOUTS: dict[str, dict[str, Any]] = {
    "int-key": {
        "keys": [("k1", pa.int64(), "BIGINT", st.integers(-3, 3))],
        "part": ("p", pa.string(), "VARCHAR", st.sampled_from(["x", "y", "z"]), ["'x'", "'y'"]),
    },
    "string-date-keys": {
        "keys": [
            ("ks", pa.string(), "VARCHAR", st.sampled_from(["a", "B", "ü", ""])),
            ("kd", pa.date32(), "DATE", st.sampled_from([dt.date(2026, 1, 1), dt.date(1999, 12, 31)])),
        ],
        "part": ("p", pa.int32(), "INTEGER", st.integers(0, 2), ["p + 1", "0", "COALESCE(v, 0) % 3"]),
    },
    "decimal-int-string-keys": {
        "keys": [
            ("kdec", pa.decimal128(9, 2), "DECIMAL(9,2)", st.sampled_from([D("0.00"), D("-1.05"), D("9999999.99")])),
            ("k1", pa.int64(), "BIGINT", st.sampled_from([0, -(2**63), 2**63 - 1])),
            ("ks", pa.string(), "VARCHAR", st.sampled_from(["a", "b"])),
        ],
        "part": ("p", pa.date32(), "DATE", st.sampled_from([dt.date(2026, 1, 1), dt.date(2026, 2, 1)]),
                 ["DATE '2026-03-01'", "p"]),
    },
}  # fmt: skip

VALUES = {
    "v": st.one_of(st.none(), st.integers(-5, 5), st.sampled_from([2**31 - 1, -(2**31)])),
    "w": st.one_of(st.none(), st.integers(-5, 5), st.sampled_from([2**63 - 1, -(2**63), 2**32])),
    "s": st.one_of(st.none(), st.sampled_from(["a", "ab", "Abc", "", " x ", "ü", "a%b", "xyz"])),
    "d": st.one_of(
        st.none(), st.sampled_from([D("0.00"), D("-0.05"), D("1.25"), D("2.50"), D("99999999.99")])
    ),
}

SET_EXPRESSIONS = {
    "v": [
        "v + 1", "-v", "v * 3", "COALESCE(v, 0) + 1", "CASE WHEN v > 2 THEN v - 1 ELSE NULL END", "v * 1000000",
        "v // 2", "v % 3", "v // 0", "v % NULLIF(v, v)", "NULLIF(v, 1)", "length(s)", "CAST(d AS INTEGER)",
        "ROUND(d)", "GREATEST(v, 0)", "LEAST(v, -1)", "abs(v)", "v + w", "2147483647 + v", "CAST(w AS INTEGER)",
        "CASE WHEN s IS NULL THEN 0 WHEN s = '' THEN 1 END", "IF(v IS NULL, 7, v)", "sign(w)",
    ],
    "w": [
        "w * 2", "w + v", "w - 1", "abs(w)", "w // v", "w % v", "w // 3", "COALESCE(w, v, -1)",
        "w * 4611686018427387904", "CAST(d * 100 AS BIGINT)", "length(s) * w", "-w",
        "CASE WHEN w > 0 THEN w ELSE -w END",
    ],
    "s": [
        "upper(s)", "lower(s)", "s || 'x'", "s || NULL", "concat(s, '-', v)", "substring(s, 2, 2)",
        "replace(s, 'a', 'b')", "trim(s)", "ltrim(s)", "left(s, 1)", "COALESCE(s, 'none')",
        "CASE WHEN s LIKE 'a%' THEN NULL ELSE lower(s) END", "CAST(v AS VARCHAR)", "CAST(d AS VARCHAR)",
        "CAST(w AS VARCHAR)", "NULL", "'q'", "substr(s, 2)", "concat(s, s)",
    ],
    "d": [
        "d + 0.005", "d * 1.5", "d * d", "d / 4", "d * 2", "d - 0.01", "COALESCE(d, 0) - v", "ROUND(d, 1)", "d * 100000000", "-d", "d + v",
        "CAST(v AS DECIMAL(10,2))", "d / 3", "abs(d)", "NULL", "CASE WHEN d > 1 THEN d END", "d + 99999999.99",
        "d * 3", "ROUND(d * 1.5, 2)",
    ],
}  # fmt: skip

PREDICATES = [
    "v > 1", "s IS NULL", "s LIKE '%a%'", "d < 0", "COALESCE(v, 0) % 2 = 0", "w BETWEEN -5 AND 5", "NOT (v > 0)",
    "v IN (1, 2, NULL)", "v NOT IN (1, 2)", "s >= 'b'", "length(s) > 2", "d IS NOT NULL AND w < 0", "v = w",
    "s ILIKE 'a%'", "v IS DISTINCT FROM 1", "upper(s) = s", "d = 2.5", "w > 2147483647", "TRUE", "v // 0 IS NULL",
    "w % 2 = 1", "abs(v) < 3 OR s = 'ü'",
]  # fmt: skip


def _layout_columns(layout: dict[str, Any]) -> list[tuple[str, pa.DataType, str]]:
    keys = [(n, a, q) for n, a, q, _ in layout["keys"]]
    name, arrow, sqltype = layout["part"][:3]
    return [*keys, (name, arrow, sqltype), *VALUE_COLUMNS]


def _ops(layout: dict[str, Any]) -> st.SearchStrategy[list[tuple[str, Any]]]:
    row = st.fixed_dictionaries(
        {
            **{n: s for n, _, _, s in layout["keys"]},
            layout["part"][0]: layout["part"][3],
            **VALUES,
        }
    )
    upsert = st.tuples(st.just("upsert"), st.lists(row, min_size=1, max_size=6))
    sets = st.dictionaries(
        st.sampled_from(["v", "w", "s", "d", "p"]), st.integers(0, 100), min_size=1, max_size=3
    ).map(
        lambda picks: {
            c: (layout["part"][4] if c == "p" else SET_EXPRESSIONS[c])[
                i % len(layout["part"][4] if c == "p" else SET_EXPRESSIONS[c])
            ]
            for c, i in picks.items()
        }
    )
    where = st.one_of(st.none(), st.sampled_from(PREDICATES))
    update = st.tuples(st.just("update"), st.tuples(sets, where))
    delete = st.tuples(st.just("delete"), st.sampled_from(PREDICATES))
    return st.lists(st.one_of(upsert, update, update, delete), min_size=2, max_size=7)


def _sql(op: str, arg: Any) -> str:
    if op == "update":
        sets, where = arg
        text = "UPDATE db.t SET " + ", ".join(f"{c} = {e}" for c, e in sets.items())
        return text + (f" WHERE {where}" if where else "")
    return f"DELETE FROM db.t WHERE {arg}"


def _rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


_COUNTER = iter(range(10**9))


def _run_differential(layout_name: str, ops: list[tuple[str, Any]], root: str) -> None:
    layout = LAYOUTS[layout_name]
    columns = _layout_columns(layout)
    names = [n for n, _, _ in columns]
    keys = [n for n, _, _, _ in layout["keys"]]
    schema = pa.schema([(n, a) for n, a, _ in columns])
    cat = mere.connect(root)
    name = f"db.t{next(_COUNTER)}"
    t = cat.create_table(name, schema, primary_key=keys, partition_by=["p"], buckets=2)
    assert t.key_scope == "table"
    con = duckdb.connect(":memory:", config={"threads": "1"})
    con.execute("SET error_on_division_by_zero = false")
    con.execute("CREATE SCHEMA db")
    con.execute("CREATE TABLE db.t (" + ", ".join(f"{n} {q}" for n, _, q in columns) + ")")
    key_match = " AND ".join(f"{k} = ?" for k in keys)
    for step, (op, arg) in enumerate(ops):
        note(f"step {step}: {op} {arg!r}")
        before = t.version
        if op == "upsert":
            # the README's rule: rows of one batch apply in order, the last row of a key wins, and a key
            # that moves to another partition leaves the old one (key_scope="table")
            for r in arg:
                con.execute(f"DELETE FROM db.t WHERE {key_match}", [r[k] for k in keys])
                con.execute(f"INSERT INTO db.t VALUES ({', '.join('?' * len(names))})", [r[n] for n in names])
            t.upsert(pa.Table.from_pylist(arg, schema=schema))
        else:
            text = _sql(op, arg)
            note(text)
            try:
                want_count = con.execute(text).fetchall()[0][0]
                want_error = None
            except duckdb.Error as e:
                want_error = e
            try:
                got = mere.sql(text.replace("db.t", name, 1), catalog=cat)
                got_error = None
            except MereError as e:
                got_error = e
            note(f"duckdb: {want_error!r}; mere: {got_error!r}")
            assert (want_error is None) == (got_error is None), f"duckdb {want_error!r}, mere {got_error!r}"
            if got_error is not None:
                t.refresh()
                assert t.version == before  # refused before anything was committed
            else:
                count = got.rows_deleted if op == "delete" else got.rows_written
                assert count == want_count or (count is None and want_count == 0), (count, want_count)
        t.refresh()
        want = _rows(con.execute(f"SELECT {', '.join(names)} FROM db.t").fetchall())
        got_rows = _rows([tuple(r[n] for n in names) for r in t.to_arrow().to_pylist()])
        assert got_rows == want


@pytest.mark.parametrize("layout_name", sorted(LAYOUTS))
def test_updates_deletes_and_upserts_match_duckdb(layout_name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="mere-trial53-") as root:

        @settings(
            max_examples=int(os.environ.get("H53_EXAMPLES", "12")),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(ops=_ops(LAYOUTS[layout_name]))
        def run(ops: list[tuple[str, Any]]) -> None:
            _run_differential(layout_name, ops, root)

        run()


def _decimal_update(tmp_path: Path, expr: str, column: str = "d") -> tuple[list[Any], list[Any]]:
    """Run ``UPDATE SET column = expr`` on d = 2.50, 1.25, -0.05 in mere and DuckDB: (mere's, DuckDB's)."""
    values = [D("2.50"), D("1.25"), D("-0.05")]
    cat = mere.connect(str(tmp_path / "wh"))
    schema = pa.schema([("k", pa.int64()), ("v", pa.int32()), ("d", pa.decimal128(10, 2))])
    t = cat.create_table("db.t", schema, primary_key="k")
    t.upsert(
        pa.table(
            {
                "k": [1, 2, 3],
                "v": pa.array([0, 0, 0], pa.int32()),
                "d": pa.array(values, schema.field("d").type),
            }
        )
    )
    con = duckdb.connect(":memory:")
    con.execute("CREATE SCHEMA db")
    con.execute("CREATE TABLE db.t (k BIGINT, v INTEGER, d DECIMAL(10,2))")
    con.executemany("INSERT INTO db.t VALUES (?, 0, ?)", [[i + 1, x] for i, x in enumerate(values)])
    text = f"UPDATE db.t SET {column} = {expr}"
    con.execute(text)
    want = [r[0] for r in con.execute(f"SELECT {column} FROM db.t ORDER BY k").fetchall()]
    try:
        mere.sql(text, catalog=cat)
    except MereError as e:
        t.refresh()
        assert t.version == 1  # refused before anything was written
        return [f"refused: {e}"], want
    return t.refresh().to_arrow().sort_by("k")[column].to_pylist(), want


@pytest.mark.parametrize("expr", ["ROUND(d * 1.5, 2)", "d / 3", "CAST(d AS DOUBLE) * 2"])
def test_decimal_and_double_results_stored_into_a_decimal_match_duckdb(tmp_path: Path, expr: str) -> None:
    got, want = _decimal_update(tmp_path, expr)
    assert got == want


@pytest.mark.parametrize("expr", ["d", "d * 3", "CAST(d AS DOUBLE)"])
def test_decimal_and_double_results_stored_into_an_integer_round_as_duckdb(tmp_path: Path, expr: str) -> None:
    """docs/sql.md: decimals round to integers halves away from zero, a DOUBLE's halves to even (2.5 to 2),
    as DuckDB stores them."""
    got, want = _decimal_update(tmp_path, expr, column="v")
    factor = 3 if "3" in expr else 1
    rounding = decimal.ROUND_HALF_EVEN if "DOUBLE" in expr else decimal.ROUND_HALF_UP
    expected = [int((x * factor).quantize(D(1), rounding)) for x in (D("2.50"), D("1.25"), D("-0.05"))]
    assert got == expected
    assert want == expected


@pytest.mark.parametrize("expr", ["d + 0.005", "d * 1.5", "d * d"])
def test_a_decimal_result_of_a_larger_scale_is_rounded_into_its_column_as_in_duckdb(
    tmp_path: Path, expr: str
) -> None:
    got, want = _decimal_update(tmp_path, expr)
    assert got == want


def test_a_double_half_is_rounded_away_from_zero_into_a_decimal(tmp_path: Path) -> None:
    got, want = _decimal_update(tmp_path, "d / 4")
    assert want == [D("0.63"), D("0.31"), D("-0.01")]
    assert got == want
