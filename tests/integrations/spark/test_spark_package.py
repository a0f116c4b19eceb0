"""The Spark integration as a package: no import circle inside it (imports inside functions count), no
module importing another's private names, every name importable before the split still importable, and
Spark finding the data source by itself in a fresh session."""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mere

SRC = Path(mere.__file__).parent
PACKAGE = "mere.integrations.spark"
PACKAGE_DIR = SRC / "integrations" / "spark"

# Every name mere.integrations.spark and mere.integrations.spark_streaming offered as one module each.
SPARK_NAMES = [
    "CREATE_OPTIONS",
    "ENV_CATALOG",
    "ENV_WAREHOUSE",
    "FLUSH_BYTES",
    "FLUSH_ROWS",
    "LOCATION_OPTIONS",
    "MERGE_ATTEMPTS",
    "MereCommitMessage",
    "MereDataSource",
    "MerePushdownReader",
    "MereReader",
    "MereStreamWriter",
    "MereWriter",
    "OVERWRITE_MODES",
    "OVERWRITE_MODE_CONF",
    "PartitionSizing",
    "READ_OPTIONS",
    "SCAN_SCOPED_READS",
    "SPARK_OPTIONS",
    "SPARK_VERSION",
    "STREAM_QUERY_ID_PROPERTY",
    "STREAM_READ_OPTIONS",
    "SparkMerge",
    "SparkMergeExplain",
    "SplitPartition",
    "TableRef",
    "WORKERS_HINT",
    "WRITE_OPERATIONS",
    "WRITE_OPTIONS",
    "check_options",
    "check_workers",
    "compact",
    "install_partition_hook",
    "local_session",
    "merge",
    "native_type",
    "read_table",
    "register",
    "spark_filter",
    "spark_schema",
    "translate_filter",
]
STREAMING_NAMES = [
    "CHANGE_COLUMNS",
    "ChangePartition",
    "ChangeRange",
    "MereStreamReader",
    "SNAPSHOT",
    "SnapshotPartition",
    "StreamOptions",
    "stream_schema",
    "wants_change_feed",
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in a file, those inside functions included."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((module, [alias.name for alias in node.names]))
    return found


def _package_files() -> list[Path]:
    return sorted(PACKAGE_DIR.glob("*.py"))


def test_no_import_circle_inside_the_spark_package() -> None:
    modules = {_module_name(p) for p in _package_files()}
    graph: dict[str, set[str]] = {}
    for path in _package_files():
        edges = set()
        for module, names in _imports(path):
            if module in modules:
                edges.add(module)
            edges |= {f"{module}.{n}" for n in names if f"{module}.{n}" in modules}
        graph[_module_name(path)] = edges - {_module_name(path)}
    # Only the package's __init__ may import the package itself (a submodule importing it is a circle).
    assert all(PACKAGE not in edges for name, edges in graph.items() if name != PACKAGE), graph
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a circle
    assert order[-1] == PACKAGE and len(order) == len(modules) >= 10


def test_no_module_imports_a_private_name_of_another() -> None:
    files = [*_package_files(), SRC / "integrations" / "spark_streaming.py", SRC / "options.py"]
    files.append(SRC.parent / "pyspark_mere" / "__init__.py")
    found = [
        f"{path.name}: from {module} import {name}"
        for path in files
        for module, names in _imports(path)
        for name in names
        if name.startswith("_") and module != "__future__"
    ]
    assert not found


def test_every_name_of_the_two_modules_is_still_importable() -> None:
    import mere.integrations.spark as spark
    import mere.integrations.spark_streaming as streaming

    assert [n for n in SPARK_NAMES if not hasattr(spark, n)] == []
    assert [n for n in STREAMING_NAMES if not hasattr(streaming, n)] == []
    from mere.integrations.spark import stream

    assert streaming.MereStreamReader is stream.MereStreamReader
    # The public classes and functions keep their documented (and pickled) address.
    assert spark.MereDataSource.__module__ == spark.read_table.__module__ == PACKAGE


PROBE = textwrap.dedent(
    """
    import os, sys, tempfile
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyarrow as pa
    import mere
    from pyspark.sql import SparkSession

    wh = tempfile.mkdtemp()
    t = mere.connect(wh).create_table("a.t", pa.schema([("id", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1, 2, 3]}))
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        # A plain session: nothing of mere registered it; Spark finds pyspark_mere on its own.
        print("ROWS", spark.read.format("mere").option("warehouse", wh).load("a.t").count())
    finally:
        spark.stop()
    """
)


def test_a_fresh_session_finds_the_data_source_without_register(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )
    assert "ROWS 3" in done.stdout, done.stdout + done.stderr[-3000:]
