"""MERGE benchmark: mere's MERGE (Arrow, written as deltas) vs delta-rs and DuckDB, ratios measured in one run.

Targets are the base tables of the core issue's workloads (bench_core.py's generator): W1 = 1,000,000
rows, W2 = 10,000,000, written once (mere: 4 buckets, as in bench_core; delta-rs:
``write_deltalake``; DuckDB: a native table in a file database). The source is 10% of the base rows,
half of them existing keys and half new ones, in random order, with an ``op`` column (~10% 'D'):

  MERGE INTO t USING s ON t.id = s.id
    WHEN MATCHED AND s.op = 'D' THEN DELETE
    WHEN MATCHED AND s.i0 > t.i0 THEN UPDATE SET i1 = t.i1 + s.i1, f0 = t.f0 + s.f0, s0 = s.s0
    WHEN NOT MATCHED THEN INSERT *            (every target column; ``op`` is not a target column)

Every repeat runs on a fresh copy of the target (copied before timing). Reported per engine: the median
time of the MERGE call, bytes read (mere: its storage counters; delta-rs: the bytes of the files its
metrics say it scanned; all three: the process's ``rchar`` from /proc/self/io, bytes returned by read
syscalls, page cache included), files written, bytes on disk after (the whole table directory or
database file), and whether the three results hold the same rows (floats compared with a tolerance).

Floors, printed as measured ratios:
  1. delta-rs time / mere time > 1 at W1 and >= 5 at W2
  2. a MERGE whose source keys fall in 1% of the key range reads <= 5% of the table's bytes
     (mere's bytes read during ``execute()`` over the bytes of every data file of the table)
  3. the merged read (``t.to_arrow()``) after 10 MERGEs of 10% sources <= 1.2x the read after 10 plain
     upserts of the same sources into a table of the same base

delta-rs runs with ``streamed_exec=False``: the source is in memory, and this lets it prune target
files with the source's key range (its default streams the source and reads every target file).

Usage: python bench/bench_merge.py [--quick] [--w2] [--repeat 3] [--scale 1.0]
  --quick: W1 only, fewer repeats; --w2: W1 and W2 (the default when --quick is not given).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

import mere

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_core import make_rows, timed  # noqa: E402

DELETE_IF = "s.op = 'D'"
UPDATE_IF = "s.i0 > t.i0"
UPDATE_SET = {"i1": "t.i1 + s.i1", "f0": "t.f0 + s.f0", "s0": "s.s0"}
FLOAT_TOL = 1e-9


# -- data -------------------------------------------------------------------------------------------


def with_op(rng: np.random.Generator, rows: pa.Table) -> pa.Table:
    ops = np.where(rng.random(rows.num_rows) < 0.1, "D", "U")
    return rows.append_column("op", pa.array(ops, pa.string()))


def merge_source(rng: np.random.Generator, existing: int, next_id: int, n: int) -> pa.Table:
    """``n`` rows: half keys drawn from [0, existing), half new keys from ``next_id`` on, shuffled."""
    old = rng.choice(existing, size=n // 2, replace=False)
    new = np.arange(next_id, next_id + n - len(old))
    return with_op(rng, make_rows(rng, rng.permutation(np.concatenate([old, new])).astype(np.int64)))


def narrow_source(rng: np.random.Generator, base: int, fraction: float) -> pa.Table:
    """Existing keys from a window of ``fraction`` of the key range (half of the window's keys)."""
    width = max(2, int(base * fraction))
    lo = int(rng.integers(0, base - width))
    ids = lo + rng.choice(width, size=width // 2, replace=False)
    return with_op(rng, make_rows(rng, ids.astype(np.int64)))


def dir_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def dir_files(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs}


def rchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def canonical(table: pa.Table, columns: list[str]) -> pa.Table:
    """The rows sorted by id, with plain Arrow types (engines differ in string/view types)."""
    out = {}
    for c in columns:
        col = table.column(c)
        if (
            pa.types.is_string(col.type)
            or pa.types.is_large_string(col.type)
            or pa.types.is_string_view(col.type)
        ):
            col = col.cast(pa.string())
        out[c] = col.combine_chunks()
    t = pa.table(out)
    return t.take(pc.sort_indices(t, [("id", "ascending")]))


def same_rows(a: pa.Table, b: pa.Table) -> str:
    """'' when ``a`` and ``b`` (canonical) hold the same rows, else what differs."""
    if a.num_rows != b.num_rows:
        return f"{a.num_rows} vs {b.num_rows} rows"
    for c in a.column_names:
        x, y = a.column(c), b.column(c)
        if pa.types.is_floating(x.type):
            xa, ya = x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False)
            bad = ~np.isclose(xa, ya, rtol=FLOAT_TOL, atol=FLOAT_TOL, equal_nan=True)
        else:
            bad = ~np.asarray(pc.fill_null(pc.equal(x, y), False).to_numpy(zero_copy_only=False), dtype=bool)
            bad &= ~np.asarray(
                pc.and_(pc.is_null(x), pc.is_null(y)).to_numpy(zero_copy_only=False), dtype=bool
            )
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return (
                f"column {c}: {int(bad.sum())} rows differ, first at id {a.column('id')[i].as_py()}: "
                f"{x[i].as_py()!r} vs {y[i].as_py()!r}"
            )
    return ""


# -- engines ----------------------------------------------------------------------------------------


class MereEngine:
    name = "mere"

    def __init__(self, tmp: str, base: pa.Table, buckets: int = 4) -> None:
        self.template = os.path.join(tmp, "mere-template")
        cat = mere.connect(self.template)
        t = cat.create_table("bench.t", base.schema, primary_key=["id"], buckets=buckets)
        t.upsert(base)
        self.buckets = buckets

    def copy(self, dest: str) -> str:
        shutil.copytree(self.template, dest)
        return dest

    def merge(self, path: str, source: pa.Table) -> dict[str, Any]:
        t = mere.connect(path).table("bench.t")
        m = (
            t.merge(source)
            .when_matched_delete(condition=DELETE_IF)
            .when_matched_update(set=UPDATE_SET, condition=UPDATE_IF)
            .when_not_matched_insert_all()
        )
        t.storage.stats.reset()
        t.storage._footers.clear()
        r0 = rchar()
        t0 = time.perf_counter()
        metrics = m.execute()
        seconds = time.perf_counter() - t0
        return {
            "seconds": seconds,
            "bytes_read": t.storage.stats.bytes_read,
            "rchar": rchar() - r0,
            "files_written": metrics.files,
            "counts": {
                "inserted": metrics.inserted,
                "updated": metrics.updated,
                "deleted": metrics.deleted,
                "unchanged": metrics.unchanged,
                "rows_read": metrics.rows_read,
                "splits_read": metrics.splits_read,
            },
            "explain": str(m.explain()),
        }

    def read(self, path: str) -> pa.Table:
        return mere.connect(path).table("bench.t").to_arrow()


class DeltaEngine:
    name = "delta-rs"

    def __init__(self, tmp: str, base: pa.Table) -> None:
        self.template = os.path.join(tmp, "delta-template")
        write_deltalake(self.template, base)

    def copy(self, dest: str) -> str:
        shutil.copytree(self.template, dest)
        return dest

    def merge(self, path: str, source: pa.Table) -> dict[str, Any]:
        before = dir_files(path)
        sizes = {f: os.path.getsize(os.path.join(path, f)) for f in before if f.endswith(".parquet")}
        r0 = rchar()
        t0 = time.perf_counter()
        metrics = (
            DeltaTable(path)
            .merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t", streamed_exec=False)
            .when_matched_delete(predicate=DELETE_IF)
            .when_matched_update(updates=UPDATE_SET, predicate=UPDATE_IF)
            .when_not_matched_insert_all(except_cols=["op"])
            .execute()
        )
        seconds = time.perf_counter() - t0
        read = rchar() - r0
        added = dir_files(path) - before
        # It rewrites (removes) every target file it scans: their sizes are the bytes it read.
        removed = _removed_paths(path)
        scanned_bytes = sum(s for f, s in sizes.items() if f in removed)
        return {
            "seconds": seconds,
            "bytes_read": scanned_bytes,
            "rchar": read,
            "files_written": len([f for f in added if f.endswith(".parquet")]),
            "log_files_written": len([f for f in added if not f.endswith(".parquet")]),
            "counts": {
                "inserted": metrics.get("num_target_rows_inserted"),
                "updated": metrics.get("num_target_rows_updated"),
                "deleted": metrics.get("num_target_rows_deleted"),
                "copied": metrics.get("num_target_rows_copied"),
                "files_scanned": metrics.get("num_target_files_scanned"),
                "files_removed": len(removed),
                "files_skipped": metrics.get("num_target_files_skipped_during_scan"),
            },
        }

    def read(self, path: str) -> pa.Table:
        return DeltaTable(path).to_pyarrow_table()


def _removed_paths(path: str) -> set[str]:
    """The files the newest commit removed (the ones the MERGE rewrote), relative to the table."""
    from urllib.parse import unquote

    log = os.path.join(path, "_delta_log", f"{DeltaTable(path).version():020d}.json")
    out = set()
    with open(log) as f:
        for line in f:
            action = json.loads(line)
            if "remove" in action:
                out.add(unquote(action["remove"]["path"]))
    return out


class DuckEngine:
    name = "duckdb"

    def __init__(self, tmp: str, base: pa.Table) -> None:
        self.template = os.path.join(tmp, "duck-template.db")
        con = duckdb.connect(self.template)
        con.register("base_rows", base)
        con.execute("CREATE TABLE t AS SELECT * FROM base_rows")
        con.execute("CHECKPOINT")
        con.close()
        self.columns = base.column_names

    def copy(self, dest: str) -> str:
        dest += ".db"
        shutil.copyfile(self.template, dest)
        return dest

    def merge(self, path: str, source: pa.Table) -> dict[str, Any]:
        con = duckdb.connect(path)
        con.register("s", source)
        sets = ", ".join(f"{c} = {v}" for c, v in UPDATE_SET.items())
        cols = ", ".join(self.columns)
        vals = ", ".join(f"s.{c}" for c in self.columns)
        sql = (
            f"MERGE INTO t USING s ON t.id = s.id "
            f"WHEN MATCHED AND {DELETE_IF} THEN DELETE "
            f"WHEN MATCHED AND {UPDATE_IF} THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({vals})"
        )
        r0 = rchar()
        t0 = time.perf_counter()
        con.execute(sql)
        seconds = time.perf_counter() - t0
        read = rchar() - r0
        con.execute("CHECKPOINT")
        con.close()
        return {"seconds": seconds, "bytes_read": None, "rchar": read, "files_written": None, "sql": sql}

    def read(self, path: str) -> pa.Table:
        con = duckdb.connect(path, read_only=True)
        try:
            return con.sql("SELECT * FROM t").to_arrow_table()
        finally:
            con.close()


# -- workloads --------------------------------------------------------------------------------------


def same_merge_in_duckdb(duck: DuckEngine, path: str, sources: list[pa.Table]) -> pa.Table:
    for s in sources:
        duck.merge(path, s)
    return duck.read(path)


def workload(label: str, scale: float, repeat: int, read_repeat: int, tmp: str) -> dict[str, Any]:
    rng = np.random.default_rng(42)
    n_base = int(1_000_000 * scale)
    base = make_rows(rng, rng.permutation(n_base).astype(np.int64))
    columns = base.column_names
    source = merge_source(rng, n_base, n_base, n_base // 10)
    work = os.path.join(tmp, label)
    os.makedirs(work)

    setup: dict[str, float] = {}
    engines: list[Any] = []
    for make in (MereEngine, DeltaEngine, DuckEngine):
        t0 = time.perf_counter()
        engines.append(make(work, base))
        setup[engines[-1].name] = time.perf_counter() - t0
    mere_engine, _delta_engine, duck_engine = engines
    base_bytes = {e.name: dir_bytes(e.template) for e in engines}
    del base

    # The same MERGE on fresh copies, engines alternated so that machine noise hits them alike.
    runs: dict[str, list[dict[str, Any]]] = {e.name: [] for e in engines}
    results: dict[str, pa.Table] = {}
    disk_after: dict[str, int] = {}
    for r in range(repeat):
        for e in engines:
            path = e.copy(os.path.join(work, f"{e.name}-run{r}"))
            runs[e.name].append(e.merge(path, source))
            if r == 0:
                disk_after[e.name] = dir_bytes(path)
                results[e.name] = canonical(e.read(path), columns)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        print(
            f"  {label} repeat {r + 1}/{repeat}: "
            + ", ".join(f"{k} {v[-1]['seconds']:.2f}s" for k, v in runs.items()),
            flush=True,
        )
    equal = {name: same_rows(results["mere"], tbl) for name, tbl in results.items() if name != "mere"}
    rows_after = {name: tbl.num_rows for name, tbl in results.items()}
    del results

    engines_out: dict[str, Any] = {}
    for e in engines:
        first = runs[e.name][0]
        engines_out[e.name] = {
            "median_s": statistics.median(x["seconds"] for x in runs[e.name]),
            "runs_s": [x["seconds"] for x in runs[e.name]],
            "setup_s": setup[e.name],
            "bytes_read": first["bytes_read"],
            "rchar": first["rchar"],
            "files_written": first["files_written"],
            "base_bytes_on_disk": base_bytes[e.name],
            "bytes_on_disk_after": disk_after[e.name],
            "rows_after": rows_after[e.name],
            "differs_from_mere": equal.get(e.name, ""),
            "counts": first.get("counts"),
        }
    explain = runs["mere"][0]["explain"]

    # Floor 2: a source whose keys fall in 1% of the key range.
    path = mere_engine.copy(os.path.join(work, "mere-narrow"))
    t = mere.connect(path).table("bench.t")
    data_bytes = sum(t.files().column("size_bytes").to_pylist())
    narrow = narrow_source(rng, n_base, 0.01)
    lo, hi = pc.min_max(narrow.column("id")).values()
    scan_explain = t.scan(filter=f"id >= {lo.as_py()} AND id <= {hi.as_py()}").explain()
    nr = mere_engine.merge(path, narrow)
    narrow_rows = canonical(mere_engine.read(path), columns)
    shutil.rmtree(path)
    dpath = duck_engine.copy(os.path.join(work, "duck-narrow"))
    duck_engine.merge(dpath, narrow)
    narrow_equal = same_rows(narrow_rows, canonical(duck_engine.read(dpath), columns))
    os.remove(dpath)
    del narrow_rows
    narrow_out = {
        "source_rows": narrow.num_rows,
        "key_window": [lo.as_py(), hi.as_py()],
        "seconds": nr["seconds"],
        "bytes_read": nr["bytes_read"],
        "rchar": nr["rchar"],
        "table_data_bytes": data_bytes,
        "fraction_of_table_bytes": nr["bytes_read"] / data_bytes,
        "rows_read_fraction": nr["counts"]["rows_read"] / n_base,
        "counts": nr["counts"],
        "range_scan_explain_bytes": [scan_explain.bytes_kept, scan_explain.bytes_total],
        "range_scan_explain_row_groups": [scan_explain.row_groups_kept, scan_explain.row_groups_total],
        "differs_from_duckdb": narrow_equal,
    }
    print(f"  {label} narrow MERGE: {nr['bytes_read']} of {data_bytes} bytes", flush=True)

    # Floor 3: read after 10 MERGEs vs after 10 plain upserts of the same sources (same base).
    merged = mere.connect(mere_engine.copy(os.path.join(work, "mere-10merges"))).table("bench.t")
    upserted = mere.connect(mere_engine.copy(os.path.join(work, "mere-10upserts"))).table("bench.t")
    sources = []
    next_id = 2 * n_base
    merge_s, upsert_s = [], []
    for _ in range(10):
        src = merge_source(rng, next_id, next_id, n_base // 10)
        next_id += n_base // 10 - n_base // 20
        sources.append(src)
        m = (
            merged.merge(src)
            .when_matched_delete(condition=DELETE_IF)
            .when_matched_update(set=UPDATE_SET, condition=UPDATE_IF)
            .when_not_matched_insert_all()
        )
        merge_s.append(timed(m.execute))
        plain = src.drop_columns(["op"])
        t0 = time.perf_counter()
        upserted.upsert(plain)
        upsert_s.append(time.perf_counter() - t0)
    m_scan, u_scan = merged.scan(), upserted.scan()
    m_read, u_read = [], []
    m_scan.to_arrow(), u_scan.to_arrow()  # warm-up (footers, allocator)
    for _ in range(read_repeat):
        u_read.append(timed(u_scan.to_arrow))
        m_read.append(timed(m_scan.to_arrow))
    dpath = duck_engine.copy(os.path.join(work, "duck-10merges"))
    ten_equal = same_rows(
        canonical(m_scan.to_arrow(), columns),
        canonical(same_merge_in_duckdb(duck_engine, dpath, sources), columns),
    )
    reads_out = {
        "merge_median_s": statistics.median(merge_s),
        "upsert_median_s": statistics.median(upsert_s),
        "merged_files": merged.files().num_rows,
        "upserted_files": upserted.files().num_rows,
        "merged_rows": m_scan.count(),
        "upserted_rows": u_scan.count(),
        "read_after_merges_median_s": statistics.median(m_read),
        "read_after_upserts_median_s": statistics.median(u_read),
        "ratio": statistics.median(m_read) / statistics.median(u_read),
        "differs_from_duckdb": ten_equal,
    }
    shutil.rmtree(work, ignore_errors=True)
    return {
        "base_rows": n_base,
        "source_rows": source.num_rows,
        "engines": engines_out,
        "mere_explain": explain,
        "narrow": narrow_out,
        "reads_after_10": reads_out,
    }


# -- report -----------------------------------------------------------------------------------------


def mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 1e6:.1f} MB"


def print_report(results: dict[str, Any]) -> dict[str, Any]:
    header = f"{'workload':8} {'engine':9} {'median s':>9} {'runs':>5} {'bytes read':>11} {'rchar':>11} {'files':>6} {'disk after':>11} {'rows after':>11}  same rows"
    print("\n" + header)
    print("-" * len(header))
    for label, w in results.items():
        for name, e in w["engines"].items():
            same = (
                "(reference)"
                if name == "mere"
                else ("yes" if not e["differs_from_mere"] else "NO: " + e["differs_from_mere"])
            )
            files = "n/a" if e["files_written"] is None else str(e["files_written"])
            print(
                f"{label:8} {name:9} {e['median_s']:9.3f} {len(e['runs_s']):5d} {mb(e['bytes_read']):>11} "
                f"{mb(e['rchar']):>11} {files:>6} {mb(e['bytes_on_disk_after']):>11} {e['rows_after']:11d}  {same}"
            )
    print(
        "\nbytes read: mere = its storage counters; delta-rs = sizes of the target files it scanned (and "
        "rewrote);\nrchar = bytes returned by read syscalls of the process during the MERGE (page cache "
        "included). files: data files\nwritten (delta-rs also writes 1 log file; DuckDB writes into its "
        "one database file)."
    )
    for label, w in results.items():
        print(f"\n{label} mere MERGE counts: {w['engines']['mere']['counts']}")
        print(f"{label} delta-rs MERGE counts: {w['engines']['delta-rs']['counts']}")
        print(f"{label} mere explain:\n" + "\n".join("  " + line for line in w["mere_explain"].splitlines()))
        n = w["narrow"]
        print(
            f"{label} narrow MERGE ({n['source_rows']} keys in {n['key_window']}): read {n['bytes_read']} of "
            f"{n['table_data_bytes']} data bytes ({n['fraction_of_table_bytes']:.2%}), rchar {n['rchar']}, "
            f"metrics.rows_read {n['counts']['rows_read']} ({n['rows_read_fraction']:.2%} of the base rows), "
            f"{n['seconds']:.3f}s; a range scan of that window keeps {n['range_scan_explain_bytes'][0]}/"
            f"{n['range_scan_explain_bytes'][1]} bytes, {n['range_scan_explain_row_groups'][0]}/"
            f"{n['range_scan_explain_row_groups'][1]} row groups; same as DuckDB: "
            + ("yes" if not n["differs_from_duckdb"] else "NO: " + n["differs_from_duckdb"])
        )
        r = w["reads_after_10"]
        print(
            f"{label} after 10 sources: MERGE median {r['merge_median_s']:.3f}s vs upsert {r['upsert_median_s']:.3f}s; "
            f"files {r['merged_files']} vs {r['upserted_files']}; rows {r['merged_rows']} vs {r['upserted_rows']}; "
            f"to_arrow {r['read_after_merges_median_s']:.3f}s vs {r['read_after_upserts_median_s']:.3f}s; "
            "10-MERGE result same as DuckDB: "
            + ("yes" if not r["differs_from_duckdb"] else "NO: " + r["differs_from_duckdb"])
        )

    floors: dict[str, Any] = {}
    print("\nfloors (measured ratios):")

    def floor(key: str, text: str, value: float, ok: bool) -> None:
        floors[key] = {"value": value, "pass": ok}
        print(f"  {'PASS' if ok else 'FAIL'}  {text}: {value:.3f}")

    for label, w in results.items():
        e = w["engines"]
        speedup = e["delta-rs"]["median_s"] / e["mere"]["median_s"]
        need = 5.0 if label == "W2" else 1.0
        floor(
            f"{label}_delta_over_mere",
            f"{label} delta-rs time / mere time (need {'>= 5' if need == 5 else '> 1'})",
            speedup,
            speedup >= need if need == 5 else speedup > need,
        )
    for label, w in results.items():
        frac = w["narrow"]["fraction_of_table_bytes"]
        floor(
            f"{label}_narrow_bytes_fraction",
            f"{label} 1%-key-range MERGE bytes read / table bytes (need <= 0.05)",
            frac,
            frac <= 0.05,
        )
    for label, w in results.items():
        ratio = w["reads_after_10"]["ratio"]
        floor(
            f"{label}_read_after_merges_ratio",
            f"{label} read after 10 MERGEs / after 10 upserts (need <= 1.2)",
            ratio,
            ratio <= 1.2,
        )
    for label, w in results.items():
        problems = [
            f"{k}: {v['differs_from_mere']}" for k, v in w["engines"].items() if v["differs_from_mere"]
        ]
        problems += (
            [f"narrow: {w['narrow']['differs_from_duckdb']}"] if w["narrow"]["differs_from_duckdb"] else []
        )
        problems += (
            [f"10 merges: {w['reads_after_10']['differs_from_duckdb']}"]
            if w["reads_after_10"]["differs_from_duckdb"]
            else []
        )
        floors[f"{label}_results_equal"] = {"pass": not problems, "problems": problems}
        print(
            f"  {'PASS' if not problems else 'FAIL'}  {label} results equal across engines"
            + (f": {problems}" if problems else "")
        )
    return floors


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="W1 only, fewer repeats")
    ap.add_argument("--w2", action="store_true", help="run W1 and W2 (the default without --quick)")
    ap.add_argument("--repeat", type=int, default=None, help="MERGE repeats at W1 (default 3, --quick 2)")
    ap.add_argument("--scale", type=float, default=1.0, help="scale both workloads (for trying the script)")
    args = ap.parse_args()
    repeat = args.repeat or (2 if args.quick else 3)
    w2 = args.w2 or not args.quick
    tmp = tempfile.mkdtemp(prefix="mere-bench-merge-")
    results: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        print(f"W1: {int(1_000_000 * args.scale)} base rows", flush=True)
        results["W1"] = workload("W1", args.scale, repeat, 3 if args.quick else 5, tmp)
        if w2:
            print(f"W2: {int(10_000_000 * args.scale)} base rows", flush=True)
            results["W2"] = workload("W2", 10 * args.scale, 1, 3, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    floors = print_report(results)
    print(f"\ntotal {time.perf_counter() - started:.0f}s")
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/bench_merge.json", "w") as f:
        json.dump({"results": results, "floors": floors}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
