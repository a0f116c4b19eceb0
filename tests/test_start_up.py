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
