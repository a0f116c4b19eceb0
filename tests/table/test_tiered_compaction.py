"""Automatic compaction folds a split's newest runs (tiered): the merged rows never change, deletes keep
hiding older rows and merge operators keep combining with them, and tiny commits rewrite old rows rarely."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.table.compaction import runs_to_fold

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("a", pa.int64()),
        ("s", pa.string()),
        ("n", pa.int64()),
        ("c", pa.string()),
        ("l", pa.int64()),
    ]
)
OPERATORS = {"n": "sum", "c": "concat:|", "l": "last_non_null"}
_names = itertools.count()


def _whole_rows(keys: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": keys,
            "a": keys,
            "s": ["x"] * len(keys),
            "n": [1] * len(keys),
            "c": ["p"] * len(keys),
            "l": keys,
        },
        schema=SCHEMA,
    )


def _rows(t: mere.Table, version: int | None = None) -> list[dict[str, Any]]:
    return sorted(t.to_arrow(version=version).to_pylist(), key=lambda r: r["k"])


def _runs(t: mere.Table) -> Counter[tuple[str, int]]:
    seqs = {(f.partition, f.bucket, f.seq) for f in t.files_at(t.version)}
    return Counter((p, b) for p, b, _ in seqs)


_value = st.one_of(st.none(), st.integers(-50, 50))
_row = st.fixed_dictionaries(
    {
        "k": st.integers(0, 12),
        "op": st.sampled_from(["I", "U", "D"]),
        "a": _value,
        "s": st.one_of(st.none(), st.sampled_from(["x", "y", "zz"])),
        "n": _value,
        "c": st.one_of(st.none(), st.sampled_from(["p", "q"])),
        "l": _value,
    }
)
_step = st.one_of(
    st.tuples(st.just("cdc"), st.lists(_row, min_size=1, max_size=6)),
    st.tuples(st.just("partial"), st.lists(st.tuples(st.integers(0, 12), _value), min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 12), min_size=1, max_size=3)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(_step, min_size=1, max_size=25),
    min_files=st.integers(2, 6),
    amplification=st.sampled_from([None, "50", "300"]),
)
def test_tiered_folds_never_change_the_merged_rows(
    tmp_path: Path, steps: list[Any], min_files: int, amplification: str | None
) -> None:
    """Every version of a table compacted by the policy reads as the same table never compacted."""
    cat = mere.connect(str(tmp_path / f"w{next(_names)}"))
    props = {"compaction.auto": "inline", "compaction.min-files": str(min_files)}
    if amplification is not None:
        props["compaction.size-amplification-percent"] = amplification
    kw: dict[str, Any] = {"primary_key": "k", "buckets": 2, "merge_operators": OPERATORS, "cdc_column": "op"}
    folded = cat.create_table("t.folded", SCHEMA, properties=props, **kw)
    plain = cat.create_table("t.plain", SCHEMA, properties={"compaction.auto": "off"}, **kw)
    for kind, arg in steps:
        for t in (folded, plain):
            if kind == "cdc":
                t.upsert(pa.Table.from_pylist(arg, schema=SCHEMA.append(pa.field("op", pa.string()))))
            elif kind == "partial":  # a column subset: such files are folded only with the whole split
                t.upsert(pa.table({"k": [k for k, _ in arg], "a": [v for _, v in arg]}))
            else:
                t.delete(pa.table({"k": pa.array(arg, pa.int64())}))
        assert _rows(folded) == _rows(plain)
        assert max(_runs(folded).values(), default=0) < max(
            min_files, 2
        )  # folded by the write that reached it
    # Time travel: each version the writes made reads as the uncompacted table's version of that write.
    writes = 0
    for snap in folded.history()[1:]:
        if snap.operation != "compact":
            writes += 1
        if not snap.expired:
            assert _rows(folded, snap.version) == _rows(plain, writes), snap
    folded.compact()  # a full fold after the tiered ones drops every delete marker
    assert _rows(folded) == _rows(plain)


def test_tiny_commits_fold_newest_runs_and_rarely_rewrite_old_rows(tmp_path: Path) -> None:
    """One split, one row per commit: the policy's folds write a small multiple of the rows written,
    where folding the whole split at every trigger would rewrite all of it each time."""
    t = mere.connect(str(tmp_path)).create_table(
        "t.tiny",
        SCHEMA,
        primary_key="k",
        buckets=1,
        properties={"compaction.auto": "inline", "compaction.min-files": "8"},
    )
    t.upsert(_whole_rows(list(range(1000, 3000))))
    commits = 300
    for i in range(commits):
        t.upsert(_whole_rows([i]))
    history = t.history()
    folds = [s for s in history if s.operation == "compact"]
    partial = [s for s in folds if s.summary["removed_files"] < 8]
    assert folds and partial, "the newest runs were folded on their own"
    folded_rows = sum(int(s.summary["rows"]) for s in folds)
    assert folded_rows < 25 * commits, f"{folded_rows} rows rewritten for {commits} written"
    assert max(_runs(t).values()) < 8
    rows = {r["k"]: r["a"] for r in t.to_arrow().to_pylist()}
    assert len(rows) == 2000 + commits and all(rows[i] == i for i in range(commits))


@pytest.mark.parametrize(
    ("sizes", "min_files", "percent", "expected"),
    [
        ([1] * 7, 8, None, 0),  # below the trigger
        ([1] * 8, 8, None, 8),  # equal runs: all of them
        ([1, 1, 1, 1, 1, 1, 1, 1000], 8, None, 7),  # the big oldest run stays
        ([1, 1, 1, 1, 1, 4, 10, 1000], 8, None, 7),  # older runs no larger than the picked ones join
        ([1, 1, 1, 1, 1, 50, 100, 1000], 8, None, 5),  # a much larger run stops the pick
        ([1, 1000], 8, 50, 0),  # small runs are 0.1% of the largest
        ([600, 1000], 8, 50, 2),  # size amplification: everything
        ([5], 2, None, 0),
    ],
)
def test_runs_to_fold(sizes: list[int], min_files: int, percent: int | None, expected: int) -> None:
    assert runs_to_fold(sizes, sizes, min_files, percent) == expected
