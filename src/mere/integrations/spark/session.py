"""Sessions: a local one for jobs and tests, and registering the data source.

Also checking that Spark's Python workers can import mere.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mere.errors import NotInstalled
from mere.integrations.spark.datasource import MereDataSource
from mere.integrations.spark.ddl import install_ddl_hook
from mere.integrations.spark.sink import install_partition_hook


def local_session(
    app_name: str, driver_memory: str = "1g", shuffle_partitions: int = 2, warehouse_dir: str | None = None
) -> Any:
    """A local[2] SparkSession for jobs, tests and benchmarks on one machine (UTC, quiet, no UI).

    Spark's Python workers run this interpreter (``PYSPARK_PYTHON``, unless set), and ``.partitionBy`` of a
    mere write is installed (see :func:`install_partition_hook`).

    Args:
        app_name: The Spark application's name.
        driver_memory: ``spark.driver.memory``.
        shuffle_partitions: ``spark.sql.shuffle.partitions``.
        warehouse_dir: ``spark.sql.warehouse.dir``, where Spark keeps its own (non-mere) tables; None:
            Spark's default, ``spark-warehouse`` in the working directory.

    Returns:
        The session (an existing one, if this process has one).

    Raises nothing of mere's own: a session Spark cannot start fails as PySpark raises it.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if warehouse_dir is not None:
        builder = builder.config("spark.sql.warehouse.dir", warehouse_dir)
    session = (
        builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    install_partition_hook()
    install_ddl_hook()
    return session


def register(spark: Any, *, check: bool = True) -> None:
    """Register the data source explicitly (auto-discovery through ``pyspark_mere`` usually does it).

    Args:
        spark: The SparkSession.
        check: First make sure Spark's Python workers can import mere (:func:`check_workers`: one tiny task
            per session), so that a worker interpreter without mere is one clear
            :class:`~mere.errors.NotInstalled` here, not a Java stack trace at the first query.

    Raises:
        NotInstalled: With ``check``, Spark's Python workers cannot import mere (or pyarrow).
    """
    if check:
        check_workers(spark)
    spark.dataSource.register(MereDataSource)
    install_partition_hook()
    install_ddl_hook()
    _registered_sessions.add(spark.sparkContext.applicationId)


WORKERS_HINT = (
    "Spark's Python workers must run an interpreter where mere is installed: set PYSPARK_PYTHON (and "
    "PYSPARK_DRIVER_PYTHON) to it before the session starts, e.g. PYSPARK_PYTHON=$(which python) in the "
    "activated virtual environment, or the spark.pyspark.python setting."
)
_checked_sessions: set[str] = set()
_registered_sessions: set[str] = set()


def check_workers(spark: Any) -> None:
    """Fail with one clear sentence if Spark's Python workers cannot import mere (or pyarrow).

    Runs one tiny Spark task per session (remembered), whose function travels by value so that it runs even
    where mere is missing. Called by :func:`register` and :func:`read_table`.

    Args:
        spark: The SparkSession.

    Raises:
        NotInstalled: A Python worker could not start, or its interpreter cannot import mere or pyarrow (the
            message says how to point Spark at the right interpreter).
    """
    app = spark.sparkContext.applicationId
    if app in _checked_sessions:
        return

    def probe(_: Any) -> str | None:  # nested: cloudpickle sends it by value, not as a reference to mere
        import sys as worker_sys

        try:
            import pyarrow  # noqa: F401

            import mere as worker_mere  # noqa: F401
        except ImportError as e:
            return f"{worker_sys.executable} ({e})"
        return None

    try:
        problem = spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    except Exception as e:  # the worker could not even start (wrong or missing interpreter)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise NotInstalled(f"Spark could not run a Python worker ({first[:300]}). {WORKERS_HINT}") from None
    if problem is not None:
        raise NotInstalled(f"Spark's Python workers run {problem}, which cannot import mere. {WORKERS_HINT}")
    _checked_sessions.add(app)


def is_registered(spark: Any) -> bool:
    """Whether :func:`register` ran for this session (in this process)."""
    return spark.sparkContext.applicationId in _registered_sessions
