"""The soak's short profile (``bench/bench_soak.py``): writers, readers, a consumer and maintenance at once
on a real PostgreSQL catalog and SeaweedFS behind the fault-injecting proxy, with PostgreSQL backends
terminated, one PostgreSQL restart and writers killed; every invariant the checker proves must hold.
The full run (``make soak``, 10 minutes, 16 writers) is reported in the issue's closing note."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_short_soak_holds_every_invariant(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_soak.py"),
            "--minutes",
            "1.5",
            "--writers",
            "5",
            "--readers",
            "2",
            "--seed",
            "11",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    check = result["check"]
    assert check["verdicts"] == {name: "ok" for name in check["verdicts"]}, json.dumps(
        check["problems"], indent=1
    )
    assert proc.returncode == 0
    # The run did what it claims: writes landed, reads were checked, faults were injected.
    assert result["report"]["commits"] > 20
    assert check["reads"] > 5 and check["versions_checked"] > 20
    assert result["faults"].get("pg_restart") == 1
    assert (
        sum(v for k, v in result["faults"].items() if k.startswith(("s3_", "pg_terminate", "kill_writer")))
        > 0
    )
