"""``Table.stage(..., write_id=)`` names the staged files after the write, and ``Table.abort_write`` deletes
exactly the files of that write no version references: those of tasks that staged and never reported
(killed), never another write's, a committed one's, or files mere did not write."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, NoSuchTable

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
IDS = st.from_regex(r"[A-Za-z0-9_]{1,12}", fullmatch=True)


def _table(root: Path) -> mere.Table:
    cat = mere.connect(str(root / "wh"))
    return cat.create_table("s.t", SCHEMA, primary_key="id", partition_by="day", buckets=3)


def _rows(seed: int, n: int) -> pa.Table:
    ids = [(seed * 7919 + i * 31) % 200 for i in range(n)]
    return pa.table(
        {"id": ids, "day": [f"d{i % 3}" for i in ids], "qty": [seed * 1000 + i for i in range(n)]}, SCHEMA
    )


def _on_disk(t: mere.Table) -> set[str]:
    root = Path(t.storage.full_path(""))
    return {
        p.relative_to(root).as_posix()
        for p in Path(t.storage.full_path(t.location)).rglob("*")
        if p.is_file()
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(IDS, min_size=1, max_size=3, unique=True),
    writes=st.lists(
        st.tuples(
            st.integers(0, 3),  # which id (the last means none)
            st.sampled_from(["upsert", "delete"]),
            st.booleans(),  # committed, or lost with its task
            st.integers(1, 40),  # rows
        ),
        min_size=1,
        max_size=8,
    ),
    chosen=st.integers(0, 2),
)
def test_abort_write_deletes_exactly_the_unreferenced_files_of_its_write(
    tmp_path_factory: pytest.TempPathFactory,
    ids: list[str],
    writes: list[tuple[int, str, bool, int]],
    chosen: int,
) -> None:
    t = _table(tmp_path_factory.mktemp("abort"))
    t.upsert(_rows(99, 50))
    foreign = Path(t.storage.full_path(t.location)) / "day=d0" / f"part-{ids[0]}-not-mere.txt"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_text("a file mere did not write, named like one of this write's")
    lost: dict[str | None, set[str]] = {}
    for seed, (which, operation, committed, n) in enumerate(writes):
        write_id = ids[which] if which < len(ids) else None
        staged = t.stage(_rows(seed, n), operation, write_id=write_id)
        names = {f.path for f in staged.files}
        marks = [f"-{write_id}-" in Path(p).name for p in names]
        assert all(marks) if write_id is not None else not any(marks)
        if committed:
            t.commit([staged])
        else:
            lost.setdefault(write_id, set()).update(names)
    target = ids[chosen % len(ids)]
    rows, version, before = t.to_arrow(), t.version, _on_disk(t)

    removed = t.abort_write(target)

    assert set(removed) == lost.get(target, set())
    assert _on_disk(t) == before - set(removed)
    assert foreign.exists()
    assert t.version == version and t.to_arrow().equals(rows)
    assert t.abort_write(target) == []  # nothing left of it
    left = {p for k, v in lost.items() if k != target for p in v}
    # What stays unreferenced is the other writes' files; the foreign file is not mere's to clean up
    assert set(t.cleanup(dt.timedelta(0))) == left


def test_files_of_a_committed_write_stay_after_they_leave_the_table(tmp_path: Path) -> None:
    """abort_write never touches a file some version references, also after an overwrite and an expiry."""
    t = _table(tmp_path)
    kept = t.stage(_rows(1, 30), "upsert", write_id="job_1")
    t.commit([kept])
    first = {f.path for f in kept.files}
    t.overwrite(_rows(2, 10))
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    still = {p for p in first if Path(t.storage.full_path(p)).exists()}
    lost = t.stage(_rows(3, 30), "delete", write_id="job_1")
    assert set(t.abort_write("job_1")) == {f.path for f in lost.files}
    assert {p for p in first if Path(t.storage.full_path(p)).exists()} == still


@pytest.mark.parametrize(
    "bad", ["", "a-b", "../x", "a/b", "a b", "x" * 65, "é", "a.b", None, 7, b"ab", ["a"]], ids=repr
)
def test_malformed_write_ids_are_refused_before_anything_is_written(tmp_path: Path, bad: object) -> None:
    t = _table(tmp_path)
    t.upsert(_rows(1, 10))
    before = _on_disk(t)
    if bad is not None:  # (None stages without an id)
        with pytest.raises(InvalidInput, match="write_id"):
            t.stage(_rows(2, 10), "upsert", write_id=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="write_id"):
        t.abort_write(bad)  # type: ignore[arg-type]
    assert _on_disk(t) == before


def test_abort_write_of_a_dropped_table_is_refused(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.stage(_rows(1, 10), "upsert", write_id="w")
    t.catalog.drop_table("s.t")
    with pytest.raises(NoSuchTable):
        t.abort_write("w")
