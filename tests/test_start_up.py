"""What a fresh process pays to import mere: every CLI command and every Python worker Spark starts for a
data source (lookup, write planning, tasks, commit) imports it once."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Modules that cost a second or so of start-up and that nothing needs at import: pandas (pyarrow imports it
# on its first conversion of Python values) and pyarrow's dataset and acero layers (they import pandas).
DEFERRED = ("pandas", "pyarrow.dataset", "pyarrow.acero")


@pytest.mark.parametrize("module", ["mere", "mere.cli.app", "mere.integrations.spark"])
def test_importing_mere_loads_no_deferred_module(module: str) -> None:
    if module == "mere.integrations.spark":
        pytest.importorskip("pyspark")
    probe = f"import sys, {module}; print(sorted(m for m in {DEFERRED!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {module} loaded {out.stdout.strip()}"


def test_the_deferred_paths_still_work_after_a_bare_import() -> None:
    """The change kinds of a change feed and a projected filter are made on first use, in a fresh process."""
    probe = """
import sys, tempfile, pyarrow as pa, mere
wh = tempfile.mkdtemp()
t = mere.connect(wh).create_table("db.t", pa.schema([("k", pa.int64()), ("v", pa.string())]), primary_key=["k"])
t.upsert(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}))
t.delete(mere.col("k") == 2)
kinds = [sorted(t.changes(v).read_all().column("_change").to_pylist()) for v in (0, 1)]
rows = t.scan(filter=mere.col("v") != "a").to_arrow().sort_by("k").column("k").to_pylist()
print(kinds, rows)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[['insert', 'insert'], ['delete']] [3]"


def test_a_fresh_process_counts_a_table_without_loading_pandas(tmp_path) -> None:
    """count() reads keys and operations as NumPy values straight from Arrow's buffers: Arrow's own
    conversions import pandas first, a few hundred milliseconds a CLI call or a worker's count never uses.
    Integer, string and date keys, over files that overlap, with and without delete markers."""
    wh = str(tmp_path)
    setup = f"""
import datetime as dt, pyarrow as pa, mere
cat = mere.connect({wh!r})
keys = {{"i": (pa.int64(), list(range(100))), "s": (pa.string(), [f"k{{i:03}}" for i in range(100)]),
        "d": (pa.date32(), [dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(100)])}}
rows = []
for name, (kind, values) in keys.items():
    t = cat.create_table("db." + name, pa.schema([("k", kind), ("v", pa.int64())]), primary_key=["k"], buckets=2)
    for part in (values, values[50:], values[90:]):
        t.upsert(pa.table({{"k": pa.array(part, kind), "v": list(range(len(part)))}}))
    if name != "d":
        t.delete(mere.col("k") == values[3])
    rows.append(t.scan().to_arrow().num_rows)
print(rows)
"""
    made = subprocess.run([sys.executable, "-c", setup], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]
    probe = f"""
import sys, mere
cat = mere.connect({wh!r})
print([cat.table("db." + name).scan().count() for name in "isd"], sorted(m for m in {DEFERRED!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == f"{made.stdout.strip()} []"
    assert made.stdout.strip() == "[99, 99, 100]"
