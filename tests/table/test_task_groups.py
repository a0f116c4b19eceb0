"""Engine tasks: small splits packed together, big splits divided into key-range windows.

Whatever the sizes, the groups' tasks read together must return every merged row exactly once.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput
from mere.table.scan import group_tasks

KEY_TYPES = {"int": pa.int64(), "str": pa.string(), "date": pa.date32(), "i16": pa.int16()}


def _key_value(kind: str, i: int) -> Any:
    import datetime as dt

    return {
        "int": i,
        "str": f"k{i:05d}",
        "date": dt.date(2000, 1, 1) + dt.timedelta(days=i),
        "i16": i - 3000,
    }[kind]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(sorted(KEY_TYPES)),
    batches=st.lists(
        st.tuples(st.lists(st.integers(0, 5000), min_size=1, max_size=400), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    buckets=st.integers(1, 3),
    max_bytes=st.integers(1, 40_000),
    open_cost=st.sampled_from([0, 1, 1000, 4 << 20]),
    min_groups=st.integers(1, 6),
    filtered=st.booleans(),
)
def test_groups_read_every_merged_row_once(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    batches: list[tuple[list[int], bool]],
    buckets: int,
    max_bytes: int,
    open_cost: int,
    min_groups: int,
    filtered: bool,
) -> None:
    wh = str(tmp_path_factory.mktemp("groups"))
    schema = pa.schema(
        [pa.field("k", KEY_TYPES[kind], nullable=False), ("v", pa.int64()), ("p", pa.string())]
    )
    t = mere.connect(wh).create_table(
        "a.t",
        schema,
        primary_key=["k"],
        partition_by=["p"],
        buckets=buckets,
        properties={"write.row-group-rows": "37"},
    )
    for n, (ids, delete) in enumerate(batches):
        keys = [_key_value(kind, i) for i in ids]
        if delete:
            t.delete(
                pa.table({"k": pa.array(keys[:20], KEY_TYPES[kind]), "p": [f"p{i % 2}" for i in ids[:20]]})
            )
        else:
            t.upsert(
                pa.table({"k": keys, "v": [n] * len(ids), "p": [f"p{i % 2}" for i in ids]}, schema=schema)
            )
    scan = t.scan(filter="v >= 1" if filtered else None)
    want = sorted(scan.to_arrow().to_pylist(), key=lambda r: r["k"])
    groups = group_tasks(scan.tasks(), max_bytes, open_cost, min_groups)
    groups = pickle.loads(pickle.dumps(groups))  # as an engine ships them
    got = sorted(
        (r for g in groups for task in g for b in task.read() for r in b.to_pylist()), key=lambda r: r["k"]
    )
    assert got == want
    total = sum(t.size_bytes + open_cost for t in scan.tasks())
    wanted = max(min_groups, -(-total // max_bytes)) if scan.tasks() else 0
    assert len(groups) <= wanted and all(groups)
    costs = sorted(sum(t.size_bytes + open_cost for t in g) for g in groups)
    biggest = max((t.size_bytes + open_cost for g in groups for t in g), default=0)
    assert not costs or costs[-1] - costs[0] <= biggest  # balanced: within one piece of each other


def test_divide_cuts_a_big_split_into_windows(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    t = mere.connect(str(tmp_path)).create_table(
        "a.t", schema, primary_key=["k"], buckets=1, properties={"write.row-group-rows": "500"}
    )
    for n in range(3):
        ids = list(range(n * 1000, n * 1000 + 10_000, 3))
        t.upsert(pa.table({"k": ids, "v": [f"{n}"] * len(ids)}, schema=schema))
    (task,) = t.scan().tasks()
    pieces = task.divide(task.size_bytes // 6)
    assert 4 <= len(pieces) <= 12
    assert abs(sum(p.size_bytes for p in pieces) - task.size_bytes) <= len(pieces)
    assert task.divide(task.size_bytes) == [task]
    rows = [r for p in pieces for b in p.read() for r in b.to_pylist()]
    assert sorted(rows, key=lambda r: r["k"]) == sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["k"])


def test_divide_leaves_keys_without_safe_order_alone(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.binary(), nullable=False), ("v", pa.int64())])
    t = mere.connect(str(tmp_path)).create_table(
        "a.f", schema, primary_key=["k"], buckets=1, properties={"write.row-group-rows": "10"}
    )
    t.upsert(pa.table({"k": [b"%03d" % i for i in range(200)], "v": list(range(200))}, schema=schema))
    (task,) = t.scan().tasks()
    assert task.divide(1) == [task]


@pytest.mark.parametrize("args", [(0, 1, 1), (10, -1, 1), (10, 1, 0)])
def test_group_tasks_refuses_bad_sizes(args: tuple[int, int, int]) -> None:
    with pytest.raises(InvalidInput):
        group_tasks([], *args)
