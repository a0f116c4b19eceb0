"""Automatic compaction (``compaction.auto`` / ``compaction.min-files`` /
``compaction.size-amplification-percent``): splits stay small, no write is lost or failed by it, and a
compaction racing writer processes loses no commit."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere import errors

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("n", pa.int64()), ("s", pa.string())])


def batch(keys: list[int], n: int = 1) -> pa.Table:
    return pa.table({"k": keys, "n": [n] * len(keys), "s": [f"v{k}" for k in keys]}, schema=SCHEMA)


def files_per_split(t: mere.Table) -> int:
    return max(Counter((f.partition, f.bucket) for f in t.files_at(t.version)).values())


def make(tmp_path: Path, **props: str) -> mere.Table:
    return mere.connect(str(tmp_path)).create_table(
        "a.t", SCHEMA, primary_key="k", buckets=2, merge_operators={"n": "sum"}, properties=props
    )


def test_inline_policy_keeps_splits_small_and_rows_right(tmp_path: Path) -> None:
    t = make(tmp_path, **{"compaction.auto": "inline", "compaction.min-files": "3"})
    model: dict[int, int] = {}
    for i in range(10):
        keys = [i, i + 1, 100]
        t.upsert(batch(keys))
        for k in keys:
            model[k] = model.get(k, 0) + 1
        assert files_per_split(t) < 3  # folded by the write that reached 3
        assert {r["k"]: r["n"] for r in t.to_arrow().to_pylist()} == model
    ops = [s.operation for s in t.history()]
    assert ops.count("compact") >= 3 and ops.count("upsert") == 10
    t.delete("k = 100")
    assert 100 not in {r["k"] for r in t.to_arrow().to_pylist()}


def test_new_tables_compact_inline_by_default(tmp_path: Path) -> None:
    t = make(tmp_path)
    assert t.properties["compaction.auto"] == "inline" and t.compaction_policy == ("inline", 8)
    for i in range(20):
        t.upsert(batch(list(range(10 * i, 10 * i + 10))))
        assert files_per_split(t) < 8  # folded by the write that reached 8
    assert len(t.to_arrow()) == 200
    # A table whose creator gave no compaction.auto (tables created before the default) is not compacted.
    legacy = mere.connect(str(tmp_path / "legacy")).create_table(
        "a.t", SCHEMA, primary_key="k", buckets=2, properties={"compaction.auto": "off"}
    )
    legacy.set_properties({"compaction.auto": None})
    assert "compaction.auto" not in legacy.refresh().properties and legacy.compaction_policy[0] == "off"


def test_off_and_explicit_call(tmp_path: Path) -> None:
    t = make(tmp_path, **{"compaction.auto": "off"})
    for i in range(7):
        t.upsert(batch(list(range(10 * i, 10 * i + 10))))  # ten keys: both buckets get a file
    assert files_per_split(t) == 7  # no policy: nothing folded
    assert t.auto_compact() is None  # below the default of 8 files
    t.upsert(batch([70, 71, 72, 73, 74, 75]))
    assert files_per_split(t) == 8
    result = t.auto_compact()
    assert result is not None and result.operation == "compact"
    assert files_per_split(t) == 1 and len(t.to_arrow()) == 76


def test_failed_auto_compaction_never_fails_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    t = make(tmp_path, **{"compaction.auto": "inline", "compaction.min-files": "2"})

    def broken(*args: Any, **kwargs: Any) -> None:
        raise errors.StorageError("disk full")

    monkeypatch.setattr(mere.Table, "compact", broken)
    with caplog.at_level(logging.WARNING, logger="mere"):
        for i in range(3):
            result = t.upsert(batch([i]))
            assert result.operation == "upsert"
    assert "automatic compaction failed" in caplog.text and "disk full" in caplog.text
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [0, 1, 2]


def test_background_policy(tmp_path: Path) -> None:
    t = make(tmp_path, **{"compaction.auto": "background", "compaction.min-files": "2"})
    for i in range(4):
        t.upsert(batch([i, 50]))
    for thread in threading.enumerate():
        if thread.name.startswith("mere-auto-compact"):
            thread.join(timeout=60)
    t = t.refresh()
    assert "compact" in [s.operation for s in t.history()]
    assert {r["k"]: r["n"] for r in t.to_arrow().to_pylist()} == {0: 1, 1: 1, 2: 1, 3: 1, 50: 4}


@pytest.mark.parametrize(
    "props",
    [
        {"compaction.auto": "sometimes"},
        {"compaction.auto": ""},
        {"compaction.min-files": "1"},
        {"compaction.min-files": "two"},
    ],
)
def test_bad_policy_values_are_refused(tmp_path: Path, props: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidInput):
        make(tmp_path, **props)
    t = make(tmp_path / "ok")
    before = t.version
    with pytest.raises(errors.InvalidInput):
        t.set_properties(props)
    assert t.refresh().version == before


WRITER = textwrap.dedent(
    """
    import sys, pyarrow as pa, mere
    worker, rounds = int(sys.argv[2]), int(sys.argv[3])
    t = mere.connect(sys.argv[1]).table("a.t")
    schema = t.schema
    for r in range(rounds):
        keys = [0, 1000 * (worker + 1) + r]  # key 0 is shared: its sum counts every commit
        t.upsert(pa.table({"k": keys, "n": [1, 1], "s": ["x", "y"]}, schema=schema))
    """
)


def test_auto_compaction_racing_four_writer_processes_loses_no_commit(tmp_path: Path) -> None:
    t = make(tmp_path, **{"compaction.auto": "inline", "compaction.min-files": "3"})
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rounds = 6
    procs = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path), str(w), str(rounds)]) for w in range(4)
    ]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    t = t.refresh()
    rows = {r["k"]: r["n"] for r in t.to_arrow().to_pylist()}
    assert rows[0] == 4 * rounds  # every commit's increment of the shared key is there
    assert sorted(k for k in rows if k) == sorted(1000 * (w + 1) + r for w in range(4) for r in range(rounds))
    ops = Counter(s.operation for s in t.history())
    assert ops["upsert"] == 4 * rounds and ops["compact"] >= 1


def test_policy_calls_check_their_version(tmp_path: Path) -> None:
    t = make(tmp_path)
    t.upsert(batch([1, 2, 3]))
    for bad in (-1, 999, True, 2.0, "x"):
        with pytest.raises(errors.MereError):
            t.compaction_due(bad)  # type: ignore[arg-type]
        with pytest.raises(errors.MereError):
            t.auto_compact(bad)  # type: ignore[arg-type]
    assert t.compaction_due(1) == [] and t.auto_compact(1) is None
    keyless = mere.connect(str(tmp_path)).create_table("a.plain", SCHEMA)
    keyless.append(batch([1]))
    assert keyless.compaction_due() == []


def test_one_background_compaction_per_table_at_a_time(tmp_path: Path) -> None:
    t = make(tmp_path, **{"compaction.auto": "background", "compaction.min-files": "2"})
    for i in range(30):
        t.upsert(batch([i]))
        running = [th for th in threading.enumerate() if th.name.startswith("mere-auto-compact")]
        assert len(running) <= 1
    for thread in threading.enumerate():
        if thread.name.startswith("mere-auto-compact"):
            thread.join(timeout=60)
    assert sorted(r["k"] for r in t.refresh().to_arrow().to_pylist()) == list(range(30))


def runs_per_split(t: mere.Table) -> dict[tuple[str, int], int]:
    seqs: dict[tuple[str, int], set[int]] = {}
    for f in t.files_at(t.version):
        seqs.setdefault((f.partition, f.bucket), set()).add(f.seq)
    return {split: len(s) for split, s in seqs.items()}


def due_by_size(t: mere.Table, percent: int) -> list[tuple[str, int]]:
    """The size-tiered rule, from the catalog's file sizes: runs (files of one sequence) besides the
    largest hold ``percent`` of its bytes or more."""
    runs: dict[tuple[str, int], Counter[int]] = {}
    for f in t.files_at(t.version):
        runs.setdefault((f.partition, f.bucket), Counter())[f.seq] += f.size_bytes
    return sorted(
        split
        for split, sizes in runs.items()
        if len(sizes) > 1
        and (sum(sizes.values()) - max(sizes.values())) * 100 >= percent * max(sizes.values())
    )


def test_size_tiered_rule_folds_a_split_whose_small_runs_outweigh_its_largest(tmp_path: Path) -> None:
    """With the size-tiered rule set (it is off by default) and the run count out of the way, a split is
    folded when its runs besides the largest hold 200% of the largest's bytes: written in equal parts of
    new keys, at about 3 parts, then about 9, not at each write."""
    props = {
        "compaction.auto": "off",
        "compaction.min-files": "1000",
        "compaction.size-amplification-percent": "200",
    }
    t = mere.connect(str(tmp_path)).create_table("a.t", SCHEMA, primary_key="k", buckets=1, properties=props)
    assert make(tmp_path / "default").compaction_size_amplification is None
    compactions = []
    for i in range(12):
        t.upsert(batch(list(range(2000 * i, 2000 * i + 2000))))  # equal parts, new keys
        due = t.compaction_due()
        assert due == due_by_size(t, 200)
        if due:
            compactions.append(i + 1)
            assert t.auto_compact() is not None
            assert t.compaction_due() == []
    assert 1 <= len(compactions) <= 2 and compactions[0] in (3, 4), compactions
    assert len(t.to_arrow()) == 24_000
    with pytest.raises(errors.InvalidInput, match="size-amplification"):
        t.set_properties({"compaction.size-amplification-percent": "0"})
    for percent in (1, 50, 100, 400):
        t.set_properties({"compaction.size-amplification-percent": str(percent)})
        assert t.compaction_due() == due_by_size(t, percent)


def test_a_split_compacted_into_several_files_is_one_run_and_not_due_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction cuts its output into files of CHUNK_ROWS rows, all of the compaction's sequence: they
    are one run, so a big split compacted into min-files files or more is not folded again by every
    later commit (it was, when files were counted)."""
    from mere.table import compaction

    monkeypatch.setattr(compaction, "CHUNK_ROWS", 50)
    # Small row groups and merge windows: the compaction's output comes in many chunks.
    props = {"write.row-group-rows": "20", "read.whole-split-bytes": "0", "read.window-bytes": "1000"}
    t = make(tmp_path, **props, **{"compaction.min-files": "3"})
    for i in range(4):
        t.upsert(batch(list(range(200 * i, 200 * i + 200))))
    assert t.compact() is not None
    assert files_per_split(t) >= 3 and set(runs_per_split(t).values()) == {1}
    before = t.version
    assert t.compaction_due() == [] and t.auto_compact() is None and t.compact() is None
    t.set_properties({"compaction.auto": "inline"})
    t.upsert(batch([1]))
    assert t.version == before + 2  # the property and the upsert, no compaction
    assert t.compact(min_files=3) is None  # two runs: the compaction's and the upsert's
    assert t.compact() is not None and set(runs_per_split(t).values()) == {1}


def test_compact_checks_its_splits_argument(tmp_path: Path) -> None:
    t = make(tmp_path)
    t.upsert(batch([1, 2, 3]))
    t.upsert(batch([1, 2, 3]))
    version = t.version
    for bad in ("{}", [("{}",)], [("{}", "0")], [(0, "{}")], [("{}", True)], 5, [("not json", 0)]):
        with pytest.raises(errors.InvalidInput, match="splits"):
            t.compact(splits=bad)  # type: ignore[arg-type]
    for bad in ([("{}", -1)], [("{}", 2)], [('{"zz": "1"}', 0)], [("[]", 0)]):
        with pytest.raises(errors.InvalidInput, match="no split of this table"):
            t.compact(splits=bad)
    assert t.version == version
    some = sorted(runs_per_split(t))[:1]
    assert t.compact(splits=some) is not None
    assert runs_per_split(t)[some[0]] == 1 and all(
        n == 2 for s, n in runs_per_split(t).items() if s not in some
    )


def test_compact_splits_accept_any_spelling_of_the_partition_json(tmp_path: Path) -> None:
    import json

    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("p", pa.string())])
    t = mere.connect(str(tmp_path)).create_table("a.t", schema, primary_key="k", partition_by="p")
    for _ in range(2):
        t.upsert(pa.table({"k": [1, 2, 3], "p": ["é", None, "a b"]}, schema=schema))
    bucket = {json.loads(f.partition)["p"]: f.bucket for f in t.files_at(t.version)}
    spelled = [(json.dumps({"p": p}, ensure_ascii=a), bucket[p]) for p in ("é", None) for a in (True, False)]
    result = t.compact(splits=spelled)
    assert result is not None and result.files_removed == 4  # é and NULL: two files each
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [1, 2, 3]
