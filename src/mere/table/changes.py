"""Compatibility: the change feed moved to :mod:`mere.table.ops.change_log`, the change log's images to
:mod:`mere.table.images` (integrations import these names from here)."""

from mere.table.images import LOG_SUMMARY_KEY, compare_images, key_filter, logs_changes, written_rows
from mere.table.ops.change_log import (
    CHANGE_COLUMN,
    COMMIT_TIME_COLUMN,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    VERSION_COLUMN,
    Consumer,
    change_feed,
    follow,
)
from mere.table.ops.consumers import check_name as check_consumer_name

__all__ = [
    "CHANGE_COLUMN",
    "COMMIT_TIME_COLUMN",
    "DELETE",
    "INSERT",
    "LOG_SUMMARY_KEY",
    "UPDATE_AFTER",
    "UPDATE_BEFORE",
    "VERSION_COLUMN",
    "Consumer",
    "change_feed",
    "check_consumer_name",
    "compare_images",
    "follow",
    "key_filter",
    "logs_changes",
    "written_rows",
]
