"""What the engine adapters share to push an engine's filter into mere's pruning."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from mere import expr as E
    from mere.table.scan import Scan


def prunable_kind(t: pa.DataType) -> type | None:
    """The Python type of the literals an engine filter on a key or partition column of type ``t`` is
    translated with (integers, strings, dates), or None: columns of other types are left to the engine.
    """
    if pa.types.is_integer(t):
        return int
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str
    if pa.types.is_date32(t):
        return dt.date
    return None


def narrowed(
    scan: Scan, pushed: E.Expr | None, columns: Sequence[str] | None, filter_columns: Sequence[str]
) -> Scan:
    """``scan`` with an engine's prunable filter part ANDed in and its projection applied, keeping the
    columns the engine's own filter still needs after the merge."""
    if pushed is not None:
        scan = scan.where(pushed)
    if columns is not None:
        needed = list(columns)
        needed += [c for c in filter_columns if c not in needed]
        scan = scan.select(*needed)
    return scan
