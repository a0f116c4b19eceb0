"""``stale_rows`` of writes to ``sequence_by`` tables when a write holds several rows of one key at one
sequence (replays of an event, or distinct events at an equal sequence) and a version with a higher
sequence is stored: each such row is stale (docs/concepts.md, *Write results*), though the write keeps
only its last one. A plain model counts them: a row is stale when its key's highest sequence over every
row sent so far, this write included, is above its own (per partition, or over the table with
``key_scope="table"``).

Every path that counts them is drawn: integer keys (searched in NumPy) and string keys (sorted lookup),
unpartitioned, partition-scoped and table-wide keys (a key moved between partitions within the write),
one file per split and many (small input chunks), and files staged by a worker, pickled as Spark, Dask
and Ray hand them to the driver, then committed.
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere

_dirs = itertools.count()

Event = tuple[int, str, int, str]  # key, partition, sequence, operation ("u" or "d")

events = st.tuples(
    st.integers(0, 3), st.sampled_from(["a", "b"]), st.integers(0, 4), st.sampled_from(["u", "u", "u", "d"])
)
batches = st.lists(st.lists(events, min_size=1, max_size=8), min_size=1, max_size=5)


def _schema(key_type: pa.DataType) -> pa.Schema:
    return pa.schema(
        [("k", key_type), ("p", pa.string()), ("v", pa.int64()), ("lsn", pa.int64()), ("op", pa.string())]
    )


def _rows(batch: list[Event], key_type: pa.DataType, start: int) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([e[0] if key_type == pa.int64() else f"key-{e[0]}" for e in batch], key_type),
            "p": [e[1] for e in batch],
            "v": list(range(start, start + len(batch))),  # distinct values: replays of values differ too
            "lsn": [e[2] for e in batch],
            "op": [e[3] for e in batch],
        },
        schema=_schema(key_type),
    )


def _expected(sent: list[Event], batch: list[Event], scope: str) -> int:
    def name(e: Event) -> tuple[Any, ...]:
        return (e[0],) if scope in ("none", "table") else (e[0], e[1])

    top: dict[tuple[Any, ...], int] = {}
    for e in [*sent, *batch]:
        top[name(e)] = max(top.get(name(e), e[2]), e[2])
    return sum(1 for e in batch if e[2] < top[name(e)])


@pytest.mark.parametrize("key_type", [pa.int64(), pa.string()], ids=["int", "string"])
@pytest.mark.parametrize("scope", ["none", "partition", "table"])
@pytest.mark.parametrize("path", ["upsert", "chunks", "staged"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=batches)
def test_stale_rows_count_every_replaced_row(
    tmp_path: Path, key_type: pa.DataType, scope: str, path: str, writes: list[list[Event]]
) -> None:
    cat = mere.connect(str(tmp_path / f"w{next(_dirs)}"))
    schema = _schema(key_type)
    if scope == "none":
        schema = schema.remove(schema.get_field_index("p"))
    t = cat.create_table(
        "db.t",
        schema,
        primary_key="k",
        partition_by=None if scope == "none" else "p",
        key_scope=None if scope == "none" else scope,
        buckets=2,
        cdc_column="op",
        sequence_by="lsn",
        properties={"write.chunk-bytes": "64"} if path == "chunks" else None,
    )
    sent: list[Event] = []
    for i, batch in enumerate(writes):
        rows = _rows(batch, key_type, 100 * i)
        if scope == "none":
            rows = rows.drop_columns(["p"])
        if path == "staged":
            staged = pickle.loads(pickle.dumps(t.stage(rows)))
            result = t.commit([staged])
        else:
            result = t.upsert(rows)
        assert result.stale_rows == _expected(sent, batch, scope), (sent, batch)
        sent += batch


def test_replays_below_a_stored_version_each_count(tmp_path: Path) -> None:
    """An event landed twice (at-least-once delivery) after a newer one: both copies are stale."""
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("db.t", _schema(pa.int64()), primary_key="k", cdc_column="op", sequence_by="lsn")
    t.upsert(pa.table({"k": [1], "p": ["a"], "v": [0], "lsn": [10], "op": ["u"]}, schema=t.schema))
    replayed = pa.table({"k": [1, 1, 2], "p": ["a"] * 3, "v": [5, 5, 7], "lsn": [9, 9, 1], "op": ["u"] * 3})
    assert t.upsert(replayed.select(t.schema.names).cast(t.schema)).stale_rows == 2
    assert t.to_arrow().sort_by("k").column("v").to_pylist() == [0, 7]
    # the same write without the stored version: none is stale (a tie is never stale)
    other = cat.create_table("db.u", _schema(pa.int64()), primary_key="k", cdc_column="op", sequence_by="lsn")
    assert other.upsert(replayed.select(t.schema.names).cast(other.schema)).stale_rows == 0


@pytest.mark.parametrize("deleted_at", [[3, 3], [2, 3]], ids=["tie", "lower"])
def test_a_delete_of_given_keys_in_the_commit_reports_no_stale_rows(
    tmp_path: Path, deleted_at: list[int]
) -> None:
    """stale_rows counts rows of an upsert: a delete of given keys committed with one (a transaction) takes
    part in the lookup, but its markers below a stored version are not counted, tied or not."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("lsn", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table("db.t", schema, primary_key="k", sequence_by="lsn")
    t.upsert(pa.table({"k": [1], "v": [0], "lsn": [5]}, schema=schema))
    tx = t.transaction()
    tx.upsert(pa.table({"k": [2, 1], "v": [0, 1], "lsn": [1, 4]}, schema=schema))
    tx.delete(pa.table({"k": [1, 1], "lsn": deleted_at}))
    assert tx.commit().stale_rows == 1  # the upsert's k=1 at 4, below the stored 5
    assert t.to_arrow().sort_by("k").to_pylist() == [{"k": 1, "v": 0, "lsn": 5}, {"k": 2, "v": 0, "lsn": 1}]
