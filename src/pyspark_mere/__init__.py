"""Spark's data source auto-discovery imports top-level ``pyspark_*`` modules and registers their
``DefaultSource`` under its ``name()``: with mere installed, ``spark.read.format("mere")`` works without
a register call. Everything lives in :mod:`mere.integrations.spark`.
"""

from mere.integrations.spark import MereDataSource as DefaultSource

__all__ = ["DefaultSource"]
