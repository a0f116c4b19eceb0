"""No command deletes what mere did not create: ``cleanup`` and ``drop_table(purge=True)`` delete only files
whose names are the names mere gives its data files, wherever under the table's location others put
theirs, and whatever those look like (near misses of mere's names included)."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.io import Storage

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("day", pa.string()), ("qty", pa.int64())])
HEX = "0123456789abcdef" * 2
_names = itertools.count()

# Names mere never gives: each is one step from a mere name, or a name another tool leaves.
NOT_MERE = [
    "_SUCCESS",
    "notes.txt",
    "backup.parquet",
    "part-0.parquet",
    f"part-{HEX[:31]}.parquet",
    f"part-{HEX.upper()}.parquet",
    f"part-{HEX}.parquet.crc",
    f".part-{HEX}.parquet.crc",
    f"part-{HEX}.parq",
    f"data-{HEX}.parquet",
    f"part-a-b-{HEX}.parquet",
    f"part--{HEX}.parquet",
    f"Part-{HEX}.parquet",
    f"part-{HEX}.parquet~",
    f"part-{'x' * 65}-{HEX}.parquet",
]
# Every shape of name mere gives: data, delete and log files, with and without a write id.
MERE = st.builds(
    lambda prefix, write_id, digits: f"{prefix}-{write_id + '-' if write_id else ''}{digits}.parquet",
    st.sampled_from(["part", "del", "log"]),
    st.one_of(st.just(""), st.from_regex(r"[A-Za-z0-9_]{1,64}", fullmatch=True)),
    st.text("0123456789abcdef", min_size=32, max_size=32),
)


def _rows(ids: list[int], day: str = "d1") -> pa.Table:
    return pa.table({"id": ids, "day": [day] * len(ids), "qty": [1] * len(ids)}, schema=SCHEMA)


def _table(cat: mere.Catalog) -> mere.Table:
    t = cat.create_table(f"s.t{next(_names)}", SCHEMA, primary_key="id", buckets=2, partition_by="day")
    t.upsert(_rows([1, 2, 3]))
    t.upsert(_rows([4], day="d2"))
    return t


def _place(t: mere.Table, folders: list[str], names: list[str]) -> list[str]:
    """Files at ``folder/name`` under the table's location (folders below it, made as needed)."""
    placed = []
    for folder, name in zip(itertools.cycle(folders), names):
        rel = "/".join(x for x in (t.location, folder, name) if x)
        path = Path(t.storage.full_path(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not mere's")
        os.utime(path, (0, 0))  # old enough for any cutoff
        placed.append(rel)
    return placed


def _folders(t: mere.Table) -> list[str]:
    """The table's folders: its partitions' and buckets', and one of its own."""
    data = sorted({p.rpartition("/")[0][len(t.location) + 1 :] for p in t.files().column("path").to_pylist()})
    return ["", *data, "mine", "mine/deeper"]


@pytest.mark.parametrize("foreign", NOT_MERE)
def test_near_misses_of_mere_names_are_not_mere_names(foreign: str) -> None:
    assert not Storage.made_by_mere(f"a/b/{foreign}")
    assert Storage.made_by_mere(f"a/b/part-{HEX}.parquet")


@given(names=st.lists(MERE, min_size=1, max_size=5))
def test_every_name_mere_gives_is_a_mere_name(names: list[str]) -> None:
    given_names = [
        Storage.unique_name(p, w) for p, w in (("part", None), ("del", "job_1"), ("log", "W" * 64))
    ]
    assert all(Storage.made_by_mere(n) for n in [*names, *given_names])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    foreign=st.lists(st.sampled_from(NOT_MERE), min_size=1, max_size=6, unique=True),
    orphans=st.lists(MERE, min_size=0, max_size=4, unique=True),
)
def test_cleanup_deletes_only_unreferenced_files_mere_wrote(
    tmp_path_factory: pytest.TempPathFactory, foreign: list[str], orphans: list[str]
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = _table(cat)
    folders = _folders(t)
    theirs = _place(t, folders, foreign)
    left = _place(t, folders[1:], orphans)  # what killed writes of mere leave
    rows, version = t.to_arrow(), t.version

    assert sorted(t.cleanup(dt.timedelta(0))) == sorted(left)  # the dry run lists the same
    assert sorted(t.cleanup(dt.timedelta(0), dry_run=False)) == sorted(left)

    on_disk = {p for p, _, _ in t.storage.list_files(t.location)}
    assert set(theirs) <= on_disk and not set(left) & on_disk
    assert t.version == version and t.to_arrow().equals(rows)
    assert t.cleanup(dt.timedelta(0), dry_run=False) == []


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(foreign=st.lists(st.sampled_from(NOT_MERE), min_size=0, max_size=4, unique=True), deep=st.booleans())
def test_purge_leaves_the_files_mere_did_not_write_and_their_folders(
    tmp_path_factory: pytest.TempPathFactory, foreign: list[str], deep: bool
) -> None:
    wh = tmp_path_factory.mktemp("wh")
    cat = mere.connect(str(wh))
    t, keep = _table(cat), _table(cat)
    folders = _folders(t)
    theirs = _place(t, folders[-1:] if deep else folders, foreign)
    ours = t.files().column("path").to_pylist()
    kept = {p for p, _, _ in keep.storage.list_files(keep.location)}

    cat.drop_table(t.name, purge=True)

    location = Path(t.storage.full_path(t.location))
    on_disk = {p.relative_to(location.parent.parent).as_posix() for p in location.rglob("*") if p.is_file()}
    assert on_disk == set(theirs)
    assert not any(Path(t.storage.full_path(p)).exists() for p in ours)
    # Folders left hold something mere did not write; mere's empty ones are gone.
    for folder in (p for p in location.rglob("*") if p.is_dir()):
        assert any(f.is_file() for f in folder.rglob("*"))
    assert location.exists() == bool(theirs)
    assert {p for p, _, _ in keep.storage.list_files(keep.location)} == kept
    assert keep.to_arrow().num_rows == 4


def test_purge_names_the_files_it_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = _table(cat)
    theirs = _place(t, ["", "day=d1"], ["_SUCCESS", "notes.txt"])
    with caplog.at_level(logging.WARNING, logger="mere"):
        cat.drop_table(t.name, purge=True)
    assert "purge left 2 files mere did not write" in caplog.text
    assert all(p in caplog.text for p in theirs)
    again = cat.create_table(t.name, SCHEMA, primary_key="id")  # a new table, a new location
    assert again.location != t.location and again.to_arrow().num_rows == 0


def test_a_failed_job_undoing_its_new_table_leaves_files_mere_did_not_write(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("s.new", SCHEMA, primary_key="id", buckets=2)
    theirs = _place(t, ["", "bucket-00001"], ["_SUCCESS", "notes.txt"])
    assert cat.drop_if_unchanged(t, t.version)
    assert all(Path(t.storage.full_path(p)).exists() for p in theirs)
    assert not cat.exists("s.new")
    assert not any(Storage.made_by_mere(p) for p, _, _ in t.storage.list_files(t.location))
