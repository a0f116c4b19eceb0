"""The change feed as a Spark stream: :mod:`mere.integrations.spark.stream`, under the name it had before
the Spark integration became a package."""

from mere.integrations.spark.stream import (
    CHANGE_COLUMNS,
    SNAPSHOT,
    ChangePartition,
    ChangeRange,
    MereStreamReader,
    SnapshotPartition,
    StreamOptions,
    stream_schema,
    wants_change_feed,
)

__all__ = [
    "CHANGE_COLUMNS",
    "SNAPSHOT",
    "ChangePartition",
    "ChangeRange",
    "MereStreamReader",
    "SnapshotPartition",
    "StreamOptions",
    "stream_schema",
    "wants_change_feed",
]
