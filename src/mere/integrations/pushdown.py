"""What the engine adapters share to push an engine's filter into mere's pruning."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa


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
