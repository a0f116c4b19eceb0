"""What a fresh Python process pays before mere does any work: the import a CLI command, a spawned worker
and each Python worker Spark starts for a data source (lookup, write planning, write tasks, commit, read
planning) pay once.

Each run starts a new interpreter that imports one module set and reports the import's wall time measured
inside the process (so the interpreter's own start is not counted) and which costly modules it loaded.
Prints the median per module set.

Usage: python bench/bench_startup.py [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

SETS = {
    "mere": "mere",
    "mere CLI": "mere.cli.app",
    "Spark data-source worker": "pyspark.worker, pyspark.sql.worker.write_into_data_source, mere.integrations.spark",
    "pyspark worker alone": "pyspark.worker, pyspark.sql.worker.write_into_data_source",
}
WATCHED = ("pandas", "pyarrow.dataset", "pyarrow.acero", "sqlglot", "sqlalchemy")

ONE_RUN = """
import json, sys, time
t0 = time.perf_counter()
import {modules}
took = time.perf_counter() - t0
print(json.dumps({{"s": took, "loaded": [m for m in {watched!r} if m in sys.modules]}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    for label, modules in SETS.items():
        code = ONE_RUN.format(modules=modules, watched=WATCHED)
        times, loaded = [], []
        for _ in range(args.runs):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            times.append(row["s"])
            loaded = row["loaded"]
        print(
            f"{label:<26} median {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}, {args.runs} runs); loads {', '.join(loaded) or 'none of those watched'}"
        )


if __name__ == "__main__":
    main()
