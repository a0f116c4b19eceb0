"""Concurrent writers in separate OS processes racing on one table, over SQLite and PostgreSQL catalogs.

Eight ``spawn`` worker processes (started once for the module) each open their own catalog from the
warehouse path and the catalog URL, line up on a barrier so that the writes really race, and report what
they committed. The tests then check the table against those reports: every commit is in the history
exactly once, versions are contiguous, and every version reads as a serial replay of the commits up to it.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import mere
from backends import BACKENDS
from maintenance import MANUAL
from mere.errors import CommitConflict
from mere.metadata import Snapshot

WORKERS = 8
START_TIMEOUT_S = 120.0  # spawn + import of 8 interpreters on a small, busy CI runner
RUN_TIMEOUT_S = 240.0

pytestmark = pytest.mark.timeout(600)
# Both catalog backends; the PostgreSQL runs carry the ``postgres`` marker (they need the session server).


# -- process harness (module level so that ``spawn`` children can import it) ------------------------------
#
# Starting a ``spawn`` interpreter and importing pyarrow + mere costs about a CPU second, so the module
# starts its 8 worker processes once and hands every test's job to all of them at the same time. Each job
# opens its own catalog from the warehouse path and the catalog URL (and disposes of it afterwards), and the
# workers line up on a barrier before writing so that they really race.


def _worker_loop(worker: int, tasks: Any, results: Any, barrier: Any) -> None:
    while True:
        task = tasks.get()
        if task is None:
            break
        job, warehouse, catalog_url, table_name, payload = task
        status, value = "ok", None
        cat = None
        try:
            try:
                cat = mere.connect(warehouse, catalog=catalog_url)
                table = cat.table(table_name)
                table.version  # noqa: B018 - touch the catalog before the race starts
            except BaseException:
                barrier.abort()  # do not leave the siblings waiting for a worker that will never come
                raise
            barrier.wait(timeout=RUN_TIMEOUT_S)
            value = _JOBS[job](table, worker, payload)
        except BaseException:
            status, value = "error", traceback.format_exc()
        finally:
            if cat is not None:
                cat.sql.engine.dispose()
        results.put((worker, status, value))
    results.close()
    results.join_thread()  # flush the last result to the pipe before leaving
    # Skip interpreter teardown (slow with pyarrow's thread pools); everything worth keeping is reported.
    os._exit(0)


class _Pool:
    """``WORKERS`` spawned processes that run one job at a time, all together."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.stuck = False
        self.barrier = ctx.Barrier(WORKERS)
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(WORKERS)]
        self.procs = [
            ctx.Process(
                target=_worker_loop,
                name=f"mere-conc-{i}",
                args=(i, self.tasks[i], self.results, self.barrier),
                daemon=True,
            )
            for i in range(WORKERS)
        ]
        for p in self.procs:
            p.start()

    def run(
        self, job: str, warehouse: str, catalog_url: str, table_name: str, payloads: list[Any]
    ) -> dict[int, Any]:
        """Run ``job`` in every worker (worker i gets ``payloads[i]``); return each worker's result."""
        assert len(payloads) == WORKERS
        self.barrier.reset()
        for i, payload in enumerate(payloads):
            self.tasks[i].put((job, warehouse, catalog_url, table_name, payload))
        out: dict[int, tuple[str, Any]] = {}
        deadline = time.monotonic() + START_TIMEOUT_S + RUN_TIMEOUT_S
        while len(out) < WORKERS and time.monotonic() < deadline:
            try:
                worker, status, value = self.results.get(timeout=1.0)
            except queue.Empty:
                if all(not p.is_alive() for p in self.procs):
                    break
                continue
            out[worker] = (status, value)
        missing = sorted(set(range(WORKERS)) - set(out))
        self.stuck = bool(missing)  # a late result would be mistaken for the next job's: retire the pool
        errors = {w: v for w, (s, v) in out.items() if s != "ok"}
        problems = [f"worker {w} failed:\n{tb}" for w, tb in sorted(errors.items())]
        if missing:
            problems.append(
                f"worker(s) {missing} reported nothing in time (alive: "
                f"{[p.is_alive() for p in self.procs]}, exit codes: {[p.exitcode for p in self.procs]})"
            )
        assert not problems, "\n".join(problems)
        return {w: v for w, (_, v) in out.items()}

    @property
    def healthy(self) -> bool:
        return not self.stuck and all(p.is_alive() for p in self.procs)

    def close(self) -> None:
        for t in self.tasks:
            t.put(None)
        for p in self.procs:
            p.join(timeout=30)
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        assert [p.exitcode for p in self.procs] == [0] * WORKERS
        for q in (*self.tasks, self.results):
            q.close()
            q.join_thread()


class _Workers:
    """Module fixture: hands out a healthy pool, replacing one whose job timed out or died."""

    def __init__(self) -> None:
        self.pool: _Pool | None = None

    def run(
        self, job: str, warehouse: str, catalog_url: str, table_name: str, payloads: list[Any]
    ) -> dict[int, Any]:
        if self.pool is None or not self.pool.healthy:
            self.kill()
            self.pool = _Pool()
        return self.pool.run(job, warehouse, catalog_url, table_name, payloads)

    def kill(self) -> None:
        if self.pool is not None:
            for p in self.pool.procs:
                if p.is_alive():
                    p.kill()
                p.join(timeout=10)
            self.pool = None


@pytest.fixture(scope="module")
def workers() -> Iterator[_Workers]:
    w = _Workers()
    yield w
    if w.pool is not None and w.pool.healthy:
        w.pool.close()
    else:
        w.kill()


# -- jobs run inside the children -------------------------------------------------------------------------

ROWS_PER_UPSERT = 50
UPSERTS_PER_WORKER = 10


def _disjoint_keys(worker: int, n: int) -> np.ndarray:
    start = (worker * UPSERTS_PER_WORKER + n) * ROWS_PER_UPSERT
    return np.arange(start, start + ROWS_PER_UPSERT, dtype=np.int64)


def _job_disjoint(table: mere.Table, worker: int, payload: Any) -> list[tuple[int, int, str]]:
    """10 upserts of 50 fresh keys each; report (upsert number, committed version, operation)."""
    out = []
    for n in range(UPSERTS_PER_WORKER):
        ids = _disjoint_keys(worker, n)
        rec = table.upsert(
            pa.table(
                {
                    "id": ids,
                    "value": ids * 3 + worker,
                    "worker": pa.array(np.full(len(ids), worker), pa.int32()),
                    "n": pa.array(np.full(len(ids), n), pa.int32()),
                }
            )
        )
        out.append((n, rec.version, rec.operation))
    return out


OVERLAP_KEYS = 200
OVERLAP_ROUNDS = 5


def _overlap_keys(worker: int, rnd: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * worker + rnd)
    keys = np.flatnonzero(rng.random(OVERLAP_KEYS) < 0.5).astype(np.int64)
    return keys if len(keys) else np.array([worker], dtype=np.int64)


def _job_overlap(table: mere.Table, worker: int, payload: Any) -> list[tuple[int, int]]:
    """Several rounds of upserts over (random halves of) one shared keyset; report (marker, version)."""
    out = []
    for rnd in range(OVERLAP_ROUNDS):
        keys = _overlap_keys(worker, rnd)
        marker = worker * 100 + rnd
        rec = table.upsert(
            pa.table(
                {
                    "id": keys,
                    "value": np.full(len(keys), worker, dtype=np.int64),
                    "marker": np.full(len(keys), marker, dtype=np.int64),
                }
            )
        )
        assert rec.operation == "upsert"
        out.append((marker, rec.version))
    return out


PARTITIONS = ("a", "b", "c", "d")


def _job_mixed(table: mere.Table, worker: int, payload: Any) -> list[dict[str, Any]]:
    """Run a list of upserts / overwrites; report per operation its version or the error it raised."""
    out = []
    for op in payload:
        rows = pa.table(
            {
                "part": pa.array([r[0] for r in op["rows"]], pa.string()),
                "id": pa.array([r[1] for r in op["rows"]], pa.int64()),
                "value": pa.array([r[2] for r in op["rows"]], pa.int64()),
                "marker": pa.array([op["marker"]] * len(op["rows"]), pa.int64()),
            }
        )
        try:
            if op["kind"] == "upsert":
                rec = table.upsert(rows)
            elif op["partition"] is None:
                rec = table.overwrite(rows)
            else:
                rec = table.overwrite(rows, partition={"part": op["partition"]})
        except CommitConflict as e:  # a refused commit is fine as long as it is not in the history
            out.append({**op, "version": None, "error": f"{type(e).__name__}: {e}"})
        else:
            out.append({**op, "version": rec.version, "operation": rec.operation, "error": None})
    return out


_JOBS: dict[str, Callable[[mere.Table, int, Any], Any]] = {
    "disjoint": _job_disjoint,
    "overlap": _job_overlap,
    "mixed": _job_mixed,
}


# -- tests ------------------------------------------------------------------------------------------------


def _warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


def _assert_contiguous_history(table: mere.Table, commits: int) -> list[Snapshot]:
    history = table.history()
    assert [h.version for h in history] == list(range(commits + 1))
    assert history[0].operation == "create"
    assert table.version == commits
    return history


def _assert_really_raced(history: list[Snapshot]) -> None:
    """Some commit was rebased over others that landed after it read the table: the writers overlapped."""
    rebased = [h.version for h in history[1:] if h.summary["read_version"] < h.version - 1]
    assert rebased, "no commit overlapped another: the workers did not race"


@BACKENDS
def test_concurrent_disjoint_upserts_all_land(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path, workers: _Workers
) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("value", pa.int64()),
            ("worker", pa.int32()),
            ("n", pa.int32()),
        ]
    )
    table = cat.create_table("conc.disjoint", schema, primary_key=["id"], buckets=4, properties=MANUAL)

    reports = workers.run("disjoint", _warehouse(tmp_path), catalog_url, "conc.disjoint", [None] * WORKERS)

    commits = WORKERS * UPSERTS_PER_WORKER
    by_version: dict[int, tuple[int, int]] = {}
    for worker, done in reports.items():
        assert [n for n, _, _ in done] == list(range(UPSERTS_PER_WORKER))
        for n, version, operation in done:
            assert operation == "upsert"
            assert version not in by_version, f"version {version} reported by two commits"
            by_version[version] = (worker, n)
    assert sorted(by_version) == list(range(1, commits + 1))
    # Each worker's own commits land in the order it made them.
    for done in reports.values():
        versions = [v for _, v, _ in done]
        assert versions == sorted(versions)

    history = _assert_contiguous_history(table, commits)
    assert all(h.operation == "upsert" for h in history[1:])
    assert all(h.summary["rows"] == ROWS_PER_UPSERT for h in history[1:])
    _assert_really_raced(history)
    writer_order = [by_version[v][0] for v in range(1, commits + 1)]
    switches = sum(a != b for a, b in itertools.pairwise(writer_order))
    assert switches > WORKERS - 1, f"the workers' commits did not interleave: {writer_order}"

    # Version by version (from the catalog's file list): each commit added exactly its own 50 rows.
    for v in range(commits + 1):
        files = table.files(version=v).to_pylist()
        assert sum(f["row_count"] for f in files) == ROWS_PER_UPSERT * v
        assert sum(f["row_count"] for f in files if f["added_version"] == v) == (ROWS_PER_UPSERT if v else 0)

    expected_ids = np.arange(commits * ROWS_PER_UPSERT, dtype=np.int64)
    got = table.scan().to_arrow().sort_by("id")
    assert got.num_rows == len(expected_ids)
    assert got.column("id").to_numpy().tolist() == expected_ids.tolist()
    worker_of = expected_ids // (UPSERTS_PER_WORKER * ROWS_PER_UPSERT)
    assert got.column("value").to_numpy().tolist() == (expected_ids * 3 + worker_of).tolist()
    assert got.column("worker").to_numpy().tolist() == worker_of.tolist()
    assert (
        got.column("n").to_numpy().tolist() == (expected_ids // ROWS_PER_UPSERT % UPSERTS_PER_WORKER).tolist()
    )

    # Time travel to a few versions: exactly the keys of the commits up to it.
    for v in (1, commits // 3, commits - 1):
        want = sorted(int(k) for ver, (w, n) in by_version.items() if ver <= v for k in _disjoint_keys(w, n))
        assert sorted(table.scan(columns=["id"], version=v).to_arrow().column("id").to_pylist()) == want


@BACKENDS
def test_concurrent_upserts_of_same_keys_last_commit_wins(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path, workers: _Workers
) -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("value", pa.int64()), ("marker", pa.int64())]
    )
    table = cat.create_table("conc.overlap", schema, primary_key=["id"], buckets=2, properties=MANUAL)

    reports = workers.run("overlap", _warehouse(tmp_path), catalog_url, "conc.overlap", [None] * WORKERS)

    commits = WORKERS * OVERLAP_ROUNDS
    marker_at: dict[int, int] = {}
    for done in reports.values():
        for marker, version in done:
            assert version not in marker_at, f"version {version} reported by two commits"
            marker_at[version] = marker
    assert sorted(marker_at) == list(range(1, commits + 1))
    history = _assert_contiguous_history(table, commits)
    assert all(h.operation == "upsert" for h in history[1:])
    _assert_really_raced(history)

    # Serial replay in commit order; every version must read exactly as the replay up to it.
    state: dict[int, tuple[int, int]] = {}
    for v in range(1, commits + 1):
        marker = marker_at[v]
        worker, rnd = divmod(marker, 100)
        keys = _overlap_keys(worker, rnd)
        assert history[v].summary["rows"] == len(keys)
        for k in keys.tolist():
            state[k] = (worker, marker)
        got = table.scan(version=v).to_arrow().sort_by("id").to_pylist()
        want = [{"id": k, "value": w, "marker": m} for k, (w, m) in sorted(state.items())]
        assert got == want, f"version {v} (marker {marker}) differs from the serial replay"

    # Each key holds the value of the highest committed version that touched it.
    final = table.scan().to_arrow().sort_by("id").to_pylist()
    for row in final:
        last = max(
            v for v, m in marker_at.items() if row["id"] in set(_overlap_keys(*divmod(m, 100)).tolist())
        )
        assert row["marker"] == marker_at[last]
        assert row["value"] == marker_at[last] // 100


def _mixed_plans() -> list[list[dict[str, Any]]]:
    """Per worker: six upserters over shared keys, one partition overwriter, one mixed overwriter."""
    rng = np.random.default_rng(7)
    plans: list[list[dict[str, Any]]] = []

    def rows(parts: list[str], marker: int) -> list[tuple[str, int, int]]:
        out = []
        for part in parts:
            ids = sorted(rng.choice(40, size=int(rng.integers(5, 20)), replace=False).tolist())
            out += [(part, i, marker * 1000 + i) for i in ids]
        return out

    for worker in range(WORKERS - 2):
        plan = []
        for n in range(5):
            marker = worker * 100 + n
            parts = sorted(rng.choice(PARTITIONS, size=int(rng.integers(1, 3)), replace=False).tolist())
            plan.append({"kind": "upsert", "partition": None, "marker": marker, "rows": rows(parts, marker)})
        plans.append(plan)
    overwriter = []
    for n, part in enumerate(["a", "b", "a", "c", "a"]):
        marker = (WORKERS - 2) * 100 + n
        overwriter.append(
            {"kind": "overwrite", "partition": part, "marker": marker, "rows": rows([part], marker)}
        )
    plans.append(overwriter)
    mixed = []
    for n, part in enumerate([None, "b", None, "a"]):
        marker = (WORKERS - 1) * 100 + n
        parts = list(PARTITIONS[:2]) if part is None else [part]
        mixed.append({"kind": "overwrite", "partition": part, "marker": marker, "rows": rows(parts, marker)})
    plans.append(mixed)
    return plans


@BACKENDS
def test_concurrent_overwrite_and_upsert_replay_serially(
    cat: mere.Catalog, catalog_url: str, tmp_path: Path, workers: _Workers
) -> None:
    schema = pa.schema(
        [
            pa.field("part", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            ("value", pa.int64()),
            ("marker", pa.int64()),
        ]
    )
    table = cat.create_table(
        "conc.mixed",
        schema,
        primary_key=["id"],
        partition_by=["part"],
        buckets=2,
        properties=MANUAL,
        key_scope="partition",  # each partition holds its own id 0, 3, ...
    )
    seed = [(p, i, -i) for p in PARTITIONS for i in range(0, 40, 3)]
    table.upsert(
        pa.table(
            {
                "part": [r[0] for r in seed],
                "id": [r[1] for r in seed],
                "value": [r[2] for r in seed],
                "marker": [-1] * len(seed),
            }
        )
    )
    plans = _mixed_plans()

    reports = workers.run("mixed", _warehouse(tmp_path), catalog_url, "conc.mixed", plans)

    ops = [op for done in reports.values() for op in done]
    assert len(ops) == sum(len(p) for p in plans)
    landed = {op["version"]: op for op in ops if op["version"] is not None}
    refused = [op for op in ops if op["version"] is None]
    assert len(landed) == len(ops) - len(refused), "two operations reported the same version"
    assert all(op["kind"] == "overwrite" for op in refused), f"an upsert was refused: {refused}"
    commits = 1 + len(landed)
    assert sorted(landed) == list(range(2, commits + 1))
    history = _assert_contiguous_history(table, commits)
    for v, op in landed.items():
        assert history[v].operation == op["kind"] == op["operation"]
    _assert_really_raced(history)

    # Serial replay in commit order, checked against time travel at every version.
    state: dict[tuple[str, int], tuple[int, int]] = {(p, i): (val, -1) for p, i, val in seed}
    seen_markers: set[int] = {-1}
    for v in range(2, commits + 1):
        op = landed[v]
        if op["kind"] == "overwrite":
            state = {
                k: s for k, s in state.items() if op["partition"] is not None and k[0] != op["partition"]
            }
        for part, i, val in op["rows"]:
            state[(part, i)] = (val, op["marker"])
        seen_markers.add(op["marker"])
        got = (
            table.scan(version=v).to_arrow().sort_by([("part", "ascending"), ("id", "ascending")]).to_pylist()
        )
        want = [{"part": p, "id": i, "value": val, "marker": m} for (p, i), (val, m) in sorted(state.items())]
        assert got == want, (
            f"version {v} ({op['kind']} {op['partition']} marker {op['marker']}) differs from replay"
        )

    final = table.scan().to_arrow()
    assert set(final.column("marker").to_pylist()) <= seen_markers
    assert not {op["marker"] for op in refused} & set(final.column("marker").to_pylist())
