"""Adversarial: the selective route's wide pass takes the rows of columns read as dictionaries chunk by
chunk (``_take_sorted``); with runs of many small row groups, files of differing nullability and delete
markers, a non-key filter returns exactly what a dict model holds."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.expr import Col
from mere.read import reader, selective

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("c", pa.string()),  # few values: written (and read) as dictionaries
        ("d", pa.string()),
        ("n", pa.int64()),
        ("v", pa.float64()),
    ]
)


@st.composite
def _batches(draw: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.integers(0, 4)) == 0:
            out.append(("delete", draw(st.integers(0, 300))))
            continue
        lo = draw(st.integers(0, 250))
        hi = draw(st.integers(lo + 1, lo + 200))
        step = draw(st.integers(1, 4))
        nulls = draw(st.booleans())
        seed = draw(st.integers(0, 10))
        rows = [
            {
                "k": k,
                "c": None if nulls and (k + seed) % 5 == 0 else "abcdef"[(k * seed) % 6],
                "d": None if nulls and k % 7 == 0 else "xy"[k % 2] * (1 + seed % 3),
                "n": (k * 31 + seed) % 17,
                "v": float(k) / (seed + 1),
            }
            for k in range(lo, hi, step)
        ]
        out.append(("upsert", rows))
    return out


def test_the_wide_pass_takes_from_dictionary_chunks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The route the property below aims at is taken: columns of several dictionary chunks."""
    seen: list[int] = []
    take = selective._take_sorted

    def spy(table: pa.Table, where: Any) -> pa.Table:
        seen.extend(int(c.num_chunks) for c in table.columns if pa.types.is_dictionary(c.type))
        return take(table, where)

    monkeypatch.setattr(selective, "_take_sorted", spy)
    monkeypatch.setattr(selective, "WIDE_RUN_ROWS", 40)
    monkeypatch.setattr(reader, "DICTIONARY_MIN_ROWS", 1)
    t = mere.connect(str(tmp_path)).create_table(
        "t", SCHEMA, primary_key="k", properties={"compaction.auto": "off", "write.row-group-rows": "16"}
    )
    rows: list[dict[str, Any]] = [
        {"k": k, "c": "abc"[k % 3], "d": "x", "n": k % 17, "v": 1.0} for k in range(300)
    ]
    t.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    t.upsert(pa.Table.from_pylist(rows[::5], schema=SCHEMA))
    got = t.scan(filter="n < 3").to_arrow().sort_by("k")
    assert got.to_pylist() == [r for r in rows if r["n"] < 3]
    assert seen
    assert max(seen) > 1


@pytest.mark.parametrize("run_rows", [1, 40, 1 << 17])
@settings(
    deadline=None,
    max_examples=15,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batches=_batches(), threshold=st.integers(0, 16))
def test_non_key_filters_over_dictionary_runs_match_a_model(
    tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch, run_rows: int, batches: Any, threshold: int
) -> None:
    monkeypatch.setattr(selective, "WIDE_RUN_ROWS", run_rows)
    monkeypatch.setattr(reader, "DICTIONARY_MIN_ROWS", 1)  # small files read strings as dictionaries too
    cat = mere.connect(str(tmp_path_factory.mktemp("w")))
    t = cat.create_table(
        "t",
        SCHEMA,
        primary_key="k",
        buckets=2,
        properties={"compaction.auto": "off", "write.row-group-rows": "16"},
    )
    model: dict[int, dict[str, Any]] = {}
    for kind, arg in batches:
        if kind == "delete":
            t.delete(Col("k") >= arg)
            model = {k: r for k, r in model.items() if k < arg}
        else:
            t.upsert(pa.Table.from_pylist(arg, schema=SCHEMA))
            model.update({r["k"]: r for r in arg})
    for where, keep in [
        (f"n < {threshold}", lambda r: r["n"] < threshold),
        ("c IN ('a', 'b') OR d = 'yy'", lambda r: r["c"] in ("a", "b") or r["d"] == "yy"),
        ("c IS NULL", lambda r: r["c"] is None),
    ]:
        want = sorted((r for r in model.values() if keep(r)), key=lambda r: r["k"])
        for columns in (None, ["c", "d", "k"], ["v"]):
            got = t.scan(filter=where, columns=columns).to_arrow()
            assert got.schema == (
                t.schema if columns is None else pa.schema([t.schema.field(c) for c in columns])
            )
            names = got.schema.names
            rows = got.to_pylist()
            if "k" in names:
                rows.sort(key=lambda r: r["k"])
                assert rows == [{c: r[c] for c in names} for r in want], where
            else:
                assert sorted(r["v"] for r in rows) == sorted(r["v"] for r in want), where
            assert t.scan(filter=where).count() == len(want)
