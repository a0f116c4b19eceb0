"""Trial 51: many writer processes and maintenance at once on the same tables, some writers SIGKILLed.

``spawn`` writer processes run seeded plans of upserts, blind and predicate deletes, MERGE, UPDATE,
read-modify-write counter increments and two-table catalog transactions; a maintenance process runs
compaction, ``expire(0)``, ``cleanup(0)``, content-neutral rollbacks and tags at the same time; a reader
thread in the parent checks that the tables stay readable and that no snapshot ever sees half a catalog
transaction. Every writer logs each operation's intent and outcome durably (fsync) before and after it.

The oracle is a plain dict rebuilt from the logs: each writer owns a key range, so its range's content is
the replay of its successful operations (an operation that raised changed nothing; the one in flight
when a writer was killed landed whole or not at all, and a kill placed before the catalog commit or
after it decides which); shared counters equal their initial value plus the successful increments (plus
at most the killed in-flight ones). Afterwards, with a fresh connection: the data matches the model,
every tagged version still reads what it read when it was tagged (cleanup deleted no file a version
holds), and files others put under the table's location are still there.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from backends import BACKENDS

pytestmark = pytest.mark.timeout(400)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("w", pa.string())])
MAIN, MIRROR = "conc.main", "conc.mirror"
RANGE = 1000  # writer k owns ids [k * RANGE, k * RANGE + OWN)
OWN = 40
COUNTER = 900_000  # shared counter row in both tables, incremented by every writer
MIRROR_BASE = (
    500_000  # ids written by catalog transactions into both tables: writer k uses MIRROR_BASE + k*RANGE + n
)
FOREIGN = ["notes.txt", "_SUCCESS", "part-0.parquet", "backup.parquet"]


# -- logging -------------------------------------------------------------------------------------------


def _log(path: str, record: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a torn last line of a killed writer
            out.append(json.loads(line))
    return out


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


# -- the plan of one writer (the parent rebuilds the same plan from the seed) ------------------------


def _plan(writer: int, seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed * 7919 + writer)
    base = writer * RANGE
    ops: list[dict[str, Any]] = []
    for n in range(count):
        kind = rng.choices(
            ["upsert", "delete_keys", "delete_where", "merge", "update", "counter", "merge_counter", "tx"],
            weights=[5, 2, 1, 3, 2, 2, 1, 3],
        )[0]
        ids = sorted(rng.sample(range(base, base + OWN), rng.randint(1, 6)))
        if kind == "upsert":
            ops.append({"n": n, "kind": kind, "ids": ids, "vals": [rng.randrange(1000) for _ in ids]})
        elif kind == "delete_keys":
            ops.append({"n": n, "kind": kind, "ids": ids})
        elif kind == "delete_where":
            lo = base + rng.randrange(OWN)
            ops.append({"n": n, "kind": kind, "lo": lo, "hi": lo + rng.randint(1, 5)})
        elif kind == "merge":
            ops.append({"n": n, "kind": kind, "ids": ids, "vals": [rng.randrange(1, 100) for _ in ids]})
        elif kind == "update":
            lo = base + rng.randrange(OWN)
            ops.append(
                {"n": n, "kind": kind, "lo": lo, "hi": lo + rng.randint(1, 10), "add": rng.randrange(1, 9)}
            )
        elif kind in ("counter", "merge_counter"):
            ops.append({"n": n, "kind": kind})
        else:
            ops.append({"n": n, "kind": kind, "id": MIRROR_BASE + base + n, "val": rng.randrange(1000)})
    return ops


def _rows(ids: list[int], vals: list[int], w: str) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(vals, pa.int64()), "w": pa.array([w] * len(ids))},
        schema=SCHEMA,
    )


def _outcome(result: Any) -> dict[str, Any]:
    """What a write reported: nothing to commit, a replay of an earlier commit, the version."""
    results = list(result.values()) if isinstance(result, dict) else [result]
    return {
        "no_change": all(getattr(r, "no_change", False) or getattr(r, "version", 0) is None for r in results),
        "already": [bool(r.already_committed) for r in results],
    }


def _apply(cat: mere.Catalog, main: Any, op: dict[str, Any], tag: str, key: str) -> dict[str, Any]:
    kind = op["kind"]
    if kind == "upsert":
        result: Any = main.upsert(_rows(op["ids"], op["vals"], tag), idempotency_key=key)
    elif kind == "delete_keys":
        result = main.delete(pa.table({"id": pa.array(op["ids"], pa.int64())}), idempotency_key=key)
    elif kind == "delete_where":
        result = main.delete(f"id >= {op['lo']} and id < {op['hi']}", idempotency_key=key)
    elif kind == "merge":
        result = (
            main.merge(_rows(op["ids"], op["vals"], tag))
            .when_matched_update(set={"v": "t.v + s.v"})
            .when_not_matched_insert_all()
            .execute(idempotency_key=key)
        )
    elif kind == "update":
        result = main.update(
            set={"v": f"v + {op['add']}"}, where=f"id >= {op['lo']} and id < {op['hi']}", idempotency_key=key
        )
    elif kind == "counter":
        result = main.update(set={"v": "v + 1"}, where=f"id = {COUNTER}", idempotency_key=key)
    elif kind == "merge_counter":
        result = (
            main.merge(_rows([COUNTER], [1], "ignored"))
            .when_matched_update(set={"v": "t.v + s.v"})
            .when_not_matched_insert_all()
            .execute(idempotency_key=key)
        )
    elif kind == "tx":
        row = _rows([op["id"]], [op["val"]], tag)
        with cat.transaction(idempotency_key=key) as tx:
            mirror = tx.table(MIRROR)
            mirror.update(set={"v": "v + 1"}, where=f"id = {COUNTER}")  # reads first
            tx.table(MAIN).upsert(row)
            mirror.upsert(row)
        result = tx.results
    else:  # pragma: no cover
        raise AssertionError(kind)
    return _outcome(result)


def _writer(writer: int, seed: int, count: int, warehouse: str, url: str, log: str, kill: str | None) -> None:
    """``kill``: None, ``before_commit:N`` (die inside op N's catalog transaction, before COMMIT),
    ``after_commit:N`` (die right after op N returned, before logging it), ``upload:N`` (die after op N's
    first data file is written)."""
    from mere.errors import MereError

    cat = mere.connect(warehouse, catalog=url)
    main = cat.table(MAIN)
    mode, at = (kill.split(":")[0], int(kill.split(":")[1])) if kill else (None, -1)
    current = {"n": -1}
    if mode == "before_commit":
        from sqlalchemy import event

        def before_commit(conn: Any) -> None:
            if current["n"] == at and conn.get_execution_options().get("mere_write"):
                _die()

        event.listen(cat.sql.engine, "commit", before_commit)
    if mode == "upload":
        from mere.io.storage import Storage

        real_write = Storage.write

        def write(self: Any, rel: str, *args: Any, **kwargs: Any) -> Any:
            written = real_write(self, rel, *args, **kwargs)
            if current["n"] == at:
                _die()
            return written

        Storage.write = write  # type: ignore[method-assign]
    for op in _plan(writer, seed, count):
        current["n"] = op["n"]
        _log(log, {"n": op["n"], "event": "start"})
        try:
            outcome = _apply(cat, main, op, f"w{writer}-{op['n']}", f"key-w{writer}-{op['n']}")
        except MereError as e:
            _log(log, {"n": op["n"], "event": "err", "type": type(e).__name__, "msg": str(e)[:300]})
            continue
        except Exception as e:  # a raw exception is a bug of its own
            _log(log, {"n": op["n"], "event": "raw", "type": type(e).__name__, "msg": repr(e)[:500]})
            continue
        if mode == "after_commit" and op["n"] == at:
            _die()
        _log(log, {"n": op["n"], "event": "ok", **outcome})
    _log(log, {"event": "finished"})


def _digest(t: pa.Table) -> list[list[Any]]:
    return sorted([r["id"], r["v"], r["w"]] for r in t.to_pylist())


def _maintenance(warehouse: str, url: str, log: str, seconds: float, seed: int) -> None:
    from mere.errors import MereError

    cat = mere.connect(warehouse, catalog=url)
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        i += 1
        name = rng.choice([MAIN, MAIN, MIRROR])
        t = cat.table(name)
        action = rng.choice(["compact", "expire", "cleanup", "rollback", "tag", "auto"])
        try:
            if action == "compact":
                t.compact()
            elif action == "auto":
                t.auto_compact()
            elif action == "expire":
                t.expire(older_than=dt.timedelta(0), dry_run=False)
            elif action == "cleanup":
                t.cleanup(older_than=dt.timedelta(0), dry_run=False)
            elif action == "rollback":  # to the version it reads: content-neutral, or a CommitConflict
                v = t.version
                t.rollback(v, expected_version=v)  # a write landing after the read is not undone
            else:
                v = t.version
                digest = _digest(t.scan(version=v).to_arrow())
                t.tag(f"m{i}", v)
                _log(log, {"event": "tag", "table": name, "tag": f"m{i}", "version": v, "digest": digest})
            _log(log, {"event": "ok", "action": action})
        except MereError as e:
            _log(log, {"event": "err", "action": action, "type": type(e).__name__, "msg": str(e)[:300]})
        except Exception as e:
            _log(log, {"event": "raw", "action": action, "type": type(e).__name__, "msg": repr(e)[:500]})
        time.sleep(rng.uniform(0.0, 0.2))
    _log(log, {"event": "finished"})


# -- the model ---------------------------------------------------------------------------------------------


def _replay(model: dict[int, tuple[int, str]], op: dict[str, Any], tag: str) -> None:
    kind = op["kind"]
    if kind == "upsert":
        for i, v in zip(op["ids"], op["vals"], strict=True):
            model[i] = (v, tag)
    elif kind == "delete_keys":
        for i in op["ids"]:
            model.pop(i, None)
    elif kind == "delete_where":
        for i in range(op["lo"], op["hi"]):
            model.pop(i, None)
    elif kind == "merge":
        for i, v in zip(op["ids"], op["vals"], strict=True):
            model[i] = (model[i][0] + v, model[i][1]) if i in model else (v, tag)
    elif kind == "update":
        for i in range(op["lo"], op["hi"]):
            if i in model:
                model[i] = (model[i][0] + op["add"], model[i][1])
    elif kind == "tx":
        model[op["id"]] = (op["val"], tag)


def _content(t: pa.Table) -> dict[int, tuple[int, str]]:
    return {r["id"]: (r["v"], r["w"]) for r in t.to_pylist()}


def _setup(cat: mere.Catalog) -> None:
    props = {"compaction.min-files": "3", "write.row-group-rows": "64"}
    for name in (MAIN, MIRROR):
        t = cat.create_table(name, SCHEMA, primary_key="id", buckets=3, properties=props)
        t.upsert(_rows([COUNTER], [0], "counter"))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _reader(warehouse: str, url: str, stop: threading.Event, problems: list[str], reads: list[int]) -> None:
    from mere.errors import NoSuchVersion, StorageError

    cat = mere.connect(warehouse, catalog=url)
    while not stop.is_set():
        try:
            snap = cat.snapshot()
            main = _content(snap.table(MAIN).to_arrow())
            mirror = _content(snap.table(MIRROR).to_arrow())
        except NoSuchVersion:
            continue  # expire(0) gave the pinned version up while it was read: documented
        except StorageError as e:
            problems.append(f"StorageError on read: {e}")
            continue
        except Exception as e:
            problems.append(f"raw {type(e).__name__} on read: {e!r}")
            continue
        reads[0] += 1
        a = {k: v for k, v in main.items() if k >= MIRROR_BASE and k < COUNTER}
        b = {k: v for k, v in mirror.items() if k != COUNTER}
        if a != b:
            problems.append(f"half a catalog transaction visible at {snap.versions}: {a} vs {b}")
        time.sleep(0.05)


WRITERS = 4
OPS = 18
# writer -> kill plan; writer 3 is killed by the parent at a seeded time instead.
KILLS: dict[int, str | None] = {0: None, 1: "before_commit:6", 2: "after_commit:5", 3: "upload:9"}


def _run(cat: mere.Catalog, catalog_url: str, tmp_path: Path, seed: int) -> dict[str, Any]:
    _setup(cat)
    warehouse = cat.storage.uri
    location = Path(cat.table(MAIN).location.replace("file://", ""))
    if not location.is_absolute():
        location = Path(cat.table(MAIN).storage.uri.replace("file://", "")) / cat.table(MAIN).location
    for name in FOREIGN:
        (location / name).write_text("not mere's")
    data_dirs = sorted(p for p in location.rglob("*") if p.is_dir())
    foreign = {location / n for n in FOREIGN}
    if data_dirs:
        extra = data_dirs[0] / "part-0123.parquet"
        extra.write_text("someone else's")
        foreign.add(extra)
    ctx = mp.get_context("spawn")
    logs = {w: tmp_path / f"writer{w}.jsonl" for w in range(WRITERS)}
    mlog = tmp_path / "maintenance.jsonl"
    procs = {
        w: ctx.Process(target=_writer, args=(w, seed, OPS, warehouse, catalog_url, str(logs[w]), KILLS[w]))
        for w in range(WRITERS)
    }
    maint = ctx.Process(target=_maintenance, args=(warehouse, catalog_url, str(mlog), 20.0, seed))
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]
    reader = threading.Thread(
        target=_reader, args=(warehouse, catalog_url, stop, problems, reads), daemon=True
    )
    for p in [*procs.values(), maint]:
        p.start()
    reader.start()
    try:
        # Writer 3 is also SIGKILLed by the parent at a seeded moment (if it has not died by its own hand).
        deadline = time.monotonic() + 240
        kill_after = random.Random(seed).randint(4, 9)
        while time.monotonic() < deadline:
            started = [r for r in _read_log(logs[3]) if r.get("event") == "start"]
            if len(started) >= kill_after or not procs[3].is_alive():
                break
            time.sleep(0.02)
        if procs[3].is_alive():
            os.kill(procs[3].pid, signal.SIGKILL)  # type: ignore[arg-type]
        for p in [*procs.values(), maint]:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            assert not p.is_alive(), "a process hung"
    finally:
        stop.set()
        reader.join(timeout=60)
        for p in [*procs.values(), maint]:
            if p.is_alive():
                p.kill()
    return {
        "logs": {w: _read_log(logs[w]) for w in range(WRITERS)},
        "procs": procs,
        "mlog": _read_log(mlog),
        "problems": problems,
        "reads": reads[0],
        "foreign": foreign,
        "location": location,
    }


def _summary(run: dict[str, Any]) -> None:
    """Printed (pytest shows it on failure): what each process did."""
    for w, log in run["logs"].items():
        events = collections.Counter(f"{r.get('event')}:{r.get('type', '')}" for r in log)
        print("writer", w, KILLS[w], run["procs"][w].exitcode, dict(events))
        print("   ", [r["msg"][:160] for r in log if r.get("event") in ("err", "raw")][:6])
    events = collections.Counter(
        f"{r.get('action')}:{r.get('event')}:{r.get('type', '')}" for r in run["mlog"]
    )
    print("maintenance", dict(events))
    print("   ", [r["msg"][:160] for r in run["mlog"] if r.get("event") in ("err", "raw")][:8])
    print("reads", run["reads"], run["problems"][:3])


def _check(cat_url: str, warehouse: str, seed: int, run: dict[str, Any]) -> None:
    _summary(run)
    procs = run["procs"]
    # The plan ran: the unkilled writer and the maintenance finished; every killed one died by SIGKILL at
    # its kill point.
    assert procs[0].exitcode == 0 and run["logs"][0][-1] == {"event": "finished"}
    assert run["mlog"] and run["mlog"][-1] == {"event": "finished"}
    for w in (1, 2, 3):
        # SIGKILLed, unless its kill point's op failed first (an OutlivedCleanup raised before the commit)
        passed = any(
            r.get("n") == int(str(KILLS[w]).split(":")[1]) and r["event"] == "err" for r in run["logs"][w]
        )
        assert procs[w].exitcode == -signal.SIGKILL or (passed and procs[w].exitcode == 0), w
    assert sum(r.get("event") == "ok" for r in run["logs"][0]) >= 10
    for w in range(1, WRITERS):
        assert sum(r.get("event") == "ok" for r in run["logs"][w]) >= 1, w
    assert sum(r.get("event") == "ok" for r in run["mlog"]) >= 5
    raws = [(w, r) for w, log in run["logs"].items() for r in log if r.get("event") == "raw"] + [
        r for r in run["mlog"] if r.get("event") == "raw"
    ]
    assert raws == [], f"raw non-MereError exceptions: {raws}"
    assert run["problems"] == [], run["problems"][:5]
    assert run["reads"] > 0
    fresh = mere.connect(warehouse, catalog=cat_url)
    main_t, mirror_t = fresh.table(MAIN), fresh.table(MIRROR)
    main, mirror = _content(main_t.to_arrow()), _content(mirror_t.to_arrow())

    counter_ok = counter_maybe = mirror_ok = mirror_maybe = 0
    finals: dict[int, dict[int, tuple[int, str]]] = {}
    replays: list[tuple[int, dict[str, Any], bool]] = []  # (writer, op, landed before)
    oks = {
        w: {r["n"]: r["no_change"] for r in run["logs"][w] if r.get("event") == "ok"} for w in range(WRITERS)
    }
    for w in range(WRITERS):
        log = run["logs"][w]
        outcome = {r["n"]: r["event"] for r in log if "n" in r and r["event"] != "start"}
        started = [r["n"] for r in log if r.get("event") == "start"]
        inflight = started[-1] if started and started[-1] not in outcome else None
        kill = KILLS[w]
        mode, at = (kill.split(":")[0], int(kill.split(":")[1])) if kill else (None, -1)
        if (
            mode in ("before_commit", "after_commit", "upload")
            and max(started, default=-1) >= at
            and at not in outcome
        ):
            assert inflight == at, (w, kill, inflight, log[-3:])
        plan = _plan(w, seed, OPS)
        without: dict[int, tuple[int, str]] = {}
        for op in plan:
            n = op["n"]
            tag = f"w{w}-{n}"
            if outcome.get(n) == "ok":
                _replay(without, op, tag)
                counter_ok += op["kind"] in ("counter", "merge_counter")
                mirror_ok += op["kind"] == "tx"
            elif n == inflight:
                landed = dict(without)
                _replay(landed, op, tag)
                if op["kind"] in ("counter", "merge_counter"):
                    counter_maybe += 1
                if op["kind"] == "tx":
                    mirror_maybe += 1
        lo, mirror_lo = w * RANGE, MIRROR_BASE + w * RANGE
        got = {k: v for k, v in main.items() if lo <= k < lo + RANGE or mirror_lo <= k < mirror_lo + RANGE}
        candidates = [without]
        if inflight is not None:
            if mode == "after_commit" and inflight == at:
                candidates = [landed]  # it returned: it landed
            elif mode in ("before_commit", "upload") and inflight == at:
                candidates = [without]  # killed before the commit: nothing of it
            else:
                candidates = [without, landed]
        assert got in candidates, (w, kill, inflight, sorted(set(got.items()) ^ set(candidates[0].items())))
        got_mirror = {k: v for k, v in mirror.items() if mirror_lo <= k < mirror_lo + RANGE}
        want_mirror = {k: v for k, v in got.items() if k >= MIRROR_BASE}
        assert got_mirror == want_mirror, w
        finals[w] = landed if inflight is not None else without
        if inflight is not None:
            replays.append((w, plan[inflight], None if without == landed else got == landed))
        replays.extend((w, op, True) for op in plan if outcome.get(op["n"]) == "ok" and not oks[w][op["n"]])
    counter = main[COUNTER][0]
    assert counter_ok <= counter <= counter_ok + counter_maybe, (counter, counter_ok, counter_maybe)
    mcounter = mirror[COUNTER][0]
    assert mirror_ok <= mcounter <= mirror_ok + mirror_maybe, (mcounter, mirror_ok, mirror_maybe)

    # Idempotency keys after kills, compaction and expire(0): every committed write replays as
    # ``already_committed`` and changes nothing; a killed in-flight write replays as committed exactly when
    # it landed, and lands now otherwise; afterwards the model is exact.
    wrong = []
    for w, op, landed_before in replays:
        n = op["n"]
        outcome = _apply(fresh, fresh.table(MAIN), op, f"w{w}-{n}", f"key-w{w}-{n}")
        if outcome["no_change"]:
            continue  # the killed op had nothing to commit: no key was recorded, nothing changes
        if landed_before is not None and outcome["already"] != [landed_before] * len(outcome["already"]):
            wrong.append((w, op["kind"], n, landed_before, outcome))
    assert wrong == []
    main = _content(fresh.table(MAIN).to_arrow())
    mirror = _content(fresh.table(MIRROR).to_arrow())
    expected = {k: v for final in finals.values() for k, v in final.items()}
    assert {k: v for k, v in main.items() if k != COUNTER} == expected
    assert {k: v for k, v in mirror.items() if k != COUNTER} == {
        k: v for k, v in expected.items() if k >= MIRROR_BASE
    }
    inflight_counters = sum(
        op["kind"] in ("counter", "merge_counter") for _, op, landed in replays if not landed
    )
    inflight_tx = sum(op["kind"] == "tx" for _, op, landed in replays if landed is False)
    assert main[COUNTER][0] == counter + inflight_counters
    assert mirror[COUNTER][0] == mcounter + inflight_tx

    # Every tagged version still reads what it read when it was tagged.
    for r in run["mlog"]:
        if r.get("event") == "tag":
            t = fresh.table(r["table"])
            assert _digest(t.scan(tag=r["tag"]).to_arrow()) == r["digest"], r["tag"]
    # Files others put under the table's location survived every cleanup.
    for f in run["foreign"]:
        assert f.exists(), f
    # A last cleanup after everything: the table and every tag still read the same.
    for t in (main_t, mirror_t):
        before = _content(t.to_arrow())
        t.cleanup(older_than=dt.timedelta(0), dry_run=False)
        t.expire(older_than=dt.timedelta(0), dry_run=False)
        t.cleanup(older_than=dt.timedelta(0), dry_run=False)
        assert _content(fresh.table(t.name).to_arrow()) == before
    for r in run["mlog"]:
        if r.get("event") == "tag":
            assert _digest(fresh.table(r["table"]).scan(tag=r["tag"]).to_arrow()) == r["digest"]
    for f in run["foreign"]:
        assert f.exists(), f
    # No lock left behind: one more write of each kind goes through.
    with fresh.transaction() as tx:
        tx.table(MAIN).upsert(_rows([7], [7], "last"))
        tx.table(MIRROR).upsert(_rows([7], [7], "last"))
    assert _content(fresh.table(MAIN).to_arrow())[7] == (7, "last")


@BACKENDS
def test_writers_maintenance_and_kills_against_a_dict_model(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path
) -> None:
    seed = 51
    run = _run(cat, catalog_url, tmp_path, seed)
    _check(catalog_url, cat.storage.uri, seed, run)


# -- rollbacks to older versions racing writers and compaction: a model per version ---------------------

RB_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])


@BACKENDS
def test_rollbacks_racing_writers_and_compaction_match_a_model_per_version(
    cat: mere.Catalog, catalog_url: str
) -> None:
    """Writer threads upsert and delete their own keys, one thread rolls back to a recent older version,
    one compacts. Every version then reads what the commit log says: a write's version applies it to the
    version before, a rollback's version equals its target, a compaction's changes nothing. A rollback
    that was recomputed on top of a write it never saw would make its version differ from its target."""
    from mere.errors import CommitConflict, MereError

    t0 = cat.create_table(
        "rb.t",
        RB_SCHEMA,
        primary_key="id",
        buckets=2,
        properties={"compaction.min-files": "3", "retention.max-age": "off"},
    )
    t0.upsert(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([0, 0, 0], pa.int64())}))
    warehouse = cat.storage.uri
    lock = threading.Lock()
    commits: dict[int, tuple[str, Any]] = {}  # version -> (kind, payload)
    errors: list[str] = []
    stop = threading.Event()

    def record(version: int, kind: str, payload: Any) -> None:
        with lock:
            assert version not in commits, (version, kind, commits.get(version))
            commits[version] = (kind, payload)

    def writer(w: int) -> None:
        t = mere.connect(warehouse, catalog=catalog_url).table("rb.t")
        rng = random.Random(100 + w)
        for i in range(20):
            try:
                if rng.random() < 0.25:
                    key = w * 100 + rng.randrange(max(1, i))
                    r = t.delete(pa.table({"id": pa.array([key], pa.int64())}))
                    record(r.version, "delete", key)
                else:
                    key, val = w * 100 + i, rng.randrange(1000)
                    r = t.upsert(
                        pa.table(
                            {"id": pa.array([key, 1], pa.int64()), "v": pa.array([val, val], pa.int64())}
                        )
                    )
                    record(r.version, "upsert", {key: val, 1: val})
            except CommitConflict:
                pass
            except MereError as e:
                errors.append(f"writer {w}: {type(e).__name__}: {e}")
            except Exception as e:
                errors.append(f"writer {w}: raw {type(e).__name__}: {e!r}")
            time.sleep(rng.uniform(0.0, 0.1))

    def roller() -> None:
        t = mere.connect(warehouse, catalog=catalog_url).table("rb.t")
        rng = random.Random(7)
        while not stop.is_set():
            try:
                v = t.version
                target = rng.randint(max(1, v - 4), max(1, v - 1))
                r = t.rollback(target)
                record(r.version, "rollback", target)
            except CommitConflict:
                pass
            except Exception as e:
                errors.append(f"rollback: {type(e).__name__}: {e!r}")
            time.sleep(rng.uniform(0.0, 0.03))

    def compactor() -> None:
        t = mere.connect(warehouse, catalog=catalog_url).table("rb.t")
        while not stop.is_set():
            try:
                t.compact()
            except CommitConflict:
                pass
            except Exception as e:
                errors.append(f"compact: {type(e).__name__}: {e!r}")
            time.sleep(0.05)

    writers = [threading.Thread(target=writer, args=(w,)) for w in (1, 2, 3)]
    others = [threading.Thread(target=roller), threading.Thread(target=compactor)]
    for th in writers + others:
        th.start()
    for th in writers:
        th.join(timeout=240)
    stop.set()
    for th in others:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in writers + others), "a thread hung"
    assert errors == []
    fresh = mere.connect(warehouse, catalog=catalog_url).table("rb.t")
    history = {h.version: h.operation for h in fresh.history()}
    kinds = [k for k, _ in commits.values()]
    print(collections.Counter(kinds), history)
    assert kinds.count("rollback") >= 2 and kinds.count("upsert") >= 10, kinds
    model: dict[int, dict[int, int]] = {1: {1: 0, 2: 0, 3: 0}}
    mismatches = []
    for version in range(2, fresh.version + 1):
        before = model[version - 1]
        kind, payload = commits.get(version, (history[version], None))
        if kind == "upsert":
            state = {**before, **payload}
        elif kind == "delete":
            state = {k: v for k, v in before.items() if k != payload}
        elif kind == "rollback":
            state = dict(model[payload])
        else:
            assert kind == "compact", (version, kind)
            state = before
        model[version] = state
        got = _content_rb(fresh.scan(version=version).to_arrow())
        if got != state:
            mismatches.append((version, kind, payload, sorted(set(got.items()) ^ set(state.items()))))
    assert mismatches == []


def _content_rb(t: pa.Table) -> dict[int, int]:
    return dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))


# -- cleanup(0) between a write's files and its commit: deterministic interleavings ----------------------


def _fence_table(cat: mere.Catalog, name: str) -> mere.Table:
    t = cat.create_table(name, RB_SCHEMA, primary_key="id", buckets=2, properties={"compaction.auto": "off"})
    for i in range(3):
        t.upsert(pa.table({"id": pa.array([i, i + 10], pa.int64()), "v": pa.array([i, i], pa.int64())}))
    return t


def _state(t: mere.Table) -> tuple[int, dict[int, int]]:
    fresh = t.catalog.table(t.name)
    return fresh.version, _content_rb(fresh.to_arrow())


@BACKENDS
def test_compaction_whose_outputs_a_cleanup_deleted_is_refused(cat: mere.Catalog) -> None:
    """plan, run the tasks, cleanup(0) deletes their (unreferenced) outputs, commit: refused, and the table
    still reads every row (a commit that went through would reference deleted files)."""
    from mere.errors import MereError

    t = _fence_table(cat, "fence.compact")
    before = _state(t)
    plan = t.plan_compaction()
    assert plan.tasks
    results = [task.run() for task in plan.tasks]
    deleted = t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert deleted  # the outputs were unreferenced
    with pytest.raises(MereError):
        t.commit_compaction(plan, results)
    assert _state(t) == before
    t.upsert(pa.table({"id": pa.array([99], pa.int64()), "v": pa.array([9], pa.int64())}))
    assert _content_rb(cat.table(t.name).to_arrow()) == {**before[1], 99: 9}


@BACKENDS
@pytest.mark.parametrize("how", ["table", "catalog_transaction"])
def test_staged_write_whose_files_a_cleanup_deleted_is_refused(cat: mere.Catalog, how: str) -> None:
    """stage, cleanup(0) deletes the staged files, commit (alone or as a share of a two-table catalog
    transaction): refused whole, nothing of either table changes, both stay readable."""
    from mere.errors import MereError

    a, b = _fence_table(cat, "fence.a"), _fence_table(cat, "fence.b")
    before = (_state(a), _state(b))
    staged = a.stage(
        pa.table({"id": pa.array([50, 1], pa.int64()), "v": pa.array([5, 5], pa.int64())}), "upsert"
    )
    assert a.cleanup(older_than=dt.timedelta(0), dry_run=False)
    with pytest.raises(MereError):
        if how == "table":
            a.commit([staged])
        else:
            with cat.transaction() as tx:
                tx.table("fence.b").upsert(
                    pa.table({"id": pa.array([60], pa.int64()), "v": pa.array([6], pa.int64())})
                )
                tx.table("fence.a").add_staged(staged)
    assert (_state(a), _state(b)) == before


def _stalled_writer_run(cat: mere.Catalog, catalog_url: str, kind: str) -> tuple[Any, list[str]]:
    """Runs ``kind`` on fence.a in a thread whose data-file writes stall until a cleanup(0) of fence.a (and
    fence.b) has run in the main thread; returns the write's outcome and what the cleanups deleted."""
    from mere.io.storage import Storage

    warehouse = cat.storage.uri
    wrote, go = threading.Event(), threading.Event()
    real_write = Storage.write
    armed: list[bool] = []

    def write(self: Any, rel: str, *args: Any, **kwargs: Any) -> Any:
        out = real_write(self, rel, *args, **kwargs)
        if armed:  # every data-file write of the stalled write (its pool threads too)
            wrote.set()
            go.wait(30)
        return out

    outcome: list[Any] = []

    def run() -> None:
        c = mere.connect(warehouse, catalog=catalog_url)
        rows = pa.table({"id": pa.array([70, 2], pa.int64()), "v": pa.array([7, 7], pa.int64())})
        try:
            if kind == "upsert":
                outcome.append(c.table("fence.a").upsert(rows))
            elif kind == "merge":
                outcome.append(
                    c.table("fence.a")
                    .merge(rows)
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute()
                )
            else:
                with c.transaction() as tx:
                    tx.table("fence.b").upsert(rows)
                    tx.table("fence.a").upsert(rows)
                outcome.append(tx.results)
        except Exception as e:
            outcome.append(e)

    th = threading.Thread(target=run, name="stall-writer")
    Storage.write = write  # type: ignore[method-assign]
    try:
        armed.append(True)
        th.start()
        assert wrote.wait(20)
        deleted = []
        for name in ("fence.a", "fence.b"):
            deleted += cat.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
        armed.clear()
        go.set()
        th.join(60)
    finally:
        Storage.write = real_write  # type: ignore[method-assign]
        go.set()
    assert not th.is_alive()
    return outcome[0], deleted


@BACKENDS
@pytest.mark.parametrize("kind", ["upsert", "merge", "catalog_transaction"])
def test_write_outlived_by_a_cleanup_is_refused_or_keeps_its_files(
    cat: mere.Catalog, catalog_url: str, kind: str
) -> None:
    """A write stalls after its first data file; cleanup(0) runs; the write goes on. Either it is refused
    (OutlivedCleanup: nothing of it lands, in any table) or it lands and every file it references exists:
    both tables read, with exactly the model's rows."""
    from mere.errors import MereError

    a, b = _fence_table(cat, "fence.a"), _fence_table(cat, "fence.b")
    before = (_state(a), _state(b))
    outcome, deleted = _stalled_writer_run(cat, catalog_url, kind)
    assert deleted  # the stalled write's files were unreferenced and older than 0
    after = (_state(a), _state(b))  # both must read
    if isinstance(outcome, MereError):
        assert after == before, outcome
    else:
        assert not isinstance(outcome, Exception), repr(outcome)
        want_a = {**before[0][1], 70: 7, 2: 7}
        assert after[0][1] == want_a
        if kind == "catalog_transaction":
            assert after[1][1] == {**before[1][1], 70: 7, 2: 7}
    for name in ("fence.a", "fence.b"):
        cat.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert (_state(a), _state(b)) == after


@BACKENDS
def test_rollbacks_racing_expire_and_cleanup_land_whole_or_not_at_all(
    cat: mere.Catalog, catalog_url: str
) -> None:
    """One thread writes and rolls back its own last write, again and again; another runs expire(0) and
    cleanup(0) in a loop. A rollback either raises (``NoSuchVersion`` when its target expired meanwhile,
    or another ``MereError``) and changes nothing, or lands and reads exactly its target's rows: never a
    version that references files the cleanup deleted."""
    from mere.errors import MereError

    t = cat.create_table(
        "rbx.t", RB_SCHEMA, primary_key="id", buckets=2, properties={"compaction.auto": "off"}
    )
    t.upsert(pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([0], pa.int64())}))
    warehouse = cat.storage.uri
    stop = threading.Event()
    errors: list[str] = []
    maintenance_runs = [0]

    def maintain() -> None:
        m = mere.connect(warehouse, catalog=catalog_url).table("rbx.t")
        while not stop.is_set():
            try:
                m.expire(older_than=dt.timedelta(0), dry_run=False)
                m.cleanup(older_than=dt.timedelta(0), dry_run=False)
                maintenance_runs[0] += 1
            except MereError:
                pass
            except Exception as e:
                errors.append(f"maintenance raw {type(e).__name__}: {e!r}")

    th = threading.Thread(target=maintain)
    th.start()
    model = {1: 0}
    landed = refused = 0
    try:
        for i in range(40):
            before = dict(model)
            try:
                t.upsert(
                    pa.table({"id": pa.array([i + 10, 1], pa.int64()), "v": pa.array([i, i], pa.int64())})
                )
                model.update({i + 10: i, 1: i})
            except MereError:
                assert _content_rb(cat.table("rbx.t").to_arrow()) == model
                continue
            target = t.version - 1
            try:
                t.rollback(target)
                model = before
                landed += 1
            except MereError:
                refused += 1
            except Exception as e:
                errors.append(f"rollback raw {type(e).__name__}: {e!r}")
            assert _content_rb(cat.table("rbx.t").to_arrow()) == model, i
    finally:
        stop.set()
        th.join(60)
    assert errors == []
    print("rollbacks landed", landed, "refused", refused, "maintenance runs", maintenance_runs[0])
    assert landed > 0 and maintenance_runs[0] > 0, (landed, refused, maintenance_runs)


# -- maintenance killed midway -------------------------------------------------------------------------


def _maintenance_child(warehouse: str, url: str, action: str, point: str) -> None:
    from sqlalchemy import event

    from mere.io.storage import Storage

    cat = mere.connect(warehouse, catalog=url)
    t = cat.table("kill.t")
    if point == "first_delete":
        real_delete, real_discard = Storage.delete, Storage.discard

        def delete(self: Any, rel: str) -> None:
            real_delete(self, rel)
            _die()

        def discard(self: Any, rels: Any) -> None:
            rels = list(rels)
            if rels:
                real_delete(self, rels[0])
                _die()
            real_discard(self, rels)

        Storage.delete = delete  # type: ignore[method-assign]
        Storage.discard = discard  # type: ignore[method-assign]
    else:  # first_commit: inside the first catalog transaction, before its COMMIT

        def before_commit(conn: Any) -> None:
            _die()

        event.listen(cat.sql.engine, "commit", before_commit)
    if action == "expire":
        t.expire(older_than=dt.timedelta(0), dry_run=False)
    elif action == "cleanup":
        t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    elif action == "compact":
        t.compact()
    elif action == "rollback":
        t.rollback(2)
    elif action == "expire_cleanup":
        t.expire(older_than=dt.timedelta(0), dry_run=False)
        t.cleanup(older_than=dt.timedelta(0), dry_run=False)


@BACKENDS
@pytest.mark.parametrize(
    "action,point",
    [
        ("expire", "first_delete"),
        ("compact", "first_commit"),
        ("rollback", "first_commit"),
        ("expire_cleanup", "first_delete"),
    ],
)
def test_maintenance_killed_midway_leaves_every_kept_version_readable(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path, action: str, point: str
) -> None:
    """A process running expire(0), cleanup(0), compact() or a rollback is SIGKILLed after its first file
    deletion or inside its first catalog transaction. Afterwards every version reads what it read before
    or is expired (``NoSuchVersion``), the current version and the tagged one read as before, files others
    put under the table survive, and a later expire + cleanup leaves all of that so."""
    from mere.errors import NoSuchVersion

    t = cat.create_table(
        "kill.t",
        RB_SCHEMA,
        primary_key="id",
        buckets=2,
        properties={"compaction.auto": "off", "retention.max-age": "off"},
    )
    for i in range(6):
        t.upsert(pa.table({"id": pa.array([i, 100 + i % 2], pa.int64()), "v": pa.array([i, i], pa.int64())}))
        if i == 3:
            t.delete(pa.table({"id": pa.array([0], pa.int64())}))
    t.tag("keep", 3)
    t.compact()  # the files only older versions hold are what expire gives up
    t.upsert(pa.table({"id": pa.array([1, 50, 51], pa.int64()), "v": pa.array([-1, 5, 5], pa.int64())}))
    # Leave some unreferenced files behind (a staged write never committed) so cleanup has work.
    t.stage(pa.table({"id": pa.array([999], pa.int64()), "v": pa.array([9], pa.int64())}), "upsert")
    location = Path(cat.storage.uri) / t.location
    foreign = [location / "notes.txt", location / "bucket-00000" / "backup.parquet"]
    for f in foreign:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("not mere's")
    time.sleep(0.01)
    versions = {v: _content_rb(t.scan(version=v).to_arrow()) for v in range(t.version + 1)}
    current = t.version
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_maintenance_child, args=(cat.storage.uri, catalog_url, action, point))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL

    def check() -> None:
        fresh = mere.connect(cat.storage.uri, catalog=catalog_url).table("kill.t")
        assert fresh.version in (current, current + 1)
        if fresh.version == current:
            assert _content_rb(fresh.to_arrow()) == versions[current]
        for v, rows in versions.items():
            try:
                got = _content_rb(fresh.scan(version=v).to_arrow())
            except NoSuchVersion:
                continue
            assert got == rows, v
        assert _content_rb(fresh.scan(tag="keep").to_arrow()) == versions[3]
        for f in foreign:
            assert f.exists(), f

    check()
    fresh = mere.connect(cat.storage.uri, catalog=catalog_url).table("kill.t")
    fresh.expire(older_than=dt.timedelta(0), dry_run=False)
    fresh.cleanup(older_than=dt.timedelta(0), dry_run=False)
    check()


@BACKENDS
def test_open_scan_whose_version_expire_and_cleanup_gave_up_raises_no_such_version(cat: mere.Catalog) -> None:
    """A streamed read of version 3 took its first batch; compaction, expire(0) and cleanup(0) then give
    version 3 up and delete its files; the rest of the stream raises NoSuchVersion, never a partial result."""
    from mere.errors import NoSuchVersion

    t = cat.create_table(
        "open.t",
        RB_SCHEMA,
        primary_key="id",
        buckets=4,
        properties={"compaction.auto": "off", "write.row-group-rows": "100"},
    )
    for i in range(3):
        ids = pa.array(range(i * 1000, i * 1000 + 1000), pa.int64())
        t.upsert(pa.table({"id": ids, "v": pa.array([i] * 1000, pa.int64())}))
    stream = iter(t.scan(version=3).to_batches())
    first = next(stream)
    t.compact()
    t.upsert(pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([9], pa.int64())}))
    assert t.expire(older_than=dt.timedelta(0), dry_run=False)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    with pytest.raises(NoSuchVersion):
        _ = first.num_rows + sum(b.num_rows for b in stream)
    assert len(cat.table("open.t").to_arrow()) == 3000
