"""Soak: many writers, readers, a change-feed consumer and maintenance at once, on PostgreSQL and S3 with
faults injected, and a checker that proves nothing acknowledged was lost and nothing torn was read.

    python bench/bench_soak.py --minutes 10 --seed 1            # or: make soak
    python bench/bench_soak.py --minutes 2 --writers 6 --readers 2 --seed 7 --json out.json

It starts its own throwaway PostgreSQL (the catalog) and SeaweedFS (the warehouse, behind the latency
proxy of ``tools/latency_proxy.py``), creates four tables (``soak_ops.py``: keyed with a ``sum`` operator
and the change log, keyed and partitioned, keyless and partitioned, and a CDC table ordered by a
sequence column), then runs at once until the time is up:

- writer processes drawing upserts, CDC batches (shuffled sequences, replayed batches), deletes by key and
  by predicate, MERGE, UPDATE, partition overwrites and two-operation transactions, each with an
  idempotency key, and deliberate replays of acknowledged writes with their key;
- reader processes reading the newest version, time travelling to retained ones and checking key
  lookups against the full read;
- a change-feed consumer that rebuilds the change-logged table from its feed;
- maintenance: automatic compaction (inline, the default) plus ``expire`` and ``cleanup``;
- faults on a seeded schedule: S3 request errors, connection resets and stalls and latency spikes at the
  proxy, PostgreSQL backends terminated (``pg_terminate_backend``), one PostgreSQL restart, and SIGKILL
  of writers (restarted).

Every process logs what it did (JSON lines). The checker then replays each table's history (the catalog's
versions, each naming the idempotency key it was committed with) on a model and proves:

1. every acknowledged write is in the history at the version it was acknowledged with; a deliberate
   replay returned that same version;
2. nothing unacknowledged is visible but writes whose outcome the client could not know (a killed writer,
   ``CommitStateUnknown``), and those are whole (a version applies the whole operation or is absent);
   writes refused with another error are absent;
3. every read returned exactly the model's rows at the version it read (no torn or unacknowledged state);
   every key lookup equalled the full read's rows;
4. every retained version reads back exactly (time travel), so no file a live version needs is missing;
5. the consumer's rebuilt table equals the table at the version it reached;
6. after a final ``cleanup`` no file older than its age is left unreferenced (no orphan);
7. every table is readable at the end.

The report: commits/s, rows/s, commit latency p50/p99/max and conflicts per operation, reader latency,
bytes stored against live bytes, faults injected, and each invariant's verdict. The exit status is 0 only
when every invariant holds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import latency_proxy  # noqa: E402
import soak_ops  # noqa: E402

import mere  # noqa: E402
import mere.retry  # noqa: E402
from mere.errors import CommitConflict, CommitStateUnknown, MereError  # noqa: E402
from services import PostgresServer, SeaweedServer  # noqa: E402

EXPIRE_AFTER_S = 20.0  # versions older than this are expired by maintenance
CLEANUP_AFTER_S = 10.0  # unreferenced files older than this are deleted by maintenance
MAINTENANCE_EVERY_S = 4.0


@dataclass
class Setup:
    """What every process needs to reach the warehouse."""

    catalog: str
    warehouse: str
    storage_options: dict[str, str]
    logs: str
    seed: int
    deadline: float = 0.0  # time.time() at which writers, readers and maintenance stop

    def connect(self) -> mere.Catalog:
        return mere.connect(self.warehouse, self.catalog, storage_options=self.storage_options)

    def ready(self, name: str) -> None:
        """Report this process ready, then wait for the start: the clock runs once every process has
        imported and connected (on a loaded machine that alone can take many seconds)."""
        (Path(self.logs) / f"{name}.ready").touch()
        go = Path(self.logs) / "go"
        while not go.exists():
            time.sleep(0.1)
        self.deadline = float(go.read_text())

    def start(self, names: list[str], timeout: float, seconds: float) -> None:
        """Wait until every process in ``names`` is ready (or ``timeout``), then start the clock."""
        until = time.time() + timeout
        while time.time() < until and not all((Path(self.logs) / f"{n}.ready").exists() for n in names):
            time.sleep(0.2)
        self.deadline = time.time() + seconds
        go = Path(self.logs) / "go.tmp"
        go.write_text(repr(self.deadline))
        go.rename(Path(self.logs) / "go")


class Log:
    """A process's JSON-lines log; each line is flushed at once (a SIGKILL loses nothing written)."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, **entry: Any) -> None:
        self.file.write(json.dumps(entry, default=str) + "\n")
        self.file.flush()


# -- processes ----------------------------------------------------------------------------------------

RETRIES: Counter[str] = Counter()


def count_retries() -> None:
    """Count, in this process, every retry mere's one retry policy sleeps before (commit rebases, catalog
    lock waits, storage requests): instrumentation of the benchmark, the library is unchanged."""
    named = {id(v): k for k, v in vars(mere.retry).items() if isinstance(v, mere.retry.RetryPolicy)}
    original = mere.retry.RetryPolicy.delay

    def delay(self: mere.retry.RetryPolicy, attempt: int) -> float:
        RETRIES[named.get(id(self), "storage")] += 1
        return original(self, attempt)

    mere.retry.RetryPolicy.delay = delay  # type: ignore[method-assign]


def writer_main(setup: Setup, name: str, incarnation: int) -> None:
    """Draw and run operations until the deadline, logging intent before and outcome after each."""
    log = Log(Path(setup.logs) / f"{name}.{incarnation}.jsonl")
    count_retries()
    rng = np.random.default_rng([setup.seed, int(name[1:]), incarnation])
    cat = setup.connect()
    setup.ready(name)
    acked: list[tuple[dict[str, Any], str, int]] = []
    done: list[dict[str, Any]] = []
    n = 0
    while time.time() < setup.deadline:
        if acked and rng.random() < 0.05:
            step, key, version = acked[int(rng.integers(len(acked)))]
            t0 = time.perf_counter()
            try:
                got, already, _ = soak_ops.run(cat, step, key)
                log.write(
                    replay=key, version=got, expected=version, already=already, dt=time.perf_counter() - t0
                )
            except MereError as e:
                log.write(replay=key, error=type(e).__name__, msg=str(e)[:300])
            continue
        step = soak_ops.plan(rng, name, done)
        key = f"{name}.{incarnation}.{n}"
        n += 1
        log.write(intent=key, step=step, t=time.time())
        RETRIES.clear()
        t0 = time.perf_counter()
        try:
            version, already, no_change = soak_ops.run(cat, step, key)
        except CommitStateUnknown as e:
            log.write(unknown=key, error=str(e)[:300], dt=time.perf_counter() - t0)
            continue
        except CommitConflict as e:
            log.write(
                failed=key,
                error=type(e).__name__,
                conflict=True,
                msg=str(e)[:300],
                dt=time.perf_counter() - t0,
            )
            continue
        except MereError as e:
            log.write(failed=key, error=type(e).__name__, msg=str(e)[:300], dt=time.perf_counter() - t0)
            continue
        except Exception as e:  # not a typed error: the checker reports it
            log.write(
                untyped=key, error=type(e).__name__, msg=str(e)[:300], tb=traceback.format_exc()[-2000:]
            )
            continue
        log.write(
            ack=key,
            version=version,
            already=already,
            no_change=no_change,
            dt=time.perf_counter() - t0,
            retries=dict(RETRIES),
        )
        done.append(step)
        if not no_change:
            acked.append((step, key, version))


def reader_main(setup: Setup, name: str) -> None:
    """Read newest and retained versions until the deadline, logging each read's digest."""
    log = Log(Path(setup.logs) / f"{name}.jsonl")
    rng = random.Random(f"{setup.seed}-{name}")
    cat = setup.connect()
    setup.ready(name)
    tables = list(soak_ops.TABLE_WEIGHTS)
    while time.time() < setup.deadline:
        table = rng.choice(tables)
        t0 = time.perf_counter()
        try:
            t = cat.table(f"{soak_ops.NAMESPACE}.{table}")
            kind = "latest"
            version = None
            if rng.random() < 0.3:
                live = [h.version for h in t.history() if not h.expired]
                version = rng.choice(live)
                kind = "travel"
            scan = t.scan(version=version)
            data = scan.to_arrow()
            entry: dict[str, Any] = {
                "read": table,
                "kind": kind,
                "version": scan.version,
                "digest": soak_ops.digest_rows(soak_ops.table_rows(data, table)),
                "rows": data.num_rows,
                "dt": time.perf_counter() - t0,
            }
            if table == "accounts" and data.num_rows:
                ids = sorted(rng.sample(data.column("id").to_pylist(), min(5, data.num_rows)))
                looked = t.scan(version=scan.version, filter=f"id IN ({', '.join(map(str, ids))})").to_arrow()
                wanted = [r for r in soak_ops.table_rows(data, table) if r[0] in set(ids)]
                entry["lookup_ok"] = soak_ops.table_rows(looked, table) == wanted
            log.write(**entry)
        except MereError as e:
            log.write(read_error=type(e).__name__, table=table, msg=str(e)[:300], dt=time.perf_counter() - t0)
        except Exception as e:
            log.write(untyped=f"read {table}", error=type(e).__name__, msg=str(e)[:300])


def consumer_main(setup: Setup, name: str) -> None:
    """Rebuild the change-logged table from its feed (``follow`` through a named consumer, whose position
    ``expire`` must keep), until the version the coordinator names at the end."""
    log = Log(Path(setup.logs) / f"{name}.jsonl")
    cat = setup.connect()
    t = cat.table(f"{soak_ops.NAMESPACE}.accounts")
    t.consumer("soak")
    setup.ready(name)
    rebuilt: dict[int, tuple[Any, ...]] = {}
    stop = Path(setup.logs) / "stop-consumer"
    while True:
        try:
            for version, changes in t.follow(consumer="soak", poll_seconds=0.2, max_poll_seconds=1.0):
                cols = [changes.column(c).to_pylist() for c in (*soak_ops.ACCOUNTS.names, "_change")]
                for k, v, total, note, change in zip(*cols):
                    if change == "delete":
                        rebuilt.pop(k, None)
                    elif change in ("insert", "update_after"):
                        rebuilt[k] = (k, v, total, note)
                log.write(
                    consumed=version, digest=soak_ops.digest_rows(sorted(rebuilt.values())), rows=len(rebuilt)
                )
                if stop.exists() and version >= int(stop.read_text()):
                    return
        except MereError as e:  # a fault: follow again from the consumer's position (at least once)
            log.write(consume_error=type(e).__name__, msg=str(e)[:300])
            time.sleep(0.5)


def maintenance_main(setup: Setup, name: str) -> None:
    """Expire and clean up every table on a schedule (compaction runs inline with the writes)."""
    log = Log(Path(setup.logs) / f"{name}.jsonl")
    cat = setup.connect()
    setup.ready(name)
    while time.time() < setup.deadline:
        for table in soak_ops.TABLE_WEIGHTS:
            t0 = time.perf_counter()
            try:
                t = cat.table(f"{soak_ops.NAMESPACE}.{table}")
                expired = t.expire(dt.timedelta(seconds=EXPIRE_AFTER_S), dry_run=False)
                removed = t.cleanup(dt.timedelta(seconds=CLEANUP_AFTER_S), dry_run=False)
                if table == "events":
                    t.compact()
                log.write(
                    maintained=table, expired=len(expired), removed=len(removed), dt=time.perf_counter() - t0
                )
            except MereError as e:
                log.write(maintenance_error=type(e).__name__, table=table, msg=str(e)[:300])
            except Exception as e:
                log.write(untyped=f"maintain {table}", error=type(e).__name__, msg=str(e)[:300])
        time.sleep(MAINTENANCE_EVERY_S)


# -- faults -------------------------------------------------------------------------------------------


class Faults:
    """Injects faults on a seeded schedule until stopped; counts what it did."""

    def __init__(
        self,
        seed: int,
        proxy: latency_proxy.LatencyProxy,
        pg: PostgresServer,
        database: str,
        writers: dict[str, mp.Process],
        restart_writer: Any,
        minutes: float,
        logs: Path,
    ) -> None:
        self.rng = random.Random(seed)
        self.proxy, self.pg, self.database = proxy, pg, database
        self.writers, self.restart_writer = writers, restart_writer
        self.logs = logs
        self.counts: Counter[str] = Counter()
        self.stop = threading.Event()
        self.restart_at = time.time() + minutes * 60 * 0.5
        self.restarted = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        kinds = ["s3_errors", "s3_resets", "s3_stall", "s3_latency", "pg_terminate", "kill_writer"]
        while not self.stop.wait(self.rng.uniform(3.0, 8.0)):
            if not self.restarted and time.time() >= self.restart_at:
                self._pg_restart()
                continue
            kind = self.rng.choice(kinds)
            try:
                getattr(self, "_" + kind)()
                self.counts[kind] += 1
            except Exception as e:  # a fault that fails to inject is reported, the run goes on
                self.counts[f"{kind} failed: {type(e).__name__}"] += 1

    def _s3_plan(self, kind: str, probability: float, seconds: float) -> None:
        plan = latency_proxy.FaultPlan(kind=kind, probability=probability, seed=self.rng.randrange(2**31))
        self.proxy.faults = plan
        time.sleep(seconds)
        self.proxy.faults = None
        self.counts["s3 requests failed"] += plan.injected

    def _s3_errors(self) -> None:
        self._s3_plan("error", 0.15, 3.0)

    def _s3_resets(self) -> None:
        self._s3_plan("reset", 0.08, 3.0)

    def _s3_stall(self) -> None:
        plan = latency_proxy.FaultPlan(kind="stall", probability=0.5, limit=2, seed=self.rng.randrange(2**31))
        self.proxy.faults = plan
        time.sleep(2.0)
        self.proxy.faults = None
        self.counts["s3 requests failed"] += plan.injected

    def _s3_latency(self) -> None:
        base = self.proxy.rtt_ms
        self.proxy.rtt_ms = 250.0
        time.sleep(3.0)
        self.proxy.rtt_ms = base

    def _pg_terminate(self) -> None:
        import psycopg

        assert self.pg.port is not None
        with psycopg.connect(host="127.0.0.1", port=self.pg.port, user="postgres", dbname="postgres") as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.database,),
            ).fetchall()
        self.counts["pg backends terminated"] += len(rows)

    def _pg_restart(self) -> None:
        self.restarted = True
        t0 = time.monotonic()
        self.pg.restart()
        self.counts["pg_restart"] += 1
        self.counts["pg restart seconds"] += round(time.monotonic() - t0, 1)

    def _in_flight(self, name: str) -> bool:
        logs = sorted(Path(self.logs).glob(f"{name}.*.jsonl"), key=lambda p: int(p.name.split(".")[1]))
        if not logs:
            return False
        with open(logs[-1], "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            lines = f.read().splitlines()
        return bool(lines) and lines[-1].startswith(b'{"intent"')

    def _kill_writer(self) -> None:
        alive = [n for n, p in self.writers.items() if p.is_alive()]
        if not alive:
            return
        # Prefer a writer in the middle of an operation (its log ends with an intent): killed mid-commit.
        busy = [n for n in alive if self._in_flight(n)]
        name = self.rng.choice(busy or alive)
        self.counts["kill_writer mid-operation"] += bool(busy)
        proc = self.writers[name]
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        self.restart_writer(name)


# -- the checker --------------------------------------------------------------------------------------


def read_logs(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every process's log entries, by file stem (a torn last line of a killed writer is dropped)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        entries = []
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                entries.append(json.loads(line))
        out[path.stem] = entries
    return out


MAINTENANCE_OPERATIONS = {"compact", "create", "expire", "set-properties", "rewrite"}


def check(
    setup: Setup, logs: dict[str, list[dict[str, Any]]], cleaned_at: float, fs: Any, root: str
) -> dict[str, Any]:
    """Prove the invariants; returns each one's verdict and the problems found."""
    cat = setup.connect()
    problems: dict[str, list[str]] = defaultdict(list)
    intents: dict[str, dict[str, Any]] = {}
    started: dict[str, float] = {}
    landed_ms: dict[str, list[float]] = defaultdict(list)  # intent to the commit's timestamp, per operation
    outcome: dict[str, dict[str, Any]] = {}
    replays: list[dict[str, Any]] = []
    reads: list[dict[str, Any]] = []
    consumed: list[dict[str, Any]] = []
    for name, entries in logs.items():
        for e in entries:
            if "intent" in e:
                intents[e["intent"]] = e["step"]
                started[e["intent"]] = e["t"]
            for kind in ("ack", "unknown", "failed", "untyped"):
                if kind in e and kind != "untyped":
                    outcome[e[kind]] = {"kind": kind, **e}
            if "untyped" in e:
                problems["untyped errors"].append(f"{name}: {e['untyped']}: {e['error']}: {e.get('msg')}")
                if e["untyped"] in intents:
                    outcome[e["untyped"]] = {"kind": "untyped", **e}
            if "replay" in e:
                replays.append(e)
            if "read" in e:
                reads.append(e)
            if "consumed" in e:
                consumed.append(e)

    digests: dict[str, dict[int, str]] = {}
    history_keys: dict[str, dict[str, int]] = {}
    for table in soak_ops.TABLE_WEIGHTS:
        t = cat.table(f"{soak_ops.NAMESPACE}.{table}")
        model = soak_ops.Model()
        by_version: dict[int, str] = {}
        keys: dict[str, int] = {}
        for snap in t.history():
            key = snap.idempotency_key
            if key is not None:
                if key in keys:
                    problems["unacknowledged or duplicated writes"].append(
                        f"{table}: key {key} made two versions"
                    )
                keys[key] = snap.version
                step = intents.get(key)
                if step is None:
                    problems["unacknowledged or duplicated writes"].append(
                        f"{table} v{snap.version}: key {key} was never attempted by a writer"
                    )
                elif step["table"] != table:
                    problems["unacknowledged or duplicated writes"].append(
                        f"{table} v{snap.version}: key {key} is for {step['table']}"
                    )
                else:
                    model.apply(step)
            elif snap.version > 0 and snap.operation not in MAINTENANCE_OPERATIONS:
                problems["unacknowledged or duplicated writes"].append(
                    f"{table} v{snap.version}: {snap.operation} without an idempotency key"
                )
            by_version[snap.version] = model.digest(table)
            if key is not None and key in started and step is not None:
                landed_ms[f"{table}.{step['op']}"].append((snap.committed_micros / 1e6 - started[key]) * 1000)
        digests[table] = by_version
        history_keys[table] = keys

    # 1-2: acknowledged writes are there, at their version; refused ones are not.
    counts: Counter[str] = Counter()
    for key, step in intents.items():
        table = step["table"]
        landed = history_keys[table].get(key)
        o = outcome.get(key)
        kind = o["kind"] if o else "killed"
        counts[kind] += 1
        if kind == "ack":
            if o is not None and o.get("no_change"):
                if landed is not None:
                    problems["acknowledged writes"].append(f"{key}: no_change but made version {landed}")
            elif landed != o["version"] if o else True:
                problems["acknowledged writes"].append(
                    f"{key} ({table} {step['op']}): acked v{o and o['version']}, history {landed}"
                )
        elif kind in ("failed", "untyped") and landed is not None:
            problems["refused writes absent"].append(
                f"{key} ({table} {step['op']}): {o and o['error']} but landed as v{landed}"
            )
        elif kind in ("unknown", "killed") and landed is not None:
            counts[f"{kind} and landed"] += 1
    for r in replays:
        if "error" in r:
            # A typed error changes nothing (a fault, such as the catalog restarting); a replay that runs
            # must return the first commit.
            counts["replays refused by a fault"] += 1
        elif not r["already"] or r["version"] != r["expected"]:
            problems["replays"].append(
                f"{r['replay']}: replay gave v{r['version']} (already={r['already']}), first v{r['expected']}"
            )

    # 3: reads.
    lookups = 0
    for r in reads:
        want = digests[r["read"]].get(r["version"])
        if want != r["digest"]:
            problems["reads exact"].append(
                f"{r['read']} v{r['version']} ({r['kind']}): read {r['digest']}, model {want}"
            )
        if "lookup_ok" in r:
            lookups += 1
            if not r["lookup_ok"]:
                problems["lookups equal reads"].append(f"{r['read']} v{r['version']}")

    # 4 and 7: every retained version reads back exactly; the newest is readable.
    versions_checked = 0
    for table in soak_ops.TABLE_WEIGHTS:
        t = cat.table(f"{soak_ops.NAMESPACE}.{table}")
        for snap in t.history():
            if snap.expired:
                continue
            try:
                data = t.scan(version=snap.version).to_arrow()
            except MereError as e:
                problems["retained versions readable"].append(
                    f"{table} v{snap.version}: {type(e).__name__}: {e}"
                )
                continue
            versions_checked += 1
            got = soak_ops.digest_rows(soak_ops.table_rows(data, table))
            if got != digests[table][snap.version]:
                problems["retained versions exact"].append(f"{table} v{snap.version}")

    # 5: the consumer reached the newest version of its table with the same rows.
    accounts = cat.table(f"{soak_ops.NAMESPACE}.accounts")
    final = [c for c in consumed if c["consumed"] == accounts.version]
    if not final:
        last = consumed[-1]["consumed"] if consumed else None
        problems["consumer rebuilds the table"].append(
            f"consumer stopped at {last}, table at v{accounts.version}"
        )
    elif final[-1]["digest"] != digests["accounts"][accounts.version]:
        problems["consumer rebuilds the table"].append(f"rebuilt rows differ at v{accounts.version}")

    # 6: no orphan older than the cleanup age after the final cleanup.
    orphans, stored_bytes, live_bytes = _orphans(cat, cleaned_at, fs, root)
    for o in orphans:
        problems["no orphans after cleanup"].append(o)

    invariants = [
        "acknowledged writes",
        "refused writes absent",
        "unacknowledged or duplicated writes",
        "replays",
        "reads exact",
        "lookups equal reads",
        "retained versions readable",
        "retained versions exact",
        "consumer rebuilds the table",
        "no orphans after cleanup",
        "untyped errors",
    ]
    return {
        "verdicts": {
            name: ("ok" if not problems.get(name) else f"FAILED ({len(problems[name])})")
            for name in invariants
        },
        "problems": {k: v[:20] for k, v in problems.items() if v},
        "outcomes": dict(counts),
        "replays": len(replays),
        "reads": len(reads),
        "lookups": lookups,
        "versions_checked": versions_checked,
        # From the call to the commit landing (the call's own latency in the report adds what runs after
        # the commit in the writer: inline compaction).
        "landed_ms": {
            op: {
                "p50": round(_percentile(v, 50), 1),
                "p99": round(_percentile(v, 99), 1),
                "max": round(max(v), 1),
            }
            for op, v in sorted(landed_ms.items())
        },
        "stored_bytes": stored_bytes,
        "live_bytes": live_bytes,
    }


def _orphans(cat: mere.Catalog, cleaned_at: float, fs: Any, root: str) -> tuple[list[str], int, int]:
    """Unreferenced files older than the cleanup age at the final cleanup; bytes stored and live.
    ``fs`` and ``root``: the warehouse, reached around mere (file paths are relative to it)."""
    import pyarrow.fs as pafs

    orphans: list[str] = []
    stored = live = 0
    for table in soak_ops.TABLE_WEIGHTS:
        t = cat.table(f"{soak_ops.NAMESPACE}.{table}")
        referenced: set[str] = set()
        for snap in t.history():
            if not snap.expired:
                files = t.inspect.files(snap.version)
                referenced.update(files.column("path").to_pylist())
        newest = t.inspect.files()
        live += sum(newest.column("size_bytes").to_pylist())
        folder = f"{root}/{t.location}"
        for info in fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True)):
            if info.type != pafs.FileType.File:
                continue
            stored += info.size or 0
            relative = info.path[len(root) :].lstrip("/")
            if relative in referenced:
                continue
            mtime = info.mtime.timestamp() if info.mtime else 0.0
            if mtime < cleaned_at - CLEANUP_AFTER_S - 2.0:
                orphans.append(f"{table}: {relative}")
    return orphans, stored, live


# -- the run ------------------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def report(logs: dict[str, list[dict[str, Any]]], seconds: float) -> dict[str, Any]:
    """Throughput and latency from the logs."""
    intents = {e["intent"]: e["step"] for entries in logs.values() for e in entries if "intent" in e}
    by_op: dict[str, list[float]] = defaultdict(list)
    retries: dict[str, Counter[str]] = defaultdict(Counter)
    conflicts: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    samples: dict[str, str] = {}  # an error's first message
    rows = 0
    for entries in logs.values():
        for e in entries:
            if "ack" in e and not e.get("already"):
                step = intents[e["ack"]]
                by_op[f"{step['table']}.{step['op']}"].append(e["dt"])
                retries[f"{step['table']}.{step['op']}"].update(e.get("retries", {}))
            if "failed" in e:
                step = intents.get(e["failed"], {})
                label = f"{step.get('table')}.{step.get('op')}"
                (conflicts if e.get("conflict") else failures)[f"{label}: {e['error']}"] += 1
                samples.setdefault(e["error"], e.get("msg", ""))
            if "read" in e:
                rows += e["rows"]
    read_dt = [e["dt"] for entries in logs.values() for e in entries if "read" in e]
    commits = sum(len(v) for v in by_op.values())
    return {
        "seconds": round(seconds, 1),
        "commits": commits,
        "commits_per_s": round(commits / seconds, 1),
        "rows_read_per_s": round(rows / seconds),
        "latency_ms": {
            op: {
                "n": len(v),
                "p50": round(_percentile(v, 50) * 1000, 1),
                "p99": round(_percentile(v, 99) * 1000, 1),
                "max": round(max(v) * 1000, 1),
                "retries": dict(retries[op]),
            }
            for op, v in sorted(by_op.items())
        },
        "conflicts": dict(conflicts),
        "failures": dict(failures),
        "failure_samples": samples,
        "read_ms": {
            "n": len(read_dt),
            "p50": round(_percentile(read_dt, 50) * 1000, 1),
            "p99": round(_percentile(read_dt, 99) * 1000, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--writers", type=int, default=16)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--rtt-ms", type=float, default=2.0, help="S3 round trip added by the proxy")
    p.add_argument("--no-faults", action="store_true")
    p.add_argument("--json", help="write the report here as JSON")
    args = p.parse_args(argv)

    ctx = mp.get_context("spawn")
    base = Path(tempfile.mkdtemp(prefix="mere-soak-"))
    logs_dir = base / "logs"
    logs_dir.mkdir()
    t_start = time.time()
    with PostgresServer() as pg, SeaweedServer() as s3:
        database = "soak"
        catalog = pg.create_database(database)
        bucket = s3.create_bucket("soak")
        proxy = latency_proxy.LatencyProxy("127.0.0.1", s3.port, rtt_ms=args.rtt_ms, handshake=False)
        with proxy:
            options = s3.storage_options(
                f"http://127.0.0.1:{proxy.port}", request_timeout="5", connect_timeout="3"
            )
            setup = Setup(catalog, f"s3://{bucket}/wh", options, str(logs_dir), args.seed)
            soak_ops.create_tables(setup.connect())
            print(
                f"soak: {args.writers} writers, {args.readers} readers, {args.minutes} min, seed {args.seed}"
            )
            writers: dict[str, Any] = {}
            incarnations: Counter[str] = Counter()

            def start_writer(name: str) -> None:
                if setup.deadline and time.time() >= setup.deadline - 1:
                    return
                incarnations[name] += 1
                proc = ctx.Process(target=writer_main, args=(setup, name, incarnations[name]), daemon=True)
                proc.start()
                writers[name] = proc

            for i in range(args.writers):
                start_writer(f"w{i:02d}")
            others = [
                ctx.Process(target=reader_main, args=(setup, f"r{i}"), daemon=True)
                for i in range(args.readers)
            ]
            others.append(ctx.Process(target=maintenance_main, args=(setup, "maintenance"), daemon=True))
            consumer = ctx.Process(target=consumer_main, args=(setup, "consumer"), daemon=True)
            for proc in [*others, consumer]:
                proc.start()
            names = [*writers, *(f"r{i}" for i in range(args.readers)), "maintenance", "consumer"]
            setup.start(names, timeout=600, seconds=args.minutes * 60)
            t_start = time.time()
            faults = None
            if not args.no_faults:
                faults = Faults(args.seed, proxy, pg, database, writers, start_writer, args.minutes, logs_dir)
                faults.thread.start()
            while time.time() < setup.deadline:
                time.sleep(1.0)
                alive = sum(p.is_alive() for p in writers.values())
                sys.stdout.write(f"\r  {setup.deadline - time.time():6.0f} s left, {alive} writers alive ")
                sys.stdout.flush()
            print()
            if faults is not None:
                faults.stop.set()
                faults.thread.join()
            proxy.faults = None
            proxy.rtt_ms = args.rtt_ms
            for proc in [*list(writers.values()), *others]:
                proc.join(timeout=120)
                if proc.is_alive():
                    proc.kill()
            # A last version for the consumer to reach (a property: its feed is empty), then it stops.
            final = (
                setup.connect()
                .table(f"{soak_ops.NAMESPACE}.accounts")
                .set_properties({"soak.finished": "yes"})
            )
            (logs_dir / "stop-consumer").write_text(str(final.version))
            consumer.join(timeout=180)
            elapsed = time.time() - t_start
            # A final cleanup after the writers stopped: nothing older than its age may stay unreferenced.
            cat = setup.connect()
            cleaned_at = time.time()
            for table in soak_ops.TABLE_WEIGHTS:
                cat.table(f"{soak_ops.NAMESPACE}.{table}").cleanup(
                    dt.timedelta(seconds=CLEANUP_AFTER_S), dry_run=False
                )
            logs = read_logs(logs_dir)
            result = {
                "config": vars(args),
                "report": report(logs, args.minutes * 60),
                "faults": dict(faults.counts) if faults else {},
                "writer_incarnations": sum(incarnations.values()),
                "check": check(setup, logs, cleaned_at, s3.filesystem(), f"{bucket}/wh"),
                "wall_seconds": round(elapsed, 1),
            }
    print(json.dumps(result, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    ok = all(v == "ok" for v in result["check"]["verdicts"].values())
    print("soak:", "every invariant holds" if ok else f"INVARIANTS FAILED (the processes' logs: {logs_dir})")
    if ok:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
