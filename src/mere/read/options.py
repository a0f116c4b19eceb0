"""What a read of one split is asked for: :class:`ReadOptions`, built by the scan and read by the split
reader (:mod:`mere.read.reader`) and the key lookup (:mod:`mere.read.lookup`)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from mere import expr as E

DEFAULT_WINDOW_BYTES = 8 * 1024 * 1024
DEFAULT_WHOLE_SPLIT_BYTES = 48 * 1024 * 1024  # splits up to this size merge in one window


@dataclass
class ReadOptions:
    columns: list[str]  # output columns, in order
    pre: E.Expr
    post: E.Expr
    lookup: bool  # the pre-merge filter pins a few keys: read key columns first
    window_bytes: int = DEFAULT_WINDOW_BYTES
    whole_split_bytes: int = DEFAULT_WHOLE_SPLIT_BYTES
    release_memory: bool = True  # streaming: return freed window memory to the OS now and then
    dictionary: tuple[
        str, ...
    ] = ()  # string columns read as dictionary where files hold them so (set per split)
    # 1: the split is read and merged on the calling thread alone (files one after another, decoded without
    # pyarrow's pool) where storage is local; any other value leaves reads concurrent.
    threads: int = 0
    keys: pa.Table | None = None  # key tuples to look up besides those the filter pins (a MERGE's source)
    # Compaction of a table with ``sequence_by``: files' rows also carry when their tombstones were
    # deleted (``_mere_deleted_at``, where a file stores it).
    tombstones: bool = False
