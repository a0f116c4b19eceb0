"""Adversarial checks of ``Table.abort_write``: it deletes exactly the unreferenced files of one write id.

Ids that are prefixes, suffixes or case variants of each other; tables with a change log, a change column
and no key; committed writes of the same id later compacted, rolled back, overwritten and expired; a
reused id; a dropped and recreated table; a table name that extends another's location; odd partition
values; thousands of files; PostgreSQL catalogs and a real S3 server (SeaweedFS). A commit that already
holds the staged files (an open transaction) is refused when it lands after abort_write deleted them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import CommitFailed, MereError, NoSuchTable

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64())])
# A tiny alphabet: drawn ids are often prefixes, suffixes or case variants of one another.
IDS = st.text(alphabet="aA_0", min_size=1, max_size=4)
KINDS = ["keyed", "change_log", "cdc", "no_key"]
STAGED_NAME = re.compile(r"[a-z]+-([A-Za-z0-9_]+)-[0-9a-f]{32}\.parquet")
_names = iter(range(10**9))


def _create(cat: mere.Catalog, kind: str) -> mere.Table:
    name = f"adv.t{next(_names)}_{uuid.uuid4().hex[:6]}"
    if kind == "no_key":
        return cat.create_table(name, SCHEMA, partition_by="day")
    if kind == "cdc":
        schema = SCHEMA.append(pa.field("op", pa.string()))
        return cat.create_table(
            name, schema, primary_key="id", partition_by="day", buckets=2, cdc_column="op"
        )
    props = {"changes.log": "on"} if kind == "change_log" else None
    return cat.create_table(name, SCHEMA, primary_key="id", partition_by="day", buckets=2, properties=props)


def _rows(t: mere.Table, seed: int, n: int) -> pa.Table:
    ids = [(seed * 7919 + i * 31) % 97 for i in range(n)]
    rows = pa.table(
        {"id": ids, "day": [f"d{i % 3}" for i in ids], "qty": [seed * 1000 + i for i in range(n)]}, SCHEMA
    )
    if "op" in t.schema.names:
        rows = rows.append_column("op", pa.array(["U"] * n))
    return rows


def _on_disk(t: mere.Table) -> set[str]:
    return {p for p, _size, _mtime in t.storage.list_files(t.location)}


def _referenced(t: mere.Table) -> set[str]:
    return t.context.store.all_file_paths(t.context.table_id)


def _readable_versions(t: mere.Table) -> dict[int, pa.Table]:
    """Every version still readable (not expired), read whole, sorted."""
    out = {}
    for snap in t.history():
        if getattr(snap, "expired", False):
            continue
        try:
            rows = t.scan(version=snap.version).to_arrow()
        except MereError:
            continue
        out[snap.version] = rows.sort_by([(c, "ascending") for c in ("id", "qty") if c in rows.column_names])
    return out


def _stage_kind(t: mere.Table) -> list[str]:
    return ["append"] if not t.primary_key else ["upsert", "delete"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(KINDS),
    ids=st.lists(IDS, min_size=2, max_size=4, unique=True),
    steps=st.lists(
        st.one_of(
            st.tuples(
                st.just("stage"), st.integers(0, 4), st.integers(0, 1), st.booleans(), st.integers(1, 25)
            ),
            st.tuples(st.sampled_from(["compact", "expire", "rollback", "overwrite", "tag"])),
        ),
        min_size=1,
        max_size=9,
    ),
    chosen=st.integers(0, 3),
)
def test_abort_write_deletes_only_its_unreferenced_files_whatever_happened_before(
    cat: mere.Catalog, kind: str, ids: list[str], steps: list[tuple], chosen: int
) -> None:
    """Model: every staged file of id X that was never committed is X's to delete; every other file stays.
    Between writes the table is compacted, rolled back, overwritten, tagged and expired (files a committed
    write of X added leave the table and some are deleted by expiry). Every readable version stays
    readable and unchanged, and the listing afterwards is the listing before minus what was returned."""
    t = _create(cat, kind)
    t.upsert(_rows(t, 99, 30)) if t.primary_key else t.append(_rows(t, 99, 30))
    lost: dict[str, set[str]] = {}
    for seed, step in enumerate(steps):
        if step[0] == "stage":
            _, which, op, committed, n = step
            write_id = ids[which % len(ids)]
            operation = _stage_kind(t)[op % len(_stage_kind(t))]
            staged = t.stage(_rows(t, seed, n), operation, write_id=write_id)
            if committed:
                t.commit([staged])
            else:
                lost.setdefault(write_id, set()).update(f.path for f in staged.files)
        elif step[0] == "compact":
            t.compact()
        elif step[0] == "expire":
            t.expire(older_than=dt.timedelta(0), dry_run=False)
        elif step[0] == "rollback" and t.version > 1:
            with contextlib.suppress(MereError):  # the version expired meanwhile
                t.rollback(t.version - 1)
        elif step[0] == "overwrite":
            t.overwrite(_rows(t, 500 + seed, 10))
        elif step[0] == "tag":
            t.tag(f"tag{seed}", replace=True)
    target = ids[chosen % len(ids)]
    versions, before, referenced = _readable_versions(t), _on_disk(t), _referenced(t)
    version = t.version

    removed = t.abort_write(target)

    assert set(removed) == lost.get(target, set()) & before
    assert not set(removed) & referenced
    assert _on_disk(t) == before - set(removed)
    assert t.refresh().version == version
    assert _readable_versions(t) == versions
    assert t.abort_write(target) == []
    # files named for other ids are all still there, whether referenced or not
    for other, paths in lost.items():
        if other != target:
            assert paths & before <= _on_disk(t)


def test_ids_that_extend_each_other_never_match_each_others_files(tmp_path: Path) -> None:
    """An id that is a prefix, suffix, infix or case variant of another, or looks like a file's uuid."""
    t = _create(mere.connect(str(tmp_path / "wh")), "keyed")
    hexid = uuid.uuid4().hex
    ids = ["a", "aa", "a_", "_a", "A", "a_a", "part", "del", hexid, hexid[:16], "0" * 64]
    staged = {i: t.stage(_rows(t, n, 12), "upsert", write_id=i) for n, i in enumerate(ids)}
    t.upsert(_rows(t, 77, 12))  # files named without an id
    for write_id in ids:
        removed = set(t.abort_write(write_id))
        assert removed == {f.path for f in staged[write_id].files}
        for path in removed:
            m = STAGED_NAME.fullmatch(Path(path).name)
            assert m is not None and m.group(1) == write_id
    assert t.cleanup(dt.timedelta(0)) == []  # no staged file of any id is left


def test_a_committed_writes_change_log_and_markers_stay(tmp_path: Path) -> None:
    """With ``changes.log`` on, the commit writes ``log-`` files (named without the id); staged delete
    markers carry the id. After the commit none of them is taken, and the change feed still reads."""
    t = _create(mere.connect(str(tmp_path / "wh")), "change_log")
    t.upsert(_rows(t, 1, 40))
    up = t.stage(_rows(t, 2, 20), "upsert", write_id="job")
    t.commit([up])
    gone = t.stage(_rows(t, 2, 5).select(["id", "day"]), "delete", write_id="job")
    t.commit([gone])
    assert any(Path(f.path).name.startswith("del-job-") for f in gone.files)
    logs = {p for p in _referenced(t) if Path(p).name.startswith("log-")}
    assert logs  # the change log was written
    feed = t.changes(start_version=1).read_all()
    lost = t.stage(_rows(t, 3, 9), "upsert", write_id="job")
    assert set(t.abort_write("job")) == {f.path for f in lost.files}
    assert logs <= _on_disk(t)
    assert t.changes(start_version=1).read_all().equals(feed)


def test_a_reused_id_deletes_the_other_jobs_staged_files_but_its_commit_then_fails_cleanly(
    tmp_path: Path,
) -> None:
    """Two jobs with one id (a deterministic id, such as a scheduler's run name): the first job's driver
    aborts while the second has staged. The second job's files go, and its commit is refused (the files are
    missing) instead of landing a version without its files."""
    t = _create(mere.connect(str(tmp_path / "wh")), "keyed")
    t.upsert(_rows(t, 1, 30))
    first = t.stage(_rows(t, 2, 10), "upsert", write_id="daily")
    t.commit([first])
    second = t.stage(_rows(t, 3, 10), "upsert", write_id="daily")
    rows, version = t.to_arrow(), t.version
    assert set(t.abort_write("daily")) == {f.path for f in second.files}
    with pytest.raises(CommitFailed, match="no longer exist"):
        t.commit([second])
    assert t.refresh().version == version
    assert t.to_arrow().equals(rows)


@pytest.mark.parametrize("how", ["transaction", "catalog_transaction"])
def test_a_commit_holding_the_staged_files_does_not_land_after_abort_write(tmp_path: Path, how: str) -> None:
    cat = mere.connect(str(tmp_path / "wh"))
    # (With partitions and several buckets the commit happens to read the staged files' footers and fails
    # cleanly; a table with one key column and default layout commits without reading them.)
    t = cat.create_table("adv.held", SCHEMA, primary_key="id")
    t.upsert(_rows(t, 1, 20))
    rows = t.to_arrow()
    staged = t.stage(_rows(t, 2, 10), "upsert", write_id="job")
    if how == "transaction":
        tx = t.transaction()
        tx.add_staged([staged])
        assert set(t.abort_write("job")) == {f.path for f in staged.files}
        landed = None
        with contextlib.suppress(MereError):
            landed = tx.commit()
    else:
        landed = None
        try:
            with cat.transaction() as ctx:
                ctx.table(t.name).add_staged([staged])
                assert set(t.abort_write("job")) == {f.path for f in staged.files}
            landed = True
        except MereError:
            pass
    t = t.refresh()
    try:
        read: object = t.to_arrow()
    except MereError as e:  # what happens now: the landed version names the deleted files
        read = e
    # Wanted: the commit is refused (as after a cleanup), so the table still reads.
    assert isinstance(read, pa.Table) and read.equals(rows), f"unreadable after the commit landed: {read}"
    assert landed is None, "the commit landed without its files"


def test_cleanup_fences_the_same_commit(tmp_path: Path) -> None:
    """As after abort_write above: cleanup() refuses the held commit, and the table still reads."""
    t = _create(mere.connect(str(tmp_path / "wh")), "keyed")
    t.upsert(_rows(t, 1, 20))
    rows = t.to_arrow()
    staged = t.stage(_rows(t, 2, 10), "upsert", write_id="job")
    tx = t.transaction()
    tx.add_staged([staged])
    time.sleep(0.01)
    assert {f.path for f in staged.files} <= set(t.cleanup(dt.timedelta(0), dry_run=False))
    with pytest.raises(MereError):
        tx.commit()
    assert t.refresh().to_arrow().equals(rows)


def test_dropped_and_recreated_table_of_the_same_name(tmp_path: Path) -> None:
    """The old handle is refused; the new table's abort_write never reaches the old (unpurged) files."""
    cat = mere.connect(str(tmp_path / "wh"))
    old = cat.create_table("adv.same", SCHEMA, primary_key="id", partition_by="day")
    old.commit([old.stage(_rows(old, 1, 10), "upsert", write_id="job")])
    old_lost = old.stage(_rows(old, 2, 10), "upsert", write_id="job")
    old_files = _on_disk(old)
    cat.drop_table("adv.same")
    new = cat.create_table("adv.same", SCHEMA, primary_key="id", partition_by="day")
    assert new.location != old.location
    new.commit([new.stage(_rows(new, 3, 10), "upsert", write_id="job")])
    new_lost = new.stage(_rows(new, 4, 10), "upsert", write_id="job")
    with pytest.raises(NoSuchTable):
        old.abort_write("job")
    assert set(new.abort_write("job")) == {f.path for f in new_lost.files}
    assert old_files <= {p for p, _s, _m in new.storage.list_files(old.location)}
    assert {f.path for f in old_lost.files} <= old_files
    assert new.to_arrow().num_rows == 10


def test_a_table_whose_name_extends_anothers_location(tmp_path: Path) -> None:
    """Table ``t`` lives at ``ns/t-<uuid12>``; a table named ``t-<uuid12>`` lives at ``ns/t-<uuid12>-...``,
    so the first location is a string prefix of the second's. abort_write on ``t`` lists its own folder."""
    cat = mere.connect(str(tmp_path / "wh"))
    t = cat.create_table("adv.t", SCHEMA, primary_key="id")
    other = cat.create_table(f"adv.{t.location.split('/')[-1]}", SCHEMA, primary_key="id")
    assert other.location.startswith(t.location)
    lost_other = other.stage(_rows(other, 1, 10), "upsert", write_id="job")
    other.commit([other.stage(_rows(other, 2, 10), "upsert", write_id="job")])
    lost = t.stage(_rows(t, 3, 10), "upsert", write_id="job")
    assert set(t.abort_write("job")) == {f.path for f in lost.files}
    assert {f.path for f in lost_other.files} <= _on_disk(other)
    assert other.to_arrow().num_rows == 10


ODD_DAYS = [
    "a/b",
    "50%",
    "x y",
    "€uro",
    "a+b",
    "q?x",
    "h#",
    "..",
    ".",
    "a%2Fb",
    "e\u0301",
    "*",
    "a\\b",
    "",
    None,
]


def test_odd_partition_values_of_committed_files_are_matched_as_referenced(tmp_path: Path) -> None:
    t = _create(mere.connect(str(tmp_path / "wh")), "keyed")
    days = [*ODD_DAYS, "x" * 300]
    rows = pa.table({"id": list(range(len(days))), "day": days, "qty": [1] * len(days)}, SCHEMA)
    t.commit([t.stage(rows, "upsert", write_id="job")])
    lost = t.stage(rows.set_column(2, "qty", pa.array([2] * len(days))), "upsert", write_id="job")
    assert set(t.abort_write("job")) == {f.path for f in lost.files}
    assert t.to_arrow().sort_by("id").to_pylist() == rows.to_pylist()


def test_thousands_of_files_are_listed_once(tmp_path: Path) -> None:
    """2,000 committed files, 2,000 lost ones of the id and 2,000 foreign ones named without it: a few
    seconds at most (one listing, one catalog read, a set lookup per file)."""
    t = mere.connect(str(tmp_path / "wh")).create_table(
        "adv.many", pa.schema([("id", pa.int64()), ("p", pa.int64())]), primary_key="id", partition_by="p"
    )
    n = 2000
    rows = pa.table({"id": range(n), "p": range(n)}, t.schema)
    t.commit([t.stage(rows, "upsert", write_id="job")])
    lost = t.stage(rows, "upsert", write_id="job")
    base = Path(t.storage.full_path(t.location))
    for i in range(n):
        (base / f"p={i}" / f"part-{uuid.uuid4().hex}.parquet").write_bytes(b"not mere's")
    started = time.perf_counter()
    removed = t.abort_write("job")
    took = time.perf_counter() - started
    assert set(removed) == {f.path for f in lost.files}
    assert took < 10, took
    started = time.perf_counter()
    assert t.abort_write("job") == []
    assert time.perf_counter() - started < 5
    assert t.to_arrow().num_rows == n


@pytest.mark.postgres
def test_postgres_catalog(pg_server: object, tmp_path: Path) -> None:
    """The same model on a PostgreSQL catalog: a commit, a compaction and an expiry, then the abort."""
    url = pg_server.create_database(f"abort_adv_{uuid.uuid4().hex[:8]}")  # type: ignore[attr-defined]
    cat = mere.connect(str(tmp_path / "wh"), catalog=url)
    t = _create(cat, "change_log")
    t.upsert(_rows(t, 1, 30))
    committed = t.stage(_rows(t, 2, 20), "upsert", write_id="pg_job")
    t.commit([committed])
    t.compact()
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    lost = t.stage(_rows(t, 3, 20), "delete", write_id="pg_job")
    lost2 = t.stage(_rows(t, 4, 20), "upsert", write_id="pg_job")
    rows = t.to_arrow()
    assert set(t.abort_write("pg_job")) == {f.path for f in [*lost.files, *lost2.files]}
    assert t.to_arrow().equals(rows)
    assert t.cleanup(dt.timedelta(0)) == []


# -- a real S3 server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seaweed() -> Iterator[object]:
    services = pytest.importorskip("services")
    if services.find_weed() is None:
        pytest.skip("no SeaweedFS binary")
    with services.SeaweedServer() as server:
        yield server


@pytest.mark.s3
def test_s3_odd_partition_values_and_a_location_prefix(seaweed: object, tmp_path: Path) -> None:
    """On S3 keys hold the percent-encoded partition folders as they are; a listing of ``ns/t-<uuid12>`` is
    a folder listing, not a key-prefix one that would reach the table named ``t-<uuid12>``."""
    bucket = seaweed.create_bucket(f"abort-adv-{uuid.uuid4().hex[:8]}")  # type: ignore[attr-defined]
    cat = mere.connect(
        f"s3://{bucket}/wh",
        catalog=f"sqlite:///{tmp_path / 'c.db'}",
        storage_options=seaweed.storage_options(),  # type: ignore[attr-defined]
    )
    t = _create(cat, "keyed")
    other = cat.create_table(f"adv.{t.location.split('/')[-1]}", SCHEMA, primary_key="id")
    other_lost = other.stage(_rows(other, 1, 10), "upsert", write_id="job")
    rows = pa.table({"id": list(range(len(ODD_DAYS))), "day": ODD_DAYS, "qty": [1] * len(ODD_DAYS)}, SCHEMA)
    t.commit([t.stage(rows, "upsert", write_id="job")])
    lost = t.stage(rows.set_column(2, "qty", pa.array([2] * len(ODD_DAYS))), "upsert", write_id="job")
    assert set(t.abort_write("job")) == {f.path for f in lost.files}
    assert t.to_arrow().sort_by("id").to_pylist() == rows.to_pylist()
    assert {f.path for f in other_lost.files} <= _on_disk(other)
    assert set(other.abort_write("job")) == {f.path for f in other_lost.files}
    assert pc.sum(t.to_arrow()["qty"]).as_py() == len(ODD_DAYS)
