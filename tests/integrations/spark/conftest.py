"""One local[2] SparkSession for every Spark test (1g driver memory), stopped at the end of the session."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")

from pyspark.sql import SparkSession  # noqa: E402

from mere.integrations.spark import local_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("the Spark tests need a Java 17+ runtime: apt-get install -y openjdk-17-jre-headless")
    # Workers must run this interpreter (the project venv), not whatever `python3` is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's own tables live under a directory of this test process's: under xdist, one per worker (a
    # test that watches that directory must not see another worker's tables come and go).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    session = local_session("mere-tests", warehouse_dir=os.path.abspath(f"spark-warehouse/{worker}"))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def wh(tmp_path: Path) -> str:
    """A fresh local warehouse (SQLite catalog inside)."""
    return str(tmp_path / "warehouse")


@pytest.fixture
def clean(spark: SparkSession) -> Iterator[None]:
    """Drops the Spark tables and views a test made, and the overwrite mode it set (the session is shared)."""
    yield
    for t in spark.catalog.listTables():
        if t.isTemporary:
            spark.catalog.dropTempView(t.name)
        else:
            spark.sql(f"DROP TABLE IF EXISTS `{t.name}`")
    spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
