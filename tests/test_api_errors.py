"""Bad values for every public argument raise a typed MereError and change nothing.

A Hypothesis test throws values of every kind (wrong types, out-of-range numbers, empty and odd strings,
containers, arbitrary objects) at each argument of the public API, one argument at a time. A call may
succeed when the value happens to be valid; when it raises, the error must be a ``MereError`` and a
table it could have written must be exactly as before. Named cases from trying mere as a new user are
checked for their message too.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere import errors

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())])

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["", " ", "a,b", "id,qty", "1; DROP", "∂"]),
    st.binary(max_size=4),
    st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.one_of(st.integers(), st.text(max_size=3)), max_size=2),
    st.just(object()),
    st.just(dt.timedelta(days=-1)),
    st.just(dt.datetime(1900, 1, 1)),
    st.just(math.nan),
    st.just(pa.table({"x": [1]})),
    st.just(SCHEMA),
    st.just(("id",)),
    st.just({"id"}),
)


def _table(tmp: Path) -> tuple[mere.Catalog, mere.Table]:
    cat = mere.connect(str(tmp / "wh"))
    t = cat.create_table(
        "sales.orders",
        SCHEMA,
        primary_key="id",
        partition_by="day",
        buckets=2,
        merge_operators={"qty": "sum"},
        cdc_column="op",
    )
    t.upsert(pa.table({"id": [1, 2], "day": ["d1", "d2"], "qty": [1, 2], "note": ["a", None]}))
    return cat, t


ROWS = {"id": [5], "day": ["d1"], "qty": [1]}

# (name, call with the odd value in one argument); calls get (catalog, table, value).
CALLS: list[tuple[str, Callable[[mere.Catalog, mere.Table, Any], Any]]] = [
    ("connect.warehouse", lambda c, t, v: mere.connect(v)),
    ("connect.catalog", lambda c, t, v: mere.connect(c.storage.uri, catalog=v)),
    ("connect.storage_options", lambda c, t, v: mere.connect(c.storage.uri, storage_options=v)),
    ("connect.filesystem", lambda c, t, v: mere.connect(c.storage.uri, filesystem=v)),
    ("create_table.name", lambda c, t, v: c.create_table(v, SCHEMA)),
    ("create_table.schema", lambda c, t, v: c.create_table("x.a", v)),
    ("create_table.primary_key", lambda c, t, v: c.create_table("x.b", SCHEMA, primary_key=v)),
    ("create_table.partition_by", lambda c, t, v: c.create_table("x.c", SCHEMA, partition_by=v)),
    ("create_table.buckets", lambda c, t, v: c.create_table("x.d", SCHEMA, primary_key="id", buckets=v)),
    (
        "create_table.merge_operators",
        lambda c, t, v: c.create_table("x.e", SCHEMA, primary_key="id", merge_operators=v),
    ),
    (
        "create_table.cdc_column",
        lambda c, t, v: c.create_table("x.f", SCHEMA, primary_key="id", cdc_column=v),
    ),
    ("create_table.properties", lambda c, t, v: c.create_table("x.g", SCHEMA, properties=v)),
    ("create_table.exist_ok", lambda c, t, v: c.create_table("sales.orders", SCHEMA, exist_ok=v)),
    ("table.name", lambda c, t, v: c.table(v)),
    ("exists.name", lambda c, t, v: c.exists(v)),
    ("tables.namespace", lambda c, t, v: c.tables(v)),
    ("drop_table.name", lambda c, t, v: c.drop_table(v)),
    ("drop_table.purge", lambda c, t, v: c.drop_table("nope.nope", purge=v)),
    ("scan.columns", lambda c, t, v: t.scan(columns=v).to_arrow()),
    ("scan.filter", lambda c, t, v: t.scan(filter=v).to_arrow()),
    ("scan.version", lambda c, t, v: t.scan(version=v).to_arrow()),
    ("scan.as_of", lambda c, t, v: t.scan(as_of=v).to_arrow()),
    ("scan.parallel", lambda c, t, v: t.scan(parallel=v).to_arrow()),
    ("scan.window_bytes", lambda c, t, v: t.scan(window_bytes=v).to_arrow()),
    ("scan.queue_batches", lambda c, t, v: t.scan(queue_batches=v).to_arrow()),
    ("scan.select", lambda c, t, v: t.scan().select(v).to_arrow()),
    ("scan.where", lambda c, t, v: t.scan().where(v).to_arrow()),
    ("scan.to_pandas", lambda c, t, v: t.scan().to_pandas(types_mapper=v)),
    ("files.version", lambda c, t, v: t.files(v)),
    ("upsert.data", lambda c, t, v: t.upsert(v)),
    ("upsert.idempotency_key", lambda c, t, v: t.upsert(ROWS, idempotency_key=v)),
    ("append.data", lambda c, t, v: t.append(v)),
    ("delete.where", lambda c, t, v: t.delete(v)),
    ("delete.idempotency_key", lambda c, t, v: t.delete("id = 1", idempotency_key=v)),
    ("update.idempotency_key", lambda c, t, v: t.update({"qty": "qty + 1"}, idempotency_key=v)),
    ("truncate.idempotency_key", lambda c, t, v: t.truncate(idempotency_key=v)),
    ("overwrite.idempotency_key", lambda c, t, v: t.overwrite(ROWS, idempotency_key=v)),
    (
        "merge.idempotency_key",
        lambda c, t, v: t.merge(ROWS).when_matched_update_all().execute(idempotency_key=v),
    ),
    ("overwrite.data", lambda c, t, v: t.overwrite(v)),
    ("overwrite.partition", lambda c, t, v: t.overwrite(ROWS, partition=v)),
    ("stage.data", lambda c, t, v: t.stage(v)),
    ("stage.operation", lambda c, t, v: t.stage(ROWS, operation=v)),
    ("stage.write_id", lambda c, t, v: t.stage(ROWS, write_id=v)),
    ("abort_write.write_id", lambda c, t, v: t.abort_write(v)),
    ("commit.staged", lambda c, t, v: t.commit(v)),
    ("commit.operation", lambda c, t, v: t.commit([], operation=v)),
    ("commit.partition", lambda c, t, v: t.commit([], operation="overwrite", partition=v)),
    ("commit.idempotency_key", lambda c, t, v: t.commit([], idempotency_key=v)),
    ("abort.staged", lambda c, t, v: t.abort(v)),
    ("find_commit.key", lambda c, t, v: t.find_commit(v)),
    ("rollback.expected_version", lambda c, t, v: t.rollback(t.version, expected_version=v)),
    ("compact.min_files", lambda c, t, v: t.compact(min_files=v)),
    ("compact.partition", lambda c, t, v: t.compact(partition=v)),
    ("compact.run", lambda c, t, v: t.compact(min_files=1, run=v)),
    ("expire.older_than", lambda c, t, v: t.expire(older_than=v, dry_run=False)),
    ("cleanup.older_than", lambda c, t, v: t.cleanup(older_than=v, dry_run=False)),
    ("bucket_ids.data", lambda c, t, v: mere.bucket_ids(v, 4)),
    ("bucket_ids.buckets", lambda c, t, v: mere.bucket_ids(pa.table({"id": [1]}), v)),
    ("col.name", lambda c, t, v: mere.col(v)),
]


NOT_OF_A_TABLE = (
    "bucket_ids.",
    "col.",
    "connect.",
    "create_table.",
    "table.",
    "exists.",
    "tables.",
    "drop_table.",
)  # catalog calls


def state(t: mere.Table) -> tuple[Any, ...]:
    return (
        t.version,
        sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"]),
        sorted(t.files().column("path").to_pylist()),
    )


@pytest.mark.parametrize("name", [name for name, _ in CALLS])
def test_property_odd_arguments_raise_typed_errors_and_change_nothing(tmp_path: Path, name: str) -> None:
    cat, t = _table(tmp_path)  # one table per argument: a call that raises must leave it as it was

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(value=ODD)
    def check(value: Any) -> None:
        _check(cat, t, name, value)

    check()


def _check(cat: mere.Catalog, t: mere.Table, name: str, value: Any) -> None:
    call = dict(CALLS)[name]
    before = state(t)
    try:
        call(cat, t, value)
    except errors.MereError as e:
        assert state(t) == before, f"{name}({value!r}) raised but changed the table"
        if not name.startswith(NOT_OF_A_TABLE):
            assert t.name in str(e), f"{name}({value!r}): {type(e).__name__} does not name the table: {e}"
    except Exception as e:  # any other error is the failure this test looks for
        pytest.fail(f"{name}({value!r}) raised {type(e).__module__}.{type(e).__name__}: {e}")


def test_named_cases_say_what_is_allowed(tmp_path: Path) -> None:
    cat, t = _table(tmp_path)
    cases: list[tuple[Callable[[], Any], type[Exception], str]] = [
        (lambda: t.scan(as_of="yesterday"), errors.InvalidInput, "ISO 8601"),
        (lambda: t.compact(min_files="2"), errors.InvalidInput, "positive integer"),
        (lambda: t.expire(older_than=5, dry_run=False), errors.InvalidInput, "timedelta"),
        (lambda: t.cleanup(older_than="x", dry_run=False), errors.InvalidInput, "timedelta"),
        (lambda: t.scan(columns=5), errors.InvalidInput, "list of column names"),
        (lambda: t.scan(columns="id,qty"), errors.SchemaMismatch, r"columns=\['id', 'qty'\]"),
        (lambda: t.scan(verison=3), errors.InvalidInput, "unknown scan option"),
        (
            lambda: cat.create_table("x.y", SCHEMA, primary_key="id", cdc_column="id"),
            errors.InvalidInput,
            "cdc_column 'id' is a primary key column",
        ),
        (
            lambda: cat.create_table("x.y", SCHEMA, partition_by="day", primary_key="id", cdc_column="day"),
            errors.InvalidInput,
            "cdc_column 'day' is a partition column",
        ),
        (lambda: t.set_properties({"": "x"}), errors.InvalidInput, "printable text, not blank"),
        (lambda: t.set_properties({"a\x00b": "x"}), errors.InvalidInput, "printable text"),
        (lambda: t.set_properties({"tier": "a\x00b"}), errors.InvalidInput, "NUL character"),
        (lambda: t.rollback(1, expected_version=9), errors.InvalidInput, "not a version of the table"),
        (lambda: cat.create_table("x.y", SCHEMA, primary_key=5), errors.InvalidInput, "column name"),
        (
            lambda: cat.create_table("x.y", SCHEMA, primary_key="id", buckets=2**40),
            errors.InvalidInput,
            "1 to 100,000",
        ),
        (
            lambda: cat.create_table("x.y", SCHEMA, properties={"write.compresion": "zstd"}),
            errors.InvalidInput,
            "did you mean 'write.compression'",
        ),
        (
            lambda: cat.create_table("x.y", SCHEMA, properties={"read.window-bytes": "8 megs"}),
            errors.InvalidInput,
            "positive byte size",
        ),
        (lambda: mere.connect(5), errors.InvalidInput, "path or URI"),
        (lambda: mere.connect(str(tmp_path), catalog="mysql://u@h/db"), errors.InvalidInput, "PostgreSQL"),
        (lambda: t.delete(None), errors.InvalidInput, "delete\\('TRUE'\\)"),
        (
            lambda: t.scan(as_of=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)),
            errors.NoSuchVersion,
            "2000-01-01T00:00:00\\+00:00.*created at 20",
        ),
    ]
    for call, error, says in cases:
        with pytest.raises(error, match=says):
            call()
    assert cat.tables() == ["sales.orders"]


def test_delete_none_is_refused_and_everything_takes_an_explicit_word(tmp_path: Path) -> None:
    _, t = _table(tmp_path)
    with pytest.raises(errors.InvalidInput):
        t.delete(None)
    assert t.scan().count() == 2
    t.delete("TRUE")
    assert t.scan().count() == 0
    t.upsert(ROWS)
    before = len(t.files())
    record = t.truncate()  # no delete markers: the files just leave the new version
    assert record.operation == "truncate" and record.files_added == 0 and before > 0
    assert t.scan().count() == 0 and len(t.files()) == 0
    assert t.scan(version=record.version - 1).count() == 1  # time travel still sees the rows


def test_reads_and_typos_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "wh"
    cat = mere.connect(str(missing))
    assert cat.tables() == [] and cat.namespaces() == [] and not cat.exists("a.b")
    with pytest.raises(errors.NoSuchTable):
        cat.table("a.b")
    with pytest.raises(errors.NoSuchTable):
        cat.drop_table("a.b")
    with pytest.raises(errors.InvalidInput):
        cat.create_table("a.b", pa.schema([("id", pa.null())]))
    assert not (tmp_path / "typo").exists()
    cat.create_table("a.b", SCHEMA)  # the first table creates the warehouse and its catalog
    assert (missing / "catalog.db").exists()
    file_catalog = tmp_path / "other" / "cat.db"
    assert mere.connect(str(tmp_path / "w2"), catalog=str(file_catalog)).tables() == []
    assert not file_catalog.parent.exists()


def test_tables_and_scans_pickle_and_read_the_same_elsewhere(tmp_path: Path) -> None:
    import pickle
    import subprocess
    import sys

    _, t = _table(tmp_path)
    scan = t.scan(columns=["id", "qty"], filter="qty >= 1")
    again = pickle.loads(pickle.dumps(scan))
    assert again.to_arrow().sort_by("id").equals(scan.to_arrow().sort_by("id"))
    code = (
        "import pickle, sys; s = pickle.loads(sys.stdin.buffer.read()); "
        "print(sorted(r['id'] for r in s.to_arrow().to_pylist()), s.table.version)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(scan), capture_output=True, check=True
    )
    assert out.stdout.decode().split() == ["[1,", "2]", str(t.version)]
    assert pickle.loads(pickle.dumps(t)).scan().count() == 2


def test_scans_have_a_length_and_iterate_batches(tmp_path: Path) -> None:
    _, t = _table(tmp_path)
    scan = t.scan(filter="qty > 1")
    assert len(scan) == 1 and bool(scan)
    batches = list(scan)
    assert all(isinstance(b, pa.RecordBatch) for b in batches) and sum(b.num_rows for b in batches) == 1
    assert bool(t.scan(filter="FALSE")) and len(t.scan(filter="FALSE")) == 0


def test_commit_records_and_history_read_as_a_person_expects(tmp_path: Path) -> None:
    _, t = _table(tmp_path)
    wide = t.upsert({"id": list(range(100, 300)), "day": [f"d{i}" for i in range(200)], "qty": [1] * 200})
    text = repr(wide)
    assert "splits" not in text and "{}" not in text and len(text) < 200, text
    assert f"version={wide.version}" in text and "rows_written=200" in text and "partitions=200" in text
    assert wide.committed_at.tzinfo is dt.UTC and isinstance(wide, mere.CommitResult)
    assert wide.rows_written == 200 and wide.files_added == 200 and wide.files_removed == 0
    assert "splits" not in wide.summary and "partitions" not in wide.summary  # internals stay internal
    t.upsert(ROWS)
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    history = t.history()
    assert [h.expired for h in history] == [True] * (len(history) - 1) + [False]
    assert "expired=True" in repr(history[0])
    with pytest.raises(errors.NoSuchVersion, match="expired"):
        t.scan(version=history[0].version)


def test_drop_with_purge_leaves_no_folders(tmp_path: Path) -> None:
    cat, t = _table(tmp_path)
    location = os.path.join(t.storage.root, t.location)
    assert os.path.isdir(location)
    cat.drop_table("sales.orders", purge=True)
    assert not os.path.exists(location)
    assert os.listdir(os.path.dirname(location)) == []
