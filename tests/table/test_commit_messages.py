"""One commit message for every distributed path: staged writes, MERGE shares and compaction results are
all ``StagedChange`` s, picklable, committed by ``Table.commit`` and discarded by ``Table.abort``."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import errors
from mere.table.commit import StagedChange
from mere.table.merge import StagedMerge
from mere.table.table import StagedWrite

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def make(tmp_path: Path) -> mere.Table:
    t = mere.connect(tmp_path).create_table("m.t", SCHEMA, primary_key="id", buckets=2)
    for i in range(3):
        t.upsert(pa.table({"id": [1, 2, 3 + i], "v": [i, i, i]}))
    return t


def on_disk(t: mere.Table) -> set[str]:
    return {p for p, _, _ in t.storage.list_files(t.location)}


def state(t: mere.Table) -> dict[int, int]:
    return dict(zip(*t.to_arrow().sort_by("id").to_pydict().values(), strict=True))


def test_the_old_names_are_the_one_type() -> None:
    assert StagedWrite is StagedMerge is StagedChange


def test_every_kind_of_message_pickles_and_commits(tmp_path: Path) -> None:
    t = make(tmp_path)
    write = pickle.loads(pickle.dumps(t.stage(pa.table({"id": [9], "v": [9]}))))
    assert t.commit([write]).operation == "upsert"
    share = t.merge(pa.table({"id": [1, 10], "v": [100, 10]})).when_matched_update_all()
    staged = pickle.loads(pickle.dumps(share.when_not_matched_insert_all().stage(t.version)))
    assert isinstance(staged, StagedChange) and staged.operation == "merge"
    result = t.commit([staged])
    assert result.operation == "merge" and result.version == t.version
    assert state(t)[1] == 100 and state(t)[10] == 10
    plan = t.plan_compaction()
    message = pickle.loads(pickle.dumps(plan.staged([task.run() for task in plan.tasks])))
    before = state(t)
    assert t.commit([message]).operation == "compact"
    assert state(t) == before and t.plan_compaction().tasks == ()


def test_a_message_that_read_an_older_version_conflicts_and_leaves_nothing(tmp_path: Path) -> None:
    t = make(tmp_path)
    staged = t.merge(pa.table({"id": [1], "v": [7]})).when_matched_update_all().stage(t.version)
    plan = t.plan_compaction()
    results = [task.run() for task in plan.tasks]
    t.overwrite(pa.table({"id": [1], "v": [1]}))  # changes the rows the MERGE read, replaces the inputs
    version, files = t.version, on_disk(t)
    for message in (staged, plan.staged(results)):
        with pytest.raises(errors.CommitConflict):
            t.commit([message])
        assert t.version == version and state(t) == {1: 1}
        assert not {f.path for f in message.files} & on_disk(t)
    assert on_disk(t) <= files


def test_abort_discards_any_message_and_mixed_commits_are_refused(tmp_path: Path) -> None:
    t = make(tmp_path)
    write = t.stage(pa.table({"id": [9], "v": [9]}))
    share = t.merge(pa.table({"id": [1], "v": [5]})).when_matched_update_all().stage(t.version)
    version = t.version
    with pytest.raises(errors.InvalidInput):
        t.commit([write, share])
    plan = t.plan_compaction()
    message = plan.staged([task.run() for task in plan.tasks])
    with pytest.raises(errors.InvalidInput):
        t.commit([message], idempotency_key="k")  # a compaction changes no row: it takes no key
    assert t.version == version and not {f.path for f in [*write.files, *share.files]} & on_disk(t)
    assert not {f.path for f in message.files} & on_disk(t)
    write = t.stage(pa.table({"id": [9], "v": [9]}))
    share = t.merge(pa.table({"id": [1], "v": [5]})).when_matched_update_all().stage(t.version)
    t.abort([write, None, share])
    assert not {f.path for f in [*write.files, *share.files]} & on_disk(t)
    assert t.version == version
