"""Answers from metadata: ``Scan.count()``, ``Scan.min()`` and ``Scan.max()`` agree with a dict model
whatever the table's state (overlapping upserts, deletes, compaction, time travel, filters), and on clean
tables (compacted, or written once) they read no data page and ``explain()`` says metadata answers."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import SchemaMismatch
from mere.io.storage import Storage

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("d", pa.date32()),
        pa.field("s", pa.string()),
    ]
)
DAY0 = dt.date(2026, 1, 1)

row_st = st.builds(
    lambda k, v, d, s: {"id": k, "v": v, "d": None if d is None else DAY0 + dt.timedelta(days=d), "s": s},
    st.integers(0, 40),
    st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    st.one_of(st.none(), st.integers(0, 400)),
    st.one_of(st.none(), st.sampled_from(["x", "yy", "a", ""])),
)
step_st = st.one_of(
    st.tuples(st.just("upsert"), st.lists(row_st, min_size=1, max_size=10)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 40), min_size=1, max_size=4)),
    st.tuples(st.just("compact"), st.none()),
)


def extreme(values: list[Any], which: str) -> Any:
    present = [v for v in values if v is not None]
    return (min(present) if which == "min" else max(present)) if present else None


def check(scan: Any, rows: list[dict[str, Any]]) -> None:
    assert scan.count() == len(rows)
    assert scan.select().to_arrow().num_rows == len(rows)  # no column: rows counted by their keys
    for c in ("v", "d", "s", "id"):
        assert scan.min(c) == extreme([r[c] for r in rows], "min"), c
        assert scan.max(c) == extreme([r[c] for r in rows], "max"), c


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step_st, min_size=1, max_size=6), buckets=st.sampled_from([1, 3]), x=st.integers(-5, 5))
def test_count_min_max_match_the_model(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, Any]], buckets: int, x: int
) -> None:
    t = mere.connect(str(tmp_path_factory.mktemp("wh"))).create_table(
        "m.t", SCHEMA, primary_key="id", buckets=buckets
    )
    model: dict[int, dict[str, Any]] = {}
    history = []
    for kind, arg in steps:
        if kind == "upsert":
            batch = {r["id"]: r for r in arg}
            t.upsert(pa.Table.from_pylist(list(batch.values()), schema=SCHEMA))
            model.update(batch)
        elif kind == "delete":
            t.delete(f"id in ({', '.join(map(str, arg))})")
            for k in arg:
                model.pop(k, None)
        else:
            t.compact()
        history.append((t.version, [dict(r) for r in model.values()]))
    for version, rows in (history[-1], history[0]):
        scan = t.scan(version=version)
        check(scan, rows)
        # With filters: a key filter, a non-key one (the selective route), both.
        for text, keep in [
            (f"id > {x * 4}", lambda r: r["id"] > x * 4),
            (f"v > {x}", lambda r: r["v"] is not None and r["v"] > x),
            ("id < 30 and s = 'x'", lambda r: r["id"] < 30 and r["s"] == "x"),
        ]:
            check(t.scan(version=version, filter=text), [r for r in rows if keep(r)])


def test_clean_tables_are_answered_without_data_pages(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t = mere.connect(str(tmp_path)).create_table("m.t", SCHEMA, primary_key="id", buckets=2)
    rows = [{"id": i, "v": i * 3 - 50, "d": DAY0 + dt.timedelta(days=i), "s": str(i)} for i in range(100)]
    t.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    t.upsert(pa.Table.from_pylist([{**rows[5], "v": 10**9}], schema=SCHEMA))  # overlaps the first write
    assert "count(): 0/2 split(s) from catalog row counts" in str(t.scan().explain()) or "1/2" in str(
        t.scan().explain()
    )
    t.compact()
    assert "answered from metadata" in str(t.scan().explain())

    def no_pages(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a data page was read")

    monkeypatch.setattr(Storage, "read_row_groups", no_pages)
    scan = t.scan()
    assert scan.count() == 100
    assert (scan.min("v"), scan.max("v")) == (-50, 10**9)
    assert (scan.min("d"), scan.max("d")) == (DAY0, DAY0 + dt.timedelta(days=99))
    assert (scan.min("id"), scan.max("id")) == (0, 99)
    with pytest.raises(AssertionError, match="data page"):
        scan.min("s")  # strings: statistics may be truncated, the column is read
    with pytest.raises(SchemaMismatch):
        scan.min("nope")


def test_tables_without_key_and_empty_tables(tmp_path: Any) -> None:
    cat = mere.connect(str(tmp_path))
    t = cat.create_table("m.k", SCHEMA)
    assert t.scan().count() == 0 and t.scan().min("v") is None
    t.append(pa.Table.from_pylist([{"id": 1, "v": None, "d": None, "s": None}], schema=SCHEMA))
    assert t.scan().min("v") is None and t.scan().max("d") is None and t.scan().count() == 1
    t.append(pa.Table.from_pylist([{"id": 2, "v": 7, "d": DAY0, "s": "q"}] * 3, schema=SCHEMA))
    scan = t.scan()
    assert (scan.count(), scan.min("v"), scan.max("s")) == (4, 7, "q")
    assert "answered from metadata" in str(scan.explain())
