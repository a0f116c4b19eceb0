"""Review of tiered automatic compaction: a fold of a split's newest runs combines their `sum` values
among themselves, before the older runs' values. The never-compacted table adds them in version order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import mere

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("i", pa.int8()), ("f", pa.float64())])
POLICY = {"compaction.auto": "inline", "compaction.min-files": "4", "retention.max-age": "off"}


def _tables(tmp_path: Path, i0: int = 0, f0: float = 0.0) -> tuple[mere.Table, mere.Table]:
    cat = mere.connect(str(tmp_path))
    kw = {"primary_key": "k", "buckets": 1, "merge_operators": {"i": "sum", "f": "sum"}}
    folded = cat.create_table("t.folded", SCHEMA, properties=POLICY, **kw)
    plain = cat.create_table("t.plain", SCHEMA, properties={**POLICY, "compaction.auto": "off"}, **kw)
    # One big run that the policy leaves alone when it folds the three small runs written after it.
    base = pa.table({"k": range(100), "i": [i0] + [0] * 99, "f": [f0] + [0.0] * 99}, schema=SCHEMA)
    for t in (folded, plain):
        t.upsert(base)
    return folded, plain


def _write(tables: tuple[mere.Table, mere.Table], k: int, i: int, f: float) -> None:
    for t in tables:
        t.upsert(pa.table({"k": [k], "i": [i], "f": [f]}, schema=SCHEMA))


def _runs(t: mere.Table) -> int:
    return len({f.seq for f in t.files_at(t.version)})


def test_a_sum_in_range_whose_newest_runs_alone_leave_the_type_does_not_stop_compaction(
    tmp_path: Path,
) -> None:
    """k=0 holds -100 + 100 + 28 = 28 (in int8's range), but the fold of the newest runs computes
    100 + 28 = 128 on its own: SumOverflow, logged as a warning by every later commit, and the table
    (every split of it: one failing task fails the whole compaction) is never compacted again."""
    folded, plain = _tables(tmp_path, i0=-100)
    # The fourth run makes the split due: the three newest are folded, the big base stays.
    for v in (100, 28, 0):
        _write((folded, plain), 0 if v else 1, v, 0.0)
    assert folded.to_arrow(filter="k = 0").to_pylist() == plain.to_arrow(filter="k = 0").to_pylist()
    assert folded.to_arrow(filter="k = 0").column("i").to_pylist() == [28]
    for n in range(2, 8):  # more tiny commits: the policy keeps the split below its trigger
        _write((folded, plain), n, 0, 0.0)
        assert _runs(folded) < 4, f"the split holds {_runs(folded)} runs: automatic compaction stopped"
    assert sorted(folded.to_arrow().to_pylist(), key=str) == sorted(plain.to_arrow().to_pylist(), key=str)


def test_float_sums_read_the_same_after_a_fold_of_the_newest_runs(tmp_path: Path) -> None:
    """Floating-point addition is not associative: folding the newest runs first (0.1 + (1.0 + 0.3 + 1e16)
    instead of ((0.1 + 1.0) + 0.3) + 1e16) changes the value the table reads."""
    folded, plain = _tables(tmp_path, f0=0.1)
    for f in (1.0, 0.3, 1e16):
        _write((folded, plain), 0, 0, f)
    assert any(s.operation == "compact" for s in folded.history())
    assert (
        folded.to_arrow(filter="k = 0").column("f").to_pylist()
        == plain.to_arrow(filter="k = 0").column("f").to_pylist()
    )
