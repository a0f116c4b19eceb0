"""Adversarial trial 53: maintenance interleaved with multi-table catalog transactions.

The oracle is a dict model per table that keeps every version's expected rows. A rule-based state machine
over three keyed tables (one of them compacting itself inline) mixes catalog transactions over one to three
tables (committed, aborted, raising mid-way, failing on a bad operation, with idempotency keys that are
replayed later, also after the versions they made were compacted, rolled back or expired), single-table
upserts and blind deletes (sometimes with a catalog transaction's key), full and tiered compaction, expiry
(cutoff now, a cutoff between versions, nothing), rollback by version and by tag with a current or a stale
``expected_version``, tags (also moved and removed, and on expired versions), staged writes that are never
committed, ``abort_write`` and ``cleanup``. Every table directory holds foreign files mere must never touch.

After every step: current rows equal the model; every retained version reads its model rows; every expired
version raises ``NoSuchVersion``; tagged versions are never expired; every file a retained version lists is on
disk; foreign files survive; a cleanup removes only mere-named files no retained version lists.

A threaded test races a writer against a maintainer (compaction, expire, rollback with ``expected_version``)
and rebuilds the expected contents of every version from the history at the end.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import mere
from mere import errors

NAMES = ["n.a", "n.b", "n.c"]
SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
STILL = {"compaction.auto": "off", "retention.max-age": "off"}
SELF_COMPACTING = {"compaction.auto": "inline", "compaction.min-files": "3", "retention.max-age": "off"}
KEYS = st.integers(0, 7)
VALS = st.integers(-50, 50)
FOREIGN = ["README.txt", "part-notmine.parquet", "bucket-00000/notes.parquet.bak", "bucket-00001/_SUCCESS"]
MERE_NAME = re.compile(r"(part|del|log)-([A-Za-z0-9_]+-)?[0-9a-f]{32}\.parquet$")

Model = dict[int, int]


class Boom(Exception):
    pass


def rows(model: Model) -> pa.Table:
    return pa.table({"k": pa.array(list(model), pa.int64()), "v": pa.array(list(model.values()), pa.int64())})


def read(t: mere.Table, **kw: Any) -> Model:
    out: Model = {}
    for r in t.to_arrow(**kw).to_pylist():
        assert r["k"] not in out, f"key {r['k']} read twice"
        out[r["k"]] = r["v"]
    return out


def on_disk(cat: mere.Catalog, t: mere.Table) -> set[str]:
    return {p for p, _, _ in cat.storage.list_files(t.location)}


def fill_compactions(t: mere.Table, snaps: dict[int, Model]) -> None:
    """Versions the model has not seen must be compactions (automatic ones): they read as the one before."""
    for s in t.history():
        if s.version not in snaps:
            assert s.operation == "compact", (t.name, s)
            snaps[s.version] = dict(snaps[s.version - 1])


class TransactionsAndMaintenance(RuleBasedStateMachine):
    catalog_url: str | None = None

    @staticmethod
    def make_pg_database() -> str:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.tmp = tempfile.TemporaryDirectory(prefix="maint53-")
        root = Path(self.tmp.name) / "wh"
        url = self.make_pg_database() if self.catalog_url == "postgresql" else None
        self.root = root
        self.cat = mere.connect(str(root), catalog=url) if url else mere.connect(str(root))
        self.model: dict[str, Model] = {n: {} for n in NAMES}
        self.snaps: dict[str, dict[int, Model]] = {n: {0: {}} for n in NAMES}
        self.expired: dict[str, set[int]] = {n: set() for n in NAMES}
        self.keys: dict[str, tuple[frozenset[str], dict[str, int]]] = {}
        self.counter = itertools.count()
        self.orphans: dict[str, set[str]] = {n: set() for n in NAMES}
        for n in NAMES:
            props = SELF_COMPACTING if n == "n.c" else STILL
            t = self.cat.create_table(n, SCHEMA, primary_key="k", buckets=2, properties=props)
            base = root / t.location
            for f in FOREIGN:
                (base / f).parent.mkdir(parents=True, exist_ok=True)
                (base / f).write_text("not mere's")
                old = time.time() - 86400
                os.utime(base / f, (old, old))

    def teardown(self) -> None:
        self.check_everything(every_version=True)
        self.tmp.cleanup()

    def t(self, name: str) -> mere.Table:
        return self.cat.table(name)

    def state(self) -> dict[str, Any]:
        out = {}
        for n in NAMES:
            t = self.t(n)
            out[n] = (t.version, [(s.version, s.expired) for s in t.history()], t.tags(), read(t))
        return out

    def note_commit(self, name: str, new: Model) -> None:
        t = self.t(name)
        before = max(self.snaps[name])
        if t.version == before:
            assert new == self.model[name], (name, "no version but the model changed")
            return
        self.snaps[name][before + 1] = dict(new)
        self.model[name] = dict(new)
        fill_compactions(t, self.snaps[name])

    # -- catalog transactions ------------------------------------------------------------------------

    @rule(
        data=st.data(),
        outcome=st.sampled_from(["commit", "commit", "commit", "raise", "abort", "bad_op"]),
        keyed=st.sampled_from(["none", "fresh", "replay"]),
    )
    def catalog_transaction(self, data: st.DataObject, outcome: str, keyed: str) -> None:
        names = sorted(data.draw(st.sets(st.sampled_from(NAMES), min_size=1, max_size=3)))
        key: str | None = None
        replay = None
        if keyed == "replay" and self.keys:
            key = data.draw(st.sampled_from(sorted(self.keys)))
            replay = self.keys[key]
            names = sorted(replay[0])  # the same set of tables (another set is refused)
        elif keyed != "none":
            key = f"batch-{next(self.counter)}"
        ops = {
            n: data.draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(["upsert", "delete", "staged"]),
                        st.dictionaries(KEYS, VALS, min_size=1),
                    ),
                    min_size=1,
                    max_size=3,
                )
            )
            for n in names
        }
        before = self.state()
        tx = self.cat.transaction(idempotency_key=key)
        expected = {n: dict(self.model[n]) for n in names}
        failed = False
        staged_paths: set[str] = set()
        try:
            with tx:
                for i, n in enumerate(names):
                    share = tx.table(n)
                    for kind, change in ops[n]:
                        if kind == "upsert":
                            share.upsert(rows(change))
                            expected[n].update(change)
                        elif kind == "staged":  # a distributed write's driver half
                            staged = self.t(n).stage(rows(change), "upsert")
                            staged_paths |= {f.path for f in staged.files}
                            share.add_staged([staged])
                            expected[n].update(change)
                        else:
                            share.delete(pa.table({"k": pa.array(list(change), pa.int64())}))
                            for k in change:
                                expected[n].pop(k, None)
                    if outcome == "raise" and i == len(names) - 1:
                        raise Boom
                    if outcome == "bad_op" and i == len(names) - 1:
                        share.upsert(pa.table({"k": [1], "v": ["not a number"]}))
                    if outcome == "abort" and i == len(names) - 1:
                        tx.abort()
                        break
        except Boom:
            failed = True
        except errors.InvalidInput:
            assert outcome == "bad_op" and replay is None
            failed = True
        if replay is not None or failed or outcome == "abort":
            disk = set().union(*(on_disk(self.cat, self.t(n)) for n in names))
            assert not staged_paths & disk, "staged files of a transaction that did not commit stay"
        if replay is not None:
            assert outcome in ("commit", "bad_op", "raise", "abort")
            # a replay does nothing whatever it holds (a raising block raises all the same)
            if outcome == "commit" or (outcome == "bad_op" and not failed):
                assert all(r.already_committed for r in tx.results.values())
                assert {n: r.version for n, r in tx.results.items()} == replay[1]
            assert self.state() == before, "a replayed transaction changed something"
            return
        if failed or outcome == "abort":
            assert self.state() == before, f"a {outcome} transaction changed something"
            return
        assert outcome == "commit"
        for n in names:
            self.note_commit(n, expected[n])
        if key is not None:
            self.keys[key] = (frozenset(names), {n: r.version for n, r in tx.results.items()})

    @initialize(seed=st.lists(st.dictionaries(KEYS, VALS, min_size=2, max_size=6), min_size=2, max_size=3))
    def fill(self, seed: list[Model]) -> None:
        for change in seed:
            with self.cat.transaction() as tx:
                for n in NAMES:
                    tx.table(n).upsert(rows(change))
            for n in NAMES:
                self.note_commit(n, {**self.model[n], **change})

    # -- single-table writes -------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(NAMES),
        change=st.dictionaries(KEYS, VALS, min_size=1, max_size=4),
        delete=st.booleans(),
        with_tx_key=st.booleans(),
    )
    def single_write(self, name: str, change: Model, delete: bool, with_tx_key: bool) -> None:
        t = self.t(name)
        key = None
        if with_tx_key:
            mine = [k for k, (ns, _) in self.keys.items() if name in ns]
            key = sorted(mine)[0] if mine else None
        new = dict(self.model[name])
        if delete:
            result = t.delete(pa.table({"k": pa.array(list(change), pa.int64())}), idempotency_key=key)
            for k in change:
                new.pop(k, None)
        else:
            result = t.upsert(rows(change), idempotency_key=key)
            new.update(change)
        if key is not None:
            assert result.already_committed and result.version == self.keys[key][1][name]
            assert read(t) == self.model[name]
            return
        self.note_commit(name, new)

    # -- maintenance ---------------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), tiered=st.booleans())
    def compact(self, name: str, tiered: bool) -> None:
        t = self.t(name)
        result = t.compact(tiered=tiered)
        if result is not None:
            assert result.operation == "compact"
        fill_compactions(t, self.snaps[name])

    @rule(name=st.sampled_from(NAMES), tiered=st.booleans(), data=st.data())
    def compact_then_expire(self, name: str, tiered: bool, data: st.DataObject) -> None:
        self.compact(name, tiered)
        self.expire(name, data.draw(st.sampled_from(["now", "between"])), data)

    @rule(name=st.sampled_from(NAMES), how=st.sampled_from(["now", "between", "old"]), data=st.data())
    def expire(self, name: str, how: str, data: st.DataObject) -> None:
        t = self.t(name)
        hist = t.history()
        tagged = set(t.tags().values())
        current = t.version
        lower = -1  # every untagged version below this must expire
        if how == "now":
            older = dt.timedelta(0)
            lower = current
        elif how == "old":
            older = dt.timedelta(days=3650)
        else:
            v = data.draw(st.integers(0, current))
            at = next(s.committed_at for s in hist if s.version == v)
            older = max(dt.timedelta(0), dt.datetime.now(dt.UTC) - at - dt.timedelta(microseconds=1))
            lower = v
        retained_before = self.retained_files(t)
        deleted = t.expire(older, dry_run=False)
        for p in deleted:
            assert MERE_NAME.search(p), p
        after = {s.version: s.expired for s in t.history()}
        now_expired = {v for v, e in after.items() if e}
        assert self.expired[name] <= now_expired, "an expired version came back"
        assert not now_expired & tagged, "a tagged version expired"
        assert not after[current], "the current version expired"
        for v in range(lower):
            if v not in tagged:
                assert after[v], f"{name}: untagged version {v} older than the cutoff stayed"
        self.expired[name] = now_expired
        still = self.retained_files(t)
        assert not set(deleted) & still, "expire deleted a file a retained version lists"
        assert set(deleted) <= retained_before

    def retained_files(self, t: mere.Table) -> set[str]:
        out: set[str] = set()
        for s in t.history():
            if not s.expired:
                out |= set(t.inspect.files(s.version).column("path").to_pylist())
        return out

    @rule(
        name=st.sampled_from(NAMES),
        data=st.data(),
        by_tag=st.booleans(),
        stale=st.sampled_from([None, 0, 1, 2]),
    )
    def rollback(self, name: str, data: st.DataObject, by_tag: bool, stale: int | None) -> None:
        t = self.t(name)
        tags = t.tags()
        if by_tag and tags:
            tag: str | None = data.draw(st.sampled_from(sorted(tags)))
            target = tags[tag]  # type: ignore[index]
        else:
            tag = None
            target = data.draw(st.integers(0, t.version))
        current = t.version
        expected_version = None if stale is None else max(0, current - stale)
        hist = {s.version: s for s in t.history()}
        before = self.state()
        writes_after = (
            [v for v in range(expected_version + 1, current + 1) if hist[v].operation != "compact"]
            if expected_version is not None
            else []
        )
        try:
            if tag is not None:
                result = t.rollback(tag=tag, expected_version=expected_version)
            else:
                result = t.rollback(target, expected_version=expected_version)
        except errors.NoSuchVersion:
            assert target in self.expired[name], f"{name}: rollback to retained version {target} refused"
            assert self.state() == before
            return
        except errors.CommitConflict:
            assert writes_after, (
                f"{name}: rollback refused though only compactions followed {expected_version}"
            )
            assert self.state() == before
            return
        assert target not in self.expired[name], "a rollback to an expired version landed"
        assert not writes_after, f"{name}: rollback undid writes {writes_after} after {expected_version}"
        assert result.operation == "rollback"
        self.note_commit(name, self.snaps[name][target])

    @rule(name=st.sampled_from(NAMES), data=st.data(), tag=st.sampled_from(["t1", "t2", "rel-3"]))
    def tag(self, name: str, data: st.DataObject, tag: str) -> None:
        t = self.t(name)
        v = data.draw(st.integers(0, t.version))
        tags = t.tags()
        replace = data.draw(st.booleans())
        try:
            got = t.tag(tag, v, replace=replace)
        except errors.TagExists:
            assert tag in tags and not replace
            return
        except errors.NoSuchVersion:
            assert v in self.expired[name] and v not in tags.values()
            assert t.tags() == tags
            return
        assert got == v and v not in self.expired[name]
        assert t.tags()[tag] == v
        # moving a tag off an old version may give that version up at once (see Table.untag)
        self.expired[name] = {s.version for s in t.history() if s.expired}

    @rule(name=st.sampled_from(NAMES), tag=st.sampled_from(["t1", "t2", "rel-3"]))
    def untag(self, name: str, tag: str) -> None:
        t = self.t(name)
        if tag not in t.tags():
            with pytest.raises(errors.NoSuchTag):
                t.untag(tag)
            return
        t.untag(tag)
        now = {s.version for s in t.history() if s.expired}
        assert self.expired[name] <= now
        self.expired[name] = now

    @rule(
        name=st.sampled_from(NAMES),
        change=st.dictionaries(KEYS, VALS, min_size=1, max_size=3),
        job=st.booleans(),
    )
    def stage_and_forget(self, name: str, change: Model, job: bool) -> None:
        """A write whose driver died: staged files no version references."""
        t = self.t(name)
        write_id = f"job{next(self.counter)}" if job else None
        staged = t.stage(rows(change), "upsert", write_id=write_id)
        paths = {f.path for f in staged.files}
        assert read(t) == self.model[name]
        if write_id is not None and job:
            gone = t.abort_write(write_id)
            assert set(gone) == paths
            assert not paths & on_disk(self.cat, t)
        else:
            self.orphans[name] |= paths

    @rule(name=st.sampled_from(NAMES), dry=st.booleans())
    def cleanup(self, name: str, dry: bool) -> None:
        t = self.t(name)
        retained = self.retained_files(t)
        disk = on_disk(self.cat, t)
        removed = t.cleanup(dt.timedelta(0), dry_run=dry)
        for p in removed:
            assert MERE_NAME.search(p), f"cleanup took a file mere did not name: {p}"
        assert not set(removed) & retained, "cleanup took a file a retained version lists"
        assert self.orphans[name] & disk <= set(removed), "cleanup left a staged orphan"
        if not dry:
            assert not set(removed) & on_disk(self.cat, t)
            self.orphans[name] = set()

    # -- checks --------------------------------------------------------------------------------------

    @invariant()
    def everything_matches(self) -> None:
        self.check_everything(every_version=False)

    def check_everything(self, every_version: bool) -> None:
        for n in NAMES:
            t = self.t(n)
            assert read(t) == self.model[n], n
            hist = t.history()
            assert [s.version for s in hist] == sorted(self.snaps[n]), n
            expired = {s.version for s in hist if s.expired}
            assert expired == self.expired[n], (n, expired, self.expired[n])
            tags = t.tags()
            assert not expired & set(tags.values()), (n, tags, expired)
            disk = on_disk(self.cat, t)
            for f in FOREIGN:
                assert (self.root / t.location / f).exists(), f"foreign file {f} was deleted"
            versions = [s.version for s in hist if not s.expired]
            if not every_version and len(versions) > 4:
                versions = [versions[0], versions[-1], *random.Random(len(hist)).sample(versions[1:-1], 2)]
            for v in versions:
                missing = set(t.inspect.files(v).column("path").to_pylist()) - disk
                assert not missing, f"{n}: version {v} lists deleted files {missing}"
                assert read(t, version=v) == self.snaps[n][v], (n, v)
            for name, v in tags.items():
                assert read(t, tag=name) == self.snaps[n][v], (n, name, v)
            for v in sorted(expired)[-2:] if not every_version else sorted(expired):
                with pytest.raises(errors.NoSuchVersion):
                    t.to_arrow(version=v)


MACHINE = settings(
    max_examples=int(os.environ.get("MAINT53_EXAMPLES", "12")),
    stateful_step_count=int(os.environ.get("MAINT53_STEPS", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_transactions_and_maintenance_follow_the_model_on_sqlite() -> None:
    run_state_machine_as_test(TransactionsAndMaintenance, settings=MACHINE)


@pytest.mark.postgres
def test_transactions_and_maintenance_follow_the_model_on_postgresql(pg_server: Any) -> None:
    counter = itertools.count()

    class OnPostgres(TransactionsAndMaintenance):
        catalog_url = "postgresql"

        @staticmethod
        def make_pg_database() -> str:
            return pg_server.create_database(f"maint53_{os.getpid()}_{next(counter)}")

    run_state_machine_as_test(
        OnPostgres,
        settings=settings(
            MACHINE,
            max_examples=int(os.environ.get("MAINT53_PG_EXAMPLES", "3")),
            stateful_step_count=20,
        ),
    )


# -- a writer racing a maintainer ----------------------------------------------------------------------


def _writer(cat: mere.Catalog, log: dict[int, tuple[str, Model]], failed: list[Any], seed: int) -> None:
    rng = random.Random(seed)
    t = cat.table("r.t")
    for i in range(1, 61):
        time.sleep(rng.random() * 0.004)
        keys = rng.sample(range(12), rng.randint(1, 3))
        try:
            if rng.random() < 0.3:
                result = t.delete(pa.table({"k": pa.array(keys, pa.int64())}))
                log[result.version] = ("delete", dict.fromkeys(keys, 0))
            elif rng.random() < 0.3:
                change = {k: 1000 * i + k for k in keys}
                with cat.transaction() as tx:
                    tx.table("r.t").upsert(rows(change))
                    tx.table("r.side").upsert(rows(change))
                log[tx.results["r.t"].version] = ("tx", change)
            else:
                change = {k: 1000 * i + k for k in keys}
                log[t.upsert(rows(change)).version] = ("upsert", change)
        except errors.CommitConflict as e:  # retries spent: nothing may land
            failed.append((i, e))


def _maintainer(
    cat: mere.Catalog, stop: threading.Event, rollbacks: dict[int, tuple[int, int | None]], seed: int
) -> list[str]:
    rng = random.Random(seed)
    t = cat.table("r.t")
    seen: list[str] = []
    while not stop.is_set():
        what = rng.choice(["compact", "tiered", "expire", "rollback", "rollback"])
        try:
            if what in ("compact", "tiered"):
                t.compact(tiered=what == "tiered")
            elif what == "expire":
                hist = t.history()
                at = hist[max(0, len(hist) - 4)].committed_at
                older = max(dt.timedelta(0), dt.datetime.now(dt.UTC) - at)
                t.expire(older, dry_run=False)
            else:
                looked = t.version if rng.random() < 0.8 else None
                live = [s.version for s in t.history() if not s.expired]
                target = rng.choice(live[-6:])
                result = t.rollback(target, expected_version=looked)
                rollbacks[result.version] = (target, looked)
            seen.append(f"{what} ok")
        except (errors.CommitConflict, errors.NoSuchVersion) as e:
            seen.append(f"{what} {type(e).__name__}")
        time.sleep(rng.random() * 0.01)
    return seen


@pytest.mark.parametrize("seed", [1, 2])
def test_a_writer_racing_compaction_expire_and_rollback_loses_and_resurrects_nothing(
    catalog_url: str, tmp_path: Path, seed: int
) -> None:
    root = str(tmp_path / "wh")
    cat = mere.connect(root, catalog=catalog_url)
    t = cat.create_table("r.t", SCHEMA, primary_key="k", buckets=2, properties=STILL)
    cat.create_table("r.side", SCHEMA, primary_key="k", buckets=2, properties=STILL)
    (tmp_path / "wh" / t.location / "bucket-00000").mkdir(parents=True, exist_ok=True)
    foreign = tmp_path / "wh" / t.location / "bucket-00000" / "keep-me.parquet"
    foreign.write_text("foreign")
    log: dict[int, tuple[str, Model]] = {}
    failed: list[Any] = []
    rollbacks: dict[int, tuple[int, int | None]] = {}
    stop = threading.Event()
    outcome: list[list[str]] = []
    maint_cat = mere.connect(root, catalog=catalog_url)
    m = threading.Thread(target=lambda: outcome.append(_maintainer(maint_cat, stop, rollbacks, seed)))
    w = threading.Thread(target=_writer, args=(mere.connect(root, catalog=catalog_url), log, failed, seed))
    m.start()
    w.start()
    w.join(timeout=120)
    stop.set()
    m.join(timeout=120)
    assert not w.is_alive() and not m.is_alive()
    assert outcome, "the maintainer thread died"
    assert sum(s.endswith(" ok") for s in outcome[0]) >= 3, outcome  # it did race the writer
    t = t.refresh()
    hist = {s.version: s for s in t.history()}
    states: dict[int, Model] = {0: {}}
    for v in range(1, t.version + 1):
        state = dict(states[v - 1])
        if v in log:
            kind, change = log[v]
            assert hist[v].operation in ("upsert", "delete", "transaction"), (v, hist[v])
            if kind != "delete":
                state.update(change)
            else:
                for k in change:
                    state.pop(k, None)
        elif v in rollbacks:
            target, looked = rollbacks[v]
            assert hist[v].operation == "rollback"
            between = [hist[u].operation for u in range(looked + 1, v)] if looked is not None else []
            assert set(between) <= {"compact"}, f"rollback at {v} undid {between} after {looked}"
            state = dict(states[target])
        else:
            assert hist[v].operation == "compact", (v, hist[v])
        states[v] = state
    assert set(log) | set(rollbacks) <= set(hist), "a write that returned is not in history"
    assert read(t) == states[t.version]
    disk = on_disk(cat, t)
    for v, s in hist.items():
        if s.expired:
            with pytest.raises(errors.NoSuchVersion):
                t.to_arrow(version=v)
        else:
            assert not set(t.inspect.files(v).column("path").to_pylist()) - disk, v
            assert read(t, version=v) == states[v], v
    removed = t.cleanup(dt.timedelta(0), dry_run=False)
    assert all(MERE_NAME.search(p) for p in removed)
    assert foreign.exists()
    assert read(t) == states[t.version]
    side: Model = {}  # the side table only ever gets the catalog transactions' upserts
    for v in sorted(log):
        kind, change = log[v]
        if kind == "tx":
            side.update(change)
    assert read(cat.table("r.side")) == side


# -- targeted ------------------------------------------------------------------------------------------


def _two(cat: mere.Catalog) -> tuple[mere.Table, mere.Table]:
    return (
        cat.create_table("p.a", SCHEMA, primary_key="k", buckets=2, properties=STILL),
        cat.create_table("p.b", SCHEMA, primary_key="k", buckets=2, properties=STILL),
    )


def test_a_key_replays_after_its_versions_were_compacted_expired_and_rolled_back(cat: mere.Catalog) -> None:
    """The key names the work: once it landed, a rerun does nothing, whatever maintenance did since."""
    a, b = _two(cat)
    a.upsert(rows({1: 1, 2: 2}))
    a.tag("before")
    with cat.transaction(idempotency_key="job-1") as tx:
        tx.table("p.a").upsert(rows({3: 3}))
        tx.table("p.b").upsert(rows({3: 3}))
    first = {n: r.version for n, r in tx.results.items()}
    a.upsert(rows({4: 4}))
    a.compact()
    b.compact()
    a.expire(dt.timedelta(0), dry_run=False)
    b.expire(dt.timedelta(0), dry_run=False)
    assert a.refresh().history()[first["p.a"]].expired
    a.rollback(tag="before", expected_version=a.refresh().version)
    assert read(a.refresh()) == {1: 1, 2: 2}
    staged = b.stage(rows({9: 9}), "upsert")
    with cat.transaction(idempotency_key="job-1") as again:
        again.table("p.a").upsert(rows({3: 30}))
        again.table("p.b").add_staged([staged])
    assert all(r.already_committed for r in again.results.values())
    assert {n: r.version for n, r in again.results.items()} == first
    assert not {f.path for f in staged.files} & on_disk(cat, b), "a replay kept the staged files it dropped"
    single = a.upsert(rows({3: 31}), idempotency_key="job-1")
    assert single.already_committed and single.version == first["p.a"]
    assert read(a.refresh()) == {1: 1, 2: 2}
    assert read(b.refresh()) == {3: 3}
    for t in (a, b):
        t = t.refresh()
        t.expire(dt.timedelta(0), dry_run=False)
        t.cleanup(dt.timedelta(0), dry_run=False)
        for s in t.history():
            if not s.expired:
                assert set(t.inspect.files(s.version).column("path").to_pylist()) <= on_disk(cat, t)
    assert read(a.refresh(), tag="before") == {1: 1, 2: 2}
    assert read(a.refresh()) == {1: 1, 2: 2}
    assert read(b.refresh()) == {3: 3}


def test_abort_write_after_a_catalog_transaction_committed_that_write_id_keeps_its_files(
    cat: mere.Catalog,
) -> None:
    a, b = _two(cat)
    sa = a.stage(rows({1: 1}), "upsert", write_id="job_9")
    sb = b.stage(rows({2: 2}), "upsert", write_id="job_9")
    lost = a.stage(rows({3: 3}), "upsert", write_id="job_9")
    with cat.transaction() as tx:
        tx.table("p.a").add_staged([sa])
        tx.table("p.b").add_staged([sb])
    assert a.refresh().abort_write("job_9") == [f.path for f in lost.files]
    assert b.refresh().abort_write("job_9") == []
    assert read(a.refresh()) == {1: 1} and read(b.refresh()) == {2: 2}
    a.refresh().compact()
    a.refresh().expire(dt.timedelta(0), dry_run=False)
    assert read(a.refresh()) == {1: 1}


def test_a_rollback_of_one_table_leaves_the_other_half_of_a_transaction(cat: mere.Catalog) -> None:
    """A rollback is per table: undoing one table's share of a catalog transaction leaves the other's;
    the snapshot as of the transaction still reads both halves until expire gives the version up."""
    a, b = _two(cat)
    with cat.transaction() as tx:
        tx.table("p.a").upsert(rows({1: 1}))
        tx.table("p.b").upsert(rows({1: 1}))
    snap = cat.snapshot()
    time.sleep(0.01)
    a.refresh().rollback(0, expected_version=1)
    assert read(a.refresh()) == {} and read(b.refresh()) == {1: 1}
    assert read(snap.table("p.a")) == {1: 1} and read(snap.table("p.b")) == {1: 1}
    a.refresh().expire(dt.timedelta(0), dry_run=False)
    with pytest.raises((errors.NoSuchVersion, errors.StorageError)):
        snap.table("p.a").to_arrow()
    assert read(snap.table("p.b")) == {1: 1}


def test_expire_and_compaction_beside_an_open_transaction_with_staged_files_keep_them(
    cat: mere.Catalog,
) -> None:
    """expire gives up versions' files, never unreferenced files in flight: an open catalog transaction's
    written and staged files survive an expire(0) and a compaction of both tables, and it lands whole."""
    a, b = _two(cat)
    for i in range(3):
        a.upsert(rows({i: i}))
        b.upsert(rows({i: -i}))
    staged = b.stage(rows({7: 7}), "upsert")
    tx = cat.transaction(idempotency_key="in-flight")
    tx.table("p.a").upsert(rows({5: 5}))
    tx.table("p.a").delete(pa.table({"k": pa.array([0], pa.int64())}))
    tx.table("p.b").add_staged([staged])
    for t in (a, b):
        t.refresh().compact()
        assert t.refresh().expire(dt.timedelta(0), dry_run=False)
    results = tx.commit()
    assert not any(r.already_committed for r in results.values())
    assert read(a.refresh()) == {1: 1, 2: 2, 5: 5}
    assert read(b.refresh()) == {0: 0, 1: -1, 2: -2, 7: 7}
    for t in (a, b):
        t = t.refresh()
        assert set(t.inspect.files().column("path").to_pylist()) <= on_disk(cat, t)


def test_rollback_with_an_expired_expected_version_and_only_compactions_after_it(cat: mere.Catalog) -> None:
    a, _ = _two(cat)
    a.upsert(rows({1: 1, 2: 2, 6: 6, 7: 7}))
    a.tag("one")
    a.upsert(rows({2: 20, 6: 60, 7: 70, 8: 8}))  # version 2: what the caller looked at
    assert a.compact() is not None
    a.upsert(rows({3: 3, 4: 4, 5: 5}))  # both buckets get a second run
    assert a.compact() is not None
    a = a.refresh()
    a.expire(dt.timedelta(0), dry_run=False)
    assert [s.expired for s in a.history()] == [True, False, True, True, True, False]
    with pytest.raises(errors.CommitConflict):  # version 4 (an upsert) came after what was seen
        a.rollback(tag="one", expected_version=2)
    assert read(a.refresh()) == {1: 1, 2: 20, 3: 3, 4: 4, 5: 5, 6: 60, 7: 70, 8: 8}
    a.refresh().rollback(tag="one", expected_version=4)  # only a compaction after 4
    one = {1: 1, 2: 2, 6: 6, 7: 7}
    assert read(a.refresh()) == one
    a.refresh().expire(dt.timedelta(0), dry_run=False)
    a.refresh().cleanup(dt.timedelta(0), dry_run=False)
    assert read(a.refresh()) == one and read(a.refresh(), tag="one") == one


def _maintainer_process(root: str, url: str, seed: int, ready: Any, stop: Any, out: Any) -> None:
    rollbacks: dict[int, tuple[int, int | None]] = {}
    maint = mere.connect(root, catalog=url)
    maint.table("r.t").history()
    ready.set()
    seen = _maintainer(maint, stop, rollbacks, seed)
    out.put((rollbacks, seen))


def test_a_writer_racing_a_maintainer_process_loses_and_resurrects_nothing(
    catalog_url: str, tmp_path: Path
) -> None:
    import multiprocessing as mp

    root = str(tmp_path / "wh")
    cat = mere.connect(root, catalog=catalog_url)
    t = cat.create_table("r.t", SCHEMA, primary_key="k", buckets=2, properties=STILL)
    cat.create_table("r.side", SCHEMA, primary_key="k", buckets=2, properties=STILL)
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_maintainer_process, args=(root, catalog_url, 7, ready, stop, out))
    proc.start()
    assert ready.wait(timeout=120)
    log: dict[int, tuple[str, Model]] = {}
    failed: list[Any] = []
    _writer(mere.connect(root, catalog=catalog_url), log, failed, 7)
    stop.set()
    rollbacks, seen = out.get(timeout=120)
    proc.join(timeout=60)
    assert proc.exitcode == 0, seen
    assert sum(s.endswith(" ok") for s in seen) >= 3, seen  # maintenance did run beside the writer
    t = t.refresh()
    hist = {s.version: s for s in t.history()}
    states: dict[int, Model] = {0: {}}
    for v in range(1, t.version + 1):
        state = dict(states[v - 1])
        if v in log:
            kind, change = log[v]
            for k, val in change.items():
                if kind == "delete":
                    state.pop(k, None)
                else:
                    state[k] = val
        elif v in rollbacks:
            target, looked = rollbacks[v]
            if looked is not None:
                assert {hist[u].operation for u in range(looked + 1, v)} <= {"compact"}, v
            state = dict(states[target])
        else:
            assert hist[v].operation == "compact", (v, hist[v])
        states[v] = state
    assert read(t) == states[t.version]
    disk = on_disk(cat, t)
    for v, s in hist.items():
        if not s.expired:
            assert set(t.inspect.files(v).column("path").to_pylist()) <= disk, v
            assert read(t, version=v) == states[v], v


def test_two_rollbacks_with_one_expected_version_land_once(cat: mere.Catalog) -> None:
    """Two operators look at the same version and roll back to different versions at once: one lands,
    the other raises CommitConflict (it would undo a commit it never saw)."""
    a, _ = _two(cat)
    for i in range(4):
        a.upsert(rows({i: i}))
    for attempt in range(4):
        seen = a.refresh().version
        targets = [1 + attempt % 2, 3]
        outcomes: list[Any] = [None, None]
        barrier = threading.Barrier(2)

        def go(
            i: int,
            seen: int = seen,
            targets: list[int] = targets,
            outcomes: list[Any] = outcomes,
            barrier: threading.Barrier = barrier,
        ) -> None:
            t = mere.connect(cat.storage.uri, catalog=cat.sql.url).table("p.a")
            barrier.wait()
            try:
                outcomes[i] = t.rollback(targets[i], expected_version=seen)
            except errors.CommitConflict as e:
                outcomes[i] = e

        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        landed = [i for i, o in enumerate(outcomes) if not isinstance(o, Exception)]
        assert len(landed) == 1, outcomes
        a = a.refresh()
        assert a.version == seen + 1
        assert read(a) == read(a, version=targets[landed[0]])
