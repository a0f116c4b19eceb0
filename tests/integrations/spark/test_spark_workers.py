"""Spark's Python workers running an interpreter without mere: one clear sentence, not a Java stack trace.

The common mistake (``PYSPARK_PYTHON`` unset or pointing outside the virtual environment) is reproduced
with a bare virtual environment (no pip, no pyarrow, no mere) as the workers' interpreter, in a separate
process because a process holds one SparkContext.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.argv[1]
    import mere
    from mere.integrations import spark as ms
    session = ms.local_session("mere-workers-test")
    try:
        for call in (lambda: ms.register(session), lambda: ms.read_table(session, "a.t", warehouse=sys.argv[2])):
            try:
                call()
            except mere.errors.NotInstalled as e:
                print("ERROR:", e)
            else:
                print("NO ERROR")
    finally:
        session.stop()
    """
)


def test_workers_without_mere_get_one_clear_sentence(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(python), str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ERROR:", "NO ERROR"))]
    assert len(lines) == 2, done.stdout + done.stderr
    for line in lines:
        assert line.startswith("ERROR:") and str(python) in line and "PYSPARK_PYTHON" in line, line
        assert "cannot import mere" in line and "\n" not in line
    assert "Py4JJavaError" not in done.stdout
