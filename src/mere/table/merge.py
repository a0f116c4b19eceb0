"""Compatibility: MERGE INTO moved to :mod:`mere.table.ops.merge_into` (integrations import these names
from here)."""

from mere.table.commit import StagedChange
from mere.table.ops.merge_into import (
    Clause,
    Merge,
    MergeBuilder,
    MergeClause,
    MergeExplain,
    MergeMetrics,
    MergePlan,
    MergeSpec,
)

StagedMerge = StagedChange

__all__ = [
    "Clause",
    "Merge",
    "MergeBuilder",
    "MergeClause",
    "MergeExplain",
    "MergeMetrics",
    "MergePlan",
    "MergeSpec",
    "StagedMerge",
]
