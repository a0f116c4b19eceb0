"""The PySpark this package needs (>= 4.1, for the Python Data Source API), checked once at import.

The package imports this module first, so that without PySpark every import of the package is one
:class:`~mere.errors.NotInstalled` naming the extra to install.
"""

from __future__ import annotations

from mere.errors import NotInstalled

INSTALL_HINT = "pip install 'mere[spark]' (PySpark >= 4.1 and a Java 17+ runtime)"

try:
    import pyspark
    import pyspark.sql.datasource  # the modules the package takes names from
    import pyspark.sql.pandas.types
    import pyspark.sql.types
except ImportError as _e:  # pragma: no cover - exercised only without pyspark
    raise NotInstalled(f"mere's Spark integration needs PySpark >= 4.1: {INSTALL_HINT}") from _e


def version_tuple(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version such as ``4.1.0.dev1``."""
    parts = [*text.split("."), "0", "0"][:2]
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


SPARK_VERSION = version_tuple(pyspark.__version__)
if SPARK_VERSION < (4, 1):  # pragma: no cover
    raise NotInstalled(
        f"mere's Spark integration needs PySpark >= 4.1, found {pyspark.__version__}: {INSTALL_HINT}"
    )

SCAN_SCOPED_READS = SPARK_VERSION >= (5, 0)
"""Whether Spark plans a Python data source read per scan (so pushed filters cannot leak into other queries)."""
