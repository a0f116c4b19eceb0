"""Trial 48: durability under faults on an object store (SeaweedFS) with a shared PostgreSQL catalog.

Writer and maintenance processes are SIGKILLed at chosen points (a patched storage or catalog method kills
its own process before or after it runs: during staging, between uploads of multipart-sized files, just
before and just after the catalog transaction, between the deletes of ``expire`` and ``cleanup``) and at
random moments while S3 is slowed by the latency proxy; catalog connections are terminated with
``pg_terminate_backend`` mid-run and PostgreSQL is restarted; ``cleanup`` with a zero age runs while slow
writes are in flight. After every fault the table must open and read, equal a dict model replayed from the
catalog's history (each version names the idempotency key of the operation that made it), read at every
kept version, reference no missing file, and a retry of the killed operation with its idempotency key must
land exactly once. A final ``cleanup`` must leave no unreferenced file and no incomplete multipart upload.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
import mere.table.ops.write
from mere.errors import MereError, OutlivedCleanup
from services import PostgresServer, SeaweedServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import latency_proxy

pytestmark = [pytest.mark.postgres, pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(600)]

NAME = "lake.events"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("blob", pa.binary())])
STILL = {"compaction.auto": "off", "retention.max-age": "off"}
BIG_ROWS = 2800  # rows of 4 KiB random bytes: ~11 MiB per bucket file, above the 10 MiB multipart threshold


# -- the operations and their model ------------------------------------------------------------------


def op_rows(key: str, big: bool = False) -> pa.Table:
    """The rows the upsert named ``key`` writes: deterministic from the key (the model replays them)."""
    n = int(key.split("-")[1])
    rng = random.Random(key)
    count = BIG_ROWS if big else 40
    ids = sorted(rng.sample(range(4000), count))
    blob = [os.urandom(4096) if big else b"x" for _ in ids]
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array([n] * count, pa.int64()), "blob": blob}, schema=SCHEMA
    )


def model_apply(state: dict[int, int], key: str) -> None:
    if key.startswith("d-"):  # a delete by predicate: ids divisible by the step's number
        n = int(key.split("-")[1])
        for k in [k for k in state if k % n == 0]:
            del state[k]
        return
    t = op_rows(key, big=key.startswith("b-"))
    state.update(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))


def run_op(t: mere.Table, key: str) -> Any:
    if key.startswith("d-"):
        n = int(key.split("-")[1])
        return t.delete(f"id % {n} = 0", idempotency_key=key)
    return t.upsert(op_rows(key, big=key.startswith("b-")), idempotency_key=key)


def model_by_version(t: mere.Table) -> dict[int, dict[int, int]]:
    """The expected rows of every version, replayed from the history (keys name the operations)."""
    states: dict[int, dict[int, int]] = {0: {}}
    for snap in t.history():
        if snap.version == 0:
            continue
        prev = dict(states[snap.version - 1])
        if snap.operation == "rollback":
            prev = dict(states[int(snap.summary["rollback_to"])])
        elif snap.operation in ("compact", "set_properties"):
            pass
        else:
            assert snap.idempotency_key, (snap.version, snap.operation, snap.summary)
            model_apply(prev, snap.idempotency_key)
        states[snap.version] = prev
    return states


def content(data: pa.Table) -> dict[int, int]:
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def committed_keys(t: mere.Table) -> list[str]:
    return [s.idempotency_key for s in t.history() if s.idempotency_key]


def verify(cat: mere.Catalog, name: str = NAME) -> mere.Table:
    """Every invariant a fault must leave intact; returns the fresh table."""
    t = cat.table(name)
    keys = committed_keys(t)
    assert len(keys) == len(set(keys)), f"an idempotency key landed twice: {keys}"
    states = model_by_version(t)
    assert content(t.to_arrow()) == states[t.version]
    kept = [s.version for s in t.history() if not s.expired]
    for v in kept:
        assert content(t.to_arrow(version=v)) == states[v], f"version {v} reads wrong"
    ctx = t.context
    referenced = sorted(ctx.store.all_file_paths(ctx.table_id))
    assert ctx.storage.missing(referenced) == [], "a file the catalog references is missing"
    return t


def leftovers(cat: mere.Catalog, seaweed: SeaweedServer, bucket: str) -> tuple[list[str], list[str]]:
    """(unreferenced data files, incomplete multipart uploads) under the table's folder."""
    t = cat.table(NAME)
    ctx = t.context
    referenced = ctx.store.all_file_paths(ctx.table_id)
    stray = [p for p, _s, _m in ctx.storage.list_files(ctx.location) if p not in referenced]
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=seaweed.endpoint,
        aws_access_key_id=seaweed.access_key,
        aws_secret_access_key=seaweed.secret_key,
        region_name="us-east-1",
    )
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return stray, [u["Key"] for u in uploads]


# -- services -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


class Env:
    def __init__(self, seaweed: SeaweedServer, url: str, bucket: str) -> None:
        self.seaweed, self.url, self.bucket = seaweed, url, bucket
        self.warehouse = f"s3://{bucket}/wh"
        self.options = seaweed.storage_options()

    def connect(self, endpoint: str | None = None) -> mere.Catalog:
        opts = self.seaweed.storage_options(endpoint) if endpoint else self.options
        return mere.connect(self.warehouse, catalog=self.url, storage_options=opts)

    def args(self, endpoint: str | None = None) -> tuple[str, str, dict[str, str]]:
        opts = self.seaweed.storage_options(endpoint) if endpoint else self.options
        return self.warehouse, self.url, opts


@pytest.fixture
def env(seaweed: SeaweedServer, pg_server: PostgresServer) -> Env:
    tag = uuid.uuid4().hex[:10]
    bucket = seaweed.create_bucket(f"t48-{tag}")
    return Env(seaweed, pg_server.create_database(f"t48_{tag}"), bucket)


def _create(cat: mere.Catalog, **props: str) -> mere.Table:
    return cat.create_table(NAME, SCHEMA, primary_key="id", buckets=2, properties={**STILL, **props})


# -- kill points ----------------------------------------------------------------------------------


def _kill_at(target: str, when: str, nth: int) -> None:
    """Patch ``target`` (``module:Class.method``) so that its ``nth`` call SIGKILLs this process
    before it runs or after it returned."""
    import importlib

    mod_name, attr = target.split(":")
    cls_name, meth = attr.split(".")
    cls = getattr(importlib.import_module(mod_name), cls_name)
    orig = getattr(cls, meth)
    calls = [0]
    lock = threading.Lock()

    def wrapper(*a: Any, **k: Any) -> Any:
        with lock:
            calls[0] += 1
            hit = calls[0] == nth
        if hit and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        out = orig(*a, **k)
        if hit and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    setattr(cls, meth, wrapper)


def _victim(args: tuple[str, str, dict[str, str]], op: str, target: str, when: str, nth: int) -> None:
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    t = cat.table(NAME)
    _kill_at(target, when, nth)
    if op == "compact":
        t.compact()
    elif op == "expire":
        t.expire(older_than=dt.timedelta(0), dry_run=False)
    elif op == "cleanup":
        t.cleanup(dt.timedelta(0), dry_run=False)
    elif op.startswith("rollback"):
        t.rollback(int(op.split(":")[1]))
    else:
        run_op(t, op)
    os._exit(3)  # the kill point was never reached


COMMIT = "mere.catalog.sql:SqlCatalog._commit"
UPLOAD = "mere.io.storage:Storage._upload"
DELETE = "mere.io.storage:Storage.delete"
FENCE = "mere.catalog.sql:SqlCatalog.fence_cleanup"
EXPIRE = "mere.catalog.sql:SqlCatalog.expire"

KILL_POINTS = [
    ("u-7", COMMIT, "before", 1),  # files uploaded, catalog untouched
    ("u-7", COMMIT, "after", 1),  # landed, the writer never heard
    ("u-7", UPLOAD, "after", 1),  # one bucket file of two uploaded
    ("b-7", UPLOAD, "before", 2),  # multipart-sized: second file never started
    ("b-7", UPLOAD, "after", 1),  # multipart-sized: first file complete
    ("d-3", COMMIT, "before", 1),  # a delete by predicate, its markers written
    ("d-3", COMMIT, "after", 1),
    ("compact", UPLOAD, "after", 1),  # one split's compacted file uploaded
    ("compact", COMMIT, "before", 1),
    ("compact", COMMIT, "after", 1),
    ("expire", EXPIRE, "after", 1),  # versions given up, no file deleted yet
    ("expire", DELETE, "after", 2),  # some expired files deleted
    ("cleanup", FENCE, "after", 1),
    ("cleanup", DELETE, "after", 1),
    ("rollback:2", COMMIT, "before", 1),
    ("rollback:2", COMMIT, "after", 1),
]


def _prepare(env: Env) -> mere.Table:
    cat = env.connect()
    t = _create(cat)
    for key in ("u-1", "u-2", "compact", "d-5", "u-3", "b-4"):
        t.compact() if key == "compact" else run_op(t, key)  # the compaction leaves files to expire
    # stray files of a killed write, so cleanup has something to delete
    t.stage(op_rows("u-99"), "upsert")
    return t


@pytest.mark.parametrize(
    ("op", "target", "when", "nth"),
    KILL_POINTS,
    ids=[f"{o.replace(':', '')}-{g.split('.')[-1].strip('_')}-{w}{n}" for o, g, w, n in KILL_POINTS],
)
def test_kill_point_then_retry_lands_once(env: Env, op: str, target: str, when: str, nth: int) -> None:
    t = _prepare(env)
    before = t.version
    if op == "cleanup":
        # S3 gives whole seconds, so a listing counts a file one second late: the stray file must be
        # older than that, or a cleanup started within it keeps the file and never deletes
        time.sleep(2.1)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_victim, args=(env.args(), op, target, when, nth))
    p.start()
    p.join(240)
    assert p.exitcode == -signal.SIGKILL, f"the victim was not killed at its point: exit {p.exitcode}"

    cat = env.connect()
    t = verify(cat)
    landed = t.version > before
    if when == "before" and target == COMMIT:
        assert not landed
    if when == "after" and target == COMMIT:
        assert landed
    # The retry: once more, the way a job reruns what it could not confirm.
    if op == "compact":
        t.compact()
    elif op in ("expire", "cleanup"):
        getattr(t, op)(dt.timedelta(0), dry_run=False)
    elif op.startswith("rollback"):
        if not landed:
            t.rollback(int(op.split(":")[1]))
    else:
        r = run_op(t, op)
        assert r.already_committed == landed
        assert committed_keys(t).count(op) == 1
    t = verify(cat)
    # Everything a kill left behind goes with a cleanup of age 0 (run twice: idempotent).
    t.cleanup(dt.timedelta(0), dry_run=False)
    time.sleep(1.1)  # object stores time files in whole seconds
    t.cleanup(dt.timedelta(0), dry_run=False)
    verify(cat)
    stray, uploads = leftovers(cat, env.seaweed, env.bucket)
    assert stray == [] and uploads == []


# -- chaos: random kills, slow S3, terminated and restarted catalog connections -------------------------


def _writer_keys(w: int, count: int, seed: int) -> list[str]:
    rng = random.Random(seed * 100 + w)
    keys = []
    for i in range(count):
        r = rng.random()
        kind = "b" if r < 0.15 else "d" if r < 0.3 else "u"
        n = 3 + rng.randrange(7) if kind == "d" else 1000 * (w + 1) + i
        keys.append(f"{kind}-{n}-w{w}.{i}")
    return keys


def _log(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _chaos_writer(args: tuple[str, str, dict[str, str]], keys: list[str], log: str) -> None:
    """Run ``keys`` in order, resuming after the last acknowledged one; an op that failed is run again
    with its key (what a job does), so a killed op is retried by the next incarnation."""
    done = set()
    with contextlib.suppress(FileNotFoundError), open(log) as f:
        done = {ln.split()[1] for ln in f if ln.startswith("ack ")}
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    for key in keys:
        if key in done:
            continue
        for attempt in range(60):
            try:
                t = cat.table(NAME)
                r = run_op(t, key)
                _log(log, f"ack {key} {r.version} {int(r.already_committed)} {int(r.no_change)}")
                break
            except MereError as e:
                _log(log, f"err {key} {type(e).__name__} {attempt}")
                time.sleep(0.05)


def _chaos_maintenance(args: tuple[str, str, dict[str, str]], seconds: float, log: str) -> None:
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    deadline = time.monotonic() + seconds
    rng = random.Random(os.getpid())
    while time.monotonic() < deadline:
        op = rng.choice(["compact", "expire", "cleanup", "cleanup", "rollback"])
        try:
            t = cat.table(NAME)
            if op == "compact":
                t.compact()
            elif op == "expire":
                t.expire(older_than=dt.timedelta(seconds=3), dry_run=False)
            elif op == "cleanup":
                t.cleanup(dt.timedelta(0), dry_run=False)  # while slow writes are in flight
            elif t.version > 2:
                t.rollback(t.version - 1)
            _log(log, f"ok {op}")
        except MereError as e:
            _log(log, f"err {op} {type(e).__name__} {str(e)[:150]!r}")
        time.sleep(0.2)


def _chaos_reader(args: tuple[str, str, dict[str, str]], seconds: float, log: str) -> None:
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            t = cat.table(NAME)
            v = t.version
            data = content(t.to_arrow(version=v))
            _log(log, f"read {v} {sorted(data.items())!r}")
        except MereError as e:
            _log(log, f"err read {type(e).__name__} {str(e)[:150]!r}")
        time.sleep(0.1)


def _terminate_backends(url: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            n = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
            conn.commit()
        return int(n or 0)
    finally:
        engine.dispose()


@pytest.fixture
def own_pg(tmp_path: Path) -> Iterator[PostgresServer]:
    """A private server this test may restart."""
    with PostgresServer() as server:
        yield server


AUTO = {  # writers compact and expire after their own commits: kills land in that maintenance too
    "compaction.auto": "inline",
    "compaction.min-files": "3",
    "retention.max-age": "4s",
    "retention.min-versions": "2",
}


@pytest.mark.parametrize(
    ("seed", "props"), [(48, {}), (7, AUTO)], ids=["maintenance-process", "inline-maintenance"]
)
def test_random_kills_slow_s3_dropped_and_restarted_catalog(
    seaweed: SeaweedServer, own_pg: PostgresServer, tmp_path: Path, seed: int, props: dict[str, str]
) -> None:
    bucket = seaweed.create_bucket(f"t48-chaos-{uuid.uuid4().hex[:8]}")
    env = Env(seaweed, own_pg.create_database("chaos"), bucket)
    _create(env.connect(), **props)
    proxy, port = latency_proxy.spawn(f"127.0.0.1:{seaweed.port}", rtt_ms=60)
    slow = env.args(f"http://127.0.0.1:{port}")
    writers, seconds = 2, 50.0
    keys = {w: _writer_keys(w, 14, seed) for w in range(writers)}
    logs = {w: str(tmp_path / f"w{w}.log") for w in range(writers)}
    ctx = mp.get_context("spawn")
    rng = random.Random(seed)
    procs: dict[str, Any] = {}

    def start(name: str) -> None:
        if name.startswith("w"):
            w = int(name[1:])
            p = ctx.Process(target=_chaos_writer, args=(slow, keys[w], logs[w]))
        elif name == "maint":
            p = ctx.Process(target=_chaos_maintenance, args=(slow, seconds, str(tmp_path / "m.log")))
        else:
            p = ctx.Process(target=_chaos_reader, args=(slow, seconds, str(tmp_path / "r.log")))
        p.start()
        procs[name] = p

    faults: dict[str, int] = {}
    try:
        for name in [*(f"w{w}" for w in range(writers)), "maint", "reader"]:
            start(name)
        t0 = time.monotonic()
        restarted = False
        while time.monotonic() - t0 < seconds + 120:
            time.sleep(rng.uniform(0.7, 2.0))
            alive = [n for n, p in procs.items() if p.is_alive()]
            if not any(n.startswith("w") for n in alive):
                break
            fault = rng.choice(["kill", "kill", "terminate", "restart" if not restarted else "kill"])
            if time.monotonic() - t0 > seconds:
                fault = "none"  # let the writers finish
            if fault == "kill":
                victim = rng.choice([n for n in alive if n != "reader"] or alive)
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].join()
                start(victim)
            elif fault == "terminate":
                _terminate_backends(env.url)
            elif fault == "restart":
                own_pg.restart(down_seconds=1.0)
                restarted = True
            faults[fault] = faults.get(fault, 0) + 1
        for p in procs.values():
            p.join(60)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join()
        proxy.terminate()
        proxy.wait(10)
    assert all(not p.is_alive() for p in procs.values())

    cat = env.connect()
    t = verify(cat)
    history = {s.idempotency_key: s.version for s in t.history() if s.idempotency_key}
    states = model_by_version(t)
    acked = 0
    for w in range(writers):
        lines = Path(logs[w]).read_text().splitlines()
        for ln in lines:
            if ln.startswith("ack "):
                _, key, version, _again, no_change = ln.split()
                acked += 1
                if no_change == "1":
                    assert key not in history
                else:
                    assert history.get(key) == int(version), (key, version, history.get(key))
        # every op of every writer was acknowledged at last, and each landed at most once
        assert {ln.split()[1] for ln in lines if ln.startswith("ack ")} == set(keys[w]), lines[-5:]
    for ln in Path(tmp_path / "r.log").read_text().splitlines() if (tmp_path / "r.log").exists() else []:
        if ln.startswith("read "):
            _, v, rest = ln.split(" ", 2)
            assert rest == repr(sorted(states[int(v)].items())), f"reader saw a wrong version {v}"
    maint = (tmp_path / "m.log").read_text() if (tmp_path / "m.log").exists() else ""
    assert "StorageError" not in maint, maint[-2000:]
    t.cleanup(dt.timedelta(0), dry_run=False)
    time.sleep(1.1)
    t.cleanup(dt.timedelta(0), dry_run=False)
    verify(cat)
    stray, uploads = leftovers(cat, seaweed, bucket)
    assert stray == [] and uploads == []
    assert acked >= sum(len(k) for k in keys.values()) and faults.get("kill", 0) > 0, faults


# -- replays of staged commits: a retry must never delete what a version holds ----------------------------


def test_replayed_staged_commit_after_compact_rollback_expire_keeps_live_files(env: Env) -> None:
    cat = env.connect()
    t = _create(cat)
    run_op(t, "u-1")
    staged = t.stage(op_rows("u-2"), "upsert")
    first = t.commit([staged], idempotency_key="u-2")
    run_op(t, "u-3")
    t.compact()  # the staged files are removed at this version ...
    t.rollback(first.version)  # ... and live again here, as new rows with the same paths
    t.expire(older_than=dt.timedelta(0), dry_run=False)  # the first rows of those paths go
    verify(cat)
    # The driver reruns its commit with the same messages and key (it never saw the first answer).
    again = cat.table(NAME).commit([staged], idempotency_key="u-2")
    assert again.already_committed and again.version == first.version
    verify(cat)


def test_racing_catalog_transactions_with_one_key_keep_the_winners_staged_files(env: Env) -> None:
    cat = env.connect()
    t = _create(cat)
    run_op(t, "u-1")
    staged = t.stage(op_rows("u-2"), "upsert")
    first = cat.transaction(idempotency_key="u-2")  # the key names the rows op_rows("u-2") for the model
    retry = env.connect().transaction(idempotency_key="u-2")  # opened before the first landed
    first.table(NAME).add_staged([staged])
    retry.table(NAME).add_staged([staged])
    landed = first.commit()[NAME]
    replay = retry.commit()[NAME]
    assert replay.already_committed and replay.version == landed.version
    assert committed_keys(cat.table(NAME)) == ["u-1", "u-2"]
    verify(cat)


def test_racing_single_table_transactions_with_one_key_keep_the_winners_staged_files(env: Env) -> None:
    """The one-table form of the race above holds: the loser keeps the files the winner lists."""
    cat = env.connect()
    t = _create(cat)
    run_op(t, "u-1")
    staged = t.stage(op_rows("u-2"), "upsert")
    first = t.transaction(idempotency_key="u-2")
    retry = env.connect().table(NAME).transaction(idempotency_key="u-2")
    first.add_staged([staged])
    retry.add_staged([staged])
    landed = first.commit()
    replay = retry.commit()
    assert replay.already_committed and replay.version == landed.version
    verify(cat)


def test_staged_commit_rerun_during_catalog_outage_keeps_landed_files(
    seaweed: SeaweedServer, own_pg: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(
        seaweed, own_pg.create_database("outage"), seaweed.create_bucket(f"t48-o-{uuid.uuid4().hex[:8]}")
    )
    cat = env.connect()
    t = _create(cat)
    run_op(t, "u-1")
    staged = t.stage(op_rows("u-2"), "upsert")
    first = t.commit([staged], idempotency_key="u-2")  # landed; say the driver never heard
    handle = cat.table(NAME)
    outage = threading.Thread(target=own_pg.restart, kwargs={"down_seconds": 25.0})
    real_lookup = mere.table.ops.write.committed_with

    def outage_now(ctx: Any, key: str) -> Any:  # the server goes down just before the rerun's lookup
        outage.start()
        time.sleep(2.0)
        return real_lookup(ctx, key)

    monkeypatch.setattr(mere.table.ops.write, "committed_with", outage_now)
    try:
        with pytest.raises(MereError):
            handle.commit([staged], idempotency_key="u-2")  # the rerun: the catalog cannot answer
    finally:
        monkeypatch.undo()
        if outage.is_alive():
            outage.join()
    t = verify(env.connect())  # the catalog is back: the landed commit must still read
    again = t.commit([staged], idempotency_key="u-2")
    assert again.already_committed and again.version == first.version
    verify(env.connect())


# -- the catalog connection cut while the server is still committing ------------------------------------


class CutProxy:
    """A TCP forwarder in front of PostgreSQL whose ``cut()`` closes every open connection at once: a
    network failure between client and catalog (the server's backend sees it only when it next writes)."""

    def __init__(self, upstream_port: int) -> None:
        import socket

        self.upstream = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[Any] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: Any, b: Any) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.close()

    def cut(self) -> None:
        import socket

        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


SLOW_COMMIT_SQL = [
    "CREATE TABLE t48_slow (x int)",
    """CREATE FUNCTION t48_sleep() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN DELETE FROM t48_slow; IF FOUND THEN PERFORM pg_sleep(3); END IF; RETURN NULL; END $$""",
    """CREATE CONSTRAINT TRIGGER t48_slow_commit AFTER INSERT ON mere_commits
       DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION t48_sleep()""",
]


def _cut_during_commit(direct: str, proxy: CutProxy) -> threading.Thread:
    """Cut the proxy's connections once a backend sleeps in the deferred trigger, i.e. while the server
    runs a COMMIT the client has sent."""
    import sqlalchemy as sa

    def watch() -> None:
        engine = sa.create_engine(direct)
        try:
            deadline = time.monotonic() + 60
            with engine.connect() as conn:
                while time.monotonic() < deadline:
                    asleep = conn.execute(
                        sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
                    ).scalar()
                    conn.rollback()
                    if asleep:
                        proxy.cut()
                        return
                    time.sleep(0.02)
        finally:
            engine.dispose()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _sql(url: str, *statements: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for s in statements:
                conn.execute(sa.text(s))
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "keyed",
    [
        pytest.param(
            False,
            id="no-key",
        ),
        pytest.param(True, id="idempotency-key"),
    ],
)
def test_connection_cut_while_the_server_commits(
    seaweed: SeaweedServer, own_pg: PostgresServer, keyed: bool
) -> None:
    """The connection to PostgreSQL breaks after COMMIT was sent, while the server still commits (a
    deferred trigger makes that take 3 s). The client cannot find its token yet; whatever it concludes,
    the write must land exactly once (a ``sum`` column shows a double landing) and keep its files."""
    direct = own_pg.create_database(f"cut_{int(keyed)}")
    proxy = CutProxy(own_pg.port)  # type: ignore[arg-type]
    try:
        via = direct.replace(f":{own_pg.port}/", f":{proxy.port}/")
        bucket = seaweed.create_bucket(f"t48-cut-{uuid.uuid4().hex[:8]}")
        cat = mere.connect(f"s3://{bucket}/wh", catalog=via, storage_options=seaweed.storage_options())
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int64())])
        t = cat.create_table(
            "lake.counts", schema, primary_key="id", merge_operators={"n": "sum"}, properties=STILL
        )
        t.upsert(pa.table({"id": [1], "n": [1]}, schema=schema))
        _sql(direct, *SLOW_COMMIT_SQL, "INSERT INTO t48_slow VALUES (1)")
        timer = _cut_during_commit(direct, proxy)
        outcome: Any
        try:
            outcome = t.upsert(
                pa.table({"id": [1], "n": [10]}, schema=schema), idempotency_key="add-10" if keyed else None
            )
        except MereError as e:
            outcome = e
        timer.join()
        time.sleep(3.0)  # the server's commit is done by now
        t = mere.connect(
            f"s3://{bucket}/wh", catalog=direct, storage_options=seaweed.storage_options()
        ).table("lake.counts")
        upserts = [s for s in t.history() if s.operation == "upsert"]
        ctx = t.context
        assert ctx.storage.missing(sorted(ctx.store.all_file_paths(ctx.table_id))) == []
        assert t.to_arrow().to_pylist() == [{"id": 1, "n": 11}], (outcome, upserts)
        assert len(upserts) == 2, (outcome, upserts)
        if keyed and isinstance(outcome, MereError):  # the retry a job makes lands nothing new
            again = t.upsert(pa.table({"id": [1], "n": [10]}, schema=schema), idempotency_key="add-10")
            assert again.already_committed
    finally:
        proxy.close()


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(
            "compact",
        ),
        pytest.param(
            "",  # a delete by predicate without a key
        ),
        "d-3",  # ... and with one
    ],
    ids=["compact", "delete-no-key", "delete-key"],
)
def test_connection_cut_while_the_server_commits_files(
    seaweed: SeaweedServer, own_pg: PostgresServer, op: str
) -> None:
    direct = own_pg.create_database(f"cut_{op.replace('-', '_') or 'delete'}")
    proxy = CutProxy(own_pg.port)  # type: ignore[arg-type]
    try:
        via = direct.replace(f":{own_pg.port}/", f":{proxy.port}/")
        bucket = seaweed.create_bucket(f"t48-cutc-{uuid.uuid4().hex[:8]}")
        opts = seaweed.storage_options()
        t = _create(mere.connect(f"s3://{bucket}/wh", catalog=via, storage_options=opts))
        for key in ("u-1", "u-2", "d-3", "u-4"):
            run_op(t, key)
        _sql(direct, *SLOW_COMMIT_SQL, "INSERT INTO t48_slow VALUES (1)")
        timer = _cut_during_commit(direct, proxy)
        outcome: Any = None
        try:  # whatever it says, the table must stay whole
            outcome = t.compact() if op == "compact" else t.delete("id % 3 = 0", idempotency_key=op or None)
        except MereError as e:
            outcome = e
        timer.join()
        time.sleep(3.0)
        after = mere.connect(f"s3://{bucket}/wh", catalog=direct, storage_options=opts)
        if op:
            verify(after)
            return
        t = after.table(NAME)  # the unkeyed delete: whole files, the model's rows, landed once
        ctx = t.context
        assert ctx.storage.missing(sorted(ctx.store.all_file_paths(ctx.table_id))) == [], outcome
        expected: dict[int, int] = {}
        for key in ("u-1", "u-2", "d-3", "u-4", "d-3"):
            model_apply(expected, key)
        assert content(t.to_arrow()) == expected
        assert [s.operation for s in t.history()].count("delete") == 2, t.history()
    finally:
        proxy.close()


def test_connection_cut_while_the_server_commits_a_keyed_catalog_transaction(
    seaweed: SeaweedServer, own_pg: PostgresServer
) -> None:
    direct = own_pg.create_database("cut_tx")
    proxy = CutProxy(own_pg.port)  # type: ignore[arg-type]
    try:
        via = direct.replace(f":{own_pg.port}/", f":{proxy.port}/")
        bucket = seaweed.create_bucket(f"t48-cutt-{uuid.uuid4().hex[:8]}")
        opts = seaweed.storage_options()
        cat = mere.connect(f"s3://{bucket}/wh", catalog=via, storage_options=opts)
        run_op(_create(cat), "u-1")
        _sql(direct, *SLOW_COMMIT_SQL, "INSERT INTO t48_slow VALUES (1)")
        timer = _cut_during_commit(direct, proxy)
        outcome: Any = None
        try:
            with cat.transaction(idempotency_key="u-2") as tx:  # the key names op_rows("u-2") for the model
                tx.table(NAME).upsert(op_rows("u-2"))
            outcome = tx.results
        except MereError as e:
            outcome = e
        timer.join()
        time.sleep(3.0)
        after = mere.connect(f"s3://{bucket}/wh", catalog=direct, storage_options=opts)
        assert committed_keys(after.table(NAME)) == ["u-1", "u-2"], outcome  # landed once
        verify(after)
    finally:
        proxy.close()


def _keyed_op(t: mere.Table, op: str) -> Any:
    if op == "update":
        return t.update({"v": "v + 100"}, where="id % 4 = 0", idempotency_key="op")
    if op == "merge":
        src = pa.table({"id": pa.array([0, 4, 8, 4001], pa.int64()), "v": pa.array([7, 7, 7, 7], pa.int64())})
        return (
            t.merge(src)
            .when_matched_update(set={"v": "t.v + s.v"})
            .when_not_matched_insert(values={"id": "s.id", "v": "s.v"})
            .execute(idempotency_key="op")
        )
    return t.upsert(op_rows("u-5"), idempotency_key="op")  # on a table that logs its changes


@pytest.mark.parametrize(
    "op",
    [
        "update",
        "merge",
        pytest.param(
            "upsert-logged",
        ),
    ],
)
def test_connection_cut_while_the_server_commits_a_keyed_read_write(
    seaweed: SeaweedServer, own_pg: PostgresServer, tmp_path: Path, op: str
) -> None:
    """Writes that read rows (UPDATE, MERGE, a change-logged upsert) are evaluated again on a retry: cut
    mid-COMMIT with an idempotency key, they must still land once, with their files, and give the rows a
    twin table without faults gives."""
    direct = own_pg.create_database(f"cut_{op.replace('-', '_')}")
    proxy = CutProxy(own_pg.port)  # type: ignore[arg-type]
    try:
        via = direct.replace(f":{own_pg.port}/", f":{proxy.port}/")
        bucket = seaweed.create_bucket(f"t48-cutk-{uuid.uuid4().hex[:8]}")
        opts = seaweed.storage_options()
        props = {"changes.log": "on"} if op == "upsert-logged" else {}
        t = _create(mere.connect(f"s3://{bucket}/wh", catalog=via, storage_options=opts), **props)
        twin = _create(mere.connect(str(tmp_path / "twin")), **props)
        for key in ("u-1", "u-2", "u-3"):
            run_op(t, key)
            run_op(twin, key)
        _keyed_op(twin, op)
        _sql(direct, *SLOW_COMMIT_SQL, "INSERT INTO t48_slow VALUES (1)")
        timer = _cut_during_commit(direct, proxy)
        outcome: Any = None
        try:
            outcome = _keyed_op(t, op)
        except MereError as e:
            outcome = e
        timer.join()
        time.sleep(3.0)
        t = mere.connect(f"s3://{bucket}/wh", catalog=direct, storage_options=opts).table(NAME)
        assert committed_keys(t).count("op") == 1, outcome
        assert content(t.to_arrow()) == content(twin.to_arrow()), outcome
        for s in t.history():
            t.to_arrow(version=s.version)
        feeds = [x.changes(3).read_all().drop_columns(["_commit_time"]) for x in (t, twin)]
        assert sorted(feeds[0].to_pylist(), key=repr) == sorted(feeds[1].to_pylist(), key=repr)
        ctx = t.context
        assert ctx.storage.missing(sorted(ctx.store.all_file_paths(ctx.table_id))) == [], outcome
        again = _keyed_op(t, op)  # the job's rerun
        assert getattr(again, "already_committed", True) or getattr(again, "version", None)
        assert content(t.to_arrow()) == content(twin.to_arrow())
    finally:
        proxy.close()


# -- cleanup of age 0 between the halves of distributed work ------------------------------------------


@pytest.mark.parametrize("work", ["compaction", "staged-commit", "staged-transaction"])
def test_cleanup_between_distributed_halves_refuses_the_commit(env: Env, work: str) -> None:
    """A cleanup with age 0 runs after engine tasks wrote their files and before the driver commits:
    the commit must be refused (nothing lands), the table keep reading, and doing the work again land."""
    cat = env.connect()
    t = _create(cat)
    for key in ("u-1", "u-2", "u-3"):
        run_op(t, key)
    before = t.version
    if work == "compaction":
        plan = t.plan_compaction()
        results = [task.run() for task in plan.tasks]
    else:
        staged = t.stage(op_rows("u-4"), "upsert")
    time.sleep(1.1)  # object stores time files in whole seconds
    deleted = cat.table(NAME).cleanup(dt.timedelta(0), dry_run=False)
    assert deleted, "the cleanup should have taken the uncommitted files"
    with pytest.raises(MereError):
        if work == "compaction":
            t.commit_compaction(plan, results)
        elif work == "staged-commit":
            t.commit([staged], idempotency_key="u-4")
        else:
            with cat.transaction(idempotency_key="u-4") as tx:
                tx.table(NAME).add_staged([staged])
    t = verify(cat)
    assert t.version == before
    if work == "compaction":
        t.compact()
    else:
        t.commit([t.stage(op_rows("u-4"), "upsert")], idempotency_key="u-4")
        assert committed_keys(t).count("u-4") == 1
    verify(cat)


# -- a writer killed in the middle of a multipart upload ------------------------------------------------


def _stalled_mid_upload(args: tuple[str, str, dict[str, str]], key: str) -> None:
    import mere.io.storage as storage

    real = storage.Storage._upload

    def upload(self: Any, path: str, data: Any) -> None:
        real(self, path, data)
        time.sleep(120)  # never return: the parent kills this process while the file is in S3

    storage.Storage._upload = upload  # type: ignore[method-assign]
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    run_op(cat.table(NAME), key)
    os._exit(3)


def _kill_once_upload_seen(p: Any, cat: mere.Catalog, env: Env) -> tuple[list[str], list[str]]:
    """SIGKILL the writer as soon as S3 lists its multipart upload or its file (not on a timer:
    under load a fixed delay can fire before a byte was sent, and the test would prove nothing)."""
    deadline = time.monotonic() + 90
    seen: tuple[list[str], list[str]] = ([], [])
    while time.monotonic() < deadline and p.is_alive():
        seen = leftovers(cat, env.seaweed, env.bucket)
        if seen != ([], []):
            break
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    return seen


def test_writer_killed_mid_multipart_upload_through_slow_s3(env: Env) -> None:
    cat = env.connect()
    t = _create(cat)
    run_op(t, "u-1")
    proxy, port = latency_proxy.spawn(f"127.0.0.1:{env.seaweed.port}", rtt_ms=150)
    try:
        p = mp.get_context("spawn").Process(
            target=_stalled_mid_upload, args=(env.args(f"http://127.0.0.1:{port}"), "b-2")
        )
        p.start()
        seen = _kill_once_upload_seen(p, cat, env)
        assert p.exitcode == -signal.SIGKILL
    finally:
        proxy.terminate()
        proxy.wait(10)
    assert seen != ([], []), "the writer never reached S3 before the deadline"
    t = verify(cat)
    assert committed_keys(t) == ["u-1"]
    stray, uploads = leftovers(cat, env.seaweed, env.bucket)
    assert stray or uploads, "the kill should have left an upload or a file behind"
    r = run_op(t, "b-2")  # the job's rerun
    assert not r.already_committed
    assert committed_keys(cat.table(NAME)) == ["u-1", "b-2"]
    time.sleep(1.1)
    cat.table(NAME).cleanup(dt.timedelta(0), dry_run=False)
    verify(cat)
    assert leftovers(cat, env.seaweed, env.bucket) == ([], [])


# -- clocks: the cleanup fence compares the writer's clock with the cleaner's ----------------------------


@pytest.mark.parametrize(
    "skew_s",
    [0, 10],
    ids=["clocks-agree", "writer-10s-ahead"],
)
def test_cleanup_fence_with_a_writer_clock_ahead(
    env: Env, monkeypatch: pytest.MonkeyPatch, skew_s: int
) -> None:
    import mere.table.commit as commit_module

    cat = env.connect()
    t = _create(cat)
    run_op(t, "u-1")
    cleaner = env.connect().table(NAME)  # another machine, with a correct clock
    real_now = commit_module.now_micros
    monkeypatch.setattr(commit_module, "now_micros", lambda: real_now() + skew_s * 1_000_000)  # the writer's
    real_check = commit_module.Commit.check_staged

    def slow_then_cleanup(self: Any) -> None:  # the write's files are uploaded; it has not committed yet
        time.sleep(1.1)
        cleaner.cleanup(dt.timedelta(0), dry_run=False)
        real_check(self)

    monkeypatch.setattr(commit_module.Commit, "check_staged", slow_then_cleanup)
    with contextlib.suppress(OutlivedCleanup):  # refused is the documented outcome
        run_op(t, "u-2")
    monkeypatch.undo()
    verify(cat)
    run_op(cat.table(NAME), "u-2")  # written again
    assert committed_keys(verify(cat)) == ["u-1", "u-2"]


def test_connection_cut_while_the_server_commits_a_rollback(
    seaweed: SeaweedServer, own_pg: PostgresServer
) -> None:
    direct = own_pg.create_database("cut_rollback")
    proxy = CutProxy(own_pg.port)  # type: ignore[arg-type]
    try:
        via = direct.replace(f":{own_pg.port}/", f":{proxy.port}/")
        bucket = seaweed.create_bucket(f"t48-cutr-{uuid.uuid4().hex[:8]}")
        opts = seaweed.storage_options()
        t = _create(mere.connect(f"s3://{bucket}/wh", catalog=via, storage_options=opts))
        for key in ("u-1", "u-2", "u-3"):
            run_op(t, key)
        _sql(direct, *SLOW_COMMIT_SQL, "INSERT INTO t48_slow VALUES (1)")
        timer = _cut_during_commit(direct, proxy)
        outcome: Any = None
        try:
            outcome = t.rollback(1)
        except MereError as e:
            outcome = e
        timer.join()
        time.sleep(3.0)
        after = verify(mere.connect(f"s3://{bucket}/wh", catalog=direct, storage_options=opts))
        landed = [s.operation for s in after.history()].count("rollback")
        # What the caller was told agrees with what happened: a result iff the rollback landed (once).
        assert (landed, isinstance(outcome, MereError)) in ((1, False), (0, True)), (landed, outcome)
    finally:
        proxy.close()
