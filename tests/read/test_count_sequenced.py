"""``Scan.count()`` of tables with ``sequence_by`` and newest-wins merging counts each key's winner from
the key, sequence and operation columns alone (:func:`mere.read.counting.live_by_sequence`): checked
against a dict model (a key's row is its version of highest sequence, the latest written of them on
ties; a delete of the highest sequence removes it) and against the rows a full read gives.

Drawn: dense integer keys (the map of the key range), sparse integer keys and string keys (the sort),
1 to 3 buckets, events late, replayed, tied and deleted, compaction between writes, and windows small
enough to cut a split into several.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere

_dirs = itertools.count()

Event = tuple[int, int, str, int]  # key, sequence, operation ("u" or "d"), value

events = st.tuples(
    st.integers(0, 40), st.integers(0, 6), st.sampled_from(["u", "u", "u", "d"]), st.integers()
)
steps = st.lists(
    st.one_of(st.lists(events, min_size=1, max_size=30), st.just("compact")), min_size=1, max_size=6
)


def _key(k: int, kind: str) -> object:
    return {"dense": k, "sparse": k * 1_000_003, "string": f"key-{k:03d}"}[kind]


def _model(log: list[Event]) -> dict[int, tuple[int, int]]:
    """key -> (sequence, value) of its row; events in the order written."""
    best: dict[int, tuple[int, str, int]] = {}
    for k, seq, op, v in log:
        if k not in best or seq >= best[k][0]:
            best[k] = (seq, op, v)
    return {k: (s, v) for k, (s, op, v) in best.items() if op != "d"}


@pytest.mark.parametrize("kind", ["dense", "sparse", "string"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps, buckets=st.integers(1, 3), small_windows=st.booleans())
def test_count_of_sequenced_tables_matches_the_model(
    tmp_path: Path, kind: str, plan: list[list[Event] | str], buckets: int, small_windows: bool
) -> None:
    key_type = pa.string() if kind == "string" else pa.int64()
    schema = pa.schema([("k", key_type), ("lsn", pa.int64()), ("v", pa.int64()), ("op", pa.string())])
    properties = {"read.window-bytes": "256", "read.whole-split-bytes": "0"} if small_windows else None
    t = mere.connect(str(tmp_path / f"c{next(_dirs)}")).create_table(
        "db.t",
        schema,
        primary_key="k",
        buckets=buckets,
        cdc_column="op",
        sequence_by="lsn",
        properties=properties,
    )
    log: list[Event] = []
    for step in plan:
        if step == "compact":
            t.compact()
            continue
        assert not isinstance(step, str)
        rows = pa.table(
            {
                "k": pa.array([_key(e[0], kind) for e in step], key_type),
                "lsn": [e[1] for e in step],
                "v": [e[3] % 2**63 for e in step],
                "op": [e[2] for e in step],
            },
            schema=schema,
        )
        t.upsert(rows)
        log += [(k, s, op, v % 2**63) for k, s, op, v in step]
        expected = _model(log)
        assert t.scan().count() == len(expected) == t.to_arrow().num_rows
    assert t.scan().count() == len(_model(log))


def test_count_of_a_sequenced_table_explains_its_columns(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.int64()), ("lsn", pa.int64()), ("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table("db.t", schema, primary_key="k", sequence_by="lsn")
    t.upsert(pa.table({"k": [1, 2], "lsn": [5, 5], "v": [0, 0]}, schema=schema))
    t.upsert(pa.table({"k": [1, 3], "lsn": [4, 1], "v": [1, 1]}, schema=schema))  # k=1 late: ignored
    assert t.scan().count() == 3
    assert any("key, sequence and operation columns" in n for n in t.scan().explain().notes)
