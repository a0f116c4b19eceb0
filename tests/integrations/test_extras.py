"""Every engine is an optional extra: without it, its adapter says which pip command installs it, and the
core imports none of them."""

from __future__ import annotations

import subprocess
import sys

import pytest

# (adapter module, engine modules to hide, the call that needs the engine, the extra named)
CASES = [
    ("mere.integrations.polars", ["polars"], "m.scan_table(t)", "polars"),
    ("mere.integrations.duckdb", ["duckdb"], "m.register(None, 'x', t)", "duckdb"),
    ("mere.integrations.dask", ["dask", "distributed"], "m.read_table(t)", "dask"),
    ("mere.integrations.ray", ["ray"], None, "ray"),
    ("mere.integrations.torch", ["torch"], None, "torch"),
    ("mere.integrations.spark", ["pyspark"], None, "spark"),
]


@pytest.mark.parametrize(("module", "hidden", "call", "extra"), CASES, ids=[c[3] for c in CASES])
def test_missing_engine_names_its_extra(
    module: str, hidden: list[str], call: str | None, extra: str, tmp_path: object
) -> None:
    code = f"""
import sys
for name in {hidden!r}:
    sys.modules[name] = None  # an import of it now fails as if it were not installed
import pyarrow as pa, mere
from mere.errors import NotInstalled
t = mere.connect({str(tmp_path)!r}).create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
try:
    import {module} as m
    {call or "raise SystemExit('imported without the engine')"}
except NotInstalled as e:
    assert "pip install 'mere[{extra}]'" in str(e), str(e)
    print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr[-2000:]


def test_the_core_imports_no_engine() -> None:
    # pandas is left out: pyarrow.dataset itself imports it when it is installed.
    code = """
import sys, pyarrow as pa, mere, tempfile
t = mere.connect(tempfile.mkdtemp()).create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
t.upsert(pa.table({"id": [1]}))
t.scan().to_arrow(); pa.table(t.scan())
loaded = sorted(m for m in ("polars", "duckdb", "dask", "distributed", "ray", "torch", "pyspark") if m in sys.modules)
print(loaded)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
